//! Neural-network ops (`nn.*`): convolution, normalisation, pooling, dense layers,
//! softmax. NCHW data and OIHW weights throughout.

use crate::attrs::{AttrReader, F64};
use crate::error::{Error, Result};
use crate::ty::Type;
use crate::value::Value;

use super::{Op, OpSpec};

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
    pub strides: [usize; 2],
    /// top, left, bottom, right.
    pub padding: [usize; 4],
    pub dilation: [usize; 2],
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
    pub axis: i64,
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
    Max,
    Avg,
}

/// `nn.max_pool2d(data)` / `nn.avg_pool2d(data)` over NCHW.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Pool2d {
    pub kind: PoolKind,
    pub pool_size: [usize; 2],
    pub strides: [usize; 2],
    pub dilation: [usize; 2],
    /// top, left, bottom, right.
    pub padding: [usize; 4],
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
    pub axis: i64,
    pub epsilon: F64,
    pub center: bool,
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
    pub transpose_a: bool,
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

// SKELETON: replaced by the real implementations.
macro_rules! pending {
    ($($t:ty => $name:expr),*) => {$(
        impl OpSpec for $t {
            fn name(&self) -> &str { $name }
            fn infer_type(&self, _args: &[Type]) -> Result<Type> {
                Err(Error::Unsupported(format!("{} type rule", $name)))
            }
            fn eval(&self, _args: &[Value], _out: &Type) -> Result<Value> {
                Err(Error::Unsupported(format!("{} evaluation", $name)))
            }
        }
    )*};
}
pending!(Conv2d => "nn.conv2d", BatchNorm => "nn.batch_norm", Pool2d => "nn.max_pool2d",
    GlobalPool2d => "nn.global_avg_pool2d", Dense => "nn.dense", BiasAdd => "nn.bias_add",
    BatchFlatten => "nn.batch_flatten", Softmax => "nn.softmax", LayerNorm => "nn.layer_norm",
    BatchMatmul => "nn.batch_matmul");

/// Parses an op of this family from its name and attributes.
pub(super) fn parse(name: &str, _r: &mut AttrReader) -> Option<Result<Op>> {
    let _ = name;
    None
}
