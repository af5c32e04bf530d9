//! Quantized ONNX ops built from exact graph ops, computing what ONNX's reference
//! computes: `MatMulInteger` and `ConvInteger` (int32 products and convolutions of
//! zero-point-shifted operands), `QLinearMatMul` and `QLinearConv` (those requantized in
//! float64, rounded half to even and saturated, as numpy promotes `int32 * float32` to
//! float64) and
//! `DynamicQuantizeLinear` (uint8 with the scale and zero point of the data's range,
//! in float32).

use kiln_ir::op::{self, BinaryKind as B, ReduceKind as R, UnaryKind as U};
use kiln_ir::{DType, ExprId};

use crate::convert::{Importer, Node};
use crate::error::{Error, Result};
use crate::ops::{cast, conv_of, matmul};

/// The ONNX op types this module converts.
pub const SUPPORTED: &[&str] = &[
    "ConvInteger",
    "DynamicQuantizeLinear",
    "MatMulInteger",
    "QLinearConv",
    "QLinearMatMul",
];

/// Converts a quantized op.
pub(crate) fn convert(imp: &mut Importer, n: &Node) -> Result<Vec<ExprId>> {
    match n.op_type {
        "MatMulInteger" => Ok(vec![int_product(imp, n, [0, 2, 1, 3])?]),
        "QLinearMatMul" => qlinear_matmul(imp, n),
        "ConvInteger" => int_conv(imp, n, [0, 2, 1, 3], None),
        "QLinearConv" => qlinear_conv(imp, n),
        _ => dynamic_quantize(imp, n),
    }
}

/// `(a - a_zero_point) @ (b - b_zero_point)` in int32, the inputs at positions `at`
/// (`a`, `a_zero_point`, `b`, `b_zero_point`; absent zero points are 0).
fn int_product(imp: &mut Importer, n: &Node, at: [usize; 4]) -> Result<ExprId> {
    let mut shifted = |x: usize, zp: usize| -> Result<ExprId> {
        let v = imp.input(n, x)?;
        let v = cast(imp, v, DType::I32)?;
        match imp.opt_input(n, zp)? {
            Some(z) => {
                let z = cast(imp, z, DType::I32)?;
                imp.binary(B::Subtract, v, z)
            }
            None => Ok(v),
        }
    };
    let a = shifted(at[0], at[1])?;
    let b = shifted(at[2], at[3])?;
    matmul(imp, a, b)
}

/// `w - zp` in int32, for a weight `w` (`[M, ...]`) whose zero point is a scalar or
/// one per output channel (`[M]`), as ONNX's reference reads it.
fn shifted_weight(imp: &mut Importer, w: ExprId, zp: Option<ExprId>) -> Result<ExprId> {
    let wi = cast(imp, w, DType::I32)?;
    let Some(z) = zp else {
        return Ok(wi);
    };
    let ws = imp.shape(w)?;
    let zs = imp.shape(z)?;
    let mut z = cast(imp, z, DType::I32)?;
    if zs.len() == 1 && zs[0] == ws[0] && zs[0] > 1 {
        let mut per = vec![1; ws.len()];
        per[0] = ws[0];
        z = imp.reshape(z, &per)?;
    }
    imp.binary(B::Subtract, wi, z)
}

/// The int32 convolution `(x - x_zero_point) * (w - w_zero_point)` (plus the int32
/// `bias`), the inputs at positions `at` (`x`, `x_zero_point`, `w`, `w_zero_point`), with
/// the node's Conv attributes.
fn int_conv(
    imp: &mut Importer,
    n: &Node,
    at: [usize; 4],
    bias: Option<ExprId>,
) -> Result<Vec<ExprId>> {
    let x = imp.input(n, at[0])?;
    let mut xi = cast(imp, x, DType::I32)?;
    if let Some(z) = imp.opt_input(n, at[1])? {
        let z = cast(imp, z, DType::I32)?;
        xi = imp.binary(B::Subtract, xi, z)?;
    }
    let w = imp.input(n, at[2])?;
    let zw = imp.opt_input(n, at[3])?;
    let wi = shifted_weight(imp, w, zw)?;
    let bias = match bias {
        Some(b) => Some(cast(imp, b, DType::I32)?),
        None => None,
    };
    conv_of(imp, n, xi, wi, bias)
}

