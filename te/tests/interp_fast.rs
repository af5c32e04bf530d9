//! Differential tests of the loop-IR interpreter's compiled fast path against the
//! tree-walking reference (`interp::compile(..).run` against `interp::run_reference`):
//! outputs must be bit-identical, and a failing kernel must fail with the same message.
//!
//! Kernels come from every suite: hand-written samples in the text form (matmul with a
//! local accumulator, padded convolutions guarded by `if` and by `select`, integer
//! division and casts, float16, intrinsics, `let`, nested allocations), the `.tir` file
//! tests, random schedules of the `te_*` computes, every op under the CPU default
//! schedule over random shapes and attributes, and the zoo MLP. CPU kernels must take
//! the fast path; GPU kernels (thread-bound loops) and vector kernels must be refused.

mod te_util;
mod topi_support;

use std::fs;
use std::path::Path;

use kiln_ir::DType::{self, *};
use kiln_ir::NDArray;
use kiln_ir::attrs::F64;
use kiln_ir::op::*;
use kiln_te::te::{Graph, Schedule, Tensor};
use kiln_te::tir::{self, PrimFunc, Stmt, interp};
use kiln_te::topi::{ScheduleKind, kernels_of};
use proptest::prelude::*;
use topi_support::{Arg, one_op, tt};

/// Runs `f` on `inputs` (outputs zero-filled) through both paths and asserts identical
/// results; returns whether the fast path accepted the kernel.
fn diff(f: &PrimFunc, inputs: &[NDArray]) -> bool {
    let mut args = inputs.to_vec();
    for &o in f.outputs() {
        let b = f.buffer(o).unwrap();
        args.push(NDArray::zeros(b.shape.clone(), b.dtype));
    }
    let Ok(k) = interp::compile(f) else {
        return false;
    };
    let mut fast = args.clone();
    let mut slow = args;
    let a = k.run(&mut fast).map_err(|e| e.to_string());
    let b = interp::run_reference(f, &mut slow).map_err(|e| e.to_string());
    assert_eq!(a, b, "results differ\n{f}");
    if a.is_ok() {
        for (n, (x, y)) in fast.iter().zip(&slow).enumerate() {
            assert_eq!(x.dtype(), y.dtype());
            assert_eq!(x.shape(), y.shape());
            assert!(
                x.to_le_bytes() == y.to_le_bytes(),
                "parameter {n} differs: fast {} reference {}\n{f}",
                x.preview(8),
                y.preview(8)
            );
        }
    }
    true
}

/// Random inputs for `f`'s parameters.
fn random_inputs(f: &PrimFunc, seed: u64) -> Vec<NDArray> {
    f.inputs()
        .iter()
        .enumerate()
        .map(|(k, &b)| {
            let b = f.buffer(b).unwrap();
            NDArray::random(b.shape.clone(), b.dtype, seed + k as u64)
        })
        .collect()
}

fn has_threads_or_vectors(f: &PrimFunc) -> bool {
    let text = f.to_string();
    let mut threads = false;
    f.body.visit(&mut |s| {
        threads |= matches!(
            s,
            Stmt::For {
                kind: tir::ForKind::Thread(_),
                ..
            } | Stmt::Barrier
        )
    });
    threads || text.contains("ramp(") || text.contains("broadcast(") || text.contains("shared")
}

/// Diffs `f`, asserting that the fast path takes it exactly when it is CPU-style.
fn diff_expect(f: &PrimFunc, inputs: &[NDArray]) {
    let cpu = !has_threads_or_vectors(f);
    let took = diff(f, inputs);
    assert_eq!(
        took,
        cpu,
        "fast path {} a kernel it should {}: {:?}\n{f}",
        if took { "took" } else { "refused" },
        if cpu { "take" } else { "refuse" },
        interp::compile(f).err()
    );
}

