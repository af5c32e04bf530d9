//! End-to-end tests of the `kiln` commands built on the executor: `compile` then `run FILE`
//! against the in-memory build and the reference interpreter, damaged exported files,
//! `bench --json`, `profile`'s table, and the one-line errors for bad targets, opt levels,
//! missing arguments and unreadable files. Models stay small (zoo:mlp, text models).

use std::path::PathBuf;

use kiln_ir::NDArray;

mod common;

use common::*;

fn tmp(name: &str) -> std::path::PathBuf {
    tmp_in("exec-test", name)
}

/// Exports zoo:mlp for interp to a file named `name` and returns its path and the
/// compile command's output.
fn compile_mlp(name: &str) -> (PathBuf, String) {
    let file = tmp(name);
    let out = kiln_ok(&["compile", "zoo:mlp", "--target", "interp", "-o", s(&file)]);
    (file, out)
}

#[test]
fn compiled_file_runs_like_the_in_memory_build_and_the_reference() {
    let (file, out) = compile_mlp("mlp.kmod");
    assert!(
        out.contains("compiled zoo:mlp for interp (opt-level 3)"),
        "{out}"
    );
    // Fused at the default opt level 3: flatten, 2 x dense+bias_add+relu, dense+bias_add,
    // softmax.
    assert!(out.contains(": 5 kernels"), "{out}");
    assert!(out.contains("steps: verify"), "{out}");
    // The memory plan, in bytes: planned no more than naive.
    let plan = out
        .lines()
        .find(|l| l.starts_with("memory plan: "))
        .unwrap_or_else(|| panic!("no memory plan in {out}"));
    let words: Vec<&str> = plan.split_whitespace().collect();
    let planned: u64 = words[2].parse().unwrap();
    let naive: u64 = words[6].parse().unwrap();
    assert!(planned > 0 && planned <= naive, "{plan}");
    let size = std::fs::metadata(&file).unwrap().len();
    assert!(out.contains(&format!("({size} bytes)")), "{out}");

    let from_file = tmp("from_file.npy");
    let run = kiln_ok(&[
        "run",
        s(&file),
        "--target",
        "interp",
        "--seed",
        "7",
        "--output",
        s(&from_file),
    ]);
    assert!(run.contains("output 0: Tensor[(1, 10), float32]"), "{run}");
    assert!(run.contains("loaded for interp in"), "{run}");
    assert!(run.contains("(5 kernels)"), "{run}");
    assert!(run.contains("target interp: ran in"), "{run}");

    let in_memory = tmp("in_memory.npy");
    let run = kiln_ok(&[
        "run",
        "zoo:mlp",
        "--target",
        "interp",
        "--seed",
        "7",
        "--output",
        s(&in_memory),
    ]);
    assert!(run.contains("built for interp in"), "{run}");
    let reference = tmp("reference.npy");
    kiln_ok(&[
        "run",
        "zoo:mlp",
        "--target",
        "ref",
        "--seed",
        "7",
        "--output",
        s(&reference),
    ]);

    // Bit-identical to the in-memory build; equal to the reference interpreter.
    assert_eq!(
        std::fs::read(&from_file).unwrap(),
        std::fs::read(&in_memory).unwrap()
    );
    let a = NDArray::read_npy(&from_file).unwrap();
    let r = NDArray::read_npy(&reference).unwrap();
    a.allclose(&r, 1e-5, 0.0).unwrap();
    let sum: f64 = a.to_f64_vec().iter().sum();
    assert!((sum - 1.0).abs() < 1e-5, "softmax sums to {sum}");

    // Another seed gives other outputs, so the comparison above is not vacuous.
    let other = tmp("other_seed.npy");
    kiln_ok(&[
        "run",
        s(&file),
        "--target",
        "interp",
        "--seed",
        "8",
        "--output",
        s(&other),
    ]);
    assert_ne!(
        std::fs::read(&other).unwrap(),
        std::fs::read(&from_file).unwrap()
    );
}

