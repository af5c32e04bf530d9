//! Issue 4's acceptance for the executor as a whole, on the `interp` backend: the zoo MLP
//! end to end against the reference, the executor API and its error paths, zero copy,
//! shared params, benchmarking, the debug executor, export → load, refusal of damaged
//! files, concurrent executors over one module, and memory planning on ResNet-50.

use std::collections::BTreeMap;
use std::sync::Arc;

use kiln::{PassContext, Registry};
use kiln_executor::backends::InterpBackend;
use kiln_executor::{
    BenchmarkOptions, CompiledModule, DebugExecutor, Error, GraphExecutor, Target, load, load_bytes,
};
use kiln_ir::{DType, Module, NDArray, Type, op};

fn interp() -> Target {
    "interp".parse().unwrap()
}

/// `kiln::build` for a parsed target.
fn build(
    m: &Module,
    target: &Target,
    params: &BTreeMap<String, NDArray>,
    opts: impl Into<PassContext>,
) -> kiln::Result<CompiledModule> {
    kiln::build(m, &target.to_string(), params, opts)
}

/// The zoo MLP with its params and one random image: 28x28 images as in the zoo for the
/// end-to-end test, 8x8 elsewhere (the loop-IR interpreter is slow in test builds).
fn mlp_of(side: usize) -> (Module, BTreeMap<String, NDArray>, NDArray) {
    let (m, params) = kiln_ir::zoo::mlp(1, 10, [1, side, side], DType::F32, 0).unwrap();
    let data = NDArray::random_uniform(vec![1, 1, side, side], DType::F32, 7, -1.0, 1.0);
    (m, params, data)
}

fn mlp() -> (Module, BTreeMap<String, NDArray>, NDArray) {
    mlp_of(8)
}

fn reference(m: &Module, params: &BTreeMap<String, NDArray>, data: &NDArray) -> Vec<NDArray> {
    let mut all = params.clone();
    all.insert("data".into(), data.clone());
    kiln_ir::interp::evaluate(m, &all).unwrap().flatten()
}

fn run_once(lib: &CompiledModule, data: &NDArray) -> Vec<NDArray> {
    let mut ex = lib.create_executor().unwrap();
    ex.set_input("data", data).unwrap();
    ex.run().unwrap();
    ex.outputs().unwrap()
}

#[test]
fn mlp_on_interp_equals_the_reference() {
    let (m, params, data) = mlp_of(28);
    let want = reference(&m, &params, &data);
    let built = Registry::builtin().build(&m, "interp", &params, 2).unwrap();
    let lib = built.module;
    // Fused as TVM fuses it: flatten, 2 x dense+bias_add+relu, dense+bias_add, softmax.
    assert_eq!(lib.kernels().len(), 5, "one kernel per fused group");
    let fuse = built.report.get("FuseOps").unwrap();
    assert!(fuse.ran);
    assert!(fuse.details.contains(&("groups".into(), "5".into())));
    let names: Vec<&str> = lib.graph().nodes.iter().map(|n| n.name.as_str()).collect();
    assert!(
        names.contains(&"fused_nn_dense_nn_bias_add_nn_relu_1"),
        "{names:?}"
    );
    // Weights keep their names as graph params.
    assert!(lib.params().contains_key("fc1_weight"));
    // At opt level 0 every op call is a kernel: flatten, 3 x (dense, bias_add), 2 relus,
    // softmax.
    let lib0 = build(&m, &interp(), &params, 0).unwrap();
    assert_eq!(lib0.kernels().len(), 10, "one kernel per op call");
    run_once(&lib0, &data)[0]
        .allclose(&want[0], 1e-5, 1e-4)
        .unwrap();
    // Opt levels above 3 are refused.
    let e = build(&m, &interp(), &params, 4).unwrap_err().to_string();
    assert!(e.contains("opt_level 4 is out of range 0..=3"), "{e}");
    let got = run_once(&lib, &data);
    assert_eq!(got.len(), 1);
    got[0].allclose(&want[0], 1e-5, 1e-4).unwrap();
    // The graph JSON validates and reads back.
    let json = lib.graph_json();
    assert_eq!(
        &kiln_executor::GraphJson::parse(&json).unwrap(),
        lib.graph()
    );
    // The `ref` target runs the same API on the reference interpreter.
    let r = build(&m, &"ref".parse().unwrap(), &params, 2).unwrap();
    assert_eq!(run_once(&r, &data), want);
    // Build steps are logged in order.
    let steps: Vec<&str> = lib.build_log().iter().map(|(s, _)| s.as_str()).collect();
    assert_eq!(
        steps,
        [
            "verify",
            "bind params",
            "optimize",
            "lift constants",
            "graph",
            "lower",
            "plan memory",
            "compile",
            "prepare"
        ]
    );
}

