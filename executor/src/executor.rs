//! The graph executor (TVM's `GraphModule`, with Rust types): set inputs, run, read
//! outputs, on the device of the module's kernel library.
//!
//! Creating an executor allocates one device buffer per storage block of the module's
//! memory plan, copies the params in, and resolves every kernel call to its list of
//! buffers; [`GraphExecutor::run`] is then a flat loop over those prepared calls. Inputs
//! and outputs cross between host and device only through explicit copies
//! ([`GraphExecutor::set_input`], [`GraphExecutor::get_output`]), or not at all with the
//! zero-copy variants, which bind a caller's [`DeviceArray`] in place of the planned
//! buffer.
//!
//! For the `ref` target the same API runs `@main` in the graph-IR reference interpreter
//! on host tensors.
//!
//! Inputs are numbered in graph order, params excluded (TVM counts params too); names
//! reach params as well, as in TVM's `set_input`.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kiln_ir::{DType, Module, NDArray};

use crate::backend::{Clock, DeviceBuffer, KernelLibrary};
use crate::error::{Error, Result};
use crate::module::{CompiledModule, Program};
use crate::params::load_params;
use crate::plan::{Layout, Placeholder};

/// An input, by name or by index.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum InputKey<'a> {
    /// By name (inputs and params).
    Name(&'a str),
    /// By index among the inputs (params excluded).
    Index(usize),
}

impl<'a> From<&'a str> for InputKey<'a> {
    fn from(s: &'a str) -> Self {
        InputKey::Name(s)
    }
}

impl<'a> From<&'a String> for InputKey<'a> {
    fn from(s: &'a String) -> Self {
        InputKey::Name(s)
    }
}

impl From<usize> for InputKey<'_> {
    fn from(i: usize) -> Self {
        InputKey::Index(i)
    }
}

/// The name, shape and dtype of an input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    /// The input's name.
    pub name: String,
    /// Its shape.
    pub shape: Vec<usize>,
    /// Its dtype.
    pub dtype: DType,
}

/// A tensor in device memory, for the zero-copy calls: a buffer of the executor's device
/// with a shape and dtype.
#[derive(Clone, Debug)]
pub struct DeviceArray {
    buffer: Arc<dyn DeviceBuffer>,
    shape: Vec<usize>,
    dtype: DType,
}

impl DeviceArray {
    /// The shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The dtype.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The device buffer.
    pub fn buffer(&self) -> &Arc<dyn DeviceBuffer> {
        &self.buffer
    }
}

/// Where the executor's tensors live and how it runs.
#[derive(Debug)]
enum State {
    /// Device buffers and prepared kernel calls.
    Device {
        library: Arc<dyn KernelLibrary>,
        /// The buffer bound to each entry (the planned storage, or a zero-copy array).
        entries: Vec<Arc<dyn DeviceBuffer>>,
        /// Kernel index and buffer list of every call, in order.
        calls: Vec<(usize, Vec<Arc<dyn DeviceBuffer>>)>,
    },
    /// Host tensors for the reference interpreter.
    Reference {
        module: Arc<Module>,
        values: BTreeMap<String, NDArray>,
        outputs: Vec<NDArray>,
    },
}

/// Runs a [`CompiledModule`]: `set_input`, `run`, `get_output`.
#[derive(Debug)]
pub struct GraphExecutor {
    layout: Arc<Layout>,
    state: State,
    /// The last host value given to each input, for end-to-end benchmarks.
    host_inputs: Vec<Option<NDArray>>,
    /// Whether each input has been given a value (copied or zero-copy); `run` refuses
    /// while one has not.
    bound: Vec<bool>,
}

/// Checks that `value` has the shape and dtype of entry `entry`, naming `name`.
pub(crate) fn check_tensor(
    layout: &Layout,
    entry: usize,
    name: &str,
    value: &NDArray,
) -> Result<()> {
    let want = &layout.entries[entry];
    if value.shape() != want.shape.as_slice() || value.dtype() != want.dtype {
        return Err(Error::InvalidArgument(format!(
            "input `{name}`: expected shape {:?} {}, got shape {:?} {}",
            want.shape,
            want.dtype,
            value.shape(),
            value.dtype()
        )));
    }
    Ok(())
}

