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

use kiln_ir::text::{PrintOptions, parse_module, print_module};
use kiln_rewrite::eqsat::check::{differ, random_inputs};
use kiln_rewrite::eqsat::{EqSat, rules};

const MARKER: &str = "// ---- expected ----";

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

fn check_file(path: &Path, update: bool) -> Result<(), String> {
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    let header = text
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("// test "))
        .ok_or("the first line must be `// test eqsat ...`")?
        .trim()
        .to_string();
    let at = text.find(&format!("\n{MARKER}\n"));
    let input = match at {
        Some(i) => &text[..i + 1],
        None => &text[..],
    };
    let expected: String = match at {
        Some(i) => text[i + MARKER.len() + 2..]
            .lines()
            .map(|l| {
                let body = l.strip_prefix("// ").or_else(|| l.strip_prefix("//"));
                format!("{}\n", body.unwrap_or(l))
            })
            .collect(),
        None => String::new(),
    };
    let actual = run(&header, input)?;
    if actual == expected {
        return Ok(());
    }
    if update {
        let mut out = format!("{input}{MARKER}\n");
        for line in actual.lines() {
            out.push_str(if line.is_empty() { "//" } else { "// " });
            out.push_str(line);
            out.push('\n');
        }
        return std::fs::write(path, out).map_err(|e| e.to_string());
    }
    Err(format!(
        "output differs (UPDATE_EXPECT=1 to bless):\n--- expected\n{expected}--- actual\n{actual}"
    ))
}

#[test]
fn eqsat_filetests() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/eqsat_files");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "relay"))
        .collect();
    files.sort();
    assert!(
        !files.is_empty(),
        "expected the eqsat file tests in {}",
        dir.display()
    );
    let update = std::env::var_os("UPDATE_EXPECT").is_some();
    let failures: Vec<String> = files
        .iter()
        .filter_map(|p| {
            check_file(p, update)
                .err()
                .map(|e| format!("{}: {e}", p.display()))
        })
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
