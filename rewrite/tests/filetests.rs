//! File tests of the classical passes (STYLE habit 2). Every `tests/filetests/**/*.relay`
//! file is one test:
//!
//! ```text
//! // test PASS [PASS ...]        (`classical` for `classical_passes()`, `standard` for
//! //                              the whole build pipeline; names from `standard_passes()`)
//! // opt-level N                 (optional, default 3)
//! // bind NAME, NAME, ...        (optional: bind these params as constants first)
//! // input NAME = v0, v1, ...    (optional: values for a parameter)
//! <input IR>
//! // ---- expected ----
//! // <the module after the passes, then one `pass NAME: key=value ...` line per pass>
//! ```
//!
//! The passes run in order under a context at the opt level with the verifier on. Besides the
//! printed text, every test checks values: `@main` before the passes (all params as
//! inputs) and after (the unbound ones) must agree in the reference interpreter within
//! the tolerance of `common`. Parameters without an `input` line get seeded values
//! (`common::fill_inputs`: positive for names containing `var`). The printed module has
//! no types and no metadata (constants show as `meta[relay.Constant][K]`; their values
//! are checked through the evaluation).
//!
//! Run with `UPDATE_EXPECT=1` to rewrite the expected sections in place after an
//! intended change (then review the diff).

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use kiln_ir::interp::Inputs;
use kiln_ir::text::{PrintOptions, parse_module, print_module};
use kiln_ir::{Module, NDArray};
use kiln_rewrite::pass::run_passes;
use kiln_rewrite::passes::{bind_params, classical_passes};
use kiln_rewrite::pipeline::standard_passes;
use kiln_rewrite::{Pass, PassContext};

const MARKER: &str = "// ---- expected ----";

/// One test file, split into its parts.
#[derive(Debug)]
struct Case {
    passes: Vec<String>,
    opt_level: u8,
    input: String,
    expected: String,
}

fn split_file(text: &str) -> Result<Case, String> {
    let first = text.lines().next().unwrap_or_default();
    let passes = first
        .strip_prefix("// test ")
        .ok_or_else(|| format!("the first line must be `// test PASS ...`, found `{first}`"))?
        .split_whitespace()
        .map(str::to_string)
        .collect();
    let marker_at = text
        .find(&format!("\n{MARKER}\n"))
        .ok_or_else(|| format!("no `{MARKER}` line"))?;
    let input = text[..marker_at + 1].to_string();
    let mut opt_level = 3;
    for line in input.lines() {
        if let Some(n) = line.strip_prefix("// opt-level ") {
            opt_level = n
                .trim()
                .parse()
                .map_err(|e| format!("bad opt-level line `{line}`: {e}"))?;
        }
    }
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
        passes,
        opt_level,
        input,
        expected,
    })
}

/// The file text with `actual` as its expected section.
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

/// The passes named on the test line.
fn passes_named(names: &[String]) -> Result<Vec<Box<dyn Pass>>, String> {
    if names == ["classical"] {
        return Ok(classical_passes());
    }
    if names == ["standard"] {
        return Ok(standard_passes());
    }
    names
        .iter()
        .map(|n| {
            standard_passes()
                .into_iter()
                .find(|p| p.info().name == n)
                .ok_or_else(|| format!("unknown pass `{n}`"))
        })
        .collect()
}

