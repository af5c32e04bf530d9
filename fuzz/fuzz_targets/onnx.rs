//! Fuzzes the ONNX loader: any bytes import to a module or give an error; an imported
//! module verifies and prints.
#![no_main]

use std::collections::BTreeMap;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok((m, _params)) = kiln_frontend_onnx::from_onnx(data, &BTreeMap::new()) {
        kiln_ir::verify::verify(&m).expect("an imported module verifies");
        let _ = kiln_ir::text::print_module(&m, &Default::default());
    }
});
