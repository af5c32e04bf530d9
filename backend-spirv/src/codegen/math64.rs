//! float64 `exp` and `log`, which GLSL.std.450 has for 16- and 32-bit floats only, from
//! them the hyperbolic functions and their inverses, and the inverse circular ones:
//! range reduction and a polynomial in core float64 instructions (each operation
//! `NoContraction`, the polynomials by Horner's rule with GLSL's `Fma`, which takes
//! doubles), the exponent handled in the bits (`Int64`).
//!
//! - `exp(x)`: `x = k·ln2 + r` with `k = roundEven(x·log2 e)` (clamped to ±1100, NaN
//!   to 0) and `r` reduced in two steps (Cody–Waite: fdlibm's `ln2_hi` has 32
//!   significant bits, so `k·ln2_hi` and `x − k·ln2_hi` are exact), `|r| ≤ 0.35`;
//!   `e^r` by its Taylor polynomial to degree 13 (truncation below `6e-18` relative,
//!   0.05 ulp) and scaled by `2^k` as two exponent-field factors (each a normal
//!   double). Error: within 2 ulp of `e^x` for normal results (the polynomial's
//!   roundings, one per `fma`, shrink by `|r|` per step); `+inf` above ~709.78, `0` below
//!   -746, NaN kept. Results below the smallest normal double come from one rounding of
//!   a product and so follow the device's float64 denormal mode (lavapipe flushes).
//! - `log(x)`: fdlibm's `e_log.c` (as musl's `log`): `x = 2^k·m` with `m` in
//!   `[√2/2, √2]` (a subnormal `x` scaled by `2^54` first), `f = m − 1`, `s = f/(2+f)`,
//!   `log(1+f) = f − (f²/2 − s·(f²/2 + R(s²)))` with fdlibm's degree-14 minimax `R`
//!   (error below `2^-58.45`), plus `k·ln2` in two parts. Error: below 1 ulp as fdlibm
//!   states; within 2 ulp is what the test checks against the platform's `ln`. `x < 0`
//!   and NaN give NaN, `±0` `-inf`, `+inf` `+inf`.
//! - `log1p(u) = log(1+u)·u/((1+u)−1)` (Goldberg's form: exact-argument correction,
//!   a few ulp), `u` itself where `1+u` rounds to 1.
//! - `sinh`, `cosh`: `(e^a ∓ e^-a)/2` of `a = |x|`, and below `a = 1` sinh's Taylor
//!   polynomial to `x^17` (truncation below `1e-17` relative), so no cancellation;
//!   `asinh(a) = log1p(a + a²/(1 + √(1+a²)))`, `acosh(x) = log1p(t + √(t·(t+2)))` with
//!   `t = x − 1` (NaN below 1), `atanh(a) = log1p(2a/(1−a))/2`; the odd ones take `x`'s
//!   sign.
//! - `atan`: `|x| > 1` through `π/2 − atan(1/|x|)`, then two halvings
//!   `t/(1 + √(1+t²))` (`atan t = 2·atan` of it) down to `|t| ≤ tan(π/16)`, and the
//!   Taylor series to `t^25` (truncation below `1e-18` relative); `asin(x) =
//!   atan(x/√(1−x²))` (`1 − x²` exact for a float32 `x`), `acos(x) =
//!   2·atan(√((1−x)/(1+x)))` (no cancellation near 1). NaN outside `[-1, 1]`.
//!
//! These are used for
//!   float32 (and float16, bfloat16) arguments, which convert to float64 exactly: the
//!   float64 result is within a few float64 ulp, so the rounded float32 result is within
//!   1 float32 ulp (the test checks that against the platform's `f32` functions).

use kiln_executor::Result;
use kiln_ir::DType;
use kiln_te::tir::Trig;
use rspirv::spirv::{GlslStd450Op as Glsl, Word};

use super::Gen;

const D: DType = DType::F64;
/// `ln 2` in two parts, fdlibm's: the high part has 32 significant bits.
const LN2_HI: f64 = 6.931_471_803_691_238_164_90e-1;
const LN2_LO: f64 = 1.908_214_929_270_587_700_02e-10;
/// fdlibm's `Lg1`..`Lg7`: `log(1+f) = f - f²/2 + s·(f²/2 + R)`, `R = Σ Lg_i·s^(2i)`.
const LG: [f64; 7] = [
    6.666_666_666_666_735_130e-1,
    3.999_999_999_940_941_908e-1,
    2.857_142_874_366_239_149e-1,
    2.222_219_843_214_978_396e-1,
    1.818_357_216_161_805_012e-1,
    1.531_383_769_920_937_332e-1,
    1.479_819_860_511_658_591e-1,
];

