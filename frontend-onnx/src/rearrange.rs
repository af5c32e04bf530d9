//! ONNX ops that rearrange data along axes, and a gate: `CenterCropPad` (a centred slice
//! or zero padding per axis; the target shape must be known at import, as kiln's shapes
//! are static), `ReverseSequence` (each batch entry's first `sequence_lens[b]` steps
//! reversed, the rest kept: a `take` from the flattened data at positions computed in
//! the graph, so the lengths may be run-time data) and `SwiGLU` (`A·sigmoid(αA)·B`).

use kiln_ir::op::{self, BinaryKind as B, UnaryKind as U};
use kiln_ir::{DType, ExprId, NDArray};

use crate::convert::{Importer, Node};
use crate::error::{Error, Result};

/// The ONNX op types this module converts.
pub const SUPPORTED: &[&str] = &["CenterCropPad", "ReverseSequence", "SwiGLU"];

/// Converts one of [`SUPPORTED`].
pub(crate) fn convert(imp: &mut Importer, n: &Node) -> Result<Vec<ExprId>> {
    match n.op_type {
        "CenterCropPad" => center_crop_pad(imp, n),
        "ReverseSequence" => reverse_sequence(imp, n),
        _ => swiglu(imp, n),
    }
}

fn center_crop_pad(imp: &mut Importer, n: &Node) -> Result<Vec<ExprId>> {
    let mut x = imp.input(n, 0)?;
    let shape = imp.shape(x)?;
    let rank = shape.len();
    let target = imp.const_ints(n, 1).map_err(|_| {
        Error::Unsupported(
            "CenterCropPad to a shape known only at run time (kiln's shapes are static)".into(),
        )
    })?;
    let target = target.ok_or_else(|| Error::InvalidModel("CenterCropPad needs a shape".into()))?;
    let axes: Vec<usize> = match n.ints("axes") {
        Some(a) => a
            .iter()
            .map(|&a| crate::ops::axis(a, rank))
            .collect::<Result<_>>()?,
        None => (0..rank).collect(),
    };
    if axes.len() != target.len() {
        return Err(Error::InvalidModel(format!(
            "CenterCropPad shape {target:?} for {} axes",
            axes.len()
        )));
    }
    let dtype = imp.dtype(x)?;
    for (&a, &want) in axes.iter().zip(&target) {
        let want = usize::try_from(want)
            .map_err(|_| Error::InvalidModel(format!("CenterCropPad size {want}")))?;
        let have = imp.shape(x)?[a];
        if want < have {
            let begin = (have - want) / 2;
            x = imp.call(
                op::StridedSlice {
                    begin: vec![begin as i64],
                    end: vec![(begin + want) as i64],
                    strides: None,
                    axes: Some(vec![a as i64]),
                },
                &[x],
            )?;
        } else if want > have {
            let before = (want - have) / 2;
            let after = want - have - before;
            let mut parts = vec![];
            for len in [before, after] {
                let mut s = imp.shape(x)?;
                s[a] = len;
                parts.push(imp.constant(NDArray::zeros(s, dtype)));
            }
            let pieces: Vec<ExprId> = [parts[0], x, parts[1]]
                .into_iter()
                .filter(|&p| imp.shape(p).is_ok_and(|s| s[a] > 0))
                .collect();
            let t = imp.m.tuple(&pieces)?;
            x = imp.call(op::Concatenate::new(a as i64), &[t])?;
        }
    }
    Ok(vec![x])
}

fn reverse_sequence(imp: &mut Importer, n: &Node) -> Result<Vec<ExprId>> {
    let x = imp.input(n, 0)?;
    let lens = imp.input(n, 1)?;
    let shape = imp.shape(x)?;
    let rank = shape.len();
    if rank < 2 {
        return Err(Error::InvalidModel(format!(
            "ReverseSequence of rank {rank}"
        )));
    }
    let t_axis = crate::ops::axis(n.int("time_axis", 0), rank)?;
    let b_axis = crate::ops::axis(n.int("batch_axis", 1), rank)?;
    if t_axis == b_axis || t_axis > 1 || b_axis > 1 {
        return Err(Error::InvalidModel(
            "ReverseSequence's time and batch axes must be 0 and 1".into(),
        ));
    }
    let (steps, batch) = (shape[t_axis], shape[b_axis]);
    if imp.shape(lens)? != [batch] {
        return Err(Error::InvalidModel(format!(
            "sequence_lens {:?} for a batch of {batch}",
            imp.shape(lens)?
        )));
    }
    // Source step of (t, b): len_b - 1 - t while t < len_b, else t.
    let lens = imp.call(op::Cast { dtype: DType::I64 }, &[lens])?;
    let mut grid = vec![1usize; 2];
    grid[b_axis] = batch;
    let lens = imp.reshape(lens, &grid)?; // broadcast along time
    let mut tshape = vec![1usize; 2];
    tshape[t_axis] = steps;
    let t = imp.constant(NDArray::from_vec(
        tshape,
        (0..steps as i64).collect::<Vec<_>>(),
    )?);
    let one = imp.constant(NDArray::from_vec([], vec![1i64])?);
    let inside = imp.binary(B::Less, t, lens)?;
    let last = imp.binary(B::Subtract, lens, one)?;
    let back = imp.binary(B::Subtract, last, t)?;
    let src = imp.select(inside, back, t)?; // (dim0, dim1)
    // Flat offset of (src step, b) in the first two axes, times the inner size.
    let inner: usize = shape[2..].iter().product();
    let mut bshape = vec![1usize; 2];
    bshape[b_axis] = batch;
    let b = imp.constant(NDArray::from_vec(
        bshape,
        (0..batch as i64).collect::<Vec<_>>(),
    )?);
    let (row_of_t, row_of_b) = if t_axis == 0 {
        (batch as i64, 1)
    } else {
        (1, steps as i64)
    };
    let st = imp.constant(NDArray::from_vec([], vec![row_of_t])?);
    let sb = imp.constant(NDArray::from_vec([], vec![row_of_b])?);
    let a = imp.binary(B::Multiply, src, st)?;
    let c = imp.binary(B::Multiply, b, sb)?;
    let rows = imp.binary(B::Add, a, c)?; // (dim0, dim1): row of the flattened (dim0*dim1, inner)
    let flat = imp.reshape(x, &[shape[0] * shape[1], inner])?;
    let picked = imp.call(
        op::Take {
            axis: Some(0),
            mode: op::TakeMode::Clip,
        },
        &[flat, rows],
    )?; // (dim0, dim1, inner)
    Ok(vec![imp.reshape(picked, &shape)?])
}

fn swiglu(imp: &mut Importer, n: &Node) -> Result<Vec<ExprId>> {
    let a = imp.input(n, 0)?;
    let b = imp.input(n, 1)?;
    if imp.shape(a)? != imp.shape(b)? {
        return Err(Error::InvalidModel(format!(
            "SwiGLU inputs {:?} and {:?} differ (no broadcasting)",
            imp.shape(a)?,
            imp.shape(b)?
        )));
    }
    let alpha = n.float("alpha", 1.0);
    let scaled = if alpha == 1.0 {
        a
    } else {
        let s = imp.scalar_like(f64::from(alpha), a)?;
        imp.binary(B::Multiply, a, s)?
    };
    let gate = imp.unary(U::Sigmoid, scaled)?;
    let swish = imp.binary(B::Multiply, a, gate)?;
    Ok(vec![imp.binary(B::Multiply, swish, b)?])
}
