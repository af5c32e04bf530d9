//! File tests of the graph-IR text form (STYLE habit 2). Every `tests/filetests/**/*.relay`
//! file is one test:
//!
//! ```text
//! // test <command>
//! <input IR>
//! // ---- expected ----
//! // <expected output, each line behind `// `>
//! ```
//!
//! The whole file is valid IR text (the header and the expectations are comments).
//! Commands:
//! - `print`: parse, print with types; the expected output is the printed text.
//! - `roundtrip`: parse, print, parse the printed text and print again (with and
//!   without type annotations); both prints must agree. The expected output is the
//!   printed text (without types).
//! - `error`: parsing must fail; the expected output is the error message.
//! - `eval`: parse, verify and run `@main` in the reference interpreter. Inputs come from
//!   header lines `// input NAME = v0, v1, ...` (row-major values, converted to the
//!   parameter's dtype); parameters without such a line get seeded random values. The
//!   expected output lists each output's type and values (6 significant digits).
//!
//! Every command that parses also checks that printing, parsing and printing again gives
//! the same text.
//!
//! Run with `UPDATE_EXPECT=1` to rewrite the expected sections in place after an
//! intended change (then review the diff).

use std::path::{Path, PathBuf};

use kiln_ir::interp::{Inputs, evaluate};
use kiln_ir::text::{PrintOptions, parse_module, print_module};
use kiln_ir::{DType, Module, NDArray};

const MARKER: &str = "// ---- expected ----";

/// One test file, split into its parts.
#[derive(Debug)]
struct Case {
    command: String,
    /// Everything before the marker line (the `// test` line included).
    input: String,
    expected: String,
}

fn split_file(text: &str) -> Result<Case, String> {
    let first = text.lines().next().unwrap_or_default();
    let command = first
        .strip_prefix("// test ")
        .ok_or_else(|| format!("the first line must be `// test <command>`, found `{first}`"))?
        .trim()
        .to_string();
    let marker_at = text
        .find(&format!("\n{MARKER}\n"))
        .ok_or_else(|| format!("no `{MARKER}` line"))?;
    let input = text[..marker_at + 1].to_string();
    let mut expected = String::new();
    for line in text[marker_at + MARKER.len() + 2..].lines() {
        let body = line
            .strip_prefix("// ")
            .or_else(|| line.strip_prefix("//"))
            .ok_or_else(|| format!("expected lines must start with `//`, found `{line}`"))?;
        expected.push_str(body);
        expected.push('\n');
    }
    Ok(Case {
        command,
        input,
        expected,
    })
}

