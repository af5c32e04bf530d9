//! `.npy` files (numpy's format, versions 1.0 to 3.0): C-ordered, little-endian arrays
//! of kiln's dtypes. Anything else is refused with an error that says why.

use std::path::Path;

use super::NDArray;
use crate::dtype::DType;
use crate::error::{Error, Result};

const MAGIC: &[u8] = b"\x93NUMPY";

fn descr(dtype: DType) -> &'static str {
    match dtype {
        DType::F32 => "<f4",
        DType::F16 => "<f2",
        DType::I8 => "|i1",
        DType::U8 => "|u1",
        DType::I32 => "<i4",
        DType::I64 => "<i8",
        DType::Bool => "|b1",
    }
}

fn dtype_of_descr(d: &str) -> Option<DType> {
    Some(match d {
        "<f4" => DType::F32,
        "<f2" => DType::F16,
        "|i1" | "<i1" | "i1" => DType::I8,
        "|u1" | "<u1" | "u1" => DType::U8,
        "<i4" => DType::I32,
        "<i8" => DType::I64,
        "|b1" | "<b1" | "b1" => DType::Bool,
        _ => return None,
    })
}

impl NDArray {
    /// The bytes of a version 1.0 `.npy` file holding this tensor.
    pub fn to_npy_bytes(&self) -> Vec<u8> {
        let dims: Vec<String> = self.shape().iter().map(|d| d.to_string()).collect();
        let shape = match dims.len() {
            1 => format!("({},)", dims[0]),
            _ => format!("({})", dims.join(", ")),
        };
        let mut header = format!(
            "{{'descr': '{}', 'fortran_order': False, 'shape': {shape}, }}",
            descr(self.dtype())
        );
        // Magic (6) + version (2) + length (2) + header + '\n' is a multiple of 64.
        let unpadded = MAGIC.len() + 4 + header.len() + 1;
        header.push_str(&" ".repeat((64 - unpadded % 64) % 64));
        header.push('\n');
        let mut out = Vec::with_capacity(10 + header.len() + self.numel() * 8);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&[1, 0]);
        out.extend_from_slice(&(header.len() as u16).to_le_bytes());
        out.extend_from_slice(header.as_bytes());
        out.extend_from_slice(&self.to_le_bytes());
        out
    }

    /// Parses the bytes of a `.npy` file; `what` names the source in errors.
    pub fn from_npy_bytes(bytes: &[u8], what: &Path) -> Result<NDArray> {
        let bad = |message: String| Error::InvalidFile {
            path: what.to_path_buf(),
            message,
        };
        if bytes.len() < 10 || &bytes[..6] != MAGIC {
            return Err(bad("not a .npy file (missing the \\x93NUMPY magic)".into()));
        }
        let (header_len, start) = match bytes[6] {
            1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
            2 | 3 if bytes.len() >= 12 => (
                u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
                12,
            ),
            v => return Err(bad(format!("unsupported .npy version {v}"))),
        };
        let header = bytes
            .get(start..start + header_len)
            .ok_or_else(|| bad("truncated .npy header".into()))?;
        let header = std::str::from_utf8(header).map_err(|_| bad("header is not text".into()))?;
        let field = |key: &str| -> Result<&str> {
            let pat = format!("'{key}':");
            let at = header
                .find(&pat)
                .ok_or_else(|| bad(format!("header has no '{key}' field")))?;
            Ok(header[at + pat.len()..].trim_start())
        };
        let descr_rest = field("descr")?;
        let descr = descr_rest
            .strip_prefix('\'')
            .and_then(|r| r.split('\'').next())
            .ok_or_else(|| bad("malformed 'descr'".into()))?;
        let dtype = dtype_of_descr(descr).ok_or_else(|| {
            bad(format!(
                "dtype '{descr}' is not supported (kiln reads <f4, <f2, i1, u1, <i4, <i8, b1)"
            ))
        })?;
        if field("fortran_order")?.starts_with("True") {
            return Err(bad(
                "Fortran-ordered arrays are not supported; save with C order".into(),
            ));
        }
        let shape_rest = field("shape")?;
        let close = shape_rest
            .find(')')
            .ok_or_else(|| bad("malformed 'shape'".into()))?;
        let shape = shape_rest[..close]
            .trim_start_matches('(')
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| {
                s.parse::<usize>()
                    .map_err(|_| bad(format!("bad dimension '{s}' in shape")))
            })
            .collect::<Result<Vec<usize>>>()?;
        let data = &bytes[start + header_len..];
        let n: usize = shape.iter().product();
        let want = n * dtype.size_bytes();
        if data.len() != want {
            return Err(bad(format!(
                "shape {shape:?} of {dtype} needs {want} data bytes, file has {}",
                data.len()
            )));
        }
        NDArray::from_le_bytes(shape, dtype, data)
    }

    /// Reads a `.npy` file.
    pub fn read_npy(path: impl AsRef<Path>) -> Result<NDArray> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|source| Error::Io {
            path: path.to_path_buf(),
            source,
        })?;
        NDArray::from_npy_bytes(&bytes, path)
    }

    /// Writes a `.npy` file.
    pub fn write_npy(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        std::fs::write(path, self.to_npy_bytes()).map_err(|source| Error::Io {
            path: path.to_path_buf(),
            source,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_dtype_and_rank() {
        for d in DType::ALL {
            for shape in [vec![], vec![5], vec![2, 3, 4]] {
                let a = NDArray::random(shape, d, 5);
                let bytes = a.to_npy_bytes();
                assert_eq!((bytes.len() - a.to_le_bytes().len()) % 64, 0);
                assert_eq!(
                    NDArray::from_npy_bytes(&bytes, Path::new("x.npy")).unwrap(),
                    a
                );
            }
        }
    }

    #[test]
    fn reads_numpy_written_header() {
        // The layout numpy writes for np.arange(3, dtype='<i4'): a dict padded with
        // spaces and a newline so the data starts at byte 128.
        let dict = "{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }";
        let header = format!("{dict:<117}\n");
        let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
        bytes.extend((header.len() as u16).to_le_bytes());
        bytes.extend(header.as_bytes());
        assert_eq!(bytes.len(), 128);
        bytes.extend([0, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0]);
        let a = NDArray::from_npy_bytes(&bytes, Path::new("a.npy")).unwrap();
        assert_eq!(a.shape(), &[3]);
        assert_eq!(a.to_vec::<i32>().unwrap(), vec![0, 1, 2]);
    }

    #[test]
    fn bad_files_are_clear_errors() {
        let p = Path::new("bad.npy");
        let e = NDArray::from_npy_bytes(b"hello world", p)
            .unwrap_err()
            .to_string();
        assert!(e.contains("bad.npy") && e.contains("magic"), "{e}");
        let mut f64_file = NDArray::zeros([2], DType::F32).to_npy_bytes();
        let at = f64_file.windows(3).position(|w| w == b"<f4").unwrap();
        f64_file[at + 2] = b'8';
        let e = NDArray::from_npy_bytes(&f64_file, p)
            .unwrap_err()
            .to_string();
        assert!(e.contains("'<f8' is not supported"), "{e}");
        let mut short = NDArray::zeros([4], DType::F32).to_npy_bytes();
        short.truncate(short.len() - 3);
        let e = NDArray::from_npy_bytes(&short, p).unwrap_err().to_string();
        assert!(e.contains("needs 16 data bytes"), "{e}");
        let e = NDArray::read_npy("/nonexistent/x.npy")
            .unwrap_err()
            .to_string();
        assert!(e.contains("/nonexistent/x.npy"), "{e}");
    }
}
