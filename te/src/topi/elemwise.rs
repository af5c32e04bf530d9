//! Computes of the elementwise ops: unary math, broadcasting binary arithmetic and
//! comparisons (numpy broadcasting), `clip`, `cast` and `where`. All are injective
//! stages, inlined into their consumers.
//!
//! Semantics follow `ir::op::elemwise`: `nn.relu` keeps NaN (`x < 0 ? 0 : x`),
//! integer `negative`/`abs` wrap, integer `divide` truncates toward zero, `maximum` and
//! `minimum` on bool are logical or/and, `round` ties to even (through `floor`, exact),
//! integer `floor_mod`/`trunc_mod` are exact (a zero divisor reports an error at run
//! time, as integer `divide` does) while float ones compute `fmod` as
//! `x - trunc(x / y) * y` in the dtype, float32 for the 16-bit floats (within a
//! rounding of the reference's exact `fmod`, except where `x / y` rounds onto an integer), integer `power` is exact
//! square-and-multiply with wrapping (a chain of materialized stages, four exponent bits each, so inlining
//! never duplicates work), and integer `clip` first converts its bounds to the dtype as
//! `cast` would.

use kiln_ir::op::{Binary, BinaryKind, Cast, Clip, Unary, UnaryKind, Where};
use kiln_ir::{DType, Data, Type};

use crate::error::Result;
use crate::te::{self as te, Expr, Tensor};
use crate::tir::{BinOp, Intrinsic, Trig};

use super::{Ctx, TeValue, arg, broadcast_index, imm, out_tensor};

/// `nn.relu`, `exp`, `log`, `sqrt`, `rsqrt`, `tanh`, `sigmoid`, `erf`, `negative`, `abs`,
/// `floor`, `ceil`, `round`, and `sin` ... `atanh` (loop-IR [`Trig`] intrinsics).
pub fn unary(ctx: &mut Ctx, op: &Unary, args: &[TeValue], out: &Type) -> Result<Tensor> {
    let name = op.kind.name();
    let x = arg(name, args, 0)?;
    let shape = out_tensor(name, out)?.shape.clone();
    let dtype = x.dtype();
    let kind = op.kind;
    ctx.compute(&shape, &format!("T_{}", name.replace('.', "_")), |i| {
        unary_expr(kind, x.at(i), dtype)
    })
}

/// The unary function `kind` applied to `x` of `dtype`.
pub fn unary_expr(kind: UnaryKind, x: Expr, dtype: DType) -> Expr {
    let intr = |f: Intrinsic| te::call(f, [x.clone()]);
    match kind {
        UnaryKind::Relu => te::select(x.clone().lt(imm(0.0, dtype)), imm(0.0, dtype), x),
        UnaryKind::Exp => intr(Intrinsic::Exp),
        UnaryKind::Log => intr(Intrinsic::Log),
        UnaryKind::Sqrt => intr(Intrinsic::Sqrt),
        UnaryKind::Rsqrt => intr(Intrinsic::Rsqrt),
        UnaryKind::Tanh => intr(Intrinsic::Tanh),
        UnaryKind::Sigmoid => intr(Intrinsic::Sigmoid),
        UnaryKind::Erf => intr(Intrinsic::Erf),
        UnaryKind::Abs => intr(Intrinsic::Abs),
        // Floats negate exactly by multiplying with -1 (keeping -0); integers wrap.
        UnaryKind::Negative if dtype.is_float() => x * imm(-1.0, dtype),
        UnaryKind::Negative => imm(0.0, dtype) - x,
        UnaryKind::Floor => intr(Intrinsic::Floor),
        UnaryKind::Ceil => intr(Intrinsic::Ceil),
        UnaryKind::Round => round_half_even(x, dtype),
        UnaryKind::Sin => intr(Intrinsic::Trig(Trig::Sin)),
        UnaryKind::Cos => intr(Intrinsic::Trig(Trig::Cos)),
        UnaryKind::Tan => intr(Intrinsic::Trig(Trig::Tan)),
        UnaryKind::Asin => intr(Intrinsic::Trig(Trig::Asin)),
        UnaryKind::Acos => intr(Intrinsic::Trig(Trig::Acos)),
        UnaryKind::Atan => intr(Intrinsic::Trig(Trig::Atan)),
        UnaryKind::Sinh => intr(Intrinsic::Trig(Trig::Sinh)),
        UnaryKind::Cosh => intr(Intrinsic::Trig(Trig::Cosh)),
        UnaryKind::Asinh => intr(Intrinsic::Trig(Trig::Asinh)),
        UnaryKind::Acosh => intr(Intrinsic::Trig(Trig::Acosh)),
        UnaryKind::Atanh => intr(Intrinsic::Trig(Trig::Atanh)),
    }
}

