//! The default CPU schedule: parallel outer loops (over the two cores of the machines
//! kiln targets), the innermost data axis vectorized (split by 8 or 4 when one of them
//! divides its extent; a ragged axis stays scalar, so no vector lane runs past its
//! buffer), and register tiling for conv2d and dense.
//!
//! - **Anchored outputs** (conv2d, dense, batch-matmul and their elementwise tail): the
//!   output is tiled — conv2d: the largest of 8..2 output columns dividing the width
//!   by 4 output channels, the channels innermost and vectorized (every stride and
//!   width, 7 and 14 included; each input element is splatted, the four weights
//!   gathered), or, with a channel count not a multiple of 4, 2 channels by 8 or 4
//!   vectorized columns; dense: 4 or 2 rows by 8 or 4 vectorized features;
//!   batch-matmul: 8 or 4 vectorized columns — its outer loops fused into one
//!   `parallel` loop; the anchor is computed at the tile into a
//!   local accumulator with the reduction loops outside the tile loops (kernel rows and
//!   columns, input channels, then the tile, vectorized loop innermost), so each weight
//!   is loaded once per tile and the tile stays in registers. (The lowering keeps a
//!   conv2d's zero-padded input materialized on the CPU, so the hot loop has no bounds
//!   checks.)
//!   Dense, batch-matmul and 1×1 stride-1 conv2d whose anchor matches the gemm
//!   micro-kernel's declaration instead take `gemm_tiles`: tiles of up to 16 (a
//!   conv2d: 64) by 64 outputs, each computed by one tensorized `microkernel gemm` call;
//!   every other group-1 conv2d, and a depthwise one, takes `conv2d_tiles`: up to
//!   128 output channels by up to 256 output pixels (whole rows, their count a multiple
//!   of the vector width where the image allows; depthwise: 64 by 64), one tensorized
//!   `microkernel conv2d` (or `depthwise_conv2d`) call each. The channel-vectorized tiles above remain for
//!   the conv2d the micro-kernels do not match (other groups, an inlined input).
//! - **Every other materialized stage** (outputs and intermediates: pooling, softmax,
//!   reductions, data movement): the innermost data axis is split and vectorized and
//!   moved inside the reduction loops, the remaining outer data loops are fused into one
//!   `parallel` loop (a ragged innermost axis, not vectorized, stays a serial loop
//!   inside it when the others give it at least 16 iterations).

use crate::error::Result;
use crate::te::tensorize::{match_conv2d, match_gemm};
use crate::te::{Attach, Expr, Intrin, OpId, Schedule, Tensor};
use crate::tir::ForKind;
use crate::topi::{Ctx, Tag};

use super::{
    anchor_of, compute_at, data_leaves, fuse_all, intermediates, materialized_reads, pick,
    reduce_leaves, reorder, set_kind, split,
};

/// Schedules every stage of `s` for a CPU.
pub fn schedule(s: &mut Schedule, ctx: &Ctx, outputs: &[Tensor]) -> Result<()> {
    let reads = materialized_reads(s, outputs);
    let mut anchors: Vec<OpId> = vec![];
    for &o in outputs {
        match anchor_of(s, ctx, &reads, o) {
            Some((a, tag)) => {
                anchored(s, o.op(), a, tag)?;
                anchors.push(a);
            }
            None => generic(s, o.op())?,
        }
    }
    for x in intermediates(s, outputs, &reads) {
        if !anchors.contains(&x) {
            generic(s, x)?;
        }
    }
    Ok(())
}

/// The fewest iterations of the other axes for which [`generic`] keeps a ragged last
/// axis out of the parallel loop (enough to share among the threads).
const SERIAL_ROWS_AT_LEAST: usize = 16;

/// Parallel outer loop, vectorized innermost data axis (see the module doc).
pub fn generic(s: &mut Schedule, op: OpId) -> Result<()> {
    let data = data_leaves(s, op);
    let Some(&last) = data.last() else {
        return Ok(());
    };
    let red = reduce_leaves(s, op);
    let ext = s.graph().iter_var(last)?.extent;
    let f = pick(ext, &[8, 4]);
    let mut outer: Vec<_> = data[..data.len() - 1].to_vec();
    let mut vector = None;
    if f > 1 {
        let (lo, li) = split(s, op, last, f)?;
        outer.push(lo);
        vector = Some(li);
    } else {
        outer.push(last);
    }
    let mut order = outer.clone();
    order.extend(red);
    order.extend(vector);
    reorder(s, op, &order)?;
    if let Some(li) = vector {
        set_kind(s, op, li, ForKind::Vectorized)?;
    }
    // A ragged (scalar) last axis stays a serial inner loop when the other axes give
    // the parallel loop enough iterations: fused in, every element would pay the
    // divisions that recover its indices (a conv2d's padded input: 58-wide rows).
    let mut par = &outer[..];
    if vector.is_none() && outer.len() > 1 {
        let mut rows = 1;
        for &x in &outer[..outer.len() - 1] {
            rows *= s.graph().iter_var(x)?.extent;
        }
        if rows >= SERIAL_ROWS_AT_LEAST {
            par = &outer[..outer.len() - 1];
        }
    }
    if let Some(p) = fuse_all(s, op, par)? {
        set_kind(s, op, p, ForKind::Parallel)?;
    }
    Ok(())
}

