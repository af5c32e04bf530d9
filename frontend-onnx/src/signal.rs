//! ONNX signal ops: the `HannWindow`, `HammingWindow` and `BlackmanWindow` generators
//! (constants: their size must be known at import), and `DFT` as one `nn.dense` with a
//! constant cosine/sine matrix built in float64 — forward and inverse, real or complex
//! input, `onesided` (rfft) and one-sided inverse (irfft, numpy's convention: a
//! Hermitian spectrum), `dft_length` padding or truncating, any signal axis. The matrix
//! holds at most [`MAX_DFT_MATRIX`] entries; a longer transform is `Unsupported` (it
//! needs an FFT kernel).

use std::f64::consts::PI;

use kiln_ir::{DType, ExprId, NDArray};

use crate::convert::{Importer, Node};
use crate::error::{Error, Result};
use crate::tensor::dtype_from_onnx;

/// The most entries of a DFT matrix.
pub const MAX_DFT_MATRIX: usize = 1 << 24;

/// The ONNX op types this module converts.
pub const SUPPORTED: &[&str] = &["BlackmanWindow", "DFT", "HammingWindow", "HannWindow"];

/// Converts a window generator or a `DFT`.
pub(crate) fn convert(imp: &mut Importer, n: &Node) -> Result<Vec<ExprId>> {
    match n.op_type {
        "DFT" => dft(imp, n),
        _ => window(imp, n),
    }
}

/// `a0 - a1 cos(2πi/N) + a2 cos(4πi/N)` for `i < size`, with `N = size` (periodic) or
/// `size - 1` (symmetric), as ONNX's reference computes it.
fn window(imp: &mut Importer, n: &Node) -> Result<Vec<ExprId>> {
    let size = match imp.const_ints(n, 0)?.as_deref() {
        Some([s]) if *s >= 0 && *s <= 1 << 24 => *s as usize,
        other => {
            return Err(Error::InvalidModel(format!(
                "{} size must be one integer in 0..=2^24, not {other:?}",
                n.op_type
            )));
        }
    };
    let (a0, a1, a2) = match n.op_type {
        "HannWindow" => (0.5, 0.5, 0.0),
        "HammingWindow" => (25.0 / 46.0, 1.0 - 25.0 / 46.0, 0.0),
        _ => (0.42, 0.5, 0.08),
    };
    let periodic = n.int("periodic", 1) != 0;
    let denom = if periodic {
        size as f64
    } else {
        size as f64 - 1.0
    };
    let values: Vec<f64> = (0..size)
        .map(|i| {
            let t = 2.0 * PI * i as f64 / denom;
            a0 - a1 * t.cos() + a2 * (2.0 * t).cos()
        })
        .collect();
    let dtype = dtype_from_onnx(n.int("output_datatype", 1) as i32)?;
    let w = NDArray::from_f64([size], dtype, values)?;
    Ok(vec![imp.constant(w)])
}

