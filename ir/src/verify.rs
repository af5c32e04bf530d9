//! The verifier: checks a module's invariants and returns every violation with its
//! location, not just the first. Run it between passes in tests and debug builds.
//!
//! Invariants checked:
//! - the module has a `@main` function;
//! - every node refers only to nodes created before it (ids in range, arena order is a
//!   topological order);
//! - every node is well typed: its stored type equals the type its op's type rule (or
//!   the tuple, projection, function or call rule) gives for its children's types;
//! - function parameters are variables, and no variable is a parameter of two functions;
//! - every variable used in a function body is bound by that function or an enclosing
//!   one; primitive functions (fused groups) are closed;
//! - every global reference names a defined global function.

use std::collections::{HashMap, HashSet};
use std::fmt;

use crate::error::{Error, Result};
use crate::expr::{Callee, ExprId, ExprKind, Module};
use crate::ty::{FuncType, Type};
use crate::visit::body_order;

/// One problem the verifier found, with where it is.
#[derive(Clone, Debug, PartialEq)]
pub struct VerifyError {
    /// `@function %binding` as the printer names it, or the node id.
    pub location: String,
    /// The invariant broken, and how.
    pub message: String,
}

impl fmt::Display for VerifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.location, self.message)
    }
}

impl VerifyError {
    pub(crate) fn join(errors: &[VerifyError]) -> String {
        errors
            .iter()
            .map(|e| format!("  {e}"))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// Checks every invariant; `Err(Error::Verify(all problems))` if any fails.
pub fn verify(m: &Module) -> Result<()> {
    let errors = verify_errors(m);
    if errors.is_empty() {
        Ok(())
    } else {
        Err(Error::Verify(errors))
    }
}

/// Every invariant violation in `m` (empty when the module is sound). Locations are
/// named by printing the module once, and only when something is wrong.
pub fn verify_errors(m: &Module) -> Vec<VerifyError> {
    let mut v = Verifier {
        m,
        found: Vec::new(),
    };
    if m.main_id().is_err() {
        v.found.push((None, "there is no @main function".into()));
    }
    v.check_nodes();
    if v.found.is_empty() {
        v.check_scopes();
    }
    if v.found.is_empty() {
        return vec![];
    }
    let names = crate::text::module_binding_names(m);
    v.found
        .into_iter()
        .map(|(id, message)| VerifyError {
            location: id.map_or_else(|| "module".to_string(), |id| location(m, &names, id)),
            message,
        })
        .collect()
}

/// `@def %binding (`op`)` as the printer names node `id`, or its id.
fn location(m: &Module, names: &HashMap<ExprId, String>, id: ExprId) -> String {
    let what = match m.get(id).map(|n| &n.kind) {
        Ok(ExprKind::Call {
            callee: Callee::Op(op),
            ..
        }) => format!(" (`{}`)", op.name()),
        _ => String::new(),
    };
    match names.get(&id) {
        Some(name) => format!("{name}{what}"),
        None => format!("node {id}{what}"),
    }
}

struct Verifier<'m> {
    m: &'m Module,
    /// Each problem: the node it is at (`None`: the module) and the message.
    found: Vec<(Option<ExprId>, String)>,
}

impl Verifier<'_> {
    fn error(&mut self, id: ExprId, message: impl Into<String>) {
        self.found.push((Some(id), message.into()));
    }

    /// Ids, topological order and types of every node in the arena.
    fn check_nodes(&mut self) {
        for id in self.m.ids() {
            let kind = &self.m.node(id).kind;
            let bad: Vec<ExprId> = kind
                .children()
                .into_iter()
                .filter(|c| c.index() >= id.index())
                .collect();
            if !bad.is_empty() {
                let list: Vec<String> = bad.iter().map(|c| c.to_string()).collect();
                self.error(
                    id,
                    format!(
                        "refers to {} which is not defined before it",
                        list.join(", ")
                    ),
                );
                continue;
            }
            match self.expected_type(id) {
                Ok(ty) if &ty != self.m.ty(id) => self.error(
                    id,
                    format!("stored type {} but its operands give {ty}", self.m.ty(id)),
                ),
                Ok(_) => {}
                Err(e) => self.error(id, e.to_string()),
            }
        }
    }

