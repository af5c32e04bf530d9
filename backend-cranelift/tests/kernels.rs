//! Single loop-IR kernels on the cpu backend against the loop-IR interpreter: libcall
//! intrinsics, lazy `select` guarding padded loads, integer semantics, casts between all
//! dtypes, float16, local buffers (stack and heap), unrolled and parallel loops, float
//! `max`/`min` on NaN and signed zeros (scalar and f32x4), and the errors that compiled
//! code reports instead of trapping.

use std::sync::Arc;

use kiln_backend_cranelift::CraneliftBackend;
use kiln_executor::{Backend, DeviceBuffer, Target};
use kiln_ir::{DType, NDArray};
use kiln_te::tir::{
    self, BinOp, Expr, ForKind, Intrinsic, PrimFunc, PrimFuncBuilder, Scope, Stmt, ValueType,
};

fn cpu(threads: usize) -> Target {
    // Without fused multiply-adds, f32x4 code is bit-identical to the interpreter.
    format!("cpu -threads={threads} -fma=0").parse().unwrap()
}

/// Runs `f` on the cpu backend with zero-filled outputs.
fn run_cpu(f: &PrimFunc, inputs: &[NDArray]) -> kiln_executor::error::Result<Vec<NDArray>> {
    run_on(&cpu(2), f, inputs)
}

/// Runs `f` on `target` with zero-filled outputs.
fn run_on(
    target: &Target,
    f: &PrimFunc,
    inputs: &[NDArray],
) -> kiln_executor::error::Result<Vec<NDArray>> {
    let lib = CraneliftBackend.compile(target, std::slice::from_ref(f))?;
    let mut bufs: Vec<Arc<dyn DeviceBuffer>> = vec![];
    for x in inputs {
        let bytes = x.to_le_bytes();
        let b = lib.alloc(bytes.len())?;
        lib.copy_to_device(&*b, &bytes)?;
        bufs.push(b);
    }
    let mut outs = vec![];
    for &o in f.outputs() {
        let b = f.buffer(o).unwrap();
        let n = b.numel().unwrap() * b.dtype.size_bytes();
        bufs.push(lib.alloc(n)?);
        outs.push((b.shape.clone(), b.dtype, n));
    }
    lib.call(0, &bufs)?;
    let mut res = vec![];
    for (k, (shape, dtype, n)) in outs.into_iter().enumerate() {
        let mut bytes = vec![0u8; n];
        lib.copy_to_host(&*bufs[inputs.len() + k], &mut bytes)?;
        res.push(NDArray::from_le_bytes(shape, dtype, &bytes)?);
    }
    Ok(res)
}

/// Checks the cpu backend against the loop-IR interpreter, bit for bit.
fn same_as_interp(f: &PrimFunc, inputs: &[NDArray]) {
    let want = tir::run_with_inputs(f, inputs).unwrap();
    let got = run_cpu(f, inputs).unwrap();
    assert_eq!(got, want, "{f}");
}

/// `out[i] = g(a[i])` over a 1-D buffer of `n` elements.
fn elementwise(n: usize, din: DType, dout: DType, g: impl Fn(Expr) -> Expr) -> PrimFunc {
    let mut b = PrimFuncBuilder::new("ew");
    let a = b.input("a", [n], din);
    let out = b.output("out", [n], dout);
    let i = b.loop_var("i");
    b.finish(Stmt::serial(
        i,
        0,
        n as i64,
        Stmt::store(out, [i.into()], g(Expr::load(a, [i.into()]))),
    ))
}

