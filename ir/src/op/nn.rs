//! Neural-network ops (`nn.*`): convolution, normalisation, pooling, dense layers,
//! softmax. NCHW data and OIHW weights throughout. Each op's attributes, type rule,
//! reference evaluation, printed attributes and parsing live here, following Relay's
//! semantics; the kernels work on flat row-major buffers (`f64` for floats, wrapping
//! `i64` for integers) with loop orders fast enough to run ResNet-50 in seconds.

use crate::attrs::{AttrReader, AttrWriter, F64};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::tensor::{Data, NDArray};
use crate::ty::{TensorType, Type, fmt_shape};
use crate::value::Value;

use super::elemwise::fmaximum;
use super::util::{
    expect_arity, expect_float, expect_rank, expect_same_dtype, normalize_axis, out_tensor,
    tensor_arg, tensors,
};
use super::{Op, OpPattern, OpSpec};

/// Names of the ops in this family.
pub const NAMES: &[&str] = &[
    "nn.conv2d",
    "nn.batch_norm",
    "nn.max_pool2d",
    "nn.avg_pool2d",
    "nn.global_avg_pool2d",
    "nn.global_max_pool2d",
    "nn.dense",
    "nn.bias_add",
    "nn.batch_flatten",
    "nn.softmax",
    "nn.layer_norm",
    "nn.batch_matmul",
];

/// `nn.conv2d(data: NCHW, weight: OIHW)`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Conv2d {
    /// Vertical and horizontal stride (Relay default `[1, 1]`).
    pub strides: [usize; 2],
    /// top, left, bottom, right.
    pub padding: [usize; 4],
    /// Vertical and horizontal kernel dilation (default `[1, 1]`).
    pub dilation: [usize; 2],
    /// Channel groups: data channels and weight outputs split into this many
    /// independent convolutions (`groups == channels` is depthwise).
    pub groups: usize,
    /// Output channels, if stated (checked against the weight).
    pub channels: Option<usize>,
    /// Kernel height and width, if stated (checked against the weight).
    pub kernel_size: Option<[usize; 2]>,
}

impl Default for Conv2d {
    fn default() -> Conv2d {
        Conv2d {
            strides: [1, 1],
            padding: [0; 4],
            dilation: [1, 1],
            groups: 1,
            channels: None,
            kernel_size: None,
        }
    }
}

/// `nn.batch_norm(data, gamma, beta, moving_mean, moving_var)` in inference form;
/// returns `(normalized, moving_mean, moving_var)` as Relay does.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BatchNorm {
    /// The channel axis of `data` (default 1; negative counts from the end).
    pub axis: i64,
    /// Added to the variance before the square root (default `1e-5`).
    pub epsilon: F64,
    /// Add beta.
    pub center: bool,
    /// Multiply by gamma.
    pub scale: bool,
}

impl Default for BatchNorm {
    fn default() -> BatchNorm {
        BatchNorm {
            axis: 1,
            epsilon: F64(1e-5),
            center: true,
            scale: true,
        }
    }
}

/// Max or average.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PoolKind {
    /// The largest element of the window.
    Max,
    /// The mean of the window.
    Avg,
}

/// `nn.max_pool2d(data)` / `nn.avg_pool2d(data)` over NCHW.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Pool2d {
    /// Max or average.
    pub kind: PoolKind,
    /// Window height and width.
    pub pool_size: [usize; 2],
    /// Vertical and horizontal stride (default `[1, 1]`).
    pub strides: [usize; 2],
    /// Window dilation (default `[1, 1]`).
    pub dilation: [usize; 2],
    /// top, left, bottom, right.
    pub padding: [usize; 4],
    /// Round the output size up (TVM's rule), adding a partial window at the end.
    pub ceil_mode: bool,
    /// Average pooling only: count padded elements in the divisor.
    pub count_include_pad: bool,
}

impl Pool2d {
    /// A pool of `kind` over `pool_size` windows with stride 1 and no padding.
    pub fn new(kind: PoolKind, pool_size: [usize; 2]) -> Pool2d {
        Pool2d {
            kind,
            pool_size,
            strides: [1, 1],
            dilation: [1, 1],
            padding: [0; 4],
            ceil_mode: false,
            count_include_pad: false,
        }
    }
}

/// `nn.global_avg_pool2d(data)` / `nn.global_max_pool2d(data)`: NCHW -> NC11.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GlobalPool2d {
    /// Max or average.
    pub kind: PoolKind,
}

/// `nn.dense(data: (..., K), weight: (N, K))` -> `(..., N)`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Dense {
    /// N, if stated (checked against the weight).
    pub units: Option<usize>,
}

/// `nn.bias_add(data, bias)`: adds a 1-D bias along `axis`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BiasAdd {
    /// The axis of `data` the bias runs along (default 1).
    pub axis: i64,
}

impl Default for BiasAdd {
    fn default() -> BiasAdd {
        BiasAdd { axis: 1 }
    }
}

/// `nn.batch_flatten(data)`: `(N, ...)` -> `(N, prod(...))`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BatchFlatten;

/// `nn.softmax(data)` along `axis`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Softmax {
    /// The axis normalised over (default -1).
    pub axis: i64,
}

impl Default for Softmax {
    fn default() -> Softmax {
        Softmax { axis: -1 }
    }
}

/// `nn.layer_norm(data, gamma, beta)` over `axis`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LayerNorm {
    /// The axis normalised over (default -1).
    pub axis: i64,
    /// Added to the variance before the square root (default `1e-5`).
    pub epsilon: F64,
    /// Add beta.
    pub center: bool,
    /// Multiply by gamma.
    pub scale: bool,
}

impl Default for LayerNorm {
    fn default() -> LayerNorm {
        LayerNorm {
            axis: -1,
            epsilon: F64(1e-5),
            center: true,
            scale: true,
        }
    }
}

/// `nn.batch_matmul(a: (B, M, K), b: (B, N, K))` -> `(B, M, N)` with Relay's default
/// `transpose_b = true`; batch dimensions broadcast when one is 1.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BatchMatmul {
    /// `a` is stored `(B, K, M)` (default false).
    pub transpose_a: bool,
    /// `b` is stored `(B, N, K)` (default true, as in Relay); else `(B, K, N)`.
    pub transpose_b: bool,
}

impl Default for BatchMatmul {
    fn default() -> BatchMatmul {
        BatchMatmul {
            transpose_a: false,
            transpose_b: true,
        }
    }
}

// ---------------------------------------------------------------------------------------
// Shared helpers: element arithmetic, argument checks, window geometry, attribute parsing.
// ---------------------------------------------------------------------------------------

/// Element arithmetic of the reference kernels: `f64` for float dtypes (rounded to the
/// output dtype once at the end), `i64` with two's-complement wrapping for integer dtypes
/// (wrapped to the output width at the end).
trait Num: Copy + PartialOrd {
    const ZERO: Self;
    fn add(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
    /// The smallest finite value of `dtype` (what an empty max-pool window yields).
    fn lowest(dtype: DType) -> Self;
    /// The larger of two values (floats: [`fmaximum`]).
    fn maximum(self, o: Self) -> Self;
    fn read(t: &NDArray) -> Vec<Self>;
    fn write(dtype: DType, v: Vec<Self>) -> Data;
}

impl Num for f64 {
    const ZERO: f64 = 0.0;
    fn add(self, o: f64) -> f64 {
        self + o
    }
    fn mul(self, o: f64) -> f64 {
        self * o
    }
    fn maximum(self, o: f64) -> f64 {
        fmaximum(self, o)
    }
    fn lowest(dtype: DType) -> f64 {
        match dtype {
            DType::F16 => -65504.0,
            DType::F64 => f64::MIN,
            DType::BF16 => half::bf16::MIN.to_f64(),
            _ => f32::MIN as f64,
        }
    }
    fn read(t: &NDArray) -> Vec<f64> {
        t.to_f64_vec()
    }
    fn write(dtype: DType, v: Vec<f64>) -> Data {
        Data::from_f64(dtype, v)
    }
}

impl Num for i64 {
    const ZERO: i64 = 0;
    fn add(self, o: i64) -> i64 {
        self.wrapping_add(o)
    }
    fn mul(self, o: i64) -> i64 {
        self.wrapping_mul(o)
    }
    fn maximum(self, o: i64) -> i64 {
        self.max(o)
    }
    fn lowest(dtype: DType) -> i64 {
        match dtype {
            DType::I8 => i8::MIN as i64,
            DType::I16 => i16::MIN as i64,
            DType::U8 | DType::U16 | DType::U32 | DType::U64 | DType::Bool => 0,
            DType::I32 => i32::MIN as i64,
            _ => i64::MIN,
        }
    }
    fn read(t: &NDArray) -> Vec<i64> {
        t.to_i64_vec()
    }
    fn write(dtype: DType, v: Vec<i64>) -> Data {
        Data::from_i64(dtype, v)
    }
}

/// The larger of `m` and `e`: on floats IEEE 754-2019 `maximum` (NaN wins, as
/// numpy's `max`; `+0` is larger than `-0`), on integers the larger value.
fn max_nan<T: Num>(m: T, e: T) -> T {
    m.maximum(e)
}

/// Requires a float or integer dtype (not bool).
fn expect_numeric(op: &str, t: &TensorType, what: &str) -> Result<()> {
    if t.dtype.is_bool() {
        return Err(Error::ty(
            op,
            format!("{what} must be a numeric tensor, got {t}"),
        ));
    }
    Ok(())
}

/// Requires every value of an attribute to be at least 1.
fn expect_positive(op: &str, name: &str, v: &[usize]) -> Result<()> {
    if v.contains(&0) {
        return Err(Error::ty(op, format!("{name} must be positive, got {v:?}")));
    }
    Ok(())
}

/// Requires a 1-D argument whose length is `data.shape[axis]`.
fn expect_axis_vector(
    op: &str,
    v: &TensorType,
    what: &str,
    data: &TensorType,
    axis: usize,
) -> Result<()> {
    let want = data.shape[axis];
    if v.shape != [want] {
        return Err(Error::ty(
            op,
            format!(
                "{what} must have shape ({want}) to match axis {axis} of data {}, got {}",
                fmt_shape(&data.shape),
                fmt_shape(&v.shape)
            ),
        ));
    }
    Ok(())
}

/// The argument values as exactly `N` tensors.
fn tensor_args<'a, const N: usize>(op: &str, args: &'a [Value]) -> Result<[&'a NDArray; N]> {
    let ts = tensors(op, args)?;
    let n = ts.len();
    ts.try_into()
        .map_err(|_| Error::Eval(format!("{op}: expected {N} argument(s), got {n}")))
}

/// A tensor of type `ty` from typed data.
fn tensor_value(ty: &TensorType, data: Data) -> Result<Value> {
    NDArray::new(ty.shape.clone(), data).map(Value::Tensor)
}

/// `shape` split around `axis`: (product before, extent, product after).
fn split_axis(shape: &[usize], axis: usize) -> (usize, usize, usize) {
    let outer = shape[..axis].iter().product();
    let inner = shape[axis + 1..].iter().product();
    (outer, shape[axis], inner)
}

/// The four dimensions of a rank-4 shape.
fn dims4(shape: &[usize]) -> [usize; 4] {
    [shape[0], shape[1], shape[2], shape[3]]
}

/// Output extent of a sliding window along one axis (`axis` names it in errors): floor
/// mode `(in + pads - eff) / stride + 1`, ceil mode `ceil((in + pads - eff) / stride) + 1`
/// (TVM's rule), where `eff = dilation * (kernel - 1) + 1`.
#[allow(clippy::too_many_arguments)]
fn window_out(
    op: &str,
    axis: &str,
    data: &TensorType,
    input: usize,
    pads: (usize, usize),
    kernel: usize,
    dilation: usize,
    stride: usize,
    ceil: bool,
) -> Result<usize> {
    if kernel == 0 {
        return Err(Error::ty(
            op,
            format!("the window {axis} is 0 (data {})", fmt_shape(&data.shape)),
        ));
    }
    let too_large = || {
        Error::ty(
            op,
            format!(
                "the window {axis} (kernel {kernel}, dilation {dilation}) or padding ({} + {}) is too large for data {}",
                pads.0,
                pads.1,
                fmt_shape(&data.shape)
            ),
        )
    };
    let eff = dilation
        .checked_mul(kernel - 1)
        .and_then(|e| e.checked_add(1))
        .ok_or_else(too_large)?;
    let padded = input
        .checked_add(pads.0)
        .and_then(|p| p.checked_add(pads.1))
        .ok_or_else(too_large)?;
    if eff > padded {
        return Err(Error::ty(
            op,
            format!(
                "the window {axis} {eff} (kernel {kernel}, dilation {dilation}) exceeds the padded \
                 input {axis} {padded} of data {} (padding {} + {})",
                fmt_shape(&data.shape),
                pads.0,
                pads.1
            ),
        ));
    }
    let span = padded - eff;
    Ok(if ceil {
        span.div_ceil(stride) + 1
    } else {
        span / stride + 1
    })
}

/// Output positions `lo..hi` (within `0..out`) whose input position
/// `p * stride + offset - pad` lies in `0..input`.
fn valid_outputs(
    out: usize,
    stride: usize,
    offset: usize,
    pad: usize,
    input: usize,
) -> (usize, usize) {
    let lo = if pad > offset {
        (pad - offset).div_ceil(stride)
    } else {
        0
    };
    let hi = if input + pad > offset {
        (input + pad - offset).div_ceil(stride)
    } else {
        0
    };
    let lo = lo.min(out);
    (lo, hi.clamp(lo, out))
}

/// Kernel taps `lo..hi` (within `0..kernel`) whose position `start + i * dilation` lies
/// in `0..input`.
fn valid_taps(start: isize, kernel: usize, dilation: usize, input: usize) -> (usize, usize) {
    let lo = if start < 0 {
        start.unsigned_abs().div_ceil(dilation)
    } else {
        0
    };
    let hi = if start >= input as isize {
        0
    } else {
        (input as isize - start) as usize
    }
    .div_ceil(dilation);
    let lo = lo.min(kernel);
    (lo, hi.clamp(lo, kernel))
}

/// `out[i * n + j] = sum_k a[i * k + kk] * b[j * k + kk]`: `a` is `m x k`, `b` is `n x k`.
fn matmul_nt<T: Num>(a: &[T], b: &[T], m: usize, n: usize, k: usize) -> Vec<T> {
    let mut out = Vec::with_capacity(m * n);
    for i in 0..m {
        let row = &a[i * k..(i + 1) * k];
        for j in 0..n {
            out.push(dot(row, &b[j * k..(j + 1) * k]));
        }
    }
    out
}

/// Dot product with four running sums (so the compiler can keep them in registers).
fn dot<T: Num>(a: &[T], b: &[T]) -> T {
    let mut acc = [T::ZERO; 4];
    let (ca, cb) = (a.chunks_exact(4), b.chunks_exact(4));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for l in 0..4 {
            acc[l] = acc[l].add(x[l].mul(y[l]));
        }
    }
    let mut s = acc[0].add(acc[1]).add(acc[2].add(acc[3]));
    for (&x, &y) in ra.iter().zip(rb) {
        s = s.add(x.mul(y));
    }
    s
}