/// `x` rounded to the nearest integer, ties to even: `f = floor(x)` and the exact
/// fraction `x - f` pick `f` or `f + 1`; on a tie, the even one (`floor(f / 2) == f / 2`).
/// Infinities stay; NaN stays NaN.
fn round_half_even(x: Expr, dtype: DType) -> Expr {
    let f = te::call(Intrinsic::Floor, [x.clone()]);
    let frac = x - f.clone();
    let half = imm(0.5, dtype);
    let up = f.clone() + imm(1.0, dtype);
    let h = f.clone() * half.clone();
    let even = te::call(Intrinsic::Floor, [h.clone()]).equal(h);
    let tie = te::select(even, f.clone(), up.clone());
    te::select(
        frac.clone().gt(half.clone()),
        up,
        te::select(frac.lt(half), f, tie),
    )
}

/// The broadcasting two-argument ops.
pub fn binary(ctx: &mut Ctx, op: &Binary, args: &[TeValue], out: &Type) -> Result<Tensor> {
    let name = op.kind.name();
    let (a, b) = (arg(name, args, 0)?, arg(name, args, 1)?);
    let shape = out_tensor(name, out)?.shape.clone();
    let dtype = a.dtype();
    if op.kind == BinaryKind::Power && !dtype.is_float() {
        return int_power(ctx, a, b, &shape);
    }
    let kind = op.kind;
    ctx.compute(&shape, &format!("T_{name}"), |i| {
        let x = a.at(&broadcast_index(a.shape(), i));
        let y = b.at(&broadcast_index(b.shape(), i));
        binary_expr(kind, x, y, dtype)
    })
}

/// `kind` applied to `x` and `y` of `dtype` (not integer `power`, see [`binary`]).
pub fn binary_expr(kind: BinaryKind, x: Expr, y: Expr, dtype: DType) -> Expr {
    let bool_ = dtype.is_bool();
    let op = match kind {
        BinaryKind::Add => BinOp::Add,
        BinaryKind::Subtract => BinOp::Sub,
        BinaryKind::Multiply => BinOp::Mul,
        BinaryKind::Divide => BinOp::Div,
        BinaryKind::Power => return te::pow(x, y),
        BinaryKind::Maximum if bool_ => BinOp::Or,
        BinaryKind::Minimum if bool_ => BinOp::And,
        BinaryKind::Maximum => BinOp::Max,
        BinaryKind::Minimum => BinOp::Min,
        BinaryKind::Equal => BinOp::Eq,
        BinaryKind::NotEqual => BinOp::Ne,
        BinaryKind::Less => BinOp::Lt,
        BinaryKind::LessEqual => BinOp::Le,
        BinaryKind::Greater => BinOp::Gt,
        BinaryKind::GreaterEqual => BinOp::Ge,
        BinaryKind::FloorMod if dtype.is_float() => {
            // fmod, moved by `y` when its sign differs from the divisor's.
            let r = float_fmod(x, y.clone(), dtype);
            let zero = imm(0.0, dtype);
            let differs = te::or(
                te::and(r.clone().lt(zero.clone()), y.clone().gt(zero.clone())),
                te::and(r.clone().gt(zero.clone()), y.clone().lt(zero)),
            );
            return te::select(differs, r.clone() + y, r);
        }
        BinaryKind::FloorMod => BinOp::FloorMod,
        BinaryKind::TruncMod if dtype.is_float() => return float_fmod(x, y, dtype),
        // Integer division truncates toward zero.
        BinaryKind::TruncMod => return x.clone() - (x / y.clone()) * y,
    };
    Expr::binary(op, x, y)
}

