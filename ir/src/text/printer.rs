//! The printer of the graph-IR text form. Writes a [`Module`] the way Relay's `astext`
//! does: a `#[version = "0.0.5"]` header, then every global as
//! `def @name(%param: Type, ...) -> Type { ... }` in definition order. Inside a def, every
//! call, tuple, tuple access and nested function literal gets a `%N = ...;` binding in
//! post-order (one counter per def, shared with the nested functions), except the final
//! expression of a body, which is written bare. Variables, global references and
//! constants are written inline: scalars as literals (`1f`, `3i64`, `True`), other
//! tensors as `meta[relay.Constant][K]`, with their values in a trailing `#[metadata]`
//! section when [`PrintOptions::show_meta_data`] is set.
//!
//! Variable names that are not identifiers (`input.1`, `0`, names with spaces) are
//! written quoted (`%"input.1"`); two variables of one def with the same name are told
//! apart with a suffix (`%x`, `%x_1`). The printer works on any module, even a malformed
//! one (bad ids, cycles, free variables), so the verifier can name locations with
//! [`binding_names`]; such modules print placeholders (`<missing #7>`) that do not parse.

use std::collections::{HashMap, HashSet};
use std::fmt::{self, Write};

use half::f16;

use crate::expr::{Callee, ExprId, ExprKind, Module};
use crate::tensor::{Data, NDArray};
use crate::text::lexer::is_identifier;
use crate::ty::Type;

/// What [`print_module`] writes besides the expressions.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct PrintOptions {
    /// Annotate parameters, bindings and final expressions with `/* ty=... */`.
    pub types: bool,
    /// Append the `#[metadata]` section with the values of non-scalar constants.
    /// Without it, text that refers to `meta[relay.Constant][K]` does not parse back.
    pub show_meta_data: bool,
}

impl Default for PrintOptions {
    /// No type annotations, metadata shown: the text parses back to the same module.
    fn default() -> PrintOptions {
        PrintOptions {
            types: false,
            show_meta_data: true,
        }
    }
}

impl PrintOptions {
    /// The default options with `/* ty=... */` annotations switched on.
    pub fn with_types() -> PrintOptions {
        PrintOptions {
            types: true,
            ..PrintOptions::default()
        }
    }
}

/// The text form of `m`.
pub fn print_module(m: &Module, opts: &PrintOptions) -> String {
    let mut meta = MetaTable::default();
    let mut out = String::from("#[version = \"0.0.5\"]\n");
    for (i, (name, def)) in m.globals().iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let mut p = DefPrinter::new(m, opts, &mut meta, *def);
        out.push_str(&p.def(name, *def));
    }
    if opts.show_meta_data && !meta.order.is_empty() {
        out.push_str("\n#[metadata]\n");
        for (k, id) in meta.order.iter().enumerate() {
            if let ExprKind::Constant(value) = m.kind(*id) {
                let _ = write!(
                    out,
                    "meta[relay.Constant][{k}] = {} ",
                    Type::Tensor(value.ty())
                );
                write_values(&mut out, value);
                out.push('\n');
            }
        }
    }
    out
}

/// The names the printer gives the nodes of global function `def` (the function node
/// of a global): `%0` for bindings, `%data` for variables, `@f` for globals,
/// `1f` or `meta[relay.Constant][0]` for constants, `result of @main` (or
/// `result of %4` in a nested function) for a body's final expression, and `@main` for
/// the function node itself. A function node that is not a global is named by its id;
/// an id that is not a function gives an empty map.
pub fn binding_names(m: &Module, def: ExprId) -> HashMap<ExprId, String> {
    if !matches!(m.get(def).map(|n| &n.kind), Ok(ExprKind::Function(_))) {
        return HashMap::new();
    }
    let opts = PrintOptions::default();
    let mut meta = MetaTable::default();
    for (name, id) in m.globals() {
        let mut p = DefPrinter::new(m, &opts, &mut meta, *id);
        p.def(name, *id);
        if *id == def {
            return p.names;
        }
    }
    let mut meta = MetaTable::default();
    let mut p = DefPrinter::new(m, &opts, &mut meta, def);
    p.def(&def.to_string(), def);
    p.names
}