const SAMPLES: &[&str] = &[
    // Matmul with a local accumulator and a parallel outer loop.
    "primfn @matmul(%A: Buffer[(5, 7), float32, global], %B: Buffer[(7, 3), float32, global], out %C: Buffer[(5, 3), float32, global]) {
      parallel for (%i, 0, 5) { for (%j, 0, 3) {
        allocate %acc: Buffer[(1), float32, local] {
          %acc[0] = 0.0
          for (%k, 0, 7) { %acc[0] = %acc[0] + %A[%i, %k] * %B[%k, %j] }
          %C[%i, %j] = %acc[0]
        }
      } }
    }",
    // Padded 3x3 convolution guarded by `if`, stride 2.
    "primfn @conv_if(%d: Buffer[(1, 2, 8, 8), float32, global], %w: Buffer[(3, 2, 3, 3), float32, global], out %o: Buffer[(1, 3, 4, 4), float32, global]) {
      for (%c, 0, 3) { for (%y, 0, 4) { for (%x, 0, 4) {
        %o[0, %c, %y, %x] = 0.0
        for (%rc, 0, 2) { for (%ry, 0, 3) { for (%rx, 0, 3) {
          if (%y * 2 + %ry - 1 >= 0 && %y * 2 + %ry - 1 < 8 && %x * 2 + %rx - 1 >= 0 && %x * 2 + %rx - 1 < 8) {
            %o[0, %c, %y, %x] = %o[0, %c, %y, %x] + %d[0, %rc, %y * 2 + %ry - 1, %x * 2 + %rx - 1] * %w[%c, %rc, %ry, %rx]
          }
        } } }
      } } }
    }",
    // The same with `select`, floordiv/floormod indices over a fused loop.
    "primfn @conv_select(%d: Buffer[(1, 2, 8, 8), float32, global], %w: Buffer[(3, 2, 3, 3), float32, global], out %o: Buffer[(1, 3, 8, 8), float32, global]) {
      parallel for (%f, 0, 192) {
        %o[0, floordiv(%f, 64), floormod(floordiv(%f, 8), 8), floormod(%f, 8)] = 0.0
        for (%rc, 0, 2) { for (%ry, 0, 3) { unrolled for (%rx, 0, 3) {
          %o[0, floordiv(%f, 64), floormod(floordiv(%f, 8), 8), floormod(%f, 8)] = %o[0, floordiv(%f, 64), floormod(floordiv(%f, 8), 8), floormod(%f, 8)] + select(floormod(floordiv(%f, 8), 8) + %ry >= 1 && floormod(floordiv(%f, 8), 8) + %ry < 9 && floormod(%f, 8) + %rx >= 1 && floormod(%f, 8) + %rx < 9, %d[0, %rc, floormod(floordiv(%f, 8), 8) + %ry - 1, floormod(%f, 8) + %rx - 1], 0.0) * %w[floordiv(%f, 64), %rc, %ry, %rx]
        } } }
      }
    }",
    // Integer arithmetic: truncating and floor division, wrapping, min/max, abs, casts.
    "primfn @ints(%a: Buffer[(4, 6), int32, global], %b: Buffer[(6), int8, global], out %o: Buffer[(4, 6), int32, global], out %p: Buffer[(4, 6), uint8, global], out %q: Buffer[(4, 6), int64, global]) {
      for (%i, 0, 4) { for (%j, 0, 6) {
        %o[%i, %j] = %a[%i, %j] / (%j + 1) + floordiv(%a[%i, %j], 3 - %j) * floormod(%a[%i, %j] - 7, %j - 3) + min(%a[%i, %j], %i) - max(%j * 2, %a[%i, %j] * 1000000000)
        %p[%i, %j] = cast(uint8, %a[%i, %j] * 37 + cast(int32, %b[%j]) * 11) + abs(cast(uint8, %b[%j]))
        %q[%i, %j] = cast(int64, %a[%i, %j]) * 3000000000i64 + cast(int64, abs(%b[%j])) + cast(int64, %a[%i, %j] < 0 || %j == 2)
      } }
    }",
    // Float16: every op rounded; casts between float widths and integers; intrinsics.
    "primfn @half(%a: Buffer[(8), float16, global], %b: Buffer[(8), float32, global], out %o: Buffer[(8), float16, global], out %p: Buffer[(8), float32, global], out %r: Buffer[(8), int32, global]) {
      for (%i, 0, 8) {
        %o[%i] = %a[%i] * 1.001f16 + cast(float16, %b[%i]) / 3.0f16 - exp(%a[%i]) + fma(%a[%i], %a[%i], 0.1f16)
        %p[%i] = cast(float32, %a[%i]) + sigmoid(%b[%i]) * tanh(%b[%i]) + erf(%b[%i]) + sqrt(abs(%b[%i])) + rsqrt(abs(%b[%i]) + 1.0) + log(abs(%b[%i]) + 0.5) + pow(abs(%b[%i]), 1.5) + floor(%b[%i] * 3.0) - ceil(%b[%i]) + cast(float32, %i * 7)
        %r[%i] = cast(int32, %b[%i] * 100.0) + cast(int32, %a[%i] > 0.0f16) + cast(int32, cast(bool, %b[%i]))
      }
    }",
    // Let-bound values of every type, nested allocations, if/else, bool buffers.
    "primfn @lets(%a: Buffer[(3, 4), float32, global], %m: Buffer[(3, 4), bool, global], out %o: Buffer[(3, 4), float32, global], out %n: Buffer[(3, 4), bool, global]) {
      for (%i, 0, 3) {
        allocate %t: Buffer[(4), float32, local] {
          for (%j, 0, 4) {
            let %s: float32 = %a[%i, %j] * 2.0 {
              let %k: int32 = %i * 4 + %j {
                let %c: bool = %m[%i, %j] && %s > 0.0 {
                  if (%c) { %t[%j] = %s } else { %t[%j] = max(%s, -0.5) - cast(float32, %k) }
                  %n[%i, %j] = !%c || %m[%i, 3 - %j]
                }
              }
            }
          }
          for (%j, 0, 4) {
            allocate %u: Buffer[(2), float32, local] {
              %u[1] = %u[0] + %t[3 - %j]
              %o[%i, %j] = %u[1] + select(%j < 2, %t[%j], 0.0 - %t[%j])
            }
          }
        }
      }
    }",
    // A ragged tail guarded by `if` over a split loop.
    "primfn @ragged(%a: Buffer[(10), float32, global], out %o: Buffer[(10), float32, global]) {
      for (%x, 0, 3) { vectorized for (%y, 0, 4) {
        if (%x * 4 + %y < 10) { %o[%x * 4 + %y] = %a[%x * 4 + %y] * %a[9 - (%x * 4 + %y)] }
      } }
    }",
    // A store to an input and reads of it afterwards.
    "primfn @inplace(%a: Buffer[(4), int32, global], out %o: Buffer[(4), int32, global]) {
      for (%i, 0, 4) { %a[%i] = %a[%i] * 2 }
      for (%i, 0, 4) { %o[%i] = %a[3 - %i] + %a[%i] }
    }",
];

