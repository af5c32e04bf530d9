//! Model-level import: opsets, graph inputs and initializers, walking the nodes in order,
//! folding nodes whose inputs are all constants, and building `@main`. The per-op
//! conversions live in `ops`; this file owns the [`Importer`] state they work on and the
//! small graph-building helpers they share.

use std::collections::{BTreeMap, HashMap};

use kiln_ir::interp::evaluate_function;
use kiln_ir::op::{self, BinaryKind, UnaryKind};
use kiln_ir::zoo::Params;
use kiln_ir::{DType, ExprId, ExprKind, FnAttrs, Module, NDArray, Type};

use crate::error::{Error, Result, UnsupportedNode};
use crate::ops;
use crate::proto::{self, AttributeProto, AttributeType, ModelProto, NodeProto};
use crate::tensor::{storage_dtype_from_onnx, tensor_from_proto};

/// Folded constants larger than this many elements stay computed at run time, so that a
/// model cannot make the importer allocate without bound.
const FOLD_LIMIT: usize = 1 << 24;

/// The highest opset version accepted (ONNX's releases are far below it; a larger or
/// non-positive version is a corrupt model).
const MAX_OPSET: i64 = 100;

/// Whether `domain` names ONNX's default operator set.
fn is_default_domain(domain: &str) -> bool {
    domain.is_empty() || domain == "ai.onnx"
}

/// The version of `domain` that the model imports (0 if none).
fn opset_of(model: &ModelProto, domain: &str) -> i64 {
    model
        .opset_import
        .iter()
        .filter(|o| {
            let d = o.domain.as_deref().unwrap_or("");
            d == domain || (is_default_domain(d) && is_default_domain(domain))
        })
        .filter_map(|o| o.version)
        .max()
        .unwrap_or(0)
}

/// Every node of `model`'s graph that kiln cannot import.
pub(crate) fn unsupported_nodes(model: &ModelProto) -> Vec<UnsupportedNode> {
    let Some(graph) = &model.graph else {
        return vec![];
    };
    graph
        .node
        .iter()
        .enumerate()
        .filter_map(|(index, n)| {
            let domain = n.domain.clone().unwrap_or_default();
            let op_type = n.op_type.clone().unwrap_or_default();
            let ok = is_default_domain(&domain) && ops::is_supported(op_type.as_str());
            (!ok).then(|| UnsupportedNode {
                opset: opset_of(model, &domain),
                op_type,
                name: n.name.clone().unwrap_or_default(),
                index,
                domain,
            })
        })
        .collect()
}

/// One node being converted: the proto plus what error messages and rules need. An
/// attribute read as a type it does not have is recorded in `misread` (the accessors
/// return the default) and turned into an error naming it once the node is converted.
pub(crate) struct Node<'a> {
    pub proto: &'a NodeProto,
    pub op_type: &'a str,
    pub opset: i64,
    pub misread: std::cell::RefCell<Option<String>>,
}

impl Node<'_> {
    /// The attribute `name`, if present.
    pub fn attr(&self, name: &str) -> Option<&AttributeProto> {
        self.proto
            .attribute
            .iter()
            .find(|a| a.name.as_deref() == Some(name))
    }

    /// The attribute `name` if present and of type `want`; a present attribute of
    /// another type is recorded as misread.
    fn typed_attr(&self, name: &str, want: AttributeType) -> Option<&AttributeProto> {
        let a = self.attr(name)?;
        let kind = attr_kind(a);
        if kind == Some(want) {
            return Some(a);
        }
        let mut misread = self.misread.borrow_mut();
        if misread.is_none() {
            *misread = Some(format!(
                "attribute `{name}` must be {}, found {}",
                kind_name(Some(want)),
                kind_name(kind)
            ));
        }
        None
    }

    /// Integer attribute `name`, or `default`.
    pub fn int(&self, name: &str, default: i64) -> i64 {
        self.typed_attr(name, AttributeType::Int)
            .and_then(|a| a.i)
            .unwrap_or(default)
    }

    /// Float attribute `name`, or `default`.
    pub fn float(&self, name: &str, default: f32) -> f32 {
        self.typed_attr(name, AttributeType::Float)
            .and_then(|a| a.f)
            .unwrap_or(default)
    }

    /// Integer-list attribute `name`, if present.
    pub fn ints(&self, name: &str) -> Option<Vec<i64>> {
        self.typed_attr(name, AttributeType::Ints)
            .map(|a| a.ints.clone())
    }

    /// String attribute `name`, or `default`.
    pub fn string(&self, name: &str, default: &str) -> String {
        self.typed_attr(name, AttributeType::String)
            .and_then(|a| a.s.as_ref())
            .map(|s| String::from_utf8_lossy(s).into_owned())
            .unwrap_or_else(|| default.to_string())
    }

    /// The name of input `i`, if the node has that input (empty names are absent
    /// optional inputs).
    pub fn input_name(&self, i: usize) -> Option<&str> {
        self.proto
            .input
            .get(i)
            .map(String::as_str)
            .filter(|s| !s.is_empty())
    }

    /// Number of inputs listed (absent optional ones included).
    pub fn num_inputs(&self) -> usize {
        self.proto.input.len()
    }

    /// Number of outputs listed.
    pub fn num_outputs(&self) -> usize {
        self.proto.output.len()
    }
}

