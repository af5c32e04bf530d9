//! The default GPU schedule, in two forms:
//!
//! - **Shared-memory tiling** ([`gpu_tiled`]) for an output anchored
//!   by dense, batch-matmul or conv2d: 2-D (3-D for conv2d: channels × rows × columns)
//!   thread blocks over output tiles, the anchor accumulated per thread in a local
//!   register, its reduction split into chunks whose input tiles are loaded
//!   cooperatively into shared memory between barriers, and the elementwise tail
//!   written at the end. See that module for the tile sizes and the exact rule.
//! - **The plain schedule**, for every other output and for anchors where tiling does
//!   not apply (the anchor reads a materialized stage, or none of its inputs can be
//!   staged): the output's data axes are fused into one and split into `blockIdx.x`
//!   blocks of `threadIdx.x` threads (256 threads for large outputs, 64 for medium ones,
//!   a quarter of the extent for small ones, so no kernel of two or more elements runs
//!   on one workgroup); when the thread count does not divide the extent, the last
//!   block's extra threads are masked by a bounds guard.
//!   Reductions run serially inside each thread.
//!
//! Materialized intermediates (the anchor of a plainly scheduled output, softmax and
//! norm statistics, pooling sums, the stages of integer `power`) are computed inside
//! their consumer, per thread, over the region that thread reads, so a kernel is one
//! launch and no intermediate is shared between threads. (Every intermediate the
//! computes make has a single consumer for this reason.)

use crate::error::{Error, Result};
use crate::te::{Attach, OpId, Schedule, Tensor};
use crate::tir::{ForKind, ThreadAxis};
use crate::topi::Ctx;

use super::{
    anchor_of, compute_at, data_leaves, fuse_all, gpu_tiled, intermediates, materialized_reads,
    split,
};

/// Threads per block for `extent` output elements: 256 from 4,096 elements, 64 from 256,
/// and below that a quarter of the extent (rounded down), so that a small output still
/// spreads over at least four workgroups (one element per workgroup below four). Only a
/// one-element output is a single workgroup.
pub fn threads_for(extent: usize) -> usize {
    if extent >= 256 * 16 {
        256
    } else if extent >= 256 {
        64
    } else {
        (extent / 4).max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::threads_for;

    #[test]
    fn no_output_of_two_or_more_elements_is_one_block() {
        for extent in 1..20_000usize {
            let t = threads_for(extent);
            let blocks = extent.div_ceil(t);
            assert!(t >= 1 && t <= 256, "{extent}: {t} threads");
            if extent >= 2 {
                assert!(blocks >= 2, "{extent} elements in {blocks} block(s) of {t}");
            }
            if extent >= 4 {
                assert!(blocks >= 4, "{extent} elements in {blocks} block(s) of {t}");
            }
        }
    }
}

/// Schedules every stage of `s` for a GPU.
pub fn schedule(s: &mut Schedule, ctx: &Ctx, outputs: &[Tensor]) -> Result<()> {
    let reads = materialized_reads(s, outputs);
    let mut tiled: Vec<OpId> = vec![];
    for &o in outputs {
        let plan = anchor_of(s, ctx, &reads, o)
            .and_then(|(a, tag)| Some((a, gpu_tiled::plan(s, &reads, o.op(), a, tag)?)));
        match plan {
            Some((a, p)) => {
                gpu_tiled::apply(s, o.op(), a, &p)?;
                tiled.push(a);
            }
            None => bind(s, o.op())?,
        }
    }
    // Consumers first, so each intermediate goes inside an already placed consumer.
    for x in intermediates(s, outputs, &reads) {
        if tiled.contains(&x) {
            continue;
        }
        let consumers: Vec<OpId> = reads
            .iter()
            .filter(|(_, set)| set.contains(&x))
            .map(|(r, _)| *r)
            .collect();
        let [c] = consumers[..] else {
            return Err(Error::Unsupported(format!(
                "GPU schedule: stage `{}` has {} consumers; each intermediate must have one",
                s.op_name(x),
                consumers.len()
            )));
        };
        let st = s.stage_of(c);
        let at = if let Some(&t) = st
            .leaves
            .iter()
            .find(|l| st.kinds.get(l) == Some(&ForKind::Thread(ThreadAxis::ThreadX)))
        {
            t
        } else if matches!(st.attach, Attach::At { .. }) {
            // Inside an attached consumer: at its last data loop before a pair axis of
            // extent 2 when it has one (integer power's chain), else its last data loop,
            // else its first loop.
            let data = data_leaves(s, c);
            let last_is_pair = data.len() >= 2 && ctx.is_kept(c);
            match (last_is_pair, data.last()) {
                (true, _) => data[data.len() - 2],
                (false, Some(&l)) => l,
                (false, None) => *st.leaves.first().ok_or_else(|| {
                    Error::Unsupported(format!(
                        "GPU schedule: consumer `{}` has no loops",
                        s.op_name(c)
                    ))
                })?,
            }
        } else {
            // A consumer without data loops (a rank-0 result) runs as one thread at the
            // root; so do the stages it reads.
            continue;
        };
        compute_at(s, x, c, at)?;
    }
    Ok(())
}

/// Fuses the data axes of `op`, splits them into blocks and threads and binds them.
fn bind(s: &mut Schedule, op: OpId) -> Result<()> {
    let data = data_leaves(s, op);
    let total: usize = s.graph().ops()[op.index()].shape.iter().product();
    let Some(fused) = fuse_all(s, op, &data)? else {
        return Ok(());
    };
    let t = threads_for(total);
    let (bo, ti) = split(s, op, fused, t)?;
    super::set_kind(s, op, bo, ForKind::Thread(ThreadAxis::BlockX))?;
    super::set_kind(s, op, ti, ForKind::Thread(ThreadAxis::ThreadX))?;
    Ok(())
}
