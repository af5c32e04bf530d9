//! The reference interpreter: evaluates a module's `@main` on named inputs by running
//! each op's reference evaluation. It is the oracle of the whole project — clear before
//! fast. Nodes are evaluated in topological order, each once (shared subgraphs are not
//! recomputed), and a value is dropped as soon as its last user has run, so peak memory
//! stays near that of the live tensors. Before an op runs, its result plus the live
//! values must fit the memory budget ([`crate::tensor::budget`]), and calls nest at most
//! [`MAX_CALL_DEPTH`] deep, so a model asking for too much is an error, not an abort.

use std::collections::{BTreeMap, HashMap};

use crate::error::{Error, Result};
use crate::expr::{Callee, ExprId, ExprKind, Module};
use crate::tensor::NDArray;
use crate::tensor::budget;
use crate::ty::Type;
use crate::value::Value;
use crate::visit::body_order;

/// How deeply function calls may nest during one evaluation.
pub const MAX_CALL_DEPTH: usize = 200;

/// Named tensors: a model's inputs and params, bound to `@main`'s parameters by name.
pub type Inputs = BTreeMap<String, NDArray>;

/// Evaluates `@main` with its parameters bound by name from `inputs` (inputs and params
/// together, as TVM's executor binds them). Every parameter must be given, with its
/// exact shape and dtype; names that are not parameters are an error.
pub fn evaluate(m: &Module, inputs: &Inputs) -> Result<Value> {
    let main = m.main_id()?;
    let f = m.function_at(main)?;
    let mut args = Vec::with_capacity(f.params.len());
    for &p in &f.params {
        let name = m.var_name(p).unwrap_or("?");
        let value = inputs.get(name).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "missing input %{name}: {} (no tensor of that name was given)",
                m.ty(p)
            ))
        })?;
        args.push(Value::Tensor(value.clone()));
    }
    for name in inputs.keys() {
        if !f.params.iter().any(|&p| m.var_name(p) == Some(name)) {
            let known: Vec<&str> = f.params.iter().filter_map(|&p| m.var_name(p)).collect();
            return Err(Error::InvalidArgument(format!(
                "`{name}` is not a parameter of @main (parameters: {})",
                known.join(", ")
            )));
        }
    }
    evaluate_function(m, main, args)
}

/// Calls the function literal `func` on `args`, checking each argument's type.
pub fn evaluate_function(m: &Module, func: ExprId, args: Vec<Value>) -> Result<Value> {
    call_function(m, func, args, 0)
}

/// [`evaluate_function`] at call depth `depth`.
fn call_function(m: &Module, func: ExprId, args: Vec<Value>, depth: usize) -> Result<Value> {
    if depth >= MAX_CALL_DEPTH {
        return Err(Error::LimitExceeded(format!(
            "function calls nest more than {MAX_CALL_DEPTH} deep (at {func})"
        )));
    }
    let f = m.function_at(func)?;
    if args.len() != f.params.len() {
        return Err(Error::InvalidArgument(format!(
            "function {func} takes {} argument(s), got {}",
            f.params.len(),
            args.len()
        )));
    }
    let mut env: HashMap<ExprId, Value> = HashMap::new();
    for (&p, v) in f.params.iter().zip(args) {
        let (want, got) = (m.ty(p), v.ty());
        if &got != want {
            let name = m.var_name(p).unwrap_or("?");
            return Err(Error::InvalidArgument(format!(
                "input %{name} must be {want}, got {got}"
            )));
        }
        env.insert(p, v);
    }
    Frame::new(m, f.body, env, depth).run()
}

/// One function activation: the values computed so far and how many users each has
/// left.
struct Frame<'m> {
    m: &'m Module,
    body: ExprId,
    order: Vec<ExprId>,
    env: HashMap<ExprId, Value>,
    uses_left: HashMap<ExprId, usize>,
    /// Bytes held by the values in `env`.
    live_bytes: usize,
    depth: usize,
}

