//! TVM's binary tensor and params formats (`SaveDLTensor`, `SaveParams`; see
//! apache/tvm `include/tvm/runtime/ndarray.h` and `src/runtime/file_utils.cc`), so params saved by TVM load in kiln and the other way round.
//!
//! Layout, little-endian throughout. One tensor:
//!
//! ```text
//! u64 magic = 0xDD5E40F096B4A13F, u64 reserved,
//! i32 device_type = 1 (CPU), i32 device_id, i32 ndim,
//! u8 code, u8 bits, u16 lanes = 1, i64 shape[ndim],
//! i64 data_byte_size = (bits + 7) / 8 * numel, u8 data[data_byte_size]
//! ```
//!
//! A params dict: `u64 magic = 0xF7E58D4F05049CB7, u64 reserved`, the names (`u64 count`,
//! then per name `u64 len` and its bytes), `u64 count` again (must agree), then that many
//! tensors in the order of the names.
//!
//! Reading trusts nothing: every field is checked where it is read, and an error names the
//! field, what is wrong with it and its byte offset. Sizes are checked against the bytes
//! that remain before anything is allocated, so a lying count or size cannot make the
//! reader allocate more than the input's own length. Like TVM, the reader ignores the
//! `reserved` words and the device id; unlike TVM, it also refuses trailing bytes.
//!
//! Booleans: Relay-era TVM (the format kiln follows) stores `bool` as DLPack `uint1`
//! (code 1, 1 bit, one byte per element); TVM 0.20 and later store it as DLPack `kDLBool`
//! (code 6, 8 bits). Both load as [`DType::Bool`]; [`BoolEncoding`] picks which one saving
//! writes. Modern TVM reads `uint1` back as `uint1`, not `bool`.

use std::collections::BTreeMap;

use kiln_ir::ty::MAX_ELEMENTS;
use kiln_ir::{DType, NDArray};

use crate::error::{Error, Result};

/// Magic number that starts every saved tensor (`kTVMNDArrayMagic`).
pub const NDARRAY_MAGIC: u64 = 0xDD5E_40F0_96B4_A13F;
/// Magic number that starts a params dict (`kTVMNDArrayListMagic`).
pub const NDARRAY_LIST_MAGIC: u64 = 0xF7E5_8D4F_0504_9CB7;
/// The highest tensor rank the reader accepts (the graph IR's own limit).
pub const MAX_NDIM: usize = 64;

/// DLPack device type of the CPU, the only device a saved tensor may name.
const DL_CPU: i32 = 1;
/// DLPack type code of `kDLBool` (newer DLPack; TVM >= 0.20 writes bool with it).
const DL_BOOL: u8 = 6;

/// How saving writes a `bool` tensor's DLPack dtype. Loading accepts both.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum BoolEncoding {
    /// DLPack `uint1` (code 1, 1 bit): what Relay-era TVM (v0.13 and before) writes and
    /// reads as `bool`. The default, since kiln follows the Relay-era formats.
    #[default]
    Uint1,
    /// DLPack `kDLBool` (code 6, 8 bits): what TVM 0.20 and later write.
    DlBool,
}

/// The bytes of a params dict in TVM's format, `bool` written as Relay-era `uint1`.
/// Names are written in the map's (sorted) order.
pub fn save_params(params: &BTreeMap<String, NDArray>) -> Vec<u8> {
    save_params_with(params, BoolEncoding::default())
}

/// [`save_params`] with a choice of how `bool` tensors are tagged.
pub fn save_params_with(params: &BTreeMap<String, NDArray>, bools: BoolEncoding) -> Vec<u8> {
    let data_bytes: usize = params
        .values()
        .map(|a| a.numel() * a.dtype().size_bytes())
        .sum();
    let mut out = Vec::with_capacity(32 + data_bytes + params.len() * 128);
    out.extend(NDARRAY_LIST_MAGIC.to_le_bytes());
    out.extend(0u64.to_le_bytes());
    out.extend((params.len() as u64).to_le_bytes());
    for name in params.keys() {
        out.extend((name.len() as u64).to_le_bytes());
        out.extend(name.as_bytes());
    }
    out.extend((params.len() as u64).to_le_bytes());
    for array in params.values() {
        write_tensor(&mut out, array, bools);
    }
    out
}

