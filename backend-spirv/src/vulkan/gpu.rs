//! One Vulkan compute device, opened once per process and selector: the loader (ash
//! `loaded`: libvulkan is opened at run time), an instance (Vulkan 1.2, with
//! `VK_LAYER_KHRONOS_validation` and a debug-utils messenger that counts errors when
//! `KILN_VULKAN_VALIDATION=1`), the chosen physical device and its [`Features`], a
//! logical device with the optional features kiln uses enabled, one compute queue and a
//! command pool (each behind a mutex: Vulkan wants them externally synchronized), and
//! one-shot command submission.

use std::collections::HashMap;
use std::ffi::{CStr, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use ash::vk;
use kiln_executor::{Error, Result};

use crate::features::Features;

/// The environment switch that enables the Khronos validation layer.
pub const VALIDATION_ENV: &str = "KILN_VULKAN_VALIDATION";

/// Validation-layer errors seen so far (the messenger's user data).
#[derive(Debug, Default)]
pub(crate) struct ValidationLog {
    errors: AtomicUsize,
    first: Mutex<Vec<String>>,
}

unsafe extern "system" fn on_message(
    severity: vk::DebugUtilsMessageSeverityFlagsEXT,
    _types: vk::DebugUtilsMessageTypeFlagsEXT,
    data: *const vk::DebugUtilsMessengerCallbackDataEXT<'_>,
    user: *mut c_void,
) -> vk::Bool32 {
    if severity.contains(vk::DebugUtilsMessageSeverityFlagsEXT::ERROR) && !user.is_null() {
        // SAFETY: `user` is the `ValidationLog` boxed in the `Gpu` that owns the
        // messenger, alive as long as the instance; `data` is valid for this call.
        let log = unsafe { &*(user as *const ValidationLog) };
        log.errors.fetch_add(1, Ordering::SeqCst);
        let text = unsafe { data.as_ref() }
            .and_then(|d| unsafe { d.message_as_c_str() })
            .map(|m| m.to_string_lossy().into_owned())
            .unwrap_or_default();
        if let Ok(mut first) = log.first.lock() {
            if first.len() < 4 {
                first.push(text);
            }
        }
    }
    vk::FALSE
}

/// An open device (see the module doc).
pub struct Gpu {
    _entry: ash::Entry,
    instance: ash::Instance,
    messenger: Option<(ash::ext::debug_utils::Instance, vk::DebugUtilsMessengerEXT)>,
    log: Box<ValidationLog>,
    pub(crate) device: ash::Device,
    queue: Mutex<vk::Queue>,
    pool: Mutex<vk::CommandPool>,
    memory: vk::PhysicalDeviceMemoryProperties,
    /// What codegen may use on this device.
    pub features: Features,
    /// Nanoseconds per timestamp tick; `None` if the queue has no timestamps.
    pub(crate) timestamp_ns: Option<f64>,
}

impl std::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Gpu({})", self.features.device)
    }
}

/// The devices opened so far, by selector (`""` for the default).
fn opened() -> &'static Mutex<HashMap<String, std::result::Result<Arc<Gpu>, String>>> {
    static OPENED: OnceLock<Mutex<HashMap<String, std::result::Result<Arc<Gpu>, String>>>> =
        OnceLock::new();
    OPENED.get_or_init(Default::default)
}

/// The device `selector` names (an index into the loader's device list, or part of a
/// device name, case-insensitive; `None`: the first GPU, else the first device), opened
/// once per process. The error says what is missing (loader, device, feature).
pub fn open(selector: Option<&str>) -> std::result::Result<Arc<Gpu>, String> {
    let key = selector.unwrap_or("").to_string();
    let mut map = opened()
        .lock()
        .map_err(|_| "the Vulkan device table is poisoned")?;
    if let Some(r) = map.get(&key) {
        return r.clone();
    }
    let r = Gpu::create(selector).map(Arc::new);
    map.insert(key, r.clone());
    r
}

fn vk_err(what: &str, e: vk::Result) -> String {
    format!("{what} failed: {e}")
}

