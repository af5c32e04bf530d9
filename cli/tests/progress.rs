//! Progress on stderr: drawn when stderr is a terminal (the binary runs under a pseudo
//! terminal made by util-linux `script`), absent when the output is piped and with
//! `--quiet`. Without `script` the terminal tests print `SKIP` and pass, except under
//! `CI=true`, where they fail.

mod common;

use std::process::Command;

use common::*;

/// What `kiln ARGS` writes to a pseudo terminal (stdout and stderr together), or `None`
/// when `script` is missing outside CI.
fn in_terminal(args: &str) -> Option<String> {
    let have_script = Command::new("script").arg("--version").output().is_ok();
    if !have_script {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "`script` (util-linux) is needed for the terminal tests under CI"
        );
        eprintln!("SKIP: no `script` (util-linux) to make a pseudo terminal");
        return None;
    }
    let command = format!("'{}' {args}", env!("CARGO_BIN_EXE_kiln"));
    let o = Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run script");
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "kiln {args} failed in a terminal: {text}"
    );
    Some(text)
}

/// Every step of a build and a run shows itself, then clears its line before the
/// results are printed.
#[test]
fn a_terminal_sees_each_step_and_the_kernel_count() {
    let Some(text) = in_terminal("run zoo:mlp --target interp") else {
        return;
    };
    for step in [
        "loading zoo:mlp",
        "building zoo:mlp for interp (optimize, lower, compile)",
        "running on interp, kernel calls",
    ] {
        assert!(text.contains(step), "no `{step}` in: {text}");
    }
    // Cleared: the results come after an erase-line sequence, on a line of their own.
    assert!(text.contains("\x1b[2K"), "{text}");
    assert!(text.contains("target interp: ran in"), "{text}");
}

#[test]
fn a_terminal_sees_benchmark_measurements_counted() {
    let Some(text) = in_terminal("bench zoo:mlp --target interp --repeat 3 --number 1") else {
        return;
    };
    assert!(text.contains("measuring on interp"), "{text}");
    assert!(text.contains("0/3"), "{text}");
    assert!(text.contains("3 repeats of at least 1 runs"), "{text}");
}

#[test]
fn quiet_draws_nothing_even_in_a_terminal() {
    let Some(text) = in_terminal("--quiet run zoo:mlp --target interp") else {
        return;
    };
    assert!(!text.contains("loading"), "{text}");
    assert!(!text.contains("running on"), "{text}");
    assert!(!text.contains('\x1b'), "{text}");
    assert!(text.contains("target interp: ran in"), "{text}");
}

#[test]
fn piped_output_has_no_progress() {
    let o = kiln(&["bench", "zoo:mlp", "--target", "interp", "--repeat", "2"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stderr(&o), "", "progress on a pipe");
    let out = stdout(&o);
    assert!(!out.contains("measuring") && !out.contains('\x1b'), "{out}");
}
