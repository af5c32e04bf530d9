//! The `microkernel` statement: one call of the micro-kernel's host symbol (module
//! [`crate::microkernel`]) with each operand's base address and element strides, at the
//! ISA level the target chose.

use super::*;
use kiln_te::tir::{KernelCall, MicroKernel};

impl Cx<'_, '_> {
    pub(super) fn microkernel(&mut self, call: &KernelCall) -> Result<()> {
        call.check(self.env.func)
            .map_err(|e| Error::Internal(format!("@{}: {e}", self.env.func.name)))?;
        let mut args = vec![self.b.ins().iconst(types::I32, self.env.isa.code() as i64)];
        let mut strides = vec![];
        for o in &call.operands {
            args.push(self.address(o.buffer, &o.base)?);
            let shape = &self.buffer(o.buffer)?.shape;
            let stride = |d: usize| shape[d + 1..].iter().product::<usize>() as i64;
            strides.extend(o.axes.iter().map(|&d| stride(d)));
        }
        let sizes = call.kernel.sizes().into_iter().map(|s| s.1);
        match call.kernel {
            MicroKernel::Gemm { .. } => {
                for v in sizes.chain(strides) {
                    args.push(self.iconst(types::I64, v));
                }
                self.host(Host::Gemm, &args);
            }
            MicroKernel::Conv2d { .. } | MicroKernel::DepthwiseConv2d { .. } => {
                // Sizes and strides in a stack array (20 or 18 values).
                let values: Vec<i64> = sizes.chain(strides).collect();
                let ss = self.b.create_sized_stack_slot(StackSlotData::new(
                    StackSlotKind::ExplicitSlot,
                    (values.len() * 8) as u32,
                    3,
                ));
                let at = self.b.ins().stack_addr(self.env.ptr, ss, 0);
                for (k, v) in values.into_iter().enumerate() {
                    let x = self.iconst(types::I64, v);
                    self.b
                        .ins()
                        .store(MemFlagsData::trusted(), x, at, (k * 8) as i32);
                }
                args.push(at);
                let host = if matches!(call.kernel, MicroKernel::Conv2d { .. }) {
                    Host::Conv2d
                } else {
                    Host::DepthwiseConv2d
                };
                self.host(host, &args);
            }
        }
        Ok(())
    }
}
