//! Types of graph-IR expressions: tensors with static shapes, tuples and functions,
//! printed the way Relay prints them (`Tensor[(1, 3, 224, 224), float32]`).

use std::fmt;

use crate::dtype::DType;

/// The most elements a tensor type may have (2^56), so that sizes derived from a
/// valid type (bytes, strides, padded extents) cannot overflow `usize`.
pub const MAX_ELEMENTS: usize = 1 << 56;

/// A tensor type: a static shape and an element type.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TensorType {
    /// The dimensions, outermost first; empty for a scalar.
    pub shape: Vec<usize>,
    /// The element type.
    pub dtype: DType,
}

impl TensorType {
    /// The type of `shape` and `dtype`.
    pub fn new(shape: impl Into<Vec<usize>>, dtype: DType) -> TensorType {
        TensorType {
            shape: shape.into(),
            dtype,
        }
    }

    /// A rank-0 tensor.
    pub fn scalar(dtype: DType) -> TensorType {
        TensorType::new(vec![], dtype)
    }

    /// Number of dimensions.
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// Number of elements, saturating at `usize::MAX` for a shape whose product
    /// overflows (only a type that is [oversized](Self::is_oversized) can).
    pub fn numel(&self) -> usize {
        if self.shape.contains(&0) {
            return 0;
        }
        self.shape.iter().fold(1usize, |n, &d| n.saturating_mul(d))
    }

    /// Whether the element count exceeds [`MAX_ELEMENTS`] (or overflows computing it).
    pub fn is_oversized(&self) -> bool {
        self.shape
            .iter()
            .try_fold(1usize, |n, &d| n.checked_mul(d))
            .is_none_or(|n| n > MAX_ELEMENTS)
    }

    /// Bytes of a contiguous tensor of this type (saturating, as [`Self::numel`]).
    pub fn size_bytes(&self) -> usize {
        self.numel().saturating_mul(self.dtype.size_bytes())
    }
}

/// The type of an expression.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Type {
    /// A tensor.
    Tensor(TensorType),
    /// A tuple of the field types, in order.
    Tuple(Vec<Type>),
    /// A function.
    Func(FuncType),
}

/// A function's parameter types and result type.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FuncType {
    /// The parameter types, in order.
    pub params: Vec<Type>,
    /// The result type.
    pub ret: Box<Type>,
}

impl Type {
    /// Shorthand for a tensor type.
    pub fn tensor(shape: impl Into<Vec<usize>>, dtype: DType) -> Type {
        Type::Tensor(TensorType::new(shape, dtype))
    }

    /// The tensor type, if this is one.
    pub fn as_tensor(&self) -> Option<&TensorType> {
        match self {
            Type::Tensor(t) => Some(t),
            _ => None,
        }
    }

    /// The field types, if this is a tuple.
    pub fn as_tuple(&self) -> Option<&[Type]> {
        match self {
            Type::Tuple(t) => Some(t),
            _ => None,
        }
    }

    /// The first tensor inside this type with more than [`MAX_ELEMENTS`] elements.
    pub fn oversized_tensor(&self) -> Option<&TensorType> {
        self.flatten_tensors()
            .into_iter()
            .find(|t| t.is_oversized())
    }

    /// The tensor types of this type flattened in order (a tensor is one, a tuple its
    /// fields recursively). Functions contribute nothing.
    pub fn flatten_tensors(&self) -> Vec<&TensorType> {
        let mut out = Vec::new();
        fn go<'a>(t: &'a Type, out: &mut Vec<&'a TensorType>) {
            match t {
                Type::Tensor(t) => out.push(t),
                Type::Tuple(ts) => ts.iter().for_each(|t| go(t, out)),
                Type::Func(_) => {}
            }
        }
        go(self, &mut out);
        out
    }
}

/// Writes a shape as Relay does: `(1, 3, 224, 224)`, `(3)`, `()`.
pub fn fmt_shape(shape: &[usize]) -> String {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    format!("({})", dims.join(", "))
}

impl fmt::Display for TensorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.shape.is_empty() {
            write!(f, "{}", self.dtype)
        } else {
            write!(f, "Tensor[{}, {}]", fmt_shape(&self.shape), self.dtype)
        }
    }
}

impl fmt::Display for Type {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Type::Tensor(t) => t.fmt(f),
            Type::Tuple(fields) => {
                f.write_str("(")?;
                for (i, t) in fields.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    t.fmt(f)?;
                }
                if fields.len() == 1 {
                    f.write_str(",")?;
                }
                f.write_str(")")
            }
            Type::Func(ft) => {
                f.write_str("fn (")?;
                for (i, t) in ft.params.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    t.fmt(f)?;
                }
                write!(f, ") -> {}", ft.ret)
            }
        }
    }
}

impl From<TensorType> for Type {
    fn from(t: TensorType) -> Type {
        Type::Tensor(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prints_like_relay() {
        assert_eq!(
            Type::tensor([1, 3, 224, 224], DType::F32).to_string(),
            "Tensor[(1, 3, 224, 224), float32]"
        );
        assert_eq!(
            Type::tensor([3], DType::F32).to_string(),
            "Tensor[(3), float32]"
        );
        assert_eq!(Type::tensor([], DType::I64).to_string(), "int64");
        let t = Type::Tuple(vec![Type::tensor([2], DType::F16)]);
        assert_eq!(t.to_string(), "(Tensor[(2), float16],)");
    }
}
