//! ResNet as TVM's `relay.testing.resnet.get_workload` builds it: pre-activation
//! residual units (batch norm, relu, conv), a `bn_data` batch norm with `scale=False`
//! on the input, `stage{N}_unit{M}_*` names, 1x1 `sc` shortcut convolutions on the
//! first unit of each stage, and basic blocks below 50 layers, bottlenecks from 50 up.

use crate::attrs::F64;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::expr::{ExprId, Module};
use crate::op::{
    BatchFlatten, BatchNorm, BiasAdd, Binary, BinaryKind, Conv2d, Dense, GlobalPool2d, Pool2d,
    PoolKind, Softmax, Unary, UnaryKind,
};
use crate::ty::Type;

use super::{Params, finish, init_params};

/// Builds ResNet-`num_layers` (18, 34, 50, 101, 152 for ImageNet-sized images; for
/// images of height <= 28, the CIFAR variants with 6n+2 or 9n+2 layers) for
/// `batch` images of `image_shape` (C, H, W), with params initialised from `seed`.
pub fn resnet(
    num_layers: usize,
    batch: usize,
    image_shape: [usize; 3],
    dtype: DType,
    seed: u64,
) -> Result<(Module, Params)> {
    let [_, height, _] = image_shape;
    let (units, filters, bottleneck): (Vec<usize>, Vec<usize>, bool) = if height <= 28 {
        if (num_layers as i64 - 2) % 9 == 0 && num_layers >= 164 {
            (vec![(num_layers - 2) / 9; 3], vec![16, 64, 128, 256], true)
        } else if (num_layers as i64 - 2) % 6 == 0 && (8..164).contains(&num_layers) {
            (vec![(num_layers - 2) / 6; 3], vec![16, 16, 32, 64], false)
        } else {
            return Err(Error::InvalidArgument(format!(
                "no resnet with {num_layers} layers for {height}-pixel images (need 6n+2 below 164 or 9n+2 from 164)"
            )));
        }
    } else {
        let units = match num_layers {
            18 => vec![2, 2, 2, 2],
            34 | 50 => vec![3, 4, 6, 3],
            101 => vec![3, 4, 23, 3],
            152 => vec![3, 8, 36, 3],
            200 => vec![3, 24, 36, 3],
            269 => vec![3, 30, 48, 8],
            _ => {
                return Err(Error::InvalidArgument(format!(
                    "no resnet with {num_layers} layers (choose 18, 34, 50, 101, 152, 200 or 269)"
                )));
            }
        };
        if num_layers >= 50 {
            (units, vec![64, 256, 512, 1024, 2048], true)
        } else {
            (units, vec![64, 64, 128, 256, 512], false)
        }
    };
    if batch == 0 || image_shape.contains(&0) {
        return Err(Error::InvalidArgument(
            "batch and image dimensions must be positive".into(),
        ));
    }
    let mut b = Builder {
        m: Module::new(),
        dtype,
    };
    let data_shape = [batch, image_shape[0], image_shape[1], image_shape[2]];
    let data = b.m.var("data", Type::tensor(data_shape, dtype));
    let mut body = b.batch_norm(data, "bn_data", false)?;
    if height <= 32 {
        body = b.conv(body, "conv0", filters[0], 3, 1, 1)?;
    } else {
        body = b.conv(body, "conv0", filters[0], 7, 2, 3)?;
        body = b.batch_norm(body, "bn0", true)?;
        body = b.relu(body)?;
        let mut pool = Pool2d::new(PoolKind::Max, [3, 3]);
        pool.strides = [2, 2];
        pool.padding = [1; 4];
        body = b.m.call(pool, &[body])?;
    }
    for (i, &n) in units.iter().enumerate() {
        let stride = if i == 0 { 1 } else { 2 };
        body = b.residual_unit(
            body,
            filters[i + 1],
            stride,
            false,
            &format!("stage{}_unit1", i + 1),
            bottleneck,
        )?;
        for j in 0..n - 1 {
            let name = format!("stage{}_unit{}", i + 1, j + 2);
            body = b.residual_unit(body, filters[i + 1], 1, true, &name, bottleneck)?;
        }
    }
    body = b.batch_norm(body, "bn1", true)?;
    body = b.relu(body)?;
    body = b.m.call(
        GlobalPool2d {
            kind: PoolKind::Avg,
        },
        &[body],
    )?;
    body = b.m.call(BatchFlatten, &[body])?;
    body = b.dense_add_bias(body, 1000, "fc1")?;
    body = b.m.call(Softmax::default(), &[body])?;
    let m = finish(b.m, body)?;
    let params = init_params(&m, seed)?;
    Ok((m, params))
}

