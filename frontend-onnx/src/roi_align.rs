//! ONNX `RoiAlign` (opsets 10 and 16) built from elementwise ops and four gathers,
//! following ONNX's reference step by step: each region of interest (run-time `rois`,
//! `[R, 4]` as `x1, y1, x2, y2`, and `batch_indices`) is scaled by `spatial_scale`,
//! shifted by half a pixel (`half_pixel`) or forced to at least 1×1
//! (`output_half_pixel`), and split into `output_height × output_width` bins of
//! `sampling_ratio²` sample points; each sample is read bilinearly (0 outside
//! `[-1, H] × [-1, W]`, clamped to the last row/column at the far edge) and the samples
//! of a bin are averaged (`avg`) or their largest weighted corner kept (`max`). The
//! coordinates are computed in float32 (the reference uses float64: results agree within
//! float32 rounding of the sample positions). An adaptive grid (`sampling_ratio` 0: a
//! bin's sample count depends on the run-time roi size) is unsupported.

use kiln_ir::op::{self, BinaryKind as B, ReduceKind as R, UnaryKind as U};
use kiln_ir::{DType, ExprId, NDArray};

use crate::convert::{Importer, Node};
use crate::error::{Error, Result};
use crate::ops::cast;

/// The ONNX op types this module converts.
pub const SUPPORTED: &[&str] = &["RoiAlign"];

/// One axis (y or x) of the sample grid: per roi and sample, the low and high pixel
/// index (int64) and their bilinear weights (0 for samples outside the map).
struct Axis {
    low: ExprId,
    high: ExprId,
    w_low: ExprId,
    w_high: ExprId,
}

/// The sample positions `start + bin * (p + (i + 0.5) / g)` of roi coordinates
/// `start`/`end` (`[R, 1]`) over `bins` bins of `g` samples, read as [`Axis`] on an
/// extent of `size` pixels.
fn axis(
    imp: &mut Importer,
    [start, end]: [ExprId; 2],
    half_pixel: bool,
    bins: usize,
    g: usize,
    size: usize,
) -> Result<Axis> {
    let mut len = imp.binary(B::Subtract, end, start)?;
    if !half_pixel {
        let one = imp.scalar(1.0, DType::F32);
        len = imp.binary(B::Maximum, len, one)?;
    }
    let nb = imp.scalar(bins as f64, DType::F32);
    let bin = imp.binary(B::Divide, len, nb)?;
    let offsets: Vec<f32> = (0..bins * g)
        .map(|k| (k / g) as f32 + ((k % g) as f32 + 0.5) / g as f32)
        .collect();
    let offsets = imp.constant(NDArray::from_vec([1, bins * g], offsets)?);
    let step = imp.binary(B::Multiply, bin, offsets)?;
    let pos = imp.binary(B::Add, start, step)?;
    // Inside [-1, size]: the sample counts; outside: every weight is 0.
    let lo = imp.scalar(-1.0, DType::F32);
    let hi = imp.scalar(size as f64, DType::F32);
    let above = imp.binary(B::GreaterEqual, pos, lo)?;
    let below = imp.binary(B::LessEqual, pos, hi)?;
    let above = cast(imp, above, DType::F32)?;
    let below = cast(imp, below, DType::F32)?;
    let inside = imp.binary(B::Multiply, above, below)?;
    let zero = imp.scalar(0.0, DType::F32);
    let pos = imp.binary(B::Maximum, pos, zero)?;
    let last = imp.scalar((size - 1) as f64, DType::F32);
    let fl = imp.unary(U::Floor, pos)?;
    let at_edge = imp.binary(B::GreaterEqual, fl, last)?;
    let pos = imp.call(op::Where, &[at_edge, last, pos])?;
    let low = imp.binary(B::Minimum, fl, last)?;
    let one = imp.scalar(1.0, DType::F32);
    let next = imp.binary(B::Add, low, one)?;
    let high = imp.binary(B::Minimum, next, last)?;
    let frac = imp.binary(B::Subtract, pos, low)?;
    let rest = imp.binary(B::Subtract, one, frac)?;
    Ok(Axis {
        low: cast(imp, low, DType::I64)?,
        high: cast(imp, high, DType::I64)?,
        w_low: imp.binary(B::Multiply, rest, inside)?,
        w_high: imp.binary(B::Multiply, frac, inside)?,
    })
}

