//! The loop IR's math intrinsics as PTX sequences, on float32 registers (float16 values
//! are computed in float32 and rounded back, as the interpreter does).
//!
//! Exact where PTX has an IEEE instruction: `sqrt` (`sqrt.rn`), `rsqrt` (`sqrt.rn` then
//! `rcp.rn`, the interpreter's two roundings), `fma` (`fma.rn`), `floor`/`ceil`
//! (`cvt.rmi`/`cvt.rpi`), `abs`. The others use the hardware approximations with the
//! range reduction the op tolerances (`TRANSC`: 1e-6 absolute + 2e-5 relative) need:
//! - `exp(x)`: `t = x·log2e` rounded, its rounding error `e` recovered with an `fma`
//!   (plus `x` times log2e's low part), then `ex2.approx(t) · (1 + e·ln2)`; so the
//!   error does not grow with `|x|` (a plain `ex2(x·log2e)` loses `|x|·2⁻²⁴`).
//! - `log(x)`: `lg2.approx(x) · ln2` (absolute error about 2⁻²², within the
//!   absolute tolerance where `log` crosses zero).
//! - `tanh(x) = sign(x)·(1 − 2/(exp(2|x|) + 1))`, `sigmoid` in the interpreter's stable
//!   form, `erf` by a Taylor polynomial below 0.5 and Abramowitz–Stegun 7.1.26 above
//!   (absolute error 1.5e-7), `pow(x, y) = 2^(y·log2|x|)` with the sign and the special
//!   cases of `powf` (`y = 0`, `x = 1`, negative `x` with integer `y`).
//!
//! The trigonometric and hyperbolic family (`sin` ... `atanh`) is refused: see [`call`].

use kiln_executor::Result;
use kiln_ir::DType;
use kiln_te::tir::Intrinsic;

use crate::codegen::{Gen, Val, f32_imm};

/// Emits `intrinsic(args)`.
pub(crate) fn call(g: &mut Gen<'_>, intrinsic: Intrinsic, args: Vec<Val>) -> Result<Val> {
    if args.len() != intrinsic.arity() {
        return Err(g.err(format!(
            "`{}` takes {} arguments, got {}",
            intrinsic.name(),
            intrinsic.arity(),
            args.len()
        )));
    }
    let d = args[0].dtype;
    if args.iter().any(|a| a.dtype != d) {
        return Err(g.err(format!(
            "arguments of `{}` differ in type",
            intrinsic.name()
        )));
    }
    if !d.is_float() {
        if intrinsic == Intrinsic::Abs && d.is_int() {
            let o = g.fresh(d);
            let t = if d == DType::I64 { "s64" } else { "s32" };
            g.line(format!("abs.{t} {}, {};", o.reg, args[0].reg));
            return Ok(g.narrow(o));
        }
        return Err(g.err(format!("`{}` on {d}", intrinsic.name())));
    }
    let x = args[0].reg.clone();
    let r = match intrinsic {
        Intrinsic::Exp => exp(g, &x),
        Intrinsic::Log => {
            let r = g.reg(3);
            g.line(format!("lg2.approx.f32 {r}, {x};"));
            g.line(format!(
                "mul.rn.f32 {r}, {r}, {};",
                f32_imm(std::f32::consts::LN_2)
            ));
            r
        }
        Intrinsic::Sqrt => one(g, "sqrt.rn.f32", &x),
        Intrinsic::Rsqrt => return Err(g.err("`rsqrt` outside the core loop IR")),
        Intrinsic::Tanh => tanh(g, &x),
        Intrinsic::Sigmoid => sigmoid(g, &x),
        Intrinsic::Erf => erf(g, &x),
        Intrinsic::Fma => {
            let r = g.reg(3);
            g.line(format!(
                "fma.rn.f32 {r}, {x}, {}, {};",
                args[1].reg, args[2].reg
            ));
            r
        }
        Intrinsic::Pow => pow(g, &x, &args[1].reg),
        Intrinsic::Abs => one(g, "abs.f32", &x),
        Intrinsic::Floor => one(g, "cvt.rmi.f32.f32", &x),
        Intrinsic::Ceil => one(g, "cvt.rpi.f32.f32", &x),
        // `sin.approx`/`cos.approx` lose accuracy for large arguments and PTX has no
        // other trigonometric instruction; declared unsupported until a range-reduced
        // sequence is written (see `CudaBackend::unsupported`).
        Intrinsic::Trig(t) => {
            return Err(g.err(format!("`{}` (no accurate PTX sequence yet)", t.name())));
        }
    };
    Ok(g.narrow(Val { reg: r, dtype: d }))
}

