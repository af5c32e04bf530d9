//! Naive lowering (no schedule) of tensor expressions: elementwise chains, broadcasting,
//! reductions (sum/max/min), padded convolution with `select`, casts and intrinsics,
//! multiple outputs — each lowered kernel verified and run in the loop-IR interpreter
//! against values computed directly in Rust; and the type errors of `compute`.

use kiln_ir::{DType, NDArray};
use kiln_te::te::{self, Expr, Graph};
use kiln_te::tir::{run_with_inputs, verify};

fn f32s(a: &NDArray) -> Vec<f32> {
    a.to_vec::<f32>().unwrap()
}

#[test]
fn matmul_naive() {
    let (m, n, k) = (3, 4, 5);
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
    let f = te::lower(&g, &[c], "matmul").unwrap();
    verify(&f).unwrap();
    let an = NDArray::random([m, k], DType::F32, 1);
    let bn = NDArray::random([k, n], DType::F32, 2);
    let out = run_with_inputs(&f, &[an.clone(), bn.clone()]).unwrap();
    let (av, bv) = (f32s(&an), f32s(&bn));
    let mut want = vec![0f32; m * n];
    for i in 0..m {
        for j in 0..n {
            let mut acc = 0f32;
            for kk in 0..k {
                acc += av[i * k + kk] * bv[kk * n + j];
            }
            want[i * n + j] = acc;
        }
    }
    assert_eq!(f32s(&out[0]), want, "{f}");
}

#[test]
fn elementwise_chain_with_intermediate_and_broadcast() {
    let mut g = Graph::new();
    let x = g.placeholder(&[2, 3], DType::F32, "x").unwrap();
    let bias = g.placeholder(&[3], DType::F32, "bias").unwrap();
    let y = g
        .compute(&[2, 3], "y", |i| x.at(i) + bias.at(&[i[1].clone()]))
        .unwrap();
    let z = g
        .compute(&[2, 3], "z", |i| te::maximum(y.at(i), 0.0f32) * 2)
        .unwrap();
    let f = te::lower(&g, &[z], "bias_relu").unwrap();
    verify(&f).unwrap();
    let text = f.to_string();
    assert!(text.contains("allocate"), "{text}");
    let xn = NDArray::random([2, 3], DType::F32, 3);
    let bn = NDArray::random([3], DType::F32, 4);
    let out = run_with_inputs(&f, &[xn.clone(), bn.clone()]).unwrap();
    let (xv, bv) = (f32s(&xn), f32s(&bn));
    let want: Vec<f32> = (0..6).map(|e| (xv[e] + bv[e % 3]).max(0.0) * 2.0).collect();
    assert_eq!(f32s(&out[0]), want);
}

#[test]
fn max_and_min_reductions_over_ints_and_floats() {
    let mut g = Graph::new();
    let x = g.placeholder(&[3, 4], DType::I32, "x").unwrap();
    let r = g.reduce_axis(4, "r").unwrap();
    let mx = g
        .compute(&[3], "mx", |i| {
            te::max(x.at(&[i[0].clone(), r.into()]), &[r])
        })
        .unwrap();
    let r2 = g.reduce_axis(4, "r2").unwrap();
    let mn = g
        .compute(&[3], "mn", |i| {
            te::min(
                te::cast(DType::F32, x.at(&[i[0].clone(), r2.into()])),
                &[r2],
            )
        })
        .unwrap();
    let f = te::lower(&g, &[mx, mn], "minmax").unwrap();
    verify(&f).unwrap();
    let v: Vec<i32> = vec![-5, -9, -1, -7, 3, 8, 2, 8, -100, 0, 100, 7];
    let xn = NDArray::from_vec([3, 4], v.clone()).unwrap();
    let out = run_with_inputs(&f, &[xn]).unwrap();
    assert_eq!(out[0].to_vec::<i32>().unwrap(), vec![-1, 8, 100]);
    assert_eq!(f32s(&out[1]), vec![-9.0, 2.0, -100.0]);
}

/// data 1x2x5x5 (NCHW), weight 3x2x3x3, padding 1, stride 1.
pub fn conv2d_graph() -> (Graph, Vec<kiln_te::te::Tensor>) {
    let mut g = Graph::new();
    let (c, h, w, o) = (2usize, 5usize, 5usize, 3usize);
    let x = g.placeholder(&[1, c, h, w], DType::F32, "data").unwrap();
    let wt = g.placeholder(&[o, c, 3, 3], DType::F32, "weight").unwrap();
    let rc = g.reduce_axis(c, "rc").unwrap();
    let ry = g.reduce_axis(3, "ry").unwrap();
    let rx = g.reduce_axis(3, "rx").unwrap();
    let out = g
        .compute(&[1, o, h, w], "conv", |i| {
            let hh = &i[2] + Expr::from(ry) - 1;
            let ww = &i[3] + Expr::from(rx) - 1;
            let inside = hh
                .clone()
                .ge(0)
                .and(hh.clone().lt(h as i32))
                .and(ww.clone().ge(0))
                .and(ww.clone().lt(w as i32));
            let v = te::select(inside, x.at(&[i[0].clone(), rc.into(), hh, ww]), 0.0f32);
            te::sum(
                v * wt.at(&[i[1].clone(), rc.into(), ry.into(), rx.into()]),
                &[rc, ry, rx],
            )
        })
        .unwrap();
    (g, vec![out])
}

