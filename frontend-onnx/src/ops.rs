//! Per-op conversion: each supported ONNX op (default domain) to kiln graph-IR ops,
//! with the differences between opsets handled where the op is converted (axes and
//! split sizes moving from attributes to inputs, Clip's bounds becoming inputs, ...).
//! Ops that kiln's IR has no op for are built from existing ops only where the result
//! is exact (LeakyRelu as `where`, Gelu through `erf`, Tile and Pad through `take` and
//! `concatenate`, ArgMax through comparisons and a min-reduction). [`SUPPORTED`] lists
//! them; every other op is reported unsupported before conversion starts.

use kiln_ir::op::{self, BinaryKind as B, PoolKind, ReduceKind as R, UnaryKind as U};
use kiln_ir::{DType, ExprId, NDArray};

use crate::convert::{Importer, Node};
use crate::error::{Error, Result};
use crate::narrow::{self, Narrow};
use crate::tensor::dtype_from_onnx;

/// The ONNX op types (default domain) that [`convert`] handles.
pub const SUPPORTED: &[&str] = &[
    "Abs",
    "Acos",
    "Acosh",
    "Add",
    "And",
    "ArgMax",
    "ArgMin",
    "Asin",
    "Asinh",
    "Atan",
    "Atanh",
    "AveragePool",
    "BatchNormalization",
    "BitCast",
    "BitShift",
    "Cast",
    "CastLike",
    "Ceil",
    "Celu",
    "Clip",
    "Concat",
    "Constant",
    "ConstantOfShape",
    "Conv",
    "ConvTranspose",
    "Cos",
    "Cosh",
    "DepthToSpace",
    "Div",
    "Dropout",
    "Elu",
    "Equal",
    "Erf",
    "Exp",
    "Expand",
    "Flatten",
    "Floor",
    "Gather",
    "Gelu",
    "Gemm",
    "GlobalAveragePool",
    "GlobalMaxPool",
    "Greater",
    "GreaterOrEqual",
    "HardSigmoid",
    "HardSwish",
    "Identity",
    "InstanceNormalization",
    "IsInf",
    "IsNaN",
    "LRN",
    "LayerNormalization",
    "LeakyRelu",
    "Less",
    "LessOrEqual",
    "Log",
    "LogSoftmax",
    "LpNormalization",
    "LpPool",
    "MatMul",
    "Max",
    "MaxPool",
    "Mean",
    "Min",
    "Mish",
    "Mod",
    "Mul",
    "Neg",
    "Not",
    "Or",
    "PRelu",
    "Pad",
    "Pow",
    "Range",
    "Reciprocal",
    "ReduceL1",
    "ReduceL2",
    "ReduceLogSum",
    "ReduceLogSumExp",
    "ReduceMax",
    "ReduceMean",
    "ReduceMin",
    "ReduceProd",
    "ReduceSum",
    "ReduceSumSquare",
    "Relu",
    "Reshape",
    "Resize",
    "Round",
    "Selu",
    "Shape",
    "Sigmoid",
    "Sign",
    "Sin",
    "Sinh",
    "Size",
    "Slice",
    "Softmax",
    "Softplus",
    "Softsign",
    "SpaceToDepth",
    "Split",
    "Sqrt",
    "Squeeze",
    "Sub",
    "Sum",
    "Swish",
    "Tan",
    "Tanh",
    "ThresholdedRelu",
    "Tile",
    "Transpose",
    "Unsqueeze",
    "Upsample",
    "Where",
    "Xor",
];

/// `BitShift` as ONNX's reference defines it, exactly: with `w` the width, a shift
/// `y` outside `0..w` gives 0 (a right shift of a negative signed value: -1); otherwise
/// `x << y` is `x * 2^y` wrapping in the dtype, and `x >> y` is `x / 2^y` for unsigned
/// values and the floor of it for signed ones (an arithmetic shift; by `w - 1` it is
/// the sign, as `2^(w-1)` does not fit the signed dtype).
fn bit_shift(imp: &mut Importer, n: &Node) -> Result<ExprId> {
    let x = imp.input(n, 0)?;
    let y = imp.input(n, 1)?;
    let d = imp.dtype(x)?;
    if !d.is_int() {
        return Err(Error::InvalidModel(format!(
            "BitShift on {d}: ONNX defines it for integers"
        )));
    }
    let left = match n.string("direction", "").as_str() {
        "LEFT" => true,
        "RIGHT" => false,
        other => {
            return Err(Error::InvalidModel(format!(
                "BitShift: direction must be LEFT or RIGHT, got `{other}`"
            )));
        }
    };
    let signed_right = !left && !d.is_unsigned();
    let width = (d.size_bytes() * 8) as f64;
    // Shifts that leave only the fill: negative, or the width or more (for a signed
    // right shift, the width minus one: the sign fills every bit).
    let limit = imp.scalar(if signed_right { width - 1.0 } else { width }, d);
    let past = imp.binary(B::GreaterEqual, y, limit)?;
    let zero = imp.scalar(0.0, d);
    let out = if d.is_unsigned() {
        past
    } else {
        let negative = imp.binary(B::Less, y, zero)?;
        imp.binary(B::Maximum, negative, past)?
    };
    let safe = imp.call(op::Where, &[out, zero, y])?;
    let two = imp.scalar(2.0, d);
    let scale = imp.binary(B::Power, two, safe)?;
    let (shifted, fill) = if left {
        (imp.binary(B::Multiply, x, scale)?, zero)
    } else if signed_right {
        // floor(x / s) = (x - floor_mod(x, s)) / s, exact; the fill is the sign.
        let r = imp.binary(B::FloorMod, x, scale)?;
        let t = imp.binary(B::Subtract, x, r)?;
        let q = imp.binary(B::Divide, t, scale)?;
        let is_neg = imp.binary(B::Less, x, zero)?;
        let minus_one = imp.scalar(-1.0, d);
        (q, imp.call(op::Where, &[is_neg, minus_one, zero])?)
    } else {
        (imp.binary(B::Divide, x, scale)?, zero)
    };
    imp.call(op::Where, &[out, fill, shifted])
}

/// Whether [`convert`] handles ONNX op type `op` (default domain): [`SUPPORTED`] here
/// and the ops of [`crate::extra_ops`].
pub(crate) fn is_supported(op: &str) -> bool {
    SUPPORTED.contains(&op)
        || crate::extra_ops::SUPPORTED.contains(&op)
        || crate::control_flow::SUPPORTED.contains(&op)
        || crate::topk::SUPPORTED.contains(&op)
        || crate::recurrent::SUPPORTED.contains(&op)
        || crate::signal::SUPPORTED.contains(&op)
        || crate::rearrange::SUPPORTED.contains(&op)
        || crate::grid_sample::SUPPORTED.contains(&op)
        || crate::roi_align::SUPPORTED.contains(&op)
        || crate::affine_grid::SUPPORTED.contains(&op)
        || crate::bitwise::SUPPORTED.contains(&op)
        || crate::causal_conv::SUPPORTED.contains(&op)
        || crate::linear_attention::SUPPORTED.contains(&op)
        || crate::col2im::SUPPORTED.contains(&op)
        || crate::data_dependent::SUPPORTED.contains(&op)
        || crate::quantized::SUPPORTED.contains(&op)
}

/// Normalises axis `a` into `0..rank`.
pub(crate) fn axis(a: i64, rank: usize) -> Result<usize> {
    let r = rank as i64;
    if a < -r || a >= r {
        return Err(Error::InvalidModel(format!(
            "axis {a} is out of range for rank {rank}"
        )));
    }
    Ok(if a < 0 { a + r } else { a } as usize)
}

/// The numpy broadcast of two shapes.
fn broadcast(a: &[usize], b: &[usize]) -> Result<Vec<usize>> {
    let r = a.len().max(b.len());
    let mut out = vec![0; r];
    for i in 0..r {
        let da = if i + a.len() >= r {
            a[i + a.len() - r]
        } else {
            1
        };
        let db = if i + b.len() >= r {
            b[i + b.len() - r]
        } else {
            1
        };
        out[i] = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => {
                return Err(Error::InvalidModel(format!(
                    "shapes {a:?} and {b:?} do not broadcast"
                )));
            }
        };
    }
    Ok(out)
}

/// An int64 index vector constant.
fn indices(v: Vec<i64>) -> NDArray {
    let n = v.len();
    NDArray::from_vec([n], v).expect("length matches")
}