    /// The type node `id` should have, from its children's stored types.
    fn expected_type(&self, id: ExprId) -> Result<Type> {
        let m = self.m;
        Ok(match m.kind(id) {
            ExprKind::Var { .. } => m.ty(id).clone(),
            ExprKind::Constant(c) => Type::Tensor(c.ty()),
            ExprKind::Call {
                callee: Callee::Op(op),
                args,
            } => {
                let tys: Vec<Type> = args.iter().map(|&a| m.ty(a).clone()).collect();
                op.infer_type(&tys)?
            }
            ExprKind::Call {
                callee: Callee::Expr(f),
                args,
            } => {
                let Type::Func(ft) = m.ty(*f) else {
                    return Err(Error::ty(
                        "call",
                        format!("callee has type {}, not a function", m.ty(*f)),
                    ));
                };
                let tys: Vec<Type> = args.iter().map(|&a| m.ty(a).clone()).collect();
                if tys != ft.params {
                    let shown: Vec<String> = tys.iter().map(|t| t.to_string()).collect();
                    return Err(Error::ty(
                        "call",
                        format!(
                            "arguments ({}) do not match the callee's type {}",
                            shown.join(", "),
                            m.ty(*f)
                        ),
                    ));
                }
                (*ft.ret).clone()
            }
            ExprKind::Tuple(fields) => {
                Type::Tuple(fields.iter().map(|&f| m.ty(f).clone()).collect())
            }
            ExprKind::TupleGetItem { tuple, index } => match m.ty(*tuple) {
                Type::Tuple(fields) if *index < fields.len() => fields[*index].clone(),
                other => {
                    return Err(Error::ty(
                        "tuple_get_item",
                        format!("cannot take field {index} of {other}"),
                    ));
                }
            },
            ExprKind::Function(f) => {
                for &p in &f.params {
                    if !matches!(m.kind(p), ExprKind::Var { .. }) {
                        return Err(Error::InvalidModel(format!(
                            "parameter {p} is not a variable"
                        )));
                    }
                }
                Type::Func(FuncType {
                    params: f.params.iter().map(|&p| m.ty(p).clone()).collect(),
                    ret: Box::new(m.ty(f.body).clone()),
                })
            }
            ExprKind::GlobalVar(name) => {
                let f = m.global_id(name).ok_or_else(|| {
                    Error::InvalidModel(format!("unknown global function @{name}"))
                })?;
                m.ty(f).clone()
            }
        })
    }

    /// Variable binding and scoping, per global function.
    fn check_scopes(&mut self) {
        let mut binder: HashMap<ExprId, ExprId> = HashMap::new();
        for (_, def) in self.m.globals() {
            self.check_function(*def, &HashSet::new(), &mut binder);
        }
    }

