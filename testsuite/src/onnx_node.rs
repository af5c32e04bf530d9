//! Running one ONNX backend node test case (`model.onnx` plus
//! `test_data_set_*/input_*.pb` and `output_*.pb`, ONNX's standard layout) through
//! `kiln_frontend_onnx::from_onnx`, then on the reference interpreter (`ref`) and, when
//! that passes, on each compiling backend of the `kiln` registry that has a manifest
//! column ([`manifest_targets`]: `cpu`, `vulkan`, `cuda`; [`run_case_on`] takes any
//! backends), comparing with the expected outputs (floats within atol 1e-4 + rtol 1e-3,
//! integers and bools exactly), and the manifest format ([`Manifest`]) that records each
//! case's status per column.

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;

use kiln::{GraphExecutor, Target};
use kiln_frontend_onnx::{Error, decode_model, from_onnx_with_constants, proto, tensor_from_proto};
use kiln_ir::interp::{Inputs, evaluate};
use kiln_ir::zoo::Params;
use kiln_ir::{Module, NDArray};
use prost::Message;

use crate::suite::ExecBackend;

/// The compiled targets the manifest has a column for, in column order (after `REF`):
/// every backend the built-in registry lists, whether or not it can run here, in its
/// order (`cpu`, `vulkan`, `cuda`), but `interp` (the loop-IR reference device). Fixed by
/// the registry, not by the machine, so the file is the same whichever devices the
/// machine writing it has: a run fills the columns whose backend can run there and keeps
/// the others.
pub fn manifest_targets() -> Vec<String> {
    kiln::Registry::builtin()
        .described_backends()
        .iter()
        .map(|b| b.target_kind())
        .filter(|k| *k != kiln::TargetKind::Interp)
        .map(|k| k.to_string())
        .collect()
}

/// Absolute tolerance for float outputs.
pub const ATOL: f64 = 1e-4;
/// Relative tolerance for float outputs.
pub const RTOL: f64 = 1e-3;

/// The result of running one case.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// Every output matches.
    Pass,
    /// The case needs an op, dtype or feature kiln does not import; says which.
    Unsupported(String),
    /// The case imports but fails (an error or a mismatch); says why.
    Fail(String),
}

impl Outcome {
    /// The status as the manifest writes it: `pass`, `unsupported(...)` or
    /// `known-failure(...)`.
    pub fn status(&self) -> String {
        match self {
            Outcome::Pass => "pass".into(),
            Outcome::Unsupported(r) => format!("unsupported({})", one_line(r)),
            Outcome::Fail(r) => format!("known-failure({})", one_line(r)),
        }
    }
}

/// `s` on one line, at most 160 characters, without the manifest's column separator
/// (`|` becomes `/`).
fn one_line(s: &str) -> String {
    let flat: String = s
        .chars()
        .map(|c| match c {
            '|' => '/',
            c if c.is_control() => ' ',
            c => c,
        })
        .collect();
    if flat.chars().count() > 160 {
        let cut: String = flat.chars().take(157).collect();
        format!("{cut}...")
    } else {
        flat
    }
}

/// Classifies an import error: unsupported ops, dtypes and features apart from failures.
fn import_outcome(e: &Error) -> Outcome {
    match e.root() {
        Error::UnsupportedOps(nodes) => {
            let mut ops: Vec<&str> = nodes.iter().map(|n| n.op_type.as_str()).collect();
            ops.sort_unstable();
            ops.dedup();
            Outcome::Unsupported(ops.join(" "))
        }
        Error::Unsupported(m) | Error::UnsupportedType(m) => Outcome::Unsupported(m.clone()),
        Error::NotConstant { .. } => Outcome::Unsupported(e.root().to_string()),
        _ => Outcome::Fail(e.to_string()),
    }
}

/// Reads a serialized `TensorProto` test value.
fn read_tensor(path: &Path) -> Result<NDArray, Outcome> {
    let bytes =
        std::fs::read(path).map_err(|e| Outcome::Fail(format!("{}: {e}", path.display())))?;
    let t = proto::TensorProto::decode(bytes.as_slice())
        .map_err(|e| Outcome::Unsupported(format!("non-tensor test value ({e})")))?;
    let what = path
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    tensor_from_proto(&t, &what).map_err(|e| import_outcome(&e))
}

