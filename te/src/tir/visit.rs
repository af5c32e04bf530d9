//! The one statement/expression walker of the loop IR, in the style of TVM's
//! `StmtExprVisitor` / `StmtExprMutator`: a read-only [`Visitor`] and an in-place
//! [`Mutator`], each with default methods that walk every child, so a pass overrides only
//! the nodes it cares about and calls [`walk_stmt`] / [`walk_expr`] (or
//! [`walk_stmt_mut`] / [`walk_expr_mut`]) to continue into the children.
//!
//! Order: a statement's own expressions first (a store's indices then its value, an
//! `if`'s condition, a `let`'s value), then its child statements in order; an
//! expression's operands left to right.
//!
//! Deep programs are legal (a long `select` chain, a nest built by a program rather than
//! the parser), so the walks never overflow the stack: each step runs under [`deep`],
//! which moves the recursion onto a fresh heap-allocated stack segment when the current
//! one runs low (the `stacker` crate, as rustc does).

use std::collections::HashMap;

use super::expr::Expr;
use super::stmt::Stmt;
use super::types::VarId;

/// Runs `f`, first growing the stack if less than 64 KiB of it is left (1 MiB segments).
/// Every recursive walk over the loop IR goes through this.
#[inline]
pub fn deep<R>(f: impl FnOnce() -> R) -> R {
    stacker::maybe_grow(64 * 1024, 1024 * 1024, f)
}

/// A read-only walk over statements and expressions (see the module doc).
pub trait Visitor {
    /// Visits a statement; the default visits its expressions and children.
    fn visit_stmt(&mut self, s: &Stmt) {
        walk_stmt(self, s)
    }

    /// Visits an expression; the default visits its operands.
    fn visit_expr(&mut self, e: &Expr) {
        walk_expr(self, e)
    }
}

/// An in-place rewrite of statements and expressions (see the module doc): an override
/// replaces `*s` / `*e` and may walk the children before or after.
pub trait Mutator {
    /// Rewrites a statement; the default rewrites its expressions and children.
    fn mutate_stmt(&mut self, s: &mut Stmt) {
        walk_stmt_mut(self, s)
    }

    /// Rewrites an expression; the default rewrites its operands.
    fn mutate_expr(&mut self, e: &mut Expr) {
        walk_expr_mut(self, e)
    }
}

/// The default walks, written once for shared (`&`) and unique (`&mut`) references: the
/// match ergonomics give the children the same kind of reference as the node.
macro_rules! walks {
    ($Trait:ident, $walk_stmt:ident, $walk_expr:ident, $stmt:ident, $expr:ident, $($mut_:tt)?) => {
        #[doc = concat!("Walks the expressions and child statements of `s` (see [`", stringify!($Trait), "`]).")]
        pub fn $walk_stmt<V: $Trait + ?Sized>(v: &mut V, s: &$($mut_)? Stmt) {
            deep(|| match s {
                Stmt::For { body, .. } | Stmt::Allocate { body, .. } => v.$stmt(body),
                Stmt::Store { indices, value, .. } => {
                    for i in indices {
                        v.$expr(i);
                    }
                    v.$expr(value);
                }
                Stmt::If { cond, then, else_ } => {
                    v.$expr(cond);
                    v.$stmt(then);
                    if let Some(e) = else_ {
                        v.$stmt(e);
                    }
                }
                Stmt::Let { value, body, .. } => {
                    v.$expr(value);
                    v.$stmt(body);
                }
                Stmt::Seq(stmts) => {
                    for c in stmts {
                        v.$stmt(c);
                    }
                }
                Stmt::MicroKernel(call) => {
                    for o in & $($mut_)? call.operands {
                        for e in & $($mut_)? o.base {
                            v.$expr(e);
                        }
                    }
                }
                Stmt::Barrier => {}
            })
        }

        #[doc = concat!("Walks the operands of `e` (see [`", stringify!($Trait), "`]).")]
        pub fn $walk_expr<V: $Trait + ?Sized>(v: &mut V, e: &$($mut_)? Expr) {
            deep(|| match e {
                Expr::Int { .. } | Expr::Float { .. } | Expr::Bool(_) | Expr::Var(_) => {}
                Expr::Load { indices: xs, .. } | Expr::Call { args: xs, .. } => {
                    for x in xs {
                        v.$expr(x);
                    }
                }
                Expr::Binary { lhs: a, rhs: b, .. } | Expr::Ramp { base: a, stride: b, .. } => {
                    v.$expr(a);
                    v.$expr(b);
                }
                Expr::Select { cond, then, else_ } => {
                    v.$expr(cond);
                    v.$expr(then);
                    v.$expr(else_);
                }
                Expr::Not(x) | Expr::Cast { value: x, .. } | Expr::Broadcast { value: x, .. } => {
                    v.$expr(x)
                }
            })
        }
    };
}

