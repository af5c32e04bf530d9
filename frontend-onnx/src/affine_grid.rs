//! ONNX `AffineGrid` (opset 20): the sampling grid of `GridSample` for a batch of affine
//! matrices `theta` (`[N, 2, 3]` or `[N, 3, 4]`) over an output `size` known at import
//! (`[N, C, H, W]` or `[N, C, D, H, W]`). As ONNX's reference does, the homogeneous
//! coordinates `(x, y[, z], 1)` of every output position — evenly spaced in `[-1, 1]`,
//! through the corners (`align_corners`) or the pixel centres — form a float64 constant,
//! and the grid is `theta` times it, computed in float64 and rounded once to `theta`'s
//! dtype.

use kiln_ir::{DType, ExprId, NDArray};

use crate::convert::{Importer, Node};
use crate::error::{Error, Result};
use crate::ops::{cast, matmul};

/// The ONNX op types this module converts.
pub const SUPPORTED: &[&str] = &["AffineGrid"];

/// The `n` coordinates of one axis: `-1 + k · 2/(n - 1)` through the corners, else
/// the pixel centres `-1 + (k + 1/2) · 2/n`.
fn axis_coords(n: usize, align_corners: bool) -> Vec<f64> {
    (0..n)
        .map(|k| {
            if align_corners {
                if n == 1 {
                    -1.0
                } else {
                    -1.0 + k as f64 * (2.0 / (n - 1) as f64)
                }
            } else {
                let step = 2.0 / n as f64;
                -1.0 + step / 2.0 + k as f64 * step
            }
        })
        .collect()
}

/// Converts `AffineGrid`.
pub(crate) fn convert(imp: &mut Importer, n: &Node) -> Result<Vec<ExprId>> {
    let theta = imp.input(n, 0)?;
    let size = imp
        .const_ints(n, 1)?
        .ok_or_else(|| Error::InvalidModel("AffineGrid needs its size".into()))?;
    let ts = imp.shape(theta)?;
    let dt = imp.dtype(theta)?;
    let spatial: Vec<usize> = size
        .iter()
        .skip(2)
        .map(|&d| usize::try_from(d).ok().filter(|&d| d > 0))
        .collect::<Option<_>>()
        .ok_or_else(|| Error::InvalidModel(format!("AffineGrid size {size:?}")))?;
    let d = spatial.len();
    if !(2..=3).contains(&d) || size.len() != d + 2 || ts != [size[0] as usize, d, d + 1] {
        return Err(Error::InvalidModel(format!(
            "AffineGrid needs size [N, C, H, W] or [N, C, D, H, W] and theta [N, {d}, {}]; \
             got size {size:?} and theta {ts:?}",
            d + 1
        )));
    }
    if !dt.is_float() {
        return Err(Error::InvalidModel(format!("AffineGrid of {dt}")));
    }
    let align = n.int("align_corners", 0) != 0;
    let coords: Vec<Vec<f64>> = spatial.iter().map(|&s| axis_coords(s, align)).collect();
    let points = spatial
        .iter()
        .try_fold(1usize, |a, &b| a.checked_mul(b))
        .ok_or_else(|| Error::InvalidModel(format!("AffineGrid size {size:?} overflows")))?;
    imp.check_alloc("AffineGrid", &[d + 1, points], DType::F64)?;
    // Rows x, y[, z], 1 (x runs along the last spatial axis); columns the positions in
    // row-major order.
    let mut base = vec![0.0; (d + 1) * points];
    for p in 0..points {
        let mut rest = p;
        for axis in (0..d).rev() {
            let i = rest % spatial[axis];
            rest /= spatial[axis];
            base[(d - 1 - axis) * points + p] = coords[axis][i];
        }
        base[d * points + p] = 1.0;
    }
    let base = imp.constant(NDArray::from_vec([d + 1, points], base)?);
    let t = cast(imp, theta, DType::F64)?;
    let g = matmul(imp, t, base)?;
    let g = imp.transpose(g, vec![0, 2, 1])?;
    let mut shape = vec![ts[0]];
    shape.extend(&spatial);
    shape.push(d);
    let g = imp.reshape(g, &shape)?;
    Ok(vec![cast(imp, g, dt)?])
}
