//! Rule soundness: for every built-in rule, a property test builds random instances of
//! its left-hand side (shapes, attributes, constant and input values) — generated from
//! the rule's definition for a declarative rule (a module per left-hand side, leaves
//! chosen by the conditions), written by hand for an imperative one — and
//! `eqsat::check_rule` applies the rule and checks that every resulting choice of
//! program agrees with the original in the reference interpreter within `TOL`
//! (absolute and relative; float32 reassociation and folding change the last bits).
//! Also: the checker catches a deliberately wrong rule, refuses a rule that never fires,
//! and passes a sound user-written rule; an ill-typed rewrite is never applied; and the
//! whole pass, all rules together, keeps the values of random programs.
//! `KILN_CASES` raises the case count.

use kiln_ir::interp::Inputs;
use kiln_ir::op::{
    BatchFlatten, BatchNorm, BiasAdd, Binary, BinaryKind, Conv2d, Dense, ExpandDims, Reshape,
    Transpose, Unary, UnaryKind,
};
use kiln_ir::{DType, ExprId, Module, NDArray, Op, Type};
use kiln_rewrite::eqsat::analysis::EGraph;
use kiln_rewrite::eqsat::check::random_inputs;
use kiln_rewrite::eqsat::rule::{apply_at, calls_named};

use kiln_rewrite::eqsat::pattern::{Cond, Pat, PatternRule};
use kiln_rewrite::eqsat::{CheckError, FnRule, Term, check_rule, convert, rules};
use proptest::prelude::*;

/// Agreement required between the two sides (absolute and relative).
const TOL: f64 = 1e-5;

fn cases() -> u32 {
    std::env::var("KILN_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(12)
}

/// Builds a left-hand-side module: variables become `@main` parameters (random inputs),
/// constants get random values from the seed.
struct Lhs {
    m: Module,
    params: Vec<ExprId>,
    seed: u64,
}

impl Lhs {
    fn new(seed: u64) -> Lhs {
        Lhs {
            m: Module::new(),
            params: vec![],
            seed,
        }
    }

    fn var(&mut self, shape: &[usize]) -> ExprId {
        let name = format!("x{}", self.params.len());
        let v = self.m.var(name, Type::tensor(shape.to_vec(), DType::F32));
        self.params.push(v);
        v
    }

    fn konst(&mut self, shape: &[usize], lo: f64, hi: f64) -> ExprId {
        self.seed = self.seed.wrapping_add(0x9e37_79b9);
        let v = NDArray::random_uniform(shape.to_vec(), DType::F32, self.seed, lo, hi);
        self.m.constant(v)
    }

    fn splat(&mut self, shape: &[usize], v: f64) -> ExprId {
        self.m
            .constant(NDArray::full(shape.to_vec(), DType::F32, v))
    }

    fn call(&mut self, op: impl Into<Op>, args: &[ExprId]) -> ExprId {
        self.m.call(op, args).unwrap()
    }

    fn bin(&mut self, kind: BinaryKind, a: ExprId, b: ExprId) -> ExprId {
        self.call(Binary::new(kind), &[a, b])
    }

    fn finish(mut self, body: ExprId) -> (Module, Inputs) {
        self.m.set_main(&self.params, body).unwrap();
        let inputs = random_inputs(&self.m, self.seed).unwrap();
        (self.m, inputs)
    }
}

fn check(name: &str, case: (Module, Inputs)) -> Result<(), TestCaseError> {
    let rule = rules::by_name(name).unwrap_or_else(|| panic!("no rule `{name}`"));
    check_rule(rule.as_ref(), [case], TOL, TOL).map_err(|e| TestCaseError::fail(e.to_string()))?;
    Ok(())
}

fn shape(max_rank: usize) -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(1usize..5, 1..=max_rank)
}

/// A shape and a suffix of it (broadcasts against it).
fn shape_and_suffix() -> impl Strategy<Value = (Vec<usize>, Vec<usize>)> {
    shape(4).prop_flat_map(|s| {
        let n = s.len();
        (Just(s), 0..=n).prop_map(|(s, k)| {
            let suffix = s[k..].to_vec();
            (s, suffix)
        })
    })
}

fn unary(kind: UnaryKind) -> Unary {
    Unary { kind }
}

