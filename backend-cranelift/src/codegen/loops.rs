//! Statements and loops: the statement dispatcher, counted, unrolled and parallel
//! (outlined) loops, and loops of one iteration bound to a constant.

use super::*;

/// How many stores `s` executes when every loop inside is fully unrolled, if every loop
/// inside has a constant extent of at most [`AUTO_UNROLL_EXTENT`] (or is unrolled
/// anyway), there is no allocation, and no call to an out-of-line intrinsic.
pub(super) fn unrolled_stores(s: &Stmt) -> Option<i64> {
    match s {
        Stmt::Seq(v) => v
            .iter()
            .try_fold(0i64, |n, c| Some(n + unrolled_stores(c)?)),
        Stmt::For {
            extent, kind, body, ..
        } => {
            if *kind == ForKind::Parallel || *extent > AUTO_UNROLL_EXTENT.max(8) {
                return None;
            }
            // An f32x4 loop stores once per group of lanes.
            let n = if *kind == ForKind::Vectorized && extent % LANES == 0 {
                extent / LANES
            } else {
                (*extent).max(0)
            };
            Some(unrolled_stores(body)? * n)
        }
        Stmt::Store { value, .. } => {
            let mut calls = false;
            value.visit(&mut |x| calls |= matches!(x, Expr::Call { .. }));
            (!calls).then_some(1)
        }
        Stmt::If { then, else_, .. } => {
            let e = match else_ {
                Some(e) => unrolled_stores(e)?,
                None => 0,
            };
            Some(unrolled_stores(then)? + e)
        }
        Stmt::Let { body, .. } => unrolled_stores(body),
        Stmt::Allocate { .. } | Stmt::Barrier | Stmt::MicroKernel(_) => None,
    }
}

impl Cx<'_, '_> {
    pub(super) fn stmt(&mut self, s: &Stmt) -> Result<()> {
        deep(|| self.stmt_on_stack(s))
    }

    fn stmt_on_stack(&mut self, s: &Stmt) -> Result<()> {
        match s {
            Stmt::Seq(v) => v.iter().try_for_each(|c| self.stmt(c)),
            Stmt::For {
                var,
                min,
                extent,
                kind,
                body,
            } => {
                if *extent <= 0 {
                    return Ok(());
                }
                let d = self.var_dtype(*var)?;
                if !d.is_int() {
                    return Err(self.unsupported(format_args!("loop over a {d} variable")));
                }
                let unroll = *extent == 1
                    || self.unroll.contains(var)
                    || (*kind == ForKind::Unrolled && *extent <= UNROLL_LIMIT)
                    || (*kind != ForKind::Parallel
                        && *extent <= AUTO_UNROLL_EXTENT
                        && unrolled_stores(body).is_some_and(|n| n * extent <= AUTO_UNROLL_STORES));
                if *kind == ForKind::Vectorized {
                    let plan = (extent % LANES == 0)
                        .then(|| simd::plan(self.env.func, body, *var))
                        .flatten();
                    simd::note_loop(&self.env.func.name, *extent, plan.is_some());
                    if let Some(guards) = plan {
                        return self.vector_loop(*var, d, *min, *extent, unroll, body, &guards);
                    }
                }
                match kind {
                    ForKind::Parallel if self.outline && *extent > 1 => {
                        self.parallel(*var, *min, *extent, body)
                    }
                    _ if unroll => {
                        for i in 0..*extent {
                            let v = self.iconst(cl_ty(d), min + i);
                            self.vars[var.index()] = Some((v, d));
                            self.consts[var.index()] = Some(min + i);
                            self.stmt(body)?;
                        }
                        self.vars[var.index()] = None;
                        self.consts[var.index()] = None;
                        Ok(())
                    }
                    _ => {
                        let lo = self.iconst(types::I64, *min);
                        let hi = self.iconst(types::I64, min + extent);
                        self.counted_loop(lo, hi, *var, d, body)
                    }
                }
            }
            Stmt::Store {
                buffer,
                indices,
                value,
            } => {
                let bd = self.buffer(*buffer)?.dtype;
                let (v, d) = self.expr(value)?;
                if d != bd {
                    return Err(Error::Internal(format!(
                        "@{}: store of {d} to a {bd} buffer",
                        self.env.func.name
                    )));
                }
                if let Some(r) = self.promoted_elem(*buffer, indices)? {
                    self.write_slot(r, v);
                    return Ok(());
                }
                let addr = self.address(*buffer, indices)?;
                let v = if is_half(d) {
                    let h = if d == DType::F16 {
                        Host::F16Store
                    } else {
                        Host::Bf16Store
                    };
                    let bits = self.host1(h, &[v]);
                    self.b.ins().ireduce(types::I16, bits)
                } else {
                    v
                };
                self.b.ins().store(MemFlagsData::trusted(), v, addr, 0);
                Ok(())
            }
            Stmt::Allocate { buffer, body } => self.allocate(*buffer, body),
            Stmt::If { cond, then, else_ } => {
                // A condition unrolling made constant: emit only the branch taken.
                if let Some(c) = semantics::const_bool(cond, self.env.func, &self.consts) {
                    let taken = if c { Some(&**then) } else { else_.as_deref() };
                    return taken.map_or(Ok(()), |s| self.stmt(s));
                }
                let (c, _) = self.expr(cond)?;
                let tb = self.b.create_block();
                let eb = self.b.create_block();
                let merge = self.b.create_block();
                self.b.ins().brif(c, tb, &[], eb, &[]);
                self.b.switch_to_block(tb);
                self.stmt(then)?;
                self.b.ins().jump(merge, &[]);
                self.b.switch_to_block(eb);
                if let Some(e) = else_ {
                    self.stmt(e)?;
                }
                self.b.ins().jump(merge, &[]);
                self.b.switch_to_block(merge);
                Ok(())
            }
            Stmt::Let { var, value, body } => {
                let (v, d) = self.expr(value)?;
                self.vars[var.index()] = Some((v, d));
                self.consts[var.index()] = if d.is_int() {
                    semantics::const_int(value, self.env.func, &self.consts).map(|(v, _)| v)
                } else {
                    None
                };
                self.stmt(body)?;
                self.vars[var.index()] = None;
                self.consts[var.index()] = None;
                Ok(())
            }
            Stmt::Barrier => Err(self.unsupported("a barrier (GPU block synchronization)")),
            Stmt::MicroKernel(call) => self.microkernel(call),
        }
    }

