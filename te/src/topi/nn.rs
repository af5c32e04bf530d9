//! Computes of the neural-network ops (`nn.*`), NCHW data and OIHW weights, following
//! `ir::op::nn`'s reference semantics.
//!
//! - `nn.conv2d`: a padding stage (`select` on the data bounds, inlined) read by one
//!   reduction over (input channel of the group, kernel row, kernel column), tagged
//!   [`Tag::Conv2d`] for the schedules' register tiling.
//! - `nn.max_pool2d`/`nn.avg_pool2d`: a reduction over the window whose taps outside the
//!   data read the dtype's lowest finite value (max; an empty window therefore yields it,
//!   as in TVM) or 0 (avg). The average divides by the count of data taps, or of taps
//!   inside the padded input with `count_include_pad`, both in closed form from the output
//!   position (ceil-mode overhang is never counted); an empty window gives 0.
//! - `nn.batch_norm`: field 0 is `(x - mean) / sqrt(var + eps) * gamma + beta`; fields 1
//!   and 2 copy the moving mean and variance through, as Relay does.
//! - `nn.softmax`: a max stage, a sum-of-exp stage and the quotient; `nn.layer_norm`: a
//!   sum stage (mean), a sum-of-squares stage (biased variance) and the normalisation.
//! - `nn.dense`, `nn.batch_matmul` (batch broadcast, both transposes), `nn.bias_add`,
//!   `nn.batch_flatten`, `nn.global_{avg,max}_pool2d`.

use kiln_ir::op::{
    BatchFlatten, BatchMatmul, BatchNorm, BiasAdd, Conv2d, Dense, GlobalPool2d, LayerNorm, Pool2d,
    PoolKind, ReduceKind, Softmax,
};
use kiln_ir::{DType, Type};

use crate::error::{Error, Result};
use crate::te::{self as te, Expr, Tensor};

use super::reduce::{insert_axis, reduce_over, remove_axis};
use super::{Ctx, Tag, TeValue, arg, idx, imm, norm_axis, out_tensor, out_tuple, unravel};

/// The four extents of a rank-4 shape, or an error naming `what`.
fn dims4(op: &str, what: &str, s: &[usize]) -> Result<[usize; 4]> {
    s.try_into().map_err(|_| {
        Error::InvalidArgument(format!("{op}: {what} must have rank 4, got shape {s:?}"))
    })
}

/// The smallest finite value of a dtype: what a max-pool window without data yields.
fn lowest(dtype: DType) -> Expr {
    match dtype {
        DType::F16 => imm(-65504.0, dtype),
        DType::BF16 => imm(half::bf16::MIN.to_f64(), dtype),
        DType::F32 => imm(f32::MIN as f64, dtype),
        DType::F64 => imm(f64::MIN, dtype),
        DType::I8 => imm(i8::MIN as f64, dtype),
        DType::I16 => imm(i16::MIN as f64, dtype),
        DType::U8 | DType::U16 | DType::U32 | DType::U64 | DType::Bool => imm(0.0, dtype),
        DType::I32 => imm(i32::MIN as f64, dtype),
        DType::I64 => Expr::Int {
            value: i64::MIN,
            dtype,
        },
    }
}

