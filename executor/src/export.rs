//! Export and load of compiled modules: one file holding everything needed to rebuild
//! the module on a backend, in forms the loader can check. Loading validates every part
//! and compiles the kernels again from their loop-IR text; nothing taken from the file is
//! ever executed while loading.
//!
//! **Threat model: a module file is untrusted input.** Anyone may have written or
//! edited it, and the checksum (SHA-256, which nobody can make collide with an edit by
//! accident) only catches damage: whoever edits a file can recompute it. Safety rests
//! on validation instead: every part is parsed and checked, every kernel passes the
//! loop-IR verifier — whose bounds proof is sound under the wrapping integer semantics
//! of compiled code, so no kernel it accepts reads or writes outside its buffers — and
//! the verifier's static [`Limits`] (total loop iterations, local memory), so a file
//! cannot ask for an endless loop or a stack overflow. Loading never runs code from the
//! file; kernels are compiled again from their text by the backend.
//!
//! The layout (integers little-endian):
//! ```text
//! magic      8 bytes  "KILNMOD\0"
//! version    u32      2
//! target     u64 length + UTF-8     e.g. "interp"
//! graph      u64 length + UTF-8     graph JSON, TVM's layout
//! params     u64 length + bytes     TVM's params format
//! kernels    u64 count, then per kernel: u64 length + UTF-8 loop-IR text
//! checksum   32 bytes               SHA-256 of every byte before it
//! ```
//! The loader checks, in order: magic, version, every length against the bytes left, the
//! checksum, the target (and that the backend serves it), the graph (validated, memory
//! plan free of overlapping lifetimes), the params (each a placeholder of the graph with
//! its shape and dtype), every kernel (parsed, verified, names unique), and that every
//! kernel call of the graph names a kernel whose buffers have the graph's shapes and
//! dtypes. Each failure is an [`Error::InvalidModuleFile`] saying what and where.
//! [`load_bytes_limited`] takes the verifier limits; the other loaders use
//! [`Limits::default`].

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;

use kiln_te::tir::{self, Limits, PrimFunc};
use sha2::{Digest, Sha256};

use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::graph_json::GraphJson;
use crate::module::{CompiledModule, Program};
use crate::params::{load_params, save_params};
use crate::plan::{Layout, check_plan};
use crate::target::Target;

/// The first bytes of every exported module.
pub const MAGIC: &[u8; 8] = b"KILNMOD\0";
/// The format version written and accepted.
pub const VERSION: u32 = 2;
/// Bytes of the checksum at the end of the file.
pub const CHECKSUM_LEN: usize = 32;

/// SHA-256: the file's checksum. It catches damage; it does not stop tampering (whoever
/// edits the file can recompute it), and the loader's validation does not depend on it.
pub fn checksum(bytes: &[u8]) -> [u8; CHECKSUM_LEN] {
    Sha256::digest(bytes).into()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn put(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend((bytes.len() as u64).to_le_bytes());
    out.extend_from_slice(bytes);
}

impl CompiledModule {
    /// The exported form of this module (see the module docs), as bytes.
    pub fn export_bytes(&self) -> Result<Vec<u8>> {
        let Program::Kernels { kernels, .. } = &self.program else {
            return Err(Error::Unsupported(
                "a module built for `ref` has no kernels to export; build for a compiling \
                 target"
                    .into(),
            ));
        };
        let mut out = MAGIC.to_vec();
        out.extend(VERSION.to_le_bytes());
        put(&mut out, self.target.to_string().as_bytes());
        put(&mut out, self.graph.to_json().as_bytes());
        put(&mut out, &save_params(&self.params));
        out.extend((kernels.len() as u64).to_le_bytes());
        for k in kernels {
            put(&mut out, k.to_string().as_bytes());
        }
        let sum = checksum(&out);
        out.extend(sum);
        Ok(out)
    }

    /// Writes the exported module to `path` (one file).
    pub fn export(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        std::fs::write(path, self.export_bytes()?).map_err(|source| Error::Io {
            path: path.to_path_buf(),
            source,
        })
    }
}

/// Reads, validates and compiles again the module exported to `path`, on `backend`.
pub fn load(path: impl AsRef<Path>, backend: Arc<dyn Backend>) -> Result<CompiledModule> {
    load_with(path, &|_| Ok(backend.clone()))
}

/// Picks the backend for the target recorded in a module file (the `kiln` crate's
/// registry is one).
pub type ResolveBackend<'a> = &'a dyn Fn(&Target) -> Result<Arc<dyn Backend>>;

/// [`load`] on the backend `resolve` names for the target recorded in the file.
pub fn load_with(path: impl AsRef<Path>, resolve: ResolveBackend<'_>) -> Result<CompiledModule> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })?;
    load_bytes_with(&bytes, resolve).map_err(|e| match e {
        Error::InvalidModuleFile(m) => Error::InvalidModuleFile(format!("{}: {m}", path.display())),
        other => other,
    })
}

fn bad(message: impl Into<String>) -> Error {
    Error::InvalidModuleFile(message.into())
}

/// A cursor over the file that refuses to read past the end.
struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        let left = self.bytes.len() - self.pos;
        if n > left {
            return Err(bad(format!(
                "truncated: {what} at byte {} needs {n} bytes, {left} left",
                self.pos
            )));
        }
        let s = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn u64(&mut self, what: &str) -> Result<u64> {
        let b = self.take(8, what)?;
        Ok(u64::from_le_bytes(b.try_into().expect("8 bytes")))
    }

    fn section(&mut self, what: &str) -> Result<&'a [u8]> {
        let at = self.pos;
        let len = self.u64(&format!("the length of {what}"))?;
        let len = usize::try_from(len)
            .ok()
            .filter(|&l| l <= self.bytes.len() - self.pos)
            .ok_or_else(|| {
                bad(format!(
                    "{what} at byte {at} claims {len} bytes, only {} left (truncated or corrupt)",
                    self.bytes.len() - self.pos
                ))
            })?;
        self.take(len, what)
    }

    fn text(&mut self, what: &str) -> Result<&'a str> {
        let at = self.pos;
        std::str::from_utf8(self.section(what)?)
            .map_err(|e| bad(format!("{what} at byte {at} is not UTF-8: {e}")))
    }
}

