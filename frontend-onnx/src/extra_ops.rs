//! More ONNX ops built from existing graph-IR ops, each exact up to float summation
//! order: `RMSNormalization`, `NegativeLogLikelihoodLoss` and `SoftmaxCrossEntropyLoss`
//! (the class picked by comparing the target with an index constant), `Trilu` (a
//! constant mask), `GatherElements` (a `take` from the flattened data at computed flat
//! indices), `CumSum`/`CumProd` (a masked sum/product over a second copy of the axis),
//! `Hardmax`, `Shrink`, `EyeLike`, `MeanVarianceNormalization`, `GroupNormalization`,
//! `OneHot` (a comparison with an index constant), `Compress` (a `take` at the
//! positions of a condition known at import), `GatherND` (a `take` of rows at computed
//! row indices) and `ScatterElements`/`Scatter`/`ScatterND` (each output row combined
//! with the updates whose computed row index equals its own, through a bool match
//! matrix: exact for finite values), `QuantizeLinear`/`DequantizeLinear` (per tensor,
//! per axis, blocked), `RotaryEmbedding` and `Attention` (as ONNX's reference: scaled
//! `Q K^T`, softcap, the additive bias of the mask and of the causal / window / padding
//! rules — built as a constant — softmax with fully masked rows zeroed, times `V`).

use kiln_ir::op::{self, BinaryKind as B, ReduceKind as R, UnaryKind as U};
use kiln_ir::{DType, ExprId, NDArray};

use crate::convert::{Importer, Node};
use crate::error::{Error, Result};
use crate::narrow::{self, Narrow};
use crate::ops::extreme_identity;

/// The ONNX op types this module converts.
pub const SUPPORTED: &[&str] = &[
    "Attention",
    "Compress",
    "CumProd",
    "CumSum",
    "DequantizeLinear",
    "Einsum",
    "EyeLike",
    "GatherElements",
    "GatherND",
    "GroupNormalization",
    "Hardmax",
    "MeanVarianceNormalization",
    "NegativeLogLikelihoodLoss",
    "OneHot",
    "QuantizeLinear",
    "RMSNormalization",
    "RotaryEmbedding",
    "Scatter",
    "ScatterElements",
    "ScatterND",
    "Shrink",
    "SoftmaxCrossEntropyLoss",
    "Trilu",
];

/// Converts `n` if this module handles its op type.
pub(crate) fn convert(imp: &mut Importer, n: &Node) -> Option<Result<Vec<ExprId>>> {
    Some(match n.op_type {
        "RMSNormalization" => rms_norm(imp, n),
        "Einsum" => crate::einsum::convert(imp, n),
        "If" | "Loop" | "Scan" => crate::control_flow::convert(imp, n),
        "TopK" => crate::topk::convert(imp, n),
        "RNN" | "GRU" | "LSTM" => crate::recurrent::convert(imp, n),
        "DFT" | "HannWindow" | "HammingWindow" | "BlackmanWindow" => crate::signal::convert(imp, n),
        "CenterCropPad" | "ReverseSequence" | "SwiGLU" => crate::rearrange::convert(imp, n),
        "GridSample" => crate::grid_sample::convert(imp, n),
        "RoiAlign" => crate::roi_align::convert(imp, n),
        "AffineGrid" => crate::affine_grid::convert(imp, n),
        "CausalConvWithState" => crate::causal_conv::convert(imp, n),
        "LinearAttention" => crate::linear_attention::convert(imp, n),
        "Col2Im" => crate::col2im::convert(imp, n),
        "BitwiseAnd" | "BitwiseOr" | "BitwiseXor" | "BitwiseNot" => crate::bitwise::convert(imp, n),
        "NonMaxSuppression" | "NonZero" | "Unique" => crate::data_dependent::convert(imp, n),
        "ConvInteger"
        | "DynamicQuantizeLinear"
        | "MatMulInteger"
        | "QLinearConv"
        | "QLinearMatMul" => crate::quantized::convert(imp, n),
        "NegativeLogLikelihoodLoss" => (|| {
            let x = imp.input(n, 0)?;
            let t = imp.input(n, 1)?;
            let w = imp.opt_input(n, 2)?;
            Ok(vec![nll(imp, n, x, t, w, "mean")?])
        })(),
        "SoftmaxCrossEntropyLoss" => sce(imp, n),
        "Trilu" => trilu(imp, n),
        "GatherElements" => gather_elements(imp, n),
        "CumSum" | "CumProd" => cumulative(imp, n),
        "Hardmax" => hardmax(imp, n),
        "Shrink" => shrink(imp, n),
        "EyeLike" => eye_like(imp, n),
        "MeanVarianceNormalization" => mvn(imp, n),
        "GroupNormalization" => group_norm(imp, n),
        "OneHot" => one_hot(imp, n),
        "Compress" => compress(imp, n),
        "GatherND" => gather_nd(imp, n),
        "Scatter" | "ScatterElements" => scatter_elements(imp, n),
        "ScatterND" => scatter_nd(imp, n),
        "QuantizeLinear" | "DequantizeLinear" => quantize(imp, n),
        "RotaryEmbedding" => rotary(imp, n),
        "Attention" => attention(imp, n),
        _ => return None,
    })
}

/// Normalises axis `a` into `0..rank`.
fn axis(a: i64, rank: usize) -> Result<usize> {
    let r = rank as i64;
    if a < -r || a >= r {
        return Err(Error::InvalidModel(format!(
            "axis {a} is out of range for rank {rank}"
        )));
    }
    Ok(if a < 0 { a + r } else { a } as usize)
}

/// `x` cast to `to` (nothing when it already is).
fn cast(imp: &mut Importer, x: ExprId, to: DType) -> Result<ExprId> {
    if imp.dtype(x)? == to {
        return Ok(x);
    }
    imp.call(op::Cast::new(to), &[x])
}

/// `0, 1, ..., n-1` of `dtype`, shaped to run along axis `a` of a rank-`r` tensor.
fn iota(imp: &mut Importer, n: usize, a: usize, r: usize, dtype: DType) -> Result<ExprId> {
    let mut shape = vec![1; r];
    shape[a] = n;
    let v: Vec<f64> = (0..n).map(|i| i as f64).collect();
    Ok(imp.constant(NDArray::from_f64(shape, dtype, v)?))
}

