//! The one error type of the `kiln` crate: an error of the layer it came from (the graph
//! IR, the ONNX frontend, the graph optimizer, the runtime), a target no registered
//! backend serves, a backend that cannot be registered, or a model that cannot be loaded.

/// Everything that can go wrong in loading, building and running a model.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A target string whose kind no registered backend serves; the message lists the
    /// targets that are served.
    #[error("{0}")]
    UnknownTarget(String),
    /// A backend that cannot be registered: its target kind is `ref` or already served.
    #[error("{0}")]
    InvalidRegistration(String),
    /// A model that cannot be loaded: an unknown zoo name, a file that is neither text
    /// IR nor ONNX; the message names the model.
    #[error("{0}")]
    InvalidModel(String),
    /// An error from the runtime (targets, lowering, backends, executors, module files).
    #[error(transparent)]
    Executor(#[from] kiln_executor::Error),
    /// An error from the graph optimizer (a bad pass context, a pass that failed).
    #[error(transparent)]
    Rewrite(#[from] kiln_rewrite::Error),
    /// An error from the ONNX frontend (a malformed or unsupported model).
    #[error(transparent)]
    Onnx(#[from] kiln_frontend_onnx::Error),
    /// An error from the graph-IR layer (tensors, dtypes, modules, the text form).
    #[error(transparent)]
    Ir(#[from] kiln_ir::Error),
    /// A file that could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

impl Error {
    /// Whether the error says a target or backend does not support something (as
    /// opposed to bad input or a bug): the test suites count these as skipped.
    pub fn is_unsupported(&self) -> bool {
        matches!(self, Error::Executor(kiln_executor::Error::Unsupported(_)))
    }
}

/// Result with the crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
