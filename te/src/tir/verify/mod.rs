//! The loop-IR verifier. It walks a [`PrimFunc`] once and collects **every** error, each
//! with its location (the function and the enclosing loops), so one run shows all that
//! is wrong. It checks:
//!
//! - **Structure**: parameters are valid global buffers listed once; every buffer used
//!   is a parameter or allocated (local or shared scope) in an enclosing `allocate`;
//!   every variable is used only inside the `for`/`let` that binds it and is not bound
//!   again inside its own scope; loop variables are `int32`/`int64` scalars; extents
//!   are not negative and a loop's exclusive end fits its variable's type (the counter
//!   reaches it); vectorized loops have an extent of at least 1.
//! - **Types**: immediates fit their dtype; both operands of a binary op have the same
//!   [`ValueType`]; `floordiv`/`floormod` take integers, `&&`/`||`/`!` and conditions
//!   take bools; a `select` condition has one lane or the branches' lanes; intrinsic
//!   arity and operand types; `ramp` base/stride are integer scalars; a load or store has
//!   one `int32`/`int64` index per buffer dimension, scalar or of one common lane count,
//!   and a store's value has the buffer's dtype and the indices' lanes; a `let` value
//!   has the variable's type.
//! - **GPU structure**: thread-bound loops start at 0, are not nested inside other
//!   (serial, parallel, vectorized, unrolled) loops, do not bind one axis twice, and
//!   put `blockIdx` outside `threadIdx`; shared allocations sit inside a thread-bound
//!   loop; barriers sit inside a `threadIdx`-bound loop.
//! - **Bounds**: every load and store is within its buffer's extent, in every dimension,
//!   for every iteration. Shapes are static, so this is interval analysis over affine
//!   forms: each index is normalized to `sum(coef * atom) + const` (atoms are loop
//!   variables, the lane of a ramp, and non-affine sub-terms such as `floordiv(e, c)`,
//!   keyed structurally so `x + -1` and `x - 1` agree; let-bound integer values are
//!   substituted). Loop variables range over `[min, min + extent - 1]`; `floordiv` and
//!   `floormod` by positive constants, `min`, `max`, `select`, products and casts have
//!   interval rules (and `floordiv(c*t + k, c)`, `floormod(c*t + k, c)` simplify).
//!   Inside `if (cond)` (and the else branch, for the negation) and inside the chosen
//!   side of a `select`, each comparison of a conjunction (`e < c`, `c <= e`, `a >= b`,
//!   `==`) becomes a fact `terms in [lo, hi]` that refines any index containing those
//!   terms (scaled by any integer factor) and, for a single variable, the variable's
//!   own range. Code under contradictory facts (or in an empty loop) is unreachable and
//!   not bounds-checked.
//!
//!   The proof is sound under wrapping integer semantics (module `bounds`): an
//!   operation that may wrap is modelled as ranging over its whole dtype, and one on
//!   the affine spine of an index is refused.
//! - **Limits** (module [`limits`], [`Limits`]): the total number of loop iterations
//!   and the bytes of local/shared buffers live at once are bounded, and every buffer's
//!   size fits the address space — a kernel from a file cannot ask for an endless loop
//!   or a stack overflow.
//!
//! Precision (it is conservative; it may reject safe code): facts are only drawn from
//! comparisons in conjunctions (not from `||`, except negated) whose operands read no
//! buffer the kernel stores to; non-affine terms only match structurally; products of
//! two variables use corner bounds.

mod bounds;
pub mod limits;

use std::collections::HashMap;
use std::fmt;

use kiln_ir::DType;

use super::expr::{BinOp, Expr, Intrinsic};
use super::func::PrimFunc;
use super::printer::Printer;
use super::semantics::{Interval, int_range};
use super::stmt::{ForKind, Stmt, ThreadAxis};
use super::types::{BufferId, Scope, ValueType, VarId};
use super::visit::deep;
use crate::error::{Error, Result};
use bounds::{Fact, Lin};
pub use limits::Limits;

