//! The verifier's bounds proof: affine forms over atoms, their [`Interval`] ranges, and
//! the facts guards establish — sound under the wrapping integer semantics the
//! generated code has.
//!
//! Soundness rests on one invariant: the affine form of an integer expression equals its
//! run-time value. Every `+`, `-`, `*` and `ramp` whose mathematical range does not fit
//! its dtype (or whose form would need coefficients beyond ±2^96) may wrap; its form is
//! then an opaque atom ranging over the whole dtype, which is exactly what a wrapped
//! value can be. Simplifications (`floordiv(c*t + k, c)`) only ever see exact forms, so
//! they hold with wrapping too. A wrap on the affine spine of an access index (the
//! `+ - *` nodes a backend may fold into an address computed in a wider type) is an
//! error of its own; below a non-affine node (a clamp, a `floordiv`) it is modelled.
//!
//! Facts come from comparisons only when their operands cannot change while the fact is
//! in use: a condition reading a buffer the kernel stores to gives no fact (a loop may
//! store between the test and the use, another thread may race), and a `let` bound to
//! such a read is an opaque variable, not substituted.

use std::fmt;

use kiln_ir::DType;

use super::Verifier;
use crate::tir::affine::Affine;
use crate::tir::expr::{BinOp, Expr};
use crate::tir::semantics::Interval;
use crate::tir::types::{BufferId, VarId};
use crate::tir::visit::deep;

/// An atom of an affine form.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) enum Atom {
    Var(VarId),
    /// The lane index of a vector of this many lanes.
    Lane(u32),
    /// A non-affine sub-term, keyed by its canonical text.
    Other(String),
}

impl fmt::Display for Atom {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Atom::Var(v) => write!(f, "v{}", v.0),
            Atom::Lane(n) => write!(f, "lane{n}"),
            Atom::Other(k) => write!(f, "<{k}>"),
        }
    }
}

/// The affine form of an integer expression; `None` when a coefficient left
/// [`crate::tir::affine::BOUND`] (the form then means nothing and is replaced by an
/// opaque atom).
pub(super) type Lin = Option<Affine<Atom>>;

/// A form of terms only (constant 0): `terms in range` holds here.
#[derive(Clone, Debug)]
pub(super) struct Fact {
    terms: Affine<Atom>,
    range: Interval,
}

fn constant(k: i128) -> Lin {
    Affine::constant(k)
}

fn atom(a: Atom) -> Lin {
    Some(Affine::atom(a))
}

fn add_scaled(a: &Lin, b: &Lin, s: i128) -> Lin {
    a.as_ref()?.add_scaled(b.as_ref()?, s)
}

fn as_const(l: &Lin) -> Option<i128> {
    l.as_ref()?.as_const()
}

/// The address of an expression node, to recognise it again within one proof.
fn node(e: &Expr) -> usize {
    e as *const Expr as usize
}

