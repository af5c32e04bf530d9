//! The `gemm` micro-kernel: `C[i, j] = Σ_r A[i, r] · B[j, r]` over an `m × n` tile and a
//! reduction of `k`, every operand addressed by element strides (the loop IR's
//! `microkernel gemm` statement; its declared semantics are
//! `kiln_te::tir::MicroKernel::Gemm`'s).
//!
//! Two register-blocked forms, chosen by the strides, plus a scalar one for the rest:
//! - **dot** (A and B contiguous along the reduction, dense's `x · Wᵀ`): a block of
//!   `MR × NR` accumulators, each a vector over `r`, summed across lanes at the end
//!   (GEMV-shaped at batch 1: the reduction is what is vectorized);
//! - **axpy** (B and C contiguous along `j`, batch_matmul's `A · B`): `MR` rows by `NV`
//!   vectors of columns, each `A[i, r]` splatted against a row of B;
//! - the same with A and B exchanged (computing `Cᵀ`) when that is in axpy form
//!   (conv2d: weights times an input row);
//! - **scalar**: any strides.
//! Rows past `m` in a block read row 0 again and are never stored (no load leaves the
//! declared regions); column and reduction tails use partial (masked) loads and stores.

use super::simd::Simd;

/// One call's shape and strides (in elements).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct GemmCall {
    /// Rows of the tile.
    pub m: usize,
    /// Columns of the tile.
    pub n: usize,
    /// The reduction's extent.
    pub k: usize,
    /// A's stride along `i` and along `r`.
    pub a: [usize; 2],
    /// B's stride along `j` and along `r`.
    pub b: [usize; 2],
    /// C's stride along `i` and along `j`.
    pub c: [usize; 2],
}

/// Runs `g` with the vector type `S`.
///
/// # Safety
/// Every element the strides address (`A[i, r]`, `B[j, r]`, `C[i, j]` for `i < m`,
/// `j < n`, `r < k`) is inside its allocation; C does not overlap A or B.
#[inline(always)]
pub(crate) unsafe fn run<S: Simd, const MR: usize, const NR: usize, const NV: usize>(
    g: &GemmCall,
    a: *const f32,
    b: *const f32,
    c: *mut f32,
) {
    if g.m == 0 || g.n == 0 {
        return;
    }
    if g.a[1] == 1 && g.b[1] == 1 {
        let mut i0 = 0;
        while i0 < g.m {
            let mut j0 = 0;
            while j0 < g.n {
                unsafe { dot_block::<S, MR, NR>(g, a, b, c, i0, j0) };
                j0 += NR;
            }
            i0 += MR;
        }
    } else if g.b[0] == 1 && g.c[1] == 1 {
        unsafe { axpy::<S, MR, NV>(g, a, b, c, false) };
    } else if g.a[0] == 1 && g.c[0] == 1 {
        // `Cᵀ[j, i] = Σ_r B[j, r] · A[i, r]` is in axpy form (conv2d's `W · X`).
        let t = GemmCall {
            m: g.n,
            n: g.m,
            k: g.k,
            a: g.b,
            b: g.a,
            c: [g.c[1], g.c[0]],
        };
        unsafe { axpy::<S, MR, NV>(&t, b, a, c, false) };
    } else {
        unsafe { scalar(g, a, b, c) };
    }
}

/// The axpy form over the whole call (`B` and `C` contiguous along `j`); with
/// `accumulate`, `C += A·Bᵀ` instead of `C = A·Bᵀ`.
#[inline(always)]
pub(crate) unsafe fn axpy<S: Simd, const MR: usize, const NV: usize>(
    g: &GemmCall,
    a: *const f32,
    b: *const f32,
    c: *mut f32,
    accumulate: bool,
) {
    let w = NV * S::LANES;
    let mut i0 = 0;
    while i0 < g.m {
        let mut j0 = 0;
        while j0 < g.n {
            if j0 + w <= g.n {
                unsafe { axpy_block::<S, MR, NV, true>(g, a, b, c, i0, j0, accumulate) };
            } else {
                unsafe { axpy_block::<S, MR, NV, false>(g, a, b, c, i0, j0, accumulate) };
            }
            j0 += w;
        }
        i0 += MR;
    }
}

/// Row `i0 + d` of a block, or row `i0` when that is past `m` (read, never stored).
#[inline(always)]
fn row(i0: usize, d: usize, m: usize) -> usize {
    if i0 + d < m { i0 + d } else { i0 }
}

