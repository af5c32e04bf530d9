//! Random kernels for soundness tests of the bounds verifier: a loop nest (int32 and
//! int64 variables, small ranges that may be negative or empty) around one optionally
//! guarded access `%b[0] = %a[index]`, where `index` is a random integer expression —
//! wrapping products with extreme constants, `/`, `floordiv`, `floormod`, `min`, `max`,
//! `select` on random comparisons, casts between int32 and int64, and data-dependent
//! loads of `%x` (which holds [`XS`], extremes included). About half of them verify.
//! Drawn from a seed with SplitMix64, so one number reproduces a kernel.

use kiln_ir::DType;
use kiln_ir::rng::SplitMix64;

use crate::tir::semantics::int_range;
use crate::tir::{self, BinOp, Expr, PrimFunc, PrimFuncBuilder, Stmt, VarId};

/// Values of the data-dependent index buffer `%x`: extremes and small numbers.
pub const XS: [i64; 6] = [i64::MIN, -3, 0, 2, 7, i64::MAX];
/// Extent of the accessed buffer `%a`.
pub const EXTENT: usize = 10;

/// Draws from kiln's SplitMix64.
struct Rng(SplitMix64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0.next_u64() % n
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
pub fn kernel(seed: u64) -> PrimFunc {
    let mut rng = Rng(SplitMix64::new(seed));
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
