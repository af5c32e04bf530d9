//! One test per schedule primitive (the lowered kernel verifies and computes what the
//! unscheduled one does, and its text shows the primitive's effect), and one test per
//! refusal: each invalid use returns an error naming the stage and axis.

mod te_util;

use kiln_ir::DType;
use kiln_te::te::{self, Graph, Schedule};
use kiln_te::tir::{Scope, ThreadAxis};
use te_util::*;

fn err_text<T: std::fmt::Debug>(r: kiln_te::Result<T>) -> String {
    r.unwrap_err().to_string()
}

#[test]
fn split_divisible_and_ragged() {
    let (g, _, y) = bias_relu(4, 10);
    let mut s = Schedule::new(&g, &[y]).unwrap();
    let j = s.axis(y, 1).unwrap();
    let (jo, ji) = s.split(y, j, 4).unwrap();
    assert_eq!(s.axis_extent(jo).unwrap(), 3);
    assert_eq!(s.axis_extent(ji).unwrap(), 4);
    let f = assert_same(&g, &s, 0.0);
    assert!(
        f.to_string().contains("if (%j.outer * 4 + %j.inner < 10)"),
        "{f}"
    );
    let i = s.axis(y, 0).unwrap();
    s.split(y, i, 2).unwrap();
    let f = assert_same(&g, &s, 0.0);
    assert!(
        !f.to_string().contains("%i.inner < 4"),
        "no guard for divisible split:\n{f}"
    );
}

#[test]
fn reorder_and_tile() {
    let (g, _, _, c) = matmul(6, 5, 4);
    let mut s = Schedule::new(&g, &[c]).unwrap();
    let (i, j, k) = (
        s.axis(c, 0).unwrap(),
        s.axis(c, 1).unwrap(),
        s.reduce_axis(c, 0).unwrap(),
    );
    s.reorder(c, &[k, j, i]).unwrap();
    assert_eq!(s.leaf_axes(c).unwrap(), vec![k, j, i]);
    let f = assert_same(&g, &s, 1e-5);
    // The init nest runs before the (now outermost) reduction loop.
    assert!(f.to_string().find("= 0.0").unwrap() < f.to_string().find("for (%k").unwrap());
    let mut s = Schedule::new(&g, &[c]).unwrap();
    let (xo, yo, xi, yi) = s.tile(c, i, j, 4, 2).unwrap();
    assert_eq!(s.leaf_axes(c).unwrap(), vec![xo, yo, xi, yi, k]);
    assert_same(&g, &s, 0.0);
}

#[test]
fn fuse_axes() {
    let (g, _, y) = bias_relu(3, 5);
    let mut s = Schedule::new(&g, &[y]).unwrap();
    let (i, j) = (s.axis(y, 0).unwrap(), s.axis(y, 1).unwrap());
    let f = s.fuse(y, i, j).unwrap();
    assert_eq!(s.axis_extent(f).unwrap(), 15);
    let k = assert_same(&g, &s, 0.0);
    assert!(k.to_string().contains("floordiv(%i.j.fused, 5)"), "{k}");
}

#[test]
fn vectorize_parallel_unroll() {
    let (g, add, y) = bias_relu(4, 8);
    let mut s = Schedule::new(&g, &[y]).unwrap();
    let (i, j) = (s.axis(y, 0).unwrap(), s.axis(y, 1).unwrap());
    let (jo, ji) = s.split(y, j, 4).unwrap();
    s.parallel(y, i).unwrap();
    s.unroll(y, jo).unwrap();
    s.vectorize(y, ji).unwrap();
    let ai = s.axis(add, 0).unwrap();
    s.parallel(add, ai).unwrap();
    let f = assert_same(&g, &s, 0.0);
    let t = f.to_string();
    assert!(t.contains("parallel for (%i"), "{t}");
    assert!(t.contains("unrolled for (%j.outer"), "{t}");
    assert!(t.contains("vectorized for (%j.inner, 0, 4)"), "{t}");
}

#[test]
fn compute_inline_and_compute_at() {
    let (g, add, y) = bias_relu(4, 6);
    let mut s = Schedule::new(&g, &[y]).unwrap();
    s.compute_inline(add).unwrap();
    let f = assert_same(&g, &s, 0.0);
    assert!(!f.to_string().contains("allocate"), "{f}");
    let mut s = Schedule::new(&g, &[y]).unwrap();
    let (i, _j) = (s.axis(y, 0).unwrap(), s.axis(y, 1).unwrap());
    s.compute_at(add, y, i).unwrap();
    let f = assert_same(&g, &s, 0.0);
    assert!(
        f.to_string()
            .contains("add: Buffer[(1, 6), float32, local]"),
        "{f}"
    );
}

