//! The graph of tensor operations: an arena ([`Graph`]) of placeholders and computes,
//! addressed by typed ids ([`OpId`], [`IterVar`]); a [`Tensor`] is a small `Copy`
//! handle to an operation's output. Creation order is a topological order (an
//! operation only reads operations made before it), which lowering keeps.
//!
//! [`Graph::compute`] type-checks its body once, here, and stores it with immediates
//! already converted to their partner's dtype, so lowering never meets a type error.

use std::fmt;

use kiln_ir::DType;

use crate::error::{Error, Result};
use crate::tir::{BinOp, Intrinsic};

use super::expr::{Expr, IterKind, IterVar};

/// The most dimensions a tensor may have.
pub const MAX_RANK: usize = 8;

/// Index of an operation in its [`Graph`]. Prints as `op4`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OpId(pub u32);

impl OpId {
    /// The arena index.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for OpId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "op{}", self.0)
    }
}

/// The output of an operation: its id, dtype and shape (kept inline, so the handle is
/// `Copy` and reads can be type-checked without the graph).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Tensor {
    op: OpId,
    dtype: DType,
    rank: u8,
    dims: [usize; MAX_RANK],
}

impl Tensor {
    fn new(op: OpId, shape: &[usize], dtype: DType) -> Tensor {
        let mut dims = [0; MAX_RANK];
        dims[..shape.len()].copy_from_slice(shape);
        Tensor {
            op,
            dtype,
            rank: shape.len() as u8,
            dims,
        }
    }

    /// The operation that produces this tensor.
    pub fn op(&self) -> OpId {
        self.op
    }

    /// Extent of each dimension.
    pub fn shape(&self) -> &[usize] {
        &self.dims[..self.rank as usize]
    }

    /// Number of dimensions.
    pub fn rank(&self) -> usize {
        self.rank as usize
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The element at `indices` (one int32 expression per dimension); checked when the
    /// enclosing compute is built.
    pub fn at(&self, indices: &[Expr]) -> Expr {
        Expr::Read {
            tensor: *self,
            indices: indices.to_vec(),
        }
    }

    /// [`Tensor::at`] taking anything convertible to expressions
    /// (`t.at_iter([i, j])` with `IterVar`s or `i32`s).
    pub fn at_iter<E: Into<Expr>>(&self, indices: impl IntoIterator<Item = E>) -> Expr {
        Expr::Read {
            tensor: *self,
            indices: indices.into_iter().map(Into::into).collect(),
        }
    }
}

/// What an operation does.
#[derive(Clone, Debug, PartialEq)]
pub enum OpKind {
    /// An input tensor (a kernel parameter).
    Placeholder,
    /// `out[axes] = body`; `body` may be a [`Expr::Reduce`] at the top.
    Compute {
        /// One data axis per output dimension.
        axes: Vec<IterVar>,
        /// The type-checked body.
        body: Expr,
    },
}

/// One operation of the graph.
#[derive(Clone, Debug, PartialEq)]
pub struct Operation {
    /// Name (used for buffers and in errors).
    pub name: String,
    /// Output shape.
    pub shape: Vec<usize>,
    /// Output dtype.
    pub dtype: DType,
    /// Placeholder or compute.
    pub kind: OpKind,
}

impl Operation {
    /// The reduction axes of a compute whose body is a reduction (else empty).
    pub fn reduce_axes(&self) -> &[IterVar] {
        match &self.kind {
            OpKind::Compute {
                body: Expr::Reduce { axes, .. },
                ..
            } => axes,
            _ => &[],
        }
    }

    /// The data axes of a compute (empty for placeholders).
    pub fn axes(&self) -> &[IterVar] {
        match &self.kind {
            OpKind::Compute { axes, .. } => axes,
            OpKind::Placeholder => &[],
        }
    }

    /// The body of a compute.
    pub fn body(&self) -> Option<&Expr> {
        match &self.kind {
            OpKind::Compute { body, .. } => Some(body),
            OpKind::Placeholder => None,
        }
    }

