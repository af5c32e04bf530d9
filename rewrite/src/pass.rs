//! The pass manager: [`Pass`] (a named module-to-module transformation with the opt level
//! it is registered at), [`PassContext`] (opt level, required and disabled passes, verify
//! and dump switches, and the user's extensions: passes inserted at named points of the
//! pipeline and extra EqSat rules) and [`run_passes`], which runs a sequence under a
//! context and records a [`PassReport`] (per pass: ran or skipped, time, node counts,
//! details).
//!
//! Gating follows Relay (apache/tvm `src/ir/transform.cc`, `PassContext`): a pass runs when it is required or when
//! `ctx.opt_level >= pass.opt_level`, and never when it is disabled.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use kiln_ir::Module;

use crate::eqsat::Rule;
use crate::error::{Error, Result};

/// The highest opt level kiln knows (Relay's level 4 passes are kiln's level 3 extras).
pub const MAX_OPT_LEVEL: u8 = 3;

/// A pass's registration: its name (as used in `required`/`disabled` and in reports) and
/// the lowest opt level it runs at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PassInfo {
    /// Unique name (`FoldConstant`).
    pub name: &'static str,
    /// The lowest opt level (0..=3) at which it runs unless required or disabled.
    pub opt_level: u8,
}

/// What a pass produced: the new module and free-form details for the report
/// (`key`, `value` pairs such as `("stop", "saturated")`).
pub struct PassOutcome {
    /// The module after the pass, well typed.
    pub module: Module,
    /// `(key, value)` lines for the report, in order.
    pub details: Vec<(String, String)>,
}

impl PassOutcome {
    /// An outcome with no details.
    pub fn new(module: Module) -> PassOutcome {
        PassOutcome {
            module,
            details: vec![],
        }
    }

    /// Adds one detail line to the report.
    pub fn detail(mut self, key: impl Into<String>, value: impl fmt::Display) -> PassOutcome {
        self.details.push((key.into(), value.to_string()));
        self
    }
}

/// A graph-level pass. Passes never change values beyond the op's floating-point
/// tolerance and always return a well-typed module.
pub trait Pass: Send + Sync {
    /// Its name and opt level.
    fn info(&self) -> PassInfo;
    /// Runs the pass on `module` under `ctx`; an error stops the pipeline.
    fn run(&self, module: &Module, ctx: &PassContext) -> Result<PassOutcome>;
    /// The rewrite rules the pass applies, in the order it holds them, for
    /// [`PassContext::disabled_rules`]; empty (the default) for passes without rules.
    fn rules(&self) -> Vec<RuleInfo> {
        vec![]
    }
}

/// A pass given by a function: the quickest way to write one.
#[derive(Clone, Copy)]
pub struct FnPass {
    /// Unique name.
    pub name: &'static str,
    /// The lowest opt level it runs at.
    pub opt_level: u8,
    /// [`Pass::run`].
    pub run: fn(&Module, &PassContext) -> Result<PassOutcome>,
}

impl FnPass {
    /// The pass `name`, run from `opt_level` up, computed by `run`.
    pub fn new(
        name: &'static str,
        opt_level: u8,
        run: fn(&Module, &PassContext) -> Result<PassOutcome>,
    ) -> FnPass {
        FnPass {
            name,
            opt_level,
            run,
        }
    }
}

impl Pass for FnPass {
    fn info(&self) -> PassInfo {
        PassInfo {
            name: self.name,
            opt_level: self.opt_level,
        }
    }

    fn run(&self, module: &Module, ctx: &PassContext) -> Result<PassOutcome> {
        (self.run)(module, ctx)
    }
}

/// A rewrite rule as a pass lists it: its unique name and its family.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RuleInfo {
    /// Unique name (`mul_one`).
    pub name: String,
    /// The family (`algebraic`).
    pub family: String,
}

