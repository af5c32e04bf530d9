//! Equality saturation with egg: the [`EqSat`] pass. A function body becomes an e-graph
//! ([`convert`]); the rules ([`rules`], one file per family, laws in `RULES.md`) grow it
//! under node, iteration and time limits ([`EqSatConfig`]), with every rewrite
//! type-checked ([`rule`], [`analysis`]); a sharing-aware extraction ([`extract`]) picks
//! the cheapest program under the cost model ([`cost`]), which is kept only if it costs
//! less than the input. [`check`] tests a rule's soundness against the reference
//! interpreter. The pass drops the rules its context switches off
//! (`PassContext::disabled_rules`, by rule or family name) before it saturates.

pub mod analysis;
pub mod check;
pub mod convert;
pub mod cost;
pub mod extract;
pub mod lang;
pub mod pattern;
pub mod rule;
pub mod rules;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use egg::{Id, Runner, StopReason};
use kiln_ir::{ExprId, ExprKind, Module};

pub use check::{CheckError, RuleCheck, check_rule};
pub use cost::{CostModel, FlopsBytes, function_cost};
pub use rule::{FnRule, Imperative, Roots, Rule, Term};

use crate::error::{Error, Result};
use crate::pass::{Pass, PassContext, PassInfo, PassOutcome, RuleInfo};
use analysis::{EGraph, TypeAnalysis};
use lang::Node;

/// Saturation limits: the run stops at whichever is reached first.
#[derive(Clone, Debug)]
pub struct EqSatConfig {
    /// E-nodes in the e-graph.
    pub node_limit: usize,
    /// Rounds of matching and applying every rule.
    pub iter_limit: usize,
    /// Wall-clock time of the saturation (checked between iterations).
    pub time_limit: Duration,
}

impl Default for EqSatConfig {
    /// Limits that keep ResNet-50 well under a second (see the stats in
    /// `BENCHMARKS.md`).
    fn default() -> EqSatConfig {
        EqSatConfig {
            node_limit: 20_000,
            iter_limit: 8,
            time_limit: Duration::from_millis(500),
        }
    }
}

impl EqSatConfig {
    fn validate(&self) -> Result<()> {
        if self.node_limit == 0 || self.iter_limit == 0 || self.time_limit.is_zero() {
            return Err(Error::InvalidArgument(format!(
                "EqSat limits must be positive (nodes {}, iterations {}, time {:?})",
                self.node_limit, self.iter_limit, self.time_limit
            )));
        }
        Ok(())
    }
}

/// What one saturation did.
#[derive(Clone, Debug, PartialEq)]
pub struct SaturationStats {
    /// `saturated`, `iteration limit`, `node limit`, `time limit`.
    pub stop: String,
    /// Rounds of rule application run.
    pub iterations: usize,
    /// E-nodes in the e-graph at the end.
    pub nodes: usize,
    /// E-classes in the e-graph at the end.
    pub classes: usize,
    /// Wall time of saturation, in milliseconds.
    pub saturate_ms: f64,
    /// Wall time of extraction, in milliseconds.
    pub extract_ms: f64,
    /// The function's cost under the pass's [`CostModel`] before saturation.
    pub cost_before: f64,
    /// Its cost after: the extracted program's when it replaced the input (strictly
    /// lower), else `cost_before`.
    pub cost_after: f64,
    /// Rewrites refused as ill-typed.
    pub rejected: usize,
    /// Whether the extracted program replaced the input (it was cheaper).
    pub changed: bool,
    /// Per rule that added equations: how many (egg's count of unions it made).
    pub applied: BTreeMap<String, usize>,
}

/// The equality-saturation pass (opt level 3; runs before fusion, on every global
/// function made of op calls — fused groups are left alone).
pub struct EqSat {
    /// The bounds on each run (nodes, iterations, time).
    pub config: EqSatConfig,
    /// The rules applied, built-in and user ones.
    pub rules: Vec<Arc<dyn Rule>>,
    /// What extraction minimizes and what decides whether the result replaces the input.
    pub cost: Arc<dyn CostModel>,
}

