//! `FoldScaleAxis` (level 3): folds per-channel scales into convolution and dense
//! weights, in both of Relay's directions. Backward (the direction batch norms after
//! convolutions need) folds a scale that follows the layer:
//!
//! ```text
//! multiply(nn.conv2d(x, W), S)  ->  nn.conv2d(x, multiply(W, reshape(S, [C', 1, 1, 1])))
//! multiply(nn.dense(x, W), S)   ->  nn.dense(x, multiply(W, reshape(S, [C', 1])))
//! ```
//!
//! where `S` is a constant that varies at most along the output channel axis (axis 1 of
//! conv2d's NCHW output, the last axis of dense's output): right-aligned against the
//! output, every dimension of `S` is 1 except the channel one, which is 1 or `C`
//! (`C' = numel(S)`). The law is linearity in the weights: output channel `o` is computed
//! from weight slice `W[o]` only, whatever the strides, padding, dilation and groups (the
//! weight's first axis is always the output channel in OIHW). A bias between the two is
//! scaled too: `multiply(add(conv, b), S) -> add(conv', multiply(b, S))` for a constant
//! `b` that does not broadcast the output up, and `nn.bias_add(conv, b, axis=channel)` with
//! `b * reshape(S, [C'])`. Forward folds a scale on the layer's input channels:
//!
//! ```text
//! nn.conv2d(multiply(x, S), W)  ->  nn.conv2d(x, multiply(W, reshape(S, [1, C', 1, 1])))
//! nn.dense(multiply(x, S), W)   ->  nn.dense(x, multiply(W, reshape(S, [1, C'])))
//! ```
//!
//! sound for any padding (zero padding scaled is still zero); for conv2d only with
//! `groups == 1`, for depthwise convolutions with one output per input channel (the
//! scale goes on the weight's first axis instead), or with a scalar `S`. As in Relay, the
//! forward direction also looks through a constant shift and a relu, which is how a
//! pre-activation network's batch norms (`relu(x * S + T)` feeding convolutions) fold:
//!
//! ```text
//! nn.conv2d(relu(add(multiply(x, S), T)), W)
//!     ->  nn.conv2d(relu(add(x, divide(T, S))), multiply(W, reshape(S, [1, C', 1, 1])))
//! ```
//!
//! since `x * S + T = (x + T / S) * S` for `S` without zeros and `relu(y * S) =
//! relu(y) * S` for `S > 0` (both checked on the scale's values, which must be a literal
//! constant by then: `FoldConstant` runs first). A relu may feed several layers (the
//! first unit of a ResNet stage feeds its 1x1 shortcut too): every user must be a
//! conv2d or dense reading it as data, and those that fold share the new relu (one that
//! cannot take the scale, a grouped convolution with a per-channel scale, keeps the old
//! relu: values stay right, the relu is computed twice). As in Relay, `T / S` is not
//! guarded against a tiny `S` (float32 `x + T / S` then loses `x`'s low bits).
//! Backward also goes into both branches of an `add` of two non-constant terms, when
//! both fold (`(conv(x, W1) + conv(y, W2)) * S`). `FoldConstant` then folds the new
//! weight expressions.
//!
//! Overlaps, on purpose: `SimplifyInference` turns every batch norm into `x * S + T` at
//! level 0, so EqSat's `batch_norm_affine` rule only fires when a pipeline skips
//! `SimplifyInference` (it is EqSat's own way to see batch norms, used by EqSat-only
//! pipelines and tests); EqSat's fold family (`scale_into_conv2d`, `scale_past_shift`,
//! ...) states the backward laws as equations that extraction may or may not keep by
//! cost, while this pass applies them (and the forward ones, which need the scale's
//! values) unconditionally at level 3, before EqSat, so the e-graph starts from folded
//! weights.
//!
//! "Constant" means built from constants by op calls (what `FoldConstant` folds), so a
//! bias scaled by an earlier sweep still counts.
//!
//! Refused (left unchanged): a scale that is not a constant, not per-channel or not
//! floating point; a convolution, dense or bias whose result has any other user (its
//! unscaled value is still needed); anything else. Chains (`multiply(multiply(conv, S1),
//! S2)`) fold over repeated sweeps, at most [`MAX_ROUNDS`].

