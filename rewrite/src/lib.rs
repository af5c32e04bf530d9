//! Graph optimization for Kiln (not built yet). This crate will own the pass manager
//! (`PassContext` with opt levels 0–3, required and disabled passes), the classical
//! passes (type inference, constant folding, simplify-inference, dead code, CSE),
//! equality saturation with egg (language, rule families, cost model, sharing-aware
//! extraction) and operator fusion into primitive functions. Depends on `kiln-ir` only.