/// The location of every node the printer names in any global def, as
/// `@def %binding`, computed in one pass over the module (linear time, unlike calling
/// [`binding_names`] per def). A node named in several defs keeps the first.
pub fn module_binding_names(m: &Module) -> HashMap<ExprId, String> {
    let opts = PrintOptions::default();
    let mut meta = MetaTable::default();
    let mut out = HashMap::new();
    for (name, id) in m.globals() {
        let mut p = DefPrinter::new(m, &opts, &mut meta, *id);
        p.def(name, *id);
        if !matches!(m.get(*id).map(|n| &n.kind), Ok(ExprKind::Function(_))) {
            continue;
        }
        for (node, binding) in p.names {
            out.entry(node)
                .or_insert_with(|| format!("@{name} {binding}"));
        }
    }
    out
}

impl fmt::Display for Module {
    /// The text form with [`PrintOptions::default`].
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&print_module(self, &PrintOptions::default()))
    }
}

/// Numbers non-scalar constants in first-use order across the module.
#[derive(Default)]
struct MetaTable {
    index: HashMap<ExprId, usize>,
    order: Vec<ExprId>,
}

impl MetaTable {
    fn name(&mut self, id: ExprId) -> String {
        let k = *self.index.entry(id).or_insert_with(|| {
            self.order.push(id);
            self.order.len() - 1
        });
        format!("meta[relay.Constant][{k}]")
    }
}

/// Formats an `f32` like [`crate::attrs::fmt_float`] formats an `f64`, with the shortest digits that
/// read back to the same `f32` (`0.1`, not `0.10000000149011612`).
pub(crate) fn fmt_f32(x: f32) -> String {
    crate::attrs::relay_float(x as f64, x)
}

fn fmt_f16(x: f16) -> String {
    fmt_f32(x.to_f32())
}

fn bool_text(b: bool) -> &'static str {
    if b { "True" } else { "False" }
}

/// Element `i` without a dtype suffix.
fn element_text(data: &Data, i: usize) -> String {
    match data {
        Data::F32(v) => fmt_f32(v[i]),
        Data::F16(v) => fmt_f16(v[i]),
        Data::Bool(v) => bool_text(v[i]).to_string(),
        Data::I8(v) => v[i].to_string(),
        Data::U8(v) => v[i].to_string(),
        Data::I32(v) => v[i].to_string(),
        Data::I64(v) => v[i].to_string(),
        Data::F64(v) => crate::attrs::relay_float(v[i], v[i]),
        Data::BF16(v) => fmt_f32(v[i].to_f32()),
        Data::I16(v) => v[i].to_string(),
        Data::U16(v) => v[i].to_string(),
        Data::U32(v) => v[i].to_string(),
        Data::U64(v) => v[i].to_string(),
    }
}

/// Writes `[v0, v1, ...]`, row-major.
fn write_values(out: &mut String, value: &NDArray) {
    out.push('[');
    for i in 0..value.numel() {
        if i > 0 {
            out.push_str(", ");
        }
        out.push_str(&element_text(value.data(), i));
    }
    out.push(']');
}

/// A scalar constant as a literal: `1f`, `1f16`, `3`, `3i64`, `True`, `nanf`, `-inff`.
fn scalar_text(value: &NDArray) -> String {
    let dtype = value.dtype();
    if value.numel() != 1 {
        return format!("<scalar with {} values>", value.numel());
    }
    let v = element_text(value.data(), 0);
    format!("{v}{}", dtype.literal_suffix())
}

/// `%name` or `%"name"` for a name that is not an identifier.
fn local_text(name: &str) -> String {
    if is_identifier(name) {
        format!("%{name}")
    } else {
        format!("%{name:?}")
    }
}

fn global_text(name: &str) -> String {
    if is_identifier(name) {
        format!("@{name}")
    } else {
        format!("@{name:?}")
    }
}

#[derive(Copy, Clone, PartialEq, Eq)]
enum State {
    Open,
    Done,
}

/// Prints one def; holds its binding counter and the names given so far.
struct DefPrinter<'a> {
    m: &'a Module,
    opts: &'a PrintOptions,
    meta: &'a mut MetaTable,
    /// Inline names of printed nodes (and the labels of bare final expressions).
    names: HashMap<ExprId, String>,
    state: HashMap<ExprId, State>,
    /// References to each node from calls, tuples, tuple accesses and function bodies.
    uses: HashMap<ExprId, usize>,
    counter: usize,
    /// `@name` of the def being printed.
    label: String,
}

