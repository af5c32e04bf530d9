//! Expressions and modules. Every expression is a node in its module's arena and is
//! referred to by a typed [`ExprId`] (STYLE habit 6): no `Rc` trees, sharing is free,
//! and a node's id is smaller than the ids of every node that uses it, so the arena
//! order is a topological order. Each node's type is computed when it is created (the
//! op's type rule runs then), so types are known everywhere and shape errors surface at
//! the call that causes them.

use std::fmt;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::op::Op;
use crate::tensor::NDArray;
use crate::ty::{FuncType, Type};

/// The id of an expression node, valid in the module that created it.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ExprId(u32);

impl ExprId {
    /// The id with arena index `i`.
    pub fn new(i: usize) -> ExprId {
        ExprId(u32::try_from(i).expect("more than 2^32 expression nodes"))
    }

    /// The arena index.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for ExprId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// What a call applies: an op, or a function-typed expression (a function literal,
/// such as a fused primitive group, or a global function).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Callee {
    /// A built-in or custom op.
    Op(Op),
    /// An expression of function type: a [`ExprKind::Function`] or a
    /// [`ExprKind::GlobalVar`].
    Expr(ExprId),
}

/// Attributes of a function literal.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct FnAttrs {
    /// A fused group produced by operator fusion, to be lowered as one kernel
    /// (Relay's `Primitive=1`).
    pub primitive: bool,
}

/// A function: parameters (each a [`ExprKind::Var`] node) and a body.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Function {
    /// The parameters, in order; each a [`ExprKind::Var`] node.
    pub params: Vec<ExprId>,
    /// The result expression.
    pub body: ExprId,
    /// Markers such as `primitive`.
    pub attrs: FnAttrs,
}

/// The kinds of expression.
#[derive(Clone, Debug, PartialEq)]
pub enum ExprKind {
    /// A variable, bound as a function parameter. Its identity is its id; the name is
    /// for printing and for binding inputs and params by name.
    Var {
        /// The name without `%` (need not be unique).
        name: String,
    },
    /// A constant tensor.
    Constant(Arc<NDArray>),
    /// An op or function applied to arguments.
    Call {
        /// What is applied.
        callee: Callee,
        /// The arguments, in order.
        args: Vec<ExprId>,
    },
    /// A tuple of the fields, in order.
    Tuple(Vec<ExprId>),
    /// Field `index` of a tuple.
    TupleGetItem {
        /// An expression of tuple type.
        tuple: ExprId,
        /// The field, from 0.
        index: usize,
    },
    /// A function literal (a fused group, or the body of a global function).
    Function(Function),
    /// A reference to a global function of the module, by name (`@name`).
    GlobalVar(String),
}

impl ExprKind {
    /// The ids this node refers to directly, in order (a function's params, then body).
    pub fn children(&self) -> Vec<ExprId> {
        match self {
            ExprKind::Var { .. } | ExprKind::Constant(_) | ExprKind::GlobalVar(_) => vec![],
            ExprKind::Call { callee, args } => {
                let mut out = Vec::with_capacity(args.len() + 1);
                if let Callee::Expr(f) = callee {
                    out.push(*f);
                }
                out.extend(args);
                out
            }
            ExprKind::Tuple(fields) => fields.clone(),
            ExprKind::TupleGetItem { tuple, .. } => vec![*tuple],
            ExprKind::Function(f) => {
                let mut out = f.params.clone();
                out.push(f.body);
                out
            }
        }
    }

    /// This node with every child `c` replaced by `f(c)` (the inverse order of
    /// [`ExprKind::children`] does not matter: each child is mapped where it stands).
    pub fn map_children(&self, mut f: impl FnMut(ExprId) -> ExprId) -> ExprKind {
        match self {
            ExprKind::Var { .. } | ExprKind::Constant(_) | ExprKind::GlobalVar(_) => self.clone(),
            ExprKind::Call { callee, args } => ExprKind::Call {
                callee: match callee {
                    Callee::Op(op) => Callee::Op(op.clone()),
                    Callee::Expr(e) => Callee::Expr(f(*e)),
                },
                args: args.iter().map(|&a| f(a)).collect(),
            },
            ExprKind::Tuple(fields) => ExprKind::Tuple(fields.iter().map(|&a| f(a)).collect()),
            ExprKind::TupleGetItem { tuple, index } => ExprKind::TupleGetItem {
                tuple: f(*tuple),
                index: *index,
            },
            ExprKind::Function(func) => ExprKind::Function(Function {
                params: func.params.iter().map(|&p| f(p)).collect(),
                body: f(func.body),
                attrs: func.attrs.clone(),
            }),
        }
    }