#[test]
fn sample_kernels_match_the_reference() {
    for text in SAMPLES {
        let f = tir::parse(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        tir::verify(&f).unwrap_or_else(|e| panic!("{e}\n{f}"));
        for seed in 0..4 {
            diff_expect(&f, &random_inputs(&f, seed));
        }
    }
}

#[test]
fn file_tests_match_the_reference() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/filetests");
    let mut taken = 0;
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "tir") {
            continue;
        }
        let text = fs::read_to_string(&path).unwrap();
        let body = text.split("// expected:").next().unwrap();
        let Ok(f) = tir::parse(body) else { continue };
        if tir::verify(&f).is_err() {
            // Unverified kernels may still run (the interpreter checks at run time).
            diff(&f, &random_inputs(&f, 1));
            continue;
        }
        diff_expect(&f, &random_inputs(&f, 1));
        taken += usize::from(interp::compile(&f).is_ok());
    }
    assert!(taken > 0, "no file test took the fast path");
}

#[test]
fn errors_match_the_reference() {
    for (text, want) in [
        (
            "primfn @k(%a: Buffer[(4), float32, global], out %c: Buffer[(4), float32, global]) {
              for (%i, 0, 4) { %c[%i] = %a[%i + 1] }
            }",
            "evaluation error: load from %a out of bounds: index 4 in dim 0 (extent 4)",
        ),
        (
            "primfn @k(%a: Buffer[(2, 4), float32, global], out %c: Buffer[(2, 4), float32, global]) {
              for (%i, 0, 2) { for (%j, 0, 4) { %c[%i, %j - %i] = %a[%i, %j] } }
            }",
            "evaluation error: store to %c out of bounds: index -1 in dim 1 (extent 4)",
        ),
        (
            "primfn @k(%a: Buffer[(4), int32, global], out %c: Buffer[(4), int32, global]) {
              for (%i, 0, 4) { %c[%i] = %a[%i] / (%i - 2) }
            }",
            "evaluation error: integer division by zero (Div)",
        ),
        (
            "primfn @k(%a: Buffer[(4), int32, global], out %c: Buffer[(4), int32, global]) {
              for (%i, 0, 4) { %c[%i] = floordiv(%a[%i], %i) }
            }",
            "evaluation error: integer division by zero (FloorDiv)",
        ),
        (
            "primfn @k(%a: Buffer[(4), int32, global], out %c: Buffer[(4), int32, global]) {
              for (%i, 0, 4) { %c[floormod(%i, %a[%i] * 0)] = 1 }
            }",
            "evaluation error: integer division by zero (FloorMod)",
        ),
        (
            // The value is evaluated before the store's bounds check (at %i = 1 the
            // store is out of bounds and the value divides by zero).
            "primfn @k(%a: Buffer[(4), int32, global], out %c: Buffer[(4), int32, global]) {
              for (%i, 0, 4) { %c[%i + 3] = %a[%i] / (%i - 1) }
            }",
            "evaluation error: integer division by zero (Div)",
        ),
        (
            "primfn @k(%a: Buffer[(4), int32, global], out %c: Buffer[(4), int32, global]) {
              for (%i, 0, 4) { %c[%i + 3] = %a[%i] / (%i - 3) }
            }",
            "evaluation error: store to %c out of bounds: index 4 in dim 0 (extent 4)",
        ),
        (
            // Both sides of `&&` are evaluated.
            "primfn @k(%a: Buffer[(4), int32, global], out %c: Buffer[(4), bool, global]) {
              for (%i, 0, 4) { %c[%i] = %i > 10 && %a[%i + 2] > 0 }
            }",
            "evaluation error: load from %a out of bounds: index 4 in dim 0 (extent 4)",
        ),
    ] {
        let f = tir::parse(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        let inputs = vec![NDArray::random(
            f.buffer(f.params[0]).unwrap().shape.clone(),
            f.buffer(f.params[0]).unwrap().dtype,
            5,
        )];
        let k = interp::compile(&f).unwrap_or_else(|e| panic!("refused: {e}\n{f}"));
        let mut args = inputs.clone();
        for &o in f.outputs() {
            let b = f.buffer(o).unwrap();
            args.push(NDArray::zeros(b.shape.clone(), b.dtype));
        }
        let got = k.run(&mut args).unwrap_err().to_string();
        assert_eq!(got, want);
        assert_eq!(tir::run_with_inputs(&f, &inputs).unwrap_err().to_string(), want);
        assert!(diff(&f, &inputs));
    }
}

