//! Loop IR → PTX text: one [`PrimFunc`] becomes one `.entry` per launch (each top-level
//! statement of its body that holds thread-bound loops is a launch of its own, run in
//! order, so sibling `blockIdx` nests never race; top-level statements without thread
//! loops run as a one-thread launch).
//!
//! Values live in typed virtual registers: `%f` (float32, and float16 values widened to
//! float32 and rounded back to float16 after every operation, as the loop-IR interpreter
//! does), `%r` (int32, and int8/uint8 held sign/zero-extended and re-wrapped after every
//! operation), `%rd` (int64 and addresses), `%p` (bool), `%h` (float16 bits at loads and
//! stores). Global buffers are `.param .u64` pointers; `shared` and `local` allocations
//! are `.shared`/`.local` byte arrays of the entry. Serial loops are branches, `select`
//! is lazy (branches, as the interpreter evaluates only the chosen side), thread loops
//! read `%ctaid`/`%tid`, and a thread loop shorter than its launch dimension is guarded
//! by a predicated branch. Float arithmetic uses the `.rn` forms (never contracted to an
//! `fma`), so `+ - * /` and `sqrt` are IEEE-exact as the interpreter's; the intrinsics
//! are in [`crate::math`].
//!
//! Integer division by zero is an error, as on every target: a kernel with an integer
//! division or modulo by a value that is not a positive constant
//! ([`PrimFunc::may_divide_by_zero`]) takes one more `.u64` parameter, a status word; a
//! zero divisor stores 1 there and divides by one instead, and the launcher reports
//! the error after the kernel ran.

use std::collections::HashMap;
use std::fmt::Write;

use kiln_executor::{Error, Result};
use kiln_ir::DType;
use kiln_te::tir::visit::deep;
use kiln_te::tir::{BinOp, BufferId, Expr, ForKind, PrimFunc, Scope, Stmt, ThreadAxis, VarId};

use crate::launch::Launch;

/// A value in a register: the register's name and the loop-IR dtype it holds.
#[derive(Clone, Debug)]
pub(crate) struct Val {
    pub reg: String,
    pub dtype: DType,
}

/// The register classes, in declaration order: prefix and PTX register type.
const CLASSES: [(&str, &str); 5] = [
    ("%p", ".pred"),
    ("%r", ".b32"),
    ("%rd", ".b64"),
    ("%f", ".f32"),
    ("%h", ".b16"),
];

/// A float32 immediate in PTX's exact hex form.
pub(crate) fn f32_imm(v: f32) -> String {
    format!("0f{:08X}", v.to_bits())
}

fn unsupported(func: &PrimFunc, what: impl std::fmt::Display) -> Error {
    Error::Unsupported(format!("CUDA codegen, kernel @{}: {what}", func.name))
}

/// The PTX of one launch of `func`: the entry's text (appended to `out`).
pub(crate) fn emit_launch(
    out: &mut String,
    func: &PrimFunc,
    root: &Stmt,
    launch: &Launch,
    drop_barrier: bool,
) -> Result<()> {
    if let Some(d) = func.dtypes().into_iter().find(|&d| !emits(d)) {
        return Err(unsupported(
            func,
            format!(
                "{d} values (the PTX codegen emits {})",
                EMITTED.map(DType::name).join(", ")
            ),
        ));
    }
    let status = func.may_divide_by_zero();
    let mut g = Gen {
        func,
        body: String::new(),
        counts: [0; 5],
        vars: vec![None; func.vars.len()],
        globals: HashMap::new(),
        arrays: vec![],
        labels: 0,
        launch,
        bound: [false; 6],
        guarded_depth: 0,
        drop_barrier,
        status: None,
    };
    for (k, &p) in func.params.iter().enumerate() {
        let ptr = g.global_param(k);
        g.globals.insert(p, ptr);
    }
    let n_params = func.params.len() + usize::from(status);
    if status {
        g.status = Some(g.global_param(func.params.len()));
    }
    g.stmt(root)?;
    let shared: usize = g
        .arrays
        .iter()
        .filter(|(_, s, _)| *s == Scope::Shared)
        .map(|(_, _, b)| b)
        .sum();
    if shared > 48 * 1024 {
        return Err(unsupported(
            func,
            format!("{shared} bytes of shared memory (at most 49152 without opt-in)"),
        ));
    }
    let params: Vec<String> = (0..n_params)
        .map(|k| format!("\t.param .u64 p{k}"))
        .collect();
    let [gx, gy, gz] = launch.grid;
    let [bx, by, bz] = launch.block;
    let _ = writeln!(
        out,
        "// @{} launch grid ({gx}, {gy}, {gz}) block ({bx}, {by}, {bz})",
        func.name
    );
    let _ = writeln!(
        out,
        ".visible .entry {}(\n{}\n)",
        launch.entry,
        params.join(",\n")
    );
    let _ = writeln!(out, ".maxntid {bx}, {by}, {bz}\n{{");
    for (k, (prefix, ty)) in CLASSES.iter().enumerate() {
        if g.counts[k] > 0 {
            let _ = writeln!(out, "\t.reg {ty} {prefix}<{}>;", g.counts[k]);
        }
    }
    for (name, scope, bytes) in &g.arrays {
        let _ = writeln!(
            out,
            "\t.{} .align 8 .b8 {name}[{}];",
            scope.name(),
            bytes.max(&1)
        );
    }
    out.push_str(&g.body);
    out.push_str("\tret;\n}\n\n");
    Ok(())
}