/// `dst[p] += w[0] * src[0][p * stride] + ... + w[3] * src[3][p * stride]`, added left
/// to right (the same order as four separate passes).
#[inline(always)]
#[allow(clippy::needless_range_loop)] // indexing equal-length slices vectorizes best
fn axpy4<T: Num>(dst: &mut [T], src: [&[T]; 4], w: [T; 4], stride: usize) {
    let n = dst.len();
    if stride == 1 {
        let [s0, s1, s2, s3] = src.map(|s| &s[..n]);
        for p in 0..n {
            dst[p] = dst[p]
                .add(w[0].mul(s0[p]))
                .add(w[1].mul(s1[p]))
                .add(w[2].mul(s2[p]))
                .add(w[3].mul(s3[p]));
        }
    } else {
        let [s0, s1, s2, s3] = src.map(|s| &s[..(n - 1) * stride + 1]);
        for p in 0..n {
            let q = p * stride;
            dst[p] = dst[p]
                .add(w[0].mul(s0[q]))
                .add(w[1].mul(s1[q]))
                .add(w[2].mul(s2[q]))
                .add(w[3].mul(s3[q]));
        }
    }
}

/// A `rows x cols` row-major matrix transposed to `cols x rows`.
fn transpose2<T: Copy>(src: &[T], rows: usize, cols: usize) -> Vec<T> {
    let mut out = Vec::with_capacity(src.len());
    for c in 0..cols {
        out.extend((0..rows).map(|r| src[r * cols + c]));
    }
    out
}

/// Reads a 1- or 2-value attribute (`[a]` means `[a, a]`); `None` when absent.
fn read_opt_pair(r: &mut AttrReader, name: &str, positive: bool) -> Result<Option<[usize; 2]>> {
    let Some(v) = r.usizes(name)? else {
        return Ok(None);
    };
    let pair = match v[..] {
        [a] => [a, a],
        [a, b] => [a, b],
        _ => return Err(r.error(name, format!("expected 1 or 2 values, found {}", v.len()))),
    };
    if positive && pair.contains(&0) {
        return Err(r.error(name, format!("must be positive, found {v:?}")));
    }
    Ok(Some(pair))
}

/// Reads a positive 1- or 2-value attribute, `default` when absent.
fn read_pair(r: &mut AttrReader, name: &str, default: [usize; 2]) -> Result<[usize; 2]> {
    Ok(read_opt_pair(r, name, true)?.unwrap_or(default))
}

/// Reads `padding`: `[p]`, `[ph, pw]` (top/bottom, left/right) or `[top, left, bottom, right]`.
fn read_padding(r: &mut AttrReader) -> Result<[usize; 4]> {
    let Some(v) = r.usizes("padding")? else {
        return Ok([0; 4]);
    };
    match v[..] {
        [p] => Ok([p; 4]),
        [ph, pw] => Ok([ph, pw, ph, pw]),
        [t, l, b, rt] => Ok([t, l, b, rt]),
        _ => Err(r.error(
            "padding",
            format!("expected 1, 2 or 4 values, found {}", v.len()),
        )),
    }
}

/// Reads an `epsilon` (non-negative).
fn read_epsilon(r: &mut AttrReader) -> Result<F64> {
    match r.float("epsilon")? {
        None => Ok(F64(1e-5)),
        Some(e) if e >= 0.0 => Ok(F64(e)),
        Some(e) => Err(r.error("epsilon", format!("must not be negative, found {e}"))),
    }
}

/// Accepts `out_dtype` only when absent or empty: kiln computes in the input dtype.
fn expect_no_out_dtype(r: &mut AttrReader) -> Result<()> {
    match r.str("out_dtype")? {
        None => Ok(()),
        Some(s) if s.is_empty() => Ok(()),
        Some(s) => Err(Error::Unsupported(format!(
            "`{}` with out_dtype=\"{s}\" (kiln computes in the input dtype; only out_dtype=\"\" \
             is supported)",
            r.op()
        ))),
    }
}

/// Writes `epsilon`, `center` and `scale` of the normalisations when non-default.
fn write_norm_attrs(w: &mut AttrWriter, epsilon: F64, center: bool, scale: bool) {
    if epsilon != F64(1e-5) {
        w.float("epsilon", epsilon.0);
    }
    if !center {
        w.bool("center", false);
    }
    if !scale {
        w.bool("scale", false);
    }
}

// ---------------------------------------------------------------------------------------
// nn.conv2d
// ---------------------------------------------------------------------------------------

impl Conv2d {
    /// A convolution stating `channels` outputs and a `kernel_size` kernel, with stride
    /// 1, no padding, dilation 1 and one group.
    pub fn new(channels: usize, kernel_size: [usize; 2]) -> Conv2d {
        Conv2d {
            channels: Some(channels),
            kernel_size: Some(kernel_size),
            ..Conv2d::default()
        }
    }

    fn eval_typed<T: Num>(&self, x: &NDArray, w: &NDArray, out: &TensorType) -> Result<Value> {
        let v = self.kernel(
            &T::read(x),
            dims4(x.shape()),
            &T::read(w),
            dims4(w.shape()),
            dims4(&out.shape),
        );
        tensor_value(out, T::write(out.dtype, v))
    }

    /// Direct convolution. Loop order: batch, output channel (its plane stays in cache),
    /// kernel tap, a block of up to four input channels of the group (their weights held
    /// as scalars), output row, then the contiguous run of output columns whose inputs
    /// lie inside the data. Four input channels per pass over an output row cut its
    /// loads and stores by four.
    fn kernel<T: Num>(
        &self,
        x: &[T],
        xs: [usize; 4],
        w: &[T],
        ws: [usize; 4],
        os: [usize; 4],
    ) -> Vec<T> {
        let [n, c, h, wd] = xs;
        let [o, cg, kh, kw] = ws;
        let [_, _, oh, ow] = os;
        let og = o / self.groups;
        let [sh, sw] = self.strides;
        let [dh, dw] = self.dilation;
        let [pt, pl, _, _] = self.padding;
        let rows: Vec<(usize, usize)> = (0..kh)
            .map(|i| valid_outputs(oh, sh, i * dh, pt, h))
            .collect();
        let cols: Vec<(usize, usize)> = (0..kw)
            .map(|j| valid_outputs(ow, sw, j * dw, pl, wd))
            .collect();
        let mut out = vec![T::ZERO; n * o * oh * ow];
        if out.is_empty() {
            return out;
        }
        let hw = h * wd;
        for (b, out_batch) in out.chunks_exact_mut(o * oh * ow).enumerate() {
            for (oc, plane) in out_batch.chunks_exact_mut(oh * ow).enumerate() {
                // The group's input planes and this output channel's weights.
                let xg = &x[(b * c + (oc / og) * cg) * hw..][..cg * hw];
                let wo = &w[oc * cg * kh * kw..][..cg * kh * kw];
                for (i, &(r_lo, r_hi)) in rows.iter().enumerate() {
                    for (j, &(c_lo, c_hi)) in cols.iter().enumerate() {
                        let len = c_hi - c_lo;
                        if len == 0 || r_lo == r_hi {
                            continue;
                        }
                        let first_col = c_lo * sw + j * dw - pl;
                        // Whole rows of a stride-1 pass are contiguous in both the output
                        // and the input: one run covers them all.
                        let merged = sh == 1 && sw == 1 && len == ow && ow == wd;
                        let (runs, run_len) = if merged {
                            (1, len * (r_hi - r_lo))
                        } else {
                            (r_hi - r_lo, len)
                        };
                        let src_len = (run_len - 1) * sw + 1;
                        let weight = |icg: usize| wo[(icg * kh + i) * kw + j];
                        for run in 0..runs {
                            let r = r_lo + run;
                            let dst = &mut plane[r * ow + c_lo..][..run_len];
                            let src_at = (r * sh + i * dh - pt) * wd + first_col;
                            let src = |icg: usize| &xg[icg * hw + src_at..][..src_len];
                            let mut icg = 0;
                            while icg + 4 <= cg {
                                let ws = [0, 1, 2, 3].map(|q| weight(icg + q));
                                axpy4(dst, [0, 1, 2, 3].map(|q| src(icg + q)), ws, sw);
                                icg += 4;
                            }
                            for icg in icg..cg {
                                let wv = weight(icg);
                                for (d, &s) in dst.iter_mut().zip(src(icg).iter().step_by(sw)) {
                                    *d = d.add(wv.mul(s));
                                }
                            }
                        }
                    }
                }
            }
        }
        out
    }
}

impl OpSpec for Conv2d {
    fn pattern(&self) -> OpPattern {
        OpPattern::OutEWiseFusable
    }

    /// Each output element is `I/groups * KH * KW` multiply-adds (weight
    /// `[O, I/groups, KH, KW]`).
    fn flops(&self, args: &[Type], out: &Type) -> f64 {
        let w = args.get(1).and_then(Type::as_tensor);
        let per = w.map_or(1, |w| w.shape.iter().skip(1).product::<usize>()) as f64;
        2.0 * super::type_elements(out) * per
    }

    fn name(&self) -> &str {
        "nn.conv2d"
    }

    fn infer_type(&self, args: &[Type]) -> Result<Type> {
        let op = self.name();
        expect_arity(op, args, 2)?;
        let x = tensor_arg(op, args, 0, "data")?;
        let w = tensor_arg(op, args, 1, "weight")?;
        expect_rank(op, x, "argument 0 (data)", 4)?;
        expect_rank(op, w, "argument 1 (weight)", 4)?;
        expect_numeric(op, x, "argument 0 (data)")?;
        expect_same_dtype(op, x, "argument 0 (data)", w, "argument 1 (weight)")?;
        expect_positive(op, "strides", &self.strides)?;
        expect_positive(op, "dilation", &self.dilation)?;
        expect_positive(op, "groups", &[self.groups])?;
        let [n, c, h, wd] = dims4(&x.shape);
        let [o, i, kh, kw] = dims4(&w.shape);
        let g = self.groups;
        let (xs, wsh) = (fmt_shape(&x.shape), fmt_shape(&w.shape));
        if c % g != 0 {
            return Err(Error::ty(
                op,
                format!(
                    "argument 0 (data) {xs} has {c} channels, which groups={g} does not divide"
                ),
            ));
        }
        if i * g != c {
            let per_group = if g == 1 {
                String::new()
            } else {
                format!(", so {} per group", c / g)
            };
            return Err(Error::ty(
                op,
                format!(
                    "argument 1 (weight) {wsh} has {i} input channels but data {xs} has {c} \
                     (groups={g}{per_group})"
                ),
            ));
        }
        if o % g != 0 {
            return Err(Error::ty(
                op,
                format!(
                    "argument 1 (weight) {wsh} has {o} output channels, which groups={g} does not divide"
                ),
            ));
        }
        if let Some(ch) = self.channels
            && ch != o
        {
            return Err(Error::ty(
                op,
                format!("channels={ch} but argument 1 (weight) {wsh} has {o} output channels"),
            ));
        }
        if let Some(ks) = self.kernel_size
            && ks != [kh, kw]
        {
            return Err(Error::ty(
                op,
                format!("kernel_size={ks:?} but argument 1 (weight) {wsh} has a {kh}x{kw} kernel"),
            ));
        }
        let [pt, pl, pb, pr] = self.padding;
        let [sh, sw] = self.strides;
        let [dh, dw] = self.dilation;
        let oh = window_out(op, "height", x, h, (pt, pb), kh, dh, sh, false)?;
        let ow = window_out(op, "width", x, wd, (pl, pr), kw, dw, sw, false)?;
        Ok(Type::tensor([n, o, oh, ow], x.dtype))
    }

    fn eval(&self, args: &[Value], out: &Type) -> Result<Value> {
        let out = out_tensor(self.name(), out)?.clone();
        let [x, w] = tensor_args(self.name(), args)?;
        if out.dtype.is_float() {
            self.eval_typed::<f64>(x, w, &out)
        } else {
            self.eval_typed::<i64>(x, w, &out)
        }
    }

    fn write_attrs(&self, w: &mut AttrWriter) {
        if self.strides != [1, 1] {
            w.usizes("strides", &self.strides);
        }
        w.usizes("padding", &self.padding);
        if self.dilation != [1, 1] {
            w.usizes("dilation", &self.dilation);
        }
        if self.groups != 1 {
            w.int("groups", self.groups as i64);
        }
        if let Some(c) = self.channels {
            w.int("channels", c as i64);
        }
        if let Some(k) = self.kernel_size {
            w.usizes("kernel_size", &k);
        }
    }
}

fn parse_conv2d(r: &mut AttrReader) -> Result<Conv2d> {
    let strides = read_pair(r, "strides", [1, 1])?;
    let padding = read_padding(r)?;
    let dilation = read_pair(r, "dilation", [1, 1])?;
    let groups = r.usize("groups")?.unwrap_or(1);
    if groups == 0 {
        return Err(r.error("groups", "must be positive, found 0"));
    }
    let channels = r.usize("channels")?;
    let kernel_size = read_opt_pair(r, "kernel_size", true)?;
    r.expect_str("data_layout", "NCHW")?;
    r.expect_str("kernel_layout", "OIHW")?;
    r.expect_str("out_layout", "NCHW")?;
    expect_no_out_dtype(r)?;
    Ok(Conv2d {
        strides,
        padding,
        dilation,
        groups,
        channels,
        kernel_size,
    })
}

// ---------------------------------------------------------------------------------------
// nn.batch_norm
// ---------------------------------------------------------------------------------------

impl OpSpec for BatchNorm {
    fn pattern(&self) -> OpPattern {
        OpPattern::Opaque
    }

    /// Per element: subtract, divide, multiply, add (and a square root per channel).
    fn flops(&self, args: &[Type], out: &Type) -> f64 {
        4.0 * super::type_elements(args.first().unwrap_or(out))
    }

    fn name(&self) -> &str {
        "nn.batch_norm"
    }

    fn infer_type(&self, args: &[Type]) -> Result<Type> {
        let op = self.name();
        expect_arity(op, args, 5)?;
        let x = tensor_arg(op, args, 0, "data")?;
        expect_float(op, x, "argument 0 (data)")?;
        let axis = normalize_axis(op, self.axis, x.rank())?;
        let mut fields = vec![Type::Tensor(x.clone())];
        for (i, what) in [
            (1, "gamma"),
            (2, "beta"),
            (3, "moving_mean"),
            (4, "moving_var"),
        ] {
            let v = tensor_arg(op, args, i, what)?;
            let what = format!("argument {i} ({what})");
            expect_same_dtype(op, x, "argument 0 (data)", v, &what)?;
            expect_axis_vector(op, v, &what, x, axis)?;
            if i >= 3 {
                fields.push(Type::Tensor(v.clone()));
            }
        }
        Ok(Type::Tuple(fields))
    }

    fn eval(&self, args: &[Value], _out: &Type) -> Result<Value> {
        let [x, gamma, beta, mean, var] = tensor_args(self.name(), args)?;
        let axis = normalize_axis(self.name(), self.axis, x.rank())?;
        let (outer, len, inner) = split_axis(x.shape(), axis);
        let (xv, g, b, m, v) = (
            x.to_f64_vec(),
            gamma.to_f64_vec(),
            beta.to_f64_vec(),
            mean.to_f64_vec(),
            var.to_f64_vec(),
        );
        let sd: Vec<f64> = v.iter().map(|v| (v + self.epsilon.0).sqrt()).collect();
        let mut y = Vec::with_capacity(xv.len());
        for o in 0..outer {
            for ch in 0..len {
                let base = (o * len + ch) * inner;
                y.extend(xv[base..base + inner].iter().map(|&e| {
                    let mut r = (e - m[ch]) / sd[ch];
                    if self.scale {
                        r *= g[ch];
                    }
                    if self.center {
                        r += b[ch];
                    }
                    r
                }));
            }
        }
        let normalized = NDArray::from_f64(x.shape(), x.dtype(), y)?;
        Ok(Value::Tuple(vec![
            Value::Tensor(normalized),
            Value::Tensor(mean.clone()),
            Value::Tensor(var.clone()),
        ]))
    }

    fn write_attrs(&self, w: &mut AttrWriter) {
        if self.axis != 1 {
            w.int("axis", self.axis);
        }
        write_norm_attrs(w, self.epsilon, self.center, self.scale);
    }
}