/// Reads a params dict in TVM's format (either `bool` encoding).
pub fn load_params(bytes: &[u8]) -> Result<BTreeMap<String, NDArray>> {
    let mut r = Reader::new(bytes);
    let magic = r.u64("params magic")?;
    if magic != NDARRAY_LIST_MAGIC {
        let hint = if magic == NDARRAY_MAGIC {
            " (this is a single tensor; read it with load_ndarray)"
        } else {
            ""
        };
        return Err(Error::params(
            0,
            format!(
                "bad params magic 0x{magic:016X}, expected 0x{NDARRAY_LIST_MAGIC:016X}: \
                 not a TVM params file{hint}"
            ),
        ));
    }
    r.u64("reserved word")?;

    let count_at = r.pos;
    let count = r.u64("name count")?;
    // Every name takes at least its 8-byte length, so the count cannot exceed this.
    if count > (r.remaining() / 8) as u64 {
        return Err(Error::params(
            count_at,
            format!(
                "name count {count} cannot fit in the {} bytes that remain \
                 (each name needs at least 8)",
                r.remaining()
            ),
        ));
    }
    let mut names: Vec<String> = Vec::with_capacity(count as usize);
    let mut seen = std::collections::BTreeSet::new();
    for i in 0..count {
        let at = r.pos;
        let len = r.u64("name length")?;
        let len = r.check_len(at, len, &format!("name {i}"))?;
        let raw = r.take(len, &format!("name {i}"))?;
        let name = std::str::from_utf8(raw).map_err(|e| {
            Error::params(
                at + 8,
                format!(
                    "name {i} is not valid UTF-8 ({e}): {:?}",
                    raw.escape_ascii()
                ),
            )
        })?;
        if !seen.insert(name) {
            return Err(Error::params(
                at,
                format!("name {i} `{name}` appears twice"),
            ));
        }
        names.push(name.to_owned());
    }

    let tensors_at = r.pos;
    let tensor_count = r.u64("tensor count")?;
    if tensor_count != count {
        return Err(Error::params(
            tensors_at,
            format!("tensor count {tensor_count} disagrees with the {count} names before it"),
        ));
    }

    let mut params = BTreeMap::new();
    for (i, name) in names.into_iter().enumerate() {
        let array = read_tensor(&mut r).map_err(|e| in_tensor(e, i, &name))?;
        params.insert(name, array);
    }
    r.finish("after the last tensor")?;
    Ok(params)
}

/// The bytes of one tensor in TVM's format (`SaveDLTensor`), `bool` as `uint1`.
pub fn save_ndarray(array: &NDArray) -> Vec<u8> {
    save_ndarray_with(array, BoolEncoding::default())
}

/// [`save_ndarray`] with a choice of how a `bool` tensor is tagged.
pub fn save_ndarray_with(array: &NDArray, bools: BoolEncoding) -> Vec<u8> {
    let mut out = Vec::new();
    write_tensor(&mut out, array, bools);
    out
}

/// Reads one tensor in TVM's format; the input must hold exactly one tensor.
pub fn load_ndarray(bytes: &[u8]) -> Result<NDArray> {
    let mut r = Reader::new(bytes);
    let array = read_tensor(&mut r)?;
    r.finish("after the tensor")?;
    Ok(array)
}

fn write_tensor(out: &mut Vec<u8>, array: &NDArray, bools: BoolEncoding) {
    let dtype = array.dtype();
    let (code, bits) = match (dtype, bools) {
        (DType::Bool, BoolEncoding::DlBool) => (DL_BOOL, 8),
        _ => (dtype.dl_code(), dtype.bits()),
    };
    let data = array.to_le_bytes();
    out.reserve(48 + 8 * array.rank() + data.len());
    out.extend(NDARRAY_MAGIC.to_le_bytes());
    out.extend(0u64.to_le_bytes());
    out.extend(DL_CPU.to_le_bytes());
    out.extend(0i32.to_le_bytes());
    out.extend((array.rank() as i32).to_le_bytes());
    out.extend([code, bits]);
    out.extend(1u16.to_le_bytes());
    for &d in array.shape() {
        // A dimension above i64::MAX can only occur in an empty tensor; it is clamped.
        out.extend(i64::try_from(d).unwrap_or(i64::MAX).to_le_bytes());
    }
    out.extend((data.len() as i64).to_le_bytes());
    out.extend(data);
}