/// The file text with `actual` as its expected section.
fn with_expected(input: &str, actual: &str) -> String {
    let mut out = format!("{input}{MARKER}\n");
    for line in actual.lines() {
        if line.is_empty() {
            out.push_str("//\n");
        } else {
            out.push_str("// ");
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// Print, parse, print: the two texts must agree.
fn check_reprint(m: &Module) -> Result<(), String> {
    let plain = PrintOptions::default();
    let first = print_module(m, &plain);
    let again = parse_module(&first)
        .map_err(|e| format!("the printed text does not parse: {e}\n{first}"))?;
    let second = print_module(&again, &plain);
    if second != first {
        return Err(format!("printing twice differs:\n{first}\n---\n{second}"));
    }
    Ok(())
}

/// The `// input NAME = v, ...` lines of a case, with each parameter's type from `m`;
/// other parameters of `@main` get random values from a seed.
fn eval_inputs(m: &Module, input: &str) -> Result<Inputs, String> {
    let main = m.main().map_err(|e| e.to_string())?;
    let mut inputs = Inputs::new();
    for line in input.lines() {
        let Some(spec) = line.strip_prefix("// input ") else {
            continue;
        };
        let (name, values) = spec
            .split_once('=')
            .ok_or_else(|| format!("bad input line `{line}`"))?;
        let name = name.trim();
        let param = main
            .params
            .iter()
            .find(|&&p| m.var_name(p) == Some(name))
            .ok_or_else(|| format!("input `{name}` is not a parameter of @main"))?;
        let ty = m
            .ty(*param)
            .as_tensor()
            .ok_or_else(|| format!("input `{name}` is not a tensor"))?;
        let values: Vec<f64> = values
            .split(',')
            .map(|v| {
                v.trim()
                    .parse::<f64>()
                    .map_err(|e| format!("input `{name}`: `{v}`: {e}"))
            })
            .collect::<Result<_, _>>()?;
        let value = NDArray::from_f64(ty.shape.clone(), ty.dtype, values)
            .map_err(|e| format!("input `{name}`: {e}"))?;
        inputs.insert(name.to_string(), value);
    }
    for (i, &p) in main.params.iter().enumerate() {
        let name = m.var_name(p).unwrap_or_default();
        if let (false, Some(t)) = (inputs.contains_key(name), m.ty(p).as_tensor()) {
            inputs.insert(
                name.to_string(),
                NDArray::random(t.shape.clone(), t.dtype, i as u64),
            );
        }
    }
    Ok(inputs)
}

/// An output as `Tensor[...] = [v, ...]` with 6 significant digits.
fn show_output(t: &NDArray) -> String {
    let values: Vec<String> = match t.dtype() {
        DType::Bool => t
            .to_vec::<bool>()
            .unwrap()
            .iter()
            .map(|b| b.to_string())
            .collect(),
        d if d.is_float() => t
            .to_f64_vec()
            .iter()
            .map(|v| format!("{}", (v * 1e6).round() / 1e6))
            .collect(),
        _ => t.to_i64_vec().iter().map(|v| v.to_string()).collect(),
    };
    format!("{} = [{}]", t.ty(), values.join(", "))
}

/// Runs `command` on `input` and returns its output, or why the test failed.
fn run(command: &str, input: &str) -> Result<String, String> {
    let plain = PrintOptions::default();
    match command {
        "print" => {
            let m = parse_module(input).map_err(|e| format!("does not parse: {e}"))?;
            check_reprint(&m)?;
            Ok(print_module(&m, &PrintOptions::with_types()))
        }
        "eval" => {
            let m = parse_module(input).map_err(|e| format!("does not parse: {e}"))?;
            check_reprint(&m)?;
            kiln_ir::verify::verify(&m).map_err(|e| e.to_string())?;
            let inputs = eval_inputs(&m, input)?;
            let outputs = evaluate(&m, &inputs)
                .map_err(|e| format!("evaluation failed: {e}"))?
                .flatten();
            Ok(outputs
                .iter()
                .enumerate()
                .map(|(i, t)| format!("output {i}: {}\n", show_output(t)))
                .collect())
        }
        "roundtrip" => {
            let m = parse_module(input).map_err(|e| format!("does not parse: {e}"))?;
            let first = print_module(&m, &plain);
            let again = parse_module(&first)
                .map_err(|e| format!("the printed text does not parse: {e}\n{first}"))?;
            let second = print_module(&again, &plain);
            if second != first {
                return Err(format!("printing twice differs:\n{first}\n---\n{second}"));
            }
            let typed = print_module(&m, &PrintOptions::with_types());
            let again = parse_module(&typed)
                .map_err(|e| format!("the typed text does not parse: {e}\n{typed}"))?;
            let third = print_module(&again, &plain);
            if third != first {
                return Err(format!(
                    "printing the typed text's module differs:\n{first}\n---\n{third}"
                ));
            }
            Ok(first)
        }
        "error" => match parse_module(input) {
            Ok(m) => Err(format!(
                "expected an error but it parsed:\n{}",
                print_module(&m, &plain)
            )),
            Err(e) => Ok(format!("{e}\n")),
        },
        other => Err(format!(
            "unknown command `{other}` (expected print, roundtrip, error or eval)"
        )),
    }
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            collect(&path, out);
        } else if path.extension().is_some_and(|e| e == "relay") {
            out.push(path);
        }
    }
}

/// A short line diff of `expected` against `actual`.
fn diff(expected: &str, actual: &str) -> String {
    let (e, a): (Vec<&str>, Vec<&str>) = (expected.lines().collect(), actual.lines().collect());
    let mut out = String::new();
    for i in 0..e.len().max(a.len()) {
        let (x, y) = (e.get(i), a.get(i));
        if x != y {
            out.push_str(&format!(
                "  line {}:\n    expected: {}\n    actual:   {}\n",
                i + 1,
                x.unwrap_or(&"<none>"),
                y.unwrap_or(&"<none>")
            ));
        }
    }
    out
}

#[test]
fn filetests() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/filetests");
    let mut files = Vec::new();
    collect(&root, &mut files);
    files.sort();
    assert!(
        files.len() >= 10,
        "expected the file tests under {}",
        root.display()
    );
    let update = std::env::var("UPDATE_EXPECT").is_ok_and(|v| v == "1");
    let mut failures = Vec::new();
    for path in &files {
        let name = path
            .strip_prefix(&root)
            .unwrap_or(path)
            .display()
            .to_string();
        let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{name}: {e}"));
        let case = match split_file(&text) {
            Ok(c) => c,
            Err(e) => {
                failures.push(format!("{name}: {e}"));
                continue;
            }
        };
        match run(&case.command, &case.input) {
            Err(e) => failures.push(format!("{name}: {e}")),
            Ok(actual) if actual == case.expected => {}
            Ok(actual) if update => {
                std::fs::write(path, with_expected(&case.input, &actual))
                    .unwrap_or_else(|e| panic!("{name}: {e}"));
                eprintln!("updated {name}");
            }
            Ok(actual) => failures.push(format!(
                "{name}: output differs (UPDATE_EXPECT=1 rewrites it):\n{}",
                diff(&case.expected, &actual)
            )),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} file tests failed:\n{}",
        failures.len(),
        files.len(),
        failures.join("\n")
    );
}

#[test]
fn file_layout_is_checked() {
    let case = split_file("// test print\ndef @f() { 1 }\n// ---- expected ----\n// a\n//\n// b\n")
        .unwrap();
    assert_eq!(case.command, "print");
    assert_eq!(case.input, "// test print\ndef @f() { 1 }\n");
    assert_eq!(case.expected, "a\n\nb\n");
    assert_eq!(
        with_expected(&case.input, &case.expected),
        "// test print\ndef @f() { 1 }\n// ---- expected ----\n// a\n//\n// b\n"
    );
    assert!(
        split_file("def @f() { 1 }\n")
            .unwrap_err()
            .contains("// test")
    );
    assert!(
        split_file("// test print\ndef @f() { 1 }\n")
            .unwrap_err()
            .contains("expected ----")
    );
    assert!(
        split_file("// test print\n// ---- expected ----\nnot a comment\n")
            .unwrap_err()
            .contains("must start")
    );
    assert!(
        run("frobnicate", "")
            .unwrap_err()
            .contains("unknown command")
    );
    assert!(
        run("error", "def @f() { 1 }")
            .unwrap_err()
            .contains("expected an error")
    );
}
