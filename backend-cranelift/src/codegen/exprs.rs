//! Expressions: values in their dtype's semantics (integers wrap, float16 rounds after
//! each operation, float→int casts saturate), lazy or branch-free `select`, integer
//! division that reports division by zero, and intrinsics.

use super::*;

/// Whether evaluating `e` can neither fault, report an error nor cost a call, so both
/// sides of a `select` over it may run.
pub(super) fn speculatable(e: &Expr) -> bool {
    let mut ok = true;
    e.visit(&mut |x| match x {
        Expr::Load { .. } | Expr::Call { .. } => ok = false,
        x if division_may_trap(x) => ok = false,
        _ => {}
    });
    ok
}

/// A division or modulo whose divisor is not a positive constant (it may be zero, or
/// `INT_MIN / -1`): evaluating it where the source would not can trap.
pub(super) fn division_may_trap(x: &Expr) -> bool {
    matches!(
        x,
        Expr::Binary {
            op: BinOp::Div | BinOp::FloorDiv | BinOp::FloorMod,
            rhs,
            ..
        } if !matches!(rhs.as_int(), Some(c) if c > 0)
    )
}

impl Cx<'_, '_> {
    pub(super) fn to_i64(&mut self, v: Value, d: DType) -> Value {
        match cl_ty(d) {
            types::I64 => v,
            _ if is_signed(d) => self.b.ins().sextend(types::I64, v),
            _ => self.b.ins().uextend(types::I64, v),
        }
    }

    // ---- expressions ----

    pub(super) fn expr(&mut self, e: &Expr) -> Result<(Value, DType)> {
        deep(|| self.expr_on_stack(e))
    }

    fn expr_on_stack(&mut self, e: &Expr) -> Result<(Value, DType)> {
        Ok(match e {
            Expr::Int { value, dtype } => {
                let d = *dtype;
                (self.constant(*value as f64, *value, d), d)
            }
            Expr::Float { value, dtype } => {
                let d = *dtype;
                (self.constant(*value, *value as i64, d), d)
            }
            Expr::Bool(b) => (self.iconst(types::I8, *b as i64), DType::Bool),
            Expr::Var(v) => self.vars.get(v.index()).copied().flatten().ok_or_else(|| {
                Error::Internal(format!(
                    "@{}: {v} used outside its scope",
                    self.env.func.name
                ))
            })?,
            Expr::Load { buffer, indices } => {
                let d = self.buffer(*buffer)?.dtype;
                if let Some(r) = self.promoted_elem(*buffer, indices)? {
                    return Ok((self.read_slot(r), d));
                }
                let addr = self.address(*buffer, indices)?;
                let v = if is_half(d) {
                    let bits = self
                        .b
                        .ins()
                        .load(types::I16, MemFlagsData::trusted(), addr, 0);
                    let bits = self.b.ins().uextend(types::I32, bits);
                    let h = if d == DType::F16 {
                        Host::F16Load
                    } else {
                        Host::Bf16Load
                    };
                    self.host1(h, &[bits])
                } else {
                    self.b
                        .ins()
                        .load(cl_ty(d), MemFlagsData::trusted(), addr, 0)
                };
                (v, d)
            }
            Expr::Binary { op, lhs, rhs } => {
                let (a, d) = self.expr(lhs)?;
                let (b, d2) = self.expr(rhs)?;
                if d != d2 {
                    return Err(Error::Internal(format!(
                        "@{}: operands of {op:?} are {d} and {d2}",
                        self.env.func.name
                    )));
                }
                self.binary(*op, d, a, b, rhs.as_int())?
            }
            Expr::Not(x) => {
                let (v, d) = self.expr(x)?;
                let r = if d.is_float() {
                    let z = self.fconst(0.0, d);
                    self.b.ins().fcmp(FloatCC::Equal, v, z)
                } else if d.is_bool() {
                    self.b.ins().bxor_imm_s(v, 1)
                } else {
                    self.b.ins().icmp_imm_s(IntCC::Equal, v, 0)
                };
                (r, DType::Bool)
            }
            Expr::Select { cond, then, else_ } => self.select(cond, then, else_)?,
            Expr::Cast { to, value } => {
                let (v, d) = self.expr(value)?;
                (self.cast(v, d, *to)?, *to)
            }
            Expr::Call { intrinsic, args } => self.call(*intrinsic, args)?,
            Expr::Ramp { .. } | Expr::Broadcast { .. } => return Err(not_core("a vector value")),
        })
    }