/// Converts node `n`, returning the expression of each of its outputs in order.
pub(crate) fn convert(imp: &mut Importer, n: &Node) -> Result<Vec<ExprId>> {
    let one = |id: ExprId| Ok(vec![id]);
    match n.op_type {
        // ---- elementwise unary -------------------------------------------------------
        "Relu" => unary(imp, n, U::Relu),
        "Exp" => unary(imp, n, U::Exp),
        "Log" => unary(imp, n, U::Log),
        "Sqrt" => unary(imp, n, U::Sqrt),
        "Tanh" => unary(imp, n, U::Tanh),
        "Sigmoid" => unary(imp, n, U::Sigmoid),
        "Erf" => unary(imp, n, U::Erf),
        "Neg" => unary(imp, n, U::Negative),
        "Abs" => unary(imp, n, U::Abs),
        "Floor" => unary(imp, n, U::Floor),
        "Ceil" => unary(imp, n, U::Ceil),
        "Round" => unary(imp, n, U::Round),
        "Sin" => unary(imp, n, U::Sin),
        "Cos" => unary(imp, n, U::Cos),
        "Tan" => unary(imp, n, U::Tan),
        "Asin" => unary(imp, n, U::Asin),
        "Acos" => unary(imp, n, U::Acos),
        "Atan" => unary(imp, n, U::Atan),
        "Sinh" => unary(imp, n, U::Sinh),
        "Cosh" => unary(imp, n, U::Cosh),
        "Asinh" => unary(imp, n, U::Asinh),
        "Acosh" => unary(imp, n, U::Acosh),
        "Atanh" => unary(imp, n, U::Atanh),
        "IsNaN" => {
            let x = imp.input(n, 0)?;
            one(imp.binary(B::NotEqual, x, x)?)
        }
        "IsInf" => {
            let x = imp.input(n, 0)?;
            let shape = imp.shape(x)?;
            let mut hit = imp.constant(NDArray::full(shape, DType::Bool, 0.0));
            for (attr, v) in [
                ("detect_positive", f64::INFINITY),
                ("detect_negative", f64::NEG_INFINITY),
            ] {
                if n.int(attr, 1) != 0 {
                    let inf = imp.scalar_like(v, x)?;
                    let eq = imp.binary(B::Equal, x, inf)?;
                    hit = imp.binary(B::Maximum, hit, eq)?;
                }
            }
            one(hit)
        }
        "Reciprocal" => {
            let x = imp.input(n, 0)?;
            let c = imp.scalar_like(1.0, x)?;
            one(imp.binary(B::Divide, c, x)?)
        }
        "Identity" => one(imp.input(n, 0)?),
        "Dropout" => dropout(imp, n),
        "Cast" | "CastLike" => one(cast_node(imp, n)?),
        "Sign" => {
            let x = imp.input(n, 0)?;
            let zero = imp.scalar_like(0.0, x)?;
            let pos = imp.scalar_like(1.0, x)?;
            let neg = imp.scalar_like(-1.0, x)?;
            let gt = imp.binary(B::Greater, x, zero)?;
            let lt = imp.binary(B::Less, x, zero)?;
            let inner = imp.select(lt, neg, zero)?;
            let inner = imp.broadcast_to(inner, &imp.shape(x)?)?;
            one(imp.select(gt, pos, inner)?)
        }
        "Not" => {
            let x = imp.input(n, 0)?;
            let f = imp.scalar(0.0, DType::Bool);
            one(imp.binary(B::Equal, x, f)?)
        }
        "And" | "Or" | "Xor" => {
            let a = imp.input(n, 0)?;
            let b = imp.input(n, 1)?;
            let out = match n.op_type {
                "Xor" => imp.binary(B::NotEqual, a, b)?,
                "And" => {
                    let f = imp.scalar(0.0, DType::Bool);
                    let shape = broadcast(&imp.shape(a)?, &imp.shape(b)?)?;
                    let r = imp.select(a, b, f)?;
                    imp.broadcast_to(r, &shape)?
                }
                _ => {
                    let t = imp.scalar(1.0, DType::Bool);
                    let shape = broadcast(&imp.shape(a)?, &imp.shape(b)?)?;
                    let r = imp.select(a, t, b)?;
                    imp.broadcast_to(r, &shape)?
                }
            };
            one(out)
        }
        // ---- activations built from existing ops -----------------------------------
        "LeakyRelu" => {
            let x = imp.input(n, 0)?;
            let alpha = n.float("alpha", 0.01) as f64;
            let zero = imp.scalar_like(0.0, x)?;
            let a = imp.scalar_like(alpha, x)?;
            let gt = imp.binary(B::Greater, x, zero)?;
            let ax = imp.binary(B::Multiply, a, x)?;
            one(imp.select(gt, x, ax)?)
        }
        "PRelu" => {
            let x = imp.input(n, 0)?;
            let mut slope = imp.input(n, 1)?;
            // Before opset 7 a per-channel slope of shape (C) applies along axis 1.
            let (xs, ss) = (imp.shape(x)?, imp.shape(slope)?);
            if n.opset < 7 && ss.len() == 1 && xs.len() > 2 && ss[0] == xs[1] && ss[0] > 1 {
                let mut to = vec![1; xs.len() - 1];
                to[0] = ss[0];
                slope = imp.reshape(slope, &to)?;
            }
            let zero = imp.scalar_like(0.0, x)?;
            let lt = imp.binary(B::Less, x, zero)?;
            let sx = imp.binary(B::Multiply, slope, x)?;
            one(imp.select(lt, sx, x)?)
        }
        "ThresholdedRelu" => {
            let x = imp.input(n, 0)?;
            let alpha = imp.scalar_like(n.float("alpha", 1.0) as f64, x)?;
            let zero = imp.scalar_like(0.0, x)?;
            let gt = imp.binary(B::Greater, x, alpha)?;
            one(imp.select(gt, x, zero)?)
        }
        "Elu" | "Selu" => {
            let x = imp.input(n, 0)?;
            let (alpha, gamma) = if n.op_type == "Elu" {
                (n.float("alpha", 1.0), 1.0)
            } else {
                (n.float("alpha", 1.673_263_2), n.float("gamma", 1.050_701))
            };
            let zero = imp.scalar_like(0.0, x)?;
            let onec = imp.scalar_like(1.0, x)?;
            let a = imp.scalar_like(alpha as f64, x)?;
            let e = imp.unary(U::Exp, x)?;
            let em1 = imp.binary(B::Subtract, e, onec)?;
            let neg = imp.binary(B::Multiply, a, em1)?;
            let gt = imp.binary(B::Greater, x, zero)?;
            let y = imp.select(gt, x, neg)?;
            if gamma == 1.0 {
                one(y)
            } else {
                let g = imp.scalar_like(gamma as f64, x)?;
                one(imp.binary(B::Multiply, g, y)?)
            }
        }
        "Celu" => {
            let x = imp.input(n, 0)?;
            let alpha = n.float("alpha", 1.0) as f64;
            let zero = imp.scalar_like(0.0, x)?;
            let onec = imp.scalar_like(1.0, x)?;
            let a = imp.scalar_like(alpha, x)?;
            let xa = imp.binary(B::Divide, x, a)?;
            let e = imp.unary(U::Exp, xa)?;
            let em1 = imp.binary(B::Subtract, e, onec)?;
            let neg = imp.binary(B::Multiply, a, em1)?;
            let neg = imp.binary(B::Minimum, zero, neg)?;
            let pos = imp.binary(B::Maximum, zero, x)?;
            one(imp.binary(B::Add, pos, neg)?)
        }
        "HardSigmoid" | "HardSwish" => {
            let x = imp.input(n, 0)?;
            let (alpha, beta) = if n.op_type == "HardSigmoid" {
                (n.float("alpha", 0.2) as f64, n.float("beta", 0.5) as f64)
            } else {
                (1.0 / 6.0, 0.5)
            };
            let a = imp.scalar_like(alpha, x)?;
            let b = imp.scalar_like(beta, x)?;
            let ax = imp.binary(B::Multiply, a, x)?;
            let axb = imp.binary(B::Add, ax, b)?;
            let hs = imp.call(
                op::Clip {
                    a_min: kiln_ir::attrs::F64(0.0),
                    a_max: kiln_ir::attrs::F64(1.0),
                },
                &[axb],
            )?;
            if n.op_type == "HardSigmoid" {
                one(hs)
            } else {
                one(imp.binary(B::Multiply, x, hs)?)
            }
        }
        "Softplus" => {
            let x = imp.input(n, 0)?;
            one(softplus(imp, x)?)
        }
        "Softsign" => {
            let x = imp.input(n, 0)?;
            let onec = imp.scalar_like(1.0, x)?;
            let ab = imp.unary(U::Abs, x)?;
            let d = imp.binary(B::Add, onec, ab)?;
            one(imp.binary(B::Divide, x, d)?)
        }
        "Mish" => {
            let x = imp.input(n, 0)?;
            let sp = softplus(imp, x)?;
            let t = imp.unary(U::Tanh, sp)?;
            one(imp.binary(B::Multiply, x, t)?)
        }
        "Swish" => {
            let x = imp.input(n, 0)?;
            let a = imp.scalar_like(n.float("alpha", 1.0) as f64, x)?;
            let ax = imp.binary(B::Multiply, a, x)?;
            let s = imp.unary(U::Sigmoid, ax)?;
            one(imp.binary(B::Multiply, x, s)?)
        }
        "Gelu" => {
            let x = imp.input(n, 0)?;
            let half = imp.scalar_like(0.5, x)?;
            let onec = imp.scalar_like(1.0, x)?;
            let inner = if n.string("approximate", "none") == "tanh" {
                let c = imp.scalar_like((2.0 / std::f64::consts::PI).sqrt(), x)?;
                let k = imp.scalar_like(0.044715, x)?;
                let x2 = imp.binary(B::Multiply, x, x)?;
                let x3 = imp.binary(B::Multiply, x2, x)?;
                let kx3 = imp.binary(B::Multiply, k, x3)?;
                let s = imp.binary(B::Add, x, kx3)?;
                let cs = imp.binary(B::Multiply, c, s)?;
                imp.unary(U::Tanh, cs)?
            } else {
                let r = imp.scalar_like(std::f64::consts::FRAC_1_SQRT_2, x)?;
                let xr = imp.binary(B::Multiply, x, r)?;
                imp.unary(U::Erf, xr)?
            };
            let p = imp.binary(B::Add, onec, inner)?;
            let hx = imp.binary(B::Multiply, half, x)?;
            one(imp.binary(B::Multiply, hx, p)?)
        }
        "Clip" => clip(imp, n),
        // ---- broadcasting binary ------------------------------------------------------
        "Add" => binary(imp, n, B::Add),
        "Sub" => binary(imp, n, B::Subtract),
        "Mul" => binary(imp, n, B::Multiply),
        "Div" => binary(imp, n, B::Divide),
        // fmod=1 is C's fmod (the dividend's sign); fmod=0, integers only in ONNX, is
        // Python's % (the divisor's sign).
        "Mod" if n.int("fmod", 0) != 0 => binary(imp, n, B::TruncMod),
        "Mod" => binary(imp, n, B::FloorMod),
        "Equal" => binary(imp, n, B::Equal),
        "Less" => binary(imp, n, B::Less),
        "LessOrEqual" => binary(imp, n, B::LessEqual),
        "Greater" => binary(imp, n, B::Greater),
        "GreaterOrEqual" => binary(imp, n, B::GreaterEqual),
        "Pow" => {
            let x = imp.input(n, 0)?;
            let y = imp.input(n, 1)?;
            let dx = imp.dtype(x)?;
            let y = cast(imp, y, dx)?;
            one(imp.binary(B::Power, x, y)?)
        }
        "BitShift" => one(bit_shift(imp, n)?),
        "BitCast" => crate::bitcast::convert(imp, n),
        "Max" | "Min" | "Sum" | "Mean" => {
            let kind = match n.op_type {
                "Max" => B::Maximum,
                "Min" => B::Minimum,
                _ => B::Add,
            };
            let mut acc = imp.input(n, 0)?;
            for i in 1..n.num_inputs() {
                let x = imp.input(n, i)?;
                acc = imp.binary(kind, acc, x)?;
            }
            if n.op_type == "Mean" && n.num_inputs() > 1 {
                let c = imp.scalar_like(n.num_inputs() as f64, acc)?;
                acc = imp.binary(B::Divide, acc, c)?;
            }
            one(acc)
        }
        "Where" => {
            let c = imp.input(n, 0)?;
            let x = imp.input(n, 1)?;
            let y = imp.input(n, 2)?;
            one(imp.select(c, x, y)?)
        }
        // ---- neural-network ops -------------------------------------------------------
        "Conv" => conv(imp, n),
        "ConvTranspose" => conv_transpose(imp, n),
        "MaxPool" | "AveragePool" | "LpPool" => pool(imp, n),
        "GlobalAveragePool" | "GlobalMaxPool" => {
            let x = imp.input(n, 0)?;
            let rank = imp.shape(x)?.len();
            let kind = if n.op_type == "GlobalMaxPool" {
                PoolKind::Max
            } else {
                PoolKind::Avg
            };
            if rank == 4 {
                one(imp.call(op::GlobalPool2d { kind }, &[x])?)
            } else {
                let rk = if kind == PoolKind::Max {
                    R::Max
                } else {
                    R::Mean
                };
                one(imp.reduce(rk, x, Some((2..rank as i64).collect()), true)?)
            }
        }
        "BatchNormalization" => {
            if n.int("training_mode", 0) != 0 || n.num_outputs() > 1 && n.opset >= 14 {
                return Err(Error::Unsupported(
                    "BatchNormalization in training mode".into(),
                ));
            }
            let args = (0..5)
                .map(|i| imp.input(n, i))
                .collect::<Result<Vec<_>>>()?;
            let bn = imp.call(
                op::BatchNorm {
                    epsilon: kiln_ir::attrs::F64(n.float("epsilon", 1e-5) as f64),
                    ..op::BatchNorm::default()
                },
                &args,
            )?;
            one(imp.m.tuple_get(bn, 0)?)
        }
        "InstanceNormalization" => {
            let x = imp.input(n, 0)?;
            let scale = imp.input(n, 1)?;
            let bias = imp.input(n, 2)?;
            let shape = imp.shape(x)?;
            let axes: Vec<i64> = (2..shape.len() as i64).collect();
            let (y, _, _) = normalize(imp, x, axes, n.float("epsilon", 1e-5) as f64)?;
            let mut cshape = vec![1; shape.len()];
            if shape.len() >= 2 {
                cshape[1] = shape[1];
            }
            let s = imp.reshape(scale, &cshape[1..])?;
            let s = imp.reshape(s, &cshape)?;
            let b = imp.reshape(bias, &cshape)?;
            let y = imp.binary(B::Multiply, y, s)?;
            one(imp.binary(B::Add, y, b)?)
        }
        "LayerNormalization" => layer_norm(imp, n),
        "LpNormalization" => {
            let x = imp.input(n, 0)?;
            let ax = n.int("axis", -1);
            let norm = match n.int("p", 2) {
                1 => {
                    let a = imp.unary(U::Abs, x)?;
                    imp.reduce(R::Sum, a, Some(vec![ax]), true)?
                }
                2 => {
                    let sq = imp.binary(B::Multiply, x, x)?;
                    let s = imp.reduce(R::Sum, sq, Some(vec![ax]), true)?;
                    imp.unary(U::Sqrt, s)?
                }
                p => return Err(Error::Unsupported(format!("LpNormalization with p={p}"))),
            };
            // A zero norm (all-zero x) divides by 1, giving 0 as ONNX does.
            let zero = imp.scalar_like(0.0, norm)?;
            let onec = imp.scalar_like(1.0, norm)?;
            let is0 = imp.binary(B::Equal, norm, zero)?;
            let norm = imp.select(is0, onec, norm)?;
            one(imp.binary(B::Divide, x, norm)?)
        }
        "LRN" => lrn(imp, n),
        "Gemm" => gemm(imp, n),
        "MatMul" => {
            let a = imp.input(n, 0)?;
            let b = imp.input(n, 1)?;
            one(matmul(imp, a, b)?)
        }
        "Softmax" | "LogSoftmax" => softmax(imp, n),
        // ---- shapes and data movement -------------------------------------------------
        "Reshape" => {
            let x = imp.input(n, 0)?;
            let target = if n.opset < 5 {
                n.ints("shape").unwrap_or_default()
            } else {
                imp.const_ints(n, 1)?
                    .ok_or_else(|| Error::InvalidModel("Reshape needs a shape".into()))?
            };
            let shape = reshape_target(&imp.shape(x)?, &target, n.int("allowzero", 0) != 0)?;
            if shape.contains(&0) {
                // No elements (kiln's `reshape` reads a 0 as "keep this dimension").
                let dt = imp.dtype(x)?;
                return one(imp.constant(NDArray::zeros(shape, dt)));
            }
            one(imp.reshape(x, &shape)?)
        }
        "Flatten" => {
            let x = imp.input(n, 0)?;
            let shape = imp.shape(x)?;
            let mut a = n.int("axis", 1);
            if a < 0 {
                a += shape.len() as i64;
            }
            if a < 0 || a > shape.len() as i64 {
                return Err(Error::InvalidModel(format!(
                    "Flatten axis {} is out of range for rank {}",
                    n.int("axis", 1),
                    shape.len()
                )));
            }
            let a = a as usize;
            let outer = shape[..a].iter().product();
            let inner = shape[a..].iter().product();
            one(imp.reshape(x, &[outer, inner])?)
        }
        "Transpose" => {
            let x = imp.input(n, 0)?;
            let rank = imp.shape(x)?.len() as i64;
            let perm = n.ints("perm").unwrap_or_else(|| (0..rank).rev().collect());
            one(imp.transpose(x, perm)?)
        }
        "Concat" => {
            let mut xs = (0..n.num_inputs())
                .filter(|&i| n.input_name(i).is_some())
                .map(|i| imp.input(n, i))
                .collect::<Result<Vec<_>>>()?;
            // Parts with no elements add nothing (when some part has elements).
            let sizes = xs
                .iter()
                .map(|&x| Ok(imp.shape(x)?.iter().product::<usize>()))
                .collect::<Result<Vec<usize>>>()?;
            if sizes.iter().any(|&s| s > 0) {
                xs = xs
                    .into_iter()
                    .zip(&sizes)
                    .filter(|(_, s)| **s > 0)
                    .map(|(x, _)| x)
                    .collect();
            }
            let t = imp.m.tuple(&xs)?;
            one(imp.call(op::Concatenate::new(n.int("axis", 0)), &[t])?)
        }
        "Split" => split(imp, n),
        "Slice" => slice(imp, n),
        "Gather" => {
            let x = imp.input(n, 0)?;
            let idx = imp.input(n, 1)?;
            check_gather_indices(imp, n, x)?;
            one(imp.call(
                op::Take {
                    axis: Some(n.int("axis", 0)),
                    mode: op::TakeMode::Wrap,
                },
                &[x, idx],
            )?)
        }
        "Squeeze" | "Unsqueeze" => squeeze(imp, n),
        "Expand" => {
            let x = imp.input(n, 0)?;
            let target = imp
                .const_ints(n, 1)?
                .ok_or_else(|| Error::InvalidModel("Expand needs a shape".into()))?;
            let target = to_dims(&target)?;
            let shape = broadcast(&imp.shape(x)?, &target)?;
            one(imp.broadcast_to(x, &shape)?)
        }
        "Tile" => {
            let mut x = imp.input(n, 0)?;
            let reps = imp
                .const_ints(n, 1)?
                .ok_or_else(|| Error::InvalidModel("Tile needs repeats".into()))?;
            let shape = imp.shape(x)?;
            if reps.len() != shape.len() {
                return Err(Error::InvalidModel(format!(
                    "Tile repeats {reps:?} do not match rank {}",
                    shape.len()
                )));
            }
            for (ax, (&r, &d)) in reps.iter().zip(&shape).enumerate() {
                if r == 1 {
                    continue;
                }
                let r = usize::try_from(r)
                    .map_err(|_| Error::InvalidModel(format!("Tile repeat {r} is negative")))?;
                imp.check_alloc("the Tile index list", &[r, d], DType::I64)?;
                let idx = (0..r * d).map(|i| (i % d.max(1)) as i64).collect();
                x = take(imp, x, idx, ax)?;
            }
            one(x)
        }
        "Pad" => pad(imp, n),
        "Resize" | "Upsample" => crate::resize::resize(imp, n),
        "DepthToSpace" | "SpaceToDepth" => depth_space(imp, n),
        // ---- reductions ---------------------------------------------------------------
        "ReduceMean" | "ReduceSum" | "ReduceMax" | "ReduceMin" | "ReduceProd" | "ReduceL1"
        | "ReduceL2" | "ReduceSumSquare" | "ReduceLogSum" | "ReduceLogSumExp" => reduce(imp, n),
        "ArgMax" | "ArgMin" => argmax(imp, n),
        // ---- constants and shapes, folded at import ---------------------------------------
        "Constant" => one(constant(imp, n)?),
        "ConstantOfShape" => {
            let shape = imp.const_ints(n, 0)?.unwrap_or_default();
            let shape = to_dims(&shape)?;
            let value = match n.attr("value").and_then(|a| a.t.as_ref()) {
                Some(t) => crate::tensor::tensor_from_proto(t, "ConstantOfShape value")?,
                None => NDArray::scalar(0.0f32),
            };
            let v = single(&value, "ConstantOfShape value")?;
            one(imp.filled(&shape, value.dtype(), v)?)
        }
        "Shape" => {
            let x = imp.input(n, 0)?;
            let shape: Vec<i64> = imp.shape(x)?.iter().map(|&d| d as i64).collect();
            let r = shape.len() as i64;
            let clamp = |v: i64| if v < 0 { (v + r).max(0) } else { v.min(r) };
            let start = clamp(n.int("start", 0)) as usize;
            let end = clamp(n.int("end", r)) as usize;
            let part = shape[start..end.max(start)].to_vec();
            one(imp.constant(indices(part)))
        }
        "Size" => {
            let x = imp.input(n, 0)?;
            let numel: usize = imp.shape(x)?.iter().product();
            one(imp.constant(NDArray::scalar(numel as i64)))
        }
        "Range" => {
            let vals = (0..3)
                .map(|i| {
                    imp.const_input(n, i)?
                        .ok_or_else(|| Error::InvalidModel("Range needs 3 inputs".into()))
                })
                .collect::<Result<Vec<_>>>()?;
            let dtype = vals[0].dtype();
            let [start, limit, delta] = [
                single(&vals[0], "Range start")?,
                single(&vals[1], "Range limit")?,
                single(&vals[2], "Range delta")?,
            ];
            if delta == 0.0 || !(start.is_finite() && limit.is_finite() && delta.is_finite()) {
                return Err(Error::InvalidModel(format!(
                    "Range({start}, {limit}, {delta}) needs finite values and a non-zero delta"
                )));
            }
            let count = ((limit - start) / delta).ceil().max(0.0);
            if count > (1 << 24) as f64 {
                return Err(Error::Unsupported(format!("Range of {count} elements")));
            }
            let count = count as usize;
            let v = if dtype.is_float() {
                (0..count).map(|i| start + i as f64 * delta).collect()
            } else {
                let (s, d) = (vals[0].to_i64_vec()[0], vals[2].to_i64_vec()[0]);
                (0..count)
                    .map(|i| s.wrapping_add((i as i64).wrapping_mul(d)) as f64)
                    .collect()
            };
            one(imp.constant(NDArray::from_f64([count], dtype, v)?))
        }
        other => crate::extra_ops::convert(imp, n)
            .unwrap_or_else(|| Err(Error::Unsupported(format!("op `{other}`")))),
    }
}

