//! Loading a MODEL argument (`zoo:NAME`, a text IR file or an ONNX file), telling it
//! apart from an exported module file (by its magic bytes, never its extension), the
//! `--shape NAME=DIMS` overrides for ONNX inputs, and `kiln inspect` (graph IR as loaded
//! or optimized with the pass report, or the loop IR of every kernel for a target kind).
//!
//! An ONNX model is recognised by the extension `.onnx`, or, for any other name, by
//! failing to parse as text IR and then decoding as an ONNX `ModelProto`.

use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use kiln::layers::executor::export::MAGIC;
use kiln::layers::frontend_onnx::Error as OnnxError;
use kiln::layers::ir::text::{PrintOptions, print_module};
use kiln::layers::te::topi::kernels_of;
use kiln::{Model, Target, TargetKind};

use crate::progress;

/// Input shapes fixed by `--shape NAME=DIMS`, by input name.
pub type Shapes = kiln::Shapes;

/// How a MODEL argument is loaded: `--shape` overrides of ONNX input shapes, and
/// `--params`, a file of weights in TVM's params format (`tvm.relay.save_param_dict`,
/// `kiln::save_params`) bound to `@main`'s parameters by name, over the model's own.
#[derive(Clone, Debug, Default)]
pub struct Loading {
    /// `--shape` overrides.
    pub shapes: Shapes,
    /// `--params FILE`.
    pub params: Option<PathBuf>,
}

impl Loading {
    /// Parses the `--shape` values and takes the `--params` path.
    pub fn parse(shapes: &[String], params: Option<PathBuf>) -> Result<Loading> {
        Ok(Loading {
            shapes: parse_shapes(shapes)?,
            params,
        })
    }
}

/// Parses `--shape` values (`NAME=1,3,224,224`; `NAME=` is a scalar). A name given twice
/// is an error.
fn parse_shapes(specs: &[String]) -> Result<Shapes> {
    let mut shapes = Shapes::new();
    for spec in specs {
        let (name, dims) = spec
            .rsplit_once('=')
            .filter(|(name, _)| !name.is_empty())
            .with_context(|| format!("--shape `{spec}` must look like NAME=1,3,224,224"))?;
        let dims = if dims.trim().is_empty() {
            vec![]
        } else {
            dims.split(',')
                .map(|d| d.trim().parse::<usize>())
                .collect::<Result<Vec<_>, _>>()
                .map_err(|_| {
                    anyhow::anyhow!(
                        "--shape `{spec}`: the dimensions must be whole numbers separated by \
                         commas (NAME=1,3,224,224)"
                    )
                })?
        };
        if shapes.insert(name.to_string(), dims).is_some() {
            bail!("--shape gives `{name}` more than once");
        }
    }
    Ok(shapes)
}

/// What a MODEL|FILE argument names.
pub enum Source {
    /// A graph-IR model (`zoo:NAME` or a text IR file), still to be built.
    Model(Box<Model>),
    /// A module exported by `kiln compile` (the file starts with the export magic).
    Exported(PathBuf),
}

/// Whether the file at `path` starts with the exported-module magic (or, cut short, with
/// at least its first four bytes).
fn has_module_magic(path: &Path) -> Result<bool> {
    let mut file =
        std::fs::File::open(path).with_context(|| format!("cannot read `{}`", path.display()))?;
    let mut head = Vec::with_capacity(MAGIC.len());
    file.by_ref()
        .take(MAGIC.len() as u64)
        .read_to_end(&mut head)
        .with_context(|| format!("cannot read `{}`", path.display()))?;
    // A file cut inside the magic still claims to be a module; loading it says why not.
    Ok(head == MAGIC || (head.len() >= 4 && head.len() < MAGIC.len() && MAGIC.starts_with(&head)))
}

/// Opens a MODEL|FILE argument: `zoo:NAME`, an exported module (recognised by its magic
/// bytes), an ONNX file or a text IR file, as `loading` says.
pub fn open(spec: &str, loading: &Loading) -> Result<Source> {
    if !spec.starts_with("zoo:") {
        let path = Path::new(spec);
        if path.is_file() && has_module_magic(path)? {
            if loading.params.is_some() {
                bail!(
                    "--params binds the weights of a model; `{spec}` is a module exported \
                     by `kiln compile`, which carries the params it was compiled with"
                );
            }
            if !loading.shapes.is_empty() {
                bail!(
                    "--shape fixes the input shapes of ONNX models; `{spec}` is a module \
                     exported by `kiln compile`, whose shapes were fixed when it was compiled"
                );
            }
            return Ok(Source::Exported(path.to_path_buf()));
        }
    }
    Ok(Source::Model(Box::new(load(spec, loading)?)))
}

/// Loads `zoo:NAME`, imports an ONNX file or parses a text IR file, then verifies it
/// (`kiln::load`), and binds the `--params` file over its params; a dynamic ONNX input
/// gets a hint to fix it with `--shape`.
pub fn load(spec: &str, loading: &Loading) -> Result<Model> {
    let mut model = load_model(spec, &loading.shapes)?;
    if let Some(path) = &loading.params {
        let bytes =
            std::fs::read(path).with_context(|| format!("cannot read `{}`", path.display()))?;
        let params =
            kiln::load_params(&bytes).with_context(|| format!("--params `{}`", path.display()))?;
        let main = model.module.main()?;
        let names: Vec<&str> = main
            .params
            .iter()
            .filter_map(|&p| model.module.var_name(p))
            .collect();
        if let Some(name) = params.keys().find(|n| !names.contains(&n.as_str())) {
            bail!(
                "--params `{}`: `{name}` is no parameter of {spec}'s @main (its parameters: {})",
                path.display(),
                names.join(", ")
            );
        }
        model.params.extend(params);
    }
    Ok(model)
}

