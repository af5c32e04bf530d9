//! Kiln's ONNX frontend: reads an ONNX model (protobuf) into a graph-IR [`Module`] plus
//! its params, as TVM's `relay.frontend.from_onnx(model, shape=...)` does.
//!
//! Initializers become params named as in ONNX; graph inputs that are not initializers
//! become `@main`'s inputs, with shapes from the model or from the caller's `shapes`
//! (which must fix every dynamic dimension). Constant subgraphs (`Shape`, `Gather` on
//! shapes, `ConstantOfShape`, arithmetic on constants) are folded at import with the
//! reference interpreter, so static-shape models stay static. An op kiln cannot import
//! is an error naming the op type, the node, the opset and the domain, and
//! [`unsupported_nodes`] lists every such node of a model at once.
//!
//! ```
//! use std::collections::BTreeMap;
//! use kiln_frontend_onnx::{from_onnx, proto};
//! use prost::Message;
//!
//! // A one-node model, Relu over a (2, 3) float input, built with the proto structs.
//! let model = proto::ModelProto {
//!     ir_version: Some(8),
//!     opset_import: vec![proto::OperatorSetIdProto { domain: Some(String::new()), version: Some(17) }],
//!     graph: Some(proto::GraphProto {
//!         node: vec![proto::NodeProto {
//!             input: vec!["x".into()],
//!             output: vec!["y".into()],
//!             op_type: Some("Relu".into()),
//!             ..Default::default()
//!         }],
//!         input: vec![kiln_frontend_onnx::tensor_value_info("x", 1, &[2, 3])],
//!         output: vec![kiln_frontend_onnx::tensor_value_info("y", 1, &[2, 3])],
//!         ..Default::default()
//!     }),
//!     ..Default::default()
//! };
//! let (module, params) = from_onnx(&model.encode_to_vec(), &BTreeMap::new()).unwrap();
//! assert!(params.is_empty());
//! assert_eq!(module.main().unwrap().params.len(), 1);
//! ```

mod affine_grid;
mod arity;
mod arity_table;
mod bitcast;
mod bitwise;
mod causal_conv;
mod col2im;
mod control_flow;
mod convert;
mod data_dependent;
mod einsum;
pub mod error;
mod external;
mod extra_ops;
mod grid_sample;
mod linear_attention;
mod narrow;
mod ops;
pub mod proto;
mod quantized;
mod rearrange;
mod recurrent;
mod resize;
mod roi_align;
mod signal;
pub mod tensor;
mod topk;

use std::collections::BTreeMap;
use std::path::Path;

use kiln_ir::zoo::Params;
use kiln_ir::{Module, NDArray};
use prost::Message;

pub use error::{Error, Result, UnsupportedNode};
pub use tensor::{
    dtype_from_onnx, dtype_to_onnx, storage_dtype_from_onnx, tensor_from_proto, tensor_to_proto,
};

/// Decodes `bytes` as an ONNX `ModelProto`: an error (never a panic) for bytes that are
/// not one, truncated files included.
pub fn decode_model(bytes: &[u8]) -> Result<proto::ModelProto> {
    if bytes.is_empty() {
        return Err(Error::Decode("the input is empty".into()));
    }
    let model = proto::ModelProto::decode(bytes).map_err(|e| Error::Decode(e.to_string()))?;
    if model.graph.is_none() {
        return Err(Error::Decode(
            "the bytes decode as a protobuf message but hold no ONNX graph".into(),
        ));
    }
    Ok(model)
}

/// Imports the ONNX model in `bytes`. `shapes` overrides the shapes of graph inputs by
/// name (and must give one for every input with a dynamic dimension). Returns the module
/// and its params (the initializers `@main` reads, named as in ONNX).
pub fn from_onnx(bytes: &[u8], shapes: &BTreeMap<String, Vec<usize>>) -> Result<(Module, Params)> {
    from_onnx_with_constants(bytes, shapes, &BTreeMap::new())
}

/// [`from_onnx`] for a model read from a file in `dir`: tensors stored as external data
/// (files beside the model, as PyTorch's exporter writes them) are read from `dir` —
/// only from inside it, never through an absolute path, `..` or a link leading out.
pub fn from_onnx_in(
    bytes: &[u8],
    shapes: &BTreeMap<String, Vec<usize>>,
    dir: &Path,
) -> Result<(Module, Params)> {
    let mut model = decode_model(bytes)?;
    external::inline(&mut model, Some(dir))?;
    convert::import_model(&model, shapes, &BTreeMap::new())
}

/// [`from_onnx`] with some graph inputs bound to values known at import time (as TVM's
/// `freeze_params` does for initializers): each becomes a constant, so inputs that feed
/// shapes, axes or pads (which kiln needs at import) make the model importable. A bound
/// value must have the input's type.
pub fn from_onnx_with_constants(
    bytes: &[u8],
    shapes: &BTreeMap<String, Vec<usize>>,
    constants: &BTreeMap<String, NDArray>,
) -> Result<(Module, Params)> {
    let mut model = decode_model(bytes)?;
    external::inline(&mut model, None)?;
    convert::import_model(&model, shapes, constants)
}

/// [`from_onnx`] on the file at `path`.
pub fn load_onnx(
    path: impl AsRef<Path>,
    shapes: &BTreeMap<String, Vec<usize>>,
) -> Result<(Module, Params)> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let dir = path.parent().unwrap_or(Path::new("."));
    from_onnx_in(&bytes, shapes, dir).map_err(|e| match e {
        Error::Decode(m) => Error::Decode(format!("{}: {m}", path.display())),
        other => other,
    })
}

/// Every node of the model in `bytes` whose op kiln cannot import (empty when all are
/// supported). Errors only when the bytes are not an ONNX model.
pub fn unsupported_nodes(bytes: &[u8]) -> Result<Vec<UnsupportedNode>> {
    let model = decode_model(bytes)?;
    Ok(convert::unsupported_nodes(&model))
}

/// The ONNX op types (default domain) this frontend imports, sorted.
pub fn supported_ops() -> Vec<&'static str> {
    let mut v = [
        ops::SUPPORTED,
        extra_ops::SUPPORTED,
        control_flow::SUPPORTED,
    ]
    .concat();
    v.sort_unstable();
    v
}

/// A `ValueInfoProto` for a tensor named `name` of ONNX element type `elem_type` and a
/// static shape; handy for building models in tests.
pub fn tensor_value_info(name: &str, elem_type: i32, shape: &[usize]) -> proto::ValueInfoProto {
    use proto::tensor_shape_proto::{Dimension, dimension::Value};
    proto::ValueInfoProto {
        name: Some(name.to_string()),
        r#type: Some(proto::TypeProto {
            denotation: None,
            value: Some(proto::type_proto::Value::TensorType(
                proto::type_proto::Tensor {
                    elem_type: Some(elem_type),
                    shape: Some(proto::TensorShapeProto {
                        dim: shape
                            .iter()
                            .map(|&d| Dimension {
                                denotation: None,
                                value: Some(Value::DimValue(d as i64)),
                            })
                            .collect(),
                    }),
                },
            )),
        }),
        ..Default::default()
    }
}
