//! ONNX `LinearAttention`: recurrent linear attention over `[B, T, H·D]` query, key and
//! value (grouped heads: `q_num_heads` a multiple of `kv_num_heads`), computed in float32
//! as ONNX's reference does, its time loop unrolled at import. Per step `t` the state
//! `S` (`[B, H_kv, d_k, d_v]`, from `past_state` or zeros) is decayed by `exp(decay_t)`
//! (`gated` rules), the value corrected by `beta_t · (v_t - Sᵀk_t)` (`delta` rules),
//! then `S += k_t v_tᵀ`, and the output is `scale · q_tᵀ S` with each key/value head
//! read by its group of query heads. The final state is the second output. Products and
//! sums are elementwise ops and reductions.

use kiln_ir::op::{BinaryKind as B, ReduceKind as R, UnaryKind as U};
use kiln_ir::{DType, ExprId, NDArray};

use crate::convert::{Importer, Node};
use crate::error::{Error, Result};
use crate::ops::cast;

/// The ONNX op types this module converts.
pub const SUPPORTED: &[&str] = &["LinearAttention"];

/// The most time steps unrolled.
const MAX_STEPS: usize = 4096;

/// `[B, T, H·D]` as float32 `[B, H, T, D]`.
fn heads(imp: &mut Importer, x: ExprId, h: usize) -> Result<ExprId> {
    let s = imp.shape(x)?;
    let x = cast(imp, x, DType::F32)?;
    let x = imp.reshape(x, &[s[0], s[1], h, s[2] / h])?;
    imp.transpose(x, vec![0, 2, 1, 3])
}

/// Step `t` of `x` (`[B, H, T, D]`) as `[B, H, D]`.
fn step(imp: &mut Importer, x: ExprId, t: usize) -> Result<ExprId> {
    let idx = imp.constant(NDArray::from_vec([], vec![t as i64])?);
    imp.call(
        kiln_ir::op::Take {
            axis: Some(2),
            mode: kiln_ir::op::TakeMode::Clip,
        },
        &[x, idx],
    )
}

