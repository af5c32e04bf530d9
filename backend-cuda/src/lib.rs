//! The CUDA backend (not built yet). This crate will own the translation of the loop IR
//! into PTX text and, behind the `cuda` feature, loading and launching kernels through
//! `cust`. Depends on `kiln-te` and `kiln-executor`.
