//! ONNX's narrow element types as *storage*: the four 8-bit floats (`FLOAT8E4M3FN`,
//! `FLOAT8E4M3FNUZ`, `FLOAT8E5M2`, `FLOAT8E5M2FNUZ`), the 4-bit float `FLOAT4E2M1` and
//! the sub-byte integers `INT4`, `UINT4`, `INT2`, `UINT2`. Kiln holds such a tensor as
//! its bit patterns, one element per byte, in a `uint8` tensor (at graph inputs,
//! outputs, initializers and test data; the sub-byte types, packed in ONNX, are
//! unpacked by [`crate::tensor_from_proto`]), and the importer remembers which values
//! are narrow and in which format. Only the ops that convert — `Cast`, `CastLike`,
//! `QuantizeLinear`, `DequantizeLinear` — and `Identity` read or write them; any other op
//! on a narrow value is unsupported.
//!
//! The conversions are built from exact graph ops, so every backend runs them:
//! decoding is a gather from the format's float32 table (256 or fewer entries).
//! Encoding a float format rounds to nearest, ties to even, exactly as `ml_dtypes`
//! (ONNX's reference) does, by counting the rounding thresholds (midpoints between
//! neighbouring codes, a tie going to the even code) at or below `|x|`, then adds the
//! sign bit and maps NaN, and — without `saturate` — overflow (NaN, or infinity for
//! `E5M2`); with `saturate` (the default) values beyond the largest finite one,
//! infinities included, become it. The `FNUZ` formats have no negative zero (a negative
//! value rounding to zero encodes `0x00`) and one NaN, `0x80`; `FLOAT4E2M1` has neither
//! NaN nor infinity and always saturates (NaN encodes as `-0`, as in `ml_dtypes`). The
//! count compares each element with up to 127 thresholds: exact and portable, not fast.
//! Encoding an integer format truncates toward zero and wraps modulo `2^bits` (NaN
//! becomes 0), as `ml_dtypes`' `astype` does.

use kiln_ir::op::{self, BinaryKind as B, ReduceKind as R, UnaryKind as U};
use kiln_ir::{DType, ExprId, NDArray};

use crate::convert::{Importer, Node};
use crate::error::{Error, Result};
use crate::ops::cast;

/// A narrow ONNX element type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Narrow {
    /// 4 exponent bits (bias 7), 3 mantissa bits, no infinity, NaN `0x7F`/`0xFF`.
    E4M3FN,
    /// 4 exponent bits (bias 8), 3 mantissa bits, no infinity or negative zero, NaN `0x80`.
    E4M3FNUZ,
    /// 5 exponent bits (bias 15), 2 mantissa bits, IEEE-like: infinities and NaNs.
    E5M2,
    /// 5 exponent bits (bias 16), 2 mantissa bits, no infinity or negative zero, NaN `0x80`.
    E5M2FNUZ,
    /// 2 exponent bits (bias 1), 1 mantissa bit, no infinity or NaN; sign bit `0x8`.
    E2M1,
    /// A signed integer of 4 or 2 bits (two's complement).
    Int(u32),
    /// An unsigned integer of 4 or 2 bits.
    UInt(u32),
}

/// The ONNX op types that read or write narrow values.
const NARROW_OPS: &[&str] = &[
    "Cast",
    "CastLike",
    "DequantizeLinear",
    "Identity",
    "QuantizeLinear",
];

impl Narrow {
    /// The narrow type of ONNX element type `code`, if it is one.
    pub fn from_onnx(code: i32) -> Option<Narrow> {
        match code {
            17 => Some(Narrow::E4M3FN),
            18 => Some(Narrow::E4M3FNUZ),
            19 => Some(Narrow::E5M2),
            20 => Some(Narrow::E5M2FNUZ),
            21 => Some(Narrow::UInt(4)),
            22 => Some(Narrow::Int(4)),
            23 => Some(Narrow::E2M1),
            25 => Some(Narrow::UInt(2)),
            26 => Some(Narrow::Int(2)),
            _ => None,
        }
    }

