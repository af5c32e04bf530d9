//! ONNX `BitCast` (opset 26): the same bits read as another dtype of the same width,
//! built from exact graph ops so that every backend runs it. Between integers (and from
//! bool) it is a wrapping cast. Between an IEEE float and an integer the bits are taken
//! apart and put together arithmetically, in int64 (wrapping) and float64 (exact): the
//! sign, the biased exponent `E` and the mantissa `M`.
//!
//! - Integer to float: `E` and `M` by integer division; the value is
//!   `±(2^m + M) · 2^(E - bias - m)` (`±M · 2^(1 - bias - m)` for `E = 0`), the power of
//!   two read from a table; `E` all ones is ±infinity (`M = 0`) or NaN.
//! - Float to integer: `E` counts the powers of two `2^(k - bias)`, `k = 1..`, at or below
//!   `|x|` (infinity reaching the all-ones exponent); `M` is `|x|` scaled by a power of two
//!   (two table factors, as `2^1074` does not fit a float64) less the implicit bit.
//!
//! NaN payloads are not observable through kiln's ops: every NaN becomes the canonical
//! quiet NaN (`0x7FC00000`, `0x7FF8000000000000`), where ONNX keeps the payload. The
//! exponent count compares each element with 255 (float32) or 2,047 (float64) powers of
//! two: exact and portable, not fast.

use kiln_ir::op::{self, BinaryKind as B, ReduceKind as R, UnaryKind as U};
use kiln_ir::{DType, ExprId, NDArray};

use crate::convert::{Importer, Node};
use crate::error::{Error, Result};
use crate::ops::cast;
use crate::tensor::dtype_from_onnx;

/// The layout of an IEEE binary format: width, mantissa bits, exponent bias.
struct Layout {
    width: u32,
    mant: i32,
    bias: i32,
}

impl Layout {
    /// The layout of float dtype `d`, if kiln reinterprets it (float32, float64).
    fn of(d: DType) -> Option<Layout> {
        match d {
            DType::F32 => Some(Layout {
                width: 32,
                mant: 23,
                bias: 127,
            }),
            DType::F64 => Some(Layout {
                width: 64,
                mant: 52,
                bias: 1023,
            }),
            _ => None,
        }
    }

    /// The all-ones biased exponent (infinities and NaNs).
    fn top(&self) -> i32 {
        (1 << (self.width as i32 - 1 - self.mant)) - 1
    }
}

/// Converts `BitCast`.
pub(crate) fn convert(imp: &mut Importer, n: &Node) -> Result<Vec<ExprId>> {
    let x = imp.input(n, 0)?;
    let from = imp.dtype(x)?;
    let to = dtype_from_onnx(n.int("to", 0) as i32)?;
    if from.size_bytes() != to.size_bytes() {
        return Err(Error::InvalidModel(format!(
            "BitCast from {from} to {to}: ONNX requires equal bit widths"
        )));
    }
    let y = if from == to {
        x
    } else if to.is_bool() {
        return Err(Error::Unsupported(format!(
            "BitCast from {from} to bool (kiln's bool holds only 0 and 1)"
        )));
    } else if (from.is_int() || from.is_bool()) && to.is_int() {
        cast(imp, x, to)?
    } else if let (true, Some(l)) = (from.is_int(), Layout::of(to)) {
        int_to_float(imp, x, &l, to)?
    } else if let (Some(l), true) = (Layout::of(from), to.is_int()) {
        float_to_int(imp, x, &l, to)?
    } else {
        return Err(Error::Unsupported(format!(
            "BitCast from {from} to {to} (kiln reinterprets float32/float64 and integers)"
        )));
    };
    Ok(vec![y])
}

/// `2^k` exactly, for `k` from -1074 (the smallest subnormal) to 1023 (`powi` loses the
/// subnormal ones).
fn pow2(k: i32) -> f64 {
    if k >= -1022 {
        f64::from_bits(((k + 1023) as u64) << 52)
    } else {
        f64::from_bits(1u64 << (k + 1074))
    }
}

/// A constant float64 vector.
fn f64s(imp: &mut Importer, v: Vec<f64>) -> Result<ExprId> {
    let k = v.len();
    Ok(imp.constant(NDArray::from_vec([k], v)?))
}

/// `table[idx]` for an int64 index tensor.
fn lookup(imp: &mut Importer, table: ExprId, idx: ExprId) -> Result<ExprId> {
    imp.call(
        op::Take {
            axis: Some(0),
            mode: op::TakeMode::Clip,
        },
        &[table, idx],
    )
}

