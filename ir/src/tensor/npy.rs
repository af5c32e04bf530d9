//! `.npy` files (numpy's format, versions 1.0 to 3.0): C-ordered, little-endian arrays
//! of kiln's dtypes. Anything else is refused with an error that says why. numpy has
//! no bfloat16: kiln writes it under the descr `bfloat16`, the name the `ml_dtypes`
//! package registers (numpy reads it back once `ml_dtypes` is imported).

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
        DType::F64 => "<f8",
        DType::BF16 => "bfloat16",
        DType::I16 => "<i2",
        DType::U16 => "<u2",
        DType::U32 => "<u4",
        DType::U64 => "<u8",
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
        "<f8" => DType::F64,
        "bfloat16" => DType::BF16,
        "<i2" => DType::I16,
        "<u2" => DType::U16,
        "<u4" => DType::U32,
        "<u8" => DType::U64,
        _ => return None,
    })
}

/// The fields of a `.npy` header.
struct Header {
    descr: String,
    fortran_order: bool,
    shape: Vec<usize>,
}

/// Parses the header, a Python dict literal with exactly the keys `'descr'` (a string),
/// `'fortran_order'` (`True` or `False`) and `'shape'` (a tuple of whole numbers), as
/// numpy's `read_array_header` does with `ast.literal_eval`: duplicate and unknown keys
/// are refused (numpy would keep the last duplicate; kiln does not guess).
fn parse_header(text: &str) -> std::result::Result<Header, String> {
    let mut p = HeaderParser {
        rest: text.trim_end_matches(['\n', ' ']),
    };
    p.expect('{')?;
    let (mut descr, mut fortran_order, mut shape) = (None, None, None);
    loop {
        if p.eat('}') {
            break;
        }
        let key = p.string()?;
        p.expect(':')?;
        let slot_taken = match key.as_str() {
            "descr" => descr.replace(p.string()?).is_some(),
            "fortran_order" => fortran_order.replace(p.boolean()?).is_some(),
            "shape" => shape.replace(p.tuple()?).is_some(),
            other => return Err(format!("unknown key '{other}'")),
        };
        if slot_taken {
            return Err(format!("key '{key}' appears twice"));
        }
        if !p.eat(',') {
            p.expect('}')?;
            break;
        }
    }
    if !p.rest.trim_start().is_empty() {
        return Err(format!("text after the dict: {:?}", p.rest.trim_start()));
    }
    let missing = |k: &str| format!("no '{k}' key");
    Ok(Header {
        descr: descr.ok_or_else(|| missing("descr"))?,
        fortran_order: fortran_order.ok_or_else(|| missing("fortran_order"))?,
        shape: shape.ok_or_else(|| missing("shape"))?,
    })
}

/// A cursor over the header text.
struct HeaderParser<'a> {
    rest: &'a str,
}

