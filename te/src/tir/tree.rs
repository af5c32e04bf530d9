//! `Clone`, `PartialEq`, `Debug` and `Drop` of the loop IR's trees ([`Expr`], [`Stmt`]),
//! written so that a tree of any depth neither overflows the stack nor aborts: a
//! program built by a pass or a tool may nest 100,000 deep (a long `add` chain, a
//! nest of loops), and the derived versions of these traits recurse once per level.
//!
//! - `Drop` is iterative: a node hands its children that have children of their own to
//!   a worklist (replacing them by a leaf) and drops them one by one, so no drop
//!   recurses more than one level. Leaves and shallow nodes allocate nothing.
//! - `Clone`, `PartialEq` and `Debug` recurse through [`deep`], which moves the
//!   recursion onto a heap-allocated stack segment when the thread's stack runs low
//!   (the same guard as every walk in [`super::visit`]). Their results are the derived
//!   ones: `Debug` prints exactly what `#[derive(Debug)]` would.
//!
//! A `Drop` impl forbids moving a field out of a node by pattern (`let Expr::Not(x) =
//! e`); take it instead (`std::mem::take` on a `Vec`, [`Expr::take`] / [`Stmt::take`]
//! on a child).

use std::fmt;

use super::expr::Expr;
use super::stmt::Stmt;
use super::visit::deep;

/// The leaf left behind where a child was moved out.
const EXPR_HOLE: Expr = Expr::Bool(false);

impl Expr {
    /// Whether the node has operands.
    fn has_children(&self) -> bool {
        match self {
            Expr::Int { .. } | Expr::Float { .. } | Expr::Bool(_) | Expr::Var(_) => false,
            Expr::Load { indices: xs, .. } | Expr::Call { args: xs, .. } => !xs.is_empty(),
            _ => true,
        }
    }

    /// Moves the value out, leaving a leaf (`false`) in its place.
    pub fn take(&mut self) -> Expr {
        std::mem::replace(self, EXPR_HOLE)
    }

    /// Moves the operands that have operands of their own onto `work`, leaving leaves.
    fn detach_children(&mut self, work: &mut Vec<Expr>) {
        let mut push = |x: &mut Expr| {
            if x.has_children() {
                work.push(x.take());
            }
        };
        match self {
            Expr::Int { .. } | Expr::Float { .. } | Expr::Bool(_) | Expr::Var(_) => {}
            Expr::Load { indices: xs, .. } | Expr::Call { args: xs, .. } => {
                xs.iter_mut().for_each(push)
            }
            Expr::Binary { lhs: a, rhs: b, .. }
            | Expr::Ramp {
                base: a, stride: b, ..
            } => {
                push(a);
                push(b);
            }
            Expr::Select { cond, then, else_ } => {
                push(cond);
                push(then);
                push(else_);
            }
            Expr::Not(x) | Expr::Cast { value: x, .. } | Expr::Broadcast { value: x, .. } => {
                push(x)
            }
        }
    }
}

impl Drop for Expr {
    fn drop(&mut self) {
        if !self.has_children() {
            return;
        }
        let mut work = vec![];
        self.detach_children(&mut work);
        while let Some(mut e) = work.pop() {
            e.detach_children(&mut work);
            // `e` now has only leaf operands: dropping it does not recurse further.
        }
    }
}

impl Clone for Expr {
    fn clone(&self) -> Expr {
        deep(|| match self {
            Expr::Int { value, dtype } => Expr::Int {
                value: *value,
                dtype: *dtype,
            },
            Expr::Float { value, dtype } => Expr::Float {
                value: *value,
                dtype: *dtype,
            },
            Expr::Bool(b) => Expr::Bool(*b),
            Expr::Var(v) => Expr::Var(*v),
            Expr::Load { buffer, indices } => Expr::Load {
                buffer: *buffer,
                indices: indices.clone(),
            },
            Expr::Binary { op, lhs, rhs } => Expr::Binary {
                op: *op,
                lhs: lhs.clone(),
                rhs: rhs.clone(),
            },
            Expr::Not(x) => Expr::Not(x.clone()),
            Expr::Select { cond, then, else_ } => Expr::Select {
                cond: cond.clone(),
                then: then.clone(),
                else_: else_.clone(),
            },
            Expr::Cast { to, value } => Expr::Cast {
                to: *to,
                value: value.clone(),
            },
            Expr::Call { intrinsic, args } => Expr::Call {
                intrinsic: *intrinsic,
                args: args.clone(),
            },
            Expr::Ramp {
                base,
                stride,
                lanes,
            } => Expr::Ramp {
                base: base.clone(),
                stride: stride.clone(),
                lanes: *lanes,
            },
            Expr::Broadcast { value, lanes } => Expr::Broadcast {
                value: value.clone(),
                lanes: *lanes,
            },
        })
    }
}

