//! Saved cases: every `tests/cases/*.relay` (a module in the text form, as a failing
//! random-graph case prints it, with its `// kiln-case seed=... fill=...` header) runs on
//! every registered backend at every opt level against the reference interpreter (a
//! failure at opt level > 0 names the pass that moves the output). To keep a failure
//! found by `tests/graphs.rs` as a regression test, save its printed case there.

use std::path::Path;

use kiln_testsuite::cases::replay;
use kiln_testsuite::graphs::{Outcome, check_built_diagnosed, reference};
use kiln_testsuite::suite::{OPT_LEVELS, exec_backends};

#[test]
fn saved_cases_pass_on_every_backend() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cases");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "relay"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no cases in {}", dir.display());
    let mut failures = vec![];
    let (mut passed, mut unsupported) = (0, 0);
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let built = replay(&text).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        let want = reference(&built.module, &built.inputs)
            .unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        for backend in &exec_backends() {
            for opt in OPT_LEVELS {
                match check_built_diagnosed(&built, &want, backend, opt) {
                    Ok(Outcome::Pass) => passed += 1,
                    Ok(Outcome::Unsupported(op, d)) => {
                        eprintln!(
                            "{}: {}: `{op}` on {d} unsupported",
                            f.display(),
                            backend.name
                        );
                        unsupported += 1;
                    }
                    Err(e) => failures.push(format!("{}: {e}", f.display())),
                }
            }
        }
    }
    eprintln!("{passed} passed, {unsupported} unsupported (skipped)");
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn bad_case_files_are_errors() {
    let err = replay("def @main(%x: Tensor[(2), float32]) { nn.relu(%x) ").unwrap_err();
    assert!(err.contains("parse"), "{err}");
    let err =
        replay("// kiln-case fill=purple\ndef @main(%x: Tensor[(2), float32]) { nn.relu(%x) }")
            .unwrap_err();
    assert!(err.contains("purple"), "{err}");
}

/// A failure narrows to its wrong output: `only_output` keeps that output, the ops it
/// reads and its inputs, with the values they had.
#[test]
fn only_output_keeps_what_the_output_reads() {
    let built = replay(
        "// kiln-case seed=5 fill=uniform,large\n\
         def @main(%x0: Tensor[(2), float32], %x1: Tensor[(2), float32]) {\n\
           (exp(%x0), nn.relu(negative(%x1)))\n\
         }",
    )
    .unwrap();
    assert_eq!(built.ops.len(), 3);
    let small = built.only_output(1).unwrap();
    let names: Vec<&str> = small.ops.iter().map(|(o, _)| o.as_str()).collect();
    assert_eq!(names, ["negative", "nn.relu"]);
    assert_eq!(small.inputs.keys().collect::<Vec<_>>(), ["x1"]);
    assert_eq!(small.inputs["x1"], built.inputs["x1"]);
    // Saved and replayed, the narrowed case reads the same values.
    let again = replay(&kiln_testsuite::graphs::case_text(&small)).unwrap();
    assert_eq!(again.inputs["x1"], built.inputs["x1"]);
    assert!(built.only_output(2).is_none());
}