/// One problem the verifier found.
#[derive(Clone, Debug, PartialEq)]
pub struct VerifyError {
    /// Where: the function and the enclosing loops, e.g.
    /// `@kernel, for %i in [0, 64), for %j in [0, 64)`.
    pub location: String,
    /// What is wrong.
    pub message: String,
}

impl VerifyError {
    /// All errors, one per line.
    pub fn join(errors: &[VerifyError]) -> String {
        errors
            .iter()
            .map(|e| e.to_string())
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl fmt::Display for VerifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (in {})", self.message, self.location)
    }
}

/// Verifies `func` under the default [`Limits`]; `Err(Error::Verify(all errors))` if
/// anything is wrong.
pub fn verify(func: &PrimFunc) -> Result<()> {
    verify_with(func, &Limits::default())
}

/// Verifies `func` under `limits`.
pub fn verify_with(func: &PrimFunc, limits: &Limits) -> Result<()> {
    let errors = check_with(func, limits);
    if errors.is_empty() {
        Ok(())
    } else {
        Err(Error::Verify(errors))
    }
}

/// Every error of `func` under the default [`Limits`] (empty if it is well formed, in
/// bounds and within the limits).
pub fn check(func: &PrimFunc) -> Vec<VerifyError> {
    check_with(func, &Limits::default())
}

/// Every error of `func` under `limits`.
///
/// A `microkernel` call is checked as its declaration's loops over its operands'
/// regions ([`super::microkernel::expand`]): its operand shapes, then the bounds of
/// every element it touches and its iterations under the limits.
pub fn check_with(func: &PrimFunc, limits: &Limits) -> Vec<VerifyError> {
    let expanded;
    let func = match super::microkernel::expand(func) {
        Ok(f) => {
            expanded = f;
            &expanded
        }
        Err(e) => {
            return vec![VerifyError {
                location: format!("@{}", func.name),
                message: e.to_string(),
            }];
        }
    };
    let mut v = Verifier::new(func, true);
    v.params();
    v.stmt(&func.body);
    let mut errors = v.errors;
    errors.extend(limits::check(func, limits));
    errors
}

/// The type of an expression of `func`, with every variable and buffer taken as in scope.
pub fn type_of(func: &PrimFunc, e: &Expr) -> Result<ValueType> {
    let mut v = Verifier::new(func, false);
    match v.ty(e) {
        Some(t) if v.errors.is_empty() => Ok(t),
        _ => Err(Error::Verify(v.errors)),
    }
}

struct Saved {
    facts: usize,
    atom_log: usize,
    ranges: Vec<Option<Interval>>,
    reachable: bool,
}

struct Verifier<'a> {
    func: &'a PrimFunc,
    printer: Printer<'a>,
    errors: Vec<VerifyError>,
    /// Whether to check scoping (off for [`type_of`]).
    scoped: bool,
    var_bound: Vec<bool>,
    buf_live: Vec<bool>,
    frames: Vec<String>,
    thread_axes: Vec<ThreadAxis>,
    plain_loops: usize,
    ranges: Vec<Option<Interval>>,
    let_forms: HashMap<VarId, Lin>,
    /// The range of each opaque atom in the current scope...
    atom_ranges: HashMap<String, Interval>,
    /// ... and how to undo each change to it when a scope ends.
    atom_log: Vec<(String, Option<Interval>)>,
    facts: Vec<Fact>,
    reachable: bool,
    /// Which buffers some statement stores to.
    stored: Vec<bool>,
    /// The `+ - * ramp` nodes found possibly wrapping since the last access began.
    wraps: Vec<usize>,
}