fn dft(imp: &mut Importer, n: &Node) -> Result<Vec<ExprId>> {
    let x = imp.input(n, 0)?;
    let shape = imp.shape(x)?;
    let rank = shape.len();
    let dtype = imp.dtype(x)?;
    if rank < 2 || !matches!(shape[rank - 1], 1 | 2) {
        return Err(Error::InvalidModel(format!(
            "DFT input {shape:?}: the last dimension must be 1 (real) or 2 (complex)"
        )));
    }
    if !matches!(dtype, DType::F32 | DType::F16) {
        return Err(Error::Unsupported(format!("DFT on {dtype}")));
    }
    let axis = if n.opset >= 20 {
        match imp.const_ints(n, 2)?.as_deref() {
            Some([a]) => *a,
            None => -2,
            Some(other) => return Err(Error::InvalidModel(format!("DFT axis {other:?}"))),
        }
    } else {
        n.int("axis", 1)
    };
    let a = if axis < 0 { axis + rank as i64 } else { axis };
    if !(0..rank as i64 - 1).contains(&a) {
        return Err(Error::InvalidModel(format!(
            "DFT axis {axis} for input rank {rank}"
        )));
    }
    let a = a as usize;
    let inverse = n.int("inverse", 0) != 0;
    let onesided = n.int("onesided", 0) != 0;
    let len = shape[a];
    let complex = shape[rank - 1] == 2;
    let length = match imp.const_ints(n, 1)?.as_deref() {
        Some([l]) if *l >= 1 => *l as usize,
        Some(other) => return Err(Error::InvalidModel(format!("dft_length {other:?}"))),
        None if inverse && onesided => 2 * len.saturating_sub(1),
        None => len,
    };
    if length == 0 {
        return Err(Error::InvalidModel("a DFT of length 0".into()));
    }
    // Input bins read (`inputs`) and output bins written (`outputs`), per part.
    let (inputs, outputs, out_parts) = if inverse && onesided {
        ((length / 2 + 1).min(len), length, 1)
    } else if onesided {
        (length.min(len), length / 2 + 1, 2)
    } else {
        (length.min(len), length, 2)
    };
    let in_parts = if complex { 2 } else { 1 };
    let cols = in_parts * inputs;
    let rows = out_parts * outputs;
    if rows.checked_mul(cols).is_none_or(|e| e > MAX_DFT_MATRIX) {
        return Err(Error::Unsupported(format!(
            "a DFT of length {length}: its {rows}×{cols} matrix exceeds {MAX_DFT_MATRIX} \
             entries (kiln has no FFT kernel)"
        )));
    }
    // Move the signal axis next to the last: [..., len, c] -> rows of [c, inputs].
    let mut perm: Vec<usize> = (0..rank - 1).filter(|&d| d != a).collect();
    let outer: Vec<usize> = perm.iter().map(|&d| shape[d]).collect();
    perm.extend([rank - 1, a]);
    let moved = imp.transpose(x, perm.iter().map(|&d| d as i64).collect())?; // [..., c, len]
    let moved = if inputs < len {
        imp.call(
            kiln_ir::op::StridedSlice {
                begin: vec![0],
                end: vec![inputs as i64],
                strides: None,
                axes: Some(vec![rank as i64 - 1]),
            },
            &[moved],
        )?
    } else {
        moved
    };
    let m: usize = outer.iter().product();
    let flat = imp.reshape(moved, &[m, cols])?;
    // The matrix: output (part, bin) × input (part, bin).
    let mut w = vec![0.0f64; rows * cols];
    let scale = if inverse { 1.0 / length as f64 } else { 1.0 };
    let sign = if inverse { 1.0 } else { -1.0 };
    for k in 0..outputs {
        for j in 0..inputs {
            // The phase of bin j at output k (irfft: input bins k, output samples j).
            let theta = 2.0 * PI * ((j * k) % length) as f64 / length as f64;
            let (c, s) = (theta.cos() * scale, sign * theta.sin() * scale);
            if inverse && onesided {
                // x_k = (1/n) Σ_j w_j (a_j cos θ - b_j sin θ), w_j = 2 except the DC
                // and the Nyquist bin.
                let weight = if j == 0 || 2 * j == length { 1.0 } else { 2.0 };
                w[k * cols + j] = weight * c;
                if complex {
                    w[k * cols + inputs + j] = -weight * s;
                }
            } else {
                // (a + ib)(cos θ + i sign sin θ) = (a cos - b sign sin) + i(a sign sin + b cos)
                w[k * cols + j] = c;
                w[(outputs + k) * cols + j] = s;
                if complex {
                    w[k * cols + inputs + j] = -s;
                    w[(outputs + k) * cols + inputs + j] = c;
                }
            }
        }
    }
    let w = imp.constant(NDArray::from_f64([rows, cols], dtype, w)?);
    let y = imp.call(kiln_ir::op::Dense::default(), &[flat, w])?; // [m, rows]
    // [m, parts, outputs] -> [..., outputs, parts], the axis back in place.
    let mut split = outer.clone();
    split.extend([out_parts, outputs]);
    let y = imp.reshape(y, &split)?;
    let r = split.len();
    let mut to_last: Vec<i64> = (0..r as i64 - 2).collect();
    to_last.extend([r as i64 - 1, r as i64 - 2]);
    let y = imp.transpose(y, to_last)?; // [..., outputs, parts]
    // Put the signal axis back at `a`.
    let mut back: Vec<i64> = Vec::with_capacity(rank);
    let mut outer_dims = 0..outer.len();
    for d in 0..rank - 1 {
        if d == a {
            back.push(outer.len() as i64);
        } else {
            back.push(outer_dims.next().unwrap_or(0) as i64);
        }
    }
    back.push(rank as i64 - 1);
    let y = if back.iter().enumerate().all(|(i, &p)| p == i as i64) {
        y
    } else {
        imp.transpose(y, back)?
    };
    Ok(vec![y])
}
