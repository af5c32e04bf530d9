//! Lowering a [`Schedule`] to one loop-IR kernel ([`PrimFunc`]).
//!
//! - **Parameters**: the placeholders reachable from the outputs, in creation order, as
//!   inputs; then the outputs, in the order given.
//! - **Stages**: in a topological order of the reachable operations (each after what it
//!   reads). A root stage gets its own loop nest over its whole shape; an intermediate
//!   root stage is materialised in a `local` allocation around the kernel body. An
//!   inlined stage gets no loops: each read of it is replaced by its body. A stage
//!   attached with `compute_at` is computed inside its consumer's loop, over the
//!   **region** the consumer reads in one iteration of that loop (bound inference:
//!   each read index is split into a part fixed outside the loop and an affine part in
//!   the loop variables inside it; a read that is not affine there takes the whole
//!   dimension), into a buffer of the region's size in the stage's scope; shared stages
//!   are surrounded by barriers.
//! - **Loops**: one per leaf axis, in leaf order, with the leaf's kind. Each original
//!   axis is rebuilt from the leaves (`parent = outer * f + inner` for splits,
//!   `floordiv`/`floormod` for fuses). A split whose factor does not divide its extent
//!   gets a guard `if parent < extent` around the store (innermost, so the bounds
//!   verifier sees it as a fact); so do region elements outside the tensor.
//! - **Reductions**: the accumulator is initialised just before the outermost
//!   reduction loop (over the data loops inside it, if any), then updated inside all
//!   loops: `out = out + x` / `max(out, x)` / `min(out, x)`.
//! - **Thread axes**: a leaf bound to a thread axis becomes a `launch_thread` loop; in
//!   a stage attached inside a loop already bound to that axis, it reuses the enclosing
//!   thread variable (guarded when its extent is smaller), so cooperative loads of a
//!   shared cache are spread over the block's threads.

use std::collections::{HashMap, HashSet};

use kiln_ir::DType;

use crate::error::{Error, Result};
use crate::tir::affine::Affine;
use crate::tir::semantics::Interval;
use crate::tir::visit::{Mutator, Substitute, walk_expr_mut};
use crate::tir::{
    self, BinOp, Buffer, BufferId, ForKind, PrimFunc, Scope, Stmt, ThreadAxis, ValueType, VarId,
};

use super::expr::{Expr, IterKind, IterVar, ReduceKind};
use super::graph::{Graph, OpId, OpKind, Tensor};
use super::schedule::{Attach, Relation, Schedule};
use super::tensorize::{self, Intrin};

/// Lowers `outputs` of `graph` with the default schedule (every stage at the root,
/// serial loops in compute order) to a kernel called `name`.
pub fn lower(graph: &Graph, outputs: &[Tensor], name: &str) -> Result<PrimFunc> {
    Schedule::new(graph, outputs)?.lower(name)
}

/// The region of a stage computed inside its consumer: per data dimension, the first
/// element (an expression of the enclosing loop variables) and the extent.
#[derive(Clone, Debug)]
struct Region {
    mins: Vec<tir::Expr>,
    extents: Vec<usize>,
}

struct Lowerer<'a> {
    s: &'a Schedule,
    g: &'a Graph,
    func: PrimFunc,
    /// Buffer of each materialised operation (parameter or allocation).
    bufs: HashMap<OpId, BufferId>,
    /// Stages attached to each stage, with their axis, in topological order.
    children: HashMap<OpId, Vec<(IterVar, OpId)>>,
    /// Enclosing thread-bound loops.
    threads: Vec<(ThreadAxis, VarId, i64)>,
    /// Range of every loop variable made so far.
    ranges: HashMap<VarId, (i64, i64)>,
    /// Enclosing loops that are not thread-bound, and enclosing vectorized loops.
    plain_depth: usize,
    vector_depth: usize,
}

/// Lowers `s` to a kernel called `name` (see the module doc).
pub(crate) fn lower_schedule(s: &Schedule, name: &str) -> Result<PrimFunc> {
    let g = &s.graph;
    let order = topo_order(s)?;
    let mut l = Lowerer {
        s,
        g,
        func: PrimFunc {
            name: name.to_string(),
            params: vec![],
            num_inputs: 0,
            buffers: vec![],
            vars: vec![],
            body: Stmt::seq([]),
        },
        bufs: HashMap::new(),
        children: HashMap::new(),
        threads: vec![],
        ranges: HashMap::new(),
        plain_depth: 0,
        vector_depth: 0,
    };
    // Parameters: placeholders in creation order, then outputs.
    let mut placeholders: Vec<OpId> = order
        .iter()
        .copied()
        .filter(|o| matches!(g.ops()[o.index()].kind, OpKind::Placeholder))
        .collect();
    placeholders.sort();
    for &p in &placeholders {
        let op = &g.ops()[p.index()];
        let b = l.func.add_buffer(Buffer::new(
            op.name.clone(),
            op.shape.clone(),
            op.dtype,
            Scope::Global,
        ));
        l.func.params.push(b);
        l.bufs.insert(p, b);
    }
    l.func.num_inputs = placeholders.len();
    for t in &s.outputs {
        let op = &g.ops()[t.op().index()];
        let b = l.func.add_buffer(Buffer::new(
            op.name.clone(),
            op.shape.clone(),
            op.dtype,
            Scope::Global,
        ));
        l.func.params.push(b);
        l.bufs.insert(t.op(), b);
    }
    l.check_attachments(&order)?;
    // Root stages, and allocations for root intermediates.
    let mut nests = vec![];
    let mut allocs = vec![];
    for &o in &order {
        let st = s.stage_of(o);
        if matches!(g.ops()[o.index()].kind, OpKind::Placeholder) || st.attach != Attach::Root {
            continue;
        }
        if !l.bufs.contains_key(&o) {
            let op = &g.ops()[o.index()];
            let b = l.func.add_buffer(Buffer::new(
                op.name.clone(),
                op.shape.clone(),
                op.dtype,
                st.scope.unwrap_or(Scope::Local),
            ));
            l.bufs.insert(o, b);
            allocs.push(b);
        }
        nests.push(l.stage_nest(o, None)?);
    }
    let mut body = Stmt::seq(nests);
    for b in allocs.into_iter().rev() {
        body = Stmt::allocate(b, body);
    }
    l.func.body = body;
    Ok(l.func)
}

