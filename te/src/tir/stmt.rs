//! Statements of the loop IR: loops with a [`ForKind`], stores, scoped allocations,
//! conditionals, lets, sequences and block-wide barriers.
//!
//! Loop bounds are constants (`min`, `extent`): shapes are static, so every loop nest is
//! a box that the bounds verifier and the backends can see. A loop bound to a
//! [`ThreadAxis`] is a GPU launch dimension: its body runs once per block/thread, and a
//! CPU backend runs it as a serial loop.

use std::fmt;

use super::expr::Expr;
use super::microkernel::KernelCall;
use super::types::{BufferId, VarId};

/// A GPU launch dimension.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ThreadAxis {
    /// `blockIdx.x`: the block's index along the grid's x dimension.
    BlockX,
    /// `blockIdx.y`.
    BlockY,
    /// `blockIdx.z`.
    BlockZ,
    /// `threadIdx.x`: the thread's index inside its block along x.
    ThreadX,
    /// `threadIdx.y`.
    ThreadY,
    /// `threadIdx.z`.
    ThreadZ,
}

impl ThreadAxis {
    /// Every axis, in a fixed order.
    pub const ALL: [ThreadAxis; 6] = [
        ThreadAxis::BlockX,
        ThreadAxis::BlockY,
        ThreadAxis::BlockZ,
        ThreadAxis::ThreadX,
        ThreadAxis::ThreadY,
        ThreadAxis::ThreadZ,
    ];

    /// The CUDA name (`blockIdx.x`, `threadIdx.z`).
    pub fn name(self) -> &'static str {
        match self {
            ThreadAxis::BlockX => "blockIdx.x",
            ThreadAxis::BlockY => "blockIdx.y",
            ThreadAxis::BlockZ => "blockIdx.z",
            ThreadAxis::ThreadX => "threadIdx.x",
            ThreadAxis::ThreadY => "threadIdx.y",
            ThreadAxis::ThreadZ => "threadIdx.z",
        }
    }

    /// The axis with the given CUDA name.
    pub fn from_name(s: &str) -> Option<ThreadAxis> {
        ThreadAxis::ALL.into_iter().find(|a| a.name() == s)
    }

    /// Whether this is a block index (`blockIdx.*`).
    pub fn is_block(self) -> bool {
        matches!(
            self,
            ThreadAxis::BlockX | ThreadAxis::BlockY | ThreadAxis::BlockZ
        )
    }
}

impl fmt::Display for ThreadAxis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How a loop's iterations are executed.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum ForKind {
    /// One after another.
    Serial,
    /// Iterations may run concurrently on CPU threads.
    Parallel,
    /// The loop should become vector instructions (its extent is the lane count).
    Vectorized,
    /// The loop should be fully unrolled.
    Unrolled,
    /// One iteration per GPU block or thread along the axis.
    Thread(ThreadAxis),
}

impl ForKind {
    /// The keyword printed before `for` (`parallel`), empty for serial loops; thread
    /// loops print as `launch_thread <axis>` instead.
    pub fn keyword(self) -> &'static str {
        match self {
            ForKind::Serial => "",
            ForKind::Parallel => "parallel",
            ForKind::Vectorized => "vectorized",
            ForKind::Unrolled => "unrolled",
            ForKind::Thread(_) => "launch_thread",
        }
    }
}

/// A statement of the loop IR.
/// (`Clone`, `PartialEq`, `Debug` and `Drop` are written out in module `tree`, safe on
/// any depth.)
pub enum Stmt {
    /// `var` takes `min, min+1, ..., min+extent-1`.
    For {
        /// The loop variable, bound in `body` only.
        var: VarId,
        /// The first value of `var`.
        min: i64,
        /// The number of iterations (0 runs the body never).
        extent: i64,
        /// How iterations are executed.
        kind: ForKind,
        /// What runs for each value of `var`.
        body: Box<Stmt>,
    },
    /// Writes `value` (scalar, or a vector when an index is a ramp) to `buffer`.
    Store {
        /// The buffer written.
        buffer: BufferId,
        /// One integer index per dimension of the buffer.
        indices: Vec<Expr>,
        /// The value written, of the buffer's dtype (with the indices' lanes).
        value: Expr,
    },
    /// A local or shared scratch buffer that exists while `body` runs.
    Allocate {
        /// The buffer, declared with scope `local` or `shared`.
        buffer: BufferId,
        /// The statements that may use it.
        body: Box<Stmt>,
    },
    /// Runs `then` if `cond` holds, else `else_`.
    If {
        /// A scalar bool.
        cond: Expr,
        /// What runs when `cond` holds.
        then: Box<Stmt>,
        /// What runs otherwise, if anything.
        else_: Option<Box<Stmt>>,
    },
    /// Binds `var` to `value` while `body` runs.
    Let {
        /// The name bound, visible in `body` only.
        var: VarId,
        /// Its value, evaluated once.
        value: Expr,
        /// The statements that may use `var`.
        body: Box<Stmt>,
    },
    /// Statements in order.
    Seq(Vec<Stmt>),
    /// Block-wide synchronization of the threads of a GPU block (`__syncthreads`).
    Barrier,
    /// A call of a micro-kernel over regions of buffers (see [`super::microkernel`]).
    MicroKernel(Box<KernelCall>),
}