/// Converts `RoiAlign`.
pub(crate) fn convert(imp: &mut Importer, n: &Node) -> Result<Vec<ExprId>> {
    let x = imp.input(n, 0)?;
    let rois = imp.input(n, 1)?;
    let batch = imp.input(n, 2)?;
    let xs = imp.shape(x)?;
    let rs = imp.shape(rois)?;
    let dt = imp.dtype(x)?;
    if xs.len() != 4 || rs.len() != 2 || rs[1] != 4 || imp.shape(batch)? != [rs[0]] {
        return Err(Error::InvalidModel(format!(
            "RoiAlign needs X [N, C, H, W], rois [R, 4] and batch_indices [R]; got {xs:?}, \
             {rs:?} and {:?}",
            imp.shape(batch)?
        )));
    }
    if !dt.is_float() {
        return Err(Error::InvalidModel(format!("RoiAlign of {dt}")));
    }
    let (nb, c, h, w) = (xs[0], xs[1], xs[2], xs[3]);
    let r = rs[0];
    let dim = |name: &str| -> Result<usize> {
        let v = n.int(name, 1);
        usize::try_from(v)
            .ok()
            .filter(|&v| v > 0)
            .ok_or_else(|| Error::InvalidModel(format!("RoiAlign {name} {v}")))
    };
    let (ph, pw) = (dim("output_height")?, dim("output_width")?);
    let ratio = n.int("sampling_ratio", 0);
    let g = usize::try_from(ratio)
        .ok()
        .filter(|&g| g > 0)
        .ok_or_else(|| {
            Error::Unsupported(format!(
                "RoiAlign with sampling_ratio {ratio} (an adaptive sample grid, sized by the \
             run-time rois; kiln's shapes are static)"
            ))
        })?;
    let half_pixel = match n
        .string("coordinate_transformation_mode", "half_pixel")
        .as_str()
    {
        "half_pixel" => true,
        "output_half_pixel" => false,
        other => {
            return Err(Error::InvalidModel(format!(
                "RoiAlign coordinate_transformation_mode `{other}`"
            )));
        }
    };
    let max = match n.string("mode", "avg").as_str() {
        "avg" => false,
        "max" => true,
        other => return Err(Error::InvalidModel(format!("RoiAlign mode `{other}`"))),
    };
    if h == 0 || w == 0 {
        return Err(Error::InvalidModel(
            "RoiAlign of an empty feature map".into(),
        ));
    }
    let rois = cast(imp, rois, DType::F32)?;
    let scale = imp.scalar(n.float("spatial_scale", 1.0) as f64, DType::F32);
    let rois = imp.binary(B::Multiply, rois, scale)?;
    let off = imp.scalar(if half_pixel { 0.5 } else { 0.0 }, DType::F32);
    let rois = imp.binary(B::Subtract, rois, off)?;
    let mut col = |k: i64| -> Result<ExprId> {
        let i = imp.constant(NDArray::from_vec([1], vec![k])?);
        imp.call(
            op::Take {
                axis: Some(1),
                mode: op::TakeMode::Clip,
            },
            &[rois, i],
        )
    };
    let (x1, y1, x2, y2) = (col(0)?, col(1)?, col(2)?, col(3)?);
    let ya = axis(imp, [y1, y2], half_pixel, ph, g, h)?;
    let xa = axis(imp, [x1, x2], half_pixel, pw, g, w)?;
    let (sy, sx) = (ph * g, pw * g);
    // Pixel (b, y, x) of X as row b*H*W + y*W + x of X laid out [N*H*W, C].
    let pixels = imp.transpose(x, vec![0, 2, 3, 1])?;
    let pixels = imp.reshape(pixels, &[nb * h * w, c])?;
    let batch = cast(imp, batch, DType::I64)?;
    let hw = imp.scalar((h * w) as f64, DType::I64);
    let base = imp.binary(B::Multiply, batch, hw)?;
    let base = imp.reshape(base, &[r, 1, 1])?;
    let wid = imp.scalar(w as f64, DType::I64);
    let corner = |imp: &mut Importer, yi: ExprId, xi: ExprId| -> Result<ExprId> {
        let row = imp.binary(B::Multiply, yi, wid)?;
        let row = imp.reshape(row, &[r, sy, 1])?;
        let xi = imp.reshape(xi, &[r, 1, sx])?;
        let idx = imp.binary(B::Add, row, xi)?;
        let idx = imp.binary(B::Add, idx, base)?;
        imp.call(
            op::Take {
                axis: Some(0),
                mode: op::TakeMode::Clip,
            },
            &[pixels, idx],
        )
    };
    let weight = |imp: &mut Importer, wy: ExprId, wx: ExprId| -> Result<ExprId> {
        let wy = imp.reshape(wy, &[r, sy, 1, 1])?;
        let wx = imp.reshape(wx, &[r, 1, sx, 1])?;
        let p = imp.binary(B::Multiply, wy, wx)?;
        cast(imp, p, dt)
    };
    let mut terms = Vec::with_capacity(4);
    for (yi, wy) in [(ya.low, ya.w_low), (ya.high, ya.w_high)] {
        for (xi, wx) in [(xa.low, xa.w_low), (xa.high, xa.w_high)] {
            let v = corner(imp, yi, xi)?;
            let wt = weight(imp, wy, wx)?;
            terms.push(imp.binary(B::Multiply, wt, v)?);
        }
    }
    let join = if max { B::Maximum } else { B::Add };
    let mut val = terms[0];
    for &t in &terms[1..] {
        val = imp.binary(join, val, t)?;
    }
    // [R, PH, g, PW, g, C] → one value per bin.
    let val = imp.reshape(val, &[r, ph, g, pw, g, c])?;
    let y = if max {
        imp.reduce(R::Max, val, Some(vec![2, 4]), false)?
    } else {
        let s = imp.reduce(R::Sum, val, Some(vec![2, 4]), false)?;
        let count = imp.scalar((g * g) as f64, dt);
        imp.binary(B::Divide, s, count)?
    };
    Ok(vec![imp.transpose(y, vec![0, 3, 1, 2])?])
}
