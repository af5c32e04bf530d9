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
//!
//! ```
//! use std::collections::BTreeMap;
//! use kiln_executor::{GraphJson, Target, TargetKind, load_params, save_params};
//! use kiln_ir::NDArray;
//!
//! // Targets are written as in TVM, and print back the same way.
//! let target: Target = "cpu -threads=2".parse()?;
//! assert_eq!((target.kind(), target.threads()), (TargetKind::Cpu, Some(2)));
//! assert_eq!(target.to_string(), "cpu -threads=2");
//!
//! // Params in TVM's binary format.
//! let mut params = BTreeMap::new();
//! params.insert("w".to_string(), NDArray::from_vec([2], vec![0.5f32, -1.0])?);
//! let bytes = save_params(&params);
//! assert_eq!(load_params(&bytes)?, params);
//!
//! // Graph JSON in TVM's layout, validated on parsing.
//! let graph = GraphJson::parse(
//!     r#"{"nodes": [{"op": "null", "name": "x", "inputs": []},
//!                   {"op": "tvm_op", "name": "relu", "inputs": [[0, 0, 0]],
//!                    "attrs": {"func_name": "relu_kernel", "num_inputs": "1",
//!                              "num_outputs": "1", "flatten_data": "0"}}],
//!         "arg_nodes": [0], "heads": [[1, 0, 0]], "node_row_ptr": [0, 1, 2],
//!         "attrs": {"storage_id": ["list_int", [0, 1]],
//!                   "dltype": ["list_str", ["float32", "float32"]],
//!                   "shape": ["list_shape", [[4], [4]]]}}"#,
//! )?;
//! assert_eq!(GraphJson::parse(&graph.to_json())?, graph);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod error;
pub mod graph_json;
pub mod params;
pub mod target;

pub use error::{Error, Result};
pub use graph_json::GraphJson;
pub use params::{load_ndarray, load_params, save_ndarray, save_params};
pub use target::{Target, TargetKind};
