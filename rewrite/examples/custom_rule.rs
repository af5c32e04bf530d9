//! A user rewrite rule in the standard pipeline: `abs(abs(x)) = abs(x)`, written as a
//! pattern, checked against the reference interpreter with `check_rule`, then added to
//! the build's `PassContext`. Exits non-zero if the rule is unsound, does not fire, or does not
//! change the optimized graph.

use kiln_ir::op::UnaryKind;
use kiln_ir::text::{parse_module, print_module};
use kiln_rewrite::eqsat::pattern::{Pat, PatternRule};
use kiln_rewrite::{PassContext, check_rule, optimize, random_inputs};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let abs = |p| Pat::un(UnaryKind::Abs, p);
    let rule = PatternRule::new(
        "abs_abs",
        "mine",
        vec![abs(abs(Pat::var("x")))],
        abs(Pat::var("x")),
        vec![],
    );
    let m = parse_module("def @main(%x: Tensor[(8), float32]) { exp(abs(abs(%x))) }")?;
    let case = (m.clone(), random_inputs(&m, 1)?);
    let report = check_rule(&rule, [case], 1e-6, 1e-6)?;
    println!(
        "sound on {} case(s), {} programs compared",
        report.cases, report.compared
    );

    let mut ctx = PassContext::from(3);
    ctx.add_rule(rule);
    let (out, passes) = optimize(&m, &ctx)?;
    print!("{passes}");
    let text = print_module(&out, &Default::default());
    assert_eq!(
        text.matches("abs(").count(),
        1,
        "the rule removed one abs:\n{text}"
    );
    Ok(())
}