    /// Whether this is a compute whose body is a reduction.
    pub fn is_reduction(&self) -> bool {
        !self.reduce_axes().is_empty()
    }
}

/// An index variable of the arena.
#[derive(Clone, Debug, PartialEq)]
pub struct IterVarInfo {
    /// Name (used for loop variables).
    pub name: String,
    /// Number of values, `0..extent`.
    pub extent: usize,
    /// Data or reduction axis.
    pub kind: IterKind,
    /// The compute that owns it, once one does.
    pub owner: Option<OpId>,
}

/// An arena of operations and index variables. Build it with [`Graph::placeholder`],
/// [`Graph::reduce_axis`] and [`Graph::compute`], then lower it (with or without a
/// [`Schedule`](super::Schedule)).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Graph {
    ops: Vec<Operation>,
    iter_vars: Vec<IterVarInfo>,
}

impl Graph {
    /// An empty graph.
    pub fn new() -> Graph {
        Graph::default()
    }

    /// Every operation, indexed by [`OpId`], in creation order.
    pub fn ops(&self) -> &[Operation] {
        &self.ops
    }

    /// The operation `id`.
    pub fn op(&self, id: OpId) -> Result<&Operation> {
        self.ops.get(id.index()).ok_or_else(|| {
            Error::InvalidArgument(format!("{id} is not an operation of this graph"))
        })
    }

    /// The index variable `v`.
    pub fn iter_var(&self, v: IterVar) -> Result<&IterVarInfo> {
        self.iter_vars.get(v.index()).ok_or_else(|| {
            Error::InvalidArgument(format!("{v} is not an index variable of this graph"))
        })
    }

    /// The tensor produced by operation `id`.
    pub fn tensor(&self, id: OpId) -> Result<Tensor> {
        let op = self.op(id)?;
        Ok(Tensor::new(id, &op.shape, op.dtype))
    }

    /// The name of an index variable (`?` for an unknown one).
    pub fn iv_name(&self, v: IterVar) -> String {
        self.iter_vars
            .get(v.index())
            .map(|i| i.name.clone())
            .unwrap_or_else(|| format!("?{v}"))
    }

    pub(crate) fn ops_mut_at(&mut self, id: OpId) -> &mut Operation {
        &mut self.ops[id.index()]
    }

    pub(crate) fn new_iter_var(
        &mut self,
        name: impl Into<String>,
        extent: usize,
        kind: IterKind,
        owner: Option<OpId>,
    ) -> IterVar {
        self.iter_vars.push(IterVarInfo {
            name: name.into(),
            extent,
            kind,
            owner,
        });
        IterVar((self.iter_vars.len() - 1) as u32)
    }

    fn check_shape(shape: &[usize], name: &str) -> Result<()> {
        if shape.len() > MAX_RANK {
            return Err(Error::InvalidArgument(format!(
                "tensor `{name}` has rank {}; at most {MAX_RANK} dimensions are supported",
                shape.len()
            )));
        }
        // Kernels index with int32: larger tensors are valid models kiln cannot lower.
        let mut n: usize = 1;
        for &d in shape {
            if d == 0 {
                return Err(Error::InvalidArgument(format!(
                    "tensor `{name}` has shape {shape:?}; every extent must be at least 1"
                )));
            }
            n = n
                .checked_mul(d)
                .filter(|&n| n <= i32::MAX as usize)
                .ok_or_else(|| {
                    Error::Unsupported(format!(
                        "tensor `{name}` of shape {shape:?} has more than 2^31-1 elements \
                         (kernels index with int32)"
                    ))
                })?;
        }
        Ok(())
    }

    pub(crate) fn push_op(&mut self, op: Operation) -> Tensor {
        self.ops.push(op);
        let id = OpId((self.ops.len() - 1) as u32);
        let op = &self.ops[id.index()];
        Tensor::new(id, &op.shape, op.dtype)
    }

