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
use crate::tir::{ForKind, PrimFunc, Scope, ThreadAxis};

use super::expr::{Expr, IterKind, IterVar, rename_vars};
use super::graph::{Graph, OpId, OpKind, Operation, Tensor};
use super::tensorize::Intrin;

/// How one axis was made from others.
#[derive(Clone, Debug, PartialEq)]
pub enum Relation {
    /// `parent = outer * factor + inner`, `inner` in `0..factor`.
    Split {
        /// The axis split.
        parent: IterVar,
        /// The new outer axis, `ceil(extent(parent) / factor)` long.
        outer: IterVar,
        /// The new inner axis, `factor` long.
        inner: IterVar,
        /// The inner extent (at least 1).
        factor: usize,
    },
    /// `fused = outer * extent(inner) + inner`.
    Fuse {
        /// The outer of the two axes fused.
        outer: IterVar,
        /// The inner of the two axes fused (directly inside `outer`).
        inner: IterVar,
        /// The new axis, `extent(outer) * extent(inner)` long.
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
    At {
        /// The stage whose loop nest holds this one.
        parent: OpId,
        /// The loop of `parent` inside which this stage's loops go.
        axis: IterVar,
    },
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
    /// The micro-kernel its whole nest is lowered to ([`Schedule::tensorize`]).
    pub tensorize: Option<Intrin>,
}

/// A schedule of a graph for a set of outputs.
#[derive(Clone, Debug)]
pub struct Schedule {
    pub(crate) graph: Graph,
    pub(crate) outputs: Vec<Tensor>,
    pub(crate) stages: Vec<Stage>,
}

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
            tensorize: None,
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
}

fn kind_name(k: ForKind) -> String {
    match k {
        ForKind::Serial => "serial".into(),
        ForKind::Parallel => "parallel".into(),
        ForKind::Vectorized => "vectorized".into(),
        ForKind::Unrolled => "unrolled".into(),
        ForKind::Thread(a) => format!("bound to {a}"),
    }
}

/// The primitives. Each takes the stage as the [`Tensor`] it computes.
impl Schedule {
    fn fail<T>(&self, op: OpId, msg: impl Into<String>) -> Result<T> {
        Err(Error::InvalidArgument(format!(
            "stage `{}`: {}",
            self.op_name(op),
            msg.into()
        )))
    }

    /// The operation of `t`, checked to belong to this schedule.
    fn sid(&self, t: Tensor) -> Result<OpId> {
        let op = self.graph.op(t.op())?;
        if op.shape != t.shape() || op.dtype != t.dtype() {
            return Err(Error::InvalidArgument(format!(
                "{} is not a tensor of this schedule",
                t.op()
            )));
        }
        Ok(t.op())
    }

    /// The operation of `t`, which must be a compute.
    fn compute_sid(&self, t: Tensor, what: &str) -> Result<OpId> {
        let o = self.sid(t)?;
        if matches!(self.graph.ops()[o.index()].kind, OpKind::Placeholder) {
            return self.fail(o, format!("is a placeholder; {what} applies to computes"));
        }
        Ok(o)
    }

    fn ivn(&self, v: IterVar) -> String {
        self.graph.iv_name(v)
    }

    fn extent(&self, v: IterVar) -> usize {
        self.graph.iter_var(v).map_or(0, |i| i.extent)
    }

    fn iv_kind(&self, v: IterVar) -> IterKind {
        self.graph.iter_var(v).map_or(IterKind::Data, |i| i.kind)
    }