impl HeaderParser<'_> {
    /// Skips whitespace, then consumes `c` if it comes next.
    fn eat(&mut self, c: char) -> bool {
        self.rest = self.rest.trim_start();
        match self.rest.strip_prefix(c) {
            Some(r) => {
                self.rest = r;
                true
            }
            None => false,
        }
    }

    fn expect(&mut self, c: char) -> std::result::Result<(), String> {
        if self.eat(c) {
            Ok(())
        } else {
            Err(format!("expected '{c}' at {:?}", self.near()))
        }
    }

    fn near(&self) -> String {
        self.rest.trim_start().chars().take(16).collect()
    }

    /// A string literal in single or double quotes, without escapes.
    fn string(&mut self) -> std::result::Result<String, String> {
        self.rest = self.rest.trim_start();
        let quote = match self.rest.chars().next() {
            Some(q @ ('\'' | '"')) => q,
            _ => return Err(format!("expected a string at {:?}", self.near())),
        };
        let body = &self.rest[1..];
        let end = body
            .find(quote)
            .ok_or_else(|| "unterminated string".to_string())?;
        if body[..end].contains('\\') {
            return Err("escapes in strings are not supported".into());
        }
        self.rest = &body[end + 1..];
        Ok(body[..end].to_string())
    }

    fn boolean(&mut self) -> std::result::Result<bool, String> {
        self.rest = self.rest.trim_start();
        for (word, value) in [("True", true), ("False", false)] {
            if let Some(r) = self.rest.strip_prefix(word)
                && !r.starts_with(|c: char| c.is_alphanumeric() || c == '_')
            {
                self.rest = r;
                return Ok(value);
            }
        }
        Err(format!("expected True or False at {:?}", self.near()))
    }

    /// `()`, `(n,)` or `(n, m, ...)` with an optional trailing comma.
    fn tuple(&mut self) -> std::result::Result<Vec<usize>, String> {
        self.expect('(')?;
        let mut dims = vec![];
        loop {
            if self.eat(')') {
                break;
            }
            self.rest = self.rest.trim_start();
            let len = self
                .rest
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(self.rest.len());
            let d = self.rest[..len]
                .parse::<usize>()
                .map_err(|_| format!("bad dimension at {:?}", self.near()))?;
            self.rest = &self.rest[len..];
            dims.push(d);
            if !self.eat(',') {
                self.expect(')')?;
                if dims.len() == 1 {
                    return Err("a one-element shape needs a trailing comma: (n,)".into());
                }
                break;
            }
        }
        Ok(dims)
    }
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
        let Header {
            descr,
            fortran_order,
            shape,
        } = parse_header(header).map_err(|m| bad(format!("bad header: {m}")))?;
        let dtype = dtype_of_descr(&descr).ok_or_else(|| {
            bad(format!(
                "dtype '{descr}' is not supported (kiln reads <f8, <f4, <f2, bfloat16, i1, u1, <i2, <u2, <i4, <u4, <i8, <u8, b1)"
            ))
        })?;
        if fortran_order {
            return Err(bad(
                "Fortran-ordered arrays are not supported; save with C order".into(),
            ));
        }
        let data = &bytes[start + header_len..];
        let want = super::budget::checked_numel(&shape)
            .ok()
            .and_then(|n| n.checked_mul(dtype.size_bytes()));
        if want != Some(data.len()) {
            let want = want.map_or("more than 2^64".to_string(), |w| w.to_string());
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
        // complex64 (`<c8`), which kiln has no dtype for.
        let mut c64_file = NDArray::zeros([2], DType::F64).to_npy_bytes();
        let at = c64_file.windows(3).position(|w| w == b"<f8").unwrap();
        c64_file[at + 1] = b'c';
        let e = NDArray::from_npy_bytes(&c64_file, p)
            .unwrap_err()
            .to_string();
        assert!(e.contains("'<c8' is not supported"), "{e}");
        let mut short = NDArray::zeros([4], DType::F32).to_npy_bytes();
        short.truncate(short.len() - 3);
        let e = NDArray::from_npy_bytes(&short, p).unwrap_err().to_string();
        assert!(e.contains("needs 16 data bytes"), "{e}");
        let e = NDArray::read_npy("/nonexistent/x.npy")
            .unwrap_err()
            .to_string();
        assert!(e.contains("/nonexistent/x.npy"), "{e}");
    }

    /// A version 1.0 file with `dict` as its header and `data` after it.
    fn with_header(dict: &str, data: &[u8]) -> Vec<u8> {
        let header = format!("{dict}\n");
        let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
        bytes.extend((header.len() as u16).to_le_bytes());
        bytes.extend(header.as_bytes());
        bytes.extend(data);
        bytes
    }

    #[test]
    fn the_header_is_read_as_the_dict_literal_it_is() {
        let p = Path::new("h.npy");
        let read = |dict: &str, data: &[u8]| NDArray::from_npy_bytes(&with_header(dict, data), p);
        // Keys in any order, double quotes, no trailing comma: what numpy accepts.
        let a = read(
            r#"{"shape": (2,), "fortran_order": False, "descr": "|u1"}"#,
            &[7, 8],
        )
        .unwrap();
        assert_eq!(a.to_vec::<u8>().unwrap(), vec![7, 8]);
        let scalar = read(
            "{'descr': '|u1', 'fortran_order': False, 'shape': ()}",
            &[9],
        )
        .unwrap();
        assert_eq!(scalar.shape(), &[] as &[usize]);
        for (dict, why) in [
            (
                "{'descr': '<f4', 'descr': '|u1', 'fortran_order': False, 'shape': (1,)}",
                "'descr' appears twice",
            ),
            (
                "{'x': \"'descr': '|u1'\", 'descr': '<f4', 'fortran_order': False, 'shape': (1,)}",
                "unknown key 'x'",
            ),
            (
                "{'descr': '|u1', 'fortran_order': 0, 'shape': (1,)}",
                "expected True or False",
            ),
            (
                "{'descr': '|u1', 'fortran_order': Falsey, 'shape': (1,)}",
                "expected True or False",
            ),
            ("{'descr': '|u1', 'shape': (1,)}", "no 'fortran_order' key"),
            (
                "{'descr': '|u1', 'fortran_order': False, 'shape': (1)}",
                "trailing comma",
            ),
            (
                "{'descr': '|u1', 'fortran_order': False, 'shape': (-1,)}",
                "bad dimension",
            ),
            (
                "{'descr': '|u1', 'fortran_order': False, 'shape': (1,)} x",
                "text after the dict",
            ),
            (
                "{'descr': '|u1', 'fortran_order': False, 'shape': (1,",
                "bad dimension",
            ),
        ] {
            let e = read(dict, &[1]).unwrap_err().to_string();
            assert!(e.contains(why), "{dict}: {e}");
        }
        let e = read(
            "{'descr': '|u1', 'fortran_order': True, 'shape': (1,)}",
            &[1],
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("Fortran-ordered"), "{e}");
        // A shape whose byte count overflows is an error, not a wrapped product.
        let e = read(
            "{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904, 4611686018427387904)}",
            &[],
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("more than 2^64"), "{e}");
    }
}
