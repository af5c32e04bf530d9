//! The loop IR's math intrinsics on float32 values (float16 and bfloat16 values computed
//! in float32 and rounded back, as the interpreter does), from GLSL.std.450 and core
//! instructions; on float64 the exact ones (`abs`, `floor`, `ceil`, `sqrt`, `rsqrt`,
//! `fma`) and `exp`, `log`, `sigmoid`, `tanh` ([`super::math64`]); the trigonometric functions of float32
//! (float16, bfloat16) values in float64 ([`super::math64`]).
//!
//! Exact where Vulkan promises it or where the form is exact: `abs`, `floor`, `ceil`,
//! `rsqrt` as `1 / sqrt(x)` (the interpreter's two roundings; `InverseSqrt` is an
//! approximation). `sqrt` and `fma` are GLSL's (Vulkan allows `sqrt` the error of
//! `1/inversesqrt`, and `fma` to be unfused; Mesa's lavapipe computes both exactly).
//! `exp` is kiln's own, because GLSL's `Exp` may lose `|x|·2⁻²⁴` (Vulkan allows
//! `3 + 2·|x|` ulp; lavapipe is 30 ulp off at `x = -65`) and flushes results below the
//! smallest normal float on drivers that flush denormals (lavapipe does): `x = k·ln2 + r`
//! with `k` rounded and `r` reduced in two steps (Cody–Waite, `k·ln2_hi` exact), `e^r` by
//! its Taylor polynomial to degree 7 (`|r| ≤ ln2/2`: truncation below 6e-9), scaled by
//! `2^k` in two exponent-field factors, or, when the result is subnormal, built as the
//! integer `round(e^r·2^(k+149))` in the subnormal bits, so it never depends on the
//! device's denormal mode. `log` and `pow` use GLSL's `Log`/`Log2`/`Exp2` (Vulkan: 3 ulp,
//! or `2⁻²¹` absolute near 1), inside the op tolerances (`TRANSC`: 1e-6 absolute + 2e-5
//! relative). Forms that stay finite:
//! - `tanh(x) = sign(x)·(1 − 2/(exp(2|x|) + 1))` (GLSL's `Tanh` may be `sinh/cosh`,
//!   NaN for large `|x|`);
//! - `sigmoid` in the interpreter's stable form (`exp(-|x|)`, never overflowing);
//! - `erf` by a Taylor polynomial below 0.5 and Abramowitz–Stegun 7.1.26 above
//!   (absolute error 1.5e-7);
//! - `pow(x, y) = 2^(y·log2|x|)` with the sign and the special cases of `powf`
//!   (`y = 0`, `x = 1`, negative `x` with integer `y`, `x = -inf`), as GLSL's `Pow` is
//!   undefined for `x < 0`.

use kiln_executor::Result;
use kiln_ir::DType;
use kiln_te::tir::{Intrinsic, Trig};
use rspirv::dr::Operand;
use rspirv::spirv::{GlslStd450Op as Glsl, Word};

use super::{Gen, Val};

/// The trigonometric functions [`super::math64`] computes for float32 arguments only
/// (its reduction modulo `π/2` takes a float32).
pub(crate) const CIRCULAR: [Trig; 3] = [Trig::Sin, Trig::Cos, Trig::Tan];

