//! The bounds verifier is sound under wrapping integer semantics: random loop nests
//! around one guarded access, with random index expressions (wrapping products, floor
//! division and modulo, clamps, selects, casts, data-dependent loads of extreme
//! values); whenever the verifier accepts, an overflow-checking evaluator run over every
//! point of the (small) iteration space never reads out of bounds, and the affine spine
//! of every index (the `+ - *` a backend may fold into a wider address computation)
//! never wraps. Accepted kernels also run in the loop-IR interpreter without error.
//!
//! 256 cases by default; `KILN_CASES=1000000 cargo test -p kiln-te --test verify_sound`
//! for the long run (passed: 154 s wall, 37 s CPU in the dev profile, on a shared
//! two-core machine).

use kiln_ir::{DType, NDArray};
use kiln_te::tir::semantics::{floor_div, floor_mod, int_range, wrap_int};
use kiln_te::tir::{self, BinOp, Expr, PrimFunc, PrimFuncBuilder, Stmt, VarId};
use proptest::prelude::*;

/// Values of the data-dependent index buffer `%x`: extremes and small numbers.
const XS: [i64; 6] = [i64::MIN, -3, 0, 2, 7, i64::MAX];
/// Extent of the accessed buffer `%a`.
const EXTENT: usize = 10;

/// SplitMix64: a small deterministic generator driven by the proptest seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len() as u64) as usize]
    }
}

struct Gen {
    rng: Rng,
    vars: Vec<(VarId, DType)>,
    x: tir::BufferId,
}

impl Gen {
    fn constant(&mut self, d: DType) -> Expr {
        let (lo, hi) = int_range(d);
        let v = match self.rng.below(6) {
            0 => hi,
            1 => lo,
            2 => hi / 2 + 1,
            3 => 1 << (self.rng.below(if d == DType::I32 { 31 } else { 63 })),
            _ => self.rng.below(21) as i64 - 10,
        };
        Expr::int_of(v, d)
    }

    fn leaf(&mut self, d: DType) -> Expr {
        match self.rng.below(5) {
            0 | 1 => {
                let (v, vd) = self.rng.pick(&self.vars);
                if vd == d {
                    Expr::Var(v)
                } else {
                    Expr::Var(v).cast(d)
                }
            }
            2 => {
                let i = self.rng.below(XS.len() as u64 + 1) as i32;
                let load = Expr::load(self.x, [Expr::int(i)]);
                if d == DType::I64 { load } else { load.cast(d) }
            }
            _ => self.constant(d),
        }
    }

    fn expr(&mut self, d: DType, depth: u32) -> Expr {
        if depth == 0 || self.rng.below(4) == 0 {
            return self.leaf(d);
        }
        let ops = [
            BinOp::Add,
            BinOp::Sub,
            BinOp::Mul,
            BinOp::FloorDiv,
            BinOp::FloorMod,
            BinOp::Div,
            BinOp::Min,
            BinOp::Max,
        ];
        match self.rng.below(10) {
            0 => {
                let other = if d == DType::I32 {
                    DType::I64
                } else {
                    DType::I32
                };
                self.expr(other, depth - 1).cast(d)
            }
            1 => {
                let c = self.cond(depth - 1);
                Expr::select(c, self.expr(d, depth - 1), self.expr(d, depth - 1))
            }
            _ => {
                let op = self.rng.pick(&ops);
                let a = self.expr(d, depth - 1);
                let b = match op {
                    // Divisors are non-zero constants (division by zero is a clean
                    // run-time error, not what this test is about).
                    BinOp::FloorDiv | BinOp::FloorMod | BinOp::Div => {
                        let c = self.rng.pick(&[1i64, 2, 3, 7, 1 << 20, -1, -4]);
                        Expr::int_of(c, d)
                    }
                    _ => self.expr(d, depth - 1),
                };
                Expr::binary(op, a, b)
            }
        }
    }

    fn cond(&mut self, depth: u32) -> Expr {
        let d = self.rng.pick(&[DType::I32, DType::I64]);
        let op = self.rng.pick(&[
            BinOp::Lt,
            BinOp::Le,
            BinOp::Gt,
            BinOp::Ge,
            BinOp::Eq,
            BinOp::Ne,
        ]);
        let c = Expr::binary(op, self.expr(d, depth), self.expr(d, depth));
        match self.rng.below(4) {
            0 => c.and(self.cond(depth.saturating_sub(1))),
            1 => !c,
            _ => c,
        }
    }
}

