//! The compiled fast path of the loop-IR interpreter: a kernel is translated once into a
//! tree of typed closures, then run on typed storage without allocating per value.
//!
//! Accepted kernels are the CPU-style ones: no thread-bound loops, barriers or shared
//! buffers, and only scalar values (no `ramp`/`broadcast`), every expression well typed
//! and every variable and local buffer used inside its scope. Anything else is refused
//! at compile time with the reason, and [`run`](super::run) falls back to the reference
//! interpreter, so every runtime failure the fast path can meet is one the reference
//! meets too, with the same message: an out-of-bounds load or store, or an integer
//! division by zero.
//!
//! Semantics are the reference's, bit for bit (the two share their arithmetic helpers):
//! integers are held as `i64` wrapped to their dtype's width after every operation,
//! float32 and float16 as `f32` (float16 rounded after every operation), bools as
//! `bool`; operands are evaluated left to right, both sides of `&&`/`||` included, and
//! `select` evaluates only the chosen side. Integer `+ - *` chains over variables are
//! folded into affine forms evaluated in wrapping `i64` and wrapped once — exact, since
//! wrapping to a width is reduction modulo a power of two.
//!
//! Variables live in slot arrays indexed by [`VarId`], buffers in typed vectors indexed
//! by [`BufferId`] with precomputed row-major strides; a load or store evaluates its
//! indices, checks each against its extent, and indexes by their dot product with the
//! strides. Local buffers are allocated once per run and zeroed on entry to their
//! `allocate`. Loops of every kind run serially.

use std::sync::Arc;

use kiln_ir::{DType, Data, NDArray};

use super::{Num, convert, float_intrinsic, int_div_op};
use crate::error::{Error, Result};
use crate::tir::affine::Affine;
use crate::tir::expr::{BinOp, Expr, Intrinsic, fmaximum, fminimum};
use crate::tir::func::PrimFunc;
use crate::tir::printer::Names;
use crate::tir::semantics::{Interval, float_to_int, round_float, wrap_int};
use crate::tir::stmt::{ForKind, Stmt};
use crate::tir::types::{BufferId, Scope};

/// A runtime failure; boxed so results stay two words wide.
type Trap = Box<Error>;
/// The result of a compiled expression or statement.
type R<T> = std::result::Result<T, Trap>;

type IntFn = Box<dyn Fn(&Frame) -> R<i64> + Send + Sync>;
type FloatFn = Box<dyn Fn(&Frame) -> R<f32> + Send + Sync>;
type BoolFn = Box<dyn Fn(&Frame) -> R<bool> + Send + Sync>;
type StmtFn = Box<dyn Fn(&mut Frame) -> R<()> + Send + Sync>;

/// The mutable state of one run: variable slots and buffer storage, by arena index.
struct Frame {
    ints: Vec<i64>,
    /// Strength-reduced affine forms (see [`Lin::reg`]).
    regs: Vec<i64>,
    floats: Vec<f32>,
    bools: Vec<bool>,
    fbufs: Vec<Vec<f32>>,
    ibufs: Vec<Vec<i64>>,
    bbufs: Vec<Vec<bool>>,
}

/// How a buffer's elements are held.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Kind {
    Int,
    Float,
    Bool,
}

fn kind_of(d: DType) -> Kind {
    if d.is_float() {
        Kind::Float
    } else if d.is_bool() {
        Kind::Bool
    } else {
        Kind::Int
    }
}

/// A dtype of `func` ([`PrimFunc::dtypes`]) that the fast path does not hold:
/// `float64`, `bfloat16` and the integers beyond `int8`, `uint8`, `int32`, `int64` (the
/// reference interpreter runs those kernels).
fn wide_dtype(func: &PrimFunc) -> Option<DType> {
    func.dtypes().into_iter().find(|d| {
        !matches!(
            d,
            DType::F32 | DType::F16 | DType::I8 | DType::U8 | DType::I32 | DType::I64 | DType::Bool
        )
    })
}

/// The type of a scalar value.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
struct Ty(DType);

/// A buffer of the compiled kernel.
#[derive(Clone, Debug)]
struct BufInfo {
    dtype: DType,
    shape: Vec<usize>,
    len: usize,
    /// Position among the parameters, for globals.
    param: Option<usize>,
    /// Whether the kernel stores to it.
    written: bool,
}

/// A kernel translated for the fast path; made by [`compile`], run any number of times.
pub struct CompiledKernel {
    name: String,
    params: Vec<BufferId>,
    bufs: Vec<Option<BufInfo>>,
    num_vars: usize,
    num_regs: usize,
    body: StmtFn,
}

impl std::fmt::Debug for CompiledKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompiledKernel")
            .field("name", &self.name)
            .field("params", &self.params)
            .finish_non_exhaustive()
    }
}

/// Translates `func` for the fast path, or says why it cannot (a thread-bound loop, a
/// barrier, a shared buffer, a vector value, an ill-typed or ill-scoped tree); such
/// kernels run in the reference interpreter. `microkernel` calls are compiled as their
/// declarations' loops.
pub fn compile(func: &PrimFunc) -> std::result::Result<CompiledKernel, String> {
    let expanded = crate::tir::microkernel::expand(func).map_err(|e| e.to_string())?;
    let func = &expanded;
    if let Some(d) = wide_dtype(func) {
        return Err(format!(
            "{d} values (the fast path holds floats as f32 and integers as signed i64)"
        ));
    }
    let mut bufs: Vec<Option<BufInfo>> = vec![None; func.buffers.len()];
    for (k, &p) in func.params.iter().enumerate() {
        let b = func
            .buffer(p)
            .ok_or_else(|| format!("parameter {p} is not in the buffer arena"))?;
        if b.scope != Scope::Global {
            return Err(format!("parameter {p} is not a global buffer"));
        }
        if bufs[p.index()].is_some() {
            return Err(format!("parameter {p} is listed twice"));
        }
        let len = b.numel().ok_or("buffer too large")?;
        bufs[p.index()] = Some(BufInfo {
            dtype: b.dtype,
            shape: b.shape.clone(),
            len,
            param: Some(k),
            written: false,
        });
    }
    let mut c = Compiler {
        func,
        names: Names::new(func),
        vars: vec![None; func.vars.len()],
        ranges: vec![None; func.vars.len()],
        depth: vec![None; func.vars.len()],
        loops: vec![],
        num_regs: 0,
        live: vec![false; func.buffers.len()],
        bufs,
        nesting: 0,
    };
    let body = c.stmt(&func.body)?;
    Ok(CompiledKernel {
        name: func.name.clone(),
        params: func.params.clone(),
        bufs: c.bufs,
        num_vars: func.vars.len(),
        num_regs: c.num_regs,
        body,
    })
}

