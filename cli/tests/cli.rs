//! End-to-end tests of the `kiln` binary: inspect and run on zoo models and text files,
//! and the clear one-line errors for bad input.

mod common;

use common::*;

fn tmp(name: &str) -> std::path::PathBuf {
    tmp_in("test", name)
}

#[test]
fn inspect_resnet18_prints_tvm_structure() {
    let o = kiln(&["inspect", "zoo:resnet18"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert_eq!(text.matches("nn.conv2d(").count(), 21);
    assert_eq!(text.matches("nn.batch_norm(").count(), 19);
    for name in [
        "%bn_data_gamma",
        "%conv0_weight",
        "%stage1_unit1_sc_weight",
        "%stage4_unit2_conv2_weight",
        "%fc1_bias",
    ] {
        assert!(text.contains(name), "{name} missing");
    }
    assert!(text.contains("epsilon=2e-05f, scale=False"));
    let typed = stdout(&kiln(&["inspect", "zoo:resnet18", "--types"]));
    assert!(typed.contains("/* ty=Tensor[(1, 1000), float32] */"));
}

#[test]
fn run_mlp_writes_a_softmax() {
    let out = tmp("mlp.npy");
    let o = kiln(&[
        "run",
        "zoo:mlp",
        "--target",
        "ref",
        "--output",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("output 0: Tensor[(1, 10), float32]"));
    let y = kiln_ir::NDArray::read_npy(&out).unwrap();
    let sum: f64 = y.to_f64_vec().iter().sum();
    assert!((sum - 1.0).abs() < 1e-5, "{sum}");
}

#[test]
fn run_text_file_with_given_input() {
    let model = tmp("add.relay");
    std::fs::write(
        &model,
        "def @main(%x: Tensor[(3), float32], %y: Tensor[(3), float32]) -> Tensor[(3), float32] {\n  add(%x, %y)\n}\n",
    )
    .unwrap();
    let x = tmp("x.npy");
    kiln_ir::NDArray::from_vec([3], vec![1.0f32, 2.0, 3.0])
        .unwrap()
        .write_npy(&x)
        .unwrap();
    let y = tmp("y.npy");
    kiln_ir::NDArray::from_vec([3], vec![10.0f32, 20.0, 30.0])
        .unwrap()
        .write_npy(&y)
        .unwrap();
    let out = tmp("sum.npy");
    let o = kiln(&[
        "run",
        model.to_str().unwrap(),
        "--input",
        &format!("x={}", x.display()),
        "--input",
        &format!("y={}", y.display()),
        "--output",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let sum = kiln_ir::NDArray::read_npy(&out).unwrap();
    assert_eq!(sum.to_vec::<f32>().unwrap(), vec![11.0, 22.0, 33.0]);
}

#[test]
fn bad_input_gives_one_clear_line() {
    let malformed = tmp("malformed.relay");
    std::fs::write(
        &malformed,
        "def @main(%x: Tensor[(3), float32]) {\n  nn.relu(%x\n}\n",
    )
    .unwrap();
    assert_clear_error(
        &kiln(&["inspect", malformed.to_str().unwrap()]),
        &["malformed.relay", "3:1"],
    );

    let unknown_op = tmp("unknown_op.relay");
    std::fs::write(
        &unknown_op,
        "def @main(%x: Tensor[(3), float32]) {\n  nn.frobnicate(%x)\n}\n",
    )
    .unwrap();
    assert_clear_error(
        &kiln(&["inspect", unknown_op.to_str().unwrap()]),
        &["nn.frobnicate"],
    );

    let mismatch = tmp("mismatch.relay");
    std::fs::write(
        &mismatch,
        "def @main(%x: Tensor[(2, 3), float32], %y: Tensor[(4), float32]) {\n  add(%x, %y)\n}\n",
    )
    .unwrap();
    assert_clear_error(
        &kiln(&["inspect", mismatch.to_str().unwrap()]),
        &["add", "(2, 3)", "(4)"],
    );

    assert_clear_error(
        &kiln(&["inspect", "zoo:resnet19"]),
        &["resnet19", "resnet18"],
    );
    assert_clear_error(
        &kiln(&["run", "zoo:mlp", "--input", "data=/nonexistent/in.npy"]),
        &["/nonexistent/in.npy"],
    );
    assert_clear_error(
        &kiln(&["run", "zoo:mlp", "--input", "nope=x.npy"]),
        &["nope", "data"],
    );
    assert_clear_error(
        &kiln(&["run", "zoo:mlp", "--target", "tpu"]),
        &["unknown target `tpu`", "ref"],
    );
    assert_clear_error(
        &kiln(&["inspect", "/nonexistent/model.relay"]),
        &["/nonexistent/model.relay"],
    );
}

#[test]
fn inspect_loop_ir_for_cpu_and_gpu() {
    let o = kiln(&["inspect", "zoo:mlp", "--emit", "loop", "--target", "cpu"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let cpu = stdout(&o);
    // One kernel per fused group at the default opt level 3.
    assert_eq!(cpu.matches("primfn @").count(), 5, "{cpu}");
    // The zoo's zero biases are folded away once the params are bound.
    assert!(cpu.contains("primfn @fused_nn_dense_nn_relu_1"), "{cpu}");
    assert!(cpu.contains("primfn @fused_nn_dense"), "{cpu}");
    assert!(cpu.contains("parallel for"), "{cpu}");
    assert!(cpu.contains("vectorized for"), "{cpu}");
    // A GPU kind without a backend yet shows the GPU default schedules.
    let o = kiln(&["inspect", "zoo:mlp", "--emit", "loop", "--target", "cuda"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let gpu = stdout(&o);
    assert!(gpu.contains("launch_thread blockIdx.x"), "{gpu}");
    assert!(gpu.contains("launch_thread threadIdx.x"), "{gpu}");
    assert!(!gpu.contains("parallel for"), "{gpu}");
    // The CUDA backend's PTX: one `.entry` per launch, at least one per kernel.
    let o = kiln(&["inspect", "zoo:mlp", "--emit", "ptx"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let ptx = stdout(&o);
    assert!(
        ptx.contains(".version 7.8") && ptx.contains(".target sm_"),
        "{ptx}"
    );
    let kernels = gpu.matches("primfn @").count();
    assert!(ptx.matches(".entry ").count() >= kernels, "{ptx}");
    // The SPIR-V backend's modules: one `GLCompute` entry point per launch.
    let o = kiln(&["inspect", "zoo:mlp", "--emit", "spirv"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let spirv = stdout(&o);
    assert!(spirv.contains("OpCapability Shader"), "{spirv}");
    assert!(
        spirv.matches("OpEntryPoint GLCompute").count() >= kernels,
        "{spirv}"
    );
    // The default stays the graph IR.
    let graph = stdout(&kiln(&["inspect", "zoo:mlp"]));
    assert!(graph.contains("def @main") && !graph.contains("primfn"));
}

#[test]
fn inspect_resnet18_loop_ir() {
    let o = kiln(&[
        "inspect",
        "zoo:resnet18",
        "--emit",
        "loop",
        "--target",
        "cpu",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let cpu = stdout(&o);
    // Optimized and fused: batch norms are gone (folded into the convolutions or left
    // as a scale), each of the 21 convolutions heads one kernel with its elementwise
    // tail (relu, shortcut add).
    assert_eq!(cpu.matches("primfn @fused_nn_conv2d").count(), 21, "{cpu}");
    assert!(cpu.contains("primfn @fused_nn_conv2d_nn_relu"), "{cpu}");
    assert!(cpu.contains("primfn @fused_nn_conv2d_add"), "{cpu}");
    assert!(!cpu.contains("batch_norm"), "{cpu}");
    assert!(cpu.contains("parallel for") && cpu.contains("vectorized for"));
    let o = kiln(&[
        "inspect",
        "zoo:resnet18",
        "--emit",
        "loop",
        "--target",
        "vulkan",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let gpu = stdout(&o);
    assert!(gpu.contains("blockIdx.x") && gpu.contains("threadIdx.x"));
}

#[test]
fn inspect_rejects_unknown_emit_and_target() {
    let o = kiln(&["inspect", "zoo:mlp", "--emit", "asm"]);
    assert_clear_error(&o, &["unknown --emit `asm`", "graph, opt, loop"]);
    // `gpu` is no target kind: unknown here as in every other command.
    for unknown in ["tpu", "gpu"] {
        let o = kiln(&["inspect", "zoo:mlp", "--emit", "loop", "--target", unknown]);
        assert_clear_error(
            &o,
            &[&format!("unknown target `{unknown}`"), "ref, interp, cpu"],
        );
        let o = kiln(&["run", "zoo:mlp", "--target", unknown]);
        assert_clear_error(
            &o,
            &[&format!("unknown target `{unknown}`"), "ref, interp, cpu"],
        );
    }
    let o = kiln(&["inspect", "zoo:mlp", "--emit", "loop", "--target", "ref"]);
    assert_clear_error(&o, &["`ref` compiles none", "interp, cpu"]);
}

#[test]
fn inspect_opt_prints_the_optimized_graph_and_the_pass_report() {
    let o = kiln(&["inspect", "zoo:mlp", "--emit", "opt"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert_eq!(text.matches("Primitive=1").count(), 5, "{text}");
    assert!(text.contains("// passes at opt-level 3"), "{text}");
    let fuse = text
        .lines()
        .find(|l| l.starts_with("// FuseOps"))
        .unwrap_or_else(|| panic!("no FuseOps line in {text}"));
    assert!(
        fuse.contains("groups=5") && fuse.contains("nodes"),
        "{fuse}"
    );
    // The output is text IR (the report is comments): it reads back.
    let file = tmp("mlp_opt.relay");
    std::fs::write(&file, &text).unwrap();
    let again = kiln(&["inspect", s(&file)]);
    assert!(again.status.success(), "{}", stderr(&again));
    // Level 0: every op its own primitive function.
    let zero = stdout(&kiln(&[
        "inspect",
        "zoo:mlp",
        "--emit",
        "opt",
        "--opt-level",
        "0",
    ]));
    assert_eq!(zero.matches("Primitive=1").count(), 10, "{zero}");
    assert!(zero.contains("groups=10"), "{zero}");
    // Errors.
    let o = kiln(&["inspect", "zoo:mlp", "--emit", "opt", "--opt-level", "4"]);
    assert_clear_error(&o, &["--opt-level", "4", "0..=3"]);
    let o = kiln(&["inspect", "zoo:mlp", "--opt-level", "1"]);
    assert_clear_error(&o, &["--opt-level applies to --emit opt"]);
}

/// A text IR model without params: the build names every parameter it leaves unbound;
/// `--params` binds the weights (TVM's params format) and then runs exactly as the zoo
/// model with its own weights; a params file naming no parameter of @main is an error.
#[test]
fn params_file_binds_the_weights_of_a_text_model() {
    let text = tmp("mlp.relay");
    std::fs::write(&text, kiln_ok(&["inspect", "zoo:mlp"])).unwrap();
    let bare = kiln(&["run", s(&text), "--target", "cpu"]);
    assert!(bare.status.success(), "{}", stderr(&bare));
    let note = stderr(&bare);
    assert!(
        note.contains("all 7 parameters of @main are graph inputs")
            && note.contains("data, fc1_weight, fc1_bias")
            && note.contains("--params"),
        "{note}"
    );

    let (_, weights) = kiln_ir::zoo::by_name("mlp").unwrap();
    let params = tmp("mlp.params");
    std::fs::write(&params, kiln::save_params(&weights)).unwrap();
    let bound = kiln(&["run", s(&text), "--target", "cpu", "--params", s(&params)]);
    assert!(bound.status.success(), "{}", stderr(&bound));
    assert!(!stderr(&bound).contains("note:"), "{}", stderr(&bound));
    let zoo = kiln_ok(&["run", "zoo:mlp", "--target", "cpu"]);
    let first = |t: &str| t.lines().next().unwrap_or_default().to_string();
    assert_eq!(first(&stdout(&bound)), first(&zoo));
    let compiled = kiln_ok(&[
        "compile",
        s(&text),
        "--target",
        "cpu",
        "--params",
        s(&params),
        "-o",
        s(&tmp("mlp.kmod")),
    ]);
    assert!(
        compiled.contains("graph inputs (set before each run): data\n"),
        "{compiled}"
    );

    let mut stray = weights.clone();
    stray.insert(
        "fc9_weight".into(),
        kiln::NDArray::zeros(vec![1], kiln::DType::F32),
    );
    let bad = tmp("stray.params");
    std::fs::write(&bad, kiln::save_params(&stray)).unwrap();
    let o = kiln(&["run", s(&text), "--params", s(&bad)]);
    assert_clear_error(&o, &["fc9_weight", "no parameter", "fc1_weight"]);
}
