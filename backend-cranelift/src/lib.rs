//! The Cranelift CPU backend: the `cpu` target's kernels are translated from the loop IR
//! to Cranelift IR ([`codegen`]), JIT-compiled into the host process — all kernels of a
//! model in one JIT module — and run on host memory, with `parallel` loops on a thread
//! pool ([`pool`]) that lives as long as the compiled library.
//!
//! [`CraneliftBackend`] implements the runtime's [`Backend`] and describes itself there
//! (it serves the `cpu` kind and declares nothing unsupported); the `kiln` crate's
//! registry lists it, so `kiln::build(&m, "cpu", &params, 3)` compiles with it. Used
//! directly, it compiles an (optimized) module through the runtime's `assemble`:
//!
//! ```
//! use std::collections::BTreeMap;
//! use kiln_backend_cranelift::CraneliftBackend;
//! use kiln_executor::{BuildLog, assemble};
//! use kiln_ir::{DType, Module, NDArray, Type, op};
//!
//! let mut m = Module::new();
//! let x = m.var("x", Type::tensor([2, 2], DType::F32));
//! let y = m.call(op::Unary { kind: op::UnaryKind::Relu }, &[x])?;
//! m.set_main(&[x], y)?;
//! let target = "cpu -threads=2".parse()?;
//! let lib = assemble(&m, BTreeMap::new(), &target, &CraneliftBackend, BuildLog::default())?;
//! let mut exec = lib.create_executor()?;
//! exec.set_input("x", &NDArray::from_vec([2, 2], vec![-1.0f32, 2.0, -3.0, 4.0])?)?;
//! exec.run()?;
//! assert_eq!(exec.get_output(0)?.to_vec::<f32>()?, vec![0.0, 2.0, 0.0, 4.0]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Depends on `kiln-te`, `kiln-executor` and `kiln-ir` only.

pub mod codegen;
pub mod microkernel;
mod pool;
mod promote;
mod runtime;
mod simd;
#[cfg(feature = "testing")]
pub mod testing;

/// What code generation did with `vectorized` loops so far in this process: loops run as
/// f32x4, loops left scalar, f32x4 groups, and groups left scalar (unaligned)
/// (`KILN_SIMD_LOG=1` logs each loop).
pub fn simd_stats() -> [u64; 4] {
    simd::stats::snapshot()
}

use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::any::Any;
use std::fmt;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

use cranelift_jit::JITModule;
use kiln_executor::backend::{Backend, DeviceBuffer, KernelLibrary};
use kiln_executor::error::{Error, Result};
use kiln_executor::target::{OptionValue, Target, TargetKind, TargetOption};
use kiln_te::tir::PrimFunc;

use crate::pool::Pool;
use crate::runtime::{CallCtx, KernelFn, status};

/// The Cranelift JIT as a backend; serves the `cpu` target (`-threads=N` sets the pool
/// size, by default the host's available parallelism).
#[derive(Copy, Clone, Debug, Default)]
pub struct CraneliftBackend;

impl CraneliftBackend {
    /// Compiles `kernels` for `target` into a [`CraneliftLibrary`] (the concrete type
    /// behind [`Backend::compile`], with its compile time).
    pub fn compile_library(
        &self,
        target: &Target,
        kernels: &[PrimFunc],
    ) -> Result<CraneliftLibrary> {
        if !self.supports(target) {
            return Err(Error::Unsupported(format!(
                "backend `cranelift` does not compile for target `{target}`"
            )));
        }
        let threads = target
            .threads()
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        let opts = codegen::Options {
            fma: target.option("fma") != Some("0"),
            isa: microkernel::Isa::require(target.option("isa")).map_err(Error::Unsupported)?,
        };
        let compiled = codegen::compile(kernels, opts)?;
        let pool = Pool::new(threads)
            .map_err(|e| device_err(format!("cannot start the thread pool: {e}")))?;
        Ok(CraneliftLibrary {
            kernels: kernels
                .iter()
                .zip(compiled.entries)
                .map(|(k, entry)| Kernel::new(k, entry))
                .collect(),
            compile_time: compiled.compile_time,
            pool,
            code: Code(Some(compiled.module)),
        })
    }
}

/// The options of a `cpu` target.
const CPU_OPTIONS: [TargetOption; 3] = [
    TargetOption {
        name: "threads",
        value: OptionValue::Int { min: 1, max: 1024 },
        doc: "worker threads for parallel loops",
    },
    TargetOption {
        name: "fma",
        value: OptionValue::Int { min: 0, max: 1 },
        doc: "fuse multiply-adds when the host has FMA (1, the default) or round each (0)",
    },
    TargetOption {
        name: "isa",
        value: OptionValue::OneOf(&["avx512", "avx2", "sse"]),
        doc: "the micro-kernels' vector ISA (default: the best the host runs; a level it \
              lacks is refused at build)",
    },
];

