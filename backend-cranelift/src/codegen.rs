//! Loop IR → Cranelift IR → machine code: every kernel of a model is verified
//! (`tir::verify`), translated, and defined in one [`JITModule`].
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
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{FuncId, Linkage, Module, default_libcall_names};
use kiln_executor::Error;
use kiln_ir::DType;
use kiln_te::tir::semantics;
use kiln_te::tir::{self, BinOp, BufferId, Expr, ForKind, Intrinsic, PrimFunc, Scope, Stmt, VarId};

use crate::promote;
use crate::runtime::{self, Host, HostTy, status};
use crate::simd::{self, LANES};

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

/// The ISA of the host, with its native features (SSE4.1, AVX, FMA, ...).
fn host_isa() -> Result<cranelift_codegen::isa::OwnedTargetIsa> {
    let mut fb = settings::builder();
    for (k, v) in [
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
}

pub(crate) fn compile(kernels: &[PrimFunc], opts: Options) -> Result<Compiled> {
    let start = Instant::now();
    for k in kernels {
        // Soundness only: the loader checked the caller's limits on kernels from files.
        tir::verify_with(k, &tir::Limits::unlimited())?;
    }
    let mut jb = JITBuilder::with_isa(host_isa()?, default_libcall_names());
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
    };
    let mut hosts = HashMap::new();
    for h in Host::ALL {
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
        };
        ctx.func =
            Function::with_name_signature(UserFuncName::user(0, id.as_u32()), kernel_sig.clone());
        env.translate(&mut module, &mut ctx, &mut fctx, None, &mut pending)?;
        define(&mut module, id, &mut ctx, k)?;
        let mut next = 0;
        while next < pending.len() {
            let o = pending[next].clone();
            next += 1;
            ctx.func = Function::with_name_signature(
                UserFuncName::user(0, o.id.as_u32()),
                body_sig.clone(),
            );
            env.translate(&mut module, &mut ctx, &mut fctx, Some(&o), &mut pending)?;
            define(&mut module, o.id, &mut ctx, k)?;
        }
        ids.push(id);
    }
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

