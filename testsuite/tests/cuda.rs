//! The `cuda` backend without a GPU: its PTX runs in the PTX interpreter
//! (`kiln_testsuite::ptx_sim`) and must agree with the graph-IR reference — the
//! random-graph suite at opt levels 0–3, a sweep of the op suite's families, and two zoo
//! models (the CIFAR ResNet-8 and the MLP; ResNet-18 on 32×32 images on demand) within
//! 1e-4.

use kiln::{Params, Target, TargetKind};
use kiln_ir::{DType, NDArray};
use kiln_testsuite::graph_suite::graph_suite;
use kiln_testsuite::ops::{Backend, check_on};
use kiln_testsuite::ptx_sim::cuda_backend;
use kiln_testsuite::ptx_sim::op_cases::op_cases;
use kiln_testsuite::suite::ExecBackend;

fn cuda() -> ExecBackend {
    ExecBackend::new(cuda_backend())
}

/// Builds zoo model `m` for `cuda` (in the interpreter) and for `ref`, runs both on one
/// seeded input and compares within 1e-4 (absolute, relative to the output's magnitude).
fn model_matches_ref(m: kiln_ir::Module, params: Params, input: Vec<usize>) {
    model_input_matches_ref(m, params, "data", input)
}

/// [`model_matches_ref`] for an input called `name`.
fn model_input_matches_ref(m: kiln_ir::Module, params: Params, name: &str, input: Vec<usize>) {
    let x = NDArray::random_uniform(input, DType::F32, 7, -1.0, 1.0);
    let run = |target: &Target, backend: Option<&dyn kiln::Backend>| {
        let built = kiln::build_on(&m, target, backend, &params, 3).expect("builds");
        let mut ex = built.create_executor().unwrap();
        ex.set_input(name, &x).unwrap();
        ex.run().unwrap_or_else(|e| panic!("{} run: {e}", target));
        ex.outputs().unwrap()
    };
    let cuda = cuda_backend();
    let got = run(&Target::new(TargetKind::Cuda), Some(&*cuda));
    let want = run(&Target::new(TargetKind::Ref), None);
    kiln_testsuite::suite::compare(&got, &want, (1e-4, 1e-4)).unwrap();
}

/// The zoo's CIFAR ResNet (ResNet-8: the 6n+2 family the zoo builds for images up to
/// 28 pixels high).
#[test]
fn cifar_resnet8_matches_ref() {
    let (m, params) = kiln_ir::zoo::resnet(8, 1, [3, 28, 28], DType::F32, 0).unwrap();
    model_matches_ref(m, params, vec![1, 3, 28, 28]);
}

/// ResNet-18 (the ImageNet layout) on a 32×32 image: several minutes in the
/// interpreter, so run on demand (`cargo test -p kiln-testsuite --test cuda --
/// --ignored`).
#[test]
#[ignore = "minutes in the PTX interpreter"]
fn resnet18_on_32x32_matches_ref() {
    let (m, params) = kiln_ir::zoo::resnet(18, 1, [3, 32, 32], DType::F32, 0).unwrap();
    model_matches_ref(m, params, vec![1, 3, 32, 32]);
}

#[test]
fn mlp_matches_ref() {
    let (m, params) = kiln_ir::zoo::mlp(1, 10, [1, 28, 28], DType::F32, 0).unwrap();
    model_matches_ref(m, params, vec![1, 1, 28, 28]);
}

/// The BERT encoder block of `frontend-onnx/scripts/make_ort_models.py`, when
/// `KILN_ORT_MODELS` holds it (`.ci/run` generates it; required under `CI=true`).
#[test]
fn bert_block_matches_ref() {
    let Some(dir) = std::env::var_os("KILN_ORT_MODELS") else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true but KILN_ORT_MODELS is not set"
        );
        println!("SKIP the BERT block: KILN_ORT_MODELS is not set");
        return;
    };
    let path = std::path::PathBuf::from(dir).join("bert_encoder/model.onnx");
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let (m, params) =
        kiln_frontend_onnx::from_onnx(&bytes, &std::collections::BTreeMap::new()).unwrap();
    let main = m.main().unwrap();
    let x = main.params[0];
    let name = m.var_name(x).unwrap().to_string();
    let shape = m.ty(x).as_tensor().unwrap().shape.clone();
    model_input_matches_ref(m, params, &name, shape);
}

/// Random programs per opt level (moderate: the interpreter is slow in debug builds).
const CASES: u32 = 24;

fn graphs_at(opt: u8) {
    let run = graph_suite(&cuda(), opt, CASES, 6).unwrap_or_else(|e| panic!("{e}"));
    eprintln!(
        "cuda (ptx-sim) -O{opt}: {} passed, {} unsupported",
        run.passed, run.unsupported
    );
    assert!(run.passed > 0);
}

#[test]
fn random_graphs_o0() {
    graphs_at(0);
}

#[test]
fn random_graphs_o1() {
    graphs_at(1);
}

#[test]
fn random_graphs_o2() {
    graphs_at(2);
}

#[test]
fn random_graphs_o3() {
    graphs_at(3);
}

/// Every case of the op sweep (every op family of the op suite) agrees with the
/// reference within the op's tolerance.
#[test]
fn op_sweep_matches_ref() {
    let backends = [Backend::Exec(cuda())];
    let cases = op_cases();
    let failures: Vec<String> = cases
        .iter()
        .filter_map(|c| {
            check_on(&backends, &c.module, &c.params, &c.inputs, c.tol)
                .err()
                .map(|e| format!("{}: {e}", c.name))
        })
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} op cases fail on cuda:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}
