//! Comparing tensors with a tolerance: `allclose` passes or returns a [`Mismatch`] that
//! names the worst element, so a failing test says where and by how much.

use std::fmt;

use super::NDArray;

/// Why two tensors are not close: a shape or dtype difference, or the worst element.
#[derive(Clone, Debug, PartialEq)]
pub struct Mismatch {
    /// Elements outside the tolerance (0 when shapes or dtypes differ).
    pub bad_count: usize,
    /// Elements compared.
    pub total: usize,
    /// Multi-index of the worst element.
    pub worst_index: Vec<usize>,
    /// The worst element's value in the tensor checked.
    pub actual: f64,
    /// The worst element's value in the reference.
    pub expected: f64,
    /// The whole finding in one line, as `Display` prints it.
    pub message: String,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Mismatch {}

fn close(a: f64, e: f64, atol: f64, rtol: f64) -> bool {
    if a.is_nan() || e.is_nan() {
        return a.is_nan() && e.is_nan();
    }
    if a.is_infinite() || e.is_infinite() {
        return a == e;
    }
    (a - e).abs() <= atol + rtol * e.abs()
}

impl NDArray {
    /// Checks `|self - expected| <= atol + rtol * |expected|` elementwise (numpy's
    /// `allclose` rule; NaN equals NaN, infinities must match exactly). Shapes and
    /// dtypes must be equal.
    pub fn allclose(&self, expected: &NDArray, atol: f64, rtol: f64) -> Result<(), Mismatch> {
        let fail = |message: String| Mismatch {
            bad_count: 0,
            total: self.numel(),
            worst_index: vec![],
            actual: f64::NAN,
            expected: f64::NAN,
            message,
        };
        if self.shape() != expected.shape() {
            return Err(fail(format!(
                "shape differs: got {:?}, expected {:?}",
                self.shape(),
                expected.shape()
            )));
        }
        if self.dtype() != expected.dtype() {
            return Err(fail(format!(
                "dtype differs: got {}, expected {}",
                self.dtype(),
                expected.dtype()
            )));
        }
        let (a, e) = (self.to_f64_vec(), expected.to_f64_vec());
        let mut bad = 0;
        let mut worst: Option<(usize, f64)> = None;
        for (i, (&x, &y)) in a.iter().zip(&e).enumerate() {
            if !close(x, y, atol, rtol) {
                bad += 1;
                let excess = if x.is_finite() && y.is_finite() {
                    (x - y).abs() - rtol * y.abs()
                } else {
                    f64::INFINITY
                };
                if worst.is_none_or(|(_, w)| excess > w) {
                    worst = Some((i, excess));
                }
            }
        }
        let Some((flat, _)) = worst else {
            return Ok(());
        };
        let mut index = vec![0; self.rank()];
        let mut rest = flat;
        for (d, s) in self.strides().iter().enumerate() {
            index[d] = rest / s;
            rest %= s;
        }
        Err(Mismatch {
            bad_count: bad,
            total: a.len(),
            actual: a[flat],
            expected: e[flat],
            message: format!(
                "{bad} of {} elements differ beyond atol={atol:e}, rtol={rtol:e}; worst at {index:?}: got {}, expected {} (|diff| = {:e})",
                a.len(),
                a[flat],
                e[flat],
                (a[flat] - e[flat]).abs()
            ),
            worst_index: index,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;

    #[test]
    fn reports_the_worst_element() {
        let e = NDArray::from_vec([2, 2], vec![1.0f32, 2.0, 3.0, 4.0]).unwrap();
        let a = NDArray::from_vec([2, 2], vec![1.0f32, 2.1, 3.0, 4.5]).unwrap();
        assert!(e.allclose(&e, 0.0, 0.0).is_ok());
        let m = a.allclose(&e, 1e-3, 0.0).unwrap_err();
        assert_eq!(m.bad_count, 2);
        assert_eq!(m.worst_index, vec![1, 1]);
        assert_eq!((m.actual, m.expected), (4.5, 4.0));
        assert!(m.to_string().contains("worst at [1, 1]"), "{m}");
        assert!(a.allclose(&e, 0.6, 0.0).is_ok());
        assert!(a.allclose(&e, 0.0, 0.13).is_ok());
    }

    #[test]
    fn nan_inf_shape_and_dtype() {
        let n = NDArray::from_vec([2], vec![f32::NAN, f32::INFINITY]).unwrap();
        assert!(n.allclose(&n, 0.0, 0.0).is_ok());
        let m = NDArray::from_vec([2], vec![f32::NAN, f32::NEG_INFINITY]).unwrap();
        assert!(n.allclose(&m, 1.0, 1.0).is_err());
        let z = NDArray::zeros([3], DType::F32);
        assert!(
            z.allclose(&NDArray::zeros([1, 3], DType::F32), 1.0, 1.0)
                .unwrap_err()
                .message
                .contains("shape")
        );
        assert!(
            z.allclose(&NDArray::zeros([3], DType::I32), 1.0, 1.0)
                .unwrap_err()
                .message
                .contains("dtype")
        );
    }
}