impl Verifier<'_> {
    /// Checks every load inside `e` (already type checked).
    pub(super) fn bounds_expr(&mut self, e: &Expr) {
        deep(|| self.bounds_expr_on_stack(e))
    }

    fn bounds_expr_on_stack(&mut self, e: &Expr) {
        if !self.reachable {
            return;
        }
        match e {
            Expr::Load { buffer, indices } => {
                let text = format!("load {}", self.printer.expr(e));
                for ix in indices {
                    self.bounds_expr(ix);
                }
                self.check_access(&text, *buffer, indices);
            }
            Expr::Select { cond, then, else_ } => {
                self.bounds_expr(cond);
                let saved = self.save();
                self.assume(cond, false);
                self.bounds_expr(then);
                self.restore(saved);
                let saved = self.save();
                self.assume(cond, true);
                self.bounds_expr(else_);
                self.restore(saved);
            }
            _ => {
                for c in e.children() {
                    self.bounds_expr(c);
                }
            }
        }
    }

    pub(super) fn check_access(&mut self, text: &str, buffer: BufferId, indices: &[Expr]) {
        if !self.reachable {
            return;
        }
        let Some(b) = self.func.buffer(buffer) else {
            return;
        };
        let shape = b.shape.clone();
        for (d, (ix, &extent)) in indices.iter().zip(&shape).enumerate() {
            self.wraps.clear();
            let r = match self.normalize(ix) {
                Some(lin) => self.lin_range(&lin),
                None => Interval::full(),
            };
            if let Some(w) = self.spine_wrap(ix) {
                let w = self.printer.expr(w);
                self.error(format!(
                    "{text}: index {d} computes `{w}`, which may wrap around its integer type"
                ));
                continue;
            }
            if r.is_empty() {
                continue;
            }
            if !r.within(Interval::new(0, extent as i128 - 1)) {
                self.error(format!(
                    "{text}: index {d} ranges over {r} but buffer {} has extent {extent} in dim {d}",
                    self.bname(buffer)
                ));
            }
        }
    }

    /// A `+ - *` node on the affine spine of `ix` that the last [`Self::normalize`]
    /// found may wrap.
    fn spine_wrap<'e>(&self, ix: &'e Expr) -> Option<&'e Expr> {
        if self.wraps.is_empty() {
            return None;
        }
        let mut stack = vec![ix];
        while let Some(e) = stack.pop() {
            if self.wraps.contains(&node(e)) {
                return Some(e);
            }
            if let Expr::Binary {
                op: BinOp::Add | BinOp::Sub | BinOp::Mul,
                lhs,
                rhs,
            } = e
            {
                stack.push(lhs);
                stack.push(rhs);
            }
        }
        None
    }

    fn atom_range(&self, a: &Atom) -> Interval {
        match a {
            Atom::Var(v) => match self.ranges.get(v.index()).copied().flatten() {
                Some(r) => r,
                None => self
                    .func
                    .var(*v)
                    .map(|d| Interval::of_dtype(d.ty.dtype))
                    .unwrap_or(Interval::full()),
            },
            Atom::Lane(n) => Interval::new(0, *n as i128 - 1),
            Atom::Other(k) => self.atom_ranges.get(k).copied().unwrap_or(Interval::full()),
        }
    }

    fn box_range(&self, lin: &Affine<Atom>) -> Interval {
        lin.range(|a| self.atom_range(a))
    }

    /// The range of `lin` here: its box, narrowed by the facts that match parts of it.
    /// Each fact in turn is applied first, then greedily every other fact that matches
    /// what remains (all facts hold at once, so `s1*T1 + s2*T2 + rest` lies in
    /// `s1*R1 + s2*R2 + box(rest)`); the tightest result wins.
    pub(super) fn lin_range(&self, lin: &Lin) -> Interval {
        let Some(lin) = lin else {
            return Interval::full();
        };
        let mut r = self.box_range(lin);
        for first in 0..self.facts.len() {
            if let Some(cand) = self.fact_chain_range(lin, first) {
                r = r.intersect(cand);
            }
        }
        r
    }

    /// The range of `lin` with fact `first` applied first and then every further fact
    /// that matches the remainder; `None` if `first` does not match `lin`.
    fn fact_chain_range(&self, lin: &Affine<Atom>, first: usize) -> Option<Interval> {
        let mut used = vec![first];
        let f = &self.facts[first];
        let s = match_scale(&f.terms, lin)?;
        let mut acc = self.fact_range(f).scale(s);
        let mut rest = lin.add_scaled(&f.terms, -s)?;
        while let Some((j, s)) = self.facts.iter().enumerate().find_map(|(j, g)| {
            if used.contains(&j) {
                return None;
            }
            match_scale(&g.terms, &rest).map(|s| (j, s))
        }) {
            let g = &self.facts[j];
            acc = acc.add(self.fact_range(g).scale(s));
            rest = rest.add_scaled(&g.terms, -s)?;
            used.push(j);
        }
        Some(acc.add(self.box_range(&rest)))
    }

    /// What is known of `f`'s terms: its range, narrowed by every other fact on the
    /// same terms and by the terms' box (all hold at once). A one-sided fact (`t < 2`)
    /// taken alone would make a chain it joins unbounded on the other side, losing
    /// what the box or the other facts know.
    fn fact_range(&self, f: &Fact) -> Interval {
        self.facts
            .iter()
            .filter(|g| g.terms == f.terms)
            .fold(self.box_range(&f.terms).intersect(f.range), |r, g| {
                r.intersect(g.range)
            })
    }

    /// An opaque atom with range `r`, remembered until the enclosing scope ends.
    fn other(&mut self, key: String, r: Interval) -> Lin {
        let old = self.atom_ranges.insert(key.clone(), r);
        self.atom_log.push((key.clone(), old));
        atom(Atom::Other(key))
    }

    /// `lin` if its range fits dtype `d` (so the code computes it without wrapping);
    /// otherwise an opaque atom over all of `d`, and `e` is noted as possibly wrapping.
    fn fit(&mut self, e: &Expr, lin: Lin, d: DType) -> Lin {
        if lin.is_some() && self.lin_range(&lin).within(Interval::of_dtype(d)) {
            return lin;
        }
        self.wraps.push(node(e));
        let key = format!("wrap({})", self.printer.expr(e));
        self.other(key, Interval::of_dtype(d))
    }

    /// Whether `e` reads a buffer the kernel stores to (its value may change while a
    /// fact about it is in use).
    pub(super) fn reads_stored(&self, e: &Expr) -> bool {
        let mut found = false;
        e.visit(&mut |x| {
            if let Expr::Load { buffer, .. } = x {
                found |= self.stored.get(buffer.index()).copied().unwrap_or(true);
            }
        });
        found
    }

    /// The affine form of an integer (or bool) expression; `None` for other types.
    pub(super) fn normalize(&mut self, e: &Expr) -> Option<Lin> {
        self.norm(e).map(|(l, _)| l)
    }

    /// Binds let variable `var` to `value` for the bounds proof: substituted when its
    /// value cannot change, an opaque variable with the value's range otherwise.
    pub(super) fn bind_let(&mut self, var: VarId, value: &Expr) {
        if let Some(lin) = self.normalize(value) {
            let r = self.lin_range(&lin);
            self.ranges[var.index()] = Some(r);
            if !self.reads_stored(value) {
                self.let_forms.insert(var, lin);
            }
        }
    }

    /// The affine form and the dtype of an integer or bool expression.
    fn norm(&mut self, e: &Expr) -> Option<(Lin, DType)> {
        deep(|| self.norm_on_stack(e))
    }

    fn norm_on_stack(&mut self, e: &Expr) -> Option<(Lin, DType)> {
        Some(match e {
            Expr::Int { value, dtype } => (constant(*value as i128), *dtype),
            Expr::Bool(b) => (constant(*b as i128), DType::Bool),
            Expr::Float { .. } => return None,
            Expr::Var(v) => {
                let d = self.func.var(*v)?.ty.dtype;
                if !(d.is_int() || d.is_bool()) {
                    return None;
                }
                let lin = match self.let_forms.get(v) {
                    Some(l) => l.clone(),
                    None => atom(Atom::Var(*v)),
                };
                (lin, d)
            }
            Expr::Binary { op, .. } if op.is_comparison() || op.is_logical() => {
                let key = self.printer.expr(e);
                (self.other(key, Interval::new(0, 1)), DType::Bool)
            }
            Expr::Binary { op, lhs, rhs } => {
                let (a, d) = self.norm(lhs)?;
                let (b, _) = self.norm(rhs)?;
                if d == DType::U64 {
                    // Unsigned division and min/max do not follow the signed interval
                    // rules: any bit pattern.
                    let key = self.printer.expr(e);
                    return Some((self.other(key, Interval::of_dtype(d)), d));
                }
                (self.arith(e, *op, a, b, d), d)
            }
            Expr::Select { cond, then, else_ } => {
                let saved = self.save();
                self.assume(cond, false);
                let a = self.norm(then).map(|(l, d)| (self.lin_range(&l), d));
                self.restore(saved);
                let saved = self.save();
                self.assume(cond, true);
                let b = self.norm(else_).map(|(l, _)| self.lin_range(&l));
                self.restore(saved);
                let ((a, d), b) = (a?, b?);
                let key = self.printer.expr(e);
                let r = a.union(b).intersect(Interval::of_dtype(d));
                (self.other(key, r), d)
            }
            Expr::Ramp {
                base,
                stride,
                lanes,
            } => {
                let (b, d) = self.norm(base)?;
                let (s, _) = self.norm(stride)?;
                let lin = match as_const(&s) {
                    Some(c) => add_scaled(&b, &atom(Atom::Lane(*lanes)), c),
                    None => {
                        let span = self.lin_range(&s).mul(Interval::new(0, *lanes as i128 - 1));
                        let r = self.lin_range(&b).add(span);
                        if !r.within(Interval::of_dtype(d)) {
                            return Some((self.fit(e, None, d), d));
                        }
                        let key = self.printer.expr(e);
                        self.other(key, r)
                    }
                };
                (self.fit(e, lin, d), d)
            }
            Expr::Broadcast { value, .. } => self.norm(value)?,
            Expr::Cast { to, value } => {
                if !(to.is_int() || to.is_bool()) {
                    return None;
                }
                let target = Interval::of_dtype(*to);
                if let Some((l, _)) = self.norm(value) {
                    let r = self.lin_range(&l);
                    if *to != DType::Bool && r.within(target) {
                        return Some((l, *to));
                    }
                }
                let key = self.printer.expr(e);
                (self.other(key, target), *to)
            }
            Expr::Load { buffer, .. } => {
                let d = self.func.buffer(*buffer)?.dtype;
                if !(d.is_int() || d.is_bool()) {
                    return None;
                }
                let key = self.printer.expr(e);
                (self.other(key, Interval::of_dtype(d)), d)
            }
            Expr::Call { args, .. } => {
                let (_, d) = self.norm(args.first()?)?;
                let key = self.printer.expr(e);
                (self.other(key, Interval::of_dtype(d)), d)
            }
            Expr::Not(_) => {
                let key = self.printer.expr(e);
                (self.other(key, Interval::new(0, 1)), DType::Bool)
            }
        })
    }

    /// The form of `a op b` (arithmetic, operands of dtype `d`).
    fn arith(&mut self, e: &Expr, op: BinOp, a: Lin, b: Lin, d: DType) -> Lin {
        match op {
            BinOp::Add => self.fit(e, add_scaled(&a, &b, 1), d),
            BinOp::Sub => self.fit(e, add_scaled(&a, &b, -1), d),
            BinOp::Mul => {
                let (Some(fa), Some(fb)) = (&a, &b) else {
                    return self.fit(e, None, d);
                };
                if fa.as_const().is_some() || fb.as_const().is_some() {
                    return self.fit(e, fa.mul(fb), d);
                }
                let r = self.lin_range(&a).mul(self.lin_range(&b));
                if !r.within(Interval::of_dtype(d)) {
                    return self.fit(e, None, d);
                }
                let (ka, kb) = (fa.to_string(), fb.to_string());
                let key = if ka <= kb {
                    format!("({ka})*({kb})")
                } else {
                    format!("({kb})*({ka})")
                };
                self.other(key, r)
            }
            BinOp::FloorDiv | BinOp::Div | BinOp::FloorMod
                if as_const(&b).is_some_and(|c| c > 0) =>
            {
                let c = as_const(&b).unwrap_or(1);
                self.div_by_const(e, op, a, c)
            }
            BinOp::Min | BinOp::Max => {
                let (ra, rb) = (self.lin_range(&a), self.lin_range(&b));
                let r = if op == BinOp::Min {
                    ra.min(rb)
                } else {
                    ra.max(rb)
                };
                let key = match (&a, &b) {
                    (Some(fa), Some(fb)) => {
                        let (ka, kb) = (fa.to_string(), fb.to_string());
                        let (ka, kb) = if ka <= kb { (ka, kb) } else { (kb, ka) };
                        let name = if op == BinOp::Min { "min" } else { "max" };
                        format!("{name}({ka},{kb})")
                    }
                    _ => self.printer.expr(e),
                };
                self.other(key, r)
            }
            _ => {
                // Division by a variable or a non-positive constant: any value of `d`.
                let key = self.printer.expr(e);
                self.other(key, Interval::of_dtype(d))
            }
        }
    }

    /// `a / c`, `floordiv(a, c)` or `floormod(a, c)` (node `e`) for a constant `c > 0`;
    /// the simplifications only see an exact `a`, so they hold for the run-time values.
    fn div_by_const(&mut self, e: &Expr, op: BinOp, a: Lin, c: i128) -> Lin {
        let ra = self.lin_range(&a);
        let floor_like = op != BinOp::Div || ra.lo().is_some_and(|lo| lo >= 0);
        let q = |x: i128| x.div_euclid(c);
        let Some(fa) = a else {
            let r = match op {
                BinOp::FloorMod => Interval::new(0, c - 1),
                _ if floor_like => ra.floordiv(c),
                _ => ra.truncdiv(c),
            };
            let key = self.printer.expr(e);
            return self.other(key, r);
        };
        let quotient = fa.div_terms_exact(c);
        match op {
            BinOp::FloorMod => {
                if quotient.is_some() {
                    constant(fa.k().rem_euclid(c))
                } else if let (Some(lo), Some(hi)) = (ra.lo(), ra.hi())
                    && !ra.is_empty()
                    && q(lo) == q(hi)
                {
                    add_scaled(&Some(fa), &constant(q(lo) * c), -1)
                } else {
                    self.other(format!("floormod({fa},{c})"), Interval::new(0, c - 1))
                }
            }
            _ if floor_like && quotient.is_some() => quotient.and_then(|l| l.with_k(q(fa.k()))),
            _ => {
                let r = if floor_like {
                    ra.floordiv(c)
                } else {
                    ra.truncdiv(c)
                };
                let name = if op == BinOp::Div { "div" } else { "floordiv" };
                self.other(format!("{name}({fa},{c})"), r)
            }
        }
    }

    /// Adds the facts implied by `cond` (or by its negation).
    pub(super) fn assume(&mut self, cond: &Expr, negate: bool) {
        if self.reads_stored(cond) {
            return;
        }
        self.assume_pure(cond, negate);
    }

    fn assume_pure(&mut self, cond: &Expr, negate: bool) {
        match cond {
            Expr::Bool(b) if *b == negate => {
                self.reachable = false;
            }
            Expr::Not(x) => self.assume_pure(x, !negate),
            Expr::Binary {
                op: BinOp::And,
                lhs,
                rhs,
            } if !negate => {
                self.assume_pure(lhs, false);
                self.assume_pure(rhs, false);
            }
            Expr::Binary {
                op: BinOp::Or,
                lhs,
                rhs,
            } if negate => {
                self.assume_pure(lhs, true);
                self.assume_pure(rhs, true);
            }
            Expr::Binary { op, lhs, rhs } if op.is_comparison() => {
                let op = if negate {
                    op.negated_comparison().unwrap_or(*op)
                } else {
                    *op
                };
                let (Some((a, dtype)), Some((b, _))) = (self.norm(lhs), self.norm(rhs)) else {
                    return;
                };
                // uint64 compares unsigned: its order is not the signed order of the
                // bit patterns the affine forms hold, so it gives no fact.
                if dtype == DType::U64 {
                    return;
                }
                let Some(d) = add_scaled(&a, &b, -1) else {
                    return;
                };
                // terms + k OP 0
                let k = d.k();
                let range = match op {
                    BinOp::Lt => Interval::at_most(-k - 1),
                    BinOp::Le => Interval::at_most(-k),
                    BinOp::Gt => Interval::at_least(-k + 1),
                    BinOp::Ge => Interval::at_least(-k),
                    BinOp::Eq => Interval::point(-k),
                    _ => return,
                };
                if let Some(terms) = d.with_k(0) {
                    self.add_fact(terms, range);
                }
            }
            _ => {}
        }
    }

    /// Adds the fact `terms in range` (`terms` has constant 0).
    fn add_fact(&mut self, terms: Affine<Atom>, range: Interval) {
        let Some(&(_, first)) = terms.terms().first() else {
            if !range.contains(0) {
                self.reachable = false;
            }
            return;
        };
        // Canonical form: divide by the gcd, first coefficient positive.
        let g = terms
            .terms()
            .iter()
            .fold(0i128, |g, &(_, c)| gcd(g, c.abs()));
        let g = if first < 0 { -g } else { g };
        let Some(terms) = terms.div_terms_exact(g) else {
            return;
        };
        let range = range.div_exact(g);
        if self
            .lin_range(&Some(terms.clone()))
            .intersect(range)
            .is_empty()
        {
            self.reachable = false;
        }
        if let [(Atom::Var(v), c)] = terms.terms() {
            let own = range.div_exact(*c);
            let cur = self.atom_range(&Atom::Var(*v));
            self.ranges[v.index()] = Some(cur.intersect(own));
        }
        self.facts.push(Fact { terms, range });
    }
}

