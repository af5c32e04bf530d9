//! ONNX `Einsum` as graph-IR data movement and matrix products, so that einsum-written
//! attention reaches the same `nn.batch_matmul` kernels as `MatMul`: the equation is
//! parsed (explicit or implicit output, `...` broadcast dimensions), a label repeated
//! inside one operand takes its diagonal (a `take` at the diagonal's flat positions), a
//! label no one else needs is summed out, and operands are contracted left to right —
//! each pair transposed to `(batch, kept, contracted)` × `(batch, contracted, kept)`,
//! reshaped to three dimensions, multiplied by `nn.batch_matmul`, and reshaped back —
//! before one final transpose to the output's order. Exact up to float summation order.

use kiln_ir::op::{self, ReduceKind as R};
use kiln_ir::{DType, ExprId, NDArray};

use crate::convert::{Importer, Node};
use crate::error::{Error, Result};

/// A dimension label: a letter of the equation, or one of the dimensions `...` stands
/// for (numbered from the right, so that broadcasting aligns them as numpy does).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Label {
    Ellipsis(usize),
    Letter(char),
}

/// One operand during the contraction: its value and the label of each dimension.
struct Term {
    value: ExprId,
    labels: Vec<Label>,
}

fn bad(n: &Node, why: impl std::fmt::Display) -> Error {
    Error::InvalidModel(format!(
        "Einsum equation `{}`: {why}",
        n.string("equation", "")
    ))
}

/// The labels of one side of the equation (`bij`, `...ij`), for an operand of `rank`
/// dimensions (`None` for the output, where `...` stands for `ellipsis_rank` labels).
fn parse_term(
    n: &Node,
    text: &str,
    rank: Option<usize>,
    ellipsis_rank: usize,
) -> Result<Vec<Label>> {
    let text = text.trim();
    let (before, after) = match text.find("...") {
        Some(i) => (&text[..i], Some(&text[i + 3..])),
        None => (text, None),
    };
    let letters = |s: &str| -> Result<Vec<Label>> {
        s.chars()
            .filter(|c| !c.is_whitespace())
            .map(|c| {
                if c.is_ascii_alphabetic() {
                    Ok(Label::Letter(c))
                } else {
                    Err(bad(n, format!("`{c}` is not a label (letters a-z, A-Z)")))
                }
            })
            .collect()
    };
    let mut labels = letters(before)?;
    if let Some(after) = after {
        let tail = letters(after)?;
        let explicit = labels.len() + tail.len();
        let k = match rank {
            Some(r) => r
                .checked_sub(explicit)
                .ok_or_else(|| bad(n, format!("`{text}` names more dimensions than {r}")))?,
            None => ellipsis_rank,
        };
        labels.extend((0..k).rev().map(Label::Ellipsis));
        labels.extend(tail);
    }
    if let Some(r) = rank
        && labels.len() != r
    {
        return Err(bad(
            n,
            format!(
                "`{text}` has {} labels for an operand of rank {r}",
                labels.len()
            ),
        ));
    }
    Ok(labels)
}

