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
//! comparison, a float-to-int cast, a divisor, `exp`, `rsqrt`, `power` or `softmax` —
//! take only values computed exactly (bit-equal on every backend, signed zeros included), and NaN/Inf inputs reach only
//! ops that define them, so a mismatch is a bug, not rounding. [`check`] runs one
//! backend at one opt level against the reference interpreter; a failure message holds
//! the module as text IR with the seed, ready to save under `tests/cases/` ([`crate::cases`]).

use std::collections::BTreeMap;

use kiln_executor::Params;
use kiln_ir::op::*;
use kiln_ir::text::{PrintOptions, print_module};
use kiln_ir::{DType, ExprId, ExprKind, Module, NDArray, TensorType, Type};
use proptest::prelude::*;

use crate::ops::{ACCUM, ARITH, EXACT, TRANSC, Tol};
use crate::suite::{ExecBackend, compare_scaled, max_abs};

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

/// A value while the graph is built.
#[derive(Clone, Debug)]
struct Val {
    id: ExprId,
    ty: TensorType,
    /// Bit-equal on every backend (only exact ops from the inputs).
    exact: bool,
    /// May hold NaN or Inf.
    special: bool,
}

/// The builder's state.
struct Builder {
    m: Module,
    dtype: DType,
    params: Vec<ExprId>,
    vals: Vec<Val>,
    used: Vec<bool>,
    inputs: BTreeMap<String, NDArray>,
    bound: Params,
    ops: Vec<(String, DType)>,
    inexact: usize,
    tol: Tol,
    seed: u64,
}

impl GraphSpec {
    /// Builds the module and its inputs; `None` when no recipe built anything.
    pub fn build(&self) -> Option<Built> {
        let mut b = Builder {
            m: Module::new(),
            dtype: self.dtype,
            params: vec![],
            vals: vec![],
            used: vec![],
            inputs: BTreeMap::new(),
            bound: Params::new(),
            ops: vec![],
            inexact: 0,
            tol: EXACT,
            seed: self.seed,
        };
        for (k, (shape, fill)) in self.inputs.iter().enumerate() {
            let t = TensorType::new(shape.clone(), self.dtype);
            let v = fill_values(&t, *fill, self.seed.wrapping_add(k as u64 * 7919));
            let id = b.m.var(format!("x{k}"), Type::Tensor(t.clone()));
            b.params.push(id);
            b.inputs.insert(format!("x{k}"), v);
            b.push(id, t, true, *fill == Fill::Special && self.dtype.is_float());
        }
        let n_inputs = b.vals.len();
        for r in &self.recipes {
            b.recipe(r);
        }
        if b.ops.is_empty() {
            return None;
        }
        let sinks: Vec<ExprId> = (n_inputs..b.vals.len())
            .filter(|&i| !b.used[i])
            .map(|i| b.vals[i].id)
            .collect();
        let body = match sinks[..] {
            [one] => one,
            _ => b.m.tuple(&sinks).ok()?,
        };
        b.m.set_main(&b.params, body).ok()?;
        let scale = 1.0 + b.inexact as f64;
        let fills: Vec<String> = self
            .inputs
            .iter()
            .map(|(_, f)| format!("{f:?}").to_lowercase())
            .collect();
        Some(Built {
            module: b.m,
            inputs: b.inputs,
            bound: b.bound,
            ops: b.ops,
            tol: (b.tol.0 * scale, b.tol.1 * scale),
            header: format!("// kiln-case seed={} fill={}\n", self.seed, fills.join(",")),
        })
    }
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
}

