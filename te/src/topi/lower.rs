//! Lowering graph-IR functions to kernels: [`lower_function`] turns one function (a
//! primitive group: a DAG of op calls, tuples and tuple-gets over its parameters) into
//! one [`PrimFunc`]; [`kernels_of`] cuts a module's `@main` into one kernel per call of a
//! primitive function (what fusion makes) or loose op call.
//!
//! The pipeline, top to bottom:
//! 1. **Graph**: a placeholder per tensor leaf of each parameter (tuple-typed parameters
//!    flatten), then each body node in order through [`compute_op`] (tuples and
//!    tuple-gets only regroup values). Scalar and splat constants become immediates.
//! 2. **Outputs**: the tensors of the body's value, flattened; a placeholder or a repeated
//!    tensor among them gets a copy stage, so every output is its own compute.
//! 3. **Inlining**: every injective stage that is not an output (and not kept
//!    materialized, see [`Ctx::kept`]) is inlined into its readers, so conv2d + bias_add
//!    + relu + add is one loop nest with the tail in the store.
//! 4. **Default schedule** of the [`ScheduleKind`] ([`crate::schedule_default`]).
//! 5. **Lowering** to loop IR. Kernel inputs are all parameter leaves, in order, whether
//!    read or not, so a caller passes a function's arguments unchanged; outputs follow.

use std::collections::{HashMap, HashSet};

use kiln_ir::{Callee, DType, ExprId, ExprKind, FnAttrs, Module, Type};

use crate::error::{Error, Result};
use crate::te::{Expr, OpId, Schedule, Tensor};
use crate::tir::{Buffer, PrimFunc, Scope};

use super::{Ctx, TeValue, compute_op};

/// Which default schedules a kernel is lowered with (a backend picks one per target:
/// `kiln_executor::Backend::schedule_kind`). Not a target: targets are
/// `kiln_executor::TargetKind`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum ScheduleKind {
    /// A multi-core CPU with SIMD: parallel outer loops, vectorized inner loops.
    Cpu,
    /// A GPU: loops bound to blocks and threads.
    Gpu,
}

impl ScheduleKind {
    /// `cpu` or `gpu`.
    pub fn name(self) -> &'static str {
        match self {
            ScheduleKind::Cpu => "cpu",
            ScheduleKind::Gpu => "gpu",
        }
    }

    /// The schedule kind named `s` (`cpu`, `gpu`).
    pub fn from_name(s: &str) -> Option<ScheduleKind> {
        [ScheduleKind::Cpu, ScheduleKind::Gpu]
            .into_iter()
            .find(|t| t.name() == s)
    }
}

/// Converts graph-IR errors (bad models) into this crate's error.
fn ir_err(e: kiln_ir::Error) -> Error {
    Error::InvalidArgument(e.to_string())
}

/// A buffer-friendly name from a graph-IR variable name.
fn sanitize(name: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.is_empty() || s.starts_with(|c: char| c.is_ascii_digit()) {
        format!("p_{s}")
    } else {
        s
    }
}

/// The tensor types of `ty` in order (tuples flattened).
fn leaves(ty: &Type) -> Vec<&kiln_ir::TensorType> {
    ty.flatten_tensors()
}

/// Rebuilds a value of type `ty` from a flat list of tensors.
fn regroup(ty: &Type, flat: &mut impl Iterator<Item = Tensor>) -> Result<TeValue> {
    match ty {
        Type::Tensor(_) => flat
            .next()
            .map(TeValue::Tensor)
            .ok_or_else(|| Error::InvalidArgument("too few tensors for a tuple type".into())),
        Type::Tuple(fields) => fields
            .iter()
            .map(|f| regroup(f, flat))
            .collect::<Result<_>>()
            .map(TeValue::Tuple),
        Type::Func(_) => Err(Error::Unsupported(
            "a function-typed parameter cannot be lowered to a kernel".into(),
        )),
    }
}

