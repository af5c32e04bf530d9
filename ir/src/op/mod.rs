//! The op set. Each op is a struct holding its typed attributes and implementing
//! [`OpSpec`]: its name, its type rule, its reference evaluation, how its attributes
//! print, and the facts passes ask of it (fusion pattern, FLOPs, bytes moved, whether it
//! is a view), all in one place (one file per family: `nn`, `elemwise`, `reduce`,
//! `transform`). [`Op`] is the closed enum of those structs — plain data, so it hashes
//! and orders for an e-graph — plus [`Op::Custom`] for ops users add from outside the
//! crate through [`CustomOpDef`] and an [`OpRegistry`].

mod custom;
pub mod elemwise;
pub mod nn;
pub mod reduce;
pub mod transform;
pub(crate) mod util;

use std::fmt;

pub use custom::{CustomOp, CustomOpDef, OpRegistry};

pub use elemwise::{Binary, BinaryKind, Cast, Clip, Unary, UnaryKind, Where};
pub use nn::{
    BatchFlatten, BatchMatmul, BatchNorm, BiasAdd, Conv2d, Dense, GlobalPool2d, LayerNorm, Pool2d,
    PoolKind, Softmax,
};
pub use reduce::{Reduce, ReduceKind};
pub use transform::{
    Concatenate, ExpandDims, Reshape, Split, SplitSpec, Squeeze, StridedSlice, Take, TakeMode,
    Transpose,
};

use crate::attrs::{AttrReader, AttrWriter};
use crate::error::Result;
use crate::ty::Type;
use crate::value::Value;

/// What every op defines: name, type rule, reference evaluation, attributes.
pub trait OpSpec {
    /// The op's name in the text form (`nn.conv2d`, `add`).
    fn name(&self) -> &str;

    /// The result type for argument types `args`, or a type error naming the op, the
    /// argument and the shapes that don't fit.
    fn infer_type(&self, args: &[Type]) -> Result<Type>;

    /// Reference evaluation on argument values whose types passed `infer_type`, which
    /// returned `out` ([`Op::eval`] checks that before calling this, so an
    /// implementation may index by the shapes the type rule guaranteed). Written for
    /// clarity; it is the oracle.
    fn eval(&self, args: &[Value], out: &Type) -> Result<Value>;

    /// Writes the attributes that differ from their defaults, in the order Relay prints
    /// them.
    fn write_attrs(&self, _w: &mut AttrWriter) {}

    /// How the op fuses with its neighbours (Relay's `TOpPattern`); opaque unless the op
    /// says otherwise.
    fn pattern(&self) -> OpPattern {
        OpPattern::Opaque
    }

    /// Whether a call on arguments of types `args` only reinterprets its argument's data:
    /// the result is the argument's elements in the same row-major order, reshaped or cut
    /// into contiguous pieces (`reshape`, `squeeze`, `expand_dims`, `nn.batch_flatten`,
    /// a `split` whose axes before the split axis have extent 1). No data moves. Default:
    /// no.
    fn is_view(&self, _args: &[Type]) -> bool {
        false
    }

    /// Floating-point operations of one call (for cost models): a multiply-add counts
    /// two, a transcendental function four. Default: none for a view, otherwise one per
    /// element read or written, whichever is more ([`elementwise_flops`]).
    fn flops(&self, args: &[Type], out: &Type) -> f64 {
        if self.is_view(args) {
            0.0
        } else {
            elementwise_flops(args, out)
        }
    }

    /// Bytes one call reads and writes. Default: none for a view, otherwise every
    /// argument read once and the result written once ([`type_bytes`]).
    fn bytes_moved(&self, args: &[Type], out: &Type) -> f64 {
        if self.is_view(args) {
            0.0
        } else {
            args.iter().map(type_bytes).sum::<f64>() + type_bytes(out)
        }
    }
}

/// Elements of a value of type `ty` (every field of a tuple; none for a function).
pub fn type_elements(ty: &Type) -> f64 {
    match ty {
        Type::Tensor(t) => t.numel() as f64,
        Type::Tuple(fields) => fields.iter().map(type_elements).sum(),
        Type::Func(_) => 0.0,
    }
}

/// Bytes of a value of type `ty` (every field of a tuple; none for a function).
pub fn type_bytes(ty: &Type) -> f64 {
    match ty {
        Type::Tensor(t) => t.size_bytes() as f64,
        Type::Tuple(fields) => fields.iter().map(type_bytes).sum(),
        Type::Func(_) => 0.0,
    }
}

/// One FLOP per element read or written, whichever is more: the default of
/// [`OpSpec::flops`].
pub fn elementwise_flops(args: &[Type], out: &Type) -> f64 {
    type_elements(out).max(args.iter().map(type_elements).sum())
}

