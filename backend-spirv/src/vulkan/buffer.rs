//! Device memory: [`VkBuffer`], a buffer with its own allocation — device-local storage
//! buffers for tensors (zero-filled on creation), host-visible mapped ones for the
//! staging copies of `copy_to_device`/`copy_to_host`.

use std::any::Any;
use std::sync::Arc;

use ash::vk;
use kiln_executor::{DeviceBuffer, Result};

use super::gpu::Gpu;

/// A Vulkan buffer and its memory.
pub struct VkBuffer {
    pub(crate) gpu: Arc<Gpu>,
    pub(crate) buffer: vk::Buffer,
    memory: vk::DeviceMemory,
    len: usize,
    /// The mapping of a host-visible buffer.
    mapped: Option<*mut u8>,
}

// SAFETY: the mapping is only written through `&mut` access paths of the owner
// (`write`/`read` copy whole ranges under the library's sequencing), and Vulkan
// handles are plain values.
unsafe impl Send for VkBuffer {}
unsafe impl Sync for VkBuffer {}

impl std::fmt::Debug for VkBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "VkBuffer({} bytes)", self.len)
    }
}

impl VkBuffer {
    /// A buffer of `bytes` bytes (at least 4, a multiple of 4 in memory) for `usage`;
    /// host-visible and mapped if `host`, else device-local where the device has such
    /// memory.
    pub(crate) fn new(
        gpu: &Arc<Gpu>,
        bytes: usize,
        usage: vk::BufferUsageFlags,
        host: bool,
    ) -> Result<VkBuffer> {
        let size = (bytes.max(4) as u64).div_ceil(4) * 4;
        let d = &gpu.device;
        let info = vk::BufferCreateInfo::default()
            .size(size)
            .usage(usage)
            .sharing_mode(vk::SharingMode::EXCLUSIVE);
        // SAFETY: valid create info; every handle made here is destroyed on failure.
        unsafe {
            let buffer = d
                .create_buffer(&info, None)
                .map_err(|e| gpu.vk(&format!("vkCreateBuffer ({bytes} bytes)"), e))?;
            let req = d.get_buffer_memory_requirements(buffer);
            let flags = if host {
                vk::MemoryPropertyFlags::HOST_VISIBLE | vk::MemoryPropertyFlags::HOST_COHERENT
            } else {
                vk::MemoryPropertyFlags::DEVICE_LOCAL
            };
            let Some(ty) = gpu.memory_type(req.memory_type_bits, flags, !host) else {
                d.destroy_buffer(buffer, None);
                return Err(gpu.error(format!("no memory type with {flags:?}")));
            };
            let alloc = vk::MemoryAllocateInfo::default()
                .allocation_size(req.size)
                .memory_type_index(ty);
            let memory = match d.allocate_memory(&alloc, None) {
                Ok(m) => m,
                Err(e) => {
                    d.destroy_buffer(buffer, None);
                    return Err(gpu.vk(&format!("vkAllocateMemory ({} bytes)", req.size), e));
                }
            };
            let mut b = VkBuffer {
                gpu: gpu.clone(),
                buffer,
                memory,
                len: bytes,
                mapped: None,
            };
            d.bind_buffer_memory(buffer, memory, 0)
                .map_err(|e| gpu.vk("vkBindBufferMemory", e))?;
            if host {
                let p = d
                    .map_memory(memory, 0, vk::WHOLE_SIZE, vk::MemoryMapFlags::empty())
                    .map_err(|e| gpu.vk("vkMapMemory", e))?;
                b.mapped = Some(p as *mut u8);
            }
            Ok(b)
        }
    }

    /// A zero-filled device-local storage buffer for tensors.
    pub(crate) fn storage(gpu: &Arc<Gpu>, bytes: usize) -> Result<VkBuffer> {
        let b = VkBuffer::new(
            gpu,
            bytes,
            vk::BufferUsageFlags::STORAGE_BUFFER
                | vk::BufferUsageFlags::TRANSFER_SRC
                | vk::BufferUsageFlags::TRANSFER_DST,
            false,
        )?;
        gpu.one_shot(|cmd| {
            // SAFETY: recording into a command buffer of this device.
            unsafe {
                gpu.device
                    .cmd_fill_buffer(cmd, b.buffer, 0, vk::WHOLE_SIZE, 0)
            };
            Ok(())
        })?;
        Ok(b)
    }

    /// Copies `src` into a new staging buffer.
    pub(crate) fn staging_from(gpu: &Arc<Gpu>, src: &[u8]) -> Result<VkBuffer> {
        let b = VkBuffer::new(gpu, src.len(), vk::BufferUsageFlags::TRANSFER_SRC, true)?;
        if let Some(p) = b.mapped {
            // SAFETY: the mapping holds at least `src.len()` bytes and is ours alone.
            unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), p, src.len()) };
        }
        Ok(b)
    }

    /// A staging buffer to copy `bytes` bytes back into.
    pub(crate) fn staging_to(gpu: &Arc<Gpu>, bytes: usize) -> Result<VkBuffer> {
        VkBuffer::new(gpu, bytes, vk::BufferUsageFlags::TRANSFER_DST, true)
    }

    /// Copies the start of this (mapped, idle) buffer into `dst`.
    pub(crate) fn read(&self, dst: &mut [u8]) {
        self.read_at(0, dst);
    }

    /// Copies bytes from `offset` of this (mapped, idle) buffer into `dst`.
    pub(crate) fn read_at(&self, offset: usize, dst: &mut [u8]) {
        if let Some(p) = self.mapped {
            let n = dst.len().min(self.len.saturating_sub(offset));
            // SAFETY: the mapping holds `len` bytes; the device is done writing it.
            unsafe { std::ptr::copy_nonoverlapping(p.add(offset), dst.as_mut_ptr(), n) };
        }
    }
}

impl Drop for VkBuffer {
    fn drop(&mut self) {
        // SAFETY: no submitted work uses the buffer any more (every submission is
        // waited on, and pending calls hold their buffers).
        unsafe {
            if self.mapped.is_some() {
                self.gpu.device.unmap_memory(self.memory);
            }
            self.gpu.device.destroy_buffer(self.buffer, None);
            self.gpu.device.free_memory(self.memory, None);
        }
    }
}

impl DeviceBuffer for VkBuffer {
    fn len(&self) -> usize {
        self.len
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
