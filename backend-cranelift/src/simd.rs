//! Which `vectorized` loops run as `f32x4` SIMD, four lanes at a time.
//!
//! A loop qualifies ([`plan`]) when its extent is a multiple of [`LANES`] and its body
//! is a sequence of float32 stores, each with a constant nonzero stride in the loop
//! variable, whose values are built from float32 expressions invariant in the loop
//! variable (computed once as scalar code and splatted — a padded conv2d input read
//! under its guard, for instance), loads with constant strides in it (unit-stride:
//! one vector load; any other stride: a gather of four scalar loads), `+ - * / min max`, and
//! `select(a < b, x, y)` over float32 values (lane by lane; `<= > >=` too), and
//! `select(guard, x, _)` where the guard is a conjunction of comparisons between
//! expressions affine in the loop variable, with no loads or calls: such a guard holds
//! for all four lanes of a group as soon as it holds for the first and the last
//! (a convex set of lanes), which code generation checks at run time, running the
//! group as scalar code otherwise. Stores of any stride other than 1 are scattered
//! lane by lane. A promoted accumulator is held as vectors along its *lane axis*
//! ([`lane_axis`]), the axis its vector stores advance along (the channel axis of a
//! channel-vectorized conv2d tile, the column axis of a column-vectorized one).
//! `a * b + c` becomes a fused multiply-add when code generation is asked for it
//! (`-fma=1`, the default, on a host with FMA); without it results are bit-identical
//! to scalar code.

use kiln_ir::DType;
use kiln_te::tir::affine::Affine;
use kiln_te::tir::{BinOp, BufferId, Expr, PrimFunc, Stmt, VarId};

/// Counters of what code generation did with `vectorized` loops (process-wide, for
/// tests and diagnostics; `KILN_SIMD_LOG=1` also logs each vectorized loop to stderr).
pub mod stats {
    use std::sync::atomic::{AtomicU64, Ordering};

    /// `vectorized` loops compiled as f32x4 code.
    pub static VECTOR_LOOPS: AtomicU64 = AtomicU64::new(0);
    /// `vectorized` loops left scalar (rejected by [`super::plan`]).
    pub static SCALAR_LOOPS: AtomicU64 = AtomicU64::new(0);
    /// Groups of lanes emitted as vector code.
    pub static VECTOR_GROUPS: AtomicU64 = AtomicU64::new(0);
    /// Groups of lanes emitted as scalar code because of an unaligned promoted access.
    pub static SCALAR_GROUPS: AtomicU64 = AtomicU64::new(0);

    /// The four counters, in declaration order.
    pub fn snapshot() -> [u64; 4] {
        [&VECTOR_LOOPS, &SCALAR_LOOPS, &VECTOR_GROUPS, &SCALAR_GROUPS]
            .map(|c| c.load(Ordering::Relaxed))
    }
}

fn log_enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("KILN_SIMD_LOG").is_some_and(|v| v != "0"))
}

/// Records a `vectorized` loop of `func` and whether it runs as vector code.
pub fn note_loop(func: &str, extent: i64, vector: bool) {
    use std::sync::atomic::Ordering::Relaxed;
    if vector {
        stats::VECTOR_LOOPS.fetch_add(1, Relaxed);
    } else {
        stats::SCALAR_LOOPS.fetch_add(1, Relaxed);
    }
    if log_enabled() {
        let how = if vector { "f32x4" } else { "scalar" };
        eprintln!("kiln simd: @{func}: vectorized loop of {extent} -> {how}");
    }
}

/// Records one group of lanes and whether it was emitted as vector code.
pub fn note_group(vector: bool) {
    use std::sync::atomic::Ordering::Relaxed;
    if vector {
        stats::VECTOR_GROUPS.fetch_add(1, Relaxed);
    } else {
        stats::SCALAR_GROUPS.fetch_add(1, Relaxed);
        if log_enabled() {
            eprintln!("kiln simd: group emitted as scalar lanes (unaligned promoted access)");
        }
    }
}

