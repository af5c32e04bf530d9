//! Helpers shared by the op families: argument checks that produce the standard type
//! errors, axis normalisation, numpy broadcasting, and index arithmetic for evaluation.

use crate::error::{Error, Result};
use crate::tensor::NDArray;
use crate::ty::{TensorType, Type, fmt_shape};
use crate::value::Value;

/// Checks the argument count.
pub fn expect_arity(op: &str, args: &[Type], n: usize) -> Result<()> {
    if args.len() != n {
        return Err(Error::ty(
            op,
            format!("expects {n} argument(s), got {}", args.len()),
        ));
    }
    Ok(())
}

/// Argument `i` (called `what` in messages) as a tensor type.
pub fn tensor_arg<'a>(op: &str, args: &'a [Type], i: usize, what: &str) -> Result<&'a TensorType> {
    match args.get(i) {
        Some(Type::Tensor(t)) => Ok(t),
        Some(other) => Err(Error::ty(
            op,
            format!("argument {i} ({what}) must be a tensor, got {other}"),
        )),
        None => Err(Error::ty(op, format!("missing argument {i} ({what})"))),
    }
}

/// Requires argument `what` to have rank `rank`.
pub fn expect_rank(op: &str, t: &TensorType, what: &str, rank: usize) -> Result<()> {
    if t.rank() != rank {
        return Err(Error::ty(
            op,
            format!(
                "{what} must have rank {rank}, got shape {}",
                fmt_shape(&t.shape)
            ),
        ));
    }
    Ok(())
}

/// Requires a float dtype.
pub fn expect_float(op: &str, t: &TensorType, what: &str) -> Result<()> {
    if !t.dtype.is_float() {
        return Err(Error::ty(
            op,
            format!("{what} must be a float tensor, got {t}"),
        ));
    }
    Ok(())
}

/// Requires two arguments to share a dtype.
pub fn expect_same_dtype(
    op: &str,
    a: &TensorType,
    an: &str,
    b: &TensorType,
    bn: &str,
) -> Result<()> {
    if a.dtype != b.dtype {
        return Err(Error::ty(
            op,
            format!("{an} is {a} but {bn} is {b}; dtypes must match"),
        ));
    }
    Ok(())
}

/// Normalises a possibly negative axis into `0..rank`.
pub fn normalize_axis(op: &str, axis: i64, rank: usize) -> Result<usize> {
    let r = rank as i64;
    if axis < -r || axis >= r {
        return Err(Error::ty(
            op,
            format!("axis {axis} is out of range for rank {rank}"),
        ));
    }
    Ok(if axis < 0 { axis + r } else { axis } as usize)
}

/// The numpy broadcast of two shapes.
pub fn broadcast_shapes(op: &str, a: &[usize], b: &[usize]) -> Result<Vec<usize>> {
    let rank = a.len().max(b.len());
    let mut out = vec![0; rank];
    for i in 0..rank {
        let da = if i + a.len() >= rank {
            a[i + a.len() - rank]
        } else {
            1
        };
        let db = if i + b.len() >= rank {
            b[i + b.len() - rank]
        } else {
            1
        };
        out[i] = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => {
                return Err(Error::ty(
                    op,
                    format!(
                        "shapes {} and {} do not broadcast",
                        fmt_shape(a),
                        fmt_shape(b)
                    ),
                ));
            }
        };
    }
    Ok(out)
}

/// For each element of `out_shape` (row-major), the flat index of the element of a
/// tensor of shape `in_shape` that broadcasts to it.
pub fn broadcast_indices(in_shape: &[usize], out_shape: &[usize]) -> Vec<usize> {
    let offset = out_shape.len() - in_shape.len();
    let in_strides = crate::tensor::row_major_strides(in_shape);
    let n: usize = out_shape.iter().product();
    let mut idx = vec![0usize; out_shape.len()];
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let mut flat = 0;
        for (d, &i) in idx.iter().enumerate().skip(offset) {
            if in_shape[d - offset] != 1 {
                flat += i * in_strides[d - offset];
            }
        }
        out.push(flat);
        for d in (0..idx.len()).rev() {
            idx[d] += 1;
            if idx[d] < out_shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    out
}

/// The argument values as tensors.
pub fn tensors<'a>(op: &str, args: &'a [Value]) -> Result<Vec<&'a NDArray>> {
    args.iter()
        .enumerate()
        .map(|(i, v)| v.as_tensor(&format!("{op} argument {i}")))
        .collect()
}

/// The output type as a tensor type (ops that return one tensor).
pub fn out_tensor<'a>(op: &str, out: &'a Type) -> Result<&'a TensorType> {
    out.as_tensor()
        .ok_or_else(|| Error::Eval(format!("{op}: expected a tensor result type, got {out}")))
}