pub(crate) struct Gen<'a> {
    func: &'a PrimFunc,
    body: String,
    counts: [usize; 5],
    vars: Vec<Option<Val>>,
    globals: HashMap<BufferId, String>,
    /// Shared and local arrays: symbol, scope, bytes.
    arrays: Vec<(String, Scope, usize)>,
    labels: usize,
    launch: &'a Launch,
    /// Which launch axes an enclosing thread loop binds (ThreadAxis::ALL order).
    bound: [bool; 6],
    /// How many enclosing thread-loop guards (a barrier under one is divergent).
    guarded_depth: usize,
    drop_barrier: bool,
    /// The global address of the status word, in kernels that report division by zero.
    status: Option<String>,
}

/// The dtypes the PTX codegen emits; [`emit_launch`] refuses a kernel using any other
/// (and [`crate::CudaBackend`] declares them unsupported), so the arms below for the
/// others are never reached.
pub(crate) const EMITTED: [DType; 7] = [
    DType::F32,
    DType::F16,
    DType::I8,
    DType::U8,
    DType::I32,
    DType::I64,
    DType::Bool,
];

fn emits(d: DType) -> bool {
    EMITTED.contains(&d)
}

fn class_of(d: DType) -> usize {
    match d {
        DType::Bool => 0,
        DType::I32 | DType::I8 | DType::U8 | DType::I16 | DType::U16 | DType::U32 => 1,
        DType::I64 | DType::U64 => 2,
        DType::F32 | DType::F16 | DType::F64 | DType::BF16 => 3,
    }
}

/// The PTX integer type of a register holding `d`.
fn int_ty(d: DType) -> &'static str {
    if d == DType::I64 { "s64" } else { "s32" }
}

impl<'a> Gen<'a> {
    /// The global address held by `.param .u64 p{k}`, in a register.
    fn global_param(&mut self, k: usize) -> String {
        let raw = self.reg(2);
        let ptr = self.reg(2);
        self.line(format!("ld.param.u64 {raw}, [p{k}];"));
        self.line(format!("cvta.to.global.u64 {ptr}, {raw};"));
        ptr
    }

    pub(crate) fn reg(&mut self, class: usize) -> String {
        let n = self.counts[class];
        self.counts[class] += 1;
        format!("{}{n}", CLASSES[class].0)
    }

    pub(crate) fn fresh(&mut self, dtype: DType) -> Val {
        Val {
            reg: self.reg(class_of(dtype)),
            dtype,
        }
    }

    pub(crate) fn line(&mut self, s: impl AsRef<str>) {
        self.body.push('\t');
        self.body.push_str(s.as_ref());
        self.body.push('\n');
    }

    pub(crate) fn label(&mut self) -> String {
        self.labels += 1;
        format!("$L{}", self.labels)
    }

    fn place(&mut self, label: &str) {
        let _ = writeln!(self.body, "{label}:");
    }

    pub(crate) fn err(&self, what: impl std::fmt::Display) -> Error {
        unsupported(self.func, what)
    }

