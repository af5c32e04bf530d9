//! Random well-typed graph-IR programs (Cranelift fuzzgen's idea for Kiln): a
//! [`GraphSpec`] is a dtype, input shapes, input fills (edge values included) and a list
//! of node [`Recipe`]s. Recipe `k` names its arguments by index modulo the values built
//! so far, so the graph is a DAG with fan-out and reuse, and removing any recipe leaves a
//! valid program: proptest shrinks a failure by dropping recipes, shrinking shapes and
//! simplifying fills. A recipe whose op cannot be made legal for its arguments' shapes
//! (or whose result would leave the element budget) builds nothing.
//!
//! [`GraphSpec::build`] makes the module (every value no other node uses is an output),
//! its inputs and the tolerance for the whole graph (the widest of its ops' tolerances
//! from [`crate::ops`], widened per inexact op, applied relative to the larger of the
//! output's and the inputs' magnitudes). Numerically discontinuous uses — a
//! comparison, a float-to-int cast, a divisor, rounding, `exp`, `log`, `rsqrt`, `power`
//! or `softmax` — take only values computed exactly (bit-equal on every backend, signed
//! zeros included), and NaN/Inf inputs reach only ops that define them, so a mismatch
//! is a bug, not rounding. [`check`] runs one
//! backend at one opt level against the reference interpreter; a failure message holds
//! the module as text IR with the seed, ready to save under `tests/cases/` ([`crate::cases`]),
//! and [`check_diagnosed`] adds, for a failure at opt level > 0, the pass (and rule) that
//! moves the output ([`crate::bisect::diagnose`]).

use std::collections::BTreeMap;

use kiln_executor::Params;
use kiln_ir::op::*;
use kiln_ir::text::{PrintOptions, print_module};
use kiln_ir::{DType, ExprId, ExprKind, Module, NDArray, TensorType};
use kiln_rewrite::PassReport;
use proptest::prelude::*;

use crate::ops::Tol;
use crate::suite::{ExecBackend, compare_scaled, max_abs};

mod build;

/// Most elements any tensor of a random graph holds.
pub const ELEMENT_BUDGET: usize = 256;

/// The op family a recipe applies; attributes are derived from the recipe's parameters
/// and its arguments' shapes.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    Unary(UnaryKind),
    Binary(BinaryKind),
    Clip,
    Cast,
    Where,
    Conv2d,
    Dense,
    BatchMatmul,
    BiasAdd,
    Pool(PoolKind),
    GlobalPool(PoolKind),
    Reduce(ReduceKind),
    Softmax,
    Reshape,
    Transpose,
    ExpandDims,
    Squeeze,
    Concat,
    Split,
    StridedSlice,
    BatchFlatten,
    LayerNorm,
    BatchNorm,
    Take,
}

/// One node to build: the op family, three argument picks (indices modulo the number of
/// values so far) and four free parameters for the attributes.
#[derive(Clone, Debug)]
pub struct Recipe {
    pub kind: Kind,
    pub args: [usize; 3],
    pub p: [usize; 4],
}

/// How an input is filled.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Fill {
    /// Floats uniform in `[-1, 1)`, integers in `[-10, 10]`.
    Uniform,
    /// Half the elements zero (negative zero among them for floats).
    Zeros,
    /// Magnitudes up to 1000.
    Large,
    /// Floats: NaN, +-Inf, +-0 and 1e30 among uniform values; integers: the dtype's
    /// extremes among small values.
    Special,
}

/// A random program: what [`graph_spec`] generates and proptest shrinks.
#[derive(Clone, Debug)]
pub struct GraphSpec {
    pub dtype: DType,
    pub inputs: Vec<(Vec<usize>, Fill)>,
    pub recipes: Vec<Recipe>,
    pub seed: u64,
}

/// A built program: the module, every input's value (weights among them), the weights
/// bound at build time, the ops it calls (name, dtype of the first argument), and its
/// tolerance.
#[derive(Clone, Debug)]
pub struct Built {
    pub module: Module,
    pub inputs: BTreeMap<String, NDArray>,
    pub bound: Params,
    pub ops: Vec<(String, DType)>,
    pub tol: Tol,
    /// The seed and fills, for the case header.
    pub header: String,
}