/// The type of attribute `a`: its declared `type`, or (in models that leave it unset)
/// the one value field that is set; `None` when neither says.
fn attr_kind(a: &AttributeProto) -> Option<AttributeType> {
    if let Some(t) = a.r#type.and_then(|t| AttributeType::try_from(t).ok()) {
        return (t != AttributeType::Undefined).then_some(t);
    }
    let set = [
        (a.i.is_some(), AttributeType::Int),
        (a.f.is_some(), AttributeType::Float),
        (a.s.is_some(), AttributeType::String),
        (a.t.is_some(), AttributeType::Tensor),
        (a.g.is_some(), AttributeType::Graph),
        (!a.ints.is_empty(), AttributeType::Ints),
        (!a.floats.is_empty(), AttributeType::Floats),
        (!a.strings.is_empty(), AttributeType::Strings),
        (!a.tensors.is_empty(), AttributeType::Tensors),
        (!a.graphs.is_empty(), AttributeType::Graphs),
    ];
    let mut kinds = set.iter().filter(|(s, _)| *s).map(|&(_, k)| k);
    match (kinds.next(), kinds.next()) {
        (Some(k), None) => Some(k),
        _ => None,
    }
}

fn kind_name(k: Option<AttributeType>) -> &'static str {
    match k {
        Some(AttributeType::Int) => "an int",
        Some(AttributeType::Float) => "a float",
        Some(AttributeType::String) => "a string",
        Some(AttributeType::Tensor) => "a tensor",
        Some(AttributeType::Graph) => "a graph",
        Some(AttributeType::Ints) => "a list of ints",
        Some(AttributeType::Floats) => "a list of floats",
        Some(AttributeType::Strings) => "a list of strings",
        Some(AttributeType::Tensors) => "a list of tensors",
        Some(AttributeType::Graphs) => "a list of graphs",
        Some(_) => "a type kiln does not read",
        None => "no value of one type",
    }
}

/// Checks a node's attributes before it is converted: each named once, and holding a
/// value of the type it declares.
fn check_attributes(n: &NodeProto) -> Result<()> {
    let mut seen = std::collections::HashSet::new();
    for a in &n.attribute {
        let name = a.name.as_deref().unwrap_or("");
        if name.is_empty() {
            return Err(Error::InvalidModel("an attribute has no name".into()));
        }
        if !seen.insert(name) {
            return Err(Error::InvalidModel(format!(
                "attribute `{name}` is given twice"
            )));
        }
        let declared = a.r#type.and_then(|t| AttributeType::try_from(t).ok());
        let holds = match declared {
            Some(AttributeType::Int) => a.i.is_some(),
            Some(AttributeType::Float) => a.f.is_some(),
            Some(AttributeType::String) => a.s.is_some(),
            Some(AttributeType::Tensor) => a.t.is_some(),
            Some(AttributeType::Graph) => a.g.is_some(),
            _ => true,
        };
        if !holds {
            return Err(Error::InvalidModel(format!(
                "attribute `{name}` is declared {} but holds no such value",
                kind_name(declared)
            )));
        }
    }
    Ok(())
}