    /// A float32 register holding `v`.
    pub(crate) fn fconst(&mut self, v: f32) -> String {
        let r = self.reg(3);
        self.line(format!("mov.f32 {r}, {};", f32_imm(v)));
        r
    }

    fn stmt(&mut self, s: &Stmt) -> Result<()> {
        deep(|| self.stmt_on_stack(s))
    }

    fn stmt_on_stack(&mut self, s: &Stmt) -> Result<()> {
        match s {
            Stmt::Seq(v) => v.iter().try_for_each(|c| self.stmt(c)),
            Stmt::For {
                var,
                min,
                extent,
                kind: ForKind::Thread(axis),
                body,
            } => self.thread_loop(*var, *min, *extent, *axis, body),
            Stmt::For {
                var,
                min,
                extent,
                body,
                ..
            } => self.serial_loop(*var, *min, *extent, body),
            Stmt::Store {
                buffer,
                indices,
                value,
            } => {
                let v = self.expr(value)?;
                self.store(*buffer, indices, v)
            }
            Stmt::Allocate { buffer, body } => {
                let b = self
                    .func
                    .buffer(*buffer)
                    .ok_or_else(|| self.err(format!("allocate of unknown {buffer}")))?;
                let (prefix, scope) = match b.scope {
                    Scope::Shared => ("sh", Scope::Shared),
                    Scope::Local => ("lc", Scope::Local),
                    Scope::Global => {
                        return Err(self.err(format!("allocation of global buffer {}", b.name)));
                    }
                };
                let bytes = b
                    .numel()
                    .and_then(|n| n.checked_mul(b.dtype.size_bytes()))
                    .ok_or_else(|| self.err(format!("buffer {} is too large", b.name)))?;
                let name = format!("{prefix}{}", buffer.0);
                if !self.arrays.iter().any(|(n, _, _)| *n == name) {
                    self.arrays.push((name, scope, bytes));
                }
                self.stmt(body)
            }
            Stmt::If { cond, then, else_ } => {
                let c = self.expr(cond)?;
                let c = self.as_pred(c)?;
                let l_else = self.label();
                let l_end = self.label();
                self.line(format!("@!{} bra {l_else};", c.reg));
                self.stmt(then)?;
                self.line(format!("bra.uni {l_end};"));
                self.place(&l_else);
                if let Some(e) = else_ {
                    self.stmt(e)?;
                }
                self.place(&l_end);
                Ok(())
            }
            Stmt::Let { var, value, body } => {
                let v = self.expr(value)?;
                let slot = var.index();
                if slot >= self.vars.len() {
                    return Err(self.err(format!("let of unknown {var}")));
                }
                // A copy, so that a later rebinding never aliases the value's register.
                let own = self.fresh(v.dtype);
                self.line(format!("mov{} {}, {};", mov_ty(v.dtype), own.reg, v.reg));
                self.vars[slot] = Some(own);
                self.stmt(body)?;
                self.vars[slot] = None;
                Ok(())
            }
            Stmt::MicroKernel(call) => Err(unsupported(
                self.func,
                format!(
                    "microkernel {} (the GPU schedules do not tensorize)",
                    call.kernel
                ),
            )),
            Stmt::Barrier => {
                if self.guarded_depth > 0 {
                    return Err(
                        self.err("barrier under a thread loop shorter than its launch dimension")
                    );
                }
                if self.drop_barrier {
                    // The planted bug (crate::testing): this kernel's first barrier is lost.
                    self.drop_barrier = false;
                } else {
                    self.line("bar.sync 0;");
                }
                Ok(())
            }
        }
    }

    fn bind_var(&mut self, var: VarId, reg32: String) -> Result<()> {
        let d = self
            .func
            .var(var)
            .ok_or_else(|| self.err(format!("unknown loop variable {var}")))?
            .ty
            .dtype;
        let v = match d {
            DType::I32 => Val {
                reg: reg32,
                dtype: d,
            },
            DType::I64 => {
                let w = self.fresh(d);
                self.line(format!("cvt.s64.s32 {}, {reg32};", w.reg));
                w
            }
            other => return Err(self.err(format!("loop variable of dtype {other}"))),
        };
        self.vars[var.index()] = Some(v);
        Ok(())
    }