#[test]
fn a_select_guard_keeps_a_padded_load_lazy() {
    // The load is out of bounds whenever the guard is false: only the chosen side runs.
    let f = tir::parse(
        "primfn @k(%a: Buffer[(4), float32, global], out %c: Buffer[(6), float32, global]) {
          for (%i, 0, 6) { %c[%i] = select(%i >= 1 && %i < 5, %a[%i - 1], -1.0) }
        }",
    )
    .unwrap();
    let a = NDArray::from_vec([4], vec![1.0f32, 2.0, 3.0, 4.0]).unwrap();
    assert!(diff(&f, std::slice::from_ref(&a)));
    let out = tir::run_with_inputs(&f, &[a]).unwrap();
    assert_eq!(
        out[0].to_vec::<f32>().unwrap(),
        vec![-1.0, 1.0, 2.0, 3.0, 4.0, -1.0]
    );
}

/// Float `max`/`min` edge values: NaN, both zeros, both infinities, finite values.
const EDGES: [f32; 7] = [
    f32::NAN,
    -0.0,
    0.0,
    f32::NEG_INFINITY,
    f32::INFINITY,
    -1.5,
    2.0,
];

#[test]
fn float_max_and_min_propagate_nan_and_order_zeros_on_both_paths() {
    // The loop IR's contract (IEEE 754-2019 maximum/minimum), on every operand pair.
    let f = tir::parse(
        "primfn @k(%a: Buffer[(49), float32, global], %b: Buffer[(49), float32, global],
                   out %mx: Buffer[(49), float32, global], out %mn: Buffer[(49), float32, global]) {
          for (%i, 0, 49) {
            %mx[%i] = max(%a[%i], %b[%i])
            %mn[%i] = min(%a[%i], %b[%i])
          }
        }",
    )
    .unwrap();
    let pairs: Vec<(f32, f32)> = EDGES
        .iter()
        .flat_map(|&x| EDGES.iter().map(move |&y| (x, y)))
        .collect();
    let a = NDArray::from_vec([49], pairs.iter().map(|p| p.0).collect()).unwrap();
    let b = NDArray::from_vec([49], pairs.iter().map(|p| p.1).collect()).unwrap();
    let inputs = [a, b];
    assert!(diff(&f, &inputs), "the fast path must take this kernel");
    let out = tir::run_with_inputs(&f, &inputs).unwrap();
    let (mx, mn) = (
        out[0].to_vec::<f32>().unwrap(),
        out[1].to_vec::<f32>().unwrap(),
    );
    for (k, &(x, y)) in pairs.iter().enumerate() {
        if x.is_nan() || y.is_nan() {
            assert!(mx[k].is_nan() && mn[k].is_nan(), "max/min({x}, {y})");
            continue;
        }
        let (hi, lo) = if x == 0.0 && y == 0.0 {
            // -0 < +0: max is +0 unless both are -0, min is -0 unless both are +0.
            let neg = (x.is_sign_negative(), y.is_sign_negative());
            (
                if neg.0 && neg.1 { -0.0 } else { 0.0 },
                if neg.0 || neg.1 { -0.0 } else { 0.0 },
            )
        } else {
            (x.max(y), x.min(y))
        };
        assert_eq!(mx[k].to_bits(), hi.to_bits(), "max({x:?}, {y:?})");
        assert_eq!(mn[k].to_bits(), lo.to_bits(), "min({x:?}, {y:?})");
    }
}