/// `nn.conv2d` (NCHW data, OIHW weight, strides, padding, dilation, groups).
pub fn conv2d(ctx: &mut Ctx, op: &Conv2d, args: &[TeValue], out: &Type) -> Result<Tensor> {
    const OP: &str = "nn.conv2d";
    let (x, w) = (arg(OP, args, 0)?, arg(OP, args, 1)?);
    let os = out_tensor(OP, out)?.shape.clone();
    let [n, c, h, wd] = dims4(OP, "data", x.shape())?;
    let [o, cg, kh, kw] = dims4(OP, "weight", w.shape())?;
    if op.groups == 0 || o % op.groups != 0 {
        return Err(Error::InvalidArgument(format!(
            "{OP}: groups={} does not divide {o} output channels",
            op.groups
        )));
    }
    let og = o / op.groups;
    let [pt, pl, pb, pr] = op.padding;
    let [sh, sw] = op.strides;
    let [dh, dw] = op.dilation;
    let data = if op.padding == [0; 4] {
        x
    } else {
        let ps = [n, c, h + pt + pb, wd + pl + pr];
        let zero = imm(0.0, x.dtype());
        ctx.padding(&ps, "pad_temp", |i| {
            let (y, xx) = (i[2].clone(), i[3].clone());
            let inside = y
                .clone()
                .ge(idx(pt))
                .and(y.clone().lt(idx(pt + h)))
                .and(xx.clone().ge(idx(pl)))
                .and(xx.clone().lt(idx(pl + wd)));
            te::select(
                inside,
                x.at(&[i[0].clone(), i[1].clone(), y - idx(pt), xx - idx(pl)]),
                zero,
            )
        })?
    };
    let rc = ctx.reduce_axis(cg, "rc")?;
    let ry = ctx.reduce_axis(kh, "ry")?;
    let rx = ctx.reduce_axis(kw, "rx")?;
    let groups = op.groups;
    ctx.tagged(Tag::Conv2d, &os, "conv2d_nchw", |i| {
        let ic = if groups == 1 {
            Expr::Var(rc)
        } else if og == 1 {
            // One output channel per group (depthwise when `cg` is 1): no division.
            scaled(&i[1], cg) + Expr::Var(rc)
        } else {
            i[1].clone().floordiv(idx(og)) * idx(cg) + Expr::Var(rc)
        };
        let iy = scaled(&i[2], sh) + scaled(&Expr::Var(ry), dh);
        let ix = scaled(&i[3], sw) + scaled(&Expr::Var(rx), dw);
        te::sum(
            data.at(&[i[0].clone(), ic, iy, ix])
                * w.at(&[i[1].clone(), Expr::Var(rc), Expr::Var(ry), Expr::Var(rx)]),
            &[rc, ry, rx],
        )
    })
}

/// `e * k`, or `e` when `k` is 1.
fn scaled(e: &Expr, k: usize) -> Expr {
    if k == 1 {
        e.clone()
    } else {
        e.clone() * idx(k)
    }
}

/// `nn.batch_norm` in inference form: a tuple (normalized, moving_mean, moving_var).
pub fn batch_norm(ctx: &mut Ctx, op: &BatchNorm, args: &[TeValue], out: &Type) -> Result<TeValue> {
    const OP: &str = "nn.batch_norm";
    let x = arg(OP, args, 0)?;
    let [gamma, beta, mean, var] = [1, 2, 3, 4].map(|i| arg(OP, args, i));
    let (gamma, beta, mean, var) = (gamma?, beta?, mean?, var?);
    let fields = out_tuple(OP, out)?;
    if fields.len() != 3 {
        return Err(Error::InvalidArgument(format!(
            "{OP}: expected a 3-field result, got {out}"
        )));
    }
    let axis = norm_axis(OP, op.axis, x.rank())?;
    let dtype = x.dtype();
    let (eps, scale, center) = (op.epsilon.0, op.scale, op.center);
    let y = ctx.compute(&fields[0].shape, "T_batch_norm", |i| {
        let ch = [i[axis].clone()];
        let sd = te::sqrt(var.at(&ch) + imm(eps, dtype));
        let mut r = (x.at(i) - mean.at(&ch)) / sd;
        if scale {
            r = r * gamma.at(&ch);
        }
        if center {
            r = r + beta.at(&ch);
        }
        r
    })?;
    let m = ctx.compute(&fields[1].shape, "T_batch_norm_mean", |i| mean.at(i))?;
    let v = ctx.compute(&fields[2].shape, "T_batch_norm_var", |i| var.at(i))?;
    Ok(TeValue::Tuple(vec![
        TeValue::Tensor(y),
        TeValue::Tensor(m),
        TeValue::Tensor(v),
    ]))
}

