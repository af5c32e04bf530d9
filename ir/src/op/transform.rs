//! Shape and layout ops: `reshape`, `transpose`, `squeeze`, `expand_dims`,
//! `concatenate`, `split`, `strided_slice`, `take`, with Relay's semantics.
//!
//! These ops move data and never compute on it, so every dtype is accepted. Each op's
//! type rule and evaluation share one "plan" method (the output shape, the permutation,
//! the per-axis slice...) so they cannot disagree. Evaluation works out, for every output
//! element, the flat index of the input element it copies — a strided view of the input
//! or an explicit gather — and picks those elements with [`Data::gather`].

use crate::attrs::{AttrReader, AttrValue, AttrWriter};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::tensor::{Data, Element, NDArray, row_major_strides};
use crate::ty::{TensorType, Type, fmt_shape};
use crate::value::Value;

use super::util::{expect_arity, normalize_axis, tensor_arg};
use super::{Op, OpPattern, OpSpec};

/// Names of the ops in this family.
pub const NAMES: &[&str] = &[
    "reshape",
    "transpose",
    "squeeze",
    "expand_dims",
    "concatenate",
    "split",
    "strided_slice",
    "take",
];

/// `reshape(data, newshape=)`: `0` copies the input dimension at that position, `-1`
/// is inferred from the rest (Relay's rules; `-2`, `-3`, `-4` are unsupported).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Reshape {
    /// The target shape, with `0` and `-1` as described above.
    pub newshape: Vec<i64>,
}

/// `transpose(data, axes=)`; no axes reverses them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Transpose {
    /// Output axis `i` is input axis `axes[i]` (negative counts from the end).
    pub axes: Option<Vec<i64>>,
}

/// `squeeze(data, axis=)`; no axis removes every dimension of size 1.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Squeeze {
    /// The axes removed, each of size 1 (negative counts from the end).
    pub axis: Option<Vec<i64>>,
}

/// `expand_dims(data, axis=, num_newaxis=)`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ExpandDims {
    /// Where the new axes go (negative counts from the end of the output).
    pub axis: i64,
    /// How many axes of size 1 are inserted.
    pub num_newaxis: usize,
}

/// `concatenate(tuple, axis=)`: takes one tuple argument, as in Relay.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Concatenate {
    /// The axis joined along (negative counts from the end).
    pub axis: i64,
}

/// How [`Split`] cuts its axis.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SplitSpec {
    /// This many equal parts (the axis length must divide evenly).
    Sections(usize),
    /// Cut before each of these indices.
    Indices(Vec<i64>),
}

/// `split(data, indices_or_sections=, axis=)`: returns a tuple.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Split {
    /// Where the axis is cut.
    pub indices_or_sections: SplitSpec,
    /// The axis cut (negative counts from the end).
    pub axis: i64,
}

/// `strided_slice(data, begin=, end=, strides=, axes=)` with numpy's clamping of
/// out-of-range and negative indices.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StridedSlice {
    /// The first index per sliced axis (inclusive).
    pub begin: Vec<i64>,
    /// The end index per sliced axis (exclusive).
    pub end: Vec<i64>,
    /// The step per sliced axis (negative walks backwards); `None` is all 1.
    pub strides: Option<Vec<i64>>,
    /// The axes `begin`/`end`/`strides` apply to; `None` is the leading axes in order.
    pub axes: Option<Vec<i64>>,
}

/// What [`Take`] does with out-of-range indices.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TakeMode {
    /// Clamp into range (Relay's default).
    Clip,
    /// Wrap around (negative indices count from the end).
    Wrap,
}

/// `take(data, indices, axis=, mode=)`; no axis takes from the flattened data.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Take {
    /// The axis indexed (negative counts from the end).
    pub axis: Option<i64>,
    /// What happens to indices out of range.
    pub mode: TakeMode,
}

/// The largest rank `expand_dims` may produce: a sanity bound so that an absurd
/// `num_newaxis` is an error rather than an allocation failure.
const MAX_RANK: usize = 64;

// ---------------------------------------------------------------------------------------
// Shared helpers.

/// `[1, -1, 0]`, as attribute lists print.
fn fmt_ints(v: &[i64]) -> String {
    let items: Vec<String> = v.iter().map(i64::to_string).collect();
    format!("[{}]", items.join(", "))
}

/// The single tensor argument `data` of a one-argument op.
fn data_arg<'a>(op: &str, args: &'a [Type]) -> Result<&'a TensorType> {
    expect_arity(op, args, 1)?;
    tensor_arg(op, args, 0, "data")
}

/// Argument `i` (called `what`) of an evaluation, as a tensor.
fn tensor_value<'a>(op: &str, args: &'a [Value], i: usize, what: &str) -> Result<&'a NDArray> {
    args.get(i)
        .ok_or_else(|| Error::Eval(format!("{op}: missing argument {i} ({what})")))?
        .as_tensor(&format!("{op} argument {i} ({what})"))
}

/// The element count of `shape`, or a type error if it does not fit in `usize`.
fn numel(op: &str, shape: &[usize]) -> Result<usize> {
    shape
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .ok_or_else(|| {
            Error::ty(
                op,
                format!("shape {} has too many elements", fmt_shape(shape)),
            )
        })
}

/// Normalises `axis` of `data` (shape `shape`), naming the shape on error.
fn axis_of(op: &str, axis: i64, shape: &[usize], what: &str) -> Result<usize> {
    normalize_axis(op, axis, shape.len()).map_err(|_| {
        Error::ty(
            op,
            format!(
                "axis {axis} is out of range for {what} {} of rank {}",
                fmt_shape(shape),
                shape.len()
            ),
        )
    })
}

/// Row-major strides as `i64`, for strided-view arithmetic that may step backwards.
fn strides_i64(shape: &[usize]) -> Vec<i64> {
    row_major_strides(shape)
        .into_iter()
        .map(|s| s as i64)
        .collect()
}

/// The flat input indices of a strided view: the element of `shape` at multi-index `i`
/// (visited in row-major order) is input element `offset + Σ i[d]·strides[d]`.
fn view_indices(shape: &[usize], offset: i64, strides: &[i64]) -> Vec<usize> {
    let n: usize = shape.iter().product();
    let mut out = Vec::with_capacity(n);
    if n == 0 {
        return out;
    }
    let mut idx = vec![0usize; shape.len()];
    let mut flat = offset;
    for _ in 0..n {
        out.push(flat as usize);
        for d in (0..shape.len()).rev() {
            idx[d] += 1;
            flat += strides[d];
            if idx[d] < shape[d] {
                break;
            }
            flat -= strides[d] * shape[d] as i64;
            idx[d] = 0;
        }
    }
    out
}

/// A strided view of `data` (see [`view_indices`]) copied into a new tensor.
fn view(data: &NDArray, shape: Vec<usize>, offset: i64, strides: &[i64]) -> Result<NDArray> {
    let picked = data.data().gather(view_indices(&shape, offset, strides));
    NDArray::new(shape, picked)
}

/// The elements of `parts` (all of dtype `dtype`) one after another.
fn concat_data(dtype: DType, parts: &[&Data]) -> Result<Data> {
    fn go<T: Element>(parts: &[&Data]) -> Option<Data> {
        let mut v: Vec<T> = Vec::with_capacity(parts.iter().map(|p| p.len()).sum());
        for p in parts {
            v.extend_from_slice(T::slice(p)?);
        }
        Some(T::wrap(v))
    }
    let joined = crate::tensor::with_element_type!(dtype, T => go::<T>(parts));
    joined.ok_or_else(|| Error::Eval(format!("concatenate: fields are not all {dtype}")))
}

// ---------------------------------------------------------------------------------------
// reshape

/// Checks the values of a `newshape` that no input could make valid; `invalid` builds
/// the error for a malformed value (an attribute error when parsing, a type error later).
fn check_newshape(newshape: &[i64], invalid: impl Fn(String) -> Error) -> Result<()> {
    let mut inferred = 0;
    for &v in newshape {
        match v {
            -4..=-2 => {
                return Err(Error::Unsupported(format!(
                    "`reshape` with newshape {}: the special value {v} (Relay's -2, -3, -4) \
                     is not supported; only 0 (copy) and -1 (infer) are",
                    fmt_ints(newshape)
                )));
            }
            -1 => inferred += 1,
            v if v < -4 => {
                return Err(invalid(format!(
                    "newshape {} has invalid value {v}",
                    fmt_ints(newshape)
                )));
            }
            _ => {}
        }
    }
    if inferred > 1 {
        return Err(invalid(format!(
            "newshape {} has more than one -1",
            fmt_ints(newshape)
        )));
    }
    Ok(())
}

impl Reshape {
    /// `reshape` to `newshape`.
    pub fn new(newshape: impl Into<Vec<i64>>) -> Reshape {
        Reshape {
            newshape: newshape.into(),
        }
    }

    /// The output shape for data of shape `shape`.
    fn out_shape(&self, shape: &[usize]) -> Result<Vec<usize>> {
        let ns = &self.newshape;
        check_newshape(ns, |m| Error::ty("reshape", m))?;
        let count = numel("reshape", shape)?;
        let mut out = Vec::with_capacity(ns.len());
        let mut inferred = None;
        for (i, &v) in ns.iter().enumerate() {
            out.push(match v {
                0 => *shape.get(i).ok_or_else(|| {
                    Error::ty(
                        "reshape",
                        format!(
                            "newshape {} has 0 at position {i}, which copies that dimension \
                             of data {}, but data has rank {}",
                            fmt_ints(ns),
                            fmt_shape(shape),
                            shape.len()
                        ),
                    )
                })?,
                -1 => {
                    inferred = Some(i);
                    1
                }
                v => usize::try_from(v).map_err(|_| {
                    Error::ty("reshape", format!("newshape {} is too large", fmt_ints(ns)))
                })?,
            });
        }
        let known = numel("reshape", &out)?;
        match inferred {
            Some(i) if known != 0 && count % known == 0 => out[i] = count / known,
            Some(_) => {
                return Err(Error::ty(
                    "reshape",
                    format!(
                        "cannot infer the -1 in newshape {}: data {} has {count} elements, \
                         which is not a multiple of {known}",
                        fmt_ints(ns),
                        fmt_shape(shape)
                    ),
                ));
            }
            None if known != count => {
                return Err(Error::ty(
                    "reshape",
                    format!(
                        "cannot reshape data {} ({count} elements) into newshape {} \
                         ({known} elements)",
                        fmt_shape(shape),
                        fmt_ints(ns)
                    ),
                ));
            }
            None => {}
        }
        Ok(out)
    }
}

