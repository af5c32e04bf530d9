//! ONNX control flow whose course is known at import: `If` with a condition known at
//! import (the taken branch's subgraph is imported in place), `Loop` with a trip count
//! and/or condition known at import and a body whose continue-condition folds to a
//! constant each iteration (unrolled), and `Scan` (unrolled over its statically known
//! scan length, in either direction, along any axis; opset 8's batched form per batch
//! element when every sequence runs the full length). Subgraphs see the values of the
//! enclosing graph; each iteration gets fresh bindings. More than [`MAX_UNROLL`]
//! iterations, or a condition that depends on run-time data, is `Unsupported` naming
//! what is missing: data-dependent control flow needs dynamic shapes and a control-flow
//! op in the graph IR, which kiln does not have.

use kiln_ir::op;
use kiln_ir::{DType, ExprId, ExprKind, NDArray};

use crate::convert::{Importer, Node};
use crate::error::{Error, Result};
use crate::proto::{AttributeProto, GraphProto};

/// The most iterations a `Loop` or `Scan` is unrolled to.
pub const MAX_UNROLL: usize = 4096;

/// The ONNX op types this module converts.
pub const SUPPORTED: &[&str] = &["If", "Loop", "Scan"];

/// Converts an `If`, `Loop` or `Scan` node.
pub(crate) fn convert(imp: &mut Importer, n: &Node) -> Result<Vec<ExprId>> {
    match n.op_type {
        "If" => convert_if(imp, n),
        "Loop" => convert_loop(imp, n),
        "Scan" => convert_scan(imp, n),
        other => Err(Error::Unsupported(format!("control flow op {other}"))),
    }
}

/// The graph attribute `name` of `n`.
fn graph<'a>(n: &'a Node, name: &str) -> Result<&'a GraphProto> {
    n.attr(name)
        .and_then(|a: &AttributeProto| a.g.as_deref())
        .ok_or_else(|| {
            Error::InvalidModel(format!("{} needs the graph attribute `{name}`", n.op_type))
        })
}

/// The value of `id` if it is a constant.
fn constant_of(imp: &Importer, id: ExprId) -> Option<NDArray> {
    match imp.m.kind(id) {
        ExprKind::Constant(c) => Some((**c).clone()),
        _ => None,
    }
}

fn run_time(what: &str) -> Error {
    Error::Unsupported(format!(
        "{what} depends on run-time data (kiln imports control flow only when its course \
         is known at import)"
    ))
}

/// Input `i` of `n` if it is known at import (a constant or an initializer), `None` if
/// the node lacks it, `what` depending on run-time data otherwise.
fn known_input(imp: &Importer, n: &Node, i: usize, what: &str) -> Result<Option<NDArray>> {
    match imp.const_input(n, i) {
        Ok(v) => Ok(v),
        Err(Error::NotConstant { .. }) => Err(run_time(what)),
        Err(e) => Err(e),
    }
}

/// A condition: one element, true when nonzero.
fn truth(c: &NDArray, what: &str) -> Result<bool> {
    match c.to_f64_vec().as_slice() {
        [v] => Ok(*v != 0.0),
        other => Err(Error::InvalidModel(format!(
            "{what} must hold one element, not {}",
            other.len()
        ))),
    }
}

fn convert_if(imp: &mut Importer, n: &Node) -> Result<Vec<ExprId>> {
    let what = "the If condition";
    let cond = known_input(imp, n, 0, what)?
        .ok_or_else(|| Error::InvalidModel("If needs a condition".into()))?;
    let taken = if truth(&cond, what)? {
        "then_branch"
    } else {
        "else_branch"
    };
    let body = graph(n, taken)?;
    let outs = imp.run_subgraph(body, &[], n.opset)?;
    if outs.len() != n.num_outputs() {
        return Err(Error::InvalidModel(format!(
            "If's {taken} has {} outputs, the node {}",
            outs.len(),
            n.num_outputs()
        )));
    }
    Ok(outs)
}

