//! `kiln run`: builds MODEL (or loads FILE, an exported module) for the chosen target,
//! binds inputs (from `.npy` files or random from a seed), runs it once through the graph
//! executor, prints each output's type, first values and the times, and writes output 0
//! to `--output`. `--target ref` is the graph-IR reference interpreter behind the same
//! executor API (the default for models); an exported module runs on the target recorded
//! in it. `--check` runs the model on `ref` too, with the same inputs, and prints the
//! largest absolute difference of the outputs (an error above [`CHECK_ATOL`]).

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use kiln::{NDArray, TargetKind};

use crate::compile::{bind_inputs, prepare};
use crate::model::{self, Loading, Source};
use crate::progress::{self, Progress};
use crate::units::human_duration;

/// The largest absolute difference from `ref` that `--check` accepts.
pub const CHECK_ATOL: f64 = 1e-4;

/// Arguments of `kiln run`.
pub struct RunArgs {
    /// `zoo:NAME`, a text IR file, an ONNX file or an exported module.
    pub model: String,
    /// `--shape` overrides of ONNX input shapes and the `--params` file.
    pub loading: Loading,
    /// The `--target` text, if given (models default to `ref`; an exported module runs
    /// on the target recorded in it).
    pub target: Option<String>,
    /// `NAME=FILE.npy` inputs.
    pub inputs: Vec<String>,
    /// Where to write output 0.
    pub output: Option<PathBuf>,
    /// Seed for the inputs not given.
    pub seed: u64,
    /// `--opt-level`, if given.
    pub opt_level: Option<u8>,
    /// Compare the outputs with `ref`'s.
    pub check: bool,
}

/// `kiln run MODEL|FILE --target T ...`.
pub fn run(args: &RunArgs) -> Result<()> {
    let prepared = prepare(
        &args.model,
        &args.loading,
        args.target.as_deref(),
        Some("ref"),
        args.opt_level,
    )?;
    let module = &prepared.module;
    let mut exec = module.create_executor()?;
    bind_inputs(&mut exec, module, &args.inputs, args.seed)?;
    let start = Instant::now();
    {
        let message = format!("running on {}", module.target());
        // The reference interpreter runs the graph in one piece: nothing to count.
        let progress = if *module.target().kind() == TargetKind::Ref {
            Progress::spinner(message)
        } else {
            Progress::bar(format!("{message}, kernel calls"))
        };
        exec.run_observed(&mut |done, total| progress.set(done, total))?;
        exec.synchronize()?;
    }
    let elapsed = start.elapsed();
    let outputs = exec.outputs()?;
    for (i, out) in outputs.iter().enumerate() {
        println!("output {i}: {} {}", out.ty(), out.preview(10));
    }
    println!("{}", prepared.summary());
    println!(
        "target {}: ran in {}",
        module.target(),
        human_duration(elapsed)
    );
    if let Some(path) = &args.output {
        let first = outputs.first().context("the model has no outputs")?;
        first.write_npy(path)?;
        println!("wrote output 0 to {}", path.display());
    }
    if args.check {
        check(args, &outputs)?;
    }
    Ok(())
}

/// `--check`: runs the model on `ref` (the graph-IR reference interpreter) with the same
/// inputs and prints the largest absolute difference; above [`CHECK_ATOL`] is an error.
fn check(args: &RunArgs, outputs: &[NDArray]) -> Result<()> {
    if let Source::Exported(_) = model::open(&args.model, &args.loading)? {
        bail!(
            "--check runs the model on `ref`, and `{}` is an exported module (no graph IR \
             left to interpret); check the model it was compiled from",
            args.model
        );
    }
    let reference = prepare(
        &args.model,
        &args.loading,
        Some("ref"),
        None,
        args.opt_level,
    )?;
    let mut exec = reference.module.create_executor()?;
    bind_inputs(&mut exec, &reference.module, &args.inputs, args.seed)?;
    progress::step("running on ref to check", || exec.run())?;
    let want = exec.outputs()?;
    if want.len() != outputs.len() {
        bail!(
            "check against ref: {} outputs, ref has {}",
            outputs.len(),
            want.len()
        );
    }
    let mut worst = 0.0f64;
    for (g, w) in outputs.iter().zip(&want) {
        if g.shape() != w.shape() || g.dtype() != w.dtype() {
            bail!(
                "check against ref: output {} differs from ref's {}",
                g.ty(),
                w.ty()
            );
        }
        for (a, b) in g.to_f64_vec().into_iter().zip(w.to_f64_vec()) {
            let d = if a == b || (a.is_nan() && b.is_nan()) {
                0.0
            } else {
                (a - b).abs()
            };
            worst = worst.max(if d.is_nan() { f64::INFINITY } else { d });
        }
    }
    println!(
        "check against ref: max |diff| = {worst:.3e} over {} output{} (tolerance {CHECK_ATOL:e})",
        want.len(),
        if want.len() == 1 { "" } else { "s" }
    );
    if worst > CHECK_ATOL {
        bail!("check against ref failed: max |diff| {worst:.3e} is above {CHECK_ATOL:e}");
    }
    Ok(())
}
