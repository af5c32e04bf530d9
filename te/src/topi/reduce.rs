//! Computes of the reductions `sum`, `mean`, `max`, `min`, `prod` over axes, with `keepdims`
//! and `exclude` (which axes are reduced is `Reduce::reduced_axes`, the op's own rule).
//!
//! Sums start at 0 and accumulate in the dtype (float32 in `f32`; integers wrap, as the
//! reference's wrapping `i64` does modulo the width); `max`/`min` start at -inf/+inf
//! (the dtype's extreme for integers); products start at 1. `mean` is the sum stage divided by the element
//! count in an injective stage. Reducing over no axis is a copy.

use kiln_ir::Type;
use kiln_ir::op::{Reduce, ReduceKind};

use crate::error::{Error, Result};
use crate::te::{self as te, Expr, IterVar, Tensor};

use super::{Ctx, Tag, TeValue, arg, imm, out_tensor};

/// `sum`, `mean`, `max`, `min`, `prod`.
pub fn reduce(ctx: &mut Ctx, op: &Reduce, args: &[TeValue], out: &Type) -> Result<Tensor> {
    let name = op.kind.name();
    let x = arg(name, args, 0)?;
    let out_shape = out_tensor(name, out)?.shape.clone();
    let in_ty = kiln_ir::TensorType::new(x.shape().to_vec(), x.dtype());
    let mask = op
        .reduced_axes(&in_ty)
        .map_err(|e| Error::InvalidArgument(e.to_string()))?;
    let mut raxes: Vec<(usize, IterVar)> = vec![];
    for (d, &r) in mask.iter().enumerate() {
        if r {
            raxes.push((d, ctx.reduce_axis(x.shape()[d], &format!("r{d}"))?));
        }
    }
    let keepdims = op.keepdims;
    let rank = x.rank();
    // The input index of output index `i` (reduced dims read their reduction axis).
    let input_index = move |i: &[Expr], raxes: &[(usize, IterVar)]| -> Vec<Expr> {
        let mut k = 0;
        (0..rank)
            .map(|d| {
                if let Some((_, r)) = raxes.iter().find(|(rd, _)| *rd == d) {
                    if keepdims {
                        k += 1;
                    }
                    Expr::Var(*r)
                } else {
                    let e = i[k].clone();
                    k += 1;
                    e
                }
            })
            .collect()
    };
    if raxes.is_empty() {
        return ctx.compute(&out_shape, &format!("T_{name}"), |i| {
            x.at(&input_index(i, &[]))
        });
    }
    let axes: Vec<IterVar> = raxes.iter().map(|(_, r)| *r).collect();
    let kind = op.kind;
    let red = ctx.tagged(Tag::Reduce, &out_shape, &format!("T_{name}_red"), |i| {
        let v = x.at(&input_index(i, &raxes));
        match kind {
            ReduceKind::Sum | ReduceKind::Mean => te::sum(v, &axes),
            ReduceKind::Max => te::max(v, &axes),
            ReduceKind::Min => te::min(v, &axes),
            ReduceKind::Prod => te::prod(v, &axes),
        }
    })?;
    if kind != ReduceKind::Mean {
        return Ok(red);
    }
    let count: usize = raxes.iter().map(|(d, _)| x.shape()[*d]).product();
    let dtype = x.dtype();
    ctx.compute(&out_shape, "T_mean", |i| {
        red.at(i) / imm(count as f64, dtype)
    })
}

/// `sum` of `value(r)` over a fresh reduction axis `r` of `extent`, as a compute of
/// `shape` whose body is built by `body(i, r)`: a helper for the norms and softmax.
pub(crate) fn reduce_over(
    ctx: &mut Ctx,
    kind: ReduceKind,
    shape: &[usize],
    extent: usize,
    name: &str,
    body: impl FnOnce(&[Expr], Expr) -> Expr,
) -> Result<Tensor> {
    let r = ctx.reduce_axis(extent, &format!("{name}_r"))?;
    ctx.tagged(Tag::Reduce, shape, name, |i| {
        let v = body(i, Expr::Var(r));
        match kind {
            ReduceKind::Sum | ReduceKind::Mean => te::sum(v, &[r]),
            ReduceKind::Max => te::max(v, &[r]),
            ReduceKind::Min => te::min(v, &[r]),
            ReduceKind::Prod => te::prod(v, &[r]),
        }
    })
}

/// The index into the full shape from an index with `axis` removed, reading `at` on
/// that axis.
pub(crate) fn insert_axis(i: &[Expr], axis: usize, at: Expr) -> Vec<Expr> {
    let mut v = i[..axis].to_vec();
    v.push(at);
    v.extend_from_slice(&i[axis..]);
    v
}

/// The index with `axis` removed.
pub(crate) fn remove_axis(i: &[Expr], axis: usize) -> Vec<Expr> {
    let mut v = i.to_vec();
    v.remove(axis);
    v
}
