//! Batch-norm scales in ResNet-18 and ResNet-50 (pre-activation units: `relu(x * S + T)`
//! feeding convolutions) at opt level 3, standard pipeline: every scale folds into
//! convolution weights — backward into the convolution before it, or forward through the
//! shift and the relu into the convolutions after it, as Relay's `FoldScaleAxis` does —
//! except the last batch norm's, whose relu feeds a global pool (Relay does not fold
//! through pools either). The outputs equal the unoptimized module's within 1e-4. The
//! batch norms have random statistics with positive `gamma` (a relu commutes only with a
//! positive scale); the ResNets run on 32x32 images to keep the interpreter fast.

mod common;

use kiln_ir::interp::Inputs;
use kiln_ir::{DType, ExprId, Module, NDArray, zoo};
use kiln_rewrite::passes::bind_params;
use kiln_rewrite::{PassContext, optimize};

fn op_name(m: &Module, id: ExprId) -> Option<&str> {
    m.kind(id).op().map(|op| op.name())
}

/// The `multiply` calls left in `@main` and, for each, the op names of its chain of
/// single users (`add`, `nn.relu`, ...).
fn multiplies(m: &Module) -> Vec<Vec<String>> {
    let order = kiln_ir::visit::post_order(m, m.main_id().unwrap());
    let users = |id: ExprId| -> Vec<ExprId> {
        order
            .iter()
            .copied()
            .filter(|&u| m.kind(u).children().contains(&id))
            .collect()
    };
    let mut out = vec![];
    for &id in &order {
        if op_name(m, id) != Some("multiply") {
            continue;
        }
        let mut chain = vec![];
        let mut at = id;
        while let [one] = users(at)[..] {
            chain.push(op_name(m, one).unwrap_or("-").to_string());
            at = one;
            if chain.len() == 3 {
                break;
            }
        }
        out.push(chain);
    }
    out
}

fn resnet(layers: usize) {
    let (m, mut params) = zoo::resnet(layers, 1, [3, 32, 32], DType::F32, 0).unwrap();
    for (i, (name, v)) in params.iter_mut().enumerate() {
        let (lo, hi) = match name.rsplit('_').next().unwrap_or("") {
            "gamma" => (0.5, 1.5),
            "var" => (0.5, 2.0),
            "beta" | "mean" => (-0.5, 0.5),
            _ => continue,
        };
        *v = NDArray::random_uniform(v.shape().to_vec(), v.dtype(), 7 + i as u64, lo, hi);
    }
    let bound = bind_params(&m, &params).unwrap();
    let mut ctx = PassContext::with_opt_level(3).unwrap();
    ctx.verify = true;
    ctx.disabled.insert("FuseOps".to_string());
    let (out, report) = optimize(&bound, &ctx).unwrap();
    let left = multiplies(&out);
    assert_eq!(
        left,
        [["add", "nn.relu", "nn.global_avg_pool2d"]],
        "only the last batch norm's scale is left\n{report}"
    );
    let (_, data_ty) = m
        .main_tensor_params()
        .unwrap()
        .into_iter()
        .find(|(n, _)| n == "data")
        .unwrap();
    let mut inputs: Inputs = params.clone();
    inputs.insert("data".into(), NDArray::random(data_ty.shape, DType::F32, 3));
    common::check_same_values(&m, &out, &inputs).unwrap();
}

#[test]
fn resnet18_batch_norm_scales_fold() {
    resnet(18);
}

#[test]
fn resnet50_batch_norm_scales_fold() {
    resnet(50);
}
