//! Test hooks of the Cranelift backend, compiled only with the `testing` feature (test
//! builds enable it through their dev-dependencies; a production build has no hook and
//! its generated loops read no switch). [`plant_bug`] switches on a deliberate
//! miscompilation so that the conformance suite (`kiln-testsuite`, `tests/planted_bug.rs`)
//! can show it finds and shrinks real backend bugs. The switch is off unless a test
//! turns it on, and it is process-wide, so a test that plants a bug must be the only
//! test in its binary.

use std::sync::atomic::{AtomicU8, Ordering};

/// A deliberate miscompilation.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Bug {
    /// Counted (not unrolled, not vectorized, not parallel) loops stop one iteration
    /// early: an off-by-one in the loop bound.
    LoopBoundOffByOne = 1,
}

static PLANTED: AtomicU8 = AtomicU8::new(0);

/// Switches `bug` on (`Some`) or every bug off (`None`) for code compiled from now on in
/// this process.
pub fn plant_bug(bug: Option<Bug>) {
    PLANTED.store(bug.map_or(0, |b| b as u8), Ordering::SeqCst);
}

/// Whether `bug` is planted.
pub(crate) fn planted(bug: Bug) -> bool {
    PLANTED.load(Ordering::Relaxed) == bug as u8
}