fn define(module: &mut JITModule, id: FuncId, ctx: &mut Context, k: &PrimFunc) -> Result<()> {
    module.define_function(id, ctx).map_err(|e| {
        Error::Internal(format!("cranelift rejected the code of @{}: {e:?}", k.name))
    })?;
    if std::env::var("KILN_DUMP_CLIF").is_ok_and(|n| n == k.name) {
        eprintln!("{}", ctx.func.display());
    }
    module.clear_context(ctx);
    Ok(())
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

/// The Cranelift type holding a value of `d` in registers (float16 is computed in f32,
/// bool is 0 or 1 in an i8).
fn cl_ty(d: DType) -> Type {
    match d {
        DType::F32 | DType::F16 => types::F32,
        DType::I8 | DType::U8 | DType::Bool => types::I8,
        DType::I32 => types::I32,
        DType::I64 => types::I64,
    }
}

fn is_signed(d: DType) -> bool {
    matches!(d, DType::I8 | DType::I32 | DType::I64)
}

impl Cx<'_, '_> {
    /// Whether `e` may run unconditionally once its loads are guarded: no calls, no
    /// division that could report an error, no float16 loads, and every loaded buffer
    /// non-empty (so its first element is a safe address).
    fn guardable(&self, e: &Expr) -> bool {
        let mut ok = true;
        e.visit(&mut |x| match x {
            Expr::Call { .. } => ok = false,
            Expr::Load { buffer, .. } => {
                let fine = self
                    .env
                    .func
                    .buffer(*buffer)
                    .is_some_and(|b| b.dtype != DType::F16 && b.numel().is_some_and(|n| n > 0));
                ok &= fine || self.promoted[buffer.index()].is_some();
            }
            x if division_may_trap(x) => ok = false,
            _ => {}
        });
        ok
    }
}

/// How many stores `s` executes when every loop inside is fully unrolled, if every loop
/// inside has a constant extent of at most [`AUTO_UNROLL_EXTENT`] (or is unrolled
/// anyway), there is no allocation, and no call to an out-of-line intrinsic.
fn unrolled_stores(s: &Stmt) -> Option<i64> {
    match s {
        Stmt::Seq(v) => v
            .iter()
            .try_fold(0i64, |n, c| Some(n + unrolled_stores(c)?)),
        Stmt::For {
            extent, kind, body, ..
        } => {
            if *kind == ForKind::Parallel || *extent > AUTO_UNROLL_EXTENT.max(8) {
                return None;
            }
            // An f32x4 loop stores once per group of lanes.
            let n = if *kind == ForKind::Vectorized && extent % LANES == 0 {
                extent / LANES
            } else {
                (*extent).max(0)
            };
            Some(unrolled_stores(body)? * n)
        }
        Stmt::Store { value, .. } => {
            let mut calls = false;
            value.visit(&mut |x| calls |= matches!(x, Expr::Call { .. }));
            (!calls).then_some(1)
        }
        Stmt::If { then, else_, .. } => {
            let e = match else_ {
                Some(e) => unrolled_stores(e)?,
                None => 0,
            };
            Some(unrolled_stores(then)? + e)
        }
        Stmt::Let { body, .. } => unrolled_stores(body),
        Stmt::Allocate { .. } | Stmt::Barrier => None,
    }
}

/// Whether evaluating `e` can neither fault, report an error nor cost a call, so both
/// sides of a `select` over it may run.
fn speculatable(e: &Expr) -> bool {
    let mut ok = true;
    e.visit(&mut |x| match x {
        Expr::Load { .. } | Expr::Call { .. } => ok = false,
        x if division_may_trap(x) => ok = false,
        _ => {}
    });
    ok
}

/// A division or modulo whose divisor is not a positive constant (it may be zero, or
/// `INT_MIN / -1`): evaluating it where the source would not can trap.
fn division_may_trap(x: &Expr) -> bool {
    matches!(
        x,
        Expr::Binary {
            op: BinOp::Div | BinOp::FloorDiv | BinOp::FloorMod,
            rhs,
            ..
        } if !matches!(rhs.as_int(), Some(c) if c > 0)
    )
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

    fn stmt(&mut self, s: &Stmt) -> Result<()> {
        match s {
            Stmt::Seq(v) => v.iter().try_for_each(|c| self.stmt(c)),
            Stmt::For {
                var,
                min,
                extent,
                kind,
                body,
            } => {
                if *extent <= 0 {
                    return Ok(());
                }
                let d = self.var_dtype(*var)?;
                if !d.is_int() {
                    return Err(self.unsupported(format_args!("loop over a {d} variable")));
                }
                let unroll = *extent == 1
                    || self.unroll.contains(var)
                    || (*kind == ForKind::Unrolled && *extent <= UNROLL_LIMIT)
                    || (*kind != ForKind::Parallel
                        && *extent <= AUTO_UNROLL_EXTENT
                        && unrolled_stores(body).is_some_and(|n| n * extent <= AUTO_UNROLL_STORES));
                if *kind == ForKind::Vectorized {
                    let plan = (extent % LANES == 0)
                        .then(|| simd::plan(self.env.func, body, *var))
                        .flatten();
                    simd::note_loop(&self.env.func.name, *extent, plan.is_some());
                    if let Some(guards) = plan {
                        return self.vector_loop(*var, d, *min, *extent, unroll, body, &guards);
                    }
                }
                if unroll
                    && *kind != ForKind::Parallel
                    && self.interchange(*var, d, *min, *extent, body)?
                {
                    return Ok(());
                }
                match kind {
                    ForKind::Parallel if self.outline && *extent > 1 => {
                        self.parallel(*var, *min, *extent, body)
                    }
                    _ if unroll => {
                        for i in 0..*extent {
                            let v = self.iconst(cl_ty(d), min + i);
                            self.vars[var.index()] = Some((v, d));
                            self.consts[var.index()] = Some(min + i);
                            self.stmt(body)?;
                        }
                        self.vars[var.index()] = None;
                        self.consts[var.index()] = None;
                        Ok(())
                    }
                    _ => {
                        let lo = self.iconst(types::I64, *min);
                        let hi = self.iconst(types::I64, min + extent);
                        self.counted_loop(lo, hi, *var, d, body)
                    }
                }
            }
            Stmt::Store {
                buffer,
                indices,
                value,
            } => {
                let bd = self.buffer(*buffer)?.dtype;
                let (v, d) = self.expr(value)?;
                if d != bd {
                    return Err(Error::Internal(format!(
                        "@{}: store of {d} to a {bd} buffer",
                        self.env.func.name
                    )));
                }
                if let Some(r) = self.promoted_elem(*buffer, indices)? {
                    self.write_slot(r, v);
                    return Ok(());
                }
                let addr = self.address(*buffer, indices)?;
                let v = if d == DType::F16 {
                    let bits = self.host1(Host::F16Store, &[v]);
                    self.b.ins().ireduce(types::I16, bits)
                } else {
                    v
                };
                self.b.ins().store(MemFlagsData::trusted(), v, addr, 0);
                Ok(())
            }
            Stmt::Allocate { buffer, body } => self.allocate(*buffer, body),
            Stmt::If { cond, then, else_ } => {
                // A condition unrolling made constant: emit only the branch taken.
                if let Some(c) = semantics::const_bool(cond, self.env.func, &self.consts) {
                    let taken = if c { Some(&**then) } else { else_.as_deref() };
                    return taken.map_or(Ok(()), |s| self.stmt(s));
                }
                let (c, _) = self.expr(cond)?;
                let tb = self.b.create_block();
                let eb = self.b.create_block();
                let merge = self.b.create_block();
                self.b.ins().brif(c, tb, &[], eb, &[]);
                self.b.switch_to_block(tb);
                self.stmt(then)?;
                self.b.ins().jump(merge, &[]);
                self.b.switch_to_block(eb);
                if let Some(e) = else_ {
                    self.stmt(e)?;
                }
                self.b.ins().jump(merge, &[]);
                self.b.switch_to_block(merge);
                Ok(())
            }
            Stmt::Let { var, value, body } => {
                let (v, d) = self.expr(value)?;
                self.vars[var.index()] = Some((v, d));
                self.consts[var.index()] = if d.is_int() {
                    semantics::const_int(value, self.env.func, &self.consts).map(|(v, _)| v)
                } else {
                    None
                };
                self.stmt(body)?;
                self.vars[var.index()] = None;
                self.consts[var.index()] = None;
                Ok(())
            }
            Stmt::Barrier => Err(self.unsupported("a barrier (GPU block synchronization)")),
        }
    }

    // ---- f32x4 loops (module `simd`) ----

    /// A `vectorized` loop that `simd::plan` accepted, [`LANES`] iterations at a time.
    #[allow(clippy::too_many_arguments)]
    fn vector_loop(
        &mut self,
        var: VarId,
        d: DType,
        min: i64,
        extent: i64,
        unroll: bool,
        body: &Stmt,
        guards: &[&Expr],
    ) -> Result<()> {
        if unroll {
            for g in 0..extent / LANES {
                let base = min + g * LANES;
                let bv = self.iconst(types::I64, base);
                self.vector_group(var, d, bv, Some(base), body, guards)?;
            }
        } else {
            let lo = self.iconst(types::I64, min);
            let hi = self.iconst(types::I64, min + extent);
            let header = self.b.create_block();
            let body_b = self.b.create_block();
            let exit = self.b.create_block();
            let iv = self.b.append_block_param(header, types::I64);
            self.b.ins().jump(header, &[BlockArg::Value(lo)]);
            self.b.switch_to_block(header);
            let more = self.b.ins().icmp(IntCC::SignedLessThan, iv, hi);
            self.b.ins().brif(more, body_b, &[], exit, &[]);
            self.b.switch_to_block(body_b);
            self.vector_group(var, d, iv, None, body, guards)?;
            let next = self.b.ins().iadd_imm_s(iv, LANES);
            self.b.ins().jump(header, &[BlockArg::Value(next)]);
            self.b.switch_to_block(exit);
        }
        self.vars[var.index()] = None;
        self.consts[var.index()] = None;
        Ok(())
    }

    /// An unrolled loop `jvar` whose body is a guarded `vectorized` loop over promoted
    /// accumulators (a register-tiled conv2d's `j.inner` around `l.inner`): runs group by
    /// group, every `jvar` iteration of a group under one guard check, so the branch and
    /// the guard and data-address arithmetic are shared. Returns `false`, emitting
    /// nothing, when the loop does not have that form.
    fn interchange(
        &mut self,
        jvar: VarId,
        jd: DType,
        jmin: i64,
        jext: i64,
        body: &Stmt,
    ) -> Result<bool> {
        let Stmt::For {
            var,
            min,
            extent,
            kind: ForKind::Vectorized,
            body: inner,
        } = body
        else {
            return Ok(false);
        };
        let (var, min, extent) = (*var, *min, *extent);
        if extent <= 0 || extent % LANES != 0 || jext < 1 {
            return Ok(false);
        }
        if !(self.unroll.contains(&var) || extent <= AUTO_UNROLL_EXTENT) {
            return Ok(false);
        }
        let Some(guards) = simd::plan(self.env.func, inner, var) else {
            return Ok(false);
        };
        if guards.is_empty() {
            return Ok(false);
        }
        // Every store must go to a distinct f32x4 accumulator for every (jvar, group),
        // and the body must load no other buffer it stores.
        let mut stores = vec![];
        inner.visit(&mut |s| {
            if let Stmt::Store {
                buffer, indices, ..
            } = s
            {
                stores.push((*buffer, indices.clone()));
            }
        });
        let mut ok = true;
        inner.visit(&mut |s| {
            if let Stmt::Store { value, .. } = s {
                value.visit(&mut |x| {
                    if let Expr::Load { buffer, indices } = x {
                        ok &= stores.iter().all(|(b, ix)| b != buffer || ix == indices);
                    }
                });
            }
        });
        if !ok {
            return Ok(false);
        }
        let mut seen = BTreeSet::new();
        for j in 0..jext {
            self.consts[jvar.index()] = Some(jmin + j);
            for g in 0..extent / LANES {
                self.consts[var.index()] = Some(min + g * LANES);
                for (b, ix) in &stores {
                    match self.promoted_group(*b, ix, var) {
                        Some(Some(r)) if seen.insert(r.as_u32()) => {}
                        _ => ok = false,
                    }
                }
            }
        }
        self.consts[jvar.index()] = None;
        self.consts[var.index()] = None;
        if !ok {
            return Ok(false);
        }
        let vd = self.var_dtype(var)?;
        simd::note_loop(&self.env.func.name, extent, true);
        for g in 0..extent / LANES {
            let base = min + g * LANES;
            let bv = self.iconst(types::I64, base);
            let mut ok: Option<Value> = None;
            for j in 0..jext {
                self.bind_const(jvar, jd, jmin + j);
                for lane in [0, LANES - 1] {
                    self.set_lane(var, vd, bv, Some(base), lane);
                    for c in &guards {
                        let (c, _) = self.expr(c)?;
                        ok = Some(match ok {
                            Some(o) => self.b.ins().band(o, c),
                            None => c,
                        });
                    }
                }
            }
            simd::stats::SHARED_GUARD_GROUPS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let merge = self.b.create_block();
            let vb = self.b.create_block();
            let sb = self.b.create_block();
            self.b
                .ins()
                .brif(ok.expect("guards checked"), vb, &[], sb, &[]);
            self.b.switch_to_block(sb);
            for j in 0..jext {
                self.bind_const(jvar, jd, jmin + j);
                self.scalar_lanes(var, vd, bv, Some(base), inner)?;
            }
            self.b.ins().jump(merge, &[]);
            self.b.switch_to_block(vb);
            for j in 0..jext {
                self.bind_const(jvar, jd, jmin + j);
                simd::note_group(true);
                self.set_lane(var, vd, bv, Some(base), 0);
                self.vector_body(var, inner)?;
            }
            self.b.ins().jump(merge, &[]);
            self.b.switch_to_block(merge);
        }
        for v in [jvar, var] {
            self.vars[v.index()] = None;
            self.consts[v.index()] = None;
        }
        Ok(true)
    }

    fn bind_const(&mut self, v: VarId, d: DType, c: i64) {
        let x = self.iconst(cl_ty(d), c);
        self.vars[v.index()] = Some((x, d));
        self.consts[v.index()] = Some(c);
    }

    /// Binds `var` to lane `i` of the group starting at `base`.
    fn set_lane(&mut self, var: VarId, d: DType, base: Value, cbase: Option<i64>, i: i64) {
        let v = if i == 0 {
            base
        } else {
            self.b.ins().iadd_imm_s(base, i)
        };
        let v = match cl_ty(d) {
            types::I64 => v,
            t => self.b.ins().ireduce(t, v),
        };
        self.vars[var.index()] = Some((v, d));
        self.consts[var.index()] = cbase.map(|c| c + i);
    }

    /// One group of [`LANES`] iterations: vector code when every guard holds for the
    /// first and last lane, scalar code otherwise.
    fn vector_group(
        &mut self,
        var: VarId,
        d: DType,
        base: Value,
        cbase: Option<i64>,
        body: &Stmt,
        guards: &[&Expr],
    ) -> Result<()> {
        self.set_lane(var, d, base, cbase, 0);
        let mut aligned = true;
        body.visit(&mut |s| {
            let mut check = |buffer: BufferId, indices: &[Expr]| {
                if self.promoted[buffer.index()].is_some()
                    && indices.iter().any(|i| simd::mentions(i, var))
                {
                    aligned &= matches!(self.promoted_group(buffer, indices, var), Some(Some(_)));
                }
            };
            if let Stmt::Store {
                buffer,
                indices,
                value,
            } = s
            {
                check(*buffer, indices);
                value.visit(&mut |x| {
                    if let Expr::Load { buffer, indices } = x {
                        check(*buffer, indices);
                    }
                });
            }
        });
        simd::note_group(aligned);
        if !aligned {
            return self.scalar_lanes(var, d, base, cbase, body);
        }
        let merge = self.b.create_block();
        if !guards.is_empty() {
            let mut ok: Option<Value> = None;
            for lane in [0, LANES - 1] {
                self.set_lane(var, d, base, cbase, lane);
                for g in guards {
                    let (c, _) = self.expr(g)?;
                    ok = Some(match ok {
                        Some(o) => self.b.ins().band(o, c),
                        None => c,
                    });
                }
            }
            let vb = self.b.create_block();
            let sb = self.b.create_block();
            self.b
                .ins()
                .brif(ok.expect("guards checked"), vb, &[], sb, &[]);
            self.b.switch_to_block(sb);
            self.scalar_lanes(var, d, base, cbase, body)?;
            self.b.ins().jump(merge, &[]);
            self.b.switch_to_block(vb);
            self.set_lane(var, d, base, cbase, 0);
        }
        self.vector_body(var, body)?;
        self.b.ins().jump(merge, &[]);
        self.b.switch_to_block(merge);
        Ok(())
    }

    fn scalar_lanes(
        &mut self,
        var: VarId,
        d: DType,
        base: Value,
        cbase: Option<i64>,
        body: &Stmt,
    ) -> Result<()> {
        for i in 0..LANES {
            self.set_lane(var, d, base, cbase, i);
            self.stmt(body)?;
        }
        Ok(())
    }

    fn vector_body(&mut self, var: VarId, s: &Stmt) -> Result<()> {
        match s {
            Stmt::Seq(v) => v.iter().try_for_each(|c| self.vector_body(var, c)),
            Stmt::Store {
                buffer,
                indices,
                value,
            } => {
                let x = self.vexpr(var, value)?;
                if let Some(g) = self.promoted_group(*buffer, indices, var) {
                    let r = g.ok_or_else(|| Error::Internal("unaligned vector group".into()))?;
                    self.b.def_var(r, x);
                    return Ok(());
                }
                let addr = self.address(*buffer, indices)?;
                let flags = MemFlagsData::new().with_notrap();
                match self.lane_stride(*buffer, indices, var)? {
                    1 => {
                        self.b.ins().store(flags, x, addr, 0);
                    }
                    s => {
                        // Scatter, lane by lane.
                        for l in 0..LANES {
                            let e = self.b.ins().extractlane(x, l as u8);
                            self.b.ins().store(flags, e, addr, (l * s * 4) as i32);
                        }
                    }
                }
                Ok(())
            }
            _ => Err(Error::Internal("non-store in a vector body".into())),
        }
    }

    /// The element stride in `var` of f32 access `buffer[indices]` (checked by
    /// `simd::plan`).
    fn lane_stride(&self, buffer: BufferId, indices: &[Expr], var: VarId) -> Result<i64> {
        let b = self.buffer(buffer)?;
        simd::flat_stride(&b.shape, indices, var)
            .ok_or_else(|| Error::Internal("vector access without a constant stride".into()))
    }

    /// The f32x4 value of `e` over the current group (lane 0 bound to `var`).
    fn vexpr(&mut self, var: VarId, e: &Expr) -> Result<Value> {
        if !simd::mentions(e, var) {
            let (x, _) = self.expr(e)?;
            return Ok(self.b.ins().splat(types::F32X4, x));
        }
        Ok(match e {
            Expr::Load { buffer, indices } => {
                if let Some(g) = self.promoted_group(*buffer, indices, var) {
                    let r = g.ok_or_else(|| Error::Internal("unaligned vector group".into()))?;
                    return Ok(self.b.use_var(r));
                }
                let addr = self.address(*buffer, indices)?;
                let flags = MemFlagsData::new().with_notrap();
                match self.lane_stride(*buffer, indices, var)? {
                    1 => self.b.ins().load(types::F32X4, flags, addr, 0),
                    s => {
                        // Gather: four scalar loads at constant offsets.
                        let x0 = self.b.ins().load(types::F32, flags, addr, 0);
                        let mut v = self.b.ins().scalar_to_vector(types::F32X4, x0);
                        for l in 1..LANES {
                            let x = self
                                .b
                                .ins()
                                .load(types::F32, flags, addr, (l * s * 4) as i32);
                            v = self.b.ins().insertlane(v, x, l as u8);
                        }
                        v
                    }
                }
            }
            Expr::Binary { op, lhs, rhs } => {
                if self.env.fma && *op == BinOp::Add {
                    let mul = |x: &Expr| match x {
                        Expr::Binary {
                            op: BinOp::Mul,
                            lhs,
                            rhs,
                        } => Some((lhs.as_ref().clone(), rhs.as_ref().clone())),
                        _ => None,
                    };
                    let fused = match (mul(lhs), mul(rhs)) {
                        (Some((x, y)), _) => Some((x, y, rhs)),
                        (None, Some((x, y))) => Some((x, y, lhs)),
                        _ => None,
                    };
                    if let Some((x, y, c)) = fused {
                        let x = self.vexpr(var, &x)?;
                        let y = self.vexpr(var, &y)?;
                        let c = self.vexpr(var, c)?;
                        return Ok(self.b.ins().fma(x, y, c));
                    }
                }
                let a = self.vexpr(var, lhs)?;
                let b = self.vexpr(var, rhs)?;
                match op {
                    BinOp::Add => self.b.ins().fadd(a, b),
                    BinOp::Sub => self.b.ins().fsub(a, b),
                    BinOp::Mul => self.b.ins().fmul(a, b),
                    BinOp::Div => self.b.ins().fdiv(a, b),
                    // IEEE 754-2019 maximum/minimum, as scalar code (the loop IR's
                    // contract): NaN propagates, -0 < +0.
                    BinOp::Min => self.b.ins().fmin(a, b),
                    BinOp::Max => self.b.ins().fmax(a, b),
                    _ => return Err(Error::Internal(format!("{op:?} in a vector body"))),
                }
            }
            Expr::Select { cond, then, else_ } => match simd::lanewise_cmp(self.env.func, cond) {
                Some((op, l, r)) => {
                    let a = self.vexpr(var, l)?;
                    let b = self.vexpr(var, r)?;
                    let cc = match op {
                        BinOp::Lt => FloatCC::LessThan,
                        BinOp::Le => FloatCC::LessThanOrEqual,
                        BinOp::Gt => FloatCC::GreaterThan,
                        _ => FloatCC::GreaterThanOrEqual,
                    };
                    let m = self.b.ins().fcmp(cc, a, b);
                    let m = self.b.ins().bitcast(types::F32X4, MemFlagsData::new(), m);
                    let t = self.vexpr(var, then)?;
                    let e = self.vexpr(var, else_)?;
                    self.b.ins().bitselect(m, t, e)
                }
                // A guard, checked for the whole group.
                None => self.vexpr(var, then)?,
            },
            _ => {
                return Err(Error::Internal(
                    "unexpected expression in a vector body".into(),
                ));
            }
        })
    }

    fn buffer(&self, id: BufferId) -> Result<&tir::Buffer> {
        self.env
            .func
            .buffer(id)
            .ok_or_else(|| Error::Internal(format!("{id} is not in the buffer arena")))
    }

    /// `for var in lo..hi` (i64 bounds) around `body`.
    fn counted_loop(
        &mut self,
        lo: Value,
        hi: Value,
        var: VarId,
        d: DType,
        body: &Stmt,
    ) -> Result<()> {
        let header = self.b.create_block();
        let body_b = self.b.create_block();
        let exit = self.b.create_block();
        let iv = self.b.append_block_param(header, types::I64);
        self.b.ins().jump(header, &[BlockArg::Value(lo)]);
        self.b.switch_to_block(header);
        // Test hook (crate::testing, only with the `testing` feature): the planted
        // off-by-one stops a step early.
        #[cfg(feature = "testing")]
        let hi = if crate::testing::planted(crate::testing::Bug::LoopBoundOffByOne) {
            self.b.ins().iadd_imm_s(hi, -1)
        } else {
            hi
        };
        let more = self.b.ins().icmp(IntCC::SignedLessThan, iv, hi);
        self.b.ins().brif(more, body_b, &[], exit, &[]);
        self.b.switch_to_block(body_b);
        let v = match cl_ty(d) {
            types::I64 => iv,
            t => self.b.ins().ireduce(t, iv),
        };
        self.vars[var.index()] = Some((v, d));
        self.stmt(body)?;
        self.vars[var.index()] = None;
        let next = self.b.ins().iadd_imm_s(iv, 1);
        self.b.ins().jump(header, &[BlockArg::Value(next)]);
        self.b.switch_to_block(exit);
        Ok(())
    }

    /// Outlines a parallel loop and runs it on the pool.
    fn parallel(&mut self, var: VarId, min: i64, extent: i64, body: &Stmt) -> Result<()> {
        let idx = self.pending.len();
        let name = format!("{}_par{idx}", self.env.name);
        let id = self
            .module
            .declare_function(&name, Linkage::Local, self.env.body_sig)
            .map_err(internal)?;
        let vars: Vec<(VarId, DType)> = self
            .vars
            .iter()
            .enumerate()
            .filter_map(|(i, v)| v.map(|(_, d)| (VarId(i as u32), d)))
            .collect();
        let bufs: Vec<BufferId> = (0..self.bufs.len())
            .map(|i| BufferId(i as u32))
            .filter(|&b| self.bufs[b.index()].is_some() && !self.env.func.params.contains(&b))
            .collect();
        let slots = (vars.len() + bufs.len()).max(1);
        self.stack_bytes += slots * 8;
        if self.stack_bytes > STACK_BUDGET {
            return Err(self.unsupported(format_args!(
                "parallel loops capturing {} values in all (more than the stack budget of \
                 {STACK_BUDGET} bytes)",
                self.stack_bytes / 8
            )));
        }
        let ss = self.b.create_sized_stack_slot(StackSlotData::new(
            StackSlotKind::ExplicitSlot,
            (slots * 8) as u32,
            3,
        ));
        let env = self.b.ins().stack_addr(self.env.ptr, ss, 0);
        for (k, &(v, _)) in vars.iter().enumerate() {
            let x = self.vars[v.index()].expect("captured variable is bound").0;
            self.b
                .ins()
                .store(MemFlagsData::trusted(), x, env, (k * 8) as i32);
        }
        for (k, &bf) in bufs.iter().enumerate() {
            let x = self.bufs[bf.index()].expect("captured buffer is bound");
            self.b.ins().store(
                MemFlagsData::trusted(),
                x,
                env,
                ((vars.len() + k) * 8) as i32,
            );
        }
        let r = self.module.declare_func_in_func(id, self.b.func);
        let fptr = self.b.ins().func_addr(self.env.ptr, r);
        let lo = self.iconst(types::I64, min);
        let n = self.iconst(types::I64, extent);
        let (ctx, args) = (self.ctx, self.args);
        self.host(Host::ParallelFor, &[ctx, fptr, args, env, lo, n]);
        self.pending.push(Outlined {
            id,
            var,
            body: body.clone(),
            vars,
            bufs,
        });
        Ok(())
    }

    fn allocate(&mut self, buffer: BufferId, body: &Stmt) -> Result<()> {
        let b = self.buffer(buffer)?;
        if b.scope == Scope::Global {
            return Err(self.unsupported(format_args!("allocation of global buffer {}", b.name)));
        }
        let bytes = b
            .numel()
            .and_then(|n| n.checked_mul(b.dtype.size_bytes()))
            .filter(|&n| n <= 1 << 40)
            .ok_or_else(|| {
                self.unsupported(format_args!(
                    "local buffer {} of shape {:?}",
                    b.name, b.shape
                ))
            })?;
        let slot_bytes = bytes.max(1).div_ceil(16) * 16;
        let plan = promote::plan(self.env.func, buffer, body, &self.consts, self.outline);
        if let Some(unroll) = plan {
            let (n, d) = (b.numel().unwrap_or(0), b.dtype);
            let lanes = (d == DType::F32)
                .then(|| simd::lane_axis(self.env.func, body, buffer))
                .flatten();
            let (ty, count) = if lanes.is_some() {
                (types::F32X4, n / LANES as usize)
            } else {
                (cl_ty(d), n)
            };
            let mut zero = self.constant(0.0, 0, d);
            if lanes.is_some() {
                zero = self.b.ins().splat(types::F32X4, zero);
            }
            let vars: Vec<Variable> = (0..count)
                .map(|_| {
                    let r = self.b.declare_var(ty);
                    self.b.def_var(r, zero);
                    r
                })
                .collect();
            let regs = match lanes {
                Some(axis) => Regs::Lanes(vars, axis),
                None => Regs::Scalar(vars),
            };
            let added: Vec<VarId> = unroll
                .into_iter()
                .filter(|v| self.unroll.insert(*v))
                .collect();
            self.promoted[buffer.index()] = Some(regs);
            self.stmt(body)?;
            self.promoted[buffer.index()] = None;
            for v in added {
                self.unroll.remove(&v);
            }
            return Ok(());
        }
        if slot_bytes <= STACK_LIMIT && self.stack_bytes + slot_bytes <= STACK_BUDGET {
            self.stack_bytes += slot_bytes;
            let ss = self.b.create_sized_stack_slot(StackSlotData::new(
                StackSlotKind::ExplicitSlot,
                slot_bytes as u32,
                4,
            ));
            let base = self.b.ins().stack_addr(self.env.ptr, ss, 0);
            if slot_bytes <= INLINE_ZERO_LIMIT {
                let z = self.iconst(types::I64, 0);
                for off in (0..slot_bytes).step_by(8) {
                    self.b
                        .ins()
                        .store(MemFlagsData::trusted(), z, base, off as i32);
                }
            } else {
                let n = self.iconst(types::I64, slot_bytes as i64);
                self.host(Host::Zero, &[base, n]);
            }
            self.bufs[buffer.index()] = Some(base);
            self.stmt(body)?;
        } else {
            let n = self.iconst(types::I64, bytes as i64);
            let base = self.host1(Host::Alloc, &[n]);
            let null = self.b.ins().icmp_imm_s(IntCC::Equal, base, 0);
            let oom = self.b.create_block();
            let run = self.b.create_block();
            let done = self.b.create_block();
            self.b.set_cold_block(oom);
            self.b.ins().brif(null, oom, &[], run, &[]);
            self.b.switch_to_block(oom);
            let c = self.iconst(types::I32, status::OUT_OF_MEMORY as i64);
            let ctx = self.ctx;
            self.host(Host::Fail, &[ctx, c]);
            self.b.ins().jump(done, &[]);
            self.b.switch_to_block(run);
            self.bufs[buffer.index()] = Some(base);
            self.stmt(body)?;
            self.host(Host::Free, &[base, n]);
            self.b.ins().jump(done, &[]);
            self.b.switch_to_block(done);
        }
        self.bufs[buffer.index()] = None;
        Ok(())
    }

    /// The address of `buffer[indices]`, flattened row-major.
    fn address(&mut self, buffer: BufferId, indices: &[Expr]) -> Result<Value> {
        let b = self.buffer(buffer)?.clone();
        if indices.len() != b.shape.len() {
            return Err(Error::Internal(format!(
                "@{}: {} indices for buffer {} of rank {}",
                self.env.func.name,
                indices.len(),
                b.name,
                b.shape.len()
            )));
        }
        let base = self.bufs[buffer.index()].ok_or_else(|| {
            Error::Internal(format!(
                "@{}: buffer {} used outside its scope",
                self.env.func.name, b.name
            ))
        })?;
        // Each index is split into its constant terms (folded into one byte offset, an
        // addressing-mode displacement) and the rest (shared by the unrolled copies of
        // an access, which differ in constant terms only).
        let mut flat: Option<Value> = None;
        let mut off: i64 = 0;
        let mut row: i64 = 1;
        for (ix, &ext) in indices.iter().zip(&b.shape).rev() {
            let mut terms = vec![];
            let mut c = 0i64;
            self.split_affine(ix, 1, &mut terms, &mut c);
            off = off.wrapping_add(c.wrapping_mul(row));
            for (t, k) in terms {
                let (v, d) = self.expr(t)?;
                if !d.is_int() {
                    return Err(Error::Internal(format!(
                        "@{}: index of type {d}",
                        self.env.func.name
                    )));
                }
                let v = self.to_i64(v, d);
                let k = k.wrapping_mul(row);
                let v = if k == 1 {
                    v
                } else {
                    self.b.ins().imul_imm_s(v, k)
                };
                flat = Some(match flat {
                    None => v,
                    Some(acc) => self.b.ins().iadd(acc, v),
                });
            }
            row = row.wrapping_mul(ext as i64);
        }
        let size = b.dtype.size_bytes() as i64;
        let mut addr = match flat {
            None => base,
            Some(f) => {
                let off = self.b.ins().imul_imm_s(f, size);
                self.b.ins().iadd(base, off)
            }
        };
        if off != 0 {
            addr = self.b.ins().iadd_imm_s(addr, off.wrapping_mul(size));
        }
        Ok(match self.guard {
            Some(g) => self.b.ins().select(g, addr, base),
            None => addr,
        })
    }

    /// Splits `k * e` (integer) into the non-constant terms of its top-level sums
    /// and constant multiples, each with its factor, and the sum `c` of its constant
    /// ones.
    fn split_affine<'e>(&self, e: &'e Expr, k: i64, terms: &mut Vec<(&'e Expr, i64)>, c: &mut i64) {
        if let Some(x) = semantics::const_int(e, self.env.func, &self.consts).map(|(v, _)| v) {
            *c = c.wrapping_add(k.wrapping_mul(x));
            return;
        }
        match e {
            Expr::Binary { op, lhs, rhs } => match (op, lhs.as_int(), rhs.as_int()) {
                (BinOp::Add, _, _) => {
                    self.split_affine(lhs, k, terms, c);
                    self.split_affine(rhs, k, terms, c);
                }
                (BinOp::Sub, _, _) => {
                    self.split_affine(lhs, k, terms, c);
                    self.split_affine(rhs, k.wrapping_neg(), terms, c);
                }
                (BinOp::Mul, _, Some(m)) => self.split_affine(lhs, k.wrapping_mul(m), terms, c),
                (BinOp::Mul, Some(m), _) => self.split_affine(rhs, k.wrapping_mul(m), terms, c),
                _ => terms.push((e, k)),
            },
            _ => terms.push((e, k)),
        }
    }

    /// The variable holding `buffer[indices]` if the buffer is promoted to registers.
    fn promoted_elem(&mut self, buffer: BufferId, indices: &[Expr]) -> Result<Option<Slot>> {
        let Some(regs) = &self.promoted[buffer.index()] else {
            return Ok(None);
        };
        let b = self.buffer(buffer)?;
        let mut at = vec![];
        for (ix, &ext) in indices.iter().zip(&b.shape) {
            let i = semantics::const_int(ix, self.env.func, &self.consts)
                .map(|(v, _)| v)
                .filter(|&i| i >= 0 && i < ext as i64)
                .ok_or_else(|| {
                    Error::Internal(format!(
                        "@{}: index of promoted buffer {} is not a constant in bounds",
                        self.env.func.name, b.name
                    ))
                })?;
            at.push(i);
        }
        Ok(match regs {
            Regs::Scalar(v) => v
                .get(lane_flat(&b.shape, &at, None) as usize)
                .map(|&r| Slot::Scalar(r)),
            Regs::Lanes(v, axis) => {
                let k = lane_flat(&b.shape, &at, Some(*axis)) as usize;
                v.get(k / LANES as usize)
                    .map(|&r| Slot::Lane(r, (k % LANES as usize) as u8))
            }
        })
    }

    fn read_slot(&mut self, s: Slot) -> Value {
        match s {
            Slot::Scalar(r) => self.b.use_var(r),
            Slot::Lane(r, l) => {
                let v = self.b.use_var(r);
                self.b.ins().extractlane(v, l)
            }
        }
    }

    fn write_slot(&mut self, s: Slot, x: Value) {
        match s {
            Slot::Scalar(r) => self.b.def_var(r, x),
            Slot::Lane(r, l) => {
                let v = self.b.use_var(r);
                let v = self.b.ins().insertlane(v, x, l);
                self.b.def_var(r, v);
            }
        }
    }

    /// The f32x4 variable holding lanes `var = lane0 .. lane0 + 3` of a promoted access
    /// (advancing along the buffer's lane axis with `var`), if the buffer is held as
    /// vectors and the group is aligned.
    fn promoted_group(
        &self,
        buffer: BufferId,
        indices: &[Expr],
        var: VarId,
    ) -> Option<Option<Variable>> {
        let regs = self.promoted[buffer.index()].as_ref()?;
        let Regs::Lanes(v, axis) = regs else {
            return Some(None);
        };
        let b = self.env.func.buffer(buffer)?;
        if simd::axis_of(indices, var) != Some(*axis) {
            return Some(None);
        }
        let mut at = vec![];
        for (ix, &ext) in indices.iter().zip(&b.shape) {
            let i = semantics::const_int(ix, self.env.func, &self.consts)
                .map(|(v, _)| v)
                .filter(|&i| i >= 0 && i < ext as i64);
            let Some(i) = i else {
                return Some(None);
            };
            at.push(i);
        }
        if at[*axis] % LANES != 0 || at[*axis] + LANES > b.shape[*axis] as i64 {
            return Some(None);
        }
        let flat = lane_flat(&b.shape, &at, Some(*axis));
        Some(v.get((flat / LANES) as usize).copied())
    }

    fn to_i64(&mut self, v: Value, d: DType) -> Value {
        match cl_ty(d) {
            types::I64 => v,
            _ if is_signed(d) => self.b.ins().sextend(types::I64, v),
            _ => self.b.ins().uextend(types::I64, v),
        }
    }

    // ---- expressions ----

    fn expr(&mut self, e: &Expr) -> Result<(Value, DType)> {
        Ok(match e {
            Expr::Int { value, dtype } => {
                let d = *dtype;
                (self.constant(*value as f64, *value, d), d)
            }
            Expr::Float { value, dtype } => {
                let d = *dtype;
                (self.constant(*value, *value as i64, d), d)
            }
            Expr::Bool(b) => (self.iconst(types::I8, *b as i64), DType::Bool),
            Expr::Var(v) => self.vars.get(v.index()).copied().flatten().ok_or_else(|| {
                Error::Internal(format!(
                    "@{}: {v} used outside its scope",
                    self.env.func.name
                ))
            })?,
            Expr::Load { buffer, indices } => {
                let d = self.buffer(*buffer)?.dtype;
                if let Some(r) = self.promoted_elem(*buffer, indices)? {
                    return Ok((self.read_slot(r), d));
                }
                let addr = self.address(*buffer, indices)?;
                let v = if d == DType::F16 {
                    let bits = self
                        .b
                        .ins()
                        .load(types::I16, MemFlagsData::trusted(), addr, 0);
                    let bits = self.b.ins().uextend(types::I32, bits);
                    self.host1(Host::F16Load, &[bits])
                } else {
                    self.b
                        .ins()
                        .load(cl_ty(d), MemFlagsData::trusted(), addr, 0)
                };
                (v, d)
            }
            Expr::Binary { op, lhs, rhs } => {
                let (a, d) = self.expr(lhs)?;
                let (b, d2) = self.expr(rhs)?;
                if d != d2 {
                    return Err(Error::Internal(format!(
                        "@{}: operands of {op:?} are {d} and {d2}",
                        self.env.func.name
                    )));
                }
                self.binary(*op, d, a, b, rhs.as_int())?
            }
            Expr::Not(x) => {
                let (v, d) = self.expr(x)?;
                let r = if d.is_float() {
                    let z = self.b.ins().f32const(0.0);
                    self.b.ins().fcmp(FloatCC::Equal, v, z)
                } else if d.is_bool() {
                    self.b.ins().bxor_imm_s(v, 1)
                } else {
                    self.b.ins().icmp_imm_s(IntCC::Equal, v, 0)
                };
                (r, DType::Bool)
            }
            Expr::Select { cond, then, else_ } => self.select(cond, then, else_)?,
            Expr::Cast { to, value } => {
                let (v, d) = self.expr(value)?;
                (self.cast(v, d, *to), *to)
            }
            Expr::Call { intrinsic, args } => self.call(*intrinsic, args)?,
            Expr::Ramp { .. } => return Err(self.unsupported("vector expression `ramp`")),
            Expr::Broadcast { .. } => return Err(self.unsupported("vector expression `broadcast`")),
        })
    }

    /// An immediate of dtype `d` (`f` for floats, `i` for integers).
    fn constant(&mut self, f: f64, i: i64, d: DType) -> Value {
        match d {
            DType::F32 => self.b.ins().f32const(f as f32),
            DType::F16 => {
                let h = semantics::f16_value(semantics::f16_bits(f as f32));
                self.b.ins().f32const(h)
            }
            DType::Bool => self.iconst(types::I8, (i != 0 || f != 0.0) as i64),
            _ => self.iconst(cl_ty(d), i),
        }
    }

    /// Rounds an f32 value to float16 when `d` is float16.
    fn round(&mut self, v: Value, d: DType) -> Value {
        if d == DType::F16 {
            self.host1(Host::F16Round, &[v])
        } else {
            v
        }
    }

    fn select(&mut self, cond: &Expr, then: &Expr, else_: &Expr) -> Result<(Value, DType)> {
        let (c, _) = self.expr(cond)?;
        if speculatable(then) && speculatable(else_) {
            let (a, d) = self.expr(then)?;
            let (b, _) = self.expr(else_)?;
            return Ok((self.b.ins().select(c, a, b), d));
        }
        if self.guardable(then) && self.guardable(else_) {
            // Branch-free: each side's loads read a safe address unless its side is
            // taken (a padded conv2d load is a compare and a `select`, not a branch).
            let outer = self.guard;
            let not_c = self.b.ins().bxor_imm_s(c, 1);
            let (gt, ge) = match outer {
                Some(o) => (self.b.ins().band(o, c), self.b.ins().band(o, not_c)),
                None => (c, not_c),
            };
            self.guard = Some(gt);
            let a = self.expr(then);
            self.guard = Some(ge);
            let e = self.expr(else_);
            self.guard = outer;
            let ((a, d), (e, _)) = (a?, e?);
            return Ok((self.b.ins().select(c, a, e), d));
        }
        let tb = self.b.create_block();
        let eb = self.b.create_block();
        let merge = self.b.create_block();
        self.b.ins().brif(c, tb, &[], eb, &[]);
        self.b.switch_to_block(tb);
        let (a, d) = self.expr(then)?;
        let r = self.b.append_block_param(merge, cl_ty(d));
        self.b.ins().jump(merge, &[BlockArg::Value(a)]);
        self.b.switch_to_block(eb);
        let (bv, d2) = self.expr(else_)?;
        if d2 != d {
            return Err(Error::Internal(format!(
                "@{}: select of {d} and {d2}",
                self.env.func.name
            )));
        }
        self.b.ins().jump(merge, &[BlockArg::Value(bv)]);
        self.b.switch_to_block(merge);
        Ok((r, d))
    }

    fn binary(
        &mut self,
        op: BinOp,
        d: DType,
        a: Value,
        b: Value,
        rhs_const: Option<i64>,
    ) -> Result<(Value, DType)> {
        use BinOp::*;
        if op.is_comparison() {
            let r = if d.is_float() {
                let cc = match op {
                    Eq => FloatCC::Equal,
                    Ne => FloatCC::NotEqual,
                    Lt => FloatCC::LessThan,
                    Le => FloatCC::LessThanOrEqual,
                    Gt => FloatCC::GreaterThan,
                    _ => FloatCC::GreaterThanOrEqual,
                };
                self.b.ins().fcmp(cc, a, b)
            } else {
                let s = is_signed(d);
                let cc = match op {
                    Eq => IntCC::Equal,
                    Ne => IntCC::NotEqual,
                    Lt if s => IntCC::SignedLessThan,
                    Le if s => IntCC::SignedLessThanOrEqual,
                    Gt if s => IntCC::SignedGreaterThan,
                    Ge if s => IntCC::SignedGreaterThanOrEqual,
                    Lt => IntCC::UnsignedLessThan,
                    Le => IntCC::UnsignedLessThanOrEqual,
                    Gt => IntCC::UnsignedGreaterThan,
                    _ => IntCC::UnsignedGreaterThanOrEqual,
                };
                self.b.ins().icmp(cc, a, b)
            };
            return Ok((r, DType::Bool));
        }
        if d.is_bool() {
            return Ok((
                match op {
                    And | Min => self.b.ins().band(a, b),
                    Or | Max => self.b.ins().bor(a, b),
                    _ => return Err(self.unsupported(format_args!("{op:?} on bool"))),
                },
                d,
            ));
        }
        if d.is_float() {
            let r = match op {
                Add => self.b.ins().fadd(a, b),
                Sub => self.b.ins().fsub(a, b),
                Mul => self.b.ins().fmul(a, b),
                Div => self.b.ins().fdiv(a, b),
                // Cranelift's fmin/fmax are IEEE 754-2019 minimum/maximum (NaN
                // propagates, -0 < +0): the loop IR's contract for `min`/`max`.
                Min => self.b.ins().fmin(a, b),
                Max => self.b.ins().fmax(a, b),
                _ => return Err(self.unsupported(format_args!("{op:?} on {d}"))),
            };
            return Ok((self.round(r, d), d));
        }
        let s = is_signed(d);
        let r = match op {
            Add => self.b.ins().iadd(a, b),
            Sub => self.b.ins().isub(a, b),
            Mul if cl_ty(d) == types::I8 => {
                let x = self.b.ins().uextend(types::I32, a);
                let y = self.b.ins().uextend(types::I32, b);
                let m = self.b.ins().imul(x, y);
                self.b.ins().ireduce(types::I8, m)
            }
            Mul => self.b.ins().imul(a, b),
            Min if s => self.b.ins().smin(a, b),
            Max if s => self.b.ins().smax(a, b),
            Min => self.b.ins().umin(a, b),
            Max => self.b.ins().umax(a, b),
            Div | FloorDiv | FloorMod => self.int_div(op, d, a, b, rhs_const),
            And | Or => return Err(self.unsupported(format_args!("{op:?} on {d}"))),
            _ => unreachable!("comparisons handled above"),
        };
        Ok((r, d))
    }

    /// Integer `/` (truncating), floordiv or floormod, without traps: a zero divisor
    /// reports [`status::DIV_ZERO`] and divides by one, `MIN / -1` wraps.
    fn int_div(
        &mut self,
        op: BinOp,
        d: DType,
        a: Value,
        b: Value,
        rhs_const: Option<i64>,
    ) -> Value {
        let s = is_signed(d);
        let narrow = cl_ty(d) == types::I8;
        let (x, y, ty) = if narrow {
            let ext = |cx: &mut Self, v| {
                if s {
                    cx.b.ins().sextend(types::I32, v)
                } else {
                    cx.b.ins().uextend(types::I32, v)
                }
            };
            (ext(self, a), ext(self, b), types::I32)
        } else {
            (a, b, cl_ty(d))
        };
        let c = rhs_const.map(|c| semantics::wrap_int(c, d));
        let r = match c {
            Some(c) if c > 0 && c.count_ones() == 1 && s && op != BinOp::Div => {
                let k = c.trailing_zeros() as i64;
                if op == BinOp::FloorDiv {
                    self.b.ins().sshr_imm_s(x, k)
                } else {
                    self.b.ins().band_imm_s(x, c - 1)
                }
            }
            Some(c) if c != 0 && (c != -1 || !s) => self.div_rem(op, s, x, y),
            _ => {
                let zero = self.b.ins().icmp_imm_s(IntCC::Equal, y, 0);
                self.fail_if(zero, status::DIV_ZERO);
                let one = self.iconst(ty, 1);
                let mut safe = self.b.ins().select(zero, one, y);
                let neg1 = if s {
                    let m = self.b.ins().icmp_imm_s(IntCC::Equal, y, -1);
                    safe = self.b.ins().select(m, one, safe);
                    Some(m)
                } else {
                    None
                };
                let r = self.div_rem(op, s, x, safe);
                match neg1 {
                    // x / -1 = -x (wrapping); x mod -1 = 0.
                    Some(m) => {
                        let alt = if op == BinOp::FloorMod {
                            self.iconst(ty, 0)
                        } else {
                            self.b.ins().ineg(x)
                        };
                        self.b.ins().select(m, alt, r)
                    }
                    None => r,
                }
            }
        };
        if narrow {
            self.b.ins().ireduce(types::I8, r)
        } else {
            r
        }
    }

    /// Division or remainder by a divisor that cannot trap.
    fn div_rem(&mut self, op: BinOp, signed: bool, x: Value, y: Value) -> Value {
        if !signed {
            return match op {
                BinOp::FloorMod => self.b.ins().urem(x, y),
                _ => self.b.ins().udiv(x, y),
            };
        }
        match op {
            BinOp::Div => self.b.ins().sdiv(x, y),
            BinOp::FloorDiv => {
                let q = self.b.ins().sdiv(x, y);
                let r = self.b.ins().srem(x, y);
                let adjust = self.floor_adjust(r, y);
                let qt = self.b.func.dfg.value_type(q);
                let adj = self.b.ins().uextend(qt, adjust);
                self.b.ins().isub(q, adj)
            }
            _ => {
                let r = self.b.ins().srem(x, y);
                let adjust = self.floor_adjust(r, y);
                let rt = self.b.func.dfg.value_type(r);
                let zero = self.iconst(rt, 0);
                let add = self.b.ins().select(adjust, y, zero);
                self.b.ins().iadd(r, add)
            }
        }
    }

    /// Whether a truncated remainder `r` needs the floor adjustment: `r != 0` and its
    /// sign differs from the divisor's.
    fn floor_adjust(&mut self, r: Value, y: Value) -> Value {
        let nz = self.b.ins().icmp_imm_s(IntCC::NotEqual, r, 0);
        let x = self.b.ins().bxor(r, y);
        let neg = self.b.ins().icmp_imm_s(IntCC::SignedLessThan, x, 0);
        self.b.ins().band(nz, neg)
    }

    fn cast(&mut self, v: Value, from: DType, to: DType) -> Value {
        if from == to {
            return v;
        }
        if to.is_bool() {
            return if from.is_float() {
                let z = self.b.ins().f32const(0.0);
                self.b.ins().fcmp(FloatCC::NotEqual, v, z)
            } else {
                self.b.ins().icmp_imm_s(IntCC::NotEqual, v, 0)
            };
        }
        if to.is_float() {
            let f = if from.is_float() {
                v
            } else {
                let wide = match cl_ty(from) {
                    types::I8 if is_signed(from) => self.b.ins().sextend(types::I32, v),
                    types::I8 => self.b.ins().uextend(types::I32, v),
                    _ => v,
                };
                self.b.ins().fcvt_from_sint(types::F32, wide)
            };
            return self.round(f, to);
        }
        // To an integer.
        let tt = cl_ty(to);
        if from.is_float() {
            return match to {
                DType::I64 => self.b.ins().fcvt_to_sint_sat(types::I64, v),
                DType::I32 => self.b.ins().fcvt_to_sint_sat(types::I32, v),
                _ => {
                    let w = self.b.ins().fcvt_to_sint_sat(types::I32, v);
                    let (lo, hi) = if to == DType::I8 {
                        (-128, 127)
                    } else {
                        (0, 255)
                    };
                    let lo = self.iconst(types::I32, lo);
                    let hi = self.iconst(types::I32, hi);
                    let w = self.b.ins().smax(w, lo);
                    let w = self.b.ins().smin(w, hi);
                    self.b.ins().ireduce(types::I8, w)
                }
            };
        }
        let ft = cl_ty(from);
        if tt.bits() > ft.bits() {
            if is_signed(from) {
                self.b.ins().sextend(tt, v)
            } else {
                self.b.ins().uextend(tt, v)
            }
        } else if tt.bits() < ft.bits() {
            self.b.ins().ireduce(tt, v)
        } else {
            v
        }
    }

    fn call(&mut self, intrinsic: Intrinsic, args: &[Expr]) -> Result<(Value, DType)> {
        if args.len() != intrinsic.arity() {
            return Err(Error::Internal(format!(
                "@{}: `{}` with {} arguments",
                self.env.func.name,
                intrinsic.name(),
                args.len()
            )));
        }
        let mut vs = vec![];
        let mut d = DType::F32;
        for a in args {
            let (v, ad) = self.expr(a)?;
            vs.push(v);
            d = ad;
        }
        let x = vs[0];
        if !d.is_float() {
            if intrinsic == Intrinsic::Abs && d.is_int() {
                if !is_signed(d) {
                    return Ok((x, d));
                }
                let n = self.b.ins().ineg(x);
                let neg = self.b.ins().icmp_imm_s(IntCC::SignedLessThan, x, 0);
                return Ok((self.b.ins().select(neg, n, x), d));
            }
            return Err(self.unsupported(format_args!("`{}` of {d}", intrinsic.name())));
        }
        let r = match intrinsic {
            Intrinsic::Exp => self.host1(Host::Exp, &[x]),
            Intrinsic::Log => self.host1(Host::Log, &[x]),
            Intrinsic::Tanh => self.host1(Host::Tanh, &[x]),
            Intrinsic::Erf => self.host1(Host::Erf, &[x]),
            Intrinsic::Pow => self.host1(Host::Pow, &[x, vs[1]]),
            Intrinsic::Sqrt => self.b.ins().sqrt(x),
            Intrinsic::Rsqrt => {
                let s = self.b.ins().sqrt(x);
                let one = self.b.ins().f32const(1.0);
                self.b.ins().fdiv(one, s)
            }
            // The loop-IR interpreter's stable form: e = exp(-|x|), then
            // (x >= 0 ? 1 : e) / (1 + e).
            Intrinsic::Sigmoid => {
                let a = self.b.ins().fabs(x);
                let n = self.b.ins().fneg(a);
                let e = self.host1(Host::Exp, &[n]);
                let one = self.b.ins().f32const(1.0);
                let zero = self.b.ins().f32const(0.0);
                let den = self.b.ins().fadd(one, e);
                let pos = self.b.ins().fcmp(FloatCC::GreaterThanOrEqual, x, zero);
                let num = self.b.ins().select(pos, one, e);
                self.b.ins().fdiv(num, den)
            }
            Intrinsic::Fma => self.b.ins().fma(x, vs[1], vs[2]),
            Intrinsic::Abs => self.b.ins().fabs(x),
            Intrinsic::Floor => self.b.ins().floor(x),
            Intrinsic::Ceil => self.b.ins().ceil(x),
        };
        Ok((self.round(r, d), d))
    }
}
