//! Computes of the data-movement ops: `reshape`, `transpose`, `squeeze`, `expand_dims`,
//! `concatenate`, `split`, `strided_slice`, `take`. Each output element reads exactly one
//! input element, so these are exact for every dtype. Output shapes come from the graph
//! IR's type rule (the result type); the index maps follow `ir::op::transform`.
//!
//! Reshapes that only insert or drop extent-1 axes (every `squeeze` and `expand_dims`,
//! many `reshape`s) map indices directly; other reshapes go through the row-major flat
//! index (`floordiv`/`floormod`). `concatenate` selects the field by position along the
//! axis; `take` clamps (`clip`) or wraps (`wrap`) each index as the reference does.

use kiln_ir::Type;
use kiln_ir::op::{
    Concatenate, ExpandDims, Reshape, Split, Squeeze, StridedSlice, Take, TakeMode, Transpose,
};

use crate::error::{Error, Result};
use crate::te::{self as te, Expr, Tensor};

use super::{Ctx, TeValue, arg, idx, imm, norm_axis, out_tensor, out_tuple, ravel, unravel};

/// `x` read in row-major order into `shape` (same element count).
fn reshape_to(ctx: &mut Ctx, x: Tensor, shape: &[usize], name: &str) -> Result<Tensor> {
    let non_unit = |s: &[usize]| s.iter().copied().filter(|&d| d != 1).collect::<Vec<_>>();
    if non_unit(x.shape()) == non_unit(shape) {
        // Only extent-1 axes differ: the other axes map one to one.
        let xs = x.shape().to_vec();
        let keep: Vec<usize> = (0..shape.len()).filter(|&d| shape[d] != 1).collect();
        return ctx.compute(shape, name, |i| {
            let mut k = keep.iter();
            let xi: Vec<Expr> = xs
                .iter()
                .map(|&d| {
                    if d == 1 {
                        idx(0)
                    } else {
                        k.next().map_or_else(|| idx(0), |&o| i[o].clone())
                    }
                })
                .collect();
            x.at(&xi)
        });
    }
    let out_shape = shape.to_vec();
    ctx.compute(shape, name, |i| {
        x.at(&unravel(ravel(i, &out_shape), x.shape()))
    })
}

/// `reshape`.
pub fn reshape(ctx: &mut Ctx, _op: &Reshape, args: &[TeValue], out: &Type) -> Result<Tensor> {
    let x = arg("reshape", args, 0)?;
    let os = out_tensor("reshape", out)?.shape.clone();
    reshape_to(ctx, x, &os, "T_reshape")
}

/// `squeeze`.
pub fn squeeze(ctx: &mut Ctx, _op: &Squeeze, args: &[TeValue], out: &Type) -> Result<Tensor> {
    let x = arg("squeeze", args, 0)?;
    let os = out_tensor("squeeze", out)?.shape.clone();
    reshape_to(ctx, x, &os, "T_squeeze")
}

/// `expand_dims`.
pub fn expand_dims(
    ctx: &mut Ctx,
    _op: &ExpandDims,
    args: &[TeValue],
    out: &Type,
) -> Result<Tensor> {
    let x = arg("expand_dims", args, 0)?;
    let os = out_tensor("expand_dims", out)?.shape.clone();
    reshape_to(ctx, x, &os, "T_expand_dims")
}

/// `transpose` (no axes: reversed).
pub fn transpose(ctx: &mut Ctx, op: &Transpose, args: &[TeValue], out: &Type) -> Result<Tensor> {
    let x = arg("transpose", args, 0)?;
    let os = out_tensor("transpose", out)?.shape.clone();
    let rank = x.rank();
    let perm: Vec<usize> = match &op.axes {
        None => (0..rank).rev().collect(),
        Some(axes) => axes
            .iter()
            .map(|&a| norm_axis("transpose", a, rank))
            .collect::<Result<_>>()?,
    };
    if perm.len() != rank {
        return Err(Error::InvalidArgument(format!(
            "transpose: axes {perm:?} do not permute {rank} axes"
        )));
    }
    ctx.compute(&os, "T_transpose", |i| {
        let mut xi = vec![idx(0); rank];
        for (d, &p) in perm.iter().enumerate() {
            xi[p] = i[d].clone();
        }
        x.at(&xi)
    })
}

