//! The Cranelift CPU backend (not built yet). This crate will own the translation of
//! the loop IR into Cranelift IR, JIT compilation into the host process and the thread
//! pool that runs parallel loops. Depends on `kiln-te` and `kiln-executor`.