#[test]
fn libcall_intrinsics_run_and_match() {
    let x = NDArray::random_uniform(vec![64], DType::F32, 1, -3.0, 3.0);
    // erf is a polynomial approximation on the cpu: within 1 ulp of the interpreter's
    // (the bound `kiln_erff`'s test checks over the whole float range).
    let f = elementwise(64, DType::F32, DType::F32, |v| v.unary(Intrinsic::Erf));
    let want = tir::run_with_inputs(&f, std::slice::from_ref(&x)).unwrap()[0]
        .to_vec::<f32>()
        .unwrap();
    let got = run_cpu(&f, std::slice::from_ref(&x)).unwrap()[0]
        .to_vec::<f32>()
        .unwrap();
    for (g, w) in got.iter().zip(&want) {
        let ulps = (g.to_bits() as i64 - w.to_bits() as i64).abs();
        assert!(g.signum() == w.signum() && ulps <= 1, "erf: {g} vs {w}");
    }
    for intr in [
        Intrinsic::Tanh,
        Intrinsic::Exp,
        Intrinsic::Sigmoid,
        Intrinsic::Abs,
        Intrinsic::Floor,
        Intrinsic::Ceil,
    ] {
        same_as_interp(
            &elementwise(64, DType::F32, DType::F32, |v| v.unary(intr)),
            &[x.clone()],
        );
    }
    let pos = NDArray::random_uniform(vec![64], DType::F32, 2, 0.1, 4.0);
    for intr in [Intrinsic::Log, Intrinsic::Sqrt, Intrinsic::Rsqrt] {
        same_as_interp(
            &elementwise(64, DType::F32, DType::F32, |v| v.unary(intr)),
            &[pos.clone()],
        );
    }
    same_as_interp(
        &elementwise(64, DType::F32, DType::F32, |v| {
            Expr::call(Intrinsic::Pow, [v.clone(), Expr::f32(1.7)])
        }),
        &[pos.clone()],
    );
    same_as_interp(
        &elementwise(64, DType::F32, DType::F32, |v| {
            Expr::call(Intrinsic::Fma, [v.clone(), v.clone(), Expr::f32(0.25)])
        }),
        &[x],
    );
}

#[test]
fn casts_between_all_dtypes_match() {
    let all = [
        DType::F32,
        DType::F16,
        DType::I8,
        DType::U8,
        DType::I32,
        DType::I64,
        DType::Bool,
    ];
    for from in all {
        let x = if from.is_float() {
            NDArray::random_uniform(vec![40], from, 3, -300.0, 300.0)
        } else {
            NDArray::random(vec![40], from, 3)
        };
        for to in all {
            same_as_interp(&elementwise(40, from, to, |v| v.cast(to)), &[x.clone()]);
        }
    }
}

#[test]
fn integer_and_float16_arithmetic_match() {
    for d in [DType::I8, DType::U8, DType::I32, DType::I64] {
        let a = NDArray::random(vec![50], d, 5);
        let c = |v: i64| Expr::int_of(if d == DType::U8 { v as u8 as i64 } else { v }, d);
        for op in [BinOp::Add, BinOp::Sub, BinOp::Mul, BinOp::Min, BinOp::Max] {
            same_as_interp(
                &elementwise(50, d, d, |v| Expr::binary(op, v, c(7))),
                &[a.clone()],
            );
            same_as_interp(
                &elementwise(50, d, d, |v| Expr::binary(op, c(-3), v)),
                &[a.clone()],
            );
        }
        for op in [BinOp::Div, BinOp::FloorDiv, BinOp::FloorMod] {
            for k in [1, 2, 3, 4, 7, -1, -4] {
                same_as_interp(
                    &elementwise(50, d, d, |v| Expr::binary(op, v, c(k))),
                    &[a.clone()],
                );
            }
        }
        for op in [BinOp::Lt, BinOp::Ge, BinOp::Eq, BinOp::Ne] {
            same_as_interp(
                &elementwise(50, d, DType::Bool, |v| Expr::binary(op, v, c(2))),
                &[a.clone()],
            );
        }
    }
    let h = NDArray::random_uniform(vec![30], DType::F16, 9, -4.0, 4.0);
    same_as_interp(
        &elementwise(30, DType::F16, DType::F16, |v| {
            Expr::binary(BinOp::Mul, v.clone(), Expr::float(1.1, DType::F16))
                + v.unary(Intrinsic::Exp)
        }),
        &[h],
    );
}