/// `concatenate` of a tuple's fields along `axis`.
pub fn concatenate(
    ctx: &mut Ctx,
    op: &Concatenate,
    args: &[TeValue],
    out: &Type,
) -> Result<Tensor> {
    let fields: Vec<Tensor> = match args.first() {
        Some(TeValue::Tuple(v)) => v
            .iter()
            .map(|f| f.tensor("concatenate field"))
            .collect::<Result<_>>()?,
        _ => {
            return Err(Error::InvalidArgument(
                "concatenate: argument 0 must be a tuple".into(),
            ));
        }
    };
    let first = fields
        .first()
        .ok_or_else(|| Error::InvalidArgument("concatenate: empty tuple".into()))?;
    let os = out_tensor("concatenate", out)?.shape.clone();
    let axis = norm_axis("concatenate", op.axis, first.rank())?;
    let mut offsets = Vec::with_capacity(fields.len());
    let mut off = 0;
    for f in &fields {
        offsets.push(off);
        off += f.shape()[axis];
    }
    let dtype = first.dtype();
    ctx.compute(&os, "T_concat", |i| {
        let at = i[axis].clone();
        let read = |k: usize| {
            let mut fi = i.to_vec();
            fi[axis] = if offsets[k] == 0 {
                at.clone()
            } else {
                at.clone() - idx(offsets[k])
            };
            fields[k].at(&fi)
        };
        // A balanced tree of selects (depth log2 of the field count, so a concatenation
        // of thousands of fields does not nest thousands deep); each leaf states both of
        // its bounds, so the read it guards is provably in bounds.
        let leaf = |k: usize| {
            let end = offsets[k] + fields[k].shape()[axis];
            let cond = if offsets[k] == 0 {
                at.clone().lt(idx(end))
            } else {
                at.clone().ge(idx(offsets[k])).and(at.clone().lt(idx(end)))
            };
            te::select(cond, read(k), imm(0.0, dtype))
        };
        let mut level: Vec<(usize, Expr)> = (0..fields.len()).map(|k| (k, leaf(k))).collect();
        while level.len() > 1 {
            let mut next = Vec::with_capacity(level.len().div_ceil(2));
            let mut it = level.into_iter();
            while let Some((lo, left)) = it.next() {
                match it.next() {
                    Some((mid, right)) => {
                        let cond = at.clone().lt(idx(offsets[mid]));
                        next.push((lo, te::select(cond, left, right)));
                    }
                    None => next.push((lo, left)),
                }
            }
            level = next;
        }
        level
            .pop()
            .map(|(_, e)| e)
            .unwrap_or_else(|| imm(0.0, dtype))
    })
}

/// `split`: one stage per piece, a tuple of them.
pub fn split(ctx: &mut Ctx, op: &Split, args: &[TeValue], out: &Type) -> Result<TeValue> {
    let x = arg("split", args, 0)?;
    let fields = out_tuple("split", out)?;
    let axis = norm_axis("split", op.axis, x.rank())?;
    let mut start = 0;
    let mut pieces = Vec::with_capacity(fields.len());
    for (k, f) in fields.iter().enumerate() {
        let s = start;
        let t = ctx.compute(&f.shape, &format!("T_split{k}"), |i| {
            let mut xi = i.to_vec();
            if s != 0 {
                xi[axis] = i[axis].clone() + idx(s);
            }
            x.at(&xi)
        })?;
        pieces.push(TeValue::Tensor(t));
        start += f.shape.get(axis).copied().unwrap_or(0);
    }
    Ok(TeValue::Tuple(pieces))
}

/// numpy's start index of the slice `begin:end:stride` of an axis of extent `dim`
/// (the same clamping as the reference: negative bounds count from the end, then clamp
/// to `[0, dim]` for positive strides and `[-1, dim - 1]` for negative ones).
fn slice_start(begin: Option<i64>, stride: i64, dim: usize) -> i64 {
    let n = dim as i128;
    let (lo, hi) = if stride > 0 { (0, n) } else { (-1, n - 1) };
    let bound = |x: i64| {
        let x = x as i128;
        (if x < 0 { x + n } else { x }).clamp(lo, hi)
    };
    (if stride > 0 {
        begin.map_or(0, bound)
    } else {
        begin.map_or(n - 1, bound)
    }) as i64
}