// ---------------------------------------------------------------------------------------
// nn.max_pool2d, nn.avg_pool2d
// ---------------------------------------------------------------------------------------

/// The kernel taps of one output position along one axis: taps `lo..hi` read data, the
/// first of them at input index `first`; `padded` taps lie inside the padded extent.
#[derive(Clone, Copy, Debug)]
struct Taps {
    count: usize,
    first: usize,
    padded: usize,
}

/// [`Taps`] for each of `out` window positions along an axis of length `input`.
fn axis_taps(
    out: usize,
    input: usize,
    kernel: usize,
    stride: usize,
    dilation: usize,
    pads: (usize, usize),
) -> Vec<Taps> {
    (0..out)
        .map(|p| {
            let start = (p * stride) as isize - pads.0 as isize;
            let (lo, hi) = valid_taps(start, kernel, dilation, input);
            let (plo, phi) = valid_taps(
                start + pads.0 as isize,
                kernel,
                dilation,
                input + pads.0 + pads.1,
            );
            Taps {
                count: hi - lo,
                first: if hi > lo {
                    (start + (lo * dilation) as isize) as usize
                } else {
                    0
                },
                padded: phi - plo,
            }
        })
        .collect()
}

impl Pool2d {
    /// The windows of every output element: per output row and per output column.
    fn taps(&self, xs: [usize; 4], os: [usize; 4]) -> (Vec<Taps>, Vec<Taps>) {
        let [_, _, h, w] = xs;
        let [_, _, oh, ow] = os;
        let [pt, pl, pb, pr] = self.padding;
        let rows = axis_taps(
            oh,
            h,
            self.pool_size[0],
            self.strides[0],
            self.dilation[0],
            (pt, pb),
        );
        let cols = axis_taps(
            ow,
            w,
            self.pool_size[1],
            self.strides[1],
            self.dilation[1],
            (pl, pr),
        );
        (rows, cols)
    }

    /// Max pooling on any numeric dtype: padded (and ceil-mode overhang) positions never
    /// win; a window holding no data yields the dtype's lowest finite value, as in TVM.
    fn max_typed<T: Num>(&self, x: &NDArray, out: &TensorType) -> Result<Value> {
        let (xs, os) = (dims4(x.shape()), dims4(&out.shape));
        let (rows, cols) = self.taps(xs, os);
        let [dh, dw] = self.dilation;
        let (hw, w) = (xs[2] * xs[3], xs[3]);
        let lowest = T::lowest(out.dtype);
        let xv = T::read(x);
        let mut y = Vec::with_capacity(out.numel());
        for p in 0..xs[0] * xs[1] {
            let plane = &xv[p * hw..(p + 1) * hw];
            for rt in &rows {
                for ct in &cols {
                    let mut m: Option<T> = None;
                    for i in 0..rt.count {
                        let row = &plane[(rt.first + i * dh) * w..];
                        for j in 0..ct.count {
                            let e = row[ct.first + j * dw];
                            m = Some(m.map_or(e, |m| max_nan(m, e)));
                        }
                    }
                    y.push(m.unwrap_or(lowest));
                }
            }
        }
        tensor_value(out, T::write(out.dtype, y))
    }

    /// Average pooling (float only): the sum over data positions divided by their count,
    /// or by the count of positions inside the padded input with `count_include_pad`;
    /// ceil-mode overhang is never counted. An empty window gives 0.
    fn avg(&self, x: &NDArray, out: &TensorType) -> Result<Value> {
        let (xs, os) = (dims4(x.shape()), dims4(&out.shape));
        let (rows, cols) = self.taps(xs, os);
        let [dh, dw] = self.dilation;
        let (hw, w) = (xs[2] * xs[3], xs[3]);
        let xv = x.to_f64_vec();
        let mut y = Vec::with_capacity(out.numel());
        for p in 0..xs[0] * xs[1] {
            let plane = &xv[p * hw..(p + 1) * hw];
            for rt in &rows {
                for ct in &cols {
                    let mut sum = 0.0;
                    for i in 0..rt.count {
                        let row = &plane[(rt.first + i * dh) * w..];
                        for j in 0..ct.count {
                            sum += row[ct.first + j * dw];
                        }
                    }
                    let divisor = if self.count_include_pad {
                        rt.padded * ct.padded
                    } else {
                        rt.count * ct.count
                    };
                    y.push(if divisor == 0 {
                        0.0
                    } else {
                        sum / divisor as f64
                    });
                }
            }
        }
        NDArray::from_f64(out.shape.clone(), out.dtype, y).map(Value::Tensor)
    }
}

impl OpSpec for Pool2d {
    fn pattern(&self) -> OpPattern {
        OpPattern::OutEWiseFusable
    }

    fn name(&self) -> &str {
        match self.kind {
            PoolKind::Max => "nn.max_pool2d",
            PoolKind::Avg => "nn.avg_pool2d",
        }
    }

    fn infer_type(&self, args: &[Type]) -> Result<Type> {
        let op = self.name();
        expect_arity(op, args, 1)?;
        let x = tensor_arg(op, args, 0, "data")?;
        expect_rank(op, x, "argument 0 (data)", 4)?;
        match self.kind {
            PoolKind::Max => {
                expect_numeric(op, x, "argument 0 (data)")?;
                if self.count_include_pad {
                    return Err(Error::ty(
                        op,
                        "count_include_pad applies to average pooling only",
                    ));
                }
            }
            PoolKind::Avg => expect_float(op, x, "argument 0 (data)")?,
        }
        expect_positive(op, "pool_size", &self.pool_size)?;
        expect_positive(op, "strides", &self.strides)?;
        expect_positive(op, "dilation", &self.dilation)?;
        let [n, c, h, w] = dims4(&x.shape);
        let [pt, pl, pb, pr] = self.padding;
        let [kh, kw] = self.pool_size;
        let [sh, sw] = self.strides;
        let [dh, dw] = self.dilation;
        let oh = window_out(op, "height", x, h, (pt, pb), kh, dh, sh, self.ceil_mode)?;
        let ow = window_out(op, "width", x, w, (pl, pr), kw, dw, sw, self.ceil_mode)?;
        Ok(Type::tensor([n, c, oh, ow], x.dtype))
    }

    fn eval(&self, args: &[Value], out: &Type) -> Result<Value> {
        let out = out_tensor(self.name(), out)?.clone();
        let [x] = tensor_args(self.name(), args)?;
        match self.kind {
            PoolKind::Avg => self.avg(x, &out),
            PoolKind::Max if out.dtype.is_float() => self.max_typed::<f64>(x, &out),
            PoolKind::Max => self.max_typed::<i64>(x, &out),
        }
    }

    fn write_attrs(&self, w: &mut AttrWriter) {
        w.usizes("pool_size", &self.pool_size);
        if self.strides != [1, 1] {
            w.usizes("strides", &self.strides);
        }
        if self.dilation != [1, 1] {
            w.usizes("dilation", &self.dilation);
        }
        w.usizes("padding", &self.padding);
        if self.ceil_mode {
            w.bool("ceil_mode", true);
        }
        if self.kind == PoolKind::Avg && self.count_include_pad {
            w.bool("count_include_pad", true);
        }
    }
}

fn parse_pool2d(kind: PoolKind, r: &mut AttrReader) -> Result<Pool2d> {
    let Some(pool_size) = read_opt_pair(r, "pool_size", true)? else {
        return Err(r.error("pool_size", "is required"));
    };
    let strides = read_pair(r, "strides", [1, 1])?;
    let dilation = read_pair(r, "dilation", [1, 1])?;
    let padding = read_padding(r)?;
    r.expect_str("layout", "NCHW")?;
    r.expect_str("out_layout", "NCHW")?;
    let ceil_mode = r.bool("ceil_mode")?.unwrap_or(false);
    let count_include_pad = match kind {
        PoolKind::Avg => r.bool("count_include_pad")?.unwrap_or(false),
        PoolKind::Max => false,
    };
    Ok(Pool2d {
        kind,
        pool_size,
        strides,
        dilation,
        padding,
        ceil_mode,
        count_include_pad,
    })
}

// ---------------------------------------------------------------------------------------
// nn.global_avg_pool2d, nn.global_max_pool2d
// ---------------------------------------------------------------------------------------

impl OpSpec for GlobalPool2d {
    fn pattern(&self) -> OpPattern {
        OpPattern::OutEWiseFusable
    }

    fn name(&self) -> &str {
        match self.kind {
            PoolKind::Max => "nn.global_max_pool2d",
            PoolKind::Avg => "nn.global_avg_pool2d",
        }
    }

    fn infer_type(&self, args: &[Type]) -> Result<Type> {
        let op = self.name();
        expect_arity(op, args, 1)?;
        let x = tensor_arg(op, args, 0, "data")?;
        expect_rank(op, x, "argument 0 (data)", 4)?;
        match self.kind {
            PoolKind::Max => expect_numeric(op, x, "argument 0 (data)")?,
            PoolKind::Avg => expect_float(op, x, "argument 0 (data)")?,
        }
        let [n, c, h, w] = dims4(&x.shape);
        if h * w == 0 {
            return Err(Error::ty(
                op,
                format!(
                    "argument 0 (data) {} has no spatial elements to pool",
                    fmt_shape(&x.shape)
                ),
            ));
        }
        Ok(Type::tensor([n, c, 1, 1], x.dtype))
    }

    fn eval(&self, args: &[Value], out: &Type) -> Result<Value> {
        let out = out_tensor(self.name(), out)?.clone();
        let [x] = tensor_args(self.name(), args)?;
        let hw = x.shape()[2] * x.shape()[3];
        let planes = x.shape()[0] * x.shape()[1];
        let data = match self.kind {
            PoolKind::Avg => {
                let v = x.to_f64_vec();
                let means =
                    (0..planes).map(|p| v[p * hw..(p + 1) * hw].iter().sum::<f64>() / hw as f64);
                Data::from_f64(out.dtype, means.collect::<Vec<_>>())
            }
            PoolKind::Max if out.dtype.is_float() => {
                let v = x.to_f64_vec();
                let maxes = (0..planes).map(|p| {
                    v[p * hw..(p + 1) * hw]
                        .iter()
                        .copied()
                        .fold(f64::NEG_INFINITY, max_nan)
                });
                Data::from_f64(out.dtype, maxes.collect::<Vec<_>>())
            }
            PoolKind::Max => {
                let v = x.to_i64_vec();
                let maxes = (0..planes).map(|p| {
                    v[p * hw..(p + 1) * hw]
                        .iter()
                        .copied()
                        .max()
                        .unwrap_or(i64::MIN)
                });
                Data::from_i64(out.dtype, maxes.collect::<Vec<_>>())
            }
        };
        tensor_value(&out, data)
    }
}

// ---------------------------------------------------------------------------------------
// nn.dense
// ---------------------------------------------------------------------------------------

impl Dense {
    fn eval_typed<T: Num>(&self, x: &NDArray, w: &NDArray, out: &TensorType) -> Result<Value> {
        let [n, k] = [w.shape()[0], w.shape()[1]];
        let m: usize = x.shape()[..x.rank() - 1].iter().product();
        let y = matmul_nt(&T::read(x), &T::read(w), m, n, k);
        tensor_value(out, T::write(out.dtype, y))
    }
}

impl OpSpec for Dense {
    fn pattern(&self) -> OpPattern {
        OpPattern::OutEWiseFusable
    }

    /// Each output element is one multiply-add per element of the contracted (last)
    /// axis of the first argument.
    fn flops(&self, args: &[Type], out: &Type) -> f64 {
        let k = args
            .first()
            .and_then(Type::as_tensor)
            .and_then(|t| t.shape.last().copied())
            .unwrap_or(1);
        2.0 * super::type_elements(out) * k as f64
    }

    fn name(&self) -> &str {
        "nn.dense"
    }

    fn infer_type(&self, args: &[Type]) -> Result<Type> {
        let op = self.name();
        expect_arity(op, args, 2)?;
        let x = tensor_arg(op, args, 0, "data")?;
        let w = tensor_arg(op, args, 1, "weight")?;
        if x.rank() == 0 {
            return Err(Error::ty(
                op,
                "argument 0 (data) must have rank at least 1, got a scalar",
            ));
        }
        expect_rank(op, w, "argument 1 (weight)", 2)?;
        expect_numeric(op, x, "argument 0 (data)")?;
        expect_same_dtype(op, x, "argument 0 (data)", w, "argument 1 (weight)")?;
        let k = x.shape[x.rank() - 1];
        let [n, wk] = [w.shape[0], w.shape[1]];
        if wk != k {
            return Err(Error::ty(
                op,
                format!(
                    "argument 1 (weight) {} has {wk} input features but data {} has {k}",
                    fmt_shape(&w.shape),
                    fmt_shape(&x.shape)
                ),
            ));
        }
        if let Some(u) = self.units
            && u != n
        {
            return Err(Error::ty(
                op,
                format!(
                    "units={u} but argument 1 (weight) {} has {n} output features",
                    fmt_shape(&w.shape)
                ),
            ));
        }
        let mut shape = x.shape.clone();
        *shape.last_mut().expect("rank checked") = n;
        Ok(Type::tensor(shape, x.dtype))
    }

    fn eval(&self, args: &[Value], out: &Type) -> Result<Value> {
        let out = out_tensor(self.name(), out)?.clone();
        let [x, w] = tensor_args(self.name(), args)?;
        if out.dtype.is_float() {
            self.eval_typed::<f64>(x, w, &out)
        } else {
            self.eval_typed::<i64>(x, w, &out)
        }
    }

    fn write_attrs(&self, w: &mut AttrWriter) {
        if let Some(u) = self.units {
            w.int("units", u as i64);
        }
    }
}

// ---------------------------------------------------------------------------------------
// nn.bias_add
// ---------------------------------------------------------------------------------------

impl BiasAdd {
    fn eval_typed<T: Num>(
        &self,
        x: &NDArray,
        bias: &NDArray,
        axis: usize,
        out: &TensorType,
    ) -> Result<Value> {
        let (outer, len, inner) = split_axis(x.shape(), axis);
        let (xv, b) = (T::read(x), T::read(bias));
        let mut y = Vec::with_capacity(xv.len());
        for o in 0..outer {
            for (ch, &bc) in b.iter().enumerate().take(len) {
                let base = (o * len + ch) * inner;
                y.extend(xv[base..base + inner].iter().map(|&e| e.add(bc)));
            }
        }
        tensor_value(out, T::write(out.dtype, y))
    }
}

impl OpSpec for BiasAdd {
    fn pattern(&self) -> OpPattern {
        OpPattern::Broadcast
    }

    fn name(&self) -> &str {
        "nn.bias_add"
    }

    fn infer_type(&self, args: &[Type]) -> Result<Type> {
        let op = self.name();
        expect_arity(op, args, 2)?;
        let x = tensor_arg(op, args, 0, "data")?;
        let b = tensor_arg(op, args, 1, "bias")?;
        expect_numeric(op, x, "argument 0 (data)")?;
        expect_same_dtype(op, x, "argument 0 (data)", b, "argument 1 (bias)")?;
        let axis = normalize_axis(op, self.axis, x.rank())?;
        expect_axis_vector(op, b, "argument 1 (bias)", x, axis)?;
        Ok(Type::Tensor(x.clone()))
    }

    fn eval(&self, args: &[Value], out: &Type) -> Result<Value> {
        let out = out_tensor(self.name(), out)?.clone();
        let [x, b] = tensor_args(self.name(), args)?;
        let axis = normalize_axis(self.name(), self.axis, x.rank())?;
        if out.dtype.is_float() {
            self.eval_typed::<f64>(x, b, axis, &out)
        } else {
            self.eval_typed::<i64>(x, b, axis, &out)
        }
    }

