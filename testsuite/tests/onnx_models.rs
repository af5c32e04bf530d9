//! Whole ONNX models checked against ONNX Runtime: a ResNet-18 (torchvision's
//! architecture), a BERT-style encoder block, and one small model per architecture
//! family people export (a rotary-embedding decoder block, an einsum attention, a
//! `Loop`-unrolled RNN, a TopK detection head), built with random weights by
//! `frontend-onnx/scripts/make_ort_models.py`, which also saves ONNX Runtime's output for
//! fixed inputs. Each model runs on kiln's reference interpreter (`ref`) and on every
//! backend of the `kiln` registry (the graph executor over `interp`, `cpu`, ...) and must
//! match ONNX Runtime within 1e-4 relative to the output's largest magnitude (absolute
//! 1e-4 for outputs below 1).
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

/// The largest difference allowed between kiln and ONNX Runtime, relative to the
/// output's largest magnitude (at least 1).
const ATOL: f64 = 1e-4;

/// The models the script writes.

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
    let model = kiln_frontend_onnx::decode_model(&bytes).unwrap_or_else(|e| panic!("{e}"));
    // The graph's inputs in order, read from `input_<j>.pb` (the script writes no
    // initializer as a graph input).
    let xs: Vec<(String, NDArray)> = model
        .graph
        .unwrap_or_default()
        .input
        .iter()
        .enumerate()
        .map(|(j, vi)| {
            let path = case.join(format!("test_data_set_0/input_{j}.pb"));
            (vi.name.clone().unwrap_or_default(), read_tensor(&path))
        })
        .collect();
    let want = read_tensor(&case.join("test_data_set_0/output_0.pb"));
    let atol = ATOL * want.to_f64_vec().iter().fold(1.0f64, |m, v| m.max(v.abs()));

    let start = Instant::now();
    let mut inputs: Inputs = params.clone();
    inputs.extend(xs.iter().cloned());
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
        ref_diff <= atol,
        "{name} on ref differs from onnxruntime by {ref_diff:e} (> {atol:e})"
    );
    // The registry's backends: the PTX interpreter (the suites' `cuda` without a GPU)
    // would take hours on a 224x224 ResNet; `tests/cuda.rs` checks CIFAR-sized models.
    let uses = kiln_testsuite::graphs::uses_of(&module);
    for backend in exec_backends_of(&Registry::builtin()) {
        let b = &backend.name;
        // What a backend declares unsupported is skipped and said, never passed.
        if let Some((op, dtype)) = backend.unsupported_in(&uses) {
            println!("{name}: SKIP on {b}: it declares {op} at {dtype} unsupported");
            continue;
        }
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
        let used: Vec<String> = exec.get_input_info().into_iter().map(|t| t.name).collect();
        for (input, x) in &xs {
            // The build may drop inputs the optimized graph no longer reads.
            if used.contains(input) {
                exec.set_input(input.as_str(), x)
                    .unwrap_or_else(|e| panic!("{name}: {e}"));
            }
        }
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
            diff <= atol,
            "{name} on {b} differs from onnxruntime by {diff:e} (> {atol:e})"
        );
    }
}

#[test]
fn resnet18_matches_onnxruntime() {
    if let Some(dir) = models_dir() {
        check_model(&dir, "resnet18");
    }
}

#[test]
fn bert_encoder_matches_onnxruntime() {
    if let Some(dir) = models_dir() {
        check_model(&dir, "bert_encoder");
    }
}

#[test]
fn rotary_decoder_matches_onnxruntime() {
    if let Some(dir) = models_dir() {
        check_model(&dir, "rotary_decoder");
    }
}

#[test]
fn einsum_attention_matches_onnxruntime() {
    if let Some(dir) = models_dir() {
        check_model(&dir, "einsum_attention");
    }
}

#[test]
fn loop_rnn_matches_onnxruntime() {
    if let Some(dir) = models_dir() {
        check_model(&dir, "loop_rnn");
    }
}

#[test]
fn detection_head_matches_onnxruntime() {
    if let Some(dir) = models_dir() {
        check_model(&dir, "detection_head");
    }
}
