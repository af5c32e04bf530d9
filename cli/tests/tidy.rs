//! Keeps the workspace honest: DESIGN.md's crate table is mirrored here (and compared with
//! `../shared/DESIGN.md` when present); every crate is in ARCHITECTURE.md's table, whose
//! "depends on" column names every kiln dependency of the crate and nothing DESIGN.md
//! forbids; every Rust source file opens with a `//!` doc; every Markdown file named is
//! in the repository; the README keeps its two set-up commands and CI runs the first.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// DESIGN.md's crate table, mirrored: (folder, what that folder's row says it may depend
/// on, as written there). `../shared/DESIGN.md`, when present, must say the same.
const DESIGN: &[(&str, &str)] = &[
    ("ir", "nothing in kiln"),
    ("rewrite", "`ir`"),
    ("te", "`ir`"),
    ("executor", "`ir`, `te` (not `rewrite`)"),
    ("backend-cranelift", "`te`, `executor`"),
    ("backend-cuda", "`te`, `executor`"),
    ("backend-spirv", "`te`, `executor`"),
    ("kiln", "everything but `cli`, `testsuite`"),
    ("frontend-onnx", "`ir`"),
    ("cli", "`kiln`"),
    ("testsuite", "everything"),
];

/// The package name of a folder.
fn package(folder: &str) -> String {
    if folder == "kiln" {
        "kiln".to_string()
    } else {
        format!("kiln-{folder}")
    }
}

/// The names written in backticks in `text`, before any parenthesis.
fn backticked(text: &str) -> Vec<String> {
    let text = text.split('(').next().unwrap_or(text);
    text.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

/// The package names a "may depend on" cell allows (folders or package names, `nothing`,
/// `—`, `everything`, `everything but ...`).
fn allowed_by(cell: &str, own: &str) -> Vec<String> {
    let cell = cell.trim();
    let to_package = |n: &str| {
        if n.starts_with("kiln") {
            n.to_string()
        } else {
            package(n)
        }
    };
    if cell.starts_with("nothing") || cell == "—" {
        return vec![];
    }
    if let Some(rest) = cell.strip_prefix("everything") {
        let but: Vec<String> = backticked(rest).iter().map(|n| to_package(n)).collect();
        return DESIGN
            .iter()
            .map(|(f, _)| package(f))
            .filter(|p| p != own && !but.contains(p))
            .collect();
    }
    backticked(cell).iter().map(|n| to_package(n)).collect()
}

/// What DESIGN.md lets `folder` depend on, closed over what those crates may use (a
/// backend may name `kiln-ir`, which `te` and `executor` are built on).
fn design_allows(folder: &str) -> Vec<String> {
    let mut out: Vec<String> = vec![];
    let mut todo = allowed_by(
        DESIGN.iter().find(|(f, _)| *f == folder).unwrap().1,
        &package(folder),
    );
    while let Some(p) = todo.pop() {
        if out.contains(&p) {
            continue;
        }
        if let Some((f, cell)) = DESIGN.iter().find(|(f, _)| package(f) == p) {
            todo.extend(allowed_by(cell, &package(f)));
        }
        out.push(p);
    }
    out
}

/// The kiln crates in the `[dependencies]` section of a manifest.
fn kiln_deps(manifest: &str) -> Vec<String> {
    manifest
        .lines()
        .map(str::trim)
        .skip_while(|l| *l != "[dependencies]")
        .skip(1)
        .take_while(|l| !l.starts_with('['))
        .filter(|l| l.starts_with("kiln"))
        .filter_map(|l| l.split(['.', ' ', '=']).next())
        .map(str::to_string)
        .collect()
}

/// The cells of the markdown table row of `md` that starts with `first`.
fn row<'a>(md: &'a str, first: &str) -> Option<Vec<&'a str>> {
    md.lines()
        .find(|l| l.starts_with(first))
        .map(|l| l.trim_matches('|').split(" | ").map(str::trim).collect())
}

#[test]
fn the_design_table_is_mirrored_here() {
    let path = root().join("../shared/DESIGN.md");
    let Ok(design) = std::fs::read_to_string(&path) else {
        println!("SKIP: {} is not here", path.display());
        return;
    };
    for (folder, deps) in DESIGN {
        let cells = row(&design, &format!("| `{folder}` |"))
            .unwrap_or_else(|| panic!("DESIGN.md has no row for `{folder}`"));
        assert_eq!(
            cells.get(2).copied(),
            Some(*deps),
            "DESIGN.md's row for `{folder}`"
        );
    }
}