#[test]
fn wrong_arguments_are_errors() {
    let f = tir::parse(SAMPLES[0]).unwrap();
    let k = interp::compile(&f).unwrap();
    let mut few = vec![NDArray::zeros([5, 7], F32)];
    assert!(k.run(&mut few).is_err());
    let mut bad = vec![
        NDArray::zeros([5, 7], F32),
        NDArray::zeros([7, 4], F32),
        NDArray::zeros([5, 3], F32),
    ];
    assert!(k.run(&mut bad).is_err());
    assert!(tir::run(&f, &mut bad).is_err());
}

// ---------------------------------------------------------------------------------------
// Random schedules of the `te_*` computes.

#[derive(Clone, Debug)]
enum Prim {
    Split(usize, usize),
    Swap(usize, usize),
    Fuse(usize),
    Vectorize,
    Unroll(usize),
    Parallel(usize),
}

fn prim() -> impl Strategy<Value = Prim> {
    prop_oneof![
        3 => (0..6usize, 1..6usize).prop_map(|(a, f)| Prim::Split(a, f)),
        2 => (0..6usize, 0..6usize).prop_map(|(a, b)| Prim::Swap(a, b)),
        2 => (0..6usize).prop_map(Prim::Fuse),
        1 => Just(Prim::Vectorize),
        1 => (0..6usize).prop_map(Prim::Unroll),
        1 => (0..6usize).prop_map(Prim::Parallel),
    ]
}

