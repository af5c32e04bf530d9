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

/// A library's calls are timed on the device: a timing session around a sequence of
/// calls gives one positive time per call, with its kernel; outside a session nothing
/// is kept; a kernel dividing by a zero read from memory reports the division as the
/// call's error.
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
    let timing = lib.begin_timing();
    assert_eq!(timing, gpu.timestamp_ns().is_some());
    for _ in 0..3 {
        lib.call(0, &args).unwrap();
    }
    // A copy submits the calls queued so far; the session spans submissions.
    let mut got = vec![0u8; 256];
    lib.copy_to_host(&*out, &mut got).unwrap();
    assert_eq!(got, bytes(&[1; 64]), "floor_mod(-7, 2)");
    lib.call(0, &args).unwrap();
    let times = lib.end_timing().unwrap();
    if timing {
        let times = times.expect("a session was open");
        assert!(times.clock.contains("timestamp"), "{}", times.clock);
        assert_eq!(times.calls.len(), 4, "{times:?}");
        assert!(
            times.calls.iter().all(|&(k, s)| k == 0 && s > 0.0),
            "{times:?}"
        );
    }
    // Without a session nothing is timed.
    lib.call(0, &args).unwrap();
    lib.synchronize().unwrap();
    assert_eq!(lib.end_timing().unwrap(), None);
    lib.copy_to_device(&*b, &bytes(&[0; 64])).unwrap();
    lib.call(0, &args).unwrap();
    let e = lib.synchronize().unwrap_err().to_string();
    assert!(e.contains("division by zero"), "{e}");
}

/// A launch over more workgroups than one dispatch axis takes (lavapipe's
/// `maxComputeWorkGroupCount` is 65,535 on each axis): 70,000 × 3 blocks of 2 threads are
/// folded over the dispatch's x, y and z and give the loop-IR interpreter's values.
#[test]
fn a_grid_past_the_dispatch_limit_is_folded() {
    if vulkan().is_none() {
        return;
    }
    let gpu = kiln_backend_spirv::VulkanBackend::probe().unwrap();
    let f = kiln_te::tir::parse(
        "primfn @wide(%a: Buffer[(3, 140000), float32, global], out %c: Buffer[(3, 140000), float32, global]) {
  launch_thread blockIdx.y (%y, 0, 3) {
    launch_thread blockIdx.x (%x, 0, 70000) {
      launch_thread threadIdx.x (%t, 0, 2) {
        %c[%y, %x * 2 + %t] = %a[%y, %x * 2 + %t] * 2.0 + cast(float32, %y)
      }
    }
  }
}",
    )
    .unwrap();
    let program = compile_module(std::slice::from_ref(&f), &gpu.features).unwrap();
    let launch = &program[0].launches[0].launch;
    assert!(launch.folded(), "{launch:?}");
    assert!(
        launch
            .groups
            .iter()
            .zip(gpu.features.max_group_count)
            .all(|(&g, m)| g <= m),
        "{launch:?}"
    );
    let a = NDArray::random_uniform(vec![3, 140000], DType::F32, 3, -1.0, 1.0);
    let (got, want) = run_on_vulkan(&f, std::slice::from_ref(&a));
    assert_eq!(got, want);
}