/// The names of the inputs, then of the params, for error messages.
pub(crate) fn known_names(layout: &Layout) -> String {
    let inputs: Vec<&str> = layout.inputs.iter().map(|p| p.name.as_str()).collect();
    let params = layout.params.len();
    let mut s = if inputs.is_empty() {
        "no inputs".to_string()
    } else {
        format!("inputs: {}", inputs.join(", "))
    };
    if params > 0 {
        let shown: Vec<&str> = layout
            .params
            .iter()
            .take(8)
            .map(|p| p.name.as_str())
            .collect();
        s.push_str(&format!(
            "; params: {}{}",
            shown.join(", "),
            if params > 8 {
                format!(", ... ({params} in all)")
            } else {
                String::new()
            }
        ));
    }
    s
}

impl GraphExecutor {
    /// A new executor over `module`: allocates the planned storage on the module's
    /// device, copies the params in, prepares every call. Every input must then be given
    /// a value ([`set_input`](Self::set_input) or
    /// [`set_input_zero_copy`](Self::set_input_zero_copy)) before the first
    /// [`run`](Self::run), which otherwise fails naming the inputs left unset.
    pub fn new(module: &CompiledModule) -> Result<GraphExecutor> {
        GraphExecutor::with_layout(module, module.layout.clone())
    }

    /// An executor over `module` with `layout` (the debug executor's keep-all plan).
    pub(crate) fn with_layout(
        module: &CompiledModule,
        layout: Arc<Layout>,
    ) -> Result<GraphExecutor> {
        let state = match &module.program {
            Program::Kernels { library, .. } => {
                let storage = layout
                    .storage_bytes
                    .iter()
                    .map(|&b| library.alloc(b))
                    .collect::<Result<Vec<_>>>()?;
                let entries: Vec<Arc<dyn DeviceBuffer>> = layout
                    .entries
                    .iter()
                    .map(|e| storage[e.storage].clone())
                    .collect();
                for p in &layout.params {
                    let value = module.params.get(&p.name).ok_or_else(|| {
                        Error::Internal(format!("param `{}` has no value", p.name))
                    })?;
                    library.copy_to_device(&*entries[p.entry], &value.to_le_bytes())?;
                }
                let calls = layout
                    .calls
                    .iter()
                    .map(|c| {
                        (
                            c.kernel,
                            c.args.iter().map(|&e| entries[e].clone()).collect(),
                        )
                    })
                    .collect();
                State::Device {
                    library: library.clone(),
                    entries,
                    calls,
                }
            }
            Program::Reference(m) => {
                let mut values: BTreeMap<String, NDArray> = (*module.params).clone();
                for p in &layout.inputs {
                    let e = &layout.entries[p.entry];
                    values.insert(p.name.clone(), NDArray::zeros(e.shape.clone(), e.dtype));
                }
                State::Reference {
                    module: m.clone(),
                    values,
                    outputs: vec![],
                }
            }
        };
        Ok(GraphExecutor {
            host_inputs: vec![None; layout.inputs.len()],
            bound: vec![false; layout.inputs.len()],
            layout,
            state,
        })
    }

