//! Merging parallel layers that share an input (TASO/TENSAT): `nn.conv2d(x, W1)`, ...,
//! `nn.conv2d(x, Wn)` with the same attributes are the fields of
//! `split(nn.conv2d(x, concatenate(W1, ..., Wn)), axis=1)`; likewise `nn.dense` (split
//! along axis 1 of its `[N, units]` result). One kernel reads `x` once instead of `n`
//! times; the cost model decides whether that pays for the split. Each pair of such
//! layers and the whole group are proposed; extraction picks what pays. See `RULES.md`.

use std::collections::BTreeMap;
use std::sync::Arc;

use egg::Id;
use kiln_ir::Op;
use kiln_ir::op::{Concatenate, Split, SplitSpec};

use crate::eqsat::analysis::EGraph;
use crate::eqsat::rule::{FnRule, Imperative, Roots, Rule, Term, calls_named, tensor};

const FAMILY: &str = "merge";

/// The most layers merged into one.
pub const MAX_MERGED: usize = 8;

/// The rules of this family (merging of parallel layers), in the order `RULES.md` lists them.
pub fn rules() -> Vec<Arc<dyn Rule>> {
    let r = |name, apply, op, law, conditions| -> Arc<dyn Rule> {
        Arc::new(Imperative {
            rule: FnRule::new(name, FAMILY, apply),
            roots: Roots::Named(vec![op]),
            law,
            conditions,
            why: "it matches a variable number of sibling layers through the input's users",
        })
    };
    vec![
        r(
            "merge_parallel_conv2d",
            merge_conv2d,
            "nn.conv2d",
            "for layers `yᵢ = conv2d(x, Wᵢ)` on one `x`: `yₖ = split(conv2d(x, concatenate(W₁, ..., Wₙ, axis=0)), indices=[O₁, O₁+O₂, ...], axis=1).k`",
            "same attributes except the stated `channels` (the merged layer states none); `groups = 1`; `Wᵢ` not themselves concatenations (so merging ends); 2 ≤ n ≤ 8; every pair containing the layer and the whole group are proposed",
        ),
        r(
            "merge_parallel_dense",
            merge_dense,
            "nn.dense",
            "for `yᵢ = dense(x, Wᵢ)`: `yₖ = split(dense(x, concatenate(Wᵢ, axis=0)), ..., axis=1).k`",
            "same attributes except `units`; as above",
        ),
    ]
}

fn merge_conv2d(g: &EGraph, c: Id) -> Vec<Term> {
    merge(g, c, "nn.conv2d")
}

fn merge_dense(g: &EGraph, c: Id) -> Vec<Term> {
    merge(g, c, "nn.dense")
}

/// The op with its output-size attribute cleared (layers that differ only in it merge;
/// the merged layer states none).
fn key(op: &Op) -> Option<Op> {
    match op {
        Op::Conv2d(conv) if conv.groups == 1 => {
            let mut k = conv.clone();
            k.channels = None;
            Some(Op::Conv2d(k))
        }
        Op::Dense(d) => {
            let mut k = d.clone();
            k.units = None;
            Some(Op::Dense(k))
        }
        _ => None,
    }
}

/// A weight that is not itself a merged (concatenated) weight, so merging ends.
fn fresh_weight(g: &EGraph, w: Id) -> bool {
    calls_named(g, w, "concatenate").next().is_none()
}

/// The mergeable call `(key, x, w)` of op `name` in `class`, if any (the first).
fn layer(g: &EGraph, class: Id, name: &str) -> Option<(Op, Id, Id)> {
    calls_named(g, class, name).find_map(|(op, args)| {
        let [x, w] = args else { return None };
        if !fresh_weight(g, *w) {
            return None;
        }
        Some((key(op)?, g.find(*x), *w))
    })
}

fn merge(g: &EGraph, c: Id, name: &str) -> Vec<Term> {
    let Some((op, x, _)) = layer(g, c, name) else {
        return vec![];
    };
    // The layers on `x` with the same attributes, one per class, in class order.
    let mut group: BTreeMap<Id, Id> = BTreeMap::new();
    for parent in g[x].parents() {
        let p = g.find(parent);
        if let Some((k, px, w)) = layer(g, p, name)
            && k == op
            && px == x
        {
            group.insert(p, w);
        }
    }
    if group.len() < 2 || group.len() > MAX_MERGED {
        return vec![];
    }
    let members: Vec<(Id, Id)> = group.into_iter().collect();
    let Some(&mine) = members.iter().find(|m| m.0 == c) else {
        return vec![];
    };
    // Every pair containing `c`, and the whole group: the extraction picks the subset
    // that pays (a layer and its rescaled copy, both on `x`, should not merge together).
    let mut subsets: Vec<Vec<(Id, Id)>> = members
        .iter()
        .filter(|m| m.0 != c)
        .map(|&other| {
            let mut pair = vec![other, mine];
            pair.sort();
            pair
        })
        .collect();
    if members.len() > 2 {
        subsets.push(members.clone());
    }
    subsets
        .into_iter()
        .filter_map(|subset| merged_field(g, &op, x, &subset, c))
        .collect()
}

/// Field `c` of `split(op(x, concatenate(weights of subset)))`.
fn merged_field(g: &EGraph, op: &Op, x: Id, subset: &[(Id, Id)], c: Id) -> Option<Term> {
    let k = subset.iter().position(|&(p, _)| p == c)?;
    let mut indices = vec![];
    let mut at = 0i64;
    for &(_, w) in &subset[..subset.len() - 1] {
        at += tensor(g, w)
            .and_then(|t| t.shape.first())
            .map_or(0, |&d| d as i64);
        indices.push(at);
    }
    let weights = Term::Tuple(subset.iter().map(|&(_, w)| w.into()).collect());
    let cat = Term::call(Concatenate { axis: 0 }, vec![weights]);
    let merged = Term::call(op.clone(), vec![x.into(), cat]);
    let split = Term::call(
        Split {
            indices_or_sections: SplitSpec::Indices(indices),
            axis: 1,
        },
        vec![merged],
    );
    Some(Term::Get(k, Box::new(split)))
}
