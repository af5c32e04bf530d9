//! The loop IR's scalar semantics, written once: what an integer operation of a given
//! dtype computes (wrapping to the dtype's width, floor division and modulo, constant
//! folding), float rounding (`float32`, and `float16` through the `half` crate, as the
//! graph IR's tensors do), saturating float→int conversion, the value range of each
//! dtype, and the [`Interval`] arithmetic the bounds verifier proves with. IEEE 754-2019
//! `maximum`/`minimum` are [`fmaximum`]/[`fminimum`] (defined with [`BinOp`]).
//!
//! The interpreters, the verifier and the backends take these definitions from here, so
//! "what `floormod` of an `int32` means" has one answer.
//!
//! [`Interval`] bounds are exact integers with explicit infinities: a bound that leaves
//! `±2^100` becomes infinite on the side where that is sound (a lower bound far below
//! becomes `-inf`, one far above is lowered to `2^100`; upper bounds the other way), and
//! infinities never cancel. Every operation returns a superset of the true set of
//! results, which is what a soundness proof needs.

use std::fmt;

use kiln_ir::DType;

use super::expr::{BinOp, Expr};
pub use super::expr::{fmaximum, fminimum};
use super::func::PrimFunc;

/// The smallest and largest value of integer (or bool) dtype `d` as the IR holds it
/// in `i64`; `i64`'s range for float dtypes, which are not integers, and for `uint64`,
/// held as its two's-complement bit pattern (see [`int_to_f64`]).
pub fn int_range(d: DType) -> (i64, i64) {
    match d {
        DType::I8 => (i8::MIN as i64, i8::MAX as i64),
        DType::U8 => (0, u8::MAX as i64),
        DType::I16 => (i16::MIN as i64, i16::MAX as i64),
        DType::U16 => (0, u16::MAX as i64),
        DType::I32 => (i32::MIN as i64, i32::MAX as i64),
        DType::U32 => (0, u32::MAX as i64),
        DType::Bool => (0, 1),
        _ => (i64::MIN, i64::MAX),
    }
}

/// `v` reduced to the width of integer dtype `d` (two's complement wrapping; bool is
/// `v != 0`; `int64` and `uint64` are 64 bits wide already).
pub fn wrap_int(v: i64, d: DType) -> i64 {
    match d {
        DType::I8 => v as i8 as i64,
        DType::U8 => v as u8 as i64,
        DType::I16 => v as i16 as i64,
        DType::U16 => v as u16 as i64,
        DType::I32 => v as i32 as i64,
        DType::U32 => v as u32 as i64,
        DType::Bool => (v != 0) as i64,
        _ => v,
    }
}

/// The number an integer of dtype `d` held as `v` stands for: `v` itself, but for
/// `uint64`, whose values above `i64::MAX` are held as their (negative) bit pattern.
pub fn int_to_f64(v: i64, d: DType) -> f64 {
    if d == DType::U64 {
        v as u64 as f64
    } else {
        v as f64
    }
}

/// Whether `a < b` for integers of dtype `d` as the IR holds them (`uint64` compared
/// unsigned).
pub fn int_less(a: i64, b: i64, d: DType) -> bool {
    if d == DType::U64 {
        (a as u64) < (b as u64)
    } else {
        a < b
    }
}

/// Float value `v` rounded to float dtype `d`: `float16` and `bfloat16` to nearest
/// (ties to even), `float64` kept, anything else to `float32`.
pub fn round_float(v: f64, d: DType) -> f64 {
    match d {
        DType::F16 => half::f16::from_f64(v).to_f64(),
        DType::BF16 => half::bf16::from_f64(v).to_f64(),
        DType::F64 => v,
        _ => v as f32 as f64,
    }
}

/// Whether float dtype `d` computes in `f64` (only `float64`; the others compute in
/// `f32` and round to their width after each operation).
pub fn computes_in_f64(d: DType) -> bool {
    d == DType::F64
}

/// The float16 bits nearest to `x` (ties to even; NaN stays NaN).
pub fn f16_bits(x: f32) -> u16 {
    half::f16::from_f32(x).to_bits()
}

/// The value of float16 bits `h`.
pub fn f16_value(h: u16) -> f32 {
    half::f16::from_bits(h).to_f32()
}

