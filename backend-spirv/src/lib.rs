//! The SPIR-V backend (not built yet). This crate will own the translation of the loop
//! IR into SPIR-V with `rspirv` and running it through Vulkan (`ash`) on any Vulkan
//! device, Mesa's CPU driver included. Depends on `kiln-te` and `kiln-executor`.
