//! The `conv2d` micro-kernel: a direct convolution over a tile of one image,
//! `C[p, y, x] = Σ_{c, u, v} W[p, c, u, v] · X[c, y·sh + u·dh, x·sw + v·dw]`, every
//! operand addressed by element strides (the loop IR's `microkernel conv2d` statement;
//! its declared semantics are `kiln_te::tir::MicroKernel::Conv2d`'s).
//!
//! A gemm over (output channels) × (output pixels of the tile) × (input channels · kernel
//! rows · kernel columns), without an im2col of the whole image: the reduction is cut
//! into chunks, and for each chunk the tile's input taps are packed into a contiguous
//! panel `[r][pixel]` (rows copied whole where the columns are contiguous, gathered
//! otherwise: strided convs), which the gemm kernel's axpy form then multiplies by the
//! weights — a row of weights per output channel, contiguous along the reduction in
//! OIHW — accumulating into C. C is written in place when its pixels are contiguous,
//! through a scratch tile otherwise; weights not contiguous along the reduction are
//! gathered first. The scratch buffers are per thread and reused.

use std::cell::Cell;

use super::gemm::{self, GemmCall};
use super::simd::Simd;

/// One call's sizes and element strides.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Conv2dCall {
    /// Output channels `o`, rows `h`, columns `w`.
    pub out: [usize; 3],
    /// Input channels `ci`, kernel rows `kh`, kernel columns `kw`.
    pub red: [usize; 3],
    /// `sh`, `sw`, `dh`, `dw`.
    pub steps: [usize; 4],
    /// W's strides along `p`, `c`, `u`, `v`.
    pub ws: [usize; 4],
    /// X's strides along `c`, row, column.
    pub xs: [usize; 3],
    /// C's strides along `p`, `y`, `x`.
    pub cs: [usize; 3],
}

/// Floats of the packed input panel per chunk of the reduction (128 KiB).
const PANEL: usize = 32 * 1024;

thread_local! {
    /// Panel, packed weights, C scratch: taken for a call and put back after it, so the
    /// kernel's body is not inside a `LocalKey::with` closure (a closure does not inherit
    /// the caller's `#[target_feature]`s: every intrinsic in it became an out-of-line
    /// call, ResNet-18 ran 7x slower than without the kernel).
    static SCRATCH: Cell<[Vec<f32>; 3]> = const { Cell::new([vec![], vec![], vec![]]) };
}

/// Runs `g` with the vector type `S`, `MR × NV` register blocks.
///
/// # Safety
/// Every element the strides address (`W[p, c, u, v]`, `X` over the declared extents,
/// `C[p, y, x]`) is inside its allocation; C does not overlap W or X.
#[inline(always)]
pub(crate) unsafe fn run<S: Simd, const MR: usize, const NV: usize>(
    g: &Conv2dCall,
    w: *const f32,
    x: *const f32,
    c: *mut f32,
) {
    let [o, h, wd] = g.out;
    let [ci, kh, kw] = g.red;
    let k = ci * kh * kw;
    let pixels = h * wd;
    if o == 0 || pixels == 0 || k == 0 {
        return;
    }
    let mut scratch = SCRATCH.take();
    {
        let [panel, wpack, ctile] = &mut scratch;
        // Weights as rows contiguous along r = (c, u, v).
        let flat_w = g.ws[3] == 1 && g.ws[2] == kw && g.ws[1] == kh * kw;
        let (wp, wrow) = if flat_w {
            (w, g.ws[0])
        } else {
            wpack.clear();
            for p in 0..o {
                for cc in 0..ci {
                    for u in 0..kh {
                        for v in 0..kw {
                            let at = p * g.ws[0] + cc * g.ws[1] + u * g.ws[2] + v * g.ws[3];
                            wpack.push(unsafe { *w.add(at) });
                        }
                    }
                }
            }
            (wpack.as_ptr(), k)
        };
        // C's pixels contiguous (row-major, unit column stride), or a scratch tile.
        let flat_c = g.cs[2] == 1 && (h == 1 || g.cs[1] == wd);
        let (cp, crow) = if flat_c {
            (c, g.cs[0])
        } else {
            ctile.clear();
            ctile.resize(o * pixels, 0.0);
            (ctile.as_mut_ptr(), pixels)
        };
        let kc = (PANEL / pixels).clamp(1, k);
        panel.resize(kc * pixels, 0.0);
        let mut r0 = 0;
        while r0 < k {
            let r1 = (r0 + kc).min(k);
            unsafe { pack::<S>(g, x, r0, r1, panel.as_mut_ptr()) };
            let call = GemmCall {
                m: o,
                n: pixels,
                k: r1 - r0,
                a: [wrow, 1],
                b: [1, pixels],
                c: [crow, 1],
            };
            unsafe {
                gemm::axpy::<S, MR, NV>(&call, wp.add(r0), panel.as_ptr(), cp, r0 > 0);
            }
            r0 = r1;
        }
        if !flat_c {
            for p in 0..o {
                for y in 0..h {
                    for xx in 0..wd {
                        let at = p * g.cs[0] + y * g.cs[1] + xx * g.cs[2];
                        unsafe { *c.add(at) = ctile[p * pixels + y * wd + xx] };
                    }
                }
            }
        }
    }
    SCRATCH.set(scratch);
}

/// Packs reduction rows `r0..r1` (`r = (c·kh + u)·kw + v`) of the tile's input taps into
/// `panel[(r - r0) · pixels + y · w + x]`.
#[inline(always)]
unsafe fn pack<S: Simd>(g: &Conv2dCall, x: *const f32, r0: usize, r1: usize, panel: *mut f32) {
    let [_, h, wd] = g.out;
    let [_, kh, kw] = g.red;
    let [sh, sw, dh, dw] = g.steps;
    let pixels = h * wd;
    let step = sw * g.xs[2];
    for r in r0..r1 {
        let (cc, u, v) = (r / (kh * kw), (r / kw) % kh, r % kw);
        let dst = unsafe { panel.add((r - r0) * pixels) };
        for y in 0..h {
            let src =
                unsafe { x.add(cc * g.xs[0] + (y * sh + u * dh) * g.xs[1] + v * dw * g.xs[2]) };
            let d = unsafe { dst.add(y * wd) };
            if step == 1 {
                // Vector copies inline (a `copy_nonoverlapping` of a short row is a
                // `memmove` call: 7% of ResNet-18's time).
                let mut q = 0;
                while q + S::LANES <= wd {
                    unsafe { S::store(d.add(q), S::load(src.add(q))) };
                    q += S::LANES;
                }
                if q < wd {
                    let n = wd - q;
                    unsafe { S::store_part(d.add(q), S::load_part(src.add(q), n), n) };
                }
            } else {
                for xx in 0..wd {
                    unsafe { *d.add(xx) = *src.add(xx * step) };
                }
            }
        }
    }
}