/// Lanes of a vector (Cranelift on x86-64 lowers 128-bit vectors only).
pub const LANES: i64 = 4;

/// The stride of integer expression `e` in `v`: `Some(0)` when `e` does not depend
/// on `v`, `None` when it is not affine in `v` with a constant stride.
pub fn stride(e: &Expr, v: VarId) -> Option<i64> {
    // Sub-terms free of `v` are opaque atoms (numbered apart, so their products are
    // not affine); `v` itself is the atom `None`.
    let mut others = 0usize;
    let form = Affine::of(e, &mut |x: &Expr| {
        if !mentions(x, v) {
            others += 1;
            Some(Some(others))
        } else {
            matches!(x, Expr::Var(y) if *y == v).then_some(None)
        }
    })?;
    i64::try_from(form.coeff(&None)).ok()
}

/// Whether `e` mentions variable `v`.
pub fn mentions(e: &Expr, v: VarId) -> bool {
    let mut hit = false;
    e.visit(&mut |x| hit |= matches!(x, Expr::Var(y) if *y == v));
    hit
}

/// The stride in `v` of the flattened (row-major) element offset of `indices` into a
/// buffer of `shape`, if every index has a constant stride in `v`.
pub fn flat_stride(shape: &[usize], indices: &[Expr], v: VarId) -> Option<i64> {
    if shape.len() != indices.len() {
        return None;
    }
    let mut flat: i64 = 0;
    for (ix, &ext) in indices.iter().zip(shape) {
        flat = flat
            .checked_mul(i64::try_from(ext).ok()?)?
            .checked_add(stride(ix, v)?)?;
    }
    Some(flat)
}

/// Whether a gather or scatter of lanes `flat` elements of `bytes` bytes apart has
/// byte offsets that fit a load's immediate.
fn offsets_fit(flat: i64, bytes: usize) -> bool {
    flat.checked_mul(bytes as i64 * (LANES - 1))
        .is_some_and(|o| i32::try_from(o).is_ok())
}

/// The axis `a` such that `indices` have stride 1 in `v` at `a` and 0 elsewhere.
pub fn axis_of(indices: &[Expr], v: VarId) -> Option<usize> {
    let mut axis = None;
    for (a, ix) in indices.iter().enumerate() {
        match stride(ix, v)? {
            0 => {}
            1 if axis.is_none() => axis = Some(a),
            _ => return None,
        }
    }
    axis
}

/// Whether `g` is a guard that holds for all lanes of a group when it holds for the
/// first and the last.
fn convex_guard(g: &Expr, v: VarId) -> bool {
    match g {
        Expr::Bool(_) => true,
        Expr::Binary {
            op: BinOp::And,
            lhs,
            rhs,
        } => convex_guard(lhs, v) && convex_guard(rhs, v),
        Expr::Binary {
            op: BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge | BinOp::Eq,
            lhs,
            rhs,
        } => {
            let mut pure = true;
            g.visit(&mut |x| pure &= !matches!(x, Expr::Load { .. } | Expr::Call { .. }));
            pure && stride(lhs, v).is_some() && stride(rhs, v).is_some()
        }
        _ => false,
    }
}

/// The comparison and operands of `cond` when it compares two float32 values (a
/// `select` on it picks lane by lane, as a relu does).
pub fn lanewise_cmp<'e>(f: &PrimFunc, cond: &'e Expr) -> Option<(BinOp, &'e Expr, &'e Expr)> {
    match cond {
        Expr::Binary {
            op: op @ (BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge),
            lhs,
            rhs,
        } if kiln_te::tir::verify::type_of(f, lhs)
            .is_ok_and(|t| t.dtype == DType::F32 && t.lanes == 1) =>
        {
            Some((*op, lhs, rhs))
        }
        _ => None,
    }
}