impl CompiledKernel {
    /// Runs the kernel with one array per parameter (inputs then outputs), writing the
    /// parameters it stores to in place, as [`run`](super::run) does.
    pub fn run(&self, args: &mut [NDArray]) -> Result<()> {
        if args.len() != self.params.len() {
            return Err(Error::InvalidArgument(format!(
                "@{} takes {} buffers, got {}",
                self.name,
                self.params.len(),
                args.len()
            )));
        }
        let n = self.bufs.len();
        let mut f = Frame {
            ints: vec![0; self.num_vars],
            regs: vec![0; self.num_regs],
            floats: vec![0.0; self.num_vars],
            bools: vec![false; self.num_vars],
            fbufs: vec![vec![]; n],
            ibufs: vec![vec![]; n],
            bbufs: vec![vec![]; n],
        };
        for (id, b) in self.bufs.iter().enumerate() {
            let Some(b) = b else { continue };
            match b.param {
                Some(k) => {
                    let a = &args[k];
                    if a.shape() != b.shape.as_slice() || a.dtype() != b.dtype {
                        return Err(Error::InvalidArgument(format!(
                            "parameter {k} of @{} is {:?} {}, got an array of shape {:?} {}",
                            self.name,
                            b.shape,
                            b.dtype,
                            a.shape(),
                            a.dtype()
                        )));
                    }
                    match (kind_of(b.dtype), a.data()) {
                        // The reference holds floats as f64; the round trip is kept so
                        // even signalling NaNs come out as they do there.
                        (Kind::Float, Data::F32(v)) => {
                            f.fbufs[id] = v.iter().map(|&x| x as f64 as f32).collect()
                        }
                        (Kind::Float, d) => {
                            f.fbufs[id] = d.to_f64().into_iter().map(|x| x as f32).collect()
                        }
                        (Kind::Int, d) => f.ibufs[id] = d.to_i64(),
                        (Kind::Bool, d) => {
                            f.bbufs[id] = d.to_i64().into_iter().map(|x| x != 0).collect()
                        }
                    }
                }
                None => match kind_of(b.dtype) {
                    Kind::Float => f.fbufs[id] = vec![0.0; b.len],
                    Kind::Int => f.ibufs[id] = vec![0; b.len],
                    Kind::Bool => f.bbufs[id] = vec![false; b.len],
                },
            }
        }
        (self.body)(&mut f).map_err(|e| *e)?;
        for (id, b) in self.bufs.iter().enumerate() {
            let Some(b) = b else { continue };
            let (Some(k), true) = (b.param, b.written) else {
                continue;
            };
            let data = match kind_of(b.dtype) {
                Kind::Float if b.dtype == DType::F32 => Data::F32(std::mem::take(&mut f.fbufs[id])),
                Kind::Float => Data::from_f64(b.dtype, f.fbufs[id].iter().map(|&x| x as f64)),
                Kind::Int => Data::from_i64(b.dtype, f.ibufs[id].iter().copied()),
                Kind::Bool => Data::Bool(std::mem::take(&mut f.bbufs[id])),
            };
            args[k] = NDArray::new(b.shape.clone(), data)
                .map_err(|e| Error::Eval(format!("cannot rebuild output: {e}")))?;
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------
// Typed compiled expressions.

/// An integer expression: a constant, an affine form over integer variables, or code.
enum IntE {
    Const(i64),
    Lin(Lin),
    Load(Box<LoadE>),
    Dyn(IntFn),
}

/// `wrap(form)`: an affine form over variable slots, evaluated with wrapping `i64`
/// arithmetic and wrapped to `dtype`.
#[derive(Clone)]
struct Lin {
    form: Affine<usize>,
    dtype: DType,
    /// The register holding the unwrapped sum, kept up to date by the loops (strength
    /// reduction), if one was assigned.
    reg: Option<usize>,
}

impl Lin {
    fn new(form: Affine<usize>, dtype: DType) -> Lin {
        Lin {
            form,
            dtype,
            reg: None,
        }
    }

    #[inline(always)]
    fn eval(&self, f: &Frame) -> i64 {
        if let Some(k) = self.reg {
            return wrap_int(f.regs[k], self.dtype);
        }
        wrap_int(self.raw(f), self.dtype)
    }

    /// The unwrapped sum of the terms.
    #[inline(always)]
    fn raw(&self, f: &Frame) -> i64 {
        self.form.eval_wrapping(|&v| f.ints[v])
    }
}

impl IntE {
    #[inline]
    fn eval(&self, f: &Frame) -> R<i64> {
        match self {
            IntE::Const(c) => Ok(*c),
            IntE::Lin(l) => Ok(l.eval(f)),
            IntE::Load(l) => l.get(f),
            IntE::Dyn(g) => g(f),
        }
    }

    /// The affine form of a constant or affine expression.
    fn as_lin(&self, dtype: DType) -> Option<Lin> {
        match self {
            IntE::Const(c) => Some(Lin::new(Affine::constant(*c as i128)?, dtype)),
            IntE::Lin(l) => Some(l.clone()),
            IntE::Load(_) | IntE::Dyn(_) => None,
        }
    }

    /// An affine form made canonical: constants and single variables get their own shape.
    fn from_lin(l: Lin) -> IntE {
        if let Some(c) = l.form.as_const() {
            IntE::Const(wrap_int(c as i64, l.dtype))
        } else {
            IntE::Lin(l)
        }
    }
}

/// A float expression (float32 or float16 values, held as `f32`).
enum FloatE {
    Const(f32),
    Var(usize),
    Load(Box<LoadE>),
    /// float32 `a + b`.
    Add(Box<(FloatE, FloatE)>),
    /// float32 `a * b`.
    Mul(Box<(FloatE, FloatE)>),
    /// float32 `a + b * c`, rounded after the product and after the sum (Rust never
    /// contracts it into a fused multiply-add).
    MulAdd(Box<(FloatE, FloatE, FloatE)>),
    /// `select(c, a, b)`, evaluating only the chosen side.
    Select(Box<(BoolE, FloatE, FloatE)>),
    Dyn(FloatFn),
}

impl FloatE {
    #[inline]
    fn eval(&self, f: &Frame) -> R<f32> {
        match self {
            FloatE::Const(c) => Ok(*c),
            FloatE::Var(v) => Ok(f.floats[*v]),
            FloatE::Load(l) => l.get(f),
            FloatE::Add(p) => {
                let x = p.0.eval(f)?;
                Ok(x + p.1.eval(f)?)
            }
            FloatE::Mul(p) => {
                let x = p.0.eval(f)?;
                Ok(x * p.1.eval(f)?)
            }
            FloatE::MulAdd(p) => {
                let a = p.0.eval(f)?;
                let b = p.1.eval(f)?;
                Ok(a + b * p.2.eval(f)?)
            }
            FloatE::Select(p) => {
                if p.0.eval(f)? {
                    p.1.eval(f)
                } else {
                    p.2.eval(f)
                }
            }
            FloatE::Dyn(g) => g(f),
        }
    }
}

/// A bool expression.
enum BoolE {
    Const(bool),
    Var(usize),
    /// A conjunction of affine comparisons: pure, so it may stop at the first false.
    Conj(Box<[Cmp]>),
    Load(Box<LoadE>),
    Dyn(BoolFn),
}

impl BoolE {
    #[inline]
    fn eval(&self, f: &Frame) -> R<bool> {
        match self {
            BoolE::Const(c) => Ok(*c),
            BoolE::Var(v) => Ok(f.bools[*v]),
            BoolE::Conj(c) => Ok(c.iter().all(|c| c.eval(f))),
            BoolE::Load(l) => l.get(f),
            BoolE::Dyn(g) => g(f),
        }
    }
}

/// A compiled expression with its dtype.
enum CExpr {
    I(IntE, DType),
    F(FloatE, DType),
    B(BoolE),
}

impl CExpr {
    fn ty(&self) -> Ty {
        match self {
            CExpr::I(_, d) | CExpr::F(_, d) => Ty(*d),
            CExpr::B(_) => Ty(DType::Bool),
        }
    }

    /// A constant from one lane of the reference's number type.
    fn constant(n: Num, d: DType) -> CExpr {
        match n {
            Num::I(v) => CExpr::I(IntE::Const(v), d),
            Num::F(v) => CExpr::F(FloatE::Const(v as f32), d),
            Num::B(b) => CExpr::B(BoolE::Const(b)),
        }
    }
}

/// Rounds an `f32`-computed result to float16 when `f16`, as the reference does.
#[inline(always)]
fn round_to(x: f32, f16: bool) -> f32 {
    if f16 {
        round_float(x as f64, DType::F16) as f32
    } else {
        x
    }
}

/// Element storage of one kind in a frame.
trait Elem: Copy + Send + Sync + 'static {
    fn bufs(f: &Frame) -> &[Vec<Self>];
    fn bufs_mut(f: &mut Frame) -> &mut [Vec<Self>];
}

impl Elem for f32 {
    fn bufs(f: &Frame) -> &[Vec<f32>] {
        &f.fbufs
    }
    fn bufs_mut(f: &mut Frame) -> &mut [Vec<f32>] {
        &mut f.fbufs
    }
}

impl Elem for i64 {
    fn bufs(f: &Frame) -> &[Vec<i64>] {
        &f.ibufs
    }
    fn bufs_mut(f: &mut Frame) -> &mut [Vec<i64>] {
        &mut f.ibufs
    }
}

impl Elem for bool {
    fn bufs(f: &Frame) -> &[Vec<bool>] {
        &f.bbufs
    }
    fn bufs_mut(f: &mut Frame) -> &mut [Vec<bool>] {
        &mut f.bbufs
    }
}

/// A typed compiled expression yielding `T`.
trait Eval<T>: Send + Sync + 'static {
    fn run(&self, f: &Frame) -> R<T>;
}

impl Eval<i64> for IntE {
    #[inline(always)]
    fn run(&self, f: &Frame) -> R<i64> {
        self.eval(f)
    }
}

impl Eval<f32> for FloatE {
    #[inline(always)]
    fn run(&self, f: &Frame) -> R<f32> {
        self.eval(f)
    }
}

impl Eval<bool> for BoolE {
    #[inline(always)]
    fn run(&self, f: &Frame) -> R<bool> {
        self.eval(f)
    }
}

/// One dimension of a checked access: its index, extent and row-major stride.
struct Dim {
    idx: IntE,
    ext: u64,
    stride: usize,
}

/// How an access finds its element.
enum Addr {
    /// Every index is provably in bounds: the flat offset is one affine form (not
    /// wrapped; its value is the true, in-range offset).
    Flat(Lin),
    /// Indices checked one by one at run time; `name` is the buffer's, for errors.
    Checked { dims: Box<[Dim]>, name: Arc<str> },
}

impl Addr {
    /// The flat offset, or the out-of-bounds error naming the first bad index.
    #[inline(always)]
    fn offset(&self, f: &Frame, what: &str) -> R<usize> {
        match self {
            Addr::Flat(l) => Ok(l.eval(f) as usize),
            Addr::Checked { dims, .. } => {
                let (off, ok) = checked_offset(dims, f)?;
                if ok { Ok(off) } else { Err(self.oob(f, what)) }
            }
        }
    }

