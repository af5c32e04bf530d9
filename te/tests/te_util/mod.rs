//! Shared helpers of the `te_*` tests: sample computes (elementwise with broadcasting,
//! matmul, padded conv2d), random inputs, and a check that a schedule lowers to a
//! verified kernel (whose text form reads back) computing what the unscheduled lowering
//! computes.
#![allow(dead_code)]

use kiln_ir::{DType, NDArray};
use kiln_te::te::{self, Expr, Graph, Schedule, Tensor};
use kiln_te::tir::{PrimFunc, parse, run_with_inputs, verify};

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

/// Random inputs for every parameter of `f`.
pub fn inputs(f: &PrimFunc, seed: u64) -> Vec<NDArray> {
    f.inputs()
        .iter()
        .enumerate()
        .map(|(n, b)| {
            let b = f.buffer(*b).unwrap();
            NDArray::random(b.shape.clone(), b.dtype, seed + n as u64)
        })
        .collect()
}

/// Lowers `s`, verifies it, runs it and the unscheduled lowering of the same outputs on
/// the same random inputs, and compares: exactly, or within `rtol` relative error.
pub fn assert_same(g: &Graph, s: &Schedule, rtol: f64) -> PrimFunc {
    let naive = te::lower(g, s.outputs(), "naive").unwrap();
    verify(&naive).unwrap();
    let f = s.lower("scheduled").unwrap();
    if let Err(e) = verify(&f) {
        panic!("{e}\n{f}");
    }
    // The text form reads back to the same kernel.
    let text = f.to_string();
    let back = parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(back.to_string(), text);
    let ins = inputs(&naive, 7);
    let want = run_with_inputs(&naive, &ins).unwrap();
    let got = match run_with_inputs(&f, &ins) {
        Ok(x) => x,
        Err(e) => panic!("{e}\n{f}"),
    };
    for (w, o) in want.iter().zip(&got) {
        let (w, o) = (w.to_f64_vec(), o.to_f64_vec());
        for (n, (a, b)) in w.iter().zip(&o).enumerate() {
            let ok = if rtol == 0.0 {
                a == b
            } else {
                (a - b).abs() <= rtol * a.abs().max(1.0)
            };
            assert!(ok, "element {n}: naive {a}, scheduled {b}\n{f}");
        }
    }
    f
}

/// Proptest cases: `default`, or `KILN_CASES` from the environment for longer local runs.
pub fn cases(default: u32) -> u32 {
    std::env::var("KILN_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
