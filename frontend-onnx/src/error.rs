//! The frontend's one error type. Its variants say whose fault it is: bytes that are not
//! an ONNX model (`Decode`), a model that breaks ONNX's rules (`InvalidModel`), ops or
//! features kiln does not import yet (`UnsupportedOps`, `Unsupported`, `UnsupportedType`),
//! and errors raised while converting one node, wrapped with that node (`AtNode`).

use std::fmt;
use std::path::PathBuf;

/// One node kiln cannot import: what it is and where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnsupportedNode {
    /// The node's `op_type`.
    pub op_type: String,
    /// The node's name (`""` when the model gives none).
    pub name: String,
    /// The node's position in the graph.
    pub index: usize,
    /// The node's domain (`""` is the default ONNX domain).
    pub domain: String,
    /// The version of that domain the model imports (0 if it imports none).
    pub opset: i64,
}

impl fmt::Display for UnsupportedNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let domain = if self.domain.is_empty() {
            "ai.onnx"
        } else {
            &self.domain
        };
        let node = node_label(self.index, &self.name, None);
        write!(
            f,
            "op `{}` ({node}, domain {domain}, opset {})",
            self.op_type, self.opset
        )
    }
}

/// How messages name a node: by its index, its name when the model gives one, and its
/// op type when given (`node #3 `conv1` (Conv)`; unnamed: `node #3 (Conv)`).
pub fn node_label(index: usize, name: &str, op_type: Option<&str>) -> String {
    let mut label = format!("node #{index}");
    if !name.is_empty() {
        label.push_str(&format!(" `{name}`"));
    }
    if let Some(op) = op_type {
        label.push_str(&format!(" ({op})"));
    }
    label
}

/// Everything that can go wrong importing an ONNX model.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The bytes do not decode as an ONNX `ModelProto`.
    #[error("not an ONNX model: {0}")]
    Decode(String),
    /// The model decodes but breaks ONNX's rules (no graph, a missing input, bad dims).
    #[error("invalid ONNX model: {0}")]
    InvalidModel(String),
    /// Every node whose op kiln cannot import, all at once.
    #[error("unsupported ONNX op(s): {}", fmt_nodes(.0))]
    UnsupportedOps(Vec<UnsupportedNode>),
    /// A supported op used with an attribute value or input kiln does not handle.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// An input that must be known at import time (a shape, axes, pads, ...) is computed
    /// at run time or is a graph input; binding that graph input to a value
    /// ([`crate::from_onnx_with_constants`]) makes the model importable.
    #[error(
        "input `{input}` must be a constant or an initializer (kiln's graphs are static; bind it with from_onnx_with_constants)"
    )]
    NotConstant { input: String },
    /// An element type kiln has no dtype for (double, int16, string, ...).
    #[error("unsupported element type: {0}")]
    UnsupportedType(String),
    /// An error raised while converting one node, with the node named.
    #[error("{}: {source}", node_label(*index, name, Some(op_type)))]
    AtNode {
        /// The node's position in the graph.
        index: usize,
        /// The node's name (`""` when the model gives none).
        name: String,
        /// The node's `op_type`.
        op_type: String,
        /// What went wrong converting it.
        source: Box<Error>,
    },
    /// An error from the graph IR (a type rule refusing the shapes, ...).
    #[error(transparent)]
    Ir(#[from] kiln_ir::Error),
    /// A file that could not be read.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl Error {
    /// The error at the bottom of any [`Error::AtNode`] wrappers.
    pub fn root(&self) -> &Error {
        match self {
            Error::AtNode { source, .. } => source.root(),
            other => other,
        }
    }
}

fn fmt_nodes(nodes: &[UnsupportedNode]) -> String {
    let items: Vec<String> = nodes.iter().map(ToString::to_string).collect();
    items.join("; ")
}

/// Result with the frontend's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