    /// The error for an access found out of bounds (its indices evaluate again: they
    /// are pure and succeeded the first time).
    #[cold]
    #[inline(never)]
    fn oob(&self, f: &Frame, what: &str) -> Trap {
        let Addr::Checked { dims, name } = self else {
            return Box::new(Error::Eval(format!("{what} a buffer out of bounds")));
        };
        for (d, dim) in dims.iter().enumerate() {
            let i = match dim.idx.eval(f) {
                Ok(i) => i,
                Err(e) => return e,
            };
            if i < 0 || i as u64 >= dim.ext {
                return Box::new(Error::Eval(format!(
                    "{what} {name} out of bounds: index {i} in dim {d} (extent {})",
                    dim.ext
                )));
            }
        }
        Box::new(Error::Eval(format!("{what} {name} out of bounds")))
    }
}

/// Evaluates the indices in order: the offset of the in-bounds ones and whether all were.
#[inline]
fn checked_offset(dims: &[Dim], f: &Frame) -> R<(usize, bool)> {
    let mut off = 0usize;
    let mut ok = true;
    for d in dims {
        let i = d.idx.eval(f)?;
        if (i as u64) < d.ext {
            off += i as usize * d.stride;
        } else {
            ok = false;
        }
    }
    Ok((off, ok))
}

/// A load: the buffer's arena slot and its address.
struct LoadE {
    slot: usize,
    addr: Addr,
}

impl LoadE {
    #[inline(always)]
    fn get<T: Elem>(&self, f: &Frame) -> R<T> {
        let off = self.addr.offset(f, "load from")?;
        Ok(T::bufs(f)[self.slot][off])
    }
}

/// A store of `value` (evaluated after the indices, before the bounds check, as in the
/// reference).
fn store<T: Elem, E: Eval<T>>(slot: usize, addr: Addr, value: E) -> StmtFn {
    match addr {
        Addr::Flat(l) => Box::new(move |f| {
            let v = value.run(f)?;
            let off = l.eval(f) as usize;
            T::bufs_mut(f)[slot][off] = v;
            Ok(())
        }),
        addr => Box::new(move |f| {
            let Addr::Checked { dims, .. } = &addr else {
                unreachable!("flat handled above")
            };
            let (off, ok) = checked_offset(dims, f)?;
            let v = value.run(f)?;
            if !ok {
                return Err(addr.oob(f, "store to"));
            }
            T::bufs_mut(f)[slot][off] = v;
            Ok(())
        }),
    }
}

/// One comparison of two affine forms (pure: it cannot fail).
struct Cmp {
    a: Lin,
    b: Lin,
    op: BinOp,
}

impl Cmp {
    #[inline]
    fn eval(&self, f: &Frame) -> bool {
        let (x, y) = (self.a.eval(f), self.b.eval(f));
        match self.op {
            BinOp::Eq => x == y,
            BinOp::Ne => x != y,
            BinOp::Lt => x < y,
            BinOp::Le => x <= y,
            BinOp::Gt => x > y,
            _ => x >= y,
        }
    }
}

// ---------------------------------------------------------------------------------------
// The translator.

/// How deep statements and expressions may nest in a compiled kernel (its closures
/// recurse that deep when it runs; far below what a thread's stack holds).
const MAX_NESTING: usize = 256;

struct Compiler<'a> {
    func: &'a PrimFunc,
    /// How deep the translation is in the tree (see [`MAX_NESTING`]).
    nesting: usize,
    names: Names,
    /// The type of each variable while it is in scope.
    vars: Vec<Option<Ty>>,
    /// The range of each integer variable's values while it is in scope, when known.
    ranges: Vec<Option<(i64, i64)>>,
    /// For loop variables that never wrap: the depth of their loop in `loops`.
    depth: Vec<Option<usize>>,
    /// The enclosing loops, outermost first: the registers each updates per iteration
    /// (the register, its affine form, and the form's coefficient of the loop variable).
    loops: Vec<Vec<(usize, Lin, i64)>>,
    num_regs: usize,
    /// Whether each local buffer is inside its allocation.
    live: Vec<bool>,
    bufs: Vec<Option<BufInfo>>,
}