impl OpSpec for Reshape {
    fn pattern(&self) -> OpPattern {
        OpPattern::Injective
    }

    /// A shape view: the data is the argument's, in the same row-major order.
    fn is_view(&self, _args: &[Type]) -> bool {
        true
    }

    fn name(&self) -> &str {
        "reshape"
    }

    fn infer_type(&self, args: &[Type]) -> Result<Type> {
        let data = data_arg("reshape", args)?;
        Ok(Type::tensor(self.out_shape(&data.shape)?, data.dtype))
    }

    fn eval(&self, args: &[Value], _out: &Type) -> Result<Value> {
        let data = tensor_value("reshape", args, 0, "data")?;
        Ok(data.reshape(self.out_shape(data.shape())?)?.into())
    }

    fn write_attrs(&self, w: &mut AttrWriter) {
        w.ints("newshape", &self.newshape);
    }
}

// ---------------------------------------------------------------------------------------
// transpose

impl Transpose {
    /// `transpose` with the given axis order (`None` reverses the axes).
    pub fn new(axes: Option<Vec<i64>>) -> Transpose {
        Transpose { axes }
    }

    /// `perm[i]` is the input axis that becomes output axis `i`.
    fn perm(&self, shape: &[usize]) -> Result<Vec<usize>> {
        let rank = shape.len();
        let Some(axes) = &self.axes else {
            return Ok((0..rank).rev().collect());
        };
        let not_perm = || {
            Error::ty(
                "transpose",
                format!(
                    "axes {} is not a permutation of the {rank} axes of data {}",
                    fmt_ints(axes),
                    fmt_shape(shape)
                ),
            )
        };
        if axes.len() != rank {
            return Err(not_perm());
        }
        let mut seen = vec![false; rank];
        let mut perm = Vec::with_capacity(rank);
        for &a in axes {
            let p = normalize_axis("transpose", a, rank).map_err(|_| not_perm())?;
            if std::mem::replace(&mut seen[p], true) {
                return Err(not_perm());
            }
            perm.push(p);
        }
        Ok(perm)
    }
}

impl OpSpec for Transpose {
    fn pattern(&self) -> OpPattern {
        OpPattern::Injective
    }

    fn name(&self) -> &str {
        "transpose"
    }

    fn infer_type(&self, args: &[Type]) -> Result<Type> {
        let data = data_arg("transpose", args)?;
        let perm = self.perm(&data.shape)?;
        Ok(Type::tensor(
            perm.iter().map(|&p| data.shape[p]).collect::<Vec<_>>(),
            data.dtype,
        ))
    }

    fn eval(&self, args: &[Value], _out: &Type) -> Result<Value> {
        let data = tensor_value("transpose", args, 0, "data")?;
        let perm = self.perm(data.shape())?;
        let strides = strides_i64(data.shape());
        let shape = perm.iter().map(|&p| data.shape()[p]).collect();
        let view_strides: Vec<i64> = perm.iter().map(|&p| strides[p]).collect();
        Ok(view(data, shape, 0, &view_strides)?.into())
    }

    fn write_attrs(&self, w: &mut AttrWriter) {
        if let Some(axes) = &self.axes {
            w.ints("axes", axes);
        }
    }
}

// ---------------------------------------------------------------------------------------
// squeeze

impl Squeeze {
    /// `squeeze` of the listed axes (`None`: every axis of size 1).
    pub fn new(axis: Option<Vec<i64>>) -> Squeeze {
        Squeeze { axis }
    }

    /// The output shape for data of shape `shape`.
    fn out_shape(&self, shape: &[usize]) -> Result<Vec<usize>> {
        let Some(axes) = &self.axis else {
            return Ok(shape.iter().copied().filter(|&d| d != 1).collect());
        };
        let mut drop = vec![false; shape.len()];
        for &a in axes {
            let p = axis_of("squeeze", a, shape, "data")?;
            if shape[p] != 1 {
                return Err(Error::ty(
                    "squeeze",
                    format!(
                        "axis {a} of data {} has size {}; only axes of size 1 can be squeezed",
                        fmt_shape(shape),
                        shape[p]
                    ),
                ));
            }
            if std::mem::replace(&mut drop[p], true) {
                return Err(Error::ty(
                    "squeeze",
                    format!(
                        "axis {} names axis {p} of data {} twice",
                        fmt_ints(axes),
                        fmt_shape(shape)
                    ),
                ));
            }
        }
        Ok(shape
            .iter()
            .zip(&drop)
            .filter(|&(_, &d)| !d)
            .map(|(&s, _)| s)
            .collect())
    }
}

impl OpSpec for Squeeze {
    fn pattern(&self) -> OpPattern {
        OpPattern::Injective
    }

    /// A shape view: the data is the argument's, in the same row-major order.
    fn is_view(&self, _args: &[Type]) -> bool {
        true
    }

    fn name(&self) -> &str {
        "squeeze"
    }

    fn infer_type(&self, args: &[Type]) -> Result<Type> {
        let data = data_arg("squeeze", args)?;
        Ok(Type::tensor(self.out_shape(&data.shape)?, data.dtype))
    }

    fn eval(&self, args: &[Value], _out: &Type) -> Result<Value> {
        let data = tensor_value("squeeze", args, 0, "data")?;
        Ok(data.reshape(self.out_shape(data.shape())?)?.into())
    }

    fn write_attrs(&self, w: &mut AttrWriter) {
        if let Some(axis) = &self.axis {
            w.ints("axis", axis);
        }
    }
}

// ---------------------------------------------------------------------------------------
// expand_dims

impl ExpandDims {
    /// `expand_dims` inserting one axis at `axis`.
    pub fn new(axis: i64) -> ExpandDims {
        ExpandDims {
            axis,
            num_newaxis: 1,
        }
    }

    /// The output shape for data of shape `shape`.
    fn out_shape(&self, shape: &[usize]) -> Result<Vec<usize>> {
        let rank = shape.len() as i64;
        if self.axis < -(rank + 1) || self.axis > rank {
            return Err(Error::ty(
                "expand_dims",
                format!(
                    "axis {} is out of range [{}, {rank}] for data {}",
                    self.axis,
                    -(rank + 1),
                    fmt_shape(shape)
                ),
            ));
        }
        if self.num_newaxis > MAX_RANK.saturating_sub(shape.len()) {
            return Err(Error::ty(
                "expand_dims",
                format!(
                    "num_newaxis={} on data {} exceeds the maximum rank {MAX_RANK}",
                    self.num_newaxis,
                    fmt_shape(shape)
                ),
            ));
        }
        let at = if self.axis < 0 {
            self.axis + rank + 1
        } else {
            self.axis
        } as usize;
        let mut out = shape[..at].to_vec();
        out.extend(std::iter::repeat_n(1, self.num_newaxis));
        out.extend_from_slice(&shape[at..]);
        Ok(out)
    }
}

impl OpSpec for ExpandDims {
    fn pattern(&self) -> OpPattern {
        OpPattern::Injective
    }

    /// A shape view: the data is the argument's, in the same row-major order.
    fn is_view(&self, _args: &[Type]) -> bool {
        true
    }

    fn name(&self) -> &str {
        "expand_dims"
    }

    fn infer_type(&self, args: &[Type]) -> Result<Type> {
        let data = data_arg("expand_dims", args)?;
        Ok(Type::tensor(self.out_shape(&data.shape)?, data.dtype))
    }

    fn eval(&self, args: &[Value], _out: &Type) -> Result<Value> {
        let data = tensor_value("expand_dims", args, 0, "data")?;
        Ok(data.reshape(self.out_shape(data.shape())?)?.into())
    }

    fn write_attrs(&self, w: &mut AttrWriter) {
        w.int("axis", self.axis);
        if self.num_newaxis != 1 {
            w.int("num_newaxis", self.num_newaxis as i64);
        }
    }
}

// ---------------------------------------------------------------------------------------
// concatenate

impl Concatenate {
    /// `concatenate` along `axis`.
    pub fn new(axis: i64) -> Concatenate {
        Concatenate { axis }
    }

    /// The normalised axis and the result type for tuple fields `fields`.
    fn plan(&self, fields: &[&TensorType]) -> Result<(usize, TensorType)> {
        let Some(first) = fields.first() else {
            return Err(Error::ty(
                "concatenate",
                "argument 0 (data) is an empty tuple; at least one tensor is needed",
            ));
        };
        let axis = axis_of("concatenate", self.axis, &first.shape, "field 0")?;
        let mut shape = first.shape.clone();
        for (i, f) in fields.iter().enumerate().skip(1) {
            if f.dtype != first.dtype {
                return Err(Error::ty(
                    "concatenate",
                    format!("field {i} is {f} but field 0 is {first}; dtypes must match"),
                ));
            }
            let agree = f.rank() == first.rank()
                && (0..f.rank()).all(|d| d == axis || f.shape[d] == first.shape[d]);
            if !agree {
                return Err(Error::ty(
                    "concatenate",
                    format!(
                        "field {i} has shape {} but field 0 has shape {}; they must agree on \
                         every axis but axis {axis}",
                        fmt_shape(&f.shape),
                        fmt_shape(&first.shape)
                    ),
                ));
            }
            shape[axis] = shape[axis]
                .checked_add(f.shape[axis])
                .ok_or_else(|| Error::ty("concatenate", "the concatenated axis is too long"))?;
        }
        numel("concatenate", &shape)?;
        Ok((axis, TensorType::new(shape, first.dtype)))
    }
}

impl OpSpec for Concatenate {
    fn pattern(&self) -> OpPattern {
        OpPattern::Injective
    }