impl PartialEq for Expr {
    fn eq(&self, other: &Expr) -> bool {
        deep(|| match (self, other) {
            (Expr::Int { value: a, dtype: d }, Expr::Int { value: b, dtype: e }) => {
                a == b && d == e
            }
            (Expr::Float { value: a, dtype: d }, Expr::Float { value: b, dtype: e }) => {
                a == b && d == e
            }
            (Expr::Bool(a), Expr::Bool(b)) => a == b,
            (Expr::Var(a), Expr::Var(b)) => a == b,
            (
                Expr::Load {
                    buffer: a,
                    indices: x,
                },
                Expr::Load {
                    buffer: b,
                    indices: y,
                },
            ) => a == b && x == y,
            (
                Expr::Binary {
                    op: o,
                    lhs: a,
                    rhs: b,
                },
                Expr::Binary {
                    op: p,
                    lhs: c,
                    rhs: d,
                },
            ) => o == p && a == c && b == d,
            (Expr::Not(a), Expr::Not(b)) => a == b,
            (
                Expr::Select {
                    cond: a,
                    then: b,
                    else_: c,
                },
                Expr::Select {
                    cond: d,
                    then: e,
                    else_: f,
                },
            ) => a == d && b == e && c == f,
            (Expr::Cast { to: t, value: a }, Expr::Cast { to: u, value: b }) => t == u && a == b,
            (
                Expr::Call {
                    intrinsic: i,
                    args: a,
                },
                Expr::Call {
                    intrinsic: j,
                    args: b,
                },
            ) => i == j && a == b,
            (
                Expr::Ramp {
                    base: a,
                    stride: b,
                    lanes: l,
                },
                Expr::Ramp {
                    base: c,
                    stride: d,
                    lanes: m,
                },
            ) => l == m && a == c && b == d,
            (Expr::Broadcast { value: a, lanes: l }, Expr::Broadcast { value: b, lanes: m }) => {
                l == m && a == b
            }
            _ => false,
        })
    }
}

impl fmt::Debug for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        deep(|| match self {
            Expr::Int { value, dtype } => f
                .debug_struct("Int")
                .field("value", value)
                .field("dtype", dtype)
                .finish(),
            Expr::Float { value, dtype } => f
                .debug_struct("Float")
                .field("value", value)
                .field("dtype", dtype)
                .finish(),
            Expr::Bool(b) => f.debug_tuple("Bool").field(b).finish(),
            Expr::Var(v) => f.debug_tuple("Var").field(v).finish(),
            Expr::Load { buffer, indices } => f
                .debug_struct("Load")
                .field("buffer", buffer)
                .field("indices", indices)
                .finish(),
            Expr::Binary { op, lhs, rhs } => f
                .debug_struct("Binary")
                .field("op", op)
                .field("lhs", lhs)
                .field("rhs", rhs)
                .finish(),
            Expr::Not(x) => f.debug_tuple("Not").field(x).finish(),
            Expr::Select { cond, then, else_ } => f
                .debug_struct("Select")
                .field("cond", cond)
                .field("then", then)
                .field("else_", else_)
                .finish(),
            Expr::Cast { to, value } => f
                .debug_struct("Cast")
                .field("to", to)
                .field("value", value)
                .finish(),
            Expr::Call { intrinsic, args } => f
                .debug_struct("Call")
                .field("intrinsic", intrinsic)
                .field("args", args)
                .finish(),
            Expr::Ramp {
                base,
                stride,
                lanes,
            } => f
                .debug_struct("Ramp")
                .field("base", base)
                .field("stride", stride)
                .field("lanes", lanes)
                .finish(),
            Expr::Broadcast { value, lanes } => f
                .debug_struct("Broadcast")
                .field("value", value)
                .field("lanes", lanes)
                .finish(),
        })
    }
}

impl Stmt {
    /// Whether the node has child statements.
    fn has_children(&self) -> bool {
        match self {
            Stmt::For { .. } | Stmt::Allocate { .. } | Stmt::Let { .. } | Stmt::If { .. } => true,
            Stmt::Seq(v) => !v.is_empty(),
            Stmt::Store { .. } | Stmt::Barrier | Stmt::MicroKernel(_) => false,
        }
    }

    /// Moves the value out, leaving an empty sequence in its place.
    pub fn take(&mut self) -> Stmt {
        std::mem::replace(self, Stmt::Seq(vec![]))
    }

