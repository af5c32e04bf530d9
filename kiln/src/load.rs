//! Loading a model: `zoo:NAME`, a text IR file, an ONNX file (recognised by the
//! extension `.onnx`, or, for any other name, by failing to parse as text IR and then
//! decoding as an ONNX `ModelProto`), or ONNX bytes in memory; `shapes` fixes the input
//! shapes of an ONNX model (needed for every input with a dynamic dimension). Every
//! loaded module is verified. A module exported by `CompiledModule::export` is not a
//! model: load it with [`crate::load_module`].

use std::collections::BTreeMap;
use std::path::Path;

use kiln_executor::Params;
use kiln_executor::export::MAGIC;
use kiln_frontend_onnx::{decode_model, from_onnx, from_onnx_in};
use kiln_ir::text::parse_module;
use kiln_ir::{Module, verify, zoo};

use crate::error::{Error, Result};

/// A model and its params (empty for a text file: every parameter is an input).
#[derive(Clone, Debug)]
pub struct Model {
    /// The verified graph-IR module.
    pub module: Module,
    /// Weights bound to `@main`'s parameters by name.
    pub params: Params,
}

/// Input shapes of an ONNX model, by input name.
pub type Shapes = BTreeMap<String, Vec<usize>>;

/// Loads `zoo:NAME`, a text IR file or an ONNX file (see the module docs), then
/// verifies it. `shapes` applies to ONNX models only; given for another model it is an
/// error.
pub fn load(spec: &str, shapes: &Shapes) -> Result<Model> {
    let model = if let Some(name) = spec.strip_prefix("zoo:") {
        refuse_shapes(spec, shapes)?;
        let (module, params) = zoo::by_name(name)?;
        Model { module, params }
    } else {
        if !spec.contains('.') && !Path::new(spec).exists() {
            return Err(Error::InvalidModel(format!(
                "`{spec}` is neither a zoo model (write zoo:NAME; known: {}) nor a file",
                zoo::NAMES.join(", ")
            )));
        }
        let bytes = std::fs::read(spec).map_err(|source| Error::Io {
            path: spec.into(),
            source,
        })?;
        load_file_bytes(spec, bytes, shapes)?
    };
    verify::verify(&model.module)?;
    Ok(model)
}

/// Imports the ONNX model in `bytes` with the input shapes `shapes`, then verifies it.
/// Every unsupported node is listed at once.
pub fn load_onnx(bytes: &[u8], shapes: &Shapes) -> Result<Model> {
    let (module, params) = from_onnx(bytes, shapes)?;
    verify::verify(&module)?;
    Ok(Model { module, params })
}

/// Parses a model in the text form (every parameter of `@main` is an input), then
/// verifies it.
pub fn load_text(text: &str) -> Result<Model> {
    let module = parse_module(text)?;
    verify::verify(&module)?;
    Ok(Model {
        module,
        params: Params::new(),
    })
}

/// The model in the file `spec`'s `bytes`: ONNX by extension, else text IR, else ONNX.
fn load_file_bytes(spec: &str, bytes: Vec<u8>, shapes: &Shapes) -> Result<Model> {
    if bytes.starts_with(MAGIC) {
        return Err(Error::InvalidModel(format!(
            "`{spec}` is a module exported by `kiln compile`, not a graph-IR model (load it \
             with kiln::load_module)"
        )));
    }
    let onnx_ext = Path::new(spec)
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("onnx"));
    if onnx_ext {
        return onnx(spec, &bytes, shapes);
    }
    match String::from_utf8(bytes) {
        Ok(text) => match parse_module(&text) {
            Ok(module) => {
                refuse_shapes(spec, shapes)?;
                Ok(Model {
                    module,
                    params: Params::new(),
                })
            }
            // Not text IR: an ONNX model under another name is still a model.
            Err(_) if decode_model(text.as_bytes()).is_ok() => onnx(spec, text.as_bytes(), shapes),
            Err(e) => Err(Error::InvalidModel(format!("{spec}: {e}"))),
        },
        Err(e) => {
            let bytes = e.into_bytes();
            match decode_model(&bytes) {
                Ok(_) => onnx(spec, &bytes, shapes),
                Err(onnx) => Err(Error::InvalidModel(format!(
                    "`{spec}` is neither a text IR file (it is not UTF-8), an ONNX model \
                     ({onnx}), nor a module exported by `kiln compile` (it does not start \
                     with the magic bytes \"KILNMOD\\0\")"
                ))),
            }
        }
    }
}

/// The ONNX model in `bytes`, read from the file `spec` (external tensor data is read
/// from the file's folder).
fn onnx(spec: &str, bytes: &[u8], shapes: &Shapes) -> Result<Model> {
    let dir = Path::new(spec).parent().unwrap_or(Path::new("."));
    let (module, params) = from_onnx_in(bytes, shapes, dir)?;
    Ok(Model { module, params })
}

/// Shapes given for a model that is not ONNX.
fn refuse_shapes(spec: &str, shapes: &Shapes) -> Result<()> {
    if !shapes.is_empty() {
        return Err(Error::InvalidModel(format!(
            "input shapes (`--shape` in the CLI) are fixed for ONNX models only; `{spec}` \
             is not one (graph-IR models declare their shapes)"
        )));
    }
    Ok(())
}
