//! Operator fusion (Relay's `FuseOps`): `@main`'s op calls are grouped by Relay's graph
//! partitioner (`partition.rs`: post-dominator tree, three phases, op patterns from
//! [`kiln_ir::OpPattern`]) and each group becomes a function literal with
//! `Primitive=1`, called from `@main` — one kernel per call once lowered.
//!
//! What a group holds and what it takes: every value made outside the group is a
//! parameter (`%p0`, `%p1`, ... in first-use order), tensor constants included, since a
//! kernel only inlines scalar constants; scalar constants of the simple dtypes join
//! their consumer's group. Tuples returned to `@main` and calls of existing functions stay
//! in `@main`. The pass is registered at level 0 but fuses only at `opt_level >= 1`; at 0
//! every op call is its own primitive function, as Relay's partitioner does.

mod partition;

use std::collections::HashMap;

use kiln_ir::{Callee, ExprId, ExprKind, FnAttrs, Module};

use crate::error::{Error, Result};
use crate::pass::{Pass, PassContext, PassInfo, PassOutcome};

use partition::{ForwardGraph, partition};

/// Relay's default `relay.FuseOps.max_depth`: the most nodes one group holds.
pub const DEFAULT_MAX_DEPTH: usize = 256;

/// The fusion pass. See the module docs.
#[derive(Clone, Copy, Debug)]
pub struct FuseOps {
    /// The most nodes one group may hold (at least 1).
    pub max_depth: usize,
}

impl Default for FuseOps {
    fn default() -> FuseOps {
        FuseOps {
            max_depth: DEFAULT_MAX_DEPTH,
        }
    }
}

/// What fusion made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FuseStats {
    /// Primitive functions made (one kernel each).
    pub groups: usize,
    /// Op calls inside them.
    pub ops: usize,
    /// The most op calls in one group.
    pub largest: usize,
}

impl Pass for FuseOps {
    fn info(&self) -> PassInfo {
        PassInfo {
            name: "FuseOps",
            opt_level: 0,
        }
    }

    fn run(&self, module: &Module, ctx: &PassContext) -> Result<PassOutcome> {
        let (module, stats) = fuse_ops(module, ctx.opt_level >= 1, self.max_depth)?;
        Ok(PassOutcome::new(module)
            .detail("groups", stats.groups)
            .detail("ops", stats.ops)
            .detail("largest", stats.largest))
    }
}

/// Fuses `@main` of `m` (see the module docs); with `fuse` false every op call becomes
/// its own primitive function. Other global functions are kept as they are.
pub fn fuse_ops(m: &Module, fuse: bool, max_depth: usize) -> Result<(Module, FuseStats)> {
    if max_depth == 0 {
        return Err(Error::InvalidArgument(
            "FuseOps max_depth must be at least 1".into(),
        ));
    }
    let main = m.main()?.clone();
    let graph = ForwardGraph::new(m, main.body);
    let group = partition(&graph, fuse, max_depth);
    let nodes = &graph.nodes;
    // A group becomes a function when it holds an op call.
    let mut wrap = vec![false; nodes.len()];
    let mut members: HashMap<usize, Vec<usize>> = HashMap::new();
    for (i, n) in nodes.iter().enumerate() {
        members.entry(group[i]).or_default().push(i);
        if matches!(
            m.kind(n.id),
            ExprKind::Call {
                callee: Callee::Op(_),
                ..
            }
        ) {
            wrap[group[i]] = true;
        }
    }
    let mut out = m.clone();
    let mut stats = FuseStats::default();
    // Old id -> id in the new `@main`.
    let mut outer: HashMap<ExprId, ExprId> = HashMap::new();
    for (i, n) in nodes.iter().enumerate() {
        let g = group[i];
        if !wrap[g] {
            let kind = m.kind(n.id);
            let new = if kind
                .children()
                .iter()
                .all(|c| outer.get(c).is_none_or(|o| o == c))
            {
                n.id
            } else {
                let kind = kind.map_children(|c| *outer.get(&c).unwrap_or(&c));
                out.push_unchecked(kind, m.ty(n.id).clone())
            };
            outer.insert(n.id, new);
            continue;
        }
        if i != g {
            // A member: built when its group's root is reached.
            continue;
        }
        let group_members = &members[&g];
        if group_members.last() != Some(&g) {
            return Err(Error::Unsupported(format!(
                "fusion group of {} does not end at its root (an internal invariant)",
                n.id
            )));
        }
        let (call, ops) = make_function(m, &mut out, &graph, &group, group_members, &outer)?;
        stats.groups += 1;
        stats.ops += ops;
        stats.largest = stats.largest.max(ops);
        outer.insert(n.id, call);
    }
    let body = outer[&main.body];
    out.set_main(&main.params, body)?;
    Ok((out, stats))
}

