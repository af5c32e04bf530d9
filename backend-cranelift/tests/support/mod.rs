//! Shared harness of the cpu backend's tests (the executor's harness, pointed at
//! Cranelift): one-op modules, random inputs, and the check that `build_with` for `cpu`
//! plus the graph executor equals the graph-IR reference interpreter within a tolerance.

#![allow(dead_code)]

use std::collections::BTreeMap;

use std::sync::Arc;

use kiln_backend_cranelift::CraneliftBackend;
use kiln_executor::{Target, build_with};
use kiln_ir::{DType, ExprId, Module, NDArray, Op, TensorType, Type};

/// An argument of a one-op module: a tensor, or a tuple of tensors (concatenate).
#[derive(Clone, Debug)]
pub enum Arg {
    T(TensorType),
    Tuple(Vec<TensorType>),
}

/// `(atol, rtol)`.
pub type Tol = (f64, f64);
/// Bit-exact.
pub const EXACT: Tol = (0.0, 0.0);
/// Float arithmetic without long accumulations.
pub const ARITH: Tol = (1e-6, 1e-5);
/// Float reductions summed in f32 against the reference's f64.
pub const ACCUM: Tol = (1e-5, 1e-4);
/// Transcendental functions.
pub const TRANSC: Tol = (1e-6, 2e-5);

/// A module whose `@main(x0, x1, ...)` applies `op` to its parameters.
pub fn one_op(
    op: impl Into<Op>,
    args: &[Arg],
) -> Result<(Module, Vec<(String, TensorType)>), String> {
    let mut m = Module::new();
    let mut params: Vec<ExprId> = vec![];
    let mut names = vec![];
    let mut call_args = vec![];
    for (i, a) in args.iter().enumerate() {
        match a {
            Arg::T(t) => {
                let n = format!("x{i}");
                let v = m.var(&n, Type::Tensor(t.clone()));
                params.push(v);
                names.push((n, t.clone()));
                call_args.push(v);
            }
            Arg::Tuple(ts) => {
                let mut fs = vec![];
                for (k, t) in ts.iter().enumerate() {
                    let n = format!("x{i}_{k}");
                    let v = m.var(&n, Type::Tensor(t.clone()));
                    params.push(v);
                    names.push((n, t.clone()));
                    fs.push(v);
                }
                call_args.push(m.tuple(&fs).map_err(|e| e.to_string())?);
            }
        }
    }
    let call = m.call(op, &call_args).map_err(|e| e.to_string())?;
    m.set_main(&params, call).map_err(|e| e.to_string())?;
    Ok((m, names))
}

/// Random inputs for `params`: floats uniform in `[lo, hi)`, integers small.
pub fn inputs(params: &[(String, TensorType)], seed: u64, lo: f64, hi: f64) -> Vec<NDArray> {
    params
        .iter()
        .enumerate()
        .map(|(k, (_, t))| {
            let s = seed.wrapping_add(k as u64 * 7919);
            if t.dtype.is_float() {
                NDArray::random_uniform(t.shape.clone(), t.dtype, s, lo, hi)
            } else {
                NDArray::random(t.shape.clone(), t.dtype, s)
            }
        })
        .collect()
}

/// Builds `m` for `cpu -threads=2`, sets `args` (the first `split` as params bound at build
/// time, the rest as inputs), runs, and compares every output with the reference.
pub fn check(
    m: &Module,
    params: &[(String, TensorType)],
    args: &[NDArray],
    tol: Tol,
) -> Result<(), String> {
    let named: BTreeMap<String, NDArray> = params
        .iter()
        .map(|(n, _)| n.clone())
        .zip(args.iter().cloned())
        .collect();
    let want = kiln_ir::interp::evaluate(m, &named)
        .map_err(|e| format!("reference: {e}"))?
        .flatten();
    // The last parameter is bound as a param at build time, the others set as inputs.
    let mut bound = BTreeMap::new();
    if let Some((n, _)) = params.last()
        && params.len() > 1
    {
        bound.insert(n.clone(), named[n].clone());
    }
    let target: Target = "cpu -threads=2".parse().unwrap();
    let lib = build_with(m, &target, &bound, 2, Arc::new(CraneliftBackend))
        .map_err(|e| format!("build: {e}"))?;
    let mut ex = lib.create_executor().map_err(|e| e.to_string())?;
    for (name, v) in &named {
        if !bound.contains_key(name) {
            ex.set_input(name, v)
                .map_err(|e| format!("set_input: {e}"))?;
        }
    }
    ex.run().map_err(|e| format!("run: {e}"))?;
    if ex.get_num_outputs() != want.len() {
        return Err(format!(
            "{} outputs, expected {}",
            ex.get_num_outputs(),
            want.len()
        ));
    }
    for (i, w) in want.iter().enumerate() {
        let g = ex.get_output(i).map_err(|e| e.to_string())?;
        g.allclose(w, tol.0, tol.1)
            .map_err(|e| format!("output {i}: {e}\n{}", lib.graph_json()))?;
    }
    Ok(())
}

/// A tensor type.
pub fn tt(shape: &[usize], dtype: DType) -> TensorType {
    TensorType::new(shape.to_vec(), dtype)
}