/// An error unless `n` lists exactly `count` inputs (for ops whose ONNX arity is fixed).
fn expect_inputs(n: &Node, count: usize) -> Result<()> {
    if n.num_inputs() != count {
        return Err(Error::InvalidModel(format!(
            "{} takes {count} input(s), the node lists {}",
            n.op_type,
            n.num_inputs()
        )));
    }
    Ok(())
}

fn unary(imp: &mut Importer, n: &Node, kind: U) -> Result<Vec<ExprId>> {
    expect_inputs(n, 1)?;
    let x = imp.input(n, 0)?;
    Ok(vec![imp.unary(kind, x)?])
}

fn binary(imp: &mut Importer, n: &Node, kind: B) -> Result<Vec<ExprId>> {
    expect_inputs(n, 2)?;
    let a = imp.input(n, 0)?;
    let b = imp.input(n, 1)?;
    Ok(vec![imp.binary(kind, a, b)?])
}

/// `Cast` (to the type `to`) and `CastLike` (to input 1's type), narrow types (float8,
/// float4, int4, ...) included: a narrow input is decoded to float32 first, a narrow
/// target encoded with the node's `saturate` (see [`crate::narrow`]).
fn cast_node(imp: &mut Importer, n: &Node) -> Result<ExprId> {
    let mut x = imp.input(n, 0)?;
    if let Some(f) = narrow::input_format(imp, n, 0) {
        x = narrow::decode(imp, x, f)?;
    }
    let to = if n.op_type == "Cast" {
        let code = n.int("to", 0) as i32;
        match Narrow::from_onnx(code) {
            Some(f) => return narrow::encode(imp, x, f, narrow::saturate(n)),
            None => dtype_from_onnx(code)?,
        }
    } else {
        if let Some(f) = narrow::input_format(imp, n, 1) {
            return narrow::encode(imp, x, f, narrow::saturate(n));
        }
        let like = imp.input(n, 1)?;
        imp.dtype(like)?
    };
    cast(imp, x, to)
}

