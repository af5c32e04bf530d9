//! The classical passes as a sequence under the pass manager (gating by opt level,
//! `disabled` reaching both FoldConstant runs) and the error paths: bad params for
//! `bind_params`, a module without `@main` for DeadCodeElimination.

mod common;

use std::collections::BTreeMap;

use kiln_ir::text::parse_module;
use kiln_ir::{DType, NDArray};
use kiln_rewrite::pass::run_passes;
use kiln_rewrite::passes::{DeadCodeElimination, InferType, bind_params, classical_passes};
use kiln_rewrite::{Pass, PassContext};

const CONV_BN: &str = r#"
def @main(%x: Tensor[(1, 2, 3, 3), float32], %w: Tensor[(2, 2, 1, 1), float32],
          %g: Tensor[(2), float32], %b: Tensor[(2), float32], %m: Tensor[(2), float32],
          %v: Tensor[(2), float32]) {
  %0 = nn.conv2d(%x, %w);
  %1 = nn.batch_norm(%0, %g, %b, %m, %v);
  %1.0
}
"#;

fn ran(level: u8, disabled: &[&str]) -> Vec<String> {
    let m = parse_module(CONV_BN).unwrap();
    let passes = classical_passes();
    let refs: Vec<&dyn Pass> = passes.iter().map(|p| p.as_ref()).collect();
    let mut ctx = PassContext::with_opt_level(level).unwrap();
    ctx.disabled = disabled.iter().map(|s| s.to_string()).collect();
    let (out, report) = run_passes(&m, &refs, &ctx).unwrap();
    let inputs = common::fill_inputs(&m, &Default::default(), 1);
    common::check_same_values(&m, &out, &inputs).unwrap();
    report
        .records
        .iter()
        .filter(|r| r.ran)
        .map(|r| r.name.clone())
        .collect()
}

#[test]
fn classical_sequence_follows_relay_levels() {
    assert_eq!(
        ran(0, &[]),
        ["SimplifyInference", "InferType"],
        "level 0: the two level-0 passes"
    );
    assert_eq!(
        ran(2, &[]),
        [
            "SimplifyInference",
            "FoldConstant",
            "FoldConstant",
            "InferType",
            "DeadCodeElimination"
        ]
    );
    assert_eq!(ran(3, &[]).len(), 7);
    assert_eq!(
        ran(3, &["FoldConstant", "SimplifyInference"]),
        [
            "EliminateCommonSubexpr",
            "FoldScaleAxis",
            "InferType",
            "DeadCodeElimination"
        ]
    );
}