/// Float `v` converted to integer dtype `d`: truncated toward zero and saturated to
/// `d`'s range, NaN to 0.
pub fn float_to_int(v: f64, d: DType) -> i64 {
    match d {
        DType::I8 => v as i8 as i64,
        DType::U8 => v as u8 as i64,
        DType::I16 => v as i16 as i64,
        DType::U16 => v as u16 as i64,
        DType::I32 => v as i32 as i64,
        DType::U32 => v as u32 as i64,
        DType::U64 => v as u64 as i64,
        DType::Bool => (v != 0.0) as i64,
        _ => v as i64,
    }
}

/// Integer division rounding toward negative infinity; `None` when `b` is zero or the
/// quotient overflows (`i64::MIN / -1`).
pub fn floor_div(a: i64, b: i64) -> Option<i64> {
    let q = a.checked_div(b)?;
    Some(if a % b != 0 && ((a < 0) != (b < 0)) {
        q - 1
    } else {
        q
    })
}

/// The remainder of [`floor_div`], with the sign of the divisor; `None` when `b` is zero.
pub fn floor_mod(a: i64, b: i64) -> Option<i64> {
    if b == 0 {
        return None;
    }
    // checked_rem fails only for i64::MIN % -1, whose remainder is 0.
    let r = a.checked_rem(b).unwrap_or(0);
    Some(if r != 0 && ((r < 0) != (b < 0)) {
        r + b
    } else {
        r
    })
}

/// `a op b` for integers of dtype `d`, in the IR's semantics: the result wraps to `d`'s
/// width, `/` truncates, `floordiv`/`floormod` round down; `None` for division by zero
/// and for comparisons and logic (which are not integer-valued).
pub fn int_binary(op: BinOp, a: i64, b: i64, d: DType) -> Option<i64> {
    if d == DType::U64 {
        // Unsigned: floor and truncating division agree; the ring operations are the
        // same on the bit pattern.
        let (x, y) = (a as u64, b as u64);
        let v = match op {
            BinOp::Div | BinOp::FloorDiv => x.checked_div(y)?,
            BinOp::FloorMod => x.checked_rem(y)?,
            BinOp::Min => x.min(y),
            BinOp::Max => x.max(y),
            _ => return int_binary(op, a, b, DType::I64),
        };
        return Some(v as i64);
    }
    let v = match op {
        BinOp::Add => a.wrapping_add(b),
        BinOp::Sub => a.wrapping_sub(b),
        BinOp::Mul => a.wrapping_mul(b),
        BinOp::Div if b != 0 => a.wrapping_div(b),
        BinOp::FloorDiv => floor_div(a, b).or_else(|| (b == -1).then(|| a.wrapping_neg()))?,
        BinOp::FloorMod => floor_mod(a, b)?,
        BinOp::Min => a.min(b),
        BinOp::Max => a.max(b),
        _ => return None,
    };
    Some(wrap_int(v, d))
}

/// The value and dtype of integer expression `e` of `f` when every variable it reads
/// has a known constant value in `consts` (indexed by variable), computed exactly as
/// the IR defines it (each operation wraps to its dtype); `None` if it reads anything
/// else, divides by zero, or is not an integer.
pub fn const_int(e: &Expr, f: &PrimFunc, consts: &[Option<i64>]) -> Option<(i64, DType)> {
    Some(match e {
        Expr::Int { value, dtype } => (*value, *dtype),
        Expr::Var(v) => {
            let d = f.var(*v)?.ty;
            if !(d.is_scalar() && d.dtype.is_int()) {
                return None;
            }
            (consts.get(v.index()).copied().flatten()?, d.dtype)
        }
        Expr::Cast { to, value } if to.is_int() => {
            let (v, _) = const_int(value, f, consts)?;
            (wrap_int(v, *to), *to)
        }
        Expr::Binary { op, lhs, rhs } => {
            let (a, d) = const_int(lhs, f, consts)?;
            let (b, _) = const_int(rhs, f, consts)?;
            (int_binary(*op, a, b, d)?, d)
        }
        _ => return None,
    })
}

