//! The e-graph language of the graph IR: one [`Node`] per expression kind. An op call
//! carries the [`Op`] itself (name and typed attributes; `Op` hashes and orders), so the
//! language covers every op kiln has, built-in or custom, with no per-op encoding to keep
//! in step. Variables and constants are leaves that index side tables held by the
//! analysis ([`super::analysis::TypeAnalysis`]), which knows their types and values.

use std::fmt;

use egg::{Id, Language};
use kiln_ir::Op;

/// An e-node.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Node {
    /// Variable number `i` of the analysis's variable table.
    Var(usize),
    /// Constant number `i` of the analysis's constant table.
    Const(usize),
    /// `op(args...)`.
    Call(Op, Vec<Id>),
    /// `(fields...)`.
    Tuple(Vec<Id>),
    /// Field `index` of a tuple.
    Get(usize, [Id; 1]),
}

/// A node without its children: what two nodes must share to match.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Discriminant {
    /// Variable number `i`.
    Var(usize),
    /// Constant number `i`.
    Const(usize),
    /// A call of this op (attributes included) with this many arguments.
    Call(Op, usize),
    /// A tuple with this many fields.
    Tuple(usize),
    /// Field `i` of a tuple.
    Get(usize),
}

impl Language for Node {
    type Discriminant = Discriminant;

    fn discriminant(&self) -> Discriminant {
        match self {
            Node::Var(i) => Discriminant::Var(*i),
            Node::Const(i) => Discriminant::Const(*i),
            Node::Call(op, args) => Discriminant::Call(op.clone(), args.len()),
            Node::Tuple(fields) => Discriminant::Tuple(fields.len()),
            Node::Get(i, _) => Discriminant::Get(*i),
        }
    }

    fn matches(&self, other: &Node) -> bool {
        match (self, other) {
            (Node::Var(a), Node::Var(b)) | (Node::Const(a), Node::Const(b)) => a == b,
            (Node::Call(a, x), Node::Call(b, y)) => a == b && x.len() == y.len(),
            (Node::Tuple(x), Node::Tuple(y)) => x.len() == y.len(),
            (Node::Get(a, _), Node::Get(b, _)) => a == b,
            _ => false,
        }
    }

    fn children(&self) -> &[Id] {
        match self {
            Node::Var(_) | Node::Const(_) => &[],
            Node::Call(_, args) => args,
            Node::Tuple(fields) => fields,
            Node::Get(_, t) => t,
        }
    }

    fn children_mut(&mut self) -> &mut [Id] {
        match self {
            Node::Var(_) | Node::Const(_) => &mut [],
            Node::Call(_, args) => args,
            Node::Tuple(fields) => fields,
            Node::Get(_, t) => t,
        }
    }
}

impl fmt::Display for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Node::Var(i) => write!(f, "var{i}"),
            Node::Const(i) => write!(f, "const{i}"),
            Node::Call(op, _) => write!(f, "{op}"),
            Node::Tuple(_) => f.write_str("tuple"),
            Node::Get(i, _) => write!(f, "get{i}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_ir::op::{Unary, UnaryKind};

    #[test]
    fn nodes_match_by_op_and_arity() {
        let relu = Op::from(Unary {
            kind: UnaryKind::Relu,
        });
        let exp = Op::from(Unary {
            kind: UnaryKind::Exp,
        });
        let a = Node::Call(relu.clone(), vec![Id::from(0)]);
        assert!(a.matches(&Node::Call(relu, vec![Id::from(3)])));
        assert!(!a.matches(&Node::Call(exp, vec![Id::from(0)])));
        assert!(!Node::Var(0).matches(&Node::Const(0)));
        assert_eq!(Node::Get(1, [Id::from(2)]).children(), &[Id::from(2)]);
    }
}
