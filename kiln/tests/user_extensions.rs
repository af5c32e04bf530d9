//! A user pass and a user rule given to `build` through its `PassContext` run once
//! inside the build's optimizer, show in the module's pass report and change the compiled
//! graph, whose outputs still equal the reference interpreter's.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use kiln::{PassContext, Registry};

use kiln::layers::ir::text::parse_module;
use kiln::layers::ir::{Module, NDArray};
use kiln::layers::rewrite::{
    EGraph, FnRule, Id, Pass, PassInfo, PassOutcome, Position, Result, Term, calls_named,
};

/// `abs(abs(x)) = abs(x)`.
fn abs_abs(g: &EGraph, c: Id) -> Vec<Term> {
    calls_named(g, c, "abs")
        .filter(|(_, args)| calls_named(g, args[0], "abs").next().is_some())
        .map(|(_, args)| Term::Class(args[0]))
        .collect()
}

/// Counts its runs; changes nothing.
struct Counter(Arc<AtomicUsize>);

impl Pass for Counter {
    fn info(&self) -> PassInfo {
        PassInfo {
            name: "Counter",
            opt_level: 0,
        }
    }
    fn run(&self, module: &Module, _: &PassContext) -> Result<PassOutcome> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(PassOutcome::new(module.clone()).detail("seen", 1))
    }
}

#[test]
fn build_runs_user_passes_and_rules_once() {
    let m = parse_module(
        "def @main(%x: Tensor[(4), float32]) {\n  %0 = abs(%x);\n  %1 = abs(%0);\n  exp(%1)\n}",
    )
    .unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let mut ctx = PassContext::from(3);
    ctx.insert_pass(Position::before("EqSat"), Counter(runs.clone()));
    ctx.add_rule(FnRule::new("abs_abs", "mine", abs_abs));
    let lib = Registry::builtin()
        .build(&m, "interp", &Default::default(), ctx)
        .unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let report = lib.pass_report();
    assert!(report.get("Counter").unwrap().ran, "{report}");
    let eqsat = report.get("EqSat").unwrap();
    assert!(
        eqsat
            .details
            .iter()
            .any(|(k, v)| k == "applied" && v.contains("abs_abs:1")),
        "{report}"
    );
    // One abs fewer in the fused kernel: the optimized graph changed.
    let nodes = |name: &str| report.get(name).unwrap();
    assert!(
        nodes("EqSat").nodes_after < nodes("EqSat").nodes_before,
        "{report}"
    );
    let x = NDArray::from_vec([4], vec![-2.0f32, -0.5, 0.0, 1.5]).unwrap();
    let mut ex = lib.create_executor().unwrap();
    ex.set_input("x", &x).unwrap();
    ex.run().unwrap();
    let got = ex.outputs().unwrap();
    let inputs = [("x".to_string(), x)].into_iter().collect();
    let want = kiln::layers::ir::interp::evaluate(&m, &inputs)
        .unwrap()
        .flatten();
    got[0].allclose(&want[0], 1e-6, 1e-6).unwrap();
}
