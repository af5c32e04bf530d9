//! `If`, `Loop` and `Scan` whose course is known at import, unrolled: the taken branch
//! sees the enclosing graph's values, loop-carried values and scan outputs come out as
//! computed by hand, and control flow that depends on run-time data is `Unsupported`
//! with a message saying so.

use std::collections::BTreeMap;

use kiln_frontend_onnx::proto::{
    self, AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto,
};
use kiln_frontend_onnx::{from_onnx, tensor_to_proto, tensor_value_info};
use kiln_ir::interp::{Inputs, evaluate};
use kiln_ir::{DType, NDArray};
use prost::Message;

fn node(op: &str, inputs: &[&str], outputs: &[&str], attribute: Vec<AttributeProto>) -> NodeProto {
    NodeProto {
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        name: Some(format!("{op}_{}", outputs[0])),
        op_type: Some(op.into()),
        attribute,
        ..Default::default()
    }
}

fn graph_attr(name: &str, g: GraphProto) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(proto::AttributeType::Graph as i32),
        g: Some(Box::new(g)),
        ..Default::default()
    }
}

fn int_attr(name: &str, v: i64) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(proto::AttributeType::Int as i32),
        i: Some(v),
        ..Default::default()
    }
}

fn model(graph: GraphProto) -> Vec<u8> {
    ModelProto {
        ir_version: Some(8),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(13),
        }],
        graph: Some(graph),
        ..Default::default()
    }
    .encode_to_vec()
}

fn init(name: &str, t: NDArray) -> proto::TensorProto {
    tensor_to_proto(name, &t)
}

fn run(bytes: &[u8], inputs: &[(&str, NDArray)]) -> Vec<Vec<f64>> {
    let (m, params) = from_onnx(bytes, &BTreeMap::new()).unwrap();
    let mut env = Inputs::new();
    for (k, v) in inputs {
        env.insert(k.to_string(), v.clone());
    }
    for (k, v) in params {
        env.insert(k, v);
    }
    let out = evaluate(&m, &env).unwrap();
    out.flatten().iter().map(NDArray::to_f64_vec).collect()
}

/// `if c: y = a + a else: y = -a`, with `c` an initializer or a graph input.
fn if_model(cond_known: bool) -> Vec<u8> {
    let then_branch = GraphProto {
        node: vec![node("Add", &["a", "a"], &["t"], vec![])],
        output: vec![tensor_value_info("t", 1, &[3])],
        ..Default::default()
    };
    let else_branch = GraphProto {
        node: vec![node("Neg", &["a"], &["e"], vec![])],
        output: vec![tensor_value_info("e", 1, &[3])],
        ..Default::default()
    };
    let mut g = GraphProto {
        node: vec![node(
            "If",
            &["c"],
            &["y"],
            vec![
                graph_attr("then_branch", then_branch),
                graph_attr("else_branch", else_branch),
            ],
        )],
        input: vec![tensor_value_info("a", 1, &[3])],
        output: vec![tensor_value_info("y", 1, &[3])],
        ..Default::default()
    };
    if cond_known {
        g.initializer
            .push(init("c", NDArray::full(vec![], DType::Bool, 0.0)));
    } else {
        g.input.push(tensor_value_info("c", 9, &[]));
    }
    model(g)
}

#[test]
fn if_imports_the_branch_its_known_condition_takes() {
    let a = NDArray::from_vec([3], vec![1.0f32, -2.0, 3.5]).unwrap();
    assert_eq!(
        run(&if_model(true), &[("a", a)]),
        vec![vec![-1.0, 2.0, -3.5]]
    );
    let e = from_onnx(&if_model(false), &BTreeMap::new())
        .unwrap_err()
        .to_string();
    assert!(e.contains("run-time data") && e.contains("If"), "{e}");
}