/// An op's fusion pattern (Relay's `TOpPattern`), ordered from the most to the least
/// fusable: operator fusion compares patterns with `<=`, and a fused group's pattern is
/// the largest of its members'. Each op declares its pattern as TVM registers it.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OpPattern {
    /// Output element `i` depends on input element `i` only (`nn.relu`, `exp`, `cast`).
    ElemWise,
    /// Elementwise after broadcasting the inputs (`add`, `nn.bias_add`, `where`).
    Broadcast,
    /// Each output element reads input elements by an index map (`reshape`,
    /// `transpose`, `strided_slice`, `concatenate`, `take`).
    Injective,
    /// A commutative reduction (`sum`, `max`, ...).
    CommReduce,
    /// A complex op whose output can take an elementwise tail in the same loop nest
    /// (`nn.conv2d`, `nn.dense`, `nn.batch_matmul`, pools).
    OutEWiseFusable,
    /// A tuple node (not an op; used by fusion for tuples of tensors).
    Tuple,
    /// Not fused with anything (`nn.batch_norm`, `nn.softmax`, custom ops by default).
    Opaque,
}

impl fmt::Display for OpPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            OpPattern::ElemWise => "elemwise",
            OpPattern::Broadcast => "broadcast",
            OpPattern::Injective => "injective",
            OpPattern::CommReduce => "comm_reduce",
            OpPattern::OutEWiseFusable => "out_elemwise_fusable",
            OpPattern::Tuple => "tuple",
            OpPattern::Opaque => "opaque",
        })
    }
}

