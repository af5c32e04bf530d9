//! ONNX `TopK` from comparisons, without a sort op: along the axis, each element's
//! rank is the number of elements that come before it (larger — or smaller with
//! `largest=0` — or equal with a lower index, ONNX's tie rule), computed from an
//! `n × n` comparison per row; output slot `k` takes the position whose rank is `k`,
//! and the values are gathered from there (exact). The comparison matrix bounds the
//! size: more than [`MAX_COMPARISONS`] comparisons is `Unsupported`. NaN is not
//! ordered: a row holding NaN gets unspecified positions for it.

use kiln_ir::op::{self, BinaryKind as B, ReduceKind as R};
use kiln_ir::{DType, ExprId, NDArray};

use crate::convert::{Importer, Node};
use crate::error::{Error, Result};

/// The most comparisons (rows × n × n) a `TopK` may build.
pub const MAX_COMPARISONS: usize = 1 << 26;

/// The ONNX op types this module converts.
pub const SUPPORTED: &[&str] = &["TopK"];

/// Converts a `TopK` node: outputs the values and their int64 indices.
pub(crate) fn convert(imp: &mut Importer, n: &Node) -> Result<Vec<ExprId>> {
    let x = imp.input(n, 0)?;
    let shape = imp.shape(x)?;
    let dtype = imp.dtype(x)?;
    let rank = shape.len();
    if rank == 0 {
        return Err(Error::InvalidModel("TopK of a scalar".into()));
    }
    let k = if n.opset < 10 {
        n.int("k", -1)
    } else {
        match imp.const_ints(n, 1)?.as_deref() {
            Some([k]) => *k,
            _ => return Err(Error::InvalidModel("TopK needs K: one int64".into())),
        }
    };
    let a = n.int("axis", -1);
    let axis = if a < 0 { a + rank as i64 } else { a };
    if !(0..rank as i64).contains(&axis) {
        return Err(Error::InvalidModel(format!(
            "TopK axis {a} for rank {rank}"
        )));
    }
    let axis = axis as usize;
    let len = shape[axis];
    let k = usize::try_from(k)
        .ok()
        .filter(|&k| k <= len)
        .ok_or_else(|| Error::InvalidModel(format!("TopK K={k} for an axis of {len}")))?;
    let largest = n.int("largest", 1) != 0;
    let mut out_shape = shape.clone();
    out_shape[axis] = k;
    if k == 0 || shape.contains(&0) {
        let v = imp.constant(NDArray::zeros(out_shape.clone(), dtype));
        let i = imp.constant(NDArray::zeros(out_shape, DType::I64));
        return Ok(vec![v, i]);
    }
    let rows: usize = shape
        .iter()
        .enumerate()
        .filter(|&(d, _)| d != axis)
        .map(|(_, &s)| s)
        .product();
    rows.checked_mul(len)
        .and_then(|c| c.checked_mul(len))
        .filter(|&c| c <= MAX_COMPARISONS)
        .ok_or_else(|| {
            Error::Unsupported(format!(
                "TopK over {len} elements in each of {rows} rows: kiln ranks by comparing \
                 every pair (at most {MAX_COMPARISONS} comparisons) and has no sort op"
            ))
        })?;
    // Move the axis last and view the rest as rows: (rows, len).
    let mut perm: Vec<usize> = (0..rank).filter(|&d| d != axis).collect();
    perm.push(axis);
    let moved = if axis + 1 == rank {
        x
    } else {
        imp.transpose(x, perm.iter().map(|&d| d as i64).collect())?
    };
    let xr = imp.reshape(moved, &[rows, len])?;
    let col = imp.reshape(xr, &[rows, len, 1])?; // x_i
    let row = imp.reshape(xr, &[rows, 1, len])?; // x_j
    // before[r, i, j]: x_j comes before x_i.
    let beats = imp.binary(if largest { B::Greater } else { B::Less }, row, col)?;
    let equal = imp.binary(B::Equal, row, col)?;
    let lower: Vec<bool> = (0..len * len).map(|p| p % len < p / len).collect();
    let lower = imp.constant(NDArray::from_vec([1, len, len], lower)?);
    let no = imp.constant(NDArray::full(vec![], DType::Bool, 0.0));
    let yes = imp.constant(NDArray::full(vec![], DType::Bool, 1.0));
    let tie = imp.select(equal, lower, no)?;
    let before = imp.select(beats, yes, tie)?;
    let ones = imp.call(op::Cast { dtype: DType::I64 }, &[before])?;
    let position = imp.reduce(R::Sum, ones, Some(vec![2]), false)?; // (rows, len)
    // slot k takes the element of rank k.
    let position = imp.reshape(position, &[rows, 1, len])?;
    let slots = imp.constant(NDArray::from_vec(
        [1, k, 1],
        (0..k as i64).collect::<Vec<_>>(),
    )?);
    let hit = imp.binary(B::Equal, position, slots)?; // (rows, k, len)
    let iota = imp.constant(NDArray::from_vec(
        [1, 1, len],
        (0..len as i64).collect::<Vec<_>>(),
    )?);
    let zero = imp.constant(NDArray::zeros(vec![], DType::I64));
    let picked = imp.select(hit, iota, zero)?;
    let index = imp.reduce(R::Sum, picked, Some(vec![2]), false)?; // (rows, k)
    // Values gathered at the indices from the flattened rows.
    let starts: Vec<i64> = (0..rows as i64).map(|r| r * len as i64).collect();
    let starts = imp.constant(NDArray::from_vec([rows, 1], starts)?);
    let flat = imp.binary(B::Add, index, starts)?;
    let all = imp.reshape(xr, &[rows * len])?;
    let values = imp.call(
        op::Take {
            axis: Some(0),
            mode: op::TakeMode::Clip,
        },
        &[all, flat],
    )?;
    // Back to the input's layout with K along the axis.
    let mut moved_shape: Vec<usize> = perm.iter().map(|&d| out_shape[d]).collect();
    moved_shape[rank - 1] = k;
    let mut inverse = vec![0i64; rank];
    for (i, &d) in perm.iter().enumerate() {
        inverse[d] = i as i64;
    }
    let restore = |imp: &mut Importer, v: ExprId| -> Result<ExprId> {
        let v = imp.reshape(v, &moved_shape)?;
        if axis + 1 == rank {
            Ok(v)
        } else {
            imp.transpose(v, inverse.clone())
        }
    };
    let values = restore(imp, values)?;
    let index = restore(imp, index)?;
    Ok(vec![values, index])
}
