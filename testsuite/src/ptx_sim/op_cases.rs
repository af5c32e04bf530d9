//! One-op cases covering every op family of the op suite (`tests/ops.rs`) at fixed
//! shapes, attributes and dtypes, with their inputs and tolerances: the kernels the ptxas
//! check assembles (`tests/ptxas.rs`) and the sweep the `cuda` backend runs in the PTX
//! interpreter (`tests/cuda.rs`). The random-graph suite covers the ops in combination.

use kiln_ir::DType::{self, *};
use kiln_ir::attrs::F64;
use kiln_ir::op::*;
use kiln_ir::{Module, NDArray, Op, TensorType};

use crate::ops::{ACCUM, ARITH, Arg, EXACT, TRANSC, Tol, inputs, one_op, tt};

/// A one-op module with its inputs and tolerance.
pub struct OpCase {
    /// What the case is, for messages.
    pub name: String,
    pub module: Module,
    pub params: Vec<(String, TensorType)>,
    pub inputs: Vec<NDArray>,
    pub tol: Tol,
}

/// Adds the case if the op's type rule accepts the arguments.
fn push(
    out: &mut Vec<OpCase>,
    op: impl Into<Op>,
    args: &[Arg],
    (lo, hi): (f64, f64),
    tol: Tol,
    fix: impl FnOnce(&mut Vec<NDArray>),
) {
    let op = op.into();
    let name = format!("{} {args:?}", op.name());
    let Ok((module, params)) = one_op(op, args) else {
        return;
    };
    let mut xs = inputs(&params, out.len() as u64 * 31 + 5, lo, hi);
    fix(&mut xs);
    out.push(OpCase {
        name,
        module,
        params,
        inputs: xs,
        tol,
    });
}

fn t(shape: &[usize], d: DType) -> Arg {
    Arg::T(tt(shape, d))
}