    /// An immediate of dtype `d` (`f` for floats, `i` for integers).
    pub(super) fn constant(&mut self, f: f64, i: i64, d: DType) -> Value {
        match d {
            DType::F32 => self.b.ins().f32const(f as f32),
            DType::F16 | DType::BF16 => {
                let h = semantics::round_float(f, d) as f32;
                self.b.ins().f32const(h)
            }
            DType::F64 => self.b.ins().f64const(f),
            DType::Bool => self.iconst(types::I8, (i != 0 || f != 0.0) as i64),
            _ => self.iconst(cl_ty(d), i),
        }
    }

    /// Float immediate `f` in the register type of float dtype `d` (not rounded).
    pub(super) fn fconst(&mut self, f: f64, d: DType) -> Value {
        if d == DType::F64 {
            self.b.ins().f64const(f)
        } else {
            self.b.ins().f32const(f as f32)
        }
    }

    /// Rounds an f32 value to float16 or bfloat16 when `d` is one of them.
    pub(super) fn round(&mut self, v: Value, d: DType) -> Value {
        match d {
            DType::F16 => self.host1(Host::F16Round, &[v]),
            DType::BF16 => self.host1(Host::Bf16Round, &[v]),
            _ => v,
        }
    }

    pub(super) fn select(
        &mut self,
        cond: &Expr,
        then: &Expr,
        else_: &Expr,
    ) -> Result<(Value, DType)> {
        let (c, _) = self.expr(cond)?;
        if speculatable(then) && speculatable(else_) {
            let (a, d) = self.expr(then)?;
            let (b, _) = self.expr(else_)?;
            return Ok((self.b.ins().select(c, a, b), d));
        }
        if self.guardable(then) && self.guardable(else_) {
            // Branch-free: each side's loads read a safe address unless its side is
            // taken (a padded conv2d load is a compare and a `select`, not a branch).
            let outer = self.guard;
            let not_c = self.b.ins().bxor_imm_s(c, 1);
            let (gt, ge) = match outer {
                Some(o) => (self.b.ins().band(o, c), self.b.ins().band(o, not_c)),
                None => (c, not_c),
            };
            self.guard = Some(gt);
            let a = self.expr(then);
            self.guard = Some(ge);
            let e = self.expr(else_);
            self.guard = outer;
            let ((a, d), (e, _)) = (a?, e?);
            return Ok((self.b.ins().select(c, a, e), d));
        }
        let tb = self.b.create_block();
        let eb = self.b.create_block();
        let merge = self.b.create_block();
        self.b.ins().brif(c, tb, &[], eb, &[]);
        self.b.switch_to_block(tb);
        let (a, d) = self.expr(then)?;
        let r = self.b.append_block_param(merge, cl_ty(d));
        self.b.ins().jump(merge, &[BlockArg::Value(a)]);
        self.b.switch_to_block(eb);
        let (bv, d2) = self.expr(else_)?;
        if d2 != d {
            return Err(Error::Internal(format!(
                "@{}: select of {d} and {d2}",
                self.env.func.name
            )));
        }
        self.b.ins().jump(merge, &[BlockArg::Value(bv)]);
        self.b.switch_to_block(merge);
        Ok((r, d))
    }

