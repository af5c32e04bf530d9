//! Fuzzes the exported-module loader on the `interp` backend: any bytes load (validated,
//! re-verified, recompiled) or give an error; nothing from the file runs.
#![no_main]

use std::sync::Arc;

use kiln_executor::backends::interp::InterpBackend;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = kiln_executor::load_bytes(data, Arc::new(InterpBackend));
});
