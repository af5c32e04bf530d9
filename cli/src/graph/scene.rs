//! What `kiln graph` draws, taken from an (optimized) graph-IR module: one unit per
//! model input, per kernel (a call of a fused primitive group, or of a lone op, in the
//! order the executor builds kernels), per tuple and for the output; the ops inside each
//! kernel with their attributes; constants and weights folded into the label of the op
//! that reads them; the data edges between units, labelled with the shape and dtype
//! they carry. Independent of how it is drawn (`svg`, `html`, `dot`).

use std::collections::{BTreeMap, HashMap};

use anyhow::{Result, bail};
use kiln::layers::ir::visit::body_order;
use kiln::layers::ir::{Callee, ExprId, ExprKind, Module, Type};

/// One drawn op inside a kernel.
#[derive(Clone, Debug)]
pub struct OpNode {
    /// The op's name (`nn.conv2d`).
    pub op: String,
    /// Its attributes (`strides=[2, 2]`), then what it reads that is folded into it
    /// (`weight conv1_weight (64, 3, 7, 7) float32`).
    pub details: Vec<String>,
    /// The result type, `(1, 64, 112, 112) float32`.
    pub result: String,
    /// Indices (into the unit's `ops`) of the ops of the same kernel this op reads.
    pub reads: Vec<usize>,
}

/// What a unit stands for.
#[derive(Clone, Debug, PartialEq)]
pub enum UnitKind {
    /// A model input (`%data`).
    Input,
    /// One kernel: its TVM-style name (`fused_nn_conv2d_add_nn_relu`, as `kiln compile`
    /// and `kiln profile` name it) and its position among the kernels.
    Kernel { name: String, index: usize },
    /// A tuple or a field of one: no kernel, only data routing.
    Tuple,
    /// The model's result.
    Output,
}

/// A box in the picture.
#[derive(Clone, Debug)]
pub struct Unit {
    pub kind: UnitKind,
    /// The box's title (an input's name, a kernel's name, `output`).
    pub title: String,
    /// The ops of a kernel, in evaluation order (empty for other units).
    pub ops: Vec<OpNode>,
    /// A note drawn after the title (a kernel's share of the run time).
    pub note: Option<String>,
}

impl Unit {
    /// The title with its note: `fused_nn_dense (97.6%, 1.20 ms)`.
    pub fn caption(&self) -> String {
        match &self.note {
            Some(note) => format!("{} ({note})", self.title),
            None => self.title.clone(),
        }
    }
}

/// A data edge between two units.
#[derive(Clone, Debug)]
pub struct Edge {
    pub from: usize,
    pub to: usize,
    /// What flows: `(1, 64, 56, 56) float32`.
    pub label: String,
}

/// The whole picture, units in a topological order.
#[derive(Clone, Debug, Default)]
pub struct Scene {
    pub units: Vec<Unit>,
    pub edges: Vec<Edge>,
}

impl Scene {
    /// The kernel units with their kernel index, in kernel order.
    pub fn kernels(&self) -> impl Iterator<Item = (usize, &Unit)> {
        self.units.iter().filter_map(|u| match u.kind {
            UnitKind::Kernel { index, .. } => Some((index, u)),
            _ => None,
        })
    }

    /// The number of drawn ops.
    pub fn op_count(&self) -> usize {
        self.units.iter().map(|u| u.ops.len()).sum()
    }
}

/// `(1, 64, 56, 56) float32`, or the fields of a tuple type.
pub fn type_label(ty: &Type) -> String {
    match ty {
        Type::Tensor(t) => format!("{} {}", kiln::layers::ir::ty::fmt_shape(&t.shape), t.dtype),
        Type::Tuple(fields) => {
            let parts: Vec<String> = fields.iter().map(type_label).collect();
            format!("({})", parts.join(", "))
        }
        other => other.to_string(),
    }
}

