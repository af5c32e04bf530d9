//! Memory planning: which tensors share storage, decided once at build time and written
//! into the graph JSON's `storage_id` (TVM's `graph_plan_memory.cc`), then turned at
//! build or load time into a [`Layout`]: everything the executor needs to run the graph
//! as a flat loop (entry shapes and sizes, storage sizes, the buffer list of every call).
//!
//! The planner walks the kernel calls in order, like TVM's greedy storage allocator:
//! - placeholders (inputs and params) and graph outputs each keep a storage of their own
//!   for the whole run (inputs are set once and read by every run; outputs are read after
//!   it);
//! - a call's outputs get storage first, then its inputs whose last reader it is are
//!   released, so a kernel never reads and writes the same storage;
//! - a request takes the free block closest in size within a factor of
//!   [`MATCH_RANGE`] (a larger one first; else the largest smaller one, which grows), or
//!   a new block.
//!
//! [`check_plan`] verifies any plan, including one read from a file: no two tensors that
//! are alive at the same time share a storage id.

use std::collections::{BTreeMap, HashMap};

use kiln_ir::DType;
use kiln_te::tir::PrimFunc;

use crate::error::{Error, Result};
use crate::graph_json::{GraphJson, NodeOp};

/// A free block is reused for a request between `size / MATCH_RANGE` and
/// `size * MATCH_RANGE` bytes (TVM's `match_range_`).
pub const MATCH_RANGE: usize = 16;

/// Planned bytes against the naive sum (one buffer per tensor).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct MemoryReport {
    /// Tensors (graph entries).
    pub num_entries: usize,
    /// Distinct storage blocks after planning.
    pub num_storage: usize,
    /// Bytes of every tensor, each in its own buffer.
    pub naive_bytes: u64,
    /// Bytes of the planned storage blocks.
    pub planned_bytes: u64,
    /// Bytes of the intermediate tensors (kernel outputs that are not graph outputs),
    /// each in its own buffer.
    pub intermediate_naive_bytes: u64,
    /// Bytes of the storage blocks that hold only intermediate tensors.
    pub intermediate_planned_bytes: u64,
}

impl std::fmt::Display for MemoryReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
        let pct = |a: u64, b: u64| {
            if b == 0 {
                100.0
            } else {
                100.0 * a as f64 / b as f64
            }
        };
        write!(
            f,
            "memory: {} tensors in {} storage blocks; all tensors {:.2} MiB planned vs \
             {:.2} MiB naive ({:.1}%); intermediates {:.2} MiB planned vs {:.2} MiB naive \
             ({:.1}%)",
            self.num_entries,
            self.num_storage,
            mib(self.planned_bytes),
            mib(self.naive_bytes),
            pct(self.planned_bytes, self.naive_bytes),
            mib(self.intermediate_planned_bytes),
            mib(self.intermediate_naive_bytes),
            pct(
                self.intermediate_planned_bytes,
                self.intermediate_naive_bytes
            ),
        )
    }
}

/// Bytes of every entry of `graph`, from its shapes and dtypes.
fn entry_bytes(graph: &GraphJson) -> Result<Vec<usize>> {
    graph
        .attrs
        .shape
        .iter()
        .zip(&graph.attrs.dltype)
        .map(|(shape, dt)| {
            let dtype: DType = dt.parse()?;
            Ok(shape.iter().map(|&d| d as usize).product::<usize>() * dtype.size_bytes())
        })
        .collect()
}

/// For every entry: the node that defines it and the last node that reads it (`None` if
/// it lives for the whole run: placeholders and graph outputs).
fn lifetimes(graph: &GraphJson) -> Vec<(usize, Option<usize>)> {
    let n = graph.num_entries();
    let mut life = vec![(0usize, Some(0usize)); n];
    for (nid, node) in graph.nodes.iter().enumerate() {
        let (start, end) = (
            graph.node_row_ptr[nid] as usize,
            graph.node_row_ptr[nid + 1] as usize,
        );
        for l in &mut life[start..end] {
            *l = match node.op {
                NodeOp::Null => (nid, None),
                NodeOp::TvmOp => (nid, Some(nid)),
            };
        }
        for &e in &node.inputs {
            if let Some(id) = graph.entry_id(e)
                && let (_, Some(last)) = &mut life[id]
            {
                *last = nid;
            }
        }
    }
    for &h in &graph.heads {
        if let Some(id) = graph.entry_id(h) {
            life[id].1 = None;
        }
    }
    life
}

