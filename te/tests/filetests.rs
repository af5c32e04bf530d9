//! File tests in the loop-IR text form, in the layout of [`kiln_ir::filetest`]: each
//! `tests/filetests/*.tir` file starts with `// test <command>` (`verify`, `run` or
//! `roundtrip`), then one `primfn`, then the expected result as comment lines after the
//! `// ---- expected ----` line. `UPDATE_EXPECT=1 cargo test -p kiln-te --test filetests`
//! rewrites the expectations in place when a change is intended.
//!
//! - `verify`: `ok`, or every verifier error, one per line;
//! - `run`: the kernel is verified (errors are the result), then runs on seeded random inputs (parameter k uses seed k); each
//!   output prints as `%name = [v0, v1, ...]`, or the run's error;
//! - `roundtrip`: the printed form of the parsed function, which must print the same
//!   again after another parse.

use std::path::Path;

use kiln_ir::{NDArray, filetest};
use kiln_te::tir::{self, PrimFunc, printer};

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

/// The parsed kernel's result for the case's command, one line per output line.
fn run(case: &filetest::Case) -> Result<String, String> {
    let actual = match tir::parse(&case.input) {
        Ok(f) => run_command(&case.command, &f),
        Err(e) => e.to_string(),
    };
    let mut out = String::new();
    for line in actual.trim().lines() {
        out.push_str(line);
        out.push('\n');
    }
    Ok(out)
}

#[test]
fn filetests() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/filetests");
    filetest::run_dir(&dir, "tir", 8, run);
}
