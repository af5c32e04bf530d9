//! Kiln's cross-cutting test suite. For now it owns the ONNX conformance runner
//! ([`onnx_node`]): running ONNX's backend node test cases through the ONNX frontend and
//! the reference interpreter, and the manifest of each case's status. Later it will hold
//! the differential tests across backends and the model tests.

pub mod onnx_node;
