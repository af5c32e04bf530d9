//! The backend registry: the one place where target names meet backends. Each backend
//! describes itself through the runtime's [`Backend`] trait (the target kind and options
//! it serves, its schedule kind, what it declares unsupported); the registry only lists
//! them. The CLI (every `--target`, its help and its errors), the op suite, the
//! random-graph suite, the conformance matrix and the ONNX runners all iterate it.
//!
//! Adding a backend to kiln is its crate (which declares its options, schedule kind,
//! unsupported cases, whether it can run here and its code listing through [`Backend`])
//! plus two lines: its entry in [`Registry::builtin`] and its dependency in this crate's
//! `Cargo.toml` (the workspace takes every `backend-*` folder). A backend that cannot run
//! on this machine (no device, no runtime in this build) is listed but not offered: its
//! target's errors say why, and `kiln inspect --emit` can still show its code. A backend
//! from outside kiln is registered on a registry value of its user
//! ([`Registry::register`]) under its own target kind ([`TargetKind::Custom`]), never
//! under a built-in kind's name.
//!
//! `ref` is not a backend: it is the graph-IR reference interpreter behind the same
//! executor API, served by every registry and compiling nothing.

use std::path::Path;
use std::sync::Arc;

use kiln_executor::backends::InterpBackend;
use kiln_executor::{Backend, CompiledModule, Params, Target, TargetKind};
use kiln_ir::Module;
use kiln_rewrite::PassContext;

use crate::build::{Built, build_on};
use crate::error::{Error, Result};

/// Backends by the target kind each serves, in the order they were registered, each
/// with whether it can run here.
#[derive(Clone, Debug, Default)]
pub struct Registry {
    entries: Vec<Entry>,
}

/// A registered backend and its [`Backend::availability`], asked once.
#[derive(Clone, Debug)]
struct Entry {
    backend: Arc<dyn Backend>,
    available: std::result::Result<(), String>,
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
    /// The backends built into kiln, one line each: `interp` (the loop-IR interpreter
    /// device), `cpu` (Cranelift), `vulkan` (SPIR-V; runs where a Vulkan device is
    /// found) and `cuda` (PTX; runs with the `cuda` feature's runtime).
    pub fn builtin() -> Registry {
        let builtin: Vec<Arc<dyn Backend>> = vec![
            Arc::new(InterpBackend),
            Arc::new(kiln_backend_cranelift::CraneliftBackend),
            Arc::new(kiln_backend_spirv::VulkanBackend),
            Arc::new(kiln_backend_cuda::CudaBackend::default()),
        ];
        let mut r = Registry::default();
        for backend in builtin {
            r.register(backend)
                .expect("the built-in backends serve distinct built-in kinds");
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
        if let Some(other) = self
            .entries
            .iter()
            .find(|e| e.backend.target_kind() == kind)
        {
            return Err(Error::InvalidRegistration(format!(
                "backend `{}` claims target `{kind}`, already served by backend `{}`",
                backend.name(),
                other.backend.name()
            )));
        }
        let available = backend.availability();
        self.entries.push(Entry { backend, available });
        Ok(())
    }

    /// This registry with `backend` added ([`Registry::register`]).
    pub fn with(mut self, backend: Arc<dyn Backend>) -> Result<Registry> {
        self.register(backend)?;
        Ok(self)
    }

    /// The registered backends that can run here, in order: what the suites run.
    pub fn backends(&self) -> Vec<Arc<dyn Backend>> {
        self.entries
            .iter()
            .filter(|e| e.available.is_ok())
            .map(|e| e.backend.clone())
            .collect()
    }

    /// Every registered backend, whether or not it can run here, in order.
    pub fn described_backends(&self) -> Vec<Arc<dyn Backend>> {
        self.entries.iter().map(|e| e.backend.clone()).collect()
    }

    /// The registered backends that cannot run here, with why.
    pub fn unavailable(&self) -> impl Iterator<Item = (&Arc<dyn Backend>, &str)> {
        self.entries.iter().filter_map(|e| {
            e.available
                .as_ref()
                .err()
                .map(|why| (&e.backend, why.as_str()))
        })
    }

    /// The backend serving `kind`, if one is registered and can run here.
    pub fn backend(&self, kind: &TargetKind) -> Option<&Arc<dyn Backend>> {
        self.entry(kind)
            .filter(|e| e.available.is_ok())
            .map(|e| &e.backend)
    }

    /// The backend registered for `kind`, whether or not it can run here: its
    /// description (options, schedule kind, code listing) needs no device.
    pub fn described(&self, kind: &TargetKind) -> Option<&Arc<dyn Backend>> {
        self.entry(kind).map(|e| &e.backend)
    }

    /// The registered backend whose code listing is called `name` (`ptx`, `spirv`).
    pub fn listing(&self, name: &str) -> Option<&Arc<dyn Backend>> {
        self.entries
            .iter()
            .map(|e| &e.backend)
            .find(|b| b.listing_name() == Some(name))
    }

    /// The names of the registered backends' code listings (`ptx`, `spirv`), in order.
    pub fn listing_names(&self) -> Vec<String> {
        self.entries
            .iter()
            .filter_map(|e| e.backend.listing_name().map(str::to_string))
            .collect()
    }

    fn entry(&self, kind: &TargetKind) -> Option<&Entry> {
        self.entries
            .iter()
            .find(|e| &e.backend.target_kind() == kind)
    }

    /// Every target this registry serves here: `ref`, then each available backend's
    /// kind.
    pub fn target_names(&self) -> Vec<String> {
        std::iter::once("ref".to_string())
            .chain(self.backends().iter().map(|b| b.target_kind().to_string()))
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
                target: target.check_options(&[])?,
                backend: None,
            });
        }
        let Some(entry) = self.entry(target.kind()) else {
            return Err(Error::UnknownTarget(format!(
                "unknown target `{target}`: no backend serves target `{}` in this build of \
                 kiln (available: {})",
                target.kind(),
                self.targets_text()
            )));
        };
        let target = target.check_options(entry.backend.options())?;
        if let Err(why) = &entry.available {
            return Err(Error::UnknownTarget(format!(
                "target `{target}` cannot run here: {why} (available: {})",
                self.targets_text()
            )));
        }
        Ok(Resolved {
            target,
            backend: Some(entry.backend.clone()),
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
