//! Reductions over axes: `sum`, `mean`, `max`, `min`, `prod`, with `keepdims` and
//! `exclude`.
//!
//! Each op's attributes, type rule and reference evaluation live here. Floats
//! accumulate in `f64` in row-major order and round once; integers accumulate in `i64`
//! and wrap to their width at the end.

use crate::attrs::{AttrReader, AttrWriter};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::tensor::{Data, NDArray, row_major_strides};
use crate::ty::{TensorType, Type};
use crate::value::Value;

use super::elemwise::{fmaximum, fminimum};
use super::util::{self, expect_arity, expect_float, tensor_arg};
use super::{Op, OpPattern, OpSpec};

/// Names of the ops in this family.
pub const NAMES: &[&str] = &["sum", "mean", "max", "min", "prod"];

/// Which reduction a [`Reduce`] computes.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ReduceKind {
    /// The sum; an empty reduction gives 0.
    Sum,
    /// The sum divided by the number of elements reduced.
    Mean,
    /// The largest element (IEEE 754-2019 `maximum`: NaN propagates).
    Max,
    /// The smallest element (IEEE 754-2019 `minimum`: NaN propagates).
    Min,
    /// The product; an empty reduction gives 1.
    Prod,
}

/// A reduction over `axis` (all axes when `None`); with `exclude`, over every axis
/// *not* listed.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Reduce {
    /// What the reduction computes.
    pub kind: ReduceKind,
    /// The axes (negative counts from the end); `None` is every axis.
    pub axis: Option<Vec<i64>>,
    /// Keep reduced axes as size 1 instead of dropping them.
    pub keepdims: bool,
    /// Reduce over the axes *not* in `axis`.
    pub exclude: bool,
}

impl ReduceKind {
    /// Every reduction kind, in declaration order.
    pub const ALL: [ReduceKind; 5] = [
        ReduceKind::Sum,
        ReduceKind::Mean,
        ReduceKind::Max,
        ReduceKind::Min,
        ReduceKind::Prod,
    ];

    /// The op name in the text form.
    pub fn name(self) -> &'static str {
        match self {
            ReduceKind::Sum => "sum",
            ReduceKind::Mean => "mean",
            ReduceKind::Max => "max",
            ReduceKind::Min => "min",
            ReduceKind::Prod => "prod",
        }
    }

    /// The kind whose op name is `name`.
    pub fn from_name(name: &str) -> Option<ReduceKind> {
        ReduceKind::ALL.into_iter().find(|k| k.name() == name)
    }
}

impl Reduce {
    /// A reduction of `kind` over every axis, without `keepdims` or `exclude`.
    pub fn all(kind: ReduceKind) -> Reduce {
        Reduce {
            kind,
            axis: None,
            keepdims: false,
            exclude: false,
        }
    }

    /// A reduction of `kind` over `axis` (negative axes count from the end).
    pub fn over(kind: ReduceKind, axis: impl Into<Vec<i64>>, keepdims: bool) -> Reduce {
        Reduce {
            kind,
            axis: Some(axis.into()),
            keepdims,
            exclude: false,
        }
    }

    /// For each dimension of `data`, whether it is reduced. `axis = None` reduces every
    /// axis (and ignores `exclude`, as TVM does); otherwise the listed axes, or with
    /// `exclude` every axis not listed. Out-of-range and repeated axes are errors.
    pub fn reduced_axes(&self, data: &TensorType) -> Result<Vec<bool>> {
        let op = self.name();
        let rank = data.rank();
        let Some(axes) = &self.axis else {
            return Ok(vec![true; rank]);
        };
        let mut mask = vec![false; rank];
        for &a in axes {
            let r = rank as i64;
            if a < -r || a >= r {
                return Err(Error::ty(
                    op,
                    format!("axis {a} is out of range for argument 0 (data) {data} of rank {rank}"),
                ));
            }
            let d = (if a < 0 { a + r } else { a }) as usize;
            if mask[d] {
                return Err(Error::ty(
                    op,
                    format!("axis={axes:?} names dimension {d} of argument 0 (data) {data} twice"),
                ));
            }
            mask[d] = true;
        }
        if self.exclude {
            mask.iter_mut().for_each(|m| *m = !*m);
        }
        Ok(mask)
    }
}