/// Compares one output with its expected value.
fn compare(i: usize, got: &NDArray, want: &NDArray) -> Result<(), String> {
    if got.dtype() != want.dtype() || got.shape() != want.shape() {
        return Err(format!(
            "output {i} is {} {:?}, expected {} {:?}",
            got.dtype(),
            got.shape(),
            want.dtype(),
            want.shape()
        ));
    }
    if want.dtype().is_float() {
        for (k, (g, w)) in got.to_f64_vec().iter().zip(want.to_f64_vec()).enumerate() {
            let ok =
                (g.is_nan() && w.is_nan()) || g == &w || (g - w).abs() <= ATOL + RTOL * w.abs();
            if !ok {
                let mut why = format!("output {i} element {k} is {g}, expected {w}");
                // One ulp at |w| of the 16-bit float formats: 2^(exponent - mantissa bits)
                // for normal numbers.
                let half = match want.dtype() {
                    kiln_ir::DType::F16 => Some(("float16", 10, -14)),
                    kiln_ir::DType::BF16 => Some(("bfloat16", 7, -126)),
                    _ => None,
                };
                if let Some((name, bits, min_exp)) = half
                    && w.is_finite()
                    && w != 0.0
                {
                    let ulp = 2f64.powi(w.abs().log2().floor().max(min_exp as f64) as i32 - bits);
                    why += &format!(
                        " ({} {name} ulps apart: {name} rounding of intermediates)",
                        ((g - w).abs() / ulp).round()
                    );
                }
                return Err(why);
            }
        }
    } else if got != want {
        return Err(format!(
            "output {i} differs: {} vs expected {}",
            got.preview(6),
            want.preview(6)
        ));
    }
    Ok(())
}

/// The graph-level optimization level the compiled runs build with (the CLI's default).
pub const OPT_LEVEL: u8 = 3;

/// A case's outcome on the reference interpreter and on each compiled target it ran on.
#[derive(Clone, Debug, PartialEq)]
pub struct CaseResult {
    /// On the reference interpreter.
    pub reference: Outcome,
    /// On each target run (by target name); a target is absent when the case was not run
    /// there because it does not pass on the reference interpreter.
    pub compiled: BTreeMap<String, Outcome>,
}

impl CaseResult {
    /// A result with only the reference interpreter's outcome.
    pub fn reference_only(reference: Outcome) -> CaseResult {
        CaseResult {
            reference,
            compiled: BTreeMap::new(),
        }
    }

    /// The outcome on `target`, if the case ran there.
    pub fn on(&self, target: &str) -> Option<&Outcome> {
        self.compiled.get(target)
    }

    /// Whether the case passes on `target`.
    pub fn passes(&self, target: &str) -> bool {
        self.on(target) == Some(&Outcome::Pass)
    }

    /// The status on `target` as the manifest writes it: [`Outcome::status`], or `-`
    /// when the case was not run there.
    pub fn status(&self, target: &str) -> String {
        self.on(target)
            .map_or_else(|| "-".to_string(), Outcome::status)
    }
}

/// One test data set: the values of the graph inputs the module reads, and the expected
/// outputs.
struct DataSet {
    inputs: Vec<(String, NDArray)>,
    outputs: Vec<NDArray>,
}

/// A case imported and its data read, ready to run on any backend.
struct Case {
    module: Module,
    params: Params,
    sets: Vec<DataSet>,
}

/// Runs `f`, turning a panic inside kiln into a failure.
fn guarded<T>(f: impl FnOnce() -> Result<T, Outcome>) -> Result<T, Outcome> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            Err(Outcome::Fail(format!("panic: {msg}")))
        }
    }
}

/// The built-in registry's backends that have a manifest column ([`manifest_targets`])
/// and a device on this machine, in column order. `cuda` comes only from a real CUDA
/// device (never the PTX interpreter the graph suites fall back to: too slow for 2,000
/// models); `interp` has no column (it is the loop-IR reference device).
pub fn manifest_backends() -> Vec<ExecBackend> {
    let all = crate::suite::exec_backends_of(&kiln::Registry::builtin());
    manifest_targets()
        .iter()
        .filter_map(|t| all.iter().find(|b| b.name == *t).cloned())
        .collect()
}

