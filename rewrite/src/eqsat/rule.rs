//! Rules: the [`Rule`] trait (a named law that, at an e-class, proposes equal [`Term`]s),
//! [`FnRule`] (a rule written as a plain function), the adapter that runs a rule inside
//! egg's `Runner`, the type-checked insertion every proposed term goes through
//! ([`add_term`]: a rewrite whose result would be ill-typed, or typed differently from
//! the class it joins, is never applied) and the small matching helpers rule files use.

use std::sync::Arc;

use egg::{Applier, Id, PatternAst, Rewrite, SearchMatches, Searcher, Subst, Symbol, Var};
use kiln_ir::{NDArray, Op, TensorType, Type};

use super::analysis::{EGraph, TypeAnalysis};
use super::lang::Node;

/// A term a rule proposes, over existing e-classes.
#[derive(Clone, Debug)]
pub enum Term {
    /// An existing class.
    Class(Id),
    /// A constant created by the rule (interned: the same value is the same leaf).
    Const(Arc<NDArray>),
    Call(Op, Vec<Term>),
    Tuple(Vec<Term>),
    Get(usize, Box<Term>),
}

impl Term {
    /// `op(args...)`.
    pub fn call(op: impl Into<Op>, args: Vec<Term>) -> Term {
        Term::Call(op.into(), args)
    }

    /// A scalar constant of `dtype`.
    pub fn scalar(value: f64, dtype: kiln_ir::DType) -> Term {
        Term::Const(Arc::new(
            NDArray::from_f64(Vec::<usize>::new(), dtype, vec![value]).expect("one element"),
        ))
    }
}

impl From<Id> for Term {
    fn from(id: Id) -> Term {
        Term::Class(id)
    }
}

/// A rewrite law. `rewrites(g, class)` returns terms equal to `class` (each found by
/// matching the law's left-hand side at `class`); the runner type-checks and adds them.
/// A rule must be sound: [`super::check::check_rule`] tests it against the reference
/// interpreter.
pub trait Rule: Send + Sync {
    /// Unique name, as in `RULES.md` (`mul_one`).
    fn name(&self) -> &str;
    /// The family (the file it lives in: `algebraic`, `layout`, `fold`, `merge`).
    fn family(&self) -> &str;
    fn rewrites(&self, g: &EGraph, class: Id) -> Vec<Term>;
}

/// A rule given by a function.
pub struct FnRule {
    pub name: &'static str,
    pub family: &'static str,
    pub apply: fn(&EGraph, Id) -> Vec<Term>,
}

impl Rule for FnRule {
    fn name(&self) -> &str {
        self.name
    }
    fn family(&self) -> &str {
        self.family
    }
    fn rewrites(&self, g: &EGraph, class: Id) -> Vec<Term> {
        (self.apply)(g, class)
    }
}

/// The type `term` would have, or `None` if some node of it fails its type rule.
pub fn term_type(g: &EGraph, term: &Term) -> Option<Type> {
    match term {
        Term::Class(id) => Some(g[*id].data.ty.clone()),
        Term::Const(v) => Some(Type::Tensor(v.ty())),
        Term::Call(op, args) => {
            let tys = args
                .iter()
                .map(|a| term_type(g, a))
                .collect::<Option<Vec<_>>>()?;
            if tys.iter().any(|t| t.oversized_tensor().is_some()) {
                return None;
            }
            op.infer_type(&tys).ok()
        }
        Term::Tuple(fields) => fields
            .iter()
            .map(|f| term_type(g, f))
            .collect::<Option<Vec<_>>>()
            .map(Type::Tuple),
        Term::Get(i, t) => term_type(g, t)?.as_tuple()?.get(*i).cloned(),
    }
}

/// Adds `term` if it type-checks and has type `want`; its class id, or `None` (nothing
/// added) if it would be ill-typed or of another type.
pub fn add_term(g: &mut EGraph, term: &Term, want: &Type) -> Option<Id> {
    if term_type(g, term).as_ref() != Some(want) {
        return None;
    }
    Some(add_unchecked(g, term))
}

