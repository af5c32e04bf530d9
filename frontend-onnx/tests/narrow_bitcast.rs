//! The import-time bit conversions on the reference interpreter, on the values ONNX's
//! node tests do not reach: `BitCast` of float32/float64 special values (signed zeros,
//! subnormals, the extremes, infinities, NaN) against Rust's `to_bits`/`from_bits`, and
//! every code of every float8 and float4 format decoded and encoded back (`Cast` there
//! and back), with the ties between neighbouring codes rounding to the even one; a
//! non-converting op on a float8 value is refused by name.

use std::collections::BTreeMap;

use kiln_frontend_onnx::proto::{self, AttributeProto, GraphProto, ModelProto, NodeProto};
use kiln_frontend_onnx::{from_onnx, tensor_value_info};
use kiln_ir::NDArray;
use kiln_ir::interp::{Inputs, evaluate};
use prost::Message;

const FLOAT: i32 = 1;
const INT32: i32 = 6;
const INT64: i32 = 7;
const DOUBLE: i32 = 11;

fn int_attr(name: &str, v: i64) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(proto::AttributeType::Int as i32),
        i: Some(v),
        ..Default::default()
    }
}

/// A model `y = chain(x)`, each node `(op_type, attributes)` reading the previous value.
fn chain(x_type: i32, y_type: i32, n: usize, ops: &[(&str, Vec<AttributeProto>)]) -> Vec<u8> {
    let nodes = ops
        .iter()
        .enumerate()
        .map(|(i, (op, attrs))| NodeProto {
            input: vec![if i == 0 { "x".into() } else { format!("v{i}") }],
            output: vec![if i + 1 == ops.len() {
                "y".into()
            } else {
                format!("v{}", i + 1)
            }],
            op_type: Some(op.to_string()),
            attribute: attrs.clone(),
            ..Default::default()
        })
        .collect();
    ModelProto {
        ir_version: Some(10),
        opset_import: vec![proto::OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(26),
        }],
        graph: Some(GraphProto {
            node: nodes,
            input: vec![tensor_value_info("x", x_type, &[n])],
            output: vec![tensor_value_info("y", y_type, &[n])],
            ..Default::default()
        }),
        ..Default::default()
    }
    .encode_to_vec()
}

fn run(model: &[u8], x: NDArray) -> NDArray {
    let (m, params) = from_onnx(model, &BTreeMap::new()).unwrap();
    let mut inputs: Inputs = params;
    inputs.insert("x".into(), x);
    evaluate(&m, &inputs).unwrap().flatten().remove(0)
}

fn bitcast(to: i32) -> (&'static str, Vec<AttributeProto>) {
    ("BitCast", vec![int_attr("to", to as i64)])
}

fn cast(to: i32) -> (&'static str, Vec<AttributeProto>) {
    ("Cast", vec![int_attr("to", to as i64)])
}

#[test]
fn bitcast_float32_special_values_both_ways() {
    let xs = [
        0.0f32,
        -0.0,
        1.0,
        -2.5,
        f32::MIN_POSITIVE,
        f32::from_bits(1),
        -f32::from_bits(0x0007_FFFF),
        f32::MAX,
        -f32::MAX,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
    ];
    let n = xs.len();
    let bits = run(
        &chain(FLOAT, INT32, n, &[bitcast(INT32)]),
        NDArray::from_vec([n], xs.to_vec()).unwrap(),
    );
    let want: Vec<i32> = xs.iter().map(|x| x.to_bits() as i32).collect();
    assert_eq!(bits.to_vec::<i32>().unwrap(), want);
    let back = run(&chain(INT32, FLOAT, n, &[bitcast(FLOAT)]), bits);
    let got: Vec<u32> = back
        .to_vec::<f32>()
        .unwrap()
        .iter()
        .map(|x| x.to_bits())
        .collect();
    let want: Vec<u32> = xs.iter().map(|x| x.to_bits()).collect();
    assert_eq!(got, want);
}