#[test]
fn cpu_target_runs_through_cranelift_and_matches_the_reference() {
    let cpu = tmp("cpu.npy");
    let run = kiln_ok(&[
        "run",
        "zoo:mlp",
        "--target",
        "cpu -threads=2",
        "--seed",
        "3",
        "--output",
        s(&cpu),
    ]);
    assert!(run.contains("built for cpu -threads=2 in"), "{run}");
    let reference = tmp("cpu_reference.npy");
    kiln_ok(&[
        "run",
        "zoo:mlp",
        "--target",
        "ref",
        "--seed",
        "3",
        "--output",
        s(&reference),
    ]);
    let a = NDArray::read_npy(&cpu).unwrap();
    let r = NDArray::read_npy(&reference).unwrap();
    a.allclose(&r, 1e-5, 0.0).unwrap();
    // An exported cpu module loads, is compiled again and gives the same bits.
    let file = tmp("mlp_cpu.kmod");
    kiln_ok(&["compile", "zoo:mlp", "--target", "cpu", "-o", s(&file)]);
    let loaded = tmp("cpu_loaded.npy");
    kiln_ok(&[
        "run",
        s(&file),
        "--target",
        "cpu",
        "--seed",
        "3",
        "--output",
        s(&loaded),
    ]);
    assert_eq!(
        std::fs::read(&loaded).unwrap(),
        std::fs::read(&cpu).unwrap()
    );
}

#[test]
fn text_model_with_given_inputs_on_interp() {
    let model = tmp("addrelu.relay");
    std::fs::write(
        &model,
        "def @main(%x: Tensor[(2, 3), float32], %y: Tensor[(2, 3), float32]) -> Tensor[(2, 3), float32] {\n  nn.relu(add(%x, %y))\n}\n",
    )
    .unwrap();
    let x = tmp("x.npy");
    NDArray::from_vec([2, 3], vec![1.0f32, -2.0, 3.0, -4.0, 5.0, -6.0])
        .unwrap()
        .write_npy(&x)
        .unwrap();
    let y = tmp("y.npy");
    NDArray::from_vec([2, 3], vec![0.5f32, 0.5, 0.5, 0.5, 0.5, 0.5])
        .unwrap()
        .write_npy(&y)
        .unwrap();
    let file = tmp("addrelu.kmod");
    let out = kiln_ok(&[
        "compile",
        s(&model),
        "--target",
        "interp",
        "-o",
        s(&file),
        "--opt-level",
        "0",
    ]);
    assert!(
        out.contains("(opt-level 0)") && out.contains(": 2 kernels"),
        "{out}"
    );
    let expected = vec![1.5f32, 0.0, 3.5, 0.0, 5.5, 0.0];
    for (source, target) in [(&model, "interp"), (&model, "ref"), (&file, "interp")] {
        let out = tmp(&format!(
            "addrelu_{target}_{}.npy",
            source.extension().unwrap().to_str().unwrap()
        ));
        kiln_ok(&[
            "run",
            s(source),
            "--target",
            target,
            "--input",
            &format!("x={}", x.display()),
            "--input",
            &format!("y={}", y.display()),
            "--output",
            s(&out),
        ]);
        assert_eq!(
            NDArray::read_npy(&out).unwrap().to_vec::<f32>().unwrap(),
            expected
        );
    }
    // A given input with the wrong shape is refused, naming the input.
    let bad = tmp("bad_shape.npy");
    NDArray::from_vec([3], vec![1.0f32, 2.0, 3.0])
        .unwrap()
        .write_npy(&bad)
        .unwrap();
    assert_clear_error(
        &kiln(&[
            "run",
            s(&file),
            "--target",
            "interp",
            "--input",
            &format!("x={}", bad.display()),
        ]),
        &["--input x", "[2, 3]", "[3]"],
    );
}

#[test]
fn damaged_module_files_are_refused() {
    let (file, _) = compile_mlp("good.kmod");
    let bytes = std::fs::read(&file).unwrap();

    let truncated = tmp("truncated.kmod");
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    assert_clear_error(
        &kiln(&["run", s(&truncated), "--target", "interp"]),
        &["invalid module file", "truncated.kmod", "truncated"],
    );

    let cut_in_magic = tmp("cut_in_magic.kmod");
    std::fs::write(&cut_in_magic, &bytes[..5]).unwrap();
    assert_clear_error(
        &kiln(&["bench", s(&cut_in_magic), "--target", "interp"]),
        &["invalid module file", "magic"],
    );

    let mut altered_bytes = bytes.clone();
    let mid = altered_bytes.len() / 2;
    altered_bytes[mid] ^= 0x5a;
    let altered = tmp("altered.kmod");
    std::fs::write(&altered, &altered_bytes).unwrap();
    assert_clear_error(
        &kiln(&["run", s(&altered), "--target", "interp"]),
        &["invalid module file", "altered.kmod", "checksum"],
    );

    let mut longer = bytes.clone();
    longer.extend_from_slice(b"junk");
    let trailing = tmp("trailing.kmod");
    std::fs::write(&trailing, &longer).unwrap();
    assert_clear_error(
        &kiln(&["profile", s(&trailing), "--target", "interp"]),
        &["invalid module file", "4 unexpected bytes"],
    );

    // An exported file is not a graph-IR model, and compiles no further.
    assert_clear_error(
        &kiln(&["inspect", s(&file)]),
        &["exported by `kiln compile`"],
    );
    let again = tmp("again.kmod");
    assert_clear_error(
        &kiln(&["compile", s(&file), "--target", "interp", "-o", s(&again)]),
        &["already an exported module"],
    );
    // Binary junk is neither kind of file.
    let junk = tmp("junk.bin");
    std::fs::write(&junk, [0xffu8, 0xfe, 0x00, 0x80]).unwrap();
    assert_clear_error(
        &kiln(&["run", s(&junk), "--target", "interp"]),
        &["junk.bin", "not UTF-8", "KILNMOD"],
    );
}

