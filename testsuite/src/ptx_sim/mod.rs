//! A PTX interpreter for the subset kiln's CUDA backend emits, test-only: the `cuda`
//! backend's runtime on machines without a GPU, so every suite can check PTX against the
//! reference. Written from the PTX ISA manual's semantics, sharing no code with the
//! codegen: [`parse`] reads the text, [`exec`] runs launches (lockstep phases between
//! barriers; barrier divergence, shared-memory races, uninitialized scratch reads,
//! out-of-bounds and misaligned accesses are errors).
//!
//! [`PtxSim`] implements the backend's `PtxRuntime`: device buffers are byte vectors at
//! distinct fake device addresses, copies are explicit, a launch runs to completion.
//! [`cuda_backend`] is the `cuda` backend over it, as the suites take it.
//!
//! Not modelled: the approximate instructions' error (`ex2.approx`, `lg2.approx` are
//! computed exactly, within their documented error), races in global memory between
//! threads or blocks, the memory model beyond "phases between barriers".

pub mod exec;
pub mod op_cases;
pub mod parse;
#[cfg(test)]
mod tests;

use std::any::Any;
use std::sync::{Arc, Mutex};

use kiln::Backend;
use kiln_backend_cuda::{CudaBackend, PtxModule, PtxRuntime};
use kiln_executor::{DeviceBuffer, Error, Result};

fn sim_err(message: String) -> Error {
    Error::Device {
        backend: "cuda (ptx-sim)".into(),
        message,
    }
}

/// The `cuda` backend running in the PTX interpreter.
pub fn cuda_backend() -> Arc<dyn Backend> {
    Arc::new(CudaBackend::with_runtime(Arc::new(PtxSim::default())))
}

/// The PTX interpreter as a CUDA runtime.
#[derive(Debug, Default)]
pub struct PtxSim {
    next: Mutex<u64>,
}

/// Device memory of the interpreter.
#[derive(Debug)]
pub struct SimBuffer {
    base: u64,
    bytes: Mutex<Vec<u8>>,
}

impl DeviceBuffer for SimBuffer {
    fn len(&self) -> usize {
        self.bytes.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

fn own(b: &dyn DeviceBuffer) -> Result<&SimBuffer> {
    b.as_any()
        .downcast_ref::<SimBuffer>()
        .ok_or_else(|| sim_err(format!("{b:?} is not a buffer of the PTX interpreter")))
}

impl PtxRuntime for PtxSim {
    fn name(&self) -> &str {
        "ptx-sim"
    }

    fn load(&self, ptx: &str) -> Result<Arc<dyn PtxModule>> {
        let module = parse::parse(ptx).map_err(sim_err)?;
        Ok(Arc::new(SimModule { module }))
    }

    fn alloc(&self, bytes: usize) -> Result<Arc<dyn DeviceBuffer>> {
        let mut next = self.next.lock().unwrap_or_else(|e| e.into_inner());
        // Distinct addresses 256-byte aligned with a gap, so that an access past a
        // buffer's end lands in no buffer.
        let base = 0x7f00_0000_0000 + *next;
        *next += (bytes as u64).div_ceil(256) * 256 + 256;
        Ok(Arc::new(SimBuffer {
            base,
            bytes: Mutex::new(vec![0; bytes]),
        }))
    }

    fn copy_to_device(&self, dst: &dyn DeviceBuffer, src: &[u8]) -> Result<()> {
        let mut d = own(dst)?.bytes.lock().unwrap_or_else(|e| e.into_inner());
        let n = d.len();
        d.get_mut(..src.len())
            .ok_or_else(|| sim_err(format!("copy of {} bytes into {n}", src.len())))?
            .copy_from_slice(src);
        Ok(())
    }

    fn copy_to_host(&self, src: &dyn DeviceBuffer, dst: &mut [u8]) -> Result<()> {
        let s = own(src)?.bytes.lock().unwrap_or_else(|e| e.into_inner());
        let part = s
            .get(..dst.len())
            .ok_or_else(|| sim_err(format!("copy of {} bytes out of {}", dst.len(), s.len())))?;
        dst.copy_from_slice(part);
        Ok(())
    }

    fn synchronize(&self) -> Result<()> {
        Ok(())
    }
}

/// A parsed module.
#[derive(Debug)]
pub struct SimModule {
    module: parse::Module,
}

impl PtxModule for SimModule {
    fn launch(
        &self,
        entry: &str,
        grid: [u32; 3],
        block: [u32; 3],
        args: &[Arc<dyn DeviceBuffer>],
    ) -> Result<()> {
        let e = self
            .module
            .entries
            .get(entry)
            .ok_or_else(|| sim_err(format!("no entry `{entry}` in the module")))?;
        // The launch works on copies of its distinct buffers, written back at the end.
        let mut bufs: Vec<&SimBuffer> = vec![];
        for a in args {
            let b = own(&**a)?;
            if !bufs.iter().any(|x| x.base == b.base) {
                bufs.push(b);
            }
        }
        let mut globals: Vec<exec::Global> = bufs
            .iter()
            .map(|b| exec::Global {
                base: b.base,
                data: b.bytes.lock().unwrap_or_else(|e| e.into_inner()).clone(),
            })
            .collect();
        let params: Vec<u64> = args
            .iter()
            .map(|a| own(&**a).map(|b| b.base))
            .collect::<Result<_>>()?;
        exec::launch(e, grid, block, &params, &mut globals).map_err(sim_err)?;
        for (b, g) in bufs.iter().zip(globals) {
            *b.bytes.lock().unwrap_or_else(|e| e.into_inner()) = g.data;
        }
        Ok(())
    }
}
