//! File tests of equality saturation: every `tests/eqsat_files/*.relay` file is one
//! test, `before → after` in the text IR:
//!
//! ```text
//! // test eqsat FAMILY...
//! <input IR>
//! // ---- expected ----
//! // <the module after EqSat with only those rule families (all when none is named)>
//! ```
//!
//! Each case also runs both modules in the reference interpreter on seeded random inputs
//! (positive for parameters named `*var`) and requires the outputs to agree within
//! 1e-4, and requires the cost not to go up. `UPDATE_EXPECT=1` rewrites the expected
//! sections in place (then review the diff).

use std::path::Path;

use kiln_ir::filetest;
use kiln_ir::text::{PrintOptions, parse_module, print_module};
use kiln_rewrite::eqsat::check::{differ, random_inputs};
use kiln_rewrite::eqsat::{EqSat, rules};

fn run(header: &str, input: &str) -> Result<String, String> {
    let families: Vec<&str> = header
        .strip_prefix("eqsat")
        .ok_or_else(|| format!("unknown command `{header}` (expected `eqsat FAMILY...`)"))?
        .split_whitespace()
        .collect();
    let m = parse_module(input).map_err(|e| format!("does not parse: {e}"))?;
    let mut pass = EqSat::new();
    if !families.is_empty() {
        pass.rules = rules::all()
            .into_iter()
            .filter(|r| families.contains(&r.family()))
            .collect();
        if pass.rules.is_empty() {
            return Err(format!("no rules in families {families:?}"));
        }
    }
    let (out, stats) = pass
        .optimize_function(&m, m.main_id().map_err(|e| e.to_string())?)
        .map_err(|e| e.to_string())?;
    kiln_ir::verify::verify(&out).map_err(|e| e.to_string())?;
    if stats.cost_after > stats.cost_before {
        return Err(format!("cost went up: {stats:?}"));
    }
    let inputs = random_inputs(&m, 1).map_err(|e| e.to_string())?;
    let want = kiln_ir::interp::evaluate(&m, &inputs)
        .map_err(|e| e.to_string())?
        .flatten();
    let got = kiln_ir::interp::evaluate(&out, &inputs)
        .map_err(|e| e.to_string())?
        .flatten();
    if let Some(d) = differ(&got, &want, 1e-4, 1e-4) {
        return Err(format!("outputs differ after EqSat: {d}"));
    }
    let text = print_module(&out, &PrintOptions::default());
    // Reparse: the printed result is valid IR.
    parse_module(&text).map_err(|e| format!("the result does not parse back: {e}\n{text}"))?;
    Ok(format!("// stop: {}\n{text}", stats.stop))
}

#[test]
fn eqsat_filetests() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/eqsat_files");
    filetest::run_dir(&dir, "relay", 6, |case| run(&case.command, &case.input));
}
