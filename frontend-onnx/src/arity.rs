//! Arity validation: a node of the default ONNX domain must list as many inputs and
//! outputs as its operator's schema allows at the model's opset, and leave none of the
//! required inputs empty — checked before any converter reads the node, against the
//! table generated from the `onnx` package's schemas ([`crate::arity_table`]).
//! Operators the table does not know (other domains, or an opset before the
//! operator existed) are left to the converters, which reject what they do not import.

use crate::arity_table::{ARITY, Arity};
use crate::convert::Node;
use crate::error::{Error, Result};

/// The table's bound for a variadic parameter (ONNX's `2^31 - 1`).
const VARIADIC: u32 = i32::MAX as u32;

/// The signature of `op` in force at `opset`: its newest version not newer than it.
fn signature(op: &str, opset: i64) -> Option<&'static Arity> {
    let start = ARITY.partition_point(|a| a.0 < op);
    ARITY[start..]
        .iter()
        .take_while(|a| a.0 == op)
        .filter(|a| a.1 <= opset)
        .last()
}

/// An error naming what is wrong when `n` breaks its operator's arity.
pub(crate) fn check(n: &Node) -> Result<()> {
    if !matches!(n.proto.domain.as_deref(), None | Some("") | Some("ai.onnx")) {
        return Ok(());
    }
    let Some(&(op, since, min_in, max_in, min_out, max_out, required)) =
        signature(n.op_type, n.opset)
    else {
        return Ok(());
    };
    let range = |lo: u32, hi: u32| match hi {
        _ if lo == hi => format!("{lo}"),
        VARIADIC => format!("at least {lo}"),
        _ => format!("{lo} to {hi}"),
    };
    let (ins, outs) = (n.proto.input.len(), n.proto.output.len());
    if ins < min_in as usize || ins > max_in as usize {
        return Err(Error::InvalidModel(format!(
            "{op} (opset {since}) takes {} input(s), the node lists {ins}",
            range(min_in, max_in)
        )));
    }
    if outs < min_out as usize || outs > max_out as usize {
        return Err(Error::InvalidModel(format!(
            "{op} (opset {since}) has {} output(s), the node lists {outs}",
            range(min_out, max_out)
        )));
    }
    for (i, name) in n.proto.input.iter().enumerate().take(64) {
        if name.is_empty() && required & (1 << i) != 0 {
            return Err(Error::InvalidModel(format!(
                "{op} (opset {since}): input {i} is required, the node leaves it empty"
            )));
        }
    }
    if let Some(i) = n.proto.output.iter().position(|o| o.is_empty())
        && i < min_out as usize
    {
        return Err(Error::InvalidModel(format!(
            "{op} (opset {since}): output {i} is required, the node leaves it empty"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_sorted_and_versions_resolve() {
        assert!(
            ARITY
                .windows(2)
                .all(|w| (w[0].0, w[0].1) < (w[1].0, w[1].1))
        );
        // Clip's bounds became inputs at opset 11.
        assert_eq!(signature("Clip", 10).map(|a| a.3), Some(1));
        assert_eq!(signature("Clip", 11).map(|a| a.3), Some(3));
        assert_eq!(signature("Clip", 99).map(|a| a.3), Some(3));
        // Before an operator existed, and outside the table, nothing is known.
        assert!(signature("Gelu", 19).is_none());
        assert!(signature("NoSuchOp", 13).is_none());
        // Concat is variadic.
        assert_eq!(signature("Concat", 13).map(|a| a.3), Some(VARIADIC));
    }
}
