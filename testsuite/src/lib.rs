//! Kiln's cross-cutting test suite. It owns the ONNX conformance runner
//! ([`onnx_node`]): running ONNX's backend node test cases through the ONNX frontend on
//! the reference interpreter and on `cpu`, and the manifest of each case's status per
//! backend. Its tests also check whole ONNX models (ResNet-18, a BERT encoder block)
//! against ONNX Runtime (`tests/onnx_models.rs`). [`ops`] is the one op suite run on
//! every backend (`tests/ops.rs`): lowered under both default schedules in the loop-IR
//! interpreter, and built through the executor on `interp` and `cpu`. [`suite`] is the
//! registry of executor backends and opt levels the graph-level suites are instantiated
//! for; [`graphs`] generates random well-typed programs (`tests/graphs.rs`; saved cases,
//! [`cases`], replayed by `tests/replay.rs`); [`schedules`] fuzzes schedules on every backend;
//! [`bisect`] names the pass (and rewrite rule) that breaks numerics; [`exercised`] counts
//! what the optimizer did over a run; [`matrix`] writes `CONFORMANCE.md`
//! (`cargo run -p kiln-testsuite --bin conformance`).

pub mod bisect;
pub mod cases;
pub mod exercised;
pub mod graph_suite;
pub mod graphs;
pub mod matrix;
pub mod onnx_node;
pub mod op_suite;
pub mod ops;
pub mod ptx_sim;
pub mod schedules;
pub mod suite;
