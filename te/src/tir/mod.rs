//! Kiln's loop IR (TVM's TIR): one [`PrimFunc`] is one kernel — its buffer parameters,
//! arenas of buffers and scalar variables, and a statement body made of loops, stores,
//! allocations, conditionals, lets and barriers over [`Expr`] trees.
//!
//! Schedules and lowering *produce* this IR; backends (Cranelift, CUDA PTX, SPIR-V)
//! *consume* it. Everything they need is explicit: every buffer has a static shape,
//! dtype and [`Scope`]; every loop has constant bounds and a [`ForKind`]; every access is
//! multi-dimensional (one index per dimension, row-major, backends flatten with strides).
//!
//! - [`types`]: typed ids, buffers, scopes, value types;
//! - [`expr`] / [`stmt`]: the trees, with constructor helpers and operator overloading;
//! - [`func`]: [`PrimFunc`] and [`PrimFuncBuilder`];
//! - [`printer`] / [`parser`]: the text form (round trip is tested);
//! - [`semantics`]: the scalar semantics (wrapping, floor division, intervals) in one place;
//! - [`affine`]: affine forms over atoms, the one linear-index type every pass uses;
//! - [`verify`](mod@verify): types, scoping, thread nesting, the bounds proof and the limits;
//! - [`visit`]: the one walker (`Visitor`, `Mutator`), safe on deep trees;
//! - `tree`: `Clone`, `PartialEq`, `Debug` and an iterative `Drop` of the trees, safe on
//!   any depth;
//! - [`legalize`](mod@legalize): the rewrite into the core loop IR every backend implements;
//! - [`interp`]: the loop-IR interpreter (the second oracle, for lowering);
//! - [`microkernel`]: calls of micro-kernels over declared buffer regions, and their
//!   expansion into the declared loops.

pub mod affine;
pub mod expr;
pub mod func;
pub mod interp;
pub mod legalize;
pub mod microkernel;
pub mod parser;
pub mod printer;
pub mod semantics;
pub mod stmt;
mod tree;
pub mod types;
pub mod verify;
pub mod visit;

pub use expr::{BinOp, Expr, Intrinsic, Trig};
pub use func::{PrimFunc, PrimFuncBuilder, VarDecl};
pub use interp::{run, run_with_inputs};
pub use legalize::legalize;
pub use microkernel::{KernelCall, MicroKernel, Operand};
pub use parser::parse;
pub use stmt::{ForKind, Stmt, ThreadAxis};
pub use types::{Buffer, BufferId, Scope, ValueType, VarId};
pub use verify::{Limits, VerifyError, verify, verify_with};
