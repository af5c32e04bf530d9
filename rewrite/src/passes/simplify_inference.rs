//! `SimplifyInference` (level 0), following Relay's `simplify_inference.cc`:
//!
//! - `nn.batch_norm(x, gamma, beta, mean, var)` becomes
//!   `x * expand(scale) + expand(shift)` with `scale = gamma / sqrt(var + eps)` (just
//!   `1 / sqrt(var + eps)` without `scale=True`) and `shift = -mean * scale` (plus `beta`
//!   with `center=True`); `expand` is `expand_dims` to put the channel vector on `axis`
//!   (Relay's `ExpandBiasToMatchAxis`). The batch norm's tuple becomes
//!   `(normalized, mean, var)`, and projections out of it take the field directly.
//! - `nn.layer_norm(x, gamma, beta)` becomes `(x - mean(x)) / sqrt(var(x) + eps)`, times
//!   `gamma` and plus `beta` expanded to `axis`, with `mean`/`var` over `axis`
//!   (`keepdims`, biased variance), as Relay expands it.
//!
//! Kiln has no `nn.dropout` op (models are built for inference), so there is no dropout
//! to remove. The scale and shift are graph ops over the parameters; `FoldConstant`
//! folds them when the parameters are bound as constants.

use std::collections::HashSet;

use kiln_ir::op::{
    BatchNorm, Binary, BinaryKind, ExpandDims, LayerNorm, Reduce, ReduceKind, Unary, UnaryKind,
};
use kiln_ir::{DType, ExprId, ExprKind, Module, Op};

use super::{rewrite_module, scalar};
use crate::error::{Error, Result};
use crate::pass::{Pass, PassContext, PassInfo, PassOutcome};

/// Relay's `SimplifyInference`.
#[derive(Clone, Copy, Debug, Default)]
pub struct SimplifyInference;

impl Pass for SimplifyInference {
    fn info(&self) -> PassInfo {
        PassInfo {
            name: "SimplifyInference",
            opt_level: 0,
        }
    }

    fn run(&self, module: &Module, _ctx: &PassContext) -> Result<PassOutcome> {
        // Tuples this pass built for batch norms: projections out of them are resolved.
        let mut bn_tuples: HashSet<ExprId> = HashSet::new();
        let (mut batch_norms, mut layer_norms) = (0, 0);
        let out = rewrite_module(module, |m, _orig, id| match m.kind(id).clone() {
            ExprKind::Call { args, .. } => match m.kind(id).op().cloned() {
                Some(Op::BatchNorm(bn)) => {
                    let t = batch_norm(m, &bn, &args)?;
                    bn_tuples.insert(t);
                    batch_norms += 1;
                    Ok(t)
                }
                Some(Op::LayerNorm(ln)) => {
                    layer_norms += 1;
                    layer_norm(m, &ln, &args)
                }
                _ => Ok(id),
            },
            ExprKind::TupleGetItem { tuple, index } if bn_tuples.contains(&tuple) => {
                match m.kind(tuple) {
                    ExprKind::Tuple(fields) => Ok(fields[index]),
                    _ => Ok(id),
                }
            }
            _ => Ok(id),
        })?;
        Ok(PassOutcome::new(out)
            .detail("batch_norm", batch_norms)
            .detail("layer_norm", layer_norms))
    }
}

fn unary(m: &mut Module, kind: UnaryKind, x: ExprId) -> Result<ExprId> {
    Ok(m.call(Unary { kind }, &[x])?)
}

fn binary(m: &mut Module, kind: BinaryKind, a: ExprId, b: ExprId) -> Result<ExprId> {
    Ok(m.call(Binary { kind }, &[a, b])?)
}

