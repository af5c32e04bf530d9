//! The file-test harness every crate's text-form tests share (STYLE habit 2): a test is
//! one file in the text IR whose comments carry the command and the expected output,
//!
//! ```text
//! // test <command and arguments>
//! <input: header comment lines and the module text>
//! // ---- expected ----
//! // <expected output, each line behind `// `>
//! ```
//!
//! so the whole file stays valid IR text. [`run_dir`] runs every file with a given
//! extension below a folder through a caller's function from [`Case`] to output, compares
//! with the expected section, prints a line diff on mismatch, and with `UPDATE_EXPECT=1`
//! rewrites the expected sections in place after an intended change (then review the
//! diff). Errors are strings: the harness only reports them, with the file's name.

use std::path::{Path, PathBuf};

/// The line between a file's input and its expected output.
pub const MARKER: &str = "// ---- expected ----";

/// One test file, split into its parts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Case {
    /// The first line after `// test `, trimmed.
    pub command: String,
    /// Everything before the marker line (the `// test` line included).
    pub input: String,
    /// The expected section without its `// ` prefixes.
    pub expected: String,
}

impl Case {
    /// The values of header lines `// KEY VALUE` in the input, in order (`key` given
    /// without the `// ` and the trailing space, e.g. `"opt-level"`).
    pub fn headers<'a>(&'a self, key: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.input.lines().filter_map(move |l| {
            l.strip_prefix("// ")
                .and_then(|rest| rest.strip_prefix(key))
                .and_then(|rest| rest.strip_prefix(' '))
                .map(str::trim)
        })
    }
}

/// Splits a file's text; an error says which part is malformed.
pub fn split_file(text: &str) -> Result<Case, String> {
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
pub fn with_expected(input: &str, actual: &str) -> String {
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

/// A short line diff of `expected` against `actual`.
pub fn diff(expected: &str, actual: &str) -> String {
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

/// Every file below `dir` (recursively) whose name ends in `.{ext}`, sorted.
pub fn collect(dir: &Path, ext: &str) -> Result<Vec<PathBuf>, String> {
    fn walk(dir: &Path, ext: &str, out: &mut Vec<PathBuf>) -> Result<(), String> {
        let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        for entry in entries {
            let path = entry.map_err(|e| format!("{}: {e}", dir.display()))?.path();
            if path.is_dir() {
                walk(&path, ext, out)?;
            } else if path.extension().is_some_and(|e| e == ext) {
                out.push(path);
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    walk(dir, ext, &mut out)?;
    out.sort();
    Ok(out)
}

/// Runs every `.{ext}` file below `root` through `run` and panics with every failure
/// (a test helper: the panic is the test's failure report). Fewer than `min_files`
/// files is a failure too, so a moved folder cannot pass silently.
pub fn run_dir(
    root: &Path,
    ext: &str,
    min_files: usize,
    mut run: impl FnMut(&Case) -> Result<String, String>,
) {
    let files = collect(root, ext).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        files.len() >= min_files,
        "expected at least {min_files} file tests under {}, found {}",
        root.display(),
        files.len()
    );
    let update = std::env::var("UPDATE_EXPECT").is_ok_and(|v| v == "1");
    let mut failures = Vec::new();
    for path in &files {
        let name = path
            .strip_prefix(root)
            .unwrap_or(path)
            .display()
            .to_string();
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) => {
                failures.push(format!("{name}: {e}"));
                continue;
            }
        };
        let case = match split_file(&text) {
            Ok(c) => c,
            Err(e) => {
                failures.push(format!("{name}: {e}"));
                continue;
            }
        };
        match run(&case) {
            Err(e) => failures.push(format!("{name}: {e}")),
            Ok(actual) if actual == case.expected => {}
            Ok(actual) if update => match std::fs::write(path, with_expected(&case.input, &actual))
            {
                Ok(()) => eprintln!("updated {name}"),
                Err(e) => failures.push(format!("{name}: {e}")),
            },
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_layout_is_checked() {
        let text = "// test print\n// opt-level 2\ndef @f() { 1 }\n// ---- expected ----\n// a\n//\n// b\n";
        let case = split_file(text).unwrap();
        assert_eq!(case.command, "print");
        assert_eq!(
            case.input,
            "// test print\n// opt-level 2\ndef @f() { 1 }\n"
        );
        assert_eq!(case.expected, "a\n\nb\n");
        assert_eq!(case.headers("opt-level").collect::<Vec<_>>(), ["2"]);
        assert_eq!(with_expected(&case.input, &case.expected), text);
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
    }

    #[test]
    fn diff_names_the_lines_that_differ() {
        let d = diff("a\nb\nc\n", "a\nx\n");
        assert!(d.contains("line 2") && d.contains("line 3") && !d.contains("line 1"));
    }
}
