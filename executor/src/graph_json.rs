//! TVM's graph-executor JSON (apache/tvm `docs/arch/debugger.rst`, read by
//! `src/runtime/graph_executor/graph_executor.cc`): the serde types, a validator, and a
//! writer that keeps TVM's layout, so people who know TVM can read kiln's graphs and the
//! two can exchange them.
//!
//! A graph is a list of nodes in topological order: placeholders (`op: "null"`, one per
//! input or param, each listed in `arg_nodes`) and kernel calls (`op: "tvm_op"`, with
//! string attributes `func_name`, `num_inputs`, `num_outputs`, `flatten_data`). Every
//! node output is an *entry*, numbered `node_row_ptr[nid] + index`; the graph-level
//! `attrs` hold one storage id, dtype and shape per entry.
//!
//! [`GraphJson::validate`] checks, collecting every problem with the node it concerns:
//! - `node_row_ptr` has one more element than there are nodes, starts at 0 and is the
//!   prefix sum of the nodes' output counts (1 for a placeholder, `num_outputs` for a
//!   kernel call);
//! - a placeholder has no inputs and appears in `arg_nodes`; `arg_nodes` names only
//!   placeholders, each once, and no two placeholders share a name (inputs are found by
//!   name);
//! - a kernel call has a non-empty `func_name`, `num_inputs` equal to its input count,
//!   `num_outputs` of at least 1 and `flatten_data` of `"0"` or `"1"` if present;
//! - every input `[nid, index, version]` names an earlier node and one of its outputs;
//!   every head names an existing node output;
//! - each per-entry array (`storage_id`, `dltype`, `shape`, and `device_index` /
//!   `storage_scope` when present) has exactly one element per entry;
//! - every dtype is one kiln knows, every storage id is non-negative, every dimension is
//!   non-negative and no shape has more than [`MAX_ELEMENTS`] elements.
//!
//! Reading also accepts what TVM's reader accepts: a node's attributes under the key
//! `attr`, inputs written as `[nid, index]` (version 0), and unknown graph attributes
//! tagged `list_int` or `size_t` (kept and written back).
//!
//! [`GraphJson::to_json`] writes the top-level keys in the order TVM's writer uses
//! (`nodes`, `arg_nodes`, `heads`, `attrs`, `node_row_ptr`), node keys as TVM writes them
//! (`op`, `name`, `attrs`, `inputs`), node attributes sorted by key, and the graph
//! attributes in the order of TVM's documentation (`storage_id`, `dltype`, `shape`,
//! `device_index`, `storage_scope`, then unknown ones sorted; TVM keeps them in a hash
//! map, so it has no order of its own). One node, head or attribute per line.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use kiln_ir::DType;
use kiln_ir::ty::MAX_ELEMENTS;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{Error, Result};

/// A whole graph in TVM's graph-executor layout.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GraphJson {
    /// The nodes, in topological order.
    pub nodes: Vec<Node>,
    /// Indices of the placeholder nodes (inputs and params).
    pub arg_nodes: Vec<u32>,
    /// The graph's outputs.
    pub heads: Vec<EntryRef>,
    /// Per-entry storage ids, dtypes and shapes.
    pub attrs: GraphAttrs,
    /// Prefix sum of per-node output counts; entry id = `node_row_ptr[nid] + index`.
    pub node_row_ptr: Vec<u32>,
}

/// What a node is.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum NodeOp {
    /// A placeholder for an input or a param (`"null"`).
    #[serde(rename = "null")]
    Null,
    /// A call of a kernel from the library (`"tvm_op"`).
    #[serde(rename = "tvm_op")]
    TvmOp,
}

/// One node of the graph.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Node {
    /// Placeholder or kernel call.
    pub op: NodeOp,
    /// The node's name (for a placeholder, the input or param name).
    pub name: String,
    /// String attributes: for a kernel call `func_name`, `num_inputs`, `num_outputs`,
    /// `flatten_data`, plus optional hints. TVM's reader also accepts the key `attr`.
    #[serde(default, alias = "attr", skip_serializing_if = "BTreeMap::is_empty")]
    pub attrs: BTreeMap<String, String>,
    /// The entries this node reads.
    #[serde(default)]
    pub inputs: Vec<EntryRef>,
}

/// A reference to one output of a node: `[nid, index, version]` in the JSON.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "Vec<u32>", into = "[u32; 3]")]
pub struct EntryRef {
    /// The node.
    pub node: u32,
    /// Which of its outputs.
    pub index: u32,
    /// Unused by the executor; kept for the round trip (0 when absent).
    pub version: u32,
}

