//! ONNX ops whose output shape depends on their input values — `NonMaxSuppression`,
//! `Unique` and `NonZero` — evaluated at import when those values are known there (constants or
//! initializers, or inputs bound as constants): the result becomes a constant, computed
//! exactly as ONNX's reference does. With run-time inputs they are refused
//! ([`crate::Error::NotConstant`] names the input): kiln's shapes are static, and
//! computing them at run time needs dynamic shapes.

use std::cmp::Ordering;

use kiln_ir::{ExprId, NDArray};

use crate::convert::{Importer, Node};
use crate::error::{Error, Result};

/// The ONNX op types this module converts.
pub const SUPPORTED: &[&str] = &["NonMaxSuppression", "NonZero", "Unique"];

/// Converts a `NonMaxSuppression`, `NonZero` or `Unique` node whose data inputs are
/// known.
pub(crate) fn convert(imp: &mut Importer, n: &Node) -> Result<Vec<ExprId>> {
    match n.op_type {
        "NonMaxSuppression" => non_max_suppression(imp, n),
        "NonZero" => non_zero(imp, n),
        _ => unique(imp, n),
    }
}

/// `NonZero`: the indices (`[rank, count]`, int64, row-major order) of the nonzero
/// elements; a scalar counts as rank 1 (numpy's `nonzero` of `atleast_1d`, as ONNX's
/// reference reads it).
fn non_zero(imp: &mut Importer, n: &Node) -> Result<Vec<ExprId>> {
    let x = known(imp, n, 0)?.ok_or_else(|| Error::InvalidModel("NonZero needs X".into()))?;
    let shape: Vec<usize> = if x.shape().is_empty() {
        vec![1]
    } else {
        x.shape().to_vec()
    };
    let hits: Vec<usize> = x
        .to_f64_vec()
        .iter()
        .enumerate()
        .filter(|(_, v)| **v != 0.0)
        .map(|(i, _)| i)
        .collect();
    let rank = shape.len();
    let mut idx = vec![0i64; rank * hits.len()];
    for (j, &flat) in hits.iter().enumerate() {
        let mut rest = flat;
        for a in (0..rank).rev() {
            idx[a * hits.len() + j] = (rest % shape[a]) as i64;
            rest /= shape[a];
        }
    }
    Ok(vec![
        imp.constant(NDArray::from_vec([rank, hits.len()], idx)?),
    ])
}

/// The input `i` of `n`, which must be known at import.
fn known(imp: &Importer, n: &Node, i: usize) -> Result<Option<NDArray>> {
    imp.const_input(n, i)
}

/// A box as the min and max corners `(x_min, x_max, y_min, y_max)`, from ONNX's corner
/// (`[y1, x1, y2, x2]`, either order) or center (`[x, y, w, h]`) format; in `f32`, as
/// the reference computes.
fn corners(b: &[f32], center: bool) -> (f32, f32, f32, f32) {
    let ordered = |a: f32, c: f32| if a >= c { (c, a) } else { (a, c) };
    if center {
        let (hw, hh) = (b[2] / 2.0, b[3] / 2.0);
        (b[0] - hw, b[0] + hw, b[1] - hh, b[1] + hh)
    } else {
        let (x0, x1) = ordered(b[1], b[3]);
        let (y0, y1) = ordered(b[0], b[2]);
        (x0, x1, y0, y1)
    }
}

/// Whether box `a` suppresses box `b`: their intersection over union exceeds
/// `threshold` (boxes with no area never suppress).
fn suppresses(a: &[f32], b: &[f32], center: bool, threshold: f32) -> bool {
    let (ax0, ax1, ay0, ay1) = corners(a, center);
    let (bx0, bx1, by0, by1) = corners(b, center);
    let (ix0, ix1) = (ax0.max(bx0), ax1.min(bx1));
    let (iy0, iy1) = (ay0.max(by0), ay1.min(by1));
    if ix1 <= ix0 || iy1 <= iy0 {
        return false;
    }
    let inter = (ix1 - ix0) * (iy1 - iy0);
    let area_a = (ax1 - ax0) * (ay1 - ay0);
    let area_b = (bx1 - bx0) * (by1 - by0);
    let union = area_a + area_b - inter;
    if inter <= 0.0 || area_a <= 0.0 || area_b <= 0.0 || union <= 0.0 {
        return false;
    }
    inter / union > threshold
}