fn rms_norm(imp: &mut Importer, n: &Node) -> Result<Vec<ExprId>> {
    let x = imp.input(n, 0)?;
    let scale = imp.input(n, 1)?;
    let dt = imp.dtype(x)?;
    let r = imp.shape(x)?.len();
    let a = axis(n.int("axis", -1), r)?;
    // float16 computes in float32 (stash_type's default).
    let xf = cast(imp, x, DType::F32)?;
    let sq = imp.binary(B::Multiply, xf, xf)?;
    let axes: Vec<i64> = (a as i64..r as i64).collect();
    let ms = imp.reduce(R::Mean, sq, Some(axes), true)?;
    let eps = imp.scalar(n.float("epsilon", 1e-5) as f64, DType::F32);
    let ms = imp.binary(B::Add, ms, eps)?;
    let inv = imp.unary(U::Rsqrt, ms)?;
    let y = imp.binary(B::Multiply, xf, inv)?;
    let y = cast(imp, y, dt)?;
    Ok(vec![imp.binary(B::Multiply, y, scale)?])
}

/// `NegativeLogLikelihoodLoss(x, target, weight)`: `-x[n, target[n, d...], d...]`
/// weighted by `weight[target]`, 0 where the target is `ignore_index`, then reduced.
fn nll(
    imp: &mut Importer,
    n: &Node,
    x: ExprId,
    t: ExprId,
    w: Option<ExprId>,
    default_reduction: &str,
) -> Result<ExprId> {
    let xs = imp.shape(x)?;
    let ts = imp.shape(t)?;
    let dt = imp.dtype(x)?;
    let r = xs.len();
    if r < 2 || ts.len() + 1 != r || ts[0] != xs[0] || ts[1..] != xs[2..] {
        return Err(Error::InvalidModel(format!(
            "{} of input {xs:?} and target {ts:?}",
            n.op_type
        )));
    }
    let c = xs[1];
    let t = cast(imp, t, DType::I64)?;
    // The target with a class axis of extent 1 inserted at axis 1.
    let mut t1 = ts.clone();
    t1.insert(1, 1);
    let te = imp.reshape(t, &t1)?;
    let classes = iota(imp, c, 1, r, DType::I64)?;
    let hit = imp.binary(B::Equal, te, classes)?;
    let zero = imp.scalar_like(0.0, x)?;
    let picked = imp.select(hit, x, zero)?;
    let picked = imp.broadcast_to(picked, &xs)?;
    let picked = imp.reduce(R::Sum, picked, Some(vec![1]), false)?;
    let keep = n
        .attr("ignore_index")
        .map(|a| a.i.unwrap_or(0))
        .map(|ii| -> Result<_> {
            let iic = imp.scalar(ii as f64, DType::I64);
            imp.binary(B::NotEqual, t, iic)
        });
    let keep = keep.transpose()?;
    let mut weight = match w {
        Some(w) => {
            // Out-of-range (ignored) targets read class 0; their weight is zeroed below.
            let safe = match keep {
                Some(k) => {
                    let z = imp.scalar(0.0, DType::I64);
                    let s = imp.select(k, t, z)?;
                    imp.broadcast_to(s, &ts)?
                }
                None => t,
            };
            imp.call(
                op::Take {
                    axis: Some(0),
                    mode: op::TakeMode::Clip,
                },
                &[w, safe],
            )?
        }
        None => imp.constant(NDArray::full(ts.clone(), dt, 1.0)),
    };
    if let Some(k) = keep {
        weight = imp.select(k, weight, zero)?;
        weight = imp.broadcast_to(weight, &ts)?;
    }
    let loss = imp.binary(B::Multiply, picked, weight)?;
    let loss = imp.unary(U::Negative, loss)?;
    match n.string("reduction", default_reduction).as_str() {
        "none" => Ok(loss),
        "sum" => imp.reduce(R::Sum, loss, None, false),
        "mean" => {
            let s = imp.reduce(R::Sum, loss, None, false)?;
            let ws = imp.reduce(R::Sum, weight, None, false)?;
            imp.binary(B::Divide, s, ws)
        }
        other => Err(Error::InvalidModel(format!(
            "{} reduction `{other}`",
            n.op_type
        ))),
    }
}

/// `SoftmaxCrossEntropyLoss`: `nll(log_softmax(scores, axis 1))`, with the log
/// probabilities as the optional second output.
fn sce(imp: &mut Importer, n: &Node) -> Result<Vec<ExprId>> {
    let x = imp.input(n, 0)?;
    let t = imp.input(n, 1)?;
    let w = imp.opt_input(n, 2)?;
    let mx = imp.reduce(R::Max, x, Some(vec![1]), true)?;
    let s = imp.binary(B::Subtract, x, mx)?;
    let e = imp.unary(U::Exp, s)?;
    let sum = imp.reduce(R::Sum, e, Some(vec![1]), true)?;
    let l = imp.unary(U::Log, sum)?;
    let logp = imp.binary(B::Subtract, s, l)?;
    let loss = nll(imp, n, logp, t, w, "mean")?;
    Ok(vec![loss, logp])
}

fn trilu(imp: &mut Importer, n: &Node) -> Result<Vec<ExprId>> {
    let x = imp.input(n, 0)?;
    let s = imp.shape(x)?;
    if s.len() < 2 {
        return Err(Error::InvalidModel(format!("Trilu of data {s:?}")));
    }
    let k = match imp.const_input(n, 1)? {
        Some(t) => t.to_i64_vec().first().copied().unwrap_or(0),
        None => 0,
    };
    let upper = n.int("upper", 1) != 0;
    let (rows, cols) = (s[s.len() - 2], s[s.len() - 1]);
    let mask: Vec<bool> = (0..rows * cols)
        .map(|p| {
            let d = (p % cols) as i64 - (p / cols) as i64;
            if upper { d >= k } else { d <= k }
        })
        .collect();
    let m = imp.constant(NDArray::from_vec([rows, cols], mask)?);
    let zero = imp.scalar_like(0.0, x)?;
    let y = imp.select(m, x, zero)?;
    Ok(vec![imp.broadcast_to(y, &s)?])
}