    fn write_attrs(&self, w: &mut AttrWriter) {
        if self.axis != 1 {
            w.int("axis", self.axis);
        }
    }
}

// ---------------------------------------------------------------------------------------
// nn.batch_flatten
// ---------------------------------------------------------------------------------------

impl OpSpec for BatchFlatten {
    fn pattern(&self) -> OpPattern {
        OpPattern::Injective
    }

    /// A shape view: the data is the argument's, in the same row-major order.
    fn is_view(&self, _args: &[Type]) -> bool {
        true
    }

    fn name(&self) -> &str {
        "nn.batch_flatten"
    }

    fn infer_type(&self, args: &[Type]) -> Result<Type> {
        let op = self.name();
        expect_arity(op, args, 1)?;
        let x = tensor_arg(op, args, 0, "data")?;
        if x.rank() == 0 {
            return Err(Error::ty(
                op,
                "argument 0 (data) must have rank at least 1, got a scalar",
            ));
        }
        let rest: usize = x.shape[1..].iter().product();
        Ok(Type::tensor([x.shape[0], rest], x.dtype))
    }

    fn eval(&self, args: &[Value], out: &Type) -> Result<Value> {
        let out = out_tensor(self.name(), out)?.clone();
        let [x] = tensor_args(self.name(), args)?;
        x.reshape(out.shape).map(Value::Tensor)
    }
}

// ---------------------------------------------------------------------------------------
// nn.softmax
// ---------------------------------------------------------------------------------------

impl OpSpec for Softmax {
    fn pattern(&self) -> OpPattern {
        OpPattern::Opaque
    }

    /// About five operations an element (max or mean, subtract, exp or square, sum,
    /// divide).
    fn flops(&self, _args: &[Type], out: &Type) -> f64 {
        5.0 * super::type_elements(out)
    }

    fn name(&self) -> &str {
        "nn.softmax"
    }

    fn infer_type(&self, args: &[Type]) -> Result<Type> {
        let op = self.name();
        expect_arity(op, args, 1)?;
        let x = tensor_arg(op, args, 0, "data")?;
        expect_float(op, x, "argument 0 (data)")?;
        normalize_axis(op, self.axis, x.rank())?;
        Ok(Type::Tensor(x.clone()))
    }

    /// `exp(x - max) / sum(exp(x - max))` along the axis.
    fn eval(&self, args: &[Value], out: &Type) -> Result<Value> {
        let out = out_tensor(self.name(), out)?.clone();
        let [x] = tensor_args(self.name(), args)?;
        let axis = normalize_axis(self.name(), self.axis, x.rank())?;
        let (outer, len, inner) = split_axis(x.shape(), axis);
        let mut y = x.to_f64_vec();
        for o in 0..outer {
            for k in 0..inner {
                let at = |i: usize| (o * len + i) * inner + k;
                let max = (0..len).map(|i| y[at(i)]).fold(f64::NEG_INFINITY, f64::max);
                let mut sum = 0.0;
                for i in 0..len {
                    let e = (y[at(i)] - max).exp();
                    y[at(i)] = e;
                    sum += e;
                }
                for i in 0..len {
                    y[at(i)] /= sum;
                }
            }
        }
        NDArray::from_f64(out.shape, out.dtype, y).map(Value::Tensor)
    }

    fn write_attrs(&self, w: &mut AttrWriter) {
        if self.axis != -1 {
            w.int("axis", self.axis);
        }
    }
}

// ---------------------------------------------------------------------------------------
// nn.layer_norm
// ---------------------------------------------------------------------------------------

impl OpSpec for LayerNorm {
    fn pattern(&self) -> OpPattern {
        OpPattern::Opaque
    }

    /// About five operations an element (max or mean, subtract, exp or square, sum,
    /// divide).
    fn flops(&self, _args: &[Type], out: &Type) -> f64 {
        5.0 * super::type_elements(out)
    }

    fn name(&self) -> &str {
        "nn.layer_norm"
    }

    fn infer_type(&self, args: &[Type]) -> Result<Type> {
        let op = self.name();
        expect_arity(op, args, 3)?;
        let x = tensor_arg(op, args, 0, "data")?;
        expect_float(op, x, "argument 0 (data)")?;
        let axis = normalize_axis(op, self.axis, x.rank())?;
        for (i, what) in [(1, "gamma"), (2, "beta")] {
            let v = tensor_arg(op, args, i, what)?;
            let what = format!("argument {i} ({what})");
            expect_same_dtype(op, x, "argument 0 (data)", v, &what)?;
            expect_axis_vector(op, v, &what, x, axis)?;
        }
        Ok(Type::Tensor(x.clone()))
    }

    /// `(x - mean) / sqrt(var + epsilon) * gamma + beta` with the mean and the (biased)
    /// variance taken along the axis.
    fn eval(&self, args: &[Value], out: &Type) -> Result<Value> {
        let out = out_tensor(self.name(), out)?.clone();
        let [x, gamma, beta] = tensor_args(self.name(), args)?;
        let axis = normalize_axis(self.name(), self.axis, x.rank())?;
        let (outer, len, inner) = split_axis(x.shape(), axis);
        let (xv, g, b) = (x.to_f64_vec(), gamma.to_f64_vec(), beta.to_f64_vec());
        let mut y = vec![0.0; xv.len()];
        for o in 0..outer {
            for k in 0..inner {
                let at = |i: usize| (o * len + i) * inner + k;
                let mean = (0..len).map(|i| xv[at(i)]).sum::<f64>() / len as f64;
                let var = (0..len).map(|i| (xv[at(i)] - mean).powi(2)).sum::<f64>() / len as f64;
                let sd = (var + self.epsilon.0).sqrt();
                for i in 0..len {
                    let mut r = (xv[at(i)] - mean) / sd;
                    if self.scale {
                        r *= g[i];
                    }
                    if self.center {
                        r += b[i];
                    }
                    y[at(i)] = r;
                }
            }
        }
        NDArray::from_f64(out.shape, out.dtype, y).map(Value::Tensor)
    }

    fn write_attrs(&self, w: &mut AttrWriter) {
        if self.axis != -1 {
            w.int("axis", self.axis);
        }
        write_norm_attrs(w, self.epsilon, self.center, self.scale);
    }
}

fn parse_norm(r: &mut AttrReader, default_axis: i64) -> Result<(i64, F64, bool, bool)> {
    let axis = r.int("axis")?.unwrap_or(default_axis);
    let epsilon = read_epsilon(r)?;
    let center = r.bool("center")?.unwrap_or(true);
    let scale = r.bool("scale")?.unwrap_or(true);
    Ok((axis, epsilon, center, scale))
}

// ---------------------------------------------------------------------------------------
// nn.batch_matmul
// ---------------------------------------------------------------------------------------

impl BatchMatmul {
    /// `(batch, m, n, k)` of a product whose arguments passed the type rule.
    fn dims(&self, a: &[usize], b: &[usize]) -> (usize, usize, usize, usize) {
        let (m, k) = if self.transpose_a {
            (a[2], a[1])
        } else {
            (a[1], a[2])
        };
        let n = if self.transpose_b { b[1] } else { b[2] };
        (a[0].max(b[0]), m, n, k)
    }

    /// Each batch's `a` as `m x k` and `b` as `n x k`, then [`matmul_nt`].
    fn eval_typed<T: Num>(&self, a: &NDArray, b: &NDArray, out: &TensorType) -> Result<Value> {
        let (batch, m, n, k) = self.dims(a.shape(), b.shape());
        let (av, bv) = (T::read(a), T::read(b));
        let mut y = Vec::with_capacity(batch * m * n);
        for i in 0..batch {
            let ai = if a.shape()[0] == 1 { 0 } else { i };
            let bi = if b.shape()[0] == 1 { 0 } else { i };
            let a_mat = &av[ai * m * k..(ai + 1) * m * k];
            let b_mat = &bv[bi * n * k..(bi + 1) * n * k];
            let a_mk = if self.transpose_a {
                transpose2(a_mat, k, m)
            } else {
                a_mat.to_vec()
            };
            let b_nk = if self.transpose_b {
                b_mat.to_vec()
            } else {
                transpose2(b_mat, k, n)
            };
            y.extend(matmul_nt(&a_mk, &b_nk, m, n, k));
        }
        tensor_value(out, T::write(out.dtype, y))
    }
}

impl OpSpec for BatchMatmul {
    fn pattern(&self) -> OpPattern {
        OpPattern::OutEWiseFusable
    }

    /// Each output element is one multiply-add per element of the contracted (last)
    /// axis of the first argument.
    fn flops(&self, args: &[Type], out: &Type) -> f64 {
        let k = args
            .first()
            .and_then(Type::as_tensor)
            .and_then(|t| t.shape.last().copied())
            .unwrap_or(1);
        2.0 * super::type_elements(out) * k as f64
    }

    fn name(&self) -> &str {
        "nn.batch_matmul"
    }

    fn infer_type(&self, args: &[Type]) -> Result<Type> {
        let op = self.name();
        expect_arity(op, args, 2)?;
        let a = tensor_arg(op, args, 0, "a")?;
        let b = tensor_arg(op, args, 1, "b")?;
        expect_rank(op, a, "argument 0 (a)", 3)?;
        expect_rank(op, b, "argument 1 (b)", 3)?;
        expect_numeric(op, a, "argument 0 (a)")?;
        expect_same_dtype(op, a, "argument 0 (a)", b, "argument 1 (b)")?;
        let (sa, sb) = (fmt_shape(&a.shape), fmt_shape(&b.shape));
        let (ba, bb) = (a.shape[0], b.shape[0]);
        if ba != bb && ba != 1 && bb != 1 {
            return Err(Error::ty(
                op,
                format!(
                    "argument 0 (a) {sa} and argument 1 (b) {sb} have batch sizes {ba} and {bb}, which do not broadcast"
                ),
            ));
        }
        let ka = if self.transpose_a {
            a.shape[1]
        } else {
            a.shape[2]
        };
        let kb = if self.transpose_b {
            b.shape[2]
        } else {
            b.shape[1]
        };
        if ka != kb {
            let flags = format!(
                "transpose_a={}, transpose_b={}",
                if self.transpose_a { "True" } else { "False" },
                if self.transpose_b { "True" } else { "False" }
            );
            return Err(Error::ty(
                op,
                format!(
                    "argument 0 (a) {sa} has reduction length {ka} but argument 1 (b) {sb} has {kb} ({flags})"
                ),
            ));
        }
        let (batch, m, n, _) = self.dims(&a.shape, &b.shape);
        Ok(Type::tensor([batch, m, n], a.dtype))
    }

    fn eval(&self, args: &[Value], out: &Type) -> Result<Value> {
        let out = out_tensor(self.name(), out)?.clone();
        let [a, b] = tensor_args(self.name(), args)?;
        if out.dtype.is_float() {
            self.eval_typed::<f64>(a, b, &out)
        } else {
            self.eval_typed::<i64>(a, b, &out)
        }
    }

    fn write_attrs(&self, w: &mut AttrWriter) {
        if self.transpose_a {
            w.bool("transpose_a", true);
        }
        if !self.transpose_b {
            w.bool("transpose_b", false);
        }
    }
}

// ---------------------------------------------------------------------------------------
// Parsing
// ---------------------------------------------------------------------------------------

