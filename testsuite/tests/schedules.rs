//! Schedule fuzzing on every backend ([`kiln_testsuite::schedules`]): random legal
//! schedules of random computes, compiled by every registered backend and compared with
//! the loop-IR interpreter running the unscheduled kernel. Written once, instantiated per
//! backend; `KILN_CASES` raises the case count.

use kiln_testsuite::schedules::{check, sched_case};
use kiln_testsuite::suite::{EXEC_BACKENDS, config, exec_backend, rng_seed};
use proptest::test_runner::{TestCaseError, TestRunner};

fn schedule_suite(backend: &str) {
    let backend = exec_backend(backend).expect("registered backend");
    let mut runner = TestRunner::new(config(48));
    if let Err(e) = runner.run(&sched_case(), |case| {
        check(&case, backend).map_err(TestCaseError::fail)
    }) {
        panic!("{e}\nproptest seed: {:?} (KILN_SEED)", rng_seed());
    }
}

#[test]
fn schedules_on_interp() {
    schedule_suite("interp");
}

/// Found a bug when it was written: `cpu` register promotion refused to compile a
/// guarded access whose unrolled, guarded-off copy had a constant index out of bounds (a
/// producer split by 2 over an extent of 1); code generation now drops branches that
/// unrolling makes constant.
#[test]
fn schedules_on_cpu() {
    schedule_suite("cpu");
}

#[test]
fn every_backend_is_instantiated() {
    for b in EXEC_BACKENDS {
        assert!(
            ["interp", "cpu"].contains(&b.name),
            "{} has no schedule test",
            b.name
        );
    }
}
