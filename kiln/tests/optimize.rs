//! Issue 6's acceptance for `build` with the optimizer: one kernel per fused group, fused
//! models equal to the unoptimized reference (a small ResNet on `interp`, ResNet-18 and
//! ResNet-50 on `ref`), params bound before the passes and lifted back after (weights keep
//! their names, constants become `p0`, ...), and the pass context's errors.

use std::collections::BTreeMap;

use kiln::{Built, PassContext, Registry};
use kiln_executor::{CompiledModule, Target};
use kiln_ir::op::{Binary, BinaryKind, Unary, UnaryKind};
use kiln_ir::{DType, Module, NDArray, Type};

type Params = BTreeMap<String, NDArray>;

fn target(name: &str) -> Target {
    name.parse().unwrap()
}

/// The built-in registry's build for a parsed target (the module and its pass report).
fn build(
    m: &Module,
    target: &Target,
    params: &Params,
    opts: impl Into<PassContext>,
) -> kiln::Result<Built> {
    Registry::builtin().build(m, &target.to_string(), params, opts)
}

fn run(lib: &CompiledModule, inputs: &Params) -> Vec<NDArray> {
    let mut ex = lib.create_executor().unwrap();
    for (k, v) in inputs {
        ex.set_input(k.as_str(), v).unwrap();
    }
    ex.run().unwrap();
    ex.outputs().unwrap()
}

fn reference(m: &Module, params: &Params, inputs: &Params) -> Vec<NDArray> {
    let mut all = params.clone();
    all.extend(inputs.clone());
    kiln_ir::interp::evaluate(m, &all).unwrap().flatten()
}

fn assert_close(got: &[NDArray], want: &[NDArray]) {
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(want) {
        g.allclose(w, 1e-4, 1e-4).unwrap();
    }
}

/// Kernel calls of the graph (nodes that are not placeholders).
fn kernel_nodes(lib: &CompiledModule) -> usize {
    lib.graph()
        .nodes
        .iter()
        .filter(|n| n.op == kiln_executor::graph_json::NodeOp::TvmOp)
        .count()
}

/// A number FuseOps reports (`groups`: primitive functions made, `ops`: op calls in them).
fn fuse_detail(lib: &Built, key: &str) -> usize {
    let r = lib.pass_report().get("FuseOps").unwrap();
    r.details
        .iter()
        .find(|(k, _)| k == key)
        .unwrap()
        .1
        .parse()
        .unwrap()
}

fn fuse_groups(lib: &Built) -> usize {
    fuse_detail(lib, "groups")
}

fn data(shape: [usize; 4], seed: u64) -> Params {
    Params::from([(
        "data".to_string(),
        NDArray::random_uniform(shape.to_vec(), DType::F32, seed, -1.0, 1.0),
    )])
}

#[test]
fn small_resnet_on_interp_fused_equals_unfused() {
    let (m, params) = kiln_ir::zoo::resnet(8, 1, [3, 16, 16], DType::F32, 1).unwrap();
    let inputs = data([1, 3, 16, 16], 5);
    let want = reference(&m, &params, &inputs);
    let lib0 = build(&m, &target("interp"), &params, 0).unwrap();
    let lib3 = build(&m, &target("interp"), &params, 3).unwrap();
    assert_eq!(lib3.kernels().len(), fuse_groups(&lib3));
    assert_eq!(kernel_nodes(&lib3), fuse_groups(&lib3));
    assert!(lib3.kernels().len() < lib0.kernels().len());
    // Level 0 still simplifies inference (batch norms become multiply and add) but
    // fuses nothing: one kernel per op call of the simplified graph.
    assert_eq!(
        lib0.kernels().len(),
        fuse_detail(&lib0, "ops"),
        "opt level 0: one kernel per op call"
    );
    assert_close(&run(&lib0, &inputs), &want);
    assert_close(&run(&lib3, &inputs), &want);
}

