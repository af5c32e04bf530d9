//! Loading a MODEL argument (`zoo:NAME` or a text IR file), telling it apart from an
//! exported module file (by its magic bytes, never its extension), and `kiln inspect`
//! (graph IR, or the loop IR of every kernel for a target kind).

use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use kiln_executor::export::MAGIC;
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
/// bytes) or a text IR file.
pub fn open(spec: &str) -> Result<Source> {
    if !spec.starts_with("zoo:") {
        let path = Path::new(spec);
        if path.is_file() && has_module_magic(path)? {
            return Ok(Source::Exported(path.to_path_buf()));
        }
    }
    Ok(Source::Model(Box::new(load(spec)?)))
}

/// Loads `zoo:NAME` or parses a text IR file, then verifies it.
pub fn load(spec: &str) -> Result<Model> {
    let (module, params) = if let Some(name) = spec.strip_prefix("zoo:") {
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
        let text = String::from_utf8(bytes).map_err(|_| {
            anyhow::anyhow!(
                "`{spec}` is neither a text IR file (it is not UTF-8) nor a module exported by \
                 `kiln compile` (it does not start with the magic bytes \"KILNMOD\\0\")"
            )
        })?;
        let module = parse_module(&text).with_context(|| spec.to_string())?;
        (module, Params::new())
    };
    verify::verify(&module).with_context(|| format!("{spec} is not a valid module"))?;
    Ok(Model { module, params })
}

/// `kiln inspect MODEL [--types] [--emit graph|loop] [--target cpu|gpu]`.
pub fn inspect(spec: &str, types: bool, emit: &str, target: &str) -> Result<()> {
    let target = TargetKind::from_name(target)
        .ok_or_else(|| anyhow::anyhow!("unknown target `{target}` (known: cpu, gpu)"))?;
    match emit {
        "graph" => {
            let model = load(spec)?;
            let opts = PrintOptions {
                types,
                ..PrintOptions::default()
            };
            print!("{}", print_module(&model.module, &opts));
        }
        "loop" => {
            let model = load(spec)?;
            let kernels = kernels_of(&model.module, target)
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
        other => bail!("unknown --emit `{other}` (known: graph, loop)"),
    }
    Ok(())
}
