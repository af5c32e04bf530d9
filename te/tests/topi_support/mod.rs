//! Shared harness of the TOPI tests: builds a one-op (or any) module, runs the graph-IR
//! reference interpreter, lowers every kernel under the CPU and the GPU default
//! schedules, verifies each, checks its text round-trips, runs it in the loop-IR
//! interpreter and compares with the reference within a tolerance.

#![allow(dead_code)]

use std::collections::BTreeMap;

use kiln_ir::{DType, Module, NDArray, Op, TensorType, Type};
use kiln_te::tir::{self, PrimFunc};
use kiln_te::topi::{ScheduleKind, kernels_of};

/// An argument of a one-op module: a tensor, or a tuple of tensors (concatenate).
#[derive(Clone, Debug)]
pub enum Arg {
    T(TensorType),
    Tuple(Vec<TensorType>),
}

/// `(atol, rtol)`; `EXACT` for data movement and integer ops.
pub type Tol = (f64, f64);
/// Bit-exact.
pub const EXACT: Tol = (0.0, 0.0);
/// Float arithmetic without long accumulations (one rounding of f32 against f64).
pub const ARITH: Tol = (1e-6, 1e-5);
/// Float reductions and products summed in f32 (the reference sums in f64).
pub const ACCUM: Tol = (1e-5, 1e-4);
/// Transcendental functions (f32 libm against f64).
pub const TRANSC: Tol = (1e-6, 2e-5);

/// A module whose `@main(x0, x1, ...)` applies `op` to its parameters (a tuple argument
/// is a tuple of parameters). Returns the module and the parameter names with types.
pub fn one_op(
    op: impl Into<Op>,
    args: &[Arg],
) -> Result<(Module, Vec<(String, TensorType)>), String> {
    let types: Vec<Type> = args
        .iter()
        .map(|a| match a {
            Arg::T(t) => Type::Tensor(t.clone()),
            Arg::Tuple(ts) => Type::Tuple(ts.iter().cloned().map(Type::Tensor).collect()),
        })
        .collect();
    let m = Module::single_op(op, &types).map_err(|e| e.to_string())?;
    let params = m.main_tensor_params().map_err(|e| e.to_string())?;
    Ok((m, params))
}

/// Random inputs for `params`: floats uniform in `[lo, hi)`, integers in `[ilo, ihi]`.
pub fn inputs(params: &[(String, TensorType)], seed: u64, lo: f64, hi: f64) -> Vec<NDArray> {
    params
        .iter()
        .enumerate()
        .map(|(k, (_, t))| random(t, seed.wrapping_add(k as u64 * 7919), lo, hi))
        .collect()
}

/// One random tensor: floats in `[lo, hi)`; integers in the default small range.
pub fn random(t: &TensorType, seed: u64, lo: f64, hi: f64) -> NDArray {
    if t.dtype.is_float() {
        NDArray::random_uniform(t.shape.clone(), t.dtype, seed, lo, hi)
    } else {
        NDArray::random(t.shape.clone(), t.dtype, seed)
    }
}

/// Lowers `m` for `target`, checks each kernel (verify, text round trip) and returns them.
pub fn lower_checked(m: &Module, target: ScheduleKind) -> Result<Vec<PrimFunc>, String> {
    let ks = kernels_of(m, target).map_err(|e| format!("lowering for {target:?}: {e}"))?;
    for k in &ks {
        tir::verify(k).map_err(|e| format!("{target:?} kernel @{}: {e}\n{k}", k.name))?;
        let text = k.to_string();
        let back =
            tir::parse(&text).map_err(|e| format!("@{} does not parse: {e}\n{text}", k.name))?;
        if back.to_string() != text {
            return Err(format!(
                "@{} does not round-trip:\n{text}\n---\n{back}",
                k.name
            ));
        }
    }
    Ok(ks)
}

/// Runs `m`'s `@main` on `args` in the reference interpreter and, lowered to one kernel
/// for each target, in the loop-IR interpreter; compares within `tol`.
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
    for target in [ScheduleKind::Cpu, ScheduleKind::Gpu] {
        let ks = lower_checked(m, target)?;
        if ks.len() != 1 {
            return Err(format!("{target:?}: expected one kernel, got {}", ks.len()));
        }
        let k = &ks[0];
        let got = tir::run_with_inputs(k, args).map_err(|e| format!("{target:?} run: {e}\n{k}"))?;
        if got.len() != want.len() {
            return Err(format!(
                "{target:?}: {} outputs, expected {}",
                got.len(),
                want.len()
            ));
        }
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            g.allclose(w, tol.0, tol.1)
                .map_err(|e| format!("{target:?} output {i}: {e}\n{k}"))?;
        }
    }
    Ok(())
}

/// A tensor type.
pub fn tt(shape: &[usize], dtype: DType) -> TensorType {
    TensorType::new(shape.to_vec(), dtype)
}