/// Helpers mirroring `relay.testing.layers`.
struct Builder {
    m: Module,
    dtype: DType,
}

impl Builder {
    fn param(&mut self, name: &str, shape: &[usize]) -> ExprId {
        self.m.var(name, Type::tensor(shape.to_vec(), self.dtype))
    }

    fn channels(&self, x: ExprId) -> usize {
        self.m.ty(x).as_tensor().map_or(0, |t| t.shape[1])
    }

    fn relu(&mut self, x: ExprId) -> Result<ExprId> {
        self.m.call(
            Unary {
                kind: UnaryKind::Relu,
            },
            &[x],
        )
    }

    /// `layers.batch_norm_infer(..., epsilon=2e-5)`, field 0.
    fn batch_norm(&mut self, x: ExprId, name: &str, scale: bool) -> Result<ExprId> {
        let c = self.channels(x);
        let args: Vec<ExprId> = ["gamma", "beta", "moving_mean", "moving_var"]
            .iter()
            .map(|s| self.param(&format!("{name}_{s}"), &[c]))
            .collect();
        let bn = BatchNorm {
            epsilon: F64(2e-5),
            scale,
            ..BatchNorm::default()
        };
        let out = self.m.call(bn, &[x, args[0], args[1], args[2], args[3]])?;
        self.m.tuple_get(out, 0)
    }

    /// `layers.conv2d(data, channels, kernel_size=(k, k), strides=(s, s), padding=(p, p))`.
    fn conv(
        &mut self,
        x: ExprId,
        name: &str,
        channels: usize,
        k: usize,
        s: usize,
        p: usize,
    ) -> Result<ExprId> {
        let c = self.channels(x);
        let w = self.param(&format!("{name}_weight"), &[channels, c, k, k]);
        let conv = Conv2d {
            strides: [s, s],
            padding: [p; 4],
            channels: Some(channels),
            kernel_size: Some([k, k]),
            ..Conv2d::default()
        };
        self.m.call(conv, &[x, w])
    }

    fn add(&mut self, a: ExprId, b: ExprId) -> Result<ExprId> {
        self.m.call(
            Binary {
                kind: BinaryKind::Add,
            },
            &[a, b],
        )
    }

    /// `residual_unit` of relay.testing.resnet.
    fn residual_unit(
        &mut self,
        data: ExprId,
        filters: usize,
        stride: usize,
        dim_match: bool,
        name: &str,
        bottleneck: bool,
    ) -> Result<ExprId> {
        let bn1 = self.batch_norm(data, &format!("{name}_bn1"), true)?;
        let act1 = self.relu(bn1)?;
        let body = if bottleneck {
            let quarter = filters / 4;
            let conv1 = self.conv(act1, &format!("{name}_conv1"), quarter, 1, stride, 0)?;
            let bn2 = self.batch_norm(conv1, &format!("{name}_bn2"), true)?;
            let act2 = self.relu(bn2)?;
            let conv2 = self.conv(act2, &format!("{name}_conv2"), quarter, 3, 1, 1)?;
            let bn3 = self.batch_norm(conv2, &format!("{name}_bn3"), true)?;
            let act3 = self.relu(bn3)?;
            self.conv(act3, &format!("{name}_conv3"), filters, 1, 1, 0)?
        } else {
            let conv1 = self.conv(act1, &format!("{name}_conv1"), filters, 3, stride, 1)?;
            let bn2 = self.batch_norm(conv1, &format!("{name}_bn2"), true)?;
            let act2 = self.relu(bn2)?;
            self.conv(act2, &format!("{name}_conv2"), filters, 3, 1, 1)?
        };
        let shortcut = if dim_match {
            data
        } else {
            self.conv(act1, &format!("{name}_sc"), filters, 1, stride, 0)?
        };
        self.add(body, shortcut)
    }

