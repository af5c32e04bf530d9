//! The small types of the loop IR: typed ids into a function's arenas ([`BufferId`],
//! [`VarId`]), buffers and their memory [`Scope`], and the [`ValueType`] of a scalar or
//! vector value (`float32`, `int32x4`).

use std::fmt;

use kiln_ir::DType;

/// Index of a [`Buffer`] in its function's buffer arena. Prints as `buffer7`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BufferId(pub u32);

/// Index of a scalar variable (loop variable or let-bound value) in its function's
/// variable arena. Prints as `var3`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct VarId(pub u32);

impl BufferId {
    /// The arena index.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl VarId {
    /// The arena index.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for BufferId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "buffer{}", self.0)
    }
}

impl fmt::Display for VarId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "var{}", self.0)
    }
}

/// Where a buffer lives.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Scope {
    /// Device memory passed in by the caller (kernel parameters).
    Global,
    /// Private to one thread (registers or stack): accumulators, small tiles.
    Local,
    /// Shared by the threads of one GPU block (one copy per block).
    Shared,
}

impl Scope {
    /// The name used in the text form.
    pub fn name(self) -> &'static str {
        match self {
            Scope::Global => "global",
            Scope::Local => "local",
            Scope::Shared => "shared",
        }
    }

    /// The scope with the given text name.
    pub fn from_name(s: &str) -> Option<Scope> {
        [Scope::Global, Scope::Local, Scope::Shared]
            .into_iter()
            .find(|x| x.name() == s)
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A multi-dimensional, row-major array with a static shape.
#[derive(Clone, Debug, PartialEq)]
pub struct Buffer {
    /// The name shown in the text form (made unique there if needed).
    pub name: String,
    /// Extent of each dimension; rank 0 is a single element.
    pub shape: Vec<usize>,
    /// Element type.
    pub dtype: DType,
    /// Memory scope.
    pub scope: Scope,
}

impl Buffer {
    /// A buffer with the given parts.
    pub fn new(
        name: impl Into<String>,
        shape: impl Into<Vec<usize>>,
        dtype: DType,
        scope: Scope,
    ) -> Buffer {
        Buffer {
            name: name.into(),
            shape: shape.into(),
            dtype,
            scope,
        }
    }

    /// Number of dimensions.
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// Number of elements, or `None` if it overflows `usize`.
    pub fn numel(&self) -> Option<usize> {
        self.shape
            .iter()
            .try_fold(1usize, |acc, &d| acc.checked_mul(d))
    }
}

/// The type of a scalar or vector value: an element dtype and a lane count (1 for
/// scalars). Prints as `float32`, `float32x4`, `boolx8`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct ValueType {
    /// Element type of each lane.
    pub dtype: DType,
    /// Number of lanes, at least 1.
    pub lanes: u32,
}

impl ValueType {
    /// `int32`, the default type of loop variables and index arithmetic.
    pub const I32: ValueType = ValueType::scalar(DType::I32);
    /// `int64`.
    pub const I64: ValueType = ValueType::scalar(DType::I64);
    /// `float32`.
    pub const F32: ValueType = ValueType::scalar(DType::F32);
    /// `bool`.
    pub const BOOL: ValueType = ValueType::scalar(DType::Bool);

    /// A scalar of `dtype`.
    pub const fn scalar(dtype: DType) -> ValueType {
        ValueType { dtype, lanes: 1 }
    }

    /// A vector of `lanes` elements of `dtype`.
    pub const fn vector(dtype: DType, lanes: u32) -> ValueType {
        ValueType { dtype, lanes }
    }

    /// Whether this is a scalar (one lane).
    pub fn is_scalar(self) -> bool {
        self.lanes == 1
    }

    /// The same element type with another lane count.
    pub fn with_lanes(self, lanes: u32) -> ValueType {
        ValueType { lanes, ..self }
    }

    /// Whether the element type is an integer type usable as an index (int32, int64).
    pub fn is_index(self) -> bool {
        matches!(self.dtype, DType::I32 | DType::I64)
    }

    /// Parses `float32`, `int32x4`, `boolx8`.
    pub fn parse(s: &str) -> Option<ValueType> {
        if let Ok(d) = s.parse::<DType>() {
            return Some(ValueType::scalar(d));
        }
        let (base, lanes) = s.rsplit_once('x')?;
        let dtype = base.parse::<DType>().ok()?;
        if lanes.is_empty() || !lanes.bytes().all(|b| b.is_ascii_digit()) || lanes.starts_with('0')
        {
            return None;
        }
        let lanes: u32 = lanes.parse().ok()?;
        (lanes >= 2).then_some(ValueType { dtype, lanes })
    }
}

impl fmt::Display for ValueType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.lanes == 1 {
            f.write_str(self.dtype.name())
        } else {
            write!(f, "{}x{}", self.dtype.name(), self.lanes)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn value_types_print_and_parse() {
        for (s, t) in [
            ("float32", ValueType::F32),
            ("float32x4", ValueType::vector(DType::F32, 4)),
            ("boolx8", ValueType::vector(DType::Bool, 8)),
            ("int64", ValueType::I64),
        ] {
            assert_eq!(t.to_string(), s);
            assert_eq!(ValueType::parse(s), Some(t));
        }
        for bad in [
            "float32x",
            "float32x1",
            "float32x04",
            "x4",
            "complex64",
            "int32xy",
        ] {
            assert_eq!(ValueType::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn scopes_and_ids() {
        assert_eq!(Scope::from_name("shared"), Some(Scope::Shared));
        assert_eq!(Scope::from_name("texture"), None);
        assert_eq!(BufferId(3).to_string(), "buffer3");
        assert_eq!(VarId(2).to_string(), "var2");
        assert_eq!(
            Buffer::new("a", [2, 3], DType::F32, Scope::Global).numel(),
            Some(6)
        );
    }
}
