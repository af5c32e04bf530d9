//! The classical passes never change values: random small chains of conv2d, batch norm,
//! relu, per-channel scales and biases, then pooling and a dense head (proptest over
//! shapes, attributes, channel counts and whether the weights are bound as constants)
//! evaluate the same in the reference interpreter before and after
//! `classical_passes()` at opt level 3, within `common::ATOL`/`RTOL`. With bound weights
//! no `nn.batch_norm` is left and every scale next to a conv or dense is folded away.
//! `KILN_CASES` raises the case count.

mod common;

use std::collections::BTreeMap;

use kiln_ir::attrs::F64;
use kiln_ir::interp::Inputs;
use kiln_ir::op::{
    BatchFlatten, BatchNorm, BiasAdd, Binary, BinaryKind, Conv2d, Dense, GlobalPool2d, PoolKind,
    Unary, UnaryKind,
};
use kiln_ir::{DType, ExprId, Module, NDArray, Op, Type};
use kiln_rewrite::pass::run_passes;
use kiln_rewrite::passes::{bind_params, classical_passes};
use kiln_rewrite::{Pass, PassContext};
use proptest::prelude::*;

/// One layer of a random chain over an NCHW activation.
#[derive(Clone, Debug)]
enum Layer {
    Conv {
        out: usize,
        kernel: usize,
        stride: usize,
        grouped: bool,
    },
    BatchNorm {
        eps: f64,
        scale: bool,
        center: bool,
    },
    Relu,
    /// `multiply` by a constant `(C, 1, 1)`.
    Scale,
    /// `add` of a constant `(C, 1, 1)`.
    Shift,
    /// `nn.bias_add` of a `(C)` parameter.
    Bias,
}

fn layer() -> impl Strategy<Value = Layer> {
    prop_oneof![
        (1usize..5, 1usize..4, 1usize..3, any::<bool>()).prop_map(
            |(out, kernel, stride, grouped)| Layer::Conv {
                out,
                kernel,
                stride,
                grouped
            }
        ),
        (
            prop_oneof![Just(1e-5), Just(2e-5), Just(1e-3)],
            any::<bool>(),
            any::<bool>()
        )
            .prop_map(|(eps, scale, center)| Layer::BatchNorm { eps, scale, center }),
        Just(Layer::Relu),
        Just(Layer::Scale),
        Just(Layer::Shift),
        Just(Layer::Bias),
    ]
}

/// The chain as a module whose params are `@main` parameters (names ending in `var` are
/// variances), plus a dense head when `units` is set.
fn build(
    channels: usize,
    size: usize,
    layers: &[Layer],
    head: Option<(usize, bool)>,
    seed: u64,
) -> Module {
    let mut m = Module::new();
    let f32t = |s: &[usize]| Type::tensor(s.to_vec(), DType::F32);
    let data = m.var("data", f32t(&[1, channels, size, size]));
    let mut params = vec![data];
    let (mut x, mut c, mut h) = (data, channels, size);
    let constant = |m: &mut Module, shape: &[usize], k: u64| {
        m.constant(NDArray::random_uniform(
            shape.to_vec(),
            DType::F32,
            seed + k,
            -2.0,
            2.0,
        ))
    };
    for (i, l) in layers.iter().enumerate() {
        let mut param = |m: &mut Module, name: &str, shape: &[usize]| {
            let v = m.var(format!("{name}{i}"), f32t(shape));
            params.push(v);
            v
        };
        x = match *l {
            Layer::Conv {
                out,
                kernel,
                stride,
                grouped,
            } => {
                let groups = if grouped && c % 2 == 0 && out % 2 == 0 {
                    2
                } else {
                    1
                };
                let pad = kernel / 2;
                let w = param(&mut m, "w", &[out, c / groups, kernel, kernel]);
                let conv = Conv2d {
                    strides: [stride, stride],
                    padding: [pad; 4],
                    groups,
                    ..Conv2d::default()
                };
                c = out;
                h = (h + 2 * pad - kernel) / stride + 1;
                m.call(conv, &[x, w]).unwrap()
            }
            Layer::BatchNorm { eps, scale, center } => {
                let g = param(&mut m, "gamma", &[c]);
                let b = param(&mut m, "beta", &[c]);
                let mean = param(&mut m, "mean", &[c]);
                let var = param(&mut m, "var", &[c]);
                let bn = BatchNorm {
                    epsilon: F64(eps),
                    scale,
                    center,
                    ..BatchNorm::default()
                };
                let t = m.call(bn, &[x, g, b, mean, var]).unwrap();
                m.tuple_get(t, 0).unwrap()
            }
            Layer::Relu => m
                .call(
                    Unary {
                        kind: UnaryKind::Relu,
                    },
                    &[x],
                )
                .unwrap(),
            Layer::Scale | Layer::Shift => {
                let s = constant(&mut m, &[c, 1, 1], i as u64);
                let kind = if matches!(l, Layer::Scale) {
                    BinaryKind::Multiply
                } else {
                    BinaryKind::Add
                };
                m.call(Binary { kind }, &[x, s]).unwrap()
            }
            Layer::Bias => {
                let b = param(&mut m, "bias", &[c]);
                m.call(BiasAdd::default(), &[x, b]).unwrap()
            }
        };
    }
    let _ = h;
    if let Some((units, bn)) = head {
        let pooled = m
            .call(
                GlobalPool2d {
                    kind: PoolKind::Avg,
                },
                &[x],
            )
            .unwrap();
        let flat = m.call(BatchFlatten, &[pooled]).unwrap();
        let w = m.var("fc_weight", f32t(&[units, c]));
        params.push(w);
        x = m.call(Dense::default(), &[flat, w]).unwrap();
        if bn {
            let names = ["fc_gamma", "fc_beta", "fc_mean", "fc_var"];
            let vs: Vec<ExprId> = names.iter().map(|n| m.var(*n, f32t(&[units]))).collect();
            params.extend(&vs);
            let t = m
                .call(BatchNorm::default(), &[x, vs[0], vs[1], vs[2], vs[3]])
                .unwrap();
            x = m.tuple_get(t, 0).unwrap();
        } else {
            let s = constant(&mut m, &[units], 99);
            x = m
                .call(
                    Binary {
                        kind: BinaryKind::Multiply,
                    },
                    &[x, s],
                )
                .unwrap();
        }
    }
    m.set_main(&params, x).unwrap();
    m
}