impl<'a> DefPrinter<'a> {
    fn new(m: &'a Module, opts: &'a PrintOptions, meta: &'a mut MetaTable, def: ExprId) -> Self {
        let mut p = DefPrinter {
            m,
            opts,
            meta,
            names: HashMap::new(),
            state: HashMap::new(),
            uses: HashMap::new(),
            counter: 0,
            label: String::new(),
        };
        p.scan(def);
        p
    }

    fn valid(&self, id: ExprId) -> bool {
        id.index() < self.m.len()
    }

    /// Counts uses and names the variables of the def, in a traversal order fixed by
    /// the structure alone (function parameters first), so a parsed-back module gets
    /// the same names.
    fn scan(&mut self, def: ExprId) {
        let mut seen = HashSet::new();
        let mut vars = Vec::new();
        let mut stack = vec![def];
        while let Some(id) = stack.pop() {
            if !self.valid(id) || !seen.insert(id) {
                continue;
            }
            let kind = self.m.kind(id);
            let counted: Vec<ExprId> = match kind {
                ExprKind::Var { .. } => {
                    vars.push(id);
                    vec![]
                }
                ExprKind::Function(f) => vec![f.body],
                other => other.children(),
            };
            for &c in &counted {
                *self.uses.entry(c).or_insert(0) += 1;
            }
            stack.extend(kind.children().into_iter().rev());
        }
        let originals: HashSet<&str> = vars.iter().filter_map(|&v| self.m.var_name(v)).collect();
        let mut taken: HashSet<String> = HashSet::new();
        // The suffix each name last got: candidates below it are taken already (`taken`
        // only grows), so many variables of one name cost linear, not quadratic, time.
        let mut last_suffix: HashMap<&str, usize> = HashMap::new();
        for v in vars {
            let name = self.m.var_name(v).unwrap_or_default();
            let mut k = last_suffix.get(name).copied().unwrap_or(0);
            let suffixed = |k: usize| {
                if k == 0 {
                    name.to_string()
                } else {
                    format!("{name}_{k}")
                }
            };
            let mut chosen = suffixed(k);
            while taken.contains(&chosen) || (k > 0 && originals.contains(chosen.as_str())) {
                k += 1;
                chosen = suffixed(k);
            }
            last_suffix.insert(name, k);
            self.names.insert(v, local_text(&chosen));
            taken.insert(chosen);
        }
    }

    fn ty_comment(&self, id: ExprId) -> String {
        if self.opts.types && self.valid(id) {
            format!(" /* ty={} */", self.m.ty(id))
        } else {
            String::new()
        }
    }

    /// The inline name of an already printed node.
    fn name_of(&self, id: ExprId) -> String {
        match self.names.get(&id) {
            Some(n) => n.clone(),
            None if !self.valid(id) => format!("<missing {id}>"),
            None => format!("<cycle {id}>"),
        }
    }

    fn def(&mut self, name: &str, def: ExprId) -> String {
        let label = global_text(name);
        self.label = label.clone();
        let mut out = String::new();
        if !self.valid(def) {
            return format!("def {label}() {{\n  <missing {def}>\n}}\n");
        }
        self.names.insert(def, label.clone());
        self.state.insert(def, State::Open);
        match self.m.kind(def).clone() {
            ExprKind::Function(f) => {
                let (lines, last) = self.block(f.body, 1);
                self.names
                    .entry(f.body)
                    .or_insert_with(|| format!("result of {label}"));
                let _ = write!(
                    out,
                    "def {label}{} {{\n{lines}",
                    self.signature(&f.params, f.attrs.primitive, f.body)
                );
                let _ = writeln!(out, "  {last}{}", self.ty_comment(f.body));
                out.push_str("}\n");
            }
            _ => {
                let (lines, last) = self.block(def, 1);
                let _ = write!(
                    out,
                    "def {label}() {{\n{lines}  {last}{}\n}}\n",
                    self.ty_comment(def)
                );
            }
        }
        self.state.insert(def, State::Done);
        out
    }

    /// `(%a: T, %b: T, Primitive=1) -> R`.
    fn signature(&self, params: &[ExprId], primitive: bool, body: ExprId) -> String {
        let mut items: Vec<String> = params
            .iter()
            .map(|&p| {
                if !self.valid(p) {
                    return format!("<missing {p}>");
                }
                format!(
                    "{}: {}{}",
                    self.name_of(p),
                    self.m.ty(p),
                    self.ty_comment(p)
                )
            })
            .collect();
        if primitive {
            items.push("Primitive=1".into());
        }
        let ret = if self.valid(body) {
            self.m.ty(body).to_string()
        } else {
            format!("<missing {body}>")
        };
        format!("({}) -> {ret}", items.join(", "))
    }