/// The immediate of a constant whose elements are all equal, if it has any element.
fn splat(c: &kiln_ir::NDArray) -> Option<Expr> {
    let d = c.dtype();
    if c.numel() == 0 {
        return None;
    }
    if d.is_float() {
        let v = c.to_f64_vec();
        let first = v[0];
        v.iter()
            .all(|x| x.to_bits() == first.to_bits())
            .then(|| Expr::imm(first, d))
    } else {
        let v = c.to_i64_vec();
        let first = v[0];
        v.iter().all(|&x| x == first).then(|| {
            if d == DType::Bool {
                Expr::Bool(first != 0)
            } else {
                Expr::Int {
                    value: first,
                    dtype: d,
                }
            }
        })
    }
}

/// The TVM-style base name of a function's kernel: `fused_` and its op names in order,
/// dots as underscores (`fused_nn_conv2d_add_nn_relu`).
pub fn kernel_name(m: &Module, func: ExprId) -> Result<String> {
    let f = m.function_at(func).map_err(ir_err)?;
    let mut name = String::from("fused");
    for id in kiln_ir::visit::body_order(m, f.body) {
        if let Some(op) = m.kind(id).op() {
            name.push('_');
            name.push_str(&op.name().replace('.', "_"));
        }
    }
    Ok(name)
}

