//! Scalar and vector expressions of the loop IR: immediates, variables, loads,
//! arithmetic, comparisons, logic, `select`, casts, intrinsic calls, and the vector
//! forms `ramp` and `broadcast`.
//!
//! Children are boxed; expressions are small trees built with constructor helpers and
//! operator overloading (`Expr::load(a, [i.into()]) * 2.0f32 + x`, `i * 4 + j` on
//! [`VarId`]s). Integer `Div` truncates toward zero; `FloorDiv`/`FloorMod` round toward
//! negative infinity (integers only). `Select` evaluates both sides, so both must be safe
//! to evaluate; guard possibly out-of-bounds loads with [`Stmt::If`](super::Stmt::If) or a
//! `Select` whose condition the bounds verifier can use (see [`verify`](mod@super::verify)).

use std::ops;

use kiln_ir::DType;

use super::types::{BufferId, VarId};

/// A binary operator. Arithmetic ops take two operands of equal type and return it;
/// comparisons return `bool` with the operands' lanes; `And`/`Or` take and return bool.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum BinOp {
    /// `lhs + rhs`; integers wrap in their width.
    Add,
    /// `lhs - rhs`; integers wrap in their width.
    Sub,
    /// `lhs * rhs`; integers wrap in their width.
    Mul,
    /// Float division, or integer division truncating toward zero.
    Div,
    /// Integer division rounding toward negative infinity.
    FloorDiv,
    /// Integer remainder of `FloorDiv`: the sign of the divisor.
    FloorMod,
    /// The smaller operand. On floats this is IEEE 754-2019 `minimum` (see
    /// [`fminimum`]), the contract every backend meets: NaN if either operand is NaN,
    /// and `-0 < +0`. On integers the smaller value; on bool logical and.
    Min,
    /// The larger operand. On floats this is IEEE 754-2019 `maximum` (see
    /// [`fmaximum`]), the contract every backend meets: NaN if either operand is NaN
    /// (as numpy's and ONNX's `maximum`, and the graph-IR reference), and `-0 < +0`. On
    /// integers the larger value; on bool logical or.
    Max,
    /// `lhs == rhs` (floats: false if either is NaN).
    Eq,
    /// `lhs != rhs` (floats: true if either is NaN).
    Ne,
    /// `lhs < rhs` (ordered: false with a NaN).
    Lt,
    /// `lhs <= rhs` (ordered: false with a NaN).
    Le,
    /// `lhs > rhs` (ordered: false with a NaN).
    Gt,
    /// `lhs >= rhs` (ordered: false with a NaN).
    Ge,
    /// Logical and of two bools (both sides evaluated).
    And,
    /// Logical or of two bools (both sides evaluated).
    Or,
}

/// IEEE 754-2019 `maximum`, the float semantics of [`BinOp::Max`]: NaN when either
/// operand is NaN, otherwise the larger, with `+0` larger than `-0`. (Rust's `f32::max`
/// differs: it returns the non-NaN operand and may pick either zero.)
pub fn fmaximum(x: f32, y: f32) -> f32 {
    if x.is_nan() || y.is_nan() {
        f32::NAN
    } else if x == y {
        // Equal values differ at most in the sign of zero.
        if x.is_sign_negative() { y } else { x }
    } else if x > y {
        x
    } else {
        y
    }
}

/// IEEE 754-2019 `minimum`, the float semantics of [`BinOp::Min`]: NaN when either
/// operand is NaN, otherwise the smaller, with `-0` smaller than `+0`.
pub fn fminimum(x: f32, y: f32) -> f32 {
    if x.is_nan() || y.is_nan() {
        f32::NAN
    } else if x == y {
        if x.is_sign_negative() { x } else { y }
    } else if x < y {
        x
    } else {
        y
    }
}

impl BinOp {
    /// Every operator, in a fixed order.
    pub const ALL: [BinOp; 16] = [
        BinOp::Add,
        BinOp::Sub,
        BinOp::Mul,
        BinOp::Div,
        BinOp::FloorDiv,
        BinOp::FloorMod,
        BinOp::Min,
        BinOp::Max,
        BinOp::Eq,
        BinOp::Ne,
        BinOp::Lt,
        BinOp::Le,
        BinOp::Gt,
        BinOp::Ge,
        BinOp::And,
        BinOp::Or,
    ];