/// The scene of `m`'s `@main`. `weights` are the names of `@main` parameters that hold
/// weights (drawn inside their consumer, not as inputs).
pub fn scene_of(m: &Module, weights: &dyn Fn(&str) -> bool) -> Result<Scene> {
    let main = m.main()?;
    let mut scene = Scene::default();
    // Main-level value -> the unit producing it; folded values -> their description.
    let mut producer: HashMap<ExprId, usize> = HashMap::new();
    let mut folded: HashMap<ExprId, String> = HashMap::new();
    for &p in &main.params {
        let name = m.var_name(p).unwrap_or("input").to_string();
        if weights(&name) {
            folded.insert(p, format!("weight {name} {}", type_label(m.ty(p))));
        } else {
            producer.insert(p, scene.units.len());
            scene.units.push(Unit {
                kind: UnitKind::Input,
                title: name,
                ops: vec![],
                note: None,
            });
        }
    }
    let mut name_counts: HashMap<String, usize> = HashMap::new();
    let mut kernel_index = 0;
    for id in body_order(m, main.body) {
        match m.kind(id) {
            ExprKind::Var { .. } | ExprKind::Function(_) | ExprKind::GlobalVar(_) => {}
            ExprKind::Constant(c) => {
                folded.insert(
                    id,
                    format!(
                        "constant {} {}",
                        kiln::layers::ir::ty::fmt_shape(c.shape()),
                        c.dtype()
                    ),
                );
            }
            ExprKind::Call { callee, args } => {
                let (ops, base) = match callee {
                    Callee::Op(op) => {
                        let details = attr_details(op)
                            .into_iter()
                            .chain(args.iter().filter_map(|a| folded.get(a).cloned()))
                            .collect();
                        let node = OpNode {
                            op: op.name().to_string(),
                            details,
                            result: type_label(m.ty(id)),
                            reads: vec![],
                        };
                        (vec![node], format!("fused_{}", op.name().replace('.', "_")))
                    }
                    Callee::Expr(f) => {
                        let ExprKind::Function(func) = m.kind(*f) else {
                            bail!(
                                "{id} calls a global function; `kiln graph` draws inlined models"
                            );
                        };
                        // A function parameter bound to a folded value at the call.
                        let outer: HashMap<ExprId, String> = func
                            .params
                            .iter()
                            .zip(args)
                            .filter_map(|(&p, a)| folded.get(a).map(|d| (p, d.clone())))
                            .collect();
                        let ops = group_ops(m, func.body, &outer);
                        let base = kiln::layers::te::topi::kernel_name(m, *f)?;
                        (ops, base)
                    }
                };
                let n = name_counts.entry(base.clone()).or_insert(0);
                let name = if *n == 0 {
                    base.clone()
                } else {
                    format!("{base}_{n}")
                };
                *n += 1;
                let unit = scene.units.len();
                scene.units.push(Unit {
                    kind: UnitKind::Kernel {
                        name: name.clone(),
                        index: kernel_index,
                    },
                    title: name,
                    ops,
                    note: None,
                });
                kernel_index += 1;
                connect(m, &mut scene, &producer, args, unit);
                producer.insert(id, unit);
            }
            ExprKind::Tuple(fields) => {
                let unit = scene.units.len();
                scene.units.push(Unit {
                    kind: UnitKind::Tuple,
                    title: "tuple".to_string(),
                    ops: vec![],
                    note: None,
                });
                connect(m, &mut scene, &producer, fields, unit);
                producer.insert(id, unit);
            }
            ExprKind::TupleGetItem { tuple, index } => {
                // A field of a kernel's tuple result stays that kernel's output.
                if let Some(&u) = producer.get(tuple) {
                    producer.insert(id, u);
                } else if let Some(d) = folded.get(tuple) {
                    folded.insert(id, format!("{d}.{index}"));
                }
            }
        }
    }
    let out = scene.units.len();
    scene.units.push(Unit {
        kind: UnitKind::Output,
        title: "output".to_string(),
        ops: vec![],
        note: None,
    });
    connect(m, &mut scene, &producer, &[main.body], out);
    Ok(scene)
}

