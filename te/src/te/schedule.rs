//! Schedules: how a graph's stages become loops, kept apart from what they compute.
//!
//! A [`Schedule`] owns a copy of the [`Graph`] (cache stages add operations to it) and
//! one stage per operation. A stage has **leaf axes** (its loop order, outermost
//! first), starting as the compute's data axes followed by its reduction axes; the
//! primitives replace leaves (`split`, `fuse`), reorder them, mark their loop kind
//! (`vectorize`, `parallel`, `unroll`, `bind`), or place the whole stage
//! (`compute_at`, `compute_inline`). No primitive changes what a stage computes: the
//! property tests check that every legal schedule lowers to the same values.
//!
//! Every invalid use is refused with [`Error::InvalidArgument`](crate::Error) naming the
//! stage and the axis at fault; a refused call leaves the schedule unchanged.

use std::collections::HashMap;

use crate::error::{Error, Result};
use crate::tir::{ForKind, PrimFunc, Scope};

use super::expr::{Expr, IterKind, IterVar};
use super::graph::{Graph, OpId, OpKind, Operation, Tensor};

/// How one axis was made from others.
#[derive(Clone, Debug, PartialEq)]
pub enum Relation {
    /// `parent = outer * factor + inner`, `inner` in `0..factor`.
    Split {
        parent: IterVar,
        outer: IterVar,
        inner: IterVar,
        factor: usize,
    },
    /// `fused = outer * extent(inner) + inner`.
    Fuse {
        outer: IterVar,
        inner: IterVar,
        fused: IterVar,
    },
}

/// Where a stage's loop nest goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attach {
    /// Its own loop nest at the top of the kernel, over its whole shape.
    Root,
    /// No loops: its body is substituted into every read of it.
    Inline,
    /// Inside loop `axis` of stage `parent`, over the region `parent` reads there.
    At { parent: OpId, axis: IterVar },
}

/// The schedule of one operation.
#[derive(Clone, Debug, PartialEq)]
pub struct Stage {
    /// The operation.
    pub op: OpId,
    /// Loop order, outermost first.
    pub leaves: Vec<IterVar>,
    /// Splits and fuses, in the order they were applied.
    pub relations: Vec<Relation>,
    /// Loop kind of each leaf that is not serial.
    pub kinds: HashMap<IterVar, ForKind>,
    /// Placement.
    pub attach: Attach,
    /// Memory scope of its buffer when it is an intermediate (default local).
    pub scope: Option<Scope>,
}

/// A schedule of a graph for a set of outputs.
#[derive(Clone, Debug)]
pub struct Schedule {
    pub(crate) graph: Graph,
    pub(crate) outputs: Vec<Tensor>,
    pub(crate) stages: Vec<Stage>,
}

#[allow(dead_code)] // cache stages use the helpers below
impl Schedule {
    /// The default schedule: every stage at the root, loops in compute order (data axes,
    /// then reduction axes), all serial.
    pub fn new(graph: &Graph, outputs: &[Tensor]) -> Result<Schedule> {
        if outputs.is_empty() {
            return Err(Error::InvalidArgument(
                "a schedule needs at least one output tensor".into(),
            ));
        }
        let mut s = Schedule {
            graph: graph.clone(),
            outputs: vec![],
            stages: vec![],
        };
        for i in 0..graph.ops().len() {
            s.push_stage(OpId(i as u32));
        }
        for (n, &t) in outputs.iter().enumerate() {
            let op = s.graph.op(t.op())?;
            if op.shape != t.shape() || op.dtype != t.dtype() {
                return Err(Error::InvalidArgument(format!(
                    "output {n} ({}) is not a tensor of this graph",
                    t.op()
                )));
            }
            if matches!(op.kind, OpKind::Placeholder) {
                return Err(Error::InvalidArgument(format!(
                    "output {n} is placeholder `{}`; outputs must be computes",
                    op.name
                )));
            }
            if outputs[..n].iter().any(|o| o.op() == t.op()) {
                return Err(Error::InvalidArgument(format!(
                    "output `{}` is listed twice",
                    op.name
                )));
            }
        }
        s.outputs = outputs.to_vec();
        Ok(s)
    }

    fn push_stage(&mut self, op: OpId) {
        let o = &self.graph.ops()[op.index()];
        let mut leaves = o.axes().to_vec();
        leaves.extend_from_slice(o.reduce_axes());
        self.stages.push(Stage {
            op,
            leaves,
            relations: vec![],
            kinds: HashMap::new(),
            attach: Attach::Root,
            scope: None,
        });
    }

    /// The graph being scheduled (with any cache stages added).
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// The output tensors.
    pub fn outputs(&self) -> &[Tensor] {
        &self.outputs
    }

    /// The stage of `t`.
    pub fn stage(&self, t: Tensor) -> Result<&Stage> {
        self.stages.get(t.op().index()).ok_or_else(|| {
            Error::InvalidArgument(format!("{} is not a stage of this schedule", t.op()))
        })
    }

    pub(crate) fn stage_of(&self, op: OpId) -> &Stage {
        &self.stages[op.index()]
    }

    /// Lowers this schedule to one kernel called `name`.
    pub fn lower(&self, name: &str) -> Result<PrimFunc> {
        super::lower::lower_schedule(self, name)
    }

    /// The name of the operation of `t` (for errors).
    pub(crate) fn op_name(&self, op: OpId) -> String {
        self.graph
            .ops()
            .get(op.index())
            .map(|o| o.name.clone())
            .unwrap_or_else(|| op.to_string())
    }

    pub(crate) fn is_output(&self, op: OpId) -> bool {
        self.outputs.iter().any(|t| t.op() == op)
    }

    /// Adds an operation (for cache stages) and its stage.
    pub(crate) fn add_op(&mut self, op: Operation) -> Tensor {
        let t = self.graph.push_op(op);
        self.push_stage(t.op());
        t
    }

    /// A fresh index variable owned by `op`.
    pub(crate) fn new_axis(
        &mut self,
        op: OpId,
        name: String,
        extent: usize,
        kind: IterKind,
    ) -> IterVar {
        self.graph.new_iter_var(name, extent, kind, Some(op))
    }

    /// Rebuilds an expression tree bottom-up with `f` applied to every read.
    pub(crate) fn map_reads(e: &Expr, f: &mut impl FnMut(Tensor, Vec<Expr>) -> Expr) -> Expr {
        let m = |x: &Expr, f: &mut dyn FnMut(Tensor, Vec<Expr>) -> Expr| {
            Schedule::map_reads(x, &mut |t, i| f(t, i))
        };
        match e {
            Expr::Read { tensor, indices } => {
                let idx = indices.iter().map(|i| m(i, f)).collect();
                f(*tensor, idx)
            }
            Expr::Binary { op, lhs, rhs } => Expr::binary(*op, m(lhs, f), m(rhs, f)),
            Expr::Not(x) => Expr::Not(Box::new(m(x, f))),
            Expr::Select { cond, then, else_ } => {
                super::expr::select(m(cond, f), m(then, f), m(else_, f))
            }
            Expr::Cast { to, value } => super::expr::cast(*to, m(value, f)),
            Expr::Call { intrinsic, args } => {
                super::expr::call(*intrinsic, args.iter().map(|a| m(a, f)).collect::<Vec<_>>())
            }
            Expr::Reduce { kind, value, axes } => Expr::Reduce {
                kind: *kind,
                value: Box::new(m(value, f)),
                axes: axes.clone(),
            },
            leaf => leaf.clone(),
        }
    }
}