    /// Position of leaf `axis` of stage `o`, or a clear error.
    fn leaf_pos(&self, o: OpId, axis: IterVar) -> Result<usize> {
        let info = match self.graph.iter_var(axis) {
            Ok(i) => i,
            Err(_) => return self.fail(o, format!("{axis} is not an axis of this schedule")),
        };
        if info.owner != Some(o) {
            let owner = info
                .owner
                .map(|w| format!("stage `{}`", self.op_name(w)))
                .unwrap_or_else(|| "no stage".into());
            return self.fail(
                o,
                format!("axis `{}` belongs to {owner}, not to this stage", info.name),
            );
        }
        let st = &self.stages[o.index()];
        if let Some(p) = st.leaves.iter().position(|&l| l == axis) {
            return Ok(p);
        }
        for r in &st.relations {
            match *r {
                Relation::Split {
                    parent,
                    outer,
                    inner,
                    ..
                } if parent == axis => {
                    return self.fail(
                        o,
                        format!(
                            "axis `{}` was already split (into `{}` and `{}`); use those",
                            info.name,
                            self.ivn(outer),
                            self.ivn(inner)
                        ),
                    );
                }
                Relation::Fuse {
                    outer,
                    inner,
                    fused,
                } if outer == axis || inner == axis => {
                    return self.fail(
                        o,
                        format!(
                            "axis `{}` was already fused into `{}`; use that",
                            info.name,
                            self.ivn(fused)
                        ),
                    );
                }
                _ => {}
            }
        }
        self.fail(
            o,
            format!("axis `{}` is not a loop of this stage", info.name),
        )
    }

    fn marked(&self, o: OpId, axis: IterVar) -> Option<ForKind> {
        self.stages[o.index()].kinds.get(&axis).copied()
    }

    fn refuse_marked(&self, o: OpId, axis: IterVar, what: &str) -> Result<()> {
        if let Some(k) = self.marked(o, axis) {
            return self.fail(
                o,
                format!(
                    "cannot {what} axis `{}`: it is already {}",
                    self.ivn(axis),
                    kind_name(k)
                ),
            );
        }
        Ok(())
    }

    /// The loop axes of `t`'s stage, outermost first.
    pub fn leaf_axes(&self, t: Tensor) -> Result<Vec<IterVar>> {
        let o = self.sid(t)?;
        Ok(self.stages[o.index()].leaves.clone())
    }

    /// Data axis `d` of compute `t` (the `d`-th index its closure received).
    pub fn axis(&self, t: Tensor, d: usize) -> Result<IterVar> {
        let o = self.compute_sid(t, "axis")?;
        match self.graph.ops()[o.index()].axes().get(d) {
            Some(a) => Ok(*a),
            None => self.fail(o, format!("has no data axis {d} (rank {})", t.rank())),
        }
    }

    /// Reduction axis `d` of compute `t`.
    pub fn reduce_axis(&self, t: Tensor, d: usize) -> Result<IterVar> {
        let o = self.compute_sid(t, "reduce_axis")?;
        match self.graph.ops()[o.index()].reduce_axes().get(d) {
            Some(a) => Ok(*a),
            None => self.fail(o, format!("has no reduction axis {d}")),
        }
    }

    /// The extent of an axis (as scheduled; a stage computed inside another loops over
    /// the region it needs there instead).
    pub fn axis_extent(&self, axis: IterVar) -> Result<usize> {
        Ok(self.graph.iter_var(axis)?.extent)
    }

    /// Splits leaf `axis` into `(outer, inner)` with `inner` in `0..factor`. A factor that
    /// does not divide the extent adds a guard `outer * factor + inner < extent`.
    pub fn split(&mut self, t: Tensor, axis: IterVar, factor: usize) -> Result<(IterVar, IterVar)> {
        let o = self.compute_sid(t, "split")?;
        let pos = self.leaf_pos(o, axis)?;
        if factor == 0 {
            return self.fail(
                o,
                format!("cannot split axis `{}` by factor 0", self.ivn(axis)),
            );
        }
        if factor > i32::MAX as usize {
            return self.fail(o, format!("split factor {factor} is too large"));
        }
        self.refuse_marked(o, axis, "split")?;
        let (name, ext, kind) = (self.ivn(axis), self.extent(axis), self.iv_kind(axis));
        let outer =
            self.graph
                .new_iter_var(format!("{name}.outer"), ext.div_ceil(factor), kind, Some(o));
        let inner = self
            .graph
            .new_iter_var(format!("{name}.inner"), factor, kind, Some(o));
        let st = &mut self.stages[o.index()];
        st.leaves.splice(pos..=pos, [outer, inner]);
        st.relations.push(Relation::Split {
            parent: axis,
            outer,
            inner,
            factor,
        });
        Ok((outer, inner))
    }