/// A random kernel: loops around `if (guard) { %b[0] = %a[index] }`.
fn kernel(seed: u64) -> PrimFunc {
    let mut rng = Rng(seed);
    let mut b = PrimFuncBuilder::new("k");
    let a = b.input("a", [EXTENT], DType::F32);
    let x = b.input("x", [XS.len()], DType::I64);
    let out = b.output("b", [1], DType::F32);
    let nloops = 1 + rng.below(3);
    let mut loops = vec![];
    for k in 0..nloops {
        let d = rng.pick(&[DType::I32, DType::I64]);
        let v = b.var(&format!("i{k}"), tir::ValueType::scalar(d));
        loops.push((v, d, rng.below(9) as i64 - 4, rng.below(6) as i64));
    }
    let mut g = Gen {
        rng,
        vars: loops.iter().map(|&(v, d, _, _)| (v, d)).collect(),
        x,
    };
    let index_type = g.rng.pick(&[DType::I32, DType::I64]);
    let index = g.expr(index_type, 4);
    let store = Stmt::store(out, [Expr::int(0)], Expr::load(a, [index]));
    let mut body = match g.rng.below(3) {
        0 => store,
        _ => Stmt::if_then(g.cond(2), store),
    };
    for &(v, _, min, extent) in loops.iter().rev() {
        body = Stmt::serial(v, min, extent, body);
    }
    b.finish(body)
}

/// What an accepted kernel must never do (shown through `Debug`).
#[derive(Debug)]
#[allow(dead_code)]
enum Fault {
    /// A load outside its buffer.
    OutOfBounds(String),
    /// A `+ - *` on an index's affine spine whose true value left its dtype.
    SpineWrap(String),
}

/// The overflow-checking evaluator: values wrap to their dtype (the IR's semantics);
/// every load is bounds checked; `select` evaluates only the chosen side.
struct Eval<'a> {
    f: &'a PrimFunc,
    env: Vec<i64>,
}

enum Step {
    Value(i64),
    /// Division by zero (a clean run-time error).
    Trap,
}

