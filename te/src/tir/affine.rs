//! Affine forms `sum(coef * atom) + k`, the one type every part of Kiln uses to read an
//! integer index as a linear combination: the bounds verifier (atoms are variables,
//! vector lanes and opaque sub-terms), the compiled loop-IR interpreter (atoms are
//! variable slots), lowering's bound inference (atoms are inner loop variables and
//! outer sub-terms), the GPU tiling plan (atoms are compute axes) and the Cranelift
//! backend's stride analysis (the loop variable and the rest).
//!
//! Coefficients and the constant are exact integers bounded by ±[`BOUND`]: an
//! operation whose result would leave the bound returns `None` (the caller treats the
//! expression as not affine), so no operation here ever wraps or panics. A form is kept
//! canonical — terms sorted by atom, no zero coefficient — so equal forms compare equal.
//! Evaluating a form with wrapping `i64` arithmetic ([`Affine::eval_wrapping`]) gives the
//! value modulo 2^64, which is what generated code computes before wrapping to its dtype.
//!
//! [`Affine::of`] reads a form off any expression type that shows its integer skeleton
//! through [`AffineExpr`] (the loop IR's and the tensor expressions' `Expr`).

use std::fmt;

use super::expr::{BinOp, Expr};
use super::semantics::Interval;

/// Largest magnitude of a coefficient or constant of an affine form.
pub const BOUND: i128 = 1 << 96;

fn bounded(v: Option<i128>) -> Option<i128> {
    v.filter(|v| v.abs() <= BOUND)
}

/// `sum(coef * atom) + k` over atoms of type `A` (see the module doc).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Affine<A> {
    /// Sorted by atom, no zero coefficient.
    terms: Vec<(A, i128)>,
    k: i128,
}

impl<A: Ord + Clone> Affine<A> {
    /// The form `0`.
    pub fn zero() -> Affine<A> {
        Affine {
            terms: vec![],
            k: 0,
        }
    }

    /// The constant form `k`, if `|k|` is within [`BOUND`].
    pub fn constant(k: i128) -> Option<Affine<A>> {
        bounded(Some(k)).map(|k| Affine { terms: vec![], k })
    }

    /// The form `1 * a`.
    pub fn atom(a: A) -> Affine<A> {
        Affine {
            terms: vec![(a, 1)],
            k: 0,
        }
    }

    /// The form `sum(c * a) + k` of the given terms (equal atoms add up), if every
    /// coefficient and the constant stay within [`BOUND`].
    pub fn from_terms(terms: impl IntoIterator<Item = (A, i128)>, k: i128) -> Option<Affine<A>> {
        terms
            .into_iter()
            .try_fold(Affine::constant(k)?, |acc, (a, c)| {
                acc.add_scaled(&Affine::atom(a), c)
            })
    }

    /// The constant term.
    pub fn k(&self) -> i128 {
        self.k
    }

    /// The terms, sorted by atom, none with a zero coefficient.
    pub fn terms(&self) -> &[(A, i128)] {
        &self.terms
    }

    /// The coefficient of `a` (zero when `a` does not occur).
    pub fn coeff(&self, a: &A) -> i128 {
        match self.terms.binary_search_by(|(x, _)| x.cmp(a)) {
            Ok(i) => self.terms[i].1,
            Err(_) => 0,
        }
    }

    /// The value, if the form has no terms.
    pub fn as_const(&self) -> Option<i128> {
        self.terms.is_empty().then_some(self.k)
    }

    /// `self + s * o`, or `None` if a coefficient or the constant would leave the bound.
    pub fn add_scaled(&self, o: &Affine<A>, s: i128) -> Option<Affine<A>> {
        let k = bounded(o.k.checked_mul(s).and_then(|x| self.k.checked_add(x)))?;
        let mut terms = Vec::with_capacity(self.terms.len() + o.terms.len());
        let (mut i, mut j) = (0, 0);
        while i < self.terms.len() || j < o.terms.len() {
            let ord = match (self.terms.get(i), o.terms.get(j)) {
                (Some(x), Some(y)) => x.0.cmp(&y.0),
                (Some(_), None) => std::cmp::Ordering::Less,
                _ => std::cmp::Ordering::Greater,
            };
            let (a, c) = match ord {
                std::cmp::Ordering::Less => {
                    i += 1;
                    (&self.terms[i - 1].0, self.terms[i - 1].1)
                }
                std::cmp::Ordering::Greater => {
                    j += 1;
                    (&o.terms[j - 1].0, bounded(o.terms[j - 1].1.checked_mul(s))?)
                }
                std::cmp::Ordering::Equal => {
                    i += 1;
                    j += 1;
                    let c = o.terms[j - 1].1.checked_mul(s);
                    let c = bounded(c.and_then(|c| c.checked_add(self.terms[i - 1].1)))?;
                    (&self.terms[i - 1].0, c)
                }
            };
            if c != 0 {
                terms.push((a.clone(), c));
            }
        }
        Some(Affine { terms, k })
    }