    /// The placeholder `key` names, and its input index if it is an input.
    fn placeholder(&self, key: InputKey<'_>) -> Result<(&Placeholder, Option<usize>)> {
        let l = &self.layout;
        match key {
            InputKey::Index(i) => l.inputs.get(i).map(|p| (p, Some(i))).ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "input index {i} is out of range: the graph has {} input(s) ({})",
                    l.inputs.len(),
                    known_names(l)
                ))
            }),
            InputKey::Name(name) => {
                if let Some(i) = l.inputs.iter().position(|p| p.name == name) {
                    return Ok((&l.inputs[i], Some(i)));
                }
                l.params
                    .iter()
                    .find(|p| p.name == name)
                    .map(|p| (p, None))
                    .ok_or_else(|| {
                        Error::InvalidArgument(format!(
                            "unknown input `{name}` ({})",
                            known_names(l)
                        ))
                    })
            }
        }
    }

    /// Copies `value` into input `key` (a name or an index); its shape and dtype must be
    /// the input's. Names of params are accepted too.
    pub fn set_input<'a>(&mut self, key: impl Into<InputKey<'a>>, value: &NDArray) -> Result<()> {
        let (p, index) = self.placeholder(key.into())?;
        let (name, entry) = (p.name.clone(), p.entry);
        check_tensor(&self.layout, entry, &name, value)?;
        match &mut self.state {
            State::Device {
                library, entries, ..
            } => library.copy_to_device(&*entries[entry], &value.to_le_bytes())?,
            State::Reference { values, .. } => {
                values.insert(name, value.clone());
            }
        }
        if let Some(i) = index {
            self.host_inputs[i] = Some(value.clone());
            self.bound[i] = true;
        }
        Ok(())
    }

    /// A zero-filled array on this executor's device, for the zero-copy calls.
    pub fn empty_device_array(&self, shape: &[usize], dtype: DType) -> Result<DeviceArray> {
        let State::Device { library, .. } = &self.state else {
            return Err(reference_has_no_device());
        };
        let bytes = shape
            .iter()
            .try_fold(dtype.size_bytes(), |a, &d| a.checked_mul(d))
            .ok_or_else(|| Error::InvalidArgument(format!("shape {shape:?} is too large")))?;
        Ok(DeviceArray {
            buffer: library.alloc(bytes)?,
            shape: shape.to_vec(),
            dtype,
        })
    }

    /// `value` copied to a new array on this executor's device.
    pub fn to_device(&self, value: &NDArray) -> Result<DeviceArray> {
        let a = self.empty_device_array(value.shape(), value.dtype())?;
        self.copy_in(&a, value)?;
        Ok(a)
    }

    /// Copies `value` (same shape and dtype) into the device array `dst`.
    pub fn copy_in(&self, dst: &DeviceArray, value: &NDArray) -> Result<()> {
        let State::Device { library, .. } = &self.state else {
            return Err(reference_has_no_device());
        };
        if value.shape() != dst.shape.as_slice() || value.dtype() != dst.dtype {
            return Err(Error::InvalidArgument(format!(
                "copy of a {:?} {} array into a device array of {:?} {}",
                value.shape(),
                value.dtype(),
                dst.shape,
                dst.dtype
            )));
        }
        library.copy_to_device(&*dst.buffer, &value.to_le_bytes())
    }

    /// The contents of the device array `a`, copied to the host.
    pub fn to_host(&self, a: &DeviceArray) -> Result<NDArray> {
        let State::Device { library, .. } = &self.state else {
            return Err(reference_has_no_device());
        };
        read(&**library, &*a.buffer, &a.shape, a.dtype)
    }

    /// Binds the device array `value` as input `key` without copying: later runs read it
    /// directly (TVM's `set_input_zero_copy`).
    pub fn set_input_zero_copy<'a>(
        &mut self,
        key: impl Into<InputKey<'a>>,
        value: &DeviceArray,
    ) -> Result<()> {
        let (p, index) = self.placeholder(key.into())?;
        let (name, entry) = (p.name.clone(), p.entry);
        self.bind(entry, &format!("input `{name}`"), value)?;
        if let Some(i) = index {
            self.bound[i] = true;
        }
        Ok(())
    }

    /// Binds the device array `value` as output `index` without copying: later runs write
    /// into it (TVM's `set_output_zero_copy`).
    pub fn set_output_zero_copy(&mut self, index: usize, value: &DeviceArray) -> Result<()> {
        let entry = self.output_entry(index)?;
        let placeholders = self.layout.inputs.iter().chain(&self.layout.params);
        if let Some(p) = placeholders.into_iter().find(|p| p.entry == entry) {
            return Err(Error::InvalidArgument(format!(
                "output {index} is the graph's placeholder `{}`; bind it with \
                 set_input_zero_copy",
                p.name
            )));
        }
        self.bind(entry, &format!("output {index}"), value)
    }

    /// Rebinds `entry` (and every call argument that uses it) to `value`.
    fn bind(&mut self, entry: usize, what: &str, value: &DeviceArray) -> Result<()> {
        let info = &self.layout.entries[entry];
        if value.shape != info.shape || value.dtype != info.dtype {
            return Err(Error::InvalidArgument(format!(
                "{what}: expected shape {:?} {}, got shape {:?} {}",
                info.shape, info.dtype, value.shape, value.dtype
            )));
        }
        let State::Device { entries, calls, .. } = &mut self.state else {
            return Err(reference_has_no_device());
        };
        entries[entry] = value.buffer.clone();
        for &(c, a) in &self.layout.uses[entry] {
            calls[c].1[a] = value.buffer.clone();
        }
        Ok(())
    }

    /// Runs the graph once: every prepared kernel call in order.
    pub fn run(&mut self) -> Result<()> {
        self.run_observed(&mut |_, _| {})
    }

    /// [`run`](Self::run), calling `on_call(done, total)` after each kernel call (once,
    /// with `(1, 1)`, for a `ref` module, which the interpreter runs in one piece): for a
    /// progress display of a long run.
    pub fn run_observed(&mut self, on_call: &mut dyn FnMut(usize, usize)) -> Result<()> {
        self.check_inputs_bound()?;
        match &mut self.state {
            State::Device { library, calls, .. } => {
                for (done, (kernel, args)) in calls.iter().enumerate() {
                    library.call(*kernel, args)?;
                    on_call(done + 1, calls.len());
                }
                Ok(())
            }
            State::Reference {
                module,
                values,
                outputs,
            } => {
                *outputs = kiln_ir::interp::evaluate(module, values)?.flatten();
                on_call(1, 1);
                Ok(())
            }
        }
    }

    /// An error naming every input not yet given a value.
    fn check_inputs_bound(&self) -> Result<()> {
        let unset: Vec<String> = self
            .layout
            .inputs
            .iter()
            .zip(&self.bound)
            .filter(|(_, set)| !**set)
            .map(|(p, _)| format!("`{}`", p.name))
            .collect();
        if unset.is_empty() {
            return Ok(());
        }
        Err(Error::InvalidArgument(format!(
            "run before input{} {} {} set: give every input a value with set_input (or \
             set_input_zero_copy) first; a weight among them was missing from the params \
             the module was built with",
            if unset.len() == 1 { "" } else { "s" },
            unset.join(", "),
            if unset.len() == 1 { "was" } else { "were" }
        )))
    }

    /// The kernel library the calls run on (`None` for a `ref` module).
    pub(crate) fn library(&self) -> Option<Arc<dyn KernelLibrary>> {
        match &self.state {
            State::Device { library, .. } => Some(library.clone()),
            State::Reference { .. } => None,
        }
    }

    /// Runs kernel call `call` alone (the debug executor's unit).
    pub(crate) fn run_call(&self, call: usize) -> Result<()> {
        match &self.state {
            State::Device { library, calls, .. } => {
                let (kernel, args) = calls
                    .get(call)
                    .ok_or_else(|| Error::Internal(format!("call {call} out of range")))?;
                library.call(*kernel, args)
            }
            State::Reference { .. } => Err(reference_has_no_device()),
        }
    }

    /// Waits for every kernel call and copy issued so far.
    pub fn synchronize(&self) -> Result<()> {
        match &self.state {
            State::Device { library, .. } => library.synchronize(),
            State::Reference { .. } => Ok(()),
        }
    }

    fn output_entry(&self, index: usize) -> Result<usize> {
        self.layout.outputs.get(index).copied().ok_or_else(|| {
            Error::InvalidArgument(format!(
                "output index {index} is out of range: the graph has {} output(s)",
                self.layout.outputs.len()
            ))
        })
    }

    /// The value of entry `entry`, copied to the host.
    pub(crate) fn entry_value(&self, entry: usize) -> Result<NDArray> {
        let info = &self.layout.entries[entry];
        match &self.state {
            State::Device {
                library, entries, ..
            } => read(&**library, &*entries[entry], &info.shape, info.dtype),
            State::Reference { .. } => Err(reference_has_no_device()),
        }
    }

    /// Output `index` of the last run, copied to the host.
    pub fn get_output(&self, index: usize) -> Result<NDArray> {
        let entry = self.output_entry(index)?;
        match &self.state {
            State::Reference { outputs, .. } => outputs.get(index).cloned().ok_or_else(|| {
                Error::InvalidArgument("get_output before the first run of a `ref` module".into())
            }),
            State::Device { .. } => self.entry_value(entry),
        }
    }

    /// Every output of the last run, copied to the host.
    pub fn outputs(&self) -> Result<Vec<NDArray>> {
        (0..self.get_num_outputs())
            .map(|i| self.get_output(i))
            .collect()
    }

    /// The current value of input `key`, copied to the host.
    pub fn get_input<'a>(&self, key: impl Into<InputKey<'a>>) -> Result<NDArray> {
        let (p, _) = self.placeholder(key.into())?;
        match &self.state {
            State::Reference { values, .. } => values
                .get(&p.name)
                .cloned()
                .ok_or_else(|| Error::Internal(format!("input `{}` has no value", p.name))),
            State::Device { .. } => self.entry_value(p.entry),
        }
    }

    /// The number of inputs the caller sets (params excluded).
    pub fn get_num_inputs(&self) -> usize {
        self.layout.inputs.len()
    }

    /// The number of outputs.
    pub fn get_num_outputs(&self) -> usize {
        self.layout.outputs.len()
    }

    /// The index of the input called `name`.
    pub fn get_input_index(&self, name: &str) -> Result<usize> {
        self.layout
            .inputs
            .iter()
            .position(|p| p.name == name)
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "unknown input `{name}` ({})",
                    known_names(&self.layout)
                ))
            })
    }

    /// Name, shape and dtype of every input, in index order.
    pub fn get_input_info(&self) -> Vec<TensorInfo> {
        self.layout
            .inputs
            .iter()
            .map(|p| {
                let e = &self.layout.entries[p.entry];
                TensorInfo {
                    name: p.name.clone(),
                    shape: e.shape.clone(),
                    dtype: e.dtype,
                }
            })
            .collect()
    }

    /// Shape and dtype of every output, in order.
    pub fn get_output_info(&self) -> Vec<TensorInfo> {
        self.layout
            .outputs
            .iter()
            .enumerate()
            .map(|(i, &e)| {
                let e = &self.layout.entries[e];
                TensorInfo {
                    name: format!("output{i}"),
                    shape: e.shape.clone(),
                    dtype: e.dtype,
                }
            })
            .collect()
    }

    /// Sets every tensor in `bytes` (TVM's params format) by name, as `set_input` does.
    pub fn load_params(&mut self, bytes: &[u8]) -> Result<()> {
        for (name, value) in load_params(bytes)? {
            self.set_input(name.as_str(), &value)?;
        }
        Ok(())
    }

    /// Makes this executor use `other`'s param buffers: after this, both run on one set
    /// of weights, and params loaded into either are seen by both (TVM's
    /// `share_params`). Both must come from modules with the same params on the same
    /// device.
    pub fn share_params(&mut self, other: &GraphExecutor) -> Result<()> {
        let mine: Vec<_> = self
            .layout
            .params
            .iter()
            .map(|p| (&p.name, &self.layout.entries[p.entry]))
            .collect();
        let theirs: Vec<_> = other
            .layout
            .params
            .iter()
            .map(|p| (&p.name, &other.layout.entries[p.entry]))
            .collect();
        let same = mine.len() == theirs.len()
            && mine
                .iter()
                .zip(&theirs)
                .all(|((a, x), (b, y))| a == b && x.shape == y.shape && x.dtype == y.dtype);
        if !same {
            return Err(Error::InvalidArgument(
                "share_params: the two executors' graphs have different params".into(),
            ));
        }
        match (&mut self.state, &other.state) {
            (
                State::Device {
                    library,
                    entries,
                    calls,
                },
                State::Device {
                    library: lib2,
                    entries: theirs,
                    ..
                },
            ) => {
                if !std::ptr::addr_eq(Arc::as_ptr(library), Arc::as_ptr(lib2)) {
                    return Err(Error::InvalidArgument(
                        "share_params: the executors run on different kernel libraries; \
                         make both from one compiled module"
                            .into(),
                    ));
                }
                for (p, q) in self.layout.params.iter().zip(&other.layout.params) {
                    let buffer = theirs[q.entry].clone();
                    for &(c, a) in &self.layout.uses[p.entry] {
                        calls[c].1[a] = buffer.clone();
                    }
                    entries[p.entry] = buffer;
                }
                Ok(())
            }
            (State::Reference { values, .. }, State::Reference { values: v2, .. }) => {
                for p in &other.layout.params {
                    if let Some(v) = v2.get(&p.name) {
                        values.insert(p.name.clone(), v.clone());
                    }
                }
                Ok(())
            }
            _ => Err(Error::InvalidArgument(
                "share_params: one executor runs kernels, the other the reference interpreter"
                    .into(),
            )),
        }
    }

    /// Times `run` as TVM's `benchmark` does (see [`BenchmarkOptions`]).
    pub fn benchmark(&mut self, opts: &BenchmarkOptions) -> Result<BenchmarkResult> {
        self.benchmark_observed(opts, &mut |_| {})
    }

    /// [`benchmark`](Self::benchmark), calling `on_measurement(done)` after each of the
    /// `opts.repeat` measurements: for a progress display.
    pub fn benchmark_observed(
        &mut self,
        opts: &BenchmarkOptions,
        on_measurement: &mut dyn FnMut(usize),
    ) -> Result<BenchmarkResult> {
        if opts.repeat == 0 || opts.number == 0 {
            return Err(Error::InvalidArgument(
                "benchmark: repeat and number must be at least 1".into(),
            ));
        }
        let mut number = opts.number;
        // One untimed run first, so one-time costs stay out of the figures.
        self.step(opts.end_to_end)?;
        self.synchronize()?;
        // The device's own timer where it has one, for kernel time alone; end to end
        // includes the copies, which only the host clock sees.
        let library = match &self.state {
            State::Device { library, .. } if !opts.end_to_end => Some(library.clone()),
            _ => None,
        };
        let mut clock = Clock::Host;
        let mut results = Vec::with_capacity(opts.repeat);
        for r in 0..opts.repeat {
            let (elapsed, device) = loop {
                let timing = library.as_ref().is_some_and(|l| l.begin_timing());
                let t = Instant::now();
                for _ in 0..number {
                    self.step(opts.end_to_end)?;
                }
                self.synchronize()?;
                let elapsed = t.elapsed();
                let device = match (&library, timing) {
                    (Some(l), true) => l.end_timing()?,
                    _ => None,
                };
                let ms = elapsed.as_secs_f64() * 1e3;
                if ms >= opts.min_repeat_ms || opts.min_repeat_ms <= 0.0 {
                    break (elapsed, device);
                }
                // Like TVM: grow `number` towards min_repeat_ms, at least by the golden ratio.
                let per = (ms / number as f64).max(1e-6);
                let want = (opts.min_repeat_ms / per).ceil() as usize + 1;
                number = want
                    .max((number as f64 * 1.618).ceil() as usize)
                    .max(number + 1);
            };
            let seconds = match device {
                Some(times) => {
                    clock = Clock::Device(times.clock);
                    times.calls.iter().map(|(_, s)| s).sum::<f64>()
                }
                None => elapsed.as_secs_f64(),
            };
            results.push(seconds / number as f64);
            on_measurement(r + 1);
            if opts.cooldown_interval_ms > 0
                && opts.repeats_to_cooldown > 0
                && (r + 1) % opts.repeats_to_cooldown == 0
            {
                std::thread::sleep(Duration::from_millis(opts.cooldown_interval_ms));
            }
        }
        Ok(BenchmarkResult {
            clock,
            ..BenchmarkResult::new(results)
        })
    }

    /// One benchmark iteration: a run, with the input and output copies if end to end.
    fn step(&mut self, end_to_end: bool) -> Result<()> {
        if end_to_end {
            let inputs: Vec<(usize, NDArray)> = self
                .host_inputs
                .iter()
                .enumerate()
                .filter_map(|(i, v)| v.clone().map(|v| (i, v)))
                .collect();
            for (i, v) in inputs {
                self.set_input(i, &v)?;
            }
        }
        self.run()?;
        if end_to_end {
            self.outputs()?;
        }
        Ok(())
    }

    /// The layout the executor runs.
    pub(crate) fn layout(&self) -> &Layout {
        &self.layout
    }
}

