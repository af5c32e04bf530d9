//! `DeadCodeElimination` (level 1). With an arena there are no let bindings to drop;
//! what is dead is every node that no live global reaches, and every global function
//! that `@main` does not reach (directly or through other globals: Relay's
//! `RemoveUnusedFunctions` and `DeadCodeElimination` together). The pass rebuilds a fresh
//! module holding `@main`, the globals it reaches and exactly the nodes they reach; the
//! arena garbage that the in-place passes leave behind is gone afterwards. Parameters of a
//! function stay even when unused (they are its signature).

use std::collections::BTreeSet;

use kiln_ir::visit::post_order;
use kiln_ir::{ExprKind, Module};

use super::infer_type::rebuild_fresh;
use crate::error::Result;
use crate::pass::{Pass, PassContext, PassInfo, PassOutcome};

/// Relay's `DeadCodeElimination` (with `RemoveUnusedFunctions`).
#[derive(Clone, Copy, Debug, Default)]
pub struct DeadCodeElimination;

impl Pass for DeadCodeElimination {
    fn info(&self) -> PassInfo {
        PassInfo {
            name: "DeadCodeElimination",
            opt_level: 1,
        }
    }

    fn run(&self, module: &Module, _ctx: &PassContext) -> Result<PassOutcome> {
        let live = live_globals(module)?;
        let names: Vec<String> = module
            .globals()
            .iter()
            .filter(|(n, _)| live.contains(n))
            .map(|(n, _)| n.clone())
            .collect();
        let (out, _) = rebuild_fresh(module, &names)?;
        let removed_functions = module.globals().len() - names.len();
        let removed_nodes = module.len() - out.len();
        Ok(PassOutcome::new(out)
            .detail("removed_nodes", removed_nodes)
            .detail("removed_functions", removed_functions))
    }
}

/// `@main` and the globals it references, transitively; an error if there is no `@main`.
fn live_globals(m: &Module) -> Result<BTreeSet<String>> {
    m.main_id()?;
    let mut live = BTreeSet::from(["main".to_string()]);
    let mut work = vec!["main".to_string()];
    while let Some(name) = work.pop() {
        let Some(f) = m.global_id(&name) else {
            continue;
        };
        for id in post_order(m, f) {
            if let ExprKind::GlobalVar(g) = m.kind(id)
                && live.insert(g.clone())
            {
                work.push(g.clone());
            }
        }
    }
    Ok(live)
}