/// `benchmark` and the debug executor's profile time `vulkan` kernels with the device's
/// timestamp queries: the clock says so, and every kernel call's time is positive.
#[test]
fn benchmark_and_profile_use_device_time() {
    use kiln::{BenchmarkOptions, Clock, DebugExecutor};
    let Some(r) = vulkan() else { return };
    let gpu = kiln_backend_spirv::VulkanBackend::probe().unwrap();
    if gpu.timestamp_ns().is_none() {
        println!("SKIP: the device's queue has no timestamps");
        return;
    }
    let (m, params) = kiln_ir::zoo::by_name("mlp").unwrap();
    let built = r.build(&m, "vulkan", &params, 3).expect("builds");
    let x = NDArray::random_uniform(vec![1, 1, 28, 28], DType::F32, 7, -1.0, 1.0);
    let mut ex = built.create_executor().unwrap();
    ex.set_input("data", &x).unwrap();
    let opts = BenchmarkOptions {
        repeat: 2,
        number: 2,
        ..BenchmarkOptions::default()
    };
    let b = ex.benchmark(&opts).unwrap();
    assert!(
        matches!(&b.clock, Clock::Device(how) if how.contains("timestamp")),
        "{b:?}"
    );
    assert_eq!(b.results.len(), 2);
    assert!(b.results.iter().all(|&s| s > 0.0), "{b:?}");
    // End to end includes the copies, which only the host clock sees.
    let e2e = ex
        .benchmark(&BenchmarkOptions {
            end_to_end: true,
            ..opts
        })
        .unwrap();
    assert_eq!(e2e.clock, Clock::Host);

    let mut dbg = DebugExecutor::new(&built.module).unwrap();
    dbg.set_input("data", &x).unwrap();
    let p = dbg.profile(3).unwrap();
    assert!(matches!(&p.clock, Clock::Device(_)), "{:?}", p.clock);
    let kernels = built
        .module
        .graph()
        .nodes
        .iter()
        .filter(|n| n.func_name().is_some());
    assert_eq!(p.rows.len(), kernels.count(), "one row per kernel call");
    assert!(p.rows.iter().all(|r| r.time_us > 0.0), "{p}");
}

/// int16, uint16 and uint32 (int16/uint16 held in int32, uint32 zero-extended in int64)
/// at their extremes: every binary op and casts to and from every other integer width
/// and float32 equal the reference exactly on every backend, vulkan included.
#[test]
fn narrow_and_unsigned_integers_at_their_extremes() {
    use kiln_ir::op::{Binary, BinaryKind, Cast};
    use kiln_testsuite::ops::{Arg, EXACT, check_all, one_op, tt};
    if vulkan().is_none() {
        return;
    }
    for (dtype, lo, hi) in [
        (DType::I16, i16::MIN as i64, i16::MAX as i64),
        (DType::U16, 0, u16::MAX as i64),
        (DType::U32, 0, u32::MAX as i64),
    ] {
        let a = [lo, hi, 0, 1, hi - 1, lo + 1, 7, hi / 2, 3, 2, hi, 5];
        let b = [1, 2, hi, 3, hi, 7, lo + 2, 2, hi, lo + 1, hi, 5];
        let n = a.len();
        let typed = |v: &[i64]| {
            NDArray::new(
                vec![n],
                kiln_ir::tensor::Data::from_i64(dtype, v.iter().copied()),
            )
            .unwrap()
        };
        let t2 = [Arg::T(tt(&[n], dtype)), Arg::T(tt(&[n], dtype))];
        for kind in BinaryKind::ALL {
            // Divisors without zero (integer division by zero is an error everywhere).
            let Ok((m, params)) = one_op(Binary::new(kind), &t2) else {
                continue;
            };
            let (x, y) = match kind {
                BinaryKind::Power => (typed(&[2; 12]), typed(&[3; 12])),
                _ => (typed(&a), typed(&b)),
            };
            check_all(&m, &params, &[x, y], EXACT)
                .unwrap_or_else(|e| panic!("{dtype} {}: {e}", kind.name()));
        }
        for to in [
            DType::I8,
            DType::U8,
            DType::I16,
            DType::U16,
            DType::I32,
            DType::U32,
            DType::I64,
            DType::F32,
        ] {
            let (m, params) = one_op(Cast::new(to), &[Arg::T(tt(&[n], dtype))]).unwrap();
            check_all(&m, &params, &[typed(&a)], EXACT)
                .unwrap_or_else(|e| panic!("cast {dtype} to {to}: {e}"));
            // And back, from values past the narrower range.
            let (m, params) = one_op(Cast::new(dtype), &[Arg::T(tt(&[n], to))]).unwrap();
            let wide = [
                i64::from(i32::MIN),
                -1,
                70_000,
                1 << 33,
                255,
                -129,
                0,
                1,
                2,
                3,
                4,
                5,
            ];
            let x = if to == DType::F32 {
                let f = [
                    -1.0e10f32,
                    -1.5,
                    70_000.7,
                    5.0e9,
                    255.0,
                    -129.0,
                    0.0,
                    1.0,
                    f32::NAN,
                    3.0,
                    65_535.5,
                    1e30,
                ];
                NDArray::from_vec([n], f.to_vec()).unwrap()
            } else {
                NDArray::new(
                    vec![n],
                    kiln_ir::tensor::Data::from_i64(to, wide.iter().copied()),
                )
                .unwrap()
            };
            check_all(&m, &params, &[x], EXACT)
                .unwrap_or_else(|e| panic!("cast {to} to {dtype}: {e}"));
        }
    }
}