#[test]
fn executor_api_and_error_paths() {
    let (m, params, data) = mlp();
    let lib = build(&m, &interp(), &params, 0).unwrap();
    let mut ex = GraphExecutor::new(&lib).unwrap();
    assert_eq!(ex.get_num_inputs(), 1);
    assert_eq!(ex.get_num_outputs(), 1);
    assert_eq!(ex.get_input_index("data").unwrap(), 0);
    let info = ex.get_input_info();
    assert_eq!(info.len(), 1);
    assert_eq!(
        (
            info[0].name.as_str(),
            info[0].shape.as_slice(),
            info[0].dtype
        ),
        ("data", &[1usize, 1, 8, 8][..], DType::F32)
    );
    let msg = |e: Error| e.to_string();
    // An input never set is an error naming it, on kernels and on `ref` alike.
    let e = msg(ex.run().unwrap_err());
    assert!(
        e.contains("input `data` was set") && e.contains("set_input"),
        "{e}"
    );
    let on_ref = build(&m, &"ref".parse().unwrap(), &params, 0).unwrap();
    let e = msg(on_ref.create_executor().unwrap().run().unwrap_err());
    assert!(e.contains("input `data`"), "{e}");
    // Built without its params, every weight is an input: the run names those unset.
    let bare = build(&m, &interp(), &BTreeMap::new(), 0).unwrap();
    let mut bare_ex = bare.create_executor().unwrap();
    bare_ex.set_input("data", &data).unwrap();
    let e = msg(bare_ex.run().unwrap_err());
    assert!(
        e.contains("inputs `fc1_weight`, `fc1_bias`")
            && !e.contains("`data`")
            && e.contains("missing from the params"),
        "{e}"
    );
    // The build itself names the parameters the params leave unbound, in @main's order.
    let mut partial = params.clone();
    partial.remove("fc2_bias");
    let built = Registry::builtin()
        .build(&m, "interp", &partial, 0)
        .unwrap();
    assert_eq!(built.unbound_params(), ["data", "fc2_bias"]);
    let built = Registry::builtin()
        .build(&m, "interp", &BTreeMap::new(), 0)
        .unwrap();
    assert_eq!(built.unbound.len(), 7, "{:?}", built.unbound);
    assert_eq!(built.unbound[..3], ["data", "fc1_weight", "fc1_bias"]);
    ex.set_input(0, &data).unwrap();
    assert_eq!(ex.get_input(0).unwrap(), data);
    assert_eq!(ex.get_input("data").unwrap(), data);

    let wrong_shape = NDArray::zeros(vec![1, 8, 8], DType::F32);
    let e = msg(ex.set_input("data", &wrong_shape).unwrap_err());
    assert!(
        e.contains("input `data`") && e.contains("[1, 1, 8, 8]") && e.contains("[1, 8, 8]"),
        "{e}"
    );
    let wrong_dtype = NDArray::zeros(vec![1, 1, 8, 8], DType::I32);
    let e = msg(ex.set_input("data", &wrong_dtype).unwrap_err());
    assert!(e.contains("float32") && e.contains("int32"), "{e}");
    let e = msg(ex.set_input("image", &data).unwrap_err());
    assert!(
        e.contains("unknown input `image`")
            && e.contains("inputs: data")
            && e.contains("fc1_weight"),
        "{e}"
    );
    let e = msg(ex.set_input(3, &data).unwrap_err());
    assert!(e.contains("input index 3 is out of range"), "{e}");
    let e = msg(ex.get_input_index("nope").unwrap_err());
    assert!(e.contains("unknown input `nope`"), "{e}");
    ex.run().unwrap();
    let e = msg(ex.get_output(1).unwrap_err());
    assert!(
        e.contains("output index 1 is out of range") && e.contains("1 output"),
        "{e}"
    );

    // Params: set by name, and loaded from TVM's format, are seen by the next run.
    let before = ex.get_output(0).unwrap();
    let mut p2 = params.clone();
    p2.insert("fc3_bias".into(), NDArray::full(vec![10], DType::F32, 1.0));
    ex.load_params(&kiln_executor::save_params(&p2)).unwrap();
    ex.run().unwrap();
    let after = ex.get_output(0).unwrap();
    assert_ne!(before, after);
    let mut all = p2.clone();
    all.insert("data".into(), data.clone());
    after
        .allclose(
            &kiln_ir::interp::evaluate(&m, &all).unwrap().flatten()[0],
            1e-5,
            1e-4,
        )
        .unwrap();
    // The module's params round-trip through TVM's format.
    let reloaded = lib.load_params(&lib.save_params()).unwrap();
    assert_eq!(reloaded.params(), lib.params());
    assert!(
        lib.load_params(&kiln_executor::save_params(&BTreeMap::from([(
            "data".to_string(),
            data.clone()
        )])))
        .is_err()
    );

    // Params that are not parameters of @main, or of the wrong type, are refused at build.
    let mut bad = params.clone();
    bad.insert("fc9_weight".into(), NDArray::zeros(vec![1], DType::F32));
    let e = build(&m, &interp(), &bad, 2).unwrap_err().to_string();
    assert!(
        e.contains("`fc9_weight` is not a parameter of @main"),
        "{e}"
    );
    let mut bad = params.clone();
    bad.insert("fc1_bias".into(), NDArray::zeros(vec![3], DType::F32));
    assert!(
        build(&m, &interp(), &bad, 2)
            .unwrap_err()
            .to_string()
            .contains("param `fc1_bias`")
    );
    // A target whose backend cannot run here (no CUDA runtime in this build) says why
    // and lists the targets served; an unknown one says so.
    if !Registry::builtin()
        .target_names()
        .contains(&"cuda".to_string())
    {
        let e = build(&m, &"cuda".parse().unwrap(), &params, 2)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("target `cuda` cannot run here") && e.contains("ref, interp, cpu"),
            "{e}"
        );
    }
    let e = build(&m, &"tpu".parse().unwrap(), &params, 2)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("no backend serves target `tpu`") && e.contains("ref, interp, cpu"),
        "{e}"
    );
}

