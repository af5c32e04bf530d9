//! `build()`: a graph-IR module, a target and params in; a [`CompiledModule`] out (graph
//! JSON in TVM's layout, the kernel library, the params). The whole pipeline is
//! [`build_on`], one short function read top to bottom: verify, bind params, optimize
//! (the graph optimizer), lift constants back to params — then the runtime's
//! [`assemble`] cuts the graph, lowers every kernel under the backend's schedule kind,
//! plans memory and compiles on the backend the registry names. Each step is timed into
//! the module's build log ([`CompiledModule::build_log`]); the optimizer's per-pass report
//! comes back beside the module ([`Built::report`]).
//!
//! Params are bound into `@main` as constants before optimizing (Relay's
//! `bind_params_by_name`), so passes can fold them; after optimizing, the constants left
//! in `@main` become graph params again: a param the passes left untouched keeps its
//! name, a new constant is named `p0`, `p1`, ... (`lift_constants`).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use kiln_executor::{
    Backend, BuildLog, CompiledModule, Params, Target, TargetKind, assemble, assemble_reference,
};
use kiln_ir::{ExprId, ExprKind, Module, NDArray};
use kiln_rewrite::{PassContext, PassReport};

use crate::error::{Error, Result};
use crate::registry::Registry;

/// Builds `module` for `target` (a target string such as `cpu` or `cpu -threads=2`)
/// with `params` bound by name, on the backend the built-in [`Registry`] names for the
/// target. `opts` is a [`PassContext`] or just an opt level (`0..=3`).
///
/// A name in `params` that is no parameter of `@main` is an error; a parameter of
/// `@main` that `params` does not name stays a graph input, to be set before each run
/// (the executor's `run` refuses while one is unset, naming it). [`Registry::build`]
/// returns a [`Built`] whose [`Built::unbound`] names those parameters right away — the
/// place to see a weight missing from `params`.
pub fn build(
    module: &Module,
    target: &str,
    params: &Params,
    opts: impl Into<PassContext>,
) -> Result<CompiledModule> {
    Ok(Registry::builtin()
        .build(module, target, params, opts)?
        .module)
}

/// A built module and what the graph optimizer did to get there; reads as the module
/// itself (`built.create_executor()`).
#[derive(Clone, Debug)]
pub struct Built {
    /// The runnable module.
    pub module: CompiledModule,
    /// What each pass did.
    pub report: PassReport,
    /// The parameters of `@main` that the params left unbound, in `@main`'s order: the
    /// graph inputs, set before each run. A weight missing from the params is named here.
    pub unbound: Vec<String>,
}

impl Built {
    /// What the graph optimizer did, pass by pass.
    pub fn pass_report(&self) -> &PassReport {
        &self.report
    }

    /// The parameters of `@main` that the params left unbound: the graph inputs (see
    /// [`Built::unbound`]).
    pub fn unbound_params(&self) -> &[String] {
        &self.unbound
    }
}

impl std::ops::Deref for Built {
    type Target = CompiledModule;
    fn deref(&self) -> &CompiledModule {
        &self.module
    }
}

/// The pipeline (see the module docs) for a parsed `target` on `backend` (`None`: the
/// `ref` target, run by the graph-IR reference interpreter, nothing compiled).
pub fn build_on(
    module: &Module,
    target: &Target,
    backend: Option<&dyn Backend>,
    params: &Params,
    opts: impl Into<PassContext>,
) -> Result<Built> {
    if backend.is_none() && *target.kind() != TargetKind::Ref {
        return Err(Error::UnknownTarget(format!(
            "target `{target}` compiles kernels and needs its backend; only `ref` builds \
             without one"
        )));
    }
    let mut log = BuildLog::default();
    let opt = optimize_steps(module, params, &opts.into(), &mut log)?;
    let unbound = unbound_params(module, params)?;
    let module = match backend {
        Some(backend) => assemble(&opt.module, opt.params, target, backend, log)?,
        None => assemble_reference(opt.module, opt.params, target, log)?,
    };
    Ok(Built {
        module,
        report: opt.report,
        unbound,
    })
}

/// The names of `@main`'s parameters that `params` does not bind, in order.
fn unbound_params(module: &Module, params: &Params) -> Result<Vec<String>> {
    let main = module.main()?;
    Ok(main
        .params
        .iter()
        .filter_map(|&p| module.var_name(p))
        .filter(|name| !params.contains_key(*name))
        .map(str::to_string)
        .collect())
}

