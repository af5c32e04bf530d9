//! The `microkernel` statement: a call to a named micro-kernel over declared regions of
//! buffers (what the `tensorize` schedule primitive leaves in place of a loop nest).
//!
//! A [`KernelCall`] names a [`MicroKernel`] (its kind and sizes) and one [`Operand`] per
//! tensor of the kernel's declaration — inputs first, then the one output. An operand is
//! a buffer, a base index per buffer dimension, and which buffer dimension each axis of
//! the declared tensor walks: element `(u, v, ..)` of the declared tensor is the buffer
//! element at `base` with `u` added on dimension `axes[0]`, `v` on `axes[1]`, and so on.
//!
//! The meaning of a call is its declaration, a TE compute
//! ([`crate::te::tensorize::declaration`]); [`expand`] replaces every call of a kernel by
//! that declaration lowered to loops over the operands' regions. The verifier proves the
//! expansion's accesses in bounds (so a call whose regions leave their buffers is
//! refused), the interpreters run it, and backends without the micro-kernel compile it;
//! the CPU backend calls its hand-written kernel instead.

use std::collections::HashMap;
use std::fmt;

use super::expr::Expr;
use super::func::PrimFunc;
use super::stmt::Stmt;
use super::types::{BufferId, VarId};
use crate::error::{Error, Result};

/// A micro-kernel and its sizes.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum MicroKernel {
    /// `C[i, j] = Σ_{r<k} A[i, r] · B[j, r]` for `i < m`, `j < n` (float32); operands
    /// `A` (`m × k`), `B` (`n × k`), `C` (`m × n`).
    Gemm {
        /// Rows of `A` and `C`.
        m: i64,
        /// Rows of `B`, columns of `C`.
        n: i64,
        /// The reduction's extent.
        k: i64,
    },
    /// A direct 2-D convolution over a tile of one image (float32):
    /// `C[p, y, x] = Σ_{c<ci, u<kh, v<kw} W[p, c, u, v] · X[c, y·sh + u·dh, x·sw + v·dw]`
    /// for `p < o`, `y < h`, `x < w`; operands `W` (`o × ci × kh × kw`), `X`
    /// (`ci × ((h-1)·sh + (kh-1)·dh + 1) × ((w-1)·sw + (kw-1)·dw + 1)`), `C` (`o × h × w`).
    Conv2d {
        /// Output channels.
        o: i64,
        /// Output rows.
        h: i64,
        /// Output columns.
        w: i64,
        /// Input channels.
        ci: i64,
        /// Kernel rows.
        kh: i64,
        /// Kernel columns.
        kw: i64,
        /// Row stride.
        sh: i64,
        /// Column stride.
        sw: i64,
        /// Row dilation.
        dh: i64,
        /// Column dilation.
        dw: i64,
    },
    /// A depthwise 2-D convolution over a tile of one image (float32):
    /// `C[p, y, x] = Σ_{u<kh, v<kw} W[p, u, v] · X[p, y·sh + u·dh, x·sw + v·dw]`
    /// for `p < o`, `y < h`, `x < w`; operands `W` (`o × kh × kw`), `X`
    /// (`o × ((h-1)·sh + (kh-1)·dh + 1) × ((w-1)·sw + (kw-1)·dw + 1)`), `C` (`o × h × w`).
    DepthwiseConv2d {
        /// Channels.
        o: i64,
        /// Output rows.
        h: i64,
        /// Output columns.
        w: i64,
        /// Kernel rows.
        kh: i64,
        /// Kernel columns.
        kw: i64,
        /// Row stride.
        sh: i64,
        /// Column stride.
        sw: i64,
        /// Row dilation.
        dh: i64,
        /// Column dilation.
        dw: i64,
    },
}