    fn name(&self) -> &str {
        "concatenate"
    }

    fn infer_type(&self, args: &[Type]) -> Result<Type> {
        expect_arity("concatenate", args, 1)?;
        let Type::Tuple(fields) = &args[0] else {
            return Err(Error::ty(
                "concatenate",
                format!(
                    "argument 0 (data) must be a tuple of tensors, got {}",
                    args[0]
                ),
            ));
        };
        let tensors = fields
            .iter()
            .enumerate()
            .map(|(i, f)| {
                f.as_tensor().ok_or_else(|| {
                    Error::ty(
                        "concatenate",
                        format!("field {i} of argument 0 (data) must be a tensor, got {f}"),
                    )
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(self.plan(&tensors)?.1.into())
    }

    fn eval(&self, args: &[Value], _out: &Type) -> Result<Value> {
        let Some(Value::Tuple(fields)) = args.first() else {
            return Err(Error::Eval(
                "concatenate: argument 0 (data) must be a tuple".into(),
            ));
        };
        let fields = fields
            .iter()
            .enumerate()
            .map(|(i, f)| f.as_tensor(&format!("concatenate field {i}")))
            .collect::<Result<Vec<_>>>()?;
        let types: Vec<TensorType> = fields.iter().map(|f| f.ty()).collect();
        let (axis, out) = self.plan(&types.iter().collect::<Vec<_>>())?;
        // Each field is `outer` rows of `chunk` contiguous elements; the output
        // interleaves one row of every field per outer index.
        let outer: usize = out.shape[..axis].iter().product();
        let inner: usize = out.shape[axis + 1..].iter().product();
        let chunks: Vec<usize> = types.iter().map(|t| t.shape[axis] * inner).collect();
        let mut bases = Vec::with_capacity(fields.len());
        let mut base = 0;
        for f in &fields {
            bases.push(base);
            base += f.numel();
        }
        let all = concat_data(
            out.dtype,
            &fields.iter().map(|f| f.data()).collect::<Vec<_>>(),
        )?;
        let mut idx = Vec::with_capacity(base);
        for o in 0..outer {
            for (&b, &c) in bases.iter().zip(&chunks) {
                idx.extend(b + o * c..b + (o + 1) * c);
            }
        }
        Ok(NDArray::new(out.shape, all.gather(idx))?.into())
    }

    fn write_attrs(&self, w: &mut AttrWriter) {
        if self.axis != 0 {
            w.int("axis", self.axis);
        }
    }
}

// ---------------------------------------------------------------------------------------
// split

/// Checks what can be checked of a split without the input: at least one section, and
/// cut indices that are non-negative and ascending.
fn check_split(spec: &SplitSpec, invalid: impl Fn(String) -> Error) -> Result<()> {
    match spec {
        SplitSpec::Sections(0) => Err(invalid(
            "indices_or_sections=0: cannot split into 0 sections".into(),
        )),
        SplitSpec::Sections(_) => Ok(()),
        SplitSpec::Indices(v) => {
            if v.iter().any(|&i| i < 0) || v.windows(2).any(|w| w[0] > w[1]) {
                Err(invalid(format!(
                    "indices_or_sections={} must be non-negative and ascending",
                    fmt_ints(v)
                )))
            } else {
                Ok(())
            }
        }
    }
}

impl Split {
    /// `split` into `n` equal sections along `axis`.
    pub fn sections(n: usize, axis: i64) -> Split {
        Split {
            indices_or_sections: SplitSpec::Sections(n),
            axis,
        }
    }

    /// `split` before each of `indices` along `axis`.
    pub fn indices(indices: impl Into<Vec<i64>>, axis: i64) -> Split {
        Split {
            indices_or_sections: SplitSpec::Indices(indices.into()),
            axis,
        }
    }

    /// The normalised axis and the `[start, end)` range of each piece along it.
    fn pieces(&self, shape: &[usize]) -> Result<(usize, Vec<(usize, usize)>)> {
        check_split(&self.indices_or_sections, |m| Error::ty("split", m))?;
        let axis = axis_of("split", self.axis, shape, "data")?;
        let len = shape[axis];
        let ranges = match &self.indices_or_sections {
            SplitSpec::Sections(n) => {
                if !len.is_multiple_of(*n) {
                    return Err(Error::ty(
                        "split",
                        format!(
                            "axis {axis} of data {} has length {len}, which does not divide \
                             into {n} sections",
                            fmt_shape(shape)
                        ),
                    ));
                }
                let step = len / n;
                (0..*n).map(|i| (i * step, (i + 1) * step)).collect()
            }
            SplitSpec::Indices(cuts) => {
                // Like numpy.split: cuts past the end clamp to it, giving empty pieces.
                let cuts: Vec<usize> = cuts
                    .iter()
                    .map(|&c| (c as u64).min(len as u64) as usize)
                    .collect();
                let starts = std::iter::once(0).chain(cuts.iter().copied());
                let ends = cuts.iter().copied().chain(std::iter::once(len));
                starts.zip(ends).collect()
            }
        };
        Ok((axis, ranges))
    }
}

impl OpSpec for Split {
    fn pattern(&self) -> OpPattern {
        OpPattern::Injective
    }

    /// Contiguous pieces (a view) when every axis before the split axis has extent 1.
    fn is_view(&self, args: &[Type]) -> bool {
        let Some(t) = args.first().and_then(Type::as_tensor) else {
            return false;
        };
        let rank = t.rank() as i64;
        let axis = if self.axis < 0 {
            self.axis + rank
        } else {
            self.axis
        };
        (0..rank).contains(&axis) && t.shape[..axis as usize].iter().all(|&d| d == 1)
    }

    fn name(&self) -> &str {
        "split"
    }

    fn infer_type(&self, args: &[Type]) -> Result<Type> {
        let data = data_arg("split", args)?;
        let (axis, pieces) = self.pieces(&data.shape)?;
        let fields = pieces
            .into_iter()
            .map(|(start, end)| {
                let mut shape = data.shape.clone();
                shape[axis] = end - start;
                Type::tensor(shape, data.dtype)
            })
            .collect();
        Ok(Type::Tuple(fields))
    }

    fn eval(&self, args: &[Value], _out: &Type) -> Result<Value> {
        let data = tensor_value("split", args, 0, "data")?;
        let (axis, pieces) = self.pieces(data.shape())?;
        let strides = strides_i64(data.shape());
        let fields = pieces
            .into_iter()
            .map(|(start, end)| {
                let mut shape = data.shape().to_vec();
                shape[axis] = end - start;
                Ok(view(data, shape, start as i64 * strides[axis], &strides)?.into())
            })
            .collect::<Result<Vec<Value>>>()?;
        Ok(Value::Tuple(fields))
    }

    fn write_attrs(&self, w: &mut AttrWriter) {
        match &self.indices_or_sections {
            SplitSpec::Sections(n) => w.int("indices_or_sections", *n as i64),
            SplitSpec::Indices(v) => w.ints("indices_or_sections", v),
        };
        if self.axis != 0 {
            w.int("axis", self.axis);
        }
    }
}

// ---------------------------------------------------------------------------------------
// strided_slice

/// One axis of a strided slice: the first input index, the number of elements taken
/// and the step between them.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
struct AxisSlice {
    start: i64,
    len: usize,
    stride: i64,
}

/// numpy's slice `begin:end:stride` of an axis of extent `dim` (`stride != 0`).
/// Negative bounds count from the end; bounds clamp to `[0, dim]` for a positive stride
/// and to `[-1, dim - 1]` for a negative one, where missing bounds run from the end
/// backwards.
fn slice_axis(begin: Option<i64>, end: Option<i64>, stride: i64, dim: usize) -> AxisSlice {
    let n = dim as i128;
    let s = stride as i128;
    let (lo, hi) = if s > 0 { (0, n) } else { (-1, n - 1) };
    let bound = |x: i64| {
        let x = x as i128;
        (if x < 0 { x + n } else { x }).clamp(lo, hi)
    };
    let (b, e) = if s > 0 {
        (begin.map_or(0, bound), end.map_or(n, bound))
    } else {
        (begin.map_or(n - 1, bound), end.map_or(-1, bound))
    };
    let span = if s > 0 { e - b } else { b - e };
    let step = s.abs();
    let len = if span > 0 {
        (span + step - 1) / step
    } else {
        0
    };
    AxisSlice {
        start: b as i64,
        len: len as usize,
        stride,
    }
}

/// Checks the strides of a strided slice: none may be 0.
fn check_strides(strides: Option<&[i64]>, invalid: impl Fn(String) -> Error) -> Result<()> {
    match strides {
        Some(s) if s.contains(&0) => Err(invalid(format!(
            "strides {} contains 0; every stride must be non-zero",
            fmt_ints(s)
        ))),
        _ => Ok(()),
    }
}

impl StridedSlice {
    /// `strided_slice` with unit strides over the leading axes.
    pub fn new(begin: impl Into<Vec<i64>>, end: impl Into<Vec<i64>>) -> StridedSlice {
        StridedSlice {
            begin: begin.into(),
            end: end.into(),
            strides: None,
            axes: None,
        }
    }

    /// The slice of every axis of data of shape `shape`.
    fn plan(&self, shape: &[usize]) -> Result<Vec<AxisSlice>> {
        const OP: &str = "strided_slice";
        let strides = self.strides.as_deref().unwrap_or(&[]);
        check_strides(self.strides.as_deref(), |m| Error::ty(OP, m))?;
        let lists = || {
            let mut s = format!(
                "begin {}, end {}",
                fmt_ints(&self.begin),
                fmt_ints(&self.end)
            );
            if let Some(st) = &self.strides {
                s += &format!(", strides {}", fmt_ints(st));
            }
            s
        };
        let longest = self.begin.len().max(self.end.len()).max(strides.len());
        let axes: Vec<usize> = match &self.axes {
            Some(axes) => {
                if longest > axes.len() {
                    return Err(Error::ty(
                        OP,
                        format!(
                            "{} must not be longer than axes {}",
                            lists(),
                            fmt_ints(axes)
                        ),
                    ));
                }
                let mut seen = vec![false; shape.len()];
                let mut out = Vec::with_capacity(axes.len());
                for &a in axes {
                    let p = axis_of(OP, a, shape, "data")?;
                    if std::mem::replace(&mut seen[p], true) {
                        return Err(Error::ty(
                            OP,
                            format!("axes {} names axis {p} twice", fmt_ints(axes)),
                        ));
                    }
                    out.push(p);
                }
                out
            }
            None => {
                if longest > shape.len() {
                    return Err(Error::ty(
                        OP,
                        format!(
                            "{} slice {longest} axes but data {} has rank {}",
                            lists(),
                            fmt_shape(shape),
                            shape.len()
                        ),
                    ));
                }
                (0..longest).collect()
            }
        };
        let mut plan: Vec<AxisSlice> = shape
            .iter()
            .map(|&d| AxisSlice {
                start: 0,
                len: d,
                stride: 1,
            })
            .collect();
        for (k, &axis) in axes.iter().enumerate() {
            let stride = strides.get(k).copied().unwrap_or(1);
            plan[axis] = slice_axis(
                self.begin.get(k).copied(),
                self.end.get(k).copied(),
                stride,
                shape[axis],
            );
        }
        Ok(plan)
    }
}

impl OpSpec for StridedSlice {
    fn pattern(&self) -> OpPattern {
        OpPattern::Injective
    }

    fn name(&self) -> &str {
        "strided_slice"
    }

    fn infer_type(&self, args: &[Type]) -> Result<Type> {
        let data = data_arg("strided_slice", args)?;
        let plan = self.plan(&data.shape)?;
        Ok(Type::tensor(
            plan.iter().map(|a| a.len).collect::<Vec<_>>(),
            data.dtype,
        ))
    }

    fn eval(&self, args: &[Value], _out: &Type) -> Result<Value> {
        let data = tensor_value("strided_slice", args, 0, "data")?;
        let plan = self.plan(data.shape())?;
        let strides = strides_i64(data.shape());
        let offset = plan.iter().zip(&strides).map(|(a, &s)| a.start * s).sum();
        // An axis taking at most one element never steps, so a huge stride there
        // cannot overflow the index arithmetic.
        let view_strides: Vec<i64> = plan
            .iter()
            .zip(&strides)
            .map(|(a, &s)| if a.len > 1 { a.stride * s } else { 0 })
            .collect();
        let shape = plan.iter().map(|a| a.len).collect();
        Ok(view(data, shape, offset, &view_strides)?.into())
    }

    fn write_attrs(&self, w: &mut AttrWriter) {
        w.ints("begin", &self.begin);
        w.ints("end", &self.end);
        if let Some(s) = &self.strides {
            w.ints("strides", s);
        }
        if let Some(a) = &self.axes {
            w.ints("axes", a);
        }
    }
}

// ---------------------------------------------------------------------------------------
// take

/// Where [`Take`] reads: data is `outer` blocks of `extent` rows of `inner` elements.
struct TakePlan {
    outer: usize,
    extent: usize,
    inner: usize,
    out_shape: Vec<usize>,
}

impl TakeMode {
    /// The attribute spelling (`"clip"`, `"wrap"`).
    pub fn name(self) -> &'static str {
        match self {
            TakeMode::Clip => "clip",
            TakeMode::Wrap => "wrap",
        }
    }

    /// Index `i` mapped into `0..n` (`n > 0`).
    fn apply(self, i: i64, n: usize) -> usize {
        match self {
            TakeMode::Clip => i.clamp(0, n as i64 - 1) as usize,
            TakeMode::Wrap => i.rem_euclid(n as i64) as usize,
        }
    }
}

impl Take {
    /// `take` along `axis` (`None`: from the flattened data) in clip mode.
    pub fn new(axis: Option<i64>) -> Take {
        Take {
            axis,
            mode: TakeMode::Clip,
        }
    }

    fn plan(&self, data: &[usize], indices: &[usize]) -> Result<TakePlan> {
        let plan = match self.axis {
            None => TakePlan {
                outer: 1,
                extent: numel("take", data)?,
                inner: 1,
                out_shape: indices.to_vec(),
            },
            Some(a) => {
                let p = axis_of("take", a, data, "data")?;
                let mut out_shape = data[..p].to_vec();
                out_shape.extend_from_slice(indices);
                out_shape.extend_from_slice(&data[p + 1..]);
                TakePlan {
                    outer: data[..p].iter().product(),
                    extent: data[p],
                    inner: data[p + 1..].iter().product(),
                    out_shape,
                }
            }
        };
        if plan.extent == 0 {
            let what = match self.axis {
                None => String::from("the flattened data"),
                Some(a) => format!("axis {a}"),
            };
            return Err(Error::ty(
                "take",
                format!(
                    "cannot take from {what} of data {}: it has no elements",
                    fmt_shape(data)
                ),
            ));
        }
        numel("take", &plan.out_shape)?;
        Ok(plan)
    }
}

impl OpSpec for Take {
    fn pattern(&self) -> OpPattern {
        OpPattern::Injective
    }

    fn name(&self) -> &str {
        "take"
    }

    fn infer_type(&self, args: &[Type]) -> Result<Type> {
        expect_arity("take", args, 2)?;
        let data = tensor_arg("take", args, 0, "data")?;
        let indices = tensor_arg("take", args, 1, "indices")?;
        if !matches!(indices.dtype, DType::I32 | DType::I64) {
            return Err(Error::ty(
                "take",
                format!("argument 1 (indices) must be an int32 or int64 tensor, got {indices}"),
            ));
        }
        let plan = self.plan(&data.shape, &indices.shape)?;
        Ok(Type::tensor(plan.out_shape, data.dtype))
    }

    fn eval(&self, args: &[Value], _out: &Type) -> Result<Value> {
        let data = tensor_value("take", args, 0, "data")?;
        let indices = tensor_value("take", args, 1, "indices")?;
        let plan = self.plan(data.shape(), indices.shape())?;
        let rows: Vec<usize> = indices
            .to_i64_vec()
            .into_iter()
            .map(|i| self.mode.apply(i, plan.extent))
            .collect();
        let mut idx = Vec::with_capacity(plan.outer * rows.len() * plan.inner);
        for o in 0..plan.outer {
            for &r in &rows {
                let start = (o * plan.extent + r) * plan.inner;
                idx.extend(start..start + plan.inner);
            }
        }
        Ok(NDArray::new(plan.out_shape, data.data().gather(idx))?.into())
    }

    fn write_attrs(&self, w: &mut AttrWriter) {
        if let Some(a) = self.axis {
            w.int("axis", a);
        }
        if self.mode != TakeMode::Clip {
            w.str("mode", self.mode.name());
        }
    }
}

// ---------------------------------------------------------------------------------------
// parsing

/// Parses an op of this family from its name and attributes.
pub(super) fn parse(name: &str, r: &mut AttrReader) -> Option<Result<Op>> {
    Some(match name {
        "reshape" => parse_reshape(r),
        "transpose" => r.ints("axes").map(|axes| Transpose { axes }.into()),
        "squeeze" => r.ints("axis").map(|axis| Squeeze { axis }.into()),
        "expand_dims" => parse_expand_dims(r),
        "concatenate" => r
            .int("axis")
            .map(|a| Concatenate::new(a.unwrap_or(0)).into()),
        "split" => parse_split(r),
        "strided_slice" => parse_strided_slice(r),
        "take" => parse_take(r),
        _ => return None,
    })
}

/// A required attribute.
fn required<T>(r: &AttrReader, name: &str, v: Option<T>) -> Result<T> {
    v.ok_or_else(|| r.error(name, "is required"))
}

fn parse_reshape(r: &mut AttrReader) -> Result<Op> {
    let newshape = r.ints("newshape")?;
    let newshape = required(r, "newshape", newshape)?;
    check_newshape(&newshape, |m| r.error("newshape", m))?;
    Ok(Reshape { newshape }.into())
}

fn parse_expand_dims(r: &mut AttrReader) -> Result<Op> {
    let axis = r.int("axis")?;
    let axis = required(r, "axis", axis)?;
    let num_newaxis = r.usize("num_newaxis")?.unwrap_or(1);
    Ok(ExpandDims { axis, num_newaxis }.into())
}

fn parse_split(r: &mut AttrReader) -> Result<Op> {
    const ATTR: &str = "indices_or_sections";
    let spec = match r.take(ATTR) {
        None => return Err(r.error(ATTR, "is required")),
        Some(AttrValue::Int(n)) => SplitSpec::Sections(usize::try_from(n).map_err(|_| {
            r.error(
                ATTR,
                format!("the number of sections must not be negative, found {n}"),
            )
        })?),
        Some(AttrValue::List(items)) => SplitSpec::Indices(
            items
                .into_iter()
                .map(|v| match v {
                    AttrValue::Int(i) => Ok(i),
                    v => Err(r.error(ATTR, format!("expected a list of integers, found `{v}`"))),
                })
                .collect::<Result<_>>()?,
        ),
        Some(v) => {
            return Err(r.error(
                ATTR,
                format!("expected a number of sections or a list of indices, found `{v}`"),
            ));
        }
    };
    check_split(&spec, |m| r.error(ATTR, m))?;
    let axis = r.int("axis")?.unwrap_or(0);
    Ok(Split {
        indices_or_sections: spec,
        axis,
    }
    .into())
}

fn parse_strided_slice(r: &mut AttrReader) -> Result<Op> {
    let begin = r.ints("begin")?;
    let begin = required(r, "begin", begin)?;
    let end = r.ints("end")?;
    let end = required(r, "end", end)?;
    let strides = r.ints("strides")?;
    check_strides(strides.as_deref(), |m| r.error("strides", m))?;
    let axes = r.ints("axes")?;
    // Relay's other slice mode ("size") is not supported.
    r.expect_str("slice_mode", "end")?;
    Ok(StridedSlice {
        begin,
        end,
        strides,
        axes,
    }
    .into())
}

fn parse_take(r: &mut AttrReader) -> Result<Op> {
    let axis = r.int("axis")?;
    let mode = match r.str("mode")?.as_deref() {
        None | Some("clip") => TakeMode::Clip,
        Some("wrap") => TakeMode::Wrap,
        Some("fast") => {
            return Err(Error::Unsupported(
                "`take` with mode=\"fast\" (no bounds handling); use \"clip\" or \"wrap\"".into(),
            ));
        }
        Some(other) => {
            return Err(r.error(
                "mode",
                format!("expected \"clip\", \"wrap\" or \"fast\", found \"{other}\""),
            ));
        }
    };
    // Relay's batched take is not supported; accept its default.
    match r.int("batch_dims")? {
        None | Some(0) => {}
        Some(b) => {
            return Err(Error::Unsupported(format!(
                "`take` with batch_dims={b} (only 0 is supported)"
            )));
        }
    }
    Ok(Take { axis, mode }.into())
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// `0, 1, 2, ...` as int64 in `shape`: every element names its own flat index.
    fn arange(shape: &[usize]) -> NDArray {
        let n: usize = shape.iter().product();
        NDArray::from_vec(shape.to_vec(), (0..n as i64).collect::<Vec<_>>()).unwrap()
    }

    fn ints(v: &Value) -> Vec<i64> {
        v.as_tensor("test").unwrap().to_vec::<i64>().unwrap()
    }

    fn shape_of(v: &Value) -> Vec<usize> {
        v.as_tensor("test").unwrap().shape().to_vec()
    }

    /// Type-checks then evaluates `op`, asserting the value has the inferred type.
    fn run(op: impl Into<Op>, args: Vec<Value>) -> Result<Value> {
        let op = op.into();
        let types: Vec<Type> = args.iter().map(Value::ty).collect();
        let out = op.infer_type(&types)?;
        let v = op.eval(&args, &out)?;
        assert_eq!(
            v.ty(),
            out,
            "{op}: value type differs from the inferred type"
        );
        Ok(v)
    }

    fn run1(op: impl Into<Op>, data: NDArray) -> Value {
        run(op, vec![data.into()]).unwrap()
    }

    fn infer(op: impl Into<Op>, args: &[Type]) -> Result<Type> {
        op.into().infer_type(args)
    }

    fn t(shape: &[usize]) -> Type {
        Type::tensor(shape.to_vec(), DType::F32)
    }

    /// The type error's text, asserting it is one for `op`.
    fn type_err(r: Result<Type>, op: &str) -> String {
        let e = r.unwrap_err();
        assert!(matches!(&e, Error::Type { op: o, .. } if o == op), "{e:?}");
        e.to_string()
    }

    #[test]
    fn reshape_type_rule() {
        let x = [t(&[2, 3, 4])];
        assert_eq!(infer(Reshape::new([0, -1]), &x).unwrap(), t(&[2, 12]));
        assert_eq!(infer(Reshape::new([4, 0, -1]), &x).unwrap(), t(&[4, 3, 2]));
        assert_eq!(infer(Reshape::new([-1]), &x).unwrap(), t(&[24]));
        let e = type_err(infer(Reshape::new([5, -1]), &x), "reshape");
        assert!(
            e.contains("[5, -1]") && e.contains("(2, 3, 4)") && e.contains("24"),
            "{e}"
        );
        let e = type_err(infer(Reshape::new([7, 7]), &x), "reshape");
        assert!(
            e.contains("data (2, 3, 4) (24 elements) into newshape [7, 7] (49"),
            "{e}"
        );
        let e = type_err(infer(Reshape::new([-1, -1]), &x), "reshape");
        assert!(e.contains("more than one -1"), "{e}");
        let e = type_err(infer(Reshape::new([2, 3, 4, 0]), &x), "reshape");
        assert!(e.contains("0 at position 3") && e.contains("rank 3"), "{e}");
        let e = infer(Reshape::new([-3, 4]), &x).unwrap_err();
        assert!(
            matches!(e, Error::Unsupported(_)) && e.to_string().contains("-3"),
            "{e}"
        );
        let e = type_err(infer(Reshape::new([6]), &[]), "reshape");
        assert!(e.contains("expects 1 argument"), "{e}");
    }

    #[test]
    fn reshape_eval() {
        let v = run1(Reshape::new([3, -1]), arange(&[2, 3]));
        assert_eq!(shape_of(&v), [3, 2]);
        assert_eq!(ints(&v), [0, 1, 2, 3, 4, 5]);
        let v = run1(Reshape::new([0, -1]), arange(&[2, 3, 2]));
        assert_eq!(shape_of(&v), [2, 6]);
        assert_eq!(ints(&v), (0..12).collect::<Vec<_>>());
        let b = NDArray::from_vec([4], vec![true, false, false, true]).unwrap();
        let v = run1(Reshape::new([2, 2]), b);
        let got = v.as_tensor("b").unwrap().to_vec::<bool>().unwrap();
        assert_eq!(got, [true, false, false, true]);
    }

    #[test]
    fn transpose_type_rule() {
        let x = [t(&[2, 3, 4])];
        assert_eq!(infer(Transpose::new(None), &x).unwrap(), t(&[4, 3, 2]));
        assert_eq!(
            infer(Transpose::new(Some(vec![1, 0, 2])), &x).unwrap(),
            t(&[3, 2, 4])
        );
        assert_eq!(
            infer(Transpose::new(Some(vec![-1, 0, 1])), &x).unwrap(),
            t(&[4, 2, 3])
        );
        let e = type_err(infer(Transpose::new(Some(vec![0, 0, 1])), &x), "transpose");
        assert!(e.contains("axes [0, 0, 1] is not a permutation of the 3 axes of data (2, 3, 4)"));
        let e = type_err(infer(Transpose::new(Some(vec![1, 0])), &x), "transpose");
        assert!(e.contains("[1, 0]") && e.contains("(2, 3, 4)"), "{e}");
        let e = type_err(infer(Transpose::new(Some(vec![0, 1, 3])), &x), "transpose");
        assert!(e.contains("[0, 1, 3]"), "{e}");
    }

    #[test]
    fn transpose_eval() {
        // out[k, i, j] = in[i, j, k] = 12i + 4j + k.
        let v = run1(Transpose::new(Some(vec![2, 0, 1])), arange(&[2, 3, 4]));
        assert_eq!(shape_of(&v), [4, 2, 3]);
        let out = ints(&v);
        assert_eq!(out[6 + 2], 9); // out[1, 0, 2] = in[0, 2, 1]
        assert_eq!(out[3 * 6 + 3], 15); // out[3, 1, 0] = in[1, 0, 3]
        assert_eq!(out[2 * 6 + 3 + 2], 22); // out[2, 1, 2] = in[1, 2, 2]
        assert_eq!(out[0], 0);
        let v = run1(Transpose::new(None), arange(&[2, 3]));
        assert_eq!(ints(&v), [0, 3, 1, 4, 2, 5]);
        let h = NDArray::from_f64([2, 2], DType::F16, vec![1.0, 2.0, 3.0, 4.0]).unwrap();
        let v = run1(Transpose::new(None), h);
        assert_eq!(v.as_tensor("h").unwrap().to_f64_vec(), [1.0, 3.0, 2.0, 4.0]);
    }

    #[test]
    fn squeeze_type_rule() {
        let x = [t(&[1, 3, 1, 2])];
        assert_eq!(infer(Squeeze::new(None), &x).unwrap(), t(&[3, 2]));
        assert_eq!(
            infer(Squeeze::new(Some(vec![-2])), &x).unwrap(),
            t(&[1, 3, 2])
        );
        assert_eq!(
            infer(Squeeze::new(Some(vec![])), &x).unwrap(),
            t(&[1, 3, 1, 2])
        );
        let e = type_err(infer(Squeeze::new(Some(vec![1])), &x), "squeeze");
        assert!(e.contains("axis 1 of data (1, 3, 1, 2) has size 3"), "{e}");
        let e = type_err(infer(Squeeze::new(Some(vec![4])), &x), "squeeze");
        assert!(
            e.contains("axis 4 is out of range for data (1, 3, 1, 2)"),
            "{e}"
        );
        let e = type_err(infer(Squeeze::new(Some(vec![0, -4])), &x), "squeeze");
        assert!(e.contains("twice"), "{e}");
    }

    #[test]
    fn squeeze_eval() {
        let v = run1(Squeeze::new(Some(vec![0])), arange(&[1, 2, 3]));
        assert_eq!(shape_of(&v), [2, 3]);
        assert_eq!(ints(&v), [0, 1, 2, 3, 4, 5]);
        let v = run1(Squeeze::new(None), arange(&[1, 1]));
        assert_eq!((shape_of(&v), ints(&v)), (vec![], vec![0]));
    }

    #[test]
    fn expand_dims_type_rule() {
        let x = [t(&[2, 3])];
        assert_eq!(infer(ExpandDims::new(0), &x).unwrap(), t(&[1, 2, 3]));
        assert_eq!(infer(ExpandDims::new(2), &x).unwrap(), t(&[2, 3, 1]));
        assert_eq!(infer(ExpandDims::new(-1), &x).unwrap(), t(&[2, 3, 1]));
        assert_eq!(infer(ExpandDims::new(-3), &x).unwrap(), t(&[1, 2, 3]));
        let two = ExpandDims {
            axis: 1,
            num_newaxis: 2,
        };
        assert_eq!(infer(two, &x).unwrap(), t(&[2, 1, 1, 3]));
        let e = type_err(infer(ExpandDims::new(3), &x), "expand_dims");
        assert!(
            e.contains("axis 3 is out of range [-3, 2] for data (2, 3)"),
            "{e}"
        );
        let e = type_err(infer(ExpandDims::new(-4), &x), "expand_dims");
        assert!(e.contains("axis -4"), "{e}");
        let huge = ExpandDims {
            axis: 0,
            num_newaxis: usize::MAX,
        };
        assert!(type_err(infer(huge, &x), "expand_dims").contains("maximum rank"));
    }

    #[test]
    fn expand_dims_eval() {
        let v = run1(ExpandDims::new(1), arange(&[2, 2]));
        assert_eq!((shape_of(&v), ints(&v)), (vec![2, 1, 2], vec![0, 1, 2, 3]));
    }

    fn tuple(fields: Vec<NDArray>) -> Value {
        Value::Tuple(fields.into_iter().map(Value::Tensor).collect())
    }

    #[test]
    fn concatenate_type_rule() {
        let tup = |shapes: &[&[usize]]| Type::Tuple(shapes.iter().map(|s| t(s)).collect());
        let c = Concatenate::new(1);
        assert_eq!(
            infer(c.clone(), &[tup(&[&[2, 1], &[2, 3]])]).unwrap(),
            t(&[2, 4])
        );
        assert_eq!(
            infer(Concatenate::new(-2), &[tup(&[&[2, 1], &[3, 1]])]).unwrap(),
            t(&[5, 1])
        );
        let e = type_err(
            infer(c.clone(), &[tup(&[&[2, 1], &[2, 3], &[3, 3]])]),
            "concatenate",
        );
        assert!(
            e.contains("field 2 has shape (3, 3) but field 0 has shape (2, 1)"),
            "{e}"
        );
        assert!(e.contains("every axis but axis 1"), "{e}");
        let e = type_err(
            infer(c.clone(), &[tup(&[&[2, 1], &[2, 1, 1]])]),
            "concatenate",
        );
        assert!(e.contains("field 1 has shape (2, 1, 1)"), "{e}");
        let mixed = Type::Tuple(vec![t(&[2]), Type::tensor([2], DType::I32)]);
        let e = type_err(infer(Concatenate::new(0), &[mixed]), "concatenate");
        assert!(e.contains("field 1 is Tensor[(2), int32] but field 0 is Tensor[(2), float32]"));
        let e = type_err(infer(c.clone(), &[t(&[2, 2])]), "concatenate");
        assert!(e.contains("argument 0 (data) must be a tuple"), "{e}");
        let e = type_err(infer(c.clone(), &[tup(&[])]), "concatenate");
        assert!(e.contains("empty tuple"), "{e}");
        let e = type_err(infer(c, &[tup(&[&[3]])]), "concatenate");
        assert!(e.contains("axis 1 is out of range for field 0 (3)"), "{e}");
    }

    #[test]
    fn concatenate_eval() {
        let a = NDArray::from_vec([2, 1], vec![0i64, 1]).unwrap();
        let b = NDArray::from_vec([2, 2], vec![10i64, 11, 12, 13]).unwrap();
        let v = run(Concatenate::new(1), vec![tuple(vec![a.clone(), b.clone()])]).unwrap();
        assert_eq!(
            (shape_of(&v), ints(&v)),
            (vec![2, 3], vec![0, 10, 11, 1, 12, 13])
        );
        let c = NDArray::from_vec([1, 1], vec![7i64]).unwrap();
        let v = run(Concatenate::new(0), vec![tuple(vec![a, c])]).unwrap();
        assert_eq!((shape_of(&v), ints(&v)), (vec![3, 1], vec![0, 1, 7]));
    }

    #[test]
    fn split_type_rule() {
        let x = [t(&[2, 6])];
        let three = Type::Tuple(vec![t(&[2, 2]), t(&[2, 2]), t(&[2, 2])]);
        assert_eq!(infer(Split::sections(3, 1), &x).unwrap(), three);
        let cut = Type::Tuple(vec![t(&[2, 1]), t(&[2, 3]), t(&[2, 2]), t(&[2, 0])]);
        assert_eq!(infer(Split::indices([1, 4, 6], -1), &x).unwrap(), cut);
        let past = Type::Tuple(vec![t(&[2, 6]), t(&[2, 0]), t(&[2, 0])]);
        assert_eq!(infer(Split::indices([7, 9], 1), &x).unwrap(), past);
        let e = type_err(infer(Split::sections(4, 1), &x), "split");
        assert!(e.contains("axis 1 of data (2, 6) has length 6") && e.contains("4 sections"));
        let e = type_err(infer(Split::indices([3, 1], 1), &x), "split");
        assert!(
            e.contains("[3, 1] must be non-negative and ascending"),
            "{e}"
        );
        let e = type_err(infer(Split::sections(0, 0), &x), "split");
        assert!(e.contains("0 sections"), "{e}");
        let e = type_err(infer(Split::sections(2, 2), &x), "split");
        assert!(e.contains("axis 2 is out of range for data (2, 6)"), "{e}");
    }

    #[test]
    fn split_eval() {
        let v = run1(Split::indices([2, 5], 0), arange(&[7]));
        let Value::Tuple(parts) = v else {
            panic!("split must give a tuple")
        };
        let got: Vec<Vec<i64>> = parts.iter().map(ints).collect();
        assert_eq!(got, [vec![0, 1], vec![2, 3, 4], vec![5, 6]]);
        let v = run1(Split::indices([3, 9], 0), arange(&[5]));
        let Value::Tuple(parts) = v else {
            panic!("split must give a tuple")
        };
        let got: Vec<Vec<i64>> = parts.iter().map(ints).collect();
        assert_eq!(got, [vec![0, 1, 2], vec![3, 4], vec![]]);
        let v = run1(Split::sections(2, 1), arange(&[2, 4]));
        let Value::Tuple(parts) = v else {
            panic!("split must give a tuple")
        };
        let got: Vec<Vec<i64>> = parts.iter().map(ints).collect();
        assert_eq!(got, [vec![0, 1, 4, 5], vec![2, 3, 6, 7]]);
    }

    fn slice(
        begin: &[i64],
        end: &[i64],
        strides: Option<&[i64]>,
        axes: Option<&[i64]>,
    ) -> StridedSlice {
        StridedSlice {
            begin: begin.to_vec(),
            end: end.to_vec(),
            strides: strides.map(<[i64]>::to_vec),
            axes: axes.map(<[i64]>::to_vec),
        }
    }

    #[test]
    fn strided_slice_type_rule() {
        let x = [t(&[3, 4, 5])];
        assert_eq!(
            infer(slice(&[1], &[3], None, None), &x).unwrap(),
            t(&[2, 4, 5])
        );
        assert_eq!(
            infer(slice(&[0, 0], &[9, 9], Some(&[2, 3]), None), &x).unwrap(),
            t(&[2, 2, 5])
        );
        let on_last = slice(&[-1], &[0], Some(&[-1]), Some(&[2]));
        assert_eq!(infer(on_last, &x).unwrap(), t(&[3, 4, 4]));
        assert_eq!(
            infer(slice(&[2], &[1], None, None), &x).unwrap(),
            t(&[0, 4, 5])
        );
        let e = type_err(
            infer(slice(&[0, 0], &[1, 1], Some(&[1, 0]), None), &x),
            "strided_slice",
        );
        assert!(e.contains("strides [1, 0] contains 0"), "{e}");
        let e = type_err(
            infer(slice(&[0; 4], &[1; 4], None, None), &x),
            "strided_slice",
        );
        assert!(
            e.contains("slice 4 axes but data (3, 4, 5) has rank 3"),
            "{e}"
        );
        let e = type_err(
            infer(slice(&[0, 0], &[1, 1], None, Some(&[1])), &x),
            "strided_slice",
        );
        assert!(e.contains("must not be longer than axes [1]"), "{e}");
        let e = type_err(
            infer(slice(&[0], &[1], None, Some(&[3])), &x),
            "strided_slice",
        );
        assert!(
            e.contains("axis 3 is out of range for data (3, 4, 5)"),
            "{e}"
        );
    }

    #[test]
    fn strided_slice_eval() {
        // numpy: np.arange(5)[3:0:-2] == [3, 1]
        let v = run1(slice(&[3], &[0], Some(&[-2]), None), arange(&[5]));
        assert_eq!(ints(&v), [3, 1]);
        // a = np.arange(12).reshape(3, 4); a[2:-4:-1, 1:10:2] == [[9, 11], [5, 7], [1, 3]]
        let v = run1(
            slice(&[2, 1], &[-4, 10], Some(&[-1, 2]), None),
            arange(&[3, 4]),
        );
        assert_eq!(
            (shape_of(&v), ints(&v)),
            (vec![3, 2], vec![9, 11, 5, 7, 1, 3])
        );
        // a[1:2] keeps the other axis whole.
        let v = run1(slice(&[1], &[2], None, None), arange(&[3, 4]));
        assert_eq!((shape_of(&v), ints(&v)), (vec![1, 4], vec![4, 5, 6, 7]));
        // a[:, -1:0:-1] == [[3, 2, 1], [7, 6, 5], [11, 10, 9]]
        let v = run1(slice(&[-1], &[0], Some(&[-1]), Some(&[1])), arange(&[3, 4]));
        assert_eq!(ints(&v), [3, 2, 1, 7, 6, 5, 11, 10, 9]);
        // np.arange(4)[2::-1] == [2, 1, 0]: a missing end runs backwards past index 0.
        let v = run1(slice(&[2], &[], Some(&[-1]), None), arange(&[4]));
        assert_eq!(ints(&v), [2, 1, 0]);
        // Missing begin with a negative stride starts at the end: a[::-3] == [4, 1].
        let v = run1(slice(&[], &[], Some(&[-3]), None), arange(&[5]));
        assert_eq!(ints(&v), [4, 1]);
        // Relay's "to the end" sentinel and a huge stride clamp without overflow.
        let v = run1(
            slice(&[1], &[i64::MAX], Some(&[i64::MAX]), None),
            arange(&[5]),
        );
        assert_eq!(ints(&v), [1]);
        let v = run1(
            slice(&[i64::MIN], &[i64::MIN], Some(&[i64::MIN]), None),
            arange(&[5]),
        );
        assert_eq!(ints(&v), Vec::<i64>::new());
    }

    #[test]
    fn take_type_rule() {
        let i = |s: &[usize]| Type::tensor(s.to_vec(), DType::I64);
        let x = t(&[2, 3, 4]);
        let take1 = Take::new(Some(1));
        assert_eq!(
            infer(take1.clone(), &[x.clone(), i(&[5, 6])]).unwrap(),
            t(&[2, 5, 6, 4])
        );
        assert_eq!(
            infer(take1.clone(), &[x.clone(), i(&[])]).unwrap(),
            t(&[2, 4])
        );
        assert_eq!(
            infer(Take::new(None), &[x.clone(), i(&[7])]).unwrap(),
            t(&[7])
        );
        let e = type_err(infer(take1.clone(), &[x.clone(), t(&[2])]), "take");
        assert!(e.contains(
            "argument 1 (indices) must be an int32 or int64 tensor, got Tensor[(2), float32]"
        ));
        let e = type_err(infer(take1.clone(), &[t(&[2, 0]), i(&[1])]), "take");
        assert!(e.contains("cannot take from axis 1 of data (2, 0)"), "{e}");
        let e = type_err(infer(Take::new(None), &[t(&[0, 3]), i(&[1])]), "take");
        assert!(e.contains("flattened data of data (0, 3)"), "{e}");
        let e = type_err(infer(Take::new(Some(3)), &[x.clone(), i(&[1])]), "take");
        assert!(
            e.contains("axis 3 is out of range for data (2, 3, 4)"),
            "{e}"
        );
        let e = type_err(infer(take1, &[x]), "take");
        assert!(e.contains("expects 2 argument"), "{e}");
    }

    #[test]
    fn take_eval() {
        let idx = NDArray::from_vec([1, 2], vec![2i64, 0]).unwrap();
        let v = run(Take::new(Some(1)), vec![arange(&[2, 3]).into(), idx.into()]).unwrap();
        assert_eq!((shape_of(&v), ints(&v)), (vec![2, 1, 2], vec![2, 0, 5, 3]));
        let idx = NDArray::from_vec([4], vec![-1i32, 7, 3, -7]).unwrap();
        let clip = run(
            Take::new(None),
            vec![arange(&[2, 3]).into(), idx.clone().into()],
        )
        .unwrap();
        assert_eq!(ints(&clip), [0, 5, 3, 0]);
        let wrap = Take {
            axis: None,
            mode: TakeMode::Wrap,
        };
        let v = run(wrap, vec![arange(&[2, 3]).into(), idx.into()]).unwrap();
        assert_eq!(ints(&v), [5, 1, 3, 5]);
        let idx = NDArray::from_vec([2], vec![1i64, 0]).unwrap();
        let v = run(Take::new(Some(0)), vec![arange(&[2, 2]).into(), idx.into()]).unwrap();
        assert_eq!(ints(&v), [2, 3, 0, 1]);
    }

    fn every_op() -> Vec<Op> {
        vec![
            Reshape::new([0, -1, 4]).into(),
            Transpose::new(None).into(),
            Transpose::new(Some(vec![1, 0, -1])).into(),
            Squeeze::new(None).into(),
            Squeeze::new(Some(vec![])).into(),
            Squeeze::new(Some(vec![0, 2])).into(),
            ExpandDims::new(-1).into(),
            ExpandDims {
                axis: 2,
                num_newaxis: 3,
            }
            .into(),
            Concatenate::new(0).into(),
            Concatenate::new(-1).into(),
            Split::sections(3, 0).into(),
            Split::sections(1, 2).into(),
            Split::indices([4], 1).into(),
            Split::indices([], 0).into(),
            Split::indices([2, 5], 0).into(),
            slice(&[0, 1], &[2, -1], None, None).into(),
            slice(&[3], &[0], Some(&[-2]), Some(&[1])).into(),
            Take::new(None).into(),
            Take {
                axis: Some(-1),
                mode: TakeMode::Wrap,
            }
            .into(),
        ]
    }

    #[test]
    fn attributes_round_trip() {
        for op in every_op() {
            let back = Op::builtin(op.name(), op.attrs())
                .expect("a transform op")
                .unwrap();
            assert_eq!(back, op, "{op}");
        }
        let shown: Vec<String> = every_op().iter().map(Op::to_string).collect();
        assert_eq!(shown[0], "reshape, newshape=[0, -1, 4]");
        assert_eq!(shown[1], "transpose");
        assert_eq!(shown[6], "expand_dims, axis=-1");
        assert_eq!(shown[7], "expand_dims, axis=2, num_newaxis=3");
        assert_eq!(shown[8], "concatenate");
        assert_eq!(shown[10], "split, indices_or_sections=3");
        assert_eq!(shown[12], "split, indices_or_sections=[4], axis=1");
        assert_eq!(shown[15], "strided_slice, begin=[0, 1], end=[2, -1]");
        assert_eq!(
            shown[16],
            "strided_slice, begin=[3], end=[0], strides=[-2], axes=[1]"
        );
        assert_eq!(shown[18], "take, axis=-1, mode=\"wrap\"");
        assert!(
            NAMES
                .iter()
                .all(|n| every_op().iter().any(|o| o.name() == *n))
        );
    }

    fn parse_err(name: &str, attrs: Vec<(&str, AttrValue)>) -> Error {
        let attrs = attrs.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        Op::builtin(name, attrs)
            .expect("a transform op")
            .unwrap_err()
    }

    fn list(v: &[i64]) -> AttrValue {
        AttrValue::List(v.iter().map(|&i| AttrValue::Int(i)).collect())
    }

    #[test]
    fn bad_attributes_are_clear_errors() {
        let e = parse_err("reshape", vec![("newshape", list(&[-2]))]);
        assert!(
            matches!(e, Error::Unsupported(_)) && e.to_string().contains("-2"),
            "{e}"
        );
        let e = parse_err("reshape", vec![("newshape", list(&[-1, 3, -1]))]).to_string();
        assert!(
            e.contains("`newshape` of `reshape`") && e.contains("more than one -1"),
            "{e}"
        );
        let e = parse_err("reshape", vec![("newshape", list(&[-7]))]).to_string();
        assert!(
            e.contains("`newshape` of `reshape`") && e.contains("-7"),
            "{e}"
        );
        let e = parse_err("reshape", vec![]).to_string();
        assert!(e.contains("`newshape` of `reshape`: is required"), "{e}");
        let e = parse_err("expand_dims", vec![("num_newaxis", AttrValue::Int(2))]).to_string();
        assert!(e.contains("`axis` of `expand_dims`: is required"), "{e}");
        let e = parse_err(
            "split",
            vec![("indices_or_sections", AttrValue::Str("x".into()))],
        );
        assert!(
            e.to_string().contains("`indices_or_sections` of `split`"),
            "{e}"
        );
        let e = parse_err("split", vec![("indices_or_sections", AttrValue::Int(0))]).to_string();
        assert!(
            e.contains("`indices_or_sections` of `split`: indices_or_sections=0"),
            "{e}"
        );
        let e = parse_err("split", vec![("indices_or_sections", list(&[4, 2]))]).to_string();
        assert!(
            e.contains("[4, 2] must be non-negative and ascending"),
            "{e}"
        );
        let e = parse_err(
            "strided_slice",
            vec![
                ("begin", list(&[0])),
                ("end", list(&[2])),
                ("strides", list(&[0])),
            ],
        );
        assert!(
            e.to_string().contains("`strides` of `strided_slice`"),
            "{e}"
        );
        let e = parse_err(
            "strided_slice",
            vec![
                ("begin", list(&[0])),
                ("end", list(&[2])),
                ("slice_mode", AttrValue::Str("size".into())),
            ],
        );
        assert!(
            matches!(e, Error::Unsupported(_)) && e.to_string().contains("size"),
            "{e}"
        );
        let e = parse_err("take", vec![("mode", AttrValue::Str("fast".into()))]);
        assert!(
            matches!(e, Error::Unsupported(_)) && e.to_string().contains("fast"),
            "{e}"
        );
        let e = parse_err("take", vec![("mode", AttrValue::Str("nope".into()))]).to_string();
        assert!(e.contains("`mode` of `take`") && e.contains("nope"), "{e}");
        let e = parse_err("take", vec![("batch_dims", AttrValue::Int(1))]);
        assert!(matches!(e, Error::Unsupported(_)), "{e}");
        let e = parse_err("transpose", vec![("axis", list(&[0]))]).to_string();
        assert!(e.contains("`transpose` has no attribute `axis`"), "{e}");
        // Values only the input can refute are type errors.
        let op = Op::builtin("transpose", vec![("axes".into(), list(&[0, 0]))])
            .unwrap()
            .unwrap();
        let e = type_err(op.infer_type(&[t(&[2, 2])]), "transpose");
        assert!(e.contains("not a permutation"), "{e}");
    }

    /// A small shape of rank 0 to 4.
    fn shape_strategy(max_rank: usize) -> impl Strategy<Value = Vec<usize>> {
        prop::collection::vec(0usize..4, 0..=max_rank)
    }

    /// The row-major multi-index of flat index `flat` in `shape`.
    fn unravel(mut flat: usize, shape: &[usize]) -> Vec<usize> {
        let mut idx = vec![0; shape.len()];
        for d in (0..shape.len()).rev() {
            idx[d] = flat % shape[d];
            flat /= shape[d];
        }
        idx
    }

    fn ravel(idx: &[usize], shape: &[usize]) -> usize {
        idx.iter().zip(shape).fold(0, |acc, (&i, &d)| acc * d + i)
    }

    /// Python's `slice(begin, end, stride).indices(n)` turned into the list of indices,
    /// written the way CPython's `PySlice_AdjustIndices` does it.
    fn py_slice(begin: Option<i64>, end: Option<i64>, step: i64, n: i64) -> Vec<i64> {
        let (lower, upper) = if step < 0 { (-1, n - 1) } else { (0, n) };
        let adjust = |v: Option<i64>, default: i64| match v {
            None => default,
            Some(v) if v < 0 => (v + n).max(lower),
            Some(v) => v.min(upper),
        };
        let start = adjust(begin, if step < 0 { upper } else { lower });
        let stop = adjust(end, if step < 0 { lower } else { upper });
        let mut out = Vec::new();
        let mut i = start;
        while (step > 0 && i < stop) || (step < 0 && i > stop) {
            out.push(i);
            i += step;
        }
        out
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn transpose_then_inverse_is_identity(
            (shape, perm) in shape_strategy(4).prop_flat_map(|s| {
                let p: Vec<usize> = (0..s.len()).collect();
                (Just(s), Just(p).prop_shuffle())
            }),
            dtype in prop::sample::select(DType::ALL.to_vec()),
            seed in any::<u64>(),
        ) {
            let x = NDArray::random(shape.clone(), dtype, seed);
            let mut inv = vec![0i64; perm.len()];
            for (i, &p) in perm.iter().enumerate() {
                inv[p] = i as i64;
            }
            let perm: Vec<i64> = perm.iter().map(|&p| p as i64).collect();
            let y = run1(Transpose::new(Some(perm.clone())), x.clone());
            let y = y.into_tensor("y").unwrap();
            // Each output element is the input element at the permuted index.
            for (f, &v) in y.to_f64_vec().iter().enumerate() {
                let out_idx = unravel(f, y.shape());
                let mut in_idx = vec![0; shape.len()];
                for (i, &p) in perm.iter().enumerate() {
                    in_idx[p as usize] = out_idx[i];
                }
                let want = x.to_f64_vec()[ravel(&in_idx, &shape)];
                prop_assert!(v == want || (v.is_nan() && want.is_nan()));
            }
            let back = run1(Transpose::new(Some(inv)), y);
            prop_assert_eq!(back.into_tensor("back").unwrap(), x);
        }

        #[test]
        fn reshape_preserves_flat_data(
            // Non-zero dimensions: a literal 0 in newshape means "copy", not an empty axis.
            (shape, target, hole, zeros) in prop::collection::vec(1usize..4, 0..=4).prop_flat_map(|s| {
                let n = s.len();
                (Just(s.clone()), Just(s).prop_shuffle(), 0..=n, prop::collection::vec(any::<bool>(), n))
            }),
            seed in any::<u64>(),
        ) {
            let x = NDArray::random(shape.clone(), DType::I32, seed);
            let mut newshape: Vec<i64> = target.iter().map(|&d| d as i64).collect();
            // 0 copies the input dimension where it already matches the target.
            for i in 0..newshape.len() {
                if zeros[i] && target[i] == shape[i] {
                    newshape[i] = 0;
                }
            }
            // Replace one dimension by -1 when it can be inferred.
            let rest: usize = target.iter().enumerate().filter(|&(i, _)| i != hole).map(|(_, &d)| d).product();
            if hole < newshape.len() && rest != 0 {
                newshape[hole] = -1;
            }
            let y = run1(Reshape::new(newshape), x.clone()).into_tensor("y").unwrap();
            prop_assert_eq!(y.shape(), &target[..]);
            prop_assert_eq!(y.into_data(), x.into_data());
        }

        #[test]
        fn split_then_concatenate_is_identity(
            (shape, axis, cuts, sections) in prop::collection::vec(1usize..5, 1..=3).prop_flat_map(|s| {
                let r = s.len();
                (Just(s), 0..r, prop::collection::vec(0i64..7, 0..4), 1usize..5)
            }),
            use_sections in any::<bool>(),
            seed in any::<u64>(),
        ) {
            let x = NDArray::random(shape.clone(), DType::F16, seed);
            let mut cuts = cuts;
            cuts.sort();
            let split = if use_sections && shape[axis] % sections == 0 {
                Split::sections(sections, axis as i64)
            } else {
                Split::indices(cuts.clone(), axis as i64)
            };
            let parts = run1(split.clone(), x.clone());
            let Value::Tuple(fields) = &parts else { panic!("split gives a tuple") };
            let pieces = match &split.indices_or_sections {
                SplitSpec::Sections(n) => *n,
                SplitSpec::Indices(c) => c.len() + 1,
            };
            prop_assert_eq!(fields.len(), pieces);
            let total: usize = fields.iter().map(|f| shape_of(f)[axis]).sum();
            prop_assert_eq!(total, shape[axis]);
            let back = run(Concatenate::new(axis as i64 - shape.len() as i64), vec![parts]).unwrap();
            prop_assert_eq!(back.into_tensor("back").unwrap(), x);
        }

        #[test]
        fn squeeze_undoes_expand_dims(
            (shape, axis) in shape_strategy(3).prop_flat_map(|s| {
                let r = s.len() as i64;
                (Just(s), -(r + 1)..=r)
            }),
            num_newaxis in 0usize..3,
            seed in any::<u64>(),
        ) {
            let x = NDArray::random(shape.clone(), DType::U8, seed);
            let e = ExpandDims { axis, num_newaxis };
            let y = run1(e, x.clone()).into_tensor("y").unwrap();
            let at = if axis < 0 { axis + shape.len() as i64 + 1 } else { axis } as usize;
            let mut want = shape.clone();
            want.splice(at..at, std::iter::repeat_n(1, num_newaxis));
            prop_assert_eq!(y.shape(), &want[..]);
            let new_axes: Vec<i64> = (at..at + num_newaxis).map(|a| a as i64).collect();
            let back = run1(Squeeze::new(Some(new_axes)), y).into_tensor("back").unwrap();
            prop_assert_eq!(back, x);
        }

        #[test]
        fn strided_slice_matches_python_slicing(
            (shape, specs) in shape_strategy(3).prop_flat_map(|s| {
                let r = s.len();
                let spec = (
                    prop::option::of(-6i64..7),
                    prop::option::of(-6i64..7),
                    prop::sample::select(vec![-3i64, -2, -1, 1, 2, 3]),
                );
                (Just(s), prop::collection::vec(spec, r))
            }),
            use_axes in any::<bool>(),
            seed in any::<u64>(),
        ) {
            let x = NDArray::random(shape.clone(), DType::I64, seed);
            // Build the op: with axes, slice every axis whose begin and end are both
            // given, in reverse order; without, slice the leading axes given in full.
            let (op, per_axis) = if use_axes {
                let chosen: Vec<usize> = (0..shape.len()).rev()
                    .filter(|&d| specs[d].0.is_some() && specs[d].1.is_some())
                    .collect();
                let op = StridedSlice {
                    begin: chosen.iter().map(|&d| specs[d].0.unwrap()).collect(),
                    end: chosen.iter().map(|&d| specs[d].1.unwrap()).collect(),
                    strides: Some(chosen.iter().map(|&d| specs[d].2).collect()),
                    axes: Some(chosen.iter().map(|&d| d as i64 - shape.len() as i64).collect()),
                };
                let per_axis: Vec<_> = (0..shape.len())
                    .map(|d| if chosen.contains(&d) { (specs[d].0, specs[d].1, specs[d].2) } else { (None, None, 1) })
                    .collect();
                (op, per_axis)
            } else {
                let k = specs.iter().take_while(|s| s.0.is_some()).count();
                let ends: Vec<i64> = specs[..k].iter().map_while(|s| s.1).collect();
                let op = StridedSlice {
                    begin: specs[..k].iter().map(|s| s.0.unwrap()).collect(),
                    end: ends.clone(),
                    strides: Some(specs[..k].iter().map(|s| s.2).collect()),
                    axes: None,
                };
                let per_axis: Vec<_> = (0..shape.len())
                    .map(|d| if d < k { (specs[d].0, ends.get(d).copied(), specs[d].2) } else { (None, None, 1) })
                    .collect();
                (op, per_axis)
            };
            let picks: Vec<Vec<i64>> = per_axis.iter().zip(&shape)
                .map(|(&(b, e, s), &n)| py_slice(b, e, s, n as i64))
                .collect();
            let want_shape: Vec<usize> = picks.iter().map(Vec::len).collect();
            let y = run1(op, x.clone()).into_tensor("y").unwrap();
            prop_assert_eq!(y.shape(), &want_shape[..]);
            let xs = x.to_vec::<i64>().unwrap();
            let want: Vec<i64> = (0..y.numel())
                .map(|f| {
                    let o = unravel(f, &want_shape);
                    let src: Vec<usize> = o.iter().enumerate().map(|(d, &i)| picks[d][i] as usize).collect();
                    xs[ravel(&src, &shape)]
                })
                .collect();
            prop_assert_eq!(y.to_vec::<i64>().unwrap(), want);
        }

        #[test]
        fn take_matches_naive_gather(
            (shape, axis) in prop::collection::vec(1usize..4, 0..=3).prop_flat_map(|s| {
                let r = s.len() as i64;
                let axis = if r == 0 { Just(None).boxed() } else { prop::option::of(-r..r).boxed() };
                (Just(s), axis)
            }),
            ishape in shape_strategy(2),
            wrap in any::<bool>(),
            seed in any::<u64>(),
        ) {
            let x = NDArray::random(shape.clone(), DType::Bool, seed);
            let indices = NDArray::random_uniform(ishape.clone(), DType::I32, seed ^ 1, -8.0, 8.0);
            let mode = if wrap { TakeMode::Wrap } else { TakeMode::Clip };
            let y = run(Take { axis, mode }, vec![x.clone().into(), indices.clone().into()])
                .unwrap()
                .into_tensor("y")
                .unwrap();
            // Naively: flatten when there is no axis, then look every element up.
            let (src_shape, p) = match axis {
                None => (vec![x.numel()], 0),
                Some(a) => (shape.clone(), if a < 0 { a + shape.len() as i64 } else { a } as usize),
            };
            let n = src_shape[p] as i64;
            let mut want_shape = src_shape[..p].to_vec();
            want_shape.extend(&ishape);
            want_shape.extend(&src_shape[p + 1..]);
            prop_assert_eq!(y.shape(), &want_shape[..]);
            let xs = x.to_vec::<bool>().unwrap();
            let is = indices.to_i64_vec();
            let want: Vec<bool> = (0..y.numel())
                .map(|f| {
                    let o = unravel(f, &want_shape);
                    let k = ravel(&o[p..p + ishape.len()], &ishape);
                    let raw = is[k];
                    let i = if wrap { ((raw % n) + n) % n } else { raw.max(0).min(n - 1) };
                    let mut src = o[..p].to_vec();
                    src.push(i as usize);
                    src.extend(&o[p + ishape.len()..]);
                    xs[ravel(&src, &src_shape)]
                })
                .collect();
            prop_assert_eq!(y.to_vec::<bool>().unwrap(), want);
        }
    }
}