impl OpSpec for Reduce {
    fn pattern(&self) -> OpPattern {
        OpPattern::CommReduce
    }

    fn name(&self) -> &str {
        self.kind.name()
    }

    fn infer_type(&self, args: &[Type]) -> Result<Type> {
        let op = self.name();
        expect_arity(op, args, 1)?;
        let t = tensor_arg(op, args, 0, "data")?;
        if self.kind == ReduceKind::Mean {
            expect_float(op, t, "argument 0 (data)")?;
        } else if t.dtype.is_bool() {
            return Err(Error::ty(
                op,
                format!("argument 0 (data) must be a numeric (float or integer) tensor, got {t}"),
            ));
        }
        let mask = self.reduced_axes(t)?;
        let empty_axis = (0..t.rank()).find(|&d| mask[d] && t.shape[d] == 0);
        if let (ReduceKind::Max | ReduceKind::Min, Some(d)) = (self.kind, empty_axis) {
            return Err(Error::ty(
                op,
                format!("cannot take the {op} over axis {d} of extent 0 in argument 0 (data) {t}"),
            ));
        }
        let shape: Vec<usize> = if self.keepdims {
            t.shape
                .iter()
                .zip(&mask)
                .map(|(&n, &r)| if r { 1 } else { n })
                .collect()
        } else {
            t.shape
                .iter()
                .zip(&mask)
                .filter(|(_, r)| !**r)
                .map(|(&n, _)| n)
                .collect()
        };
        Ok(Type::tensor(shape, t.dtype))
    }

    fn eval(&self, args: &[Value], out: &Type) -> Result<Value> {
        let x = util::tensors(self.name(), args)?[0];
        let out_ty = out.as_tensor().ok_or_else(|| {
            Error::Eval(format!(
                "{}: expected a tensor result type, got {out}",
                self.name()
            ))
        })?;
        let mask = self.reduced_axes(&x.ty())?;
        let targets = output_positions(x.shape(), &mask);
        let n_out = out_ty.numel();
        let count: usize = x
            .shape()
            .iter()
            .zip(&mask)
            .filter(|(_, r)| **r)
            .map(|(&n, _)| n)
            .product();
        let dtype = x.dtype();
        let data = if dtype.is_float() {
            let v = x.to_f64_vec();
            let acc = match self.kind {
                ReduceKind::Sum | ReduceKind::Mean => {
                    let mut acc = vec![0.0; n_out];
                    targets.iter().zip(&v).for_each(|(&o, &x)| acc[o] += x);
                    if self.kind == ReduceKind::Mean {
                        // An empty reduction gives 0 / 0 = NaN, as numpy does.
                        acc.iter_mut().for_each(|s| *s /= count as f64);
                    }
                    acc
                }
                // IEEE 754-2019 maximum/minimum: NaN wins (once an accumulator is NaN it
                // stays NaN) and `-0 < +0`, whatever the order of the elements.
                ReduceKind::Max => {
                    let mut acc = vec![f64::NEG_INFINITY; n_out];
                    for (&o, &x) in targets.iter().zip(&v) {
                        acc[o] = fmaximum(acc[o], x);
                    }
                    acc
                }
                ReduceKind::Min => {
                    let mut acc = vec![f64::INFINITY; n_out];
                    for (&o, &x) in targets.iter().zip(&v) {
                        acc[o] = fminimum(acc[o], x);
                    }
                    acc
                }
                ReduceKind::Prod => {
                    let mut acc = vec![1.0; n_out];
                    targets.iter().zip(&v).for_each(|(&o, &x)| acc[o] *= x);
                    acc
                }
            };
            Data::from_f64(dtype, acc)
        } else {
            let v = x.to_i64_vec();
            let (init, step): (i64, fn(i64, i64) -> i64) = match self.kind {
                ReduceKind::Sum => (0, i64::wrapping_add),
                // uint64, held as its bit pattern, orders unsigned.
                ReduceKind::Max if dtype == DType::U64 => {
                    (0, |a, b| (a as u64).max(b as u64) as i64)
                }
                ReduceKind::Min if dtype == DType::U64 => {
                    (-1, |a, b| (a as u64).min(b as u64) as i64)
                }
                ReduceKind::Max => (i64::MIN, i64::max),
                ReduceKind::Min => (i64::MAX, i64::min),
                ReduceKind::Prod => (1, i64::wrapping_mul),
                ReduceKind::Mean => {
                    return Err(Error::Eval(format!("mean: not defined on {dtype}")));
                }
            };
            let mut acc = vec![init; n_out];
            targets
                .iter()
                .zip(&v)
                .for_each(|(&o, &x)| acc[o] = step(acc[o], x));
            Data::from_i64(dtype, acc)
        };
        Ok(NDArray::new(out_ty.shape.clone(), data)?.into())
    }