fn kind() -> impl Strategy<Value = Kind> {
    let unary = (0..UnaryKind::ALL.len()).prop_map(|k| Kind::Unary(UnaryKind::ALL[k]));
    let binary = (0..BinaryKind::ALL.len()).prop_map(|k| Kind::Binary(BinaryKind::ALL[k]));
    let reduce = (0..ReduceKind::ALL.len()).prop_map(|k| Kind::Reduce(ReduceKind::ALL[k]));
    let pool = any::<bool>().prop_map(|m| if m { PoolKind::Max } else { PoolKind::Avg });
    prop_oneof![
        4 => unary,
        5 => binary,
        1 => Just(Kind::Clip),
        1 => Just(Kind::Cast),
        1 => Just(Kind::Where),
        2 => Just(Kind::Conv2d),
        2 => Just(Kind::Dense),
        1 => Just(Kind::BatchMatmul),
        1 => Just(Kind::BiasAdd),
        2 => pool.clone().prop_map(Kind::Pool),
        1 => pool.prop_map(Kind::GlobalPool),
        2 => reduce,
        1 => Just(Kind::Softmax),
        1 => Just(Kind::Reshape),
        1 => Just(Kind::Transpose),
        1 => Just(Kind::ExpandDims),
        1 => Just(Kind::Squeeze),
        1 => Just(Kind::Concat),
        1 => Just(Kind::Split),
        1 => Just(Kind::StridedSlice),
        1 => Just(Kind::BatchFlatten),
        1 => Just(Kind::LayerNorm),
        1 => Just(Kind::BatchNorm),
        1 => Just(Kind::Take),
    ]
}

fn recipe() -> impl Strategy<Value = Recipe> {
    (
        kind(),
        proptest::array::uniform3(0..16usize),
        proptest::array::uniform4(0..16usize),
    )
        .prop_map(|(kind, args, p)| Recipe { kind, args, p })
}

fn fill() -> impl Strategy<Value = Fill> {
    prop_oneof![
        4 => Just(Fill::Uniform),
        1 => Just(Fill::Zeros),
        1 => Just(Fill::Large),
        1 => Just(Fill::Special),
    ]
}

/// An input shape: rank 1 to 4 (4 most often, for convolutions and pools), dimensions 1
/// to 6, within [`ELEMENT_BUDGET`].
fn input_shape() -> impl Strategy<Value = Vec<usize>> {
    prop_oneof![1 => 1..=3usize, 2 => Just(4usize)]
        .prop_flat_map(|r| proptest::collection::vec(1..=6usize, r))
        .prop_map(|mut s| {
            while s.iter().product::<usize>() > ELEMENT_BUDGET {
                let i = (0..s.len()).max_by_key(|&i| s[i]).unwrap_or(0);
                s[i] = s[i].div_ceil(2);
            }
            s
        })
}

/// Random programs of up to `max_nodes` recipes over one to three inputs.
pub fn graph_spec(max_nodes: usize) -> impl Strategy<Value = GraphSpec> {
    (
        prop_oneof![3 => Just(DType::F32), 1 => Just(DType::I32)],
        proptest::collection::vec((input_shape(), fill()), 1..=3),
        proptest::collection::vec(recipe(), 1..=max_nodes.max(1)),
        any::<u64>(),
    )
        .prop_map(|(dtype, inputs, recipes, seed)| GraphSpec {
            dtype,
            inputs,
            recipes,
            seed,
        })
}

/// What a weight parameter holds; its name is the prefix and its number (`w0`, `wpos1`,
/// `widx2`), so a saved case regenerates the same values.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Weight {
    /// Uniform in `[-1, 1)` (integers in `[-10, 10]`).
    Plain,
    /// Uniform in `[0.1, 2)`: variances.
    Positive,
    /// Integers in `[-12, 12]`: `take` indices, in range, negative and past the end.
    Index,
    /// Modulo divisors: never zero; floats are signed powers of two (±0.5, ±1, ±2, ±4),
    /// so the quotient is exact and the lowered `x - trunc(x / y) * y` is IEEE's exact
    /// fmod; integers are in ±{2, 3, 5, 7} (no -1: `INT_MIN % -1` traps on some hosts).
    Divisor,
}

