//! ONNX `RNN`, `GRU` and `LSTM`, unrolled over the (static) sequence length into the
//! graph IR's dense products and activations, as ONNX's reference defines them: forward,
//! reverse and bidirectional; `layout` 0 (sequence first) and 1 (batch first); biases,
//! initial states, LSTM peepholes and `input_forget`, GRU's `linear_before_reset`,
//! `clip`, and every activation function the spec lists (with its alpha/beta).
//! The input projection of all steps is one `nn.dense`; each step adds the recurrent
//! product. `sequence_lens` masks each batch entry past its length: its state stays,
//! its outputs are zero (in reverse too, since masked steps leave the state alone).

use kiln_ir::op::{self, BinaryKind as B, UnaryKind as U};
use kiln_ir::{DType, ExprId, NDArray};

use crate::convert::{Importer, Node};
use crate::error::{Error, Result};

/// The ONNX op types this module converts.
pub const SUPPORTED: &[&str] = &["GRU", "LSTM", "RNN"];

/// The most time steps unrolled.
pub const MAX_STEPS: usize = 4096;

#[derive(Clone, Copy, PartialEq)]
enum Cell {
    Rnn,
    Gru,
    Lstm,
}

impl Cell {
    fn gates(self) -> usize {
        match self {
            Cell::Rnn => 1,
            Cell::Gru => 3,
            Cell::Lstm => 4,
        }
    }
    /// The default activations, per direction.
    fn defaults(self) -> &'static [&'static str] {
        match self {
            Cell::Rnn => &["Tanh"],
            Cell::Gru => &["Sigmoid", "Tanh"],
            Cell::Lstm => &["Sigmoid", "Tanh", "Tanh"],
        }
    }
}

/// An activation function with its alpha and beta.
#[derive(Clone)]
struct Act {
    name: String,
    alpha: Option<f32>,
    beta: Option<f32>,
}

fn scalar(imp: &mut Importer, v: f32) -> ExprId {
    imp.scalar(f64::from(v), DType::F32)
}

impl Act {
    fn apply(&self, imp: &mut Importer, x: ExprId) -> Result<ExprId> {
        let a = |d: f32| self.alpha.unwrap_or(d);
        let b = |d: f32| self.beta.unwrap_or(d);
        match self.name.to_ascii_lowercase().as_str() {
            "sigmoid" => imp.unary(U::Sigmoid, x),
            "tanh" => imp.unary(U::Tanh, x),
            "relu" => imp.unary(U::Relu, x),
            "affine" => {
                let (s, t) = (scalar(imp, a(1.0)), scalar(imp, b(0.0)));
                let y = imp.binary(B::Multiply, x, s)?;
                imp.binary(B::Add, y, t)
            }
            "leakyrelu" => {
                let s = scalar(imp, a(0.01));
                let zero = scalar(imp, 0.0);
                let neg = imp.binary(B::Less, x, zero)?;
                let scaled = imp.binary(B::Multiply, x, s)?;
                imp.select(neg, scaled, x)
            }
            "thresholdedrelu" => {
                let t = scalar(imp, a(1.0));
                let zero = scalar(imp, 0.0);
                let above = imp.binary(B::Greater, x, t)?;
                imp.select(above, x, zero)
            }
            "scaledtanh" => {
                let (s, t) = (scalar(imp, a(1.0)), scalar(imp, b(1.0)));
                let y = imp.binary(B::Multiply, x, t)?;
                let y = imp.unary(U::Tanh, y)?;
                imp.binary(B::Multiply, y, s)
            }
            "hardsigmoid" => {
                let (s, t) = (scalar(imp, a(0.2)), scalar(imp, b(0.5)));
                let y = imp.binary(B::Multiply, x, s)?;
                let y = imp.binary(B::Add, y, t)?;
                imp.call(
                    op::Clip {
                        a_min: kiln_ir::attrs::F64(0.0),
                        a_max: kiln_ir::attrs::F64(1.0),
                    },
                    &[y],
                )
            }
            "elu" => {
                let s = scalar(imp, a(1.0));
                let (zero, one) = (scalar(imp, 0.0), scalar(imp, 1.0));
                let neg = imp.binary(B::Less, x, zero)?;
                let e = imp.unary(U::Exp, x)?;
                let e = imp.binary(B::Subtract, e, one)?;
                let e = imp.binary(B::Multiply, e, s)?;
                imp.select(neg, e, x)
            }
            "softsign" => {
                let one = scalar(imp, 1.0);
                let d = imp.unary(U::Abs, x)?;
                let d = imp.binary(B::Add, d, one)?;
                imp.binary(B::Divide, x, d)
            }
            "softplus" => {
                let one = scalar(imp, 1.0);
                let e = imp.unary(U::Exp, x)?;
                let e = imp.binary(B::Add, e, one)?;
                imp.unary(U::Log, e)
            }
            other => Err(Error::Unsupported(format!(
                "recurrent activation `{other}`"
            ))),
        }
    }
}

