//! Schedule fuzzing on every backend ([`kiln_testsuite::schedules`]): random legal
//! schedules of random computes, compiled by every registered backend and compared with
//! the loop-IR interpreter running the unscheduled kernel. Written once, run on every
//! backend of the `kiln` registry; `KILN_CASES` raises the case count.

use kiln_testsuite::schedules::{check, sched_case};
use kiln_testsuite::suite::{ExecBackend, config, exec_backends, rng_seed};
use proptest::test_runner::{TestCaseError, TestRunner};

/// Random schedules on `backend`.
fn schedule_suite(backend: &ExecBackend) {
    let mut runner = TestRunner::new(config(96));
    if let Err(e) = runner.run(&sched_case(), |case| {
        check(&case, backend).map_err(TestCaseError::fail)
    }) {
        panic!(
            "{}: {e}\nproptest seed: {:?} (KILN_SEED)",
            backend.name,
            rng_seed()
        );
    }
}

/// Every backend of the registry. Found a bug when it was written: `cpu` register
/// promotion refused to compile a guarded access whose unrolled, guarded-off copy had a
/// constant index out of bounds (a producer split by 2 over an extent of 1); code
/// generation now drops branches that unrolling makes constant.
#[test]
fn schedules_on_every_backend() {
    let backends = exec_backends();
    assert!(!backends.is_empty(), "the registry has no backend");
    for backend in &backends {
        schedule_suite(backend);
    }
}

/// The first bug this suite found, kept as a fixed case: a producer split by 2 over an
/// extent of 1 leaves a guarded-off copy whose index into the register-promoted local
/// buffer is out of bounds once unrolled; `cpu` must compile and run it.
#[test]
fn guarded_promoted_access_compiles_on_every_backend() {
    let f = kiln_te::tir::parse(
        "primfn @scheduled(%x: Buffer[(1, 1), float32, global], %bias: Buffer[(1), float32, global], out %y: Buffer[(1, 1), float32, global]) {
  allocate %add: Buffer[(1, 1), float32, local] {
    for (%i.outer, 0, 1) {
      for (%i.inner, 0, 2) {
        for (%j, 0, 1) {
          if (%i.outer * 2 + %i.inner < 1) {
            %add[%i.outer * 2 + %i.inner, %j] = %x[%i.outer * 2 + %i.inner, %j] + %bias[%j]
          }
        }
      }
    }
    for (%i, 0, 1) {
      for (%j_1, 0, 1) {
        %y[%i, %j_1] = max(%add[%i, %j_1], 0.0) * 2.0
      }
    }
  }
}",
    )
    .unwrap();
    let inputs = vec![
        kiln_ir::NDArray::from_vec([1, 1], vec![0.75f32]).unwrap(),
        kiln_ir::NDArray::from_vec([1], vec![-0.25f32]).unwrap(),
    ];
    let want = kiln_te::tir::run_with_inputs(&f, &inputs).unwrap();
    assert_eq!(want[0].to_vec::<f32>().unwrap(), vec![1.0]);
    for b in &exec_backends() {
        let got = kiln_testsuite::schedules::run_compiled(b, &f, &inputs)
            .unwrap_or_else(|e| panic!("{}: {e}", b.name));
        assert_eq!(got, want, "{}", b.name);
    }
}
