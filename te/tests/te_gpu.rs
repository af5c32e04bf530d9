//! GPU-style schedules, run by the loop-IR interpreter (blocks and threads in turn,
//! barriers in lockstep) and compared to the unscheduled lowering: blockIdx/threadIdx
//! bindings with ragged extents (guards), and a shared-memory tiled matmul built with
//! cache_read + compute_at + cooperative thread-bound loads between barriers.

mod te_util;

use kiln_te::te::Schedule;
use kiln_te::tir::{Scope, ThreadAxis};
use te_util::*;

#[test]
fn ragged_elementwise_bound_to_blocks_and_threads() {
    let (g, add, y) = bias_relu(5, 13);
    let mut s = Schedule::new(&g, &[y]).unwrap();
    s.compute_inline(add).unwrap();
    let (i, j) = (s.axis(y, 0).unwrap(), s.axis(y, 1).unwrap());
    let f = s.fuse(y, i, j).unwrap();
    let (bx, tx) = s.split(y, f, 8).unwrap();
    s.bind(y, bx, ThreadAxis::BlockX).unwrap();
    s.bind(y, tx, ThreadAxis::ThreadX).unwrap();
    let f = assert_same(&g, &s, 0.0);
    let text = f.to_string();
    assert!(text.contains("launch_thread blockIdx.x"), "{text}");
    assert!(text.contains("launch_thread threadIdx.x"), "{text}");
    assert!(text.contains("< 65"), "ragged guard missing:\n{text}");
}

#[test]
fn ragged_matmul_with_2d_thread_grid() {
    let (g, _, _, c) = matmul(7, 9, 5);
    let mut s = Schedule::new(&g, &[c]).unwrap();
    let (i, j) = (s.axis(c, 0).unwrap(), s.axis(c, 1).unwrap());
    let (by, bx, ty, tx) = s.tile(c, i, j, 4, 4).unwrap();
    s.bind(c, by, ThreadAxis::BlockY).unwrap();
    s.bind(c, bx, ThreadAxis::BlockX).unwrap();
    s.bind(c, ty, ThreadAxis::ThreadY).unwrap();
    s.bind(c, tx, ThreadAxis::ThreadX).unwrap();
    assert_same(&g, &s, 0.0);
}

fn shared_tiled_matmul(m: usize, n: usize, k: usize, t: usize) {
    let (g, a, b, c) = matmul(m, n, k);
    let mut s = Schedule::new(&g, &[c]).unwrap();
    let aa = s.cache_read(a, Scope::Shared, &[c]).unwrap();
    let bb = s.cache_read(b, Scope::Shared, &[c]).unwrap();
    let (i, j) = (s.axis(c, 0).unwrap(), s.axis(c, 1).unwrap());
    let (by, bx, ty, tx) = s.tile(c, i, j, t, t).unwrap();
    s.bind(c, by, ThreadAxis::BlockY).unwrap();
    s.bind(c, bx, ThreadAxis::BlockX).unwrap();
    s.bind(c, ty, ThreadAxis::ThreadY).unwrap();
    s.bind(c, tx, ThreadAxis::ThreadX).unwrap();
    let kk = s.reduce_axis(c, 0).unwrap();
    let (ko, _ki) = s.split(c, kk, t).unwrap();
    for cache in [aa, bb] {
        s.compute_at(cache, c, ko).unwrap();
        let (x0, x1) = (s.axis(cache, 0).unwrap(), s.axis(cache, 1).unwrap());
        s.bind(cache, x0, ThreadAxis::ThreadY).unwrap();
        s.bind(cache, x1, ThreadAxis::ThreadX).unwrap();
    }
    let f = assert_same(&g, &s, 1e-5);
    let text = f.to_string();
    assert!(
        text.contains(&format!("Buffer[({t}, {t}), float32, shared]")),
        "{text}"
    );
    assert_eq!(text.matches("barrier()").count(), 4, "{text}");
}

#[test]
fn shared_memory_tiled_matmul_divisible() {
    shared_tiled_matmul(8, 8, 8, 4);
}

#[test]
fn shared_memory_tiled_matmul_ragged() {
    shared_tiled_matmul(10, 12, 7, 4);
}

#[test]
fn shared_cache_with_more_elements_than_threads_loops_cooperatively() {
    // A 4x8 tile of A loaded by a 4x4 thread block: each thread loads two elements.
    let (g, a, _b, c) = matmul(8, 8, 16);
    let mut s = Schedule::new(&g, &[c]).unwrap();
    let aa = s.cache_read(a, Scope::Shared, &[c]).unwrap();
    let (i, j) = (s.axis(c, 0).unwrap(), s.axis(c, 1).unwrap());
    let (by, bx, ty, tx) = s.tile(c, i, j, 4, 4).unwrap();
    s.bind(c, by, ThreadAxis::BlockY).unwrap();
    s.bind(c, bx, ThreadAxis::BlockX).unwrap();
    s.bind(c, ty, ThreadAxis::ThreadY).unwrap();
    s.bind(c, tx, ThreadAxis::ThreadX).unwrap();
    let kk = s.reduce_axis(c, 0).unwrap();
    let (ko, _ki) = s.split(c, kk, 8).unwrap();
    s.compute_at(aa, c, ko).unwrap();
    let (x0, x1) = (s.axis(aa, 0).unwrap(), s.axis(aa, 1).unwrap());
    let (_x1o, x1i) = s.split(aa, x1, 4).unwrap();
    s.bind(aa, x0, ThreadAxis::ThreadY).unwrap();
    s.bind(aa, x1i, ThreadAxis::ThreadX).unwrap();
    assert_same(&g, &s, 1e-5);
}

#[test]
fn local_accumulator_per_thread() {
    let (g, _, _, c) = matmul(8, 8, 6);
    let mut s = Schedule::new(&g, &[c]).unwrap();
    let cl = s.cache_write(c, Scope::Local).unwrap();
    let (i, j) = (s.axis(c, 0).unwrap(), s.axis(c, 1).unwrap());
    let (bx, tx) = s.split(c, i, 4).unwrap();
    s.bind(c, bx, ThreadAxis::BlockX).unwrap();
    s.bind(c, tx, ThreadAxis::ThreadX).unwrap();
    s.compute_at(cl, c, tx).unwrap();
    let f = assert_same(&g, &s, 1e-5);
    let _ = j;
    assert!(
        f.to_string()
            .contains("C.local: Buffer[(1, 8), float32, local]"),
        "{f}"
    );
}
