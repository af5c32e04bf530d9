//! Folding into constants: batch norm in inference form as a per-channel scale and
//! shift; `bias_add` as a broadcast `add`; a per-output-channel constant scale folded
//! into the weights of the `nn.conv2d` or `nn.dense` before it; a constant scale moved
//! past a constant shift; chains of constant shifts or scales combined. The new
//! subterms are computed from constants only, so they cost nothing at run time (they
//! fold at compile time). See `RULES.md`. The standard pipeline's `SimplifyInference`
//! and `FoldScaleAxis` do most of this before EqSat runs; why both exist is in
//! `passes/fold_scale_axis.rs`'s module doc.

use std::sync::Arc;

use egg::Id;
use kiln_ir::Op;
use kiln_ir::op::{Binary, BinaryKind, Reshape, Unary, UnaryKind};

use crate::eqsat::analysis::EGraph;
use crate::eqsat::lang::Node;
use crate::eqsat::pattern::{Cond, Pat, PatternRule};
use crate::eqsat::rule::{
    FnRule, Imperative, Roots, Rule, Term, binary_args, calls_named, is_const, is_float, tensor,
};

const FAMILY: &str = "fold";

/// Why the imperative rules of this family are not patterns.
const COMPUTED_SHAPE: &str = "the right-hand side reshapes to a channel layout computed from the match's shapes and attributes";

/// The rules of this family (folding into constants), in the order `RULES.md` lists them.
pub fn rules() -> Vec<Arc<dyn Rule>> {
    let mul = |a, b| Pat::bin(BinaryKind::Multiply, a, b);
    let (y, b, s) = (Pat::var("y"), Pat::var("b"), Pat::var("s"));
    let constant_operands = || vec![Cond::NotConst("y"), Cond::Const("a"), Cond::Const("b")];
    vec![
        imperative(
            "batch_norm_affine",
            batch_norm_affine,
            Roots::Any,
            "`batch_norm(x, γ, β, μ, σ², axis, ε).0 = x * S + T` with `k = γ / sqrt(σ² + ε)` (`1 / sqrt(σ² + ε)` when `scale=False`), `S = reshape(k, [C, 1, ..., 1])`, `T = reshape(β - μ k, ...)` (`-μ k` when `center=False`), the ones making `S`, `T` broadcast along `axis`",
            "`x` float; `γ`, `β`, `μ`, `σ²` constants (so `S`, `T` fold)",
        ),
        imperative(
            "bias_add_to_add",
            bias_add_to_add,
            Roots::Named(vec!["nn.bias_add"]),
            "`bias_add(x, b, axis) = x + reshape(b, [C, 1, ..., 1])`",
            "",
        ),
        imperative(
            "scale_into_conv2d",
            scale_into_conv2d,
            Roots::Exact(vec![(Binary::new(BinaryKind::Multiply).into(), 2)]),
            "`conv2d(x, W) * s = conv2d(x, W * reshape(s, [O, 1, 1, 1]))` (either operand order)",
            "`s` constant, `x` not; `s` right-aligned to rank 4 is `[1, O, 1, 1]` or one element (then `[1, 1, 1, 1]`); any groups, strides, padding, dilation (each output channel is a sum over its own filter)",
        ),
        imperative(
            "scale_into_dense",
            scale_into_dense,
            Roots::Exact(vec![(Binary::new(BinaryKind::Multiply).into(), 2)]),
            "`dense(x, W) * s = dense(x, W * reshape(s, [U, 1]))`",
            "`s` constant; result rank 2; `s` right-aligned is `[1, U]` or one element",
        ),
        // (y + b) * s = y * s + b * s: moves a scale towards a producer it can fold into.
        Arc::new(PatternRule::new(
            "scale_past_shift",
            FAMILY,
            both_orders(
                BinaryKind::Multiply,
                paired(
                    both_orders(BinaryKind::Add, vec![(y.clone(), b.clone())]),
                    &s,
                ),
            ),
            Pat::bin(
                BinaryKind::Add,
                mul(y.clone(), s.clone()),
                mul(b.clone(), s.clone()),
            ),
            vec![Cond::NotConst("y"), Cond::Const("b"), Cond::Const("s")],
        )),
        chain("shift_chain", BinaryKind::Add, constant_operands()),
        chain("scale_chain", BinaryKind::Multiply, constant_operands()),
    ]
}