/// `x` cast to `to` (nothing when it already is).
pub(crate) fn cast(imp: &mut Importer, x: ExprId, to: DType) -> Result<ExprId> {
    if imp.dtype(x)? == to {
        return Ok(x);
    }
    imp.call(op::Cast::new(to), &[x])
}

/// `log(1 + exp(x))`.
fn softplus(imp: &mut Importer, x: ExprId) -> Result<ExprId> {
    let onec = imp.scalar_like(1.0, x)?;
    let e = imp.unary(U::Exp, x)?;
    let s = imp.binary(B::Add, e, onec)?;
    imp.unary(U::Log, s)
}

/// Gather's indices, when known at import, must lie in `[-s, s - 1]` for the axis extent
/// `s` (ONNX says out-of-range indices are an error; kiln would wrap them).
fn check_gather_indices(imp: &Importer, n: &Node, x: ExprId) -> Result<()> {
    let Some(indices) = n.input_name(1).and_then(|name| imp.known(name)) else {
        return Ok(());
    };
    let shape = imp.shape(x)?;
    let a = axis(n.int("axis", 0), shape.len())?;
    let s = shape[a] as i64;
    if let Some(bad) = indices.to_i64_vec().into_iter().find(|&i| i < -s || i >= s) {
        return Err(Error::InvalidModel(format!(
            "Gather index {bad} is out of range for axis {a} of extent {s}"
        )));
    }
    Ok(())
}

/// The one value of a tensor that must hold exactly one (a scalar input such as Clip's
/// `min`); `what` names it in the error.
fn single(t: &NDArray, what: &str) -> Result<f64> {
    match t.to_f64_vec().as_slice() {
        [v] => Ok(*v),
        vs => Err(Error::InvalidModel(format!(
            "{what} must hold one value, it holds {}",
            vs.len()
        ))),
    }
}

/// Non-negative dims from a list of integers.
fn to_dims(v: &[i64]) -> Result<Vec<usize>> {
    v.iter()
        .map(|&d| {
            usize::try_from(d)
                .map_err(|_| Error::InvalidModel(format!("dimension {d} is negative")))
        })
        .collect()
}

/// Picks `idx` along axis `ax` of `x`.
fn take(imp: &mut Importer, x: ExprId, idx: Vec<i64>, ax: usize) -> Result<ExprId> {
    let i = imp.constant(indices(idx));
    imp.call(
        op::Take {
            axis: Some(ax as i64),
            mode: op::TakeMode::Clip,
        },
        &[x, i],
    )
}

fn dropout(imp: &mut Importer, n: &Node) -> Result<Vec<ExprId>> {
    let x = imp.input(n, 0)?;
    if n.opset < 7 && n.int("is_test", 0) == 0 {
        return Err(Error::Unsupported("Dropout with is_test=0".into()));
    }
    // training_mode must be known at import; in training mode only a zero ratio is
    // deterministic (nothing is dropped).
    let training = imp
        .const_input(n, 2)?
        .is_some_and(|t| t.to_f64_vec().first().is_some_and(|&v| v != 0.0));
    if training {
        let ratio = match imp.const_input(n, 1)? {
            Some(t) => t.to_f64_vec().first().copied().unwrap_or(0.5),
            None => 0.5,
        };
        if ratio != 0.0 {
            return Err(Error::Unsupported(format!(
                "Dropout in training mode with ratio {ratio} (random)"
            )));
        }
    }
    let shape = imp.shape(x)?;
    let mask = imp.constant(NDArray::full(shape, DType::Bool, 1.0));
    Ok(vec![x, mask])
}

fn clip(imp: &mut Importer, n: &Node) -> Result<Vec<ExprId>> {
    let x = imp.input(n, 0)?;
    let (lo, hi) = if n.opset < 11 {
        (
            Some(n.float("min", f32::NEG_INFINITY) as f64),
            Some(n.float("max", f32::INFINITY) as f64),
        )
    } else {
        let lo = imp
            .const_input(n, 1)?
            .map(|t| single(&t, "Clip min"))
            .transpose()?;
        let hi = imp
            .const_input(n, 2)?
            .map(|t| single(&t, "Clip max"))
            .transpose()?;
        (lo, hi)
    };
    let mut y = x;
    if let Some(lo) = lo
        && lo > f64::NEG_INFINITY
    {
        let c = imp.scalar_like(lo, x)?;
        y = imp.binary(B::Maximum, y, c)?;
    }
    if let Some(hi) = hi
        && hi < f64::INFINITY
    {
        let c = imp.scalar_like(hi, x)?;
        y = imp.binary(B::Minimum, y, c)?;
    }
    Ok(vec![y])
}

/// Begin/end padding per spatial axis from `pads`/`auto_pad` for a window op.
fn window_pads(
    n: &Node,
    spatial: &[usize],
    kernel: &[usize],
    strides: &[usize],
    dilations: &[usize],
) -> Result<Vec<(usize, usize)>> {
    let k = spatial.len();
    match n.string("auto_pad", "NOTSET").as_str() {
        "NOTSET" => {
            let pads = n.ints("pads").unwrap_or_else(|| vec![0; 2 * k]);
            if pads.len() != 2 * k || pads.iter().any(|&p| p < 0) {
                return Err(Error::InvalidModel(format!(
                    "pads {pads:?} do not fit {k} spatial axes"
                )));
            }
            Ok((0..k)
                .map(|i| (pads[i] as usize, pads[i + k] as usize))
                .collect())
        }
        "VALID" => Ok(vec![(0, 0); k]),
        mode @ ("SAME_UPPER" | "SAME_LOWER") => Ok((0..k)
            .map(|i| {
                let out = spatial[i].div_ceil(strides[i]);
                let eff = dilations[i] * (kernel[i] - 1) + 1;
                let total = ((out.max(1) - 1) * strides[i] + eff).saturating_sub(spatial[i]);
                let small = total / 2;
                if mode == "SAME_UPPER" {
                    (small, total - small)
                } else {
                    (total - small, small)
                }
            })
            .collect()),
        other => Err(Error::InvalidModel(format!("unknown auto_pad `{other}`"))),
    }
}

/// A list attribute of `k` positive integers, defaulting to ones.
fn spatial_attr(n: &Node, name: &str, k: usize) -> Result<Vec<usize>> {
    let v = n.ints(name).unwrap_or_else(|| vec![1; k]);
    if v.len() != k || v.iter().any(|&s| s < 1) {
        return Err(Error::InvalidModel(format!(
            "`{name}` {v:?} must hold {k} positive values"
        )));
    }
    Ok(v.iter().map(|&s| s as usize).collect())
}

/// Views a rank-3 `(N, C, L)` tensor as `(N, C, 1, L)`; rank 4 passes. Returns the
/// view and whether it was lifted.
fn lift_1d(imp: &mut Importer, x: ExprId, what: &str) -> Result<(ExprId, bool)> {
    let s = imp.shape(x)?;
    match s.len() {
        4 => Ok((x, false)),
        3 => Ok((imp.reshape(x, &[s[0], s[1], 1, s[2]])?, true)),
        r => Err(Error::Unsupported(format!(
            "{what} over {} spatial axes (kiln has 1-D and 2-D)",
            r.saturating_sub(2)
        ))),
    }
}

/// A 3-D convolution as the sum over the kernel's depth taps `kd` of 2-D convolutions:
/// tap `kd` convolves, for every output depth `d`, the input depth slice
/// `d * stride + kd * dilation` (of the depth-padded input, zeros outside) with the
/// kernel's slice `kd`, all output depths at once (folded into the batch).
fn conv3d(
    imp: &mut Importer,
    n: &Node,
    [x, w]: [ExprId; 2],
    bias: Option<ExprId>,
    strides: &[usize],
    dilations: &[usize],
    pads: &[(usize, usize)],
) -> Result<Vec<ExprId>> {
    let xs = imp.shape(x)?;
    let ws = imp.shape(w)?;
    let (nb, c, d, h, wd) = (xs[0], xs[1], xs[2], xs[3], xs[4]);
    let (o, kd) = (ws[0], ws[2]);
    let (sd, dd, (pb, pe)) = (strides[0], dilations[0], pads[0]);
    let eff = dd * (kd - 1) + 1;
    if d + pb + pe < eff {
        return Err(Error::InvalidModel(format!(
            "Conv kernel depth {kd} (dilation {dd}) exceeds the padded input depth"
        )));
    }
    let dout = (d + pb + pe - eff) / sd + 1;
    let group = usize::try_from(n.int("group", 1))
        .map_err(|_| Error::InvalidModel(format!("group {}", n.int("group", 1))))?;
    // (N, D + pads, C, H, W): depth next to the batch, zero-padded.
    let mut xt = imp.transpose(x, vec![0, 2, 1, 3, 4])?;
    let dt = imp.dtype(x)?;
    if pb + pe > 0 {
        let mut parts = vec![];
        if pb > 0 {
            parts.push(imp.constant(NDArray::zeros(vec![nb, pb, c, h, wd], dt)));
        }
        parts.push(xt);
        if pe > 0 {
            parts.push(imp.constant(NDArray::zeros(vec![nb, pe, c, h, wd], dt)));
        }
        let t = imp.m.tuple(&parts)?;
        xt = imp.call(op::Concatenate::new(1), &[t])?;
    }
    let mut acc: Option<ExprId> = None;
    for tap in 0..kd {
        let idx = (0..dout).map(|j| (j * sd + tap * dd) as i64).collect();
        let slab = take(imp, xt, idx, 1)?;
        let slab = imp.reshape(slab, &[nb * dout, c, h, wd])?;
        let wk = take(imp, w, vec![tap as i64], 2)?;
        let wk = imp.reshape(wk, &[o, ws[1], ws[3], ws[4]])?;
        let y = imp.call(
            op::Conv2d {
                strides: [strides[1], strides[2]],
                padding: [pads[1].0, pads[2].0, pads[1].1, pads[2].1],
                dilation: [dilations[1], dilations[2]],
                groups: group,
                ..op::Conv2d::default()
            },
            &[slab, wk],
        )?;
        acc = Some(match acc {
            Some(a) => imp.binary(B::Add, a, y)?,
            None => y,
        });
    }
    let y = acc.ok_or_else(|| Error::InvalidModel("Conv kernel with no depth".into()))?;
    let s = imp.shape(y)?;
    let y = imp.reshape(y, &[nb, dout, o, s[2], s[3]])?;
    let mut y = imp.transpose(y, vec![0, 2, 1, 3, 4])?;
    if let Some(b) = bias {
        y = imp.call(op::BiasAdd { axis: 1 }, &[y, b])?;
    }
    Ok(vec![y])
}

