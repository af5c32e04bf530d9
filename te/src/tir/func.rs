//! [`PrimFunc`]: one kernel of the loop IR — its global buffer parameters (inputs, then
//! outputs), the arenas its [`BufferId`]s and [`VarId`]s index, and its body. Built with
//! [`PrimFuncBuilder`], or parsed from text.

use std::fmt;

use kiln_ir::DType;

use super::expr::{BinOp, Expr};
use super::stmt::{ForKind, Stmt};
use super::types::{Buffer, BufferId, Scope, ValueType, VarId};

/// A scalar variable of the arena: its name (for printing) and type.
#[derive(Clone, Debug, PartialEq)]
pub struct VarDecl {
    /// The name shown in the text form (made unique there if needed).
    pub name: String,
    /// Loop variables are scalar integers; let-bound values may have any type.
    pub ty: ValueType,
}

/// One kernel of the loop IR.
#[derive(Clone, Debug, PartialEq)]
pub struct PrimFunc {
    /// Kernel name (printed `@name`).
    pub name: String,
    /// Global buffers passed by the caller: the first `num_inputs` are inputs, the rest
    /// are outputs (written by the kernel).
    pub params: Vec<BufferId>,
    /// How many of `params` are inputs.
    pub num_inputs: usize,
    /// Every buffer of the kernel, params and allocations, indexed by [`BufferId`].
    pub buffers: Vec<Buffer>,
    /// Every variable of the kernel, indexed by [`VarId`].
    pub vars: Vec<VarDecl>,
    /// What the kernel does.
    pub body: Stmt,
}

impl PrimFunc {
    /// The GPU launches of the function, in order: each top-level statement holding a
    /// thread-bound loop is a launch of its own (so sibling `blockIdx` nests never race),
    /// and each run of top-level statements without one is a single-thread launch.
    pub fn launch_roots(&self) -> Vec<Stmt> {
        let top: Vec<Stmt> = match &self.body {
            Stmt::Seq(v) => v.clone(),
            other => vec![other.clone()],
        };
        let threaded = |s: &Stmt| {
            let mut found = false;
            s.visit(&mut |x| {
                found |=
                    matches!(x, Stmt::For { kind: ForKind::Thread(_), extent, .. } if *extent > 0)
            });
            found
        };
        let (mut roots, mut serial) = (vec![], vec![]);
        for s in top {
            if threaded(&s) {
                if !serial.is_empty() {
                    roots.push(Stmt::Seq(std::mem::take(&mut serial)));
                }
                roots.push(s);
            } else {
                serial.push(s);
            }
        }
        if !serial.is_empty() {
            roots.push(Stmt::Seq(serial));
        }
        roots
    }

    /// Whether the function divides integers by a value that is not a positive constant,
    /// so may divide by zero at run time (the GPU backends then give its launches a
    /// status word to report it).
    pub fn may_divide_by_zero(&self) -> bool {
        let mut found = false;
        self.body.visit(&mut |s| {
            for e in s.exprs() {
                e.visit(&mut |x| {
                    if let Expr::Binary { op, lhs, rhs } = x
                        && matches!(op, BinOp::Div | BinOp::FloorDiv | BinOp::FloorMod)
                        && !matches!(rhs.as_int(), Some(c) if c > 0)
                        && super::verify::type_of(self, lhs).is_ok_and(|t| !t.dtype.is_float())
                    {
                        found = true;
                    }
                });
            }
        });
        found
    }

    /// Every element dtype the kernel uses: of its buffers and variables, and of the
    /// immediates and casts in its statements. A backend refuses a kernel whose dtypes
    /// it does not generate code for by checking this set first.
    pub fn dtypes(&self) -> std::collections::BTreeSet<DType> {
        use super::expr::Expr;
        let mut found: std::collections::BTreeSet<DType> = self
            .buffers
            .iter()
            .map(|b| b.dtype)
            .chain(self.vars.iter().map(|v| v.ty.dtype))
            .collect();
        self.body.visit(&mut |s| {
            for e in s.exprs() {
                e.visit(&mut |x| match x {
                    Expr::Int { dtype, .. } | Expr::Float { dtype, .. } => {
                        found.insert(*dtype);
                    }
                    Expr::Cast { to, .. } => {
                        found.insert(*to);
                    }
                    _ => {}
                });
            }
        });
        found
    }

    /// The buffer with id `id`, if the arena has it.
    pub fn buffer(&self, id: BufferId) -> Option<&Buffer> {
        self.buffers.get(id.index())
    }

