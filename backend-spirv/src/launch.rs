//! Launch geometry: a kernel's launches (each top-level statement holding thread-bound
//! loops is one; runs of statements without them are one single-invocation launch) and
//! each launch's workgroup count and size, read off its thread loops (the largest extent
//! per axis; a shorter loop of the same axis is guarded in the code).
//!
//! A grid with more blocks on an axis than the device dispatches
//! (`maxComputeWorkGroupCount`, 65,535 on y and z and often on x too) is **folded**: its
//! blocks are numbered linearly and dispatched over x, then y, then z; the shader
//! recovers each `blockIdx` from the linear number and skips the few groups past the
//! grid (see [`Launch::folded`]).

use kiln_te::tir::{ForKind, Stmt, ThreadAxis};

use crate::features::Features;

/// One dispatch: the kernel's grid of blocks, the workgroups dispatched for it along x,
/// y, z, and invocations per workgroup.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Launch {
    /// The grid: the `blockIdx.x/y/z` extents of the kernel's block loops.
    pub blocks: [u32; 3],
    /// `vkCmdDispatch` group counts: `blocks` itself, or the folded grid.
    pub groups: [u32; 3],
    /// The shader's `LocalSize`.
    pub size: [u32; 3],
}

impl Launch {
    /// Whether the grid is folded: its blocks numbered linearly (`x` fastest) over the
    /// dispatched groups (`x + groups.x * (y + groups.y * z)`), the groups numbered at
    /// or past the grid's block count doing nothing.
    pub fn folded(&self) -> bool {
        self.groups != self.blocks
    }

    /// The number of blocks of the grid.
    pub fn block_count(&self) -> u64 {
        self.blocks.iter().map(|&b| u64::from(b)).product()
    }

    /// The launch dimension of `axis` (the grid's, for block axes).
    pub fn dim(&self, axis: ThreadAxis) -> u32 {
        match axis {
            ThreadAxis::BlockX => self.blocks[0],
            ThreadAxis::BlockY => self.blocks[1],
            ThreadAxis::BlockZ => self.blocks[2],
            ThreadAxis::ThreadX => self.size[0],
            ThreadAxis::ThreadY => self.size[1],
            ThreadAxis::ThreadZ => self.size[2],
        }
    }
}

/// The position of `axis` in [`ThreadAxis::ALL`].
pub(crate) fn axis_index(axis: ThreadAxis) -> usize {
    ThreadAxis::ALL
        .iter()
        .position(|&a| a == axis)
        .unwrap_or_default()
}

/// The largest extent of each axis's loops under `s` (`ThreadAxis::ALL` order; 0 for none).
fn extents(s: &Stmt) -> [i64; 6] {
    let mut dims = [0i64; 6];
    s.visit(&mut |x| {
        if let Stmt::For {
            kind: ForKind::Thread(a),
            extent,
            ..
        } = x
        {
            let k = axis_index(*a);
            dims[k] = dims[k].max(*extent);
        }
    });
    dims
}

/// The launch rooted at `s`, or why it does not fit the device.
pub(crate) fn launch_of(s: &Stmt, features: &Features) -> Result<Launch, String> {
    let d = extents(s).map(|e| e.max(1));
    let blocks = [d[0], d[1], d[2]];
    let size = [d[3], d[4], d[5]];
    let groups = dispatch(blocks, features.max_group_count)?;
    for k in 0..3 {
        if size[k] > features.max_group_size[k] as i64 {
            return Err(format!(
                "workgroup size {size:?} exceeds the device's maxComputeWorkGroupSize {:?}",
                features.max_group_size
            ));
        }
    }
    if size.iter().product::<i64>() > features.max_invocations as i64 {
        return Err(format!(
            "workgroup size {size:?} exceeds the device's {} invocations per workgroup",
            features.max_invocations
        ));
    }
    Ok(Launch {
        blocks: blocks.map(|x| x as u32),
        groups,
        size: size.map(|x| x as u32),
    })
}

/// The groups to dispatch for a grid of `blocks`: the grid itself where each axis fits
/// `max`, else the grid's block count folded over x, then y, then z (see
/// [`Launch::folded`]). Block numbers are 32-bit signed in the shader, so a grid of
/// 2^31 blocks or more is refused.
fn dispatch(blocks: [i64; 3], max: [u32; 3]) -> Result<[u32; 3], String> {
    if blocks.iter().zip(max).all(|(&b, m)| b <= i64::from(m)) {
        return Ok(blocks.map(|b| b as u32));
    }
    let total = blocks.iter().try_fold(1i64, |n, &b| n.checked_mul(b));
    let total = match total {
        Some(t) if t <= i64::from(i32::MAX) => t,
        _ => {
            return Err(format!(
                "a grid of {blocks:?} blocks: at most 2^31-1 blocks in all (the \
                 device dispatches {max:?} workgroups per axis)"
            ));
        }
    };
    let x = total.min(i64::from(max[0]).max(1));
    let rest = (total + x - 1) / x;
    let y = rest.min(i64::from(max[1]).max(1));
    let z = (rest + y - 1) / y;
    if z > i64::from(max[2]) {
        return Err(format!(
            "a grid of {blocks:?} blocks does not fold into the device's \
             maxComputeWorkGroupCount {max:?}"
        ));
    }
    Ok([x as u32, y as u32, z as u32])
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: [u32; 3] = [65_535, 65_535, 65_535];

    #[test]
    fn a_grid_that_fits_is_dispatched_as_is() {
        assert_eq!(dispatch([65_535, 3, 1], MAX), Ok([65_535, 3, 1]));
    }

    #[test]
    fn a_large_grid_folds_over_every_block_once() {
        for blocks in [
            [65_536, 1, 1],
            [200_000, 1, 1],
            [70_000, 2, 3],
            [5, 70_000, 1],
        ] {
            let g = dispatch(blocks, MAX).unwrap();
            let total: i64 = blocks.iter().product();
            let dispatched: i64 = g.iter().map(|&x| i64::from(x)).product();
            assert!(g.iter().zip(MAX).all(|(&x, m)| x <= m), "{g:?}");
            // Every block has a group, and fewer than one row of x groups is idle.
            assert!(
                dispatched >= total && dispatched - total < i64::from(g[0]),
                "{g:?}"
            );
        }
        // Past what y and z can take, or past 2^31 blocks: refused.
        assert!(dispatch([65_535, 65_535, 2], [65_535, 65_535, 1]).is_err());
        assert!(dispatch([1 << 31, 1, 1], MAX).is_err());
    }
}
