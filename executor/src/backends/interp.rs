//! The `interp` backend: the reference device. "Compiling" keeps the verified kernels;
//! device memory is the backend's own byte buffers, never shared with host arrays, so
//! every transfer is an explicit copy exactly as on a GPU; a kernel call converts its
//! buffers' bytes to `NDArray`s, runs the kernel in the loop-IR interpreter
//! ([`kiln_te::tir::interp`]) and writes the outputs' bytes back.
//!
//! Slow, but exact to the loop IR's semantics: it is what a compiled backend is checked
//! against when a graph-level difference needs narrowing down to one kernel.

use std::any::Any;
use std::sync::{Arc, RwLock};

use kiln_ir::NDArray;
use kiln_te::tir::{self, PrimFunc};

use crate::backend::{Backend, DeviceBuffer, KernelLibrary};
use crate::error::{Error, Result};
use crate::target::{Target, TargetKind};

/// The loop-IR interpreter as a backend; serves the `interp` target.
#[derive(Copy, Clone, Debug, Default)]
pub struct InterpBackend;

impl Backend for InterpBackend {
    fn name(&self) -> &str {
        "interp"
    }

    fn target_kind(&self) -> TargetKind {
        TargetKind::Interp
    }

    fn compile(&self, _target: &Target, kernels: &[PrimFunc]) -> Result<Arc<dyn KernelLibrary>> {
        for k in kernels {
            // Soundness only: the loader checked the caller's limits on kernels from files.
            tir::verify_with(k, &tir::Limits::unlimited())?;
        }
        // Compiled to the interpreter's fast path once, here, not per call.
        Ok(Arc::new(InterpLibrary {
            kernels: kernels.iter().map(tir::interp::prepare).collect(),
        }))
    }
}

/// The interp backend's kernels (prepared for the loop-IR interpreter) and device.
#[derive(Debug)]
pub struct InterpLibrary {
    kernels: Vec<tir::interp::Prepared>,
}

/// A buffer of the interp device: bytes behind a lock, so kernel calls from several
/// executors on different threads are safe.
#[derive(Debug)]
pub struct InterpBuffer {
    bytes: RwLock<Vec<u8>>,
}

impl DeviceBuffer for InterpBuffer {
    fn len(&self) -> usize {
        self.read().len()
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl InterpBuffer {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, Vec<u8>> {
        // A poisoned lock only means another thread panicked mid-copy; the bytes are
        // still bytes.
        self.bytes.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Vec<u8>> {
        self.bytes.write().unwrap_or_else(|e| e.into_inner())
    }
}

fn device_err(message: String) -> Error {
    Error::Device {
        backend: "interp".into(),
        message,
    }
}

/// The interp buffer behind `b`, or an error if another backend made it.
fn own(b: &dyn DeviceBuffer) -> Result<&InterpBuffer> {
    b.as_any()
        .downcast_ref::<InterpBuffer>()
        .ok_or_else(|| device_err(format!("{b:?} is not a buffer of the interp device")))
}

impl KernelLibrary for InterpLibrary {
    fn num_kernels(&self) -> usize {
        self.kernels.len()
    }

    fn alloc(&self, bytes: usize) -> Result<Arc<dyn DeviceBuffer>> {
        let mut zeros = kiln_ir::tensor::budget::try_vec("an interp device buffer", bytes)?;
        zeros.resize(bytes, 0u8);
        Ok(Arc::new(InterpBuffer {
            bytes: RwLock::new(zeros),
        }))
    }

    fn copy_to_device(&self, dst: &dyn DeviceBuffer, src: &[u8]) -> Result<()> {
        let mut d = own(dst)?.write();
        let n = d.len();
        let slot = d.get_mut(..src.len()).ok_or_else(|| {
            device_err(format!(
                "copy of {} bytes into a buffer of {n} bytes",
                src.len()
            ))
        })?;
        slot.copy_from_slice(src);
        Ok(())
    }

    fn copy_to_host(&self, src: &dyn DeviceBuffer, dst: &mut [u8]) -> Result<()> {
        let s = own(src)?.read();
        let part = s.get(..dst.len()).ok_or_else(|| {
            device_err(format!(
                "copy of {} bytes out of a buffer of {} bytes",
                dst.len(),
                s.len()
            ))
        })?;
        dst.copy_from_slice(part);
        Ok(())
    }

    fn call(&self, kernel: usize, args: &[Arc<dyn DeviceBuffer>]) -> Result<()> {
        let prepared = self.kernels.get(kernel).ok_or_else(|| {
            device_err(format!(
                "kernel {kernel} called, the library has {}",
                self.kernels.len()
            ))
        })?;
        let func = prepared.func();
        if args.len() != func.params.len() {
            return Err(device_err(format!(
                "@{} takes {} buffers, got {}",
                func.name,
                func.params.len(),
                args.len()
            )));
        }
        let mut arrays = Vec::with_capacity(args.len());
        for (&p, arg) in func.params.iter().zip(args) {
            let b = func.buffer(p).ok_or_else(|| {
                device_err(format!("@{}: parameter {p} has no buffer", func.name))
            })?;
            let bytes = b.numel().unwrap_or(0) * b.dtype.size_bytes();
            let data = own(&**arg)?.read();
            let part = data.get(..bytes).ok_or_else(|| {
                device_err(format!(
                    "@{}: buffer {} needs {bytes} bytes, the argument has {}",
                    func.name,
                    b.name,
                    data.len()
                ))
            })?;
            arrays.push(NDArray::from_le_bytes(b.shape.clone(), b.dtype, part)?);
        }
        prepared.run(&mut arrays)?;
        for (k, (arr, arg)) in arrays.iter().zip(args).enumerate() {
            if k >= func.num_inputs {
                let bytes = arr.to_le_bytes();
                own(&**arg)?.write()[..bytes.len()].copy_from_slice(&bytes);
            }
        }
        Ok(())
    }

    fn synchronize(&self) -> Result<()> {
        Ok(())
    }
}
