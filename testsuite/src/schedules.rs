//! Schedule fuzzing on every backend: random legal schedules ([`kiln_te::testing::Prim`]:
//! split, reorder, fuse, vectorize, unroll, parallel, and compute_inline / compute_at of
//! a producer stage) applied to random computes (elementwise with broadcasting, a
//! matmul-like reduction, a padded convolution), lowered and verified, compiled by each
//! registered backend's `Backend::compile` and run through its `KernelLibrary` (device
//! buffers, explicit copies), compared with the unscheduled lowering run by the loop-IR
//! interpreter.

use kiln_ir::NDArray;
use kiln_te::te::{self, Graph, Schedule, Tensor};
use kiln_te::testing::{self, Prim, bias_relu, conv2d, matmul};
use kiln_te::tir::{self, ForKind, PrimFunc};
use proptest::prelude::*;

use crate::suite::ExecBackend;

/// A compute to schedule.
#[derive(Clone, Debug)]
pub enum Compute {
    Elementwise(usize, usize),
    Matmul(usize, usize, usize),
    Conv(usize, usize, usize, usize, usize),
}

/// A compute and the schedule to apply to it.
#[derive(Clone, Debug)]
pub struct SchedCase {
    pub compute: Compute,
    pub prims: Vec<Prim>,
    pub producer_prims: Vec<Prim>,
    /// 0: the producer stays a root stage, 1: inlined, 2: computed at a consumer loop.
    pub placement: usize,
    pub at: usize,
    pub seed: u64,
}

fn prim() -> impl Strategy<Value = Prim> {
    (0..10u8, 0..6usize, 1..6usize).prop_map(|(k, a, b)| Prim::from_draw(k, a, b))
}

fn compute() -> impl Strategy<Value = Compute> {
    prop_oneof![
        (1..9usize, 1..9usize).prop_map(|(m, n)| Compute::Elementwise(m, n)),
        (1..7usize, 1..9usize, 1..7usize).prop_map(|(m, n, k)| Compute::Matmul(m, n, k)),
        (1..3usize, 3..7usize, 3..7usize, 1..3usize, 0..2usize)
            .prop_map(|(c, h, w, o, p)| Compute::Conv(c, h, w, o, p)),
    ]
}

/// Random schedule cases.
pub fn sched_case() -> impl Strategy<Value = SchedCase> {
    (
        compute(),
        proptest::collection::vec(prim(), 0..8),
        proptest::collection::vec(prim(), 0..4),
        0..3usize,
        0..8usize,
        any::<u64>(),
    )
        .prop_map(
            |(compute, prims, producer_prims, placement, at, seed)| SchedCase {
                compute,
                prims,
                producer_prims,
                placement,
                at,
                seed,
            },
        )
}

/// The graph, its output, the producer stage if any, and whether it reduces.
fn graph(c: &Compute) -> (Graph, Tensor, Option<Tensor>, bool) {
    match *c {
        Compute::Elementwise(m, n) => {
            let (g, add, y) = bias_relu(m, n);
            (g, y, Some(add), false)
        }
        Compute::Matmul(m, n, k) => {
            let (g, _, _, c) = matmul(m, n, k);
            (g, c, None, true)
        }
        Compute::Conv(c, h, w, o, p) => {
            let (g, pad, conv) = conv2d(c, h, w, o, p);
            (g, conv, Some(pad), true)
        }
    }
}