/// Register tiling of output `o` and its anchor `a` (see the module doc).
fn anchored(s: &mut Schedule, o: OpId, a: OpId, tag: Tag) -> Result<()> {
    if matches!(tag, Tag::Dense | Tag::BatchMatmul | Tag::Conv2d) && gemm_tiles(s, o, a, tag)? {
        return Ok(());
    }
    if tag == Tag::Conv2d && conv2d_tiles(s, o, a)? {
        return Ok(());
    }
    let data = data_leaves(s, o);
    let shape = s.graph().ops()[o.index()].shape.clone();
    let rank = data.len();
    // (axis, factor) of the tile: conv2d tiles channels and columns, the others the
    // last axis.
    // Inner tile loops in loop order, the last one vectorized.
    let mut tiles: Vec<(usize, usize)> = vec![];
    if tag == Tag::Conv2d && rank == 4 {
        let co = pick(shape[1], &[4]);
        if co == 4 {
            // Channel-vectorized: every stride and width (7 and 14 included) runs
            // f32x4 over four output channels, each input element splatted.
            tiles.push((3, pick(shape[3], &[8, 7, 6, 5, 4, 3, 2])));
            tiles.push((1, co));
        } else {
            // Fewer than four channels at a time: vectorized over columns.
            tiles.push((1, pick(shape[1], &[2])));
            tiles.push((3, pick(shape[3], &[8, 4])));
        }
    } else if tag == Tag::Dense && rank == 2 {
        tiles.push((0, pick(shape[0], &[4, 2])));
        tiles.push((1, pick(shape[1], &[8, 4])));
    } else if rank >= 1 {
        tiles.push((rank - 1, pick(shape[rank - 1], &[8, 4])));
    }
    let mut outer = vec![];
    let mut inner = vec![None; tiles.len()];
    for (d, &axis) in data.iter().enumerate() {
        match tiles.iter().position(|t| t.0 == d) {
            Some(t) if tiles[t].1 > 1 => {
                let (lo, li) = split(s, o, axis, tiles[t].1)?;
                outer.push(lo);
                inner[t] = Some(li);
            }
            _ => outer.push(axis),
        }
    }
    let inner: Vec<_> = inner.into_iter().flatten().collect();
    // Outer loops: the parallel prefix (up to the tiled channel axis for conv2d, all
    // of them otherwise), then the rest.
    let mut order = outer.clone();
    order.extend(inner.iter().copied());
    reorder(s, o, &order)?;
    if let Some(&v) = inner.last() {
        let last_tiled = tiles.last().map(|t| t.1 > 1).unwrap_or(false);
        if last_tiled {
            set_kind(s, o, v, ForKind::Vectorized)?;
        }
    }
    let par_len = if tag == Tag::Conv2d && rank == 4 {
        2
    } else {
        outer.len()
    };
    let par: Vec<_> = outer[..par_len.min(outer.len())].to_vec();
    let fused = fuse_all(s, o, &par)?;
    if let Some(p) = fused {
        set_kind(s, o, p, ForKind::Parallel)?;
    }
    // The anchor at the innermost outer loop.
    let at = if par_len >= outer.len() {
        fused
    } else {
        outer.last().copied()
    };
    let Some(at) = at else {
        // A rank-0 output: nothing to tile.
        return generic(s, a);
    };
    compute_at(s, a, o, at)?;
    // Inside the tile: the reductions outside the tile's data loops, the last
    // (vectorized when tiled) innermost.
    let adata = data_leaves(s, a);
    let ared = reduce_leaves(s, a);
    let mut order = vec![];
    let mut tile_axes = vec![None; tiles.len()];
    for (d, &l) in adata.iter().enumerate() {
        match tiles.iter().position(|t| t.0 == d) {
            // Split by the tile size so the tile loop has a constant extent.
            Some(t) if tiles[t].1 > 1 => {
                let (lo, li) = split(s, a, l, tiles[t].1)?;
                order.push(lo);
                tile_axes[t] = Some(li);
            }
            _ => order.push(l),
        }
    }
    let tile_axes: Vec<_> = tile_axes.into_iter().flatten().collect();
    order.extend(ared);
    order.extend(tile_axes.iter().copied());
    reorder(s, a, &order)?;
    let last_tiled = tiles.last().is_some_and(|t| t.1 > 1);
    if let Some(&v) = tile_axes.last()
        && last_tiled
    {
        set_kind(s, a, v, ForKind::Vectorized)?;
    }
    Ok(())
}

