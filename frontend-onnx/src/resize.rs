//! ONNX `Resize` (opsets 10 to 19) and `Upsample`, built from existing graph-IR ops.
//!
//! Resizing is separable: each resized axis in turn maps the input along that axis to
//! the output through a weight matrix `W[out, in]` computed here at import, as ONNX's
//! reference implementation does (`onnx/reference/ops/op_resize.py`, which this follows
//! step by step: the coordinate transformation, the kernel — nearest, linear or cubic,
//! with antialiasing — its taps picked around the source coordinate with edge padding,
//! and `exclude_outside`). A nearest kernel has one tap of weight 1 per output element
//! and becomes a `take` along the axis (exact, any dtype); linear and cubic become a
//! `nn.dense` with `W` over the axis moved last (float tensors). `tf_crop_and_resize`
//! then writes `extrapolation_value` where the source coordinate falls outside the input.

use kiln_ir::op;
use kiln_ir::{DType, ExprId, NDArray};

use crate::convert::{Importer, Node};
use crate::error::{Error, Result};

/// The interpolation kernel.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    Nearest(NearestMode),
    Linear,
    /// Cubic with coefficient `a`.
    Cubic(f64),
}

/// How a nearest kernel rounds the source coordinate.
#[derive(Clone, Copy, Debug, PartialEq)]
enum NearestMode {
    RoundPreferFloor,
    RoundPreferCeil,
    Floor,
    Ceil,
}

/// Everything about one axis that fixes its weights.
#[derive(Clone, Debug)]
struct Axis {
    input: usize,
    output: usize,
    scale: f64,
    /// `(start, end)` of the region of interest (for `tf_crop_and_resize`).
    roi: (f64, f64),
}

/// The attributes shared by every axis.
#[derive(Clone, Debug)]
struct Kernel {
    mode: Mode,
    transform: String,
    antialias: bool,
    exclude_outside: bool,
}

/// One axis's mapping: per output position, `(input index, weight)` taps, and whether
/// the position is extrapolated (`tf_crop_and_resize` outside the input).
#[derive(Debug, PartialEq)]
struct Weights {
    taps: Vec<Vec<(usize, f64)>>,
    extrapolated: Vec<bool>,
}

impl Kernel {
    /// The kernel's coefficients for the fractional offset `ratio` in `(0, 1]`.
    fn coeffs(&self, ratio: f64, scale: f64) -> Vec<f64> {
        match self.mode {
            Mode::Nearest(m) => {
                let up = if ratio == 1.0 {
                    true
                } else {
                    match m {
                        NearestMode::RoundPreferFloor => ratio > 0.5,
                        NearestMode::RoundPreferCeil => ratio >= 0.5,
                        NearestMode::Floor => false,
                        NearestMode::Ceil => true,
                    }
                };
                if up { vec![0.0, 1.0] } else { vec![1.0, 0.0] }
            }
            Mode::Linear if self.antialias => {
                let scale = scale.min(1.0);
                let start = (-1.0 / scale).floor() as i64 + 1;
                let footprint = 2 - 2 * start;
                let c: Vec<f64> = (start..start + footprint)
                    .map(|i| (1.0 - ((i as f64 - ratio) * scale).abs()).clamp(0.0, 1.0))
                    .collect();
                normalized(c)
            }
            Mode::Linear => vec![1.0 - ratio, ratio],
            Mode::Cubic(a) if self.antialias => {
                let scale = scale.min(1.0);
                let k = |x: f64| {
                    let x = x.abs();
                    let (x2, x3) = (x * x, x * x * x);
                    if x <= 1.0 {
                        (a + 2.0) * x3 - (a + 3.0) * x2 + 1.0
                    } else if x < 2.0 {
                        a * x3 - 5.0 * a * x2 + 8.0 * a * x - 4.0 * a
                    } else {
                        0.0
                    }
                };
                let start = (-2.0 / scale).floor() as i64 + 1;
                let end = 2 - start;
                normalized(
                    (start..end)
                        .map(|i| k(scale * (i as f64 - ratio)))
                        .collect(),
                )
            }
            Mode::Cubic(a) => {
                let (r1, s) = (ratio + 1.0, 1.0 - ratio);
                let s1 = s + 1.0;
                vec![
                    ((a * r1 - 5.0 * a) * r1 + 8.0 * a) * r1 - 4.0 * a,
                    ((a + 2.0) * ratio - (a + 3.0)) * ratio * ratio + 1.0,
                    ((a + 2.0) * s - (a + 3.0)) * s * s + 1.0,
                    ((a * s1 - 5.0 * a) * s1 + 8.0 * a) * s1 - 4.0 * a,
                ]
            }
        }
    }

