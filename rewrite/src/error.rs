//! The rewrite crate's error type.

use thiserror::Error;

/// What can go wrong while optimizing a module.
#[derive(Debug, Error)]
pub enum Error {
    /// The module given to (or produced by) a pass is not valid graph IR.
    #[error(transparent)]
    Ir(#[from] kiln_ir::Error),
    /// A pass produced a module that fails the verifier: the pass's name and the errors.
    #[error("pass `{pass}` produced an invalid module: {source}")]
    PassBroke {
        /// The pass's name.
        pass: String,
        /// The verifier's errors.
        #[source]
        source: kiln_ir::Error,
    },
    /// A bad configuration (unknown pass name, opt level out of range, bad limit).
    #[error("{0}")]
    InvalidArgument(String),
    /// Something the optimizer does not handle yet, named.
    #[error("unsupported: {0}")]
    Unsupported(String),
}

/// A result whose error is the rewrite crate's [`Error`](enum@Error).
pub type Result<T, E = Error> = std::result::Result<T, E>;
