//! Algebraic simplification, all declarative ([`PatternRule`]): identities of
//! elementwise arithmetic (`x * 1`, `x + 0`, `x - 0`, `x / 1`, `-(-x)`, `relu(relu x)`)
//! and restricted associativity of `add` and `multiply`: only towards a regrouped pair
//! that already exists or is made of constants. No commutativity rule (STYLE habit 4:
//! blanket commutativity doubles the e-graph and finds nothing a rule cannot state for
//! both operand orders itself, which the identities and the fold family do). Identities
//! that drop an operand apply only where the result keeps the type (a broadcast `1`
//! that widens `x` is no identity) — the type check every rewrite passes enforces that.
//! See `RULES.md`.

use std::sync::Arc;

use kiln_ir::op::{BinaryKind, UnaryKind};

use crate::eqsat::pattern::{Cond, Pat, PatternRule};
use crate::eqsat::rule::Rule;

const FAMILY: &str = "algebraic";

/// The rules of this family (algebraic simplification), in the order `RULES.md` lists them.
pub fn rules() -> Vec<Arc<dyn Rule>> {
    let x = || Pat::var("x");
    let un = |k, a| Pat::un(k, a);
    let relu = UnaryKind::Relu;
    let neg = UnaryKind::Negative;
    let mut out: Vec<Arc<dyn Rule>> = vec![
        identity("mul_one", BinaryKind::Multiply, 1.0, true),
        identity("add_zero", BinaryKind::Add, 0.0, true),
        identity("sub_zero", BinaryKind::Subtract, 0.0, false),
        identity("div_one", BinaryKind::Divide, 1.0, false),
        Arc::new(PatternRule::new(
            "neg_neg",
            FAMILY,
            vec![un(neg, un(neg, x()))],
            x(),
            vec![],
        )),
        Arc::new(PatternRule::new(
            "relu_relu",
            FAMILY,
            vec![un(relu, un(relu, x()))],
            un(relu, x()),
            vec![],
        )),
    ];
    out.push(associate("add_assoc", BinaryKind::Add));
    out.push(associate("mul_assoc", BinaryKind::Multiply));
    out
}

/// `x ∘ u = x` (and `u ∘ x = x` when `∘` commutes) for a constant `u` of unit elements.
fn identity(name: &'static str, kind: BinaryKind, unit: f64, commutes: bool) -> Arc<dyn Rule> {
    let (x, u) = (Pat::var("x"), Pat::var("u"));
    let mut lhs = vec![Pat::bin(kind, x.clone(), u.clone())];
    if commutes {
        lhs.push(Pat::bin(kind, u, x.clone()));
    }
    Arc::new(PatternRule::new(
        name,
        FAMILY,
        lhs,
        x,
        vec![Cond::Splat("u", unit)],
    ))
}

/// `(x ∘ y) ∘ z = x ∘ (y ∘ z)` for float operands of the result's type, when `y ∘ z` is
/// already in the e-graph (so the regrouping exposes sharing) or `y`, `z` are both
/// constants (so it folds).
fn associate(name: &'static str, kind: BinaryKind) -> Arc<dyn Rule> {
    let (x, y, z) = (Pat::var("x"), Pat::var("y"), Pat::var("z"));
    let yz = Pat::bin(kind, y.clone(), z.clone());
    Arc::new(PatternRule::new(
        name,
        FAMILY,
        vec![Pat::bin(kind, Pat::bin(kind, x.clone(), y), z)],
        Pat::bin(kind, x, yz.clone()),
        vec![
            Cond::Float("x"),
            Cond::ResultType("x"),
            Cond::ResultType("y"),
            Cond::ResultType("z"),
            Cond::AnyOf(vec![
                vec![Cond::Const("y"), Cond::Const("z")],
                vec![Cond::Exists(yz)],
            ]),
        ],
    ))
}
