//! `kiln run`: builds MODEL (or loads FILE, an exported module) for the chosen target,
//! binds inputs (from `.npy` files or random from a seed), runs it once through the graph
//! executor, prints each output's type, first values and the times, and writes output 0
//! to `--output`. `--target ref` is the graph-IR reference interpreter behind the same
//! executor API.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};

use crate::compile::{bind_inputs, parse_target, prepare};
use crate::model::Shapes;

/// Arguments of `kiln run`.
pub struct RunArgs {
    /// `zoo:NAME`, a text IR file, an ONNX file or an exported module.
    pub model: String,
    /// `--shape` overrides of ONNX input shapes.
    pub shapes: Shapes,
    /// The `--target` text.
    pub target: String,
    /// `NAME=FILE.npy` inputs.
    pub inputs: Vec<String>,
    /// Where to write output 0.
    pub output: Option<PathBuf>,
    /// Seed for the inputs not given.
    pub seed: u64,
    /// `--opt-level`, if given.
    pub opt_level: Option<u8>,
}

/// `kiln run MODEL|FILE --target T ...`.
pub fn run(args: &RunArgs) -> Result<()> {
    let target = parse_target(&args.target)?;
    let prepared = prepare(&args.model, &args.shapes, &target, args.opt_level)?;
    let module = &prepared.module;
    let mut exec = module.create_executor()?;
    bind_inputs(&mut exec, module, &args.inputs, args.seed)?;
    let start = Instant::now();
    exec.run()?;
    exec.synchronize()?;
    let elapsed = start.elapsed();
    let outputs = exec.outputs()?;
    for (i, out) in outputs.iter().enumerate() {
        println!("output {i}: {} {}", out.ty(), out.preview(10));
    }
    println!("{}", prepared.summary());
    println!("target {target}: ran in {:.3} s", elapsed.as_secs_f64());
    if let Some(path) = &args.output {
        let first = outputs.first().context("the model has no outputs")?;
        first.write_npy(path)?;
        println!("wrote output 0 to {}", path.display());
    }
    Ok(())
}
