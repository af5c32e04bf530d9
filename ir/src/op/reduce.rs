//! Reductions over axes: `sum`, `mean`, `max`, `min`, with `keepdims` and `exclude`.

use crate::attrs::AttrReader;
use crate::error::{Error, Result};
use crate::ty::Type;
use crate::value::Value;

use super::{Op, OpSpec};

/// Names of the ops in this family.
pub const NAMES: &[&str] = &["sum", "mean", "max", "min"];

/// Which reduction a [`Reduce`] computes.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ReduceKind {
    Sum,
    Mean,
    Max,
    Min,
}

/// A reduction over `axis` (all axes when `None`); with `exclude`, over every axis
/// *not* listed.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Reduce {
    pub kind: ReduceKind,
    pub axis: Option<Vec<i64>>,
    pub keepdims: bool,
    pub exclude: bool,
}

// SKELETON: replaced by the real implementations.
impl OpSpec for Reduce {
    fn name(&self) -> &str {
        "sum"
    }
    fn infer_type(&self, _args: &[Type]) -> Result<Type> {
        Err(Error::Unsupported("reduce type rule".into()))
    }
    fn eval(&self, _args: &[Value], _out: &Type) -> Result<Value> {
        Err(Error::Unsupported("reduce evaluation".into()))
    }
}

/// Parses an op of this family from its name and attributes.
pub(super) fn parse(name: &str, _r: &mut AttrReader) -> Option<Result<Op>> {
    let _ = name;
    None
}