    /// Bits per element (ONNX packs the sub-byte types `8 / bits` to a byte, low bits
    /// first).
    pub fn bits(self) -> u32 {
        match self {
            Narrow::E2M1 => 4,
            Narrow::Int(b) | Narrow::UInt(b) => b,
            _ => 8,
        }
    }

    /// ONNX's name of the type.
    pub fn name(self) -> &'static str {
        match self {
            Narrow::E4M3FN => "FLOAT8E4M3FN",
            Narrow::E4M3FNUZ => "FLOAT8E4M3FNUZ",
            Narrow::E5M2 => "FLOAT8E5M2",
            Narrow::E5M2FNUZ => "FLOAT8E5M2FNUZ",
            Narrow::E2M1 => "FLOAT4E2M1",
            Narrow::Int(4) => "INT4",
            Narrow::Int(_) => "INT2",
            Narrow::UInt(4) => "UINT4",
            Narrow::UInt(_) => "UINT2",
        }
    }

    /// The value range of an integer type.
    pub fn int_range(self) -> Option<(f64, f64)> {
        match self {
            Narrow::Int(b) => Some((-(2f64.powi(b as i32 - 1)), 2f64.powi(b as i32 - 1) - 1.0)),
            Narrow::UInt(b) => Some((0.0, 2f64.powi(b as i32) - 1.0)),
            _ => None,
        }
    }

    /// Whether this is a float format.
    fn is_float(self) -> bool {
        !matches!(self, Narrow::Int(_) | Narrow::UInt(_))
    }

    /// Mantissa bits and exponent bias of a float format.
    fn layout(self) -> (u32, i32) {
        match self {
            Narrow::E4M3FN => (3, 7),
            Narrow::E4M3FNUZ => (3, 8),
            Narrow::E5M2 => (2, 15),
            Narrow::E5M2FNUZ => (2, 16),
            _ => (1, 1),
        }
    }

    /// Whether the format saturates whatever `saturate` says (it has no infinity or NaN
    /// to overflow to: `FLOAT4E2M1`).
    fn always_saturates(self) -> bool {
        self == Narrow::E2M1
    }

    /// The sign bit of a float format.
    fn sign_bit(self) -> u8 {
        1 << (self.bits() - 1)
    }

    /// Whether this is one of the `FNUZ` formats (no negative zero; NaN `0x80`).
    fn is_fnuz(self) -> bool {
        matches!(self, Narrow::E4M3FNUZ | Narrow::E5M2FNUZ)
    }

    /// The largest finite code of a float format (the positive codes `0..=max`
    /// increase in value).
    fn max_code(self) -> u8 {
        match self {
            Narrow::E4M3FN => 0x7E,
            Narrow::E5M2 => 0x7B,
            Narrow::E2M1 => 0x7,
            _ => 0x7F,
        }
    }

    /// The value of code `bits` (below `2^self.bits()`).
    pub fn decode(self, bits: u8) -> f32 {
        match self {
            Narrow::UInt(_) => return bits as f32,
            Narrow::Int(b) => {
                let half = 1i32 << (b - 1);
                let v = bits as i32;
                return (if v >= half { v - 2 * half } else { v }) as f32;
            }
            _ => {}
        }
        let (m, bias) = self.layout();
        let negative = bits & self.sign_bit() != 0;
        let mag = bits & (self.sign_bit() - 1);
        let nan = match self {
            Narrow::E4M3FN => mag == 0x7F,
            Narrow::E5M2 => mag > 0x7C,
            Narrow::E2M1 => false,
            _ => bits == 0x80,
        };
        if nan {
            return f32::NAN;
        }
        if self == Narrow::E5M2 && mag == 0x7C {
            return if negative {
                f32::NEG_INFINITY
            } else {
                f32::INFINITY
            };
        }
        let e = (mag >> m) as i32;
        let frac = (mag & ((1 << m) - 1)) as f32;
        let v = if e == 0 {
            frac * 2f32.powi(1 - bias - m as i32)
        } else {
            (1.0 + frac / (1 << m) as f32) * 2f32.powi(e - bias)
        };
        if negative { -v } else { v }
    }

    /// The code NaN encodes to (a NaN's sign is not observable through kiln's ops: the
    /// positive one; ONNX's tests use positive NaNs).
    fn nan_code(self) -> f64 {
        match self {
            Narrow::E4M3FN => 127.0,
            Narrow::E5M2 => 126.0,
            Narrow::E2M1 => 8.0,
            _ => 128.0,
        }
    }

    /// The magnitude code an overflow encodes to without `saturate` (the sign bit is
    /// added, except for the `FNUZ` NaN): NaN, or infinity for `E5M2`.
    fn overflow_code(self) -> f64 {
        match self {
            Narrow::E4M3FN => 127.0,
            Narrow::E5M2 => 124.0,
            _ => 128.0,
        }
    }

    /// The rounding thresholds of magnitudes in `dt` (float32 or float64): code `k`
    /// (`1..=max`, and `max + 1`, the overflow, unless `saturate`) is reached by the
    /// magnitudes at or above threshold `k`: the midpoint of codes `k - 1` and `k`,
    /// for an odd `k` (a tie rounds to the even code `k - 1`) the next float above it.
    fn thresholds(self, saturate: bool, dt: DType) -> Vec<f64> {
        let max = self.max_code();
        let top = self.decode(max) as f64;
        let ulp = top - self.decode(max - 1) as f64;
        let value = |k: u32| {
            if k > max as u32 {
                top + ulp
            } else {
                self.decode(k as u8) as f64
            }
        };
        let saturate = saturate || self.always_saturates();
        let last = if saturate { max as u32 } else { max as u32 + 1 };
        (1..=last)
            .map(|k| {
                let mid = (value(k - 1) + value(k)) / 2.0;
                if k % 2 == 0 {
                    mid
                } else if dt == DType::F64 {
                    mid.next_up()
                } else {
                    (mid as f32).next_up() as f64
                }
            })
            .collect()
    }
}