/// `out[i] = a[i] / b[i]` in int32, with data-dependent divisors.
fn divide() -> PrimFunc {
    let mut b = PrimFuncBuilder::new("div");
    let x = b.input("x", [6], DType::I32);
    let y = b.input("y", [6], DType::I32);
    let out = b.output("out", [6], DType::I32);
    let i = b.loop_var("i");
    b.finish(Stmt::serial(
        i,
        0,
        6,
        Stmt::store(
            out,
            [i.into()],
            Expr::load(x, [i.into()]).floordiv(Expr::load(y, [i.into()])),
        ),
    ))
}

#[test]
fn division_by_zero_is_an_error_not_a_trap() {
    let f = divide();
    let x = NDArray::from_vec([6], vec![7i32, -7, i32::MIN, 5, -9, 0]).unwrap();
    let y = NDArray::from_vec([6], vec![2i32, 2, -1, -3, 4, 5]).unwrap();
    same_as_interp(&f, &[x.clone(), y]);
    let zero = NDArray::from_vec([6], vec![2i32, 2, 0, -3, 4, 5]).unwrap();
    let err = run_cpu(&f, &[x, zero]).unwrap_err().to_string();
    assert!(err.contains("division by zero"), "{err}");
}

#[test]
fn select_is_lazy_so_padded_loads_never_run_out_of_bounds() {
    // out[i] = i >= 2 && i < 10 ? a[i - 2] : -1, over a padded range (a has 8 elements).
    let mut b = PrimFuncBuilder::new("pad");
    let a = b.input("a", [8], DType::F32);
    let out = b.output("out", [12], DType::F32);
    let i = b.loop_var("i");
    let inside = Expr::from(i).ge(2).and(Expr::from(i).lt(10));
    let f = b.finish(Stmt::serial(
        i,
        0,
        12,
        Stmt::store(
            out,
            [i.into()],
            Expr::select(inside, Expr::load(a, [i - 2]), -1.0f32),
        ),
    ));
    same_as_interp(
        &f,
        &[NDArray::random_uniform(vec![8], DType::F32, 4, -1.0, 1.0)],
    );
}

/// `out[i, j] = sum_k a[i, k]` through a local accumulator of `acc` elements, the outer
/// loop of `kind`.
fn local_sum(n: usize, m: usize, acc: usize, kind: ForKind) -> PrimFunc {
    let mut b = PrimFuncBuilder::new("local");
    let a = b.input("a", [n, m], DType::F32);
    let out = b.output("out", [n], DType::F32);
    let t = b.alloc("t", [acc], DType::F32, Scope::Local);
    let i = b.loop_var("i");
    let k = b.loop_var("k");
    let last = acc as i32 - 1;
    let body = Stmt::Allocate {
        buffer: t,
        body: Box::new(Stmt::seq([
            Stmt::serial(
                k,
                0,
                m as i64,
                Stmt::store(
                    t,
                    [Expr::int(last)],
                    Expr::load(t, [Expr::int(last)]) + Expr::load(a, [i.into(), k.into()]),
                ),
            ),
            Stmt::store(out, [i.into()], Expr::load(t, [Expr::int(last)])),
        ])),
    };
    b.finish(Stmt::For {
        var: i,
        min: 0,
        extent: n as i64,
        kind,
        body: Box::new(body),
    })
}

#[test]
fn local_buffers_on_stack_and_heap_in_every_loop_kind() {
    let a = NDArray::random_uniform(vec![37, 5], DType::F32, 8, -1.0, 1.0);
    for kind in [
        ForKind::Serial,
        ForKind::Parallel,
        ForKind::Unrolled,
        ForKind::Vectorized,
    ] {
        for acc in [1, 100, 70_000] {
            same_as_interp(&local_sum(37, 5, acc, kind), &[a.clone()]);
        }
    }
}