fn gather_elements(imp: &mut Importer, n: &Node) -> Result<Vec<ExprId>> {
    let data = imp.input(n, 0)?;
    let idx = imp.input(n, 1)?;
    let ds = imp.shape(data)?;
    let is = imp.shape(idx)?;
    let r = ds.len();
    let a = axis(n.int("axis", 0), r)?;
    if is.len() != r || (0..r).any(|d| d != a && is[d] > ds[d]) || ds[a] == 0 {
        return Err(Error::InvalidModel(format!(
            "GatherElements of data {ds:?} at indices {is:?} along axis {a}"
        )));
    }
    // Row-major strides of the data, and each index position's flat offset without
    // the gathered axis.
    let st = strides(&ds);
    let base = offsets_without_axis(&is, &st, a);
    let base = imp.constant(NDArray::from_vec(is.clone(), base)?);
    let i = cast(imp, idx, DType::I64)?;
    // Negative indices count from the end.
    let zero = imp.scalar(0.0, DType::I64);
    let ext = imp.scalar(ds[a] as f64, DType::I64);
    let neg = imp.binary(B::Less, i, zero)?;
    let wrapped = imp.binary(B::Add, i, ext)?;
    let i = imp.select(neg, wrapped, i)?;
    let stride = imp.scalar(st[a] as f64, DType::I64);
    let i = imp.binary(B::Multiply, i, stride)?;
    let flat_idx = imp.binary(B::Add, i, base)?;
    let flat = imp.reshape(data, &[ds.iter().product()])?;
    let y = imp.call(
        op::Take {
            axis: Some(0),
            mode: op::TakeMode::Clip,
        },
        &[flat, flat_idx],
    )?;
    Ok(vec![y])
}

fn cumulative(imp: &mut Importer, n: &Node) -> Result<Vec<ExprId>> {
    let x = imp.input(n, 0)?;
    let s = imp.shape(x)?;
    let r = s.len();
    let a = imp
        .const_ints(n, 1)?
        .and_then(|v| v.first().copied())
        .ok_or_else(|| Error::InvalidModel(format!("{} needs an axis", n.op_type)))?;
    let a = axis(a, r)?;
    let (excl, rev) = (n.int("exclusive", 0) != 0, n.int("reverse", 0) != 0);
    let len = s[a];
    if len == 0 {
        return Ok(vec![x]);
    }
    // mask[o, i]: whether input position i adds into output position o.
    let mask: Vec<bool> = (0..len * len)
        .map(|p| {
            let (o, i) = (p / len, p % len);
            match (rev, excl) {
                (false, false) => i <= o,
                (false, true) => i < o,
                (true, false) => i >= o,
                (true, true) => i > o,
            }
        })
        .collect();
    let mut ms = vec![1; r + 1];
    ms[a] = len;
    ms[a + 1] = len;
    let m = imp.constant(NDArray::from_vec(ms, mask)?);
    // x with a unit axis at `a`: its own axis (now a + 1) is the input position.
    let mut xs1 = s.clone();
    xs1.insert(a, 1);
    let x1 = imp.reshape(x, &xs1)?;
    let prod = n.op_type == "CumProd";
    let fill = imp.scalar_like(if prod { 1.0 } else { 0.0 }, x)?;
    let sel = imp.select(m, x1, fill)?;
    let mut full = s.clone();
    full.insert(a, len);
    let sel = imp.broadcast_to(sel, &full)?;
    let kind = if prod { R::Prod } else { R::Sum };
    Ok(vec![imp.reduce(
        kind,
        sel,
        Some(vec![a as i64 + 1]),
        false,
    )?])
}

fn hardmax(imp: &mut Importer, n: &Node) -> Result<Vec<ExprId>> {
    let x = imp.input(n, 0)?;
    let shape = imp.shape(x)?;
    let r = shape.len();
    let (x2, a) = if n.opset < 13 {
        let a = axis(n.int("axis", 1), r + 1)?;
        let outer = shape[..a].iter().product();
        let inner = shape[a..].iter().product();
        (imp.reshape(x, &[outer, inner])?, 1)
    } else {
        (x, axis(n.int("axis", -1), r)?)
    };
    let s2 = imp.shape(x2)?;
    let r2 = s2.len();
    let mx = imp.reduce(R::Max, x2, Some(vec![a as i64]), true)?;
    let hit = imp.binary(B::Equal, x2, mx)?;
    let pos = iota(imp, s2[a], a, r2, DType::I64)?;
    let miss = imp.scalar(s2[a] as f64, DType::I64);
    let cand = imp.select(hit, pos, miss)?;
    let first = imp.reduce(R::Min, cand, Some(vec![a as i64]), true)?;
    let one_hot = imp.binary(B::Equal, pos, first)?;
    let dt = imp.dtype(x)?;
    let y = cast(imp, one_hot, dt)?;
    let y = imp.broadcast_to(y, &s2)?;
    Ok(vec![imp.reshape(y, &shape)?])
}

fn shrink(imp: &mut Importer, n: &Node) -> Result<Vec<ExprId>> {
    let x = imp.input(n, 0)?;
    let lambd = n.float("lambd", 0.5) as f64;
    let bias = n.float("bias", 0.0) as f64;
    let (lo, hi) = (imp.scalar_like(-lambd, x)?, imp.scalar_like(lambd, x)?);
    let b = imp.scalar_like(bias, x)?;
    let zero = imp.scalar_like(0.0, x)?;
    let below = imp.binary(B::Less, x, lo)?;
    let above = imp.binary(B::Greater, x, hi)?;
    let plus = imp.binary(B::Add, x, b)?;
    let minus = imp.binary(B::Subtract, x, b)?;
    let inner = imp.select(above, minus, zero)?;
    let y = imp.select(below, plus, inner)?;
    let s = imp.shape(x)?;
    Ok(vec![imp.broadcast_to(y, &s)?])
}

fn eye_like(imp: &mut Importer, n: &Node) -> Result<Vec<ExprId>> {
    let x = imp.input(n, 0)?;
    let s = imp.shape(x)?;
    if s.len() != 2 {
        return Err(Error::InvalidModel(format!("EyeLike of data {s:?}")));
    }
    let dt = match n.attr("dtype").and_then(|a| a.i) {
        Some(code) => crate::tensor::dtype_from_onnx(code as i32)?,
        None => imp.dtype(x)?,
    };
    let k = n.int("k", 0);
    let v: Vec<f64> = (0..s[0] * s[1])
        .map(|p| f64::from(u8::from((p % s[1]) as i64 - (p / s[1]) as i64 == k)))
        .collect();
    Ok(vec![imp.constant(NDArray::from_f64(s, dt, v)?)])
}

fn mvn(imp: &mut Importer, n: &Node) -> Result<Vec<ExprId>> {
    let x = imp.input(n, 0)?;
    let axes = n.ints("axes").unwrap_or_else(|| vec![0, 2, 3]);
    let mean = imp.reduce(R::Mean, x, Some(axes.clone()), true)?;
    let d = imp.binary(B::Subtract, x, mean)?;
    let d2 = imp.binary(B::Multiply, d, d)?;
    let var = imp.reduce(R::Mean, d2, Some(axes), true)?;
    let sd = imp.unary(U::Sqrt, var)?;
    let eps = imp.scalar_like(1e-9, x)?;
    let sd = imp.binary(B::Add, sd, eps)?;
    Ok(vec![imp.binary(B::Divide, d, sd)?])
}

