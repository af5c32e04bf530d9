//! Sample kernels built with `PrimFuncBuilder` — matmul, padded 2-D convolution (with
//! `if` and with `select` guards), a vectorized add with ramps, a ragged kernel, and a
//! GPU-style shared-memory tiled matmul with barriers — each verified, round-tripped
//! through the text form, and run in the interpreter against directly computed values.

use kiln_ir::{DType, NDArray};
use kiln_te::Error;
use kiln_te::tir::{
    BufferId, Expr, ForKind, Intrinsic, PrimFunc, PrimFuncBuilder, Scope, Stmt, ThreadAxis,
    ValueType, parse, printer, run_with_inputs, verify,
};

fn ld(b: BufferId, idx: impl IntoIterator<Item = Expr>) -> Expr {
    Expr::load(b, idx)
}

fn matmul(m: usize, n: usize, k: usize) -> PrimFunc {
    let mut b = PrimFuncBuilder::new("matmul");
    let a = b.input("A", [m, k], DType::F32);
    let bb = b.input("B", [k, n], DType::F32);
    let c = b.output("C", [m, n], DType::F32);
    let acc = b.alloc("acc", [1], DType::F32, Scope::Local);
    let (i, j, kk) = (b.loop_var("i"), b.loop_var("j"), b.loop_var("k"));
    let z = || Expr::int(0);
    let body = Stmt::for_(
        i,
        0,
        m as i64,
        ForKind::Parallel,
        Stmt::serial(
            j,
            0,
            n as i64,
            Stmt::allocate(
                acc,
                Stmt::seq([
                    Stmt::store(acc, [z()], 0.0f32),
                    Stmt::serial(
                        kk,
                        0,
                        k as i64,
                        Stmt::store(
                            acc,
                            [z()],
                            ld(acc, [z()])
                                + ld(a, [i.into(), kk.into()]) * ld(bb, [kk.into(), j.into()]),
                        ),
                    ),
                    Stmt::store(c, [i.into(), j.into()], ld(acc, [z()])),
                ]),
            ),
        ),
    );
    b.finish(body)
}

fn naive_matmul(a: &NDArray, b: &NDArray, m: usize, n: usize, k: usize) -> Vec<f32> {
    let (a, b) = (a.to_vec::<f32>().unwrap(), b.to_vec::<f32>().unwrap());
    let mut c = vec![0f32; m * n];
    for i in 0..m {
        for j in 0..n {
            let mut acc = 0f32;
            for kk in 0..k {
                acc += a[i * k + kk] * b[kk * n + j];
            }
            c[i * n + j] = acc;
        }
    }
    c
}

/// conv2d NCHW, data 1x2x8x8, weight 3x2x3x3, stride 2, padding 1 -> 1x3x4x4.
fn conv2d(use_select: bool) -> PrimFunc {
    let mut b = PrimFuncBuilder::new(if use_select {
        "conv2d_select"
    } else {
        "conv2d"
    });
    let data = b.input("data", [1, 2, 8, 8], DType::F32);
    let w = b.input("weight", [3, 2, 3, 3], DType::F32);
    let out = b.output("out", [1, 3, 4, 4], DType::F32);
    let acc = b.alloc("acc", [1], DType::F32, Scope::Local);
    let [n, oc, oh, ow, ic, kh, kw] =
        ["n", "oc", "oh", "ow", "ic", "kh", "kw"].map(|s| b.loop_var(s));
    let h = || oh * 2 + kh - 1;
    let wi = || ow * 2 + kw - 1;
    let cond = h().ge(0).and(h().lt(8)).and(wi().ge(0)).and(wi().lt(8));
    let x = ld(data, [n.into(), ic.into(), h(), wi()]);
    let wv = ld(w, [oc.into(), ic.into(), kh.into(), kw.into()]);
    let a0 = || ld(acc, [Expr::int(0)]);
    let update = if use_select {
        Stmt::store(
            acc,
            [Expr::int(0)],
            a0() + Expr::select(cond, x, 0.0f32) * wv,
        )
    } else {
        Stmt::if_then(cond, Stmt::store(acc, [Expr::int(0)], a0() + x * wv))
    };
    let body = Stmt::serial(
        n,
        0,
        1,
        Stmt::serial(
            oc,
            0,
            3,
            Stmt::serial(
                oh,
                0,
                4,
                Stmt::serial(
                    ow,
                    0,
                    4,
                    Stmt::allocate(
                        acc,
                        Stmt::seq([
                            Stmt::store(acc, [Expr::int(0)], 0.0f32),
                            Stmt::serial(
                                ic,
                                0,
                                2,
                                Stmt::serial(kh, 0, 3, Stmt::serial(kw, 0, 3, update)),
                            ),
                            Stmt::store(out, [n.into(), oc.into(), oh.into(), ow.into()], a0()),
                        ]),
                    ),
                ),
            ),
        ),
    );
    b.finish(body)
}

