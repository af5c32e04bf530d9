//! Machine code for a model's translated functions, compiled on several threads.
//!
//! Translation to Cranelift IR declares functions in the JIT module, so it runs in
//! order on one thread; what dominates a build — Cranelift's optimizer, register
//! allocation and emission, [`Context::compile`] — needs only the ISA and one function,
//! so the functions are compiled on up to [`threads`] scoped threads taking the next
//! function from a shared counter, and their bytes and relocations defined in the module
//! afterwards in declaration order. The code is the same whatever the thread count: each
//! function is compiled on its own.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use cranelift_codegen::Context;
use cranelift_codegen::control::ControlPlane;
use cranelift_codegen::ir::Function;
use cranelift_codegen::isa::TargetIsa;
use cranelift_jit::JITModule;
use cranelift_module::{FuncId, Module, ModuleReloc};
use kiln_executor::Error;

use super::Result;

/// A function translated to Cranelift IR, waiting for its machine code.
pub(super) struct Translated {
    /// Its id in the JIT module.
    pub id: FuncId,
    /// Its code.
    pub func: Function,
    /// The name of the kernel it belongs to, for messages and `KILN_DUMP_CLIF`.
    pub kernel: String,
}

/// One function's machine code.
struct MachineCode {
    alignment: u64,
    bytes: Vec<u8>,
    relocs: Vec<ModuleReloc>,
}

/// How many threads compile `n` functions: the host's parallelism, at most one per
/// function.
fn threads(n: usize) -> usize {
    std::thread::available_parallelism()
        .map_or(1, |p| p.get())
        .min(n)
        .max(1)
}

/// Compiles every function of `funcs` and defines it in `module`, in order.
pub(super) fn define_all(module: &mut JITModule, funcs: Vec<Translated>) -> Result<()> {
    let code = compile_all(module.isa(), &funcs)?;
    for (f, c) in funcs.iter().zip(code) {
        module
            .define_function_bytes(f.id, c.alignment, &c.bytes, &c.relocs)
            .map_err(|e| {
                Error::Internal(format!(
                    "cranelift rejected the code of @{}: {e:?}",
                    f.kernel
                ))
            })?;
    }
    Ok(())
}

/// The machine code of each of `funcs`, in order, compiled on [`threads`] threads.
fn compile_all(isa: &dyn TargetIsa, funcs: &[Translated]) -> Result<Vec<MachineCode>> {
    let next = AtomicUsize::new(0);
    let done: Mutex<Vec<Option<Result<MachineCode>>>> =
        Mutex::new((0..funcs.len()).map(|_| None).collect());
    let work = || {
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(f) = funcs.get(i) else { break };
            let code = compile_one(isa, f);
            // A poisoned lock means a compiling thread panicked: the scope re-raises it.
            if let Ok(mut done) = done.lock() {
                done[i] = Some(code);
            }
        }
    };
    std::thread::scope(|s| {
        for _ in 1..threads(funcs.len()) {
            s.spawn(work);
        }
        work();
    });
    let done = done
        .into_inner()
        .map_err(|_| Error::Internal("a code generation thread panicked".into()))?;
    done.into_iter()
        .map(|c| c.unwrap_or_else(|| Err(Error::Internal("a function was not compiled".into()))))
        .collect()
}

/// Compiles one function with Cranelift (what `JITModule::define_function` does before
/// placing the bytes).
fn compile_one(isa: &dyn TargetIsa, f: &Translated) -> Result<MachineCode> {
    let mut ctx = Context::for_function(f.func.clone());
    let alignment = ctx
        .compile(isa, &mut ControlPlane::default())
        .map_err(|e| {
            Error::Internal(format!(
                "cranelift rejected the code of @{}: {:?}",
                f.kernel, e.inner
            ))
        })?
        .buffer
        .alignment as u64;
    let Some(code) = ctx.compiled_code() else {
        return Err(Error::Internal(format!(
            "cranelift compiled @{} but kept no code",
            f.kernel
        )));
    };
    if std::env::var("KILN_DUMP_CLIF").is_ok_and(|n| n == f.kernel) {
        eprintln!("{}", ctx.func.display());
    }
    Ok(MachineCode {
        alignment,
        bytes: code.code_buffer().to_vec(),
        relocs: code
            .buffer
            .relocs()
            .iter()
            .map(|r| ModuleReloc::from_mach_reloc(r, &ctx.func, f.id))
            .collect(),
    })
}