fn imperative(
    name: &'static str,
    apply: fn(&EGraph, Id) -> Vec<Term>,
    roots: Roots,
    law: &'static str,
    conditions: &'static str,
) -> Arc<dyn Rule> {
    Arc::new(Imperative {
        rule: FnRule::new(name, FAMILY, apply),
        roots,
        law,
        conditions,
        why: COMPUTED_SHAPE,
    })
}

/// `kind(p, q)` and `kind(q, p)` for each pair: the operand orders of a law over a
/// commutative op.
fn both_orders(kind: BinaryKind, pairs: Vec<(Pat, Pat)>) -> Vec<Pat> {
    pairs
        .into_iter()
        .flat_map(|(p, q)| [Pat::bin(kind, p.clone(), q.clone()), Pat::bin(kind, q, p)])
        .collect()
}

/// Each of `pats` with `other`.
fn paired(pats: Vec<Pat>, other: &Pat) -> Vec<(Pat, Pat)> {
    pats.into_iter().map(|p| (p, other.clone())).collect()
}

/// `(y ∘ a) ∘ b = y ∘ (a ∘ b)` in every operand order, under `conds`.
fn chain(name: &'static str, kind: BinaryKind, conds: Vec<Cond>) -> Arc<dyn Rule> {
    let (y, a, b) = (Pat::var("y"), Pat::var("a"), Pat::var("b"));
    let inner = both_orders(kind, vec![(y.clone(), a.clone())]);
    let lhs = both_orders(kind, paired(inner, &b));
    Arc::new(PatternRule::new(
        name,
        FAMILY,
        lhs,
        Pat::bin(kind, y, Pat::bin(kind, a, b)),
        conds,
    ))
}

fn bin(kind: BinaryKind, a: impl Into<Term>, b: impl Into<Term>) -> Term {
    Term::call(Binary::new(kind), vec![a.into(), b.into()])
}

fn reshape(x: impl Into<Term>, shape: &[usize]) -> Term {
    let newshape = shape.iter().map(|&d| d as i64).collect();
    Term::call(Reshape { newshape }, vec![x.into()])
}

/// `[len, 1, ..., 1]` with `rank - axis - 1` ones: a per-channel vector laid out to
/// broadcast along `axis` of a rank-`rank` tensor.
fn channel_shape(len: usize, rank: usize, axis: usize) -> Vec<usize> {
    let mut s = vec![len];
    s.extend(std::iter::repeat_n(1, rank - axis - 1));
    s
}

fn norm_axis(axis: i64, rank: usize) -> Option<usize> {
    let a = if axis < 0 { axis + rank as i64 } else { axis };
    usize::try_from(a).ok().filter(|&a| a < rank)
}

/// `batch_norm(x, γ, β, μ, σ²).0 = x * s + t` with `s = γ / sqrt(σ² + ε)` and
/// `t = β - μ * s` laid out along the channel axis (γ dropped when `scale=False`, β when
/// `center=False`); γ, β, μ, σ² constant, x float.
fn batch_norm_affine(g: &EGraph, c: Id) -> Vec<Term> {
    let mut out = vec![];
    for node in &g[c].nodes {
        let Node::Get(0, [t]) = node else { continue };
        for (op, args) in calls_named(g, *t, "nn.batch_norm") {
            let (Op::BatchNorm(bn), [x, gamma, beta, mean, var]) = (op, args) else {
                continue;
            };
            let Some(xt) = tensor(g, *x) else { continue };
            let Some(axis) = norm_axis(bn.axis, xt.rank()) else {
                continue;
            };
            if !is_float(g, *x) || ![gamma, beta, mean, var].iter().all(|&&p| is_const(g, p)) {
                continue;
            }
            let eps = Term::scalar(bn.epsilon.0, xt.dtype);
            let inv = Term::call(
                Unary {
                    kind: UnaryKind::Rsqrt,
                },
                vec![bin(BinaryKind::Add, *var, eps)],
            );
            let scale = if bn.scale {
                bin(BinaryKind::Multiply, *gamma, inv)
            } else {
                inv
            };
            let moved = bin(BinaryKind::Multiply, *mean, scale.clone());
            let shift = if bn.center {
                bin(BinaryKind::Subtract, *beta, moved)
            } else {
                Term::call(
                    Unary {
                        kind: UnaryKind::Negative,
                    },
                    vec![moved],
                )
            };
            let shape = channel_shape(xt.shape[axis], xt.rank(), axis);
            let scaled = bin(BinaryKind::Multiply, *x, reshape(scale, &shape));
            out.push(bin(BinaryKind::Add, scaled, reshape(shift, &shape)));
        }
    }
    out
}