fn naive_conv(data: &NDArray, w: &NDArray) -> Vec<f32> {
    let (d, w) = (data.to_vec::<f32>().unwrap(), w.to_vec::<f32>().unwrap());
    let mut out = vec![0f32; 3 * 16];
    for oc in 0..3 {
        for oh in 0..4i64 {
            for ow in 0..4i64 {
                let mut acc = 0f32;
                for ic in 0..2 {
                    for kh in 0..3i64 {
                        for kw in 0..3i64 {
                            let (h, x) = (oh * 2 + kh - 1, ow * 2 + kw - 1);
                            let v = if (0..8).contains(&h) && (0..8).contains(&x) {
                                d[ic * 64 + h as usize * 8 + x as usize]
                            } else {
                                0.0
                            };
                            acc += v * w[oc * 18 + ic * 9 + kh as usize * 3 + kw as usize];
                        }
                    }
                }
                out[oc * 16 + oh as usize * 4 + ow as usize] = acc;
            }
        }
    }
    out
}

/// c = a + b + 1 over 64 elements: a parallel loop of 4-lane ramp loads and stores.
fn vector_add() -> PrimFunc {
    let mut b = PrimFuncBuilder::new("fused_add");
    let a = b.input("a", [64], DType::F32);
    let bb = b.input("b", [64], DType::F32);
    let c = b.output("c", [64], DType::F32);
    let io = b.loop_var("i.outer");
    let r = || Expr::ramp(io * 4, 1, 4);
    let body = Stmt::for_(
        io,
        0,
        16,
        ForKind::Parallel,
        Stmt::store(
            c,
            [r()],
            ld(a, [r()]) + ld(bb, [r()]) + Expr::broadcast(1.0f32, 4),
        ),
    );
    b.finish(body)
}

/// c[i] = exp(a[i]) * 2 for i < 100, as 4 blocks of 32 threads with a ragged guard.
fn ragged_gpu() -> PrimFunc {
    let mut b = PrimFuncBuilder::new("ragged");
    let a = b.input("a", [100], DType::F32);
    let c = b.output("c", [100], DType::F32);
    let bx = b.loop_var("bx");
    let tx = b.loop_var("tx");
    let i = || bx * 32 + tx;
    let body = Stmt::thread(
        bx,
        ThreadAxis::BlockX,
        4,
        Stmt::thread(
            tx,
            ThreadAxis::ThreadX,
            32,
            Stmt::if_then(
                i().lt(100),
                Stmt::store(c, [i()], ld(a, [i()]).unary(Intrinsic::Exp) * 2.0f32),
            ),
        ),
    );
    b.finish(body)
}

/// 16x16x16 matmul in 4x4 tiles: blocks over output tiles, threads over tile elements,
/// A and B tiles staged in shared memory between barriers.
fn tiled_gpu_matmul(barriers: [bool; 2]) -> PrimFunc {
    let mut b = PrimFuncBuilder::new("tiled_matmul");
    let a = b.input("A", [16, 16], DType::F32);
    let bm = b.input("B", [16, 16], DType::F32);
    let c = b.output("C", [16, 16], DType::F32);
    let as_ = b.alloc("As", [4, 4], DType::F32, Scope::Shared);
    let bs = b.alloc("Bs", [4, 4], DType::F32, Scope::Shared);
    let acc = b.alloc("acc", [1], DType::F32, Scope::Local);
    let [by, bx, ty, tx, ko, ki] = ["by", "bx", "ty", "tx", "ko", "ki"].map(|s| b.loop_var(s));
    let z = || Expr::int(0);
    let mut step = vec![
        Stmt::store(
            as_,
            [ty.into(), tx.into()],
            ld(a, [by * 4 + ty, ko * 4 + tx]),
        ),
        Stmt::store(
            bs,
            [ty.into(), tx.into()],
            ld(bm, [ko * 4 + ty, bx * 4 + tx]),
        ),
    ];
    if barriers[0] {
        step.push(Stmt::Barrier);
    }
    step.push(Stmt::serial(
        ki,
        0,
        4,
        Stmt::store(
            acc,
            [z()],
            ld(acc, [z()]) + ld(as_, [ty.into(), ki.into()]) * ld(bs, [ki.into(), tx.into()]),
        ),
    ));
    if barriers[1] {
        step.push(Stmt::Barrier);
    }
    let thread_body = Stmt::allocate(
        acc,
        Stmt::seq([
            Stmt::store(acc, [z()], 0.0f32),
            Stmt::serial(ko, 0, 4, Stmt::seq(step)),
            Stmt::store(c, [by * 4 + ty, bx * 4 + tx], ld(acc, [z()])),
        ]),
    );
    let body = Stmt::thread(
        by,
        ThreadAxis::BlockY,
        4,
        Stmt::thread(
            bx,
            ThreadAxis::BlockX,
            4,
            Stmt::allocate(
                as_,
                Stmt::allocate(
                    bs,
                    Stmt::thread(
                        ty,
                        ThreadAxis::ThreadY,
                        4,
                        Stmt::thread(tx, ThreadAxis::ThreadX, 4, thread_body),
                    ),
                ),
            ),
        ),
    );
    b.finish(body)
}