impl Gpu {
    fn create(selector: Option<&str>) -> std::result::Result<Gpu, String> {
        // SAFETY: loading the system's Vulkan loader; ash checks the entry points.
        let entry = unsafe { ash::Entry::load() }.map_err(|e| {
            format!(
                "no Vulkan loader (libvulkan.so.1) could be opened ({e}); install one \
                 (Debian: libvulkan1 and a driver such as mesa-vulkan-drivers)"
            )
        })?;
        let validation = std::env::var(VALIDATION_ENV).as_deref() == Ok("1");
        let layer = c"VK_LAYER_KHRONOS_validation";
        let mut layers = vec![];
        let mut extensions = vec![];
        if validation {
            // SAFETY: plain queries on a loaded entry.
            let have = unsafe { entry.enumerate_instance_layer_properties() }
                .map_err(|e| vk_err("vkEnumerateInstanceLayerProperties", e))?;
            if !have
                .iter()
                .any(|l| l.layer_name_as_c_str().ok() == Some(layer))
            {
                return Err(format!(
                    "{VALIDATION_ENV}=1 but the layer VK_LAYER_KHRONOS_validation is not \
                     installed (Debian: vulkan-validationlayers)"
                ));
            }
            layers.push(layer.as_ptr());
            extensions.push(ash::ext::debug_utils::NAME.as_ptr());
        }
        let app = vk::ApplicationInfo::default()
            .application_name(c"kiln")
            .api_version(vk::API_VERSION_1_2);
        let info = vk::InstanceCreateInfo::default()
            .application_info(&app)
            .enabled_layer_names(&layers)
            .enabled_extension_names(&extensions);
        // SAFETY: the create info and the names it points to outlive the call.
        let instance = unsafe { entry.create_instance(&info, None) }
            .map_err(|e| vk_err("vkCreateInstance (Vulkan 1.2)", e))?;
        let log = Box::new(ValidationLog::default());
        let messenger = if validation {
            let du = ash::ext::debug_utils::Instance::new(&entry, &instance);
            let info = vk::DebugUtilsMessengerCreateInfoEXT::default()
                .message_severity(
                    vk::DebugUtilsMessageSeverityFlagsEXT::ERROR
                        | vk::DebugUtilsMessageSeverityFlagsEXT::WARNING,
                )
                .message_type(
                    vk::DebugUtilsMessageTypeFlagsEXT::GENERAL
                        | vk::DebugUtilsMessageTypeFlagsEXT::VALIDATION
                        | vk::DebugUtilsMessageTypeFlagsEXT::PERFORMANCE,
                )
                .pfn_user_callback(Some(on_message))
                .user_data(&*log as *const ValidationLog as *mut c_void);
            // SAFETY: the log is boxed in the Gpu and outlives the messenger.
            let m = unsafe { du.create_debug_utils_messenger(&info, None) }
                .map_err(|e| vk_err("vkCreateDebugUtilsMessengerEXT", e))?;
            Some((du, m))
        } else {
            None
        };
        match Self::with_instance(entry, instance, messenger, log, selector) {
            Ok(g) => Ok(g),
            Err((e, instance, messenger)) => {
                // SAFETY: nothing else uses the instance.
                unsafe {
                    if let Some((du, m)) = messenger {
                        du.destroy_debug_utils_messenger(m, None);
                    }
                    instance.destroy_instance(None);
                }
                Err(e)
            }
        }
    }

    #[allow(clippy::type_complexity)]
    fn with_instance(
        entry: ash::Entry,
        instance: ash::Instance,
        messenger: Option<(ash::ext::debug_utils::Instance, vk::DebugUtilsMessengerEXT)>,
        log: Box<ValidationLog>,
        selector: Option<&str>,
    ) -> std::result::Result<
        Gpu,
        (
            String,
            ash::Instance,
            Option<(ash::ext::debug_utils::Instance, vk::DebugUtilsMessengerEXT)>,
        ),
    > {
        let picked = pick(&instance, selector);
        let (physical, family, name) = match picked {
            Ok(p) => p,
            Err(e) => return Err((e, instance, messenger)),
        };
        match Self::open_device(&instance, physical, family, &name) {
            Ok((device, features, timestamp_ns)) => {
                // SAFETY: queue 0 of the family was created with the device.
                let queue = unsafe { device.get_device_queue(family, 0) };
                let pool_info = vk::CommandPoolCreateInfo::default()
                    .queue_family_index(family)
                    .flags(vk::CommandPoolCreateFlags::RESET_COMMAND_BUFFER);
                // SAFETY: a valid device.
                let pool = match unsafe { device.create_command_pool(&pool_info, None) } {
                    Ok(p) => p,
                    Err(e) => {
                        unsafe { device.destroy_device(None) };
                        return Err((vk_err("vkCreateCommandPool", e), instance, messenger));
                    }
                };
                // SAFETY: a plain query.
                let memory = unsafe { instance.get_physical_device_memory_properties(physical) };
                Ok(Gpu {
                    _entry: entry,
                    instance,
                    messenger,
                    log,
                    device,
                    queue: Mutex::new(queue),
                    pool: Mutex::new(pool),
                    memory,
                    features,
                    timestamp_ns,
                })
            }
            Err(e) => Err((e, instance, messenger)),
        }
    }