/// Converts `LinearAttention`.
pub(crate) fn convert(imp: &mut Importer, n: &Node) -> Result<Vec<ExprId>> {
    let (q, k, v) = (imp.input(n, 0)?, imp.input(n, 1)?, imp.input(n, 2)?);
    let (qs, ks, vs) = (imp.shape(q)?, imp.shape(k)?, imp.shape(v)?);
    let count = |name: &str| usize::try_from(n.int(name, 0)).ok().filter(|&h| h > 0);
    let (Some(hq), Some(hkv)) = (count("q_num_heads"), count("kv_num_heads")) else {
        return Err(Error::InvalidModel(
            "LinearAttention needs positive q_num_heads and kv_num_heads".into(),
        ));
    };
    let rule = n.string("update_rule", "gated_delta");
    let (gating, delta) = match rule.as_str() {
        "linear" => (false, false),
        "gated" => (true, false),
        "delta" => (false, true),
        "gated_delta" => (true, true),
        other => {
            return Err(Error::InvalidModel(format!(
                "LinearAttention update_rule `{other}`"
            )));
        }
    };
    let decay = imp.opt_input(n, 4)?;
    let beta = imp.opt_input(n, 5)?;
    let shapes_ok = qs.len() == 3
        && ks.len() == 3
        && vs.len() == 3
        && hq % hkv == 0
        && qs[2] % hq == 0
        && ks[2] % hkv == 0
        && vs[2] % hkv == 0
        && ks[..2] == qs[..2]
        && vs[..2] == qs[..2]
        && qs[2] / hq == ks[2] / hkv;
    if !shapes_ok || gating != decay.is_some() || delta != beta.is_some() {
        return Err(Error::InvalidModel(format!(
            "LinearAttention ({rule}) with query {qs:?}, key {ks:?}, value {vs:?}, \
             {hq} query and {hkv} key/value heads, decay {}, beta {}",
            if decay.is_some() { "given" } else { "absent" },
            if beta.is_some() { "given" } else { "absent" },
        )));
    }
    let (b, t) = (qs[0], qs[1]);
    let (dk, dv, group) = (qs[2] / hq, vs[2] / hkv, hq / hkv);
    if t > MAX_STEPS {
        return Err(Error::Unsupported(format!(
            "LinearAttention over {t} steps, more than {MAX_STEPS} (kiln unrolls it at import)"
        )));
    }
    let out_dt = imp.dtype(q)?;
    let q4 = heads(imp, q, hq)?;
    let k4 = heads(imp, k, hkv)?;
    let v4 = heads(imp, v, hkv)?;
    // Decay per head ([B, H, T, 1]) or per key channel ([B, H, T, d_k]).
    let decay4 = match decay {
        Some(g) => {
            let gs = imp.shape(g)?;
            if gs.len() != 3 || gs[..2] != qs[..2] || (gs[2] != hkv && gs[2] != hkv * dk) {
                return Err(Error::InvalidModel(format!("LinearAttention decay {gs:?}")));
            }
            Some(heads(imp, g, hkv)?)
        }
        None => None,
    };
    let beta4 = match beta {
        Some(bt) => {
            let bs = imp.shape(bt)?;
            if bs.len() != 3 || bs[..2] != qs[..2] || (bs[2] != hkv && bs[2] != 1) {
                return Err(Error::InvalidModel(format!("LinearAttention beta {bs:?}")));
            }
            Some(heads(imp, bt, bs[2])?)
        }
        None => None,
    };
    let (mut state, state_dt) = match imp.opt_input(n, 3)? {
        Some(p) => {
            if imp.shape(p)? != [b, hkv, dk, dv] {
                return Err(Error::InvalidModel(format!(
                    "LinearAttention past_state {:?}, expected {:?}",
                    imp.shape(p)?,
                    [b, hkv, dk, dv]
                )));
            }
            let dt = imp.dtype(p)?;
            (cast(imp, p, DType::F32)?, dt)
        }
        None => (
            imp.constant(NDArray::zeros(vec![b, hkv, dk, dv], DType::F32)),
            out_dt,
        ),
    };
    let scale = match n.float("scale", 0.0) {
        s if s == 0.0 => 1.0 / (dk as f64).sqrt(),
        s => s as f64,
    };
    let scale = imp.scalar(scale, DType::F32);
    let mut outs = Vec::with_capacity(t);
    for i in 0..t {
        let k_t = step(imp, k4, i)?;
        let k_col = imp.reshape(k_t, &[b, hkv, dk, 1])?;
        let mut v_t = step(imp, v4, i)?;
        if let Some(g) = decay4 {
            let g_t = step(imp, g, i)?;
            let e = imp.unary(U::Exp, g_t)?;
            let per = imp.shape(e)?[2];
            let e = imp.reshape(e, &[b, hkv, per, 1])?;
            state = imp.binary(B::Multiply, state, e)?;
        }
        if let Some(bt) = beta4 {
            let prod = imp.binary(B::Multiply, state, k_col)?;
            let retrieved = imp.reduce(R::Sum, prod, Some(vec![2]), false)?;
            let diff = imp.binary(B::Subtract, v_t, retrieved)?;
            let b_t = step(imp, bt, i)?;
            v_t = imp.binary(B::Multiply, b_t, diff)?;
        }
        let v_row = imp.reshape(v_t, &[b, hkv, 1, dv])?;
        let outer = imp.binary(B::Multiply, k_col, v_row)?;
        state = imp.binary(B::Add, state, outer)?;
        let read = if group == 1 {
            state
        } else {
            let s5 = imp.reshape(state, &[b, hkv, 1, dk, dv])?;
            let s5 = imp.broadcast_to(s5, &[b, hkv, group, dk, dv])?;
            imp.reshape(s5, &[b, hq, dk, dv])?
        };
        let q_t = step(imp, q4, i)?;
        let q_col = imp.reshape(q_t, &[b, hq, dk, 1])?;
        let prod = imp.binary(B::Multiply, q_col, read)?;
        let o = imp.reduce(R::Sum, prod, Some(vec![2]), false)?;
        outs.push(imp.binary(B::Multiply, o, scale)?);
    }
    // [B, H_q, T, d_v] → [B, T, H_q·d_v].
    let o = imp.stack(&outs, 2)?;
    let o = imp.transpose(o, vec![0, 2, 1, 3])?;
    let o = imp.reshape(o, &[b, t, hq * dv])?;
    Ok(vec![cast(imp, o, out_dt)?, cast(imp, state, state_dt)?])
}