/// The configuration passes run under (Relay's `PassContext`).
#[derive(Clone, Debug)]
pub struct PassContext {
    /// 0..=3, default 2.
    pub opt_level: u8,
    /// Passes run regardless of the opt level.
    pub required: BTreeSet<String>,
    /// Passes never run.
    pub disabled: BTreeSet<String>,
    /// Rewrite rules switched off: each entry is a rule name (`mul_one`) or a family name
    /// (`algebraic`), and a rule is off when its name or its family is listed. Passes
    /// with rules ([`Pass::rules`], i.e. `EqSat`) drop those rules before they run; every
    /// entry must name a rule or family of some pass in the sequence ([`check_names`]).
    pub disabled_rules: BTreeSet<String>,
    /// Run the graph-IR verifier after every pass (on by default in debug builds and
    /// tests); a failure names the pass.
    pub verify: bool,
    /// Keep the printed module after each pass that ran in the report.
    pub dump_ir: bool,
    /// User passes and rules (see [`PassContext::insert_pass`], [`PassContext::add_rule`]).
    pub extensions: Extensions,
}

/// Where a user pass goes in a pipeline: just before or just after the first pass of
/// that name (`FoldConstant` runs three times; `Before("FoldConstant")` is before the
/// first of them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Position {
    /// Just before the first pass of this name.
    Before(String),
    /// Just after the first pass of this name.
    After(String),
}

impl Position {
    /// Before the first pass called `name`.
    pub fn before(name: impl Into<String>) -> Position {
        Position::Before(name.into())
    }

    /// After the first pass called `name`.
    pub fn after(name: impl Into<String>) -> Position {
        Position::After(name.into())
    }
}

/// What a user adds to the standard pipeline: passes at named points, run (and
/// reported) like built-in passes, and rules that `EqSat` runs with its own (listed in
/// its report's `applied`, switched off by `disabled_rules` like built-ins).
#[derive(Clone, Default)]
pub struct Extensions {
    /// In the order they were inserted; two at one position run in that order.
    pub passes: Vec<(Position, Arc<dyn Pass>)>,
    /// Rules for `EqSat`, in the order they were added.
    pub rules: Vec<Arc<dyn Rule>>,
}

impl fmt::Debug for Extensions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let passes: Vec<String> = self
            .passes
            .iter()
            .map(|(at, p)| format!("{} at {at:?}", p.info().name))
            .collect();
        let rules: Vec<&str> = self.rules.iter().map(|r| r.name()).collect();
        f.debug_struct("Extensions")
            .field("passes", &passes)
            .field("rules", &rules)
            .finish()
    }
}

/// `passes` with the user passes of `ext` inserted at their positions (several at one
/// point in the order they were added); an error naming the passes when a position
/// names none of them.
pub fn with_user_passes<'a>(
    passes: &[&'a dyn Pass],
    ext: &'a Extensions,
) -> Result<Vec<&'a dyn Pass>> {
    let mut before: Vec<Vec<&dyn Pass>> = vec![vec![]; passes.len()];
    let mut after: Vec<Vec<&dyn Pass>> = vec![vec![]; passes.len()];
    for (at, pass) in &ext.passes {
        let (name, slots) = match at {
            Position::Before(n) => (n, &mut before),
            Position::After(n) => (n, &mut after),
        };
        let Some(k) = passes.iter().position(|p| p.info().name == name) else {
            let known: Vec<_> = passes.iter().map(|p| p.info().name).collect();
            return Err(Error::InvalidArgument(format!(
                "user pass `{}` is placed at unknown pass `{name}` (passes: {})",
                pass.info().name,
                known.join(", ")
            )));
        };
        slots[k].push(pass.as_ref());
    }
    let mut out = vec![];
    for (k, p) in passes.iter().enumerate() {
        out.extend(before[k].iter().copied());
        out.push(*p);
        out.extend(after[k].iter().copied());
    }
    Ok(out)
}

impl Default for PassContext {
    fn default() -> PassContext {
        PassContext {
            opt_level: 2,
            required: BTreeSet::new(),
            disabled: BTreeSet::new(),
            disabled_rules: BTreeSet::new(),
            verify: cfg!(debug_assertions),
            dump_ir: false,
            extensions: Extensions::default(),
        }
    }
}

