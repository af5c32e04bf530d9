//! Keeps the workspace honest: every crate is in ARCHITECTURE.md's table with the kiln
//! dependencies DESIGN.md allows, every Rust source file opens with a `//!` doc, and the
//! README keeps its two set-up commands.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// (folder, kiln crates it may depend on); `cli` and `testsuite` may use everything.
const ALLOWED: &[(&str, &[&str])] = &[
    ("ir", &[]),
    ("rewrite", &["kiln-ir"]),
    ("te", &["kiln-ir"]),
    ("executor", &["kiln-ir", "kiln-rewrite", "kiln-te"]),
    (
        "backend-cranelift",
        &["kiln-te", "kiln-executor", "kiln-ir"],
    ),
    ("backend-cuda", &["kiln-te", "kiln-executor", "kiln-ir"]),
    ("backend-spirv", &["kiln-te", "kiln-executor", "kiln-ir"]),
    ("frontend-onnx", &["kiln-ir"]),
    ("cli", &["*"]),
    ("testsuite", &["*"]),
];

fn kiln_deps(manifest: &str) -> Vec<String> {
    manifest
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("kiln-"))
        .filter_map(|l| l.split(['.', ' ', '=']).next())
        .map(str::to_string)
        .collect()
}

#[test]
fn crates_match_the_architecture_table() {
    let arch = std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    let workspace = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    for (folder, allowed) in ALLOWED {
        assert!(
            workspace.contains(&format!("\"{folder}\"")),
            "{folder} is not a workspace member"
        );
        let row = format!("| `kiln-{folder}` | `{folder}` |");
        assert!(arch.contains(&row), "ARCHITECTURE.md has no row `{row}`");
        let manifest = std::fs::read_to_string(root().join(folder).join("Cargo.toml")).unwrap();
        assert!(
            manifest.contains(&format!("name = \"kiln-{folder}\"")),
            "{folder}: package name"
        );
        for dep in kiln_deps(&manifest) {
            assert!(
                allowed.contains(&"*") || allowed.contains(&dep.as_str()),
                "{folder} depends on {dep}, which DESIGN.md does not allow"
            );
        }
    }
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            if path
                .file_name()
                .is_some_and(|n| n != "target" && n != ".git")
            {
                rust_files(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn every_source_file_opens_with_a_module_doc() {
    let mut files = Vec::new();
    for (folder, _) in ALLOWED {
        rust_files(&root().join(folder), &mut files);
    }
    assert!(files.len() > 20);
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        assert!(
            text.starts_with("//!"),
            "{} does not start with a `//!` doc",
            f.display()
        );
    }
}

#[test]
fn readme_keeps_its_two_setup_commands() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    assert!(readme.contains(
        "cargo run --release -p kiln-cli -- run zoo:resnet18 --target ref --output out.npy"
    ));
    assert!(readme.contains("cargo test --workspace"));
    let ci = std::fs::read_to_string(root().join(".ci/run")).unwrap();
    assert!(ci.contains("cargo test --workspace"));
}
