//! Rules: the [`Rule`] trait (a named law that, at an e-class, proposes equal [`Term`]s),
//! [`FnRule`] (a rule written as a plain function, for what a pattern cannot say; the
//! declarative form is [`super::pattern::PatternRule`]), the adapter that runs a rule
//! inside egg's `Runner` (searching only the e-classes that hold one of the rule's
//! [`Roots`], computing each class's terms once), the type-checked insertion every
//! proposed term goes through ([`add_term`]: a rewrite whose result would be ill-typed,
//! or typed differently from the class it joins, is never applied) and the small
//! matching helpers rule files use.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use egg::{Applier, Id, PatternAst, Rewrite, SearchMatches, Searcher, Subst, Symbol, Var};
use kiln_ir::{NDArray, Op, TensorType, Type};

use super::analysis::{EGraph, TypeAnalysis};
use super::lang::{Discriminant, Node};
use super::pattern::PatternRule;

/// A term a rule proposes, over existing e-classes.
#[derive(Clone, Debug)]
pub enum Term {
    /// An existing class.
    Class(Id),
    /// A constant created by the rule (interned: the same value is the same leaf).
    Const(Arc<NDArray>),
    /// `op(args...)`, each argument a term.
    Call(Op, Vec<Term>),
    /// `(fields...)`.
    Tuple(Vec<Term>),
    /// Field `index` of a tuple term.
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

/// The ops a rule's left-hand side starts with: the runner searches only e-classes
/// holding a call of one of them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Roots {
    /// Any class (the rule looks at every class itself).
    Any,
    /// Calls of exactly these ops (attributes included) with this many arguments:
    /// found through the e-graph's index by op.
    Exact(Vec<(Op, usize)>),
    /// Calls of ops with these names, whatever their attributes.
    Named(Vec<&'static str>),
}

impl Roots {
    /// Whether `class` holds a call this rule can start from.
    fn admits(&self, g: &EGraph, class: Id) -> bool {
        match self {
            Roots::Any => true,
            Roots::Exact(ops) => calls(g, class)
                .any(|(op, args)| ops.iter().any(|(o, n)| o == op && *n == args.len())),
            Roots::Named(names) => calls(g, class).any(|(op, _)| names.contains(&op.name())),
        }
    }