impl Weight {
    /// The parameter-name prefix.
    pub fn prefix(self) -> &'static str {
        match self {
            Weight::Plain => "w",
            Weight::Positive => "wpos",
            Weight::Index => "widx",
            Weight::Divisor => "wdiv",
        }
    }

    /// The kind and number of a weight parameter called `name`, if it is one.
    pub fn parse(name: &str) -> Option<(Weight, usize)> {
        [
            Weight::Index,
            Weight::Positive,
            Weight::Divisor,
            Weight::Plain,
        ]
        .into_iter()
        .find_map(|w| Some((w, name.strip_prefix(w.prefix())?.parse().ok()?)))
    }
}

/// The values of weight number `k` of `kind` and type `t` in a case with `seed`.
pub fn weight_values(kind: Weight, k: usize, t: &TensorType, seed: u64) -> NDArray {
    let s = seed ^ (0x77 + k as u64);
    let shape = t.shape.clone();
    match kind {
        Weight::Plain => NDArray::random(shape, t.dtype, s),
        Weight::Positive => NDArray::random_uniform(shape, t.dtype, s, 0.1, 2.0),
        Weight::Index => NDArray::random_uniform(shape, t.dtype, s, -12.0, 12.0),
        Weight::Divisor => {
            let n: usize = shape.iter().product();
            let picks = NDArray::random_uniform(vec![n], DType::I64, s, 0.0, 8.0).to_i64_vec();
            let table: [f64; 8] = if t.dtype.is_float() {
                [0.5, 1.0, 2.0, 4.0, -0.5, -1.0, -2.0, -4.0]
            } else {
                [2.0, 3.0, 5.0, 7.0, -2.0, -3.0, -5.0, -7.0]
            };
            let v = picks
                .iter()
                .map(|&k| table[k.rem_euclid(8) as usize])
                .collect();
            NDArray::from_f64(shape, t.dtype, v).expect("divisor values fit the shape")
        }
    }
}

/// Values for an input of type `t` filled as `fill`.
pub fn fill_values(t: &TensorType, fill: Fill, seed: u64) -> NDArray {
    let n: usize = t.shape.iter().product();
    let float = t.dtype.is_float();
    let pick = NDArray::random_uniform(vec![n], DType::I64, seed ^ 0x5eed, 0.0, 5.0).to_i64_vec();
    let base = match fill {
        Fill::Large => NDArray::random_uniform(t.shape.clone(), t.dtype, seed, -1000.0, 1000.0),
        _ => NDArray::random(t.shape.clone(), t.dtype, seed),
    };
    let mut v = base.to_f64_vec();
    for (x, &k) in v.iter_mut().zip(&pick) {
        match fill {
            Fill::Zeros if k % 2 == 0 => *x = if k == 0 && float { -0.0 } else { 0.0 },
            Fill::Special if float => {
                *x = match k {
                    0 => f64::NAN,
                    1 => f64::INFINITY,
                    2 => f64::NEG_INFINITY,
                    3 => 1e30,
                    _ => *x,
                }
            }
            Fill::Special => {
                let (lo, hi) = int_range(t.dtype);
                *x = match k {
                    0 => lo,
                    1 => hi,
                    _ => *x,
                }
            }
            _ => {}
        }
    }
    NDArray::from_f64(t.shape.clone(), t.dtype, v).expect("shape matches its own length")
}

fn int_range(d: DType) -> (f64, f64) {
    match d {
        DType::I8 => (-128.0, 127.0),
        DType::U8 => (0.0, 255.0),
        DType::I32 => (i32::MIN as f64, i32::MAX as f64),
        _ => (-(2f64.powi(53)), 2f64.powi(53)),
    }
}

/// What one case did on one backend.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// Agreed with the reference.
    Pass,
    /// The backend declares `(op, dtype)` unsupported; skipped.
    Unsupported(String, DType),
}

/// The module's text form with the case header: what a failure prints and what
/// `tests/cases/*.relay` holds.
pub fn case_text(built: &Built) -> String {
    format!(
        "{}{}",
        built.header,
        print_module(&built.module, &PrintOptions::default())
    )
}