impl Backend for CraneliftBackend {
    fn name(&self) -> &str {
        "cranelift"
    }

    fn target_kind(&self) -> TargetKind {
        TargetKind::Cpu
    }

    /// `-threads`, `-fma`, `-isa`.
    fn options(&self) -> &[TargetOption] {
        &CPU_OPTIONS
    }

    /// Two pool threads: parallel loops are exercised on any host.
    fn test_target(&self) -> Target {
        Target::new(TargetKind::Cpu)
            .with_option("threads", "2")
            .expect("`cpu` accepts -threads=2")
    }

    fn compile(&self, target: &Target, kernels: &[PrimFunc]) -> Result<Arc<dyn KernelLibrary>> {
        Ok(Arc::new(self.compile_library(target, kernels)?))
    }
}

/// The JIT module that owns the machine code; freed when the library is dropped.
struct Code(Option<JITModule>);

// SAFETY: after `finalize_definitions` the module is never touched again until it is
// freed on drop; the code it owns is immutable and callable from any thread.
unsafe impl Send for Code {}
// SAFETY: as above — no method of the module is called through a shared reference.
unsafe impl Sync for Code {}

impl Drop for Code {
    fn drop(&mut self) {
        if let Some(m) = self.0.take() {
            // SAFETY: the library owning this code is being dropped, so no kernel runs
            // and no function pointer into the module survives.
            unsafe { m.free_memory() };
        }
    }
}

/// One compiled kernel: its entry point and what its parameters need.
#[derive(Debug)]
struct Kernel {
    name: String,
    entry: KernelFn,
    /// Bytes each parameter needs.
    param_bytes: Vec<usize>,
    num_inputs: usize,
}

impl Kernel {
    fn new(f: &PrimFunc, entry: KernelFn) -> Kernel {
        Kernel {
            name: f.name.clone(),
            entry,
            param_bytes: f
                .params
                .iter()
                .map(|&p| {
                    f.buffer(p)
                        .map_or(0, |b| b.numel().unwrap_or(0) * b.dtype.size_bytes())
                })
                .collect(),
            num_inputs: f.num_inputs,
        }
    }
}

/// Kernels compiled by Cranelift into one JIT module, the thread pool their parallel
/// loops run on, and host-memory buffers.
pub struct CraneliftLibrary {
    kernels: Vec<Kernel>,
    compile_time: Duration,
    // Dropped before `code`: workers are joined before the code is freed.
    pool: Pool,
    code: Code,
}

impl fmt::Debug for CraneliftLibrary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CraneliftLibrary")
            .field("kernels", &self.kernels.len())
            .field("threads", &self.pool.threads())
            .field("compile_time", &self.compile_time)
            .finish()
    }
}

impl CraneliftLibrary {
    /// Wall time spent verifying, translating and compiling the kernels.
    pub fn compile_time(&self) -> Duration {
        self.compile_time
    }

    /// How many threads run a parallel loop.
    pub fn threads(&self) -> usize {
        self.pool.threads()
    }

    /// Whether the library's machine code is still held (always, until dropped).
    fn has_code(&self) -> bool {
        self.code.0.is_some()
    }
}

fn device_err(message: String) -> Error {
    Error::Device {
        backend: "cranelift".into(),
        message,
    }
}

/// Host memory of the cpu device: 64-byte aligned, zero-filled, behind a lock so that
/// calls and copies from several threads are safe.
pub struct HostBuffer {
    ptr: NonNull<u8>,
    len: usize,
    lock: RwLock<()>,
}

// SAFETY: the bytes are owned by the buffer and accessed only under `lock`.
unsafe impl Send for HostBuffer {}
// SAFETY: as above.
unsafe impl Sync for HostBuffer {}

impl fmt::Debug for HostBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HostBuffer({} bytes)", self.len)
    }
}

const BUFFER_ALIGN: usize = 64;

impl HostBuffer {
    fn new(len: usize) -> Result<HostBuffer> {
        if len == 0 {
            return Ok(HostBuffer {
                ptr: NonNull::dangling(),
                len,
                lock: RwLock::new(()),
            });
        }
        let layout = Layout::from_size_align(len, BUFFER_ALIGN)
            .map_err(|_| device_err(format!("buffer of {len} bytes is too large")))?;
        // SAFETY: `layout` has a non-zero size.
        let p = unsafe { alloc_zeroed(layout) };
        let ptr = NonNull::new(p)
            .ok_or_else(|| device_err(format!("out of memory allocating {len} bytes")))?;
        Ok(HostBuffer {
            ptr,
            len,
            lock: RwLock::new(()),
        })
    }

