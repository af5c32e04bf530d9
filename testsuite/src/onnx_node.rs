//! Running one ONNX backend node test case (`model.onnx` plus
//! `test_data_set_*/input_*.pb` and `output_*.pb`, ONNX's standard layout) through
//! `kiln_frontend_onnx::from_onnx` and the reference interpreter, comparing with the
//! expected outputs (floats within atol 1e-4 + rtol 1e-3, integers and bools exactly),
//! and the manifest format that records each case's status.

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;

use kiln_frontend_onnx::{Error, decode_model, from_onnx_with_constants, proto, tensor_from_proto};
use kiln_ir::NDArray;
use kiln_ir::interp::{Inputs, evaluate};
use prost::Message;

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

/// `s` on one line, at most 160 characters.
fn one_line(s: &str) -> String {
    let flat: String = s
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
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
                return Err(format!("output {i} element {k} is {g}, expected {w}"));
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

/// Runs the case in directory `dir` (never panics: a panic inside kiln is a failure).
pub fn run_case(dir: &Path) -> Outcome {
    match catch_unwind(AssertUnwindSafe(|| run_case_inner(dir))) {
        Ok(Ok(())) => Outcome::Pass,
        Ok(Err(o)) => o,
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            Outcome::Fail(format!("panic: {msg}"))
        }
    }
}

fn run_case_inner(dir: &Path) -> Result<(), Outcome> {
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
    let mut sets: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| Outcome::Fail(e.to_string()))?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    sets.sort();
    for set in sets {
        let mut inputs: Inputs = params.clone();
        for (j, name) in input_names.iter().enumerate() {
            let path = set.join(format!("input_{j}.pb"));
            if !path.exists() {
                continue;
            }
            let t = read_tensor(&path)?;
            if used.contains(name) && !constants.contains_key(*name) {
                inputs.insert(name.to_string(), t);
            }
        }
        let outs = evaluate(&module, &inputs)
            .map_err(|e| Outcome::Fail(e.to_string()))?
            .flatten();
        for (i, got) in outs.iter().enumerate() {
            let path = set.join(format!("output_{i}.pb"));
            let want = read_tensor(&path)?;
            compare(i, got, &want).map_err(Outcome::Fail)?;
        }
    }
    Ok(())
}

/// The manifest text for `results`: a header, then `name status` per line, sorted.
pub fn write_manifest(results: &[(String, Outcome)]) -> String {
    let mut out = String::from(
        "# ONNX backend node tests (onnx 1.23.2) on kiln's reference interpreter.\n\
         # Generated by `KILN_ONNX_WRITE_MANIFEST=1 cargo test -p kiln-testsuite --test onnx_node`;\n\
         # do not edit. One case per line: NAME STATUS, where STATUS is pass,\n\
         # unsupported(what) or known-failure(why).\n",
    );
    let mut sorted: Vec<&(String, Outcome)> = results.iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, o) in sorted {
        out.push_str(&format!("{name} {}\n", o.status()));
    }
    out
}

/// Parses manifest text into `name -> status` (`pass`, or the full status text).
pub fn parse_manifest(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| {
            let (name, status) = l.split_once(' ')?;
            Some((name.to_string(), status.trim().to_string()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifest_round_trips() {
        let results = vec![
            ("test_b".to_string(), Outcome::Fail("x\ny".into())),
            ("test_a".to_string(), Outcome::Pass),
            ("test_c".to_string(), Outcome::Unsupported("Foo".into())),
        ];
        let text = write_manifest(&results);
        let m = parse_manifest(&text);
        assert_eq!(m["test_a"], "pass");
        assert_eq!(m["test_b"], "known-failure(x y)");
        assert_eq!(m["test_c"], "unsupported(Foo)");
    }

    #[test]
    fn comparison_uses_the_tolerances() {
        let a = NDArray::from_vec([2], vec![1.0f32, 100.0]).unwrap();
        let b = NDArray::from_vec([2], vec![1.00005f32, 100.05]).unwrap();
        assert!(compare(0, &a, &b).is_ok());
        let c = NDArray::from_vec([2], vec![1.01f32, 100.0]).unwrap();
        assert!(compare(0, &a, &c).is_err());
        let i = NDArray::from_vec([1], vec![1i64]).unwrap();
        assert!(compare(0, &i, &NDArray::from_vec([1], vec![2i64]).unwrap()).is_err());
    }
}
