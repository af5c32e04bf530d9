//! The text form of the loop IR: a readable nest that [`parse`](super::parse) reads back.
//!
//! ```text
//! primfn @fused_add(%a: Buffer[(64), float32, global], out %c: Buffer[(64), float32, global]) {
//!   parallel for (%i.outer, 0, 16) {
//!     vectorized for (%i.inner, 0, 4) {
//!       %c[%i.outer * 4 + %i.inner] = %a[%i.outer * 4 + %i.inner] + 1.0
//!     }
//!   }
//! }
//! ```
//!
//! Statements: `for (%v, min, extent) { }` with a kind keyword in front (`parallel`,
//! `vectorized`, `unrolled`), `launch_thread blockIdx.x (%v, 0, extent) { }`, stores
//! `%buf[i, j] = value`, `allocate %t: Buffer[(4), float32, local] { }`,
//! `if (c) { } else { }`, `let %x: int32 = value { }`, `barrier()`. Loop variables other
//! than `int32` show their type: `for (%i: int64, 0, 8)`.
//!
//! Expressions: C-like infix `+ - * / == != < <= > >= && || !` with the usual precedence;
//! `floordiv floormod min max select cast(float16, x) ramp(base, stride, lanes)
//! broadcast(x, lanes)` and intrinsics (`exp(x)`, `fma(a, b, c)`) as calls; loads
//! `%buf[i, j]`. Immediates carry a dtype suffix unless they are `int32` or `float32`:
//! `5`, `5i64`, `7u8`, `-2i8`, `1.5`, `1.5f16`, `inf`, `nanf16`, `true`.
//!
//! Names print as `%name`; names that collide or hold characters other than
//! `[A-Za-z0-9_.]` are made unique and printable (`%i_1`), so the text always parses.

use std::collections::HashSet;
use std::fmt::Write;

use kiln_ir::DType;

use super::expr::{BinOp, Expr};
use super::func::PrimFunc;
use super::stmt::{ForKind, Stmt};
use super::types::{Buffer, BufferId, ValueType, VarId};
use super::visit::deep;

/// Prints a whole function.
pub fn print(func: &PrimFunc) -> String {
    Printer::new(func).function()
}

/// Prints one expression of `func` with the names `print(func)` would use.
pub fn print_expr(func: &PrimFunc, e: &Expr) -> String {
    Printer::new(func).expr(e)
}

/// Prints one statement of `func` (and its children), indented by `indent` levels.
pub fn print_stmt(func: &PrimFunc, s: &Stmt, indent: usize) -> String {
    let p = Printer::new(func);
    let mut out = String::new();
    p.stmt(&mut out, s, indent);
    out
}

/// Whether `c` may appear in a `%name` or `@name`.
pub fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '.'
}

fn sanitize(name: &str, fallback: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| if is_name_char(c) { c } else { '_' })
        .collect();
    if s.is_empty() {
        fallback.to_string()
    } else {
        s
    }
}

/// The unique, printable names of a function's buffers and variables.
#[derive(Clone, Debug)]
pub struct Names {
    buffers: Vec<String>,
    vars: Vec<String>,
}

impl Names {
    /// Names for every buffer and variable of `func`: buffers first, in arena order,
    /// then variables; a name already taken gets the first free `_1`, `_2`, ... suffix.
    pub fn new(func: &PrimFunc) -> Names {
        let mut used = HashSet::new();
        let mut take = |name: &str, fallback: &str| {
            let base = sanitize(name, fallback);
            let mut candidate = base.clone();
            let mut n = 1;
            while used.contains(&candidate) {
                candidate = format!("{base}_{n}");
                n += 1;
            }
            used.insert(candidate.clone());
            candidate
        };
        let buffers = func.buffers.iter().map(|b| take(&b.name, "buf")).collect();
        let vars = func.vars.iter().map(|v| take(&v.name, "v")).collect();
        Names { buffers, vars }
    }