    fn read(&self) -> RwLockReadGuard<'_, ()> {
        self.lock.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, ()> {
        self.lock.write().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for HostBuffer {
    fn drop(&mut self) {
        if self.len > 0 {
            // SAFETY: allocated in `new` with this layout.
            unsafe {
                dealloc(
                    self.ptr.as_ptr(),
                    Layout::from_size_align_unchecked(self.len, BUFFER_ALIGN),
                )
            }
        }
    }
}

impl DeviceBuffer for HostBuffer {
    fn len(&self) -> usize {
        self.len
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// The host buffer behind `b`, or an error if another backend made it.
fn own(b: &dyn DeviceBuffer) -> Result<&HostBuffer> {
    b.as_any()
        .downcast_ref::<HostBuffer>()
        .ok_or_else(|| device_err(format!("{b:?} is not a buffer of the cpu device")))
}

/// A held lock of a kernel argument.
enum Guard<'a> {
    Read(#[allow(dead_code)] RwLockReadGuard<'a, ()>),
    Write(#[allow(dead_code)] RwLockWriteGuard<'a, ()>),
}

impl KernelLibrary for CraneliftLibrary {
    fn num_kernels(&self) -> usize {
        self.kernels.len()
    }

    fn alloc(&self, bytes: usize) -> Result<Arc<dyn DeviceBuffer>> {
        Ok(Arc::new(HostBuffer::new(bytes)?))
    }

    fn copy_to_device(&self, dst: &dyn DeviceBuffer, src: &[u8]) -> Result<()> {
        let d = own(dst)?;
        if src.len() > d.len {
            return Err(device_err(format!(
                "copy of {} bytes into a buffer of {} bytes",
                src.len(),
                d.len
            )));
        }
        let _g = d.write();
        // SAFETY: `d` holds at least `src.len()` bytes and the write lock is held.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), d.ptr.as_ptr(), src.len()) };
        Ok(())
    }

    fn copy_to_host(&self, src: &dyn DeviceBuffer, dst: &mut [u8]) -> Result<()> {
        let s = own(src)?;
        if dst.len() > s.len {
            return Err(device_err(format!(
                "copy of {} bytes out of a buffer of {} bytes",
                dst.len(),
                s.len
            )));
        }
        let _g = s.read();
        // SAFETY: `s` holds at least `dst.len()` bytes and the read lock is held.
        unsafe { std::ptr::copy_nonoverlapping(s.ptr.as_ptr(), dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    fn call(&self, kernel: usize, args: &[Arc<dyn DeviceBuffer>]) -> Result<()> {
        let k = self.kernels.get(kernel).ok_or_else(|| {
            device_err(format!(
                "kernel {kernel} called, the library has {}",
                self.kernels.len()
            ))
        })?;
        if args.len() != k.param_bytes.len() {
            return Err(device_err(format!(
                "@{} takes {} buffers, got {}",
                k.name,
                k.param_bytes.len(),
                args.len()
            )));
        }
        let mut bufs = Vec::with_capacity(args.len());
        for (i, (a, &need)) in args.iter().zip(&k.param_bytes).enumerate() {
            let b = own(&**a)?;
            if b.len < need {
                return Err(device_err(format!(
                    "@{}: parameter {i} needs {need} bytes, the buffer has {}",
                    k.name, b.len
                )));
            }
            bufs.push((b, i >= k.num_inputs));
        }
        // Lock each distinct buffer once, in address order (no deadlock between calls).
        let mut order: Vec<(usize, &HostBuffer, bool)> = bufs
            .iter()
            .map(|&(b, w)| (b.ptr.as_ptr() as usize, b, w))
            .collect();
        order.sort_by_key(|&(a, _, _)| a);
        let mut guards: Vec<Guard<'_>> = Vec::with_capacity(order.len());
        let mut i = 0;
        while i < order.len() {
            let (addr, b, mut w) = order[i];
            let mut j = i + 1;
            while j < order.len() && order[j].0 == addr {
                w |= order[j].2;
                j += 1;
            }
            guards.push(if w && b.len > 0 {
                Guard::Write(b.write())
            } else {
                Guard::Read(b.read())
            });
            i = j;
        }
        let ptrs: Vec<*mut u8> = bufs.iter().map(|(b, _)| b.ptr.as_ptr()).collect();
        let ctx = CallCtx {
            status: AtomicU32::new(0),
            pool: &self.pool,
        };
        debug_assert!(self.has_code());
        // SAFETY: the entry point was compiled for this kernel; each pointer refers to a
        // locked buffer at least as large as its parameter, and the verifier proved every
        // access in bounds.
        unsafe { (k.entry)(ptrs.as_ptr(), &ctx) };
        drop(guards);
        match ctx.status.load(Ordering::Relaxed) {
            0 => Ok(()),
            status::DIV_ZERO => Err(device_err(format!(
                "integer division by zero in @{}",
                k.name
            ))),
            status::OUT_OF_MEMORY => Err(device_err(format!(
                "out of memory allocating a local buffer in @{}",
                k.name
            ))),
            other => Err(Error::Internal(format!(
                "@{} reported status {other}",
                k.name
            ))),
        }
    }

    fn synchronize(&self) -> Result<()> {
        Ok(())
    }
}
