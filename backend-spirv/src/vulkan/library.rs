//! [`VulkanLibrary`], the `vulkan` target's [`KernelLibrary`]: per kernel a descriptor
//! set layout (one storage-buffer binding per parameter), a pipeline layout and one
//! compute pipeline per launch, all created when the library is built (at compile or
//! load time).
//!
//! Kernel calls are queued per calling thread; `synchronize` and every copy submit the
//! thread's queue as one command buffer and wait for it. That command buffer is recorded
//! once per call sequence — kernels and buffers, which is what one `run()` of an
//! executor is — and resubmitted whenever the same sequence comes again, with its
//! descriptor sets. Each call is bracketed by timestamp queries when the queue has
//! them: inside a timing session of the calling thread
//! ([`KernelLibrary::begin_timing`]/[`KernelLibrary::end_timing`]) every submitted
//! call's device time is kept, per call. Kernels that may divide by zero get a status word per
//! call (a slot of one host-visible buffer of the recording, zeroed at its start),
//! read after the submission: a set word is that call's error. Several executors (threads) share one library; each one's
//! queue, recordings and times are its own.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::thread::ThreadId;

use ash::vk;
use kiln_executor::{CallTimes, DeviceBuffer, KernelLibrary, Result};

use super::buffer::VkBuffer;
use super::gpu::Gpu;
use crate::SpirvKernel;

/// The pipelines of one kernel.
struct Kernel {
    name: String,
    param_bytes: Vec<usize>,
    /// Whether the launches take a status word (binding `param_bytes.len()`).
    status: bool,
    set_layout: vk::DescriptorSetLayout,
    layout: vk::PipelineLayout,
    /// Per launch: the pipeline and its workgroup counts.
    launches: Vec<(vk::Pipeline, [u32; 3])>,
}

/// A queued call: the kernel and its buffers.
type Call = (usize, Vec<Arc<dyn DeviceBuffer>>);

/// The most calls queued before they are submitted without waiting for `synchronize`.
const MAX_QUEUED: usize = 4096;
/// The most recorded call sequences kept.
const MAX_RECORDED: usize = 64;
/// Bytes between status words (a multiple of every device's storage-buffer offset
/// alignment, at most 256 by the Vulkan spec).
const STATUS_STRIDE: usize = 256;

/// A recorded call sequence, resubmitted while its buffers live.
struct Recorded {
    gpu: Arc<Gpu>,
    cmd: vk::CommandBuffer,
    descriptors: vk::DescriptorPool,
    queries: Option<vk::QueryPool>,
    calls: usize,
    buffers: Vec<Weak<dyn DeviceBuffer>>,
    /// The status words and, per call, its slot.
    status: Option<(VkBuffer, Vec<Option<usize>>)>,
}

impl Recorded {
    fn alive(&self) -> bool {
        self.buffers.iter().all(|b| b.strong_count() > 0)
    }
}

impl Drop for Recorded {
    fn drop(&mut self) {
        self.gpu.free(self.cmd);
        // SAFETY: the command buffer that used these is freed and not pending.
        unsafe {
            self.gpu
                .device
                .destroy_descriptor_pool(self.descriptors, None);
            if let Some(q) = self.queries {
                self.gpu.device.destroy_query_pool(q, None);
            }
        }
    }
}

/// Compiled kernels on one Vulkan device (see the module doc).
pub struct VulkanLibrary {
    gpu: Arc<Gpu>,
    kernels: Vec<Kernel>,
    queued: Mutex<HashMap<ThreadId, Vec<Call>>>,
    recorded: Mutex<HashMap<Vec<(usize, Vec<u64>)>, Arc<Recorded>>>,
    /// Per thread in a timing session: `(kernel, seconds)` of each call submitted since
    /// the session began.
    timing: Mutex<HashMap<ThreadId, Vec<(usize, f64)>>>,
}

impl std::fmt::Debug for VulkanLibrary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "VulkanLibrary({} kernels on {})",
            self.kernels.len(),
            self.gpu.features.device
        )
    }
}