    /// An input tensor.
    pub fn placeholder(&mut self, shape: &[usize], dtype: DType, name: &str) -> Result<Tensor> {
        Graph::check_shape(shape, name)?;
        Ok(self.push_op(Operation {
            name: name.to_string(),
            shape: shape.to_vec(),
            dtype,
            kind: OpKind::Placeholder,
        }))
    }

    /// A reduction axis over `0..extent`, to be used by exactly one compute (in its
    /// [`sum`](super::sum)/[`max`](super::max)/[`min`](super::min) body).
    pub fn reduce_axis(&mut self, extent: usize, name: &str) -> Result<IterVar> {
        if extent == 0 || extent > i32::MAX as usize {
            return Err(Error::InvalidArgument(format!(
                "reduce axis `{name}` has extent {extent}; it must be in 1..=2^31-1"
            )));
        }
        Ok(self.new_iter_var(name, extent, IterKind::Reduce, None))
    }

    /// `out[i0, i1, ...] = f(&[i0, i1, ...])`: the closure gets one int32 index
    /// expression per output dimension and returns the element. The body is type-checked
    /// here; the dtype of the result is the body's.
    pub fn compute(
        &mut self,
        shape: &[usize],
        name: &str,
        f: impl FnOnce(&[Expr]) -> Expr,
    ) -> Result<Tensor> {
        Graph::check_shape(shape, name)?;
        let id = OpId(self.ops.len() as u32);
        let first_iv = self.iter_vars.len();
        const NAMES: [&str; 4] = ["i", "j", "k", "l"];
        let axes: Vec<IterVar> = shape
            .iter()
            .enumerate()
            .map(|(d, &e)| {
                let n = if shape.len() <= NAMES.len() {
                    NAMES[d].to_string()
                } else {
                    format!("i{d}")
                };
                self.new_iter_var(n, e, IterKind::Data, Some(id))
            })
            .collect();
        let idx: Vec<Expr> = axes.iter().map(|a| Expr::Var(*a)).collect();
        let body = f(&idx);
        let (body, dtype) = match self.check_body(name, id, &axes, body) {
            Ok(x) => x,
            Err(e) => {
                // Leave the arena as it was: drop the axes made for this compute.
                self.iter_vars.truncate(first_iv);
                return Err(e);
            }
        };
        Ok(self.push_op(Operation {
            name: name.to_string(),
            shape: shape.to_vec(),
            dtype,
            kind: OpKind::Compute { axes, body },
        }))
    }

    fn check_body(
        &mut self,
        name: &str,
        id: OpId,
        axes: &[IterVar],
        body: Expr,
    ) -> Result<(Expr, DType)> {
        let err = |m: String| Error::InvalidArgument(format!("compute `{name}`: {m}"));
        let mut allowed: Vec<IterVar> = axes.to_vec();
        let (body, dtype) = if let Expr::Reduce {
            kind,
            value,
            axes: raxes,
        } = body
        {
            if raxes.is_empty() {
                return Err(err(format!("{} over no reduction axes", kind.name())));
            }
            for (n, &r) in raxes.iter().enumerate() {
                let info = self.iter_var(r).map_err(|e| err(e.to_string()))?;
                if info.kind != IterKind::Reduce {
                    return Err(err(format!(
                        "`{}` is not a reduction axis (make one with reduce_axis)",
                        info.name
                    )));
                }
                if let Some(o) = info.owner {
                    return Err(err(format!(
                        "reduction axis `{}` already belongs to compute `{}`",
                        info.name,
                        self.ops[o.index()].name
                    )));
                }
                if raxes[..n].contains(&r) {
                    return Err(err(format!("reduction axis `{}` listed twice", info.name)));
                }
            }
            allowed.extend(raxes.iter().copied());
            let (value, t) = self.check(&err, &allowed, *value)?;
            if t == DType::Bool {
                return Err(err(format!("{} of bool values", kind.name())));
            }
            (
                Expr::Reduce {
                    kind,
                    value: Box::new(value),
                    axes: raxes,
                },
                t,
            )
        } else {
            self.check(&err, &allowed, body)?
        };
        for r in body_reduce_axes(&body) {
            self.iter_vars[r.index()].owner = Some(id);
        }
        Ok((body, dtype))
    }