impl MicroKernel {
    /// The name in the text form.
    pub fn name(self) -> &'static str {
        match self {
            MicroKernel::Gemm { .. } => "gemm",
            MicroKernel::Conv2d { .. } => "conv2d",
            MicroKernel::DepthwiseConv2d { .. } => "depthwise_conv2d",
        }
    }

    /// The sizes, in the order the text form writes them.
    pub fn sizes(self) -> Vec<(&'static str, i64)> {
        match self {
            MicroKernel::Gemm { m, n, k } => vec![("m", m), ("n", n), ("k", k)],
            MicroKernel::Conv2d {
                o,
                h,
                w,
                ci,
                kh,
                kw,
                sh,
                sw,
                dh,
                dw,
            } => vec![
                ("o", o),
                ("h", h),
                ("w", w),
                ("ci", ci),
                ("kh", kh),
                ("kw", kw),
                ("sh", sh),
                ("sw", sw),
                ("dh", dh),
                ("dw", dw),
            ],
            MicroKernel::DepthwiseConv2d {
                o,
                h,
                w,
                kh,
                kw,
                sh,
                sw,
                dh,
                dw,
            } => vec![
                ("o", o),
                ("h", h),
                ("w", w),
                ("kh", kh),
                ("kw", kw),
                ("sh", sh),
                ("sw", sw),
                ("dh", dh),
                ("dw", dw),
            ],
        }
    }

    /// The kernel called `name` with `sizes` (as [`MicroKernel::sizes`] lists them).
    pub fn from_parts(name: &str, sizes: &[(String, i64)]) -> Result<MicroKernel> {
        let get = |key: &str| {
            sizes
                .iter()
                .find(|s| s.0 == key)
                .map(|s| s.1)
                .ok_or_else(|| {
                    Error::InvalidArgument(format!("microkernel {name}: missing size `{key}`"))
                })
        };
        let kernel = match name {
            "gemm" => MicroKernel::Gemm {
                m: get("m")?,
                n: get("n")?,
                k: get("k")?,
            },
            "conv2d" => MicroKernel::Conv2d {
                o: get("o")?,
                h: get("h")?,
                w: get("w")?,
                ci: get("ci")?,
                kh: get("kh")?,
                kw: get("kw")?,
                sh: get("sh")?,
                sw: get("sw")?,
                dh: get("dh")?,
                dw: get("dw")?,
            },
            "depthwise_conv2d" => MicroKernel::DepthwiseConv2d {
                o: get("o")?,
                h: get("h")?,
                w: get("w")?,
                kh: get("kh")?,
                kw: get("kw")?,
                sh: get("sh")?,
                sw: get("sw")?,
                dh: get("dh")?,
                dw: get("dw")?,
            },
            _ => {
                return Err(Error::InvalidArgument(format!(
                    "unknown microkernel `{name}` (known: gemm, conv2d, depthwise_conv2d)"
                )));
            }
        };
        if kernel.sizes().len() != sizes.len() {
            return Err(Error::InvalidArgument(format!(
                "microkernel {name}: expected sizes {:?}",
                kernel.sizes().iter().map(|s| s.0).collect::<Vec<_>>()
            )));
        }
        if kernel.sizes().iter().any(|s| s.1 < 1 || s.1 > 1 << 24) {
            return Err(Error::InvalidArgument(format!(
                "microkernel {name}: sizes must be from 1 to 2^24"
            )));
        }
        Ok(kernel)
    }

    /// The extents of each operand's declared tensor (inputs, then the output).
    pub fn operand_extents(self) -> Vec<Vec<i64>> {
        match self {
            MicroKernel::Gemm { m, n, k } => vec![vec![m, k], vec![n, k], vec![m, n]],
            MicroKernel::Conv2d {
                o,
                h,
                w,
                ci,
                kh,
                kw,
                sh,
                sw,
                dh,
                dw,
            } => vec![
                vec![o, ci, kh, kw],
                vec![
                    ci,
                    (h - 1) * sh + (kh - 1) * dh + 1,
                    (w - 1) * sw + (kw - 1) * dw + 1,
                ],
                vec![o, h, w],
            ],
            MicroKernel::DepthwiseConv2d {
                o,
                h,
                w,
                kh,
                kw,
                sh,
                sw,
                dh,
                dw,
            } => vec![
                vec![o, kh, kw],
                vec![
                    o,
                    (h - 1) * sh + (kh - 1) * dh + 1,
                    (w - 1) * sw + (kw - 1) * dw + 1,
                ],
                vec![o, h, w],
            ],
        }
    }
}

/// A region of a buffer seen as one declared tensor of a micro-kernel (see the module
/// doc).
#[derive(Clone, Debug, PartialEq)]
pub struct Operand {
    /// The buffer the region lies in.
    pub buffer: BufferId,
    /// One index per buffer dimension.
    pub base: Vec<Expr>,
    /// The buffer dimension each declared axis walks (distinct; one per axis of the
    /// declared tensor).
    pub axes: Vec<usize>,
}