fn conv(imp: &mut Importer, n: &Node) -> Result<Vec<ExprId>> {
    let x = imp.input(n, 0)?;
    let w = imp.input(n, 1)?;
    let b = imp.opt_input(n, 2)?;
    conv_of(imp, n, x, w, b)
}

/// The convolution of `x` by `w` with `n`'s Conv attributes (strides, pads, dilations,
/// group), plus `bias` on the channel axis when given: Conv and the quantized
/// convolutions share it.
pub(crate) fn conv_of(
    imp: &mut Importer,
    n: &Node,
    x: ExprId,
    w: ExprId,
    bias: Option<ExprId>,
) -> Result<Vec<ExprId>> {
    let xs = imp.shape(x)?;
    let ws = imp.shape(w)?;
    if xs.len() < 3 || ws.len() != xs.len() {
        return Err(Error::Unsupported(format!(
            "Conv with data {xs:?} and weight {ws:?}"
        )));
    }
    let k = xs.len() - 2;
    let strides = spatial_attr(n, "strides", k)?;
    let dilations = spatial_attr(n, "dilations", k)?;
    let pads = window_pads(n, &xs[2..], &ws[2..], &strides, &dilations)?;
    if k == 3 {
        return conv3d(imp, n, [x, w], bias, &strides, &dilations, &pads);
    }
    if k > 3 {
        return Err(Error::Unsupported(format!(
            "Conv over {k} spatial axes (kiln has 1-D, 2-D and 3-D)"
        )));
    }
    let (x4, lifted) = lift_1d(imp, x, "Conv")?;
    let w4 = if lifted {
        imp.reshape(w, &[ws[0], ws[1], 1, ws[2]])?
    } else {
        w
    };
    let (strides, dilations, padding) = if lifted {
        (
            [1, strides[0]],
            [1, dilations[0]],
            [0, pads[0].0, 0, pads[0].1],
        )
    } else {
        (
            [strides[0], strides[1]],
            [dilations[0], dilations[1]],
            [pads[0].0, pads[1].0, pads[0].1, pads[1].1],
        )
    };
    let group = n.int("group", 1);
    let conv = op::Conv2d {
        strides,
        padding,
        dilation: dilations,
        groups: usize::try_from(group)
            .map_err(|_| Error::InvalidModel(format!("group {group}")))?,
        ..op::Conv2d::default()
    };
    conv_with_bias(imp, conv, x4, w4, bias, lifted)
}

/// `conv(x, w)`, plus the node's optional bias (input 2) on the channel axis; a 1-D
/// convolution `lifted` to 2-D (a unit height axis) drops that axis again.
fn conv_with_bias(
    imp: &mut Importer,
    conv: op::Conv2d,
    x: ExprId,
    w: ExprId,
    bias: Option<ExprId>,
    lifted: bool,
) -> Result<Vec<ExprId>> {
    let mut y = imp.call(conv, &[x, w])?;
    if let Some(b) = bias {
        y = imp.call(op::BiasAdd { axis: 1 }, &[y, b])?;
    }
    if lifted {
        let s = imp.shape(y)?;
        y = imp.reshape(y, &[s[0], s[1], s[3]])?;
    }
    Ok(vec![y])
}

/// `ConvTranspose` as a convolution: the input with `stride - 1` zeros inserted between
/// elements, padded by `dilation * (kernel - 1) - pads` (the end also by
/// `output_padding` and whatever `output_shape` adds; negative padding crops), convolved
/// at stride 1 with the kernel flipped spatially and its in/out channels swapped per
/// group. Pads, `auto_pad` and `output_shape` follow ONNX's reference implementation.
fn conv_transpose(imp: &mut Importer, n: &Node) -> Result<Vec<ExprId>> {
    let x = imp.input(n, 0)?;
    let w = imp.input(n, 1)?;
    let xs = imp.shape(x)?;
    let ws = imp.shape(w)?;
    if xs.len() < 3 || ws.len() != xs.len() {
        return Err(Error::Unsupported(format!(
            "ConvTranspose with data {xs:?} and weight {ws:?}"
        )));
    }
    let k = xs.len() - 2;
    let group = usize::try_from(n.int("group", 1))
        .ok()
        .filter(|&g| g >= 1 && xs[1] % g == 0 && ws[0] == xs[1])
        .ok_or_else(|| {
            Error::InvalidModel(format!(
                "ConvTranspose group {} for data {xs:?} and weight {ws:?}",
                n.int("group", 1)
            ))
        })?;
    let strides = spatial_attr(n, "strides", k)?;
    let dilations = spatial_attr(n, "dilations", k)?;
    let out_pad = n.ints("output_padding").unwrap_or_else(|| vec![0; k]);
    let out_shape = n
        .ints("output_shape")
        .map(|v| v[v.len().saturating_sub(k)..].to_vec());
    let auto = n.string("auto_pad", "NOTSET");
    let same = matches!(auto.as_str(), "SAME_UPPER" | "SAME_LOWER");
    let pads = n.ints("pads");
    if out_pad.len() != k
        || out_shape.as_ref().is_some_and(|o| o.len() != k)
        || pads.as_ref().is_some_and(|p| p.len() != 2 * k)
    {
        return Err(Error::InvalidModel(format!(
            "ConvTranspose output_padding {out_pad:?}, output_shape {out_shape:?} or pads \
             {pads:?} do not fit {k} spatial axes"
        )));
    }
    // Per spatial axis: the padding before and after the zero-inserted input.
    let mut conv_pads = vec![];
    for i in 0..k {
        let (inp, s, d) = (xs[i + 2] as i64, strides[i] as i64, dilations[i] as i64);
        let eff = d * (ws[i + 2] as i64 - 1) + 1;
        let natural = s * (inp - 1) + out_pad[i] + eff;
        // The leading pad and the output extent (which fixes the trailing pad).
        let (pb, out) = match &pads {
            None if same => {
                let out = out_shape.as_ref().map_or(inp * s, |o| o[i]);
                let total = natural - out;
                let (lo, hi) = (total / 2, total - total / 2);
                (if auto == "SAME_UPPER" { lo } else { hi }, out)
            }
            _ => {
                let (pb, pe) = pads.as_ref().map_or((0, 0), |p| (p[i], p[i + k]));
                (pb, out_shape.as_ref().map_or(natural - pb - pe, |o| o[i]))
            }
        };
        if out < 1 {
            return Err(Error::InvalidModel(format!(
                "ConvTranspose output extent {out} on spatial axis {i}"
            )));
        }
        let up = (inp - 1) * s + 1;
        let begin = eff - 1 - pb;
        conv_pads.push((begin, out - up - begin + eff - 1));
    }
    let (mut y, lifted) = lift_1d(imp, x, "ConvTranspose")?;
    let off = if lifted { 1 } else { 0 };
    // Zero insertion and cropping of the lifted 4-D input, axis by axis.
    let mut padding = [0usize; 4];
    for i in 0..k {
        let a = 2 + off + i;
        let s = strides[i];
        if s > 1 {
            let sh = imp.shape(y)?;
            let mut one = sh.clone();
            one.insert(a + 1, 1);
            let y1 = imp.reshape(y, &one)?;
            let mut zs = one.clone();
            zs[a + 1] = s - 1;
            let dt = imp.dtype(y)?;
            imp.check_alloc("the ConvTranspose zero insertion", &zs, dt)?;
            imp.check_alloc("the ConvTranspose index list", &[sh[a], s], DType::I64)?;
            let zeros = imp.filled(&zs, dt, 0.0)?;
            let t = imp.m.tuple(&[y1, zeros])?;
            let cat = imp.call(op::Concatenate::new((a + 1) as i64), &[t])?;
            let mut flat = sh.clone();
            flat[a] *= s;
            let cat = imp.reshape(cat, &flat)?;
            y = take(imp, cat, (0..((sh[a] - 1) * s + 1) as i64).collect(), a)?;
        }
        let (b, e) = conv_pads[i];
        if b < 0 || e < 0 {
            let len = imp.shape(y)?[a] as i64;
            let (lo, hi) = ((-b).max(0), len - (-e).max(0));
            if lo >= hi {
                return Err(Error::Unsupported(format!(
                    "ConvTranspose whose pads crop away spatial axis {i}"
                )));
            }
            y = take(imp, y, (lo..hi).collect(), a)?;
        }
        padding[off + i] = b.max(0) as usize;
        padding[2 + off + i] = e.max(0) as usize;
    }
    // The kernel (C_in, C_out / g, k...) as a convolution's (C_out, C_in / g, k...),
    // flipped along every spatial axis.
    let (ci, co_g) = (ws[0], ws[1]);
    let ci_g = ci / group;
    let kern: Vec<usize> = if lifted {
        vec![1, ws[2]]
    } else {
        vec![ws[2], ws[3]]
    };
    let w5 = imp.reshape(w, &[group, ci_g, co_g, kern[0], kern[1]])?;
    let w5 = imp.transpose(w5, vec![0, 2, 1, 3, 4])?;
    let mut wc = imp.reshape(w5, &[group * co_g, ci_g, kern[0], kern[1]])?;
    for (j, &kk) in kern.iter().enumerate() {
        if kk > 1 {
            wc = take(imp, wc, (0..kk as i64).rev().collect(), 2 + j)?;
        }
    }
    let dil = if lifted {
        [1, dilations[0]]
    } else {
        [dilations[0], dilations[1]]
    };
    let conv = op::Conv2d {
        strides: [1, 1],
        padding,
        dilation: dil,
        groups: group,
        ..op::Conv2d::default()
    };
    let b = imp.opt_input(n, 2)?;
    conv_with_bias(imp, conv, y, wc, b, lifted)
}

