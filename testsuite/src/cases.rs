//! Saved cases: a random program's text form as a failure prints it (and as
//! `tests/cases/*.relay` keeps it), read back into a [`Built`] with the same input and
//! weight values, so `tests/replay.rs` runs it on every backend at every opt level.

use std::collections::BTreeMap;

use kiln_executor::Params;
use kiln_ir::text::parse_module;

use crate::graphs::{Built, Fill, Weight, fill_values, ops_of, weight_values};
use crate::ops::ACCUM;

/// A saved case (`tests/cases/*.relay`): the module text, with an optional
/// `// kiln-case seed=N fill=f0,f1,...` header line choosing the inputs' values (default:
/// seed 0, uniform fills); weight params (`w0`, `wpos1`, `widx2`, `wdiv3`: [`Weight`]) are bound at build time with
/// the values the generator gave them. The tolerance is
/// [`ACCUM`] scaled by the number of calls (saved cases carry no per-op record).
pub fn replay(text: &str) -> Result<Built, String> {
    let module = parse_module(text).map_err(|e| format!("parse: {e}"))?;
    let mut seed = 0u64;
    let mut fills = vec![];
    if let Some(h) = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("// kiln-case"))
    {
        for kv in h.split_whitespace() {
            match kv.split_once('=') {
                Some(("seed", v)) => seed = v.parse().map_err(|e| format!("seed: {e}"))?,
                Some(("fill", v)) => {
                    for f in v.split(',') {
                        fills.push(match f {
                            "uniform" => Fill::Uniform,
                            "zeros" => Fill::Zeros,
                            "large" => Fill::Large,
                            "special" => Fill::Special,
                            other => return Err(format!("unknown fill `{other}`")),
                        });
                    }
                }
                _ => return Err(format!("bad case header item `{kv}`")),
            }
        }
    }
    let params = module.main_tensor_params().map_err(|e| e.to_string())?;
    let mut inputs = BTreeMap::new();
    let mut bound = Params::new();
    let mut k_in = 0;
    for (name, t) in &params {
        let v = if let Some((kind, k)) = Weight::parse(name) {
            let v = weight_values(kind, k, t, seed);
            bound.insert(name.clone(), v.clone());
            v
        } else {
            // Input `xK` is the generator's K-th input (even when earlier ones were cut
            // away); other names count in order.
            let k = name
                .strip_prefix('x')
                .and_then(|k| k.parse().ok())
                .unwrap_or(k_in);
            k_in += 1;
            let fill = fills.get(k).copied().unwrap_or(Fill::Uniform);
            fill_values(t, fill, seed.wrapping_add(k as u64 * 7919))
        };
        inputs.insert(name.clone(), v);
    }
    let ops = ops_of(&module);
    let scale = 1.0 + ops.len() as f64;
    Ok(Built {
        module,
        inputs,
        bound,
        tol: (ACCUM.0 * scale, ACCUM.1 * scale),
        ops,
        header: text
            .lines()
            .find(|l| l.trim().starts_with("// kiln-case"))
            .map_or(String::new(), |l| format!("{}\n", l.trim())),
    })
}