/// Runs the case in directory `dir` on the reference interpreter and, if it passes there,
/// on each of [`manifest_backends`] (never panics: a panic inside kiln is a failure).
pub fn run_case(dir: &Path) -> CaseResult {
    run_case_on(dir, &manifest_backends())
}

/// [`run_case`] on `backends` (one compiled outcome per backend, by its name).
pub fn run_case_on(dir: &Path, backends: &[ExecBackend]) -> CaseResult {
    let case = match guarded(|| load_case(dir)) {
        Ok(case) => case,
        Err(o) => return CaseResult::reference_only(o),
    };
    let mut result = CaseResult::reference_only(outcome(guarded(|| run_reference(&case))));
    if result.reference == Outcome::Pass {
        for b in backends {
            let o = outcome(guarded(|| run_compiled(&case, b)));
            result.compiled.insert(b.name.clone(), o);
        }
    }
    result
}

/// Runs the case in directory `dir` on the reference interpreter only.
pub fn run_case_reference(dir: &Path) -> Outcome {
    outcome(guarded(|| run_reference(&load_case(dir)?)))
}

fn outcome(r: Result<(), Outcome>) -> Outcome {
    match r {
        Ok(()) => Outcome::Pass,
        Err(o) => o,
    }
}

/// Imports `dir/model.onnx` (binding, one at a time, the inputs the import needs as
/// constants to the first data set's values) and reads every data set.
fn load_case(dir: &Path) -> Result<Case, Outcome> {
    let bytes = std::fs::read(dir.join("model.onnx"))
        .map_err(|e| Outcome::Fail(format!("model.onnx: {e}")))?;
    let model = decode_model(&bytes).map_err(|e| Outcome::Fail(e.to_string()))?;
    let graph = model.graph.clone().unwrap_or_default();
    // Inputs that kiln needs at import (shapes, axes, pads) are bound to the first data
    // set's values, one at a time, only when the import asks for them.
    let first_set = dir.join("test_data_set_0");
    let mut constants = BTreeMap::new();
    let (module, params) = loop {
        match from_onnx_with_constants(&bytes, &BTreeMap::new(), &constants) {
            Ok(r) => break r,
            Err(e) => match e.root() {
                Error::NotConstant { input } if !constants.contains_key(input) => {
                    let j = graph
                        .input
                        .iter()
                        .filter(|vi| !graph.initializer.iter().any(|t| t.name == vi.name))
                        .position(|vi| vi.name.as_deref() == Some(input.as_str()))
                        .ok_or_else(|| import_outcome(&e))?;
                    let value = read_tensor(&first_set.join(format!("input_{j}.pb")))?;
                    constants.insert(input.clone(), value);
                }
                _ => return Err(import_outcome(&e)),
            },
        }
    };
    let inits: Vec<&str> = graph
        .initializer
        .iter()
        .filter_map(|t| t.name.as_deref())
        .collect();
    let input_names: Vec<&str> = graph
        .input
        .iter()
        .filter_map(|vi| vi.name.as_deref())
        .filter(|n| !inits.contains(n))
        .collect();
    let main = module.main().map_err(|e| Outcome::Fail(e.to_string()))?;
    let used: Vec<&str> = main
        .params
        .iter()
        .filter_map(|&p| module.var_name(p))
        .collect();
    let mut set_dirs: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| Outcome::Fail(e.to_string()))?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    set_dirs.sort();
    let mut sets = vec![];
    for set in set_dirs {
        let mut inputs = vec![];
        for (j, name) in input_names.iter().enumerate() {
            let path = set.join(format!("input_{j}.pb"));
            if !path.exists() {
                continue;
            }
            let t = read_tensor(&path)?;
            if used.contains(name) && !constants.contains_key(*name) {
                inputs.push((name.to_string(), t));
            }
        }
        let mut outputs = vec![];
        for i in 0.. {
            let path = set.join(format!("output_{i}.pb"));
            if !path.exists() {
                break;
            }
            outputs.push(read_tensor(&path)?);
        }
        sets.push(DataSet { inputs, outputs });
    }
    Ok(Case {
        module,
        params,
        sets,
    })
}