fn convert_loop(imp: &mut Importer, n: &Node) -> Result<Vec<ExprId>> {
    let body = graph(n, "body")?;
    let trip = match known_input(imp, n, 0, "the Loop trip count")? {
        Some(c) => Some(
            *c.to_i64_vec()
                .first()
                .ok_or_else(|| Error::InvalidModel("empty Loop trip count".into()))?,
        ),
        None => None,
    };
    let what = "the Loop's initial condition";
    let first = known_input(imp, n, 1, what)?;
    if trip.is_none() && first.is_none() {
        return Err(Error::InvalidModel(
            "a Loop with neither a trip count nor a condition never ends".into(),
        ));
    }
    let mut cond = match first {
        Some(c) => truth(&c, what)?,
        None => true,
    };
    let carried_n = n.num_inputs().saturating_sub(2);
    let mut carried: Vec<ExprId> = (0..carried_n)
        .map(|i| imp.input(n, i + 2))
        .collect::<Result<_>>()?;
    let scan_n = body
        .output
        .len()
        .checked_sub(1 + carried_n)
        .ok_or_else(|| {
            Error::InvalidModel(format!(
                "the Loop body has {} outputs for {carried_n} loop-carried values",
                body.output.len()
            ))
        })?;
    let limit = match trip {
        Some(t) if t < 0 => 0,
        Some(t) => t as u64,
        None => u64::MAX,
    };
    let mut scans: Vec<Vec<ExprId>> = vec![vec![]; scan_n];
    let mut i: u64 = 0;
    while cond && i < limit {
        if i as usize >= MAX_UNROLL {
            return Err(Error::Unsupported(format!(
                "a Loop of more than {MAX_UNROLL} iterations (kiln unrolls loops at import)"
            )));
        }
        let iter = imp.constant(NDArray::from_vec([], vec![i as i64])?);
        let c = imp.constant(NDArray::full(vec![], DType::Bool, 1.0));
        let mut args = vec![iter, c];
        args.extend(&carried);
        let outs = imp.run_subgraph(body, &args, n.opset)?;
        let what = "the Loop body's condition output";
        cond = truth(
            &constant_of(imp, outs[0]).ok_or_else(|| run_time(what))?,
            what,
        )?;
        carried = outs[1..1 + carried_n].to_vec();
        for (k, s) in scans.iter_mut().enumerate() {
            s.push(outs[1 + carried_n + k]);
        }
        i += 1;
    }
    let mut out = carried;
    for s in scans {
        if s.is_empty() {
            return Err(Error::Unsupported(
                "a Loop scan output of zero iterations (its element shape is unknown)".into(),
            ));
        }
        out.push(imp.stack(&s, 0)?);
    }
    Ok(out)
}

/// The scan body applied over `length` steps: each step reads element `t` (or
/// `length - 1 - t`, reversed) of every `(input, axis, reverse)` and the states the
/// previous step left. Returns the final states and, per scan output, its value at
/// every step in order.
fn unroll(
    imp: &mut Importer,
    n: &Node,
    body: &GraphProto,
    mut states: Vec<ExprId>,
    inputs: &[(ExprId, usize, bool)],
    length: usize,
) -> Result<(Vec<ExprId>, Vec<Vec<ExprId>>)> {
    if length > MAX_UNROLL {
        return Err(Error::Unsupported(format!(
            "a Scan of {length} steps, more than {MAX_UNROLL} (kiln unrolls scans at import)"
        )));
    }
    if length == 0 {
        return Err(Error::Unsupported("a Scan of zero steps".into()));
    }
    let states_n = states.len();
    let scan_outs = body.output.len().saturating_sub(states_n);
    let mut collected: Vec<Vec<ExprId>> = vec![vec![]; scan_outs];
    for t in 0..length {
        let mut args = states.clone();
        for &(x, axis, reverse) in inputs {
            let at = if reverse { length - 1 - t } else { t };
            args.push(take_one(imp, x, at, axis)?);
        }
        let outs = imp.run_subgraph(body, &args, n.opset)?;
        states = outs[..states_n].to_vec();
        for (k, c) in collected.iter_mut().enumerate() {
            c.push(outs[states_n + k]);
        }
    }
    Ok((states, collected))
}

/// Element `at` of `x` along `axis` (the axis dropped).
fn take_one(imp: &mut Importer, x: ExprId, at: usize, axis: usize) -> Result<ExprId> {
    let idx = imp.constant(NDArray::from_vec([], vec![at as i64])?);
    imp.call(
        op::Take {
            axis: Some(axis as i64),
            mode: op::TakeMode::Clip,
        },
        &[x, idx],
    )
}