fn pool(imp: &mut Importer, n: &Node) -> Result<Vec<ExprId>> {
    if n.num_outputs() > 1 && !n.proto.output[1].is_empty() {
        return Err(Error::Unsupported("MaxPool's Indices output".into()));
    }
    let mut x = imp.input(n, 0)?;
    let xs = imp.shape(x)?;
    if xs.len() < 3 {
        return Err(Error::InvalidModel(format!("pooling over data {xs:?}")));
    }
    if xs.len() > 5 {
        return Err(Error::Unsupported(format!(
            "{} over {} spatial axes (kiln has 1-D, 2-D and 3-D)",
            n.op_type,
            xs.len() - 2
        )));
    }
    // LpPool: (sum of |x|^p over the window)^(1/p), the sum an average over the whole
    // window (padding adds |0|^p = 0) times its size.
    let lp = (n.op_type == "LpPool").then(|| n.int("p", 2) as f64);
    if let Some(p) = lp {
        let a = imp.unary(U::Abs, x)?;
        x = if p == 2.0 {
            imp.binary(B::Multiply, a, a)?
        } else {
            let pc = imp.scalar_like(p, x)?;
            imp.binary(B::Power, a, pc)?
        };
    }
    let k = xs.len() - 2;
    let kernel = n
        .ints("kernel_shape")
        .ok_or_else(|| Error::InvalidModel("kernel_shape is required".into()))?;
    let kernel = spatial_attr_vals(&kernel, k, "kernel_shape")?;
    let strides = spatial_attr(n, "strides", k)?;
    let dilations = spatial_attr(n, "dilations", k)?;
    let pads = window_pads(n, &xs[2..], &kernel, &strides, &dilations)?;
    let kind = if n.op_type == "MaxPool" {
        PoolKind::Max
    } else {
        PoolKind::Avg
    };
    let ceil = n.int("ceil_mode", 0) != 0;
    let include_pad = lp.is_some() || n.int("count_include_pad", 0) != 0;
    // A pooling over the two spatial axes of a 4-D tensor, axis i of the window
    // attributes on each.
    let pool2 = |imp: &mut Importer, x4: ExprId, ax: [Option<usize>; 2]| {
        let get = |i: Option<usize>| match i {
            Some(i) => (kernel[i], strides[i], dilations[i], pads[i]),
            None => (1, 1, 1, (0, 0)),
        };
        let (a, b) = (get(ax[0]), get(ax[1]));
        imp.call(
            op::Pool2d {
                kind,
                pool_size: [a.0, b.0],
                strides: [a.1, b.1],
                dilation: [a.2, b.2],
                padding: [a.3.0, b.3.0, a.3.1, b.3.1],
                ceil_mode: ceil,
                count_include_pad: include_pad,
            },
            &[x4],
        )
    };
    let mut y = match k {
        1 => {
            let x4 = imp.reshape(x, &[xs[0], xs[1], 1, xs[2]])?;
            let y = pool2(imp, x4, [None, Some(0)])?;
            let s = imp.shape(y)?;
            imp.reshape(y, &[s[0], s[1], s[3]])?
        }
        2 => pool2(imp, x, [Some(0), Some(1)])?,
        _ => {
            // Separable: over (H, W) with depth folded into channels, then over D with
            // (H, W) flattened. Max of maxes is the max; for averages the divisor (the
            // window size, or the count of non-padding positions) is the product of the
            // per-axis ones, so the average of averages is the average.
            let x4 = imp.reshape(x, &[xs[0], xs[1] * xs[2], xs[3], xs[4]])?;
            let y = pool2(imp, x4, [Some(1), Some(2)])?;
            let s = imp.shape(y)?;
            let y = imp.reshape(y, &[xs[0], xs[1], xs[2], s[2] * s[3]])?;
            let y = pool2(imp, y, [Some(0), None])?;
            let d = imp.shape(y)?[2];
            imp.reshape(y, &[xs[0], xs[1], d, s[2], s[3]])?
        }
    };
    if ceil {
        // ONNX (as PyTorch) drops a last window that would start in the end padding;
        // kiln's ceil mode (TVM's) keeps it, so slice it off.
        for i in 0..k {
            let a = 2 + i;
            let (pb, pe) = pads[i];
            let eff = dilations[i] * (kernel[i] - 1) + 1;
            let span = (xs[2 + i] + pb + pe).saturating_sub(eff);
            let mut out = span.div_ceil(strides[i]) + 1;
            if (out - 1) * strides[i] >= xs[2 + i] + pb {
                out -= 1;
            }
            if imp.shape(y)?[a] > out {
                y = take(imp, y, (0..out as i64).collect(), a)?;
            }
        }
    }
    if let Some(p) = lp {
        let area = imp.scalar_like(kernel.iter().product::<usize>() as f64, y)?;
        y = imp.binary(B::Multiply, y, area)?;
        y = if p == 2.0 {
            imp.unary(U::Sqrt, y)?
        } else {
            let inv = imp.scalar_like(1.0 / p, y)?;
            imp.binary(B::Power, y, inv)?
        };
    }
    Ok(vec![y])
}

fn spatial_attr_vals(v: &[i64], k: usize, name: &str) -> Result<Vec<usize>> {
    if v.len() != k || v.iter().any(|&s| s < 1) {
        return Err(Error::InvalidModel(format!(
            "`{name}` {v:?} must hold {k} positive values"
        )));
    }
    Ok(v.iter().map(|&s| s as usize).collect())
}

/// `(x - mean) / sqrt(var + eps)` over `axes`, with the mean and `1/sqrt(var + eps)`.
fn normalize(
    imp: &mut Importer,
    x: ExprId,
    axes: Vec<i64>,
    eps: f64,
) -> Result<(ExprId, ExprId, ExprId)> {
    let mean = imp.reduce(R::Mean, x, Some(axes.clone()), true)?;
    let d = imp.binary(B::Subtract, x, mean)?;
    let d2 = imp.binary(B::Multiply, d, d)?;
    let var = imp.reduce(R::Mean, d2, Some(axes), true)?;
    let e = imp.scalar_like(eps, x)?;
    let ve = imp.binary(B::Add, var, e)?;
    let inv = imp.unary(U::Rsqrt, ve)?;
    let y = imp.binary(B::Multiply, d, inv)?;
    Ok((y, mean, inv))
}

fn layer_norm(imp: &mut Importer, n: &Node) -> Result<Vec<ExprId>> {
    let x = imp.input(n, 0)?;
    let scale = imp.input(n, 1)?;
    let bias = imp.opt_input(n, 2)?;
    let shape = imp.shape(x)?;
    let r = shape.len();
    let a = axis(n.int("axis", -1), r)?;
    let eps = n.float("epsilon", 1e-5) as f64;
    let last = shape.last().copied().unwrap_or(0);
    let simple = a + 1 == r
        && n.num_outputs() == 1
        && imp.shape(scale)? == [last]
        && match bias {
            Some(b) => imp.shape(b)? == [last],
            None => true,
        };
    if simple {
        let b = match bias {
            Some(b) => b,
            None => {
                let d = imp.dtype(x)?;
                imp.constant(NDArray::zeros([last], d))
            }
        };
        let y = imp.call(
            op::LayerNorm {
                axis: -1,
                epsilon: kiln_ir::attrs::F64(eps),
                ..op::LayerNorm::default()
            },
            &[x, scale, b],
        )?;
        return Ok(vec![y]);
    }
    let axes: Vec<i64> = (a as i64..r as i64).collect();
    let (y, mean, inv) = normalize(imp, x, axes, eps)?;
    let mut y = imp.binary(B::Multiply, y, scale)?;
    if let Some(b) = bias {
        y = imp.binary(B::Add, y, b)?;
    }
    Ok(vec![y, mean, inv])
}

fn lrn(imp: &mut Importer, n: &Node) -> Result<Vec<ExprId>> {
    let x = imp.input(n, 0)?;
    let shape = imp.shape(x)?;
    if shape.len() < 3 {
        return Err(Error::InvalidModel(format!("LRN over data {shape:?}")));
    }
    let size = n.int("size", 0);
    if size < 1 {
        return Err(Error::InvalidModel(format!("LRN size {size}")));
    }
    let size = size as usize;
    let (alpha, beta, bias) = (
        n.float("alpha", 1e-4) as f64,
        n.float("beta", 0.75) as f64,
        n.float("bias", 1.0) as f64,
    );
    let rest: usize = shape[2..].iter().product();
    let sq = imp.binary(B::Multiply, x, x)?;
    let sq = imp.reshape(sq, &[shape[0], 1, shape[1], rest])?;
    let (lo, hi) = ((size - 1) / 2, (size - 1).div_ceil(2));
    let avg = imp.call(
        op::Pool2d {
            padding: [lo, 0, hi, 0],
            count_include_pad: true,
            ..op::Pool2d::new(PoolKind::Avg, [size, 1])
        },
        &[sq],
    )?;
    let avg = imp.reshape(avg, &shape)?;
    let a = imp.scalar_like(alpha, x)?;
    let b = imp.scalar_like(bias, x)?;
    let be = imp.scalar_like(beta, x)?;
    let t = imp.binary(B::Multiply, a, avg)?;
    let t = imp.binary(B::Add, b, t)?;
    let t = imp.binary(B::Power, t, be)?;
    Ok(vec![imp.binary(B::Divide, x, t)?])
}

fn gemm(imp: &mut Importer, n: &Node) -> Result<Vec<ExprId>> {
    let mut a = imp.input(n, 0)?;
    let mut b = imp.input(n, 1)?;
    if n.int("transA", 0) != 0 {
        a = imp.transpose(a, vec![1, 0])?;
    }
    // dense wants the weight as (N, K).
    if n.int("transB", 0) == 0 {
        b = imp.transpose(b, vec![1, 0])?;
    }
    let mut y = imp.call(op::Dense::default(), &[a, b])?;
    let alpha = n.float("alpha", 1.0) as f64;
    if alpha != 1.0 {
        let s = imp.scalar_like(alpha, y)?;
        y = imp.binary(B::Multiply, y, s)?;
    }
    if let Some(mut c) = imp.opt_input(n, 2)? {
        let beta = n.float("beta", 1.0) as f64;
        if beta != 1.0 {
            let s = imp.scalar_like(beta, c)?;
            c = imp.binary(B::Multiply, c, s)?;
        }
        y = imp.binary(B::Add, y, c)?;
    }
    Ok(vec![y])
}

/// numpy `matmul`: 1-D operands promoted and demoted, batch dimensions broadcast.
pub(crate) fn matmul(imp: &mut Importer, a: ExprId, b: ExprId) -> Result<ExprId> {
    let (sa, sb) = (imp.shape(a)?, imp.shape(b)?);
    if sa.is_empty() || sb.is_empty() {
        return Err(Error::InvalidModel("MatMul of a scalar".into()));
    }
    let a = if sa.len() == 1 {
        imp.reshape(a, &[1, sa[0]])?
    } else {
        a
    };
    let b = if sb.len() == 1 {
        imp.reshape(b, &[sb[0], 1])?
    } else {
        b
    };
    let (ma, mb) = (imp.shape(a)?, imp.shape(b)?);
    let (m, k) = (ma[ma.len() - 2], ma[ma.len() - 1]);
    let nn = mb[mb.len() - 1];
    let y = if mb.len() == 2 {
        let rows: usize = ma[..ma.len() - 1].iter().product();
        let a2 = imp.reshape(a, &[rows, k])?;
        let bt = imp.transpose(b, vec![1, 0])?;
        let y = imp.call(op::Dense::default(), &[a2, bt])?;
        let mut out = ma[..ma.len() - 1].to_vec();
        out.push(nn);
        imp.reshape(y, &out)?
    } else {
        let batch = broadcast(&ma[..ma.len() - 2], &mb[..mb.len() - 2])?;
        let bn: usize = batch.iter().product();
        let mut full_a = batch.clone();
        full_a.extend([m, k]);
        let mut full_b = batch.clone();
        full_b.extend([mb[mb.len() - 2], nn]);
        let a3 = if ma[..ma.len() - 2].iter().product::<usize>() == 1 {
            imp.reshape(a, &[1, m, k])?
        } else {
            let a = imp.broadcast_to(a, &full_a)?;
            imp.reshape(a, &[bn, m, k])?
        };
        let b3 = if mb[..mb.len() - 2].iter().product::<usize>() == 1 {
            imp.reshape(b, &[1, mb[mb.len() - 2], nn])?
        } else {
            let b = imp.broadcast_to(b, &full_b)?;
            imp.reshape(b, &[bn, mb[mb.len() - 2], nn])?
        };
        let y = imp.call(
            op::BatchMatmul {
                transpose_a: false,
                transpose_b: false,
            },
            &[a3, b3],
        )?;
        let mut out = batch;
        out.extend([m, nn]);
        imp.reshape(y, &out)?
    };
    let mut out = imp.shape(y)?;
    let r = out.len();
    if sb.len() == 1 {
        out.remove(r - 1);
    }
    if sa.len() == 1 {
        out.remove(r - 2);
    }
    imp.reshape(y, &out)
}

