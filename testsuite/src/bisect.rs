//! Numerics bisection: when an optimized module disagrees with the reference, find the
//! pass that moved the output. [`bisect`] runs the pass list with a growing prefix of it
//! enabled — every later pass switched off through `PassContext::disabled` — and names
//! the first pass whose switching on takes the output beyond tolerance. It works on any
//! `&[&dyn Pass]` and context (`kiln_rewrite::pass`), so the real pipeline drops in
//! unchanged; the evaluator is the caller's (the reference interpreter, or a backend:
//! [`bisect_on_backend`] runs a random-graph case's prefixes on a registered backend).

use std::collections::BTreeSet;

use kiln_ir::{Module, NDArray};
use kiln_rewrite::pass::run_passes;
use kiln_rewrite::{Pass, PassContext};

use crate::ops::Tol;
use crate::suite::compare;

/// What [`bisect`] found.
#[derive(Clone, Debug, PartialEq)]
pub struct Bisection {
    /// The first pass that takes the output beyond tolerance; `None` when the fully
    /// optimized module agrees with the expected output.
    pub guilty: Option<String>,
    /// The mismatch that pass caused.
    pub mismatch: Option<String>,
    /// Per enabled pass, in order: whether the output was still within tolerance after
    /// switching it on.
    pub trail: Vec<(String, bool)>,
}

/// Runs `passes` under `ctx` on `module` with growing prefixes switched on; `eval` runs
/// a module and `want` is the expected output (the reference's on the unoptimized
/// module). Errors only when a pass or `eval` fails.
pub fn bisect(
    module: &Module,
    passes: &[&dyn Pass],
    ctx: &PassContext,
    eval: &dyn Fn(&Module) -> Result<Vec<NDArray>, String>,
    want: &[NDArray],
    tol: Tol,
) -> Result<Bisection, String> {
    let check = |c: &PassContext| -> Result<Result<(), String>, String> {
        let (m, _) = run_passes(module, passes, c).map_err(|e| format!("passes: {e}"))?;
        Ok(compare(&eval(&m)?, want, tol))
    };
    let mut found = Bisection {
        guilty: None,
        mismatch: None,
        trail: vec![],
    };
    if check(ctx)?.is_ok() {
        return Ok(found);
    }
    let names: Vec<&str> = passes.iter().map(|p| p.info().name).collect();
    for (k, pass) in passes.iter().enumerate() {
        if !ctx.enabled(&pass.info()) {
            continue;
        }
        let mut c = ctx.clone();
        let later: BTreeSet<String> = names[k + 1..].iter().map(|n| n.to_string()).collect();
        c.disabled.extend(later);
        let result = check(&c)?;
        found.trail.push((names[k].to_string(), result.is_ok()));
        if let Err(e) = result {
            found.guilty = Some(names[k].to_string());
            found.mismatch = Some(e);
            return Ok(found);
        }
    }
    // Every prefix agrees but the whole run does not: the disagreement comes from the
    // context itself (e.g. a required pass the caller disabled); name none.
    Ok(found)
}

/// [`bisect`] for a random-graph case on `backend`: each pass prefix's module is built at
/// opt level 0 (so only the given passes transform it) and compared with the reference
/// interpreter's outputs on the unoptimized module, with the case's tolerance.
pub fn bisect_on_backend(
    built: &crate::graphs::Built,
    passes: &[&dyn Pass],
    ctx: &PassContext,
    backend: &crate::suite::ExecBackend,
) -> Result<Bisection, String> {
    let want = crate::graphs::reference(&built.module, &built.inputs)?;
    let eval = |m: &Module| backend.run(m, &built.inputs, &built.bound, 0);
    bisect(&built.module, passes, ctx, &eval, &want, built.tol)
}
