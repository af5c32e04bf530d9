//! Kiln's front door: load a model, build it for a target, run it — one crate.
//!
//! [`load`] reads a model (`zoo:NAME`, a text IR file, an ONNX file; [`load_onnx`] takes
//! ONNX bytes), [`build()`] runs the whole compiler on it — optimize (the graph
//! optimizer, opt levels 0..=3), lower (tensor expressions to loop IR under the target's
//! default schedules), compile (on the backend the [`Registry`] names for the target) —
//! and returns a [`CompiledModule`], whose [`GraphExecutor`] runs it with TVM's names
//! (`set_input`, `run`, `get_output`).
//!
//! ```
//! use kiln::{DType, Module, NDArray, Params, Type, op};
//!
//! // y = relu(x), compiled to native code by the `cpu` target's JIT.
//! let mut m = Module::new();
//! let x = m.var("x", Type::tensor([2, 2], DType::F32));
//! let y = m.call(op::Unary { kind: op::UnaryKind::Relu }, &[x])?;
//! m.set_main(&[x], y)?;
//! let lib = kiln::build(&m, "cpu", &Params::new(), 3)?;
//! let mut exec = lib.create_executor()?;
//! exec.set_input("x", &NDArray::from_vec([2, 2], vec![-1.0f32, 2.0, -3.0, 4.0])?)?;
//! exec.run()?;
//! assert_eq!(exec.get_output(0)?.to_vec::<f32>()?, vec![0.0, 2.0, 0.0, 4.0]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! A zoo model, checked against the reference interpreter (the `ref` target runs the
//! same graph in the graph-IR interpreter, the oracle every backend is tested against):
//!
//! ```
//! use kiln::{NDArray, PassContext, Shapes};
//!
//! let model = kiln::load("zoo:mlp", &Shapes::new())?;
//! let input = NDArray::random(vec![1, 1, 28, 28], kiln::DType::F32, 7);
//! let mut outputs = vec![];
//! for target in ["ref", "cpu -threads=2"] {
//!     let lib = kiln::build(&model.module, target, &model.params, PassContext::from(3))?;
//!     let mut exec = lib.create_executor()?;
//!     exec.set_input("data", &input)?;
//!     exec.run()?;
//!     outputs.push(exec.get_output(0)?);
//! }
//! outputs[0].allclose(&outputs[1], 1e-4, 1e-4)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Which targets exist is the [`Registry`]'s answer (`ref`, `interp`, `cpu` built in,
//! `vulkan` where the machine has a Vulkan device); a
//! backend from outside kiln implements [`Backend`] for a target kind of its own
//! ([`TargetKind::Custom`]) and is registered on a registry value:
//!
//! ```
//! let registry = kiln::Registry::builtin();
//! assert!(registry.targets_text().starts_with("ref, interp, cpu"));
//! let err = registry.resolve("tpu").unwrap_err().to_string();
//! assert!(err.contains("no backend serves target `tpu`"), "{err}");
//! ```
//!
//! Modules compiled once can be exported to a file and loaded in another process
//! ([`CompiledModule::export`], [`load_module`]: the backend comes from the target
//! recorded in the file).

#![warn(missing_docs)]

mod build;
mod error;
mod load;
pub mod registry;

/// The tutorial of `docs/tutorial.md` (from an ONNX file to a benchmark; kiln in a Rust
/// program; a rewrite rule and a backend of your own), here so that its code runs as
/// doctests.
#[doc = include_str!("../../docs/tutorial.md")]
pub mod tutorial {}

pub use build::{Built, Optimized, build, build_on, optimize};
pub use error::{Error, Result};
pub use load::{Model, Shapes, load, load_onnx, load_text};
pub use registry::{Registry, Resolved};

pub use kiln_executor::backend::{CallTimes, Clock, DeviceBuffer, KernelLibrary};
pub use kiln_executor::{
    Backend, BenchmarkOptions, BenchmarkResult, CompiledModule, DebugExecutor, GraphExecutor,
    OptionValue, Params, Target, TargetKind, TargetOption, Unsupported, load_params, save_params,
};
pub use kiln_ir::{DType, Module, NDArray, Type, op};
pub use kiln_rewrite::{PassContext, PassReport};

/// The layers under the front door, for what it does not re-export.
pub mod layers {
    pub use kiln_executor as executor;
    pub use kiln_frontend_onnx as frontend_onnx;
    pub use kiln_ir as ir;
    pub use kiln_rewrite as rewrite;
    pub use kiln_te as te;
}

/// Loads a module exported by [`CompiledModule::export`] and compiles its kernels again
/// on the built-in backend serving the target recorded in the file.
pub fn load_module(path: impl AsRef<std::path::Path>) -> Result<CompiledModule> {
    Registry::builtin().load_module(path)
}