/// The rank and dtype of `x` and `axis` made non-negative, or an error (the type rule
/// already accepted both, so this only guards against a malformed module).
fn rank_and_axis(m: &Module, x: ExprId, axis: i64, op: &str) -> Result<(usize, DType, usize)> {
    let t = m
        .ty(x)
        .as_tensor()
        .ok_or_else(|| Error::Unsupported(format!("{op} on a non-tensor argument")))?;
    let (rank, dtype) = (t.rank(), t.dtype);
    let a = if axis < 0 { axis + rank as i64 } else { axis };
    if a < 0 || a as usize >= rank {
        return Err(Error::InvalidArgument(format!(
            "{op}: axis {axis} is out of range for rank {rank}"
        )));
    }
    Ok((rank, dtype, a as usize))
}

/// Relay's `ExpandBiasToMatchAxis`: a vector along `axis` of a rank-`rank` tensor gets
/// trailing unit axes so it broadcasts there.
fn expand_to_axis(m: &mut Module, v: ExprId, rank: usize, axis: usize) -> Result<ExprId> {
    let trailing = rank - axis - 1;
    if trailing == 0 {
        return Ok(v);
    }
    Ok(m.call(
        ExpandDims {
            axis: 1,
            num_newaxis: trailing,
        },
        &[v],
    )?)
}

/// The expansion of one batch norm: the tuple `(x * scale + shift, mean, var)`.
fn batch_norm(m: &mut Module, bn: &BatchNorm, args: &[ExprId]) -> Result<ExprId> {
    let &[x, gamma, beta, mean, var] = args else {
        return Err(Error::InvalidArgument(format!(
            "nn.batch_norm takes 5 arguments, got {}",
            args.len()
        )));
    };
    let (rank, dtype, axis) = rank_and_axis(m, x, bn.axis, "nn.batch_norm")?;
    let eps = scalar(m, dtype, bn.epsilon.0);
    let std = binary(m, BinaryKind::Add, var, eps)?;
    let std = unary(m, UnaryKind::Sqrt, std)?;
    let one = scalar(m, dtype, 1.0);
    let mut scale = binary(m, BinaryKind::Divide, one, std)?;
    if bn.scale {
        scale = binary(m, BinaryKind::Multiply, gamma, scale)?;
    }
    let neg_mean = unary(m, UnaryKind::Negative, mean)?;
    let mut shift = binary(m, BinaryKind::Multiply, neg_mean, scale)?;
    if bn.center {
        shift = binary(m, BinaryKind::Add, shift, beta)?;
    }
    let scale = expand_to_axis(m, scale, rank, axis)?;
    let shift = expand_to_axis(m, shift, rank, axis)?;
    let out = binary(m, BinaryKind::Multiply, x, scale)?;
    let out = binary(m, BinaryKind::Add, out, shift)?;
    Ok(m.tuple(&[out, mean, var])?)
}

/// The expansion of one layer norm.
fn layer_norm(m: &mut Module, ln: &LayerNorm, args: &[ExprId]) -> Result<ExprId> {
    let &[x, gamma, beta] = args else {
        return Err(Error::InvalidArgument(format!(
            "nn.layer_norm takes 3 arguments, got {}",
            args.len()
        )));
    };
    let (rank, dtype, axis) = rank_and_axis(m, x, ln.axis, "nn.layer_norm")?;
    let mean_over_axis = Reduce {
        kind: ReduceKind::Mean,
        axis: Some(vec![axis as i64]),
        keepdims: true,
        exclude: false,
    };
    let mean = m.call(mean_over_axis.clone(), &[x])?;
    let centered = binary(m, BinaryKind::Subtract, x, mean)?;
    let squared = binary(m, BinaryKind::Multiply, centered, centered)?;
    let var = m.call(mean_over_axis, &[squared])?;
    let eps = scalar(m, dtype, ln.epsilon.0);
    let denom = binary(m, BinaryKind::Add, var, eps)?;
    let denom = unary(m, UnaryKind::Sqrt, denom)?;
    let mut out = binary(m, BinaryKind::Divide, centered, denom)?;
    if ln.scale {
        let g = expand_to_axis(m, gamma, rank, axis)?;
        out = binary(m, BinaryKind::Multiply, out, g)?;
    }
    if ln.center {
        let b = expand_to_axis(m, beta, rank, axis)?;
        out = binary(m, BinaryKind::Add, out, b)?;
    }
    Ok(out)
}