/// The operations reachable from the outputs, each after every operation it reads.
fn topo_order(s: &Schedule) -> Result<Vec<OpId>> {
    let g = &s.graph;
    let mut order = vec![];
    let mut state: HashMap<OpId, bool> = HashMap::new(); // false: visiting, true: done
    fn visit(
        g: &Graph,
        o: OpId,
        state: &mut HashMap<OpId, bool>,
        order: &mut Vec<OpId>,
    ) -> Result<()> {
        match state.get(&o) {
            Some(true) => return Ok(()),
            Some(false) => {
                return Err(Error::InvalidArgument(format!(
                    "operation `{}` reads itself (a cycle)",
                    g.ops()[o.index()].name
                )));
            }
            None => {}
        }
        state.insert(o, false);
        let op = g.op(o)?;
        if let Some(b) = op.body() {
            let mut reads = vec![];
            b.visit(&mut |e| {
                if let Expr::Read { tensor, .. } = e {
                    reads.push(tensor.op());
                }
            });
            for r in reads {
                visit(g, r, state, order)?;
            }
        }
        state.insert(o, true);
        order.push(o);
        Ok(())
    }
    for t in &s.outputs {
        visit(g, t.op(), &mut state, &mut order)?;
    }
    Ok(order)
}

// ------------------------------------------------------------------ small builders

fn int(v: i64) -> tir::Expr {
    tir::Expr::int(v as i32)
}

fn is_int(e: &tir::Expr, v: i64) -> bool {
    e.as_int() == Some(v)
}

/// `a + b`, folding zeros and constants.
fn add(a: tir::Expr, b: tir::Expr) -> tir::Expr {
    match (a.as_int(), b.as_int()) {
        (Some(x), Some(y)) => int(x + y),
        (Some(0), _) => b,
        (_, Some(0)) => a,
        (_, Some(y)) if y < 0 => tir::Expr::binary(BinOp::Sub, a, int(-y)),
        _ => tir::Expr::binary(BinOp::Add, a, b),
    }
}

/// `a * c`, folding ones and zeros.
fn mul(a: tir::Expr, c: i64) -> tir::Expr {
    match a.as_int() {
        Some(x) => int(x * c),
        None if c == 1 => a,
        None if c == 0 => int(0),
        None => tir::Expr::binary(BinOp::Mul, a, int(c)),
    }
}

fn and_all(conds: Vec<tir::Expr>) -> Option<tir::Expr> {
    conds
        .into_iter()
        .reduce(|a, b| tir::Expr::binary(BinOp::And, a, b))
}

fn guarded(conds: Vec<tir::Expr>, s: Stmt) -> Stmt {
    match and_all(conds) {
        Some(c) => Stmt::if_then(c, s),
        None => s,
    }
}

/// An atom of a read index's affine form in bound inference: a loop variable inside the
/// compute_at point, or an outer sub-term (free of those variables), numbered in the
/// order [`IndexForms`] first met it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Term {
    Inner(VarId),
    Outer(usize),
}

/// Reads read indices as affine forms over [`Term`]s; the outer sub-terms it met, so
/// equal sub-terms of different indices are one atom.
struct IndexForms {
    inner: HashSet<VarId>,
    outer: Vec<tir::Expr>,
}

impl IndexForms {
    fn new(inner: HashSet<VarId>) -> IndexForms {
        IndexForms {
            inner,
            outer: vec![],
        }
    }

    /// The form of `e`, if it is affine in the inner variables with coefficients that
    /// fit `i64`.
    fn form(&mut self, e: &tir::Expr) -> Option<Affine<Term>> {
        let mut atom = |x: &tir::Expr| {
            if !mentions(x, &self.inner) {
                let i = match self.outer.iter().position(|o| o == x) {
                    Some(i) => i,
                    None => {
                        self.outer.push(x.clone());
                        self.outer.len() - 1
                    }
                };
                return Some(Term::Outer(i));
            }
            match x {
                tir::Expr::Var(v) => Some(Term::Inner(*v)),
                _ => None,
            }
        };
        let f = Affine::of(e, &mut atom)?;
        let fits = |c: i128| i64::try_from(c).is_ok();
        (fits(f.k()) && f.terms().iter().all(|&(_, c)| fits(c))).then_some(f)
    }

