//! Relay's graph partitioner (src/relay/transforms/fuse_ops.cc), on kiln's arena: the
//! indexed forward graph of a function body ([`ForwardGraph`]: nodes in post-DFS order,
//! each with its pattern and its consumers, every edge labelled with the pattern it is
//! used under), its post-dominator tree, and [`partition`], which groups nodes in three
//! phases:
//!
//! 0. an `OutEWiseFusable` node (conv2d, dense, pools) joins its post-dominator when the
//!    edge to it is elementwise and every node between is at most broadcast;
//! 1. elementwise/broadcast nodes join an injective or reduction post-dominator (every
//!    path at most injective, the sink may be anything fusable), injective nodes and
//!    tuples join their post-dominator along injective paths;
//! 2. injective nodes join a tuple that already joined an injective consumer.
//!
//! Opaque nodes never join anything, nothing joins a tuple in phases 0 and 1, and a
//! group never grows past `max_depth` nodes. With fusion off every node is its own
//! group (Relay at `opt_level=0`).

use std::collections::{HashMap, HashSet};

use kiln_ir::{Callee, DType, ExprId, ExprKind, Module, OpPattern, Type};

/// One node of the forward graph.
pub(crate) struct Node {
    pub(crate) id: ExprId,
    pub(crate) pattern: OpPattern,
    /// Used outside the graph (the body's result, a callee, ...): never fused into a
    /// consumer.
    extern_ref: bool,
    /// Consumers, with the pattern of each use.
    outputs: Vec<(usize, OpPattern)>,
}

/// The dataflow graph of one function body, nodes in post-DFS (arena) order.
pub(crate) struct ForwardGraph {
    pub(crate) nodes: Vec<Node>,
    pub(crate) index: HashMap<ExprId, usize>,
}

/// A scalar constant kernels take as an immediate (Relay fuses scalars of the simple
/// dtypes; other constants stay outside as kernel arguments).
fn fusable_constant(m: &Module, id: ExprId) -> bool {
    match m.ty(id) {
        Type::Tensor(t) => {
            t.shape.iter().product::<usize>() == 1
                && matches!(t.dtype, DType::F32 | DType::I32 | DType::I64 | DType::Bool)
        }
        _ => false,
    }
}

impl ForwardGraph {
    /// The graph of the body `body` (function literals are leaves, not entered).
    pub(crate) fn new(m: &Module, body: ExprId) -> ForwardGraph {
        let order = kiln_ir::visit::body_order(m, body);
        let index: HashMap<ExprId, usize> =
            order.iter().enumerate().map(|(i, &id)| (id, i)).collect();
        let mut nodes: Vec<Node> = order
            .iter()
            .map(|&id| Node {
                id,
                pattern: OpPattern::Opaque,
                extern_ref: false,
                outputs: vec![],
            })
            .collect();
        let mut edges: Vec<(ExprId, usize, OpPattern)> = vec![];
        for (i, &id) in order.iter().enumerate() {
            let pattern = match m.kind(id) {
                ExprKind::Constant(_) if fusable_constant(m, id) => OpPattern::ElemWise,
                ExprKind::Call {
                    callee: Callee::Op(op),
                    args,
                } => {
                    let pattern = op.pattern();
                    let out_shape = m.ty(id).as_tensor().map(|t| &t.shape);
                    for &a in args {
                        // A broadcast use of an argument of the result's shape is
                        // elementwise.
                        let same = out_shape.is_some()
                            && m.ty(a).as_tensor().map(|t| &t.shape) == out_shape;
                        let edge = if pattern == OpPattern::Broadcast && same {
                            OpPattern::ElemWise
                        } else {
                            pattern
                        };
                        edges.push((a, i, edge));
                    }
                    pattern
                }
                ExprKind::Call {
                    callee: Callee::Expr(f),
                    args,
                } => {
                    nodes[index[f]].extern_ref = true;
                    for &a in args {
                        edges.push((a, i, OpPattern::Opaque));
                    }
                    OpPattern::Opaque
                }
                ExprKind::Tuple(fields) => {
                    for &f in fields {
                        if m.ty(f).as_tensor().is_some() {
                            edges.push((f, i, OpPattern::Injective));
                        } else {
                            nodes[index[&f]].extern_ref = true;
                        }
                    }
                    OpPattern::Tuple
                }
                ExprKind::TupleGetItem { tuple, .. } => {
                    edges.push((*tuple, i, OpPattern::Injective));
                    OpPattern::Injective
                }
                ExprKind::Function(_) | ExprKind::GlobalVar(_) => {
                    nodes[i].extern_ref = true;
                    OpPattern::Opaque
                }
                ExprKind::Var { .. } | ExprKind::Constant(_) => OpPattern::Opaque,
            };
            nodes[i].pattern = pattern;
        }
        for (from, to, pattern) in edges {
            nodes[index[&from]].outputs.push((to, pattern));
        }
        nodes[index[&body]].extern_ref = true;
        ForwardGraph { nodes, index }
    }
}