#[test]
fn bind_params_errors_name_the_param() {
    let m = parse_module(CONV_BN).unwrap();
    let one = |name: &str, shape: &[usize]| {
        BTreeMap::from([(name.to_string(), NDArray::zeros(shape.to_vec(), DType::F32))])
    };
    let e = bind_params(&m, &one("nope", &[2])).unwrap_err().to_string();
    assert!(
        e.contains("param `nope` is not a parameter of @main (parameters: x, w, g, b, m, v)"),
        "{e}"
    );
    let e = bind_params(&m, &one("g", &[3])).unwrap_err().to_string();
    assert!(
        e.contains(
            "param `g` is Tensor[(3), float32], but @main declares %g: Tensor[(2), float32]"
        ),
        "{e}"
    );
    let mut twice = kiln_ir::Module::new();
    let t = kiln_ir::Type::tensor([2], DType::F32);
    let (a1, a2) = (twice.var("a", t.clone()), twice.var("a", t));
    let body = twice.tuple(&[a1, a2]).unwrap();
    twice.set_main(&[a1, a2], body).unwrap();
    let e = bind_params(&twice, &one("a", &[2]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("two parameters of @main are named %a"), "{e}");
    // Binding nothing keeps the module; binding a weight drops it from the signature.
    assert_eq!(
        bind_params(&m, &BTreeMap::new())
            .unwrap()
            .main_tensor_params()
            .unwrap()
            .len(),
        6
    );
    let bound = bind_params(&m, &one("w", &[2, 2, 1, 1])).unwrap();
    let names: Vec<String> = bound
        .main_tensor_params()
        .unwrap()
        .into_iter()
        .map(|p| p.0)
        .collect();
    assert_eq!(names, ["x", "g", "b", "m", "v"]);
    kiln_ir::verify::verify(&bound).unwrap();
}

#[test]
fn passes_on_a_module_without_main() {
    let m = parse_module("def @f(%a: Tensor[(2), float32]) { nn.relu(%a) }").unwrap();
    let ctx = PassContext::default();
    let e = DeadCodeElimination.run(&m, &ctx).err().unwrap().to_string();
    assert!(e.contains("no @main"), "{e}");
    // InferType needs no entry point: it re-types every global.
    let out = InferType.run(&m, &ctx).unwrap().module;
    assert_eq!(out.globals().len(), 1);
    let e = bind_params(&m, &BTreeMap::new()).unwrap_err().to_string();
    assert!(e.contains("no @main"), "{e}");
}

#[test]
fn infer_type_repairs_a_wrong_stored_type() {
    use kiln_ir::op::{Unary, UnaryKind};
    use kiln_ir::{Callee, ExprKind, Module, Op, Type};
    let mut m = Module::new();
    let x = m.var("x", Type::tensor([2, 3], DType::F32));
    // A node pushed with a wrong type, as a buggy pass might.
    let relu = m.push_unchecked(
        ExprKind::Call {
            callee: Callee::Op(Op::from(Unary {
                kind: UnaryKind::Relu,
            })),
            args: vec![x],
        },
        Type::tensor([3, 2], DType::F32),
    );
    m.set_main(&[x], relu).unwrap();
    assert!(kiln_ir::verify::verify(&m).is_err());
    let out = InferType.run(&m, &PassContext::default()).unwrap();
    assert_eq!(out.details, [("retyped".to_string(), "2".to_string())]);
    kiln_ir::verify::verify(&out.module).unwrap();
    let main = out.module.main().unwrap();
    assert_eq!(out.module.ty(main.body), &Type::tensor([2, 3], DType::F32));
}

/// A custom op (`my.double`, doubling its argument), to check the passes leave such
/// calls alone.
#[derive(Debug)]
struct Double;

impl kiln_ir::op::CustomOpDef for Double {
    fn name(&self) -> &str {
        "my.double"
    }
    fn infer_type(&self, args: &[kiln_ir::Type]) -> kiln_ir::Result<kiln_ir::Type> {
        Ok(args[0].clone())
    }
    fn eval(
        &self,
        args: &[kiln_ir::Value],
        _out: &kiln_ir::Type,
    ) -> kiln_ir::Result<kiln_ir::Value> {
        let t = args[0].as_tensor("x")?;
        let v: Vec<f64> = t.to_f64_vec().iter().map(|x| 2.0 * x).collect();
        Ok(kiln_ir::Value::Tensor(NDArray::from_f64(
            t.shape().to_vec(),
            t.dtype(),
            v,
        )?))
    }
}

#[test]
fn custom_op_calls_are_neither_folded_nor_merged() {
    use kiln_rewrite::passes::{EliminateCommonSubexpr, FoldConstant};
    let mut m = kiln_ir::Module::new();
    let c = m.constant(NDArray::full(vec![2], DType::F32, 1.5));
    let op = kiln_ir::Op::Custom(kiln_ir::op::CustomOp::new(Double));
    let a = m.call(op.clone(), &[c]).unwrap();
    let b = m.call(op, &[c]).unwrap();
    let t = m.tuple(&[a, b]).unwrap();
    m.set_main(&[], t).unwrap();
    let ctx = PassContext::default();
    let folded = FoldConstant::default().run(&m, &ctx).unwrap();
    assert_eq!(folded.details[0], ("folded".to_string(), "0".to_string()));
    let merged = EliminateCommonSubexpr.run(&m, &ctx).unwrap();
    assert_eq!(merged.details[0], ("merged".to_string(), "0".to_string()));
}
