//! The `depthwise_conv2d` micro-kernel: one filter per channel over a tile of one image,
//! `C[p, y, x] = Σ_{u, v} W[p, u, v] · X[p, y·sh + u·dh, x·sw + v·dw]`, every operand
//! addressed by element strides (the loop IR's `microkernel depthwise_conv2d` statement;
//! its declared semantics are `kiln_te::tir::MicroKernel::DepthwiseConv2d`'s).
//!
//! Vectorized along the output row: for each channel and row, `NV` vectors of columns
//! accumulate the `kh × kw` taps, each tap's weight splatted against the input row
//! (loaded whole where the columns are contiguous, gathered for strided convs); column
//! tails use partial (masked) loads and stores, C with a non-unit column stride is
//! written lane by lane.

use super::simd::Simd;

/// One call's sizes and element strides.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct DepthwiseCall {
    /// Channels `o`, output rows `h`, output columns `w`.
    pub out: [usize; 3],
    /// Kernel rows and columns.
    pub k: [usize; 2],
    /// `sh`, `sw`, `dh`, `dw`.
    pub steps: [usize; 4],
    /// W's strides along `p`, `u`, `v`.
    pub ws: [usize; 3],
    /// X's strides along `p`, row, column.
    pub xs: [usize; 3],
    /// C's strides along `p`, `y`, `x`.
    pub cs: [usize; 3],
}

/// Runs `g` with the vector type `S`, `NV` vectors of columns at a time.
///
/// # Safety
/// Every element the strides address (`W[p, u, v]`, `X` over the declared extents,
/// `C[p, y, x]`) is inside its allocation; C does not overlap W or X.
#[inline(always)]
pub(crate) unsafe fn run<S: Simd, const NV: usize>(
    g: &DepthwiseCall,
    w: *const f32,
    x: *const f32,
    c: *mut f32,
) {
    let [o, h, wd] = g.out;
    let [kh, kw] = g.k;
    let [sh, sw, dh, dw] = g.steps;
    let step = sw * g.xs[2];
    let mut tmp = [0.0f32; 16];
    debug_assert!(S::LANES <= tmp.len());
    for p in 0..o {
        for y in 0..h {
            let mut j0 = 0;
            while j0 < wd {
                let lanes: [usize; NV] =
                    std::array::from_fn(|v| (wd - j0).saturating_sub(v * S::LANES).min(S::LANES));
                let mut acc = [unsafe { S::zero() }; NV];
                for u in 0..kh {
                    for v in 0..kw {
                        let wv =
                            unsafe { S::splat(*w.add(p * g.ws[0] + u * g.ws[1] + v * g.ws[2])) };
                        let row = unsafe {
                            x.add(p * g.xs[0] + (y * sh + u * dh) * g.xs[1] + v * dw * g.xs[2])
                        };
                        for (t, a) in acc.iter_mut().enumerate() {
                            let n = lanes[t];
                            if n == 0 {
                                continue;
                            }
                            let first = j0 + t * S::LANES;
                            let xv = unsafe {
                                if step == 1 && n == S::LANES {
                                    S::load(row.add(first))
                                } else if step == 1 {
                                    S::load_part(row.add(first), n)
                                } else {
                                    for (l, slot) in tmp.iter_mut().enumerate().take(n) {
                                        *slot = *row.add((first + l) * step);
                                    }
                                    // Lanes past `n` hold stale values, never stored.
                                    S::load(tmp.as_ptr())
                                }
                            };
                            *a = unsafe { S::fma(wv, xv, *a) };
                        }
                    }
                }
                let crow = unsafe { c.add(p * g.cs[0] + y * g.cs[1]) };
                for (t, a) in acc.iter().enumerate() {
                    let n = lanes[t];
                    let first = j0 + t * S::LANES;
                    unsafe {
                        if n == 0 {
                        } else if g.cs[2] == 1 && n == S::LANES {
                            S::store(crow.add(first), *a);
                        } else if g.cs[2] == 1 {
                            S::store_part(crow.add(first), *a, n);
                        } else {
                            S::store(tmp.as_mut_ptr(), *a);
                            for (l, v) in tmp.iter().enumerate().take(n) {
                                *crow.add((first + l) * g.cs[2]) = *v;
                            }
                        }
                    }
                }
                j0 += NV * S::LANES;
            }
        }
    }
}
