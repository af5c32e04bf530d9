//! Sharing-aware extraction: picks one node per e-class so that the extracted DAG is
//! cheap, counting a class used by several parents once (egg's `Extractor` sums tree
//! costs, paying a shared subterm once per use).
//!
//! Algorithm ([`dag_choice`], the "greedy DAG" heuristic): every class keeps its best
//! node so far together with the *set* of classes its term uses, each with its own node
//! cost. A node's set is the union of its children's sets plus its own class; its cost
//! is the sum over that set, so a class reached along two paths counts once. A worklist
//! starts from the classes with leaves and re-evaluates the parents of every class whose
//! best term got cheaper, until nothing improves (each update strictly lowers a class's
//! cost, so this ends; [`MAX_ROUNDS`] bounds the work anyway). A node whose children's sets already
//! contain its own class would close a cycle and is skipped. The result is a heuristic —
//! exact DAG extraction is NP-hard — so [`improve_shared`] then tries joint moves of
//! several classes onto one shared new subterm (what merging parallel layers needs: no
//! single class gets cheaper by it, the pair does), and the pass also builds the
//! tree-cost choice
//! ([`tree_choice`]), measures both with [`super::cost::function_cost`] and keeps the
//! cheaper, and keeps the input when neither is cheaper than it.

use std::collections::{HashMap, HashSet, VecDeque};
use std::rc::Rc;

use egg::{CostFunction, Extractor, Id, Language};
use kiln_ir::Type;

use super::analysis::EGraph;
use super::cost::CostModel;
use super::lang::Node;

/// [`dag_choice`] evaluates at most this many times the e-graph's node count of nodes.
pub const MAX_ROUNDS: usize = 64;

/// The run-time cost of `node` in `class`: zero for constants, leaves, tuples and
/// tuple fields; the model's op cost for a call.
pub fn node_cost(g: &EGraph, model: &dyn CostModel, node: &Node, constant: bool) -> f64 {
    match node {
        Node::Call(op, args) if !constant => {
            let tys: Vec<Type> = args.iter().map(|&a| g[a].data.ty.clone()).collect();
            let out = op.infer_type(&tys).unwrap_or(Type::Tuple(vec![]));
            model.op_cost(op, &tys, &out)
        }
        _ => 0.0,
    }
}

fn node_is_const(g: &EGraph, node: &Node) -> bool {
    match node {
        Node::Var(_) => false,
        Node::Const(_) => true,
        other => other.children().iter().all(|&c| g[c].data.constant),
    }
}

type CostSet = Rc<Vec<(Id, f64)>>;

fn union(a: &[(Id, f64)], b: &[(Id, f64)]) -> Vec<(Id, f64)> {
    let mut out = Vec::with_capacity(a.len() + b.len());
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        match a[i].0.cmp(&b[j].0) {
            std::cmp::Ordering::Less => {
                out.push(a[i]);
                i += 1;
            }
            std::cmp::Ordering::Greater => {
                out.push(b[j]);
                j += 1;
            }
            std::cmp::Ordering::Equal => {
                out.push(a[i]);
                i += 1;
                j += 1;
            }
        }
    }
    out.extend_from_slice(&a[i..]);
    out.extend_from_slice(&b[j..]);
    out
}

/// The greedy-DAG choice: the best node of every class that has an acyclic term.
pub fn dag_choice(g: &EGraph, model: &dyn CostModel) -> HashMap<Id, Node> {
    let mut best: HashMap<Id, (Node, CostSet, f64)> = HashMap::new();
    // A worklist of classes to (re)evaluate: the classes with a leaf first, then the
    // parents of every class whose best term improved.
    let mut queue: VecDeque<Id> = g
        .classes()
        .filter(|c| c.nodes.iter().any(Language::is_leaf))
        .map(|c| c.id)
        .collect();
    let mut queued: HashSet<Id> = queue.iter().copied().collect();
    let mut budget = MAX_ROUNDS * g.total_number_of_nodes().max(1);
    while let Some(class) = queue.pop_front() {
        queued.remove(&class);
        let mut improved = false;
        for node in &g[class].nodes {
            if budget == 0 {
                break;
            }
            budget -= 1;
            let kids: Vec<Id> = node.children().iter().map(|&c| g.find(c)).collect();
            if !kids.iter().all(|k| best.contains_key(k)) {
                continue;
            }
            let mut set: Vec<(Id, f64)> = vec![];
            for k in &kids {
                set = union(&set, &best[k].1);
            }
            if set.binary_search_by_key(&class, |e| e.0).is_ok() {
                continue;
            }
            let own = node_cost(g, model, node, node_is_const(g, node));
            let pos = set.partition_point(|e| e.0 < class);
            set.insert(pos, (class, own));
            let total: f64 = set.iter().map(|e| e.1).sum();
            let better = match best.get(&class) {
                None => true,
                Some((_, _, old)) => total < *old - 1e-9 * old.abs(),
            };
            if better {
                best.insert(class, (node.clone(), Rc::new(set), total));
                improved = true;
            }
        }
        if improved {
            for p in g[class].parents() {
                let p = g.find(p);
                if queued.insert(p) {
                    queue.push_back(p);
                }
            }
        }
    }
    best.into_iter().map(|(c, (n, _, _))| (c, n)).collect()
}

