//! The conformance matrix (`CONFORMANCE.md`, written by `cargo run -p kiln-testsuite
//! --bin conformance`): a fixed budget of random programs ([`crate::graphs`], fixed seed)
//! run on every registered backend at every opt level, tallied per op × backend × dtype
//! as pass / fail / unsupported (a case counts for every op it calls), every built-in op
//! listed (those the generator does not produce say so), plus the ONNX node-test totals
//! read from `onnx_node_manifest.txt`. Deterministic for a fixed seed and budget: no
//! timings, so CI can diff it against the committed file.

use std::collections::BTreeMap;
use std::fmt::Write;

use kiln_ir::{DType, Op};
use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::{Config, RngSeed, TestRunner};

use crate::graphs::{Outcome, case_text, check_built, graph_spec, reference};
use crate::suite::{ExecBackend, OPT_LEVELS, exec_backends};

/// Pass / fail / unsupported counts of one cell.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Cell {
    pub pass: usize,
    pub fail: usize,
    pub unsupported: usize,
}

/// The tallies of one run.
#[derive(Clone, Debug, Default)]
pub struct Matrix {
    /// `(op, dtype) -> backend -> cell`.
    pub cells: BTreeMap<(String, DType), BTreeMap<String, Cell>>,
    /// The backends run, in column order.
    pub backends: Vec<ExecBackend>,
    /// Cases generated, and how many built at least one op.
    pub cases: usize,
    pub built: usize,
    /// Per backend and opt level: the first failing case (message with its text IR).
    pub failures: Vec<String>,
    pub seed: u64,
    pub max_nodes: usize,
}

/// Runs `cases` random programs of up to `max_nodes` recipes from `seed` on every
/// backend of the `kiln` registry at every opt level.
pub fn run(cases: usize, seed: u64, max_nodes: usize) -> Result<Matrix, String> {
    run_on(exec_backends(), cases, seed, max_nodes)
}

/// [`run`] on the given backends.
pub fn run_on(
    backends: Vec<ExecBackend>,
    cases: usize,
    seed: u64,
    max_nodes: usize,
) -> Result<Matrix, String> {
    run_observed(backends, cases, seed, max_nodes, &mut |_, _| {})
}

/// [`run_on`], calling `observe(done, cases)` after each generated case (for a progress
/// display; the matrix does not depend on it).
pub fn run_observed(
    backends: Vec<ExecBackend>,
    cases: usize,
    seed: u64,
    max_nodes: usize,
    observe: &mut dyn FnMut(usize, usize),
) -> Result<Matrix, String> {
    let mut runner = TestRunner::new(Config {
        rng_seed: RngSeed::Fixed(seed),
        failure_persistence: None,
        ..Config::default()
    });
    let strategy = graph_spec(max_nodes);
    let mut mx = Matrix {
        cases,
        seed,
        max_nodes,
        ..Matrix::default()
    };
    mx.backends = backends;
    let mut first_failure: BTreeMap<(usize, u8), String> = BTreeMap::new();
    for done in 0..cases {
        observe(done, cases);
        let spec = strategy
            .new_tree(&mut runner)
            .map_err(|e| format!("generator: {e}"))?
            .current();
        let Some(built) = spec.build() else { continue };
        mx.built += 1;
        let want = reference(&built.module, &built.inputs)
            .map_err(|e| format!("{e}\nin the generated case:\n{}", case_text(&built)))?;
        for (b, backend) in mx.backends.iter().enumerate() {
            for opt in OPT_LEVELS {
                let outcome = check_built(&built, &want, backend, opt);
                for (op, d) in &built.ops {
                    let cell = mx
                        .cells
                        .entry((op.clone(), *d))
                        .or_default()
                        .entry(backend.name.clone())
                        .or_default();
                    match &outcome {
                        Ok(Outcome::Pass) => cell.pass += 1,
                        Ok(Outcome::Unsupported(..)) => cell.unsupported += 1,
                        Err(_) => cell.fail += 1,
                    }
                }
                if let Err(e) = outcome {
                    first_failure.entry((b, opt)).or_insert(e);
                }
            }
        }
    }
    observe(cases, cases);
    mx.failures = first_failure.into_values().collect();
    Ok(mx)
}

