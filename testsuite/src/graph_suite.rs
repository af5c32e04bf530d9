//! The random-graph suite as a library call, for kiln's own tests and for anyone's
//! backend: [`graph_suite`] runs generated programs ([`crate::graphs`]) on one
//! [`ExecBackend`] at one opt level against the reference interpreter, with proptest
//! shrinking a failure to a small case printed as text IR, its seed, and — at opt level
//! > 0 — the pass (and rule) that moves its output. Cases the backend declares
//! unsupported are skipped and counted; a run in which every case was skipped is an
//! error, never a silent pass.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use proptest::test_runner::{TestCaseError, TestError, TestRunner};

use crate::exercised::OptCounts;
use crate::graphs::{Outcome, check_diagnosed, check_reported, graph_spec};
use crate::suite::{ExecBackend, config, rng_seed};

/// What a passing run did.
#[derive(Debug, Default)]
pub struct GraphRun {
    /// Cases that ran and matched the reference.
    pub passed: usize,
    /// Cases skipped because they use an (op, dtype) the backend declares unsupported.
    pub unsupported: usize,
    /// What the optimizer changed over the run.
    pub counts: OptCounts,
}

/// Runs `cases` random programs of up to `max_nodes` recipes (`KILN_CASES` overrides
/// the count, `KILN_SEED` the seed) on `backend` at `opt_level`. The error is the shrunk
/// failing case, diagnosed, with the seed to replay it.
pub fn graph_suite(
    backend: &ExecBackend,
    opt_level: u8,
    cases: u32,
    max_nodes: usize,
) -> Result<GraphRun, String> {
    let (passed, unsupported) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let counts = Mutex::new(OptCounts::default());
    let mut runner = TestRunner::new(config(cases));
    let result = runner.run(&graph_spec(max_nodes), |spec| {
        let (outcome, report) = check_reported(&spec, backend, opt_level)
            .map_err(|f| TestCaseError::fail(f.message))?;
        if let Some(report) = report {
            counts
                .lock()
                .map_err(|e| TestCaseError::fail(e.to_string()))?
                .record(&report);
        }
        match outcome {
            Outcome::Pass => passed.fetch_add(1, Ordering::Relaxed),
            Outcome::Unsupported(..) => unsupported.fetch_add(1, Ordering::Relaxed),
        };
        Ok(())
    });
    match result {
        // The shrunk case again, with the pass (and rule) that moves its output.
        Err(TestError::Fail(_, spec)) => {
            let message = match check_diagnosed(&spec, backend, opt_level) {
                Err(m) => m,
                Ok(_) => "the shrunk case passes when run again (flaky?)".to_string(),
            };
            return Err(format!(
                "{message}\nproptest seed: {:?} (KILN_SEED)",
                rng_seed()
            ));
        }
        Err(e) => return Err(format!("{e}\nproptest seed: {:?} (KILN_SEED)", rng_seed())),
        Ok(()) => {}
    }
    let run = GraphRun {
        passed: passed.into_inner(),
        unsupported: unsupported.into_inner(),
        counts: counts.into_inner().map_err(|e| e.to_string())?,
    };
    if run.passed == 0 && run.unsupported > 0 {
        return Err(format!(
            "{} -O{opt_level}: every one of {} cases was skipped as unsupported; nothing \
             was checked",
            backend.name, run.unsupported
        ));
    }
    Ok(run)
}