impl PassContext {
    /// The default context at `opt_level`; an error above [`MAX_OPT_LEVEL`].
    pub fn with_opt_level(opt_level: u8) -> Result<PassContext> {
        if opt_level > MAX_OPT_LEVEL {
            return Err(Error::InvalidArgument(format!(
                "opt_level {opt_level} is out of range 0..={MAX_OPT_LEVEL}"
            )));
        }
        Ok(PassContext {
            opt_level,
            ..PassContext::default()
        })
    }

    /// Relay's rule: required, or at or below the opt level — and never disabled.
    pub fn enabled(&self, info: &PassInfo) -> bool {
        if self.disabled.contains(info.name) {
            return false;
        }
        self.required.contains(info.name) || self.opt_level >= info.opt_level
    }

    /// Runs `pass` at `at` of the pipeline [`crate::optimize`] (and `build`) runs: once,
    /// gated by its own [`PassInfo::opt_level`], listed in the report like a built-in.
    pub fn insert_pass(&mut self, at: Position, pass: impl Pass + 'static) -> &mut Self {
        self.extensions.passes.push((at, Arc::new(pass)));
        self
    }

    /// Adds `rule` to the rules `EqSat` saturates with (its name must be new).
    pub fn add_rule(&mut self, rule: impl Rule + 'static) -> &mut Self {
        self.extensions.rules.push(Arc::new(rule));
        self
    }

    /// Adds a whole rule family (rules that share [`Rule::family`]).
    pub fn add_rules(&mut self, rules: impl IntoIterator<Item = Arc<dyn Rule>>) -> &mut Self {
        self.extensions.rules.extend(rules);
        self
    }

    /// Whether the rule `name` of `family` is on: neither is in [`Self::disabled_rules`].
    pub fn rule_enabled(&self, name: &str, family: &str) -> bool {
        !self.disabled_rules.contains(name) && !self.disabled_rules.contains(family)
    }
}

impl From<u8> for PassContext {
    /// The default context at `opt_level`, unchecked so that `build(.., 3)` reads well;
    /// [`crate::optimize`] refuses a level above [`MAX_OPT_LEVEL`].
    fn from(opt_level: u8) -> PassContext {
        PassContext {
            opt_level,
            ..PassContext::default()
        }
    }
}

/// One pass's line in the report.
#[derive(Clone, Debug)]
pub struct PassRecord {
    /// The pass's name.
    pub name: String,
    /// The lowest opt level it runs at.
    pub opt_level: u8,
    /// False when the context gated it off.
    pub ran: bool,
    /// Wall time of the pass, in milliseconds (0 when it did not run).
    pub time_ms: f64,
    /// Expression nodes reachable from `@main` (and its functions) before and after.
    pub nodes_before: usize,
    /// See `nodes_before`.
    pub nodes_after: usize,
    /// The pass's own report lines ([`PassOutcome::details`]).
    pub details: Vec<(String, String)>,
    /// The printed module after the pass, when `ctx.dump_ir` is set.
    pub dump: Option<String>,
}

/// Every pass of a run, in order.
#[derive(Clone, Debug, Default)]
pub struct PassReport {
    /// One record per pass of the sequence, ran or not, in order.
    pub records: Vec<PassRecord>,
}

impl PassReport {
    /// The record of the pass called `name`, if it was in the sequence.
    pub fn get(&self, name: &str) -> Option<&PassRecord> {
        self.records.iter().find(|r| r.name == name)
    }

    /// Total time of the passes that ran, in milliseconds.
    pub fn total_ms(&self) -> f64 {
        self.records.iter().map(|r| r.time_ms).sum()
    }
}