/// Plans storage for a validated `graph` (see the module docs) and returns one storage
/// id per entry. With `keep_all`, every entry gets its own storage (the debug plan).
pub fn plan_memory(graph: &GraphJson, keep_all: bool) -> Result<Vec<i64>> {
    let n = graph.num_entries();
    if keep_all {
        return Ok((0..n as i64).collect());
    }
    let bytes = entry_bytes(graph)?;
    let life = lifetimes(graph);
    let mut storage: Vec<Option<usize>> = vec![None; n];
    let mut block_size: Vec<usize> = vec![];
    // Free blocks by size: size -> block ids (BTreeMap for the closest-size search).
    let mut free: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    let request =
        |size: usize, block_size: &mut Vec<usize>, free: &mut BTreeMap<usize, Vec<usize>>| {
            let hi = size.saturating_mul(MATCH_RANGE);
            let lo = size / MATCH_RANGE;
            let bigger = free.range(size..=hi).next().map(|(&s, _)| s);
            let smaller = free.range(lo..size).next_back().map(|(&s, _)| s);
            if let Some(s) = bigger.or(smaller) {
                let list = free.get_mut(&s).expect("key just found");
                let id = list.pop().expect("free lists are never empty");
                if list.is_empty() {
                    free.remove(&s);
                }
                block_size[id] = block_size[id].max(size);
                id
            } else {
                block_size.push(size);
                block_size.len() - 1
            }
        };
    let mut readers_left = vec![0usize; n];
    for node in &graph.nodes {
        for &e in &node.inputs {
            if let Some(id) = graph.entry_id(e) {
                readers_left[id] += 1;
            }
        }
    }
    for (nid, node) in graph.nodes.iter().enumerate() {
        let range = graph.node_row_ptr[nid] as usize..graph.node_row_ptr[nid + 1] as usize;
        if node.op == NodeOp::Null {
            for e in range {
                block_size.push(bytes[e]);
                storage[e] = Some(block_size.len() - 1);
            }
            continue;
        }
        for e in range.clone() {
            let id = if life[e].1.is_none() {
                block_size.push(bytes[e]);
                block_size.len() - 1
            } else {
                request(bytes[e], &mut block_size, &mut free)
            };
            storage[e] = Some(id);
        }
        let release = |e: usize, free: &mut BTreeMap<usize, Vec<usize>>| {
            if life[e].1.is_some()
                && let Some(id) = storage[e]
            {
                free.entry(block_size[id]).or_default().push(id);
            }
        };
        for &input in &node.inputs {
            if let Some(id) = graph.entry_id(input) {
                readers_left[id] -= 1;
                if readers_left[id] == 0 {
                    release(id, &mut free);
                }
            }
        }
        for e in range {
            if readers_left[e] == 0 {
                release(e, &mut free);
            }
        }
    }
    storage
        .into_iter()
        .enumerate()
        .map(|(e, s)| {
            s.map(|s| s as i64)
                .ok_or_else(|| Error::Internal(format!("entry {e} got no storage")))
        })
        .collect()
}

/// Checks that no two entries alive at the same time share a storage id (placeholders
/// and graph outputs are alive for the whole run).
pub fn check_plan(graph: &GraphJson) -> Result<()> {
    let life = lifetimes(graph);
    let mut by_storage: HashMap<i64, Vec<usize>> = HashMap::new();
    for (e, &s) in graph.attrs.storage_id.iter().enumerate() {
        by_storage.entry(s).or_default().push(e);
    }
    for (s, mut entries) in by_storage {
        if entries.len() < 2 {
            continue;
        }
        if let Some(&e) = entries.iter().find(|&&e| life[e].1.is_none()) {
            let other = entries.iter().find(|&&o| o != e).copied().unwrap_or(e);
            return Err(Error::InvalidGraph(format!(
                "storage_id {s} is shared by entry {e}, which lives for the whole run \
                 (an input, param or output), and entry {other}"
            )));
        }
        entries.sort_by_key(|&e| life[e].0);
        for w in entries.windows(2) {
            let (a, b) = (w[0], w[1]);
            let a_last = life[a].1.unwrap_or(usize::MAX);
            if life[b].0 <= a_last {
                return Err(Error::InvalidGraph(format!(
                    "storage_id {s} is shared by entries {a} and {b}, which are alive at \
                     the same time (node {})",
                    life[b].0
                )));
            }
        }
    }
    Ok(())
}