/// uint64 (its bit pattern in int64, compared, divided and converted unsigned), float64
/// and bfloat16 (16-bit patterns, computed in float32) at their extremes: every binary
/// op the backend does not declare unsupported and casts to and from every other dtype
/// equal the reference on every backend, vulkan included — exactly, but for bfloat16
/// arithmetic (computed in float32 and rounded once, like the graph reference up to
/// the op suite's bfloat16 tolerance).
#[test]
fn wide_and_brain_floats_at_their_extremes() {
    use kiln_ir::op::{Binary, BinaryKind, Cast};
    use kiln_ir::tensor::Data;
    use kiln_testsuite::ops::{Arg, BF16_ROUNDING, EXACT, check_all, one_op, tt};
    if vulkan().is_none() {
        return;
    }
    const N: usize = 12;
    let top = u64::MAX as i64;
    let ints = |d: DType, v: [i64; N]| NDArray::new(vec![N], Data::from_i64(d, v)).unwrap();
    let floats = |d: DType, v: [f64; N]| NDArray::new(vec![N], Data::from_f64(d, v)).unwrap();
    let half = 1i64 << 63;
    let f_edges = [
        f64::NAN,
        -0.0,
        f64::INFINITY,
        f64::NEG_INFINITY,
        1.5,
        -2.25,
        1e300,
        1.00390625,
        1.01171875,
        -7.0,
        1.8e19,
        3.0,
    ];
    let f_others = [
        2.0, 0.0, 1.0, -3.5, 0.0625, 0.75, -1e300, 5.0, -0.5, 7.0, 2.5, 3.0,
    ];
    let operands = |d: DType| match d {
        DType::U64 => (
            ints(
                d,
                [
                    0,
                    top,
                    1,
                    half,
                    i64::MAX,
                    7,
                    3,
                    2,
                    top - 1,
                    5,
                    1 << 32,
                    12345,
                ],
            ),
            ints(d, [1, 2, top, 3, half, 7, half + 2, 2, top, 9, 1 << 32, 5]),
        ),
        _ => (floats(d, f_edges), floats(d, f_others)),
    };
    for dtype in [DType::U64, DType::F64, DType::BF16] {
        let tol = if dtype == DType::BF16 {
            BF16_ROUNDING
        } else {
            EXACT
        };
        let (a, b) = operands(dtype);
        let t2 = [Arg::T(tt(&[N], dtype)), Arg::T(tt(&[N], dtype))];
        for kind in BinaryKind::ALL {
            let Ok((m, params)) = one_op(Binary::new(kind), &t2) else {
                continue;
            };
            let (x, y) = match kind {
                BinaryKind::Power if dtype == DType::U64 => {
                    (ints(dtype, [2; N]), ints(dtype, [3; N]))
                }
                _ => (a.clone(), b.clone()),
            };
            check_all(&m, &params, &[x, y], tol)
                .unwrap_or_else(|e| panic!("{dtype} {}: {e}", kind.name()));
        }
        for to in DType::ALL {
            if to == dtype {
                continue;
            }
            let (m, params) = one_op(Cast::new(to), &[Arg::T(tt(&[N], dtype))]).unwrap();
            check_all(&m, &params, std::slice::from_ref(&a), EXACT)
                .unwrap_or_else(|e| panic!("cast {dtype} to {to}: {e}"));
            let (m, params) = one_op(Cast::new(dtype), &[Arg::T(tt(&[N], to))]).unwrap();
            let x = if to.is_float() {
                floats(to, f_edges)
            } else {
                let (lo, hi) = kiln_te::tir::semantics::int_range(to);
                ints(
                    to,
                    [
                        lo,
                        hi,
                        0,
                        1,
                        -1,
                        7,
                        lo + 1,
                        hi - 1,
                        255,
                        -129,
                        70_000,
                        1 << 33,
                    ],
                )
            };
            check_all(&m, &params, &[x], EXACT)
                .unwrap_or_else(|e| panic!("cast {to} to {dtype}: {e}"));
        }
    }
}

