//! The model zoo: workloads built with the Rust API, with the structure and parameter
//! names of TVM's `relay.testing` workloads, and weights initialised from a seed with
//! TVM's Xavier rule so that runs are reproducible bit for bit.

mod mlp;
mod resnet;

use std::collections::BTreeMap;

pub use mlp::mlp;
pub use resnet::resnet;

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::expr::{ExprId, Module};
use crate::rng::SplitMix64;
use crate::tensor::NDArray;

/// Named parameter tensors (weights), bound to `@main`'s parameters by name.
pub type Params = BTreeMap<String, NDArray>;

/// The zoo's model names, as accepted by [`by_name`].
pub const NAMES: &[&str] = &["resnet18", "resnet34", "resnet50", "mlp"];

/// A zoo model with its default configuration (batch 1, 3x224x224 images for the
/// ResNets, 1x28x28 for the MLP, float32, seed 0).
pub fn by_name(name: &str) -> Result<(Module, Params)> {
    match name {
        "resnet18" => resnet(18, 1, [3, 224, 224], DType::F32, 0),
        "resnet34" => resnet(34, 1, [3, 224, 224], DType::F32, 0),
        "resnet50" => resnet(50, 1, [3, 224, 224], DType::F32, 0),
        "mlp" => mlp(1, 10, [1, 28, 28], DType::F32, 0),
        other => Err(Error::InvalidArgument(format!(
            "unknown zoo model `{other}` (known: {})",
            NAMES.join(", ")
        ))),
    }
}

/// Initialises every parameter of `@main` except `data`, as TVM's `create_workload`
/// does: names ending in `weight` get Xavier-uniform values (magnitude 3, averaged
/// fan-in/fan-out), `gamma` and `moving_var` ones, `beta`, `moving_mean` and `bias`
/// zeros. Parameters are drawn in `@main` order from one generator seeded by `seed`.
pub fn init_params(m: &Module, seed: u64) -> Result<Params> {
    let main = m.main()?;
    let mut rng = SplitMix64::new(seed);
    let mut params = Params::new();
    for &p in &main.params {
        let name = m.var_name(p).unwrap_or_default().to_string();
        if name == "data" {
            continue;
        }
        let ty = m
            .ty(p)
            .as_tensor()
            .ok_or_else(|| Error::InvalidModel(format!("parameter %{name} is not a tensor")))?;
        let value = if name.ends_with("weight") {
            xavier(&ty.shape, ty.dtype, &mut rng)
        } else if name.ends_with("gamma") || name.ends_with("moving_var") {
            NDArray::full(ty.shape.clone(), ty.dtype, 1.0)
        } else if name.ends_with("beta") || name.ends_with("moving_mean") || name.ends_with("bias")
        {
            NDArray::zeros(ty.shape.clone(), ty.dtype)
        } else {
            return Err(Error::InvalidModel(format!(
                "no initialiser for parameter %{name}"
            )));
        };
        params.insert(name, value);
    }
    Ok(params)
}

/// TVM's `Xavier(rnd_type="uniform", factor_type="avg", magnitude=3)`.
fn xavier(shape: &[usize], dtype: DType, rng: &mut SplitMix64) -> NDArray {
    let receptive: usize = shape.iter().skip(2).product();
    let fan_in = shape.get(1).copied().unwrap_or(1) * receptive;
    let fan_out = shape.first().copied().unwrap_or(1) * receptive;
    let scale = (3.0 / ((fan_in + fan_out) as f64 / 2.0)).sqrt();
    let n: usize = shape.iter().product();
    let values = (0..n).map(|_| rng.uniform(-scale, scale)).collect();
    NDArray::from_f64(shape.to_vec(), dtype, values).expect("numel matches shape")
}

/// Makes `@main` over the free variables of `body`, in post order (as
/// `relay.Function(relay.analysis.free_vars(net), net)` does).
fn finish(mut m: Module, body: ExprId) -> Result<Module> {
    let params = crate::visit::free_vars(&m, body);
    m.set_main(&params, body)?;
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xavier_range_and_seed() {
        let mut a = SplitMix64::new(1);
        let w = xavier(&[64, 3, 7, 7], DType::F32, &mut a);
        let bound = (3.0f64 / ((3 * 49 + 64 * 49) as f64 / 2.0)).sqrt();
        let v = w.to_f64_vec();
        assert!(v.iter().all(|x| x.abs() <= bound));
        assert!(v.iter().any(|x| x.abs() > bound * 0.9));
        assert_eq!(
            w,
            xavier(&[64, 3, 7, 7], DType::F32, &mut SplitMix64::new(1))
        );
    }

    #[test]
    fn unknown_name_lists_known_ones() {
        let e = by_name("resnet19").unwrap_err().to_string();
        assert!(
            e.contains("unknown zoo model `resnet19`") && e.contains("resnet18"),
            "{e}"
        );
    }
}
