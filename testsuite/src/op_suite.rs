//! The one-op suite's cases as a library, so that any backend runs them: for every op
//! family, random shapes, attributes and dtypes make one-op modules ([`crate::ops`]),
//! each run in the graph-IR reference interpreter and on the given backends and compared
//! within the op's tolerance (exact for data movement and integers). [`op_suite`] runs
//! every family (or [`op_family`] one of them) on a list of [`Backend`]s — kiln's own
//! (`crate::ops::backends`) or a user's — and returns the shrunk failing case, never
//! panics. The families are proptest functions that read the running suite's backends
//! and case count from a thread-local, set for the duration of the call.

use std::cell::RefCell;
use std::panic::{AssertUnwindSafe, catch_unwind};

use kiln_ir::DType::{self, *};
use kiln_ir::attrs::F64;
use kiln_ir::op::*;
use proptest::prelude::*;

use crate::ops::*;

thread_local! {
    /// The backends and case count of the suite running on this thread.
    static CURRENT: RefCell<Option<(Vec<Backend>, u32)>> = const { RefCell::new(None) };
}

/// The op families, by name.
pub const FAMILIES: &[(&str, fn())] = &[
    ("unary", unary),
    ("binary", binary),
    ("bool_binary", bool_binary),
    ("clip_cast_where", clip_cast_where),
    ("reduce", reduce),
    ("conv2d", conv2d),
    ("pool2d", pool2d),
    ("global_pool_dense_bias", global_pool_dense_bias),
    ("norms_and_softmax", norms_and_softmax),
    ("batch_matmul", batch_matmul),
    ("reshape_like", reshape_like),
    ("concat_split", concat_split),
    ("strided_slice", strided_slice),
    ("take", take),
];

/// Runs the family `name` with `cases` random cases on `backends`; the error is proptest's
/// shrunk failing case (the backend, the op, the worst element) and its inputs.
pub fn op_family(name: &str, backends: &[Backend], cases: u32) -> Result<(), String> {
    let Some((_, family)) = FAMILIES.iter().find(|(n, _)| *n == name) else {
        return Err(format!(
            "no op family `{name}` (families: {})",
            FAMILIES
                .iter()
                .map(|(n, _)| *n)
                .collect::<Vec<_>>()
                .join(", ")
        ));
    };
    let previous = CURRENT.with(|c| c.replace(Some((backends.to_vec(), cases))));
    let result = catch_unwind(AssertUnwindSafe(family));
    CURRENT.with(|c| c.replace(previous));
    result.map_err(|p| {
        let msg = p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        format!("op family `{name}`: {msg}")
    })
}

/// Runs every family of [`FAMILIES`] with `cases` cases each on `backends`; stops at the
/// first failing family.
pub fn op_suite(backends: &[Backend], cases: u32) -> Result<(), String> {
    for (name, _) in FAMILIES {
        op_family(name, backends, cases)?;
    }
    Ok(())
}

/// The running suite's case count; past failures (`op_suite.proptest-regressions`) are
/// replayed first inside this repository only.
fn cfg() -> ProptestConfig {
    let default = ProptestConfig::default();
    ProptestConfig {
        cases: CURRENT.with(|c| c.borrow().as_ref().map_or(12, |(_, n)| *n)),
        failure_persistence: if crate::suite::in_this_repo() {
            default.failure_persistence.clone()
        } else {
            None
        },
        ..default
    }
}

/// [`check_on`] on the backends of the running [`op_suite`].
fn check(
    m: &kiln_ir::Module,
    params: &[(String, kiln_ir::TensorType)],
    xs: &[kiln_ir::NDArray],
    tol: Tol,
) -> Result<(), String> {
    CURRENT.with(|c| match c.borrow().as_ref() {
        Some((backends, _)) => check_on(backends, m, params, xs, tol),
        None => Err("op suite family called outside op_suite".to_string()),
    })
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
    check(&m, &params, &xs, tol).map_err(TestCaseError::fail)
}