    /// The logical device with the optional features the physical device has.
    fn open_device(
        instance: &ash::Instance,
        physical: vk::PhysicalDevice,
        family: u32,
        name: &str,
    ) -> std::result::Result<(ash::Device, Features, Option<f64>), String> {
        let mut f11 = vk::PhysicalDeviceVulkan11Features::default();
        let mut f12 = vk::PhysicalDeviceVulkan12Features::default();
        let mut f2 = vk::PhysicalDeviceFeatures2::default()
            .push_next(&mut f11)
            .push_next(&mut f12);
        // SAFETY: plain queries with valid out-structures.
        unsafe { instance.get_physical_device_features2(physical, &mut f2) };
        let int64 = f2.features.shader_int64 == vk::TRUE;
        let float64 = f2.features.shader_float64 == vk::TRUE;
        let shader_int16 = f2.features.shader_int16 == vk::TRUE;
        let _ = f2;
        let int16 = shader_int16 && f11.storage_buffer16_bit_access == vk::TRUE;
        let int8 = f12.shader_int8 == vk::TRUE && f12.storage_buffer8_bit_access == vk::TRUE;
        let float16 = f12.shader_float16 == vk::TRUE && f11.storage_buffer16_bit_access == vk::TRUE;
        let mut p12 = vk::PhysicalDeviceVulkan12Properties::default();
        let mut p2 = vk::PhysicalDeviceProperties2::default().push_next(&mut p12);
        unsafe { instance.get_physical_device_properties2(physical, &mut p2) };
        let limits = p2.properties.limits;
        let _ = p2;
        let rte16 = p12.shader_rounding_mode_rte_float16 == vk::TRUE;
        let families = unsafe { instance.get_physical_device_queue_family_properties(physical) };
        let timestamp_ns = families
            .get(family as usize)
            .filter(|f| {
                f.timestamp_valid_bits > 0 && limits.timestamp_compute_and_graphics == vk::TRUE
            })
            .map(|_| limits.timestamp_period as f64);
        let features = Features {
            device: name.to_string(),
            int8,
            float16,
            rte16,
            int64,
            float64,
            int16,
            max_group_size: limits.max_compute_work_group_size,
            max_invocations: limits.max_compute_work_group_invocations,
            max_group_count: limits.max_compute_work_group_count,
            max_shared_bytes: limits.max_compute_shared_memory_size,
            max_buffer_bytes: (limits.max_storage_buffer_range as u64).min(i32::MAX as u64),
        };
        let mut e11 = vk::PhysicalDeviceVulkan11Features::default()
            .storage_buffer16_bit_access(float16 || int16);
        let mut e12 = vk::PhysicalDeviceVulkan12Features::default()
            .shader_float16(float16)
            .shader_int8(int8)
            .storage_buffer8_bit_access(int8);
        let base = vk::PhysicalDeviceFeatures::default()
            .shader_int64(int64)
            .shader_float64(float64)
            .shader_int16(int16);
        let priorities = [1.0f32];
        let queues = [vk::DeviceQueueCreateInfo::default()
            .queue_family_index(family)
            .queue_priorities(&priorities)];
        let info = vk::DeviceCreateInfo::default()
            .queue_create_infos(&queues)
            .enabled_features(&base)
            .push_next(&mut e11)
            .push_next(&mut e12);
        // SAFETY: the create info and what it points to outlive the call.
        let device = unsafe { instance.create_device(physical, &info, None) }
            .map_err(|e| vk_err(&format!("vkCreateDevice on `{name}`"), e))?;
        Ok((device, features, timestamp_ns))
    }