    fn thread_loop(
        &mut self,
        var: VarId,
        min: i64,
        extent: i64,
        axis: ThreadAxis,
        body: &Stmt,
    ) -> Result<()> {
        let k = ThreadAxis::ALL
            .iter()
            .position(|&a| a == axis)
            .unwrap_or_default();
        if self.bound[k] {
            return Err(self.err(format!("{axis} bound twice in one loop nest")));
        }
        if extent <= 0 {
            return Ok(());
        }
        let dim = self.launch.dim(axis);
        let special = match axis {
            ThreadAxis::BlockX => "%ctaid.x",
            ThreadAxis::BlockY => "%ctaid.y",
            ThreadAxis::BlockZ => "%ctaid.z",
            ThreadAxis::ThreadX => "%tid.x",
            ThreadAxis::ThreadY => "%tid.y",
            ThreadAxis::ThreadZ => "%tid.z",
        };
        let id = self.reg(1);
        self.line(format!("mov.u32 {id}, {special};"));
        let guard = (extent as u64) < dim as u64;
        let skip = self.label();
        if guard {
            let p = self.reg(0);
            self.line(format!("setp.ge.u32 {p}, {id}, {extent};"));
            self.line(format!("@{p} bra {skip};"));
            self.guarded_depth += 1;
        }
        let v = if min != 0 {
            let r = self.reg(1);
            self.line(format!("add.s32 {r}, {id}, {min};"));
            r
        } else {
            id
        };
        self.bind_var(var, v)?;
        self.bound[k] = true;
        let r = self.stmt(body);
        self.bound[k] = false;
        self.vars[var.index()] = None;
        if guard {
            self.guarded_depth -= 1;
            self.place(&skip);
        }
        r
    }

    fn serial_loop(&mut self, var: VarId, min: i64, extent: i64, body: &Stmt) -> Result<()> {
        if extent <= 0 {
            return Ok(());
        }
        let d = self
            .func
            .var(var)
            .ok_or_else(|| self.err(format!("unknown loop variable {var}")))?
            .ty
            .dtype;
        if !matches!(d, DType::I32 | DType::I64) {
            return Err(self.err(format!("loop variable of dtype {d}")));
        }
        let end = min
            .checked_add(extent)
            .filter(|&e| d == DType::I64 || i32::try_from(e).is_ok())
            .ok_or_else(|| self.err("loop bound overflows its variable"))?;
        let v = self.fresh(d);
        let t = int_ty(d);
        let head = self.label();
        let done = self.label();
        let p = self.reg(0);
        self.line(format!("mov.{t} {}, {min};", v.reg));
        self.place(&head);
        self.line(format!("setp.ge.{t} {p}, {}, {end};", v.reg));
        self.line(format!("@{p} bra {done};"));
        self.vars[var.index()] = Some(v.clone());
        self.stmt(body)?;
        self.vars[var.index()] = None;
        self.line(format!("add.{t} {}, {}, 1;", v.reg, v.reg));
        self.line(format!("bra.uni {head};"));
        self.place(&done);
        Ok(())
    }

    /// The state space and byte address of `buffer[indices]`.
    fn address(&mut self, buffer: BufferId, indices: &[Expr]) -> Result<(&'static str, String)> {
        let b = self
            .func
            .buffer(buffer)
            .ok_or_else(|| self.err(format!("access to unknown {buffer}")))?
            .clone();
        if indices.len() != b.rank() {
            return Err(self.err(format!(
                "{} indices for buffer {} of rank {}",
                indices.len(),
                b.name,
                b.rank()
            )));
        }
        let (space, base) = match b.scope {
            Scope::Global => (
                "global",
                self.globals
                    .get(&buffer)
                    .cloned()
                    .ok_or_else(|| self.err(format!("global buffer {} is no parameter", b.name)))?,
            ),
            scope => {
                let (space, prefix) = if scope == Scope::Shared {
                    ("shared", "sh")
                } else {
                    ("local", "lc")
                };
                let r = self.reg(2);
                self.line(format!("mov.u64 {r}, {prefix}{};", buffer.0));
                (space, r)
            }
        };
        let mut flat: Option<String> = None;
        for (e, &ext) in indices.iter().zip(&b.shape) {
            let v = self.expr(e)?;
            let wide = self.widen(v)?;
            flat = Some(match flat {
                None => wide,
                Some(acc) => {
                    let r = self.reg(2);
                    self.line(format!("mad.lo.s64 {r}, {acc}, {ext}, {wide};"));
                    r
                }
            });
        }
        let Some(flat) = flat else {
            return Ok((space, base));
        };
        let a = self.reg(2);
        self.line(format!(
            "mad.lo.s64 {a}, {flat}, {}, {base};",
            b.dtype.size_bytes()
        ));
        Ok((space, a))
    }