/// What one tensor (graph entry) is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntryInfo {
    /// Its shape.
    pub shape: Vec<usize>,
    /// Its dtype.
    pub dtype: DType,
    /// `numel * dtype size`.
    pub bytes: usize,
    /// Index into [`Layout::storage_bytes`].
    pub storage: usize,
}

/// A placeholder of the graph: an input or a param.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placeholder {
    /// Its name.
    pub name: String,
    /// Its node.
    pub node: usize,
    /// Its entry.
    pub entry: usize,
}

/// A prepared kernel call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallInfo {
    /// The node.
    pub node: usize,
    /// The kernel's index in the library.
    pub kernel: usize,
    /// The entries passed, inputs then outputs.
    pub args: Vec<usize>,
}

/// Everything the executor needs to run a graph as a flat loop, computed once at build or
/// load time from the graph JSON and the kernels.
#[derive(Clone, Debug)]
pub struct Layout {
    /// Every entry.
    pub entries: Vec<EntryInfo>,
    /// Bytes of each storage block (the largest entry mapped to it).
    pub storage_bytes: Vec<usize>,
    /// Placeholders the caller sets, in node order.
    pub inputs: Vec<Placeholder>,
    /// Placeholders bound to params, in node order.
    pub params: Vec<Placeholder>,
    /// Kernel calls in order (empty when the graph runs in the reference interpreter).
    pub calls: Vec<CallInfo>,
    /// The graph outputs' entries.
    pub outputs: Vec<usize>,
    /// For every entry, the calls and argument positions that use it.
    pub uses: Vec<Vec<(usize, usize)>>,
}

impl Layout {
    /// The layout of a validated `graph` whose placeholders named in `params` are params.
    /// With `kernels`, every call is resolved to its kernel by `func_name` and checked
    /// against it (argument count, every buffer's shape and dtype). With `keep_all`, every
    /// entry gets storage of its own (the debug executor's plan).
    pub fn new(
        graph: &GraphJson,
        params: &dyn Fn(&str) -> bool,
        kernels: Option<&[PrimFunc]>,
        keep_all: bool,
    ) -> Result<Layout> {
        let storage_ids = if keep_all {
            plan_memory(graph, true)?
        } else {
            graph.attrs.storage_id.clone()
        };
        let mut entries = Vec::with_capacity(graph.num_entries());
        let mut storage_index: BTreeMap<i64, usize> = BTreeMap::new();
        let mut storage_bytes = vec![];
        for ((shape, dt), &sid) in graph
            .attrs
            .shape
            .iter()
            .zip(&graph.attrs.dltype)
            .zip(&storage_ids)
        {
            let dtype: DType = dt.parse()?;
            let shape: Vec<usize> = shape.iter().map(|&d| d as usize).collect();
            let bytes = shape.iter().product::<usize>() * dtype.size_bytes();
            let next = storage_index.len();
            let storage = *storage_index.entry(sid).or_insert(next);
            if storage == storage_bytes.len() {
                storage_bytes.push(0);
            }
            storage_bytes[storage] = storage_bytes[storage].max(bytes);
            entries.push(EntryInfo {
                shape,
                dtype,
                bytes,
                storage,
            });
        }
        let by_name: HashMap<&str, usize> = kernels
            .unwrap_or(&[])
            .iter()
            .enumerate()
            .map(|(i, k)| (k.name.as_str(), i))
            .collect();
        let mut layout = Layout {
            entries,
            storage_bytes,
            inputs: vec![],
            params: vec![],
            calls: vec![],
            outputs: vec![],
            uses: vec![vec![]; graph.num_entries()],
        };
        let entry = |e| {
            graph
                .entry_id(e)
                .ok_or_else(|| Error::InvalidGraph(format!("entry {e:?} is out of range")))
        };
        for (nid, node) in graph.nodes.iter().enumerate() {
            let first = graph.node_row_ptr[nid] as usize;
            match node.op {
                NodeOp::Null => {
                    let p = Placeholder {
                        name: node.name.clone(),
                        node: nid,
                        entry: first,
                    };
                    if params(&node.name) {
                        layout.params.push(p);
                    } else {
                        layout.inputs.push(p);
                    }
                }
                NodeOp::TvmOp => {
                    let Some(kernels) = kernels else { continue };
                    let fname = node.func_name().unwrap_or_default();
                    let &k = by_name.get(fname).ok_or_else(|| {
                        Error::InvalidGraph(format!(
                            "node {nid} `{}` calls kernel `{fname}`, which is not in the library",
                            node.name
                        ))
                    })?;
                    let mut args = node
                        .inputs
                        .iter()
                        .map(|&e| entry(e))
                        .collect::<Result<Vec<_>>>()?;
                    args.extend(first..graph.node_row_ptr[nid + 1] as usize);
                    check_kernel(
                        &kernels[k],
                        &args,
                        node.inputs.len(),
                        &layout.entries,
                        nid,
                        &node.name,
                    )?;
                    let c = layout.calls.len();
                    for (a, &e) in args.iter().enumerate() {
                        layout.uses[e].push((c, a));
                    }
                    layout.calls.push(CallInfo {
                        node: nid,
                        kernel: k,
                        args,
                    });
                }
            }
        }
        layout.outputs = graph
            .heads
            .iter()
            .map(|&h| entry(h))
            .collect::<Result<_>>()?;
        Ok(layout)
    }