fn shape(rank: std::ops::RangeInclusive<usize>, max: usize) -> impl Strategy<Value = Vec<usize>> {
    rank.prop_flat_map(move |r| proptest::collection::vec(1..=max, r))
}

fn num_dtype() -> impl Strategy<Value = DType> {
    prop_oneof![
        Just(F32),
        Just(F32),
        Just(DType::F64),
        Just(BF16),
        Just(I32),
        Just(I8),
        Just(I16),
        Just(I64),
        Just(U8),
        Just(U16),
        Just(U32),
        Just(U64)
    ]
}

/// The tolerance of float arithmetic at `dt`: [`ARITH`], or [`BF16_ROUNDING`] for
/// bfloat16, whose backends round the f32 result (the reference rounds its f64 result
/// once).
fn float_tol(dt: DType) -> Tol {
    if dt == BF16 { BF16_ROUNDING } else { ARITH }
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

    fn unary(s in shape(0..=3, 5), k in 0usize..UnaryKind::ALL.len(), int in any::<bool>(), seed in any::<u64>()) {
        let kind = UnaryKind::ALL[k];
        let (dtype, lo, hi, tol) = match kind {
            UnaryKind::Relu | UnaryKind::Negative | UnaryKind::Abs if int => (I32, -1.0, 1.0, EXACT),
            UnaryKind::Relu | UnaryKind::Negative | UnaryKind::Abs => (F32, -1.0, 1.0, EXACT),
            UnaryKind::Log | UnaryKind::Sqrt | UnaryKind::Rsqrt => (F32, 0.05, 4.0, TRANSC),
            UnaryKind::Floor | UnaryKind::Ceil | UnaryKind::Round => (F32, -3.0, 3.0, EXACT),
            // The trigonometric family over its domain, well past the first periods.
            UnaryKind::Sin | UnaryKind::Cos | UnaryKind::Tan | UnaryKind::Atan | UnaryKind::Asinh => {
                (F32, -1000.0, 1000.0, TRANSC)
            }
            UnaryKind::Sinh | UnaryKind::Cosh => (F32, -80.0, 80.0, TRANSC),
            UnaryKind::Asin | UnaryKind::Acos | UnaryKind::Atanh => (F32, -1.0, 1.0, TRANSC),
            UnaryKind::Acosh => (F32, 1.0, 1000.0, TRANSC),
            _ => (F32, -3.0, 3.0, TRANSC),
        };
        // float64 inputs in half of the float cases (computed in f64 everywhere).
        let (dtype, tol) = if dtype == F32 && int { (DType::F64, tol) } else { (dtype, tol) };
        run(Unary::new(kind), &[Arg::T(tt(&s, dtype))], seed, lo, hi, tol)?;
    }

    fn binary(s in shape(1..=3, 5), k in 0usize..BinaryKind::ALL.len(), dt in num_dtype(), mask in 0u32..8, drop in 0usize..2, swap in any::<bool>(), seed in any::<u64>()) {
        let kind = BinaryKind::ALL[k];
        let other = broadcast_partner(&s, mask, drop);
        let (a, b) = if swap { (other, s.clone()) } else { (s.clone(), other) };
        let float = dt.is_float();
        // Divisors are drawn away from zero (integer division by zero is an error in
        // the reference); integer exponents take both signs over a base without zero
        // (zero to a negative power is a division by zero).
        let (lo, hi) = match kind {
            BinaryKind::Divide | BinaryKind::Power if float => (0.5, 2.0),
            _ => (-2.0, 2.0),
        };
        let (m, params) = match one_op(Binary::new(kind), &[Arg::T(tt(&a, dt)), Arg::T(tt(&b, dt))]) {
            Ok(x) => x,
            Err(_) => return Ok(()),
        };
        let mut xs = inputs(&params, seed, lo, hi);
        if !float && kind == BinaryKind::Divide {
            let t = &params[1].1;
            let v = kiln_ir::NDArray::random_uniform(t.shape.clone(), t.dtype, seed ^ 5, 1.0, 7.0);
            xs[1] = v;
        }
        if !float && kind == BinaryKind::Power {
            let (base, exp) = (&params[0].1, &params[1].1);
            let unsigned = dt.is_unsigned();
            let (lo, hi) = if seed % 2 == 0 || unsigned { (1.0, 3.0) } else { (-3.0, -1.0) };
            xs[0] = kiln_ir::NDArray::random_uniform(base.shape.clone(), base.dtype, seed ^ 3, lo, hi);
            let lo = if unsigned { 0.0 } else { -3.0 };
            xs[1] = kiln_ir::NDArray::random_uniform(exp.shape.clone(), exp.dtype, seed ^ 5, lo, 7.0);
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
            _ if dt == BF16 => BF16_ROUNDING,
            BinaryKind::Power => TRANSC,
            _ => ARITH,
        };
        check(&m, &params, &xs, tol).map_err(TestCaseError::fail)?;
    }

    fn bool_binary(s in shape(1..=3, 4), k in 0usize..4, seed in any::<u64>()) {
        let kind = [BinaryKind::Equal, BinaryKind::NotEqual, BinaryKind::Maximum, BinaryKind::Minimum][k];
        run(Binary::new(kind), &[Arg::T(tt(&s, Bool)), Arg::T(tt(&s, Bool))], seed, 0.0, 1.0, EXACT)?;
    }

    fn clip_cast_where(s in shape(0..=3, 5), dt in num_dtype(), to in num_dtype(), lo in -3.0f64..0.0, w in 0.0f64..4.0, seed in any::<u64>()) {
        let tol = if dt.is_float() { float_tol(dt) } else { EXACT };
        run(Clip::new(lo, lo + w), &[Arg::T(tt(&s, dt))], seed, -4.0, 4.0, tol)?;
        run(Cast::new(to), &[Arg::T(tt(&s, dt))], seed, -300.0, 300.0, EXACT)?;
        run(Cast::new(Bool), &[Arg::T(tt(&s, dt))], seed, -1.0, 1.0, EXACT)?;
        let c = broadcast_partner(&s, 1, 0);
        run(Where, &[Arg::T(tt(&c, Bool)), Arg::T(tt(&s, dt)), Arg::T(tt(&s, dt))], seed, -1.0, 1.0, EXACT)?;
    }

    fn reduce(s in shape(1..=4, 5), k in 0usize..ReduceKind::ALL.len(), axes in proptest::collection::vec(-4i64..4, 0..3), all in any::<bool>(), keepdims in any::<bool>(), exclude in any::<bool>(), int in any::<bool>(), seed in any::<u64>()) {
        let kind = ReduceKind::ALL[k];
        let dtype = if int && kind != ReduceKind::Mean { I32 } else { F32 };
        let op = Reduce { kind, axis: (!all).then_some(axes), keepdims, exclude };
        let tol = if dtype == I32 || matches!(kind, ReduceKind::Max | ReduceKind::Min) { EXACT } else { ACCUM };
        run(op, &[Arg::T(tt(&s, dtype))], seed, -1.0, 1.0, tol)?;
    }

    fn conv2d(n in 1usize..3, cg in 1usize..4, g in 1usize..3, og in 1usize..4, h in 1usize..8, w in 1usize..9,
              kh in 1usize..4, kw in 1usize..4, sh in 1usize..3, sw in 1usize..3, dh in 1usize..3, dw in 1usize..3,
              pad in proptest::array::uniform4(0usize..3), int in any::<bool>(), seed in any::<u64>()) {
        let op = Conv2d { strides: [sh, sw], padding: pad, dilation: [dh, dw], groups: g, channels: None, kernel_size: None };
        let dtype = if int { I32 } else { F32 };
        let tol = if int { EXACT } else { ACCUM };
        run(op, &[Arg::T(tt(&[n, cg * g, h, w], dtype)), Arg::T(tt(&[og * g, cg, kh, kw], dtype))], seed, -1.0, 1.0, tol)?;
    }

    fn pool2d(max in any::<bool>(), n in 1usize..3, c in 1usize..4, h in 1usize..9, w in 1usize..9,
              kh in 1usize..4, kw in 1usize..4, sh in 1usize..3, sw in 1usize..3, dh in 1usize..3, dw in 1usize..3,
              pad in proptest::array::uniform4(0usize..3), ceil in any::<bool>(), incl in any::<bool>(), int in any::<bool>(), seed in any::<u64>()) {
        let kind = if max { PoolKind::Max } else { PoolKind::Avg };
        let op = Pool2d { kind, pool_size: [kh, kw], strides: [sh, sw], dilation: [dh, dw], padding: pad, ceil_mode: ceil, count_include_pad: incl && !max };
        let dtype = if int && max { I32 } else { F32 };
        let tol = if max { EXACT } else { ACCUM };
        run(op, &[Arg::T(tt(&[n, c, h, w], dtype))], seed, -1.0, 1.0, tol)?;
    }

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
        check(&m, &params, &xs, ACCUM).map_err(TestCaseError::fail)?;
    }

    fn batch_matmul(b in 1usize..3, bcast in 0usize..3, m in 1usize..6, n in 1usize..10, k in 1usize..7, ta in any::<bool>(), tb in any::<bool>(), int in any::<bool>(), seed in any::<u64>()) {
        let (ba, bb) = match bcast { 1 => (1, b), 2 => (b, 1), _ => (b, b) };
        let a = if ta { [ba, k, m] } else { [ba, m, k] };
        let bs = if tb { [bb, n, k] } else { [bb, k, n] };
        let dtype = if int { I32 } else { F32 };
        run(BatchMatmul { transpose_a: ta, transpose_b: tb }, &[Arg::T(tt(&a, dtype)), Arg::T(tt(&bs, dtype))], seed, -1.0, 1.0, if int { EXACT } else { ACCUM })?;
    }

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

    fn strided_slice(s in shape(1..=3, 7), begin in proptest::collection::vec(-8i64..8, 1..4), end in proptest::collection::vec(-8i64..8, 1..4), strides in proptest::collection::vec(prop_oneof![1i64..4, -3i64..0], 1..4), with_axes in any::<bool>(), dt in num_dtype(), seed in any::<u64>()) {
        let k = begin.len().min(end.len()).min(strides.len()).min(s.len());
        let axes = with_axes.then(|| (0..k as i64).rev().collect::<Vec<_>>());
        let op = StridedSlice { begin: begin[..k].to_vec(), end: end[..k].to_vec(), strides: Some(strides[..k].to_vec()), axes };
        // Slices with no elements are not lowered.
        let Ok((m, params)) = one_op(op, &[Arg::T(tt(&s, dt))]) else { return Ok(()) };
        let out = m.ty(m.main().unwrap().body).as_tensor().unwrap().clone();
        if out.shape.contains(&0) { return Ok(()); }
        let xs = inputs(&params, seed, -1.0, 1.0);
        check(&m, &params, &xs, EXACT).map_err(TestCaseError::fail)?;
    }

    fn take(s in shape(1..=3, 5), ind in shape(0..=2, 4), axis in prop_oneof![Just(None), (-3i64..3).prop_map(Some)], wrap in any::<bool>(), i64_ in any::<bool>(), dt in num_dtype(), seed in any::<u64>()) {
        let r = s.len() as i64;
        if let Some(a) = axis && (a < -r || a >= r) { return Ok(()); }
        let mode = if wrap { TakeMode::Wrap } else { TakeMode::Clip };
        let it = if i64_ { I64 } else { I32 };
        let (m, params) = one_op(Take { axis, mode }, &[Arg::T(tt(&s, dt)), Arg::T(tt(&ind, it))]).unwrap();
        let mut xs = inputs(&params, seed, -1.0, 1.0);
        // Indices from -12 to 12: in range, negative and past the end.
        xs[1] = kiln_ir::NDArray::random_uniform(ind.clone(), it, seed ^ 3, -12.0, 12.0);
        check(&m, &params, &xs, EXACT).map_err(TestCaseError::fail)?;
    }
}