    /// The op, if this is an op call.
    pub fn op(&self) -> Option<&Op> {
        match self {
            ExprKind::Call {
                callee: Callee::Op(op),
                ..
            } => Some(op),
            _ => None,
        }
    }
}

/// An arena node: the expression and its type.
#[derive(Clone, Debug, PartialEq)]
pub struct ExprNode {
    /// What the expression is.
    pub kind: ExprKind,
    /// Its type, as inferred when the node was made.
    pub ty: Type,
}

/// A module: the expression arena and the named global functions (`@main`, ...), in
/// the order they were added.
#[derive(Clone, Debug, Default)]
pub struct Module {
    nodes: Vec<ExprNode>,
    globals: Vec<(String, ExprId)>,
}

impl Module {
    /// An empty module: no nodes, no global functions.
    pub fn new() -> Module {
        Module::default()
    }

    /// Number of nodes in the arena (including ones no function uses any more).
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the arena holds no node.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The node `id`. Panics if `id` is not from this module (a kiln bug, not input).
    pub fn node(&self, id: ExprId) -> &ExprNode {
        &self.nodes[id.index()]
    }

    /// The node `id`, or an error if `id` is not a node of this module.
    pub fn get(&self, id: ExprId) -> Result<&ExprNode> {
        self.nodes
            .get(id.index())
            .ok_or_else(|| Error::InvalidArgument(format!("expression {id} is not in this module")))
    }

    /// What node `id` is. Panics as [`Module::node`] does.
    pub fn kind(&self, id: ExprId) -> &ExprKind {
        &self.node(id).kind
    }

    /// The type of node `id`. Panics as [`Module::node`] does.
    pub fn ty(&self, id: ExprId) -> &Type {
        &self.node(id).ty
    }

    /// All node ids in arena (topological) order.
    pub fn ids(&self) -> impl Iterator<Item = ExprId> + use<> {
        (0..self.nodes.len()).map(ExprId::new)
    }

    /// Appends a node whose type the caller vouches for. For passes that build nodes
    /// they have already typed; the verifier re-checks such nodes.
    pub fn push_unchecked(&mut self, kind: ExprKind, ty: Type) -> ExprId {
        self.nodes.push(ExprNode { kind, ty });
        ExprId::new(self.nodes.len() - 1)
    }

    fn check_ids(&self, ids: &[ExprId]) -> Result<()> {
        for &id in ids {
            self.get(id)?;
        }
        Ok(())
    }

    /// A new variable of type `ty`.
    pub fn var(&mut self, name: impl Into<String>, ty: impl Into<Type>) -> ExprId {
        self.push_unchecked(ExprKind::Var { name: name.into() }, ty.into())
    }

    /// A constant tensor.
    pub fn constant(&mut self, value: NDArray) -> ExprId {
        let ty = Type::Tensor(value.ty());
        self.push_unchecked(ExprKind::Constant(Arc::new(value)), ty)
    }

    /// Applies `op` to `args`, running the op's type rule.
    pub fn call(&mut self, op: impl Into<Op>, args: &[ExprId]) -> Result<ExprId> {
        let op = op.into();
        self.check_ids(args)?;
        let arg_types: Vec<Type> = args.iter().map(|&a| self.ty(a).clone()).collect();
        for (i, t) in arg_types.iter().enumerate() {
            if let Some(big) = t.oversized_tensor() {
                return Err(Error::ty(
                    op.name(),
                    format!("argument {i} has type {big}, more than 2^56 elements"),
                ));
            }
        }
        let ty = op.infer_type(&arg_types)?;
        if let Some(big) = ty.oversized_tensor() {
            return Err(Error::ty(
                op.name(),
                format!("the result type {big} has more than 2^56 elements"),
            ));
        }
        Ok(self.push_unchecked(
            ExprKind::Call {
                callee: Callee::Op(op),
                args: args.to_vec(),
            },
            ty,
        ))
    }

    /// Calls a function-typed expression (function literal or global) on `args`.
    pub fn call_function(&mut self, callee: ExprId, args: &[ExprId]) -> Result<ExprId> {
        self.check_ids(args)?;
        let Type::Func(ft) = self.get(callee)?.ty.clone() else {
            return Err(Error::ty(
                "call",
                format!(
                    "callee {callee} has type {}, not a function type",
                    self.ty(callee)
                ),
            ));
        };
        if ft.params.len() != args.len() {
            return Err(Error::ty(
                "call",
                format!(
                    "function takes {} argument(s), got {}",
                    ft.params.len(),
                    args.len()
                ),
            ));
        }
        for (i, (p, &a)) in ft.params.iter().zip(args).enumerate() {
            if p != self.ty(a) {
                return Err(Error::ty(
                    "call",
                    format!(
                        "argument {i} has type {} but the parameter is {p}",
                        self.ty(a)
                    ),
                ));
            }
        }
        Ok(self.push_unchecked(
            ExprKind::Call {
                callee: Callee::Expr(callee),
                args: args.to_vec(),
            },
            *ft.ret,
        ))
    }

