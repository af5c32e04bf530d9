//! Runtime values of the reference interpreter: a tensor or a tuple of values.

use crate::error::{Error, Result};
use crate::tensor::NDArray;
use crate::ty::Type;

/// What an expression evaluates to.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// A tensor.
    Tensor(NDArray),
    /// A tuple of values, in field order.
    Tuple(Vec<Value>),
}

impl Value {
    /// The tensor, or an error naming `what` if this is a tuple.
    pub fn as_tensor(&self, what: &str) -> Result<&NDArray> {
        match self {
            Value::Tensor(t) => Ok(t),
            Value::Tuple(_) => Err(Error::Eval(format!(
                "{what}: expected a tensor, got a tuple"
            ))),
        }
    }

    /// The tensor, consuming the value.
    pub fn into_tensor(self, what: &str) -> Result<NDArray> {
        match self {
            Value::Tensor(t) => Ok(t),
            Value::Tuple(_) => Err(Error::Eval(format!(
                "{what}: expected a tensor, got a tuple"
            ))),
        }
    }

    /// Tensors in order (a tuple flattened recursively), as a graph executor's outputs.
    pub fn flatten(self) -> Vec<NDArray> {
        match self {
            Value::Tensor(t) => vec![t],
            Value::Tuple(vs) => vs.into_iter().flat_map(Value::flatten).collect(),
        }
    }

    /// The type of this value.
    pub fn ty(&self) -> Type {
        match self {
            Value::Tensor(t) => Type::Tensor(t.ty()),
            Value::Tuple(vs) => Type::Tuple(vs.iter().map(Value::ty).collect()),
        }
    }
}

impl From<NDArray> for Value {
    fn from(t: NDArray) -> Value {
        Value::Tensor(t)
    }
}
