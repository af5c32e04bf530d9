//! `cargo run -p kiln-testsuite --bin conformance [--cases N] [--seed S] [--out PATH]`:
//! runs the random-program suite with a fixed case budget on every backend and opt level
//! and writes the conformance matrix (default: `CONFORMANCE.md` at the repository root).
//! Exits non-zero when the generator itself fails (bad arguments, an unreadable
//! manifest, a case the reference rejects), not when a backend fails a case: failures
//! are what the matrix reports.

use std::path::PathBuf;
use std::process::ExitCode;

use kiln_testsuite::matrix;
use kiln_testsuite::suite::DEFAULT_SEED;

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
    let mx = matrix::run(cases, seed, MAX_NODES)?;
    std::fs::write(&out, matrix::render(&mx, &onnx))
        .map_err(|e| format!("{}: {e}", out.display()))?;
    Ok(out)
}