fn add_unchecked(g: &mut EGraph, term: &Term) -> Id {
    match term {
        Term::Class(id) => *id,
        Term::Const(v) => {
            let i = g.analysis.intern_const(v.clone());
            g.add(Node::Const(i))
        }
        Term::Call(op, args) => {
            let args = args.iter().map(|a| add_unchecked(g, a)).collect();
            g.add(Node::Call(op.clone(), args))
        }
        Term::Tuple(fields) => {
            let fields = fields.iter().map(|f| add_unchecked(g, f)).collect();
            g.add(Node::Tuple(fields))
        }
        Term::Get(i, t) => {
            let t = add_unchecked(g, t);
            g.add(Node::Get(*i, [t]))
        }
    }
}

/// Applies `rule` once at `class`: adds every proposed term that type-checks and unions
/// it with `class`. Returns the classes that changed; refused terms are counted in
/// [`TypeAnalysis::rejected`].
pub fn apply_at(g: &mut EGraph, rule: &dyn Rule, class: Id) -> Vec<Id> {
    let want = g[class].data.ty.clone();
    let mut changed = vec![];
    for term in rule.rewrites(g, class) {
        match add_term(g, &term, &want) {
            Some(id) => {
                if g.union(class, id) {
                    changed.push(id);
                }
            }
            None => g.analysis.rejected += 1,
        }
    }
    changed
}

/// Runs a [`Rule`] inside egg: the searcher reports the classes where the rule has
/// something to say (one substitution per term), the applier recomputes the terms there
/// and adds them checked.
struct Adapter(Arc<dyn Rule>);

impl Searcher<Node, TypeAnalysis> for Adapter {
    fn search_eclass_with_limit(
        &self,
        egraph: &EGraph,
        eclass: Id,
        limit: usize,
    ) -> Option<SearchMatches<'_, Node>> {
        // One (empty) substitution per proposed term, so that egg's scheduler sees how
        // many matches a rule has and backs off rules that explode (associativity).
        let n = self.0.rewrites(egraph, eclass).len().min(limit);
        if n == 0 {
            return None;
        }
        Some(SearchMatches {
            eclass,
            substs: vec![Subst::default(); n],
            ast: None,
        })
    }

    fn vars(&self) -> Vec<Var> {
        vec![]
    }
}

impl Applier<Node, TypeAnalysis> for Adapter {
    /// Applies the rule once per matched class (its substitutions only count terms).
    fn apply_matches(
        &self,
        egraph: &mut EGraph,
        matches: &[SearchMatches<Node>],
        _rule_name: Symbol,
    ) -> Vec<Id> {
        matches
            .iter()
            .flat_map(|m| apply_at(egraph, self.0.as_ref(), m.eclass))
            .collect()
    }

    fn apply_one(
        &self,
        egraph: &mut EGraph,
        eclass: Id,
        _subst: &Subst,
        _ast: Option<&PatternAst<Node>>,
        _rule_name: Symbol,
    ) -> Vec<Id> {
        apply_at(egraph, self.0.as_ref(), eclass)
    }
}

/// The egg rewrite running `rule`.
pub fn to_rewrite(rule: Arc<dyn Rule>) -> Rewrite<Node, TypeAnalysis> {
    let name = rule.name().to_string();
    Rewrite::new(name, Adapter(rule.clone()), Adapter(rule))
        .expect("an adapter binds no pattern variables")
}

// --- matching helpers -------------------------------------------------------------------

/// The op calls in `class`: `(op, args)`.
pub fn calls(g: &EGraph, class: Id) -> impl Iterator<Item = (&Op, &[Id])> {
    g[class].nodes.iter().filter_map(|n| match n {
        Node::Call(op, args) => Some((op, args.as_slice())),
        _ => None,
    })
}

/// The calls of op `name` in `class`.
pub fn calls_named<'g>(
    g: &'g EGraph,
    class: Id,
    name: &'g str,
) -> impl Iterator<Item = (&'g Op, &'g [Id])> {
    calls(g, class).filter(move |(op, _)| op.name() == name)
}

/// The tensor type of `class`, if it is a tensor.
pub fn tensor(g: &EGraph, class: Id) -> Option<&TensorType> {
    g[class].data.ty.as_tensor()
}

pub fn is_const(g: &EGraph, class: Id) -> bool {
    g[class].data.constant
}

/// Whether `class` is a constant with every element equal to `v`.
pub fn is_splat(g: &EGraph, class: Id, v: f64) -> bool {
    g[class].data.splat == Some(v)
}

/// Whether the class's dtype is a float type.
pub fn is_float(g: &EGraph, class: Id) -> bool {
    tensor(g, class).is_some_and(|t| t.dtype.is_float())
}
