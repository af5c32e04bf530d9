//! A user pass in the standard pipeline: it rewrites `x * 2` to `x + x` with the same
//! bottom-up traversal the built-in passes use (`rewrite_module`), runs once right after
//! `FoldScaleAxis` inside `optimize` (what `build` runs), and shows in the pass report.
//! Exits non-zero if it did not run once or did not change the graph.

use kiln_ir::op::{Binary, BinaryKind};
use kiln_ir::text::{parse_module, print_module};
use kiln_ir::{ExprId, ExprKind, Module};
use kiln_rewrite::{FnPass, PassContext, PassOutcome, Position, Result};
use kiln_rewrite::{optimize, rewrite_module};

fn double_to_add(module: &Module, _: &PassContext) -> Result<PassOutcome> {
    let mut n = 0;
    let out = rewrite_module(module, |m, _, id| {
        let args = m.kind(id).children();
        let is_mul = m.kind(id).op().is_some_and(|op| op.name() == "multiply");
        let two = |a: ExprId| matches!(m.kind(a), ExprKind::Constant(c) if c.to_f64_vec() == [2.0]);
        if !is_mul || !two(args[1]) {
            return Ok(id);
        }
        n += 1;
        Ok(m.call(Binary::new(BinaryKind::Add), &[args[0], args[0]])?)
    })?;
    Ok(PassOutcome::new(out).detail("rewritten", n))
}

fn main() -> std::result::Result<(), Box<dyn std::error::Error>> {
    let m = parse_module("def @main(%x: Tensor[(4), float32]) { multiply(%x, 2f) }")?;
    let mut ctx = PassContext::from(2);
    let pass = FnPass::new("DoubleToAdd", 1, double_to_add);
    ctx.insert_pass(Position::after("FoldScaleAxis"), pass);
    let (out, report) = optimize(&m, &ctx)?;
    print!("{report}");
    let runs = report
        .records
        .iter()
        .filter(|r| r.name == "DoubleToAdd" && r.ran);
    assert_eq!(runs.count(), 1, "the pass runs once");
    assert_eq!(report.get("DoubleToAdd").unwrap().details[0].1, "1");
    let text = print_module(&out, &Default::default());
    assert!(!text.contains("multiply"), "{text}");
    Ok(())
}
