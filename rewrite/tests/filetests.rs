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
use std::path::Path;

use kiln_ir::filetest;
use kiln_ir::interp::Inputs;
use kiln_ir::text::{PrintOptions, parse_module, print_module};
use kiln_ir::{Module, NDArray};
use kiln_rewrite::pass::run_passes;
use kiln_rewrite::passes::{bind_params, classical_passes};
use kiln_rewrite::pipeline::standard_passes;
use kiln_rewrite::{Pass, PassContext};

/// The parts of one test file: the passes named on its `// test` line, the opt level
/// of its `// opt-level` line (default 3), its input text.
struct Case<'a> {
    passes: Vec<String>,
    opt_level: u8,
    input: &'a str,
}

fn parse_case(case: &filetest::Case) -> Result<Case<'_>, String> {
    let mut opt_level = 3;
    for n in case.headers("opt-level") {
        opt_level = n
            .parse()
            .map_err(|e| format!("bad opt-level line `{n}`: {e}"))?;
    }
    Ok(Case {
        passes: case
            .command
            .split_whitespace()
            .map(str::to_string)
            .collect(),
        opt_level,
        input: &case.input,
    })
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
    let m = parse_module(case.input).map_err(|e| format!("does not parse: {e}"))?;
    let (given, bind) = header(&m, case.input)?;
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

#[test]
fn filetests() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/filetests");
    filetest::run_dir(&root, "relay", 6, |case| run(&parse_case(case)?));
}