fn apply(s: &mut Schedule, t: Tensor, p: &Prim) {
    let leaves = s.leaf_axes(t).unwrap();
    let n = leaves.len();
    let _ = match *p {
        Prim::Split(a, f) => s.split(t, leaves[a % n], f).map(|_| ()),
        Prim::Swap(a, b) => s.reorder(t, &[leaves[b % n], leaves[a % n]]).map(|_| ()),
        Prim::Fuse(a) if n >= 2 => {
            let a = a % (n - 1);
            s.fuse(t, leaves[a], leaves[a + 1]).map(|_| ())
        }
        Prim::Fuse(_) => Ok(()),
        Prim::Vectorize => s.vectorize(t, leaves[n - 1]),
        Prim::Unroll(a) => s.unroll(t, leaves[a % n]),
        Prim::Parallel(a) => s.parallel(t, leaves[a % n]),
    };
}

fn build(kind: usize, dims: [usize; 5]) -> (Graph, Tensor, Option<Tensor>) {
    match kind {
        0 => {
            let (g, add, y) = te_util::bias_relu(dims[0], dims[1]);
            (g, y, Some(add))
        }
        1 => {
            let (g, _, _, c) = te_util::matmul(dims[0], dims[1], dims[2]);
            (g, c, None)
        }
        _ => {
            let (g, pad, conv) = te_util::conv2d(
                dims[0].min(2),
                dims[1] + 2,
                dims[2] + 2,
                dims[3].min(2),
                dims[4] % 2,
            );
            (g, conv, Some(pad))
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: te_util::cases(48), ..ProptestConfig::default() })]

    #[test]
    fn random_schedules_match_the_reference(
        kind in 0..3usize,
        dims in proptest::array::uniform5(1..6usize),
        prims in prop::collection::vec(prim(), 0..8),
        producer_prims in prop::collection::vec(prim(), 0..4),
        placement in 0..3usize,
        at in 0..8usize,
        seed in any::<u64>(),
    ) {
        let (g, out, producer) = build(kind, dims);
        let mut s = Schedule::new(&g, &[out]).unwrap();
        for p in &prims {
            apply(&mut s, out, p);
        }
        if let Some(pr) = producer {
            for p in &producer_prims {
                apply(&mut s, pr, p);
            }
            match placement {
                0 => {}
                1 => { let _ = s.compute_inline(pr); }
                _ => {
                    let leaves = s.leaf_axes(out).unwrap();
                    let axis = leaves[at % leaves.len()];
                    if s.stage(out).unwrap().kinds.get(&axis) != Some(&tir::ForKind::Vectorized) {
                        let _ = s.compute_at(pr, out, axis);
                    }
                }
            }
        }
        let f = s.lower("scheduled").unwrap();
        tir::verify(&f).unwrap();
        diff_expect(&f, &random_inputs(&f, seed % 1000));
    }
}

// ---------------------------------------------------------------------------------------
// Every op under the CPU (and GPU) default schedules.