/// The reference interpreter's outputs, flattened.
pub fn reference(m: &Module, inputs: &BTreeMap<String, NDArray>) -> Result<Vec<NDArray>, String> {
    Ok(kiln_ir::interp::evaluate(m, inputs)
        .map_err(|e| format!("reference: {e}"))?
        .flatten())
}

/// The op calls reachable from `@main` (name, dtype of the first argument).
pub fn ops_of(module: &Module) -> Vec<(String, DType)> {
    let Ok(main) = module.main() else {
        return vec![];
    };
    kiln_ir::visit::post_order(module, main.body)
        .into_iter()
        .filter_map(|id| {
            let kind = &module.node(id).kind;
            let d = kind
                .children()
                .first()
                .and_then(|&c| module.ty(c).as_tensor().map(|t| t.dtype))
                .unwrap_or(DType::F32);
            Some((kind.op()?.name().to_string(), d))
        })
        .collect()
}

/// What the op calls reachable from `@main` use, for a backend's unsupported list:
/// (name, dtype) for each dtype a call reads or produces (its arguments' tensors, tuple
/// fields included, and its result), so a dtype declared unsupported for every op
/// (`*`) is found whatever argument holds it.
pub fn uses_of(module: &Module) -> Vec<(String, DType)> {
    let Ok(main) = module.main() else {
        return vec![];
    };
    fn dtypes(t: &kiln_ir::Type, out: &mut Vec<DType>) {
        match t {
            kiln_ir::Type::Tensor(t) => out.push(t.dtype),
            kiln_ir::Type::Tuple(fields) => fields.iter().for_each(|f| dtypes(f, out)),
            _ => {}
        }
    }
    kiln_ir::visit::post_order(module, main.body)
        .into_iter()
        .filter_map(|id| {
            let kind = &module.node(id).kind;
            let name = kind.op()?.name().to_string();
            let mut ds = vec![];
            kind.children()
                .iter()
                .for_each(|&c| dtypes(module.ty(c), &mut ds));
            dtypes(module.ty(id), &mut ds);
            ds.sort();
            ds.dedup();
            if ds.is_empty() {
                ds.push(DType::F32);
            }
            Some(ds.into_iter().map(move |d| (name.clone(), d)))
        })
        .flatten()
        .collect()
}

impl Built {
    /// The program cut down to its (flattened) output `k` and what that output reads;
    /// `None` when the program has a single output.
    pub fn only_output(&self, k: usize) -> Option<Built> {
        let mut m = self.module.clone();
        let main = m.main().ok()?.clone();
        let ExprKind::Tuple(fields) = m.kind(main.body) else {
            return None;
        };
        let body = *fields.get(k)?;
        let used = kiln_ir::visit::free_vars(&m, body);
        let params: Vec<ExprId> = main
            .params
            .iter()
            .copied()
            .filter(|p| used.contains(p))
            .collect();
        m.set_main(&params, body).ok()?;
        let names: Vec<String> = params
            .iter()
            .filter_map(|&p| m.var_name(p).map(str::to_string))
            .collect();
        let keep = |map: &BTreeMap<String, NDArray>| -> BTreeMap<String, NDArray> {
            map.iter()
                .filter(|(n, _)| names.contains(n))
                .map(|(n, v)| (n.clone(), v.clone()))
                .collect()
        };
        Some(Built {
            ops: ops_of(&m),
            inputs: keep(&self.inputs),
            bound: keep(&self.bound),
            module: m,
            tol: self.tol,
            header: self.header.clone(),
        })
    }
}

/// A failing case: the message (backend, opt level, mismatch and the case as text IR)
/// and the case it prints (the program narrowed to its first wrong output when that
/// fails on its own).
#[derive(Clone, Debug)]
pub struct Failure {
    pub message: String,
    pub case: Built,
}