    /// The source coordinate of output position `y`, and whether it is extrapolated.
    fn source(&self, ax: &Axis, y: f64) -> Result<(f64, bool)> {
        let (input, scale) = (ax.input as f64, ax.scale);
        let output = scale * input;
        let out_int = ax.output as f64;
        let x = match self.transform.as_str() {
            "align_corners" if output == 1.0 => 0.0,
            "align_corners" => y * (input - 1.0) / (output - 1.0),
            "asymmetric" => y / scale,
            "tf_crop_and_resize" => {
                let (r0, r1) = ax.roi;
                let x = if output == 1.0 {
                    (r1 - r0) * (input - 1.0) / 2.0
                } else {
                    y * (r1 - r0) * (input - 1.0) / (output - 1.0)
                } + r0 * (input - 1.0);
                return Ok((x, x < 0.0 || x > input - 1.0));
            }
            "pytorch_half_pixel" if output == 1.0 => -0.5,
            "pytorch_half_pixel" | "half_pixel" => (y + 0.5) / scale - 0.5,
            "half_pixel_symmetric" => {
                let offset = input / 2.0 * (1.0 - out_int / output);
                offset + (y + 0.5) / scale - 0.5
            }
            other => {
                return Err(Error::Unsupported(format!(
                    "Resize with coordinate_transformation_mode `{other}`"
                )));
            }
        };
        Ok((x, false))
    }

    /// The taps of every output position of `ax`.
    fn weights(&self, ax: &Axis) -> Result<Weights> {
        let mut taps = Vec::with_capacity(ax.output);
        let mut extrapolated = Vec::with_capacity(ax.output);
        for y in 0..ax.output {
            let (x, extra) = self.source(ax, y as f64)?;
            let xi = x.floor();
            let ratio = if x == xi { 1.0 } else { x - xi };
            let mut c = self.coeffs(ratio, ax.scale);
            let n = c.len() as i64;
            // The n taps nearest to x in edge-padded coordinates, ties to the left.
            let pad = (n + 1) / 2;
            let xp = x + pad as f64;
            let p = xp.floor();
            let frac = xp - p;
            let off = if n % 2 == 0 {
                if frac == 0.0 { -(n / 2) } else { -(n / 2) + 1 }
            } else {
                let base = -((n - 1) / 2);
                if frac <= 0.5 { base } else { base + 1 }
            };
            let start = p as i64 + off - pad;
            let idx: Vec<i64> = (start..start + n).collect();
            let last = ax.input as i64 - 1;
            if self.exclude_outside {
                for (ci, &i) in c.iter_mut().zip(&idx) {
                    if i < 0 || i > last {
                        *ci = 0.0;
                    }
                }
                let sum: f64 = c.iter().sum();
                let sum = if sum == 0.0 { 1.0 } else { sum };
                c.iter_mut().for_each(|ci| *ci /= sum);
            }
            let mut row: Vec<(usize, f64)> = vec![];
            for (&i, &w) in idx.iter().zip(&c) {
                let i = i.clamp(0, last) as usize;
                match row.iter_mut().find(|(j, _)| *j == i) {
                    Some(t) => t.1 += w,
                    None => row.push((i, w)),
                }
            }
            row.retain(|&(_, w)| w != 0.0);
            taps.push(row);
            extrapolated.push(extra);
        }
        Ok(Weights { taps, extrapolated })
    }
}

/// `c` divided by its sum.
fn normalized(c: Vec<f64>) -> Vec<f64> {
    let s: f64 = c.iter().sum();
    c.into_iter().map(|v| v / s).collect()
}