impl Gen<'_> {
    /// `intrinsic(args)`.
    pub(crate) fn intrinsic(&mut self, intrinsic: Intrinsic, args: Vec<Val>) -> Result<Val> {
        if args.len() != intrinsic.arity() {
            return Err(self.err(format!(
                "`{}` takes {} arguments, got {}",
                intrinsic.name(),
                intrinsic.arity(),
                args.len()
            )));
        }
        let d = args[0].dtype;
        if args.iter().any(|a| a.dtype != d) {
            return Err(self.err(format!(
                "arguments of `{}` differ in type",
                intrinsic.name()
            )));
        }
        if !d.is_float() {
            if intrinsic == Intrinsic::Abs && d.is_int() {
                // Wrapping: |MIN| is MIN, as `wrapping_abs`.
                let t = self.ty(d)?;
                let bool_t = self.ty(DType::Bool)?;
                let x = args[0].id;
                let zero = self.const_int(0, d)?;
                let neg = self.b.s_less_than(bool_t, None, x, zero);
                let neg = self.ok(neg)?;
                let nx = self.b.i_sub(t, None, zero, x);
                let nx = self.ok(nx)?;
                let r = self.b.select(t, None, neg, nx, x);
                let id = self.ok(r)?;
                return self.narrow(Val { id, dtype: d });
            }
            return Err(self.err(format!("`{}` on {d}", intrinsic.name())));
        }
        let x = args[0].id;
        if d == DType::F64 {
            return self.intrinsic_f64(intrinsic, &args);
        }
        let id = match intrinsic {
            Intrinsic::Exp => self.exp(x)?,
            Intrinsic::Log => self.glsl(Glsl::Log, &[x])?,
            Intrinsic::Sqrt => self.glsl(Glsl::Sqrt, &[x])?,
            Intrinsic::Rsqrt => {
                let s = self.glsl(Glsl::Sqrt, &[x])?;
                let one = self.const_f32(1.0);
                self.fdiv(one, s)?
            }
            Intrinsic::Tanh => self.tanh(x)?,
            Intrinsic::Sigmoid => self.sigmoid(x)?,
            Intrinsic::Erf => self.erf(x)?,
            Intrinsic::Fma => self.glsl(Glsl::Fma, &[x, args[1].id, args[2].id])?,
            Intrinsic::Pow => self.pow(x, args[1].id)?,
            Intrinsic::Abs => self.glsl(Glsl::FAbs, &[x])?,
            Intrinsic::Floor => self.glsl(Glsl::Floor, &[x])?,
            Intrinsic::Ceil => self.glsl(Glsl::Ceil, &[x])?,
            // In float64 ([`super::math64`]): GLSL.std.450's have no error bound in the
            // specification.
            Intrinsic::Trig(t) => self.trig_via_f64(t, x)?,
        };
        self.narrow(Val { id, dtype: d })
    }

    /// A float64 intrinsic: the exact ones from GLSL.std.450 (which has `Exp`, `Log`,
    /// `Pow`, `Tanh` only for 16- and 32-bit floats), `exp`, `log`, `sigmoid` and `tanh`
    /// from [`super::math64`].
    fn intrinsic_f64(&mut self, intrinsic: Intrinsic, args: &[Val]) -> Result<Val> {
        let d = DType::F64;
        let x = args[0].id;
        let id = match intrinsic {
            Intrinsic::Exp => self.exp_f64(x)?,
            Intrinsic::Log => self.log_f64(x)?,
            Intrinsic::Sigmoid => self.sigmoid_f64(x)?,
            Intrinsic::Tanh => self.tanh_f64(x)?,
            Intrinsic::Trig(t) if !CIRCULAR.contains(&t) => self.trig_f64(t, x)?,
            Intrinsic::Sqrt => self.glsl_of(d, Glsl::Sqrt, &[x])?,
            Intrinsic::Rsqrt => {
                let s = self.glsl_of(d, Glsl::Sqrt, &[x])?;
                let one = self.const_float(1.0, d)?;
                let t = self.ty(d)?;
                let r = self.b.f_div(t, None, one, s);
                let r = self.ok(r)?;
                self.exact(r)
            }
            Intrinsic::Fma => self.glsl_of(d, Glsl::Fma, &[x, args[1].id, args[2].id])?,
            Intrinsic::Abs => self.glsl_of(d, Glsl::FAbs, &[x])?,
            Intrinsic::Floor => self.glsl_of(d, Glsl::Floor, &[x])?,
            Intrinsic::Ceil => self.glsl_of(d, Glsl::Ceil, &[x])?,
            other => {
                return Err(self.err(format!(
                    "`{}` on float64 (GLSL.std.450 has it for 16- and 32-bit floats only; \
                     no float64 sequence yet)",
                    other.name()
                )));
            }
        };
        Ok(Val { id, dtype: d })
    }

    /// Trigonometric `t` of float32 `x`, computed in float64 ([`super::math64`]; the
    /// conversions are exact both ways but the final rounding).
    fn trig_via_f64(&mut self, t: Trig, x: Word) -> Result<Word> {
        let d = self.ty(DType::F64)?;
        let f = self.ty(DType::F32)?;
        let wide = self.b.f_convert(d, None, x);
        let wide = self.ok(wide)?;
        let r = self.trig_f64(t, wide)?;
        let r = self.b.f_convert(f, None, r);
        self.ok(r)
    }

    /// A GLSL.std.450 instruction on float32 operands.
    fn glsl(&mut self, op: Glsl, args: &[Word]) -> Result<Word> {
        self.glsl_of(DType::F32, op, args)
    }

    /// A GLSL.std.450 instruction whose operands and result hold float dtype `d`.
    pub(super) fn glsl_of(&mut self, d: DType, op: Glsl, args: &[Word]) -> Result<Word> {
        let f = self.ty(d)?;
        let set = self.glsl;
        let r = self.b.ext_inst(
            f,
            None,
            set,
            op as u32,
            args.iter().map(|&a| Operand::IdRef(a)),
        );
        self.ok(r)
    }

    fn fadd(&mut self, x: Word, y: Word) -> Result<Word> {
        let f = self.ty(DType::F32)?;
        let r = self.b.f_add(f, None, x, y);
        let r = self.ok(r)?;
        Ok(self.exact(r))
    }

    fn fsub(&mut self, x: Word, y: Word) -> Result<Word> {
        let f = self.ty(DType::F32)?;
        let r = self.b.f_sub(f, None, x, y);
        let r = self.ok(r)?;
        Ok(self.exact(r))
    }

    fn fmul(&mut self, x: Word, y: Word) -> Result<Word> {
        let f = self.ty(DType::F32)?;
        let r = self.b.f_mul(f, None, x, y);
        let r = self.ok(r)?;
        Ok(self.exact(r))
    }

    fn fdiv(&mut self, x: Word, y: Word) -> Result<Word> {
        let f = self.ty(DType::F32)?;
        let r = self.b.f_div(f, None, x, y);
        let r = self.ok(r)?;
        Ok(self.exact(r))
    }

    fn fneg(&mut self, x: Word) -> Result<Word> {
        let f = self.ty(DType::F32)?;
        let r = self.b.f_negate(f, None, x);
        self.ok(r)
    }

    fn fselect(&mut self, c: Word, x: Word, y: Word) -> Result<Word> {
        let f = self.ty(DType::F32)?;
        let r = self.b.select(f, None, c, x, y);
        self.ok(r)
    }

    fn fcmp_lt(&mut self, x: Word, y: Word) -> Result<Word> {
        let bool_t = self.ty(DType::Bool)?;
        let r = self.b.f_ord_less_than(bool_t, None, x, y);
        self.ok(r)
    }

    /// `|r|` with the sign bit of `x`.
    fn copysign(&mut self, x: Word, r: Word) -> Result<Word> {
        let f = self.ty(DType::F32)?;
        let u = self.b.type_int(32, 0);
        let bx = self.b.bitcast(u, None, x);
        let bx = self.ok(bx)?;
        let br = self.b.bitcast(u, None, r);
        let br = self.ok(br)?;
        let (sign, mag) = (self.const_u32(0x8000_0000), self.const_u32(0x7fff_ffff));
        let s = self.b.bitwise_and(u, None, bx, sign);
        let s = self.ok(s)?;
        let m = self.b.bitwise_and(u, None, br, mag);
        let m = self.ok(m)?;
        let o = self.b.bitwise_or(u, None, s, m);
        let o = self.ok(o)?;
        let r = self.b.bitcast(f, None, o);
        self.ok(r)
    }

    fn tanh(&mut self, x: Word) -> Result<Word> {
        let a = self.glsl(Glsl::FAbs, &[x])?;
        let a2 = self.fadd(a, a)?;
        let e = self.exp(a2)?;
        let one = self.const_f32(1.0);
        let two = self.const_f32(2.0);
        let q = self.fadd(e, one)?;
        let q = self.fdiv(two, q)?;
        let r = self.fsub(one, q)?;
        self.copysign(x, r)
    }

    fn sigmoid(&mut self, x: Word) -> Result<Word> {
        let a = self.glsl(Glsl::FAbs, &[x])?;
        let na = self.fneg(a)?;
        let e = self.exp(na)?;
        let one = self.const_f32(1.0);
        let zero = self.const_f32(0.0);
        let d = self.fadd(e, one)?;
        let neg = self.fcmp_lt(x, zero)?;
        let num = self.fselect(neg, e, one)?;
        let q = self.fdiv(num, d)?;
        // Below -17, 1 + e rounds to 1 and e / (1 + e) is e itself: taken as it is, so a
        // subnormal e survives a device that flushes subnormal operands.
        let far = self.const_f32(-17.0);
        let tail = self.fcmp_lt(x, far)?;
        self.fselect(tail, e, q)
    }

    /// `e^x` (see the module doc).
    fn exp(&mut self, x: Word) -> Result<Word> {
        let bool_t = self.ty(DType::Bool)?;
        let int = self.ty(DType::I32)?;
        let u = self.b.type_int(32, 0);
        let f = self.ty(DType::F32)?;
        // ln2 = LN2_HI + LN2_LO, LN2_HI with 16 significant bits (k·LN2_HI is exact).
        const LN2_HI: f32 = 0.693_145_751_953_125;
        let ln2_lo = (std::f64::consts::LN_2 - LN2_HI as f64) as f32;
        let log2e = self.const_f32(std::f32::consts::LOG2_E);
        let t = self.fmul(x, log2e)?;
        let k = self.glsl(Glsl::RoundEven, &[t])?;
        // |k| ≤ 160 covers every finite result; beyond, the result is 0 or inf anyway.
        let (lo, hi) = (self.const_f32(-160.0), self.const_f32(160.0));
        let below = self.fcmp_lt(k, lo)?;
        let k = self.fselect(below, lo, k)?;
        let above = self.fcmp_lt(hi, k)?;
        let k = self.fselect(above, hi, k)?;
        let nan = self.b.is_nan(bool_t, None, k);
        let nan = self.ok(nan)?;
        let zero = self.const_f32(0.0);
        let k = self.fselect(nan, zero, k)?;
        let c_hi = self.const_f32(LN2_HI);
        let c_lo = self.const_f32(ln2_lo);
        let kh = self.fmul(k, c_hi)?;
        let r = self.fsub(x, kh)?;
        let kl = self.fmul(k, c_lo)?;
        let r = self.fsub(r, kl)?;
        let p = self.horner(
            r,
            &[
                1.0,
                1.0,
                0.5,
                1.0 / 6.0,
                1.0 / 24.0,
                1.0 / 120.0,
                1.0 / 720.0,
                1.0 / 5040.0,
            ],
        )?;
        let ki = self.b.convert_f_to_s(int, None, k);
        let ki = self.ok(ki)?;
        // 2^n as a float, for n in the normal exponent range.
        let pow2 = |g: &mut Self, n: Word| -> Result<Word> {
            let bias = g.const_i32(127);
            let e = g.b.i_add(int, None, n, bias);
            let e = g.ok(e)?;
            let sh = g.const_i32(23);
            let bits = g.b.shift_left_logical(int, None, e, sh);
            let bits = g.ok(bits)?;
            let r = g.b.bitcast(f, None, bits);
            g.ok(r)
        };
        // Normal results: p · 2^(k/2) · 2^(k - k/2).
        let one_i = self.const_i32(1);
        let k1 = self.b.shift_right_arithmetic(int, None, ki, one_i);
        let k1 = self.ok(k1)?;
        let k2 = self.b.i_sub(int, None, ki, k1);
        let k2 = self.ok(k2)?;
        let s1 = pow2(self, k1)?;
        let s2 = pow2(self, k2)?;
        let normal = self.fmul(p, s1)?;
        let normal = self.fmul(normal, s2)?;
        // Subnormal results: the integer round(p · 2^(k+149)) as the bits.
        let c149 = self.const_i32(149);
        let ks = self.b.i_add(int, None, ki, c149);
        let ks = self.ok(ks)?;
        let lo_k = self.const_i32(-20);
        let clamp = self.b.s_less_than(bool_t, None, ks, lo_k);
        let clamp = self.ok(clamp)?;
        let ks = self.b.select(int, None, clamp, lo_k, ks);
        let ks = self.ok(ks)?;
        // (Normal results take the other path; keep this one's exponent in range.)
        let hi_k = self.const_i32(30);
        let clamp = self.b.s_greater_than(bool_t, None, ks, hi_k);
        let clamp = self.ok(clamp)?;
        let ks = self.b.select(int, None, clamp, hi_k, ks);
        let ks = self.ok(ks)?;
        let sk = pow2(self, ks)?;
        let m = self.fmul(p, sk)?;
        let m = self.glsl(Glsl::RoundEven, &[m])?;
        let small_p = self.b.is_nan(bool_t, None, m);
        let small_p = self.ok(small_p)?;
        let m = self.fselect(small_p, zero, m)?;
        let mu = self.b.convert_f_to_u(u, None, m);
        let mu = self.ok(mu)?;
        let sub = self.b.bitcast(f, None, mu);
        let sub = self.ok(sub)?;
        let min_k = self.const_i32(-126);
        let is_sub = self.b.s_less_than(bool_t, None, ki, min_k);
        let is_sub = self.ok(is_sub)?;
        let r = self.fselect(is_sub, sub, normal)?;
        // Far below: 0 (the polynomial of -inf is not a number); NaN stays NaN.
        let floor = self.const_f32(-104.0);
        let gone = self.fcmp_lt(x, floor)?;
        let r = self.fselect(gone, zero, r)?;
        let xn = self.b.is_nan(bool_t, None, x);
        let xn = self.ok(xn)?;
        self.fselect(xn, x, r)
    }

    /// `c0 + z·(c1 + z·(c2 + ...))` by Horner's rule with `fma`.
    fn horner(&mut self, z: Word, coeffs: &[f32]) -> Result<Word> {
        let mut acc = self.const_f32(*coeffs.last().unwrap_or(&0.0));
        for &c in coeffs.iter().rev().skip(1) {
            let c = self.const_f32(c);
            acc = self.glsl(Glsl::Fma, &[acc, z, c])?;
        }
        Ok(acc)
    }

    fn erf(&mut self, x: Word) -> Result<Word> {
        let a = self.glsl(Glsl::FAbs, &[x])?;
        // Below 0.5: the Taylor series of erf(x)/x in z = x², to x⁹.
        let z = self.fmul(a, a)?;
        let s = self.horner(
            z,
            &[
                std::f32::consts::FRAC_2_SQRT_PI,
                -0.376_126_4,
                0.112_837_9,
                -0.026_866_17,
                0.005_223_977_6,
                -0.000_854_832_7,
            ],
        )?;
        let small = self.fmul(s, a)?;
        // Above: 1 − t·P(t)·exp(−x²), t = 1/(1 + p·x).
        let (p, one) = (self.const_f32(0.327_591_1), self.const_f32(1.0));
        let t = self.glsl(Glsl::Fma, &[a, p, one])?;
        let t = self.fdiv(one, t)?;
        let poly = self.horner(
            t,
            &[
                0.254_829_6,
                -0.284_496_74,
                1.421_413_7,
                -1.453_152_1,
                1.061_405_4,
            ],
        )?;
        let poly = self.fmul(poly, t)?;
        let nz = self.fneg(z)?;
        let e = self.exp(nz)?;
        let poly = self.fmul(poly, e)?;
        let large = self.fsub(one, poly)?;
        let half = self.const_f32(0.5);
        let lt = self.fcmp_lt(a, half)?;
        let r = self.fselect(lt, small, large)?;
        self.copysign(x, r)
    }

    fn pow(&mut self, x: Word, y: Word) -> Result<Word> {
        let bool_t = self.ty(DType::Bool)?;
        let a = self.glsl(Glsl::FAbs, &[x])?;
        let l = self.glsl(Glsl::Log2, &[a])?;
        let l = self.fmul(l, y)?;
        let mut r = self.glsl(Glsl::Exp2, &[l])?;
        // Negative x: an odd integer y negates, a non-integer y gives NaN.
        let yi = self.glsl(Glsl::Trunc, &[y])?;
        let int = self.b.f_ord_equal(bool_t, None, yi, y);
        let int = self.ok(int)?;
        let half_c = self.const_f32(0.5);
        let half = self.fmul(yi, half_c)?;
        let hi = self.glsl(Glsl::Trunc, &[half])?;
        let odd = self.b.f_ord_not_equal(bool_t, None, hi, half);
        let odd = self.ok(odd)?;
        let zero = self.const_f32(0.0);
        let neg = self.fcmp_lt(x, zero)?;
        let flip = self.b.logical_and(bool_t, None, neg, odd);
        let flip = self.ok(flip)?;
        let flip = self.b.logical_and(bool_t, None, flip, int);
        let flip = self.ok(flip)?;
        let nr = self.fneg(r)?;
        r = self.fselect(flip, nr, r)?;
        let not_int = self.b.logical_not(bool_t, None, int);
        let not_int = self.ok(not_int)?;
        let bad = self.b.logical_and(bool_t, None, not_int, neg);
        let bad = self.ok(bad)?;
        // ... but `powf(-inf, y)` is `+0` or `+inf` (the magnitude's power) then.
        let minus_inf = self.const_f32(f32::NEG_INFINITY);
        let finite = self.b.f_ord_not_equal(bool_t, None, x, minus_inf);
        let finite = self.ok(finite)?;
        let bad = self.b.logical_and(bool_t, None, bad, finite);
        let bad = self.ok(bad)?;
        let nan = self.const_f32(f32::NAN);
        r = self.fselect(bad, nan, r)?;
        // powf(x, 0) = 1 and powf(1, y) = 1, even for NaN operands.
        let one = self.const_f32(1.0);
        let y0 = self.b.f_ord_equal(bool_t, None, y, zero);
        let y0 = self.ok(y0)?;
        r = self.fselect(y0, one, r)?;
        let x1 = self.b.f_ord_equal(bool_t, None, x, one);
        let x1 = self.ok(x1)?;
        self.fselect(x1, one, r)
    }
}
