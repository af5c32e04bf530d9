//! The classical passes on the zoo models (mlp, ResNet-18, ResNet-50) with their params
//! bound as constants, at opt level 3: no `nn.batch_norm` is left, the batch norms that
//! follow a convolution are folded into its weights, and the outputs equal the
//! unoptimized module's in the reference interpreter within `common::ATOL`/`RTOL`.
//! The ResNets run on 32x32 images (the ImageNet structure with a 3x3 stem) to keep the
//! interpreter fast.

mod common;

use kiln_ir::interp::Inputs;
use kiln_ir::{DType, Module, NDArray, zoo};
use kiln_rewrite::pass::run_passes;
use kiln_rewrite::passes::{bind_params, classical_passes};
use kiln_rewrite::{Pass, PassContext};

/// Optimizes `m` with `params` bound, checks values on a seeded `data` and returns the
/// optimized module.
fn check(m: &Module, params: &zoo::Params) -> Module {
    let bound = bind_params(m, params).unwrap();
    let passes = classical_passes();
    let refs: Vec<&dyn Pass> = passes.iter().map(|p| p.as_ref()).collect();
    let mut ctx = PassContext::with_opt_level(3).unwrap();
    ctx.verify = true;
    let (out, report) = run_passes(&bound, &refs, &ctx).unwrap();
    eprintln!("{report}");
    let (_, data_ty) = m
        .main_tensor_params()
        .unwrap()
        .into_iter()
        .find(|(n, _)| n == "data")
        .unwrap();
    let mut inputs: Inputs = params.clone();
    inputs.insert("data".into(), NDArray::random(data_ty.shape, DType::F32, 3));
    common::check_same_values(m, &out, &inputs).unwrap();
    assert_eq!(
        out.main_tensor_params().unwrap().len(),
        1,
        "only data is left"
    );
    out
}

fn count_op(m: &Module, name: &str) -> usize {
    kiln_ir::visit::post_order(m, m.main_id().unwrap())
        .into_iter()
        .filter(|&id| m.kind(id).op().is_some_and(|op| op.name() == name))
        .count()
}

/// Random batch-norm statistics instead of the zoo's identity ones (gamma 1, beta 0,
/// mean 0, var 1), so that folding them is visible in the values.
fn perturb(params: &mut zoo::Params) {
    for (i, (name, v)) in params.iter_mut().enumerate() {
        let (lo, hi) = if name.ends_with("var") {
            (0.5, 2.0)
        } else if name.ends_with("gamma") || name.ends_with("beta") || name.ends_with("mean") {
            (-0.5, 0.5)
        } else {
            continue;
        };
        *v = NDArray::random_uniform(v.shape().to_vec(), v.dtype(), 100 + i as u64, lo, hi);
    }
}

#[test]
fn mlp_keeps_values() {
    let (m, params) = zoo::mlp(2, 10, [1, 8, 8], DType::F32, 0).unwrap();
    let out = check(&m, &params);
    assert_eq!(count_op(&out, "nn.dense"), 3);
}

fn resnet(layers: usize) {
    let (m, mut params) = zoo::resnet(layers, 1, [3, 32, 32], DType::F32, 0).unwrap();
    perturb(&mut params);
    let bns = count_op(&m, "nn.batch_norm");
    let convs = count_op(&m, "nn.conv2d");
    let out = check(&m, &params);
    assert_eq!(count_op(&out, "nn.batch_norm"), 0);
    assert_eq!(count_op(&out, "nn.conv2d"), convs);
    // The batch norms that directly follow a convolution fold into it entirely (their
    // multiply is gone); so does the input's (forward into the stem convolution). The
    // others feed a relu and these random statistics have negative scales, which do not
    // commute with it, so they stay a multiply and an add (`scale_folding.rs` has the
    // positive case).
    let multiplies = count_op(&out, "multiply");
    assert!(
        multiplies < bns,
        "{multiplies} multiplies for {bns} batch norms"
    );
}

#[test]
fn resnet18_keeps_values() {
    resnet(18);
}

#[test]
fn resnet50_keeps_values() {
    resnet(50);
}