/// One op with its arguments, chosen by `k` from the op set, shaped by `s` and `x`.
fn op_case(k: usize, s: &[usize], x: [usize; 6], dt: DType) -> (Op, Vec<Arg>) {
    let t = |shape: &[usize], d: DType| Arg::T(tt(shape, d));
    let r = s.len();
    let axis = (x[0] % r) as i64 - (x[1] % 2) as i64 * r as i64;
    let float = if dt.is_float() { dt } else { F32 };
    match k {
        0 => (
            Unary::new(UnaryKind::ALL[x[0] % UnaryKind::ALL.len()]).into(),
            vec![t(s, float)],
        ),
        1 => (
            Unary::new([UnaryKind::Relu, UnaryKind::Negative, UnaryKind::Abs][x[0] % 3]).into(),
            vec![t(s, dt)],
        ),
        2 => {
            let other: Vec<usize> = s
                .iter()
                .enumerate()
                .map(|(i, &d)| if x[1] & (1 << i) != 0 { 1 } else { d })
                .collect();
            (
                Binary::new(BinaryKind::ALL[x[0] % BinaryKind::ALL.len()]).into(),
                vec![t(s, dt), t(&other[x[2] % 2..], dt)],
            )
        }
        3 => (
            Clip::new(-(x[0] as f64) / 3.0, x[1] as f64 / 2.0).into(),
            vec![t(s, dt)],
        ),
        4 => (
            Cast::new([F32, I32, I8, U8, I64, Bool, F16][x[0] % 7]).into(),
            vec![t(s, dt)],
        ),
        5 => (Where.into(), vec![t(s, Bool), t(s, dt), t(s, dt)]),
        6 => {
            let kind = ReduceKind::ALL[x[0] % ReduceKind::ALL.len()];
            let d = if kind == ReduceKind::Mean { float } else { dt };
            let axes = vec![axis];
            let op = Reduce {
                kind,
                axis: (x[2] % 3 != 0).then_some(axes),
                keepdims: x[3] % 2 == 0,
                exclude: x[4] % 4 == 0,
            };
            (op.into(), vec![t(s, d)])
        }
        7 => {
            let g = 1 + x[0] % 2;
            let op = Conv2d {
                strides: [1 + x[1] % 2, 1 + x[2] % 2],
                padding: [x[3] % 3, x[4] % 2, x[5] % 3, x[0] % 2],
                dilation: [1 + x[5] % 2, 1],
                groups: g,
                channels: None,
                kernel_size: None,
            };
            let d = if dt == I32 { I32 } else { F32 };
            let (h, w) = (s[0] + 2, s.get(1).copied().unwrap_or(3) + 2);
            (
                op.into(),
                vec![
                    t(&[1, 2 * g, h, w], d),
                    t(&[2 * g, 2, 1 + x[3] % 3, 1 + x[4] % 3], d),
                ],
            )
        }
        8 => {
            let max = x[0] % 2 == 0;
            let op = Pool2d {
                kind: if max { PoolKind::Max } else { PoolKind::Avg },
                pool_size: [1 + x[1] % 3, 1 + x[2] % 3],
                strides: [1 + x[3] % 2, 1 + x[4] % 2],
                dilation: [1, 1 + x[5] % 2],
                padding: [x[1] % 2, x[2] % 3, x[3] % 2, x[4] % 3],
                ceil_mode: x[5] % 3 == 0,
                count_include_pad: !max && x[0] % 3 == 0,
            };
            let (h, w) = (s[0] + 2, s.get(1).copied().unwrap_or(3) + 3);
            (op.into(), vec![t(&[1, 2, h, w], F32)])
        }
        9 => {
            let kind = if x[0] % 2 == 0 {
                PoolKind::Max
            } else {
                PoolKind::Avg
            };
            (
                GlobalPool2d { kind }.into(),
                vec![t(&[1, 2, s[0], 1 + x[1] % 4], F32)],
            )
        }
        10 => {
            let d = if dt == I64 { I64 } else { F32 };
            (
                Dense { units: None }.into(),
                vec![t(s, d), t(&[1 + x[0] % 5, s[r - 1]], d)],
            )
        }
        11 => {
            let a = (axis + if axis < 0 { r as i64 } else { 0 }) as usize;
            (BiasAdd { axis }.into(), vec![t(s, F32), t(&[s[a]], F32)])
        }
        12 => (BatchFlatten.into(), vec![t(&[2, s[0], 2], dt)]),
        13 => (Softmax { axis }.into(), vec![t(s, F32)]),
        14 => {
            let a = (axis + if axis < 0 { r as i64 } else { 0 }) as usize;
            let v = t(&[s[a]], F32);
            (
                LayerNorm {
                    axis,
                    epsilon: F64(1e-3),
                    center: x[2] % 2 == 0,
                    scale: x[3] % 2 == 0,
                }
                .into(),
                vec![t(s, F32), v.clone(), v],
            )
        }
        15 => {
            let a = (axis + if axis < 0 { r as i64 } else { 0 }) as usize;
            let v = t(&[s[a]], F32);
            (
                BatchNorm {
                    axis,
                    epsilon: F64(1e-3),
                    center: x[2] % 2 == 0,
                    scale: x[3] % 2 == 0,
                }
                .into(),
                vec![t(s, F32), v.clone(), v.clone(), v.clone(), v],
            )
        }
        16 => {
            let (m, n, kk) = (1 + x[0] % 4, 1 + x[1] % 5, 1 + x[2] % 4);
            let (ta, tb) = (x[3] % 2 == 0, x[4] % 2 == 0);
            let d = if dt == I32 { I32 } else { F32 };
            let a = if ta { [2, kk, m] } else { [2, m, kk] };
            let b = if tb { [1, n, kk] } else { [1, kk, n] };
            (
                BatchMatmul {
                    transpose_a: ta,
                    transpose_b: tb,
                }
                .into(),
                vec![t(&a, d), t(&b, d)],
            )
        }
        17 => (Reshape::new(vec![-1]).into(), vec![t(s, dt)]),
        18 => {
            let mut perm: Vec<i64> = (0..r as i64).collect();
            perm.rotate_left(x[0] % r);
            (Transpose::new(Some(perm)).into(), vec![t(s, dt)])
        }
        19 => (Squeeze::new(None).into(), vec![t(s, dt)]),
        20 => (
            ExpandDims {
                axis,
                num_newaxis: x[2] % 3,
            }
            .into(),
            vec![t(s, dt)],
        ),
        21 => {
            let a = (axis + if axis < 0 { r as i64 } else { 0 }) as usize;
            let mut other = s.to_vec();
            other[a] = 1 + x[3] % 3;
            (
                Concatenate::new(axis).into(),
                vec![Arg::Tuple(vec![tt(s, dt), tt(&other, dt)])],
            )
        }
        22 => {
            let a = (axis + if axis < 0 { r as i64 } else { 0 }) as usize;
            let mut big = s.to_vec();
            big[a] *= 2;
            (Split::sections(2, axis).into(), vec![t(&big, dt)])
        }
        23 => {
            let op = StridedSlice {
                begin: vec![(x[0] % 3) as i64],
                end: vec![-(x[1] as i64 % 2)],
                strides: Some(vec![1 + (x[2] % 2) as i64]),
                axes: Some(vec![axis]),
            };
            (op.into(), vec![t(s, dt)])
        }
        _ => {
            let mode = if x[0] % 2 == 0 {
                TakeMode::Wrap
            } else {
                TakeMode::Clip
            };
            let ax = (x[1] % 2 == 0).then_some(axis);
            (
                Take { axis: ax, mode }.into(),
                vec![t(s, dt), t(&[1 + x[2] % 4], I32)],
            )
        }
    }
}

