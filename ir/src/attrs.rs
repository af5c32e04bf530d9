//! Op attributes as they appear in the text form (`strides=[2, 2]`, `epsilon=2e-05f`,
//! `scale=False`, `dtype="int32"`): the generic [`AttrValue`], the [`AttrWriter`] ops
//! print through and the [`AttrReader`] they parse from, which names the op and the
//! attribute in every error and refuses attributes the op does not have.

use std::fmt;

use crate::dtype::DType;
use crate::error::{Error, Result};

/// An `f64` that compares, hashes and orders by its bits, so attribute structs can be
/// `Eq + Hash + Ord` (needed to hash-cons ops in an e-graph). `-0.0 != 0.0` here.
#[derive(Clone, Copy, Debug, Default)]
pub struct F64(pub f64);

impl PartialEq for F64 {
    fn eq(&self, other: &F64) -> bool {
        self.0.to_bits() == other.0.to_bits()
    }
}
impl Eq for F64 {}
impl std::hash::Hash for F64 {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.to_bits().hash(state)
    }
}
impl PartialOrd for F64 {
    fn partial_cmp(&self, other: &F64) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for F64 {
    fn cmp(&self, other: &F64) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// An attribute value in the text form.
#[derive(Clone, Debug, PartialEq)]
pub enum AttrValue {
    /// An integer (`axis=1`).
    Int(i64),
    /// A number with a fraction or exponent (`epsilon=1e-05f`).
    Float(f64),
    /// `True` or `False`.
    Bool(bool),
    /// A quoted string (`layout="NCHW"`).
    Str(String),
    /// A bracketed list (`strides=[1, 1]`).
    List(Vec<AttrValue>),
}

/// Formats a float the way Relay does: shortest round-trip digits, two-digit exponent
/// (`2e-05`, `1e+20`, `0.5`, `1`), with special values `inf`, `-inf`, `nan`.
pub fn fmt_float(x: f64) -> String {
    relay_float(x, x)
}

/// Formats `shortest` (whose `Display` gives the shortest digits that read back to the
/// same value in its own precision) with Relay's exponent rules; `x` is its value.
pub(crate) fn relay_float(x: f64, shortest: impl fmt::Display + fmt::LowerExp) -> String {
    if x.is_nan() {
        return "nan".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf".into() } else { "-inf".into() };
    }
    let s = if x != 0.0 && (x.abs() < 1e-4 || x.abs() >= 1e16) {
        format!("{shortest:e}")
    } else {
        format!("{shortest}")
    };
    match s.split_once('e') {
        Some((mantissa, exp)) => {
            let (sign, digits) = match exp.strip_prefix('-') {
                Some(d) => ('-', d),
                None => ('+', exp),
            };
            format!("{mantissa}e{sign}{digits:0>2}")
        }
        None => s,
    }
}

impl fmt::Display for AttrValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AttrValue::Int(i) => write!(f, "{i}"),
            AttrValue::Float(x) => write!(f, "{}f", fmt_float(*x)),
            AttrValue::Bool(true) => f.write_str("True"),
            AttrValue::Bool(false) => f.write_str("False"),
            AttrValue::Str(s) => write!(f, "{s:?}"),
            AttrValue::List(items) => {
                f.write_str("[")?;
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    v.fmt(f)?;
                }
                f.write_str("]")
            }
        }
    }
}

/// Collects the attributes an op prints, in the op's order.
#[derive(Default, Debug)]
pub struct AttrWriter {
    pairs: Vec<(String, AttrValue)>,
}

impl AttrWriter {
    /// A writer with no attributes yet.
    pub fn new() -> AttrWriter {
        AttrWriter::default()
    }

    /// Appends `name=v`.
    pub fn value(&mut self, name: &str, v: AttrValue) -> &mut Self {
        self.pairs.push((name.to_string(), v));
        self
    }

    /// Appends an integer attribute.
    pub fn int(&mut self, name: &str, v: i64) -> &mut Self {
        self.value(name, AttrValue::Int(v))
    }

