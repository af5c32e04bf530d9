//! The one error type of the `ir` crate. Its variants say whose fault it is: bad user
//! input (`Parse`, `Type`, `InvalidModel`, `InvalidArgument`, `InvalidFile`), something
//! kiln does not do yet (`Unsupported`), input asking for more than the limits allow
//! (`LimitExceeded`: the memory budget, overflowing sizes, call depth), or a failure
//! while evaluating (`Eval`).

use std::path::PathBuf;

use crate::verify::VerifyError;

/// Everything that can go wrong in the graph IR layer.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Text IR that does not parse; `line` and `col` are 1-based.
    #[error("parse error at {line}:{col}: {message}")]
    Parse {
        /// Line of the offending token, from 1.
        line: usize,
        /// Column of the offending token, from 1, in characters.
        col: usize,
        /// What was expected and what was found.
        message: String,
    },
    /// An op applied to arguments whose types don't fit its type rule.
    #[error("type error in `{op}`: {message}")]
    Type {
        /// The op's name (`nn.conv2d`).
        op: String,
        /// Which argument or attribute does not fit, and why.
        message: String,
    },
    /// An op name that no registry knows.
    #[error("unknown op `{0}`")]
    UnknownOp(String),
    /// A module that is malformed (no `@main`, an unbound variable, a bad id, ...).
    #[error("invalid model: {0}")]
    InvalidModel(String),
    /// The verifier found problems; each one names its location.
    #[error("verification failed with {} error(s):\n{}", .0.len(), VerifyError::join(.0))]
    Verify(Vec<VerifyError>),
    /// A caller passed a bad value (unknown name, wrong shape, out of range index).
    #[error("{0}")]
    InvalidArgument(String),
    /// A file that is not what it claims to be.
    #[error("{path}: {message}")]
    InvalidFile {
        /// The file.
        path: PathBuf,
        /// What is wrong with it, and where in it.
        message: String,
    },
    /// A feature kiln does not implement yet; the message names what is missing.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// Input that asks for more than kiln's limits allow (memory beyond the budget, sizes
    /// that overflow, calls nested too deep); the message names the request and the limit.
    #[error("{0}")]
    LimitExceeded(String),
    /// A failure while evaluating an expression in the reference interpreter.
    #[error("evaluation error: {0}")]
    Eval(String),
    /// A file that could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
}

impl Error {
    /// A type error for `op`.
    pub fn ty(op: impl Into<String>, message: impl Into<String>) -> Error {
        Error::Type {
            op: op.into(),
            message: message.into(),
        }
    }
}

/// Result with the crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