/// Reads `shape`/`dtype` from the first bytes of a device buffer.
fn read(
    library: &dyn KernelLibrary,
    buf: &dyn DeviceBuffer,
    shape: &[usize],
    dtype: DType,
) -> Result<NDArray> {
    let mut bytes = vec![0u8; shape.iter().product::<usize>() * dtype.size_bytes()];
    library.copy_to_host(buf, &mut bytes)?;
    Ok(NDArray::from_le_bytes(shape.to_vec(), dtype, &bytes)?)
}

fn reference_has_no_device() -> Error {
    Error::Unsupported(
        "the `ref` target runs the graph-IR interpreter on host tensors: it has no device \
         memory and no kernels"
            .into(),
    )
}

/// The arguments of [`GraphExecutor::benchmark`], with TVM's defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct BenchmarkOptions {
    /// How many measurements (results) to take.
    pub repeat: usize,
    /// Runs per measurement; the result is their mean.
    pub number: usize,
    /// If a measurement takes less, `number` grows until it does not (0: off).
    pub min_repeat_ms: f64,
    /// Include the input copies to the device and the output copies back.
    pub end_to_end: bool,
    /// Sleep this long after every `repeats_to_cooldown` measurements (0: never).
    pub cooldown_interval_ms: u64,
    /// See `cooldown_interval_ms`.
    pub repeats_to_cooldown: usize,
}