/// A 32-bit integer widened to 64 bits keeps its sign in a comparison: lavapipe got
/// `cast(int64, x) < 0` wrong for negative x when the cast was an `OpSConvert` (ONNX
/// BitwiseAnd/Or on int8 and int16 lost their sign bits).
#[test]
fn a_widened_negative_integer_compares_below_zero() {
    if vulkan().is_none() {
        return;
    }
    for d in ["int8", "int16", "int32"] {
        let f = kiln_te::tir::parse(&format!(
            "primfn @k(%a: Buffer[(4), {d}, global], out %c: Buffer[(4), int64, global]) {{
  launch_thread blockIdx.x (%x, 0, 2) {{
    launch_thread threadIdx.x (%t, 0, 2) {{
      %c[%x * 2 + %t] = select(cast(int64, %a[%x * 2 + %t]) < 0i64, 5i64, cast(int64, %a[%x * 2 + %t]))
    }}
  }}
}}"
        ))
        .unwrap();
        let dtype = f.buffer(f.params[0]).unwrap().dtype;
        let a = NDArray::new(
            vec![4],
            kiln_ir::tensor::Data::from_i64(dtype, [-91, 91, -1, -128]),
        )
        .unwrap();
        let (got, want) = run_on_vulkan(&f, std::slice::from_ref(&a));
        assert_eq!(got.to_i64_vec(), vec![5, 91, 5, 5], "{d}");
        assert_eq!(got, want, "{d}");
    }
}

/// Runs kernel `f` (one output, the last parameter) on the default Vulkan device with
/// `inputs`; returns its output and the loop-IR interpreter's. Its SPIR-V passes
/// `spirv-val` first.
fn run_on_vulkan(f: &PrimFunc, inputs: &[NDArray]) -> (NDArray, NDArray) {
    use kiln::KernelLibrary;
    use kiln_backend_spirv::vulkan::VulkanLibrary;
    validate(&f.name, std::slice::from_ref(f));
    let gpu = kiln_backend_spirv::VulkanBackend::probe().unwrap();
    let program = compile_module(std::slice::from_ref(f), &gpu.features).unwrap();
    let want = kiln_te::tir::interp::run_with_inputs(f, inputs).unwrap();
    let lib = VulkanLibrary::new(gpu.clone(), program).unwrap();
    let mut args = vec![];
    for a in inputs {
        let bytes = a.to_le_bytes();
        let d = lib.alloc(bytes.len()).unwrap();
        lib.copy_to_device(&*d, &bytes).unwrap();
        args.push(d);
    }
    let out = &want[0];
    let mut got = vec![0u8; out.to_le_bytes().len()];
    let dc = lib.alloc(got.len()).unwrap();
    args.push(dc.clone());
    lib.call(0, &args).unwrap();
    lib.synchronize().unwrap();
    lib.copy_to_host(&*dc, &mut got).unwrap();
    let got = NDArray::from_le_bytes(out.shape().to_vec(), out.dtype(), &got).unwrap();
    (got, want[0].clone())
}

