//! `kiln run`: binds inputs (from `.npy` files or random from a seed) and params, runs
//! the model on the chosen target, prints each output's type, first values and the
//! time, and writes output 0 to `--output`.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use kiln_ir::NDArray;
use kiln_ir::interp::{Inputs, evaluate};

use crate::model::load;

/// The targets this build of the command knows.
const TARGETS: &[&str] = &["ref"];

pub struct RunArgs {
    pub model: String,
    pub target: String,
    pub inputs: Vec<String>,
    pub output: Option<PathBuf>,
    pub seed: u64,
}

pub fn run(args: &RunArgs) -> Result<()> {
    if !TARGETS.contains(&args.target.as_str()) {
        bail!(
            "unknown target `{}` (available: {})",
            args.target,
            TARGETS.join(", ")
        );
    }
    let model = load(&args.model)?;
    let m = &model.module;
    let main = m.main()?;
    let mut inputs: Inputs = model.params.clone();
    for spec in &args.inputs {
        let (name, path) = spec
            .split_once('=')
            .with_context(|| format!("--input `{spec}` must look like NAME=FILE.npy"))?;
        if !main.params.iter().any(|&p| m.var_name(p) == Some(name)) {
            let names: Vec<&str> = main.params.iter().filter_map(|&p| m.var_name(p)).collect();
            bail!(
                "--input `{name}`: the model has no input of that name (inputs: {})",
                names.join(", ")
            );
        }
        let value = NDArray::read_npy(path).with_context(|| format!("--input {name}"))?;
        inputs.insert(name.to_string(), value);
    }
    for (i, &p) in main.params.iter().enumerate() {
        let name = m.var_name(p).unwrap_or_default();
        if inputs.contains_key(name) {
            continue;
        }
        let Some(t) = m.ty(p).as_tensor() else {
            bail!(
                "input %{name} has type {}, which kiln cannot fill at random",
                m.ty(p)
            );
        };
        let seed = args.seed.wrapping_add(i as u64);
        inputs.insert(
            name.to_string(),
            NDArray::random(t.shape.clone(), t.dtype, seed),
        );
    }
    let start = Instant::now();
    let outputs = evaluate(m, &inputs)?.flatten();
    let elapsed = start.elapsed();
    for (i, out) in outputs.iter().enumerate() {
        println!("output {i}: {} {}", out.ty(), out.preview(10));
    }
    println!(
        "target {}: ran in {:.3} s",
        args.target,
        elapsed.as_secs_f64()
    );
    if let Some(path) = &args.output {
        let first = outputs.first().context("the model has no outputs")?;
        first.write_npy(path)?;
        println!("wrote output 0 to {}", path.display());
    }
    Ok(())
}
