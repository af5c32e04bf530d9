//! One op suite, every backend (STYLE habit 3): one-op modules over random shapes and
//! attributes, built once and checked on every registered [`Backend`] against the
//! graph-IR reference interpreter, with tolerances as data ([`Tol`]). The cases live in
//! `tests/ops.rs`. The backends are the loop-IR interpreter under each default schedule
//! and every executor backend of the `kiln` registry ([`backends`]), or any list a user
//! gives ([`check_on`]): a new backend needs nothing here.

use std::collections::BTreeMap;

use kiln_ir::{DType, Module, NDArray, Op, TensorType, Type};
use kiln_te::tir::{self, PrimFunc};
use kiln_te::topi::ScheduleKind;

use crate::suite::ExecBackend;
use kiln_te::topi::lower::kernels_of;

/// An argument of a one-op module: a tensor, or a tuple of tensors (concatenate).
#[derive(Clone, Debug)]
pub enum Arg {
    T(TensorType),
    Tuple(Vec<TensorType>),
}

/// `(atol, rtol)`.
pub type Tol = (f64, f64);
/// Bit-exact: data movement, integers, max/min, casts.
pub const EXACT: Tol = (0.0, 0.0);
/// Float arithmetic without long accumulations.
pub const ARITH: Tol = (1e-6, 1e-5);
/// Float reductions summed in f32 against the reference's f64.
pub const ACCUM: Tol = (1e-5, 1e-4);
/// Transcendental functions (f32 implementations against the reference's f64).
pub const TRANSC: Tol = (1e-6, 2e-5);
/// bfloat16 arithmetic: backends compute in f32 and round to bfloat16, the reference
/// rounds its f64 result once; the two roundings differ by at most one bfloat16 ulp
/// (2^-7 relative, 8 significant bits).
pub const BF16_ROUNDING: Tol = (1e-6, 1.0 / 128.0);

/// Where a case runs.
#[derive(Clone, Debug)]
pub enum Backend {
    /// Lowered under a default schedule (the CPU one; or the GPU one, with threads,
    /// shared memory and barriers), verified, round-tripped, run by the loop-IR
    /// interpreter.
    Tir(ScheduleKind),
    /// An executor backend: `build` for its test target and the graph executor (graph
    /// JSON, memory plan, device buffers with explicit copies, a param bound at build
    /// time).
    Exec(ExecBackend),
}

/// Every backend the suite runs, in order: `tir-cpu`, `tir-gpu`, then every backend of
/// the `kiln` registry ([`crate::suite::exec_backends`]).
pub fn backends() -> Vec<Backend> {
    backends_with(crate::suite::exec_backends())
}

/// `tir-cpu`, `tir-gpu`, then `exec` (a user's own backends, say).
pub fn backends_with(exec: impl IntoIterator<Item = ExecBackend>) -> Vec<Backend> {
    [
        Backend::Tir(ScheduleKind::Cpu),
        Backend::Tir(ScheduleKind::Gpu),
    ]
    .into_iter()
    .chain(exec.into_iter().map(Backend::Exec))
    .collect()
}

impl Backend {
    /// The backend's name in failure messages.
    pub fn name(&self) -> &str {
        match self {
            Backend::Tir(ScheduleKind::Cpu) => "tir-cpu",
            Backend::Tir(ScheduleKind::Gpu) => "tir-gpu",
            Backend::Exec(b) => &b.name,
        }
    }

    /// Runs `m` with `args` bound to `params` in order and returns its outputs.
    pub fn run(
        &self,
        m: &Module,
        params: &[(String, TensorType)],
        args: &[NDArray],
    ) -> Result<Vec<NDArray>, String> {
        match self {
            Backend::Tir(kind) => run_lowered(m, args, *kind),
            Backend::Exec(b) => run_executor(m, params, args, b),
        }
    }

    /// The first (op, dtype) of `m` this backend declares unsupported (never for the
    /// loop-IR interpreter, which runs every lowered kernel).
    pub fn unsupported_in(&self, m: &Module) -> Option<(String, DType)> {
        match self {
            Backend::Tir(_) => None,
            Backend::Exec(b) => b.unsupported_in(&crate::graphs::uses_of(m)),
        }
    }
}

/// A module whose `@main(x0, x1, ...)` applies `op` to its parameters.
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

/// A tensor type.
pub fn tt(shape: &[usize], dtype: DType) -> TensorType {
    TensorType::new(shape.to_vec(), dtype)
}

/// Runs `m` in the reference interpreter and on every backend in [`backends`]; every
/// output must agree within `tol`. The error names the backend and the worst element.
pub fn check_all(
    m: &Module,
    params: &[(String, TensorType)],
    args: &[NDArray],
    tol: Tol,
) -> Result<(), String> {
    check_on(&backends(), m, params, args, tol)
}

/// [`check_all`] on the given backends. A backend that declares an (op, dtype) of `m`
/// unsupported is skipped for it; a case every backend skips is an error, never a pass.
pub fn check_on(
    backends: &[Backend],
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
    let mut ran = 0;
    for backend in backends {
        if backend.unsupported_in(m).is_some() {
            continue;
        }
        ran += 1;
        let got = backend
            .run(m, params, args)
            .map_err(|e| format!("{}: {e}", backend.name()))?;
        if got.len() != want.len() {
            return Err(format!(
                "{}: {} outputs, expected {}",
                backend.name(),
                got.len(),
                want.len()
            ));
        }
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            g.allclose(w, tol.0, tol.1)
                .map_err(|e| format!("{} output {i}: {e}", backend.name()))?;
        }
    }
    if ran == 0 {
        return Err(format!(
            "no backend ran the case: every one of {} declares it unsupported",
            backends.len()
        ));
    }
    Ok(())
}

/// Lowers `m` for `target`, checks each kernel (verify, text round trip) and returns them.
pub fn lower_checked(m: &Module, target: ScheduleKind) -> Result<Vec<PrimFunc>, String> {
    let ks = kernels_of(m, target).map_err(|e| format!("lowering: {e}"))?;
    for k in &ks {
        tir::verify(k).map_err(|e| format!("kernel @{}: {e}\n{k}", k.name))?;
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

/// One-op modules lower to exactly one kernel; run it in the loop-IR interpreter.
fn run_lowered(m: &Module, args: &[NDArray], target: ScheduleKind) -> Result<Vec<NDArray>, String> {
    let ks = lower_checked(m, target)?;
    let [k] = &ks[..] else {
        return Err(format!("expected one kernel, got {}", ks.len()));
    };
    tir::run_with_inputs(k, args).map_err(|e| format!("run: {e}\n{k}"))
}

/// Builds on the executor backend `backend` at opt level 2 with the last parameter bound
/// as a param at build time (when there are several), sets the others as inputs, runs
/// the graph executor.
fn run_executor(
    m: &Module,
    params: &[(String, TensorType)],
    args: &[NDArray],
    backend: &ExecBackend,
) -> Result<Vec<NDArray>, String> {
    let named: BTreeMap<String, NDArray> = params
        .iter()
        .map(|(n, _)| n.clone())
        .zip(args.iter().cloned())
        .collect();
    let mut bound = BTreeMap::new();
    if let Some((n, _)) = params.last()
        && params.len() > 1
    {
        bound.insert(n.clone(), named[n].clone());
    }
    backend.run(m, &named, &bound, 2)
}
