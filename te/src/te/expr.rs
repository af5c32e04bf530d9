//! Tensor expressions: the scalar language a compute body is written in. Immediates,
//! index variables ([`IterVar`]: the indices a compute hands its closure and the
//! reduction axes), tensor reads ([`Tensor::at`]), arithmetic with operator
//! overloading, `floordiv`/`floormod`, `min`/`max`, comparisons, `and`/`or`/`not`,
//! [`select`], [`cast`], math intrinsics, and the reductions [`sum`], [`max`], [`min`]
//! (only as the whole body of a compute, TVM's rule).
//!
//! Building an expression never fails; its types are checked when it becomes the body of
//! a compute ([`Graph::compute`](super::Graph::compute)), which returns an error naming
//! the compute and the offending sub-expression. Typing: both operands of a binary op
//! (and both branches of a `select`) have one dtype, except that an immediate adopts the
//! dtype of a non-immediate partner when its value fits (`x + 1` on float32 `x` is
//! `x + 1f`, TVM's rule); index variables are `int32`.

use std::fmt;
use std::ops;

use kiln_ir::DType;

use crate::tir::{BinOp, Intrinsic};

use super::graph::Tensor;

/// Handle of an index variable in a [`Graph`](super::Graph)'s arena: a data axis of a
/// compute, a reduction axis, or (in a [`Schedule`](super::Schedule)) a loop axis made by
/// `split`/`fuse`. Prints as `iv3`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IterVar(pub u32);

impl IterVar {
    /// The arena index.
    pub fn index(self) -> usize {
        self.0 as usize
    }

    /// This variable as an (int32) expression.
    pub fn expr(self) -> Expr {
        Expr::Var(self)
    }
}

impl fmt::Display for IterVar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "iv{}", self.0)
    }
}

/// Whether an index variable ranges over output elements or is summed over.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum IterKind {
    /// An axis of the output (one per dimension of a compute).
    Data,
    /// A reduction axis.
    Reduce,
}

/// The combiner of a reduction.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum ReduceKind {
    /// `acc + x`, starting at 0.
    Sum,
    /// `max(acc, x)`, starting at -inf (the dtype's minimum for integers).
    Max,
    /// `min(acc, x)`, starting at +inf (the dtype's maximum for integers).
    Min,
    /// `acc * x`, starting at 1.
    Prod,
}

impl ReduceKind {
    /// `sum`, `max`, `min` or `prod`.
    pub fn name(self) -> &'static str {
        match self {
            ReduceKind::Sum => "sum",
            ReduceKind::Max => "max",
            ReduceKind::Min => "min",
            ReduceKind::Prod => "prod",
        }
    }
}

/// A tensor expression.
#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    /// An integer immediate.
    Int {
        /// The value; it fits `dtype`.
        value: i64,
        /// An integer dtype.
        dtype: DType,
    },
    /// A float immediate.
    Float {
        /// The value, rounded to `dtype` when evaluated.
        value: f64,
        /// A float dtype.
        dtype: DType,
    },
    /// A bool immediate.
    Bool(bool),
    /// An index variable (int32).
    Var(IterVar),
    /// An element of a tensor, one index per dimension.
    Read {
        /// The tensor read.
        tensor: Tensor,
        /// One int32 index per dimension of `tensor`.
        indices: Vec<Expr>,
    },
    /// A binary operation (see [`BinOp`]).
    Binary {
        /// The operator.
        op: BinOp,
        /// The left operand.
        lhs: Box<Expr>,
        /// The right operand, of the same dtype as `lhs`.
        rhs: Box<Expr>,
    },
    /// Logical negation.
    Not(Box<Expr>),
    /// `cond ? then : else_` (only the chosen side is read, so a padded read may sit in
    /// one branch).
    Select {
        /// The bool condition.
        cond: Box<Expr>,
        /// The value where `cond` holds.
        then: Box<Expr>,
        /// The value elsewhere, of the same dtype as `then`.
        else_: Box<Expr>,
    },
    /// Conversion to another dtype.
    Cast {
        /// The dtype converted to.
        to: DType,
        /// The value converted.
        value: Box<Expr>,
    },
    /// A math intrinsic.
    Call {
        /// The function.
        intrinsic: Intrinsic,
        /// Its operands, as many as [`Intrinsic::arity`].
        args: Vec<Expr>,
    },
    /// A reduction of `value` over `axes`; only allowed as the whole body of a compute.
    Reduce {
        /// How values combine (sum, max, min, prod).
        kind: ReduceKind,
        /// The value reduced, read at each point of `axes`.
        value: Box<Expr>,
        /// The reduction axes (of kind `Reduce`), outermost first.
        axes: Vec<IterVar>,
    },
}