/// The narrow type of input `i` of `n`, if that value is narrow.
pub(crate) fn input_format(imp: &Importer, n: &Node, i: usize) -> Option<Narrow> {
    n.input_name(i).and_then(|name| imp.narrow_of(name))
}

/// An error unless `n` is an op that reads narrow values or has no narrow input.
pub(crate) fn check_inputs(imp: &Importer, n: &Node) -> Result<()> {
    if NARROW_OPS.contains(&n.op_type) {
        return Ok(());
    }
    match (0..n.num_inputs()).find_map(|i| input_format(imp, n, i)) {
        Some(f) => Err(Error::Unsupported(format!(
            "{} on a {} value (kiln holds it as its bits, one per byte; only {} read it)",
            n.op_type,
            f.name(),
            NARROW_OPS.join(", ")
        ))),
        None => Ok(()),
    }
}

/// The narrow type of `n`'s outputs: the `to` of a Cast, the `like` of a CastLike, the
/// output type of a QuantizeLinear, the input's of an Identity, the value's of a Constant.
pub(crate) fn output_format(imp: &Importer, n: &Node) -> Option<Narrow> {
    match n.op_type {
        "Cast" => Narrow::from_onnx(n.int("to", 0) as i32),
        "CastLike" => input_format(imp, n, 1),
        "Identity" => input_format(imp, n, 0),
        "QuantizeLinear" => quantize_format(imp, n),
        "Constant" => n
            .attr("value")
            .and_then(|a| a.t.as_ref())
            .and_then(|t| Narrow::from_onnx(t.data_type.unwrap_or(0))),
        _ => None,
    }
}

/// The narrow type a QuantizeLinear produces: its `output_dtype`, else its zero
/// point's.
pub(crate) fn quantize_format(imp: &Importer, n: &Node) -> Option<Narrow> {
    match n.attr("output_dtype").and_then(|a| a.i).filter(|&c| c != 0) {
        Some(code) => Narrow::from_onnx(code as i32),
        None => input_format(imp, n, 2),
    }
}