/// The state of one import: the module under construction, the value each ONNX name is
/// bound to, and the initializers (bound to `@main` params only when first read).
pub(crate) struct Importer {
    pub m: Module,
    values: HashMap<String, ExprId>,
    initializers: HashMap<String, NDArray>,
    params: Params,
    main_params: Vec<ExprId>,
    /// The values of a narrow ONNX type (float8, float4, int4, ...) held as their bit
    /// patterns (as uint8), with their type.
    narrow: HashMap<String, crate::narrow::Narrow>,
}

impl Importer {
    /// The narrow type of value `name`, if it holds a narrow type's bits.
    pub fn narrow_of(&self, name: &str) -> Option<crate::narrow::Narrow> {
        self.narrow.get(name).copied()
    }

    /// The expression for value `name`, binding an initializer to a new `@main` param on
    /// first use.
    pub fn value(&mut self, name: &str) -> Result<ExprId> {
        if let Some(&id) = self.values.get(name) {
            return Ok(id);
        }
        if let Some(t) = self.initializers.get(name) {
            // Bound once: a subgraph's scope (a loop iteration) that forgot the binding
            // reads the same `@main` param again.
            let bound = self
                .main_params
                .iter()
                .copied()
                .find(|&p| self.m.var_name(p) == Some(name));
            let v = match bound {
                Some(v) => v,
                None => {
                    let v = self.m.var(name, Type::Tensor(t.ty()));
                    self.params.insert(name.to_string(), t.clone());
                    self.main_params.push(v);
                    v
                }
            };
            self.values.insert(name.to_string(), v);
            return Ok(v);
        }
        Err(Error::InvalidModel(format!(
            "value `{name}` is read before any input, initializer or node defines it"
        )))
    }

    /// Input `i` of `n` as an expression; an error if the node lacks it.
    pub fn input(&mut self, n: &Node, i: usize) -> Result<ExprId> {
        let name = n
            .input_name(i)
            .ok_or_else(|| Error::InvalidModel(format!("input {i} is required but missing")))?;
        self.value(name)
    }

    /// Input `i` of `n` as an expression, or `None` if absent.
    pub fn opt_input(&mut self, n: &Node, i: usize) -> Result<Option<ExprId>> {
        match n.input_name(i) {
            Some(name) => self.value(name).map(Some),
            None => Ok(None),
        }
    }

    /// The value of `name` if it is known at import time (a constant or an initializer).
    pub fn known(&self, name: &str) -> Option<NDArray> {
        if let Some(&id) = self.values.get(name) {
            return match self.m.kind(id) {
                ExprKind::Constant(c) => Some((**c).clone()),
                _ => self.params.get(name).cloned(),
            };
        }
        self.initializers.get(name).cloned()
    }

    /// Input `i` of `n`, which must be known at import time; `None` if absent.
    pub fn const_input(&self, n: &Node, i: usize) -> Result<Option<NDArray>> {
        let Some(name) = n.input_name(i) else {
            return Ok(None);
        };
        self.known(name)
            .map(Some)
            .ok_or_else(|| Error::NotConstant {
                input: self.graph_input_behind(name),
            })
    }

    /// The name to ask a caller to bind so that value `name` becomes known at import:
    /// the first graph input (not an initializer) its expression reads — binding it with
    /// `from_onnx_with_constants` folds what depends only on it and on initializers —
    /// else `name` itself.
    fn graph_input_behind(&self, name: &str) -> String {
        let Some(&id) = self.values.get(name) else {
            return name.to_string();
        };
        kiln_ir::visit::free_vars(&self.m, id)
            .into_iter()
            .filter_map(|v| self.m.var_name(v))
            .find(|v| !self.params.contains_key(*v))
            .unwrap_or(name)
            .to_string()
    }

    /// Input `i` of `n` as a list of integers known at import time; `None` if absent.
    pub fn const_ints(&self, n: &Node, i: usize) -> Result<Option<Vec<i64>>> {
        Ok(self.const_input(n, i)?.map(|t| t.to_i64_vec()))
    }

