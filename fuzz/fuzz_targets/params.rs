//! Fuzzes TVM's params format: any bytes load or give an error; loaded params save and
//! load back equal.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(p) = kiln_executor::load_params(data) {
        let again =
            kiln_executor::load_params(&kiln_executor::save_params(&p)).expect("saved params load");
        // Bits, not values: NaN is not equal to itself.
        let bits = |m: &std::collections::BTreeMap<String, kiln_ir::NDArray>| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.shape().to_vec(), v.dtype(), v.to_le_bytes()))
                .collect::<Vec<_>>()
        };
        assert_eq!(bits(&again), bits(&p));
    }
    let _ = kiln_executor::load_ndarray(data);
});