impl TryFrom<Vec<u32>> for EntryRef {
    type Error = String;
    fn try_from(v: Vec<u32>) -> Result<Self, String> {
        match v[..] {
            [node, index] => Ok(EntryRef {
                node,
                index,
                version: 0,
            }),
            [node, index, version] => Ok(EntryRef {
                node,
                index,
                version,
            }),
            _ => Err(format!(
                "an entry reference is [node, index, version] or [node, index], not {v:?}"
            )),
        }
    }
}

impl From<EntryRef> for [u32; 3] {
    fn from(e: EntryRef) -> [u32; 3] {
        [e.node, e.index, e.version]
    }
}

/// The graph-level attributes: one element per entry in each array.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(try_from = "BTreeMap<String, Value>")]
pub struct GraphAttrs {
    /// Memory slot of each entry (`"list_int"`); slots are shared by the planner.
    pub storage_id: Vec<i64>,
    /// Dtype name of each entry (`"list_str"`), e.g. `"float32"`.
    pub dltype: Vec<String>,
    /// Shape of each entry (`"list_shape"`).
    pub shape: Vec<Vec<i64>>,
    /// Device type of each entry (`"list_int"`), for heterogeneous execution.
    pub device_index: Option<Vec<i64>>,
    /// Storage scope of each entry (`"list_str"`), e.g. `"global"`.
    pub storage_scope: Option<Vec<String>>,
    /// Other attributes tagged `list_int` or `size_t`: ignored, written back as read.
    pub extra: BTreeMap<String, Value>,
}

/// The payload of a graph attribute `[tag, payload]`, checking the tag.
fn tagged<'a>(key: &str, v: &'a Value, tag: &str) -> Result<&'a Value, String> {
    match v.as_array().map(Vec::as_slice) {
        Some([Value::String(t), payload]) if t == tag => Ok(payload),
        Some([Value::String(t), _]) => Err(format!(
            "graph attribute `{key}` is tagged \"{t}\", expected \"{tag}\""
        )),
        _ => Err(format!(
            "graph attribute `{key}` must be [\"{tag}\", [...]], found {}",
            brief(v)
        )),
    }
}

fn list<'a>(key: &str, payload: &'a Value) -> Result<&'a [Value], String> {
    payload.as_array().map(Vec::as_slice).ok_or_else(|| {
        format!(
            "graph attribute `{key}` payload is not a list: {}",
            brief(payload)
        )
    })
}

fn int(key: &str, i: usize, v: &Value) -> Result<i64, String> {
    v.as_i64()
        .ok_or_else(|| format!("{key}[{i}] is not an integer: {}", brief(v)))
}

fn list_int(key: &str, v: &Value) -> Result<Vec<i64>, String> {
    let items = list(key, tagged(key, v, "list_int")?)?;
    items
        .iter()
        .enumerate()
        .map(|(i, x)| int(key, i, x))
        .collect()
}

fn list_str(key: &str, v: &Value) -> Result<Vec<String>, String> {
    let items = list(key, tagged(key, v, "list_str")?)?;
    items
        .iter()
        .enumerate()
        .map(|(i, x)| {
            x.as_str()
                .map(str::to_owned)
                .ok_or_else(|| format!("{key}[{i}] is not a string: {}", brief(x)))
        })
        .collect()
}

fn list_shape(key: &str, v: &Value) -> Result<Vec<Vec<i64>>, String> {
    let items = list(key, tagged(key, v, "list_shape")?)?;
    items
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let dims = s
                .as_array()
                .ok_or_else(|| format!("{key}[{i}] is not a list of dimensions: {}", brief(s)))?;
            dims.iter()
                .enumerate()
                .map(|(j, d)| int(&format!("{key}[{i}]"), j, d))
                .collect()
        })
        .collect()
}

/// A short rendering of a JSON value for error messages.
fn brief(v: &Value) -> String {
    let s = v.to_string();
    if s.len() > 60 {
        let cut = (0..=60).rev().find(|&i| s.is_char_boundary(i)).unwrap_or(0);
        format!("{}...", &s[..cut])
    } else {
        s
    }
}

