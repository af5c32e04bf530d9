//! Legalization: rewrites a verified [`PrimFunc`] into the **core loop IR**, the subset
//! every backend (Cranelift, CUDA, SPIR-V) implements. [`legalize`] is the one entry
//! point; backends call it before code generation and handle nothing outside the core.
//!
//! The core loop IR:
//! - **statements**: every [`Stmt`] — `for`, store, allocate, `if`, `let` (of a scalar),
//!   sequence, barrier, and `microkernel` calls (kept: the CPU backend calls the kernel,
//!   the GPU backends refuse them as `Unsupported`; their schedules never emit one);
//! - **loop kinds**: every [`ForKind`] — serial, parallel, vectorized, unrolled and
//!   thread-bound; each runs its iterations with serial meaning, the kind is a hint a
//!   backend may use (threads, SIMD, unrolling, GPU axes) or ignore (a CPU runs a
//!   thread-bound loop serially);
//! - **values**: scalars only. A store of a vector value or through a vector index
//!   (`ramp`, `broadcast`, a load at a ramp) becomes a `vectorized` loop over the lanes
//!   storing one scalar lane per iteration (through a `local` staging buffer when the
//!   value reads the stored buffer, so every lane still reads the old contents); a
//!   `let` of a vector type is `Unsupported`;
//! - **intrinsics**: `exp`, `log`, `sqrt`, `tanh`, `sigmoid`, `erf`, `fma`, `pow`,
//!   `abs` (float and integer), `floor`, `ceil`; `rsqrt(x)` becomes `1 / sqrt(x)`
//!   computed in float32 (a float16 `x` is widened and the result rounded once, as the
//!   interpreters do). Sigmoid, tanh and erf stay intrinsics: an exact expansion would
//!   repeat its operand, and the loop IR has no expression-level sharing;
//! - **casts**: between numeric dtypes (integer↔integer wrapping, integer→float
//!   rounding, float→integer saturating, float↔float rounding); a cast to `bool` becomes
//!   `x != 0` and a cast from `bool` becomes `select(b, 1, 0)`;
//! - **indices**: scalar integer expressions of `int32`/`int64`, one per dimension
//!   (backends flatten them with row-major strides).
//!
//! Legalization keeps values bit for bit: the loop-IR interpreter gives the same result
//! for the function before and after (property-tested in `te/tests/legalize.rs`), and
//! the result verifies.

use kiln_ir::DType;

use super::expr::{BinOp, Expr, Intrinsic};
use super::func::PrimFunc;
use super::stmt::{ForKind, Stmt};
use super::types::{Buffer, BufferId, Scope, ValueType, VarId};
use super::verify::type_of;
use super::visit::{Mutator, Visitor, walk_expr, walk_expr_mut, walk_stmt_mut};
use crate::error::{Error, Result};

/// `func` rewritten into the core loop IR (see the module doc). `func` must verify;
/// the result verifies too.
pub fn legalize(func: &PrimFunc) -> Result<PrimFunc> {
    let mut out = func.clone();
    let mut body = std::mem::replace(&mut out.body, Stmt::seq([]));
    let mut l = Legalizer {
        func: &mut out,
        error: None,
        lane_loops: 0,
    };
    l.mutate_stmt(&mut body);
    if let Some(e) = l.error {
        return Err(e);
    }
    out.body = body;
    Ok(out)
}

struct Legalizer<'f> {
    func: &'f mut PrimFunc,
    /// The first problem met (the walk goes on, unchanged, after it).
    error: Option<Error>,
    /// How many loops over the lanes of a vector store the walk is inside.
    lane_loops: usize,
}

impl Legalizer<'_> {
    fn fail(&mut self, e: Error) {
        self.error.get_or_insert(e);
    }

    fn type_of(&mut self, e: &Expr) -> Option<ValueType> {
        match type_of(self.func, e) {
            Ok(t) => Some(t),
            Err(err) => {
                self.fail(err);
                None
            }
        }
    }

    /// A store of a vector: one `vectorized` loop over the lanes (see the module doc).
    fn scalarize_store(
        &mut self,
        buffer: BufferId,
        indices: &[Expr],
        value: &Expr,
        lanes: u32,
    ) -> Stmt {
        let lane = self.func.add_var("lane", ValueType::I32);
        let mut ix = indices.to_vec();
        let mut v = value.clone();
        let mut scalar = Scalarize {
            func: self.func,
            lane,
        };
        ix.iter_mut().for_each(|i| scalar.mutate_expr(i));
        scalar.mutate_expr(&mut v);
        if indices.iter().any(|i| reads(i, buffer)) {
            self.fail(Error::Unsupported(
                "legalization: a vector store whose index reads the stored buffer".into(),
            ));
        }
        let lanes_i = i64::from(lanes);
        if !reads(value, buffer) {
            return Stmt::for_(
                lane,
                0,
                lanes_i,
                ForKind::Vectorized,
                Stmt::store(buffer, ix, v),
            );
        }
        // Every lane reads the old contents: stage the value first.
        let dtype = self.func.buffer(buffer).map_or(DType::F32, |b| b.dtype);
        let stage =
            self.func
                .add_buffer(Buffer::new("lanes", [lanes as usize], dtype, Scope::Local));
        let lane2 = self.func.add_var("lane", ValueType::I32);
        let mut second = Substitute1 {
            from: lane,
            to: lane2,
        };
        let mut ix2 = ix.clone();
        ix2.iter_mut().for_each(|i| second.mutate_expr(i));
        Stmt::allocate(
            stage,
            Stmt::seq([
                Stmt::for_(
                    lane,
                    0,
                    lanes_i,
                    ForKind::Vectorized,
                    Stmt::store(stage, [Expr::Var(lane)], v),
                ),
                Stmt::for_(
                    lane2,
                    0,
                    lanes_i,
                    ForKind::Vectorized,
                    Stmt::store(buffer, ix2, Expr::load(stage, [Expr::Var(lane2)])),
                ),
            ]),
        )
    }
}