    fn write_attrs(&self, w: &mut AttrWriter) {
        if let Some(axis) = &self.axis {
            w.ints("axis", axis);
        }
        if self.keepdims {
            w.bool("keepdims", true);
        }
        if self.exclude {
            w.bool("exclude", true);
        }
    }
}

/// For each element of a row-major tensor of `shape`, the flat index of the output
/// element it reduces into, where `reduced[d]` says whether dimension `d` is reduced
/// (the kept dimensions, in order, form the row-major output).
fn output_positions(shape: &[usize], reduced: &[bool]) -> Vec<usize> {
    let kept: Vec<usize> = shape
        .iter()
        .zip(reduced)
        .filter(|(_, r)| !**r)
        .map(|(&n, _)| n)
        .collect();
    let kept_strides = row_major_strides(&kept);
    // Output stride of each input dimension: 0 for reduced ones.
    let mut step = vec![0; shape.len()];
    let mut k = 0;
    for d in 0..shape.len() {
        if !reduced[d] {
            step[d] = kept_strides[k];
            k += 1;
        }
    }
    let n: usize = shape.iter().product();
    let mut out = Vec::with_capacity(n);
    let mut idx = vec![0; shape.len()];
    let mut o = 0;
    for _ in 0..n {
        out.push(o);
        for d in (0..shape.len()).rev() {
            idx[d] += 1;
            o += step[d];
            if idx[d] < shape[d] {
                break;
            }
            o -= step[d] * shape[d];
            idx[d] = 0;
        }
    }
    out
}

/// Parses an op of this family from its name and attributes.
pub(super) fn parse(name: &str, r: &mut AttrReader) -> Option<Result<Op>> {
    let kind = ReduceKind::from_name(name)?;
    Some(parse_reduce(kind, r))
}

