//! The executor: what every backend shares once a model is compiled. So far this crate
//! owns the formats and the vocabulary that the rest of the executor is built on:
//!
//! - [`params`]: TVM's binary tensor and params formats, byte-compatible with TVM (tested
//!   against a file written by TVM itself);
//! - [`graph_json`]: TVM's graph-executor JSON (nodes, entries, storage ids, shapes,
//!   dtypes), parsed, validated and written back in the same layout;
//! - [`target`]: [`Target`] values parsed from strings such as `cpu -threads=2`;
//! - [`Error`]: the crate's one error type, whose variants say whose fault it is.
//!
//! Next to come: the `Backend` trait that every backend implements (compile loop-IR
//! kernels for a device; device buffers, copies, kernel calls, a timer), `build()` with
//! memory planning, the graph and debug executors, benchmarking, export and load.
//! Depends on `kiln-ir` (and later `kiln-rewrite` and `kiln-te`); it knows no concrete
//! backend.

pub mod error;
pub mod graph_json;
pub mod params;
pub mod target;

pub use error::{Error, Result};

pub use params::{load_ndarray, load_params, save_ndarray, save_params};
