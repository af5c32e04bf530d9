//! The numerics bisection names the guilty pass: a pass list of correct passes (swap the
//! arguments of `add` and of `multiply`, commutative) around a deliberately broken one
//! (swap the arguments of `subtract`), run on a small module; `bisect` must name the
//! broken pass — evaluated by the reference interpreter and, built at opt level 0, on
//! every registered backend — and name none when the broken pass is disabled or gated
//! off by the opt level.

use std::collections::BTreeMap;

use kiln_ir::op::{Binary, BinaryKind, Unary, UnaryKind};
use kiln_ir::visit::{ExprMutator, mutate};
use kiln_ir::{DType, ExprId, ExprKind, Module, NDArray, Type};
use kiln_rewrite::{Pass, PassContext, PassInfo, PassOutcome};
use kiln_testsuite::bisect::{bisect, bisect_on_backend};
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
    for backend in kiln_testsuite::suite::EXEC_BACKENDS {
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