/// `ins r, x` into a new float register.
fn one(g: &mut Gen<'_>, ins: &str, x: &str) -> String {
    let r = g.reg(3);
    g.line(format!("{ins} {r}, {x};"));
    r
}

/// `exp(x)` with the rounding error of `x·log2e` folded back in (see the module doc).
fn exp(g: &mut Gen<'_>, x: &str) -> String {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    // log2(e) − LOG2E, the part float32 cannot hold.
    let log2e_lo = (std::f64::consts::LOG2_E - LOG2E as f64) as f32;
    let (t, nt, e, r) = (g.reg(3), g.reg(3), g.reg(3), g.reg(3));
    let nan = g.reg(0);
    g.line(format!("mul.rn.f32 {t}, {x}, {};", f32_imm(LOG2E)));
    g.line(format!("neg.f32 {nt}, {t};"));
    g.line(format!("fma.rn.f32 {e}, {x}, {}, {nt};", f32_imm(LOG2E)));
    g.line(format!("fma.rn.f32 {e}, {x}, {}, {e};", f32_imm(log2e_lo)));
    // Infinite t (and NaN x) leave no correction to make.
    g.line(format!("testp.notanumber.f32 {nan}, {e};"));
    g.line(format!("selp.f32 {e}, {}, {e}, {nan};", f32_imm(0.0)));
    g.line(format!("ex2.approx.f32 {r}, {t};"));
    g.line(format!(
        "mul.rn.f32 {e}, {e}, {};",
        f32_imm(std::f32::consts::LN_2)
    ));
    // An overflowed power stays infinite (inf · e + inf is NaN for a negative e).
    let inf = g.reg(0);
    g.line(format!("setp.gt.f32 {inf}, {r}, {};", f32_imm(f32::MAX)));
    g.line(format!("@!{inf} fma.rn.f32 {r}, {r}, {e}, {r};"));
    r
}

fn tanh(g: &mut Gen<'_>, x: &str) -> String {
    let a = one(g, "abs.f32", x);
    let a2 = g.reg(3);
    g.line(format!("add.rn.f32 {a2}, {a}, {a};"));
    let e = exp(g, &a2);
    let (q, r) = (g.reg(3), g.reg(3));
    g.line(format!("add.rn.f32 {q}, {e}, {};", f32_imm(1.0)));
    g.line(format!("div.rn.f32 {q}, {}, {q};", f32_imm(2.0)));
    g.line(format!("sub.rn.f32 {r}, {}, {q};", f32_imm(1.0)));
    g.line(format!("copysign.f32 {r}, {x}, {r};"));
    r
}

fn sigmoid(g: &mut Gen<'_>, x: &str) -> String {
    let a = one(g, "abs.f32", x);
    let na = one(g, "neg.f32", &a);
    let e = exp(g, &na);
    let (d, num, r) = (g.reg(3), g.reg(3), g.reg(3));
    let pos = g.reg(0);
    g.line(format!("add.rn.f32 {d}, {e}, {};", f32_imm(1.0)));
    g.line(format!("setp.ge.f32 {pos}, {x}, {};", f32_imm(0.0)));
    g.line(format!("selp.f32 {num}, {}, {e}, {pos};", f32_imm(1.0)));
    g.line(format!("div.rn.f32 {r}, {num}, {d};"));
    r
}

/// `c0 + z·(c1 + z·(c2 + ...))` by Horner's rule with `fma`.
fn horner(g: &mut Gen<'_>, z: &str, coeffs: &[f32]) -> String {
    let acc = g.fconst(*coeffs.last().unwrap_or(&0.0));
    for &c in coeffs.iter().rev().skip(1) {
        g.line(format!("fma.rn.f32 {acc}, {acc}, {z}, {};", f32_imm(c)));
    }
    acc
}