    /// A tuple of `fields`.
    pub fn tuple(&mut self, fields: &[ExprId]) -> Result<ExprId> {
        self.check_ids(fields)?;
        let ty = Type::Tuple(fields.iter().map(|&f| self.ty(f).clone()).collect());
        Ok(self.push_unchecked(ExprKind::Tuple(fields.to_vec()), ty))
    }

    /// Field `index` of the tuple `tuple`.
    pub fn tuple_get(&mut self, tuple: ExprId, index: usize) -> Result<ExprId> {
        let ty = match &self.get(tuple)?.ty {
            Type::Tuple(fields) => fields.get(index).cloned().ok_or_else(|| {
                Error::ty(
                    "tuple_get_item",
                    format!(
                        "index {index} is out of range for a tuple of {} fields",
                        fields.len()
                    ),
                )
            })?,
            other => {
                return Err(Error::ty(
                    "tuple_get_item",
                    format!(
                        "cannot take field {index} of a value of type {other}, which is not a tuple"
                    ),
                ));
            }
        };
        Ok(self.push_unchecked(ExprKind::TupleGetItem { tuple, index }, ty))
    }

    /// A function literal over `params` (variables) returning `body`.
    pub fn function(&mut self, params: &[ExprId], body: ExprId, attrs: FnAttrs) -> Result<ExprId> {
        self.check_ids(params)?;
        self.get(body)?;
        for &p in params {
            if !matches!(self.kind(p), ExprKind::Var { .. }) {
                return Err(Error::InvalidModel(format!(
                    "function parameter {p} is not a variable"
                )));
            }
        }
        let ty = Type::Func(FuncType {
            params: params.iter().map(|&p| self.ty(p).clone()).collect(),
            ret: Box::new(self.ty(body).clone()),
        });
        Ok(self.push_unchecked(
            ExprKind::Function(Function {
                params: params.to_vec(),
                body,
                attrs,
            }),
            ty,
        ))
    }

    /// Defines (or redefines) the global function `@name` as the function literal `func`.
    pub fn define(&mut self, name: &str, func: ExprId) -> Result<()> {
        if !matches!(self.get(func)?.kind, ExprKind::Function(_)) {
            return Err(Error::InvalidModel(format!(
                "@{name} must be bound to a function, got {func}"
            )));
        }
        match self.globals.iter_mut().find(|(n, _)| n == name) {
            Some(slot) => slot.1 = func,
            None => self.globals.push((name.to_string(), func)),
        }
        Ok(())
    }

    /// Builds `fn(params) { body }` and defines it as `@main`.
    pub fn set_main(&mut self, params: &[ExprId], body: ExprId) -> Result<()> {
        let f = self.function(params, body, FnAttrs::default())?;
        self.define("main", f)
    }

    /// A reference to the global function `@name`, typed with its signature.
    pub fn global(&mut self, name: &str) -> Result<ExprId> {
        let f = self
            .global_id(name)
            .ok_or_else(|| Error::InvalidModel(format!("unknown global function @{name}")))?;
        let ty = self.ty(f).clone();
        Ok(self.push_unchecked(ExprKind::GlobalVar(name.to_string()), ty))
    }