impl<'m> Frame<'m> {
    fn new(m: &'m Module, body: ExprId, env: HashMap<ExprId, Value>, depth: usize) -> Frame<'m> {
        let order = body_order(m, body);
        let mut uses_left: HashMap<ExprId, usize> = HashMap::new();
        for &id in &order {
            for c in operands(m, id) {
                *uses_left.entry(c).or_default() += 1;
            }
        }
        *uses_left.entry(body).or_default() += 1;
        let live_bytes = env.values().map(value_bytes).sum();
        Frame {
            m,
            body,
            order,
            env,
            uses_left,
            live_bytes,
            depth,
        }
    }

    fn run(mut self) -> Result<Value> {
        for id in std::mem::take(&mut self.order) {
            if self.env.contains_key(&id) {
                continue;
            }
            let value = match self.m.kind(id) {
                // Function literals are not values; they are entered when called.
                ExprKind::Function(_) | ExprKind::GlobalVar(_) => continue,
                ExprKind::Var { name } => {
                    return Err(Error::Eval(format!("variable %{name} ({id}) is not bound")));
                }
                _ => {
                    self.check_budget(id)?;
                    self.eval_node(id)?
                }
            };
            for c in operands(self.m, id) {
                self.release(c);
            }
            self.live_bytes += value_bytes(&value);
            self.env.insert(id, value);
        }
        self.take(self.body)
    }

    fn get(&self, id: ExprId) -> Result<&Value> {
        self.env
            .get(&id)
            .ok_or_else(|| Error::Eval(format!("{id} was used before it was computed")))
    }

    /// Removes a value once nothing else needs it.
    fn release(&mut self, id: ExprId) {
        if let Some(n) = self.uses_left.get_mut(&id) {
            *n -= 1;
            if *n == 0
                && let Some(v) = self.env.remove(&id)
            {
                self.live_bytes -= value_bytes(&v);
            }
        }
    }

    fn take(&mut self, id: ExprId) -> Result<Value> {
        self.env
            .remove(&id)
            .ok_or_else(|| Error::Eval(format!("{id} was used before it was computed")))
    }

    /// An error if node `id`'s result, with the values live now, exceeds the budget.
    fn check_budget(&self, id: ExprId) -> Result<()> {
        let what = || match self.m.kind(id) {
            ExprKind::Call {
                callee: Callee::Op(op),
                ..
            } => format!("the result of `{}` ({id})", op.name()),
            _ => format!("the value of {id}"),
        };
        let need = type_bytes(self.m.ty(id)).ok_or_else(|| {
            Error::LimitExceeded(format!("{} has more bytes than fit in memory", what()))
        })?;
        let total = need.checked_add(self.live_bytes).unwrap_or(usize::MAX);
        budget::check_request(&format!("{} (with the values live)", what()), total)
    }

    fn eval_node(&self, id: ExprId) -> Result<Value> {
        let m = self.m;
        match m.kind(id) {
            ExprKind::Constant(c) => Ok(Value::Tensor((**c).clone())),
            ExprKind::Call { callee, args } => {
                let vals: Vec<Value> = args
                    .iter()
                    .map(|&a| self.get(a).cloned())
                    .collect::<Result<_>>()?;
                match callee {
                    Callee::Op(op) => {
                        let out = op.eval(&vals, m.ty(id)).map_err(|e| match e {
                            Error::Eval(msg) => {
                                Error::Eval(format!("`{}` ({id}): {msg}", op.name()))
                            }
                            other => other,
                        })?;
                        check_result(op.name(), &out, m.ty(id))?;
                        Ok(out)
                    }
                    Callee::Expr(f) => match m.kind(*f) {
                        ExprKind::Function(_) => call_function(m, *f, vals, self.depth + 1),
                        ExprKind::GlobalVar(name) => {
                            let g = m.global_id(name).ok_or_else(|| {
                                Error::Eval(format!("unknown global function @{name}"))
                            })?;
                            call_function(m, g, vals, self.depth + 1)
                        }
                        _ => Err(Error::Unsupported(format!(
                            "calling {f}, a function-typed value that is not a function literal or global"
                        ))),
                    },
                }
            }
            ExprKind::Tuple(fields) => Ok(Value::Tuple(
                fields
                    .iter()
                    .map(|&f| self.get(f).cloned())
                    .collect::<Result<_>>()?,
            )),
            ExprKind::TupleGetItem { tuple, index } => match self.get(*tuple)? {
                Value::Tuple(vs) => vs.get(*index).cloned().ok_or_else(|| {
                    Error::Eval(format!("tuple index {index} out of range at {id}"))
                }),
                Value::Tensor(_) => Err(Error::Eval(format!("{id}: projection of a tensor"))),
            },
            ExprKind::Var { .. } | ExprKind::Function(_) | ExprKind::GlobalVar(_) => {
                Err(Error::Eval(format!("{id} is not an evaluable expression")))
            }
        }
    }
}

/// The nodes whose values node `id` reads (a called function literal is not a value).
fn operands(m: &Module, id: ExprId) -> Vec<ExprId> {
    match m.kind(id) {
        ExprKind::Call { args, .. } => args.clone(),
        ExprKind::Function(_) => vec![],
        other => other.children(),
    }
}

/// Bytes held by a value.
fn value_bytes(v: &Value) -> usize {
    match v {
        Value::Tensor(t) => t.numel() * t.dtype().size_bytes(),
        Value::Tuple(vs) => vs.iter().map(value_bytes).sum(),
    }
}

/// Bytes a value of type `ty` holds (`None` when that overflows); functions hold none.
fn type_bytes(ty: &Type) -> Option<usize> {
    match ty {
        Type::Tensor(t) => budget::checked_numel(&t.shape)
            .ok()?
            .checked_mul(t.dtype.size_bytes()),
        Type::Tuple(fields) => fields
            .iter()
            .try_fold(0usize, |n, f| n.checked_add(type_bytes(f)?)),
        Type::Func(_) => Some(0),
    }
}

/// An op's evaluation must produce exactly the type its type rule promised.
fn check_result(op: &str, out: &Value, want: &Type) -> Result<()> {
    let got = out.ty();
    if &got != want {
        return Err(Error::Eval(format!(
            "`{op}` evaluated to {got} but its type rule says {want} (a bug in the op)"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::expr::FnAttrs;

    fn tuple_module() -> Module {
        // main(x, y) = f((x, y).1, x) where f(a, b) = (b, a)
        let mut m = Module::new();
        let x = m.var("x", Type::tensor([2], DType::F32));
        let y = m.var("y", Type::tensor([1], DType::I32));
        let a = m.var("a", Type::tensor([1], DType::I32));
        let b = m.var("b", Type::tensor([2], DType::F32));
        let fb = m.tuple(&[b, a]).unwrap();
        let f = m
            .function(&[a, b], fb, FnAttrs { primitive: true })
            .unwrap();
        let t = m.tuple(&[x, y]).unwrap();
        let g = m.tuple_get(t, 1).unwrap();
        let call = m.call_function(f, &[g, x]).unwrap();
        m.set_main(&[x, y], call).unwrap();
        m
    }

    fn inputs() -> Inputs {
        let mut i = Inputs::new();
        i.insert(
            "x".into(),
            NDArray::from_vec([2], vec![1.0f32, 2.0]).unwrap(),
        );
        i.insert("y".into(), NDArray::from_vec([1], vec![7i32]).unwrap());
        i
    }

    #[test]
    fn evaluates_tuples_and_function_calls() {
        let m = tuple_module();
        let out = evaluate(&m, &inputs()).unwrap().flatten();
        assert_eq!(out[0].to_vec::<f32>().unwrap(), vec![1.0, 2.0]);
        assert_eq!(out[1].to_vec::<i32>().unwrap(), vec![7]);
    }

    #[test]
    fn input_errors_are_clear() {
        let m = tuple_module();
        let mut i = inputs();
        i.remove("y");
        let e = evaluate(&m, &i).unwrap_err().to_string();
        assert!(e.contains("missing input %y: Tensor[(1), int32]"), "{e}");
        let mut i = inputs();
        i.insert("x".into(), NDArray::zeros([3], DType::F32));
        let e = evaluate(&m, &i).unwrap_err().to_string();
        assert!(
            e.contains("input %x must be Tensor[(2), float32], got Tensor[(3), float32]"),
            "{e}"
        );
        let mut i = inputs();
        i.insert("z".into(), NDArray::zeros([3], DType::F32));
        let e = evaluate(&m, &i).unwrap_err().to_string();
        assert!(
            e.contains("`z` is not a parameter of @main (parameters: x, y)"),
            "{e}"
        );
    }

    #[test]
    fn results_beyond_the_memory_budget_are_errors() {
        // (2^20, 1) + (1, 2^20) float32 is 4 TiB: far beyond any budget.
        let mut m = Module::new();
        let a = m.var("a", Type::tensor([1 << 20, 1], DType::F32));
        let b = m.var("b", Type::tensor([1, 1 << 20], DType::F32));
        let add = crate::op::Binary {
            kind: crate::op::BinaryKind::Add,
        };
        let y = m.call(add, &[a, b]).unwrap();
        m.set_main(&[a, b], y).unwrap();
        let mut i = Inputs::new();
        i.insert("a".into(), NDArray::zeros([1 << 20, 1], DType::F32));
        i.insert("b".into(), NDArray::zeros([1, 1 << 20], DType::F32));
        let e = evaluate(&m, &i).unwrap_err();
        assert!(matches!(e, Error::LimitExceeded(_)), "{e}");
        assert!(
            e.to_string().contains("the result of `add`")
                && e.to_string().contains("memory budget"),
            "{e}"
        );
    }

    #[test]
    fn deeply_nested_calls_are_errors() {
        // f_0(x) = x, f_k(x) = f_{k-1}(x): a chain of calls deeper than the limit.
        let mut m = Module::new();
        let ty = Type::tensor([1], DType::F32);
        let p = m.var("p0", ty.clone());
        let mut f = m.function(&[p], p, FnAttrs::default()).unwrap();
        for k in 1..=MAX_CALL_DEPTH + 5 {
            let p = m.var(format!("p{k}"), ty.clone());
            let c = m.call_function(f, &[p]).unwrap();
            f = m.function(&[p], c, FnAttrs::default()).unwrap();
        }
        let x = m.var("x", ty);
        let c = m.call_function(f, &[x]).unwrap();
        m.set_main(&[x], c).unwrap();
        let mut i = Inputs::new();
        i.insert("x".into(), NDArray::zeros([1], DType::F32));
        let e = evaluate(&m, &i).unwrap_err();
        assert!(e.to_string().contains("nest more than 200 deep"), "{e}");
    }
}