/// How many of the `k` taps `p * s - pad + t * d` (`t` in `0..k`) lie in `0..input`, as
/// an int32 expression of the output position `p`.
fn tap_count(p: &Expr, s: usize, pad: usize, d: usize, k: usize, input: usize) -> Expr {
    // ceil(a / d) = floordiv(a + d - 1, d) for every integer a (d > 0).
    let ps = scaled(p, s);
    let lo = (idx(pad + d - 1) - ps.clone()).floordiv(idx(d)).max(idx(0));
    let hi = (idx(input + pad + d - 1) - ps).floordiv(idx(d)).min(idx(k));
    (hi - lo).max(idx(0))
}

/// `nn.max_pool2d`, `nn.avg_pool2d`.
pub fn pool2d(ctx: &mut Ctx, op: &Pool2d, args: &[TeValue], out: &Type) -> Result<Tensor> {
    let name = match op.kind {
        PoolKind::Max => "nn.max_pool2d",
        PoolKind::Avg => "nn.avg_pool2d",
    };
    let x = arg(name, args, 0)?;
    let os = out_tensor(name, out)?.shape.clone();
    let [_, _, h, w] = dims4(name, "data", x.shape())?;
    let [kh, kw] = op.pool_size;
    let [sh, sw] = op.strides;
    let [dh, dw] = op.dilation;
    let [pt, pl, pb, pr] = op.padding;
    let dtype = x.dtype();
    let ry = ctx.reduce_axis(kh, "ry")?;
    let rx = ctx.reduce_axis(kw, "rx")?;
    // The data element under tap (ry, rx) of output position i, or `fill` outside.
    let tap = move |i: &[Expr], fill: Expr| {
        let iy = scaled(&i[2], sh) + scaled(&Expr::Var(ry), dh) - idx(pt);
        let ix = scaled(&i[3], sw) + scaled(&Expr::Var(rx), dw) - idx(pl);
        let inside = iy
            .clone()
            .ge(idx(0))
            .and(iy.clone().lt(idx(h)))
            .and(ix.clone().ge(idx(0)))
            .and(ix.clone().lt(idx(w)));
        te::select(inside, x.at(&[i[0].clone(), i[1].clone(), iy, ix]), fill)
    };
    match op.kind {
        PoolKind::Max => ctx.tagged(Tag::Reduce, &os, "pool_max", |i| {
            te::max(tap(i, lowest(dtype)), &[ry, rx])
        }),
        PoolKind::Avg => {
            let sum = ctx.tagged(Tag::Reduce, &os, "pool_sum", |i| {
                te::sum(tap(i, imm(0.0, dtype)), &[ry, rx])
            })?;
            let include_pad = op.count_include_pad;
            ctx.compute(&os, "pool_avg", |i| {
                let count = if include_pad {
                    tap_count(&i[2], sh, 0, dh, kh, h + pt + pb)
                        * tap_count(&i[3], sw, 0, dw, kw, w + pl + pr)
                } else {
                    tap_count(&i[2], sh, pt, dh, kh, h) * tap_count(&i[3], sw, pl, dw, kw, w)
                };
                te::select(
                    count.clone().equal(idx(0)),
                    imm(0.0, dtype),
                    sum.at(i) / te::cast(dtype, count),
                )
            })
        }
    }
}

/// `nn.global_avg_pool2d`, `nn.global_max_pool2d`.
pub fn global_pool2d(
    ctx: &mut Ctx,
    op: &GlobalPool2d,
    args: &[TeValue],
    out: &Type,
) -> Result<Tensor> {
    let name = match op.kind {
        PoolKind::Max => "nn.global_max_pool2d",
        PoolKind::Avg => "nn.global_avg_pool2d",
    };
    let x = arg(name, args, 0)?;
    let os = out_tensor(name, out)?.shape.clone();
    let [_, _, h, w] = dims4(name, "data", x.shape())?;
    let ry = ctx.reduce_axis(h, "ry")?;
    let rx = ctx.reduce_axis(w, "rx")?;
    let read = move |i: &[Expr]| x.at(&[i[0].clone(), i[1].clone(), ry.expr(), rx.expr()]);
    match op.kind {
        PoolKind::Max => ctx.tagged(Tag::Reduce, &os, "global_pool_max", |i| {
            te::max(read(i), &[ry, rx])
        }),
        PoolKind::Avg => {
            let sum = ctx.tagged(Tag::Reduce, &os, "global_pool_sum", |i| {
                te::sum(read(i), &[ry, rx])
            })?;
            let dtype = x.dtype();
            ctx.compute(&os, "global_pool_avg", |i| {
                sum.at(i) / imm((h * w) as f64, dtype)
            })
        }
    }
}

