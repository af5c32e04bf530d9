//! Kiln's graph IR: the layer users meet first. Build a model with the Rust API (or
//! parse its text form), print it, walk it, verify it and run it in the reference
//! interpreter — the oracle every other part of Kiln is tested against.
//!
//! ```
//! use kiln_ir::{DType, Module, NDArray, Type, op};
//!
//! let mut m = Module::new();
//! let x = m.var("x", Type::tensor([2, 2], DType::F32));
//! let y = m.call(op::Unary { kind: op::UnaryKind::Relu }, &[x]).unwrap();
//! m.set_main(&[x], y).unwrap();
//! ```
#![warn(missing_docs)]

pub mod attrs;
pub mod dtype;
pub mod error;
pub mod expr;
pub mod filetest;
pub mod interp;
pub mod op;
pub mod rng;
pub mod tensor;
pub mod text;
pub mod ty;
pub mod value;
pub mod verify;
pub mod visit;
pub mod zoo;

pub use dtype::DType;
pub use error::{Error, Result};
pub use expr::{Callee, ExprId, ExprKind, ExprNode, FnAttrs, Function, Module};
pub use op::{Op, OpPattern};
pub use tensor::{Data, NDArray};
pub use ty::{FuncType, TensorType, Type};
pub use value::Value;