#[test]
fn parallel_loops_capture_outer_variables_and_lets() {
    // for o in 0..3 { let s = o * 10 { parallel for i in 0..50 { out[o, i] = a[i] + s } } }
    let mut b = PrimFuncBuilder::new("cap");
    let a = b.input("a", [50], DType::I32);
    let out = b.output("out", [3, 50], DType::I32);
    let o = b.loop_var("o");
    let i = b.loop_var("i");
    let s = b.var("s", ValueType::I32);
    let inner = Stmt::For {
        var: i,
        min: 0,
        extent: 50,
        kind: ForKind::Parallel,
        body: Box::new(Stmt::store(
            out,
            [o.into(), i.into()],
            Expr::load(a, [i.into()]) + s,
        )),
    };
    let f = b.finish(Stmt::serial(o, 0, 3, Stmt::let_(s, o * 10, inner)));
    same_as_interp(&f, &[NDArray::random(vec![50], DType::I32, 2)]);
}

#[test]
fn vector_stores_are_legalized_and_the_rest_is_an_error() {
    // A vector store runs as a loop over its lanes (`tir::legalize`).
    let mut b = PrimFuncBuilder::new("vec");
    let a = b.input("a", [8], DType::F32);
    let out = b.output("out", [8], DType::F32);
    let f = b.finish(Stmt::store(
        out,
        [Expr::ramp(0, 1, 4)],
        Expr::load(a, [Expr::ramp(0, 1, 4)]),
    ));
    same_as_interp(&f, &[NDArray::random(vec![8], DType::F32, 3)]);
    // A vector `let` is outside the core loop IR.
    let g = kiln_te::tir::parse(
        "primfn @k(%a: Buffer[(4), float32, global], out %b: Buffer[(4), float32, global]) {
  let %v: float32x4 = %a[ramp(0, 1, 4)] { %b[ramp(0, 1, 4)] = %v }
}",
    )
    .unwrap();
    let err = CraneliftBackend
        .compile(&cpu(1), &[g])
        .unwrap_err()
        .to_string();
    assert!(err.contains("`let` of vector type"), "{err}");
    let err = CraneliftBackend
        .compile(&"interp".parse().unwrap(), &[])
        .map(|_| ())
        .unwrap_err()
        .to_string();
    assert!(err.contains("cpu") || err.contains("interp"), "{err}");
}

/// `out[i, l] = (a[i, l] + b[i, l]) * c[i] - select(0 <= l + s < n, a[i, l + s], 0)`
/// over a `vectorized` loop of extent `n`: unit-stride, invariant and guarded loads.
fn vector_kernel(n: usize, s: i32) -> PrimFunc {
    let mut b = PrimFuncBuilder::new("vec");
    let a = b.input("a", [3, n], DType::F32);
    let bb = b.input("b", [3, n], DType::F32);
    let c = b.input("c", [3], DType::F32);
    let out = b.output("out", [3, n], DType::F32);
    let i = b.loop_var("i");
    let l = b.loop_var("l");
    let shifted = Expr::from(l) + s;
    let inside = shifted.clone().ge(0).and(shifted.clone().lt(n as i32));
    let value = (Expr::load(a, [i.into(), l.into()]) + Expr::load(bb, [i.into(), l.into()]))
        * Expr::load(c, [i.into()])
        - Expr::select(inside, Expr::load(a, [i.into(), shifted]), 0.0f32);
    b.finish(Stmt::serial(
        i,
        0,
        3,
        Stmt::for_(
            l,
            0,
            n as i64,
            ForKind::Vectorized,
            Stmt::store(out, [i.into(), l.into()], value),
        ),
    ))
}

#[test]
fn vectorized_loops_match_bit_for_bit() {
    for n in [8usize, 12] {
        for s in [0, 3, -5] {
            let ins = [
                NDArray::random_uniform(vec![3, n], DType::F32, 1, -1.0, 1.0),
                NDArray::random_uniform(vec![3, n], DType::F32, 2, -1.0, 1.0),
                NDArray::random_uniform(vec![3], DType::F32, 3, -1.0, 1.0),
            ];
            same_as_interp(&vector_kernel(n, s), &ins);
        }
    }
}