/// [`load`] from bytes in memory.
pub fn load_bytes(bytes: &[u8], backend: Arc<dyn Backend>) -> Result<CompiledModule> {
    load_bytes_with(bytes, &|_| Ok(backend.clone()))
}

/// [`load_with`] from bytes in memory, kernels verified under [`Limits::default`].
pub fn load_bytes_with(bytes: &[u8], resolve: ResolveBackend<'_>) -> Result<CompiledModule> {
    load_bytes_limited(bytes, resolve, &Limits::default())
}

/// [`load_bytes_with`] with the kernels verified under `limits` (iterations, local
/// memory): raise them for a trusted file with bigger kernels.
pub fn load_bytes_limited(
    bytes: &[u8],
    resolve: ResolveBackend<'_>,
    limits: &Limits,
) -> Result<CompiledModule> {
    let mut r = Reader { bytes, pos: 0 };
    if r.take(8, "the magic").ok() != Some(&MAGIC[..]) {
        return Err(bad(
            "not a kiln module (bad magic; expected \"KILNMOD\\0\")",
        ));
    }
    let version = u32::from_le_bytes(r.take(4, "the version")?.try_into().expect("4 bytes"));
    if version != VERSION {
        return Err(bad(format!(
            "format version {version}, this kiln reads version {VERSION}"
        )));
    }
    let target_text = r.text("the target")?;
    let graph_text = r.text("the graph JSON")?;
    let params_bytes = r.section("the params")?;
    let count = r.u64("the kernel count")?;
    if count > ((bytes.len() - r.pos) / 8) as u64 {
        return Err(bad(format!(
            "kernel count {count} is more than the rest of the file can hold"
        )));
    }
    let mut texts = Vec::with_capacity(count as usize);
    for i in 0..count {
        texts.push(r.text(&format!("kernel {i}"))?);
    }
    let body_end = r.pos;
    let stored = r.take(CHECKSUM_LEN, "the checksum")?;
    if r.pos != bytes.len() {
        return Err(bad(format!(
            "{} unexpected bytes after the checksum",
            bytes.len() - r.pos
        )));
    }
    let computed = checksum(&bytes[..body_end]);
    if stored != computed {
        return Err(bad(format!(
            "checksum mismatch (stored {}, computed {}): the file was altered or damaged",
            hex(stored),
            hex(&computed)
        )));
    }

    let target: Target = target_text
        .parse()
        .map_err(|e| bad(format!("target `{target_text}`: {e}")))?;
    let backend = resolve(&target)?;
    if !backend.supports(&target) {
        return Err(Error::Unsupported(format!(
            "the module was built for `{target}`, which backend `{}` does not serve",
            backend.name()
        )));
    }
    let target = target
        .check_options(backend.options())
        .map_err(|e| bad(format!("target `{target_text}`: {e}")))?;
    let graph = GraphJson::parse(graph_text).map_err(|e| bad(format!("graph: {e}")))?;
    check_plan(&graph).map_err(|e| bad(format!("memory plan: {e}")))?;
    let params = load_params(params_bytes).map_err(|e| bad(format!("params: {e}")))?;
    let mut kernels: Vec<PrimFunc> = Vec::with_capacity(texts.len());
    let mut names = HashSet::new();
    for (i, text) in texts.iter().enumerate() {
        let k = tir::parse(text).map_err(|e| bad(format!("kernel {i}: {e}")))?;
        tir::verify_with(&k, limits).map_err(|e| bad(format!("kernel {i} @{}: {e}", k.name)))?;
        if !names.insert(k.name.clone()) {
            return Err(bad(format!(
                "kernel {i}: a second kernel named @{}",
                k.name
            )));
        }
        kernels.push(k);
    }
    let layout = Layout::new(&graph, &|n| params.contains_key(n), Some(&kernels), false)
        .map_err(|e| bad(format!("graph and kernels disagree: {e}")))?;
    for (name, value) in &params {
        let p = layout
            .params
            .iter()
            .find(|p| &p.name == name)
            .ok_or_else(|| bad(format!("param `{name}` is not a placeholder of the graph")))?;
        crate::executor::check_tensor(&layout, p.entry, name, value)
            .map_err(|e| bad(format!("param `{name}`: {e}")))?;
    }
    let library = backend.compile(&target, &kernels)?;
    Ok(CompiledModule::new(
        graph,
        target,
        params,
        Program::Kernels { kernels, library },
        layout,
        vec![],
    ))
}