fn group_norm(imp: &mut Importer, n: &Node) -> Result<Vec<ExprId>> {
    let x = imp.input(n, 0)?;
    let scale = imp.input(n, 1)?;
    let bias = imp.input(n, 2)?;
    let s = imp.shape(x)?;
    let g = n.int("num_groups", 0);
    if s.len() < 3 || g < 1 || s[1] % g as usize != 0 {
        return Err(Error::InvalidModel(format!(
            "GroupNormalization of {s:?} into {g} groups"
        )));
    }
    let g = g as usize;
    let (nb, c) = (s[0], s[1]);
    let rest: usize = s[2..].iter().product::<usize>() * (c / g);
    let xg = imp.reshape(x, &[nb, g, rest])?;
    let mean = imp.reduce(R::Mean, xg, Some(vec![2]), true)?;
    let d = imp.binary(B::Subtract, xg, mean)?;
    let d2 = imp.binary(B::Multiply, d, d)?;
    let var = imp.reduce(R::Mean, d2, Some(vec![2]), true)?;
    let eps = imp.scalar_like(n.float("epsilon", 1e-5) as f64, x)?;
    let ve = imp.binary(B::Add, var, eps)?;
    let inv = imp.unary(U::Rsqrt, ve)?;
    let y = imp.binary(B::Multiply, d, inv)?;
    // Scale and bias per channel (opset 21) or per group (opset 18).
    let per = imp.shape(scale)?.iter().product::<usize>();
    let y = if per == g && g != c {
        let y4 = imp.reshape(y, &[nb, g, rest])?;
        let sc = imp.reshape(scale, &[1, g, 1])?;
        let bi = imp.reshape(bias, &[1, g, 1])?;
        let y4 = imp.binary(B::Multiply, y4, sc)?;
        let y4 = imp.binary(B::Add, y4, bi)?;
        imp.reshape(y4, &s)?
    } else {
        let y = imp.reshape(y, &s)?;
        let mut cs = vec![1; s.len()];
        cs[1] = c;
        let sc = imp.reshape(scale, &cs)?;
        let bi = imp.reshape(bias, &cs)?;
        let y = imp.binary(B::Multiply, y, sc)?;
        imp.binary(B::Add, y, bi)?
    };
    Ok(vec![y])
}

fn one_hot(imp: &mut Importer, n: &Node) -> Result<Vec<ExprId>> {
    let idx = imp.input(n, 0)?;
    let depth = imp
        .const_input(n, 1)?
        .and_then(|t| t.to_f64_vec().first().copied())
        .ok_or_else(|| Error::InvalidModel("OneHot needs a depth".into()))?;
    if depth.is_nan() || depth < 1.0 {
        return Err(Error::InvalidModel(format!("OneHot depth {depth}")));
    }
    let depth = depth as usize;
    imp.check_alloc("the OneHot positions", &[depth], DType::I64)?;
    let values = imp.input(n, 2)?;
    let is = imp.shape(idx)?;
    let r = is.len() + 1;
    let a = axis(n.int("axis", -1), r)?;
    // Indices truncate to integers; negative ones count from the end.
    let i = cast(imp, idx, DType::I64)?;
    let zero = imp.scalar(0.0, DType::I64);
    let d = imp.scalar(depth as f64, DType::I64);
    let neg = imp.binary(B::Less, i, zero)?;
    let wrapped = imp.binary(B::Add, i, d)?;
    let i = imp.select(neg, wrapped, i)?;
    let mut es = is.clone();
    es.insert(a, 1);
    let i = imp.reshape(i, &es)?;
    let pos = iota(imp, depth, a, r, DType::I64)?;
    let hit = imp.binary(B::Equal, i, pos)?;
    let take_at = |imp: &mut Importer, k: i64| -> Result<ExprId> {
        let c = imp.constant(NDArray::scalar(k));
        imp.call(
            op::Take {
                axis: Some(0),
                mode: op::TakeMode::Clip,
            },
            &[values, c],
        )
    };
    let off = take_at(imp, 0)?;
    let on = take_at(imp, 1)?;
    let y = imp.select(hit, on, off)?;
    let mut out = is;
    out.insert(a, depth);
    Ok(vec![imp.broadcast_to(y, &out)?])
}

fn compress(imp: &mut Importer, n: &Node) -> Result<Vec<ExprId>> {
    let mut x = imp.input(n, 0)?;
    let cond = imp
        .const_input(n, 1)?
        .ok_or_else(|| Error::InvalidModel("Compress needs a condition".into()))?;
    let s = imp.shape(x)?;
    let a = match n.attr("axis").and_then(|a| a.i) {
        Some(a) => axis(a, s.len())?,
        None => {
            x = imp.reshape(x, &[s.iter().product()])?;
            0
        }
    };
    let picks: Vec<i64> = cond
        .to_f64_vec()
        .iter()
        .enumerate()
        .filter(|(_, c)| **c != 0.0)
        .map(|(i, _)| i as i64)
        .collect();
    let len = imp.shape(x)?[a];
    if picks.iter().any(|&p| p as usize >= len) {
        return Err(Error::InvalidModel(format!(
            "Compress condition of length {} for an axis of {len}",
            cond.numel()
        )));
    }
    if picks.is_empty() {
        let mut es = imp.shape(x)?;
        es[a] = 0;
        let dt = imp.dtype(x)?;
        return Ok(vec![imp.constant(NDArray::zeros(es, dt))]);
    }
    let k = picks.len();
    let i = imp.constant(NDArray::from_vec([k], picks)?);
    Ok(vec![imp.call(
        op::Take {
            axis: Some(a as i64),
            mode: op::TakeMode::Clip,
        },
        &[x, i],
    )?])
}

/// `idx` (any integer dtype) as int64 with negative entries counted from `ext`
/// (broadcasting).
fn wrap_negative(imp: &mut Importer, idx: ExprId, ext: ExprId) -> Result<ExprId> {
    let i = cast(imp, idx, DType::I64)?;
    let zero = imp.scalar(0.0, DType::I64);
    let neg = imp.binary(B::Less, i, zero)?;
    let wrapped = imp.binary(B::Add, i, ext)?;
    let s = imp.shape(wrapped)?;
    let y = imp.select(neg, wrapped, i)?;
    imp.broadcast_to(y, &s)
}

/// Row-major strides of `shape`.
fn strides(shape: &[usize]) -> Vec<usize> {
    let mut st = vec![1usize; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        st[d] = st[d + 1] * shape[d + 1];
    }
    st
}

