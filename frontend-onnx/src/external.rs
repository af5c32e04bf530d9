//! External tensor data: ONNX models saved with `data_location = EXTERNAL` (what PyTorch's
//! exporter writes by default since 2.9, and any model over 2 GB) keep tensor bytes in
//! files beside the model, named by each tensor's `location` with an optional `offset`
//! and `length`. [`inline`] reads them into the tensors before the import, from the
//! model's folder only: a location that is absolute, climbs out with `..`, or resolves
//! (through links) outside the folder is refused, as is a range past the file's end or
//! over the memory budget. A model given as bytes has no folder, so its external tensors
//! are an error saying to load it from its file.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Component, Path, PathBuf};

use kiln_ir::tensor::budget;

use crate::error::{Error, Result};
use crate::proto::{GraphProto, ModelProto, TensorProto};

/// `TensorProto.DataLocation.EXTERNAL`.
const EXTERNAL: i32 = 1;

/// Reads every external tensor of `model` (initializers, tensor attributes, subgraphs)
/// from the files beside it in `dir`, leaving the bytes in `raw_data`.
pub(crate) fn inline(model: &mut ModelProto, dir: Option<&Path>) -> Result<()> {
    let Some(graph) = model.graph.as_mut() else {
        return Ok(());
    };
    // Subgraphs nest without bound in a crafted file: an explicit stack, no recursion.
    let mut graphs: Vec<&mut GraphProto> = vec![graph];
    while let Some(g) = graphs.pop() {
        for t in &mut g.initializer {
            read_if_external(t, dir)?;
        }
        for node in &mut g.node {
            for a in &mut node.attribute {
                if let Some(t) = a.t.as_mut() {
                    read_if_external(t, dir)?;
                }
                for t in &mut a.tensors {
                    read_if_external(t, dir)?;
                }
                if let Some(sub) = a.g.as_deref_mut() {
                    graphs.push(sub);
                }
                graphs.extend(a.graphs.iter_mut());
            }
        }
    }
    Ok(())
}

fn is_external(t: &TensorProto) -> bool {
    t.data_location == Some(EXTERNAL) || !t.external_data.is_empty()
}

fn read_if_external(t: &mut TensorProto, dir: Option<&Path>) -> Result<()> {
    if !is_external(t) {
        return Ok(());
    }
    let name = t.name.clone().unwrap_or_default();
    let field = |key: &str| {
        t.external_data
            .iter()
            .find(|e| e.key.as_deref() == Some(key))
            .and_then(|e| e.value.clone())
    };
    let location = field("location").ok_or_else(|| {
        Error::InvalidModel(format!(
            "tensor `{name}` is stored externally but names no location"
        ))
    })?;
    let number = |key: &str| -> Result<Option<u64>> {
        field(key)
            .map(|v| {
                v.trim().parse::<u64>().map_err(|_| {
                    Error::InvalidModel(format!(
                        "tensor `{name}`: external data {key} `{v}` is not a byte count"
                    ))
                })
            })
            .transpose()
    };
    let (offset, length) = (number("offset")?.unwrap_or(0), number("length")?);
    let Some(dir) = dir else {
        return Err(Error::Unsupported(format!(
            "tensor `{name}` keeps its data in the external file `{location}`, which a model \
             given as bytes cannot reach: load the model from its file"
        )));
    };
    let path = resolve(dir, &location, &name)?;
    let io = |source| Error::Io {
        path: path.clone(),
        source,
    };
    let mut file = std::fs::File::open(&path).map_err(io)?;
    let size = file.metadata().map_err(io)?.len();
    let available = size.checked_sub(offset).ok_or_else(|| {
        Error::InvalidModel(format!(
            "tensor `{name}`: offset {offset} is past the end of `{location}` ({size} bytes)"
        ))
    })?;
    let length = length.unwrap_or(available);
    if length > available {
        return Err(Error::InvalidModel(format!(
            "tensor `{name}`: {length} bytes at offset {offset} run past the end of \
             `{location}` ({size} bytes)"
        )));
    }
    let n = usize::try_from(length).map_err(|_| {
        Error::InvalidModel(format!(
            "tensor `{name}`: {length} bytes overflow the address space"
        ))
    })?;
    let mut bytes: Vec<u8> = budget::try_vec(&format!("tensor `{name}`"), n)?;
    file.seek(SeekFrom::Start(offset)).map_err(io)?;
    file.take(length).read_to_end(&mut bytes).map_err(io)?;
    if bytes.len() != n {
        return Err(Error::InvalidModel(format!(
            "tensor `{name}`: read {} of {n} bytes from `{location}`",
            bytes.len()
        )));
    }
    t.raw_data = Some(bytes);
    t.data_location = None;
    t.external_data.clear();
    Ok(())
}

/// `location` inside `dir`: relative, without `..`, and (links followed) still inside.
fn resolve(dir: &Path, location: &str, name: &str) -> Result<PathBuf> {
    let refuse = |why: &str| {
        Error::InvalidModel(format!(
            "tensor `{name}`: external data location `{location}` {why}; it must name a file \
             in the model's folder"
        ))
    };
    let rel = Path::new(location);
    if location.is_empty() || location.contains('\0') {
        return Err(refuse("is empty or holds a NUL byte"));
    }
    if rel
        .components()
        .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return Err(refuse("is absolute or climbs out with `..`"));
    }
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let joined = dir.join(rel);
    let (real_dir, real) = match (dir.canonicalize(), joined.canonicalize()) {
        (Ok(d), Ok(f)) => (d, f),
        (_, Err(source)) | (Err(source), _) => {
            return Err(Error::Io {
                path: joined,
                source,
            });
        }
    };
    if !real.starts_with(&real_dir) {
        return Err(refuse("leads outside the folder through a link"));
    }
    Ok(real)
}