    /// Nanoseconds per timestamp tick, if the compute queue has timestamps.
    pub fn timestamp_ns(&self) -> Option<f64> {
        self.timestamp_ns
    }

    /// An error of this device.
    pub(crate) fn error(&self, message: impl Into<String>) -> Error {
        Error::Device {
            backend: format!("vulkan ({})", self.features.device),
            message: message.into(),
        }
    }

    /// A failed Vulkan call as an error.
    pub(crate) fn vk(&self, what: &str, e: vk::Result) -> Error {
        self.error(format!("{what} failed: {e}"))
    }

    /// An error if the validation layer has reported any (the run fails, naming them).
    pub(crate) fn check_validation(&self) -> Result<()> {
        let n = self.log.errors.load(Ordering::SeqCst);
        if n == 0 {
            return Ok(());
        }
        let first = self
            .log
            .first
            .lock()
            .map(|f| f.join("\n"))
            .unwrap_or_default();
        Err(self.error(format!(
            "the Vulkan validation layer reported {n} error(s), first:\n{first}"
        )))
    }

    /// The index of a memory type allowed by `bits` with `flags` (or, if `fallback`,
    /// any allowed type).
    pub(crate) fn memory_type(
        &self,
        bits: u32,
        flags: vk::MemoryPropertyFlags,
        fallback: bool,
    ) -> Option<u32> {
        let types = &self.memory.memory_types[..self.memory.memory_type_count as usize];
        let allowed = |i: usize| bits & (1 << i) != 0;
        types
            .iter()
            .enumerate()
            .position(|(i, t)| allowed(i) && t.property_flags.contains(flags))
            .or_else(|| {
                fallback
                    .then(|| (0..types.len()).find(|&i| allowed(i)))
                    .flatten()
            })
            .map(|i| i as u32)
    }

    /// A primary command buffer recorded by `record` (the pool is locked meanwhile).
    pub(crate) fn record(
        &self,
        flags: vk::CommandBufferUsageFlags,
        record: impl FnOnce(vk::CommandBuffer) -> Result<()>,
    ) -> Result<vk::CommandBuffer> {
        let pool = self
            .pool
            .lock()
            .map_err(|_| self.error("command pool poisoned"))?;
        let info = vk::CommandBufferAllocateInfo::default()
            .command_pool(*pool)
            .level(vk::CommandBufferLevel::PRIMARY)
            .command_buffer_count(1);
        // SAFETY: the pool is locked; every handle used is this device's.
        unsafe {
            let cmd = self
                .device
                .allocate_command_buffers(&info)
                .map_err(|e| self.vk("vkAllocateCommandBuffers", e))?[0];
            let done = (|| {
                self.device
                    .begin_command_buffer(cmd, &vk::CommandBufferBeginInfo::default().flags(flags))
                    .map_err(|e| self.vk("vkBeginCommandBuffer", e))?;
                // Earlier submissions' writes are visible to everything recorded here.
                let barrier = vk::MemoryBarrier::default()
                    .src_access_mask(vk::AccessFlags::MEMORY_WRITE)
                    .dst_access_mask(vk::AccessFlags::MEMORY_READ | vk::AccessFlags::MEMORY_WRITE);
                self.device.cmd_pipeline_barrier(
                    cmd,
                    vk::PipelineStageFlags::ALL_COMMANDS,
                    vk::PipelineStageFlags::ALL_COMMANDS,
                    vk::DependencyFlags::empty(),
                    &[barrier],
                    &[],
                    &[],
                );
                record(cmd)?;
                self.device
                    .end_command_buffer(cmd)
                    .map_err(|e| self.vk("vkEndCommandBuffer", e))
            })();
            if let Err(e) = done {
                self.device.free_command_buffers(*pool, &[cmd]);
                return Err(e);
            }
            Ok(cmd)
        }
    }

    /// Frees a command buffer made by [`Gpu::record`].
    pub(crate) fn free(&self, cmd: vk::CommandBuffer) {
        if let Ok(pool) = self.pool.lock() {
            // SAFETY: the buffer is this pool's and no longer pending.
            unsafe { self.device.free_command_buffers(*pool, &[cmd]) };
        }
    }

