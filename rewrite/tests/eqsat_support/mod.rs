//! Shared helpers of the eqsat tests: binding a model's weights as constants (so the
//! folding rules have constants to fold) and comparing a module's outputs with the
//! reference interpreter's.

#![allow(dead_code)]

use std::collections::HashMap;

use kiln_ir::interp::{Inputs, evaluate};
use kiln_ir::{ExprId, Module, NDArray};

/// `m` with every `@main` parameter named in `params` replaced by a constant holding
/// its value (what a compiler does with known weights before optimizing).
pub fn bind_params(m: &Module, params: &Inputs) -> Module {
    let mut out = m.clone();
    let main = out.main().unwrap().clone();
    let mut map: HashMap<ExprId, ExprId> = HashMap::new();
    let mut keep = vec![];
    for &p in &main.params {
        let name = out.var_name(p).unwrap().to_string();
        match params.get(&name) {
            Some(v) => {
                let c = out.constant(v.clone());
                map.insert(p, c);
            }
            None => keep.push(p),
        }
    }
    for id in kiln_ir::visit::post_order(m, main.body) {
        let new = kiln_ir::visit::rebuild(&mut out, id, &map).unwrap();
        if new != id {
            map.insert(id, new);
        }
    }
    let body = *map.get(&main.body).unwrap_or(&main.body);
    out.set_main(&keep, body).unwrap();
    out
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
