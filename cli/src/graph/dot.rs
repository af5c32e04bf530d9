//! The picture as Graphviz DOT text: one `subgraph cluster_K` per kernel holding its
//! ops, inputs and the output as ellipses, data edges between kernels labelled with
//! shape and dtype (from the last op of the producing kernel to the first op of the
//! consuming one). For people who have Graphviz; kiln itself draws SVG without it.

use std::fmt::Write;

use super::scene::{Scene, UnitKind};

fn quote(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The node id of a unit as an edge endpoint: its last op when it leaves, its first
/// when it is entered.
fn endpoint(scene: &Scene, u: usize, leaving: bool) -> String {
    let unit = &scene.units[u];
    match unit.kind {
        UnitKind::Kernel { index, .. } if !unit.ops.is_empty() => {
            let op = if leaving { unit.ops.len() - 1 } else { 0 };
            format!("n{index}_{op}")
        }
        _ => format!("u{u}"),
    }
}

/// The DOT document of `scene`.
pub fn render(scene: &Scene) -> String {
    let mut s = String::from(
        "digraph kiln {\n  rankdir=TB;\n  node [shape=box, fontname=\"monospace\", fontsize=10];\n",
    );
    for (u, unit) in scene.units.iter().enumerate() {
        match &unit.kind {
            UnitKind::Kernel { index, .. } => {
                let label = unit.caption();
                let _ = writeln!(
                    s,
                    "  subgraph cluster_{index} {{\n    label={};",
                    quote(&label)
                );
                for (i, op) in unit.ops.iter().enumerate() {
                    let mut text = op.op.clone();
                    for d in &op.details {
                        text.push('\n');
                        text.push_str(d);
                    }
                    let _ = writeln!(s, "    n{index}_{i} [label={}];", quote(&text));
                    for &from in &op.reads {
                        let _ = writeln!(s, "    n{index}_{from} -> n{index}_{i};");
                    }
                }
                s.push_str("  }\n");
            }
            _ => {
                let _ = writeln!(s, "  u{u} [label={}, shape=ellipse];", quote(&unit.title));
            }
        }
    }
    for e in &scene.edges {
        let _ = writeln!(
            s,
            "  {} -> {} [label={}];",
            endpoint(scene, e.from, true),
            endpoint(scene, e.to, false),
            quote(&e.label)
        );
    }
    s.push_str("}\n");
    s
}
