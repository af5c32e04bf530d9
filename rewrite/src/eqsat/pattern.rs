//! Declarative rules: a [`PatternRule`] is `lhs => rhs if conditions`, with [`Pat`]
//! patterns over Kiln's ops (an op with its attributes applied to sub-patterns, or a
//! variable that binds an e-class) and typed [`Cond`]itions on the variables. One
//! definition drives the matcher (here), the rule table in `RULES.md` (its [`Rule::law`]
//! and [`Rule::conditions`] print the definition) and the soundness tests' case
//! generator (`rewrite/tests/eqsat_rules.rs` builds a module from each left-hand side,
//! choosing leaves that meet the conditions). The runner searches only the e-classes
//! holding the left-hand sides' root ops (egg's index by op).
//!
//! ```
//! use kiln_ir::op::BinaryKind;
//! use kiln_rewrite::eqsat::pattern::{Cond, Pat, PatternRule};
//!
//! // x - x = 0 would need a new constant: patterns only rearrange what they match.
//! // (x * s) - (y * s) = (x - y) * s, for any s:
//! let (x, y, s) = (Pat::var("x"), Pat::var("y"), Pat::var("s"));
//! let rule = PatternRule::new(
//!     "sub_common_scale",
//!     "mine",
//!     vec![Pat::bin(
//!         BinaryKind::Subtract,
//!         Pat::bin(BinaryKind::Multiply, x.clone(), s.clone()),
//!         Pat::bin(BinaryKind::Multiply, y.clone(), s.clone()),
//!     )],
//!     Pat::bin(BinaryKind::Multiply, Pat::bin(BinaryKind::Subtract, x, y), s),
//!     vec![Cond::Float("x")],
//! );
//! assert_eq!(
//!     kiln_rewrite::Rule::law(&rule),
//!     "`subtract(multiply(x, s), multiply(y, s))` = `multiply(subtract(x, y), s)`"
//! );
//! ```

use std::fmt;

use egg::Id;
use kiln_ir::Op;
use kiln_ir::op::{Binary, BinaryKind, Unary, UnaryKind};

use super::analysis::EGraph;
use super::lang::Node;
use super::rule::{Roots, Rule, Term, is_const, is_float, is_splat};

/// A pattern over the e-graph language.
#[derive(Clone, Debug, PartialEq)]
pub enum Pat {
    /// Any e-class, bound to the name; a name used twice must bind one class.
    Var(&'static str),
    /// A call of exactly this op (attributes included) on the argument patterns.
    Call(Op, Vec<Pat>),
}

impl Pat {
    /// The pattern variable `name` (`?x` in the rule table).
    pub fn var(name: &'static str) -> Pat {
        Pat::Var(name)
    }

    /// A call of `op` on `args`.
    pub fn call(op: impl Into<Op>, args: Vec<Pat>) -> Pat {
        Pat::Call(op.into(), args)
    }

    /// `kind(a, b)`.
    pub fn bin(kind: BinaryKind, a: Pat, b: Pat) -> Pat {
        Pat::call(Binary::new(kind), vec![a, b])
    }

    /// `kind(a)`.
    pub fn un(kind: UnaryKind, a: Pat) -> Pat {
        Pat::call(Unary::new(kind), vec![a])
    }

    /// The variables, each once, in the order they first appear.
    pub fn vars(&self) -> Vec<&'static str> {
        let mut out = vec![];
        self.collect_vars(&mut out);
        out
    }

    fn collect_vars(&self, out: &mut Vec<&'static str>) {
        match self {
            Pat::Var(v) => {
                if !out.contains(v) {
                    out.push(v)
                }
            }
            Pat::Call(_, args) => args.iter().for_each(|a| a.collect_vars(out)),
        }
    }

    /// The term this pattern stands for under `b` (every variable must be bound).
    fn term(&self, b: &Bindings) -> Option<Term> {
        Some(match self {
            Pat::Var(v) => Term::Class(b.get(v)?),
            Pat::Call(op, args) => Term::Call(
                op.clone(),
                args.iter().map(|a| a.term(b)).collect::<Option<_>>()?,
            ),
        })
    }

