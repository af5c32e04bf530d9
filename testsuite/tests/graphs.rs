//! Random programs on every backend: [`kiln_testsuite::graphs`] generates well-typed
//! graph-IR DAGs (fan-out, reuse, edge-value inputs) and each test below runs them on every
//! registered backend at one opt level against the reference interpreter. The tests are
//! written once (`kiln_testsuite::graph_suite`) and run on every backend of
//! [`kiln_testsuite::suite::exec_backends`] (the `kiln` registry) at each opt level
//! 0..=3; a new backend needs nothing here. A failure is shrunk by proptest and printed as text IR
//! with its seed (save it under `tests/cases/` to replay it); a failure at opt level > 0
//! that passes at opt level 0 also names the pass (and rewrite rule) that moves the
//! output. Cases a backend declares unsupported are skipped and counted on stderr, and
//! so are what the passes did (fusion, folding, equality saturation and the rules that
//! fired): at the default case count every opt level must change some graphs. `KILN_CASES` raises the case count,
//! `KILN_SEED` picks the seed (`random` for a fresh one), `KILN_TOL_SCALE` scales the
//! tolerances.

use kiln_testsuite::graph_suite::graph_suite;
use kiln_testsuite::graphs::Outcome;
use kiln_testsuite::suite::{ExecBackend, cases, exec_backend, exec_backends};

/// Default cases per (backend, opt level) instantiation.
const CASES: u32 = 96;
/// Most recipes per program.
const MAX_NODES: usize = 8;

/// The suite, for one backend at one opt level.
fn graph_suite_on(backend: &ExecBackend, opt_level: u8) {
    let run = graph_suite(&backend, opt_level, CASES, MAX_NODES).unwrap_or_else(|e| panic!("{e}"));
    let counts = run.counts;
    eprintln!(
        "{} -O{opt_level}: {} passed, {} unsupported (skipped); {counts}",
        backend.name, run.passed, run.unsupported
    );
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

/// The suite on every backend of the registry at one opt level (a new backend needs
/// nothing here).
fn every_backend_at(opt_level: u8) {
    let backends = exec_backends();
    assert!(!backends.is_empty(), "the registry has no backend");
    for backend in &backends {
        graph_suite_on(backend, opt_level);
    }
}

#[test]
fn every_backend_at_opt_level_0() {
    every_backend_at(0);
}

#[test]
fn every_backend_at_opt_level_1() {
    every_backend_at(1);
}

#[test]
fn every_backend_at_opt_level_2() {
    every_backend_at(2);
}

#[test]
fn every_backend_at_opt_level_3() {
    every_backend_at(3);
}

/// A declared (op, dtype) is skipped with its name, not run and not passed silently.
#[test]
fn declared_unsupported_is_skipped_and_counted() {
    use kiln_testsuite::cases::replay;
    use kiln_testsuite::graphs::{check_built, reference};
    let declare = |op: &str, dtype| kiln::Unsupported {
        op: op.into(),
        dtype,
        reason: "declared by the test".into(),
    };
    let mut backend = exec_backend("cpu").unwrap();
    backend.unsupported = vec![declare("nn.relu", kiln_ir::DType::F32)];
    let built = replay("def @main(%x: Tensor[(2), float32]) { nn.relu(exp(%x)) }").unwrap();
    let want = reference(&built.module, &built.inputs).unwrap();
    assert_eq!(
        check_built(&built, &want, &backend, 2),
        Ok(Outcome::Unsupported("nn.relu".into(), kiln_ir::DType::F32))
    );
    backend.unsupported = vec![declare("*", kiln_ir::DType::I32)];
    assert_eq!(check_built(&built, &want, &backend, 2), Ok(Outcome::Pass));
}
