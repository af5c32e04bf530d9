//! The vector operations the micro-kernels are written in, one implementation per ISA
//! level: AVX-512F (16 lanes), AVX2 + FMA (8 lanes) and a portable 4-lane version in
//! plain Rust (what x86-64's baseline SSE2, or any other target, compiles it to).
//!
//! Every method is `#[inline(always)]`, so a kernel generic over [`Simd`] and called from
//! a `#[target_feature]` entry point is compiled with that feature set. Partial loads and
//! stores take a lane count `n < LANES` and touch only those `n` elements.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// A vector of `LANES` f32.
pub(crate) trait Simd: Copy {
    const LANES: usize;
    type V: Copy;
    /// All lanes zero.
    unsafe fn zero() -> Self::V;
    /// Every lane `x`.
    unsafe fn splat(x: f32) -> Self::V;
    /// `LANES` elements from `p`.
    unsafe fn load(p: *const f32) -> Self::V;
    /// `n < LANES` elements from `p`, the other lanes zero.
    unsafe fn load_part(p: *const f32, n: usize) -> Self::V;
    /// `LANES` elements to `p`.
    unsafe fn store(p: *mut f32, v: Self::V);
    /// The first `n < LANES` lanes to `p`.
    unsafe fn store_part(p: *mut f32, v: Self::V, n: usize);
    /// `a * b + c` (fused where the ISA has it).
    unsafe fn fma(a: Self::V, b: Self::V, c: Self::V) -> Self::V;
    /// The sum of the lanes.
    unsafe fn sum(v: Self::V) -> f32;
}

/// AVX-512F: 16 lanes, masked tails.
#[cfg(target_arch = "x86_64")]
#[derive(Copy, Clone)]
pub(crate) struct Avx512;

#[cfg(target_arch = "x86_64")]
impl Simd for Avx512 {
    const LANES: usize = 16;
    type V = __m512;
    #[inline(always)]
    unsafe fn zero() -> __m512 {
        unsafe { _mm512_setzero_ps() }
    }
    #[inline(always)]
    unsafe fn splat(x: f32) -> __m512 {
        unsafe { _mm512_set1_ps(x) }
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> __m512 {
        unsafe { _mm512_loadu_ps(p) }
    }
    #[inline(always)]
    unsafe fn load_part(p: *const f32, n: usize) -> __m512 {
        unsafe { _mm512_maskz_loadu_ps(((1u32 << n) - 1) as u16, p) }
    }
    #[inline(always)]
    unsafe fn store(p: *mut f32, v: __m512) {
        unsafe { _mm512_storeu_ps(p, v) }
    }
    #[inline(always)]
    unsafe fn store_part(p: *mut f32, v: __m512, n: usize) {
        unsafe { _mm512_mask_storeu_ps(p, ((1u32 << n) - 1) as u16, v) }
    }
    #[inline(always)]
    unsafe fn fma(a: __m512, b: __m512, c: __m512) -> __m512 {
        unsafe { _mm512_fmadd_ps(a, b, c) }
    }
    #[inline(always)]
    unsafe fn sum(v: __m512) -> f32 {
        unsafe { _mm512_reduce_add_ps(v) }
    }
}

/// AVX2 with FMA: 8 lanes, masked tails.
#[cfg(target_arch = "x86_64")]
#[derive(Copy, Clone)]
pub(crate) struct Avx2;

#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn avx2_mask(n: usize) -> __m256i {
    let idx = unsafe { _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7) };
    unsafe { _mm256_cmpgt_epi32(_mm256_set1_epi32(n as i32), idx) }
}

#[cfg(target_arch = "x86_64")]
impl Simd for Avx2 {
    const LANES: usize = 8;
    type V = __m256;
    #[inline(always)]
    unsafe fn zero() -> __m256 {
        unsafe { _mm256_setzero_ps() }
    }
    #[inline(always)]
    unsafe fn splat(x: f32) -> __m256 {
        unsafe { _mm256_set1_ps(x) }
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> __m256 {
        unsafe { _mm256_loadu_ps(p) }
    }
    #[inline(always)]
    unsafe fn load_part(p: *const f32, n: usize) -> __m256 {
        unsafe { _mm256_maskload_ps(p, avx2_mask(n)) }
    }
    #[inline(always)]
    unsafe fn store(p: *mut f32, v: __m256) {
        unsafe { _mm256_storeu_ps(p, v) }
    }
    #[inline(always)]
    unsafe fn store_part(p: *mut f32, v: __m256, n: usize) {
        unsafe { _mm256_maskstore_ps(p, avx2_mask(n), v) }
    }
    #[inline(always)]
    unsafe fn fma(a: __m256, b: __m256, c: __m256) -> __m256 {
        unsafe { _mm256_fmadd_ps(a, b, c) }
    }
    #[inline(always)]
    unsafe fn sum(v: __m256) -> f32 {
        unsafe {
            let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
            let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
            let s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
            _mm_cvtss_f32(s)
        }
    }
}

/// Portable: 4 lanes as an array (SSE2 registers on x86-64), multiply then add.
#[derive(Copy, Clone)]
pub(crate) struct Portable;

impl Simd for Portable {
    const LANES: usize = 4;
    type V = [f32; 4];
    #[inline(always)]
    unsafe fn zero() -> [f32; 4] {
        [0.0; 4]
    }
    #[inline(always)]
    unsafe fn splat(x: f32) -> [f32; 4] {
        [x; 4]
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> [f32; 4] {
        unsafe { std::ptr::read_unaligned(p as *const [f32; 4]) }
    }
    #[inline(always)]
    unsafe fn load_part(p: *const f32, n: usize) -> [f32; 4] {
        let mut v = [0.0; 4];
        for (l, x) in v.iter_mut().enumerate().take(n) {
            *x = unsafe { *p.add(l) };
        }
        v
    }
    #[inline(always)]
    unsafe fn store(p: *mut f32, v: [f32; 4]) {
        unsafe { std::ptr::write_unaligned(p as *mut [f32; 4], v) }
    }
    #[inline(always)]
    unsafe fn store_part(p: *mut f32, v: [f32; 4], n: usize) {
        for (l, x) in v.iter().enumerate().take(n) {
            unsafe { *p.add(l) = *x };
        }
    }
    #[inline(always)]
    unsafe fn fma(a: [f32; 4], b: [f32; 4], c: [f32; 4]) -> [f32; 4] {
        [
            a[0] * b[0] + c[0],
            a[1] * b[1] + c[1],
            a[2] * b[2] + c[2],
            a[3] * b[3] + c[3],
        ]
    }
    #[inline(always)]
    unsafe fn sum(v: [f32; 4]) -> f32 {
        (v[0] + v[1]) + (v[2] + v[3])
    }
}
