//! ONNX's own backend node tests, run through `from_onnx` on the reference interpreter
//! and, for every case that passes there, on `cpu` (the graph executor over Cranelift).
//!
//! The cases come from `frontend-onnx/scripts/gen_node_tests.py`, which writes the
//! `collect_testcases()` of the pinned `onnx` package in ONNX's standard layout into the
//! directory named by `KILN_ONNX_NODE_TESTS` (`.ci/run` does this). Every case's status
//! on both backends is checked against `testsuite/onnx_node_manifest.txt`: the test fails
//! when a case the manifest lists as `pass` on a backend does not pass there. Without the
//! directory the test prints `SKIP` and returns, except under `CI=true`, where the
//! directory must exist.
//!
//! `KILN_ONNX_WRITE_MANIFEST=1` rewrites the manifest from this run's results instead of
//! checking it (the manifest is generated, never edited by hand). Cases run on as many
//! threads as the machine has cores (`KILN_ONNX_THREADS` overrides).

use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use kiln_testsuite::onnx_node::{CaseResult, Outcome, parse_manifest, run_case, write_manifest};

const MANIFEST: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/onnx_node_manifest.txt");

/// Runs every case in `names` under `dir`, on worker threads, in `names`' order.
fn run_all(dir: &Path, names: &[String]) -> Vec<(String, CaseResult)> {
    let threads = std::env::var("KILN_ONNX_THREADS")
        .ok()
        .and_then(|s| s.parse::<usize>().ok())
        .filter(|&n| n >= 1)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<CaseResult>>> = Mutex::new(vec![None; names.len()]);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(name) = names.get(i) else { break };
                    let r = run_case(&dir.join(name));
                    results.lock().unwrap_or_else(|e| e.into_inner())[i] = Some(r);
                }
            });
        }
    });
    let results = results.into_inner().unwrap_or_else(|e| e.into_inner());
    names
        .iter()
        .zip(results)
        .map(|(n, r)| {
            let r = r.unwrap_or(CaseResult {
                reference: Outcome::Fail("the runner lost this case".into()),
                cpu: None,
            });
            (n.clone(), r)
        })
        .collect()
}

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

    let start = Instant::now();
    let results = run_all(dir, &names);
    let secs = start.elapsed().as_secs_f64();
    let count = |f: &dyn Fn(&CaseResult) -> bool| results.iter().filter(|(_, r)| f(r)).count();
    println!(
        "onnx node tests on the reference interpreter: {} cases, {} pass, {} unsupported, {} known failures",
        results.len(),
        count(&|r| r.reference == Outcome::Pass),
        count(&|r| matches!(r.reference, Outcome::Unsupported(_))),
        count(&|r| matches!(r.reference, Outcome::Fail(_))),
    );
    println!(
        "onnx node tests on cpu (cases passing on the reference interpreter): {} run, {} pass, {} known failures",
        count(&|r| r.cpu.is_some()),
        count(&|r| r.cpu == Some(Outcome::Pass)),
        count(&|r| r.cpu.as_ref().is_some_and(|o| *o != Outcome::Pass)),
    );
    println!("ran in {secs:.1} s");

    if std::env::var("KILN_ONNX_WRITE_MANIFEST").as_deref() == Ok("1") {
        std::fs::write(MANIFEST, write_manifest(&results)).expect("write the manifest");
        println!("wrote {MANIFEST}");
        return;
    }

    let manifest = std::fs::read_to_string(MANIFEST).unwrap_or_default();
    let expected = parse_manifest(&manifest);
    let mut regressions = vec![];
    let mut newly_passing = vec![];
    for (name, r) in &results {
        let listed = expected.get(name);
        let ref_listed = listed.is_some_and(|l| l.reference == "pass");
        let cpu_listed = listed.is_some_and(|l| l.cpu == "pass");
        let ref_pass = r.reference == Outcome::Pass;
        let cpu_pass = r.cpu == Some(Outcome::Pass);
        if ref_listed && !ref_pass {
            regressions.push(format!("{name} on ref: {}", r.reference.status()));
        }
        if cpu_listed && !cpu_pass {
            regressions.push(format!("{name} on cpu: {}", r.cpu_status()));
        }
        if (ref_pass && !ref_listed) || (cpu_pass && !cpu_listed) {
            newly_passing.push(name.clone());
        }
    }
    let missing: Vec<&String> = expected
        .iter()
        .filter(|(n, l)| (l.reference == "pass" || l.cpu == "pass") && !names.contains(n))
        .map(|(n, _)| n)
        .collect();
    if !newly_passing.is_empty() {
        println!(
            "{} case(s) pass on a backend where they are not listed as passing (regenerate the manifest): {}",
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
