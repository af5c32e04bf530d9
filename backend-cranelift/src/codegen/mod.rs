//! Loop IR → Cranelift IR → machine code: every kernel of a model is verified
//! (`tir::verify`), translated in order, compiled to machine code on several threads
//! (module `machine`), and defined in one [`JITModule`].
//!
//! The ABI of a kernel is `fn(args: *const *mut u8, ctx: *const CallCtx)`, one pointer per
//! buffer parameter. Translation is a direct walk of the statement tree:
//! - loops become counted loops (`vectorized` loops that module `simd` accepts run as
//!   f32x4 code, other `vectorized` and thread-bound loops as scalar loops; `unrolled`
//!   loops up to [`UNROLL_LIMIT`] iterations and small serial loops around small
//!   bodies are unrolled); the
//!   outermost `parallel` loop is outlined into its own function `(args, ctx, env,
//!   start, end)` that the thread pool calls per chunk, with every variable and local
//!   buffer in scope captured in an `env` array;
//! - accesses flatten their indices row-major with the buffer's constant strides, the
//!   constant terms of the indices folded into one displacement;
//! - loops of one iteration bind their variable to a constant; small local buffers
//!   whose indices are constant once the small loops around their accesses are unrolled
//!   (a register-tiled accumulator) are promoted to Cranelift variables and those loops
//!   unrolled (module `promote`); other local allocations are zero-filled stack slots,
//!   or heap scratch (through the host) above [`STACK_LIMIT`] bytes or once the
//!   function's stack slots reach [`STACK_BUDGET`];
//! - `select` is lazy exactly as in the interpreter: a side that may call out or divide
//!   by a non-constant runs behind a branch; a side whose only hazard is loads (a padded
//!   conv2d input) runs branch-free with each load's address replaced by the buffer's
//!   first element unless its side is taken; pure sides become a plain `select`;
//! - values keep their dtype's semantics: integers wrap, `/` truncates, floordiv and
//!   floormod round down, division by zero reports an error through the call context
//!   instead of trapping, float→int casts saturate, float16 is computed in f32 and
//!   rounded after each operation;
//! - intrinsics are inline instructions where Cranelift has them (`sqrt`, `fma`, `abs`,
//!   `floor`, `ceil`, `rsqrt` as `1/sqrt`) and registered host functions otherwise
//!   (`exp`, `log`, `tanh`, `erf`, `pow`; `sigmoid` is `1/(1+exp(-x))`).
//!
//! f32x4 code forms `a * b + c` as one `fma` when the host has FMA (ISA flags from
//! `cranelift_native`) unless the target says `-fma=0`; every libcall symbol the ISA may
//! ask for (`fmaf`, `floorf`, `memcpy`, ...) is registered with the JIT.
//!
//! Vector-typed expressions (`ramp`, `broadcast`, vector variables) and barriers are
//! refused with [`Error::Unsupported`].
//!
//! This file holds the driver (the JIT module, one [`Cx`] per function, its basic
//! helpers); the translation is split by concern: `loops` (statements and loops),
//! `vector` (f32x4 loops), `memory` (allocations, addresses, promoted buffers), `exprs` (expressions and intrinsics).

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use cranelift_codegen::Context;
use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{
    AbiParam, BlockArg, FuncRef, Function, InstBuilder, MemFlagsData, Signature, StackSlotData,
    StackSlotKind, Type, UserFuncName, Value, types,
};
use cranelift_codegen::isa::TargetFrontendConfig;
use cranelift_codegen::settings::{self, Configurable};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext, Variable};
use cranelift_jit::{ArenaMemoryProvider, JITBuilder, JITModule};
use cranelift_module::{FuncId, Linkage, Module, default_libcall_names};
use kiln_executor::Error;
use kiln_ir::DType;
use kiln_te::tir::semantics;
use kiln_te::tir::{self, BinOp, BufferId, Expr, ForKind, Intrinsic, PrimFunc, Scope, Stmt, VarId};

use crate::promote;
use crate::runtime::{self, Host, HostTy, Math64, status};
use crate::simd::{self, LANES};
use kiln_te::tir::visit::deep;

mod exprs;
mod loops;
mod machine;
mod memory;
mod microkernel;
mod vector;

type Result<T> = std::result::Result<T, Error>;