#[test]
fn zero_copy_shared_params_and_benchmark() {
    let (m, params, data) = mlp();
    let lib = build(&m, &interp(), &params, 2).unwrap();
    let want = run_once(&lib, &data);

    let mut ex = lib.create_executor().unwrap();
    let input = ex.to_device(&data).unwrap();
    let out = ex.empty_device_array(&[1, 10], DType::F32).unwrap();
    ex.set_input_zero_copy("data", &input).unwrap();
    ex.set_output_zero_copy(0, &out).unwrap();
    ex.run().unwrap();
    assert_eq!(ex.to_host(&out).unwrap(), want[0]);
    assert_eq!(ex.get_output(0).unwrap(), want[0]);
    let wrong = ex.empty_device_array(&[1, 11], DType::F32).unwrap();
    let e = ex.set_output_zero_copy(0, &wrong).unwrap_err().to_string();
    assert!(e.contains("output 0") && e.contains("[1, 10]"), "{e}");
    assert!(ex.set_output_zero_copy(2, &out).is_err());

    // Two executors on one set of weights: a param loaded into one is seen by the other.
    let mut a = lib.create_executor().unwrap();
    let mut b = lib.create_executor().unwrap();
    b.share_params(&a).unwrap();
    let bias = NDArray::random_uniform(vec![10], DType::F32, 11, -2.0, 2.0);
    a.set_input("fc3_bias", &bias).unwrap();
    b.set_input("data", &data).unwrap();
    b.run().unwrap();
    let mut p2 = params.clone();
    p2.insert("fc3_bias".into(), bias);
    let changed = reference(&m, &p2, &data);
    assert_ne!(changed, want);
    b.get_output(0)
        .unwrap()
        .allclose(&changed[0], 1e-5, 1e-4)
        .unwrap();
    let other = build(&m, &interp(), &params, 2).unwrap();
    assert!(
        b.share_params(&other.create_executor().unwrap()).is_err(),
        "different libraries"
    );

    let r = ex
        .benchmark(&BenchmarkOptions {
            repeat: 3,
            number: 1,
            min_repeat_ms: 1.0,
            end_to_end: true,
            ..BenchmarkOptions::default()
        })
        .unwrap();
    assert_eq!(r.results.len(), 3);
    assert!(r.min <= r.median && r.median <= r.max && r.min > 0.0 && r.std >= 0.0);
    println!("{r}");
    assert!(
        ex.benchmark(&BenchmarkOptions {
            repeat: 0,
            ..BenchmarkOptions::default()
        })
        .is_err()
    );
}

