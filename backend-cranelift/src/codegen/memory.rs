//! Memory: local allocations (promoted to registers, stack slots within the stack
//! budget, or heap scratch), row-major addresses of accesses, and promoted buffers.

use super::*;

impl Cx<'_, '_> {
    pub(super) fn allocate(&mut self, buffer: BufferId, body: &Stmt) -> Result<()> {
        let b = self.buffer(buffer)?;
        if b.scope == Scope::Global {
            return Err(self.unsupported(format_args!("allocation of global buffer {}", b.name)));
        }
        let bytes = b
            .numel()
            .and_then(|n| n.checked_mul(b.dtype.size_bytes()))
            .filter(|&n| n <= 1 << 40)
            .ok_or_else(|| {
                self.unsupported(format_args!(
                    "local buffer {} of shape {:?}",
                    b.name, b.shape
                ))
            })?;
        let slot_bytes = bytes.max(1).div_ceil(16) * 16;
        let plan = promote::plan(self.env.func, buffer, body, &self.consts, self.outline);
        if let Some(unroll) = plan {
            let (n, d) = (b.numel().unwrap_or(0), b.dtype);
            let lanes = (d == DType::F32)
                .then(|| simd::lane_axis(self.env.func, body, buffer))
                .flatten();
            let (ty, count) = if lanes.is_some() {
                (types::F32X4, n / LANES as usize)
            } else {
                (cl_ty(d), n)
            };
            let mut zero = self.constant(0.0, 0, d);
            if lanes.is_some() {
                zero = self.b.ins().splat(types::F32X4, zero);
            }
            let vars: Vec<Variable> = (0..count)
                .map(|_| {
                    let r = self.b.declare_var(ty);
                    self.b.def_var(r, zero);
                    r
                })
                .collect();
            let regs = match lanes {
                Some(axis) => Regs::Lanes(vars, axis),
                None => Regs::Scalar(vars),
            };
            let added: Vec<VarId> = unroll
                .into_iter()
                .filter(|v| self.unroll.insert(*v))
                .collect();
            self.promoted[buffer.index()] = Some(regs);
            self.stmt(body)?;
            self.promoted[buffer.index()] = None;
            for v in added {
                self.unroll.remove(&v);
            }
            return Ok(());
        }
        if slot_bytes <= STACK_LIMIT && self.stack_bytes + slot_bytes <= STACK_BUDGET {
            self.stack_bytes += slot_bytes;
            let ss = self.b.create_sized_stack_slot(StackSlotData::new(
                StackSlotKind::ExplicitSlot,
                slot_bytes as u32,
                4,
            ));
            let base = self.b.ins().stack_addr(self.env.ptr, ss, 0);
            if slot_bytes <= INLINE_ZERO_LIMIT {
                let z = self.iconst(types::I64, 0);
                for off in (0..slot_bytes).step_by(8) {
                    self.b
                        .ins()
                        .store(MemFlagsData::trusted(), z, base, off as i32);
                }
            } else {
                let n = self.iconst(types::I64, slot_bytes as i64);
                self.host(Host::Zero, &[base, n]);
            }
            self.bufs[buffer.index()] = Some(base);
            self.stmt(body)?;
        } else {
            let n = self.iconst(types::I64, bytes as i64);
            let base = self.host1(Host::Alloc, &[n]);
            let null = self.b.ins().icmp_imm_s(IntCC::Equal, base, 0);
            let oom = self.b.create_block();
            let run = self.b.create_block();
            let done = self.b.create_block();
            self.b.set_cold_block(oom);
            self.b.ins().brif(null, oom, &[], run, &[]);
            self.b.switch_to_block(oom);
            let c = self.iconst(types::I32, status::OUT_OF_MEMORY as i64);
            let ctx = self.ctx;
            self.host(Host::Fail, &[ctx, c]);
            self.b.ins().jump(done, &[]);
            self.b.switch_to_block(run);
            self.bufs[buffer.index()] = Some(base);
            self.stmt(body)?;
            self.host(Host::Free, &[base, n]);
            self.b.ins().jump(done, &[]);
            self.b.switch_to_block(done);
        }
        self.bufs[buffer.index()] = None;
        Ok(())
    }

    /// The address of `buffer[indices]`, flattened row-major.
    pub(super) fn address(&mut self, buffer: BufferId, indices: &[Expr]) -> Result<Value> {
        let b = self.buffer(buffer)?.clone();
        if indices.len() != b.shape.len() {
            return Err(Error::Internal(format!(
                "@{}: {} indices for buffer {} of rank {}",
                self.env.func.name,
                indices.len(),
                b.name,
                b.shape.len()
            )));
        }
        let base = self.bufs[buffer.index()].ok_or_else(|| {
            Error::Internal(format!(
                "@{}: buffer {} used outside its scope",
                self.env.func.name, b.name
            ))
        })?;
        // Each index is split into its constant terms (folded into one byte offset, an
        // addressing-mode displacement) and the rest (shared by the unrolled copies of
        // an access, which differ in constant terms only).
        let mut flat: Option<Value> = None;
        let mut off: i64 = 0;
        let mut row: i64 = 1;
        for (ix, &ext) in indices.iter().zip(&b.shape).rev() {
            let mut terms = vec![];
            let mut c = 0i64;
            self.split_affine(ix, 1, &mut terms, &mut c);
            off = off.wrapping_add(c.wrapping_mul(row));
            for (t, k) in terms {
                let (v, d) = self.expr(t)?;
                if !d.is_int() {
                    return Err(Error::Internal(format!(
                        "@{}: index of type {d}",
                        self.env.func.name
                    )));
                }
                let v = self.to_i64(v, d);
                let k = k.wrapping_mul(row);
                let v = if k == 1 {
                    v
                } else {
                    self.b.ins().imul_imm_s(v, k)
                };
                flat = Some(match flat {
                    None => v,
                    Some(acc) => self.b.ins().iadd(acc, v),
                });
            }
            row = row.wrapping_mul(ext as i64);
        }
        let size = b.dtype.size_bytes() as i64;
        let mut addr = match flat {
            None => base,
            Some(f) => {
                let off = self.b.ins().imul_imm_s(f, size);
                self.b.ins().iadd(base, off)
            }
        };
        if off != 0 {
            addr = self.b.ins().iadd_imm_s(addr, off.wrapping_mul(size));
        }
        Ok(match self.guard {
            Some(g) => self.b.ins().select(g, addr, base),
            None => addr,
        })
    }

