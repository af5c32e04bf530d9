//! Launch geometry: a kernel's launches (each top-level statement holding thread-bound
//! loops is one; runs of statements without them are one single-invocation launch) and
//! each launch's workgroup count and size, read off its thread loops (the largest extent
//! per axis; a shorter loop of the same axis is guarded in the code).

use kiln_te::tir::{ForKind, Stmt, ThreadAxis};

use crate::features::Features;

/// One dispatch: workgroups along x, y, z and invocations per workgroup.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Launch {
    /// `vkCmdDispatch` group counts.
    pub groups: [u32; 3],
    /// The shader's `LocalSize`.
    pub size: [u32; 3],
}

impl Launch {
    /// The launch dimension of `axis`.
    pub fn dim(&self, axis: ThreadAxis) -> u32 {
        match axis {
            ThreadAxis::BlockX => self.groups[0],
            ThreadAxis::BlockY => self.groups[1],
            ThreadAxis::BlockZ => self.groups[2],
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
    let groups = [d[0], d[1], d[2]];
    let size = [d[3], d[4], d[5]];
    for k in 0..3 {
        if groups[k] > features.max_group_count[k] as i64 {
            return Err(format!(
                "{groups:?} workgroups exceed the device's maxComputeWorkGroupCount {:?}",
                features.max_group_count
            ));
        }
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
        groups: groups.map(|x| x as u32),
        size: size.map(|x| x as u32),
    })
}