/// The progress hooks see every kernel call and every measurement, in order, and the
/// observed run computes what `run` does.
#[test]
fn observers_see_every_call_and_measurement() {
    let (m, params, data) = mlp();
    let lib = build(&m, &interp(), &params, 0).unwrap();
    let mut ex = lib.create_executor().unwrap();
    ex.set_input("data", &data).unwrap();
    let mut seen = vec![];
    ex.run_observed(&mut |done, total| seen.push((done, total)))
        .unwrap();
    let calls = lib.kernels().len();
    assert!(calls > 1);
    let want: Vec<(usize, usize)> = (1..=calls).map(|d| (d, calls)).collect();
    assert_eq!(seen, want, "one call per kernel at opt level 0");
    assert_eq!(ex.outputs().unwrap(), run_once(&lib, &data));

    let mut measured = vec![];
    let r = ex
        .benchmark_observed(
            &BenchmarkOptions {
                repeat: 3,
                number: 1,
                ..BenchmarkOptions::default()
            },
            &mut |done| measured.push(done),
        )
        .unwrap();
    assert_eq!(measured, [1, 2, 3]);
    assert_eq!(r.results.len(), 3);

    let reference = Registry::builtin().build(&m, "ref", &params, 0).unwrap();
    let mut ex = reference.module.create_executor().unwrap();
    ex.set_input("data", &data).unwrap();
    let mut seen = vec![];
    ex.run_observed(&mut |done, total| seen.push((done, total)))
        .unwrap();
    assert_eq!(seen, [(1, 1)], "ref runs in one piece");
}

