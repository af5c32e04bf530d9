//! Targets and compiled modules for the commands that run models: which targets this
//! build of `kiln` serves (the `kiln` crate's backend registry decides), turning a
//! MODEL|FILE argument (`zoo:NAME`, a text IR file, an ONNX file or an exported module)
//! into a [`CompiledModule`] (built in memory, or loaded from an exported file — on the
//! backend of the target recorded in it — and its kernels compiled again), binding
//! inputs, and `kiln compile` itself.

use std::collections::HashSet;
use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use kiln::{CompiledModule, GraphExecutor, NDArray, Registry, Resolved, TargetKind};

use crate::model::{self, Loading, Source};
use crate::progress;
use crate::units::human_us;

/// The opt level used when `--opt-level` is not given (as `tvmc compile`).
pub const DEFAULT_OPT_LEVEL: u8 = 3;

/// The targets this build of `kiln` serves: the `kiln` crate's built-in registry.
pub fn registry() -> Registry {
    Registry::builtin()
}

/// Parses a `--target` value and finds its backend in the registry: unknown kinds and
/// kinds without a backend list the available targets, bad options say what the kind
/// accepts.
pub fn parse_target(text: &str) -> Result<Resolved> {
    Ok(registry().resolve(text)?)
}

/// A module ready for executors, and how it was obtained.
pub struct Prepared {
    /// The compiled module.
    pub module: CompiledModule,
    /// Wall time of the build (or of loading the file and compiling its kernels again),
    /// in milliseconds.
    pub compile_ms: f64,
    /// Whether the module came from an exported file.
    pub loaded: bool,
    /// For a model: the parameters of `@main` the params left unbound (graph inputs),
    /// and whether any params were bound at all.
    pub unbound: Vec<String>,
    /// Whether the model came with params (its own or `--params`).
    pub had_params: bool,
}

impl Prepared {
    /// `built for interp in 12.3 ms (10 kernels)`, `loaded ...` for a file.
    pub fn summary(&self) -> String {
        let what = if *self.module.target().kind() == TargetKind::Ref {
            "the reference interpreter, no kernels".to_string()
        } else {
            let kernels = self.module.kernels().len();
            format!("{kernels} kernel{}", if kernels == 1 { "" } else { "s" })
        };
        format!(
            "{} for {} in {} ({what})",
            if self.loaded { "loaded" } else { "built" },
            self.module.target(),
            human_us(self.compile_ms * 1e3),
        )
    }

    /// A model built without any params although `@main` has several parameters (a
    /// text IR model without `--params`): a note that names them, since its weights are
    /// graph inputs now. `None` otherwise.
    pub fn unbound_note(&self) -> Option<String> {
        if self.loaded || self.had_params || self.unbound.len() < 2 {
            return None;
        }
        Some(format!(
            "note: no params were bound, so all {} parameters of @main are graph inputs ({}); \
             weights among them are set like inputs (random unless given by --input) — \
             bind them with --params FILE.params",
            self.unbound.len(),
            list_names(&self.unbound, 8)
        ))
    }
}

/// Up to `max` names joined by commas, then `and N more`.
pub fn list_names(names: &[String], max: usize) -> String {
    let shown = names
        .iter()
        .take(max)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    match names.len().saturating_sub(max) {
        0 => shown,
        rest => format!("{shown} and {rest} more"),
    }
}

/// Builds MODEL for `target` (`default_target` when none is given, or an error listing
/// the targets), or loads FILE, an exported module, for the target recorded in it (a
/// `target` given must name that kind). `loading` fixes the input shapes of an ONNX model
/// and names a params file;
/// `opt_level` applies to models only: an exported file was optimized when it was
/// compiled.
pub fn prepare(
    spec: &str,
    loading: &Loading,
    target: Option<&str>,
    default_target: Option<&str>,
    opt_level: Option<u8>,
) -> Result<Prepared> {
    match model::open(spec, loading)? {
        Source::Model(model) => {
            let Some(text) = target.or(default_target) else {
                bail!(
                    "give the target to build {spec} for with --target (available: {})",
                    registry().targets_text()
                );
            };
            let resolved = parse_target(text)?;
            build_model(spec, &model, &resolved, opt_level)
        }
        Source::Exported(path) => {
            if opt_level.is_some() {
                bail!(
                    "--opt-level applies when building a model; `{spec}` is an exported \
                     module, optimized when it was compiled"
                );
            }
            let wanted = target.map(parse_target).transpose()?;
            let start = Instant::now();
            let module =
                progress::step(format!("loading {spec} and compiling its kernels"), || {
                    registry().load_module(&path)
                })?;
            if let Some(wanted) = wanted
                && module.target().kind() != wanted.target.kind()
            {
                bail!(
                    "`{spec}` is an exported module compiled for `{}`, not `{}` (leave out \
                     --target to run it on the target recorded in it)",
                    module.target(),
                    wanted.target
                );
            }
            Ok(Prepared {
                module,
                compile_ms: start.elapsed().as_secs_f64() * 1e3,
                loaded: true,
                unbound: Vec::new(),
                had_params: true,
            })
        }
    }
}

/// Builds an opened model for a resolved target.
fn build_model(
    spec: &str,
    model: &kiln::Model,
    resolved: &Resolved,
    opt_level: Option<u8>,
) -> Result<Prepared> {
    let start = Instant::now();
    let opt_level = opt_level.unwrap_or(DEFAULT_OPT_LEVEL);
    let built = progress::step(
        format!(
            "building {spec} for {} (optimize, lower, compile)",
            resolved.target
        ),
        || {
            kiln::build_on(
                &model.module,
                &resolved.target,
                resolved.backend.as_deref(),
                &model.params,
                opt_level,
            )
        },
    )
    .with_context(|| format!("cannot build {spec} for {}", resolved.target))?;
    let prepared = Prepared {
        module: built.module,
        compile_ms: start.elapsed().as_secs_f64() * 1e3,
        loaded: false,
        unbound: built.unbound,
        had_params: !model.params.is_empty(),
    };
    if let Some(note) = prepared.unbound_note() {
        eprintln!("{note}");
    }
    Ok(prepared)
}