    /// Puts the given leaf axes in this order, in the positions they occupy now (other
    /// leaves stay where they are).
    pub fn reorder(&mut self, t: Tensor, order: &[IterVar]) -> Result<()> {
        let o = self.compute_sid(t, "reorder")?;
        let mut pos = vec![];
        for (n, &a) in order.iter().enumerate() {
            pos.push(self.leaf_pos(o, a)?);
            if order[..n].contains(&a) {
                return self.fail(o, format!("reorder lists axis `{}` twice", self.ivn(a)));
            }
        }
        let mut slots = pos.clone();
        slots.sort_unstable();
        let mut leaves = self.stages[o.index()].leaves.clone();
        for (slot, &a) in slots.iter().zip(order) {
            leaves[*slot] = a;
        }
        // Nothing may end up inside a vectorized loop.
        for (p, &l) in leaves.iter().enumerate() {
            if self.marked(o, l) == Some(ForKind::Vectorized) && p + 1 != leaves.len() {
                return self.fail(
                    o,
                    format!(
                        "reorder would put axis `{}` inside vectorized axis `{}`",
                        self.ivn(leaves[p + 1]),
                        self.ivn(l)
                    ),
                );
            }
        }
        self.stages[o.index()].leaves = leaves;
        Ok(())
    }

    /// Splits `x` by `fx` and `y` by `fy` and orders the loops `xo, yo, xi, yi`;
    /// returns them in that order.
    pub fn tile(
        &mut self,
        t: Tensor,
        x: IterVar,
        y: IterVar,
        fx: usize,
        fy: usize,
    ) -> Result<(IterVar, IterVar, IterVar, IterVar)> {
        let o = self.compute_sid(t, "tile")?;
        let (px, py) = (self.leaf_pos(o, x)?, self.leaf_pos(o, y)?);
        if px >= py {
            return self.fail(
                o,
                format!(
                    "tile needs axis `{}` outside axis `{}`",
                    self.ivn(x),
                    self.ivn(y)
                ),
            );
        }
        for (a, f) in [(x, fx), (y, fy)] {
            if f == 0 {
                return self.fail(
                    o,
                    format!("cannot split axis `{}` by factor 0", self.ivn(a)),
                );
            }
            self.refuse_marked(o, a, "split")?;
        }
        let saved = self.stages[o.index()].clone();
        let r = (|| {
            let (xo, xi) = self.split(t, x, fx)?;
            let (yo, yi) = self.split(t, y, fy)?;
            self.reorder(t, &[xo, yo, xi, yi])?;
            Ok((xo, yo, xi, yi))
        })();
        if r.is_err() {
            self.stages[o.index()] = saved;
        }
        r
    }