fn gcd(a: i128, b: i128) -> i128 {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// `s` such that `index` contains `s * fact` term by term, if any.
fn match_scale(fact: &Affine<Atom>, index: &Affine<Atom>) -> Option<i128> {
    let (a0, c0) = fact.terms().first()?;
    let i0 = index.coeff(a0);
    if i0 == 0 || i0 % c0 != 0 {
        return None;
    }
    let s = i0 / c0;
    fact.terms()
        .iter()
        .all(|(a, c)| c.checked_mul(s).is_some_and(|cs| index.coeff(a) == cs))
        .then_some(s)
}

#[cfg(test)]
mod tests {
    use crate::tir::parse;
    use crate::tir::verify::check;

    fn errors(text: &str) -> Vec<String> {
        check(&parse(text).unwrap())
            .into_iter()
            .map(|e| e.to_string())
            .collect()
    }

    fn kernel(index: &str) -> String {
        format!(
            "primfn @k(%a: Buffer[(10), float32, global], out %b: Buffer[(4), float32, global]) {{
  for (%i, 0, 4) {{ %b[%i] = %a[{index}] }}
}}"
        )
    }

    #[test]
    fn a_wrapping_product_ranges_over_its_whole_type() {
        // %i * 2^30 wraps to -2^31 at %i = 2: min(.., 9) is not in [0, 9].
        let e = errors(&kernel("min(%i * 1073741824, 9)"));
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(e[0].contains("ranges over [-2147483648, 9]"), "{e:?}");
        // Clamped on both sides, the wrapped value is harmless.
        assert_eq!(
            errors(&kernel("max(min(%i * 1073741824, 9), 0)")),
            Vec::<String>::new()
        );
        // Without wrapping the same product is exact.
        assert_eq!(errors(&kernel("min(%i * 3, 9)")), Vec::<String>::new());
    }

    #[test]
    fn simplifications_only_see_exact_values() {
        // floordiv(%e * 2^62, 2^62) is not %e: the product wraps for %e >= 2.
        let text = "primfn @k(%a: Buffer[(4), float32, global], out %b: Buffer[(4), float32, global]) {
  for (%e: int64, 0, 4) { %b[%e] = %a[floordiv(%e * 4611686018427387904i64, 4611686018427387904i64)] }
}";
        let e = errors(text);
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(e[0].contains("ranges over [-2, 1]"), "{e:?}");
        let fine = text.replace("4611686018427387904i64", "1024i64");
        assert_eq!(errors(&fine), Vec::<String>::new());
    }

    #[test]
    fn a_wrap_on_the_affine_spine_is_refused_even_when_guarded() {
        // The guard holds for the wrapped value; a backend that folds `%i * 2^30 + 5`
        // into a 64-bit address would not wrap, so the access is refused.
        let guarded =
            "primfn @k(%a: Buffer[(10), float32, global], out %b: Buffer[(4), float32, global]) {
  for (%i, 0, 4) {
    if (%i * 1073741824 + 5 >= 0 && %i * 1073741824 + 5 < 10) { %b[%i] = %a[%i * 1073741824 + 5] }
  }
}";
        let e = errors(guarded);
        assert_eq!(e.len(), 1, "{guarded}\n{e:?}");
        assert!(e[0].contains("may wrap around its integer type"), "{e:?}");
    }

    #[test]
    fn guards_on_buffers_the_kernel_writes_give_no_facts() {
        let text = "primfn @k(%a: Buffer[(10), float32, global], out %idx: Buffer[(1), int32, global], out %b: Buffer[(1), float32, global]) {
  if (%idx[0] >= 0 && %idx[0] < 10) {
    %idx[0] = 100
    %b[0] = %a[%idx[0]]
  }
}";
        let e = errors(text);
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(e[0].contains("load %a[%idx[0]]"), "{e:?}");
        // The same guard on a read-only buffer is a fact.
        let ro = text
            .replace("out %idx", "%idx")
            .replace("    %idx[0] = 100\n", "");
        assert_eq!(errors(&ro), Vec::<String>::new());
    }

    #[test]
    fn one_sided_facts_keep_the_box_of_their_terms() {
        // The GPU schedule's fused index of a concatenation (ONNX attention with past
        // and present): the outer guard knows `floordiv(%x, 4) < 2` (no lower bound),
        // the select `floormod(%x, 4) >= 2`; together with the atoms' own ranges the
        // index `2*q + r - 2` lies in [0, 3]. Chaining the first fact's bare range
        // made it unbounded below, and the box alone gave [-2, 5].
        let text =
            "primfn @k(%a: Buffer[(4), float32, global], out %b: Buffer[(12), float32, global]) {
  for (%x, 0, 12) {
    if (floordiv(%x, 4) < 2) {
      %b[%x] = select(floormod(%x, 4) >= 2, %a[floordiv(%x, 4) * 2 + floormod(%x, 4) - 2], 0.0)
    }
  }
}";
        assert_eq!(errors(text), Vec::<String>::new());
        // Sound still: without the select's fact the access can be out of bounds.
        let e = errors(&text.replace("floormod(%x, 4) >= 2", "floormod(%x, 4) >= 1"));
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(e[0].contains("ranges over [-1, 3]"), "{e:?}");
    }

    #[test]
    fn a_let_of_a_written_buffer_keeps_its_value() {
        let text = "primfn @k(%a: Buffer[(10), float32, global], out %idx: Buffer[(1), int32, global], out %b: Buffer[(1), float32, global]) {
  let %t: int32 = max(min(%idx[0], 9), 0) {
    %idx[0] = 100
    %b[0] = %a[%t]
  }
}";
        assert_eq!(errors(text), Vec::<String>::new());
        let bad = text.replace("%a[%t]", "%a[%t + %idx[0] - %idx[0]]");
        assert_eq!(errors(&bad).len(), 1);
    }
}