/// The value of condition `e` of `f` if it compares integers [`const_int`] knows (one
/// known side of `&&`/`||` may decide).
pub fn const_bool(e: &Expr, f: &PrimFunc, consts: &[Option<i64>]) -> Option<bool> {
    Some(match e {
        Expr::Bool(b) => *b,
        Expr::Not(x) => !const_bool(x, f, consts)?,
        Expr::Binary { op, lhs, rhs } => match op {
            BinOp::And | BinOp::Or => {
                let (a, b) = (const_bool(lhs, f, consts), const_bool(rhs, f, consts));
                let decides = *op == BinOp::Or;
                if a == Some(decides) || b == Some(decides) {
                    decides
                } else {
                    a?;
                    b?;
                    !decides
                }
            }
            _ => {
                let (a, d) = const_int(lhs, f, consts)?;
                let (b, _) = const_int(rhs, f, consts)?;
                match op {
                    BinOp::Eq => a == b,
                    BinOp::Ne => a != b,
                    BinOp::Lt => int_less(a, b, d),
                    BinOp::Le => !int_less(b, a, d),
                    BinOp::Gt => int_less(b, a, d),
                    BinOp::Ge => !int_less(a, b, d),
                    _ => return None,
                }
            }
        },
        _ => return None,
    })
}

/// Magnitude beyond which an interval bound is treated as (one-sided) infinite.
const BIG: i128 = 1 << 100;
/// `-inf` as a lower bound.
const NEG_INF: i128 = i128::MIN;
/// `+inf` as an upper bound.
const POS_INF: i128 = i128::MAX;

fn norm_lo(v: i128) -> i128 {
    if v < -BIG { NEG_INF } else { v.min(BIG) }
}

fn norm_hi(v: i128) -> i128 {
    if v > BIG { POS_INF } else { v.max(-BIG) }
}

fn floor_div_i128(a: i128, b: i128) -> i128 {
    let q = a / b;
    if a % b != 0 && ((a < 0) != (b < 0)) {
        q - 1
    } else {
        q
    }
}

/// A closed integer interval with possibly infinite ends. Empty when `lo > hi`.
///
/// Invariant: `lo` is `-inf` or within `±2^100`, `hi` is `+inf` or within `±2^100`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Interval {
    lo: i128,
    hi: i128,
}

impl Interval {
    /// `[lo, hi]`, widened where a bound is too large to keep exactly.
    pub fn new(lo: i128, hi: i128) -> Interval {
        Interval {
            lo: norm_lo(lo),
            hi: norm_hi(hi),
        }
    }

    /// `[v, v]`.
    pub fn point(v: i128) -> Interval {
        Interval::new(v, v)
    }

    /// Every integer.
    pub fn full() -> Interval {
        Interval {
            lo: NEG_INF,
            hi: POS_INF,
        }
    }

    /// `(-inf, hi]`.
    pub fn at_most(hi: i128) -> Interval {
        Interval::new(NEG_INF, hi)
    }

    /// `[lo, +inf)`.
    pub fn at_least(lo: i128) -> Interval {
        Interval::new(lo, POS_INF)
    }

    /// The values of integer dtype `d` (every integer for float dtypes).
    pub fn of_dtype(d: DType) -> Interval {
        if d.is_int() || d.is_bool() {
            let (lo, hi) = int_range(d);
            Interval::new(lo as i128, hi as i128)
        } else {
            Interval::full()
        }
    }

    /// The lower bound, `None` for `-inf`.
    pub fn lo(self) -> Option<i128> {
        (self.lo != NEG_INF).then_some(self.lo)
    }

    /// The upper bound, `None` for `+inf`.
    pub fn hi(self) -> Option<i128> {
        (self.hi != POS_INF).then_some(self.hi)
    }

    /// Whether no integer is in it.
    pub fn is_empty(self) -> bool {
        self.lo > self.hi
    }

    /// Whether every value is in `o` (true for an empty interval).
    pub fn within(self, o: Interval) -> bool {
        self.is_empty() || (self.lo >= o.lo && self.hi <= o.hi)
    }

    /// Whether the single value `v` is in it.
    pub fn contains(self, v: i128) -> bool {
        self.lo <= v && v <= self.hi
    }

    /// `{a + b}`.
    pub fn add(self, o: Interval) -> Interval {
        let lo = if self.lo == NEG_INF || o.lo == NEG_INF {
            NEG_INF
        } else {
            self.lo + o.lo
        };
        let hi = if self.hi == POS_INF || o.hi == POS_INF {
            POS_INF
        } else {
            self.hi + o.hi
        };
        Interval::new(lo, hi)
    }

    /// `{a * c}`.
    pub fn scale(self, c: i128) -> Interval {
        if c == 0 {
            return Interval::point(0);
        }
        // Saturating products keep the sign of an infinity (they are i128::MIN/MAX).
        let (a, b) = (self.lo.saturating_mul(c), self.hi.saturating_mul(c));
        Interval::new(a.min(b), a.max(b))
    }