    /// The class this pattern already has in `g` under `b`, if every node exists.
    fn lookup(&self, g: &EGraph, b: &Bindings) -> Option<Id> {
        match self {
            Pat::Var(v) => b.get(v),
            Pat::Call(op, args) => {
                let ids = args
                    .iter()
                    .map(|a| a.lookup(g, b))
                    .collect::<Option<Vec<_>>>()?;
                g.lookup(Node::Call(op.clone(), ids))
            }
        }
    }

    /// Every way this pattern matches class `class`, extending `b`.
    fn matches(&self, g: &EGraph, class: Id, b: &Bindings, out: &mut Vec<Bindings>) {
        match self {
            Pat::Var(v) => match b.get(v) {
                Some(bound) if g.find(bound) != g.find(class) => {}
                Some(_) => out.push(b.clone()),
                None => out.push(b.with(v, g.find(class))),
            },
            Pat::Call(op, args) => {
                for node in &g[class].nodes {
                    let Node::Call(o, children) = node else {
                        continue;
                    };
                    if o != op || children.len() != args.len() {
                        continue;
                    }
                    let mut partial = vec![b.clone()];
                    for (a, &child) in args.iter().zip(children) {
                        let mut next = vec![];
                        for pb in &partial {
                            a.matches(g, child, pb, &mut next);
                        }
                        partial = next;
                    }
                    out.extend(partial);
                }
            }
        }
    }
}

impl fmt::Display for Pat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Pat::Var(v) => f.write_str(v),
            Pat::Call(op, args) => {
                write!(f, "{}(", op.name())?;
                for (i, a) in args.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{a}")?;
                }
                for (k, v) in op.attrs() {
                    write!(f, ", {k}={v}")?;
                }
                f.write_str(")")
            }
        }
    }
}

/// Variable bindings of one match.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Bindings(Vec<(&'static str, Id)>);

impl Bindings {
    /// The class bound to variable `v`, if the match bound it.
    pub fn get(&self, v: &str) -> Option<Id> {
        self.0.iter().find(|(n, _)| *n == v).map(|(_, id)| *id)
    }

    fn with(&self, v: &'static str, id: Id) -> Bindings {
        let mut b = self.clone();
        b.0.push((v, id));
        b
    }
}