    /// `outer part of form + k` as an expression.
    fn outer_expr(&self, form: &Affine<Term>, k: i64) -> tir::Expr {
        let mut e = int(0);
        for &(t, c) in form.terms() {
            if let Term::Outer(i) = t {
                e = add(e, mul(self.outer[i].clone(), c as i64));
            }
        }
        add(e, int(k))
    }

    /// `inner part of form + k` as an expression.
    fn inner_expr(form: &Affine<Term>, k: i64) -> tir::Expr {
        let mut e = int(0);
        for &(t, c) in form.terms() {
            if let Term::Inner(v) = t {
                e = add(e, mul(tir::Expr::Var(v), c as i64));
            }
        }
        add(e, int(k))
    }
}

fn mentions(e: &tir::Expr, vars: &HashSet<VarId>) -> bool {
    let mut found = false;
    e.visit(&mut |x| {
        if let tir::Expr::Var(v) = x {
            found |= vars.contains(v);
        }
    });
    found
}

fn reduce_init(kind: ReduceKind, dtype: DType) -> tir::Expr {
    match kind {
        ReduceKind::Sum => tir::Expr::imm(0.0, dtype),
        ReduceKind::Prod => tir::Expr::imm(1.0, dtype),
        ReduceKind::Max | ReduceKind::Min => {
            let max = kind == ReduceKind::Max;
            if dtype.is_float() {
                tir::Expr::float(
                    if max {
                        f64::NEG_INFINITY
                    } else {
                        f64::INFINITY
                    },
                    dtype,
                )
            } else if dtype == DType::U64 {
                // 0 and u64::MAX (all ones) as the bit patterns uint64 is held as.
                tir::Expr::int_of(if max { 0 } else { -1 }, dtype)
            } else {
                let (lo, hi) = tir::semantics::int_range(dtype);
                tir::Expr::int_of(if max { lo } else { hi }, dtype)
            }
        }
    }
}

fn combine(kind: ReduceKind, acc: tir::Expr, x: tir::Expr) -> tir::Expr {
    let op = match kind {
        ReduceKind::Sum => BinOp::Add,
        ReduceKind::Max => BinOp::Max,
        ReduceKind::Min => BinOp::Min,
        ReduceKind::Prod => BinOp::Mul,
    };
    tir::Expr::binary(op, acc, x)
}

/// The loop structure of one stage at one place.
struct Nest {
    /// Leaf axes, outermost first, with their loop variable and extent.
    leaves: Vec<(IterVar, VarId, i64, ForKind, bool)>,
    /// Value of each data axis (relative to the stage's buffer origin).
    data: Vec<tir::Expr>,
    /// Guards over data axes and over reduction axes.
    data_guards: Vec<tir::Expr>,
    reduce_guards: Vec<tir::Expr>,
    /// Values of all root axes (absolute, for the body).
    env: HashMap<IterVar, tir::Expr>,
}

impl<'a> Lowerer<'a> {
    fn name(&self, o: OpId) -> String {
        self.s.op_name(o)
    }

    fn iv_name(&self, v: IterVar) -> String {
        self.g.iv_name(v)
    }

    /// Checks every `compute_at` and records the children of each stage.
    fn check_attachments(&mut self, order: &[OpId]) -> Result<()> {
        let reach: HashSet<OpId> = order.iter().copied().collect();
        // The materialised stages that read each op, through inlined stages.
        let mut readers: HashMap<OpId, HashSet<OpId>> = HashMap::new();
        for &o in order {
            let st = self.s.stage_of(o);
            if st.attach == Attach::Inline {
                continue;
            }
            let Some(body) = self.g.ops()[o.index()].body() else {
                continue;
            };
            let mut stack = vec![body.clone()];
            let mut seen = HashSet::new();
            while let Some(e) = stack.pop() {
                e.visit(&mut |x| {
                    if let Expr::Read { tensor, .. } = x {
                        let r = tensor.op();
                        if self.s.stage_of(r).attach == Attach::Inline {
                            if seen.insert(r)
                                && let Some(b) = self.g.ops()[r.index()].body()
                            {
                                stack.push(b.clone());
                            }
                        } else {
                            readers.entry(r).or_default().insert(o);
                        }
                    }
                });
            }
        }
        for &o in order {
            let st = self.s.stage_of(o);
            if let Attach::At { parent, axis } = st.attach {
                let name = self.name(o);
                if !reach.contains(&parent) {
                    return Err(Error::InvalidArgument(format!(
                        "stage `{name}`: compute_at target `{}` is not part of the lowered outputs",
                        self.name(parent)
                    )));
                }
                if self.s.stage_of(parent).attach == Attach::Inline {
                    return Err(Error::InvalidArgument(format!(
                        "stage `{name}`: compute_at target `{}` is inlined",
                        self.name(parent)
                    )));
                }
                let rs = readers.get(&o).cloned().unwrap_or_default();
                if rs.len() != 1 || !rs.contains(&parent) {
                    let mut names: Vec<String> = rs.iter().map(|r| self.name(*r)).collect();
                    names.sort();
                    return Err(Error::InvalidArgument(format!(
                        "stage `{name}` is computed at `{}` but is read by [{}]; compute_at needs the target to be its only consumer",
                        self.name(parent),
                        names.join(", ")
                    )));
                }
                if !self.s.stage_of(parent).leaves.contains(&axis) {
                    return Err(Error::InvalidArgument(format!(
                        "stage `{name}`: compute_at axis `{}` is not a loop of stage `{}`",
                        self.iv_name(axis),
                        self.name(parent)
                    )));
                }
                self.children.entry(parent).or_default().push((axis, o));
            }
        }
        Ok(())
    }