/// `QLinearConv`: the int32 convolution (with the optional int32 bias, input 8)
/// requantized as [`qlinear_matmul`] does, with a per-output-channel `w_scale` (`[M]`)
/// applied on the channel axis.
fn qlinear_conv(imp: &mut Importer, n: &Node) -> Result<Vec<ExprId>> {
    let bias = imp.opt_input(n, 8)?;
    let c = int_conv(imp, n, [0, 2, 3, 5], bias)?
        .pop()
        .ok_or_else(|| Error::InvalidModel("QLinearConv produced no value".into()))?;
    let (sx, sw, sy) = (imp.input(n, 1)?, imp.input(n, 4)?, imp.input(n, 6)?);
    let ws = imp.shape(sw)?;
    let rank = imp.shape(c)?.len();
    let sw = if ws.len() == 1 && ws[0] > 1 {
        let mut per = vec![1; rank];
        per[1] = ws[0];
        imp.reshape(sw, &per)?
    } else {
        sw
    };
    requantize(imp, n, c, [sx, sw, sy], 7, "QLinearConv")
}

/// `saturate(round_half_even(C * (a_scale * b_scale / y_scale) + y_zero_point))` with
/// `C` the int32 product, the scale product in the scales' dtype, the rest in float64.
fn qlinear_matmul(imp: &mut Importer, n: &Node) -> Result<Vec<ExprId>> {
    let c = int_product(imp, n, [0, 2, 3, 5])?;
    let (sa, sb, sy) = (imp.input(n, 1)?, imp.input(n, 4)?, imp.input(n, 6)?);
    requantize(imp, n, c, [sa, sb, sy], 7, "QLinearMatMul")
}

/// `saturate(round_half_even(c * (sa * sb / sy) + y_zero_point))` for the int32 `c`,
/// the scale product in the scales' dtype and the rest in float64, as the dtype of
/// the zero point (input `zp_at`) or else of input 0 (uint8 or int8).
fn requantize(
    imp: &mut Importer,
    n: &Node,
    c: ExprId,
    [sa, sb, sy]: [ExprId; 3],
    zp_at: usize,
    what: &str,
) -> Result<Vec<ExprId>> {
    let s = imp.binary(B::Multiply, sa, sb)?;
    let s = imp.binary(B::Divide, s, sy)?;
    let s = cast(imp, s, DType::F64)?;
    let c = cast(imp, c, DType::F64)?;
    let mut d = imp.binary(B::Multiply, c, s)?;
    let a = imp.input(n, 0)?;
    let out = match imp.opt_input(n, zp_at)? {
        Some(z) => {
            let out = imp.dtype(z)?;
            let z = cast(imp, z, DType::F64)?;
            d = imp.binary(B::Add, d, z)?;
            out
        }
        None => imp.dtype(a)?,
    };
    let (lo, hi) = match out {
        DType::U8 => (0.0, 255.0),
        DType::I8 => (-128.0, 127.0),
        d => return Err(Error::Unsupported(format!("{what} to {d}"))),
    };
    let r = imp.unary(U::Round, d)?;
    let r = imp.call(op::Clip::new(lo, hi), &[r])?;
    Ok(vec![cast(imp, r, out)?])
}

/// `DynamicQuantizeLinear`: with `lo = min(0, min x)` and `hi = max(0, max x)`, the
/// scale `(hi - lo) / 255` (1/255 when they are equal), the zero point
/// `round(clamp(-lo / scale, 0, 255))` and `y = clamp(round(x / scale) + zp, 0, 255)`,
/// all in float32 (ties to even), as uint8.
fn dynamic_quantize(imp: &mut Importer, n: &Node) -> Result<Vec<ExprId>> {
    let x = imp.input(n, 0)?;
    if imp.dtype(x)? != DType::F32 {
        return Err(Error::Unsupported(format!(
            "DynamicQuantizeLinear of {} (ONNX defines it for float32)",
            imp.dtype(x)?
        )));
    }
    let zero = imp.scalar(0.0, DType::F32);
    let hi = imp.reduce(R::Max, x, None, false)?;
    let hi = imp.binary(B::Maximum, hi, zero)?;
    let lo = imp.reduce(R::Min, x, None, false)?;
    let lo = imp.binary(B::Minimum, lo, zero)?;
    let range = imp.binary(B::Subtract, hi, lo)?;
    let same = imp.binary(B::Equal, hi, lo)?;
    let one = imp.scalar(1.0, DType::F32);
    let range = imp.call(op::Where, &[same, one, range])?;
    let q = imp.scalar(255.0, DType::F32);
    let scale = imp.binary(B::Divide, range, q)?;
    let neg = imp.binary(B::Divide, lo, scale)?;
    let zp = imp.binary(B::Subtract, zero, neg)?;
    let zp = imp.call(op::Clip::new(0.0, 255.0), &[zp])?;
    let zp = imp.unary(U::Round, zp)?;
    let y = imp.binary(B::Divide, x, scale)?;
    let y = imp.unary(U::Round, y)?;
    let y = imp.binary(B::Add, y, zp)?;
    let y = imp.call(op::Clip::new(0.0, 255.0), &[y])?;
    Ok(vec![
        cast(imp, y, DType::U8)?,
        scale,
        cast(imp, zp, DType::U8)?,
    ])
}
