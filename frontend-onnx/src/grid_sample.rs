//! ONNX `GridSample` (opset 16 and 20 names: `bilinear`/`linear`, `bicubic`/`cubic`,
//! `nearest`) over any number of spatial dimensions, built from elementwise ops and one
//! gather per tap, following ONNX's reference step by step: each grid coordinate is
//! denormalized (`align_corners` or not), rounded half to even for `nearest`, brought
//! inside the border (`border`: clamped, `reflection`: reflected back and forth) when it
//! falls outside it; then every tap of the interpolation (2 per dimension for linear, 4
//! for cubic with Keys' α = -0.75, 1 for nearest) reads its pixel under the padding mode
//! (`zeros`: 0 outside; `border`: the clamped index; `reflection`: the reflected index)
//! and the taps are summed with their weights. Coordinates are run-time data.

use kiln_ir::op::{self, BinaryKind as B, UnaryKind as U};
use kiln_ir::{DType, ExprId, NDArray};

use crate::convert::{Importer, Node};
use crate::error::{Error, Result};

/// The ONNX op types this module converts.
pub const SUPPORTED: &[&str] = &["GridSample"];

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Nearest,
    Linear,
    Cubic,
}

#[derive(Clone, Copy, PartialEq)]
enum Padding {
    Zeros,
    Border,
    Reflection,
}

/// Float helpers over the importer, all in float32.
struct Ops<'a> {
    imp: &'a mut Importer,
}

impl Ops<'_> {
    fn c(&mut self, v: f64) -> ExprId {
        self.imp.scalar(v, DType::F32)
    }
    fn bin(&mut self, k: B, a: ExprId, b: ExprId) -> Result<ExprId> {
        self.imp.binary(k, a, b)
    }
    fn add_c(&mut self, a: ExprId, v: f64) -> Result<ExprId> {
        let c = self.c(v);
        self.bin(B::Add, a, c)
    }
    fn mul_c(&mut self, a: ExprId, v: f64) -> Result<ExprId> {
        let c = self.c(v);
        self.bin(B::Multiply, a, c)
    }
    fn clamp(&mut self, a: ExprId, lo: f64, hi: f64) -> Result<ExprId> {
        self.imp.call(
            op::Clip {
                a_min: kiln_ir::attrs::F64(lo),
                a_max: kiln_ir::attrs::F64(hi),
            },
            &[a],
        )
    }
    /// ONNX's `_gs_reflect` (`x` reflected by the near border until inside
    /// `[lo, hi]`) in closed form, a triangle wave: `lo + R - |((x - lo) mod 2R) - R|`
    /// with `R = hi - lo` — the identity inside, reading `x` once, so that chains of
    /// reflections inlined into one kernel stay small.
    fn reflect(&mut self, x: ExprId, lo: f64, hi: f64) -> Result<ExprId> {
        let range = hi - lo;
        if range <= 0.0 {
            let z = self.mul_c(x, 0.0)?;
            return self.add_c(z, lo);
        }
        let y = self.add_c(x, -lo)?;
        let period = self.c(2.0 * range);
        let m = self.bin(B::FloorMod, y, period)?;
        let d = self.add_c(m, -range)?;
        let d = self.imp.unary(U::Abs, d)?;
        let r = self.mul_c(d, -1.0)?;
        self.add_c(r, lo + range)
    }
}

/// Keys' cubic weights of the 4 taps at offsets -1, 0, 1, 2 for fraction `t`.
fn cubic_weights(o: &mut Ops, t: ExprId) -> Result<[ExprId; 4]> {
    let a = -0.75;
    let one = o.c(1.0);
    let two = o.c(2.0);
    let t1 = o.bin(B::Add, t, one)?; // t + 1
    let u = o.bin(B::Subtract, one, t)?; // 1 - t
    let u1 = o.bin(B::Subtract, two, t)?; // 2 - t
    // outer(x) = ((a x - 5a) x + 8a) x - 4a, for x in (1, 2)
    let outer = |o: &mut Ops, x: ExprId| -> Result<ExprId> {
        let v = o.mul_c(x, a)?;
        let v = o.add_c(v, -5.0 * a)?;
        let v = o.bin(B::Multiply, v, x)?;
        let v = o.add_c(v, 8.0 * a)?;
        let v = o.bin(B::Multiply, v, x)?;
        o.add_c(v, -4.0 * a)
    };
    // inner(x) = ((a + 2) x - (a + 3)) x x + 1, for x in [0, 1]
    let inner = |o: &mut Ops, x: ExprId| -> Result<ExprId> {
        let v = o.mul_c(x, a + 2.0)?;
        let v = o.add_c(v, -(a + 3.0))?;
        let v = o.bin(B::Multiply, v, x)?;
        let v = o.bin(B::Multiply, v, x)?;
        o.add_c(v, 1.0)
    };
    Ok([outer(o, t1)?, inner(o, t)?, inner(o, u)?, outer(o, u1)?])
}

