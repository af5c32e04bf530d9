//! The conv-tile loop interchange: a backend special case that reorders a register
//! tile's loops for the CPU (a candidate for a schedule transform).

use super::*;

impl Cx<'_, '_> {
    /// An unrolled loop `jvar` whose body is a guarded `vectorized` loop over promoted
    /// accumulators (a register-tiled conv2d's `j.inner` around `l.inner`): runs group by
    /// group, every `jvar` iteration of a group under one guard check, so the branch and
    /// the guard and data-address arithmetic are shared. Returns `false`, emitting
    /// nothing, when the loop does not have that form.
    pub(super) fn interchange(
        &mut self,
        jvar: VarId,
        jd: DType,
        jmin: i64,
        jext: i64,
        body: &Stmt,
    ) -> Result<bool> {
        let Stmt::For {
            var,
            min,
            extent,
            kind: ForKind::Vectorized,
            body: inner,
        } = body
        else {
            return Ok(false);
        };
        let (var, min, extent) = (*var, *min, *extent);
        if extent <= 0 || extent % LANES != 0 || jext < 1 {
            return Ok(false);
        }
        if !(self.unroll.contains(&var) || extent <= AUTO_UNROLL_EXTENT) {
            return Ok(false);
        }
        let Some(guards) = simd::plan(self.env.func, inner, var) else {
            return Ok(false);
        };
        if guards.is_empty() {
            return Ok(false);
        }
        // Every store must go to a distinct f32x4 accumulator for every (jvar, group),
        // and the body must load no other buffer it stores.
        let mut stores = vec![];
        inner.visit(&mut |s| {
            if let Stmt::Store {
                buffer, indices, ..
            } = s
            {
                stores.push((*buffer, indices.clone()));
            }
        });
        let mut ok = true;
        inner.visit(&mut |s| {
            if let Stmt::Store { value, .. } = s {
                value.visit(&mut |x| {
                    if let Expr::Load { buffer, indices } = x {
                        ok &= stores.iter().all(|(b, ix)| b != buffer || ix == indices);
                    }
                });
            }
        });
        if !ok {
            return Ok(false);
        }
        let mut seen = BTreeSet::new();
        for j in 0..jext {
            self.consts[jvar.index()] = Some(jmin + j);
            for g in 0..extent / LANES {
                self.consts[var.index()] = Some(min + g * LANES);
                for (b, ix) in &stores {
                    match self.promoted_group(*b, ix, var) {
                        Some(Some(r)) if seen.insert(r.as_u32()) => {}
                        _ => ok = false,
                    }
                }
            }
        }
        self.consts[jvar.index()] = None;
        self.consts[var.index()] = None;
        if !ok {
            return Ok(false);
        }
        let vd = self.var_dtype(var)?;
        simd::note_loop(&self.env.func.name, extent, true);
        for g in 0..extent / LANES {
            let base = min + g * LANES;
            let bv = self.iconst(types::I64, base);
            let mut ok: Option<Value> = None;
            for j in 0..jext {
                self.bind_const(jvar, jd, jmin + j);
                for lane in [0, LANES - 1] {
                    self.set_lane(var, vd, bv, Some(base), lane);
                    for c in &guards {
                        let (c, _) = self.expr(c)?;
                        ok = Some(match ok {
                            Some(o) => self.b.ins().band(o, c),
                            None => c,
                        });
                    }
                }
            }
            simd::stats::SHARED_GUARD_GROUPS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let merge = self.b.create_block();
            let vb = self.b.create_block();
            let sb = self.b.create_block();
            self.b
                .ins()
                .brif(ok.expect("guards checked"), vb, &[], sb, &[]);
            self.b.switch_to_block(sb);
            for j in 0..jext {
                self.bind_const(jvar, jd, jmin + j);
                self.scalar_lanes(var, vd, bv, Some(base), inner)?;
            }
            self.b.ins().jump(merge, &[]);
            self.b.switch_to_block(vb);
            for j in 0..jext {
                self.bind_const(jvar, jd, jmin + j);
                simd::note_group(true);
                self.set_lane(var, vd, bv, Some(base), 0);
                self.vector_body(var, inner)?;
            }
            self.b.ins().jump(merge, &[]);
            self.b.switch_to_block(merge);
        }
        for v in [jvar, var] {
            self.vars[v.index()] = None;
            self.consts[v.index()] = None;
        }
        Ok(true)
    }
}