type CResult<T> = std::result::Result<T, String>;

impl Compiler<'_> {
    fn stmt(&mut self, s: &Stmt) -> CResult<StmtFn> {
        self.nested(|c| c.stmt_at_depth(s))
    }

    /// Runs `f` one level deeper in the tree; refuses trees nested deeper than
    /// [`MAX_NESTING`]: the compiled closures call each other as deep as the tree is, at
    /// run time, so a deeper kernel runs in the reference interpreter instead.
    fn nested<T>(&mut self, f: impl FnOnce(&mut Self) -> CResult<T>) -> CResult<T> {
        if self.nesting >= MAX_NESTING {
            return Err(format!("a tree nested deeper than {MAX_NESTING}"));
        }
        self.nesting += 1;
        let r = f(self);
        self.nesting -= 1;
        r
    }

    fn stmt_at_depth(&mut self, s: &Stmt) -> CResult<StmtFn> {
        Ok(match s {
            Stmt::Seq(v) => {
                let mut parts = v
                    .iter()
                    .map(|c| self.stmt(c))
                    .collect::<CResult<Vec<_>>>()?;
                match parts.len() {
                    1 => parts.pop().expect("one part"),
                    _ => Box::new(move |f| parts.iter().try_for_each(|p| p(f))),
                }
            }
            Stmt::For {
                var,
                min,
                extent,
                kind,
                body,
            } => {
                if let ForKind::Thread(a) = kind {
                    return Err(format!("loop bound to {a}"));
                }
                let d = self
                    .func
                    .var(*var)
                    .ok_or_else(|| format!("{var} is not in the variable arena"))?
                    .ty
                    .dtype;
                if !d.is_int() {
                    return Err(format!("loop variable {var} of {d}"));
                }
                self.vars[var.index()] = Some(Ty(d));
                let (dlo, dhi) = dtype_range(d);
                let last = *min as i128 + *extent as i128 - 1;
                self.ranges[var.index()] = (*extent > 0 && *min as i128 >= dlo && last <= dhi)
                    .then_some((*min, last as i64));
                if self.ranges[var.index()].is_some() {
                    self.depth[var.index()] = Some(self.loops.len());
                }
                self.loops.push(vec![]);
                let body = self.stmt(body);
                let regs = self.loops.pop().expect("pushed above");
                self.vars[var.index()] = None;
                self.ranges[var.index()] = None;
                self.depth[var.index()] = None;
                let body = body?;
                let (slot, min, extent) = (var.index(), *min, (*extent).max(0));
                if regs.is_empty() {
                    return Ok(Box::new(move |f| {
                        for t in 0..extent {
                            f.ints[slot] = wrap_int(min.wrapping_add(t), d);
                            body(f)?;
                        }
                        Ok(())
                    }));
                }
                // The loop variable steps by one without wrapping, so each register
                // steps by its coefficient.
                let inits: Vec<(usize, Lin)> =
                    regs.iter().map(|(k, l, _)| (*k, l.clone())).collect();
                let steps: Vec<(usize, i64)> = regs.iter().map(|(k, _, c)| (*k, *c)).collect();
                Box::new(move |f| {
                    for t in 0..extent {
                        f.ints[slot] = wrap_int(min.wrapping_add(t), d);
                        if t == 0 {
                            for (k, l) in &inits {
                                f.regs[*k] = l.raw(f);
                            }
                        } else {
                            for &(k, c) in &steps {
                                f.regs[k] = f.regs[k].wrapping_add(c);
                            }
                        }
                        body(f)?;
                    }
                    Ok(())
                })
            }
            Stmt::Store {
                buffer,
                indices,
                value,
            } => {
                let (slot, addr, dtype) = self.access(*buffer, indices, true)?;
                let value = self.expr(value)?;
                if value.ty() != Ty(dtype) {
                    return Err(format!("store of {} to {dtype}", value.ty().0));
                }
                match value {
                    CExpr::I(e, _) => store::<i64, _>(slot, addr, e),
                    CExpr::F(e, _) => store::<f32, _>(slot, addr, e),
                    CExpr::B(e) => store::<bool, _>(slot, addr, e),
                }
            }
            Stmt::Allocate { buffer, body } => {
                let b = self
                    .func
                    .buffer(*buffer)
                    .ok_or_else(|| format!("allocate of {buffer}, not in the arena"))?;
                if b.scope != Scope::Local {
                    return Err(format!("allocation of a {} buffer", b.scope));
                }
                let len = b
                    .numel()
                    .filter(|&n| n <= 1 << 28)
                    .ok_or("allocation too large")?;
                let id = buffer.index();
                match &mut self.bufs[id] {
                    Some(info) if info.param.is_some() => {
                        return Err(format!("allocation of parameter {buffer}"));
                    }
                    Some(_) => {}
                    slot => {
                        *slot = Some(BufInfo {
                            dtype: b.dtype,
                            shape: b.shape.clone(),
                            len,
                            param: None,
                            written: false,
                        })
                    }
                }
                self.live[id] = true;
                let body = self.stmt(body)?;
                self.live[id] = false;
                match kind_of(b.dtype) {
                    Kind::Float => Box::new(move |f| {
                        f.fbufs[id].fill(0.0);
                        body(f)
                    }),
                    Kind::Int => Box::new(move |f| {
                        f.ibufs[id].fill(0);
                        body(f)
                    }),
                    Kind::Bool => Box::new(move |f| {
                        f.bbufs[id].fill(false);
                        body(f)
                    }),
                }
            }
            Stmt::If { cond, then, else_ } => {
                let CExpr::B(c) = self.expr(cond)? else {
                    return Err("non-bool condition".into());
                };
                let then = self.stmt(then)?;
                match else_ {
                    Some(e) => {
                        let e = self.stmt(e)?;
                        Box::new(move |f| if c.eval(f)? { then(f) } else { e(f) })
                    }
                    None => Box::new(move |f| if c.eval(f)? { then(f) } else { Ok(()) }),
                }
            }
            Stmt::Let { var, value, body } => {
                if var.index() >= self.vars.len() {
                    return Err(format!("{var} is not in the variable arena"));
                }
                let v = self.expr(value)?;
                let range = match &v {
                    CExpr::I(IntE::Const(c), _) => Some((*c, *c)),
                    CExpr::I(IntE::Lin(l), _) => {
                        self.range(l).map(|(lo, hi)| (lo as i64, hi as i64))
                    }
                    _ => None,
                };
                self.vars[var.index()] = Some(v.ty());
                self.ranges[var.index()] = range;
                let body = self.stmt(body)?;
                self.vars[var.index()] = None;
                self.ranges[var.index()] = None;
                let slot = var.index();
                match v {
                    CExpr::I(e, _) => Box::new(move |f| {
                        f.ints[slot] = e.eval(f)?;
                        body(f)
                    }),
                    CExpr::F(e, _) => Box::new(move |f| {
                        f.floats[slot] = e.eval(f)?;
                        body(f)
                    }),
                    CExpr::B(e) => Box::new(move |f| {
                        f.bools[slot] = e.eval(f)?;
                        body(f)
                    }),
                }
            }
            Stmt::Barrier => return Err("barrier".into()),
            Stmt::MicroKernel(_) => return Err("an unexpanded microkernel".into()),
        })
    }

    /// The arena slot, address and dtype of an access to `buffer`, checked for rank,
    /// scope and index types. Indices provably in bounds (from the loop ranges) fold
    /// into one flat affine offset; the others are checked at run time.
    fn access(
        &mut self,
        buffer: BufferId,
        indices: &[Expr],
        write: bool,
    ) -> CResult<(usize, Addr, DType)> {
        let id = buffer.index();
        let b = self
            .func
            .buffer(buffer)
            .ok_or_else(|| format!("access to {buffer}, not in the arena"))?;
        let live = self.live[id];
        match (b.scope, self.bufs.get_mut(id)) {
            (Scope::Global, Some(Some(info))) if info.param.is_some() => info.written |= write,
            (Scope::Local, Some(Some(_))) if live => {}
            _ => return Err(format!("access to {buffer} outside its scope")),
        }
        if indices.len() != b.shape.len() {
            return Err(format!(
                "{} indices for rank {}",
                indices.len(),
                b.shape.len()
            ));
        }
        let (shape, dtype) = (b.shape.clone(), b.dtype);
        let strides = kiln_ir::tensor::row_major_strides(&shape);
        let mut dims = Vec::with_capacity(shape.len());
        for ((e, &ext), &stride) in indices.iter().zip(&shape).zip(&strides) {
            let idx = match self.expr(e)? {
                CExpr::I(i, _) => i,
                other => return Err(format!("index of {}", other.ty().0)),
            };
            dims.push(Dim {
                idx,
                ext: ext as u64,
                stride,
            });
        }
        let mut flat = Some(Affine::zero());
        for d in &dims {
            let l = d.idx.as_lin(DType::I64);
            let proven = l
                .as_ref()
                .and_then(|l| self.range(l))
                .is_some_and(|(lo, hi)| lo >= 0 && hi < d.ext as i128);
            flat = match (flat, l) {
                (Some(acc), Some(l)) if proven => {
                    acc.add_scaled(&l.form, i128::try_from(d.stride).unwrap_or(i128::MAX))
                }
                _ => None,
            };
        }
        let addr = match flat {
            Some(form) => {
                let mut l = Lin::new(form, DType::I64);
                self.regify(&mut l);
                Addr::Flat(l)
            }
            None => {
                for d in &mut dims {
                    self.regify_int(&mut d.idx);
                }
                Addr::Checked {
                    dims: dims.into_boxed_slice(),
                    name: self.names.buffer(buffer).into(),
                }
            }
        };
        Ok((id, addr, dtype))
    }

    /// Assigns `l` a register updated by the innermost loop over its variables, when
    /// they are all loop variables that never wrap.
    fn regify(&mut self, l: &mut Lin) {
        if l.reg.is_some() || l.form.as_const().is_some() {
            return;
        }
        let mut inner: Option<(usize, i64)> = None;
        for &(v, c) in l.form.terms() {
            // Steps wrap modulo 2^64, as the register does.
            let c = c as i64;
            let Some(d) = self.depth.get(v).copied().flatten() else {
                return;
            };
            if inner.is_none_or(|(e, _)| d > e) {
                inner = Some((d, c));
            }
        }
        let Some((d, c)) = inner else { return };
        let k = self.num_regs;
        self.num_regs += 1;
        self.loops[d].push((k, l.clone(), c));
        l.reg = Some(k);
    }

    fn regify_int(&mut self, e: &mut IntE) {
        if let IntE::Lin(l) = e {
            self.regify(l);
        }
    }

    /// The range of an affine form's true value, if its variables have known ranges
    /// and it stays inside its dtype (so wrapping never changes it).
    fn range(&self, l: &Lin) -> Option<(i128, i128)> {
        let mut known = true;
        let r = l
            .form
            .range(|v| match self.ranges.get(*v).copied().flatten() {
                Some((a, b)) => Interval::new(a as i128, b as i128),
                None => {
                    known = false;
                    Interval::full()
                }
            });
        let (dlo, dhi) = dtype_range(l.dtype);
        match (r.lo(), r.hi()) {
            (Some(lo), Some(hi)) if known && !r.is_empty() && lo >= dlo && hi <= dhi => {
                Some((lo, hi))
            }
            _ => None,
        }
    }

    fn expr(&mut self, e: &Expr) -> CResult<CExpr> {
        self.nested(|c| c.expr_at_depth(e))
    }

    fn expr_at_depth(&mut self, e: &Expr) -> CResult<CExpr> {
        Ok(match e {
            Expr::Int { value, dtype } => {
                CExpr::constant(convert(Num::I(*value), *dtype, *dtype), *dtype)
            }
            Expr::Float { value, dtype } => {
                CExpr::constant(convert(Num::F(*value), *dtype, *dtype), *dtype)
            }
            Expr::Bool(b) => CExpr::B(BoolE::Const(*b)),
            Expr::Var(v) => {
                let Some(Some(Ty(d))) = self.vars.get(v.index()) else {
                    return Err(format!("{v} used outside its scope"));
                };
                let (d, slot) = (*d, v.index());
                match kind_of(d) {
                    Kind::Int => CExpr::I(IntE::Lin(Lin::new(Affine::atom(slot), d)), d),
                    Kind::Float => CExpr::F(FloatE::Var(slot), d),
                    Kind::Bool => CExpr::B(BoolE::Var(slot)),
                }
            }
            Expr::Load { buffer, indices } => {
                let (slot, addr, dtype) = self.access(*buffer, indices, false)?;
                let l = Box::new(LoadE { slot, addr });
                match kind_of(dtype) {
                    Kind::Int => CExpr::I(IntE::Load(l), dtype),
                    Kind::Float => CExpr::F(FloatE::Load(l), dtype),
                    Kind::Bool => CExpr::B(BoolE::Load(l)),
                }
            }
            Expr::Binary { op, lhs, rhs } => {
                let mut a = self.expr(lhs)?;
                let mut b = self.expr(rhs)?;
                if a.ty() != b.ty() {
                    return Err(format!("operands of {op:?} differ in type"));
                }
                if !matches!(op, BinOp::Add | BinOp::Sub | BinOp::Mul)
                    && let (CExpr::I(x, _), CExpr::I(y, _)) = (&mut a, &mut b)
                {
                    self.regify_int(x);
                    self.regify_int(y);
                }
                binary(*op, a, b)?
            }
            Expr::Not(x) => CExpr::B(match self.expr(x)? {
                CExpr::I(a, _) => BoolE::Dyn(Box::new(move |f| Ok(a.eval(f)? == 0))),
                CExpr::F(a, _) => BoolE::Dyn(Box::new(move |f| Ok(a.eval(f)? == 0.0))),
                CExpr::B(a) => BoolE::Dyn(Box::new(move |f| Ok(!a.eval(f)?))),
            }),
            Expr::Select { cond, then, else_ } => {
                let CExpr::B(c) = self.expr(cond)? else {
                    return Err("select with a non-bool condition".into());
                };
                let t = self.expr(then)?;
                let e = self.expr(else_)?;
                match (t, e) {
                    (CExpr::I(t, d), CExpr::I(e, d2)) if d == d2 => CExpr::I(
                        IntE::Dyn(Box::new(
                            move |f| {
                                if c.eval(f)? { t.eval(f) } else { e.eval(f) }
                            },
                        )),
                        d,
                    ),
                    (CExpr::F(t, d), CExpr::F(e, d2)) if d == d2 => {
                        CExpr::F(FloatE::Select(Box::new((c, t, e))), d)
                    }
                    (CExpr::B(t), CExpr::B(e)) => CExpr::B(BoolE::Dyn(Box::new(move |f| {
                        if c.eval(f)? { t.eval(f) } else { e.eval(f) }
                    }))),
                    _ => return Err("select arms differ in type".into()),
                }
            }
            Expr::Cast { to, value } => cast(self.expr(value)?, *to),
            Expr::Call { intrinsic, args } => {
                let args = args
                    .iter()
                    .map(|a| self.expr(a))
                    .collect::<CResult<Vec<_>>>()?;
                call(*intrinsic, args)?
            }
            Expr::Ramp { .. } | Expr::Broadcast { .. } => return Err("vector value".into()),
        })
    }
}