    /// Applies `op` to `args`.
    pub fn call(&mut self, op: impl Into<op::Op>, args: &[ExprId]) -> Result<ExprId> {
        Ok(self.m.call(op, args)?)
    }

    /// The tensor type of `id`.
    pub fn tensor_ty(&self, id: ExprId) -> Result<kiln_ir::TensorType> {
        self.m.ty(id).as_tensor().cloned().ok_or_else(|| {
            Error::InvalidModel(format!("{id} is a tuple where a tensor is expected"))
        })
    }

    /// The shape of `id`.
    pub fn shape(&self, id: ExprId) -> Result<Vec<usize>> {
        Ok(self.tensor_ty(id)?.shape)
    }

    /// The dtype of `id`.
    pub fn dtype(&self, id: ExprId) -> Result<DType> {
        Ok(self.tensor_ty(id)?.dtype)
    }

    /// A constant tensor.
    pub fn constant(&mut self, value: NDArray) -> ExprId {
        self.m.constant(value)
    }

    /// An error unless a `shape` tensor of `dtype` fits the memory budget; `what` names
    /// the tensor. Every constant sized by the model is checked before it is built.
    pub fn check_alloc(&self, what: &str, shape: &[usize], dtype: DType) -> Result<()> {
        kiln_ir::tensor::budget::checked_bytes(what, shape, dtype)?;
        Ok(())
    }

    /// A `shape` tensor of `dtype` filled with `v`: a constant when small, else a scalar
    /// broadcast at run time (so `inspect` of a huge `ConstantOfShape` allocates nothing).
    pub fn filled(&mut self, shape: &[usize], dtype: DType, v: f64) -> Result<ExprId> {
        if kiln_ir::tensor::budget::checked_numel(shape)? <= FOLD_LIMIT {
            return Ok(self.constant(NDArray::full(shape.to_vec(), dtype, v)));
        }
        let s = self.scalar(v, dtype);
        self.broadcast_to(s, shape)
    }

    /// A rank-0 constant `v` of `dtype`.
    pub fn scalar(&mut self, v: f64, dtype: DType) -> ExprId {
        self.m
            .constant(NDArray::full(Vec::<usize>::new(), dtype, v))
    }

    /// A rank-0 constant `v` of the dtype of `like`.
    pub fn scalar_like(&mut self, v: f64, like: ExprId) -> Result<ExprId> {
        let d = self.dtype(like)?;
        Ok(self.scalar(v, d))
    }

    /// `kind(x)`.
    pub fn unary(&mut self, kind: UnaryKind, x: ExprId) -> Result<ExprId> {
        self.call(op::Unary { kind }, &[x])
    }

    /// `kind(a, b)` with broadcasting.
    pub fn binary(&mut self, kind: BinaryKind, a: ExprId, b: ExprId) -> Result<ExprId> {
        self.call(op::Binary { kind }, &[a, b])
    }

    /// `x` reshaped to `shape`.
    pub fn reshape(&mut self, x: ExprId, shape: &[usize]) -> Result<ExprId> {
        if self.shape(x)? == shape {
            return Ok(x);
        }
        let newshape = shape.iter().map(|&d| d as i64).collect();
        self.call(op::Reshape { newshape }, &[x])
    }

    /// `x` with its axes permuted.
    pub fn transpose(&mut self, x: ExprId, perm: Vec<i64>) -> Result<ExprId> {
        self.call(op::Transpose { axes: Some(perm) }, &[x])
    }

    /// A reduction of `x` over `axes` (all when `None`).
    pub fn reduce(
        &mut self,
        kind: op::ReduceKind,
        x: ExprId,
        axes: Option<Vec<i64>>,
        keepdims: bool,
    ) -> Result<ExprId> {
        self.call(
            op::Reduce {
                kind,
                axis: axes,
                keepdims,
                exclude: false,
            },
            &[x],
        )
    }

    /// `items` (equal shapes) stacked along a new axis `axis` (`expand_dims` each, then
    /// `concatenate`).
    pub fn stack(&mut self, items: &[ExprId], axis: i64) -> Result<ExprId> {
        let mut expanded = Vec::with_capacity(items.len());
        for &x in items {
            expanded.push(self.call(
                op::ExpandDims {
                    axis,
                    num_newaxis: 1,
                },
                &[x],
            )?);
        }
        if expanded.len() == 1 {
            return Ok(expanded[0]);
        }
        let t = self.m.tuple(&expanded)?;
        self.call(op::Concatenate::new(axis), &[t])
    }