fn read_tensor(r: &mut Reader<'_>) -> Result<NDArray> {
    let start = r.pos;
    let magic = r.u64("tensor magic")?;
    if magic != NDARRAY_MAGIC {
        let hint = if magic == NDARRAY_LIST_MAGIC {
            " (this is a params dict; read it with load_params)"
        } else {
            ""
        };
        return Err(Error::params(
            start,
            format!("bad tensor magic 0x{magic:016X}, expected 0x{NDARRAY_MAGIC:016X}{hint}"),
        ));
    }
    r.u64("reserved word")?;

    let at = r.pos;
    let device_type = r.i32("device type")?;
    if device_type != DL_CPU {
        return Err(Error::params(
            at,
            format!(
                "device type {device_type}, expected {DL_CPU} (CPU): saved tensors are CPU tensors"
            ),
        ));
    }
    r.i32("device id")?;

    let at = r.pos;
    let ndim = r.i32("ndim")?;
    let ndim = match usize::try_from(ndim) {
        Ok(n) if n <= MAX_NDIM => n,
        _ => {
            return Err(Error::params(
                at,
                format!("ndim {ndim} is outside 0..={MAX_NDIM}"),
            ));
        }
    };

    let at = r.pos;
    let code = r.u8("dtype code")?;
    let bits = r.u8("dtype bits")?;
    let lanes = r.u16("dtype lanes")?;
    let dtype = resolve_dtype(at, code, bits, lanes)?;

    let at = r.pos;
    let raw = r.take(ndim * 8, &format!("shape of {ndim} dimensions"))?;
    let mut shape = Vec::with_capacity(ndim);
    // Product of the non-zero dimensions: bounded even for empty tensors, so that strides
    // and byte sizes computed from this shape later cannot overflow.
    let mut nonzero_numel: usize = 1;
    for (i, chunk) in raw.chunks_exact(8).enumerate() {
        let d = i64::from_le_bytes(chunk.try_into().expect("8-byte chunk"));
        let dim_at = at + 8 * i;
        let d = usize::try_from(d)
            .map_err(|_| Error::params(dim_at, format!("dimension {i} is negative ({d})")))?;
        if d != 0 {
            nonzero_numel = nonzero_numel
                .checked_mul(d)
                .filter(|&n| n <= MAX_ELEMENTS)
                .ok_or_else(|| {
                    Error::params(
                        dim_at,
                        format!(
                            "shape {shape:?} x {d} has more than {MAX_ELEMENTS} elements \
                             (the most a kiln tensor may have)"
                        ),
                    )
                })?;
        }
        shape.push(d);
    }
    let numel = if shape.contains(&0) { 0 } else { nonzero_numel };
    // The format's size formula, (bits + 7) / 8 bytes per element.
    let expected = numel * (usize::from(bits).div_ceil(8));
    debug_assert_eq!(expected, numel * dtype.size_bytes());

    let at = r.pos;
    let size = r.i64("data byte size")?;
    if usize::try_from(size).ok() != Some(expected) {
        return Err(Error::params(
            at,
            format!(
                "data byte size {size} disagrees with shape {shape:?} of {dtype} \
                 ({expected} bytes)"
            ),
        ));
    }
    let data = r.take(expected, &format!("{expected} data bytes"))?;
    NDArray::from_le_bytes(shape, dtype, data)
        .map_err(|e| Error::Internal(format!("checked tensor at byte {start} did not build: {e}")))
}

