//! Tensor expressions (TVM's TE): describe *what* a kernel computes as a graph of
//! operations, describe *how* with a [`Schedule`], and [`lower()`] both to one loop-IR
//! kernel ([`tir::PrimFunc`](crate::tir::PrimFunc)).
//!
//! - [`graph`]: the arena of operations ([`Graph`]), [`Tensor`] handles, placeholders,
//!   computes and reduction axes; bodies are type-checked when a compute is made;
//! - [`expr`]: the expression language ([`Expr`], [`IterVar`]), operator overloading,
//!   intrinsics and the reductions [`sum`], [`max`], [`min`];
//! - [`schedule`]: stages, leaf axes and the schedule primitives;
//! - [`lower`](mod@lower): schedule to loop IR (bound inference, guards, reductions);
//! - [`tensorize`]: micro-kernels declared as computes, and the primitive that calls them.
//!
//! ```
//! use kiln_ir::DType;
//! use kiln_te::te::{self, Graph};
//!
//! let mut g = Graph::new();
//! let a = g.placeholder(&[4, 3], DType::F32, "A").unwrap();
//! let b = g.placeholder(&[3, 5], DType::F32, "B").unwrap();
//! let k = g.reduce_axis(3, "k").unwrap();
//! let c = g
//!     .compute(&[4, 5], "C", |i| {
//!         te::sum(a.at(&[i[0].clone(), k.into()]) * b.at(&[k.into(), i[1].clone()]), &[k])
//!     })
//!     .unwrap();
//! let f = te::lower(&g, &[c], "matmul").unwrap();
//! kiln_te::tir::verify(&f).unwrap();
//! assert!(f.to_string().contains("for (%k, 0, 3)"));
//! ```

pub mod expr;
pub mod graph;
pub mod lower;
pub mod schedule;
pub mod tensorize;

pub use expr::{
    Expr, IterKind, IterVar, ReduceKind, abs, and, call, cast, ceil, erf, exp, floor, floordiv,
    floormod, fma, log, max, maximum, min, minimum, not, or, pow, prod, rsqrt, select, sigmoid,
    sqrt, sum, tanh,
};
pub use graph::{Graph, IterVarInfo, MAX_RANK, OpId, OpKind, Operation, Tensor};
pub use lower::lower;
pub use schedule::{Attach, Relation, Schedule, Stage};
pub use tensorize::Intrin;