    /// `where(cond, a, b)`.
    pub fn select(&mut self, cond: ExprId, a: ExprId, b: ExprId) -> Result<ExprId> {
        self.call(op::Where, &[cond, a, b])
    }

    /// `x` broadcast to `shape` (numpy rules), any dtype: one `where(ones, x, x)` per
    /// axis that grows, each over a bool constant spanning that axis alone, so the
    /// constants hold the sum of the extents, not their product.
    pub fn broadcast_to(&mut self, x: ExprId, shape: &[usize]) -> Result<ExprId> {
        let xs = self.shape(x)?;
        if xs == shape {
            return Ok(x);
        }
        let r = shape.len();
        if xs.len() > r {
            return Err(Error::InvalidModel(format!(
                "cannot broadcast shape {xs:?} to the lower rank of {shape:?}"
            )));
        }
        let mut full = vec![1; r - xs.len()];
        full.extend(&xs);
        let mut y = self.reshape(x, &full)?;
        for a in 0..r {
            if full[a] == shape[a] {
                continue;
            }
            if full[a] != 1 {
                return Err(Error::InvalidModel(format!(
                    "cannot broadcast shape {xs:?} to {shape:?}"
                )));
            }
            let mut axis_shape = vec![1; r];
            axis_shape[a] = shape[a];
            self.check_alloc("a broadcast mask", &axis_shape, DType::Bool)?;
            let ones = self.constant(NDArray::full(axis_shape, DType::Bool, 1.0));
            y = self.select(ones, y, y)?;
        }
        Ok(y)
    }

    /// Evaluates `id` (which must depend on constants only) in the reference interpreter.
    fn evaluate(&mut self, id: ExprId) -> Result<NDArray> {
        let f = self.m.function(&[], id, FnAttrs::default())?;
        let v = evaluate_function(&self.m, f, vec![])?;
        Ok(v.into_tensor("folded constant")?)
    }

    /// Whether every present input of `n` is a constant node (initializers excluded:
    /// they stay params).
    fn all_inputs_constant(&self, n: &Node) -> bool {
        n.proto.input.iter().filter(|s| !s.is_empty()).all(|name| {
            self.values
                .get(name)
                .is_some_and(|&id| matches!(self.m.kind(id), ExprKind::Constant(_)))
        })
    }

    /// The tensor type of value `name` if it is bound to a non-constant expression
    /// holding no elements.
    fn empty_value(&self, name: &str) -> Option<kiln_ir::TensorType> {
        let &id = self.values.get(name)?;
        match (self.m.kind(id), self.m.ty(id)) {
            (ExprKind::Constant(_), _) => None,
            (_, Type::Tensor(t)) if t.numel() == 0 => Some(t.clone()),
            _ => None,
        }
    }

    /// Imports the nodes of `g`, a subgraph (a branch or loop body) of the graph being
    /// imported, with its inputs bound to `args` in order and its initializers as
    /// constants; the values of the enclosing graph stay visible. Returns its outputs;
    /// the names it bound are forgotten afterwards, so each call (each unrolled
    /// iteration) binds them afresh.
    pub fn run_subgraph(
        &mut self,
        g: &proto::GraphProto,
        args: &[ExprId],
        opset: i64,
    ) -> Result<Vec<ExprId>> {
        if g.input.len() != args.len() {
            return Err(Error::InvalidModel(format!(
                "a subgraph with {} inputs given {} values",
                g.input.len(),
                args.len()
            )));
        }
        let saved = self.values.clone();
        let result = self.import_subgraph(g, args, opset);
        self.values = saved;
        result
    }

