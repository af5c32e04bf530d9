//! The pages under `docs/` stay true: every `kiln` command in their `sh` blocks runs,
//! in order, in a scratch folder holding the `mlp.onnx` the tutorial uses, and must
//! succeed (the Rust blocks of `docs/tutorial.md` are doctests of the `kiln` crate).

mod common;

use std::path::Path;
use std::process::Command;

use common::onnx_model::mlp_onnx;
use common::*;

/// The `kiln` command lines of the `sh` blocks of `page`, without comments.
fn commands(page: &str) -> Vec<Vec<String>> {
    page.split("```sh\n")
        .skip(1)
        .filter_map(|block| block.split("```").next())
        .flat_map(str::lines)
        .map(|line| line.split('#').next().unwrap_or(line).trim())
        .filter_map(|line| line.strip_prefix("kiln "))
        .map(|args| args.split_whitespace().map(str::to_string).collect())
        .collect()
}

/// Runs every command of `docs/NAME` in a fresh folder; returns how many ran.
fn run_page(name: &str) -> usize {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let page = std::fs::read_to_string(root.join("docs").join(name)).unwrap();
    let dir = tmp_in("docs", name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("mlp.onnx"), mlp_onnx(true)).unwrap();
    let commands = commands(&page);
    for args in &commands {
        let o = Command::new(env!("CARGO_BIN_EXE_kiln"))
            .args(args)
            .current_dir(&dir)
            .output()
            .expect("run kiln");
        assert!(
            o.status.success(),
            "docs/{name}: `kiln {}` failed: {}{}",
            args.join(" "),
            stderr(&o),
            stdout(&o)
        );
    }
    commands.len()
}

#[test]
fn the_pipeline_page_commands_run() {
    assert!(run_page("pipeline.md") >= 10);
}

#[test]
fn the_tutorial_commands_run() {
    assert!(run_page("tutorial.md") >= 6);
}

#[test]
fn the_graph_page_commands_parse() {
    // ResNet-18 pictures take a while in a test build: each command runs with `--help`
    // appended instead, which clap reaches only after accepting the command and every
    // option before it (a renamed or misspelt option fails).
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let page = std::fs::read_to_string(root.join("docs/graph.md")).unwrap();
    let commands = commands(&page);
    assert!(!commands.is_empty());
    for args in commands {
        let mut with_help = args.clone();
        with_help.push("--help".into());
        let refs: Vec<&str> = with_help.iter().map(String::as_str).collect();
        kiln_ok(&refs);
    }
}