/// The imperative rules the hand-written property tests below cover (the declarative
/// ones get cases generated from their definitions): the coverage test compares both
/// with the built-in rules.
const TESTED: &[&str] = &[
    "transpose_transpose",
    "transpose_identity",
    "view_view",
    "view_same_shape",
    "batch_norm_affine",
    "bias_add_to_add",
    "scale_into_conv2d",
    "scale_into_dense",
    "merge_parallel_conv2d",
    "merge_parallel_dense",
];

#[test]
fn every_rule_has_a_soundness_test() {
    let mut names: Vec<String> = rules::all().iter().map(|r| r.name().to_string()).collect();
    names.sort();
    let mut tested: Vec<String> = TESTED.iter().map(|s| s.to_string()).collect();
    tested.extend(pattern_rules().iter().map(|r| r.name.to_string()));
    tested.sort();
    assert_eq!(names, tested);
}

// --- cases generated from the declarative rules ---------------------------------------

/// The built-in rules written as patterns.
fn pattern_rules() -> Vec<PatternRule> {
    rules::all()
        .iter()
        .filter_map(|r| r.pattern().cloned())
        .collect()
}

/// How a case makes the leaf a variable of a left-hand side stands for, from the rule's
/// conditions.
#[derive(Clone, Debug, PartialEq)]
enum Leaf {
    /// An input of the full shape.
    Input,
    /// A random constant: of the full shape when the rule needs the result's type,
    /// otherwise of the suffix shape (it broadcasts).
    Random { full: bool },
    /// A constant of `value` everywhere, of the suffix shape.
    Splat(f64),
}