    fn new_var(&mut self, name: &str, extent: i64) -> VarId {
        let v = self.func.add_var(name, ValueType::I32);
        self.ranges.insert(v, (0, extent - 1));
        v
    }

    /// The range of an integer index expression, if simple enough to know.
    fn range_of(&self, e: &tir::Expr) -> Option<(i64, i64)> {
        let r = self.interval_of(e)?;
        Some((i64::try_from(r.lo()?).ok()?, i64::try_from(r.hi()?).ok()?))
    }

    fn interval_of(&self, e: &tir::Expr) -> Option<Interval> {
        match e {
            tir::Expr::Int { value, .. } => Some(Interval::point(*value as i128)),
            tir::Expr::Var(v) => {
                let (lo, hi) = self.ranges.get(v).copied()?;
                Some(Interval::new(lo as i128, hi as i128))
            }
            tir::Expr::Binary { op, lhs, rhs } => {
                let (a, b) = (self.interval_of(lhs)?, self.interval_of(rhs)?);
                let divisor = b.lo().filter(|&c| c > 0 && Some(c) == b.hi());
                match op {
                    BinOp::Add => Some(a.add(b)),
                    BinOp::Sub => Some(a.add(b.scale(-1))),
                    BinOp::Mul => Some(a.mul(b)),
                    BinOp::FloorDiv => Some(a.floordiv(divisor?)),
                    BinOp::FloorMod => Some(Interval::new(0, divisor? - 1)),
                    _ => None,
                }
            }
            _ => None,
        }
    }

    /// Makes the loop variables of stage `o` and the values of its axes.
    fn make_nest(&mut self, o: OpId, region: Option<&Region>) -> Result<Nest> {
        let st = self.s.stage_of(o);
        let op = &self.g.ops()[o.index()];
        // Extents of every axis.
        let mut ext: HashMap<IterVar, i64> = HashMap::new();
        for (d, &a) in op.axes().iter().enumerate() {
            let e = region.map_or(op.shape[d], |r| r.extents[d]);
            ext.insert(a, e as i64);
        }
        for &a in op.reduce_axes() {
            ext.insert(a, self.g.iter_var(a)?.extent as i64);
        }
        for r in &st.relations {
            match *r {
                Relation::Split {
                    parent,
                    outer,
                    inner,
                    factor,
                } => {
                    let p = ext[&parent];
                    ext.insert(outer, (p + factor as i64 - 1) / factor as i64);
                    ext.insert(inner, factor as i64);
                }
                Relation::Fuse {
                    outer,
                    inner,
                    fused,
                } => {
                    ext.insert(fused, ext[&outer] * ext[&inner]);
                }
            }
        }
        // Leaf variables.
        let mut leaves = vec![];
        let mut val: HashMap<IterVar, tir::Expr> = HashMap::new();
        let mut data_guards = vec![];
        let mut reduce_guards = vec![];
        for &leaf in &st.leaves {
            let e = ext[&leaf];
            let kind = st.kinds.get(&leaf).copied().unwrap_or(ForKind::Serial);
            let is_reduce = self.g.iter_var(leaf)?.kind == IterKind::Reduce;
            if let ForKind::Thread(axis) = kind
                && let Some(&(_, var, outer_ext)) = self.threads.iter().find(|t| t.0 == axis)
            {
                if e > outer_ext {
                    return Err(Error::InvalidArgument(format!(
                        "stage `{}`: axis `{}` of extent {e} is bound to {axis}, which the enclosing loops already bind with extent {outer_ext}",
                        self.name(o),
                        self.iv_name(leaf)
                    )));
                }
                if e < outer_ext {
                    let c = tir::Expr::binary(BinOp::Lt, tir::Expr::Var(var), int(e));
                    if is_reduce {
                        reduce_guards.push(c);
                    } else {
                        data_guards.push(c);
                    }
                }
                val.insert(leaf, tir::Expr::Var(var));
                leaves.push((leaf, var, e, kind, true));
                continue;
            }
            let name = self.iv_name(leaf);
            let var = self.new_var(&name, e);
            val.insert(leaf, tir::Expr::Var(var));
            leaves.push((leaf, var, e, kind, false));
        }
        // Rebuild the axes from the leaves, last relation first.
        for r in st.relations.iter().rev() {
            match *r {
                Relation::Split {
                    parent,
                    outer,
                    inner,
                    factor,
                } => {
                    let v = add(mul(val[&outer].clone(), factor as i64), val[&inner].clone());
                    let p = ext[&parent];
                    if p % factor as i64 != 0 {
                        let c = tir::Expr::binary(BinOp::Lt, v.clone(), int(p));
                        if self.g.iter_var(parent)?.kind == IterKind::Reduce {
                            reduce_guards.push(c);
                        } else {
                            data_guards.push(c);
                        }
                    }
                    val.insert(parent, v);
                }
                Relation::Fuse {
                    outer,
                    inner,
                    fused,
                } => {
                    let f = val[&fused].clone();
                    let n = ext[&inner];
                    if ext[&outer] == 1 {
                        val.insert(outer, int(0));
                        val.insert(inner, f);
                    } else if n == 1 {
                        val.insert(outer, f);
                        val.insert(inner, int(0));
                    } else {
                        val.insert(outer, tir::Expr::binary(BinOp::FloorDiv, f.clone(), int(n)));
                        val.insert(inner, tir::Expr::binary(BinOp::FloorMod, f, int(n)));
                    }
                }
            }
        }
        // Guard each original axis whose value is not provably in range from the loop
        // bounds alone (nested splits), so the bounds verifier sees one fact per index.
        let roots: Vec<(IterVar, bool)> = op
            .axes()
            .iter()
            .map(|&a| (a, false))
            .chain(op.reduce_axes().iter().map(|&a| (a, true)))
            .collect();
        for (a, is_reduce) in roots {
            let v = val[&a].clone();
            let e = ext[&a];
            if self.range_of(&v).is_some_and(|(lo, hi)| lo >= 0 && hi < e) {
                continue;
            }
            let c = tir::Expr::binary(BinOp::Lt, v, int(e));
            let list = if is_reduce {
                &mut reduce_guards
            } else {
                &mut data_guards
            };
            if !list.contains(&c) {
                list.push(c);
            }
        }
        let mut env = HashMap::new();
        let mut data = vec![];
        for (d, &a) in op.axes().iter().enumerate() {
            let v = val[&a].clone();
            data.push(v.clone());
            let abs = match region {
                Some(r) => {
                    let abs = add(r.mins[d].clone(), v);
                    let full = is_int(&r.mins[d], 0) && r.extents[d] == op.shape[d];
                    if !full {
                        let known = self.range_of(&abs);
                        if known.is_none_or(|(lo, _)| lo < 0) {
                            data_guards.push(tir::Expr::binary(BinOp::Ge, abs.clone(), int(0)));
                        }
                        if known.is_none_or(|(_, hi)| hi >= op.shape[d] as i64) {
                            data_guards.push(tir::Expr::binary(
                                BinOp::Lt,
                                abs.clone(),
                                int(op.shape[d] as i64),
                            ));
                        }
                    }
                    abs
                }
                None => v,
            };
            env.insert(a, abs);
        }
        for &a in op.reduce_axes() {
            env.insert(a, val[&a].clone());
        }
        Ok(Nest {
            leaves,
            data,
            data_guards,
            reduce_guards,
            env,
        })
    }

