//! `cargo run -p kiln-testsuite --bin conformance [--cases N] [--seed S] [--out PATH]`:
//! runs the random-program suite with a fixed case budget on every backend and opt level
//! and writes the conformance matrix (default: `CONFORMANCE.md` at the repository root).
//! Exits non-zero when the generator itself fails (bad arguments, an unreadable
//! manifest, a case the reference rejects), not when a backend fails a case: failures
//! are what the matrix reports. On a terminal, stderr shows the cases done so far
//! (nothing when piped).

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use kiln_testsuite::matrix;
use kiln_testsuite::suite::{DEFAULT_SEED, exec_backends};

const DEFAULT_CASES: usize = 256;
const MAX_NODES: usize = 8;

fn main() -> ExitCode {
    match run() {
        Ok(path) => {
            eprintln!("wrote {}", path.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("conformance: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<PathBuf, String> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut cases = DEFAULT_CASES;
    let mut seed = DEFAULT_SEED;
    let mut out = root.join("../CONFORMANCE.md");
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = |what: &str| args.next().ok_or(format!("{a} needs {what}"));
        match a.as_str() {
            "--cases" => {
                cases = value("a count")?
                    .parse()
                    .map_err(|e| format!("--cases: {e}"))?
            }
            "--seed" => {
                seed = value("a number")?
                    .parse()
                    .map_err(|e| format!("--seed: {e}"))?
            }
            "--out" => out = PathBuf::from(value("a path")?),
            other => {
                return Err(format!(
                    "unknown argument `{other}` (--cases, --seed, --out)"
                ));
            }
        }
    }
    let manifest_path = root.join("onnx_node_manifest.txt");
    let manifest = std::fs::read_to_string(&manifest_path)
        .map_err(|e| format!("{}: {e}", manifest_path.display()))?;
    let onnx = matrix::onnx_totals(&manifest)?;
    let backends = exec_backends();
    let names: Vec<String> = backends.iter().map(|b| b.name.clone()).collect();
    let mut progress = progress_line(names.join(", "));
    let mx = matrix::run_observed(backends, cases, seed, MAX_NODES, &mut progress)?;
    std::fs::write(&out, matrix::render(&mx, &onnx))
        .map_err(|e| format!("{}: {e}", out.display()))?;
    Ok(out)
}

/// A progress display for [`matrix::run_observed`]: on a terminal, one line on stderr
/// redrawn in place (`case 17 of 256 on ref, interp, cpu (12 s)`), ended by a newline at
/// the last case; nothing when stderr is not a terminal.
fn progress_line(backends: String) -> impl FnMut(usize, usize) {
    let on_terminal = std::io::stderr().is_terminal();
    let start = Instant::now();
    move |done, total| {
        if !on_terminal {
            return;
        }
        let mut err = std::io::stderr().lock();
        let _ = write!(
            err,
            "\rconformance: case {done} of {total} on {backends} ({} s)",
            start.elapsed().as_secs()
        );
        if done == total {
            let _ = writeln!(err);
        }
        let _ = err.flush();
    }
}
