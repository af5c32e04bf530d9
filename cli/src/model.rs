//! Loading a MODEL argument (`zoo:NAME` or a text IR file) and `kiln inspect`.

use anyhow::{Context, Result, bail};
use kiln_ir::text::{PrintOptions, parse_module, print_module};
use kiln_ir::zoo::{self, Params};
use kiln_ir::{Module, verify};

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

/// `kiln inspect MODEL [--types]`.
pub fn inspect(spec: &str, types: bool) -> Result<()> {
    let model = load(spec)?;
    let opts = PrintOptions {
        types,
        ..PrintOptions::default()
    };
    print!("{}", print_module(&model.module, &opts));
    Ok(())
}