/// The flat row index, into the first `k` axes of `dims`, of each index tuple of
/// `idx` (shape `[..., k]`), as int64 of shape `[q]`.
fn tuple_rows(imp: &mut Importer, idx: ExprId, dims: &[usize], q: usize) -> Result<ExprId> {
    let k = dims.len();
    let i = imp.reshape(idx, &[q, k])?;
    let ext = imp.constant(NDArray::from_vec(
        [1, k],
        dims.iter().map(|&d| d as i64).collect::<Vec<_>>(),
    )?);
    let i = wrap_negative(imp, i, ext)?;
    let st = imp.constant(NDArray::from_vec(
        [1, k],
        strides(dims).iter().map(|&d| d as i64).collect::<Vec<_>>(),
    )?);
    let off = imp.binary(B::Multiply, i, st)?;
    imp.reduce(R::Sum, off, Some(vec![1]), false)
}

/// `data` (`[r, s]`) with row `rows[j]` combined with `upd[j]` (`[q, s]`) for every
/// `j` by `reduction` (`none` replaces).
fn scatter_rows(
    imp: &mut Importer,
    data: ExprId,
    rows: ExprId,
    upd: ExprId,
    reduction: &str,
) -> Result<ExprId> {
    let ds = imp.shape(data)?;
    let (r, s) = (ds[0], ds[1]);
    let q = imp.shape(rows)?[0];
    let dt = imp.dtype(data)?;
    let rows = imp.reshape(rows, &[1, q, 1])?;
    let all = iota(imp, r, 0, 3, DType::I64)?;
    let hit = imp.binary(B::Equal, rows, all)?; // [r, q, 1]
    let upd = imp.reshape(upd, &[1, q, s])?;
    let (fill, kind) = match reduction {
        "none" | "add" => (0.0, R::Sum),
        "mul" => (1.0, R::Prod),
        "max" | "min" => {
            let max = reduction == "max";
            let v = extreme_identity(dt, max)
                .filter(|_| dt != DType::Bool)
                .ok_or_else(|| {
                    Error::Unsupported(format!("scatter with reduction {reduction} on {dt}"))
                })?;
            (v, if max { R::Max } else { R::Min })
        }
        other => {
            return Err(Error::InvalidModel(format!("scatter reduction `{other}`")));
        }
    };
    let f = imp.scalar(fill, dt);
    let sel = imp.select(hit, upd, f)?;
    let sel = imp.broadcast_to(sel, &[r, q, s])?;
    let combined = imp.reduce(kind, sel, Some(vec![1]), false)?; // [r, s]
    let y = match reduction {
        "none" => {
            let h = cast(imp, hit, DType::U8)?;
            let any = imp.reduce(R::Max, h, Some(vec![1]), false)?; // [r, 1]
            let one = imp.scalar(1.0, DType::U8);
            let any = imp.binary(B::Equal, any, one)?;
            imp.select(any, combined, data)?
        }
        "add" => imp.binary(B::Add, data, combined)?,
        "mul" => imp.binary(B::Multiply, data, combined)?,
        "max" => imp.binary(B::Maximum, data, combined)?,
        _ => imp.binary(B::Minimum, data, combined)?,
    };
    imp.broadcast_to(y, &[r, s])
}

fn scatter_elements(imp: &mut Importer, n: &Node) -> Result<Vec<ExprId>> {
    let data = imp.input(n, 0)?;
    let idx = imp.input(n, 1)?;
    let upd = imp.input(n, 2)?;
    let ds = imp.shape(data)?;
    let is = imp.shape(idx)?;
    let r = ds.len();
    let a = axis(n.int("axis", 0), r)?;
    if is.len() != r || imp.shape(upd)? != is || (0..r).any(|d| is[d] > ds[d]) {
        return Err(Error::InvalidModel(format!(
            "{} of data {ds:?} at indices {is:?}",
            n.op_type
        )));
    }
    let count: usize = is.iter().product();
    let st = strides(&ds);
    let base = offsets_without_axis(&is, &st, a);
    let base = imp.constant(NDArray::from_vec([count], base)?);
    let i = imp.reshape(idx, &[count])?;
    let ext = imp.scalar(ds[a] as f64, DType::I64);
    let i = wrap_negative(imp, i, ext)?;
    let stride = imp.scalar(st[a] as f64, DType::I64);
    let i = imp.binary(B::Multiply, i, stride)?;
    let rows = imp.binary(B::Add, i, base)?;
    let total: usize = ds.iter().product();
    let d2 = imp.reshape(data, &[total, 1])?;
    let u2 = imp.reshape(upd, &[count, 1])?;
    let reduction = n.string("reduction", "none");
    let y = scatter_rows(imp, d2, rows, u2, &reduction)?;
    Ok(vec![imp.reshape(y, &ds)?])
}

fn scatter_nd(imp: &mut Importer, n: &Node) -> Result<Vec<ExprId>> {
    let data = imp.input(n, 0)?;
    let idx = imp.input(n, 1)?;
    let upd = imp.input(n, 2)?;
    let ds = imp.shape(data)?;
    let is = imp.shape(idx)?;
    let k = is.last().copied().unwrap_or(0);
    if is.is_empty() || k == 0 || k > ds.len() {
        return Err(Error::InvalidModel(format!(
            "ScatterND of data {ds:?} at indices {is:?}"
        )));
    }
    let q: usize = is[..is.len() - 1].iter().product();
    let rows_n: usize = ds[..k].iter().product();
    let s: usize = ds[k..].iter().product();
    let rows = tuple_rows(imp, idx, &ds[..k], q)?;
    let d2 = imp.reshape(data, &[rows_n, s])?;
    let u2 = imp.reshape(upd, &[q, s])?;
    let reduction = n.string("reduction", "none");
    let y = scatter_rows(imp, d2, rows, u2, &reduction)?;
    Ok(vec![imp.reshape(y, &ds)?])
}

fn gather_nd(imp: &mut Importer, n: &Node) -> Result<Vec<ExprId>> {
    let data = imp.input(n, 0)?;
    let idx = imp.input(n, 1)?;
    let ds = imp.shape(data)?;
    let is = imp.shape(idx)?;
    let b = usize::try_from(n.int("batch_dims", 0)).unwrap_or(usize::MAX);
    let k = is.last().copied().unwrap_or(0);
    if is.is_empty() || b >= is.len() || b + k > ds.len() || is[..b] != ds[..b] || k == 0 {
        return Err(Error::InvalidModel(format!(
            "GatherND of data {ds:?} at indices {is:?} with batch_dims {b}"
        )));
    }
    let batch: usize = ds[..b].iter().product();
    let q: usize = is[..is.len() - 1].iter().product();
    let per_batch: usize = ds[b..b + k].iter().product();
    let s: usize = ds[b + k..].iter().product();
    let local = tuple_rows(imp, idx, &ds[b..b + k], q)?;
    // Each tuple's batch, from its position: the leading b axes of the indices.
    let base: Vec<i64> = (0..q)
        .map(|j| (j / (q / batch.max(1)).max(1) * per_batch) as i64)
        .collect();
    let base = imp.constant(NDArray::from_vec([q], base)?);
    let rows = imp.binary(B::Add, local, base)?;
    let d2 = imp.reshape(data, &[batch * per_batch, s])?;
    let y = imp.call(
        op::Take {
            axis: Some(0),
            mode: op::TakeMode::Clip,
        },
        &[d2, rows],
    )?;
    let mut out: Vec<usize> = is[..is.len() - 1].to_vec();
    out.extend_from_slice(&ds[b + k..]);
    Ok(vec![imp.reshape(y, &out)?])
}

