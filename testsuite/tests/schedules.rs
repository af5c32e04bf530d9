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

/// Ignored until the `cpu` backend's register promotion accepts a guarded access whose
/// unrolled, guarded-off copy has a constant index out of bounds (found by this test: a
/// producer split by 2 over an extent of 1, `if (i.outer * 2 + i.inner < 1) add[...] =`,
/// fails to compile with "index of promoted buffer add is not a constant in bounds").
/// Run it with `cargo test -p kiln-testsuite --test schedules -- --ignored`.
#[test]
#[ignore = "cpu register promotion bug on guarded accesses (see the doc comment)"]
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
