//! Statements as structured control flow: loops (`OpLoopMerge`, the counter an `OpPhi`),
//! thread loops (the invocation's `WorkgroupId`/`LocalInvocationId`, guarded when
//! shorter than the launch), `if` diamonds, lets, stores and barriers.

use kiln_executor::Result;
use kiln_ir::DType;
use kiln_te::tir::{ForKind, Scope, Stmt, ThreadAxis, VarId};
use rspirv::spirv::{LoopControl, MemorySemantics, Scope as SpvScope, SelectionControl};

use super::{Gen, Val};
use crate::launch::axis_index;

impl Gen<'_> {
    pub(super) fn stmt(&mut self, s: &Stmt) -> Result<()> {
        match s {
            Stmt::Seq(v) => v.iter().try_for_each(|c| self.stmt(c)),
            Stmt::For {
                var,
                min,
                extent,
                kind: ForKind::Thread(axis),
                body,
            } => self.thread_loop(*var, *min, *extent, *axis, body),
            Stmt::For {
                var,
                min,
                extent,
                body,
                ..
            } => self.serial_loop(*var, *min, *extent, body),
            Stmt::Store {
                buffer,
                indices,
                value,
            } => {
                let v = self.expr(value)?;
                self.store(*buffer, indices, v)
            }
            Stmt::Allocate { buffer, body } => {
                let scope = self
                    .func
                    .buffer(*buffer)
                    .ok_or_else(|| self.err(format!("allocate of unknown {buffer}")))?
                    .scope;
                if scope == Scope::Global {
                    return Err(self.err(format!("allocation of global {buffer}")));
                }
                self.scratch_buffer(*buffer)?;
                self.stmt(body)
            }
            Stmt::If { cond, then, else_ } => {
                let c = self.expr(cond)?;
                let c = self.as_bool(c)?;
                let merge = self.b.id();
                let l_then = self.b.id();
                let l_else = if else_.is_some() { self.b.id() } else { merge };
                let r = self.b.selection_merge(merge, SelectionControl::NONE);
                self.ok(r)?;
                let r = self.b.branch_conditional(c.id, l_then, l_else, []);
                self.ok(r)?;
                self.start_block(l_then)?;
                self.stmt(then)?;
                self.branch(merge)?;
                if let Some(e) = else_ {
                    self.start_block(l_else)?;
                    self.stmt(e)?;
                    self.branch(merge)?;
                }
                self.start_block(merge)
            }
            Stmt::Let { var, value, body } => {
                let v = self.expr(value)?;
                let slot = var.index();
                if slot >= self.vars.len() {
                    return Err(self.err(format!("let of unknown {var}")));
                }
                let outer = self.vars[slot].replace(v);
                self.stmt(body)?;
                self.vars[slot] = outer;
                Ok(())
            }
            Stmt::MicroKernel(call) => Err(self.err(format!(
                "microkernel {} (the GPU schedules do not tensorize)",
                call.kernel
            ))),
            Stmt::Barrier => {
                if self.guarded_depth > 0 {
                    return Err(
                        self.err("barrier under a thread loop shorter than its launch dimension")
                    );
                }
                let scope = self.const_u32(SpvScope::Workgroup as u32);
                let sem = self.const_u32(
                    (MemorySemantics::ACQUIRE_RELEASE | MemorySemantics::WORKGROUP_MEMORY).bits(),
                );
                let r = self.b.control_barrier(scope, scope, sem);
                self.ok(r)
            }
        }
    }

    /// The dtype of loop variable `var` (int32 or int64).
    fn loop_var_dtype(&self, var: VarId) -> Result<DType> {
        let d = self
            .func
            .var(var)
            .ok_or_else(|| self.err(format!("unknown loop variable {var}")))?
            .ty;
        if !d.is_scalar() || !matches!(d.dtype, DType::I32 | DType::I64) {
            return Err(self.err(format!("loop variable {var} of type {d}")));
        }
        Ok(d.dtype)
    }

    fn thread_loop(
        &mut self,
        var: VarId,
        min: i64,
        extent: i64,
        axis: ThreadAxis,
        body: &Stmt,
    ) -> Result<()> {
        let k = axis_index(axis);
        if self.bound[k] {
            return Err(self.err(format!("{axis} bound twice in one loop nest")));
        }
        if extent <= 0 {
            return Ok(());
        }
        let d = self.loop_var_dtype(var)?;
        let id = self.axis_id(axis)?;
        let int = self.ty(DType::I32)?;
        let guard = (extent as u64) < self.launch.dim(axis) as u64;
        let merge = self.b.id();
        if guard {
            let bool_t = self.ty(DType::Bool)?;
            let e = self.const_i32(extent as i32);
            let inside = self.b.s_less_than(bool_t, None, id, e);
            let inside = self.ok(inside)?;
            let l_body = self.b.id();
            let r = self.b.selection_merge(merge, SelectionControl::NONE);
            self.ok(r)?;
            let r = self.b.branch_conditional(inside, l_body, merge, []);
            self.ok(r)?;
            self.start_block(l_body)?;
            self.guarded_depth += 1;
        }
        let mut v = Val {
            id,
            dtype: DType::I32,
        };
        if min != 0 {
            let m = i32::try_from(min).map_err(|_| self.err("thread loop minimum overflows"))?;
            let m = self.const_i32(m);
            let r = self.b.i_add(int, None, id, m);
            v.id = self.ok(r)?;
        }
        if d == DType::I64 {
            v = self.cast(v, DType::I64)?;
        }
        self.vars[var.index()] = Some(v);
        self.bound[k] = true;
        let r = self.stmt(body);
        self.bound[k] = false;
        self.vars[var.index()] = None;
        r?;
        if guard {
            self.guarded_depth -= 1;
            self.branch(merge)?;
            self.start_block(merge)?;
        }
        Ok(())
    }

    fn serial_loop(&mut self, var: VarId, min: i64, extent: i64, body: &Stmt) -> Result<()> {
        if extent <= 0 {
            return Ok(());
        }
        let d = self.loop_var_dtype(var)?;
        let end = min
            .checked_add(extent)
            .filter(|&e| d == DType::I64 || i32::try_from(e).is_ok())
            .ok_or_else(|| self.err("loop bound overflows its variable"))?;
        let t = self.ty(d)?;
        let bool_t = self.ty(DType::Bool)?;
        let init = self.const_int(min, d)?;
        let end = self.const_int(end, d)?;
        let one = self.const_int(1, d)?;
        let (header, l_body, cont, merge, next) = (
            self.b.id(),
            self.b.id(),
            self.b.id(),
            self.b.id(),
            self.b.id(),
        );
        let pre = self.block;
        self.branch(header)?;
        self.start_block(header)?;
        let i = self.b.phi(t, None, [(init, pre), (next, cont)]);
        let i = self.ok(i)?;
        let c = self.b.s_less_than(bool_t, None, i, end);
        let c = self.ok(c)?;
        let r = self.b.loop_merge(merge, cont, LoopControl::NONE, []);
        self.ok(r)?;
        let r = self.b.branch_conditional(c, l_body, merge, []);
        self.ok(r)?;
        self.start_block(l_body)?;
        self.vars[var.index()] = Some(Val { id: i, dtype: d });
        let r = self.stmt(body);
        self.vars[var.index()] = None;
        r?;
        self.branch(cont)?;
        self.start_block(cont)?;
        let r = self.b.i_add(t, Some(next), i, one);
        self.ok(r)?;
        self.branch(header)?;
        self.start_block(merge)
    }
}
