//! Tensor expressions and Kiln's loop IR (TVM's TE and TIR).
//!
//! This crate owns the middle of the pipeline: a fused group of graph ops becomes one
//! kernel. At its bottom is the **loop IR** ([`tir`]): buffers with shape, dtype and scope,
//! loops of every kind (serial, parallel, vectorized, unrolled, bound to a GPU thread
//! axis), loads, stores, allocations, `if`, `let`, barriers, intrinsics and vector
//! ramps/broadcasts; its text printer and parser; a verifier that checks types and proves
//! every load and store in bounds; and an interpreter that runs a kernel on host
//! `NDArray`s (thread-bound loops included, in lockstep at barriers).
//!
//! Tensor expressions ([`te`]) produce this IR: placeholder/compute/reduce graphs, schedules
//! (split, reorder, tile, fuse, vectorize, parallel, unroll, bind, compute_at, inline,
//! cache_read/cache_write) and lowering to a verified [`tir::PrimFunc`]. [`topi`] holds a
//! compute for every graph op and lowers a graph-IR function to one kernel under the
//! default schedule of its target kind ([`schedule_default`]: CPU and GPU). Backends
//! (Cranelift, CUDA PTX, SPIR-V) consume the loop IR.
//! Depends on `kiln-ir` only.
//!
//! ```
//! use kiln_ir::DType;
//! use kiln_te::tir::{Expr, ForKind, PrimFuncBuilder, Stmt};
//!
//! let mut b = PrimFuncBuilder::new("add_one");
//! let a = b.input("a", [8], DType::F32);
//! let c = b.output("c", [8], DType::F32);
//! let i = b.loop_var("i");
//! let body = Stmt::for_(
//!     i, 0, 8, ForKind::Parallel,
//!     Stmt::store(c, [i.into()], Expr::load(a, [i.into()]) + Expr::f32(1.0)),
//! );
//! let f = b.finish(body);
//! kiln_te::tir::verify(&f).unwrap();
//! assert!(f.to_string().contains("parallel for (%i, 0, 8)"));
//! ```
#![warn(missing_docs)]

pub mod error;
pub mod schedule_default;
pub mod te;
#[cfg(feature = "testing")]
pub mod testing;
pub mod tir;
pub mod topi;

pub use error::{Error, Result};
