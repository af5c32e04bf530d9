//! Register promotion (scalar replacement) of small local buffers.
//!
//! A local buffer with at most [`MAX_ELEMS`] elements whose every access has indices
//! that become constants once the small loops inside its allocation are unrolled —
//! the accumulator tile of a register-tiled conv2d or dense — lives in Cranelift
//! variables (SSA values in registers) instead of stack memory: [`plan`] finds the
//! loops to unroll, and code generation evaluates each index with
//! [`const_int`](kiln_te::tir::semantics::const_int).

use std::collections::BTreeSet;

use kiln_ir::DType;
use kiln_te::tir::visit::{Visitor, walk_stmt};
use kiln_te::tir::{BufferId, Expr, ForKind, PrimFunc, Scope, Stmt, VarId};

/// Local buffers with at most this many elements are promoted to variables.
pub const MAX_ELEMS: usize = 64;
/// Loops of at most this many iterations may be unrolled to make indices constant.
pub const MAX_UNROLL: i64 = 16;
/// The most copies of one access that unrolling may create.
const MAX_COPIES: i64 = 64;

/// Whether local buffer `buf` of `f`, allocated around `body`, can live in variables;
/// if so, the loops (by variable) that must be unrolled for its indices to be constant.
/// `consts` holds the variables already known constant; `outline` whether a `parallel`
/// loop inside would be outlined (which could not capture variables).
pub fn plan(
    f: &PrimFunc,
    buf: BufferId,
    body: &Stmt,
    consts: &[Option<i64>],
    outline: bool,
) -> Option<BTreeSet<VarId>> {
    let b = f.buffer(buf)?;
    let n = b.numel()?;
    if b.scope == Scope::Global
        || n == 0
        || n > MAX_ELEMS
        || matches!(b.dtype, DType::F16 | DType::BF16)
    {
        return None;
    }
    let mut w = Walk {
        buf,
        consts,
        outline,
        loops: vec![],
        unroll: BTreeSet::new(),
        ok: true,
    };
    w.visit_stmt(body);
    w.ok.then_some(w.unroll)
}

struct Walk<'a> {
    buf: BufferId,
    consts: &'a [Option<i64>],
    outline: bool,
    /// Enclosing loops inside the allocation: variable and extent.
    loops: Vec<(VarId, i64)>,
    unroll: BTreeSet<VarId>,
    ok: bool,
}

impl Visitor for Walk<'_> {
    fn visit_stmt(&mut self, s: &Stmt) {
        if !self.ok {
            return;
        }
        match s {
            Stmt::For {
                var,
                extent,
                kind,
                body,
                ..
            } => {
                if *kind == ForKind::Parallel && self.outline && *extent > 1 {
                    // The outlined body could not see the variables.
                    let mut uses = false;
                    body.visit(&mut |t| {
                        for e in t.exprs() {
                            uses |= self.mentions(e);
                        }
                        uses |= matches!(t, Stmt::Store { buffer, .. } if *buffer == self.buf);
                    });
                    if uses {
                        self.ok = false;
                        return;
                    }
                }
                self.loops.push((*var, *extent));
                self.visit_stmt(body);
                self.loops.pop();
            }
            Stmt::Store {
                buffer, indices, ..
            } => {
                if *buffer == self.buf {
                    self.access(indices);
                }
                walk_stmt(self, s);
            }
            // A micro-kernel reads and writes its operands in memory.
            Stmt::MicroKernel(call) if call.operands.iter().any(|o| o.buffer == self.buf) => {
                self.ok = false;
            }
            _ => walk_stmt(self, s),
        }
    }

    /// Records the accesses to the buffer inside `e` (the walk does not go further:
    /// this looks at every load below itself).
    fn visit_expr(&mut self, e: &Expr) {
        let mut accesses = vec![];
        e.visit(&mut |x| {
            if let Expr::Load { buffer, indices } = x
                && *buffer == self.buf
            {
                accesses.push(indices.clone());
            }
        });
        for ix in accesses {
            self.access(&ix);
        }
    }
}

impl Walk<'_> {
    fn mentions(&self, e: &Expr) -> bool {
        let mut m = false;
        e.visit(&mut |x| m |= matches!(x, Expr::Load { buffer, .. } if *buffer == self.buf));
        m
    }

    /// Checks one access's indices and records the loops they need unrolled.
    fn access(&mut self, indices: &[Expr]) {
        let mut needed = BTreeSet::new();
        for ix in indices {
            ix.visit(&mut |x| match x {
                Expr::Var(v) => {
                    if self.consts.get(v.index()).copied().flatten().is_some() {
                        return;
                    }
                    match self.loops.iter().find(|(l, _)| l == v) {
                        Some(&(_, ext)) if ext <= MAX_UNROLL => {
                            needed.insert(*v);
                        }
                        _ => self.ok = false,
                    }
                }
                Expr::Int { .. } | Expr::Binary { .. } | Expr::Cast { .. } => {}
                _ => self.ok = false,
            });
        }
        // Every enclosing loop that will be unrolled multiplies the copies.
        self.unroll.extend(needed);
        let copies: i64 = self
            .loops
            .iter()
            .filter(|(v, _)| self.unroll.contains(v))
            .map(|&(_, e)| e)
            .product();
        if copies > MAX_COPIES {
            self.ok = false;
        }
    }
}
