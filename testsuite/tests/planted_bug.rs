//! The suite finds real backend bugs and shrinks them: with an off-by-one planted in the
//! `cpu` backend's loop lowering (`kiln_backend_cranelift::testing::plant_bug`), the
//! random-graph suite must fail on `cpu`, proptest must shrink the failure to a graph of
//! at most 3 ops, its diagnosis must blame the backend (it fails at opt level 0 too), not
//! a pass, and that graph must pass again once the bug is switched off. The switch
//! is process-wide, so this is the only test in its binary.

use kiln_backend_cranelift::testing::{Bug, plant_bug};
use kiln_testsuite::graphs::{GraphSpec, case_text, check, check_diagnosed, graph_spec};
use kiln_testsuite::suite::{config, exec_backend};
use proptest::test_runner::{TestCaseError, TestError, TestRunner};

/// Switches the planted bug off when dropped, even if an assertion fails.
struct Unplant;

impl Drop for Unplant {
    fn drop(&mut self) {
        plant_bug(None);
    }
}

#[test]
fn planted_off_by_one_is_found_and_shrunk() {
    let cpu = &exec_backend("cpu").unwrap();
    let _guard = Unplant;
    plant_bug(Some(Bug::LoopBoundOffByOne));
    // At least 200 cases whatever KILN_CASES says: the search must have room.
    let mut cfg = config(200);
    cfg.cases = cfg.cases.max(200);
    let mut runner = TestRunner::new(cfg);
    let result = runner.run(&graph_spec(8), |spec| {
        check(&spec, cpu, 2)
            .map(|_| ())
            .map_err(TestCaseError::fail)
    });
    let shrunk: GraphSpec = match result {
        Err(TestError::Fail(why, spec)) => {
            eprintln!("found: {why}");
            // The printed case (narrowed to the wrong output) is small too.
            let printed: usize = why
                .message()
                .split("case (")
                .nth(1)
                .and_then(|r| r.split(' ').next())
                .and_then(|n| n.parse().ok())
                .expect("the failure prints its case");
            assert!(printed <= 3, "printed case has {printed} ops");
            spec
        }
        other => panic!("the planted bug went unnoticed: {other:?}"),
    };
    let built = shrunk.build().expect("a failing case builds something");
    eprintln!("shrunk to {} ops:\n{}", built.ops.len(), case_text(&built));
    assert!(
        built.ops.len() <= 3,
        "shrunk case has {} ops:\n{}",
        built.ops.len(),
        case_text(&built)
    );
    // The diagnosis a suite failure prints: a backend bug fails at opt level 0 too, so
    // no pass is blamed.
    let diagnosed = check_diagnosed(&shrunk, cpu, 2).unwrap_err();
    assert!(
        diagnosed.contains("fails at opt level 0 on cpu too (not the optimizer)"),
        "{diagnosed}"
    );
    plant_bug(None);
    check(&shrunk, cpu, 2).expect("the shrunk case passes without the bug");
}