    /// `%name` of a buffer (`%?buffer7` for an id outside the arena).
    pub fn buffer(&self, id: BufferId) -> String {
        match self.buffers.get(id.index()) {
            Some(n) => format!("%{n}"),
            None => format!("%?{id}"),
        }
    }

    /// `%name` of a variable (`%?var7` for an id outside the arena).
    pub fn var(&self, id: VarId) -> String {
        match self.vars.get(id.index()) {
            Some(n) => format!("%{n}"),
            None => format!("%?{id}"),
        }
    }
}

/// Formats a float immediate's value (without dtype suffix) so that it parses back to
/// the same `f64`.
pub fn fmt_float(v: f64) -> String {
    if v.is_nan() {
        "nan".into()
    } else if v.is_infinite() {
        if v > 0.0 { "inf".into() } else { "-inf".into() }
    } else {
        format!("{v:?}")
    }
}

/// The literal suffix of a dtype in the text form.
pub fn literal_suffix(d: DType) -> &'static str {
    match d {
        DType::F32 | DType::I32 | DType::Bool => "",
        DType::F16 => "f16",
        DType::I8 => "i8",
        DType::U8 => "u8",
        DType::I64 => "i64",
        DType::F64 => "f64",
        DType::BF16 => "bf16",
        DType::I16 => "i16",
        DType::U16 => "u16",
        DType::U32 => "u32",
        DType::U64 => "u64",
    }
}

fn fmt_shape(shape: &[usize]) -> String {
    let parts: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    format!("({})", parts.join(", "))
}

/// Formats a buffer type: `Buffer[(64, 64), float32, global]`.
pub fn fmt_buffer_type(b: &Buffer) -> String {
    format!("Buffer[{}, {}, {}]", fmt_shape(&b.shape), b.dtype, b.scope)
}

/// Prints the parts of one function; holds its [`Names`].
pub struct Printer<'a> {
    func: &'a PrimFunc,
    names: Names,
}

