//! A layered layout (Sugiyama-style, kept small) of a [`Scene`]: units on layers by
//! longest path from the inputs, ordered within a layer by barycenter sweeps to keep
//! edges short and uncrossed, then placed left to right without overlap; the ops of a
//! kernel stacked inside its box. Sizes assume the monospace font the renderers use.

use super::scene::{Scene, Unit, UnitKind};

/// Width of one character of the label font, in pixels.
pub const CHAR_W: f64 = 7.2;
/// Height of a text line.
pub const LINE_H: f64 = 14.0;
/// Padding inside boxes.
pub const PAD: f64 = 8.0;
/// Height of a kernel box's title bar.
pub const TITLE_H: f64 = 22.0;
const LAYER_GAP: f64 = 48.0;
const UNIT_GAP: f64 = 28.0;
const OP_GAP: f64 = 10.0;
const MARGIN: f64 = 20.0;
const SWEEPS: usize = 6;

/// A rectangle.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Rect {
    pub x: f64,
    pub y: f64,
    pub w: f64,
    pub h: f64,
}

impl Rect {
    /// The middle of the top side.
    pub fn top(&self) -> (f64, f64) {
        (self.x + self.w / 2.0, self.y)
    }
    /// The middle of the bottom side.
    pub fn bottom(&self) -> (f64, f64) {
        (self.x + self.w / 2.0, self.y + self.h)
    }
}

/// Where everything goes.
#[derive(Clone, Debug)]
pub struct Layout {
    /// One box per unit.
    pub units: Vec<Rect>,
    /// For each unit, one box per op (absolute coordinates).
    pub ops: Vec<Vec<Rect>>,
    pub width: f64,
    pub height: f64,
}

/// The lines of text drawn in an op box: the op's name, then what is folded into it.
pub fn op_lines(op: &super::scene::OpNode) -> Vec<String> {
    let mut lines = vec![op.op.clone()];
    lines.extend(
        op.details
            .iter()
            .filter(|d| d.starts_with("weight ") || d.starts_with("constant "))
            .cloned(),
    );
    lines
}

fn text_w(lines: &[String]) -> f64 {
    lines.iter().map(|l| l.chars().count()).max().unwrap_or(0) as f64 * CHAR_W
}

/// The size of each op box of a unit, and of the unit's box.
fn sizes(unit: &Unit) -> (Vec<(f64, f64)>, (f64, f64)) {
    match unit.kind {
        UnitKind::Kernel { .. } => {
            let ops: Vec<(f64, f64)> = unit
                .ops
                .iter()
                .map(|op| {
                    let lines = op_lines(op);
                    (
                        text_w(&lines) + 2.0 * PAD,
                        lines.len() as f64 * LINE_H + PAD,
                    )
                })
                .collect();
            let inner_w = ops.iter().map(|s| s.0).fold(0.0, f64::max);
            let w = (inner_w + 2.0 * PAD).max(text_w(&[unit.caption()]) + 2.0 * PAD);
            let h = TITLE_H
                + ops.iter().map(|s| s.1).sum::<f64>()
                + OP_GAP * ops.len().saturating_sub(1) as f64
                + PAD;
            (ops, (w, h))
        }
        _ => (
            vec![],
            (text_w(&[unit.caption()]) + 2.0 * PAD, LINE_H + 2.0 * PAD),
        ),
    }
}

/// Lays `scene` out.
pub fn layout(scene: &Scene) -> Layout {
    let n = scene.units.len();
    let mut preds: Vec<Vec<usize>> = vec![vec![]; n];
    let mut succs: Vec<Vec<usize>> = vec![vec![]; n];
    for e in &scene.edges {
        preds[e.to].push(e.from);
        succs[e.from].push(e.to);
    }
    // Layers by longest path (units come in a topological order).
    let mut layer = vec![0usize; n];
    for u in 0..n {
        layer[u] = preds[u].iter().map(|&p| layer[p] + 1).max().unwrap_or(0);
    }
    // The output goes below everything.
    if let Some(out) = scene.units.iter().position(|u| u.kind == UnitKind::Output) {
        layer[out] = layer.iter().copied().max().unwrap_or(0).max(layer[out]);
    }
    let depth = layer.iter().copied().max().map_or(0, |d| d + 1);
    let mut rows: Vec<Vec<usize>> = vec![vec![]; depth];
    for u in 0..n {
        rows[layer[u]].push(u);
    }
    order_rows(&mut rows, &preds, &succs, n);

    let unit_sizes: Vec<(Vec<(f64, f64)>, (f64, f64))> = scene.units.iter().map(sizes).collect();
    // x: each unit centred under its predecessors, then pushed right to avoid overlap,
    // then each row shifted back so that its extent is centred on its wanted centres.
    let mut centre = vec![0.0f64; n];
    let mut y = MARGIN;
    let mut rects = vec![Rect::default(); n];
    for row in &rows {
        let wanted: Vec<f64> = row
            .iter()
            .enumerate()
            .map(|(i, &u)| {
                if preds[u].is_empty() {
                    i as f64 * 200.0
                } else {
                    preds[u].iter().map(|&p| centre[p]).sum::<f64>() / preds[u].len() as f64
                }
            })
            .collect();
        let mut xs = vec![0.0f64; row.len()];
        let mut right = f64::NEG_INFINITY;
        for (i, &u) in row.iter().enumerate() {
            let w = unit_sizes[u].1.0;
            let x = (wanted[i] - w / 2.0).max(right + UNIT_GAP);
            xs[i] = x;
            right = x + w;
        }
        // Shift the row so the mean displacement from the wanted centres is zero.
        let shift = row
            .iter()
            .enumerate()
            .map(|(i, &u)| wanted[i] - (xs[i] + unit_sizes[u].1.0 / 2.0))
            .sum::<f64>()
            / row.len().max(1) as f64;
        let row_h = row.iter().map(|&u| unit_sizes[u].1.1).fold(0.0, f64::max);
        for (i, &u) in row.iter().enumerate() {
            let (w, h) = unit_sizes[u].1;
            rects[u] = Rect {
                x: xs[i] + shift,
                y,
                w,
                h,
            };
            centre[u] = xs[i] + shift + w / 2.0;
        }
        y += row_h + LAYER_GAP;
    }
    // Move everything right of the margin.
    let min_x = rects.iter().map(|r| r.x).fold(f64::INFINITY, f64::min);
    let dx = if min_x.is_finite() {
        MARGIN - min_x
    } else {
        0.0
    };
    for r in &mut rects {
        r.x += dx;
    }
    let ops = scene
        .units
        .iter()
        .enumerate()
        .map(|(u, _)| {
            let r = rects[u];
            let mut oy = r.y + TITLE_H;
            unit_sizes[u]
                .0
                .iter()
                .map(|&(w, h)| {
                    let op = Rect {
                        x: r.x + (r.w - w) / 2.0,
                        y: oy,
                        w,
                        h,
                    };
                    oy += h + OP_GAP;
                    op
                })
                .collect()
        })
        .collect();
    let width = rects.iter().map(|r| r.x + r.w).fold(0.0, f64::max) + MARGIN;
    let height = rects.iter().map(|r| r.y + r.h).fold(0.0, f64::max) + MARGIN;
    Layout {
        units: rects,
        ops,
        width,
        height,
    }
}