    // ---- f32x4 loops (module `simd`) ----

    /// `for var in lo..hi` (i64 bounds) around `body`.
    pub(super) fn counted_loop(
        &mut self,
        lo: Value,
        hi: Value,
        var: VarId,
        d: DType,
        body: &Stmt,
    ) -> Result<()> {
        let header = self.b.create_block();
        let body_b = self.b.create_block();
        let exit = self.b.create_block();
        let iv = self.b.append_block_param(header, types::I64);
        self.b.ins().jump(header, &[BlockArg::Value(lo)]);
        self.b.switch_to_block(header);
        // Test hook (crate::testing, only with the `testing` feature): the planted
        // off-by-one stops a step early.
        #[cfg(feature = "testing")]
        let hi = if crate::testing::planted(crate::testing::Bug::LoopBoundOffByOne) {
            self.b.ins().iadd_imm_s(hi, -1)
        } else {
            hi
        };
        let more = self.b.ins().icmp(IntCC::SignedLessThan, iv, hi);
        self.b.ins().brif(more, body_b, &[], exit, &[]);
        self.b.switch_to_block(body_b);
        let v = match cl_ty(d) {
            types::I64 => iv,
            t => self.b.ins().ireduce(t, iv),
        };
        self.vars[var.index()] = Some((v, d));
        self.stmt(body)?;
        self.vars[var.index()] = None;
        let next = self.b.ins().iadd_imm_s(iv, 1);
        self.b.ins().jump(header, &[BlockArg::Value(next)]);
        self.b.switch_to_block(exit);
        Ok(())
    }

    /// Outlines a parallel loop and runs it on the pool.
    pub(super) fn parallel(
        &mut self,
        var: VarId,
        min: i64,
        extent: i64,
        body: &Stmt,
    ) -> Result<()> {
        let idx = self.pending.len();
        let name = format!("{}_par{idx}", self.env.name);
        let id = self
            .module
            .declare_function(&name, Linkage::Local, self.env.body_sig)
            .map_err(internal)?;
        let vars: Vec<(VarId, DType)> = self
            .vars
            .iter()
            .enumerate()
            .filter_map(|(i, v)| v.map(|(_, d)| (VarId(i as u32), d)))
            .collect();
        let bufs: Vec<BufferId> = (0..self.bufs.len())
            .map(|i| BufferId(i as u32))
            .filter(|&b| self.bufs[b.index()].is_some() && !self.env.func.params.contains(&b))
            .collect();
        let slots = (vars.len() + bufs.len()).max(1);
        self.stack_bytes += slots * 8;
        if self.stack_bytes > STACK_BUDGET {
            return Err(self.unsupported(format_args!(
                "parallel loops capturing {} values in all (more than the stack budget of \
                 {STACK_BUDGET} bytes)",
                self.stack_bytes / 8
            )));
        }
        let ss = self.b.create_sized_stack_slot(StackSlotData::new(
            StackSlotKind::ExplicitSlot,
            (slots * 8) as u32,
            3,
        ));
        let env = self.b.ins().stack_addr(self.env.ptr, ss, 0);
        for (k, &(v, _)) in vars.iter().enumerate() {
            let x = self.vars[v.index()].expect("captured variable is bound").0;
            self.b
                .ins()
                .store(MemFlagsData::trusted(), x, env, (k * 8) as i32);
        }
        for (k, &bf) in bufs.iter().enumerate() {
            let x = self.bufs[bf.index()].expect("captured buffer is bound");
            self.b.ins().store(
                MemFlagsData::trusted(),
                x,
                env,
                ((vars.len() + k) * 8) as i32,
            );
        }
        let r = self.module.declare_func_in_func(id, self.b.func);
        let fptr = self.b.ins().func_addr(self.env.ptr, r);
        let lo = self.iconst(types::I64, min);
        let n = self.iconst(types::I64, extent);
        let (ctx, args) = (self.ctx, self.args);
        self.host(Host::ParallelFor, &[ctx, fptr, args, env, lo, n]);
        self.pending.push(Outlined {
            id,
            var,
            body: body.clone(),
            vars,
            bufs,
        });
        Ok(())
    }
}
