//! Helpers shared by the rewrite crate's tests: seeded inputs for a module's `@main`
//! and the value check every pass test makes (the module before and after a pass agree
//! in the reference interpreter within a tolerance).

#![allow(dead_code)]

use kiln_ir::interp::{Inputs, evaluate};
use kiln_ir::{Module, NDArray};

/// Absolute and relative tolerance of the value checks (relative matters for large
/// values: `|a - e| <= ATOL + RTOL * |e|`).
pub const ATOL: f64 = 1e-4;
pub const RTOL: f64 = 1e-4;

/// Seeded values for every parameter of `@main` that `given` lacks: uniform in
/// `[-1, 1)`, except parameters whose name contains `var` (variances), uniform in
/// `[0.5, 1.5)` so that `sqrt(var + eps)` is real.
pub fn fill_inputs(m: &Module, given: &Inputs, seed: u64) -> Inputs {
    let mut inputs = given.clone();
    for (i, (name, t)) in m.main_tensor_params().unwrap().into_iter().enumerate() {
        if inputs.contains_key(&name) {
            continue;
        }
        let (lo, hi) = if name.contains("var") {
            (0.5, 1.5)
        } else {
            (-1.0, 1.0)
        };
        let v = NDArray::random_uniform(t.shape, t.dtype, seed + i as u64, lo, hi);
        inputs.insert(name, v);
    }
    inputs
}

/// `after`'s `@main` on the inputs it still takes (a subset of `inputs`: bound params are
/// gone) equals `before`'s on all of `inputs`, output by output.
pub fn check_same_values(before: &Module, after: &Module, inputs: &Inputs) -> Result<(), String> {
    let want = evaluate(before, inputs)
        .map_err(|e| format!("the input module does not evaluate: {e}"))?
        .flatten();
    let names: Vec<String> = after
        .main_tensor_params()
        .map_err(|e| e.to_string())?
        .into_iter()
        .map(|p| p.0)
        .collect();
    let after_inputs: Inputs = inputs
        .iter()
        .filter(|(k, _)| names.contains(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let got = evaluate(after, &after_inputs)
        .map_err(|e| format!("the rewritten module does not evaluate: {e}"))?
        .flatten();
    if got.len() != want.len() {
        return Err(format!("{} outputs, expected {}", got.len(), want.len()));
    }
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        g.allclose(w, ATOL, RTOL)
            .map_err(|e| format!("output {i} differs after the passes: {e}"))?;
    }
    Ok(())
}

/// Runs `a` and `b` on `inputs` and asserts their outputs agree within `tol`
/// (absolute and relative).
pub fn assert_same_outputs(a: &Module, b: &Module, inputs: &Inputs, tol: f64) {
    let x = evaluate(a, inputs).unwrap().flatten();
    let y = evaluate(b, inputs).unwrap().flatten();
    assert_eq!(x.len(), y.len());
    for (i, (p, q)) in x.iter().zip(&y).enumerate() {
        if let Err(e) = q.allclose(p, tol, tol) {
            panic!("output {i} differs: {e}");
        }
    }
}

/// One seeded random input tensor per name and shape.
pub fn input(name: &str, t: &kiln_ir::TensorType, seed: u64) -> Inputs {
    let mut i = Inputs::new();
    i.insert(
        name.to_string(),
        NDArray::random(t.shape.clone(), t.dtype, seed),
    );
    i
}