/// `Resize` and `Upsample`.
pub(crate) fn resize(imp: &mut Importer, n: &Node) -> Result<Vec<ExprId>> {
    let x = imp.input(n, 0)?;
    let shape = imp.shape(x)?;
    let r = shape.len();
    // Opset 10's Resize and Upsample take (X, scales) and resize like numpy's repeat
    // for nearest (asymmetric coordinates, rounding down).
    let legacy = n.op_type == "Upsample" || n.opset < 11;
    let (roi, scales, sizes) = if n.op_type == "Upsample" && n.opset < 9 {
        let s = n
            .attr("scales")
            .map(|a| a.floats.clone())
            .unwrap_or_default();
        (
            None,
            Some(s.iter().map(|&v| v as f64).collect::<Vec<_>>()),
            None,
        )
    } else if legacy {
        (None, imp.const_input(n, 1)?.map(|t| t.to_f64_vec()), None)
    } else {
        let nonempty = |t: Option<NDArray>| t.filter(|t| t.numel() > 0);
        (
            nonempty(imp.const_input(n, 1)?).map(|t| t.to_f64_vec()),
            nonempty(imp.const_input(n, 2)?).map(|t| t.to_f64_vec()),
            nonempty(imp.const_input(n, 3)?).map(|t| t.to_i64_vec()),
        )
    };
    let axes: Vec<usize> = match n.ints("axes") {
        Some(a) => a
            .iter()
            .map(|&a| {
                let a = if a < 0 { a + r as i64 } else { a };
                usize::try_from(a)
                    .ok()
                    .filter(|&a| a < r)
                    .ok_or_else(|| Error::InvalidModel(format!("Resize axis {a} for rank {r}")))
            })
            .collect::<Result<_>>()?,
        None => (0..r).collect(),
    };
    let k = axes.len();
    let mode = match n.string("mode", "nearest").as_str() {
        "nearest" => Mode::Nearest(
            match n.string("nearest_mode", "round_prefer_floor").as_str() {
                _ if legacy => NearestMode::Floor,
                "round_prefer_floor" => NearestMode::RoundPreferFloor,
                "round_prefer_ceil" => NearestMode::RoundPreferCeil,
                "floor" => NearestMode::Floor,
                "ceil" => NearestMode::Ceil,
                m => return Err(Error::InvalidModel(format!("Resize nearest_mode `{m}`"))),
            },
        ),
        "linear" | "bilinear" | "trilinear" => Mode::Linear,
        "cubic" => Mode::Cubic(n.float("cubic_coeff_a", -0.75) as f64),
        m => return Err(Error::InvalidModel(format!("Resize mode `{m}`"))),
    };
    let kernel = Kernel {
        mode,
        transform: if legacy {
            "asymmetric".into()
        } else {
            n.string("coordinate_transformation_mode", "half_pixel")
        },
        antialias: n.int("antialias", 0) != 0,
        exclude_outside: n.int("exclude_outside", 0) != 0,
    };
    // Scales and sizes per listed axis, as the reference's `_interpolate_nd`.
    let input: Vec<usize> = axes.iter().map(|&a| shape[a]).collect();
    let (scale, output): (Vec<f64>, Vec<usize>) = match (&sizes, &scales) {
        (Some(sz), _) => {
            if sz.len() != k || sz.iter().any(|&s| s < 0) {
                return Err(Error::InvalidModel(format!(
                    "Resize sizes {sz:?} for {k} axes"
                )));
            }
            let mut sc: Vec<f64> = (0..k).map(|i| sz[i] as f64 / input[i] as f64).collect();
            match n.string("keep_aspect_ratio_policy", "stretch").as_str() {
                "stretch" => (sc, sz.iter().map(|&s| s as usize).collect()),
                p @ ("not_larger" | "not_smaller") => {
                    let s = if p == "not_larger" {
                        sc.iter().cloned().fold(f64::INFINITY, f64::min)
                    } else {
                        sc.iter().cloned().fold(f64::NEG_INFINITY, f64::max)
                    };
                    sc.iter_mut().for_each(|v| *v = s);
                    let out = input
                        .iter()
                        .map(|&d| (s * d as f64 + 0.5) as usize)
                        .collect();
                    (sc, out)
                }
                p => {
                    return Err(Error::InvalidModel(format!(
                        "Resize keep_aspect_ratio_policy `{p}`"
                    )));
                }
            }
        }
        (None, Some(sc)) => {
            if sc.len() != k || sc.iter().any(|&s| !(s.is_finite() && s > 0.0)) {
                return Err(Error::InvalidModel(format!(
                    "Resize scales {sc:?} for {k} axes"
                )));
            }
            // The scales are float32 in the model; the sizes are their product with the
            // input extents, truncated.
            let out = (0..k).map(|i| (sc[i] * input[i] as f64) as usize).collect();
            (sc.clone(), out)
        }
        (None, None) => {
            return Err(Error::InvalidModel("Resize needs scales or sizes".into()));
        }
    };
    // Every resized axis keeps at least one element (so each kernel's footprint is
    // bounded by its input), and its weight matrix fits the memory budget.
    for i in 0..k {
        if (output[i] == 0 && input[i] != 0) || !scale[i].is_finite() || scale[i] <= 0.0 {
            return Err(Error::Unsupported(format!(
                "Resize of axis {} from {} to {} elements (scale {})",
                axes[i], input[i], output[i], scale[i]
            )));
        }
        imp.check_alloc("the Resize weights", &[output[i], input[i]], DType::I64)?;
    }
    let roi = match roi {
        Some(v) if kernel.transform == "tf_crop_and_resize" => {
            if v.len() != 2 * k && v.len() != 2 * r {
                return Err(Error::InvalidModel(format!(
                    "Resize roi {v:?} for {k} axes"
                )));
            }
            let full = v.len() == 2 * r && k != r;
            (0..k)
                .map(|i| {
                    if full {
                        (v[axes[i]], v[axes[i] + r])
                    } else {
                        (v[i], v[k + i])
                    }
                })
                .collect()
        }
        _ if kernel.transform == "tf_crop_and_resize" => {
            return Err(Error::InvalidModel(
                "Resize with tf_crop_and_resize needs a roi".into(),
            ));
        }
        _ => vec![(0.0, 1.0); k],
    };
    let extrapolation = n.float("extrapolation_value", 0.0) as f64;
    let mut y = x;
    for i in 0..k {
        let ax = Axis {
            input: input[i],
            output: output[i],
            scale: scale[i],
            roi: roi[i],
        };
        let identity = (ax.scale - 1.0).abs() <= 1e-9
            && ax.output == ax.input
            && (ax.roi.0.abs() <= 1e-8 && (ax.roi.1 - 1.0).abs() <= 1e-8);
        if identity {
            continue;
        }
        if ax.input == 0 {
            return Err(Error::Unsupported("Resize of an empty axis".into()));
        }
        let w = kernel.weights(&ax)?;
        y = apply_axis(imp, y, axes[i], &ax, &w)?;
        if w.extrapolated.iter().any(|&e| e) {
            let mut mshape = vec![1; r];
            mshape[axes[i]] = ax.output;
            let mask = imp.constant(NDArray::from_vec(mshape, w.extrapolated.clone())?);
            let e = imp.scalar_like(extrapolation, y)?;
            let full = imp.shape(y)?;
            let sel = imp.select(mask, e, y)?;
            y = imp.broadcast_to(sel, &full)?;
        }
    }
    Ok(vec![y])
}