/// Orders each row by the barycenter of its neighbours in the row above (downward
/// sweeps) and below (upward sweeps), a few times.
fn order_rows(rows: &mut [Vec<usize>], preds: &[Vec<usize>], succs: &[Vec<usize>], n: usize) {
    let mut pos = vec![0.0f64; n];
    let index = |rows: &[Vec<usize>], pos: &mut Vec<f64>| {
        for row in rows {
            for (i, &u) in row.iter().enumerate() {
                pos[u] = i as f64;
            }
        }
    };
    index(rows, &mut pos);
    for sweep in 0..SWEEPS {
        let down = sweep % 2 == 0;
        let order: Vec<usize> = if down {
            (1..rows.len()).collect()
        } else {
            (0..rows.len().saturating_sub(1)).rev().collect()
        };
        for r in order {
            let neighbours = if down { preds } else { succs };
            let mut keyed: Vec<(f64, usize)> = rows[r]
                .iter()
                .map(|&u| {
                    let ns = &neighbours[u];
                    let key = if ns.is_empty() {
                        pos[u]
                    } else {
                        ns.iter().map(|&v| pos[v]).sum::<f64>() / ns.len() as f64
                    };
                    (key, u)
                })
                .collect();
            keyed.sort_by(|a, b| a.0.total_cmp(&b.0));
            rows[r] = keyed.into_iter().map(|(_, u)| u).collect();
            for (i, &u) in rows[r].iter().enumerate() {
                pos[u] = i as f64;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::scene::{Edge, OpNode, Scene, Unit, UnitKind};
    use super::*;

    fn unit(kind: UnitKind, ops: usize) -> Unit {
        Unit {
            kind,
            title: "u".into(),
            note: None,
            ops: (0..ops)
                .map(|_| OpNode {
                    op: "add".into(),
                    details: vec![],
                    result: String::new(),
                    reads: vec![],
                })
                .collect(),
        }
    }

    #[test]
    fn a_diamond_has_three_layers_and_no_overlap() {
        let k = |i| UnitKind::Kernel {
            name: format!("k{i}"),
            index: i,
        };
        let scene = Scene {
            units: vec![
                unit(UnitKind::Input, 0),
                unit(k(0), 2),
                unit(k(1), 1),
                unit(UnitKind::Output, 0),
            ],
            edges: [(0, 1), (0, 2), (1, 3), (2, 3)]
                .iter()
                .map(|&(from, to)| Edge {
                    from,
                    to,
                    label: String::new(),
                })
                .collect(),
        };
        let l = layout(&scene);
        let r = &l.units;
        assert!(r[0].y + r[0].h < r[1].y && r[1].y == r[2].y);
        assert!(r[1].y + r[1].h < r[3].y && r[2].y + r[2].h < r[3].y);
        // The two middle units do not overlap.
        let (a, b) = if r[1].x < r[2].x {
            (r[1], r[2])
        } else {
            (r[2], r[1])
        };
        assert!(a.x + a.w <= b.x);
        // Ops sit inside their kernel's box, one below the other.
        let ops = &l.ops[1];
        assert_eq!(ops.len(), 2);
        for o in ops {
            assert!(o.x >= r[1].x && o.x + o.w <= r[1].x + r[1].w);
            assert!(o.y >= r[1].y && o.y + o.h <= r[1].y + r[1].h);
        }
        assert!(ops[0].y + ops[0].h <= ops[1].y);
        assert!(l.width >= r.iter().map(|r| r.x + r.w).fold(0.0, f64::max));
    }
}