/// `bias_add(x, b, axis) = x + b` laid out along `axis`.
fn bias_add_to_add(g: &EGraph, c: Id) -> Vec<Term> {
    let mut out = vec![];
    for (op, args) in calls_named(g, c, "nn.bias_add") {
        let (Op::BiasAdd(ba), [x, b]) = (op, args) else {
            continue;
        };
        let (Some(xt), Some(bt)) = (tensor(g, *x), tensor(g, *b)) else {
            continue;
        };
        let Some(axis) = norm_axis(ba.axis, xt.rank()) else {
            continue;
        };
        let shape = channel_shape(bt.numel(), xt.rank(), axis);
        out.push(bin(BinaryKind::Add, *x, reshape(*b, &shape)));
    }
    out
}

/// The operands `(y, s)` of `y * s` or `s * y` in `class` with `s` constant and `y`
/// not.
fn const_scaled(g: &EGraph, class: Id, op: &str) -> Vec<(Id, Id)> {
    let mut out = vec![];
    for [a, b] in binary_args(g, class, op) {
        if is_const(g, b) && !is_const(g, a) {
            out.push((a, b));
        }
        if is_const(g, a) && !is_const(g, b) {
            out.push((b, a));
        }
    }
    out
}

/// `s`'s shape right-aligned to rank `rank` is all ones except `len` (or 1) at `axis`:
/// the length of `s` along `axis`, if so.
fn per_channel(g: &EGraph, s: Id, rank: usize, axis: usize) -> Option<usize> {
    let st = tensor(g, s)?;
    if st.rank() > rank {
        return None;
    }
    let pad = rank - st.rank();
    let mut len = 1;
    for (i, &d) in st.shape.iter().enumerate() {
        if i + pad == axis {
            len = d;
        } else if d != 1 {
            return None;
        }
    }
    Some(len)
}

/// `conv2d(x, W) * s = conv2d(x, W * s')` for a constant `s` constant along the
/// output-channel axis 1 (shape `[1, O, 1, 1]`, `[O, 1, 1]`, or one element), `s'` its
/// values as `[O, 1, 1, 1]`.
fn scale_into_conv2d(g: &EGraph, c: Id) -> Vec<Term> {
    fold_scale(g, c, "nn.conv2d", 4, 1, &[1, 1, 1])
}

/// `dense(x, W) * s = dense(x, W * s')` for a constant `s` of shape `[1, U]`, `[U]` or
/// one element, `s'` its values as `[U, 1]`.
fn scale_into_dense(g: &EGraph, c: Id) -> Vec<Term> {
    fold_scale(g, c, "nn.dense", 2, 1, &[1])
}

fn fold_scale(
    g: &EGraph,
    c: Id,
    name: &str,
    rank: usize,
    axis: usize,
    trailing: &[usize],
) -> Vec<Term> {
    let mut out = vec![];
    for (y, s) in const_scaled(g, c, "multiply") {
        let Some(len) = per_channel(g, s, rank, axis) else {
            continue;
        };
        for (op, args) in calls_named(g, y, name) {
            let [x, w] = args else { continue };
            if tensor(g, y).is_none_or(|t| t.rank() != rank) {
                continue;
            }
            let mut shape = vec![len];
            shape.extend_from_slice(trailing);
            let w2 = bin(BinaryKind::Multiply, *w, reshape(s, &shape));
            out.push(Term::call(op.clone(), vec![(*x).into(), w2]));
        }
    }
    out
}