/// The `// input` and `// bind` header lines.
fn header(m: &Module, input: &str) -> Result<(Inputs, Vec<String>), String> {
    let types: BTreeMap<String, kiln_ir::TensorType> = m
        .main_tensor_params()
        .map_err(|e| e.to_string())?
        .into_iter()
        .collect();
    let mut inputs = Inputs::new();
    let mut bind = Vec::new();
    for line in input.lines() {
        if let Some(names) = line.strip_prefix("// bind ") {
            bind.extend(names.split(',').map(|n| n.trim().to_string()));
        }
        let Some(spec) = line.strip_prefix("// input ") else {
            continue;
        };
        let (name, values) = spec
            .split_once('=')
            .ok_or_else(|| format!("bad input line `{line}`"))?;
        let name = name.trim();
        let t = types
            .get(name)
            .ok_or_else(|| format!("input `{name}` is not a parameter of @main"))?;
        let values: Vec<f64> = values
            .split(',')
            .map(|v| v.trim().parse::<f64>().map_err(|e| format!("`{v}`: {e}")))
            .collect::<Result<_, _>>()?;
        let value = NDArray::from_f64(t.shape.clone(), t.dtype, values)
            .map_err(|e| format!("input `{name}`: {e}"))?;
        inputs.insert(name.to_string(), value);
    }
    Ok((inputs, bind))
}

/// Runs the case and returns its output, or why the test failed.
fn run(case: &Case) -> Result<String, String> {
    let m = parse_module(&case.input).map_err(|e| format!("does not parse: {e}"))?;
    let (given, bind) = header(&m, &case.input)?;
    let inputs = common::fill_inputs(&m, &given, 7);
    let bound: BTreeMap<String, NDArray> = bind
        .iter()
        .map(|n| {
            inputs
                .get(n)
                .map(|v| (n.clone(), v.clone()))
                .ok_or_else(|| format!("bind `{n}`: not a parameter of @main"))
        })
        .collect::<Result<_, _>>()?;
    let start = bind_params(&m, &bound).map_err(|e| format!("bind_params: {e}"))?;
    let passes = passes_named(&case.passes)?;
    let refs: Vec<&dyn Pass> = passes.iter().map(|p| p.as_ref()).collect();
    let mut ctx = PassContext::with_opt_level(case.opt_level).map_err(|e| e.to_string())?;
    ctx.verify = true;
    let (after, report) = run_passes(&start, &refs, &ctx).map_err(|e| e.to_string())?;
    common::check_same_values(&m, &after, &inputs)?;
    let mut out = print_module(
        &after,
        &PrintOptions {
            types: false,
            show_meta_data: false,
        },
    );
    for r in &report.records {
        let details: Vec<String> = r.details.iter().map(|(k, v)| format!("{k}={v}")).collect();
        out.push_str(&format!("pass {}: {}\n", r.name, details.join(" ")));
    }
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

/// A short line diff of `expected` against `actual`.
fn diff(expected: &str, actual: &str) -> String {
    let (e, a): (Vec<&str>, Vec<&str>) = (expected.lines().collect(), actual.lines().collect());
    let mut out = String::new();
    for i in 0..e.len().max(a.len()) {
        let (x, y) = (e.get(i), a.get(i));
        if x != y {
            out.push_str(&format!(
                "  line {}:\n    expected: {}\n    actual:   {}\n",
                i + 1,
                x.unwrap_or(&"<none>"),
                y.unwrap_or(&"<none>")
            ));
        }
    }
    out
}

#[test]
fn filetests() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/filetests");
    let mut files = Vec::new();
    collect(&root, &mut files);
    files.sort();
    assert!(
        files.len() >= 6,
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
                "{name}: output differs (UPDATE_EXPECT=1 rewrites it):\n{}",
                diff(&case.expected, &actual)
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
        "// test FoldConstant\ndef @main() { 1f }\n// ---- expected ----\n// a\n//\n// b\n",
    )
    .unwrap();
    assert_eq!(case.passes, ["FoldConstant"]);
    assert_eq!(case.expected, "a\n\nb\n");
    assert_eq!(
        with_expected(&case.input, &case.expected),
        "// test FoldConstant\ndef @main() { 1f }\n// ---- expected ----\n// a\n//\n// b\n"
    );
    assert!(
        split_file("def @main() { 1f }\n")
            .unwrap_err()
            .contains("// test")
    );
    assert!(passes_named(&["Frobnicate".into()]).is_err());
}