fn all_kernels() -> Vec<PrimFunc> {
    vec![
        matmul(8, 6, 5),
        conv2d(false),
        conv2d(true),
        vector_add(),
        ragged_gpu(),
        tiled_gpu_matmul([true, true]),
    ]
}

#[test]
fn every_sample_kernel_verifies_and_round_trips() {
    for f in all_kernels() {
        verify(&f).unwrap_or_else(|e| panic!("{}\n{e}", f));
        let text = printer::print(&f);
        let g = parse(&text).unwrap_or_else(|e| panic!("{text}\n{e}"));
        assert_eq!(printer::print(&g), text);
        verify(&g).unwrap();
    }
}

#[test]
fn printed_form_reads_well() {
    let text = vector_add().to_string();
    assert_eq!(
        text,
        "primfn @fused_add(%a: Buffer[(64), float32, global], %b: Buffer[(64), float32, global], \
         out %c: Buffer[(64), float32, global]) {\n  parallel for (%i.outer, 0, 16) {\n    \
         %c[ramp(%i.outer * 4, 1, 4)] = %a[ramp(%i.outer * 4, 1, 4)] + %b[ramp(%i.outer * 4, 1, 4)] \
         + broadcast(1.0, 4)\n  }\n}\n"
    );
    let gpu = tiled_gpu_matmul([true, true]).to_string();
    assert!(
        gpu.contains("launch_thread blockIdx.y (%by, 0, 4) {"),
        "{gpu}"
    );
    assert!(
        gpu.contains("allocate %As: Buffer[(4, 4), float32, shared] {"),
        "{gpu}"
    );
    assert!(gpu.contains("barrier()"), "{gpu}");
}

#[test]
fn matmul_matches_naive() {
    let (a, b) = (
        NDArray::random([8, 5], DType::F32, 1),
        NDArray::random([5, 6], DType::F32, 2),
    );
    let f = matmul(8, 6, 5);
    let out = run_with_inputs(&f, &[a.clone(), b.clone()]).unwrap();
    assert_eq!(
        out[0].to_vec::<f32>().unwrap(),
        naive_matmul(&a, &b, 8, 6, 5)
    );
    // The parsed text computes the same.
    let g = parse(&f.to_string()).unwrap();
    assert_eq!(run_with_inputs(&g, &[a, b]).unwrap(), out);
}

#[test]
fn padded_conv_matches_naive_with_if_and_with_select() {
    let (d, w) = (
        NDArray::random([1, 2, 8, 8], DType::F32, 3),
        NDArray::random([3, 2, 3, 3], DType::F32, 4),
    );
    let want = naive_conv(&d, &w);
    for f in [conv2d(false), conv2d(true)] {
        let out = run_with_inputs(&f, &[d.clone(), w.clone()]).unwrap();
        assert_eq!(out[0].to_vec::<f32>().unwrap(), want, "{}", f.name);
    }
}

#[test]
fn vector_add_and_ragged_kernel_compute_in_f32() {
    let (a, b) = (
        NDArray::random([64], DType::F32, 5),
        NDArray::random([64], DType::F32, 6),
    );
    let out = run_with_inputs(&vector_add(), &[a.clone(), b.clone()]).unwrap();
    let (av, bv) = (a.to_vec::<f32>().unwrap(), b.to_vec::<f32>().unwrap());
    let want: Vec<f32> = av.iter().zip(&bv).map(|(x, y)| x + y + 1.0).collect();
    assert_eq!(out[0].to_vec::<f32>().unwrap(), want);

    let a = NDArray::random([100], DType::F32, 7);
    let out = run_with_inputs(&ragged_gpu(), std::slice::from_ref(&a)).unwrap();
    let want: Vec<f32> = a
        .to_vec::<f32>()
        .unwrap()
        .iter()
        .map(|x| x.exp() * 2.0)
        .collect();
    assert_eq!(out[0].to_vec::<f32>().unwrap(), want);
}

#[test]
fn shared_memory_tiled_matmul_equals_naive() {
    let (a, b) = (
        NDArray::random([16, 16], DType::F32, 8),
        NDArray::random([16, 16], DType::F32, 9),
    );
    let out = run_with_inputs(&tiled_gpu_matmul([true, true]), &[a.clone(), b.clone()]).unwrap();
    assert_eq!(
        out[0].to_vec::<f32>().unwrap(),
        naive_matmul(&a, &b, 16, 16, 16)
    );
}

