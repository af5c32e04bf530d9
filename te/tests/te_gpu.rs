//! scratch
mod te_util;
use kiln_te::te::Schedule;
use kiln_te::tir::{Scope, ThreadAxis};
use te_util::*;

#[test]
fn scratch_cpu() {
    let (g, _a, _b, c) = matmul(10, 12, 7);
    let mut s = Schedule::new(&g, &[c]).unwrap();
    let cl = s.cache_write(c, Scope::Local).unwrap();
    let (i, j) = (s.axis(c, 0).unwrap(), s.axis(c, 1).unwrap());
    let (io, jo, ii, ji) = s.tile(c, i, j, 4, 4).unwrap();
    s.parallel(c, io).unwrap();
    s.vectorize(c, ji).unwrap();
    s.compute_at(cl, c, jo).unwrap();
    let k = s.reduce_axis(cl, 0).unwrap();
    let lj = s.axis(cl, 1).unwrap();
    let (ko, ki) = s.split(cl, k, 3).unwrap();
    let li = s.axis(cl, 0).unwrap();
    s.reorder(cl, &[ko, ki, li, lj]).unwrap();
    let f = assert_same(&g, &s, 1e-5);
    println!("{f}");
}

#[test]
fn scratch_gpu() {
    let (m, n, k) = (10, 12, 7);
    let (g, a, b, c) = matmul(m, n, k);
    let mut s = Schedule::new(&g, &[c]).unwrap();
    let t = 4;
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
    println!("{f}");
}
