//! Walking and rewriting expressions: [`post_order_visit`] (Relay's name), the
//! [`ExprVisitor`] trait with one hook per node kind, the [`ExprMutator`] that rebuilds
//! a graph bottom-up (rebuilt nodes are re-typed by the builder), [`free_vars`], and
//! [`extract`] (a subgraph copied into a module of its own).
//! Traversals are iterative, so deep graphs cannot overflow the stack, and visit each
//! shared node once.

use std::collections::{HashMap, HashSet};

use crate::error::Result;
use crate::expr::{Callee, ExprId, ExprKind, Function, Module};

/// Every node reachable from `root`, children before parents, each once. Function
/// literals are entered (their params, then body, then the function node).
pub fn post_order(m: &Module, root: ExprId) -> Vec<ExprId> {
    post_order_impl(m, root, true)
}

/// Like [`post_order`] but does not enter function literals: the nodes evaluated when
/// the body `root` runs (a nested function is listed, its body is not).
pub fn body_order(m: &Module, root: ExprId) -> Vec<ExprId> {
    post_order_impl(m, root, false)
}

fn post_order_impl(m: &Module, root: ExprId, enter_functions: bool) -> Vec<ExprId> {
    let mut order = Vec::new();
    let mut seen = HashSet::new();
    // (node, children pushed?)
    let mut stack = vec![(root, false)];
    while let Some((id, expanded)) = stack.pop() {
        if expanded {
            order.push(id);
            continue;
        }
        if !seen.insert(id) {
            continue;
        }
        stack.push((id, true));
        let kind = m.kind(id);
        if !enter_functions && matches!(kind, ExprKind::Function(_)) {
            continue;
        }
        for child in kind.children().into_iter().rev() {
            if !seen.contains(&child) {
                stack.push((child, false));
            }
        }
    }
    order
}

/// Calls `f` on every node reachable from `root` in post order (Relay's
/// `relay.analysis.post_order_visit`).
pub fn post_order_visit(m: &Module, root: ExprId, mut f: impl FnMut(ExprId)) {
    for id in post_order(m, root) {
        f(id);
    }
}

/// One hook per node kind, called in post order by [`walk`]. Every hook defaults to
/// doing nothing.
pub trait ExprVisitor {
    /// A variable `%name`.
    fn visit_var(&mut self, _m: &Module, _id: ExprId, _name: &str) {}
    /// A constant tensor (its value is `m.kind(id)`'s).
    fn visit_constant(&mut self, _m: &Module, _id: ExprId) {}
    /// A call, after its callee expression (if any) and its arguments.
    fn visit_call(&mut self, _m: &Module, _id: ExprId, _callee: &Callee, _args: &[ExprId]) {}
    /// A tuple, after its fields.
    fn visit_tuple(&mut self, _m: &Module, _id: ExprId, _fields: &[ExprId]) {}
    /// Field `index` of `tuple`, after `tuple`.
    fn visit_tuple_get_item(&mut self, _m: &Module, _id: ExprId, _tuple: ExprId, _index: usize) {}
    /// A function literal, after its parameters and body.
    fn visit_function(&mut self, _m: &Module, _id: ExprId, _f: &Function) {}
    /// A reference `@name` to a global function (not entered).
    fn visit_global(&mut self, _m: &Module, _id: ExprId, _name: &str) {}
}

/// Runs `v` over every node reachable from `root`, children first.
pub fn walk(m: &Module, root: ExprId, v: &mut impl ExprVisitor) {
    for id in post_order(m, root) {
        match m.kind(id) {
            ExprKind::Var { name } => v.visit_var(m, id, name),
            ExprKind::Constant(_) => v.visit_constant(m, id),
            ExprKind::Call { callee, args } => v.visit_call(m, id, callee, args),
            ExprKind::Tuple(fields) => v.visit_tuple(m, id, fields),
            ExprKind::TupleGetItem { tuple, index } => {
                v.visit_tuple_get_item(m, id, *tuple, *index)
            }
            ExprKind::Function(f) => v.visit_function(m, id, f),
            ExprKind::GlobalVar(name) => v.visit_global(m, id, name),
        }
    }
}