/// Unrolled loops with at most this many iterations are unrolled; longer ones loop.
pub const UNROLL_LIMIT: i64 = 32;
/// Serial loops of at most this many iterations over small loop-free-after-unrolling
/// bodies (a conv2d's `ry`/`rx` around a small tile) are unrolled...
pub const AUTO_UNROLL_EXTENT: i64 = 8;
/// ... when the unrolled loop holds at most this many stores.
pub const AUTO_UNROLL_STORES: i64 = 64;
/// Local buffers up to this many bytes live on the stack; larger ones on the heap.
pub const STACK_LIMIT: usize = 64 << 10;
/// The stack slots of one generated function add up to at most this many bytes; local
/// buffers beyond it go to the heap, so no kernel (however many buffers it allocates)
/// can overflow the stack of the thread that runs it.
pub const STACK_BUDGET: usize = 512 << 10;
/// Local buffers up to this many bytes are zero-filled with inline stores.
const INLINE_ZERO_LIMIT: usize = 256;

/// The machine code of a model's kernels.
pub(crate) struct Compiled {
    /// The JIT module that owns the code.
    pub module: JITModule,
    /// Entry point of each kernel, in order.
    pub entries: Vec<runtime::KernelFn>,
    /// Wall time of translation and code generation.
    pub compile_time: Duration,
}

fn internal(e: impl std::fmt::Display) -> Error {
    Error::Internal(format!("cranelift: {e}"))
}

/// The error for IR outside the core loop IR, which `tir::legalize` removed before
/// code generation (so this is kiln's own bug).
fn not_core(what: &str) -> Error {
    internal(format_args!(
        "{what} is not in the core loop IR (tir::legalize rewrites it)"
    ))
}

/// The ISA of the host, with its native features (SSE4.1, AVX, FMA, ...).
/// Address space reserved for one module's code and data (reserved, not committed: pages
/// are committed as functions are defined).
const CODE_ARENA_BYTES: usize = 1 << 30;

fn host_isa() -> Result<cranelift_codegen::isa::OwnedTargetIsa> {
    let mut fb = settings::builder();
    // Cranelift's IR verifier re-checks every function before compiling it: on in debug
    // builds (every test), off in release builds, where it cost a tenth of a model's
    // code generation (as wasmtime ships it).
    let verifier = if cfg!(debug_assertions) {
        "true"
    } else {
        "false"
    };
    for (k, v) in [
        ("enable_verifier", verifier),
        ("opt_level", "speed"),
        ("use_colocated_libcalls", "false"),
        ("is_pic", "false"),
        ("enable_probestack", "true"),
        ("probestack_strategy", "inline"),
    ] {
        fb.set(k, v).map_err(internal)?;
    }
    let isa = cranelift_native::builder_with_options(true)
        .map_err(|e| Error::Unsupported(format!("the cpu target on this host: {e}")))?;
    isa.finish(settings::Flags::new(fb)).map_err(internal)
}

/// Verifies and compiles `kernels` into one JIT module.
/// Code generation choices (from the target's options).
#[derive(Copy, Clone, Debug)]
pub(crate) struct Options {
    /// Fuse `a * b + c` in f32x4 code into one rounding when the host has FMA.
    pub fma: bool,
    /// The micro-kernels' ISA level.
    pub isa: crate::microkernel::Isa,
}