/// `nn.dense`: `out[..., n] = sum_k x[..., k] * w[n, k]`.
pub fn dense(ctx: &mut Ctx, _op: &Dense, args: &[TeValue], out: &Type) -> Result<Tensor> {
    const OP: &str = "nn.dense";
    let (x, w) = (arg(OP, args, 0)?, arg(OP, args, 1)?);
    let os = out_tensor(OP, out)?.shape.clone();
    let r = x.rank();
    if r == 0 || w.rank() != 2 {
        return Err(Error::InvalidArgument(format!(
            "{OP}: data {:?} and weight {:?} do not form a dense layer",
            x.shape(),
            w.shape()
        )));
    }
    let k = ctx.reduce_axis(w.shape()[1], "k")?;
    ctx.tagged(Tag::Dense, &os, "T_dense", |i| {
        let mut xi = i[..r - 1].to_vec();
        xi.push(k.expr());
        te::sum(x.at(&xi) * w.at(&[i[r - 1].clone(), k.expr()]), &[k])
    })
}

/// `nn.bias_add`: `x + bias[axis index]`.
pub fn bias_add(ctx: &mut Ctx, op: &BiasAdd, args: &[TeValue], out: &Type) -> Result<Tensor> {
    const OP: &str = "nn.bias_add";
    let (x, b) = (arg(OP, args, 0)?, arg(OP, args, 1)?);
    let os = out_tensor(OP, out)?.shape.clone();
    let axis = norm_axis(OP, op.axis, x.rank())?;
    ctx.compute(&os, "T_add", |i| x.at(i) + b.at(&[i[axis].clone()]))
}

/// `nn.batch_flatten`: `[n, rest]` in row-major order.
pub fn batch_flatten(
    ctx: &mut Ctx,
    _op: &BatchFlatten,
    args: &[TeValue],
    out: &Type,
) -> Result<Tensor> {
    const OP: &str = "nn.batch_flatten";
    let x = arg(OP, args, 0)?;
    let os = out_tensor(OP, out)?.shape.clone();
    ctx.compute(&os, "T_batch_flatten", |i| {
        let mut xi = vec![i[0].clone()];
        xi.extend(unravel(i[1].clone(), &x.shape()[1..]));
        x.at(&xi)
    })
}

/// `nn.softmax` along `axis`: `exp(x - max) / sum(exp(x - max))`.
pub fn softmax(ctx: &mut Ctx, op: &Softmax, args: &[TeValue], out: &Type) -> Result<Tensor> {
    const OP: &str = "nn.softmax";
    let x = arg(OP, args, 0)?;
    let os = out_tensor(OP, out)?.shape.clone();
    let axis = norm_axis(OP, op.axis, x.rank())?;
    let len = x.shape()[axis];
    let rs = remove_axis_shape(x.shape(), axis);
    // The max is computed once per reader (the sum and the quotient), so every
    // intermediate stage has one consumer and a GPU schedule can compute it per thread.
    let max_stage = |ctx: &mut Ctx, name: &str| {
        reduce_over(ctx, ReduceKind::Max, &rs, len, name, |i, r| {
            x.at(&insert_axis(i, axis, r))
        })
    };
    let m_sum = max_stage(ctx, "T_softmax_max")?;
    let m_out = max_stage(ctx, "T_softmax_maxelem")?;
    let s = reduce_over(
        ctx,
        ReduceKind::Sum,
        &rs,
        len,
        "T_softmax_expsum",
        |i, r| te::exp(x.at(&insert_axis(i, axis, r)) - m_sum.at(i)),
    )?;
    ctx.compute(&os, "T_softmax_norm", |i| {
        let ri = remove_axis(i, axis);
        te::exp(x.at(i) - m_out.at(&ri)) / s.at(&ri)
    })
}

