//! The multi-layer perceptron of TVM's `relay.testing.mlp`: flatten, then dense layers
//! of 128 and 64 units with relu, then `num_classes` units and softmax.

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::expr::Module;
use crate::op::{BatchFlatten, BiasAdd, Dense, Softmax, Unary, UnaryKind};
use crate::ty::Type;

use super::{Params, finish, init_params};

/// The MLP for `batch` images of `image_shape` (C, H, W), params from `seed`.
pub fn mlp(
    batch: usize,
    num_classes: usize,
    image_shape: [usize; 3],
    dtype: DType,
    seed: u64,
) -> Result<(Module, Params)> {
    if batch == 0 || num_classes == 0 || image_shape.contains(&0) {
        return Err(Error::InvalidArgument("mlp sizes must be positive".into()));
    }
    let mut m = Module::new();
    let shape = [batch, image_shape[0], image_shape[1], image_shape[2]];
    let data = m.var("data", Type::tensor(shape, dtype));
    let mut x = m.call(BatchFlatten, &[data])?;
    let mut k = image_shape.iter().product::<usize>();
    for (i, units) in [128, 64, num_classes].into_iter().enumerate() {
        let w = m.var(
            format!("fc{}_weight", i + 1),
            Type::tensor([units, k], dtype),
        );
        let b = m.var(format!("fc{}_bias", i + 1), Type::tensor([units], dtype));
        x = m.call(Dense { units: Some(units) }, &[x, w])?;
        x = m.call(BiasAdd { axis: -1 }, &[x, b])?;
        if i < 2 {
            x = m.call(
                Unary {
                    kind: UnaryKind::Relu,
                },
                &[x],
            )?;
        }
        k = units;
    }
    let out = m.call(Softmax::default(), &[x])?;
    let m = finish(m, out)?;
    let params = init_params(&m, seed)?;
    Ok((m, params))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mlp_params_and_output_type() {
        let (m, params) = mlp(4, 10, [1, 28, 28], DType::F32, 0).unwrap();
        crate::verify::verify(&m).unwrap();
        let names: Vec<&str> = params.keys().map(String::as_str).collect();
        assert_eq!(
            names,
            [
                "fc1_bias",
                "fc1_weight",
                "fc2_bias",
                "fc2_weight",
                "fc3_bias",
                "fc3_weight"
            ]
        );
        assert_eq!(params["fc1_weight"].shape(), &[128, 784]);
        let f = m.main().unwrap();
        assert_eq!(m.ty(f.body), &Type::tensor([4, 10], DType::F32));
        assert!(mlp(0, 10, [1, 28, 28], DType::F32, 0).is_err());
    }
}