/// Dense, batch-matmul and 1×1 stride-1 conv2d on the gemm micro-kernel: the output
/// tiled `tm × tn` over the anchor's `i` and `j` dimensions (see [`tensorized_tiles`]).
/// `false` (nothing changed) when the anchor does not match the micro-kernel's
/// declaration, reads an inlined stage, or `j`'s extent has no tile size dividing it.
fn gemm_tiles(s: &mut Schedule, o: OpId, a: OpId, tag: Tag) -> Result<bool> {
    let Ok(m) = match_gemm(s.graph(), a) else {
        return Ok(false);
    };
    if reads_inlined(s, m.reads.iter().map(|r| &r.0)) {
        return Ok(false);
    }
    let shape = s.graph().ops()[o.index()].shape.clone();
    let [di, dj] = m.dims;
    let tn = if shape[dj] <= 64 {
        shape[dj]
    } else {
        pick(shape[dj], &[64, 48, 32, 16, 8])
    };
    if tn < 8 && tn != shape[dj] {
        return Ok(false);
    }
    // A conv2d's `i` is an image row: whole rows up to 64.
    let whole = if tag == Tag::Conv2d { 64 } else { 16 };
    let tm = if shape[di] <= whole {
        shape[di]
    } else {
        pick(shape[di], &[16, 8, 4, 2])
    };
    tensorized_tiles(s, o, a, &[(di, tm), (dj, tn)], Intrin::Gemm)
}

/// Every other group-1 conv2d (any kernel size, stride, dilation, padding) on the conv2d
/// micro-kernel, a depthwise one (one input and one output channel per group) on the
/// depthwise_conv2d micro-kernel: tiles of up to 64 output channels by whole rows of up to
/// 64 pixels, as many rows as fill the conv2d kernel's vectors best ([`pixel_tile`]; a
/// depthwise one: up to 64 pixels), see [`tensorized_tiles`].
/// `false` when the anchor does not match the declaration or reads an inlined stage.
fn conv2d_tiles(s: &mut Schedule, o: OpId, a: OpId) -> Result<bool> {
    let Ok(m) = match_conv2d(s.graph(), a) else {
        return Ok(false);
    };
    if reads_inlined(s, [&m.w.0, &m.x.0]) {
        return Ok(false);
    }
    let shape = s.graph().ops()[o.index()].shape.clone();
    let [dp, dy, dx] = m.dims;
    let (tp, ty, tx, intrin) = if m.depthwise {
        // Vectorized along each row: more rows would not fill its vectors better.
        let tx = divisor_at_most(shape[dx], 64);
        let ty = divisor_at_most(shape[dy], (64 / tx).max(1));
        (
            divisor_at_most(shape[dp], 64),
            ty,
            tx,
            Intrin::DepthwiseConv2d,
        )
    } else {
        let (ty, tx) = pixel_tile(shape[dy], shape[dx]);
        let outputs: usize = shape.iter().product();
        (
            channel_tile(shape[dp], outputs / shape[dp] / (ty * tx)),
            ty,
            tx,
            Intrin::Conv2d,
        )
    };
    tensorized_tiles(s, o, a, &[(dp, tp), (dy, ty), (dx, tx)], intrin)
}

/// Output channels of a conv2d tile: the largest divisor of `o` up to 128 (each packed
/// input panel serves more channels), or up to 64 when that would leave fewer than
/// [`TILES_AT_LEAST`] tiles (`pixel_tiles` of them per channel tile) to share among the
/// threads.
fn channel_tile(o: usize, pixel_tiles: usize) -> usize {
    let wide = divisor_at_most(o, 128);
    if (o / wide) * pixel_tiles >= TILES_AT_LEAST {
        wide
    } else {
        divisor_at_most(o, 64)
    }
}

/// The fewest tiles of a conv2d [`channel_tile`] widens its tiles for.
const TILES_AT_LEAST: usize = 4;

/// Output pixels of a conv2d tile at most (the packed panel holds a reduction chunk of
/// `32768 / pixels` taps).
const TILE_PIXELS: usize = 256;