fn softmax(imp: &mut Importer, n: &Node) -> Result<Vec<ExprId>> {
    let x = imp.input(n, 0)?;
    let shape = imp.shape(x)?;
    let r = shape.len();
    let log = n.op_type == "LogSoftmax";
    let (x2, ax) = if n.opset < 13 {
        let a = n.int("axis", 1);
        let a = if a < 0 { a + r as i64 } else { a };
        if a < 0 || a > r as i64 {
            return Err(Error::InvalidModel(format!("axis {a} for rank {r}")));
        }
        let a = a as usize;
        let outer = shape[..a].iter().product();
        let inner = shape[a..].iter().product();
        (imp.reshape(x, &[outer, inner])?, -1)
    } else {
        (x, n.int("axis", -1))
    };
    let y = if log {
        let mx = imp.reduce(R::Max, x2, Some(vec![ax]), true)?;
        let s = imp.binary(B::Subtract, x2, mx)?;
        let e = imp.unary(U::Exp, s)?;
        let sum = imp.reduce(R::Sum, e, Some(vec![ax]), true)?;
        let l = imp.unary(U::Log, sum)?;
        imp.binary(B::Subtract, s, l)?
    } else {
        imp.call(op::Softmax { axis: ax }, &[x2])?
    };
    Ok(vec![imp.reshape(y, &shape)?])
}

/// The explicit target shape of ONNX Reshape (0 copies the input dim unless
/// `allowzero`, -1 is inferred).
fn reshape_target(input: &[usize], target: &[i64], allowzero: bool) -> Result<Vec<usize>> {
    let numel: usize = input.iter().product();
    let mut out = Vec::with_capacity(target.len());
    let mut infer = None;
    for (i, &t) in target.iter().enumerate() {
        match t {
            -1 if infer.is_none() => {
                infer = Some(i);
                out.push(1);
            }
            0 if !allowzero => out.push(*input.get(i).ok_or_else(|| {
                Error::InvalidModel(format!(
                    "Reshape copies dim {i} of a rank-{} input",
                    input.len()
                ))
            })?),
            t if t >= 0 => out.push(t as usize),
            _ => {
                return Err(Error::InvalidModel(format!(
                    "Reshape target {target:?} is invalid"
                )));
            }
        }
    }
    if let Some(i) = infer {
        let known: usize = out.iter().product();
        if known == 0 || !numel.is_multiple_of(known) {
            return Err(Error::InvalidModel(format!(
                "Reshape cannot infer a dim of {target:?} for {input:?}"
            )));
        }
        out[i] = numel / known;
    }
    if out.iter().product::<usize>() != numel {
        return Err(Error::InvalidModel(format!(
            "Reshape target {target:?} does not hold the {numel} elements of {input:?}"
        )));
    }
    Ok(out)
}

fn split(imp: &mut Importer, n: &Node) -> Result<Vec<ExprId>> {
    let x = imp.input(n, 0)?;
    let shape = imp.shape(x)?;
    let a = axis(n.int("axis", 0), shape.len())?;
    let d = shape[a];
    let outs = n.num_outputs();
    let sizes = if n.opset < 13 {
        n.ints("split")
    } else {
        imp.const_ints(n, 1)?
    };
    let sizes: Vec<usize> = match sizes {
        Some(s) => to_dims(&s)?,
        None => {
            let parts = if n.opset >= 18 {
                n.int("num_outputs", outs as i64) as usize
            } else {
                outs
            };
            if parts == 0 {
                return Err(Error::InvalidModel("Split into 0 parts".into()));
            }
            let chunk = d.div_ceil(parts);
            if n.opset < 18 && d % parts != 0 {
                return Err(Error::InvalidModel(format!(
                    "Split of {d} into {parts} equal parts"
                )));
            }
            (0..parts)
                .map(|i| chunk.min(d.saturating_sub(i * chunk)))
                .collect()
        }
    };
    if sizes.iter().sum::<usize>() != d {
        return Err(Error::InvalidModel(format!(
            "Split sizes {sizes:?} do not add up to {d}"
        )));
    }
    let mut res = Vec::with_capacity(sizes.len());
    let mut start = 0;
    for &s in &sizes {
        if s == 0 {
            // An empty piece (kiln's `take` refuses empty data).
            let mut ps = shape.clone();
            ps[a] = 0;
            let dt = imp.dtype(x)?;
            res.push(imp.constant(NDArray::zeros(ps, dt)));
            continue;
        }
        let idx = (start..start + s).map(|i| i as i64).collect();
        res.push(take(imp, x, idx, a)?);
        start += s;
    }
    Ok(res)
}

fn slice(imp: &mut Importer, n: &Node) -> Result<Vec<ExprId>> {
    let x = imp.input(n, 0)?;
    let shape = imp.shape(x)?;
    let r = shape.len();
    let (starts, ends, axes, steps) = if n.opset < 10 {
        (
            n.ints("starts").unwrap_or_default(),
            n.ints("ends").unwrap_or_default(),
            n.ints("axes"),
            None,
        )
    } else {
        (
            imp.const_ints(n, 1)?.unwrap_or_default(),
            imp.const_ints(n, 2)?.unwrap_or_default(),
            imp.const_ints(n, 3)?,
            imp.const_ints(n, 4)?,
        )
    };
    let axes = axes.unwrap_or_else(|| (0..starts.len() as i64).collect());
    let steps = steps.unwrap_or_else(|| vec![1; starts.len()]);
    if ends.len() != starts.len() || axes.len() != starts.len() || steps.len() != starts.len() {
        return Err(Error::InvalidModel(
            "Slice starts, ends, axes and steps differ in length".into(),
        ));
    }
    let mut y = x;
    for i in 0..starts.len() {
        let a = axis(axes[i], r)?;
        let d = shape[a] as i64;
        let step = steps[i];
        if step == 0 {
            return Err(Error::InvalidModel("Slice step 0".into()));
        }
        let norm = |v: i64| if v < 0 { v.saturating_add(d) } else { v };
        let (s, e) = (norm(starts[i]), norm(ends[i]));
        let idx: Vec<i64> = if step > 0 {
            let (s, e) = (s.clamp(0, d), e.clamp(0, d));
            (s..e.max(s)).step_by(step as usize).collect()
        } else {
            let (s, e) = (s.clamp(0, d - 1), e.clamp(-1, d - 1));
            let mut v = vec![];
            let mut p = s;
            while p > e {
                v.push(p);
                p += step;
            }
            v
        };
        if idx.len() as i64 == d && step == 1 {
            continue;
        }
        y = take(imp, y, idx, a)?;
    }
    Ok(vec![y])
}

fn squeeze(imp: &mut Importer, n: &Node) -> Result<Vec<ExprId>> {
    let x = imp.input(n, 0)?;
    let shape = imp.shape(x)?;
    let axes = if n.opset < 13 {
        n.ints("axes")
    } else {
        imp.const_ints(n, 1)?
    };
    let out = if n.op_type == "Squeeze" {
        match axes {
            None => shape.iter().copied().filter(|&d| d != 1).collect(),
            Some(axes) => {
                let axes = axes
                    .iter()
                    .map(|&a| axis(a, shape.len()))
                    .collect::<Result<Vec<_>>>()?;
                for &a in &axes {
                    if shape[a] != 1 {
                        return Err(Error::InvalidModel(format!(
                            "Squeeze axis {a} of {shape:?} is not 1"
                        )));
                    }
                }
                shape
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| !axes.contains(i))
                    .map(|(_, &d)| d)
                    .collect()
            }
        }
    } else {
        let axes = axes.ok_or_else(|| Error::InvalidModel("Unsqueeze needs axes".into()))?;
        let r = shape.len() + axes.len();
        let mut axes = axes
            .iter()
            .map(|&a| axis(a, r))
            .collect::<Result<Vec<_>>>()?;
        axes.sort_unstable();
        let mut out = Vec::with_capacity(r);
        let mut it = shape.iter();
        for i in 0..r {
            if axes.binary_search(&i).is_ok() {
                out.push(1);
            } else {
                out.push(
                    *it.next()
                        .ok_or_else(|| Error::InvalidModel("Unsqueeze axes repeat".into()))?,
                );
            }
        }
        out
    };
    Ok(vec![imp.reshape(x, &out)?])
}