    /// Fuses adjacent leaves `outer` (immediately outside) and `inner` into one loop
    /// over the product of their extents.
    pub fn fuse(&mut self, t: Tensor, outer: IterVar, inner: IterVar) -> Result<IterVar> {
        let o = self.compute_sid(t, "fuse")?;
        let (po, pi) = (self.leaf_pos(o, outer)?, self.leaf_pos(o, inner)?);
        if pi != po + 1 {
            return self.fail(
                o,
                format!(
                    "cannot fuse axes `{}` and `{}`: they are not adjacent with the first immediately outside the second",
                    self.ivn(outer),
                    self.ivn(inner)
                ),
            );
        }
        let (ko, ki) = (self.iv_kind(outer), self.iv_kind(inner));
        if ko != ki {
            return self.fail(
                o,
                format!(
                    "cannot fuse data axis and reduction axis (`{}` and `{}`)",
                    self.ivn(outer),
                    self.ivn(inner)
                ),
            );
        }
        self.refuse_marked(o, outer, "fuse")?;
        self.refuse_marked(o, inner, "fuse")?;
        let ext = self.extent(outer) as u128 * self.extent(inner) as u128;
        if ext > i32::MAX as u128 {
            return self.fail(o, "fused extent does not fit in int32");
        }
        let name = format!("{}.{}.fused", self.ivn(outer), self.ivn(inner));
        let fused = self.graph.new_iter_var(name, ext as usize, ko, Some(o));
        let st = &mut self.stages[o.index()];
        st.leaves.splice(po..=pi, [fused]);
        st.relations.push(Relation::Fuse {
            outer,
            inner,
            fused,
        });
        Ok(fused)
    }

    /// Marks `axis` vectorized: it must be the innermost loop of its stage.
    pub fn vectorize(&mut self, t: Tensor, axis: IterVar) -> Result<()> {
        let o = self.compute_sid(t, "vectorize")?;
        let pos = self.leaf_pos(o, axis)?;
        let n = self.stages[o.index()].leaves.len();
        if pos + 1 != n {
            return self.fail(
                o,
                format!(
                    "cannot vectorize axis `{}`: it is not the innermost loop (`{}` is)",
                    self.ivn(axis),
                    self.ivn(self.stages[o.index()].leaves[n - 1])
                ),
            );
        }
        if matches!(self.stages[o.index()].attach, Attach::At { .. })
            && !self.has_constant_extent(o, axis)
        {
            return self.fail(
                o,
                format!(
                    "cannot vectorize axis `{}`: its extent is not constant (it depends on the region inferred at the compute_at point); split it and vectorize the inner axis",
                    self.ivn(axis)
                ),
            );
        }
        self.refuse_marked(o, axis, "vectorize")?;
        self.stages[o.index()]
            .kinds
            .insert(axis, ForKind::Vectorized);
        Ok(())
    }

    /// Whether `axis` of stage `o` keeps its extent wherever the stage is computed (the
    /// inner axis of a split, a reduction axis, or a fuse of such axes).
    pub(crate) fn has_constant_extent(&self, o: OpId, axis: IterVar) -> bool {
        if self.iv_kind(axis) == IterKind::Reduce {
            return true;
        }
        for r in &self.stages[o.index()].relations {
            match *r {
                Relation::Split { inner, .. } if inner == axis => return true,
                Relation::Split { outer, parent, .. } if outer == axis => {
                    return self.has_constant_extent(o, parent);
                }
                Relation::Fuse {
                    outer,
                    inner,
                    fused,
                } if fused == axis => {
                    return self.has_constant_extent(o, outer)
                        && self.has_constant_extent(o, inner);
                }
                _ => {}
            }
        }
        false
    }

    /// Marks `axis` parallel (CPU threads). Not on a reduction axis, and not inside a
    /// vectorized loop.
    pub fn parallel(&mut self, t: Tensor, axis: IterVar) -> Result<()> {
        let o = self.compute_sid(t, "parallel")?;
        let pos = self.leaf_pos(o, axis)?;
        if self.iv_kind(axis) == IterKind::Reduce {
            return self.fail(
                o,
                format!(
                    "cannot parallelize reduction axis `{}` (its iterations update one accumulator)",
                    self.ivn(axis)
                ),
            );
        }
        if let Some(&v) = self.stages[o.index()].leaves[..pos]
            .iter()
            .find(|&&l| self.marked(o, l) == Some(ForKind::Vectorized))
        {
            return self.fail(
                o,
                format!(
                    "cannot parallelize axis `{}`: it is inside vectorized axis `{}`",
                    self.ivn(axis),
                    self.ivn(v)
                ),
            );
        }
        self.refuse_marked(o, axis, "parallelize")?;
        self.stages[o.index()].kinds.insert(axis, ForKind::Parallel);
        Ok(())
    }

