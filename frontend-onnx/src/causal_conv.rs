//! ONNX `CausalConvWithState`: a depthwise 1-D convolution over `[N, C, L]` that sees
//! the `k - 1` previous steps — `past_state` (`[N, C, k - 1]`, zeros when absent) put
//! before the input — with an optional bias and `silu`/`swish` activation (computed in
//! float32, as ONNX's reference does), and the last `k - 1` steps of that padded input
//! as the present state. Built from `concatenate`, a grouped 2-D convolution of unit
//! height and elementwise ops.

use kiln_ir::op::{self, BinaryKind as B, UnaryKind as U};
use kiln_ir::{DType, ExprId, NDArray};

use crate::convert::{Importer, Node};
use crate::error::{Error, Result};
use crate::ops::cast;

/// The ONNX op types this module converts.
pub const SUPPORTED: &[&str] = &["CausalConvWithState"];

/// Converts `CausalConvWithState`.
pub(crate) fn convert(imp: &mut Importer, n: &Node) -> Result<Vec<ExprId>> {
    let x = imp.input(n, 0)?;
    let w = imp.input(n, 1)?;
    let (xs, ws) = (imp.shape(x)?, imp.shape(w)?);
    let dt = imp.dtype(x)?;
    if xs.len() != 3 || ws.len() != 3 || ws[0] != xs[1] || ws[1] != 1 || ws[2] == 0 {
        return Err(Error::InvalidModel(format!(
            "CausalConvWithState needs input [N, C, L] and weight [C, 1, k]; got {xs:?} and \
             {ws:?}"
        )));
    }
    let silu = match n.string("activation", "none").as_str() {
        "none" => false,
        "silu" | "swish" => true,
        other => {
            return Err(Error::InvalidModel(format!(
                "CausalConvWithState activation `{other}`"
            )));
        }
    };
    let (nb, c, l, k) = (xs[0], xs[1], xs[2], ws[2]);
    let past = match imp.opt_input(n, 3)? {
        Some(p) => {
            if imp.shape(p)? != [nb, c, k - 1] {
                return Err(Error::InvalidModel(format!(
                    "CausalConvWithState past_state {:?}, expected {:?}",
                    imp.shape(p)?,
                    [nb, c, k - 1]
                )));
            }
            p
        }
        None => imp.constant(NDArray::zeros(vec![nb, c, k - 1], dt)),
    };
    let padded = if k > 1 {
        let t = imp.m.tuple(&[past, x])?;
        imp.call(op::Concatenate::new(2), &[t])?
    } else {
        x
    };
    let full = l + k - 1;
    let p4 = imp.reshape(padded, &[nb, c, 1, full])?;
    let w4 = imp.reshape(w, &[c, 1, 1, k])?;
    let conv = op::Conv2d {
        groups: c,
        ..op::Conv2d::default()
    };
    let mut y = imp.call(conv, &[p4, w4])?;
    if let Some(b) = imp.opt_input(n, 2)? {
        y = imp.call(op::BiasAdd { axis: 1 }, &[y, b])?;
    }
    let mut y = imp.reshape(y, &[nb, c, l])?;
    if silu {
        let yf = cast(imp, y, DType::F32)?;
        let s = imp.unary(U::Sigmoid, yf)?;
        let v = imp.binary(B::Multiply, yf, s)?;
        y = cast(imp, v, dt)?;
    }
    let present = if k > 1 {
        let idx: Vec<i64> = (l..full).map(|i| i as i64).collect();
        let idx = imp.constant(NDArray::from_vec([k - 1], idx)?);
        imp.call(
            op::Take {
                axis: Some(2),
                mode: op::TakeMode::Clip,
            },
            &[padded, idx],
        )?
    } else {
        imp.constant(NDArray::zeros(vec![nb, c, 0], dt))
    };
    Ok(vec![y, present])
}
