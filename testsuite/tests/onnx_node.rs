//! ONNX's own backend node tests, run through `from_onnx` and the reference interpreter.
//!
//! The cases come from `frontend-onnx/scripts/gen_node_tests.py`, which writes the
//! `collect_testcases()` of the pinned `onnx` package in ONNX's standard layout into the
//! directory named by `KILN_ONNX_NODE_TESTS` (`.ci/run` does this). Every case's status
//! is checked against `testsuite/onnx_node_manifest.txt`: the test fails when a case the
//! manifest lists as `pass` does not pass. Without the directory the test prints `SKIP`
//! and returns, except under `CI=true`, where the directory must exist.
//!
//! `KILN_ONNX_WRITE_MANIFEST=1` rewrites the manifest from this run's results instead of
//! checking it (the manifest is generated, never edited by hand).

use std::path::Path;

use kiln_testsuite::onnx_node::{Outcome, run_case};

const MANIFEST: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/onnx_node_manifest.txt");

#[test]
fn onnx_node_tests_match_the_manifest() {
    let Some(dir) = std::env::var_os("KILN_ONNX_NODE_TESTS") else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true but KILN_ONNX_NODE_TESTS is not set (.ci/run generates the cases)"
        );
        println!("SKIP onnx node tests: KILN_ONNX_NODE_TESTS is not set");
        return;
    };
    let dir = Path::new(&dir);
    assert!(
        dir.is_dir(),
        "KILN_ONNX_NODE_TESTS={} is not a directory",
        dir.display()
    );
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("read the node test directory")
        .filter_map(|e| e.ok())
        .filter(|e| e.path().join("model.onnx").is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert!(!names.is_empty(), "no test cases under {}", dir.display());

    let results: Vec<(String, Outcome)> = names
        .iter()
        .map(|name| (name.clone(), run_case(&dir.join(name))))
        .collect();
    let count = |f: fn(&Outcome) -> bool| results.iter().filter(|(_, o)| f(o)).count();
    println!(
        "onnx node tests on the reference interpreter: {} cases, {} pass, {} unsupported, {} known failures",
        results.len(),
        count(|o| matches!(o, Outcome::Pass)),
        count(|o| matches!(o, Outcome::Unsupported(_))),
        count(|o| matches!(o, Outcome::Fail(_))),
    );

    if std::env::var("KILN_ONNX_WRITE_MANIFEST").as_deref() == Ok("1") {
        let text = kiln_testsuite::onnx_node::write_manifest(&results);
        std::fs::write(MANIFEST, text).expect("write the manifest");
        println!("wrote {MANIFEST}");
        return;
    }

    let manifest = std::fs::read_to_string(MANIFEST).unwrap_or_default();
    let expected = kiln_testsuite::onnx_node::parse_manifest(&manifest);
    let mut regressions = vec![];
    let mut newly_passing = vec![];
    for (name, outcome) in &results {
        let listed_pass = expected.get(name).is_some_and(|s| s == "pass");
        match (listed_pass, outcome) {
            (true, Outcome::Pass) => {}
            (true, other) => regressions.push(format!("{name}: {}", other.status())),
            (false, Outcome::Pass) => newly_passing.push(name.clone()),
            (false, _) => {}
        }
    }
    let missing: Vec<&String> = expected
        .iter()
        .filter(|(n, s)| *s == "pass" && !names.contains(n))
        .map(|(n, _)| n)
        .collect();
    if !newly_passing.is_empty() {
        println!(
            "{} case(s) pass but are not listed as passing (regenerate the manifest): {}",
            newly_passing.len(),
            newly_passing.join(", ")
        );
    }
    assert!(
        missing.is_empty(),
        "cases listed as passing are missing from {}: {missing:?}",
        dir.display()
    );
    assert!(
        regressions.is_empty(),
        "{} case(s) listed as passing fail:\n{}",
        regressions.len(),
        regressions.join("\n")
    );
}
