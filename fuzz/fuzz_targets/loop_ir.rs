//! Fuzzes the loop-IR parser and verifier: any text parses or gives an error, and a
//! parsed kernel verifies or reports its errors (never a panic).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(f) = kiln_te::tir::parse(text) {
        let _ = kiln_te::tir::verify(&f);
    }
});
