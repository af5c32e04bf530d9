//! [`bind_params`]: Relay's `bind_params_by_name`. Replaces the `@main` parameters named in
//! `params` by constants holding their values and drops them from `@main`'s signature, so
//! that `FoldConstant` and `FoldScaleAxis` can fold weights (a weight that stays a
//! parameter is a runtime input and folds nothing).

use std::collections::{BTreeMap, HashMap};

use kiln_ir::visit::{post_order, rebuild};
use kiln_ir::{ExprId, Module, NDArray, Type};

use crate::error::{Error, Result};

/// `module` with each `@main` parameter named in `params` bound to its value. Every name
/// must be a parameter of `@main` whose type is the value's type, and no two parameters
/// may share a bound name; anything else is an `InvalidArgument` error naming it.
pub fn bind_params(module: &Module, params: &BTreeMap<String, NDArray>) -> Result<Module> {
    Ok(bind_params_to_constants(module, params)?.0)
}

/// [`bind_params`], also returning each bound name with the id of the constant that now
/// holds its value (so a caller can recognise untouched weights after optimization).
pub fn bind_params_to_constants(
    module: &Module,
    params: &BTreeMap<String, NDArray>,
) -> Result<(Module, Vec<(String, ExprId)>)> {
    let main_id = module.main_id()?;
    let main = module.main()?.clone();
    let mut m = module.clone();
    let mut map: HashMap<ExprId, ExprId> = HashMap::new();
    let mut kept = Vec::new();
    let mut bound = Vec::new();
    for &p in &main.params {
        let name = module.var_name(p).unwrap_or_default();
        let Some(value) = params.get(name) else {
            kept.push(p);
            continue;
        };
        if main
            .params
            .iter()
            .filter(|&&q| module.var_name(q) == Some(name))
            .count()
            > 1
        {
            return Err(Error::InvalidArgument(format!(
                "two parameters of @main are named %{name}; params are bound by name"
            )));
        }
        let want = module.ty(p);
        let got = Type::Tensor(value.ty());
        if &got != want {
            return Err(Error::InvalidArgument(format!(
                "param `{name}` is {got}, but @main declares %{name}: {want}"
            )));
        }
        let c = m.constant(value.clone());
        bound.push((name.to_string(), c));
        map.insert(p, c);
    }
    for name in params.keys() {
        if !main
            .params
            .iter()
            .any(|&p| module.var_name(p) == Some(name))
        {
            let known: Vec<&str> = main
                .params
                .iter()
                .filter_map(|&p| module.var_name(p))
                .collect();
            return Err(Error::InvalidArgument(format!(
                "param `{name}` is not a parameter of @main (parameters: {})",
                known.join(", ")
            )));
        }
    }
    if map.is_empty() {
        return Ok((m, bound));
    }
    for id in post_order(module, main.body) {
        let new = rebuild(&mut m, id, &map)?;
        if new != id {
            map.insert(id, new);
        }
    }
    let body = map.get(&main.body).copied().unwrap_or(main.body);
    let f = m.function(&kept, body, main.attrs.clone())?;
    debug_assert_ne!(f, main_id);
    m.define("main", f)?;
    Ok((m, bound))
}