/// Converts a `GridSample` node.
pub(crate) fn convert(imp: &mut Importer, n: &Node) -> Result<Vec<ExprId>> {
    let x = imp.input(n, 0)?;
    let grid = imp.input(n, 1)?;
    let xs = imp.shape(x)?;
    let gs = imp.shape(grid)?;
    let r = xs.len().saturating_sub(2);
    if r == 0 || gs.len() != r + 2 || gs[0] != xs[0] || gs[r + 1] != r {
        return Err(Error::InvalidModel(format!(
            "GridSample of X {xs:?} with grid {gs:?}"
        )));
    }
    if imp.dtype(x)? != DType::F32 || imp.dtype(grid)? != DType::F32 {
        return Err(Error::Unsupported(
            "GridSample on other dtypes than float32".into(),
        ));
    }
    let mode = match n
        .string("mode", if n.opset >= 20 { "linear" } else { "bilinear" })
        .as_str()
    {
        "nearest" => Mode::Nearest,
        "linear" | "bilinear" => Mode::Linear,
        "cubic" | "bicubic" => Mode::Cubic,
        other => return Err(Error::InvalidModel(format!("GridSample mode `{other}`"))),
    };
    let padding = match n.string("padding_mode", "zeros").as_str() {
        "zeros" => Padding::Zeros,
        "border" => Padding::Border,
        "reflection" => Padding::Reflection,
        other => return Err(Error::InvalidModel(format!("GridSample padding `{other}`"))),
    };
    let align = n.int("align_corners", 0) != 0;
    let (batch, channels) = (xs[0], xs[1]);
    let dims: Vec<usize> = xs[2..].to_vec();
    let spatial: usize = dims.iter().product();
    let outs: Vec<usize> = gs[1..=r].to_vec();
    let points: usize = outs.iter().product();
    let taps_per_dim = match mode {
        Mode::Nearest => 1,
        Mode::Linear => 2,
        Mode::Cubic => 4,
    };
    let taps = taps_per_dim_pow(taps_per_dim, r)
        .filter(|&t| t <= 4096)
        .ok_or_else(|| Error::Unsupported(format!("GridSample over {r} spatial dimensions")))?;
    let mut o = Ops { imp };
    // Grid (N, points, r): component k is the coordinate of spatial dim r - 1 - k.
    let g = o.imp.reshape(grid, &[batch, points, r])?;
    // For each spatial dimension: the tap indices (float) and weights, each (N, points).
    let mut per_dim: Vec<Vec<(ExprId, ExprId)>> = vec![];
    for (i, &d) in dims.iter().enumerate() {
        let k = r - 1 - i;
        let comp = o.imp.call(
            op::StridedSlice {
                begin: vec![k as i64],
                end: vec![k as i64 + 1],
                strides: None,
                axes: Some(vec![2]),
            },
            &[g],
        )?;
        let comp = o.imp.reshape(comp, &[batch, points])?;
        // Denormalize.
        let df = d as f64;
        let mut v = if align {
            let v = o.add_c(comp, 1.0)?;
            o.mul_c(v, (df - 1.0) / 2.0)?
        } else {
            let v = o.add_c(comp, 1.0)?;
            let v = o.mul_c(v, df)?;
            let v = o.add_c(v, -1.0)?;
            o.mul_c(v, 0.5)?
        };
        if mode == Mode::Nearest {
            v = o.imp.unary(U::Round, v)?;
        }
        let (lo, hi) = if align {
            (0.0, df - 1.0)
        } else {
            (-0.5, df - 0.5)
        };
        v = match padding {
            Padding::Zeros => v,
            Padding::Border => {
                let lo_c = o.c(lo);
                let hi_c = o.c(hi);
                let below = o.bin(B::Less, v, lo_c)?;
                let above = o.bin(B::Greater, v, hi_c)?;
                let outside = o.imp.select(below, below, above)?;
                let clamped = o.clamp(v, 0.0, df - 1.0)?;
                o.imp.select(outside, clamped, v)?
            }
            Padding::Reflection => o.reflect(v, lo, hi)?,
        };
        let taps: Vec<(ExprId, ExprId)> = match mode {
            Mode::Nearest => vec![(v, o.c(1.0))],
            Mode::Linear | Mode::Cubic => {
                let base = o.imp.unary(U::Floor, v)?;
                let t = o.bin(B::Subtract, v, base)?;
                let weights: Vec<ExprId> = if mode == Mode::Linear {
                    let one = o.c(1.0);
                    vec![o.bin(B::Subtract, one, t)?, t]
                } else {
                    cubic_weights(&mut o, t)?.to_vec()
                };
                let first = if mode == Mode::Linear { 0.0 } else { -1.0 };
                let mut out = vec![];
                for (j, w) in weights.into_iter().enumerate() {
                    out.push((o.add_c(base, first + j as f64)?, w));
                }
                out
            }
        };
        // Each tap's index under the padding mode, and (zeros) whether it is inside.
        let mut fetched = vec![];
        for (idx, w) in taps {
            let (idx, w) = match padding {
                Padding::Zeros => {
                    let zero = o.c(0.0);
                    let last = o.c(df - 1.0);
                    let ge = o.bin(B::GreaterEqual, idx, zero)?;
                    let le = o.bin(B::LessEqual, idx, last)?;
                    let inside = o.imp.select(ge, le, ge)?;
                    let zw = o.c(0.0);
                    let w = o.imp.select(inside, w, zw)?;
                    (o.clamp(idx, 0.0, df - 1.0)?, w)
                }
                Padding::Border => (o.clamp(idx, 0.0, df - 1.0)?, w),
                Padding::Reflection => {
                    // int() of the reflected index: toward zero, and the reflection is
                    // at least lo >= -0.5, so floor(max(r, 0)); then within [0, d - 1].
                    let refl = o.reflect(idx, lo, hi)?;
                    let refl = o.clamp(refl, 0.0, df - 1.0)?;
                    (o.imp.unary(U::Floor, refl)?, w)
                }
            };
            fetched.push((idx, w));
        }
        per_dim.push(fetched);
    }
    // Data as rows of channels: (N * spatial, C).
    let xt = {
        let v = o.imp.reshape(x, &[batch, channels, spatial])?;
        let v = o.imp.transpose(v, vec![0, 2, 1])?;
        o.imp.reshape(v, &[batch * spatial, channels])?
    };
    let starts: Vec<i64> = (0..batch as i64).map(|b| b * spatial as i64).collect();
    let starts = o.imp.constant(NDArray::from_vec([batch, 1], starts)?);
    let mut sum: Option<ExprId> = None;
    for t in 0..taps {
        // Tap t picks one tap per dimension (mixed radix over the dimensions).
        let mut rest = t;
        let mut flat: Option<ExprId> = None;
        let mut weight: Option<ExprId> = None;
        for i in (0..r).rev() {
            let (idx, w) = per_dim[i][rest % taps_per_dim];
            rest /= taps_per_dim;
            let stride: usize = dims[i + 1..].iter().product();
            let part = o.mul_c(idx, stride as f64)?;
            flat = Some(match flat {
                Some(f) => o.bin(B::Add, f, part)?,
                None => part,
            });
            weight = Some(match weight {
                Some(acc) => o.bin(B::Multiply, acc, w)?,
                None => w,
            });
        }
        let missing = || Error::InvalidModel("GridSample without spatial dimensions".into());
        let (flat, weight) = (flat.ok_or_else(missing)?, weight.ok_or_else(missing)?);
        let flat = o.imp.call(op::Cast { dtype: DType::I64 }, &[flat])?;
        let flat = o.bin(B::Add, flat, starts)?; // (N, points)
        let picked = o.imp.call(
            op::Take {
                axis: Some(0),
                mode: op::TakeMode::Clip,
            },
            &[xt, flat],
        )?; // (N, points, C)
        let w = o.imp.reshape(weight, &[batch, points, 1])?;
        let term = o.bin(B::Multiply, picked, w)?;
        sum = Some(match sum {
            Some(s) => o.bin(B::Add, s, term)?,
            None => term,
        });
    }
    let y = sum.ok_or_else(|| Error::InvalidModel("GridSample without taps".into()))?;
    let y = o.imp.transpose(y, vec![0, 2, 1])?;
    let mut shape = vec![batch, channels];
    shape.extend(outs);
    Ok(vec![o.imp.reshape(y, &shape)?])
}

fn taps_per_dim_pow(per: usize, r: usize) -> Option<usize> {
    per.checked_pow(u32::try_from(r).ok()?)
}
