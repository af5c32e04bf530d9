//! One op suite, every backend (STYLE habit 3): one-op modules over random shapes and
//! attributes, built once and checked on every registered [`Backend`] against the
//! graph-IR reference interpreter, with tolerances as data ([`Tol`]). The cases live in
//! `tests/ops.rs`; a new backend is one more [`Backend`] variant.

use std::collections::BTreeMap;

use kiln_ir::{DType, Module, NDArray, Op, TensorType, Type};
use kiln_te::tir::{self, PrimFunc};
use kiln_te::topi::TargetKind;
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

/// Where a case runs.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Backend {
    /// Lowered under the CPU default schedule, run by the loop-IR interpreter.
    TirCpu,
    /// Lowered under the GPU default schedule (threads, shared memory, barriers), run by
    /// the loop-IR interpreter.
    TirGpu,
    /// `build` for `interp` and the graph executor (graph JSON, memory plan, device
    /// buffers with explicit copies, a param bound at build time).
    Interp,
    /// `build_with` the Cranelift backend for `cpu -threads=2` and the graph executor.
    Cpu,
}

/// Every backend the suite runs, in order.
pub const BACKENDS: [Backend; 4] = [
    Backend::TirCpu,
    Backend::TirGpu,
    Backend::Interp,
    Backend::Cpu,
];

impl Backend {
    /// The backend's name in failure messages.
    pub fn name(self) -> &'static str {
        match self {
            Backend::TirCpu => "tir-cpu",
            Backend::TirGpu => "tir-gpu",
            Backend::Interp => "interp",
            Backend::Cpu => "cpu",
        }
    }

    /// Runs `m` with `args` bound to `params` in order and returns its outputs.
    pub fn run(
        self,
        m: &Module,
        params: &[(String, TensorType)],
        args: &[NDArray],
    ) -> Result<Vec<NDArray>, String> {
        match self {
            Backend::TirCpu => run_lowered(m, args, TargetKind::Cpu),
            Backend::TirGpu => run_lowered(m, args, TargetKind::Gpu),
            Backend::Interp => run_executor(m, params, args, "interp"),
            Backend::Cpu => run_executor(m, params, args, "cpu"),
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

/// Runs `m` in the reference interpreter and on every backend in [`BACKENDS`]; every
/// output must agree within `tol`. The error names the backend and the worst element.
pub fn check_all(
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
    for backend in BACKENDS {
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
    Ok(())
}

/// Lowers `m` for `target`, checks each kernel (verify, text round trip) and returns them.
pub fn lower_checked(m: &Module, target: TargetKind) -> Result<Vec<PrimFunc>, String> {
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
fn run_lowered(m: &Module, args: &[NDArray], target: TargetKind) -> Result<Vec<NDArray>, String> {
    let ks = lower_checked(m, target)?;
    let [k] = &ks[..] else {
        return Err(format!("expected one kernel, got {}", ks.len()));
    };
    tir::run_with_inputs(k, args).map_err(|e| format!("run: {e}\n{k}"))
}

/// Builds on the registered executor backend `name` ([`crate::suite::EXEC_BACKENDS`]) at
/// opt level 2 with the last parameter bound as a param at build time (when there are
/// several), sets the others as inputs, runs the graph executor.
fn run_executor(
    m: &Module,
    params: &[(String, TensorType)],
    args: &[NDArray],
    name: &str,
) -> Result<Vec<NDArray>, String> {
    let backend = crate::suite::exec_backend(name).ok_or(format!("no backend `{name}`"))?;
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
