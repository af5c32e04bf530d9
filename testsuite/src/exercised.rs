//! What the optimizer did over a suite run, so that a run at opt levels 1–3 shows it
//! really exercised the passes: [`OptCounts`] reads each build's pass report and counts
//! the cases in which a pass changed the graph (FuseOps made a group of more than one op,
//! FoldConstant folded a call, equality saturation extracted a cheaper program, ...)
//! and, per rewrite rule, the cases in which it added equations.

use std::collections::BTreeMap;
use std::fmt;

use kiln_rewrite::PassReport;

/// What counts as a pass changing the graph: the label printed, the pass, the report
/// details summed over the pass's runs, and the sum above which it counts.
const CHANGES: &[(&str, &str, &[&str], f64)] = &[
    ("fused", "FuseOps", &["largest"], 1.0),
    (
        "simplified",
        "SimplifyInference",
        &["batch_norm", "layer_norm"],
        0.0,
    ),
    ("cse", "EliminateCommonSubexpr", &["merged"], 0.0),
    ("folded", "FoldConstant", &["folded"], 0.0),
    ("scale-folded", "FoldScaleAxis", &["folded"], 0.0),
    ("dce", "DeadCodeElimination", &["removed_nodes"], 0.0),
];

/// Counts over the builds of a suite run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OptCounts {
    /// Reports recorded (builds that passed).
    pub builds: usize,
    /// Per label of [`CHANGES`] and `eqsat` (a cheaper program extracted): the builds
    /// in which it happened.
    pub changed: BTreeMap<&'static str, usize>,
    /// Per rewrite rule: the builds in which it added at least one equation.
    pub rules: BTreeMap<String, usize>,
}

impl OptCounts {
    /// Counts one build's report.
    pub fn record(&mut self, report: &PassReport) {
        self.builds += 1;
        let ran = || report.records.iter().filter(|r| r.ran);
        for &(label, pass, keys, above) in CHANGES {
            let sum: f64 = ran()
                .filter(|r| r.name == pass)
                .flat_map(|r| &r.details)
                .filter(|(k, _)| keys.contains(&k.as_str()))
                .filter_map(|(_, v)| v.parse::<f64>().ok())
                .sum();
            if sum > above {
                *self.changed.entry(label).or_default() += 1;
            }
        }
        for r in ran().filter(|r| r.name == "EqSat") {
            let detail = |key: &str| {
                r.details
                    .iter()
                    .find(|(k, _)| k == key)
                    .and_then(|(_, v)| v.parse::<f64>().ok())
            };
            if let (Some(before), Some(after)) = (detail("cost_before"), detail("cost_after"))
                && after < before
            {
                *self.changed.entry("eqsat").or_default() += 1;
            }
            let applied = r.details.iter().filter(|(k, _)| k == "applied");
            for rule in applied.flat_map(|(_, v)| v.split(',')) {
                if let Some((name, _)) = rule.split_once(':') {
                    *self.rules.entry(name.to_string()).or_default() += 1;
                }
            }
        }
    }

    /// Builds in which `label` happened.
    pub fn get(&self, label: &str) -> usize {
        self.changed.get(label).copied().unwrap_or(0)
    }
}

impl fmt::Display for OptCounts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "of {} builds, passes changed:", self.builds)?;
        for (label, n) in &self.changed {
            write!(f, " {label} {n},")?;
        }
        write!(f, " rules fired in:")?;
        if self.rules.is_empty() {
            write!(f, " none")?;
        }
        for (rule, n) in &self.rules {
            write!(f, " {rule} {n}")?;
        }
        Ok(())
    }
}
