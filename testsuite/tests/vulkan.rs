//! The `vulkan` backend on a real Vulkan device (in CI: Mesa's CPU driver lavapipe, with
//! the Khronos validation layer when `KILN_VULKAN_VALIDATION=1`): zoo models equal the
//! graph-IR reference within 1e-4, an exported module loads and runs, four threads with
//! their own executors over one compiled module agree with one thread, and every SPIR-V
//! module of the zoo's kernels (unfused and fused at `-O3`) and of the op sweep passes
//! `spirv-val --target-env vulkan1.2`.
//!
//! Without a Vulkan device (or without `spirv-val`) a test prints `SKIP` and passes,
//! except under `CI=true`, where it fails. The op suite and the random-graph suite run
//! `vulkan` through the registry (`tests/ops.rs`, `tests/graphs.rs`).

use std::sync::Arc;

use kiln::{Params, Registry};
use kiln_backend_spirv::{Features, compile_module, disasm};
use kiln_ir::{DType, Module, NDArray};
use kiln_te::tir::PrimFunc;
use kiln_te::topi::{ScheduleKind, lower::kernels_of};
use kiln_testsuite::ptx_sim::op_cases::op_cases;

fn in_ci() -> bool {
    std::env::var("CI").as_deref() == Ok("true")
}

/// The registry's `vulkan` backend, or `None` after a `SKIP` line (a failure in CI).
fn vulkan() -> Option<Registry> {
    let r = Registry::builtin();
    if r.backend(&kiln::TargetKind::Vulkan).is_some() {
        return Some(r);
    }
    let why = kiln_backend_spirv::VulkanBackend::probe()
        .err()
        .unwrap_or_default();
    assert!(!in_ci(), "CI=true but there is no Vulkan device: {why}");
    println!("SKIP vulkan tests: {why}");
    None
}

/// Builds `m` for `vulkan` and for `ref`, runs both on one seeded input and compares
/// within 1e-4 (absolute, relative to the output's magnitude).
fn model_matches_ref(m: &Module, params: &Params, input: Vec<usize>) {
    let Some(r) = vulkan() else { return };
    let x = NDArray::random_uniform(input, DType::F32, 7, -1.0, 1.0);
    let run = |target: &str| {
        let built = r.build(m, target, params, 3).expect("builds");
        let mut ex = built.create_executor().unwrap();
        ex.set_input("data", &x).unwrap();
        ex.run().unwrap_or_else(|e| panic!("{target} run: {e}"));
        ex.outputs().unwrap()
    };
    let t = std::time::Instant::now();
    let got = run("vulkan");
    eprintln!("vulkan build + run: {:.1} s", t.elapsed().as_secs_f64());
    let want = run("ref");
    kiln_testsuite::suite::compare(&got, &want, (1e-4, 1e-4)).unwrap();
}

#[test]
fn mlp_matches_ref() {
    let (m, params) = kiln_ir::zoo::by_name("mlp").unwrap();
    model_matches_ref(&m, &params, vec![1, 1, 28, 28]);
}

#[test]
fn resnet18_matches_ref() {
    let (m, params) = kiln_ir::zoo::by_name("resnet18").unwrap();
    model_matches_ref(&m, &params, vec![1, 3, 224, 224]);
}

#[test]
fn resnet50_matches_ref() {
    let (m, params) = kiln_ir::zoo::by_name("resnet50").unwrap();
    model_matches_ref(&m, &params, vec![1, 3, 224, 224]);
}

