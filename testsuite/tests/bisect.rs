//! The numerics bisection names the guilty pass: a pass list of correct passes (swap the
//! arguments of `add` and of `multiply`, commutative) around a deliberately broken one
//! (swap the arguments of `subtract`), run on a small module; `bisect` must name the
//! broken pass — evaluated by the reference interpreter and, built at opt level 0, on
//! every registered backend — and name none when the broken pass is disabled or gated
//! off by the opt level. On the real pipeline (`standard_passes`): nothing to name when
//! nothing is broken; a broken pass inserted into it is named, also where it shares its
//! name with a correct pass (`FoldConstant` runs three times); and an `EqSat` holding a
//! deliberately wrong user rule (`x - y = x`) is named with the rule's family and the
//! rule, the way the random-graph suite's failure message names them.

use std::collections::BTreeMap;

use kiln_ir::op::{Binary, BinaryKind, Unary, UnaryKind};
use kiln_ir::visit::{ExprMutator, mutate};
use kiln_ir::{DType, ExprId, ExprKind, Module, NDArray, Type};
use kiln_rewrite::eqsat::rule::calls_named;
use kiln_rewrite::eqsat::{EqSat, FnRule, Term, check_rule, rules};
use kiln_rewrite::pipeline::standard_passes;
use kiln_rewrite::{Pass, PassContext, PassInfo, PassOutcome};
use kiln_testsuite::bisect::{Bisection, bisect, bisect_on_backend, diagnose_with};
use kiln_testsuite::graphs::reference;
use kiln_testsuite::ops::ARITH;

/// Swaps the two arguments of every call of `kind`.
struct SwapArgs {
    name: &'static str,
    kind: BinaryKind,
    opt_level: u8,
}

impl ExprMutator for SwapArgs {
    fn rewrite(&mut self, m: &mut Module, id: ExprId) -> kiln_ir::Result<ExprId> {
        if let ExprKind::Call { args, .. } = m.kind(id).clone()
            && let Some(kiln_ir::Op::Binary(b)) = m.kind(id).op()
            && b.kind == self.kind
        {
            return m.call(Binary::new(self.kind), &[args[1], args[0]]);
        }
        Ok(id)
    }
}

impl Pass for SwapArgs {
    fn info(&self) -> PassInfo {
        PassInfo {
            name: self.name,
            opt_level: self.opt_level,
        }
    }

    fn run(&self, module: &Module, _ctx: &PassContext) -> kiln_rewrite::Result<PassOutcome> {
        let mut m = module.clone();
        let main = m.main().map_err(kiln_rewrite::Error::from)?.clone();
        let mut me = SwapArgs { ..*self };
        let body = mutate(&mut m, main.body, &mut me).map_err(kiln_rewrite::Error::from)?;
        m.set_main(&main.params, body)
            .map_err(kiln_rewrite::Error::from)?;
        Ok(PassOutcome::new(m))
    }
}

/// `relu((x - y) * x + y)`.
fn model() -> (Module, BTreeMap<String, NDArray>) {
    let mut m = Module::new();
    let x = m.var("x", Type::tensor([2, 3], DType::F32));
    let y = m.var("y", Type::tensor([3], DType::F32));
    let d = m.call(Binary::new(BinaryKind::Subtract), &[x, y]).unwrap();
    let p = m.call(Binary::new(BinaryKind::Multiply), &[d, x]).unwrap();
    let s = m.call(Binary::new(BinaryKind::Add), &[p, y]).unwrap();
    let r = m.call(Unary::new(UnaryKind::Relu), &[s]).unwrap();
    m.set_main(&[x, y], r).unwrap();
    let inputs = BTreeMap::from([
        ("x".into(), NDArray::random(vec![2, 3], DType::F32, 1)),
        ("y".into(), NDArray::random(vec![3], DType::F32, 2)),
    ]);
    (m, inputs)
}

fn passes() -> [SwapArgs; 3] {
    [
        SwapArgs {
            name: "commute_add",
            kind: BinaryKind::Add,
            opt_level: 1,
        },
        SwapArgs {
            name: "broken_commute_subtract",
            kind: BinaryKind::Subtract,
            opt_level: 2,
        },
        SwapArgs {
            name: "commute_multiply",
            kind: BinaryKind::Multiply,
            opt_level: 1,
        },
    ]
}

#[test]
fn names_the_broken_pass() {
    let (m, inputs) = model();
    let want = reference(&m, &inputs).unwrap();
    let ps = passes();
    let list: Vec<&dyn Pass> = ps.iter().map(|p| p as &dyn Pass).collect();
    let eval = |m: &Module| reference(m, &inputs);
    let ctx = PassContext::with_opt_level(3).unwrap();
    let found = bisect(&m, &list, &ctx, &eval, &want, ARITH).unwrap();
    assert_eq!(
        found.guilty.as_deref(),
        Some("broken_commute_subtract"),
        "{found:?}"
    );
    assert!(found.mismatch.is_some());
    assert_eq!(
        found.trail,
        vec![
            ("commute_add".to_string(), true),
            ("broken_commute_subtract".to_string(), false)
        ]
    );
}