    /// Marks `axis` to be fully unrolled.
    pub fn unroll(&mut self, t: Tensor, axis: IterVar) -> Result<()> {
        let o = self.compute_sid(t, "unroll")?;
        self.leaf_pos(o, axis)?;
        self.refuse_marked(o, axis, "unroll")?;
        self.stages[o.index()].kinds.insert(axis, ForKind::Unrolled);
        Ok(())
    }

    /// Binds `axis` to a GPU launch dimension. Each thread axis may be bound once per
    /// stage, only to data axes; bound axes must be the outermost loops (blocks outside
    /// threads), which lowering checks.
    pub fn bind(&mut self, t: Tensor, axis: IterVar, thread: ThreadAxis) -> Result<()> {
        let o = self.compute_sid(t, "bind")?;
        self.leaf_pos(o, axis)?;
        if self.iv_kind(axis) == IterKind::Reduce {
            return self.fail(
                o,
                format!(
                    "cannot bind reduction axis `{}` to {thread}",
                    self.ivn(axis)
                ),
            );
        }
        if let Some((&other, _)) = self.stages[o.index()]
            .kinds
            .iter()
            .find(|(_, k)| **k == ForKind::Thread(thread))
        {
            return self.fail(
                o,
                format!(
                    "cannot bind axis `{}` to {thread}: axis `{}` is already bound to it",
                    self.ivn(axis),
                    self.ivn(other)
                ),
            );
        }
        self.refuse_marked(o, axis, "bind")?;
        self.stages[o.index()]
            .kinds
            .insert(axis, ForKind::Thread(thread));
        Ok(())
    }

    /// Whether compute `reader` reads `op`, directly or through other computes.
    fn reads_transitively(&self, reader: OpId, op: OpId) -> bool {
        let mut stack = vec![reader];
        let mut seen = std::collections::HashSet::new();
        while let Some(r) = stack.pop() {
            if !seen.insert(r) {
                continue;
            }
            if let Some(b) = self.graph.ops()[r.index()].body() {
                let mut found = false;
                b.visit(&mut |e| {
                    if let Expr::Read { tensor, .. } = e {
                        found |= tensor.op() == op;
                        stack.push(tensor.op());
                    }
                });
                if found {
                    return true;
                }
            }
        }
        false
    }

    /// Computes `t` inside loop `axis` of stage `parent`, over the region of `t` that
    /// one iteration of that loop reads. `parent` must be `t`'s only consumer.
    pub fn compute_at(&mut self, t: Tensor, parent: Tensor, axis: IterVar) -> Result<()> {
        let o = self.compute_sid(t, "compute_at")?;
        let p = self.compute_sid(parent, "compute_at")?;
        if self.is_output(o) {
            return self.fail(o, "is an output; outputs are computed at the root");
        }
        if o == p {
            return self.fail(o, "cannot be computed at itself");
        }
        if let Err(e) = self.leaf_pos(p, axis) {
            return self.fail(
                o,
                format!(
                    "compute_at axis `{}` is not a loop of stage `{}` ({e})",
                    self.ivn(axis),
                    self.op_name(p)
                ),
            );
        }
        if !self.reads_transitively(p, o) {
            return self.fail(
                o,
                format!(
                    "cannot compute at stage `{}`: it does not read this stage",
                    self.op_name(p)
                ),
            );
        }
        let st = &self.stages[o.index()];
        if let Some((&v, _)) = st
            .kinds
            .iter()
            .find(|(v, k)| **k == ForKind::Vectorized && !self.has_constant_extent(o, **v))
        {
            return self.fail(
                o,
                format!(
                    "vectorized axis `{}` would get a non-constant extent at the compute_at point",
                    self.ivn(v)
                ),
            );
        }
        self.stages[o.index()].attach = Attach::At { parent: p, axis };
        Ok(())
    }

