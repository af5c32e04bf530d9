//! `NDArray`: a tensor value with a dtype, a static shape and contiguous row-major data.
//! Made from and read into Rust vectors, converted between dtypes, filled at random from
//! a seed, compared with a tolerance (`compare`) and read from / written to `.npy` (`npy`).
//! Sizes that come from input are checked against the memory budget (`budget`) before
//! anything is allocated; the infallible constructors are for shapes already checked.

pub mod budget;
mod compare;
mod npy;

pub use compare::Mismatch;
use half::{bf16, f16};

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::rng::SplitMix64;
use crate::ty::{TensorType, fmt_shape};

/// The typed element storage of an [`NDArray`].
#[derive(Clone, Debug, PartialEq)]
pub enum Data {
    /// `float32` elements.
    F32(Vec<f32>),
    /// `float16` elements.
    F16(Vec<f16>),
    /// `int8` elements.
    I8(Vec<i8>),
    /// `uint8` elements.
    U8(Vec<u8>),
    /// `int32` elements.
    I32(Vec<i32>),
    /// `int64` elements.
    I64(Vec<i64>),
    /// `bool` elements.
    Bool(Vec<bool>),
    /// `float64` elements.
    F64(Vec<f64>),
    /// `bfloat16` elements.
    BF16(Vec<bf16>),
    /// `int16` elements.
    I16(Vec<i16>),
    /// `uint16` elements.
    U16(Vec<u16>),
    /// `uint32` elements.
    U32(Vec<u32>),
    /// `uint64` elements.
    U64(Vec<u64>),
}

/// A Rust element type that an [`NDArray`] can hold.
pub trait Element: Copy + Send + Sync + 'static {
    /// The dtype of this element type.
    const DTYPE: DType;
    /// `v` as storage.
    fn wrap(v: Vec<Self>) -> Data;
    /// The elements of `d`, if `d` holds this type.
    fn slice(d: &Data) -> Option<&[Self]>;
}

macro_rules! element {
    ($t:ty, $variant:ident) => {
        impl Element for $t {
            const DTYPE: DType = DType::$variant;
            fn wrap(v: Vec<Self>) -> Data {
                Data::$variant(v)
            }
            fn slice(d: &Data) -> Option<&[Self]> {
                match d {
                    Data::$variant(v) => Some(v),
                    _ => None,
                }
            }
        }
    };
}
element!(f32, F32);
element!(f16, F16);
element!(i8, I8);
element!(u8, U8);
element!(i32, I32);
element!(i64, I64);
element!(bool, Bool);
element!(f64, F64);
element!(bf16, BF16);
element!(i16, I16);
element!(u16, U16);
element!(u32, U32);
element!(u64, U64);

/// Evaluates `$body` with `$t` the Rust element type of dtype `$dtype`.
macro_rules! with_element_type {
    ($dtype:expr, $t:ident => $body:expr) => {
        match $dtype {
            $crate::DType::F32 => {
                type $t = f32;
                $body
            }
            $crate::DType::F16 => {
                type $t = half::f16;
                $body
            }
            $crate::DType::I8 => {
                type $t = i8;
                $body
            }
            $crate::DType::U8 => {
                type $t = u8;
                $body
            }
            $crate::DType::I32 => {
                type $t = i32;
                $body
            }
            $crate::DType::I64 => {
                type $t = i64;
                $body
            }
            $crate::DType::Bool => {
                type $t = bool;
                $body
            }
            $crate::DType::F64 => {
                type $t = f64;
                $body
            }
            $crate::DType::BF16 => {
                type $t = half::bf16;
                $body
            }
            $crate::DType::I16 => {
                type $t = i16;
                $body
            }
            $crate::DType::U16 => {
                type $t = u16;
                $body
            }
            $crate::DType::U32 => {
                type $t = u32;
                $body
            }
            $crate::DType::U64 => {
                type $t = u64;
                $body
            }
        }
    };
}
pub(crate) use with_element_type;