impl Expr {
    /// An `int32` immediate.
    pub fn int(value: i32) -> Expr {
        Expr::Int {
            value: value as i64,
            dtype: DType::I32,
        }
    }

    /// A `float32` immediate.
    pub fn f32(value: f32) -> Expr {
        Expr::Float {
            value: value as f64,
            dtype: DType::F32,
        }
    }

    /// An immediate of any dtype from an `f64` (integers truncate, bool is `!= 0`).
    pub fn imm(value: f64, dtype: DType) -> Expr {
        if dtype.is_float() {
            Expr::Float { value, dtype }
        } else if dtype.is_bool() {
            Expr::Bool(value != 0.0)
        } else {
            Expr::Int {
                value: value as i64,
                dtype,
            }
        }
    }

    /// A binary operation.
    pub fn binary(op: BinOp, lhs: impl Into<Expr>, rhs: impl Into<Expr>) -> Expr {
        Expr::Binary {
            op,
            lhs: Box::new(lhs.into()),
            rhs: Box::new(rhs.into()),
        }
    }

    /// `floordiv(self, rhs)` (integers, rounds toward negative infinity).
    pub fn floordiv(self, rhs: impl Into<Expr>) -> Expr {
        Expr::binary(BinOp::FloorDiv, self, rhs)
    }

    /// `floormod(self, rhs)` (integers, the sign of the divisor).
    pub fn floormod(self, rhs: impl Into<Expr>) -> Expr {
        Expr::binary(BinOp::FloorMod, self, rhs)
    }

    /// Elementwise `min(self, rhs)` (not the reduction [`min`]).
    pub fn min(self, rhs: impl Into<Expr>) -> Expr {
        Expr::binary(BinOp::Min, self, rhs)
    }

    /// Elementwise `max(self, rhs)` (not the reduction [`max`]).
    pub fn max(self, rhs: impl Into<Expr>) -> Expr {
        Expr::binary(BinOp::Max, self, rhs)
    }

    /// `self == rhs`.
    pub fn equal(self, rhs: impl Into<Expr>) -> Expr {
        Expr::binary(BinOp::Eq, self, rhs)
    }

    /// `self != rhs`.
    pub fn not_equal(self, rhs: impl Into<Expr>) -> Expr {
        Expr::binary(BinOp::Ne, self, rhs)
    }

    /// `self < rhs`.
    pub fn lt(self, rhs: impl Into<Expr>) -> Expr {
        Expr::binary(BinOp::Lt, self, rhs)
    }

    /// `self <= rhs`.
    pub fn le(self, rhs: impl Into<Expr>) -> Expr {
        Expr::binary(BinOp::Le, self, rhs)
    }

    /// `self > rhs`.
    pub fn gt(self, rhs: impl Into<Expr>) -> Expr {
        Expr::binary(BinOp::Gt, self, rhs)
    }

    /// `self >= rhs`.
    pub fn ge(self, rhs: impl Into<Expr>) -> Expr {
        Expr::binary(BinOp::Ge, self, rhs)
    }

    /// `self && rhs`.
    pub fn and(self, rhs: impl Into<Expr>) -> Expr {
        Expr::binary(BinOp::And, self, rhs)
    }

    /// `self || rhs`.
    pub fn or(self, rhs: impl Into<Expr>) -> Expr {
        Expr::binary(BinOp::Or, self, rhs)
    }

    /// `cast(to, self)`.
    pub fn cast(self, to: DType) -> Expr {
        cast(to, self)
    }

    /// The direct children, in order.
    pub fn children(&self) -> Vec<&Expr> {
        match self {
            Expr::Int { .. } | Expr::Float { .. } | Expr::Bool(_) | Expr::Var(_) => vec![],
            Expr::Read { indices, .. } => indices.iter().collect(),
            Expr::Binary { lhs, rhs, .. } => vec![lhs, rhs],
            Expr::Not(x) => vec![x],
            Expr::Select { cond, then, else_ } => vec![cond, then, else_],
            Expr::Cast { value, .. } => vec![value],
            Expr::Call { args, .. } => args.iter().collect(),
            Expr::Reduce { value, .. } => vec![value],
        }
    }