impl Stmt {
    /// A loop of the given kind.
    pub fn for_(var: VarId, min: i64, extent: i64, kind: ForKind, body: Stmt) -> Stmt {
        Stmt::For {
            var,
            min,
            extent,
            kind,
            body: Box::new(body),
        }
    }

    /// A serial loop.
    pub fn serial(var: VarId, min: i64, extent: i64, body: Stmt) -> Stmt {
        Stmt::for_(var, min, extent, ForKind::Serial, body)
    }

    /// A loop bound to a GPU axis, from 0.
    pub fn thread(var: VarId, axis: ThreadAxis, extent: i64, body: Stmt) -> Stmt {
        Stmt::for_(var, 0, extent, ForKind::Thread(axis), body)
    }

    /// A store.
    pub fn store(
        buffer: BufferId,
        indices: impl IntoIterator<Item = Expr>,
        value: impl Into<Expr>,
    ) -> Stmt {
        Stmt::Store {
            buffer,
            indices: indices.into_iter().collect(),
            value: value.into(),
        }
    }

    /// An allocation scoped to `body`.
    pub fn allocate(buffer: BufferId, body: Stmt) -> Stmt {
        Stmt::Allocate {
            buffer,
            body: Box::new(body),
        }
    }

    /// `if (cond) { then }`.
    pub fn if_then(cond: impl Into<Expr>, then: Stmt) -> Stmt {
        Stmt::If {
            cond: cond.into(),
            then: Box::new(then),
            else_: None,
        }
    }

    /// `if (cond) { then } else { else_ }`.
    pub fn if_then_else(cond: impl Into<Expr>, then: Stmt, else_: Stmt) -> Stmt {
        Stmt::If {
            cond: cond.into(),
            then: Box::new(then),
            else_: Some(Box::new(else_)),
        }
    }

    /// `let var = value { body }`.
    pub fn let_(var: VarId, value: impl Into<Expr>, body: Stmt) -> Stmt {
        Stmt::Let {
            var,
            value: value.into(),
            body: Box::new(body),
        }
    }

    /// A sequence.
    pub fn seq(stmts: impl IntoIterator<Item = Stmt>) -> Stmt {
        Stmt::Seq(stmts.into_iter().collect())
    }

    /// The direct child statements, in order.
    pub fn children(&self) -> Vec<&Stmt> {
        match self {
            Stmt::For { body, .. } | Stmt::Allocate { body, .. } | Stmt::Let { body, .. } => {
                vec![body]
            }
            Stmt::If { then, else_, .. } => {
                let mut v = vec![&**then];
                if let Some(e) = else_ {
                    v.push(e);
                }
                v
            }
            Stmt::Seq(s) => s.iter().collect(),
            Stmt::Store { .. } | Stmt::Barrier | Stmt::MicroKernel(_) => vec![],
        }
    }

    /// The expressions held directly by this statement (not by its children).
    pub fn exprs(&self) -> Vec<&Expr> {
        match self {
            Stmt::Store { indices, value, .. } => {
                indices.iter().chain(std::iter::once(value)).collect()
            }
            Stmt::If { cond, .. } => vec![cond],
            Stmt::Let { value, .. } => vec![value],
            Stmt::MicroKernel(call) => call.exprs(),
            _ => vec![],
        }
    }

    /// Calls `f` on this statement and every nested statement, parents first.
    pub fn visit(&self, f: &mut impl FnMut(&Stmt)) {
        super::visit::for_each_stmt(self, f)
    }

    /// Whether a barrier occurs anywhere inside.
    pub fn contains_barrier(&self) -> bool {
        let mut found = false;
        self.visit(&mut |s| found |= matches!(s, Stmt::Barrier));
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axes_round_trip_and_barriers_are_found() {
        for a in ThreadAxis::ALL {
            assert_eq!(ThreadAxis::from_name(a.name()), Some(a));
        }
        assert!(ThreadAxis::BlockY.is_block() && !ThreadAxis::ThreadX.is_block());
        let s = Stmt::serial(VarId(0), 0, 4, Stmt::seq([Stmt::Barrier]));
        assert!(s.contains_barrier());
        assert!(!Stmt::seq([]).contains_barrier());
    }
}
