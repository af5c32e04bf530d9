//! The GPU default schedule's shared-memory tiling of dense, batch-matmul and conv2d:
//! for fixed ragged shapes and over random shapes and attributes, the kernel stages its
//! input tiles in `shared` buffers between barriers, passes the verifier, round-trips
//! as text, and run by the loop-IR interpreter (which reports shared-memory races)
//! equals the graph-IR reference interpreter; ops without such an anchor keep the plain
//! schedule.

mod topi_support;

use std::collections::BTreeMap;

use kiln_ir::DType::{self, F32, I32};
use kiln_ir::op::{BatchMatmul, BiasAdd, Conv2d, Dense, Softmax, Unary, UnaryKind};
use kiln_ir::{FnAttrs, Module, NDArray, Op, Type};
use kiln_te::tir::{self, PrimFunc, Scope};
use kiln_te::topi::ScheduleKind;
use proptest::prelude::*;
use topi_support::*;

/// The number of shared buffers of `k`.
fn shared_count(k: &PrimFunc) -> usize {
    k.buffers
        .iter()
        .filter(|b| b.scope == Scope::Shared)
        .count()
}

/// Lowers a one-op module for the GPU, checks that it is tiled through shared memory
/// (`shared` buffers, barriers, 2-D thread blocks; verified and round-tripped by
/// `lower_checked`), and compares both targets with the reference. Returns the kernel.
fn tiled(op: impl Into<Op>, args: &[Arg], seed: u64, tol: Tol) -> Result<PrimFunc, String> {
    let (m, params) = one_op(op, args)?;
    let ks = lower_checked(&m, ScheduleKind::Gpu)?;
    let [k] = &ks[..] else {
        return Err(format!("expected one kernel, got {}", ks.len()));
    };
    let text = k.to_string();
    if shared_count(k) == 0 {
        return Err(format!("no shared buffer:\n{text}"));
    }
    if !text.contains("barrier()") {
        return Err(format!("no barrier:\n{text}"));
    }
    if !text.contains("threadIdx.y") || !text.contains("blockIdx.y") {
        return Err(format!("no 2-D launch:\n{text}"));
    }
    let xs = inputs(&params, seed, -1.0, 1.0);
    check(&m, &params, &xs, tol)?;
    Ok(k.clone())
}

fn t(shape: &[usize]) -> Arg {
    Arg::T(tt(shape, F32))
}

fn dense() -> Dense {
    Dense { units: None }
}

fn bmm(ta: bool, tb: bool) -> BatchMatmul {
    BatchMatmul {
        transpose_a: ta,
        transpose_b: tb,
    }
}

fn conv(stride: usize, pad: usize, groups: usize) -> Conv2d {
    Conv2d {
        strides: [stride, stride],
        padding: [pad; 4],
        dilation: [1, 1],
        groups,
        channels: None,
        kernel_size: None,
    }
}

#[test]
fn dense_batch_one() {
    let k = tiled(dense(), &[t(&[1, 24]), t(&[20, 24])], 1, ACCUM).unwrap();
    assert_eq!(shared_count(&k), 2, "{k}");
}

#[test]
fn dense_ragged_rows_columns_and_reduction() {
    let k = tiled(dense(), &[t(&[5, 33]), t(&[17, 33])], 2, ACCUM).unwrap();
    assert_eq!(shared_count(&k), 2, "{k}");
}

#[test]
fn dense_rank3_data_and_integers() {
    tiled(dense(), &[t(&[2, 9, 11]), t(&[10, 11])], 3, ACCUM).unwrap();
    tiled(
        dense(),
        &[Arg::T(tt(&[3, 19], I32)), Arg::T(tt(&[18, 19], I32))],
        4,
        EXACT,
    )
    .unwrap();
}

#[test]
fn batch_matmul_ragged() {
    let k = tiled(
        bmm(false, true),
        &[t(&[2, 9, 13]), t(&[2, 11, 13])],
        5,
        ACCUM,
    )
    .unwrap();
    assert_eq!(shared_count(&k), 2, "{k}");
}