use std::collections::HashMap;

use kiln_ir::op::{BiasAdd, Binary, BinaryKind, Reshape, Unary, UnaryKind};
use kiln_ir::visit::{body_order, post_order};
use kiln_ir::{Callee, ExprId, ExprKind, Module, Op, TensorType};

use super::{rewrite_module, use_counts};
use crate::error::Result;
use crate::pass::{Pass, PassContext, PassInfo, PassOutcome};

/// Sweeps over the module at most this many times (each folds one more link of a chain
/// of scales).
pub const MAX_ROUNDS: usize = 8;

/// Relay's `FoldScaleAxis` (backward, then forward, per node).
#[derive(Clone, Copy, Debug, Default)]
pub struct FoldScaleAxis;

impl Pass for FoldScaleAxis {
    fn info(&self) -> PassInfo {
        PassInfo {
            name: "FoldScaleAxis",
            opt_level: 3,
        }
    }

    fn run(&self, module: &Module, _ctx: &PassContext) -> Result<PassOutcome> {
        let mut m = module.clone();
        let (mut folded, mut rounds) = (0, 0);
        while rounds < MAX_ROUNDS {
            rounds += 1;
            let (next, n) = fold_round(&m)?;
            m = next;
            folded += n;
            if n == 0 {
                break;
            }
        }
        Ok(PassOutcome::new(m)
            .detail("folded", folded)
            .detail("rounds", rounds))
    }
}

/// One sweep: every `multiply` (backward) or conv2d/dense (forward) of the *input* module
/// that matches is folded. Patterns are matched on the input (its structure and use
/// counts); the replacement is built from the rebuilt nodes, which have the same op and
/// arity (a multiply is replaced by what it scaled, a conv2d or dense by a conv2d or dense
/// over the same data position, and a backward match never looks through a multiply).
fn fold_round(src: &Module) -> Result<(Module, usize)> {
    let uses = use_counts(src);
    let layer_uses = layer_data_uses(src);
    let mut shared: HashMap<ExprId, ExprId> = HashMap::new();
    let mut folded = 0;
    let out = rewrite_module(src, |m, orig, id| {
        let ctx = Forward {
            src,
            uses: &uses,
            layer_uses: &layer_uses,
        };
        if let Some(r) = ctx.fold(m, &mut shared, orig, id)? {
            folded += 1;
            return Ok(r);
        }
        if !is_multiply(src, orig) {
            return Ok(id);
        }
        let (ExprKind::Call { args: old, .. }, ExprKind::Call { args: new, .. }) =
            (src.kind(orig).clone(), m.kind(id).clone())
        else {
            return Ok(id);
        };
        for (e, s) in [(0, 1), (1, 0)] {
            let f = Folder {
                src,
                uses: &uses,
                scale: new[s],
            };
            if !f.scale_is_constant_float(m) {
                continue;
            }
            if let Some(r) = f.fold(m, old[e], new[e])? {
                folded += 1;
                return Ok(r);
            }
        }
        Ok(id)
    })?;
    Ok((out, folded))
}

/// How many conv2d or dense calls read each node as their data (first argument).
fn layer_data_uses(m: &Module) -> HashMap<ExprId, usize> {
    let mut out: HashMap<ExprId, usize> = HashMap::new();
    let mut seen = std::collections::HashSet::new();
    for (_, f) in m.globals() {
        for id in post_order(m, *f) {
            if !seen.insert(id) {
                continue;
            }
            if let (Some(Op::Conv2d(_) | Op::Dense(_)), ExprKind::Call { args, .. }) =
                (m.kind(id).op(), m.kind(id))
            {
                *out.entry(args[0]).or_default() += 1;
            }
        }
    }
    out
}

/// What the forward direction looks through between a layer and the scale: the data is
/// `[relu](([multiply(x, S)] + T))` with the multiply (and shift) single-use.
struct Chain {
    /// The relu, in the source module, when there is one.
    relu: Option<ExprId>,
    /// The constant shift `T`, in the module being built.
    shift: Option<ExprId>,
    /// The multiply's arguments, in the module being built.
    mul: [ExprId; 2],
}

