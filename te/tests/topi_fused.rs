//! A fused primitive group — conv2d + bias_add + relu + add (a residual) — lowers to ONE
//! kernel under both default schedules, with the elementwise tail inlined into the
//! conv's loop nest, and computes what the reference interpreter computes.

mod topi_support;

use std::collections::BTreeMap;

use kiln_ir::DType::F32;
use kiln_ir::op::{BiasAdd, Binary, BinaryKind, Conv2d, Unary, UnaryKind};
use kiln_ir::{FnAttrs, Module, NDArray, Type};
use kiln_te::tir;
use kiln_te::topi::{ScheduleKind, kernels_of};

#[test]
fn conv_bias_relu_add_is_one_kernel() {
    let mut m = Module::new();
    let ty = |s: &[usize]| Type::tensor(s.to_vec(), F32);
    // The primitive function.
    let (x, w, b, r) = (
        m.var("x", ty(&[1, 3, 6, 8])),
        m.var("w", ty(&[8, 3, 3, 3])),
        m.var("b", ty(&[8])),
        m.var("r", ty(&[1, 8, 6, 8])),
    );
    let mut conv = Conv2d::new(8, [3, 3]);
    conv.padding = [1, 1, 1, 1];
    let c = m.call(conv, &[x, w]).unwrap();
    let ba = m.call(BiasAdd { axis: 1 }, &[c, b]).unwrap();
    let re = m.call(Unary::new(UnaryKind::Relu), &[ba]).unwrap();
    let ad = m.call(Binary::new(BinaryKind::Add), &[re, r]).unwrap();
    let f = m
        .function(&[x, w, b, r], ad, FnAttrs { primitive: true })
        .unwrap();
    // @main calls it.
    let (dx, dw, db, dr) = (
        m.var("data", ty(&[1, 3, 6, 8])),
        m.var("weight", ty(&[8, 3, 3, 3])),
        m.var("bias", ty(&[8])),
        m.var("residual", ty(&[1, 8, 6, 8])),
    );
    let call = m.call_function(f, &[dx, dw, db, dr]).unwrap();
    m.set_main(&[dx, dw, db, dr], call).unwrap();

    let args: Vec<NDArray> = [[1, 3, 6, 8].as_slice(), &[8, 3, 3, 3], &[8], &[1, 8, 6, 8]]
        .iter()
        .enumerate()
        .map(|(i, s)| NDArray::random(s.to_vec(), F32, 11 + i as u64))
        .collect();
    let named: BTreeMap<String, NDArray> = ["data", "weight", "bias", "residual"]
        .iter()
        .map(|s| s.to_string())
        .zip(args.iter().cloned())
        .collect();
    let want = kiln_ir::interp::evaluate(&m, &named).unwrap().flatten();

    for target in [ScheduleKind::Cpu, ScheduleKind::Gpu] {
        let ks = kernels_of(&m, target).unwrap();
        assert_eq!(ks.len(), 1, "{target:?}: one kernel");
        let k = &ks[0];
        assert_eq!(k.name, "fused_nn_conv2d_nn_bias_add_nn_relu_add");
        tir::verify(k).unwrap();
        let text = k.to_string();
        // One output buffer, and the tail (bias, relu's select, residual) in the store.
        assert_eq!(k.outputs().len(), 1);
        assert_eq!(text.matches("out %").count(), 1, "{text}");
        let stores: Vec<&str> = text.lines().filter(|l| l.contains("%T_add")).collect();
        assert!(
            stores
                .iter()
                .any(|l| l.contains("select(") && l.contains("%r[") && l.contains("%b[")),
            "{target:?}: the tail is not inlined into the output store:\n{text}"
        );
        assert!(!text.contains("T_nn_relu"), "relu must be inlined:\n{text}");
        let got = tir::run_with_inputs(k, &args).unwrap();
        got[0].allclose(&want[0], 1e-5, 1e-4).unwrap();
    }
}
