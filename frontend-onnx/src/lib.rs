//! The ONNX frontend (not built yet). This crate will own reading ONNX protobuf models
//! into an `ir::Module` plus params, opset by opset, with clear errors for unsupported
//! ops. Depends on `kiln-ir` only.