impl Default for BenchmarkOptions {
    fn default() -> Self {
        BenchmarkOptions {
            repeat: 5,
            number: 5,
            min_repeat_ms: 0.0,
            end_to_end: false,
            cooldown_interval_ms: 0,
            repeats_to_cooldown: 1,
        }
    }
}

/// Benchmark figures in seconds per run (TVM's `BenchmarkResult`).
#[derive(Clone, Debug, PartialEq)]
pub struct BenchmarkResult {
    /// Mean of `results`.
    pub mean: f64,
    /// Median of `results`.
    pub median: f64,
    /// Population standard deviation of `results`.
    pub std: f64,
    /// Smallest result.
    pub min: f64,
    /// Largest result.
    pub max: f64,
    /// Seconds per run, one per measurement.
    pub results: Vec<f64>,
    /// What measured them: the device's timer (kernel time only, where the library
    /// offers one and the runs are not end to end) or the host clock.
    pub clock: Clock,
}

impl BenchmarkResult {
    /// The statistics of `results` (seconds per run, by the host clock); all zero when
    /// empty.
    pub fn new(results: Vec<f64>) -> BenchmarkResult {
        let n = results.len().max(1) as f64;
        let mean = results.iter().sum::<f64>() / n;
        let var = results.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / n;
        let mut sorted = results.clone();
        sorted.sort_by(f64::total_cmp);
        let median = match sorted.len() {
            0 => 0.0,
            k if k % 2 == 1 => sorted[k / 2],
            k => (sorted[k / 2 - 1] + sorted[k / 2]) / 2.0,
        };
        BenchmarkResult {
            mean,
            median,
            std: var.sqrt(),
            min: sorted.first().copied().unwrap_or(0.0),
            max: sorted.last().copied().unwrap_or(0.0),
            results,
            clock: Clock::Host,
        }
    }
}

impl fmt::Display for BenchmarkResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = |s: f64| s * 1e3;
        writeln!(f, "Execution time summary ({}):", self.clock)?;
        writeln!(
            f,
            " mean (ms)   median (ms)    max (ms)     min (ms)     std (ms)  "
        )?;
        write!(
            f,
            "{:>10.4}   {:>10.4}   {:>10.4}   {:>10.4}   {:>10.4}",
            ms(self.mean),
            ms(self.median),
            ms(self.max),
            ms(self.min),
            ms(self.std)
        )
    }
}
