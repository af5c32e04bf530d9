//! float64 `exp` and `log`, which GLSL.std.450 has for 16- and 32-bit floats only, from
//! them the hyperbolic functions and their inverses, the inverse circular ones, and
//! `sin`, `cos`, `tan` of float32 arguments:
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
//!   a product and so follow the device's float64 denormal mode (0 where it flushes).
//! - `log(x)`: fdlibm's `e_log.c` (as musl's `log`): `x = 2^k·m` with `m` in
//!   `[√2/2, √2]` (a subnormal `x` scaled by `2^54` first), `f = m − 1`, `s = f/(2+f)`,
//!   `log(1+f) = f − (f²/2 − s·(f²/2 + R(s²)))` with fdlibm's degree-14 minimax `R`
//!   (error below `2^-58.45`), plus `k·ln2` in two parts. Error: below 1 ulp as fdlibm
//!   states; within 2 ulp is what the test checks against the platform's `ln`. `x < 0`
//!   and NaN give NaN, `±0` `-inf`, `+inf` `+inf`.
//! - `sigmoid` in the interpreter's stable form (`e = exp(-|x|)`, `1/(1+e)` or
//!   `e/(1+e)`): within 4 ulp; `tanh(x) = sinh(x)/cosh(x)` with the sequences below (no
//!   cancellation near 0), `±1` beyond `|x| = 22` (where it rounds to 1): within 6 ulp.
//!   Both are float64 only (the other floats use GLSL-based float32 forms).
//! - `log1p(u) = log(1+u)·u/((1+u)−1)` (Goldberg's form: exact-argument correction,
//!   a few ulp), `u` itself where `1+u` rounds to 1.
//! - `sinh`, `cosh`: `(e^a ∓ e^-a)/2` of `a = |x|`, and below `a = 1` sinh's Taylor
//!   polynomial to `x^17` (truncation below `1e-17` relative), so no cancellation;
//!   `asinh(a) = log1p(a + a²/(1 + √(1+a²)))`, `acosh(x) = log1p(t + √(t·(t+2)))` with
//!   `t = x − 1` (NaN below 1), `atanh(a) = log1p(2a/(1−a))/2`; the odd ones take `x`'s
//!   sign; past `2^28` `asinh` and `acosh` are `log(2a)` (the forms' `a²` would
//!   overflow a float64).
//! - `atan`: `|x| > 1` through `π/2 − atan(1/|x|)`, then two halvings
//!   `t/(1 + √(1+t²))` (`atan t = 2·atan` of it) down to `|t| ≤ tan(π/16)`, and the
//!   Taylor series to `t^25` (truncation below `1e-18` relative); `asin(x) =
//!   atan(x/√((1−x)(1+x)))`, `acos(x) = 2·atan(√((1−x)/(1+x)))` (no cancellation near
//!   1). NaN outside `[-1, 1]`.
//! - `sin`, `cos`, `tan` of a float32 `x` (exact in float64): `|x| = (n + f)·π/2`,
//!   `|f| ≤ 1/2`, then `r = f·π/2` and the Taylor polynomials of `sin r`, `cos r` (to
//!   `r^19`, truncation below `1e-18`), picked and signed by `n mod 4` (`tan = sin/cos`).
//!   Below `2^28·π/2` the reduction is musl's `__rem_pio2f` (`k = roundEven(x·2/π)`,
//!   `x − k·pio2_1 − k·pio2_1t` with a 25-bit `pio2_1`: exact products, 25+53 bits of
//!   `π/2`, enough for every float32 there as musl states); above, Payne–Hanek in
//!   integers: the float32's 24-bit significand times five 24-bit chunks of `2/π`'s
//!   bits (a table checked against a Machin computation), each 48-bit product shifted
//!   into a 64-bit fixed-point number with 2 integer bits (the wrapping of the
//!   additions drops whole turns), which gives `n` and `f` to within 2^-61 of a quarter
//!   turn. Infinite and NaN `x` give NaN.
//!
//! On float64 arguments all but `sin`, `cos`, `tan` (whose reduction needs a float32
//! argument) serve float64 itself, within the bounds the tests check against the
//! platform's `f64` functions: `sinh`, `cosh` 4 ulp, `asinh`, `acosh`, `atanh`, `atan`,
//! `asin`, `acos` 8 ulp.
//!
//! All of them serve float32 (and float16, bfloat16) arguments, which convert to
//! float64 exactly: the float64 result is within a few float64 ulp, so the rounded
//! float32 result is within 1 float32 ulp (the test checks that against the platform's
//! `f64` functions rounded to `f32`).

