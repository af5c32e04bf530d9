//! The plug-in point for code generators: the [`Backend`] trait, the [`KernelLibrary`] a
//! backend compiles loop-IR kernels into, and the [`DeviceBuffer`]s that library's device
//! owns. The executor knows backends only through these traits (DESIGN.md); the one
//! backend that lives in this crate, [`crate::backends::interp`], is the reference device
//! that proves the abstraction before any real device exists.
//!
//! The contract, shaped after cubecl's compiler/runtime split and TVM's device API:
//! - **compile** ([`Backend::compile`]): a list of verified [`PrimFunc`]s becomes a
//!   library; kernel `i` of the library is the `i`-th function given. Compiling happens at
//!   build or load time only.
//! - **memory** ([`KernelLibrary::alloc`]): device buffers are plain bytes owned by the
//!   device and never alias host memory; data moves only through the explicit copies
//!   [`KernelLibrary::copy_to_device`] and [`KernelLibrary::copy_to_host`].
//! - **calls** ([`KernelLibrary::call`]): a kernel runs on one buffer per parameter of its
//!   `PrimFunc` (inputs, then outputs). A buffer may be larger than the parameter (storage
//!   is shared between tensors by the memory planner); the kernel uses its first bytes.
//! - **time** ([`KernelLibrary::synchronize`]): calls may be asynchronous; after
//!   `synchronize` every earlier call has finished, so the host clock around a
//!   synchronized region is the timer.
//!
//! Every object is `Send + Sync`: one compiled library serves several executors running
//! on different threads at once.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use kiln_te::tir::PrimFunc;
use kiln_te::topi::TargetKind as LowerKind;

use crate::error::Result;
use crate::target::Target;

/// A code generator and the device it runs on.
pub trait Backend: Send + Sync + fmt::Debug {
    /// The backend's name, for messages (`interp`, `cranelift`, ...).
    fn name(&self) -> &str;

    /// Whether this backend compiles for `target` (its kind and options).
    fn supports(&self, target: &Target) -> bool;

    /// Which default schedules the kernels are lowered with for `target`: loops for a
    /// CPU, or blocks and threads for a GPU. By default, GPU targets get GPU schedules.
    fn lower_kind(&self, target: &Target) -> LowerKind {
        lower_kind(target)
    }

    /// Compiles `kernels` into a library for this backend's device; kernel `i` of the
    /// library is `kernels[i]`. The kernels have passed `tir::verify`.
    fn compile(&self, target: &Target, kernels: &[PrimFunc]) -> Result<Arc<dyn KernelLibrary>>;
}

/// Compiled kernels together with the device they run on.
pub trait KernelLibrary: Send + Sync + fmt::Debug {
    /// How many kernels the library holds.
    fn num_kernels(&self) -> usize;

    /// A new device buffer of `bytes` bytes, zero-filled.
    fn alloc(&self, bytes: usize) -> Result<Arc<dyn DeviceBuffer>>;

    /// Copies `src` into the first `src.len()` bytes of `dst`.
    fn copy_to_device(&self, dst: &dyn DeviceBuffer, src: &[u8]) -> Result<()>;

    /// Copies the first `dst.len()` bytes of `src` into `dst`.
    fn copy_to_host(&self, src: &dyn DeviceBuffer, dst: &mut [u8]) -> Result<()>;

    /// Runs kernel `kernel` with one buffer per parameter (inputs, then outputs).
    fn call(&self, kernel: usize, args: &[Arc<dyn DeviceBuffer>]) -> Result<()>;

    /// Waits until every earlier call and copy has finished.
    fn synchronize(&self) -> Result<()>;
}

/// Memory on a library's device. Backends downcast through [`DeviceBuffer::as_any`] to
/// their own buffer type; a buffer from another backend is an error, not a panic.
pub trait DeviceBuffer: Send + Sync + fmt::Debug {
    /// The size in bytes.
    fn len(&self) -> usize;

    /// Whether the buffer holds no bytes.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The concrete buffer, for the backend that made it.
    fn as_any(&self) -> &dyn Any;
}

/// The default schedule kind for a target: GPU schedules for GPU targets, CPU schedules
/// otherwise (the interpreters run CPU schedules fastest).
pub fn lower_kind(target: &Target) -> LowerKind {
    if target.kind().is_gpu() {
        LowerKind::Gpu
    } else {
        LowerKind::Cpu
    }
}
