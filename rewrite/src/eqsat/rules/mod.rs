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

/// The built-in rule called `name`.
pub fn by_name(name: &str) -> Option<Arc<dyn Rule>> {
    all().into_iter().find(|r| r.name() == name)
}