    /// `{a * b}`: the extremes are at the corners.
    pub fn mul(self, o: Interval) -> Interval {
        let c = [
            self.lo.saturating_mul(o.lo),
            self.lo.saturating_mul(o.hi),
            self.hi.saturating_mul(o.lo),
            self.hi.saturating_mul(o.hi),
        ];
        let lo = c.iter().copied().min().unwrap_or(NEG_INF);
        let hi = c.iter().copied().max().unwrap_or(POS_INF);
        Interval::new(lo, hi)
    }

    /// The common part.
    pub fn intersect(self, o: Interval) -> Interval {
        Interval {
            lo: self.lo.max(o.lo),
            hi: self.hi.min(o.hi),
        }
    }

    /// The smallest interval holding both.
    pub fn union(self, o: Interval) -> Interval {
        if self.is_empty() {
            return o;
        }
        if o.is_empty() {
            return self;
        }
        Interval {
            lo: self.lo.min(o.lo),
            hi: self.hi.max(o.hi),
        }
    }

    /// `{min(a, b)}`.
    pub fn min(self, o: Interval) -> Interval {
        Interval {
            lo: self.lo.min(o.lo),
            hi: self.hi.min(o.hi),
        }
    }

    /// `{max(a, b)}`.
    pub fn max(self, o: Interval) -> Interval {
        Interval {
            lo: self.lo.max(o.lo),
            hi: self.hi.max(o.hi),
        }
    }

    /// `{floordiv(a, c)}` for a positive constant `c`.
    pub fn floordiv(self, c: i128) -> Interval {
        assert!(c > 0, "floordiv by a positive constant");
        let f = |x: i128| {
            if x == NEG_INF || x == POS_INF {
                x
            } else {
                floor_div_i128(x, c)
            }
        };
        Interval::new(f(self.lo), f(self.hi))
    }

    /// `{a / c}` truncating toward zero, for a positive constant `c`.
    pub fn truncdiv(self, c: i128) -> Interval {
        assert!(c > 0, "division by a positive constant");
        let f = |x: i128| {
            if x == NEG_INF || x == POS_INF {
                x
            } else {
                x / c
            }
        };
        Interval::new(f(self.lo), f(self.hi))
    }

    /// `{x : g * x in self}` for a non-zero `g` (exactly: the integers whose multiple
    /// lies in the interval).
    pub fn div_exact(self, g: i128) -> Interval {
        assert!(g != 0, "division by zero");
        if self.is_empty() {
            return self;
        }
        let neg = |x: i128| match x {
            NEG_INF => POS_INF,
            POS_INF => NEG_INF,
            x => -x,
        };
        let (lo, hi) = if g > 0 {
            (self.lo, self.hi)
        } else {
            (neg(self.hi), neg(self.lo))
        };
        let g = g.abs();
        let lo = if lo == NEG_INF {
            NEG_INF
        } else {
            -floor_div_i128(-lo, g)
        };
        let hi = if hi == POS_INF {
            POS_INF
        } else {
            floor_div_i128(hi, g)
        };
        Interval::new(lo, hi)
    }
}

impl fmt::Display for Interval {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lo = self.lo().map_or("-inf".to_string(), |v| v.to_string());
        let hi = self.hi().map_or("inf".to_string(), |v| v.to_string());
        write!(f, "[{lo}, {hi}]")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrapping_and_floor_ops() {
        assert_eq!(wrap_int(1 << 31, DType::I32), i32::MIN as i64);
        assert_eq!(wrap_int(300, DType::U8), 44);
        assert_eq!(wrap_int(-129, DType::I8), 127);
        assert_eq!(floor_div(-7, 2), Some(-4));
        assert_eq!(floor_mod(-7, 2), Some(1));
        assert_eq!(floor_mod(7, -2), Some(-1));
        assert_eq!(floor_div(i64::MIN, -1), None);
        assert_eq!(floor_mod(i64::MIN, -1), Some(0));
        assert_eq!(floor_div(1, 0), None);
        for a in -20..20 {
            for b in [-7, -3, -1, 1, 2, 5] {
                let (q, r) = (floor_div(a, b).unwrap(), floor_mod(a, b).unwrap());
                assert_eq!(q * b + r, a);
                assert!(if b > 0 {
                    (0..b).contains(&r)
                } else {
                    (b + 1..=0).contains(&r)
                });
            }
        }
    }

