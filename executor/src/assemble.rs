//! The back half of a build: an optimized graph-IR module (its constants already lifted
//! to params, every op call inside a primitive function or loose) and its params in; a
//! [`CompiledModule`] out (graph JSON in TVM's layout, the kernel library, the params).
//! [`assemble`] is one short function read top to bottom: cut `@main` into kernel calls,
//! lower each call under the backend's schedule kind, plan memory, compile the kernels on
//! the backend, prepare the executor layout — each step timed into a [`BuildLog`]. The
//! front half (verify, bind params, optimize, lift constants) is the `kiln` crate's
//! `build`, which owns the graph optimizer; this crate does not depend on it.
//!
//! Graph construction (`graph_of_main`) follows TVM's graph codegen: a placeholder per
//! parameter of `@main` in order, then one kernel call per call of a primitive function
//! (what `FuseOps` makes of every op call, fused or not; a loose op call is wrapped into
//! a primitive function of its own), each lowered from a module holding that function
//! alone; tuples and tuple-gets are not kernels, they only regroup entries, and a
//! function with a tuple result (`split`, `nn.batch_norm`) is one call with one output
//! per field.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use kiln_ir::{Callee, ExprId, ExprKind, FnAttrs, Module, NDArray, Type};
use kiln_te::tir::{self, PrimFunc};
use kiln_te::topi::ScheduleKind;
use kiln_te::topi::lower::{kernel_name, lower_function};

use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::graph_json::{EntryRef, GraphAttrs, GraphJson, Node, NodeOp};
use crate::module::{CompiledModule, Program};
use crate::plan::{Layout, plan_memory};
use crate::target::Target;

/// Named tensors bound to `@main`'s parameters by name (weights).
pub type Params = BTreeMap<String, NDArray>;

/// Compiles `optimized` (what the graph optimizer left: see the module docs) with its
/// `params` for `target` on `backend`; the steps are timed into `log`, which the module
/// keeps as its build log.
pub fn assemble(
    optimized: &Module,
    params: Params,
    target: &Target,
    backend: &dyn Backend,
    mut log: BuildLog,
) -> Result<CompiledModule> {
    if !backend.supports(target) {
        return Err(Error::Unsupported(format!(
            "backend `{}` does not compile for target `{target}`",
            backend.name()
        )));
    }
    let target = &target.clone().check_options(backend.options())?;
    let graph = log.step("graph", || graph_of_main(optimized, params))?;
    let kernels = log.step("lower", || {
        lower_calls(&graph.calls, backend.schedule_kind(target))
    })?;
    let json = log.step("plan memory", || graph.to_json())?;
    let library = log.step("compile", || backend.compile(target, &kernels))?;
    let layout = log.step("prepare", || {
        Layout::new(
            &json,
            &|n| graph.params.contains_key(n),
            Some(&kernels),
            false,
        )
    })?;
    Ok(CompiledModule::new(
        json,
        target.clone(),
        graph.params,
        Program::Kernels { kernels, library },
        layout,
        log.steps,
    ))
}

/// `ref`: the same graph JSON and params, but `run` evaluates `optimized` (its `@main`
/// taking the graph's inputs and params) in the graph-IR reference interpreter; nothing
/// is lowered or compiled.
pub fn assemble_reference(
    optimized: Module,
    params: Params,
    target: &Target,
    mut log: BuildLog,
) -> Result<CompiledModule> {
    let graph = log.step("graph", || graph_of_main(&optimized, params))?;
    let json = log.step("plan memory", || graph.to_json())?;
    let layout = Layout::new(&json, &|n| graph.params.contains_key(n), None, false)?;
    Ok(CompiledModule::new(
        json,
        target.clone(),
        graph.params,
        Program::Reference(Arc::new(optimized)),
        layout,
        log.steps,
    ))
}

/// Timings of the build steps, in order: what [`CompiledModule::build_log`] shows.
#[derive(Clone, Debug, Default)]
pub struct BuildLog {
    steps: Vec<(String, f64)>,
}

impl BuildLog {
    /// Runs one named step, recording its time in milliseconds.
    pub fn step<T, E>(&mut self, name: &str, f: impl FnOnce() -> Result<T, E>) -> Result<T, E> {
        let t = Instant::now();
        let out = f()?;
        self.steps
            .push((name.to_string(), t.elapsed().as_secs_f64() * 1e3));
        Ok(out)
    }

    /// The steps so far and their times in milliseconds.
    pub fn steps(&self) -> &[(String, f64)] {
        &self.steps
    }
}

/// A value of `@main` while the graph is built: one entry, or a tuple of values.
#[derive(Clone, Debug)]
enum Val {
    Entry(EntryRef),
    Tuple(Vec<Val>),
}

impl Val {
    fn flatten(&self, out: &mut Vec<EntryRef>) {
        match self {
            Val::Entry(e) => out.push(*e),
            Val::Tuple(vs) => vs.iter().for_each(|v| v.flatten(out)),
        }
    }
}