impl VulkanLibrary {
    /// Creates every pipeline of `kernels` on `gpu`.
    pub fn new(gpu: Arc<Gpu>, kernels: Vec<SpirvKernel>) -> Result<VulkanLibrary> {
        let mut lib = VulkanLibrary {
            gpu,
            kernels: vec![],
            queued: Mutex::default(),
            recorded: Mutex::default(),
            timing: Mutex::default(),
        };
        for k in kernels {
            let kernel = lib.pipelines(&k)?;
            lib.kernels.push(kernel);
        }
        lib.gpu.check_validation()?;
        Ok(lib)
    }

    fn pipelines(&self, k: &SpirvKernel) -> Result<Kernel> {
        let gpu = &self.gpu;
        let d = &gpu.device;
        let bindings: Vec<_> = (0..(k.param_bytes.len() + usize::from(k.status)) as u32)
            .map(|i| {
                vk::DescriptorSetLayoutBinding::default()
                    .binding(i)
                    .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                    .descriptor_count(1)
                    .stage_flags(vk::ShaderStageFlags::COMPUTE)
            })
            .collect();
        // SAFETY: valid create infos; on failure what was made is destroyed by Drop of
        // the partially built kernel below.
        unsafe {
            let set_layout = d
                .create_descriptor_set_layout(
                    &vk::DescriptorSetLayoutCreateInfo::default().bindings(&bindings),
                    None,
                )
                .map_err(|e| gpu.vk("vkCreateDescriptorSetLayout", e))?;
            let layouts = [set_layout];
            let layout = match d.create_pipeline_layout(
                &vk::PipelineLayoutCreateInfo::default().set_layouts(&layouts),
                None,
            ) {
                Ok(l) => l,
                Err(e) => {
                    d.destroy_descriptor_set_layout(set_layout, None);
                    return Err(gpu.vk("vkCreatePipelineLayout", e));
                }
            };
            let mut kernel = Kernel {
                name: k.name.clone(),
                param_bytes: k.param_bytes.clone(),
                status: k.status,
                set_layout,
                layout,
                launches: vec![],
            };
            for l in &k.launches {
                let module = match d.create_shader_module(
                    &vk::ShaderModuleCreateInfo::default().code(&l.words),
                    None,
                ) {
                    Ok(m) => m,
                    Err(e) => {
                        self.destroy(&kernel);
                        return Err(gpu.vk(&format!("vkCreateShaderModule (@{})", k.name), e));
                    }
                };
                let stage = vk::PipelineShaderStageCreateInfo::default()
                    .stage(vk::ShaderStageFlags::COMPUTE)
                    .module(module)
                    .name(c"main");
                let info = vk::ComputePipelineCreateInfo::default()
                    .stage(stage)
                    .layout(layout);
                let r = d.create_compute_pipelines(vk::PipelineCache::null(), &[info], None);
                d.destroy_shader_module(module, None);
                match r {
                    Ok(p) => kernel.launches.push((p[0], l.launch.groups)),
                    Err((_, e)) => {
                        self.destroy(&kernel);
                        return Err(gpu.vk(&format!("vkCreateComputePipelines (@{})", k.name), e));
                    }
                }
            }
            Ok(kernel)
        }
    }

    fn destroy(&self, k: &Kernel) {
        let d = &self.gpu.device;
        // SAFETY: nothing pending uses them (every submission is waited on).
        unsafe {
            for (p, _) in &k.launches {
                d.destroy_pipeline(*p, None);
            }
            d.destroy_pipeline_layout(k.layout, None);
            d.destroy_descriptor_set_layout(k.set_layout, None);
        }
    }

