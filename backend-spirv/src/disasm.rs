//! SPIR-V as text: `spirv-dis` (SPIRV-Tools) when it is on `PATH`, else rspirv's own
//! disassembler; and `spirv-val`, when present, for tests.

use std::io::Write;
use std::process::{Command, Stdio};

use rspirv::binary::Disassemble;

/// The disassembly of `words`.
pub fn disassemble(words: &[u32]) -> String {
    if let Some(text) = run_tool("spirv-dis", &["--raw-id", "-"], words)
        .ok()
        .flatten()
        .filter(|(ok, _)| *ok)
        .map(|(_, out)| out)
    {
        return text;
    }
    match rspirv::dr::load_words(words) {
        Ok(m) => m.disassemble(),
        Err(e) => format!("; (undecodable SPIR-V: {e})\n"),
    }
}

/// Runs `spirv-val --target-env vulkan1.2` on `words`: `Ok(None)` when the tool is not
/// installed, `Ok(Some(Err(message)))` when it rejects the module.
pub fn validate(words: &[u32]) -> std::io::Result<Option<Result<(), String>>> {
    Ok(
        run_tool("spirv-val", &["--target-env", "vulkan1.2", "-"], words)?
            .map(|(ok, out)| if ok { Ok(()) } else { Err(out) }),
    )
}

/// Runs `tool args` with `words` on stdin: `None` if the tool is missing, else whether
/// it succeeded and its stdout and stderr.
fn run_tool(tool: &str, args: &[&str], words: &[u32]) -> std::io::Result<Option<(bool, String)>> {
    let mut child = match Command::new(tool)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(&bytes)?;
    }
    let out = child.wait_with_output()?;
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    Ok(Some((out.status.success(), text)))
}
