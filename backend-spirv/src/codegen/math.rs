//! The loop IR's math intrinsics on float32 values (float16 values computed in float32
//! and rounded back, as the interpreter does), from GLSL.std.450 and core instructions.
//!
//! Exact where Vulkan promises it or where the form is exact: `abs`, `floor`, `ceil`,
//! `rsqrt` as `1 / sqrt(x)` (the interpreter's two roundings; `InverseSqrt` is an
//! approximation). `sqrt` and `fma` are GLSL's (Vulkan allows `sqrt` the error of
//! `1/inversesqrt`, and `fma` to be unfused; Mesa's lavapipe computes both exactly).
//! The transcendental ones use GLSL's `Exp`/`Log`/`Exp2`/`Log2` (Vulkan: `3 + 2·|x|`
//! ulp for `exp`, `3` ulp or `2⁻²¹` absolute near 1 for `log`), inside the op
//! tolerances (`TRANSC`: 1e-6 absolute + 2e-5 relative), in forms that stay finite:
//! - `tanh(x) = sign(x)·(1 − 2/(exp(2|x|) + 1))` (GLSL's `Tanh` may be `sinh/cosh`,
//!   NaN for large `|x|`);
//! - `sigmoid` in the interpreter's stable form (`exp(-|x|)`, never overflowing);
//! - `erf` by a Taylor polynomial below 0.5 and Abramowitz–Stegun 7.1.26 above
//!   (absolute error 1.5e-7);
//! - `pow(x, y) = 2^(y·log2|x|)` with the sign and the special cases of `powf`
//!   (`y = 0`, `x = 1`, negative `x` with integer `y`), as GLSL's `Pow` is undefined
//!   for `x < 0`.

use kiln_executor::Result;
use kiln_ir::DType;
use kiln_te::tir::Intrinsic;
use rspirv::dr::Operand;
use rspirv::spirv::{GlslStd450Op as Glsl, Word};

use super::{Gen, Val};

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
        let id = match intrinsic {
            Intrinsic::Exp => self.glsl(Glsl::Exp, &[x])?,
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
        };
        self.narrow(Val { id, dtype: d })
    }

    /// A GLSL.std.450 instruction on float32 operands.
    fn glsl(&mut self, op: Glsl, args: &[Word]) -> Result<Word> {
        let f = self.ty(DType::F32)?;
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
        let e = self.glsl(Glsl::Exp, &[a2])?;
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
        let e = self.glsl(Glsl::Exp, &[na])?;
        let one = self.const_f32(1.0);
        let zero = self.const_f32(0.0);
        let d = self.fadd(e, one)?;
        let neg = self.fcmp_lt(x, zero)?;
        let num = self.fselect(neg, e, one)?;
        self.fdiv(num, d)
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
        let e = self.glsl(Glsl::Exp, &[nz])?;
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
