//! Shared helpers of the `te_*` tests: sample computes (elementwise with broadcasting,
//! matmul, padded conv2d; from `kiln_te::testing`), random inputs, and a check that a schedule lowers to a
//! verified kernel (whose text form reads back) computing what the unscheduled lowering
//! computes.
#![allow(dead_code)]

use kiln_ir::NDArray;
use kiln_te::te::{self, Graph, Schedule};
use kiln_te::tir::{PrimFunc, parse, run_with_inputs, verify};

#[allow(unused_imports)]
pub use kiln_te::testing::{bias_relu, conv2d, matmul};

/// Random inputs for every parameter of `f`.
pub fn inputs(f: &PrimFunc, seed: u64) -> Vec<NDArray> {
    f.inputs()
        .iter()
        .enumerate()
        .map(|(n, b)| {
            let b = f.buffer(*b).unwrap();
            NDArray::random(b.shape.clone(), b.dtype, seed + n as u64)
        })
        .collect()
}

/// Lowers `s`, verifies it, runs it and the unscheduled lowering of the same outputs on
/// the same random inputs, and compares: exactly, or within `rtol` relative error.
pub fn assert_same(g: &Graph, s: &Schedule, rtol: f64) -> PrimFunc {
    let naive = te::lower(g, s.outputs(), "naive").unwrap();
    verify(&naive).unwrap();
    let f = s.lower("scheduled").unwrap();
    if let Err(e) = verify(&f) {
        panic!("{e}\n{f}");
    }
    // The text form reads back to the same kernel.
    let text = f.to_string();
    let back = parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(back.to_string(), text);
    let ins = inputs(&naive, 7);
    let want = run_with_inputs(&naive, &ins).unwrap();
    let got = match run_with_inputs(&f, &ins) {
        Ok(x) => x,
        Err(e) => panic!("{e}\n{f}"),
    };
    for (w, o) in want.iter().zip(&got) {
        let (w, o) = (w.to_f64_vec(), o.to_f64_vec());
        for (n, (a, b)) in w.iter().zip(&o).enumerate() {
            let ok = if rtol == 0.0 {
                a == b
            } else {
                (a - b).abs() <= rtol * a.abs().max(1.0)
            };
            assert!(ok, "element {n}: naive {a}, scheduled {b}\n{f}");
        }
    }
    f
}

/// Proptest cases: `default`, or `KILN_CASES` from the environment for longer local runs.
pub fn cases(default: u32) -> u32 {
    std::env::var("KILN_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