/// The float32 values of the bits `x` (a uint8 tensor) of narrow type `f`.
pub(crate) fn decode(imp: &mut Importer, x: ExprId, f: Narrow) -> Result<ExprId> {
    let codes = 1u32 << f.bits();
    let table: Vec<f32> = (0..codes).map(|b| f.decode(b as u8)).collect();
    let table = imp.constant(NDArray::from_vec([codes as usize], table)?);
    let idx = cast(imp, x, DType::I32)?;
    imp.call(
        op::Take {
            axis: Some(0),
            mode: op::TakeMode::Clip,
        },
        &[table, idx],
    )
}

/// `x` (any numeric dtype) converted to narrow type `f`, as uint8 bits.
pub(crate) fn encode(imp: &mut Importer, x: ExprId, f: Narrow, saturate: bool) -> Result<ExprId> {
    if !f.is_float() {
        return encode_int(imp, x, f.bits());
    }
    let dt = if imp.dtype(x)? == DType::F64 {
        DType::F64
    } else {
        DType::F32
    };
    let x = cast(imp, x, dt)?;
    let shape = imp.shape(x)?;
    let saturate = saturate || f.always_saturates();
    let th = f.thresholds(saturate, dt);
    let count = th.len();
    let th = imp.constant(NDArray::from_f64(vec![count], dt, th)?);
    let a = imp.unary(U::Abs, x)?;
    let mut wide = shape.clone();
    wide.push(1);
    let a = imp.reshape(a, &wide)?;
    let reached = imp.binary(B::GreaterEqual, a, th)?;
    let reached = cast(imp, reached, DType::I32)?;
    let mag = imp.reduce(R::Sum, reached, Some(vec![-1]), false)?;
    // The sign bit: negative values, and -0 (whose reciprocal is -inf).
    let zero = imp.scalar(0.0, dt);
    let one = imp.scalar(1.0, dt);
    let below = imp.binary(B::Less, x, zero)?;
    let is_zero = imp.binary(B::Equal, x, zero)?;
    let inv = imp.binary(B::Divide, one, x)?;
    let inv_neg = imp.binary(B::Less, inv, zero)?;
    let below = cast(imp, below, DType::I32)?;
    let is_zero = cast(imp, is_zero, DType::I32)?;
    let inv_neg = cast(imp, inv_neg, DType::I32)?;
    let neg_zero = imp.binary(B::Multiply, is_zero, inv_neg)?;
    let mut sign = imp.binary(B::Maximum, below, neg_zero)?;
    if f.is_fnuz() {
        let zero_i = imp.scalar(0.0, DType::I32);
        let nonzero = imp.binary(B::Greater, mag, zero_i)?;
        let nonzero = cast(imp, nonzero, DType::I32)?;
        sign = imp.binary(B::Multiply, sign, nonzero)?;
    }
    let bit = imp.scalar(f.sign_bit() as f64, DType::I32);
    let sign_bit = imp.binary(B::Multiply, sign, bit)?;
    let mut code = imp.binary(B::Add, mag, sign_bit)?;
    if !saturate {
        let over = imp.scalar(count as f64, DType::I32);
        let is_over = imp.binary(B::Equal, mag, over)?;
        let oc = imp.scalar(f.overflow_code(), DType::I32);
        let oc = if f.is_fnuz() {
            oc
        } else {
            imp.binary(B::Add, oc, sign_bit)?
        };
        code = imp.call(op::Where, &[is_over, oc, code])?;
    }
    let nan = imp.binary(B::NotEqual, x, x)?;
    let nc = imp.scalar(f.nan_code(), DType::I32);
    let code = imp.call(op::Where, &[nan, nc, code])?;
    cast(imp, code, DType::U8)
}

