//! Kiln's TOPI: a tensor-expression compute for every op of the graph IR, and the
//! lowering of graph-IR functions (primitive groups) to loop-IR kernels.
//!
//! [`compute_op`] is the one place that maps a [`kiln_ir::Op`] to its compute: an
//! exhaustive `match` over the op enum (STYLE habit 12), so a new op without a lowering
//! is a compile error. The computes themselves live one file per op family, as in `ir`:
//! [`nn`], [`elemwise`], [`reduce`], [`transform`]. Each reads the op's typed attributes
//! and builds stages in a [`Ctx`] (a [`Graph`] plus what the schedules need to know of
//! each stage: its [`Tag`], and whether it must stay materialized), matching the
//! reference evaluation in `ir` exactly up to floating-point rounding: float32 computes
//! in `f32` here where the reference computes in `f64` and rounds once; integer
//! arithmetic wraps at the dtype's width, which agrees with the reference's wrapping
//! `i64` arithmetic (ring operations commute with the wrap).
//!
//! [`lower`] builds the tensor-expression graph of a whole function, inlines its
//! elementwise and injective stages into their consumers, applies the default schedule
//! of a [`ScheduleKind`] (see [`crate::schedule_default`]) and lowers to a
//! [`PrimFunc`](crate::tir::PrimFunc); [`kernels_of`] cuts a module's `@main` into one
//! kernel per op call until graph fusion exists.
//!
//! Shapes with an extent of 0 are not lowered (the tensor-expression layer refuses
//! them): such a tensor has no elements to compute, and lowering reports it as
//! [`Error::Unsupported`].

pub mod elemwise;
pub mod lower;
pub mod nn;
pub mod reduce;
pub mod transform;

use std::collections::HashMap;

use kiln_ir::{DType, Op, TensorType, Type};

use crate::error::{Error, Result};
use crate::te::{Expr, Graph, OpId, Tensor};

pub use lower::{ScheduleKind, kernel_name, kernels_of, lower_function};

/// What a schedule needs to know of a stage: which kind of computation it is (TVM's op
/// tags: `conv2d_nchw`, `dense`, `injective`, ...).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Tag {
    /// Elementwise or broadcasting arithmetic, or data movement: inlined into its
    /// consumer unless it is an output.
    Injective,
    /// The reduction of a 2-D NCHW convolution (`out[n, o, y, x]`).
    Conv2d,
    /// A dense layer (`out[..., n] = sum_k x[..., k] * w[n, k]`).
    Dense,
    /// A batched matrix product (`out[b, i, j]`).
    BatchMatmul,
    /// Any other reduction (pooling, `sum`, softmax's max and sum, norms).
    Reduce,
}

/// A tensor-expression value: a tensor or a tuple (a graph-IR value's shape).
#[derive(Clone, Debug, PartialEq)]
pub enum TeValue {
    /// One tensor.
    Tensor(Tensor),
    /// A tuple of values.
    Tuple(Vec<TeValue>),
}

impl TeValue {
    /// The tensors in order (tuples flattened recursively).
    pub fn flatten(&self) -> Vec<Tensor> {
        match self {
            TeValue::Tensor(t) => vec![*t],
            TeValue::Tuple(v) => v.iter().flat_map(TeValue::flatten).collect(),
        }
    }

    /// The tensor, or an error naming `what` if this is a tuple.
    pub fn tensor(&self, what: &str) -> Result<Tensor> {
        match self {
            TeValue::Tensor(t) => Ok(*t),
            TeValue::Tuple(_) => Err(Error::InvalidArgument(format!(
                "{what}: expected a tensor, got a tuple"
            ))),
        }
    }
}

/// A tensor-expression graph under construction, with what the default schedules need
/// to know of each stage.
#[derive(Clone, Debug, Default)]
pub struct Ctx {
    /// The stages.
    pub graph: Graph,
    tags: HashMap<OpId, Tag>,
    keep: Vec<OpId>,
    pads: Vec<OpId>,
}

impl Ctx {
    /// An empty context.
    pub fn new() -> Ctx {
        Ctx::default()
    }

    /// The tag of stage `op` ([`Tag::Injective`] unless set).
    pub fn tag(&self, op: OpId) -> Tag {
        self.tags.get(&op).copied().unwrap_or(Tag::Injective)
    }

    /// Whether stage `op` must be materialized even though it is injective (inlining it
    /// would duplicate work exponentially, as in integer `power`).
    pub fn is_kept(&self, op: OpId) -> bool {
        self.keep.contains(&op)
    }

