//! Hand-picked cases of the op computes under both default schedules, one per op
//! family: quick to run and easy to read when something breaks.

mod topi_support;

use kiln_ir::DType::*;
use kiln_ir::op::*;
use topi_support::*;

fn run(op: impl Into<kiln_ir::Op>, args: &[Arg], lo: f64, hi: f64, tol: Tol) {
    let (m, params) = one_op(op, args).unwrap();
    let xs = inputs(&params, 1, lo, hi);
    if let Err(e) = check(&m, &params, &xs, tol) {
        panic!("{e}");
    }
}

#[test]
fn relu_and_add() {
    run(
        Unary::new(UnaryKind::Relu),
        &[Arg::T(tt(&[3, 5], F32))],
        -1.0,
        1.0,
        EXACT,
    );
    run(
        Binary::new(BinaryKind::Add),
        &[Arg::T(tt(&[2, 3, 8], F32)), Arg::T(tt(&[3, 1], F32))],
        -1.0,
        1.0,
        ARITH,
    );
}

#[test]
fn conv2d_padded() {
    let mut c = Conv2d::new(8, [3, 3]);
    c.padding = [1, 1, 1, 1];
    run(
        c,
        &[
            Arg::T(tt(&[1, 3, 6, 8], F32)),
            Arg::T(tt(&[8, 3, 3, 3], F32)),
        ],
        -1.0,
        1.0,
        ACCUM,
    );
}

#[test]
fn dense_and_softmax() {
    run(
        Dense::default(),
        &[Arg::T(tt(&[2, 5], F32)), Arg::T(tt(&[8, 5], F32))],
        -1.0,
        1.0,
        ACCUM,
    );
    run(
        Softmax::default(),
        &[Arg::T(tt(&[3, 7], F32))],
        -1.0,
        1.0,
        TRANSC,
    );
}