    /// An integer index as an int64 register.
    fn widen(&mut self, v: Val) -> Result<String> {
        match v.dtype {
            DType::I64 => Ok(v.reg),
            DType::I32 | DType::I8 | DType::U8 => {
                let r = self.reg(2);
                self.line(format!("cvt.s64.s32 {r}, {};", v.reg));
                Ok(r)
            }
            other => Err(self.err(format!("index of dtype {other}"))),
        }
    }

    fn store(&mut self, buffer: BufferId, indices: &[Expr], v: Val) -> Result<()> {
        let d = self
            .func
            .buffer(buffer)
            .ok_or_else(|| self.err(format!("store to unknown {buffer}")))?
            .dtype;
        if v.dtype != d {
            return Err(self.err(format!("store of {} to a {d} buffer", v.dtype)));
        }
        let (space, a) = self.address(buffer, indices)?;
        match d {
            DType::F32 => self.line(format!("st.{space}.f32 [{a}], {};", v.reg)),
            DType::F16 => {
                let h = self.reg(4);
                self.line(format!("cvt.rn.f16.f32 {h}, {};", v.reg));
                self.line(format!("st.{space}.b16 [{a}], {h};"));
            }
            DType::I32 => self.line(format!("st.{space}.b32 [{a}], {};", v.reg)),
            DType::I64 => self.line(format!("st.{space}.b64 [{a}], {};", v.reg)),
            DType::I8 | DType::U8 => self.line(format!("st.{space}.u8 [{a}], {};", v.reg)),
            DType::Bool => {
                let r = self.reg(1);
                self.line(format!("selp.u32 {r}, 1, 0, {};", v.reg));
                self.line(format!("st.{space}.u8 [{a}], {r};"));
            }
            other => return Err(self.err(format!("store of {other} (not emitted)"))),
        }
        Ok(())
    }

    fn load(&mut self, buffer: BufferId, indices: &[Expr]) -> Result<Val> {
        let d = self
            .func
            .buffer(buffer)
            .ok_or_else(|| self.err(format!("load from unknown {buffer}")))?
            .dtype;
        let (space, a) = self.address(buffer, indices)?;
        let out = self.fresh(d);
        let o = &out.reg;
        match d {
            DType::F32 => self.line(format!("ld.{space}.f32 {o}, [{a}];")),
            DType::F16 => {
                let h = self.reg(4);
                self.line(format!("ld.{space}.b16 {h}, [{a}];"));
                self.line(format!("cvt.f32.f16 {o}, {h};"));
            }
            DType::I32 => self.line(format!("ld.{space}.s32 {o}, [{a}];")),
            DType::I64 => self.line(format!("ld.{space}.s64 {o}, [{a}];")),
            DType::I8 => self.line(format!("ld.{space}.s8 {o}, [{a}];")),
            DType::U8 => self.line(format!("ld.{space}.u8 {o}, [{a}];")),
            DType::Bool => {
                let r = self.reg(1);
                self.line(format!("ld.{space}.u8 {r}, [{a}];"));
                self.line(format!("setp.ne.s32 {o}, {r}, 0;"));
            }
            other => return Err(self.err(format!("load of {other} (not emitted)"))),
        }
        Ok(out)
    }

    fn as_pred(&mut self, v: Val) -> Result<Val> {
        if v.dtype == DType::Bool {
            Ok(v)
        } else {
            Err(self.err(format!("condition of dtype {}", v.dtype)))
        }
    }

