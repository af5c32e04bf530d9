//! Shared-memory tiling of the GPU default schedule for the anchors dense,
//! batch-matmul and conv2d (TVM's `schedule_dense_shared` / `conv2d_direct` pattern).
//!
//! An anchored output `O` (the anchor `A`'s elementwise tail, or its copy) is tiled over
//! its trailing dimensions ([`Plan::tiles`]): dense and batch-matmul tile rows × columns
//! (the last two dimensions; the last one alone for a rank-1 dense), conv2d tiles output
//! channels × rows × columns. The outer tile loops become blocks (`blockIdx.z/y/x` for
//! three tiled dimensions, `blockIdx.y/x` for two, `blockIdx.x` for one; the leading,
//! untiled dimensions are fused into the first block axis) and the inner tile loops
//! threads (`threadIdx.z/y/x`, same pattern), so a block computes one tile, a thread one
//! element. Ragged extents get the lowering's bounds guards on every store.
//!
//! `A` is computed per thread inside `O`'s innermost thread loop into a `local` buffer
//! of one element (the lowering made `O` a copy of `A`: TVM's `cache_write(.., local)`,
//! so the accumulator is a register), and its first reduction axis (`k`, or the input
//! channel `rc` of conv2d) is split into chunks ([`Plan::chunk`]). At the chunk loop,
//! each staged input ([`Plan::staged`]) is copied by `cache_read(.., shared, [A])` into
//! a shared tile: the region the whole block reads during one chunk (bound inference
//! relaxes the thread indices for shared stages). The copy is cooperative: the tile's
//! axes are fused, split by the block's thread count and bound to the block's thread
//! axes, so each thread loads every `T`-th element; the lowering puts a barrier before
//! and after the load. Then every thread accumulates its element from the shared tiles,
//! and `O` writes it back through the inlined tail.
//!
//! Tile sizes come from the extents (`tile(e, choices)`: the first choice not above `e`,
//! else `e` itself, so a small axis is one exact tile):
//! - dense / batch-matmul: rows `tile(M, [16, 8])`; columns `tile(N, [16, 8])`, or
//!   `tile(N, [64, 32, 16, 8])` when the row tile is at most 2 (batch-1 dense); chunk
//!   `tile(K, [16, 8])`;
//! - conv2d: channels `tile(OC, [8, 4])`, rows `tile(OH, [4, 2])`, columns
//!   `tile(OW, [8, 4])`; chunk of input channels `tile(C/groups, [8, 4])`.
//!
//! An input is staged when the anchor reads it once, at indices affine in the anchor's
//! axes (so its tile is the exact window: a matmul operand, a conv2d weight, and the
//! conv2d input patch, padding included, when `groups == 1` or each group has one
//! output channel (depthwise: the input channel is `oc * C/groups + rc`); another
//! grouped conv2d's input channel is `floordiv(oc, OC/groups) * C/groups + rc`, not
//! affine, so only its weights are staged), and while the tiles staged so far fit in
//! [`SHARED_BUDGET_BYTES`] (smallest tiles first). [`plan`] returns `None`, and the
//! output keeps the plain schedule, when the anchor reads a materialized stage (tiling
//! keeps every intermediate in its consumer's thread), when its rank does not fit the
//! pattern, or when no input can be staged.

use std::collections::{HashMap, HashSet};

use crate::error::{Error, Result};
use crate::te::{Expr, IterVar, OpId, Schedule, Tensor};
use crate::tir::affine::Affine;
use crate::tir::{ForKind, Scope, ThreadAxis};
use crate::topi::Tag;

use super::{compute_at, data_leaves, fuse_all, reduce_leaves, reorder, set_kind, split};

/// The shared memory one block may use for its staged tiles (CUDA's static limit).
pub const SHARED_BUDGET_BYTES: usize = 48 * 1024;

/// How one anchored output is tiled (see the module doc).
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// Tile size of each tiled dimension: the last `tiles.len()` (1 to 3) dimensions of
    /// the output, outermost first; also the thread-block shape.
    pub tiles: Vec<usize>,
    /// Chunk of the anchor's first reduction axis staged per step.
    pub chunk: usize,
    /// The tensors the anchor reads that are staged in shared memory.
    pub staged: Vec<Tensor>,
}

