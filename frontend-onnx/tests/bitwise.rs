//! ONNX's bitwise ops, built from integer arithmetic at import, against Rust's `&`, `|`,
//! `^` and `!` on the reference interpreter, for the extremes and a spread of values of
//! int64, uint64 and int8 (the widths whose top bit is handled apart or weighs
//! `-2^(w-1)`).

use std::collections::BTreeMap;

use kiln_frontend_onnx::proto::{self, GraphProto, ModelProto, NodeProto};
use kiln_frontend_onnx::{from_onnx, tensor_value_info};
use kiln_ir::NDArray;
use kiln_ir::interp::{Inputs, evaluate};
use kiln_ir::tensor::Element;
use prost::Message;

fn run<T: Element>(op: &str, code: i32, a: &[T], b: &[T]) -> NDArray {
    let n = a.len();
    let binary = op != "BitwiseNot";
    let inputs: Vec<&str> = if binary { vec!["a", "b"] } else { vec!["a"] };
    let model = ModelProto {
        ir_version: Some(8),
        opset_import: vec![proto::OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(18),
        }],
        graph: Some(GraphProto {
            node: vec![NodeProto {
                input: inputs.iter().map(|s| s.to_string()).collect(),
                output: vec!["y".into()],
                op_type: Some(op.into()),
                ..Default::default()
            }],
            input: inputs
                .iter()
                .map(|s| tensor_value_info(s, code, &[n]))
                .collect(),
            output: vec![tensor_value_info("y", code, &[n])],
            ..Default::default()
        }),
        ..Default::default()
    }
    .encode_to_vec();
    let (m, _) = from_onnx(&model, &BTreeMap::new()).unwrap();
    let mut x = Inputs::new();
    x.insert("a".into(), NDArray::from_vec([n], a.to_vec()).unwrap());
    if binary {
        x.insert("b".into(), NDArray::from_vec([n], b.to_vec()).unwrap());
    }
    evaluate(&m, &x).unwrap().flatten().remove(0)
}

/// Every pair of `values`, as two columns.
fn pairs<T: Copy>(values: &[T]) -> (Vec<T>, Vec<T>) {
    values
        .iter()
        .flat_map(|&a| values.iter().map(move |&b| (a, b)))
        .unzip()
}

macro_rules! check {
    ($t:ty, $code:expr, $values:expr) => {{
        let (a, b) = pairs::<$t>(&$values);
        let ops: [(&str, fn($t, $t) -> $t); 4] = [
            ("BitwiseAnd", |x, y| x & y),
            ("BitwiseOr", |x, y| x | y),
            ("BitwiseXor", |x, y| x ^ y),
            ("BitwiseNot", |x, _| !x),
        ];
        for (op, f) in ops {
            let got = run(op, $code, &a, &b).to_vec::<$t>().unwrap();
            let want: Vec<$t> = a.iter().zip(&b).map(|(&x, &y)| f(x, y)).collect();
            assert_eq!(got, want, "{op} on {}", stringify!($t));
        }
    }};
}

#[test]
fn int64_matches_rust() {
    check!(
        i64,
        7,
        [
            0,
            -1,
            1,
            i64::MIN,
            i64::MAX,
            -0x5555_5555_5555_5556,
            0x0123_4567_89AB_CDEF,
            -42
        ]
    );
}

#[test]
fn uint64_matches_rust() {
    check!(
        u64,
        13,
        [
            0,
            1,
            u64::MAX,
            1 << 63,
            (1 << 63) - 1,
            0xAAAA_AAAA_AAAA_AAAA,
            0x0123_4567_89AB_CDEF
        ]
    );
}

#[test]
fn int8_matches_rust() {
    check!(i8, 3, [0, -1, 1, i8::MIN, i8::MAX, 0x55, -0x56, 19]);
}
