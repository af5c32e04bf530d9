//! Tensors across the ONNX boundary: ONNX element types to kiln dtypes, `TensorProto`
//! (raw little-endian bytes or the typed data fields) to [`NDArray`] and back.

use kiln_ir::{DType, NDArray};

use crate::error::{Error, Result};
use crate::narrow::Narrow;
use crate::proto::{TensorProto, data_type};

/// The kiln dtype of an ONNX element type code, or an error naming the ONNX type.
pub fn dtype_from_onnx(code: i32) -> Result<DType> {
    Ok(match code {
        data_type::FLOAT => DType::F32,
        data_type::FLOAT16 => DType::F16,
        data_type::INT8 => DType::I8,
        data_type::UINT8 => DType::U8,
        data_type::INT32 => DType::I32,
        data_type::INT64 => DType::I64,
        data_type::BOOL => DType::Bool,
        data_type::DOUBLE => DType::F64,
        data_type::BFLOAT16 => DType::BF16,
        data_type::INT16 => DType::I16,
        data_type::UINT16 => DType::U16,
        data_type::UINT32 => DType::U32,
        data_type::UINT64 => DType::U64,
        other => {
            return Err(Error::UnsupportedType(format!(
                "ONNX element type {} ({other})",
                data_type::name(other)
            )));
        }
    })
}

/// The dtype kiln stores ONNX element type `code` in: [`dtype_from_onnx`], and `uint8`
/// for the narrow types (the four float8s, `FLOAT4E2M1`, `INT4`, `UINT4`, `INT2`,
/// `UINT2`), held as their bit patterns, one element per byte (the importer converts
/// them where `Cast`, `CastLike`, `QuantizeLinear` and `DequantizeLinear` read or write
/// them).
pub fn storage_dtype_from_onnx(code: i32) -> Result<DType> {
    match Narrow::from_onnx(code) {
        Some(_) => Ok(DType::U8),
        None => dtype_from_onnx(code),
    }
}

/// The elements of a sub-byte type of `bits` bits packed `8 / bits` to a byte, low bits
/// first (in `raw_data`, or one byte per `int32_data` entry), one per byte.
fn unpack(
    t: &TensorProto,
    what: &str,
    shape: Vec<usize>,
    numel: usize,
    bits: u32,
) -> Result<NDArray> {
    let per = (8 / bits) as usize;
    let packed: Vec<u8> = match &t.raw_data {
        Some(raw) => raw.clone(),
        None => t.int32_data.iter().map(|&v| v as u8).collect(),
    };
    let want = numel.div_ceil(per);
    if packed.len() != want {
        return Err(Error::InvalidModel(format!(
            "{what}: dims {:?} of a {bits}-bit type pack into {want} bytes, got {}",
            t.dims,
            packed.len()
        )));
    }
    let mask = (1u8 << bits) - 1;
    let codes = (0..numel)
        .map(|i| (packed[i / per] >> ((i % per) as u32 * bits)) & mask)
        .collect();
    NDArray::from_vec(shape, codes).map_err(Error::from)
}

/// The ONNX element type code of a kiln dtype.
pub fn dtype_to_onnx(d: DType) -> i32 {
    match d {
        DType::F32 => data_type::FLOAT,
        DType::F16 => data_type::FLOAT16,
        DType::I8 => data_type::INT8,
        DType::U8 => data_type::UINT8,
        DType::I32 => data_type::INT32,
        DType::I64 => data_type::INT64,
        DType::Bool => data_type::BOOL,
        DType::F64 => data_type::DOUBLE,
        DType::BF16 => data_type::BFLOAT16,
        DType::I16 => data_type::INT16,
        DType::U16 => data_type::UINT16,
        DType::U32 => data_type::UINT32,
        DType::U64 => data_type::UINT64,
    }
}

/// A tensor's dims as a kiln shape: every dim non-negative, the element count in range.
fn shape_of(t: &TensorProto, what: &str) -> Result<(Vec<usize>, usize)> {
    let mut shape = Vec::with_capacity(t.dims.len());
    let mut numel: usize = 1;
    for (i, &d) in t.dims.iter().enumerate() {
        let d = usize::try_from(d)
            .map_err(|_| Error::InvalidModel(format!("{what}: dimension {i} is negative ({d})")))?;
        numel = numel.checked_mul(d).ok_or_else(|| {
            Error::InvalidModel(format!("{what}: the dims {:?} overflow", t.dims))
        })?;
        shape.push(d);
    }
    Ok((shape, numel))
}