/// Converts an `Einsum` node.
pub(crate) fn convert(imp: &mut Importer, n: &Node) -> Result<Vec<ExprId>> {
    let equation = n.string("equation", "");
    let (lhs, rhs) = match equation.split_once("->") {
        Some((l, r)) => (l, Some(r)),
        None => (equation.as_str(), None),
    };
    let sides: Vec<&str> = lhs.split(',').collect();
    if sides.len() != n.num_inputs() {
        return Err(bad(
            n,
            format!(
                "{} operands written, {} inputs given",
                sides.len(),
                n.num_inputs()
            ),
        ));
    }
    let mut terms = vec![];
    for (i, side) in sides.iter().enumerate() {
        let value = imp.input(n, i)?;
        let rank = imp.shape(value)?.len();
        let labels = parse_term(n, side, Some(rank), 0)?;
        terms.push(Term { value, labels });
    }
    let ellipsis_rank = terms
        .iter()
        .flat_map(|t| &t.labels)
        .filter_map(|l| match l {
            Label::Ellipsis(k) => Some(k + 1),
            Label::Letter(_) => None,
        })
        .max()
        .unwrap_or(0);
    let output = match rhs {
        Some(r) => {
            if r.contains("...") || ellipsis_rank == 0 {
                parse_term(n, r, None, ellipsis_rank)?
            } else {
                return Err(bad(n, "the operands use `...` but the output does not"));
            }
        }
        None => implicit_output(&terms, ellipsis_rank),
    };
    for (i, l) in output.iter().enumerate() {
        if output[..i].contains(l) {
            return Err(bad(n, "a label appears twice in the output"));
        }
        if !terms.iter().any(|t| t.labels.contains(l)) {
            return Err(bad(n, format!("output label {l:?} is in no operand")));
        }
    }
    // Sizes: a label's size must agree between operands, or be 1 (broadcast).
    let mut sizes: std::collections::BTreeMap<Label, usize> = Default::default();
    for t in &terms {
        for (l, &d) in t.labels.iter().zip(&imp.shape(t.value)?) {
            let s = sizes.entry(*l).or_insert(d);
            if *s == 1 {
                *s = d;
            } else if d != 1 && d != *s {
                return Err(bad(n, format!("label {l:?} has sizes {s} and {d}")));
            }
        }
    }
    for t in &mut terms {
        take_diagonals(imp, t)?;
    }
    // Contract left to right, summing each label out as soon as nothing later needs it.
    let mut terms = terms.into_iter();
    let mut acc = terms.next().ok_or_else(|| bad(n, "no operands"))?;
    let rest: Vec<Term> = terms.collect();
    for i in 0..=rest.len() {
        let needed: Vec<Label> = output
            .iter()
            .chain(rest[i..].iter().flat_map(|t| &t.labels))
            .copied()
            .collect();
        if i == rest.len() {
            sum_out(imp, &mut acc, |l| needed.contains(&l))?;
            break;
        }
        let next = &rest[i];
        let later: Vec<Label> = output
            .iter()
            .chain(rest[i + 1..].iter().flat_map(|t| &t.labels))
            .copied()
            .collect();
        // Labels only one side has and nobody needs later are summed out first.
        sum_out(imp, &mut acc, |l| {
            later.contains(&l) || next.labels.contains(&l)
        })?;
        let mut b = Term {
            value: next.value,
            labels: next.labels.clone(),
        };
        sum_out(imp, &mut b, |l| {
            later.contains(&l) || acc.labels.contains(&l)
        })?;
        acc = contract(imp, acc, b, &later, &sizes)?;
    }
    // Broadcast labels of size 1 that the output wants bigger, then order as the output.
    let want: Vec<usize> = acc.labels.iter().map(|l| sizes[l]).collect();
    let value = imp.broadcast_to(acc.value, &want)?;
    let perm: Vec<i64> = output
        .iter()
        .map(|l| acc.labels.iter().position(|x| x == l).map(|p| p as i64))
        .collect::<Option<_>>()
        .ok_or_else(|| bad(n, "internal: an output label was summed out"))?;
    let value = if perm.iter().enumerate().all(|(i, &p)| p == i as i64) {
        value
    } else {
        imp.transpose(value, perm)?
    };
    Ok(vec![value])
}

/// numpy's implicit output: the `...` dimensions, then every letter that appears
/// exactly once, in alphabetical order.
fn implicit_output(terms: &[Term], ellipsis_rank: usize) -> Vec<Label> {
    let mut out: Vec<Label> = (0..ellipsis_rank).rev().map(Label::Ellipsis).collect();
    let mut letters: Vec<char> = vec![];
    for t in terms {
        for l in &t.labels {
            if let Label::Letter(c) = l {
                letters.push(*c);
            }
        }
    }
    let mut once: Vec<char> = letters
        .iter()
        .copied()
        .filter(|c| letters.iter().filter(|d| *d == c).count() == 1)
        .collect();
    once.sort_unstable();
    out.extend(once.into_iter().map(Label::Letter));
    out
}

/// Replaces each label repeated within `t` by the diagonal over its occurrences.
fn take_diagonals(imp: &mut Importer, t: &mut Term) -> Result<()> {
    loop {
        let repeat = (0..t.labels.len()).find_map(|q| {
            t.labels[..q]
                .iter()
                .position(|l| *l == t.labels[q])
                .map(|p| (p, q))
        });
        let Some((p, q)) = repeat else {
            return Ok(());
        };
        let shape = imp.shape(t.value)?;
        if shape[p] != shape[q] {
            return Err(Error::InvalidModel(format!(
                "Einsum: repeated label {:?} has sizes {} and {}",
                t.labels[p], shape[p], shape[q]
            )));
        }
        let d = shape[p];
        // Move p and q last, flatten them, and take positions i * (d + 1).
        let mut order: Vec<usize> = (0..shape.len()).filter(|&i| i != p && i != q).collect();
        order.extend([p, q]);
        let moved = imp.transpose(t.value, order.iter().map(|&i| i as i64).collect())?;
        let mut flat: Vec<usize> = order[..order.len() - 2].iter().map(|&i| shape[i]).collect();
        flat.push(d * d);
        let moved = imp.reshape(moved, &flat)?;
        let positions: Vec<i64> = (0..d as i64).map(|i| i * (d as i64 + 1)).collect();
        let idx = imp.constant(NDArray::from_vec([d], positions)?);
        let axis = flat.len() as i64 - 1;
        t.value = imp.call(
            op::Take {
                axis: Some(axis),
                mode: op::TakeMode::Clip,
            },
            &[moved, idx],
        )?;
        let label = t.labels[p];
        let mut labels: Vec<Label> = order[..order.len() - 2]
            .iter()
            .map(|&i| t.labels[i])
            .collect();
        labels.push(label);
        t.labels = labels;
    }
}

