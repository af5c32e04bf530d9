//! Operator fusion against lowering: the groups FuseOps makes on the zoo's CNNs and MLP
//! (counts and names as TVM makes them) and on the fusion file tests of `rewrite`, every
//! group lowering to a verified kernel for both target kinds, and fused modules computing
//! what the unfused ones compute in the reference interpreter.

use std::collections::BTreeMap;

use kiln_ir::interp::{Inputs, evaluate};
use kiln_ir::op::{Concatenate, Reshape, Softmax, Split, SplitSpec, Transpose, Unary, UnaryKind};
use kiln_ir::{Callee, DType, ExprId, ExprKind, Module, NDArray, Type, zoo};
use kiln_rewrite::fuse::{FuseStats, fuse_ops};
use kiln_rewrite::{FuseOps, Pass, PassContext};
use kiln_te::tir;
use kiln_te::topi::ScheduleKind;
use kiln_te::topi::lower::{kernel_name, lower_function};

/// The primitive functions `@main` calls, in call order.
fn groups(m: &Module) -> Vec<ExprId> {
    let main = m.main().unwrap();
    kiln_ir::visit::body_order(m, main.body)
        .into_iter()
        .filter_map(|id| match m.kind(id) {
            ExprKind::Call {
                callee: Callee::Expr(f),
                ..
            } if m.function_at(*f).is_ok_and(|f| f.attrs.primitive) => Some(*f),
            _ => None,
        })
        .collect()
}

/// `name -> count` of the kernel names of every group.
fn kernel_names(m: &Module) -> BTreeMap<String, usize> {
    let mut names = BTreeMap::new();
    for f in groups(m) {
        *names.entry(kernel_name(m, f).unwrap()).or_insert(0) += 1;
    }
    names
}

/// Op calls of `@main` not inside a primitive function.
fn loose_op_calls(m: &Module) -> usize {
    let main = m.main().unwrap();
    kiln_ir::visit::body_order(m, main.body)
        .into_iter()
        .filter(|&id| m.kind(id).op().is_some())
        .count()
}

fn fused(m: &Module) -> (Module, FuseStats) {
    let (out, stats) = fuse_ops(m, true, 256).unwrap();
    kiln_ir::verify::verify(&out).unwrap();
    assert_eq!(loose_op_calls(&out), 0);
    (out, stats)
}

/// Every group lowers, for both target kinds, to a kernel that verifies.
fn assert_groups_lower(m: &Module) {
    for (i, f) in groups(m).into_iter().enumerate() {
        let (k, kf) = kiln_ir::visit::extract(m, f);
        for target in [ScheduleKind::Cpu, ScheduleKind::Gpu] {
            let name = format!("k{i}");
            let func = lower_function(&k, kf, target, &name).unwrap_or_else(|e| {
                panic!(
                    "group {i} ({}) does not lower for {}: {e}",
                    kernel_name(&k, kf).unwrap(),
                    target.name()
                )
            });
            tir::verify(&func).unwrap_or_else(|e| panic!("group {i} fails to verify: {e}"));
        }
    }
}

fn assert_same_values(a: &Module, b: &Module, inputs: &Inputs) {
    let want = evaluate(a, inputs).unwrap().flatten();
    let got = evaluate(b, inputs).unwrap().flatten();
    assert_eq!(want.len(), got.len());
    for (g, w) in got.iter().zip(&want) {
        g.allclose(w, 1e-4, 1e-4).unwrap();
    }
}

fn inputs_with(params: &BTreeMap<String, NDArray>, m: &Module, seed: u64) -> Inputs {
    let mut inputs: Inputs = params.clone();
    for (i, (name, ty)) in m.main_tensor_params().unwrap().into_iter().enumerate() {
        inputs
            .entry(name)
            .or_insert_with(|| NDArray::random(ty.shape, ty.dtype, seed + i as u64));
    }
    inputs
}

#[test]
fn mlp_fuses_as_tvm_does() {
    let (m, params) = zoo::by_name("mlp").unwrap();
    let (f, stats) = fused(&m);
    let names: Vec<(String, usize)> = kernel_names(&f).into_iter().collect();
    assert_eq!(
        names,
        [
            ("fused_nn_batch_flatten".to_string(), 1),
            ("fused_nn_dense_nn_bias_add".to_string(), 1),
            ("fused_nn_dense_nn_bias_add_nn_relu".to_string(), 2),
            ("fused_nn_softmax".to_string(), 1),
        ]
    );
    assert_eq!(stats.groups, 5);
    assert_eq!(stats.ops, 10);
    assert_groups_lower(&f);
    assert_same_values(&m, &f, &inputs_with(&params, &m, 1));
}

#[test]
fn resnet18_groups_lower_and_anchor_once() {
    let (m, _) = zoo::by_name("resnet18").unwrap();
    let (f, stats) = fused(&m);
    let names = kernel_names(&f);
    eprintln!("resnet18: {} groups: {names:?}", stats.groups);
    // One conv2d (or dense) per group at most: anchors never fuse together.
    for n in names.keys() {
        let anchors = n.matches("nn_conv2d").count() + n.matches("nn_dense").count();
        assert!(anchors <= 1, "{n}");
    }
    // Batch norm is opaque: each stays its own kernel.
    assert_eq!(names.get("fused_nn_batch_norm"), Some(&19));
    assert_groups_lower(&f);
}