/// The value of a `TensorProto` as an [`NDArray`] (a narrow type's tensor as its
/// `uint8` bit patterns, unpacked, see [`storage_dtype_from_onnx`]). `what` names the tensor in errors.
/// The data must be embedded (not external) and hold exactly as many elements as the
/// dims say.
pub fn tensor_from_proto(t: &TensorProto, what: &str) -> Result<NDArray> {
    let code = t.data_type.unwrap_or(data_type::UNDEFINED);
    let dtype = storage_dtype_from_onnx(code).map_err(|e| match e {
        Error::UnsupportedType(m) => Error::UnsupportedType(format!("{what}: {m}")),
        other => other,
    })?;
    if t.data_location == Some(1) || !t.external_data.is_empty() {
        return Err(Error::Unsupported(format!(
            "{what}: tensor data stored in an external file"
        )));
    }
    let (shape, numel) = shape_of(t, what)?;
    if let Some(n) = Narrow::from_onnx(code).filter(|n| n.bits() < 8) {
        return unpack(t, what, shape, numel, n.bits());
    }
    let count_err = |got: usize, field: &str| {
        Error::InvalidModel(format!(
            "{what}: dims {:?} hold {numel} elements but `{field}` has {got}",
            t.dims
        ))
    };
    if let Some(raw) = &t.raw_data {
        let want = numel.checked_mul(dtype.size_bytes());
        if want != Some(raw.len()) {
            return Err(Error::InvalidModel(format!(
                "{what}: dims {:?} of {} need {} bytes of raw_data, got {}",
                t.dims,
                dtype,
                numel.saturating_mul(dtype.size_bytes()),
                raw.len()
            )));
        }
        return NDArray::from_le_bytes(shape, dtype, raw).map_err(Error::from);
    }
    let arr = match dtype {
        DType::F32 => {
            if t.float_data.len() != numel {
                return Err(count_err(t.float_data.len(), "float_data"));
            }
            NDArray::from_vec(shape, t.float_data.clone())
        }
        DType::I64 => {
            if t.int64_data.len() != numel {
                return Err(count_err(t.int64_data.len(), "int64_data"));
            }
            NDArray::from_vec(shape, t.int64_data.clone())
        }
        DType::F64 => {
            if t.double_data.len() != numel {
                return Err(count_err(t.double_data.len(), "double_data"));
            }
            NDArray::from_vec(shape, t.double_data.clone())
        }
        DType::U32 | DType::U64 => {
            if t.uint64_data.len() != numel {
                return Err(count_err(t.uint64_data.len(), "uint64_data"));
            }
            let v: Vec<i64> = t.uint64_data.iter().map(|&v| v as i64).collect();
            NDArray::from_vec(shape, v).map(|a| a.cast(dtype))
        }
        DType::F16 | DType::BF16 => {
            if t.int32_data.len() != numel {
                return Err(count_err(t.int32_data.len(), "int32_data"));
            }
            let bits: Vec<u8> = t
                .int32_data
                .iter()
                .flat_map(|&v| (v as u16).to_le_bytes())
                .collect();
            NDArray::from_le_bytes(shape, dtype, &bits)
        }
        DType::I8 | DType::U8 | DType::I16 | DType::U16 | DType::I32 | DType::Bool => {
            if t.int32_data.len() != numel {
                return Err(count_err(t.int32_data.len(), "int32_data"));
            }
            let v: Vec<i64> = t.int32_data.iter().map(|&v| v as i64).collect();
            NDArray::from_vec(shape, v).map(|a| a.cast(dtype))
        }
    };
    arr.map_err(Error::from)
}

/// A `TensorProto` named `name` holding `value` as raw little-endian data.
pub fn tensor_to_proto(name: &str, value: &NDArray) -> TensorProto {
    TensorProto {
        dims: value.shape().iter().map(|&d| d as i64).collect(),
        data_type: Some(dtype_to_onnx(value.dtype())),
        name: Some(name.to_string()),
        raw_data: Some(value.to_le_bytes()),
        ..TensorProto::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_and_typed_data_round_trip() {
        let a = NDArray::from_vec([2, 2], vec![1.0f32, -2.0, 3.5, 0.0]).unwrap();
        let p = tensor_to_proto("a", &a);
        assert_eq!(tensor_from_proto(&p, "a").unwrap(), a);
        let typed = TensorProto {
            dims: vec![3],
            data_type: Some(data_type::INT32),
            int32_data: vec![1, -2, 3],
            ..TensorProto::default()
        };
        let t = tensor_from_proto(&typed, "t").unwrap();
        assert_eq!(t.to_vec::<i32>().unwrap(), vec![1, -2, 3]);
        let bools = TensorProto {
            dims: vec![2],
            data_type: Some(data_type::BOOL),
            int32_data: vec![1, 0],
            ..TensorProto::default()
        };
        let b = tensor_from_proto(&bools, "b").unwrap();
        assert_eq!(b.to_vec::<bool>().unwrap(), vec![true, false]);
    }

    #[test]
    fn bad_tensors_are_errors() {
        let mut p = tensor_to_proto("a", &NDArray::zeros([4], DType::F32));
        p.dims = vec![5];
        let e = tensor_from_proto(&p, "a").unwrap_err().to_string();
        assert!(e.contains("need 20 bytes of raw_data, got 16"), "{e}");
        p.dims = vec![-1];
        assert!(tensor_from_proto(&p, "a").is_err());
        p.dims = vec![i64::MAX, i64::MAX];
        assert!(tensor_from_proto(&p, "a").is_err());
        p.data_type = Some(data_type::COMPLEX64);
        let e = tensor_from_proto(&p, "a").unwrap_err().to_string();
        assert!(e.contains("COMPLEX64"), "{e}");
    }
}