#[test]
fn names_none_when_the_broken_pass_is_off() {
    let (m, inputs) = model();
    let want = reference(&m, &inputs).unwrap();
    let ps = passes();
    let list: Vec<&dyn Pass> = ps.iter().map(|p| p as &dyn Pass).collect();
    let eval = |m: &Module| reference(m, &inputs);
    // Disabled by name, and gated off by the opt level (it registers at level 2).
    let mut ctx = PassContext::with_opt_level(3).unwrap();
    ctx.disabled.insert("broken_commute_subtract".into());
    let off = bisect(&m, &list, &ctx, &eval, &want, ARITH).unwrap();
    assert_eq!(off.guilty, None, "{off:?}");
    let ctx = PassContext::with_opt_level(1).unwrap();
    let gated = bisect(&m, &list, &ctx, &eval, &want, ARITH).unwrap();
    assert_eq!(gated.guilty, None, "{gated:?}");
}

/// The same on every registered backend, starting from a saved case's text: each prefix
/// is built and run on the backend.
#[test]
fn names_the_broken_pass_on_every_backend() {
    let built = kiln_testsuite::cases::replay(
        "// kiln-case seed=3 fill=uniform,large\n\
         def @main(%x0: Tensor[(2, 3), float32], %x1: Tensor[(3), float32]) {\n\
           %0 = subtract(%x0, %x1);\n\
           add(multiply(%0, %x0), %x1)\n\
         }",
    )
    .unwrap();
    let ps = passes();
    let list: Vec<&dyn Pass> = ps.iter().map(|p| p as &dyn Pass).collect();
    let ctx = PassContext::with_opt_level(2).unwrap();
    for backend in &kiln_testsuite::suite::exec_backends() {
        let found = bisect_on_backend(&built, &list, &ctx, backend).unwrap();
        assert_eq!(
            found.guilty.as_deref(),
            Some("broken_commute_subtract"),
            "{}: {found:?}",
            backend.name
        );
    }
}

#[test]
fn a_failing_pass_is_an_error() {
    let (m, inputs) = model();
    let ps = passes();
    let list: Vec<&dyn Pass> = ps.iter().map(|p| p as &dyn Pass).collect();
    let mut ctx = PassContext::default();
    ctx.disabled.insert("no_such_pass".into());
    let err = bisect(&m, &list, &ctx, &|m| reference(m, &inputs), &[], ARITH).unwrap_err();
    assert!(err.contains("no_such_pass"), "{err}");
}

// --- the real pipeline ------------------------------------------------------------------

/// The saved case the backend tests bisect: `add(multiply(x0 - x1, x0), x1)`.
fn case() -> kiln_testsuite::graphs::Built {
    kiln_testsuite::cases::replay(
        "// kiln-case seed=3 fill=uniform,large\n\
         def @main(%x0: Tensor[(2, 3), float32], %x1: Tensor[(3), float32]) {\n\
           %0 = subtract(%x0, %x1);\n\
           add(multiply(%0, %x0), %x1)\n\
         }",
    )
    .unwrap()
}

/// The standard pipeline with `pass` inserted at `at`.
fn pipeline_with(pass: Box<dyn Pass>, at: usize) -> Vec<Box<dyn Pass>> {
    let mut ps = standard_passes();
    ps.insert(at, pass);
    ps
}

fn refs(ps: &[Box<dyn Pass>]) -> Vec<&dyn Pass> {
    ps.iter().map(|p| p.as_ref()).collect()
}

fn bisect_reference(ps: &[Box<dyn Pass>], opt_level: u8) -> Bisection {
    let (m, inputs) = model();
    let want = reference(&m, &inputs).unwrap();
    let ctx = PassContext::with_opt_level(opt_level).unwrap();
    let eval = |m: &Module| reference(m, &inputs);
    bisect(&m, &refs(ps), &ctx, &eval, &want, ARITH).unwrap()
}

#[test]
fn the_real_pipeline_has_nothing_to_name() {
    for level in 0..=3 {
        let found = bisect_reference(&standard_passes(), level);
        assert_eq!(found, Bisection::default(), "opt level {level}");
    }
}

#[test]
fn a_broken_pass_in_the_real_pipeline_is_named() {
    let broken = SwapArgs {
        name: "broken_commute_subtract",
        kind: BinaryKind::Subtract,
        opt_level: 2,
    };
    let ps = pipeline_with(Box::new(broken), 3);
    let found = bisect_reference(&ps, 3);
    assert_eq!(
        found.guilty.as_deref(),
        Some("broken_commute_subtract"),
        "{found:?}"
    );
    assert_eq!(found.position, Some(3));
    assert!(found.rule_trail.is_empty());
    let names: Vec<&str> = found.trail.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "SimplifyInference",
            "EliminateCommonSubexpr",
            "FoldConstant",
            "broken_commute_subtract"
        ]
    );
    // Gated off by the opt level: the real pipeline is clean again.
    assert_eq!(bisect_reference(&ps, 1).guilty, None);
    for backend in &kiln_testsuite::suite::exec_backends() {
        let ctx = PassContext::with_opt_level(2).unwrap();
        let found = bisect_on_backend(&case(), &refs(&ps), &ctx, backend).unwrap();
        assert_eq!(found.position, Some(3), "{}: {found:?}", backend.name);
    }
}

