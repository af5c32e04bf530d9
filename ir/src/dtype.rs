//! Element data types of tensors (`float32`, `int64`, ...): their names, sizes and
//! the DLPack codes TVM's formats store them with.

use std::fmt;
use std::str::FromStr;

use crate::error::Error;

/// The element type of a tensor.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    /// IEEE 754 binary32 (`float32`).
    F32,
    /// IEEE 754 binary16 (`float16`).
    F16,
    /// Signed 8-bit integer (`int8`).
    I8,
    /// Unsigned 8-bit integer (`uint8`).
    U8,
    /// Signed 32-bit integer (`int32`).
    I32,
    /// Signed 64-bit integer (`int64`).
    I64,
    /// `true`/`false`, one byte per element in memory (`bool`).
    Bool,
    /// IEEE 754 binary64 (`float64`).
    F64,
    /// bfloat16: float32's exponent with a 7-bit mantissa; computed in float32 and
    /// rounded (to nearest, ties to even) after each operation, as float16 is.
    BF16,
    /// Signed 16-bit integer (`int16`).
    I16,
    /// Unsigned 16-bit integer (`uint16`).
    U16,
    /// Unsigned 32-bit integer (`uint32`).
    U32,
    /// Unsigned 64-bit integer (`uint64`). Held as its two's-complement bit pattern wherever kiln computes in `i64`;
    /// comparisons, division, min/max and conversions read it unsigned.
    U64,
}

impl DType {
    /// Every dtype, in a fixed order.
    pub const ALL: [DType; 13] = [
        DType::F32,
        DType::F16,
        DType::I8,
        DType::U8,
        DType::I32,
        DType::I64,
        DType::Bool,
        DType::F64,
        DType::BF16,
        DType::I16,
        DType::U16,
        DType::U32,
        DType::U64,
    ];

    /// The name Relay and TVM use (`"float32"`, `"int64"`, `"bool"`).
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "float32",
            DType::F16 => "float16",
            DType::I8 => "int8",
            DType::U8 => "uint8",
            DType::I32 => "int32",
            DType::I64 => "int64",
            DType::Bool => "bool",
            DType::F64 => "float64",
            DType::BF16 => "bfloat16",
            DType::I16 => "int16",
            DType::U16 => "uint16",
            DType::U32 => "uint32",
            DType::U64 => "uint64",
        }
    }

    /// Bytes per element in memory (bool takes one byte, as in TVM and numpy).
    pub fn size_bytes(self) -> usize {
        match self {
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F16 | DType::BF16 | DType::I16 | DType::U16 => 2,
            DType::I8 | DType::U8 | DType::Bool => 1,
            DType::I64 | DType::F64 | DType::U64 => 8,
        }
    }

    /// Bits per element as DLPack records them (`bool` is 1 bit in DLPack).
    pub fn bits(self) -> u8 {
        match self {
            DType::Bool => 1,
            other => (other.size_bytes() * 8) as u8,
        }
    }

    /// DLPack type code: 0 = int, 1 = uint, 2 = float, 4 = bfloat.
    pub fn dl_code(self) -> u8 {
        match self {
            DType::I8 | DType::I16 | DType::I32 | DType::I64 => 0,
            DType::U8 | DType::U16 | DType::U32 | DType::U64 | DType::Bool => 1,
            DType::F32 | DType::F16 | DType::F64 => 2,
            DType::BF16 => 4,
        }
    }

    /// The dtype with the given DLPack code and bits, if kiln has one.
    pub fn from_dl(code: u8, bits: u8) -> Option<DType> {
        DType::ALL
            .into_iter()
            .find(|d| d.dl_code() == code && d.bits() == bits)
    }

    /// Whether this is a floating-point dtype.
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F16 | DType::F64 | DType::BF16)
    }

    /// Whether this is an integer dtype, signed or unsigned (bool is not).
    pub fn is_int(self) -> bool {
        matches!(
            self,
            DType::I8
                | DType::U8
                | DType::I16
                | DType::U16
                | DType::I32
                | DType::U32
                | DType::I64
                | DType::U64
        )
    }

    /// Whether this is an unsigned integer dtype (`uint8` ... `uint64`).
    pub fn is_unsigned(self) -> bool {
        matches!(self, DType::U8 | DType::U16 | DType::U32 | DType::U64)
    }

    /// Whether this is `bool`.
    pub fn is_bool(self) -> bool {
        self == DType::Bool
    }

    /// Suffix used for scalar constants in the text form (`1f`, `2i64`, `3u8`).
    pub(crate) fn literal_suffix(self) -> &'static str {
        match self {
            DType::F32 => "f",
            DType::F16 => "f16",
            DType::I8 => "i8",
            DType::U8 => "u8",
            DType::I32 => "",
            DType::I64 => "i64",
            DType::Bool => "",
            DType::F64 => "f64",
            DType::BF16 => "bf16",
            DType::I16 => "i16",
            DType::U16 => "u16",
            DType::U32 => "u32",
            DType::U64 => "u64",
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for DType {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        DType::ALL
            .into_iter()
            .find(|d| d.name() == s)
            .ok_or_else(|| {
                Error::Unsupported(format!(
                    "dtype `{s}` (kiln supports {})",
                    DType::ALL.map(DType::name).join(", ")
                ))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for d in DType::ALL {
            assert_eq!(d.name().parse::<DType>().unwrap(), d);
            assert_eq!(DType::from_dl(d.dl_code(), d.bits()), Some(d));
        }
    }

    #[test]
    fn unknown_dtype_is_an_error() {
        let err = "float8e4m3".parse::<DType>().unwrap_err();
        assert!(err.to_string().contains("float8e4m3"), "{err}");
    }
}