/// Rows `[from, from + len)` of axis `axis`.
fn slice(imp: &mut Importer, x: ExprId, axis: usize, from: usize, len: usize) -> Result<ExprId> {
    imp.call(
        op::StridedSlice {
            begin: vec![from as i64],
            end: vec![(from + len) as i64],
            strides: None,
            axes: Some(vec![axis as i64]),
        },
        &[x],
    )
}

/// Entry `i` of axis 0, that axis removed.
fn pick(imp: &mut Importer, x: ExprId, i: usize) -> Result<ExprId> {
    let idx = imp.constant(NDArray::from_vec([], vec![i as i64])?);
    imp.call(
        op::Take {
            axis: Some(0),
            mode: op::TakeMode::Clip,
        },
        &[x, idx],
    )
}

/// `a · bᵀ` for `a` (m, k) and `b` (n, k).
fn dense(imp: &mut Importer, a: ExprId, b: ExprId) -> Result<ExprId> {
    imp.call(op::Dense::default(), &[a, b])
}

/// Converts an `RNN`, `GRU` or `LSTM` node.
pub(crate) fn convert(imp: &mut Importer, n: &Node) -> Result<Vec<ExprId>> {
    let cell = match n.op_type {
        "RNN" => Cell::Rnn,
        "GRU" => Cell::Gru,
        _ => Cell::Lstm,
    };
    let mut x = imp.input(n, 0)?;
    let w = imp.input(n, 1)?;
    let r = imp.input(n, 2)?;
    if imp.dtype(x)? != DType::F32 {
        return Err(Error::Unsupported(format!(
            "{} on {} (float32 only)",
            n.op_type,
            imp.dtype(x)?
        )));
    }
    let layout = n.int("layout", 0);
    if layout == 1 {
        x = imp.transpose(x, vec![1, 0, 2])?;
    }
    let xs = imp.shape(x)?;
    let ws = imp.shape(w)?;
    let [seq, batch, input] = xs[..] else {
        return Err(Error::InvalidModel(format!(
            "{} input X of rank {}",
            n.op_type,
            xs.len()
        )));
    };
    let hidden = usize::try_from(n.int("hidden_size", 0))
        .ok()
        .filter(|&h| h > 0)
        .or_else(|| ws.get(1).map(|g| g / cell.gates()))
        .ok_or_else(|| Error::InvalidModel("hidden_size".into()))?;
    let g = cell.gates() * hidden;
    let direction = n.string("direction", "forward");
    let dirs: Vec<bool> = match direction.as_str() {
        "forward" => vec![false],
        "reverse" => vec![true],
        "bidirectional" => vec![false, true],
        other => return Err(Error::InvalidModel(format!("direction `{other}`"))),
    };
    if ws != [dirs.len(), g, input] || imp.shape(r)? != [dirs.len(), g, hidden] {
        return Err(Error::InvalidModel(format!(
            "{} W {:?} / R {:?} for {} direction(s), hidden {hidden}, input {input}",
            n.op_type,
            ws,
            imp.shape(r)?,
            dirs.len()
        )));
    }
    if seq > MAX_STEPS {
        return Err(Error::Unsupported(format!(
            "{} over {seq} steps, more than {MAX_STEPS} (kiln unrolls them)",
            n.op_type
        )));
    }
    // Activations: the spec's defaults, or the attribute's list (per direction).
    let names: Vec<String> = match n.attr("activations") {
        Some(a) if !a.strings.is_empty() => a
            .strings
            .iter()
            .map(|s| String::from_utf8_lossy(s).into_owned())
            .collect(),
        _ => dirs
            .iter()
            .flat_map(|_| cell.defaults().iter().map(|s| s.to_string()))
            .collect(),
    };
    let per = cell.defaults().len();
    if names.len() != per * dirs.len() {
        return Err(Error::InvalidModel(format!(
            "{} needs {} activations, has {}",
            n.op_type,
            per * dirs.len(),
            names.len()
        )));
    }
    let floats = |name: &str| n.attr(name).map(|a| a.floats.clone()).unwrap_or_default();
    let (alphas, betas) = (floats("activation_alpha"), floats("activation_beta"));
    let acts: Vec<Act> = names
        .iter()
        .enumerate()
        .map(|(i, name)| Act {
            name: name.clone(),
            alpha: alphas.get(i).copied(),
            beta: betas.get(i).copied(),
        })
        .collect();
    let clip = n.attr("clip").and_then(|a| a.f);
    let b = imp.opt_input(n, 3)?;
    let seq_lens = match n.input_name(4) {
        Some(_) => Some(
            imp.const_ints(n, 4)?
                .ok_or_else(|| Error::InvalidModel("sequence_lens".into()))?,
        ),
        None => None,
    };
    let h0 = imp.opt_input(n, 5)?;
    let c0 = if cell == Cell::Lstm {
        imp.opt_input(n, 6)?
    } else {
        None
    };
    let peep = if cell == Cell::Lstm {
        imp.opt_input(n, 7)?
    } else {
        None
    };
    let lin_before_reset = n.int("linear_before_reset", 0) != 0;
    let input_forget = n.int("input_forget", 0) != 0;

    let mut ys = vec![];
    let mut hs = vec![];
    let mut cs = vec![];
    for (d, &reverse) in dirs.iter().enumerate() {
        let act = &acts[d * per..(d + 1) * per];
        let wd = pick(imp, w, d)?; // (g, input)
        let rd = pick(imp, r, d)?; // (g, hidden)
        // Input projections of every step at once: (seq, batch, g).
        let flat = imp.reshape(x, &[seq * batch, input])?;
        let mut proj = dense(imp, flat, wd)?;
        let mut rbias = None;
        if let Some(b) = b {
            let bd = pick(imp, b, d)?; // (2g)
            let wb = slice(imp, bd, 0, 0, g)?;
            let rb = slice(imp, bd, 0, g, g)?;
            if cell == Cell::Gru && lin_before_reset {
                proj = imp.binary(B::Add, proj, wb)?;
                rbias = Some(rb);
            } else {
                // Without linear_before_reset every recurrent bias (GRU's Rbh too) is
                // a plain bias of its gate.
                let both = imp.binary(B::Add, wb, rb)?;
                proj = imp.binary(B::Add, proj, both)?;
            }
        }
        let proj = imp.reshape(proj, &[seq, batch, g])?;
        let zeros = || NDArray::zeros(vec![batch, hidden], DType::F32);
        let mut h = match h0 {
            Some(h0) => pick(imp, h0, d)?,
            None => imp.constant(zeros()),
        };
        let mut c = match c0 {
            Some(c0) => pick(imp, c0, d)?,
            None => imp.constant(zeros()),
        };
        let peeps = match peep {
            Some(p) => {
                let pd = pick(imp, p, d)?; // (3 hidden): i, o, f
                Some([
                    slice(imp, pd, 0, 0, hidden)?,
                    slice(imp, pd, 0, hidden, hidden)?,
                    slice(imp, pd, 0, 2 * hidden, hidden)?,
                ])
            }
            None => None,
        };
        let mut outs: Vec<ExprId> = vec![ExprId::new(0); seq];
        let steps: Vec<usize> = if reverse {
            (0..seq).rev().collect()
        } else {
            (0..seq).collect()
        };
        for t in steps {
            let xt = pick(imp, proj, t)?; // (batch, g)
            let gate =
                |imp: &mut Importer, v: ExprId, k: usize| slice(imp, v, 1, k * hidden, hidden);
            let clipped = |imp: &mut Importer, v: ExprId| -> Result<ExprId> {
                match clip {
                    Some(c) => imp.call(
                        op::Clip {
                            a_min: kiln_ir::attrs::F64(f64::from(-c)),
                            a_max: kiln_ir::attrs::F64(f64::from(c)),
                        },
                        &[v],
                    ),
                    None => Ok(v),
                }
            };
            let (h_new, c_new) = match cell {
                Cell::Rnn => {
                    let hr = dense(imp, h, rd)?;
                    let s = imp.binary(B::Add, xt, hr)?;
                    let s = clipped(imp, s)?;
                    (act[0].apply(imp, s)?, c)
                }
                Cell::Gru => {
                    // Gates z, r, h in that order.
                    let (xz, xr, xh) = (gate(imp, xt, 0)?, gate(imp, xt, 1)?, gate(imp, xt, 2)?);
                    let rz = slice(imp, rd, 0, 0, hidden)?;
                    let rr = slice(imp, rd, 0, hidden, hidden)?;
                    let rh = slice(imp, rd, 0, 2 * hidden, hidden)?;
                    let hz = dense(imp, h, rz)?;
                    let hr = dense(imp, h, rr)?;
                    let (mut hz, mut hr) = (hz, hr);
                    if let Some(rb) = rbias {
                        let bz = slice(imp, rb, 0, 0, hidden)?;
                        let br = slice(imp, rb, 0, hidden, hidden)?;
                        hz = imp.binary(B::Add, hz, bz)?;
                        hr = imp.binary(B::Add, hr, br)?;
                    }
                    let z = imp.binary(B::Add, xz, hz)?;
                    let z = clipped(imp, z)?;
                    let z = act[0].apply(imp, z)?;
                    let rg = imp.binary(B::Add, xr, hr)?;
                    let rg = clipped(imp, rg)?;
                    let rg = act[0].apply(imp, rg)?;
                    let cand = if lin_before_reset {
                        let mut hh = dense(imp, h, rh)?;
                        if let Some(rb) = rbias {
                            let bh = slice(imp, rb, 0, 2 * hidden, hidden)?;
                            hh = imp.binary(B::Add, hh, bh)?;
                        }
                        let hh = imp.binary(B::Multiply, rg, hh)?;
                        imp.binary(B::Add, xh, hh)?
                    } else {
                        let rh_in = imp.binary(B::Multiply, rg, h)?;
                        let hh = dense(imp, rh_in, rh)?;
                        imp.binary(B::Add, xh, hh)?
                    };
                    let cand = clipped(imp, cand)?;
                    let cand = act[1].apply(imp, cand)?;
                    // (1 - z) * cand + z * h
                    let one = scalar(imp, 1.0);
                    let keep = imp.binary(B::Subtract, one, z)?;
                    let a = imp.binary(B::Multiply, keep, cand)?;
                    let bb = imp.binary(B::Multiply, z, h)?;
                    (imp.binary(B::Add, a, bb)?, c)
                }
                Cell::Lstm => {
                    // Gates i, o, f, c in that order.
                    let hr = dense(imp, h, rd)?;
                    let s = imp.binary(B::Add, xt, hr)?;
                    let (si, so, sf, sc) = (
                        gate(imp, s, 0)?,
                        gate(imp, s, 1)?,
                        gate(imp, s, 2)?,
                        gate(imp, s, 3)?,
                    );
                    let with_peep =
                        |imp: &mut Importer, v: ExprId, k: usize, state: ExprId| match &peeps {
                            Some(p) => {
                                let pc = imp.binary(B::Multiply, p[k], state)?;
                                imp.binary(B::Add, v, pc)
                            }
                            None => Ok(v),
                        };
                    let si = with_peep(imp, si, 0, c)?;
                    let si = clipped(imp, si)?;
                    let i = act[0].apply(imp, si)?;
                    let f = if input_forget {
                        let one = scalar(imp, 1.0);
                        imp.binary(B::Subtract, one, i)?
                    } else {
                        let sf = with_peep(imp, sf, 2, c)?;
                        let sf = clipped(imp, sf)?;
                        act[0].apply(imp, sf)?
                    };
                    let sc = clipped(imp, sc)?;
                    let cand = act[1].apply(imp, sc)?;
                    let fc = imp.binary(B::Multiply, f, c)?;
                    let ic = imp.binary(B::Multiply, i, cand)?;
                    let c_new = imp.binary(B::Add, fc, ic)?;
                    let so = with_peep(imp, so, 1, c_new)?;
                    let so = clipped(imp, so)?;
                    let o = act[0].apply(imp, so)?;
                    let hc = act[2].apply(imp, c_new)?;
                    (imp.binary(B::Multiply, o, hc)?, c_new)
                }
            };
            // Batch entries past their sequence length keep their state, output zeros.
            let (h_next, c_next, y) = match &seq_lens {
                Some(lens) => {
                    let live: Vec<bool> = lens.iter().map(|&l| (t as i64) < l).collect();
                    if live.len() != batch {
                        return Err(Error::InvalidModel(format!(
                            "sequence_lens has {} entries for a batch of {batch}",
                            live.len()
                        )));
                    }
                    let mask = imp.constant(NDArray::from_vec([batch, 1], live)?);
                    let zero = scalar(imp, 0.0);
                    (
                        imp.select(mask, h_new, h)?,
                        imp.select(mask, c_new, c)?,
                        imp.select(mask, h_new, zero)?,
                    )
                }
                None => (h_new, c_new, h_new),
            };
            h = h_next;
            c = c_next;
            outs[t] = y;
        }
        ys.push(imp.stack(&outs, 0)?); // (seq, batch, hidden)
        hs.push(h);
        cs.push(c);
    }
    // Y: (seq, dirs, batch, hidden); Y_h, Y_c: (dirs, batch, hidden).
    let mut per_dir = vec![];
    for y in ys {
        per_dir.push(imp.call(
            op::ExpandDims {
                axis: 1,
                num_newaxis: 1,
            },
            &[y],
        )?);
    }
    let y = if per_dir.len() == 1 {
        per_dir[0]
    } else {
        let t = imp.m.tuple(&per_dir)?;
        imp.call(op::Concatenate::new(1), &[t])?
    };
    let yh = imp.stack(&hs, 0)?;
    let yc = imp.stack(&cs, 0)?;
    if layout == 1 {
        // Y: (batch, seq, dirs, hidden); Y_h, Y_c: (batch, dirs, hidden).
        let y = imp.transpose(y, vec![2, 0, 1, 3])?;
        let yh = imp.transpose(yh, vec![1, 0, 2])?;
        let yc = imp.transpose(yc, vec![1, 0, 2])?;
        return Ok(vec![y, yh, yc]);
    }
    Ok(vec![y, yh, yc])
}
