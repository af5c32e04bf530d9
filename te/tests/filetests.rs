//! File tests in the loop-IR text form: each `tests/filetests/*.tir` file starts with
//! `// test <command>` (`verify`, `run` or `roundtrip`), then one `primfn`, then the
//! expected result as comment lines after a `// expected:` line. The runner computes the
//! result and compares; `UPDATE_EXPECT=1 cargo test -p kiln-te --test filetests`
//! rewrites the expectations in place when a change is intended.
//!
//! - `verify`: `ok`, or every verifier error, one per line;
//! - `run`: the kernel is verified (errors are the result), then runs on seeded random inputs (parameter k uses seed k); each
//!   output prints as `%name = [v0, v1, ...]`, or the run's error;
//! - `roundtrip`: the printed form of the parsed function, which must print the same
//!   again after another parse.

use std::fs;
use std::path::Path;

use kiln_ir::NDArray;
use kiln_te::tir::{self, PrimFunc, printer};

const EXPECTED: &str = "// expected:";

fn run_command(cmd: &str, f: &PrimFunc) -> String {
    match cmd {
        "verify" => match tir::verify::check(f) {
            errs if errs.is_empty() => "ok".into(),
            errs => tir::VerifyError::join(&errs),
        },
        "roundtrip" => {
            let text = printer::print(f);
            match tir::parse(&text) {
                Ok(g) if printer::print(&g) == text => text.trim_end().to_string(),
                Ok(g) => format!("MISMATCH after reparse:\n{}", printer::print(&g)),
                Err(e) => format!("reparse failed: {e}"),
            }
        }
        "run" => {
            let errs = tir::verify::check(f);
            if !errs.is_empty() {
                return tir::VerifyError::join(&errs);
            }
            let inputs: Vec<NDArray> = f
                .inputs()
                .iter()
                .enumerate()
                .map(|(k, &b)| {
                    let b = f.buffer(b).expect("verified");
                    NDArray::random(b.shape.clone(), b.dtype, k as u64)
                })
                .collect();
            match tir::run_with_inputs(f, &inputs) {
                Ok(outs) => {
                    let names = printer::Names::new(f);
                    f.outputs()
                        .iter()
                        .zip(outs)
                        .map(|(&id, o)| {
                            let vals: Vec<String> =
                                o.to_f64_vec().iter().map(|v| format!("{v:.4}")).collect();
                            format!("{} = [{}]", names.buffer(id), vals.join(", "))
                        })
                        .collect::<Vec<_>>()
                        .join("\n")
                }
                Err(e) => e.to_string(),
            }
        }
        other => format!("unknown test command `{other}`"),
    }
}

fn check_file(path: &Path, update: bool) -> Option<String> {
    let text = fs::read_to_string(path).expect("readable test file");
    let first = text.lines().next().unwrap_or("");
    let Some(cmd) = first.strip_prefix("// test ") else {
        return Some(format!(
            "{}: first line must be `// test <command>`",
            path.display()
        ));
    };
    let (body, expected) = match text.find(EXPECTED) {
        Some(at) => (&text[..at], &text[at + EXPECTED.len()..]),
        None => (text.as_str(), ""),
    };
    let expected: Vec<&str> = expected
        .lines()
        .map(|l| l.strip_prefix("// ").or(l.strip_prefix("//")).unwrap_or(l))
        .collect();
    let expected = expected.join("\n").trim().to_string();
    let actual = match tir::parse(body) {
        Ok(f) => run_command(cmd.trim(), &f),
        Err(e) => e.to_string(),
    };
    if actual.trim() == expected {
        return None;
    }
    if update {
        let mut out = body.trim_end().to_string();
        out.push_str("\n\n");
        out.push_str(EXPECTED);
        out.push('\n');
        for l in actual.trim().lines() {
            out.push_str(if l.is_empty() { "//" } else { "// " });
            out.push_str(l);
            out.push('\n');
        }
        fs::write(path, out).expect("writable test file");
        return None;
    }
    Some(format!(
        "{}: expected\n{expected}\n--- but got\n{}\n(run with UPDATE_EXPECT=1 to accept)",
        path.display(),
        actual.trim()
    ))
}

#[test]
fn filetests() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/filetests");
    let update = std::env::var("UPDATE_EXPECT").is_ok_and(|v| v == "1");
    let mut paths: Vec<_> = fs::read_dir(&dir)
        .expect("filetests dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "tir"))
        .collect();
    paths.sort();
    assert!(!paths.is_empty());
    let failures: Vec<String> = paths.iter().filter_map(|p| check_file(p, update)).collect();
    assert!(
        failures.is_empty(),
        "{} of {} file tests failed:\n\n{}",
        failures.len(),
        paths.len(),
        failures.join("\n\n")
    );
}
