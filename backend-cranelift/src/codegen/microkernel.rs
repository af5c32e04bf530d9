//! The `microkernel` statement: one call of the micro-kernel's host symbol (module
//! [`crate::microkernel`]) with each operand's base address and element strides, at the
//! ISA level the target chose.

use super::*;
use kiln_te::tir::{KernelCall, MicroKernel};

impl Cx<'_, '_> {
    pub(super) fn microkernel(&mut self, call: &KernelCall) -> Result<()> {
        call.check(self.env.func)
            .map_err(|e| Error::Internal(format!("@{}: {e}", self.env.func.name)))?;
        let MicroKernel::Gemm { m, n, k } = call.kernel;
        let mut args = vec![self.b.ins().iconst(types::I32, self.env.isa.code() as i64)];
        let mut strides = vec![];
        for o in &call.operands {
            args.push(self.address(o.buffer, &o.base)?);
            let shape = &self.buffer(o.buffer)?.shape;
            let stride = |d: usize| shape[d + 1..].iter().product::<usize>() as i64;
            strides.extend([stride(o.axes[0]), stride(o.axes[1])]);
        }
        for v in [m, n, k].into_iter().chain(strides) {
            args.push(self.iconst(types::I64, v));
        }
        self.host(Host::Gemm, &args);
        Ok(())
    }
}
