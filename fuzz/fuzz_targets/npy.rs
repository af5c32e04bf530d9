//! Fuzzes the `.npy` reader: any bytes read or give an error; a tensor read writes back
//! to bytes that read equal.
#![no_main]

use std::path::Path;

use kiln_ir::NDArray;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(a) = NDArray::from_npy_bytes(data, Path::new("fuzz.npy")) {
        let again = NDArray::from_npy_bytes(&a.to_npy_bytes(), Path::new("again.npy"))
            .expect("written .npy reads back");
        // Bits, not values: NaN is not equal to itself.
        assert_eq!((again.shape(), again.dtype()), (a.shape(), a.dtype()));
        assert_eq!(again.to_le_bytes(), a.to_le_bytes());
    }
});
