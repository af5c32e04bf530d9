//! Shape and layout ops: `reshape`, `transpose`, `squeeze`, `expand_dims`,
//! `concatenate`, `split`, `strided_slice`, `take`.

use crate::attrs::AttrReader;
use crate::error::{Error, Result};
use crate::ty::Type;
use crate::value::Value;

use super::{Op, OpSpec};

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
    pub newshape: Vec<i64>,
}

/// `transpose(data, axes=)`; no axes reverses them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Transpose {
    pub axes: Option<Vec<i64>>,
}

/// `squeeze(data, axis=)`; no axis removes every dimension of size 1.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Squeeze {
    pub axis: Option<Vec<i64>>,
}

/// `expand_dims(data, axis=, num_newaxis=)`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ExpandDims {
    pub axis: i64,
    pub num_newaxis: usize,
}

/// `concatenate(tuple, axis=)`: takes one tuple argument, as in Relay.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Concatenate {
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
    pub indices_or_sections: SplitSpec,
    pub axis: i64,
}

/// `strided_slice(data, begin=, end=, strides=, axes=)` with numpy's clamping of
/// out-of-range and negative indices.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StridedSlice {
    pub begin: Vec<i64>,
    pub end: Vec<i64>,
    pub strides: Option<Vec<i64>>,
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
    pub axis: Option<i64>,
    pub mode: TakeMode,
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
pending!(Reshape => "reshape", Transpose => "transpose", Squeeze => "squeeze",
    ExpandDims => "expand_dims", Concatenate => "concatenate", Split => "split",
    StridedSlice => "strided_slice", Take => "take");

/// Parses an op of this family from its name and attributes.
pub(super) fn parse(name: &str, _r: &mut AttrReader) -> Option<Result<Op>> {
    let _ = name;
    None
}