/// A node of the post-dominator tree.
#[derive(Clone, Copy)]
struct DomNode {
    parent: Option<usize>,
    depth: usize,
    /// The largest pattern on the way to the parent.
    pattern: OpPattern,
}

/// The immediate post-dominator of every node (Relay's `DominatorTree::PostDom`),
/// computed in reverse post-DFS order as the least common ancestor of the consumers.
fn post_dominators(g: &ForwardGraph) -> Vec<DomNode> {
    let n = g.nodes.len();
    let mut tree = vec![
        DomNode {
            parent: None,
            depth: 1,
            pattern: OpPattern::Opaque,
        };
        n
    ];
    for i in (0..n).rev() {
        let node = &g.nodes[i];
        if node.extern_ref {
            continue;
        }
        let mut pattern = OpPattern::ElemWise;
        let mut parent: Option<usize> = None;
        for (k, &(out, edge)) in node.outputs.iter().enumerate() {
            parent = if k == 0 {
                Some(out)
            } else {
                lca(&tree, parent, Some(out), &mut pattern)
            };
            pattern = pattern.max(edge);
        }
        tree[i] = DomNode {
            parent,
            depth: parent.map_or(1, |p| tree[p].depth + 1),
            pattern,
        };
    }
    tree
}

/// The least common ancestor of two tree nodes, widening `pattern` by every step taken.
fn lca(
    tree: &[DomNode],
    mut a: Option<usize>,
    mut b: Option<usize>,
    pattern: &mut OpPattern,
) -> Option<usize> {
    while a != b {
        let (x, y) = (a?, b?);
        let (dx, dy) = (tree[x].depth, tree[y].depth);
        if dx < dy {
            *pattern = (*pattern).max(tree[y].pattern);
            b = tree[y].parent;
        } else if dy < dx {
            *pattern = (*pattern).max(tree[x].pattern);
            a = tree[x].parent;
        } else {
            *pattern = (*pattern).max(tree[x].pattern).max(tree[y].pattern);
            a = tree[x].parent;
            b = tree[y].parent;
        }
    }
    a
}

/// A union-find group of nodes.
struct Group {
    parent: Option<usize>,
    pattern: OpPattern,
    /// Holds an `OutEWiseFusable` node.
    anchored: bool,
    num_nodes: usize,
}

struct Partitioner<'g> {
    graph: &'g ForwardGraph,
    groups: Vec<Group>,
    max_depth: usize,
}

