//! Micro-kernels: hand-written Rust (`std::arch`, `#[target_feature]`) that generated code
//! calls for the inner loop nests the schedule tensorized (the loop IR's `microkernel`
//! statement). Cranelift emits only 128-bit vectors; these run at the machine's full width.
//!
//! Each kernel exists at three ISA levels ([`Isa`]): AVX-512F, AVX2 + FMA, and a portable
//! one. The level is detected once per process ([`Isa::detected`]) and can be forced per
//! target (`cpu -isa=avx512|avx2|sse`), refused when the machine lacks it
//! ([`Isa::require`]). The kernels: [`gemm`], [`conv2d`], [`depthwise`].

pub mod conv2d;
pub mod depthwise;
pub mod gemm;
pub(crate) mod simd;

use std::fmt;
use std::sync::OnceLock;

pub use conv2d::Conv2dCall;
pub use depthwise::DepthwiseCall;
pub use gemm::GemmCall;

/// A vector ISA level the micro-kernels are compiled for.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Isa {
    /// Portable Rust, 4 lanes (x86-64's baseline SSE2).
    Sse,
    /// AVX2 with FMA, 8 lanes.
    Avx2,
    /// AVX-512F, 16 lanes.
    Avx512,
}

impl Isa {
    /// Every level, lowest first.
    pub const ALL: [Isa; 3] = [Isa::Sse, Isa::Avx2, Isa::Avx512];

    /// The option value (`sse`, `avx2`, `avx512`).
    pub fn name(self) -> &'static str {
        match self {
            Isa::Sse => "sse",
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512",
        }
    }

    /// The level named `s`.
    pub fn from_name(s: &str) -> Option<Isa> {
        Isa::ALL.into_iter().find(|i| i.name() == s)
    }

    /// Whether this machine can run the level.
    pub fn available(self) -> bool {
        match self {
            Isa::Sse => true,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => is_x86_feature_detected!("avx512f"),
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }

    /// The best level this machine runs, detected once per process.
    pub fn detected() -> Isa {
        static BEST: OnceLock<Isa> = OnceLock::new();
        *BEST.get_or_init(|| {
            Isa::ALL
                .into_iter()
                .rev()
                .find(|i| i.available())
                .unwrap_or(Isa::Sse)
        })
    }

    /// Every level this machine runs.
    pub fn all_available() -> Vec<Isa> {
        Isa::ALL.into_iter().filter(|i| i.available()).collect()
    }

    /// The level named by a target's `-isa` option (`None`: the detected one); an unknown
    /// name or a level the machine cannot run is an error naming what it has.
    pub fn require(name: Option<&str>) -> Result<Isa, String> {
        let Some(name) = name else {
            return Ok(Isa::detected());
        };
        let have: Vec<&str> = Isa::all_available().iter().map(|i| i.name()).collect();
        match Isa::from_name(name) {
            None => Err(format!(
                "-isa={name} is not an ISA level (expected one of sse, avx2, avx512)"
            )),
            Some(i) if !i.available() => Err(format!(
                "-isa={name}: this machine cannot run {name} (it runs {})",
                have.join(", ")
            )),
            Some(i) => Ok(i),
        }
    }

    /// The code for [`kiln_gemm`]'s `isa` argument.
    pub(crate) fn code(self) -> i32 {
        self as i32
    }

    fn from_code(c: i32) -> Isa {
        match c {
            2 => Isa::Avx512,
            1 => Isa::Avx2,
            _ => Isa::Sse,
        }
    }
}

