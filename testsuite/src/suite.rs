//! The backend registry of the graph-level suites (random graphs, replayed cases,
//! schedules, the conformance matrix): every executor backend the suite instantiates
//! its tests for ([`EXEC_BACKENDS`]: `interp`, `cpu`; a new backend is one more entry),
//! what each declares it does not support (op, dtype), the opt levels, running a module
//! through `build_with` and the graph executor, the comparison with the reference
//! (per-op tolerances from [`crate::ops`], scaled by `KILN_TOL_SCALE`), and the proptest
//! configuration (`KILN_CASES`, `KILN_SEED`).

use std::collections::BTreeMap;
use std::sync::Arc;

use kiln_backend_cranelift::CraneliftBackend;
use kiln_executor::backends::InterpBackend;
use kiln_executor::{Backend, Params, Target, build_with};
use kiln_ir::{DType, Module, NDArray};
use kiln_rewrite::{PassContext, PassReport};
use proptest::test_runner::{Config, RngSeed};

use crate::ops::Tol;

/// The opt levels every test is instantiated for.
pub const OPT_LEVELS: [u8; 4] = [0, 1, 2, 3];

/// An executor backend the suite runs: how to make it, the target it compiles for and
/// what it declares unsupported.
#[derive(Copy, Clone, Debug)]
pub struct ExecBackend {
    /// The backend's name in reports and test names.
    pub name: &'static str,
    /// The target string given to `build_with`.
    pub target: &'static str,
    /// The backend instance.
    pub make: fn() -> Arc<dyn Backend>,
    /// `(op name, dtype)` pairs the backend does not support; `"*"` matches every op.
    /// A case that uses one is skipped and counted as unsupported, never silently.
    pub unsupported: &'static [(&'static str, DType)],
}

fn interp() -> Arc<dyn Backend> {
    Arc::new(InterpBackend)
}

fn cranelift() -> Arc<dyn Backend> {
    Arc::new(CraneliftBackend)
}

/// Every executor backend, in order. The SPIR-V and CUDA backends plug in here.
pub const EXEC_BACKENDS: &[ExecBackend] = &[
    ExecBackend {
        name: "interp",
        target: "interp",
        make: interp,
        unsupported: &[],
    },
    ExecBackend {
        name: "cpu",
        target: "cpu -threads=2",
        make: cranelift,
        unsupported: &[],
    },
];

/// The registered backend called `name`.
pub fn exec_backend(name: &str) -> Option<&'static ExecBackend> {
    EXEC_BACKENDS.iter().find(|b| b.name == name)
}

impl ExecBackend {
    /// The first `(op, dtype)` of `uses` this backend declares unsupported.
    pub fn unsupported_in<'a>(
        &self,
        uses: impl IntoIterator<Item = &'a (String, DType)>,
    ) -> Option<(String, DType)> {
        uses.into_iter()
            .find(|(op, d)| {
                self.unsupported
                    .iter()
                    .any(|(o, ud)| (*o == "*" || o == op) && ud == d)
            })
            .cloned()
    }

    /// Builds `m` at `opt_level` with `bound` bound at build time, sets `inputs`, runs the
    /// graph executor and returns the outputs, flattened.
    pub fn run(
        &self,
        m: &Module,
        inputs: &BTreeMap<String, NDArray>,
        bound: &Params,
        opt_level: u8,
    ) -> Result<Vec<NDArray>, String> {
        Ok(self.run_reported(m, inputs, bound, opt_level)?.0)
    }

    /// [`Self::run`] under any pass context, also returning the optimizer's report.
    pub fn run_reported(
        &self,
        m: &Module,
        inputs: &BTreeMap<String, NDArray>,
        bound: &Params,
        opts: impl Into<PassContext>,
    ) -> Result<(Vec<NDArray>, PassReport), String> {
        let target: Target = self.target.parse().map_err(|e| format!("{e}"))?;
        let lib = build_with(m, &target, bound, opts, (self.make)())
            .map_err(|e| format!("build: {e}"))?;
        let report = lib.pass_report().clone();
        let mut ex = lib.create_executor().map_err(|e| e.to_string())?;
        for (name, v) in inputs {
            if !bound.contains_key(name) {
                ex.set_input(name, v)
                    .map_err(|e| format!("set_input {name}: {e}"))?;
            }
        }
        ex.run().map_err(|e| format!("run: {e}"))?;
        Ok((ex.outputs().map_err(|e| e.to_string())?, report))
    }
}

/// `KILN_TOL_SCALE` (default 1): multiplies every tolerance; below 1 tightens them.
pub fn tol_scale() -> f64 {
    std::env::var("KILN_TOL_SCALE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1.0)
}

/// Compares `got` with the reference's `want`: every element within
/// `atol + rtol * max|want|` (tolerance relative to the tensor's magnitude, so that a
/// chain of ops may cancel without failing), NaN equal to NaN, infinities exact, dtypes
/// and shapes equal. `tol` is scaled by [`tol_scale`].
pub fn compare(got: &[NDArray], want: &[NDArray], tol: Tol) -> Result<(), String> {
    compare_scaled(got, want, tol, 0.0)
}

/// [`compare`] with `rtol` applied to at least `scale` (the largest input magnitude:
/// sums of large values that cancel are as exact as their inputs' magnitude allows).
pub fn compare_scaled(
    got: &[NDArray],
    want: &[NDArray],
    tol: Tol,
    scale: f64,
) -> Result<(), String> {
    if got.len() != want.len() {
        return Err(format!("{} outputs, expected {}", got.len(), want.len()));
    }
    let s = tol_scale();
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let mag = max_abs(w).max(scale);
        let atol = s * (tol.0 + tol.1 * mag);
        g.allclose(w, atol, 0.0)
            .map_err(|e| format!("output {i}: {e}"))?;
    }
    Ok(())
}

/// The largest finite magnitude in `x` (0 when none).
pub fn max_abs(x: &NDArray) -> f64 {
    x.to_f64_vec()
        .into_iter()
        .filter(|v| v.is_finite())
        .fold(0.0f64, |m, v| m.max(v.abs()))
}

/// Proptest cases: `KILN_CASES` from the environment, else `default`.
pub fn cases(default: u32) -> u32 {
    std::env::var("KILN_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The seed of the suite's proptest runs: `KILN_SEED` (a number, or `random` for a fresh
/// seed each run), else a fixed seed so CI runs are reproducible.
pub fn rng_seed() -> RngSeed {
    match std::env::var("KILN_SEED").ok().as_deref() {
        Some("random") => RngSeed::Random,
        Some(s) => s
            .parse()
            .map_or(RngSeed::Fixed(DEFAULT_SEED), RngSeed::Fixed),
        None => RngSeed::Fixed(DEFAULT_SEED),
    }
}

/// The fixed seed of CI runs and of the conformance matrix.
pub const DEFAULT_SEED: u64 = 0x6b69_6c6e;

/// A proptest configuration with [`cases`]`(default)` cases and [`rng_seed`]; no
/// regression files (failures print their case as text IR instead, to be saved under
/// `tests/cases/`).
pub fn config(default: u32) -> Config {
    Config {
        cases: cases(default),
        rng_seed: rng_seed(),
        failure_persistence: None,
        ..Config::default()
    }
}
