//! The micro-kernels against their declared semantics over ragged sizes (tails, sizes
//! below one block), at every ISA level this machine runs, in each stride form.

use proptest::prelude::*;

use kiln_ir::NDArray;
use kiln_te::te::tensorize::declaration;
use kiln_te::tir::{MicroKernel, interp};

use super::*;

/// Operand layouts: which form of the kernel a call takes.
#[derive(Copy, Clone, Debug)]
enum Layout {
    /// A `[m, k]`, B `[n, k]`, C `[m, n]` (dense: the dot form).
    Nt,
    /// A `[m, k]`, B `[k, n]`, C `[m, n]` (the axpy form).
    Nn,
    /// A `[k, m]`, B `[n, k]`, C `[n, m]` (the axpy form of `Cᵀ`: conv2d's).
    Tt,
    /// A `[k, m]`, B `[n, k]`, C `[m, n]` (the scalar form).
    Ts,
}

fn strides(l: Layout, m: usize, n: usize, k: usize) -> GemmCall {
    let (a, b, c) = match l {
        Layout::Nt => ([k, 1], [k, 1], [n, 1]),
        Layout::Nn => ([k, 1], [1, n], [n, 1]),
        Layout::Tt => ([1, m], [k, 1], [1, m]),
        Layout::Ts => ([1, m], [k, 1], [n, 1]),
    };
    GemmCall { m, n, k, a, b, c }
}

/// The declared semantics: the TE declaration of `gemm` (`kiln_te::te::tensorize::declaration`)
/// run in the loop-IR interpreter on the operands gathered into its `A [m, k]`,
/// `B [n, k]` layout; with the bound on the f32 error of any summation order, fused or
/// not, twice over (both sides round): `2 (k + 1) · ε · Σ|a·b|` (in f64).
fn reference(g: &GemmCall, a: &[f32], b: &[f32]) -> Vec<(usize, f64, f64)> {
    let at = |i: usize, r: usize| a[i * g.a[0] + r * g.a[1]];
    let bt = |j: usize, r: usize| b[j * g.b[0] + r * g.b[1]];
    let mut out = vec![];
    let c = if g.k == 0 {
        vec![0.0; g.m * g.n]
    } else {
        let kernel = MicroKernel::Gemm {
            m: g.m as i64,
            n: g.n as i64,
            k: g.k as i64,
        };
        let decl = declaration(kernel).unwrap();
        let av: Vec<f32> = (0..g.m * g.k).map(|x| at(x / g.k, x % g.k)).collect();
        let bv: Vec<f32> = (0..g.n * g.k).map(|x| bt(x / g.k, x % g.k)).collect();
        let ins = [
            NDArray::from_vec([g.m, g.k], av).unwrap(),
            NDArray::from_vec([g.n, g.k], bv).unwrap(),
        ];
        interp::run_with_inputs(&decl, &ins).unwrap()[0]
            .to_vec::<f32>()
            .unwrap()
    };
    for i in 0..g.m {
        for j in 0..g.n {
            let mag: f64 = (0..g.k)
                .map(|r| (at(i, r) as f64 * bt(j, r) as f64).abs())
                .sum();
            let tol = 2.0 * (g.k as f64 + 1.0) * f32::EPSILON as f64 * mag + 1e-30;
            out.push((i * g.c[0] + j * g.c[1], c[i * g.n + j] as f64, tol));
        }
    }
    out
}

