//! The cost model: [`CostModel`] gives the run-time cost of one op call from its
//! argument and result types; [`FlopsBytes`] is the default (floating-point operations
//! plus bytes moved plus a fixed per-kernel overhead). Compile-time constants cost
//! nothing: a node whose arguments are all constants folds before the program runs.
//! [`function_cost`] is the cost of a whole function counted as a DAG — every
//! reachable node once, however many users it has — and is the measure the pass
//! compares before and after saturation.

use std::collections::HashMap;

use kiln_ir::{Callee, ExprId, ExprKind, Module, Op, Type};

use crate::error::Result;

/// The run-time cost of op calls.
pub trait CostModel: Send + Sync {
    /// A short name for reports (`flops+bytes`).
    fn name(&self) -> &str;
    /// The cost of one call of `op` on arguments of types `args`, returning `out`.
    fn op_cost(&self, op: &Op, args: &[Type], out: &Type) -> f64;
}

/// `flop * FLOPs + byte * (bytes read + bytes written) + kernel`, with the FLOPs and
/// bytes the op states ([`kiln_ir::op::OpSpec::flops`], [`kiln_ir::op::OpSpec::bytes_moved`]):
/// a view (reshape, squeeze, expand_dims, batch_flatten, a `split` into contiguous
/// pieces) moves nothing and costs `kernel` alone. A custom op gets the defaults stated
/// on [`kiln_ir::op::CustomOpDef`].
#[derive(Clone, Debug)]
pub struct FlopsBytes {
    /// Cost of one floating-point operation.
    pub flop: f64,
    /// Cost of one byte read or written.
    pub byte: f64,
    /// Fixed cost of one kernel launch (paid by every call, views included).
    pub kernel: f64,
}

impl Default for FlopsBytes {
    /// Weights calibrated on the `cpu` target (Cranelift, one thread) with `kiln profile
    /// zoo:resnet18 --opt-level 0` (one op per kernel), in units of one conv2d FLOP
    /// (≈ 0.1 ns there: the 21 convolutions run at 5–18, median ≈ 10 GFLOP/s):
    /// - `byte = 1.0`: relu/add/multiply over 200k–800k `f32` elements take ≈ 0.9 ns an
    ///   element, i.e. ≈ 9 units for 1 FLOP and 8 bytes read and written;
    /// - `kernel = 5000`: the 172 kernels of ≤ 512 elements take a median 0.62 µs a call.
    ///
    /// Known misfits: pooling (3×3 `max_pool2d` ≈ 4× its modelled cost) and elementwise
    /// ops on 14×14 and 7×7 planes (≈ 1.7 ns an element: a per-row overhead the model has
    /// not). BENCHMARKS.md ("Cost model calibration") has the measurement and command.
    fn default() -> FlopsBytes {
        FlopsBytes {
            flop: 1.0,
            byte: 1.0,
            kernel: 5000.0,
        }
    }
}

impl CostModel for FlopsBytes {
    fn name(&self) -> &str {
        "flops+bytes"
    }

    fn op_cost(&self, op: &Op, args: &[Type], out: &Type) -> f64 {
        self.flop * op.flops(args, out) + self.byte * op.bytes_moved(args, out) + self.kernel
    }
}