    /// Runs the calling thread's queued calls and waits for them.
    fn flush(&self) -> Result<()> {
        let calls = {
            let mut q = self
                .queued
                .lock()
                .map_err(|_| self.gpu.error("call queue poisoned"))?;
            match q.remove(&std::thread::current().id()) {
                Some(c) if !c.is_empty() => c,
                _ => return Ok(()),
            }
        };
        let key: Vec<(usize, Vec<u64>)> = calls
            .iter()
            .map(|(k, args)| (*k, args.iter().map(|a| handle(&**a)).collect()))
            .collect();
        let recorded = {
            let mut cache = self
                .recorded
                .lock()
                .map_err(|_| self.gpu.error("recording cache poisoned"))?;
            match cache.get(&key).filter(|r| r.alive()) {
                Some(r) => r.clone(),
                None => {
                    let r = Arc::new(self.record(&calls)?);
                    cache.retain(|_, r| r.alive());
                    if cache.len() >= MAX_RECORDED {
                        cache.clear();
                    }
                    cache.insert(key.clone(), r.clone());
                    r
                }
            }
        };
        // `calls` keeps every buffer alive until the submission has finished.
        self.gpu.submit_and_wait(recorded.cmd)?;
        drop(calls);
        if let Some((words, slots)) = &recorded.status {
            for ((k, _), slot) in key.iter().zip(slots) {
                let Some(slot) = slot else { continue };
                let mut w = [0u8; 4];
                words.read_at(slot * STATUS_STRIDE, &mut w);
                if u32::from_ne_bytes(w) != 0 {
                    return Err(self.gpu.error(format!(
                        "integer division by zero in @{}",
                        self.kernels[*k].name
                    )));
                }
            }
        }
        self.keep_times(&recorded, &key)
    }

    /// Adds the device time of each call of a finished submission to the calling
    /// thread's timing session, if it has one.
    fn keep_times(&self, recorded: &Recorded, key: &[(usize, Vec<u64>)]) -> Result<()> {
        let mut timing = self
            .timing
            .lock()
            .map_err(|_| self.gpu.error("timing table poisoned"))?;
        let Some(session) = timing.get_mut(&std::thread::current().id()) else {
            return Ok(());
        };
        let Some(q) = recorded.queries else {
            return Ok(());
        };
        let mut ticks = vec![0u64; 2 * recorded.calls];
        // SAFETY: the queries were written by the finished submission.
        unsafe {
            self.gpu.device.get_query_pool_results(
                q,
                0,
                &mut ticks,
                vk::QueryResultFlags::TYPE_64 | vk::QueryResultFlags::WAIT,
            )
        }
        .map_err(|e| self.gpu.vk("vkGetQueryPoolResults", e))?;
        let ns = self.gpu.timestamp_ns.unwrap_or(1.0);
        session.extend(key.iter().zip(ticks.chunks(2)).map(|((k, _), t)| {
            let seconds = t[1].saturating_sub(t[0]) as f64 * ns * 1e-9;
            (*k, seconds)
        }));
        Ok(())
    }