#[test]
fn compute_at_padded_stage_in_conv() {
    let (g, pad, conv) = conv2d(2, 5, 5, 3, 1);
    let mut s = Schedule::new(&g, &[conv]).unwrap();
    let h = s.axis(conv, 2).unwrap();
    let (ho, _hi) = s.split(conv, h, 2).unwrap();
    s.compute_at(pad, conv, ho).unwrap();
    let f = assert_same(&g, &s, 1e-5);
    // Two output rows read four padded rows.
    assert!(
        f.to_string()
            .contains("pad: Buffer[(1, 2, 4, 7), float32, local]"),
        "{f}"
    );
    let mut s = Schedule::new(&g, &[conv]).unwrap();
    s.compute_inline(pad).unwrap();
    assert_same(&g, &s, 0.0);
}

#[test]
fn cache_write_local_accumulator() {
    let (g, _, _, c) = matmul(5, 6, 7);
    let mut s = Schedule::new(&g, &[c]).unwrap();
    let cl = s.cache_write(c, Scope::Local).unwrap();
    let (i, j) = (s.axis(c, 0).unwrap(), s.axis(c, 1).unwrap());
    let (_io, jo, _ii, ji) = s.tile(c, i, j, 2, 3).unwrap();
    s.vectorize(c, ji).unwrap();
    s.compute_at(cl, c, jo).unwrap();
    let k = s.reduce_axis(cl, 0).unwrap();
    let (li, lj) = (s.axis(cl, 0).unwrap(), s.axis(cl, 1).unwrap());
    s.reorder(cl, &[k, li, lj]).unwrap();
    let f = assert_same(&g, &s, 1e-5);
    assert!(
        f.to_string()
            .contains("C.local: Buffer[(2, 3), float32, local]"),
        "{f}"
    );
}

#[test]
fn cache_read_local_copy() {
    let (g, a, _, c) = matmul(4, 4, 4);
    let mut s = Schedule::new(&g, &[c]).unwrap();
    let al = s.cache_read(a, Scope::Local, &[c]).unwrap();
    let i = s.axis(c, 0).unwrap();
    s.compute_at(al, c, i).unwrap();
    let f = assert_same(&g, &s, 0.0);
    assert!(
        f.to_string()
            .contains("A.local: Buffer[(1, 4), float32, local]"),
        "{f}"
    );
}

#[test]
fn multiple_outputs_and_param_order() {
    let mut g = Graph::new();
    let b = g.placeholder(&[3], DType::F32, "b").unwrap();
    let a = g.placeholder(&[3], DType::F32, "a").unwrap();
    let x = g.compute(&[3], "x", |i| a.at(i) + b.at(i)).unwrap();
    let y = g.compute(&[3], "y", |i| x.at(i) * a.at(i)).unwrap();
    let s = Schedule::new(&g, &[y, x]).unwrap();
    let f = assert_same(&g, &s, 0.0);
    let names: Vec<_> = f
        .params
        .iter()
        .map(|p| f.buffer(*p).unwrap().name.clone())
        .collect();
    assert_eq!(names, ["b", "a", "y", "x"]);
}

// ---------------------------------------------------------------- refusals

#[test]
fn refuses_splitting_an_axis_twice() {
    let (g, _, y) = bias_relu(4, 8);
    let mut s = Schedule::new(&g, &[y]).unwrap();
    let j = s.axis(y, 1).unwrap();
    s.split(y, j, 2).unwrap();
    let e = err_text(s.split(y, j, 2));
    assert!(
        e.contains("stage `y`") && e.contains("axis `j` was already split"),
        "{e}"
    );
}

#[test]
fn refuses_factor_zero() {
    let (g, _, y) = bias_relu(4, 8);
    let mut s = Schedule::new(&g, &[y]).unwrap();
    let j = s.axis(y, 1).unwrap();
    let e = err_text(s.split(y, j, 0));
    assert!(
        e.contains("stage `y`") && e.contains("axis `j` by factor 0"),
        "{e}"
    );
    let i = s.axis(y, 0).unwrap();
    let e = err_text(s.tile(y, i, j, 2, 0));
    assert!(e.contains("factor 0"), "{e}");
    assert_eq!(
        s.leaf_axes(y).unwrap(),
        vec![i, j],
        "a refused tile changes nothing"
    );
}