/// `for i in 0..3: x = x + float(i); collect x`, from x = [1, 2].
fn loop_model(trip: Option<i64>) -> Vec<u8> {
    let body = GraphProto {
        node: vec![
            node("Cast", &["i"], &["fi"], vec![int_attr("to", 1)]),
            node("Add", &["x_in", "fi"], &["x_out"], vec![]),
            node("Identity", &["cond_in"], &["cond_out"], vec![]),
            node("Identity", &["x_out"], &["scan"], vec![]),
        ],
        input: vec![
            tensor_value_info("i", 7, &[]),
            tensor_value_info("cond_in", 9, &[]),
            tensor_value_info("x_in", 1, &[2]),
        ],
        output: vec![
            tensor_value_info("cond_out", 9, &[]),
            tensor_value_info("x_out", 1, &[2]),
            tensor_value_info("scan", 1, &[2]),
        ],
        ..Default::default()
    };
    let mut g = GraphProto {
        node: vec![node(
            "Loop",
            &["M", "", "x0"],
            &["x", "xs"],
            vec![graph_attr("body", body)],
        )],
        input: vec![tensor_value_info("x0", 1, &[2])],
        output: vec![
            tensor_value_info("x", 1, &[2]),
            tensor_value_info("xs", 1, &[3, 2]),
        ],
        ..Default::default()
    };
    match trip {
        Some(m) => g
            .initializer
            .push(init("M", NDArray::from_vec([], vec![m]).unwrap())),
        None => g.input.push(tensor_value_info("M", 7, &[])),
    }
    model(g)
}

#[test]
fn loop_with_a_known_trip_count_is_unrolled() {
    let x0 = NDArray::from_vec([2], vec![1.0f32, 2.0]).unwrap();
    let got = run(&loop_model(Some(3)), &[("x0", x0)]);
    assert_eq!(
        got,
        vec![vec![4.0, 5.0], vec![1.0, 2.0, 2.0, 3.0, 4.0, 5.0]]
    );
    let e = from_onnx(&loop_model(None), &BTreeMap::new())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("trip count") && e.contains("run-time data"),
        "{e}"
    );
    let e = from_onnx(&loop_model(Some(1 << 20)), &BTreeMap::new())
        .unwrap_err()
        .to_string();
    assert!(e.contains("4096"), "{e}");
}

#[test]
fn scan_runs_forward_and_backward_over_any_axis() {
    // state s: running sum of the rows of x (scanned along axis 1, backwards); the scan
    // output is the running sum after each step.
    let body = GraphProto {
        node: vec![
            node("Add", &["s_in", "row"], &["s_out"], vec![]),
            node("Identity", &["s_out"], &["each"], vec![]),
        ],
        input: vec![
            tensor_value_info("s_in", 1, &[2]),
            tensor_value_info("row", 1, &[2]),
        ],
        output: vec![
            tensor_value_info("s_out", 1, &[2]),
            tensor_value_info("each", 1, &[2]),
        ],
        ..Default::default()
    };
    let ints = |name: &str, v: &[i64]| AttributeProto {
        name: Some(name.into()),
        r#type: Some(proto::AttributeType::Ints as i32),
        ints: v.to_vec(),
        ..Default::default()
    };
    let g = GraphProto {
        node: vec![node(
            "Scan",
            &["s0", "x"],
            &["s", "sums"],
            vec![
                graph_attr("body", body),
                int_attr("num_scan_inputs", 1),
                ints("scan_input_axes", &[1]),
                ints("scan_input_directions", &[1]),
                ints("scan_output_axes", &[1]),
            ],
        )],
        input: vec![
            tensor_value_info("s0", 1, &[2]),
            tensor_value_info("x", 1, &[2, 3]),
        ],
        output: vec![
            tensor_value_info("s", 1, &[2]),
            tensor_value_info("sums", 1, &[2, 3]),
        ],
        ..Default::default()
    };
    let s0 = NDArray::from_vec([2], vec![0.0f32, 100.0]).unwrap();
    let x = NDArray::from_vec([2, 3], vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
    let got = run(&model(g), &[("s0", s0), ("x", x)]);
    // Columns taken last to first: [3, 6], [2, 5], [1, 4].
    assert_eq!(got[0], vec![6.0, 115.0]);
    assert_eq!(got[1], vec![3.0, 5.0, 6.0, 106.0, 111.0, 115.0]);
}
