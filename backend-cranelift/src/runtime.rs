//! What compiled kernels call back into: the per-call context ([`CallCtx`]), the host
//! functions the JIT links against ([`Host`]: math the ISA lacks, float16 rounding,
//! float64 math, bfloat16 rounding, heap scratch, failure reports, the parallel-for entry
//! point), and the libcall symbols
//! Cranelift's legalizer may emit (`fmaf`, `floorf`, `memset`, ...).
//!
//! Every symbol the generated code can reference is registered in the JIT's symbol
//! table by [`register`], so nothing is looked up in the process at link time (an
//! unresolved libcall makes `cranelift-jit` panic).

use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::sync::atomic::{AtomicU32, Ordering};

use cranelift_jit::JITBuilder;
use kiln_te::tir::{Trig, semantics};

use crate::pool::Pool;

/// A kernel's entry point: `(args, ctx)`, `args` holding one pointer per parameter.
pub(crate) type KernelFn = unsafe extern "C" fn(*const *mut u8, *const CallCtx);

/// The outlined body of a parallel loop: `(args, ctx, env, start, end)` runs the loop's
/// iterations `start..end` (absolute values of the loop variable); `env` holds the
/// variables and local buffers captured from the enclosing kernel.
pub(crate) type BodyFn = unsafe extern "C" fn(*const *mut u8, *const CallCtx, *const u64, i64, i64);

/// Status codes a kernel reports through [`CallCtx::status`].
pub(crate) mod status {
    /// An integer division or remainder by zero.
    pub const DIV_ZERO: u32 = 1;
    /// A heap-allocated local buffer could not be allocated.
    pub const OUT_OF_MEMORY: u32 = 2;
}

/// The context of one kernel call, passed to the kernel as its second argument.
#[repr(C)]
pub(crate) struct CallCtx {
    /// 0, or the first failure reported by the kernel (see [`status`]).
    pub status: AtomicU32,
    /// The library's thread pool.
    pub pool: *const Pool,
}

/// The value type of a host-function parameter or result.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum HostTy {
    /// A pointer.
    Ptr,
    /// `i32`.
    I32,
    /// `i64`.
    I64,
    /// `f32`.
    F32,
    /// `f64`.
    F64,
}

/// A float64 math function the ISA lacks, computed as the loop-IR interpreter computes
/// it in `f64` (Rust's `f64` methods).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Math64 {
    Exp,
    Log,
    Tanh,
    Erf,
    Pow,
}

/// A host function the generated code calls.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Host {
    ParallelFor,
    Fail,
    Alloc,
    Free,
    Zero,
    Exp,
    Log,
    Tanh,
    Erf,
    Pow,
    F16Round,
    F16Load,
    F16Store,
    Gemm,
    /// The conv2d micro-kernel.
    Conv2d,
    /// The depthwise_conv2d micro-kernel.
    DepthwiseConv2d,
    /// An `f64` (float64 is computed in f64) function.
    F64(Math64),
    /// An f32 value rounded to bfloat16 (ties to even), as an f32.
    Bf16Round,
    /// bfloat16 bits (in the low half of an i32) to f32.
    Bf16Load,
    /// An f32 value rounded to bfloat16 bits (in the low half of an i32).
    Bf16Store,
    /// An f64 value rounded once to float16, as an f32.
    F16FromF64,
    /// An f64 value rounded once to bfloat16, as an f32.
    Bf16FromF64,
    /// A trigonometric function in f32 (`false`) or f64 (`true`).
    Trig(Trig, bool),
}

/// Generates the host functions of the [`Trig`] family, f32 and f64 (each exactly the
/// loop-IR interpreter's definition, [`Trig::f32`]/[`Trig::f64`]), and their symbols.
macro_rules! trig_hosts {
    ($($v:ident: $f32:ident, $f64:ident;)*) => {
        $(
            extern "C" fn $f32(x: f32) -> f32 {
                Trig::$v.f32(x)
            }
            extern "C" fn $f64(x: f64) -> f64 {
                Trig::$v.f64(x)
            }
        )*

        /// The symbol name and address of a trigonometric host function.
        fn trig_symbol(t: Trig, wide: bool) -> (&'static str, *const u8) {
            match (t, wide) {
                $(
                    (Trig::$v, false) => (stringify!($f32), $f32 as *const u8),
                    (Trig::$v, true) => (stringify!($f64), $f64 as *const u8),
                )*
            }
        }
    };
}

