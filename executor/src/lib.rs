//! The executor (not built yet). This crate will own targets and devices, the `Backend`
//! trait every backend implements, `build()`, memory planning, TVM's graph JSON and
//! params formats, the graph and debug executors, benchmarking, export and load.
//! Depends on `kiln-ir`, `kiln-rewrite` and `kiln-te`; it knows no concrete backend.