/// `strided_slice`: output index `i` reads `start + i * stride` on every axis.
pub fn strided_slice(
    ctx: &mut Ctx,
    op: &StridedSlice,
    args: &[TeValue],
    out: &Type,
) -> Result<Tensor> {
    const OP: &str = "strided_slice";
    let x = arg(OP, args, 0)?;
    let os = out_tensor(OP, out)?.shape.clone();
    let rank = x.rank();
    let strides = op.strides.clone().unwrap_or_default();
    let longest = op.begin.len().max(op.end.len()).max(strides.len());
    let axes: Vec<usize> = match &op.axes {
        Some(a) => a
            .iter()
            .map(|&a| norm_axis(OP, a, rank))
            .collect::<Result<_>>()?,
        None => (0..longest.min(rank)).collect(),
    };
    let mut plan: Vec<(i64, i64)> = vec![(0, 1); rank];
    for (k, &axis) in axes.iter().enumerate() {
        let stride = strides.get(k).copied().unwrap_or(1);
        if stride == 0 {
            return Err(Error::InvalidArgument(format!(
                "{OP}: stride 0 on axis {axis}"
            )));
        }
        plan[axis] = (
            slice_start(op.begin.get(k).copied(), stride, x.shape()[axis]),
            stride,
        );
    }
    let mut terms = Vec::with_capacity(rank);
    for (d, &(start, stride)) in plan.iter().enumerate() {
        // An axis taking one element never steps (its stride may be huge).
        let stride = if os[d] <= 1 { 0 } else { stride };
        let fits = |v: i64| i32::try_from(v).is_ok();
        let last = start as i128 + stride as i128 * (os[d] as i128 - 1);
        if !fits(start) || !fits(stride) || i32::try_from(last).is_err() {
            return Err(Error::InvalidArgument(format!(
                "{OP}: axis {d} slice (start {start}, stride {stride}) does not fit int32 indices"
            )));
        }
        terms.push((start as i32, stride as i32));
    }
    ctx.compute(&os, "T_strided_slice", |i| {
        let xi: Vec<Expr> = terms
            .iter()
            .zip(i)
            .map(|(&(start, stride), ix)| {
                let stepped = match stride {
                    0 => None,
                    1 => Some(ix.clone()),
                    s => Some(ix.clone() * Expr::int(s)),
                };
                match (stepped, start) {
                    (None, s) => Expr::int(s),
                    (Some(e), 0) => e,
                    (Some(e), s) => e + Expr::int(s),
                }
            })
            .collect();
        x.at(&xi)
    })
}

/// `take` along `axis` (no axis: from the flattened data), clamping or wrapping indices.
pub fn take(ctx: &mut Ctx, op: &Take, args: &[TeValue], out: &Type) -> Result<Tensor> {
    let (x, ind) = (arg("take", args, 0)?, arg("take", args, 1)?);
    let os = out_tensor("take", out)?.shape.clone();
    let ri = ind.rank();
    let axis = match op.axis {
        None => None,
        Some(a) => Some(norm_axis("take", a, x.rank())?),
    };
    let extent = match axis {
        None => x.shape().iter().product::<usize>(),
        Some(p) => x.shape()[p],
    };
    let it = ind.dtype();
    let mode = op.mode;
    ctx.compute(&os, "T_take", |i| {
        let p = axis.unwrap_or(0);
        let raw = ind.at(&i[p..p + ri]);
        let n = Expr::Int {
            value: extent as i64,
            dtype: it,
        };
        let j = match mode {
            TakeMode::Clip => raw
                .max(Expr::Int {
                    value: 0,
                    dtype: it,
                })
                .min(Expr::Int {
                    value: extent as i64 - 1,
                    dtype: it,
                }),
            TakeMode::Wrap => raw.floormod(n),
        };
        let j = if it == kiln_ir::DType::I32 {
            j
        } else {
            te::cast(kiln_ir::DType::I32, j)
        };
        match axis {
            None => x.at(&unravel(j, x.shape())),
            Some(p) => {
                let mut xi = i[..p].to_vec();
                xi.push(j);
                xi.extend_from_slice(&i[p + ri..]);
                x.at(&xi)
            }
        }
    })
}