trig_hosts! {
    Sin: kiln_sinf, kiln_sin;
    Cos: kiln_cosf, kiln_cos;
    Tan: kiln_tanf, kiln_tan;
    Asin: kiln_asinf, kiln_asin;
    Acos: kiln_acosf, kiln_acos;
    Atan: kiln_atanf, kiln_atan;
    Sinh: kiln_sinhf, kiln_sinh;
    Cosh: kiln_coshf, kiln_cosh;
    Asinh: kiln_asinhf, kiln_asinh;
    Acosh: kiln_acoshf, kiln_acosh;
    Atanh: kiln_atanhf, kiln_atanh;
}

impl Host {
    /// Every host function.
    pub fn all() -> Vec<Host> {
        let trig = Trig::ALL
            .into_iter()
            .flat_map(|t| [Host::Trig(t, false), Host::Trig(t, true)]);
        Host::FIXED.into_iter().chain(trig).collect()
    }

    /// Every host function but the [`Trig`] family.
    const FIXED: [Host; 26] = [
        Host::ParallelFor,
        Host::Fail,
        Host::Alloc,
        Host::Free,
        Host::Zero,
        Host::Exp,
        Host::Log,
        Host::Tanh,
        Host::Erf,
        Host::Pow,
        Host::F16Round,
        Host::F16Load,
        Host::F16Store,
        Host::F64(Math64::Exp),
        Host::F64(Math64::Log),
        Host::F64(Math64::Tanh),
        Host::F64(Math64::Erf),
        Host::F64(Math64::Pow),
        Host::Bf16Round,
        Host::Bf16Load,
        Host::Bf16Store,
        Host::F16FromF64,
        Host::Bf16FromF64,
        Host::Gemm,
        Host::Conv2d,
        Host::DepthwiseConv2d,
    ];

    /// The symbol name.
    pub fn name(self) -> &'static str {
        match self {
            Host::ParallelFor => "kiln_parallel_for",
            Host::Fail => "kiln_fail",
            Host::Alloc => "kiln_alloc",
            Host::Free => "kiln_free",
            Host::Zero => "kiln_zero",
            Host::Exp => "kiln_expf",
            Host::Log => "kiln_logf",
            Host::Tanh => "kiln_tanhf",
            Host::Erf => "kiln_erff",
            Host::Pow => "kiln_powf",
            Host::F16Round => "kiln_f16_round",
            Host::F16Load => "kiln_f16_load",
            Host::F16Store => "kiln_f16_store",
            Host::F64(Math64::Exp) => "kiln_exp",
            Host::F64(Math64::Log) => "kiln_log",
            Host::F64(Math64::Tanh) => "kiln_tanh",
            Host::F64(Math64::Erf) => "kiln_erf",
            Host::F64(Math64::Pow) => "kiln_pow",
            Host::Bf16Round => "kiln_bf16_round",
            Host::Bf16Load => "kiln_bf16_load",
            Host::Bf16Store => "kiln_bf16_store",
            Host::F16FromF64 => "kiln_f16_from_f64",
            Host::Bf16FromF64 => "kiln_bf16_from_f64",
            Host::Trig(t, wide) => trig_symbol(t, wide).0,
            Host::Gemm => "kiln_gemm",
            Host::Conv2d => "kiln_conv2d",
            Host::DepthwiseConv2d => "kiln_depthwise_conv2d",
        }
    }

    /// Parameter types and result types.
    pub fn signature(self) -> (&'static [HostTy], &'static [HostTy]) {
        use HostTy::*;
        match self {
            Host::ParallelFor => (&[Ptr, Ptr, Ptr, Ptr, I64, I64], &[]),
            Host::Fail => (&[Ptr, I32], &[]),
            Host::Alloc => (&[I64], &[Ptr]),
            Host::Free => (&[Ptr, I64], &[]),
            Host::Zero => (&[Ptr, I64], &[]),
            Host::Exp | Host::Log | Host::Tanh | Host::Erf | Host::F16Round | Host::Bf16Round => {
                (&[F32], &[F32])
            }
            Host::Pow => (&[F32, F32], &[F32]),
            Host::F16Load | Host::Bf16Load => (&[I32], &[F32]),
            Host::F16Store | Host::Bf16Store => (&[F32], &[I32]),
            Host::F64(Math64::Pow) => (&[F64, F64], &[F64]),
            Host::F64(_) => (&[F64], &[F64]),
            Host::F16FromF64 | Host::Bf16FromF64 => (&[F64], &[F32]),
            Host::Trig(_, false) => (&[F32], &[F32]),
            Host::Trig(_, true) => (&[F64], &[F64]),
            Host::Gemm => (
                &[
                    I32, Ptr, Ptr, Ptr, I64, I64, I64, I64, I64, I64, I64, I64, I64,
                ],
                &[],
            ),
            Host::Conv2d | Host::DepthwiseConv2d => (&[I32, Ptr, Ptr, Ptr, Ptr], &[]),
        }
    }

    /// The function's address.
    fn address(self) -> *const u8 {
        match self {
            Host::ParallelFor => kiln_parallel_for as *const u8,
            Host::Fail => kiln_fail as *const u8,
            Host::Alloc => kiln_alloc as *const u8,
            Host::Free => kiln_free as *const u8,
            Host::Zero => kiln_zero as *const u8,
            Host::Exp => kiln_expf as *const u8,
            Host::Log => kiln_logf as *const u8,
            Host::Tanh => kiln_tanhf as *const u8,
            Host::Erf => kiln_erff as *const u8,
            Host::Pow => kiln_powf as *const u8,
            Host::F16Round => kiln_f16_round as *const u8,
            Host::F16Load => kiln_f16_load as *const u8,
            Host::F16Store => kiln_f16_store as *const u8,
            Host::F64(Math64::Exp) => kiln_exp as *const u8,
            Host::F64(Math64::Log) => kiln_log as *const u8,
            Host::F64(Math64::Tanh) => kiln_tanh as *const u8,
            Host::F64(Math64::Erf) => kiln_erf as *const u8,
            Host::F64(Math64::Pow) => kiln_pow as *const u8,
            Host::Bf16Round => kiln_bf16_round as *const u8,
            Host::Bf16Load => kiln_bf16_load as *const u8,
            Host::Bf16Store => kiln_bf16_store as *const u8,
            Host::F16FromF64 => kiln_f16_from_f64 as *const u8,
            Host::Bf16FromF64 => kiln_bf16_from_f64 as *const u8,
            Host::Trig(t, wide) => trig_symbol(t, wide).1,
            Host::Gemm => crate::microkernel::kiln_gemm as *const u8,
            Host::Conv2d => crate::microkernel::kiln_conv2d as *const u8,
            Host::DepthwiseConv2d => crate::microkernel::kiln_depthwise_conv2d as *const u8,
        }
    }
}

