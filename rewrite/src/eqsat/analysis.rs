//! The e-class analysis: every class knows its [`Type`] (shape and dtype), whether it is
//! a compile-time constant (a constant leaf, or an op applied to constants only), and,
//! for constants whose elements are all equal, that value (`splat`, what `x * 1` and
//! `x + 0` look for). The variable and constant side tables the [`Node`] leaves index
//! live here too.
//!
//! Invariant: the nodes of one class all have the same type. Rules add terms only
//! through [`super::rule::add_term`], which type-checks them first, so merging classes of
//! different types is a bug: it is recorded in [`TypeAnalysis::errors`] (the pass then
//! fails) and asserted in debug builds.

use std::collections::HashMap;
use std::sync::Arc;

use egg::{Analysis, DidMerge, Id};
use kiln_ir::{DType, ExprId, NDArray, Type};

use super::lang::Node;

/// The e-graph type of the optimizer.
pub type EGraph = egg::EGraph<Node, TypeAnalysis>;

/// What is known of every e-class.
#[derive(Clone, Debug, PartialEq)]
pub struct ClassData {
    /// The type every node of the class has (a merge of two types is an invariant
    /// violation, recorded in [`TypeAnalysis::errors`]).
    pub ty: Type,
    /// A compile-time constant: folding it costs nothing at run time.
    pub constant: bool,
    /// For a constant whose elements are all equal (a scalar literal, say): that value.
    pub splat: Option<f64>,
}

/// A variable leaf: the module's variable node and its type.
#[derive(Clone, Debug)]
pub struct VarEntry {
    /// The variable's node in the module the e-graph was made from.
    pub expr: ExprId,
    /// Its type.
    pub ty: Type,
}

/// A constant leaf: the module's constant node (`None` for a constant a rule created)
/// and its value.
#[derive(Clone, Debug)]
pub struct ConstEntry {
    /// The constant's node in the module, or `None` when a rule made it.
    pub expr: Option<ExprId>,
    /// Its value.
    pub value: Arc<NDArray>,
    /// The value of every element, if all are equal.
    pub splat: Option<f64>,
}

/// The analysis and the leaf side tables.
#[derive(Debug, Default)]
pub struct TypeAnalysis {
    /// The variable leaves; [`Node::Var`]`(i)` is entry `i`.
    pub vars: Vec<VarEntry>,
    /// The constant leaves; [`Node::Const`]`(i)` is entry `i`.
    pub consts: Vec<ConstEntry>,
    /// Rule-made constants by (dtype, shape, bytes), so a rule that adds the same
    /// literal twice gets the same leaf and saturation can end.
    interned: HashMap<(DType, Vec<usize>, Vec<u8>), usize>,
    /// Invariant violations seen (ill-typed nodes, merges of different types).
    pub errors: Vec<String>,
    /// Rewrites refused because their result would be ill-typed or of another type.
    pub rejected: usize,
}

impl TypeAnalysis {
    /// The constant leaf of the module's constant node `expr` (one leaf per node: large
    /// weights are not hashed).
    pub fn module_const(&mut self, value: Arc<NDArray>, expr: ExprId) -> usize {
        let splat = splat_of(&value);
        self.consts.push(ConstEntry {
            expr: Some(expr),
            value,
            splat,
        });
        self.consts.len() - 1
    }

    /// The leaf of a constant a rule made, found by value if it exists already.
    pub fn intern_const(&mut self, value: Arc<NDArray>) -> usize {
        let key = (value.dtype(), value.shape().to_vec(), value.to_le_bytes());
        if let Some(&i) = self.interned.get(&key) {
            return i;
        }
        let splat = splat_of(&value);
        self.consts.push(ConstEntry {
            expr: None,
            value,
            splat,
        });
        let i = self.consts.len() - 1;
        self.interned.insert(key, i);
        i
    }
}

/// The value every element of `a` holds, if they are all one value (bitwise). Float32
/// weights are checked in place, stopping at the first difference: building the e-graph
/// of a model must not widen all of its weights.
fn splat_of(a: &NDArray) -> Option<f64> {
    if let Ok(v) = a.as_slice::<f32>() {
        let first = *v.first()?;
        return v
            .iter()
            .all(|x| x.to_bits() == first.to_bits())
            .then_some(first as f64);
    }
    let v = a.to_f64_vec();
    let first = *v.first()?;
    v.iter()
        .all(|x| x.to_bits() == first.to_bits())
        .then_some(first)
}

impl Analysis<Node> for TypeAnalysis {
    type Data = ClassData;

    fn make(egraph: &mut EGraph, enode: &Node, _id: Id) -> ClassData {
        let mut error = None;
        let data = match enode {
            Node::Var(i) => match egraph.analysis.vars.get(*i) {
                Some(v) => ClassData {
                    ty: v.ty.clone(),
                    constant: false,
                    splat: None,
                },
                None => {
                    error = Some(format!("variable leaf {i} is not in the table"));
                    invalid()
                }
            },
            Node::Const(i) => match egraph.analysis.consts.get(*i) {
                Some(c) => ClassData {
                    ty: Type::Tensor(c.value.ty()),
                    constant: true,
                    splat: c.splat,
                },
                None => {
                    error = Some(format!("constant leaf {i} is not in the table"));
                    invalid()
                }
            },
            Node::Call(op, args) => {
                let tys: Vec<Type> = args.iter().map(|&a| egraph[a].data.ty.clone()).collect();
                match op.infer_type(&tys) {
                    Ok(ty) => ClassData {
                        ty,
                        constant: args.iter().all(|&a| egraph[a].data.constant),
                        splat: None,
                    },
                    Err(e) => {
                        error = Some(format!("ill-typed node in the e-graph: {e}"));
                        invalid()
                    }
                }
            }
            Node::Tuple(fields) => ClassData {
                ty: Type::Tuple(fields.iter().map(|&f| egraph[f].data.ty.clone()).collect()),
                constant: fields.iter().all(|&f| egraph[f].data.constant),
                splat: None,
            },
            Node::Get(index, [t]) => {
                let data = &egraph[*t].data;
                match data.ty.as_tuple().and_then(|f| f.get(*index)) {
                    Some(ty) => ClassData {
                        ty: ty.clone(),
                        constant: data.constant,
                        splat: None,
                    },
                    None => {
                        error = Some(format!("field {index} of a value of type {}", data.ty));
                        invalid()
                    }
                }
            }
        };
        if let Some(e) = error {
            debug_assert!(false, "{e}");
            egraph.analysis.errors.push(e);
        }
        data
    }

    fn merge(&mut self, a: &mut ClassData, b: ClassData) -> DidMerge {
        if a.ty != b.ty {
            let e = format!("merged e-classes of types {} and {}", a.ty, b.ty);
            debug_assert!(false, "{e}");
            self.errors.push(e);
            return DidMerge(false, true);
        }
        let constant = a.constant || b.constant;
        let splat = a.splat.or(b.splat);
        let bits = |s: Option<f64>| s.map(f64::to_bits);
        let a_changed = constant != a.constant || bits(splat) != bits(a.splat);
        let b_changed = constant != b.constant || bits(splat) != bits(b.splat);
        a.constant = constant;
        a.splat = splat;
        DidMerge(a_changed, b_changed)
    }
}

/// The data of a node that failed its type rule (recorded as an error).
fn invalid() -> ClassData {
    ClassData {
        ty: Type::Tuple(vec![]),
        constant: false,
        splat: None,
    }
}
