//! Helpers shared by the `kiln` binary's end-to-end tests: running the binary, reading
//! its output, temporary paths, and the check that a failure is one clear `error:` line.

#![allow(dead_code)]

pub mod onnx_model;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Runs the `kiln` binary with `args`.
pub fn kiln(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(args)
        .output()
        .expect("run kiln")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Runs kiln, asserting success, and returns its stdout.
pub fn kiln_ok(args: &[&str]) -> String {
    let o = kiln(args);
    assert!(
        o.status.success(),
        "kiln {args:?} failed: {}{}",
        stderr(&o),
        stdout(&o)
    );
    stdout(&o)
}

/// A path named `name` in a temporary folder of this test binary (`suite` keeps the
/// test files' folders apart).
pub fn tmp_in(suite: &str, name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kiln-cli-{suite}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

pub fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Asserts a failed run with one `error:` line mentioning every `needle`.
pub fn assert_clear_error(o: &Output, needles: &[&str]) {
    assert!(
        !o.status.success(),
        "expected failure, got success: {}",
        stdout(o)
    );
    let err = stderr(o);
    assert!(!err.contains("panicked"), "panic: {err}");
    assert_eq!(
        err.trim_end().lines().count(),
        1,
        "one line expected: {err}"
    );
    assert!(err.starts_with("error: "), "{err}");
    for n in needles {
        assert!(err.contains(n), "`{n}` not in: {err}");
    }
}
