//! The rule families, one file each; `RULES.md` states every law and its conditions.
//! - [`algebraic`]: identities of elementwise arithmetic.
//! - [`layout`]: transpose and reshape cancellation.
//! - [`fold`]: batch norm to scale and shift, and scales and shifts folded into
//!   convolution and dense weights and into each other.
//! - [`merge`]: parallel convolutions or dense layers sharing an input merged into one
//!   (TASO's concat + split).

pub mod algebraic;
pub mod fold;
pub mod layout;
pub mod merge;

use std::sync::Arc;

use super::rule::Rule;

/// Every built-in rule, family by family.
pub fn all() -> Vec<Arc<dyn Rule>> {
    [
        algebraic::rules(),
        layout::rules(),
        fold::rules(),
        merge::rules(),
    ]
    .concat()
}

/// The markdown table of the rules of `family` among `rules`: one row per rule with its
/// law and conditions as the rule states them ([`Rule::law`], [`Rule::conditions`]).
/// `RULES.md` holds one per family, regenerated and compared by a test.
pub fn table(rules: &[Arc<dyn Rule>], family: &str) -> String {
    let mut out = String::from("| rule | law | conditions |\n| --- | --- | --- |\n");
    for r in rules.iter().filter(|r| r.family() == family) {
        let form = if r.pattern().is_some() {
            "pattern"
        } else {
            "imperative"
        };
        let cell = |s: String| s.replace('|', "\\|");
        out.push_str(&format!(
            "| `{}` ({form}) | {} | {} |\n",
            r.name(),
            cell(r.law()),
            cell(r.conditions())
        ));
    }
    out
}

/// The built-in rule called `name`.
pub fn by_name(name: &str) -> Option<Arc<dyn Rule>> {
    all().into_iter().find(|r| r.name() == name)
}