    #[test]
    fn float_conversions() {
        assert_eq!(float_to_int(1e10, DType::I32), i32::MAX as i64);
        assert_eq!(float_to_int(-300.7, DType::U8), 0);
        assert_eq!(float_to_int(f64::NAN, DType::I64), 0);
        assert_eq!(float_to_int(-2.9, DType::I8), -2);
        for h in 0..=u16::MAX {
            let x = f16_value(h);
            if !x.is_nan() {
                assert_eq!(f16_bits(x), h, "{h:#x}");
            }
        }
        assert_eq!(f16_value(f16_bits(1.0 + 1.0 / 4096.0)), 1.0, "ties to even");
        assert_eq!(f16_value(f16_bits(65520.0)), f32::INFINITY);
        assert_eq!(f16_value(f16_bits(3.0e-8)), f16_value(1));
        assert_eq!(round_float(0.1, DType::F32), 0.1f32 as f64);
        assert_eq!(round_float(1.0 + 1.0 / 4096.0, DType::F16), 1.0);
        assert_eq!(
            int_binary(BinOp::Div, i64::MIN, -1, DType::I64),
            Some(i64::MIN)
        );
        assert_eq!(int_binary(BinOp::FloorDiv, -7, 2, DType::I32), Some(-4));
        assert_eq!(
            int_binary(BinOp::Mul, 1 << 30, 2, DType::I32),
            Some(i32::MIN as i64)
        );
        assert_eq!(int_binary(BinOp::FloorMod, 3, 0, DType::I32), None);
    }

    #[test]
    fn the_wider_integer_and_float_dtypes() {
        assert_eq!(wrap_int(40000, DType::I16), 40000 - 65536);
        assert_eq!(wrap_int(-1, DType::U16), 65535);
        assert_eq!(wrap_int(-1, DType::U32), u32::MAX as i64);
        assert_eq!(wrap_int(-1, DType::U64), -1, "uint64 keeps its bit pattern");
        assert_eq!(int_range(DType::U32), (0, u32::MAX as i64));
        assert_eq!(float_to_int(1e6, DType::I16), i16::MAX as i64);
        assert_eq!(float_to_int(-5.0, DType::U32), 0);
        assert_eq!(float_to_int(1e30, DType::U64), -1, "saturates to u64::MAX");
        // uint64 above i64::MAX: unsigned order, division and value.
        let big = -2; // u64::MAX - 1
        assert!(int_less(1, big, DType::U64) && !int_less(1, big, DType::I64));
        assert_eq!(
            int_binary(BinOp::Div, big, 2, DType::U64),
            Some((u64::MAX / 2) as i64)
        );
        assert_eq!(int_binary(BinOp::Max, big, 1, DType::U64), Some(big));
        assert_eq!(int_binary(BinOp::FloorMod, big, 0, DType::U64), None);
        assert_eq!(int_to_f64(-1, DType::U64), u64::MAX as f64);
        assert_eq!(round_float(0.1, DType::F64), 0.1);
        // bfloat16: 8 significant bits, ties to even.
        assert_eq!(round_float(1.0 + 1.0 / 256.0, DType::BF16), 1.0);
        assert_eq!(
            round_float(1.0 + 3.0 / 256.0, DType::BF16),
            1.0 + 4.0 / 256.0
        );
    }

    #[test]
    fn infinities_never_cancel() {
        let big = Interval::point(1 << 110);
        let neg = Interval::point(-(1 << 110));
        let sum = big.add(neg);
        assert_eq!(sum.lo(), None);
        assert_eq!(sum.hi(), None);
        let huge = Interval::new(0, 1 << 90).scale(1 << 40);
        assert_eq!(huge.hi(), None);
        assert!(!huge.within(Interval::of_dtype(DType::I64)));
        assert_eq!(
            Interval::at_most(-1).scale(-3),
            Interval::at_least(3),
            "sign flips"
        );
        assert_eq!(Interval::new(-10, 10).div_exact(-3), Interval::new(-3, 3));
        assert_eq!(Interval::at_most(7).div_exact(2), Interval::at_most(3));
        assert_eq!(Interval::new(-7, 7).floordiv(2), Interval::new(-4, 3));
        assert_eq!(Interval::new(-7, 7).truncdiv(2), Interval::new(-3, 3));
    }
}