/// The cost of function `func` of `m`: every node reachable from its body once; nodes
/// computed from constants only cost nothing.
pub fn function_cost(model: &dyn CostModel, m: &Module, func: ExprId) -> Result<f64> {
    let f = m.function_at(func)?;
    let mut constant: HashMap<ExprId, bool> = HashMap::new();
    let mut total = 0.0;
    for id in kiln_ir::visit::body_order(m, f.body) {
        let kind = m.kind(id);
        let all_const = |ids: &[ExprId]| ids.iter().all(|c| constant[c]);
        let is_const = match kind {
            ExprKind::Constant(_) => true,
            ExprKind::Call {
                callee: Callee::Op(_),
                args,
            } => all_const(args),
            ExprKind::Tuple(fields) => all_const(fields),
            ExprKind::TupleGetItem { tuple, .. } => constant[tuple],
            _ => false,
        };
        constant.insert(id, is_const);
        if let (false, ExprKind::Call { callee, args }) = (is_const, kind) {
            let tys: Vec<Type> = args.iter().map(|&a| m.ty(a).clone()).collect();
            total += match callee {
                Callee::Op(op) => model.op_cost(op, &tys, m.ty(id)),
                // A call of a function (a fused group, a global): its body's ops.
                Callee::Expr(callee) => match m.kind(*callee) {
                    ExprKind::Function(_) => function_cost(model, m, *callee)?,
                    ExprKind::GlobalVar(name) => match m.global_id(name) {
                        Some(g) => function_cost(model, m, g)?,
                        None => 0.0,
                    },
                    _ => 0.0,
                },
            };
        }
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_ir::op::{Binary, BinaryKind, Conv2d, Reshape, Split, SplitSpec, Unary, UnaryKind};
    use kiln_ir::{DType, NDArray};

    fn t(shape: &[usize]) -> Type {
        Type::tensor(shape.to_vec(), DType::F32)
    }

    #[test]
    fn conv_flops_and_bytes() {
        let model = FlopsBytes::default();
        let op = Op::from(Conv2d::default());
        let (x, w, y) = (t(&[1, 3, 8, 8]), t(&[4, 3, 3, 3]), t(&[1, 4, 6, 6]));
        assert_eq!(op.flops(&[x.clone(), w.clone()], &y), 2.0 * 144.0 * 27.0);
        let moved = (192.0 + 108.0 + 144.0) * 4.0;
        assert_eq!(
            model.op_cost(&op, &[x, w], &y),
            2.0 * 144.0 * 27.0 + moved + 5000.0
        );
        let view = Op::from(Reshape { newshape: vec![-1] });
        assert_eq!(model.op_cost(&view, &[t(&[2, 3])], &t(&[6])), 5000.0);
        // A split into contiguous pieces is a view; a strided one copies.
        let split = Op::from(Split {
            indices_or_sections: SplitSpec::Sections(2),
            axis: 1,
        });
        let halves = Type::Tuple(vec![t(&[1, 2]), t(&[1, 2])]);
        assert_eq!(model.op_cost(&split, &[t(&[1, 4])], &halves), 5000.0);
        let halves = Type::Tuple(vec![t(&[2, 1]), t(&[2, 1])]);
        assert_eq!(
            model.op_cost(&split, &[t(&[2, 2])], &halves),
            4.0 + 32.0 + 5000.0
        );
        // A transcendental unary op counts four FLOPs an element.
        let exp = Op::from(Unary::new(UnaryKind::Exp));
        assert_eq!(
            model.op_cost(&exp, &[t(&[4])], &t(&[4])),
            16.0 + 32.0 + 5000.0
        );
    }

    #[test]
    fn shared_nodes_are_paid_once_and_constants_are_free() {
        let model = FlopsBytes::default();
        let mut m = Module::new();
        let x = m.var("x", t(&[4]));
        let c = m.constant(NDArray::full([4], DType::F32, 2.0));
        let cc = m.call(Binary::new(BinaryKind::Add), &[c, c]).unwrap();
        let a = m.call(Binary::new(BinaryKind::Add), &[x, cc]).unwrap();
        let b = m.call(Binary::new(BinaryKind::Multiply), &[a, a]).unwrap();
        m.set_main(&[x], b).unwrap();
        let one = model.op_cost(
            &Op::from(Binary::new(BinaryKind::Add)),
            &[t(&[4]), t(&[4])],
            &t(&[4]),
        );
        let cost = function_cost(&model, &m, m.main_id().unwrap()).unwrap();
        assert_eq!(cost, 2.0 * one);
    }
}