fn check(isa: Isa, l: Layout, m: usize, n: usize, k: usize, seed: u64) -> Result<(), String> {
    let g = strides(l, m, n, k);
    let mut x = seed | 1;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        ((x >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    };
    // Exactly sized A and B, so a read past a region would leave the allocation; C with
    // a sentinel tail that must stay untouched.
    let a: Vec<f32> = (0..m * k).map(|_| next()).collect();
    let b: Vec<f32> = (0..n * k).map(|_| next()).collect();
    let pad = 17;
    let mut c = vec![f32::NAN; m * n + pad];
    unsafe { gemm(isa, &g, a.as_ptr(), b.as_ptr(), c.as_mut_ptr()) };
    for (at, want, tol) in reference(&g, &a, &b) {
        let got = c[at] as f64;
        if (got - want).abs() > tol {
            return Err(format!(
                "{isa} {l:?} {m}x{n}x{k}: C[{at}] = {got}, want {want} (±{tol})"
            ));
        }
    }
    if c[m * n..].iter().any(|v| !v.is_nan()) {
        return Err(format!("{isa} {l:?} {m}x{n}x{k}: wrote past C"));
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    #[test]
    fn gemm_matches_declaration_at_every_isa(
        m in 1usize..12, n in 1usize..40, k in 0usize..70, l in 0usize..4, seed in any::<u64>()
    ) {
        let l = [Layout::Nt, Layout::Nn, Layout::Tt, Layout::Ts][l];
        for isa in Isa::all_available() {
            check(isa, l, m, n, k, seed).map_err(TestCaseError::fail)?;
        }
    }
}

#[test]
fn block_sized_and_large_calls() {
    for isa in Isa::all_available() {
        for l in [Layout::Nt, Layout::Nn, Layout::Tt, Layout::Ts] {
            for (m, n, k) in [
                (4, 4, 16),
                (4, 32, 16),
                (1, 64, 784),
                (16, 64, 512),
                (5, 33, 17),
            ] {
                check(isa, l, m, n, k, 7).unwrap();
            }
        }
    }
}

#[test]
fn isa_levels_are_named_and_refused_when_missing() {
    assert_eq!(Isa::require(None).unwrap(), Isa::detected());
    assert_eq!(Isa::require(Some("sse")).unwrap(), Isa::Sse);
    let e = Isa::require(Some("neon")).unwrap_err();
    assert!(e.contains("not an ISA level"), "{e}");
    for isa in Isa::ALL {
        match Isa::require(Some(isa.name())) {
            Ok(i) => assert!(i.available() && i == isa),
            Err(e) => assert!(!isa.available() && e.contains("cannot run"), "{e}"),
        }
    }
}

/// A conv2d call's sizes, with W and C either dense (the fast forms) or with padded
/// strides (W gathered, C through the scratch tile); X always padded on its last axis
/// by one element, so its column stride is not the row's width.
#[derive(Clone, Debug)]
struct ConvCase {
    out: [usize; 3],
    red: [usize; 3],
    steps: [usize; 4],
    loose_w: bool,
    loose_c: bool,
}

impl ConvCase {
    fn call(&self) -> (Conv2dCall, [usize; 3], [usize; 3]) {
        let [o, h, w] = self.out;
        let [ci, kh, kw] = self.red;
        let [sh, sw, dh, dw] = self.steps;
        let xe = [
            ci,
            (h - 1) * sh + (kh - 1) * dh + 1,
            (w - 1) * sw + (kw - 1) * dw + 1,
        ];
        let xrow = xe[2] + 1;
        let ws = if self.loose_w {
            [ci * kh * (kw + 1), kh * (kw + 1), kw + 1, 1]
        } else {
            [ci * kh * kw, kh * kw, kw, 1]
        };
        let cs = if self.loose_c {
            [h * (w + 2), w + 2, 1]
        } else {
            [h * w, w, 1]
        };
        let call = Conv2dCall {
            out: self.out,
            red: self.red,
            steps: self.steps,
            ws,
            xs: [xe[1] * xrow, xrow, 1],
            cs,
        };
        (call, xe, [o * ws[0], ci * xe[1] * xrow, o * cs[0]])
    }
}

fn check_conv(isa: Isa, case: &ConvCase, seed: u64) -> Result<(), String> {
    let (g, xe, lens) = case.call();
    let mut s = seed | 1;
    let mut next = || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    };
    let w: Vec<f32> = (0..lens[0]).map(|_| next()).collect();
    let x: Vec<f32> = (0..lens[1]).map(|_| next()).collect();
    let mut c = vec![f32::NAN; lens[2] + 9];
    unsafe { conv2d(isa, &g, w.as_ptr(), x.as_ptr(), c.as_mut_ptr()) };
    // The declaration on the operands gathered dense.
    let [o, h, wd] = g.out;
    let [ci, kh, kw] = g.red;
    let wat = |p: usize, cc: usize, u: usize, v: usize| {
        w[p * g.ws[0] + cc * g.ws[1] + u * g.ws[2] + v * g.ws[3]]
    };
    let xat = |cc: usize, r: usize, q: usize| x[cc * g.xs[0] + r * g.xs[1] + q * g.xs[2]];
    let wd_: Vec<f32> = (0..o * ci * kh * kw)
        .map(|i| wat(i / (ci * kh * kw), i / (kh * kw) % ci, i / kw % kh, i % kw))
        .collect();
    let xd: Vec<f32> = (0..xe.iter().product::<usize>())
        .map(|i| xat(i / (xe[1] * xe[2]), i / xe[2] % xe[1], i % xe[2]))
        .collect();
    let kernel = MicroKernel::Conv2d {
        o: o as i64,
        h: h as i64,
        w: wd as i64,
        ci: ci as i64,
        kh: kh as i64,
        kw: kw as i64,
        sh: g.steps[0] as i64,
        sw: g.steps[1] as i64,
        dh: g.steps[2] as i64,
        dw: g.steps[3] as i64,
    };
    let decl = declaration(kernel).unwrap();
    let ins = [
        NDArray::from_vec([o, ci, kh, kw], wd_).unwrap(),
        NDArray::from_vec(xe, xd).unwrap(),
    ];
    let want = interp::run_with_inputs(&decl, &ins).unwrap()[0]
        .to_vec::<f32>()
        .unwrap();
    let [sh, sw, dh, dw] = g.steps;
    let mut written = vec![false; c.len()];
    for p in 0..o {
        for y in 0..h {
            for q in 0..wd {
                let mag: f64 = (0..ci * kh * kw)
                    .map(|r| {
                        let (cc, u, v) = (r / (kh * kw), r / kw % kh, r % kw);
                        (wat(p, cc, u, v) as f64 * xat(cc, y * sh + u * dh, q * sw + v * dw) as f64)
                            .abs()
                    })
                    .sum();
                let tol = 2.0 * (ci * kh * kw + 1) as f64 * f32::EPSILON as f64 * mag + 1e-30;
                let at = p * g.cs[0] + y * g.cs[1] + q * g.cs[2];
                written[at] = true;
                let (got, want) = (c[at] as f64, want[(p * h + y) * wd + q] as f64);
                if (got - want).abs() > tol {
                    return Err(format!(
                        "{isa} {case:?}: C[{p}, {y}, {q}] = {got}, want {want} (±{tol})"
                    ));
                }
            }
        }
    }
    if c.iter().zip(&written).any(|(v, w)| !w && !v.is_nan()) {
        return Err(format!("{isa} {case:?}: wrote outside C's region"));
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]
    #[test]
    fn conv2d_matches_declaration_at_every_isa(
        o in 1usize..20, h in 1usize..4, w in 1usize..40, ci in 1usize..6,
        kh in 1usize..4, kw in 1usize..4, steps in proptest::array::uniform4(1usize..3),
        loose_w in any::<bool>(), loose_c in any::<bool>(), seed in any::<u64>()
    ) {
        let case = ConvCase { out: [o, h, w], red: [ci, kh, kw], steps, loose_w, loose_c };
        for isa in Isa::all_available() {
            check_conv(isa, &case, seed).map_err(TestCaseError::fail)?;
        }
    }
}

/// ResNet-shaped tiles (a reduction longer than one panel chunk included).
#[test]
fn conv2d_resnet_shaped_calls() {
    for isa in Isa::all_available() {
        for (out, red, steps) in [
            ([64, 1, 56], [64, 3, 3], [1, 1, 1, 1]),
            ([64, 1, 56], [3, 7, 7], [2, 2, 1, 1]),
            ([64, 7, 7], [512, 3, 3], [1, 1, 1, 1]),
            ([16, 2, 28], [128, 3, 3], [2, 2, 1, 1]),
        ] {
            let case = ConvCase {
                out,
                red,
                steps,
                loose_w: false,
                loose_c: false,
            };
            check_conv(isa, &case, 11).unwrap();
        }
    }
}

/// The depthwise kernel against its declaration: W `[o, kh, kw]` and X dense or with
/// padded strides, C dense or with a column stride of 2 (written lane by lane).
fn check_depthwise(
    isa: Isa,
    out: [usize; 3],
    k: [usize; 2],
    steps: [usize; 4],
    loose: bool,
    seed: u64,
) -> Result<(), String> {
    let [o, h, wd] = out;
    let [kh, kw] = k;
    let [sh, sw, dh, dw] = steps;
    let xe = [
        o,
        (h - 1) * sh + (kh - 1) * dh + 1,
        (wd - 1) * sw + (kw - 1) * dw + 1,
    ];
    let pad = usize::from(loose);
    let ws = [kh * (kw + pad), kw + pad, 1];
    let xs = [xe[1] * (xe[2] + pad), xe[2] + pad, 1];
    let cs = if loose {
        [h * wd * 2, wd * 2, 2]
    } else {
        [h * wd, wd, 1]
    };
    let g = DepthwiseCall {
        out,
        k,
        steps,
        ws,
        xs,
        cs,
    };
    let mut s = seed | 1;
    let mut next = || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    };
    let w: Vec<f32> = (0..o * ws[0]).map(|_| next()).collect();
    let x: Vec<f32> = (0..o * xs[0]).map(|_| next()).collect();
    let mut c = vec![f32::NAN; o * cs[0] + 9];
    unsafe { depthwise_conv2d(isa, &g, w.as_ptr(), x.as_ptr(), c.as_mut_ptr()) };
    let wat = |p: usize, u: usize, v: usize| w[p * ws[0] + u * ws[1] + v];
    let xat = |p: usize, r: usize, q: usize| x[p * xs[0] + r * xs[1] + q];
    let wd_: Vec<f32> = (0..o * kh * kw)
        .map(|i| wat(i / (kh * kw), i / kw % kh, i % kw))
        .collect();
    let xd: Vec<f32> = (0..xe.iter().product::<usize>())
        .map(|i| xat(i / (xe[1] * xe[2]), i / xe[2] % xe[1], i % xe[2]))
        .collect();
    let kernel = MicroKernel::DepthwiseConv2d {
        o: o as i64,
        h: h as i64,
        w: wd as i64,
        kh: kh as i64,
        kw: kw as i64,
        sh: sh as i64,
        sw: sw as i64,
        dh: dh as i64,
        dw: dw as i64,
    };
    let ins = [
        NDArray::from_vec([o, kh, kw], wd_).unwrap(),
        NDArray::from_vec(xe, xd).unwrap(),
    ];
    let want = interp::run_with_inputs(&declaration(kernel).unwrap(), &ins).unwrap()[0]
        .to_vec::<f32>()
        .unwrap();
    let mut written = vec![false; c.len()];
    for p in 0..o {
        for y in 0..h {
            for q in 0..wd {
                let mag: f64 = (0..kh * kw)
                    .map(|r| {
                        let (u, v) = (r / kw, r % kw);
                        (wat(p, u, v) as f64 * xat(p, y * sh + u * dh, q * sw + v * dw) as f64)
                            .abs()
                    })
                    .sum();
                let tol = 2.0 * (kh * kw + 1) as f64 * f32::EPSILON as f64 * mag + 1e-30;
                let at = p * cs[0] + y * cs[1] + q * cs[2];
                written[at] = true;
                let (got, want) = (c[at] as f64, want[(p * h + y) * wd + q] as f64);
                if (got - want).abs() > tol {
                    return Err(format!(
                        "{isa} {out:?} {k:?} {steps:?} loose={loose}: C[{p}, {y}, {q}] = {got}, want {want}"
                    ));
                }
            }
        }
    }
    if c.iter().zip(&written).any(|(v, w)| !w && !v.is_nan()) {
        return Err(format!("{isa} {out:?}: wrote outside C's region"));
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]
    #[test]
    fn depthwise_matches_declaration_at_every_isa(
        o in 1usize..5, h in 1usize..4, w in 1usize..70, kh in 1usize..4, kw in 1usize..4,
        steps in proptest::array::uniform4(1usize..3), loose in any::<bool>(), seed in any::<u64>()
    ) {
        for isa in Isa::all_available() {
            check_depthwise(isa, [o, h, w], [kh, kw], steps, loose, seed)
                .map_err(TestCaseError::fail)?;
        }
    }
}