/// `out[l, i] = a[i, l] * t[l, i] + relu(max(a[i, l], c[i]))` with `l` vectorized: a
/// gathered load (`t`, stride 3), a scattered store (`out`), lane-wise `max` and
/// `select`, and a multiply-add.
fn strided_kernel(n: usize) -> PrimFunc {
    let mut b = PrimFuncBuilder::new("strided");
    let a = b.input("a", [3, n], DType::F32);
    let t = b.input("t", [n, 3], DType::F32);
    let c = b.input("c", [3], DType::F32);
    let out = b.output("out", [n, 3], DType::F32);
    let i = b.loop_var("i");
    let l = b.loop_var("l");
    let x = Expr::load(a, [i.into(), l.into()]);
    let m = Expr::binary(BinOp::Max, x.clone(), Expr::load(c, [i.into()]));
    let relu = Expr::select(m.clone().lt(0.0f32), 0.0f32, m);
    let value = x * Expr::load(t, [l.into(), i.into()]) + relu;
    b.finish(Stmt::serial(
        i,
        0,
        3,
        Stmt::for_(
            l,
            0,
            n as i64,
            ForKind::Vectorized,
            Stmt::store(out, [l.into(), i.into()], value),
        ),
    ))
}

/// Gathers, scatters, lane-wise `max`/`select` run as f32x4: bit for bit equal to the
/// interpreter with `-fma=0`, within one rounding per multiply-add with fma (the
/// default, where the host has it).
#[test]
fn strided_vector_loops_match_with_and_without_fma() {
    let n = 16;
    let f = strided_kernel(n);
    let ins = [
        NDArray::random_uniform(vec![3, n], DType::F32, 1, -1.0, 1.0),
        NDArray::random_uniform(vec![n, 3], DType::F32, 2, -1.0, 1.0),
        NDArray::random_uniform(vec![3], DType::F32, 3, -1.0, 1.0),
    ];
    let before = kiln_backend_cranelift::simd_stats();
    same_as_interp(&f, &ins);
    let after = kiln_backend_cranelift::simd_stats();
    assert!(
        after[0] - before[0] >= 1,
        "not vectorized: {before:?} -> {after:?}"
    );
    let want = tir::run_with_inputs(&f, &ins).unwrap();
    let got = run_on(&"cpu -threads=2".parse().unwrap(), &f, &ins).unwrap();
    let (w, g) = (
        want[0].to_vec::<f32>().unwrap(),
        got[0].to_vec::<f32>().unwrap(),
    );
    for (k, (x, y)) in w.iter().zip(&g).enumerate() {
        assert!((x - y).abs() <= 1e-6, "element {k}: {y} vs {x}");
    }
}

/// `mx[l] = max(a[l], b[l])`, `mn[l] = min(a[l], b[l])` over `n` elements, the loop
/// of `kind`.
fn max_min_kernel(n: usize, kind: ForKind) -> PrimFunc {
    let mut b = PrimFuncBuilder::new("maxmin");
    let a = b.input("a", [n], DType::F32);
    let bb = b.input("b", [n], DType::F32);
    let mx = b.output("mx", [n], DType::F32);
    let mn = b.output("mn", [n], DType::F32);
    let l = b.loop_var("l");
    let (x, y) = (Expr::load(a, [l.into()]), Expr::load(bb, [l.into()]));
    b.finish(Stmt::for_(
        l,
        0,
        n as i64,
        kind,
        Stmt::Seq(vec![
            Stmt::store(
                mx,
                [l.into()],
                Expr::binary(BinOp::Max, x.clone(), y.clone()),
            ),
            Stmt::store(mn, [l.into()], Expr::binary(BinOp::Min, x, y)),
        ]),
    ))
}

