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
//! exact DAG extraction is NP-hard — so [`improve`] then tries local moves measured on
//! the whole term: one class switching node, and several classes moving together onto
//! one new shared subterm (what merging parallel layers needs: no single class gets
//! cheaper by it, the pair does). The pass also builds the
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

/// The run-time cost of `node`: zero for constants (every argument constant), leaves,
/// tuples and tuple fields; the model's op cost for a call. `out` is its type (its
/// class's), or `None` to infer it.
pub fn node_cost(g: &EGraph, model: &dyn CostModel, node: &Node, out: Option<&Type>) -> f64 {
    match node {
        Node::Call(op, args) if !node_is_const(g, node) => {
            let tys: Vec<Type> = args.iter().map(|&a| g[a].data.ty.clone()).collect();
            match out {
                Some(out) => model.op_cost(op, &tys, out),
                None => {
                    let out = op.infer_type(&tys).unwrap_or(Type::Tuple(vec![]));
                    model.op_cost(op, &tys, &out)
                }
            }
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
            let own = node_cost(g, model, node, Some(&g[class].data.ty));
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
            total += node_cost(g, model, node, Some(&g[c].data.ty));
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

/// Improves `choice` by local moves the greedy pass cannot see, kept when the term's DAG
/// cost drops, until none helps (at most [`IMPROVE_ROUNDS`] rounds):
/// - single: one class of the term switches to another of its nodes whose children
///   the term already pays for (the greedy pass priced those children as if new);
/// - shared: several classes of the term each have a node using one class `s` outside
///   the term (the fields of a merged layer's split): choosing them together pays for
///   `s` once, where no one of them alone gets cheaper.
///
/// Returns the number of moves kept.
pub fn improve(
    g: &EGraph,
    model: &dyn CostModel,
    root: Id,
    choice: &mut HashMap<Id, Node>,
) -> usize {
    let Some((cost, term)) = term_cost(g, model, root, choice) else {
        return 0;
    };
    let mut st = Local {
        g,
        model,
        root,
        cost,
        term,
        kept: 0,
    };
    for _ in 0..IMPROVE_ROUNDS {
        let before = st.kept;
        let mut in_term: Vec<Id> = st.term.iter().copied().collect();
        in_term.sort();
        for c in in_term {
            if g[c].data.constant {
                continue; // every node of a constant class costs nothing
            }
            for n in &g[c].nodes {
                let paid = n.children().iter().all(|&k| st.term.contains(&g.find(k)));
                if paid && choice.get(&c) != Some(n) {
                    st.try_move(vec![(c, n.clone())], choice);
                }
            }
        }
        for s in g.classes().map(|c| c.id) {
            if st.term.contains(&s) {
                continue;
            }
            let mut users: Vec<(Id, Node)> = vec![];
            let mut seen: HashSet<Id> = HashSet::new();
            for p in g[s].parents() {
                let pc = g.find(p);
                if !st.term.contains(&pc) || !seen.insert(pc) {
                    continue;
                }
                let current = choice.get(&pc);
                if let Some(n) = g[pc]
                    .nodes
                    .iter()
                    .find(|n| Some(*n) != current && n.children().iter().any(|&k| g.find(k) == s))
                {
                    users.push((pc, n.clone()));
                }
            }
            if users.len() >= 2 {
                st.try_move(users, choice);
            }
        }
        if st.kept == before {
            break;
        }
    }
    st.kept
}

/// The state of [`improve`]: the current term's cost and classes.
struct Local<'a> {
    g: &'a EGraph,
    model: &'a dyn CostModel,
    root: Id,
    cost: f64,
    term: HashSet<Id>,
    kept: usize,
}

impl Local<'_> {
    /// Applies `moves` to `choice` if that lowers the term's cost.
    fn try_move(&mut self, moves: Vec<(Id, Node)>, choice: &mut HashMap<Id, Node>) {
        let old: Vec<(Id, Option<Node>)> = moves
            .into_iter()
            .map(|(c, n)| (c, choice.insert(c, n)))
            .collect();
        if let Some((t, term)) = term_cost(self.g, self.model, self.root, choice)
            && t < self.cost - 1e-9 * self.cost.abs()
        {
            self.cost = t;
            self.term = term;
            self.kept += 1;
            return;
        }
        for (c, n) in old {
            match n {
                Some(n) => choice.insert(c, n),
                None => choice.remove(&c),
            };
        }
    }
}

/// The most rounds of [`improve`].
pub const IMPROVE_ROUNDS: usize = 4;

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
        let own = node_cost(self.g, self.model, enode, None);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eqsat::convert::to_egraph;
    use crate::eqsat::rule::{Term, add_term};
    use kiln_ir::op::{Binary, BinaryKind, Unary, UnaryKind};
    use kiln_ir::{DType, ExprId, Module, Op};

    /// Unit costs by op name, so the expected totals are easy to read.
    struct Unit;
    impl CostModel for Unit {
        fn name(&self) -> &str {
            "unit"
        }
        fn op_cost(&self, op: &Op, _: &[Type], _: &Type) -> f64 {
            match op.name() {
                "exp" => 10.0,
                "tanh" | "sigmoid" => 7.0,
                _ => 1.0,
            }
        }
    }

    fn un(kind: UnaryKind) -> Unary {
        Unary { kind }
    }

    /// `@main(x) = root(x)`'s e-graph, with the classes of `tanh(x)` and `sigmoid(x)`
    /// (where present) also holding `relu(exp(x))` and `negative(exp(x))`. These are
    /// not true equations: extraction only compares costs, and these make the point.
    fn graph(root: impl Fn(&mut Module, ExprId, ExprId, ExprId) -> ExprId) -> (EGraph, Id) {
        let mut m = Module::new();
        let x = m.var("x", Type::tensor([4], DType::F32));
        let t = m.call(un(UnaryKind::Tanh), &[x]).unwrap();
        let s = m.call(un(UnaryKind::Sigmoid), &[x]).unwrap();
        let body = root(&mut m, x, t, s);
        m.set_main(&[x], body).unwrap();
        let (mut g, root) = to_egraph(&m, m.main_id().unwrap()).unwrap();
        let xc = g.lookup(Node::Var(0)).unwrap();
        let e = Term::call(un(UnaryKind::Exp), vec![xc.into()]);
        for (kind, alt) in [
            (UnaryKind::Tanh, UnaryKind::Relu),
            (UnaryKind::Sigmoid, UnaryKind::Negative),
        ] {
            if let Some(c) = g.lookup(Node::Call(un(kind).into(), vec![xc])) {
                let ty = g[c].data.ty.clone();
                let id = add_term(&mut g, &Term::call(un(alt), vec![e.clone()]), &ty).unwrap();
                g.union(c, id);
            }
        }
        g.rebuild();
        (g, root)
    }

    fn cost(g: &EGraph, root: Id, choice: &HashMap<Id, Node>) -> f64 {
        term_cost(g, &Unit, root, choice).unwrap().0
    }

    #[test]
    fn a_subterm_shared_by_two_classes_is_paid_once() {
        // (tanh x, sigmoid x) = 14 apart; relu(exp x), negative(exp x) share exp: 12.
        let (g, root) = graph(|m, _, t, s| m.tuple(&[t, s]).unwrap());
        let tree = tree_choice(&g, &Unit);
        assert_eq!(cost(&g, root, &tree), 14.0);
        let mut dag = dag_choice(&g, &Unit);
        assert_eq!(cost(&g, root, &dag), 14.0);
        assert!(improve(&g, &Unit, root, &mut dag) >= 1);
        assert_eq!(cost(&g, root, &dag), 12.0);
    }

    #[test]
    fn a_subterm_the_term_already_pays_for_is_free() {
        // add(tanh x, exp x): tree-cost keeps tanh (7 < 11) for 18; relu(exp x) reuses
        // the exp the add needs anyway: 12.
        let (g, root) = graph(|m, x, t, _| {
            let e = m.call(un(UnaryKind::Exp), &[x]).unwrap();
            m.call(Binary::new(BinaryKind::Add), &[t, e]).unwrap()
        });
        let tree = tree_choice(&g, &Unit);
        assert_eq!(cost(&g, root, &tree), 18.0);
        let mut dag = dag_choice(&g, &Unit);
        improve(&g, &Unit, root, &mut dag);
        assert_eq!(cost(&g, root, &dag), 12.0);
    }

    #[test]
    fn a_cyclic_choice_has_no_cost() {
        let (g, root) = graph(|_, _, t, _| t);
        let mut choice = dag_choice(&g, &Unit);
        // relu(exp x)'s class: point exp's class at the root class's relu node.
        let exp = g
            .classes()
            .find(|c| c.nodes.iter().any(|n| n.to_string() == "exp"))
            .unwrap()
            .id;
        let relu = g[g.find(root)]
            .nodes
            .iter()
            .find(|n| n.to_string() == "nn.relu")
            .unwrap()
            .clone();
        choice.insert(g.find(root), relu);
        let fake = Node::Call(un(UnaryKind::Relu).into(), vec![g.find(root)]);
        choice.insert(exp, fake);
        assert!(term_cost(&g, &Unit, root, &choice).is_none());
    }
}