fn pad(imp: &mut Importer, n: &Node) -> Result<Vec<ExprId>> {
    let mut x = imp.input(n, 0)?;
    let shape = imp.shape(x)?;
    let r = shape.len();
    let mode = n.string("mode", "constant");
    let (pads, value, axes) = if n.opset < 11 {
        (
            n.ints("pads").unwrap_or_default(),
            n.float("value", 0.0) as f64,
            None,
        )
    } else {
        (
            imp.const_ints(n, 1)?.unwrap_or_default(),
            imp.const_input(n, 2)?
                .and_then(|t| t.to_f64_vec().first().copied())
                .unwrap_or(0.0),
            imp.const_ints(n, 3)?,
        )
    };
    let axes = match axes {
        Some(a) => a.iter().map(|&a| axis(a, r)).collect::<Result<Vec<_>>>()?,
        None => (0..r).collect(),
    };
    let k = axes.len();
    if pads.len() != 2 * k {
        return Err(Error::InvalidModel(format!(
            "Pad pads {pads:?} do not fit {k} axes"
        )));
    }
    for (j, &a) in axes.iter().enumerate() {
        let (b, e) = (pads[j], pads[j + k]);
        if b == 0 && e == 0 {
            continue;
        }
        let d = imp.shape(x)?[a] as i64;
        if d == 0 && mode != "constant" {
            return Err(Error::Unsupported(format!(
                "Pad mode `{mode}` of an empty axis"
            )));
        }
        // The padded extent, checked before any index list of that length is made.
        let extent = i128::from(d) + i128::from(b) + i128::from(e);
        let Some(extent) = usize::try_from(extent)
            .ok()
            .filter(|&x| x as u64 <= 1 << 56)
        else {
            return Err(Error::InvalidModel(format!(
                "Pad pads ({b}, {e}) give axis {a} of length {d} the extent {extent}"
            )));
        };
        imp.check_alloc("the Pad index list", &[extent], DType::I64)?;
        let (b0, e0) = (b.max(-d), e.max(-d));
        // Index of each output position along the axis, or -1 for the constant fill.
        let positions = (-b0)..(d + e0);
        let idx: Vec<i64> = match mode.as_str() {
            "constant" => positions.collect(),
            "edge" => positions.map(|p| p.clamp(0, d - 1)).collect(),
            "reflect" if d > 1 => positions
                .map(|p| {
                    let period = 2 * (d - 1);
                    let q = p.rem_euclid(period);
                    if q < d { q } else { period - q }
                })
                .collect(),
            "wrap" => positions.map(|p| p.rem_euclid(d)).collect(),
            other => {
                return Err(Error::Unsupported(format!(
                    "Pad mode `{other}` on an axis of length {d}"
                )));
            }
        };
        if mode == "constant" {
            let inner: Vec<i64> = idx.iter().copied().filter(|&p| p >= 0 && p < d).collect();
            let (before, after) = (b.max(0) as usize, e.max(0) as usize);
            let core = if inner.len() as i64 == d {
                x
            } else {
                take(imp, x, inner, a)?
            };
            let mut parts = vec![];
            let dtype = imp.dtype(x)?;
            let fill = |len: usize, imp: &mut Importer| -> Result<ExprId> {
                let mut s = imp.shape(core)?;
                s[a] = len;
                imp.filled(&s, dtype, value)
            };
            if before > 0 {
                parts.push(fill(before, imp)?);
            }
            parts.push(core);
            if after > 0 {
                parts.push(fill(after, imp)?);
            }
            x = if parts.len() == 1 {
                core
            } else {
                let t = imp.m.tuple(&parts)?;
                imp.call(op::Concatenate::new(a as i64), &[t])?
            };
        } else {
            x = take(imp, x, idx, a)?;
        }
    }
    Ok(vec![x])
}

fn depth_space(imp: &mut Importer, n: &Node) -> Result<Vec<ExprId>> {
    let x = imp.input(n, 0)?;
    let s = imp.shape(x)?;
    if s.len() != 4 {
        return Err(Error::InvalidModel(format!("{} of data {s:?}", n.op_type)));
    }
    let b = n.int("blocksize", 0);
    if b < 1 {
        return Err(Error::InvalidModel(format!("blocksize {b}")));
    }
    let (nb, c, h, w) = (s[0], s[1], s[2], s[3]);
    // b·b, h·b, w·b and c·b·b all fit when b·b does not exceed the element count.
    let b = usize::try_from(b)
        .ok()
        .filter(|&b| {
            b.checked_mul(b)
                .is_some_and(|bb| bb <= c.max(h.saturating_mul(w)).max(1))
        })
        .ok_or_else(|| {
            Error::InvalidModel(format!("blocksize {b} is larger than data {s:?} allows"))
        })?;
    let y = if n.op_type == "DepthToSpace" {
        if c % (b * b) != 0 {
            return Err(Error::InvalidModel(format!("{c} channels, blocksize {b}")));
        }
        let c2 = c / (b * b);
        let (view, perm) = if n.string("mode", "DCR") == "CRD" {
            (vec![nb, c2, b, b, h, w], vec![0, 1, 4, 2, 5, 3])
        } else {
            (vec![nb, b, b, c2, h, w], vec![0, 3, 4, 1, 5, 2])
        };
        let v = imp.reshape(x, &view)?;
        let t = imp.transpose(v, perm)?;
        imp.reshape(t, &[nb, c2, h * b, w * b])?
    } else {
        if h % b != 0 || w % b != 0 {
            return Err(Error::InvalidModel(format!("{s:?} with blocksize {b}")));
        }
        let v = imp.reshape(x, &[nb, c, h / b, b, w / b, b])?;
        // DCR puts the block offsets before the channel (opset 28 adds CRD, after).
        let perm = if n.string("mode", "DCR") == "CRD" {
            vec![0, 1, 3, 5, 2, 4]
        } else {
            vec![0, 3, 5, 1, 2, 4]
        };
        let t = imp.transpose(v, perm)?;
        imp.reshape(t, &[nb, c * b * b, h / b, w / b])?
    };
    Ok(vec![y])
}

fn reduce(imp: &mut Importer, n: &Node) -> Result<Vec<ExprId>> {
    let x = imp.input(n, 0)?;
    let axes_as_input = if n.op_type == "ReduceSum" {
        n.opset >= 13
    } else {
        n.opset >= 18
    };
    let axes = if axes_as_input {
        imp.const_ints(n, 1)?
    } else {
        n.ints("axes")
    };
    let keep = n.int("keepdims", 1) != 0;
    let axes = match axes {
        Some(a) if !a.is_empty() => Some(a),
        _ if axes_as_input && n.int("noop_with_empty_axes", 0) != 0 => return Ok(vec![x]),
        _ => None,
    };
    if matches!(n.op_type, "ReduceMax" | "ReduceMin") {
        return Ok(vec![reduce_extreme(imp, n, x, axes, keep)?]);
    }
    let y = match n.op_type {
        "ReduceMean" => imp.reduce(R::Mean, x, axes, keep)?,
        "ReduceSum" => imp.reduce(R::Sum, x, axes, keep)?,
        "ReduceProd" => imp.reduce(R::Prod, x, axes, keep)?,
        "ReduceL1" => {
            let a = imp.unary(U::Abs, x)?;
            imp.reduce(R::Sum, a, axes, keep)?
        }
        "ReduceL2" | "ReduceSumSquare" => {
            let sq = imp.binary(B::Multiply, x, x)?;
            let s = imp.reduce(R::Sum, sq, axes, keep)?;
            if n.op_type == "ReduceL2" {
                imp.unary(U::Sqrt, s)?
            } else {
                s
            }
        }
        "ReduceLogSum" => {
            let s = imp.reduce(R::Sum, x, axes, keep)?;
            imp.unary(U::Log, s)?
        }
        _ => {
            let e = imp.unary(U::Exp, x)?;
            let s = imp.reduce(R::Sum, e, axes, keep)?;
            imp.unary(U::Log, s)?
        }
    };
    Ok(vec![y])
}

/// `ReduceMax`/`ReduceMin`: bool data as or/and (through uint8), and a reduction over
/// an empty axis as its identity (-inf/+inf, the dtype's extremes, false/true), which
/// kiln's `max`/`min` refuse.
fn reduce_extreme(
    imp: &mut Importer,
    n: &Node,
    x: ExprId,
    axes: Option<Vec<i64>>,
    keep: bool,
) -> Result<ExprId> {
    let max = n.op_type == "ReduceMax";
    let t = imp.tensor_ty(x)?;
    let r = t.shape.len();
    let reduced: Vec<usize> = match &axes {
        Some(a) => a.iter().map(|&a| axis(a, r)).collect::<Result<_>>()?,
        None => (0..r).collect(),
    };
    if reduced.iter().any(|&a| t.shape[a] == 0) {
        let shape: Vec<usize> = (0..r)
            .filter_map(|d| match reduced.contains(&d) {
                true if keep => Some(1),
                true => None,
                false => Some(t.shape[d]),
            })
            .collect();
        let Some(v) = extreme_identity(t.dtype, max) else {
            let v = if max { i64::MIN } else { i64::MAX };
            return Ok(imp.constant(NDArray::from_vec(
                shape.clone(),
                vec![v; shape.iter().product()],
            )?));
        };
        return Ok(imp.constant(NDArray::full(shape, t.dtype, v)));
    }
    let kind = if max { R::Max } else { R::Min };
    if t.dtype == DType::Bool {
        let u = cast(imp, x, DType::U8)?;
        let y = imp.reduce(kind, u, axes, keep)?;
        return cast(imp, y, DType::Bool);
    }
    imp.reduce(kind, x, axes, keep)
}

/// The identity of a max (`max`) or min reduction over `dtype`, as an f64: the dtype's
/// lowest or highest value (bool: 0 or 1); `None` for int64 and uint64, whose extremes
/// an f64 does not hold.
pub(crate) fn extreme_identity(dtype: DType, max: bool) -> Option<f64> {
    let (lowest, highest) = match dtype {
        DType::Bool => (0.0, 1.0),
        d if d.is_float() => (f64::NEG_INFINITY, f64::INFINITY),
        DType::I8 => (i8::MIN as f64, i8::MAX as f64),
        DType::U8 => (0.0, u8::MAX as f64),
        DType::I16 => (i16::MIN as f64, i16::MAX as f64),
        DType::U16 => (0.0, u16::MAX as f64),
        DType::I32 => (i32::MIN as f64, i32::MAX as f64),
        DType::U32 => (0.0, u32::MAX as f64),
        _ => return None,
    };
    Some(if max { lowest } else { highest })
}

fn argmax(imp: &mut Importer, n: &Node) -> Result<Vec<ExprId>> {
    let x = imp.input(n, 0)?;
    let shape = imp.shape(x)?;
    let a = axis(n.int("axis", 0), shape.len())?;
    let keep = n.int("keepdims", 1) != 0;
    let last = n.int("select_last_index", 0) != 0;
    let rk = if n.op_type == "ArgMax" {
        R::Max
    } else {
        R::Min
    };
    let ext = imp.reduce(rk, x, Some(vec![a as i64]), true)?;
    let hit = imp.binary(B::Equal, x, ext)?;
    let d = shape[a];
    let mut ishape = vec![1; shape.len()];
    ishape[a] = d;
    let iota = imp.constant(NDArray::from_vec(
        ishape,
        (0..d as i64).collect::<Vec<_>>(),
    )?);
    let miss = imp.scalar(if last { -1.0 } else { d as f64 }, DType::I64);
    let cand = imp.select(hit, iota, miss)?;
    let y = imp.reduce(
        if last { R::Max } else { R::Min },
        cand,
        Some(vec![a as i64]),
        keep,
    )?;
    Ok(vec![y])
}

fn constant(imp: &mut Importer, n: &Node) -> Result<ExprId> {
    let value = if let Some(t) = n.attr("value").and_then(|a| a.t.as_ref()) {
        crate::tensor::tensor_from_proto(t, "Constant value")?
    } else if let Some(a) = n.attr("value_float") {
        NDArray::scalar(a.f.unwrap_or(0.0))
    } else if let Some(a) = n.attr("value_floats") {
        NDArray::from_vec([a.floats.len()], a.floats.clone())?
    } else if let Some(a) = n.attr("value_int") {
        NDArray::scalar(a.i.unwrap_or(0))
    } else if let Some(a) = n.attr("value_ints") {
        indices(a.ints.clone())
    } else {
        return Err(Error::Unsupported(
            "Constant without a tensor, float(s) or int(s) value (sparse and string constants)"
                .into(),
        ));
    };
    Ok(imp.constant(value))
}