    /// Type-checks `e`, returning it with immediates converted, and its dtype.
    fn check(
        &self,
        err: &dyn Fn(String) -> Error,
        allowed: &[IterVar],
        e: Expr,
    ) -> Result<(Expr, DType)> {
        Ok(match e {
            Expr::Int { value, dtype } => {
                if !dtype.is_int() {
                    return Err(err(format!("integer immediate {value} with dtype {dtype}")));
                }
                (Expr::Int { value, dtype }, dtype)
            }
            Expr::Float { value, dtype } => {
                if !dtype.is_float() {
                    return Err(err(format!("float immediate {value} with dtype {dtype}")));
                }
                (Expr::Float { value, dtype }, dtype)
            }
            Expr::Bool(b) => (Expr::Bool(b), DType::Bool),
            Expr::Var(v) => {
                let info = self.iter_var(v).map_err(|e| err(e.to_string()))?;
                if !allowed.contains(&v) {
                    return Err(err(match info.kind {
                        IterKind::Reduce => format!(
                            "reduction axis `{}` is used but not reduced over (list it in sum/max/min)",
                            info.name
                        ),
                        IterKind::Data => {
                            format!("index `{}` belongs to another compute", info.name)
                        }
                    }));
                }
                (Expr::Var(v), DType::I32)
            }
            Expr::Read { tensor, indices } => {
                let op = self.op(tensor.op()).map_err(|e| err(e.to_string()))?;
                if op.shape != tensor.shape() || op.dtype != tensor.dtype() {
                    return Err(err(format!(
                        "tensor handle {} does not match this graph's operation `{}`",
                        tensor.op(),
                        op.name
                    )));
                }
                if indices.len() != tensor.rank() {
                    return Err(err(format!(
                        "read of `{}` (rank {}) with {} indices",
                        op.name,
                        tensor.rank(),
                        indices.len()
                    )));
                }
                let mut out = vec![];
                for (d, ix) in indices.into_iter().enumerate() {
                    let (ix, t) = self.check(err, allowed, ix)?;
                    let ix = match (ix, t) {
                        (ix, DType::I32 | DType::I64) => ix,
                        (Expr::Int { value, .. }, _) => Expr::Int {
                            value,
                            dtype: DType::I32,
                        },
                        (_, t) => {
                            return Err(err(format!(
                                "index {d} of read of `{}` has dtype {t}; indices are int32 or int64",
                                op.name
                            )));
                        }
                    };
                    out.push(ix);
                }
                (
                    Expr::Read {
                        tensor,
                        indices: out,
                    },
                    tensor.dtype(),
                )
            }
            Expr::Binary { op, lhs, rhs } => {
                let (l, lt) = self.check(err, allowed, *lhs)?;
                let (r, rt) = self.check(err, allowed, *rhs)?;
                let (l, r, t) = unify(err, op_name(op), l, lt, r, rt)?;
                let bad = match op {
                    BinOp::And | BinOp::Or => t != DType::Bool,
                    BinOp::FloorDiv | BinOp::FloorMod => !t.is_int(),
                    BinOp::Eq | BinOp::Ne => false,
                    _ => t == DType::Bool,
                };
                if bad {
                    return Err(err(format!("`{}` does not take {t} operands", op_name(op))));
                }
                let out = if op.is_comparison() { DType::Bool } else { t };
                (Expr::binary(op, l, r), out)
            }
            Expr::Not(x) => {
                let (x, t) = self.check(err, allowed, *x)?;
                if t != DType::Bool {
                    return Err(err(format!("`!` takes bool, found {t}")));
                }
                (Expr::Not(Box::new(x)), DType::Bool)
            }
            Expr::Select { cond, then, else_ } => {
                let (c, ct) = self.check(err, allowed, *cond)?;
                if ct != DType::Bool {
                    return Err(err(format!(
                        "select condition has dtype {ct}, expected bool"
                    )));
                }
                let (a, at) = self.check(err, allowed, *then)?;
                let (b, bt) = self.check(err, allowed, *else_)?;
                let (a, b, t) = unify(err, "select", a, at, b, bt)?;
                (super::expr::select(c, a, b), t)
            }
            Expr::Cast { to, value } => {
                let (v, _) = self.check(err, allowed, *value)?;
                (super::expr::cast(to, v), to)
            }
            Expr::Call { intrinsic, args } => {
                if args.len() != intrinsic.arity() {
                    return Err(err(format!(
                        "`{}` takes {} argument(s), found {}",
                        intrinsic.name(),
                        intrinsic.arity(),
                        args.len()
                    )));
                }
                let mut checked = vec![];
                for a in args {
                    checked.push(self.check(err, allowed, a)?);
                }
                // The dtype of the first non-immediate argument wins.
                let t = checked
                    .iter()
                    .find(|(e, _)| !e.is_imm())
                    .or(checked.first())
                    .map(|(_, t)| *t)
                    .unwrap_or(DType::F32);
                let mut out = vec![];
                for (a, at) in checked {
                    out.push(coerce(err, intrinsic.name(), a, at, t)?);
                }
                let ok = t.is_float() || (intrinsic == Intrinsic::Abs && t.is_int());
                if !ok {
                    return Err(err(format!("`{}` does not take {t}", intrinsic.name())));
                }
                (super::expr::call(intrinsic, out), t)
            }
            Expr::Reduce { kind, .. } => {
                return Err(err(format!(
                    "{} is only allowed as the whole body of a compute",
                    kind.name()
                )));
            }
        })
    }
}

