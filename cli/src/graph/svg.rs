//! The picture as SVG: one cluster (`<g class="cluster">`) per kernel with one box per op
//! inside (`<rect class="op">`), inputs and the output as rounded boxes, data edges as
//! curves labelled with shape and dtype. With a profile, each kernel is filled by its
//! share of the run time (white → red) and its title says the share. Hovering shows an
//! op's attributes (`<title>`). Element ids (`k3`, `n3_0`) let the HTML page attach to
//! it.

use std::fmt::Write;

use super::layout::{CHAR_W, LINE_H, Layout, PAD, Rect, TITLE_H, op_lines};
use super::scene::{Scene, UnitKind};

/// Per-kernel run time, in kernel order.
#[derive(Clone, Debug)]
pub struct KernelTimes {
    /// Mean time of one call of each kernel, in microseconds.
    pub time_us: Vec<f64>,
}

impl KernelTimes {
    /// Each kernel's share of the total, 0..=1.
    pub fn shares(&self) -> Vec<f64> {
        let total: f64 = self.time_us.iter().sum();
        self.time_us
            .iter()
            .map(|t| if total > 0.0 { t / total } else { 0.0 })
            .collect()
    }
}

/// Escapes text for XML content and attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// White (share 0) to red (share 1).
fn heat(share: f64) -> String {
    let s = share.clamp(0.0, 1.0);
    let mix = |from: f64, to: f64| (from + (to - from) * s).round() as u8;
    format!(
        "#{:02x}{:02x}{:02x}",
        mix(255.0, 222.0),
        mix(255.0, 45.0),
        mix(255.0, 38.0)
    )
}

const STYLE: &str = "\
.cluster>rect{fill:#f4f6fb;stroke:#5b6b8c;stroke-width:1.2}\
.cluster>text.title{font-weight:bold;fill:#1d2a44}\
rect.op{fill:#ffffff;stroke:#8895b3}\
text.detail{fill:#55607a;font-size:10px}\
.io>rect{fill:#e6f2e6;stroke:#5a8a5a}\
.tuple>rect{fill:#fff8e0;stroke:#b09a50}\
path.edge{fill:none;stroke:#6d7891;stroke-width:1.2}\
path.inner{fill:none;stroke:#a0a8bb;stroke-width:1}\
text.edge-label{fill:#6d7891;font-size:10px}";

