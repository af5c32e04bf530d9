//! # Writing a rule
//!
//! A rewrite rule states that two terms are equal; equality saturation (`EqSat`, opt
//! level 3) adds the right-hand side next to every match of the left-hand side, and the
//! extraction keeps whichever is cheaper under the cost model. So a rule need not be
//! profitable — it must be *sound*, and it should be *specific* (STYLE habit 4: no
//! blanket commutativity or associativity, which grow the e-graph without finding
//! anything).
//!
//! 1. **Write it as a pattern** when both sides are ops applied to sub-terms:
//!    [`PatternRule`] with left-hand sides (list both operand orders of a commutative op
//!    instead of adding a commutativity rule), a right-hand side over the same variables,
//!    and typed [`Cond`]itions on the variables (`Cond::Const`, `Cond::Splat`,
//!    `Cond::Float`, ...). Every proposed term is type-checked before it is added, and
//!    must have the type of the class it joins, so a rule never needs a shape condition
//!    just to stay well typed. The runner only visits e-classes holding the left-hand
//!    side's root op.
//! 2. **Write it as a function** ([`FnRule`]) when a pattern cannot say it: when the
//!    right-hand side's attributes are computed from the match (a composed permutation,
//!    a channel layout), or it matches a varying number of nodes. The matching helpers
//!    ([`calls_named`], [`tensor`], [`is_const`], [`is_float`], [`is_splat`]) read the
//!    e-graph.
//! 3. **Check it** with [`check_rule`] on modules holding its left-hand side: it applies
//!    the rule and evaluates every program the e-graph then holds in the reference
//!    interpreter. An unsound rule's error names the term it produced and the inputs; a
//!    rule that never fires on the cases is an error too.
//! 4. **Use it**: [`PassContext::add_rule`] (or `add_rules` for a family) puts it in the
//!    standard pipeline that [`crate::optimize`] and `build` run, once; the `EqSat` line
//!    of the pass report counts its rewrites under `applied`, and `disabled_rules` turns
//!    it off by name or family like a built-in.
//!
//! ```
//! use kiln_ir::op::BinaryKind::{Add, Multiply};
//! use kiln_ir::text::{parse_module, print_module};
//! use kiln_rewrite::eqsat::pattern::{Cond, Pat, PatternRule};
//! use kiln_rewrite::{PassContext, check_rule, optimize, random_inputs};
//!
//! // x * s + y * s = (x + y) * s: one multiply fewer.
//! let (x, y, s) = (Pat::var("x"), Pat::var("y"), Pat::var("s"));
//! let mul = |a, b| Pat::bin(Multiply, a, b);
//! let rule = PatternRule::new(
//!     "factor_scale",
//!     "mine",
//!     vec![Pat::bin(Add, mul(x.clone(), s.clone()), mul(y.clone(), s.clone()))],
//!     mul(Pat::bin(Add, x, y), s),
//!     vec![Cond::Float("x")],
//! );
//!
//! let m = parse_module(
//!     "def @main(%a: Tensor[(4), float32], %b: Tensor[(4), float32], %c: Tensor[(4), float32]) {
//!        add(multiply(%a, %c), multiply(%b, %c))
//!      }",
//! )
//! .unwrap();
//! let case = (m.clone(), random_inputs(&m, 7).unwrap());
//! check_rule(&rule, [case], 1e-6, 1e-6).unwrap();
//!
//! let mut ctx = PassContext::from(3);
//! ctx.add_rule(rule);
//! let (out, report) = optimize(&m, &ctx).unwrap();
//! let text = print_module(&out, &Default::default());
//! assert_eq!(text.matches("multiply(").count(), 1, "{text}");
//! assert!(report.get("EqSat").unwrap().details.iter().any(|(_, v)| v.contains("factor_scale:1")));
//! ```
//!
//! `rewrite/examples/custom_rule.rs` and `custom_pass.rs` are the same in runnable form;
//! `rewrite/RULES.md` lists the built-in rules (its tables are generated from their
//! definitions).

#[cfg(doc)]
use crate::eqsat::pattern::{Cond, PatternRule};
#[cfg(doc)]
use crate::{FnRule, PassContext, calls_named, check_rule, is_const, is_float, is_splat, tensor};
