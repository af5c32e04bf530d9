//! Transpose and reshape cancellation: `transpose(transpose(x, p), q)` is one transpose
//! by the composed permutation, or `x` when that is the identity; an identity transpose
//! is `x`; two shape views in a row (`reshape`, `squeeze`, `expand_dims`,
//! `nn.batch_flatten`) are one `reshape` to the final shape; a view to the shape its
//! input already has is that input. See `RULES.md`.

use std::sync::Arc;

use egg::Id;
use kiln_ir::Op;
use kiln_ir::op::{Reshape, Transpose};

use crate::eqsat::analysis::EGraph;
use crate::eqsat::rule::{FnRule, Imperative, Roots, Rule, Term, calls, calls_named, tensor};

const FAMILY: &str = "layout";

/// The rules of this family (transpose and reshape cancellation), in the order `RULES.md` lists them.
pub fn rules() -> Vec<Arc<dyn Rule>> {
    let r = |name, apply, roots, law, conditions, why| -> Arc<dyn Rule> {
        Arc::new(Imperative {
            rule: FnRule::new(name, FAMILY, apply),
            roots,
            law,
            conditions,
            why,
        })
    };
    let transpose = || Roots::Named(vec!["transpose"]);
    let views = "it matches any op that states it is a view (`OpSpec::is_view`), not one op";
    vec![
        r(
            "transpose_transpose",
            transpose_transpose,
            transpose(),
            "`transpose(transpose(x, p), q) = transpose(x, r)` with `r[i] = p[q[i]]`; `= x` when `r` is the identity",
            "`p`, `q` permutations of `x`'s axes (no axes: reversed)",
            "the new permutation is computed from both",
        ),
        r(
            "transpose_identity",
            transpose_identity,
            transpose(),
            "`transpose(x, [0, 1, ..., n-1]) = x`",
            "",
            "the condition is on the permutation attribute, whatever the rank",
        ),
        r(
            "view_view",
            view_view,
            Roots::Any,
            "`v2(v1(x)) = reshape(x, shape of the result)` for views `v1`, `v2` (`reshape`, `squeeze`, `expand_dims`, `nn.batch_flatten`, ...)",
            "no dimension of the result is 0 (`0` in `newshape` means \"copy\")",
            views,
        ),
        r(
            "view_same_shape",
            view_same_shape,
            Roots::Any,
            "`v(x) = x` for a view `v`",
            "the result has `x`'s shape",
            views,
        ),
    ]
}

/// `perm[i]`: the input axis that becomes output axis `i` of `transpose` on a
/// rank-`rank` input.
pub(crate) fn perm(op: &Op, rank: usize) -> Option<Vec<usize>> {
    let Op::Transpose(Transpose { axes }) = op else {
        return None;
    };
    let Some(axes) = axes else {
        return Some((0..rank).rev().collect());
    };
    let p: Vec<usize> = axes
        .iter()
        .map(|&a| usize::try_from(if a < 0 { a + rank as i64 } else { a }).ok())
        .collect::<Option<_>>()?;
    (p.len() == rank && p.iter().all(|&a| a < rank)).then_some(p)
}

/// `transpose(transpose(x, p), q) = transpose(x, p∘q)`, or `x` when `p∘q` is the
/// identity.
fn transpose_transpose(g: &EGraph, c: Id) -> Vec<Term> {
    let mut out = vec![];
    for (outer, args) in calls_named(g, c, "transpose") {
        let inner_class = args[0];
        for (inner, inner_args) in calls_named(g, inner_class, "transpose") {
            let x = inner_args[0];
            let Some(rank) = tensor(g, x).map(|t| t.rank()) else {
                continue;
            };
            let (Some(p), Some(q)) = (perm(inner, rank), perm(outer, rank)) else {
                continue;
            };
            // output axis i of the outer is its input axis q[i], which is x's axis p[q[i]].
            let composed: Vec<usize> = q.iter().map(|&i| p[i]).collect();
            if composed.iter().enumerate().all(|(i, &a)| i == a) {
                out.push(Term::Class(x));
            } else {
                let axes = composed.iter().map(|&a| a as i64).collect();
                out.push(Term::call(Transpose::new(Some(axes)), vec![x.into()]));
            }
        }
    }
    out
}

/// `transpose(x, p) = x` when `p` is the identity permutation.
fn transpose_identity(g: &EGraph, c: Id) -> Vec<Term> {
    let mut out = vec![];
    for (op, args) in calls_named(g, c, "transpose") {
        let Some(rank) = tensor(g, args[0]).map(|t| t.rank()) else {
            continue;
        };
        if perm(op, rank).is_some_and(|p| p.iter().enumerate().all(|(i, &a)| i == a)) {
            out.push(Term::Class(args[0]));
        }
    }
    out
}

/// Whether `op` on `x` is a view ([`Op::is_view`]: the same elements in the same
/// row-major order). Callers check that its result is one tensor (a `split` is a view
/// to a tuple).
fn shape_view(g: &EGraph, op: &Op, x: Id) -> bool {
    op.is_view(std::slice::from_ref(&g[x].data.ty))
}

/// `view2(view1(x)) = reshape(x, shape of the result)` for shape views (row-major
/// element order is unchanged by each, so by both).
fn view_view(g: &EGraph, c: Id) -> Vec<Term> {
    // `0` in `newshape` means "copy the input's dim": no empty shapes here.
    let Some(shape) = tensor(g, c)
        .map(|t| t.shape.clone())
        .filter(|s| !s.contains(&0))
    else {
        return vec![];
    };
    let mut out = vec![];
    for (outer, args) in calls(g, c) {
        if args.len() != 1 || tensor(g, args[0]).is_none() || !shape_view(g, outer, args[0]) {
            continue;
        }
        for (inner, inner_args) in calls(g, args[0]) {
            if inner_args.len() == 1 && shape_view(g, inner, inner_args[0]) {
                let newshape = shape.iter().map(|&d| d as i64).collect();
                out.push(Term::call(Reshape { newshape }, vec![inner_args[0].into()]));
            }
        }
    }
    out
}

/// `view(x) = x` when the view's result has `x`'s shape.
fn view_same_shape(g: &EGraph, c: Id) -> Vec<Term> {
    calls(g, c)
        .filter(|(op, args)| args.len() == 1 && shape_view(g, op, args[0]))
        .filter(|(_, args)| tensor(g, args[0]) == tensor(g, c))
        .map(|(_, args)| Term::Class(args[0]))
        .collect()
}