/// A binary operation on two operands of one type.
fn binary(op: BinOp, a: CExpr, b: CExpr) -> CResult<CExpr> {
    use BinOp::*;
    Ok(match (a, b) {
        (CExpr::I(x, d), CExpr::I(y, _)) => {
            if op.is_comparison() {
                return Ok(CExpr::B(int_compare(op, d, x, y)));
            }
            CExpr::I(int_binary(op, d, x, y)?, d)
        }
        (CExpr::F(x, d), CExpr::F(y, _)) => {
            if op.is_comparison() {
                macro_rules! cmp {
                    ($o:tt) => {
                        Box::new(move |f: &Frame| Ok(x.eval(f)? $o y.eval(f)?))
                    };
                }
                return Ok(CExpr::B(BoolE::Dyn(match op {
                    Eq => cmp!(==),
                    Ne => cmp!(!=),
                    Lt => cmp!(<),
                    Le => cmp!(<=),
                    Gt => cmp!(>),
                    _ => cmp!(>=),
                })));
            }
            let h = d == DType::F16;
            let (x, y) = match (h, op, x, y) {
                (false, Add, x, FloatE::Mul(p)) => {
                    let (b, c) = *p;
                    return Ok(CExpr::F(FloatE::MulAdd(Box::new((x, b, c))), d));
                }
                (false, Add, x, y) => return Ok(CExpr::F(FloatE::Add(Box::new((x, y))), d)),
                (false, Mul, x, y) => return Ok(CExpr::F(FloatE::Mul(Box::new((x, y))), d)),
                (_, _, x, y) => (x, y),
            };
            macro_rules! arith {
                (|$p:ident, $q:ident| $body:expr) => {
                    FloatE::Dyn(Box::new(move |f: &Frame| {
                        let $p = x.eval(f)?;
                        let $q = y.eval(f)?;
                        Ok(round_to($body, h))
                    }))
                };
            }
            let e = match op {
                Add => arith!(|p, q| p + q),
                Sub => arith!(|p, q| p - q),
                Mul => arith!(|p, q| p * q),
                Div => arith!(|p, q| p / q),
                Min => arith!(|p, q| fminimum(p, q)),
                Max => arith!(|p, q| fmaximum(p, q)),
                _ => return Err(format!("{op:?} on {d}")),
            };
            CExpr::F(e, d)
        }
        (CExpr::B(BoolE::Conj(x)), CExpr::B(BoolE::Conj(y))) if op == And => {
            // Both sides are pure, so evaluating them as one short-circuiting
            // conjunction gives the same value.
            let mut v = x.into_vec();
            v.extend(y.into_vec());
            CExpr::B(BoolE::Conj(v.into_boxed_slice()))
        }
        (CExpr::B(x), CExpr::B(y)) => {
            macro_rules! logic {
                (|$p:ident, $q:ident| $body:expr) => {
                    Box::new(move |f: &Frame| {
                        let $p = x.eval(f)?;
                        let $q = y.eval(f)?;
                        Ok($body)
                    })
                };
            }
            // Comparisons of bools compare them as 0 and 1, as the reference does.
            CExpr::B(BoolE::Dyn(match op {
                And => logic!(|p, q| p && q),
                Or => logic!(|p, q| p || q),
                Eq => logic!(|p, q| p == q),
                Ne => logic!(|p, q| p != q),
                Lt => logic!(|p, q| (p as i64) < (q as i64)),
                Le => logic!(|p, q| (p as i64) <= (q as i64)),
                Gt => logic!(|p, q| (p as i64) > (q as i64)),
                Ge => logic!(|p, q| (p as i64) >= (q as i64)),
                _ => return Err(format!("{op:?} on bool")),
            }))
        }
        _ => return Err(format!("operands of {op:?} differ in type")),
    })
}