/// A broken pass under the name of a correct one, after that one's second run: the
/// bisection switches passes on by position, so it names the fourth `FoldConstant`
/// of the list, not the first.
#[test]
fn a_broken_pass_sharing_a_name_is_named_by_position() {
    let broken = SwapArgs {
        name: "FoldConstant",
        kind: BinaryKind::Subtract,
        opt_level: 2,
    };
    let ps = pipeline_with(Box::new(broken), 5);
    let found = bisect_reference(&ps, 3);
    assert_eq!(found.guilty.as_deref(), Some("FoldConstant"), "{found:?}");
    assert_eq!(found.position, Some(5), "{found:?}");
    assert!(
        found.to_string().contains("pass `FoldConstant` (#5"),
        "{found}"
    );
}

/// A deliberately wrong law: `x - y = x` (`sub_zero` without its `y = 0` condition).
fn broken_sub_zero() -> FnRule {
    FnRule {
        name: "broken_sub_zero",
        family: "algebraic",
        apply: |g, c| {
            calls_named(g, c, "subtract")
                .map(|(_, args)| Term::Class(args[0]))
                .collect()
        },
    }
}

/// The standard pipeline whose `EqSat` holds the built-in rules with the wrong one
/// among the algebraic rules, after `sub_zero`.
fn pipeline_with_broken_rule() -> Vec<Box<dyn Pass>> {
    let mut eqsat = EqSat::new();
    let at = eqsat
        .rules
        .iter()
        .position(|r| r.name() == "sub_zero")
        .unwrap();
    eqsat
        .rules
        .insert(at + 1, std::sync::Arc::new(broken_sub_zero()));
    let mut ps = standard_passes();
    let k = ps.iter().position(|p| p.info().name == "EqSat").unwrap();
    ps[k] = Box::new(eqsat);
    ps
}

#[test]
fn the_rule_checker_agrees_the_rule_is_wrong() {
    let (m, inputs) = model();
    let err = check_rule(&broken_sub_zero(), [(m, inputs)], 1e-5, 1e-5).unwrap_err();
    assert!(err.to_string().contains("unsound"), "{err}");
}

#[test]
fn a_broken_rule_is_named_with_its_family() {
    let ps = pipeline_with_broken_rule();
    let found = bisect_reference(&ps, 3);
    assert_eq!(found.guilty.as_deref(), Some("EqSat"), "{found:?}");
    assert_eq!(found.family.as_deref(), Some("algebraic"), "{found:?}");
    assert_eq!(found.rule.as_deref(), Some("broken_sub_zero"), "{found:?}");
    // Every rule off is fine; the algebraic family, first, is not; its rules up to the
    // broken one are switched on one at a time.
    let algebraic: Vec<String> = rules::algebraic::rules()
        .iter()
        .map(|r| r.name().to_string())
        .take_while(|n| n != "div_one")
        .collect();
    let mut want = vec![
        ("(no rules)".to_string(), true),
        ("algebraic".into(), false),
    ];
    want.extend(algebraic.into_iter().map(|n| (n, true)));
    want.push(("broken_sub_zero".into(), false));
    assert_eq!(found.rule_trail, want);
    let text = found.to_string();
    assert!(
        text.contains("pass `EqSat`") && text.contains("rule `broken_sub_zero`"),
        "{text}"
    );
    // The rule switched off by the caller: nothing to name.
    let (m, inputs) = model();
    let want = reference(&m, &inputs).unwrap();
    let mut ctx = PassContext::with_opt_level(3).unwrap();
    ctx.disabled_rules.insert("broken_sub_zero".into());
    let eval = |m: &Module| reference(m, &inputs);
    let off = bisect(&m, &refs(&ps), &ctx, &eval, &want, ARITH).unwrap();
    assert_eq!(off.guilty, None, "{off:?}");
}

/// On every backend, and through the suite's diagnosis (what a failing random-graph case
/// at opt level 3 prints): the case passes at opt level 0, and the bisection names the
/// pass, the family and the rule.
#[test]
fn a_broken_rule_is_named_on_every_backend() {
    let ps = pipeline_with_broken_rule();
    for backend in &kiln_testsuite::suite::exec_backends() {
        let line = diagnose_with(&case(), backend, 3, &refs(&ps)).unwrap();
        assert!(
            line.contains("pass `EqSat`")
                && line.contains("rule family `algebraic`")
                && line.contains("rule `broken_sub_zero`"),
            "{}: {line}",
            backend.name
        );
        // Below opt level 3 EqSat does not run: nothing moves the output.
        let line = diagnose_with(&case(), backend, 2, &refs(&ps)).unwrap();
        assert!(line.contains("agrees"), "{}: {line}", backend.name);
        assert_eq!(diagnose_with(&case(), backend, 0, &refs(&ps)), None);
    }
}