#[test]
fn refuses_reordering_axes_of_another_stage() {
    let (g, add, y) = bias_relu(4, 8);
    let mut s = Schedule::new(&g, &[y]).unwrap();
    let (i, ai) = (s.axis(y, 0).unwrap(), s.axis(add, 0).unwrap());
    let e = err_text(s.reorder(y, &[ai, i]));
    assert!(
        e.contains("stage `y`") && e.contains("belongs to stage `add`"),
        "{e}"
    );
    let e = err_text(s.reorder(y, &[i, i]));
    assert!(e.contains("twice"), "{e}");
}

#[test]
fn refuses_vectorizing_non_innermost_or_non_constant_axes() {
    let (g, add, y) = bias_relu(4, 8);
    let mut s = Schedule::new(&g, &[y]).unwrap();
    let (i, j) = (s.axis(y, 0).unwrap(), s.axis(y, 1).unwrap());
    let e = err_text(s.vectorize(y, i));
    assert!(
        e.contains("stage `y`") && e.contains("axis `i`: it is not the innermost"),
        "{e}"
    );
    // After vectorizing j, nothing may be reordered inside it.
    s.vectorize(y, j).unwrap();
    let e = err_text(s.reorder(y, &[j, i]));
    assert!(e.contains("inside vectorized axis `j`"), "{e}");
    // A compute_at stage's data axis has an inferred extent.
    s.compute_at(add, y, i).unwrap();
    let aj = s.axis(add, 1).unwrap();
    let e = err_text(s.vectorize(add, aj));
    assert!(
        e.contains("stage `add`") && e.contains("not constant"),
        "{e}"
    );
    let (_, aji) = s.split(add, aj, 4).unwrap();
    s.vectorize(add, aji).unwrap();
    assert_same(&g, &s, 0.0);
}

#[test]
fn refuses_fusing_non_adjacent_axes() {
    let (g, _, _, c) = matmul(4, 4, 4);
    let mut s = Schedule::new(&g, &[c]).unwrap();
    let (i, j, k) = (
        s.axis(c, 0).unwrap(),
        s.axis(c, 1).unwrap(),
        s.reduce_axis(c, 0).unwrap(),
    );
    let e = err_text(s.fuse(c, j, i));
    assert!(
        e.contains("stage `C`") && e.contains("`j` and `i`: they are not adjacent"),
        "{e}"
    );
    let e = err_text(s.fuse(c, j, k));
    assert!(e.contains("data axis and reduction axis"), "{e}");
}

#[test]
fn refuses_binding_a_thread_axis_twice() {
    let (g, _, y) = bias_relu(4, 8);
    let mut s = Schedule::new(&g, &[y]).unwrap();
    let (i, j) = (s.axis(y, 0).unwrap(), s.axis(y, 1).unwrap());
    s.bind(y, i, ThreadAxis::ThreadX).unwrap();
    let e = err_text(s.bind(y, j, ThreadAxis::ThreadX));
    assert!(
        e.contains("stage `y`")
            && e.contains("cannot bind axis `j` to threadIdx.x: axis `i` is already bound"),
        "{e}"
    );
    let e = err_text(s.parallel(y, i));
    assert!(e.contains("already bound to threadIdx.x"), "{e}");
}

#[test]
fn refuses_thread_binding_inside_a_serial_loop_and_reduction_binding() {
    let (g, _, _, c) = matmul(4, 4, 4);
    let mut s = Schedule::new(&g, &[c]).unwrap();
    let (j, k) = (s.axis(c, 1).unwrap(), s.reduce_axis(c, 0).unwrap());
    let e = err_text(s.bind(c, k, ThreadAxis::ThreadX));
    assert!(e.contains("cannot bind reduction axis `k`"), "{e}");
    s.bind(c, j, ThreadAxis::ThreadX).unwrap();
    let e = err_text(s.lower("k"));
    assert!(
        e.contains("stage `C`: axis `j`") && e.contains("outermost"),
        "{e}"
    );
}

#[test]
fn refuses_compute_at_a_non_ancestor_axis() {
    let (g, add, y) = bias_relu(4, 8);
    let mut s = Schedule::new(&g, &[y]).unwrap();
    let ai = s.axis(add, 0).unwrap();
    let e = err_text(s.compute_at(add, y, ai));
    assert!(
        e.contains("stage `add`") && e.contains("axis `i` is not a loop of stage `y`"),
        "{e}"
    );
    let yi = s.axis(y, 0).unwrap();
    let e = err_text(s.compute_at(y, add, ai));
    assert!(e.contains("stage `y`: is an output"), "{e}");
    // A stage that does not read `add` cannot host it.
    let (g2, a, _, c) = matmul(4, 4, 4);
    let mut s2 = Schedule::new(&g2, &[c]).unwrap();
    let al = s2.cache_read(a, Scope::Local, &[c]).unwrap();
    let al2 = s2.cache_read(a, Scope::Local, &[]);
    assert!(al2.is_err());
    let ci = s2.axis(c, 0).unwrap();
    let e = err_text(s2.compute_at(al, al, ci));
    assert!(e.contains("itself"), "{e}");
    let _ = yi;
}