    /// Submits `cmd` and waits until it has run; then checks the validation log.
    pub(crate) fn submit_and_wait(&self, cmd: vk::CommandBuffer) -> Result<()> {
        // SAFETY: handles are this device's; the queue is locked while submitting.
        unsafe {
            let fence = self
                .device
                .create_fence(&vk::FenceCreateInfo::default(), None)
                .map_err(|e| self.vk("vkCreateFence", e))?;
            let cmds = [cmd];
            let submit = vk::SubmitInfo::default().command_buffers(&cmds);
            let r = {
                let queue = self
                    .queue
                    .lock()
                    .map_err(|_| self.error("queue poisoned"))?;
                self.device.queue_submit(*queue, &[submit], fence)
            };
            let r = r.map_err(|e| self.vk("vkQueueSubmit", e)).and_then(|_| {
                self.device
                    .wait_for_fences(&[fence], true, u64::MAX)
                    .map_err(|e| self.vk("vkWaitForFences", e))
            });
            self.device.destroy_fence(fence, None);
            r?;
        }
        self.check_validation()
    }

    /// Records `record` into a one-time command buffer, runs it and waits.
    pub(crate) fn one_shot(
        &self,
        record: impl FnOnce(vk::CommandBuffer) -> Result<()>,
    ) -> Result<()> {
        let cmd = self.record(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT, record)?;
        let r = self.submit_and_wait(cmd);
        self.free(cmd);
        r
    }
}

impl Drop for Gpu {
    fn drop(&mut self) {
        // SAFETY: the last owner; nothing is pending (every submission is waited on).
        unsafe {
            let _ = self.device.device_wait_idle();
            if let Ok(pool) = self.pool.lock() {
                self.device.destroy_command_pool(*pool, None);
            }
            self.device.destroy_device(None);
            if let Some((du, m)) = self.messenger.take() {
                du.destroy_debug_utils_messenger(m, None);
            }
            self.instance.destroy_instance(None);
        }
    }
}

/// The physical device `selector` names with a compute queue family: the device, the
/// family and the device's name.
fn pick(
    instance: &ash::Instance,
    selector: Option<&str>,
) -> std::result::Result<(vk::PhysicalDevice, u32, String), String> {
    // SAFETY: plain queries on a valid instance.
    let devices = unsafe { instance.enumerate_physical_devices() }
        .map_err(|e| vk_err("vkEnumeratePhysicalDevices", e))?;
    let mut usable = vec![];
    let mut names = vec![];
    for (i, &d) in devices.iter().enumerate() {
        let props = unsafe { instance.get_physical_device_properties(d) };
        let name = props
            .device_name_as_c_str()
            .map(CStr::to_string_lossy)
            .unwrap_or_default()
            .into_owned();
        names.push(format!("{i}: {name}"));
        if props.api_version < vk::API_VERSION_1_2 {
            continue;
        }
        let families = unsafe { instance.get_physical_device_queue_family_properties(d) };
        let Some(family) = families
            .iter()
            .position(|f| f.queue_flags.contains(vk::QueueFlags::COMPUTE))
        else {
            continue;
        };
        usable.push((i, d, family as u32, name, props.device_type));
    }
    if devices.is_empty() {
        return Err(
            "the Vulkan loader reports no device (install a driver, e.g. Debian's \
             mesa-vulkan-drivers for the CPU driver lavapipe)"
                .into(),
        );
    }
    let found = match selector {
        None => usable
            .iter()
            .find(|u| {
                matches!(
                    u.4,
                    vk::PhysicalDeviceType::DISCRETE_GPU | vk::PhysicalDeviceType::INTEGRATED_GPU
                )
            })
            .or(usable.first()),
        Some(s) => match s.parse::<usize>() {
            Ok(i) => usable.iter().find(|u| u.0 == i),
            Err(_) => {
                let s = s.to_lowercase();
                usable.iter().find(|u| u.3.to_lowercase().contains(&s))
            }
        },
    };
    match found {
        Some(u) => Ok((u.1, u.2, u.3.clone())),
        None => Err(format!(
            "no Vulkan 1.2 compute device{} (devices: {})",
            selector.map_or(String::new(), |s| format!(" matches `-device={s}`")),
            names.join(", ")
        )),
    }
}
