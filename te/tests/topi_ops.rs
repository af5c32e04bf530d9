//! Op computes refuse what they cannot lower: a custom op has no tensor-expression
//! compute, and lowering names it. (The every-op, every-backend suite that checks the
//! computes against the reference lives in `testsuite/tests/ops.rs`.)

mod topi_support;

use kiln_ir::DType::F32;
use topi_support::*;

/// A user op defined outside kiln: identity.
#[derive(Debug)]
struct MyIdentity;

impl kiln_ir::op::CustomOpDef for MyIdentity {
    fn name(&self) -> &str {
        "my.identity"
    }
    fn infer_type(&self, args: &[kiln_ir::Type]) -> kiln_ir::Result<kiln_ir::Type> {
        Ok(args[0].clone())
    }
    fn eval(
        &self,
        args: &[kiln_ir::Value],
        _out: &kiln_ir::Type,
    ) -> kiln_ir::Result<kiln_ir::Value> {
        Ok(args[0].clone())
    }
}

#[test]
fn custom_ops_are_unsupported_with_their_name() {
    let op = kiln_ir::Op::Custom(kiln_ir::op::CustomOp::new(MyIdentity));
    let (m, _) = one_op(op, &[Arg::T(tt(&[2, 3], F32))]).unwrap();
    for target in [
        kiln_te::topi::ScheduleKind::Cpu,
        kiln_te::topi::ScheduleKind::Gpu,
    ] {
        let e = kiln_te::topi::kernels_of(&m, target).unwrap_err();
        assert!(matches!(e, kiln_te::Error::Unsupported(_)), "{e}");
        assert!(e.to_string().contains("custom op `my.identity`"), "{e}");
    }
}