/// float64 `exp` and `log` (kiln's own sequences: GLSL.std.450 has none for doubles)
/// are within 3 ulp of the platform's (`f64::exp`, `f64::ln`, the loop-IR interpreter's):
/// the sequences' own bound is 2 ulp, the platform's 1; `sigmoid` (4 ulp) and `tanh`
/// (6 ulp) within 6 and 8. Arguments: a sweep of each function's range with normal
/// results (`exp`: -708..709; `log`: 1e-300..1e300, and subnormal arguments), the
/// reduction boundaries, and the special values.
#[test]
fn float64_exp_log_sigmoid_tanh_are_within_a_few_ulp() {
    if vulkan().is_none() {
        return;
    }
    let ln2 = std::f64::consts::LN_2;
    let s2 = std::f64::consts::SQRT_2;
    let mut exp_args: Vec<f64> = (0..4000)
        .map(|i| -708.0 + 1417.0 * i as f64 / 3999.0)
        .collect();
    exp_args.extend((0..1000).map(|i| -1.0 + i as f64 / 500.0));
    exp_args.extend([
        0.0,
        -0.0,
        ln2 / 2.0,
        -ln2 / 2.0,
        1e-20,
        709.7,
        710.0,
        -745.0,
    ]);
    exp_args.extend([-800.0, f64::INFINITY, f64::NEG_INFINITY, f64::NAN]);
    let mut log_args: Vec<f64> = (0..4000)
        .map(|i| 10f64.powf(-300.0 + 600.0 * i as f64 / 3999.0))
        .collect();
    log_args.extend((0..1000).map(|i| 0.5 + i as f64 / 999.0));
    log_args.extend([1.0, s2, s2 / 2.0, 1.0 + 1e-15, 1.0 - 1e-16, f64::MAX]);
    log_args.extend([f64::MIN_POSITIVE, 5e-324, 1e-310, 0.0, -0.0, -1.0]);
    log_args.extend([f64::INFINITY, f64::NAN]);
    let mut sigmoid_args: Vec<f64> = (0..2000)
        .map(|i| 10f64.powf(-20.0 + 22.8 * i as f64 / 1999.0))
        .flat_map(|v| [v, -v])
        .collect();
    sigmoid_args.extend([0.0, -0.0, f64::INFINITY, f64::NEG_INFINITY, f64::NAN]);
    let mut tanh_args = sigmoid_args.clone();
    tanh_args.extend([22.0, 21.9, -22.1, 1e-300]);
    for (name, mut args, bound) in [
        ("exp", exp_args, 3.0),
        ("log", log_args, 3.0),
        ("sigmoid", sigmoid_args, 6.0),
        ("tanh", tanh_args, 8.0),
    ] {
        // Whole workgroups of 64.
        args.resize(args.len().next_multiple_of(64), 1.0);
        let n = args.len();
        let f = kiln_te::tir::parse(&format!(
            "primfn @k(%a: Buffer[({n}), float64, global], out %c: Buffer[({n}), float64, global]) {{
  launch_thread blockIdx.x (%b, 0, {}) {{
    launch_thread threadIdx.x (%t, 0, 64) {{ %c[%b * 64 + %t] = {name}(%a[%b * 64 + %t]) }}
  }}
}}",
            n / 64
        ))
        .unwrap();
        let a = NDArray::from_f64(vec![n], DType::F64, args.clone()).unwrap();
        let (got, want) = run_on_vulkan(&f, &[a]);
        let ulp = |w: f64| w.abs().max(f64::MIN_POSITIVE) * f64::EPSILON;
        for ((x, g), w) in args.iter().zip(got.to_f64_vec()).zip(want.to_f64_vec()) {
            let same = g == w || (g.is_nan() && w.is_nan());
            assert!(
                same || (g - w).abs() <= bound * ulp(w),
                "{name}({x:e}) = {g:e} on vulkan, {w:e} in the interpreter"
            );
        }
    }
}

