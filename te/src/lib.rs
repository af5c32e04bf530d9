//! Tensor expressions and the loop IR (not built yet). This crate will own
//! placeholder/compute/reduce, the loop IR (buffers, loops of every kind, loads, stores,
//! intrinsics) with its printer, parser and bounds verifier, schedule primitives, a
//! default schedule per target kind, lowering, the loop-IR interpreter, and a compute
//! for every graph op. Depends on `kiln-ir` only.