fn int_compare(op: BinOp, d: DType, x: IntE, y: IntE) -> BoolE {
    if let (Some(a), Some(b)) = (x.as_lin(d), y.as_lin(d)) {
        return BoolE::Conj(Box::new([Cmp { a, b, op }]));
    }
    BoolE::Dyn(int_compare_dyn(op, x, y))
}

fn int_compare_dyn(op: BinOp, x: IntE, y: IntE) -> BoolFn {
    use BinOp::*;
    macro_rules! cmp {
        ($o:tt) => {
            match y {
                IntE::Const(c) => Box::new(move |f: &Frame| Ok(x.eval(f)? $o c)),
                y => Box::new(move |f: &Frame| Ok(x.eval(f)? $o y.eval(f)?)),
            }
        };
    }
    match op {
        Eq => cmp!(==),
        Ne => cmp!(!=),
        Lt => cmp!(<),
        Le => cmp!(<=),
        Gt => cmp!(>),
        _ => cmp!(>=),
    }
}

fn int_binary(op: BinOp, d: DType, x: IntE, y: IntE) -> CResult<IntE> {
    use BinOp::*;
    // `+ - *` of affine forms (and scaling by a constant) stay affine.
    if matches!(op, Add | Sub | Mul)
        && let (Some(a), Some(b)) = (x.as_lin(d), y.as_lin(d))
    {
        let r = match op {
            Add => a.form.add(&b.form),
            Sub => a.form.sub(&b.form),
            _ => a.form.mul(&b.form),
        };
        if let Some(r) = r {
            return Ok(IntE::from_lin(Lin::new(r, d)));
        }
    }
    macro_rules! arith {
        (|$p:ident, $q:ident| $body:expr) => {
            match y {
                // Division by a non-zero constant cannot fail; the common case.
                IntE::Const($q) => IntE::Dyn(Box::new(move |f: &Frame| {
                    let $p = x.eval(f)?;
                    Ok(wrap_int($body?, d))
                })),
                y => IntE::Dyn(Box::new(move |f: &Frame| {
                    let $p = x.eval(f)?;
                    let $q = y.eval(f)?;
                    Ok(wrap_int($body?, d))
                })),
            }
        };
    }
    Ok(match op {
        Add => arith!(|p, q| R::<i64>::Ok(p.wrapping_add(q))),
        Sub => arith!(|p, q| R::<i64>::Ok(p.wrapping_sub(q))),
        Mul => arith!(|p, q| R::<i64>::Ok(p.wrapping_mul(q))),
        Div => arith!(|p, q| int_div_op(Div, p, q).map_err(Box::new)),
        FloorDiv => arith!(|p, q| int_div_op(FloorDiv, p, q).map_err(Box::new)),
        FloorMod => arith!(|p, q| int_div_op(FloorMod, p, q).map_err(Box::new)),
        Min => arith!(|p, q| R::<i64>::Ok(p.min(q))),
        Max => arith!(|p, q| R::<i64>::Ok(p.max(q))),
        _ => return Err(format!("{op:?} on {d}")),
    })
}

