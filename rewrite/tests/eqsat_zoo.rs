//! Zoo models through the EqSat pass: saturation stays within its limits and reports
//! them, the extracted program never costs more than the input, and the reference
//! interpreter gives the same outputs (1e-4) before and after. Value checks use small
//! images (debug builds run the interpreter); full-size ResNet-50 checks limits and cost
//! only.

mod common;

use std::collections::BTreeMap;

use common::{assert_same_outputs, input};
use kiln_ir::DType;
use kiln_ir::zoo::{mlp, resnet};
use kiln_rewrite::eqsat::{EqSat, function_cost};
use kiln_rewrite::pass::run_passes;
use kiln_rewrite::passes::bind_params;
use kiln_rewrite::{PassContext, PassRecord};

fn details(r: &PassRecord) -> BTreeMap<&str, &str> {
    r.details
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect()
}

/// Runs EqSat at opt level 3 and checks the report, the cost and the limits.
fn run_eqsat(m: &kiln_ir::Module) -> (kiln_ir::Module, PassRecord) {
    let pass = EqSat::new();
    let ctx = PassContext::with_opt_level(3).unwrap();
    let (out, report) = run_passes(m, &[&pass], &ctx).unwrap();
    let rec = report.get("EqSat").unwrap().clone();
    assert!(rec.ran);
    let d = details(&rec);
    for key in [
        "stop",
        "iterations",
        "enodes",
        "eclasses",
        "saturate_ms",
        "cost_before",
        "cost_after",
    ] {
        assert!(d.contains_key(key), "missing `{key}` in {d:?}");
    }
    let nodes: usize = d["enodes"].parse().unwrap();
    let iters: usize = d["iterations"].parse().unwrap();
    // egg checks the node limit after an iteration, so it may overshoot by one round.
    assert!(iters <= pass.config.iter_limit, "{d:?}");
    assert!(
        ["saturated", "iteration limit", "node limit", "time limit"].contains(&d["stop"]),
        "{d:?}"
    );
    let before = function_cost(pass.cost.as_ref(), m, m.main_id().unwrap()).unwrap();
    let after = function_cost(pass.cost.as_ref(), &out, out.main_id().unwrap()).unwrap();
    assert!(after <= before, "cost went up: {before} -> {after}");
    let reported: f64 = d["cost_after"].parse().unwrap();
    assert!(
        (reported - after).abs() <= 1e-3 * after.max(1.0),
        "{reported} vs {after}"
    );
    assert!(nodes > 0);
    (out, rec)
}

#[test]
fn resnet18_small_images_keep_their_outputs() {
    let (m, params) = resnet(18, 1, [3, 32, 32], DType::F32, 0).unwrap();
    let m = bind_params(&m, &params).unwrap();
    let (out, rec) = run_eqsat(&m);
    let d = details(&rec);
    let (b, a): (f64, f64) = (
        d["cost_before"].parse().unwrap(),
        d["cost_after"].parse().unwrap(),
    );
    assert!(a < b, "nothing folded: {d:?}");
    let data = m.main_tensor_params().unwrap();
    assert_same_outputs(&m, &out, &input("data", &data[0].1, 7), 1e-4);
}

#[test]
fn resnet50_small_images_keep_their_outputs() {
    let (m, params) = resnet(50, 1, [3, 32, 32], DType::F32, 0).unwrap();
    let m = bind_params(&m, &params).unwrap();
    let (out, _) = run_eqsat(&m);
    let data = m.main_tensor_params().unwrap();
    assert_same_outputs(&m, &out, &input("data", &data[0].1, 8), 1e-4);
}

#[test]
fn mlp_keeps_its_outputs() {
    let (m, params) = mlp(2, 10, [1, 28, 28], DType::F32, 0).unwrap();
    let m = bind_params(&m, &params).unwrap();
    let (out, _) = run_eqsat(&m);
    let data = m.main_tensor_params().unwrap();
    assert_same_outputs(&m, &out, &input("data", &data[0].1, 9), 1e-4);
}

#[test]
fn unbound_weights_are_variables_and_outputs_still_agree() {
    let (m, params) = resnet(18, 1, [3, 32, 32], DType::F32, 0).unwrap();
    let (out, _) = run_eqsat(&m);
    let mut inputs = params.clone();
    inputs.extend(input("data", &m.main_tensor_params().unwrap()[0].1, 3));
    assert_same_outputs(&m, &out, &inputs, 1e-4);
}

#[test]
fn resnet50_full_size_within_limits_and_not_costlier() {
    let (m, params) = resnet(50, 1, [3, 224, 224], DType::F32, 0).unwrap();
    let m = bind_params(&m, &params).unwrap();
    let (out, rec) = run_eqsat(&m);
    eprintln!("ResNet-50 EqSat: {:.1} ms {:?}", rec.time_ms, rec.details);
    // The batch norms right after a convolution fold into its weights (33 of 51); of
    // the pre-activation ones (before a relu), the cost model keeps some.
    let count = |m: &kiln_ir::Module, name: &str| {
        let main = m.main().unwrap();
        kiln_ir::visit::body_order(m, main.body)
            .into_iter()
            .filter(|&id| m.kind(id).op().is_some_and(|op| op.name() == name))
            .count()
    };
    let bns = |m: &kiln_ir::Module| count(m, "nn.batch_norm");
    eprintln!(
        "batch norms {} -> {}, convolutions {} -> {}, splits {}",
        bns(&m),
        bns(&out),
        count(&m, "nn.conv2d"),
        count(&out, "nn.conv2d"),
        count(&out, "split")
    );
    assert_eq!(bns(&m), 51);
    assert!(bns(&out) <= 18, "{} batch norms left", bns(&out));
}