/// An exported `vulkan` module loads (its kernels compiled again) and gives the same
/// outputs; four threads, each with its own executor over the loaded module, agree
/// with one thread bit for bit.
#[test]
fn exported_module_loads_and_threads_agree() {
    let Some(r) = vulkan() else { return };
    let (m, params) = kiln_ir::zoo::resnet(8, 1, [3, 28, 28], DType::F32, 0).unwrap();
    let built = r.build(&m, "vulkan", &params, 3).expect("builds");
    let bytes = built.export_bytes().expect("exports");
    let loaded = Arc::new(r.load_module_bytes(&bytes).expect("loads"));
    let input =
        |seed: u64| NDArray::random_uniform(vec![1, 3, 28, 28], DType::F32, seed, -1.0, 1.0);
    let run_on = |module: &kiln::CompiledModule, seed: u64| {
        let mut ex = module.create_executor().unwrap();
        ex.set_input("data", &input(seed)).unwrap();
        ex.run().unwrap();
        ex.outputs().unwrap()
    };
    let want: Vec<_> = (0..4).map(|s| run_on(&built, s)).collect();
    assert_eq!(run_on(&loaded, 0), want[0], "the loaded module differs");
    let handles: Vec<_> = (0..4u64)
        .map(|s| {
            let module = loaded.clone();
            std::thread::spawn(move || {
                (0..3)
                    .map(|_| {
                        let mut ex = module.create_executor().unwrap();
                        ex.set_input("data", &input(s)).unwrap();
                        ex.run().unwrap();
                        ex.outputs().unwrap()
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    for (s, h) in handles.into_iter().enumerate() {
        for got in h.join().expect("thread") {
            assert_eq!(got, want[s], "thread {s} differs from one thread");
        }
    }
}

/// Validates every launch of `kernels`; `false` when `spirv-val` is missing (a failure
/// in CI).
fn validate(what: &str, kernels: &[PrimFunc]) -> bool {
    let compiled = compile_module(kernels, &Features::ANY)
        .unwrap_or_else(|e| panic!("{what}: SPIR-V codegen: {e}"));
    for k in &compiled {
        for (j, l) in k.launches.iter().enumerate() {
            match disasm::validate(&l.words).expect("runs spirv-val") {
                None => {
                    assert!(!in_ci(), "CI=true but spirv-val is not installed");
                    println!("SKIP spirv-val: not installed");
                    return false;
                }
                Some(Err(e)) => panic!(
                    "{what} @{} launch {j}: spirv-val: {e}\n{}",
                    k.name,
                    disasm::disassemble(&l.words)
                ),
                Some(Ok(())) => {}
            }
        }
    }
    true
}

#[test]
fn every_zoo_and_op_kernel_passes_spirv_val() {
    for name in ["mlp", "resnet18", "resnet50"] {
        let (m, params) = kiln_ir::zoo::by_name(name).unwrap();
        let mut ks = kernels_of(&m, ScheduleKind::Gpu).expect("lowers");
        let opt = kiln::optimize(&m, &params, 3).expect("optimizes");
        ks.extend(kernels_of(&opt.module, ScheduleKind::Gpu).expect("lowers fused"));
        if !validate(name, &ks) {
            return;
        }
    }
    for c in op_cases() {
        let ks = kernels_of(&c.module, ScheduleKind::Gpu)
            .unwrap_or_else(|e| panic!("{}: lowers: {e}", c.name));
        validate(&c.name, &ks);
    }
}

/// A library's calls are timed on the device: after a synchronized sequence of calls,
/// `last_times` has one positive time per call, named by its kernel; a kernel dividing
/// by a zero read from memory reports the division as the call's error.
#[test]
fn calls_are_timed_and_division_by_zero_is_reported() {
    use kiln::KernelLibrary;
    use kiln_backend_spirv::vulkan::VulkanLibrary;
    if vulkan().is_none() {
        return;
    }
    let gpu = kiln_backend_spirv::VulkanBackend::probe().unwrap();
    let (m, _) = kiln_testsuite::ops::one_op(
        kiln_ir::op::Binary::new(kiln_ir::op::BinaryKind::FloorMod),
        &[
            kiln_testsuite::ops::Arg::T(kiln_testsuite::ops::tt(&[64], DType::I32)),
            kiln_testsuite::ops::Arg::T(kiln_testsuite::ops::tt(&[64], DType::I32)),
        ],
    )
    .unwrap();
    let ks = kernels_of(&m, ScheduleKind::Gpu).unwrap();
    let lib = VulkanLibrary::new(gpu.clone(), compile_module(&ks, &gpu.features).unwrap()).unwrap();
    let bytes = |v: &[i32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let (a, b, out) = (
        lib.alloc(256).unwrap(),
        lib.alloc(256).unwrap(),
        lib.alloc(256).unwrap(),
    );
    lib.copy_to_device(&*a, &bytes(&[-7; 64])).unwrap();
    lib.copy_to_device(&*b, &bytes(&[2; 64])).unwrap();
    let args = [a.clone(), b.clone(), out.clone()];
    for _ in 0..3 {
        lib.call(0, &args).unwrap();
    }
    lib.synchronize().unwrap();
    let mut got = vec![0u8; 256];
    lib.copy_to_host(&*out, &mut got).unwrap();
    assert_eq!(got, bytes(&[1; 64]), "floor_mod(-7, 2)");
    if gpu.timestamp_ns().is_some() {
        let times = lib.last_times().expect("timed");
        assert_eq!(times.len(), 3, "{times:?}");
        assert!(
            times.iter().all(|(k, us)| k == &ks[0].name && *us > 0.0),
            "{times:?}"
        );
    }
    lib.copy_to_device(&*b, &bytes(&[0; 64])).unwrap();
    lib.call(0, &args).unwrap();
    let e = lib.synchronize().unwrap_err().to_string();
    assert!(e.contains("division by zero"), "{e}");
}
