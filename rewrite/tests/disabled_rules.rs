//! `PassContext::disabled_rules`: equality saturation drops the rules the context names,
//! by rule name or by family name, through `run_passes` and the standard pipeline; a
//! user rule's own family can be switched off too; a name that matches no rule or
//! family of the sequence is an error listing what there is. Values are checked against
//! the unoptimized module.

mod common;

use std::sync::Arc;

use egg::Id;
use kiln_ir::text::{PrintOptions, parse_module, print_module};
use kiln_ir::{Module, op::Unary, op::UnaryKind};
use kiln_rewrite::eqsat::analysis::EGraph;
use kiln_rewrite::eqsat::rule::calls_named;
use kiln_rewrite::eqsat::{EqSat, FnRule, Term, rules};
use kiln_rewrite::pass::run_passes;
use kiln_rewrite::passes::InferType;
use kiln_rewrite::{Pass, PassContext, PassReport, optimize};

/// Two laws of two families at work: `relu(relu x)` (algebraic `relu_relu`) and a
/// transpose pair that cancels (layout `transpose_transpose`).
const MODEL: &str = r#"
def @main(%x: Tensor[(2, 3), float32]) {
  %0 = nn.relu(nn.relu(%x));
  %1 = transpose(transpose(%x, axes=[1, 0]), axes=[1, 0]);
  add(%0, %1)
}
"#;

/// The module after `pass` alone at opt level 3 with `disabled_rules`; its printed
/// form and the pass report. Checks the values.
fn run(pass: &dyn Pass, disabled_rules: &[&str]) -> (String, PassReport) {
    let m = parse_module(MODEL).unwrap();
    let mut ctx = PassContext::with_opt_level(3).unwrap();
    ctx.disabled_rules = disabled_rules.iter().map(|s| s.to_string()).collect();
    let (out, report) = run_passes(&m, &[pass], &ctx).unwrap();
    check_values(&m, &out);
    (print_module(&out, &PrintOptions::default()), report)
}

fn check_values(before: &Module, after: &Module) {
    let inputs = common::fill_inputs(before, &Default::default(), 7);
    common::check_same_values(before, after, &inputs).unwrap();
}

fn detail(report: &PassReport, key: &str) -> Option<String> {
    let rec = report.get("EqSat").unwrap();
    rec.details
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.clone())
}

#[test]
fn every_rule_on_by_default() {
    let (text, report) = run(&EqSat::new(), &[]);
    assert_eq!(text.matches("nn.relu").count(), 1, "{text}");
    assert_eq!(text.matches("transpose").count(), 0, "{text}");
    let applied = detail(&report, "applied").unwrap();
    assert!(applied.contains("relu_relu:"), "{applied}");
    assert!(applied.contains("transpose_transpose:"), "{applied}");
    assert_eq!(detail(&report, "rules_disabled"), None);
}

#[test]
fn a_rule_switched_off_by_name() {
    let (text, report) = run(&EqSat::new(), &["relu_relu"]);
    assert_eq!(text.matches("nn.relu").count(), 2, "{text}");
    assert_eq!(text.matches("transpose").count(), 0, "{text}");
    assert!(!detail(&report, "applied").unwrap().contains("relu_relu"));
    assert_eq!(detail(&report, "rules_disabled").as_deref(), Some("1"));
}

#[test]
fn a_family_switched_off_by_name() {
    let (text, report) = run(&EqSat::new(), &["layout"]);
    assert_eq!(text.matches("nn.relu").count(), 1, "{text}");
    assert_eq!(text.matches("transpose").count(), 2, "{text}");
    let layout = rules::all()
        .iter()
        .filter(|r| r.family() == "layout")
        .count();
    assert_eq!(detail(&report, "rules_disabled"), Some(layout.to_string()));
    // Both families off: nothing left to rewrite with.
    let (text, _) = run(&EqSat::new(), &["layout", "algebraic"]);
    assert_eq!(text.matches("nn.relu").count(), 2, "{text}");
    assert_eq!(text.matches("transpose").count(), 2, "{text}");
}

/// `relu(x) = max(x, 0)` written as a user rule of its own family (sound, and never
/// cheaper: it only proves the switch reaches user rules).
fn relu_to_relu_twice(g: &EGraph, c: Id) -> Vec<Term> {
    calls_named(g, c, "nn.relu")
        .map(|(_, args)| {
            Term::call(
                Unary::new(UnaryKind::Relu),
                vec![Term::call(
                    Unary::new(UnaryKind::Relu),
                    vec![args[0].into()],
                )],
            )
        })
        .collect()
}

#[test]
fn user_rules_and_their_family() {
    let mut pass = EqSat::new();
    pass.rules.push(Arc::new(FnRule {
        name: "relu_idempotent_user",
        family: "user",
        apply: relu_to_relu_twice,
    }));
    let names = pass.rules();
    assert_eq!(names.len(), rules::all().len() + 1);
    assert_eq!(names.last().unwrap().family, "user");
    let (_, report) = run(&pass, &[]);
    assert!(
        detail(&report, "applied")
            .unwrap()
            .contains("relu_idempotent_user")
    );
    let (_, report) = run(&pass, &["user"]);
    assert!(
        !detail(&report, "applied")
            .unwrap()
            .contains("relu_idempotent_user")
    );
    assert_eq!(detail(&report, "rules_disabled").as_deref(), Some("1"));
}

#[test]
fn the_standard_pipeline_honors_it() {
    let m = parse_module(MODEL).unwrap();
    let mut ctx = PassContext::with_opt_level(3).unwrap();
    ctx.disabled_rules.insert("algebraic".into());
    let (out, report) = optimize(&m, &ctx).unwrap();
    check_values(&m, &out);
    let text = print_module(&out, &PrintOptions::default());
    assert_eq!(text.matches("nn.relu").count(), 2, "{text}");
    assert!(detail(&report, "rules_disabled").is_some());
}

#[test]
fn unknown_names_are_errors() {
    let m = parse_module(MODEL).unwrap();
    let mut ctx = PassContext::with_opt_level(3).unwrap();
    ctx.disabled_rules.insert("no_such_rule".into());
    let err = optimize(&m, &ctx).unwrap_err().to_string();
    assert!(
        err.contains("unknown rule or rule family `no_such_rule`"),
        "{err}"
    );
    assert!(
        err.contains("families: algebraic, layout, fold, merge"),
        "{err}"
    );
    assert!(err.contains("mul_one"), "{err}");
    // Checked even when EqSat is gated off by the opt level.
    ctx.opt_level = 1;
    assert!(optimize(&m, &ctx).is_err());
    // A sequence without a pass that has rules knows no rule at all.
    let mut ctx = PassContext::default();
    ctx.disabled_rules.insert("algebraic".into());
    let err = run_passes(&m, &[&InferType], &ctx).unwrap_err().to_string();
    assert!(err.contains("no pass in the sequence has rules"), "{err}");
}
