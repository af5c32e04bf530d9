//! Import tests on models built with the proto structs: params and inputs, shape
//! overrides, constant folding, and the errors for unsupported ops, dynamic shapes and
//! bytes that are not an ONNX model (random, truncated) — errors, never panics.

use std::collections::BTreeMap;

use kiln_frontend_onnx::proto::{
    self, AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto,
    tensor_shape_proto::{Dimension, dimension::Value},
};
use kiln_frontend_onnx::{Error, from_onnx, tensor_to_proto, tensor_value_info, unsupported_nodes};
use kiln_ir::interp::{Inputs, evaluate};
use kiln_ir::{DType, NDArray};
use prost::Message;

fn node(op: &str, name: &str, inputs: &[&str], outputs: &[&str]) -> NodeProto {
    NodeProto {
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        name: Some(name.into()),
        op_type: Some(op.into()),
        ..Default::default()
    }
}

fn ints(name: &str, v: &[i64]) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(proto::AttributeType::Ints as i32),
        ints: v.to_vec(),
        ..Default::default()
    }
}

fn model(graph: GraphProto, opset: i64) -> Vec<u8> {
    ModelProto {
        ir_version: Some(8),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(opset),
        }],
        graph: Some(graph),
        ..Default::default()
    }
    .encode_to_vec()
}

/// x (1, 2, 4, 4) -> Conv(w, b, pads 1) -> Relu -> Shape-driven Reshape -> Gemm.
fn small_cnn() -> Vec<u8> {
    let w = NDArray::random([3, 2, 3, 3], DType::F32, 1);
    let b = NDArray::random([3], DType::F32, 2);
    let fc = NDArray::random([5, 48], DType::F32, 3);
    let mut conv = node("Conv", "conv1", &["x", "conv.weight", "conv.bias"], &["c"]);
    conv.attribute.push(ints("pads", &[1, 1, 1, 1]));
    let mut gemm = node("Gemm", "fc", &["flat", "fc.weight"], &["y"]);
    gemm.attribute.push(AttributeProto {
        name: Some("transB".into()),
        i: Some(1),
        r#type: Some(proto::AttributeType::Int as i32),
        ..Default::default()
    });
    let graph = GraphProto {
        node: vec![
            conv,
            node("Relu", "relu", &["c"], &["r"]),
            node("Shape", "shape", &["r"], &["s"]),
            node("Gather", "batch", &["s", "zero"], &["n"]),
            node("Unsqueeze", "unsq", &["n", "axes0"], &["n1"]),
            node("Concat", "cat", &["n1", "minus1"], &["target"]),
            node("Reshape", "flatten", &["r", "target"], &["flat"]),
            gemm,
        ],
        initializer: vec![
            tensor_to_proto("conv.weight", &w),
            tensor_to_proto("conv.bias", &b),
            tensor_to_proto("fc.weight", &fc),
            tensor_to_proto("zero", &NDArray::scalar(0i64)),
            tensor_to_proto("axes0", &NDArray::from_vec([1], vec![0i64]).unwrap()),
            tensor_to_proto("minus1", &NDArray::from_vec([1], vec![-1i64]).unwrap()),
        ],
        input: vec![tensor_value_info("x", 1, &[1, 2, 4, 4])],
        output: vec![tensor_value_info("y", 1, &[1, 5])],
        ..Default::default()
    };
    model(graph, 17)
}

#[test]
fn imports_params_and_folds_shape_arithmetic() {
    let (m, params) = from_onnx(&small_cnn(), &BTreeMap::new()).unwrap();
    let names: Vec<&str> = params.keys().map(String::as_str).collect();
    assert_eq!(names, ["conv.bias", "conv.weight", "fc.weight"]);
    let main = m.main().unwrap();
    assert_eq!(main.params.len(), 4);
    let mut inputs: Inputs = params.clone();
    inputs.insert("x".into(), NDArray::random([1, 2, 4, 4], DType::F32, 9));
    let out = evaluate(&m, &inputs).unwrap().flatten();
    assert_eq!(out[0].shape(), &[1, 5]);
}

#[test]
fn shape_overrides_and_dynamic_dims() {
    let mut g = GraphProto {
        node: vec![node("Relu", "r", &["x"], &["y"])],
        input: vec![tensor_value_info("x", 1, &[2, 3])],
        output: vec![tensor_value_info("y", 1, &[2, 3])],
        ..Default::default()
    };
    if let Some(proto::TypeProto {
        value: Some(proto::type_proto::Value::TensorType(t)),
        ..
    }) = &mut g.input[0].r#type
    {
        t.shape.as_mut().unwrap().dim[0] = Dimension {
            denotation: None,
            value: Some(Value::DimParam("batch".into())),
        };
    }
    let bytes = model(g, 13);
    let e = from_onnx(&bytes, &BTreeMap::new()).unwrap_err().to_string();
    assert!(e.contains("input `x` dim 0 is dynamic (`batch`)"), "{e}");
    let shapes = BTreeMap::from([("x".to_string(), vec![7, 3])]);
    let (m, _) = from_onnx(&bytes, &shapes).unwrap();
    let x = m.main().unwrap().params[0];
    assert_eq!(m.ty(x).to_string(), "Tensor[(7, 3), float32]");
    let bad = BTreeMap::from([("nope".to_string(), vec![1])]);
    assert!(from_onnx(&bytes, &bad).is_err());
}