    /// Re-wraps a 32-bit register to int8/uint8 and rounds a float32 to float16, the
    /// interpreter's per-operation narrowing; other dtypes are returned as they are.
    pub(crate) fn narrow(&mut self, v: Val) -> Val {
        let r = &v.reg;
        match v.dtype {
            DType::I8 => self.line(format!("cvt.s32.s8 {r}, {r};")),
            DType::U8 => self.line(format!("and.b32 {r}, {r}, 255;")),
            DType::F16 => {
                let h = self.reg(4);
                self.line(format!("cvt.rn.f16.f32 {h}, {r};"));
                self.line(format!("cvt.f32.f16 {r}, {h};"));
            }
            _ => {}
        }
        v
    }

    pub(crate) fn expr(&mut self, e: &Expr) -> Result<Val> {
        deep(|| self.expr_on_stack(e))
    }

    fn expr_on_stack(&mut self, e: &Expr) -> Result<Val> {
        match e {
            Expr::Int { value, dtype } => {
                if !dtype.is_int() {
                    return Err(self.err(format!("integer immediate of dtype {dtype}")));
                }
                let v = self.fresh(*dtype);
                let t = int_ty(*dtype);
                self.line(format!("mov.{t} {}, {value};", v.reg));
                Ok(self.narrow(v))
            }
            Expr::Float { value, dtype } => {
                if !dtype.is_float() {
                    return Err(self.err(format!("float immediate of dtype {dtype}")));
                }
                let v = self.fresh(*dtype);
                // Rounded once to the dtype, as the interpreter does.
                let x = if *dtype == DType::F16 {
                    kiln_ir::Data::from_f64(DType::F16, [*value]).to_f64()[0] as f32
                } else {
                    *value as f32
                };
                self.line(format!("mov.f32 {}, {};", v.reg, f32_imm(x)));
                Ok(v)
            }
            Expr::Bool(b) => {
                let v = self.fresh(DType::Bool);
                let r = self.reg(1);
                self.line(format!("mov.u32 {r}, {};", *b as u32));
                self.line(format!("setp.ne.u32 {}, {r}, 0;", v.reg));
                Ok(v)
            }
            Expr::Var(var) => self
                .vars
                .get(var.index())
                .cloned()
                .flatten()
                .ok_or_else(|| self.err(format!("{var} used outside its scope"))),
            Expr::Load { buffer, indices } => self.load(*buffer, indices),
            Expr::Binary { op, lhs, rhs } => {
                let a = self.expr(lhs)?;
                let b = self.expr(rhs)?;
                if a.dtype != b.dtype {
                    return Err(self.err(format!(
                        "operands of {op:?} differ ({} and {})",
                        a.dtype, b.dtype
                    )));
                }
                self.binary(*op, a, b)
            }
            Expr::Not(x) => {
                let v = self.expr(x)?;
                let v = self.as_pred(v)?;
                let o = self.fresh(DType::Bool);
                self.line(format!("not.pred {}, {};", o.reg, v.reg));
                Ok(o)
            }
            Expr::Select { cond, then, else_ } => {
                let c = self.expr(cond)?;
                let c = self.as_pred(c)?;
                let l_else = self.label();
                let l_end = self.label();
                self.line(format!("@!{} bra {l_else};", c.reg));
                let a = self.expr(then)?;
                let out = self.fresh(a.dtype);
                self.line(format!("mov{} {}, {};", mov_ty(a.dtype), out.reg, a.reg));
                self.line(format!("bra.uni {l_end};"));
                self.place(&l_else);
                let b = self.expr(else_)?;
                if b.dtype != a.dtype {
                    return Err(self.err("select sides differ in dtype"));
                }
                self.line(format!("mov{} {}, {};", mov_ty(a.dtype), out.reg, b.reg));
                self.place(&l_end);
                Ok(out)
            }
            Expr::Cast { to, value } => {
                let v = self.expr(value)?;
                self.cast(v, *to)
            }
            Expr::Call { intrinsic, args } => {
                let vals = args
                    .iter()
                    .map(|a| self.expr(a))
                    .collect::<Result<Vec<_>>>()?;
                crate::math::call(self, *intrinsic, vals)
            }
            Expr::Ramp { .. } | Expr::Broadcast { .. } => {
                Err(self.err("a vector value outside the core loop IR"))
            }
        }
    }

