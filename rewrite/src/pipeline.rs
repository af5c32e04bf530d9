//! The standard optimization pipeline: [`standard_passes`] in Relay's `relay.build`
//! order (TVM_REFERENCE.md §5) and [`optimize`], which checks the context and runs them
//! under it. What `build()` in the executor calls.

use kiln_ir::Module;

use crate::error::{Error, Result};
use crate::fuse::FuseOps;
use crate::pass::{MAX_OPT_LEVEL, Pass, PassContext, PassReport, run_passes};

/// The passes of a build, in order; each is gated by its own level under the context.
pub fn standard_passes() -> Vec<Box<dyn Pass>> {
    let mut passes: Vec<Box<dyn Pass>> = Vec::new();
    // SPLICE POINT: the classical passes (`crate::passes::classical_passes()`:
    // SimplifyInference, FoldConstant, FoldScaleAxis, CSE, DCE, InferType in Relay's
    // order) and then equality saturation (`EqSat`) go here, before fusion.
    passes.push(Box::new(FuseOps::default()));
    passes
}

/// Optimizes `module` under `ctx` with [`standard_passes`]; returns the new module and
/// the report of every pass. An opt level above [`MAX_OPT_LEVEL`] is an error.
pub fn optimize(module: &Module, ctx: &PassContext) -> Result<(Module, PassReport)> {
    if ctx.opt_level > MAX_OPT_LEVEL {
        return Err(Error::InvalidArgument(format!(
            "opt_level {} is out of range 0..={MAX_OPT_LEVEL}",
            ctx.opt_level
        )));
    }
    let passes = standard_passes();
    let refs: Vec<&dyn Pass> = passes.iter().map(|p| p.as_ref()).collect();
    run_passes(module, &refs, ctx)
}