/// Rebuilds a value of type `ty` from consecutive outputs of node `node`.
fn regroup(ty: &Type, node: u32, next: &mut u32) -> Val {
    match ty {
        Type::Tuple(fields) => Val::Tuple(fields.iter().map(|f| regroup(f, node, next)).collect()),
        _ => {
            *next += 1;
            Val::Entry(EntryRef {
                node,
                index: *next - 1,
                version: 0,
            })
        }
    }
}

/// A kernel call to lower: the function to lower and the name of its kernel.
pub(crate) struct KernelCall {
    name: String,
    /// The module holding `func` alone (extracted from the model, or made for a loose op
    /// call).
    module: Arc<Module>,
    func: ExprId,
}

/// The graph of `@main` before memory planning.
pub(crate) struct Graph {
    nodes: Vec<Node>,
    /// Per entry: shape and dtype name.
    entries: Vec<(Vec<i64>, String)>,
    node_row_ptr: Vec<u32>,
    arg_nodes: Vec<u32>,
    heads: Vec<EntryRef>,
    calls: Vec<KernelCall>,
    /// The params the graph reads (given ones and constants).
    params: Params,
}

impl Graph {
    fn add_node(&mut self, node: Node, outputs: &[&kiln_ir::TensorType]) -> u32 {
        let nid = self.nodes.len() as u32;
        if node.op == NodeOp::Null {
            self.arg_nodes.push(nid);
        }
        self.nodes.push(node);
        for t in outputs {
            self.entries.push((
                t.shape.iter().map(|&d| d as i64).collect(),
                t.dtype.name().to_string(),
            ));
        }
        self.node_row_ptr.push(self.entries.len() as u32);
        nid
    }

    /// The graph JSON, with storage planned and validated.
    fn to_json(&self) -> Result<GraphJson> {
        let mut json = GraphJson {
            nodes: self.nodes.clone(),
            arg_nodes: self.arg_nodes.clone(),
            heads: self.heads.clone(),
            attrs: GraphAttrs {
                storage_id: vec![0; self.entries.len()],
                dltype: self.entries.iter().map(|(_, d)| d.clone()).collect(),
                shape: self.entries.iter().map(|(s, _)| s.clone()).collect(),
                ..GraphAttrs::default()
            },
            node_row_ptr: self.node_row_ptr.clone(),
        };
        json.validate()
            .map_err(|e| Error::Internal(format!("build made an invalid graph: {e}")))?;
        json.attrs.storage_id = plan_memory(&json, false)?;
        Ok(json)
    }
}

fn placeholder(name: &str) -> Node {
    Node {
        op: NodeOp::Null,
        name: name.to_string(),
        attrs: BTreeMap::new(),
        inputs: vec![],
    }
}