/// The leaf of each variable and the terms that must exist, under the conditions, with
/// `pick` choosing among the groups of an `AnyOf`.
fn leaves(conds: &[Cond], pick: usize) -> (Vec<(&'static str, Leaf)>, Vec<Pat>) {
    let mut leaves: Vec<(&'static str, Leaf)> = vec![];
    let mut exists = vec![];
    let mut full: Vec<&'static str> = vec![];
    let mut flat: Vec<Cond> = vec![];
    for c in conds {
        match c {
            Cond::AnyOf(groups) => flat.extend(groups[pick % groups.len()].iter().cloned()),
            c => flat.push(c.clone()),
        }
    }
    for c in &flat {
        match c {
            Cond::Splat(v, x) => leaves.push((v, Leaf::Splat(*x))),
            Cond::Const(v) => leaves.push((v, Leaf::Random { full: false })),
            Cond::ResultType(v) => full.push(v),
            Cond::Exists(p) => exists.push(p.clone()),
            Cond::NotConst(_) | Cond::Float(_) => {}
            Cond::AnyOf(_) => unreachable!("flattened above"),
        }
    }
    for (v, leaf) in &mut leaves {
        if let Leaf::Random { full: f } = leaf {
            *f = full.contains(v);
        }
    }
    (leaves, exists)
}

/// A module computing left-hand side `lhs` of `rule` (and the terms its conditions need
/// to exist), with leaves chosen to meet the conditions; `None` when an op refuses the
/// shapes.
fn pattern_case(
    rule: &PatternRule,
    lhs: &Pat,
    pick: usize,
    (s, sfx): (&[usize], &[usize]),
    seed: u64,
) -> Option<(Module, Inputs)> {
    let (leaves, exists) = leaves(&rule.conds, pick);
    let mut b = Lhs::new(seed);
    let mut bound: Vec<(&'static str, ExprId)> = vec![];
    let mut build = |b: &mut Lhs, p: &Pat| build_pat(b, p, &leaves, &mut bound, (s, sfx));
    let mut outs = vec![build(&mut b, lhs)?];
    for p in &exists {
        outs.push(build(&mut b, p)?);
    }
    let body = match outs[..] {
        [one] => one,
        _ => b.m.tuple(&outs).ok()?,
    };
    Some(b.finish(body))
}

fn build_pat(
    b: &mut Lhs,
    p: &Pat,
    leaves: &[(&'static str, Leaf)],
    bound: &mut Vec<(&'static str, ExprId)>,
    (s, sfx): (&[usize], &[usize]),
) -> Option<ExprId> {
    match p {
        Pat::Var(v) => {
            if let Some(&(_, id)) = bound.iter().find(|(n, _)| n == v) {
                return Some(id);
            }
            let leaf = leaves
                .iter()
                .find(|(n, _)| n == v)
                .map_or(Leaf::Input, |(_, l)| l.clone());
            let id = match leaf {
                Leaf::Input => b.var(s),
                Leaf::Random { full } => b.konst(if full { s } else { sfx }, -2.0, 2.0),
                Leaf::Splat(x) => b.splat(sfx, x),
            };
            bound.push((v, id));
            Some(id)
        }
        Pat::Call(op, args) => {
            let ids = args
                .iter()
                .map(|a| build_pat(b, a, leaves, bound, (s, sfx)))
                .collect::<Option<Vec<_>>>()?;
            b.m.call(op.clone(), &ids).ok()
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    /// Every declarative rule, every left-hand side, on a case built from it.
    #[test]
    fn declarative_rules((s, sfx) in shape_and_suffix(), pick in 0usize..2, seed in any::<u64>()) {
        for rule in pattern_rules() {
            for lhs in &rule.lhs {
                let case = pattern_case(&rule, lhs, pick, (&s, &sfx), seed)
                    .unwrap_or_else(|| panic!("`{}`: no case from `{lhs}`", rule.name));
                check_rule(&rule, [case], TOL, TOL)
                    .map_err(|e| TestCaseError::fail(format!("`{lhs}`: {e}")))?;
            }
        }
    }

    #[test]
    fn transposes(
        s in shape(4),
        p in any::<prop::sample::Index>(),
        q in any::<prop::sample::Index>(),
        default_axes in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let perms = permutations(s.len());
        let (p, q) = (p.get(&perms).clone(), q.get(&perms).clone());
        let axes = |v: &[usize]| Some(v.iter().map(|&a| a as i64).collect::<Vec<_>>());
        let mut b = Lhs::new(seed);
        let x = b.var(&s);
        let t1 = b.call(Transpose::new(axes(&p)), &[x]);
        let second = if default_axes { Transpose::new(None) } else { Transpose::new(axes(&q)) };
        let t2 = b.call(second, &[t1]);
        check("transpose_transpose", b.finish(t2))?;
        let mut b = Lhs::new(seed);
        let x = b.var(&s);
        let ident: Vec<usize> = (0..s.len()).collect();
        let t = b.call(Transpose::new(axes(&ident)), &[x]);
        check("transpose_identity", b.finish(t))?;
    }

    #[test]
    fn views(s in shape(4), seed in any::<u64>(), flatten in any::<bool>(), axis in 0usize..4) {
        let n: usize = s.iter().product();
        let mut b = Lhs::new(seed);
        let x = b.var(&s);
        let axis = axis.min(s.len()) as i64;
        let e = b.call(ExpandDims { axis, num_newaxis: 1 }, &[x]);
        let second: Op = if flatten { BatchFlatten.into() } else { Reshape { newshape: vec![n as i64] }.into() };
        let body = b.call(second, &[e]);
        check("view_view", b.finish(body))?;
        let mut b = Lhs::new(seed);
        let x = b.var(&s);
        let same = Reshape { newshape: s.iter().map(|&d| d as i64).collect() };
        let body = b.call(same, &[x]);
        check("view_same_shape", b.finish(body))?;
    }

    #[test]
    fn batch_norm_affine(
        s in prop::collection::vec(1usize..4, 2..=4),
        axis_pick in any::<prop::sample::Index>(),
        center in any::<bool>(),
        scale in any::<bool>(),
        eps in 1e-5f64..1e-1,
        seed in any::<u64>(),
    ) {
        let axis = axis_pick.index(s.len());
        let c = s[axis];
        let mut b = Lhs::new(seed);
        let x = b.var(&s);
        let gamma = b.konst(&[c], 0.5, 2.0);
        let beta = b.konst(&[c], -1.0, 1.0);
        let mean = b.konst(&[c], -1.0, 1.0);
        let var = b.konst(&[c], 0.1, 2.0);
        let bn = BatchNorm { axis: axis as i64, epsilon: kiln_ir::attrs::F64(eps), center, scale };
        let t = b.call(bn, &[x, gamma, beta, mean, var]);
        let body = b.m.tuple_get(t, 0).unwrap();
        check("batch_norm_affine", b.finish(body))?;
    }

    #[test]
    fn bias_add(s in prop::collection::vec(1usize..4, 1..=4), axis_pick in any::<prop::sample::Index>(), negative in any::<bool>(), seed in any::<u64>()) {
        let axis = axis_pick.index(s.len());
        let mut b = Lhs::new(seed);
        let x = b.var(&s);
        let bias = b.konst(&[s[axis]], -1.0, 1.0);
        let axis = if negative { axis as i64 - s.len() as i64 } else { axis as i64 };
        let body = b.call(BiasAdd { axis }, &[x, bias]);
        check("bias_add_to_add", b.finish(body))?;
    }

    #[test]
    fn scale_into_conv2d(
        c in 1usize..4,
        o in 1usize..4,
        groups in 1usize..3,
        hw in 3usize..6,
        k in 1usize..4,
        stride in 1usize..3,
        pad in 0usize..2,
        layout in 0usize..3,
        const_weight in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let (c, o) = (c * groups, o * groups);
        let mut b = Lhs::new(seed);
        let x = b.var(&[1, c, hw, hw]);
        let w = if const_weight {
            b.konst(&[o, c / groups, k, k], -1.0, 1.0)
        } else {
            b.var(&[o, c / groups, k, k])
        };
        let conv = Conv2d { strides: [stride; 2], padding: [pad; 4], groups, ..Conv2d::default() };
        let y = b.call(conv, &[x, w]);
        let s_shape: Vec<usize> = match layout { 0 => vec![o, 1, 1], 1 => vec![1, o, 1, 1], _ => vec![] };
        let s = b.konst(&s_shape, -2.0, 2.0);
        let body = b.bin(BinaryKind::Multiply, y, s);
        check("scale_into_conv2d", b.finish(body))?;
    }

    #[test]
    fn scale_into_dense(n in 1usize..4, k in 1usize..5, u in 1usize..5, layout in 0usize..3, seed in any::<u64>()) {
        let mut b = Lhs::new(seed);
        let x = b.var(&[n, k]);
        let w = b.konst(&[u, k], -1.0, 1.0);
        let y = b.call(Dense { units: None }, &[x, w]);
        let s_shape: Vec<usize> = match layout { 0 => vec![u], 1 => vec![1, u], _ => vec![] };
        let s = b.konst(&s_shape, -2.0, 2.0);
        let body = b.bin(BinaryKind::Multiply, s, y);
        check("scale_into_dense", b.finish(body))?;
    }

    #[test]
    fn merge_parallel_conv2d(
        c in 1usize..4,
        outs in prop::collection::vec(1usize..4, 2..4),
        hw in 3usize..6,
        k in 1usize..4,
        stride in 1usize..3,
        pad in 0usize..2,
        seed in any::<u64>(),
    ) {
        let mut b = Lhs::new(seed);
        let x = b.var(&[1, c, hw, hw]);
        let mut ys = vec![];
        for (i, &o) in outs.iter().enumerate() {
            let w = b.konst(&[o, c, k, k], -1.0, 1.0);
            // The stated channel count differs per layer; the merged layer states none.
            let conv = Conv2d {
                strides: [stride; 2],
                padding: [pad; 4],
                channels: (i % 2 == 0).then_some(o),
                ..Conv2d::default()
            };
            ys.push(b.call(conv, &[x, w]));
        }
        let body = b.m.tuple(&ys).unwrap();
        check("merge_parallel_conv2d", b.finish(body))?;
    }

    #[test]
    fn merge_parallel_dense(n in 1usize..4, k in 1usize..5, outs in prop::collection::vec(1usize..5, 2..4), seed in any::<u64>()) {
        let mut b = Lhs::new(seed);
        let x = b.var(&[n, k]);
        let mut ys = vec![];
        for &u in &outs {
            let w = b.konst(&[u, k], -1.0, 1.0);
            let y = b.call(Dense { units: Some(u) }, &[x, w]);
            ys.push(b.call(unary(UnaryKind::Relu), &[y]));
        }
        let body = b.m.tuple(&ys).unwrap();
        check("merge_parallel_dense", b.finish(body))?;
    }
}

fn permutations(n: usize) -> Vec<Vec<usize>> {
    if n == 0 {
        return vec![vec![]];
    }
    let mut out = vec![];
    for p in permutations(n - 1) {
        for i in 0..=p.len() {
            let mut q = p.clone();
            q.insert(i, n - 1);
            out.push(q);
        }
    }
    out
}

// --- the checker itself --------------------------------------------------------------

/// `a - b = b - a`: false, the checker must say so.
fn wrong_sub_comm(g: &EGraph, c: egg::Id) -> Vec<Term> {
    calls_named(g, c, "subtract")
        .map(|(op, args)| Term::Call(op.clone(), vec![args[1].into(), args[0].into()]))
        .collect()
}

/// `x * 2 = x + x`: true, a user rule the checker passes.
fn double(g: &EGraph, c: egg::Id) -> Vec<Term> {
    calls_named(g, c, "multiply")
        .filter(|(_, args)| kiln_rewrite::eqsat::rule::is_splat(g, args[1], 2.0))
        .map(|(_, args)| {
            Term::call(
                Binary::new(BinaryKind::Add),
                vec![args[0].into(), args[0].into()],
            )
        })
        .collect()
}

fn sub_case(seed: u64) -> (Module, Inputs) {
    let mut b = Lhs::new(seed);
    let x = b.var(&[3, 2]);
    let y = b.var(&[3, 2]);
    let d = b.bin(BinaryKind::Subtract, x, y);
    let body = b.call(unary(UnaryKind::Exp), &[d]);
    b.finish(body)
}

#[test]
fn the_checker_catches_a_wrong_rule() {
    let rule = FnRule {
        name: "wrong_sub_comm",
        family: "user",
        apply: wrong_sub_comm,
    };
    let err = check_rule(&rule, (0..3).map(sub_case), TOL, TOL).unwrap_err();
    assert!(matches!(err, CheckError::Unsound { .. }), "{err}");
    let text = err.to_string();
    assert!(text.contains("wrong_sub_comm"), "{err}");
    // The report names the term the rule produced (not a leaf) and the inputs.
    assert!(text.contains("the term `subtract(%x1, %x0)`"), "{err}");
    assert!(
        text.contains("inputs: %x0: Tensor[(3, 2), float32] = ["),
        "{err}"
    );
}

#[test]
fn the_checker_refuses_a_rule_that_never_fires() {
    let rule = FnRule {
        name: "double",
        family: "user",
        apply: double,
    };
    let err = check_rule(&rule, (0..2).map(sub_case), TOL, TOL).unwrap_err();
    assert!(
        matches!(err, CheckError::NeverFired { cases: 2, .. }),
        "{err}"
    );
}

#[test]
fn the_checker_passes_a_sound_user_rule() {
    let rule = FnRule {
        name: "double",
        family: "user",
        apply: double,
    };
    let case = |seed| {
        let mut b = Lhs::new(seed);
        let x = b.var(&[2, 3]);
        let two = b.splat(&[], 2.0);
        let body = b.bin(BinaryKind::Multiply, x, two);
        b.finish(body)
    };
    let report = check_rule(&rule, (0..3).map(case), TOL, TOL).unwrap();
    assert_eq!(report.cases, 3);
    assert_eq!(report.fired, 3);
    assert!(report.compared >= 3 * 2, "{report:?}");
}

/// Proposes `transpose(x)` for `relu(x)`: ill-typed unless `x` is square.
fn ill_typed(g: &EGraph, c: egg::Id) -> Vec<Term> {
    calls_named(g, c, "nn.relu")
        .map(|(_, args)| Term::call(Transpose::new(None), vec![args[0].into()]))
        .collect()
}

#[test]
fn an_ill_typed_rewrite_is_never_applied() {
    let mut b = Lhs::new(0);
    let x = b.var(&[2, 3]);
    let body = b.call(unary(UnaryKind::Relu), &[x]);
    let (m, _) = b.finish(body);
    let (mut g, root) = convert::to_egraph(&m, m.main_id().unwrap()).unwrap();
    let rule = FnRule {
        name: "ill_typed",
        family: "user",
        apply: ill_typed,
    };
    assert!(apply_at(&mut g, &rule, root).is_empty());
    g.rebuild();
    assert_eq!(g.analysis.rejected, 1);
    assert!(g.analysis.errors.is_empty());
    assert_eq!(g[g.find(root)].nodes.len(), 1);
}

// --- the whole pass on random programs ------------------------------------------------

/// One step of a random program over a pool of `[r, c]` values (plus constants).
#[derive(Clone, Debug)]
enum Step {
    Bin(usize, usize, usize),
    ConstBin(usize, usize, u8),
    Unary(usize, usize),
    TransposeTwice(usize),
    Reshape(usize),
    Parallel(usize),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (0usize..4, any::<usize>(), any::<usize>()).prop_map(|(k, a, b)| Step::Bin(k, a, b)),
        (0usize..4, any::<usize>(), 0u8..4).prop_map(|(k, a, c)| Step::ConstBin(k, a, c)),
        (0usize..3, any::<usize>()).prop_map(|(k, a)| Step::Unary(k, a)),
        any::<usize>().prop_map(Step::TransposeTwice),
        any::<usize>().prop_map(Step::Reshape),
        any::<usize>().prop_map(Step::Parallel),
    ]
}

/// A program of `steps` on `x: [r, c]`; every value stays `[r, c]` (parallel dense
/// layers use `[c, c]` weights), and the result is a tuple of the last three values.
fn program(r: usize, c: usize, steps: &[Step], seed: u64) -> (Module, Inputs) {
    let kinds = [
        BinaryKind::Add,
        BinaryKind::Multiply,
        BinaryKind::Subtract,
        BinaryKind::Maximum,
    ];
    let mut b = Lhs::new(seed);
    let x = b.var(&[r, c]);
    let mut pool = vec![x];
    for s in steps {
        let pick = |i: &usize| pool[i % pool.len()];
        let v = match s {
            Step::Bin(k, i, j) => b.bin(kinds[*k], pick(i), pick(j)),
            Step::ConstBin(k, i, which) => {
                let k2 = match *which {
                    0 => b.splat(&[], 1.0),
                    1 => b.splat(&[], 0.0),
                    2 => b.konst(&[c], -1.0, 1.0),
                    _ => b.konst(&[r, c], -1.0, 1.0),
                };
                b.bin(kinds[*k], pick(i), k2)
            }
            Step::Unary(k, i) => {
                let kind = [UnaryKind::Relu, UnaryKind::Negative, UnaryKind::Tanh][*k];
                b.call(unary(kind), &[pick(i)])
            }
            Step::TransposeTwice(i) => {
                let t = b.call(Transpose::new(None), &[pick(i)]);
                b.call(Transpose::new(None), &[t])
            }
            Step::Reshape(i) => {
                let flat = b.call(Reshape { newshape: vec![-1] }, &[pick(i)]);
                b.call(
                    Reshape {
                        newshape: vec![r as i64, c as i64],
                    },
                    &[flat],
                )
            }
            Step::Parallel(i) => {
                let w1 = b.konst(&[c, c], -1.0, 1.0);
                let w2 = b.konst(&[c, c], -1.0, 1.0);
                let d1 = b.call(Dense { units: None }, &[pick(i), w1]);
                let d2 = b.call(Dense { units: None }, &[pick(i), w2]);
                b.bin(BinaryKind::Add, d1, d2)
            }
        };
        pool.push(v);
    }
    let n = pool.len();
    let outs: Vec<ExprId> = pool[n.saturating_sub(3)..].to_vec();
    let body = b.m.tuple(&outs).unwrap();
    b.finish(body)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    /// All rules together on random programs: the pass never raises the cost and the
    /// result computes what the input does.
    #[test]
    fn eqsat_on_random_programs(
        r in 1usize..4,
        c in 1usize..4,
        steps in prop::collection::vec(step(), 1..12),
        seed in any::<u64>(),
    ) {
        let (m, inputs) = program(r, c, &steps, seed);
        let pass = kiln_rewrite::eqsat::EqSat::new();
        let (out, stats) = pass.optimize_function(&m, m.main_id().unwrap()).unwrap();
        kiln_ir::verify::verify(&out).unwrap();
        prop_assert!(stats.cost_after <= stats.cost_before, "{stats:?}");
        let want = kiln_ir::interp::evaluate(&m, &inputs).unwrap().flatten();
        let got = kiln_ir::interp::evaluate(&out, &inputs).unwrap().flatten();
        if let Some(d) = kiln_rewrite::eqsat::check::differ(&got, &want, TOL, TOL) {
            return Err(TestCaseError::fail(format!(
                "{d}\n{}",
                kiln_ir::text::print_module(&out, &Default::default())
            )));
        }
    }
}