pub(crate) fn compile(kernels: &[PrimFunc], opts: Options) -> Result<Compiled> {
    let start = Instant::now();
    let mut core = Vec::with_capacity(kernels.len());
    for k in kernels {
        // Soundness only: the loader checked the caller's limits on kernels from files.
        tir::verify_with(k, &tir::Limits::unlimited())?;
        core.push(tir::legalize(k)?);
    }
    // Code generation handles the core loop IR only (`tir::legalize`).
    let kernels = &core[..];
    let mut jb = JITBuilder::with_isa(host_isa()?, default_libcall_names());
    // All of a module's code in one reserved range: calls between its functions (kernels,
    // outlined loop bodies) are 32-bit pc-relative, so two functions placed more than
    // 2 GiB apart by the system allocator would not link (cranelift-jit panics).
    let arena = ArenaMemoryProvider::new_with_size(CODE_ARENA_BYTES)
        .map_err(|e| Error::Internal(format!("cannot reserve JIT code memory: {e}")))?;
    jb.memory_provider(Box::new(arena));
    runtime::register(&mut jb);
    let mut module = JITModule::new(jb);
    let ptr = module.target_config().pointer_type();
    let call_conv = module.isa().default_call_conv();
    let fcfg = module.isa().frontend_config();
    let has_fma = module
        .isa()
        .isa_flags()
        .iter()
        .any(|f| f.name == "has_fma" && f.as_bool() == Some(true));
    let cl = |t: HostTy| match t {
        HostTy::Ptr => ptr,
        HostTy::I32 => types::I32,
        HostTy::I64 => types::I64,
        HostTy::F32 => types::F32,
        HostTy::F64 => types::F64,
    };
    let mut hosts = HashMap::new();
    for h in Host::all() {
        let (ps, rs) = h.signature();
        let mut sig = Signature::new(call_conv);
        sig.params.extend(ps.iter().map(|&t| AbiParam::new(cl(t))));
        sig.returns.extend(rs.iter().map(|&t| AbiParam::new(cl(t))));
        let id = module
            .declare_function(h.name(), Linkage::Import, &sig)
            .map_err(internal)?;
        hosts.insert(h, id);
    }
    let mut kernel_sig = Signature::new(call_conv);
    kernel_sig
        .params
        .extend([AbiParam::new(ptr), AbiParam::new(ptr)]);
    let mut body_sig = Signature::new(call_conv);
    body_sig.params.extend([
        AbiParam::new(ptr),
        AbiParam::new(ptr),
        AbiParam::new(ptr),
        AbiParam::new(types::I64),
        AbiParam::new(types::I64),
    ]);
    let mut ctx = module.make_context();
    let mut fctx = FunctionBuilderContext::new();
    let mut ids = vec![];
    let mut translated = vec![];
    for (i, k) in kernels.iter().enumerate() {
        let id = module
            .declare_function(&format!("kiln_k{i}"), Linkage::Local, &kernel_sig)
            .map_err(internal)?;
        if std::env::var("KILN_DUMP_CLIF").is_ok_and(|n| n == "list") {
            eprintln!("kiln_k{i} = @{}", k.name);
        }
        let mut pending: Vec<Outlined> = vec![];
        let env = Env {
            func: k,
            hosts: &hosts,
            ptr,
            fcfg,
            body_sig: &body_sig,
            name: format!("kiln_k{i}"),
            fma: opts.fma && has_fma,
            isa: opts.isa,
        };
        ctx.func =
            Function::with_name_signature(UserFuncName::user(0, id.as_u32()), kernel_sig.clone());
        env.translate(&mut module, &mut ctx, &mut fctx, None, &mut pending)?;
        translated.push(take_translated(&mut module, id, &mut ctx, k));
        let mut next = 0;
        while next < pending.len() {
            let o = pending[next].clone();
            next += 1;
            ctx.func = Function::with_name_signature(
                UserFuncName::user(0, o.id.as_u32()),
                body_sig.clone(),
            );
            env.translate(&mut module, &mut ctx, &mut fctx, Some(&o), &mut pending)?;
            translated.push(take_translated(&mut module, o.id, &mut ctx, k));
        }
        ids.push(id);
    }
    machine::define_all(&mut module, translated)?;
    module.finalize_definitions().map_err(internal)?;
    let entries = ids
        .into_iter()
        .map(|id| {
            let p = module.get_finalized_function(id);
            // SAFETY: `p` is the finalized code of a function with the kernel signature.
            unsafe { std::mem::transmute::<*const u8, runtime::KernelFn>(p) }
        })
        .collect();
    Ok(Compiled {
        module,
        entries,
        compile_time: start.elapsed(),
    })
}

/// The function just translated into `ctx`, taken out for [`machine::define_all`];
/// `ctx` is cleared for the next one.
fn take_translated(
    module: &mut JITModule,
    id: FuncId,
    ctx: &mut Context,
    k: &PrimFunc,
) -> machine::Translated {
    let func = std::mem::replace(&mut ctx.func, Function::new());
    module.clear_context(ctx);
    machine::Translated {
        id,
        func,
        kernel: k.name.clone(),
    }
}

/// A parallel loop body to outline: its function, loop, and what it captures.
#[derive(Clone)]
struct Outlined {
    id: FuncId,
    var: VarId,
    body: Stmt,
    /// Captured variables with their dtype, then captured local buffers.
    vars: Vec<(VarId, DType)>,
    bufs: Vec<BufferId>,
}