    /// Substitutes `t`'s body into every read of it (no loops, no buffer). Only for
    /// elementwise (non-reduction) computes that are not outputs.
    pub fn compute_inline(&mut self, t: Tensor) -> Result<()> {
        let o = self.compute_sid(t, "compute_inline")?;
        if self.is_output(o) {
            return self.fail(o, "cannot inline an output");
        }
        if self.graph.ops()[o.index()].is_reduction() {
            return self.fail(o, "cannot inline a reduction");
        }
        if let Some(c) = self
            .stages
            .iter()
            .find(|s| matches!(s.attach, Attach::At { parent, .. } if parent == o))
        {
            return self.fail(
                o,
                format!(
                    "cannot inline: stage `{}` is computed inside it",
                    self.op_name(c.op)
                ),
            );
        }
        self.stages[o.index()].attach = Attach::Inline;
        Ok(())
    }

    /// Puts `t` back at the root (undoes `compute_at` / `compute_inline`).
    pub fn compute_root(&mut self, t: Tensor) -> Result<()> {
        let o = self.compute_sid(t, "compute_root")?;
        self.stages[o.index()].attach = Attach::Root;
        Ok(())
    }

    /// The memory scope of `t`'s buffer (intermediates only; local or shared).
    pub fn set_scope(&mut self, t: Tensor, scope: Scope) -> Result<()> {
        let o = self.compute_sid(t, "set_scope")?;
        if self.is_output(o) {
            return self.fail(o, "is an output; outputs live in global memory");
        }
        if scope == Scope::Global {
            return self.fail(
                o,
                "intermediates are allocated inside the kernel, in local or shared scope",
            );
        }
        self.stages[o.index()].scope = Some(scope);
        Ok(())
    }

    /// Adds a stage `<name>.<scope>` that computes `t`'s body into a buffer of `scope`;
    /// `t` becomes a copy of it. With a reduction, the accumulation happens in the cache
    /// (typically `local`, computed at a loop of `t`) and `t` only writes the result
    /// back. Must come before other primitives on `t`. Returns the cache tensor.
    pub fn cache_write(&mut self, t: Tensor, scope: Scope) -> Result<Tensor> {
        let o = self.compute_sid(t, "cache_write")?;
        if scope == Scope::Global {
            return self.fail(o, "cache_write needs local or shared scope");
        }
        let st = &self.stages[o.index()];
        if !st.relations.is_empty() || !st.kinds.is_empty() {
            return self.fail(
                o,
                "cache_write must come before split/fuse/vectorize/parallel/unroll/bind on this stage",
            );
        }
        let op = self.graph.ops()[o.index()].clone();
        let OpKind::Compute { axes, body } = &op.kind else {
            return self.fail(o, "is a placeholder");
        };
        let cache_id = OpId(self.graph.ops().len() as u32);
        let mut rename = HashMap::new();
        let mut new_axes = vec![];
        for &a in axes {
            let n = self.graph.new_iter_var(
                self.ivn(a),
                self.extent(a),
                IterKind::Data,
                Some(cache_id),
            );
            rename.insert(a, n);
            new_axes.push(n);
        }
        for &r in op.reduce_axes() {
            let n = self.graph.new_iter_var(
                self.ivn(r),
                self.extent(r),
                IterKind::Reduce,
                Some(cache_id),
            );
            rename.insert(r, n);
        }
        let cache_body = rename_vars(body, &rename);
        let cache = self.add_op(Operation {
            name: format!("{}.{}", op.name, scope.name()),
            shape: op.shape.clone(),
            dtype: op.dtype,
            kind: OpKind::Compute {
                axes: new_axes,
                body: cache_body,
            },
        });
        self.stages[cache.op().index()].scope = Some(scope);
        let copy = Expr::Read {
            tensor: cache,
            indices: axes.iter().map(|a| Expr::Var(*a)).collect(),
        };
        let axes = axes.clone();
        self.graph.ops_mut_at(o).kind = OpKind::Compute {
            axes: axes.clone(),
            body: copy,
        };
        let st = &mut self.stages[o.index()];
        st.leaves = axes;
        Ok(cache)
    }