    /// Splits `k * e` (integer) into the non-constant terms of its top-level sums
    /// and constant multiples, each with its factor, and the sum `c` of its constant
    /// ones.
    pub(super) fn split_affine<'e>(
        &self,
        e: &'e Expr,
        k: i64,
        terms: &mut Vec<(&'e Expr, i64)>,
        c: &mut i64,
    ) {
        if let Some(x) = semantics::const_int(e, self.env.func, &self.consts).map(|(v, _)| v) {
            *c = c.wrapping_add(k.wrapping_mul(x));
            return;
        }
        match e {
            Expr::Binary { op, lhs, rhs } => match (op, lhs.as_int(), rhs.as_int()) {
                (BinOp::Add, _, _) => {
                    self.split_affine(lhs, k, terms, c);
                    self.split_affine(rhs, k, terms, c);
                }
                (BinOp::Sub, _, _) => {
                    self.split_affine(lhs, k, terms, c);
                    self.split_affine(rhs, k.wrapping_neg(), terms, c);
                }
                (BinOp::Mul, _, Some(m)) => self.split_affine(lhs, k.wrapping_mul(m), terms, c),
                (BinOp::Mul, Some(m), _) => self.split_affine(rhs, k.wrapping_mul(m), terms, c),
                _ => terms.push((e, k)),
            },
            _ => terms.push((e, k)),
        }
    }

    /// The variable holding `buffer[indices]` if the buffer is promoted to registers.
    pub(super) fn promoted_elem(
        &mut self,
        buffer: BufferId,
        indices: &[Expr],
    ) -> Result<Option<Slot>> {
        let Some(regs) = &self.promoted[buffer.index()] else {
            return Ok(None);
        };
        let b = self.buffer(buffer)?;
        let mut at = vec![];
        for (ix, &ext) in indices.iter().zip(&b.shape) {
            let i = semantics::const_int(ix, self.env.func, &self.consts)
                .map(|(v, _)| v)
                .filter(|&i| i >= 0 && i < ext as i64)
                .ok_or_else(|| {
                    Error::Internal(format!(
                        "@{}: index of promoted buffer {} is not a constant in bounds",
                        self.env.func.name, b.name
                    ))
                })?;
            at.push(i);
        }
        Ok(match regs {
            Regs::Scalar(v) => v
                .get(lane_flat(&b.shape, &at, None) as usize)
                .map(|&r| Slot::Scalar(r)),
            Regs::Lanes(v, axis) => {
                let k = lane_flat(&b.shape, &at, Some(*axis)) as usize;
                v.get(k / LANES as usize)
                    .map(|&r| Slot::Lane(r, (k % LANES as usize) as u8))
            }
        })
    }

    pub(super) fn read_slot(&mut self, s: Slot) -> Value {
        match s {
            Slot::Scalar(r) => self.b.use_var(r),
            Slot::Lane(r, l) => {
                let v = self.b.use_var(r);
                self.b.ins().extractlane(v, l)
            }
        }
    }

    pub(super) fn write_slot(&mut self, s: Slot, x: Value) {
        match s {
            Slot::Scalar(r) => self.b.def_var(r, x),
            Slot::Lane(r, l) => {
                let v = self.b.use_var(r);
                let v = self.b.ins().insertlane(v, x, l);
                self.b.def_var(r, v);
            }
        }
    }

    /// The f32x4 variable holding lanes `var = lane0 .. lane0 + 3` of a promoted access
    /// (advancing along the buffer's lane axis with `var`), if the buffer is held as
    /// vectors and the group is aligned.
    pub(super) fn promoted_group(
        &self,
        buffer: BufferId,
        indices: &[Expr],
        var: VarId,
    ) -> Option<Option<Variable>> {
        let regs = self.promoted[buffer.index()].as_ref()?;
        let Regs::Lanes(v, axis) = regs else {
            return Some(None);
        };
        let b = self.env.func.buffer(buffer)?;
        if simd::axis_of(indices, var) != Some(*axis) {
            return Some(None);
        }
        let mut at = vec![];
        for (ix, &ext) in indices.iter().zip(&b.shape) {
            let i = semantics::const_int(ix, self.env.func, &self.consts)
                .map(|(v, _)| v)
                .filter(|&i| i >= 0 && i < ext as i64);
            let Some(i) = i else {
                return Some(None);
            };
            at.push(i);
        }
        if at[*axis] % LANES != 0 || at[*axis] + LANES > b.shape[*axis] as i64 {
            return Some(None);
        }
        let flat = lane_flat(&b.shape, &at, Some(*axis));
        Some(v.get((flat / LANES) as usize).copied())
    }
}