/// Checks a value expression; collects the guards of its `select`s.
fn value_ok<'e>(f: &PrimFunc, e: &'e Expr, v: VarId, guards: &mut Vec<&'e Expr>) -> bool {
    if !mentions(e, v) {
        // Invariant: scalar code, splatted.
        return kiln_te::tir::verify::type_of(f, e)
            .is_ok_and(|t| t.dtype == DType::F32 && t.lanes == 1);
    }
    match e {
        Expr::Load { buffer, indices } => f.buffer(*buffer).is_some_and(|b| {
            b.dtype == DType::F32
                && flat_stride(&b.shape, indices, v).is_some_and(|s| offsets_fit(s, 4))
        }),
        Expr::Binary {
            op: BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div | BinOp::Min | BinOp::Max,
            lhs,
            rhs,
        } => value_ok(f, lhs, v, guards) && value_ok(f, rhs, v, guards),
        Expr::Select { cond, then, else_ } if lanewise_cmp(f, cond).is_some() => {
            let (_, l, r) = lanewise_cmp(f, cond).expect("checked");
            [l, r, then, else_]
                .iter()
                .all(|x| value_ok(f, x, v, guards))
        }
        Expr::Select { cond, then, .. } => {
            guards.push(cond);
            convex_guard(cond, v) && value_ok(f, then, v, guards)
        }
        _ => false,
    }
}

/// The stores of a vectorizable body and the guards to check per group, or `None`
/// if loop `v` with body `body` must stay scalar.
pub fn plan<'s>(f: &PrimFunc, body: &'s Stmt, v: VarId) -> Option<Vec<&'s Expr>> {
    let mut stores: Vec<(BufferId, &[Expr], &Expr)> = vec![];
    let mut flat = vec![body];
    while let Some(s) = flat.pop() {
        match s {
            Stmt::Seq(xs) => flat.extend(xs.iter().rev()),
            Stmt::Store {
                buffer,
                indices,
                value,
            } => stores.push((*buffer, indices, value)),
            _ => return None,
        }
    }
    let mut guards = vec![];
    for &(buf, indices, value) in &stores {
        let b = f.buffer(buf)?;
        let flat = flat_stride(&b.shape, indices, v)?;
        if b.dtype != DType::F32 || flat == 0 || !offsets_fit(flat, 4) {
            return None;
        }
        if !value_ok(f, value, v, &mut guards) {
            return None;
        }
    }
    // Lanes must not depend on each other through memory: a stored buffer is only
    // accessed at the very indices of its (single) store.
    for &(buf, indices, _) in &stores {
        let mut ok = true;
        for &(b2, i2, value) in &stores {
            ok &= b2 != buf || i2 == indices;
            value.visit(&mut |x| {
                if let Expr::Load {
                    buffer,
                    indices: li,
                } = x
                {
                    ok &= *buffer != buf || li.as_slice() == indices;
                }
            });
        }
        if !ok {
            return None;
        }
    }
    Some(guards)
}

/// The lane axis of local buffer `buf` allocated around `body`: the axis along which
/// every store to it in a vectorizable `vectorized` loop advances (stride 1 there, 0
/// elsewhere), when there is at least one such store, they agree, and the axis has a
/// multiple of [`LANES`] elements (so the buffer, when promoted to registers, is best
/// held as vectors of [`LANES`] elements along that axis).
pub fn lane_axis(f: &PrimFunc, body: &Stmt, buf: BufferId) -> Option<usize> {
    let shape = &f.buffer(buf)?.shape;
    let mut axis: Option<Option<usize>> = None;
    body.visit(&mut |s| {
        if let Stmt::For {
            var,
            extent,
            kind: kiln_te::tir::ForKind::Vectorized,
            body,
            ..
        } = s
        {
            if extent % LANES == 0 && plan(f, body, *var).is_some() {
                body.visit(&mut |t| {
                    if let Stmt::Store {
                        buffer, indices, ..
                    } = t
                        && *buffer == buf
                    {
                        let a = axis_of(indices, *var);
                        axis = Some(match axis {
                            None => a,
                            Some(b) if b == a => a,
                            Some(_) => None,
                        });
                    }
                });
            }
        }
    });
    axis.flatten()
        .filter(|&a| shape.get(a).is_some_and(|&n| n % LANES as usize == 0))
}
