//! `EliminateCommonSubexpr` (level 3): hash-consing. Two calls of the same callee (op
//! with equal attributes, or the same function) on the same argument nodes, two tuples of
//! the same fields and two projections of the same field of the same tuple are one
//! node. Arguments are compared by id after their own merging, so merging runs bottom-up
//! in one sweep. Small constants (at most [`VALUE_COMPARED_ELEMENTS`] elements) are
//! compared by value, larger ones by id. Variables, functions, global references and
//! calls of custom ops (user code, not known to be pure) are never merged. Merging is per global function (nothing is shared across functions).

use std::collections::HashMap;

use kiln_ir::{Callee, DType, ExprId, ExprKind, Module, Op};

use super::rewrite_module;
use crate::error::Result;
use crate::pass::{Pass, PassContext, PassInfo, PassOutcome};

/// Constants with at most this many elements are merged when their values are equal.
pub const VALUE_COMPARED_ELEMENTS: usize = 64;

/// Relay's `EliminateCommonSubexpr`.
#[derive(Clone, Copy, Debug, Default)]
pub struct EliminateCommonSubexpr;

#[derive(Clone, PartialEq, Eq, Hash)]
enum Key {
    Call(Callee, Vec<ExprId>),
    Tuple(Vec<ExprId>),
    Get(ExprId, usize),
    Constant(DType, Vec<usize>, Vec<u8>),
}

impl Pass for EliminateCommonSubexpr {
    fn info(&self) -> PassInfo {
        PassInfo {
            name: "EliminateCommonSubexpr",
            opt_level: 3,
        }
    }

    fn run(&self, module: &Module, _ctx: &PassContext) -> Result<PassOutcome> {
        let mut table: HashMap<Key, ExprId> = HashMap::new();
        let mut merged = 0usize;
        let out = rewrite_module(module, |m, orig, id| {
            // A global's function node comes last in its post order: the next global
            // starts afresh. (Nested functions share their enclosing table.)
            if module.globals().iter().any(|(_, f)| *f == orig) {
                table.clear();
                return Ok(id);
            }
            let Some(key) = key(m, id) else {
                return Ok(id);
            };
            match table.get(&key) {
                Some(&first) => {
                    merged += 1;
                    Ok(first)
                }
                None => {
                    table.insert(key, id);
                    Ok(id)
                }
            }
        })?;
        Ok(PassOutcome::new(out).detail("merged", merged))
    }
}

/// What makes node `id` equal to another, or `None` for nodes never merged.
fn key(m: &Module, id: ExprId) -> Option<Key> {
    Some(match m.kind(id) {
        // A custom op's evaluation is the user's code, not known to be pure.
        ExprKind::Call {
            callee: Callee::Op(Op::Custom(_)),
            ..
        } => return None,
        ExprKind::Call { callee, args } => Key::Call(callee.clone(), args.clone()),
        ExprKind::Tuple(fields) => Key::Tuple(fields.clone()),
        ExprKind::TupleGetItem { tuple, index } => Key::Get(*tuple, *index),
        ExprKind::Constant(c) if c.numel() <= VALUE_COMPARED_ELEMENTS => {
            Key::Constant(c.dtype(), c.shape().to_vec(), c.to_le_bytes())
        }
        _ => return None,
    })
}