impl SchedCase {
    /// The scheduled kernel (verified) and the unscheduled one, and the relative
    /// tolerance (0 for elementwise computes).
    pub fn kernels(&self) -> Result<(PrimFunc, PrimFunc, f64), String> {
        let (g, out, producer, reduction) = graph(&self.compute);
        let mut s = Schedule::new(&g, &[out]).map_err(|e| e.to_string())?;
        for p in &self.prims {
            testing::apply(&mut s, out, p)?;
        }
        if let Some(pr) = producer {
            for p in &self.producer_prims {
                testing::apply(&mut s, pr, p)?;
            }
            match self.placement {
                0 => {}
                1 => {
                    let _ = s.compute_inline(pr);
                }
                _ => {
                    // Not at a vectorized loop (a refusal tested in te).
                    let leaves = s.leaf_axes(out).map_err(|e| e.to_string())?;
                    let axis = leaves[self.at % leaves.len()];
                    let kind = s.stage(out).map_err(|e| e.to_string())?.kinds.get(&axis);
                    if kind != Some(&ForKind::Vectorized) {
                        let _ = s.compute_at(pr, out, axis);
                    }
                }
            }
        }
        let naive = te::lower(&g, s.outputs(), "naive").map_err(|e| e.to_string())?;
        let f = s.lower("scheduled").map_err(|e| e.to_string())?;
        tir::verify(&f).map_err(|e| format!("{e}\n{f}"))?;
        Ok((f, naive, if reduction { 1e-5 } else { 0.0 }))
    }
}

/// Compiles `f` on `backend` and runs it on `inputs` through its kernel library.
pub fn run_compiled(
    backend: &ExecBackend,
    f: &PrimFunc,
    inputs: &[NDArray],
) -> Result<Vec<NDArray>, String> {
    let lib = backend
        .backend
        .compile(&backend.target, std::slice::from_ref(f))
        .map_err(|e| format!("compile: {e}"))?;
    let mut bufs = vec![];
    for (id, x) in f.inputs().iter().zip(inputs) {
        let buf = f.buffer(*id).ok_or("no input buffer")?;
        let d = lib
            .alloc(buf.dtype.size_bytes() * x.numel())
            .map_err(|e| e.to_string())?;
        lib.copy_to_device(d.as_ref(), &x.to_le_bytes())
            .map_err(|e| e.to_string())?;
        bufs.push(d);
    }
    let mut outs = vec![];
    for id in f.outputs() {
        let buf = f.buffer(*id).ok_or("no output buffer")?;
        let n: usize = buf.shape.iter().product();
        let d = lib
            .alloc(buf.dtype.size_bytes() * n)
            .map_err(|e| e.to_string())?;
        outs.push((buf.shape.clone(), buf.dtype, d.clone()));
        bufs.push(d);
    }
    lib.call(0, &bufs).map_err(|e| format!("call: {e}"))?;
    lib.synchronize().map_err(|e| e.to_string())?;
    outs.into_iter()
        .map(|(shape, dtype, d)| {
            let mut bytes = vec![0u8; d.len()];
            lib.copy_to_host(d.as_ref(), &mut bytes)
                .map_err(|e| e.to_string())?;
            NDArray::from_le_bytes(shape, dtype, &bytes).map_err(|e| e.to_string())
        })
        .collect()
}

/// Runs the scheduled kernel of `case` on `backend` and compares with the unscheduled
/// kernel in the loop-IR interpreter. The error holds the scheduled kernel's text.
pub fn check(case: &SchedCase, backend: &ExecBackend) -> Result<(), String> {
    let (f, naive, rtol) = case.kernels()?;
    let inputs: Vec<NDArray> = naive
        .inputs()
        .iter()
        .enumerate()
        .map(|(k, id)| {
            let b = naive.buffer(*id).expect("input buffer");
            NDArray::random(b.shape.clone(), b.dtype, case.seed.wrapping_add(k as u64))
        })
        .collect();
    let want = tir::run_with_inputs(&naive, &inputs).map_err(|e| format!("naive: {e}"))?;
    let got =
        run_compiled(backend, &f, &inputs).map_err(|e| format!("{}: {e}\n{f}", backend.name))?;
    for (g, w) in got.iter().zip(&want) {
        g.allclose(w, rtol, rtol)
            .map_err(|e| format!("{}: {e}\n{f}", backend.name))?;
    }
    Ok(())
}