    /// `self + o`.
    pub fn add(&self, o: &Affine<A>) -> Option<Affine<A>> {
        self.add_scaled(o, 1)
    }

    /// `self - o`.
    pub fn sub(&self, o: &Affine<A>) -> Option<Affine<A>> {
        self.add_scaled(o, -1)
    }

    /// `s * self`.
    pub fn scale(&self, s: i128) -> Option<Affine<A>> {
        Affine::zero().add_scaled(self, s)
    }

    /// `self * o` when one side is a constant; `None` otherwise (not affine).
    pub fn mul(&self, o: &Affine<A>) -> Option<Affine<A>> {
        match (self.as_const(), o.as_const()) {
            (_, Some(c)) => self.scale(c),
            (Some(c), _) => o.scale(c),
            _ => None,
        }
    }

    /// Every coefficient (not the constant) divided by `c`, which must divide each.
    pub fn div_terms_exact(&self, c: i128) -> Option<Affine<A>> {
        if c == 0 || self.terms.iter().any(|(_, x)| x % c != 0) {
            return None;
        }
        Some(Affine {
            terms: self.terms.iter().map(|(a, x)| (a.clone(), x / c)).collect(),
            k: self.k,
        })
    }

    /// This form with its constant replaced by `k`.
    pub fn with_k(&self, k: i128) -> Option<Affine<A>> {
        bounded(Some(k)).map(|k| Affine {
            terms: self.terms.clone(),
            k,
        })
    }

    /// The terms whose atom satisfies `keep` (with constant 0), and the rest (with this
    /// form's constant).
    pub fn split(&self, mut keep: impl FnMut(&A) -> bool) -> (Affine<A>, Affine<A>) {
        let (a, b): (Vec<_>, Vec<_>) = self.terms.iter().cloned().partition(|(x, _)| keep(x));
        (
            Affine { terms: a, k: 0 },
            Affine {
                terms: b,
                k: self.k,
            },
        )
    }

    /// The range of the form when each atom ranges over `range(atom)`, independently.
    pub fn range(&self, mut range: impl FnMut(&A) -> Interval) -> Interval {
        self.terms
            .iter()
            .fold(Interval::point(self.k), |r, (a, c)| {
                r.add(range(a).scale(*c))
            })
    }

    /// The value with wrapping `i64` arithmetic (exact modulo 2^64), each atom's value
    /// given by `value`.
    #[inline]
    pub fn eval_wrapping(&self, mut value: impl FnMut(&A) -> i64) -> i64 {
        self.terms.iter().fold(self.k as i64, |s, (a, c)| {
            s.wrapping_add(value(a).wrapping_mul(*c as i64))
        })
    }

    /// The same form over other atoms (`f` must keep the atoms' order and identity).
    pub fn map_atoms<B: Ord + Clone>(&self, mut f: impl FnMut(&A) -> B) -> Option<Affine<B>> {
        Affine::from_terms(self.terms.iter().map(|(a, c)| (f(a), *c)), self.k)
    }

    /// The affine form of `e`. `atom` is asked about every node that is not an integer
    /// immediate, before its structure: `Some(a)` makes the node that atom. Otherwise
    /// `+`, `-` and `*` by a constant combine their operands' forms, and anything else
    /// is not affine (`None`), as is a form leaving the bound.
    pub fn of<E: AffineExpr>(e: &E, atom: &mut impl FnMut(&E) -> Option<A>) -> Option<Affine<A>> {
        if let Some(v) = e.int_value() {
            return Affine::constant(v as i128);
        }
        if let Some(a) = atom(e) {
            return Some(Affine::atom(a));
        }
        let (op, lhs, rhs) = e.binary()?;
        let (a, b) = (Affine::of(lhs, atom)?, Affine::of(rhs, atom)?);
        match op {
            BinOp::Add => a.add(&b),
            BinOp::Sub => a.sub(&b),
            BinOp::Mul => a.mul(&b),
            _ => None,
        }
    }
}