/// `Scan` at opset 8: input 0 the optional `sequence_lens`, then the states and the
/// scan inputs, all with a leading batch axis (the scan inputs' time axis is 1); the body
/// runs per batch element. Unrolled per batch element when every sequence runs the full
/// length (`sequence_lens` absent, or known at import and all equal to it); shorter
/// sequences are unsupported.
fn convert_scan8(imp: &mut Importer, n: &Node) -> Result<Vec<ExprId>> {
    let body = graph(n, "body")?;
    let m = usize::try_from(n.int("num_scan_inputs", 0))
        .ok()
        .filter(|&m| m >= 1 && m < n.num_inputs())
        .ok_or_else(|| Error::InvalidModel("Scan needs 1..inputs num_scan_inputs".into()))?;
    let states_n = n.num_inputs() - 1 - m;
    let dirs = n.ints("directions").unwrap_or_else(|| vec![0; m]);
    if dirs.len() != m {
        return Err(Error::InvalidModel(format!(
            "Scan `directions` needs {m} entries"
        )));
    }
    let states: Vec<ExprId> = (1..=states_n)
        .map(|i| imp.input(n, i))
        .collect::<Result<_>>()?;
    let xs: Vec<ExprId> = (0..m)
        .map(|j| imp.input(n, 1 + states_n + j))
        .collect::<Result<_>>()?;
    let first = imp.shape(xs[0])?;
    if first.len() < 2 {
        return Err(Error::InvalidModel(
            "Scan (opset 8) inputs need a batch and a sequence axis".into(),
        ));
    }
    let (batch, length) = (first[0], first[1]);
    for &x in &xs {
        let s = imp.shape(x)?;
        if s.len() < 2 || s[0] != batch || s[1] != length {
            return Err(Error::InvalidModel(format!(
                "Scan inputs of shapes {first:?} and {s:?} (batch and sequence must agree)"
            )));
        }
    }
    if n.input_name(0).is_some() {
        let lens = imp.const_ints(n, 0)?.unwrap_or_default();
        if lens.iter().any(|&l| l != length as i64) {
            return Err(Error::Unsupported(format!(
                "Scan (opset 8) with sequence_lens {lens:?} shorter than the sequence \
                 length {length}"
            )));
        }
    }
    let scan_outs =
        body.output.len().checked_sub(states_n).ok_or_else(|| {
            Error::InvalidModel("the Scan body has fewer outputs than states".into())
        })?;
    let mut final_states: Vec<Vec<ExprId>> = vec![vec![]; states_n];
    let mut outputs: Vec<Vec<ExprId>> = vec![vec![]; scan_outs];
    for b in 0..batch {
        let st: Vec<ExprId> = states
            .iter()
            .map(|&s| take_one(imp, s, b, 0))
            .collect::<Result<_>>()?;
        let mut inputs = vec![];
        for (j, &x) in xs.iter().enumerate() {
            inputs.push((take_one(imp, x, b, 0)?, 0, dirs[j] != 0));
        }
        let (st, collected) = unroll(imp, n, body, st, &inputs, length)?;
        for (k, s) in st.into_iter().enumerate() {
            final_states[k].push(s);
        }
        for (k, items) in collected.into_iter().enumerate() {
            outputs[k].push(imp.stack(&items, 0)?);
        }
    }
    let mut out = vec![];
    for items in final_states.into_iter().chain(outputs) {
        out.push(imp.stack(&items, 0)?);
    }
    Ok(out)
}

fn convert_scan(imp: &mut Importer, n: &Node) -> Result<Vec<ExprId>> {
    if n.opset < 9 {
        return convert_scan8(imp, n);
    }
    let body = graph(n, "body")?;
    let m = usize::try_from(n.int("num_scan_inputs", 0))
        .ok()
        .filter(|&m| m >= 1 && m <= n.num_inputs())
        .ok_or_else(|| Error::InvalidModel("Scan needs 1..=inputs num_scan_inputs".into()))?;
    let states_n = n.num_inputs() - m;
    let list = |name: &str, len: usize| -> Result<Vec<i64>> {
        let v = n.ints(name).unwrap_or_else(|| vec![0; len]);
        if v.len() != len {
            return Err(Error::InvalidModel(format!(
                "Scan `{name}` needs {len} entries"
            )));
        }
        Ok(v)
    };
    let in_axes = list("scan_input_axes", m)?;
    let in_dirs = list("scan_input_directions", m)?;
    let scan_outs =
        body.output.len().checked_sub(states_n).ok_or_else(|| {
            Error::InvalidModel("the Scan body has fewer outputs than states".into())
        })?;
    let out_axes = list("scan_output_axes", scan_outs)?;
    let out_dirs = list("scan_output_directions", scan_outs)?;
    let states: Vec<ExprId> = (0..states_n)
        .map(|i| imp.input(n, i))
        .collect::<Result<_>>()?;
    let mut inputs = vec![];
    let mut length = None;
    for j in 0..m {
        let x = imp.input(n, states_n + j)?;
        let shape = imp.shape(x)?;
        let axis = crate::ops::axis(in_axes[j], shape.len())?;
        match length {
            None => length = Some(shape[axis]),
            Some(l) if l != shape[axis] => {
                return Err(Error::InvalidModel(format!(
                    "Scan inputs of lengths {l} and {}",
                    shape[axis]
                )));
            }
            _ => {}
        }
        inputs.push((x, axis, in_dirs[j] != 0));
    }
    let (states, collected) = unroll(imp, n, body, states, &inputs, length.unwrap_or(0))?;
    let mut out = states;
    for (k, mut items) in collected.into_iter().enumerate() {
        if out_dirs[k] != 0 {
            items.reverse();
        }
        let rank = imp.shape(items[0])?.len() + 1;
        let axis = crate::ops::axis(out_axes[k], rank)?;
        out.push(imp.stack(&items, axis as i64)?);
    }
    Ok(out)
}
