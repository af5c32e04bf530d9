//! ONNX models made in the tests (no ONNX files checked in): nodes, a model around a
//! graph, a dynamic input, and a small MLP with its weights.

use kiln_frontend_onnx::proto::{
    GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorShapeProto, TypeProto,
    ValueInfoProto, tensor_shape_proto::Dimension, tensor_shape_proto::dimension::Value,
    type_proto,
};
use kiln_frontend_onnx::{tensor_to_proto, tensor_value_info};
use kiln_ir::{DType, NDArray};
use prost::Message;

pub fn node(op: &str, name: &str, inputs: &[&str], outputs: &[&str]) -> NodeProto {
    NodeProto {
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        name: Some(name.into()),
        op_type: Some(op.into()),
        ..Default::default()
    }
}

pub fn model(graph: GraphProto) -> Vec<u8> {
    ModelProto {
        ir_version: Some(8),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(17),
        }],
        graph: Some(graph),
        ..Default::default()
    }
    .encode_to_vec()
}

/// A float input whose first dimension is the symbol `N`.
pub fn dynamic_input(name: &str, rest: &[i64]) -> ValueInfoProto {
    let mut dim = vec![Dimension {
        denotation: None,
        value: Some(Value::DimParam("N".into())),
    }];
    dim.extend(rest.iter().map(|&d| Dimension {
        denotation: None,
        value: Some(Value::DimValue(d)),
    }));
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            denotation: None,
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(1),
                shape: Some(TensorShapeProto { dim }),
            })),
        }),
        ..Default::default()
    }
}

pub fn weight() -> NDArray {
    NDArray::random([4, 3], DType::F32, 7)
}

pub fn bias() -> NDArray {
    NDArray::from_vec([3], vec![0.5f32, -0.25, 0.0]).unwrap()
}

/// y = Relu(x @ w + b), x (N, 4) with N fixed to 2 or left symbolic.
pub fn mlp_onnx(dynamic: bool) -> Vec<u8> {
    let x = if dynamic {
        dynamic_input("x", &[4])
    } else {
        tensor_value_info("x", 1, &[2, 4])
    };
    model(GraphProto {
        node: vec![
            node("MatMul", "mm", &["x", "w"], &["h"]),
            node("Add", "add", &["h", "b"], &["z"]),
            node("Relu", "relu", &["z"], &["y"]),
        ],
        name: Some("mlp".into()),
        initializer: vec![
            tensor_to_proto("w", &weight()),
            tensor_to_proto("b", &bias()),
        ],
        input: vec![x],
        output: vec![tensor_value_info("y", 1, &[])],
        ..Default::default()
    })
}