/// Runs `built` on `backend` at `opt_level` and compares with `want` (the reference's
/// outputs); on a pass, the optimizer's report of the build (`None` when skipped). The
/// failure holds the case as text IR: when the program has several outputs and the
/// first wrong one also fails on its own, only that output and the ops it reads (a
/// smaller case than proptest's shrinking alone reaches).
pub fn run_case(
    built: &Built,
    want: &[NDArray],
    backend: &ExecBackend,
    opt_level: u8,
) -> Result<(Outcome, Option<PassReport>), Failure> {
    if let Some((op, d)) = backend.unsupported_in(&uses_of(&built.module)) {
        return Ok((Outcome::Unsupported(op, d), None));
    }
    // The report, or the error and the first output that is wrong on its own.
    let run = |b: &Built, want: &[NDArray]| -> Result<PassReport, (String, Option<usize>)> {
        let (got, report) = backend
            .run_reported(&b.module, &b.inputs, &b.bound, opt_level)
            .map_err(|e| (e, None))?;
        let scale = b.inputs.values().map(max_abs).fold(0.0, f64::max);
        compare_scaled(&got, want, b.tol, scale).map_err(|e| {
            let n = want.len().min(got.len());
            let k =
                (0..n).find(|&i| compare_scaled(&got[i..=i], &want[i..=i], b.tol, scale).is_err());
            (e, k)
        })?;
        Ok(report)
    };
    let fail = |b: &Built, e: String| Failure {
        message: format!(
            "{} at opt level {opt_level}: {e}\ncase ({} ops; {}):\n{}",
            backend.name,
            b.ops.len(),
            crate::suite::save_hint(),
            case_text(b)
        ),
        case: b.clone(),
    };
    match run(built, want) {
        Ok(report) => Ok((Outcome::Pass, Some(report))),
        Err((e, Some(k))) => {
            if let Some(small) = built.only_output(k)
                && let Err((e, _)) = run(&small, &want[k..=k])
            {
                return Err(fail(&small, e));
            }
            Err(fail(built, e))
        }
        Err((e, None)) => Err(fail(built, e)),
    }
}

/// [`run_case`]'s outcome, the failure as its message.
pub fn check_built(
    built: &Built,
    want: &[NDArray],
    backend: &ExecBackend,
    opt_level: u8,
) -> Result<Outcome, String> {
    run_case(built, want, backend, opt_level)
        .map(|(o, _)| o)
        .map_err(|f| f.message)
}

/// [`check_built`], a failure at opt level > 0 followed by its diagnosis
/// ([`crate::bisect::diagnose`]: does the case pass at opt level 0, and which pass and
/// rule move its output).
pub fn check_built_diagnosed(
    built: &Built,
    want: &[NDArray],
    backend: &ExecBackend,
    opt_level: u8,
) -> Result<Outcome, String> {
    run_case(built, want, backend, opt_level)
        .map(|(o, _)| o)
        .map_err(|f| diagnosed(f, backend, opt_level))
}

fn diagnosed(f: Failure, backend: &ExecBackend, opt_level: u8) -> String {
    match crate::bisect::diagnose(&f.case, backend, opt_level) {
        Some(d) => format!("{}\n{d}", f.message),
        None => f.message,
    }
}

/// Builds `spec` and runs it on `backend` at `opt_level` ([`run_case`]); a spec that
/// builds nothing passes (there is nothing to compare) with no report.
pub fn check_reported(
    spec: &GraphSpec,
    backend: &ExecBackend,
    opt_level: u8,
) -> Result<(Outcome, Option<PassReport>), Failure> {
    let Some(built) = spec.build() else {
        return Ok((Outcome::Pass, None));
    };
    let want = reference(&built.module, &built.inputs).map_err(|message| Failure {
        message,
        case: built.clone(),
    })?;
    run_case(&built, &want, backend, opt_level)
}

/// Builds `spec` and checks it on `backend` at `opt_level`; a spec that builds nothing
/// passes (there is nothing to compare).
pub fn check(spec: &GraphSpec, backend: &ExecBackend, opt_level: u8) -> Result<Outcome, String> {
    check_reported(spec, backend, opt_level)
        .map(|(o, _)| o)
        .map_err(|f| f.message)
}

/// [`check`] with a failure diagnosed as [`check_built_diagnosed`] does: what the suite
/// prints for the case proptest shrank to (bisecting every shrinking step would be slow).
pub fn check_diagnosed(
    spec: &GraphSpec,
    backend: &ExecBackend,
    opt_level: u8,
) -> Result<Outcome, String> {
    check_reported(spec, backend, opt_level)
        .map(|(o, _)| o)
        .map_err(|f| diagnosed(f, backend, opt_level))
}