/// `shape` without dimension `axis`.
fn remove_axis_shape(shape: &[usize], axis: usize) -> Vec<usize> {
    let mut s = shape.to_vec();
    s.remove(axis);
    s
}

/// `nn.layer_norm` along `axis` with the biased variance.
pub fn layer_norm(ctx: &mut Ctx, op: &LayerNorm, args: &[TeValue], out: &Type) -> Result<Tensor> {
    const OP: &str = "nn.layer_norm";
    let x = arg(OP, args, 0)?;
    let (gamma, beta) = (arg(OP, args, 1)?, arg(OP, args, 2)?);
    let os = out_tensor(OP, out)?.shape.clone();
    let axis = norm_axis(OP, op.axis, x.rank())?;
    let len = x.shape()[axis];
    let dtype = x.dtype();
    let n = imm(len as f64, dtype);
    let rs = remove_axis_shape(x.shape(), axis);
    // The sum is computed once per reader (one consumer per intermediate stage).
    let sum_stage = |ctx: &mut Ctx, name: &str| {
        reduce_over(ctx, ReduceKind::Sum, &rs, len, name, |i, r| {
            x.at(&insert_axis(i, axis, r))
        })
    };
    let s1_var = sum_stage(ctx, "T_layer_norm_sum")?;
    let s1 = sum_stage(ctx, "T_layer_norm_mean_sum")?;
    let n2 = n.clone();
    let s2 = reduce_over(
        ctx,
        ReduceKind::Sum,
        &rs,
        len,
        "T_layer_norm_sqsum",
        |i, r| {
            let d = x.at(&insert_axis(i, axis, r)) - s1_var.at(i) / n2;
            d.clone() * d
        },
    )?;
    let (eps, scale, center) = (op.epsilon.0, op.scale, op.center);
    ctx.compute(&os, "T_layer_norm", |i| {
        let ri = remove_axis(i, axis);
        let ch = [i[axis].clone()];
        let mean = s1.at(&ri) / n.clone();
        let sd = te::sqrt(s2.at(&ri) / n + imm(eps, dtype));
        let mut r = (x.at(i) - mean) / sd;
        if scale {
            r = r * gamma.at(&ch);
        }
        if center {
            r = r + beta.at(&ch);
        }
        r
    })
}

/// `nn.batch_matmul` with batch broadcasting and either operand transposed.
pub fn batch_matmul(
    ctx: &mut Ctx,
    op: &BatchMatmul,
    args: &[TeValue],
    out: &Type,
) -> Result<Tensor> {
    const OP: &str = "nn.batch_matmul";
    let (a, b) = (arg(OP, args, 0)?, arg(OP, args, 1)?);
    let os = out_tensor(OP, out)?.shape.clone();
    if a.rank() != 3 || b.rank() != 3 {
        return Err(Error::InvalidArgument(format!(
            "{OP}: arguments must have rank 3, got {:?} and {:?}",
            a.shape(),
            b.shape()
        )));
    }
    let klen = if op.transpose_a {
        a.shape()[1]
    } else {
        a.shape()[2]
    };
    let k = ctx.reduce_axis(klen, "k")?;
    let (ta, tb) = (op.transpose_a, op.transpose_b);
    let (a1, b1) = (a.shape()[0] == 1, b.shape()[0] == 1);
    ctx.tagged(Tag::BatchMatmul, &os, "T_batch_matmul", |i| {
        let ab = if a1 { idx(0) } else { i[0].clone() };
        let bb = if b1 { idx(0) } else { i[0].clone() };
        let ai = if ta {
            [ab, k.expr(), i[1].clone()]
        } else {
            [ab, i[1].clone(), k.expr()]
        };
        let bi = if tb {
            [bb, i[2].clone(), k.expr()]
        } else {
            [bb, k.expr(), i[2].clone()]
        };
        te::sum(a.at(&ai) * b.at(&bi), &[k])
    })
}
