//! One op suite, every backend: for every op family, over random shapes, attributes and
//! dtypes, a one-op module runs in the graph-IR reference interpreter and on every backend
//! of [`kiln_testsuite::ops::backends`] — lowered under the CPU and the GPU default
//! schedule (each kernel verified and round-tripped through the loop-IR text) in the
//! loop-IR interpreter, and built through the graph executor on `interp` and on `cpu`
//! (Cranelift) with a param bound at build time — and all agree within the op's
//! tolerance (exact for data movement and integers). The families live in the library
//! ([`kiln_testsuite::op_suite`], so outside backends run them too); each has a test
//! here. `KILN_CASES` raises the case count.

use kiln_ir::DType::*;
use kiln_ir::op::*;
use kiln_testsuite::op_suite::{FAMILIES, op_family};
use kiln_testsuite::ops::*;

/// Cases per family: `KILN_CASES`, else 12.
fn cases() -> u32 {
    kiln_testsuite::suite::cases(12)
}

macro_rules! families {
    ($($name:ident)*) => {
        $(#[test]
        fn $name() {
            op_family(stringify!($name), &backends(), cases()).unwrap_or_else(|e| panic!("{e}"));
        })*

        /// Every family of the library has its test above.
        #[test]
        fn every_family_is_tested() {
            let names = [$(stringify!($name)),*];
            for (f, _) in FAMILIES {
                assert!(names.contains(f), "op family `{f}` has no test");
            }
        }
    };
}

families! {
    unary binary bool_binary clip_cast_where reduce conv2d pool2d global_pool_dense_bias
    norms_and_softmax batch_matmul reshape_like concat_split strided_slice take
}

/// NaN, both zeros, both infinities and finite values.
const EDGES: [f32; 7] = [
    f32::NAN,
    -0.0,
    0.0,
    f32::NEG_INFINITY,
    f32::INFINITY,
    -1.5,
    2.0,
];

/// Runs `m` in the reference and on every backend and checks that every zero has the
/// reference's sign (values themselves are compared by [`check_all`], which takes `-0`
/// equal to `+0`).
fn same_zero_signs(
    m: &kiln_ir::Module,
    params: &[(String, kiln_ir::TensorType)],
    args: &[kiln_ir::NDArray],
) -> Result<(), String> {
    let named = params
        .iter()
        .map(|(n, _)| n.clone())
        .zip(args.iter().cloned())
        .collect();
    let want = kiln_ir::interp::evaluate(m, &named)
        .map_err(|e| e.to_string())?
        .flatten();
    for backend in &backends() {
        let got = backend.run(m, params, args)?;
        for (g, w) in got.iter().zip(&want) {
            for (i, (x, y)) in g.to_f64_vec().into_iter().zip(w.to_f64_vec()).enumerate() {
                if y == 0.0 && (x != 0.0 || x.is_sign_negative() != y.is_sign_negative()) {
                    return Err(format!(
                        "{}: element {i} is {x:?}, the reference {y:?}",
                        backend.name()
                    ));
                }
            }
        }
    }
    Ok(())
}