    /// Records `calls` into a command buffer with their descriptor sets.
    fn record(&self, calls: &[Call]) -> Result<Recorded> {
        let gpu = &self.gpu;
        let d = &gpu.device;
        let mut n_status = 0;
        let slots: Vec<Option<usize>> = calls
            .iter()
            .map(|(k, _)| {
                self.kernels[*k].status.then(|| {
                    n_status += 1;
                    n_status - 1
                })
            })
            .collect();
        let status = if n_status > 0 {
            Some(VkBuffer::new(
                gpu,
                n_status * STATUS_STRIDE,
                vk::BufferUsageFlags::STORAGE_BUFFER | vk::BufferUsageFlags::TRANSFER_DST,
                true,
            )?)
        } else {
            None
        };
        let n_buffers: u32 =
            calls.iter().map(|(_, a)| a.len() as u32).sum::<u32>() + n_status as u32;
        let sizes = [vk::DescriptorPoolSize::default()
            .ty(vk::DescriptorType::STORAGE_BUFFER)
            .descriptor_count(n_buffers.max(1))];
        // SAFETY: valid create infos; handles are destroyed by `Recorded`'s Drop.
        let descriptors = unsafe {
            d.create_descriptor_pool(
                &vk::DescriptorPoolCreateInfo::default()
                    .max_sets(calls.len() as u32)
                    .pool_sizes(&sizes),
                None,
            )
        }
        .map_err(|e| gpu.vk("vkCreateDescriptorPool", e))?;
        let queries = match gpu.timestamp_ns {
            Some(_) => Some(
                unsafe {
                    d.create_query_pool(
                        &vk::QueryPoolCreateInfo::default()
                            .query_type(vk::QueryType::TIMESTAMP)
                            .query_count(2 * calls.len() as u32),
                        None,
                    )
                }
                .map_err(|e| {
                    unsafe { d.destroy_descriptor_pool(descriptors, None) };
                    gpu.vk("vkCreateQueryPool", e)
                })?,
            ),
            None => None,
        };
        let mut rec = Recorded {
            gpu: gpu.clone(),
            cmd: vk::CommandBuffer::null(),
            descriptors,
            queries,
            calls: calls.len(),
            buffers: calls
                .iter()
                .flat_map(|(_, a)| a.iter().map(Arc::downgrade))
                .collect(),
            status: None,
        };
        let layouts: Vec<_> = calls
            .iter()
            .map(|(k, _)| self.kernels[*k].set_layout)
            .collect();
        // SAFETY: the pool has room for exactly these sets.
        let sets = unsafe {
            d.allocate_descriptor_sets(
                &vk::DescriptorSetAllocateInfo::default()
                    .descriptor_pool(descriptors)
                    .set_layouts(&layouts),
            )
        }
        .map_err(|e| gpu.vk("vkAllocateDescriptorSets", e))?;
        for (((_, args), &set), slot) in calls.iter().zip(&sets).zip(&slots) {
            let mut infos: Vec<_> = args
                .iter()
                .map(|a| {
                    [vk::DescriptorBufferInfo::default()
                        .buffer(vk_buffer(&**a).map_or(vk::Buffer::null(), |b| b.buffer))
                        .offset(0)
                        .range(vk::WHOLE_SIZE)]
                })
                .collect();
            if let (Some(slot), Some(words)) = (slot, &status) {
                infos.push([vk::DescriptorBufferInfo::default()
                    .buffer(words.buffer)
                    .offset((slot * STATUS_STRIDE) as u64)
                    .range(4)]);
            }
            let writes: Vec<_> = infos
                .iter()
                .enumerate()
                .map(|(i, info)| {
                    vk::WriteDescriptorSet::default()
                        .dst_set(set)
                        .dst_binding(i as u32)
                        .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                        .buffer_info(info)
                })
                .collect();
            // SAFETY: the sets and buffers are this device's and not in use.
            unsafe { d.update_descriptor_sets(&writes, &[]) };
        }
        rec.cmd = gpu.record(vk::CommandBufferUsageFlags::SIMULTANEOUS_USE, |cmd| {
            // SAFETY: recording into a command buffer of this device, the pool locked.
            unsafe {
                if let Some(q) = queries {
                    d.cmd_reset_query_pool(cmd, q, 0, 2 * calls.len() as u32);
                }
                if let Some(words) = &status {
                    d.cmd_fill_buffer(cmd, words.buffer, 0, vk::WHOLE_SIZE, 0);
                    barrier(
                        d,
                        cmd,
                        (
                            vk::PipelineStageFlags::TRANSFER,
                            vk::AccessFlags::TRANSFER_WRITE,
                        ),
                        (
                            vk::PipelineStageFlags::COMPUTE_SHADER,
                            vk::AccessFlags::SHADER_READ | vk::AccessFlags::SHADER_WRITE,
                        ),
                    );
                }
                for (i, ((k, _), &set)) in calls.iter().zip(&sets).enumerate() {
                    let kernel = &self.kernels[*k];
                    if let Some(q) = queries {
                        d.cmd_write_timestamp(
                            cmd,
                            vk::PipelineStageFlags::TOP_OF_PIPE,
                            q,
                            2 * i as u32,
                        );
                    }
                    for &(pipeline, [x, y, z]) in &kernel.launches {
                        d.cmd_bind_pipeline(cmd, vk::PipelineBindPoint::COMPUTE, pipeline);
                        d.cmd_bind_descriptor_sets(
                            cmd,
                            vk::PipelineBindPoint::COMPUTE,
                            kernel.layout,
                            0,
                            &[set],
                            &[],
                        );
                        d.cmd_dispatch(cmd, x, y, z);
                        // The next launch or call sees this one's writes.
                        barrier(
                            d,
                            cmd,
                            (
                                vk::PipelineStageFlags::COMPUTE_SHADER,
                                vk::AccessFlags::SHADER_WRITE,
                            ),
                            (
                                vk::PipelineStageFlags::COMPUTE_SHADER,
                                vk::AccessFlags::SHADER_READ | vk::AccessFlags::SHADER_WRITE,
                            ),
                        );
                    }
                    if let Some(q) = queries {
                        d.cmd_write_timestamp(
                            cmd,
                            vk::PipelineStageFlags::BOTTOM_OF_PIPE,
                            q,
                            2 * i as u32 + 1,
                        );
                    }
                }
                if status.is_some() {
                    barrier(
                        d,
                        cmd,
                        (
                            vk::PipelineStageFlags::COMPUTE_SHADER,
                            vk::AccessFlags::SHADER_WRITE,
                        ),
                        (vk::PipelineStageFlags::HOST, vk::AccessFlags::HOST_READ),
                    );
                }
            }
            Ok(())
        })?;
        rec.status = status.map(|s| (s, slots));
        Ok(rec)
    }