    fn import_subgraph(
        &mut self,
        g: &proto::GraphProto,
        args: &[ExprId],
        opset: i64,
    ) -> Result<Vec<ExprId>> {
        for (vi, &a) in g.input.iter().zip(args) {
            self.values.insert(vi.name.clone().unwrap_or_default(), a);
        }
        for t in &g.initializer {
            let name = t.name.clone().unwrap_or_default();
            let value = tensor_from_proto(t, &format!("subgraph initializer `{name}`"))?;
            let c = self.m.constant(value);
            self.values.insert(name, c);
        }
        for (index, p) in g.node.iter().enumerate() {
            let n = Node {
                proto: p,
                op_type: p.op_type.as_deref().unwrap_or(""),
                opset,
                misread: Default::default(),
            };
            if !ops::is_supported(n.op_type) {
                return Err(Error::Unsupported(format!(
                    "op {} in a subgraph (node {index})",
                    n.op_type
                )));
            }
            self.convert_node(&n).map_err(|e| Error::AtNode {
                index,
                name: p.name.clone().unwrap_or_default(),
                op_type: format!("{} in a subgraph, opset {opset}", n.op_type),
                source: Box::new(e),
            })?;
        }
        g.output
            .iter()
            .map(|vi| self.value(vi.name.as_deref().unwrap_or("")))
            .collect()
    }

    /// Converts one node and binds its outputs, folding them to constants when all its
    /// inputs are constants. A value with no elements has nothing to compute: it is
    /// read as a constant (so what depends on it only through its shape folds, as a
    /// sum over an empty axis does) and a node output with no elements is bound to one.
    fn convert_node(&mut self, n: &Node) -> Result<()> {
        for name in n.proto.input.iter().filter(|s| !s.is_empty()) {
            if let Some(t) = self.empty_value(name) {
                let c = self.m.constant(NDArray::zeros(t.shape, t.dtype));
                self.values.insert(name.clone(), c);
            }
        }
        // Integer initializers (shapes, axes, indices) read by a node whose other inputs
        // are constants become constants too, so shape arithmetic folds; float
        // initializers (weights) stay params.
        let int_init = |imp: &Importer, name: &str| {
            !imp.values.contains_key(name)
                && imp
                    .initializers
                    .get(name)
                    .is_some_and(|t| matches!(t.dtype(), DType::I64 | DType::I32))
        };
        let foldable = n.proto.input.iter().filter(|s| !s.is_empty()).all(|name| {
            int_init(self, name)
                || self
                    .values
                    .get(name)
                    .is_some_and(|&id| matches!(self.m.kind(id), ExprKind::Constant(_)))
        });
        if foldable {
            for name in n.proto.input.iter().filter(|s| !s.is_empty()) {
                if int_init(self, name) {
                    let c = self.m.constant(self.initializers[name].clone());
                    self.values.insert(name.clone(), c);
                }
            }
        }
        check_attributes(n.proto)?;
        crate::arity::check(n)?;
        // A node with a subgraph (If, Loop, Scan) may read enclosing values that are not
        // constants: its outputs fold only when they evaluate without them.
        let has_subgraph = n
            .proto
            .attribute
            .iter()
            .any(|a| a.g.is_some() || !a.graphs.is_empty());
        let fold = n.num_inputs() > 0 && self.all_inputs_constant(n);
        crate::narrow::check_inputs(self, n)?;
        let outs = ops::convert(self, n)?;
        if let Some(f) = crate::narrow::output_format(self, n) {
            for name in n.proto.output.iter().filter(|s| !s.is_empty()) {
                self.narrow.insert(name.clone(), f);
            }
        }
        if let Some(m) = n.misread.take() {
            return Err(Error::InvalidModel(m));
        }
        for (i, name) in n.proto.output.iter().enumerate() {
            if name.is_empty() {
                continue;
            }
            let Some(&id) = outs.get(i) else {
                return Err(Error::Unsupported(format!(
                    "output {i} (`{name}`) of {} is not produced by kiln's import",
                    n.op_type
                )));
            };
            let id = match self.m.ty(id) {
                Type::Tensor(t)
                    if !matches!(self.m.kind(id), ExprKind::Constant(_)) && t.numel() == 0 =>
                {
                    let t = t.clone();
                    self.m.constant(NDArray::zeros(t.shape, t.dtype))
                }
                Type::Tensor(t)
                    if fold
                        && !matches!(self.m.kind(id), ExprKind::Constant(_))
                        && t.numel() <= FOLD_LIMIT =>
                {
                    match self.evaluate(id) {
                        Ok(v) => self.m.constant(v),
                        Err(_) if has_subgraph => id,
                        Err(e) => return Err(e),
                    }
                }
                _ => id,
            };
            if self.values.insert(name.clone(), id).is_some()
                || self.initializers.contains_key(name)
            {
                return Err(Error::InvalidModel(format!(
                    "output `{name}` is already defined by an input, initializer or earlier \
                     node (ONNX values are assigned once)"
                )));
            }
        }
        Ok(())
    }
}