#[test]
fn missing_barriers_are_reported_as_races() {
    let (a, b) = (
        NDArray::random([16, 16], DType::F32, 8),
        NDArray::random([16, 16], DType::F32, 9),
    );
    for barriers in [[false, true], [true, false]] {
        let f = tiled_gpu_matmul(barriers);
        verify(&f).unwrap();
        let err = run_with_inputs(&f, &[a.clone(), b.clone()])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("data race on shared buffer"),
            "{barriers:?}: {err}"
        );
    }
}

#[test]
fn divergent_barrier_is_an_error() {
    let f = parse(
        "primfn @k(out %c: Buffer[(8), float32, global]) {
          launch_thread threadIdx.x (%t, 0, 8) {
            if (%t < 4) { barrier() }
            %c[%t] = 1.0
          }
        }",
    )
    .unwrap();
    verify(&f).unwrap();
    let err = run_with_inputs(&f, &[]).unwrap_err().to_string();
    assert!(err.contains("barrier in divergent control flow"), "{err}");
}

#[test]
fn out_of_bounds_kernel_is_rejected_with_every_error() {
    let mut f = matmul(8, 6, 5);
    // Make the k loop run one step too far: two loads go out of bounds.
    fn bump(s: &mut Stmt) {
        match s {
            Stmt::For {
                extent, body, var, ..
            } => {
                if var.0 == 2 {
                    *extent += 1;
                }
                bump(body);
            }
            Stmt::Allocate { body, .. } => bump(body),
            Stmt::Seq(v) => v.iter_mut().for_each(bump),
            _ => {}
        }
    }
    bump(&mut f.body);
    let Err(Error::Verify(errs)) = verify(&f) else {
        panic!("expected verify errors")
    };
    let msgs: Vec<String> = errs.iter().map(|e| e.to_string()).collect();
    assert_eq!(
        msgs,
        [
            "load %A[%i, %k]: index 1 ranges over [0, 5] but buffer %A has extent 5 in dim 1 \
             (in @matmul, parallel for %i in [0, 8), for %j in [0, 6), allocate %acc, for %k in [0, 6))",
            "load %B[%k, %j]: index 0 ranges over [0, 5] but buffer %B has extent 5 in dim 0 \
             (in @matmul, parallel for %i in [0, 8), for %j in [0, 6), allocate %acc, for %k in [0, 6))",
        ]
    );
}

#[test]
fn bad_arguments_are_errors() {
    let f = matmul(2, 2, 2);
    let a = NDArray::zeros([2, 3], DType::F32);
    let err = run_with_inputs(&f, &[a.clone(), a]).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    assert!(run_with_inputs(&f, &[]).is_err());
}

#[test]
fn let_vectors_casts_and_f16() {
    let f = parse(
        "primfn @k(%a: Buffer[(8), float16, global], out %c: Buffer[(8), float32, global], out %d: Buffer[(2), int8, global]) {
          for (%i, 0, 2) {
            let %v: float16x4 = %a[ramp(%i * 4, 1, 4)] * broadcast(3.0f16, 4) {
              %c[ramp(%i * 4, 1, 4)] = cast(float32, %v)
            }
            %d[%i] = cast(int8, %i * 100 + 27)
          }
        }",
    )
    .unwrap();
    verify(&f).unwrap();
    assert_eq!(f.vars[1].ty, ValueType::vector(DType::F16, 4));
    let a = NDArray::random([8], DType::F16, 11);
    let out = run_with_inputs(&f, std::slice::from_ref(&a)).unwrap();
    let want = NDArray::from_f64(
        [8],
        DType::F16,
        a.to_f64_vec().iter().map(|x| x * 3.0).collect(),
    )
    .unwrap();
    assert_eq!(out[0].to_f64_vec(), want.to_f64_vec());
    assert_eq!(out[1].to_i64_vec(), vec![27, 127]);
}

#[test]
fn shared_tree_reduction_file_sums_each_block() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/filetests/run_shared_reduce.tir"
    );
    let f = parse(&std::fs::read_to_string(path).unwrap()).unwrap();
    let a = NDArray::random([2, 8], DType::F32, 0);
    let out = run_with_inputs(&f, std::slice::from_ref(&a)).unwrap();
    let v = a.to_vec::<f32>().unwrap();
    for b in 0..2 {
        let x = &v[b * 8..b * 8 + 8];
        // The tree order: ((x0+x4)+(x2+x6)) + ((x1+x5)+(x3+x7)).
        let want = ((x[0] + x[4]) + (x[2] + x[6])) + ((x[1] + x[5]) + (x[3] + x[7]));
        assert_eq!(out[0].to_vec::<f32>().unwrap()[b], want);
    }
}
