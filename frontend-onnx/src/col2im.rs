//! ONNX `Col2Im`: sliding blocks (`[N, C·∏block, L]`, the column layout of im2col) summed
//! back into an image of `image_shape` (known at import), over any number of spatial
//! axes, with `strides`, `dilations` and `pads`. Every image position reads, for each
//! block offset, at most one column entry, fixed by the static geometry: so the image is
//! the sum over block offsets of one constant-index gather each (a position no block
//! covers reads an appended zero).

use kiln_ir::op::{self, BinaryKind as B};
use kiln_ir::{ExprId, NDArray};

use crate::convert::{Importer, Node};
use crate::error::{Error, Result};

/// The ONNX op types this module converts.
pub const SUPPORTED: &[&str] = &["Col2Im"];

/// `v` as non-negative sizes, or an error naming `what`.
fn sizes(v: &[i64], what: &str) -> Result<Vec<usize>> {
    v.iter()
        .map(|&x| usize::try_from(x).ok())
        .collect::<Option<_>>()
        .ok_or_else(|| Error::InvalidModel(format!("Col2Im {what} {v:?}")))
}

/// Converts `Col2Im`.
pub(crate) fn convert(imp: &mut Importer, n: &Node) -> Result<Vec<ExprId>> {
    let x = imp.input(n, 0)?;
    let image = imp
        .const_ints(n, 1)?
        .ok_or_else(|| Error::InvalidModel("Col2Im needs image_shape".into()))?;
    let block = imp
        .const_ints(n, 2)?
        .ok_or_else(|| Error::InvalidModel("Col2Im needs block_shape".into()))?;
    let d = image.len();
    let image = sizes(&image, "image_shape")?;
    let block = sizes(&block, "block_shape")?;
    let attr = |name: &str, len: usize, default: i64| -> Result<Vec<usize>> {
        let v = n.ints(name).unwrap_or_else(|| vec![default; len]);
        if v.len() != len {
            return Err(Error::InvalidModel(format!("Col2Im {name} {v:?}")));
        }
        sizes(&v, name)
    };
    let strides = attr("strides", d, 1)?;
    let dilations = attr("dilations", d, 1)?;
    let pads = attr("pads", 2 * d, 0)?;
    let xs = imp.shape(x)?;
    let k: usize = block.iter().product();
    if d == 0
        || block.len() != d
        || xs.len() != 3
        || k == 0
        || xs[1] % k != 0
        || strides.contains(&0)
        || dilations.contains(&0)
    {
        return Err(Error::InvalidModel(format!(
            "Col2Im of {xs:?} with image_shape {image:?}, block_shape {block:?}, strides \
             {strides:?}, dilations {dilations:?}"
        )));
    }
    // Blocks per axis.
    let mut counts = vec![];
    for i in 0..d {
        let span = dilations[i] * (block[i] - 1) + 1;
        let room = image[i] + pads[i] + pads[i + d];
        if room < span {
            return Err(Error::InvalidModel(format!(
                "Col2Im block {block:?} does not fit the padded image on axis {i}"
            )));
        }
        counts.push((room - span) / strides[i] + 1);
    }
    let l: usize = counts.iter().product();
    if xs[2] != l {
        return Err(Error::InvalidModel(format!(
            "Col2Im input has {} blocks, the geometry gives {l}",
            xs[2]
        )));
    }
    let (nb, c) = (xs[0], xs[1] / k);
    let pixels: usize = image.iter().product();
    imp.check_alloc(
        "the Col2Im gather indices",
        &[k, pixels],
        kiln_ir::DType::I64,
    )?;
    // [N, C, K, L + 1]: the blocks of each offset, with a zero column appended.
    let cols = imp.reshape(x, &[nb, c, k, l])?;
    let dt = imp.dtype(x)?;
    let zero = imp.constant(NDArray::zeros(vec![nb, c, k, 1], dt));
    let t = imp.m.tuple(&[cols, zero])?;
    let cols = imp.call(op::Concatenate::new(3), &[t])?;
    let mut sum: Option<ExprId> = None;
    for off in 0..k {
        // The block offset along each axis (row-major over block_shape).
        let mut o = vec![0; d];
        let mut rest = off;
        for i in (0..d).rev() {
            o[i] = rest % block[i];
            rest /= block[i];
        }
        let idx: Vec<i64> = (0..pixels)
            .map(|p| {
                let mut rest = p;
                let mut col = 0usize;
                let mut stride = 1usize;
                for i in (0..d).rev() {
                    let y = rest % image[i];
                    rest /= image[i];
                    // Block b covers y at this offset when b·s + o·dil = y + pad_begin.
                    let at = y + pads[i];
                    let shift = o[i] * dilations[i];
                    if at < shift || (at - shift) % strides[i] != 0 {
                        return l as i64;
                    }
                    let b = (at - shift) / strides[i];
                    if b >= counts[i] {
                        return l as i64;
                    }
                    col += b * stride;
                    stride *= counts[i];
                }
                col as i64
            })
            .collect();
        let src = imp.constant(NDArray::from_vec([1], vec![off as i64])?);
        let plane = imp.call(
            op::Take {
                axis: Some(2),
                mode: op::TakeMode::Clip,
            },
            &[cols, src],
        )?;
        let plane = imp.reshape(plane, &[nb, c, l + 1])?;
        let idx = imp.constant(NDArray::from_vec([pixels], idx)?);
        let part = imp.call(
            op::Take {
                axis: Some(2),
                mode: op::TakeMode::Clip,
            },
            &[plane, idx],
        )?;
        sum = Some(match sum {
            Some(s) => imp.binary(B::Add, s, part)?,
            None => part,
        });
    }
    let y = sum.ok_or_else(|| Error::InvalidModel("Col2Im of an empty block".into()))?;
    let mut shape = vec![nb, c];
    shape.extend(&image);
    Ok(vec![imp.reshape(y, &shape)?])
}