/// The max/min family on edge values agrees with the reference on every backend: NaN
/// propagates through `maximum`/`minimum`, `nn.relu`, `clip`, max pooling and max/min
/// reductions, and the zeros agree in sign (IEEE 754-2019 maximum/minimum: `-0 < +0`;
/// `relu(-0) = -0`).
#[test]
fn max_family_propagates_nan_on_every_backend() {
    use kiln_ir::NDArray;
    let pairs: Vec<(f32, f32)> = EDGES
        .iter()
        .flat_map(|&x| EDGES.iter().map(move |&y| (x, y)))
        .collect();
    let a = NDArray::from_vec([7, 7], pairs.iter().map(|p| p.0).collect()).unwrap();
    let b = NDArray::from_vec([7, 7], pairs.iter().map(|p| p.1).collect()).unwrap();
    let t2 = [Arg::T(tt(&[7, 7], F32)), Arg::T(tt(&[7, 7], F32))];
    for k in [BinaryKind::Maximum, BinaryKind::Minimum] {
        let (m, params) = one_op(Binary::new(k), &t2).unwrap();
        check_all(&m, &params, &[a.clone(), b.clone()], EXACT).unwrap();
        same_zero_signs(&m, &params, &[a.clone(), b.clone()])
            .unwrap_or_else(|e| panic!("{k:?}: {e}"));
    }
    // A 1x2x7x7 image mixing the edge values so that windows hold several.
    let img: Vec<f32> = (0..98).map(|i| EDGES[(i * 3 + i / 7) % 7]).collect();
    let x = NDArray::from_vec([1, 2, 7, 7], img).unwrap();
    let t = [Arg::T(tt(&[1, 2, 7, 7], F32))];
    let reduce = |kind, axis: Vec<i64>| Reduce {
        kind,
        axis: Some(axis),
        keepdims: false,
        exclude: false,
    };
    let ops: Vec<kiln_ir::Op> = vec![
        Unary::new(UnaryKind::Relu).into(),
        Clip::new(-1.0, 1.0).into(),
        Clip::new(0.0, 0.0).into(),
        Pool2d::new(PoolKind::Max, [2, 2]).into(),
        Pool2d::new(PoolKind::Max, [3, 2]).into(),
        GlobalPool2d {
            kind: PoolKind::Max,
        }
        .into(),
        reduce(ReduceKind::Max, vec![3]).into(),
        reduce(ReduceKind::Min, vec![2, 3]).into(),
        reduce(ReduceKind::Max, vec![1]).into(),
    ];
    for op in ops {
        let name = op.name().to_string();
        let (m, params) = one_op(op, &t).unwrap();
        check_all(&m, &params, std::slice::from_ref(&x), EXACT)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        same_zero_signs(&m, &params, std::slice::from_ref(&x))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}

/// `sigmoid` over its whole finite range on every backend: far in the negative tail it
/// is a tiny positive value (so `log(sigmoid(x))` stays finite down to `x = -103`),
/// never 0, and each result is within a few ulps of the reference's `f64` value (below
/// the smallest normal float, within its spacing); the positive side rounds to 1.
#[test]
fn sigmoid_is_accurate_in_both_tails_on_every_backend() {
    use kiln_ir::NDArray;
    let xs: Vec<f32> = vec![
        -103.0,
        -100.0,
        -90.0,
        -88.0,
        -87.0,
        -80.0,
        -50.0,
        -30.0,
        -17.0,
        -16.6,
        -5.0,
        -1e-3,
        -0.0,
        0.0,
        1e-3,
        5.0,
        16.6,
        17.0,
        30.0,
        90.0,
        1e30,
        -1e30,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
    ];
    let n = xs.len();
    let x = NDArray::from_vec([n], xs.clone()).unwrap();
    let (m, params) = one_op(Unary::new(UnaryKind::Sigmoid), &[Arg::T(tt(&[n], F32))]).unwrap();
    check_all(&m, &params, std::slice::from_ref(&x), TRANSC).unwrap();
    for backend in &backends() {
        let got = backend.run(&m, &params, std::slice::from_ref(&x)).unwrap();
        let got = got[0].to_vec::<f32>().unwrap();
        for (&x, &g) in xs.iter().zip(&got) {
            let x = x as f64;
            let want = if x >= 0.0 {
                1.0 / (1.0 + (-x).exp())
            } else {
                x.exp() / (1.0 + x.exp())
            };
            if x.is_nan() {
                assert!(g.is_nan(), "{}: sigmoid(NaN) = {g}", backend.name());
                continue;
            }
            let err = (g as f64 - want).abs();
            let ok =
                err <= 4.0 * f32::EPSILON as f64 * want || err <= 2.0 * f32::from_bits(1) as f64;
            assert!(
                ok,
                "{}: sigmoid({x}) = {g:e}, want {want:e}",
                backend.name()
            );
            if x > -103.5 {
                assert!(
                    g > 0.0 && (g as f64).ln().is_finite(),
                    "{}: sigmoid({x}) = {g:e}",
                    backend.name()
                );
            }
        }
    }
}

/// Integer `power` with negative exponents is the same on every backend: `(1 / a)^-e`
/// with truncating division (1 and -1 keep their magnitude, other bases give 0), at the
/// extremes of each signed width; zero to a negative power is a division by zero on
/// every backend, as in the reference.
#[test]
fn integer_power_with_negative_exponents_agrees_on_every_backend() {
    use kiln_ir::NDArray;
    for dtype in [I8, I32, I64] {
        let (lo, hi) = match dtype {
            I8 => (i8::MIN as i64, i8::MAX as i64),
            I32 => (i32::MIN as i64, i32::MAX as i64),
            _ => (i64::MIN, i64::MAX),
        };
        let bases = [1, -1, 2, -2, 3, -3, hi, lo, 1, -1, 5, -1];
        let exps = [-1, -1, -1, -2, -3, -4, -1, -2, lo, lo, lo, hi];
        let n = bases.len();
        let typed = |v: &[i64]| {
            NDArray::new(
                vec![n],
                kiln_ir::tensor::Data::from_i64(dtype, v.iter().copied()),
            )
            .unwrap()
        };
        let t2 = [Arg::T(tt(&[n], dtype)), Arg::T(tt(&[n], dtype))];
        let (m, params) = one_op(Binary::new(BinaryKind::Power), &t2).unwrap();
        check_all(&m, &params, &[typed(&bases), typed(&exps)], EXACT)
            .unwrap_or_else(|e| panic!("{dtype}: {e}"));
        // Zero to a negative power fails on the reference and on every backend.
        let (zeros, minus) = (typed(&[0; 12]), typed(&[-1; 12]));
        for backend in &backends() {
            let r = backend.run(&m, &params, &[zeros.clone(), minus.clone()]);
            let e = r.err().unwrap_or_else(|| {
                panic!("{}: {dtype} 0 to the power -1 gave a value", backend.name())
            });
            assert!(e.contains("division by zero"), "{}: {e}", backend.name());
        }
    }
    // uint64 exponents use all 64 bits (2^64 - 1 is odd, 2^63 even).
    let n = 6;
    let u64s = |v: [u64; 6]| {
        NDArray::new(
            vec![n],
            kiln_ir::tensor::Data::from_i64(U64, v.iter().map(|&x| x as i64)),
        )
        .unwrap()
    };
    let t2 = [Arg::T(tt(&[n], U64)), Arg::T(tt(&[n], U64))];
    let (m, params) = one_op(Binary::new(BinaryKind::Power), &t2).unwrap();
    let bases = u64s([3, 3, 2, u64::MAX, 0, 7]);
    let exps = u64s([u64::MAX, 1 << 63, 64, u64::MAX, u64::MAX, (1 << 32) + 1]);
    check_all(&m, &params, &[bases, exps], EXACT).unwrap_or_else(|e| panic!("uint64: {e}"));
}

/// The families that run on the micro-kernels (dense, batch_matmul, conv2d) on `cpu` at every
/// `-isa` level this machine runs (the default run above takes the best one); a level it
/// lacks is refused at build, naming what it has.
#[test]
fn gemm_families_at_every_isa_level() {
    use kiln_backend_cranelift::microkernel::Isa;
    let cpu = kiln_testsuite::suite::exec_backend("cpu").expect("cpu is registered");
    for isa in Isa::ALL {
        let mut b = cpu.clone();
        b.target = format!("{} -isa={isa}", cpu.target).parse().unwrap();
        b.name = format!("cpu -isa={isa}");
        let backends = [Backend::Exec(b)];
        for family in ["global_pool_dense_bias", "batch_matmul", "conv2d"] {
            let r = op_family(family, &backends, cases());
            match (isa.available(), r) {
                (true, r) => r.unwrap_or_else(|e| panic!("-isa={isa}: {e}")),
                (false, Err(e)) => assert!(e.contains("cannot run"), "-isa={isa}: {e}"),
                (false, Ok(())) => panic!("-isa={isa} ran on a machine without it"),
            }
        }
    }
}