    /// Appends a list of integers.
    pub fn ints(&mut self, name: &str, v: &[i64]) -> &mut Self {
        self.value(
            name,
            AttrValue::List(v.iter().map(|&i| AttrValue::Int(i)).collect()),
        )
    }

    /// Appends a list of non-negative integers (printed as integers).
    pub fn usizes(&mut self, name: &str, v: &[usize]) -> &mut Self {
        self.value(
            name,
            AttrValue::List(v.iter().map(|&i| AttrValue::Int(i as i64)).collect()),
        )
    }

    /// Appends a float attribute.
    pub fn float(&mut self, name: &str, v: f64) -> &mut Self {
        self.value(name, AttrValue::Float(v))
    }

    /// Appends a bool attribute.
    pub fn bool(&mut self, name: &str, v: bool) -> &mut Self {
        self.value(name, AttrValue::Bool(v))
    }

    /// Appends a string attribute.
    pub fn str(&mut self, name: &str, v: &str) -> &mut Self {
        self.value(name, AttrValue::Str(v.to_string()))
    }

    /// Appends a dtype, as its name in a string (`dtype="int64"`).
    pub fn dtype(&mut self, name: &str, v: DType) -> &mut Self {
        self.str(name, v.name())
    }

    /// The collected `(name, value)` pairs.
    pub fn into_pairs(self) -> Vec<(String, AttrValue)> {
        self.pairs
    }
}

/// Reads an op's attributes from parsed `name=value` pairs. Every getter returns
/// `Ok(None)` when the attribute is absent; [`AttrReader::finish`] rejects leftovers.
#[derive(Debug)]
pub struct AttrReader {
    op: String,
    pairs: Vec<(String, AttrValue)>,
}

impl AttrReader {
    /// A reader of `pairs`, the attributes of op `op` (named in errors).
    pub fn new(op: &str, pairs: Vec<(String, AttrValue)>) -> AttrReader {
        AttrReader {
            op: op.to_string(),
            pairs,
        }
    }

    /// The op these attributes belong to.
    pub fn op(&self) -> &str {
        &self.op
    }

    /// An error about attribute `name` of this op.
    pub fn error(&self, name: &str, message: impl fmt::Display) -> Error {
        Error::InvalidArgument(format!("attribute `{name}` of `{}`: {message}", self.op))
    }

    /// Removes and returns the raw value of `name`.
    pub fn take(&mut self, name: &str) -> Option<AttrValue> {
        let at = self.pairs.iter().position(|(n, _)| n == name)?;
        Some(self.pairs.remove(at).1)
    }

    /// An integer; any other kind of value is an error.
    pub fn int(&mut self, name: &str) -> Result<Option<i64>> {
        match self.take(name) {
            None => Ok(None),
            Some(AttrValue::Int(i)) => Ok(Some(i)),
            Some(v) => Err(self.error(name, format!("expected an integer, found `{v}`"))),
        }
    }

    /// A non-negative integer; a negative one is an error.
    pub fn usize(&mut self, name: &str) -> Result<Option<usize>> {
        match self.int(name)? {
            None => Ok(None),
            Some(i) if i >= 0 => Ok(Some(i as usize)),
            Some(i) => Err(self.error(name, format!("must not be negative, found {i}"))),
        }
    }

    /// A list of integers; a single integer is read as a list of one.
    pub fn ints(&mut self, name: &str) -> Result<Option<Vec<i64>>> {
        match self.take(name) {
            None => Ok(None),
            Some(AttrValue::List(items)) => items
                .into_iter()
                .map(|v| match v {
                    AttrValue::Int(i) => Ok(i),
                    v => Err(self.error(name, format!("expected a list of integers, found `{v}`"))),
                })
                .collect::<Result<Vec<_>>>()
                .map(Some),
            Some(AttrValue::Int(i)) => Ok(Some(vec![i])),
            Some(v) => Err(self.error(name, format!("expected a list of integers, found `{v}`"))),
        }
    }

