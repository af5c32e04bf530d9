//! Property test: random sequences of split / reorder / fuse / vectorize / unroll /
//! parallel (and, for two-stage computes, compute_inline or compute_at of the producer)
//! on random computes — elementwise with broadcasting, a matmul-like reduction, a padded
//! 2-D convolution — never change the result. Each scheduled kernel must pass
//! `tir::verify` and, run in the interpreter, equal the unscheduled lowering (exactly for
//! elementwise, within 1e-5 relative for float reductions). Refused primitives are
//! skipped: a refusal leaves the schedule unchanged, which is checked too.

mod te_util;

use kiln_te::te::{Graph, Schedule, Tensor};
use kiln_te::testing::{self, Prim};
use proptest::prelude::*;
use te_util::*;

fn prim() -> impl Strategy<Value = Prim> {
    (0..10u8, 0..6usize, 1..6usize).prop_map(|(k, a, b)| Prim::from_draw(k, a, b))
}

/// Applies `p` to stage `t`; a refused primitive must leave the stage as it was.
fn apply(s: &mut Schedule, t: Tensor, p: &Prim) {
    if let Err(e) = testing::apply(s, t, p) {
        panic!("{e}");
    }
}

#[derive(Clone, Debug)]
enum Case {
    Elementwise(usize, usize),
    Matmul(usize, usize, usize),
    Conv(usize, usize, usize, usize, usize),
}

fn case() -> impl Strategy<Value = Case> {
    prop_oneof![
        (1..6usize, 1..7usize).prop_map(|(m, n)| Case::Elementwise(m, n)),
        (1..6usize, 1..6usize, 1..6usize).prop_map(|(m, n, k)| Case::Matmul(m, n, k)),
        (1..3usize, 3..6usize, 3..6usize, 1..3usize, 0..2usize)
            .prop_map(|(c, h, w, o, p)| Case::Conv(c, h, w, o, p)),
    ]
}

/// The graph, the output, and the producer stage when there is one.
fn build(c: &Case) -> (Graph, Tensor, Option<Tensor>, bool) {
    match *c {
        Case::Elementwise(m, n) => {
            let (g, add, y) = bias_relu(m, n);
            (g, y, Some(add), false)
        }
        Case::Matmul(m, n, k) => {
            let (g, _, _, c) = matmul(m, n, k);
            (g, c, None, true)
        }
        Case::Conv(c, h, w, o, p) => {
            let (g, pad, conv) = conv2d(c, h, w, o, p);
            (g, conv, Some(pad), true)
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(64), ..ProptestConfig::default() })]

    #[test]
    fn schedules_never_change_values(
        c in case(),
        prims in prop::collection::vec(prim(), 0..8),
        producer_prims in prop::collection::vec(prim(), 0..4),
        placement in 0..3usize,
        at in 0..8usize,
    ) {
        let (g, out, producer, reduction) = build(&c);
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
                    // Not at a vectorized loop: the producer may have parallel loops,
                    // which cannot run inside one (a refusal tested elsewhere).
                    let leaves = s.leaf_axes(out).unwrap();
                    let axis = leaves[at % leaves.len()];
                    let vectorized = s.stage(out).unwrap().kinds.get(&axis)
                        == Some(&kiln_te::tir::ForKind::Vectorized);
                    if !vectorized {
                        let _ = s.compute_at(pr, out, axis);
                    }
                }
            }
        }
        assert_same(&g, &s, if reduction { 1e-5 } else { 0.0 });
    }
}
