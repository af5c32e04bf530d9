//! The SPIR-V backend: loop IR → SPIR-V compute shaders (rspirv), run on any Vulkan 1.2
//! device through `ash` (libvulkan loaded at run time), Mesa's CPU driver lavapipe
//! included.
//!
//! - [`launch`] splits a thread-bound [`PrimFunc`] (as the GPU default schedules make
//!   them) into launches and reads each one's workgroup count and size; [`codegen`]
//!   turns one launch into one `GLCompute` module; [`features`] is what a device offers
//!   codegen (capabilities, limits).
//! - [`compile_module`] compiles a kernel list; [`spirv_of`] is its disassembly (what
//!   `kiln inspect --emit spirv` prints, through [`disasm`]).
//! - [`VulkanBackend`] is the `vulkan` target's [`Backend`]: [`vulkan`] owns the
//!   instance and device, the buffers, the pipelines and the recorded command buffers.

pub mod codegen;
pub mod disasm;
pub mod features;
pub mod launch;

pub use kiln_executor::Backend;
use kiln_executor::Result;
use kiln_te::tir::{self, PrimFunc};

pub use features::Features;
pub use launch::Launch;

/// One launch of a kernel: its dispatch and its shader module's words.
#[derive(Clone, Debug)]
pub struct SpirvLaunch {
    /// Workgroup count and size.
    pub launch: Launch,
    /// The SPIR-V module (entry point `main`).
    pub words: Vec<u32>,
}

/// One compiled kernel: its launches in order and the byte size of each parameter.
#[derive(Clone, Debug)]
pub struct SpirvKernel {
    /// The kernel's name.
    pub name: String,
    /// Its launches, run in order.
    pub launches: Vec<SpirvLaunch>,
    /// Bytes of each buffer parameter (inputs, then outputs).
    pub param_bytes: Vec<usize>,
}

/// The SPIR-V of `kernels` for a device with `features` (each kernel verified first).
pub fn compile_module(kernels: &[PrimFunc], features: &Features) -> Result<Vec<SpirvKernel>> {
    kernels
        .iter()
        .map(|f| {
            tir::verify(f)?;
            let launches = launch::launch_roots(f)
                .iter()
                .map(|root| {
                    let l = launch::launch_of(root, features).map_err(|e| {
                        kiln_executor::Error::Unsupported(format!(
                            "SPIR-V codegen, kernel @{}: {e}",
                            f.name
                        ))
                    })?;
                    let words = codegen::emit_launch(f, root, &l, features)?;
                    Ok(SpirvLaunch { launch: l, words })
                })
                .collect::<Result<Vec<_>>>()?;
            let param_bytes = f
                .params
                .iter()
                .map(|&p| {
                    f.buffer(p)
                        .map_or(0, |b| b.numel().unwrap_or(0) * b.dtype.size_bytes())
                })
                .collect();
            Ok(SpirvKernel {
                name: f.name.clone(),
                launches,
                param_bytes,
            })
        })
        .collect()
}

/// The disassembly of every launch of `kernels` (`kiln inspect --emit spirv`), each
/// headed by its kernel, workgroup count and size.
pub fn spirv_of(kernels: &[PrimFunc]) -> Result<String> {
    let mut out = String::new();
    for k in compile_module(kernels, &Features::ANY)? {
        for (j, l) in k.launches.iter().enumerate() {
            out.push_str(&format!(
                "; @{} launch {j}: workgroups {:?}, workgroup size {:?}\n",
                k.name, l.launch.groups, l.launch.size
            ));
            out.push_str(&disasm::disassemble(&l.words));
            out.push('\n');
        }
    }
    Ok(out)
}
