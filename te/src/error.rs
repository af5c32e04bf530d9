//! The one error type of the `te` crate. Its variants say whose fault it is: bad text
//! (`Parse`), a kernel that breaks an invariant of the loop IR (`Verify`), a bad value from
//! the caller (`InvalidArgument`), something kiln does not do yet (`Unsupported`), or a
//! failure while running a kernel in the interpreter (`Eval`).

use crate::tir::VerifyError;

/// Everything that can go wrong in the `te` layer.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Loop-IR text that does not parse; `line` and `col` are 1-based.
    #[error("parse error at {line}:{col}: {message}")]
    Parse {
        /// Line of the offending token, from 1.
        line: usize,
        /// Column of the offending token, from 1, in characters.
        col: usize,
        /// What was expected and what was found.
        message: String,
    },
    /// The verifier found problems; each one names its location.
    #[error("verification failed with {} error(s):\n{}", .0.len(), VerifyError::join(.0))]
    Verify(Vec<VerifyError>),
    /// A caller passed a bad value (wrong number of arguments, wrong shape or dtype).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A feature kiln does not implement yet; the message names what is missing.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// A failure while running a kernel in the loop-IR interpreter (out-of-bounds
    /// access, division by zero, a barrier in divergent control flow, a data race).
    #[error("evaluation error: {0}")]
    Eval(String),
}

/// Result with the crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
