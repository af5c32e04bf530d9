//! Conversion between a function of an [`ir::Module`](kiln_ir::Module) and the e-graph:
//! [`to_egraph`] adds a function's body (each expression node once, so sharing is kept)
//! and [`to_module`] builds a chosen term (one node per e-class) back into the module
//! through the typed builders (`Module::call`, ...), so a rule that produced an ill-typed
//! term is caught there too. Variables and constants keep their module nodes; constants
//! that rules created become new constant nodes.

use std::collections::{HashMap, HashSet};

use egg::{Id, Language};
use kiln_ir::{Callee, ExprId, ExprKind, Module};

use super::analysis::{EGraph, TypeAnalysis, VarEntry};
use super::lang::Node;
use crate::error::{Error, Result};

/// The e-graph of function `func`'s body and the class of the body.
pub fn to_egraph(m: &Module, func: ExprId) -> Result<(EGraph, Id)> {
    let f = m.function_at(func)?;
    let mut g = EGraph::new(TypeAnalysis::default());
    let mut class: HashMap<ExprId, Id> = HashMap::new();
    let mut var_index: HashMap<ExprId, usize> = HashMap::new();
    for id in kiln_ir::visit::post_order(m, f.body) {
        let kids = |ids: &[ExprId]| -> Vec<Id> { ids.iter().map(|c| class[c]).collect() };
        let node = match m.kind(id) {
            ExprKind::Var { .. } => {
                let next = g.analysis.vars.len();
                let i = *var_index.entry(id).or_insert(next);
                if i == next {
                    g.analysis.vars.push(VarEntry {
                        expr: id,
                        ty: m.ty(id).clone(),
                    });
                }
                Node::Var(i)
            }
            ExprKind::Constant(value) => Node::Const(g.analysis.module_const(value.clone(), id)),
            ExprKind::Call {
                callee: Callee::Op(op),
                args,
            } => Node::Call(op.clone(), kids(args)),
            ExprKind::Tuple(fields) => Node::Tuple(kids(fields)),
            ExprKind::TupleGetItem { tuple, index } => Node::Get(*index, [class[tuple]]),
            ExprKind::Call {
                callee: Callee::Expr(_),
                ..
            } => {
                return Err(Error::Unsupported(
                    "equality saturation over function calls (run it before fusion)".into(),
                ));
            }
            ExprKind::Function(_) => {
                return Err(Error::Unsupported(
                    "equality saturation over nested function literals".into(),
                ));
            }
            ExprKind::GlobalVar(_) => {
                return Err(Error::Unsupported(
                    "equality saturation over references to global functions".into(),
                ));
            }
        };
        class.insert(id, g.add(node));
    }
    g.rebuild();
    if let Some(e) = g.analysis.errors.first() {
        return Err(Error::Unsupported(format!(
            "the module does not type-check: {e}"
        )));
    }
    Ok((g, class[&f.body]))
}

/// Why function `func`'s body cannot become an e-graph (calls of functions, nested
/// functions, global references: what fusion produces), or `None` if it can.
pub fn unsupported(m: &Module, func: ExprId) -> Option<String> {
    let f = m.function_at(func).ok()?;
    let order = kiln_ir::visit::body_order(m, f.body);
    let has = |pred: &dyn Fn(&ExprKind) -> bool| order.iter().any(|&id| pred(m.kind(id)));
    let why = if has(&|k| {
        matches!(
            k,
            ExprKind::Call {
                callee: Callee::Expr(_),
                ..
            }
        )
    }) {
        "it calls functions (equality saturation runs before fusion)"
    } else if has(&|k| matches!(k, ExprKind::Function(_))) {
        "it contains nested functions"
    } else if has(&|k| matches!(k, ExprKind::GlobalVar(_))) {
        "it refers to global functions"
    } else {
        return None;
    };
    Some(why.to_string())
}

