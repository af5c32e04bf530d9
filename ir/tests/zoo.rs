//! Zoo models through the whole graph-IR layer: they verify, print, parse back to the
//! same text, and evaluate in the reference interpreter to a proper softmax.

use kiln_ir::interp::evaluate;
use kiln_ir::text::{PrintOptions, parse_module, print_module};
use kiln_ir::zoo::{self, by_name, resnet};
use kiln_ir::{DType, NDArray, verify};

#[test]
fn every_zoo_model_round_trips_through_text() {
    for name in zoo::NAMES {
        let (m, _) = by_name(name).unwrap();
        verify::verify(&m).unwrap();
        for types in [false, true] {
            let opts = PrintOptions {
                types,
                ..PrintOptions::default()
            };
            let text = print_module(&m, &opts);
            let again = parse_module(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
            verify::verify(&again).unwrap();
            assert_eq!(print_module(&again, &opts), text, "{name} (types: {types})");
        }
    }
}

#[test]
fn resnet18_text_matches_tvm_lines() {
    let (m, _) = by_name("resnet18").unwrap();
    let text = print_module(
        &m,
        &PrintOptions {
            types: true,
            ..PrintOptions::default()
        },
    );
    // Lines exactly as TVM prints them (seed 001), modulo the leading indentation.
    for line in [
        "%0 = nn.batch_norm(%data, %bn_data_gamma, %bn_data_beta, %bn_data_moving_mean, %bn_data_moving_var, epsilon=2e-05f, scale=False) /* ty=(Tensor[(1, 3, 224, 224), float32], Tensor[(3), float32], Tensor[(3), float32]) */;",
        "%2 = nn.conv2d(%1, %conv0_weight, strides=[2, 2], padding=[3, 3, 3, 3], channels=64, kernel_size=[7, 7]) /* ty=Tensor[(1, 64, 112, 112), float32] */;",
        "%6 = nn.max_pool2d(%5, pool_size=[3, 3], strides=[2, 2], padding=[1, 1, 1, 1]) /* ty=Tensor[(1, 64, 56, 56), float32] */;",
        "%15 = nn.conv2d(%9, %stage1_unit1_sc_weight, padding=[0, 0, 0, 0], channels=64, kernel_size=[1, 1]) /* ty=Tensor[(1, 64, 56, 56), float32] */;",
        "%88 = nn.dense(%87, %fc1_weight, units=1000) /* ty=Tensor[(1, 1000), float32] */;",
        "%89 = nn.bias_add(%88, %fc1_bias, axis=-1) /* ty=Tensor[(1, 1000), float32] */;",
        "nn.softmax(%89) /* ty=Tensor[(1, 1000), float32] */",
    ] {
        assert!(
            text.lines().any(|l| l.trim() == line),
            "missing line:\n{line}"
        );
    }
}

fn softmax_check(name: &str, out: &NDArray, batch: usize) {
    assert_eq!(out.shape(), &[batch, 1000], "{name}");
    let v = out.to_f64_vec();
    for row in v.chunks(1000) {
        let sum: f64 = row.iter().sum();
        assert!((sum - 1.0).abs() < 1e-4, "{name}: row sums to {sum}");
        assert!(row.iter().all(|&p| p > 0.0 && p < 1.0), "{name}");
    }
}

#[test]
fn resnet18_evaluates_to_a_softmax() {
    let (m, mut inputs) = by_name("resnet18").unwrap();
    inputs.insert(
        "data".into(),
        NDArray::random([1, 3, 224, 224], DType::F32, 0),
    );
    let out = evaluate(&m, &inputs).unwrap().flatten().remove(0);
    softmax_check("resnet18", &out, 1);
}

#[test]
fn small_resnets_of_every_block_kind_evaluate() {
    // Small images keep the test fast while covering the CIFAR stem, basic units
    // (resnet-20) and bottleneck units (resnet-50 on 64x64 images).
    for (layers, batch, image) in [(20, 2, [3, 28, 28]), (50, 1, [3, 64, 64])] {
        let (m, mut inputs) = resnet(layers, batch, image, DType::F32, 1).unwrap();
        let [c, h, w] = image;
        inputs.insert(
            "data".into(),
            NDArray::random([batch, c, h, w], DType::F32, 5),
        );
        let out = evaluate(&m, &inputs).unwrap().flatten().remove(0);
        softmax_check(&format!("resnet{layers}"), &out, batch);
    }
}

#[test]
fn seeds_make_weights_reproducible() {
    let (_, a) = resnet(18, 1, [3, 224, 224], DType::F32, 7).unwrap();
    let (_, b) = resnet(18, 1, [3, 224, 224], DType::F32, 7).unwrap();
    let (_, c) = resnet(18, 1, [3, 224, 224], DType::F32, 8).unwrap();
    assert_eq!(a["conv0_weight"], b["conv0_weight"]);
    assert_ne!(a["conv0_weight"], c["conv0_weight"]);
    assert_eq!(a["bn0_gamma"].to_f64_vec(), vec![1.0; 64]);
}

#[test]
fn resnet18_params_are_tvms_in_order_with_shapes() {
    // Names and shapes of @main's parameters as TVM prints them (seed 001).
    let expected = include_str!("fixtures/resnet18_tvm_params.txt");
    let (m, _) = by_name("resnet18").unwrap();
    let main = m.main().unwrap();
    let got: Vec<String> = main
        .params
        .iter()
        .map(|&p| {
            let dims: Vec<String> = m
                .ty(p)
                .as_tensor()
                .unwrap()
                .shape
                .iter()
                .map(|d| d.to_string())
                .collect();
            format!("{} ({})", m.var_name(p).unwrap(), dims.join(", "))
        })
        .collect();
    let want: Vec<&str> = expected.lines().collect();
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(g, w);
    }
}