/// Whether the workspace manifest `workspace` lists `folder` as a member, by name or by
/// a `prefix*` pattern (`backend-*`).
fn is_member(workspace: &str, folder: &str) -> bool {
    let members = workspace
        .split_once("members = [")
        .and_then(|(_, rest)| rest.split_once(']'))
        .map_or("", |(list, _)| list);
    members
        .split(',')
        .map(|m| m.trim().trim_matches('"'))
        .any(|m| match m.strip_suffix('*') {
            Some(prefix) => folder.starts_with(prefix),
            None => m == folder,
        })
}

#[test]
fn crates_match_the_architecture_table_and_the_design() {
    let arch = std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    let workspace = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    for (folder, _) in DESIGN {
        let package = package(folder);
        assert!(
            is_member(&workspace, folder),
            "{folder} is not a workspace member"
        );
        let first = format!("| `{package}` | `{folder}` |");
        let cells =
            row(&arch, &first).unwrap_or_else(|| panic!("ARCHITECTURE.md has no row `{first}`"));
        let arch_deps = allowed_by(cells[2], &package);
        let manifest = std::fs::read_to_string(root().join(folder).join("Cargo.toml")).unwrap();
        assert!(
            manifest.contains(&format!("name = \"{package}\"")),
            "{folder}: package name"
        );
        let allowed = design_allows(folder);
        for dep in kiln_deps(&manifest) {
            assert!(
                allowed.contains(&dep),
                "{folder} depends on {dep}, which DESIGN.md does not allow"
            );
            assert!(
                arch_deps.contains(&dep),
                "{folder} depends on {dep}, which its ARCHITECTURE.md row does not say"
            );
        }
        for dep in &arch_deps {
            assert!(
                allowed.contains(dep),
                "ARCHITECTURE.md says {folder} depends on {dep}, which DESIGN.md does not allow"
            );
        }
    }
}

/// The files under `dir` whose extension is one of `exts` (build output and `.git` left
/// out).
fn files_ending(dir: &Path, exts: &[&str], out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            if path
                .file_name()
                .is_some_and(|n| n != "target" && n != ".git")
            {
                files_ending(&path, exts, out);
            }
        } else if path
            .extension()
            .is_some_and(|e| exts.iter().any(|x| e == *x))
        {
            out.push(path);
        }
    }
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    files_ending(dir, &["rs"], out);
}

/// Every Markdown file a doc, comment or page names (`RULES.md`, `docs/graph.md`)
/// is in the repository, so no reader is sent to a file they do not have. The one
/// exception is the project's `DESIGN.md`, kept beside the repository (the first test
/// above mirrors its table here).
#[test]
fn every_markdown_file_named_is_in_the_repository() {
    let mut files = Vec::new();
    files_ending(&root(), &["rs", "md"], &mut files);
    let mut present = std::collections::BTreeSet::new();
    for f in &files {
        if f.extension().is_some_and(|e| e == "md") {
            present.insert(f.file_name().unwrap().to_string_lossy().into_owned());
        }
    }
    let mut missing = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        for word in text.split(|c: char| !(c.is_alphanumeric() || "_.-/".contains(c))) {
            let Some(stem) = word.strip_suffix(".md") else {
                continue;
            };
            let name = format!("{}.md", stem.rsplit('/').next().unwrap_or(stem));
            if name != ".md" && name != "DESIGN.md" && !present.contains(&name) {
                missing.push(format!("{}: {word}", f.display()));
            }
        }
    }
    assert!(missing.is_empty(), "files named but absent: {missing:#?}");
}

#[test]
fn every_source_file_opens_with_a_module_doc() {
    let mut files = Vec::new();
    for (folder, _) in DESIGN {
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
    let ci = std::fs::read_to_string(root().join(".ci/run")).unwrap();
    // The first set-up command runs the main job with the compiler, checked against the
    // reference, and CI's main-job step runs exactly that command.
    let main_job = "cargo run --release -p kiln-cli -- run zoo:resnet18 --target cpu --check \
                    --output out.npy";
    let commands: Vec<&str> = readme
        .split("```sh\n")
        .skip(1)
        .filter_map(|b| b.split("```").next())
        .map(str::trim)
        .collect();
    assert_eq!(
        commands.first(),
        Some(&main_job),
        "README's first set-up command"
    );
    assert_eq!(
        commands.get(1),
        Some(&"cargo test --workspace"),
        "the second"
    );
    assert!(
        ci.lines().any(|l| l.trim() == main_job),
        ".ci/run must run `{main_job}`"
    );
    assert!(ci.contains("cargo test --workspace"));
}