impl Mutator for Legalizer<'_> {
    fn mutate_stmt(&mut self, s: &mut Stmt) {
        match s {
            Stmt::Store {
                buffer,
                indices,
                value,
            } if self.lane_loops == 0 => {
                let lanes = indices
                    .iter()
                    .chain(std::iter::once(&*value))
                    .map(|e| self.type_of(e).map_or(1, |t| t.lanes))
                    .max()
                    .unwrap_or(1);
                if lanes > 1 {
                    *s = self.scalarize_store(*buffer, indices, value, lanes);
                    // The lane loops' stores are scalar (or already refused): walk them
                    // for the expression rewrites only.
                    self.lane_loops += 1;
                    walk_stmt_mut(self, s);
                    self.lane_loops -= 1;
                    return;
                }
            }
            Stmt::Let { var, .. } => {
                if let Some(t) = self.func.var(*var).map(|d| d.ty)
                    && t.lanes > 1
                {
                    self.fail(Error::Unsupported(format!(
                        "legalization: a `let` of vector type {t}"
                    )));
                }
            }
            _ => {}
        }
        walk_stmt_mut(self, s)
    }

    fn mutate_expr(&mut self, e: &mut Expr) {
        walk_expr_mut(self, e);
        match e {
            Expr::Call {
                intrinsic: Intrinsic::Rsqrt,
                args,
            } if args.len() == 1 => {
                let Some(t) = self.type_of(&args[0]) else {
                    return;
                };
                let x = args.pop().expect("one argument");
                let wide = |x: Expr| match t.dtype {
                    DType::F32 => x,
                    _ => x.cast(DType::F32),
                };
                let one = splat(Expr::f32(1.0), t.lanes);
                let r = Expr::binary(BinOp::Div, one, wide(x).unary(Intrinsic::Sqrt));
                *e = match t.dtype {
                    DType::F32 => r,
                    d => r.cast(d),
                };
            }
            Expr::Cast { to, value } if to.is_bool() || may_be_bool(value) => {
                let to = *to;
                let Some(t) = self.type_of(value) else {
                    return;
                };
                if !(to.is_bool() || t.dtype.is_bool()) {
                    return;
                }
                let x = std::mem::replace(&mut **value, Expr::Bool(false));
                *e = if t.dtype == to {
                    x
                } else if to.is_bool() {
                    x.not_equal(splat(Expr::imm(0.0, t.dtype), t.lanes))
                } else {
                    Expr::select(
                        x,
                        splat(Expr::imm(1.0, to), t.lanes),
                        splat(Expr::imm(0.0, to), t.lanes),
                    )
                };
            }
            _ => {}
        }
    }
}

/// Whether `e` may be of dtype bool: false where the node says it is not (arithmetic,
/// numeric immediates and casts); loads, variables and selects are asked for their type.
fn may_be_bool(e: &Expr) -> bool {
    match e {
        Expr::Int { .. } | Expr::Float { .. } | Expr::Call { .. } | Expr::Ramp { .. } => false,
        Expr::Cast { to, .. } => to.is_bool(),
        Expr::Binary { op, .. } => op.is_comparison() || op.is_logical(),
        _ => true,
    }
}

/// `x` as a vector of `lanes` (itself when `lanes` is 1).
fn splat(x: Expr, lanes: u32) -> Expr {
    if lanes > 1 {
        Expr::broadcast(x, lanes)
    } else {
        x
    }
}

/// Whether `e` loads from `buffer`.
fn reads(e: &Expr, buffer: BufferId) -> bool {
    struct Reads(BufferId, bool);
    impl Visitor for Reads {
        fn visit_expr(&mut self, e: &Expr) {
            self.1 |= matches!(e, Expr::Load { buffer, .. } if *buffer == self.0);
            walk_expr(self, e)
        }
    }
    let mut r = Reads(buffer, false);
    r.visit_expr(e);
    r.1
}

/// Turns a vector expression into its lane `lane`: `ramp(b, s, n)` is `b + lane * s`,
/// `broadcast(x, n)` is `x`, everything else is taken lane-wise.
struct Scalarize<'f> {
    func: &'f PrimFunc,
    lane: VarId,
}

impl Mutator for Scalarize<'_> {
    fn mutate_expr(&mut self, e: &mut Expr) {
        match e {
            Expr::Ramp { base, stride, .. } => {
                let base = std::mem::replace(&mut **base, Expr::Bool(false));
                let stride = std::mem::replace(&mut **stride, Expr::Bool(false));
                // The ramp's dtype is its base's: an int64 ramp widens the lane.
                let lane = match type_of(self.func, &base).map(|t| t.dtype) {
                    Ok(DType::I32) | Err(_) => Expr::Var(self.lane),
                    Ok(d) => Expr::Var(self.lane).cast(d),
                };
                *e = base + lane * stride;
            }
            Expr::Broadcast { value, .. } => {
                *e = std::mem::replace(&mut **value, Expr::Bool(false));
            }
            Expr::Var(_) => {}
            _ => walk_expr_mut(self, e),
        }
    }
}

/// Renames one variable.
struct Substitute1 {
    from: VarId,
    to: VarId,
}

impl Mutator for Substitute1 {
    fn mutate_expr(&mut self, e: &mut Expr) {
        match e {
            Expr::Var(v) if *v == self.from => *v = self.to,
            _ => walk_expr_mut(self, e),
        }
    }
}