/// The first of `choices` not above `extent`, else `extent` (one exact tile).
pub fn tile(extent: usize, choices: &[usize]) -> usize {
    choices
        .iter()
        .copied()
        .find(|&c| c <= extent)
        .unwrap_or(extent)
        .max(1)
}

/// The tiling of output `o` whose anchor is `a` (tagged `tag`), or `None` where
/// shared-memory tiling does not apply (see the module doc). `reads` maps each
/// materialized stage to the materialized stages it reads.
pub fn plan(
    s: &Schedule,
    reads: &HashMap<OpId, HashSet<OpId>>,
    o: OpId,
    a: OpId,
    tag: Tag,
) -> Option<Plan> {
    if reads.get(&a).is_none_or(|r| !r.is_empty()) {
        return None;
    }
    let g = s.graph();
    let aop = g.ops().get(a.index())?;
    let oop = g.ops().get(o.index())?;
    let Some(Expr::Reduce { value, .. }) = aop.body() else {
        return None;
    };
    let red = aop.reduce_axes();
    let first_red = *red.first()?;
    let kext = g.iter_var(first_red).ok()?.extent;
    let shape = &oop.shape;
    let rank = shape.len();
    let (tiles, chunk) = match (tag, rank) {
        (Tag::Conv2d, 4) => (
            vec![
                tile(shape[1], &[8, 4]),
                tile(shape[2], &[4, 2]),
                tile(shape[3], &[8, 4]),
            ],
            tile(kext, &[8, 4]),
        ),
        (Tag::Dense, 1) => (vec![tile(shape[0], &[64, 32, 16, 8])], tile(kext, &[16, 8])),
        (Tag::Dense, r) | (Tag::BatchMatmul, r) if r >= 2 && (tag == Tag::Dense || r == 3) => {
            let rows = tile(shape[r - 2], &[16, 8]);
            let cols = if rows <= 2 {
                tile(shape[r - 1], &[64, 32, 16, 8])
            } else {
                tile(shape[r - 1], &[16, 8])
            };
            (vec![rows, cols], tile(kext, &[16, 8]))
        }
        _ => return None,
    };
    // The extent each anchor axis spans inside one block and one chunk.
    let k = tiles.len();
    let mut span: HashMap<IterVar, usize> = HashMap::new();
    for (d, &ax) in aop.axes().iter().enumerate() {
        let e = if d + k >= rank {
            tiles[d + k - rank]
        } else {
            1
        };
        span.insert(ax, e);
    }
    for &r in red {
        let e = if r == first_red {
            chunk
        } else {
            g.iter_var(r).ok()?.extent
        };
        span.insert(r, e);
    }
    // Candidates: tensors read once, at affine indices, with their tile sizes in bytes.
    let mut seen: Vec<(Tensor, usize)> = vec![];
    value.visit(&mut |e| {
        if let Expr::Read { tensor, .. } = e {
            match seen.iter_mut().find(|(t, _)| t.op() == tensor.op()) {
                Some(x) => x.1 += 1,
                None => seen.push((*tensor, 1)),
            }
        }
    });
    let mut cands: Vec<(usize, Tensor)> = vec![];
    for (t, count) in seen {
        if count != 1 || t.rank() == 0 {
            continue;
        }
        let mut indices = None;
        value.visit(&mut |e| {
            if let Expr::Read {
                tensor,
                indices: ix,
            } = e
                && tensor.op() == t.op()
            {
                indices = Some(ix.clone());
            }
        });
        let Some(indices) = indices else { continue };
        let mut elems = 1usize;
        let mut ok = true;
        for (ix, &n) in indices.iter().zip(t.shape()) {
            let Some(form) = affine(ix) else {
                ok = false;
                break;
            };
            let mut w = 1usize;
            for (v, c) in form.terms() {
                let e = span.get(v).copied().unwrap_or(1);
                let c = usize::try_from(c.unsigned_abs()).unwrap_or(usize::MAX);
                w = w.saturating_add(c.saturating_mul(e - 1));
            }
            elems = elems.saturating_mul(w.min(n));
        }
        if ok {
            cands.push((elems.saturating_mul(t.dtype().size_bytes()), t));
        }
    }
    cands.sort_by_key(|c| c.0);
    let mut used = 0usize;
    let mut staged = vec![];
    for (bytes, t) in cands {
        if used + bytes <= SHARED_BUDGET_BYTES {
            used += bytes;
            staged.push(t);
        }
    }
    if staged.is_empty() {
        return None;
    }
    Some(Plan {
        tiles,
        chunk,
        staged,
    })
}