#[test]
fn batch_matmul_transposed_and_broadcast() {
    tiled(
        bmm(true, false),
        &[t(&[1, 13, 9]), t(&[3, 13, 11])],
        6,
        ACCUM,
    )
    .unwrap();
    tiled(
        bmm(false, false),
        &[t(&[2, 17, 18]), t(&[1, 18, 20])],
        7,
        ACCUM,
    )
    .unwrap();
}

#[test]
fn conv2d_stride_1_stages_input_patch_and_weights() {
    let k = tiled(
        conv(1, 1, 1),
        &[t(&[1, 3, 9, 9]), t(&[8, 3, 3, 3])],
        8,
        ACCUM,
    )
    .unwrap();
    assert_eq!(shared_count(&k), 2, "{k}");
    let text = k.to_string();
    assert!(
        text.contains("threadIdx.z") && text.contains("blockIdx.z"),
        "{text}"
    );
}

#[test]
fn conv2d_stride_2() {
    let k = tiled(
        conv(2, 1, 1),
        &[t(&[1, 3, 9, 9]), t(&[8, 3, 3, 3])],
        9,
        ACCUM,
    )
    .unwrap();
    assert_eq!(shared_count(&k), 2, "{k}");
}

#[test]
fn conv2d_groups_2_stages_weights_only() {
    for stride in [1, 2] {
        let k = tiled(
            conv(stride, 1, 2),
            &[t(&[1, 4, 9, 9]), t(&[8, 2, 3, 3])],
            10,
            ACCUM,
        )
        .unwrap();
        assert_eq!(shared_count(&k), 1, "{k}");
    }
}

#[test]
fn conv2d_more_channels_than_one_chunk() {
    tiled(
        conv(1, 0, 1),
        &[t(&[2, 11, 6, 7]), t(&[10, 11, 2, 2])],
        11,
        ACCUM,
    )
    .unwrap();
}

#[test]
fn ops_without_an_anchor_keep_the_plain_schedule() {
    let (m, _) = one_op(Softmax { axis: -1 }, &[t(&[4, 9])]).unwrap();
    let ks = lower_checked(&m, ScheduleKind::Gpu).unwrap();
    assert_eq!(shared_count(&ks[0]), 0, "{}", ks[0]);
    assert!(!ks[0].to_string().contains("barrier()"));
}

#[test]
fn fused_dense_bias_relu_tail_runs_after_the_tiles() {
    let mut m = Module::new();
    let ty = |s: &[usize]| Type::tensor(s.to_vec(), F32);
    let (x, w, b) = (
        m.var("x", ty(&[6, 21])),
        m.var("w", ty(&[19, 21])),
        m.var("b", ty(&[19])),
    );
    let d = m.call(dense(), &[x, w]).unwrap();
    let ba = m.call(BiasAdd { axis: -1 }, &[d, b]).unwrap();
    let re = m.call(Unary::new(UnaryKind::Relu), &[ba]).unwrap();
    let f = m
        .function(&[x, w, b], re, FnAttrs { primitive: true })
        .unwrap();
    let (dx, dw, db) = (
        m.var("data", ty(&[6, 21])),
        m.var("weight", ty(&[19, 21])),
        m.var("bias", ty(&[19])),
    );
    let call = m.call_function(f, &[dx, dw, db]).unwrap();
    m.set_main(&[dx, dw, db], call).unwrap();
    let args: Vec<NDArray> = [[6, 21].as_slice(), &[19, 21], &[19]]
        .iter()
        .enumerate()
        .map(|(i, s)| NDArray::random_uniform(s.to_vec(), F32, 21 + i as u64, -1.0, 1.0))
        .collect();
    let named: BTreeMap<String, NDArray> = ["data", "weight", "bias"]
        .iter()
        .map(|s| s.to_string())
        .zip(args.iter().cloned())
        .collect();
    let want = kiln_ir::interp::evaluate(&m, &named).unwrap().flatten();
    let ks = lower_checked(&m, ScheduleKind::Gpu).unwrap();
    let k = &ks[0];
    assert_eq!(shared_count(k), 2, "{k}");
    let got = tir::run_with_inputs(k, &args).unwrap();
    got[0].allclose(&want[0], 1e-5, 1e-4).unwrap();
}

