//! Loading a MODEL argument (`zoo:NAME` or a text IR file) and `kiln inspect` (graph IR,
//! or the loop IR of every kernel for a target kind).

use anyhow::{Context, Result, bail};
use kiln_ir::text::{PrintOptions, parse_module, print_module};
use kiln_ir::zoo::{self, Params};
use kiln_ir::{Module, verify};
use kiln_te::topi::{TargetKind, kernels_of};

/// A model and its params (empty for a text file: every parameter is an input).
pub struct Model {
    pub module: Module,
    pub params: Params,
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
        let text = std::fs::read_to_string(spec)
            .with_context(|| format!("cannot read model file `{spec}`"))?;
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