/// The SVG document of `scene` laid out as `layout`; `times` colours the kernels.
pub fn render(scene: &Scene, layout: &Layout, times: Option<&KernelTimes>) -> String {
    let shares = times.map(KernelTimes::shares);
    let mut s = String::new();
    let (w, h) = (layout.width.ceil(), layout.height.ceil());
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} {h}" width="{w}" height="{h}" font-family="DejaVu Sans Mono, monospace" font-size="12">"#
    );
    let _ = writeln!(
        s,
        r##"<defs><marker id="arrow" viewBox="0 0 8 8" refX="8" refY="4" markerWidth="7" markerHeight="7" orient="auto"><path d="M0,0 L8,4 L0,8 z" fill="#6d7891"/></marker></defs>"##
    );
    let _ = writeln!(s, "<style>{STYLE}</style>");
    // Edges first, so boxes are drawn over them.
    s.push_str("<g id=\"edges\">\n");
    for e in &scene.edges {
        let (x1, y1) = layout.units[e.from].bottom();
        let (x2, y2) = layout.units[e.to].top();
        let dy = ((y2 - y1) / 2.0).max(12.0);
        let _ = writeln!(
            s,
            r#"<path class="edge" d="M{x1:.1},{y1:.1} C{x1:.1},{:.1} {x2:.1},{:.1} {x2:.1},{y2:.1}" marker-end="url(#arrow)"/>"#,
            y1 + dy,
            y2 - dy
        );
        // The label beside the curve's middle, on the side it bends to, so the labels of
        // a fork or a join do not overlap.
        let (anchor, dx) = if x2 < x1 - 1.0 {
            ("end", -4.0)
        } else {
            ("start", 4.0)
        };
        let _ = writeln!(
            s,
            r#"<text class="edge-label" text-anchor="{anchor}" x="{:.1}" y="{:.1}">{}</text>"#,
            (x1 + x2) / 2.0 + dx,
            (y1 + y2) / 2.0 + 3.0,
            escape(&e.label)
        );
    }
    s.push_str("</g>\n");
    for (u, unit) in scene.units.iter().enumerate() {
        let r = layout.units[u];
        match &unit.kind {
            UnitKind::Kernel { index, .. } => {
                let share = shares.as_ref().and_then(|sh| sh.get(*index).copied());
                let title = unit.caption();
                let _ = writeln!(
                    s,
                    r#"<g class="cluster" id="k{index}" data-kernel="{index}"><title>{}</title>"#,
                    escape(&title)
                );
                let fill = share.map(|sh| format!(r#" style="fill:{}""#, heat(sh)));
                rect(&mut s, r, "", fill.as_deref().unwrap_or(""));
                let _ = writeln!(
                    s,
                    r#"<text class="title" x="{:.1}" y="{:.1}">{}</text>"#,
                    r.x + PAD,
                    r.y + TITLE_H - 7.0,
                    escape(&title)
                );
                let boxes = &layout.ops[u];
                for (i, op) in unit.ops.iter().enumerate() {
                    let b = boxes[i];
                    for &from in &op.reads {
                        if from + 1 != i {
                            continue; // only the chain between neighbours is drawn
                        }
                        let (x1, y1) = boxes[from].bottom();
                        let (x2, y2) = b.top();
                        let _ = writeln!(
                            s,
                            r#"<path class="inner" d="M{x1:.1},{y1:.1} L{x2:.1},{y2:.1}" marker-end="url(#arrow)"/>"#
                        );
                    }
                    let mut tip = format!("{} -> {}", op.op, op.result);
                    for d in &op.details {
                        tip.push('\n');
                        tip.push_str(d);
                    }
                    let _ = writeln!(
                        s,
                        r#"<g class="node" id="n{index}_{i}" data-kernel="{index}" data-op="{i}"><title>{}</title>"#,
                        escape(&tip)
                    );
                    rect(&mut s, b, "op", "");
                    for (l, line) in op_lines(op).iter().enumerate() {
                        let class = if l == 0 { "" } else { r#" class="detail""# };
                        let _ = writeln!(
                            s,
                            r#"<text{class} x="{:.1}" y="{:.1}">{}</text>"#,
                            b.x + PAD,
                            b.y + LINE_H * (l as f64 + 1.0) - 2.0,
                            escape(line)
                        );
                    }
                    s.push_str("</g>\n");
                }
                s.push_str("</g>\n");
            }
            kind => {
                let class = match kind {
                    UnitKind::Tuple => "tuple",
                    _ => "io",
                };
                let _ = writeln!(
                    s,
                    r#"<g class="{class}" id="u{u}"><title>{}</title>"#,
                    escape(&unit.title)
                );
                rect(&mut s, r, "", r#" rx="9""#);
                let _ = writeln!(
                    s,
                    r#"<text x="{:.1}" y="{:.1}">{}</text>"#,
                    r.x + (r.w - unit.title.chars().count() as f64 * CHAR_W) / 2.0,
                    r.y + PAD + LINE_H - 3.0,
                    escape(&unit.title)
                );
                s.push_str("</g>\n");
            }
        }
    }
    s.push_str("</svg>\n");
    s
}

fn rect(s: &mut String, r: Rect, class: &str, extra: &str) {
    let class = if class.is_empty() {
        String::new()
    } else {
        format!(r#" class="{class}""#)
    };
    let _ = writeln!(
        s,
        r#"<rect{class} x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}"{extra}/>"#,
        r.x, r.y, r.w, r.h
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heat_goes_from_white_to_red_and_escape_covers_markup() {
        assert_eq!(heat(0.0), "#ffffff");
        assert_eq!(heat(1.0), "#de2d26");
        assert_eq!(escape(r#"<a & "b">"#), "&lt;a &amp; &quot;b&quot;&gt;");
    }
}
