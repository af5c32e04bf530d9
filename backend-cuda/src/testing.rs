//! Test hooks (feature `testing`): a codegen bug planted on purpose, to prove that the
//! PTX interpreter of the test suite catches what a real GPU would get wrong. The switch
//! is process-wide; a test that plants a bug must be alone in its test binary.

use std::sync::atomic::{AtomicU8, Ordering};

/// A planted codegen bug.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Bug {
    /// Each kernel's first `bar.sync` is not emitted: a tiled kernel then reads shared
    /// memory that other threads of its block may still be writing.
    DropFirstBarrier,
}

static PLANTED: AtomicU8 = AtomicU8::new(0);

/// Plants `bug` in every later compilation (`None` removes it).
pub fn plant_bug(bug: Option<Bug>) {
    PLANTED.store(bug.map_or(0, |_| 1), Ordering::SeqCst);
}

/// The planted bug, if any.
pub(crate) fn planted() -> Option<Bug> {
    (PLANTED.load(Ordering::SeqCst) == 1).then_some(Bug::DropFirstBarrier)
}