/// Registers every host function and every libcall symbol of
/// `cranelift_module::default_libcall_names` that float and memory instructions can be
/// legalized into.
pub(crate) fn register(jb: &mut JITBuilder) {
    for h in Host::all() {
        jb.symbol(h.name(), h.address());
    }
    let libcalls: [(&str, *const u8); 14] = [
        ("floorf", lc_floorf as *const u8),
        ("ceilf", lc_ceilf as *const u8),
        ("truncf", lc_truncf as *const u8),
        ("nearbyintf", lc_nearbyintf as *const u8),
        ("fmaf", lc_fmaf as *const u8),
        ("floor", lc_floor as *const u8),
        ("ceil", lc_ceil as *const u8),
        ("trunc", lc_trunc as *const u8),
        ("nearbyint", lc_nearbyint as *const u8),
        ("fma", lc_fma as *const u8),
        ("memcpy", lc_memcpy as *const u8),
        ("memset", lc_memset as *const u8),
        ("memmove", lc_memmove as *const u8),
        ("memcmp", lc_memcmp as *const u8),
    ];
    for (name, ptr) in libcalls {
        jb.symbol(name, ptr);
    }
}

/// Runs `body` over `min..min + extent` on the call's thread pool.
///
/// # Safety
/// Called by generated code only, with the pointers of a live kernel call.
unsafe extern "C" fn kiln_parallel_for(
    ctx: *const CallCtx,
    body: BodyFn,
    args: *const *mut u8,
    env: *const u64,
    min: i64,
    extent: i64,
) {
    // SAFETY: the kernel passes the context its caller made; the pool outlives the call.
    let pool = unsafe { &*(*ctx).pool };
    pool.parallel_for(body, args, ctx, env, min, extent);
}

/// Records failure `code` for the call (the first failure wins).
unsafe extern "C" fn kiln_fail(ctx: *const CallCtx, code: u32) {
    // SAFETY: the kernel passes the context its caller made.
    let ctx = unsafe { &*ctx };
    let _ = ctx
        .status
        .compare_exchange(0, code, Ordering::Relaxed, Ordering::Relaxed);
}

fn scratch_layout(bytes: i64) -> Option<Layout> {
    Layout::from_size_align(usize::try_from(bytes).ok()?.max(1), 64).ok()
}