/// `NonMaxSuppression`: per batch and class, boxes by descending score (ties: the lower
/// index first) above `score_threshold`, each kept unless a kept box suppresses it,
/// at most `max_output_boxes_per_class`; the int64 rows `(batch, class, box)`.
fn non_max_suppression(imp: &mut Importer, n: &Node) -> Result<Vec<ExprId>> {
    let boxes = known(imp, n, 0)?.ok_or_else(|| Error::InvalidModel("NMS needs boxes".into()))?;
    let scores = known(imp, n, 1)?.ok_or_else(|| Error::InvalidModel("NMS needs scores".into()))?;
    let scalar = |t: Option<NDArray>| t.and_then(|t| t.to_f64_vec().first().copied());
    let max_out = scalar(known(imp, n, 2)?).unwrap_or(0.0).max(0.0) as usize;
    let iou = scalar(known(imp, n, 3)?).unwrap_or(0.0) as f32;
    let score_threshold = scalar(known(imp, n, 4)?).map(|s| s as f32);
    let center = match n.int("center_point_box", 0) {
        0 => false,
        1 => true,
        c => {
            return Err(Error::InvalidModel(format!(
                "NonMaxSuppression: center_point_box must be 0 or 1, got {c}"
            )));
        }
    };
    let (bs, ss) = (boxes.shape(), scores.shape());
    if bs.len() != 3 || bs[2] != 4 || ss.len() != 3 || ss[0] != bs[0] || ss[2] != bs[1] {
        return Err(Error::InvalidModel(format!(
            "NonMaxSuppression: boxes {bs:?} must be (batches, boxes, 4) and scores {ss:?} \
             (batches, classes, boxes)"
        )));
    }
    let (batches, num_boxes, classes) = (bs[0], bs[1], ss[1]);
    let bv: Vec<f32> = boxes.to_f64_vec().into_iter().map(|v| v as f32).collect();
    let sv: Vec<f32> = scores.to_f64_vec().into_iter().map(|v| v as f32).collect();
    let mut rows: Vec<i64> = vec![];
    for b in 0..batches {
        let box_of = |i: usize| &bv[(b * num_boxes + i) * 4..(b * num_boxes + i) * 4 + 4];
        for c in 0..classes {
            let class_scores = &sv[(b * classes + c) * num_boxes..][..num_boxes];
            let mut order: Vec<usize> = (0..num_boxes)
                .filter(|&i| score_threshold.is_none_or(|t| class_scores[i] > t))
                .collect();
            // Descending score, ties by ascending index (the reference's order).
            order.sort_by(|&i, &j| {
                class_scores[j]
                    .partial_cmp(&class_scores[i])
                    .unwrap_or(Ordering::Equal)
                    .then(i.cmp(&j))
            });
            let mut kept: Vec<usize> = vec![];
            for i in order {
                if kept.len() >= max_out {
                    break;
                }
                if !kept
                    .iter()
                    .any(|&k| suppresses(box_of(i), box_of(k), center, iou))
                {
                    kept.push(i);
                    rows.extend([b as i64, c as i64, i as i64]);
                }
            }
        }
    }
    let count = rows.len() / 3;
    Ok(vec![imp.constant(NDArray::from_vec([count, 3], rows)?)])
}

/// `Unique` along `axis` (or of the flattened tensor): the distinct slices, sorted
/// ascending (lexicographically) with `sorted=1` or in order of first occurrence, with
/// the int64 index of each one's first occurrence, the inverse map and the counts.
fn unique(imp: &mut Importer, n: &Node) -> Result<Vec<ExprId>> {
    let x = known(imp, n, 0)?.ok_or_else(|| Error::InvalidModel("Unique needs X".into()))?;
    let sorted = n.int("sorted", 1) != 0;
    let axis = n.attr("axis").map(|_| n.int("axis", 0));
    let (x, axis) = match axis {
        Some(a) => {
            let ax = crate::ops::axis(a, x.rank())?;
            (x, ax)
        }
        None => (x.reshape([x.numel()])?, 0),
    };
    let shape = x.shape().to_vec();
    let (outer, len, inner): (usize, usize, usize) = (
        shape[..axis].iter().product(),
        shape[axis],
        shape[axis + 1..].iter().product(),
    );
    let values = x.to_f64_vec();
    // Slice `s` along the axis, as the f64 values of its elements in row-major order.
    let slice = |s: usize| -> Vec<f64> {
        (0..outer)
            .flat_map(|o| (0..inner).map(move |i| (o * len + s) * inner + i))
            .map(|k| values[k])
            .collect()
    };
    let slices: Vec<Vec<f64>> = (0..len).map(slice).collect();
    let lex = |a: &[f64], b: &[f64]| {
        a.iter()
            .zip(b)
            .map(|(p, q)| p.partial_cmp(q).unwrap_or(Ordering::Equal))
            .find(|o| *o != Ordering::Equal)
            .unwrap_or(Ordering::Equal)
    };
    // First occurrences, in order of appearance.
    let mut firsts: Vec<usize> = vec![];
    let mut inverse: Vec<usize> = vec![0; len];
    for s in 0..len {
        match firsts
            .iter()
            .position(|&f| lex(&slices[f], &slices[s]) == Ordering::Equal)
        {
            Some(p) => inverse[s] = p,
            None => {
                inverse[s] = firsts.len();
                firsts.push(s);
            }
        }
    }
    let mut order: Vec<usize> = (0..firsts.len()).collect();
    if sorted {
        order.sort_by(|&a, &b| lex(&slices[firsts[a]], &slices[firsts[b]]));
    }
    let mut rank = vec![0usize; firsts.len()];
    for (r, &u) in order.iter().enumerate() {
        rank[u] = r;
    }
    let uniq: Vec<usize> = order.iter().map(|&u| firsts[u]).collect();
    let mut counts = vec![0i64; uniq.len()];
    for &u in &inverse {
        counts[rank[u]] += 1;
    }
    // Y: the chosen slices along the axis, gathered from X.
    let idx: Vec<usize> = (0..outer)
        .flat_map(|o| {
            uniq.iter()
                .flat_map(move |&s| (0..inner).map(move |i| (o * len + s) * inner + i))
        })
        .collect();
    let mut y_shape = shape.clone();
    y_shape[axis] = uniq.len();
    let y = NDArray::new(y_shape, x.data().gather(idx))?;
    let as_i64 = |v: Vec<usize>| -> Result<NDArray> {
        Ok(NDArray::from_vec(
            [v.len()],
            v.into_iter().map(|i| i as i64).collect(),
        )?)
    };
    let outs = [
        imp.constant(y),
        imp.constant(as_i64(uniq.clone())?),
        imp.constant(as_i64(inverse.iter().map(|&u| rank[u]).collect())?),
        imp.constant(NDArray::from_vec([counts.len()], counts)?),
    ];
    Ok(outs.to_vec())
}
