//! Models whose weights are external data (files beside the model, as PyTorch's exporter
//! writes them): read from the model's folder with offsets and lengths, and refused —
//! with an error naming the tensor — when the location leaves the folder (absolute, `..`,
//! a link), the range runs past the file, or the model was given as bytes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use kiln_frontend_onnx::proto::{
    GraphProto, ModelProto, NodeProto, OperatorSetIdProto, StringStringEntryProto, TensorProto,
};
use kiln_frontend_onnx::{from_onnx, load_onnx, tensor_to_proto, tensor_value_info};
use kiln_ir::NDArray;
use kiln_ir::interp::{Inputs, evaluate};
use prost::Message;

/// A fresh folder for one test.
fn folder(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("kiln-external-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `y = x + w`, w (4 floats) stored externally at `location` with `offset`/`length`.
fn model(location: &str, offset: Option<u64>, length: Option<u64>) -> Vec<u8> {
    let w = NDArray::from_vec([4], vec![0.0f32; 4]).unwrap();
    let mut t: TensorProto = tensor_to_proto("w", &w);
    t.raw_data = None;
    t.float_data.clear();
    t.data_location = Some(1);
    let entry = |k: &str, v: String| StringStringEntryProto {
        key: Some(k.into()),
        value: Some(v),
    };
    t.external_data.push(entry("location", location.into()));
    if let Some(o) = offset {
        t.external_data.push(entry("offset", o.to_string()));
    }
    if let Some(l) = length {
        t.external_data.push(entry("length", l.to_string()));
    }
    ModelProto {
        ir_version: Some(8),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(17),
        }],
        graph: Some(GraphProto {
            node: vec![NodeProto {
                input: vec!["x".into(), "w".into()],
                output: vec!["y".into()],
                op_type: Some("Add".into()),
                ..Default::default()
            }],
            initializer: vec![t],
            input: vec![tensor_value_info("x", 1, &[4])],
            output: vec![tensor_value_info("y", 1, &[4])],
            ..Default::default()
        }),
        ..Default::default()
    }
    .encode_to_vec()
}

/// Writes `bytes` as `model.onnx` in `dir` and imports it from there.
fn import_from(dir: &Path, bytes: &[u8]) -> Result<Vec<f32>, String> {
    let path = dir.join("model.onnx");
    std::fs::write(&path, bytes).unwrap();
    let (m, params) = load_onnx(&path, &BTreeMap::new()).map_err(|e| e.to_string())?;
    let mut inputs: Inputs = params.into_iter().collect();
    inputs.insert("x".into(), NDArray::from_vec([4], vec![1.0f32; 4]).unwrap());
    let y = evaluate(&m, &inputs).unwrap().flatten();
    Ok(y[0].to_vec::<f32>().unwrap())
}

fn floats(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

#[test]
fn external_weights_are_read_beside_the_model() {
    let d = folder("read");
    // Eight bytes of something else, then the weights: offset and length select them.
    let mut data = vec![0xAB; 8];
    data.extend(floats(&[1.0, 2.0, 3.0, 4.0]));
    std::fs::create_dir_all(d.join("weights")).unwrap();
    std::fs::write(d.join("weights/model.data"), &data).unwrap();
    let y = import_from(&d, &model("weights/model.data", Some(8), Some(16))).unwrap();
    assert_eq!(y, vec![2.0, 3.0, 4.0, 5.0]);
    // Without a length, the rest of the file.
    let y = import_from(&d, &model("./weights/model.data", Some(8), None)).unwrap();
    assert_eq!(y, vec![2.0, 3.0, 4.0, 5.0]);
}

#[test]
fn external_data_outside_the_folder_or_the_file_is_refused() {
    let d = folder("refuse");
    let outside = folder("refuse-outside");
    std::fs::write(outside.join("secret.bin"), floats(&[9.0; 4])).unwrap();
    std::fs::write(d.join("short.bin"), floats(&[1.0; 2])).unwrap();
    std::os::unix::fs::symlink(outside.join("secret.bin"), d.join("link.bin")).unwrap();
    let abs = outside.join("secret.bin").display().to_string();
    let cases = [
        (
            model("../refuse-outside/secret.bin", None, None),
            "climbs out",
        ),
        (model(&abs, None, None), "is absolute"),
        (
            model("link.bin", None, None),
            "outside the folder through a link",
        ),
        (model("short.bin", Some(4), Some(16)), "run past the end"),
        (model("short.bin", Some(99), None), "past the end"),
        (
            model("short.bin", Some(0), Some(8)),
            "need 16 bytes of raw_data, got 8",
        ),
        (model("missing.bin", None, None), "missing.bin"),
    ];
    for (bytes, want) in cases {
        let e = import_from(&d, &bytes).unwrap_err();
        assert!(e.contains(want), "{e}\nwant: {want}");
    }
    // A model given as bytes has no folder to read from.
    let e = from_onnx(&model("short.bin", None, None), &BTreeMap::new())
        .unwrap_err()
        .to_string();
    assert!(e.contains("load the model from its file"), "{e}");
}