/// The graph-level half of a build: the optimized module, its params, the pass report.
pub struct Optimized {
    /// The module after the passes, its constants lifted to `@main` parameters: `@main`
    /// takes the model's inputs, then its params.
    pub module: Module,
    /// Values of the params of `module` (given weights by their names, folded constants
    /// as `p0`, `p1`, ...).
    pub params: Params,
    /// What each pass did.
    pub report: PassReport,
}

/// What [`build()`] does before it cuts the graph, for tools that show it (`kiln inspect
/// --emit opt`): verify, bind `params`, optimize under `opts`, lift constants back to
/// params.
pub fn optimize(
    module: &Module,
    params: &Params,
    opts: impl Into<PassContext>,
) -> Result<Optimized> {
    optimize_steps(module, params, &opts.into(), &mut BuildLog::default())
}

/// [`optimize`], each step timed into `log`.
fn optimize_steps(
    module: &Module,
    params: &Params,
    ctx: &PassContext,
    log: &mut BuildLog,
) -> Result<Optimized> {
    let module = log.step("verify", || check_module(module))?;
    let (module, names) = log.step("bind params", || bind_params(&module, params))?;
    let (module, report) = log.step("optimize", || kiln_rewrite::optimize(&module, ctx))?;
    let (module, params) = log.step("lift constants", || lift_constants(&module, &names))?;
    Ok(Optimized {
        module,
        params,
        report,
    })
}

/// The module after the graph-IR verifier, so bad models fail before lowering.
fn check_module(module: &Module) -> Result<Module> {
    kiln_ir::verify::verify(module)?;
    Ok(module.clone())
}

/// Where a bound param came from: its constant's data, by address, to its name.
type BoundNames = HashMap<*const NDArray, String>;

/// `module` with every param in `params` bound into `@main` as a constant (Relay's
/// `bind_params_by_name`, [`kiln_rewrite::passes::bind_params`]), and the names of the
/// bound constants.
fn bind_params(module: &Module, params: &Params) -> Result<(Module, BoundNames)> {
    let (m, bound) = kiln_rewrite::passes::bind_params_to_constants(module, params)?;
    let mut names = BoundNames::new();
    for (name, c) in bound {
        if let ExprKind::Constant(data) = m.kind(c) {
            names.insert(Arc::as_ptr(data), name);
        }
    }
    Ok((m, names))
}

/// Rebuilds the nodes `@main`'s body evaluates (not entering function literals, which
/// are closed) over `map`; returns the new body.
fn rebuild_body(m: &mut Module, body: ExprId, map: &mut HashMap<ExprId, ExprId>) -> Result<ExprId> {
    for id in kiln_ir::visit::body_order(m, body) {
        if map.contains_key(&id) {
            continue;
        }
        let new = kiln_ir::visit::rebuild(m, id, map)?;
        if new != id {
            map.insert(id, new);
        }
    }
    Ok(*map.get(&body).unwrap_or(&body))
}

/// The inverse of [`bind_params`] after optimizing: every constant `@main` itself uses
/// (not one inside a primitive function, which the kernel takes as an immediate) becomes
/// a new parameter of `@main` and a graph param — named as the param it was bound from
/// when the passes left it untouched, else `p0`, `p1`, ... (TVM's names for constants).
fn lift_constants(module: &Module, bound: &BoundNames) -> Result<(Module, Params)> {
    let main = module.main()?.clone();
    let mut m = module.clone();
    let mut taken: HashSet<String> = main
        .params
        .iter()
        .filter_map(|&p| module.var_name(p).map(str::to_string))
        .collect();
    let mut params = Params::new();
    let mut by_data: HashMap<*const NDArray, ExprId> = HashMap::new();
    let mut map: HashMap<ExprId, ExprId> = HashMap::new();
    let mut new_params = main.params.clone();
    let mut counter = 0usize;
    for id in kiln_ir::visit::body_order(module, main.body) {
        let ExprKind::Constant(data) = module.kind(id) else {
            continue;
        };
        let key = Arc::as_ptr(data);
        if let Some(&v) = by_data.get(&key) {
            map.insert(id, v);
            continue;
        }
        let name = match bound.get(&key) {
            Some(n) if taken.insert(n.clone()) => n.clone(),
            _ => loop {
                let n = format!("p{counter}");
                counter += 1;
                if taken.insert(n.clone()) {
                    break n;
                }
            },
        };
        let v = m.var(name.clone(), module.ty(id).clone());
        params.insert(name, (**data).clone());
        by_data.insert(key, v);
        map.insert(id, v);
        new_params.push(v);
    }
    if map.is_empty() {
        return Ok((m, params));
    }
    let body = rebuild_body(&mut m, main.body, &mut map)?;
    m.set_main(&new_params, body)?;
    Ok((m, params))
}