impl<'a> Verifier<'a> {
    fn new(func: &'a PrimFunc, scoped: bool) -> Verifier<'a> {
        Verifier {
            func,
            printer: Printer::new(func),
            errors: vec![],
            scoped,
            var_bound: vec![false; func.vars.len()],
            buf_live: vec![false; func.buffers.len()],
            frames: vec![],
            thread_axes: vec![],
            plain_loops: 0,
            ranges: vec![None; func.vars.len()],
            let_forms: HashMap::new(),
            atom_ranges: HashMap::new(),
            atom_log: vec![],
            facts: vec![],
            reachable: true,
            stored: stored_buffers(func),
            wraps: vec![],
        }
    }

    fn error(&mut self, message: impl Into<String>) {
        let mut location = format!("@{}", self.func.name);
        for f in &self.frames {
            location.push_str(", ");
            location.push_str(f);
        }
        self.errors.push(VerifyError {
            location,
            message: message.into(),
        });
    }

    fn bname(&self, b: BufferId) -> String {
        self.printer.names().buffer(b)
    }

    fn vname(&self, v: VarId) -> String {
        self.printer.names().var(v)
    }

    fn params(&mut self) {
        if self.func.num_inputs > self.func.params.len() {
            self.error(format!(
                "num_inputs is {} but there are only {} parameters",
                self.func.num_inputs,
                self.func.params.len()
            ));
        }
        for (k, &p) in self.func.params.iter().enumerate() {
            let Some(b) = self.func.buffer(p) else {
                self.error(format!(
                    "parameter {k} is {p}, which is not in the buffer arena"
                ));
                continue;
            };
            if b.scope != Scope::Global {
                self.error(format!(
                    "parameter {} has scope {}; parameters must be global",
                    self.bname(p),
                    b.scope
                ));
            }
            if self.func.params[..k].contains(&p) {
                self.error(format!("parameter {} is listed twice", self.bname(p)));
            }
            self.buf_live[p.index()] = true;
        }
    }

    fn save(&self) -> Saved {
        Saved {
            facts: self.facts.len(),
            atom_log: self.atom_log.len(),
            ranges: self.ranges.clone(),
            reachable: self.reachable,
        }
    }

    fn restore(&mut self, s: Saved) {
        self.facts.truncate(s.facts);
        while self.atom_log.len() > s.atom_log {
            if let Some((key, old)) = self.atom_log.pop() {
                match old {
                    Some(r) => self.atom_ranges.insert(key, r),
                    None => self.atom_ranges.remove(&key),
                };
            }
        }
        self.ranges = s.ranges;
        self.reachable = s.reachable;
    }

    // ---------------------------------------------------------------- statements

    fn bind_var(&mut self, var: VarId, what: &str) -> bool {
        if self.func.var(var).is_none() {
            self.error(format!(
                "{what} binds {var}, which is not in the variable arena"
            ));
            return false;
        }
        if self.var_bound[var.index()] {
            self.error(format!(
                "{what} binds {} again inside its own scope",
                self.vname(var)
            ));
        }
        self.var_bound[var.index()] = true;
        true
    }

    fn stmt(&mut self, s: &Stmt) {
        deep(|| self.stmt_on_stack(s))
    }

    fn stmt_on_stack(&mut self, s: &Stmt) {
        match s {
            Stmt::Seq(v) => v.iter().for_each(|c| self.stmt(c)),
            Stmt::For {
                var,
                min,
                extent,
                kind,
                body,
            } => self.for_loop(*var, *min, *extent, *kind, body),
            Stmt::Store {
                buffer,
                indices,
                value,
            } => {
                let text = format!(
                    "store {}[{}]",
                    self.bname(*buffer),
                    indices
                        .iter()
                        .map(|e| self.printer.expr(e))
                        .collect::<Vec<_>>()
                        .join(", ")
                );
                let idx_lanes = self.access_types(*buffer, indices, &text);
                let vt = self.ty(value);
                if let (Some(lanes), Some(vt), Some(b)) = (idx_lanes, vt, self.func.buffer(*buffer))
                {
                    let want = ValueType::vector(b.dtype, lanes);
                    if vt != want {
                        self.error(format!(
                            "{text}: stored value has type {vt}, expected {want}"
                        ));
                    }
                }
                if idx_lanes.is_some() && vt.is_some() && self.reachable {
                    self.check_access(&text, *buffer, indices);
                    self.bounds_expr(value);
                }
            }
            Stmt::Allocate { buffer, body } => {
                let Some(b) = self.func.buffer(*buffer) else {
                    self.error(format!(
                        "allocate of {buffer}, which is not in the buffer arena"
                    ));
                    return;
                };
                let name = self.bname(*buffer);
                if b.scope == Scope::Global {
                    self.error(format!(
                        "allocate {name}: scope is global; allocations must be local or shared"
                    ));
                }
                if self.func.params.contains(buffer) {
                    self.error(format!("allocate {name}: it is a parameter"));
                }
                if self.buf_live[buffer.index()] && !self.func.params.contains(buffer) {
                    self.error(format!(
                        "allocate {name}: already allocated in an enclosing scope"
                    ));
                }
                if b.scope == Scope::Shared && self.thread_axes.is_empty() {
                    self.error(format!(
                        "allocate {name}: shared memory outside any thread-bound loop"
                    ));
                }
                let was = self.buf_live[buffer.index()];
                self.buf_live[buffer.index()] = true;
                self.frames.push(format!("allocate {name}"));
                self.stmt(body);
                self.frames.pop();
                self.buf_live[buffer.index()] = was;
            }
            Stmt::If { cond, then, else_ } => {
                let ct = self.ty(cond);
                if let Some(t) = ct
                    && t != ValueType::BOOL
                {
                    self.error(format!(
                        "if condition `{}` has type {t}, expected bool",
                        self.printer.expr(cond)
                    ));
                }
                let ok = ct == Some(ValueType::BOOL);
                if ok && self.reachable {
                    self.bounds_expr(cond);
                }
                let text = self.printer.expr(cond);
                let saved = self.save();
                if ok {
                    self.assume(cond, false);
                }
                self.frames.push(format!("if ({text})"));
                self.stmt(then);
                self.frames.pop();
                self.restore(saved);
                if let Some(e) = else_ {
                    let saved = self.save();
                    if ok {
                        self.assume(cond, true);
                    }
                    self.frames.push(format!("else of if ({text})"));
                    self.stmt(e);
                    self.frames.pop();
                    self.restore(saved);
                }
            }
            Stmt::Let { var, value, body } => {
                let vt = self.ty(value);
                if self.reachable && vt.is_some() {
                    self.bounds_expr(value);
                }
                if !self.bind_var(*var, "let") {
                    return;
                }
                let decl = self.func.vars[var.index()].ty;
                if let Some(vt) = vt
                    && vt != decl
                {
                    self.error(format!(
                        "let {}: value has type {vt}, variable has type {decl}",
                        self.vname(*var)
                    ));
                }
                let saved = self.save();
                if decl.is_index() && decl.is_scalar() && vt == Some(decl) {
                    self.bind_let(*var, value);
                }
                self.frames.push(format!("let {}", self.vname(*var)));
                self.stmt(body);
                self.frames.pop();
                self.let_forms.remove(var);
                self.restore(saved);
                self.var_bound[var.index()] = false;
            }
            Stmt::Barrier => {
                if !self.thread_axes.iter().any(|a| !a.is_block()) {
                    self.error("barrier outside any threadIdx-bound loop");
                }
            }
            // `check_with` verifies the expansion, which has none left.
            Stmt::MicroKernel(call) => {
                self.error(format!("unexpanded microkernel {}", call.kernel));
            }
        }
    }

    fn for_loop(&mut self, var: VarId, min: i64, extent: i64, kind: ForKind, body: &Stmt) {
        let head = match kind {
            ForKind::Serial => "for".to_string(),
            ForKind::Thread(a) => format!("launch_thread {a}"),
            k => format!("{} for", k.keyword()),
        };
        let frame = format!(
            "{head} {} in [{min}, {})",
            self.vname(var),
            min as i128 + extent as i128
        );
        if !self.bind_var(var, &head) {
            return;
        }
        let vt = self.func.vars[var.index()].ty;
        if !(vt.is_index() && vt.is_scalar()) {
            self.error(format!(
                "{head} {}: loop variable has type {vt}, expected int32 or int64",
                self.vname(var)
            ));
        }
        if extent < 0 {
            self.error(format!(
                "{head} {}: negative extent {extent}",
                self.vname(var)
            ));
        }
        // The loop counts up to its exclusive end, which must be a value of its type.
        let (lo, hi) = int_range(vt.dtype);
        if (min as i128) < lo as i128 || (min as i128 + extent.max(0) as i128) > hi as i128 {
            self.error(format!(
                "{head} {}: range does not fit in {vt}",
                self.vname(var)
            ));
        }
        match kind {
            ForKind::Vectorized if extent < 1 => {
                self.error(format!(
                    "vectorized for {}: extent must be at least 1",
                    self.vname(var)
                ));
            }
            ForKind::Thread(axis) => {
                if min != 0 {
                    self.error(format!(
                        "launch_thread {axis}: starts at {min}; thread-bound loops start at 0"
                    ));
                }
                if self.plain_loops > 0 {
                    self.error(format!("launch_thread {axis}: inside a non-thread loop"));
                }
                if self.thread_axes.contains(&axis) {
                    self.error(format!(
                        "launch_thread {axis}: axis already bound by an enclosing loop"
                    ));
                }
                if axis.is_block()
                    && let Some(t) = self.thread_axes.iter().find(|a| !a.is_block())
                {
                    self.error(format!("launch_thread {axis}: block axis inside {t}; blockIdx loops go outside threadIdx loops"));
                }
            }
            _ => {}
        }
        let saved = self.save();
        self.ranges[var.index()] =
            Some(Interval::new(min as i128, min as i128 + extent as i128 - 1));
        if extent <= 0 {
            self.reachable = false;
        }
        match kind {
            ForKind::Thread(a) => self.thread_axes.push(a),
            _ => self.plain_loops += 1,
        }
        self.frames.push(frame);
        self.stmt(body);
        self.frames.pop();
        match kind {
            ForKind::Thread(_) => {
                self.thread_axes.pop();
            }
            _ => self.plain_loops -= 1,
        }
        self.restore(saved);
        self.var_bound[var.index()] = false;
    }

    // ---------------------------------------------------------------- types

    /// Checks the buffer and indices of an access; returns the lanes of the access.
    fn access_types(&mut self, buffer: BufferId, indices: &[Expr], text: &str) -> Option<u32> {
        let mut ok = true;
        let mut lanes = 1u32;
        let mut index_types = vec![];
        for (d, ix) in indices.iter().enumerate() {
            match self.ty(ix) {
                Some(t) if t.is_index() => {
                    if t.lanes != 1 {
                        if lanes != 1 && lanes != t.lanes {
                            self.error(format!(
                                "{text}: indices have different lane counts ({lanes} and {})",
                                t.lanes
                            ));
                            ok = false;
                        }
                        lanes = t.lanes;
                    }
                    index_types.push(t);
                }
                Some(t) => {
                    self.error(format!(
                        "{text}: index {d} has type {t}, expected int32 or int64"
                    ));
                    ok = false;
                }
                None => ok = false,
            }
        }
        let Some(b) = self.func.buffer(buffer) else {
            self.error(format!("{text}: {buffer} is not in the buffer arena"));
            return None;
        };
        if self.scoped && !self.buf_live[buffer.index()] {
            self.error(format!(
                "{text}: buffer {} is neither a parameter nor allocated in scope",
                self.bname(buffer)
            ));
            ok = false;
        }
        if indices.len() != b.rank() {
            self.error(format!(
                "{text}: {} indices for buffer {} of rank {}",
                indices.len(),
                self.bname(buffer),
                b.rank()
            ));
            ok = false;
        }
        ok.then_some(lanes)
    }

    fn ty(&mut self, e: &Expr) -> Option<ValueType> {
        deep(|| self.ty_on_stack(e))
    }

    fn ty_on_stack(&mut self, e: &Expr) -> Option<ValueType> {
        let show = |v: &Self| v.printer.expr(e);
        match e {
            Expr::Int { value, dtype } => {
                if !dtype.is_int() {
                    self.error(format!(
                        "integer immediate `{}` has dtype {dtype}",
                        show(self)
                    ));
                    return None;
                }
                let (lo, hi) = int_range(*dtype);
                if *value < lo || *value > hi {
                    self.error(format!("immediate {value} out of range for {dtype}"));
                }
                Some(ValueType::scalar(*dtype))
            }
            Expr::Float { dtype, .. } => {
                if !dtype.is_float() {
                    self.error(format!(
                        "float immediate `{}` has dtype {dtype}",
                        show(self)
                    ));
                    return None;
                }
                Some(ValueType::scalar(*dtype))
            }
            Expr::Bool(_) => Some(ValueType::BOOL),
            Expr::Var(v) => {
                let Some(d) = self.func.var(*v) else {
                    self.error(format!("{v} is not in the variable arena"));
                    return None;
                };
                if self.scoped && !self.var_bound[v.index()] {
                    self.error(format!("variable {} used out of scope", self.vname(*v)));
                    return None;
                }
                Some(d.ty)
            }
            Expr::Load { buffer, indices } => {
                let text = format!("load {}", show(self));
                let lanes = self.access_types(*buffer, indices, &text)?;
                Some(ValueType::vector(self.func.buffer(*buffer)?.dtype, lanes))
            }
            Expr::Binary { op, lhs, rhs } => {
                let (a, b) = (self.ty(lhs), self.ty(rhs));
                let (a, b) = (a?, b?);
                let name = op.symbol().or(op.call_name()).unwrap_or("?");
                if a != b {
                    self.error(format!(
                        "operands of `{name}` have different types ({a} and {b}) in `{}`",
                        show(self)
                    ));
                    return None;
                }
                let bad = match op {
                    BinOp::And | BinOp::Or => !a.dtype.is_bool(),
                    BinOp::FloorDiv | BinOp::FloorMod => !a.dtype.is_int(),
                    BinOp::Eq | BinOp::Ne => false,
                    _ => a.dtype.is_bool(),
                };
                if bad {
                    self.error(format!(
                        "`{name}` does not take {a} operands in `{}`",
                        show(self)
                    ));
                    return None;
                }
                Some(if op.is_comparison() {
                    ValueType::vector(DType::Bool, a.lanes)
                } else {
                    a
                })
            }
            Expr::Not(x) => {
                let t = self.ty(x)?;
                if !t.dtype.is_bool() {
                    self.error(format!("`!` takes bool, found {t} in `{}`", show(self)));
                    return None;
                }
                Some(t)
            }
            Expr::Select { cond, then, else_ } => {
                let (c, a, b) = (self.ty(cond), self.ty(then), self.ty(else_));
                let (c, a, b) = (c?, a?, b?);
                if a != b {
                    self.error(format!(
                        "select branches have different types ({a} and {b}) in `{}`",
                        show(self)
                    ));
                    return None;
                }
                if !c.dtype.is_bool() || (c.lanes != 1 && c.lanes != a.lanes) {
                    self.error(format!(
                        "select condition has type {c}, expected bool or {} in `{}`",
                        ValueType::vector(DType::Bool, a.lanes),
                        show(self)
                    ));
                    return None;
                }
                Some(a)
            }
            Expr::Cast { to, value } => Some(ValueType::vector(*to, self.ty(value)?.lanes)),
            Expr::Call { intrinsic, args } => {
                let types: Vec<Option<ValueType>> = args.iter().map(|a| self.ty(a)).collect();
                let types: Vec<ValueType> = types.into_iter().collect::<Option<_>>()?;
                if args.len() != intrinsic.arity() {
                    self.error(format!(
                        "`{}` takes {} argument(s), found {}",
                        intrinsic.name(),
                        intrinsic.arity(),
                        args.len()
                    ));
                    return None;
                }
                let t = types[0];
                if types.iter().any(|x| *x != t) {
                    self.error(format!(
                        "arguments of `{}` have different types in `{}`",
                        intrinsic.name(),
                        show(self)
                    ));
                    return None;
                }
                let ok = t.dtype.is_float() || (*intrinsic == Intrinsic::Abs && t.dtype.is_int());
                if !ok {
                    self.error(format!(
                        "`{}` does not take {t} in `{}`",
                        intrinsic.name(),
                        show(self)
                    ));
                    return None;
                }
                Some(t)
            }
            Expr::Ramp {
                base,
                stride,
                lanes,
            } => {
                let (a, b) = (self.ty(base), self.ty(stride));
                let (a, b) = (a?, b?);
                if a != b || !a.is_index() || !a.is_scalar() {
                    self.error(format!("ramp base and stride must be int32/int64 scalars of one type, found {a} and {b}"));
                    return None;
                }
                if !(1..=1024).contains(lanes) {
                    self.error(format!("ramp with {lanes} lanes (1 to 1024 allowed)"));
                    return None;
                }
                Some(a.with_lanes(*lanes))
            }
            Expr::Broadcast { value, lanes } => {
                let t = self.ty(value)?;
                if !t.is_scalar() {
                    self.error(format!("broadcast of a vector ({t}) in `{}`", show(self)));
                    return None;
                }
                if !(1..=1024).contains(lanes) {
                    self.error(format!("broadcast with {lanes} lanes (1 to 1024 allowed)"));
                    return None;
                }
                Some(t.with_lanes(*lanes))
            }
        }
    }
}

/// For each buffer of `func`, whether some store writes it.
fn stored_buffers(func: &PrimFunc) -> Vec<bool> {
    let mut stored = vec![false; func.buffers.len()];
    func.body.visit(&mut |s| {
        if let Stmt::Store { buffer, .. } = s
            && let Some(x) = stored.get_mut(buffer.index())
        {
            *x = true;
        }
    });
    stored
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tir::{PrimFuncBuilder, parse};

    #[test]
    fn two_guards_narrow_two_parts_of_one_index() {
        // k < 2 and r < 3 together bound k + r by 3: each guard alone would only give 4.
        let text =
            "primfn @f(%a: Buffer[(4), float32, global], out %b: Buffer[(5, 4), float32, global]) {
  for (%ko, 0, 1) {
    for (%ki, 0, 5) {
      for (%ro, 0, 1) {
        for (%ri, 0, 4) {
          if (%ko * 5 + %ki < 2 && %ro * 4 + %ri < 3) {
            %b[%ki, %ri] = %a[%ko * 5 + %ki + (%ro * 4 + %ri)]
          }
        }
      }
    }
  }
}";
        assert_eq!(errors(text), Vec::<String>::new());
        let unguarded = text.replace(" && %ro * 4 + %ri < 3", "");
        let e = errors(&unguarded);
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(
            e[0].contains("ranges over [0, 4] but buffer %a has extent 4"),
            "{e:?}"
        );
    }