#[inline(always)]
unsafe fn dot_block<S: Simd, const MR: usize, const NR: usize>(
    g: &GemmCall,
    a: *const f32,
    b: *const f32,
    c: *mut f32,
    i0: usize,
    j0: usize,
) {
    let ap: [*const f32; MR] = std::array::from_fn(|d| unsafe { a.add(row(i0, d, g.m) * g.a[0]) });
    let bp: [*const f32; NR] = std::array::from_fn(|d| unsafe { b.add(row(j0, d, g.n) * g.b[0]) });
    let mut acc = [[unsafe { S::zero() }; NR]; MR];
    let mut r = 0;
    while r + S::LANES <= g.k {
        let av: [S::V; MR] = std::array::from_fn(|i| unsafe { S::load(ap[i].add(r)) });
        let bv: [S::V; NR] = std::array::from_fn(|j| unsafe { S::load(bp[j].add(r)) });
        for i in 0..MR {
            for j in 0..NR {
                acc[i][j] = unsafe { S::fma(av[i], bv[j], acc[i][j]) };
            }
        }
        r += S::LANES;
    }
    if r < g.k {
        let t = g.k - r;
        let av: [S::V; MR] = std::array::from_fn(|i| unsafe { S::load_part(ap[i].add(r), t) });
        let bv: [S::V; NR] = std::array::from_fn(|j| unsafe { S::load_part(bp[j].add(r), t) });
        for i in 0..MR {
            for j in 0..NR {
                acc[i][j] = unsafe { S::fma(av[i], bv[j], acc[i][j]) };
            }
        }
    }
    for (i, acc_i) in acc.iter().enumerate().take(g.m - i0) {
        for (j, &v) in acc_i.iter().enumerate().take(g.n - j0) {
            unsafe { *c.add((i0 + i) * g.c[0] + (j0 + j) * g.c[1]) = S::sum(v) };
        }
    }
}

#[inline(always)]
unsafe fn axpy_block<S: Simd, const MR: usize, const NV: usize, const FULL: bool>(
    g: &GemmCall,
    a: *const f32,
    b: *const f32,
    c: *mut f32,
    i0: usize,
    j0: usize,
    accumulate: bool,
) {
    // Lanes of each column vector (FULL: all of them).
    let lanes: [usize; NV] =
        std::array::from_fn(|v| (g.n - j0).saturating_sub(v * S::LANES).min(S::LANES));
    let ap: [*const f32; MR] = std::array::from_fn(|d| unsafe { a.add(row(i0, d, g.m) * g.a[0]) });
    let mut acc = [[unsafe { S::zero() }; NV]; MR];
    if accumulate {
        for (i, acc_i) in acc.iter_mut().enumerate().take(g.m - i0) {
            let crow = unsafe { c.add((i0 + i) * g.c[0] + j0) };
            for v in 0..NV {
                acc_i[v] = unsafe {
                    if FULL || lanes[v] == S::LANES {
                        S::load(crow.add(v * S::LANES))
                    } else if lanes[v] > 0 {
                        S::load_part(crow.add(v * S::LANES), lanes[v])
                    } else {
                        S::zero()
                    }
                };
            }
        }
    }
    for r in 0..g.k {
        let brow = unsafe { b.add(r * g.b[1] + j0) };
        let bv: [S::V; NV] = std::array::from_fn(|v| unsafe {
            if FULL {
                S::load(brow.add(v * S::LANES))
            } else if lanes[v] == S::LANES {
                S::load(brow.add(v * S::LANES))
            } else if lanes[v] > 0 {
                S::load_part(brow.add(v * S::LANES), lanes[v])
            } else {
                S::zero()
            }
        });
        for i in 0..MR {
            let s = unsafe { S::splat(*ap[i].add(r * g.a[1])) };
            for v in 0..NV {
                acc[i][v] = unsafe { S::fma(s, bv[v], acc[i][v]) };
            }
        }
    }
    for (i, acc_i) in acc.iter().enumerate().take(g.m - i0) {
        let crow = unsafe { c.add((i0 + i) * g.c[0] + j0) };
        for v in 0..NV {
            unsafe {
                if FULL || lanes[v] == S::LANES {
                    S::store(crow.add(v * S::LANES), acc_i[v]);
                } else if lanes[v] > 0 {
                    S::store_part(crow.add(v * S::LANES), acc_i[v], lanes[v]);
                }
            }
        }
    }
}

/// Any strides, one element at a time.
unsafe fn scalar(g: &GemmCall, a: *const f32, b: *const f32, c: *mut f32) {
    for i in 0..g.m {
        for j in 0..g.n {
            let mut s = 0.0f32;
            for r in 0..g.k {
                s += unsafe { *a.add(i * g.a[0] + r * g.a[1]) * *b.add(j * g.b[0] + r * g.b[1]) };
            }
            unsafe { *c.add(i * g.c[0] + j * g.c[1]) = s };
        }
    }
}
