//! The executor backends of the graph-level suites (random graphs, replayed cases,
//! schedules, the conformance matrix): [`exec_backends`] takes every backend of the
//! `kiln` crate's registry (`interp`, `cpu`; a new backend needs nothing here; `cuda` in
//! the PTX interpreter where the build has no CUDA runtime), and
//! [`ExecBackend::new`] takes a user's own value; each carries the target it is tested
//! with and what it declares unsupported (op, dtype), both from the backend itself. Also
//! here: the opt levels, running a module through `kiln::build_on` and the graph
//! executor, the comparison with the reference (per-op tolerances from [`crate::ops`],
//! scaled by `KILN_TOL_SCALE`), and the proptest configuration (`KILN_CASES`,
//! `KILN_SEED`).

use std::collections::BTreeMap;
use std::sync::Arc;

use kiln::{Backend, Params, PassContext, PassReport, Registry, Target, Unsupported};
use kiln_ir::{DType, Module, NDArray};
use proptest::test_runner::{Config, RngSeed};

use crate::ops::Tol;

/// The opt levels every test is instantiated for.
pub const OPT_LEVELS: [u8; 4] = [0, 1, 2, 3];

/// An executor backend the suite runs: the backend, the target it compiles for and what
/// it declares unsupported.
#[derive(Clone, Debug)]
pub struct ExecBackend {
    /// The backend's name in reports and test names: its target kind (`cpu`).
    pub name: String,
    /// The target given to the build (the backend's test target, `cpu -threads=2`).
    pub target: Target,
    /// The backend instance.
    pub backend: Arc<dyn Backend>,
    /// What the backend declares unsupported. A case that uses one of these is skipped
    /// and counted as unsupported, never silently.
    pub unsupported: Vec<Unsupported>,
}

/// Every backend the suites run: the `kiln` crate's built-in registry, in order, then —
/// when this build has no CUDA runtime (no `cuda` feature), so the registry serves no
/// `cuda` — the `cuda` backend running in the PTX interpreter ([`crate::ptx_sim`]), so
/// that every suite checks the PTX kiln generates.
pub fn exec_backends() -> Vec<ExecBackend> {
    let mut out = exec_backends_of(&Registry::builtin());
    if !out.iter().any(|b| b.name == "cuda") {
        out.push(ExecBackend::new(crate::ptx_sim::cuda_backend()));
    }
    out
}

/// Every backend of `registry`, in order.
pub fn exec_backends_of(registry: &Registry) -> Vec<ExecBackend> {
    registry
        .backends()
        .iter()
        .map(|b| ExecBackend::new(b.clone()))
        .collect()
}

/// The built-in registry's backend serving the target kind `name`.
pub fn exec_backend(name: &str) -> Option<ExecBackend> {
    exec_backends().into_iter().find(|b| b.name == name)
}

impl ExecBackend {
    /// The suite's view of `backend`: named after its target kind, run with its test
    /// target, skipping what it declares unsupported.
    pub fn new(backend: Arc<dyn Backend>) -> ExecBackend {
        ExecBackend {
            name: backend.target_kind().to_string(),
            target: backend.test_target(),
            unsupported: backend.unsupported(),
            backend,
        }
    }

    /// The first `(op, dtype)` of `uses` this backend declares unsupported.
    pub fn unsupported_in<'a>(
        &self,
        uses: impl IntoIterator<Item = &'a (String, DType)>,
    ) -> Option<(String, DType)> {
        uses.into_iter()
            .find(|(op, d)| self.unsupported.iter().any(|u| u.covers(op, *d)))
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
        let built = kiln::build_on(m, &self.target, Some(&*self.backend), bound, opts)
            .map_err(|e| format!("build: {e}"))?;
        let mut ex = built.create_executor().map_err(|e| e.to_string())?;
        for (name, v) in inputs {
            if !bound.contains_key(name) {
                ex.set_input(name, v)
                    .map_err(|e| format!("set_input {name}: {e}"))?;
            }
        }
        ex.run().map_err(|e| format!("run: {e}"))?;
        Ok((ex.outputs().map_err(|e| e.to_string())?, built.report))
    }
}

/// Whether the suite runs as this crate's own tests or examples (cargo sets
/// `CARGO_MANIFEST_DIR` to this crate's folder), not from someone else's crate: only then
/// do failure messages and regression files point into this repository's folders.
pub fn in_this_repo() -> bool {
    std::env::var("CARGO_MANIFEST_DIR").is_ok_and(|d| d == env!("CARGO_MANIFEST_DIR"))
}

/// Where to save a failing case so that the suite replays it: this crate's
/// `tests/cases/` when the suite runs inside kiln's own repository, otherwise any file
/// of the user's (the suite's folders are not theirs).
pub fn save_hint() -> String {
    if in_this_repo() {
        "save as testsuite/tests/cases/NAME.relay to replay".to_string()
    } else {
        "save it as a text IR file and replay it with `kiln_testsuite::cases::replay`".to_string()
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
