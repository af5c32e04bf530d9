//! `FoldConstant` (level 2): every call of a built-in op whose arguments are all
//! constants is evaluated with the op's reference evaluation (the interpreter's oracle)
//! and replaced by its value: a constant, or a tuple of constants for ops that return a
//! tuple. A tuple literal of constants counts as a constant argument (`concatenate`). A projection out of a tuple literal takes the field (Relay folds
//! `TupleGetItem(Tuple(...))` too). Calls of functions and of custom ops are left alone
//! (a custom op's evaluation is the user's code, not known to be pure).
//!
//! Size limit: folding must not blow a small program up into a large constant (say
//! `add(const[1000, 1], const[1, 1000])`). A call is folded only when its result has no
//! more elements than its constant arguments together, or at most
//! [`FoldConstant::max_new_elements`] elements (default 2^16 = 256 KiB of float32).
//! Weight transforms (`multiply(weight, reshape(scale))`, `expand_dims`, `transpose`)
//! never grow, so they always fold.

use kiln_ir::{Callee, ExprId, ExprKind, Module, NDArray, Op, Type, Value};

use super::rewrite_module;
use crate::error::Result;
use crate::pass::{Pass, PassContext, PassInfo, PassOutcome};

/// Relay's `FoldConstant`.
#[derive(Clone, Copy, Debug)]
pub struct FoldConstant {
    /// A folded result may have this many elements even when its constant arguments
    /// have fewer in total.
    pub max_new_elements: usize,
}

impl Default for FoldConstant {
    fn default() -> FoldConstant {
        FoldConstant {
            max_new_elements: 1 << 16,
        }
    }
}

impl Pass for FoldConstant {
    fn info(&self) -> PassInfo {
        PassInfo {
            name: "FoldConstant",
            opt_level: 2,
        }
    }

    fn run(&self, module: &Module, _ctx: &PassContext) -> Result<PassOutcome> {
        let (mut folded, mut too_big) = (0usize, 0usize);
        let out = rewrite_module(module, |m, _orig, id| match m.kind(id) {
            ExprKind::Call {
                callee: Callee::Op(op),
                args,
            } if !matches!(op, Op::Custom(_)) => {
                // Check before copying any value out of the graph.
                let Some(constants) = args
                    .iter()
                    .map(|&a| constant_value(m, a))
                    .collect::<Option<Vec<_>>>()
                else {
                    return Ok(id);
                };
                let in_elements: usize = args.iter().map(|&a| elements(m.ty(a))).sum();
                let out_elements = elements(m.ty(id));
                if out_elements > in_elements.max(self.max_new_elements) {
                    too_big += 1;
                    return Ok(id);
                }
                let values: Vec<Value> = constants.iter().map(ConstantValue::materialize).collect();
                let value = op.clone().eval(&values, &m.ty(id).clone())?;
                folded += 1;
                value_expr(m, value)
            }
            ExprKind::TupleGetItem { tuple, index } => match m.kind(*tuple) {
                ExprKind::Tuple(fields) => Ok(fields[*index]),
                _ => Ok(id),
            },
            _ => Ok(id),
        })?;
        Ok(PassOutcome::new(out)
            .detail("folded", folded)
            .detail("too_big", too_big))
    }
}

/// A constant argument: a constant node, or a tuple literal of them.
enum ConstantValue<'m> {
    Tensor(&'m NDArray),
    Tuple(Vec<ConstantValue<'m>>),
}

impl ConstantValue<'_> {
    /// The value, copied out of the graph.
    fn materialize(&self) -> Value {
        match self {
            ConstantValue::Tensor(t) => Value::Tensor((*t).clone()),
            ConstantValue::Tuple(fields) => {
                Value::Tuple(fields.iter().map(ConstantValue::materialize).collect())
            }
        }
    }
}

/// `id` as a constant value (borrowed from the graph), if it is one.
fn constant_value(m: &Module, id: ExprId) -> Option<ConstantValue<'_>> {
    match m.kind(id) {
        ExprKind::Constant(c) => Some(ConstantValue::Tensor(c)),
        ExprKind::Tuple(fields) => Some(ConstantValue::Tuple(
            fields
                .iter()
                .map(|&f| constant_value(m, f))
                .collect::<Option<_>>()?,
        )),
        _ => None,
    }
}

/// Tensor elements in a value of type `ty` (tuples: all fields).
fn elements(ty: &Type) -> usize {
    match ty {
        Type::Tensor(t) => t.numel(),
        Type::Tuple(fields) => fields.iter().map(elements).sum(),
        Type::Func(_) => 0,
    }
}

/// A constant for a tensor value, a tuple of them for a tuple value.
fn value_expr(m: &mut Module, value: Value) -> Result<ExprId> {
    Ok(match value {
        Value::Tensor(t) => m.constant(t),
        Value::Tuple(vs) => {
            let fields = vs
                .into_iter()
                .map(|v| value_expr(m, v))
                .collect::<Result<Vec<_>>>()?;
            m.tuple(&fields)?
        }
    })
}
