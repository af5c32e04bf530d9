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
pub mod vulkan;

use std::sync::Arc;

pub use kiln_executor::Backend;
use kiln_executor::{
    Error, KernelLibrary, OptionValue, Result, Target, TargetKind, TargetOption, Unsupported,
};
use kiln_ir::DType;
use kiln_te::tir::{self, PrimFunc};
use kiln_te::topi::ScheduleKind;

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
    /// Whether the launches take the status word (binding `param_bytes.len()`) that
    /// reports an integer division by zero.
    pub status: bool,
}

/// The SPIR-V of `kernels` for a device with `features` (each kernel verified first).
pub fn compile_module(kernels: &[PrimFunc], features: &Features) -> Result<Vec<SpirvKernel>> {
    kernels
        .iter()
        .map(|f| {
            tir::verify(f)?;
            // Code generation handles the core loop IR only.
            let f = &tir::legalize(f)?;
            let launches = f
                .launch_roots()
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
                status: f.may_divide_by_zero(),
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
            let folded = if l.launch.folded() {
                format!(" (a grid of {:?} blocks, folded)", l.launch.blocks)
            } else {
                String::new()
            };
            out.push_str(&format!(
                "; @{} launch {j}: workgroups {:?}{folded}, workgroup size {:?}\n",
                k.name, l.launch.groups, l.launch.size
            ));
            out.push_str(&disasm::disassemble(&l.words));
            out.push('\n');
        }
    }
    Ok(out)
}

/// The `vulkan` target's backend: SPIR-V codegen for the device the target selects
/// (`-device=INDEX|NAME`, default the first GPU, else the first device), run through
/// [`vulkan::VulkanLibrary`].
#[derive(Clone, Debug, Default)]
pub struct VulkanBackend;

impl VulkanBackend {
    /// The default device, or why there is none (no loader, no device, a missing
    /// validation layer when it is asked for): the registry lists `vulkan` only when
    /// this succeeds.
    pub fn probe() -> std::result::Result<Arc<vulkan::Gpu>, String> {
        vulkan::open(None)
    }

    fn gpu(target: &Target) -> Result<Arc<vulkan::Gpu>> {
        vulkan::open(target.option("device")).map_err(|why| {
            Error::Unsupported(format!("target `{target}` has no Vulkan device: {why}"))
        })
    }
}

/// The options of a `vulkan` target.
const VULKAN_OPTIONS: [TargetOption; 1] = [TargetOption {
    name: "device",
    value: OptionValue::Device,
    doc: "the Vulkan device: its index in the loader's list, or part of its name",
}];

impl Backend for VulkanBackend {
    fn name(&self) -> &str {
        "vulkan"
    }

    fn target_kind(&self) -> TargetKind {
        TargetKind::Vulkan
    }

    /// `-device`.
    fn options(&self) -> &[TargetOption] {
        &VULKAN_OPTIONS
    }

    /// Available when the default device opens ([`VulkanBackend::probe`]).
    fn availability(&self) -> std::result::Result<(), String> {
        Self::probe().map(|_| ())
    }

    /// Workgroups and invocations.
    fn schedule_kind(&self, _target: &Target) -> ScheduleKind {
        ScheduleKind::Gpu
    }

    fn listing_name(&self) -> Option<&str> {
        Some("spirv")
    }

    /// One disassembled module per launch ([`spirv_of`]).
    fn listing(&self, _target: &Target, kernels: &[PrimFunc]) -> Result<String> {
        spirv_of(kernels)
    }

    /// The ops the SPIR-V codegen does not emit yet (on float64: `sin`, `cos`, `tan`,
    /// which the other float dtypes compute in float64 with float32 accuracy, and
    /// those needing `pow` or `erf`, which GLSL.std.450 has for 16- and 32-bit floats
    /// only or not at all), and what the default device cannot run, with the
    /// capability it lacks.
    fn unsupported(&self) -> Vec<Unsupported> {
        let mut out = Vec::new();
        for op in codegen::F64_MISSING_OPS {
            out.push(Unsupported {
                op: op.into(),
                dtype: DType::F64,
                reason: format!("no float64 SPIR-V sequence for `{op}` yet"),
            });
        }
        for t in codegen::CIRCULAR {
            out.push(Unsupported {
                op: t.name().into(),
                dtype: DType::F64,
                reason: format!("no float64 SPIR-V sequence for `{}` yet", t.name()),
            });
        }
        let Ok(gpu) = Self::probe() else {
            return out;
        };
        let f = &gpu.features;
        if !(f.float64 && f.int64) {
            for t in tir::Trig::ALL {
                for dtype in [DType::F32, DType::F16, DType::BF16] {
                    out.push(Unsupported {
                        op: t.name().into(),
                        dtype,
                        reason: format!(
                            "computed in float64, which device `{}` lacks (shaderFloat64, \
                             shaderInt64)",
                            f.device
                        ),
                    });
                }
            }
        }
        let mut lacks = |have: bool, dtypes: &[DType], what: &str| {
            if !have {
                for &dtype in dtypes {
                    out.push(Unsupported {
                        op: "*".into(),
                        dtype,
                        reason: format!("device `{}` lacks {what}", f.device),
                    });
                }
            }
        };
        lacks(
            f.int8,
            &[DType::I8, DType::U8, DType::Bool],
            "8-bit storage (storageBuffer8BitAccess, shaderInt8)",
        );
        lacks(
            f.float16 && f.rte16,
            &[DType::F16],
            "float16 (shaderFloat16, storageBuffer16BitAccess, RTE rounding)",
        );
        lacks(
            f.int64,
            &[DType::I64, DType::U64, DType::U32],
            "shaderInt64",
        );
        lacks(
            f.float64 && f.int64,
            &[DType::F64],
            "float64 (shaderFloat64, with shaderInt64 for its bits)",
        );
        lacks(
            f.int16,
            &[DType::I16, DType::U16, DType::BF16],
            "16-bit integer storage (storageBuffer16BitAccess, shaderInt16)",
        );
        out
    }

    fn compile(&self, target: &Target, kernels: &[PrimFunc]) -> Result<Arc<dyn KernelLibrary>> {
        let gpu = Self::gpu(target)?;
        let program = compile_module(kernels, &gpu.features)?;
        Ok(Arc::new(vulkan::VulkanLibrary::new(gpu, program)?))
    }
}
