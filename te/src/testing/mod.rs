//! Shared by property tests of schedules (te's own `tests/te_props.rs` and the
//! conformance suite's schedule fuzzing in `kiln-testsuite`): the random schedule
//! primitive [`Prim`] with [`apply`], which tries one on a stage and checks that a
//! refusal leaves the stage unchanged, and sample computes — elementwise with
//! broadcasting ([`bias_relu`]), a reduction ([`matmul`]) and a padded convolution
//! ([`conv2d`]). Plain data and functions (no proptest dependency): the strategies live
//! with the tests. [`index_kernels`]: random index-expression kernels for the bounds
//! verifier's soundness tests. Compiled only with the `testing` feature (te's tests and
//! `kiln-testsuite` enable it).

pub mod index_kernels;

use kiln_ir::DType;

use crate::te::{self, Expr, Graph, Schedule, Tensor};

/// One schedule primitive with its arguments as free numbers (axes are taken modulo the
/// stage's leaf axes), so any value is legal to try.
#[derive(Clone, Debug)]
pub enum Prim {
    /// Split leaf axis `.0` by the factor `.1`.
    Split(usize, usize),
    /// Swap leaf axes `.0` and `.1` (reorder).
    Swap(usize, usize),
    /// Fuse leaf axis `.0` with the next one.
    Fuse(usize),
    /// Vectorize the innermost leaf axis.
    Vectorize,
    /// Unroll leaf axis `.0`.
    Unroll(usize),
    /// Parallelize leaf axis `.0`.
    Parallel(usize),
}

impl Prim {
    /// Decodes a drawn `(kind, a, b)` with `kind` in `0..10`: splits 3 in 10, swaps and
    /// fuses 2 in 10 each, vectorize, unroll and parallel 1 in 10 each; `b` is a split
    /// factor (1 or more).
    pub fn from_draw(kind: u8, a: usize, b: usize) -> Prim {
        match kind % 10 {
            0..=2 => Prim::Split(a, b.max(1)),
            3 | 4 => Prim::Swap(a, b),
            5 | 6 => Prim::Fuse(a),
            7 => Prim::Vectorize,
            8 => Prim::Unroll(a),
            _ => Prim::Parallel(a),
        }
    }
}

/// Applies `p` to stage `t`. Returns whether the schedule accepted it; an error when a
/// refused primitive changed the stage (or `t` is not a stage of `s`).
pub fn apply(s: &mut Schedule, t: Tensor, p: &Prim) -> Result<bool, String> {
    let leaves = s.leaf_axes(t).map_err(|e| e.to_string())?;
    let n = leaves.len();
    if n == 0 {
        return Ok(false);
    }
    let before = s.stage(t).map_err(|e| e.to_string())?.clone();
    let r = match *p {
        Prim::Split(a, f) => s.split(t, leaves[a % n], f).map(|_| ()),
        Prim::Swap(a, b) => s.reorder(t, &[leaves[b % n], leaves[a % n]]).map(|_| ()),
        Prim::Fuse(a) if n >= 2 => {
            let a = a % (n - 1);
            s.fuse(t, leaves[a], leaves[a + 1]).map(|_| ())
        }
        Prim::Fuse(_) => return Ok(false),
        Prim::Vectorize => s.vectorize(t, leaves[n - 1]),
        Prim::Unroll(a) => s.unroll(t, leaves[a % n]),
        Prim::Parallel(a) => s.parallel(t, leaves[a % n]),
    };
    if r.is_err() && *s.stage(t).map_err(|e| e.to_string())? != before {
        return Err(format!("refused {p:?} changed the stage"));
    }
    Ok(r.is_ok())
}

/// `C[i, j] = sum_k A[i, k] * B[k, j]`; returns (graph, A, B, C).
pub fn matmul(m: usize, n: usize, k: usize) -> (Graph, Tensor, Tensor, Tensor) {
    let mut g = Graph::new();
    let a = g.placeholder(&[m, k], DType::F32, "A").unwrap();
    let b = g.placeholder(&[k, n], DType::F32, "B").unwrap();
    let r = g.reduce_axis(k, "k").unwrap();
    let c = g
        .compute(&[m, n], "C", |i| {
            te::sum(
                a.at(&[i[0].clone(), r.into()]) * b.at(&[r.into(), i[1].clone()]),
                &[r],
            )
        })
        .unwrap();
    (g, a, b, c)
}

/// `y = relu(x + bias[j]) * 2` with an intermediate stage; returns (graph, add, y).
pub fn bias_relu(m: usize, n: usize) -> (Graph, Tensor, Tensor) {
    let mut g = Graph::new();
    let x = g.placeholder(&[m, n], DType::F32, "x").unwrap();
    let bias = g.placeholder(&[n], DType::F32, "bias").unwrap();
    let add = g
        .compute(&[m, n], "add", |i| x.at(i) + bias.at(&[i[1].clone()]))
        .unwrap();
    let y = g
        .compute(&[m, n], "y", |i| te::maximum(add.at(i), 0.0f32) * 2)
        .unwrap();
    (g, add, y)
}

/// NCHW conv2d with padding `pad`, 3x3 kernel, stride 1, reading a padded copy of the
/// data made by a separate `pad` stage; returns (graph, pad, conv).
pub fn conv2d(c: usize, h: usize, w: usize, o: usize, pad: usize) -> (Graph, Tensor, Tensor) {
    let mut g = Graph::new();
    let x = g.placeholder(&[1, c, h, w], DType::F32, "data").unwrap();
    let wt = g.placeholder(&[o, c, 3, 3], DType::F32, "weight").unwrap();
    let (ph, pw) = (h + 2 * pad, w + 2 * pad);
    let p = pad as i32;
    let padded = g
        .compute(&[1, c, ph, pw], "pad", |i| {
            let hh = &i[2] - p;
            let ww = &i[3] - p;
            let inside = hh
                .clone()
                .ge(0)
                .and(hh.clone().lt(h as i32))
                .and(ww.clone().ge(0))
                .and(ww.clone().lt(w as i32));
            te::select(inside, x.at(&[i[0].clone(), i[1].clone(), hh, ww]), 0.0f32)
        })
        .unwrap();
    let (oh, ow) = (ph - 2, pw - 2);
    let rc = g.reduce_axis(c, "rc").unwrap();
    let ry = g.reduce_axis(3, "ry").unwrap();
    let rx = g.reduce_axis(3, "rx").unwrap();
    let conv = g
        .compute(&[1, o, oh, ow], "conv", |i| {
            te::sum(
                padded.at(&[
                    i[0].clone(),
                    rc.into(),
                    &i[2] + Expr::from(ry),
                    &i[3] + Expr::from(rx),
                ]) * wt.at(&[i[1].clone(), rc.into(), ry.into(), rx.into()]),
                &[rc, ry, rx],
            )
        })
        .unwrap();
    (g, padded, conv)
}