    fn binary(&mut self, op: BinOp, a: Val, b: Val) -> Result<Val> {
        let d = a.dtype;
        let (x, y) = (a.reg.clone(), b.reg.clone());
        if op.is_comparison() {
            let o = self.fresh(DType::Bool);
            let cmp = |op: BinOp, float: bool| match op {
                BinOp::Eq => "eq",
                BinOp::Ne if float => "neu",
                BinOp::Ne => "ne",
                BinOp::Lt => "lt",
                BinOp::Le => "le",
                BinOp::Gt => "gt",
                _ => "ge",
            };
            match d {
                DType::Bool => {
                    // On bools, compare as 0/1 integers.
                    let (ix, iy) = (self.reg(1), self.reg(1));
                    self.line(format!("selp.u32 {ix}, 1, 0, {x};"));
                    self.line(format!("selp.u32 {iy}, 1, 0, {y};"));
                    self.line(format!(
                        "setp.{}.s32 {}, {ix}, {iy};",
                        cmp(op, false),
                        o.reg
                    ));
                }
                DType::F32 | DType::F16 => {
                    self.line(format!("setp.{}.f32 {}, {x}, {y};", cmp(op, true), o.reg));
                }
                _ => self.line(format!(
                    "setp.{}.{} {}, {x}, {y};",
                    cmp(op, false),
                    int_ty(d),
                    o.reg
                )),
            }
            return Ok(o);
        }
        if d == DType::Bool {
            let o = self.fresh(d);
            let ins = match op {
                BinOp::And | BinOp::Min => "and",
                BinOp::Or | BinOp::Max => "or",
                _ => return Err(self.err(format!("{op:?} on bool"))),
            };
            self.line(format!("{ins}.pred {}, {x}, {y};", o.reg));
            return Ok(o);
        }
        let o = self.fresh(d);
        let r = o.reg.clone();
        if d.is_float() {
            match op {
                BinOp::Add => self.line(format!("add.rn.f32 {r}, {x}, {y};")),
                BinOp::Sub => self.line(format!("sub.rn.f32 {r}, {x}, {y};")),
                BinOp::Mul => self.line(format!("mul.rn.f32 {r}, {x}, {y};")),
                BinOp::Div => self.line(format!("div.rn.f32 {r}, {x}, {y};")),
                BinOp::Min | BinOp::Max => self.ieee_min_max(op == BinOp::Max, &r, &x, &y),
                _ => return Err(self.err(format!("{op:?} on {d}"))),
            }
            return Ok(self.narrow(o));
        }
        let t = int_ty(d);
        let y = match (&self.status, op) {
            (Some(status), BinOp::Div | BinOp::FloorDiv | BinOp::FloorMod) => {
                // A zero divisor reports through the status word and divides by one.
                let (status, zero) = (status.clone(), self.reg(0));
                let safe = self.fresh(d).reg;
                self.line(format!("setp.eq.{t} {zero}, {y}, 0;"));
                self.line(format!("@{zero} st.global.u32 [{status}], 1;"));
                self.line(format!("selp.b{} {safe}, 1, {y}, {zero};", bits(d)));
                safe
            }
            _ => y,
        };
        match op {
            BinOp::Add => self.line(format!("add.{t} {r}, {x}, {y};")),
            BinOp::Sub => self.line(format!("sub.{t} {r}, {x}, {y};")),
            BinOp::Mul => self.line(format!("mul.lo.{t} {r}, {x}, {y};")),
            BinOp::Div => self.line(format!("div.{t} {r}, {x}, {y};")),
            BinOp::Min => self.line(format!("min.{t} {r}, {x}, {y};")),
            BinOp::Max => self.line(format!("max.{t} {r}, {x}, {y};")),
            BinOp::FloorDiv | BinOp::FloorMod => {
                // Truncating quotient and remainder, corrected by one when the remainder
                // is nonzero and its sign differs from the divisor's.
                let rem = self.fresh(d);
                let sx = self.fresh(d);
                let (nz, neg, fix) = (self.reg(0), self.reg(0), self.reg(0));
                self.line(format!("rem.{t} {}, {x}, {y};", rem.reg));
                self.line(format!("setp.ne.{t} {nz}, {}, 0;", rem.reg));
                self.line(format!("xor.b{} {}, {}, {y};", bits(d), sx.reg, rem.reg));
                self.line(format!("setp.lt.{t} {neg}, {}, 0;", sx.reg));
                self.line(format!("and.pred {fix}, {nz}, {neg};"));
                if op == BinOp::FloorDiv {
                    self.line(format!("div.{t} {r}, {x}, {y};"));
                    self.line(format!("@{fix} sub.{t} {r}, {r}, 1;"));
                } else {
                    self.line(format!("mov.b{} {r}, {};", bits(d), rem.reg));
                    self.line(format!("@{fix} add.{t} {r}, {r}, {y};"));
                }
            }
            _ => return Err(self.err(format!("{op:?} on {d}"))),
        }
        Ok(self.narrow(o))
    }

