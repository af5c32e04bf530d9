//! The device side of the CUDA backend, as traits: a [`PtxRuntime`] loads PTX text,
//! owns device memory and copies, and a loaded [`PtxModule`] launches entries with grid
//! and block dimensions. [`CudaLibrary`] is the [`KernelLibrary`] over any runtime: a
//! kernel call is its launches, in order, on the caller's buffers. Two runtimes exist:
//! the `cust` one (feature `cuda`, [`crate::device`]) and, for tests without a GPU, the
//! PTX interpreter of `kiln-testsuite` (`testsuite/src/ptx_sim/`).

use std::fmt;
use std::sync::Arc;

use kiln_executor::{DeviceBuffer, Error, KernelLibrary, Result};
use kiln_te::tir::PrimFunc;

use crate::launch::Launch;

/// A CUDA-like device that runs PTX.
pub trait PtxRuntime: Send + Sync + fmt::Debug {
    /// The runtime's name, for messages (`cust`, `ptx-sim`).
    fn name(&self) -> &str;

    /// Loads (JIT-compiles) a PTX module.
    fn load(&self, ptx: &str) -> Result<Arc<dyn PtxModule>>;

    /// A zero-filled device buffer of `bytes` bytes.
    fn alloc(&self, bytes: usize) -> Result<Arc<dyn DeviceBuffer>>;

    /// Copies `src` into the first `src.len()` bytes of `dst`.
    fn copy_to_device(&self, dst: &dyn DeviceBuffer, src: &[u8]) -> Result<()>;

    /// Copies the first `dst.len()` bytes of `src` into `dst`.
    fn copy_to_host(&self, src: &dyn DeviceBuffer, dst: &mut [u8]) -> Result<()>;

    /// Waits for every earlier launch and copy.
    fn synchronize(&self) -> Result<()>;
}

/// A PTX module loaded by a [`PtxRuntime`].
pub trait PtxModule: Send + Sync + fmt::Debug {
    /// Launches `entry` on `grid` blocks of `block` threads; its `.u64` parameters are
    /// the device addresses of `args`, in order.
    fn launch(
        &self,
        entry: &str,
        grid: [u32; 3],
        block: [u32; 3],
        args: &[Arc<dyn DeviceBuffer>],
    ) -> Result<()>;
}

/// Compiled kernels on a [`PtxRuntime`]: kernel `i` is the launches of the `i`-th
/// `PrimFunc`, with the byte size of each of its parameters.
#[derive(Debug)]
pub struct CudaLibrary {
    pub(crate) runtime: Arc<dyn PtxRuntime>,
    pub(crate) module: Arc<dyn PtxModule>,
    pub(crate) kernels: Vec<KernelLaunches>,
}

/// The launches of one kernel and what its parameters need.
#[derive(Clone, Debug)]
pub(crate) struct KernelLaunches {
    pub name: String,
    pub launches: Vec<Launch>,
    pub param_bytes: Vec<usize>,
    /// Whether the launches take a status word after the buffers (integer division
    /// by zero sets it).
    pub status: bool,
}

impl KernelLaunches {
    pub(crate) fn new(func: &PrimFunc, launches: Vec<Launch>) -> KernelLaunches {
        KernelLaunches {
            name: func.name.clone(),
            launches,
            status: func.may_divide_by_zero(),
            param_bytes: func
                .params
                .iter()
                .map(|&p| {
                    func.buffer(p)
                        .map_or(0, |b| b.numel().unwrap_or(0) * b.dtype.size_bytes())
                })
                .collect(),
        }
    }
}

impl CudaLibrary {
    fn device_err(&self, message: String) -> Error {
        Error::Device {
            backend: format!("cuda ({})", self.runtime.name()),
            message,
        }
    }
}

impl KernelLibrary for CudaLibrary {
    fn num_kernels(&self) -> usize {
        self.kernels.len()
    }

    fn alloc(&self, bytes: usize) -> Result<Arc<dyn DeviceBuffer>> {
        self.runtime.alloc(bytes)
    }

    fn copy_to_device(&self, dst: &dyn DeviceBuffer, src: &[u8]) -> Result<()> {
        self.runtime.copy_to_device(dst, src)
    }

    fn copy_to_host(&self, src: &dyn DeviceBuffer, dst: &mut [u8]) -> Result<()> {
        self.runtime.copy_to_host(src, dst)
    }

    fn call(&self, kernel: usize, args: &[Arc<dyn DeviceBuffer>]) -> Result<()> {
        let k = self.kernels.get(kernel).ok_or_else(|| {
            self.device_err(format!(
                "kernel {kernel} called, the library has {}",
                self.kernels.len()
            ))
        })?;
        if args.len() != k.param_bytes.len() {
            return Err(self.device_err(format!(
                "@{} takes {} buffers, got {}",
                k.name,
                k.param_bytes.len(),
                args.len()
            )));
        }
        for (i, (a, &need)) in args.iter().zip(&k.param_bytes).enumerate() {
            if a.len() < need {
                return Err(self.device_err(format!(
                    "@{}: parameter {i} needs {need} bytes, the buffer has {}",
                    k.name,
                    a.len()
                )));
            }
        }
        if !k.status {
            for l in &k.launches {
                self.module.launch(&l.entry, l.grid, l.block, args)?;
            }
            return Ok(());
        }
        // The status word: waited for and read back after the launches, so a division
        // by zero is this call's error.
        let status = self.runtime.alloc(4)?;
        let mut with_status = args.to_vec();
        with_status.push(status.clone());
        for l in &k.launches {
            self.module
                .launch(&l.entry, l.grid, l.block, &with_status)?;
        }
        self.runtime.synchronize()?;
        let mut word = [0u8; 4];
        self.runtime.copy_to_host(status.as_ref(), &mut word)?;
        if u32::from_ne_bytes(word) != 0 {
            return Err(self.device_err(format!("integer division by zero in @{}", k.name)));
        }
        Ok(())
    }

    fn synchronize(&self) -> Result<()> {
        self.runtime.synchronize()
    }
}