    /// The infix symbol (`+`, `<=`, `&&`), or `None` for ops printed as calls.
    pub fn symbol(self) -> Option<&'static str> {
        Some(match self {
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::Eq => "==",
            BinOp::Ne => "!=",
            BinOp::Lt => "<",
            BinOp::Le => "<=",
            BinOp::Gt => ">",
            BinOp::Ge => ">=",
            BinOp::And => "&&",
            BinOp::Or => "||",
            BinOp::FloorDiv | BinOp::FloorMod | BinOp::Min | BinOp::Max => return None,
        })
    }

    /// The name of ops printed as calls (`floordiv`, `floormod`, `min`, `max`).
    pub fn call_name(self) -> Option<&'static str> {
        Some(match self {
            BinOp::FloorDiv => "floordiv",
            BinOp::FloorMod => "floormod",
            BinOp::Min => "min",
            BinOp::Max => "max",
            _ => return None,
        })
    }

    /// Binding strength of infix operators (higher binds tighter); call-style ops are 10.
    pub fn precedence(self) -> u8 {
        match self {
            BinOp::Or => 1,
            BinOp::And => 2,
            BinOp::Eq | BinOp::Ne => 3,
            BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => 4,
            BinOp::Add | BinOp::Sub => 5,
            BinOp::Mul | BinOp::Div => 6,
            BinOp::FloorDiv | BinOp::FloorMod | BinOp::Min | BinOp::Max => 10,
        }
    }

    /// Whether this is a comparison (returns bool).
    pub fn is_comparison(self) -> bool {
        matches!(
            self,
            BinOp::Eq | BinOp::Ne | BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge
        )
    }

    /// Whether this is `&&` or `||`.
    pub fn is_logical(self) -> bool {
        matches!(self, BinOp::And | BinOp::Or)
    }

    /// The comparison that holds exactly when this one does not (`<` gives `>=`).
    pub fn negated_comparison(self) -> Option<BinOp> {
        Some(match self {
            BinOp::Eq => BinOp::Ne,
            BinOp::Ne => BinOp::Eq,
            BinOp::Lt => BinOp::Ge,
            BinOp::Le => BinOp::Gt,
            BinOp::Gt => BinOp::Le,
            BinOp::Ge => BinOp::Lt,
            _ => return None,
        })
    }
}

/// A math intrinsic. All take float operands of one type; `abs` also takes integers.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Intrinsic {
    /// `e^x`.
    Exp,
    /// The natural logarithm; `-inf` at 0, NaN below.
    Log,
    /// The square root; NaN below 0.
    Sqrt,
    /// `1 / sqrt(x)`.
    Rsqrt,
    /// The hyperbolic tangent.
    Tanh,
    /// The logistic `1 / (1 + exp(-x))`, in the stable form (`exp(x) / (1 + exp(x))`
    /// for `x < 0`; see [`crate::tir::interp::sigmoid`]).
    Sigmoid,
    /// The Gauss error function.
    Erf,
    /// `a * b + c`, fused (one rounding).
    Fma,
    /// `a^b` (C's `powf`).
    Pow,
    /// The absolute value; integers wrap (`abs(MIN) == MIN`).
    Abs,
    /// Rounding toward negative infinity.
    Floor,
    /// Rounding toward positive infinity.
    Ceil,
    /// A trigonometric or hyperbolic function or its inverse.
    Trig(Trig),
}

