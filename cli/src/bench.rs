//! `kiln bench` (the graph executor's `benchmark`, as a readable summary or one JSON
//! object) and `kiln profile` (the debug executor's per-node table).

use std::path::PathBuf;

use anyhow::{Result, bail};
use kiln::{BenchmarkOptions, Clock, DebugExecutor, Target, TargetKind};
use serde::Serialize;

use crate::compile::{bind_inputs, compiling_targets, prepare};
use crate::model::Loading;
use crate::progress::{self, Progress};

/// Arguments of `kiln bench`.
pub struct BenchArgs {
    /// `zoo:NAME`, a text IR file, an ONNX file or an exported module.
    pub model: String,
    /// `--shape` overrides of ONNX input shapes and the `--params` file.
    pub loading: Loading,
    /// The `--target` text (needed for models; an exported module runs on the target
    /// recorded in it).
    pub target: Option<String>,
    /// `NAME=FILE.npy` inputs.
    pub inputs: Vec<String>,
    /// Seed for the inputs not given.
    pub seed: u64,
    /// `--opt-level`, if given.
    pub opt_level: Option<u8>,
    /// Measurements to take.
    pub repeat: usize,
    /// Runs per measurement.
    pub number: usize,
    /// Grow `number` until a measurement takes at least this long (0: off).
    pub min_repeat_ms: f64,
    /// Time the input and output copies too.
    pub end_to_end: bool,
    /// Print one JSON object instead of the summary.
    pub json: bool,
}

/// What `kiln bench --json` prints: milliseconds throughout.
#[derive(Serialize)]
struct BenchReport {
    compile_ms: f64,
    mean_ms: f64,
    median_ms: f64,
    std_ms: f64,
    min_ms: f64,
    max_ms: f64,
    results_ms: Vec<f64>,
    /// `host`, or `device: HOW` (the device's timer of the kernel calls, e.g. Vulkan
    /// timestamp queries).
    clock: String,
}

/// `kiln bench MODEL|FILE --target T [--repeat N --number N --min-repeat-ms M] [--json]`.
pub fn bench(args: &BenchArgs) -> Result<()> {
    // An hour per measurement at most, so the growing run count stays bounded.
    if !(0.0..=3_600_000.0).contains(&args.min_repeat_ms) {
        bail!(
            "--min-repeat-ms {} must be a number of milliseconds from 0 to 3600000",
            args.min_repeat_ms
        );
    }
    let prepared = prepare(
        &args.model,
        &args.loading,
        args.target.as_deref(),
        None,
        args.opt_level,
    )?;
    let module = &prepared.module;
    let mut exec = module.create_executor()?;
    bind_inputs(&mut exec, module, &args.inputs, args.seed)?;
    let progress = Progress::bar(format!("measuring on {}", module.target()));
    progress.set(0, args.repeat);
    let result = exec.benchmark_observed(
        &BenchmarkOptions {
            repeat: args.repeat,
            number: args.number,
            min_repeat_ms: args.min_repeat_ms,
            end_to_end: args.end_to_end,
            ..BenchmarkOptions::default()
        },
        &mut |done| progress.set(done, args.repeat),
    )?;
    drop(progress);
    let ms = |s: f64| s * 1e3;
    let report = BenchReport {
        compile_ms: prepared.compile_ms,
        mean_ms: ms(result.mean),
        median_ms: ms(result.median),
        std_ms: ms(result.std),
        min_ms: ms(result.min),
        max_ms: ms(result.max),
        results_ms: result.results.iter().map(|&s| ms(s)).collect(),
        clock: match &result.clock {
            Clock::Host => "host".to_string(),
            Clock::Device(how) => format!("device: {how}"),
        },
    };
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
        return Ok(());
    }
    println!("{}: {}", args.model, prepared.summary());
    println!(
        "{} repeats of at least {} runs{} ({}): mean {:.4} ms, median {:.4} ms, std {:.4} ms, \
         min {:.4} ms, max {:.4} ms",
        args.repeat,
        args.number,
        if args.end_to_end { " (end to end)" } else { "" },
        result.clock,
        report.mean_ms,
        report.median_ms,
        report.std_ms,
        report.min_ms,
        report.max_ms
    );
    let results: Vec<String> = report
        .results_ms
        .iter()
        .map(|r| format!("{r:.4}"))
        .collect();
    println!("results (ms per run): {}", results.join(" "));
    Ok(())
}

/// Arguments of `kiln profile`.
pub struct ProfileArgs {
    /// `zoo:NAME`, a text IR file, an ONNX file or an exported module.
    pub model: String,
    /// `--shape` overrides of ONNX input shapes and the `--params` file.
    pub loading: Loading,
    /// The `--target` text (needed for models; an exported module runs on the target
    /// recorded in it).
    pub target: Option<String>,
    /// `NAME=FILE.npy` inputs.
    pub inputs: Vec<String>,
    /// Seed for the inputs not given.
    pub seed: u64,
    /// `--opt-level`, if given.
    pub opt_level: Option<u8>,
    /// Calls of each kernel to average over.
    pub number: usize,
    /// Where to dump every node's output as `.npy`, if anywhere.
    pub dump_dir: Option<PathBuf>,
}

/// `kiln profile MODEL --target T [--number N] [--dump-dir DIR]`: the debug executor's
/// table (node, kernel, time, share, shape), one row per kernel call.
pub fn profile(args: &ProfileArgs) -> Result<()> {
    if let Some(text) = &args.target
        && *text.parse::<Target>()?.kind() == TargetKind::Ref
    {
        bail!(
            "profile times kernels, and target `ref` (the reference interpreter) has none; \
             profile on a compiling target ({})",
            compiling_targets()
        );
    }
    let prepared = prepare(
        &args.model,
        &args.loading,
        args.target.as_deref(),
        None,
        args.opt_level,
    )?;
    let module = &prepared.module;
    let mut exec = DebugExecutor::new(module)?;
    bind_inputs(&mut exec, module, &args.inputs, args.seed)?;
    let profile = progress::step(
        format!(
            "timing every kernel on {}, {} calls each",
            module.target(),
            args.number
        ),
        || exec.profile(args.number),
    )?;
    println!("{}: {}", args.model, prepared.summary());
    println!(
        "per-node times, mean of {} call{} each ({}):",
        args.number,
        if args.number == 1 { "" } else { "s" },
        profile.clock
    );
    println!("{profile}");
    if let Some(dir) = &args.dump_dir {
        let paths = exec.dump_outputs(dir)?;
        println!("dumped {} node outputs to {}", paths.len(), dir.display());
    }
    Ok(())
}