/// Lowers the function literal `func` of `m` to one kernel called `name`, scheduled
/// with the default schedule of `target` (see the module doc for the pipeline).
pub fn lower_function(
    m: &Module,
    func: ExprId,
    target: ScheduleKind,
    name: &str,
) -> Result<PrimFunc> {
    let f = m.function_at(func).map_err(ir_err)?.clone();
    let mut ctx = Ctx::new();
    let mut env: HashMap<ExprId, TeValue> = HashMap::new();
    // 1. Placeholders: one per tensor leaf of each parameter, in order.
    let mut inputs: Vec<(OpId, Buffer)> = vec![];
    for &p in &f.params {
        let pname = sanitize(m.var_name(p).unwrap_or("p"));
        let ty = m.ty(p).clone();
        let ls = leaves(&ty);
        let mut flat = vec![];
        for (k, t) in ls.iter().enumerate() {
            let n = if ls.len() == 1 {
                pname.clone()
            } else {
                format!("{pname}_{k}")
            };
            check_shape(&n, &t.shape)?;
            let ph = ctx.placeholder(&t.shape, t.dtype, &n)?;
            inputs.push((
                ph.op(),
                Buffer::new(n, t.shape.clone(), t.dtype, Scope::Global),
            ));
            flat.push(ph);
        }
        env.insert(p, regroup(&ty, &mut flat.into_iter())?);
    }
    // 2. The body, node by node.
    for id in kiln_ir::visit::body_order(m, f.body) {
        if env.contains_key(&id) {
            continue;
        }
        let v = match m.kind(id) {
            ExprKind::Var { name } => {
                return Err(Error::InvalidArgument(format!(
                    "variable %{name} is not a parameter of the function being lowered"
                )));
            }
            ExprKind::Constant(c) => {
                let t =
                    m.ty(id).as_tensor().cloned().ok_or_else(|| {
                        Error::InvalidArgument("a constant must be a tensor".into())
                    })?;
                check_shape("constant", &t.shape)?;
                let value = splat(c).ok_or_else(|| {
                    Error::Unsupported(format!(
                        "a constant of shape {:?} with distinct elements inside a kernel; \
                         pass it as a parameter instead",
                        t.shape
                    ))
                })?;
                TeValue::Tensor(ctx.compute(&t.shape, "T_const", |_| value)?)
            }
            ExprKind::Call {
                callee: Callee::Op(op),
                args,
            } => {
                let vals = args
                    .iter()
                    .map(|a| value_of(&env, *a))
                    .collect::<Result<Vec<_>>>()?;
                let out_ty = m.ty(id).clone();
                for t in leaves(&out_ty) {
                    check_shape(op.name(), &t.shape)?;
                }
                compute_op(&mut ctx, op, &vals, &out_ty)?
            }
            ExprKind::Call {
                callee: Callee::Expr(_),
                ..
            } => {
                return Err(Error::Unsupported(
                    "a call of a function inside a kernel; only op calls lower (fuse or \
                     inline the callee first)"
                        .into(),
                ));
            }
            ExprKind::Tuple(fields) => TeValue::Tuple(
                fields
                    .iter()
                    .map(|a| value_of(&env, *a))
                    .collect::<Result<_>>()?,
            ),
            ExprKind::TupleGetItem { tuple, index } => match value_of(&env, *tuple)? {
                TeValue::Tuple(mut v) if *index < v.len() => v.swap_remove(*index),
                _ => {
                    return Err(Error::InvalidArgument(format!(
                        "tuple_get_item {index} of a value that is not a tuple that long"
                    )));
                }
            },
            ExprKind::Function(_) | ExprKind::GlobalVar(_) => {
                return Err(Error::Unsupported(
                    "a function value inside a kernel".into(),
                ));
            }
        };
        env.insert(id, v);
    }
    // 3. Outputs: distinct computes.
    let result = value_of(&env, f.body)?;
    let mut outputs: Vec<Tensor> = vec![];
    let placeholders: HashSet<OpId> = inputs.iter().map(|(o, _)| *o).collect();
    for (k, t) in result.flatten().into_iter().enumerate() {
        let anchor = matches!(
            ctx.tag(t.op()),
            super::Tag::Conv2d | super::Tag::Dense | super::Tag::BatchMatmul
        );
        // A copy for placeholders and repeats; for an anchor, its output stage (TVM's
        // cache_write: the anchor then accumulates in a local tile).
        let t =
            if anchor || placeholders.contains(&t.op()) || outputs.iter().any(|o| o.op() == t.op())
            {
                ctx.compute(t.shape(), &format!("T_copy{k}"), |i| t.at(i))?
            } else {
                t
            };
        outputs.push(t);
    }
    if outputs.is_empty() {
        return Err(Error::Unsupported(
            "a function without tensor results has nothing to compute".into(),
        ));
    }
    // 4. Inline the injective intermediates, then the target's default schedule.
    let mut s = Schedule::new(&ctx.graph, &outputs)?;
    let reachable = reachable_ops(&ctx, &outputs);
    for (i, op) in ctx.graph.ops().iter().enumerate() {
        let id = OpId(i as u32);
        let injective = ctx.tag(id) == super::Tag::Injective && op.body().is_some();
        if injective
            && reachable.contains(&id)
            && !ctx.is_kept(id)
            && !(target == ScheduleKind::Cpu && ctx.is_padding(id))
            && !outputs.iter().any(|o| o.op() == id)
        {
            crate::schedule_default::compute_inline(&mut s, id)?;
        }
    }
    crate::schedule_default::apply(&mut s, &ctx, &outputs, target)?;
    let mut func = s.lower(name)?;
    // 5. Every parameter leaf is an input, read or not.
    let used: Vec<OpId> = {
        let mut v: Vec<OpId> = inputs
            .iter()
            .map(|(o, _)| *o)
            .filter(|o| reachable.contains(o))
            .collect();
        v.sort();
        v
    };
    if used.len() != func.num_inputs {
        return Err(Error::Unsupported(format!(
            "lowering @{name} gave {} inputs, expected {} (internal mismatch)",
            func.num_inputs,
            used.len()
        )));
    }
    let lowered_inputs: Vec<_> = func.inputs().to_vec();
    let outputs_ids: Vec<_> = func.outputs().to_vec();
    let mut params = Vec::with_capacity(inputs.len() + outputs_ids.len());
    for (op, buf) in inputs {
        match used.iter().position(|&u| u == op) {
            Some(k) => params.push(lowered_inputs[k]),
            None => params.push(func.add_buffer(buf)),
        }
    }
    func.num_inputs = params.len();
    params.extend(outputs_ids);
    func.params = params;
    Ok(func)
}