impl Partitioner<'_> {
    fn root(&self, mut g: usize) -> usize {
        while let Some(p) = self.groups[g].parent {
            g = p;
        }
        g
    }

    fn merge(&mut self, child: usize, parent: usize) {
        let (child, parent) = (self.root(child), self.root(parent));
        if child == parent {
            return;
        }
        self.groups[parent].num_nodes += self.groups[child].num_nodes;
        self.groups[child].parent = Some(parent);
        if self.groups[child].anchored {
            self.groups[parent].anchored = true;
            self.groups[parent].pattern =
                self.groups[parent].pattern.max(self.groups[child].pattern);
        }
    }

    /// Whether every node on the paths from `src` (exclusive) to `sink` satisfies `cond`
    /// (given its group's pattern and whether it is the sink).
    fn check_path(&self, src: usize, sink: usize, cond: impl Fn(OpPattern, bool) -> bool) -> bool {
        let mut seen = HashSet::new();
        let mut stack: Vec<usize> = self.graph.nodes[src].outputs.iter().map(|o| o.0).collect();
        while let Some(n) = stack.pop() {
            if !seen.insert(n) {
                continue;
            }
            if !cond(self.groups[self.root(n)].pattern, n == sink) {
                return false;
            }
            if n != sink {
                stack.extend(self.graph.nodes[n].outputs.iter().map(|o| o.0));
            }
        }
        true
    }

    /// Merges every node on the paths from `src` to `sink` into `sink`'s group.
    fn commit(&mut self, src: usize, sink: usize) {
        let mut seen = HashSet::new();
        let mut stack = vec![src];
        while let Some(n) = stack.pop() {
            if n == sink || !seen.insert(n) {
                continue;
            }
            self.merge(n, sink);
            stack.extend(self.graph.nodes[n].outputs.iter().map(|o| o.0));
        }
    }

    /// Nodes the group of `sink` would hold after `child`'s paths join it.
    fn count_with(&self, child: usize, sink: usize) -> usize {
        let mut seen = HashSet::new();
        let mut stack = vec![child];
        let mut sum = self.groups[self.root(sink)].num_nodes;
        while let Some(n) = stack.pop() {
            if n == sink || !seen.insert(n) {
                continue;
            }
            sum += self.groups[n].num_nodes;
            stack.extend(self.graph.nodes[n].outputs.iter().map(|o| o.0));
        }
        sum
    }

    fn run_phase(&mut self, dom: &[DomNode], phase: u8) {
        use OpPattern::*;
        for (nid, node) in dom.iter().enumerate() {
            let pattern = self.groups[nid].pattern;
            if pattern == Opaque {
                continue;
            }
            let Some(parent) = node.parent else {
                continue;
            };
            if self.count_with(nid, parent) > self.max_depth {
                continue;
            }
            let parent_pattern = self.groups[parent].pattern;
            let parent_root = self.root(parent);
            if phase == 2 {
                // Injective ops into a tuple that already joined an injective consumer.
                if pattern > Injective || self.groups[parent_root].pattern == Tuple {
                    continue;
                }
                if parent_pattern == Tuple
                    && self.groups[parent_root].pattern <= Injective
                    && self.check_path(nid, parent, |k, _| k <= Injective)
                {
                    self.commit(nid, parent);
                }
                continue;
            }
            if self.root(nid) == parent_root || parent_pattern == Tuple {
                continue;
            }
            if pattern == OutEWiseFusable {
                if phase == 0
                    && node.pattern == ElemWise
                    && self.check_path(nid, parent, |k, _| k <= Broadcast)
                {
                    self.commit(nid, parent);
                }
            } else if pattern <= Broadcast {
                if (node.pattern <= Injective || node.pattern == CommReduce)
                    && self.check_path(nid, parent, |k, sink| {
                        if sink {
                            k <= Injective || k == CommReduce || k == OutEWiseFusable
                        } else {
                            k <= Injective
                        }
                    })
                {
                    self.commit(nid, parent);
                }
            } else if (pattern == Injective || pattern == Tuple)
                && phase == 1
                && self.check_path(nid, parent, |k, _| k <= Injective)
            {
                self.commit(nid, parent);
            }
        }
    }
}

/// The group of every node of `g`: the index of its group's root node (the node whose
/// value the group returns). Without `fuse`, every node is its own group.
pub(crate) fn partition(g: &ForwardGraph, fuse: bool, max_depth: usize) -> Vec<usize> {
    let mut p = Partitioner {
        graph: g,
        groups: g
            .nodes
            .iter()
            .map(|n| Group {
                parent: None,
                pattern: n.pattern,
                anchored: n.pattern == OpPattern::OutEWiseFusable,
                num_nodes: 1,
            })
            .collect(),
        max_depth,
    };
    if fuse {
        let dom = post_dominators(g);
        for phase in 0..3 {
            p.run_phase(&dom, phase);
        }
    }
    (0..g.nodes.len()).map(|i| p.root(i)).collect()
}
