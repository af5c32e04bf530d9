//! The standard optimization pipeline: [`standard_passes`] in Relay's `relay.build`
//! order (apache/tvm `src/relay/backend/build_module.cc`) and [`optimize`], which checks the context and runs them
//! under it. What `build()` in the executor calls.

use kiln_ir::Module;

use crate::eqsat::EqSat;
use crate::error::{Error, Result};
use crate::fuse::FuseOps;
use crate::pass::{MAX_OPT_LEVEL, Pass, PassContext, PassReport, run_passes, with_user_passes};
use crate::passes::{
    DeadCodeElimination, EliminateCommonSubexpr, FoldConstant, FoldScaleAxis, InferType,
    SimplifyInference,
};

/// The passes of a build, in order; each is gated by its own level under the context.
/// Relay's order with equality saturation where Relay runs `SimplifyExpr`: the
/// classical passes (batch norms become scale and shift, common subexpressions merge,
/// constants and per-channel scales fold into weights), then `EqSat` (level 3), whose
/// folding rules leave ops over constants that the next `FoldConstant` evaluates, then
/// dead code goes and `FuseOps` cuts the graph into primitive functions.
pub fn standard_passes() -> Vec<Box<dyn Pass>> {
    vec![
        Box::new(SimplifyInference),
        Box::new(EliminateCommonSubexpr),
        Box::new(FoldConstant::default()),
        Box::new(FoldScaleAxis),
        Box::new(FoldConstant::default()),
        Box::new(EqSat::default()),
        Box::new(FoldConstant::default()),
        Box::new(InferType),
        Box::new(DeadCodeElimination),
        Box::new(FuseOps::default()),
    ]
}

/// Optimizes `module` under `ctx` with [`standard_passes`] and the user passes of
/// `ctx.extensions` at their positions (each runs once, in this one sequence); returns
/// the new module and the report of every pass. An opt level above [`MAX_OPT_LEVEL`] is
/// an error, and so is a user pass placed at a pass the pipeline does not have.
pub fn optimize(module: &Module, ctx: &PassContext) -> Result<(Module, PassReport)> {
    if ctx.opt_level > MAX_OPT_LEVEL {
        return Err(Error::InvalidArgument(format!(
            "opt_level {} is out of range 0..={MAX_OPT_LEVEL}",
            ctx.opt_level
        )));
    }
    let passes = standard_passes();
    let refs: Vec<&dyn Pass> = passes.iter().map(|p| p.as_ref()).collect();
    let refs = with_user_passes(&refs, &ctx.extensions)?;
    run_passes(module, &refs, ctx)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_ir::op::{Unary, UnaryKind};
    use kiln_ir::{DType, Type};

    fn relu() -> Module {
        Module::single_op(
            Unary {
                kind: UnaryKind::Relu,
            },
            &[Type::tensor([3], DType::F32)],
        )
        .unwrap()
    }

    #[test]
    fn optimize_runs_fusion_last_and_reports_it() {
        let (m, report) = optimize(&relu(), &PassContext::from(3)).unwrap();
        assert_eq!(report.records.last().unwrap().name, "FuseOps");
        assert!(report.get("FuseOps").unwrap().ran);
        let text = kiln_ir::text::print_module(&m, &Default::default());
        assert!(text.contains("Primitive=1"), "{text}");
    }

    #[test]
    fn opt_levels_above_three_are_refused() {
        for level in [4u8, 9, 255] {
            let e = optimize(&relu(), &PassContext::from(level)).unwrap_err();
            assert!(e.to_string().contains("out of range 0..=3"), "{e}");
        }
        assert!(PassContext::with_opt_level(4).is_err());
    }
}
