//! The runtime: what every backend shares once a model is optimized (the back half of
//! TVM's `relay.build`, plus the graph executor).
//!
//! - [`assemble()`]: an optimized graph-IR module + params + target + backend →
//!   [`CompiledModule`] (graph JSON, kernel library, params), one kernel per call of a
//!   primitive function, memory planned (the `kiln` crate's `build` optimizes first);
//! - [`backend`]: the [`Backend`] trait every code generator implements (compile loop-IR
//!   kernels; device buffers, explicit copies, kernel calls, synchronize);
//!   [`backends::interp`] is the reference device, running the loop-IR interpreter;
//! - [`plan`]: memory planning (storage shared by tensors whose lifetimes don't
//!   overlap) and the prepared [`plan::Layout`] that makes `run` a flat loop;
//! - [`executor`]: the [`GraphExecutor`] (TVM's names: `set_input`, `run`, `get_output`,
//!   zero-copy, `share_params`, `benchmark`, ...); [`debug`]: the [`DebugExecutor`]
//!   (every intermediate kept, per-node times, `.npy` dumps);
//! - [`export`]: one-file export and a validating [`load`];
//! - [`params`], [`graph_json`]: TVM's params and graph JSON formats; [`target`]:
//!   [`Target`] values such as `cpu -threads=2`; [`Error`]: the crate's error type.
//!
//! Depends on `kiln-ir` and `kiln-te` only (not on the graph optimizer); it knows no
//! concrete backend beyond the reference `interp` device, and maps no target to a backend
//! (the `kiln` crate's registry does).
//!
//! ```
//! use std::collections::BTreeMap;
//! use kiln_executor::{GraphJson, Target, TargetKind, load_params, save_params};
//! use kiln_ir::NDArray;
//!
//! // Targets are written as in TVM, and print back the same way.
//! let target: Target = "cpu -threads=2".parse()?;
//! assert_eq!((target.kind(), target.threads()), (&TargetKind::Cpu, Some(2)));
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
//!
//! // Compile a (here unoptimized) model for the loop-IR interpreter device and run it.
//! use kiln_executor::{BuildLog, assemble, backends::InterpBackend};
//! use kiln_ir::{DType, Module, Type, op};
//! let mut m = Module::new();
//! let x = m.var("x", Type::tensor([2, 2], DType::F32));
//! let y = m.call(op::Unary { kind: op::UnaryKind::Relu }, &[x])?;
//! m.set_main(&[x], y)?;
//! let lib = assemble(&m, BTreeMap::new(), &"interp".parse()?, &InterpBackend, BuildLog::default())?;
//! let mut exec = lib.create_executor()?;
//! exec.set_input("x", &NDArray::from_vec([2, 2], vec![-1.0f32, 2.0, -3.0, 4.0])?)?;
//! exec.run()?;
//! assert_eq!(exec.get_output(0)?.to_vec::<f32>()?, vec![0.0, 2.0, 0.0, 4.0]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![warn(missing_docs)]

pub mod assemble;
pub mod backend;
pub mod backends;
pub mod debug;
pub mod error;
pub mod executor;
pub mod export;
pub mod graph_json;
pub mod module;
pub mod params;
pub mod plan;
pub mod target;

pub use assemble::{BuildLog, Params, assemble, assemble_reference};
pub use backend::{Backend, CallTimes, Clock, DeviceBuffer, KernelLibrary, Unsupported};
pub use debug::{DebugExecutor, Profile};
pub use error::{Error, Result};
pub use executor::{
    BenchmarkOptions, BenchmarkResult, DeviceArray, GraphExecutor, InputKey, TensorInfo,
};
pub use export::{load, load_bytes, load_bytes_limited, load_bytes_with, load_with};
pub use graph_json::GraphJson;
pub use module::CompiledModule;
pub use params::{load_ndarray, load_params, save_ndarray, save_params};
pub use plan::MemoryReport;
pub use target::{OptionValue, Target, TargetKind, TargetOption};