    /// IEEE 754-2019 maximum/minimum: NaN if either is NaN; equal operands (only the
    /// zeros differ) combine their sign bits (max: and, min: or).
    fn ieee_min_max(&mut self, max: bool, r: &str, x: &str, y: &str) {
        let (eq, nan) = (self.reg(0), self.reg(0));
        let z = self.reg(3);
        let (ins, bit) = if max { ("max", "and") } else { ("min", "or") };
        self.line(format!("{ins}.f32 {r}, {x}, {y};"));
        self.line(format!("setp.eq.f32 {eq}, {x}, {y};"));
        self.line(format!("{bit}.b32 {z}, {x}, {y};"));
        self.line(format!("selp.f32 {r}, {z}, {r}, {eq};"));
        self.line(format!("setp.nan.f32 {nan}, {x}, {y};"));
        self.line(format!("selp.f32 {r}, {}, {r}, {nan};", f32_imm(f32::NAN)));
    }

    pub(crate) fn cast(&mut self, v: Val, to: DType) -> Result<Val> {
        let from = v.dtype;
        if from == to {
            return Ok(v);
        }
        let x = v.reg.clone();
        let o = self.fresh(to);
        let r = o.reg.clone();
        match (from, to) {
            (DType::Bool, _) | (_, DType::Bool) => {
                return Err(self.err("a cast from or to bool outside the core loop IR"));
            }
            (DType::F16, DType::F32) => self.line(format!("mov.f32 {r}, {x};")),
            (DType::F32, DType::F16) => {
                self.line(format!("mov.f32 {r}, {x};"));
                return Ok(self.narrow(o));
            }
            (f, t) if f.is_float() => match t {
                DType::I64 => self.line(format!("cvt.rzi.s64.f32 {r}, {x};")),
                DType::I32 => self.line(format!("cvt.rzi.s32.f32 {r}, {x};")),
                _ => {
                    // Saturating as Rust's `as`: through int32, then clamped.
                    let (lo, hi) = if t == DType::I8 {
                        (-128, 127)
                    } else {
                        (0, 255)
                    };
                    self.line(format!("cvt.rzi.s32.f32 {r}, {x};"));
                    self.line(format!("max.s32 {r}, {r}, {lo};"));
                    self.line(format!("min.s32 {r}, {r}, {hi};"));
                }
            },
            (f, t) if t.is_float() => {
                let src = int_ty(f);
                if t == DType::F16 {
                    // Rounded once, straight from the integer.
                    let h = self.reg(4);
                    self.line(format!("cvt.rn.f16.{src} {h}, {x};"));
                    self.line(format!("cvt.f32.f16 {r}, {h};"));
                } else {
                    self.line(format!("cvt.rn.f32.{src} {r}, {x};"));
                }
            }
            (DType::I64, _) => {
                self.line(format!("cvt.u32.u64 {r}, {x};"));
                return Ok(self.narrow(o));
            }
            (_, DType::I64) => self.line(format!("cvt.s64.s32 {r}, {x};")),
            _ => {
                self.line(format!("mov.b32 {r}, {x};"));
                return Ok(self.narrow(o));
            }
        }
        Ok(o)
    }
}

fn bits(d: DType) -> u32 {
    if d == DType::I64 { 64 } else { 32 }
}

/// The `mov` type suffix for a register holding `d`.
pub(crate) fn mov_ty(d: DType) -> &'static str {
    match d {
        DType::Bool => ".pred",
        DType::I64 => ".b64",
        DType::F32 | DType::F16 => ".f32",
        _ => ".b32",
    }
}
