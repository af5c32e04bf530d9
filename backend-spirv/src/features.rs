//! What a Vulkan device offers the code generator: the optional shader capabilities kiln's
//! dtypes need (8-bit and 16-bit storage, `Float16`, `Float64`, `Int64`, float16
//! round-to-nearest)
//! and the compute limits a launch must fit (workgroup size and count, shared memory,
//! storage-buffer range). Codegen refuses what the device lacks with an `Unsupported`
//! error naming the capability; [`Features::ANY`] (no device) allows everything.

/// The device facts codegen checks a kernel against.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Features {
    /// The device's name, for messages.
    pub device: String,
    /// `storageBuffer8BitAccess` and `shaderInt8`: int8, uint8 and bool buffers.
    pub int8: bool,
    /// `storageBuffer16BitAccess` and `shaderFloat16`: float16 buffers and conversions.
    pub float16: bool,
    /// `shaderRoundingModeRTEFloat16`: float16 conversions round to nearest even.
    pub rte16: bool,
    /// `shaderInt64`: int64 and uint64 values (and uint32 values, held zero-extended in
    /// int64).
    pub int64: bool,
    /// `shaderFloat64`: float64 values.
    pub float64: bool,
    /// `storageBuffer16BitAccess` and `shaderInt16`: int16, uint16 and bfloat16 buffers.
    pub int16: bool,
    /// `maxComputeWorkGroupSize`.
    pub max_group_size: [u32; 3],
    /// `maxComputeWorkGroupInvocations`.
    pub max_invocations: u32,
    /// `maxComputeWorkGroupCount`.
    pub max_group_count: [u32; 3],
    /// `maxComputeSharedMemorySize`, bytes.
    pub max_shared_bytes: u32,
    /// `maxStorageBufferRange`, bytes.
    pub max_buffer_bytes: u64,
}

impl Features {
    /// Everything allowed, limits as large as codegen itself accepts (what `--emit spirv`
    /// uses when no device is at hand).
    pub const ANY: Features = Features {
        device: String::new(),
        int8: true,
        float16: true,
        rte16: true,
        int64: true,
        float64: true,
        int16: true,
        max_group_size: [1024, 1024, 64],
        max_invocations: 1024,
        max_group_count: [u32::MAX, 65535, 65535],
        max_shared_bytes: 48 * 1024,
        max_buffer_bytes: i32::MAX as u64,
    };

    /// `Err(reason)` naming the capability unless `have`.
    pub(crate) fn require(&self, have: bool, what: &str) -> Result<(), String> {
        if have {
            Ok(())
        } else {
            Err(format!(
                "needs the Vulkan capability {what}, which device `{}` does not report",
                self.device
            ))
        }
    }
}
