//! Backends that live in the executor crate itself. Only the reference device does:
//! [`interp`], which runs loop IR in the loop-IR interpreter on its own memory. Real
//! backends (Cranelift, CUDA, SPIR-V) are crates of their own that implement
//! [`crate::Backend`].

pub mod interp;

pub use interp::InterpBackend;