    /// Planned bytes against the naive sum.
    pub fn report(&self) -> MemoryReport {
        let lifelong: std::collections::HashSet<usize> = self
            .inputs
            .iter()
            .chain(&self.params)
            .map(|p| p.entry)
            .chain(self.outputs.iter().copied())
            .collect();
        let mut only_intermediate = vec![true; self.storage_bytes.len()];
        let mut inter_naive = 0u64;
        for (e, info) in self.entries.iter().enumerate() {
            if lifelong.contains(&e) {
                only_intermediate[info.storage] = false;
            } else {
                inter_naive += info.bytes as u64;
            }
        }
        MemoryReport {
            num_entries: self.entries.len(),
            num_storage: self.storage_bytes.len(),
            naive_bytes: self.entries.iter().map(|e| e.bytes as u64).sum(),
            planned_bytes: self.storage_bytes.iter().map(|&b| b as u64).sum(),
            intermediate_naive_bytes: inter_naive,
            intermediate_planned_bytes: self
                .storage_bytes
                .iter()
                .zip(&only_intermediate)
                .filter(|(_, only)| **only)
                .map(|(&b, _)| b as u64)
                .sum(),
        }
    }
}

/// Checks that `kernel` takes exactly the entries `args` (count, shapes, dtypes).
fn check_kernel(
    kernel: &PrimFunc,
    args: &[usize],
    num_inputs: usize,
    entries: &[EntryInfo],
    nid: usize,
    name: &str,
) -> Result<()> {
    let who = || format!("node {nid} `{name}` (kernel @{})", kernel.name);
    if kernel.params.len() != args.len() {
        return Err(Error::InvalidGraph(format!(
            "{}: the kernel takes {} buffers, the node passes {}",
            who(),
            kernel.params.len(),
            args.len()
        )));
    }
    if kernel.num_inputs != num_inputs {
        return Err(Error::InvalidGraph(format!(
            "{}: the kernel takes {} inputs, the node passes {num_inputs}",
            who(),
            kernel.num_inputs
        )));
    }
    for (i, (&p, &e)) in kernel.params.iter().zip(args).enumerate() {
        let b = kernel.buffer(p).ok_or_else(|| {
            Error::InvalidGraph(format!("{}: parameter {i} has no buffer", who()))
        })?;
        let info = &entries[e];
        if b.shape != info.shape || b.dtype != info.dtype {
            return Err(Error::InvalidGraph(format!(
                "{}: buffer {i} `{}` is {:?} {}, but graph entry {e} is {:?} {}",
                who(),
                b.name,
                b.shape,
                b.dtype,
                info.shape,
                info.dtype
            )));
        }
    }
    Ok(())
}