/// The cases.
pub fn op_cases() -> Vec<OpCase> {
    let mut v = vec![];
    let none = |_: &mut Vec<NDArray>| {};
    // The trigonometric and hyperbolic ops are declared unsupported by the GPU backends
    // (no PTX or SPIR-V sequence with a stated error yet); the op suite covers them on
    // the other backends.
    let gpu_unary = UnaryKind::ALL.into_iter().filter(|k| {
        !matches!(
            k,
            UnaryKind::Sin
                | UnaryKind::Cos
                | UnaryKind::Tan
                | UnaryKind::Asin
                | UnaryKind::Acos
                | UnaryKind::Atan
                | UnaryKind::Sinh
                | UnaryKind::Cosh
                | UnaryKind::Asinh
                | UnaryKind::Acosh
                | UnaryKind::Atanh
        )
    });
    for kind in gpu_unary {
        let (lo, hi, tol) = match kind {
            UnaryKind::Log | UnaryKind::Sqrt | UnaryKind::Rsqrt => (0.05, 4.0, TRANSC),
            UnaryKind::Floor | UnaryKind::Ceil | UnaryKind::Round => (-3.0, 3.0, EXACT),
            UnaryKind::Relu | UnaryKind::Negative | UnaryKind::Abs => (-1.0, 1.0, EXACT),
            _ => (-3.0, 3.0, TRANSC),
        };
        push(
            &mut v,
            Unary::new(kind),
            &[t(&[3, 7], F32)],
            (lo, hi),
            tol,
            none,
        );
        push(
            &mut v,
            Unary::new(kind),
            &[t(&[5], F16)],
            (lo, hi),
            (1e-3, 1e-3),
            none,
        );
        if matches!(kind, UnaryKind::Relu | UnaryKind::Negative | UnaryKind::Abs) {
            for d in [I32, I8, I64] {
                push(
                    &mut v,
                    Unary::new(kind),
                    &[t(&[2, 5], d)],
                    (-1.0, 1.0),
                    EXACT,
                    none,
                );
            }
        }
    }
    for kind in BinaryKind::ALL {
        for d in [F32, I32, I8, I64, U8, F16] {
            let float = d.is_float();
            let range = match kind {
                BinaryKind::Divide | BinaryKind::Power if float => (0.5, 2.0),
                _ => (-2.0, 2.0),
            };
            let tol = match kind {
                _ if d == F16 => (1e-2, 1e-2),
                _ if !float => EXACT,
                BinaryKind::Power => TRANSC,
                _ => ARITH,
            };
            let divisor = !float
                && matches!(
                    kind,
                    BinaryKind::Divide
                        | BinaryKind::Power
                        | BinaryKind::FloorMod
                        | BinaryKind::TruncMod
                );
            let modulo = matches!(kind, BinaryKind::FloorMod | BinaryKind::TruncMod);
            push(
                &mut v,
                Binary::new(kind),
                &[t(&[2, 3, 4], d), t(&[3, 1], d)],
                range,
                tol,
                |xs| {
                    if divisor || (modulo && float) {
                        let (lo, hi) = if float { (0.25, 2.0) } else { (1.0, 7.0) };
                        let (lo, hi) = if modulo && d != U8 {
                            (-hi, -lo)
                        } else {
                            (lo, hi)
                        };
                        xs[1] = NDArray::random_uniform(vec![3, 1], d, 11, lo, hi);
                    }
                },
            );
        }
    }
    for kind in [
        BinaryKind::Equal,
        BinaryKind::NotEqual,
        BinaryKind::Maximum,
        BinaryKind::Minimum,
    ] {
        push(
            &mut v,
            Binary::new(kind),
            &[t(&[4, 3], Bool), t(&[4, 3], Bool)],
            (0.0, 1.0),
            EXACT,
            none,
        );
    }
    let dts = [F32, I32, I8, I64, U8, F16];
    for d in dts {
        let tol = if d.is_float() { ARITH } else { EXACT };
        push(
            &mut v,
            Clip::new(-1.5, 2.0),
            &[t(&[3, 4], d)],
            (-4.0, 4.0),
            tol,
            none,
        );
        for to in dts.into_iter().chain([Bool]) {
            push(
                &mut v,
                Cast::new(to),
                &[t(&[3, 5], d)],
                (-300.0, 300.0),
                EXACT,
                none,
            );
        }
        push(
            &mut v,
            Where,
            &[t(&[1, 4], Bool), t(&[3, 4], d), t(&[3, 4], d)],
            (-1.0, 1.0),
            EXACT,
            none,
        );
    }
    for kind in ReduceKind::ALL {
        for (axis, keepdims, exclude) in [
            (None, false, false),
            (Some(vec![1]), true, false),
            (Some(vec![0, -1]), false, true),
        ] {
            for d in [F32, I32] {
                if d == I32 && kind == ReduceKind::Mean {
                    continue;
                }
                let tol = if d == I32 || matches!(kind, ReduceKind::Max | ReduceKind::Min) {
                    EXACT
                } else {
                    ACCUM
                };
                let op = Reduce {
                    kind,
                    axis: axis.clone(),
                    keepdims,
                    exclude,
                };
                push(&mut v, op, &[t(&[3, 4, 5], d)], (-1.0, 1.0), tol, none);
            }
        }
    }
    let convs = [
        ([1, 1], [0, 0, 0, 0], [1, 1], 1, [1, 3, 6, 7], [4, 3, 3, 3]),
        ([2, 1], [1, 2, 0, 1], [1, 2], 1, [2, 4, 7, 8], [5, 4, 2, 3]),
        ([1, 2], [1, 1, 1, 1], [2, 1], 2, [1, 4, 5, 6], [6, 2, 3, 2]),
        (
            [1, 1],
            [1, 1, 1, 1],
            [1, 1],
            1,
            [1, 16, 12, 12],
            [32, 16, 3, 3],
        ),
    ];
    for (strides, padding, dilation, groups, x, w) in convs {
        for d in [F32, I32] {
            let op = Conv2d {
                strides,
                padding,
                dilation,
                groups,
                channels: None,
                kernel_size: None,
            };
            let tol = if d == I32 { EXACT } else { ACCUM };
            push(&mut v, op, &[t(&x, d), t(&w, d)], (-1.0, 1.0), tol, none);
        }
    }
    for max in [true, false] {
        for (size, strides, padding, ceil) in [
            ([2, 2], [2, 2], [0, 0, 0, 0], false),
            ([3, 2], [1, 2], [1, 0, 2, 1], true),
        ] {
            let kind = if max { PoolKind::Max } else { PoolKind::Avg };
            let op = Pool2d {
                kind,
                pool_size: size,
                strides,
                dilation: [1, 1],
                padding,
                ceil_mode: ceil,
                count_include_pad: !max && ceil,
            };
            push(
                &mut v,
                op,
                &[t(&[1, 3, 7, 8], F32)],
                (-1.0, 1.0),
                if max { EXACT } else { ACCUM },
                none,
            );
        }
        let kind = if max { PoolKind::Max } else { PoolKind::Avg };
        push(
            &mut v,
            GlobalPool2d { kind },
            &[t(&[2, 3, 4, 5], F32)],
            (-1.0, 1.0),
            if max { EXACT } else { ACCUM },
            none,
        );
    }
    push(
        &mut v,
        Dense { units: None },
        &[t(&[3, 20], F32), t(&[7, 20], F32)],
        (-1.0, 1.0),
        ACCUM,
        none,
    );
    push(
        &mut v,
        Dense { units: None },
        &[t(&[1, 64], F32), t(&[40, 64], F32)],
        (-1.0, 1.0),
        ACCUM,
        none,
    );
    push(
        &mut v,
        Dense { units: None },
        &[t(&[2, 5], I64), t(&[3, 5], I64)],
        (-1.0, 1.0),
        EXACT,
        none,
    );
    push(
        &mut v,
        BiasAdd { axis: 1 },
        &[t(&[2, 3, 4], F32), t(&[3], F32)],
        (-1.0, 1.0),
        ARITH,
        none,
    );
    push(
        &mut v,
        BatchFlatten,
        &[t(&[2, 3, 2, 2], I8)],
        (-1.0, 1.0),
        EXACT,
        none,
    );
    for axis in [-1, 0] {
        push(
            &mut v,
            Softmax { axis },
            &[t(&[3, 6], F32)],
            (-2.0, 2.0),
            TRANSC,
            none,
        );
        let p = t(&[if axis == 0 { 3 } else { 6 }], F32);
        let ln = LayerNorm {
            axis,
            epsilon: F64(1e-5),
            center: true,
            scale: true,
        };
        push(
            &mut v,
            ln,
            &[t(&[3, 6], F32), p.clone(), p.clone()],
            (-2.0, 2.0),
            ACCUM,
            none,
        );
        let bn = BatchNorm {
            axis,
            epsilon: F64(1e-3),
            center: true,
            scale: axis == 0,
        };
        let c = if axis == 0 { 3 } else { 6 };
        push(
            &mut v,
            bn,
            &[t(&[3, 6], F32), p.clone(), p.clone(), p.clone(), p.clone()],
            (-1.0, 1.0),
            ACCUM,
            |xs| {
                xs[4] = NDArray::random_uniform(vec![c], F32, 9, 0.1, 2.0);
            },
        );
    }
    for (ta, tb) in [(false, false), (true, true), (false, true)] {
        let a = if ta { [2, 5, 3] } else { [2, 3, 5] };
        let b = if tb { [1, 4, 5] } else { [1, 5, 4] };
        push(
            &mut v,
            BatchMatmul {
                transpose_a: ta,
                transpose_b: tb,
            },
            &[t(&a, F32), t(&b, F32)],
            (-1.0, 1.0),
            ACCUM,
            none,
        );
    }
    push(
        &mut v,
        BatchMatmul {
            transpose_a: false,
            transpose_b: false,
        },
        &[t(&[1, 20, 24], F32), t(&[1, 24, 18], F32)],
        (-1.0, 1.0),
        ACCUM,
        none,
    );
    for d in [F32, I8, I64, U8] {
        let s = [2, 3, 4];
        push(
            &mut v,
            Reshape::new(vec![-1]),
            &[t(&s, d)],
            (-1.0, 1.0),
            EXACT,
            none,
        );
        push(
            &mut v,
            Reshape::new(vec![2, -1]),
            &[t(&s, d)],
            (-1.0, 1.0),
            EXACT,
            none,
        );
        push(
            &mut v,
            Transpose::new(Some(vec![2, 0, 1])),
            &[t(&s, d)],
            (-1.0, 1.0),
            EXACT,
            none,
        );
        push(
            &mut v,
            Transpose::new(None),
            &[t(&s, d)],
            (-1.0, 1.0),
            EXACT,
            none,
        );
        push(
            &mut v,
            Squeeze::new(None),
            &[t(&[2, 1, 3], d)],
            (-1.0, 1.0),
            EXACT,
            none,
        );
        push(
            &mut v,
            ExpandDims {
                axis: 1,
                num_newaxis: 2,
            },
            &[t(&s, d)],
            (-1.0, 1.0),
            EXACT,
            none,
        );
        push(
            &mut v,
            Concatenate::new(1),
            &[Arg::Tuple(vec![tt(&[2, 1, 4], d), tt(&s, d)])],
            (-1.0, 1.0),
            EXACT,
            none,
        );
        push(
            &mut v,
            Split::sections(2, -1),
            &[t(&s, d)],
            (-1.0, 1.0),
            EXACT,
            none,
        );
        push(
            &mut v,
            Split::indices(vec![1, 3], 2),
            &[t(&s, d)],
            (-1.0, 1.0),
            EXACT,
            none,
        );
        let sl = StridedSlice {
            begin: vec![1, -1],
            end: vec![7, 0],
            strides: Some(vec![2, -2]),
            axes: Some(vec![2, 1]),
        };
        push(&mut v, sl, &[t(&[3, 5, 7], d)], (-1.0, 1.0), EXACT, none);
        for (axis, mode) in [
            (None, TakeMode::Clip),
            (Some(1), TakeMode::Wrap),
            (Some(-1), TakeMode::Clip),
        ] {
            push(
                &mut v,
                Take { axis, mode },
                &[t(&s, d), t(&[2, 3], I32)],
                (-1.0, 1.0),
                EXACT,
                |xs| {
                    xs[1] = NDArray::random_uniform(vec![2, 3], I32, 3, -12.0, 12.0);
                },
            );
        }
    }
    v
}