    /// The function-literal node of global `@name`.
    pub fn global_id(&self, name: &str) -> Option<ExprId> {
        self.globals
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, id)| *id)
    }

    /// The global functions, `(name, function node)`, in definition order.
    pub fn globals(&self) -> &[(String, ExprId)] {
        &self.globals
    }

    /// The function stored at `id`, or an error if `id` is not a function literal.
    pub fn function_at(&self, id: ExprId) -> Result<&Function> {
        match &self.get(id)?.kind {
            ExprKind::Function(f) => Ok(f),
            _ => Err(Error::InvalidModel(format!("{id} is not a function"))),
        }
    }

    /// The node of `@main`.
    pub fn main_id(&self) -> Result<ExprId> {
        self.global_id("main")
            .ok_or_else(|| Error::InvalidModel("the module has no @main function".into()))
    }

    /// `@main`.
    pub fn main(&self) -> Result<&Function> {
        self.function_at(self.main_id()?)
    }

    /// A module whose `@main(x0, x1, ...)` applies `op` to one parameter per argument
    /// type; a tuple-typed argument becomes a tuple of parameters `xI_0, xI_1, ...` (as
    /// `concatenate` takes). The smallest complete program around one op: what tests of
    /// every layer and backend start from.
    pub fn single_op(op: impl Into<Op>, args: &[Type]) -> Result<Module> {
        let mut m = Module::new();
        let mut params = Vec::new();
        let mut call_args = Vec::with_capacity(args.len());
        for (i, ty) in args.iter().enumerate() {
            match ty {
                Type::Tuple(fields) => {
                    let vars: Vec<ExprId> = fields
                        .iter()
                        .enumerate()
                        .map(|(k, t)| m.var(format!("x{i}_{k}"), t.clone()))
                        .collect();
                    params.extend(&vars);
                    call_args.push(m.tuple(&vars)?);
                }
                t => {
                    let v = m.var(format!("x{i}"), t.clone());
                    params.push(v);
                    call_args.push(v);
                }
            }
        }
        let call = m.call(op, &call_args)?;
        m.set_main(&params, call)?;
        Ok(m)
    }

    /// `@main`'s parameters as `(name, tensor type)`, in order; an error if one is not a
    /// tensor.
    pub fn main_tensor_params(&self) -> Result<Vec<(String, crate::ty::TensorType)>> {
        self.main()?
            .params
            .iter()
            .map(|&p| {
                let name = self.var_name(p).unwrap_or_default().to_string();
                match self.ty(p) {
                    Type::Tensor(t) => Ok((name, t.clone())),
                    other => Err(Error::InvalidModel(format!(
                        "parameter %{name} has type {other}, not a tensor"
                    ))),
                }
            })
            .collect()
    }

    /// The name of a variable node.
    pub fn var_name(&self, id: ExprId) -> Option<&str> {
        match self.kind(id) {
            ExprKind::Var { name } => Some(name),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::op::{Unary, UnaryKind};

    #[test]
    fn builds_a_typed_function() {
        let mut m = Module::new();
        let x = m.var("x", Type::tensor([2, 3], DType::F32));
        let t = m.tuple(&[x, x]).unwrap();
        let g = m.tuple_get(t, 1).unwrap();
        assert_eq!(m.ty(g), &Type::tensor([2, 3], DType::F32));
        m.set_main(&[x], g).unwrap();
        assert_eq!(m.main().unwrap().params, vec![x]);
        assert_eq!(
            m.ty(m.main_id().unwrap()).to_string(),
            "fn (Tensor[(2, 3), float32]) -> Tensor[(2, 3), float32]"
        );
        assert!(
            m.tuple_get(t, 2)
                .unwrap_err()
                .to_string()
                .contains("out of range")
        );
        assert!(m.tuple_get(x, 0).is_err());
        let _ = Unary {
            kind: UnaryKind::Relu,
        };
    }

    #[test]
    fn single_op_modules() {
        let f = Type::tensor([2, 3], DType::F32);
        let m = Module::single_op(
            Unary {
                kind: UnaryKind::Relu,
            },
            &[f.clone()],
        )
        .unwrap();
        let params = m.main_tensor_params().unwrap();
        assert_eq!(params.len(), 1);
        assert_eq!(params[0].0, "x0");
        let tuple = Type::Tuple(vec![f.clone(), f.clone()]);
        let m = Module::single_op(crate::op::Concatenate { axis: 1 }, &[tuple]).unwrap();
        let names: Vec<String> = m
            .main_tensor_params()
            .unwrap()
            .into_iter()
            .map(|p| p.0)
            .collect();
        assert_eq!(names, ["x0_0", "x0_1"]);
        assert_eq!(
            m.ty(m.main().unwrap().body),
            &Type::tensor([2, 6], DType::F32)
        );
        let err = Module::single_op(
            Unary {
                kind: UnaryKind::Exp,
            },
            &[Type::tensor([2], DType::I32)],
        )
        .unwrap_err();
        assert!(err.to_string().contains("exp"), "{err}");
    }

    #[test]
    fn bad_ids_and_missing_main_are_errors() {
        let mut m = Module::new();
        assert!(m.main().unwrap_err().to_string().contains("no @main"));
        assert!(
            m.tuple(&[ExprId::new(5)])
                .unwrap_err()
                .to_string()
                .contains("not in this module")
        );
        let c = m.constant(NDArray::zeros([1], DType::F32));
        assert!(m.function(&[c], c, FnAttrs::default()).is_err());
        assert!(m.global("nope").is_err());
    }
}