/// `x` truncated toward zero and wrapped modulo `2^bits` (NaN: 0), as uint8 bits.
fn encode_int(imp: &mut Importer, x: ExprId, bits: u32) -> Result<ExprId> {
    let d = imp.dtype(x)?;
    let x = if d.is_float() {
        let nan = imp.binary(B::NotEqual, x, x)?;
        let zero = imp.scalar(0.0, d);
        let x = imp.call(op::Where, &[nan, zero, x])?;
        // Truncation: floor of |x|, the sign put back.
        let a = imp.unary(U::Abs, x)?;
        let a = imp.unary(U::Floor, a)?;
        let neg = imp.unary(U::Negative, a)?;
        let below = imp.binary(B::Less, x, zero)?;
        imp.call(op::Where, &[below, neg, a])?
    } else {
        x
    };
    let v = cast(imp, x, DType::I64)?;
    let m = imp.scalar((1u32 << bits) as f64, DType::I64);
    let v = imp.binary(B::FloorMod, v, m)?;
    cast(imp, v, DType::U8)
}

/// The ONNX `saturate` attribute (default 1).
pub(crate) fn saturate(n: &Node) -> bool {
    n.int("saturate", 1) != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_matches_the_formats_extremes() {
        assert_eq!(Narrow::E4M3FN.decode(0x7E), 448.0);
        assert!(Narrow::E4M3FN.decode(0x7F).is_nan());
        assert_eq!(Narrow::E4M3FN.decode(0x01), 2f32.powi(-9));
        assert_eq!(Narrow::E4M3FNUZ.decode(0x7F), 240.0);
        assert!(Narrow::E4M3FNUZ.decode(0x80).is_nan());
        assert_eq!(Narrow::E5M2.decode(0x7B), 57344.0);
        assert_eq!(Narrow::E5M2.decode(0xFC), f32::NEG_INFINITY);
        assert!(Narrow::E5M2.decode(0x7E).is_nan());
        assert_eq!(Narrow::E5M2FNUZ.decode(0x7F), 57344.0);
        assert_eq!(Narrow::E5M2FNUZ.decode(0x01), 2f32.powi(-17));
        assert_eq!(Narrow::E4M3FN.decode(0x80), 0.0);
        assert!(Narrow::E4M3FN.decode(0x80).is_sign_negative());
    }

    #[test]
    fn decode_reads_float4_and_the_sub_byte_integers() {
        let e2m1: Vec<f32> = (0..8).map(|b| Narrow::E2M1.decode(b)).collect();
        assert_eq!(e2m1, [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]);
        assert_eq!(Narrow::E2M1.decode(0xF), -6.0);
        assert_eq!(Narrow::Int(4).decode(0x8), -8.0);
        assert_eq!(Narrow::Int(4).decode(0x7), 7.0);
        assert_eq!(Narrow::Int(2).decode(0x3), -1.0);
        assert_eq!(Narrow::UInt(2).decode(0x3), 3.0);
        assert_eq!(Narrow::Int(4).int_range(), Some((-8.0, 7.0)));
        assert_eq!(Narrow::UInt(2).int_range(), Some((0.0, 3.0)));
        // Float4 always saturates: 7 thresholds, 6 the largest.
        assert_eq!(Narrow::E2M1.thresholds(false, DType::F32).len(), 7);
    }

    #[test]
    fn thresholds_round_ties_to_even() {
        let t = Narrow::E4M3FN.thresholds(false, DType::F32);
        // Code 126 (448) is even: 464, the tie with the overflow, stays at 448.
        assert_eq!(t.len(), 127);
        assert_eq!(t[126], (464f32).next_up() as f64);
        // Codes 1 (odd): a tie between 0 and 2^-9 rounds to 0.
        assert_eq!(t[0], (2f32.powi(-10)).next_up() as f64);
        assert_eq!(t[1], 1.5 * 2f64.powi(-9));
        // E5M2's largest finite code 123 is odd: the tie at 61440 overflows.
        let t = Narrow::E5M2.thresholds(false, DType::F32);
        assert_eq!(t[123], 61440.0);
        assert_eq!(Narrow::E5M2.thresholds(true, DType::F32).len(), 123);
    }
}