/// Builds the primitive function of one group (members in order, the root last) and its
/// call from `@main`; returns the call and the number of op calls inside.
fn make_function(
    m: &Module,
    out: &mut Module,
    graph: &ForwardGraph,
    group: &[usize],
    members: &[usize],
    outer: &HashMap<ExprId, ExprId>,
) -> Result<(ExprId, usize)> {
    let g = *members.last().expect("a group has a member");
    let mut params: Vec<ExprId> = vec![];
    let mut args: Vec<ExprId> = vec![];
    // Old id -> id inside the function (members and parameters).
    let mut inner: HashMap<ExprId, ExprId> = HashMap::new();
    let mut ops = 0;
    for &k in members {
        let id = graph.nodes[k].id;
        let kind = m.kind(id);
        for c in kind.children() {
            let same_group = graph.index.get(&c).is_some_and(|&ci| group[ci] == g);
            if same_group || inner.contains_key(&c) {
                continue;
            }
            let arg = *outer.get(&c).ok_or_else(|| {
                Error::Unsupported(format!(
                    "fusion: {c}, an argument of {id}, has no value in @main yet"
                ))
            })?;
            let p = out.var(format!("p{}", params.len()), m.ty(c).clone());
            params.push(p);
            args.push(arg);
            inner.insert(c, p);
        }
        if kind.op().is_some() {
            ops += 1;
        }
        let new = out.push_unchecked(kind.map_children(|c| inner[&c]), m.ty(id).clone());
        inner.insert(id, new);
    }
    let body = inner[&graph.nodes[g].id];
    let f = out.function(&params, body, FnAttrs { primitive: true })?;
    let call = out.call_function(f, &args)?;
    Ok((call, ops))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_ir::op::{Conv2d, Softmax, Unary, UnaryKind};
    use kiln_ir::{DType, Type};

    fn unary(m: &mut Module, kind: UnaryKind, x: ExprId) -> ExprId {
        m.call(Unary { kind }, &[x]).unwrap()
    }

    /// `conv -> (relu | middle) -> add`: a diamond below a conv.
    fn diamond(opaque_middle: bool) -> Module {
        let mut m = Module::new();
        let x = m.var("x", Type::tensor([1, 2, 4, 4], DType::F32));
        let w = m.var("w", Type::tensor([2, 2, 1, 1], DType::F32));
        let c = m.call(Conv2d::default(), &[x, w]).unwrap();
        let a = unary(&mut m, UnaryKind::Relu, c);
        let b = if opaque_middle {
            m.call(Softmax { axis: -1 }, &[c]).unwrap()
        } else {
            unary(&mut m, UnaryKind::Exp, c)
        };
        let s = m
            .call(
                kiln_ir::op::Binary {
                    kind: kiln_ir::op::BinaryKind::Add,
                },
                &[a, b],
            )
            .unwrap();
        m.set_main(&[x, w], s).unwrap();
        m
    }

    #[test]
    fn a_diamond_of_elementwise_ops_joins_its_conv() {
        let (_, stats) = fuse_ops(&diamond(false), true, 256).unwrap();
        assert_eq!((stats.groups, stats.ops), (1, 4));
    }

    #[test]
    fn an_opaque_op_on_one_branch_blocks_the_conv() {
        // The conv's post-dominator is the add, but the softmax path is not
        // broadcast-only: conv alone, softmax alone, relu + add.
        let (_, stats) = fuse_ops(&diamond(true), true, 256).unwrap();
        assert_eq!(stats.groups, 3);
        assert_eq!(stats.largest, 2);
    }

    #[test]
    fn fusing_twice_changes_nothing_more() {
        let (once, s1) = fuse_ops(&diamond(false), true, 256).unwrap();
        let (twice, s2) = fuse_ops(&once, true, 256).unwrap();
        assert_eq!(s1.groups, 1);
        assert_eq!(s2.groups, 0, "calls of existing functions are left alone");
        assert_eq!(
            kiln_ir::text::print_module(&once, &Default::default()),
            kiln_ir::text::print_module(&twice, &Default::default())
        );
    }
}