#[test]
fn zoo_resnets_at_opt_3_on_ref_equal_the_reference() {
    for name in ["resnet18", "resnet50"] {
        let (m, params) = kiln_ir::zoo::by_name(name).unwrap();
        let inputs = data([1, 3, 224, 224], 3);
        let lib = build(&m, &target("ref"), &params, 3).unwrap();
        let groups = fuse_groups(&lib);
        eprintln!(
            "{name} at opt 3: {groups} fused groups\n{}",
            lib.pass_report()
        );
        assert_eq!(kernel_nodes(&lib), groups, "{name}: one kernel per group");
        let optimized = kiln::optimize(&m, &params, 3).unwrap();
        let text = kiln_ir::text::print_module(&optimized.module, &Default::default());
        assert!(
            !text.contains("nn.batch_norm"),
            "{name}: a batch norm is left"
        );
        // Weights the passes left alone keep their names; folded ones are `pN`.
        for k in lib.params().keys() {
            assert!(
                params.contains_key(k) || k.starts_with('p'),
                "{name}: graph param `{k}`"
            );
        }
        assert_close(&run(&lib, &inputs), &reference(&m, &params, &inputs));
    }
}

/// `relu(x * c + w)` with a tensor constant `c` and a param `w` used twice.
fn with_constant() -> (Module, Params) {
    let mut m = Module::new();
    let x = m.var("x", Type::tensor([2, 3], DType::F32));
    let w = m.var("w", Type::tensor([2, 3], DType::F32));
    let c = m.constant(NDArray::from_vec([3], vec![1.0f32, -2.0, 0.5]).unwrap());
    let y = m
        .call(
            Binary {
                kind: BinaryKind::Multiply,
            },
            &[x, c],
        )
        .unwrap();
    let y = m
        .call(
            Binary {
                kind: BinaryKind::Add,
            },
            &[y, w],
        )
        .unwrap();
    let y = m
        .call(
            Unary {
                kind: UnaryKind::Relu,
            },
            &[y],
        )
        .unwrap();
    let z = m
        .call(
            Binary {
                kind: BinaryKind::Subtract,
            },
            &[y, w],
        )
        .unwrap();
    m.set_main(&[x, w], z).unwrap();
    let params = Params::from([("w".to_string(), NDArray::random(vec![2, 3], DType::F32, 9))]);
    (m, params)
}

#[test]
fn params_are_bound_then_lifted_back() {
    let (m, params) = with_constant();
    let inputs = Params::from([("x".to_string(), NDArray::random(vec![2, 3], DType::F32, 4))]);
    let want = reference(&m, &params, &inputs);
    for t in ["ref", "interp"] {
        for level in 0..=3u8 {
            let lib = build(&m, &target(t), &params, level).unwrap();
            // The weight keeps its name; the module's constant becomes `p0`.
            let names: Vec<&String> = lib.params().keys().collect();
            assert_eq!(names, ["p0", "w"], "{t} at {level}");
            assert_close(&run(&lib, &inputs), &want);
        }
    }
    let lib = build(&m, &target("interp"), &params, 3).unwrap();
    assert_eq!(lib.kernels().len(), 1, "one fused kernel");
    let steps: Vec<&str> = lib.build_log().iter().map(|(s, _)| s.as_str()).collect();
    assert_eq!(
        &steps[..4],
        ["verify", "bind params", "optimize", "lift constants"]
    );
}

#[test]
fn pass_context_reaches_the_optimizer() {
    let (m, params) = with_constant();
    let inputs = Params::from([("x".to_string(), NDArray::random(vec![2, 3], DType::F32, 4))]);
    let want = reference(&m, &params, &inputs);
    // FuseOps disabled: every op call is still one kernel.
    let mut ctx = PassContext::from(3);
    ctx.disabled.insert("FuseOps".into());
    let lib = build(&m, &target("interp"), &params, ctx).unwrap();
    assert_eq!(lib.kernels().len(), 4);
    assert!(!lib.pass_report().get("FuseOps").unwrap().ran);
    assert_close(&run(&lib, &inputs), &want);
    // Bad contexts are clear errors at build time.
    let e = build(&m, &target("interp"), &params, 7)
        .unwrap_err()
        .to_string();
    assert!(e.contains("opt_level 7 is out of range 0..=3"), "{e}");
    let mut ctx = PassContext::from(2);
    ctx.required.insert("NoSuchPass".into());
    let e = build(&m, &target("ref"), &params, ctx)
        .unwrap_err()
        .to_string();
    assert!(e.contains("unknown pass `NoSuchPass`"), "{e}");
    // Params are checked against @main before anything else.
    let bad = Params::from([("nope".to_string(), NDArray::zeros(vec![1], DType::F32))]);
    let e = build(&m, &target("ref"), &bad, 2).unwrap_err().to_string();
    assert!(
        e.contains("param `nope` is not a parameter of @main"),
        "{e}"
    );
}
