//! One op suite, every backend: for every op family, over random shapes, attributes and
//! dtypes, a one-op module runs in the graph-IR reference interpreter and on every backend
//! of [`kiln_testsuite::ops::backends`] — lowered under the CPU and the GPU default
//! schedule (each kernel verified and round-tripped through the loop-IR text) in the
//! loop-IR interpreter, and built through the graph executor on `interp` and on `cpu`
//! (Cranelift) with a param bound at build time — and all agree within the op's
//! tolerance (exact for data movement and integers). `KILN_CASES` raises the case count.

use kiln_ir::DType::{self, *};
use kiln_ir::attrs::F64;
use kiln_ir::op::*;
use kiln_testsuite::ops::*;
use proptest::prelude::*;

fn cfg() -> ProptestConfig {
    ProptestConfig {
        // KILN_CASES raises the count for longer local runs.
        cases: std::env::var("KILN_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(12),
        ..ProptestConfig::default()
    }
}

/// Builds, runs and compares; a case the type rule refuses is skipped.
fn run(
    op: impl Into<kiln_ir::Op>,
    args: &[Arg],
    seed: u64,
    lo: f64,
    hi: f64,
    tol: Tol,
) -> Result<(), TestCaseError> {
    let Ok((m, params)) = one_op(op, args) else {
        return Ok(());
    };
    let xs = inputs(&params, seed, lo, hi);
    check_all(&m, &params, &xs, tol).map_err(TestCaseError::fail)
}

fn shape(rank: std::ops::RangeInclusive<usize>, max: usize) -> impl Strategy<Value = Vec<usize>> {
    rank.prop_flat_map(move |r| proptest::collection::vec(1..=max, r))
}

fn num_dtype() -> impl Strategy<Value = DType> {
    prop_oneof![
        Just(F32),
        Just(F32),
        Just(I32),
        Just(I8),
        Just(I64),
        Just(U8)
    ]
}

/// `shape` with some axes set to 1 (a broadcast partner), maybe with leading axes dropped.
fn broadcast_partner(s: &[usize], mask: u32, drop: usize) -> Vec<usize> {
    let v: Vec<usize> = s
        .iter()
        .enumerate()
        .map(|(i, &d)| if mask & (1 << i) != 0 { 1 } else { d })
        .collect();
    v[drop.min(v.len())..].to_vec()
}

proptest! {
    #![proptest_config(cfg())]

    #[test]
    fn unary(s in shape(0..=3, 5), k in 0usize..UnaryKind::ALL.len(), int in any::<bool>(), seed in any::<u64>()) {
        let kind = UnaryKind::ALL[k];
        let (dtype, lo, hi, tol) = match kind {
            UnaryKind::Relu | UnaryKind::Negative | UnaryKind::Abs if int => (I32, -1.0, 1.0, EXACT),
            UnaryKind::Relu | UnaryKind::Negative | UnaryKind::Abs => (F32, -1.0, 1.0, EXACT),
            UnaryKind::Log | UnaryKind::Sqrt | UnaryKind::Rsqrt => (F32, 0.05, 4.0, TRANSC),
            UnaryKind::Floor | UnaryKind::Ceil | UnaryKind::Round => (F32, -3.0, 3.0, EXACT),
            _ => (F32, -3.0, 3.0, TRANSC),
        };
        run(Unary::new(kind), &[Arg::T(tt(&s, dtype))], seed, lo, hi, tol)?;
    }

    #[test]
    fn binary(s in shape(1..=3, 5), k in 0usize..BinaryKind::ALL.len(), dt in num_dtype(), mask in 0u32..8, drop in 0usize..2, swap in any::<bool>(), seed in any::<u64>()) {
        let kind = BinaryKind::ALL[k];
        let other = broadcast_partner(&s, mask, drop);
        let (a, b) = if swap { (other, s.clone()) } else { (s.clone(), other) };
        let float = dt.is_float();
        // Divisors and exponents are drawn positive (integer division by zero and
        // negative integer powers are errors in the reference).
        let (lo, hi) = match kind {
            BinaryKind::Divide | BinaryKind::Power if float => (0.5, 2.0),
            _ => (-2.0, 2.0),
        };
        let (m, params) = match one_op(Binary::new(kind), &[Arg::T(tt(&a, dt)), Arg::T(tt(&b, dt))]) {
            Ok(x) => x,
            Err(_) => return Ok(()),
        };
        let mut xs = inputs(&params, seed, lo, hi);
        if !float && matches!(kind, BinaryKind::Divide | BinaryKind::Power) {
            let t = &params[1].1;
            let v = kiln_ir::NDArray::random_uniform(t.shape.clone(), t.dtype, seed ^ 5, 1.0, 7.0);
            xs[1] = v;
        }
        // Moduli: divisors of one sign per case, away from zero (integer modulo by zero
        // is an error; a float divisor near zero makes the quotient's rounding matter).
        if matches!(kind, BinaryKind::FloorMod | BinaryKind::TruncMod) {
            let t = &params[1].1;
            let (lo, hi) = if float { (0.25, 2.0) } else { (1.0, 7.0) };
            let (lo, hi) = if seed % 2 == 0 || dt == U8 { (lo, hi) } else { (-hi, -lo) };
            xs[1] = kiln_ir::NDArray::random_uniform(t.shape.clone(), t.dtype, seed ^ 5, lo, hi);
        }
        let tol = match kind {
            _ if !float => EXACT,
            BinaryKind::Power => TRANSC,
            _ => ARITH,
        };
        check_all(&m, &params, &xs, tol).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn bool_binary(s in shape(1..=3, 4), k in 0usize..4, seed in any::<u64>()) {
        let kind = [BinaryKind::Equal, BinaryKind::NotEqual, BinaryKind::Maximum, BinaryKind::Minimum][k];
        run(Binary::new(kind), &[Arg::T(tt(&s, Bool)), Arg::T(tt(&s, Bool))], seed, 0.0, 1.0, EXACT)?;
    }

    #[test]
    fn clip_cast_where(s in shape(0..=3, 5), dt in num_dtype(), to in num_dtype(), lo in -3.0f64..0.0, w in 0.0f64..4.0, seed in any::<u64>()) {
        let tol = if dt.is_float() { ARITH } else { EXACT };
        run(Clip::new(lo, lo + w), &[Arg::T(tt(&s, dt))], seed, -4.0, 4.0, tol)?;
        run(Cast::new(to), &[Arg::T(tt(&s, dt))], seed, -300.0, 300.0, EXACT)?;
        run(Cast::new(Bool), &[Arg::T(tt(&s, dt))], seed, -1.0, 1.0, EXACT)?;
        let c = broadcast_partner(&s, 1, 0);
        run(Where, &[Arg::T(tt(&c, Bool)), Arg::T(tt(&s, dt)), Arg::T(tt(&s, dt))], seed, -1.0, 1.0, EXACT)?;
    }

    #[test]
    fn reduce(s in shape(1..=4, 5), k in 0usize..ReduceKind::ALL.len(), axes in proptest::collection::vec(-4i64..4, 0..3), all in any::<bool>(), keepdims in any::<bool>(), exclude in any::<bool>(), int in any::<bool>(), seed in any::<u64>()) {
        let kind = ReduceKind::ALL[k];
        let dtype = if int && kind != ReduceKind::Mean { I32 } else { F32 };
        let op = Reduce { kind, axis: (!all).then_some(axes), keepdims, exclude };
        let tol = if dtype == I32 || matches!(kind, ReduceKind::Max | ReduceKind::Min) { EXACT } else { ACCUM };
        run(op, &[Arg::T(tt(&s, dtype))], seed, -1.0, 1.0, tol)?;
    }

    #[test]
    fn conv2d(n in 1usize..3, cg in 1usize..4, g in 1usize..3, og in 1usize..4, h in 1usize..8, w in 1usize..9,
              kh in 1usize..4, kw in 1usize..4, sh in 1usize..3, sw in 1usize..3, dh in 1usize..3, dw in 1usize..3,
              pad in proptest::array::uniform4(0usize..3), int in any::<bool>(), seed in any::<u64>()) {
        let op = Conv2d { strides: [sh, sw], padding: pad, dilation: [dh, dw], groups: g, channels: None, kernel_size: None };
        let dtype = if int { I32 } else { F32 };
        let tol = if int { EXACT } else { ACCUM };
        run(op, &[Arg::T(tt(&[n, cg * g, h, w], dtype)), Arg::T(tt(&[og * g, cg, kh, kw], dtype))], seed, -1.0, 1.0, tol)?;
    }

    #[test]
    fn pool2d(max in any::<bool>(), n in 1usize..3, c in 1usize..4, h in 1usize..9, w in 1usize..9,
              kh in 1usize..4, kw in 1usize..4, sh in 1usize..3, sw in 1usize..3, dh in 1usize..3, dw in 1usize..3,
              pad in proptest::array::uniform4(0usize..3), ceil in any::<bool>(), incl in any::<bool>(), int in any::<bool>(), seed in any::<u64>()) {
        let kind = if max { PoolKind::Max } else { PoolKind::Avg };
        let op = Pool2d { kind, pool_size: [kh, kw], strides: [sh, sw], dilation: [dh, dw], padding: pad, ceil_mode: ceil, count_include_pad: incl && !max };
        let dtype = if int && max { I32 } else { F32 };
        let tol = if max { EXACT } else { ACCUM };
        run(op, &[Arg::T(tt(&[n, c, h, w], dtype))], seed, -1.0, 1.0, tol)?;
    }

    #[test]
    fn global_pool_dense_bias(max in any::<bool>(), s in proptest::array::uniform4(1usize..6), units in 1usize..10, lead in shape(0..=2, 3), axis in -2i64..2, seed in any::<u64>()) {
        let kind = if max { PoolKind::Max } else { PoolKind::Avg };
        run(GlobalPool2d { kind }, &[Arg::T(tt(&s, F32))], seed, -1.0, 1.0, if max { EXACT } else { ACCUM })?;
        let mut xs = lead.clone();
        xs.push(s[0] + s[1]);
        run(Dense { units: None }, &[Arg::T(tt(&xs, F32)), Arg::T(tt(&[units, s[0] + s[1]], F32))], seed, -1.0, 1.0, ACCUM)?;
        run(Dense { units: None }, &[Arg::T(tt(&xs, I64)), Arg::T(tt(&[units, s[0] + s[1]], I64))], seed, -1.0, 1.0, EXACT)?;
        let a = if axis < 0 { (4 + axis) as usize } else { axis as usize };
        run(BiasAdd { axis }, &[Arg::T(tt(&s, F32)), Arg::T(tt(&[s[a]], F32))], seed, -1.0, 1.0, ARITH)?;
        run(BatchFlatten, &[Arg::T(tt(&s, I8))], seed, -1.0, 1.0, EXACT)?;
    }

    #[test]
    fn norms_and_softmax(s in shape(1..=3, 6), axis in -3i64..3, eps in 1e-5f64..1e-2, center in any::<bool>(), scale in any::<bool>(), seed in any::<u64>()) {
        let r = s.len() as i64;
        if axis < -r || axis >= r { return Ok(()); }
        let a = if axis < 0 { (r + axis) as usize } else { axis as usize };
        run(Softmax { axis }, &[Arg::T(tt(&s, F32))], seed, -2.0, 2.0, TRANSC)?;
        let v = tt(&[s[a]], F32);
        run(LayerNorm { axis, epsilon: F64(eps), center, scale }, &[Arg::T(tt(&s, F32)), Arg::T(v.clone()), Arg::T(v.clone())], seed, -2.0, 2.0, ACCUM)?;
        let (m, params) = one_op(BatchNorm { axis, epsilon: F64(eps), center, scale },
            &[Arg::T(tt(&s, F32)), Arg::T(v.clone()), Arg::T(v.clone()), Arg::T(v.clone()), Arg::T(v.clone())]).unwrap();
        let mut xs = inputs(&params, seed, -1.0, 1.0);
        xs[4] = kiln_ir::NDArray::random_uniform(vec![s[a]], F32, seed ^ 9, 0.1, 2.0);
        check_all(&m, &params, &xs, ACCUM).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn batch_matmul(b in 1usize..3, bcast in 0usize..3, m in 1usize..6, n in 1usize..10, k in 1usize..7, ta in any::<bool>(), tb in any::<bool>(), int in any::<bool>(), seed in any::<u64>()) {
        let (ba, bb) = match bcast { 1 => (1, b), 2 => (b, 1), _ => (b, b) };
        let a = if ta { [ba, k, m] } else { [ba, m, k] };
        let bs = if tb { [bb, n, k] } else { [bb, k, n] };
        let dtype = if int { I32 } else { F32 };
        run(BatchMatmul { transpose_a: ta, transpose_b: tb }, &[Arg::T(tt(&a, dtype)), Arg::T(tt(&bs, dtype))], seed, -1.0, 1.0, if int { EXACT } else { ACCUM })?;
    }

    #[test]
    fn reshape_like(s in shape(0..=4, 4), perm_seed in any::<u64>(), axis in -3i64..3, num in 0usize..3, dt in num_dtype(), seed in any::<u64>()) {
        let n: usize = s.iter().product();
        run(Reshape::new(vec![-1]), &[Arg::T(tt(&s, dt))], seed, -1.0, 1.0, EXACT)?;
        if n.is_multiple_of(2) {
            run(Reshape::new(vec![2, -1]), &[Arg::T(tt(&s, dt))], seed, -1.0, 1.0, EXACT)?;
        }
        let mut perm: Vec<i64> = (0..s.len() as i64).collect();
        let mut r = perm_seed;
        for i in (1..perm.len()).rev() {
            perm.swap(i, (r % (i as u64 + 1)) as usize);
            r /= 7;
        }
        run(Transpose::new(Some(perm)), &[Arg::T(tt(&s, dt))], seed, -1.0, 1.0, EXACT)?;
        run(Transpose::new(None), &[Arg::T(tt(&s, dt))], seed, -1.0, 1.0, EXACT)?;
        run(Squeeze::new(None), &[Arg::T(tt(&s, dt))], seed, -1.0, 1.0, EXACT)?;
        run(ExpandDims { axis, num_newaxis: num }, &[Arg::T(tt(&s, dt))], seed, -1.0, 1.0, EXACT)?;
    }

    #[test]
    fn concat_split(s in shape(1..=3, 4), extra in proptest::collection::vec(1usize..4, 1..4), axis in -3i64..3, sections in 1usize..4, cuts in proptest::collection::vec(0i64..6, 0..3), dt in num_dtype(), seed in any::<u64>()) {
        let r = s.len() as i64;
        if axis < -r || axis >= r { return Ok(()); }
        let a = if axis < 0 { (r + axis) as usize } else { axis as usize };
        let fields: Vec<_> = extra.iter().map(|&e| { let mut f = s.clone(); f[a] = e; tt(&f, dt) }).collect();
        run(Concatenate::new(axis), &[Arg::Tuple(fields)], seed, -1.0, 1.0, EXACT)?;
        let mut big = s.clone();
        big[a] *= sections;
        run(Split::sections(sections, axis), &[Arg::T(tt(&big, dt))], seed, -1.0, 1.0, EXACT)?;
        let mut cuts = cuts;
        cuts.sort();
        cuts.dedup();
        // Empty pieces are not lowered: keep cuts strictly inside the axis.
        cuts.retain(|&c| c > 0 && (c as usize) < big[a]);
        run(Split::indices(cuts, axis), &[Arg::T(tt(&big, dt))], seed, -1.0, 1.0, EXACT)?;
    }

    #[test]
    fn strided_slice(s in shape(1..=3, 7), begin in proptest::collection::vec(-8i64..8, 1..4), end in proptest::collection::vec(-8i64..8, 1..4), strides in proptest::collection::vec(prop_oneof![1i64..4, -3i64..0], 1..4), with_axes in any::<bool>(), dt in num_dtype(), seed in any::<u64>()) {
        let k = begin.len().min(end.len()).min(strides.len()).min(s.len());
        let axes = with_axes.then(|| (0..k as i64).rev().collect::<Vec<_>>());
        let op = StridedSlice { begin: begin[..k].to_vec(), end: end[..k].to_vec(), strides: Some(strides[..k].to_vec()), axes };
        // Slices with no elements are not lowered.
        let Ok((m, params)) = one_op(op, &[Arg::T(tt(&s, dt))]) else { return Ok(()) };
        let out = m.ty(m.main().unwrap().body).as_tensor().unwrap().clone();
        if out.shape.contains(&0) { return Ok(()); }
        let xs = inputs(&params, seed, -1.0, 1.0);
        check_all(&m, &params, &xs, EXACT).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn take(s in shape(1..=3, 5), ind in shape(0..=2, 4), axis in prop_oneof![Just(None), (-3i64..3).prop_map(Some)], wrap in any::<bool>(), i64_ in any::<bool>(), dt in num_dtype(), seed in any::<u64>()) {
        let r = s.len() as i64;
        if let Some(a) = axis && (a < -r || a >= r) { return Ok(()); }
        let mode = if wrap { TakeMode::Wrap } else { TakeMode::Clip };
        let it = if i64_ { I64 } else { I32 };
        let (m, params) = one_op(Take { axis, mode }, &[Arg::T(tt(&s, dt)), Arg::T(tt(&ind, it))]).unwrap();
        let mut xs = inputs(&params, seed, -1.0, 1.0);
        // Indices from -12 to 12: in range, negative and past the end.
        xs[1] = kiln_ir::NDArray::random_uniform(ind.clone(), it, seed ^ 3, -12.0, 12.0);
        check_all(&m, &params, &xs, EXACT).map_err(TestCaseError::fail)?;
    }
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