fn parse_reduce(kind: ReduceKind, r: &mut AttrReader) -> Result<Op> {
    let axis = r.ints("axis")?;
    let axes = axis.as_deref().unwrap_or_default();
    if let Some(a) = (0..axes.len()).find_map(|i| axes[..i].contains(&axes[i]).then_some(axes[i])) {
        return Err(r.error("axis", format!("axis {a} is listed twice in {axes:?}")));
    }
    Ok(Reduce {
        kind,
        axis,
        keepdims: r.bool("keepdims")?.unwrap_or(false),
        exclude: r.bool("exclude")?.unwrap_or(false),
    }
    .into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attrs::AttrValue;
    use crate::dtype::DType;
    use proptest::prelude::*;

    fn run(op: Reduce, x: &NDArray) -> Result<NDArray> {
        let out = op.infer_type(&[Type::Tensor(x.ty())])?;
        let y = op
            .eval(&[Value::from(x.clone())], &out)?
            .into_tensor("result")?;
        assert_eq!(
            Type::Tensor(y.ty()),
            out,
            "value type differs from the type rule"
        );
        Ok(y)
    }

    fn reduce(kind: ReduceKind, axis: Option<&[i64]>, keepdims: bool, exclude: bool) -> Reduce {
        Reduce {
            kind,
            axis: axis.map(<[i64]>::to_vec),
            keepdims,
            exclude,
        }
    }

    fn type_error(op: Reduce, t: Type) -> String {
        match op.infer_type(&[t]) {
            Err(e @ Error::Type { .. }) => e.to_string(),
            other => panic!("expected a type error, got {other:?}"),
        }
    }

    #[test]
    fn reduce_type_rule() {
        use ReduceKind::*;
        let t = Type::tensor([2, 3, 4], DType::F32);
        let ty = |op: Reduce| op.infer_type(std::slice::from_ref(&t)).unwrap();
        for kind in ReduceKind::ALL {
            assert_eq!(
                ty(reduce(kind, Some(&[1]), false, false)),
                Type::tensor([2, 4], DType::F32)
            );
            assert_eq!(
                ty(reduce(kind, Some(&[1]), true, false)),
                Type::tensor([2, 1, 4], DType::F32)
            );
            assert_eq!(
                ty(reduce(kind, Some(&[1]), false, true)),
                Type::tensor([3], DType::F32)
            );
            assert_eq!(
                ty(reduce(kind, Some(&[-1, 0]), false, false)),
                Type::tensor([3], DType::F32)
            );
            assert_eq!(ty(reduce(kind, Some(&[]), false, false)), t);
            assert_eq!(
                ty(reduce(kind, None, false, false)),
                Type::tensor([], DType::F32)
            );
            assert_eq!(
                ty(reduce(kind, None, true, false)),
                Type::tensor([1, 1, 1], DType::F32)
            );
            // axis=None reduces everything, with or without exclude.
            assert_eq!(
                ty(reduce(kind, None, false, true)),
                Type::tensor([], DType::F32)
            );
            let scalar = Type::tensor([], DType::F32);
            assert_eq!(
                reduce(kind, None, false, false)
                    .infer_type(std::slice::from_ref(&scalar))
                    .unwrap(),
                scalar
            );

            let e = type_error(reduce(kind, Some(&[1, -2]), false, false), t.clone());
            assert!(e.contains(&format!("`{}`", kind.name())), "{e}");
            assert!(e.contains("axis=[1, -2] names dimension 1 of argument 0 (data) Tensor[(2, 3, 4), float32] twice"), "{e}");
            let e = type_error(reduce(kind, Some(&[3]), false, false), t.clone());
            assert!(e.contains("axis 3 is out of range for argument 0 (data) Tensor[(2, 3, 4), float32] of rank 3"), "{e}");
            let e = type_error(
                reduce(kind, None, false, false),
                Type::tensor([2], DType::Bool),
            );
            assert!(
                e.contains("argument 0 (data)") && e.contains("Tensor[(2), bool]"),
                "{e}"
            );
            assert!(reduce(kind, None, false, false).infer_type(&[]).is_err());
        }
        // mean is float-only; the others take integers.
        let ints = Type::tensor([2, 3], DType::I32);
        let e = type_error(reduce(Mean, None, false, false), ints.clone());
        assert!(
            e.contains(
                "`mean`: argument 0 (data) must be a float tensor, got Tensor[(2, 3), int32]"
            ),
            "{e}"
        );
        for kind in [Sum, Max, Min] {
            let got =
                reduce(kind, Some(&[0]), false, false).infer_type(std::slice::from_ref(&ints));
            assert_eq!(got.unwrap(), Type::tensor([3], DType::I32));
        }
        // max/min over an empty axis have no value; sum/mean do (0 and NaN).
        let empty = Type::tensor([2, 0, 3], DType::F32);
        for kind in [Max, Min] {
            let e = type_error(reduce(kind, Some(&[1]), false, false), empty.clone());
            assert!(
                e.contains(&format!(
                    "cannot take the {} over axis 1 of extent 0",
                    kind.name()
                )),
                "{e}"
            );
            assert!(e.contains("Tensor[(2, 0, 3), float32]"), "{e}");
            let ok =
                reduce(kind, Some(&[0]), false, false).infer_type(std::slice::from_ref(&empty));
            assert_eq!(ok.unwrap(), Type::tensor([0, 3], DType::F32));
        }
        assert_eq!(
            reduce(Sum, Some(&[1]), false, false)
                .infer_type(&[empty])
                .unwrap(),
            Type::tensor([2, 3], DType::F32)
        );
    }

    #[test]
    fn reduce_hand_values() {
        use ReduceKind::*;
        let x = NDArray::from_vec([2, 3], vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
        let v = |op: Reduce| run(op, &x).unwrap().to_vec::<f32>().unwrap();
        assert_eq!(
            v(reduce(Sum, Some(&[0]), false, false)),
            vec![5.0, 7.0, 9.0]
        );
        assert_eq!(v(reduce(Sum, Some(&[1]), false, false)), vec![6.0, 15.0]);
        assert_eq!(v(reduce(Sum, None, false, false)), vec![21.0]);
        assert_eq!(v(reduce(Mean, Some(&[-1]), false, false)), vec![2.0, 5.0]);
        assert_eq!(v(reduce(Mean, None, false, false)), vec![3.5]);
        assert_eq!(
            v(reduce(Max, Some(&[0]), false, false)),
            vec![4.0, 5.0, 6.0]
        );
        assert_eq!(v(reduce(Min, Some(&[1]), false, false)), vec![1.0, 4.0]);
        assert_eq!(v(reduce(Sum, Some(&[0]), false, true)), vec![6.0, 15.0]);
        let k = run(reduce(Max, Some(&[1]), true, false), &x).unwrap();
        assert_eq!(
            (k.shape(), k.to_vec::<f32>().unwrap()),
            (&[2, 1][..], vec![3.0, 6.0])
        );

        // (2, 2, 2): reduce the middle axis.
        let y =
            NDArray::from_vec([2, 2, 2], vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]).unwrap();
        let s = run(reduce(Sum, Some(&[1]), false, false), &y).unwrap();
        assert_eq!(s.to_vec::<f32>().unwrap(), vec![4.0, 6.0, 12.0, 14.0]);
        let m = run(reduce(Min, Some(&[1]), false, true), &y).unwrap();
        assert_eq!(m.to_vec::<f32>().unwrap(), vec![1.0, 3.0]);

        // Integers: sum wraps at the width, max/min exact.
        let i = NDArray::from_vec([3], vec![100i8, 100, -5]).unwrap();
        assert_eq!(
            run(reduce(Sum, None, false, false), &i)
                .unwrap()
                .to_vec::<i8>()
                .unwrap(),
            vec![-61]
        );
        assert_eq!(
            run(reduce(Max, None, false, false), &i)
                .unwrap()
                .to_vec::<i8>()
                .unwrap(),
            vec![100]
        );
        assert_eq!(
            run(reduce(Min, None, false, false), &i)
                .unwrap()
                .to_vec::<i8>()
                .unwrap(),
            vec![-5]
        );
        let big = NDArray::from_vec([2], vec![i64::MAX, i64::MAX - 1]).unwrap();
        assert_eq!(
            run(reduce(Min, None, false, false), &big)
                .unwrap()
                .to_vec::<i64>()
                .unwrap(),
            vec![i64::MAX - 1]
        );

        // float16 accumulates in f64 and rounds once: 2048 + 1 + 1 = 2050 is exact in f16
        // although 2048 + 1 is not.
        let h = NDArray::from_f64([3], DType::F16, vec![2048.0, 1.0, 1.0]).unwrap();
        assert_eq!(
            run(reduce(Sum, None, false, false), &h)
                .unwrap()
                .to_f64_vec(),
            vec![2050.0]
        );

        // Signed zeros: max is +0 and min -0 whatever the order (IEEE 754-2019).
        let z = NDArray::from_vec([2, 2], vec![-0.0f32, 0.0, 0.0, -0.0]).unwrap();
        let signs = |kind| -> Vec<bool> {
            run(reduce(kind, Some(&[1]), false, false), &z)
                .unwrap()
                .to_vec::<f32>()
                .unwrap()
                .iter()
                .map(|v| v.is_sign_negative())
                .collect()
        };
        assert_eq!(signs(Max), vec![false, false]);
        assert_eq!(signs(Min), vec![true, true]);
        // NaN anywhere wins, before or after a signed zero.
        let n = NDArray::from_vec([2, 2], vec![f32::NAN, -0.0, 0.0, f32::NAN]).unwrap();
        for kind in [Max, Min] {
            let got = run(reduce(kind, Some(&[1]), false, false), &n).unwrap();
            assert!(got.to_vec::<f32>().unwrap().iter().all(|v| v.is_nan()));
        }
        // NaN propagates through max/min; empty sums are 0 and empty means NaN.
        let n = NDArray::from_vec([3], vec![1.0f32, f32::NAN, 3.0]).unwrap();
        assert!(
            run(reduce(Max, None, false, false), &n)
                .unwrap()
                .to_vec::<f32>()
                .unwrap()[0]
                .is_nan()
        );
        assert!(
            run(reduce(Min, None, false, false), &n)
                .unwrap()
                .to_vec::<f32>()
                .unwrap()[0]
                .is_nan()
        );
        let e = NDArray::zeros([2, 0], DType::F32);
        assert_eq!(
            run(reduce(Sum, Some(&[1]), false, false), &e)
                .unwrap()
                .to_vec::<f32>()
                .unwrap(),
            vec![0.0, 0.0]
        );
        assert!(
            run(reduce(Mean, Some(&[1]), false, false), &e)
                .unwrap()
                .to_vec::<f32>()
                .unwrap()[0]
                .is_nan()
        );

        // Products: floats in f64, integers wrap at the width, empty products are 1.
        assert_eq!(v(reduce(Prod, Some(&[1]), false, false)), vec![6.0, 120.0]);
        assert_eq!(v(reduce(Prod, None, false, false)), vec![720.0]);
        assert_eq!(
            run(reduce(Prod, None, false, false), &i)
                .unwrap()
                .to_vec::<i8>()
                .unwrap(),
            // 100 * 100 * -5 = -50000 = 0x...3cb0, whose low byte is -80.
            vec![-80]
        );
        assert_eq!(
            run(reduce(Prod, Some(&[1]), true, false), &e)
                .unwrap()
                .to_vec::<f32>()
                .unwrap(),
            vec![1.0, 1.0]
        );

        // A rank-0 tensor reduces to itself.
        let s = NDArray::scalar(2.5f32);
        for kind in ReduceKind::ALL {
            assert_eq!(run(reduce(kind, None, false, false), &s).unwrap(), s);
        }
    }

    #[test]
    fn eval_rejects_a_mismatched_result_type() {
        let x = NDArray::zeros([2, 3], DType::F32);
        let op = Op::from(reduce(ReduceKind::Sum, Some(&[0]), false, false));
        let e = op
            .eval(&[Value::from(x)], &Type::tensor([2], DType::F32))
            .unwrap_err();
        assert!(
            matches!(e, Error::Eval(_)) && e.to_string().contains("Tensor[(3), float32]"),
            "{e}"
        );
    }

    /// A shape of rank 1..=4 and one of its axes.
    fn shape_and_axis() -> impl Strategy<Value = (Vec<usize>, usize)> {
        prop::collection::vec(1usize..=4, 1..=4).prop_flat_map(|s| {
            let r = s.len();
            (Just(s), 0..r)
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn one_axis_matches_naive_loops((shape, axis) in shape_and_axis(), k in 0usize..ReduceKind::ALL.len(), seed in any::<u64>()) {
            let kind = ReduceKind::ALL[k];
            let x = NDArray::random(shape.clone(), DType::F32, seed);
            let got = run(reduce(kind, Some(&[axis as i64]), false, false), &x).unwrap();
            // View the tensor as (outer, n, inner) around `axis`.
            let outer: usize = shape[..axis].iter().product();
            let n = shape[axis];
            let inner: usize = shape[axis + 1..].iter().product();
            let v = x.to_f64_vec();
            let mut want = Vec::new();
            for o in 0..outer {
                for i in 0..inner {
                    let col: Vec<f64> = (0..n).map(|j| v[(o * n + j) * inner + i]).collect();
                    want.push(match kind {
                        ReduceKind::Sum => col.iter().sum(),
                        ReduceKind::Mean => col.iter().sum::<f64>() / n as f64,
                        ReduceKind::Max => col.iter().cloned().fold(f64::NEG_INFINITY, fmaximum),
                        ReduceKind::Min => col.iter().cloned().fold(f64::INFINITY, fminimum),
                        ReduceKind::Prod => col.iter().product(),
                    } as f32 as f64);
                }
            }
            prop_assert_eq!(got.to_f64_vec(), want);
        }

        #[test]
        fn sum_all_is_sum_of_partial_sums((shape, axis) in shape_and_axis(), int in any::<bool>(), seed in any::<u64>()) {
            let dtype = if int { DType::I8 } else { DType::F32 };
            let x = NDArray::random_uniform(shape, dtype, seed, -100.0, 100.0);
            let all = run(reduce(ReduceKind::Sum, None, false, false), &x).unwrap();
            let partial = run(reduce(ReduceKind::Sum, Some(&[axis as i64]), false, false), &x).unwrap();
            let rest = run(reduce(ReduceKind::Sum, None, false, false), &partial).unwrap();
            if int {
                // Wrapping sums are exact modulo 2^8.
                prop_assert_eq!(all, rest);
            } else {
                // Both orders round partial sums to f32, so each is within n·eps·Σ|x| of the
                // exact sum (recursive summation's bound), not within a tolerance relative to
                // the possibly cancelled, near-zero result (0.22946 vs 0.22944641 from terms
                // of size 100 once failed that way).
                let v = x.to_f64_vec();
                let magnitude: f64 = v.iter().map(|v| v.abs()).sum();
                let bound = 2.0 * v.len() as f64 * f32::EPSILON as f64 * (1.0 + magnitude);
                let (a, b) = (all.to_f64_vec()[0], rest.to_f64_vec()[0]);
                prop_assert!((a - b).abs() <= bound, "{:?} vs {:?}", all, rest);
            }
        }

        #[test]
        fn keepdims_only_reshapes(shape in prop::collection::vec(0usize..=3, 0..=4), mask in prop::collection::vec(any::<bool>(), 4), k in 0usize..4, seed in any::<u64>()) {
            let kind = ReduceKind::ALL[k];
            let axes: Vec<i64> = (0..shape.len()).filter(|&d| mask[d]).map(|d| d as i64).collect();
            // max/min of an empty axis is refused by the type rule; skip those.
            prop_assume!(matches!(kind, ReduceKind::Sum | ReduceKind::Mean) || axes.iter().all(|&d| shape[d as usize] > 0));
            let x = NDArray::random(shape.clone(), DType::F32, seed);
            let flat = run(reduce(kind, Some(&axes), false, false), &x).unwrap();
            let kept = run(reduce(kind, Some(&axes), true, false), &x).unwrap();
            prop_assert_eq!(kept.rank(), shape.len());
            let squeezed: Vec<usize> = kept.shape().iter().enumerate().filter(|(d, _)| !mask[*d]).map(|(_, &n)| n).collect();
            prop_assert_eq!(&squeezed[..], flat.shape());
            for (d, &n) in kept.shape().iter().enumerate() {
                prop_assert_eq!(n, if mask[d] { 1 } else { shape[d] });
            }
            // Same values bit for bit (mean over an empty axis is NaN).
            prop_assert_eq!(kept.reshape(flat.shape()).unwrap().to_le_bytes(), flat.to_le_bytes());
        }

        #[test]
        fn exclude_means_the_complement((shape, axis) in shape_and_axis(), k in 0usize..4, keepdims in any::<bool>(), seed in any::<u64>()) {
            let kind = ReduceKind::ALL[k];
            let x = NDArray::random(shape.clone(), DType::F32, seed);
            let excl = run(reduce(kind, Some(&[axis as i64]), keepdims, true), &x).unwrap();
            let others: Vec<i64> = (0..shape.len() as i64).filter(|&d| d != axis as i64).collect();
            let explicit = run(reduce(kind, Some(&others), keepdims, false), &x).unwrap();
            prop_assert_eq!(excl, explicit);
            // Negative spelling of the same axis gives the same op result.
            let neg = axis as i64 - shape.len() as i64;
            prop_assert_eq!(
                run(reduce(kind, Some(&[neg]), keepdims, true), &x).unwrap(),
                run(reduce(kind, Some(&[axis as i64]), keepdims, true), &x).unwrap()
            );
        }

        #[test]
        fn max_bounds_mean_bounds_min((shape, axis) in shape_and_axis(), all in any::<bool>(), seed in any::<u64>()) {
            let x = NDArray::random(shape, DType::F32, seed);
            let axes = if all { None } else { Some(vec![axis as i64]) };
            let r = |kind| run(Reduce { kind, axis: axes.clone(), keepdims: false, exclude: false }, &x).unwrap().to_f64_vec();
            let (mx, mean, mn) = (r(ReduceKind::Max), r(ReduceKind::Mean), r(ReduceKind::Min));
            for i in 0..mx.len() {
                prop_assert!(mx[i] >= mean[i] && mean[i] >= mn[i], "{} {} {}", mx[i], mean[i], mn[i]);
            }
        }
    }

    #[test]
    fn attributes_round_trip() {
        use ReduceKind::*;
        let ops = [
            Reduce::all(Sum),
            Reduce::over(Mean, [1], true),
            Reduce::over(Max, [-1, 0], false),
            reduce(Min, Some(&[2]), true, true),
            reduce(Sum, Some(&[]), false, true),
            reduce(Max, None, true, false),
        ];
        for op in ops {
            let op = Op::from(op);
            assert_eq!(Op::builtin(op.name(), op.attrs()).unwrap().unwrap(), op);
        }
        assert_eq!(Op::from(Reduce::all(Sum)).to_string(), "sum");
        assert_eq!(
            Op::from(Reduce::over(Mean, [2, 3], true)).to_string(),
            "mean, axis=[2, 3], keepdims=True"
        );
        assert_eq!(
            Op::from(reduce(Min, Some(&[1]), true, true)).to_string(),
            "min, axis=[1], keepdims=True, exclude=True"
        );
        // A single integer axis is accepted, as Relay allows.
        let one = Op::builtin("max", vec![("axis".into(), AttrValue::Int(1))])
            .unwrap()
            .unwrap();
        assert_eq!(one, Op::from(Reduce::over(Max, [1], false)));
        let mut names: Vec<&str> = ReduceKind::ALL.iter().map(|k| k.name()).collect();
        names.dedup();
        assert_eq!(names, NAMES);
    }

    #[test]
    fn bad_attributes_are_clear_errors() {
        let err = |attrs: Vec<(&str, AttrValue)>| {
            let attrs = attrs.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
            Op::builtin("sum", attrs).unwrap().unwrap_err().to_string()
        };
        let e = err(vec![("axis", AttrValue::Str("x".into()))]);
        assert!(
            e.contains("attribute `axis` of `sum`: expected a list of integers"),
            "{e}"
        );
        let e = err(vec![(
            "axis",
            AttrValue::List(vec![AttrValue::Int(1), AttrValue::Int(1)]),
        )]);
        assert!(
            e.contains("attribute `axis` of `sum`: axis 1 is listed twice in [1, 1]"),
            "{e}"
        );
        let e = err(vec![("keepdims", AttrValue::Int(2))]);
        assert!(
            e.contains("attribute `keepdims` of `sum`: expected True or False"),
            "{e}"
        );
        let e = err(vec![("exclude", AttrValue::Str("yes".into()))]);
        assert!(e.contains("attribute `exclude` of `sum`"), "{e}");
        let e = err(vec![("axes", AttrValue::Int(1))]);
        assert!(e.contains("`sum` has no attribute `axes`"), "{e}");
        assert!(parse("add", &mut AttrReader::new("add", vec![])).is_none());
    }
}
