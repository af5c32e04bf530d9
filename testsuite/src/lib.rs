//! Kiln's cross-cutting test suite (not built yet). This crate will own the differential
//! and property tests that run every backend against the reference interpreter, the
//! ONNX conformance tests, the model tests and the generated conformance report.