    fn buffer<'b>(&self, b: &'b dyn DeviceBuffer) -> Result<&'b VkBuffer> {
        match vk_buffer(b) {
            Some(v) if Arc::ptr_eq(&v.gpu, &self.gpu) => Ok(v),
            Some(_) => Err(self.gpu.error("a buffer of another Vulkan device")),
            None => Err(self
                .gpu
                .error(format!("a buffer of another backend ({b:?})"))),
        }
    }
}

/// A global memory barrier from `(stage, access)` to `(stage, access)`.
///
/// # Safety
/// `cmd` is being recorded on `d`.
unsafe fn barrier(
    d: &ash::Device,
    cmd: vk::CommandBuffer,
    src: (vk::PipelineStageFlags, vk::AccessFlags),
    dst: (vk::PipelineStageFlags, vk::AccessFlags),
) {
    let b = vk::MemoryBarrier::default()
        .src_access_mask(src.1)
        .dst_access_mask(dst.1);
    // SAFETY: as the caller promises.
    unsafe {
        d.cmd_pipeline_barrier(
            cmd,
            src.0,
            dst.0,
            vk::DependencyFlags::empty(),
            &[b],
            &[],
            &[],
        )
    };
}

fn vk_buffer(b: &dyn DeviceBuffer) -> Option<&VkBuffer> {
    b.as_any().downcast_ref::<VkBuffer>()
}

/// The raw handle of a buffer (0 for a foreign one, refused before recording).
fn handle(b: &dyn DeviceBuffer) -> u64 {
    use ash::vk::Handle;
    vk_buffer(b).map_or(0, |v| v.buffer.as_raw())
}

impl Drop for VulkanLibrary {
    fn drop(&mut self) {
        if let Ok(mut c) = self.recorded.lock() {
            c.clear();
        }
        for k in &self.kernels {
            self.destroy(k);
        }
    }
}

impl KernelLibrary for VulkanLibrary {
    fn num_kernels(&self) -> usize {
        self.kernels.len()
    }

    fn alloc(&self, bytes: usize) -> Result<Arc<dyn DeviceBuffer>> {
        Ok(Arc::new(VkBuffer::storage(&self.gpu, bytes)?))
    }

