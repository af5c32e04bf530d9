//! Rule soundness against the reference interpreter. [`check_rule`] takes a rule and
//! left-hand-side cases (a module whose `@main` contains the rule's left-hand side, and
//! inputs for it), applies the rule once at every e-class, then checks that every node
//! of every class computes the same program: for each node it builds `@main` with that
//! node chosen in its class (and a fixed acyclic choice elsewhere) and compares the
//! interpreter's outputs with those of the original module within a tolerance. Any
//! equation the rule added that is false on the inputs shows up as a mismatch. A rule
//! that never fires on the cases is an error too, so a test cannot pass vacuously.
//! Users check their own rules the same way.

use egg::Id;
use kiln_ir::interp::{Inputs, evaluate};
use kiln_ir::text::print_module;
use kiln_ir::{Module, NDArray};

use super::convert::{to_egraph, to_module};
use super::cost::FlopsBytes;
use super::extract::tree_choice;
use super::lang::Node;
use super::rule::{Rule, apply_at};

/// What a successful check saw.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RuleCheck {
    /// Cases run.
    pub cases: usize,
    /// Cases where the rule added at least one equation.
    pub fired: usize,
    /// Programs (one per e-node choice) compared with the original.
    pub compared: usize,
}

/// Why a rule failed its check.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// Some program the rule made possible computes other values than the original.
    #[error("rule `{rule}` is unsound on case {case}: the term `{term}` gives {detail}\n{witness}")]
    Unsound {
        /// The rule's name.
        rule: String,
        /// The case's index among those given, from 0.
        case: usize,
        /// The term whose choice changes the output: the chosen node over its
        /// arguments, in the text form (`multiply(%x0, %x1)`).
        term: String,
        /// Which output differs, where, and by how much against the tolerance.
        detail: String,
        /// The inputs (`name: type = first values`) and the whole program with that
        /// term chosen.
        witness: String,
    },
    /// The rule added no equation on any case, so the check proved nothing.
    #[error("rule `{rule}` never fired on the {cases} case(s) given")]
    NeverFired {
        /// The rule's name.
        rule: String,
        /// How many cases were tried.
        cases: usize,
    },
    /// A case could not be run (it does not type-check, or the interpreter refused it).
    #[error("case {case}: {source}")]
    Case {
        /// The case's index among those given, from 0.
        case: usize,
        /// What went wrong.
        #[source]
        source: crate::Error,
    },
}

/// Checks `rule` on every `(module, inputs)` case with tolerance
/// `|actual - expected| <= atol + rtol * |expected|`.
pub fn check_rule(
    rule: &dyn Rule,
    cases: impl IntoIterator<Item = (Module, Inputs)>,
    atol: f64,
    rtol: f64,
) -> Result<RuleCheck, CheckError> {
    let mut report = RuleCheck::default();
    for (case, (m, inputs)) in cases.into_iter().enumerate() {
        let wrap = |source: crate::Error| CheckError::Case { case, source };
        report.cases += 1;
        let expected = evaluate(&m, &inputs).map_err(|e| wrap(e.into()))?.flatten();
        let main = m.main_id().map_err(|e| wrap(e.into()))?;
        let (mut g, root) = to_egraph(&m, main).map_err(wrap)?;
        let classes: Vec<Id> = g.classes().map(|c| c.id).collect();
        let mut fired = false;
        for c in classes {
            fired |= !apply_at(&mut g, rule, c).is_empty();
        }
        g.rebuild();
        if let Some(e) = g.analysis.errors.first() {
            return Err(wrap(crate::Error::Unsupported(e.clone())));
        }
        report.fired += usize::from(fired);
        let base = tree_choice(&g, &FlopsBytes::default());
        for class in g.classes() {
            for node in &class.nodes {
                let choice = |c: Id| -> Option<Node> {
                    if c == class.id {
                        Some(node.clone())
                    } else {
                        base.get(&c).cloned()
                    }
                };
                let mut out = m.clone();
                let Ok(body) = to_module(&g, root, &choice, &mut out) else {
                    continue; // this node closes a cycle under the base choice
                };
                let f = m.main().map_err(|e| wrap(e.into()))?;
                let params = f.params.clone();
                out.set_main(&params, body).map_err(|e| wrap(e.into()))?;
                let got = evaluate(&out, &inputs)
                    .map_err(|e| wrap(e.into()))?
                    .flatten();
                report.compared += 1;
                if let Some(detail) = differ(&got, &expected, atol, rtol) {
                    return Err(CheckError::Unsound {
                        rule: rule.name().to_string(),
                        case,
                        term: term_text(&g, class.id, &choice, &m, &params),
                        detail,
                        witness: format!(
                            "  inputs: {}\n  program:\n{}",
                            inputs_text(&inputs),
                            print_module(&out, &Default::default())
                        ),
                    });
                }
            }
        }
    }
    if report.fired == 0 {
        return Err(CheckError::NeverFired {
            rule: rule.name().to_string(),
            cases: report.cases,
        });
    }
    Ok(report)
}

/// The term class `class` stands for under `choice`, as the body of a function over
/// `params` printed in the text form (its last line is the term itself).
fn term_text(
    g: &super::analysis::EGraph,
    class: Id,
    choice: &dyn Fn(Id) -> Option<Node>,
    m: &Module,
    params: &[kiln_ir::ExprId],
) -> String {
    let mut t = m.clone();
    let text = to_module(g, class, choice, &mut t)
        .and_then(|body| Ok(t.set_main(params, body)?))
        .map(|()| print_module(&t, &Default::default()));
    match text {
        // The bindings and the term: the lines between `def @main(..) {` and `}` (the
        // header and the metadata section go).
        Ok(text) => text
            .lines()
            .map(str::trim)
            .skip_while(|l| !l.starts_with("def "))
            .skip(1)
            .take_while(|l| *l != "}")
            .collect::<Vec<_>>()
            .join(" "),
        Err(e) => format!("<unprintable: {e}>"),
    }
}

/// `name: type = first values` for each input.
fn inputs_text(inputs: &Inputs) -> String {
    inputs
        .iter()
        .map(|(name, v)| format!("%{name}: {} = {}", v.ty(), v.preview(6)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// How `got` differs from `expected`, if it does.
pub fn differ(got: &[NDArray], expected: &[NDArray], atol: f64, rtol: f64) -> Option<String> {
    if got.len() != expected.len() {
        return Some(format!(
            "{} output(s) instead of {}",
            got.len(),
            expected.len()
        ));
    }
    got.iter()
        .zip(expected)
        .enumerate()
        .find_map(|(i, (a, e))| {
            a.allclose(e, atol, rtol)
                .err()
                .map(|m| format!("output {i}: {m}"))
        })
}

/// Random inputs for `m`'s `@main` parameters (uniform in [-1, 1) from `seed`;
/// positive for parameters whose name ends in `var`, as variances are).
pub fn random_inputs(m: &Module, seed: u64) -> Result<Inputs, crate::Error> {
    let mut inputs = Inputs::new();
    for (k, (name, ty)) in m.main_tensor_params()?.into_iter().enumerate() {
        let s = seed.wrapping_mul(1_000_003).wrapping_add(k as u64);
        let (lo, hi) = if name.ends_with("var") {
            (0.5, 1.5)
        } else {
            (-1.0, 1.0)
        };
        inputs.insert(name, NDArray::random_uniform(ty.shape, ty.dtype, s, lo, hi));
    }
    Ok(inputs)
}