/// Compares a run's outputs with a data set's expected outputs.
fn compare_all(got: &[NDArray], want: &[NDArray]) -> Result<(), Outcome> {
    if got.len() != want.len() {
        return Err(Outcome::Fail(format!(
            "{} output(s), expected {}",
            got.len(),
            want.len()
        )));
    }
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        compare(i, g, w).map_err(Outcome::Fail)?;
    }
    Ok(())
}

/// Runs every data set on the graph-IR reference interpreter.
fn run_reference(case: &Case) -> Result<(), Outcome> {
    for set in &case.sets {
        let mut inputs: Inputs = case.params.clone();
        inputs.extend(set.inputs.iter().cloned());
        let outs = evaluate(&case.module, &inputs)
            .map_err(|e| Outcome::Fail(e.to_string()))?
            .flatten();
        compare_all(&outs, &set.outputs)?;
    }
    Ok(())
}

/// Builds the case for `backend` and runs every data set with the graph executor. A case
/// using an (op, dtype) the backend declares unsupported, or whose build the backend
/// refuses as unsupported, is [`Outcome::Unsupported`].
fn run_compiled(case: &Case, backend: &ExecBackend) -> Result<(), Outcome> {
    let name = &backend.name;
    if let Some((op, dtype)) = backend.unsupported_in(&crate::graphs::uses_of(&case.module)) {
        let why = backend
            .unsupported
            .iter()
            .find(|u| u.covers(&op, dtype))
            .map_or(String::new(), |u| format!(": {}", u.reason));
        return Err(Outcome::Unsupported(format!("{op} on {dtype}{why}")));
    }
    let fail = |what: &str, e: &dyn std::fmt::Display| Outcome::Fail(format!("{name} {what}: {e}"));
    let compiled = kiln::build_on(
        &case.module,
        &Target::new(backend.target.kind().clone()),
        Some(&*backend.backend),
        &case.params,
        OPT_LEVEL,
    )
    .map_err(|e| {
        if e.is_unsupported() {
            Outcome::Unsupported(e.to_string())
        } else {
            fail("build", &e)
        }
    })?;
    let mut exec = GraphExecutor::new(&compiled).map_err(|e| fail("executor", &e))?;
    let names: Vec<String> = exec.get_input_info().into_iter().map(|t| t.name).collect();
    for set in &case.sets {
        for (name, value) in &set.inputs {
            // The build may drop inputs the optimized graph no longer reads.
            if names.contains(name) {
                exec.set_input(name.as_str(), value)
                    .map_err(|e| fail("set_input", &e))?;
            }
        }
        exec.run().map_err(|e| fail("run", &e))?;
        let outs = exec.outputs().map_err(|e| fail("outputs", &e))?;
        compare_all(&outs, &set.outputs)?;
    }
    Ok(())
}

/// One manifest line's statuses.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Listed {
    /// The status on the reference interpreter (`pass`, `unsupported(...)`,
    /// `known-failure(...)`).
    pub reference: String,
    /// The status on each compiled target of the manifest's columns.
    pub compiled: BTreeMap<String, String>,
}

impl Listed {
    /// The status on `target`: `-` when the manifest has no entry for it.
    pub fn status(&self, target: &str) -> &str {
        self.compiled.get(target).map_or("-", String::as_str)
    }
}

/// A parsed manifest: its compiled-target columns, in order, and each case's statuses.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Manifest {
    /// The compiled targets, one column each after `REF`.
    pub targets: Vec<String>,
    /// Each case's statuses, by name.
    pub cases: BTreeMap<String, Listed>,
}

/// The header line that names the manifest's columns.
const COLUMNS: &str = "# columns: NAME REF";