    /// `layers.dense_add_bias`: dense then bias_add on the last axis.
    fn dense_add_bias(&mut self, x: ExprId, units: usize, name: &str) -> Result<ExprId> {
        let k = self.m.ty(x).as_tensor().map_or(0, |t| t.shape[1]);
        let w = self.param(&format!("{name}_weight"), &[units, k]);
        let bias = self.param(&format!("{name}_bias"), &[units]);
        let d = self.m.call(Dense { units: Some(units) }, &[x, w])?;
        self.m.call(BiasAdd { axis: -1 }, &[d, bias])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn param_names(m: &Module) -> Vec<String> {
        m.main()
            .unwrap()
            .params
            .iter()
            .map(|&p| m.var_name(p).unwrap().to_string())
            .collect()
    }

    fn count_ops(m: &Module, name: &str) -> usize {
        let main = m.main_id().unwrap();
        crate::visit::post_order(m, main)
            .into_iter()
            .filter(|&id| m.kind(id).op().is_some_and(|op| op.name() == name))
            .count()
    }

    #[test]
    fn resnet18_matches_tvm_structure() {
        let (m, params) = resnet(18, 1, [3, 224, 224], DType::F32, 0).unwrap();
        crate::verify::verify(&m).unwrap();
        assert_eq!(count_ops(&m, "nn.conv2d"), 21);
        assert_eq!(count_ops(&m, "nn.batch_norm"), 19);
        let names = param_names(&m);
        // The order TVM prints (seed 001): data, bn_data_*, conv0, bn0, stage1_unit1 ...
        assert_eq!(
            &names[..12],
            &[
                "data",
                "bn_data_gamma",
                "bn_data_beta",
                "bn_data_moving_mean",
                "bn_data_moving_var",
                "conv0_weight",
                "bn0_gamma",
                "bn0_beta",
                "bn0_moving_mean",
                "bn0_moving_var",
                "stage1_unit1_bn1_gamma",
                "stage1_unit1_bn1_beta"
            ]
        );
        let i = names
            .iter()
            .position(|n| n == "stage1_unit1_conv2_weight")
            .unwrap();
        assert_eq!(names[i + 1], "stage1_unit1_sc_weight");
        assert_eq!(names.last().unwrap(), "fc1_bias");
        assert_eq!(names.len(), 100);
        assert_eq!(params.len(), names.len() - 1);
        assert_eq!(params["stage4_unit1_sc_weight"].shape(), &[512, 256, 1, 1]);
        let main = m.main_id().unwrap();
        let f = m.function_at(main).unwrap();
        assert_eq!(m.ty(f.body), &Type::tensor([1, 1000], DType::F32));
    }

    #[test]
    fn resnet50_uses_bottlenecks_and_cifar_variant_builds() {
        let (m, _) = resnet(50, 2, [3, 224, 224], DType::F32, 0).unwrap();
        assert_eq!(count_ops(&m, "nn.conv2d"), 53);
        assert!(param_names(&m).contains(&"stage4_unit3_conv3_weight".to_string()));
        let (c, _) = resnet(20, 1, [3, 28, 28], DType::F32, 0).unwrap();
        assert_eq!(count_ops(&c, "nn.conv2d"), 1 + 3 * 3 * 2 + 3);
        assert!(resnet(19, 1, [3, 224, 224], DType::F32, 0).is_err());
        assert!(resnet(21, 1, [3, 28, 28], DType::F32, 0).is_err());
    }
}