/// float32 trigonometric functions (computed in float64 with kiln's sequences, rounded
/// once) are within 1 float32 ulp of the exact result
/// (the platform's `f64` function rounded to `f32`, itself within 0.5 ulp + 1 float64
/// ulp). The loop-IR interpreter's `f32` functions are not the yardstick here: Rust's
/// `f32::atanh` is 4% off at -0.99999994 (its `1 - x` rounds to 2). Arguments sweep
/// each domain logarithmically on both signs, with the special values.
#[test]
fn float32_trig_via_float64_is_within_one_ulp() {
    if vulkan().is_none() {
        return;
    }
    let sweep = |lo: f32, hi: f32| -> Vec<f32> {
        (0..2000)
            .map(|i| lo * (hi / lo).powf(i as f32 / 1999.0))
            .flat_map(|v| [v, -v])
            .collect()
    };
    let specials = [
        0.0,
        -0.0,
        1.0,
        -1.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
    ];
    let cases: [(&str, fn(f64) -> f64, Vec<f32>); 11] = [
        ("sinh", f64::sinh, sweep(1e-30, 89.0)),
        ("cosh", f64::cosh, sweep(1e-30, 89.0)),
        ("asinh", f64::asinh, sweep(1e-30, 3e38)),
        ("acosh", f64::acosh, sweep(1.0, 3e38)),
        ("atanh", f64::atanh, sweep(1e-30, 0.999_999_94)),
        ("atan", f64::atan, sweep(1e-30, 3e38)),
        ("asin", f64::asin, sweep(1e-30, 1.0)),
        ("acos", f64::acos, sweep(1e-30, 1.0)),
        ("sin", f64::sin, sweep(1e-30, 3e38)),
        ("cos", f64::cos, sweep(1e-30, 3e38)),
        ("tan", f64::tan, sweep(1e-30, 3e38)),
    ];
    for (name, exact, mut args) in cases {
        args.extend(specials);
        args.extend([0.5, 1.000_000_1, 1e-7, 0.999, 2.0]);
        // Near multiples of π/2, where the reduction is hardest (the large ones take
        // the Payne–Hanek path).
        args.extend([
            1.570_796_4,
            3.141_592_7,
            4.712_389,
            355.0,
            1e22,
            8.6e8,
            4.2e8,
            1e38,
        ]);
        args.resize(args.len().next_multiple_of(64), 1.0);
        let n = args.len();
        let f = kiln_te::tir::parse(&format!(
            "primfn @k(%a: Buffer[({n}), float32, global], out %c: Buffer[({n}), float32, global]) {{
  launch_thread blockIdx.x (%b, 0, {}) {{
    launch_thread threadIdx.x (%t, 0, 64) {{ %c[%b * 64 + %t] = {name}(%a[%b * 64 + %t]) }}
  }}
}}",
            n / 64
        ))
        .unwrap();
        let a = NDArray::from_vec([n], args.clone()).unwrap();
        let (got, _) = run_on_vulkan(&f, &[a]);
        let ulp = |w: f64| w.abs().max(f32::MIN_POSITIVE as f64) * f32::EPSILON as f64;
        for (x, g) in args.iter().zip(got.to_f64_vec()) {
            let w = exact(*x as f64) as f32 as f64;
            let same = g == w || (g.is_nan() && w.is_nan());
            assert!(
                same || (g - w).abs() <= ulp(w),
                "{name}({x:e}) = {g:e} on vulkan, {w:e} exactly"
            );
        }
    }
}