/// The narrow type of graph input `vi`, if its element type is one.
fn input_narrow(vi: &proto::ValueInfoProto) -> Option<crate::narrow::Narrow> {
    match &vi.r#type {
        Some(proto::TypeProto {
            value: Some(proto::type_proto::Value::TensorType(t)),
            ..
        }) => crate::narrow::Narrow::from_onnx(t.elem_type.unwrap_or(0)),
        _ => None,
    }
}

/// The type of graph input `vi`, with the caller's shape override applied.
fn input_type(vi: &proto::ValueInfoProto, shapes: &BTreeMap<String, Vec<usize>>) -> Result<Type> {
    let name = vi.name.as_deref().unwrap_or("");
    let Some(proto::TypeProto {
        value: Some(proto::type_proto::Value::TensorType(t)),
        ..
    }) = &vi.r#type
    else {
        return Err(Error::Unsupported(format!(
            "graph input `{name}` is not a tensor (sequences, maps and optionals are not supported)"
        )));
    };
    let dtype = storage_dtype_from_onnx(t.elem_type.unwrap_or(0)).map_err(|e| match e {
        Error::UnsupportedType(m) => Error::UnsupportedType(format!("graph input `{name}`: {m}")),
        other => other,
    })?;
    if let Some(shape) = shapes.get(name) {
        if let Some(sp) = &t.shape {
            if sp.dim.len() != shape.len() {
                return Err(Error::InvalidModel(format!(
                    "the shape given for input `{name}` has rank {} but the model says rank {}",
                    shape.len(),
                    sp.dim.len()
                )));
            }
            for (i, (d, &given)) in sp.dim.iter().zip(shape).enumerate() {
                use proto::tensor_shape_proto::dimension::Value;
                if let Some(Value::DimValue(v)) = d.value
                    && u64::try_from(v).ok() != Some(given as u64)
                {
                    return Err(Error::InvalidModel(format!(
                        "the shape given for input `{name}` has {given} at dim {i}, where \
                         the model fixes {v}"
                    )));
                }
            }
        }
        return checked_input_type(name, shape.clone(), dtype);
    }
    let Some(sp) = &t.shape else {
        return Err(Error::InvalidModel(format!(
            "input `{name}` has no shape in the model; give one (shape override)"
        )));
    };
    let mut shape = Vec::with_capacity(sp.dim.len());
    for (i, d) in sp.dim.iter().enumerate() {
        use proto::tensor_shape_proto::dimension::Value;
        match &d.value {
            Some(Value::DimValue(v)) if *v >= 0 => shape.push(*v as usize),
            Some(Value::DimValue(v)) => {
                return Err(Error::InvalidModel(format!(
                    "input `{name}` dim {i} is negative ({v})"
                )));
            }
            Some(Value::DimParam(p)) => {
                return Err(Error::InvalidModel(format!(
                    "input `{name}` dim {i} is dynamic (`{p}`); give the input's shape (shape override)"
                )));
            }
            None => {
                return Err(Error::InvalidModel(format!(
                    "input `{name}` dim {i} is unknown; give the input's shape (shape override)"
                )));
            }
        }
    }
    checked_input_type(name, shape, dtype)
}

/// The type of graph input `name`, refused when its element count is beyond what a
/// tensor type may hold.
fn checked_input_type(name: &str, shape: Vec<usize>, dtype: DType) -> Result<Type> {
    let t = kiln_ir::TensorType::new(shape, dtype);
    if t.is_oversized() {
        return Err(Error::Ir(kiln_ir::Error::LimitExceeded(format!(
            "input `{name}` of shape {:?} has more than 2^56 elements",
            t.shape
        ))));
    }
    Ok(Type::Tensor(t))
}

