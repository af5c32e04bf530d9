//! Numerics bisection: when an optimized module disagrees with the reference, find the
//! pass — and, for a pass made of rewrite rules (`EqSat`), the rule family and the rule —
//! that moved the output. [`bisect`] runs growing prefixes of the pass list (by
//! position, so a pass that appears several times, like `FoldConstant` in
//! `kiln_rewrite::pipeline::standard_passes`, is switched on one occurrence at a time)
//! and names the first pass whose switching on takes the output beyond tolerance. When
//! that pass lists rules ([`kiln_rewrite::Pass::rules`]), it goes on over them through
//! `PassContext::disabled_rules`: first with every rule off (a mismatch then comes from the
//! pass itself, not a rule), then with the families switched on one more at a time (every
//! later family off), then, inside the first family that moves the output, with its rules
//! switched on one more at a time; it names the first family and rule that move it.
//!
//! It works on any `&[&dyn Pass]` and context, so the real pipeline drops in unchanged;
//! the evaluator is the caller's (the reference interpreter, or a backend:
//! [`bisect_on_backend`] runs a random-graph case's prefixes on a registered backend, as
//! `build` would: params bound first, each prefix's module built at opt level 0).
//! [`diagnose`] is what the random-graph suite appends to a failure at opt level > 0: it
//! checks the case at opt level 0 on the same backend and, when that passes, bisects the
//! standard pipeline at the failing level.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use kiln_ir::{Module, NDArray};
use kiln_rewrite::pass::{RuleInfo, check_names, run_passes};
use kiln_rewrite::pipeline::standard_passes;
use kiln_rewrite::{Pass, PassContext};

use crate::graphs::{Built, reference};
use crate::ops::Tol;
use crate::suite::{ExecBackend, compare, compare_scaled, max_abs};

/// What [`bisect`] found.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Bisection {
    /// The first pass that takes the output beyond tolerance; `None` when the fully
    /// optimized module agrees with the expected output, when the module disagrees
    /// without any pass (see `mismatch`), or when no prefix alone disagrees.
    pub guilty: Option<String>,
    /// The guilty pass's position in the list (0-based).
    pub position: Option<usize>,
    /// For a pass with rules: the first rule family that moves the output (`None` when
    /// the pass moves it with every rule off).
    pub family: Option<String>,
    /// The first rule of `family` that moves the output.
    pub rule: Option<String>,
    /// The mismatch of the narrowest step that moved the output.
    pub mismatch: Option<String>,
    /// Per enabled pass, in order: whether the output was still within tolerance after
    /// switching it on.
    pub trail: Vec<(String, bool)>,
    /// The rule steps, in order: `(no rules)`, then family names, then rule names, each
    /// with whether the output was still within tolerance.
    pub rule_trail: Vec<(String, bool)>,
}

impl fmt::Display for Bisection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some(pass) = &self.guilty else {
            return match &self.mismatch {
                Some(m) => write!(f, "no pass to blame: {m}"),
                None if self.trail.is_empty() => {
                    write!(f, "the optimized module agrees with the reference")
                }
                None => write!(f, "no single pass prefix moves the output"),
            };
        };
        write!(f, "pass `{pass}`")?;
        if let Some(k) = self.position {
            write!(f, " (#{k} of the list)")?;
        }
        match (&self.family, &self.rule) {
            (Some(family), Some(rule)) => write!(f, ", rule family `{family}`, rule `{rule}`")?,
            (Some(family), None) => write!(f, ", rule family `{family}`")?,
            (None, _) if !self.rule_trail.is_empty() => write!(f, " with every rule off")?,
            _ => {}
        }
        write!(f, " moves the output")?;
        if let Some(m) = &self.mismatch {
            write!(f, ": {m}")?;
        }
        Ok(())
    }
}

/// Evaluates a module (the caller's backend or the reference interpreter).
pub type Eval<'a> = &'a dyn Fn(&Module) -> Result<Vec<NDArray>, String>;
/// Accepts or rejects outputs (a mismatch message).
pub type Accept<'a> = &'a dyn Fn(&[NDArray]) -> Result<(), String>;