/// Float `max`/`min` meet the loop IR's contract (IEEE 754-2019 maximum/minimum: NaN
/// propagates, `-0 < +0`) in scalar code and as f32x4 lanes, on every pair of edge
/// values, and agree with the interpreter.
#[test]
fn float_max_and_min_propagate_nan_and_order_zeros_scalar_and_vector() {
    use kiln_te::tir::expr::{fmaximum, fminimum};
    let edges = [
        f32::NAN,
        -0.0,
        0.0,
        f32::NEG_INFINITY,
        f32::INFINITY,
        -1.5,
        2.0,
    ];
    let mut pairs: Vec<(f32, f32)> = edges
        .iter()
        .flat_map(|&x| edges.iter().map(move |&y| (x, y)))
        .collect();
    pairs.extend([(1.0, -0.0), (-0.0, -0.0), (0.0, 0.0)]); // 52: whole f32x4 groups
    let n = pairs.len();
    let a = NDArray::from_vec([n], pairs.iter().map(|p| p.0).collect()).unwrap();
    let b = NDArray::from_vec([n], pairs.iter().map(|p| p.1).collect()).unwrap();
    let ins = [a, b];
    let same =
        |got: f32, want: f32| (got.is_nan() && want.is_nan()) || got.to_bits() == want.to_bits();
    let interp = tir::run_with_inputs(&max_min_kernel(n, ForKind::Serial), &ins).unwrap();
    for kind in [ForKind::Serial, ForKind::Vectorized] {
        let f = max_min_kernel(n, kind);
        let before = kiln_backend_cranelift::simd_stats();
        let out = run_cpu(&f, &ins).unwrap();
        let after = kiln_backend_cranelift::simd_stats();
        if kind == ForKind::Vectorized {
            assert!(
                after[0] > before[0],
                "not vectorized: {before:?} -> {after:?}"
            );
        }
        for (o, (op, want)) in [
            (0, (fmaximum as fn(f32, f32) -> f32, "max")),
            (1, (fminimum, "min")),
        ] {
            let (got, via) = (
                out[o].to_vec::<f32>().unwrap(),
                interp[o].to_vec::<f32>().unwrap(),
            );
            for (k, &(x, y)) in pairs.iter().enumerate() {
                let w = op(x, y);
                assert!(
                    same(got[k], w),
                    "{kind:?} {want}({x:?}, {y:?}) = {:?}, want {w:?}",
                    got[k]
                );
                assert!(
                    same(via[k], w),
                    "interpreter {want}({x:?}, {y:?}) = {:?}",
                    via[k]
                );
            }
        }
    }
}

/// Padded grouped conv2d kernels with the cpu schedule (register-tiled, `vectorized`
/// over four output channels of a promoted accumulator, the padded input read
/// splatted): 3x3 stride 1, 3x3 stride 2 down to width 7, 1x1 stride 2 down to width 7
/// and 7x7 stride 2, two groups each. Their hot loops run as f32x4, bit for bit equal to
/// the interpreter. (A group-1 or depthwise conv is a conv2d / depthwise_conv2d / gemm
/// micro-kernel call instead, tested with the micro-kernels and the op suite.)
#[test]
fn register_tiled_conv2d_hot_loops_are_vectorized_and_bit_identical() {
    use kiln_te::topi::{ScheduleKind, kernels_of};
    for (x, w, stride, pad) in [
        (vec![1, 8, 16, 16], vec![8, 4, 3, 3], 1, 1),
        (vec![1, 8, 14, 14], vec![8, 4, 3, 3], 2, 1),
        (vec![1, 4, 13, 13], vec![8, 2, 1, 1], 2, 0),
        (vec![1, 4, 15, 15], vec![8, 2, 7, 7], 2, 3),
    ] {
        let op = kiln_ir::op::Conv2d {
            strides: [stride, stride],
            padding: [pad; 4],
            dilation: [1, 1],
            groups: 2,
            channels: None,
            kernel_size: None,
        };
        let types = [
            kiln_ir::Type::tensor(x.clone(), DType::F32),
            kiln_ir::Type::tensor(w.clone(), DType::F32),
        ];
        let m = kiln_ir::Module::single_op(op, &types).unwrap();
        let ks = kernels_of(&m, ScheduleKind::Cpu).unwrap();
        let f = ks.iter().find(|k| k.name.contains("conv2d")).unwrap();
        let inputs = [
            NDArray::random_uniform(x, DType::F32, 1, -1.0, 1.0),
            NDArray::random_uniform(w, DType::F32, 2, -1.0, 1.0),
        ];
        let before = kiln_backend_cranelift::simd_stats();
        same_as_interp(f, &inputs);
        let after = kiln_backend_cranelift::simd_stats();
        // Counters are process-wide (other tests may add to them): the unrolled hot
        // loop alone emits an f32x4 group per column of its tile (at least 7 here).
        assert!(
            after[2] - before[2] >= 7,
            "hot loop not vectorized: {before:?} -> {after:?}\n{f}"
        );
    }
}