/// Generates [`Trig`] from one table: each function's variant, its text name and the
/// Rust `f32`/`f64` method that defines it.
macro_rules! trig_functions {
    ($($v:ident => $name:literal, $method:ident;)*) => {
        /// The trigonometric and hyperbolic functions and their inverses. Their meaning
        /// in the loop IR is the C library's (Rust's `f32`/`f64` methods call libm:
        /// within 1 ulp of the exact value in glibc), in `f32` for every float dtype but
        /// `float64`, then rounded to the dtype like every float operation.
        #[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Trig {
            $(#[doc = concat!("`", $name, "`.")] $v,)*
        }

        impl Trig {
            /// Every function, in a fixed order.
            pub const ALL: [Trig; [$($name),*].len()] = [$(Trig::$v),*];

            /// The name in the text form (`sin`, `atanh`).
            pub fn name(self) -> &'static str {
                match self {
                    $(Trig::$v => $name,)*
                }
            }

            /// The function in `f32`.
            pub fn f32(self, x: f32) -> f32 {
                match self {
                    $(Trig::$v => x.$method(),)*
                }
            }

            /// The function in `f64` (float64 values).
            pub fn f64(self, x: f64) -> f64 {
                match self {
                    $(Trig::$v => x.$method(),)*
                }
            }
        }
    };
}

trig_functions! {
    Sin => "sin", sin;
    Cos => "cos", cos;
    Tan => "tan", tan;
    Asin => "asin", asin;
    Acos => "acos", acos;
    Atan => "atan", atan;
    Sinh => "sinh", sinh;
    Cosh => "cosh", cosh;
    Asinh => "asinh", asinh;
    Acosh => "acosh", acosh;
    Atanh => "atanh", atanh;
}

impl Intrinsic {
    /// Every intrinsic, in a fixed order.
    pub const ALL: [Intrinsic; 23] = [
        Intrinsic::Exp,
        Intrinsic::Log,
        Intrinsic::Sqrt,
        Intrinsic::Rsqrt,
        Intrinsic::Tanh,
        Intrinsic::Sigmoid,
        Intrinsic::Erf,
        Intrinsic::Fma,
        Intrinsic::Pow,
        Intrinsic::Abs,
        Intrinsic::Floor,
        Intrinsic::Ceil,
        Intrinsic::Trig(Trig::Sin),
        Intrinsic::Trig(Trig::Cos),
        Intrinsic::Trig(Trig::Tan),
        Intrinsic::Trig(Trig::Asin),
        Intrinsic::Trig(Trig::Acos),
        Intrinsic::Trig(Trig::Atan),
        Intrinsic::Trig(Trig::Sinh),
        Intrinsic::Trig(Trig::Cosh),
        Intrinsic::Trig(Trig::Asinh),
        Intrinsic::Trig(Trig::Acosh),
        Intrinsic::Trig(Trig::Atanh),
    ];

    /// The name in the text form.
    pub fn name(self) -> &'static str {
        match self {
            Intrinsic::Exp => "exp",
            Intrinsic::Log => "log",
            Intrinsic::Sqrt => "sqrt",
            Intrinsic::Rsqrt => "rsqrt",
            Intrinsic::Tanh => "tanh",
            Intrinsic::Sigmoid => "sigmoid",
            Intrinsic::Erf => "erf",
            Intrinsic::Fma => "fma",
            Intrinsic::Pow => "pow",
            Intrinsic::Abs => "abs",
            Intrinsic::Floor => "floor",
            Intrinsic::Ceil => "ceil",
            Intrinsic::Trig(t) => t.name(),
        }
    }

    /// The intrinsic with the given text name.
    pub fn from_name(s: &str) -> Option<Intrinsic> {
        Intrinsic::ALL.into_iter().find(|i| i.name() == s)
    }

    /// Number of arguments.
    pub fn arity(self) -> usize {
        match self {
            Intrinsic::Fma => 3,
            Intrinsic::Pow => 2,
            _ => 1,
        }
    }
}