/// A call of a micro-kernel.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelCall {
    /// The kernel and its sizes.
    pub kernel: MicroKernel,
    /// Inputs, then the output.
    pub operands: Vec<Operand>,
}

impl KernelCall {
    /// The buffer the call writes.
    pub fn output(&self) -> Option<BufferId> {
        self.operands.last().map(|o| o.buffer)
    }

    /// The index expressions the call holds.
    pub fn exprs(&self) -> Vec<&Expr> {
        self.operands.iter().flat_map(|o| o.base.iter()).collect()
    }

    /// The indices of declared element `uv` of operand `o`.
    fn indices(&self, o: usize, uv: Vec<Expr>) -> Vec<Expr> {
        let op = &self.operands[o];
        let mut idx = op.base.clone();
        for (d, e) in op.axes.iter().zip(uv) {
            if let Some(slot) = idx.get_mut(*d) {
                *slot = plus(slot.clone(), e);
            }
        }
        idx
    }

    /// Checks the call's shape against `func`: operand count, buffers, ranks, distinct
    /// axes inside the rank, float32 operands, and each declared extent within its
    /// buffer dimension. (Whether the regions are in bounds is the verifier's proof
    /// over the expansion.)
    pub fn check(&self, func: &PrimFunc) -> Result<()> {
        let ext = self.kernel.operand_extents();
        let bad =
            |m: String| Error::InvalidArgument(format!("microkernel {}: {m}", self.kernel.name()));
        if self.operands.len() != ext.len() {
            return Err(bad(format!(
                "expected {} operands, got {}",
                ext.len(),
                self.operands.len()
            )));
        }
        for (o, (op, e)) in self.operands.iter().zip(&ext).enumerate() {
            let b = func
                .buffer(op.buffer)
                .ok_or_else(|| bad(format!("operand {o}: unknown buffer")))?;
            if b.dtype != kiln_ir::DType::F32 {
                return Err(bad(format!("operand {o} (`{}`) is not float32", b.name)));
            }
            if op.base.len() != b.shape.len() {
                return Err(bad(format!(
                    "operand {o} (`{}`): {} base indices for a rank-{} buffer",
                    b.name,
                    op.base.len(),
                    b.shape.len()
                )));
            }
            let distinct = op
                .axes
                .iter()
                .enumerate()
                .all(|(i, d)| *d < b.shape.len() && !op.axes[..i].contains(d));
            if op.axes.len() != e.len() || !distinct {
                return Err(bad(format!(
                    "operand {o} (`{}`): axes {:?} are not {} distinct dimensions of its rank {}",
                    b.name,
                    op.axes,
                    e.len(),
                    b.shape.len()
                )));
            }
            for (a, &x) in op.axes.iter().zip(e) {
                if x > b.shape[*a] as i64 {
                    return Err(bad(format!(
                        "operand {o} (`{}`): extent {x} exceeds dimension {a} of size {}",
                        b.name, b.shape[*a]
                    )));
                }
            }
        }
        Ok(())
    }
}

fn plus(a: Expr, b: Expr) -> Expr {
    match (a.as_int(), b.as_int()) {
        (Some(0), _) => b,
        (_, Some(0)) => a,
        _ => a + b,
    }
}

impl fmt::Display for MicroKernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sizes: Vec<String> = self
            .sizes()
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        write!(f, "{}({})", self.name(), sizes.join(", "))
    }
}

/// `func` with every `microkernel` statement replaced by its declaration lowered to loops
/// over the operands' regions (see the module doc); `func` itself when it has none.
pub fn expand(func: &PrimFunc) -> Result<PrimFunc> {
    let mut has = false;
    func.body
        .visit(&mut |s| has |= matches!(s, Stmt::MicroKernel(_)));
    if !has {
        return Ok(func.clone());
    }
    let mut out = func.clone();
    let body = expand_stmt(&func.body, &mut out)?;
    out.body = body;
    Ok(out)
}

fn expand_stmt(s: &Stmt, func: &mut PrimFunc) -> Result<Stmt> {
    Ok(match s {
        Stmt::MicroKernel(call) => expand_call(call, func)?,
        Stmt::For {
            var,
            min,
            extent,
            kind,
            body,
        } => Stmt::for_(*var, *min, *extent, *kind, expand_stmt(body, func)?),
        Stmt::Allocate { buffer, body } => Stmt::allocate(*buffer, expand_stmt(body, func)?),
        Stmt::If { cond, then, else_ } => Stmt::If {
            cond: cond.clone(),
            then: Box::new(expand_stmt(then, func)?),
            else_: match else_ {
                Some(e) => Some(Box::new(expand_stmt(e, func)?)),
                None => None,
            },
        },
        Stmt::Let { var, value, body } => Stmt::let_(*var, value.clone(), expand_stmt(body, func)?),
        Stmt::Seq(v) => Stmt::Seq(
            v.iter()
                .map(|c| expand_stmt(c, func))
                .collect::<Result<_>>()?,
        ),
        Stmt::Store { .. } | Stmt::Barrier => s.clone(),
    })
}

