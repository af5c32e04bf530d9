//! The conformance binary's progress: a line on stderr counting the cases when stderr is
//! a terminal (a pseudo terminal made by util-linux `script`), nothing when piped. Without
//! `script` the terminal test prints `SKIP` and passes, except under `CI=true`.

use std::process::Command;

/// Runs the conformance binary on two cases, writing the matrix to a temporary file;
/// returns what it printed (stdout and stderr of a terminal, or stderr when piped).
fn conformance(in_terminal: bool) -> Option<String> {
    let dir = std::env::temp_dir().join(format!("kiln-conformance-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join(if in_terminal {
        "matrix-terminal.txt"
    } else {
        "matrix-piped.txt"
    });
    let bin = env!("CARGO_BIN_EXE_conformance");
    let args = format!("--cases 2 --out '{}'", out.display());
    let o = if in_terminal {
        if Command::new("script").arg("--version").output().is_err() {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "`script` (util-linux) is needed for the terminal test under CI"
            );
            eprintln!("SKIP: no `script` (util-linux) to make a pseudo terminal");
            return None;
        }
        Command::new("script")
            .args(["-qec", &format!("'{bin}' {args}"), "/dev/null"])
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap()
    } else {
        Command::new(bin)
            .args(["--cases", "2", "--out"])
            .arg(&out)
            .output()
            .unwrap()
    };
    let text =
        String::from_utf8_lossy(if in_terminal { &o.stdout } else { &o.stderr }).into_owned();
    assert!(o.status.success(), "conformance failed: {text}");
    let matrix = std::fs::read_to_string(&out).unwrap();
    assert!(matrix.contains("| op | dtype |"), "{matrix}");
    Some(text)
}

#[test]
fn a_terminal_sees_the_cases_counted() {
    let Some(text) = conformance(true) else {
        return;
    };
    assert!(
        text.contains("conformance: case 0 of 2 on interp"),
        "{text}"
    );
    assert!(text.contains("conformance: case 2 of 2"), "{text}");
}

#[test]
fn piped_stderr_has_no_progress() {
    let text = conformance(false).unwrap();
    assert!(!text.contains("case "), "{text}");
    assert!(text.contains("wrote "), "{text}");
}
