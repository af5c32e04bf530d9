//! The debug executor (TVM's `debug_executor`): the graph executor over a memory plan that
//! keeps every intermediate tensor in storage of its own, so after a run every node's
//! output can be read ([`DebugExecutor::debug_get_output`]) or dumped to `.npy`
//! ([`DebugExecutor::dump_outputs`]), and each kernel call can be timed alone
//! ([`DebugExecutor::profile`], a table of node index, kernel, time in µs, share,
//! shape; by the device's timer where the library offers one, else the host clock).
//!
//! Everything else (inputs, params, outputs) is the wrapped [`GraphExecutor`]'s API,
//! reached through `Deref`.

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use kiln_ir::NDArray;

use crate::backend::Clock;
use crate::error::{Error, Result};
use crate::executor::GraphExecutor;
use crate::graph_json::GraphJson;
use crate::module::{CompiledModule, Program};
use crate::plan::Layout;

/// A graph executor that keeps every intermediate and times every node.
#[derive(Debug)]
pub struct DebugExecutor {
    exec: GraphExecutor,
    graph: Arc<GraphJson>,
}

/// One row of a [`Profile`]: one kernel call.
#[derive(Clone, Debug, PartialEq)]
pub struct ProfileRow {
    /// The node's index in the graph.
    pub node: usize,
    /// The node's name.
    pub name: String,
    /// The kernel it calls.
    pub kernel: String,
    /// Mean time of one call, in microseconds.
    pub time_us: f64,
    /// Share of the total time, in percent.
    pub percent: f64,
    /// The shape of each output.
    pub shapes: Vec<Vec<usize>>,
}

/// Per-node times of one profiling run (TVM's debug executor table).
#[derive(Clone, Debug, PartialEq)]
pub struct Profile {
    /// One row per kernel call, in graph order.
    pub rows: Vec<ProfileRow>,
    /// The sum of the rows' times, in microseconds.
    pub total_us: f64,
    /// What measured the times: the device's timer, or the host clock.
    pub clock: Clock,
}

/// One column per fact: the node's index in the graph JSON, its name only where some
/// node's name differs from the kernel it calls (kiln names a node after its kernel),
/// the kernel, the mean time in µs, the share, the output shapes.
impl fmt::Display for Profile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let width = |header: &str, cell: &dyn Fn(&ProfileRow) -> usize| {
            self.rows
                .iter()
                .map(cell)
                .max()
                .unwrap_or(0)
                .max(header.len())
        };
        let nw = width("Total", &|r| r.node.to_string().len());
        let named = self.rows.iter().any(|r| r.name != r.kernel);
        let name_col = |name: &str| {
            if named {
                let w = width("Name", &|r| r.name.len());
                format!("{name:<w$}  ")
            } else {
                String::new()
            }
        };
        let kw = width("Kernel", &|r| r.kernel.len());
        writeln!(
            f,
            "{:<nw$}  {}{:<kw$}  {:>12}  {:>7}  Shape",
            "Node",
            name_col("Name"),
            "Kernel",
            "Time(us)",
            "Time(%)"
        )?;
        for r in &self.rows {
            let shapes: Vec<String> = r.shapes.iter().map(|s| format!("{s:?}")).collect();
            writeln!(
                f,
                "{:<nw$}  {}{:<kw$}  {:>12.3}  {:>7.2}  {}",
                r.node,
                name_col(&r.name),
                r.kernel,
                r.time_us,
                r.percent,
                shapes.join(", ")
            )?;
        }
        write!(
            f,
            "{:<nw$}  {}{:<kw$}  {:>12.3}  {:>7.2}",
            "Total",
            name_col(""),
            "",
            self.total_us,
            100.0
        )
    }
}

impl DebugExecutor {
    /// A debug executor over `module`, with a plan that keeps every intermediate.
    pub fn new(module: &CompiledModule) -> Result<DebugExecutor> {
        let Program::Kernels { kernels, .. } = &module.program else {
            return Err(Error::Unsupported(
                "the debug executor times kernels; the `ref` target has none".into(),
            ));
        };
        let params = module.params.clone();
        let layout = Layout::new(
            &module.graph,
            &|n| params.contains_key(n),
            Some(kernels),
            true,
        )?;
        Ok(DebugExecutor {
            exec: GraphExecutor::with_layout(module, Arc::new(layout))?,
            graph: module.graph.clone(),
        })
    }

