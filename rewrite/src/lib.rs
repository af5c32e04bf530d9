//! Graph optimization for Kiln: the pass manager ([`pass`]: `PassContext` with opt levels
//! 0–3, required and disabled passes, Relay's gating rule), the standard pipeline
//! ([`pipeline`]: [`optimize`]), the classical passes, equality saturation with egg, and
//! operator fusion into primitive functions ([`fuse`]: [`FuseOps`]). Every pass maps a
//! well-typed [`kiln_ir::Module`] to a well-typed module with the same values (within the
//! op's floating-point tolerance). Depends on `kiln-ir` only.
//!
//! For research passes and rules: [`PassContext::insert_pass`] runs a [`Pass`] of your
//! own at a named point of the standard pipeline and [`PassContext::add_rule`] adds a
//! [`Rule`] to equality saturation; both run once inside [`optimize`] (and so inside
//! `build`) and show in its [`PassReport`]. The helpers a rule or pass needs are
//! re-exported here: egg's [`Id`], the [`EGraph`], the matchers ([`calls_named`],
//! [`tensor`], [`is_float`], ...), [`check_rule`] with [`random_inputs`], and
//! [`rewrite_module`], the bottom-up module rewriter the built-in passes use. The page
//! [`writing_a_rule`] walks through it.
//!
//! At opt level 3 the identities below go (equality saturation) and what is left is one
//! fused group, the kernel-to-be:
//!
//! ```
//! use kiln_ir::text::{parse_module, print_module};
//! use kiln_rewrite::{PassContext, optimize};
//!
//! let m = parse_module("def @main(%x: Tensor[(4), float32]) { nn.relu(add(multiply(%x, 1f), 0f)) }")
//!     .unwrap();
//! let (out, report) = optimize(&m, &PassContext::from(3)).unwrap();
//! let text = print_module(&out, &Default::default());
//! assert!(!text.contains("multiply") && !text.contains("add("), "{text}");
//! assert_eq!(text.matches("Primitive=1").count(), 1, "{text}");
//! assert!(report.get("EqSat").unwrap().ran && report.get("FuseOps").unwrap().ran);
//! ```
#![warn(missing_docs)]

pub mod eqsat;
pub mod error;
pub mod fuse;
pub mod pass;
pub mod passes;
pub mod pipeline;
pub mod writing_a_rule;

pub use egg::Id;
pub use eqsat::analysis::EGraph;
pub use eqsat::check::random_inputs;
pub use eqsat::rule::{calls, calls_named, is_const, is_float, is_splat, tensor};
pub use eqsat::{FnRule, Rule, Term, check_rule};
pub use error::{Error, Result};
pub use fuse::FuseOps;
pub use pass::{
    Extensions, FnPass, Pass, PassContext, PassInfo, PassOutcome, PassRecord, PassReport, Position,
    RuleInfo,
};
pub use passes::rewrite_module;
pub use pipeline::{optimize, standard_passes};
