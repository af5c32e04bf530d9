//! Building a [`GraphSpec`] into a module: each recipe's op with attributes made legal
//! for its arguments' shapes, weights as bound params, and per value whether it is
//! bit-exact on every backend and whether it may hold NaN/Inf, which decide what later
//! recipes may do with it and the graph's tolerance.

use std::collections::BTreeMap;

use kiln_executor::Params;
use kiln_ir::op::*;
use kiln_ir::{DType, ExprId, Module, NDArray, TensorType, Type};

use super::{
    Built, ELEMENT_BUDGET, Fill, GraphSpec, Kind, Recipe, Weight, fill_values, weight_values,
};
use crate::ops::{ACCUM, ARITH, EXACT, TRANSC, Tol};

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

/// Ops whose result is bit-equal on every backend when their inputs are.
fn exact_op(kind: Kind, dtype: DType) -> bool {
    if !dtype.is_float() {
        return true;
    }
    // Max and min (clip, max pools and max/min reductions among them) are bit-exact:
    // the reference and the loop IR both take IEEE 754-2019 maximum/minimum (-0 < +0,
    // whatever the order of equal elements), and `nn.relu` is `x < 0 ? 0 : x` in both
    // (relu(-0) = -0). Sums, means and products depend on the order of accumulation.
    match kind {
        Kind::Unary(k) => matches!(k, UnaryKind::Relu | UnaryKind::Negative | UnaryKind::Abs),
        // Float modulo: the lowered `x - trunc(x / y) * y` gives +0 where fmod keeps
        // the dividend's -0 (equal values, but a later division tells them apart).
        Kind::Binary(k) => !matches!(
            k,
            BinaryKind::Power | BinaryKind::FloorMod | BinaryKind::TruncMod
        ),
        Kind::Cast | Kind::Where | Kind::Clip => true,
        Kind::Pool(k) | Kind::GlobalPool(k) => k == PoolKind::Max,
        Kind::Reduce(k) => matches!(k, ReduceKind::Max | ReduceKind::Min),
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

/// Ops that define NaN and Inf the same way on every backend (IEEE arithmetic, data
/// movement, and max/min, relu, clip and max reductions, where NaN propagates; not casts
/// to integers or softmax, whose NaN rules differ between implementations, nor max
/// pooling: its padded taps are the lowest finite value, which beats a window of -Inf).
fn nan_defined(kind: Kind) -> bool {
    match kind {
        Kind::Unary(k) => matches!(
            k,
            UnaryKind::Relu
                | UnaryKind::Negative
                | UnaryKind::Abs
                | UnaryKind::Exp
                | UnaryKind::Log
                | UnaryKind::Sqrt
                | UnaryKind::Rsqrt
                | UnaryKind::Sigmoid
        ),
        Kind::Binary(k) => matches!(
            k,
            BinaryKind::Add
                | BinaryKind::Subtract
                | BinaryKind::Multiply
                | BinaryKind::Divide
                | BinaryKind::Maximum
                | BinaryKind::Minimum
        ),
        Kind::Pool(k) => k == PoolKind::Avg,
        Kind::Reduce(k) => k != ReduceKind::Prod,
        Kind::GlobalPool(_) | Kind::Clip => true,
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
        Kind::Cast | Kind::Softmax | Kind::LayerNorm | Kind::BatchNorm => false,
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
                    // Rounding is discontinuous and `exp`/`rsqrt` magnify a difference,
                    // so they take exact values only. (`log` takes any: `sigmoid` is
                    // accurate in its negative tail, so `log(sigmoid(-90))` is finite.)
                    || (matches!(
                        k,
                        UnaryKind::Exp
                            | UnaryKind::Rsqrt
                            | UnaryKind::Floor
                            | UnaryKind::Ceil
                            | UnaryKind::Round
                    ) && !exact_only(&a))
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
                // Modulo divides by a weight of safe divisors (never zero; powers of two
                // for floats, so the lowered fmod is exact): modulo by a computed value
                // would divide by zero (an error for integers) or sit on the float
                // quotient's jumps, where one ulp moves the result by the divisor.
                let modulo = matches!(k, BinaryKind::FloorMod | BinaryKind::TruncMod);
                let rhs = if modulo {
                    let shape = a.ty.shape.last().map(|&d| vec![d]).unwrap_or_default();
                    self.weight_of(Weight::Divisor, shape, a.ty.dtype)
                } else {
                    rhs
                };
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