/// The affine form of an index expression over the axes, if it is affine in them.
fn affine(e: &Expr) -> Option<Affine<IterVar>> {
    Affine::of(e, &mut |x| match x {
        Expr::Var(v) => Some(*v),
        _ => None,
    })
}

/// The block and thread axes of `k` tiled dimensions, outermost first.
fn launch_axes(k: usize) -> (&'static [ThreadAxis], &'static [ThreadAxis]) {
    const BLOCKS: [ThreadAxis; 3] = [ThreadAxis::BlockZ, ThreadAxis::BlockY, ThreadAxis::BlockX];
    const THREADS: [ThreadAxis; 3] = [
        ThreadAxis::ThreadZ,
        ThreadAxis::ThreadY,
        ThreadAxis::ThreadX,
    ];
    let k = k.clamp(1, 3);
    (&BLOCKS[3 - k..], &THREADS[3 - k..])
}

/// Applies `plan` to output `o` and its anchor `a` (see the module doc).
pub fn apply(s: &mut Schedule, o: OpId, a: OpId, plan: &Plan) -> Result<()> {
    let k = plan.tiles.len();
    let unsupported = |m: &str| Error::Unsupported(format!("GPU tiling: {m}"));
    if !(1..=3).contains(&k) {
        return Err(unsupported("1 to 3 tiled dimensions"));
    }
    let at = s.graph().tensor(a)?;
    s.set_scope(at, Scope::Local)?;
    let caches = plan
        .staged
        .iter()
        .map(|&t| s.cache_read(t, Scope::Shared, &[at]))
        .collect::<Result<Vec<_>>>()?;
    // The output: outer tile loops to blocks, inner ones to threads.
    let data = data_leaves(s, o);
    let first = data
        .len()
        .checked_sub(k)
        .ok_or_else(|| unsupported("more tiled dimensions than the output has"))?;
    let mut outers = data[..first].to_vec();
    let mut inners = vec![];
    for (&axis, &f) in data[first..].iter().zip(&plan.tiles) {
        let (xo, xi) = split(s, o, axis, f)?;
        outers.push(xo);
        inners.push(xi);
    }
    let mut order = outers.clone();
    order.extend(inners.iter().copied());
    reorder(s, o, &order)?;
    let (blocks, threads) = launch_axes(k);
    let b0 =
        fuse_all(s, o, &outers[..=first])?.ok_or_else(|| unsupported("no block loop to bind"))?;
    let mut baxes = vec![b0];
    baxes.extend(outers[first + 1..].iter().copied());
    for (&ax, &ta) in baxes.iter().zip(blocks) {
        set_kind(s, o, ax, ForKind::Thread(ta))?;
    }
    for (&ax, &ta) in inners.iter().zip(threads) {
        set_kind(s, o, ax, ForKind::Thread(ta))?;
    }
    let tx = *inners.last().ok_or_else(|| unsupported("no thread loop"))?;
    // The anchor: one element per thread, its first reduction axis in chunks.
    compute_at(s, a, o, tx)?;
    let red = reduce_leaves(s, a);
    let r0 = *red
        .first()
        .ok_or_else(|| unsupported("the anchor has no reduction axis"))?;
    let (ro, _ri) = split(s, a, r0, plan.chunk)?;
    // Each shared tile at the chunk loop, loaded cooperatively by the block's threads.
    let total: usize = plan.tiles.iter().product();
    for c in caches {
        let c = c.op();
        compute_at(s, c, a, ro)?;
        let axes = data_leaves(s, c);
        let f = fuse_all(s, c, &axes)?.ok_or_else(|| unsupported("a rank-0 tile"))?;
        let (_outer, mut rest) = split(s, c, f, total)?;
        for d in (1..k).rev() {
            let (r, t) = split(s, c, rest, plan.tiles[d])?;
            set_kind(s, c, t, ForKind::Thread(threads[d]))?;
            rest = r;
        }
        set_kind(s, c, rest, ForKind::Thread(threads[0]))?;
    }
    Ok(())
}