    fn copy_to_device(&self, dst: &dyn DeviceBuffer, src: &[u8]) -> Result<()> {
        self.flush()?;
        let dst = self.buffer(dst)?;
        if src.len() > dst.len() {
            return Err(self.gpu.error(format!(
                "copy of {} bytes into a {}-byte buffer",
                src.len(),
                dst.len()
            )));
        }
        if src.is_empty() {
            return Ok(());
        }
        let staging = VkBuffer::staging_from(&self.gpu, src)?;
        self.gpu.one_shot(|cmd| {
            let region = [vk::BufferCopy::default().size(src.len() as u64)];
            // SAFETY: both buffers are this device's and large enough.
            unsafe {
                self.gpu
                    .device
                    .cmd_copy_buffer(cmd, staging.buffer, dst.buffer, &region)
            };
            Ok(())
        })
    }

    fn copy_to_host(&self, src: &dyn DeviceBuffer, dst: &mut [u8]) -> Result<()> {
        self.flush()?;
        let src = self.buffer(src)?;
        if dst.len() > src.len() {
            return Err(self.gpu.error(format!(
                "copy of {} bytes out of a {}-byte buffer",
                dst.len(),
                src.len()
            )));
        }
        if dst.is_empty() {
            return Ok(());
        }
        let staging = VkBuffer::staging_to(&self.gpu, dst.len())?;
        self.gpu.one_shot(|cmd| {
            let region = [vk::BufferCopy::default().size(dst.len() as u64)];
            // SAFETY: both buffers are this device's and large enough.
            unsafe {
                self.gpu
                    .device
                    .cmd_copy_buffer(cmd, src.buffer, staging.buffer, &region)
            };
            Ok(())
        })?;
        staging.read(dst);
        Ok(())
    }

    fn call(&self, kernel: usize, args: &[Arc<dyn DeviceBuffer>]) -> Result<()> {
        let k = self.kernels.get(kernel).ok_or_else(|| {
            self.gpu.error(format!(
                "kernel {kernel} called, the library has {}",
                self.kernels.len()
            ))
        })?;
        if args.len() != k.param_bytes.len() {
            return Err(self.gpu.error(format!(
                "@{} takes {} buffers, got {}",
                k.name,
                k.param_bytes.len(),
                args.len()
            )));
        }
        for (i, (a, &need)) in args.iter().zip(&k.param_bytes).enumerate() {
            self.buffer(&**a)?;
            if a.len() < need {
                return Err(self.gpu.error(format!(
                    "@{}: parameter {i} needs {need} bytes, the buffer has {}",
                    k.name,
                    a.len()
                )));
            }
        }
        let full = {
            let mut q = self
                .queued
                .lock()
                .map_err(|_| self.gpu.error("call queue poisoned"))?;
            let mine = q.entry(std::thread::current().id()).or_default();
            mine.push((kernel, args.to_vec()));
            mine.len() >= MAX_QUEUED
        };
        if full { self.flush() } else { Ok(()) }
    }

    fn synchronize(&self) -> Result<()> {
        self.flush()
    }

    /// Times with the queue's timestamp queries, where it has them (not every queue
    /// family does: `timestampValidBits` 0). The session covers every call submitted
    /// after this, so calls queued before it and not yet synchronized count too (the
    /// executors synchronize first).
    fn begin_timing(&self) -> bool {
        if self.gpu.timestamp_ns.is_none() {
            return false;
        }
        match self.timing.lock() {
            Ok(mut t) => {
                t.insert(std::thread::current().id(), vec![]);
                true
            }
            Err(_) => false,
        }
    }

    fn end_timing(&self) -> Result<Option<CallTimes>> {
        // A failed flush still ends the session.
        let flushed = self.flush();
        let calls = self
            .timing
            .lock()
            .map_err(|_| self.gpu.error("timing table poisoned"))?
            .remove(&std::thread::current().id());
        flushed?;
        Ok(calls.map(|calls| CallTimes {
            clock: format!("Vulkan timestamp queries on {}", self.gpu.features.device),
            calls,
        }))
    }
}