/// The DAG cost of the term rooted at `root` under `choice` (every class once) and its
/// classes; `None` if the choice is cyclic or misses a class.
pub fn term_cost(
    g: &EGraph,
    model: &dyn CostModel,
    root: Id,
    choice: &HashMap<Id, Node>,
) -> Option<(f64, HashSet<Id>)> {
    let mut done: HashSet<Id> = HashSet::new();
    let mut on_path: HashSet<Id> = HashSet::new();
    let mut total = 0.0;
    // Iterative DFS: (class, children pushed?).
    let mut stack = vec![(g.find(root), false)];
    while let Some((c, expanded)) = stack.pop() {
        if expanded {
            on_path.remove(&c);
            done.insert(c);
            let node = &choice[&c];
            total += node_cost(g, model, node, node_is_const(g, node));
            continue;
        }
        if done.contains(&c) {
            continue;
        }
        if !on_path.insert(c) {
            return None;
        }
        stack.push((c, true));
        for &k in choice.get(&c)?.children() {
            let k = g.find(k);
            if on_path.contains(&k) {
                return None;
            }
            if !done.contains(&k) {
                stack.push((k, false));
            }
        }
    }
    Some((total, done))
}

/// Improves `choice` by moves the greedy pass cannot see: when several classes of the
/// current term each have a node using one class `s` outside the term (the fields of a
/// merged layer's split, say), choosing those nodes together pays for `s` once; the
/// move is kept when the term's DAG cost drops. Returns the number of moves kept.
pub fn improve_shared(
    g: &EGraph,
    model: &dyn CostModel,
    root: Id,
    choice: &mut HashMap<Id, Node>,
) -> usize {
    let Some((mut cost, mut term)) = term_cost(g, model, root, choice) else {
        return 0;
    };
    let mut kept = 0;
    let classes: Vec<Id> = g.classes().map(|c| c.id).collect();
    for s in classes {
        if term.contains(&s) {
            continue;
        }
        let mut users: Vec<(Id, Node)> = vec![];
        let mut seen: HashSet<Id> = HashSet::new();
        for p in g[s].parents() {
            let pc = g.find(p);
            if !term.contains(&pc) || !seen.insert(pc) {
                continue;
            }
            let current = &choice[&pc];
            if let Some(n) = g[pc]
                .nodes
                .iter()
                .find(|n| *n != current && n.children().iter().any(|&k| g.find(k) == s))
            {
                users.push((pc, n.clone()));
            }
        }
        if users.len() < 2 {
            continue;
        }
        let mut trial = choice.clone();
        for (c, n) in users {
            trial.insert(c, n);
        }
        if let Some((t, tt)) = term_cost(g, model, root, &trial)
            && t < cost - 1e-9 * cost.abs()
        {
            *choice = trial;
            cost = t;
            term = tt;
            kept += 1;
        }
    }
    kept
}

/// Tree cost with the same model (a shared subterm is paid per use).
struct TreeCost<'a> {
    g: &'a EGraph,
    model: &'a dyn CostModel,
}

impl CostFunction<Node> for TreeCost<'_> {
    type Cost = f64;

    fn cost<C>(&mut self, enode: &Node, mut costs: C) -> f64
    where
        C: FnMut(Id) -> f64,
    {
        let own = node_cost(self.g, self.model, enode, node_is_const(self.g, enode));
        enode.children().iter().fold(own, |acc, &c| acc + costs(c))
    }
}

/// egg's tree-cost choice, as a fallback and a second candidate.
pub fn tree_choice(g: &EGraph, model: &dyn CostModel) -> HashMap<Id, Node> {
    let ex = Extractor::new(g, TreeCost { g, model });
    g.classes()
        .map(|c| (c.id, ex.find_best_node(c.id).clone()))
        .collect()
}
