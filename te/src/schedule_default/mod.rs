//! The default schedules, one module per target kind ([`cpu`], [`gpu`]), kept in one
//! place so that a later tuner can replace them. [`apply`] runs after the injective
//! stages of a kernel have been inlined (see [`crate::topi::lower`]); it places and
//! shapes the remaining stages: the outputs and the materialized intermediates
//! (reductions, and stages kept from inlining).
//!
//! Both schedules recognise an **anchor**: a conv2d, dense or batch-matmul stage whose
//! only reader is an output of its shape (the lowering always gives an anchor such an
//! output, a copy when the anchor itself is a result, which is TVM's `cache_write`).
//! The anchor is computed inside the output's loop nest, so its elementwise tail (bias,
//! activation, residual add) runs in the same nest.
//!
//! The small helpers here ([`split`], [`fuse`], [`reorder`], [`set_kind`],
//! [`compute_at`], [`compute_inline`]) edit a stage the way the schedule primitives of [`crate::te`] do,
//! for the shapes these schedules produce.

pub mod cpu;
pub mod gpu;

use std::collections::{HashMap, HashSet};

use crate::error::{Error, Result};
use crate::te::{Attach, Expr, IterKind, IterVar, OpId, OpKind, Relation, Schedule, Tensor};
use crate::tir::ForKind;
use crate::topi::{Ctx, Tag, TargetKind};

/// Applies the default schedule of `target` to `s`, whose outputs are `outputs`.
pub fn apply(s: &mut Schedule, ctx: &Ctx, outputs: &[Tensor], target: TargetKind) -> Result<()> {
    match target {
        TargetKind::Cpu => cpu::schedule(s, ctx, outputs),
        TargetKind::Gpu => gpu::schedule(s, ctx, outputs),
    }
}

/// The largest of `factors` that divides `extent` (none: 1).
pub fn pick(extent: usize, factors: &[usize]) -> usize {
    factors
        .iter()
        .copied()
        .find(|&f| f <= extent && extent % f == 0)
        .unwrap_or(1)
}

/// The data leaves of stage `op`, in loop order.
pub fn data_leaves(s: &Schedule, op: OpId) -> Vec<IterVar> {
    s.stage_of(op)
        .leaves
        .iter()
        .copied()
        .filter(|&l| kind_of(s, l) == IterKind::Data)
        .collect()
}

/// The reduction leaves of stage `op`, in loop order.
pub fn reduce_leaves(s: &Schedule, op: OpId) -> Vec<IterVar> {
    s.stage_of(op)
        .leaves
        .iter()
        .copied()
        .filter(|&l| kind_of(s, l) == IterKind::Reduce)
        .collect()
}

fn kind_of(s: &Schedule, v: IterVar) -> IterKind {
    s.graph()
        .iter_var(v)
        .map(|i| i.kind)
        .unwrap_or(IterKind::Data)
}

fn extent_of(s: &Schedule, v: IterVar) -> usize {
    s.graph().iter_var(v).map(|i| i.extent).unwrap_or(1)
}

/// Splits leaf `axis` of stage `op` by `factor`: `axis = outer * factor + inner`.
pub fn split(
    s: &mut Schedule,
    op: OpId,
    axis: IterVar,
    factor: usize,
) -> Result<(IterVar, IterVar)> {
    let pos = leaf_pos(s, op, axis)?;
    if factor == 0 {
        return Err(Error::InvalidArgument("split factor 0".into()));
    }
    let (name, ext, kind) = (s.graph().iv_name(axis), extent_of(s, axis), kind_of(s, axis));
    let outer = s.new_axis(op, format!("{name}_o"), ext.div_ceil(factor), kind);
    let inner = s.new_axis(op, format!("{name}_i"), factor, kind);
    let st = &mut s.stages[op.index()];
    st.relations.push(Relation::Split {
        parent: axis,
        outer,
        inner,
        factor,
    });
    st.leaves.splice(pos..=pos, [outer, inner]);
    Ok((outer, inner))
}

/// Fuses adjacent leaves `outer` and `inner` (in that order) of stage `op` into one.
pub fn fuse(s: &mut Schedule, op: OpId, outer: IterVar, inner: IterVar) -> Result<IterVar> {
    let (po, pi) = (leaf_pos(s, op, outer)?, leaf_pos(s, op, inner)?);
    if pi != po + 1 || kind_of(s, outer) != kind_of(s, inner) {
        return Err(Error::InvalidArgument(
            "fuse needs two adjacent leaves of one kind".into(),
        ));
    }
    let name = format!("{}_{}_f", s.graph().iv_name(outer), s.graph().iv_name(inner));
    let ext = extent_of(s, outer) * extent_of(s, inner);
    let fused = s.new_axis(op, name, ext, kind_of(s, outer));
    let st = &mut s.stages[op.index()];
    st.relations.push(Relation::Fuse {
        outer,
        inner,
        fused,
    });
    st.leaves.splice(po..=pi, [fused]);
    Ok(fused)
}