/// The forward direction's view of the source module.
struct Forward<'a> {
    src: &'a Module,
    uses: &'a HashMap<ExprId, usize>,
    layer_uses: &'a HashMap<ExprId, usize>,
}

impl Forward<'_> {
    fn op_args(m: &Module, id: ExprId) -> Option<(&Op, &[ExprId])> {
        match m.kind(id) {
            ExprKind::Call {
                callee: Callee::Op(op),
                args,
            } => Some((op, args.as_slice())),
            _ => None,
        }
    }

    fn used_once(&self, orig: ExprId) -> bool {
        self.uses.get(&orig).copied() == Some(1)
    }

    /// The chain from a layer's data `old` (source) / `new` (being built) to its scale.
    fn chain(&self, m: &Module, mut old: ExprId, mut new: ExprId) -> Option<Chain> {
        let is_relu = |op: &Op| {
            matches!(
                op,
                Op::Unary(Unary {
                    kind: UnaryKind::Relu
                })
            )
        };
        let mut relu = None;
        let (o, n) = (Self::op_args(self.src, old)?, Self::op_args(m, new)?);
        if is_relu(o.0) && is_relu(n.0) {
            // Every user reads it as a layer's data, so each folds the same way.
            if self.uses.get(&old) != self.layer_uses.get(&old) {
                return None;
            }
            relu = Some(old);
            (old, new) = (o.1[0], n.1[0]);
        } else if !self.used_once(old) {
            return None;
        }
        let mut shift = None;
        let add = Op::from(Binary::new(BinaryKind::Add));
        let (o, n) = (Self::op_args(self.src, old)?, Self::op_args(m, new)?);
        if *o.0 == add && *n.0 == add && self.used_once(old) {
            let e = (0..2).find(|&b| is_constant_expr(m, n.1[1 - b]))?;
            shift = Some(n.1[1 - e]);
            (old, new) = (o.1[e], n.1[e]);
        }
        let n = Self::op_args(m, new)?;
        if !(is_multiply(self.src, old) && is_multiply(m, new) && self.used_once(old)) {
            return None;
        }
        Some(Chain {
            relu,
            shift,
            mul: [n.1[0], n.1[1]],
        })
    }

    /// The forward direction at a conv2d or dense `orig` (rebuilt as `id`): its data is
    /// a [`Chain`] ending in a multiply by `S`, constant along the input channel axis.
    /// `shared` maps a relu already folded for another layer to its replacement.
    fn fold(
        &self,
        m: &mut Module,
        shared: &mut HashMap<ExprId, ExprId>,
        orig: ExprId,
        id: ExprId,
    ) -> Result<Option<ExprId>> {
        let Some(op @ (Op::Conv2d(_) | Op::Dense(_))) = self.src.kind(orig).op().cloned() else {
            return Ok(None);
        };
        let (ExprKind::Call { args: old, .. }, ExprKind::Call { args, .. }) =
            (self.src.kind(orig), m.kind(id).clone())
        else {
            return Ok(None);
        };
        let (data, w) = (args[0], args[1]);
        let Some(chain) = self.chain(m, old[0], data) else {
            return Ok(None);
        };
        let (Some(data_ty), Some(w_ty)) = (
            m.ty(data).as_tensor().cloned(),
            m.ty(w).as_tensor().cloned(),
        ) else {
            return Ok(None);
        };
        let axis = match &op {
            Op::Conv2d(_) => 1,
            _ => match data_ty.rank().checked_sub(1) {
                Some(a) => a,
                None => return Ok(None),
            },
        };
        for (xi, si) in [(0, 1), (1, 0)] {
            let (x, scale) = (chain.mul[xi], chain.mul[si]);
            let f = Folder {
                src: self.src,
                uses: self.uses,
                scale,
            };
            if m.ty(x) != m.ty(data) || !f.scale_is_constant_float(m) {
                continue;
            }
            // relu(y * S) = relu(y) * S needs S > 0; (y * S + T) = (y + T / S) * S needs
            // S without zeros.
            let values_ok = |pred: fn(f64) -> bool| match m.kind(scale) {
                ExprKind::Constant(v) => v.to_f64_vec().into_iter().all(pred),
                _ => false,
            };
            if (chain.relu.is_some() && !values_ok(|v| v > 0.0))
                || (chain.shift.is_some() && !values_ok(|v| v != 0.0 && v.is_finite()))
            {
                continue;
            }
            let Some(k) = f.per_channel(m, &data_ty, axis) else {
                continue;
            };
            let mut shape = vec![1i64; w_ty.rank()];
            match &op {
                // Input channel c meets weight column c.
                Op::Conv2d(c) if c.groups == 1 => shape[1] = k as i64,
                // Depthwise with one output per input channel: input c meets weight row c.
                Op::Conv2d(c) if c.groups == w_ty.shape[0] && w_ty.shape[1] == 1 => {
                    shape[0] = k as i64
                }
                // Other grouped convolutions: only a scalar scale is provably the same.
                Op::Conv2d(_) if k == 1 => {}
                Op::Conv2d(_) => continue,
                _ => shape[1] = k as i64,
            }
            let new_data = match chain.relu.and_then(|r| shared.get(&r)) {
                Some(&d) => d,
                None => {
                    let mut d = x;
                    if let Some(t) = chain.shift {
                        let q = m.call(Binary::new(BinaryKind::Divide), &[t, scale])?;
                        d = m.call(Binary::new(BinaryKind::Add), &[x, q])?;
                        if m.ty(d) != m.ty(x) {
                            continue; // the shift would broadcast x up
                        }
                    }
                    if let Some(r) = chain.relu {
                        d = m.call(Unary::new(UnaryKind::Relu), &[d])?;
                        shared.insert(r, d);
                    }
                    d
                }
            };
            let s = f.reshaped_scale(m, shape)?;
            let w = m.call(Binary::new(BinaryKind::Multiply), &[w, s])?;
            return Ok(Some(m.call(op.clone(), &[new_data, w])?));
        }
        Ok(None)
    }
}