fn erf(g: &mut Gen<'_>, x: &str) -> String {
    let a = one(g, "abs.f32", x);
    // Below 0.5: the Taylor series of erf(x)/x in z = x², to x⁹.
    let z = g.reg(3);
    g.line(format!("mul.rn.f32 {z}, {a}, {a};"));
    let s = horner(
        g,
        &z,
        &[
            std::f32::consts::FRAC_2_SQRT_PI,
            -0.376_126_4,
            0.112_837_9,
            -0.026_866_17,
            0.005_223_977_6,
            -0.000_854_832_7,
        ],
    );
    let small = g.reg(3);
    g.line(format!("mul.rn.f32 {small}, {s}, {a};"));
    // Above: 1 − t·P(t)·exp(−x²), t = 1/(1 + p·x).
    let t = g.reg(3);
    g.line(format!(
        "fma.rn.f32 {t}, {a}, {}, {};",
        f32_imm(0.327_591_1),
        f32_imm(1.0)
    ));
    g.line(format!("rcp.rn.f32 {t}, {t};"));
    let p = horner(
        g,
        &t,
        &[
            0.254_829_6,
            -0.284_496_74,
            1.421_413_7,
            -1.453_152_1,
            1.061_405_4,
        ],
    );
    g.line(format!("mul.rn.f32 {p}, {p}, {t};"));
    let nz = one(g, "neg.f32", &z);
    let e = exp(g, &nz);
    let large = g.reg(3);
    g.line(format!("mul.rn.f32 {p}, {p}, {e};"));
    g.line(format!("sub.rn.f32 {large}, {}, {p};", f32_imm(1.0)));
    let (lt, r) = (g.reg(0), g.reg(3));
    g.line(format!("setp.lt.f32 {lt}, {a}, {};", f32_imm(0.5)));
    g.line(format!("selp.f32 {r}, {small}, {large}, {lt};"));
    g.line(format!("copysign.f32 {r}, {x}, {r};"));
    r
}

fn pow(g: &mut Gen<'_>, x: &str, y: &str) -> String {
    let a = one(g, "abs.f32", x);
    let (l, r) = (g.reg(3), g.reg(3));
    g.line(format!("lg2.approx.f32 {l}, {a};"));
    g.line(format!("mul.rn.f32 {l}, {l}, {y};"));
    g.line(format!("ex2.approx.f32 {r}, {l};"));
    // Negative x: an odd integer y negates, a non-integer y gives NaN.
    let (yi, half, hi) = (g.reg(3), g.reg(3), g.reg(3));
    let (int, odd, neg, flip, bad, one_p) =
        (g.reg(0), g.reg(0), g.reg(0), g.reg(0), g.reg(0), g.reg(0));
    g.line(format!("cvt.rzi.f32.f32 {yi}, {y};"));
    g.line(format!("setp.eq.f32 {int}, {yi}, {y};"));
    g.line(format!("mul.rn.f32 {half}, {yi}, {};", f32_imm(0.5)));
    g.line(format!("cvt.rzi.f32.f32 {hi}, {half};"));
    g.line(format!("setp.ne.f32 {odd}, {hi}, {half};"));
    g.line(format!("setp.lt.f32 {neg}, {x}, {};", f32_imm(0.0)));
    g.line(format!("and.pred {flip}, {neg}, {odd};"));
    g.line(format!("and.pred {flip}, {flip}, {int};"));
    g.line(format!("@{flip} neg.f32 {r}, {r};"));
    g.line(format!("not.pred {bad}, {int};"));
    g.line(format!("and.pred {bad}, {bad}, {neg};"));
    g.line(format!("@{bad} mov.f32 {r}, {};", f32_imm(f32::NAN)));
    // powf(x, 0) = 1 and powf(1, y) = 1, even for NaN operands.
    g.line(format!("setp.eq.f32 {one_p}, {y}, {};", f32_imm(0.0)));
    g.line(format!("@{one_p} mov.f32 {r}, {};", f32_imm(1.0)));
    g.line(format!("setp.eq.f32 {one_p}, {x}, {};", f32_imm(1.0)));
    g.line(format!("@{one_p} mov.f32 {r}, {};", f32_imm(1.0)));
    r
}
