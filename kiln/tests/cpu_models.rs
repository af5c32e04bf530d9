//! Issue 5's model-level acceptance on `cpu`: the zoo MLP, ResNet-18 and ResNet-50
//! (batch 1; the ResNets at opt level 3, one kernel per fused group) equal the graph-IR
//! reference of the unoptimized model, and four threads with their own executors share one compiled
//! module. Compile time and one run's latency are printed (no timing assertions).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use kiln::{CompiledModule, GraphExecutor, Registry};
use kiln_ir::{DType, Module, NDArray};

fn build_cpu(m: &Module, params: &BTreeMap<String, NDArray>, opt_level: u8) -> CompiledModule {
    let built = Registry::builtin()
        .build(m, "cpu -threads=2", params, opt_level)
        .unwrap();
    let lib = built.module;
    // One kernel per fused group.
    let fuse = built.report.get("FuseOps").unwrap();
    let groups = fuse.details.iter().find(|(k, _)| k == "groups").unwrap();
    assert_eq!(groups.1, lib.kernels().len().to_string());
    lib
}

fn reference(m: &Module, params: &BTreeMap<String, NDArray>, data: &NDArray) -> Vec<NDArray> {
    let mut all = params.clone();
    all.insert("data".into(), data.clone());
    kiln_ir::interp::evaluate(m, &all).unwrap().flatten()
}

fn run_once(lib: &CompiledModule, data: &NDArray) -> Vec<NDArray> {
    let mut ex = lib.create_executor().unwrap();
    ex.set_input("data", data).unwrap();
    ex.run().unwrap();
    ex.outputs().unwrap()
}

fn compile_ms(lib: &CompiledModule) -> f64 {
    lib.build_log()
        .iter()
        .find(|(s, _)| s == "compile")
        .map_or(f64::NAN, |(_, ms)| *ms)
}

#[test]
fn mlp_on_cpu_equals_the_reference() {
    let (m, params) = kiln_ir::zoo::mlp(1, 10, [1, 28, 28], DType::F32, 0).unwrap();
    let data = NDArray::random_uniform(vec![1, 1, 28, 28], DType::F32, 7, -1.0, 1.0);
    let want = reference(&m, &params, &data);
    let lib = build_cpu(&m, &params, 2);
    let got = run_once(&lib, &data);
    assert_eq!(got.len(), 1);
    got[0].allclose(&want[0], 1e-5, 1e-5).unwrap();
}

#[test]
fn resnet50_on_cpu_equals_the_reference() {
    let (m, params) = kiln_ir::zoo::by_name("resnet50").unwrap();
    let data = NDArray::random_uniform(vec![1, 3, 224, 224], DType::F32, 13, -1.0, 1.0);
    let lib = build_cpu(&m, &params, 3);
    println!(
        "resnet50 cpu: compile step {:.0} ms, {} kernels",
        compile_ms(&lib),
        lib.kernels().len()
    );
    let got = run_once(&lib, &data);
    let want = reference(&m, &params, &data);
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(&want) {
        g.allclose(w, 1e-4, 0.0).unwrap();
    }
}

#[test]
fn resnet18_on_cpu_equals_the_reference() {
    let (m, params) = kiln_ir::zoo::by_name("resnet18").unwrap();
    let data = NDArray::random_uniform(vec![1, 3, 224, 224], DType::F32, 11, -1.0, 1.0);
    let t = Instant::now();
    let lib = build_cpu(&m, &params, 3);
    println!(
        "resnet18 cpu: build {:.0} ms, compile step {:.0} ms, {} kernels",
        t.elapsed().as_secs_f64() * 1e3,
        compile_ms(&lib),
        lib.kernels().len()
    );
    let mut ex = lib.create_executor().unwrap();
    ex.set_input("data", &data).unwrap();
    ex.run().unwrap();
    let t = Instant::now();
    ex.run().unwrap();
    println!(
        "resnet18 cpu: one run {:.1} ms",
        t.elapsed().as_secs_f64() * 1e3
    );
    let got = ex.outputs().unwrap();
    let want = reference(&m, &params, &data);
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(&want) {
        g.allclose(w, 1e-4, 0.0).unwrap();
    }
}

#[test]
fn four_threads_on_one_module_match_a_single_thread() {
    let (m, params) = kiln_ir::zoo::mlp(1, 10, [1, 8, 8], DType::F32, 0).unwrap();
    let lib = Arc::new(build_cpu(&m, &params, 2));
    let images: Vec<NDArray> = (0..4)
        .map(|i| NDArray::random_uniform(vec![1, 1, 8, 8], DType::F32, 100 + i, -1.0, 1.0))
        .collect();
    let single: Vec<Vec<NDArray>> = images.iter().map(|d| run_once(&lib, d)).collect();
    let handles: Vec<_> = images
        .iter()
        .cloned()
        .map(|d| {
            let lib = lib.clone();
            std::thread::spawn(move || {
                let mut ex = lib.create_executor().unwrap();
                let mut outs = vec![];
                for _ in 0..20 {
                    ex.set_input("data", &d).unwrap();
                    ex.run().unwrap();
                    outs.push(ex.outputs().unwrap());
                }
                outs
            })
        })
        .collect();
    for (h, want) in handles.into_iter().zip(&single) {
        for got in h.join().unwrap() {
            assert_eq!(&got, want);
        }
    }
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<CompiledModule>();
    assert_send_sync::<GraphExecutor>();
    assert_send_sync::<kiln_backend_cranelift::CraneliftLibrary>();
}