    /// Prints the bindings a body needs (at `indent` levels) and returns them with the
    /// text of its final expression.
    fn block(&mut self, root: ExprId, indent: usize) -> (String, String) {
        let pad = "  ".repeat(indent);
        let bare_root = self.uses.get(&root).copied().unwrap_or(0) <= 1;
        let mut lines = String::new();
        let mut last = None;
        let mut stack = vec![(root, false)];
        while let Some((id, expanded)) = stack.pop() {
            if self.state.get(&id) == Some(&State::Done) {
                continue;
            }
            if !self.valid(id) {
                self.names.insert(id, format!("<missing {id}>"));
                self.state.insert(id, State::Done);
                continue;
            }
            if !expanded {
                if self.state.get(&id) == Some(&State::Open) {
                    continue; // a cycle: printed as `<cycle #N>` by its user
                }
                let kind = self.m.kind(id);
                match kind {
                    ExprKind::Var { .. } => {
                        self.names.entry(id).or_insert_with(|| "%<unnamed>".into());
                        self.state.insert(id, State::Done);
                    }
                    ExprKind::GlobalVar(name) => {
                        self.names.insert(id, global_text(name));
                        self.state.insert(id, State::Done);
                    }
                    ExprKind::Constant(value) => {
                        let text = if value.rank() == 0 {
                            scalar_text(value)
                        } else {
                            self.meta.name(id)
                        };
                        self.names.insert(id, text);
                        self.state.insert(id, State::Done);
                    }
                    ExprKind::Function(_) => {
                        self.state.insert(id, State::Open);
                        stack.push((id, true));
                    }
                    ExprKind::Call { .. } | ExprKind::Tuple(_) | ExprKind::TupleGetItem { .. } => {
                        self.state.insert(id, State::Open);
                        stack.push((id, true));
                        for c in kind.children().into_iter().rev() {
                            stack.push((c, false));
                        }
                    }
                }
                continue;
            }
            let text = self.expr_text(id, indent);
            self.state.insert(id, State::Done);
            let name = if id == root && bare_root {
                last = Some(text);
                format!("the function in {}", self.label)
            } else {
                let n = self.counter;
                self.counter += 1;
                let _ = writeln!(lines, "{pad}%{n} = {text}{};", self.ty_comment(id));
                self.names.insert(id, format!("%{n}"));
                format!("%{n}")
            };
            if let ExprKind::Function(f) = self.m.kind(id) {
                // A nested function's bare final expression is named after the function.
                self.names
                    .entry(f.body)
                    .or_insert_with(|| format!("result of {name}"));
            }
        }
        let last = last.unwrap_or_else(|| self.name_of(root));
        (lines, last)
    }

    /// The right-hand side of a binding for `id`, whose operands are printed already.
    fn expr_text(&mut self, id: ExprId, indent: usize) -> String {
        let args_text =
            |p: &Self, args: &[ExprId]| args.iter().map(|&a| p.name_of(a)).collect::<Vec<_>>();
        match self.m.kind(id).clone() {
            ExprKind::Call { callee, args } => {
                let mut items = args_text(self, &args);
                let head = match callee {
                    Callee::Op(op) => {
                        items.extend(op.attrs().into_iter().map(|(k, v)| format!("{k}={v}")));
                        op.name().to_string()
                    }
                    Callee::Expr(f) => self.name_of(f),
                };
                format!("{head}({})", items.join(", "))
            }
            ExprKind::Tuple(fields) => {
                let items = args_text(self, &fields);
                if items.len() == 1 {
                    format!("({},)", items[0])
                } else {
                    format!("({})", items.join(", "))
                }
            }
            ExprKind::TupleGetItem { tuple, index } => format!("{}.{index}", self.name_of(tuple)),
            ExprKind::Function(f) => {
                let (lines, last) = self.block(f.body, indent + 1);
                let pad = "  ".repeat(indent);
                format!(
                    "fn {} {{\n{lines}{pad}  {last}{}\n{pad}}}",
                    self.signature(&f.params, f.attrs.primitive, f.body),
                    self.ty_comment(f.body)
                )
            }
            ExprKind::Var { .. } | ExprKind::GlobalVar(_) | ExprKind::Constant(_) => {
                self.name_of(id)
            }
        }
    }
}