impl<A: fmt::Display> fmt::Display for Affine<A> {
    /// `3*a+-1*b+7`: every term, then the constant (a canonical key).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (a, c) in &self.terms {
            write!(f, "{c}*{a}+")?;
        }
        write!(f, "{}", self.k)
    }
}

/// An expression type whose integer skeleton [`Affine::of`] can read.
pub trait AffineExpr {
    /// The value of an integer immediate.
    fn int_value(&self) -> Option<i64>;
    /// The operator and operands of a binary node.
    fn binary(&self) -> Option<(BinOp, &Self, &Self)>;
}

impl AffineExpr for Expr {
    fn int_value(&self) -> Option<i64> {
        self.as_int()
    }

    fn binary(&self) -> Option<(BinOp, &Expr, &Expr)> {
        match self {
            Expr::Binary { op, lhs, rhs } => Some((*op, lhs, rhs)),
            _ => None,
        }
    }
}

impl AffineExpr for crate::te::Expr {
    fn int_value(&self) -> Option<i64> {
        match self {
            crate::te::Expr::Int { value, .. } => Some(*value),
            _ => None,
        }
    }

    fn binary(&self) -> Option<(BinOp, &Self, &Self)> {
        match self {
            crate::te::Expr::Binary { op, lhs, rhs } => Some((*op, lhs, rhs)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::tir::VarId;

    fn form(terms: &[(u8, i128)], k: i128) -> Affine<u8> {
        Affine::from_terms(terms.iter().copied(), k).unwrap()
    }

    #[test]
    fn forms_are_canonical_and_bounded() {
        let a = form(&[(2, 3), (1, 1)], 4);
        let b = form(&[(1, -1), (2, -3)], 1);
        assert_eq!(a.add(&b).unwrap(), Affine::constant(5).unwrap());
        assert_eq!(a.terms(), &[(1, 1), (2, 3)]);
        assert_eq!(a.coeff(&2), 3);
        assert_eq!(a.coeff(&7), 0);
        assert_eq!(a.to_string(), "1*1+3*2+4");
        assert!(Affine::<u8>::constant(BOUND + 1).is_none());
        assert!(a.scale(BOUND).is_none());
        assert!(a.mul(&a).is_none());
        assert_eq!(a.mul(&Affine::constant(2).unwrap()), a.scale(2));
        let (one, rest) = a.split(|x| *x == 1);
        assert_eq!(
            (one.terms(), rest.terms(), rest.k()),
            (&[(1, 1)][..], &[(2, 3)][..], 4)
        );
        assert_eq!(a.div_terms_exact(3), None);
        assert_eq!(
            form(&[(1, 6)], 1).div_terms_exact(3),
            Some(form(&[(1, 2)], 1))
        );
    }

    #[test]
    fn reads_loop_ir_expressions() {
        let (i, j) = (VarId(0), VarId(1));
        let e = (i * 4 + j) * 2 - Expr::from(j) + 3;
        let mut atom = |x: &Expr| match x {
            Expr::Var(v) => Some(*v),
            _ => None,
        };
        let f = Affine::of(&e, &mut atom).unwrap();
        assert_eq!(f.terms(), &[(i, 8), (j, 1)]);
        assert_eq!(f.k(), 3);
        assert_eq!(Affine::of(&(i * j), &mut atom), None);
        assert_eq!(Affine::of(&Expr::from(i).floordiv(2), &mut atom), None);
    }

    proptest! {
        /// Wrapping evaluation equals the exact value modulo 2^64, and ranges contain it.
        #[test]
        fn evaluation_and_range_agree(
            a in prop::collection::vec((0u8..4, -1000i128..1000), 0..5),
            b in prop::collection::vec((0u8..4, -1000i128..1000), 0..5),
            ka in -1000i128..1000, s in -50i128..50,
            vals in prop::collection::vec(-100i64..100, 4),
        ) {
            let (fa, fb) = (form(&a, ka), form(&b, 0));
            let sum = fa.add_scaled(&fb, s).unwrap();
            let exact = |f: &Affine<u8>| {
                f.terms().iter().map(|(x, c)| c * vals[*x as usize] as i128).sum::<i128>() + f.k()
            };
            prop_assert_eq!(exact(&sum), exact(&fa) + s * exact(&fb));
            prop_assert_eq!(sum.eval_wrapping(|x| vals[*x as usize]) as i128, exact(&sum));
            let r = sum.range(|_| Interval::new(-100, 99));
            prop_assert!(r.contains(exact(&sum)));
        }
    }
}