    fn errors(text: &str) -> Vec<String> {
        check(&parse(text).unwrap())
            .into_iter()
            .map(|e| e.to_string())
            .collect()
    }

    #[test]
    fn reports_out_of_bounds_store_with_context() {
        let mut b = PrimFuncBuilder::new("kernel");
        let out = b.output("out", [64, 64], DType::F32);
        let i = b.loop_var("i");
        let j = b.loop_var("j");
        let body = Stmt::serial(
            i,
            0,
            64,
            Stmt::serial(j, 0, 64, Stmt::store(out, [i.into(), j + 1], 0.0f32)),
        );
        let errs = check(&b.finish(body));
        assert_eq!(errs.len(), 1);
        assert_eq!(
            errs[0].to_string(),
            "store %out[%i, %j + 1]: index 1 ranges over [1, 64] but buffer %out has extent 64 in dim 1 \
             (in @kernel, for %i in [0, 64), for %j in [0, 64))"
        );
    }

    #[test]
    fn guards_refine_ranges() {
        let ok = "primfn @k(%a: Buffer[(100), float32, global], out %c: Buffer[(100), float32, global]) {
          for (%io, 0, 4) { for (%ii, 0, 32) {
            if (%io * 32 + %ii < 100) { %c[%io * 32 + %ii] = %a[%ii + %io * 32] }
          } }
        }";
        assert_eq!(errors(ok), Vec::<String>::new());
        let bad = ok.replace("< 100", "<= 100");
        assert_eq!(errors(&bad).len(), 2);
        // Negated guard in the else branch, and select's chosen side.
        let sel =
            "primfn @k(%a: Buffer[(10), float32, global], out %c: Buffer[(12), float32, global]) {
          for (%i, 0, 12) {
            if (%i >= 10) { %c[%i] = 0.0 } else { %c[%i] = %a[%i] }
            %c[%i] = select(%i - 1 >= 0 && 10 > %i + -1, %a[%i - 1], 0.0)
          }
        }";
        assert_eq!(errors(sel), Vec::<String>::new());
    }

    #[test]
    fn floordiv_floormod_and_lets() {
        let ok = "primfn @k(%a: Buffer[(16, 16), float32, global], out %c: Buffer[(256), float32, global]) {
          for (%f, 0, 256) {
            let %t: int32 = %f + 0 {
              %c[%t] = %a[floordiv(%f, 16), floormod(%f, 16)]
            }
          }
          for (%o, 0, 16) { for (%i, 0, 16) { %c[%o * 16 + %i] = %a[floordiv(%o * 16 + %i, 16), floormod(%o * 16 + %i, 16)] } }
        }";
        assert_eq!(errors(ok), Vec::<String>::new());
    }

    #[test]
    fn type_and_scope_errors_are_all_collected() {
        let text =
            "primfn @k(%a: Buffer[(4), float32, global], out %c: Buffer[(4), int32, global]) {
          for (%i, 0, 4) { %c[%i] = %a[%i] + 1 }
          for (%j, 0, 4) { %c[%i] = 1 }
          barrier()
          for (%k, 0, 4) { launch_thread threadIdx.x (%t, 0, 4) { %c[%t, 0] = 1 } }
        }";
        let errs = errors(text);
        let all = errs.join("\n");
        assert!(
            all.contains("operands of `+` have different types (float32 and int32)"),
            "{all}"
        );
        assert!(all.contains("variable %i used out of scope"), "{all}");
        assert!(
            all.contains("barrier outside any threadIdx-bound loop"),
            "{all}"
        );
        assert!(all.contains("inside a non-thread loop"), "{all}");
        assert!(all.contains("2 indices for buffer %c of rank 1"), "{all}");
        assert_eq!(errs.len(), 5, "{all}");
    }

    #[test]
    fn type_of_works_without_scope() {
        let mut b = PrimFuncBuilder::new("k");
        let a = b.input("a", [8], DType::F16);
        let i = b.loop_var("i");
        let f = b.finish(Stmt::seq([]));
        let e = Expr::load(a, [Expr::ramp(i, 1, 4)]);
        assert_eq!(type_of(&f, &e).unwrap(), ValueType::vector(DType::F16, 4));
        assert!(type_of(&f, &(Expr::from(i) + 1.0f32)).is_err());
    }
}