/// ONNX node-test totals from the manifest: per column (`ref`, then each compiled
/// target its header names), the count of each status (`pass`, `unsupported`,
/// `known-failure`, `-` = not run). A line without a status for every column is an error.
pub fn onnx_totals(manifest: &str) -> Result<BTreeMap<(String, String), usize>, String> {
    let mut columns = vec!["ref".to_string()];
    columns.extend(crate::onnx_node::Manifest::parse(manifest).targets);
    let mut totals = BTreeMap::new();
    for (n, line) in manifest.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (_, rest) = line
            .split_once(' ')
            .ok_or_else(|| format!("manifest line {}: no status", n + 1))?;
        let statuses: Vec<&str> = rest.split(" | ").collect();
        if statuses.len() != columns.len() {
            return Err(format!(
                "manifest line {}: {} status(es) separated by ` | `, the header names {} column(s)",
                n + 1,
                statuses.len(),
                columns.len()
            ));
        }
        for (col, status) in columns.iter().zip(statuses) {
            let word = status
                .split('(')
                .next()
                .unwrap_or(status)
                .trim()
                .to_string();
            *totals.entry((col.clone(), word)).or_insert(0) += 1;
        }
    }
    Ok(totals)
}

/// The markdown of `CONFORMANCE.md`.
pub fn render(mx: &Matrix, onnx: &BTreeMap<(String, String), usize>) -> String {
    let mut s = String::new();
    let backends: Vec<&str> = mx.backends.iter().map(|b| b.name.as_str()).collect();
    let _ = writeln!(
        s,
        "# Conformance\n\nGenerated by `cargo run -p kiln-testsuite --bin conformance` \
         (CI regenerates it and fails if it differs); do not edit.\n\n\
         ## Random programs\n\n{} random programs (seed {}, up to {} nodes each; {} built \
         at least one op) from `testsuite/src/graphs.rs`, each run on every backend at opt \
         levels {:?} and compared with the reference interpreter. A cell is \
         pass / fail / unsupported over (case, opt level) pairs; a case counts for every \
         op it calls, with the dtype of the op's first argument.\n",
        mx.cases, mx.seed, mx.max_nodes, mx.built, OPT_LEVELS
    );
    for b in &mx.backends {
        let declared: Vec<String> = b
            .unsupported
            .iter()
            .map(|u| format!("`{}` on {} ({})", u.op, u.dtype, u.reason))
            .collect();
        let declared = if declared.is_empty() {
            "nothing".to_string()
        } else {
            declared.join(", ")
        };
        let _ = writeln!(
            s,
            "- `{}` (target `{}`) declares unsupported: {declared}.",
            b.name, b.target
        );
    }
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "| op | dtype | {} |\n|---|---|{}",
        backends.join(" | "),
        "---|".repeat(backends.len())
    );
    for ((op, d), row) in &mx.cells {
        let cells: Vec<String> = backends
            .iter()
            .map(|b| {
                let c = row.get(*b).copied().unwrap_or_default();
                format!("{} / {} / {}", c.pass, c.fail, c.unsupported)
            })
            .collect();
        let _ = writeln!(s, "| `{op}` | {d} | {} |", cells.join(" | "));
    }
    let covered: Vec<&str> = mx.cells.keys().map(|(o, _)| o.as_str()).collect();
    let missing: Vec<&str> = Op::builtin_names()
        .into_iter()
        .filter(|n| !covered.contains(n))
        .collect();
    if !missing.is_empty() {
        let _ = writeln!(
            s,
            "\nBuilt-in ops the generator does not produce yet (covered by the one-op \
             suite, `testsuite/tests/ops.rs`, only): {}.",
            missing
                .iter()
                .map(|n| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let _ = writeln!(s, "\n## Failures\n");
    if mx.failures.is_empty() {
        let _ = writeln!(s, "None.");
    }
    for f in &mx.failures {
        let _ = writeln!(s, "```\n{}\n```", f.trim_end());
    }
    let _ = writeln!(
        s,
        "\n## ONNX node tests\n\nTotals of `testsuite/onnx_node_manifest.txt` (ONNX's \
         backend node tests through the ONNX frontend; `-` = not run).\n\n\
         | backend | status | cases |\n|---|---|---|"
    );
    for ((col, word), n) in onnx {
        let _ = writeln!(s, "| {col} | {word} | {n} |");
    }
    s
}