macro_rules! op_enum {
    ($($(#[$doc:meta])* $variant:ident($ty:ty)),* $(,)?) => {
        /// A graph-IR op with its attributes.
        #[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Op {
            $($(#[$doc])* $variant($ty),)*
            /// An op defined outside kiln (see [`CustomOpDef`]).
            Custom(CustomOp),
        }

        impl Op {
            /// The op's definition as a trait object.
            pub fn spec(&self) -> &dyn OpSpec {
                match self {
                    $(Op::$variant(o) => o,)*
                    Op::Custom(c) => c,
                }
            }
        }

        $(impl From<$ty> for Op {
            fn from(o: $ty) -> Op {
                Op::$variant(o)
            }
        })*
    };
}

op_enum! {
    /// `nn.conv2d`
    Conv2d(Conv2d),
    /// `nn.batch_norm`
    BatchNorm(BatchNorm),
    /// `nn.max_pool2d`, `nn.avg_pool2d`
    Pool2d(Pool2d),
    /// `nn.global_avg_pool2d`, `nn.global_max_pool2d`
    GlobalPool2d(GlobalPool2d),
    /// `nn.dense`
    Dense(Dense),
    /// `nn.bias_add`
    BiasAdd(BiasAdd),
    /// `nn.batch_flatten`
    BatchFlatten(BatchFlatten),
    /// `nn.softmax`
    Softmax(Softmax),
    /// `nn.layer_norm`
    LayerNorm(LayerNorm),
    /// `nn.batch_matmul`
    BatchMatmul(BatchMatmul),
    /// Elementwise one-argument ops: `nn.relu`, `exp`, `log`, `sqrt`, ...
    Unary(Unary),
    /// Broadcasting two-argument ops: `add`, ..., `maximum`, comparisons.
    Binary(Binary),
    /// `clip`
    Clip(Clip),
    /// `cast`
    Cast(Cast),
    /// `where`
    Where(Where),
    /// `sum`, `mean`, `max`, `min`
    Reduce(Reduce),
    /// `reshape`
    Reshape(Reshape),
    /// `transpose`
    Transpose(Transpose),
    /// `squeeze`
    Squeeze(Squeeze),
    /// `expand_dims`
    ExpandDims(ExpandDims),
    /// `concatenate`
    Concatenate(Concatenate),
    /// `split`
    Split(Split),
    /// `strided_slice`
    StridedSlice(StridedSlice),
    /// `take`
    Take(Take),
}

/// Parses one family's ops: `None` if `name` is not one of them.
type FamilyParser = fn(&str, &mut AttrReader) -> Option<Result<Op>>;

const FAMILIES: [FamilyParser; 4] = [nn::parse, elemwise::parse, reduce::parse, transform::parse];

impl Op {
    /// The op's name in the text form.
    pub fn name(&self) -> &str {
        self.spec().name()
    }

    /// See [`OpSpec::pattern`].
    pub fn pattern(&self) -> OpPattern {
        self.spec().pattern()
    }

    /// See [`OpSpec::is_view`].
    pub fn is_view(&self, args: &[Type]) -> bool {
        self.spec().is_view(args)
    }

    /// See [`OpSpec::flops`].
    pub fn flops(&self, args: &[Type], out: &Type) -> f64 {
        self.spec().flops(args, out)
    }

    /// See [`OpSpec::bytes_moved`].
    pub fn bytes_moved(&self, args: &[Type], out: &Type) -> f64 {
        self.spec().bytes_moved(args, out)
    }

    /// See [`OpSpec::infer_type`].
    pub fn infer_type(&self, args: &[Type]) -> Result<Type> {
        self.spec().infer_type(args)
    }

    /// Evaluates the op with its reference implementation ([`OpSpec::eval`]), after
    /// re-running the type rule on the argument values and checking it gives `out`: a
    /// caller that skipped type inference gets an error, never an out-of-bounds panic.
    pub fn eval(&self, args: &[Value], out: &Type) -> Result<Value> {
        let types: Vec<Type> = args.iter().map(Value::ty).collect();
        let want = self.infer_type(&types)?;
        if &want != out {
            return Err(crate::error::Error::Eval(format!(
                "`{}`: the arguments give result type {want} but {out} was expected",
                self.name()
            )));
        }
        self.spec().eval(args, out)
    }

    /// The non-default attributes as `(name, value)` pairs, in print order.
    pub fn attrs(&self) -> Vec<(String, crate::attrs::AttrValue)> {
        let mut w = AttrWriter::new();
        self.spec().write_attrs(&mut w);
        w.into_pairs()
    }

    /// Builds a built-in op from its name and attributes; `None` if no built-in op has
    /// that name. Unknown or ill-typed attributes are errors naming the attribute.
    pub fn builtin(
        name: &str,
        attrs: Vec<(String, crate::attrs::AttrValue)>,
    ) -> Option<Result<Op>> {
        let mut reader = AttrReader::new(name, attrs);
        for family in FAMILIES {
            if let Some(op) = family(name, &mut reader) {
                return Some(op.and_then(|op| reader.finish().map(|()| op)));
            }
        }
        None
    }

    /// The names of every built-in op.
    pub fn builtin_names() -> Vec<&'static str> {
        [nn::NAMES, elemwise::NAMES, reduce::NAMES, transform::NAMES].concat()
    }
}

impl fmt::Display for Op {
    /// `name` followed by `, attr=value` pairs as they appear after the arguments.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())?;
        for (k, v) in self.attrs() {
            write!(f, ", {k}={v}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;

    fn t(shape: &[usize]) -> Type {
        Type::tensor(shape.to_vec(), DType::F32)
    }

    #[test]
    fn views_move_nothing_and_a_strided_split_copies() {
        let reshape = Op::from(Reshape { newshape: vec![-1] });
        assert!(reshape.is_view(&[t(&[2, 3])]));
        assert_eq!(reshape.flops(&[t(&[2, 3])], &t(&[6])), 0.0);
        assert_eq!(reshape.bytes_moved(&[t(&[2, 3])], &t(&[6])), 0.0);
        let split = Op::from(Split {
            indices_or_sections: SplitSpec::Sections(2),
            axis: 1,
        });
        assert!(split.is_view(&[t(&[1, 4])]));
        assert!(!split.is_view(&[t(&[2, 4])]));
        let halves = Type::Tuple(vec![t(&[2, 2]), t(&[2, 2])]);
        assert_eq!(split.bytes_moved(&[t(&[2, 4])], &halves), 64.0);
        assert!(!Op::from(Transpose::new(None)).is_view(&[t(&[2, 3])]));
    }

    #[test]
    fn contractions_count_multiply_adds_and_transcendentals_four() {
        let dense = Op::from(Dense::default());
        // [2, 8] x [3, 8]^T: 6 outputs of 8 multiply-adds.
        assert_eq!(dense.flops(&[t(&[2, 8]), t(&[3, 8])], &t(&[2, 3])), 96.0);
        let exp = Op::from(Unary::new(UnaryKind::Exp));
        let relu = Op::from(Unary::new(UnaryKind::Relu));
        assert_eq!(exp.flops(&[t(&[5])], &t(&[5])), 20.0);
        assert_eq!(relu.flops(&[t(&[5])], &t(&[5])), 5.0);
        let add = Op::from(Binary::new(BinaryKind::Add));
        // Elementwise default: the larger of elements read and written; bytes: all.
        assert_eq!(add.flops(&[t(&[4]), t(&[])], &t(&[4])), 5.0);
        assert_eq!(add.bytes_moved(&[t(&[4]), t(&[])], &t(&[4])), 36.0);
    }
}
