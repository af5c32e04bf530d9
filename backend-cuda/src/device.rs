//! The CUDA driver as a [`PtxRuntime`] (feature `cuda`), through cust 0.3: one context
//! on device 0 (made current on whichever thread calls), PTX modules JIT-loaded by the
//! driver, device memory as byte buffers, launches on one stream; `synchronize` waits
//! for that stream. cust's build script needs a CUDA install; CI type-checks this file
//! with `DOCS_RS=1 cargo check -p kiln-backend-cuda --features cuda`.

use std::any::Any;
use std::ffi::c_void;
use std::sync::{Arc, Mutex, OnceLock};

use cust::context::{Context, CurrentContext};
use cust::function::{BlockSize, GridSize};
use cust::memory::{CopyDestination, DeviceBuffer as CuBuffer};
use cust::module::Module;
use cust::stream::{Stream, StreamFlags};
use kiln_executor::{DeviceBuffer, Error, Result};

use crate::runtime::{PtxModule, PtxRuntime};

/// A device error with `message`.
fn device_err(message: String) -> Error {
    Error::Device {
        backend: "cuda (cust)".into(),
        message,
    }
}

/// A device error: `what` failed with the driver's `e`. The error is named by its
/// variant (`NoDevice`, `LaunchFailed`...): cust's `Display` asks the driver for the text
/// and fails (a panic in `format!`) when the driver cannot answer.
fn err(what: &str, e: cust::error::CudaError) -> Error {
    device_err(format!("{what}: {e:?} (CUDA error {})", e as u32))
}

/// The CUDA driver's context on device 0 and the stream kernels run on.
#[derive(Debug)]
pub struct CustRuntime {
    ctx: Context,
    stream: Stream,
}

impl CustRuntime {
    /// Initializes the driver and opens a context on device 0.
    pub fn new() -> Result<CustRuntime> {
        let ctx = cust::quick_init().map_err(|e| err("initializing CUDA", e))?;
        let stream =
            Stream::new(StreamFlags::DEFAULT, None).map_err(|e| err("creating a stream", e))?;
        Ok(CustRuntime { ctx, stream })
    }

    /// The process's one runtime, opened at the first call.
    pub fn shared() -> Result<Arc<dyn PtxRuntime>> {
        static RUNTIME: OnceLock<std::result::Result<Arc<CustRuntime>, String>> = OnceLock::new();
        let opened = RUNTIME.get_or_init(|| {
            CustRuntime::new().map(Arc::new).map_err(|e| match e {
                Error::Device { message, .. } => message,
                other => other.to_string(),
            })
        });
        match opened {
            Ok(r) => Ok(r.clone()),
            Err(message) => Err(device_err(message.clone())),
        }
    }

    fn current(&self) -> Result<()> {
        CurrentContext::set_current(&self.ctx).map_err(|e| err("making the context current", e))
    }
}

/// Device memory of the cust runtime.
#[derive(Debug)]
pub struct CustBuffer {
    buf: Mutex<CuBuffer<u8>>,
    len: usize,
}

impl DeviceBuffer for CustBuffer {
    fn len(&self) -> usize {
        self.len
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

fn own(b: &dyn DeviceBuffer) -> Result<&CustBuffer> {
    b.as_any()
        .downcast_ref::<CustBuffer>()
        .ok_or_else(|| device_err(format!("buffer: {b:?} is not a buffer of the CUDA device")))
}

fn too_long(n: usize, len: usize) -> Error {
    device_err(format!(
        "copy: {n} bytes do not fit a buffer of {len} bytes"
    ))
}

impl PtxRuntime for CustRuntime {
    fn name(&self) -> &str {
        "cust"
    }

    fn load(&self, ptx: &str) -> Result<Arc<dyn PtxModule>> {
        self.current()?;
        let module = Module::from_ptx(ptx, &[]).map_err(|e| err("loading the PTX", e))?;
        Ok(Arc::new(CustModule {
            module,
            stream: Stream::new(StreamFlags::DEFAULT, None)
                .map_err(|e| err("creating a stream", e))?,
        }))
    }

    fn alloc(&self, bytes: usize) -> Result<Arc<dyn DeviceBuffer>> {
        self.current()?;
        // cust does not allocate zero bytes; one byte stands in.
        let buf = CuBuffer::zeroed(bytes.max(1)).map_err(|e| err("allocating", e))?;
        Ok(Arc::new(CustBuffer {
            buf: Mutex::new(buf),
            len: bytes,
        }))
    }

    fn copy_to_device(&self, dst: &dyn DeviceBuffer, src: &[u8]) -> Result<()> {
        self.current()?;
        let d = own(dst)?;
        if src.len() > d.len {
            return Err(too_long(src.len(), d.len));
        }
        if src.is_empty() {
            return Ok(());
        }
        let buf = d.buf.lock().unwrap_or_else(|e| e.into_inner());
        let mut part = buf.index(..src.len());
        part.copy_from(src)
            .map_err(|e| err("copying to the device", e))
    }

    fn copy_to_host(&self, src: &dyn DeviceBuffer, dst: &mut [u8]) -> Result<()> {
        self.current()?;
        let s = own(src)?;
        if dst.len() > s.len {
            return Err(too_long(dst.len(), s.len));
        }
        if dst.is_empty() {
            return Ok(());
        }
        self.stream
            .synchronize()
            .map_err(|e| err("synchronizing", e))?;
        let buf = s.buf.lock().unwrap_or_else(|e| e.into_inner());
        buf.index(..dst.len())
            .copy_to(dst)
            .map_err(|e| err("copying to the host", e))
    }

    fn synchronize(&self) -> Result<()> {
        self.current()?;
        CurrentContext::synchronize().map_err(|e| err("synchronizing", e))
    }
}

/// A module loaded by the driver, with the stream its launches go to.
#[derive(Debug)]
pub struct CustModule {
    module: Module,
    stream: Stream,
}

impl PtxModule for CustModule {
    fn launch(
        &self,
        entry: &str,
        grid: [u32; 3],
        block: [u32; 3],
        args: &[Arc<dyn DeviceBuffer>],
    ) -> Result<()> {
        let f = self
            .module
            .get_function(entry)
            .map_err(|e| err(&format!("finding entry {entry}"), e))?;
        let mut ptrs: Vec<u64> = Vec::with_capacity(args.len());
        for a in args {
            let b = own(&**a)?;
            let buf = b.buf.lock().unwrap_or_else(|e| e.into_inner());
            ptrs.push(buf.as_device_ptr().as_raw());
        }
        let params: Vec<*mut c_void> = ptrs
            .iter_mut()
            .map(|p| p as *mut u64 as *mut c_void)
            .collect();
        let [gx, gy, gz] = grid;
        let [bx, by, bz] = block;
        // SAFETY: every parameter of kiln's entries is a `.u64` device pointer, one per
        // buffer, and `params` points at exactly that many u64s that outlive the call;
        // the launch is synchronized before any buffer is read back or freed.
        unsafe {
            self.stream.launch(
                &f,
                GridSize::xyz(gx, gy, gz),
                BlockSize::xyz(bx, by, bz),
                0,
                &params,
            )
        }
        .map_err(|e| err(&format!("launching {entry}"), e))?;
        self.stream
            .synchronize()
            .map_err(|e| err(&format!("running {entry}"), e))
    }
}
