//! The text form of the graph IR (placeholder until the printer and parser land).

use std::collections::HashMap;

use crate::expr::{ExprId, ExprKind, Module};

/// The name the printer gives each node of the def `def`: `%name` for variables, `%N`
/// for bound nodes.
pub fn binding_names(m: &Module, def: ExprId) -> HashMap<ExprId, String> {
    let mut names = HashMap::new();
    let mut n = 0;
    for id in crate::visit::post_order(m, def) {
        match m.kind(id) {
            ExprKind::Var { name } => {
                names.insert(id, format!("%{name}"));
            }
            ExprKind::Call { .. } | ExprKind::Tuple(_) | ExprKind::TupleGetItem { .. } => {
                names.insert(id, format!("%{n}"));
                n += 1;
            }
            _ => {}
        }
    }
    names
}
