//! Deep but legal loop-IR programs — a 20,000-deep `select` chain inside a nest of
//! `if`s — verify, print, legalize and run in both interpreters: every recursive walk
//! grows its stack (`tir::visit::deep`), and the compiled fast path refuses trees deeper
//! than it can call through, leaving them to the reference interpreter. The thread's
//! 16 MiB stack holds the derived `Clone`/`Drop` of such a tree (a few hundred bytes a
//! level), not the verifier's or the interpreter's frames at that depth.

use kiln_ir::{DType, NDArray};
use kiln_te::tir::{self, Expr, PrimFunc, PrimFuncBuilder, Stmt};

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

/// Takes the tree apart link by link (dropping it whole would recurse as deep as it is).
fn dismantle(f: PrimFunc) {
    let Stmt::For { body, .. } = f.body else {
        unreachable!("built as a loop")
    };
    let mut s = *body;
    while let Stmt::If { then, .. } = s {
        s = *then;
    }
    let Stmt::Store { value, .. } = s else {
        unreachable!("built as a store")
    };
    let mut e = value;
    while let Expr::Select { else_, .. } = e {
        e = *else_;
    }
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
            dismantle(legal);
            let fast = tir::interp::prepare(&f).is_compiled();
            let mut args = [NDArray::zeros(vec![N], DType::I32)];
            tir::run(&f, &mut args).expect("runs");
            let [out] = args;
            dismantle(f);
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