/// Rewrites a graph bottom-up. [`mutate`] first rebuilds each node over its already
/// rewritten children (reusing the node when no child changed), then hands it to
/// [`ExprMutator::rewrite`], which may return a replacement.
pub trait ExprMutator {
    /// `id` is the node with its children already rewritten; return what replaces it.
    fn rewrite(&mut self, _m: &mut Module, id: ExprId) -> Result<ExprId> {
        Ok(id)
    }
}

/// Applies `mutator` to everything reachable from `root`; returns the new root. New
/// nodes are appended to `m` through the typed builders, so a rewrite that breaks a
/// type rule is an error, not an ill-typed graph.
pub fn mutate(m: &mut Module, root: ExprId, mutator: &mut impl ExprMutator) -> Result<ExprId> {
    let mut map: HashMap<ExprId, ExprId> = HashMap::new();
    for id in post_order(m, root) {
        let rebuilt = rebuild(m, id, &map)?;
        let new = mutator.rewrite(m, rebuilt)?;
        map.insert(id, new);
    }
    Ok(map[&root])
}

/// Node `id` over children mapped through `map`: `id` itself if nothing changed, else
/// a new node built with the typed builders.
pub fn rebuild(m: &mut Module, id: ExprId, map: &HashMap<ExprId, ExprId>) -> Result<ExprId> {
    let get = |c: &ExprId| *map.get(c).unwrap_or(c);
    let kind = m.kind(id).clone();
    if kind.children().iter().all(|c| get(c) == *c) {
        return Ok(id);
    }
    match kind {
        ExprKind::Call {
            callee: Callee::Op(op),
            args,
        } => {
            let args: Vec<ExprId> = args.iter().map(get).collect();
            m.call(op, &args)
        }
        ExprKind::Call {
            callee: Callee::Expr(f),
            args,
        } => {
            let args: Vec<ExprId> = args.iter().map(get).collect();
            m.call_function(get(&f), &args)
        }
        ExprKind::Tuple(fields) => {
            let fields: Vec<ExprId> = fields.iter().map(get).collect();
            m.tuple(&fields)
        }
        ExprKind::TupleGetItem { tuple, index } => m.tuple_get(get(&tuple), index),
        ExprKind::Function(f) => {
            let params: Vec<ExprId> = f.params.iter().map(get).collect();
            m.function(&params, get(&f.body), f.attrs)
        }
        ExprKind::Var { .. } | ExprKind::Constant(_) | ExprKind::GlobalVar(_) => Ok(id),
    }
}

/// Copies everything reachable from `root` (function literals entered) into a new
/// module, keeping arena order and types; returns the module and `root`'s id in it. What
/// a kernel is lowered from: one fused function without the rest of the model and its
/// constants. A global reference is copied as a reference; its definition is not.
pub fn extract(m: &Module, root: ExprId) -> (Module, ExprId) {
    let mut out = Module::new();
    let mut map: HashMap<ExprId, ExprId> = HashMap::new();
    for id in post_order(m, root) {
        let node = m.node(id);
        let kind = node.kind.map_children(|c| map[&c]);
        map.insert(id, out.push_unchecked(kind, node.ty.clone()));
    }
    let new_root = map[&root];
    (out, new_root)
}

