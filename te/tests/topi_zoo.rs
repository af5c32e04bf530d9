//! Every kernel of the zoo models (ResNet-18, ResNet-50, the MLP) lowers under the CPU
//! and the GPU default schedules, passes the bounds verifier and round-trips through
//! the loop-IR text form. The MLP's kernels also run in the loop-IR interpreter, chained
//! in `@main`'s order, and agree with the reference interpreter.

mod topi_support;

use std::collections::HashMap;

use kiln_ir::{ExprKind, NDArray};
use kiln_te::tir;
use kiln_te::topi::{ScheduleKind, kernels_of};
use topi_support::lower_checked;

fn check_model(name: &str) {
    let (m, _) = kiln_ir::zoo::by_name(name).unwrap();
    for target in [ScheduleKind::Cpu, ScheduleKind::Gpu] {
        let ks = lower_checked(&m, target).unwrap_or_else(|e| panic!("{name}: {e}"));
        let calls = kiln_ir::visit::body_order(&m, m.main().unwrap().body)
            .into_iter()
            .filter(|&id| m.kind(id).op().is_some())
            .count();
        assert_eq!(ks.len(), calls, "{name}: one kernel per op call");
    }
}

/// The default verifier limits fit every zoo kernel with room: at least 100× more
/// iterations and 50× more local memory than the largest kernel needs (measured: about
/// 5.0e8 iterations and 841 KiB).
#[test]
fn zoo_kernels_fit_the_default_limits_with_room() {
    let limits = tir::Limits::default();
    let (mut iters, mut bytes) = (0u128, 0u128);
    for name in ["resnet18", "resnet50", "mlp"] {
        let (m, _) = kiln_ir::zoo::by_name(name).unwrap();
        for target in [ScheduleKind::Cpu, ScheduleKind::Gpu] {
            for k in kernels_of(&m, target).unwrap() {
                iters = iters.max(tir::verify::limits::iterations(&k.body));
                bytes = bytes.max(tir::verify::limits::local_bytes(&k, &k.body));
            }
        }
    }
    eprintln!("largest zoo kernel: {iters} iterations, {bytes} local bytes");
    assert!(iters * 100 <= limits.max_iterations as u128, "{iters}");
    assert!(bytes * 50 <= limits.max_local_bytes as u128, "{bytes}");
}

#[test]
fn resnet18_kernels_verify_and_round_trip() {
    check_model("resnet18");
}

#[test]
fn resnet50_kernels_verify_and_round_trip() {
    check_model("resnet50");
}

#[test]
fn mlp_kernels_run_and_match_the_reference() {
    let (m, params) = kiln_ir::zoo::by_name("mlp").unwrap();
    let main = m.main().unwrap();
    let mut inputs = params.clone();
    let data_ty = m.ty(main.params[0]).as_tensor().unwrap().clone();
    inputs.insert(
        "data".into(),
        NDArray::random(data_ty.shape.clone(), data_ty.dtype, 3),
    );
    let want = kiln_ir::interp::evaluate(&m, &inputs).unwrap().flatten();
    for target in [ScheduleKind::Cpu, ScheduleKind::Gpu] {
        let ks = kernels_of(&m, target).unwrap();
        // Run the kernels in @main's order, feeding each its arguments' values.
        let mut values: HashMap<kiln_ir::ExprId, NDArray> = HashMap::new();
        for &p in &main.params {
            values.insert(p, inputs[m.var_name(p).unwrap()].clone());
        }
        let mut k = ks.iter();
        let mut last = None;
        for id in kiln_ir::visit::body_order(&m, main.body) {
            let ExprKind::Call { args, .. } = m.kind(id) else {
                continue;
            };
            let f = k.next().unwrap();
            let xs: Vec<NDArray> = args.iter().map(|a| values[a].clone()).collect();
            let out = tir::run_with_inputs(f, &xs).unwrap();
            values.insert(id, out[0].clone());
            last = Some(id);
        }
        let got = &values[&last.unwrap()];
        got.allclose(&want[0], 1e-5, 1e-4)
            .unwrap_or_else(|e| panic!("{target:?}: {e}"));
    }
}