/// float64 `sinh`, `cosh` (within 4 ulp) and `asinh`, `acosh`, `atanh`, `atan`, `asin`,
/// `acos` (within 8 ulp) of the platform's `f64` functions plus its 1 ulp, over a
/// logarithmic sweep of each domain on both signs and the special values. (Rust's
/// `f64::acosh` is `ln(x + √(x−1)·√(x+1))`, 4e-9 off at `1 + ε` and infinite past
/// 9e307; the yardstick for it is `asinh(√((x−1)(x+1)))`, `ln x + ln 2` past 2^28.
/// Rust's `f64::atanh` loses `1 − x` for `x` near -1; it is taken on `|x|`.)
#[test]
fn float64_trig_is_within_a_few_ulp() {
    if vulkan().is_none() {
        return;
    }
    fn atanh(x: f64) -> f64 {
        x.abs().atanh().copysign(x)
    }
    fn acosh(x: f64) -> f64 {
        if x > 2f64.powi(28) {
            x.ln() + std::f64::consts::LN_2
        } else if x >= 1.0 {
            ((x - 1.0) * (x + 1.0)).sqrt().asinh()
        } else {
            f64::NAN
        }
    }
    let sweep = |lo: f64, hi: f64| -> Vec<f64> {
        (0..2000)
            .map(|i| lo * (hi / lo).powf(i as f64 / 1999.0))
            .flat_map(|v| [v, -v])
            .collect()
    };
    let specials = [
        0.0,
        -0.0,
        1.0,
        -1.0,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
    ];
    let cases: [(&str, fn(f64) -> f64, Vec<f64>, f64); 8] = [
        ("sinh", f64::sinh, sweep(1e-300, 709.0), 5.0),
        ("cosh", f64::cosh, sweep(1e-300, 709.0), 5.0),
        ("asinh", f64::asinh, sweep(1e-300, 1e308), 9.0),
        ("acosh", acosh, sweep(1.0, 1e308), 9.0),
        ("atanh", atanh, sweep(1e-300, 1.0 - f64::EPSILON / 2.0), 9.0),
        ("atan", f64::atan, sweep(1e-300, 1e308), 9.0),
        ("asin", f64::asin, sweep(1e-300, 1.0), 9.0),
        ("acos", f64::acos, sweep(1e-300, 1.0), 9.0),
    ];
    for (name, exact, mut args, bound) in cases {
        args.extend(specials);
        args.extend([
            0.5,
            1.0 + f64::EPSILON,
            1e-8,
            0.999_999_999,
            2.0,
            2.7e8,
            2.69e8,
        ]);
        args.resize(args.len().next_multiple_of(64), 1.0);
        let n = args.len();
        let f = kiln_te::tir::parse(&format!(
            "primfn @k(%a: Buffer[({n}), float64, global], out %c: Buffer[({n}), float64, global]) {{
  launch_thread blockIdx.x (%b, 0, {}) {{
    launch_thread threadIdx.x (%t, 0, 64) {{ %c[%b * 64 + %t] = {name}(%a[%b * 64 + %t]) }}
  }}
}}",
            n / 64
        ))
        .unwrap();
        let a = NDArray::from_f64(vec![n], DType::F64, args.clone()).unwrap();
        let (got, _) = run_on_vulkan(&f, &[a]);
        let ulp = |w: f64| w.abs().max(f64::MIN_POSITIVE) * f64::EPSILON;
        let mut worst = 0f64;
        for (x, g) in args.iter().zip(got.to_f64_vec()) {
            let w = exact(*x);
            let same = g == w || (g.is_nan() && w.is_nan());
            if !same {
                worst = worst.max((g - w).abs() / ulp(w));
            }
            assert!(
                same || (g - w).abs() <= bound * ulp(w),
                "{name}({x:e}) = {g:e} on vulkan, {w:e} on the platform"
            );
        }
        println!("{name}: worst {worst:.2} ulp");
    }
}