    /// Whether stage `op` is the zero-padded copy of a conv2d input ([`Ctx::padding`]).
    pub fn is_padding(&self, op: OpId) -> bool {
        self.pads.contains(&op)
    }

    /// The zero-padded copy of a conv2d's input: injective, but the CPU lowering keeps
    /// it materialized, so the register-tiled conv reads it without a bounds check per
    /// multiply-add (GPU schedules inline it).
    pub fn padding(
        &mut self,
        shape: &[usize],
        name: &str,
        f: impl FnOnce(&[Expr]) -> Expr,
    ) -> Result<Tensor> {
        let t = self.graph.compute(shape, name, f)?;
        self.pads.push(t.op());
        Ok(t)
    }

    /// A placeholder (kernel input).
    pub fn placeholder(&mut self, shape: &[usize], dtype: DType, name: &str) -> Result<Tensor> {
        self.graph.placeholder(shape, dtype, name)
    }

    /// An injective compute stage (inlined into its consumers by the default schedules).
    pub fn compute(
        &mut self,
        shape: &[usize],
        name: &str,
        f: impl FnOnce(&[Expr]) -> Expr,
    ) -> Result<Tensor> {
        self.graph.compute(shape, name, f)
    }

    /// A compute stage with `tag` (reductions: the body is a `sum`/`max`/`min`).
    pub fn tagged(
        &mut self,
        tag: Tag,
        shape: &[usize],
        name: &str,
        f: impl FnOnce(&[Expr]) -> Expr,
    ) -> Result<Tensor> {
        let t = self.graph.compute(shape, name, f)?;
        self.tags.insert(t.op(), tag);
        Ok(t)
    }

    /// An injective stage that stays materialized (see [`Ctx::is_kept`]).
    pub fn kept(
        &mut self,
        shape: &[usize],
        name: &str,
        f: impl FnOnce(&[Expr]) -> Expr,
    ) -> Result<Tensor> {
        let t = self.graph.compute(shape, name, f)?;
        self.keep.push(t.op());
        Ok(t)
    }

    /// A reduction axis over `0..extent`.
    pub fn reduce_axis(&mut self, extent: usize, name: &str) -> Result<crate::te::IterVar> {
        self.graph.reduce_axis(extent, name)
    }
}

/// Builds the compute of `op` applied to `args` in `ctx`; `out` is the op's result type
/// (from the graph IR's type rule). The result has the shape of `out` (a tuple for ops
/// with tuple results). `Op::Custom` is [`Error::Unsupported`].
pub fn compute_op(ctx: &mut Ctx, op: &Op, args: &[TeValue], out: &Type) -> Result<TeValue> {
    let t = |v: Result<Tensor>| v.map(TeValue::Tensor);
    match op {
        Op::Conv2d(a) => t(nn::conv2d(ctx, a, args, out)),
        Op::BatchNorm(a) => nn::batch_norm(ctx, a, args, out),
        Op::Pool2d(a) => t(nn::pool2d(ctx, a, args, out)),
        Op::GlobalPool2d(a) => t(nn::global_pool2d(ctx, a, args, out)),
        Op::Dense(a) => t(nn::dense(ctx, a, args, out)),
        Op::BiasAdd(a) => t(nn::bias_add(ctx, a, args, out)),
        Op::BatchFlatten(a) => t(nn::batch_flatten(ctx, a, args, out)),
        Op::Softmax(a) => t(nn::softmax(ctx, a, args, out)),
        Op::LayerNorm(a) => t(nn::layer_norm(ctx, a, args, out)),
        Op::BatchMatmul(a) => t(nn::batch_matmul(ctx, a, args, out)),
        Op::Unary(a) => t(elemwise::unary(ctx, a, args, out)),
        Op::Binary(a) => t(elemwise::binary(ctx, a, args, out)),
        Op::Clip(a) => t(elemwise::clip(ctx, a, args, out)),
        Op::Cast(a) => t(elemwise::cast(ctx, a, args, out)),
        Op::Where(a) => t(elemwise::where_(ctx, a, args, out)),
        Op::Reduce(a) => t(reduce::reduce(ctx, a, args, out)),
        Op::Reshape(a) => t(transform::reshape(ctx, a, args, out)),
        Op::Transpose(a) => t(transform::transpose(ctx, a, args, out)),
        Op::Squeeze(a) => t(transform::squeeze(ctx, a, args, out)),
        Op::ExpandDims(a) => t(transform::expand_dims(ctx, a, args, out)),
        Op::Concatenate(a) => t(transform::concatenate(ctx, a, args, out)),
        Op::Split(a) => transform::split(ctx, a, args, out),
        Op::StridedSlice(a) => t(transform::strided_slice(ctx, a, args, out)),
        Op::Take(a) => t(transform::take(ctx, a, args, out)),
        Op::Custom(c) => Err(Error::Unsupported(format!(
            "custom op `{}` has no tensor-expression compute; only kiln's built-in ops lower \
             to kernels",
            Op::Custom(c.clone()).name()
        ))),
    }
}

