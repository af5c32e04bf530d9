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