#[test]
fn padded_conv2d_with_select() {
    let (g, outs) = conv2d_graph();
    let f = te::lower(&g, &outs, "conv").unwrap();
    verify(&f).unwrap();
    let xn = NDArray::random([1, 2, 5, 5], DType::F32, 5);
    let wn = NDArray::random([3, 2, 3, 3], DType::F32, 6);
    let out = run_with_inputs(&f, &[xn.clone(), wn.clone()]).unwrap();
    let (xv, wv) = (f32s(&xn), f32s(&wn));
    let mut want = vec![0f32; 3 * 25];
    for o in 0..3 {
        for y in 0..5i32 {
            for x in 0..5i32 {
                let mut acc = 0f32;
                for c in 0..2 {
                    for ky in 0..3i32 {
                        for kx in 0..3i32 {
                            let (yy, xx) = (y + ky - 1, x + kx - 1);
                            let v = if (0..5).contains(&yy) && (0..5).contains(&xx) {
                                xv[c * 25 + (yy * 5 + xx) as usize]
                            } else {
                                0.0
                            };
                            acc += v * wv[((o * 2 + c) * 3 + ky as usize) * 3 + kx as usize];
                        }
                    }
                }
                want[o * 25 + (y * 5 + x) as usize] = acc;
            }
        }
    }
    assert_eq!(f32s(&out[0]), want, "{f}");
}

#[test]
fn intrinsics_and_casts() {
    let mut g = Graph::new();
    let x = g.placeholder(&[4], DType::F32, "x").unwrap();
    let y = g
        .compute(&[4], "y", |i| {
            let v = x.at(i);
            te::exp(v.clone()) + te::sqrt(te::abs(v.clone())) + te::sigmoid(v.clone())
                - te::tanh(v.clone())
                + te::cast(DType::F32, te::cast(DType::I32, v.clone() * 10))
                + te::fma(v.clone(), 2, 1)
                + te::pow(te::abs(v), 2.0f32)
        })
        .unwrap();
    let f = te::lower(&g, &[y], "intr").unwrap();
    verify(&f).unwrap();
    let xn = NDArray::from_vec([4], vec![0.5f32, -1.25, 2.0, 0.0]).unwrap();
    let out = f32s(&run_with_inputs(&f, &[xn]).unwrap()[0]);
    for (o, v) in out.iter().zip([0.5f32, -1.25, 2.0, 0.0]) {
        let want = v.exp() + v.abs().sqrt() + 1.0 / (1.0 + (-v).exp()) - v.tanh()
            + ((v * 10.0) as i32) as f32
            + v.mul_add(2.0, 1.0)
            + v.abs().powf(2.0);
        assert!((o - want).abs() < 1e-5, "{o} vs {want}");
    }
}

#[test]
fn type_errors_are_reported() {
    let mut g = Graph::new();
    let x = g.placeholder(&[4], DType::F32, "x").unwrap();
    let n = g.placeholder(&[4], DType::I32, "n").unwrap();
    let e = g.compute(&[4], "bad", |i| x.at(i) + n.at(i)).unwrap_err();
    assert!(e.to_string().contains("different dtypes"), "{e}");
    let e = g
        .compute(&[4], "bad", |i| x.at(&[i[0].clone(), i[0].clone()]))
        .unwrap_err();
    assert!(e.to_string().contains("rank 1"), "{e}");
    let e = g.compute(&[4], "bad", |i| x.at(&[x.at(i)])).unwrap_err();
    assert!(e.to_string().contains("indices are int32"), "{e}");
    let r = g.reduce_axis(4, "r").unwrap();
    let e = g.compute(&[4], "bad", |_| x.at(&[r.into()])).unwrap_err();
    assert!(e.to_string().contains("not reduced over"), "{e}");
    let e = g
        .compute(&[4], "bad", |i| te::sum(x.at(&[r.into()]), &[r]) + x.at(i))
        .unwrap_err();
    assert!(e.to_string().contains("whole body"), "{e}");
    let e = g.compute(&[4], "bad", |i| te::exp(n.at(i))).unwrap_err();
    assert!(e.to_string().contains("does not take int32"), "{e}");
    let e = g
        .compute(&[4], "bad", |i| te::select(x.at(i), 1, 2))
        .unwrap_err();
    assert!(e.to_string().contains("condition"), "{e}");
    let e = g.placeholder(&[0, 3], DType::F32, "z").unwrap_err();
    assert!(e.to_string().contains("extent"), "{e}");
    // A good compute after the failures still works and owns `r`.
    let s = g
        .compute(&[1], "s", |_| te::sum(x.at(&[r.into()]), &[r]))
        .unwrap();
    let e = g
        .compute(&[1], "s2", |_| te::sum(x.at(&[r.into()]), &[r]))
        .unwrap_err();
    assert!(e.to_string().contains("already belongs"), "{e}");
    let f = te::lower(&g, &[s], "s").unwrap();
    verify(&f).unwrap();
}
