//! End-to-end tests of the `kiln` binary on ONNX files: every command takes an `.onnx`
//! MODEL (or an ONNX model under another name), `--shape NAME=DIMS` fixes dynamic input
//! shapes, and unsupported ops, truncated files and bad `--shape` values are one-line
//! errors (all unsupported nodes at once), never panics.

use kiln_frontend_onnx::proto::GraphProto;
use kiln_frontend_onnx::tensor_value_info;
use kiln_ir::{DType, NDArray};

mod common;

use common::onnx_model::*;
use common::*;

fn tmp(name: &str) -> std::path::PathBuf {
    tmp_in("onnx-test", name)
}

/// relu(x @ w + b) computed here, for a (rows, 4) x.
fn expected(x: &NDArray) -> Vec<f32> {
    let (x, w, b) = (x.to_f64_vec(), weight().to_f64_vec(), bias().to_f64_vec());
    let rows = x.len() / 4;
    let mut y = vec![];
    for r in 0..rows {
        for c in 0..3 {
            let v: f64 = (0..4).map(|k| x[r * 4 + k] * w[k * 3 + c]).sum::<f64>() + b[c];
            y.push(v.max(0.0) as f32);
        }
    }
    y
}

fn assert_close(got: &NDArray, want: &[f32]) {
    let got = got.to_f64_vec();
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(want) {
        assert!((g - *w as f64).abs() < 1e-4, "{g} vs {w}");
    }
}

#[test]
fn every_command_takes_an_onnx_file() {
    let file = tmp("mlp.onnx");
    std::fs::write(&file, mlp_onnx(false)).unwrap();
    let x = NDArray::random([2, 4], DType::F32, 3);
    let xin = tmp("x.npy");
    x.write_npy(&xin).unwrap();
    let input = format!("x={}", s(&xin));

    let graph = kiln_ok(&["inspect", s(&file), "--types"]);
    assert!(graph.contains("def @main(%x"), "{graph}");
    assert!(graph.contains("float32"), "{graph}");
    let loops = kiln_ok(&["inspect", s(&file), "--emit", "loop"]);
    assert!(!loops.trim().is_empty());

    for target in ["ref", "interp", "cpu"] {
        let out = tmp(&format!("y_{target}.npy"));
        kiln_ok(&[
            "run",
            s(&file),
            "--target",
            target,
            "--input",
            &input,
            "--output",
            s(&out),
        ]);
        assert_close(&NDArray::read_npy(&out).unwrap(), &expected(&x));
    }

    let exported = tmp("mlp_cpu.kmod");
    let text = kiln_ok(&["compile", s(&file), "--target", "cpu", "-o", s(&exported)]);
    assert!(text.contains("kernels"), "{text}");
    let out = tmp("y_exported.npy");
    kiln_ok(&[
        "run",
        s(&exported),
        "--target",
        "cpu",
        "--input",
        &input,
        "--output",
        s(&out),
    ]);
    assert_close(&NDArray::read_npy(&out).unwrap(), &expected(&x));

    let json = kiln_ok(&[
        "bench",
        s(&file),
        "--target",
        "cpu",
        "--repeat",
        "2",
        "--number",
        "1",
        "--json",
    ]);
    assert!(json.contains("\"mean_ms\""), "{json}");
    let table = kiln_ok(&["profile", s(&file), "--target", "cpu", "--number", "1"]);
    assert!(table.contains("per-node times"), "{table}");
}

#[test]
fn shape_fixes_dynamic_inputs() {
    let file = tmp("mlp_dynamic.onnx");
    std::fs::write(&file, mlp_onnx(true)).unwrap();
    // Without --shape the symbolic dimension cannot be built.
    assert_clear_error(
        &kiln(&["run", s(&file), "--target", "cpu"]),
        &["`x`", "dynamic", "--shape"],
    );

    let x = NDArray::random([5, 4], DType::F32, 4);
    let xin = tmp("x5.npy");
    x.write_npy(&xin).unwrap();
    let input = format!("x={}", s(&xin));
    let out = tmp("y5.npy");
    for target in ["ref", "cpu"] {
        kiln_ok(&[
            "run",
            s(&file),
            "--shape",
            "x=5,4",
            "--target",
            target,
            "--input",
            &input,
            "--output",
            s(&out),
        ]);
        let y = NDArray::read_npy(&out).unwrap();
        assert_eq!(y.shape(), &[5, 3]);
        assert_close(&y, &expected(&x));
    }
    let graph = kiln_ok(&["inspect", s(&file), "--shape", "x=3,4", "--types"]);
    assert!(graph.contains("Tensor[(3, 3), float32]"), "{graph}");
    let exported = tmp("mlp_dynamic.kmod");
    kiln_ok(&[
        "compile",
        s(&file),
        "--shape",
        "x=7,4",
        "--target",
        "interp",
        "-o",
        s(&exported),
    ]);
    kiln_ok(&[
        "bench",
        s(&file),
        "--shape",
        "x=1,4",
        "--target",
        "interp",
        "--repeat",
        "1",
    ]);
    kiln_ok(&[
        "profile",
        s(&file),
        "--shape",
        "x=1,4",
        "--target",
        "interp",
        "--number",
        "1",
    ]);

    // Bad --shape values.
    for bad in ["x=a,4", "x", "=1,2", "x=1,,4"] {
        assert_clear_error(
            &kiln(&["run", s(&file), "--shape", bad, "--target", "ref"]),
            &["--shape"],
        );
    }
    assert_clear_error(
        &kiln(&[
            "run",
            s(&file),
            "--shape",
            "x=1,4",
            "--shape",
            "x=2,4",
            "--target",
            "ref",
        ]),
        &["more than once"],
    );
    assert_clear_error(
        &kiln(&["run", "zoo:mlp", "--shape", "x=1,4", "--target", "ref"]),
        &["--shape", "ONNX"],
    );
    assert_clear_error(
        &kiln(&[
            "run",
            s(&exported),
            "--shape",
            "x=1,4",
            "--target",
            "interp",
        ]),
        &["--shape", "exported"],
    );
}