/// An expression of the loop IR.
/// (`Clone`, `PartialEq`, `Debug` and `Drop` are written out in module `tree`, safe on
/// any depth.)
pub enum Expr {
    /// An integer immediate of an integer dtype (`5`, `5i64`, `255u8`).
    Int {
        /// The value; it fits `dtype`.
        value: i64,
        /// An integer dtype.
        dtype: DType,
    },
    /// A float immediate of a float dtype (`1.5`, `1.5f16`); float32 values are kept
    /// exactly as given and rounded when evaluated.
    Float {
        /// The value as written.
        value: f64,
        /// A float dtype.
        dtype: DType,
    },
    /// `true` or `false`.
    Bool(bool),
    /// A loop variable or let-bound value.
    Var(VarId),
    /// An element (or, with ramp indices, a vector of elements) of a buffer.
    Load {
        /// The buffer read.
        buffer: BufferId,
        /// One integer index per dimension of the buffer.
        indices: Vec<Expr>,
    },
    /// A binary operation.
    Binary {
        /// The operator.
        op: BinOp,
        /// The left operand.
        lhs: Box<Expr>,
        /// The right operand, of the same type as `lhs`.
        rhs: Box<Expr>,
    },
    /// Logical negation of a bool.
    Not(Box<Expr>),
    /// `cond ? then : else_`, both sides evaluated.
    Select {
        /// A bool with the lanes of the result.
        cond: Box<Expr>,
        /// The value where `cond` holds.
        then: Box<Expr>,
        /// The value elsewhere, of the same type as `then`.
        else_: Box<Expr>,
    },
    /// Conversion to another element dtype (lanes unchanged).
    Cast {
        /// The element dtype converted to.
        to: DType,
        /// The value converted.
        value: Box<Expr>,
    },
    /// A math intrinsic.
    Call {
        /// The function.
        intrinsic: Intrinsic,
        /// Its operands, as many as [`Intrinsic::arity`], of one type.
        args: Vec<Expr>,
    },
    /// The integer vector `base, base + stride, ..., base + (lanes-1) * stride`.
    Ramp {
        /// The first lane, a scalar integer.
        base: Box<Expr>,
        /// The step between lanes, of `base`'s dtype.
        stride: Box<Expr>,
        /// The number of lanes (at least 2).
        lanes: u32,
    },
    /// A scalar repeated in every lane.
    Broadcast {
        /// The scalar repeated.
        value: Box<Expr>,
        /// The number of lanes (at least 2).
        lanes: u32,
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

    /// An `int64` immediate.
    pub fn i64(value: i64) -> Expr {
        Expr::Int {
            value,
            dtype: DType::I64,
        }
    }

    /// An integer immediate of `dtype` (the value is kept as given).
    pub fn int_of(value: i64, dtype: DType) -> Expr {
        Expr::Int { value, dtype }
    }

    /// A `float32` immediate.
    pub fn f32(value: f32) -> Expr {
        Expr::Float {
            value: value as f64,
            dtype: DType::F32,
        }
    }

    /// A float immediate of `dtype`.
    pub fn float(value: f64, dtype: DType) -> Expr {
        Expr::Float { value, dtype }
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

    /// A bool immediate.
    pub fn bool(value: bool) -> Expr {
        Expr::Bool(value)
    }

    /// A variable reference.
    pub fn var(var: VarId) -> Expr {
        Expr::Var(var)
    }

    /// A load of `buffer` at one index per dimension.
    pub fn load(buffer: BufferId, indices: impl IntoIterator<Item = Expr>) -> Expr {
        Expr::Load {
            buffer,
            indices: indices.into_iter().collect(),
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

    /// `floordiv(self, rhs)`.
    pub fn floordiv(self, rhs: impl Into<Expr>) -> Expr {
        Expr::binary(BinOp::FloorDiv, self, rhs)
    }

    /// `floormod(self, rhs)`.
    pub fn floormod(self, rhs: impl Into<Expr>) -> Expr {
        Expr::binary(BinOp::FloorMod, self, rhs)
    }

    /// `min(self, rhs)`.
    pub fn min(self, rhs: impl Into<Expr>) -> Expr {
        Expr::binary(BinOp::Min, self, rhs)
    }

    /// `max(self, rhs)`.
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

    /// `select(cond, then, else_)`.
    pub fn select(cond: impl Into<Expr>, then: impl Into<Expr>, else_: impl Into<Expr>) -> Expr {
        Expr::Select {
            cond: Box::new(cond.into()),
            then: Box::new(then.into()),
            else_: Box::new(else_.into()),
        }
    }

    /// `cast(to, self)`.
    pub fn cast(self, to: DType) -> Expr {
        Expr::Cast {
            to,
            value: Box::new(self),
        }
    }

    /// An intrinsic call.
    pub fn call(intrinsic: Intrinsic, args: impl IntoIterator<Item = Expr>) -> Expr {
        Expr::Call {
            intrinsic,
            args: args.into_iter().collect(),
        }
    }

    /// A one-argument intrinsic applied to `self` (`x.unary(Intrinsic::Exp)`).
    pub fn unary(self, intrinsic: Intrinsic) -> Expr {
        Expr::call(intrinsic, [self])
    }

    /// `ramp(base, stride, lanes)`.
    pub fn ramp(base: impl Into<Expr>, stride: impl Into<Expr>, lanes: u32) -> Expr {
        Expr::Ramp {
            base: Box::new(base.into()),
            stride: Box::new(stride.into()),
            lanes,
        }
    }

    /// `broadcast(value, lanes)`.
    pub fn broadcast(value: impl Into<Expr>, lanes: u32) -> Expr {
        Expr::Broadcast {
            value: Box::new(value.into()),
            lanes,
        }
    }

    /// The direct children, in order.
    pub fn children(&self) -> Vec<&Expr> {
        match self {
            Expr::Int { .. } | Expr::Float { .. } | Expr::Bool(_) | Expr::Var(_) => vec![],
            Expr::Load { indices, .. } => indices.iter().collect(),
            Expr::Binary { lhs, rhs, .. } => vec![lhs, rhs],
            Expr::Not(x) => vec![x],
            Expr::Select { cond, then, else_ } => vec![cond, then, else_],
            Expr::Cast { value, .. } => vec![value],
            Expr::Call { args, .. } => args.iter().collect(),
            Expr::Ramp { base, stride, .. } => vec![base, stride],
            Expr::Broadcast { value, .. } => vec![value],
        }
    }

    /// Calls `f` on this expression and every sub-expression, parents first.
    pub fn visit(&self, f: &mut impl FnMut(&Expr)) {
        super::visit::for_each_expr(self, f)
    }

    /// The integer value if this is an integer immediate.
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Expr::Int { value, .. } => Some(*value),
            _ => None,
        }
    }
}

impl From<VarId> for Expr {
    fn from(v: VarId) -> Expr {
        Expr::Var(v)
    }
}

impl From<i32> for Expr {
    fn from(v: i32) -> Expr {
        Expr::int(v)
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
        impl<T: Into<Expr>> ops::$trait<T> for VarId {
            type Output = Expr;
            fn $method(self, rhs: T) -> Expr {
                Expr::binary(BinOp::$op, self, rhs)
            }
        }
    )*};
}
arith_ops!(Add add Add, Sub sub Sub, Mul mul Mul, Div div Div);

impl ops::Not for Expr {
    type Output = Expr;
    fn not(self) -> Expr {
        Expr::Not(Box::new(self))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operators_build_trees() {
        let i = VarId(0);
        let j = VarId(1);
        let e = i * 4 + j;
        assert_eq!(
            e,
            Expr::binary(
                BinOp::Add,
                Expr::binary(BinOp::Mul, Expr::Var(i), Expr::int(4)),
                Expr::Var(j)
            )
        );
        assert_eq!(e.children().len(), 2);
        let mut n = 0;
        e.visit(&mut |_| n += 1);
        assert_eq!(n, 5);
        assert_eq!(!Expr::bool(true), Expr::Not(Box::new(Expr::Bool(true))));
    }

    #[test]
    fn names_and_negations() {
        for i in Intrinsic::ALL {
            assert_eq!(Intrinsic::from_name(i.name()), Some(i));
        }
        for op in BinOp::ALL {
            assert!(op.symbol().is_some() != op.call_name().is_some());
            if let Some(n) = op.negated_comparison() {
                assert_eq!(n.negated_comparison(), Some(op));
            }
        }
    }
}