    /// A list of non-negative integers; a negative element is an error.
    pub fn usizes(&mut self, name: &str) -> Result<Option<Vec<usize>>> {
        match self.ints(name)? {
            None => Ok(None),
            Some(v) => v
                .into_iter()
                .map(|i| {
                    usize::try_from(i)
                        .map_err(|_| self.error(name, format!("must not be negative, found {i}")))
                })
                .collect::<Result<Vec<_>>>()
                .map(Some),
        }
    }

    /// A float; integers are accepted and converted.
    pub fn float(&mut self, name: &str) -> Result<Option<f64>> {
        match self.take(name) {
            None => Ok(None),
            Some(AttrValue::Float(x)) => Ok(Some(x)),
            Some(AttrValue::Int(i)) => Ok(Some(i as f64)),
            Some(v) => Err(self.error(name, format!("expected a number, found `{v}`"))),
        }
    }

    /// A bool; `0`/`1` are accepted as Relay writes them too.
    pub fn bool(&mut self, name: &str) -> Result<Option<bool>> {
        match self.take(name) {
            None => Ok(None),
            Some(AttrValue::Bool(b)) => Ok(Some(b)),
            Some(AttrValue::Int(i @ (0 | 1))) => Ok(Some(i == 1)),
            Some(v) => Err(self.error(name, format!("expected True or False, found `{v}`"))),
        }
    }

    /// A string; any other kind of value is an error.
    pub fn str(&mut self, name: &str) -> Result<Option<String>> {
        match self.take(name) {
            None => Ok(None),
            Some(AttrValue::Str(s)) => Ok(Some(s)),
            Some(v) => Err(self.error(name, format!("expected a string, found `{v}`"))),
        }
    }

    /// A dtype given by name in a string; an unknown name is an error.
    pub fn dtype(&mut self, name: &str) -> Result<Option<DType>> {
        match self.str(name)? {
            None => Ok(None),
            Some(s) => s.parse().map(Some).map_err(|e| self.error(name, e)),
        }
    }

    /// Accepts `name` only if absent or equal to `only` (for layout attributes kiln
    /// reads for compatibility but supports in one value).
    pub fn expect_str(&mut self, name: &str, only: &str) -> Result<()> {
        match self.str(name)? {
            None => Ok(()),
            Some(s) if s == only || s.is_empty() => Ok(()),
            Some(s) => Err(Error::Unsupported(format!(
                "`{}` with {name}=\"{s}\" (only \"{only}\" is supported)",
                self.op
            ))),
        }
    }

    /// Fails if any attribute was not consumed, naming it.
    pub fn finish(self) -> Result<()> {
        match self.pairs.first() {
            None => Ok(()),
            Some((name, _)) => Err(Error::InvalidArgument(format!(
                "`{}` has no attribute `{name}`",
                self.op
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_print_like_relay() {
        assert_eq!(fmt_float(2e-5), "2e-05");
        assert_eq!(fmt_float(1e-5), "1e-05");
        assert_eq!(fmt_float(0.5), "0.5");
        assert_eq!(fmt_float(1.0), "1");
        assert_eq!(fmt_float(-3.25), "-3.25");
        assert_eq!(fmt_float(1e20), "1e+20");
        assert_eq!(AttrValue::Float(2e-5).to_string(), "2e-05f");
        for x in [2e-5, 0.1, 1.0 / 3.0, 6.02e23, -1e-300] {
            assert_eq!(fmt_float(x).parse::<f64>().unwrap(), x);
        }
    }

    #[test]
    fn reader_names_op_and_attribute() {
        let mut r = AttrReader::new(
            "nn.conv2d",
            vec![
                (
                    "strides".into(),
                    AttrValue::List(vec![AttrValue::Int(2), AttrValue::Int(2)]),
                ),
                ("groups".into(), AttrValue::Str("x".into())),
                ("bogus".into(), AttrValue::Int(1)),
            ],
        );
        assert_eq!(r.usizes("strides").unwrap(), Some(vec![2, 2]));
        let e = r.int("groups").unwrap_err().to_string();
        assert!(e.contains("`groups` of `nn.conv2d`"), "{e}");
        let e = r.finish().unwrap_err().to_string();
        assert!(e.contains("`nn.conv2d` has no attribute `bogus`"), "{e}");
    }
}