/// A quantization parameter (scale or zero point) shaped to broadcast against `x` of
/// shape `xs`: a scalar as is, a 1-D per-axis vector along `a`, a blocked one (same
/// rank as `x`) repeated `block` times along `a`.
fn quant_param(
    imp: &mut Importer,
    p: ExprId,
    xs: &[usize],
    a: Option<usize>,
    block: usize,
) -> Result<ExprId> {
    let ps = imp.shape(p)?;
    let count: usize = ps.iter().product();
    if count == 1 {
        return Ok(p);
    }
    let a = a.ok_or_else(|| {
        Error::InvalidModel(format!(
            "quantization parameter of shape {ps:?} for data {xs:?} without a valid axis"
        ))
    })?;
    if ps.len() == 1 && ps[0] == xs[a] {
        let mut to = vec![1; xs.len()];
        to[a] = xs[a];
        return imp.reshape(p, &to);
    }
    if block > 0 && ps.len() == xs.len() && ps[a] == xs[a].div_ceil(block) {
        let idx: Vec<i64> = (0..xs[a]).map(|i| (i / block) as i64).collect();
        let c = imp.constant(NDArray::from_vec([xs[a]], idx)?);
        return imp.call(
            op::Take {
                axis: Some(a as i64),
                mode: op::TakeMode::Clip,
            },
            &[p, c],
        );
    }
    Err(Error::InvalidModel(format!(
        "quantization parameter of shape {ps:?} for data {xs:?} along axis {a}"
    )))
}

fn quantize(imp: &mut Importer, n: &Node) -> Result<Vec<ExprId>> {
    let x = imp.input(n, 0)?;
    let scale = imp.input(n, 1)?;
    let zp = imp.opt_input(n, 2)?;
    let xs = imp.shape(x)?;
    // The axis matters (and must be valid) only for non-scalar parameters.
    let a = axis(n.int("axis", 1), xs.len()).ok();
    let block = usize::try_from(n.int("block_size", 0)).unwrap_or(0);
    let scale_dt = imp.dtype(scale)?;
    let sc = quant_param(imp, scale, &xs, a, block)?;
    let sc = cast(imp, sc, DType::F32)?;
    // Float8 inputs (x of a DequantizeLinear, a zero point) are decoded to float32.
    let zpf = match zp {
        Some(mut z) => {
            if let Some(f) = narrow::input_format(imp, n, 2) {
                z = narrow::decode(imp, z, f)?;
            }
            let z = quant_param(imp, z, &xs, a, block)?;
            Some(cast(imp, z, DType::F32)?)
        }
        None => None,
    };
    let xf = match narrow::input_format(imp, n, 0) {
        Some(f) => narrow::decode(imp, x, f)?,
        None => cast(imp, x, DType::F32)?,
    };
    if n.op_type == "QuantizeLinear"
        && let Some(f) = narrow::quantize_format(imp, n)
    {
        // ONNX's reference: float8 is `x / y_scale` encoded (the zero point, 0 for
        // float8, is not added); float4 adds the zero point; the integers round half to
        // even, add it and clip to their range.
        let mut q = imp.binary(B::Divide, xf, sc)?;
        if let Some((lo, hi)) = f.int_range() {
            q = imp.unary(U::Round, q)?;
            if let Some(z) = zpf {
                q = imp.binary(B::Add, q, z)?;
            }
            q = imp.call(op::Clip::new(lo, hi), &[q])?;
        } else if let (Narrow::E2M1, Some(z)) = (f, zpf) {
            q = imp.binary(B::Add, q, z)?;
        }
        return Ok(vec![narrow::encode(imp, q, f, narrow::saturate(n))?]);
    }
    if n.op_type == "DequantizeLinear" {
        let d = match zpf {
            Some(z) => imp.binary(B::Subtract, xf, z)?,
            None => xf,
        };
        let y = imp.binary(B::Multiply, d, sc)?;
        let out = match n.attr("output_dtype").and_then(|a| a.i).filter(|&c| c != 0) {
            Some(code) => crate::tensor::dtype_from_onnx(code as i32)?,
            None => scale_dt,
        };
        return Ok(vec![cast(imp, y, out)?]);
    }
    let out = match (
        n.attr("output_dtype").and_then(|a| a.i).filter(|&c| c != 0),
        zp,
    ) {
        (Some(code), _) => crate::tensor::dtype_from_onnx(code as i32)?,
        (None, Some(z)) => imp.dtype(z)?,
        (None, None) => DType::U8,
    };
    let (lo, hi) = match out {
        DType::U8 => (0.0, 255.0),
        DType::I8 => (-128.0, 127.0),
        DType::I32 => (i32::MIN as f64, i32::MAX as f64),
        DType::I16 => (i16::MIN as f64, i16::MAX as f64),
        DType::U16 => (0.0, u16::MAX as f64),
        d => {
            return Err(Error::Unsupported(format!("QuantizeLinear to {d}")));
        }
    };
    let q = imp.binary(B::Divide, xf, sc)?;
    let mut q = imp.unary(U::Round, q)?;
    if let Some(z) = zpf {
        q = imp.binary(B::Add, q, z)?;
    }
    let q = imp.call(op::Clip::new(lo, hi), &[q])?;
    Ok(vec![cast(imp, q, out)?])
}

/// `take(x, idx, axis a)` with constant indices.
fn take_const(imp: &mut Importer, x: ExprId, idx: Vec<i64>, a: usize) -> Result<ExprId> {
    let k = idx.len();
    let i = imp.constant(NDArray::from_vec([k], idx)?);
    imp.call(
        op::Take {
            axis: Some(a as i64),
            mode: op::TakeMode::Clip,
        },
        &[x, i],
    )
}