/// Runs `passes` under `ctx` on `module` with growing prefixes switched on; `eval` runs
/// a module and `want` is the expected output (the reference's on the unoptimized
/// module), compared with `tol` ([`compare`]). Errors only when `ctx` names a pass or
/// rule that is not in `passes`; a pass or `eval` failing on a prefix counts as moving
/// the output.
pub fn bisect(
    module: &Module,
    passes: &[&dyn Pass],
    ctx: &PassContext,
    eval: Eval,
    want: &[NDArray],
    tol: Tol,
) -> Result<Bisection, String> {
    bisect_with(module, passes, ctx, eval, &|got| compare(got, want, tol))
}

/// [`bisect`] with the caller's acceptance test.
pub fn bisect_with(
    module: &Module,
    passes: &[&dyn Pass],
    ctx: &PassContext,
    eval: Eval,
    accept: Accept,
) -> Result<Bisection, String> {
    check_names(passes, ctx).map_err(|e| e.to_string())?;
    // The first `len` passes under `c` (its names cut down to those passes).
    let check = |len: usize, c: &PassContext| -> Result<(), String> {
        let prefix = &passes[..len];
        let (m, _) =
            run_passes(module, prefix, &restrict(c, prefix)).map_err(|e| format!("passes: {e}"))?;
        accept(&eval(&m)?)
    };
    let mut found = Bisection::default();
    if check(passes.len(), ctx).is_ok() {
        return Ok(found);
    }
    if let Err(e) = check(0, ctx) {
        found.mismatch = Some(format!("the module disagrees without any pass: {e}"));
        return Ok(found);
    }
    let mut guilty = None;
    for (k, pass) in passes.iter().enumerate() {
        if !ctx.enabled(&pass.info()) {
            continue;
        }
        let result = check(k + 1, ctx);
        found
            .trail
            .push((pass.info().name.to_string(), result.is_ok()));
        if let Err(e) = result {
            found.guilty = Some(pass.info().name.to_string());
            found.position = Some(k);
            found.mismatch = Some(e);
            guilty = Some(k);
            break;
        }
    }
    // Every prefix agrees but the whole run does not (a required pass the caller
    // disabled, or a mismatch that needs passes in another order): name none.
    let Some(k) = guilty else {
        return Ok(found);
    };
    let rules: Vec<RuleInfo> = passes[k]
        .rules()
        .into_iter()
        .filter(|r| ctx.rule_enabled(&r.name, &r.family))
        .collect();
    if rules.is_empty() {
        return Ok(found);
    }
    let mut families: Vec<&str> = vec![];
    for r in &rules {
        if !families.contains(&r.family.as_str()) {
            families.push(&r.family);
        }
    }
    // The guilty prefix with the rules in `off` switched off as well.
    let check_off = |off: &mut dyn Iterator<Item = &str>| {
        let mut c = ctx.clone();
        c.disabled_rules.extend(off.map(str::to_string));
        check(k + 1, &c)
    };
    // One step: its name and result go on the trail; a mismatch becomes the finding's.
    let step = |found: &mut Bisection, name: &str, result: Result<(), String>| -> bool {
        found.rule_trail.push((name.to_string(), result.is_ok()));
        match result {
            Ok(()) => false,
            Err(e) => {
                found.mismatch = Some(e);
                true
            }
        }
    };
    let none = check_off(&mut families.iter().copied());
    if step(&mut found, "(no rules)", none) {
        return Ok(found);
    }
    for (i, family) in families.iter().enumerate() {
        let result = check_off(&mut families[i + 1..].iter().copied());
        if !step(&mut found, family, result) {
            continue;
        }
        found.family = Some(family.to_string());
        let mine: Vec<&str> = rules
            .iter()
            .filter(|r| r.family == *family)
            .map(|r| r.name.as_str())
            .collect();
        for (j, rule) in mine.iter().enumerate() {
            let result = check_off(&mut families[i + 1..].iter().chain(&mine[j + 1..]).copied());
            if step(&mut found, rule, result) {
                found.rule = Some(rule.to_string());
                break;
            }
        }
        break;
    }
    Ok(found)
}

