//! Ops defined outside kiln, for research: implement [`CustomOpDef`] (type rule and
//! reference evaluation), wrap it in [`CustomOp`], and register a constructor in an
//! [`OpRegistry`] so the text parser can read calls to it back.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use super::{Op, OpPattern, OpSpec};
use crate::attrs::{AttrReader, AttrValue, AttrWriter};
use crate::error::{Error, Result};
use crate::ty::Type;
use crate::value::Value;

/// An op defined outside the crate. The same contract as [`OpSpec`]; `Send + Sync` so
/// modules holding it can cross threads.
pub trait CustomOpDef: Send + Sync + fmt::Debug {
    /// Name in the text form; must not collide with a built-in op.
    fn name(&self) -> &str;
    /// Result type for the argument types, or an error (see [`Error::ty`]).
    fn infer_type(&self, args: &[Type]) -> Result<Type>;
    /// Reference evaluation.
    fn eval(&self, args: &[Value], out: &Type) -> Result<Value>;
    /// Attributes to print (parsed back by the constructor registered for the name).
    fn write_attrs(&self, _w: &mut AttrWriter) {}
    /// The fusion pattern (see [`OpPattern`]); opaque unless the op says otherwise.
    fn pattern(&self) -> OpPattern {
        OpPattern::Opaque
    }
    /// Whether the op only reinterprets its argument's data ([`OpSpec::is_view`]);
    /// default no.
    fn is_view(&self, _args: &[Type]) -> bool {
        false
    }
    /// FLOPs of one call ([`OpSpec::flops`]); default one per element read or written,
    /// whichever is more — state it for anything heavier (a contraction, a
    /// transcendental), or the cost model will undercount it.
    fn flops(&self, args: &[Type], out: &Type) -> f64 {
        if self.is_view(args) {
            0.0
        } else {
            super::elementwise_flops(args, out)
        }
    }
    /// Bytes one call reads and writes ([`OpSpec::bytes_moved`]); default every argument
    /// and the result once (none for a view).
    fn bytes_moved(&self, args: &[Type], out: &Type) -> f64 {
        if self.is_view(args) {
            0.0
        } else {
            args.iter().map(super::type_bytes).sum::<f64>() + super::type_bytes(out)
        }
    }
}

/// A shared handle to a [`CustomOpDef`]. Two handles are equal when their names and
/// printed attributes are equal.
#[derive(Clone)]
pub struct CustomOp(pub Arc<dyn CustomOpDef>);

impl CustomOp {
    /// A handle to `def`.
    pub fn new(def: impl CustomOpDef + 'static) -> CustomOp {
        CustomOp(Arc::new(def))
    }

    fn key(&self) -> (String, String) {
        let mut w = AttrWriter::new();
        self.0.write_attrs(&mut w);
        let attrs: Vec<String> = w
            .into_pairs()
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        (self.0.name().to_string(), attrs.join(","))
    }
}

impl fmt::Debug for CustomOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl PartialEq for CustomOp {
    fn eq(&self, other: &CustomOp) -> bool {
        self.key() == other.key()
    }
}
impl Eq for CustomOp {}
impl std::hash::Hash for CustomOp {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.key().hash(state)
    }
}
impl PartialOrd for CustomOp {
    fn partial_cmp(&self, other: &CustomOp) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for CustomOp {
    fn cmp(&self, other: &CustomOp) -> std::cmp::Ordering {
        self.key().cmp(&other.key())
    }
}

impl OpSpec for CustomOp {
    fn name(&self) -> &str {
        self.0.name()
    }
    fn infer_type(&self, args: &[Type]) -> Result<Type> {
        self.0.infer_type(args)
    }
    fn eval(&self, args: &[Value], out: &Type) -> Result<Value> {
        self.0.eval(args, out)
    }
    fn write_attrs(&self, w: &mut AttrWriter) {
        self.0.write_attrs(w)
    }
    fn pattern(&self) -> OpPattern {
        self.0.pattern()
    }
    fn is_view(&self, args: &[Type]) -> bool {
        self.0.is_view(args)
    }
    fn flops(&self, args: &[Type], out: &Type) -> f64 {
        self.0.flops(args, out)
    }
    fn bytes_moved(&self, args: &[Type], out: &Type) -> f64 {
        self.0.bytes_moved(args, out)
    }
}

/// Builds a custom op from the attributes of a parsed call.
pub type CustomOpCtor = Arc<dyn Fn(&mut AttrReader) -> Result<CustomOp> + Send + Sync>;

/// The ops the text parser knows: every built-in op plus registered custom ops.
#[derive(Clone, Default)]
pub struct OpRegistry {
    custom: BTreeMap<String, CustomOpCtor>,
}

impl fmt::Debug for OpRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpRegistry")
            .field("custom", &self.custom.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl OpRegistry {
    /// A registry of the built-in ops only.
    pub fn new() -> OpRegistry {
        OpRegistry::default()
    }

    /// Registers a custom op under `name`; `ctor` reads its attributes. Refuses names of
    /// built-in ops and names registered already.
    pub fn register(
        &mut self,
        name: &str,
        ctor: impl Fn(&mut AttrReader) -> Result<CustomOp> + Send + Sync + 'static,
    ) -> Result<()> {
        if Op::builtin_names().contains(&name) || self.custom.contains_key(name) {
            return Err(Error::InvalidArgument(format!(
                "op `{name}` is already defined"
            )));
        }
        self.custom.insert(name.to_string(), Arc::new(ctor));
        Ok(())
    }

    /// The op called `name` with `attrs`, built-in or registered.
    pub fn make(&self, name: &str, attrs: Vec<(String, AttrValue)>) -> Result<Op> {
        if let Some(op) = Op::builtin(name, attrs.clone()) {
            return op;
        }
        let ctor = self
            .custom
            .get(name)
            .ok_or_else(|| Error::UnknownOp(name.to_string()))?;
        let mut reader = AttrReader::new(name, attrs);
        let op = ctor(&mut reader)?;
        reader.finish()?;
        Ok(Op::Custom(op))
    }
}