/// A typed condition on the variables of a match (beyond the type check every rewrite
/// passes).
#[derive(Clone, Debug, PartialEq)]
pub enum Cond {
    /// A compile-time constant with every element equal to the value.
    Splat(&'static str, f64),
    /// A compile-time constant (a constant, or ops on constants only).
    Const(&'static str),
    /// Not a compile-time constant.
    NotConst(&'static str),
    /// Of a float dtype.
    Float(&'static str),
    /// Of the matched class's type (no broadcasting on the way).
    ResultType(&'static str),
    /// The term is already in the e-graph (the rewrite exposes sharing).
    Exists(Pat),
    /// One of the groups holds in full.
    AnyOf(Vec<Vec<Cond>>),
}

impl Cond {
    /// Whether the condition holds for match `b` at class `class`.
    pub fn holds(&self, g: &EGraph, class: Id, b: &Bindings) -> bool {
        let id = |v: &str| b.get(v);
        match self {
            Cond::Splat(v, x) => id(v).is_some_and(|c| is_splat(g, c, *x)),
            Cond::Const(v) => id(v).is_some_and(|c| is_const(g, c)),
            Cond::NotConst(v) => id(v).is_some_and(|c| !is_const(g, c)),
            Cond::Float(v) => id(v).is_some_and(|c| is_float(g, c)),
            Cond::ResultType(v) => id(v).is_some_and(|c| g[c].data.ty == g[class].data.ty),
            Cond::Exists(p) => p.lookup(g, b).is_some(),
            Cond::AnyOf(groups) => groups
                .iter()
                .any(|group| group.iter().all(|c| c.holds(g, class, b))),
        }
    }
}

impl fmt::Display for Cond {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cond::Splat(v, x) => write!(f, "`{v}` constant, every element {x}"),
            Cond::Const(v) => write!(f, "`{v}` constant"),
            Cond::NotConst(v) => write!(f, "`{v}` not constant"),
            Cond::Float(v) => write!(f, "`{v}` float"),
            Cond::ResultType(v) => write!(f, "`{v}` of the result's type"),
            Cond::Exists(p) => write!(f, "`{p}` already in the e-graph"),
            Cond::AnyOf(groups) => {
                let alts: Vec<String> = groups.iter().map(|g| list(g, " and ")).collect();
                write!(f, "either {}", alts.join(" or "))
            }
        }
    }
}

fn list(conds: &[Cond], sep: &str) -> String {
    conds
        .iter()
        .map(|c| c.to_string())
        .collect::<Vec<_>>()
        .join(sep)
}

/// A rule written as `lhs => rhs if conditions`. Several left-hand sides (operand orders
/// of one law, say) share the right-hand side and the conditions; each names every
/// variable the right-hand side and the conditions use.
#[derive(Clone, Debug)]
pub struct PatternRule {
    /// Unique name, as in `RULES.md`.
    pub name: &'static str,
    /// The family (`algebraic`, `layout`, `fold`, `merge`).
    pub family: &'static str,
    /// The left-hand sides; a class matching any of them gets the right-hand side.
    pub lhs: Vec<Pat>,
    /// The term added to the matched class.
    pub rhs: Pat,
    /// What must hold of the bindings besides the match (all of them).
    pub conds: Vec<Cond>,
}

impl PatternRule {
    /// The rule; panics (a bug in the rule's definition, found by any test that builds
    /// it) when a left-hand side is a bare variable or misses a variable the right-hand
    /// side uses.
    pub fn new(
        name: &'static str,
        family: &'static str,
        lhs: Vec<Pat>,
        rhs: Pat,
        conds: Vec<Cond>,
    ) -> PatternRule {
        for l in &lhs {
            assert!(
                matches!(l, Pat::Call(..)),
                "rule `{name}`: a left-hand side must start with an op"
            );
            let vars = l.vars();
            for v in rhs.vars() {
                assert!(
                    vars.contains(&v),
                    "rule `{name}`: `{v}` is not bound by `{l}`"
                );
            }
        }
        PatternRule {
            name,
            family,
            lhs,
            rhs,
            conds,
        }
    }

    /// The matches of the rule at `class` that meet the conditions.
    pub fn matches(&self, g: &EGraph, class: Id) -> Vec<Bindings> {
        let mut out = vec![];
        for l in &self.lhs {
            l.matches(g, class, &Bindings::default(), &mut out);
        }
        out.retain(|b| self.conds.iter().all(|c| c.holds(g, class, b)));
        out
    }
}

impl Rule for PatternRule {
    fn name(&self) -> &str {
        self.name
    }

    fn family(&self) -> &str {
        self.family
    }

    fn rewrites(&self, g: &EGraph, class: Id) -> Vec<Term> {
        let mut out: Vec<Term> = vec![];
        for b in self.matches(g, class) {
            // A right-hand side already in the class adds nothing.
            if self
                .rhs
                .lookup(g, &b)
                .is_some_and(|c| g.find(c) == g.find(class))
            {
                continue;
            }
            out.extend(self.rhs.term(&b));
        }
        out
    }

    fn roots(&self) -> Roots {
        let mut ops: Vec<(Op, usize)> = vec![];
        for l in &self.lhs {
            if let Pat::Call(op, args) = l
                && !ops.iter().any(|(o, n)| o == op && *n == args.len())
            {
                ops.push((op.clone(), args.len()));
            }
        }
        Roots::Exact(ops)
    }

    fn law(&self) -> String {
        let lhs: Vec<String> = self.lhs.iter().map(|l| format!("`{l}`")).collect();
        format!("{} = `{}`", lhs.join(", "), self.rhs)
    }

    fn conditions(&self) -> String {
        list(&self.conds, "; ")
    }

    fn pattern(&self) -> Option<&PatternRule> {
        Some(self)
    }
}