    /// The loop nest of stage `o` (over `region` when attached).
    fn stage_nest(&mut self, o: OpId, region: Option<&Region>) -> Result<Stmt> {
        if let Some(intrin) = self.s.stage_of(o).tensorize {
            return self.tensorized(o, region, intrin);
        }
        let nest = self.make_nest(o, region)?;
        let op = &self.g.ops()[o.index()];
        let buf = self.bufs[&o];
        let body = op.body().expect("computes only").clone();
        // Buffers of the stages attached here (shapes fixed once regions are known).
        let children = self.children.get(&o).cloned().unwrap_or_default();
        for &(_, c) in &children {
            let cop = &self.g.ops()[c.index()];
            let cbuf = self.func.add_buffer(Buffer::new(
                cop.name.clone(),
                cop.shape.clone(),
                cop.dtype,
                self.s.stage_of(c).scope.unwrap_or(Scope::Local),
            ));
            self.bufs.insert(c, cbuf);
        }
        let (value, reduce) = match &body {
            Expr::Reduce { kind, value, .. } => (self.expr(value, &nest.env)?, Some(*kind)),
            b => (self.expr(b, &nest.env)?, None),
        };
        // Regions of the stages attached here, and their buffers.
        let mut value = value;
        let mut regions: HashMap<OpId, Region> = HashMap::new();
        for &(axis, c) in &children {
            let level = nest
                .leaves
                .iter()
                .position(|l| l.0 == axis)
                .expect("checked in check_attachments");
            let mut inner: HashMap<VarId, i64> = nest.leaves[level + 1..]
                .iter()
                .map(|l| (l.1, l.2))
                .collect();
            // A shared buffer serves the whole block: relax the thread indices too.
            if self.s.stage_of(c).scope == Some(Scope::Shared) {
                for l in &nest.leaves {
                    if let ForKind::Thread(a) = l.3
                        && !a.is_block()
                    {
                        inner.insert(l.1, l.2);
                    }
                }
                for &(a, v, e) in &self.threads {
                    if !a.is_block() {
                        inner.insert(v, e);
                    }
                }
            }
            let cop = &self.g.ops()[c.index()];
            let cbuf = self.bufs[&c];
            let mut accesses = vec![];
            value.visit(&mut |e| {
                if let tir::Expr::Load { buffer, indices } = e
                    && *buffer == cbuf
                {
                    accesses.push(indices.clone());
                }
            });
            let mut forms = IndexForms::new(inner.keys().copied().collect());
            let (region, rewrite) = infer_region(&cop.shape, &accesses, &inner, &mut forms);
            self.func.buffers[cbuf.index()].shape = region.extents.clone();
            value = rewrite_loads(&value, cbuf, &rewrite, &mut forms);
            regions.insert(c, region);
        }
        // The innermost statement.
        let store_idx = nest.data.clone();
        let mut all_guards = nest.data_guards.clone();
        all_guards.extend(nest.reduce_guards.iter().cloned());
        let (init, update) = match reduce {
            Some(kind) => {
                let acc = tir::Expr::load(buf, store_idx.clone());
                (
                    Some(Stmt::store(
                        buf,
                        store_idx.clone(),
                        reduce_init(kind, op.dtype),
                    )),
                    Stmt::store(buf, store_idx, combine(kind, acc, value)),
                )
            }
            None => (None, Stmt::store(buf, store_idx, value)),
        };
        let innermost = guarded(all_guards, update);
        let first_reduce = nest
            .leaves
            .iter()
            .position(|l| self.g.iter_vars_kind(l.0) == IterKind::Reduce);
        self.build(o, &nest, 0, innermost, init, first_reduce, &regions)
    }