#[test]
fn refuses_compute_at_when_another_stage_also_reads() {
    let mut g = Graph::new();
    let x = g.placeholder(&[4], DType::F32, "x").unwrap();
    let t = g.compute(&[4], "t", |i| x.at(i) * 2).unwrap();
    let u = g.compute(&[4], "u", |i| t.at(i) + 1).unwrap();
    let v = g.compute(&[4], "v", |i| t.at(i) + u.at(i)).unwrap();
    let mut s = Schedule::new(&g, &[v]).unwrap();
    let ui = s.axis(u, 0).unwrap();
    s.compute_at(t, u, ui).unwrap();
    let e = err_text(s.lower("k"));
    assert!(
        e.contains("stage `t`") && e.contains("read by [u, v]"),
        "{e}"
    );
}

#[test]
fn refuses_inlining_a_reduction_or_an_output() {
    let (g, _, _, c) = matmul(4, 4, 4);
    let mut s = Schedule::new(&g, &[c]).unwrap();
    let e = err_text(s.compute_inline(c));
    assert!(e.contains("stage `C`: cannot inline an output"), "{e}");
    let mut g = Graph::new();
    let x = g.placeholder(&[4, 4], DType::F32, "x").unwrap();
    let r = g.reduce_axis(4, "r").unwrap();
    let m = g
        .compute(&[4], "rowsum", |i| {
            te::sum(x.at(&[i[0].clone(), r.into()]), &[r])
        })
        .unwrap();
    let y = g.compute(&[4], "y", |i| m.at(i) * 2).unwrap();
    let mut s = Schedule::new(&g, &[y]).unwrap();
    let e = err_text(s.compute_inline(m));
    assert!(
        e.contains("stage `rowsum`: cannot inline a reduction"),
        "{e}"
    );
}

#[test]
fn refuses_parallel_inside_a_vectorized_loop_and_on_a_reduction() {
    let (g, add, y) = bias_relu(4, 8);
    let mut s = Schedule::new(&g, &[y]).unwrap();
    let j = s.axis(y, 1).unwrap();
    let (_, ji) = s.split(y, j, 4).unwrap();
    s.vectorize(y, ji).unwrap();
    s.compute_at(add, y, ji).unwrap();
    let ai = s.axis(add, 0).unwrap();
    s.parallel(add, ai).unwrap();
    let e = err_text(s.lower("k"));
    assert!(
        e.contains("stage `add`: axis `i` is parallel but sits inside a vectorized loop"),
        "{e}"
    );
    let (g, _, _, c) = matmul(4, 4, 4);
    let mut s = Schedule::new(&g, &[c]).unwrap();
    let k = s.reduce_axis(c, 0).unwrap();
    let e = err_text(s.parallel(c, k));
    assert!(
        e.contains("stage `C`: cannot parallelize reduction axis `k`"),
        "{e}"
    );
}

#[test]
fn refuses_bad_cache_and_scope_uses() {
    let (g, a, _, c) = matmul(4, 4, 4);
    let mut s = Schedule::new(&g, &[c]).unwrap();
    let e = err_text(s.cache_write(c, Scope::Global));
    assert!(e.contains("local or shared"), "{e}");
    let i = s.axis(c, 0).unwrap();
    s.split(c, i, 2).unwrap();
    let e = err_text(s.cache_write(c, Scope::Local));
    assert!(e.contains("stage `C`: cache_write must come before"), "{e}");
    let al = s.cache_read(a, Scope::Local, &[c]).unwrap();
    // `C` now reads the cache, not `A`.
    let e = err_text(s.cache_read(a, Scope::Local, &[c]));
    assert!(
        e.contains("stage `A`") && e.contains("reader `C` does not read"),
        "{e}"
    );
    let _ = al;
    let e = err_text(s.set_scope(c, Scope::Shared));
    assert!(e.contains("is an output"), "{e}");
    let e = err_text(s.split(a, i, 2));
    assert!(e.contains("stage `A`: is a placeholder"), "{e}");
}

#[test]
fn refuses_tensors_of_another_graph() {
    let (g, _, y) = bias_relu(4, 8);
    let (_, _, _, c) = matmul(4, 4, 4);
    let mut s = Schedule::new(&g, &[y]).unwrap();
    assert!(Schedule::new(&g, &[c]).is_err());
    assert!(s.compute_inline(c).is_err());
}
