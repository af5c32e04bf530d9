//! Algebraic simplification: identities of elementwise arithmetic (`x * 1`, `x + 0`,
//! `x - 0`, `x / 1`, `-(-x)`, `relu(relu x)`) and restricted commutativity and
//! associativity of `add` and `multiply` (STYLE habit 4: never blanket — they blow up
//! the e-graph): commutativity for operands of one type, associativity only towards a
//! regrouped pair that already exists or is made of constants. Identities that drop an
//! operand apply only where the result keeps the type (a broadcast `1` that widens `x`
//! is no identity) — the type check every rewrite passes enforces that. See `RULES.md`.

use std::sync::Arc;

use egg::Id;
use kiln_ir::op::{Binary, BinaryKind};

use crate::eqsat::analysis::EGraph;
use crate::eqsat::lang::Node;
use crate::eqsat::rule::{FnRule, Rule, Term, calls_named, is_const, is_float, is_splat, tensor};

const FAMILY: &str = "algebraic";

pub fn rules() -> Vec<Arc<dyn Rule>> {
    let r = |name, apply| -> Arc<dyn Rule> {
        Arc::new(FnRule {
            name,
            family: FAMILY,
            apply,
        })
    };
    vec![
        r("mul_one", mul_one),
        r("add_zero", add_zero),
        r("sub_zero", sub_zero),
        r("div_one", div_one),
        r("neg_neg", neg_neg),
        r("relu_relu", relu_relu),
        r("add_comm", add_comm),
        r("mul_comm", mul_comm),
        r("add_assoc", add_assoc),
        r("mul_assoc", mul_assoc),
    ]
}

/// The operands `[a, b]` of every `name(a, b)` call in `class`.
pub(crate) fn binary_args(g: &EGraph, class: Id, name: &str) -> Vec<[Id; 2]> {
    calls_named(g, class, name)
        .filter_map(|(_, args)| <[Id; 2]>::try_from(args).ok())
        .collect()
}

/// `x * 1 = x`, `1 * x = x` (float; the type check keeps the shape).
fn mul_one(g: &EGraph, c: Id) -> Vec<Term> {
    identity(g, c, "multiply", 1.0, true)
}

/// `x + 0 = x`, `0 + x = x`.
fn add_zero(g: &EGraph, c: Id) -> Vec<Term> {
    identity(g, c, "add", 0.0, true)
}

/// `x - 0 = x`.
fn sub_zero(g: &EGraph, c: Id) -> Vec<Term> {
    identity(g, c, "subtract", 0.0, false)
}

/// `x / 1 = x`.
fn div_one(g: &EGraph, c: Id) -> Vec<Term> {
    identity(g, c, "divide", 1.0, false)
}

fn identity(g: &EGraph, c: Id, op: &str, unit: f64, commutes: bool) -> Vec<Term> {
    let mut out = vec![];
    for [a, b] in binary_args(g, c, op) {
        if is_splat(g, b, unit) {
            out.push(Term::Class(a));
        }
        if commutes && is_splat(g, a, unit) {
            out.push(Term::Class(b));
        }
    }
    out
}

/// `negative(negative(x)) = x`.
fn neg_neg(g: &EGraph, c: Id) -> Vec<Term> {
    involution(g, c, "negative")
}

fn involution(g: &EGraph, c: Id, name: &str) -> Vec<Term> {
    let mut out = vec![];
    for (_, args) in calls_named(g, c, name) {
        for (_, inner) in calls_named(g, args[0], name) {
            out.push(Term::Class(inner[0]));
        }
    }
    out
}

/// `relu(relu(x)) = relu(x)`.
fn relu_relu(g: &EGraph, c: Id) -> Vec<Term> {
    let mut out = vec![];
    for (_, args) in calls_named(g, c, "nn.relu") {
        if calls_named(g, args[0], "nn.relu").next().is_some() {
            out.push(Term::Class(args[0]));
        }
    }
    out
}

/// `a + b = b + a` for operands of one type.
fn add_comm(g: &EGraph, c: Id) -> Vec<Term> {
    commute(g, c, BinaryKind::Add)
}

/// `a * b = b * a` for operands of one type.
fn mul_comm(g: &EGraph, c: Id) -> Vec<Term> {
    commute(g, c, BinaryKind::Multiply)
}

fn commute(g: &EGraph, c: Id, kind: BinaryKind) -> Vec<Term> {
    let op = Binary::new(kind);
    binary_args(g, c, kind.name())
        .into_iter()
        .filter(|[a, b]| a != b && g[*a].data.ty == g[*b].data.ty)
        .map(|[a, b]| Term::call(op.clone(), vec![b.into(), a.into()]))
        .collect()
}

/// `(a + b) + c = a + (b + c)` for float operands of one shape, when `b + c` is
/// already in the e-graph (so the regrouping exposes sharing) or `b`, `c` are both
/// constants (so it folds).
fn add_assoc(g: &EGraph, c: Id) -> Vec<Term> {
    associate(g, c, BinaryKind::Add)
}

/// `(a * b) * c = a * (b * c)`, under the same conditions as [`add_assoc`].
fn mul_assoc(g: &EGraph, c: Id) -> Vec<Term> {
    associate(g, c, BinaryKind::Multiply)
}

fn associate(g: &EGraph, c: Id, kind: BinaryKind) -> Vec<Term> {
    let op = Binary::new(kind);
    let name = kind.name();
    let mut out = vec![];
    for [ab, z] in binary_args(g, c, name) {
        for [x, y] in binary_args(g, ab, name) {
            let same = [x, y, z].iter().all(|&v| tensor(g, v) == tensor(g, c));
            let useful = g
                .lookup(Node::Call(op.clone().into(), vec![y, z]))
                .is_some()
                || (is_const(g, y) && is_const(g, z));
            if same && useful && is_float(g, c) {
                let inner = Term::call(op.clone(), vec![y.into(), z.into()]);
                out.push(Term::call(op.clone(), vec![x.into(), inner]));
            }
        }
    }
    out
}
