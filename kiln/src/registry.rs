//! The backend registry: the one place where target names meet backends. Each backend
//! describes itself through the runtime's [`Backend`] trait (the target kind and options
//! it serves, its schedule kind, what it declares unsupported); the registry only lists
//! them. The CLI (every `--target`, its help and its errors), the op suite, the
//! random-graph suite, the conformance matrix and the ONNX runners all iterate it.
//!
//! Adding a backend to kiln is its crate plus one line in [`Registry::builtin`] (and the
//! crate in this crate's `Cargo.toml`). A backend from outside kiln is registered on a
//! registry value of its user ([`Registry::register`]) under its own target kind
//! ([`TargetKind::Custom`]), never under a built-in kind's name.
//!
//! `ref` is not a backend: it is the graph-IR reference interpreter behind the same
//! executor API, served by every registry and compiling nothing.

use std::path::Path;
use std::sync::Arc;

use kiln_backend_cranelift::CraneliftBackend;
use kiln_backend_cuda::CudaBackend;
use kiln_backend_spirv::VulkanBackend;
use kiln_executor::backends::InterpBackend;
use kiln_executor::{Backend, CompiledModule, Params, Target, TargetKind};
use kiln_ir::Module;
use kiln_rewrite::PassContext;

use crate::build::{Built, build_on};
use crate::error::{Error, Result};

/// Backends by the target kind each serves, in the order they were registered.
#[derive(Clone, Debug, Default)]
pub struct Registry {
    backends: Vec<Arc<dyn Backend>>,
}

/// A target string resolved against a registry: the parsed target (its options checked
/// by its backend) and the backend that compiles for it (`None` for `ref`).
#[derive(Clone, Debug)]
pub struct Resolved {
    /// The target.
    pub target: Target,
    /// The backend serving it; `None` for `ref`, which compiles nothing.
    pub backend: Option<Arc<dyn Backend>>,
}

impl Registry {
    /// The backends built into kiln: `interp` (the loop-IR interpreter device), `cpu`
    /// (Cranelift). A new in-tree backend is one more line here.
    pub fn builtin() -> Registry {
        let mut r = Registry::default();
        r.backends.push(Arc::new(InterpBackend));
        r.backends.push(Arc::new(CraneliftBackend));
        // `cuda` only where this build has a CUDA runtime (the `cuda` feature).
        if CudaBackend::has_device_runtime() {
            r.backends.push(Arc::new(CudaBackend::default()));
        }
        // `vulkan` only where a Vulkan device is found (a loader and a driver).
        if VulkanBackend::probe().is_ok() {
            r.backends.push(Arc::new(VulkanBackend));
        }
        r
    }

    /// Adds `backend` for its target kind; refused if the kind is `ref` or already
    /// served by a registered backend.
    pub fn register(&mut self, backend: Arc<dyn Backend>) -> Result<()> {
        let kind = backend.target_kind();
        if kind == TargetKind::Ref {
            return Err(Error::InvalidRegistration(format!(
                "backend `{}` claims target `ref`, the reference interpreter's",
                backend.name()
            )));
        }
        if let Some(other) = self.backend(&kind) {
            return Err(Error::InvalidRegistration(format!(
                "backend `{}` claims target `{kind}`, already served by backend `{}`",
                backend.name(),
                other.name()
            )));
        }
        self.backends.push(backend);
        Ok(())
    }

    /// This registry with `backend` added ([`Registry::register`]).
    pub fn with(mut self, backend: Arc<dyn Backend>) -> Result<Registry> {
        self.register(backend)?;
        Ok(self)
    }

    /// The registered backends, in order.
    pub fn backends(&self) -> &[Arc<dyn Backend>] {
        &self.backends
    }

    /// The backend serving `kind`, if one is registered.
    pub fn backend(&self, kind: &TargetKind) -> Option<&Arc<dyn Backend>> {
        self.backends.iter().find(|b| &b.target_kind() == kind)
    }

    /// Every target this registry serves: `ref`, then each backend's kind.
    pub fn target_names(&self) -> Vec<String> {
        std::iter::once("ref".to_string())
            .chain(self.backends.iter().map(|b| b.target_kind().to_string()))
            .collect()
    }

    /// [`Registry::target_names`] joined with `, `, for help texts and errors.
    pub fn targets_text(&self) -> String {
        self.target_names().join(", ")
    }

    /// Parses `text` (`cpu -threads=2`) and finds its backend. Unknown kinds and kinds
    /// with no backend in this registry list the targets served; bad options say what
    /// the kind accepts.
    pub fn resolve(&self, text: &str) -> Result<Resolved> {
        let target = Target::parse(text)?;
        self.resolve_target(target)
    }

    /// [`Registry::resolve`] for a parsed target.
    pub fn resolve_target(&self, target: Target) -> Result<Resolved> {
        if *target.kind() == TargetKind::Ref {
            return Ok(Resolved {
                target,
                backend: None,
            });
        }
        let Some(backend) = self.backend(target.kind()) else {
            let why = match target.kind() {
                TargetKind::Custom(_) => format!("unknown target `{target}`"),
                TargetKind::Cuda => format!(
                    "target `{target}` is not built yet: {}",
                    kiln_backend_cuda::NO_RUNTIME
                ),
                TargetKind::Vulkan => match VulkanBackend::probe() {
                    Err(why) => format!("target `{target}` has no device: {why}"),
                    Ok(_) => format!("target `{target}` is not registered"),
                },
                _ => format!("target `{target}` is not built yet"),
            };
            return Err(Error::UnknownTarget(format!(
                "{why}: no backend serves target `{}` in this build of kiln (available: {})",
                target.kind(),
                self.targets_text()
            )));
        };
        let target = target.check_options(backend.options())?;
        Ok(Resolved {
            target,
            backend: Some(backend.clone()),
        })
    }

    /// Builds `module` for `target` on the backend this registry names (see
    /// [`crate::build()`]), returning the optimizer's report beside the module.
    pub fn build(
        &self,
        module: &Module,
        target: &str,
        params: &Params,
        opts: impl Into<PassContext>,
    ) -> Result<Built> {
        let r = self.resolve(target)?;
        build_on(module, &r.target, r.backend.as_deref(), params, opts)
    }

    /// Loads a module exported by `CompiledModule::export` and compiles its kernels again
    /// on the backend serving the target recorded in the file.
    pub fn load_module(&self, path: impl AsRef<Path>) -> Result<CompiledModule> {
        Ok(kiln_executor::load_with(path, &|t| {
            self.compiling_backend(t)
        })?)
    }

    /// [`Registry::load_module`] from bytes in memory.
    pub fn load_module_bytes(&self, bytes: &[u8]) -> Result<CompiledModule> {
        Ok(kiln_executor::load_bytes_with(bytes, &|t| {
            self.compiling_backend(t)
        })?)
    }

    /// The backend for a target read from a module file (never `ref`: such files hold
    /// kernels).
    fn compiling_backend(&self, target: &Target) -> kiln_executor::Result<Arc<dyn Backend>> {
        match self.resolve_target(target.clone()) {
            Ok(Resolved {
                backend: Some(b), ..
            }) => Ok(b),
            Ok(_) => Err(kiln_executor::Error::InvalidModuleFile(
                "the file names target `ref`, which has no kernels".into(),
            )),
            Err(Error::Executor(e)) => Err(e),
            Err(e) => Err(kiln_executor::Error::Unsupported(e.to_string())),
        }
    }
}