    /// Stage `o` (over `region` when attached) as one micro-kernel call: the declared
    /// tensors' origins are the stage's axes at the region's minimum and the reduction
    /// at 0 (see [`super::tensorize`]).
    fn tensorized(&mut self, o: OpId, region: Option<&Region>, intrin: Intrin) -> Result<Stmt> {
        let op = &self.g.ops()[o.index()];
        let rank = op.shape.len();
        let (mins, extents) = match region {
            Some(r) => (r.mins.clone(), r.extents.clone()),
            None => (vec![int(0); rank], op.shape.clone()),
        };
        let fail =
            |m: String| Error::InvalidArgument(format!("tensorize: stage `{}` {m}", op.name));
        if self.children.get(&o).is_some_and(|c| !c.is_empty()) {
            return Err(fail("has stages computed at it".into()));
        }
        let (dims, zeroed, reads, kernel) = tensorize::call_shape(self.g, o, intrin, &extents)?;
        if let Some(d) = (0..rank).find(|d| !dims.contains(d) && extents[*d] != 1) {
            return Err(fail(format!(
                "covers {} elements of dimension {d} there, which the {} call does not walk",
                extents[d],
                kernel.name()
            )));
        }
        let mut env: HashMap<IterVar, tir::Expr> = op.axes().iter().copied().zip(mins).collect();
        for &u in &zeroed {
            env.insert(u, int(0));
        }
        let mut operands = vec![];
        for (read, axes) in reads {
            match &mut self.expr(&read, &env)? {
                tir::Expr::Load { buffer, indices } => operands.push(tir::Operand {
                    buffer: *buffer,
                    base: std::mem::take(indices),
                    axes,
                }),
                _ => return Err(fail("reads a stage without a buffer (inlined)".into())),
            }
        }
        operands.push(tir::Operand {
            buffer: self.bufs[&o],
            base: vec![int(0); rank],
            axes: dims,
        });
        Ok(Stmt::MicroKernel(Box::new(tir::KernelCall {
            kernel,
            operands,
        })))
    }

    /// Loops from `level` inward around `innermost`.
    #[allow(clippy::too_many_arguments)]
    fn build(
        &mut self,
        o: OpId,
        nest: &Nest,
        level: usize,
        innermost: Stmt,
        init: Option<Stmt>,
        first_reduce: Option<usize>,
        regions: &HashMap<OpId, Region>,
    ) -> Result<Stmt> {
        if level == nest.leaves.len() {
            return Ok(innermost);
        }
        let (leaf, var, extent, kind, reused) = nest.leaves[level];
        let mut init_stmt = None;
        if first_reduce == Some(level)
            && let Some(init) = &init
        {
            init_stmt = Some(self.init_nest(o, nest, level, init.clone())?);
        }
        let fail = |l: &Self, m: String| -> Result<Stmt> {
            Err(Error::InvalidArgument(format!(
                "stage `{}`: axis `{}` {m}",
                l.name(o),
                l.iv_name(leaf)
            )))
        };
        match kind {
            ForKind::Thread(axis) if !reused && self.plain_depth > 0 => {
                return fail(
                    self,
                    format!(
                        "is bound to {axis} but sits inside a loop that is not thread-bound; thread-bound axes must be the outermost loops"
                    ),
                );
            }
            ForKind::Parallel if self.vector_depth > 0 => {
                return fail(self, "is parallel but sits inside a vectorized loop".into());
            }
            ForKind::Vectorized if level + 1 != nest.leaves.len() => {
                return fail(self, "is vectorized but is not the innermost loop".into());
            }
            ForKind::Vectorized
                if matches!(self.s.stage_of(o).attach, Attach::At { .. })
                    && !self.s.has_constant_extent(o, leaf) =>
            {
                return fail(
                    self,
                    "is vectorized but its extent is inferred at the compute_at point (not constant); split it and vectorize the inner axis".into(),
                );
            }
            _ => {}
        }
        let (dp, dv) = match kind {
            ForKind::Thread(axis) => {
                if !reused {
                    self.threads.push((axis, var, extent));
                }
                (0, 0)
            }
            ForKind::Vectorized => (1, 1),
            _ => (1, 0),
        };
        self.plain_depth += dp;
        self.vector_depth += dv;
        let inner = self.build(o, nest, level + 1, innermost, init, first_reduce, regions);
        let inner = inner.and_then(|body| self.attach_children(o, leaf, body, regions));
        self.plain_depth -= dp;
        self.vector_depth -= dv;
        if let ForKind::Thread(_) = kind
            && !reused
        {
            self.threads.pop();
        }
        let body = inner?;
        let lp = if reused {
            body
        } else {
            Stmt::for_(var, 0, extent, kind, body)
        };
        Ok(match init_stmt {
            Some(i) => Stmt::seq([i, lp]),
            None => lp,
        })
    }