/// Imports a decoded model.
pub(crate) fn import_model(
    model: &ModelProto,
    shapes: &BTreeMap<String, Vec<usize>>,
    constants: &BTreeMap<String, NDArray>,
) -> Result<(Module, Params)> {
    let graph = model
        .graph
        .as_ref()
        .ok_or_else(|| Error::InvalidModel("the model has no graph".into()))?;
    let unsupported = unsupported_nodes(model);
    if !unsupported.is_empty() {
        return Err(Error::UnsupportedOps(unsupported));
    }
    let opset = opset_of(model, "");
    if opset == 0 {
        return Err(Error::InvalidModel(
            "the model imports no version of the default ONNX domain (opset_import)".into(),
        ));
    }
    if let Some(bad) = model
        .opset_import
        .iter()
        .filter_map(|o| o.version)
        .find(|v| !(1..=MAX_OPSET).contains(v))
    {
        return Err(Error::InvalidModel(format!(
            "opset_import version {bad} is outside 1..={MAX_OPSET}"
        )));
    }
    for name in shapes.keys().chain(constants.keys()) {
        if !graph
            .input
            .iter()
            .any(|vi| vi.name.as_deref() == Some(name))
        {
            return Err(Error::InvalidModel(format!(
                "a shape or value was given for `{name}`, which is not a graph input"
            )));
        }
    }
    let mut imp = Importer {
        m: Module::new(),
        values: HashMap::new(),
        initializers: HashMap::new(),
        params: Params::new(),
        main_params: vec![],
        narrow: HashMap::new(),
    };
    for (i, t) in graph.initializer.iter().enumerate() {
        let name = t.name.clone().unwrap_or_default();
        if name.is_empty() {
            return Err(Error::InvalidModel(format!("initializer {i} has no name")));
        }
        let value = tensor_from_proto(t, &format!("initializer `{name}`"))?;
        if let Some(f) = crate::narrow::Narrow::from_onnx(t.data_type.unwrap_or(0)) {
            imp.narrow.insert(name.clone(), f);
        }
        imp.initializers.insert(name, value);
    }
    for vi in &graph.input {
        let name = vi.name.clone().unwrap_or_default();
        if imp.initializers.contains_key(&name) && !shapes.contains_key(&name) {
            continue;
        }
        if name.is_empty() {
            return Err(Error::InvalidModel("a graph input has no name".into()));
        }
        let ty = input_type(vi, shapes)?;
        if let Some(f) = input_narrow(vi) {
            imp.narrow.insert(name.clone(), f);
        }
        if let Some(value) = constants.get(&name) {
            if Type::Tensor(value.ty()) != ty {
                return Err(Error::InvalidModel(format!(
                    "the value bound to input `{name}` is {} but the input is {ty}",
                    value.ty()
                )));
            }
            let c = imp.m.constant(value.clone());
            imp.values.insert(name, c);
            continue;
        }
        imp.initializers.remove(&name);
        let v = imp.m.var(name.clone(), ty);
        imp.main_params.push(v);
        imp.values.insert(name, v);
    }
    for (index, p) in graph.node.iter().enumerate() {
        let n = Node {
            proto: p,
            op_type: p.op_type.as_deref().unwrap_or(""),
            opset,
            misread: Default::default(),
        };
        imp.convert_node(&n).map_err(|e| Error::AtNode {
            index,
            name: p.name.clone().unwrap_or_default(),
            op_type: format!("{}, opset {opset}", n.op_type),
            source: Box::new(e),
        })?;
    }
    let mut outs = Vec::with_capacity(graph.output.len());
    for vi in &graph.output {
        let name = vi.name.as_deref().unwrap_or("");
        outs.push(imp.value(name).map_err(|_| {
            Error::InvalidModel(format!("graph output `{name}` is not computed by any node"))
        })?);
    }
    let body = match outs.as_slice() {
        [] => return Err(Error::InvalidModel("the graph has no outputs".into())),
        [one] => *one,
        many => imp.m.tuple(many)?,
    };
    let Importer {
        mut m,
        params,
        main_params,
        ..
    } = imp;
    m.set_main(&main_params, body)?;
    Ok((m, params))
}