/// Zero-filled heap scratch of `bytes` bytes, 64-byte aligned; null on failure.
extern "C" fn kiln_alloc(bytes: i64) -> *mut u8 {
    match scratch_layout(bytes) {
        // SAFETY: the layout has a non-zero size.
        Some(l) => unsafe { alloc_zeroed(l) },
        None => std::ptr::null_mut(),
    }
}

/// Frees scratch from [`kiln_alloc`] of the same size.
unsafe extern "C" fn kiln_free(ptr: *mut u8, bytes: i64) {
    if let Some(l) = scratch_layout(bytes)
        && !ptr.is_null()
    {
        // SAFETY: `ptr` came from `kiln_alloc(bytes)`, which used this layout.
        unsafe { dealloc(ptr, l) }
    }
}

/// Zero-fills `bytes` bytes at `ptr`.
unsafe extern "C" fn kiln_zero(ptr: *mut u8, bytes: i64) {
    // SAFETY: the kernel passes a local buffer of at least `bytes` bytes.
    unsafe { std::ptr::write_bytes(ptr, 0, bytes.max(0) as usize) }
}

// Math with the loop-IR interpreter's f32 semantics (exactly, but `erf`: see there).
extern "C" fn kiln_expf(x: f32) -> f32 {
    x.exp()
}
extern "C" fn kiln_logf(x: f32) -> f32 {
    x.ln()
}
extern "C" fn kiln_tanhf(x: f32) -> f32 {
    x.tanh()
}
/// `erf` in f32, branch by |x| (N. Juffa's minimax fits for f32 `erff`): below
/// 0.9277, `x + x·P(x²)`; above, `1 - exp(Q(|x|))` with `Q` of degree 7, sign
/// restored. The polynomials are evaluated in f64 and `exp` is the f64 one, so the
/// error is the fits' (< 1 ulp each): at most
/// [`ERFF_MAX_ULPS`] from the interpreter's f64 `erf` rounded to f32 (tested over the
/// whole float range), without `erf`'s f64 series (BERT's GELU spent 42 % of the
/// block there).
#[allow(clippy::excessive_precision)] // the fit's f32 coefficients as published
extern "C" fn kiln_erff(x: f32) -> f32 {
    let a = x as f64;
    let t = a.abs();
    let s = a * a;
    if t > 0.927_734_375 {
        let mut r = -1.728_534_70e-5f32 as f64 * t + 3.831_971_26e-4f32 as f64;
        let u = -3.883_964_38e-3f32 as f64 * t + 2.425_462_19e-2f32 as f64;
        r = r * s + u;
        r = r * t + -1.067_778_77e-1f32 as f64;
        r = r * t + -6.348_466_87e-1f32 as f64;
        r = r * t + -1.287_175_12e-1f32 as f64;
        r = r * t - t;
        ((1.0 - r.exp()) as f32).copysign(x)
    } else {
        let mut r = -5.967_617_03e-4f32 as f64;
        r = r * s + 4.991_194_23e-3f32 as f64;
        r = r * s + -2.676_813_49e-2f32 as f64;
        r = r * s + 1.128_199_25e-1f32 as f64;
        r = r * s + -3.761_253_36e-1f32 as f64;
        r = r * s + 1.283_791_66e-1f32 as f64;
        (r * a + a) as f32
    }
}

/// The largest distance, in f32 ulps, of [`kiln_erff`] from the interpreter's `erf`.
#[cfg(test)]
const ERFF_MAX_ULPS: u32 = 1;
extern "C" fn kiln_powf(x: f32, y: f32) -> f32 {
    x.powf(y)
}
extern "C" fn kiln_f16_round(x: f32) -> f32 {
    semantics::f16_value(semantics::f16_bits(x))
}
extern "C" fn kiln_f16_load(bits: u32) -> f32 {
    semantics::f16_value(bits as u16)
}
extern "C" fn kiln_f16_store(x: f32) -> u32 {
    semantics::f16_bits(x) as u32
}
extern "C" fn kiln_bf16_round(x: f32) -> f32 {
    half::bf16::from_f32(x).to_f32()
}
extern "C" fn kiln_bf16_load(bits: u32) -> f32 {
    half::bf16::from_bits(bits as u16).to_f32()
}
extern "C" fn kiln_bf16_store(x: f32) -> u32 {
    half::bf16::from_f32(x).to_bits() as u32
}
extern "C" fn kiln_f16_from_f64(x: f64) -> f32 {
    semantics::round_float(x, kiln_ir::DType::F16) as f32
}
extern "C" fn kiln_bf16_from_f64(x: f64) -> f32 {
    semantics::round_float(x, kiln_ir::DType::BF16) as f32
}