/// [`load`] without `--params`.
fn load_model(spec: &str, shapes: &Shapes) -> Result<Model> {
    progress::step(format!("loading {spec}"), || kiln::load(spec, shapes)).map_err(|e| match &e {
        kiln::Error::Onnx(onnx)
            if matches!(onnx.root(), OnnxError::InvalidModel(m) if m.contains("dynamic")) =>
        {
            anyhow::anyhow!(
                "cannot import ONNX model `{spec}`: {e}; fix it with --shape NAME=DIMS \
                 (e.g. --shape input=1,3,224,224)"
            )
        }
        kiln::Error::Onnx(_) => {
            anyhow::Error::new(e).context(format!("cannot import ONNX model `{spec}`"))
        }
        kiln::Error::Ir(_) => anyhow::Error::new(e).context(format!("{spec}")),
        _ => anyhow::Error::new(e),
    })
}

/// Optimizes a loaded model at `opt_level` (params bound and lifted as `build` does).
pub fn optimize(spec: &str, model: &Model, opt_level: u8) -> Result<kiln::Optimized> {
    progress::step(
        format!("optimizing {spec} at opt level {opt_level}"),
        || kiln::optimize(&model.module, &model.params, opt_level),
    )
    .with_context(|| format!("cannot optimize {spec}"))
}

/// What `kiln inspect` prints.
pub struct InspectArgs {
    /// Annotate bindings with their types.
    pub types: bool,
    /// `graph`, `opt` or `loop`.
    pub emit: String,
    /// The target whose default schedules `--emit loop` lowers with.
    pub target: String,
    /// The opt level of `--emit opt` and `--emit loop` (default 3).
    pub opt_level: Option<u8>,
}

/// `kiln inspect MODEL [--types] [--emit graph|opt|loop] [--target T] [--opt-level N]`.
/// `--emit loop` lowers under the schedule kind of the backend the registry names for
/// `T` (also when it cannot run here: `cuda` without a CUDA runtime shows the GPU
/// schedules); `--emit NAME` prints the code listing of the backend that has one called
/// `NAME` (`ptx`, `spirv`).
pub fn inspect(spec: &str, loading: &Loading, args: &InspectArgs) -> Result<()> {
    let opts = PrintOptions {
        types: args.types,
        ..PrintOptions::default()
    };
    let opt_level = args.opt_level.unwrap_or(crate::compile::DEFAULT_OPT_LEVEL);
    match args.emit.as_str() {
        "graph" => {
            if args.opt_level.is_some() {
                bail!(
                    "--opt-level applies to --emit opt and --emit loop; --emit graph prints the model as loaded"
                );
            }
            let model = load(spec, loading)?;
            print!("{}", print_module(&model.module, &opts));
        }
        "opt" => {
            let model = load(spec, loading)?;
            let opt = optimize(spec, &model, opt_level)?;
            print!("{}", print_module(&opt.module, &opts));
            println!(
                "\n// passes at opt-level {opt_level}: {:.2} ms",
                opt.report.total_ms()
            );
            for line in opt.report.to_string().lines() {
                println!("// {line}");
            }
        }
        emit => {
            let registry = crate::compile::registry();
            // `loop` lowers for `--target`; a listing name (`ptx`, `spirv`) for the
            // backend with that listing, on `--target` when it names that backend.
            let listing = match emit {
                "loop" => None,
                name => Some(registry.listing(name).cloned().ok_or_else(|| {
                    anyhow::anyhow!(
                        "unknown --emit `{name}` (known: graph, opt, loop, {})",
                        registry.listing_names().join(", ")
                    )
                })?),
            };
            let mut target: Target = args.target.parse()?;
            let backend = match &listing {
                Some(b) if b.target_kind() != *target.kind() => {
                    target = Target::new(b.target_kind());
                    b.clone()
                }
                Some(b) => b.clone(),
                None if *target.kind() == TargetKind::Ref => bail!(
                    "--emit loop needs a target with kernels; `ref` compiles none (targets: {})",
                    crate::compile::compiling_targets()
                ),
                // A backend that cannot run here still shows its schedules.
                None => match registry.described(target.kind()) {
                    Some(b) => b.clone(),
                    None => {
                        registry.resolve(&args.target)?;
                        bail!("no backend serves target `{target}`")
                    }
                },
            };
            let target = target.check_options(backend.options())?;
            let schedule = backend.schedule_kind(&target);
            let model = load(spec, loading)?;
            let opt = optimize(spec, &model, opt_level)?;
            let kernels = progress::step(format!("lowering {spec} for {target}"), || {
                kernels_of(&opt.module, schedule)
            })
            .with_context(|| format!("cannot lower {spec} for {target}"))?;
            if let Some(b) = listing {
                print!(
                    "{}",
                    b.listing(&target, &kernels)
                        .with_context(|| format!("cannot generate {emit} for {spec}"))?
                );
                return Ok(());
            }
            let mut out = String::new();
            for (i, k) in kernels.iter().enumerate() {
                if i > 0 {
                    out.push('\n');
                }
                out.push_str(&k.to_string());
                if !out.ends_with('\n') {
                    out.push('\n');
                }
            }
            print!("{out}");
        }
    }
    Ok(())
}