impl fmt::Display for Isa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Runs the gemm micro-kernel at level `isa` (which must be [`Isa::available`]; a level
/// the machine lacks runs the portable code).
///
/// # Safety
/// As [`gemm::run`]: every addressed element is inside its allocation, C apart from A, B.
pub unsafe fn gemm(isa: Isa, g: &GemmCall, a: *const f32, b: *const f32, c: *mut f32) {
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 if Isa::Avx512.available() => unsafe { gemm_avx512(g, a, b, c) },
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 if Isa::Avx2.available() => unsafe { gemm_avx2(g, a, b, c) },
        _ => unsafe { gemm::run::<simd::Portable, 2, 4, 2>(g, a, b, c) },
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn gemm_avx512(g: &GemmCall, a: *const f32, b: *const f32, c: *mut f32) {
    unsafe { gemm::run::<simd::Avx512, 4, 4, 2>(g, a, b, c) }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn gemm_avx2(g: &GemmCall, a: *const f32, b: *const f32, c: *mut f32) {
    unsafe { gemm::run::<simd::Avx2, 2, 4, 2>(g, a, b, c) }
}

/// Runs the conv2d micro-kernel at level `isa` (as [`gemm()`] for the level).
///
/// # Safety
/// As [`conv2d::run`]: every addressed element is inside its allocation, C apart from W, X.
pub unsafe fn conv2d(isa: Isa, g: &Conv2dCall, w: *const f32, x: *const f32, c: *mut f32) {
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 if Isa::Avx512.available() => unsafe { conv2d_avx512(g, w, x, c) },
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 if Isa::Avx2.available() => unsafe { conv2d_avx2(g, w, x, c) },
        _ => unsafe { conv2d::run::<simd::Portable, 2, 2>(g, w, x, c) },
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn conv2d_avx512(g: &Conv2dCall, w: *const f32, x: *const f32, c: *mut f32) {
    unsafe { conv2d::run::<simd::Avx512, 8, 2>(g, w, x, c) }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn conv2d_avx2(g: &Conv2dCall, w: *const f32, x: *const f32, c: *mut f32) {
    unsafe { conv2d::run::<simd::Avx2, 4, 2>(g, w, x, c) }
}

/// Runs the depthwise_conv2d micro-kernel at level `isa` (as [`gemm()`] for the level).
///
/// # Safety
/// As [`depthwise::run`]: every addressed element is inside its allocation, C apart
/// from W, X.
pub unsafe fn depthwise_conv2d(
    isa: Isa,
    g: &DepthwiseCall,
    w: *const f32,
    x: *const f32,
    c: *mut f32,
) {
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 if Isa::Avx512.available() => unsafe { depthwise_avx512(g, w, x, c) },
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 if Isa::Avx2.available() => unsafe { depthwise_avx2(g, w, x, c) },
        _ => unsafe { depthwise::run::<simd::Portable, 2>(g, w, x, c) },
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn depthwise_avx512(g: &DepthwiseCall, w: *const f32, x: *const f32, c: *mut f32) {
    unsafe { depthwise::run::<simd::Avx512, 2>(g, w, x, c) }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn depthwise_avx2(g: &DepthwiseCall, w: *const f32, x: *const f32, c: *mut f32) {
    unsafe { depthwise::run::<simd::Avx2, 2>(g, w, x, c) }
}

/// The host symbol generated code calls for a `microkernel depthwise_conv2d` statement:
/// sizes `[o, h, w, kh, kw, sh, sw, dh, dw]`, then the strides of W, X, C (3 each).
///
/// # Safety
/// Called by generated code only, with regions the loop-IR verifier proved in bounds;
/// `sizes` points at 18 values.
pub(crate) unsafe extern "C" fn kiln_depthwise_conv2d(
    isa: i32,
    w: *const f32,
    x: *const f32,
    c: *mut f32,
    sizes: *const i64,
) {
    let v: [usize; 18] = std::array::from_fn(|i| unsafe { *sizes.add(i) }.max(0) as usize);
    let g = DepthwiseCall {
        out: [v[0], v[1], v[2]],
        k: [v[3], v[4]],
        steps: [v[5], v[6], v[7], v[8]],
        ws: [v[9], v[10], v[11]],
        xs: [v[12], v[13], v[14]],
        cs: [v[15], v[16], v[17]],
    };
    unsafe { depthwise_conv2d(Isa::from_code(isa), &g, w, x, c) }
}

/// The host symbol generated code calls for a `microkernel conv2d` statement: sizes
/// `[o, h, w, ci, kh, kw, sh, sw, dh, dw]`, then the strides of W (4), X (3), C (3).
///
/// # Safety
/// Called by generated code only, with regions the loop-IR verifier proved in bounds;
/// `sizes` points at 20 values.
pub(crate) unsafe extern "C" fn kiln_conv2d(
    isa: i32,
    w: *const f32,
    x: *const f32,
    c: *mut f32,
    sizes: *const i64,
) {
    let v: [usize; 20] = std::array::from_fn(|i| unsafe { *sizes.add(i) }.max(0) as usize);
    let g = Conv2dCall {
        out: [v[0], v[1], v[2]],
        red: [v[3], v[4], v[5]],
        steps: [v[6], v[7], v[8], v[9]],
        ws: [v[10], v[11], v[12], v[13]],
        xs: [v[14], v[15], v[16]],
        cs: [v[17], v[18], v[19]],
    };
    unsafe { conv2d(Isa::from_code(isa), &g, w, x, c) }
}

/// The host symbol generated code calls for a `microkernel gemm` statement.
///
/// # Safety
/// Called by generated code only, with regions the loop-IR verifier proved in bounds.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe extern "C" fn kiln_gemm(
    isa: i32,
    a: *const f32,
    b: *const f32,
    c: *mut f32,
    m: i64,
    n: i64,
    k: i64,
    a_si: i64,
    a_sr: i64,
    b_sj: i64,
    b_sr: i64,
    c_si: i64,
    c_sj: i64,
) {
    let u = |x: i64| x.max(0) as usize;
    let g = GemmCall {
        m: u(m),
        n: u(n),
        k: u(k),
        a: [u(a_si), u(a_sr)],
        b: [u(b_sj), u(b_sr)],
        c: [u(c_si), u(c_sj)],
    };
    unsafe { gemm(Isa::from_code(isa), &g, a, b, c) }
}

#[cfg(test)]
mod tests;