/// One call as its declaration's loops: the declaration's variables become fresh
/// variables of `func`, its parameter accesses become operand accesses.
fn expand_call(call: &KernelCall, func: &mut PrimFunc) -> Result<Stmt> {
    call.check(func)?;
    let decl = crate::te::tensorize::declaration(call.kernel)?;
    let mut vars = HashMap::new();
    for (i, v) in decl.vars.iter().enumerate() {
        vars.insert(VarId(i as u32), func.add_var(v.name.clone(), v.ty));
    }
    let params: HashMap<BufferId, usize> = decl
        .params
        .iter()
        .enumerate()
        .map(|(i, &b)| (b, i))
        .collect();
    let mut cx = Remap { call, vars, params };
    cx.stmt(&decl.body)
}

struct Remap<'a> {
    call: &'a KernelCall,
    vars: HashMap<VarId, VarId>,
    params: HashMap<BufferId, usize>,
}

impl Remap<'_> {
    fn stmt(&mut self, s: &Stmt) -> Result<Stmt> {
        Ok(match s {
            Stmt::For {
                var,
                min,
                extent,
                kind,
                body,
            } => Stmt::for_(self.vars[var], *min, *extent, *kind, self.stmt(body)?),
            Stmt::Store {
                buffer,
                indices,
                value,
            } => {
                let (buffer, indices) = self.access(*buffer, indices)?;
                Stmt::store(buffer, indices, self.expr(value)?)
            }
            Stmt::Seq(v) => Stmt::Seq(v.iter().map(|c| self.stmt(c)).collect::<Result<_>>()?),
            Stmt::If { cond, then, else_ } => Stmt::If {
                cond: self.expr(cond)?,
                then: Box::new(self.stmt(then)?),
                else_: match else_ {
                    Some(e) => Some(Box::new(self.stmt(e)?)),
                    None => None,
                },
            },
            other => {
                return Err(Error::Unsupported(format!(
                    "microkernel {}: its declaration lowered to an unexpected statement {other:?}",
                    self.call.kernel
                )));
            }
        })
    }

    fn access(&mut self, buffer: BufferId, indices: &[Expr]) -> Result<(BufferId, Vec<Expr>)> {
        let o = *self.params.get(&buffer).ok_or_else(|| {
            Error::Unsupported(format!(
                "microkernel {}: its declaration accesses a non-parameter buffer",
                self.call.kernel
            ))
        })?;
        let uv: Vec<Expr> = indices
            .iter()
            .map(|i| self.expr(i))
            .collect::<Result<_>>()?;
        if uv.len() != self.call.operands[o].axes.len() {
            return Err(Error::Unsupported(format!(
                "microkernel {}: a declared tensor's rank differs from its operand's axes",
                self.call.kernel
            )));
        }
        Ok((self.call.operands[o].buffer, self.call.indices(o, uv)))
    }

    fn expr(&mut self, e: &Expr) -> Result<Expr> {
        Ok(match e {
            Expr::Var(v) => Expr::Var(*self.vars.get(v).unwrap_or(v)),
            Expr::Load { buffer, indices } => {
                let (buffer, indices) = self.access(*buffer, indices)?;
                Expr::Load { buffer, indices }
            }
            Expr::Binary { op, lhs, rhs } => Expr::Binary {
                op: *op,
                lhs: Box::new(self.expr(lhs)?),
                rhs: Box::new(self.expr(rhs)?),
            },
            Expr::Cast { to, value } => Expr::Cast {
                to: *to,
                value: Box::new(self.expr(value)?),
            },
            Expr::Int { .. } | Expr::Float { .. } | Expr::Bool(_) => e.clone(),
            other => {
                return Err(Error::Unsupported(format!(
                    "microkernel {}: its declaration lowered to an unexpected expression {other:?}",
                    self.call.kernel
                )));
            }
        })
    }
}