/// Sums `t` over the labels `keep` rejects.
fn sum_out(imp: &mut Importer, t: &mut Term, keep: impl Fn(Label) -> bool) -> Result<()> {
    let axes: Vec<i64> = (0..t.labels.len())
        .filter(|&i| !keep(t.labels[i]))
        .map(|i| i as i64)
        .collect();
    if axes.is_empty() {
        return Ok(());
    }
    t.value = imp.reduce(R::Sum, t.value, Some(axes), false)?;
    t.labels.retain(|&l| keep(l));
    Ok(())
}

/// The product of `a` and `b` summed over the labels both have and `later` does not
/// need, as one `nn.batch_matmul`: labels `(batch, a-only, b-only)`.
fn contract(
    imp: &mut Importer,
    a: Term,
    b: Term,
    later: &[Label],
    sizes: &std::collections::BTreeMap<Label, usize>,
) -> Result<Term> {
    let shared = |l: &Label| a.labels.contains(l) && b.labels.contains(l);
    let batch: Vec<Label> = a
        .labels
        .iter()
        .filter(|l| shared(l) && later.contains(l))
        .copied()
        .collect();
    let summed: Vec<Label> = a
        .labels
        .iter()
        .filter(|l| shared(l) && !later.contains(l))
        .copied()
        .collect();
    let a_only: Vec<Label> = a
        .labels
        .iter()
        .filter(|l| !b.labels.contains(l))
        .copied()
        .collect();
    let b_only: Vec<Label> = b
        .labels
        .iter()
        .filter(|l| !a.labels.contains(l))
        .copied()
        .collect();
    let size = |ls: &[Label]| ls.iter().map(|l| sizes[l]).product::<usize>();
    let (bn, m, k, nn) = (size(&batch), size(&a_only), size(&summed), size(&b_only));
    let arrange =
        |imp: &mut Importer, t: &Term, order: &[&[Label]], dims: [usize; 3]| -> Result<ExprId> {
            let labels: Vec<Label> = order.iter().flat_map(|g| g.iter().copied()).collect();
            let perm: Vec<i64> = labels
                .iter()
                .map(|l| t.labels.iter().position(|x| x == l).unwrap_or(0) as i64)
                .collect();
            let moved = if perm.iter().enumerate().all(|(i, &p)| p == i as i64) {
                t.value
            } else {
                imp.transpose(t.value, perm)?
            };
            // Broadcast size-1 dimensions (from `...`) to the label's size.
            let full: Vec<usize> = labels.iter().map(|l| sizes[l]).collect();
            let moved = imp.broadcast_to(moved, &full)?;
            imp.reshape(moved, &dims)
        };
    let a3 = arrange(imp, &a, &[&batch, &a_only, &summed], [bn, m, k])?;
    let b3 = arrange(imp, &b, &[&batch, &summed, &b_only], [bn, k, nn])?;
    let dtype = imp.dtype(a3)?;
    if imp.dtype(b3)? != dtype || dtype == DType::Bool {
        return Err(Error::InvalidModel(format!(
            "Einsum of {dtype} and {} operands",
            imp.dtype(b3)?
        )));
    }
    let y = imp.call(
        op::BatchMatmul {
            transpose_a: false,
            transpose_b: false,
        },
        &[a3, b3],
    )?;
    let labels: Vec<Label> = batch
        .iter()
        .chain(&a_only)
        .chain(&b_only)
        .copied()
        .collect();
    let shape: Vec<usize> = labels.iter().map(|l| sizes[l]).collect();
    let value = imp.reshape(y, &shape)?;
    Ok(Term { value, labels })
}