/// `x` mapped along axis `a` through `w`: a `take` when every output reads one input
/// element with weight 1, else a `nn.dense` over the axis moved last.
fn apply_axis(imp: &mut Importer, x: ExprId, a: usize, ax: &Axis, w: &Weights) -> Result<ExprId> {
    let picks: Option<Vec<i64>> = w
        .taps
        .iter()
        .map(|t| match t.as_slice() {
            [(i, w)] if *w == 1.0 => Some(*i as i64),
            _ => None,
        })
        .collect();
    if let Some(idx) = picks {
        let len = idx.len();
        let i = imp.constant(NDArray::from_vec([len], idx)?);
        return imp.call(
            op::Take {
                axis: Some(a as i64),
                mode: op::TakeMode::Clip,
            },
            &[x, i],
        );
    }
    let dtype = imp.dtype(x)?;
    if !dtype.is_float() {
        return Err(Error::Unsupported(format!(
            "Resize with a linear or cubic mode on {dtype} data"
        )));
    }
    let mut m = vec![0.0; ax.output * ax.input];
    for (o, row) in w.taps.iter().enumerate() {
        for &(i, v) in row {
            m[o * ax.input + i] += v;
        }
    }
    let wt = imp.constant(NDArray::from_f64([ax.output, ax.input], dtype, m)?);
    let shape = imp.shape(x)?;
    let r = shape.len();
    // Move axis `a` last, flatten the rest, contract with W, and undo both.
    let mut perm: Vec<i64> = (0..r as i64).filter(|&d| d != a as i64).collect();
    perm.push(a as i64);
    let moved = if a + 1 == r {
        x
    } else {
        imp.transpose(x, perm.clone())?
    };
    let rest: usize = shape
        .iter()
        .enumerate()
        .filter(|&(d, _)| d != a)
        .map(|(_, &s)| s)
        .product();
    let flat = imp.reshape(moved, &[rest, ax.input])?;
    let y = imp.call(op::Dense { units: None }, &[flat, wt])?;
    let mut moved_shape: Vec<usize> = perm.iter().map(|&d| shape[d as usize]).collect();
    moved_shape[r - 1] = ax.output;
    let y = imp.reshape(y, &moved_shape)?;
    if a + 1 == r {
        return Ok(y);
    }
    let mut inv = vec![0i64; r];
    for (i, &d) in perm.iter().enumerate() {
        inv[d as usize] = i as i64;
    }
    imp.transpose(y, inv)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kernel(mode: Mode, transform: &str) -> Kernel {
        Kernel {
            mode,
            transform: transform.into(),
            antialias: false,
            exclude_outside: false,
        }
    }

    fn axis(input: usize, output: usize) -> Axis {
        Axis {
            input,
            output,
            scale: output as f64 / input as f64,
            roi: (0.0, 1.0),
        }
    }

    #[test]
    fn nearest_doubling_repeats() {
        let k = kernel(Mode::Nearest(NearestMode::RoundPreferFloor), "asymmetric");
        let w = k.weights(&axis(2, 4)).unwrap();
        let picks: Vec<usize> = w.taps.iter().map(|t| t[0].0).collect();
        assert_eq!(picks, vec![0, 0, 1, 1]);
        assert!(w.taps.iter().all(|t| t.len() == 1 && t[0].1 == 1.0));
    }

    #[test]
    fn linear_half_pixel_upsample_by_two() {
        // half_pixel: x = (y + 0.5) / 2 - 0.5 = -0.25, 0.25, 0.75, 1.25 over [a, b].
        let k = kernel(Mode::Linear, "half_pixel");
        let w = k.weights(&axis(2, 4)).unwrap();
        assert_eq!(w.taps[0], vec![(0, 1.0)]); // clamped at the edge
        assert_eq!(w.taps[1], vec![(0, 0.75), (1, 0.25)]);
        assert_eq!(w.taps[2], vec![(0, 0.25), (1, 0.75)]);
        assert_eq!(w.taps[3], vec![(1, 1.0)]);
    }

    #[test]
    fn align_corners_hits_both_ends() {
        let k = kernel(Mode::Linear, "align_corners");
        let w = k.weights(&axis(3, 5)).unwrap();
        assert_eq!(w.taps[0], vec![(0, 1.0)]);
        assert_eq!(w.taps[1], vec![(0, 0.5), (1, 0.5)]);
        assert_eq!(w.taps[4], vec![(2, 1.0)]);
    }

    #[test]
    fn cubic_weights_sum_to_one_and_match_keys_kernel() {
        let k = kernel(Mode::Cubic(-0.75), "half_pixel");
        let c = k.coeffs(0.5, 2.0);
        // Keys' kernel at distances 1.5, 0.5, 0.5, 1.5 with a = -0.75.
        assert_eq!(c, vec![-0.09375, 0.59375, 0.59375, -0.09375]);
        for ax in [axis(4, 8), axis(8, 3)] {
            for row in k.weights(&ax).unwrap().taps {
                let s: f64 = row.iter().map(|t| t.1).sum();
                assert!((s - 1.0).abs() < 1e-12, "{row:?}");
            }
        }
    }

    #[test]
    fn crop_and_resize_flags_outside_positions() {
        let k = kernel(Mode::Linear, "tf_crop_and_resize");
        let ax = Axis {
            input: 4,
            output: 3,
            scale: 0.75,
            roi: (0.4, 1.2),
        };
        let w = k.weights(&ax).unwrap();
        // x = y * 0.8 * 3 / 2 + 0.4 * 3 = 1.2, 2.4 and 3.6, past the last index 3.
        assert_eq!(w.extrapolated, vec![false, false, true]);
    }

    #[test]
    fn unknown_transform_is_unsupported() {
        let k = kernel(Mode::Linear, "sideways");
        let e = k.weights(&axis(2, 3)).unwrap_err();
        assert!(e.to_string().contains("sideways"), "{e}");
    }
}
