//! The PTX interpreter catches what a GPU would get wrong: with a codegen bug planted
//! (`kiln_backend_cuda::testing::plant_bug`: each kernel's first `bar.sync` is not
//! emitted), a tiled convolution fails in the interpreter with a shared-memory data race,
//! and the op sweep fails; with the bug switched off both pass. The switch is
//! process-wide, so this binary holds only this test.

use kiln_backend_cuda::testing::{Bug, plant_bug};
use kiln_ir::DType::F32;
use kiln_ir::op::Conv2d;
use kiln_testsuite::ops::{ACCUM, Arg, Backend, check_on, inputs, one_op, tt};
use kiln_testsuite::ptx_sim::cuda_backend;
use kiln_testsuite::ptx_sim::op_cases::op_cases;
use kiln_testsuite::suite::ExecBackend;

/// Switches the planted bug off when dropped, even if an assertion fails.
struct Unplant;

impl Drop for Unplant {
    fn drop(&mut self) {
        plant_bug(None);
    }
}

fn sweep(backends: &[Backend]) -> Vec<String> {
    op_cases()
        .iter()
        .filter_map(|c| {
            check_on(backends, &c.module, &c.params, &c.inputs, c.tol)
                .err()
                .map(|e| format!("{}: {e}", c.name))
        })
        .collect()
}

#[test]
fn a_dropped_barrier_is_reported_as_a_race() {
    let backends = [Backend::Exec(ExecBackend::new(cuda_backend()))];
    // 16 input channels: the tiled schedule stages two chunks through shared memory, so
    // the second chunk's loads race with the first chunk's reads without the barrier.
    let conv = Conv2d {
        strides: [1, 1],
        padding: [1, 1, 1, 1],
        dilation: [1, 1],
        groups: 1,
        channels: None,
        kernel_size: None,
    };
    let (m, params) = one_op(
        conv,
        &[
            Arg::T(tt(&[1, 16, 12, 12], F32)),
            Arg::T(tt(&[32, 16, 3, 3], F32)),
        ],
    )
    .unwrap();
    let xs = inputs(&params, 3, -1.0, 1.0);
    let _guard = Unplant;
    plant_bug(Some(Bug::DropFirstBarrier));
    let e = check_on(&backends, &m, &params, &xs, ACCUM).unwrap_err();
    assert!(e.contains("data race on shared"), "{e}");
    let failures = sweep(&backends);
    assert!(
        failures.iter().any(|f| f.contains("data race")),
        "the sweep missed the planted bug: {failures:?}"
    );
    plant_bug(None);
    check_on(&backends, &m, &params, &xs, ACCUM).expect("passes without the bug");
    let failures = sweep(&backends);
    assert!(failures.is_empty(), "{failures:?}");
}
