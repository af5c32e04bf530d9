//! Loading a MODEL argument (`zoo:NAME`, a text IR file or an ONNX file), telling it
//! apart from an exported module file (by its magic bytes, never its extension), the
//! `--shape NAME=DIMS` overrides for ONNX inputs, and `kiln inspect` (graph IR as loaded
//! or optimized with the pass report, or the loop IR of every kernel for a target kind).
//!
//! An ONNX model is recognised by the extension `.onnx`, or, for any other name, by
//! failing to parse as text IR and then decoding as an ONNX `ModelProto`.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use kiln_executor::export::MAGIC;
use kiln_frontend_onnx::{Error as OnnxError, decode_model, from_onnx};
use kiln_ir::text::{PrintOptions, parse_module, print_module};
use kiln_ir::zoo::{self, Params};
use kiln_ir::{Module, verify};
use kiln_te::topi::{TargetKind, kernels_of};

/// A model and its params (empty for a text file: every parameter is an input).
pub struct Model {
    /// The verified graph-IR module.
    pub module: Module,
    /// Weights bound to `@main`'s parameters by name.
    pub params: Params,
}

/// Input shapes fixed by `--shape NAME=DIMS`, by input name.
pub type Shapes = BTreeMap<String, Vec<usize>>;

/// Parses `--shape` values (`NAME=1,3,224,224`; `NAME=` is a scalar). A name given twice
/// is an error.
pub fn parse_shapes(specs: &[String]) -> Result<Shapes> {
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
/// bytes), an ONNX file or a text IR file. `shapes` fixes ONNX input shapes.
pub fn open(spec: &str, shapes: &Shapes) -> Result<Source> {
    if !spec.starts_with("zoo:") {
        let path = Path::new(spec);
        if path.is_file() && has_module_magic(path)? {
            if !shapes.is_empty() {
                bail!(
                    "--shape fixes the input shapes of ONNX models; `{spec}` is a module \
                     exported by `kiln compile`, whose shapes were fixed when it was compiled"
                );
            }
            return Ok(Source::Exported(path.to_path_buf()));
        }
    }
    Ok(Source::Model(Box::new(load(spec, shapes)?)))
}

/// Whether `spec` names a file with the extension `.onnx` (any case).
fn has_onnx_extension(spec: &str) -> bool {
    Path::new(spec)
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("onnx"))
}

/// Imports the ONNX model in `bytes` (read from `spec`) with the input shapes `shapes`.
/// Every unsupported node is listed at once.
fn import_onnx(spec: &str, bytes: &[u8], shapes: &Shapes) -> Result<(Module, Params)> {
    from_onnx(bytes, shapes).map_err(|e| {
        let dynamic = matches!(e.root(), OnnxError::InvalidModel(m) if m.contains("dynamic"));
        if dynamic {
            anyhow::anyhow!(
                "cannot import ONNX model `{spec}`: {e}; fix it with --shape NAME=DIMS \
                 (e.g. --shape input=1,3,224,224)"
            )
        } else {
            anyhow::Error::new(e).context(format!("cannot import ONNX model `{spec}`"))
        }
    })
}

/// `--shape` given for a model that is not ONNX.
fn refuse_shapes(spec: &str, shapes: &Shapes) -> Result<()> {
    if !shapes.is_empty() {
        bail!(
            "--shape fixes the input shapes of ONNX models; `{spec}` is not one (graph-IR \
             models declare their shapes)"
        );
    }
    Ok(())
}

/// Loads `zoo:NAME`, imports an ONNX file or parses a text IR file, then verifies it.
pub fn load(spec: &str, shapes: &Shapes) -> Result<Model> {
    let (module, params) = if let Some(name) = spec.strip_prefix("zoo:") {
        refuse_shapes(spec, shapes)?;
        zoo::by_name(name)?
    } else {
        if !spec.contains('.') && !std::path::Path::new(spec).exists() {
            bail!(
                "`{spec}` is neither a zoo model (write zoo:NAME; known: {}) nor a file",
                zoo::NAMES.join(", ")
            );
        }
        let bytes =
            std::fs::read(spec).with_context(|| format!("cannot read model file `{spec}`"))?;
        if bytes.starts_with(MAGIC) {
            bail!(
                "`{spec}` is a module exported by `kiln compile`, not a graph-IR model (run, \
                 bench and profile take exported modules; this command needs the model)"
            );
        }
        if has_onnx_extension(spec) {
            import_onnx(spec, &bytes, shapes)?
        } else {
            match String::from_utf8(bytes) {
                Ok(text) => match parse_module(&text) {
                    Ok(module) => {
                        refuse_shapes(spec, shapes)?;
                        (module, Params::new())
                    }
                    // Not text IR: an ONNX model under another name is still a model.
                    Err(_) if decode_model(text.as_bytes()).is_ok() => {
                        import_onnx(spec, text.as_bytes(), shapes)?
                    }
                    Err(e) => return Err(e).with_context(|| spec.to_string()),
                },
                Err(e) => {
                    let bytes = e.into_bytes();
                    match decode_model(&bytes) {
                        Ok(_) => import_onnx(spec, &bytes, shapes)?,
                        Err(onnx) => bail!(
                            "`{spec}` is neither a text IR file (it is not UTF-8), an ONNX \
                             model ({onnx}), nor a module exported by `kiln compile` (it \
                             does not start with the magic bytes \"KILNMOD\\0\")"
                        ),
                    }
                }
            }
        }
    };
    verify::verify(&module).with_context(|| format!("{spec} is not a valid module"))?;
    Ok(Model { module, params })
}

/// What `kiln inspect` prints.
pub struct InspectArgs {
    /// Annotate bindings with their types.
    pub types: bool,
    /// `graph`, `opt` or `loop`.
    pub emit: String,
    /// The target kind of `--emit loop`: `cpu` or `gpu`.
    pub target: String,
    /// The opt level of `--emit opt` and `--emit loop` (default 3).
    pub opt_level: Option<u8>,
}

/// `kiln inspect MODEL [--types] [--emit graph|opt|loop] [--target cpu|gpu]
/// [--opt-level N]`.
pub fn inspect(spec: &str, shapes: &Shapes, args: &InspectArgs) -> Result<()> {
    let target = TargetKind::from_name(&args.target)
        .ok_or_else(|| anyhow::anyhow!("unknown target `{}` (known: cpu, gpu)", args.target))?;
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
            let model = load(spec, shapes)?;
            print!("{}", print_module(&model.module, &opts));
        }
        "opt" => {
            let model = load(spec, shapes)?;
            let opt = kiln_executor::optimize(&model.module, &model.params, opt_level)
                .with_context(|| format!("cannot optimize {spec}"))?;
            print!("{}", print_module(&opt.module, &opts));
            println!(
                "\n// passes at opt-level {opt_level}: {:.2} ms",
                opt.report.total_ms()
            );
            for line in opt.report.to_string().lines() {
                println!("// {line}");
            }
        }
        "loop" => {
            let model = load(spec, shapes)?;
            let opt = kiln_executor::optimize(&model.module, &model.params, opt_level)
                .with_context(|| format!("cannot optimize {spec}"))?;
            let kernels = kernels_of(&opt.module, target)
                .with_context(|| format!("cannot lower {spec} for {}", target.name()))?;
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
        other => bail!("unknown --emit `{other}` (known: graph, opt, loop)"),
    }
    Ok(())
}
