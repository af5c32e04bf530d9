//! Random programs on every backend: [`kiln_testsuite::graphs`] generates well-typed
//! graph-IR DAGs (fan-out, reuse, edge-value inputs) and each test below runs them on one
//! registered backend at one opt level against the reference interpreter. The tests are
//! written once (`graph_suite`) and instantiated per backend of
//! [`kiln_testsuite::suite::EXEC_BACKENDS`] × opt level 0..=3 by `instantiate!`; a new
//! backend is one more line there. A failure is shrunk by proptest and printed as text IR
//! with its seed (save it under `tests/cases/` to replay it); a failure at opt level > 0
//! that passes at opt level 0 also names the pass (and rewrite rule) that moves the
//! output. Cases a backend declares unsupported are skipped and counted on stderr, and
//! so are what the passes did (fusion, folding, equality saturation and the rules that
//! fired): at the default case count every opt level must change some graphs. `KILN_CASES` raises the case count,
//! `KILN_SEED` picks the seed (`random` for a fresh one), `KILN_TOL_SCALE` scales the
//! tolerances.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use kiln_testsuite::exercised::OptCounts;
use kiln_testsuite::graphs::{Outcome, check_diagnosed, check_reported, graph_spec};
use kiln_testsuite::suite::{EXEC_BACKENDS, cases, config, exec_backend, rng_seed};
use proptest::test_runner::{TestCaseError, TestError, TestRunner};

/// Default cases per (backend, opt level) instantiation.
const CASES: u32 = 96;
/// Most recipes per program.
const MAX_NODES: usize = 8;

/// The suite, for one backend at one opt level.
fn graph_suite(backend: &str, opt_level: u8) {
    let backend = exec_backend(backend).expect("registered backend");
    let (passed, unsupported) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let counts = Mutex::new(OptCounts::default());
    let mut runner = TestRunner::new(config(CASES));
    let result = runner.run(&graph_spec(MAX_NODES), |spec| {
        let (outcome, report) = check_reported(&spec, backend, opt_level)
            .map_err(|f| TestCaseError::fail(f.message))?;
        if let Some(report) = report {
            counts.lock().unwrap().record(&report);
        }
        match outcome {
            Outcome::Pass => passed.fetch_add(1, Ordering::Relaxed),
            Outcome::Unsupported(op, d) => {
                eprintln!("{}: skipped, `{op}` on {d} is unsupported", backend.name);
                unsupported.fetch_add(1, Ordering::Relaxed)
            }
        };
        Ok(())
    });
    let counts = counts.into_inner().unwrap();
    eprintln!(
        "{} -O{opt_level}: {} passed, {} unsupported (skipped); {counts}",
        backend.name,
        passed.load(Ordering::Relaxed),
        unsupported.load(Ordering::Relaxed)
    );
    match result {
        // The shrunk case again, with the pass (and rule) that moves its output.
        Err(TestError::Fail(_, spec)) => {
            let message = match check_diagnosed(&spec, backend, opt_level) {
                Err(m) => m,
                Ok(_) => "the shrunk case passes when run again (flaky?)".to_string(),
            };
            panic!("{message}\nproptest seed: {:?} (KILN_SEED)", rng_seed());
        }
        Err(e) => panic!("{e}\nproptest seed: {:?} (KILN_SEED)", rng_seed()),
        Ok(()) => {}
    }
    // The suite must exercise the optimizer, not only the backends: at the default
    // case count each opt level's passes change some of the random graphs.
    if cases(CASES) >= CASES {
        let expect: &[(&str, u8)] = &[("fused", 1), ("folded", 2), ("eqsat", 3)];
        for &(label, level) in expect {
            if opt_level >= level {
                assert!(
                    counts.get(label) > 0,
                    "{} -O{opt_level}: no build was {label}; {counts}",
                    backend.name
                );
            }
        }
        if opt_level == 0 {
            assert_eq!(counts.get("fused"), 0, "-O0 fuses nothing; {counts}");
        }
    }
}

macro_rules! instantiate {
    ($($name:ident: $backend:literal, $opt:literal;)*) => {
        $(#[test]
        fn $name() {
            graph_suite($backend, $opt);
        })*

        /// Every registered backend has its four instantiations above.
        #[test]
        fn every_backend_is_instantiated() {
            let names = [$($backend),*];
            for b in EXEC_BACKENDS {
                assert_eq!(names.iter().filter(|n| **n == b.name).count(), 4, "{}", b.name);
            }
        }
    };
}

instantiate! {
    interp_o0: "interp", 0;
    interp_o1: "interp", 1;
    interp_o2: "interp", 2;
    interp_o3: "interp", 3;
    cpu_o0: "cpu", 0;
    cpu_o1: "cpu", 1;
    cpu_o2: "cpu", 2;
    cpu_o3: "cpu", 3;
}

/// A declared (op, dtype) is skipped with its name, not run and not passed silently.
#[test]
fn declared_unsupported_is_skipped_and_counted() {
    use kiln_testsuite::cases::replay;
    use kiln_testsuite::graphs::{check_built, reference};
    let mut backend = *exec_backend("cpu").unwrap();
    backend.unsupported = &[("nn.relu", kiln_ir::DType::F32)];
    let built = replay("def @main(%x: Tensor[(2), float32]) { nn.relu(exp(%x)) }").unwrap();
    let want = reference(&built.module, &built.inputs).unwrap();
    assert_eq!(
        check_built(&built, &want, &backend, 2),
        Ok(Outcome::Unsupported("nn.relu".into(), kiln_ir::DType::F32))
    );
    backend.unsupported = &[("*", kiln_ir::DType::I32)];
    assert_eq!(check_built(&built, &want, &backend, 2), Ok(Outcome::Pass));
}