/// Parses an op of this family from its name and attributes.
pub(super) fn parse(name: &str, r: &mut AttrReader) -> Option<Result<Op>> {
    let op = match name {
        "nn.conv2d" => parse_conv2d(r).map(Op::from),
        "nn.batch_norm" => parse_norm(r, 1).map(|(axis, epsilon, center, scale)| {
            Op::from(BatchNorm {
                axis,
                epsilon,
                center,
                scale,
            })
        }),
        "nn.max_pool2d" => parse_pool2d(PoolKind::Max, r).map(Op::from),
        "nn.avg_pool2d" => parse_pool2d(PoolKind::Avg, r).map(Op::from),
        "nn.global_avg_pool2d" | "nn.global_max_pool2d" => (|| {
            r.expect_str("layout", "NCHW")?;
            r.expect_str("out_layout", "NCHW")?;
            let kind = if name == "nn.global_avg_pool2d" {
                PoolKind::Avg
            } else {
                PoolKind::Max
            };
            Ok(Op::from(GlobalPool2d { kind }))
        })(),
        "nn.dense" => (|| {
            let units = r.usize("units")?;
            expect_no_out_dtype(r)?;
            Ok(Op::from(Dense { units }))
        })(),
        "nn.bias_add" => r.int("axis").map(|a| {
            Op::from(BiasAdd {
                axis: a.unwrap_or(1),
            })
        }),
        "nn.batch_flatten" => Ok(Op::from(BatchFlatten)),
        "nn.softmax" => r.int("axis").map(|a| {
            Op::from(Softmax {
                axis: a.unwrap_or(-1),
            })
        }),
        "nn.layer_norm" => parse_norm(r, -1).map(|(axis, epsilon, center, scale)| {
            Op::from(LayerNorm {
                axis,
                epsilon,
                center,
                scale,
            })
        }),
        "nn.batch_matmul" => (|| {
            let transpose_a = r.bool("transpose_a")?.unwrap_or(false);
            let transpose_b = r.bool("transpose_b")?.unwrap_or(true);
            expect_no_out_dtype(r)?;
            Ok(Op::from(BatchMatmul {
                transpose_a,
                transpose_b,
            }))
        })(),
        _ => return None,
    };
    Some(op)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::attrs::AttrValue;

    fn ty(shape: &[usize], dtype: DType) -> Type {
        Type::tensor(shape.to_vec(), dtype)
    }

    fn f32s(shape: &[usize], v: &[f64]) -> NDArray {
        NDArray::from_f64(shape.to_vec(), DType::F32, v.to_vec()).unwrap()
    }

    /// Type-checks and evaluates `op` on `args`.
    fn run(op: impl Into<Op>, args: &[NDArray]) -> Value {
        let op = op.into();
        let tys: Vec<Type> = args.iter().map(|a| Type::Tensor(a.ty())).collect();
        let out = op.infer_type(&tys).unwrap();
        let vals: Vec<Value> = args.iter().cloned().map(Value::Tensor).collect();
        let v = op.eval(&vals, &out).unwrap();
        assert_eq!(
            v.ty(),
            out,
            "{op}: value type differs from the inferred type"
        );
        v
    }

    fn run1(op: impl Into<Op>, args: &[NDArray]) -> NDArray {
        run(op, args).into_tensor("result").unwrap()
    }

    /// The type error message of `op` on argument types `args`.
    fn type_err(op: impl Into<Op>, args: &[Type]) -> String {
        let op = op.into();
        let e = op.infer_type(args).unwrap_err();
        assert!(matches!(e, Error::Type { .. }), "{e}");
        e.to_string()
    }

    fn assert_close(got: &NDArray, want: &[f64], tol: f64) {
        let w = NDArray::from_f64(got.shape().to_vec(), got.dtype(), want.to_vec()).unwrap();
        if let Err(m) = got.allclose(&w, tol, tol) {
            panic!("{m}\n got {:?}\nwant {want:?}", got.to_f64_vec());
        }
    }

    fn contains_all(msg: &str, parts: &[&str]) {
        for p in parts {
            assert!(msg.contains(p), "`{msg}` does not mention `{p}`");
        }
    }

    // ---- nn.conv2d ----------------------------------------------------------------

    #[test]
    fn conv2d_type_rule() {
        let f = DType::F32;
        let seed = Conv2d {
            strides: [2, 2],
            padding: [3; 4],
            ..Conv2d::new(64, [7, 7])
        };
        let out = seed
            .infer_type(&[ty(&[1, 3, 224, 224], f), ty(&[64, 3, 7, 7], f)])
            .unwrap();
        assert_eq!(out, ty(&[1, 64, 112, 112], f));
        let depthwise = Conv2d {
            groups: 8,
            padding: [1; 4],
            ..Conv2d::default()
        };
        let out = depthwise
            .infer_type(&[ty(&[2, 8, 5, 6], f), ty(&[8, 1, 3, 3], f)])
            .unwrap();
        assert_eq!(out, ty(&[2, 8, 5, 6], f));
        let dilated = Conv2d {
            dilation: [2, 3],
            strides: [1, 2],
            padding: [0, 1, 2, 1],
            ..Conv2d::default()
        };
        // H: (7 + 0 + 2 - 2*2 - 1) / 1 + 1 = 5; W: (8 + 1 + 1 - 3*2 - 1) / 2 + 1 = 2.
        let out =
            dilated.infer_type(&[ty(&[1, 2, 7, 8], DType::I32), ty(&[4, 2, 3, 3], DType::I32)]);
        assert_eq!(out.unwrap(), ty(&[1, 4, 5, 2], DType::I32));

        let e = type_err(
            Conv2d::default(),
            &[ty(&[1, 3, 224, 224], f), ty(&[8, 4, 3, 3], f)],
        );
        contains_all(
            &e,
            &[
                "nn.conv2d",
                "argument 1 (weight)",
                "(8, 4, 3, 3)",
                "(1, 3, 224, 224)",
                "groups=1",
            ],
        );
        let g2 = Conv2d {
            groups: 2,
            ..Conv2d::default()
        };
        let e = type_err(g2.clone(), &[ty(&[1, 4, 5, 5], f), ty(&[6, 4, 3, 3], f)]);
        contains_all(
            &e,
            &[
                "(6, 4, 3, 3)",
                "has 4 input channels",
                "groups=2",
                "2 per group",
            ],
        );
        let e = type_err(g2.clone(), &[ty(&[1, 4, 5, 5], f), ty(&[3, 2, 3, 3], f)]);
        contains_all(
            &e,
            &[
                "argument 1 (weight) (3, 2, 3, 3)",
                "3 output channels",
                "groups=2",
            ],
        );
        let e = type_err(g2, &[ty(&[1, 3, 5, 5], f), ty(&[4, 1, 3, 3], f)]);
        contains_all(&e, &["argument 0 (data) (1, 3, 5, 5)", "groups=2"]);
        let e = type_err(
            Conv2d::new(32, [3, 3]),
            &[ty(&[1, 3, 8, 8], f), ty(&[16, 3, 3, 3], f)],
        );
        contains_all(&e, &["channels=32", "(16, 3, 3, 3)"]);
        let e = type_err(
            Conv2d::new(16, [5, 5]),
            &[ty(&[1, 3, 8, 8], f), ty(&[16, 3, 3, 3], f)],
        );
        contains_all(&e, &["kernel_size=[5, 5]", "3x3"]);
        let e = type_err(
            Conv2d::default(),
            &[ty(&[1, 3, 2, 8], f), ty(&[16, 3, 3, 3], f)],
        );
        contains_all(&e, &["height", "(1, 3, 2, 8)"]);
        let e = type_err(
            Conv2d::default(),
            &[ty(&[1, 3, 8, 8], f), ty(&[16, 3, 3, 3], DType::F16)],
        );
        contains_all(&e, &["argument 1 (weight)", "float16", "dtypes must match"]);
        let e = type_err(
            Conv2d::default(),
            &[ty(&[3, 8, 8], f), ty(&[16, 3, 3, 3], f)],
        );
        contains_all(&e, &["argument 0 (data)", "rank 4", "(3, 8, 8)"]);
        let e = type_err(
            Conv2d::default(),
            &[
                ty(&[1, 1, 8, 8], DType::Bool),
                ty(&[1, 1, 3, 3], DType::Bool),
            ],
        );
        contains_all(&e, &["numeric"]);
        let zero_stride = Conv2d {
            strides: [0, 1],
            ..Conv2d::default()
        };
        let e = type_err(zero_stride, &[ty(&[1, 1, 8, 8], f), ty(&[1, 1, 3, 3], f)]);
        contains_all(&e, &["strides"]);
        let e = type_err(Conv2d::default(), &[ty(&[1, 1, 8, 8], f)]);
        contains_all(&e, &["2 argument"]);
    }

    #[test]
    fn conv2d_hand_computed() {
        // 1..9 in a 3x3 plane, 2x2 kernel [[1, 2], [3, 4]], stride 2, padding 1:
        // out(0,0) = 1*4; out(0,1) = 2*3 + 3*4; out(1,0) = 4*2 + 7*4;
        // out(1,1) = 5*1 + 6*2 + 8*3 + 9*4.
        let x = f32s(&[1, 1, 3, 3], &[1., 2., 3., 4., 5., 6., 7., 8., 9.]);
        let w = f32s(&[1, 1, 2, 2], &[1., 2., 3., 4.]);
        let op = Conv2d {
            strides: [2, 2],
            padding: [1; 4],
            ..Conv2d::default()
        };
        let y = run1(op, &[x, w]);
        assert_eq!(y.shape(), &[1, 1, 2, 2]);
        assert_eq!(y.to_f64_vec(), vec![4., 18., 36., 77.]);

        // Two groups with dilation 2: channel 0 (1..9) meets [[1, 0], [0, 1]] at the
        // corners (1 + 9); channel 1 (10..18) meets [[0, 1], [-1, 0]] at (0,2) and (2,0):
        // 12 - 16.
        let x: Vec<f64> = (1..=18).map(f64::from).collect();
        let x = f32s(&[1, 2, 3, 3], &x);
        let w = f32s(&[2, 1, 2, 2], &[1., 0., 0., 1., 0., 1., -1., 0.]);
        let op = Conv2d {
            dilation: [2, 2],
            groups: 2,
            ..Conv2d::default()
        };
        assert_eq!(
            run1(op.clone(), &[x.clone(), w.clone()]).to_f64_vec(),
            vec![10., -4.]
        );
        // Same with padding 1 and stride 2 (2x2 output; windows start at (-1,-1), (-1,1),
        // (1,-1), (1,1) and their taps are 2 apart). Channel 0 taps the window's (0,0)
        // and (2,2) corners: only x(1,1) = 5 is ever inside, via (2,2) of the first
        // window and (0,0) of the last. Channel 1 taps (0,2) with weight 1 and (2,0)
        // with -1: only x(1,1) = 14 is inside, via (2,0) of the second window (-14)
        // and (0,2) of the third (+14).
        let op = Conv2d {
            strides: [2, 2],
            padding: [1; 4],
            ..op
        };
        let y = run1(op, &[x, w]);
        assert_eq!(y.shape(), &[1, 2, 2, 2]);
        assert_eq!(y.to_f64_vec(), vec![5., 0., 0., 5., 0., -14., 14., 0.]);

        // Integers accumulate exactly and wrap to the dtype at the end.
        let x = NDArray::from_vec([1, 1, 1, 2], vec![100i8, 100]).unwrap();
        let w = NDArray::from_vec([1, 1, 1, 2], vec![1i8, 1]).unwrap();
        let y = run1(Conv2d::default(), &[x, w]);
        assert_eq!(y.to_vec::<i8>().unwrap(), vec![-56]);
    }

    /// Direct 7-loop convolution, written independently of the kernel under test.
    fn naive_conv(
        c: &Conv2d,
        x: &[f64],
        xs: [usize; 4],
        w: &[f64],
        ws: [usize; 4],
    ) -> (Vec<usize>, Vec<f64>) {
        let [n, ci, h, wd] = xs;
        let [o, cg, kh, kw] = ws;
        let oh =
            (h + c.padding[0] + c.padding[2] - c.dilation[0] * (kh - 1) - 1) / c.strides[0] + 1;
        let ow =
            (wd + c.padding[1] + c.padding[3] - c.dilation[1] * (kw - 1) - 1) / c.strides[1] + 1;
        let og = o / c.groups;
        let mut out = Vec::new();
        for b in 0..n {
            for oc in 0..o {
                for y in 0..oh {
                    for xx in 0..ow {
                        let mut acc = 0.0;
                        for icg in 0..cg {
                            for i in 0..kh {
                                for j in 0..kw {
                                    let ih = (y * c.strides[0] + i * c.dilation[0]) as isize
                                        - c.padding[0] as isize;
                                    let iw = (xx * c.strides[1] + j * c.dilation[1]) as isize
                                        - c.padding[1] as isize;
                                    if ih < 0 || iw < 0 || ih >= h as isize || iw >= wd as isize {
                                        continue;
                                    }
                                    let ic = (oc / og) * cg + icg;
                                    acc += x[((b * ci + ic) * h + ih as usize) * wd + iw as usize]
                                        * w[((oc * cg + icg) * kh + i) * kw + j];
                                }
                            }
                        }
                        out.push(acc);
                    }
                }
            }
        }
        (vec![n, o, oh, ow], out)
    }

    /// The kernel's special paths (whole-plane runs for 1x1 stride-1, blocks of four
    /// input channels, strided blocks) against the naive convolution.
    #[test]
    fn conv2d_fast_paths_match_naive() {
        // (cin, cout, kernel, stride, padding, groups, h, w)
        let cases = [
            (9, 3, 1, 1, 0, 1, 5, 6),
            (8, 2, 1, 2, 0, 1, 7, 7),
            (5, 4, 3, 2, 1, 1, 6, 5),
            (12, 4, 3, 1, 1, 2, 4, 4),
            (8, 8, 3, 1, 1, 8, 5, 5),
            (4, 2, 7, 2, 3, 1, 9, 9),
        ];
        for (seed, (ci, co, k, s, p, g, h, w)) in cases.into_iter().enumerate() {
            for dtype in [DType::F32, DType::I32] {
                let op = Conv2d {
                    strides: [s, s],
                    padding: [p; 4],
                    groups: g,
                    ..Conv2d::new(co, [k, k])
                };
                let (xs, ws) = ([2, ci, h, w], [co, ci / g, k, k]);
                let x = NDArray::random(xs.to_vec(), dtype, seed as u64);
                let wt = NDArray::random(ws.to_vec(), dtype, 100 + seed as u64);
                let (shape, want) = naive_conv(&op, &x.to_f64_vec(), xs, &wt.to_f64_vec(), ws);
                let got = run1(op, &[x, wt]);
                let want = NDArray::from_f64(shape, dtype, want).unwrap();
                if let Err(m) = got.allclose(&want, 1e-5, 1e-5) {
                    panic!("case {seed} {dtype}: {m}");
                }
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(96))]

        #[test]
        fn conv2d_matches_naive(
            (n, groups, cin_g, cout_g) in (1usize..=2, 1usize..=3, 1usize..=6, 1usize..=3),
            (h, w, kh, kw) in (1usize..=7, 1usize..=7, 1usize..=3, 1usize..=3),
            (sh, sw, dh, dw) in (1usize..=3, 1usize..=3, 1usize..=2, 1usize..=2),
            padding in prop::array::uniform4(0usize..=2),
            float in any::<bool>(),
            seed in any::<u64>(),
        ) {
            prop_assume!(dh * (kh - 1) < h + padding[0] + padding[2]);
            prop_assume!(dw * (kw - 1) < w + padding[1] + padding[3]);
            let op = Conv2d {
                strides: [sh, sw],
                padding,
                dilation: [dh, dw],
                groups,
                channels: Some(cout_g * groups),
                kernel_size: Some([kh, kw]),
            };
            let dtype = if float { DType::F32 } else { DType::I32 };
            let xs = [n, cin_g * groups, h, w];
            let ws = [cout_g * groups, cin_g, kh, kw];
            let x = NDArray::random(xs.to_vec(), dtype, seed);
            let wt = NDArray::random(ws.to_vec(), dtype, seed ^ 0x5eed);
            let (shape, want) = naive_conv(&op, &x.to_f64_vec(), xs, &wt.to_f64_vec(), ws);
            let got = run1(op, &[x, wt]);
            prop_assert_eq!(got.shape(), &shape[..]);
            if float {
                let want = NDArray::from_f64(shape, DType::F32, want).unwrap();
                prop_assert!(got.allclose(&want, 1e-5, 1e-5).is_ok());
            } else {
                prop_assert_eq!(got.to_f64_vec(), want);
            }
        }
    }

    // ---- nn.batch_norm ------------------------------------------------------------

    fn bn_args(shape: &[usize], axis: usize, seed: u64) -> Vec<NDArray> {
        let c = shape[axis];
        vec![
            NDArray::random(shape.to_vec(), DType::F32, seed),
            NDArray::random_uniform([c], DType::F32, seed + 1, 0.5, 2.0),
            NDArray::random([c], DType::F32, seed + 2),
            NDArray::random([c], DType::F32, seed + 3),
            NDArray::random_uniform([c], DType::F32, seed + 4, 0.1, 3.0),
        ]
    }

    #[test]
    fn batch_norm_type_rule() {
        let f = DType::F32;
        let v = ty(&[64], f);
        let args = [
            ty(&[1, 64, 56, 56], f),
            v.clone(),
            v.clone(),
            v.clone(),
            v.clone(),
        ];
        let out = BatchNorm::default().infer_type(&args).unwrap();
        assert_eq!(
            out,
            Type::Tuple(vec![ty(&[1, 64, 56, 56], f), v.clone(), v.clone()])
        );
        let last = BatchNorm {
            axis: -1,
            ..BatchNorm::default()
        };
        let args = [
            ty(&[2, 5, 64], f),
            v.clone(),
            v.clone(),
            v.clone(),
            v.clone(),
        ];
        assert!(last.infer_type(&args).is_ok());

        let args = [
            ty(&[1, 64, 56, 56], f),
            v.clone(),
            v.clone(),
            ty(&[32], f),
            v.clone(),
        ];
        let e = type_err(BatchNorm::default(), &args);
        contains_all(
            &e,
            &[
                "nn.batch_norm",
                "argument 3 (moving_mean)",
                "(64)",
                "(32)",
                "(1, 64, 56, 56)",
            ],
        );
        let args = [
            ty(&[1, 64, 56, 56], f),
            ty(&[64, 1], f),
            v.clone(),
            v.clone(),
            v.clone(),
        ];
        let e = type_err(BatchNorm::default(), &args);
        contains_all(&e, &["argument 1 (gamma)", "(64, 1)"]);
        let args = [
            ty(&[1, 64], DType::I32),
            v.clone(),
            v.clone(),
            v.clone(),
            v.clone(),
        ];
        contains_all(&type_err(BatchNorm::default(), &args), &["float"]);
        let args = [
            ty(&[1, 64, 3, 3], f),
            v.clone(),
            v.clone(),
            v.clone(),
            ty(&[64], DType::F16),
        ];
        contains_all(
            &type_err(BatchNorm::default(), &args),
            &["argument 4 (moving_var)", "dtypes"],
        );
        let far = BatchNorm {
            axis: 4,
            ..BatchNorm::default()
        };
        let args = [ty(&[1, 64, 3, 3], f), v.clone(), v.clone(), v.clone(), v];
        contains_all(&type_err(far, &args), &["axis 4"]);
    }

    #[test]
    fn batch_norm_hand_computed() {
        // Channel 0: (x - 1) / 2 * 2 + 0; channel 1: (x - 3) / 1 * 1 + 1.
        let x = f32s(&[1, 2, 1, 2], &[1., 2., 3., 4.]);
        let gamma = f32s(&[2], &[2., 1.]);
        let beta = f32s(&[2], &[0., 1.]);
        let mean = f32s(&[2], &[1., 3.]);
        let var = f32s(&[2], &[4., 1.]);
        let args = [x, gamma, beta, mean.clone(), var.clone()];
        let exact = BatchNorm {
            epsilon: F64(0.0),
            ..BatchNorm::default()
        };
        let Value::Tuple(fields) = run(exact.clone(), &args) else {
            panic!("batch_norm returns a tuple");
        };
        assert_eq!(
            fields[0].as_tensor("y").unwrap().to_f64_vec(),
            vec![0., 1., 1., 2.]
        );
        assert_eq!(fields[1], Value::Tensor(mean));
        assert_eq!(fields[2], Value::Tensor(var));
        let no_scale = BatchNorm {
            scale: false,
            ..exact.clone()
        };
        let y = run(no_scale, &args).flatten().remove(0);
        assert_eq!(y.to_f64_vec(), vec![0., 0.5, 1., 2.]);
        let no_center = BatchNorm {
            center: false,
            ..exact
        };
        let y = run(no_center, &args).flatten().remove(0);
        assert_eq!(y.to_f64_vec(), vec![0., 1., 0., 1.]);
        // epsilon 1e-5 on channel 0: (2 - 1) / sqrt(4.00001) * 2.
        let y = run(BatchNorm::default(), &args).flatten().remove(0);
        assert_close(
            &y,
            &[0., 2. / 4.00001f64.sqrt(), 1., 1. + 1. / 1.00001f64.sqrt()],
            1e-7,
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        #[test]
        fn batch_norm_matches_formula(
            shape in prop::collection::vec(1usize..=4, 1..=4),
            axis_pick in any::<prop::sample::Index>(),
            (center, scale) in (any::<bool>(), any::<bool>()),
            seed in any::<u64>(),
        ) {
            let axis = axis_pick.index(shape.len());
            let args = bn_args(&shape, axis, seed);
            let op = BatchNorm { axis: axis as i64 - shape.len() as i64, epsilon: F64(1e-3), center, scale };
            let y = run(op, &args).flatten().remove(0);
            let [x, g, b, m, v] = [0, 1, 2, 3, 4].map(|i| args[i].to_f64_vec());
            let inner: usize = shape[axis + 1..].iter().product();
            let want: Vec<f64> = x.iter().enumerate().map(|(f, &e)| {
                let c = (f / inner) % shape[axis];
                let mut r = (e - m[c]) / (v[c] + 1e-3).sqrt();
                if scale { r *= g[c]; }
                if center { r += b[c]; }
                r
            }).collect();
            let want = NDArray::from_f64(shape, DType::F32, want).unwrap();
            prop_assert!(y.allclose(&want, 1e-6, 1e-6).is_ok());
        }
    }

    // ---- pools --------------------------------------------------------------------

    #[test]
    fn pool2d_type_rule() {
        let f = DType::F32;
        let seed = Pool2d {
            strides: [2, 2],
            padding: [1; 4],
            ..Pool2d::new(PoolKind::Max, [3, 3])
        };
        assert_eq!(
            seed.infer_type(&[ty(&[1, 64, 112, 112], f)]).unwrap(),
            ty(&[1, 64, 56, 56], f)
        );
        // floor((6 - 3) / 2) + 1 = 2, ceil((6 - 3) / 2) + 1 = 3.
        let floor = Pool2d {
            strides: [2, 2],
            ..Pool2d::new(PoolKind::Avg, [3, 3])
        };
        assert_eq!(
            floor.infer_type(&[ty(&[1, 1, 6, 7], f)]).unwrap(),
            ty(&[1, 1, 2, 3], f)
        );
        let ceil = Pool2d {
            ceil_mode: true,
            ..floor
        };
        assert_eq!(
            ceil.infer_type(&[ty(&[1, 1, 6, 7], f)]).unwrap(),
            ty(&[1, 1, 3, 3], f)
        );
        let int_max = Pool2d::new(PoolKind::Max, [2, 2]);
        assert_eq!(
            int_max.infer_type(&[ty(&[1, 1, 4, 4], DType::I8)]).unwrap(),
            ty(&[1, 1, 3, 3], DType::I8)
        );

        let e = type_err(Pool2d::new(PoolKind::Max, [2, 2]), &[ty(&[64, 56, 56], f)]);
        contains_all(
            &e,
            &[
                "nn.max_pool2d",
                "argument 0 (data)",
                "(64, 56, 56)",
                "rank 4",
            ],
        );
        let e = type_err(
            Pool2d::new(PoolKind::Avg, [2, 2]),
            &[ty(&[1, 1, 4, 4], DType::I32)],
        );
        contains_all(&e, &["nn.avg_pool2d", "argument 0 (data)", "float"]);
        let e = type_err(Pool2d::new(PoolKind::Max, [5, 2]), &[ty(&[1, 1, 4, 4], f)]);
        contains_all(&e, &["height", "(1, 1, 4, 4)"]);
        let e = type_err(Pool2d::new(PoolKind::Max, [0, 2]), &[ty(&[1, 1, 4, 4], f)]);
        contains_all(&e, &["pool_size"]);
        let bad = Pool2d {
            count_include_pad: true,
            ..Pool2d::new(PoolKind::Max, [2, 2])
        };
        contains_all(
            &type_err(bad, &[ty(&[1, 1, 4, 4], f)]),
            &["count_include_pad"],
        );
    }

    #[test]
    fn pool2d_hand_computed() {
        let x = f32s(&[1, 1, 3, 3], &[1., 2., 3., 4., 5., 6., 7., 8., 9.]);
        let padded = |kind| Pool2d {
            strides: [2, 2],
            padding: [1; 4],
            ..Pool2d::new(kind, [2, 2])
        };
        // Windows: {1}, {2, 3}, {4, 7}, {5, 6, 8, 9} (the rest is padding).
        assert_eq!(
            run1(padded(PoolKind::Max), &[x.clone()]).to_f64_vec(),
            vec![1., 3., 7., 9.]
        );
        assert_eq!(
            run1(padded(PoolKind::Avg), &[x.clone()]).to_f64_vec(),
            vec![1., 2.5, 5.5, 7.]
        );
        let incl = Pool2d {
            count_include_pad: true,
            ..padded(PoolKind::Avg)
        };
        assert_eq!(
            run1(incl, &[x.clone()]).to_f64_vec(),
            vec![0.25, 1.25, 2.75, 7.]
        );
        // Dilation 2 takes the corners.
        let dil = |kind| Pool2d {
            dilation: [2, 2],
            ..Pool2d::new(kind, [2, 2])
        };
        assert_eq!(
            run1(dil(PoolKind::Max), &[x.clone()]).to_f64_vec(),
            vec![9.]
        );
        assert_eq!(run1(dil(PoolKind::Avg), &[x]).to_f64_vec(), vec![5.]);

        // Ceil mode over 0..15 in 4x4, 2x2 windows, stride 3: the second window of each
        // axis holds only row/column 3; the overhang is never counted.
        let x: Vec<f64> = (0..16).map(f64::from).collect();
        let x = f32s(&[1, 1, 4, 4], &x);
        let ceil = |kind, count_include_pad| Pool2d {
            strides: [3, 3],
            ceil_mode: true,
            count_include_pad,
            ..Pool2d::new(kind, [2, 2])
        };
        assert_eq!(
            run1(ceil(PoolKind::Max, false), &[x.clone()]).to_f64_vec(),
            vec![5., 7., 13., 15.]
        );
        assert_eq!(
            run1(ceil(PoolKind::Avg, false), &[x.clone()]).to_f64_vec(),
            vec![2.5, 5., 12.5, 15.]
        );
        assert_eq!(
            run1(ceil(PoolKind::Avg, true), &[x]).to_f64_vec(),
            vec![2.5, 5., 12.5, 15.]
        );

        // Integer max pooling; a window entirely in padding gives the dtype's minimum.
        let x = NDArray::from_vec([1, 1, 1, 2], vec![-3i8, 7]).unwrap();
        let op = Pool2d {
            padding: [0, 0, 0, 2],
            strides: [1, 2],
            ..Pool2d::new(PoolKind::Max, [1, 1])
        };
        assert_eq!(run1(op, &[x]).to_vec::<i8>().unwrap(), vec![-3, -128]);
    }

    /// Pooling written directly from the definition: every window tap is bounds-checked.
    fn naive_pool(p: &Pool2d, x: &[f64], xs: [usize; 4], os: [usize; 4]) -> Vec<f64> {
        let [n, c, h, w] = xs;
        let [_, _, oh, ow] = os;
        let (pt, pl) = (p.padding[0] as isize, p.padding[1] as isize);
        let (hp, wp) = ((h + p.padding[2]) as isize, (w + p.padding[3]) as isize);
        let mut out = Vec::new();
        for plane in 0..n * c {
            for y in 0..oh {
                for xx in 0..ow {
                    let (mut max, mut sum, mut count, mut padded) = (f64::NEG_INFINITY, 0.0, 0, 0);
                    for i in 0..p.pool_size[0] {
                        for j in 0..p.pool_size[1] {
                            let ih = (y * p.strides[0] + i * p.dilation[0]) as isize - pt;
                            let iw = (xx * p.strides[1] + j * p.dilation[1]) as isize - pl;
                            if ih >= -pt && iw >= -pl && ih < hp && iw < wp {
                                padded += 1;
                            }
                            if ih >= 0 && iw >= 0 && ih < h as isize && iw < w as isize {
                                let e = x[(plane * h + ih as usize) * w + iw as usize];
                                max = fmaximum(max, e);
                                sum += e;
                                count += 1;
                            }
                        }
                    }
                    out.push(match p.kind {
                        PoolKind::Max if count == 0 => f32::MIN as f64,
                        PoolKind::Max => max,
                        PoolKind::Avg => {
                            let d = if p.count_include_pad { padded } else { count };
                            if d == 0 { 0.0 } else { sum / d as f64 }
                        }
                    });
                }
            }
        }
        out
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(96))]

        #[test]
        fn pool2d_matches_naive(
            (max, ceil_mode, count_include_pad) in (any::<bool>(), any::<bool>(), any::<bool>()),
            (n, c, h, w) in (1usize..=2, 1usize..=2, 1usize..=7, 1usize..=7),
            (kh, kw, sh, sw) in (1usize..=3, 1usize..=3, 1usize..=3, 1usize..=3),
            (dh, dw) in (1usize..=2, 1usize..=2),
            padding in prop::array::uniform4(0usize..=2),
            seed in any::<u64>(),
        ) {
            prop_assume!(dh * (kh - 1) < h + padding[0] + padding[2]);
            prop_assume!(dw * (kw - 1) < w + padding[1] + padding[3]);
            let kind = if max { PoolKind::Max } else { PoolKind::Avg };
            let op = Pool2d {
                kind,
                pool_size: [kh, kw],
                strides: [sh, sw],
                dilation: [dh, dw],
                padding,
                ceil_mode,
                count_include_pad: count_include_pad && !max,
            };
            let x = NDArray::random(vec![n, c, h, w], DType::F32, seed);
            let span = |i: usize, p: usize, k: usize, d: usize| i + p - d * (k - 1) - 1;
            let (hs, ws) = (span(h, padding[0] + padding[2], kh, dh), span(w, padding[1] + padding[3], kw, dw));
            let (oh, ow) = if ceil_mode {
                (hs.div_ceil(sh) + 1, ws.div_ceil(sw) + 1)
            } else {
                (hs / sh + 1, ws / sw + 1)
            };
            let want = naive_pool(&op, &x.to_f64_vec(), [n, c, h, w], [n, c, oh, ow]);
            let got = run1(op, &[x]);
            prop_assert_eq!(got.shape(), &[n, c, oh, ow][..]);
            let want = NDArray::from_f64(vec![n, c, oh, ow], DType::F32, want).unwrap();
            prop_assert!(got.allclose(&want, 1e-6, 1e-6).is_ok());
        }
    }

    #[test]
    fn max_pools_take_ieee_maximum_on_signed_zeros_and_nan() {
        // Windows of two: (-0, +0) and (+0, -0) both give +0; a NaN anywhere wins.
        let x = f32s(
            &[1, 1, 1, 8],
            &[-0.0, 0.0, 0.0, -0.0, f64::NAN, -0.0, 0.0, f64::NAN],
        );
        let op = Pool2d {
            strides: [1, 2],
            ..Pool2d::new(PoolKind::Max, [1, 2])
        };
        let got = run1(op, &[x]).to_vec::<f32>().unwrap();
        assert_eq!(
            got[..2].iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            [0, 0]
        );
        assert!(got[2].is_nan() && got[3].is_nan());
        let x = f32s(&[1, 3, 1, 2], &[-0.0, 0.0, 0.0, -0.0, f64::NAN, -0.0]);
        let got = run1(
            GlobalPool2d {
                kind: PoolKind::Max,
            },
            &[x],
        );
        let got = got.to_vec::<f32>().unwrap();
        assert_eq!(
            got[..2].iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            [0, 0]
        );
        assert!(got[2].is_nan());
    }

    #[test]
    fn global_pool_type_rule_and_values() {
        let f = DType::F32;
        for kind in [PoolKind::Avg, PoolKind::Max] {
            let op = GlobalPool2d { kind };
            assert_eq!(
                op.infer_type(&[ty(&[1, 512, 7, 7], f)]).unwrap(),
                ty(&[1, 512, 1, 1], f)
            );
            let e = type_err(op.clone(), &[ty(&[512, 7, 7], f)]);
            contains_all(&e, &[op.name(), "argument 0 (data)", "(512, 7, 7)"]);
            let e = type_err(op, &[ty(&[1, 2, 0, 7], f)]);
            contains_all(&e, &["(1, 2, 0, 7)"]);
        }
        let e = type_err(
            GlobalPool2d {
                kind: PoolKind::Avg,
            },
            &[ty(&[1, 2, 3, 3], DType::I32)],
        );
        contains_all(&e, &["float"]);
        let x = f32s(&[1, 2, 2, 2], &[1., 2., 3., 4., -1., -5., 0., 2.]);
        let avg = run1(
            GlobalPool2d {
                kind: PoolKind::Avg,
            },
            &[x.clone()],
        );
        assert_eq!(
            (avg.shape(), avg.to_f64_vec()),
            (&[1, 2, 1, 1][..], vec![2.5, -1.])
        );
        let max = run1(
            GlobalPool2d {
                kind: PoolKind::Max,
            },
            &[x],
        );
        assert_eq!(max.to_f64_vec(), vec![4., 2.]);
        let xi = NDArray::from_vec([1, 1, 1, 3], vec![-7i32, -2, -9]).unwrap();
        assert_eq!(
            run1(
                GlobalPool2d {
                    kind: PoolKind::Max
                },
                &[xi]
            )
            .to_vec::<i32>()
            .unwrap(),
            vec![-2]
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(32))]

        /// A global pool is the plain pool with the whole plane as its window.
        #[test]
        fn global_pool_is_whole_plane_pool(
            (n, c, h, w) in (1usize..=2, 1usize..=3, 1usize..=5, 1usize..=5),
            max in any::<bool>(),
            seed in any::<u64>(),
        ) {
            let kind = if max { PoolKind::Max } else { PoolKind::Avg };
            let x = NDArray::random(vec![n, c, h, w], DType::F32, seed);
            let global = run1(GlobalPool2d { kind }, &[x.clone()]);
            let window = run1(Pool2d::new(kind, [h, w]), &[x]);
            prop_assert!(global.allclose(&window, 1e-6, 1e-6).is_ok());
        }
    }

    // ---- nn.dense -----------------------------------------------------------------

    #[test]
    fn dense_type_rule() {
        let f = DType::F32;
        let op = Dense { units: Some(1000) };
        assert_eq!(
            op.infer_type(&[ty(&[1, 2048], f), ty(&[1000, 2048], f)])
                .unwrap(),
            ty(&[1, 1000], f)
        );
        let any_units = Dense::default();
        assert_eq!(
            any_units
                .infer_type(&[ty(&[2, 3, 4], f), ty(&[5, 4], f)])
                .unwrap(),
            ty(&[2, 3, 5], f)
        );
        assert_eq!(
            any_units
                .infer_type(&[ty(&[4], f), ty(&[5, 4], f)])
                .unwrap(),
            ty(&[5], f)
        );
        let e = type_err(op.clone(), &[ty(&[1, 2048], f), ty(&[1000, 512], f)]);
        contains_all(
            &e,
            &[
                "nn.dense",
                "argument 1 (weight)",
                "(1000, 512)",
                "(1, 2048)",
            ],
        );
        let e = type_err(op, &[ty(&[1, 512], f), ty(&[10, 512], f)]);
        contains_all(&e, &["units=1000", "(10, 512)"]);
        let e = type_err(Dense::default(), &[ty(&[1, 512], f), ty(&[512], f)]);
        contains_all(&e, &["argument 1 (weight)", "rank 2"]);
        let e = type_err(Dense::default(), &[ty(&[], f), ty(&[1, 1], f)]);
        contains_all(&e, &["argument 0 (data)", "scalar"]);
    }

    #[test]
    fn dense_hand_computed() {
        let x = f32s(&[2, 3], &[1., 2., 3., 4., 5., 6.]);
        let w = f32s(&[2, 3], &[1., 0., -1., 2., 1., 0.]);
        assert_eq!(
            run1(Dense::default(), &[x, w]).to_f64_vec(),
            vec![-2., 4., -2., 13.]
        );
        let x = NDArray::from_vec([1, 2], vec![100u8, 100]).unwrap();
        let w = NDArray::from_vec([1, 2], vec![2u8, 1]).unwrap();
        assert_eq!(
            run1(Dense::default(), &[x, w]).to_vec::<u8>().unwrap(),
            vec![44]
        );
    }

    fn naive_dense(x: &[f64], w: &[f64], m: usize, n: usize, k: usize) -> Vec<f64> {
        let mut out = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                for l in 0..k {
                    out[i * n + j] += x[i * k + l] * w[j * k + l];
                }
            }
        }
        out
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn dense_matches_naive(
            lead in prop::collection::vec(1usize..=3, 0..=2),
            (k, n) in (1usize..=9, 1usize..=6),
            float in any::<bool>(),
            seed in any::<u64>(),
        ) {
            let dtype = if float { DType::F32 } else { DType::I64 };
            let mut xs = lead.clone();
            xs.push(k);
            let x = NDArray::random(xs, dtype, seed);
            let w = NDArray::random(vec![n, k], dtype, seed + 7);
            let m: usize = lead.iter().product();
            let want = naive_dense(&x.to_f64_vec(), &w.to_f64_vec(), m, n, k);
            let got = run1(Dense { units: Some(n) }, &[x, w]);
            let mut shape = lead;
            shape.push(n);
            let want = NDArray::from_f64(shape, dtype, want).unwrap();
            prop_assert!(got.allclose(&want, 1e-6, 1e-6).is_ok());
        }
    }

    // ---- nn.bias_add --------------------------------------------------------------

    #[test]
    fn bias_add_type_rule_and_values() {
        let f = DType::F32;
        let last = BiasAdd { axis: -1 };
        assert_eq!(
            last.infer_type(&[ty(&[1, 1000], f), ty(&[1000], f)])
                .unwrap(),
            ty(&[1, 1000], f)
        );
        let e = type_err(BiasAdd::default(), &[ty(&[1, 64, 8, 8], f), ty(&[32], f)]);
        contains_all(
            &e,
            &[
                "nn.bias_add",
                "argument 1 (bias)",
                "(64)",
                "(32)",
                "(1, 64, 8, 8)",
            ],
        );
        let e = type_err(BiasAdd { axis: 2 }, &[ty(&[1, 64], f), ty(&[64], f)]);
        contains_all(&e, &["axis 2"]);
        let e = type_err(
            BiasAdd::default(),
            &[ty(&[1, 64], f), ty(&[64], DType::I32)],
        );
        contains_all(&e, &["argument 1 (bias)", "dtypes"]);

        let x = f32s(&[2, 3], &[1., 2., 3., 4., 5., 6.]);
        let y = run1(last, &[x.clone(), f32s(&[3], &[10., 20., 30.])]);
        assert_eq!(y.to_f64_vec(), vec![11., 22., 33., 14., 25., 36.]);
        let y = run1(BiasAdd { axis: 0 }, &[x, f32s(&[2], &[100., 200.])]);
        assert_eq!(y.to_f64_vec(), vec![101., 102., 103., 204., 205., 206.]);
        let xi = NDArray::from_vec([1, 2], vec![120i8, 0]).unwrap();
        let bi = NDArray::from_vec([2], vec![10i8, -1]).unwrap();
        assert_eq!(
            run1(BiasAdd::default(), &[xi, bi]).to_vec::<i8>().unwrap(),
            vec![-126, -1]
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        #[test]
        fn bias_add_is_broadcast_add(
            shape in prop::collection::vec(1usize..=4, 1..=4),
            axis_pick in any::<prop::sample::Index>(),
            seed in any::<u64>(),
        ) {
            let axis = axis_pick.index(shape.len());
            let x = NDArray::random(shape.clone(), DType::I32, seed);
            let b = NDArray::random(vec![shape[axis]], DType::I32, seed + 1);
            let got = run1(BiasAdd { axis: axis as i64 }, &[x.clone(), b.clone()]);
            // The bias reshaped to (c, 1, ..., 1) broadcasts against data; walk the
            // multi-index explicitly.
            let strides = x.strides();
            let (xv, bv) = (x.to_i64_vec(), b.to_i64_vec());
            let want: Vec<i64> = (0..xv.len()).map(|f| xv[f] + bv[(f / strides[axis]) % shape[axis]]).collect();
            prop_assert_eq!(got.to_i64_vec(), want);
        }
    }

    // ---- nn.batch_flatten ---------------------------------------------------------

    #[test]
    fn batch_flatten_type_rule_and_values() {
        let f = DType::F32;
        assert_eq!(
            BatchFlatten.infer_type(&[ty(&[1, 512, 1, 1], f)]).unwrap(),
            ty(&[1, 512], f)
        );
        assert_eq!(
            BatchFlatten.infer_type(&[ty(&[3], DType::Bool)]).unwrap(),
            ty(&[3, 1], DType::Bool)
        );
        let e = type_err(BatchFlatten, &[ty(&[], f)]);
        contains_all(&e, &["nn.batch_flatten", "argument 0 (data)", "scalar"]);
        let e = type_err(BatchFlatten, &[ty(&[1], f), ty(&[1], f)]);
        contains_all(&e, &["1 argument"]);
        let v: Vec<f64> = (0..12).map(f64::from).collect();
        let y = run1(BatchFlatten, &[f32s(&[2, 3, 2], &v)]);
        assert_eq!((y.shape(), y.to_f64_vec()), (&[2, 6][..], v));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(32))]

        #[test]
        fn batch_flatten_keeps_data(shape in prop::collection::vec(0usize..=4, 1..=5), seed in any::<u64>()) {
            let x = NDArray::random(shape.clone(), DType::I64, seed);
            let y = run1(BatchFlatten, &[x.clone()]);
            prop_assert_eq!(y.shape(), &[shape[0], shape[1..].iter().product()][..]);
            prop_assert_eq!(y.to_i64_vec(), x.to_i64_vec());
        }
    }

    // ---- nn.softmax ---------------------------------------------------------------

    #[test]
    fn softmax_type_rule_and_values() {
        let f = DType::F32;
        assert_eq!(
            Softmax::default().infer_type(&[ty(&[1, 1000], f)]).unwrap(),
            ty(&[1, 1000], f)
        );
        let e = type_err(Softmax::default(), &[ty(&[1, 10], DType::I32)]);
        contains_all(&e, &["nn.softmax", "argument 0 (data)", "float", "int32"]);
        let e = type_err(Softmax { axis: 2 }, &[ty(&[1, 10], f)]);
        contains_all(&e, &["axis 2", "rank 2"]);

        let y = run1(Softmax::default(), &[f32s(&[1, 3], &[1., 2., 3.])]);
        assert_close(
            &y,
            &[0.09003057317038046, 0.24472847105479764, 0.6652409557748219],
            1e-7,
        );
        // Along axis 0 of [[0, 1], [0, 3]]: columns [0, 0] and [1, 3].
        let y = run1(Softmax { axis: 0 }, &[f32s(&[2, 2], &[0., 1., 0., 3.])]);
        assert_close(
            &y,
            &[0.5, 0.11920292202211755, 0.5, 0.8807970779778823],
            1e-7,
        );
        // Large inputs do not overflow.
        let y = run1(Softmax::default(), &[f32s(&[2], &[1000., 1000.])]);
        assert_eq!(y.to_f64_vec(), vec![0.5, 0.5]);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        #[test]
        fn softmax_sums_to_one_and_ignores_shifts(
            shape in prop::collection::vec(1usize..=4, 1..=3),
            axis_pick in any::<prop::sample::Index>(),
            shift in -50.0f64..50.0,
            seed in any::<u64>(),
        ) {
            let axis = axis_pick.index(shape.len());
            let op = Softmax { axis: axis as i64 };
            let x = NDArray::random_uniform(shape.clone(), DType::F32, seed, -5.0, 5.0);
            let y = run1(op.clone(), &[x.clone()]);
            let (outer, len, inner) = split_axis(&shape, axis);
            let yv = y.to_f64_vec();
            for o in 0..outer {
                for k in 0..inner {
                    let s: f64 = (0..len).map(|i| yv[(o * len + i) * inner + k]).sum();
                    prop_assert!((s - 1.0).abs() < 1e-6, "sum {}", s);
                }
            }
            let shifted: Vec<f64> = x.to_f64_vec().iter().map(|e| e + shift).collect();
            let y2 = run1(op, &[NDArray::from_f64(shape, DType::F32, shifted).unwrap()]);
            prop_assert!(y2.allclose(&y, 1e-5, 1e-5).is_ok());
        }
    }

    // ---- nn.layer_norm ------------------------------------------------------------

    #[test]
    fn layer_norm_type_rule_and_values() {
        let f = DType::F32;
        let v = ty(&[768], f);
        let op = LayerNorm::default();
        assert_eq!(
            op.infer_type(&[ty(&[1, 128, 768], f), v.clone(), v.clone()])
                .unwrap(),
            ty(&[1, 128, 768], f)
        );
        let e = type_err(
            op.clone(),
            &[ty(&[1, 128, 768], f), v.clone(), ty(&[128], f)],
        );
        contains_all(
            &e,
            &[
                "nn.layer_norm",
                "argument 2 (beta)",
                "(768)",
                "(128)",
                "(1, 128, 768)",
            ],
        );
        let e = type_err(
            op.clone(),
            &[ty(&[1, 768], DType::I32), v.clone(), v.clone()],
        );
        contains_all(&e, &["argument 0 (data)", "float"]);
        let e = type_err(op, &[ty(&[1, 768], f), v]);
        contains_all(&e, &["3 argument"]);

        // [1, 2, 3, 4]: mean 2.5, variance 1.25.
        let exact = LayerNorm {
            epsilon: F64(0.0),
            ..LayerNorm::default()
        };
        let x = f32s(&[1, 4], &[1., 2., 3., 4.]);
        let args = [
            x,
            f32s(&[4], &[1., 1., 2., 2.]),
            f32s(&[4], &[0., 0., 0., 1.]),
        ];
        let z = [
            -1.3416407864998738,
            -0.4472135954999579,
            0.4472135954999579,
            1.3416407864998738,
        ];
        assert_close(
            &run1(exact.clone(), &args),
            &[z[0], z[1], 2. * z[2], 2. * z[3] + 1.],
            1e-7,
        );
        let plain = LayerNorm {
            center: false,
            scale: false,
            ..exact
        };
        assert_close(&run1(plain, &args), &z, 1e-7);
        // Along axis 0 of a 2x2.
        let ax0 = LayerNorm {
            axis: 0,
            epsilon: F64(0.0),
            ..LayerNorm::default()
        };
        let ones = f32s(&[2], &[1., 1.]);
        let zeros = f32s(&[2], &[0., 0.]);
        let y = run1(ax0, &[f32s(&[2, 2], &[1., 5., 3., 1.]), ones, zeros]);
        assert_close(&y, &[-1., 1., 1., -1.], 1e-7);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        #[test]
        fn layer_norm_standardizes(
            shape in prop::collection::vec(2usize..=5, 1..=3),
            axis_pick in any::<prop::sample::Index>(),
            seed in any::<u64>(),
        ) {
            let axis = axis_pick.index(shape.len());
            let len = shape[axis];
            let op = LayerNorm { axis: axis as i64, epsilon: F64(0.0), center: true, scale: true };
            let x = NDArray::random_uniform(shape.clone(), DType::F32, seed, -10.0, 10.0);
            let y = run1(op, &[x.clone(), NDArray::full([len], DType::F32, 1.0), NDArray::zeros([len], DType::F32)]);
            let (outer, _, inner) = split_axis(&shape, axis);
            let (xv, yv) = (x.to_f64_vec(), y.to_f64_vec());
            for o in 0..outer {
                for k in 0..inner {
                    let lane = |v: &[f64]| (0..len).map(|i| v[(o * len + i) * inner + k]).collect::<Vec<f64>>();
                    let mean = |v: &[f64]| v.iter().sum::<f64>() / len as f64;
                    let var = |v: &[f64]| { let m = mean(v); v.iter().map(|e| (e - m).powi(2)).sum::<f64>() / len as f64 };
                    if var(&lane(&xv)) < 1e-3 {
                        continue;
                    }
                    let l = lane(&yv);
                    prop_assert!(mean(&l).abs() < 1e-5, "mean {}", mean(&l));
                    prop_assert!((var(&l) - 1.0).abs() < 1e-5, "var {}", var(&l));
                }
            }
        }
    }

    // ---- nn.batch_matmul ----------------------------------------------------------

    #[test]
    fn batch_matmul_type_rule() {
        let f = DType::F32;
        let nt = BatchMatmul::default();
        assert_eq!(
            nt.infer_type(&[ty(&[4, 3, 5], f), ty(&[4, 6, 5], f)])
                .unwrap(),
            ty(&[4, 3, 6], f)
        );
        assert_eq!(
            nt.infer_type(&[ty(&[1, 3, 5], f), ty(&[7, 6, 5], f)])
                .unwrap(),
            ty(&[7, 3, 6], f)
        );
        let tn = BatchMatmul {
            transpose_a: true,
            transpose_b: false,
        };
        assert_eq!(
            tn.infer_type(&[ty(&[2, 5, 3], f), ty(&[1, 5, 6], f)])
                .unwrap(),
            ty(&[2, 3, 6], f)
        );
        let e = type_err(nt.clone(), &[ty(&[2, 3, 4], f), ty(&[3, 5, 4], f)]);
        contains_all(
            &e,
            &[
                "nn.batch_matmul",
                "argument 0 (a) (2, 3, 4)",
                "argument 1 (b) (3, 5, 4)",
                "batch",
            ],
        );
        let e = type_err(nt.clone(), &[ty(&[2, 3, 4], f), ty(&[2, 4, 5], f)]);
        contains_all(&e, &["(2, 3, 4)", "(2, 4, 5)", "transpose_b=True"]);
        let e = type_err(nt, &[ty(&[3, 4], f), ty(&[2, 4, 5], f)]);
        contains_all(&e, &["argument 0 (a)", "rank 3"]);
    }

    #[test]
    fn batch_matmul_hand_computed() {
        let a = f32s(&[1, 2, 2], &[1., 2., 3., 4.]);
        let b = f32s(&[2, 2, 2], &[1., 0., 0., 1., 1., 2., 3., 4.]);
        // transpose_b: out[m][n] = a[m] . b[n]; batch 0 is the identity.
        let y = run1(BatchMatmul::default(), &[a.clone(), b.clone()]);
        assert_eq!(
            (y.shape(), y.to_f64_vec()),
            (&[2, 2, 2][..], vec![1., 2., 3., 4., 5., 11., 11., 25.])
        );
        let nn = BatchMatmul {
            transpose_a: false,
            transpose_b: false,
        };
        let y = run1(nn, &[a.clone(), b.clone()]);
        assert_eq!(y.to_f64_vec(), vec![1., 2., 3., 4., 7., 10., 15., 22.]);
        let tn = BatchMatmul {
            transpose_a: true,
            transpose_b: false,
        };
        // a^T = [[1, 3], [2, 4]]; a^T @ [[1, 2], [3, 4]] = [[10, 14], [14, 20]].
        let y = run1(tn, &[a, b]);
        assert_eq!(y.to_f64_vec(), vec![1., 3., 2., 4., 10., 14., 14., 20.]);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn batch_matmul_is_dense_per_batch(
            (ba, bb) in prop_oneof![(1usize..=3).prop_map(|b| (b, b)), (1usize..=3).prop_map(|b| (1, b)), (1usize..=3).prop_map(|b| (b, 1))],
            (m, n, k) in (1usize..=4, 1usize..=4, 1usize..=5),
            (transpose_a, transpose_b) in (any::<bool>(), any::<bool>()),
            seed in any::<u64>(),
        ) {
            let op = BatchMatmul { transpose_a, transpose_b };
            let a_shape = if transpose_a { [ba, k, m] } else { [ba, m, k] };
            let b_shape = if transpose_b { [bb, n, k] } else { [bb, k, n] };
            let a = NDArray::random(a_shape.to_vec(), DType::I32, seed);
            let b = NDArray::random(b_shape.to_vec(), DType::I32, seed + 3);
            let got = run1(op, &[a.clone(), b.clone()]);
            let batch = ba.max(bb);
            prop_assert_eq!(got.shape(), &[batch, m, n][..]);
            let (av, bv, gv) = (a.to_i64_vec(), b.to_i64_vec(), got.to_i64_vec());
            for i in 0..batch {
                let (ai, bi) = (i.min(ba - 1), i.min(bb - 1));
                // Build the (m, k) data and (n, k) weight of dense element by element.
                let a_at = |r: usize, c: usize| if transpose_a { av[(ai * k + c) * m + r] } else { av[(ai * m + r) * k + c] };
                let b_at = |r: usize, c: usize| if transpose_b { bv[(bi * n + r) * k + c] } else { bv[(bi * k + c) * n + r] };
                let x: Vec<i32> = (0..m * k).map(|f| a_at(f / k, f % k) as i32).collect();
                let w: Vec<i32> = (0..n * k).map(|f| b_at(f / k, f % k) as i32).collect();
                let d = run1(Dense::default(), &[NDArray::from_vec([m, k], x).unwrap(), NDArray::from_vec([n, k], w).unwrap()]);
                prop_assert_eq!(&gv[i * m * n..(i + 1) * m * n], &d.to_i64_vec()[..]);
            }
        }
    }

    // ---- attributes ---------------------------------------------------------------

    fn round_trip(op: Op) {
        let back = Op::builtin(op.name(), op.attrs())
            .unwrap_or_else(|| panic!("{} is not a built-in name", op.name()))
            .unwrap_or_else(|e| panic!("{op}: {e}"));
        assert_eq!(back, op);
    }

    #[test]
    fn attributes_print_like_relay() {
        let conv = Conv2d {
            strides: [2, 2],
            padding: [3; 4],
            ..Conv2d::new(64, [7, 7])
        };
        assert_eq!(
            Op::from(conv).to_string(),
            "nn.conv2d, strides=[2, 2], padding=[3, 3, 3, 3], channels=64, kernel_size=[7, 7]"
        );
        assert_eq!(
            Op::from(Conv2d::new(64, [1, 1])).to_string(),
            "nn.conv2d, padding=[0, 0, 0, 0], channels=64, kernel_size=[1, 1]"
        );
        let grouped = Conv2d {
            dilation: [2, 1],
            groups: 4,
            ..Conv2d::default()
        };
        assert_eq!(
            Op::from(grouped).to_string(),
            "nn.conv2d, padding=[0, 0, 0, 0], dilation=[2, 1], groups=4"
        );
        let bn = BatchNorm {
            epsilon: F64(2e-5),
            scale: false,
            ..BatchNorm::default()
        };
        assert_eq!(
            Op::from(bn).to_string(),
            "nn.batch_norm, epsilon=2e-05f, scale=False"
        );
        assert_eq!(Op::from(BatchNorm::default()).to_string(), "nn.batch_norm");
        let pool = Pool2d {
            strides: [2, 2],
            padding: [1; 4],
            ..Pool2d::new(PoolKind::Max, [3, 3])
        };
        assert_eq!(
            Op::from(pool).to_string(),
            "nn.max_pool2d, pool_size=[3, 3], strides=[2, 2], padding=[1, 1, 1, 1]"
        );
        let avg = Pool2d {
            ceil_mode: true,
            count_include_pad: true,
            dilation: [2, 2],
            ..Pool2d::new(PoolKind::Avg, [2, 2])
        };
        assert_eq!(
            Op::from(avg).to_string(),
            "nn.avg_pool2d, pool_size=[2, 2], dilation=[2, 2], padding=[0, 0, 0, 0], ceil_mode=True, count_include_pad=True"
        );
        assert_eq!(
            Op::from(GlobalPool2d {
                kind: PoolKind::Avg
            })
            .to_string(),
            "nn.global_avg_pool2d"
        );
        assert_eq!(
            Op::from(Dense { units: Some(1000) }).to_string(),
            "nn.dense, units=1000"
        );
        assert_eq!(
            Op::from(BiasAdd { axis: -1 }).to_string(),
            "nn.bias_add, axis=-1"
        );
        assert_eq!(Op::from(BiasAdd::default()).to_string(), "nn.bias_add");
        assert_eq!(Op::from(Softmax::default()).to_string(), "nn.softmax");
        assert_eq!(
            Op::from(Softmax { axis: 1 }).to_string(),
            "nn.softmax, axis=1"
        );
        assert_eq!(Op::from(BatchFlatten).to_string(), "nn.batch_flatten");
        let ln = LayerNorm {
            axis: 1,
            epsilon: F64(1e-12),
            center: false,
            scale: true,
        };
        assert_eq!(
            Op::from(ln).to_string(),
            "nn.layer_norm, axis=1, epsilon=1e-12f, center=False"
        );
        assert_eq!(
            Op::from(BatchMatmul::default()).to_string(),
            "nn.batch_matmul"
        );
        let tt = BatchMatmul {
            transpose_a: true,
            transpose_b: false,
        };
        assert_eq!(
            Op::from(tt).to_string(),
            "nn.batch_matmul, transpose_a=True, transpose_b=False"
        );
    }

    fn parse_err(name: &str, attrs: Vec<(&str, AttrValue)>) -> String {
        let attrs = attrs.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        Op::builtin(name, attrs)
            .expect("a built-in name")
            .unwrap_err()
            .to_string()
    }

    fn ints(v: &[i64]) -> AttrValue {
        AttrValue::List(v.iter().map(|&i| AttrValue::Int(i)).collect())
    }

    #[test]
    fn parsing_reads_relay_forms() {
        let parse = |name: &str, attrs: Vec<(&str, AttrValue)>| {
            Op::builtin(
                name,
                attrs.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
            )
            .unwrap()
            .unwrap()
        };
        let conv = parse(
            "nn.conv2d",
            vec![
                ("strides", AttrValue::Int(2)),
                ("padding", ints(&[1, 2])),
                ("data_layout", AttrValue::Str("NCHW".into())),
                ("kernel_layout", AttrValue::Str("OIHW".into())),
                ("out_layout", AttrValue::Str("".into())),
                ("out_dtype", AttrValue::Str("".into())),
                ("kernel_size", AttrValue::Int(3)),
            ],
        );
        let want = Conv2d {
            strides: [2, 2],
            padding: [1, 2, 1, 2],
            kernel_size: Some([3, 3]),
            ..Conv2d::default()
        };
        assert_eq!(conv, Op::from(want));
        let pool = parse(
            "nn.avg_pool2d",
            vec![("pool_size", ints(&[2])), ("padding", ints(&[1]))],
        );
        let want = Pool2d {
            padding: [1; 4],
            ..Pool2d::new(PoolKind::Avg, [2, 2])
        };
        assert_eq!(pool, Op::from(want));
        assert_eq!(
            parse("nn.global_max_pool2d", vec![]),
            Op::from(GlobalPool2d {
                kind: PoolKind::Max
            })
        );
        let bn = parse(
            "nn.batch_norm",
            vec![
                ("epsilon", AttrValue::Float(2e-5)),
                ("center", AttrValue::Int(0)),
            ],
        );
        let want = BatchNorm {
            epsilon: F64(2e-5),
            center: false,
            ..BatchNorm::default()
        };
        assert_eq!(bn, Op::from(want));
    }

    #[test]
    fn bad_attributes_are_named() {
        let e = parse_err("nn.conv2d", vec![("strides", ints(&[0, 1]))]);
        contains_all(&e, &["strides", "nn.conv2d", "positive"]);
        let e = parse_err("nn.conv2d", vec![("padding", ints(&[1, 2, 3]))]);
        contains_all(&e, &["padding", "1, 2 or 4"]);
        let e = parse_err("nn.conv2d", vec![("dilation", ints(&[1, 1, 1]))]);
        contains_all(&e, &["dilation"]);
        let e = parse_err("nn.conv2d", vec![("groups", AttrValue::Int(0))]);
        contains_all(&e, &["groups"]);
        let e = parse_err(
            "nn.conv2d",
            vec![("data_layout", AttrValue::Str("NHWC".into()))],
        );
        contains_all(&e, &["unsupported", "data_layout", "NHWC"]);
        let e = parse_err(
            "nn.conv2d",
            vec![("kernel_layout", AttrValue::Str("HWIO".into()))],
        );
        contains_all(&e, &["kernel_layout", "HWIO"]);
        let e = parse_err(
            "nn.conv2d",
            vec![("out_dtype", AttrValue::Str("int32".into()))],
        );
        contains_all(&e, &["unsupported", "out_dtype", "int32"]);
        let e = parse_err("nn.conv2d", vec![("bogus", AttrValue::Int(1))]);
        contains_all(&e, &["`nn.conv2d` has no attribute `bogus`"]);
        let e = parse_err("nn.max_pool2d", vec![]);
        contains_all(&e, &["pool_size", "required"]);
        let e = parse_err(
            "nn.max_pool2d",
            vec![
                ("pool_size", ints(&[2])),
                ("count_include_pad", AttrValue::Bool(true)),
            ],
        );
        contains_all(&e, &["count_include_pad"]);
        let e = parse_err(
            "nn.avg_pool2d",
            vec![
                ("pool_size", ints(&[2])),
                ("layout", AttrValue::Str("NHWC".into())),
            ],
        );
        contains_all(&e, &["layout", "NHWC"]);
        let e = parse_err(
            "nn.avg_pool2d",
            vec![
                ("pool_size", ints(&[2])),
                ("ceil_mode", AttrValue::Str("yes".into())),
            ],
        );
        contains_all(&e, &["ceil_mode", "True or False"]);
        let e = parse_err("nn.batch_norm", vec![("epsilon", AttrValue::Float(-1.0))]);
        contains_all(&e, &["epsilon", "negative"]);
        let e = parse_err("nn.layer_norm", vec![("axis", AttrValue::Str("x".into()))]);
        contains_all(&e, &["axis", "nn.layer_norm"]);
        let e = parse_err("nn.dense", vec![("units", AttrValue::Int(-3))]);
        contains_all(&e, &["units", "negative"]);
        let e = parse_err(
            "nn.dense",
            vec![("out_dtype", AttrValue::Str("float16".into()))],
        );
        contains_all(&e, &["out_dtype"]);
        let e = parse_err("nn.batch_matmul", vec![("transpose_b", AttrValue::Int(2))]);
        contains_all(&e, &["transpose_b"]);
        let e = parse_err("nn.softmax", vec![("axis", AttrValue::Float(1.5))]);
        contains_all(&e, &["axis", "nn.softmax"]);
        let e = parse_err("nn.batch_flatten", vec![("axis", AttrValue::Int(1))]);
        contains_all(&e, &["has no attribute `axis`"]);
        assert!(Op::builtin("nn.conv3d", vec![]).is_none());
    }

    #[test]
    fn every_name_parses_with_defaults() {
        for &name in NAMES {
            let attrs = if name.ends_with("_pool2d") && !name.contains("global") {
                vec![("pool_size".to_string(), ints(&[2, 2]))]
            } else {
                vec![]
            };
            let op = Op::builtin(name, attrs).unwrap().unwrap();
            assert_eq!(op.name(), name);
            round_trip(op);
        }
    }

    fn arb_pair(max: usize) -> impl Strategy<Value = [usize; 2]> {
        prop::array::uniform2(1..=max)
    }

    fn arb_op() -> impl Strategy<Value = Op> {
        let kind = prop_oneof![Just(PoolKind::Max), Just(PoolKind::Avg)];
        let eps = prop_oneof![Just(1e-5), Just(2e-5), Just(1e-3), Just(0.0), 1e-9f64..1.0];
        prop_oneof![
            (
                arb_pair(4),
                prop::array::uniform4(0usize..4),
                arb_pair(3),
                1usize..5,
                prop::option::of(1usize..100),
                prop::option::of(arb_pair(7)),
            )
                .prop_map(
                    |(strides, padding, dilation, groups, channels, kernel_size)| {
                        Op::from(Conv2d {
                            strides,
                            padding,
                            dilation,
                            groups,
                            channels,
                            kernel_size,
                        })
                    }
                ),
            (-4i64..4, eps.clone(), any::<bool>(), any::<bool>()).prop_map(
                |(axis, e, center, scale)| {
                    Op::from(BatchNorm {
                        axis,
                        epsilon: F64(e),
                        center,
                        scale,
                    })
                }
            ),
            (-4i64..4, eps, any::<bool>(), any::<bool>()).prop_map(|(axis, e, center, scale)| {
                Op::from(LayerNorm {
                    axis,
                    epsilon: F64(e),
                    center,
                    scale,
                })
            }),
            (
                kind.clone(),
                arb_pair(4),
                arb_pair(4),
                arb_pair(3),
                prop::array::uniform4(0usize..3),
                any::<bool>(),
                any::<bool>()
            )
                .prop_map(
                    |(kind, pool_size, strides, dilation, padding, ceil_mode, cip)| {
                        Op::from(Pool2d {
                            kind,
                            pool_size,
                            strides,
                            dilation,
                            padding,
                            ceil_mode,
                            count_include_pad: cip && kind == PoolKind::Avg,
                        })
                    }
                ),
            kind.prop_map(|kind| Op::from(GlobalPool2d { kind })),
            prop::option::of(1usize..5000).prop_map(|units| Op::from(Dense { units })),
            (-4i64..4).prop_map(|axis| Op::from(BiasAdd { axis })),
            (-4i64..4).prop_map(|axis| Op::from(Softmax { axis })),
            Just(Op::from(BatchFlatten)),
            (any::<bool>(), any::<bool>()).prop_map(|(transpose_a, transpose_b)| Op::from(
                BatchMatmul {
                    transpose_a,
                    transpose_b
                }
            )),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        #[test]
        fn attributes_round_trip(op in arb_op()) {
            round_trip(op);
        }
    }
}
