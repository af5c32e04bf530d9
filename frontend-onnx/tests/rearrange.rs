//! `CenterCropPad` with its target shape known at import (an initializer): crops centre
//! (rounding the start down) and pads with zeros (the odd pixel on the right), per axis
//! and on a subset of axes; a run-time shape is `Unsupported`.

use std::collections::BTreeMap;

use kiln_frontend_onnx::proto::{
    self, AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto,
};
use kiln_frontend_onnx::{from_onnx, tensor_to_proto, tensor_value_info};
use kiln_ir::NDArray;
use kiln_ir::interp::{Inputs, evaluate};
use prost::Message;

fn model(shape: &[usize], target: Option<&[i64]>, axes: Option<&[i64]>) -> Vec<u8> {
    let mut g = GraphProto {
        node: vec![NodeProto {
            input: vec!["x".into(), "s".into()],
            output: vec!["y".into()],
            name: Some("ccp".into()),
            op_type: Some("CenterCropPad".into()),
            attribute: axes
                .map(|a| AttributeProto {
                    name: Some("axes".into()),
                    r#type: Some(proto::AttributeType::Ints as i32),
                    ints: a.to_vec(),
                    ..Default::default()
                })
                .into_iter()
                .collect(),
            ..Default::default()
        }],
        input: vec![tensor_value_info("x", 1, shape)],
        output: vec![tensor_value_info("y", 1, &[])],
        ..Default::default()
    };
    g.output[0].r#type = None;
    match target {
        Some(t) => g.initializer.push(tensor_to_proto(
            "s",
            &NDArray::from_vec([t.len()], t.to_vec()).unwrap(),
        )),
        None => g.input.push(tensor_value_info("s", 7, &[2])),
    }
    ModelProto {
        ir_version: Some(8),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(18),
        }],
        graph: Some(g),
        ..Default::default()
    }
    .encode_to_vec()
}

fn run(bytes: &[u8], x: NDArray) -> (Vec<usize>, Vec<f64>) {
    let (m, params) = from_onnx(bytes, &BTreeMap::new()).unwrap();
    let mut env = Inputs::new();
    env.insert("x".into(), x);
    for (k, v) in params {
        env.insert(k, v);
    }
    let y = evaluate(&m, &env).unwrap().into_tensor("y").unwrap();
    (y.shape().to_vec(), y.to_f64_vec())
}

#[test]
fn crops_centre_and_pads_with_zeros() {
    // x = [[0..5], [5..10], [10..15]] (3, 5) -> (6, 2): rows padded 1 before, 2 after;
    // columns cropped from (5 - 2) / 2 = 1.
    let x = NDArray::from_vec([3, 5], (0..15).map(|v| v as f32).collect::<Vec<_>>()).unwrap();
    let (shape, y) = run(&model(&[3, 5], Some(&[6, 2]), None), x.clone());
    assert_eq!(shape, [6, 2]);
    assert_eq!(y, [0., 0., 1., 2., 6., 7., 11., 12., 0., 0., 0., 0.]);
    // Only axis -1, to 3: columns 1..4.
    let (shape, y) = run(&model(&[3, 5], Some(&[3]), Some(&[-1])), x);
    assert_eq!(shape, [3, 3]);
    assert_eq!(y, [1., 2., 3., 6., 7., 8., 11., 12., 13.]);
    let e = from_onnx(&model(&[3, 5], None, None), &BTreeMap::new())
        .unwrap_err()
        .to_string();
    assert!(e.contains("run time"), "{e}");
}