/// `concatenate((a, b), axis)`.
fn concat2(imp: &mut Importer, a: ExprId, b: ExprId, ax: i64) -> Result<ExprId> {
    let t = imp.m.tuple(&[a, b])?;
    imp.call(op::Concatenate::new(ax), &[t])
}

fn rotary(imp: &mut Importer, n: &Node) -> Result<Vec<ExprId>> {
    let x = imp.input(n, 0)?;
    let cos = imp.input(n, 1)?;
    let sin = imp.input(n, 2)?;
    let pos = imp.opt_input(n, 3)?;
    let xs = imp.shape(x)?;
    // As [batch, seq, heads, head_size].
    let x4 = match xs.len() {
        4 => imp.transpose(x, vec![0, 2, 1, 3])?,
        3 => {
            let h = usize::try_from(n.int("num_heads", 0)).unwrap_or(0);
            if h == 0 || xs[2] % h != 0 {
                return Err(Error::InvalidModel(format!(
                    "RotaryEmbedding of {xs:?} with num_heads {h}"
                )));
            }
            imp.reshape(x, &[xs[0], xs[1], h, xs[2] / h])?
        }
        _ => {
            return Err(Error::InvalidModel(format!("RotaryEmbedding of {xs:?}")));
        }
    };
    let s4 = imp.shape(x4)?;
    let d = s4[3];
    let rd = match n.int("rotary_embedding_dim", 0) {
        0 => d,
        r => usize::try_from(r)
            .ok()
            .filter(|&r| r <= d && r % 2 == 0)
            .ok_or_else(|| {
                Error::InvalidModel(format!("rotary_embedding_dim {r} for head size {d}"))
            })?,
    };
    let half = rd / 2;
    let (cos, sin) = match pos {
        Some(p) => {
            let p = cast(imp, p, DType::I64)?;
            let t = |imp: &mut Importer, c: ExprId| {
                imp.call(
                    op::Take {
                        axis: Some(0),
                        mode: op::TakeMode::Clip,
                    },
                    &[c, p],
                )
            };
            (t(imp, cos)?, t(imp, sin)?)
        }
        None => (cos, sin),
    };
    let cs = [s4[0], s4[1], 1, half];
    let (cos, sin) = (imp.reshape(cos, &cs)?, imp.reshape(sin, &cs)?);
    let interleaved = n.int("interleaved", 0) != 0;
    let (i1, i2): (Vec<i64>, Vec<i64>) = if interleaved {
        (
            (0..half as i64).map(|i| 2 * i).collect(),
            (0..half as i64).map(|i| 2 * i + 1).collect(),
        )
    } else {
        (
            (0..half as i64).collect(),
            (half as i64..rd as i64).collect(),
        )
    };
    let x1 = take_const(imp, x4, i1, 3)?;
    let x2 = take_const(imp, x4, i2, 3)?;
    let (c1, s2) = (
        imp.binary(B::Multiply, cos, x1)?,
        imp.binary(B::Multiply, sin, x2)?,
    );
    let real = imp.binary(B::Subtract, c1, s2)?;
    let (s1, c2) = (
        imp.binary(B::Multiply, sin, x1)?,
        imp.binary(B::Multiply, cos, x2)?,
    );
    let imag = imp.binary(B::Add, s1, c2)?;
    let rot = if interleaved {
        let e = [s4[0], s4[1], s4[2], half, 1];
        let (re, im) = (imp.reshape(real, &e)?, imp.reshape(imag, &e)?);
        let c = concat2(imp, re, im, 4)?;
        imp.reshape(c, &[s4[0], s4[1], s4[2], rd])?
    } else {
        concat2(imp, real, imag, 3)?
    };
    let y = if rd < d {
        let rest = take_const(imp, x4, (rd as i64..d as i64).collect(), 3)?;
        concat2(imp, rot, rest, 3)?
    } else {
        rot
    };
    let y = if xs.len() == 4 {
        imp.transpose(y, vec![0, 2, 1, 3])?
    } else {
        imp.reshape(y, &xs)?
    };
    Ok(vec![y])
}

/// A rank-3 `(batch, seq, heads * size)` tensor as `(batch, heads, seq, size)`.
fn split_heads(imp: &mut Importer, x: ExprId, heads: usize) -> Result<ExprId> {
    let s = imp.shape(x)?;
    if heads == 0 || s[2] % heads != 0 {
        return Err(Error::InvalidModel(format!(
            "Attention input {s:?} with {heads} heads"
        )));
    }
    let r = imp.reshape(x, &[s[0], s[1], heads, s[2] / heads])?;
    imp.transpose(r, vec![0, 2, 1, 3])
}