/// `cast` with the reference's conversion rules.
fn cast(v: CExpr, to: DType) -> CExpr {
    match (v, kind_of(to)) {
        (CExpr::I(IntE::Const(c), from), _) => CExpr::constant(convert(Num::I(c), from, to), to),
        (CExpr::F(FloatE::Const(c), from), _) => {
            CExpr::constant(convert(Num::F(c as f64), from, to), to)
        }
        (CExpr::B(BoolE::Const(c)), _) => CExpr::constant(convert(Num::B(c), DType::Bool, to), to),
        (CExpr::I(x, _), Kind::Int) => CExpr::I(
            match x {
                IntE::Lin(mut l) => {
                    // Wrapping to the new width after the old is wrapping to the
                    // narrower one; widening keeps the old width's wrap.
                    if narrower_or_equal(to, l.dtype) {
                        l.dtype = to;
                        IntE::Lin(l)
                    } else {
                        IntE::Dyn(Box::new(move |f| Ok(wrap_int(l.eval(f), to))))
                    }
                }
                x => IntE::Dyn(Box::new(move |f| Ok(wrap_int(x.eval(f)?, to)))),
            },
            to,
        ),
        (CExpr::I(x, _), Kind::Float) => CExpr::F(
            FloatE::Dyn(Box::new(move |f| {
                Ok(round_float(x.eval(f)? as f64, to) as f32)
            })),
            to,
        ),
        (CExpr::I(x, _), Kind::Bool) => {
            CExpr::B(BoolE::Dyn(Box::new(move |f| Ok(x.eval(f)? != 0))))
        }
        (CExpr::F(x, _), Kind::Int) => CExpr::I(
            IntE::Dyn(Box::new(move |f| Ok(float_to_int(x.eval(f)? as f64, to)))),
            to,
        ),
        (CExpr::F(x, _), Kind::Float) => CExpr::F(
            FloatE::Dyn(Box::new(move |f| {
                Ok(round_float(x.eval(f)? as f64, to) as f32)
            })),
            to,
        ),
        (CExpr::F(x, _), Kind::Bool) => {
            CExpr::B(BoolE::Dyn(Box::new(move |f| Ok(x.eval(f)? != 0.0))))
        }
        (CExpr::B(x), Kind::Int) => CExpr::I(
            IntE::Dyn(Box::new(move |f| Ok(wrap_int(x.eval(f)? as i64, to)))),
            to,
        ),
        (CExpr::B(x), Kind::Float) => CExpr::F(
            FloatE::Dyn(Box::new(move |f| Ok(if x.eval(f)? { 1.0 } else { 0.0 }))),
            to,
        ),
        (CExpr::B(x), Kind::Bool) => CExpr::B(x),
    }
}

