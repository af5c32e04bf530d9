//! Graph optimization for Kiln: the pass manager ([`pass`]: `PassContext` with opt levels
//! 0–3, required and disabled passes, Relay's gating rule), the standard pipeline
//! ([`pipeline`]: [`optimize`]), the classical passes, equality saturation with egg, and
//! operator fusion into primitive functions ([`fuse`]: [`FuseOps`]). Every pass maps a
//! well-typed [`kiln_ir::Module`] to a well-typed module with the same values (within the
//! op's floating-point tolerance). Depends on `kiln-ir` only.

pub mod eqsat;
pub mod error;
pub mod fuse;
pub mod pass;
pub mod passes;
pub mod pipeline;

pub use error::{Error, Result};
pub use fuse::FuseOps;
pub use pass::{Pass, PassContext, PassInfo, PassOutcome, PassRecord, PassReport, RuleInfo};
pub use pipeline::optimize;