// ---------------------------------------------------------------------------------------
// Helpers shared by the families.
// ---------------------------------------------------------------------------------------

/// Argument `i` of `op` as a tensor.
pub(crate) fn arg(op: &str, args: &[TeValue], i: usize) -> Result<Tensor> {
    args.get(i)
        .ok_or_else(|| Error::InvalidArgument(format!("{op}: missing argument {i}")))?
        .tensor(&format!("{op} argument {i}"))
}

/// The result type as a tensor type.
pub(crate) fn out_tensor<'a>(op: &str, out: &'a Type) -> Result<&'a TensorType> {
    out.as_tensor().ok_or_else(|| {
        Error::InvalidArgument(format!("{op}: expected a tensor result type, got {out}"))
    })
}

/// The result type as a tuple of tensor types.
pub(crate) fn out_tuple<'a>(op: &str, out: &'a Type) -> Result<Vec<&'a TensorType>> {
    let fields = out.as_tuple().ok_or_else(|| {
        Error::InvalidArgument(format!("{op}: expected a tuple result type, got {out}"))
    })?;
    fields
        .iter()
        .map(|f| {
            f.as_tensor().ok_or_else(|| {
                Error::InvalidArgument(format!("{op}: tuple field {f} is not a tensor"))
            })
        })
        .collect()
}

/// `axis` (negative counts from the end) as an index into `rank` dimensions.
pub(crate) fn norm_axis(op: &str, axis: i64, rank: usize) -> Result<usize> {
    let r = rank as i64;
    if axis < -r || axis >= r {
        return Err(Error::InvalidArgument(format!(
            "{op}: axis {axis} is out of range for rank {rank}"
        )));
    }
    Ok((if axis < 0 { axis + r } else { axis }) as usize)
}

/// An immediate of `dtype` with value `v` (floats keep `v`; integers truncate).
pub(crate) fn imm(v: f64, dtype: DType) -> Expr {
    Expr::imm(v, dtype)
}

/// An `int32` index immediate.
pub(crate) fn idx(v: usize) -> Expr {
    Expr::int(v as i32)
}

/// The indices of an input of shape `in_shape` broadcast (numpy rules) to the output
/// indices `out_idx`: leading output axes are dropped, extent-1 input axes read 0.
pub(crate) fn broadcast_index(in_shape: &[usize], out_idx: &[Expr]) -> Vec<Expr> {
    let skip = out_idx.len() - in_shape.len();
    in_shape
        .iter()
        .zip(&out_idx[skip..])
        .map(|(&d, i)| if d == 1 { idx(0) } else { i.clone() })
        .collect()
}

/// The row-major flat index of `indices` in `shape`.
pub(crate) fn ravel(indices: &[Expr], shape: &[usize]) -> Expr {
    let mut flat: Option<Expr> = None;
    for (ix, &d) in indices.iter().zip(shape) {
        flat = Some(match flat {
            None => ix.clone(),
            Some(f) => f * idx(d) + ix.clone(),
        });
    }
    flat.unwrap_or_else(|| idx(0))
}

/// The multi-index in `shape` of the row-major flat index `flat`.
pub(crate) fn unravel(flat: Expr, shape: &[usize]) -> Vec<Expr> {
    let n = shape.len();
    let mut out = vec![idx(0); n];
    let mut stride = 1usize;
    for d in (0..n).rev() {
        out[d] = if shape[d] == 1 {
            idx(0)
        } else {
            let q = if stride == 1 {
                flat.clone()
            } else {
                flat.clone().floordiv(idx(stride))
            };
            if d == 0 { q } else { q.floormod(idx(shape[d])) }
        };
        stride *= shape[d];
    }
    out
}
