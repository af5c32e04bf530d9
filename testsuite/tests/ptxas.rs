//! NVIDIA's assembler accepts kiln's PTX: every kernel of the zoo's ResNet-18, ResNet-50
//! and MLP (unfused and as `-O3` builds fuse them), of the BERT encoder block when
//! `KILN_ORT_MODELS` holds it, and of every case of the op sweep
//! (`kiln_testsuite::ptx_sim::op_cases`) is assembled by `ptxas` for `sm_80` and `sm_90`.
//! An assembler error fails the test naming the kernel and the PTX line.
//!
//! `ptxas` comes from `KILN_PTXAS` (`.ci/run` installs `nvidia-cuda-nvcc-cu12` from PyPI
//! and points it there). Without it the test prints `SKIP` and passes, except under
//! `CI=true`, where it fails.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use kiln_backend_cuda::compile_module;
use kiln_ir::{DType, Module};
use kiln_te::tir::PrimFunc;
use kiln_te::topi::{ScheduleKind, lower::kernels_of};
use kiln_testsuite::ptx_sim::op_cases::op_cases;

fn ptxas() -> Option<PathBuf> {
    match std::env::var_os("KILN_PTXAS") {
        Some(p) => Some(PathBuf::from(p)),
        None => {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "CI=true but KILN_PTXAS is not set (.ci/run installs ptxas)"
            );
            println!("SKIP ptxas tests: KILN_PTXAS is not set");
            None
        }
    }
}

/// The kernels of `m` under the GPU schedules, unfused and fused at `-O3`.
fn kernels(m: &Module, params: &kiln::Params) -> Vec<PrimFunc> {
    let mut ks = kernels_of(m, ScheduleKind::Gpu).expect("lowers");
    let opt = kiln::optimize(m, params, 3).expect("optimizes");
    ks.extend(kernels_of(&opt.module, ScheduleKind::Gpu).expect("lowers fused"));
    ks
}

/// Assembles `kernels` as one module for each architecture; an error names the kernel
/// (the `.entry` around the line) and the line.
fn assemble(ptxas: &PathBuf, what: &str, kernels: &[PrimFunc]) {
    for arch in [80, 90] {
        let p = compile_module(kernels, arch).unwrap_or_else(|e| panic!("{what}: {e}"));
        let dir = std::env::temp_dir().join(format!("kiln-ptxas-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join(format!("{}-sm{arch}.ptx", what.replace(' ', "_")));
        std::fs::write(&file, &p.text).unwrap();
        let out = Command::new(ptxas)
            .arg(format!("-arch=sm_{arch}"))
            .arg(&file)
            .arg("-o")
            .arg(dir.join("out.cubin"))
            .output()
            .unwrap_or_else(|e| panic!("running {}: {e}", ptxas.display()));
        if !out.status.success() {
            let lines: Vec<&str> = p.text.lines().collect();
            let err = String::from_utf8_lossy(&out.stderr);
            let mut report = vec![];
            for l in err.lines().take(10) {
                let n: Option<usize> = l
                    .split(", line ")
                    .nth(1)
                    .and_then(|r| r.split(';').next())
                    .and_then(|n| n.trim().parse().ok());
                let Some(n) = n else {
                    report.push(l.to_string());
                    continue;
                };
                let entry = lines[..n.min(lines.len())]
                    .iter()
                    .rev()
                    .find_map(|x| x.strip_prefix(".visible .entry "))
                    .unwrap_or("?");
                let text = lines.get(n.wrapping_sub(1)).copied().unwrap_or("");
                report.push(format!("kernel {entry} line {n} `{}`: {l}", text.trim()));
            }
            panic!("ptxas sm_{arch} rejects {what}:\n{}", report.join("\n"));
        }
    }
}

#[test]
fn zoo_models_assemble() {
    let Some(ptxas) = ptxas() else { return };
    for (name, (m, params)) in [
        ("resnet18", kiln_ir::zoo::by_name("resnet18").unwrap()),
        ("resnet50", kiln_ir::zoo::by_name("resnet50").unwrap()),
        ("mlp", kiln_ir::zoo::by_name("mlp").unwrap()),
        (
            "resnet18 cifar",
            kiln_ir::zoo::resnet(18, 1, [3, 32, 32], DType::F32, 0).unwrap(),
        ),
    ] {
        assemble(&ptxas, name, &kernels(&m, &params));
    }
}

#[test]
fn bert_block_assembles() {
    let Some(ptxas) = ptxas() else { return };
    let Some(dir) = std::env::var_os("KILN_ORT_MODELS") else {
        println!("SKIP the BERT block: KILN_ORT_MODELS is not set");
        return;
    };
    let path = PathBuf::from(dir).join("bert_encoder/model.onnx");
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let (m, params) = kiln_frontend_onnx::from_onnx(&bytes, &BTreeMap::new()).unwrap();
    assemble(&ptxas, "bert_encoder", &kernels(&m, &params));
}

#[test]
fn every_op_case_assembles() {
    let Some(ptxas) = ptxas() else { return };
    let mut all = vec![];
    for c in op_cases() {
        let ks =
            kernels_of(&c.module, ScheduleKind::Gpu).unwrap_or_else(|e| panic!("{}: {e}", c.name));
        all.extend(ks);
    }
    assert!(all.len() > 100, "{} kernels", all.len());
    assemble(&ptxas, "op cases", &all);
}
