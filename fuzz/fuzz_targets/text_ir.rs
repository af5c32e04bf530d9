//! Fuzzes the text IR parser: any text parses or gives an error; a parsed module
//! verifies or reports its errors, and a module that verifies prints text that parses
//! back to the same text (an ill-scoped one, which the parser leaves to the verifier,
//! need not print faithfully).
#![no_main]

use kiln_ir::text::{parse_module, print_module};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(m) = parse_module(text) {
        if !kiln_ir::verify::verify_errors(&m).is_empty() {
            return;
        }
        let opts = Default::default();
        let printed = print_module(&m, &opts);
        let again = parse_module(&printed).expect("printed text parses back");
        assert_eq!(
            print_module(&again, &opts),
            printed,
            "print/parse round trip"
        );
    }
});