/// Builds the term rooted at `root` that picks node `choice(class)` in every class into
/// `m` (appending nodes); returns its expression id. An error if the choice is cyclic
/// or a node fails its type rule. The walk keeps its own stack (a term may be a chain
/// as long as the input model), so no depth overflows the thread's stack.
pub fn to_module(
    g: &EGraph,
    root: Id,
    choice: &dyn Fn(Id) -> Option<Node>,
    m: &mut Module,
) -> Result<ExprId> {
    let mut built: HashMap<Id, ExprId> = HashMap::new();
    let mut on_path: HashSet<Id> = HashSet::new();
    // (class, its chosen node once its children have been pushed)
    let mut stack: Vec<(Id, Option<Node>)> = vec![(g.find(root), None)];
    while let Some((class, chosen)) = stack.pop() {
        match chosen {
            None => {
                if built.contains_key(&class) {
                    continue;
                }
                if !on_path.insert(class) {
                    return Err(Error::Unsupported(format!(
                        "the chosen term is cyclic at e-class {class}"
                    )));
                }
                let node = choice(class).ok_or_else(|| {
                    Error::Unsupported(format!("no term was chosen for e-class {class}"))
                })?;
                let kids: Vec<Id> = node.children().iter().map(|&c| g.find(c)).collect();
                stack.push((class, Some(node)));
                stack.extend(kids.into_iter().rev().map(|c| (c, None)));
            }
            Some(node) => {
                let kids: Vec<ExprId> =
                    node.children().iter().map(|&c| built[&g.find(c)]).collect();
                let e = build_node(g, &node, &kids, m)?;
                on_path.remove(&class);
                built.insert(class, e);
            }
        }
    }
    Ok(built[&g.find(root)])
}

/// The module node for e-graph node `node` whose children are built as `kids`.
fn build_node(g: &EGraph, node: &Node, kids: &[ExprId], m: &mut Module) -> Result<ExprId> {
    Ok(match node {
        Node::Var(i) => g.analysis.vars[*i].expr,
        Node::Const(i) => {
            let c = &g.analysis.consts[*i];
            match c.expr {
                Some(e) => e,
                None => m.constant((*c.value).clone()),
            }
        }
        Node::Call(op, _) => m.call(op.clone(), kids)?,
        Node::Tuple(_) => m.tuple(kids)?,
        Node::Get(i, _) => m.tuple_get(kids[0], *i)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eqsat::cost::FlopsBytes;
    use crate::eqsat::extract::tree_choice;
    use kiln_ir::text::print_module;
    use kiln_ir::{DType, zoo};

    #[test]
    fn a_module_round_trips_through_the_egraph() {
        let (m, _) = zoo::resnet(18, 1, [3, 32, 32], DType::F32, 0).unwrap();
        let main = m.main_id().unwrap();
        let (g, root) = to_egraph(&m, main).unwrap();
        // One class per distinct node, nothing merged.
        assert_eq!(g.total_number_of_nodes(), g.number_of_classes());
        let choice = tree_choice(&g, &FlopsBytes::default());
        let mut out = m.clone();
        let body = to_module(&g, root, &|c| choice.get(&c).cloned(), &mut out).unwrap();
        let params = m.main().unwrap().params.clone();
        out.set_main(&params, body).unwrap();
        let opts = Default::default();
        assert_eq!(print_module(&out, &opts), print_module(&m, &opts));
        assert!(unsupported(&m, main).is_none());
    }

    #[test]
    fn bad_inputs_are_errors() {
        let mut m = Module::new();
        let x = m.var("x", kiln_ir::Type::tensor([2], DType::F32));
        m.set_main(&[x], x).unwrap();
        // `x` is not a function.
        assert!(to_egraph(&m, x).is_err());
        let (g, root) = to_egraph(&m, m.main_id().unwrap()).unwrap();
        // A choice that misses the root's class.
        let err = to_module(&g, root, &|_| None, &mut m.clone()).unwrap_err();
        assert!(err.to_string().contains("no term was chosen"), "{err}");
    }

    #[test]
    fn a_chain_deeper_than_the_stack_converts_both_ways() {
        // 100,000 relus: a recursive walk would overflow a 2 MiB test thread's stack.
        let mut m = Module::new();
        let x = m.var("x", kiln_ir::Type::tensor([4], DType::F32));
        let relu = kiln_ir::op::Unary {
            kind: kiln_ir::op::UnaryKind::Relu,
        };
        let mut y = x;
        for _ in 0..100_000 {
            y = m.call(relu.clone(), &[y]).unwrap();
        }
        m.set_main(&[x], y).unwrap();
        let (g, root) = to_egraph(&m, m.main_id().unwrap()).unwrap();
        let mut out = m.clone();
        let body = to_module(&g, root, &|c| g[c].nodes.first().cloned(), &mut out).unwrap();
        assert_eq!(out.ty(body), m.ty(y));
        assert_eq!(out.len(), m.len() + 100_000);
    }
}