impl<'a> Printer<'a> {
    /// A printer for `func`.
    pub fn new(func: &'a PrimFunc) -> Printer<'a> {
        Printer {
            func,
            names: Names::new(func),
        }
    }

    /// The names in use.
    pub fn names(&self) -> &Names {
        &self.names
    }

    fn buffer_decl(&self, id: BufferId) -> String {
        match self.func.buffer(id) {
            Some(b) => format!("{}: {}", self.names.buffer(id), fmt_buffer_type(b)),
            None => self.names.buffer(id),
        }
    }

    /// The whole function.
    pub fn function(&self) -> String {
        let mut out = String::new();
        let params: Vec<String> = self
            .func
            .params
            .iter()
            .enumerate()
            .map(|(k, &id)| {
                let out = if k >= self.func.num_inputs {
                    "out "
                } else {
                    ""
                };
                format!("{out}{}", self.buffer_decl(id))
            })
            .collect();
        let _ = writeln!(
            out,
            "primfn @{}({}) {{",
            sanitize(&self.func.name, "kernel"),
            params.join(", ")
        );
        self.stmt(&mut out, &self.func.body, 1);
        out.push_str("}\n");
        out
    }

    /// Appends `s` at `indent` levels.
    pub fn stmt(&self, out: &mut String, s: &Stmt, indent: usize) {
        deep(|| self.stmt_on_stack(out, s, indent))
    }

    fn stmt_on_stack(&self, out: &mut String, s: &Stmt, indent: usize) {
        let pad = "  ".repeat(indent);
        match s {
            Stmt::Seq(v) => {
                for c in v {
                    self.stmt(out, c, indent);
                }
            }
            Stmt::For {
                var,
                min,
                extent,
                kind,
                body,
            } => {
                let ty = match self.func.var(*var) {
                    Some(d) if d.ty != ValueType::I32 => format!(": {}", d.ty),
                    _ => String::new(),
                };
                let head = match kind {
                    ForKind::Serial => "for".to_string(),
                    ForKind::Thread(axis) => format!("launch_thread {axis}"),
                    k => format!("{} for", k.keyword()),
                };
                let _ = writeln!(
                    out,
                    "{pad}{head} ({}{ty}, {min}, {extent}) {{",
                    self.names.var(*var)
                );
                self.stmt(out, body, indent + 1);
                let _ = writeln!(out, "{pad}}}");
            }
            Stmt::Store {
                buffer,
                indices,
                value,
            } => {
                let _ = writeln!(
                    out,
                    "{pad}{}[{}] = {}",
                    self.names.buffer(*buffer),
                    self.list(indices),
                    self.expr(value)
                );
            }
            Stmt::Allocate { buffer, body } => {
                let _ = writeln!(out, "{pad}allocate {} {{", self.buffer_decl(*buffer));
                self.stmt(out, body, indent + 1);
                let _ = writeln!(out, "{pad}}}");
            }
            Stmt::If { cond, then, else_ } => {
                let _ = writeln!(out, "{pad}if ({}) {{", self.expr(cond));
                self.stmt(out, then, indent + 1);
                if let Some(e) = else_ {
                    let _ = writeln!(out, "{pad}}} else {{");
                    self.stmt(out, e, indent + 1);
                }
                let _ = writeln!(out, "{pad}}}");
            }
            Stmt::Let { var, value, body } => {
                let ty = match self.func.var(*var) {
                    Some(d) => d.ty.to_string(),
                    None => "int32".into(),
                };
                let _ = writeln!(
                    out,
                    "{pad}let {}: {ty} = {} {{",
                    self.names.var(*var),
                    self.expr(value)
                );
                self.stmt(out, body, indent + 1);
                let _ = writeln!(out, "{pad}}}");
            }
            Stmt::Barrier => {
                let _ = writeln!(out, "{pad}barrier()");
            }
            Stmt::MicroKernel(call) => {
                let mut args: Vec<String> = call
                    .kernel
                    .sizes()
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect();
                for o in &call.operands {
                    let axes: Vec<String> = o.axes.iter().map(|a| a.to_string()).collect();
                    args.push(format!(
                        "{}[{}] axes({})",
                        self.names.buffer(o.buffer),
                        self.list(&o.base),
                        axes.join(", ")
                    ));
                }
                let _ = writeln!(
                    out,
                    "{pad}microkernel {}({})",
                    call.kernel.name(),
                    args.join(", ")
                );
            }
        }
    }

    fn list(&self, v: &[Expr]) -> String {
        v.iter()
            .map(|e| self.expr(e))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// One expression.
    pub fn expr(&self, e: &Expr) -> String {
        let mut out = String::new();
        self.write_expr(&mut out, e);
        out
    }

    fn prec(e: &Expr) -> u8 {
        match e {
            Expr::Binary { op, .. } if op.symbol().is_some() => op.precedence(),
            // A negative literal starts with `-`; keep it tight but below `!`.
            Expr::Not(_) => 9,
            _ => 100,
        }
    }

    fn write_child(&self, out: &mut String, e: &Expr, parens: bool) {
        if parens {
            out.push('(');
            self.write_expr(out, e);
            out.push(')');
        } else {
            self.write_expr(out, e);
        }
    }

    fn write_expr(&self, out: &mut String, e: &Expr) {
        deep(|| self.write_expr_on_stack(out, e))
    }

    fn write_expr_on_stack(&self, out: &mut String, e: &Expr) {
        match e {
            Expr::Int { value, dtype } => {
                let _ = write!(out, "{value}{}", literal_suffix(*dtype));
            }
            Expr::Float { value, dtype } => {
                let _ = write!(out, "{}{}", fmt_float(*value), literal_suffix(*dtype));
            }
            Expr::Bool(b) => {
                let _ = write!(out, "{b}");
            }
            Expr::Var(v) => out.push_str(&self.names.var(*v)),
            Expr::Load { buffer, indices } => {
                let _ = write!(
                    out,
                    "{}[{}]",
                    self.names.buffer(*buffer),
                    self.list(indices)
                );
            }
            Expr::Binary { op, lhs, rhs } => match (op.symbol(), op.call_name()) {
                (Some(sym), _) => {
                    let p = op.precedence();
                    self.write_child(out, lhs, Self::prec(lhs) < p);
                    let _ = write!(out, " {sym} ");
                    self.write_child(out, rhs, Self::prec(rhs) <= p);
                }
                (None, Some(name)) => {
                    let _ = write!(out, "{name}({}, {})", self.expr(lhs), self.expr(rhs));
                }
                (None, None) => unreachable!("every BinOp is infix or a call"),
            },
            Expr::Not(x) => {
                out.push('!');
                self.write_child(out, x, Self::prec(x) < 100);
            }
            Expr::Select { cond, then, else_ } => {
                let _ = write!(
                    out,
                    "select({}, {}, {})",
                    self.expr(cond),
                    self.expr(then),
                    self.expr(else_)
                );
            }
            Expr::Cast { to, value } => {
                let _ = write!(out, "cast({to}, {})", self.expr(value));
            }
            Expr::Call { intrinsic, args } => {
                let _ = write!(out, "{}({})", intrinsic.name(), self.list(args));
            }
            Expr::Ramp {
                base,
                stride,
                lanes,
            } => {
                let _ = write!(
                    out,
                    "ramp({}, {}, {lanes})",
                    self.expr(base),
                    self.expr(stride)
                );
            }
            Expr::Broadcast { value, lanes } => {
                let _ = write!(out, "broadcast({}, {lanes})", self.expr(value));
            }
        }
    }
}

/// Whether `op` prints as an infix operator (for callers formatting their own forms).
pub fn is_infix(op: BinOp) -> bool {
    op.symbol().is_some()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tir::{PrimFuncBuilder, Scope};

    #[test]
    fn precedence_and_literals() {
        let mut b = PrimFuncBuilder::new("k");
        let a = b.input("a", [4], DType::F32);
        let i = b.loop_var("i");
        let j = b.loop_var("i");
        let f = b.finish(Stmt::seq([]));
        let e = (i - (j - 1)) * (Expr::from(i) + 2);
        assert_eq!(print_expr(&f, &e), "(%i - (%i_1 - 1)) * (%i + 2)");
        let e = Expr::from(i) - j - 1;
        assert_eq!(print_expr(&f, &e), "%i - %i_1 - 1");
        let e = Expr::load(a, [Expr::from(i).floordiv(2)])
            * Expr::float(0.5, DType::F16).cast(DType::F32);
        assert_eq!(
            print_expr(&f, &e),
            "%a[floordiv(%i, 2)] * cast(float32, 0.5f16)"
        );
        let e = !(Expr::from(i).lt(3).and(Expr::bool(true)));
        assert_eq!(print_expr(&f, &e), "!(%i < 3 && true)");
        assert_eq!(print_expr(&f, &Expr::i64(-3)), "-3i64");
        assert_eq!(print_expr(&f, &Expr::f32(f32::NEG_INFINITY)), "-inf");
        assert_eq!(print_expr(&f, &Expr::float(f64::NAN, DType::F16)), "nanf16");
        assert_eq!(print_expr(&f, &Expr::f32(1e-7)), "1.0000000116860974e-7");
    }

    #[test]
    fn names_are_made_unique_and_printable() {
        let mut b = PrimFuncBuilder::new("my kernel");
        let x = b.input("x y", [2], DType::F32);
        let t = b.alloc("x_y", [2], DType::F32, Scope::Local);
        let f = b.finish(Stmt::seq([]));
        let p = Printer::new(&f);
        assert_eq!(p.names().buffer(x), "%x_y");
        assert_eq!(p.names().buffer(t), "%x_y_1");
        assert_eq!(p.names().buffer(BufferId(5)), "%?buffer5");
        assert!(print(&f).starts_with("primfn @my_kernel(%x_y: Buffer[(2), float32, global])"));
    }
}
