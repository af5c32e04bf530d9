//! The default schedules, one module per target kind ([`cpu`], [`gpu`] with its
//! shared-memory tiling [`gpu_tiled`]), kept in one
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
//! The helpers here ([`split`], [`fuse`], [`reorder`], [`set_kind`], [`compute_at`],
//! [`compute_inline`]) call the [`Schedule`] primitives by operation id.

pub mod cpu;
pub mod gpu;
pub mod gpu_tiled;

use std::collections::{HashMap, HashSet};

use crate::error::Result;
use crate::te::{Attach, Expr, IterKind, IterVar, OpId, OpKind, Schedule, Tensor};
use crate::tir::ForKind;
use crate::topi::{Ctx, ScheduleKind, Tag};

/// Applies the default schedule of `target` to `s`, whose outputs are `outputs`.
pub fn apply(s: &mut Schedule, ctx: &Ctx, outputs: &[Tensor], target: ScheduleKind) -> Result<()> {
    match target {
        ScheduleKind::Cpu => cpu::schedule(s, ctx, outputs),
        ScheduleKind::Gpu => gpu::schedule(s, ctx, outputs),
    }
}

/// The largest of `factors` that divides `extent` (none: 1).
pub fn pick(extent: usize, factors: &[usize]) -> usize {
    factors
        .iter()
        .copied()
        .find(|&f| f <= extent && extent.is_multiple_of(f))
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

fn t(s: &Schedule, op: OpId) -> Result<Tensor> {
    s.graph().tensor(op)
}

/// [`Schedule::split`] of stage `op`.
pub fn split(
    s: &mut Schedule,
    op: OpId,
    axis: IterVar,
    factor: usize,
) -> Result<(IterVar, IterVar)> {
    let x = t(s, op)?;
    s.split(x, axis, factor)
}

/// [`Schedule::fuse`] of stage `op`.
pub fn fuse(s: &mut Schedule, op: OpId, outer: IterVar, inner: IterVar) -> Result<IterVar> {
    let x = t(s, op)?;
    s.fuse(x, outer, inner)
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

/// [`Schedule::reorder`] of stage `op`.
pub fn reorder(s: &mut Schedule, op: OpId, order: &[IterVar]) -> Result<()> {
    let x = t(s, op)?;
    s.reorder(x, order)
}

/// Marks leaf `axis` of stage `op` with `kind` ([`Schedule::vectorize`],
/// [`Schedule::parallel`], [`Schedule::unroll`], [`Schedule::bind`]).
pub fn set_kind(s: &mut Schedule, op: OpId, axis: IterVar, kind: ForKind) -> Result<()> {
    let x = t(s, op)?;
    match kind {
        ForKind::Serial => Ok(()),
        ForKind::Vectorized => s.vectorize(x, axis),
        ForKind::Parallel => s.parallel(x, axis),
        ForKind::Unrolled => s.unroll(x, axis),
        ForKind::Thread(a) => s.bind(x, axis, a),
    }
}

/// [`Schedule::compute_inline`] of stage `op`.
pub fn compute_inline(s: &mut Schedule, op: OpId) -> Result<()> {
    let x = t(s, op)?;
    s.compute_inline(x)
}

/// [`Schedule::compute_at`]: stage `op` inside loop `axis` of stage `parent`.
pub fn compute_at(s: &mut Schedule, op: OpId, parent: OpId, axis: IterVar) -> Result<()> {
    let (x, p) = (t(s, op)?, t(s, parent)?);
    s.compute_at(x, p, axis)
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