/// Sets the inputs of `exec`: each `NAME=FILE.npy` in `specs` from its file, every other
/// input random from `seed` (input `i` uses seed `seed + i`, so an input's values do not
/// depend on which others are given).
pub fn bind_inputs(
    exec: &mut GraphExecutor,
    module: &CompiledModule,
    specs: &[String],
    seed: u64,
) -> Result<()> {
    let info = exec.get_input_info();
    let mut given = HashSet::new();
    for spec in specs {
        let (name, path) = spec
            .split_once('=')
            .with_context(|| format!("--input `{spec}` must look like NAME=FILE.npy"))?;
        if !info.iter().any(|t| t.name == name) && !module.params().contains_key(name) {
            let names: Vec<&str> = info.iter().map(|t| t.name.as_str()).collect();
            bail!(
                "--input `{name}`: the model has no input of that name (inputs: {})",
                if names.is_empty() {
                    "none".to_string()
                } else {
                    names.join(", ")
                }
            );
        }
        let value = NDArray::read_npy(path).with_context(|| format!("--input {name}"))?;
        exec.set_input(name, &value)
            .with_context(|| format!("--input {name}"))?;
        given.insert(name.to_string());
    }
    for (i, t) in info.iter().enumerate() {
        if given.contains(&t.name) {
            continue;
        }
        let what = format!("random input {}", t.name);
        kiln::layers::ir::tensor::budget::checked_bytes(&what, &t.shape, t.dtype)?;
        let value = NDArray::random(t.shape.clone(), t.dtype, seed.wrapping_add(i as u64));
        exec.set_input(i, &value)
            .with_context(|| format!("random input {}", t.name))?;
    }
    Ok(())
}

/// Arguments of `kiln compile`.
pub struct CompileArgs {
    /// `zoo:NAME`, a text IR file or an ONNX file.
    pub model: String,
    /// `--shape` overrides of ONNX input shapes and the `--params` file.
    pub loading: Loading,
    /// The `--target` text.
    pub target: String,
    /// Where to write the exported module.
    pub output: std::path::PathBuf,
    /// `--opt-level`, if given.
    pub opt_level: Option<u8>,
}

/// `kiln compile MODEL --target T -o FILE [--opt-level N]`: builds MODEL, exports it to
/// one file, and prints the kernel count, the build time (and its steps) and the memory
/// plan.
pub fn compile(args: &CompileArgs) -> Result<()> {
    let resolved = parse_target(&args.target)?;
    if resolved.backend.is_none() {
        bail!(
            "target `ref` runs graph-IR models in the reference interpreter and compiles \
             nothing to export; compile for a target with kernels ({})",
            compiling_targets()
        );
    }
    let Source::Model(model) = model::open(&args.model, &args.loading)? else {
        bail!(
            "`{}` is already an exported module; compile takes a model (zoo:NAME, a text \
             IR file or an ONNX file)",
            args.model
        );
    };
    let target = &resolved.target;
    let prepared = build_model(&args.model, &model, &resolved, args.opt_level)?;
    let module = &prepared.module;
    let bytes = module
        .export_bytes()
        .with_context(|| format!("cannot export {}", args.model))?;
    write_file(&args.output, &bytes)?;
    println!(
        "compiled {} for {target} (opt-level {}) in {}: {} kernels",
        args.model,
        args.opt_level.unwrap_or(DEFAULT_OPT_LEVEL),
        human_us(prepared.compile_ms * 1e3),
        module.kernels().len()
    );
    let steps: Vec<String> = module
        .build_log()
        .iter()
        .map(|(name, ms)| format!("{name} {}", human_us(ms * 1e3)))
        .collect();
    println!("steps: {}", steps.join(", "));
    let report = module.memory_report();
    let pct = |a: u64, b: u64| {
        if b == 0 {
            100.0
        } else {
            100.0 * a as f64 / b as f64
        }
    };
    println!(
        "memory plan: {} bytes planned vs {} bytes naive ({:.1}%), {} tensors in {} storage \
         blocks; intermediates {} bytes planned vs {} bytes naive ({:.1}%)",
        report.planned_bytes,
        report.naive_bytes,
        pct(report.planned_bytes, report.naive_bytes),
        report.num_entries,
        report.num_storage,
        report.intermediate_planned_bytes,
        report.intermediate_naive_bytes,
        pct(
            report.intermediate_planned_bytes,
            report.intermediate_naive_bytes
        ),
    );
    println!(
        "graph inputs (set before each run): {}",
        if prepared.unbound.is_empty() {
            "none".to_string()
        } else {
            list_names(&prepared.unbound, 16)
        }
    );
    println!("wrote {} ({} bytes)", args.output.display(), bytes.len());
    Ok(())
}

/// The targets that compile kernels (every registered backend's), for messages.
pub fn compiling_targets() -> String {
    registry()
        .backends()
        .iter()
        .map(|b| b.target_kind().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Writes `bytes` to `path`, naming the path in the error.
fn write_file(path: &Path, bytes: &[u8]) -> Result<()> {
    std::fs::write(path, bytes).with_context(|| format!("cannot write `{}`", path.display()))
}
