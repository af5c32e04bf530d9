//! ONNX `BitwiseAnd`, `BitwiseOr`, `BitwiseXor` and `BitwiseNot` on integers, built from
//! exact integer graph ops (kiln's graph IR and loop IR have no bit operations). The
//! operands are widened to int64 — sign-extended or zero-extended, or (uint64) the same
//! bits — which commutes with every bitwise op, and the result is narrowed back with a
//! wrapping cast. `BitwiseNot` is `-1 - x`. The binary ops read the `w` bits of the
//! operands' width at once along a new last axis — bit `k` is `floor_mod(u / 2^k, 2)`
//! with `u` the int64 view less its sign bit; bit 63 of a 64-bit operand is its sign —
//! combine
//! them (`and`: product, `or`: maximum, `xor`: inequality) and sum them back with weights
//! `2^k`, the sign bit of a signed (or 64-bit) type weighing `-2^(w-1)`.

use kiln_ir::op::{BinaryKind as B, ReduceKind as R};
use kiln_ir::{DType, ExprId, NDArray};

use crate::convert::{Importer, Node};
use crate::error::{Error, Result};
use crate::ops::cast;

/// The ONNX op types this module converts.
pub const SUPPORTED: &[&str] = &["BitwiseAnd", "BitwiseNot", "BitwiseOr", "BitwiseXor"];

/// Converts a bitwise op.
pub(crate) fn convert(imp: &mut Importer, n: &Node) -> Result<Vec<ExprId>> {
    let a = imp.input(n, 0)?;
    let d = imp.dtype(a)?;
    if !d.is_int() {
        return Err(Error::InvalidModel(format!(
            "{} on {d}: ONNX defines it for integers",
            n.op_type
        )));
    }
    let wa = cast(imp, a, DType::I64)?;
    if n.op_type == "BitwiseNot" {
        let minus_one = imp.scalar(-1.0, DType::I64);
        let r = imp.binary(B::Subtract, minus_one, wa)?;
        return Ok(vec![cast(imp, r, d)?]);
    }
    let b = imp.input(n, 1)?;
    if imp.dtype(b)? != d {
        return Err(Error::InvalidModel(format!(
            "{} of {d} and {}",
            n.op_type,
            imp.dtype(b)?
        )));
    }
    let wb = cast(imp, b, DType::I64)?;
    let width = (d.size_bytes() * 8) as i32;
    // Bits 0..=62 (of the width) read from the int64 view with its sign bit cleared
    // (`x + 2^63`, wrapping, for negative `x`), so that divisions by 2^k floor.
    let low = width.min(63);
    let zero = imp.scalar(0.0, DType::I64);
    let min = imp.scalar(i64::MIN as f64, DType::I64);
    let bits = |imp: &mut Importer, x: ExprId| -> Result<ExprId> {
        let neg = imp.binary(B::Less, x, zero)?;
        let cleared = imp.binary(B::Subtract, x, min)?;
        let u = imp.call(kiln_ir::op::Where, &[neg, cleared, x])?;
        let mut shape = imp.shape(u)?;
        shape.push(1);
        let u = imp.reshape(u, &shape)?;
        let powers: Vec<i64> = (0..low).map(|k| 1i64 << k).collect();
        let powers = imp.constant(NDArray::from_vec([low as usize], powers)?);
        let q = imp.binary(B::Divide, u, powers)?;
        let two = imp.scalar(2.0, DType::I64);
        imp.binary(B::FloorMod, q, two)
    };
    let combine = |imp: &mut Importer, x: ExprId, y: ExprId| -> Result<ExprId> {
        match n.op_type {
            "BitwiseAnd" => imp.binary(B::Multiply, x, y),
            "BitwiseOr" => imp.binary(B::Maximum, x, y),
            _ => {
                let ne = imp.binary(B::NotEqual, x, y)?;
                cast(imp, ne, DType::I64)
            }
        }
    };
    let ba = bits(imp, wa)?;
    let bb = bits(imp, wb)?;
    let f = combine(imp, ba, bb)?;
    let signed = !d.is_unsigned();
    let weights: Vec<i64> = (0..low)
        .map(|k| {
            if signed && k == width - 1 {
                -(1i64 << k)
            } else {
                1i64 << k
            }
        })
        .collect();
    let weights = imp.constant(NDArray::from_vec([low as usize], weights)?);
    let terms = imp.binary(B::Multiply, f, weights)?;
    let mut r = imp.reduce(R::Sum, terms, Some(vec![-1]), false)?;
    if width == 64 {
        // Bit 63: the sign of the int64 view, weighing -2^63 (wrapping).
        let sa = imp.binary(B::Less, wa, zero)?;
        let sb = imp.binary(B::Less, wb, zero)?;
        let sa = cast(imp, sa, DType::I64)?;
        let sb = cast(imp, sb, DType::I64)?;
        let top = combine(imp, sa, sb)?;
        let top = imp.binary(B::Multiply, top, min)?;
        r = imp.binary(B::Add, r, top)?;
    }
    Ok(vec![cast(imp, r, d)?])
}