/// Applies `$body` to the vector inside a [`Data`], whatever its element type.
macro_rules! with_data {
    ($data:expr, $v:ident => $body:expr) => {
        match $data {
            Data::F32($v) => $body,
            Data::F16($v) => $body,
            Data::I8($v) => $body,
            Data::U8($v) => $body,
            Data::I32($v) => $body,
            Data::I64($v) => $body,
            Data::Bool($v) => $body,
            Data::F64($v) => $body,
            Data::BF16($v) => $body,
            Data::I16($v) => $body,
            Data::U16($v) => $body,
            Data::U32($v) => $body,
            Data::U64($v) => $body,
        }
    };
}

impl Data {
    /// The dtype of the elements held.
    pub fn dtype(&self) -> DType {
        match self {
            Data::F32(_) => DType::F32,
            Data::F16(_) => DType::F16,
            Data::I8(_) => DType::I8,
            Data::U8(_) => DType::U8,
            Data::I32(_) => DType::I32,
            Data::I64(_) => DType::I64,
            Data::Bool(_) => DType::Bool,
            Data::F64(_) => DType::F64,
            Data::BF16(_) => DType::BF16,
            Data::I16(_) => DType::I16,
            Data::U16(_) => DType::U16,
            Data::U32(_) => DType::U32,
            Data::U64(_) => DType::U64,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        with_data!(self, v => v.len())
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Values converted to `f64` (exact for every dtype but large int64).
    pub fn to_f64(&self) -> Vec<f64> {
        match self {
            Data::F32(v) => v.iter().map(|&x| x as f64).collect(),
            Data::F16(v) => v.iter().map(|&x| x.to_f64()).collect(),
            Data::I8(v) => v.iter().map(|&x| x as f64).collect(),
            Data::U8(v) => v.iter().map(|&x| x as f64).collect(),
            Data::I32(v) => v.iter().map(|&x| x as f64).collect(),
            Data::I64(v) => v.iter().map(|&x| x as f64).collect(),
            Data::Bool(v) => v.iter().map(|&x| x as u8 as f64).collect(),
            Data::F64(v) => v.clone(),
            Data::BF16(v) => v.iter().map(|&x| x.to_f64()).collect(),
            Data::I16(v) => v.iter().map(|&x| x as f64).collect(),
            Data::U16(v) => v.iter().map(|&x| x as f64).collect(),
            Data::U32(v) => v.iter().map(|&x| x as f64).collect(),
            Data::U64(v) => v.iter().map(|&x| x as f64).collect(),
        }
    }

    /// Values converted to `i64`; floats truncate toward zero, saturating (NaN is 0);
    /// `uint64` keeps its bit pattern (values above `i64::MAX` read negative).
    pub fn to_i64(&self) -> Vec<i64> {
        match self {
            Data::F32(v) => v.iter().map(|&x| x as i64).collect(),
            Data::F16(v) => v.iter().map(|&x| x.to_f64() as i64).collect(),
            Data::I8(v) => v.iter().map(|&x| x as i64).collect(),
            Data::U8(v) => v.iter().map(|&x| x as i64).collect(),
            Data::I32(v) => v.iter().map(|&x| x as i64).collect(),
            Data::I64(v) => v.clone(),
            Data::Bool(v) => v.iter().map(|&x| x as i64).collect(),
            Data::F64(v) => v.iter().map(|&x| x as i64).collect(),
            Data::BF16(v) => v.iter().map(|&x| x.to_f64() as i64).collect(),
            Data::I16(v) => v.iter().map(|&x| x as i64).collect(),
            Data::U16(v) => v.iter().map(|&x| x as i64).collect(),
            Data::U32(v) => v.iter().map(|&x| x as i64).collect(),
            Data::U64(v) => v.iter().map(|&x| x as i64).collect(),
        }
    }

    /// `f64` values rounded to `dtype`: to the nearest float for float types; truncated
    /// toward zero and saturated for integer types (NaN becomes 0); non-zero is `true`.
    pub fn from_f64(dtype: DType, v: impl IntoIterator<Item = f64>) -> Data {
        let v = v.into_iter();
        match dtype {
            DType::F32 => Data::F32(v.map(|x| x as f32).collect()),
            DType::F16 => Data::F16(v.map(f16::from_f64).collect()),
            DType::I8 => Data::I8(v.map(|x| x as i8).collect()),
            DType::U8 => Data::U8(v.map(|x| x as u8).collect()),
            DType::I32 => Data::I32(v.map(|x| x as i32).collect()),
            DType::I64 => Data::I64(v.map(|x| x as i64).collect()),
            DType::Bool => Data::Bool(v.map(|x| x != 0.0).collect()),
            DType::F64 => Data::F64(v.collect()),
            DType::BF16 => Data::BF16(v.map(bf16::from_f64).collect()),
            DType::I16 => Data::I16(v.map(|x| x as i16).collect()),
            DType::U16 => Data::U16(v.map(|x| x as u16).collect()),
            DType::U32 => Data::U32(v.map(|x| x as u32).collect()),
            DType::U64 => Data::U64(v.map(|x| x as u64).collect()),
        }
    }

    /// `i64` values converted to `dtype`: two's-complement wrapping for integer types
    /// (`uint64` takes the bit pattern).
    pub fn from_i64(dtype: DType, v: impl IntoIterator<Item = i64>) -> Data {
        let v = v.into_iter();
        match dtype {
            DType::F32 => Data::F32(v.map(|x| x as f32).collect()),
            DType::F16 => Data::F16(v.map(|x| f16::from_f64(x as f64)).collect()),
            DType::I8 => Data::I8(v.map(|x| x as i8).collect()),
            DType::U8 => Data::U8(v.map(|x| x as u8).collect()),
            DType::I32 => Data::I32(v.map(|x| x as i32).collect()),
            DType::I64 => Data::I64(v.collect()),
            DType::Bool => Data::Bool(v.map(|x| x != 0).collect()),
            DType::F64 => Data::F64(v.map(|x| x as f64).collect()),
            DType::BF16 => Data::BF16(v.map(|x| bf16::from_f64(x as f64)).collect()),
            DType::I16 => Data::I16(v.map(|x| x as i16).collect()),
            DType::U16 => Data::U16(v.map(|x| x as u16).collect()),
            DType::U32 => Data::U32(v.map(|x| x as u32).collect()),
            DType::U64 => Data::U64(v.map(|x| x as u64).collect()),
        }
    }

    /// Picks the elements at `indices`, in that order.
    pub fn gather(&self, indices: impl IntoIterator<Item = usize>) -> Data {
        let idx = indices.into_iter();
        with_data!(self, v => Element::wrap(idx.map(|i| v[i]).collect()))
    }
}

/// A tensor value: dtype, static shape, contiguous row-major data.
#[derive(Clone, Debug, PartialEq)]
pub struct NDArray {
    shape: Vec<usize>,
    data: Data,
}

impl NDArray {
    /// A tensor from a shape and its data; the element count must match the shape.
    pub fn new(shape: impl Into<Vec<usize>>, data: Data) -> Result<NDArray> {
        let shape = shape.into();
        let numel = budget::checked_numel(&shape)?;
        if numel != data.len() {
            return Err(Error::InvalidArgument(format!(
                "shape {} holds {numel} elements but {} values were given",
                fmt_shape(&shape),
                data.len()
            )));
        }
        Ok(NDArray { shape, data })
    }

    /// A tensor from a Rust vector.
    pub fn from_vec<T: Element>(shape: impl Into<Vec<usize>>, v: Vec<T>) -> Result<NDArray> {
        NDArray::new(shape, T::wrap(v))
    }

    /// A rank-0 tensor.
    pub fn scalar<T: Element>(v: T) -> NDArray {
        NDArray {
            shape: vec![],
            data: T::wrap(vec![v]),
        }
    }

    /// A tensor of zeros (false for bool). For a shape that came from input, check it
    /// first with [`budget::checked_bytes`]: this panics on a shape that overflows.
    pub fn zeros(shape: impl Into<Vec<usize>>, dtype: DType) -> NDArray {
        let shape = shape.into();
        let n = numel_of_checked(&shape);
        NDArray {
            data: Data::from_f64(dtype, std::iter::repeat_n(0.0, n)),
            shape,
        }
    }

    /// A tensor with every element equal to `value` (converted to `dtype`); a shape
    /// from input is checked first, as for [`NDArray::zeros`].
    pub fn full(shape: impl Into<Vec<usize>>, dtype: DType, value: f64) -> NDArray {
        let shape = shape.into();
        let n = numel_of_checked(&shape);
        NDArray {
            data: Data::from_f64(dtype, std::iter::repeat_n(value, n)),
            shape,
        }
    }

    /// A tensor filled from `seed`: floats uniform in `[-1, 1)`, signed integers in
    /// `[-10, 10]`, `uint8` in `[0, 20]`, bools fair coin flips. Same seed, same bits.
    pub fn random(shape: impl Into<Vec<usize>>, dtype: DType, seed: u64) -> NDArray {
        NDArray::random_uniform(shape, dtype, seed, -1.0, 1.0)
    }

    /// A float tensor uniform in `[lo, hi)` from `seed` (integers: the whole numbers in
    /// `[lo, hi]`; bools ignore the range). A shape from input is checked first, as for
    /// [`NDArray::zeros`].
    pub fn random_uniform(
        shape: impl Into<Vec<usize>>,
        dtype: DType,
        seed: u64,
        lo: f64,
        hi: f64,
    ) -> NDArray {
        let shape = shape.into();
        let n = numel_of_checked(&shape);
        let mut rng = SplitMix64::new(seed);
        let data = match dtype {
            d if d.is_float() => Data::from_f64(d, (0..n).map(|_| rng.uniform(lo, hi))),
            DType::Bool => Data::Bool((0..n).map(|_| rng.next_u64() & 1 == 1).collect()),
            d => {
                let (lo, hi) = if (lo, hi) == (-1.0, 1.0) {
                    if d.is_unsigned() { (0, 20) } else { (-10, 10) }
                } else {
                    (lo.ceil() as i64, hi.floor() as i64)
                };
                Data::from_i64(d, (0..n).map(|_| rng.int_in(lo, hi)))
            }
        };
        NDArray { shape, data }
    }

    /// The dimensions, outermost first (row-major).
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.data.dtype()
    }

    /// The elements, row-major.
    pub fn data(&self) -> &Data {
        &self.data
    }

    /// The elements, row-major, without the shape.
    pub fn into_data(self) -> Data {
        self.data
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.data.len()
    }

    /// Number of dimensions (0 for a scalar).
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// The tensor type of this value.
    pub fn ty(&self) -> TensorType {
        TensorType::new(self.shape.clone(), self.dtype())
    }

    /// The elements as a slice of `T`; an error if `T` is not this tensor's dtype.
    pub fn as_slice<T: Element>(&self) -> Result<&[T]> {
        T::slice(&self.data).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "tensor holds {} but {} was asked for",
                self.dtype(),
                T::DTYPE
            ))
        })
    }

    /// The elements copied into a vector of `T`; an error on a dtype mismatch.
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        self.as_slice::<T>().map(<[T]>::to_vec)
    }

    /// Values as `f64`.
    pub fn to_f64_vec(&self) -> Vec<f64> {
        self.data.to_f64()
    }

    /// Values as `i64` (floats truncated).
    pub fn to_i64_vec(&self) -> Vec<i64> {
        self.data.to_i64()
    }

    /// A tensor of `dtype` from `f64` values (see [`Data::from_f64`] for the rounding).
    pub fn from_f64(shape: impl Into<Vec<usize>>, dtype: DType, v: Vec<f64>) -> Result<NDArray> {
        NDArray::new(shape, Data::from_f64(dtype, v))
    }

    /// The same data under a new shape with the same number of elements.
    pub fn reshape(&self, shape: impl Into<Vec<usize>>) -> Result<NDArray> {
        NDArray::new(shape, self.data.clone())
    }

    /// Converts to another dtype with the semantics of the `cast` op: floats to integers
    /// truncate toward zero and saturate, integers wrap, non-zero becomes `true`.
    pub fn cast(&self, dtype: DType) -> NDArray {
        let data = if self.dtype().is_float() || dtype.is_float() {
            Data::from_f64(dtype, self.data.to_f64())
        } else {
            Data::from_i64(dtype, self.data.to_i64())
        };
        NDArray {
            shape: self.shape.clone(),
            data,
        }
    }

    /// Row-major strides in elements.
    pub fn strides(&self) -> Vec<usize> {
        row_major_strides(&self.shape)
    }

    /// The little-endian bytes of the data (bool as one byte 0/1), as TVM stores them.
    pub fn to_le_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.numel() * self.dtype().size_bytes());
        match &self.data {
            Data::F32(v) => v.iter().for_each(|x| out.extend(x.to_le_bytes())),
            Data::F16(v) => v.iter().for_each(|x| out.extend(x.to_le_bytes())),
            Data::I8(v) => v.iter().for_each(|x| out.extend(x.to_le_bytes())),
            Data::U8(v) => out.extend_from_slice(v),
            Data::I32(v) => v.iter().for_each(|x| out.extend(x.to_le_bytes())),
            Data::I64(v) => v.iter().for_each(|x| out.extend(x.to_le_bytes())),
            Data::Bool(v) => v.iter().for_each(|&x| out.push(x as u8)),
            Data::F64(v) => v.iter().for_each(|x| out.extend(x.to_le_bytes())),
            Data::BF16(v) => v.iter().for_each(|x| out.extend(x.to_le_bytes())),
            Data::I16(v) => v.iter().for_each(|x| out.extend(x.to_le_bytes())),
            Data::U16(v) => v.iter().for_each(|x| out.extend(x.to_le_bytes())),
            Data::U32(v) => v.iter().for_each(|x| out.extend(x.to_le_bytes())),
            Data::U64(v) => v.iter().for_each(|x| out.extend(x.to_le_bytes())),
        }
        out
    }

    /// A tensor from little-endian bytes; the byte count must match shape and dtype.
    pub fn from_le_bytes(
        shape: impl Into<Vec<usize>>,
        dtype: DType,
        bytes: &[u8],
    ) -> Result<NDArray> {
        let shape = shape.into();
        let want = budget::checked_numel(&shape)?.checked_mul(dtype.size_bytes());
        if want != Some(bytes.len()) {
            let want = want.map_or("more than 2^64".to_string(), |w| w.to_string());
            return Err(Error::InvalidArgument(format!(
                "{} {dtype} needs {want} bytes, got {}",
                fmt_shape(&shape),
                bytes.len()
            )));
        }
        fn chunks<const N: usize>(b: &[u8]) -> impl Iterator<Item = [u8; N]> + '_ {
            b.chunks_exact(N)
                .map(|c| c.try_into().expect("exact chunk"))
        }
        let data = match dtype {
            DType::F32 => Data::F32(chunks(bytes).map(f32::from_le_bytes).collect()),
            DType::F16 => Data::F16(chunks(bytes).map(f16::from_le_bytes).collect()),
            DType::I8 => Data::I8(bytes.iter().map(|&b| b as i8).collect()),
            DType::U8 => Data::U8(bytes.to_vec()),
            DType::I32 => Data::I32(chunks(bytes).map(i32::from_le_bytes).collect()),
            DType::I64 => Data::I64(chunks(bytes).map(i64::from_le_bytes).collect()),
            DType::Bool => Data::Bool(bytes.iter().map(|&b| b != 0).collect()),
            DType::F64 => Data::F64(chunks(bytes).map(f64::from_le_bytes).collect()),
            DType::BF16 => Data::BF16(chunks(bytes).map(bf16::from_le_bytes).collect()),
            DType::I16 => Data::I16(chunks(bytes).map(i16::from_le_bytes).collect()),
            DType::U16 => Data::U16(chunks(bytes).map(u16::from_le_bytes).collect()),
            DType::U32 => Data::U32(chunks(bytes).map(u32::from_le_bytes).collect()),
            DType::U64 => Data::U64(chunks(bytes).map(u64::from_le_bytes).collect()),
        };
        NDArray::new(shape, data)
    }

    /// The first `n` values formatted for display (`[0.1, -0.2, ...]`).
    pub fn preview(&self, n: usize) -> String {
        let vals: Vec<String> = match &self.data {
            Data::Bool(v) => v.iter().take(n).map(|b| b.to_string()).collect(),
            d if d.dtype().is_float() => d
                .to_f64()
                .iter()
                .take(n)
                .map(|x| format!("{x:.6}"))
                .collect(),
            Data::U64(v) => v.iter().take(n).map(|x| x.to_string()).collect(),
            d => d.to_i64().iter().take(n).map(|x| x.to_string()).collect(),
        };
        let more = if self.numel() > n { ", ..." } else { "" };
        format!("[{}{more}]", vals.join(", "))
    }
}