    /// Whether `e` may run unconditionally once its loads are guarded: no calls, no
    /// division that could report an error, no float16 loads, and every loaded buffer
    /// non-empty (so its first element is a safe address).
    pub(super) fn guardable(&self, e: &Expr) -> bool {
        let mut ok = true;
        e.visit(&mut |x| match x {
            Expr::Call { .. } => ok = false,
            Expr::Load { buffer, .. } => {
                let fine = self
                    .env
                    .func
                    .buffer(*buffer)
                    .is_some_and(|b| !is_half(b.dtype) && b.numel().is_some_and(|n| n > 0));
                ok &= fine || self.promoted[buffer.index()].is_some();
            }
            x if division_may_trap(x) => ok = false,
            _ => {}
        });
        ok
    }

    pub(super) fn binary(
        &mut self,
        op: BinOp,
        d: DType,
        a: Value,
        b: Value,
        rhs_const: Option<i64>,
    ) -> Result<(Value, DType)> {
        use BinOp::*;
        if op.is_comparison() {
            let r = if d.is_float() {
                let cc = match op {
                    Eq => FloatCC::Equal,
                    Ne => FloatCC::NotEqual,
                    Lt => FloatCC::LessThan,
                    Le => FloatCC::LessThanOrEqual,
                    Gt => FloatCC::GreaterThan,
                    _ => FloatCC::GreaterThanOrEqual,
                };
                self.b.ins().fcmp(cc, a, b)
            } else {
                let s = is_signed(d);
                let cc = match op {
                    Eq => IntCC::Equal,
                    Ne => IntCC::NotEqual,
                    Lt if s => IntCC::SignedLessThan,
                    Le if s => IntCC::SignedLessThanOrEqual,
                    Gt if s => IntCC::SignedGreaterThan,
                    Ge if s => IntCC::SignedGreaterThanOrEqual,
                    Lt => IntCC::UnsignedLessThan,
                    Le => IntCC::UnsignedLessThanOrEqual,
                    Gt => IntCC::UnsignedGreaterThan,
                    _ => IntCC::UnsignedGreaterThanOrEqual,
                };
                self.b.ins().icmp(cc, a, b)
            };
            return Ok((r, DType::Bool));
        }
        if d.is_bool() {
            return Ok((
                match op {
                    And | Min => self.b.ins().band(a, b),
                    Or | Max => self.b.ins().bor(a, b),
                    _ => return Err(self.unsupported(format_args!("{op:?} on bool"))),
                },
                d,
            ));
        }
        if d.is_float() {
            let r = match op {
                Add => self.b.ins().fadd(a, b),
                Sub => self.b.ins().fsub(a, b),
                Mul => self.b.ins().fmul(a, b),
                Div => self.b.ins().fdiv(a, b),
                // Cranelift's fmin/fmax are IEEE 754-2019 minimum/maximum (NaN
                // propagates, -0 < +0): the loop IR's contract for `min`/`max`.
                Min => self.b.ins().fmin(a, b),
                Max => self.b.ins().fmax(a, b),
                _ => return Err(self.unsupported(format_args!("{op:?} on {d}"))),
            };
            return Ok((self.round(r, d), d));
        }
        let s = is_signed(d);
        let r = match op {
            Add => self.b.ins().iadd(a, b),
            Sub => self.b.ins().isub(a, b),
            Mul if cl_ty(d) == types::I8 => {
                let x = self.b.ins().uextend(types::I32, a);
                let y = self.b.ins().uextend(types::I32, b);
                let m = self.b.ins().imul(x, y);
                self.b.ins().ireduce(types::I8, m)
            }
            Mul => self.b.ins().imul(a, b),
            Min if s => self.b.ins().smin(a, b),
            Max if s => self.b.ins().smax(a, b),
            Min => self.b.ins().umin(a, b),
            Max => self.b.ins().umax(a, b),
            Div | FloorDiv | FloorMod => self.int_div(op, d, a, b, rhs_const),
            And | Or => return Err(self.unsupported(format_args!("{op:?} on {d}"))),
            _ => unreachable!("comparisons handled above"),
        };
        Ok((r, d))
    }

