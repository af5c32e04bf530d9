//! [`CompiledModule`]: what [`crate::assemble()`] (and so `kiln::build`) returns and [`crate::load`] restores (TVM's
//! `GraphExecutorFactoryModule`): the graph JSON, the kernels (loop IR, and the library a
//! backend compiled from them), the params, the target, and the [`Layout`] prepared from
//! them once, so that every executor made from the module starts without planning.
//!
//! A compiled module is immutable, `Send + Sync`, and cheap to share behind an `Arc`:
//! several executors made from one module run concurrently on different threads.

use std::sync::Arc;

use kiln_ir::Module;
use kiln_te::tir::PrimFunc;

use crate::assemble::Params;
use crate::backend::KernelLibrary;
use crate::error::{Error, Result};
use crate::executor::{GraphExecutor, check_tensor};
use crate::graph_json::GraphJson;
use crate::params::{load_params, save_params};
use crate::plan::{Layout, MemoryReport};
use crate::target::Target;

/// How the graph runs.
#[derive(Clone, Debug)]
pub(crate) enum Program {
    /// Kernels compiled by a backend.
    Kernels {
        /// The loop IR of every kernel, in library order.
        kernels: Vec<PrimFunc>,
        /// What the backend compiled them into.
        library: Arc<dyn KernelLibrary>,
    },
    /// The `ref` target: the graph-IR module, run by the reference interpreter.
    Reference(Arc<Module>),
}

/// A built model: graph JSON, kernel library and params, ready for executors.
#[derive(Clone, Debug)]
pub struct CompiledModule {
    pub(crate) graph: Arc<GraphJson>,
    pub(crate) target: Target,
    pub(crate) params: Arc<Params>,
    pub(crate) program: Program,
    pub(crate) layout: Arc<Layout>,
    build_log: Vec<(String, f64)>,
}

impl CompiledModule {
    pub(crate) fn new(
        graph: GraphJson,
        target: Target,
        params: Params,
        program: Program,
        layout: Layout,
        build_log: Vec<(String, f64)>,
    ) -> CompiledModule {
        CompiledModule {
            graph: Arc::new(graph),
            target,
            params: Arc::new(params),
            program,
            layout: Arc::new(layout),
            build_log,
        }
    }

    /// The graph in TVM's graph-executor layout (TVM's `get_graph_json`).
    pub fn graph(&self) -> &GraphJson {
        &self.graph
    }

    /// The graph JSON text.
    pub fn graph_json(&self) -> String {
        self.graph.to_json()
    }

    /// The target the module was built for.
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// The params bound into the graph (TVM's `get_graph_params`).
    pub fn params(&self) -> &Params {
        &self.params
    }

    /// The params in TVM's binary format (`relay.save_param_dict`).
    pub fn save_params(&self) -> Vec<u8> {
        save_params(&self.params)
    }

    /// This module with params replaced by those in `bytes` (TVM's params format):
    /// every name must be a param of the graph, with its shape and dtype; params not
    /// named keep their values.
    pub fn load_params(&self, bytes: &[u8]) -> Result<CompiledModule> {
        let mut params = (*self.params).clone();
        for (name, value) in load_params(bytes)? {
            let p = self
                .layout
                .params
                .iter()
                .find(|p| p.name == name)
                .ok_or_else(|| {
                    Error::InvalidArgument(format!(
                        "`{name}` is not a param of the graph (params: {})",
                        self.layout
                            .params
                            .iter()
                            .map(|p| p.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ))
                })?;
            check_tensor(&self.layout, p.entry, &name, &value)?;
            params.insert(name, value);
        }
        let mut m = self.clone();
        m.params = Arc::new(params);
        Ok(m)
    }

    /// The loop IR of every kernel, in library order (empty for the `ref` target).
    pub fn kernels(&self) -> &[PrimFunc] {
        match &self.program {
            Program::Kernels { kernels, .. } => kernels,
            Program::Reference(_) => &[],
        }
    }

    /// Planned storage bytes against the naive sum of every tensor's bytes.
    pub fn memory_report(&self) -> MemoryReport {
        self.layout.report()
    }

    /// The build steps and their times in milliseconds, in order.
    pub fn build_log(&self) -> &[(String, f64)] {
        &self.build_log
    }

    /// A new graph executor over this module (TVM's `lib["default"](dev)`).
    pub fn create_executor(&self) -> Result<GraphExecutor> {
        GraphExecutor::new(self)
    }
}
