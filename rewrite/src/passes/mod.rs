//! The classical graph passes (Relay's names and opt levels), one file
//! each: [`InferType`], [`SimplifyInference`], [`DeadCodeElimination`], [`FoldConstant`],
//! [`EliminateCommonSubexpr`], [`FoldScaleAxis`], plus [`bind_params`] (Relay's
//! `bind_params_by_name`, which turns weights into constants so the folds can see them)
//! and [`classical_passes`], the sequence in `relay.build`'s order.
//!
//! Every pass except the two that rebuild a fresh module ([`InferType`] and
//! [`DeadCodeElimination`]) rewrites in place through [`rewrite_module`]: nodes are
//! appended to a copy of the arena and the old ones stay behind as garbage until
//! [`DeadCodeElimination`] drops them. Nodes inside primitive functions (fused groups) are
//! never rewritten, as in Relay, which leaves `Primitive=1` functions alone.

mod bind;
mod cse;
mod dce;
mod fold_constant;
mod fold_scale_axis;
mod infer_type;
mod simplify_inference;

use std::collections::{HashMap, HashSet};

use kiln_ir::visit::{post_order, rebuild};
use kiln_ir::{ExprId, ExprKind, Module};

use crate::error::Result;
use crate::pass::Pass;

pub use bind::{bind_params, bind_params_to_constants};
pub use cse::EliminateCommonSubexpr;
pub use dce::DeadCodeElimination;
pub use fold_constant::FoldConstant;
pub use fold_scale_axis::FoldScaleAxis;
pub use infer_type::InferType;
pub use simplify_inference::SimplifyInference;

/// The classical passes in the order `relay.build` runs them (GetPassPrefix):
/// SimplifyInference, EliminateCommonSubexpr, FoldConstant, FoldScaleAxis, then FoldConstant
/// again (to fold the scaled weights), InferType and DeadCodeElimination. Each is still
/// gated by its own level under the [`crate::PassContext`]. The second FoldConstant has
/// the same name as the first, so `required`/`disabled` apply to both.
pub fn classical_passes() -> Vec<Box<dyn Pass>> {
    vec![
        Box::new(SimplifyInference),
        Box::new(EliminateCommonSubexpr),
        Box::new(FoldConstant::default()),
        Box::new(FoldScaleAxis),
        Box::new(FoldConstant::default()),
        Box::new(InferType),
        Box::new(DeadCodeElimination),
    ]
}

/// The nodes of every primitive function reachable from the globals (the function
/// nodes, their parameters and bodies): what the passes leave alone.
pub(crate) fn primitive_nodes(m: &Module) -> HashSet<ExprId> {
    let mut out = HashSet::new();
    for (_, f) in m.globals() {
        for id in post_order(m, *f) {
            if let ExprKind::Function(func) = m.kind(id)
                && func.attrs.primitive
                && !out.contains(&id)
            {
                out.extend(post_order(m, id));
            }
        }
    }
    out
}

/// Rewrites every global function of `module` bottom-up and returns the new module.
/// For each node reachable from a global (in post order, each once, primitive functions
/// excepted), `rewrite(m, original, rebuilt)` gets the original id and the node rebuilt
/// over its already rewritten children (the same id when no child changed), and returns
/// what replaces it. Rebuilt nodes go through the typed builders, so a rewrite that breaks
/// a type rule is an error.
pub fn rewrite_module(
    module: &Module,
    mut rewrite: impl FnMut(&mut Module, ExprId, ExprId) -> Result<ExprId>,
) -> Result<Module> {
    let mut m = module.clone();
    let protected = primitive_nodes(module);
    let mut map: HashMap<ExprId, ExprId> = HashMap::new();
    let mut done: HashSet<ExprId> = HashSet::new();
    for (name, f) in module.globals().to_vec() {
        for id in post_order(module, f) {
            if !done.insert(id) {
                continue;
            }
            let rebuilt = rebuild(&mut m, id, &map)?;
            let new = if protected.contains(&id) {
                rebuilt
            } else {
                rewrite(&mut m, id, rebuilt)?
            };
            if new != id {
                map.insert(id, new);
            }
        }
        m.define(&name, map.get(&f).copied().unwrap_or(f))?;
    }
    Ok(m)
}

/// How many times each node is used by the nodes reachable from the globals (as an
/// argument, field, projected tuple, callee or function body), plus once per global
/// that it is.
pub(crate) fn use_counts(m: &Module) -> HashMap<ExprId, usize> {
    let mut uses: HashMap<ExprId, usize> = HashMap::new();
    let mut seen = HashSet::new();
    for (_, f) in m.globals() {
        *uses.entry(*f).or_default() += 1;
        for id in post_order(m, *f) {
            if seen.insert(id) {
                for c in m.kind(id).children() {
                    *uses.entry(c).or_default() += 1;
                }
            }
        }
    }
    uses
}

/// A scalar constant of `dtype` holding `value`.
pub(crate) fn scalar(m: &mut Module, dtype: kiln_ir::DType, value: f64) -> ExprId {
    m.constant(kiln_ir::NDArray::full(Vec::<usize>::new(), dtype, value))
}