#[test]
fn bench_json_has_every_figure() {
    let o = kiln_ok(&[
        "bench", "zoo:mlp", "--target", "interp", "--repeat", "3", "--number", "2", "--json",
    ]);
    assert_eq!(o.trim_end().lines().count(), 1, "one JSON line: {o}");
    let v: serde_json::Value = serde_json::from_str(&o).unwrap();
    let obj = v.as_object().unwrap();
    let keys = [
        "compile_ms",
        "mean_ms",
        "median_ms",
        "std_ms",
        "min_ms",
        "max_ms",
        "results_ms",
        "clock",
    ];
    assert_eq!(obj.len(), keys.len(), "{o}");
    // `interp` has no device timer.
    assert_eq!(obj["clock"], "host", "{o}");
    let f = |k: &str| {
        obj[k]
            .as_f64()
            .unwrap_or_else(|| panic!("{k} is not a number: {o}"))
    };
    let results: Vec<f64> = obj["results_ms"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_f64().unwrap())
        .collect();
    assert_eq!(results.len(), 3);
    assert!(results.iter().all(|&r| r > 0.0 && r.is_finite()), "{o}");
    let (min, max) = (f("min_ms"), f("max_ms"));
    assert_eq!(min, results.iter().cloned().fold(f64::INFINITY, f64::min));
    assert_eq!(max, results.iter().cloned().fold(0.0, f64::max));
    for k in ["mean_ms", "median_ms"] {
        assert!(min <= f(k) && f(k) <= max, "{k}: {o}");
    }
    assert!(f("std_ms") >= 0.0 && f("std_ms") <= max - min, "{o}");
    assert!(f("compile_ms") > 0.0, "{o}");

    // From an exported file, with min_repeat_ms, as a readable summary; and on ref.
    let (file, _) = compile_mlp("bench.kmod");
    let o = kiln_ok(&[
        "bench",
        s(&file),
        "--target",
        "interp",
        "--repeat",
        "2",
        "--number",
        "1",
        "--min-repeat-ms",
        "5",
    ]);
    assert!(o.contains("loaded for interp in"), "{o}");
    assert!(
        o.contains("2 repeats of at least 1 runs (host clock): mean "),
        "{o}"
    );
    let results = o
        .lines()
        .find(|l| l.starts_with("results (ms per run): "))
        .unwrap();
    assert_eq!(results.split_whitespace().count(), 4 + 2, "{results}");
    let o = kiln_ok(&[
        "bench", "zoo:mlp", "--target", "ref", "--repeat", "2", "--number", "1", "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&o).unwrap();
    assert_eq!(v["results_ms"].as_array().unwrap().len(), 2);
}

#[test]
fn profile_prints_one_row_per_kernel() {
    let o = kiln_ok(&["profile", "zoo:mlp", "--target", "interp", "--number", "2"]);
    assert!(o.contains("(5 kernels)"), "{o}");
    let lines: Vec<&str> = o.lines().collect();
    let header = lines
        .iter()
        .position(|l| l.starts_with("Node") && l.contains("Kernel") && l.contains("Time(us)"))
        .unwrap_or_else(|| panic!("no table header in {o}"));
    let total = lines
        .iter()
        .position(|l| l.starts_with("Total"))
        .unwrap_or_else(|| panic!("no Total row in {o}"));
    let rows = &lines[header + 1..total];
    assert_eq!(rows.len(), 5, "{o}");
    let mut percent = 0.0;
    for row in rows {
        let w: Vec<&str> = row.split_whitespace().collect();
        assert!(w[0].parse::<usize>().is_ok(), "node index column: {row}");
        assert!(w[1].starts_with("fused_"), "kernel column: {row}");
        assert_eq!(row.matches(w[1]).count(), 1, "the kernel named once: {row}");
        let time: f64 = w[2].parse().unwrap();
        assert!(time > 0.0, "{row}");
        percent += w[3].parse::<f64>().unwrap();
        assert!(row.contains('['), "shape column: {row}");
    }
    assert!((percent - 100.0).abs() < 0.1, "{percent}: {o}");
    assert!(rows.iter().any(|r| r.contains("[1, 10]")), "{o}");

    // Every node's output dumped.
    let dir = tmp("dump");
    let o = kiln_ok(&[
        "profile",
        "zoo:mlp",
        "--target",
        "interp",
        "--number",
        "1",
        "--dump-dir",
        s(&dir),
    ]);
    let dumped = std::fs::read_dir(&dir).unwrap().count();
    // Inputs, weights and the 5 fused kernels of the MLP.
    assert!(dumped > 5, "{dumped} files");
    assert!(o.contains(&format!("dumped {dumped} node outputs")), "{o}");
}

#[test]
fn bad_arguments_give_one_clear_line() {
    let out = tmp("never.kmod");
    let out = s(&out);
    // Targets.
    assert_clear_error(
        &kiln(&["compile", "zoo:mlp", "--target", "tpu", "-o", out]),
        &[
            "unknown target `tpu`",
            "ref, interp, cpu",
            "no backend serves",
        ],
    );
    assert_clear_error(
        &kiln(&["run", "zoo:mlp", "--target", "cpu -threads=0"]),
        &["-threads"],
    );
    assert_clear_error(
        &kiln(&["bench", "zoo:mlp", "--target", "cuda -arch=sm_80"]),
        &[
            "target `cuda -arch=sm_80` cannot run here",
            "no CUDA runtime",
            "ref, interp, cpu",
        ],
    );
    assert_clear_error(
        &kiln(&["run", "zoo:mlp", "--target", "interp -threads=2"]),
        &["-threads", "interp"],
    );
    assert_clear_error(
        &kiln(&["compile", "zoo:mlp", "--target", "ref", "-o", out]),
        &["ref", "compiles nothing", "interp"],
    );
    assert_clear_error(
        &kiln(&["profile", "zoo:mlp", "--target", "ref"]),
        &["ref", "interp"],
    );
    // Opt levels.
    assert_clear_error(
        &kiln(&[
            "compile",
            "zoo:mlp",
            "--target",
            "interp",
            "-o",
            out,
            "--opt-level",
            "9",
        ]),
        &["--opt-level", "9", "0..=3"],
    );
    assert_clear_error(
        &kiln(&["run", "zoo:mlp", "--target", "interp", "--opt-level", "two"]),
        &["--opt-level", "two"],
    );
    // Missing or bad arguments.
    assert_clear_error(
        &kiln(&["compile", "zoo:mlp", "--target", "interp"]),
        &["--output"],
    );
    assert_clear_error(&kiln(&["bench", "zoo:mlp"]), &["--target"]);
    assert_clear_error(
        &kiln(&["bench", "zoo:mlp", "--target", "interp", "--repeat", "0"]),
        &["--repeat", "0"],
    );
    assert_clear_error(
        &kiln(&[
            "bench",
            "zoo:mlp",
            "--target",
            "interp",
            "--min-repeat-ms",
            "-1",
        ]),
        &["--min-repeat-ms"],
    );
    assert_clear_error(&kiln(&["frobnicate"]), &["frobnicate"]);
    // Unreadable or unwritable files.
    assert_clear_error(
        &kiln(&["run", "/nonexistent/model.kmod", "--target", "interp"]),
        &["/nonexistent/model.kmod"],
    );
    assert_clear_error(
        &kiln(&[
            "compile",
            "zoo:mlp",
            "--target",
            "interp",
            "-o",
            "/nonexistent/dir/m.kmod",
        ]),
        &["/nonexistent/dir/m.kmod"],
    );
    // Exported files: the target they were built for, and no opt level.
    let (file, _) = compile_mlp("args.kmod");
    assert_clear_error(
        &kiln(&["run", s(&file), "--target", "ref"]),
        &["exported module", "interp"],
    );
    assert_clear_error(
        &kiln(&["run", s(&file), "--target", "interp", "--opt-level", "1"]),
        &["--opt-level", "exported module"],
    );
}

#[test]
fn exported_files_run_on_their_recorded_target_and_check_compares_with_ref() {
    // Without --target, an exported module runs (and benches) on the target in the file.
    let (file, _) = compile_mlp("recorded.kmod");
    let run = kiln_ok(&["run", s(&file)]);
    assert!(run.contains("loaded for interp"), "{run}");
    assert!(run.contains("target interp: ran in"), "{run}");
    let bench = kiln_ok(&["bench", s(&file), "--repeat", "1", "--number", "1"]);
    assert!(bench.contains("loaded for interp"), "{bench}");
    // --check runs the model on `ref` too and prints the largest difference.
    let check = kiln_ok(&["run", "zoo:mlp", "--target", "cpu", "--check"]);
    assert!(
        check.contains("check against ref: max |diff| = "),
        "{check}"
    );
    assert_clear_error(
        &kiln(&["run", s(&file), "--check"]),
        &["--check", "exported"],
    );
    // A model needs a target to bench on; the message lists the registry's targets.
    assert_clear_error(
        &kiln(&["bench", "zoo:mlp"]),
        &["--target", "ref, interp, cpu"],
    );
}

#[test]
fn help_texts_list_the_registry_targets() {
    for sub in ["compile", "run", "bench", "profile", "inspect"] {
        let help = kiln_ok(&[sub, "--help"]);
        assert!(help.contains("ref, interp, cpu"), "{sub}: {help}");
        assert!(!help.contains("TARGETS"), "{sub}: {help}");
    }
}

/// `kiln --help` says what each command is for in one line, and lists the zoo's models
/// and the registry's targets; `-h` is the short form.
#[test]
fn top_level_help_lists_commands_zoo_and_targets() {
    let help = kiln_ok(&["--help"]);
    for model in kiln_ir::zoo::NAMES {
        assert!(help.contains(&format!("`zoo:{model}`")), "{model}: {help}");
    }
    let targets = kiln::Registry::builtin().targets_text();
    assert!(help.contains(&format!("Targets: {targets}.")), "{help}");
    assert!(!help.contains("TARGETS") && !help.contains("ZOO"), "{help}");
    let commands: Vec<&str> = help
        .split("Commands:\n")
        .nth(1)
        .and_then(|rest| rest.split("\n\n").next())
        .unwrap_or_else(|| panic!("no command list: {help}"))
        .lines()
        .collect();
    let names: Vec<&str> = commands
        .iter()
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "inspect", "compile", "run", "bench", "graph", "profile", "help"
        ]
    );
    for line in commands {
        assert!(line.len() < 100, "one short line per command: {line}");
    }
    assert!(kiln_ok(&["-h"]).len() < help.len());
}