/// Fuses the leaves `axes` (adjacent, in order) into one; `None` for no axes.
pub fn fuse_all(s: &mut Schedule, op: OpId, axes: &[IterVar]) -> Result<Option<IterVar>> {
    let mut it = axes.iter().copied();
    let Some(mut acc) = it.next() else {
        return Ok(None);
    };
    for a in it {
        acc = fuse(s, op, acc, a)?;
    }
    Ok(Some(acc))
}

/// Sets the loop order of stage `op` to `order` (a permutation of its leaves).
pub fn reorder(s: &mut Schedule, op: OpId, order: &[IterVar]) -> Result<()> {
    let st = &mut s.stages[op.index()];
    let mut a = st.leaves.clone();
    let mut b = order.to_vec();
    a.sort();
    b.sort();
    if a != b {
        return Err(Error::InvalidArgument(
            "reorder needs a permutation of the stage's loops".into(),
        ));
    }
    st.leaves = order.to_vec();
    Ok(())
}

/// Sets the loop kind of leaf `axis` of stage `op`.
pub fn set_kind(s: &mut Schedule, op: OpId, axis: IterVar, kind: ForKind) -> Result<()> {
    leaf_pos(s, op, axis)?;
    s.stages[op.index()].kinds.insert(axis, kind);
    Ok(())
}

/// Inlines stage `op` into its readers (no loops of its own).
pub fn compute_inline(s: &mut Schedule, op: OpId) -> Result<()> {
    if s.is_output(op) || s.graph().op(op)?.body().is_none() {
        return Err(Error::InvalidArgument(format!(
            "stage `{}` is an output or a placeholder and cannot be inlined",
            s.op_name(op)
        )));
    }
    s.stages[op.index()].attach = Attach::Inline;
    Ok(())
}

/// Computes stage `op` inside loop `axis` of stage `parent`.
pub fn compute_at(s: &mut Schedule, op: OpId, parent: OpId, axis: IterVar) -> Result<()> {
    leaf_pos(s, parent, axis)?;
    s.stages[op.index()].attach = Attach::At { parent, axis };
    Ok(())
}

fn leaf_pos(s: &Schedule, op: OpId, axis: IterVar) -> Result<usize> {
    s.stage_of(op)
        .leaves
        .iter()
        .position(|&l| l == axis)
        .ok_or_else(|| {
            Error::InvalidArgument(format!(
                "`{}` is not a loop of stage `{}`",
                s.graph().iv_name(axis),
                s.op_name(op)
            ))
        })
}

/// For each materialized stage reachable from the outputs, the materialized stages it
/// reads (looking through inlined stages).
pub fn materialized_reads(s: &Schedule, outputs: &[Tensor]) -> HashMap<OpId, HashSet<OpId>> {
    let g = s.graph();
    let mut out: HashMap<OpId, HashSet<OpId>> = HashMap::new();
    let mut todo: Vec<OpId> = outputs.iter().map(|t| t.op()).collect();
    let mut done = HashSet::new();
    while let Some(o) = todo.pop() {
        if !done.insert(o) {
            continue;
        }
        let mut reads = HashSet::new();
        let mut stack: Vec<Expr> = g.ops()[o.index()].body().into_iter().cloned().collect();
        let mut seen = HashSet::new();
        while let Some(e) = stack.pop() {
            e.visit(&mut |x| {
                if let Expr::Read { tensor, .. } = x {
                    let r = tensor.op();
                    if s.stage_of(r).attach == Attach::Inline {
                        if seen.insert(r)
                            && let Some(b) = g.ops()[r.index()].body()
                        {
                            stack.push(b.clone());
                        }
                    } else if matches!(g.ops()[r.index()].kind, OpKind::Compute { .. }) {
                        reads.insert(r);
                    }
                }
            });
        }
        todo.extend(reads.iter().copied());
        out.insert(o, reads);
    }
    out
}

/// The anchor of output `o`: a conv2d/dense/batch-matmul stage of the output's shape
/// read by `o` and by nothing else.
pub fn anchor_of(
    s: &Schedule,
    ctx: &Ctx,
    reads: &HashMap<OpId, HashSet<OpId>>,
    o: Tensor,
) -> Option<(OpId, Tag)> {
    let mine = reads.get(&o.op())?;
    mine.iter().copied().find_map(|a| {
        let tag = ctx.tag(a);
        let op = &s.graph().ops()[a.index()];
        let anchor = matches!(tag, Tag::Conv2d | Tag::Dense | Tag::BatchMatmul);
        let only_reader = reads
            .iter()
            .filter(|(r, set)| **r != o.op() && set.contains(&a))
            .count()
            == 0;
        (anchor && only_reader && op.shape == o.shape()).then_some((a, tag))
    })
}

/// The materialized intermediate stages (not outputs, not inlined), consumers first.
pub fn intermediates(
    s: &Schedule,
    outputs: &[Tensor],
    reads: &HashMap<OpId, HashSet<OpId>>,
) -> Vec<OpId> {
    let mut v: Vec<OpId> = reads
        .keys()
        .copied()
        .filter(|o| !outputs.iter().any(|t| t.op() == *o))
        .filter(|o| s.stage_of(*o).attach != Attach::Inline)
        .collect();
    // Creation order is topological; consumers were created after what they read.
    v.sort();
    v.reverse();
    v
}