impl Default for EqSat {
    fn default() -> EqSat {
        EqSat {
            config: EqSatConfig::default(),
            rules: rules::all(),
            cost: Arc::new(FlopsBytes::default()),
        }
    }
}

impl EqSat {
    /// The pass with the built-in rules and the default cost model.
    pub fn new() -> EqSat {
        EqSat::default()
    }

    /// Saturates and extracts function `func` of `m`; the module with the function
    /// replaced (or `m` unchanged when extraction found nothing cheaper) and the stats.
    pub fn optimize_function(&self, m: &Module, func: ExprId) -> Result<(Module, SaturationStats)> {
        self.config.validate()?;
        let f = m.function_at(func)?.clone();
        let cost_before = function_cost(self.cost.as_ref(), m, func)?;
        let (g, root) = convert::to_egraph(m, func)?;
        let rewrites: Vec<_> = self.rules.iter().cloned().map(rule::to_rewrite).collect();
        let t = Instant::now();
        let runner = Runner::<Node, TypeAnalysis>::new(TypeAnalysis::default())
            .with_egraph(g)
            .with_node_limit(self.config.node_limit)
            .with_iter_limit(self.config.iter_limit)
            .with_time_limit(self.config.time_limit)
            .run(&rewrites);
        let saturate_ms = t.elapsed().as_secs_f64() * 1e3;
        let mut applied = BTreeMap::<String, usize>::new();
        for (rule, n) in runner.iterations.iter().flat_map(|i| &i.applied) {
            *applied.entry(rule.to_string()).or_default() += n;
        }
        // A run stopped by a limit may end between applying and rebuilding.
        let mut g = runner.egraph;
        g.rebuild();
        if let Some(e) = g.analysis.errors.first() {
            return Err(Error::Unsupported(format!(
                "equality saturation broke its type invariant: {e}"
            )));
        }
        let stop = match runner.stop_reason {
            Some(StopReason::Saturated) => "saturated".to_string(),
            Some(StopReason::IterationLimit(_)) => "iteration limit".to_string(),
            Some(StopReason::NodeLimit(_)) => "node limit".to_string(),
            Some(StopReason::TimeLimit(_)) => "time limit".to_string(),
            Some(StopReason::Other(s)) => s,
            None => "unknown".to_string(),
        };
        let t = Instant::now();
        // The greedy-DAG choice; egg's tree-cost choice only when that fails or is not
        // cheaper than the input (it fills classes the DAG pass left without a term).
        let mut dag = extract::dag_choice(&g, self.cost.as_ref());
        extract::improve(&g, self.cost.as_ref(), root, &mut dag);
        let mut best = self.rebuild(m, func, &f, &g, root, &dag).ok();
        if best.as_ref().is_none_or(|(_, c)| *c >= cost_before) {
            let tree = extract::tree_choice(&g, self.cost.as_ref());
            for (c, n) in &tree {
                dag.entry(*c).or_insert_with(|| n.clone());
            }
            for choice in [&dag, &tree] {
                if let Ok((out, cost)) = self.rebuild(m, func, &f, &g, root, choice)
                    && best.as_ref().is_none_or(|(_, c)| cost < *c)
                {
                    best = Some((out, cost));
                }
            }
        }
        let extract_ms = t.elapsed().as_secs_f64() * 1e3;
        let mut stats = SaturationStats {
            stop,
            iterations: runner.iterations.len(),
            nodes: g.total_number_of_nodes(),
            classes: g.number_of_classes(),
            saturate_ms,
            extract_ms,
            cost_before,
            cost_after: cost_before,
            rejected: g.analysis.rejected,
            changed: false,
            applied,
        };
        match best {
            Some((out, cost)) if cost < cost_before => {
                stats.cost_after = cost;
                stats.changed = true;
                Ok((out, stats))
            }
            _ => Ok((m.clone(), stats)),
        }
    }