    /// The classes of `g` that hold such a call, canonical and each once.
    fn classes(&self, g: &EGraph) -> Vec<Id> {
        match self {
            Roots::Exact(ops) => {
                let mut out: Vec<Id> = ops
                    .iter()
                    .filter_map(|(op, n)| g.classes_for_op(&Discriminant::Call(op.clone(), *n)))
                    .flatten()
                    .map(|c| g.find(c))
                    .collect();
                out.sort();
                out.dedup();
                out
            }
            _ => g
                .classes()
                .map(|c| c.id)
                .filter(|&c| self.admits(g, c))
                .collect(),
        }
    }
}

/// A rewrite law. `rewrites(g, class)` returns terms equal to `class` (each found by
/// matching the law's left-hand side at `class`); the runner type-checks and adds them.
/// A rule must be sound: [`super::check::check_rule`] tests it against the reference
/// interpreter. Besides the name, family and matcher, a rule says where it can match
/// ([`Rule::roots`], so the runner skips other classes) and how `RULES.md` states it.
pub trait Rule: Send + Sync {
    /// Unique name, as in `RULES.md` (`mul_one`).
    fn name(&self) -> &str;
    /// The family (the file it lives in: `algebraic`, `layout`, `fold`, `merge`).
    fn family(&self) -> &str;
    /// The terms equal to `class`, each to be added to it (empty when the rule does not
    /// match there). The runner type-checks each and refuses an ill-typed one.
    fn rewrites(&self, g: &EGraph, class: Id) -> Vec<Term>;
    /// The ops the left-hand side starts with; default any class.
    fn roots(&self) -> Roots {
        Roots::Any
    }
    /// The law, for the rule table (`x * 1 = x`); default empty.
    fn law(&self) -> String {
        String::new()
    }
    /// The conditions beyond type-correctness, for the rule table; default empty.
    fn conditions(&self) -> String {
        String::new()
    }
    /// The declarative definition, for a rule written as patterns (the soundness tests
    /// generate cases from it); `None` for an imperative rule.
    fn pattern(&self) -> Option<&PatternRule> {
        None
    }
}

/// A rule given by a function: the quickest way to write one; matched at every class,
/// with no entry in the rule table. For what a pattern cannot say
/// ([`super::pattern::PatternRule`]); the built-in imperative rules wrap one in an
/// [`Imperative`] to say where they match and how the table states them.
pub struct FnRule {
    /// Unique name.
    pub name: &'static str,
    /// The family it belongs to (a user rule may name its own).
    pub family: &'static str,
    /// [`Rule::rewrites`]: the terms equal to the class.
    pub apply: fn(&EGraph, Id) -> Vec<Term>,
}

impl FnRule {
    /// The rule `name` of `family` computed by `apply`.
    pub fn new(
        name: &'static str,
        family: &'static str,
        apply: fn(&EGraph, Id) -> Vec<Term>,
    ) -> FnRule {
        FnRule {
            name,
            family,
            apply,
        }
    }
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

/// An imperative rule with its documentation: where it matches, its law and conditions
/// for the rule table, and the one-line reason it is not a pattern.
pub struct Imperative {
    /// The rule itself.
    pub rule: FnRule,
    /// Where it can match.
    pub roots: Roots,
    /// The law, for the rule table.
    pub law: &'static str,
    /// The conditions beyond type-correctness, for the rule table.
    pub conditions: &'static str,
    /// Why it is not a [`PatternRule`], in one line.
    pub why: &'static str,
}

impl Rule for Imperative {
    fn name(&self) -> &str {
        self.rule.name
    }
    fn family(&self) -> &str {
        self.rule.family
    }
    fn rewrites(&self, g: &EGraph, class: Id) -> Vec<Term> {
        (self.rule.apply)(g, class)
    }
    fn roots(&self) -> Roots {
        self.roots.clone()
    }
    fn law(&self) -> String {
        self.law.to_string()
    }
    fn conditions(&self) -> String {
        match self.conditions {
            "" => format!("imperative: {}", self.why),
            c => format!("{c}; imperative: {}", self.why),
        }
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
    let terms = rule.rewrites(g, class);
    insert_terms(g, class, terms)
}

/// Adds every term of `terms` that type-checks and unions it with `class`; the classes
/// that changed.
fn insert_terms(g: &mut EGraph, class: Id, terms: Vec<Term>) -> Vec<Id> {
    let class = g.find(class);
    let want = g[class].data.ty.clone();
    let mut changed = vec![];
    for term in terms {
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

/// Runs a [`Rule`] inside egg. The searcher visits only the classes holding one of the
/// rule's [`Roots`], computes the rule's terms there and keeps them; it reports one
/// (empty) substitution per term, so that egg's scheduler sees how many matches a rule
/// has and backs off rules that explode. The applier adds the kept terms, so each is
/// computed once per iteration.
struct Adapter {
    rule: Arc<dyn Rule>,
    roots: Roots,
    found: Arc<Mutex<HashMap<Id, Vec<Term>>>>,
}

impl Adapter {
    fn terms(&self, egraph: &EGraph, eclass: Id) -> Vec<Term> {
        if !self.roots.admits(egraph, eclass) {
            return vec![];
        }
        self.rule.rewrites(egraph, eclass)
    }

    fn matches(eclass: Id, n: usize) -> SearchMatches<'static, Node> {
        SearchMatches {
            eclass,
            substs: vec![Subst::default(); n],
            ast: None,
        }
    }
}

impl Searcher<Node, TypeAnalysis> for Adapter {
    fn search_with_limit(&self, egraph: &EGraph, limit: usize) -> Vec<SearchMatches<'_, Node>> {
        let mut found = self
            .found
            .lock()
            .expect("the adapter's lock is never poisoned");
        found.clear();
        let mut out = vec![];
        let mut left = limit;
        for eclass in self.roots.classes(egraph) {
            if left == 0 {
                break;
            }
            let mut terms = self.rule.rewrites(egraph, eclass);
            terms.truncate(left);
            if terms.is_empty() {
                continue;
            }
            left -= terms.len();
            out.push(Adapter::matches(eclass, terms.len()));
            found.insert(eclass, terms);
        }
        out
    }

    fn search_eclass_with_limit(
        &self,
        egraph: &EGraph,
        eclass: Id,
        limit: usize,
    ) -> Option<SearchMatches<'_, Node>> {
        let mut terms = self.terms(egraph, eclass);
        terms.truncate(limit);
        if terms.is_empty() {
            return None;
        }
        let n = terms.len();
        self.found
            .lock()
            .expect("the adapter's lock is never poisoned")
            .insert(eclass, terms);
        Some(Adapter::matches(eclass, n))
    }

    fn vars(&self) -> Vec<Var> {
        vec![]
    }
}

impl Applier<Node, TypeAnalysis> for Adapter {
    /// Adds the terms the search kept for each matched class (recomputed only for a
    /// class the search did not see).
    fn apply_matches(
        &self,
        egraph: &mut EGraph,
        matches: &[SearchMatches<Node>],
        _rule_name: Symbol,
    ) -> Vec<Id> {
        let mut changed = vec![];
        for m in matches {
            let kept = self
                .found
                .lock()
                .expect("the adapter's lock is never poisoned")
                .remove(&m.eclass);
            let terms = kept.unwrap_or_else(|| self.terms(egraph, m.eclass));
            changed.extend(insert_terms(egraph, m.eclass, terms));
        }
        changed
    }

    fn apply_one(
        &self,
        egraph: &mut EGraph,
        eclass: Id,
        _subst: &Subst,
        _ast: Option<&PatternAst<Node>>,
        _rule_name: Symbol,
    ) -> Vec<Id> {
        let terms = self.terms(egraph, eclass);
        insert_terms(egraph, eclass, terms)
    }
}

/// The egg rewrite running `rule`.
pub fn to_rewrite(rule: Arc<dyn Rule>) -> Rewrite<Node, TypeAnalysis> {
    let name = rule.name().to_string();
    let found = Arc::new(Mutex::new(HashMap::new()));
    let adapter = || Adapter {
        rule: rule.clone(),
        roots: rule.roots(),
        found: found.clone(),
    };
    Rewrite::new(name, adapter(), adapter()).expect("an adapter binds no pattern variables")
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

/// The operands `[a, b]` of every `name(a, b)` call in `class`.
pub fn binary_args(g: &EGraph, class: Id, name: &str) -> Vec<[Id; 2]> {
    calls_named(g, class, name)
        .filter_map(|(_, args)| <[Id; 2]>::try_from(args).ok())
        .collect()
}

/// The tensor type of `class`, if it is a tensor.
pub fn tensor(g: &EGraph, class: Id) -> Option<&TensorType> {
    g[class].data.ty.as_tensor()
}

/// Whether `class` is a compile-time constant (a constant, or computed from constants).
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