    /// The variable with id `id`, if the arena has it.
    pub fn var(&self, id: VarId) -> Option<&VarDecl> {
        self.vars.get(id.index())
    }

    /// The input parameters.
    pub fn inputs(&self) -> &[BufferId] {
        &self.params[..self.num_inputs.min(self.params.len())]
    }

    /// The output parameters.
    pub fn outputs(&self) -> &[BufferId] {
        &self.params[self.num_inputs.min(self.params.len())..]
    }

    /// Whether `id` is an output parameter.
    pub fn is_output(&self, id: BufferId) -> bool {
        self.outputs().contains(&id)
    }

    /// Adds a buffer to the arena.
    pub fn add_buffer(&mut self, buffer: Buffer) -> BufferId {
        self.buffers.push(buffer);
        BufferId((self.buffers.len() - 1) as u32)
    }

    /// Adds a variable to the arena.
    pub fn add_var(&mut self, name: impl Into<String>, ty: ValueType) -> VarId {
        self.vars.push(VarDecl {
            name: name.into(),
            ty,
        });
        VarId((self.vars.len() - 1) as u32)
    }
}

impl fmt::Display for PrimFunc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&super::printer::print(self))
    }
}

/// Declares buffers and variables, then takes the body to make a [`PrimFunc`].
///
/// Inputs and outputs may be declared in any order; the function lists inputs first.
#[derive(Clone, Debug)]
pub struct PrimFuncBuilder {
    name: String,
    inputs: Vec<BufferId>,
    outputs: Vec<BufferId>,
    buffers: Vec<Buffer>,
    vars: Vec<VarDecl>,
}

impl PrimFuncBuilder {
    /// A builder for a kernel called `name`.
    pub fn new(name: impl Into<String>) -> PrimFuncBuilder {
        PrimFuncBuilder {
            name: name.into(),
            inputs: vec![],
            outputs: vec![],
            buffers: vec![],
            vars: vec![],
        }
    }

    fn push_buffer(&mut self, b: Buffer) -> BufferId {
        self.buffers.push(b);
        BufferId((self.buffers.len() - 1) as u32)
    }

    /// A global input buffer parameter.
    pub fn input(&mut self, name: &str, shape: impl Into<Vec<usize>>, dtype: DType) -> BufferId {
        let id = self.push_buffer(Buffer::new(name, shape, dtype, Scope::Global));
        self.inputs.push(id);
        id
    }

    /// A global output buffer parameter.
    pub fn output(&mut self, name: &str, shape: impl Into<Vec<usize>>, dtype: DType) -> BufferId {
        let id = self.push_buffer(Buffer::new(name, shape, dtype, Scope::Global));
        self.outputs.push(id);
        id
    }

    /// A scratch buffer, to be used in a [`Stmt::Allocate`].
    pub fn alloc(
        &mut self,
        name: &str,
        shape: impl Into<Vec<usize>>,
        dtype: DType,
        scope: Scope,
    ) -> BufferId {
        self.push_buffer(Buffer::new(name, shape, dtype, scope))
    }

    /// A variable of any type (for `let`).
    pub fn var(&mut self, name: &str, ty: ValueType) -> VarId {
        self.vars.push(VarDecl {
            name: name.to_string(),
            ty,
        });
        VarId((self.vars.len() - 1) as u32)
    }

    /// An `int32` loop variable.
    pub fn loop_var(&mut self, name: &str) -> VarId {
        self.var(name, ValueType::I32)
    }

    /// The function with `body`.
    pub fn finish(self, body: Stmt) -> PrimFunc {
        let num_inputs = self.inputs.len();
        let mut params = self.inputs;
        params.extend(self.outputs);
        PrimFunc {
            name: self.name,
            params,
            num_inputs,
            buffers: self.buffers,
            vars: self.vars,
            body,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builder_orders_inputs_first() {
        let mut b = PrimFuncBuilder::new("k");
        let out = b.output("out", [4], DType::F32);
        let a = b.input("a", [4], DType::F32);
        let i = b.loop_var("i");
        let f = b.finish(Stmt::serial(
            i,
            0,
            4,
            Stmt::store(out, [i.into()], super::super::Expr::load(a, [i.into()])),
        ));
        assert_eq!(f.params, vec![a, out]);
        assert_eq!(f.inputs(), &[a]);
        assert_eq!(f.outputs(), &[out]);
        assert!(f.is_output(out) && !f.is_output(a));
        assert_eq!(f.var(i).unwrap().ty, ValueType::I32);
        assert!(f.buffer(BufferId(9)).is_none());
    }
}
