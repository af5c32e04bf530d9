//! Elementwise ops: unary math (`nn.relu`, `exp`, `log`, `sqrt`, `rsqrt`, `tanh`,
//! `sigmoid`, `erf`, `negative`, `abs`, `floor`, `ceil`, `round`, and the trigonometric
//! and hyperbolic functions with their inverses, `sin` ... `atanh`), broadcasting binary
//! arithmetic (with `floor_mod` and `trunc_mod`) and comparisons (numpy broadcasting),
//! `clip`, `cast` and `where`.
//!
//! Each op's attributes, type rule and reference evaluation live here. Numeric policy:
//! float dtypes compute in `f64` and round once to the output dtype; integer dtypes
//! compute in `i64` and wrap to their width at the end; `bool` stays `bool`.
//! `float32` unary and binary ops take a fast path with the same per-element `f64`
//! arithmetic (bit-identical, property-tested against the generic path) that reads
//! broadcast operands in place through strides instead of copying them out in `f64`:
//! constant folding runs these on whole weight tensors.

use crate::attrs::{AttrReader, AttrWriter, F64};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::tensor::{Data, Element, NDArray};
use crate::ty::{TensorType, Type, fmt_shape};
use crate::value::Value;

use super::util::{self, expect_arity, expect_float, expect_same_dtype, tensor_arg};
use super::{Op, OpPattern, OpSpec};

/// IEEE 754-2019 `maximum` in `f64`, the reference's float `maximum` (and `clip`,
/// max reductions and max pools): NaN when either operand is NaN, otherwise the
/// larger, with `+0` larger than `-0` (the loop IR's float `Max` contract; Rust's
/// `f64::max` returns the non-NaN operand and may pick either zero).
pub fn fmaximum(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else if a == b {
        // Equal values differ at most in the sign of zero.
        if a.is_sign_negative() { b } else { a }
    } else if a > b {
        a
    } else {
        b
    }
}

/// IEEE 754-2019 `minimum` in `f64`: NaN when either operand is NaN, otherwise the
/// smaller, with `-0` smaller than `+0`.
pub fn fminimum(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else if a == b {
        if a.is_sign_negative() { a } else { b }
    } else if a < b {
        a
    } else {
        b
    }
}