    /// Moves the child statements onto `work`, leaving empty sequences. (Expressions
    /// drop iteratively on their own.)
    fn detach_children(&mut self, work: &mut Vec<Stmt>) {
        let mut push = |x: &mut Stmt| {
            if x.has_children() {
                work.push(x.take());
            }
        };
        match self {
            Stmt::For { body, .. } | Stmt::Allocate { body, .. } | Stmt::Let { body, .. } => {
                push(body)
            }
            Stmt::If { then, else_, .. } => {
                push(then);
                if let Some(e) = else_ {
                    push(e);
                }
            }
            Stmt::Seq(v) => v.iter_mut().for_each(push),
            Stmt::Store { .. } | Stmt::Barrier | Stmt::MicroKernel(_) => {}
        }
    }
}

impl Drop for Stmt {
    fn drop(&mut self) {
        if !self.has_children() {
            return;
        }
        let mut work = vec![];
        self.detach_children(&mut work);
        while let Some(mut s) = work.pop() {
            s.detach_children(&mut work);
        }
    }
}

impl Clone for Stmt {
    fn clone(&self) -> Stmt {
        deep(|| match self {
            Stmt::For {
                var,
                min,
                extent,
                kind,
                body,
            } => Stmt::For {
                var: *var,
                min: *min,
                extent: *extent,
                kind: *kind,
                body: body.clone(),
            },
            Stmt::Store {
                buffer,
                indices,
                value,
            } => Stmt::Store {
                buffer: *buffer,
                indices: indices.clone(),
                value: value.clone(),
            },
            Stmt::Allocate { buffer, body } => Stmt::Allocate {
                buffer: *buffer,
                body: body.clone(),
            },
            Stmt::If { cond, then, else_ } => Stmt::If {
                cond: cond.clone(),
                then: then.clone(),
                else_: else_.clone(),
            },
            Stmt::Let { var, value, body } => Stmt::Let {
                var: *var,
                value: value.clone(),
                body: body.clone(),
            },
            Stmt::Seq(v) => Stmt::Seq(v.clone()),
            Stmt::Barrier => Stmt::Barrier,
            Stmt::MicroKernel(call) => Stmt::MicroKernel(call.clone()),
        })
    }
}

impl PartialEq for Stmt {
    fn eq(&self, other: &Stmt) -> bool {
        deep(|| match (self, other) {
            (
                Stmt::For {
                    var: v,
                    min: m,
                    extent: x,
                    kind: k,
                    body: b,
                },
                Stmt::For {
                    var: w,
                    min: n,
                    extent: y,
                    kind: l,
                    body: c,
                },
            ) => v == w && m == n && x == y && k == l && b == c,
            (
                Stmt::Store {
                    buffer: a,
                    indices: i,
                    value: x,
                },
                Stmt::Store {
                    buffer: b,
                    indices: j,
                    value: y,
                },
            ) => a == b && i == j && x == y,
            (Stmt::Allocate { buffer: a, body: x }, Stmt::Allocate { buffer: b, body: y }) => {
                a == b && x == y
            }
            (
                Stmt::If {
                    cond: a,
                    then: b,
                    else_: c,
                },
                Stmt::If {
                    cond: d,
                    then: e,
                    else_: f,
                },
            ) => a == d && b == e && c == f,
            (
                Stmt::Let {
                    var: v,
                    value: a,
                    body: b,
                },
                Stmt::Let {
                    var: w,
                    value: c,
                    body: d,
                },
            ) => v == w && a == c && b == d,
            (Stmt::Seq(a), Stmt::Seq(b)) => a == b,
            (Stmt::Barrier, Stmt::Barrier) => true,
            (Stmt::MicroKernel(a), Stmt::MicroKernel(b)) => a == b,
            _ => false,
        })
    }
}

impl fmt::Debug for Stmt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        deep(|| match self {
            Stmt::For {
                var,
                min,
                extent,
                kind,
                body,
            } => f
                .debug_struct("For")
                .field("var", var)
                .field("min", min)
                .field("extent", extent)
                .field("kind", kind)
                .field("body", body)
                .finish(),
            Stmt::Store {
                buffer,
                indices,
                value,
            } => f
                .debug_struct("Store")
                .field("buffer", buffer)
                .field("indices", indices)
                .field("value", value)
                .finish(),
            Stmt::Allocate { buffer, body } => f
                .debug_struct("Allocate")
                .field("buffer", buffer)
                .field("body", body)
                .finish(),
            Stmt::If { cond, then, else_ } => f
                .debug_struct("If")
                .field("cond", cond)
                .field("then", then)
                .field("else_", else_)
                .finish(),
            Stmt::Let { var, value, body } => f
                .debug_struct("Let")
                .field("var", var)
                .field("value", value)
                .field("body", body)
                .finish(),
            Stmt::Seq(v) => f.debug_tuple("Seq").field(v).finish(),
            Stmt::Barrier => f.write_str("Barrier"),
            Stmt::MicroKernel(call) => f.debug_tuple("MicroKernel").field(call).finish(),
        })
    }
}