    /// `m` with function `func` (`f`) rebuilt from `choice`, and its cost.
    fn rebuild(
        &self,
        m: &Module,
        func: ExprId,
        f: &kiln_ir::Function,
        g: &EGraph,
        root: Id,
        choice: &HashMap<Id, Node>,
    ) -> Result<(Module, f64)> {
        let mut out = m.clone();
        let body = convert::to_module(g, root, &|c| choice.get(&c).cloned(), &mut out)?;
        let new = out.function(&f.params, body, f.attrs.clone())?;
        let names: Vec<String> = m
            .globals()
            .iter()
            .filter(|(_, id)| *id == func)
            .map(|(n, _)| n.clone())
            .collect();
        for name in names {
            out.define(&name, new)?;
        }
        let cost = function_cost(self.cost.as_ref(), &out, new)?;
        Ok((out, cost))
    }
}

impl Pass for EqSat {
    fn info(&self) -> PassInfo {
        PassInfo {
            name: "EqSat",
            opt_level: 3,
        }
    }

    fn rules(&self) -> Vec<RuleInfo> {
        self.rules
            .iter()
            .map(|r| RuleInfo {
                name: r.name().to_string(),
                family: r.family().to_string(),
            })
            .collect()
    }

    /// Saturates with the pass's rules and the context's user rules
    /// (`ctx.extensions.rules`), less those `ctx.disabled_rules` switches off.
    fn run(&self, module: &Module, ctx: &PassContext) -> Result<PassOutcome> {
        let all: Vec<&Arc<dyn Rule>> = self.rules.iter().chain(&ctx.extensions.rules).collect();
        let on = EqSat {
            config: self.config.clone(),
            rules: all
                .iter()
                .filter(|r| ctx.rule_enabled(r.name(), r.family()))
                .map(|r| Arc::clone(r))
                .collect(),
            cost: self.cost.clone(),
        };
        let off = all.len() - on.rules.len();
        let mut out = on.run_rules(module)?;
        if !ctx.extensions.rules.is_empty() {
            out = out.detail("user_rules", ctx.extensions.rules.len());
        }
        if off > 0 {
            out = out.detail("rules_disabled", off);
        }
        Ok(out)
    }
}

impl EqSat {
    /// The pass on every global function, with exactly `self.rules`.
    fn run_rules(&self, module: &Module) -> Result<PassOutcome> {
        let mut m = module.clone();
        let mut details: Vec<(String, String)> = vec![];
        let names: Vec<(String, ExprId)> = module.globals().to_vec();
        for (name, _) in names {
            let func = m
                .global_id(&name)
                .ok_or_else(|| Error::InvalidArgument(format!("no global @{name}")))?;
            let prefix = if name == "main" {
                String::new()
            } else {
                format!("@{name}.")
            };
            if !matches!(m.kind(func), ExprKind::Function(_)) {
                continue;
            }
            if let Some(why) = convert::unsupported(&m, func) {
                details.push((format!("{prefix}skipped"), why));
                continue;
            }
            let (out, s) = self.optimize_function(&m, func)?;
            m = out;
            let mut d = |k: &str, v: String| details.push((format!("{prefix}{k}"), v));
            d("stop", s.stop.clone());
            d("iterations", s.iterations.to_string());
            d("enodes", s.nodes.to_string());
            d("eclasses", s.classes.to_string());
            d("saturate_ms", format!("{:.2}", s.saturate_ms));
            d("extract_ms", format!("{:.2}", s.extract_ms));
            d("cost_before", format!("{:.4e}", s.cost_before));
            d("cost_after", format!("{:.4e}", s.cost_after));
            d("rejected", s.rejected.to_string());
            if !s.applied.is_empty() {
                let applied: Vec<String> =
                    s.applied.iter().map(|(r, n)| format!("{r}:{n}")).collect();
                d("applied", applied.join(","));
            }
        }
        let mut out = PassOutcome::new(m);
        out.details = details;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_ir::op::{Binary, BinaryKind, Unary, UnaryKind};
    use kiln_ir::{DType, FnAttrs, Type};

    fn relu_twice() -> Module {
        let mut m = Module::new();
        let x = m.var("x", Type::tensor([3], DType::F32));
        let r = m
            .call(
                Unary {
                    kind: UnaryKind::Relu,
                },
                &[x],
            )
            .unwrap();
        let rr = m
            .call(
                Unary {
                    kind: UnaryKind::Relu,
                },
                &[r],
            )
            .unwrap();
        m.set_main(&[x], rr).unwrap();
        m
    }

    fn detail<'a>(out: &'a PassOutcome, key: &str) -> Option<&'a str> {
        out.details
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    #[test]
    fn the_pass_reports_its_run() {
        let m = relu_twice();
        let pass = EqSat::new();
        assert_eq!(
            pass.info(),
            PassInfo {
                name: "EqSat",
                opt_level: 3
            }
        );
        let out = pass.run(&m, &PassContext::default()).unwrap();
        assert_eq!(detail(&out, "stop"), Some("saturated"));
        let before: f64 = detail(&out, "cost_before").unwrap().parse().unwrap();
        let after: f64 = detail(&out, "cost_after").unwrap().parse().unwrap();
        assert!(after < before);
        assert!(detail(&out, "enodes").is_some() && detail(&out, "iterations").is_some());
        let printed = kiln_ir::text::print_module(&out.module, &Default::default());
        assert_eq!(printed.matches("nn.relu").count(), 1, "{printed}");
    }