/// `ctx` with its pass and rule names cut down to those of `passes` (a prefix of the
/// list it was checked against).
fn restrict(ctx: &PassContext, passes: &[&dyn Pass]) -> PassContext {
    let names: BTreeSet<&str> = passes.iter().map(|p| p.info().name).collect();
    let rules: Vec<RuleInfo> = passes.iter().flat_map(|p| p.rules()).collect();
    let mut c = ctx.clone();
    c.required.retain(|n| names.contains(n.as_str()));
    c.disabled.retain(|n| names.contains(n.as_str()));
    c.disabled_rules
        .retain(|n| rules.iter().any(|r| &r.name == n || &r.family == n));
    c
}

/// [`bisect`] for a random-graph case on `backend`, as `build` would run it: the case's
/// weights bound into the module as constants, each pass prefix run on it, the result
/// built at opt level 0 (no further transformation beyond what level 0 always does)
/// and compared with the reference interpreter's outputs on the unoptimized module, with
/// the case's tolerance as the suite applies it.
pub fn bisect_on_backend(
    built: &Built,
    passes: &[&dyn Pass],
    ctx: &PassContext,
    backend: &ExecBackend,
) -> Result<Bisection, String> {
    let want = reference(&built.module, &built.inputs)?;
    let bound = kiln_rewrite::passes::bind_params(&built.module, &built.bound)
        .map_err(|e| format!("binding params: {e}"))?;
    let inputs: BTreeMap<String, NDArray> = built
        .inputs
        .iter()
        .filter(|(n, _)| !built.bound.contains_key(*n))
        .map(|(n, v)| (n.clone(), v.clone()))
        .collect();
    let scale = built.inputs.values().map(max_abs).fold(0.0, f64::max);
    let eval = |m: &Module| backend.run(m, &inputs, &Default::default(), 0);
    let accept = |got: &[NDArray]| compare_scaled(got, &want, built.tol, scale);
    bisect_with(&bound, passes, ctx, &eval, &accept)
}

/// For a case that fails on `backend` at `opt_level`: whether it passes at opt level 0
/// there and, if so, which pass (and rule) of the standard pipeline moves the output —
/// a line for the failure message. `None` at opt level 0.
pub fn diagnose(built: &Built, backend: &ExecBackend, opt_level: u8) -> Option<String> {
    let passes = standard_passes();
    let list: Vec<&dyn Pass> = passes.iter().map(|p| p.as_ref()).collect();
    diagnose_with(built, backend, opt_level, &list)
}

/// [`diagnose`] bisecting `passes` instead of the standard pipeline.
pub fn diagnose_with(
    built: &Built,
    backend: &ExecBackend,
    opt_level: u8,
    passes: &[&dyn Pass],
) -> Option<String> {
    if opt_level == 0 {
        return None;
    }
    let at_zero = reference(&built.module, &built.inputs).and_then(|want| {
        let got = backend.run(&built.module, &built.inputs, &built.bound, 0)?;
        let scale = built.inputs.values().map(max_abs).fold(0.0, f64::max);
        compare_scaled(&got, &want, built.tol, scale)
    });
    if let Err(e) = at_zero {
        return Some(format!(
            "bisection: the case fails at opt level 0 on {} too (not the optimizer): {e}",
            backend.name
        ));
    }
    let ctx = PassContext::from(opt_level);
    Some(match bisect_on_backend(built, passes, &ctx, backend) {
        Ok(b) => format!(
            "bisection over the pipeline at opt level {opt_level} on {}: {b}",
            backend.name
        ),
        Err(e) => format!("bisection failed: {e}"),
    })
}