    /// Runs every kernel call `number` times in turn (after one untimed run of the whole
    /// graph) and reports each one's mean time: the device's measurement of the calls
    /// where the library offers one ([`crate::KernelLibrary::begin_timing`]), else the
    /// host clock around them.
    pub fn profile(&mut self, number: usize) -> Result<Profile> {
        let number = number.max(1);
        self.exec.run()?;
        self.exec.synchronize()?;
        let calls = self.exec.layout().calls.clone();
        let library = self.exec.library();
        let mut clock = Clock::Host;
        let mut rows = Vec::with_capacity(calls.len());
        for (c, call) in calls.iter().enumerate() {
            let timing = library.as_ref().is_some_and(|l| l.begin_timing());
            let t = Instant::now();
            for _ in 0..number {
                self.exec.run_call(c)?;
            }
            self.exec.synchronize()?;
            let host_us = t.elapsed().as_secs_f64() * 1e6 / number as f64;
            let device = match (&library, timing) {
                (Some(l), true) => l.end_timing()?,
                _ => None,
            };
            let time_us = match device {
                Some(times) => {
                    if times.calls.len() != number {
                        return Err(Error::Internal(format!(
                            "the device timed {} call(s) of node {}, {number} were made",
                            times.calls.len(),
                            call.node
                        )));
                    }
                    clock = Clock::Device(times.clock);
                    times.calls.iter().map(|(_, s)| s).sum::<f64>() * 1e6 / number as f64
                }
                None => host_us,
            };
            let node = &self.graph.nodes[call.node];
            let first = self.graph.node_row_ptr[call.node] as usize;
            let last = self.graph.node_row_ptr[call.node + 1] as usize;
            rows.push(ProfileRow {
                node: call.node,
                name: node.name.clone(),
                kernel: node.func_name().unwrap_or_default().to_string(),
                time_us,
                percent: 0.0,
                shapes: (first..last)
                    .map(|e| self.exec.layout().entries[e].shape.clone())
                    .collect(),
            });
        }
        let total_us: f64 = rows.iter().map(|r| r.time_us).sum();
        for r in &mut rows {
            r.percent = if total_us > 0.0 {
                100.0 * r.time_us / total_us
            } else {
                0.0
            };
        }
        Ok(Profile {
            rows,
            total_us,
            clock,
        })
    }

    /// Output `index` of node `node` after the last run.
    pub fn debug_get_output(&self, node: usize, index: usize) -> Result<NDArray> {
        let count = self.graph.nodes.len();
        let n = self.graph.nodes.get(node).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "node {node} is out of range: the graph has {count} nodes"
            ))
        })?;
        let first = self.graph.node_row_ptr[node] as usize;
        let outputs = self.graph.node_row_ptr[node + 1] as usize - first;
        if index >= outputs {
            return Err(Error::InvalidArgument(format!(
                "node {node} `{}` has {outputs} output(s), not {}",
                n.name,
                index + 1
            )));
        }
        self.exec.entry_value(first + index)
    }

    /// Writes every node's outputs after the last run to `dir` as `.npy` files named
    /// `{node index}_{node name}_{output}.npy`, and returns their paths in graph order.
    pub fn dump_outputs(&self, dir: impl AsRef<Path>) -> Result<Vec<PathBuf>> {
        let dir = dir.as_ref();
        std::fs::create_dir_all(dir).map_err(|source| Error::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        let mut paths = vec![];
        for (nid, node) in self.graph.nodes.iter().enumerate() {
            let outputs =
                (self.graph.node_row_ptr[nid + 1] - self.graph.node_row_ptr[nid]) as usize;
            let safe: String = node
                .name
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                        c
                    } else {
                        '_'
                    }
                })
                .collect();
            for i in 0..outputs {
                let path = dir.join(format!("{nid:04}_{safe}_{i}.npy"));
                self.debug_get_output(nid, i)?.write_npy(&path)?;
                paths.push(path);
            }
        }
        Ok(paths)
    }
}

impl Deref for DebugExecutor {
    type Target = GraphExecutor;
    fn deref(&self) -> &GraphExecutor {
        &self.exec
    }
}

impl DerefMut for DebugExecutor {
    fn deref_mut(&mut self) -> &mut GraphExecutor {
        &mut self.exec
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(node: usize, name: &str, kernel: &str, time_us: f64) -> ProfileRow {
        ProfileRow {
            node,
            name: name.into(),
            kernel: kernel.into(),
            time_us,
            percent: 100.0 * time_us / 4.0,
            shapes: vec![vec![1, 10]],
        }
    }

    #[test]
    fn the_table_says_each_fact_once() {
        let profile = Profile {
            rows: vec![
                row(1, "fused_dense", "fused_dense", 3.0),
                row(12, "fused_relu", "fused_relu", 1.0),
            ],
            total_us: 4.0,
            clock: Clock::Host,
        };
        let text = profile.to_string();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0].split_whitespace().collect::<Vec<_>>(),
            ["Node", "Kernel", "Time(us)", "Time(%)", "Shape"]
        );
        assert_eq!(
            lines[1].split_whitespace().collect::<Vec<_>>(),
            ["1", "fused_dense", "3.000", "75.00", "[1,", "10]"]
        );
        assert_eq!(text.matches("fused_relu").count(), 1, "{text}");
        assert!(lines[3].starts_with("Total"), "{text}");

        // A node named apart from its kernel gets a Name column.
        let profile = Profile {
            rows: vec![row(3, "dense_a", "fused_dense", 4.0)],
            total_us: 4.0,
            clock: Clock::Host,
        };
        let text = profile.to_string();
        assert_eq!(
            text.lines()
                .next()
                .unwrap()
                .split_whitespace()
                .collect::<Vec<_>>(),
            ["Node", "Name", "Kernel", "Time(us)", "Time(%)", "Shape"]
        );
        assert_eq!(
            text.lines()
                .nth(1)
                .unwrap()
                .split_whitespace()
                .collect::<Vec<_>>(),
            [
                "3",
                "dense_a",
                "fused_dense",
                "4.000",
                "100.00",
                "[1,",
                "10]"
            ]
        );
    }
}