/// Whether every value of integer dtype `a` wraps the same way as through `b` first:
/// `a`'s width is at most `b`'s (wrapping modulo 2^a after 2^b is wrapping modulo 2^a).
/// The values of an integer dtype.
fn dtype_range(d: DType) -> (i128, i128) {
    match d {
        DType::I8 => (i8::MIN as i128, i8::MAX as i128),
        DType::U8 => (0, u8::MAX as i128),
        DType::I32 => (i32::MIN as i128, i32::MAX as i128),
        _ => (i64::MIN as i128, i64::MAX as i128),
    }
}

fn narrower_or_equal(a: DType, b: DType) -> bool {
    let bits = |d: DType| match d {
        DType::I8 | DType::U8 => 8,
        DType::I32 => 32,
        _ => 64,
    };
    bits(a) <= bits(b)
}

/// A math intrinsic, with the reference's implementations.
fn call(intrinsic: Intrinsic, mut args: Vec<CExpr>) -> CResult<CExpr> {
    if args.len() != intrinsic.arity() {
        return Err(format!(
            "`{}` with {} arguments",
            intrinsic.name(),
            args.len()
        ));
    }
    let t = args[0].ty();
    if args.iter().any(|a| a.ty() != t) {
        return Err(format!(
            "arguments of `{}` differ in type",
            intrinsic.name()
        ));
    }
    let d = t.0;
    if !d.is_float() {
        if intrinsic == Intrinsic::Abs
            && let Some(CExpr::I(x, _)) = args.pop()
        {
            return Ok(CExpr::I(
                IntE::Dyn(Box::new(move |f| {
                    Ok(wrap_int(x.eval(f)?.wrapping_abs(), d))
                })),
                d,
            ));
        }
        return Err(format!("`{}` of {d}", intrinsic.name()));
    }
    let h = d == DType::F16;
    let mut fs = args.into_iter().map(|a| match a {
        CExpr::F(x, _) => x,
        _ => unreachable!("checked float"),
    });
    let x = fs.next().expect("arity at least 1");
    macro_rules! unary {
        (|$p:ident| $body:expr) => {
            FloatE::Dyn(Box::new(move |f: &Frame| {
                let $p = x.eval(f)?;
                Ok(round_to($body, h))
            }))
        };
    }
    let e = match intrinsic {
        Intrinsic::Fma => {
            let (y, z) = (fs.next().expect("arity 3"), fs.next().expect("arity 3"));
            FloatE::Dyn(Box::new(move |f: &Frame| {
                let (p, q, r) = (x.eval(f)?, y.eval(f)?, z.eval(f)?);
                Ok(round_to(float_intrinsic(Intrinsic::Fma, p, q, r), h))
            }))
        }
        Intrinsic::Pow => {
            let y = fs.next().expect("arity 2");
            FloatE::Dyn(Box::new(move |f: &Frame| {
                let (p, q) = (x.eval(f)?, y.eval(f)?);
                Ok(round_to(float_intrinsic(Intrinsic::Pow, p, q, 0.0), h))
            }))
        }
        i => unary!(|p| float_intrinsic(i, p, 0.0, 0.0)),
    };
    Ok(CExpr::F(e, d))
}