/// What stays the same while translating the functions of one kernel.
struct Env<'a> {
    func: &'a PrimFunc,
    hosts: &'a HashMap<Host, FuncId>,
    ptr: Type,
    fcfg: TargetFrontendConfig,
    body_sig: &'a Signature,
    name: String,
    /// Whether `a * b + c` in f32x4 code becomes a fused multiply-add.
    fma: bool,
    /// The micro-kernels' ISA level.
    isa: crate::microkernel::Isa,
}

impl Env<'_> {
    /// Translates the kernel itself (`outlined` none) or one outlined parallel body.
    fn translate(
        &self,
        module: &mut JITModule,
        ctx: &mut Context,
        fctx: &mut FunctionBuilderContext,
        outlined: Option<&Outlined>,
        pending: &mut Vec<Outlined>,
    ) -> Result<()> {
        let f = self.func;
        let mut b = FunctionBuilder::new(&mut ctx.func, fctx);
        let entry = b.create_block();
        b.append_block_params_for_function_params(entry);
        b.switch_to_block(entry);
        let params = b.block_params(entry).to_vec();
        let (args, cctx) = (params[0], params[1]);
        let mut cx = Cx {
            env: self,
            module,
            b,
            args,
            ctx: cctx,
            vars: vec![None; f.vars.len()],
            bufs: vec![None; f.buffers.len()],
            refs: HashMap::new(),
            outline: outlined.is_none(),
            pending,
            consts: vec![None; f.vars.len()],
            promoted: vec![None; f.buffers.len()],
            unroll: BTreeSet::new(),
            guard: None,
            stack_bytes: 0,
        };
        for (k, &p) in f.params.iter().enumerate() {
            let v =
                cx.b.ins()
                    .load(self.ptr, MemFlagsData::trusted(), args, (k * 8) as i32);
            if p.index() >= cx.bufs.len() {
                return Err(Error::Internal(format!(
                    "@{}: parameter {p} has no buffer",
                    f.name
                )));
            }
            cx.bufs[p.index()] = Some(v);
        }
        match outlined {
            None => cx.stmt(&f.body)?,
            Some(o) => {
                let env = params[2];
                for (k, &(v, d)) in o.vars.iter().enumerate() {
                    let x =
                        cx.b.ins()
                            .load(cl_ty(d), MemFlagsData::trusted(), env, (k * 8) as i32);
                    cx.vars[v.index()] = Some((x, d));
                }
                for (k, &buf) in o.bufs.iter().enumerate() {
                    let off = ((o.vars.len() + k) * 8) as i32;
                    let x = cx.b.ins().load(self.ptr, MemFlagsData::trusted(), env, off);
                    cx.bufs[buf.index()] = Some(x);
                }
                let d = cx.var_dtype(o.var)?;
                cx.counted_loop(params[3], params[4], o.var, d, &o.body)?;
            }
        }
        cx.b.ins().return_(&[]);
        cx.b.seal_all_blocks();
        cx.b.finalize(self.fcfg.clone());
        Ok(())
    }
}

/// The translation state of one function.
struct Cx<'a, 'm> {
    env: &'a Env<'a>,
    module: &'m mut JITModule,
    b: FunctionBuilder<'m>,
    args: Value,
    ctx: Value,
    /// The value and dtype of each variable in scope.
    vars: Vec<Option<(Value, DType)>>,
    /// The base address of each buffer in scope.
    bufs: Vec<Option<Value>>,
    refs: HashMap<FuncId, FuncRef>,
    /// Whether the next `parallel` loop is outlined (only in the kernel itself).
    outline: bool,
    pending: &'m mut Vec<Outlined>,
    /// The value of each variable known to be constant (unrolled loops, loops of one
    /// iteration, lets of constants).
    consts: Vec<Option<i64>>,
    /// The variables holding each element of a buffer promoted to registers.
    /// (`Lanes`: f32x4 variables of four consecutive elements each.)
    promoted: Vec<Option<Regs>>,
    /// Loops that must be unrolled (their variables index a promoted buffer).
    unroll: BTreeSet<VarId>,
    /// While translating a side of a branch-free `select`: the (i8) condition under
    /// which that side's value is used; loads outside it read the buffer's first
    /// element instead, so they never fault.
    guard: Option<Value>,
    /// Bytes of stack slots created so far (at most [`STACK_BUDGET`]).
    stack_bytes: usize,
}