/// The operations the outputs read, directly or through other operations.
pub(crate) fn reachable_ops(ctx: &Ctx, outputs: &[Tensor]) -> HashSet<OpId> {
    let mut seen = HashSet::new();
    let mut stack: Vec<OpId> = outputs.iter().map(|t| t.op()).collect();
    while let Some(o) = stack.pop() {
        if !seen.insert(o) {
            continue;
        }
        if let Some(body) = ctx.graph.ops().get(o.index()).and_then(|op| op.body()) {
            body.visit(&mut |e| {
                if let Expr::Read { tensor, .. } = e {
                    stack.push(tensor.op());
                }
            });
        }
    }
    seen
}

fn value_of(env: &HashMap<ExprId, TeValue>, id: ExprId) -> Result<TeValue> {
    env.get(&id)
        .cloned()
        .ok_or_else(|| Error::InvalidArgument(format!("expression {id} has no value yet")))
}

/// Refuses shapes the tensor-expression layer cannot lower (an extent of 0).
fn check_shape(what: &str, shape: &[usize]) -> Result<()> {
    if shape.contains(&0) {
        return Err(Error::Unsupported(format!(
            "`{what}` has shape {shape:?} with no elements; empty tensors are not lowered"
        )));
    }
    Ok(())
}

/// One kernel per op call of `@main` (and per call of a primitive function), in
/// evaluation order, scheduled for `target`. Tuples and tuple-gets are not kernels; an
/// op with a tuple result (`split`, `nn.batch_norm`) is one kernel with one output
/// buffer per field. Kernels are named TVM-style, `fused_nn_conv2d`, then
/// `fused_nn_conv2d_1`, ... for repeats of a name.
pub fn kernels_of(m: &Module, target: ScheduleKind) -> Result<Vec<PrimFunc>> {
    let main = m.main().map_err(ir_err)?;
    let mut counts: HashMap<String, usize> = HashMap::new();
    let mut out = vec![];
    for id in kiln_ir::visit::body_order(m, main.body) {
        let ExprKind::Call { callee, args } = m.kind(id) else {
            continue;
        };
        let (module, func) = match callee {
            Callee::Op(op) => one_op_module(m, op, args)?,
            Callee::Expr(f) => match m.kind(*f) {
                ExprKind::Function(_) => kiln_ir::visit::extract(m, *f),
                _ => {
                    return Err(Error::Unsupported(format!(
                        "call {id} of a global function; inline it before lowering"
                    )));
                }
            },
        };
        let base = kernel_name(&module, func)?;
        let n = counts.entry(base.clone()).or_insert(0);
        let name = if *n == 0 {
            base.clone()
        } else {
            format!("{base}_{n}")
        };
        *n += 1;
        let k = lower_function(&module, func, target, &name).map_err(|e| match e {
            Error::Unsupported(msg) => Error::Unsupported(format!("kernel @{name}: {msg}")),
            Error::InvalidArgument(msg) => Error::InvalidArgument(format!("kernel @{name}: {msg}")),
            other => other,
        })?;
        out.push(k);
    }
    Ok(out)
}

/// A module holding one primitive function `fn(args...) { op(args...) }`, with the
/// argument types (and variable names, where the argument is a variable) of `args`.
fn one_op_module(m: &Module, op: &kiln_ir::Op, args: &[ExprId]) -> Result<(Module, ExprId)> {
    let mut k = Module::new();
    let mut params = vec![];
    for (i, &a) in args.iter().enumerate() {
        let name = m
            .var_name(a)
            .map(str::to_string)
            .unwrap_or_else(|| format!("p{i}"));
        params.push(k.var(name, m.ty(a).clone()));
    }
    let call = k.call(op.clone(), &params).map_err(ir_err)?;
    let f = k
        .function(&params, call, FnAttrs { primitive: true })
        .map_err(ir_err)?;
    Ok((k, f))
}