impl Gen<'_> {
    fn c64(&mut self, v: f64) -> Result<Word> {
        self.const_float(v, D)
    }

    fn d_op(&mut self, op: rspirv::spirv::Op, x: Word, y: Word) -> Result<Word> {
        let t = self.ty(D)?;
        let r = match op {
            rspirv::spirv::Op::FAdd => self.b.f_add(t, None, x, y),
            rspirv::spirv::Op::FSub => self.b.f_sub(t, None, x, y),
            rspirv::spirv::Op::FMul => self.b.f_mul(t, None, x, y),
            _ => self.b.f_div(t, None, x, y),
        };
        let r = self.ok(r)?;
        Ok(self.exact(r))
    }

    fn d_select(&mut self, c: Word, x: Word, y: Word) -> Result<Word> {
        let t = self.ty(D)?;
        let r = self.b.select(t, None, c, x, y);
        self.ok(r)
    }

    fn d_lt(&mut self, x: Word, y: Word) -> Result<Word> {
        let bool_t = self.ty(DType::Bool)?;
        let r = self.b.f_ord_less_than(bool_t, None, x, y);
        self.ok(r)
    }

    /// `c0 + z·(c1 + z·(c2 + ...))` by Horner's rule with `fma`.
    fn d_horner(&mut self, z: Word, coeffs: &[f64]) -> Result<Word> {
        let mut acc = self.c64(*coeffs.last().unwrap_or(&0.0))?;
        for &c in coeffs.iter().rev().skip(1) {
            let c = self.c64(c)?;
            acc = self.glsl_of(D, Glsl::Fma, &[acc, z, c])?;
        }
        Ok(acc)
    }

    /// `2^n` for int64 `n` in the normal exponent range, built in the bits.
    fn d_pow2(&mut self, n: Word) -> Result<Word> {
        let i64t = self.ty(DType::I64)?;
        let t = self.ty(D)?;
        let bias = self.const_int(1023, DType::I64)?;
        let e = self.b.i_add(i64t, None, n, bias);
        let e = self.ok(e)?;
        let sh = self.const_int(52, DType::I64)?;
        let bits = self.b.shift_left_logical(i64t, None, e, sh);
        let bits = self.ok(bits)?;
        let r = self.b.bitcast(t, None, bits);
        self.ok(r)
    }

    /// `e^x` on float64 (see the module doc).
    pub(super) fn exp_f64(&mut self, x: Word) -> Result<Word> {
        use rspirv::spirv::Op::{FMul, FSub};
        let bool_t = self.ty(DType::Bool)?;
        let i64t = self.ty(DType::I64)?;
        let log2e = self.c64(std::f64::consts::LOG2_E)?;
        let t = self.d_op(FMul, x, log2e)?;
        let k = self.glsl_of(D, Glsl::RoundEven, &[t])?;
        let (lo, hi) = (self.c64(-1100.0)?, self.c64(1100.0)?);
        let below = self.d_lt(k, lo)?;
        let k = self.d_select(below, lo, k)?;
        let above = self.d_lt(hi, k)?;
        let k = self.d_select(above, hi, k)?;
        let nan = self.b.is_nan(bool_t, None, k);
        let nan = self.ok(nan)?;
        let zero = self.c64(0.0)?;
        let k = self.d_select(nan, zero, k)?;
        let (c_hi, c_lo) = (self.c64(LN2_HI)?, self.c64(LN2_LO)?);
        let kh = self.d_op(FMul, k, c_hi)?;
        let r = self.d_op(FSub, x, kh)?;
        let kl = self.d_op(FMul, k, c_lo)?;
        let r = self.d_op(FSub, r, kl)?;
        let mut coeffs = [1.0f64; 14];
        for n in 1..14 {
            coeffs[n] = coeffs[n - 1] / n as f64;
        }
        let p = self.d_horner(r, &coeffs)?;
        // p · 2^(k/2) · 2^(k - k/2), each factor a normal double.
        let ki = self.b.convert_f_to_s(i64t, None, k);
        let ki = self.ok(ki)?;
        let one = self.const_int(1, DType::I64)?;
        let k1 = self.b.shift_right_arithmetic(i64t, None, ki, one);
        let k1 = self.ok(k1)?;
        let k2 = self.b.i_sub(i64t, None, ki, k1);
        let k2 = self.ok(k2)?;
        let s1 = self.d_pow2(k1)?;
        let s2 = self.d_pow2(k2)?;
        let r = self.d_op(FMul, p, s1)?;
        let r = self.d_op(FMul, r, s2)?;
        // Far below: 0 (the polynomial of -inf is not a number); NaN stays NaN.
        let floor = self.c64(-746.0)?;
        let gone = self.d_lt(x, floor)?;
        let r = self.d_select(gone, zero, r)?;
        let xn = self.b.is_nan(bool_t, None, x);
        let xn = self.ok(xn)?;
        self.d_select(xn, x, r)
    }

    /// The natural logarithm on float64 (see the module doc).
    pub(super) fn log_f64(&mut self, x: Word) -> Result<Word> {
        use rspirv::spirv::Op::{FAdd, FDiv, FMul, FSub};
        let bool_t = self.ty(DType::Bool)?;
        let i64t = self.ty(DType::I64)?;
        let t = self.ty(D)?;
        // Subnormal x: scaled into the normal range first (exact).
        let min_normal = self.c64(f64::MIN_POSITIVE)?;
        let sub = self.d_lt(x, min_normal)?;
        let scale = self.c64(2f64.powi(54))?;
        let xs = self.d_op(FMul, x, scale)?;
        let xs = self.d_select(sub, xs, x)?;
        let bits = self.b.bitcast(i64t, None, xs);
        let bits = self.ok(bits)?;
        let c52 = self.const_int(52, DType::I64)?;
        let e = self.b.shift_right_arithmetic(i64t, None, bits, c52);
        let e = self.ok(e)?;
        let (bias, bias_sub) = (
            self.const_int(1023, DType::I64)?,
            self.const_int(1023 + 54, DType::I64)?,
        );
        let bias = self.b.select(i64t, None, sub, bias_sub, bias);
        let bias = self.ok(bias)?;
        let k = self.b.i_sub(i64t, None, e, bias);
        let k = self.ok(k)?;
        // m in [1, 2): the mantissa with a zero exponent.
        let (mask, one_bits) = (
            self.const_int(0x000f_ffff_ffff_ffff, DType::I64)?,
            self.const_int(0x3ff0_0000_0000_0000, DType::I64)?,
        );
        let m = self.b.bitwise_and(i64t, None, bits, mask);
        let m = self.ok(m)?;
        let m = self.b.bitwise_or(i64t, None, m, one_bits);
        let m = self.ok(m)?;
        let m = self.b.bitcast(t, None, m);
        let m = self.ok(m)?;
        // Into [√2/2, √2].
        let sqrt2 = self.c64(std::f64::consts::SQRT_2)?;
        let big = self.d_lt(sqrt2, m)?;
        let half = self.c64(0.5)?;
        let mh = self.d_op(FMul, m, half)?;
        let m = self.d_select(big, mh, m)?;
        let one_i = self.const_int(1, DType::I64)?;
        let k1 = self.b.i_add(i64t, None, k, one_i);
        let k1 = self.ok(k1)?;
        let k = self.b.select(i64t, None, big, k1, k);
        let k = self.ok(k)?;
        let dk = self.b.convert_s_to_f(t, None, k);
        let dk = self.ok(dk)?;
        let one = self.c64(1.0)?;
        let two = self.c64(2.0)?;
        let f = self.d_op(FSub, m, one)?;
        let ff = self.d_op(FMul, f, f)?;
        let hfsq = self.d_op(FMul, half, ff)?;
        let den = self.d_op(FAdd, two, f)?;
        let s = self.d_op(FDiv, f, den)?;
        let z = self.d_op(FMul, s, s)?;
        let poly = self.d_horner(z, &LG)?;
        let r = self.d_op(FMul, z, poly)?;
        // s·(hfsq + R) + k·ln2_lo − hfsq + f + k·ln2_hi, in fdlibm's order.
        let (c_hi, c_lo) = (self.c64(LN2_HI)?, self.c64(LN2_LO)?);
        let a = self.d_op(FAdd, hfsq, r)?;
        let a = self.d_op(FMul, s, a)?;
        let klo = self.d_op(FMul, dk, c_lo)?;
        let a = self.d_op(FAdd, a, klo)?;
        let a = self.d_op(FSub, a, hfsq)?;
        let a = self.d_op(FAdd, a, f)?;
        let khi = self.d_op(FMul, dk, c_hi)?;
        let mut res = self.d_op(FAdd, a, khi)?;
        // Special values: +inf, ±0, negative and NaN.
        let inf = self.c64(f64::INFINITY)?;
        let is_inf = self.b.f_ord_equal(bool_t, None, x, inf);
        let is_inf = self.ok(is_inf)?;
        res = self.d_select(is_inf, inf, res)?;
        let zero = self.c64(0.0)?;
        let is_zero = self.b.f_ord_equal(bool_t, None, x, zero);
        let is_zero = self.ok(is_zero)?;
        let minus_inf = self.c64(f64::NEG_INFINITY)?;
        res = self.d_select(is_zero, minus_inf, res)?;
        let neg = self.d_lt(x, zero)?;
        let nan = self.c64(f64::NAN)?;
        res = self.d_select(neg, nan, res)?;
        let xn = self.b.is_nan(bool_t, None, x);
        let xn = self.ok(xn)?;
        self.d_select(xn, x, res)
    }

    /// `log(1 + u)` (see the module doc).
    fn log1p_f64(&mut self, u: Word) -> Result<Word> {
        use rspirv::spirv::Op::{FAdd, FDiv, FMul, FSub};
        let bool_t = self.ty(DType::Bool)?;
        let one = self.c64(1.0)?;
        let w = self.d_op(FAdd, one, u)?;
        let l = self.log_f64(w)?;
        let wm = self.d_op(FSub, w, one)?;
        let q = self.d_op(FDiv, u, wm)?;
        let r = self.d_op(FMul, l, q)?;
        let tiny = self.b.f_ord_equal(bool_t, None, w, one);
        let tiny = self.ok(tiny)?;
        let r = self.d_select(tiny, u, r)?;
        let inf = self.b.is_inf(bool_t, None, u);
        let inf = self.ok(inf)?;
        let r = self.d_select(inf, l, r)?;
        Ok(r)
    }

    /// `|r|` with the sign of `x` (float64).
    fn d_copysign(&mut self, x: Word, r: Word) -> Result<Word> {
        let t = self.ty(D)?;
        let u = self.float_bits_ty(D)?;
        let bx = self.b.bitcast(u, None, x);
        let bx = self.ok(bx)?;
        let br = self.b.bitcast(u, None, r);
        let br = self.ok(br)?;
        let sign = self.constant_u64(1 << 63, u);
        let mag = self.constant_u64(!(1 << 63), u);
        let s = self.b.bitwise_and(u, None, bx, sign);
        let s = self.ok(s)?;
        let m = self.b.bitwise_and(u, None, br, mag);
        let m = self.ok(m)?;
        let o = self.b.bitwise_or(u, None, s, m);
        let o = self.ok(o)?;
        let r = self.b.bitcast(t, None, o);
        self.ok(r)
    }

    /// `atan(x)` on float64 (see the module doc).
    fn atan_f64(&mut self, x: Word) -> Result<Word> {
        use rspirv::spirv::Op::{FAdd, FDiv, FMul, FSub};
        let a = self.glsl_of(D, Glsl::FAbs, &[x])?;
        let one = self.c64(1.0)?;
        let inv = self.d_lt(one, a)?;
        let ra = self.d_op(FDiv, one, a)?;
        let mut t = self.d_select(inv, ra, a)?;
        for _ in 0..2 {
            let tt = self.d_op(FMul, t, t)?;
            let w = self.d_op(FAdd, one, tt)?;
            let root = self.glsl_of(D, Glsl::Sqrt, &[w])?;
            let den = self.d_op(FAdd, one, root)?;
            t = self.d_op(FDiv, t, den)?;
        }
        let z = self.d_op(FMul, t, t)?;
        let coeffs: Vec<f64> = (0..13)
            .map(|n| if n % 2 == 0 { 1.0 } else { -1.0 } / (2 * n + 1) as f64)
            .collect();
        let p = self.d_horner(z, &coeffs)?;
        let p = self.d_op(FMul, t, p)?;
        let four = self.c64(4.0)?;
        let r = self.d_op(FMul, p, four)?;
        let half_pi = self.c64(std::f64::consts::FRAC_PI_2)?;
        let rr = self.d_op(FSub, half_pi, r)?;
        let r = self.d_select(inv, rr, r)?;
        self.d_copysign(x, r)
    }

    /// A trigonometric function on float64 `x` (see the module doc); `None` for those
    /// without a sequence here (`sin`, `cos`, `tan`).
    pub(super) fn trig_f64(&mut self, t: Trig, x: Word) -> Result<Option<Word>> {
        use rspirv::spirv::Op::{FAdd, FDiv, FMul, FSub};
        let a = self.glsl_of(D, Glsl::FAbs, &[x])?;
        let (one, two, half) = (self.c64(1.0)?, self.c64(2.0)?, self.c64(0.5)?);
        let exps = |g: &mut Self| -> Result<(Word, Word)> {
            let e = g.exp_f64(a)?;
            let inv = g.d_op(FDiv, one, e)?;
            Ok((e, inv))
        };
        Ok(Some(match t {
            Trig::Sinh => {
                let (e, inv) = exps(self)?;
                let d = self.d_op(FSub, e, inv)?;
                let big = self.d_op(FMul, d, half)?;
                let z = self.d_op(FMul, a, a)?;
                let mut coeffs = [1.0f64; 9];
                for n in 1..9 {
                    coeffs[n] = coeffs[n - 1] / ((2 * n) * (2 * n + 1)) as f64;
                }
                let p = self.d_horner(z, &coeffs)?;
                let small = self.d_op(FMul, a, p)?;
                let lt = self.d_lt(a, one)?;
                let r = self.d_select(lt, small, big)?;
                self.d_copysign(x, r)?
            }
            Trig::Cosh => {
                let (e, inv) = exps(self)?;
                let s = self.d_op(FAdd, e, inv)?;
                self.d_op(FMul, s, half)?
            }
            Trig::Asinh => {
                let aa = self.d_op(FMul, a, a)?;
                let w = self.d_op(FAdd, one, aa)?;
                let root = self.glsl_of(D, Glsl::Sqrt, &[w])?;
                let den = self.d_op(FAdd, one, root)?;
                let q = self.d_op(FDiv, aa, den)?;
                let u = self.d_op(FAdd, a, q)?;
                // (inf/inf above is not a number; asinh(inf) is inf.)
                let bool_t = self.ty(DType::Bool)?;
                let inf = self.b.is_inf(bool_t, None, a);
                let inf = self.ok(inf)?;
                let u = self.d_select(inf, a, u)?;
                let r = self.log1p_f64(u)?;
                self.d_copysign(x, r)?
            }
            Trig::Acosh => {
                let tt = self.d_op(FSub, x, one)?;
                let t2 = self.d_op(FAdd, tt, two)?;
                let p = self.d_op(FMul, tt, t2)?;
                let root = self.glsl_of(D, Glsl::Sqrt, &[p])?;
                let u = self.d_op(FAdd, tt, root)?;
                let r = self.log1p_f64(u)?;
                // Below 1 the form is finite; acosh is not defined there.
                let below = self.d_lt(x, one)?;
                let nan = self.c64(f64::NAN)?;
                self.d_select(below, nan, r)?
            }
            Trig::Atanh => {
                let den = self.d_op(FSub, one, a)?;
                let a2 = self.d_op(FAdd, a, a)?;
                let u = self.d_op(FDiv, a2, den)?;
                let l = self.log1p_f64(u)?;
                let r = self.d_op(FMul, l, half)?;
                self.d_copysign(x, r)?
            }
            Trig::Atan => self.atan_f64(x)?,
            Trig::Asin => {
                let xx = self.d_op(FMul, x, x)?;
                let w = self.d_op(FSub, one, xx)?;
                let root = self.glsl_of(D, Glsl::Sqrt, &[w])?;
                let q = self.d_op(FDiv, x, root)?;
                self.atan_f64(q)?
            }
            Trig::Acos => {
                let num = self.d_op(FSub, one, x)?;
                let den = self.d_op(FAdd, one, x)?;
                let q = self.d_op(FDiv, num, den)?;
                let root = self.glsl_of(D, Glsl::Sqrt, &[q])?;
                let r = self.atan_f64(root)?;
                self.d_op(FMul, r, two)?
            }
            Trig::Sin | Trig::Cos | Trig::Tan => return Ok(None),
        }))
    }
}