/// The variables of a promoted buffer.
#[derive(Clone)]
enum Regs {
    Scalar(Vec<Variable>),
    /// f32x4 variables of four consecutive elements along the lane axis (`.1`) each.
    Lanes(Vec<Variable>, usize),
}

/// Where one element of a promoted buffer lives.
enum Slot {
    Scalar(Variable),
    Lane(Variable, u8),
}

/// The row-major offset of element `at` of a buffer of `shape`, with axis `last` (if
/// any) moved innermost — the element order of a buffer promoted as vectors along it.
fn lane_flat(shape: &[usize], at: &[i64], last: Option<usize>) -> i64 {
    let mut flat = 0i64;
    for (a, (&i, &ext)) in at.iter().zip(shape).enumerate() {
        if Some(a) != last {
            flat = flat * ext as i64 + i;
        }
    }
    if let Some(a) = last {
        flat = flat * shape[a] as i64 + at[a];
    }
    flat
}

/// The Cranelift type holding a value of `d` in registers (float16 and bfloat16 are
/// computed in f32, bool is 0 or 1 in an i8, uint64 is an i64 read unsigned).
fn cl_ty(d: DType) -> Type {
    match d {
        DType::F32 | DType::F16 | DType::BF16 => types::F32,
        DType::F64 => types::F64,
        DType::I8 | DType::U8 | DType::Bool => types::I8,
        DType::I16 | DType::U16 => types::I16,
        DType::I32 | DType::U32 => types::I32,
        DType::I64 | DType::U64 => types::I64,
    }
}

fn is_signed(d: DType) -> bool {
    matches!(d, DType::I8 | DType::I16 | DType::I32 | DType::I64)
}

/// Whether `d` is a 16-bit float stored as bits and computed in f32 (float16, bfloat16).
fn is_half(d: DType) -> bool {
    matches!(d, DType::F16 | DType::BF16)
}

impl Cx<'_, '_> {
    fn unsupported(&self, what: impl std::fmt::Display) -> Error {
        Error::Unsupported(format!(
            "{what} in @{} on the cpu target",
            self.env.func.name
        ))
    }

    fn host(&mut self, h: Host, args: &[Value]) -> Option<Value> {
        let id = self.env.hosts[&h];
        let r = *self
            .refs
            .entry(id)
            .or_insert_with(|| self.module.declare_func_in_func(id, self.b.func));
        let call = self.b.ins().call(r, args);
        self.b.inst_results(call).first().copied()
    }

    fn host1(&mut self, h: Host, args: &[Value]) -> Value {
        self.host(h, args).expect("host function has a result")
    }

    fn iconst(&mut self, ty: Type, v: i64) -> Value {
        let masked = match ty.bits() {
            8 => v as u8 as i64,
            16 => v as u16 as i64,
            32 => v as u32 as i64,
            _ => v,
        };
        self.b.ins().iconst(ty, masked)
    }

    fn var_dtype(&self, v: VarId) -> Result<DType> {
        let d = self
            .env
            .func
            .var(v)
            .ok_or_else(|| Error::Internal(format!("{v} is not in the variable arena")))?;
        if !d.ty.is_scalar() {
            return Err(self.unsupported(format_args!("vector variable `{}` ({})", d.name, d.ty)));
        }
        Ok(d.ty.dtype)
    }

    /// Reports failure `code` if `bad` (an i8 flag) holds.
    fn fail_if(&mut self, bad: Value, code: u32) {
        let fail = self.b.create_block();
        let cont = self.b.create_block();
        self.b.set_cold_block(fail);
        self.b.ins().brif(bad, fail, &[], cont, &[]);
        self.b.switch_to_block(fail);
        let c = self.iconst(types::I32, code as i64);
        let ctx = self.ctx;
        self.host(Host::Fail, &[ctx, c]);
        self.b.ins().jump(cont, &[]);
        self.b.switch_to_block(cont);
    }

    // ---- statements ----

    fn buffer(&self, id: BufferId) -> Result<&tir::Buffer> {
        self.env
            .func
            .buffer(id)
            .ok_or_else(|| Error::Internal(format!("{id} is not in the buffer arena")))
    }
}