#[test]
fn onnx_is_detected_without_the_extension() {
    let file = tmp("mlp_model.bin");
    std::fs::write(&file, mlp_onnx(false)).unwrap();
    let graph = kiln_ok(&["inspect", s(&file)]);
    assert!(graph.contains("def @main(%x"), "{graph}");
    let text = kiln_ok(&["run", s(&file), "--target", "cpu"]);
    assert!(text.contains("output 0"), "{text}");
}

#[test]
fn every_unsupported_node_is_listed_at_once() {
    let file = tmp("unsupported.onnx");
    let bytes = model(GraphProto {
        node: vec![
            node("ImageDecoder", "first_bad", &["x"], &["a"]),
            node("Relu", "fine", &["a"], &["r"]),
            node("FancyOp", "second_bad", &["r"], &["y"]),
        ],
        input: vec![tensor_value_info("x", 1, &[2, 3])],
        output: vec![tensor_value_info("y", 1, &[2, 3])],
        ..Default::default()
    });
    std::fs::write(&file, &bytes).unwrap();
    for args in [
        vec!["inspect", s(&file)],
        vec!["run", s(&file), "--target", "cpu"],
        vec!["compile", s(&file), "--target", "cpu", "-o", "/dev/null"],
        vec!["bench", s(&file), "--target", "interp"],
        vec!["profile", s(&file), "--target", "interp"],
    ] {
        assert_clear_error(
            &kiln(&args),
            &[
                "unsupported ONNX op",
                "`ImageDecoder`",
                "first_bad",
                "`FancyOp`",
                "second_bad",
                "opset 17",
                "ai.onnx",
            ],
        );
    }
    // The same without the extension: the text parse fails, the protobuf decodes.
    let other = tmp("unsupported.model");
    std::fs::write(&other, &bytes).unwrap();
    assert_clear_error(
        &kiln(&["inspect", s(&other)]),
        &["`ImageDecoder`", "`FancyOp`"],
    );
}

#[test]
fn truncated_and_foreign_files_are_clear_errors() {
    let bytes = mlp_onnx(false);
    let cut = tmp("cut.onnx");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    for args in [
        vec!["inspect", s(&cut)],
        vec!["run", s(&cut), "--target", "cpu"],
    ] {
        assert_clear_error(&kiln(&args), &["cut.onnx", "not an ONNX model"]);
    }
    // Cut short under another name: neither text IR nor ONNX nor an exported module.
    let cut_bin = tmp("cut.bin");
    std::fs::write(&cut_bin, &bytes[..bytes.len() / 2]).unwrap();
    assert_clear_error(&kiln(&["inspect", s(&cut_bin)]), &["cut.bin", "ONNX"]);
    // Text that is not ONNX under the `.onnx` extension.
    let text = tmp("text.onnx");
    std::fs::write(&text, "this is not a model\n").unwrap();
    assert_clear_error(&kiln(&["inspect", s(&text)]), &["text.onnx", "ONNX"]);
    // An empty file.
    let empty = tmp("empty.onnx");
    std::fs::write(&empty, b"").unwrap();
    assert_clear_error(&kiln(&["run", s(&empty), "--target", "ref"]), &["empty"]);
}

/// A type error inside an ONNX node is one line naming the node (by index and op type
/// when it has no name), with the cause said once.
#[test]
fn a_node_type_error_is_said_once() {
    let graph = GraphProto {
        node: vec![node("Add", "", &["x", "y"], &["s"])],
        input: vec![
            tensor_value_info("x", 1, &[2]),
            tensor_value_info("y", 1, &[3]),
        ],
        output: vec![tensor_value_info("s", 1, &[2])],
        ..Default::default()
    };
    let path = tmp("type_error.onnx");
    std::fs::write(&path, model(graph)).unwrap();
    let o = kiln(&["inspect", s(&path)]);
    assert_clear_error(&o, &["node #0 (Add", "shapes do not broadcast"]);
    let err = stderr(&o);
    assert_eq!(err.matches("do not broadcast").count(), 1, "{err}");
    assert!(!err.contains("``"), "{err}");
}