/// Generates the kind enums, their `ALL`, `name` (and `transcendental` for unary
/// kinds) and the family's `NAMES` from the table below.
macro_rules! elemwise_kinds {
    (
        $(#[$udoc:meta])* $unary:ident {
            $($(#[$uvdoc:meta])* $u:ident => $uname:literal, transcendental: $tr:literal;)*
        }
        $(#[$bdoc:meta])* $binary:ident {
            $($(#[$bvdoc:meta])* $b:ident => $bname:literal;)*
        }
        others [$($other:literal),* $(,)?]
    ) => {
        $(#[$udoc])*
        #[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $unary {
            $($(#[$uvdoc])* $u,)*
        }

        $(#[$bdoc])*
        #[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $binary {
            $($(#[$bvdoc])* $b,)*
        }

        impl $unary {
            /// Every unary kind, in declaration order.
            pub const ALL: [$unary; [$(stringify!($u)),*].len()] = [$($unary::$u),*];

            /// The op name in the text form.
            pub fn name(self) -> &'static str {
                match self {
                    $($unary::$u => $uname,)*
                }
            }

            /// Whether the function is transcendental (about four FLOPs an element in
            /// [`OpSpec::flops`]).
            pub fn transcendental(self) -> bool {
                match self {
                    $($unary::$u => $tr,)*
                }
            }
        }

        impl $binary {
            /// Every binary kind, in declaration order.
            pub const ALL: [$binary; [$(stringify!($b)),*].len()] = [$($binary::$b),*];

            /// The op name in the text form.
            pub fn name(self) -> &'static str {
                match self {
                    $($binary::$b => $bname,)*
                }
            }
        }

        /// Names of the ops in this family.
        pub const NAMES: &[&str] = &[$($uname,)* $($bname,)* $($other),*];
    };
}

// The one table of elementwise kinds: each kind's variant and op name, and for unary
// kinds whether the function is transcendental. The enums, their `ALL` and `name`, and
// the family's `NAMES` are generated from it, so a kind without a name (or a name
// without a kind) does not compile.
elemwise_kinds! {
    /// Which elementwise function a [`Unary`] applies.
    UnaryKind {
        /// `max(x, 0)`.
        Relu => "nn.relu", transcendental: false;
        /// `e^x`.
        Exp => "exp", transcendental: true;
        /// The natural logarithm.
        Log => "log", transcendental: true;
        /// The square root.
        Sqrt => "sqrt", transcendental: true;
        /// `1 / sqrt(x)`.
        Rsqrt => "rsqrt", transcendental: true;
        /// The hyperbolic tangent.
        Tanh => "tanh", transcendental: true;
        /// The logistic function `1 / (1 + e^-x)`.
        Sigmoid => "sigmoid", transcendental: true;
        /// The Gauss error function.
        Erf => "erf", transcendental: true;
        /// `-x` (integers wrap).
        Negative => "negative", transcendental: false;
        /// `|x|` (integers wrap: `abs(MIN) == MIN`).
        Abs => "abs", transcendental: false;
        /// Rounding toward negative infinity.
        Floor => "floor", transcendental: false;
        /// Rounding toward positive infinity.
        Ceil => "ceil", transcendental: false;
        /// To the nearest integer, ties to even (numpy's and ONNX's `round`).
        Round => "round", transcendental: false;
        /// The sine (radians).
        Sin => "sin", transcendental: true;
        /// The cosine (radians).
        Cos => "cos", transcendental: true;
        /// The tangent (radians).
        Tan => "tan", transcendental: true;
        /// The arcsine, in `[-pi/2, pi/2]` (NaN outside `[-1, 1]`).
        Asin => "asin", transcendental: true;
        /// The arccosine, in `[0, pi]` (NaN outside `[-1, 1]`).
        Acos => "acos", transcendental: true;
        /// The arctangent, in `(-pi/2, pi/2)`.
        Atan => "atan", transcendental: true;
        /// The hyperbolic sine.
        Sinh => "sinh", transcendental: true;
        /// The hyperbolic cosine.
        Cosh => "cosh", transcendental: true;
        /// The inverse hyperbolic sine.
        Asinh => "asinh", transcendental: true;
        /// The inverse hyperbolic cosine (NaN below 1).
        Acosh => "acosh", transcendental: true;
        /// The inverse hyperbolic tangent (NaN outside `[-1, 1]`).
        Atanh => "atanh", transcendental: true;
    }
    /// Which function a [`Binary`] applies.
    BinaryKind {
        /// `a + b` (integers wrap).
        Add => "add";
        /// `a - b` (integers wrap).
        Subtract => "subtract";
        /// `a * b` (integers wrap).
        Multiply => "multiply";
        /// `a / b`; integer division truncates toward zero and division by zero is an
        /// error.
        Divide => "divide";
        /// `a^b`; for integers, wrapping, and a negative exponent is an error.
        Power => "power";
        /// The larger (IEEE 754-2019 `maximum` on floats: NaN propagates, `-0 < +0`).
        Maximum => "maximum";
        /// The smaller (IEEE 754-2019 `minimum` on floats: NaN propagates, `-0 < +0`).
        Minimum => "minimum";
        /// `a == b`, as `bool`.
        Equal => "equal";
        /// `a != b`, as `bool`.
        NotEqual => "not_equal";
        /// `a < b`, as `bool`.
        Less => "less";
        /// `a <= b`, as `bool`.
        LessEqual => "less_equal";
        /// `a > b`, as `bool`.
        Greater => "greater";
        /// `a >= b`, as `bool`.
        GreaterEqual => "greater_equal";
        /// Remainder of division rounding toward negative infinity: the sign of the
        /// divisor (Python's `%`, ONNX `Mod` with `fmod=0`).
        FloorMod => "floor_mod";
        /// Remainder of division truncating toward zero: the sign of the dividend (C's
        /// `fmod`, ONNX `Mod` with `fmod=1`).
        TruncMod => "trunc_mod";
    }
    others ["clip", "cast", "where"]
}

/// A one-argument elementwise op.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Unary {
    /// The function applied to each element.
    pub kind: UnaryKind,
}

/// A two-argument broadcasting op; comparisons return `bool`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Binary {
    /// The function applied to each pair of (broadcast) elements.
    pub kind: BinaryKind,
}

/// `clip(data, a_min=, a_max=)`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Clip {
    /// The lower bound, in the data's units.
    pub a_min: F64,
    /// The upper bound (not below `a_min`).
    pub a_max: F64,
}

/// `cast(data, dtype=)`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Cast {
    /// The dtype converted to (float to int truncates toward zero and saturates).
    pub dtype: DType,
}

/// `where(condition, x, y)` with broadcasting.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Where;

// ---------------------------------------------------------------------------------------
// Shared helpers
// ---------------------------------------------------------------------------------------

/// The numpy broadcast of several named arguments, with an error that names each
/// argument and its shape.
fn broadcast_args(op: &str, args: &[(usize, &str, &TensorType)]) -> Result<Vec<usize>> {
    let mut shape = Vec::new();
    for (_, _, t) in args {
        match util::broadcast_shapes(op, &shape, &t.shape) {
            Ok(s) => shape = s,
            Err(_) => {
                let list: Vec<String> = args
                    .iter()
                    .map(|(i, what, t)| {
                        format!("argument {i} ({what}) has shape {}", fmt_shape(&t.shape))
                    })
                    .collect();
                return Err(Error::ty(
                    op,
                    format!("shapes do not broadcast: {}", list.join(", ")),
                ));
            }
        }
    }
    Ok(shape)
}

/// The values of `t` as `f64`, broadcast to `shape`.
fn expand_f64(t: &NDArray, shape: &[usize]) -> Vec<f64> {
    let v = t.to_f64_vec();
    if t.shape() == shape {
        return v;
    }
    util::broadcast_indices(t.shape(), shape)
        .into_iter()
        .map(|i| v[i])
        .collect()
}

/// The values of `t` as `i64`, broadcast to `shape`.
fn expand_i64(t: &NDArray, shape: &[usize]) -> Vec<i64> {
    let v = t.to_i64_vec();
    if t.shape() == shape {
        return v;
    }
    util::broadcast_indices(t.shape(), shape)
        .into_iter()
        .map(|i| v[i])
        .collect()
}

/// The elements of `t` broadcast to `shape`, keeping their dtype.
fn expand_data(t: &NDArray, shape: &[usize]) -> Data {
    if t.shape() == shape {
        return t.data().clone();
    }
    t.data().gather(util::broadcast_indices(t.shape(), shape))
}

/// The broadcast of two operands over an output shape as a few coalesced loops:
/// `(extent, stride_a, stride_b)` from outer to inner, a stride 0 where the operand
/// is broadcast. Output dims of extent 1 are dropped and adjacent dims merge when
/// both operands step through them as one (`stride[d] == stride[d+1] * extent[d+1]`),
/// so `W[64,3,7,7] * S[64,1,1,1]` runs as 64 rows of 147 with a scalar `S`.
fn coalesced_loops(a: &[usize], b: &[usize], out: &[usize]) -> Vec<(usize, usize, usize)> {
    // The row-major strides of `shape` aligned to the output rank, 0 on broadcast dims.
    let strides = |shape: &[usize]| -> Vec<usize> {
        let offset = out.len() - shape.len();
        let own = crate::tensor::row_major_strides(shape);
        (0..out.len())
            .map(|d| match d.checked_sub(offset) {
                Some(i) if shape[i] != 1 => own[i],
                _ => 0,
            })
            .collect()
    };
    let (sa, sb) = (strides(a), strides(b));
    let mut inner_first: Vec<(usize, usize, usize)> = Vec::new();
    for d in (0..out.len()).rev().filter(|&d| out[d] != 1) {
        let (n, ta, tb) = (out[d], sa[d], sb[d]);
        match inner_first.last_mut() {
            Some((m, ia, ib)) if ta == *ia * *m && tb == *ib * *m => *m *= n,
            _ => inner_first.push((n, ta, tb)),
        }
    }
    if inner_first.is_empty() {
        inner_first.push((1, 0, 0));
    }
    inner_first.reverse();
    inner_first
}

/// `f` over the numpy broadcast of `a` (shape `sa`) and `b` (shape `sb`) to `out`,
/// in row-major order, without copying either operand out to the full shape.
fn broadcast_map<A: Copy, B: Copy, O>(
    (a, sa): (&[A], &[usize]),
    (b, sb): (&[B], &[usize]),
    out: &[usize],
    f: impl Fn(A, B) -> O,
) -> Vec<O> {
    let total: usize = out.iter().product();
    let mut res = Vec::with_capacity(total);
    if total == 0 {
        return res;
    }
    let loops = coalesced_loops(sa, sb, out);
    let (outer, inner) = loops.split_at(loops.len() - 1);
    let (n, ia, ib) = inner[0];
    let mut idx = vec![0usize; outer.len()];
    let (mut oa, mut ob) = (0usize, 0usize);
    loop {
        match (ia, ib) {
            (1, 1) => res.extend(
                a[oa..oa + n]
                    .iter()
                    .zip(&b[ob..ob + n])
                    .map(|(&x, &y)| f(x, y)),
            ),
            (1, 0) => {
                let y = b[ob];
                res.extend(a[oa..oa + n].iter().map(|&x| f(x, y)));
            }
            (0, 1) => {
                let x = a[oa];
                res.extend(b[ob..ob + n].iter().map(|&y| f(x, y)));
            }
            _ => res.extend((0..n).map(|i| f(a[oa + i * ia], b[ob + i * ib]))),
        }
        // Odometer over the outer loops, moving the operand offsets along.
        let mut d = outer.len();
        loop {
            if d == 0 {
                return res;
            }
            d -= 1;
            let (m, ta, tb) = outer[d];
            idx[d] += 1;
            oa += ta;
            ob += tb;
            if idx[d] < m {
                break;
            }
            idx[d] = 0;
            oa -= ta * m;
            ob -= tb * m;
        }
    }
}

/// `match`es `$kind` over the listed variants of `$enum`, with `$k` a `const` of the
/// matched variant in `$body`: one copy of `$body` per kind, its per-element `match`
/// folded away at compile time.
macro_rules! per_kind {
    ($enum:ident, $kind:expr, $k:ident => $body:expr, [$($v:ident),* $(,)?]) => {
        match $kind {
            $($enum::$v => {
                const $k: $enum = $enum::$v;
                $body
            })*
        }
    };
}

// ---------------------------------------------------------------------------------------
// Unary
// ---------------------------------------------------------------------------------------

impl UnaryKind {
    /// The kind whose op name is `name`.
    pub fn from_name(name: &str) -> Option<UnaryKind> {
        UnaryKind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// Whether the function is defined on float tensors only (transcendental math);
    /// the others (`nn.relu`, `negative`, `abs`) also take integer tensors.
    pub fn float_only(self) -> bool {
        !matches!(self, UnaryKind::Relu | UnaryKind::Negative | UnaryKind::Abs)
    }

    /// The function on one `f64`, with IEEE semantics (`log(0) = -inf`,
    /// `sqrt(-1) = NaN`); `nn.relu` keeps NaN.
    pub fn apply_f64(self, x: f64) -> f64 {
        match self {
            UnaryKind::Relu => {
                if x < 0.0 {
                    0.0
                } else {
                    x
                }
            }
            UnaryKind::Exp => x.exp(),
            UnaryKind::Log => x.ln(),
            UnaryKind::Sqrt => x.sqrt(),
            UnaryKind::Rsqrt => 1.0 / x.sqrt(),
            UnaryKind::Tanh => x.tanh(),
            UnaryKind::Sigmoid => 1.0 / (1.0 + (-x).exp()),
            UnaryKind::Erf => erf(x),
            UnaryKind::Negative => -x,
            UnaryKind::Abs => x.abs(),
            UnaryKind::Floor => x.floor(),
            UnaryKind::Ceil => x.ceil(),
            UnaryKind::Round => x.round_ties_even(),
            // The C library's correctly rounded-or-nearly f64 functions (Rust's `f64`
            // methods call libm): within 1 ulp of the exact value in f64, so exact
            // after rounding to f32 but for rare ties.
            UnaryKind::Sin => x.sin(),
            UnaryKind::Cos => x.cos(),
            UnaryKind::Tan => x.tan(),
            UnaryKind::Asin => x.asin(),
            UnaryKind::Acos => x.acos(),
            UnaryKind::Atan => x.atan(),
            UnaryKind::Sinh => x.sinh(),
            UnaryKind::Cosh => x.cosh(),
            UnaryKind::Asinh => x.asinh(),
            UnaryKind::Acosh => x.acosh(),
            UnaryKind::Atanh => x.atanh(),
        }
    }

    /// The function on one integer (only the kinds that are not float-only); wraps
    /// like two's complement (`negative(-128i8)` is `-128`).
    fn apply_i64(self, x: i64, dtype: DType) -> Option<i64> {
        match self {
            // An unsigned value (uint64's bit pattern included) is never negative.
            UnaryKind::Relu | UnaryKind::Abs if dtype.is_unsigned() => Some(x),
            UnaryKind::Relu => Some(x.max(0)),
            UnaryKind::Negative => Some(x.wrapping_neg()),
            UnaryKind::Abs => Some(x.wrapping_abs()),
            _ => None,
        }
    }
}

impl Unary {
    /// The unary op of `kind`.
    pub fn new(kind: UnaryKind) -> Unary {
        Unary { kind }
    }

    /// The `float32` evaluation: each element widened to `f64`, mapped and rounded
    /// once to `f32`, as the generic float path does, without the `f64` copy.
    fn eval_f32(&self, v: &[f32]) -> Data {
        per_kind!(UnaryKind, self.kind, K => {
            Data::F32(v.iter().map(|&x| K.apply_f64(x as f64) as f32).collect())
        }, [Relu, Exp, Log, Sqrt, Rsqrt, Tanh, Sigmoid, Erf, Negative, Abs, Floor, Ceil, Round,
            Sin, Cos, Tan, Asin, Acos, Atan, Sinh, Cosh, Asinh, Acosh, Atanh])
    }

    /// The evaluation for every dtype: floats in `f64`, integers in `i64`.
    fn eval_generic(&self, x: &NDArray) -> Result<Data> {
        let dtype = x.dtype();
        Ok(if dtype.is_float() {
            Data::from_f64(
                dtype,
                x.to_f64_vec().into_iter().map(|v| self.kind.apply_f64(v)),
            )
        } else {
            let v = x
                .to_i64_vec()
                .into_iter()
                .map(|v| self.kind.apply_i64(v, dtype))
                .collect::<Option<Vec<i64>>>()
                .ok_or_else(|| Error::Eval(format!("{}: not defined on {dtype}", self.name())))?;
            Data::from_i64(dtype, v)
        })
    }
}

impl OpSpec for Unary {
    fn pattern(&self) -> OpPattern {
        OpPattern::ElemWise
    }

    /// Four an element for a transcendental function ([`UnaryKind::transcendental`]),
    /// one otherwise.
    fn flops(&self, args: &[Type], out: &Type) -> f64 {
        let per = if self.kind.transcendental() { 4.0 } else { 1.0 };
        per * super::elementwise_flops(args, out)
    }

    fn name(&self) -> &str {
        self.kind.name()
    }

    fn infer_type(&self, args: &[Type]) -> Result<Type> {
        let op = self.name();
        expect_arity(op, args, 1)?;
        let t = tensor_arg(op, args, 0, "data")?;
        if self.kind.float_only() {
            expect_float(op, t, "argument 0 (data)")?;
        } else if t.dtype.is_bool() {
            return Err(Error::ty(
                op,
                format!("argument 0 (data) must be a numeric (float or integer) tensor, got {t}"),
            ));
        }
        Ok(Type::Tensor(t.clone()))
    }

    fn eval(&self, args: &[Value], _out: &Type) -> Result<Value> {
        let x = util::tensors(self.name(), args)?[0];
        let data = match x.data() {
            Data::F32(v) => self.eval_f32(v),
            _ => self.eval_generic(x)?,
        };
        Ok(NDArray::new(x.shape(), data)?.into())
    }
}

/// The error function, within a few ulp over the whole `f64` range (checked against
/// libm's `erf` on random arguments while writing it: worst case about 5e-16 relative).
///
/// For `|x| < 2` it sums the everywhere-positive series
/// `erf(x) = 2/sqrt(pi) * exp(-x^2) * sum_n 2^n x^(2n+1) / (1*3*...*(2n+1))`
/// (Abramowitz & Stegun 7.1.6), which has no cancellation. For `2 <= |x| <= 6` it takes
/// `1 - erfc(|x|)` with `erfc` from its continued fraction (A&S 7.1.14) evaluated by
/// Lentz's method. Beyond 6, `erfc < 2.2e-17` is below half an ulp of 1, so `erf = ±1`.
pub fn erf(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    let a = x.abs();
    let y = if a < 2.0 {
        erf_series(a)
    } else if a <= 6.0 {
        1.0 - erfc_continued_fraction(a)
    } else {
        1.0
    };
    // Odd function; keeps the sign of zero (erf(-0) = -0).
    if x.is_sign_negative() { -y } else { y }
}

/// `erf(a)` for `0 <= a < 2` by the positive series (see [`erf`]).
fn erf_series(a: f64) -> f64 {
    // term_n = 2^n a^(2n+1) / (2n+1)!!, so term_{n+1} = term_n * 2a^2 / (2n+3).
    let two_a2 = 2.0 * a * a;
    let (mut term, mut sum, mut n) = (a, a, 0.0);
    while term > sum * 1e-17 {
        term *= two_a2 / (2.0 * n + 3.0);
        sum += term;
        n += 1.0;
    }
    std::f64::consts::FRAC_2_SQRT_PI * (-a * a).exp() * sum
}

/// `erfc(a)` for `a >= 2`:
/// `exp(-a^2) / sqrt(pi) / (a + (1/2)/(a + (2/2)/(a + (3/2)/(a + ...))))`,
/// evaluated front to back with Lentz's method (under 60 steps for `a >= 2`).
fn erfc_continued_fraction(a: f64) -> f64 {
    const TINY: f64 = 1e-300;
    let (mut f, mut c, mut d) = (a, a, 0.0);
    for k in 1..1000 {
        let ak = k as f64 * 0.5;
        d = a + ak * d;
        if d == 0.0 {
            d = TINY;
        }
        d = 1.0 / d;
        c = a + ak / c;
        if c == 0.0 {
            c = TINY;
        }
        let delta = c * d;
        f *= delta;
        if (delta - 1.0).abs() < 1e-16 {
            break;
        }
    }
    // exp(-a^2) with a^2 split into its rounded value and the rounding error.
    let p = a * a;
    let lo = a.mul_add(a, -p);
    (-p).exp() * (1.0 - lo) / (f * std::f64::consts::PI.sqrt())
}

// ---------------------------------------------------------------------------------------
// Binary
// ---------------------------------------------------------------------------------------

impl BinaryKind {
    /// The kind whose op name is `name`.
    pub fn from_name(name: &str) -> Option<BinaryKind> {
        BinaryKind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// Whether the op compares and returns `bool`.
    pub fn is_comparison(self) -> bool {
        matches!(
            self,
            BinaryKind::Equal
                | BinaryKind::NotEqual
                | BinaryKind::Less
                | BinaryKind::LessEqual
                | BinaryKind::Greater
                | BinaryKind::GreaterEqual
        )
    }

    /// Whether the op accepts `bool` tensors: `equal`, `not_equal`, `maximum` (logical
    /// or) and `minimum` (logical and).
    pub fn allows_bool(self) -> bool {
        matches!(
            self,
            BinaryKind::Equal | BinaryKind::NotEqual | BinaryKind::Maximum | BinaryKind::Minimum
        )
    }

    /// The comparison on two ordered values (only for comparison kinds).
    fn compare<T: PartialOrd>(self, a: T, b: T) -> bool {
        match self {
            BinaryKind::Equal => a == b,
            BinaryKind::NotEqual => a != b,
            BinaryKind::Less => a < b,
            BinaryKind::LessEqual => a <= b,
            BinaryKind::Greater => a > b,
            BinaryKind::GreaterEqual => a >= b,
            _ => false,
        }
    }

    /// The arithmetic on two `f64` with IEEE semantics (only for non-comparison
    /// kinds); `maximum` and `minimum` are IEEE 754-2019 `maximum`/`minimum`
    /// ([`fmaximum`], [`fminimum`]): NaN propagates as numpy does, and `-0 < +0`.
    pub fn apply_f64(self, a: f64, b: f64) -> f64 {
        match self {
            BinaryKind::Add => a + b,
            BinaryKind::Subtract => a - b,
            BinaryKind::Multiply => a * b,
            BinaryKind::Divide => a / b,
            BinaryKind::Power => a.powf(b),
            BinaryKind::Maximum => fmaximum(a, b),
            BinaryKind::Minimum => fminimum(a, b),
            // `%` on f64 is C's fmod: exact, the sign of the dividend.
            BinaryKind::TruncMod => a % b,
            BinaryKind::FloorMod => {
                let r = a % b;
                if r != 0.0 && (r < 0.0) != (b < 0.0) {
                    r + b
                } else {
                    r
                }
            }
            _ => f64::NAN,
        }
    }

    /// The arithmetic on two integers, wrapping mod 2^64 (the caller wraps to the
    /// dtype's width, which commutes with these ring operations). Division truncates
    /// toward zero. Errors say what went wrong without the op name.
    fn apply_i64(self, a: i64, b: i64) -> std::result::Result<i64, String> {
        Ok(match self {
            BinaryKind::Add => a.wrapping_add(b),
            BinaryKind::Subtract => a.wrapping_sub(b),
            BinaryKind::Multiply => a.wrapping_mul(b),
            BinaryKind::Divide => {
                if b == 0 {
                    return Err(format!("integer division by zero ({a} / 0)"));
                }
                a.wrapping_div(b)
            }
            BinaryKind::Power => {
                if b < 0 {
                    // `(1 / a)^-b` with truncating division, as for `Divide`: 1 and -1
                    // keep their magnitude, every other base gives 0 (what ONNX Runtime
                    // gives), and zero is a division by zero.
                    if a == 0 {
                        return Err(format!(
                            "integer division by zero (0 to the negative power {b})"
                        ));
                    }
                    let r = 1 / a;
                    return Ok(if b & 1 == 1 { r } else { r * r });
                }
                // Square and multiply, wrapping.
                let (mut base, mut exp, mut acc) = (a, b as u64, 1i64);
                while exp > 0 {
                    if exp & 1 == 1 {
                        acc = acc.wrapping_mul(base);
                    }
                    base = base.wrapping_mul(base);
                    exp >>= 1;
                }
                acc
            }
            BinaryKind::Maximum => a.max(b),
            BinaryKind::Minimum => a.min(b),
            BinaryKind::FloorMod | BinaryKind::TruncMod => {
                if b == 0 {
                    return Err(format!("integer modulo by zero ({a} mod 0)"));
                }
                let r = a.wrapping_rem(b);
                if self == BinaryKind::FloorMod && r != 0 && (r < 0) != (b < 0) {
                    r + b
                } else {
                    r
                }
            }
            _ => return Err("not an arithmetic op".into()),
        })
    }
}

impl BinaryKind {
    /// [`BinaryKind::apply_i64`] for `uint64`: the ring operations are the same on the
    /// bit pattern; division, modulo, maximum and minimum read the operands unsigned.
    fn apply_u64(self, a: u64, b: u64) -> std::result::Result<u64, String> {
        Ok(match self {
            BinaryKind::Divide | BinaryKind::FloorMod | BinaryKind::TruncMod if b == 0 => {
                return Err(format!("integer division by zero ({a} / 0)"));
            }
            BinaryKind::Divide => a / b,
            BinaryKind::FloorMod | BinaryKind::TruncMod => a % b,
            BinaryKind::Maximum => a.max(b),
            BinaryKind::Minimum => a.min(b),
            BinaryKind::Power => {
                // Square and multiply over all 64 exponent bits, wrapping.
                let (mut base, mut e, mut acc) = (a, b, 1u64);
                while e > 0 {
                    if e & 1 == 1 {
                        acc = acc.wrapping_mul(base);
                    }
                    base = base.wrapping_mul(base);
                    e >>= 1;
                }
                acc
            }
            _ => self.apply_i64(a as i64, b as i64)? as u64,
        })
    }
}

impl Binary {
    /// The binary op of `kind`.
    pub fn new(kind: BinaryKind) -> Binary {
        Binary { kind }
    }
}

impl OpSpec for Binary {
    fn pattern(&self) -> OpPattern {
        OpPattern::Broadcast
    }

    fn name(&self) -> &str {
        self.kind.name()
    }

    fn infer_type(&self, args: &[Type]) -> Result<Type> {
        let op = self.name();
        expect_arity(op, args, 2)?;
        let a = tensor_arg(op, args, 0, "lhs")?;
        let b = tensor_arg(op, args, 1, "rhs")?;
        expect_same_dtype(op, a, "argument 0 (lhs)", b, "argument 1 (rhs)")?;
        if a.dtype.is_bool() && !self.kind.allows_bool() {
            return Err(Error::ty(
                op,
                format!(
                    "arguments are bool ({a} and {b}); only equal, not_equal, maximum and \
                     minimum take bool tensors"
                ),
            ));
        }
        let shape = broadcast_args(op, &[(0, "lhs", a), (1, "rhs", b)])?;
        let dtype = if self.kind.is_comparison() {
            DType::Bool
        } else {
            a.dtype
        };
        Ok(Type::tensor(shape, dtype))
    }

    fn eval(&self, args: &[Value], out: &Type) -> Result<Value> {
        let ts = util::tensors(self.name(), args)?;
        let (a, b) = (ts[0], ts[1]);
        let op = self.name();
        let shape = util::out_tensor(op, out)?.shape.clone();
        let data = match (a.data(), b.data()) {
            (Data::F32(x), Data::F32(y)) => self.eval_f32((x, a.shape()), (y, b.shape()), &shape),
            _ => self.eval_generic(a, b, &shape)?,
        };
        Ok(NDArray::new(shape, data)?.into())
    }
}

impl Binary {
    /// The `float32` evaluation, equal bit for bit to [`Binary::eval_generic`]: each
    /// element widens to `f64`, computes there and rounds once to `f32`, but the
    /// operands are read in place through broadcast strides rather than copied out
    /// to the full shape in `f64`.
    fn eval_f32(&self, a: (&[f32], &[usize]), b: (&[f32], &[usize]), shape: &[usize]) -> Data {
        per_kind!(BinaryKind, self.kind, K => if K.is_comparison() {
            Data::Bool(broadcast_map(a, b, shape, |x, y| K.compare(x as f64, y as f64)))
        } else {
            Data::F32(broadcast_map(a, b, shape, |x, y| K.apply_f64(x as f64, y as f64) as f32))
        }, [Add, Subtract, Multiply, Divide, Power, Maximum, Minimum, Equal, NotEqual, Less,
            LessEqual, Greater, GreaterEqual, FloorMod, TruncMod])
    }

    /// The evaluation for every dtype: floats in `f64`, integers and bool in `i64`,
    /// both operands first copied out to the broadcast `shape`.
    fn eval_generic(&self, a: &NDArray, b: &NDArray, shape: &[usize]) -> Result<Data> {
        let op = self.name();
        let kind = self.kind;
        let dtype = a.dtype();
        Ok(if dtype.is_float() {
            let (x, y) = (expand_f64(a, shape), expand_f64(b, shape));
            let pairs = x.into_iter().zip(y);
            if kind.is_comparison() {
                Data::Bool(pairs.map(|(x, y)| kind.compare(x, y)).collect())
            } else {
                Data::from_f64(dtype, pairs.map(|(x, y)| kind.apply_f64(x, y)))
            }
        } else {
            // Integers and bool (as 0/1) in i64: exact for every integer dtype (uint64
            // as its bit pattern, read unsigned where the order matters).
            let (x, y) = (expand_i64(a, shape), expand_i64(b, shape));
            let pairs = x.into_iter().zip(y);
            if dtype == DType::U64 {
                let pairs = pairs.map(|(x, y)| (x as u64, y as u64));
                if kind.is_comparison() {
                    Data::Bool(pairs.map(|(x, y)| kind.compare(x, y)).collect())
                } else {
                    let v = pairs
                        .map(|(x, y)| kind.apply_u64(x, y))
                        .collect::<std::result::Result<Vec<u64>, String>>()
                        .map_err(|e| Error::Eval(format!("{op}: {e}")))?;
                    Data::U64(v)
                }
            } else if kind.is_comparison() {
                Data::Bool(pairs.map(|(x, y)| kind.compare(x, y)).collect())
            } else {
                let v = pairs
                    .map(|(x, y)| kind.apply_i64(x, y))
                    .collect::<std::result::Result<Vec<i64>, String>>()
                    .map_err(|e| Error::Eval(format!("{op}: {e}")))?;
                Data::from_i64(dtype, v)
            }
        })
    }
}

// ---------------------------------------------------------------------------------------
// Clip
// ---------------------------------------------------------------------------------------

impl Clip {
    /// `clip` to `[a_min, a_max]` (checked by the type rule and the parser).
    pub fn new(a_min: f64, a_max: f64) -> Clip {
        Clip {
            a_min: F64(a_min),
            a_max: F64(a_max),
        }
    }

    /// Why the bounds are unusable, if they are.
    fn bounds_problem(&self) -> Option<String> {
        let (lo, hi) = (self.a_min.0, self.a_max.0);
        if lo.is_nan() || hi.is_nan() {
            Some(format!("a_min ({lo}) and a_max ({hi}) must be numbers"))
        } else if lo > hi {
            Some(format!("a_min ({lo}) must not exceed a_max ({hi})"))
        } else {
            None
        }
    }
}

impl OpSpec for Clip {
    fn pattern(&self) -> OpPattern {
        OpPattern::ElemWise
    }

    fn name(&self) -> &str {
        "clip"
    }

    fn infer_type(&self, args: &[Type]) -> Result<Type> {
        let op = self.name();
        expect_arity(op, args, 1)?;
        let t = tensor_arg(op, args, 0, "data")?;
        if t.dtype.is_bool() {
            return Err(Error::ty(
                op,
                format!("argument 0 (data) must be a numeric (float or integer) tensor, got {t}"),
            ));
        }
        if let Some(problem) = self.bounds_problem() {
            return Err(Error::ty(op, problem));
        }
        Ok(Type::Tensor(t.clone()))
    }

    /// Floats clamp in `f64` as `minimum(maximum(x, a_min), a_max)` (NaN stays NaN,
    /// `-0 < +0`, as the loop IR's float `Max`/`Min`). Integer tensors first convert the bounds
    /// to their dtype as `cast` would (truncate toward zero, saturate), as TVM does,
    /// then clamp exactly.
    fn eval(&self, args: &[Value], _out: &Type) -> Result<Value> {
        let x = util::tensors(self.name(), args)?[0];
        let dtype = x.dtype();
        let (lo, hi) = (self.a_min.0, self.a_max.0);
        let data = if dtype.is_float() {
            let clamp = |v: f64| fminimum(fmaximum(v, lo), hi);
            Data::from_f64(dtype, x.to_f64_vec().into_iter().map(clamp))
        } else {
            let bound = |v: f64| Data::from_f64(dtype, [v]).to_i64()[0];
            let (lo, hi) = (bound(lo), bound(hi));
            Data::from_i64(dtype, x.to_i64_vec().into_iter().map(|v| v.clamp(lo, hi)))
        };
        Ok(NDArray::new(x.shape(), data)?.into())
    }

    fn write_attrs(&self, w: &mut AttrWriter) {
        w.float("a_min", self.a_min.0).float("a_max", self.a_max.0);
    }
}

// ---------------------------------------------------------------------------------------
// Cast
// ---------------------------------------------------------------------------------------

impl Cast {
    /// `cast` to `dtype`.
    pub fn new(dtype: DType) -> Cast {
        Cast { dtype }
    }
}

impl OpSpec for Cast {
    fn pattern(&self) -> OpPattern {
        OpPattern::ElemWise
    }

    fn name(&self) -> &str {
        "cast"
    }

    fn infer_type(&self, args: &[Type]) -> Result<Type> {
        expect_arity("cast", args, 1)?;
        let t = tensor_arg("cast", args, 0, "data")?;
        Ok(Type::tensor(t.shape.clone(), self.dtype))
    }

    /// [`NDArray::cast`]: floats to integers truncate toward zero and saturate (NaN is
    /// 0), integers wrap, non-zero is `true`.
    fn eval(&self, args: &[Value], _out: &Type) -> Result<Value> {
        let x = util::tensors(self.name(), args)?[0];
        Ok(x.cast(self.dtype).into())
    }

    fn write_attrs(&self, w: &mut AttrWriter) {
        w.dtype("dtype", self.dtype);
    }
}

// ---------------------------------------------------------------------------------------
// Where
// ---------------------------------------------------------------------------------------

/// Picks `x[i]` where `cond[i]`, else `y[i]`; `None` if the data are not `T`.
fn select<T: Element>(cond: &[bool], x: &Data, y: &Data) -> Option<Data> {
    let (x, y) = (T::slice(x)?, T::slice(y)?);
    let picked = cond
        .iter()
        .zip(x.iter().zip(y))
        .map(|(&c, (&a, &b))| if c { a } else { b });
    Some(T::wrap(picked.collect()))
}

impl OpSpec for Where {
    fn pattern(&self) -> OpPattern {
        OpPattern::Broadcast
    }

    fn name(&self) -> &str {
        "where"
    }

    fn infer_type(&self, args: &[Type]) -> Result<Type> {
        let op = "where";
        expect_arity(op, args, 3)?;
        let c = tensor_arg(op, args, 0, "condition")?;
        let x = tensor_arg(op, args, 1, "x")?;
        let y = tensor_arg(op, args, 2, "y")?;
        if !c.dtype.is_bool() {
            return Err(Error::ty(
                op,
                format!("argument 0 (condition) must be a bool tensor, got {c}"),
            ));
        }
        expect_same_dtype(op, x, "argument 1 (x)", y, "argument 2 (y)")?;
        let shape = broadcast_args(op, &[(0, "condition", c), (1, "x", x), (2, "y", y)])?;
        Ok(Type::tensor(shape, x.dtype))
    }

    fn eval(&self, args: &[Value], out: &Type) -> Result<Value> {
        let ts = util::tensors(self.name(), args)?;
        let shape = util::out_tensor("where", out)?.shape.clone();
        let cond = expand_data(ts[0], &shape);
        let cond =
            bool::slice(&cond).ok_or_else(|| Error::Eval("where: condition is not bool".into()))?;
        let (x, y) = (expand_data(ts[1], &shape), expand_data(ts[2], &shape));
        let data = crate::tensor::with_element_type!(x.dtype(), T => select::<T>(cond, &x, &y))
            .ok_or_else(|| {
                Error::Eval(format!("where: x is {} but y is {}", x.dtype(), y.dtype()))
            })?;
        Ok(NDArray::new(shape, data)?.into())
    }
}

// ---------------------------------------------------------------------------------------
// Parsing
// ---------------------------------------------------------------------------------------

/// Parses an op of this family from its name and attributes.
pub(super) fn parse(name: &str, r: &mut AttrReader) -> Option<Result<Op>> {
    if let Some(kind) = UnaryKind::from_name(name) {
        return Some(Ok(Unary::new(kind).into()));
    }
    if let Some(kind) = BinaryKind::from_name(name) {
        return Some(Ok(Binary::new(kind).into()));
    }
    match name {
        "clip" => Some(parse_clip(r)),
        "cast" => Some(parse_cast(r)),
        "where" => Some(Ok(Where.into())),
        _ => None,
    }
}

fn parse_clip(r: &mut AttrReader) -> Result<Op> {
    let a_min = r
        .float("a_min")?
        .ok_or_else(|| r.error("a_min", "is required"))?;
    let a_max = r
        .float("a_max")?
        .ok_or_else(|| r.error("a_max", "is required"))?;
    let clip = Clip::new(a_min, a_max);
    if let Some(problem) = clip.bounds_problem() {
        return Err(r.error("a_max", problem));
    }
    Ok(clip.into())
}

fn parse_cast(r: &mut AttrReader) -> Result<Op> {
    let dtype = r
        .dtype("dtype")?
        .ok_or_else(|| r.error("dtype", "is required"))?;
    Ok(Cast::new(dtype).into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Runs `op` through its type rule and reference evaluation.
    fn run(op: impl Into<Op>, args: &[NDArray]) -> Result<NDArray> {
        let op = op.into();
        let types: Vec<Type> = args.iter().map(|a| Type::Tensor(a.ty())).collect();
        let out = op.infer_type(&types)?;
        let values: Vec<Value> = args.iter().cloned().map(Value::from).collect();
        let result = op.eval(&values, &out)?.into_tensor("result")?;
        assert_eq!(
            Type::Tensor(result.ty()),
            out,
            "{op}: value type differs from the type rule"
        );
        Ok(result)
    }

    /// The type error message of `op` on argument types `args`.
    fn type_error(op: impl Into<Op>, args: &[Type]) -> String {
        let op = op.into();
        match op.infer_type(args) {
            Err(e @ Error::Type { .. }) => e.to_string(),
            other => panic!("{op}: expected a type error, got {other:?}"),
        }
    }

    /// The bit patterns of a float32 tensor (to tell `-0` from `+0` and compare NaN).
    fn bits(t: &NDArray) -> Vec<u32> {
        t.to_vec::<f32>()
            .unwrap()
            .iter()
            .map(|v| v.to_bits())
            .collect()
    }

    #[test]
    fn maximum_minimum_are_ieee_on_signed_zeros_and_nan() {
        let (p, n, nan) = (0.0f64, -0.0f64, f64::NAN);
        for (a, b) in [(p, n), (n, p), (p, p), (n, n)] {
            let both_neg = a.is_sign_negative() && b.is_sign_negative();
            let either_neg = a.is_sign_negative() || b.is_sign_negative();
            assert!(fmaximum(a, b) == 0.0 && fminimum(a, b) == 0.0);
            assert_eq!(fmaximum(a, b).is_sign_negative(), both_neg, "max({a}, {b})");
            assert_eq!(
                fminimum(a, b).is_sign_negative(),
                either_neg,
                "min({a}, {b})"
            );
        }
        for (a, b) in [(nan, p), (n, nan), (nan, 1.0), (-1.0, nan), (nan, nan)] {
            assert!(
                fmaximum(a, b).is_nan() && fminimum(a, b).is_nan(),
                "{a}, {b}"
            );
        }
        assert_eq!((fmaximum(-1.0, 2.0), fminimum(-1.0, 2.0)), (2.0, -1.0));
        assert_eq!(
            fmaximum(f64::NEG_INFINITY, -0.0).to_bits(),
            (-0.0f64).to_bits()
        );

        // The ops, float32 (fast path) and float16 (generic path), both operand orders.
        let a = [0.0f32, -0.0, -0.0, 0.0, f32::NAN, 1.0, -0.0];
        let b = [-0.0f32, 0.0, -0.0, 0.0, -0.0, f32::NAN, -1.0];
        let (pz, nz) = (0.0f32.to_bits(), (-0.0f32).to_bits());
        let nanb = f32::NAN.to_bits();
        let want_max = [pz, pz, nz, pz, nanb, nanb, nz];
        let want_min = [nz, nz, nz, pz, nanb, nanb, (-1.0f32).to_bits()];
        for (kind, want) in [
            (BinaryKind::Maximum, want_max),
            (BinaryKind::Minimum, want_min),
        ] {
            for (x, y) in [(&a, &b), (&b, &a)] {
                let got = run(Binary::new(kind), &[f32s(&[7], x), f32s(&[7], y)]).unwrap();
                assert_eq!(bits(&got), want, "{kind:?}");
                let (xh, yh) = (
                    f32s(&[7], x).cast(DType::F16),
                    f32s(&[7], y).cast(DType::F16),
                );
                let got = run(Binary::new(kind), &[xh, yh]).unwrap().cast(DType::F32);
                assert_eq!(bits(&got), want, "{kind:?} float16");
            }
        }
    }

    #[test]
    fn clip_and_relu_on_signed_zeros_and_nan() {
        let x = f32s(&[4], &[-0.0, 0.0, f32::NAN, -3.0]);
        let (pz, nz) = (0.0f32.to_bits(), (-0.0f32).to_bits());
        let nanb = f32::NAN.to_bits();
        // clip = minimum(maximum(x, a_min), a_max): -0 against a +0 bound is +0.
        let got = run(Clip::new(0.0, 6.0), std::slice::from_ref(&x)).unwrap();
        assert_eq!(bits(&got), [pz, pz, nanb, pz]);
        let got = run(Clip::new(-1.0, 0.0), std::slice::from_ref(&x)).unwrap();
        assert_eq!(bits(&got), [nz, pz, nanb, (-1.0f32).to_bits()]);
        let got = run(Clip::new(-0.0, 0.0), std::slice::from_ref(&x)).unwrap();
        assert_eq!(bits(&got), [nz, pz, nanb, nz]);
        // relu is `x < 0 ? 0 : x`, as the loop IR's: relu(-0) = -0, NaN stays.
        let got = run(Unary::new(UnaryKind::Relu), std::slice::from_ref(&x)).unwrap();
        assert_eq!(bits(&got), [nz, pz, nanb, pz]);
    }

    fn f32s(shape: &[usize], v: &[f32]) -> NDArray {
        NDArray::from_vec(shape, v.to_vec()).unwrap()
    }

    fn i32s(shape: &[usize], v: &[i32]) -> NDArray {
        NDArray::from_vec(shape, v.to_vec()).unwrap()
    }

    fn bools(shape: &[usize], v: &[bool]) -> NDArray {
        NDArray::from_vec(shape, v.to_vec()).unwrap()
    }

    /// Same shape, dtype and values, NaN equal to NaN.
    fn same(a: &NDArray, b: &NDArray) -> bool {
        a.shape() == b.shape()
            && a.dtype() == b.dtype()
            && a.to_f64_vec()
                .iter()
                .zip(b.to_f64_vec())
                .all(|(x, y)| *x == y || (x.is_nan() && y.is_nan()))
    }

    /// `t` copied out to `shape` by numpy's rule, computed independently of
    /// `util::broadcast_indices`: each output index taken modulo the input extent.
    fn materialize(t: &NDArray, shape: &[usize]) -> NDArray {
        let n: usize = shape.iter().product();
        let offset = shape.len() - t.rank();
        let strides = t.strides();
        let indices = (0..n).map(|flat| {
            let (mut rest, mut src) = (flat, 0);
            for d in (0..shape.len()).rev() {
                let i = rest % shape[d];
                rest /= shape[d];
                if d >= offset {
                    src += (i % t.shape()[d - offset]) * strides[d - offset];
                }
            }
            src
        });
        NDArray::new(shape, t.data().gather(indices)).unwrap()
    }

    /// A random output shape and two shapes that broadcast to it (trailing-aligned,
    /// with some leading dims dropped and some dims set to 1).
    fn broadcast_pair() -> impl Strategy<Value = (Vec<usize>, Vec<usize>, Vec<usize>)> {
        prop::collection::vec(1usize..=4, 0..=4)
            .prop_flat_map(|out| {
                let r = out.len();
                let mask = prop::collection::vec(any::<bool>(), r);
                (Just(out), 0..=r, 0..=r, mask.clone(), mask)
            })
            .prop_map(|(out, ra, rb, ma, mb)| {
                let r = out.len();
                let pick = |k: usize, m: &[bool]| -> Vec<usize> {
                    (r - k..r).map(|d| if m[d] { 1 } else { out[d] }).collect()
                };
                let (a, b) = (pick(ra, &ma), pick(rb, &mb));
                let full = util::broadcast_shapes("test", &a, &b).unwrap();
                (a, b, full)
            })
    }

    // ----- unary -----

    #[test]
    fn unary_type_rule() {
        let f = Type::tensor([2, 3], DType::F32);
        for kind in UnaryKind::ALL {
            assert_eq!(
                Unary::new(kind)
                    .infer_type(std::slice::from_ref(&f))
                    .unwrap(),
                f
            );
            let int = Type::tensor([2, 3], DType::I32);
            if kind.float_only() {
                let e = type_error(Unary::new(kind), &[int]);
                assert!(e.contains(&format!("`{}`", kind.name())), "{e}");
                assert!(
                    e.contains(
                        "argument 0 (data) must be a float tensor, got Tensor[(2, 3), int32]"
                    ),
                    "{e}"
                );
            } else {
                assert_eq!(
                    Unary::new(kind)
                        .infer_type(std::slice::from_ref(&int))
                        .unwrap(),
                    int
                );
                let e = type_error(Unary::new(kind), &[Type::tensor([4], DType::Bool)]);
                assert!(
                    e.contains(kind.name()) && e.contains("Tensor[(4), bool]"),
                    "{e}"
                );
            }
            let e = type_error(Unary::new(kind), &[f.clone(), f.clone()]);
            assert!(e.contains("expects 1 argument(s), got 2"), "{e}");
        }
    }

    #[test]
    fn unary_hand_values() {
        let x = f32s(&[5], &[-2.0, -0.5, 0.0, 1.0, 4.0]);
        let un = |k, x: &NDArray| {
            run(Unary::new(k), std::slice::from_ref(x))
                .unwrap()
                .to_vec::<f32>()
                .unwrap()
        };
        assert_eq!(un(UnaryKind::Relu, &x), vec![0.0, 0.0, 0.0, 1.0, 4.0]);
        assert_eq!(
            un(UnaryKind::Negative, &x),
            vec![2.0, 0.5, -0.0, -1.0, -4.0]
        );
        assert_eq!(un(UnaryKind::Abs, &x), vec![2.0, 0.5, 0.0, 1.0, 4.0]);
        let log = un(UnaryKind::Log, &x);
        assert!(log[0].is_nan() && log[2] == f32::NEG_INFINITY && log[3] == 0.0);
        assert_eq!(log[4], std::f32::consts::LN_2 * 2.0);
        let sqrt = un(UnaryKind::Sqrt, &x);
        assert!(sqrt[0].is_nan());
        assert_eq!(&sqrt[2..], &[0.0, 1.0, 2.0]);
        let rsqrt = un(UnaryKind::Rsqrt, &x);
        assert!(rsqrt[1].is_nan());
        assert_eq!(&rsqrt[2..], &[f32::INFINITY, 1.0, 0.5]);
        assert_eq!(un(UnaryKind::Exp, &x)[2..4], [1.0, std::f32::consts::E]);
        assert_eq!(un(UnaryKind::Tanh, &x)[2], 0.0);
        assert_eq!(
            un(UnaryKind::Tanh, &f32s(&[2], &[30.0, -30.0])),
            vec![1.0, -1.0]
        );
        assert_eq!(
            un(UnaryKind::Sigmoid, &f32s(&[3], &[0.0, -800.0, 800.0])),
            vec![0.5, 0.0, 1.0]
        );
        assert_eq!(
            un(UnaryKind::Erf, &f32s(&[3], &[0.0, 1.0, -9.0])),
            vec![0.0, 0.842_700_8, -1.0]
        );
        // NaN passes through relu.
        assert!(un(UnaryKind::Relu, &f32s(&[1], &[f32::NAN]))[0].is_nan());
        let r = f32s(&[8], &[-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 2.6, -0.2]);
        assert_eq!(
            un(UnaryKind::Round, &r),
            vec![-2.0, -2.0, -0.0, 0.0, 2.0, 2.0, 3.0, -0.0]
        );
        assert_eq!(
            un(UnaryKind::Floor, &r),
            vec![-3.0, -2.0, -1.0, 0.0, 1.0, 2.0, 2.0, -1.0]
        );
        assert_eq!(
            un(UnaryKind::Ceil, &r),
            vec![-2.0, -1.0, -0.0, 1.0, 2.0, 3.0, 3.0, -0.0]
        );
        for k in [UnaryKind::Floor, UnaryKind::Ceil, UnaryKind::Round] {
            let inf = un(
                k,
                &f32s(&[3], &[f32::INFINITY, f32::NEG_INFINITY, f32::NAN]),
            );
            assert!(inf[0] == f32::INFINITY && inf[1] == f32::NEG_INFINITY && inf[2].is_nan());
        }
        // float16 rounds once at the end: e = 2.71875 in half precision.
        let h = NDArray::from_f64([1], DType::F16, vec![1.0]).unwrap();
        let e = run(Unary::new(UnaryKind::Exp), &[h]).unwrap();
        assert_eq!(e.dtype(), DType::F16);
        assert_eq!(e.to_f64_vec(), vec![2.71875]);
        // Integers wrap at their width.
        let i = NDArray::from_vec([4], vec![-128i8, -3, 0, 127]).unwrap();
        let i8s = |k| {
            run(Unary::new(k), std::slice::from_ref(&i))
                .unwrap()
                .to_vec::<i8>()
                .unwrap()
        };
        assert_eq!(i8s(UnaryKind::Negative), vec![-128, 3, 0, -127]);
        assert_eq!(i8s(UnaryKind::Abs), vec![-128, 3, 0, 127]);
        assert_eq!(i8s(UnaryKind::Relu), vec![0, 0, 0, 127]);
        let u = NDArray::from_vec([2], vec![3u8, 0]).unwrap();
        let neg = run(Unary::new(UnaryKind::Negative), &[u]).unwrap();
        assert_eq!(neg.to_vec::<u8>().unwrap(), vec![253, 0]);
    }

    #[test]
    fn erf_matches_known_values() {
        // Reference values from the C library's erf (glibc), 17 significant digits.
        let known = [
            (0.5, 0.5204998778130465),
            (1.0, 0.8427007929497149),
            (-2.0, -0.9953222650189527),
            (3.0, 0.9999779095030014),
            (0.1, 0.1124629160182849),
            (1.5, 0.9661051464753108),
            (0.01, 0.011283415555849616),
            (1e-10, 1.1283791670955126e-10),
            (2.5, 0.999593047982555),
            (4.0, 0.9999999845827421),
            (5.5, 0.9999999999999927),
            (-0.3, -0.3286267594591274),
            (0.84375, 0.7672256612323416),
        ];
        for (x, want) in known {
            let got = erf(x);
            assert!(
                ((got - want) / want).abs() < 1e-15,
                "erf({x}) = {got}, want {want}"
            );
        }
        assert_eq!(erf(6.5), 1.0);
        assert_eq!(erf(f64::NEG_INFINITY), -1.0);
        assert!(erf(f64::NAN).is_nan());
        assert!(erf(-0.0) == 0.0 && erf(-0.0).is_sign_negative());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn unary_ops_match_std_f64(shape in prop::collection::vec(0usize..=4, 0..=3), seed in any::<u64>(), k in 0usize..UnaryKind::ALL.len()) {
            let kind = UnaryKind::ALL[k];
            let x = NDArray::random_uniform(shape.clone(), DType::F32, seed, -4.0, 4.0);
            let got = run(Unary::new(kind), std::slice::from_ref(&x)).unwrap();
            let f = |v: f64| -> f64 {
                match kind {
                    UnaryKind::Relu => v.max(0.0),
                    UnaryKind::Exp => v.exp(),
                    UnaryKind::Log => v.ln(),
                    UnaryKind::Sqrt => v.sqrt(),
                    UnaryKind::Rsqrt => v.sqrt().recip(),
                    UnaryKind::Tanh => v.tanh(),
                    UnaryKind::Sigmoid => (1.0 + (-v).exp()).recip(),
                    UnaryKind::Erf => erf(v),
                    UnaryKind::Negative => -v,
                    UnaryKind::Abs => v.abs(),
                    UnaryKind::Floor => v.floor(),
                    UnaryKind::Ceil => v.ceil(),
                    // The trigonometric family through identities, within a few f64
                    // ulps of the direct functions (so equal after rounding to f32 but
                    // for ties, which random inputs do not meet).
                    UnaryKind::Sin => (std::f64::consts::FRAC_PI_2 - v).cos(),
                    UnaryKind::Cos => (std::f64::consts::FRAC_PI_2 - v).sin(),
                    UnaryKind::Tan => v.sin() / v.cos(),
                    UnaryKind::Asin => v.atan2((1.0 - v * v).sqrt()),
                    UnaryKind::Acos => (1.0 - v * v).sqrt().atan2(v),
                    UnaryKind::Atan => v.atan2(1.0),
                    UnaryKind::Sinh => (v.exp_m1() - (-v).exp_m1()) / 2.0,
                    UnaryKind::Cosh => (v.exp() + (-v).exp()) / 2.0,
                    UnaryKind::Asinh => {
                        let a = v.abs();
                        v.signum() * (a + a * a / (1.0 + (a * a + 1.0).sqrt())).ln_1p()
                    }
                    UnaryKind::Acosh => (v + (v * v - 1.0).sqrt()).ln(),
                    UnaryKind::Atanh => 0.5 * (2.0 * v / (1.0 - v)).ln_1p(),
                    // Ties to even, written out: the nearer integer, else the even one.
                    UnaryKind::Round => {
                        let (f, c) = (v.floor(), v.ceil());
                        match (v - f).partial_cmp(&(c - v)) {
                            Some(std::cmp::Ordering::Less) => f,
                            Some(std::cmp::Ordering::Greater) => c,
                            _ if f % 2.0 == 0.0 => f,
                            _ => c,
                        }
                    }
                }
            };
            let want: Vec<f32> = x.to_vec::<f32>().unwrap().iter().map(|&v| f(v as f64) as f32).collect();
            if kind >= UnaryKind::Sin {
                // The identities differ from the direct functions by a few f64 ulps,
                // which can move the f32 rounding by one ulp: 2 f32 ulps allowed.
                for (g, w) in got.to_vec::<f32>().unwrap().iter().zip(&want) {
                    let ulp = f32::EPSILON * w.abs().max(f32::MIN_POSITIVE);
                    prop_assert!(
                        (g.is_nan() && w.is_nan()) || g == w || (g - w).abs() <= 2.0 * ulp,
                        "{}: {g} vs {w}", kind.name()
                    );
                }
            } else {
                prop_assert!(same(&got, &NDArray::from_vec(shape, want).unwrap()));
            }
        }

        #[test]
        fn erf_is_odd_and_matches_its_taylor_series(x in -1.0f64..1.0) {
            // Independent check: erf(x) = 2/sqrt(pi) sum (-1)^n x^(2n+1) / (n! (2n+1)),
            // well conditioned for |x| < 1.
            let mut taylor = 0.0;
            let mut power = x; // (-1)^n x^(2n+1) / n!
            for n in 0..40 {
                taylor += power / (2 * n + 1) as f64;
                power *= -x * x / (n + 1) as f64;
            }
            taylor *= std::f64::consts::FRAC_2_SQRT_PI;
            // Both sums round a few times: allow a few ulp.
            prop_assert!((erf(x) - taylor).abs() <= 2e-15 * taylor.abs().max(1e-300), "{} vs {}", erf(x), taylor);
            prop_assert_eq!(erf(-x), -erf(x));
        }

        #[test]
        fn erf_is_monotone_and_bounded(x in -7.0f64..7.0, dx in 1e-6f64..0.5) {
            prop_assert!(erf(x) <= erf(x + dx));
            prop_assert!(erf(x).abs() <= 1.0);
        }
    }

    // ----- binary -----

    #[test]
    fn binary_type_rule() {
        let (a, b) = (
            Type::tensor([2, 1, 3], DType::F32),
            Type::tensor([4, 1], DType::F32),
        );
        for kind in BinaryKind::ALL {
            let want = if kind.is_comparison() {
                DType::Bool
            } else {
                DType::F32
            };
            let got = Binary::new(kind)
                .infer_type(&[a.clone(), b.clone()])
                .unwrap();
            assert_eq!(got, Type::tensor([2, 4, 3], want), "{}", kind.name());
            // Shapes that do not broadcast.
            let e = type_error(
                Binary::new(kind),
                &[
                    Type::tensor([2, 3], DType::F32),
                    Type::tensor([4], DType::F32),
                ],
            );
            assert!(e.contains(&format!("`{}`", kind.name())), "{e}");
            assert!(
                e.contains("argument 0 (lhs) has shape (2, 3), argument 1 (rhs) has shape (4)"),
                "{e}"
            );
            // Mismatched dtypes name both types.
            let e = type_error(
                Binary::new(kind),
                &[Type::tensor([3], DType::F32), Type::tensor([3], DType::I64)],
            );
            assert!(e.contains("argument 0 (lhs) is Tensor[(3), float32] but argument 1 (rhs) is Tensor[(3), int64]"), "{e}");
            // bool only where it makes sense.
            let bools = [
                Type::tensor([3], DType::Bool),
                Type::tensor([], DType::Bool),
            ];
            match Binary::new(kind).infer_type(&bools) {
                Ok(t) => {
                    assert!(kind.allows_bool(), "{}", kind.name());
                    assert_eq!(t, Type::tensor([3], DType::Bool));
                }
                Err(e) => {
                    assert!(!kind.allows_bool(), "{}", kind.name());
                    assert!(e.to_string().contains("Tensor[(3), bool]"), "{e}");
                }
            }
        }
        assert!(BinaryKind::Equal.allows_bool() && !BinaryKind::Add.allows_bool());
        let e = type_error(Binary::new(BinaryKind::Add), std::slice::from_ref(&a));
        assert!(e.contains("expects 2 argument(s), got 1"), "{e}");
    }

    #[test]
    fn add_broadcasts_hand_values() {
        // (2, 1, 3) + (4, 1) -> (2, 4, 3): out[i, j, k] = a[i, 0, k] + b[j, 0].
        let a = f32s(&[2, 1, 3], &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
        let b = f32s(&[4, 1], &[10.0, 20.0, 30.0, 40.0]);
        let out = run(Binary::new(BinaryKind::Add), &[a.clone(), b.clone()]).unwrap();
        assert_eq!(out.shape(), &[2, 4, 3]);
        #[rustfmt::skip]
        let want = vec![
            10.0, 11.0, 12.0, 20.0, 21.0, 22.0, 30.0, 31.0, 32.0, 40.0, 41.0, 42.0,
            13.0, 14.0, 15.0, 23.0, 24.0, 25.0, 33.0, 34.0, 35.0, 43.0, 44.0, 45.0,
        ];
        assert_eq!(out.to_vec::<f32>().unwrap(), want);
        // A comparison under the same broadcast: out[i, j, k] = a[i, 0, k] > c[j, 0].
        let gt = run(
            Binary::new(BinaryKind::Greater),
            &[a, f32s(&[4, 1], &[1.0, 2.0, 3.0, 4.0])],
        )
        .unwrap();
        #[rustfmt::skip]
        let want = vec![
            false, false, true, false, false, false, false, false, false, false, false, false,
            true, true, true, true, true, true, false, true, true, false, false, true,
        ];
        assert_eq!(gt.to_vec::<bool>().unwrap(), want);
        // A scalar broadcasts against everything.
        let s = run(
            Binary::new(BinaryKind::Multiply),
            &[f32s(&[2], &[1.5, -2.0]), NDArray::scalar(2.0f32)],
        )
        .unwrap();
        assert_eq!(s.to_vec::<f32>().unwrap(), vec![3.0, -4.0]);
    }

    #[test]
    fn float_binary_hand_values() {
        let a = f32s(&[5], &[1.0, -1.0, 0.0, -8.0, f32::NAN]);
        let b = f32s(&[5], &[0.0, 0.0, 0.0, 1.0 / 3.0, 1.0]);
        let bin = |k| run(Binary::new(k), &[a.clone(), b.clone()]).unwrap();
        let div = bin(BinaryKind::Divide).to_vec::<f32>().unwrap();
        assert!(div[0] == f32::INFINITY && div[1] == f32::NEG_INFINITY && div[2].is_nan());
        assert!(bin(BinaryKind::Power).to_vec::<f32>().unwrap()[3].is_nan());
        let p = run(
            Binary::new(BinaryKind::Power),
            &[f32s(&[3], &[2.0, 9.0, 2.0]), f32s(&[3], &[10.0, 0.5, -1.0])],
        );
        assert_eq!(p.unwrap().to_vec::<f32>().unwrap(), vec![1024.0, 3.0, 0.5]);
        let sub = bin(BinaryKind::Subtract).to_vec::<f32>().unwrap();
        assert_eq!(&sub[..2], &[1.0, -1.0]);
        // maximum/minimum propagate NaN; comparisons with NaN are false except not_equal.
        assert!(bin(BinaryKind::Maximum).to_vec::<f32>().unwrap()[4].is_nan());
        assert_eq!(
            bin(BinaryKind::Minimum).to_vec::<f32>().unwrap()[..4],
            [0.0, -1.0, 0.0, -8.0]
        );
        assert_eq!(
            bin(BinaryKind::Equal).to_vec::<bool>().unwrap(),
            vec![false, false, true, false, false]
        );
        assert_eq!(
            bin(BinaryKind::NotEqual).to_vec::<bool>().unwrap(),
            vec![true, true, false, true, true]
        );
        assert_eq!(
            bin(BinaryKind::LessEqual).to_vec::<bool>().unwrap(),
            vec![false, true, true, true, false]
        );
        assert_eq!(
            bin(BinaryKind::GreaterEqual).to_vec::<bool>().unwrap(),
            vec![true, false, true, false, false]
        );
        assert_eq!(
            bin(BinaryKind::Less).to_vec::<bool>().unwrap(),
            vec![false, true, false, true, false]
        );
    }

    #[test]
    fn modulo_hand_values() {
        let bin = |k, a: NDArray, b: NDArray| run(Binary::new(k), &[a, b]);
        // floor_mod takes the divisor's sign, trunc_mod the dividend's.
        let (a, b) = (
            i32s(&[6], &[7, -7, 7, -7, 6, 0]),
            i32s(&[6], &[3, 3, -3, -3, 3, -5]),
        );
        let fm = bin(BinaryKind::FloorMod, a.clone(), b.clone()).unwrap();
        assert_eq!(fm.to_vec::<i32>().unwrap(), vec![1, 2, -2, -1, 0, 0]);
        let tm = bin(BinaryKind::TruncMod, a, b).unwrap();
        assert_eq!(tm.to_vec::<i32>().unwrap(), vec![1, -1, 1, -1, 0, 0]);
        let (x, y) = (
            f32s(&[4], &[-4.5, 7.5, 5.0, -7.5]),
            f32s(&[4], &[2.0, -2.0, 8.0, 2.0]),
        );
        let fm = bin(BinaryKind::FloorMod, x.clone(), y.clone()).unwrap();
        assert_eq!(fm.to_vec::<f32>().unwrap(), vec![1.5, -0.5, 5.0, 0.5]);
        let tm = bin(BinaryKind::TruncMod, x, y).unwrap();
        assert_eq!(tm.to_vec::<f32>().unwrap(), vec![-0.5, 1.5, 5.0, -1.5]);
        // Integer modulo by zero is an evaluation error; float gives NaN.
        for k in [BinaryKind::FloorMod, BinaryKind::TruncMod] {
            let e = bin(k, i32s(&[1], &[5]), i32s(&[1], &[0])).unwrap_err();
            assert!(e.to_string().contains("modulo by zero"), "{e}");
            let n = bin(k, f32s(&[1], &[5.0]), f32s(&[1], &[0.0])).unwrap();
            assert!(n.to_vec::<f32>().unwrap()[0].is_nan());
        }
        // Wraps like the other integer ops: i8::MIN mod -1 is 0.
        let m = bin(
            BinaryKind::FloorMod,
            NDArray::from_vec([1], vec![-128i8]).unwrap(),
            NDArray::from_vec([1], vec![-1i8]).unwrap(),
        )
        .unwrap();
        assert_eq!(m.to_vec::<i8>().unwrap(), vec![0]);
        let e = type_error(
            Binary::new(BinaryKind::FloorMod),
            &[
                Type::tensor([2], DType::Bool),
                Type::tensor([2], DType::Bool),
            ],
        );
        assert!(e.contains("floor_mod") && e.contains("bool"), "{e}");
    }

    /// floor_mod and trunc_mod against their definitions through exact division.
    #[test]
    fn modulo_matches_its_definition() {
        for a in -9i64..=9 {
            for b in (-4i64..=4).filter(|&b| b != 0) {
                let fm = BinaryKind::FloorMod.apply_i64(a, b).unwrap();
                assert_eq!(
                    fm,
                    a - b * (a as f64 / b as f64).floor() as i64,
                    "{a} mod {b}"
                );
                assert_eq!(
                    BinaryKind::TruncMod.apply_i64(a, b).unwrap(),
                    a - b * (a / b)
                );
                let ff = BinaryKind::FloorMod.apply_f64(a as f64, b as f64);
                assert_eq!(ff, fm as f64, "{a} mod {b} in f64");
            }
        }
    }

    #[test]
    fn integer_binary_semantics() {
        let bin = |k, a: NDArray, b: NDArray| run(Binary::new(k), &[a, b]);
        // Division truncates toward zero.
        let q = bin(
            BinaryKind::Divide,
            i32s(&[4], &[7, -7, 7, -7]),
            i32s(&[4], &[2, 2, -2, -2]),
        )
        .unwrap();
        assert_eq!(q.to_vec::<i32>().unwrap(), vec![3, -3, -3, 3]);
        // Division by zero is an evaluation error naming the op.
        let e = bin(BinaryKind::Divide, i32s(&[2], &[1, 2]), i32s(&[2], &[1, 0])).unwrap_err();
        assert!(matches!(e, Error::Eval(_)), "{e:?}");
        assert!(
            e.to_string()
                .contains("divide: integer division by zero (2 / 0)"),
            "{e}"
        );
        // Power: exact, wrapping.
        let p = bin(
            BinaryKind::Power,
            i32s(&[4], &[2, 3, -2, 5]),
            i32s(&[4], &[10, 0, 3, 1]),
        )
        .unwrap();
        assert_eq!(p.to_vec::<i32>().unwrap(), vec![1024, 1, -8, 5]);
        let p = bin(BinaryKind::Power, i32s(&[1], &[2]), i32s(&[1], &[31])).unwrap();
        assert_eq!(p.to_vec::<i32>().unwrap(), vec![i32::MIN]);
        // Negative exponents: `(1 / a)^-b`, truncating (ONNX Runtime's results); zero
        // to a negative power is a division by zero.
        let p = bin(
            BinaryKind::Power,
            i32s(&[6], &[2, -3, 1, -1, -1, i32::MIN]),
            i32s(&[6], &[-1, -2, i32::MIN, -3, i32::MIN, -1]),
        )
        .unwrap();
        assert_eq!(p.to_vec::<i32>().unwrap(), vec![0, 0, 1, -1, 1, 0]);
        let e = bin(BinaryKind::Power, i32s(&[1], &[0]), i32s(&[1], &[-1])).unwrap_err();
        assert!(
            matches!(e, Error::Eval(_))
                && e.to_string()
                    .contains("power: integer division by zero (0 to the negative power -1)"),
            "{e}"
        );
        // Wrapping at the width.
        let i8s = |v: Vec<i8>| NDArray::from_vec([v.len()], v).unwrap();
        let s = bin(BinaryKind::Add, i8s(vec![127, -128]), i8s(vec![1, -1])).unwrap();
        assert_eq!(s.to_vec::<i8>().unwrap(), vec![-128, 127]);
        let m = bin(BinaryKind::Multiply, i8s(vec![16, -128]), i8s(vec![16, -1])).unwrap();
        assert_eq!(m.to_vec::<i8>().unwrap(), vec![0, -128]);
        let q = bin(BinaryKind::Divide, i8s(vec![-128]), i8s(vec![-1])).unwrap();
        assert_eq!(q.to_vec::<i8>().unwrap(), vec![-128]);
        let u = |v: Vec<u8>| NDArray::from_vec([v.len()], v).unwrap();
        let d = bin(BinaryKind::Subtract, u(vec![0, 200]), u(vec![1, 100])).unwrap();
        assert_eq!(d.to_vec::<u8>().unwrap(), vec![255, 100]);
        let l = NDArray::from_vec([2], vec![i64::MIN, i64::MAX]).unwrap();
        let r = NDArray::from_vec([2], vec![-1i64, i64::MAX - 1]).unwrap();
        assert_eq!(
            bin(BinaryKind::Divide, l.clone(), r.clone())
                .unwrap()
                .to_vec::<i64>()
                .unwrap(),
            vec![i64::MIN, 1]
        );
        // int64 compares exactly (not through f64, where these two would be equal).
        assert_eq!(
            bin(BinaryKind::Greater, l, r)
                .unwrap()
                .to_vec::<bool>()
                .unwrap(),
            vec![false, true]
        );
        let mx = bin(
            BinaryKind::Maximum,
            i32s(&[3], &[-5, 2, 9]),
            i32s(&[1], &[3]),
        )
        .unwrap();
        assert_eq!(mx.to_vec::<i32>().unwrap(), vec![3, 3, 9]);
    }

    #[test]
    fn bool_binary_ops() {
        let a = bools(&[4], &[true, false, true, false]);
        let b = bools(&[4], &[true, true, false, false]);
        let bin = |k| {
            run(Binary::new(k), &[a.clone(), b.clone()])
                .unwrap()
                .to_vec::<bool>()
                .unwrap()
        };
        assert_eq!(bin(BinaryKind::Maximum), vec![true, true, true, false]);
        assert_eq!(bin(BinaryKind::Minimum), vec![true, false, false, false]);
        assert_eq!(bin(BinaryKind::Equal), vec![true, false, false, true]);
        assert_eq!(bin(BinaryKind::NotEqual), vec![false, true, true, false]);
        let e = run(Binary::new(BinaryKind::Add), &[a, b])
            .unwrap_err()
            .to_string();
        assert!(e.contains("`add`") && e.contains("bool"), "{e}");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn binary_broadcast_equals_materialized(
            (sa, sb, full) in broadcast_pair(), k in 0usize..BinaryKind::ALL.len(), int in any::<bool>(), seed in any::<u64>()
        ) {
            let kind = BinaryKind::ALL[k];
            let dtype = if int { DType::I32 } else { DType::F32 };
            let a = NDArray::random(sa, dtype, seed);
            let b = NDArray::random(sb, dtype, seed ^ 0x9e37_79b9);
            let (ma, mb) = (materialize(&a, &full), materialize(&b, &full));
            let op = Binary::new(kind);
            match (run(op.clone(), &[a, b]), run(op, &[ma, mb])) {
                (Ok(x), Ok(y)) => {
                    prop_assert_eq!(x.shape(), &full[..]);
                    prop_assert!(same(&x, &y), "{} {:?} vs {:?}", kind.name(), x, y);
                }
                // Integer division by zero / negative powers fail the same way.
                (Err(x), Err(y)) => prop_assert_eq!(x.to_string(), y.to_string()),
                (x, y) => prop_assert!(false, "{}: {:?} vs {:?}", kind.name(), x, y),
            }
        }

        #[test]
        fn commutative_ops_commute((sa, sb, _) in broadcast_pair(), k in 0usize..6, int in any::<bool>(), seed in any::<u64>()) {
            let kind = [BinaryKind::Add, BinaryKind::Multiply, BinaryKind::Maximum, BinaryKind::Minimum, BinaryKind::Equal, BinaryKind::NotEqual][k];
            let dtype = if int { DType::I8 } else { DType::F32 };
            let a = NDArray::random(sa, dtype, seed);
            let b = NDArray::random(sb, dtype, seed.wrapping_add(1));
            let ab = run(Binary::new(kind), &[a.clone(), b.clone()]).unwrap();
            let ba = run(Binary::new(kind), &[b, a]).unwrap();
            prop_assert!(same(&ab, &ba));
        }

        #[test]
        fn comparisons_agree_with_their_negations((sa, sb, _) in broadcast_pair(), int in any::<bool>(), seed in any::<u64>()) {
            use BinaryKind::*;
            let dtype = if int { DType::I64 } else { DType::F16 };
            let a = NDArray::random(sa, dtype, seed);
            let b = NDArray::random(sb, dtype, seed.wrapping_add(7));
            let cmp = |k, x: &NDArray, y: &NDArray| run(Binary::new(k), &[x.clone(), y.clone()]).unwrap().to_vec::<bool>().unwrap();
            let not = |v: Vec<bool>| v.into_iter().map(|x| !x).collect::<Vec<_>>();
            prop_assert_eq!(cmp(Less, &a, &b), not(cmp(GreaterEqual, &a, &b)));
            prop_assert_eq!(cmp(Greater, &a, &b), not(cmp(LessEqual, &a, &b)));
            prop_assert_eq!(cmp(Equal, &a, &b), not(cmp(NotEqual, &a, &b)));
            prop_assert_eq!(cmp(Less, &a, &b), cmp(Greater, &b, &a));
            prop_assert_eq!(cmp(LessEqual, &a, &b), cmp(GreaterEqual, &b, &a));
            // Exactly one of <, ==, > holds (no NaN in random data).
            let (lt, eq, gt) = (cmp(Less, &a, &b), cmp(Equal, &a, &b), cmp(Greater, &a, &b));
            for i in 0..lt.len() {
                prop_assert_eq!(lt[i] as u8 + eq[i] as u8 + gt[i] as u8, 1);
            }
        }

        #[test]
        fn subtract_undoes_add_for_ints((sa, sb, _) in broadcast_pair(), seed in any::<u64>()) {
            // (a + b) - b == a broadcast, wrapping arithmetic is a group.
            let a = NDArray::random_uniform(sa, DType::I8, seed, -128.0, 127.0);
            let b = NDArray::random_uniform(sb, DType::I8, seed.wrapping_add(3), -128.0, 127.0);
            let s = run(Binary::new(BinaryKind::Add), &[a.clone(), b.clone()]).unwrap();
            let d = run(Binary::new(BinaryKind::Subtract), &[s.clone(), b]).unwrap();
            prop_assert!(same(&d, &materialize(&a, s.shape())));
        }
    }

    // ----- the float32 fast paths against the generic (f64, copied-out) paths -----

    /// `float32` values from shapes, with NaN, ±Inf, ±0, subnormals, huge and tiny
    /// magnitudes mixed in.
    fn f32_tensor(shape: Vec<usize>) -> impl Strategy<Value = NDArray> {
        let n: usize = shape.iter().product();
        let value = prop_oneof![
            3 => -4.0f32..4.0,
            3 => any::<f32>(),
            1 => prop::sample::select(vec![
                f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 0.0, -0.0, 1.0, -1.0,
                f32::MIN_POSITIVE, -1e-45, f32::MAX, f32::MIN, 0.5, -2.5,
            ]),
        ];
        prop::collection::vec(value, n)
            .prop_map(move |v| NDArray::from_vec(shape.clone(), v).unwrap())
    }

    /// Bit-identical data, except that a NaN only has to meet a NaN: Rust leaves the
    /// payload of an arithmetic NaN unspecified, and nothing in Kiln reads it.
    fn same_bits(x: &Data, y: &Data) -> std::result::Result<(), String> {
        let ok = match (x, y) {
            (Data::F32(x), Data::F32(y)) => {
                x.len() == y.len()
                    && x.iter()
                        .zip(y)
                        .all(|(a, b)| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()))
            }
            (Data::Bool(x), Data::Bool(y)) => x == y,
            _ => false,
        };
        if ok {
            Ok(())
        } else {
            Err(format!("{x:?} vs {y:?}"))
        }
    }

    /// Output shapes of rank up to 5 with extents 0..=5 and two shapes broadcasting to
    /// them (dims dropped from the front or set to 1), with the operands' values.
    fn f32_broadcast_operands() -> impl Strategy<Value = (NDArray, NDArray, Vec<usize>)> {
        prop::collection::vec(prop_oneof![1 => Just(0usize), 8 => 1usize..=5], 0..=5)
            .prop_flat_map(|out| {
                let r = out.len();
                let mask = prop::collection::vec(any::<bool>(), r);
                (Just(out), 0..=r, 0..=r, mask.clone(), mask)
            })
            .prop_flat_map(|(out, ra, rb, ma, mb)| {
                let r = out.len();
                let pick = |k: usize, m: &[bool]| -> Vec<usize> {
                    (r - k..r).map(|d| if m[d] { 1 } else { out[d] }).collect()
                };
                let (a, b) = (pick(ra, &ma), pick(rb, &mb));
                let full = util::broadcast_shapes("test", &a, &b).unwrap();
                (f32_tensor(a), f32_tensor(b), Just(full))
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn f32_binary_fast_path_is_the_generic_path((a, b, full) in f32_broadcast_operands(), k in 0usize..BinaryKind::ALL.len()) {
            let op = Binary::new(BinaryKind::ALL[k]);
            let (Data::F32(x), Data::F32(y)) = (a.data(), b.data()) else { unreachable!() };
            let fast = op.eval_f32((x, a.shape()), (y, b.shape()), &full);
            let generic = op.eval_generic(&a, &b, &full).unwrap();
            prop_assert_eq!(fast.len(), full.iter().product::<usize>());
            if let Err(e) = same_bits(&fast, &generic) {
                prop_assert!(false, "{} {:?} {:?} -> {:?}: {}", op.kind.name(), a.shape(), b.shape(), full, e);
            }
        }

        #[test]
        fn f32_unary_fast_path_is_the_generic_path(x in prop::collection::vec(0usize..=4, 0..=3).prop_flat_map(f32_tensor), k in 0usize..UnaryKind::ALL.len()) {
            let op = Unary::new(UnaryKind::ALL[k]);
            let Data::F32(v) = x.data() else { unreachable!() };
            if let Err(e) = same_bits(&op.eval_f32(v), &op.eval_generic(&x).unwrap()) {
                prop_assert!(false, "{}: {}", op.kind.name(), e);
            }
        }
    }

    #[test]
    fn coalesced_loops_merge_what_steps_together() {
        // The conv-weight scale fold: rows of 147 with a per-row scalar.
        assert_eq!(
            coalesced_loops(&[64, 3, 7, 7], &[64, 1, 1, 1], &[64, 3, 7, 7]),
            vec![(64, 147, 1), (147, 1, 0)]
        );
        // A bias over channels stays three loops; a scalar operand one loop.
        assert_eq!(
            coalesced_loops(&[2, 8, 5, 5], &[8, 1, 1], &[2, 8, 5, 5]),
            vec![(2, 200, 0), (8, 25, 1), (25, 1, 0)]
        );
        assert_eq!(coalesced_loops(&[3, 4], &[], &[3, 4]), vec![(12, 1, 0)]);
        // Rank 0, and extents of 1 dropped.
        assert_eq!(coalesced_loops(&[], &[], &[]), vec![(1, 0, 0)]);
        assert_eq!(
            coalesced_loops(&[1, 3], &[3, 1], &[3, 3]),
            vec![(3, 0, 1), (3, 1, 0)]
        );
    }

    // ----- clip -----

    #[test]
    fn clip_type_rule() {
        let c = Clip::new(0.0, 6.0);
        for d in [
            DType::F32,
            DType::F16,
            DType::I8,
            DType::U8,
            DType::I32,
            DType::I64,
        ] {
            assert_eq!(
                c.infer_type(&[Type::tensor([2], d)]).unwrap(),
                Type::tensor([2], d)
            );
        }
        let e = type_error(c.clone(), &[Type::tensor([2], DType::Bool)]);
        assert!(
            e.contains("`clip`")
                && e.contains("argument 0 (data)")
                && e.contains("Tensor[(2), bool]"),
            "{e}"
        );
        let e = type_error(Clip::new(1.0, -1.0), &[Type::tensor([2], DType::F32)]);
        assert!(e.contains("a_min (1) must not exceed a_max (-1)"), "{e}");
        let e = type_error(Clip::new(f64::NAN, 1.0), &[Type::tensor([2], DType::F32)]);
        assert!(e.contains("must be numbers"), "{e}");
        assert!(type_error(c, &[]).contains("expects 1 argument(s), got 0"));
    }

    #[test]
    fn clip_hand_values() {
        let x = f32s(&[5], &[-2.0, 0.5, f32::NAN, 7.0, f32::NEG_INFINITY]);
        let y = run(Clip::new(0.0, 6.0), &[x])
            .unwrap()
            .to_vec::<f32>()
            .unwrap();
        assert!(y[2].is_nan());
        assert_eq!([y[0], y[1], y[3], y[4]], [0.0, 0.5, 6.0, 0.0]);
        // Integer bounds truncate toward zero first (as cast does): [-1.5, 2.7] -> [-1, 2].
        let y = run(Clip::new(-1.5, 2.7), &[i32s(&[4], &[-5, -1, 0, 5])]).unwrap();
        assert_eq!(y.to_vec::<i32>().unwrap(), vec![-1, -1, 0, 2]);
        // Bounds outside the dtype's range saturate instead of wrapping.
        let u = NDArray::from_vec([3], vec![0u8, 100, 255]).unwrap();
        assert_eq!(
            run(Clip::new(-5.0, 300.0), std::slice::from_ref(&u)).unwrap(),
            u
        );
        let y = run(Clip::new(300.0, 400.0), &[u]).unwrap();
        assert_eq!(y.to_vec::<u8>().unwrap(), vec![255, 255, 255]);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn clip_is_a_clamp(shape in prop::collection::vec(0usize..=4, 0..=3), lo in -2.0f64..2.0, width in 0.0f64..2.0, seed in any::<u64>()) {
            let hi = lo + width;
            let x = NDArray::random_uniform(shape, DType::F32, seed, -3.0, 3.0);
            let y = run(Clip::new(lo, hi), std::slice::from_ref(&x)).unwrap();
            for (&v, &c) in x.to_vec::<f32>().unwrap().iter().zip(&y.to_vec::<f32>().unwrap()) {
                let v = v as f64;
                let want = if v < lo { lo } else if v > hi { hi } else { v };
                prop_assert_eq!(c, want as f32);
            }
            // Idempotent.
            prop_assert_eq!(run(Clip::new(lo, hi), std::slice::from_ref(&y)).unwrap(), y);
        }
    }

    // ----- cast -----

    #[test]
    fn cast_type_rule() {
        let c = Cast::new(DType::I32);
        assert_eq!(
            c.infer_type(&[Type::tensor([2, 3], DType::F16)]).unwrap(),
            Type::tensor([2, 3], DType::I32)
        );
        let tuple = Type::Tuple(vec![Type::tensor([2], DType::F32)]);
        let e = type_error(c.clone(), &[tuple]);
        assert!(
            e.contains("`cast`") && e.contains("argument 0 (data) must be a tensor"),
            "{e}"
        );
        assert!(type_error(c, &[]).contains("expects 1 argument(s)"));
    }

    #[test]
    fn cast_hand_values() {
        let x = f32s(&[4], &[-1.7, 2.5, 300.0, f32::NAN]);
        assert_eq!(
            run(Cast::new(DType::I32), std::slice::from_ref(&x))
                .unwrap()
                .to_vec::<i32>()
                .unwrap(),
            vec![-1, 2, 300, 0]
        );
        assert_eq!(
            run(Cast::new(DType::U8), std::slice::from_ref(&x))
                .unwrap()
                .to_vec::<u8>()
                .unwrap(),
            vec![0, 2, 255, 0]
        );
        let b = run(Cast::new(DType::Bool), &[i32s(&[3], &[0, -2, 5])]).unwrap();
        assert_eq!(b.to_vec::<bool>().unwrap(), vec![false, true, true]);
        let w = run(Cast::new(DType::I8), &[i32s(&[2], &[200, -129])]).unwrap();
        assert_eq!(w.to_vec::<i8>().unwrap(), vec![-56, 127]);
        let h = run(Cast::new(DType::F16), &[f32s(&[1], &[0.1])]).unwrap();
        assert_eq!(h.to_f64_vec(), vec![half::f16::from_f32(0.1).to_f64()]);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn widening_casts_round_trip(shape in prop::collection::vec(0usize..=4, 0..=3), seed in any::<u64>(), k in 0usize..4) {
            // Every int8 value fits exactly in these types, so casting back is the identity.
            let wide = [DType::F32, DType::F16, DType::I32, DType::I64][k];
            let x = NDArray::random_uniform(shape, DType::I8, seed, -128.0, 127.0);
            let y = run(Cast::new(wide), std::slice::from_ref(&x)).unwrap();
            prop_assert_eq!(y.dtype(), wide);
            prop_assert_eq!(y.to_f64_vec(), x.to_f64_vec());
            prop_assert_eq!(run(Cast::new(DType::I8), &[y]).unwrap(), x);
        }
    }

    // ----- where -----

    #[test]
    fn where_type_rule() {
        let (c, x, y) = (
            Type::tensor([2, 1], DType::Bool),
            Type::tensor([3], DType::I64),
            Type::tensor([1, 1, 1], DType::I64),
        );
        assert_eq!(
            Where
                .infer_type(&[c.clone(), x.clone(), y.clone()])
                .unwrap(),
            Type::tensor([1, 2, 3], DType::I64)
        );
        let e = type_error(
            Where,
            &[Type::tensor([2, 1], DType::F32), x.clone(), y.clone()],
        );
        assert!(
            e.contains("`where`")
                && e.contains(
                    "argument 0 (condition) must be a bool tensor, got Tensor[(2, 1), float32]"
                ),
            "{e}"
        );
        let e = type_error(
            Where,
            &[c.clone(), x.clone(), Type::tensor([3], DType::F32)],
        );
        assert!(
            e.contains(
                "argument 1 (x) is Tensor[(3), int64] but argument 2 (y) is Tensor[(3), float32]"
            ),
            "{e}"
        );
        let e = type_error(
            Where,
            &[
                c.clone(),
                Type::tensor([4], DType::I64),
                Type::tensor([3], DType::I64),
            ],
        );
        assert!(
            e.contains("argument 0 (condition) has shape (2, 1), argument 1 (x) has shape (4), argument 2 (y) has shape (3)"),
            "{e}"
        );
        assert!(type_error(Where, &[c, x]).contains("expects 3 argument(s), got 2"));
    }

    #[test]
    fn where_hand_values() {
        let c = bools(&[2, 1], &[true, false]);
        let x = i32s(&[3], &[1, 2, 3]);
        let y = NDArray::scalar(0i32);
        let out = run(Where, &[c, x, y]).unwrap();
        assert_eq!(out.shape(), &[2, 3]);
        assert_eq!(out.to_vec::<i32>().unwrap(), vec![1, 2, 3, 0, 0, 0]);
        let c = bools(&[3], &[false, true, false]);
        let out = run(
            Where,
            &[c, f32s(&[1], &[f32::NAN]), f32s(&[2, 1], &[-1.0, 5.0])],
        )
        .unwrap();
        let v = out.to_vec::<f32>().unwrap();
        assert!(v[1].is_nan() && v[4].is_nan());
        assert_eq!([v[0], v[2], v[3], v[5]], [-1.0, -1.0, 5.0, 5.0]);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn where_picks_elementwise((sc, sx, full) in broadcast_pair(), seed in any::<u64>(), k in 0usize..7) {
            let dtype = DType::ALL[k];
            let c = NDArray::random(sc, DType::Bool, seed);
            let x = NDArray::random(sx, dtype, seed.wrapping_add(1));
            let y = NDArray::random(vec![], dtype, seed.wrapping_add(2));
            let out = run(Where, &[c.clone(), x.clone(), y.clone()]).unwrap();
            let (mc, mx, my) = (materialize(&c, &full), materialize(&x, &full), materialize(&y, &full));
            let (cv, xv, yv) = (mc.to_vec::<bool>().unwrap(), mx.to_f64_vec(), my.to_f64_vec());
            let want: Vec<f64> = (0..cv.len()).map(|i| if cv[i] { xv[i] } else { yv[i] }).collect();
            prop_assert_eq!(out.to_f64_vec(), want);
            // Swapping the branches under the negated condition gives the same result.
            let not_c = run(Binary::new(BinaryKind::NotEqual), &[c, NDArray::scalar(true)]).unwrap();
            prop_assert_eq!(run(Where, &[not_c, y, x]).unwrap(), out);
        }
    }

    // ----- attributes -----

    fn all_ops() -> Vec<Op> {
        let mut ops: Vec<Op> = UnaryKind::ALL
            .into_iter()
            .map(|k| Unary::new(k).into())
            .collect();
        ops.extend(
            BinaryKind::ALL
                .into_iter()
                .map(|k| Op::from(Binary::new(k))),
        );
        ops.extend(
            [
                Clip::new(0.0, 6.0),
                Clip::new(-1.5, 1e20),
                Clip::new(f64::NEG_INFINITY, -0.25),
            ]
            .map(Op::from),
        );
        ops.extend(DType::ALL.map(|d| Op::from(Cast::new(d))));
        ops.push(Where.into());
        ops
    }

    #[test]
    fn attributes_round_trip() {
        let ops = all_ops();
        let mut names: Vec<&str> = ops.iter().map(|o| o.name()).collect();
        names.dedup();
        assert_eq!(names, NAMES);
        for op in ops {
            let back = Op::builtin(op.name(), op.attrs())
                .expect("a built-in name")
                .unwrap();
            assert_eq!(back, op);
        }
        assert_eq!(
            Op::from(Clip::new(0.0, 6.0)).to_string(),
            "clip, a_min=0f, a_max=6f"
        );
        assert_eq!(
            Op::from(Cast::new(DType::I32)).to_string(),
            "cast, dtype=\"int32\""
        );
        assert_eq!(Op::from(Unary::new(UnaryKind::Relu)).to_string(), "nn.relu");
        // Integers are accepted for float attributes.
        let clip = Op::builtin(
            "clip",
            vec![
                ("a_min".into(), AttrValue::Int(0)),
                ("a_max".into(), AttrValue::Int(6)),
            ],
        );
        assert_eq!(clip.unwrap().unwrap(), Op::from(Clip::new(0.0, 6.0)));
    }

    use crate::attrs::AttrValue;

    fn builtin_error(name: &str, attrs: Vec<(&str, AttrValue)>) -> String {
        let attrs = attrs.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        match Op::builtin(name, attrs) {
            Some(Err(e)) => e.to_string(),
            other => panic!("{name}: expected an attribute error, got {other:?}"),
        }
    }

    #[test]
    fn bad_attributes_are_clear_errors() {
        let e = builtin_error("clip", vec![("a_min", AttrValue::Float(0.0))]);
        assert!(
            e.contains("attribute `a_max` of `clip`: is required"),
            "{e}"
        );
        let e = builtin_error("clip", vec![("a_max", AttrValue::Float(0.0))]);
        assert!(
            e.contains("attribute `a_min` of `clip`: is required"),
            "{e}"
        );
        let e = builtin_error(
            "clip",
            vec![
                ("a_min", AttrValue::Str("x".into())),
                ("a_max", AttrValue::Float(1.0)),
            ],
        );
        assert!(
            e.contains("attribute `a_min` of `clip`: expected a number"),
            "{e}"
        );
        let e = builtin_error(
            "clip",
            vec![
                ("a_min", AttrValue::Float(2.0)),
                ("a_max", AttrValue::Float(1.0)),
            ],
        );
        assert!(
            e.contains("`a_max` of `clip`: a_min (2) must not exceed a_max (1)"),
            "{e}"
        );
        let e = builtin_error("cast", vec![("dtype", AttrValue::Str("complex64".into()))]);
        assert!(
            e.contains("attribute `dtype` of `cast`") && e.contains("complex64"),
            "{e}"
        );
        let e = builtin_error("cast", vec![]);
        assert!(
            e.contains("attribute `dtype` of `cast`: is required"),
            "{e}"
        );
        let e = builtin_error("add", vec![("axis", AttrValue::Int(1))]);
        assert!(e.contains("`add` has no attribute `axis`"), "{e}");
        let e = builtin_error("nn.relu", vec![("alpha", AttrValue::Float(0.1))]);
        assert!(e.contains("`nn.relu` has no attribute `alpha`"), "{e}");
        assert!(parse("conv2d", &mut AttrReader::new("conv2d", vec![])).is_none());
    }

    #[test]
    fn eval_rejects_arguments_that_do_not_match_the_type() {
        let add = Op::from(Binary::new(BinaryKind::Add));
        let args = [
            Value::from(f32s(&[2], &[1.0, 2.0])),
            Value::from(f32s(&[3], &[1.0, 2.0, 3.0])),
        ];
        let e = add.eval(&args, &Type::tensor([2], DType::F32)).unwrap_err();
        assert!(
            e.to_string().contains("(2)") && e.to_string().contains("(3)"),
            "{e}"
        );
        let args = [
            Value::from(f32s(&[2], &[1.0, 2.0])),
            Value::from(f32s(&[1], &[1.0])),
        ];
        let e = add.eval(&args, &Type::tensor([3], DType::F32)).unwrap_err();
        assert!(matches!(e, Error::Eval(_)), "{e:?}");
    }
}