impl Manifest {
    /// The manifest of this run: a column per [`manifest_targets`]; the targets in `ran`
    /// take this run's `results`, every other column keeps `previous`'s entries (a new
    /// case `-`), so that a machine without a device for a column never rewrites it.
    pub fn from_results(
        results: &[(String, CaseResult)],
        ran: &[String],
        previous: &Manifest,
    ) -> Manifest {
        let targets = manifest_targets();
        let cases = results
            .iter()
            .map(|(name, r)| {
                let before = previous.cases.get(name);
                let compiled = targets
                    .iter()
                    .map(|t| {
                        let status = if ran.contains(t) {
                            r.status(t)
                        } else {
                            before.map_or("-", |l| l.status(t)).to_string()
                        };
                        (t.clone(), status)
                    })
                    .collect();
                let listed = Listed {
                    reference: r.reference.status(),
                    compiled,
                };
                (name.clone(), listed)
            })
            .collect();
        Manifest { targets, cases }
    }

    /// The manifest text: a header naming the columns, then `NAME REF | T1 | T2 ...` per
    /// case, sorted by name.
    pub fn write(&self) -> String {
        let mut out = format!(
            "# ONNX backend node tests (onnx 1.23.2), with the package's pytorch-converted and\n\
             # pytorch-operator cases, on kiln's reference interpreter and on each compiled target.\n\
             # Generated by `KILN_ONNX_WRITE_MANIFEST=1 cargo test -p kiln-testsuite --test onnx_node`;\n\
             # do not edit. One case per line: NAME REF | one status per target column, where REF\n\
             # (the reference interpreter) is pass, unsupported(what) or known-failure(why), and a\n\
             # target's status (the graph executor at opt level {OPT_LEVEL}, run only for cases that\n\
             # pass on REF) is pass, unsupported(what the backend declares or refuses),\n\
             # known-failure(why) or - (not run). The columns are fixed (cpu, vulkan, cuda); a run\n\
             # rewrites only the columns whose device the machine has (CI: cpu, and vulkan on\n\
             # lavapipe; cuda only on a machine with a CUDA device) and keeps the others.\n\
             {COLUMNS}"
        );
        for t in &self.targets {
            out.push_str(&format!(" | {t}"));
        }
        out.push('\n');
        for (name, l) in &self.cases {
            out.push_str(&format!("{name} {}", l.reference));
            for t in &self.targets {
                out.push_str(&format!(" | {}", l.status(t)));
            }
            out.push('\n');
        }
        out
    }