    #[test]
    fn without_rules_the_input_is_kept() {
        let m = relu_twice();
        let pass = EqSat {
            rules: vec![],
            ..EqSat::new()
        };
        let (out, stats) = pass.optimize_function(&m, m.main_id().unwrap()).unwrap();
        assert!(!stats.changed);
        assert_eq!(stats.cost_after, stats.cost_before);
        assert_eq!(out.main_id().unwrap(), m.main_id().unwrap());
    }

    #[test]
    fn each_limit_stops_the_run_and_is_reported() {
        let m = relu_twice();
        let main = m.main_id().unwrap();
        let limited = |f: &dyn Fn(&mut EqSatConfig)| {
            let mut pass = EqSat::new();
            f(&mut pass.config);
            pass.optimize_function(&m, main).unwrap().1
        };
        let s = limited(&|c| c.node_limit = 1);
        assert_eq!(s.stop, "node limit");
        let s = limited(&|c| c.iter_limit = 1);
        assert_eq!((s.stop.as_str(), s.iterations), ("iteration limit", 1));
        let s = limited(&|c| c.time_limit = Duration::from_nanos(1));
        assert_eq!(s.stop, "time limit");
        // Stopped early or not, the result never costs more than the input.
        assert!(s.cost_after <= s.cost_before);
    }

    #[test]
    fn zero_limits_are_refused() {
        let m = relu_twice();
        let mut pass = EqSat::new();
        pass.config.node_limit = 0;
        let err = pass
            .optimize_function(&m, m.main_id().unwrap())
            .unwrap_err();
        assert!(err.to_string().contains("limits must be positive"), "{err}");
    }

    #[test]
    fn fused_functions_are_skipped_with_a_reason() {
        let mut m = Module::new();
        let p = m.var("p", Type::tensor([3], DType::F32));
        let body = m.call(Binary::new(BinaryKind::Add), &[p, p]).unwrap();
        let f = m.function(&[p], body, FnAttrs { primitive: true }).unwrap();
        let x = m.var("x", Type::tensor([3], DType::F32));
        let call = m.call_function(f, &[x]).unwrap();
        m.set_main(&[x], call).unwrap();
        let out = EqSat::new().run(&m, &PassContext::default()).unwrap();
        assert!(detail(&out, "skipped").unwrap().contains("calls functions"));
        assert_eq!(out.module.main_id().unwrap(), m.main_id().unwrap());
    }
}
