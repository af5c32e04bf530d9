//! Adding an op from outside kiln, for research: `research.swish(x, beta=...)`, i.e.
//! `x * sigmoid(beta * x)`. The op defines its type rule and reference evaluation, is
//! registered so the text parser can read it, and then runs in the reference
//! interpreter like any built-in op.
//!
//! Run with `cargo run -p kiln-ir --example custom_op`.

use kiln_ir::attrs::{AttrReader, AttrWriter};
use kiln_ir::interp::{Inputs, evaluate};
use kiln_ir::op::{CustomOp, CustomOpDef, OpRegistry};
use kiln_ir::text::{PrintOptions, parse_module_with, print_module};
use kiln_ir::{Error, NDArray, Result, Type, Value};

/// `research.swish`: elementwise `x * sigmoid(beta * x)` on float tensors.
#[derive(Debug)]
struct Swish {
    beta: f64,
}

impl CustomOpDef for Swish {
    fn name(&self) -> &str {
        "research.swish"
    }

    fn infer_type(&self, args: &[Type]) -> Result<Type> {
        match args {
            [Type::Tensor(t)] if t.dtype.is_float() => Ok(args[0].clone()),
            [other] => Err(Error::ty(
                self.name(),
                format!("argument 0 (x) must be a float tensor, got {other}"),
            )),
            _ => Err(Error::ty(
                self.name(),
                format!("expects 1 argument, got {}", args.len()),
            )),
        }
    }

    fn eval(&self, args: &[Value], out: &Type) -> Result<Value> {
        let x = args[0].as_tensor("research.swish x")?;
        let y = x
            .to_f64_vec()
            .into_iter()
            .map(|v| v / (1.0 + (-self.beta * v).exp()))
            .collect();
        let t = out.as_tensor().expect("type rule returns a tensor");
        Ok(Value::Tensor(NDArray::from_f64(
            t.shape.clone(),
            t.dtype,
            y,
        )?))
    }

    fn write_attrs(&self, w: &mut AttrWriter) {
        w.float("beta", self.beta);
    }
}

fn swish_from_attrs(r: &mut AttrReader) -> Result<CustomOp> {
    let beta = r.float("beta")?.unwrap_or(1.0);
    Ok(CustomOp::new(Swish { beta }))
}

pub fn main() -> Result<()> {
    let mut registry = OpRegistry::new();
    registry.register("research.swish", swish_from_attrs)?;

    let text = r#"
def @main(%x: Tensor[(2, 3), float32]) -> Tensor[(2, 3), float32] {
  %0 = research.swish(%x, beta=2f);
  nn.relu(%0)
}
"#;
    let module = parse_module_with(text, &registry)?;
    println!(
        "{}",
        print_module(
            &module,
            &PrintOptions {
                types: true,
                ..Default::default()
            }
        )
    );

    let mut inputs = Inputs::new();
    inputs.insert(
        "x".into(),
        NDArray::from_vec([2, 3], vec![-2.0f32, -1.0, 0.0, 0.5, 1.0, 3.0])?,
    );
    let out = evaluate(&module, &inputs)?.flatten().remove(0);
    println!("swish(x, beta=2) then relu = {}", out.preview(6));

    // The type rule protects the op like any built-in one.
    let bad = "def @main(%x: Tensor[(2), int32]) -> Tensor[(2), int32] { research.swish(%x) }";
    match parse_module_with(bad, &registry) {
        Err(e) => println!("as expected: {e}"),
        Ok(_) => {
            return Err(Error::InvalidModel(
                "an int32 swish should not type-check".into(),
            ));
        }
    }
    Ok(())
}