/// The kiln dtype of a DLPack `(code, bits, lanes)` read at `at`.
fn resolve_dtype(at: usize, code: u8, bits: u8, lanes: u16) -> Result<DType> {
    if lanes == 0 || bits == 0 {
        return Err(Error::params(
            at,
            format!("dtype (code {code}, {bits} bits, {lanes} lanes) has zero bits or lanes"),
        ));
    }
    if lanes != 1 {
        return Err(Error::Unsupported(format!(
            "dtype at byte {at} has {lanes} lanes (code {code}, {bits} bits); \
             kiln handles only scalar element types (lanes = 1)"
        )));
    }
    if code == DL_BOOL && bits == 8 {
        return Ok(DType::Bool);
    }
    if let Some(dtype) = DType::from_dl(code, bits) {
        return Ok(dtype);
    }
    const KINDS: [&str; 7] = [
        "int", "uint", "float", "handle", "bfloat", "complex", "bool",
    ];
    // DLPack 1.1 defines codes up to 17 (the float8/float6/float4 family).
    const LAST_DLPACK_CODE: u8 = 17;
    let supported = "kiln supports float64, float32, float16, bfloat16, int8, int16, int32, \
                     int64, uint8, uint16, uint32, uint64 and bool";
    match KINDS.get(usize::from(code)) {
        Some(kind) => Err(Error::Unsupported(format!(
            "dtype {kind}{bits} (DLPack code {code}) at byte {at}; {supported}"
        ))),
        None if code <= LAST_DLPACK_CODE => Err(Error::Unsupported(format!(
            "DLPack dtype code {code} ({bits} bits) at byte {at}; {supported}"
        ))),
        None => Err(Error::params(
            at,
            format!("unknown DLPack dtype code {code} ({bits} bits); {supported}"),
        )),
    }
}

/// Prefixes an error from reading tensor `i` with the tensor's index and name.
fn in_tensor(e: Error, i: usize, name: &str) -> Error {
    match e {
        Error::InvalidParams { offset, message } => Error::InvalidParams {
            offset,
            message: format!("tensor {i} `{name}`: {message}"),
        },
        Error::Unsupported(message) => {
            Error::Unsupported(format!("tensor {i} `{name}`: {message}"))
        }
        other => other,
    }
}

