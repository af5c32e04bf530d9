//! The research extension points of `PassContext`: a user pass inserted at a named point
//! and a user rule added to equality saturation run once inside `optimize` (the pipeline
//! `build` runs), show in the pass report like built-ins, and change the output graph;
//! a position naming no pass, a rule named like a built-in, and disabling a user rule by
//! name or family behave as documented.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use kiln_ir::op::{Binary, BinaryKind};
use kiln_ir::text::{parse_module, print_module};
use kiln_ir::{Callee, ExprKind, Module, NDArray};
use kiln_rewrite::{
    EGraph, FnRule, Id, Pass, PassContext, PassInfo, PassOutcome, Position, Result, Term,
    calls_named, optimize, rewrite_module,
};

const ABS_ABS: &str = r#"
def @main(%x: Tensor[(2, 3), float32]) {
  %0 = negative(%x);
  %1 = abs(%0);
  abs(%1)
}
"#;

/// `abs(abs(x)) = abs(x)`: not a built-in rule.
fn abs_abs(g: &EGraph, c: Id) -> Vec<Term> {
    let mut out = vec![];
    for (_, args) in calls_named(g, c, "abs") {
        if calls_named(g, args[0], "abs").next().is_some() {
            out.push(Term::Class(args[0]));
        }
    }
    out
}

fn abs_rule() -> FnRule {
    FnRule::new("abs_abs", "mine", abs_abs)
}

/// Rewrites `negative(x)` to `x * -1` and counts its runs.
struct NegToMul(Arc<AtomicUsize>);

impl Pass for NegToMul {
    fn info(&self) -> PassInfo {
        PassInfo {
            name: "NegToMul",
            opt_level: 1,
        }
    }

    fn run(&self, module: &Module, _ctx: &PassContext) -> Result<PassOutcome> {
        self.0.fetch_add(1, Ordering::SeqCst);
        let out = rewrite_module(module, |m, _, id| {
            let ExprKind::Call {
                callee: Callee::Op(op),
                args,
            } = m.kind(id).clone()
            else {
                return Ok(id);
            };
            if op.name() != "negative" {
                return Ok(id);
            }
            let dtype = m.ty(args[0]).as_tensor().unwrap().dtype;
            let minus_one = m.constant(NDArray::full(Vec::<usize>::new(), dtype, -1.0));
            Ok(m.call(Binary::new(BinaryKind::Multiply), &[args[0], minus_one])?)
        })?;
        Ok(PassOutcome::new(out))
    }
}

fn printed(m: &Module) -> String {
    print_module(m, &Default::default())
}

fn ctx_with(runs: &Arc<AtomicUsize>, rule: bool) -> PassContext {
    let mut ctx = PassContext::from(3);
    ctx.insert_pass(Position::after("FoldScaleAxis"), NegToMul(runs.clone()));
    if rule {
        ctx.add_rule(abs_rule());
    }
    ctx
}

#[test]
fn a_user_pass_and_rule_run_once_inside_the_pipeline() {
    let m = parse_module(ABS_ABS).unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let (out, report) = optimize(&m, &ctx_with(&runs, true)).unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the user pass runs once");
    let names: Vec<&str> = report.records.iter().map(|r| r.name.as_str()).collect();
    let at = names.iter().position(|n| *n == "NegToMul").unwrap();
    assert_eq!(names[at - 1], "FoldScaleAxis", "{names:?}");
    assert_eq!(names.iter().filter(|n| **n == "EqSat").count(), 1);
    assert!(report.get("NegToMul").unwrap().ran);
    let eqsat = report.get("EqSat").unwrap();
    let applied = eqsat.details.iter().find(|(k, _)| k == "applied").unwrap();
    assert!(applied.1.contains("abs_abs:1"), "{report}");
    let text = printed(&out);
    assert_eq!(text.matches("abs(").count(), 1, "{text}");
    assert!(!text.contains("negative"), "{text}");
    assert!(text.contains("multiply"), "{text}");
    // Same values as the input.
    let x = NDArray::random_uniform(vec![2, 3], kiln_ir::DType::F32, 7, -1.0, 1.0);
    let inputs = [("x".to_string(), x)].into_iter().collect();
    let want = kiln_ir::interp::evaluate(&m, &inputs).unwrap().flatten();
    let got = kiln_ir::interp::evaluate(&out, &inputs).unwrap().flatten();
    got[0].allclose(&want[0], 0.0, 0.0).unwrap();
}

#[test]
fn without_the_extensions_the_graph_keeps_both_abs() {
    let m = parse_module(ABS_ABS).unwrap();
    let (out, report) = optimize(&m, &PassContext::from(3)).unwrap();
    assert!(report.get("NegToMul").is_none());
    let text = printed(&out);
    assert_eq!(text.matches("abs(").count(), 2, "{text}");
}

#[test]
fn user_rules_are_disabled_by_name_or_family() {
    let m = parse_module(ABS_ABS).unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    for off in ["abs_abs", "mine"] {
        let mut ctx = ctx_with(&runs, true);
        ctx.disabled_rules.insert(off.to_string());
        let (out, report) = optimize(&m, &ctx).unwrap();
        assert_eq!(printed(&out).matches("abs(").count(), 2, "{off}: {report}");
    }
    // A user pass is disabled by its name like a built-in.
    let mut ctx = ctx_with(&runs, false);
    ctx.disabled.insert("NegToMul".to_string());
    let (out, report) = optimize(&m, &ctx).unwrap();
    assert!(!report.get("NegToMul").unwrap().ran);
    assert!(printed(&out).contains("negative"));
}

#[test]
fn bad_extensions_are_errors() {
    let m = parse_module(ABS_ABS).unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let mut ctx = PassContext::from(3);
    ctx.insert_pass(Position::before("NoSuchPass"), NegToMul(runs.clone()));
    let e = optimize(&m, &ctx).unwrap_err().to_string();
    assert!(
        e.contains("unknown pass `NoSuchPass`") && e.contains("EqSat"),
        "{e}"
    );
    let mut ctx = PassContext::from(3);
    ctx.add_rule(FnRule::new("mul_one", "mine", abs_abs));
    let e = optimize(&m, &ctx).unwrap_err().to_string();
    assert!(e.contains("`mul_one` has the name of another rule"), "{e}");
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

#[test]
fn a_rule_family_goes_in_at_once() {
    let m = parse_module(ABS_ABS).unwrap();
    let family: Vec<Arc<dyn kiln_rewrite::Rule>> = vec![Arc::new(abs_rule())];
    let mut ctx = PassContext::from(3);
    ctx.add_rules(family);
    let (out, _) = optimize(&m, &ctx).unwrap();
    assert_eq!(printed(&out).matches("abs(").count(), 1);
}