fn dtype_of(int: bool) -> (DType, Tol) {
    if int { (I32, EXACT) } else { (F32, ACCUM) }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 8, ..ProptestConfig::default() })]

    #[test]
    fn random_dense(lead in proptest::collection::vec(1usize..6, 1..3), n in 1usize..24, k in 1usize..40, int in any::<bool>(), seed in any::<u64>()) {
        let (dt, tol) = dtype_of(int);
        let mut xs = lead.clone();
        xs.push(k);
        let (m, params) = one_op(dense(), &[Arg::T(tt(&xs, dt)), Arg::T(tt(&[n, k], dt))]).map_err(TestCaseError::fail)?;
        let ks = lower_checked(&m, ScheduleKind::Gpu).map_err(TestCaseError::fail)?;
        prop_assert!(shared_count(&ks[0]) == 2, "{}", ks[0]);
        check(&m, &params, &inputs(&params, seed, -1.0, 1.0), tol).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn random_batch_matmul(b in 1usize..3, bcast in 0usize..3, m in 1usize..20, n in 1usize..20, k in 1usize..20, ta in any::<bool>(), tb in any::<bool>(), int in any::<bool>(), seed in any::<u64>()) {
        let (dt, tol) = dtype_of(int);
        let (ba, bb) = match bcast { 1 => (1, b), 2 => (b, 1), _ => (b, b) };
        let a = if ta { [ba, k, m] } else { [ba, m, k] };
        let bs = if tb { [bb, n, k] } else { [bb, k, n] };
        let (md, params) = one_op(bmm(ta, tb), &[Arg::T(tt(&a, dt)), Arg::T(tt(&bs, dt))]).map_err(TestCaseError::fail)?;
        let ks = lower_checked(&md, ScheduleKind::Gpu).map_err(TestCaseError::fail)?;
        prop_assert!(shared_count(&ks[0]) == 2, "{}", ks[0]);
        check(&md, &params, &inputs(&params, seed, -1.0, 1.0), tol).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn random_conv2d(n in 1usize..3, cg in 1usize..6, g in 1usize..3, og in 1usize..6, h in 1usize..10, w in 1usize..10,
                     kh in 1usize..4, kw in 1usize..4, sh in 1usize..3, sw in 1usize..3, dh in 1usize..3, dw in 1usize..3,
                     pad in proptest::array::uniform4(0usize..3), int in any::<bool>(), seed in any::<u64>()) {
        let (dt, tol) = dtype_of(int);
        let op = Conv2d { strides: [sh, sw], padding: pad, dilation: [dh, dw], groups: g, channels: None, kernel_size: None };
        let Ok((m, params)) = one_op(op, &[Arg::T(tt(&[n, cg * g, h, w], dt)), Arg::T(tt(&[og * g, cg, kh, kw], dt))]) else {
            // The type rule refuses a kernel larger than the padded input.
            return Ok(());
        };
        let ks = lower_checked(&m, ScheduleKind::Gpu).map_err(TestCaseError::fail)?;
        // The input is staged too when its channel is affine in the output channel:
        // one group, or one output channel per group (`oc * cg + rc`).
        let want = if g == 1 || og == 1 { 2 } else { 1 };
        prop_assert!(shared_count(&ks[0]) == want, "{}", ks[0]);
        check(&m, &params, &inputs(&params, seed, -1.0, 1.0), tol).map_err(TestCaseError::fail)?;
    }
}

#[test]
fn every_zoo_conv2d_and_dense_kernel_is_tiled() {
    for model in ["resnet18", "resnet50", "mlp"] {
        let (m, _) = kiln_ir::zoo::by_name(model).unwrap();
        let ks = lower_checked(&m, ScheduleKind::Gpu).unwrap();
        let mut anchored = 0;
        for k in &ks {
            let anchor = ["fused_nn_conv2d", "fused_nn_dense", "fused_nn_batch_matmul"]
                .iter()
                .any(|p| k.name.starts_with(p));
            let shared = shared_count(k);
            if anchor {
                anchored += 1;
                assert!(shared >= 1, "{model}: @{} is not tiled:\n{k}", k.name);
                assert!(k.to_string().contains("barrier()"), "@{}", k.name);
            } else {
                assert_eq!(shared, 0, "{model}: @{} uses shared memory", k.name);
            }
        }
        assert!(anchored > 0, "{model}: no conv2d or dense kernel");
    }
}