/// C's `fmod(x, y)` on floats as `x - trunc(x / y) * y`, except that a finite `x`
/// modulo an infinite `y` is `x` (the product would be NaN); NaN where `fmod` is.
/// float16 and bfloat16 compute in float32 and round once: rounding `trunc(x / y) * y`
/// to 8 or 11 significant bits would cost an ulp of the *operands*, not of the result.
fn float_fmod(x: Expr, y: Expr, dtype: DType) -> Expr {
    if matches!(dtype, DType::F16 | DType::BF16) {
        let wide = float_fmod(x.cast(DType::F32), y.cast(DType::F32), DType::F32);
        return wide.cast(dtype);
    }
    let q = x.clone() / y.clone();
    let t = te::select(
        q.clone().lt(imm(0.0, dtype)),
        te::call(Intrinsic::Ceil, [q.clone()]),
        te::call(Intrinsic::Floor, [q]),
    );
    let inf = imm(f64::INFINITY, dtype);
    let keep_x = te::and(
        te::abs(y.clone()).equal(inf.clone()),
        te::abs(x.clone()).lt(inf),
    );
    te::select(keep_x, x.clone(), x - t * y)
}

/// Integer `power(a, b)` with wrapping, as the reference's square-and-multiply. A chain
/// of materialized stages `S_c` of shape `shape ++ [2]` holds the pair (accumulator,
/// `base`): `S_0 = (1, a)`; each next stage consumes four exponent bits,
/// `acc * prod_j (bit j ? base^(2^j) : 1)` and `base^16`,
/// and the result is the accumulator of the last stage. Each stage is read only by the
/// next (so a GPU schedule can compute each inside its consumer), and none is inlined
/// (that would duplicate work exponentially). A negative exponent takes the reference's
/// `(1 / a)^-e` (truncating division: 1, -1 or 0; zero to a negative power is a division
/// by zero) instead of the chain, whose bits are meaningless for it.
fn int_power(ctx: &mut Ctx, a: Tensor, b: Tensor, shape: &[usize]) -> Result<Tensor> {
    let dtype = a.dtype();
    let bits: usize = match dtype {
        DType::I8 => 7,
        DType::U8 => 8,
        DType::I16 => 15,
        DType::U16 => 16,
        DType::I32 => 31,
        DType::U32 => 32,
        DType::U64 => 64,
        _ => 63,
    };
    // A rank-0 result keeps one unit axis so the pair axis is never the outermost.
    let lead: Vec<usize> = if shape.is_empty() {
        vec![1]
    } else {
        shape.to_vec()
    };
    let r = lead.len();
    let mut pair_shape = lead.clone();
    pair_shape.push(2);
    let data = |i: &[Expr]| -> Vec<Expr> {
        if shape.is_empty() {
            vec![]
        } else {
            i[..r].to_vec()
        }
    };
    let one = || imm(1.0, dtype);
    let mut st = ctx.kept(&pair_shape, "T_power_s0", |i| {
        te::select(
            i[r].clone().equal(Expr::int(0)),
            one(),
            a.at(&broadcast_index(a.shape(), &data(i))),
        )
    })?;
    // Four exponent bits per stage keep the chain (and a GPU kernel's nest of stages
    // computed inside their consumers) short: 16 stages for int64.
    const PER_STAGE: usize = 4;
    for c in 0..bits.div_ceil(PER_STAGE) {
        let prev = st;
        let lo = c * PER_STAGE;
        let n = PER_STAGE.min(bits - lo);
        st = ctx.kept(&pair_shape, &format!("T_power_s{}", c + 1), |i| {
            let at = |j: i32| {
                let mut v = i[..r].to_vec();
                v.push(Expr::int(j));
                prev.at(&v)
            };
            let e = b.at(&broadcast_index(b.shape(), &data(i)));
            // base^(2^j) for j in 0..=n, as expressions of the stage's base.
            let mut pows = vec![at(1)];
            for j in 0..n {
                let p = pows[j].clone();
                pows.push(p.clone() * p);
            }
            let mut acc = at(0);
            for (j, pw) in pows.iter().enumerate().take(n) {
                let k = lo + j;
                let shifted = if k == 0 {
                    e.clone()
                } else {
                    e.clone().floordiv(Expr::Int {
                        value: 1i64 << k,
                        dtype,
                    })
                };
                let bit = shifted.floormod(imm(2.0, dtype)).equal(one());
                acc = acc * te::select(bit, pw.clone(), one());
            }
            te::select(i[r].clone().equal(Expr::int(0)), acc, pows[n].clone())
        })?;
    }
    let last = st;
    ctx.compute(shape, "T_power", |i| {
        let mut v = if shape.is_empty() {
            vec![Expr::int(0)]
        } else {
            i.to_vec()
        };
        v.push(Expr::int(0));
        let e = b.at(&broadcast_index(b.shape(), i));
        // A negative exponent: `(1 / a)^-e` with truncating division, as the reference
        // defines it — `r = 1 / a` is 1, -1 or 0 (a zero base is a division by zero,
        // reported by every target), so the power is `r` for an odd exponent and `r * r`
        // for an even one. The select is lazy: `1 / a` runs only for negative exponents.
        let r = imm(1.0, dtype) / a.at(&broadcast_index(a.shape(), i));
        let odd = e.clone().floormod(imm(2.0, dtype)).equal(imm(1.0, dtype));
        let negative = te::select(odd, r.clone(), r.clone() * r);
        te::select(e.lt(imm(0.0, dtype)), negative, last.at(&v))
    })
}