impl Weight {
    /// The parameter-name prefix.
    pub fn prefix(self) -> &'static str {
        match self {
            Weight::Plain => "w",
            Weight::Positive => "wpos",
            Weight::Index => "widx",
        }
    }

    /// The kind and number of a weight parameter called `name`, if it is one.
    pub fn parse(name: &str) -> Option<(Weight, usize)> {
        [Weight::Index, Weight::Positive, Weight::Plain]
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

/// Ops whose result is bit-equal on every backend when their inputs are.
fn exact_op(kind: Kind, dtype: DType) -> bool {
    if !dtype.is_float() {
        return true;
    }
    // Max and min (relu and clip among them) may pick either zero of `max(-0, +0)`
    // (IEEE leaves it open): equal values, but `rsqrt` or a division tells them apart.
    match kind {
        Kind::Unary(k) => matches!(k, UnaryKind::Negative | UnaryKind::Abs),
        Kind::Binary(k) => !matches!(
            k,
            BinaryKind::Power | BinaryKind::Maximum | BinaryKind::Minimum
        ),
        Kind::Cast | Kind::Where => true,
        Kind::Clip | Kind::Pool(_) | Kind::GlobalPool(_) | Kind::Reduce(_) => false,
        Kind::Reshape
        | Kind::Transpose
        | Kind::ExpandDims
        | Kind::Squeeze
        | Kind::Concat
        | Kind::Split
        | Kind::StridedSlice
        | Kind::BatchFlatten
        | Kind::Take => true,
        Kind::Conv2d
        | Kind::Dense
        | Kind::BatchMatmul
        | Kind::BiasAdd
        | Kind::Softmax
        | Kind::LayerNorm
        | Kind::BatchNorm => false,
    }
}

/// Ops that define NaN and Inf the same way on every backend (IEEE arithmetic and data
/// movement; not max/min, clip, relu, casts to integers or softmax, whose NaN rules
/// differ between implementations).
fn nan_defined(kind: Kind) -> bool {
    match kind {
        Kind::Unary(k) => matches!(
            k,
            UnaryKind::Negative
                | UnaryKind::Abs
                | UnaryKind::Exp
                | UnaryKind::Log
                | UnaryKind::Sqrt
                | UnaryKind::Rsqrt
                | UnaryKind::Sigmoid
        ),
        Kind::Binary(k) => matches!(
            k,
            BinaryKind::Add | BinaryKind::Subtract | BinaryKind::Multiply | BinaryKind::Divide
        ),
        Kind::Pool(k) | Kind::GlobalPool(k) => k == PoolKind::Avg,
        Kind::Reduce(k) => matches!(k, ReduceKind::Sum | ReduceKind::Mean),
        Kind::Where
        | Kind::Conv2d
        | Kind::Dense
        | Kind::BatchMatmul
        | Kind::BiasAdd
        | Kind::Reshape
        | Kind::Transpose
        | Kind::ExpandDims
        | Kind::Squeeze
        | Kind::Concat
        | Kind::Split
        | Kind::StridedSlice
        | Kind::BatchFlatten
        | Kind::Take => true,
        Kind::Clip | Kind::Cast | Kind::Softmax | Kind::LayerNorm | Kind::BatchNorm => false,
    }
}

/// Ops that may make NaN or Inf from finite inputs (a negative logarithm, `0 / 0`,
/// overflow of `exp`, ...).
fn makes_special(kind: Kind) -> bool {
    matches!(
        kind,
        Kind::Unary(UnaryKind::Exp | UnaryKind::Log | UnaryKind::Sqrt | UnaryKind::Rsqrt)
            | Kind::Binary(BinaryKind::Divide | BinaryKind::Power)
    )
}

/// The tolerance of one op in a float graph.
fn op_tol(kind: Kind) -> Tol {
    match kind {
        Kind::Unary(UnaryKind::Relu | UnaryKind::Negative | UnaryKind::Abs) => EXACT,
        Kind::Unary(_) | Kind::Binary(BinaryKind::Power) | Kind::Softmax => TRANSC,
        Kind::Conv2d
        | Kind::Dense
        | Kind::BatchMatmul
        | Kind::Pool(PoolKind::Avg)
        | Kind::GlobalPool(PoolKind::Avg)
        | Kind::Reduce(ReduceKind::Sum | ReduceKind::Mean)
        | Kind::LayerNorm
        | Kind::BatchNorm => ACCUM,
        _ => ARITH,
    }
}

fn perm(r: usize, mut code: usize) -> Vec<i64> {
    let mut p: Vec<i64> = (0..r as i64).collect();
    for i in (1..r).rev() {
        p.swap(i, code % (i + 1));
        code /= i + 1;
    }
    p
}

impl Builder {
    fn push(&mut self, id: ExprId, ty: TensorType, exact: bool, special: bool) {
        self.vals.push(Val {
            id,
            ty,
            exact,
            special,
        });
        self.used.push(false);
    }

    /// A weight input of `shape` in the graph's dtype, bound at build time.
    fn weight(&mut self, shape: Vec<usize>) -> Val {
        self.weight_of(Weight::Plain, shape, self.dtype)
    }

    /// A weight of `kind`, `shape` and `dtype`, bound at build time.
    fn weight_of(&mut self, kind: Weight, shape: Vec<usize>, dtype: DType) -> Val {
        let k = self.bound.len();
        let t = TensorType::new(shape, dtype);
        let v = weight_values(kind, k, &t, self.seed);
        let name = format!("{}{k}", kind.prefix());
        let id = self.m.var(name.clone(), Type::Tensor(t.clone()));
        self.params.push(id);
        self.inputs.insert(name.clone(), v.clone());
        self.bound.insert(name, v);
        Val {
            id,
            ty: t,
            exact: true,
            special: false,
        }
    }

    /// Drops the weights made after the first `params` parameters (a recipe that built
    /// nothing).
    fn rollback(&mut self, params: usize) {
        for id in self.params.split_off(params) {
            if let Some(name) = self.m.var_name(id).map(str::to_string) {
                self.inputs.remove(&name);
                self.bound.remove(&name);
            }
        }
    }

    fn recipe(&mut self, r: &Recipe) {
        let before = self.params.len();
        if !self.try_recipe(r) {
            self.rollback(before);
        }
    }

    /// Builds `r`; false when it built nothing.
    fn try_recipe(&mut self, r: &Recipe) -> bool {
        let n = self.vals.len();
        let picks: Vec<usize> = r.args.iter().map(|a| a % n).collect();
        let [a, b, c] = [0, 1, 2].map(|i| self.vals[picks[i]].clone());
        let p = r.p;
        let s = a.ty.shape.clone();
        let rank = s.len();
        let exact_only = |v: &Val| !v.ty.dtype.is_float() || v.exact;
        let needs_axis = matches!(
            r.kind,
            Kind::Dense
                | Kind::BiasAdd
                | Kind::Reduce(_)
                | Kind::Softmax
                | Kind::Concat
                | Kind::Split
                | Kind::StridedSlice
                | Kind::LayerNorm
                | Kind::BatchNorm
        );
        if rank == 0 && needs_axis {
            return false;
        }
        // The arguments the op reads (value index or a fresh weight) and the op.
        let mut args: Vec<Val> = vec![a.clone()];
        let op: Op = match r.kind {
            Kind::Unary(k) => {
                if a.ty.dtype == DType::Bool
                    || (!a.ty.dtype.is_float()
                        && !matches!(k, UnaryKind::Relu | UnaryKind::Negative | UnaryKind::Abs))
                    || (matches!(k, UnaryKind::Exp | UnaryKind::Rsqrt) && !exact_only(&a))
                {
                    return false;
                }
                Unary::new(k).into()
            }
            Kind::Binary(k) => {
                let cmp = matches!(
                    k,
                    BinaryKind::Equal
                        | BinaryKind::NotEqual
                        | BinaryKind::Less
                        | BinaryKind::LessEqual
                        | BinaryKind::Greater
                        | BinaryKind::GreaterEqual
                );
                let rhs = if broadcastable(&a.ty.shape, &b.ty.shape) && a.ty.dtype == b.ty.dtype {
                    b.clone()
                } else {
                    a.clone()
                };
                let df = a.ty.dtype.is_float();
                if a.ty.dtype == DType::Bool
                    || (matches!(k, BinaryKind::Divide | BinaryKind::Power) && !df)
                    || (cmp && df && !(a.exact && rhs.exact))
                    || (k == BinaryKind::Divide && df && !rhs.exact)
                    || (k == BinaryKind::Power && df && !(a.exact && rhs.exact))
                {
                    return false;
                }
                args.push(rhs);
                Binary::new(k).into()
            }
            Kind::Clip => {
                if a.ty.dtype == DType::Bool {
                    return false;
                }
                let lo = -((p[0] % 4) as f64) - 0.5;
                Clip::new(lo, lo + 1.0 + (p[1] % 4) as f64).into()
            }
            Kind::Cast => {
                let to = match a.ty.dtype {
                    DType::F32 => DType::I32,
                    _ => DType::F32,
                };
                if a.ty.dtype.is_float() && !a.exact {
                    return false;
                }
                Cast::new(to).into()
            }
            Kind::Where => {
                // A condition of `bool` and two values of the graph's dtype.
                let cond = self.vals.iter().rev().find(|v| v.ty.dtype == DType::Bool);
                let Some(cond) = cond.cloned() else {
                    return false;
                };
                if a.ty.dtype == DType::Bool {
                    return false;
                }
                let other = if b.ty.dtype == a.ty.dtype {
                    b.clone()
                } else {
                    a.clone()
                };
                args = vec![cond, a.clone(), other];
                Where.into()
            }
            Kind::Conv2d => {
                if rank != 4 || a.ty.dtype == DType::Bool {
                    return false;
                }
                let ch = s[1];
                let divisors: Vec<usize> = (1..=ch).filter(|g| ch.is_multiple_of(*g)).collect();
                let g = divisors[p[0] % divisors.len()];
                let o = g * (1 + p[1] % 2);
                let kh = 1 + p[2] % 3.min(s[2] + 1);
                let kw = 1 + p[3] % 3.min(s[3] + 1);
                let pad = p[0] % 2;
                let stride = 1 + p[1] % 2;
                let w = self.weight(vec![o, ch / g, kh, kw]);
                args.push(w);
                Conv2d {
                    strides: [stride, 1 + p[2] % 2],
                    padding: [pad, p[3] % 2, pad, 0],
                    dilation: [1, 1 + p[3] % 2],
                    groups: g,
                    channels: None,
                    kernel_size: None,
                }
                .into()
            }
            Kind::Dense => {
                if a.ty.dtype == DType::Bool {
                    return false;
                }
                let w = self.weight(vec![1 + p[0] % 8, s[rank - 1]]);
                args.push(w);
                Dense { units: None }.into()
            }
            Kind::BatchMatmul => {
                if rank != 3 || a.ty.dtype == DType::Bool {
                    return false;
                }
                let tb = p[1].is_multiple_of(2);
                let n = 1 + p[0] % 6;
                let w = self.weight(if tb {
                    vec![s[0], n, s[2]]
                } else {
                    vec![s[0], s[2], n]
                });
                args.push(w);
                BatchMatmul {
                    transpose_a: false,
                    transpose_b: tb,
                }
                .into()
            }
            Kind::BiasAdd => {
                if a.ty.dtype == DType::Bool {
                    return false;
                }
                let axis = p[0] % rank;
                let w = self.weight(vec![s[axis]]);
                args.push(w);
                BiasAdd { axis: axis as i64 }.into()
            }
            Kind::Pool(kind) => {
                if rank != 4 || (kind == PoolKind::Avg && !a.ty.dtype.is_float()) {
                    return false;
                }
                let k = [1 + p[0] % 3, 1 + p[1] % 3];
                let pad = [p[2] % 2, 0, p[2] % 2, p[3] % 2];
                Pool2d {
                    kind,
                    pool_size: k,
                    strides: [1 + p[3] % 2, 1 + p[1] % 2],
                    dilation: [1, 1],
                    padding: [
                        pad[0].min(k[0] - 1),
                        0,
                        pad[2].min(k[0] - 1),
                        pad[3].min(k[1] - 1),
                    ],
                    // A max-pool window past the data yields the dtype's lowest value,
                    // whose sums overflow in f32 but not in the reference's f64.
                    ceil_mode: kind == PoolKind::Avg && p[0] % 2 == 1,
                    count_include_pad: kind == PoolKind::Avg && p[2].is_multiple_of(3),
                }
                .into()
            }
            Kind::GlobalPool(kind) => {
                if rank != 4 || (kind == PoolKind::Avg && !a.ty.dtype.is_float()) {
                    return false;
                }
                GlobalPool2d { kind }.into()
            }
            Kind::Reduce(kind) => {
                if a.ty.dtype == DType::Bool || (kind == ReduceKind::Mean && !a.ty.dtype.is_float())
                {
                    return false;
                }
                Reduce {
                    kind,
                    axis: (!p[0].is_multiple_of(3)).then(|| vec![(p[1] % rank) as i64]),
                    keepdims: p[2].is_multiple_of(2),
                    exclude: false,
                }
                .into()
            }
            Kind::Softmax => {
                if !a.ty.dtype.is_float() || !a.exact {
                    return false;
                }
                Softmax {
                    axis: if p[0].is_multiple_of(2) {
                        -1
                    } else {
                        (p[1] % rank) as i64
                    },
                }
                .into()
            }
            Kind::Reshape => {
                let numel: usize = s.iter().product();
                let ds: Vec<usize> = (1..=numel).filter(|d| numel.is_multiple_of(*d)).collect();
                let d = ds[p[0] % ds.len()] as i64;
                Reshape::new(match p[1] % 3 {
                    0 => vec![-1],
                    1 => vec![d, -1],
                    _ => vec![1, -1, d],
                })
                .into()
            }
            Kind::Transpose => Transpose::new(Some(perm(rank, p[0] * 16 + p[1]))).into(),
            Kind::ExpandDims => ExpandDims {
                axis: (p[0] % (rank + 1)) as i64,
                num_newaxis: 1,
            }
            .into(),
            Kind::Squeeze => Squeeze::new(None).into(),
            Kind::Concat => {
                let axis = p[0] % rank;
                let fits = |v: &Val| {
                    v.ty.dtype == a.ty.dtype
                        && v.ty.shape.len() == rank
                        && (0..rank).all(|i| i == axis || v.ty.shape[i] == s[i])
                };
                args = [a.clone(), b.clone(), c.clone()]
                    .into_iter()
                    .filter(fits)
                    .collect();
                Concatenate::new(axis as i64).into()
            }
            Kind::Split => {
                let axis = p[0] % rank;
                let d = s[axis];
                if d < 2 {
                    return false;
                }
                if p[1].is_multiple_of(2) {
                    let ds: Vec<usize> = (2..=d).filter(|k| d.is_multiple_of(*k)).collect();
                    Split::sections(ds[p[2] % ds.len()], axis as i64).into()
                } else {
                    Split::indices(vec![(1 + p[2] % (d - 1)) as i64], axis as i64).into()
                }
            }
            Kind::BatchFlatten => BatchFlatten.into(),
            Kind::LayerNorm | Kind::BatchNorm => {
                // Normalising values computed inexactly may divide by a tiny variance.
                if !a.ty.dtype.is_float() || !a.exact {
                    return false;
                }
                let axis = p[0] % rank;
                let v = vec![s[axis]];
                let (center, scale) = (p[1].is_multiple_of(2), p[2].is_multiple_of(2));
                let epsilon = kiln_ir::attrs::F64([1e-5, 1e-3, 1e-1][p[3] % 3]);
                let gamma = self.weight(v.clone());
                let beta = self.weight(v.clone());
                args.extend([gamma, beta]);
                if r.kind == Kind::LayerNorm {
                    LayerNorm {
                        axis: axis as i64,
                        epsilon,
                        center,
                        scale,
                    }
                    .into()
                } else {
                    let mean = self.weight(v.clone());
                    let var = self.weight_of(Weight::Positive, v, a.ty.dtype);
                    args.extend([mean, var]);
                    BatchNorm {
                        axis: axis as i64,
                        epsilon,
                        center,
                        scale,
                    }
                    .into()
                }
            }
            Kind::Take => {
                let ishape: Vec<usize> = match p[0] % 3 {
                    0 => vec![],
                    1 => vec![1 + p[1] % 4],
                    _ => vec![1 + p[1] % 3, 1 + p[2] % 3],
                };
                let it = if p[3].is_multiple_of(2) {
                    DType::I32
                } else {
                    DType::I64
                };
                let idx = self.weight_of(Weight::Index, ishape, it);
                args.push(idx);
                Take {
                    axis: (!p[2].is_multiple_of(3)).then(|| (p[1] % rank.max(1)) as i64),
                    mode: if p[3].is_multiple_of(3) {
                        TakeMode::Wrap
                    } else {
                        TakeMode::Clip
                    },
                }
                .into()
            }
            Kind::StridedSlice => {
                let axis = p[0] % rank;
                let d = s[axis] as i64;
                let begin = (p[1] as i64) % d;
                let (end, stride) = match p[3] % 3 {
                    0 => (begin + 1 + (p[2] as i64) % (d - begin), 1),
                    1 => (d, 2),
                    _ => (-(d + 1), -1),
                };
                StridedSlice {
                    begin: vec![begin],
                    end: vec![end],
                    strides: Some(vec![stride]),
                    axes: Some(vec![axis as i64]),
                }
                .into()
            }
        };
        if args.iter().any(|v| v.special) && !nan_defined(r.kind) {
            return false;
        }
        let ids: Vec<ExprId> = args.iter().map(|v| v.id).collect();
        let call = if r.kind == Kind::Concat {
            let Ok(t) = self.m.tuple(&ids) else {
                return false;
            };
            self.m.call(op.clone(), &[t])
        } else {
            self.m.call(op.clone(), &ids)
        };
        let Ok(call) = call else { return false };
        let outs: Vec<TensorType> = match self.m.ty(call) {
            Type::Tensor(t) => vec![t.clone()],
            Type::Tuple(fs) => fs.iter().filter_map(|f| f.as_tensor().cloned()).collect(),
            _ => return false,
        };
        if outs.iter().any(|t| {
            let n: usize = t.shape.iter().product();
            n == 0 || n > ELEMENT_BUDGET
        }) {
            return false;
        }
        let exact = exact_op(r.kind, a.ty.dtype) && args.iter().all(|v| v.exact);
        let special = args.iter().any(|v| v.special) || makes_special(r.kind);
        for v in &args {
            if let Some(i) = self.vals.iter().position(|x| x.id == v.id) {
                self.used[i] = true;
            }
        }
        self.ops.push((op.name().to_string(), a.ty.dtype));
        if !exact_op(r.kind, a.ty.dtype) {
            self.inexact += 1;
            let t = op_tol(r.kind);
            self.tol = (self.tol.0.max(t.0), self.tol.1.max(t.1));
        }
        if outs.len() == 1 && matches!(self.m.ty(call), Type::Tensor(_)) {
            self.push(call, outs[0].clone(), exact, special);
        } else {
            for (i, t) in outs.into_iter().enumerate() {
                let Ok(g) = self.m.tuple_get(call, i) else {
                    return false;
                };
                self.push(g, t, exact, special);
            }
        }
        true
    }
}

/// Whether numpy broadcasting accepts shapes `a` and `b`.
fn broadcastable(a: &[usize], b: &[usize]) -> bool {
    a.iter()
        .rev()
        .zip(b.iter().rev())
        .all(|(&x, &y)| x == y || x == 1 || y == 1)
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

/// Runs `built` on `backend` at `opt_level` and compares with `want` (the reference's
/// outputs). The error holds the case as text IR: when the program has several outputs
/// and the first wrong one also fails on its own, only that output and the ops it reads
/// (a smaller case than proptest's shrinking alone reaches).
pub fn check_built(
    built: &Built,
    want: &[NDArray],
    backend: &ExecBackend,
    opt_level: u8,
) -> Result<Outcome, String> {
    if let Some((op, d)) = backend.unsupported_in(&built.ops) {
        return Ok(Outcome::Unsupported(op, d));
    }
    // The error, and the first output that is wrong on its own.
    let run = |b: &Built, want: &[NDArray]| -> Result<(), (String, Option<usize>)> {
        let got = backend
            .run(&b.module, &b.inputs, &b.bound, opt_level)
            .map_err(|e| (e, None))?;
        let scale = b.inputs.values().map(max_abs).fold(0.0, f64::max);
        compare_scaled(&got, want, b.tol, scale).map_err(|e| {
            let n = want.len().min(got.len());
            let k =
                (0..n).find(|&i| compare_scaled(&got[i..=i], &want[i..=i], b.tol, scale).is_err());
            (e, k)
        })
    };
    let report = |b: &Built, e: String| {
        format!(
            "{} at opt level {opt_level}: {e}\ncase ({} ops; save as \
             testsuite/tests/cases/NAME.relay to replay):\n{}",
            backend.name,
            b.ops.len(),
            case_text(b)
        )
    };
    match run(built, want) {
        Ok(()) => Ok(Outcome::Pass),
        Err((e, Some(k))) => {
            if let Some(small) = built.only_output(k)
                && let Err((e, _)) = run(&small, &want[k..=k])
            {
                return Err(report(&small, e));
            }
            Err(report(built, e))
        }
        Err((e, None)) => Err(report(built, e)),
    }
}

/// Builds `spec` and checks it on `backend` at `opt_level`; a spec that builds nothing
/// passes (there is nothing to compare).
pub fn check(spec: &GraphSpec, backend: &ExecBackend, opt_level: u8) -> Result<Outcome, String> {
    let Some(built) = spec.build() else {
        return Ok(Outcome::Pass);
    };
    let want = reference(&built.module, &built.inputs)?;
    check_built(&built, &want, backend, opt_level)
}