    fn check_function(
        &mut self,
        func: ExprId,
        outer: &HashSet<ExprId>,
        binder: &mut HashMap<ExprId, ExprId>,
    ) {
        let Ok(f) = self.m.function_at(func) else {
            return;
        };
        let mut scope = if f.attrs.primitive {
            HashSet::new()
        } else {
            outer.clone()
        };
        for &p in &f.params {
            if let Some(&other) = binder.get(&p)
                && other != func
            {
                let msg = format!("variable is a parameter of two functions ({other} and {func})");
                self.error(p, msg);
            }
            binder.insert(p, func);
            scope.insert(p);
        }
        for id in body_order(self.m, f.body) {
            match self.m.kind(id) {
                ExprKind::Var { name } if !scope.contains(&id) => {
                    let how = if f.attrs.primitive {
                        " (primitive functions must be closed)"
                    } else {
                        ""
                    };
                    let msg = format!(
                        "variable %{name} is used but not bound by an enclosing function{how}"
                    );
                    self.error(id, msg);
                }
                ExprKind::Function(_) if id != func => self.check_function(id, &scope, binder),
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::expr::FnAttrs;

    #[test]
    fn sound_module_passes() {
        let mut m = Module::new();
        let x = m.var("x", Type::tensor([2], DType::F32));
        let t = m.tuple(&[x, x]).unwrap();
        m.set_main(&[x], t).unwrap();
        verify(&m).unwrap();
    }

    #[test]
    fn reports_every_problem_with_a_location() {
        let mut m = Module::new();
        let x = m.var("x", Type::tensor([2], DType::F32));
        let y = m.var("y", Type::tensor([3], DType::F32));
        // A tuple whose stored type lies, and a use of y that nothing binds.
        let bad = m.push_unchecked(ExprKind::Tuple(vec![x]), Type::tensor([2], DType::F32));
        let t = m.tuple(&[bad, y]).unwrap();
        m.set_main(&[x], t).unwrap();
        let errors = verify_errors(&m);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(errors[0].message.contains(
            "stored type Tensor[(2), float32] but its operands give (Tensor[(2), float32],)"
        ));
        // Fix the type; the unbound variable is now reported.
        let mut m2 = Module::new();
        let x = m2.var("x", Type::tensor([2], DType::F32));
        let y = m2.var("y", Type::tensor([3], DType::F32));
        let t = m2.tuple(&[x, y]).unwrap();
        m2.set_main(&[x], t).unwrap();
        let err = verify(&m2).unwrap_err().to_string();
        assert!(
            err.contains("@main %y") && err.contains("not bound"),
            "{err}"
        );
    }

    #[test]
    fn missing_main_forward_refs_and_open_primitives() {
        let mut m = Module::new();
        let x = m.var("x", Type::tensor([2], DType::F32));
        let fwd = m.push_unchecked(ExprKind::Tuple(vec![ExprId::new(5)]), Type::Tuple(vec![]));
        let errors = verify_errors(&m);
        assert!(errors.iter().any(|e| e.message.contains("no @main")));
        assert!(
            errors.iter().any(|e| e.location.contains(&fwd.to_string())
                && e.message.contains("not defined before"))
        );
        // A primitive function that captures an outer variable.
        let mut m = Module::new();
        let x2 = m.var("x", Type::tensor([2], DType::F32));
        let p = m.var("p", Type::tensor([2], DType::F32));
        let body = m.tuple(&[p, x2]).unwrap();
        let f = m.function(&[p], body, FnAttrs { primitive: true }).unwrap();
        let call = m.call_function(f, &[x2]).unwrap();
        m.set_main(&[x2], call).unwrap();
        let err = verify(&m).unwrap_err().to_string();
        assert!(err.contains("primitive functions must be closed"), "{err}");
        let _ = x;
    }

    #[test]
    fn errors_deep_in_many_functions_are_named() {
        // 3,000 globals, each calling the previous; the last one's body is mistyped.
        // Naming prints the module once (it used to print every earlier def per def).
        let mut m = Module::new();
        let ty = Type::tensor([2], DType::F32);
        let mut prev: Option<String> = None;
        for k in 0..3000 {
            let x = m.var("x", ty.clone());
            let body = match &prev {
                None => x,
                Some(name) => {
                    let g = m.push_unchecked(
                        ExprKind::GlobalVar(name.clone()),
                        Type::Func(FuncType {
                            params: vec![ty.clone()],
                            ret: Box::new(ty.clone()),
                        }),
                    );
                    m.call_function(g, &[x]).unwrap()
                }
            };
            let body = if k == 2999 {
                m.push_unchecked(ExprKind::Tuple(vec![body]), ty.clone())
            } else {
                body
            };
            let f = m.function(&[x], body, FnAttrs::default()).unwrap();
            let name = format!("f{k}");
            m.define(&name, f).unwrap();
            prev = Some(name);
        }
        let x = m.var("x", ty.clone());
        m.set_main(&[x], x).unwrap();
        let errors = verify_errors(&m);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(errors[0].location, "@f2999 result of @f2999");
    }
}