/// `clip(x, a_min, a_max)`.
pub fn clip(ctx: &mut Ctx, op: &Clip, args: &[TeValue], out: &Type) -> Result<Tensor> {
    let x = arg("clip", args, 0)?;
    let shape = out_tensor("clip", out)?.shape.clone();
    let dtype = x.dtype();
    let (lo, hi) = if dtype.is_float() {
        (imm(op.a_min.0, dtype), imm(op.a_max.0, dtype))
    } else {
        // The bounds convert to the dtype as `cast` does (truncate, saturate).
        let bound = |v: f64| Data::from_f64(dtype, [v]).to_i64()[0];
        (
            Expr::Int {
                value: bound(op.a_min.0),
                dtype,
            },
            Expr::Int {
                value: bound(op.a_max.0),
                dtype,
            },
        )
    };
    ctx.compute(&shape, "T_clip", |i| {
        // `min(max(x, a_min), a_max)` as the reference: on floats the loop IR's `Max`
        // and `Min` are IEEE 754-2019 maximum/minimum, so NaN stays NaN and
        // `clip(-0, 0, _)` is `+0`.
        x.at(i).max(lo).min(hi)
    })
}

/// `cast(x, dtype)`.
pub fn cast(ctx: &mut Ctx, op: &Cast, args: &[TeValue], out: &Type) -> Result<Tensor> {
    let x = arg("cast", args, 0)?;
    let shape = out_tensor("cast", out)?.shape.clone();
    let to = op.dtype;
    ctx.compute(&shape, "T_cast", |i| te::cast(to, x.at(i)))
}

/// `where(cond, x, y)` with broadcasting.
pub fn where_(ctx: &mut Ctx, _op: &Where, args: &[TeValue], out: &Type) -> Result<Tensor> {
    let (c, x, y) = (
        arg("where", args, 0)?,
        arg("where", args, 1)?,
        arg("where", args, 2)?,
    );
    let shape = out_tensor("where", out)?.shape.clone();
    ctx.compute(&shape, "T_where", |i| {
        te::select(
            c.at(&broadcast_index(c.shape(), i)),
            x.at(&broadcast_index(x.shape(), i)),
            y.at(&broadcast_index(y.shape(), i)),
        )
    })
}