walks!(Visitor, walk_stmt, walk_expr, visit_stmt, visit_expr,);
walks!(
    Mutator,
    walk_stmt_mut,
    walk_expr_mut,
    mutate_stmt,
    mutate_expr,
    mut
);

/// Replaces every use of a variable in `m` by its expression, in place.
pub struct Substitute<'a>(pub &'a HashMap<VarId, Expr>);

impl Mutator for Substitute<'_> {
    fn mutate_expr(&mut self, e: &mut Expr) {
        if let Expr::Var(v) = e {
            if let Some(r) = self.0.get(v) {
                *e = r.clone();
            }
            return;
        }
        walk_expr_mut(self, e)
    }
}

/// Calls `f` on every statement of `s` (itself included), parents first.
pub fn for_each_stmt(s: &Stmt, f: impl FnMut(&Stmt)) {
    struct Each<F>(F);
    impl<F: FnMut(&Stmt)> Visitor for Each<F> {
        fn visit_stmt(&mut self, s: &Stmt) {
            (self.0)(s);
            walk_stmt(self, s)
        }
        fn visit_expr(&mut self, _: &Expr) {}
    }
    Each(f).visit_stmt(s)
}

/// Calls `f` on every expression of `s` (sub-expressions included), parents first.
pub fn for_each_expr_in_stmt(s: &Stmt, f: impl FnMut(&Expr)) {
    ExprEach(f).visit_stmt(s)
}

/// Calls `f` on `e` and every sub-expression, parents first.
pub fn for_each_expr(e: &Expr, f: impl FnMut(&Expr)) {
    ExprEach(f).visit_expr(e)
}

struct ExprEach<F>(F);

impl<F: FnMut(&Expr)> Visitor for ExprEach<F> {
    fn visit_expr(&mut self, e: &Expr) {
        (self.0)(e);
        walk_expr(self, e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `select` chain far deeper than the default thread stack could recurse.
    fn deep_chain(n: usize) -> Expr {
        let mut e = Expr::int(0);
        for k in 0..n {
            e = Expr::select(Expr::Var(VarId(0)).lt(k as i32), Expr::int(k as i32), e);
        }
        e
    }

    #[test]
    fn deep_expressions_walk_without_overflow() {
        let n = 200_000;
        // A 64 KiB thread stack would overflow at a few hundred frames of plain recursion.
        let count = std::thread::Builder::new()
            .stack_size(64 * 1024)
            .spawn(move || {
                let mut e = deep_chain(n);
                let mut count = 0usize;
                for_each_expr(&e, |_| count += 1);
                struct Bump;
                impl Mutator for Bump {
                    fn mutate_expr(&mut self, e: &mut Expr) {
                        if let Expr::Int { value, .. } = e {
                            *value += 1;
                        }
                        walk_expr_mut(self, e)
                    }
                }
                Bump.mutate_expr(&mut e);
                let mut ints = 0i64;
                for_each_expr(&e, |x| ints += x.as_int().unwrap_or(0));
                // Dropped on this small stack too (`tir::tree`'s iterative `Drop`).
                drop(e);
                (count, ints)
            })
            .unwrap()
            .join()
            .unwrap();
        // Per level: select, lt, var, int (the bound), int (the value); plus the leaf.
        assert_eq!(count.0, 5 * n + 1);
        // Every int went up by one: sum(k) + sum(k) + n levels * 2 + leaf 1.
        let n = n as i64;
        assert_eq!(count.1, (n - 1) * n + 2 * n + 1);
    }

    #[test]
    fn statements_are_walked_in_order() {
        let (i, b) = (VarId(0), crate::tir::BufferId(0));
        let s = Stmt::serial(
            i,
            0,
            4,
            Stmt::seq([
                Stmt::store(b, [Expr::from(i)], 1.0f32),
                Stmt::if_then(Expr::from(i).lt(2), Stmt::Barrier),
            ]),
        );
        let mut kinds = vec![];
        for_each_stmt(&s, |s| {
            kinds.push(match s {
                Stmt::For { .. } => "for",
                Stmt::Seq(_) => "seq",
                Stmt::Store { .. } => "store",
                Stmt::If { .. } => "if",
                Stmt::Barrier => "barrier",
                _ => "other",
            })
        });
        assert_eq!(kinds, ["for", "seq", "store", "if", "barrier"]);
        let mut exprs = 0;
        for_each_expr_in_stmt(&s, |_| exprs += 1);
        // store: index i, value 1.0; if: lt, i, 2.
        assert_eq!(exprs, 5);
    }
}