#[test]
fn bitcast_float64_special_values_both_ways() {
    let xs = [
        0.0f64,
        -0.0,
        -1.0,
        3.75,
        f64::MIN_POSITIVE,
        f64::from_bits(1),
        f64::from_bits(0x000F_FFFF_FFFF_FFFF),
        f64::MAX,
        -f64::MAX,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
    ];
    let n = xs.len();
    let bits = run(
        &chain(DOUBLE, INT64, n, &[bitcast(INT64)]),
        NDArray::from_vec([n], xs.to_vec()).unwrap(),
    );
    let want: Vec<i64> = xs.iter().map(|x| x.to_bits() as i64).collect();
    assert_eq!(bits.to_vec::<i64>().unwrap(), want);
    let back = run(&chain(INT64, DOUBLE, n, &[bitcast(DOUBLE)]), bits);
    let got: Vec<u64> = back
        .to_vec::<f64>()
        .unwrap()
        .iter()
        .map(|x| x.to_bits())
        .collect();
    let want: Vec<u64> = xs.iter().map(|x| x.to_bits()).collect();
    assert_eq!(got, want);
}

/// Float formats: ONNX code, bits, and the canonical NaN code (if any).
const FORMATS: [(i32, u32, Option<u8>); 5] = [
    (17, 8, Some(0x7F)),
    (18, 8, Some(0x80)),
    (19, 8, None),
    (20, 8, Some(0x80)),
    (23, 4, None),
];

#[test]
fn every_narrow_float_code_survives_decode_and_encode() {
    for (code, bits, nan) in FORMATS {
        let n = 1usize << bits;
        let codes: Vec<u8> = (0..n).map(|c| c as u8).collect();
        let x = NDArray::from_vec([n], codes.clone()).unwrap();
        let values = run(&chain(code, FLOAT, n, &[cast(FLOAT)]), x.clone());
        let values = values.to_vec::<f32>().unwrap();
        // Without saturation, so that E5M2's infinities stay infinite.
        let exact = (
            "Cast",
            vec![int_attr("to", code as i64), int_attr("saturate", 0)],
        );
        let back = run(&chain(code, code, n, &[cast(FLOAT), exact]), x);
        let back = back.to_vec::<u8>().unwrap();
        for (c, (&v, &b)) in values.iter().zip(&back).enumerate() {
            if v.is_nan() {
                // Every NaN code encodes back to the format's positive NaN (E5M2: 0x7E).
                assert_eq!(Some(b), nan.or(Some(0x7E)), "format {code} NaN code {c:#x}");
            } else {
                assert_eq!(b as usize, c, "format {code} code {c:#x} (value {v})");
            }
        }
        // Halfway between neighbours k - 1 and k (same sign, both finite): the even code.
        let pairs: Vec<(usize, f32)> = (1..n / 2)
            .filter(|&k| values[k].is_finite() && values[k - 1].is_finite())
            .map(|k| (k, (values[k - 1] + values[k]) / 2.0))
            .collect();
        let mids = NDArray::from_vec([pairs.len()], pairs.iter().map(|p| p.1).collect()).unwrap();
        let got = run(&chain(FLOAT, code, pairs.len(), &[cast(code)]), mids);
        for (&(k, m), g) in pairs.iter().zip(got.to_vec::<u8>().unwrap()) {
            let even = if k % 2 == 0 { k } else { k - 1 };
            assert_eq!(
                g as usize,
                even,
                "format {code}: {m} between codes {} and {k}",
                k - 1
            );
        }
    }
}

#[test]
fn saturation_takes_infinity_to_the_largest_finite_code() {
    let x = NDArray::from_vec([2], vec![f32::INFINITY, f32::NEG_INFINITY]).unwrap();
    for (code, max) in [(17, 0x7E), (18, 0x7F), (19, 0x7B), (20, 0x7F), (23, 0x7)] {
        let sign = if code == 23 { 0x8 } else { 0x80 };
        let got = run(&chain(FLOAT, code, 2, &[cast(code)]), x.clone());
        assert_eq!(
            got.to_vec::<u8>().unwrap(),
            [max, max | sign],
            "format {code}"
        );
    }
}

#[test]
fn other_ops_on_float8_are_refused_by_name() {
    let e = from_onnx(&chain(17, 17, 4, &[("Relu", vec![])]), &BTreeMap::new())
        .unwrap_err()
        .to_string();
    assert!(e.contains("Relu on a FLOAT8E4M3FN value"), "{e}");
}