/// The default cpu schedule sends every group-1 conv2d that is not 1×1 stride 1 (3×3
/// stride 1 and 2, the 7×7 stride-2 stem, a strided 1×1) to the conv2d micro-kernel and
/// a depthwise one to the depthwise_conv2d micro-kernel, leaving a grouped one on the
/// register tiles; compiled at every ISA level this machine runs, each computes what the
/// loop-IR interpreter does. Tolerance: a reduction of k ≤ 147 products of values in
/// [-1, 1] rounds, in any order, within k·2⁻²⁴·k ≈ 1.3e-3 of the exact sum on each side.
#[test]
fn default_schedule_puts_conv2d_on_the_micro_kernels_at_every_isa() {
    use kiln_backend_cranelift::microkernel::Isa;
    use kiln_te::topi::{ScheduleKind, kernels_of};
    // (input, weight, stride, pad, groups, the call expected)
    let cases = [
        (
            vec![1, 8, 9, 11],
            vec![12, 8, 3, 3],
            1,
            1,
            1,
            Some("microkernel conv2d("),
        ),
        (
            vec![1, 8, 14, 14],
            vec![8, 8, 3, 3],
            2,
            1,
            1,
            Some("microkernel conv2d("),
        ),
        (
            vec![1, 3, 15, 15],
            vec![8, 3, 7, 7],
            2,
            3,
            1,
            Some("microkernel conv2d("),
        ),
        (
            vec![1, 4, 13, 13],
            vec![8, 4, 1, 1],
            2,
            0,
            1,
            Some("microkernel conv2d("),
        ),
        (
            vec![1, 6, 10, 9],
            vec![6, 1, 3, 3],
            1,
            1,
            6,
            Some("microkernel depthwise_conv2d("),
        ),
        (vec![1, 8, 10, 10], vec![8, 4, 3, 3], 1, 1, 2, None),
    ];
    for (x, w, stride, pad, groups, call) in cases {
        let op = kiln_ir::op::Conv2d {
            strides: [stride, stride],
            padding: [pad; 4],
            dilation: [1, 1],
            groups,
            channels: None,
            kernel_size: None,
        };
        let types = [
            kiln_ir::Type::tensor(x.clone(), DType::F32),
            kiln_ir::Type::tensor(w.clone(), DType::F32),
        ];
        let m = kiln_ir::Module::single_op(op, &types).unwrap();
        let ks = kernels_of(&m, ScheduleKind::Cpu).unwrap();
        let f = ks.iter().find(|k| k.name.contains("conv2d")).unwrap();
        let text = f.to_string();
        match call {
            Some(c) => assert!(text.contains(c), "{x:?} {w:?}: no `{c}`\n{text}"),
            None => assert!(!text.contains("microkernel"), "{x:?} {w:?}\n{text}"),
        }
        let inputs = [
            NDArray::random_uniform(x.clone(), DType::F32, 3, -1.0, 1.0),
            NDArray::random_uniform(w.clone(), DType::F32, 4, -1.0, 1.0),
        ];
        let want = tir::run_with_inputs(f, &inputs).unwrap();
        for isa in Isa::all_available() {
            let target = format!("cpu -threads=2 -isa={isa}").parse().unwrap();
            let got = run_on(&target, f, &inputs).unwrap();
            if let Err(e) = got[0].allclose(&want[0], 3e-3, 0.0) {
                panic!("{x:?} {w:?} -isa={isa}: {e:?}");
            }
        }
    }
}