    /// Adds a stage `<name>.<scope>` that copies `t`, and makes `readers` read the copy
    /// instead of `t`. With shared scope, compute it at a loop of the reader inside its
    /// thread-bound loops and bind its axes to the same threads: the block loads the
    /// tile cooperatively, between barriers. Returns the cache tensor.
    pub fn cache_read(&mut self, t: Tensor, scope: Scope, readers: &[Tensor]) -> Result<Tensor> {
        let o = self.sid(t)?;
        if scope == Scope::Global {
            return self.fail(o, "cache_read needs local or shared scope");
        }
        if readers.is_empty() {
            return self.fail(o, "cache_read needs at least one reader");
        }
        let mut rs = vec![];
        for &r in readers {
            let ro = self.compute_sid(r, "cache_read")?;
            let mut reads = false;
            if let Some(b) = self.graph.ops()[ro.index()].body() {
                b.visit(&mut |e| {
                    if let Expr::Read { tensor, .. } = e {
                        reads |= tensor.op() == o;
                    }
                });
            }
            if !reads {
                return self.fail(
                    o,
                    format!(
                        "cache_read reader `{}` does not read this stage",
                        self.op_name(ro)
                    ),
                );
            }
            rs.push(ro);
        }
        let op = self.graph.ops()[o.index()].clone();
        let cache_id = OpId(self.graph.ops().len() as u32);
        const NAMES: [&str; 4] = ["ax0", "ax1", "ax2", "ax3"];
        let axes: Vec<IterVar> = op
            .shape
            .iter()
            .enumerate()
            .map(|(d, &e)| {
                let n = NAMES.get(d).map_or(format!("ax{d}"), |s| s.to_string());
                self.graph
                    .new_iter_var(n, e, IterKind::Data, Some(cache_id))
            })
            .collect();
        let body = Expr::Read {
            tensor: t,
            indices: axes.iter().map(|a| Expr::Var(*a)).collect(),
        };
        let cache = self.add_op(Operation {
            name: format!("{}.{}", op.name, scope.name()),
            shape: op.shape.clone(),
            dtype: op.dtype,
            kind: OpKind::Compute { axes, body },
        });
        self.stages[cache.op().index()].scope = Some(scope);
        for ro in rs {
            let rop = self.graph.ops_mut_at(ro);
            if let OpKind::Compute { body, .. } = &mut rop.kind {
                *body = replace_reads(body, o, cache);
            }
        }
        Ok(cache)
    }
}

/// `e` with every read of `from` reading `to` instead.
fn replace_reads(e: &Expr, from: OpId, to: Tensor) -> Expr {
    let r = |x: &Expr| replace_reads(x, from, to);
    match e {
        Expr::Read { tensor, indices } => Expr::Read {
            tensor: if tensor.op() == from { to } else { *tensor },
            indices: indices.iter().map(r).collect(),
        },
        Expr::Binary { op, lhs, rhs } => Expr::binary(*op, r(lhs), r(rhs)),
        Expr::Not(x) => Expr::Not(Box::new(r(x))),
        Expr::Select { cond, then, else_ } => super::expr::select(r(cond), r(then), r(else_)),
        Expr::Cast { to: d, value } => super::expr::cast(*d, r(value)),
        Expr::Call { intrinsic, args } => super::expr::call(*intrinsic, args.iter().map(r)),
        Expr::Reduce { kind, value, axes } => Expr::Reduce {
            kind: *kind,
            value: Box::new(r(value)),
            axes: axes.clone(),
        },
        leaf => leaf.clone(),
    }
}
