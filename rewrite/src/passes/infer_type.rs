//! `InferType` (level 0): re-derives the type of every node by rebuilding each global
//! function into a fresh module through the typed builders (`Module::call`, `tuple`,
//! `tuple_get`, `function`, `call_function`), so every op's type rule runs again. The IR
//! types eagerly, so on a sound module this changes nothing but the arena (which comes out
//! compact); a node whose stored type was wrong (pushed unchecked by a buggy pass) gets
//! its derived type, and the pass reports how many did (`retyped`). [`rebuild_fresh`] is
//! also the copying step of `DeadCodeElimination`.

use std::collections::{HashMap, HashSet};

use kiln_ir::visit::post_order;
use kiln_ir::{Callee, ExprId, ExprKind, Module, Type};

use crate::error::Result;
use crate::pass::{Pass, PassContext, PassInfo, PassOutcome};

/// Relay's `InferType`.
#[derive(Clone, Copy, Debug, Default)]
pub struct InferType;

impl Pass for InferType {
    fn info(&self) -> PassInfo {
        PassInfo {
            name: "InferType",
            opt_level: 0,
        }
    }

    fn run(&self, module: &Module, _ctx: &PassContext) -> Result<PassOutcome> {
        let names: Vec<String> = module.globals().iter().map(|(n, _)| n.clone()).collect();
        let (out, retyped) = rebuild_fresh(module, &names)?;
        Ok(PassOutcome::new(out).detail("retyped", retyped))
    }
}

/// A fresh module holding the globals `names` of `m` (in `m`'s definition order) and
/// only the nodes they reach, every node re-typed by the builders. Also returns how many
/// nodes got a type different from the one stored in `m`. Global references are typed
/// with the rebuilt function's type when that function is rebuilt first (callees are
/// rebuilt before callers), else with the stored type.
pub(crate) fn rebuild_fresh(m: &Module, names: &[String]) -> Result<(Module, usize)> {
    let mut b = Rebuilder {
        src: m,
        out: Module::new(),
        map: HashMap::new(),
        functions: HashMap::new(),
        visiting: HashSet::new(),
        retyped: 0,
    };
    for name in names {
        b.global(name)?;
    }
    let mut out = b.out;
    for (name, _) in m.globals() {
        if let Some(&f) = b.functions.get(name) {
            out.define(name, f)?;
        }
    }
    Ok((out, b.retyped))
}

struct Rebuilder<'m> {
    src: &'m Module,
    out: Module,
    map: HashMap<ExprId, ExprId>,
    /// Rebuilt globals: name -> function node in `out`.
    functions: HashMap<String, ExprId>,
    /// Globals being rebuilt (a reference back to one of them is recursion).
    visiting: HashSet<String>,
    retyped: usize,
}

impl Rebuilder<'_> {
    fn global(&mut self, name: &str) -> Result<()> {
        if self.functions.contains_key(name) || !self.visiting.insert(name.to_string()) {
            return Ok(());
        }
        let f = self.src.global_id(name).ok_or_else(|| {
            kiln_ir::Error::InvalidModel(format!("unknown global function @{name}"))
        })?;
        let order = post_order(self.src, f);
        // Callees first, so their references get the rebuilt type.
        for &id in &order {
            if let ExprKind::GlobalVar(g) = self.src.kind(id) {
                self.global(g)?;
            }
        }
        for id in order {
            if !self.map.contains_key(&id) {
                let new = self.node(id)?;
                if self.out.ty(new) != self.src.ty(id) {
                    self.retyped += 1;
                }
                self.map.insert(id, new);
            }
        }
        self.functions.insert(name.to_string(), self.map[&f]);
        self.visiting.remove(name);
        Ok(())
    }

    fn node(&mut self, id: ExprId) -> Result<ExprId> {
        let get = |c: &ExprId| self.map[c];
        let out = &mut self.out;
        Ok(match self.src.kind(id) {
            ExprKind::Var { name } => out.var(name.clone(), self.src.ty(id).clone()),
            ExprKind::Constant(value) => {
                let ty = Type::Tensor(value.ty());
                out.push_unchecked(ExprKind::Constant(value.clone()), ty)
            }
            ExprKind::Call {
                callee: Callee::Op(op),
                args,
            } => {
                let args: Vec<ExprId> = args.iter().map(get).collect();
                out.call(op.clone(), &args)?
            }
            ExprKind::Call {
                callee: Callee::Expr(f),
                args,
            } => {
                let args: Vec<ExprId> = args.iter().map(get).collect();
                out.call_function(get(f), &args)?
            }
            ExprKind::Tuple(fields) => {
                let fields: Vec<ExprId> = fields.iter().map(get).collect();
                out.tuple(&fields)?
            }
            ExprKind::TupleGetItem { tuple, index } => out.tuple_get(get(tuple), *index)?,
            ExprKind::Function(f) => {
                let params: Vec<ExprId> = f.params.iter().map(get).collect();
                out.function(&params, get(&f.body), f.attrs.clone())?
            }
            ExprKind::GlobalVar(name) => {
                let ty = match self.functions.get(name) {
                    Some(&f) => out.ty(f).clone(),
                    None => self.src.ty(id).clone(),
                };
                out.push_unchecked(ExprKind::GlobalVar(name.clone()), ty)
            }
        })
    }
}
