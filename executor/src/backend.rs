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
//!   synchronized region is the timer — unless the device measures its own calls
//!   ([`KernelLibrary::begin_timing`]/[`KernelLibrary::end_timing`]: Vulkan timestamp
//!   queries; CUDA events could serve the same pair), which `benchmark` and the debug
//!   executor then prefer.
//!
//! Every object is `Send + Sync`: one compiled library serves several executors running
//! on different threads at once.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use kiln_ir::DType;
use kiln_te::tir::PrimFunc;
use kiln_te::topi::ScheduleKind;

use crate::error::Result;
use crate::target::{Target, TargetKind, TargetOption};

/// A code generator and the device it runs on. A backend describes itself here, once:
/// the target kind it serves and that kind's options, which default schedules its
/// kernels are lowered with, and what it declares unsupported. The registry of the
/// `kiln` crate, the CLI and every test suite read these answers; nothing else maps
/// targets to backends.
pub trait Backend: Send + Sync + fmt::Debug {
    /// The backend's name, for messages (`interp`, `cranelift`, ...).
    fn name(&self) -> &str;

    /// The one target kind this backend serves (`cpu`, or a
    /// [`TargetKind::Custom`] kind for a backend from outside kiln).
    fn target_kind(&self) -> TargetKind;

    /// The options its targets accept (none by default): the registry checks a target
    /// against this table when it resolves it, and help texts and errors list it.
    fn options(&self) -> &[TargetOption] {
        &[]
    }

    /// Whether this backend can compile and run here, or why not (no device found, no
    /// device runtime in this build). The registry lists every built-in backend but
    /// offers only available ones; the reason is what a user asking for its target is
    /// told. Available by default.
    fn availability(&self) -> std::result::Result<(), String> {
        Ok(())
    }

    /// The target the test suites run this backend with (`cpu -threads=2`); by default
    /// its kind without options.
    fn test_target(&self) -> Target {
        Target::new(self.target_kind())
    }

    /// What this backend declares it does not support: a case that uses one of these
    /// (op, dtype) pairs is skipped by the suites and counted, never passed silently.
    fn unsupported(&self) -> Vec<Unsupported> {
        vec![]
    }

    /// Whether this backend compiles for `target`: by default, any target of its kind.
    fn supports(&self, target: &Target) -> bool {
        *target.kind() == self.target_kind()
    }

    /// Which default schedules the kernels are lowered with for `target`: loops for a
    /// CPU (the default), or blocks and threads for a GPU.
    fn schedule_kind(&self, _target: &Target) -> ScheduleKind {
        ScheduleKind::Cpu
    }

    /// The name of the text form this backend shows its generated code in (`ptx`,
    /// `spirv`): what `kiln inspect --emit NAME` asks for. `None` (the default) when it
    /// has none.
    fn listing_name(&self) -> Option<&str> {
        None
    }

    /// The code this backend generates for `kernels` (lowered with its
    /// [`schedule_kind`](Self::schedule_kind)), as text in its
    /// [`listing_name`](Self::listing_name) form. Needs no device.
    fn listing(&self, _target: &Target, _kernels: &[PrimFunc]) -> Result<String> {
        Err(crate::Error::Unsupported(format!(
            "backend `{}` has no text form of its code",
            self.name()
        )))
    }

    /// Compiles `kernels` into a library for this backend's device; kernel `i` of the
    /// library is `kernels[i]`. The kernels have passed `tir::verify`.
    fn compile(&self, target: &Target, kernels: &[PrimFunc]) -> Result<Arc<dyn KernelLibrary>>;
}

/// An (op, dtype) pair a backend declares it does not support, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unsupported {
    /// The op's name as the graph IR writes it (`nn.conv2d`); `*` matches every op.
    pub op: String,
    /// The dtype the op is unsupported for.
    pub dtype: DType,
    /// Why, in a few words (shown in skip counts).
    pub reason: String,
}

impl Unsupported {
    /// Whether this declaration covers `op` at `dtype`.
    pub fn covers(&self, op: &str, dtype: DType) -> bool {
        (self.op == "*" || self.op == op) && self.dtype == dtype
    }
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

    /// Starts a timing session on the calling thread: the device measures each kernel
    /// call the thread makes until [`end_timing`](Self::end_timing). Returns whether the
    /// device can (by default it cannot, and the host clock is the timer).
    fn begin_timing(&self) -> bool {
        false
    }

    /// Ends the calling thread's timing session: waits for its calls, then returns the
    /// device time of each call made since [`begin_timing`](Self::begin_timing), in call
    /// order. `None` without a session.
    fn end_timing(&self) -> Result<Option<CallTimes>> {
        Ok(None)
    }
}

/// Device-measured durations of kernel calls (from [`KernelLibrary::end_timing`]).
#[derive(Clone, Debug, PartialEq)]
pub struct CallTimes {
    /// What measured them, for reports (`Vulkan timestamp queries on llvmpipe`).
    pub clock: String,
    /// One `(kernel index, seconds)` per call, in call order.
    pub calls: Vec<(usize, f64)>,
}

/// Which clock a reported time comes from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Clock {
    /// The host's clock around synchronized calls (launch and wait overheads included).
    #[default]
    Host,
    /// The device's own measurement of its kernel calls ([`CallTimes::clock`] says how).
    Device(String),
}

impl fmt::Display for Clock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Clock::Host => write!(f, "host clock"),
            Clock::Device(how) => write!(f, "device clock ({how})"),
        }
    }
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
