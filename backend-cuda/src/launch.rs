//! Launch geometry: the grid and block dimensions of one launch, read off the extents of
//! the thread-bound loops under its root statement (the largest extent per axis; a
//! shorter loop of the same axis is guarded in the code).

use kiln_te::tir::{ForKind, Stmt, ThreadAxis};

/// One kernel launch: its `.entry` name and dimensions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Launch {
    /// The PTX entry's name.
    pub entry: String,
    /// Blocks along x, y, z.
    pub grid: [u32; 3],
    /// Threads per block along x, y, z.
    pub block: [u32; 3],
}

impl Launch {
    /// The launch dimension of `axis`.
    pub fn dim(&self, axis: ThreadAxis) -> u32 {
        match axis {
            ThreadAxis::BlockX => self.grid[0],
            ThreadAxis::BlockY => self.grid[1],
            ThreadAxis::BlockZ => self.grid[2],
            ThreadAxis::ThreadX => self.block[0],
            ThreadAxis::ThreadY => self.block[1],
            ThreadAxis::ThreadZ => self.block[2],
        }
    }
}

/// The largest extent of each axis's loops (`ThreadAxis::ALL` order; 0 for none).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Dims([i64; 6]);

impl Dims {
    /// The grid and block of these dimensions (1 for an axis without loops), or why
    /// they exceed what a CUDA launch allows.
    pub fn geometry(&self) -> Result<([u32; 3], [u32; 3]), String> {
        let d = |k: usize| self.0[k].max(1);
        let grid = [d(0), d(1), d(2)];
        let block = [d(3), d(4), d(5)];
        if grid[0] > i32::MAX as i64 || grid[1] > 65535 || grid[2] > 65535 {
            return Err(format!("grid {grid:?} exceeds CUDA's limits"));
        }
        if block[0] > 1024
            || block[1] > 1024
            || block[2] > 64
            || block.iter().product::<i64>() > 1024
        {
            return Err(format!("block {block:?} exceeds 1024 threads"));
        }
        Ok((grid.map(|x| x as u32), block.map(|x| x as u32)))
    }
}

/// The dimensions of the launch rooted at `s`.
pub(crate) fn launch_dims(s: &Stmt) -> Dims {
    let mut dims = Dims::default();
    s.visit(&mut |x| {
        if let Stmt::For {
            kind: ForKind::Thread(a),
            extent,
            ..
        } = x
        {
            let k = ThreadAxis::ALL.iter().position(|b| b == a).unwrap_or(0);
            dims.0[k] = dims.0[k].max(*extent);
        }
    });
    dims
}