// float64 math with exactly the loop-IR interpreter's f64 semantics.
extern "C" fn kiln_exp(x: f64) -> f64 {
    x.exp()
}
extern "C" fn kiln_log(x: f64) -> f64 {
    x.ln()
}
extern "C" fn kiln_tanh(x: f64) -> f64 {
    x.tanh()
}
extern "C" fn kiln_erf(x: f64) -> f64 {
    kiln_te::tir::interp::erf(x)
}
extern "C" fn kiln_pow(x: f64, y: f64) -> f64 {
    x.powf(y)
}

// Libcalls Cranelift legalizes into when the ISA lacks an instruction.
extern "C" fn lc_floorf(x: f32) -> f32 {
    x.floor()
}
extern "C" fn lc_ceilf(x: f32) -> f32 {
    x.ceil()
}
extern "C" fn lc_truncf(x: f32) -> f32 {
    x.trunc()
}
extern "C" fn lc_nearbyintf(x: f32) -> f32 {
    x.round_ties_even()
}
extern "C" fn lc_fmaf(a: f32, b: f32, c: f32) -> f32 {
    a.mul_add(b, c)
}
extern "C" fn lc_floor(x: f64) -> f64 {
    x.floor()
}
extern "C" fn lc_ceil(x: f64) -> f64 {
    x.ceil()
}
extern "C" fn lc_trunc(x: f64) -> f64 {
    x.trunc()
}
extern "C" fn lc_nearbyint(x: f64) -> f64 {
    x.round_ties_even()
}
extern "C" fn lc_fma(a: f64, b: f64, c: f64) -> f64 {
    a.mul_add(b, c)
}
unsafe extern "C" fn lc_memcpy(dst: *mut u8, src: *const u8, n: usize) -> *mut u8 {
    // SAFETY: the C contract of memcpy, which generated code follows.
    unsafe { std::ptr::copy_nonoverlapping(src, dst, n) };
    dst
}
unsafe extern "C" fn lc_memmove(dst: *mut u8, src: *const u8, n: usize) -> *mut u8 {
    // SAFETY: the C contract of memmove.
    unsafe { std::ptr::copy(src, dst, n) };
    dst
}
unsafe extern "C" fn lc_memset(dst: *mut u8, c: i32, n: usize) -> *mut u8 {
    // SAFETY: the C contract of memset.
    unsafe { std::ptr::write_bytes(dst, c as u8, n) };
    dst
}
unsafe extern "C" fn lc_memcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
    // SAFETY: the C contract of memcmp.
    let (x, y) = unsafe {
        (
            std::slice::from_raw_parts(a, n),
            std::slice::from_raw_parts(b, n),
        )
    };
    match x.cmp(y) {
        std::cmp::Ordering::Less => -1,
        std::cmp::Ordering::Equal => 0,
        std::cmp::Ordering::Greater => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Distance in ulps between two finite f32 of the same sign, or across zero.
    fn ulps(a: f32, b: f32) -> u32 {
        let key = |x: f32| {
            let i = x.to_bits() as i32;
            if i < 0 { i32::MIN.wrapping_sub(i) } else { i }
        };
        (key(a) as i64 - key(b) as i64).unsigned_abs() as u32
    }

    #[test]
    fn erff_is_within_its_stated_ulps_over_the_whole_float_range() {
        // Every 257th bit pattern (all exponents, both signs, varied mantissas), then
        // every float in [-4, 4] at a finer stride where erf is not yet ±1.
        let wide = (0..=u32::MAX).step_by(257);
        let near = (0..=0x4080_0000u32)
            .step_by(31)
            .flat_map(|b| [b, b | 0x8000_0000]);
        let mut worst = (0u32, 0f32);
        for bits in wide.chain(near) {
            let x = f32::from_bits(bits);
            let got = kiln_erff(x);
            let want = kiln_te::tir::interp::erf(x as f64) as f32;
            if x.is_nan() {
                assert!(got.is_nan(), "erf({x}) = {got}");
                continue;
            }
            let d = ulps(got, want);
            if d > worst.0 {
                worst = (d, x);
            }
        }
        assert!(
            worst.0 <= ERFF_MAX_ULPS,
            "erff is {} ulps off at {:e} (stated: {ERFF_MAX_ULPS})",
            worst.0,
            worst.1
        );
    }
}
