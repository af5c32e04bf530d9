//! Legalization keeps values bit for bit and yields verified core loop IR: random
//! element-wise kernels (float expressions with `rsqrt` in float32 and float16, casts
//! to and from bool and int, selects, intrinsics), in scalar form and as stores of
//! 4-lane vectors (ramps, broadcasts, vector loads), run in the loop-IR interpreter
//! before and after `tir::legalize` on inputs with NaN, ±0, ±inf and negatives.

use kiln_ir::{DType, NDArray};
use kiln_te::tir::{self, BinOp, Expr, Intrinsic, PrimFunc, PrimFuncBuilder, Stmt};
use proptest::prelude::*;

const N: usize = 16;
const LANES: u32 = 4;

/// A random float32 expression over two inputs.
#[derive(Clone, Debug)]
enum G {
    A,
    B,
    Const(f32),
    Bin(usize, Box<G>, Box<G>),
    Call(usize, Box<G>),
    Rsqrt(Box<G>),
    /// `cast(float32, rsqrt(cast(float16, g)))`.
    RsqrtF16(Box<G>),
    /// `cast(float32, cast(bool, g))`.
    ViaBool(Box<G>),
    /// `cast(float32, cast(int32, g) < 3)`: an int and a comparison cast from bool.
    IntCmp(Box<G>),
    /// `select(g0 > g1, g2, g0)`.
    Select(Box<G>, Box<G>, Box<G>),
}

const OPS: [BinOp; 6] = [
    BinOp::Add,
    BinOp::Sub,
    BinOp::Mul,
    BinOp::Div,
    BinOp::Min,
    BinOp::Max,
];
const CALLS: [Intrinsic; 5] = [
    Intrinsic::Exp,
    Intrinsic::Sqrt,
    Intrinsic::Abs,
    Intrinsic::Floor,
    Intrinsic::Tanh,
];

fn expr_tree() -> impl Strategy<Value = G> {
    let leaf = prop_oneof![
        Just(G::A),
        Just(G::B),
        prop_oneof![Just(0.0f32), Just(-0.0), Just(2.5), Just(-1.0)].prop_map(G::Const),
    ];
    leaf.prop_recursive(4, 24, 3, |g| {
        prop_oneof![
            (0..OPS.len(), g.clone(), g.clone()).prop_map(|(o, a, b)| G::Bin(
                o,
                Box::new(a),
                Box::new(b)
            )),
            (0..CALLS.len(), g.clone()).prop_map(|(c, a)| G::Call(c, Box::new(a))),
            g.clone().prop_map(|a| G::Rsqrt(Box::new(a))),
            g.clone().prop_map(|a| G::RsqrtF16(Box::new(a))),
            g.clone().prop_map(|a| G::ViaBool(Box::new(a))),
            g.clone().prop_map(|a| G::IntCmp(Box::new(a))),
            (g.clone(), g.clone(), g).prop_map(|(a, b, c)| G::Select(
                Box::new(a),
                Box::new(b),
                Box::new(c)
            )),
        ]
    })
}

/// The expression of `g` with `a` and `b` the input values and `lanes` lanes.
fn build(g: &G, a: &Expr, b: &Expr, lanes: u32) -> Expr {
    let splat = |x: Expr| {
        if lanes > 1 {
            Expr::broadcast(x, lanes)
        } else {
            x
        }
    };
    let r = |x: &G| build(x, a, b, lanes);
    match g {
        G::A => a.clone(),
        G::B => b.clone(),
        G::Const(c) => splat(Expr::f32(*c)),
        G::Bin(o, x, y) => Expr::binary(OPS[*o], r(x), r(y)),
        G::Call(c, x) => r(x).unary(CALLS[*c]),
        G::Rsqrt(x) => r(x).unary(Intrinsic::Rsqrt),
        G::RsqrtF16(x) => r(x)
            .cast(DType::F16)
            .unary(Intrinsic::Rsqrt)
            .cast(DType::F32),
        G::ViaBool(x) => r(x).cast(DType::Bool).cast(DType::F32),
        G::IntCmp(x) => r(x)
            .cast(DType::I32)
            .lt(splat(Expr::int(3)))
            .cast(DType::F32),
        G::Select(x, y, z) => Expr::select(r(x).gt(r(y)), r(z), r(x)),
    }
}

/// `out[i] = g(a[i], b[i])`, scalar or as `N / LANES` stores of `LANES` lanes.
fn kernel(g: &G, vector: bool) -> PrimFunc {
    let mut fb = PrimFuncBuilder::new("k");
    let a = fb.input("a", [N], DType::F32);
    let b = fb.input("b", [N], DType::F32);
    let out = fb.output("out", [N], DType::F32);
    let i = fb.loop_var("i");
    let body = if vector {
        let ix = Expr::ramp(Expr::from(i) * LANES as i32, 1, LANES);
        let (x, y) = (Expr::load(a, [ix.clone()]), Expr::load(b, [ix.clone()]));
        Stmt::serial(
            i,
            0,
            (N as u32 / LANES) as i64,
            Stmt::store(out, [ix], build(g, &x, &y, LANES)),
        )
    } else {
        let (x, y) = (Expr::load(a, [i.into()]), Expr::load(b, [i.into()]));
        Stmt::serial(
            i,
            0,
            N as i64,
            Stmt::store(out, [i.into()], build(g, &x, &y, 1)),
        )
    };
    fb.finish(body)
}

