//! Deep but legal loop-IR programs — a 20,000-deep `select` chain inside a nest of
//! `if`s — verify, print, legalize and run in both interpreters: every recursive walk
//! grows its stack (`tir::visit::deep`), and the compiled fast path refuses trees deeper
//! than it can call through, leaving them to the reference interpreter. `Clone`, `Drop`,
//! `PartialEq` and `Debug` of a 200,000-deep expression and statement run on a 256 KiB
//! stack (`tir::tree`).

use kiln_ir::{DType, NDArray};
use kiln_te::tir::{self, BinOp, BufferId, Expr, ForKind, PrimFunc, PrimFuncBuilder, Stmt, VarId};

const DEPTH: i32 = 20_000;
const N: usize = 8;

/// `out[i] = i` for `i < N`, through `select(float(i) < 0.5, 0, select(float(i) < 1.5,
/// 1, ...))` (float conditions, so the verifier draws no facts from them) under
/// `DEPTH / 100` nested `if (i >= 0)`.
fn deep_kernel() -> PrimFunc {
    let mut b = PrimFuncBuilder::new("deep");
    let out = b.output("out", [N], DType::I32);
    let i = b.loop_var("i");
    let mut e = Expr::int(DEPTH);
    for k in (0..DEPTH).rev() {
        let below = Expr::from(i).cast(DType::F32).lt(k as f32 + 0.5);
        e = Expr::select(below, Expr::int(k), e);
    }
    let mut s = Stmt::store(out, [i.into()], e);
    for _ in 0..DEPTH / 100 {
        s = Stmt::if_then(Expr::from(i).ge(0), s);
    }
    b.finish(Stmt::serial(i, 0, N as i64, s))
}

#[test]
fn deep_programs_do_not_overflow_the_stack() {
    let result = std::thread::Builder::new()
        .stack_size(16 << 20)
        .spawn(|| {
            let f = deep_kernel();
            let errors = tir::verify(&f).err().map(|e| e.to_string());
            let text_len = f.to_string().len();
            let legal = tir::legalize(&f).expect("legalizes");
            assert!(legal == f, "nothing to legalize");
            drop(legal);
            let fast = tir::interp::prepare(&f).is_compiled();
            let mut args = [NDArray::zeros(vec![N], DType::I32)];
            tir::run(&f, &mut args).expect("runs");
            let [out] = args;
            drop(f);
            (errors, text_len, fast, out)
        })
        .expect("spawns")
        .join()
        .expect("no stack overflow");
    let (errors, text_len, fast, out) = result;
    assert_eq!(errors, None);
    assert!(text_len > DEPTH as usize * 20, "{text_len}");
    assert!(
        !fast,
        "the compiled fast path must refuse a 20,000-deep tree"
    );
    let want: Vec<i32> = (0..N as i32).collect();
    assert_eq!(out.as_slice::<i32>().expect("int32"), want.as_slice());
}

/// Runs `f` on a thread with a 256 KiB stack (a derived, recursive `Drop` of a
/// 200,000-deep tree needs tens of MiB).
fn on_small_stack<R: Send + 'static>(f: impl FnOnce() -> R + Send + 'static) -> R {
    std::thread::Builder::new()
        .stack_size(256 << 10)
        .spawn(f)
        .expect("spawns")
        .join()
        .expect("no stack overflow")
}

const VERY_DEEP: usize = 200_000;

/// `((((x + 0) + 1) + 2) ... )`, `VERY_DEEP` additions deep, with a `select`, a cast, a
/// call and a load on the way so every kind of link is crossed.
fn very_deep_expr(last: i32) -> Expr {
    let x = VarId(0);
    let mut e = Expr::from(x);
    for k in 0..VERY_DEEP as i32 {
        e = match k % 5 {
            0 => Expr::binary(BinOp::Add, e, Expr::int(k)),
            1 => Expr::select(Expr::Bool(true), e, Expr::int(k)),
            2 => Expr::Not(Box::new(e)),
            3 => Expr::Load {
                buffer: BufferId(0),
                indices: vec![e, Expr::int(k)],
            },
            _ => Expr::binary(BinOp::Max, Expr::int(k), e),
        };
    }
    Expr::binary(BinOp::Add, e, Expr::int(last))
}

/// `VERY_DEEP` nested statements — loops, `if`s, lets, allocations and one-element
/// sequences — around a store of `value`.
fn very_deep_stmt(value: Expr) -> Stmt {
    let mut s = Stmt::store(BufferId(0), [Expr::int(0)], value);
    for k in 0..VERY_DEEP {
        let v = VarId(k as u32 % 7);
        s = match k % 5 {
            0 => Stmt::for_(v, 0, 2, ForKind::Serial, s),
            1 => Stmt::if_then(Expr::Bool(true), s),
            2 => Stmt::Let {
                var: v,
                value: Expr::int(1),
                body: Box::new(s),
            },
            3 => Stmt::allocate(BufferId(1), s),
            _ => Stmt::Seq(vec![Stmt::Barrier, s]),
        };
    }
    s
}

#[test]
fn very_deep_trees_clone_compare_print_and_drop_on_a_small_stack() {
    let (same, differs, printed) = on_small_stack(|| {
        let e = very_deep_expr(1);
        let copy = e.clone();
        let other = very_deep_expr(2);
        let same = copy == e;
        let differs = other != e;
        let printed = format!("{e:?}").len();
        drop((e, copy, other));
        (same, differs, printed)
    });
    assert!(same, "a clone equals its original");
    assert!(differs, "trees differing at the root compare unequal");
    assert!(printed > VERY_DEEP * 10, "{printed}");

    let (same, differs) = on_small_stack(|| {
        let s = very_deep_stmt(very_deep_expr(1));
        let copy = s.clone();
        let other = very_deep_stmt(Expr::int(1));
        let same = copy == s;
        let differs = other != s;
        drop((s, copy, other));
        (same, differs)
    });
    assert!(same, "a clone equals its original");
    assert!(
        differs,
        "trees differing at the innermost store compare unequal"
    );
}

/// `Debug` is what `#[derive(Debug)]` printed.
#[test]
fn debug_output_is_the_derived_one() {
    let x = VarId(3);
    let e = Expr::select(
        Expr::from(x).lt(4),
        Expr::binary(BinOp::Add, Expr::from(x), Expr::int(1)),
        Expr::float(0.5, DType::F32),
    );
    assert_eq!(
        format!("{e:?}"),
        "Select { cond: Binary { op: Lt, lhs: Var(VarId(3)), rhs: Int { value: 4, dtype: \
         I32 } }, then: Binary { op: Add, lhs: Var(VarId(3)), rhs: Int { value: 1, dtype: \
         I32 } }, else_: Float { value: 0.5, dtype: F32 } }"
    );
    let s = Stmt::Seq(vec![
        Stmt::Barrier,
        Stmt::serial(x, 0, 2, Stmt::Seq(vec![])),
    ]);
    assert_eq!(
        format!("{s:?}"),
        "Seq([Barrier, For { var: VarId(3), min: 0, extent: 2, kind: Serial, body: Seq([]) }])"
    );
}