/// The integer bits `x` (any integer dtype of the format's width) read as float `to`.
fn int_to_float(imp: &mut Importer, x: ExprId, l: &Layout, to: DType) -> Result<ExprId> {
    let signed = if l.width == 32 {
        DType::I32
    } else {
        DType::I64
    };
    let b = cast(imp, x, signed)?;
    let b = cast(imp, b, DType::I64)?;
    let zero = imp.scalar(0.0, DType::I64);
    let negative = imp.binary(B::Less, b, zero)?;
    // The magnitude bits: b without its sign bit (adding 2^(w-1) wraps for w = 64).
    let sign_bit = imp.scalar(-(2f64.powi(l.width as i32 - 1)), DType::I64);
    let cleared = imp.binary(B::Subtract, b, sign_bit)?;
    let u = imp.call(op::Where, &[negative, cleared, b])?;
    let unit = imp.scalar(2f64.powi(l.mant), DType::I64);
    let e = imp.binary(B::Divide, u, unit)?;
    let m = imp.binary(B::FloorMod, u, unit)?;
    let top = l.top();
    // 2^(E - bias - m) per exponent; E = 0 (subnormal) scales by 2^(1 - bias - m).
    let scales: Vec<f64> = (0..=top)
        .map(|e| pow2(e.max(1) - l.bias - l.mant))
        .collect();
    let scales = f64s(imp, scales)?;
    let scale = lookup(imp, scales, e)?;
    let mf = cast(imp, m, DType::F64)?;
    let e_zero = imp.binary(B::Equal, e, zero)?;
    let implicit = imp.scalar(2f64.powi(l.mant), DType::F64);
    let zero_f = imp.scalar(0.0, DType::F64);
    let lead = imp.call(op::Where, &[e_zero, zero_f, implicit])?;
    let sig = imp.binary(B::Add, mf, lead)?;
    let mag = imp.binary(B::Multiply, sig, scale)?;
    // The all-ones exponent: infinity, or NaN when M is not 0.
    let top_e = imp.scalar(top as f64, DType::I64);
    let special = imp.binary(B::Equal, e, top_e)?;
    let m_zero = imp.binary(B::Equal, m, zero)?;
    let inf = imp.scalar(f64::INFINITY, DType::F64);
    let nan = imp.scalar(f64::NAN, DType::F64);
    let special_v = imp.call(op::Where, &[m_zero, inf, nan])?;
    let mag = imp.call(op::Where, &[special, special_v, mag])?;
    let neg = imp.unary(U::Negative, mag)?;
    let v = imp.call(op::Where, &[negative, neg, mag])?;
    cast(imp, v, to)
}

/// The bits of float `x` (float32 or float64, per `l`) as integer `to`.
fn float_to_int(imp: &mut Importer, x: ExprId, l: &Layout, to: DType) -> Result<ExprId> {
    let x = cast(imp, x, DType::F64)?;
    let shape = imp.shape(x)?;
    let a = imp.unary(U::Abs, x)?;
    let top = l.top();
    // E = #{k in 1..=top : 2^(k - bias) <= |x|}, with 2^(top - bias) read as infinity.
    let powers: Vec<f64> = (1..=top)
        .map(|k| {
            if k == top {
                f64::INFINITY
            } else {
                pow2(k - l.bias)
            }
        })
        .collect();
    let powers = f64s(imp, powers)?;
    let mut wide = shape.clone();
    wide.push(1);
    let aw = imp.reshape(a, &wide)?;
    let reached = imp.binary(B::GreaterEqual, aw, powers)?;
    let reached = cast(imp, reached, DType::I64)?;
    let e = imp.reduce(R::Sum, reached, Some(vec![-1]), false)?;
    // M = |x| · 2^(bias + m - max(E, 1)) - (E > 0 ? 2^m : 0), the power as two factors.
    let (lo, hi): (Vec<f64>, Vec<f64>) = (0..=top)
        .map(|e| {
            let p = l.bias + l.mant - e.max(1);
            (pow2(p / 2), pow2(p - p / 2))
        })
        .unzip();
    let lo = f64s(imp, lo)?;
    let hi = f64s(imp, hi)?;
    let f1 = lookup(imp, lo, e)?;
    let f2 = lookup(imp, hi, e)?;
    let s = imp.binary(B::Multiply, a, f1)?;
    let s = imp.binary(B::Multiply, s, f2)?;
    let zero_i = imp.scalar(0.0, DType::I64);
    let zero_f = imp.scalar(0.0, DType::F64);
    let normal = imp.binary(B::Greater, e, zero_i)?;
    let implicit = imp.scalar(2f64.powi(l.mant), DType::F64);
    let lead = imp.call(op::Where, &[normal, implicit, zero_f])?;
    let m = imp.binary(B::Subtract, s, lead)?;
    let top_e = imp.scalar(top as f64, DType::I64);
    let special = imp.binary(B::Equal, e, top_e)?;
    let m = imp.call(op::Where, &[special, zero_f, m])?;
    let m = cast(imp, m, DType::I64)?;
    let unit = imp.scalar(2f64.powi(l.mant), DType::I64);
    let bits = imp.binary(B::Multiply, e, unit)?;
    let bits = imp.binary(B::Add, bits, m)?;
    // The sign bit: negative values and -0 (whose reciprocal is -infinity); adding
    // -2^(w-1) sets it (wrapping for w = 64).
    let one = imp.scalar(1.0, DType::F64);
    let below = imp.binary(B::Less, x, zero_f)?;
    let is_zero = imp.binary(B::Equal, x, zero_f)?;
    let inv = imp.binary(B::Divide, one, x)?;
    let inv_neg = imp.binary(B::Less, inv, zero_f)?;
    let is_zero = cast(imp, is_zero, DType::I64)?;
    let inv_neg = cast(imp, inv_neg, DType::I64)?;
    let below = cast(imp, below, DType::I64)?;
    let neg_zero = imp.binary(B::Multiply, is_zero, inv_neg)?;
    let sign = imp.binary(B::Maximum, below, neg_zero)?;
    let sign_bit = imp.scalar(-(2f64.powi(l.width as i32 - 1)), DType::I64);
    let sign_v = imp.binary(B::Multiply, sign, sign_bit)?;
    let bits = imp.binary(B::Add, bits, sign_v)?;
    // NaN: the canonical quiet NaN.
    let nan = imp.binary(B::NotEqual, x, x)?;
    let quiet = if l.width == 32 {
        0x7FC0_0000 as f64
    } else {
        0x7FF8_0000_0000_0000u64 as f64
    };
    let quiet = imp.scalar(quiet, DType::I64);
    let bits = imp.call(op::Where, &[nan, quiet, bits])?;
    let signed = if l.width == 32 {
        DType::I32
    } else {
        DType::I64
    };
    let bits = cast(imp, bits, signed)?;
    cast(imp, bits, to)
}
