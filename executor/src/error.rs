//! The one error type of the `executor` crate. Its variants say whose fault it is:
//! input that is not what it claims to be (`InvalidParams`, `InvalidGraph`,
//! `InvalidTarget`, `InvalidModuleFile`), a bad call from the user (`InvalidArgument`:
//! a wrong shape in `set_input`, an unknown input name, an output index out of range),
//! valid input kiln does not handle (`Unsupported`), an error from the graph-IR or loop-IR
//! layer (`Ir`, `Te`), a device failure reported by a backend (`Device`), a file that
//! cannot be read or written (`Io`), or a broken invariant inside kiln itself (`Internal`).

/// Everything that can go wrong in the executor layer.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Bytes that are not a well-formed TVM params or tensor file. `offset` is where in
    /// the input the problem was found (the start of the offending field).
    #[error("invalid params at byte {offset}: {message}")]
    InvalidParams {
        /// Byte offset into the input where the bad field starts.
        offset: usize,
        /// What is wrong with the field.
        message: String,
    },
    /// Graph JSON that does not parse or breaks one of the graph executor's invariants;
    /// the message names the node or entry at fault.
    #[error("invalid graph JSON: {0}")]
    InvalidGraph(String),
    /// A target string that names no known target or has a bad option; the message
    /// lists what is accepted.
    #[error("invalid target: {0}")]
    InvalidTarget(String),
    /// Well-formed input using something kiln does not implement (a dtype such as
    /// `float64`, vector lanes); the message names what is missing and where.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// An exported module file that is not what it claims to be (bad magic, unknown
    /// version, truncated, altered, or inconsistent); the message says what and where.
    #[error("invalid module file: {0}")]
    InvalidModuleFile(String),
    /// A bad call from the user: wrong shape or dtype for an input, an unknown input
    /// name, an index out of range. The message names the argument and what is expected.
    #[error("{0}")]
    InvalidArgument(String),
    /// A failure reported by a backend's device (allocation, copy, kernel call).
    #[error("device error ({backend}): {message}")]
    Device {
        /// The backend's name (`cpu`, `cuda`, ...).
        backend: String,
        /// The device's own description of the failure.
        message: String,
    },
    /// A file that could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file that was being read or written.
        path: std::path::PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// An error from the loop-IR layer (lowering, verification, the loop-IR interpreter).
    #[error(transparent)]
    Te(#[from] kiln_te::Error),
    /// An error from the graph-IR layer (tensors, dtypes, modules).
    #[error(transparent)]
    Ir(#[from] kiln_ir::Error),
    /// A bug in kiln: an invariant the executor should have kept did not hold.
    #[error("internal error (a kiln bug): {0}")]
    Internal(String),
}

impl Error {
    /// An [`Error::InvalidParams`] at `offset`.
    pub fn params(offset: usize, message: impl Into<String>) -> Error {
        Error::InvalidParams {
            offset,
            message: message.into(),
        }
    }
}

/// Result with the crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