/// A cursor over untrusted bytes; every read is bounds-checked and names its field.
struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Reader { bytes, pos: 0 }
    }

    fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    /// The next `n` bytes, or a truncation error naming `what`.
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(Error::params(
                self.pos,
                format!(
                    "truncated: {what} needs {n} bytes but only {} remain",
                    self.remaining()
                ),
            ));
        }
        let out = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        Ok(self
            .take(N, what)?
            .try_into()
            .expect("take returns N bytes"))
    }

    fn u8(&mut self, what: &str) -> Result<u8> {
        Ok(self.array::<1>(what)?[0])
    }

    fn u16(&mut self, what: &str) -> Result<u16> {
        self.array(what).map(u16::from_le_bytes)
    }

    fn i32(&mut self, what: &str) -> Result<i32> {
        self.array(what).map(i32::from_le_bytes)
    }

    fn u64(&mut self, what: &str) -> Result<u64> {
        self.array(what).map(u64::from_le_bytes)
    }

    fn i64(&mut self, what: &str) -> Result<i64> {
        self.array(what).map(i64::from_le_bytes)
    }

    /// A length field read at `at`, checked against the bytes that remain.
    fn check_len(&self, at: usize, len: u64, what: &str) -> Result<usize> {
        match usize::try_from(len) {
            Ok(n) if n <= self.remaining() => Ok(n),
            _ => Err(Error::params(
                at,
                format!(
                    "{what} claims {len} bytes but only {} remain",
                    self.remaining()
                ),
            )),
        }
    }

    /// Refuses bytes left over after the last field.
    fn finish(&self, after: &str) -> Result<()> {
        match self.remaining() {
            0 => Ok(()),
            n => Err(Error::params(
                self.pos,
                format!("{n} trailing bytes {after}"),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> BTreeMap<String, NDArray> {
        let mut p = BTreeMap::new();
        p.insert(
            "w".to_string(),
            NDArray::from_vec([2, 2], vec![1.0f32, -2.0, 0.5, 8.0]).unwrap(),
        );
        p.insert("s".to_string(), NDArray::scalar(7i64));
        p.insert(
            "m".to_string(),
            NDArray::from_vec([3], vec![true, false, true]).unwrap(),
        );
        p
    }

    fn invalid_at(e: Error) -> (usize, String) {
        match e {
            Error::InvalidParams { offset, message } => (offset, message),
            other => panic!("expected InvalidParams, got {other:?}"),
        }
    }

    #[test]
    fn round_trips() {
        let p = sample();
        for enc in [BoolEncoding::Uint1, BoolEncoding::DlBool] {
            let bytes = save_params_with(&p, enc);
            assert_eq!(load_params(&bytes).unwrap(), p);
            assert_eq!(save_params_with(&load_params(&bytes).unwrap(), enc), bytes);
        }
        let t = NDArray::from_vec([1, 2, 1], vec![3i8, -4]).unwrap();
        assert_eq!(load_ndarray(&save_ndarray(&t)).unwrap(), t);
    }

    #[test]
    fn hand_assembled_tensor_matches_the_reference_layout() {
        // TVM's `SaveDLTensor` layout, written out field by field.
        let mut want = Vec::new();
        want.extend(0xDD5E40F096B4A13Fu64.to_le_bytes());
        want.extend(0u64.to_le_bytes());
        want.extend(1i32.to_le_bytes());
        want.extend(0i32.to_le_bytes());
        want.extend(2i32.to_le_bytes());
        want.extend([2u8, 32]);
        want.extend(1u16.to_le_bytes());
        want.extend(1i64.to_le_bytes());
        want.extend(2i64.to_le_bytes());
        want.extend(8i64.to_le_bytes());
        want.extend(1.5f32.to_le_bytes());
        want.extend((-2.0f32).to_le_bytes());
        let t = NDArray::from_vec([1, 2], vec![1.5f32, -2.0]).unwrap();
        assert_eq!(save_ndarray(&t), want);

        let mut list = Vec::new();
        list.extend(0xF7E58D4F05049CB7u64.to_le_bytes());
        list.extend(0u64.to_le_bytes());
        list.extend(1u64.to_le_bytes());
        list.extend(1u64.to_le_bytes());
        list.extend(b"x");
        list.extend(1u64.to_le_bytes());
        list.extend(&want);
        let mut p = BTreeMap::new();
        p.insert("x".to_string(), t);
        assert_eq!(save_params(&p), list);
        assert_eq!(load_params(&list).unwrap(), p);
    }

    #[test]
    fn bool_is_uint1_by_default_and_loads_from_both_encodings() {
        let t = NDArray::from_vec([2], vec![true, false]).unwrap();
        let old = save_ndarray(&t);
        let new = save_ndarray_with(&t, BoolEncoding::DlBool);
        // dtype sits after magic, reserved, device and ndim: bytes 28..32.
        assert_eq!(&old[28..32], &[1, 1, 1, 0]);
        assert_eq!(&new[28..32], &[6, 8, 1, 0]);
        assert_eq!(load_ndarray(&old).unwrap(), t);
        assert_eq!(load_ndarray(&new).unwrap(), t);
    }

    #[test]
    fn bad_magics_name_the_other_format() {
        let t = save_ndarray(&NDArray::scalar(1.0f32));
        let (at, msg) = invalid_at(load_params(&t).unwrap_err());
        assert_eq!(at, 0);
        assert!(msg.contains("load_ndarray"), "{msg}");
        let p = save_params(&sample());
        let (at, msg) = invalid_at(load_ndarray(&p).unwrap_err());
        assert_eq!(at, 0);
        assert!(msg.contains("load_params"), "{msg}");
        let (_, msg) = invalid_at(load_params(b"not params at all").unwrap_err());
        assert!(msg.contains("bad params magic"), "{msg}");
    }

    #[test]
    fn lying_counts_and_sizes_are_refused_before_allocating() {
        let mut b = save_params(&sample());
        b[16..24].copy_from_slice(&u64::MAX.to_le_bytes());
        let (at, msg) = invalid_at(load_params(&b).unwrap_err());
        assert_eq!(at, 16);
        assert!(msg.contains("name count"), "{msg}");

        let mut b = save_params(&sample());
        b[24..32].copy_from_slice(&(u64::MAX - 3).to_le_bytes());
        let (at, msg) = invalid_at(load_params(&b).unwrap_err());
        assert_eq!(at, 24);
        assert!(msg.contains("name 0 claims"), "{msg}");

        let t = NDArray::from_vec([4], vec![1i32, 2, 3, 4]).unwrap();
        let good = save_ndarray(&t);
        // ndim at 24, dtype at 28, shape at 32, size at 40.
        let mut b = good.clone();
        b[24..28].copy_from_slice(&1_000_000i32.to_le_bytes());
        assert!(invalid_at(load_ndarray(&b).unwrap_err()).1.contains("ndim"));
        let mut b = good.clone();
        b[24..28].copy_from_slice(&(-1i32).to_le_bytes());
        assert!(
            invalid_at(load_ndarray(&b).unwrap_err())
                .1
                .contains("ndim -1")
        );
        let mut b = good.clone();
        b[32..40].copy_from_slice(&(-4i64).to_le_bytes());
        let (at, msg) = invalid_at(load_ndarray(&b).unwrap_err());
        assert_eq!(at, 32);
        assert!(msg.contains("negative"), "{msg}");
        let mut b = good.clone();
        b[32..40].copy_from_slice(&(1i64 << 60).to_le_bytes());
        let (at, msg) = invalid_at(load_ndarray(&b).unwrap_err());
        assert_eq!(at, 32);
        assert!(msg.contains("more than"), "{msg}");
        let mut b = good.clone();
        b[40..48].copy_from_slice(&i64::MAX.to_le_bytes());
        let (at, msg) = invalid_at(load_ndarray(&b).unwrap_err());
        assert_eq!(at, 40);
        assert!(msg.contains("disagrees"), "{msg}");
    }

    #[test]
    fn dtypes_kiln_lacks_are_unsupported_and_unknown_codes_invalid() {
        let good = save_ndarray(&NDArray::from_vec([1], vec![0i64]).unwrap());
        let with_dtype = |code: u8, bits: u8, lanes: u16| {
            let mut b = good.clone();
            b[28] = code;
            b[29] = bits;
            b[30..32].copy_from_slice(&lanes.to_le_bytes());
            load_ndarray(&b).unwrap_err()
        };
        let e = with_dtype(5, 64, 1).to_string();
        assert!(e.contains("complex64") && e.contains("byte 28"), "{e}");
        let e = with_dtype(2, 8, 1).to_string();
        assert!(e.contains("float8"), "{e}");
        let e = with_dtype(2, 64, 4).to_string();
        assert!(e.contains("4 lanes"), "{e}");
        let (at, msg) = invalid_at(with_dtype(99, 8, 1));
        assert_eq!(at, 28);
        assert!(msg.contains("unknown DLPack dtype code 99"), "{msg}");
        let (_, msg) = invalid_at(with_dtype(0, 64, 0));
        assert!(msg.contains("zero bits or lanes"), "{msg}");
    }

    #[test]
    fn count_mismatch_duplicates_device_and_trailing_bytes() {
        let mut b = save_params(&sample());
        // Names "m", "s", "w": 24 + 3 * 9 = 51 is where the tensor count sits.
        b[51..59].copy_from_slice(&2u64.to_le_bytes());
        let (at, msg) = invalid_at(load_params(&b).unwrap_err());
        assert_eq!(at, 51);
        assert!(
            msg.contains("tensor count 2 disagrees with the 3 names"),
            "{msg}"
        );

        let mut b = save_params(&sample());
        b[50] = b'm'; // the third name "w" (length at 42) becomes "m"
        let (at, msg) = invalid_at(load_params(&b).unwrap_err());
        assert_eq!(at, 42);
        assert!(msg.contains("appears twice"), "{msg}");

        let mut b = save_ndarray(&NDArray::scalar(1u8));
        b[16..20].copy_from_slice(&2i32.to_le_bytes());
        let (at, msg) = invalid_at(load_ndarray(&b).unwrap_err());
        assert_eq!(at, 16);
        assert!(msg.contains("device type 2"), "{msg}");

        let mut b = save_params(&sample());
        let len = b.len();
        b.extend([0, 0, 0]);
        let (at, msg) = invalid_at(load_params(&b).unwrap_err());
        assert_eq!(at, len);
        assert!(msg.contains("3 trailing bytes"), "{msg}");
    }

    #[test]
    fn non_utf8_names_are_refused() {
        let mut b = save_params(&sample());
        b[32] = 0xFF;
        let (at, msg) = invalid_at(load_params(&b).unwrap_err());
        assert_eq!(at, 32);
        assert!(msg.contains("not valid UTF-8"), "{msg}");
    }

    #[test]
    fn errors_inside_a_tensor_name_it() {
        let b = save_params(&sample());
        let cut = &b[..b.len() - 1];
        let (_, msg) = invalid_at(load_params(cut).unwrap_err());
        assert!(msg.starts_with("tensor 2 `w`: truncated"), "{msg}");
    }
}
