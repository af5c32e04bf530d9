//! Whole ONNX models checked against ONNX Runtime: a ResNet-18 (torchvision's
//! architecture) and a BERT-style encoder block, built with random weights by
//! `frontend-onnx/scripts/make_ort_models.py`, which also saves ONNX Runtime's output for
//! a fixed input. Each model runs on kiln's reference interpreter (`ref`) and on every
//! backend of the `kiln` registry (the graph executor over `interp`, `cpu`, ...) and must
//! match ONNX Runtime within 1e-4 absolute.
//!
//! The models are generated, not checked in (ResNet-18's weights are ~45 MB): the test
//! reads the directory named by `KILN_ORT_MODELS` (`.ci/run` generates it). Without it
//! the test prints `SKIP` and returns, except under `CI=true`, where it must exist.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use kiln::GraphExecutor;
use kiln::Registry;
use kiln_frontend_onnx::{from_onnx, proto, tensor_from_proto};
use kiln_ir::NDArray;
use kiln_ir::interp::{Inputs, evaluate};
use kiln_testsuite::suite::exec_backends_of;
use prost::Message;

/// The largest absolute difference allowed between kiln and ONNX Runtime.
const ATOL: f64 = 1e-4;

/// The models the script writes.
const MODELS: &[&str] = &["resnet18", "bert_encoder"];

/// The directory of generated models, or `None` (after printing `SKIP`) when it is not
/// set outside CI.
fn models_dir() -> Option<PathBuf> {
    let Some(dir) = std::env::var_os("KILN_ORT_MODELS") else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true but KILN_ORT_MODELS is not set (.ci/run generates the models)"
        );
        println!("SKIP onnx model tests: KILN_ORT_MODELS is not set");
        return None;
    };
    let dir = PathBuf::from(dir);
    assert!(
        dir.is_dir(),
        "KILN_ORT_MODELS={} is not a directory",
        dir.display()
    );
    Some(dir)
}

fn read_tensor(path: &Path) -> NDArray {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let t = proto::TensorProto::decode(bytes.as_slice())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    tensor_from_proto(&t, &path.display().to_string())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The largest absolute difference between `got` and `want`, which must have the same
/// type.
fn max_abs_diff(got: &NDArray, want: &NDArray) -> f64 {
    assert_eq!(got.ty(), want.ty(), "output type");
    got.to_f64_vec()
        .iter()
        .zip(want.to_f64_vec())
        .map(|(g, w)| (g - w).abs())
        .fold(0.0, f64::max)
}

/// Runs one model on `ref` and on every registered backend and compares each with ONNX
/// Runtime's output.
fn check_model(dir: &Path, name: &str) {
    let case = dir.join(name);
    let bytes =
        std::fs::read(case.join("model.onnx")).unwrap_or_else(|e| panic!("{name}/model.onnx: {e}"));
    let start = Instant::now();
    let (module, params) =
        from_onnx(&bytes, &BTreeMap::new()).unwrap_or_else(|e| panic!("import {name}: {e}"));
    let import_s = start.elapsed().as_secs_f64();
    let x = read_tensor(&case.join("test_data_set_0/input_0.pb"));
    let want = read_tensor(&case.join("test_data_set_0/output_0.pb"));

    let start = Instant::now();
    let mut inputs: Inputs = params.clone();
    inputs.insert("input".to_string(), x.clone());
    let outs = evaluate(&module, &inputs)
        .unwrap_or_else(|e| panic!("{name} on ref: {e}"))
        .flatten();
    let ref_s = start.elapsed().as_secs_f64();
    assert_eq!(outs.len(), 1, "{name}: one output");
    let ref_diff = max_abs_diff(&outs[0], &want);

    println!(
        "{name}: max |kiln - onnxruntime| = {ref_diff:.2e} on ref (import {import_s:.2} s, ref {ref_s:.2} s)"
    );
    assert!(
        ref_diff <= ATOL,
        "{name} on ref differs from onnxruntime by {ref_diff:e} (> {ATOL:e})"
    );
    // The registry's backends: the PTX interpreter (the suites' `cuda` without a GPU)
    // would take hours on a 224x224 ResNet; `tests/cuda.rs` checks CIFAR-sized models.
    for backend in exec_backends_of(&Registry::builtin()) {
        let b = &backend.name;
        let start = Instant::now();
        let compiled = kiln::build_on(
            &module,
            &backend.target,
            Some(&*backend.backend),
            &params,
            3,
        )
        .unwrap_or_else(|e| panic!("build {name} for {b}: {e}"));
        let build_s = start.elapsed().as_secs_f64();
        let mut exec = GraphExecutor::new(&compiled).unwrap_or_else(|e| panic!("{name}: {e}"));
        exec.set_input("input", &x)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let start = Instant::now();
        exec.run().unwrap_or_else(|e| panic!("{name} on {b}: {e}"));
        let run_s = start.elapsed().as_secs_f64();
        let got = exec.get_output(0).unwrap_or_else(|e| panic!("{name}: {e}"));
        let diff = max_abs_diff(&got, &want);
        println!(
            "{name}: max |kiln - onnxruntime| = {diff:.2e} on {b} (build {build_s:.2} s, run \
             {run_s:.3} s)"
        );
        assert!(
            diff <= ATOL,
            "{name} on {b} differs from onnxruntime by {diff:e} (> {ATOL:e})"
        );
    }
}

#[test]
fn resnet18_matches_onnxruntime() {
    if let Some(dir) = models_dir() {
        check_model(&dir, MODELS[0]);
    }
}

#[test]
fn bert_encoder_matches_onnxruntime() {
    if let Some(dir) = models_dir() {
        check_model(&dir, MODELS[1]);
    }
}