    /// Integer `/` (truncating), floordiv or floormod, without traps: a zero divisor
    /// reports [`status::DIV_ZERO`] and divides by one, `MIN / -1` wraps.
    pub(super) fn int_div(
        &mut self,
        op: BinOp,
        d: DType,
        a: Value,
        b: Value,
        rhs_const: Option<i64>,
    ) -> Value {
        let s = is_signed(d);
        let narrow = cl_ty(d).bits() < 32;
        let (x, y, ty) = if narrow {
            let ext = |cx: &mut Self, v| {
                if s {
                    cx.b.ins().sextend(types::I32, v)
                } else {
                    cx.b.ins().uextend(types::I32, v)
                }
            };
            (ext(self, a), ext(self, b), types::I32)
        } else {
            (a, b, cl_ty(d))
        };
        let c = rhs_const.map(|c| semantics::wrap_int(c, d));
        let r = match c {
            Some(c) if c > 0 && c.count_ones() == 1 && s && op != BinOp::Div => {
                let k = c.trailing_zeros() as i64;
                if op == BinOp::FloorDiv {
                    self.b.ins().sshr_imm_s(x, k)
                } else {
                    self.b.ins().band_imm_s(x, c - 1)
                }
            }
            Some(c) if c != 0 && (c != -1 || !s) => self.div_rem(op, s, x, y),
            _ => {
                let zero = self.b.ins().icmp_imm_s(IntCC::Equal, y, 0);
                self.fail_if(zero, status::DIV_ZERO);
                let one = self.iconst(ty, 1);
                let mut safe = self.b.ins().select(zero, one, y);
                let neg1 = if s {
                    let m = self.b.ins().icmp_imm_s(IntCC::Equal, y, -1);
                    safe = self.b.ins().select(m, one, safe);
                    Some(m)
                } else {
                    None
                };
                let r = self.div_rem(op, s, x, safe);
                match neg1 {
                    // x / -1 = -x (wrapping); x mod -1 = 0.
                    Some(m) => {
                        let alt = if op == BinOp::FloorMod {
                            self.iconst(ty, 0)
                        } else {
                            self.b.ins().ineg(x)
                        };
                        self.b.ins().select(m, alt, r)
                    }
                    None => r,
                }
            }
        };
        if narrow {
            self.b.ins().ireduce(cl_ty(d), r)
        } else {
            r
        }
    }

    /// Division or remainder by a divisor that cannot trap.
    pub(super) fn div_rem(&mut self, op: BinOp, signed: bool, x: Value, y: Value) -> Value {
        if !signed {
            return match op {
                BinOp::FloorMod => self.b.ins().urem(x, y),
                _ => self.b.ins().udiv(x, y),
            };
        }
        match op {
            BinOp::Div => self.b.ins().sdiv(x, y),
            BinOp::FloorDiv => {
                let q = self.b.ins().sdiv(x, y);
                let r = self.b.ins().srem(x, y);
                let adjust = self.floor_adjust(r, y);
                let qt = self.b.func.dfg.value_type(q);
                let adj = self.b.ins().uextend(qt, adjust);
                self.b.ins().isub(q, adj)
            }
            _ => {
                let r = self.b.ins().srem(x, y);
                let adjust = self.floor_adjust(r, y);
                let rt = self.b.func.dfg.value_type(r);
                let zero = self.iconst(rt, 0);
                let add = self.b.ins().select(adjust, y, zero);
                self.b.ins().iadd(r, add)
            }
        }
    }

    /// Whether a truncated remainder `r` needs the floor adjustment: `r != 0` and its
    /// sign differs from the divisor's.
    pub(super) fn floor_adjust(&mut self, r: Value, y: Value) -> Value {
        let nz = self.b.ins().icmp_imm_s(IntCC::NotEqual, r, 0);
        let x = self.b.ins().bxor(r, y);
        let neg = self.b.ins().icmp_imm_s(IntCC::SignedLessThan, x, 0);
        self.b.ins().band(nz, neg)
    }

    pub(super) fn cast(&mut self, v: Value, from: DType, to: DType) -> Result<Value> {
        if from == to {
            return Ok(v);
        }
        if to.is_bool() {
            return Err(not_core("a cast to bool"));
        }
        Ok(self.numeric_cast(v, from, to))
    }