fn is_multiply(m: &Module, id: ExprId) -> bool {
    matches!(
        m.kind(id).op(),
        Some(Op::Binary(Binary {
            kind: BinaryKind::Multiply
        }))
    )
}

/// Whether `id` is built from constants by op calls only (no variables, no function
/// calls): a value `FoldConstant` can fold, such as an earlier fold's `bias * scale`.
fn is_constant_expr(m: &Module, id: ExprId) -> bool {
    body_order(m, id).into_iter().all(|n| match m.kind(n) {
        ExprKind::Constant(_) | ExprKind::Tuple(_) | ExprKind::TupleGetItem { .. } => true,
        ExprKind::Call { callee, .. } => matches!(callee, Callee::Op(_)),
        _ => false,
    })
}

struct Folder<'a> {
    src: &'a Module,
    uses: &'a HashMap<ExprId, usize>,
    /// The scale, in the module being built.
    scale: ExprId,
}

impl Folder<'_> {
    fn scale_is_constant_float(&self, m: &Module) -> bool {
        let float = m
            .ty(self.scale)
            .as_tensor()
            .is_some_and(|t| t.dtype.is_float());
        float && is_constant_expr(m, self.scale)
    }

    fn single_use(&self, orig: ExprId) -> bool {
        self.uses.get(&orig).copied() == Some(1)
    }

    /// The output channel axis of `orig` if it is a conv2d or dense with a tensor result.
    fn channel_axis(&self, orig: ExprId) -> Option<usize> {
        let rank = self.src.ty(orig).as_tensor()?.rank();
        match self.src.kind(orig).op()? {
            Op::Conv2d(_) => Some(1),
            Op::Dense(_) if rank >= 1 => Some(rank - 1),
            _ => None,
        }
    }

    /// `C'` if the scale varies only along `axis` of `out`.
    fn per_channel(&self, m: &Module, out: &TensorType, axis: usize) -> Option<usize> {
        let s = m.ty(self.scale).as_tensor()?;
        if s.rank() > out.rank() || s.dtype != out.dtype {
            return None;
        }
        let offset = out.rank() - s.rank();
        for (j, &d) in s.shape.iter().enumerate() {
            let ok = d == 1 || (j + offset == axis && d == out.shape[axis]);
            if !ok {
                return None;
            }
        }
        Some(s.numel())
    }

    fn reshaped_scale(&self, m: &mut Module, shape: Vec<i64>) -> Result<ExprId> {
        Ok(m.call(Reshape { newshape: shape }, &[self.scale])?)
    }

    /// `orig * scale` without the multiply (`new` is `orig` rebuilt), or `None` when the
    /// fold is not provably sound.
    fn fold(&self, m: &mut Module, orig: ExprId, new: ExprId) -> Result<Option<ExprId>> {
        if !self.single_use(orig) {
            return Ok(None);
        }
        let Some(out) = self.src.ty(orig).as_tensor().cloned() else {
            return Ok(None);
        };
        let ExprKind::Call { args, .. } = m.kind(new).clone() else {
            return Ok(None);
        };
        let Some(op) = self.src.kind(orig).op().cloned() else {
            return Ok(None);
        };
        let ExprKind::Call { args: old, .. } = self.src.kind(orig).clone() else {
            return Ok(None);
        };
        match op {
            Op::Conv2d(_) | Op::Dense(_) => {
                let axis = self.channel_axis(orig).expect("conv2d or dense");
                let Some(k) = self.per_channel(m, &out, axis) else {
                    return Ok(None);
                };
                let w = args[1];
                let weight_rank = m.ty(w).as_tensor().map_or(0, |t| t.rank());
                let mut shape = vec![1i64; weight_rank];
                let Some(first) = shape.first_mut() else {
                    return Ok(None);
                };
                *first = k as i64;
                let s = self.reshaped_scale(m, shape)?;
                let w = m.call(
                    Binary {
                        kind: BinaryKind::Multiply,
                    },
                    &[w, s],
                )?;
                Ok(Some(m.call(op, &[args[0], w])?))
            }
            Op::Binary(Binary {
                kind: BinaryKind::Add,
            }) => {
                // Both branches scaled: (a + b) * S = a * S + b * S, when each folds.
                let same = |i: usize| self.src.ty(old[i]) == self.src.ty(orig);
                if !is_constant_expr(m, args[0]) && !is_constant_expr(m, args[1]) {
                    if same(0)
                        && same(1)
                        && let Some(a) = self.fold(m, old[0], args[0])?
                        && let Some(b) = self.fold(m, old[1], args[1])?
                    {
                        return Ok(Some(m.call(op, &[a, b])?));
                    }
                    return Ok(None);
                }
                for (e, b) in [(0, 1), (1, 0)] {
                    let constant = is_constant_expr(m, args[b]);
                    if !constant || self.src.ty(old[e]) != self.src.ty(orig) {
                        continue;
                    }
                    if let Some(inner) = self.fold(m, old[e], args[e])? {
                        let mul = Binary {
                            kind: BinaryKind::Multiply,
                        };
                        let bias = m.call(mul, &[args[b], self.scale])?;
                        let mut pair = [inner, bias];
                        if e == 1 {
                            pair.swap(0, 1);
                        }
                        return Ok(Some(m.call(op, &pair)?));
                    }
                }
                Ok(None)
            }
            Op::BiasAdd(BiasAdd { axis }) => {
                let Some(channel) = self.channel_axis(old[0]) else {
                    return Ok(None);
                };
                let rank = out.rank() as i64;
                let axis = if axis < 0 { axis + rank } else { axis };
                let Some(k) = self.per_channel(m, &out, channel) else {
                    return Ok(None);
                };
                if axis != channel as i64 || !is_constant_expr(m, args[1]) {
                    return Ok(None);
                }
                let Some(inner) = self.fold(m, old[0], args[0])? else {
                    return Ok(None);
                };
                let s = self.reshaped_scale(m, vec![k as i64])?;
                let bias = m.call(
                    Binary {
                        kind: BinaryKind::Multiply,
                    },
                    &[args[1], s],
                )?;
                Ok(Some(m.call(op, &[inner, bias])?))
            }
            _ => Ok(None),
        }
    }
}