use kiln_executor::Result;
use kiln_ir::DType;
use kiln_te::tir::Trig;
use rspirv::spirv::{GlslStd450Op as Glsl, Word};

use super::Gen;

const D: DType = DType::F64;
/// `ln 2` in two parts, fdlibm's: the high part has 32 significant bits.
const LN2_HI: f64 = 6.931_471_803_691_238_164_90e-1;
const LN2_LO: f64 = 1.908_214_929_270_587_700_02e-10;
/// musl's `__rem_pio2f`: the first 25 bits of `π/2`, and the rest.
const PIO2_1: f64 = 1.570_796_310_901_641_845_70;
const PIO2_1T: f64 = 1.589_325_477_352_819_669_16e-8;
/// The bits of `2/π` in 24-bit chunks (fdlibm's `ipio2`; equal to a Machin-formula
/// computation of `2/π` to 400 bits).
const TWO_OVER_PI: [u32; 9] = [
    0xa2_f983, 0x6e_4e44, 0x15_29fc, 0x27_57d1, 0xf5_34dd, 0xc0_db62, 0x95_993c, 0x43_9041,
    0xfe_5163,
];
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

    /// `log(2·a)` where `a > 2^28` (there `asinh(a)` and `acosh(a)` are `log(2a)` to
    /// float64 precision, and their forms' `a²` may overflow), `r` elsewhere.
    fn log_of_twice_past_2_28(&mut self, a: Word, r: Word) -> Result<Word> {
        use rspirv::spirv::Op::FAdd;
        let l = self.log_f64(a)?;
        let ln2 = self.c64(std::f64::consts::LN_2)?;
        let l = self.d_op(FAdd, l, ln2)?;
        let big_c = self.c64(2f64.powi(28))?;
        let big = self.d_lt(big_c, a)?;
        self.d_select(big, l, r)
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

    /// The logistic function on float64 (see the module doc).
    pub(super) fn sigmoid_f64(&mut self, x: Word) -> Result<Word> {
        use rspirv::spirv::Op::{FAdd, FDiv};
        let bool_t = self.ty(DType::Bool)?;
        let a = self.glsl_of(D, Glsl::FAbs, &[x])?;
        let t = self.ty(D)?;
        let na = self.b.f_negate(t, None, a);
        let na = self.ok(na)?;
        let e = self.exp_f64(na)?;
        let (one, zero) = (self.c64(1.0)?, self.c64(0.0)?);
        let den = self.d_op(FAdd, one, e)?;
        let pos = self.b.f_ord_greater_than_equal(bool_t, None, x, zero);
        let pos = self.ok(pos)?;
        let num = self.d_select(pos, one, e)?;
        self.d_op(FDiv, num, den)
    }

    /// `tanh` on float64 (see the module doc).
    pub(super) fn tanh_f64(&mut self, x: Word) -> Result<Word> {
        use rspirv::spirv::Op::FDiv;
        let a = self.glsl_of(D, Glsl::FAbs, &[x])?;
        let s = self.trig_f64(Trig::Sinh, a)?;
        let c = self.trig_f64(Trig::Cosh, a)?;
        let q = self.d_op(FDiv, s, c)?;
        let (one, far) = (self.c64(1.0)?, self.c64(22.0)?);
        let big = self.d_lt(far, a)?;
        let r = self.d_select(big, one, q)?;
        self.d_copysign(x, r)
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

    /// `|x| = (n + f)·π/2` for a float64 `x` holding a float32 value: `n mod 4` (int64)
    /// and `r = f·π/2` (see the module doc).
    fn reduce_pio2(&mut self, a: Word) -> Result<(Word, Word)> {
        use rspirv::spirv::Op::{FMul, FSub};
        let bool_t = self.ty(DType::Bool)?;
        let i64t = self.ty(DType::I64)?;
        let u = self.b.type_int(64, 0);
        let t = self.ty(D)?;
        let int = |g: &mut Self, v: i64| g.const_int(v, DType::I64);
        // Medium: musl's __rem_pio2f.
        let invpio2 = self.c64(std::f64::consts::FRAC_2_PI)?;
        let (p1, p1t) = (self.c64(PIO2_1)?, self.c64(PIO2_1T)?);
        let k = self.d_op(FMul, a, invpio2)?;
        let k = self.glsl_of(D, Glsl::RoundEven, &[k])?;
        let big_c = self.c64(2f64.powi(28) * std::f64::consts::FRAC_PI_2)?;
        let medium = self.d_lt(a, big_c)?;
        let zero = self.c64(0.0)?;
        let k = self.d_select(medium, k, zero)?;
        let kp = self.d_op(FMul, k, p1)?;
        let r_med = self.d_op(FSub, a, kp)?;
        let kpt = self.d_op(FMul, k, p1t)?;
        let r_med = self.d_op(FSub, r_med, kpt)?;
        let n_med = self.b.convert_f_to_s(i64t, None, k);
        let n_med = self.ok(n_med)?;
        // Large: Payne–Hanek on the float32 bits (a is a float32's value, >= 2^28).
        let f32t = self.ty(DType::F32)?;
        let narrow = self.b.f_convert(f32t, None, a);
        let narrow = self.ok(narrow)?;
        let i32t = self.ty(DType::I32)?;
        let bits = self.b.bitcast(i32t, None, narrow);
        let bits = self.ok(bits)?;
        let bits = self.b.s_convert(i64t, None, bits);
        let bits = self.ok(bits)?;
        let (c23, mmask, hidden) = (int(self, 23)?, int(self, 0x7f_ffff)?, int(self, 0x80_0000)?);
        let m = self.b.bitwise_and(i64t, None, bits, mmask);
        let m = self.ok(m)?;
        let m = self.b.bitwise_or(i64t, None, m, hidden);
        let m = self.ok(m)?;
        let biased = self.b.shift_right_arithmetic(i64t, None, bits, c23);
        let biased = self.ok(biased)?;
        let c255 = int(self, 255)?;
        let biased = self.b.bitwise_and(i64t, None, biased, c255);
        let biased = self.ok(biased)?;
        // x = m·2^e; chunk j of 2/π weighs 2^-(24(j+1)); the term's shift into the
        // 62-fraction-bit number is s_j = e + 38 - 24j; the first chunk taken is the
        // first with s_j < 64: j0 = max(0, ceil((e - 25)/24)).
        let c150 = int(self, 150)?;
        let e = self.b.i_sub(i64t, None, biased, c150);
        let e = self.ok(e)?;
        let c2 = int(self, 2)?;
        let num = self.b.i_sub(i64t, None, e, c2);
        let num = self.ok(num)?;
        let c24 = int(self, 24)?;
        let j0 = self.b.s_div(i64t, None, num, c24);
        let j0 = self.ok(j0)?;
        // (e - 2)/24 truncated equals ceil((e - 25)/24) for e >= 2; e >= 5 here.
        let (c0, c4) = (int(self, 0)?, int(self, 4)?);
        let lo = self.b.s_less_than(bool_t, None, j0, c0);
        let lo = self.ok(lo)?;
        let j0 = self.b.select(i64t, None, lo, c0, j0);
        let j0 = self.ok(j0)?;
        let hi = self.b.s_greater_than(bool_t, None, j0, c4);
        let hi = self.ok(hi)?;
        let j0 = self.b.select(i64t, None, hi, c4, j0);
        let j0 = self.ok(j0)?;
        let c38 = int(self, 38)?;
        let s0 = self.b.i_add(i64t, None, e, c38);
        let s0 = self.ok(s0)?;
        let j24 = self.b.i_mul(i64t, None, j0, c24);
        let j24 = self.ok(j24)?;
        let s0 = self.b.i_sub(i64t, None, s0, j24);
        let s0 = self.ok(s0)?;
        let mut acc = self.constant_u64(0, u);
        for i in 0..5 {
            // chunk j0 + i, picked from the table by a chain of selects.
            let mut c = int(self, TWO_OVER_PI[i] as i64)?;
            for j in 1..=4 {
                let jc = int(self, j as i64)?;
                let is = self.b.i_equal(bool_t, None, j0, jc);
                let is = self.ok(is)?;
                let v = int(self, TWO_OVER_PI[j + i] as i64)?;
                let r = self.b.select(i64t, None, is, v, c);
                c = self.ok(r)?;
            }
            let prod = self.b.i_mul(i64t, None, m, c);
            let prod = self.ok(prod)?;
            let ci = int(self, 24 * i as i64)?;
            let sh = self.b.i_sub(i64t, None, s0, ci);
            let sh = self.ok(sh)?;
            // Left by sh (0 <= sh < 64) or right by -sh (the bits below 2^-62 dropped;
            // a shift of 64 or more is 0).
            let up = self.b.shift_left_logical(i64t, None, prod, sh);
            let up = self.ok(up)?;
            let nsh = self.b.s_negate(i64t, None, sh);
            let nsh = self.ok(nsh)?;
            let down = self.b.shift_right_logical(i64t, None, prod, nsh);
            let down = self.ok(down)?;
            let neg = self.b.s_less_than(bool_t, None, sh, c0);
            let neg = self.ok(neg)?;
            let v = self.b.select(i64t, None, neg, down, up);
            let v = self.ok(v)?;
            let c64_ = int(self, 64)?;
            let gone_up = self.b.s_greater_than_equal(bool_t, None, sh, c64_);
            let gone_up = self.ok(gone_up)?;
            let cm64 = int(self, -64)?;
            let gone_down = self.b.s_less_than_equal(bool_t, None, sh, cm64);
            let gone_down = self.ok(gone_down)?;
            let gone = self.b.logical_or(bool_t, None, gone_up, gone_down);
            let gone = self.ok(gone)?;
            let v = self.b.select(i64t, None, gone, c0, v);
            let v = self.ok(v)?;
            let v = self.b.bitcast(u, None, v);
            let v = self.ok(v)?;
            let r = self.b.i_add(u, None, acc, v);
            acc = self.ok(r)?;
        }
        // acc = (n + frac)·2^62 mod 2^64; round to the nearest n (the wrapping add of
        // 2^61 carries into n), then f = (acc + 2^61 mod 2^62) - 2^61 in [-1/2, 1/2).
        let acc = self.b.bitcast(i64t, None, acc);
        let acc = self.ok(acc)?;
        let half_turn = int(self, 1 << 61)?;
        let shifted = self.b.i_add(i64t, None, acc, half_turn);
        let shifted = self.ok(shifted)?;
        let c62 = int(self, 62)?;
        let n_big = self.b.shift_right_logical(i64t, None, shifted, c62);
        let n_big = self.ok(n_big)?;
        let fmask = int(self, (1 << 62) - 1)?;
        let fr = self.b.bitwise_and(i64t, None, shifted, fmask);
        let fr = self.ok(fr)?;
        let fr = self.b.i_sub(i64t, None, fr, half_turn);
        let fr = self.ok(fr)?;
        let fr = self.b.convert_s_to_f(t, None, fr);
        let fr = self.ok(fr)?;
        let scale = self.c64(std::f64::consts::FRAC_PI_2 / 2f64.powi(62))?;
        let r_big = self.d_op(FMul, fr, scale)?;
        let n = self.b.select(i64t, None, medium, n_med, n_big);
        let n = self.ok(n)?;
        let c3 = int(self, 3)?;
        let n = self.b.bitwise_and(i64t, None, n, c3);
        let n = self.ok(n)?;
        let r = self.d_select(medium, r_med, r_big)?;
        Ok((n, r))
    }

    /// `sin`, `cos` or `tan` of a float64 `x` holding a float32 value.
    fn circular_f64(&mut self, t: Trig, x: Word) -> Result<Word> {
        use rspirv::spirv::Op::{FDiv, FMul};
        let bool_t = self.ty(DType::Bool)?;
        let i64t = self.ty(DType::I64)?;
        let a = self.glsl_of(D, Glsl::FAbs, &[x])?;
        let (n, r) = self.reduce_pio2(a)?;
        let z = self.d_op(FMul, r, r)?;
        let mut sc = [1.0f64; 10];
        let mut cc = [1.0f64; 10];
        for k in 1..10 {
            let (a2, b2) = ((2 * k) as f64, (2 * k + 1) as f64);
            sc[k] = -sc[k - 1] / (a2 * b2);
            cc[k] = -cc[k - 1] / ((a2 - 1.0) * a2);
        }
        let sp = self.d_horner(z, &sc)?;
        let sin_r = self.d_op(FMul, r, sp)?;
        let cos_r = self.d_horner(z, &cc)?;
        let tp = self.ty(D)?;
        let neg = |g: &mut Self, v: Word| -> Result<Word> {
            let r = g.b.f_negate(tp, None, v);
            g.ok(r)
        };
        let is = |g: &mut Self, k: i64| -> Result<Word> {
            let c = g.const_int(k, DType::I64)?;
            let r = g.b.i_equal(bool_t, None, n, c);
            g.ok(r)
        };
        let _ = i64t;
        let (n1, n2, n3) = (is(self, 1)?, is(self, 2)?, is(self, 3)?);
        let (ms, mc) = (neg(self, sin_r)?, neg(self, cos_r)?);
        // sin(|x|) by quadrant: sin r, cos r, -sin r, -cos r.
        let pick = |g: &mut Self, v: [Word; 4]| -> Result<Word> {
            let r = g.d_select(n1, v[1], v[0])?;
            let r = g.d_select(n2, v[2], r)?;
            g.d_select(n3, v[3], r)
        };
        let s = pick(self, [sin_r, cos_r, ms, mc])?;
        let c = pick(self, [cos_r, ms, mc, sin_r])?;
        let r = match t {
            Trig::Sin => self.d_copysign_odd(x, s)?,
            Trig::Cos => c,
            _ => {
                let q = self.d_op(FDiv, s, c)?;
                self.d_copysign_odd(x, q)?
            }
        };
        let inf = self.b.is_inf(bool_t, None, x);
        let inf = self.ok(inf)?;
        let nan_x = self.b.is_nan(bool_t, None, x);
        let nan_x = self.ok(nan_x)?;
        let bad = self.b.logical_or(bool_t, None, inf, nan_x);
        let bad = self.ok(bad)?;
        let nan = self.c64(f64::NAN)?;
        self.d_select(bad, nan, r)
    }

    /// `f(|x|)` turned into `f(x)` for an odd `f`: its sign bit flipped by `x`'s (so
    /// `f(-0) = -0`).
    fn d_copysign_odd(&mut self, x: Word, v: Word) -> Result<Word> {
        let t = self.ty(D)?;
        let u = self.float_bits_ty(D)?;
        let bx = self.b.bitcast(u, None, x);
        let bx = self.ok(bx)?;
        let bv = self.b.bitcast(u, None, v);
        let bv = self.ok(bv)?;
        let sign = self.constant_u64(1 << 63, u);
        let s = self.b.bitwise_and(u, None, bx, sign);
        let s = self.ok(s)?;
        let o = self.b.bitwise_xor(u, None, bv, s);
        let o = self.ok(o)?;
        let r = self.b.bitcast(t, None, o);
        self.ok(r)
    }

    /// A trigonometric function of float64 `x` holding a float32 value (see the module
    /// doc).
    pub(super) fn trig_f64(&mut self, t: Trig, x: Word) -> Result<Word> {
        use rspirv::spirv::Op::{FAdd, FDiv, FMul, FSub};
        let a = self.glsl_of(D, Glsl::FAbs, &[x])?;
        let (one, two, half) = (self.c64(1.0)?, self.c64(2.0)?, self.c64(0.5)?);
        let exps = |g: &mut Self| -> Result<(Word, Word)> {
            let e = g.exp_f64(a)?;
            let inv = g.d_op(FDiv, one, e)?;
            Ok((e, inv))
        };
        Ok(match t {
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
                let r = self.log1p_f64(u)?;
                let r = self.log_of_twice_past_2_28(a, r)?;
                self.d_copysign(x, r)?
            }
            Trig::Acosh => {
                let tt = self.d_op(FSub, x, one)?;
                let t2 = self.d_op(FAdd, tt, two)?;
                let p = self.d_op(FMul, tt, t2)?;
                let root = self.glsl_of(D, Glsl::Sqrt, &[p])?;
                let u = self.d_op(FAdd, tt, root)?;
                let r = self.log1p_f64(u)?;
                let r = self.log_of_twice_past_2_28(x, r)?;
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
                // (1 - x)(1 + x): both factors exact for |x| >= 1/2, no cancellation.
                let lo = self.d_op(FSub, one, x)?;
                let hi = self.d_op(FAdd, one, x)?;
                let w = self.d_op(FMul, lo, hi)?;
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
            Trig::Sin | Trig::Cos | Trig::Tan => self.circular_f64(t, x)?,
        })
    }
}