/// Runs the classical passes at opt level 3 on `m` with every param but `data` bound
/// when `bind`, checks values against `m` and returns the optimized module.
fn optimize_and_check(m: &Module, bind: bool, seed: u64) -> Result<Module, String> {
    let inputs = common::fill_inputs(m, &Inputs::new(), seed);
    let start = if bind {
        let params: BTreeMap<String, NDArray> = inputs
            .iter()
            .filter(|(k, _)| k.as_str() != "data")
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        bind_params(m, &params).map_err(|e| e.to_string())?
    } else {
        m.clone()
    };
    let passes = classical_passes();
    let refs: Vec<&dyn Pass> = passes.iter().map(|p| p.as_ref()).collect();
    let mut ctx = PassContext::with_opt_level(3).unwrap();
    ctx.verify = true;
    let (out, _) = run_passes(&start, &refs, &ctx).map_err(|e| e.to_string())?;
    common::check_same_values(m, &out, &inputs)?;
    Ok(out)
}

/// How many calls of ops named `name` `@main` reaches.
fn count_op(m: &Module, name: &str) -> usize {
    kiln_ir::visit::post_order(m, m.main_id().unwrap())
        .into_iter()
        .filter(|&id| m.kind(id).op().is_some_and(|op| op.name() == name))
        .count()
}

/// Scales FoldScaleAxis should have folded when the weights are constants: multiplies
/// whose argument is a conv2d or dense (backward), and multiplies that are the data of a
/// dense or of a conv2d with `groups == 1` (forward).
fn unfolded_scales(m: &Module) -> usize {
    let is_multiply = |id| {
        matches!(
            m.kind(id).op(),
            Some(Op::Binary(Binary {
                kind: BinaryKind::Multiply
            }))
        )
    };
    kiln_ir::visit::post_order(m, m.main_id().unwrap())
        .into_iter()
        .filter(|&id| {
            let children = m.kind(id).children();
            match m.kind(id).op() {
                Some(Op::Binary(Binary {
                    kind: BinaryKind::Multiply,
                })) => children
                    .iter()
                    .any(|&a| matches!(m.kind(a).op(), Some(Op::Conv2d(_) | Op::Dense(_)))),
                Some(Op::Dense(_)) => is_multiply(children[0]),
                Some(Op::Conv2d(c)) => c.groups == 1 && is_multiply(children[0]),
                _ => false,
            }
        })
        .count()
}

fn cases() -> u32 {
    std::env::var("KILN_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(24)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn classical_passes_keep_values(
        channels in 1usize..4,
        size in 3usize..7,
        layers in prop::collection::vec(layer(), 1..6),
        head in prop::option::of((1usize..5, any::<bool>())),
        bind in any::<bool>(),
        seed in 0u64..1000,
    ) {
        let m = build(channels, size, &layers, head, seed);
        let out = optimize_and_check(&m, bind, seed).map_err(TestCaseError::fail)?;
        prop_assert_eq!(count_op(&out, "nn.batch_norm"), 0);
        if bind {
            // Every scale next to a conv/dense folds (the chains built here use each
            // value once).
            prop_assert_eq!(unfolded_scales(&out), 0, "{}",
                kiln_ir::text::print_module(&out, &Default::default()));
        }
    }
}