/// A misspelt command or option gets clap's suggestion, on the one error line.
#[test]
fn misspellings_get_a_did_you_mean() {
    assert_clear_error(
        &kiln(&["runn", "zoo:mlp"]),
        &["'runn'", "did you mean 'run'?"],
    );
    assert_clear_error(
        &kiln(&["run", "zoo:mlp", "--taget", "cpu"]),
        &["'--taget'", "did you mean '--target'?"],
    );
    // No suggestion, no question.
    let o = kiln(&["run"]);
    assert_clear_error(&o, &["<MODEL>"]);
    assert!(!stderr(&o).contains("did you mean"), "{}", stderr(&o));
}

/// A sub-millisecond run is timed in µs or ms, never as `0.000 s`.
#[test]
fn run_times_are_shown_in_a_unit_that_fits() {
    let o = kiln_ok(&["run", "zoo:mlp", "--target", "cpu"]);
    let line = o
        .lines()
        .find(|l| l.contains("ran in"))
        .unwrap_or_else(|| panic!("no time in {o}"));
    let words: Vec<&str> = line.split_whitespace().collect();
    let (value, unit) = (words[words.len() - 2], words[words.len() - 1]);
    let value: f64 = value.parse().unwrap_or_else(|_| panic!("{line}"));
    assert!(["s", "ms", "µs"].contains(&unit), "{line}");
    assert!(value > 0.0, "{line}");
    assert!(
        unit == "µs" || value >= 1.0,
        "the unit fits the magnitude: {line}"
    );
    // The build time too: `built for cpu in 13.5 ms (5 kernels)`.
    let built = o
        .lines()
        .find(|l| l.starts_with("built for cpu in "))
        .unwrap_or_else(|| panic!("no build time in {o}"));
    let time = built["built for cpu in ".len()..]
        .split(" (")
        .next()
        .unwrap();
    let (value, unit) = time.split_once(' ').unwrap();
    assert!(value.parse::<f64>().unwrap() > 0.0, "{built}");
    assert!(["s", "ms", "µs"].contains(&unit), "{built}");
}