fn body_reduce_axes(e: &Expr) -> Vec<IterVar> {
    match e {
        Expr::Reduce { axes, .. } => axes.clone(),
        _ => vec![],
    }
}

fn op_name(op: BinOp) -> &'static str {
    op.symbol().or(op.call_name()).unwrap_or("?")
}

/// Converts immediate `e` of dtype `from` to `to` if it fits, else a type error.
fn coerce(
    err: &dyn Fn(String) -> Error,
    what: &str,
    e: Expr,
    from: DType,
    to: DType,
) -> Result<Expr> {
    if from == to {
        return Ok(e);
    }
    let fits = |v: i64| {
        let (lo, hi) = crate::tir::semantics::int_range(to);
        v >= lo && v <= hi
    };
    match e {
        Expr::Int { value, .. } if to.is_float() => Ok(Expr::Float {
            value: value as f64,
            dtype: to,
        }),
        Expr::Int { value, .. } if to.is_int() && fits(value) => Ok(Expr::Int { value, dtype: to }),
        Expr::Float { value, .. } if to.is_float() => Ok(Expr::Float { value, dtype: to }),
        _ => Err(err(format!(
            "operands of `{what}` have different dtypes ({from} and {to}); cast one of them"
        ))),
    }
}

/// The common dtype of two operands, converting an immediate to its partner's dtype.
fn unify(
    err: &dyn Fn(String) -> Error,
    what: &str,
    a: Expr,
    at: DType,
    b: Expr,
    bt: DType,
) -> Result<(Expr, Expr, DType)> {
    if at == bt {
        return Ok((a, b, at));
    }
    let mismatch = || {
        err(format!(
            "operands of `{what}` have different dtypes ({at} and {bt}); cast one of them"
        ))
    };
    if a.is_imm() && !b.is_imm() {
        let a = coerce(err, what, a, at, bt).map_err(|_| mismatch())?;
        Ok((a, b, bt))
    } else if b.is_imm() && !a.is_imm() {
        let b = coerce(err, what, b, bt, at).map_err(|_| mismatch())?;
        Ok((a, b, at))
    } else {
        Err(mismatch())
    }
}