/// Cuts `@main` of `m` into placeholders and kernel calls (see the module docs), binding
/// `params` (already checked against `@main`, see [`bind_params`]) by name.
pub(crate) fn graph_of_main(m: &Module, mut params: Params) -> Result<Graph> {
    let main = m.main()?;
    let mut g = Graph {
        nodes: vec![],
        entries: vec![],
        node_row_ptr: vec![0],
        arg_nodes: vec![],
        heads: vec![],
        calls: vec![],
        params: Params::new(),
    };
    let names: Vec<&str> = main
        .params
        .iter()
        .map(|&p| m.var_name(p).unwrap_or(""))
        .collect();
    if let Some(name) = params.keys().find(|n| !names.contains(&n.as_str())) {
        return Err(Error::Internal(format!(
            "param `{name}` is not a parameter of the optimized @main"
        )));
    }
    let mut env: HashMap<ExprId, Val> = HashMap::new();
    let mut taken: HashSet<String> = HashSet::new();
    for (&p, &name) in main.params.iter().zip(&names) {
        let Some(t) = m.ty(p).as_tensor() else {
            return Err(Error::Unsupported(format!(
                "parameter %{name} of @main has type {}; graph inputs must be tensors",
                m.ty(p)
            )));
        };
        if !taken.insert(name.to_string()) {
            return Err(Error::Unsupported(format!(
                "two parameters of @main are named %{name}; graph inputs are bound by name"
            )));
        }
        if let Some(v) = params.remove(name) {
            g.params.insert(name.to_string(), v);
        }
        let nid = g.add_node(placeholder(name), &[t]);
        env.insert(
            p,
            Val::Entry(EntryRef {
                node: nid,
                index: 0,
                version: 0,
            }),
        );
    }
    let mut kernel_counts: HashMap<String, usize> = HashMap::new();
    for id in kiln_ir::visit::body_order(m, main.body) {
        if env.contains_key(&id) {
            continue;
        }
        let val = match m.kind(id) {
            ExprKind::Var { name } => {
                return Err(Error::InvalidArgument(format!(
                    "%{name} is used in @main but is not one of its parameters"
                )));
            }
            ExprKind::Constant(_) => {
                return Err(Error::Internal(format!(
                    "constant {id} is still in @main after its constants were lifted to params"
                )));
            }
            ExprKind::Tuple(fields) => Val::Tuple(
                fields
                    .iter()
                    .map(|f| value(&env, *f))
                    .collect::<Result<_>>()?,
            ),
            ExprKind::TupleGetItem { tuple, index } => match value(&env, *tuple)? {
                Val::Tuple(mut vs) if *index < vs.len() => vs.swap_remove(*index),
                _ => {
                    return Err(Error::Internal(format!(
                        "tuple_get_item {index} of {tuple}, which is not a tuple that long"
                    )));
                }
            },
            ExprKind::Call { callee, args } => {
                let (module, func) = match callee {
                    Callee::Op(op) => one_op_function(m, op, args)?,
                    Callee::Expr(f) if matches!(m.kind(*f), ExprKind::Function(_)) => {
                        let (k, kf) = kiln_ir::visit::extract(m, *f);
                        (Arc::new(k), kf)
                    }
                    Callee::Expr(f) => {
                        return Err(Error::Unsupported(format!(
                            "call {id} of {f}, which is not a function literal; inline \
                             global functions before building"
                        )));
                    }
                };
                let base = kernel_name(&module, func)?;
                let count = kernel_counts.entry(base.clone()).or_insert(0);
                let name = if *count == 0 {
                    base
                } else {
                    format!("{base}_{count}")
                };
                *count += 1;
                let mut inputs = vec![];
                for a in args {
                    value(&env, *a)?.flatten(&mut inputs);
                }
                let out_ty = m.ty(id);
                let outputs = out_ty.flatten_tensors();
                let mut attrs = BTreeMap::new();
                attrs.insert("func_name".to_string(), name.clone());
                attrs.insert("num_inputs".to_string(), inputs.len().to_string());
                attrs.insert("num_outputs".to_string(), outputs.len().to_string());
                attrs.insert("flatten_data".to_string(), "0".to_string());
                let node = Node {
                    op: NodeOp::TvmOp,
                    name: name.clone(),
                    attrs,
                    inputs,
                };
                let nid = g.add_node(node, &outputs);
                g.calls.push(KernelCall { name, module, func });
                regroup(out_ty, nid, &mut 0)
            }
            // A function literal is a callee (lowered at its call); used as a value, it
            // has no entry and `value` refuses it.
            ExprKind::Function(_) | ExprKind::GlobalVar(_) => continue,
        };
        env.insert(id, val);
    }
    value(&env, main.body)?.flatten(&mut g.heads);
    Ok(g)
}

/// The value of `id`, already built (children come first in body order).
fn value(env: &HashMap<ExprId, Val>, id: ExprId) -> Result<Val> {
    env.get(&id).cloned().ok_or_else(|| {
        Error::Unsupported(format!(
            "{id} is a function value in @main; the graph executor passes tensors only"
        ))
    })
}

/// A module holding `fn(%p0, %p1, ...) { op(%p0, %p1, ...) }` with the argument types of
/// `args` (named after the arguments where they are variables).
fn one_op_function(m: &Module, op: &kiln_ir::Op, args: &[ExprId]) -> Result<(Arc<Module>, ExprId)> {
    let mut k = Module::new();
    let mut used = HashSet::new();
    let params: Vec<ExprId> = args
        .iter()
        .enumerate()
        .map(|(i, &a)| {
            let name = match m.var_name(a) {
                Some(n) if used.insert(n.to_string()) => n.to_string(),
                _ => format!("p{i}"),
            };
            used.insert(name.clone());
            k.var(name, m.ty(a).clone())
        })
        .collect();
    let call = k.call(op.clone(), &params)?;
    let f = k.function(&params, call, FnAttrs { primitive: true })?;
    Ok((Arc::new(k), f))
}

/// Lowers every call to its kernel, in order, and verifies each.
fn lower_calls(calls: &[KernelCall], kind: ScheduleKind) -> Result<Vec<PrimFunc>> {
    calls
        .iter()
        .map(|c| {
            let k = lower_function(&c.module, c.func, kind, &c.name).map_err(|e| match e {
                kiln_te::Error::Unsupported(msg) => {
                    Error::Unsupported(format!("kernel @{}: {msg}", c.name))
                }
                other => Error::Internal(format!("lowering kernel @{}: {other}", c.name)),
            })?;
            // Kernels kiln lowers itself are trusted with any size; limits are for files.
            tir::verify_with(&k, &tir::Limits::unlimited())
                .map_err(|e| Error::Internal(format!("kernel @{} fails to verify: {e}", c.name)))?;
            Ok(k)
        })
        .collect()
}
