//! Kiln inside a host program, through the `kiln` crate alone: ResNet-18 from the model
//! zoo and a small ONNX MLP (its bytes made here, with a dynamic batch dimension fixed by
//! a shape override) are compiled by the JIT for `cpu`, run with the graph executor, and
//! checked against `ref` — the graph-IR reference interpreter running the unoptimized
//! model. Exits non-zero when an output differs by more than 1e-4.
//!
//! `cargo run -p kiln --example embed` (CI runs it).

use std::process::ExitCode;

use kiln::layers::frontend_onnx::proto::{
    GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorShapeProto, TypeProto,
    ValueInfoProto, tensor_shape_proto::Dimension, tensor_shape_proto::dimension::Value,
    type_proto,
};
use kiln::layers::frontend_onnx::{tensor_to_proto, tensor_value_info};
use kiln::{CompiledModule, DType, Model, NDArray, Shapes};
use prost::Message;

/// The largest absolute difference from `ref` accepted.
const ATOL: f64 = 1e-4;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// Runs `lib` once with `input` bound to `name`; every output.
fn run(lib: &CompiledModule, name: &str, input: &NDArray) -> Result<Vec<NDArray>> {
    let mut exec = lib.create_executor()?;
    exec.set_input(name, input)?;
    exec.run()?;
    Ok(exec.outputs()?)
}

/// Compiles `model` for `cpu` at opt level 3 and for `ref` at opt level 0, runs both on
/// `input` and returns the largest absolute difference of their outputs.
fn compare_with_ref(model: &Model, name: &str, input: &NDArray) -> Result<f64> {
    let cpu = kiln::build(&model.module, "cpu", &model.params, 3)?;
    let reference = kiln::build(&model.module, "ref", &model.params, 0)?;
    let (got, want) = (run(&cpu, name, input)?, run(&reference, name, input)?);
    if got.len() != want.len() {
        return Err(format!("{} outputs on cpu, {} on ref", got.len(), want.len()).into());
    }
    let mut worst = 0.0f64;
    for (g, w) in got.iter().zip(&want) {
        if g.ty() != w.ty() {
            return Err(format!("output {} on cpu, {} on ref", g.ty(), w.ty()).into());
        }
        for (a, b) in g.to_f64_vec().into_iter().zip(w.to_f64_vec()) {
            let d = (a - b).abs();
            worst = worst.max(if d.is_nan() { f64::INFINITY } else { d });
        }
    }
    Ok(worst)
}

/// An ONNX MLP: `Relu(x @ w1 + b1) @ w2 + b2`, x of shape (N, 16) with N symbolic.
fn mlp_onnx() -> Vec<u8> {
    let node = |op: &str, inputs: &[&str], output: &str| NodeProto {
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: vec![output.to_string()],
        name: Some(output.to_string()),
        op_type: Some(op.into()),
        ..Default::default()
    };
    let dim = |value| Dimension {
        denotation: None,
        value: Some(value),
    };
    let x = ValueInfoProto {
        name: Some("x".into()),
        r#type: Some(TypeProto {
            denotation: None,
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(1),
                shape: Some(TensorShapeProto {
                    dim: vec![dim(Value::DimParam("N".into())), dim(Value::DimValue(16))],
                }),
            })),
        }),
        ..Default::default()
    };
    let weight = |name: &str, shape: [usize; 2], seed| {
        let w = NDArray::random_uniform(shape.to_vec(), DType::F32, seed, -0.5, 0.5);
        tensor_to_proto(name, &w)
    };
    let bias = |name: &str, n: usize, seed| {
        tensor_to_proto(
            name,
            &NDArray::random_uniform(vec![n], DType::F32, seed, -0.1, 0.1),
        )
    };
    ModelProto {
        ir_version: Some(8),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(17),
        }],
        graph: Some(GraphProto {
            node: vec![
                node("MatMul", &["x", "w1"], "h1"),
                node("Add", &["h1", "b1"], "z1"),
                node("Relu", &["z1"], "a1"),
                node("MatMul", &["a1", "w2"], "h2"),
                node("Add", &["h2", "b2"], "y"),
            ],
            name: Some("mlp".into()),
            initializer: vec![
                weight("w1", [16, 32], 1),
                bias("b1", 32, 2),
                weight("w2", [32, 10], 3),
                bias("b2", 10, 4),
            ],
            input: vec![x],
            output: vec![tensor_value_info("y", 1, &[])],
            ..Default::default()
        }),
        ..Default::default()
    }
    .encode_to_vec()
}

fn main() -> ExitCode {
    let checks: [(&str, fn() -> Result<f64>); 2] = [
        ("zoo:resnet18", || {
            let model = kiln::load("zoo:resnet18", &Shapes::new())?;
            let data = NDArray::random_uniform(vec![1, 3, 224, 224], DType::F32, 7, -1.0, 1.0);
            compare_with_ref(&model, "data", &data)
        }),
        ("onnx mlp (batch 4)", || {
            let shapes = Shapes::from([("x".to_string(), vec![4, 16])]);
            let model = kiln::load_onnx(&mlp_onnx(), &shapes)?;
            let x = NDArray::random_uniform(vec![4, 16], DType::F32, 5, -1.0, 1.0);
            compare_with_ref(&model, "x", &x)
        }),
    ];
    let mut ok = true;
    for (name, check) in checks {
        match check() {
            Ok(diff) if diff <= ATOL => println!("{name}: cpu vs ref max |diff| = {diff:.3e} (ok)"),
            Ok(diff) => {
                println!("{name}: cpu vs ref max |diff| = {diff:.3e}, above {ATOL:e}");
                ok = false;
            }
            Err(e) => {
                println!("{name}: error: {e}");
                ok = false;
            }
        }
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