impl TryFrom<BTreeMap<String, Value>> for GraphAttrs {
    type Error = String;
    fn try_from(mut m: BTreeMap<String, Value>) -> Result<Self, String> {
        let mut required = |key: &str| {
            m.remove(key)
                .ok_or_else(|| format!("graph attributes lack `{key}`"))
        };
        let storage_id = list_int("storage_id", &required("storage_id")?)?;
        let dltype = list_str("dltype", &required("dltype")?)?;
        let shape = list_shape("shape", &required("shape")?)?;
        let device_index = m
            .remove("device_index")
            .map(|v| list_int("device_index", &v))
            .transpose()?;
        let storage_scope = m
            .remove("storage_scope")
            .map(|v| list_str("storage_scope", &v))
            .transpose()?;
        // Like TVM's reader: other attributes are skipped if tagged list_int or size_t.
        for (key, v) in &m {
            match v.as_array().map(Vec::as_slice) {
                Some([Value::String(t), payload]) if t == "list_int" => {
                    for (i, x) in list(key, payload)?.iter().enumerate() {
                        int(key, i, x)?;
                    }
                }
                Some([Value::String(t), payload]) if t == "size_t" && payload.is_u64() => {}
                _ => {
                    return Err(format!(
                        "unknown graph attribute `{key}` ({}); kiln reads storage_id, dltype, \
                         shape, device_index, storage_scope and skips others tagged \
                         \"list_int\" or \"size_t\"",
                        brief(v)
                    ));
                }
            }
        }
        Ok(GraphAttrs {
            storage_id,
            dltype,
            shape,
            device_index,
            storage_scope,
            extra: m,
        })
    }
}

impl GraphAttrs {
    /// The attributes as `(key, [tag, payload])` pairs, in the order they are written.
    pub fn items(&self) -> Vec<(&str, Value)> {
        let tag = |t: &str, payload: Value| Value::Array(vec![t.into(), payload]);
        let mut items = vec![
            (
                "storage_id",
                tag("list_int", self.storage_id.clone().into()),
            ),
            ("dltype", tag("list_str", self.dltype.clone().into())),
            ("shape", tag("list_shape", self.shape.clone().into())),
        ];
        if let Some(d) = &self.device_index {
            items.push(("device_index", tag("list_int", d.clone().into())));
        }
        if let Some(s) = &self.storage_scope {
            items.push(("storage_scope", tag("list_str", s.clone().into())));
        }
        items.extend(self.extra.iter().map(|(k, v)| (k.as_str(), v.clone())));
        items
    }
}