/// Constants folded at compile time (an unrolled loop's variable) follow the IR's
/// wrapping semantics: `%u * 2^30` wraps in int32 exactly as at run time, so the
/// verifier's proof (which models the wrap) holds for the compiled code too.
#[test]
fn folded_constants_wrap_like_the_interpreter() {
    let text =
        "primfn @wrap(%a: Buffer[(4), float32, global], out %b: Buffer[(4), float32, global]) {
  unrolled for (%u, 0, 4) {
    %b[%u] = %a[floordiv(%u * 1073741824, 1073741824) + 2]
    if (%u * 1073741824 < 10) { %b[%u] = %b[%u] + 10.0 }
  }
}";
    let f = tir::parse(text).unwrap();
    tir::verify(&f).unwrap();
    let a = NDArray::from_vec(vec![4], vec![1.0f32, 2.0, 3.0, 4.0]).unwrap();
    same_as_interp(&f, &[a.clone()]);
    // u = 2, 3 wrap to -2^31 and -2^30: indices 0 and 1, and the guard holds for them.
    let want = NDArray::from_vec(vec![4], vec![13.0f32, 4.0, 11.0, 12.0]).unwrap();
    assert_eq!(run_cpu(&f, &[a]).unwrap()[0], want);
}

/// Three hundred nested 64 KiB local buffers (19 MiB) do not overflow the stack: the
/// ones beyond the frame budget live on the heap.
#[test]
fn many_local_buffers_stay_within_the_stack_budget() {
    let mut b = PrimFuncBuilder::new("deep");
    let out = b.output("out", [1], DType::F32);
    let bufs: Vec<_> = (0..300)
        .map(|k| b.alloc(&format!("t{k}"), [16384], DType::F32, Scope::Local))
        .collect();
    let mut body = Stmt::seq([
        Stmt::store(bufs[299], [Expr::int(7)], 2.5f32),
        Stmt::store(
            out,
            [Expr::int(0)],
            Expr::load(bufs[299], [Expr::int(7)]) + Expr::load(bufs[0], [Expr::int(16383)]),
        ),
    ]);
    for &t in bufs.iter().rev() {
        body = Stmt::allocate(
            t,
            Stmt::seq([Stmt::store(t, [Expr::int(16383)], 1.0f32), body]),
        );
    }
    let f = b.finish(body);
    tir::verify(&f).unwrap();
    // On a thread with a 16 MiB stack: enough for compiling 300 nested statements in
    // the dev profile, not for 19 MiB of stack slots.
    let got = std::thread::Builder::new()
        .stack_size(16 << 20)
        .spawn(move || run_cpu(&f, &[]).unwrap())
        .unwrap()
        .join()
        .unwrap();
    assert_eq!(got[0], NDArray::from_vec(vec![1], vec![3.5f32]).unwrap());
}

/// Random index-expression kernels (wrapping products, floor division, clamps, selects,
/// casts, data-dependent loads of extreme values) that the verifier accepts compute the
/// same on the cpu backend as in the interpreter, bit for bit: the backend's address
/// arithmetic and constant folding follow the IR's wrapping semantics the proof assumes.
#[test]
fn verified_random_index_kernels_match_the_interpreter() {
    use kiln_te::testing::index_kernels::{EXTENT, XS, kernel};
    let a: Vec<f32> = (0..EXTENT).map(|i| i as f32 + 0.5).collect();
    let inputs = [
        NDArray::from_vec(vec![EXTENT], a).unwrap(),
        NDArray::from_vec(vec![XS.len()], XS.to_vec()).unwrap(),
    ];
    let mut accepted = 0;
    for seed in 0..1000u64 {
        let f = kernel(seed);
        if tir::verify(&f).is_err() {
            continue;
        }
        accepted += 1;
        let want = tir::run_with_inputs(&f, &inputs);
        let got = run_cpu(&f, &inputs);
        match (want, got) {
            (Ok(w), Ok(g)) => assert_eq!(g, w, "seed {seed}\n{f}"),
            (Err(w), Err(g)) => {
                let (w, g) = (w.to_string(), g.to_string());
                assert!(
                    w.contains("division by zero") && g.contains("division by zero"),
                    "seed {seed}: {w} / {g}\n{f}"
                );
            }
            (w, g) => panic!("seed {seed}: interpreter {w:?}, cpu {g:?}\n{f}"),
        }
    }
    assert!(accepted >= 200, "{accepted} of 1000 accepted");
}