const NUM_OP_CASES: usize = 25;

proptest! {
    #![proptest_config(ProptestConfig { cases: te_util::cases(200), ..ProptestConfig::default() })]

    #[test]
    fn every_op_matches_the_reference(
        k in 0..NUM_OP_CASES,
        s in (1..=3usize).prop_flat_map(|r| proptest::collection::vec(1..=4usize, r)),
        x in proptest::array::uniform6(0..12usize),
        dt in prop_oneof![Just(F32), Just(F32), Just(I32), Just(I8), Just(I64), Just(U8), Just(F16)],
        seed in any::<u64>(),
    ) {
        let (op, args) = op_case(k, &s, x, dt);
        let Ok((m, params)) = one_op(op, &args) else { return Ok(()) };
        for target in [ScheduleKind::Cpu, ScheduleKind::Gpu] {
            let Ok(ks) = kernels_of(&m, target) else { continue };
            for f in &ks {
                let mut xs = topi_support::inputs(&params, seed, -3.0, 3.0);
                // Take's indices: in range, negative and past the end.
                if let Some(Arg::T(it)) = args.get(1) && k == NUM_OP_CASES - 1 {
                    xs[1] = NDArray::random_uniform(it.shape.clone(), I32, seed ^ 3, -12.0, 12.0);
                }
                if target == ScheduleKind::Cpu {
                    diff_expect(f, &xs);
                } else {
                    diff(f, &xs);
                }
            }
        }
    }
}

#[test]
fn mlp_kernels_match_the_reference() {
    let (m, _) = kiln_ir::zoo::by_name("mlp").unwrap();
    let ks = kernels_of(&m, ScheduleKind::Cpu).unwrap();
    assert!(!ks.is_empty());
    for (n, f) in ks.iter().enumerate() {
        diff_expect(f, &random_inputs(f, n as u64));
    }
}