    /// A cast between numeric dtypes (a bool source is an unsigned byte of 0 or 1).
    fn numeric_cast(&mut self, v: Value, from: DType, to: DType) -> Value {
        if to.is_float() {
            let tt = cl_ty(to);
            if from.is_float() {
                return match (cl_ty(from) == types::F64, tt == types::F64) {
                    (false, false) => self.round(v, to),
                    (false, true) => self.b.ins().fpromote(types::F64, v),
                    // One rounding from f64 to the 16-bit formats, never two.
                    (true, false) => match to {
                        DType::F16 => self.host1(Host::F16FromF64, &[v]),
                        DType::BF16 => self.host1(Host::Bf16FromF64, &[v]),
                        _ => self.b.ins().fdemote(types::F32, v),
                    },
                    (true, true) => v,
                };
            }
            // Integers convert to f64 exactly but for int64/uint64 beyond 2^53, so a
            // 16-bit or 32-bit float target converts from the integer directly (one
            // rounding) only for the narrow ones; wide ones go through the target
            // width's own conversion (`fcvt` rounds once, to nearest even).
            let wide = match cl_ty(from) {
                t if t.bits() < 32 && is_signed(from) => self.b.ins().sextend(types::I32, v),
                t if t.bits() < 32 => self.b.ins().uextend(types::I32, v),
                _ => v,
            };
            let ct = if is_half(to) { types::F64 } else { tt };
            let f = if is_signed(from) || cl_ty(from).bits() < 32 {
                self.b.ins().fcvt_from_sint(ct, wide)
            } else {
                self.b.ins().fcvt_from_uint(ct, wide)
            };
            return match to {
                DType::F16 => self.host1(Host::F16FromF64, &[f]),
                DType::BF16 => self.host1(Host::Bf16FromF64, &[f]),
                _ => f,
            };
        }
        // To an integer.
        let tt = cl_ty(to);
        if from.is_float() {
            return match to {
                DType::I64 => self.b.ins().fcvt_to_sint_sat(types::I64, v),
                DType::I32 => self.b.ins().fcvt_to_sint_sat(types::I32, v),
                DType::U64 => self.b.ins().fcvt_to_uint_sat(types::I64, v),
                DType::U32 => self.b.ins().fcvt_to_uint_sat(types::I32, v),
                _ => {
                    let w = self.b.ins().fcvt_to_sint_sat(types::I32, v);
                    let (lo, hi) = semantics::int_range(to);
                    let lo = self.iconst(types::I32, lo);
                    let hi = self.iconst(types::I32, hi);
                    let w = self.b.ins().smax(w, lo);
                    let w = self.b.ins().smin(w, hi);
                    self.b.ins().ireduce(tt, w)
                }
            };
        }
        let ft = cl_ty(from);
        if tt.bits() > ft.bits() {
            if is_signed(from) {
                self.b.ins().sextend(tt, v)
            } else {
                self.b.ins().uextend(tt, v)
            }
        } else if tt.bits() < ft.bits() {
            self.b.ins().ireduce(tt, v)
        } else {
            v
        }
    }