    /// `body` preceded by the nests of the stages attached at `leaf` of stage `o`, each
    /// in its allocation (between barriers when shared).
    fn attach_children(
        &mut self,
        o: OpId,
        leaf: IterVar,
        mut body: Stmt,
        regions: &HashMap<OpId, Region>,
    ) -> Result<Stmt> {
        // Stages attached at this loop, last first so the first ends up outermost.
        let attached: Vec<OpId> = self
            .children
            .get(&o)
            .map(|v| v.iter().filter(|c| c.0 == leaf).map(|c| c.1).collect())
            .unwrap_or_default();
        for c in attached.into_iter().rev() {
            let cnest = self.stage_nest(c, Some(&regions[&c]))?;
            let cbuf = self.bufs[&c];
            let shared = self.func.buffers[cbuf.index()].scope == Scope::Shared;
            body = if shared {
                Stmt::allocate(cbuf, Stmt::seq([Stmt::Barrier, cnest, Stmt::Barrier, body]))
            } else {
                Stmt::allocate(cbuf, Stmt::seq([cnest, body]))
            };
        }
        Ok(body)
    }

    /// The initialisation of a reduction: loops over the data leaves from `level`
    /// inward (with fresh variables), the data guards, and the init store.
    fn init_nest(&mut self, o: OpId, nest: &Nest, level: usize, init: Stmt) -> Result<Stmt> {
        let data_inner: Vec<_> = nest.leaves[level..]
            .iter()
            .filter(|l| self.g.iter_vars_kind(l.0) == IterKind::Data)
            .copied()
            .collect();
        if data_inner.is_empty() {
            return Ok(guarded(nest.data_guards.clone(), init));
        }
        // Substitute fresh variables for the data leaves inside the reduction.
        let mut subst: HashMap<VarId, tir::Expr> = HashMap::new();
        let mut loops = vec![];
        for &(leaf, var, extent, kind, _) in &data_inner {
            if let ForKind::Thread(axis) = kind {
                return Err(Error::InvalidArgument(format!(
                    "stage `{}`: axis `{}` is bound to {axis} but sits inside a reduction loop; put thread-bound axes outside the reduction axes",
                    self.name(o),
                    self.iv_name(leaf)
                )));
            }
            let nv = self.new_var(&self.iv_name(leaf), extent);
            subst.insert(var, tir::Expr::Var(nv));
            let k = if kind == ForKind::Vectorized {
                ForKind::Vectorized
            } else {
                ForKind::Serial
            };
            loops.push((nv, extent, k));
        }
        let guards: Vec<tir::Expr> = nest
            .data_guards
            .iter()
            .map(|g| subst_vars(g, &subst))
            .collect();
        let init = subst_stmt(&init, &subst);
        let mut s = guarded(guards, init);
        for (v, e, k) in loops.into_iter().rev() {
            s = Stmt::for_(v, 0, e, k, s);
        }
        Ok(s)
    }

    /// Lowers a tensor expression with the index variables bound by `env`.
    fn expr(&mut self, e: &Expr, env: &HashMap<IterVar, tir::Expr>) -> Result<tir::Expr> {
        Ok(match e {
            Expr::Int { value, dtype } => tir::Expr::int_of(*value, *dtype),
            Expr::Float { value, dtype } => tir::Expr::float(*value, *dtype),
            Expr::Bool(b) => tir::Expr::Bool(*b),
            Expr::Var(v) => env.get(v).cloned().ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "index variable `{}` is not bound here",
                    self.iv_name(*v)
                ))
            })?,
            Expr::Read { tensor, indices } => {
                let idx = indices
                    .iter()
                    .map(|i| self.expr(i, env))
                    .collect::<Result<Vec<_>>>()?;
                let o = tensor.op();
                if self.s.stage_of(o).attach == Attach::Inline {
                    let op = &self.g.ops()[o.index()];
                    let body = op.body().expect("only computes are inlined").clone();
                    let inner_env: HashMap<IterVar, tir::Expr> =
                        op.axes().iter().copied().zip(idx).collect();
                    self.expr(&body, &inner_env)?
                } else {
                    let b = match self.bufs.get(&o) {
                        Some(b) => *b,
                        None => {
                            return Err(Error::InvalidArgument(format!(
                                "stage `{}` is read before it is computed (a compute_at placement that does not enclose its reader?)",
                                self.name(o)
                            )));
                        }
                    };
                    tir::Expr::load(b, idx)
                }
            }
            Expr::Binary { op, lhs, rhs } => {
                tir::Expr::binary(*op, self.expr(lhs, env)?, self.expr(rhs, env)?)
            }
            Expr::Not(x) => tir::Expr::Not(Box::new(self.expr(x, env)?)),
            Expr::Select { cond, then, else_ } => tir::Expr::select(
                self.expr(cond, env)?,
                self.expr(then, env)?,
                self.expr(else_, env)?,
            ),
            Expr::Cast { to, value } => self.expr(value, env)?.cast(*to),
            Expr::Call { intrinsic, args } => tir::Expr::call(
                *intrinsic,
                args.iter()
                    .map(|a| self.expr(a, env))
                    .collect::<Result<Vec<_>>>()?,
            ),
            Expr::Reduce { kind, .. } => {
                return Err(Error::InvalidArgument(format!(
                    "{} inside an expression (reductions must be the whole body of a compute)",
                    kind.name()
                )));
            }
        })
    }
}