/// Row-major strides (in elements) of a shape. A stride that overflows saturates: only
/// a shape with no elements has one, and nothing is ever read through it.
pub fn row_major_strides(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![1usize; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1].saturating_mul(shape[i + 1]);
    }
    strides
}

/// The element count of a shape the caller has checked; an overflow is a caller's bug.
fn numel_of_checked(shape: &[usize]) -> usize {
    budget::checked_numel(shape)
        .unwrap_or_else(|e| panic!("{e}: check input shapes with tensor::budget first"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vectors_in_and_out() {
        let a = NDArray::from_vec([2, 3], vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
        assert_eq!(a.shape(), &[2, 3]);
        assert_eq!(a.dtype(), DType::F32);
        assert_eq!(a.to_vec::<f32>().unwrap()[4], 5.0);
        assert!(a.to_vec::<i32>().is_err());
        assert_eq!(a.strides(), vec![3, 1]);
        let err = NDArray::from_vec([2, 2], vec![1i64; 3]).unwrap_err();
        assert!(
            err.to_string().contains("(2, 2) holds 4 elements but 3"),
            "{err}"
        );
    }

    #[test]
    fn random_is_seeded() {
        let a = NDArray::random([4, 5], DType::F32, 3);
        assert_eq!(a, NDArray::random([4, 5], DType::F32, 3));
        assert_ne!(a, NDArray::random([4, 5], DType::F32, 4));
        assert!(a.to_f64_vec().iter().all(|x| (-1.0..1.0).contains(x)));
        let i = NDArray::random([100], DType::U8, 1);
        assert!(i.to_i64_vec().iter().all(|x| (0..=20).contains(x)));
    }

    #[test]
    fn cast_semantics() {
        let a = NDArray::from_vec([4], vec![-1.7f32, 2.5, 300.0, f32::NAN]).unwrap();
        assert_eq!(
            a.cast(DType::I32).to_vec::<i32>().unwrap(),
            vec![-1, 2, 300, 0]
        );
        assert_eq!(
            a.cast(DType::I8).to_vec::<i8>().unwrap(),
            vec![-1, 2, 127, 0]
        );
        let b = NDArray::from_vec([2], vec![257i64, -1]).unwrap();
        assert_eq!(b.cast(DType::U8).to_vec::<u8>().unwrap(), vec![1, 255]);
        assert_eq!(
            b.cast(DType::Bool).to_vec::<bool>().unwrap(),
            vec![true, true]
        );
    }

    #[test]
    fn bytes_round_trip() {
        for d in DType::ALL {
            let a = NDArray::random([3, 2], d, 9);
            let b = NDArray::from_le_bytes([3, 2], d, &a.to_le_bytes()).unwrap();
            assert_eq!(a, b);
        }
        assert!(NDArray::from_le_bytes([3], DType::F32, &[0; 11]).is_err());
    }
}