#[test]
fn debug_executor_times_and_dumps_every_node() {
    let (m, params, data) = mlp();
    // Unfused, so that the dense output is a node of its own.
    let lib = build(&m, &interp(), &params, 0).unwrap();
    let mut dbg = DebugExecutor::new(&lib).unwrap();
    dbg.set_input("data", &data).unwrap();
    dbg.run().unwrap();
    let profile = dbg.profile(1).unwrap();
    assert_eq!(profile.rows.len(), 10);
    let total: f64 = profile.rows.iter().map(|r| r.percent).sum();
    assert!((total - 100.0).abs() < 1e-6);
    println!("{profile}");
    assert!(profile.to_string().contains("fused_nn_dense"));
    // Every intermediate is kept: the first dense's output equals the reference's.
    let mut small = Module::new();
    let x = small.var("x", Type::tensor([1, 64], DType::F32));
    let w = small.var("w", Type::tensor([128, 64], DType::F32));
    let y = small.call(op::Dense { units: None }, &[x, w]).unwrap();
    small.set_main(&[x, w], y).unwrap();
    let flat = data.reshape(vec![1, 64]).unwrap();
    let inputs = BTreeMap::from([
        ("x".to_string(), flat),
        ("w".to_string(), params["fc1_weight"].clone()),
    ]);
    let want = kiln_ir::interp::evaluate(&small, &inputs)
        .unwrap()
        .flatten();
    let dense_node = lib
        .graph()
        .nodes
        .iter()
        .position(|n| n.name == "fused_nn_dense")
        .unwrap();
    dbg.debug_get_output(dense_node, 0)
        .unwrap()
        .allclose(&want[0], 1e-5, 1e-4)
        .unwrap();
    assert!(dbg.debug_get_output(dense_node, 1).is_err());
    assert!(dbg.debug_get_output(999, 0).is_err());
    let dir = std::env::temp_dir().join(format!("kiln_debug_dump_{}", std::process::id()));
    let paths = dbg.dump_outputs(&dir).unwrap();
    assert_eq!(paths.len(), lib.graph().num_entries());
    let back = NDArray::read_npy(&paths[dense_node]).unwrap();
    assert_eq!(back, dbg.debug_get_output(dense_node, 0).unwrap());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn export_load_runs_the_same_and_damaged_files_are_refused() {
    let (m, params, data) = mlp();
    let lib = build(&m, &interp(), &params, 2).unwrap();
    let want = run_once(&lib, &data);
    let path = std::env::temp_dir().join(format!("kiln_mlp_{}.kmod", std::process::id()));
    lib.export(&path).unwrap();
    let loaded = load(&path, Arc::new(InterpBackend)).unwrap();
    assert_eq!(run_once(&loaded, &data), want);
    assert_eq!(loaded.graph(), lib.graph());
    std::fs::remove_file(&path).unwrap();

    let bytes = lib.export_bytes().unwrap();
    let refuse = |b: &[u8], what: &str, needle: &str| {
        let e = load_bytes(b, Arc::new(InterpBackend))
            .expect_err(what)
            .to_string();
        assert!(e.contains(needle), "{what}: `{e}` lacks `{needle}`");
    };
    // Truncations at many points, including inside every section.
    for cut in [
        0,
        4,
        8,
        11,
        12,
        20,
        100,
        bytes.len() / 3,
        bytes.len() / 2,
        bytes.len() - 9,
        bytes.len() - 1,
    ] {
        refuse(
            &bytes[..cut],
            &format!("cut at {cut}"),
            "invalid module file",
        );
    }
    refuse(b"PK\x03\x04 not a module", "zip", "bad magic");
    let mut v = bytes.clone();
    v[8] = 9;
    refuse(&v, "version", "format version 9");
    let mut v = bytes.clone();
    v[12..20].copy_from_slice(&u64::MAX.to_le_bytes()); // the target's length: far more than the file
    refuse(&v, "length", "claims");
    for at in [40, bytes.len() / 2, bytes.len() - 20] {
        let mut v = bytes.clone();
        v[at] ^= 0x20;
        refuse(&v, &format!("flip at {at}"), "invalid module file");
    }
    let mut v = bytes.clone();
    v.push(0);
    refuse(&v, "trailing", "unexpected bytes");

    // Altered content with a correct checksum is still refused by validation.
    let resign = |mut body: Vec<u8>| {
        body.truncate(body.len() - kiln_executor::export::CHECKSUM_LEN);
        let c = kiln_executor::export::checksum(&body);
        body.extend(c);
        body
    };
    let swap = |from: &str, to: &str| -> Vec<u8> {
        assert_eq!(from.len(), to.len());
        let at = bytes
            .windows(from.len())
            .position(|w| w == from.as_bytes())
            .unwrap_or_else(|| panic!("`{from}` not in the file"));
        let mut v = bytes.clone();
        v[at..at + from.len()].copy_from_slice(to.as_bytes());
        resign(v)
    };
    // A target no backend serves: the given backend refuses it, and so does the
    // registry, which otherwise picks the backend from the target in the file.
    refuse(&swap("interp", "interq"), "target", "does not serve");
    let e = Registry::builtin()
        .load_module_bytes(&swap("interp", "interq"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("no backend serves target `interq`"), "{e}");
    let by_registry = Registry::builtin().load_module_bytes(&bytes).unwrap();
    assert_eq!(by_registry.target().to_string(), "interp");
    assert_eq!(run_once(&by_registry, &data), want);
    refuse(
        &swap("interp", "in-erp"),
        "target name",
        "invalid module file",
    );
    refuse(&swap("interp", "cuda  "), "target kind", "does not serve");
    refuse(
        &swap("[1,128]", "[1,129]"),
        "graph shape",
        "invalid module file",
    );
    refuse(
        &swap(
            "\"func_name\":\"fused_nn_softmax\"",
            "\"func_name\":\"fused_nn_softma_\"",
        ),
        "kernel name",
        "not in the library",
    );
    // A kernel whose loop reads past its buffer fails the verifier.
    let k = lib.kernels()[0].to_string();
    assert!(k.contains("(%j.inner, 0, 8)"), "the flatten loop:\n{k}");
    refuse(
        &swap("(%j.inner, 0, 8)", "(%j.inner, 0, 9)"),
        "out of bounds kernel",
        "kernel 0",
    );
    // A kernel whose buffer disagrees with the graph's shape.
    refuse(
        &swap(", 64), float32", ", 65), float32"),
        "kernel shape",
        "graph and kernels disagree",
    );
    // A memory plan that puts two live tensors in one storage is refused.
    let sids = &lib.graph().attrs.storage_id;
    let json = lib.graph_json();
    let old = format!("\"storage_id\": [\"list_int\",{}]", serde_json_list(sids));
    assert!(json.contains(&old), "storage_id layout");
    // An intermediate put into the input's storage (same digit count keeps the length).
    let j = (1..sids.len())
        .rev()
        .find(|&j| sids[j].to_string().len() == sids[0].to_string().len() && sids[j] != sids[0])
        .unwrap();
    let mut same = sids.clone();
    same[j] = same[0];
    let new = format!("\"storage_id\": [\"list_int\",{}]", serde_json_list(&same));
    refuse(&swap(&old, &new), "plan", "memory plan");
    // A module for `ref` has nothing to export.
    let r = build(&m, &"ref".parse().unwrap(), &params, 2).unwrap();
    assert!(r.export_bytes().is_err());
}

fn serde_json_list(v: &[i64]) -> String {
    format!(
        "[{}]",
        v.iter()
            .map(|x| x.to_string())
            .collect::<Vec<_>>()
            .join(",")
    )
}

#[test]
fn four_threads_on_one_module_match_a_single_thread() {
    let (m, params, _) = mlp();
    let lib = Arc::new(build(&m, &interp(), &params, 2).unwrap());
    let images: Vec<NDArray> = (0..4)
        .map(|i| NDArray::random_uniform(vec![1, 1, 8, 8], DType::F32, 100 + i, -1.0, 1.0))
        .collect();
    let single: Vec<Vec<NDArray>> = images.iter().map(|d| run_once(&lib, d)).collect();
    let handles: Vec<_> = images
        .iter()
        .cloned()
        .map(|d| {
            let lib = lib.clone();
            std::thread::spawn(move || {
                let mut ex = lib.create_executor().unwrap();
                let mut outs = vec![];
                for _ in 0..2 {
                    ex.set_input("data", &d).unwrap();
                    ex.run().unwrap();
                    outs.push(ex.outputs().unwrap());
                }
                outs
            })
        })
        .collect();
    for (h, want) in handles.into_iter().zip(&single) {
        for got in h.join().unwrap() {
            assert_eq!(&got, want);
        }
    }
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<CompiledModule>();
    assert_send_sync::<GraphExecutor>();
}

#[test]
fn resnet50_memory_plan_is_well_below_the_naive_sum() {
    let (m, params) = kiln_ir::zoo::by_name("resnet50").unwrap();
    let lib = build(&m, &interp(), &params, 2).unwrap();
    let r = lib.memory_report();
    println!("resnet50: {r}");
    println!("resnet50 build steps (ms): {:?}", lib.build_log());
    assert!(r.planned_bytes < r.naive_bytes);
    assert!(
        r.intermediate_planned_bytes * 4 < r.intermediate_naive_bytes,
        "{r}"
    );
    kiln_executor::plan::check_plan(lib.graph()).unwrap();
}

#[test]
fn split_and_tuples_are_regrouped_entries() {
    // split -> (a, b); relu(b); output (a, relu(b)): tuple nodes are not kernels.
    let mut m = Module::new();
    let x = m.var("x", Type::tensor([4, 3], DType::F32));
    let s = m.call(op::Split::sections(2, 0), &[x]).unwrap();
    let a = m.tuple_get(s, 0).unwrap();
    let b = m.tuple_get(s, 1).unwrap();
    let rb = m.call(op::Unary::new(op::UnaryKind::Relu), &[b]).unwrap();
    let c = m.constant(NDArray::from_vec([2, 3], vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap());
    let ac = m
        .call(op::Binary::new(op::BinaryKind::Add), &[a, c])
        .unwrap();
    let out = m.tuple(&[ac, rb, x]).unwrap();
    m.set_main(&[x], out).unwrap();
    let lib = build(&m, &interp(), &BTreeMap::new(), 2).unwrap();
    assert_eq!(lib.kernels().len(), 3);
    assert!(
        lib.params().contains_key("p0"),
        "the constant became param p0"
    );
    let data = NDArray::random_uniform(vec![4, 3], DType::F32, 3, -1.0, 1.0);
    let got = run_once_named(&lib, "x", &data);
    let want = kiln_ir::interp::evaluate(&m, &BTreeMap::from([("x".to_string(), data)]))
        .unwrap()
        .flatten();
    assert_eq!(got, want);
}

fn run_once_named(lib: &CompiledModule, name: &str, data: &NDArray) -> Vec<NDArray> {
    let mut ex = lib.create_executor().unwrap();
    ex.set_input(name, data).unwrap();
    ex.run().unwrap();
    ex.outputs().unwrap()
}

/// Rebuilds an exported module with kernel `i`'s text replaced and the checksum made
/// right again, as someone editing the file would.
fn with_kernel_text(bytes: &[u8], i: usize, text: &str) -> Vec<u8> {
    let sum = kiln_executor::export::CHECKSUM_LEN;
    let mut pos = 12;
    let section = |pos: &mut usize| {
        let n = u64::from_le_bytes(bytes[*pos..*pos + 8].try_into().unwrap()) as usize;
        *pos += 8 + n;
    };
    for _ in 0..3 {
        section(&mut pos); // target, graph, params
    }
    let count = u64::from_le_bytes(bytes[pos..pos + 8].try_into().unwrap()) as usize;
    let mut out = bytes[..pos + 8].to_vec();
    pos += 8;
    for k in 0..count {
        let start = pos;
        section(&mut pos);
        if k == i {
            out.extend((text.len() as u64).to_le_bytes());
            out.extend(text.as_bytes());
        } else {
            out.extend(&bytes[start..pos]);
        }
    }
    assert_eq!(pos, bytes.len() - sum);
    let c = kiln_executor::export::checksum(&out);
    out.extend(c);
    out
}

/// A kernel edited to read through an index that wraps (`%j * 2^30` is "in [0, 7]" only
/// if int32 products did not wrap) is refused at load, as is one asking for a loop of
/// 2^40 iterations (beyond the default limit, accepted under a raised one).
#[test]
fn tampered_kernels_that_wrap_or_loop_forever_are_refused_at_load() {
    let (m, params, data) = mlp();
    let lib = build(&m, &interp(), &params, 2).unwrap();
    let bytes = lib.export_bytes().unwrap();
    let k = lib.kernels()[0].to_string();
    let refuse = |text: &str, limits: &kiln_te::tir::Limits| {
        kiln_executor::export::load_bytes_limited(
            &with_kernel_text(&bytes, 0, text),
            &|_| Ok(Arc::new(InterpBackend)),
            limits,
        )
        .map(|_| ())
        .map_err(|e| e.to_string())
    };
    let defaults = kiln_te::tir::Limits::default();
    // The file as exported loads and runs.
    refuse(&k, &defaults).unwrap();
    let loaded = load_bytes(&with_kernel_text(&bytes, 0, &k), Arc::new(InterpBackend)).unwrap();
    assert_eq!(run_once(&loaded, &data), run_once(&lib, &data));

    let index = "floormod(%i.j.outer.fused * 8 + %j.inner, 8)]";
    assert!(k.contains(index), "{k}");
    let wrapping = k.replace(index, "min(%j.inner * 1073741824, 7)]");
    let e = refuse(&wrapping, &defaults).unwrap_err();
    assert!(
        e.contains("invalid module file")
            && e.contains("kernel 0 @fused_nn_batch_flatten")
            && e.contains("ranges over [-2147483648, 7]"),
        "{e}"
    );

    let head = "  parallel for (%i.j.outer.fused, 0, 8) {";
    assert!(k.contains(head), "{k}");
    let endless = k
        .replace(
            head,
            &format!("for (%z: int64, 0, 1099511627776) {{\n{head}"),
        )
        .replace("\n}", "\n}\n}");
    let e = refuse(&endless, &defaults).unwrap_err();
    assert!(e.contains("loop iterations, more than the limit"), "{e}");
    let raised = kiln_te::tir::Limits {
        max_iterations: 1 << 50,
        ..defaults
    };
    refuse(&endless, &raised).unwrap();
}