#[test]
fn resnet50_groups_lower() {
    let (m, _) = zoo::by_name("resnet50").unwrap();
    let (f, stats) = fused(&m);
    eprintln!("resnet50: {} groups: {:?}", stats.groups, kernel_names(&f));
    assert_groups_lower(&f);
}

#[test]
fn small_resnet_fused_equals_unfused() {
    let (m, params) = zoo::resnet(8, 1, [3, 16, 16], DType::F32, 3).unwrap();
    let (f, stats) = fused(&m);
    assert!(stats.groups < stats.ops, "{stats:?}");
    assert_groups_lower(&f);
    assert_same_values(&m, &f, &inputs_with(&params, &m, 7));
}

#[test]
fn opt_level_zero_makes_one_group_per_op() {
    let (m, params) = zoo::resnet(8, 1, [3, 16, 16], DType::F32, 3).unwrap();
    let ops = loose_op_calls(&m);
    let pass = FuseOps::default();
    let out = pass.run(&m, &PassContext::from(0)).unwrap();
    let f = out.module;
    assert_eq!(groups(&f).len(), ops);
    assert_eq!(loose_op_calls(&f), 0);
    assert!(
        out.details
            .contains(&("groups".to_string(), ops.to_string()))
    );
    assert_same_values(&m, &f, &inputs_with(&params, &m, 2));
    // At level 1 it fuses.
    let one = pass.run(&m, &PassContext::from(1)).unwrap();
    assert!(groups(&one.module).len() < ops);
}

/// `x -> relu^n`: a chain the depth limit must cut.
fn relu_chain(n: usize) -> Module {
    let mut m = Module::new();
    let x = m.var("x", Type::tensor([4, 8], DType::F32));
    let mut y = x;
    for _ in 0..n {
        y = m
            .call(
                Unary {
                    kind: UnaryKind::Relu,
                },
                &[y],
            )
            .unwrap();
    }
    m.set_main(&[x], y).unwrap();
    m
}

#[test]
fn max_depth_bounds_groups() {
    let m = relu_chain(10);
    let (one, _) = fuse_ops(&m, true, 256).unwrap();
    assert_eq!(groups(&one).len(), 1);
    let (cut, stats) = fuse_ops(&m, true, 4).unwrap();
    assert!(stats.largest <= 4, "{stats:?}");
    assert!(groups(&cut).len() >= 3, "{stats:?}");
    let inputs = inputs_with(&BTreeMap::new(), &m, 5);
    assert_same_values(&m, &cut, &inputs);
    let e = fuse_ops(&m, true, 0).unwrap_err().to_string();
    assert!(e.contains("max_depth"), "{e}");
}

/// split into three, each part transposed or relu'd, concatenated back: tuple outputs
/// and tuple inputs inside groups.
#[test]
fn split_and_concat_fuse_and_lower() {
    let mut m = Module::new();
    let x = m.var("x", Type::tensor([2, 6, 4], DType::F32));
    let s = m
        .call(
            Split {
                indices_or_sections: SplitSpec::Sections(3),
                axis: 1,
            },
            &[x],
        )
        .unwrap();
    let a = m.tuple_get(s, 0).unwrap();
    let b = m.tuple_get(s, 1).unwrap();
    let c = m.tuple_get(s, 2).unwrap();
    let ra = m
        .call(
            Unary {
                kind: UnaryKind::Relu,
            },
            &[a],
        )
        .unwrap();
    let eb = m
        .call(
            Unary {
                kind: UnaryKind::Exp,
            },
            &[b],
        )
        .unwrap();
    let t = m.tuple(&[ra, eb, c]).unwrap();
    let cat = m.call(Concatenate { axis: 1 }, &[t]).unwrap();
    let tr = m
        .call(
            Transpose {
                axes: Some(vec![0, 2, 1]),
            },
            &[cat],
        )
        .unwrap();
    let r = m
        .call(
            Reshape {
                newshape: vec![8, 6],
            },
            &[tr],
        )
        .unwrap();
    let sm = m.call(Softmax { axis: -1 }, &[r]).unwrap();
    let out = m.tuple(&[sm, s]).unwrap();
    m.set_main(&[x], out).unwrap();
    kiln_ir::verify::verify(&m).unwrap();
    let (f, stats) = fused(&m);
    assert!(stats.groups < stats.ops, "{stats:?}");
    assert_groups_lower(&f);
    assert_same_values(&m, &f, &inputs_with(&BTreeMap::new(), &m, 9));
}

/// The input IR of every fusion file test in `rewrite/tests/filetests/fuse/`.
fn fuse_filetest_inputs() -> Vec<(String, Module)> {
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../rewrite/tests/filetests/fuse");
    let mut out = vec![];
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        let input = text.split("// ---- expected ----").next().unwrap();
        let m = kiln_ir::text::parse_module(input)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        out.push((path.display().to_string(), m));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

#[test]
fn fusion_file_test_groups_lower() {
    let cases = fuse_filetest_inputs();
    assert!(cases.len() >= 5, "{} cases", cases.len());
    for (name, m) in cases {
        let (f, stats) = fused(&m);
        assert!(stats.groups >= 1, "{name}");
        assert_groups_lower(&f);
    }
}
