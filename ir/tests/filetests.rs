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

use std::path::Path;

use kiln_ir::filetest;
use kiln_ir::interp::{Inputs, evaluate};
use kiln_ir::text::{PrintOptions, parse_module, print_module};
use kiln_ir::{DType, Module, NDArray};

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

#[test]
fn filetests() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/filetests");
    filetest::run_dir(&root, "relay", 10, |case| run(&case.command, &case.input));
}

#[test]
fn unknown_commands_and_missing_errors_fail() {
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