impl Graph {
    fn iter_vars_kind(&self, v: IterVar) -> IterKind {
        self.iter_var(v).map_or(IterKind::Data, |i| i.kind)
    }
}

/// Per dimension, how a read index becomes an index into the region buffer: either the
/// affine inner part plus a constant (when the outer part matched the region's), or the
/// index itself (whole dimension).
#[derive(Clone, Debug)]
enum DimRewrite {
    Whole,
    Shift {
        /// The outer terms (constant 0).
        outer: Affine<Term>,
        lo: i64,
    },
}

/// An outer part (terms fixed at the compute_at loop) and the span `[lo, hi]` of the
/// inner part of a read index.
type OuterSpan = (Affine<Term>, i64, i64);

/// The region of a tensor of `shape` read by `accesses`, with `inner` loop variables
/// (and their extents) free.
fn infer_region(
    shape: &[usize],
    accesses: &[Vec<tir::Expr>],
    inner: &HashMap<VarId, i64>,
    forms: &mut IndexForms,
) -> (Region, Vec<DimRewrite>) {
    let mut mins = vec![];
    let mut extents = vec![];
    let mut rewrites = vec![];
    for (d, &n) in shape.iter().enumerate() {
        // (outer part, lowest, highest) over the accesses seen so far.
        let mut common: Option<OuterSpan> = None;
        let mut ok = !accesses.is_empty();
        for acc in accesses {
            let Some(a) = acc.get(d).and_then(|ix| forms.form(ix)) else {
                ok = false;
                break;
            };
            let (inner_part, outer_part) = a.split(|t| matches!(t, Term::Inner(_)));
            let span = inner_part.range(|t| match t {
                Term::Inner(v) => Interval::new(0, (inner[v] as i128 - 1).max(0)),
                Term::Outer(_) => Interval::full(),
            });
            let span = span.add(Interval::point(a.k()));
            let (Some(lo), Some(hi)) = (
                span.lo().and_then(|x| i64::try_from(x).ok()),
                span.hi().and_then(|x| i64::try_from(x).ok()),
            ) else {
                ok = false;
                break;
            };
            let outer = outer_part.with_k(0).expect("a smaller constant");
            match &mut common {
                None => common = Some((outer, lo, hi)),
                Some((o, l, h)) => {
                    if *o != outer {
                        ok = false;
                        break;
                    }
                    *l = (*l).min(lo);
                    *h = (*h).max(hi);
                }
            }
        }
        match common {
            Some((outer, lo, hi)) if ok && ((hi - lo + 1) as usize) < n => {
                mins.push(forms.outer_expr(&outer, lo));
                extents.push((hi - lo + 1) as usize);
                rewrites.push(DimRewrite::Shift { outer, lo });
            }
            _ => {
                mins.push(int(0));
                extents.push(n);
                rewrites.push(DimRewrite::Whole);
            }
        }
    }
    (Region { mins, extents }, rewrites)
}

/// Rewrites the loads of `buf` in `e` to index the region buffer.
fn rewrite_loads(
    e: &tir::Expr,
    buf: BufferId,
    rw: &[DimRewrite],
    forms: &mut IndexForms,
) -> tir::Expr {
    let mut out = e.clone();
    RegionLoads { buf, rw, forms }.mutate_expr(&mut out);
    out
}

/// Rewrites the loads of `buf` to index its region buffer (see [`DimRewrite`]).
struct RegionLoads<'a> {
    buf: BufferId,
    rw: &'a [DimRewrite],
    forms: &'a mut IndexForms,
}

impl Mutator for RegionLoads<'_> {
    fn mutate_expr(&mut self, e: &mut tir::Expr) {
        let tir::Expr::Load { buffer, indices } = e else {
            return walk_expr_mut(self, e);
        };
        if *buffer != self.buf {
            return walk_expr_mut(self, e);
        }
        for (ix, r) in indices.iter_mut().zip(self.rw) {
            if let DimRewrite::Shift { outer, lo } = r {
                // ix = outer + inner + k  ->  inner + k - lo (the outer parts cancel).
                let form = self.forms.form(ix);
                let matches = |a: &Affine<Term>| {
                    a.split(|t| matches!(t, Term::Inner(_)))
                        .1
                        .with_k(0)
                        .as_ref()
                        == Some(outer)
                };
                *ix = match form {
                    Some(a) if matches(&a) => IndexForms::inner_expr(&a, a.k() as i64 - lo),
                    _ => {
                        tir::Expr::binary(BinOp::Sub, ix.clone(), self.forms.outer_expr(outer, *lo))
                    }
                };
            }
        }
    }
}

fn subst_vars(e: &tir::Expr, m: &HashMap<VarId, tir::Expr>) -> tir::Expr {
    let mut out = e.clone();
    Substitute(m).mutate_expr(&mut out);
    out
}

fn subst_stmt(s: &Stmt, m: &HashMap<VarId, tir::Expr>) -> Stmt {
    let mut out = s.clone();
    Substitute(m).mutate_stmt(&mut out);
    out
}