    /// Parses manifest text. Without a columns header (the older format) the columns are
    /// `REF | cpu`; a line without a `|` (the oldest, reference-only format) lists every
    /// target as `-`.
    pub fn parse(text: &str) -> Manifest {
        let targets: Vec<String> = text
            .lines()
            .find_map(|l| l.trim().strip_prefix(COLUMNS))
            .map_or_else(
                || vec!["cpu".to_string()],
                |rest| {
                    rest.split('|')
                        .map(str::trim)
                        .filter(|t| !t.is_empty())
                        .map(str::to_string)
                        .collect()
                },
            );
        let cases = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .filter_map(|l| {
                let (name, rest) = l.split_once(' ')?;
                let mut cols = rest.split('|').map(str::trim);
                let reference = cols.next()?.to_string();
                let compiled = targets
                    .iter()
                    .zip(cols)
                    .map(|(t, s)| (t.clone(), s.to_string()))
                    .collect();
                Some((
                    name.to_string(),
                    Listed {
                        reference,
                        compiled,
                    },
                ))
            })
            .collect();
        Manifest { targets, cases }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(reference: Outcome, compiled: &[(&str, Outcome)]) -> CaseResult {
        CaseResult {
            reference,
            compiled: compiled
                .iter()
                .map(|(t, o)| (t.to_string(), o.clone()))
                .collect(),
        }
    }

    fn listed(reference: &str, compiled: &[(&str, &str)]) -> Listed {
        Listed {
            reference: reference.into(),
            compiled: compiled
                .iter()
                .map(|(t, s)| (t.to_string(), s.to_string()))
                .collect(),
        }
    }

    #[test]
    fn manifest_round_trips() {
        let results = vec![
            (
                "test_b".to_string(),
                result(Outcome::Fail("x\ny|z".into()), &[]),
            ),
            (
                "test_a".to_string(),
                result(
                    Outcome::Pass,
                    &[("cpu", Outcome::Pass), ("vulkan", Outcome::Pass)],
                ),
            ),
            (
                "test_c".to_string(),
                result(Outcome::Unsupported("Foo".into()), &[]),
            ),
            (
                "test_d".to_string(),
                result(
                    Outcome::Pass,
                    &[
                        ("cpu", Outcome::Fail("off by one".into())),
                        ("vulkan", Outcome::Unsupported("float64".into())),
                    ],
                ),
            ),
        ];
        let ran = ["cpu".to_string(), "vulkan".to_string()];
        let m = Manifest::from_results(&results, &ran, &Manifest::default());
        let text = m.write();
        assert!(
            text.contains("\n# columns: NAME REF | cpu | vulkan | cuda\n"),
            "{text}"
        );
        assert!(text.contains("\ntest_a pass | pass | pass | -\n"), "{text}");
        let back = Manifest::parse(&text);
        assert_eq!(back, m);
        let all = |s: &'static str| [("cpu", s), ("vulkan", s), ("cuda", s)];
        assert_eq!(
            back.cases["test_a"],
            listed(
                "pass",
                &[("cpu", "pass"), ("vulkan", "pass"), ("cuda", "-")]
            )
        );
        assert_eq!(
            back.cases["test_b"],
            listed("known-failure(x y/z)", &all("-"))
        );
        assert_eq!(back.cases["test_c"], listed("unsupported(Foo)", &all("-")));
        assert_eq!(
            back.cases["test_d"],
            listed(
                "pass",
                &[
                    ("cpu", "known-failure(off by one)"),
                    ("vulkan", "unsupported(float64)"),
                    ("cuda", "-")
                ]
            )
        );
    }

    #[test]
    fn a_column_not_run_keeps_the_previous_manifest() {
        let before = Manifest::parse(
            "# columns: NAME REF | cpu | vulkan | cuda\n\
             test_a pass | pass | known-failure(old) | pass\n",
        );
        let results = vec![
            (
                "test_a".to_string(),
                result(Outcome::Pass, &[("cpu", Outcome::Pass)]),
            ),
            (
                "test_new".to_string(),
                result(Outcome::Pass, &[("cpu", Outcome::Pass)]),
            ),
        ];
        let m = Manifest::from_results(&results, &["cpu".to_string()], &before);
        assert_eq!(
            m.cases["test_a"],
            listed(
                "pass",
                &[
                    ("cpu", "pass"),
                    ("vulkan", "known-failure(old)"),
                    ("cuda", "pass")
                ]
            )
        );
        assert_eq!(
            m.cases["test_new"],
            listed("pass", &[("cpu", "pass"), ("vulkan", "-"), ("cuda", "-")])
        );
    }

    #[test]
    fn older_manifest_formats_parse() {
        // `REF | CPU` without a columns header.
        let m = Manifest::parse("test_e pass | pass\n");
        assert_eq!(m.targets, ["cpu"]);
        assert_eq!(m.cases["test_e"], listed("pass", &[("cpu", "pass")]));
        // The reference-only format reads as not run on any target.
        let m = Manifest::parse("test_f pass\n");
        assert_eq!(m.cases["test_f"].status("cpu"), "-");
        assert_eq!(m.cases["test_f"].status("vulkan"), "-");
    }

    #[test]
    fn comparison_uses_the_tolerances() {
        let a = NDArray::from_vec([2], vec![1.0f32, 100.0]).unwrap();
        let b = NDArray::from_vec([2], vec![1.00005f32, 100.05]).unwrap();
        assert!(compare(0, &a, &b).is_ok());
        let c = NDArray::from_vec([2], vec![1.01f32, 100.0]).unwrap();
        assert!(compare(0, &a, &c).is_err());
        // A float16 mismatch says how many ulps apart the values are.
        let h = |v: f64| NDArray::from_f64([1], kiln_ir::DType::F16, vec![v]).unwrap();
        let e = compare(0, &h(0.67822265625), &h(0.67724609375)).unwrap_err();
        assert!(e.contains("2 float16 ulps apart"), "{e}");
        let i = NDArray::from_vec([1], vec![1i64]).unwrap();
        assert!(compare(0, &i, &NDArray::from_vec([1], vec![2i64]).unwrap()).is_err());
    }
}