fn attention(imp: &mut Importer, n: &Node) -> Result<Vec<ExprId>> {
    let (mut q, mut k, mut v) = (imp.input(n, 0)?, imp.input(n, 1)?, imp.input(n, 2)?);
    let mask = imp.opt_input(n, 3)?;
    let past_k = imp.opt_input(n, 4)?;
    let past_v = imp.opt_input(n, 5)?;
    let nonpad = imp.const_input(n, 6)?.map(|t| t.to_i64_vec());
    if past_k.is_some() != past_v.is_some() || (nonpad.is_some() && past_k.is_some()) {
        return Err(Error::InvalidModel(
            "Attention: past_key and past_value go together, and not with nonpad_kv_seqlen".into(),
        ));
    }
    let rank = imp.shape(q)?.len();
    if rank == 3 {
        let hq = usize::try_from(n.int("q_num_heads", 0)).unwrap_or(0);
        let hk = usize::try_from(n.int("kv_num_heads", 0)).unwrap_or(0);
        q = split_heads(imp, q, hq)?;
        k = split_heads(imp, k, hk)?;
        v = split_heads(imp, v, hk)?;
    } else if rank != 4 {
        return Err(Error::InvalidModel(format!(
            "Attention of rank-{rank} inputs"
        )));
    }
    let dt = imp.dtype(q)?;
    let qs = imp.shape(q)?;
    let (b, hq, sq) = (qs[0], qs[1], qs[2]);
    let scale = match n.attr("scale").and_then(|a| a.f) {
        Some(s) => s as f64,
        None => 1.0 / (qs[3] as f64).sqrt(),
    };
    // Q and K each scaled by sqrt(scale), rounded to the dtype, as the reference.
    let root = imp.scalar(scale.sqrt(), dt);
    let present_k = match past_k {
        Some(p) => {
            let t = imp.m.tuple(&[p, k])?;
            imp.call(op::Concatenate::new(2), &[t])?
        }
        None => k,
    };
    let present_v = match past_v {
        Some(p) => {
            let t = imp.m.tuple(&[p, v])?;
            imp.call(op::Concatenate::new(2), &[t])?
        }
        None => v,
    };
    let ks = imp.shape(present_k)?;
    let (hk, skv) = (ks[1], ks[2]);
    let past_len = match past_k {
        Some(p) => imp.shape(p)?[2] as i64,
        None => 0,
    };
    // The constant part of the additive bias: causal, sliding window, padding.
    let causal = n.int("is_causal", 0) != 0;
    let (left, right) = (
        n.int("left_window_size", -1),
        n.int("right_window_size", -1),
    );
    let constant_bias = causal || left >= 0 || right >= 0 || nonpad.is_some();
    let bias_c = if constant_bias {
        let bc = if nonpad.is_some() { b } else { 1 };
        let mut vals = Vec::with_capacity(bc * sq * skv);
        for bi in 0..bc {
            let off = match &nonpad {
                Some(np) => np.get(bi).copied().unwrap_or(0) - sq as i64,
                None => past_len,
            };
            for i in 0..sq as i64 {
                for j in 0..skv as i64 {
                    let diff = i + off - j;
                    let mut ok = !causal || j <= i + off;
                    if left >= 0 {
                        ok &= diff <= left;
                    }
                    if right >= 0 {
                        ok &= -diff <= right;
                    }
                    if let Some(np) = &nonpad {
                        ok &= j < np.get(bi).copied().unwrap_or(0);
                    }
                    vals.push(if ok { 0.0 } else { f64::NEG_INFINITY });
                }
            }
        }
        let shape = if nonpad.is_some() {
            vec![b, 1, sq, skv]
        } else {
            vec![sq, skv]
        };
        Some(imp.constant(NDArray::from_f64(shape, dt, vals)?))
    } else {
        None
    };
    // The mask part: padded to the key length, bool as 0 / -inf.
    let bias_m = match mask {
        Some(m) => {
            let ms = imp.shape(m)?;
            let mdt = imp.dtype(m)?;
            let last = ms.last().copied().unwrap_or(0);
            let mut m = m;
            if last < skv {
                let mut ps = ms.clone();
                if let Some(l) = ps.last_mut() {
                    *l = skv - last;
                }
                let fill = if mdt == DType::Bool {
                    0.0
                } else {
                    f64::NEG_INFINITY
                };
                let pad = imp.constant(NDArray::full(ps, mdt, fill));
                let t = imp.m.tuple(&[m, pad])?;
                m = imp.call(op::Concatenate::new(ms.len() as i64 - 1), &[t])?;
            }
            if mdt == DType::Bool {
                let zero = imp.scalar(0.0, dt);
                let ninf = imp.scalar(f64::NEG_INFINITY, dt);
                let full = imp.shape(m)?;
                let sel = imp.select(m, zero, ninf)?;
                Some(imp.broadcast_to(sel, &full)?)
            } else {
                Some(m)
            }
        }
        None => None,
    };
    let bias = match (bias_m, bias_c) {
        (Some(a), Some(c)) => Some(imp.binary(B::Add, a, c)?),
        (a, c) => a.or(c),
    };
    // Grouped-query attention: each key/value head serves hq / hk query heads.
    let (mut kk, mut vv) = (present_k, present_v);
    if hq != hk && hk > 0 && hq % hk == 0 {
        let reps = hq / hk;
        let idx: Vec<i64> = (0..hq).map(|h| (h / reps) as i64).collect();
        kk = take_const(imp, kk, idx.clone(), 1)?;
        vv = take_const(imp, vv, idx, 1)?;
    }
    let qsc = imp.binary(B::Multiply, q, root)?;
    let ksc = imp.binary(B::Multiply, kk, root)?;
    let kt = imp.transpose(ksc, vec![0, 1, 3, 2])?;
    let mut qk = crate::ops::matmul(imp, qsc, kt)?;
    if let Some(sc) = n.attr("softcap").and_then(|a| a.f).filter(|&s| s > 0.0) {
        let c = imp.scalar(sc as f64, dt);
        let d = imp.binary(B::Divide, qk, c)?;
        let t = imp.unary(U::Tanh, d)?;
        qk = imp.binary(B::Multiply, t, c)?;
    }
    let mode = n.int("qk_matmul_output_mode", 0);
    let mut qk_out = qk;
    let qkb = match bias {
        Some(bb) => imp.binary(B::Add, qk, bb)?,
        None => qk,
    };
    if mode == 2 {
        qk_out = qkb;
    }
    let sm_dt = match n.attr("softmax_precision").and_then(|a| a.i) {
        Some(code) if code != 0 => crate::tensor::dtype_from_onnx(code as i32)?,
        _ => dt,
    };
    let x = cast(imp, qkb, sm_dt)?;
    let mut p = imp.call(op::Softmax { axis: -1 }, &[x])?;
    if let Some(bb) = bias {
        // Rows whose bias is all -inf attend to nothing: 0, not NaN.
        let bmax = imp.reduce(R::Max, bb, Some(vec![-1]), true)?;
        let ninf = imp.scalar(f64::NEG_INFINITY, dt);
        let dead = imp.binary(B::Equal, bmax, ninf)?;
        let zero = imp.scalar(0.0, sm_dt);
        let full = imp.shape(p)?;
        let g = imp.select(dead, zero, p)?;
        p = imp.broadcast_to(g, &full)?;
    }
    if mode == 3 {
        qk_out = p;
    }
    let p = cast(imp, p, dt)?;
    let mut y = crate::ops::matmul(imp, p, vv)?;
    if rank == 3 {
        let ys = imp.shape(y)?;
        let t = imp.transpose(y, vec![0, 2, 1, 3])?;
        y = imp.reshape(t, &[ys[0], ys[2], ys[1] * ys[3]])?;
    }
    let qk_out = cast(imp, qk_out, dt)?;
    Ok(vec![y, present_k, present_v, qk_out])
}

/// For every position of an index tensor of shape `is` (row-major), the flat offset into
/// data with row-major `strides` of the same position with axis `axis` left out (the
/// gathered or scattered axis, whose offset the index values supply).
fn offsets_without_axis(is: &[usize], strides: &[usize], axis: usize) -> Vec<i64> {
    let count: usize = is.iter().product();
    (0..count)
        .map(|p| {
            let (mut rest, mut off) = (p, 0);
            for d in (0..is.len()).rev() {
                let i = rest % is[d];
                rest /= is[d];
                if d != axis {
                    off += i * strides[d];
                }
            }
            off as i64
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn supported_list_is_sorted_and_known() {
        let mut sorted = SUPPORTED.to_vec();
        sorted.sort_unstable();
        assert_eq!(sorted, SUPPORTED);
    }
}
