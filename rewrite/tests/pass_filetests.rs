//! File tests of the graph passes (STYLE habit 2). Every `tests/filetests/**/*.relay`
//! file is one test:
//!
//! ```text
//! // test pass <PassName>
//! // opt-level <N>            (optional, default 3)
//! <input IR>
//! // ---- expected ----
//! // <the module after the pass, then `// details: k=v ...`, each line behind `// `>
//! ```
//!
//! The pass is looked up by name in [`kiln_rewrite::pipeline::standard_passes`] and run
//! alone under a context at the opt level (verifier on). Besides comparing the printed
//! result, the runner checks that the result computes what the input computes in the
//! reference interpreter (seeded random inputs, tolerance 1e-5). (That every group of the
//! `fuse/` cases lowers to a kernel is checked in `executor/tests/fusion.rs`, where the
//! loop-IR layer is a dependency.)
//!
//! Run with `UPDATE_EXPECT=1` to rewrite the expected sections in place after an
//! intended change (then review the diff).

use std::path::{Path, PathBuf};

use kiln_ir::interp::{Inputs, evaluate};
use kiln_ir::text::{PrintOptions, parse_module, print_module};
use kiln_ir::{Module, NDArray};
use kiln_rewrite::pipeline::standard_passes;
use kiln_rewrite::{PassContext, PassOutcome};

const MARKER: &str = "// ---- expected ----";

#[derive(Debug)]
struct Case {
    pass: String,
    opt_level: u8,
    input: String,
    expected: String,
}

fn split_file(text: &str) -> Result<Case, String> {
    let first = text.lines().next().unwrap_or_default();
    let pass = first
        .strip_prefix("// test pass ")
        .ok_or_else(|| format!("the first line must be `// test pass <Name>`, found `{first}`"))?
        .trim()
        .to_string();
    let mut opt_level = 3;
    for line in text.lines() {
        if let Some(n) = line.strip_prefix("// opt-level ") {
            opt_level = n
                .trim()
                .parse()
                .map_err(|e| format!("bad opt-level line `{line}`: {e}"))?;
        }
    }
    let marker_at = text
        .find(&format!("\n{MARKER}\n"))
        .ok_or_else(|| format!("no `{MARKER}` line"))?;
    let input = text[..marker_at + 1].to_string();
    let mut expected = String::new();
    for line in text[marker_at + MARKER.len() + 2..].lines() {
        let body = line
            .strip_prefix("// ")
            .or_else(|| line.strip_prefix("//"))
            .ok_or_else(|| format!("expected lines must start with `//`, found `{line}`"))?;
        expected.push_str(body);
        expected.push('\n');
    }
    Ok(Case {
        pass,
        opt_level,
        input,
        expected,
    })
}

fn with_expected(input: &str, actual: &str) -> String {
    let mut out = format!("{input}{MARKER}\n");
    for line in actual.lines() {
        if line.is_empty() {
            out.push_str("//\n");
        } else {
            out.push_str("// ");
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// Seeded random values for every parameter of `@main`.
fn random_inputs(m: &Module) -> Result<Inputs, String> {
    let params = m.main_tensor_params().map_err(|e| e.to_string())?;
    Ok(params
        .into_iter()
        .enumerate()
        .map(|(i, (name, t))| (name, NDArray::random(t.shape, t.dtype, 11 + i as u64)))
        .collect())
}

fn run(case: &Case) -> Result<String, String> {
    let m = parse_module(&case.input).map_err(|e| format!("does not parse: {e}"))?;
    kiln_ir::verify::verify(&m).map_err(|e| e.to_string())?;
    let passes = standard_passes();
    let pass = passes
        .iter()
        .find(|p| p.info().name == case.pass)
        .ok_or_else(|| format!("no pass named `{}` in the standard pipeline", case.pass))?;
    let ctx = PassContext {
        verify: true,
        ..PassContext::from(case.opt_level)
    };
    let PassOutcome { module, details } = pass.run(&m, &ctx).map_err(|e| e.to_string())?;
    kiln_ir::verify::verify(&module).map_err(|e| format!("the result is invalid: {e}"))?;
    let inputs = random_inputs(&m)?;
    let want = evaluate(&m, &inputs)
        .map_err(|e| format!("the input does not evaluate: {e}"))?
        .flatten();
    let got = evaluate(&module, &inputs)
        .map_err(|e| format!("the result does not evaluate: {e}"))?
        .flatten();
    if got.len() != want.len() {
        return Err(format!("{} outputs, expected {}", got.len(), want.len()));
    }
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        g.allclose(w, 1e-5, 1e-5)
            .map_err(|e| format!("output {i} changed: {e}"))?;
    }
    let mut out = print_module(&module, &PrintOptions::default());
    let details: Vec<String> = details.iter().map(|(k, v)| format!("{k}={v}")).collect();
    out.push_str(&format!("details: {}\n", details.join(" ")));
    Ok(out)
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            collect(&path, out);
        } else if path.extension().is_some_and(|e| e == "relay") {
            out.push(path);
        }
    }
}

#[test]
fn pass_filetests() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/filetests");
    let mut files = Vec::new();
    collect(&root, &mut files);
    files.sort();
    assert!(
        files.len() >= 5,
        "expected the file tests under {}",
        root.display()
    );
    let update = std::env::var("UPDATE_EXPECT").is_ok_and(|v| v == "1");
    let mut failures = Vec::new();
    for path in &files {
        let name = path
            .strip_prefix(&root)
            .unwrap_or(path)
            .display()
            .to_string();
        let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{name}: {e}"));
        let case = match split_file(&text) {
            Ok(c) => c,
            Err(e) => {
                failures.push(format!("{name}: {e}"));
                continue;
            }
        };
        match run(&case) {
            Err(e) => failures.push(format!("{name}: {e}")),
            Ok(actual) if actual == case.expected => {}
            Ok(actual) if update => {
                std::fs::write(path, with_expected(&case.input, &actual))
                    .unwrap_or_else(|e| panic!("{name}: {e}"));
                eprintln!("updated {name}");
            }
            Ok(actual) => failures.push(format!(
                "{name}: output differs (UPDATE_EXPECT=1 rewrites it):\n--- expected\n{}--- actual\n{actual}",
                case.expected
            )),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} file tests failed:\n{}",
        failures.len(),
        files.len(),
        failures.join("\n")
    );
}

#[test]
fn file_layout_is_checked() {
    let case = split_file(
        "// test pass FuseOps\n// opt-level 1\ndef @f() { 1 }\n// ---- expected ----\n// a\n//\n// b\n",
    )
    .unwrap();
    assert_eq!((case.pass.as_str(), case.opt_level), ("FuseOps", 1));
    assert_eq!(case.expected, "a\n\nb\n");
    assert_eq!(
        with_expected(&case.input, &case.expected),
        "// test pass FuseOps\n// opt-level 1\ndef @f() { 1 }\n// ---- expected ----\n// a\n//\n// b\n"
    );
    assert!(
        split_file("def @f() { 1 }\n")
            .unwrap_err()
            .contains("// test pass")
    );
    assert!(
        split_file("// test pass X\n// opt-level two\ndef @f() { 1 }\n// ---- expected ----\n")
            .unwrap_err()
            .contains("opt-level")
    );
}