impl Serialize for GraphAttrs {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let items = self.items();
        let mut map = s.serialize_map(Some(items.len()))?;
        for (k, v) in &items {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

impl Node {
    /// How many outputs (entries) the node has: 1 for a placeholder, `num_outputs` for
    /// a kernel call.
    pub fn num_outputs(&self) -> Result<usize> {
        self.outputs()
            .map_err(|m| Error::InvalidGraph(format!("node `{}`: {m}", self.name)))
    }

    fn outputs(&self) -> Result<usize, String> {
        match self.op {
            NodeOp::Null => Ok(1),
            NodeOp::TvmOp => self.count_attr("num_outputs"),
        }
    }

    /// The kernel a call node runs (`func_name`), if it has one.
    pub fn func_name(&self) -> Option<&str> {
        self.attrs.get("func_name").map(String::as_str)
    }

    /// A count attribute (`num_inputs`, `num_outputs`), or what is wrong with it.
    fn count_attr(&self, key: &str) -> Result<usize, String> {
        let v = self
            .attrs
            .get(key)
            .ok_or_else(|| format!("lacks the attribute `{key}`"))?;
        v.parse::<u32>()
            .map(|n| n as usize)
            .map_err(|_| format!("attribute `{key}` is \"{v}\", not a count"))
    }
}

impl GraphJson {
    /// Parses graph JSON and validates it (see the module docs for what is checked).
    pub fn parse(json: &str) -> Result<GraphJson> {
        let graph: GraphJson = serde_json::from_str(json)
            .map_err(|e| Error::InvalidGraph(format!("not graph JSON: {e}")))?;
        graph.validate()?;
        Ok(graph)
    }

    /// The number of entries (node outputs) in the graph, by `node_row_ptr`.
    pub fn num_entries(&self) -> usize {
        self.node_row_ptr.last().map_or(0, |&n| n as usize)
    }

    /// The entry id of `e`: `node_row_ptr[e.node] + e.index`, if it is in range.
    pub fn entry_id(&self, e: EntryRef) -> Option<usize> {
        let start = *self.node_row_ptr.get(e.node as usize)? as usize;
        let end = *self.node_row_ptr.get(e.node as usize + 1)? as usize;
        let id = start.checked_add(e.index as usize)?;
        (id < end).then_some(id)
    }

    /// Checks every invariant listed in the module docs, reporting every violation.
    pub fn validate(&self) -> Result<()> {
        let mut errs = Problems::default();
        let n = self.nodes.len();
        let who = |nid: usize| match self.nodes.get(nid) {
            Some(node) => format!("node {nid} `{}`", node.name),
            None => format!("node {nid}"),
        };

        // Output counts, and node_row_ptr as their prefix sum.
        let mut outputs = Vec::with_capacity(n);
        for (nid, node) in self.nodes.iter().enumerate() {
            match node.outputs() {
                Ok(0) => {
                    errs.push(format!("{}: num_outputs is 0", who(nid)));
                    outputs.push(0);
                }
                Ok(k) => outputs.push(k),
                Err(e) => {
                    errs.push(format!("{}: {e}", who(nid)));
                    outputs.push(0);
                }
            }
        }
        if self.node_row_ptr.len() != n + 1 {
            errs.push(format!(
                "node_row_ptr has {} elements, expected {} (one per node, plus one)",
                self.node_row_ptr.len(),
                n + 1
            ));
        } else {
            let mut sum = 0usize;
            for (nid, &ptr) in self.node_row_ptr.iter().enumerate() {
                if ptr as usize != sum {
                    errs.push(format!(
                        "node_row_ptr[{nid}] is {ptr}, expected {sum} (the outputs of the nodes before {})",
                        if nid < n { who(nid) } else { "the end".to_string() },
                    ));
                    break;
                }
                sum += outputs.get(nid).copied().unwrap_or(0);
            }
        }
        let num_entries: usize = outputs.iter().sum();
        let output_ok = |e: &EntryRef, before: usize| {
            (e.node as usize) < before && (e.index as usize) < outputs[e.node as usize]
        };

        // Placeholders and arg_nodes.
        let mut args = BTreeSet::new();
        for &a in &self.arg_nodes {
            match self.nodes.get(a as usize) {
                None => errs.push(format!("arg_nodes names node {a}, but there are {n} nodes")),
                Some(node) if node.op != NodeOp::Null => errs.push(format!(
                    "arg_nodes names {}, which is a kernel call, not a placeholder",
                    who(a as usize)
                )),
                Some(_) if !args.insert(a) => {
                    errs.push(format!("arg_nodes names {} twice", who(a as usize)))
                }
                Some(_) => {}
            }
        }
        let mut input_names = BTreeMap::new();
        for (nid, node) in self.nodes.iter().enumerate() {
            match node.op {
                NodeOp::Null => {
                    if !node.inputs.is_empty() {
                        errs.push(format!("{}: a placeholder has no inputs", who(nid)));
                    }
                    if !args.contains(&(nid as u32)) {
                        errs.push(format!(
                            "{} is a placeholder missing from arg_nodes",
                            who(nid)
                        ));
                    }
                    if let Some(first) = input_names.insert(node.name.as_str(), nid) {
                        errs.push(format!(
                            "{} has the same name as placeholder node {first}",
                            who(nid)
                        ));
                    }
                }
                NodeOp::TvmOp => {
                    if node.func_name().is_none_or(str::is_empty) {
                        errs.push(format!(
                            "{}: a kernel call needs a non-empty func_name",
                            who(nid)
                        ));
                    }
                    match node.count_attr("num_inputs") {
                        Ok(k) if k != node.inputs.len() => errs.push(format!(
                            "{}: num_inputs is {k} but it has {} inputs",
                            who(nid),
                            node.inputs.len()
                        )),
                        Ok(_) => {}
                        Err(e) => errs.push(format!("{}: {e}", who(nid))),
                    }
                    if let Some(f) = node.attrs.get("flatten_data")
                        && f != "0"
                        && f != "1"
                    {
                        errs.push(format!(
                            "{}: flatten_data is \"{f}\", expected \"0\" or \"1\"",
                            who(nid)
                        ));
                    }
                }
            }
            for (i, e) in node.inputs.iter().enumerate() {
                if !output_ok(e, nid) {
                    errs.push(format!(
                        "{}: input {i} [{}, {}] is not an output of an earlier node",
                        who(nid),
                        e.node,
                        e.index
                    ));
                }
            }
        }
        for (i, h) in self.heads.iter().enumerate() {
            if !output_ok(h, n) {
                errs.push(format!(
                    "head {i} [{}, {}] is not an output of any node",
                    h.node, h.index
                ));
            }
        }

        // Per-entry attributes. Entry e belongs to the node whose row contains it.
        let starts: Vec<usize> = outputs
            .iter()
            .scan(0usize, |sum, &k| {
                let start = *sum;
                *sum += k;
                Some(start)
            })
            .collect();
        let owner = |entry: usize| {
            // The last node starting at or before `entry` that has outputs.
            let nid = starts.partition_point(|&s| s <= entry);
            match (0..nid).rev().find(|&i| outputs[i] > 0) {
                Some(i) if entry < starts[i] + outputs[i] => {
                    format!("entry {entry} ({}, output {})", who(i), entry - starts[i])
                }
                _ => format!("entry {entry}"),
            }
        };
        let a = &self.attrs;
        let lens = [
            ("storage_id", Some(a.storage_id.len())),
            ("dltype", Some(a.dltype.len())),
            ("shape", Some(a.shape.len())),
            ("device_index", a.device_index.as_ref().map(Vec::len)),
            ("storage_scope", a.storage_scope.as_ref().map(Vec::len)),
        ];
        for (key, len) in lens {
            if let Some(len) = len
                && len != num_entries
            {
                errs.push(format!(
                    "attrs.{key} has {len} elements, expected {num_entries} (one per entry)"
                ));
            }
        }
        for (e, &s) in a.storage_id.iter().enumerate() {
            if s < 0 {
                errs.push(format!("{}: storage_id {s} is negative", owner(e)));
            }
        }
        for (e, d) in a.dltype.iter().enumerate() {
            if let Err(err) = d.parse::<DType>() {
                errs.push(format!("{}: {err}", owner(e)));
            }
        }
        for (e, shape) in a.shape.iter().enumerate() {
            if let Some(d) = shape.iter().find(|&&d| d < 0) {
                errs.push(format!(
                    "{}: shape {shape:?} has a negative dimension {d}",
                    owner(e)
                ));
            } else if shape
                .iter()
                .try_fold(1u64, |p, &d| p.checked_mul(d as u64))
                .is_none_or(|p| p > MAX_ELEMENTS as u64)
            {
                errs.push(format!(
                    "{}: shape {shape:?} has more than {MAX_ELEMENTS} elements",
                    owner(e)
                ));
            }
        }
        errs.finish()
    }

    /// The graph as JSON in TVM's layout (key order in the module docs), one node, head
    /// and attribute per line. [`GraphJson::parse`] reads it back to an equal value.
    pub fn to_json(&self) -> String {
        fn compact(v: &impl Serialize) -> String {
            serde_json::to_string(v).expect("graph JSON values always serialize")
        }
        fn lines(out: &mut String, items: impl ExactSizeIterator<Item = String>) {
            let n = items.len();
            if n == 0 {
                out.push_str("[]");
                return;
            }
            out.push_str("[\n");
            for (i, item) in items.enumerate() {
                out.push_str("    ");
                out.push_str(&item);
                out.push_str(if i + 1 < n { ",\n" } else { "\n" });
            }
            out.push_str("  ]");
        }
        let mut out = String::from("{\n  \"nodes\": ");
        lines(&mut out, self.nodes.iter().map(compact));
        out.push_str(",\n  \"arg_nodes\": ");
        out.push_str(&compact(&self.arg_nodes));
        out.push_str(",\n  \"heads\": ");
        lines(&mut out, self.heads.iter().map(compact));
        out.push_str(",\n  \"attrs\": {\n");
        let attrs = self.attrs.items();
        let n = attrs.len();
        for (i, (k, v)) in attrs.iter().enumerate() {
            out.push_str(&format!("    {}: {}", compact(k), compact(v)));
            out.push_str(if i + 1 < n { ",\n" } else { "\n" });
        }
        out.push_str("  },\n  \"node_row_ptr\": ");
        out.push_str(&compact(&self.node_row_ptr));
        out.push_str("\n}\n");
        out
    }
}

impl fmt::Display for GraphJson {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_json())
    }
}

/// Validation problems, collected so one run reports all of them.
#[derive(Default)]
struct Problems(Vec<String>);

impl Problems {
    /// The most problems listed in one error; the rest are counted.
    const SHOWN: usize = 20;

    fn push(&mut self, p: String) {
        self.0.push(p);
    }

    fn finish(self) -> Result<()> {
        match self.0.len() {
            0 => Ok(()),
            1 => Err(Error::InvalidGraph(self.0[0].clone())),
            n => {
                let mut msg = format!("{n} problems:");
                for p in self.0.iter().take(Self::SHOWN) {
                    msg.push_str("\n  - ");
                    msg.push_str(p);
                }
                if n > Self::SHOWN {
                    msg.push_str(&format!("\n  ... and {} more", n - Self::SHOWN));
                }
                Err(Error::InvalidGraph(msg))
            }
        }
    }
}