    pub(super) fn call(&mut self, intrinsic: Intrinsic, args: &[Expr]) -> Result<(Value, DType)> {
        if args.len() != intrinsic.arity() {
            return Err(Error::Internal(format!(
                "@{}: `{}` with {} arguments",
                self.env.func.name,
                intrinsic.name(),
                args.len()
            )));
        }
        let mut vs = vec![];
        let mut d = DType::F32;
        for a in args {
            let (v, ad) = self.expr(a)?;
            vs.push(v);
            d = ad;
        }
        let x = vs[0];
        if !d.is_float() {
            if intrinsic == Intrinsic::Abs && d.is_int() {
                if !is_signed(d) {
                    return Ok((x, d));
                }
                let n = self.b.ins().ineg(x);
                let neg = self.b.ins().icmp_imm_s(IntCC::SignedLessThan, x, 0);
                return Ok((self.b.ins().select(neg, n, x), d));
            }
            return Err(self.unsupported(format_args!("`{}` of {d}", intrinsic.name())));
        }
        if d == DType::F64 {
            return Ok((self.call_f64(intrinsic, &vs)?, d));
        }
        let r = match intrinsic {
            Intrinsic::Exp => self.host1(Host::Exp, &[x]),
            Intrinsic::Log => self.host1(Host::Log, &[x]),
            Intrinsic::Tanh => self.host1(Host::Tanh, &[x]),
            Intrinsic::Erf => self.host1(Host::Erf, &[x]),
            Intrinsic::Pow => self.host1(Host::Pow, &[x, vs[1]]),
            Intrinsic::Sqrt => self.b.ins().sqrt(x),
            Intrinsic::Rsqrt => return Err(not_core("`rsqrt`")),
            // The loop-IR interpreter's stable form: e = exp(-|x|), then
            // (x >= 0 ? 1 : e) / (1 + e).
            Intrinsic::Sigmoid => {
                let a = self.b.ins().fabs(x);
                let n = self.b.ins().fneg(a);
                let e = self.host1(Host::Exp, &[n]);
                let one = self.b.ins().f32const(1.0);
                let zero = self.b.ins().f32const(0.0);
                let den = self.b.ins().fadd(one, e);
                let pos = self.b.ins().fcmp(FloatCC::GreaterThanOrEqual, x, zero);
                let num = self.b.ins().select(pos, one, e);
                self.b.ins().fdiv(num, den)
            }
            Intrinsic::Fma => self.b.ins().fma(x, vs[1], vs[2]),
            Intrinsic::Abs => self.b.ins().fabs(x),
            Intrinsic::Floor => self.b.ins().floor(x),
            Intrinsic::Ceil => self.b.ins().ceil(x),
            Intrinsic::Trig(t) => self.host1(Host::Trig(t, false), &[x]),
        };
        Ok((self.round(r, d), d))
    }

    /// A float64 intrinsic: in f64, with the loop-IR interpreter's f64 definitions.
    fn call_f64(&mut self, intrinsic: Intrinsic, vs: &[Value]) -> Result<Value> {
        let x = vs[0];
        Ok(match intrinsic {
            Intrinsic::Exp => self.host1(Host::F64(Math64::Exp), &[x]),
            Intrinsic::Log => self.host1(Host::F64(Math64::Log), &[x]),
            Intrinsic::Tanh => self.host1(Host::F64(Math64::Tanh), &[x]),
            Intrinsic::Erf => self.host1(Host::F64(Math64::Erf), &[x]),
            Intrinsic::Pow => self.host1(Host::F64(Math64::Pow), &[x, vs[1]]),
            Intrinsic::Sqrt => self.b.ins().sqrt(x),
            Intrinsic::Rsqrt => {
                let s = self.b.ins().sqrt(x);
                let one = self.b.ins().f64const(1.0);
                self.b.ins().fdiv(one, s)
            }
            Intrinsic::Sigmoid => {
                let a = self.b.ins().fabs(x);
                let n = self.b.ins().fneg(a);
                let e = self.host1(Host::F64(Math64::Exp), &[n]);
                let one = self.b.ins().f64const(1.0);
                let zero = self.b.ins().f64const(0.0);
                let den = self.b.ins().fadd(one, e);
                let pos = self.b.ins().fcmp(FloatCC::GreaterThanOrEqual, x, zero);
                let num = self.b.ins().select(pos, one, e);
                self.b.ins().fdiv(num, den)
            }
            Intrinsic::Fma => self.b.ins().fma(x, vs[1], vs[2]),
            Intrinsic::Abs => self.b.ins().fabs(x),
            Intrinsic::Floor => self.b.ins().floor(x),
            Intrinsic::Ceil => self.b.ins().ceil(x),
            Intrinsic::Trig(t) => self.host1(Host::Trig(t, true), &[x]),
        })
    }
}