/// The micro-kernels' vector width in pixels the tile's pixel count is rounded up to (16
/// lanes of AVX-512; a multiple of AVX2's 8 and SSE's 4).
const TILE_VECTOR: usize = 16;

/// A conv2d tile of `ty` rows by `tx` columns (each dividing the image's `h`, `w`):
/// `tx` the widest divisor of `w` up to 64, `ty` the divisor of `h` whose `ty · tx`
/// pixels (at most [`TILE_PIXELS`]) fill whole vectors best, the larger on a tie (a
/// 56-wide image: 4 rows, 224 pixels = 14 vectors, where one row left a 24-pixel
/// partial block; 28 wide: 4 rows, 112 pixels).
fn pixel_tile(h: usize, w: usize) -> (usize, usize) {
    let tx = divisor_at_most(w, 64);
    let fill = |p: usize| p as f64 / p.next_multiple_of(TILE_VECTOR) as f64;
    let ty = (1..=h.min((TILE_PIXELS / tx).max(1)))
        .filter(|d| h % d == 0)
        .max_by(|&a, &b| fill(a * tx).total_cmp(&fill(b * tx)).then(a.cmp(&b)))
        .unwrap_or(1);
    (ty, tx)
}

/// The largest divisor of `n` not above `cap` (at least 1).
fn divisor_at_most(n: usize, cap: usize) -> usize {
    (1..=cap.min(n)).rev().find(|d| n % d == 0).unwrap_or(1)
}

/// Whether any of `reads` is not a read of a materialized stage.
fn reads_inlined<'e>(s: &Schedule, reads: impl IntoIterator<Item = &'e Expr>) -> bool {
    reads.into_iter().any(|r| match r {
        Expr::Read { tensor, .. } => s.stage(*tensor).is_ok_and(|st| st.attach == Attach::Inline),
        _ => true,
    })
}

/// Output `o` tiled by `tiles` (dimension, tile size dividing it), the tiles and every
/// other dimension in one `parallel` loop, anchor `a` computed at the tile by one
/// tensorized `intrin` call into a local tile, the epilogue's innermost tile dimension
/// vectorized.
fn tensorized_tiles(
    s: &mut Schedule,
    o: OpId,
    a: OpId,
    tiles: &[(usize, usize)],
    intrin: Intrin,
) -> Result<bool> {
    let data = data_leaves(s, o);
    let mut tiles = tiles.to_vec();
    tiles.sort_unstable();
    let mut outer: Vec<_> = data
        .iter()
        .enumerate()
        .filter(|(d, _)| !tiles.iter().any(|t| t.0 == *d))
        .map(|(_, &x)| x)
        .collect();
    let mut inner = vec![];
    for &(d, f) in &tiles {
        let (lo, li) = split(s, o, data[d], f)?;
        outer.push(lo);
        inner.push((li, f));
    }
    let mut order = outer.clone();
    let (last, t_last) = inner.pop().expect("at least one tile dimension");
    order.extend(inner.iter().map(|t| t.0));
    let lanes = pick(t_last, &[8, 4]);
    if lanes > 1 {
        let (lo, li) = split(s, o, last, lanes)?;
        order.extend([lo, li]);
        reorder(s, o, &order)?;
        set_kind(s, o, li, ForKind::Vectorized)?;
    } else {
        order.push(last);
        reorder(s, o, &order)?;
    }
    let Some(p) = fuse_all(s, o, &outer)? else {
        return Ok(false);
    };
    set_kind(s, o, p, ForKind::Parallel)?;
    compute_at(s, a, o, p)?;
    let t = s.graph().tensor(a)?;
    s.tensorize(t, intrin)?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conv2d_tiles_fill_whole_vectors_and_leave_work_to_share() {
        assert_eq!(pixel_tile(56, 56), (4, 56));
        assert_eq!(pixel_tile(112, 112), (4, 56));
        assert_eq!(pixel_tile(28, 28), (4, 28));
        assert_eq!(pixel_tile(14, 14), (14, 14));
        assert_eq!(pixel_tile(7, 7), (7, 7));
        assert_eq!(channel_tile(512, 1), 128);
        assert_eq!(channel_tile(256, 1), 64);
        assert_eq!(channel_tile(128, 7), 128);
        assert_eq!(channel_tile(96, 1), 48);
        assert_eq!(channel_tile(96, 4), 96);
        for h in 1..=80 {
            for w in 1..=80 {
                let (ty, tx) = pixel_tile(h, w);
                assert!(h % ty == 0 && w % tx == 0 && tx <= 64, "{h}x{w}: {ty}x{tx}");
                assert!(ty == 1 || ty * tx <= TILE_PIXELS, "{h}x{w}: {ty}x{tx}");
            }
        }
    }
}