#[test]
fn unsupported_ops_are_all_named() {
    let mut odd = node("FancyOp", "fancy", &["r"], &["f"]);
    odd.domain = Some("com.example".into());
    let g = GraphProto {
        node: vec![
            node("Relu", "relu", &["x"], &["r"]),
            node("Det", "det1", &["r"], &["m"]),
            odd,
        ],
        input: vec![tensor_value_info("x", 1, &[2])],
        output: vec![tensor_value_info("f", 1, &[2])],
        ..Default::default()
    };
    let bytes = model(g, 17);
    let all = unsupported_nodes(&bytes).unwrap();
    assert_eq!(all.len(), 2);
    let e = from_onnx(&bytes, &BTreeMap::new()).unwrap_err();
    assert!(matches!(e, Error::UnsupportedOps(ref v) if v.len() == 2));
    let e = e.to_string();
    assert!(
        e.contains("op `Det` (node #1 `det1`, domain ai.onnx, opset 17)"),
        "{e}"
    );
    assert!(
        e.contains("op `FancyOp` (node #2 `fancy`, domain com.example, opset 0)"),
        "{e}"
    );
}

/// A node the model gives no name is named by its index and op type, never as ``.
#[test]
fn unnamed_nodes_are_named_by_index_and_op_type() {
    let g = GraphProto {
        node: vec![
            node("Relu", "", &["x"], &["r"]),
            node("Add", "", &["r", "y"], &["s"]),
        ],
        input: vec![
            tensor_value_info("x", 1, &[2]),
            tensor_value_info("y", 1, &[3]),
        ],
        output: vec![tensor_value_info("s", 1, &[2])],
        ..Default::default()
    };
    let e = from_onnx(&model(g, 17), &BTreeMap::new())
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("node #1 (Add, opset 17): type error"), "{e}");
    assert!(!e.contains("``"), "{e}");

    let g = GraphProto {
        node: vec![node("Det", "", &["x"], &["m"])],
        input: vec![tensor_value_info("x", 1, &[2, 2])],
        output: vec![tensor_value_info("m", 1, &[])],
        ..Default::default()
    };
    let e = from_onnx(&model(g, 17), &BTreeMap::new())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("op `Det` (node #0, domain ai.onnx, opset 17)"),
        "{e}"
    );
}

#[test]
fn random_and_truncated_bytes_are_errors() {
    let good = small_cnn();
    for n in 0..good.len() {
        let _ = from_onnx(&good[..n], &BTreeMap::new());
        let _ = unsupported_nodes(&good[..n]);
    }
    assert!(from_onnx(&good[..good.len() / 2], &BTreeMap::new()).is_err());
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    for len in [0usize, 1, 7, 64, 1000, 5000] {
        for _ in 0..50 {
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    state as u8
                })
                .collect();
            assert!(from_onnx(&bytes, &BTreeMap::new()).is_err());
        }
    }
    let e = from_onnx(b"hello, not onnx", &BTreeMap::new())
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("not an ONNX model"), "{e}");
}

#[test]
fn a_shape_computed_from_a_graph_input_names_that_input() {
    // y = Reshape(x, s + 0): the shape is computed from graph input `s`.
    let g = GraphProto {
        node: vec![
            node("Add", "add", &["s", "zero"], &["shape"]),
            node("Reshape", "reshape", &["x", "shape"], &["y"]),
        ],
        input: vec![
            tensor_value_info("x", 1, &[2, 3]),
            tensor_value_info("s", 7, &[2]),
        ],
        output: vec![tensor_value_info("y", 1, &[3, 2])],
        initializer: vec![tensor_to_proto(
            "zero",
            &NDArray::from_vec([2], vec![0i64, 0]).unwrap(),
        )],
        ..Default::default()
    };
    let bytes = model(g, 13);
    let e = from_onnx(&bytes, &BTreeMap::new()).unwrap_err();
    assert!(
        matches!(e.root(), Error::NotConstant { input } if input == "s"),
        "{e}"
    );
    let bound = BTreeMap::from([(
        "s".to_string(),
        NDArray::from_vec([2], vec![3i64, 2]).unwrap(),
    )]);
    let (m, _) =
        kiln_frontend_onnx::from_onnx_with_constants(&bytes, &BTreeMap::new(), &bound).unwrap();
    let mut inputs = Inputs::new();
    inputs.insert("x".into(), NDArray::random([2, 3], DType::F32, 4));
    assert_eq!(evaluate(&m, &inputs).unwrap().flatten()[0].shape(), &[3, 2]);
}