impl fmt::Display for PassReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for r in &self.records {
            if !r.ran {
                writeln!(f, "{:<28} skipped (level {})", r.name, r.opt_level)?;
                continue;
            }
            write!(
                f,
                "{:<28} {:>9.2} ms  nodes {:>5} -> {:<5}",
                r.name, r.time_ms, r.nodes_before, r.nodes_after
            )?;
            for (k, v) in &r.details {
                write!(f, "  {k}={v}")?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

/// Expression nodes reachable from the module's globals (what a pass report counts).
pub fn live_nodes(module: &Module) -> usize {
    let mut seen = std::collections::HashSet::new();
    for (_, id) in module.globals() {
        seen.extend(kiln_ir::visit::post_order(module, *id));
    }
    seen.len()
}

/// Checks that every pass `ctx` requires or disables is in `passes`, and that every
/// entry of `ctx.disabled_rules` names a rule or a rule family of one of them.
pub fn check_names(passes: &[&dyn Pass], ctx: &PassContext) -> Result<()> {
    for name in ctx.required.iter().chain(&ctx.disabled) {
        if !passes.iter().any(|p| p.info().name == name) {
            let known: Vec<_> = passes.iter().map(|p| p.info().name).collect();
            return Err(Error::InvalidArgument(format!(
                "unknown pass `{name}` (passes: {})",
                known.join(", ")
            )));
        }
    }
    let mut rules: Vec<RuleInfo> = passes.iter().flat_map(|p| p.rules()).collect();
    for r in &ctx.extensions.rules {
        if rules.iter().any(|b| b.name == r.name()) {
            return Err(Error::InvalidArgument(format!(
                "user rule `{}` has the name of another rule",
                r.name()
            )));
        }
        rules.push(RuleInfo {
            name: r.name().to_string(),
            family: r.family().to_string(),
        });
    }
    if ctx.disabled_rules.is_empty() {
        return Ok(());
    }
    for name in &ctx.disabled_rules {
        if !rules.iter().any(|r| &r.name == name || &r.family == name) {
            let mut families: Vec<&str> = vec![];
            for r in &rules {
                if !families.contains(&r.family.as_str()) {
                    families.push(&r.family);
                }
            }
            let known = if rules.is_empty() {
                "no pass in the sequence has rules".to_string()
            } else {
                format!(
                    "families: {}; rules: {}",
                    families.join(", "),
                    rules
                        .iter()
                        .map(|r| r.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            };
            return Err(Error::InvalidArgument(format!(
                "unknown rule or rule family `{name}` in disabled_rules ({known})"
            )));
        }
    }
    Ok(())
}

/// Runs `passes` in order under `ctx`, verifying after each when `ctx.verify` is set.
/// Names in the context that match no pass (or rule) are an error ([`check_names`]).
pub fn run_passes(
    module: &Module,
    passes: &[&dyn Pass],
    ctx: &PassContext,
) -> Result<(Module, PassReport)> {
    check_names(passes, ctx)?;
    let mut module = module.clone();
    let mut report = PassReport::default();
    for pass in passes {
        let info = pass.info();
        let nodes_before = live_nodes(&module);
        if !ctx.enabled(&info) {
            report.records.push(PassRecord {
                name: info.name.to_string(),
                opt_level: info.opt_level,
                ran: false,
                time_ms: 0.0,
                nodes_before,
                nodes_after: nodes_before,
                details: vec![],
                dump: None,
            });
            continue;
        }
        let t = Instant::now();
        let out = pass.run(&module, ctx)?;
        let time_ms = t.elapsed().as_secs_f64() * 1e3;
        if ctx.verify {
            kiln_ir::verify::verify(&out.module).map_err(|source| Error::PassBroke {
                pass: info.name.to_string(),
                source,
            })?;
        }
        module = out.module;
        report.records.push(PassRecord {
            name: info.name.to_string(),
            opt_level: info.opt_level,
            ran: true,
            time_ms,
            nodes_before,
            nodes_after: live_nodes(&module),
            details: out.details,
            dump: ctx
                .dump_ir
                .then(|| kiln_ir::text::print_module(&module, &Default::default())),
        });
    }
    Ok((module, report))
}