    /// Calls `f` on this expression and every sub-expression, parents first.
    pub fn visit(&self, f: &mut impl FnMut(&Expr)) {
        f(self);
        for c in self.children() {
            c.visit(f);
        }
    }

    /// Whether this is an immediate (`Int`, `Float` or `Bool`).
    pub fn is_imm(&self) -> bool {
        matches!(self, Expr::Int { .. } | Expr::Float { .. } | Expr::Bool(_))
    }
}

/// `select(cond, then, else_)`: `then` where `cond` holds, else `else_`.
pub fn select(cond: impl Into<Expr>, then: impl Into<Expr>, else_: impl Into<Expr>) -> Expr {
    Expr::Select {
        cond: Box::new(cond.into()),
        then: Box::new(then.into()),
        else_: Box::new(else_.into()),
    }
}

/// `cast(to, e)`: conversion of `e` to `to`.
pub fn cast(to: DType, e: impl Into<Expr>) -> Expr {
    Expr::Cast {
        to,
        value: Box::new(e.into()),
    }
}

/// Elementwise `min(a, b)`.
pub fn minimum(a: impl Into<Expr>, b: impl Into<Expr>) -> Expr {
    Expr::binary(BinOp::Min, a, b)
}

/// Elementwise `max(a, b)`.
pub fn maximum(a: impl Into<Expr>, b: impl Into<Expr>) -> Expr {
    Expr::binary(BinOp::Max, a, b)
}

/// `floordiv(a, b)`.
pub fn floordiv(a: impl Into<Expr>, b: impl Into<Expr>) -> Expr {
    Expr::binary(BinOp::FloorDiv, a, b)
}

/// `floormod(a, b)`.
pub fn floormod(a: impl Into<Expr>, b: impl Into<Expr>) -> Expr {
    Expr::binary(BinOp::FloorMod, a, b)
}

/// `a && b`.
pub fn and(a: impl Into<Expr>, b: impl Into<Expr>) -> Expr {
    Expr::binary(BinOp::And, a, b)
}

/// `a || b`.
pub fn or(a: impl Into<Expr>, b: impl Into<Expr>) -> Expr {
    Expr::binary(BinOp::Or, a, b)
}

/// `!a`.
pub fn not(a: impl Into<Expr>) -> Expr {
    Expr::Not(Box::new(a.into()))
}

/// An intrinsic call.
pub fn call(intrinsic: Intrinsic, args: impl IntoIterator<Item = Expr>) -> Expr {
    Expr::Call {
        intrinsic,
        args: args.into_iter().collect(),
    }
}

macro_rules! unary_intrinsics {
    ($($name:ident $var:ident $doc:literal),*) => {$(
        #[doc = $doc]
        pub fn $name(x: impl Into<Expr>) -> Expr {
            call(Intrinsic::$var, [x.into()])
        }
    )*};
}
unary_intrinsics!(
    exp Exp "`exp(x)`.",
    log Log "`log(x)` (natural).",
    sqrt Sqrt "`sqrt(x)`.",
    rsqrt Rsqrt "`1 / sqrt(x)`.",
    tanh Tanh "`tanh(x)`.",
    sigmoid Sigmoid "The logistic `1 / (1 + exp(-x))` (stable for large `|x|`).",
    erf Erf "The error function.",
    abs Abs "`|x|` (floats and integers).",
    floor Floor "`floor(x)`.",
    ceil Ceil "`ceil(x)`."
);

/// `a * b + c`, fused.
pub fn fma(a: impl Into<Expr>, b: impl Into<Expr>, c: impl Into<Expr>) -> Expr {
    call(Intrinsic::Fma, [a.into(), b.into(), c.into()])
}

/// `a` to the power `b` (floats).
pub fn pow(a: impl Into<Expr>, b: impl Into<Expr>) -> Expr {
    call(Intrinsic::Pow, [a.into(), b.into()])
}

fn reduce(kind: ReduceKind, value: Expr, axes: &[IterVar]) -> Expr {
    Expr::Reduce {
        kind,
        value: Box::new(value),
        axes: axes.to_vec(),
    }
}

/// The sum of `value` over the reduction `axes` (the body of a compute).
pub fn sum(value: impl Into<Expr>, axes: &[IterVar]) -> Expr {
    reduce(ReduceKind::Sum, value.into(), axes)
}