impl Eval<'_> {
    fn dtype(&self, e: &Expr) -> DType {
        match e {
            Expr::Int { dtype, .. } => *dtype,
            Expr::Var(v) => self.f.vars[v.index()].ty.dtype,
            Expr::Load { buffer, .. } => self.f.buffers[buffer.index()].dtype,
            Expr::Binary { op, lhs, .. } => {
                if op.is_comparison() || op.is_logical() {
                    DType::Bool
                } else {
                    self.dtype(lhs)
                }
            }
            Expr::Select { then, .. } => self.dtype(then),
            Expr::Cast { to, .. } => *to,
            _ => DType::Bool,
        }
    }

    fn eval(&self, e: &Expr) -> Result<Step, Fault> {
        use Step::*;
        Ok(Value(match e {
            Expr::Int { value, .. } => *value,
            Expr::Bool(b) => *b as i64,
            Expr::Var(v) => self.env[v.index()],
            Expr::Load { buffer, indices } => {
                let Value(i) = self.eval(&indices[0])? else {
                    return Ok(Trap);
                };
                let n = self.f.buffers[buffer.index()].shape[0] as i64;
                if !(0..n).contains(&i) {
                    return Err(Fault::OutOfBounds(format!("{e:?} at {i}")));
                }
                XS[i as usize]
            }
            Expr::Not(x) => match self.eval(x)? {
                Value(v) => (v == 0) as i64,
                Trap => return Ok(Trap),
            },
            Expr::Cast { to, value } => match self.eval(value)? {
                Value(v) => wrap_int(v, *to),
                Trap => return Ok(Trap),
            },
            Expr::Select { cond, then, else_ } => {
                let Value(c) = self.eval(cond)? else {
                    return Ok(Trap);
                };
                return self.eval(if c != 0 { then } else { else_ });
            }
            Expr::Binary { op, lhs, rhs } => {
                let (Value(a), Value(b)) = (self.eval(lhs)?, self.eval(rhs)?) else {
                    return Ok(Trap);
                };
                let d = self.dtype(lhs);
                let w = |v: i64| wrap_int(v, d);
                match op {
                    BinOp::Add => w(a.wrapping_add(b)),
                    BinOp::Sub => w(a.wrapping_sub(b)),
                    BinOp::Mul => w(a.wrapping_mul(b)),
                    BinOp::Div => match a.checked_div(b) {
                        Some(q) => w(q),
                        None if b == 0 => return Ok(Trap),
                        None => w(a.wrapping_div(b)),
                    },
                    BinOp::FloorDiv => match floor_div(a, b) {
                        Some(q) => w(q),
                        None if b == 0 => return Ok(Trap),
                        None => w(a.wrapping_neg()),
                    },
                    BinOp::FloorMod => match floor_mod(a, b) {
                        Some(r) => r,
                        None => return Ok(Trap),
                    },
                    BinOp::Min => a.min(b),
                    BinOp::Max => a.max(b),
                    BinOp::Eq => (a == b) as i64,
                    BinOp::Ne => (a != b) as i64,
                    BinOp::Lt => (a < b) as i64,
                    BinOp::Le => (a <= b) as i64,
                    BinOp::Gt => (a > b) as i64,
                    BinOp::Ge => (a >= b) as i64,
                    BinOp::And => (a != 0 && b != 0) as i64,
                    BinOp::Or => (a != 0 || b != 0) as i64,
                }
            }
            other => panic!("the generator makes no {other:?}"),
        }))
    }

    /// The value of an index's affine spine computed without wrapping (as a backend
    /// folding it into a 64-bit address would), checked against its dtype.
    fn spine(&self, e: &Expr) -> Result<Option<i128>, Fault> {
        if let Expr::Binary {
            op: op @ (BinOp::Add | BinOp::Sub | BinOp::Mul),
            lhs,
            rhs,
        } = e
        {
            let (Some(a), Some(b)) = (self.spine(lhs)?, self.spine(rhs)?) else {
                return Ok(None);
            };
            let v = match op {
                BinOp::Add => a + b,
                BinOp::Sub => a - b,
                _ => a.checked_mul(b).unwrap_or(i128::MAX),
            };
            let (lo, hi) = int_range(self.dtype(lhs));
            if v < lo as i128 || v > hi as i128 {
                return Err(Fault::SpineWrap(format!("{e:?} = {v}")));
            }
            return Ok(Some(v));
        }
        Ok(match self.eval(e)? {
            Step::Value(v) => Some(v as i128),
            Step::Trap => None,
        })
    }

    /// Runs the body at the current point.
    fn stmt(&mut self, s: &Stmt) -> Result<(), Fault> {
        match s {
            Stmt::For {
                var,
                min,
                extent,
                body,
                ..
            } => {
                for i in *min..*min + *extent {
                    self.env[var.index()] = i;
                    self.stmt(body)?;
                }
                Ok(())
            }
            Stmt::If { cond, then, .. } => match self.eval(cond)? {
                Step::Value(0) | Step::Trap => Ok(()),
                Step::Value(_) => self.stmt(then),
            },
            Stmt::Store { value, .. } => {
                let Expr::Load { indices, .. } = value else {
                    panic!("the generator stores one load");
                };
                let Some(i) = self.spine(&indices[0])? else {
                    return Ok(());
                };
                if !(0..EXTENT as i128).contains(&i) {
                    return Err(Fault::OutOfBounds(format!("%a at {i}")));
                }
                Ok(())
            }
            other => panic!("the generator makes no {other:?}"),
        }
    }
}

fn cases() -> u32 {
    std::env::var("KILN_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(256)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn accepted_kernels_never_go_out_of_bounds_or_wrap_an_address(seed in any::<u64>()) {
        let f = kernel(seed);
        if tir::verify(&f).is_ok() {
            let mut ev = Eval { f: &f, env: vec![0; f.vars.len()] };
            if let Err(fault) = ev.stmt(&f.body) {
                panic!("accepted but {fault:?}:\n{f}");
            }
            let mut args = vec![
                NDArray::zeros(vec![EXTENT], DType::F32),
                NDArray::from_vec(vec![XS.len()], XS.to_vec()).unwrap(),
                NDArray::zeros(vec![1], DType::F32),
            ];
            if let Err(e) = tir::run(&f, &mut args) {
                let text = e.to_string();
                prop_assert!(text.contains("division by zero"), "{text}\n{f}");
            }
        }
    }
}

/// The generator reaches both outcomes often: a property that only ever sees rejected
/// kernels would prove nothing.
#[test]
fn the_generator_makes_accepted_and_refused_kernels() {
    let accepted = (0..2000u64)
        .filter(|&s| tir::verify(&kernel(s)).is_ok())
        .count();
    assert!(
        (200..1800).contains(&accepted),
        "{accepted} of 2000 accepted"
    );
}