/// Edges from the producers of `args` into `unit` (folded values have none).
fn connect(
    m: &Module,
    scene: &mut Scene,
    producer: &HashMap<ExprId, usize>,
    args: &[ExprId],
    unit: usize,
) {
    for &a in args {
        if let Some(&from) = producer.get(&a) {
            scene.edges.push(Edge {
                from,
                to: unit,
                label: type_label(m.ty(a)),
            });
        }
    }
}

/// The ops of a fused group's body, in evaluation order, with the constants and folded
/// parameters they read as details and which earlier ops they read.
fn group_ops(m: &Module, body: ExprId, outer: &HashMap<ExprId, String>) -> Vec<OpNode> {
    let mut ops = vec![];
    // Value -> the op index producing it (tuple-gets pass through).
    let mut made_by: BTreeMap<ExprId, usize> = BTreeMap::new();
    for id in body_order(m, body) {
        match m.kind(id) {
            ExprKind::Call {
                callee: Callee::Op(op),
                args,
            } => {
                let mut details = attr_details(op);
                let mut reads = vec![];
                for a in args {
                    if let Some(&i) = made_by.get(a) {
                        reads.push(i);
                    } else if let Some(d) = outer.get(a) {
                        details.push(d.clone());
                    } else if let ExprKind::Constant(c) = m.kind(*a) {
                        details.push(if c.shape().is_empty() {
                            format!("constant {}", scalar_text(c))
                        } else {
                            format!(
                                "constant {} {}",
                                kiln::layers::ir::ty::fmt_shape(c.shape()),
                                c.dtype()
                            )
                        });
                    }
                }
                reads.dedup();
                made_by.insert(id, ops.len());
                ops.push(OpNode {
                    op: op.name().to_string(),
                    details,
                    result: type_label(m.ty(id)),
                    reads,
                });
            }
            ExprKind::TupleGetItem { tuple, .. } => {
                if let Some(&i) = made_by.get(tuple) {
                    made_by.insert(id, i);
                }
            }
            _ => {}
        }
    }
    ops
}

/// `name=value` for each attribute of an op.
fn attr_details(op: &kiln::layers::ir::Op) -> Vec<String> {
    op.attrs()
        .into_iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect()
}

/// A one-element constant's value as text.
fn scalar_text(c: &kiln::NDArray) -> String {
    match c.to_f64_vec().first() {
        Some(v) => format!("{v} ({})", c.dtype()),
        None => format!("({})", c.dtype()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mlp_at_opt_3_has_one_kernel_unit_per_fused_group_and_folds_weights() {
        let (m, params) = kiln::layers::ir::zoo::by_name("mlp").unwrap();
        let opt = kiln::optimize(&m, &params, 3).unwrap();
        let scene = scene_of(&opt.module, &|n| opt.params.contains_key(n)).unwrap();
        let kernels = kiln::layers::te::topi::kernels_of(
            &opt.module,
            kiln::layers::te::topi::ScheduleKind::Cpu,
        )
        .unwrap();
        let names: Vec<&str> = scene.kernels().map(|(_, u)| u.title.as_str()).collect();
        let want: Vec<&str> = kernels.iter().map(|k| k.name.as_str()).collect();
        assert_eq!(names, want);
        // The weights are folded into the dense ops, not drawn as inputs.
        let inputs: Vec<&str> = scene
            .units
            .iter()
            .filter(|u| u.kind == UnitKind::Input)
            .map(|u| u.title.as_str())
            .collect();
        assert_eq!(inputs, ["data"]);
        let dense = scene
            .units
            .iter()
            .flat_map(|u| &u.ops)
            .find(|o| o.op == "nn.dense")
            .unwrap();
        assert!(
            dense.details.iter().any(|d| d.starts_with("weight fc")),
            "{dense:?}"
        );
        // A chain: input -> 5 kernels -> output, 6 edges.
        assert_eq!(scene.edges.len(), scene.units.len() - 1);
    }
}
