//! Running one ONNX backend node test case (`model.onnx` plus
//! `test_data_set_*/input_*.pb` and `output_*.pb`, ONNX's standard layout) through
//! `kiln_frontend_onnx::from_onnx`, then on the reference interpreter (`ref`) and, when
//! that passes, on a compiling backend from the `kiln` registry — the manifest records
//! [`MANIFEST_TARGET`] (`cpu`, Cranelift); [`run_case_on`] takes any backend —
//! comparing with the expected outputs (floats within atol 1e-4 + rtol 1e-3, integers and
//! bools exactly), and the manifest format that records each case's status per backend.

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

/// The target whose status the manifest's second column records.
pub const MANIFEST_TARGET: &str = "cpu";

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

/// The graph-level optimization level the `cpu` runs build with (the CLI's default).
pub const CPU_OPT_LEVEL: u8 = 3;

/// A case's outcome on each backend.
#[derive(Clone, Debug, PartialEq)]
pub struct CaseResult {
    /// On the reference interpreter.
    pub reference: Outcome,
    /// On `cpu`; `None` when the case was not run there because it does not pass on the
    /// reference interpreter.
    pub cpu: Option<Outcome>,
}

impl CaseResult {
    /// The `cpu` status as the manifest writes it: [`Outcome::status`], or `-` when the
    /// case was not run on `cpu`.
    pub fn cpu_status(&self) -> String {
        self.cpu
            .as_ref()
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

/// Runs the case in directory `dir` on the reference interpreter and, if it passes there,
/// on the registry's backend for [`MANIFEST_TARGET`] (never panics: a panic inside kiln
/// is a failure).
pub fn run_case(dir: &Path) -> CaseResult {
    match crate::suite::exec_backend(MANIFEST_TARGET) {
        Some(b) => run_case_on(dir, &b),
        None => CaseResult {
            reference: Outcome::Fail(format!("no backend serves `{MANIFEST_TARGET}`")),
            cpu: None,
        },
    }
}

/// [`run_case`] with `backend` in the compiled column.
pub fn run_case_on(dir: &Path, backend: &ExecBackend) -> CaseResult {
    let case = match guarded(|| load_case(dir)) {
        Ok(case) => case,
        Err(o) => {
            return CaseResult {
                reference: o,
                cpu: None,
            };
        }
    };
    let reference = outcome(guarded(|| run_reference(&case)));
    let cpu =
        (reference == Outcome::Pass).then(|| outcome(guarded(|| run_compiled(&case, backend))));
    CaseResult { reference, cpu }
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

/// Builds the case for `backend` and runs every data set with the graph executor.
fn run_compiled(case: &Case, backend: &ExecBackend) -> Result<(), Outcome> {
    let name = &backend.name;
    let fail = |what: &str, e: &dyn std::fmt::Display| Outcome::Fail(format!("{name} {what}: {e}"));
    let compiled = kiln::build_on(
        &case.module,
        &Target::new(backend.target.kind().clone()),
        Some(&*backend.backend),
        &case.params,
        CPU_OPT_LEVEL,
    )
    .map_err(|e| fail("build", &e))?;
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
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listed {
    /// The status on the reference interpreter (`pass`, `unsupported(...)`,
    /// `known-failure(...)`).
    pub reference: String,
    /// The status on `cpu`, or `-` when the case is not run there.
    pub cpu: String,
}

/// The manifest text for `results`: a header, then `NAME REF | CPU` per line, sorted.
pub fn write_manifest(results: &[(String, CaseResult)]) -> String {
    let mut out = String::from(
        "# ONNX backend node tests (onnx 1.23.2), with the package's pytorch-converted and\n\
         # pytorch-operator cases, on kiln's reference interpreter and on cpu.\n\
         # Generated by `KILN_ONNX_WRITE_MANIFEST=1 cargo test -p kiln-testsuite --test onnx_node`;\n\
         # do not edit. One case per line: NAME REF | CPU, where REF (the reference\n\
         # interpreter) is pass, unsupported(what) or known-failure(why), and CPU (the graph\n\
         # executor on Cranelift, run only for cases that pass on REF) is pass,\n\
         # known-failure(why) or - (not run).\n",
    );
    let mut sorted: Vec<&(String, CaseResult)> = results.iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, r) in sorted {
        out.push_str(&format!(
            "{name} {} | {}\n",
            r.reference.status(),
            r.cpu_status()
        ));
    }
    out
}

/// Parses manifest text into `name -> statuses`. A line without a `|` column (the older,
/// reference-only format) lists `cpu` as `-`.
pub fn parse_manifest(text: &str) -> BTreeMap<String, Listed> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| {
            let (name, rest) = l.split_once(' ')?;
            let (reference, cpu) = rest.split_once('|').unwrap_or((rest, "-"));
            Some((
                name.to_string(),
                Listed {
                    reference: reference.trim().to_string(),
                    cpu: cpu.trim().to_string(),
                },
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifest_round_trips() {
        let r = |reference, cpu| CaseResult { reference, cpu };
        let results = vec![
            (
                "test_b".to_string(),
                r(Outcome::Fail("x\ny|z".into()), None),
            ),
            ("test_a".to_string(), r(Outcome::Pass, Some(Outcome::Pass))),
            (
                "test_c".to_string(),
                r(Outcome::Unsupported("Foo".into()), None),
            ),
            (
                "test_d".to_string(),
                r(Outcome::Pass, Some(Outcome::Fail("off by one".into()))),
            ),
        ];
        let text = write_manifest(&results);
        let m = parse_manifest(&text);
        let listed = |reference: &str, cpu: &str| Listed {
            reference: reference.into(),
            cpu: cpu.into(),
        };
        assert_eq!(m["test_a"], listed("pass", "pass"));
        assert_eq!(m["test_b"], listed("known-failure(x y/z)", "-"));
        assert_eq!(m["test_c"], listed("unsupported(Foo)", "-"));
        assert_eq!(m["test_d"], listed("pass", "known-failure(off by one)"));
        // The older one-column format reads as not run on cpu.
        assert_eq!(
            parse_manifest("test_e pass\n")["test_e"],
            listed("pass", "-")
        );
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
