//! Vectorized loops as f32x4 code (the plans of module `simd`): the vector loop, its
//! groups of lanes, and vector expressions.

use super::*;

impl Cx<'_, '_> {
    /// A `vectorized` loop that `simd::plan` accepted, [`LANES`] iterations at a time.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn vector_loop(
        &mut self,
        var: VarId,
        d: DType,
        min: i64,
        extent: i64,
        unroll: bool,
        body: &Stmt,
        guards: &[&Expr],
    ) -> Result<()> {
        if unroll {
            for g in 0..extent / LANES {
                let base = min + g * LANES;
                let bv = self.iconst(types::I64, base);
                self.vector_group(var, d, bv, Some(base), body, guards)?;
            }
        } else {
            let lo = self.iconst(types::I64, min);
            let hi = self.iconst(types::I64, min + extent);
            let header = self.b.create_block();
            let body_b = self.b.create_block();
            let exit = self.b.create_block();
            let iv = self.b.append_block_param(header, types::I64);
            self.b.ins().jump(header, &[BlockArg::Value(lo)]);
            self.b.switch_to_block(header);
            let more = self.b.ins().icmp(IntCC::SignedLessThan, iv, hi);
            self.b.ins().brif(more, body_b, &[], exit, &[]);
            self.b.switch_to_block(body_b);
            self.vector_group(var, d, iv, None, body, guards)?;
            let next = self.b.ins().iadd_imm_s(iv, LANES);
            self.b.ins().jump(header, &[BlockArg::Value(next)]);
            self.b.switch_to_block(exit);
        }
        self.vars[var.index()] = None;
        self.consts[var.index()] = None;
        Ok(())
    }

    /// Binds `var` to lane `i` of the group starting at `base`.
    pub(super) fn set_lane(
        &mut self,
        var: VarId,
        d: DType,
        base: Value,
        cbase: Option<i64>,
        i: i64,
    ) {
        let v = if i == 0 {
            base
        } else {
            self.b.ins().iadd_imm_s(base, i)
        };
        let v = match cl_ty(d) {
            types::I64 => v,
            t => self.b.ins().ireduce(t, v),
        };
        self.vars[var.index()] = Some((v, d));
        self.consts[var.index()] = cbase.map(|c| c + i);
    }

    /// One group of [`LANES`] iterations: vector code when every guard holds for the
    /// first and last lane, scalar code otherwise.
    pub(super) fn vector_group(
        &mut self,
        var: VarId,
        d: DType,
        base: Value,
        cbase: Option<i64>,
        body: &Stmt,
        guards: &[&Expr],
    ) -> Result<()> {
        self.set_lane(var, d, base, cbase, 0);
        let mut aligned = true;
        body.visit(&mut |s| {
            let mut check = |buffer: BufferId, indices: &[Expr]| {
                if self.promoted[buffer.index()].is_some()
                    && indices.iter().any(|i| simd::mentions(i, var))
                {
                    aligned &= matches!(self.promoted_group(buffer, indices, var), Some(Some(_)));
                }
            };
            if let Stmt::Store {
                buffer,
                indices,
                value,
            } = s
            {
                check(*buffer, indices);
                value.visit(&mut |x| {
                    if let Expr::Load { buffer, indices } = x {
                        check(*buffer, indices);
                    }
                });
            }
        });
        simd::note_group(aligned);
        if !aligned {
            return self.scalar_lanes(var, d, base, cbase, body);
        }
        let merge = self.b.create_block();
        if !guards.is_empty() {
            let mut ok: Option<Value> = None;
            for lane in [0, LANES - 1] {
                self.set_lane(var, d, base, cbase, lane);
                for g in guards {
                    let (c, _) = self.expr(g)?;
                    ok = Some(match ok {
                        Some(o) => self.b.ins().band(o, c),
                        None => c,
                    });
                }
            }
            let vb = self.b.create_block();
            let sb = self.b.create_block();
            self.b
                .ins()
                .brif(ok.expect("guards checked"), vb, &[], sb, &[]);
            self.b.switch_to_block(sb);
            self.scalar_lanes(var, d, base, cbase, body)?;
            self.b.ins().jump(merge, &[]);
            self.b.switch_to_block(vb);
            self.set_lane(var, d, base, cbase, 0);
        }
        self.vector_body(var, body)?;
        self.b.ins().jump(merge, &[]);
        self.b.switch_to_block(merge);
        Ok(())
    }

    pub(super) fn scalar_lanes(
        &mut self,
        var: VarId,
        d: DType,
        base: Value,
        cbase: Option<i64>,
        body: &Stmt,
    ) -> Result<()> {
        for i in 0..LANES {
            self.set_lane(var, d, base, cbase, i);
            self.stmt(body)?;
        }
        Ok(())
    }

    pub(super) fn vector_body(&mut self, var: VarId, s: &Stmt) -> Result<()> {
        match s {
            Stmt::Seq(v) => v.iter().try_for_each(|c| self.vector_body(var, c)),
            Stmt::Store {
                buffer,
                indices,
                value,
            } => {
                let x = self.vexpr(var, value)?;
                if let Some(g) = self.promoted_group(*buffer, indices, var) {
                    let r = g.ok_or_else(|| Error::Internal("unaligned vector group".into()))?;
                    self.b.def_var(r, x);
                    return Ok(());
                }
                let addr = self.address(*buffer, indices)?;
                let flags = MemFlagsData::new().with_notrap();
                match self.lane_stride(*buffer, indices, var)? {
                    1 => {
                        self.b.ins().store(flags, x, addr, 0);
                    }
                    s => {
                        // Scatter, lane by lane.
                        for l in 0..LANES {
                            let e = self.b.ins().extractlane(x, l as u8);
                            self.b.ins().store(flags, e, addr, (l * s * 4) as i32);
                        }
                    }
                }
                Ok(())
            }
            _ => Err(Error::Internal("non-store in a vector body".into())),
        }
    }

    /// The element stride in `var` of f32 access `buffer[indices]` (checked by
    /// `simd::plan`).
    pub(super) fn lane_stride(
        &self,
        buffer: BufferId,
        indices: &[Expr],
        var: VarId,
    ) -> Result<i64> {
        let b = self.buffer(buffer)?;
        simd::flat_stride(&b.shape, indices, var)
            .ok_or_else(|| Error::Internal("vector access without a constant stride".into()))
    }

    /// The f32x4 value of `e` over the current group (lane 0 bound to `var`).
    pub(super) fn vexpr(&mut self, var: VarId, e: &Expr) -> Result<Value> {
        if !simd::mentions(e, var) {
            let (x, _) = self.expr(e)?;
            return Ok(self.b.ins().splat(types::F32X4, x));
        }
        Ok(match e {
            Expr::Load { buffer, indices } => {
                if let Some(g) = self.promoted_group(*buffer, indices, var) {
                    let r = g.ok_or_else(|| Error::Internal("unaligned vector group".into()))?;
                    return Ok(self.b.use_var(r));
                }
                let addr = self.address(*buffer, indices)?;
                let flags = MemFlagsData::new().with_notrap();
                match self.lane_stride(*buffer, indices, var)? {
                    1 => self.b.ins().load(types::F32X4, flags, addr, 0),
                    s => {
                        // Gather: four scalar loads at constant offsets.
                        let x0 = self.b.ins().load(types::F32, flags, addr, 0);
                        let mut v = self.b.ins().scalar_to_vector(types::F32X4, x0);
                        for l in 1..LANES {
                            let x = self
                                .b
                                .ins()
                                .load(types::F32, flags, addr, (l * s * 4) as i32);
                            v = self.b.ins().insertlane(v, x, l as u8);
                        }
                        v
                    }
                }
            }
            Expr::Binary { op, lhs, rhs } => {
                if self.env.fma && *op == BinOp::Add {
                    let mul = |x: &Expr| match x {
                        Expr::Binary {
                            op: BinOp::Mul,
                            lhs,
                            rhs,
                        } => Some((lhs.as_ref().clone(), rhs.as_ref().clone())),
                        _ => None,
                    };
                    let fused = match (mul(lhs), mul(rhs)) {
                        (Some((x, y)), _) => Some((x, y, rhs)),
                        (None, Some((x, y))) => Some((x, y, lhs)),
                        _ => None,
                    };
                    if let Some((x, y, c)) = fused {
                        let x = self.vexpr(var, &x)?;
                        let y = self.vexpr(var, &y)?;
                        let c = self.vexpr(var, c)?;
                        return Ok(self.b.ins().fma(x, y, c));
                    }
                }
                let a = self.vexpr(var, lhs)?;
                let b = self.vexpr(var, rhs)?;
                match op {
                    BinOp::Add => self.b.ins().fadd(a, b),
                    BinOp::Sub => self.b.ins().fsub(a, b),
                    BinOp::Mul => self.b.ins().fmul(a, b),
                    BinOp::Div => self.b.ins().fdiv(a, b),
                    // IEEE 754-2019 maximum/minimum, as scalar code (the loop IR's
                    // contract): NaN propagates, -0 < +0.
                    BinOp::Min => self.b.ins().fmin(a, b),
                    BinOp::Max => self.b.ins().fmax(a, b),
                    _ => return Err(Error::Internal(format!("{op:?} in a vector body"))),
                }
            }
            Expr::Select { cond, then, else_ } => match simd::lanewise_cmp(self.env.func, cond) {
                Some((op, l, r)) => {
                    let a = self.vexpr(var, l)?;
                    let b = self.vexpr(var, r)?;
                    let cc = match op {
                        BinOp::Lt => FloatCC::LessThan,
                        BinOp::Le => FloatCC::LessThanOrEqual,
                        BinOp::Gt => FloatCC::GreaterThan,
                        _ => FloatCC::GreaterThanOrEqual,
                    };
                    let m = self.b.ins().fcmp(cc, a, b);
                    let m = self.b.ins().bitcast(types::F32X4, MemFlagsData::new(), m);
                    let t = self.vexpr(var, then)?;
                    let e = self.vexpr(var, else_)?;
                    self.b.ins().bitselect(m, t, e)
                }
                // A guard, checked for the whole group.
                None => self.vexpr(var, then)?,
            },
            _ => {
                return Err(Error::Internal(
                    "unexpected expression in a vector body".into(),
                ));
            }
        })
    }
}