/// The maximum of `value` over the reduction `axes` (the body of a compute).
pub fn max(value: impl Into<Expr>, axes: &[IterVar]) -> Expr {
    reduce(ReduceKind::Max, value.into(), axes)
}

/// The minimum of `value` over the reduction `axes` (the body of a compute).
pub fn min(value: impl Into<Expr>, axes: &[IterVar]) -> Expr {
    reduce(ReduceKind::Min, value.into(), axes)
}

/// The product of `value` over the reduction `axes` (the body of a compute).
pub fn prod(value: impl Into<Expr>, axes: &[IterVar]) -> Expr {
    reduce(ReduceKind::Prod, value.into(), axes)
}

impl From<IterVar> for Expr {
    fn from(v: IterVar) -> Expr {
        Expr::Var(v)
    }
}

impl From<&IterVar> for Expr {
    fn from(v: &IterVar) -> Expr {
        Expr::Var(*v)
    }
}

impl From<&Expr> for Expr {
    fn from(e: &Expr) -> Expr {
        e.clone()
    }
}

impl From<i32> for Expr {
    fn from(v: i32) -> Expr {
        Expr::int(v)
    }
}

impl From<i64> for Expr {
    fn from(v: i64) -> Expr {
        Expr::Int {
            value: v,
            dtype: DType::I64,
        }
    }
}

impl From<f32> for Expr {
    fn from(v: f32) -> Expr {
        Expr::f32(v)
    }
}

impl From<bool> for Expr {
    fn from(v: bool) -> Expr {
        Expr::Bool(v)
    }
}

macro_rules! arith_ops {
    ($($trait:ident $method:ident $op:ident),*) => {$(
        impl<T: Into<Expr>> ops::$trait<T> for Expr {
            type Output = Expr;
            fn $method(self, rhs: T) -> Expr {
                Expr::binary(BinOp::$op, self, rhs)
            }
        }
        impl<T: Into<Expr>> ops::$trait<T> for &Expr {
            type Output = Expr;
            fn $method(self, rhs: T) -> Expr {
                Expr::binary(BinOp::$op, self.clone(), rhs)
            }
        }
        impl<T: Into<Expr>> ops::$trait<T> for IterVar {
            type Output = Expr;
            fn $method(self, rhs: T) -> Expr {
                Expr::binary(BinOp::$op, self, rhs)
            }
        }
    )*};
}
arith_ops!(Add add Add, Sub sub Sub, Mul mul Mul, Div div Div);

impl ops::Neg for Expr {
    type Output = Expr;
    fn neg(self) -> Expr {
        match self {
            Expr::Int { value, dtype } => Expr::Int {
                value: -value,
                dtype,
            },
            Expr::Float { value, dtype } => Expr::Float {
                value: -value,
                dtype,
            },
            e => Expr::binary(
                BinOp::Sub,
                Expr::Int {
                    value: 0,
                    dtype: DType::I32,
                },
                e,
            ),
        }
    }
}

impl ops::Not for Expr {
    type Output = Expr;
    fn not(self) -> Expr {
        Expr::Not(Box::new(self))
    }
}

/// `e` with index variables renamed by `m` (reduction axes lists included).
pub(crate) fn rename_vars(e: &Expr, m: &std::collections::HashMap<IterVar, IterVar>) -> Expr {
    let r = |x: &Expr| rename_vars(x, m);
    match e {
        Expr::Var(v) => Expr::Var(*m.get(v).unwrap_or(v)),
        Expr::Read { tensor, indices } => Expr::Read {
            tensor: *tensor,
            indices: indices.iter().map(r).collect(),
        },
        Expr::Binary { op, lhs, rhs } => Expr::binary(*op, r(lhs), r(rhs)),
        Expr::Not(x) => Expr::Not(Box::new(r(x))),
        Expr::Select { cond, then, else_ } => select(r(cond), r(then), r(else_)),
        Expr::Cast { to, value } => cast(*to, r(value)),
        Expr::Call { intrinsic, args } => call(*intrinsic, args.iter().map(r)),
        Expr::Reduce { kind, value, axes } => Expr::Reduce {
            kind: *kind,
            value: Box::new(r(value)),
            axes: axes.iter().map(|a| *m.get(a).unwrap_or(a)).collect(),
        },
        leaf => leaf.clone(),
    }
}