/// Variables used under `root` but not bound by a function literal inside it, in post
/// order of first use (Relay's `free_vars`; a model's `@main` params are the free vars
/// of its body in this order).
pub fn free_vars(m: &Module, root: ExprId) -> Vec<ExprId> {
    let mut bound = HashSet::new();
    for id in post_order(m, root) {
        if let ExprKind::Function(f) = m.kind(id) {
            bound.extend(f.params.iter().copied());
        }
    }
    post_order(m, root)
        .into_iter()
        .filter(|&id| matches!(m.kind(id), ExprKind::Var { .. }) && !bound.contains(&id))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::expr::FnAttrs;
    use crate::ty::Type;

    /// `(x, y) -> ((x, y).0, x)` built by hand: enough structure to check traversals
    /// without depending on any op.
    fn sample() -> (Module, ExprId, ExprId, ExprId) {
        let mut m = Module::new();
        let x = m.var("x", Type::tensor([2], DType::F32));
        let y = m.var("y", Type::tensor([3], DType::F32));
        let t = m.tuple(&[x, y]).unwrap();
        let g = m.tuple_get(t, 0).unwrap();
        let out = m.tuple(&[g, x]).unwrap();
        (m, x, y, out)
    }

    #[test]
    fn post_order_visits_children_first_and_once() {
        let (m, x, y, out) = sample();
        let mut seen = Vec::new();
        post_order_visit(&m, out, |id| seen.push(id));
        assert_eq!(seen.len(), 5);
        assert_eq!(seen[0], x);
        assert_eq!(seen[1], y);
        assert_eq!(*seen.last().unwrap(), out);
        assert_eq!(free_vars(&m, out), vec![x, y]);
    }

    #[test]
    fn visitor_hooks_see_each_kind() {
        #[derive(Default)]
        struct Count {
            vars: Vec<String>,
            tuples: usize,
            gets: usize,
            functions: usize,
        }
        impl ExprVisitor for Count {
            fn visit_var(&mut self, _: &Module, _: ExprId, name: &str) {
                self.vars.push(name.to_string());
            }
            fn visit_tuple(&mut self, _: &Module, _: ExprId, _: &[ExprId]) {
                self.tuples += 1;
            }
            fn visit_tuple_get_item(&mut self, _: &Module, _: ExprId, _: ExprId, index: usize) {
                assert_eq!(index, 0);
                self.gets += 1;
            }
            fn visit_function(&mut self, _: &Module, _: ExprId, f: &Function) {
                assert_eq!(f.params.len(), 2);
                self.functions += 1;
            }
        }
        let (mut m, x, y, out) = sample();
        let f = m.function(&[x, y], out, FnAttrs::default()).unwrap();
        let mut c = Count::default();
        walk(&m, f, &mut c);
        assert_eq!(
            (c.vars, c.tuples, c.gets, c.functions),
            (vec!["x".into(), "y".into()], 2, 1, 1)
        );
        // Function params are bound, so nothing is free.
        assert!(free_vars(&m, f).is_empty());
        assert_eq!(body_order(&m, f), vec![f]);
    }

    #[test]
    fn mutator_rebuilds_with_types() {
        // Replace variable y by a variable of another shape: the tuple's type follows.
        struct SwapY(ExprId, ExprId);
        impl ExprMutator for SwapY {
            fn rewrite(&mut self, _: &mut Module, id: ExprId) -> Result<ExprId> {
                Ok(if id == self.0 { self.1 } else { id })
            }
        }
        let (mut m, x, y, out) = sample();
        let z = m.var("z", Type::tensor([7], DType::I32));
        let before = m.len();
        let new = mutate(&mut m, out, &mut SwapY(y, z)).unwrap();
        assert_ne!(new, out);
        // Rebuilt: the inner tuple (x, z); the get and outer tuple are re-typed but equal.
        assert_eq!(m.len(), before + 3);
        assert_eq!(free_vars(&m, new), vec![x, z]);
        let ExprKind::Tuple(fields) = m.kind(new) else {
            panic!()
        };
        assert_eq!(m.ty(fields[0]), &Type::tensor([2], DType::F32));
        // Nothing to change: the same root comes back and no node is added.
        let n = m.len();
        assert_eq!(mutate(&mut m, new, &mut SwapY(y, z)).unwrap(), new);
        assert_eq!(m.len(), n);
    }

    #[test]
    fn extract_copies_one_function_only() {
        let (mut m, x, y, out) = sample();
        let f = m
            .function(&[x, y], out, FnAttrs { primitive: true })
            .unwrap();
        let unrelated = m.var("unrelated", Type::tensor([9], DType::F32));
        let (k, kf) = extract(&m, f);
        // x, y, the inner tuple, the get, the outer tuple, the function.
        assert_eq!(k.len(), 6);
        assert!(unrelated.index() < m.len());
        assert_eq!(k.ty(kf), m.ty(f));
        let func = k.function_at(kf).unwrap();
        assert!(func.attrs.primitive);
        assert_eq!(k.var_name(func.params[1]), Some("y"));
    }
}