const VALUES: [f32; 10] = [
    0.0,
    -0.0,
    1.5,
    -2.25,
    f32::NAN,
    f32::INFINITY,
    f32::NEG_INFINITY,
    1e-3,
    7.0,
    0.5,
];

fn run(f: &PrimFunc, a: &[f32], b: &[f32]) -> Vec<u32> {
    let mut args = [
        NDArray::from_vec(vec![N], a.to_vec()).unwrap(),
        NDArray::from_vec(vec![N], b.to_vec()).unwrap(),
        NDArray::zeros(vec![N], DType::F32),
    ];
    tir::run(f, &mut args).expect("runs");
    let out = args[2].as_slice::<f32>().unwrap();
    // NaNs compare by being NaN, not by payload.
    out.iter()
        .map(|x| if x.is_nan() { u32::MAX } else { x.to_bits() })
        .collect()
}

/// No `rsqrt`, no vector value, no cast to or from bool is left.
fn is_core(f: &PrimFunc) -> bool {
    let mut ok = true;
    f.body.visit(&mut |s| {
        for e in s.exprs() {
            e.visit(&mut |x| {
                ok &= !matches!(
                    x,
                    Expr::Ramp { .. }
                        | Expr::Broadcast { .. }
                        | Expr::Call {
                            intrinsic: Intrinsic::Rsqrt,
                            ..
                        }
                        | Expr::Cast {
                            to: DType::Bool,
                            ..
                        }
                );
                if let Expr::Cast { value, .. } = x {
                    ok &= tir::verify::type_of(f, value).is_ok_and(|t| !t.dtype.is_bool());
                }
            })
        }
    });
    ok
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn legalized_kernels_compute_the_same_bits(
        g in expr_tree(),
        vector in any::<bool>(),
        a in prop::collection::vec(0..VALUES.len(), N),
        b in prop::collection::vec(0..VALUES.len(), N),
    ) {
        let f = kernel(&g, vector);
        prop_assert!(tir::verify(&f).is_ok(), "{f}");
        let legal = tir::legalize(&f).expect("legalizes");
        prop_assert!(tir::verify(&legal).is_ok(), "{legal}");
        prop_assert!(is_core(&legal), "{legal}");
        let a: Vec<f32> = a.iter().map(|&k| VALUES[k]).collect();
        let b: Vec<f32> = b.iter().map(|&k| VALUES[k]).collect();
        prop_assert_eq!(run(&f, &a, &b), run(&legal, &a, &b), "{}\n{}", f, legal);
    }
}

/// A vector store reading the buffer it writes: every lane reads the old contents.
#[test]
fn an_overlapping_vector_store_stages_its_lanes() {
    let text = "primfn @k(out %a: Buffer[(8), float32, global]) {
  %a[ramp(1, 1, 4)] = %a[ramp(0, 1, 4)] * broadcast(2.0, 4)
}";
    let f = tir::parse(text).unwrap();
    let legal = tir::legalize(&f).unwrap();
    tir::verify(&legal).unwrap();
    let printed = legal.to_string();
    assert!(printed.contains("vectorized for"), "{printed}");
    let init: Vec<f32> = (0..8).map(|x| x as f32).collect();
    let go = |f: &PrimFunc| {
        let mut args = [NDArray::from_vec(vec![8], init.clone()).unwrap()];
        tir::run(f, &mut args).unwrap();
        args[0].as_slice::<f32>().unwrap().to_vec()
    };
    // Lane by lane without staging, a[2] would read the new a[1] (0), not 1.
    assert_eq!(go(&legal), vec![0.0, 0.0, 2.0, 4.0, 6.0, 5.0, 6.0, 7.0]);
    assert_eq!(go(&f), go(&legal));
}

/// A `let` of a vector value is outside the core and says so.
#[test]
fn a_vector_let_is_unsupported() {
    let text = "primfn @k(%a: Buffer[(4), float32, global], out %b: Buffer[(4), float32, global]) {
  let %v: float32x4 = %a[ramp(0, 1, 4)] {
    %b[ramp(0, 1, 4)] = %v
  }
}";
    let f = tir::parse(text).unwrap();
    tir::verify(&f).unwrap();
    let e = tir::legalize(&f).unwrap_err().to_string();
    assert!(e.contains("`let` of vector type float32x4"), "{e}");
}

/// Kernels already in the core come back unchanged.
#[test]
fn core_kernels_are_unchanged() {
    let g = G::Bin(0, Box::new(G::A), Box::new(G::Call(0, Box::new(G::B))));
    let f = kernel(&g, false);
    assert_eq!(tir::legalize(&f).unwrap(), f);
}
