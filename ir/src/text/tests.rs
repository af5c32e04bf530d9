//! Tests of the text form on custom ops registered in an [`OpRegistry`], so they do not
//! depend on the built-in op families: exact printed text, round trips of hand-built
//! and random modules, parse errors with their exact line:col, and parsing random and
//! mutated text without panicking.

use std::collections::HashMap;

use half::f16;
use proptest::prelude::*;

use super::*;
use crate::attrs::{AttrReader, AttrValue, AttrWriter};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::expr::{ExprId, ExprKind, FnAttrs, Module};
use crate::op::{CustomOp, CustomOpDef, OpRegistry};
use crate::tensor::{Data, NDArray};
use crate::text::parse_module;
use crate::ty::Type;
use crate::value::Value;

/// `test.scale(x, factor=)`: `x * factor`.
#[derive(Debug)]
struct Scale(f64);

impl CustomOpDef for Scale {
    fn name(&self) -> &str {
        "test.scale"
    }
    fn infer_type(&self, args: &[Type]) -> Result<Type> {
        match args {
            [t @ Type::Tensor(_)] => Ok(t.clone()),
            _ => Err(Error::ty(
                "test.scale",
                format!("expects one tensor, got {} argument(s)", args.len()),
            )),
        }
    }
    fn eval(&self, args: &[Value], out: &Type) -> Result<Value> {
        let x = args[0].as_tensor("test.scale")?;
        let t = out
            .as_tensor()
            .ok_or_else(|| Error::Eval("not a tensor".into()))?;
        let v = x.to_f64_vec().iter().map(|a| a * self.0).collect();
        Ok(Value::Tensor(NDArray::from_f64(
            t.shape.clone(),
            t.dtype,
            v,
        )?))
    }
    fn write_attrs(&self, w: &mut AttrWriter) {
        if self.0 != 1.0 {
            w.float("factor", self.0);
        }
    }
}

/// `test.add(a, b)` of two tensors of the same type.
#[derive(Debug)]
struct Add;

impl CustomOpDef for Add {
    fn name(&self) -> &str {
        "test.add"
    }
    fn infer_type(&self, args: &[Type]) -> Result<Type> {
        let [Type::Tensor(a), Type::Tensor(b)] = args else {
            return Err(Error::ty("test.add", "expects two tensors"));
        };
        if a != b {
            return Err(Error::ty(
                "test.add",
                format!("argument 1 (rhs) has type {b} but argument 0 (lhs) has type {a}"),
            ));
        }
        Ok(args[0].clone())
    }
    fn eval(&self, args: &[Value], _out: &Type) -> Result<Value> {
        let a = args[0].as_tensor("lhs")?;
        let b = args[1].as_tensor("rhs")?;
        let v = a
            .to_f64_vec()
            .iter()
            .zip(b.to_f64_vec())
            .map(|(x, y)| x + y)
            .collect();
        Ok(Value::Tensor(NDArray::from_f64(
            a.shape().to_vec(),
            a.dtype(),
            v,
        )?))
    }
}

/// `test.dup(x)` = `(x, x)`.
#[derive(Debug)]
struct Dup;

impl CustomOpDef for Dup {
    fn name(&self) -> &str {
        "test.dup"
    }
    fn infer_type(&self, args: &[Type]) -> Result<Type> {
        match args {
            [t] => Ok(Type::Tuple(vec![t.clone(), t.clone()])),
            _ => Err(Error::ty("test.dup", "expects one argument")),
        }
    }
    fn eval(&self, args: &[Value], _out: &Type) -> Result<Value> {
        Ok(Value::Tuple(vec![args[0].clone(), args[0].clone()]))
    }
}

/// `test.attrs(x, ...)`: the identity, carrying whatever attributes it was given, to
/// test how attribute values print and parse.
#[derive(Debug)]
struct Attrs(Vec<(String, AttrValue)>);

const ATTR_NAMES: [&str; 6] = ["i", "ints", "f", "b", "s", "nested"];

impl CustomOpDef for Attrs {
    fn name(&self) -> &str {
        "test.attrs"
    }
    fn infer_type(&self, args: &[Type]) -> Result<Type> {
        args.first()
            .cloned()
            .ok_or_else(|| Error::ty("test.attrs", "expects an argument"))
    }
    fn eval(&self, args: &[Value], _out: &Type) -> Result<Value> {
        Ok(args[0].clone())
    }
    fn write_attrs(&self, w: &mut AttrWriter) {
        for (k, v) in &self.0 {
            w.value(k, v.clone());
        }
    }
}

fn registry() -> OpRegistry {
    let mut r = OpRegistry::new();
    r.register("test.scale", |r: &mut AttrReader| {
        Ok(CustomOp::new(Scale(r.float("factor")?.unwrap_or(1.0))))
    })
    .unwrap();
    r.register("test.add", |_: &mut AttrReader| Ok(CustomOp::new(Add)))
        .unwrap();
    r.register("test.dup", |_: &mut AttrReader| Ok(CustomOp::new(Dup)))
        .unwrap();
    r.register("test.attrs", |r: &mut AttrReader| {
        let pairs = ATTR_NAMES
            .iter()
            .filter_map(|&n| r.take(n).map(|v| (n.to_string(), v)))
            .collect();
        Ok(CustomOp::new(Attrs(pairs)))
    })
    .unwrap();
    r
}

fn op(def: impl CustomOpDef + 'static) -> crate::op::Op {
    crate::op::Op::Custom(CustomOp::new(def))
}

fn t23() -> Type {
    Type::tensor([2, 3], DType::F32)
}

/// A module using every kind of node: a fused primitive function, a tuple-returning
/// op, a tuple access and a tuple.
fn sample() -> Module {
    let mut m = Module::new();
    let x = m.var("x", t23());
    let y = m.var("y", t23());
    let a = m.call(op(Add), &[x, y]).unwrap();
    let s = m.call(op(Scale(0.5)), &[a]).unwrap();
    let d = m.call(op(Dup), &[s]).unwrap();
    let g = m.tuple_get(d, 1).unwrap();
    let p0 = m.var("p0", t23());
    let p1 = m.var("p1", t23());
    let q = m.call(op(Add), &[p0, p1]).unwrap();
    let r = m.call(op(Scale(2.0)), &[q]).unwrap();
    let f = m
        .function(&[p0, p1], r, FnAttrs { primitive: true })
        .unwrap();
    let c = m.call_function(f, &[g, x]).unwrap();
    let t = m.tuple(&[c, s]).unwrap();
    m.set_main(&[x, y], t).unwrap();
    m
}

const SAMPLE: &str = r#"#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3), float32], %y: Tensor[(2, 3), float32]) -> (Tensor[(2, 3), float32], Tensor[(2, 3), float32]) {
  %1 = fn (%p0: Tensor[(2, 3), float32], %p1: Tensor[(2, 3), float32], Primitive=1) -> Tensor[(2, 3), float32] {
    %0 = test.add(%p0, %p1);
    test.scale(%0, factor=2f)
  };
  %2 = test.add(%x, %y);
  %3 = test.scale(%2, factor=0.5f);
  %4 = test.dup(%3);
  %5 = %4.1;
  %6 = %1(%5, %x);
  (%6, %3)
}
"#;

fn print(m: &Module) -> String {
    print_module(m, &PrintOptions::default())
}

fn parse(text: &str) -> Result<Module> {
    parse_module_with(text, &registry())
}

/// Asserts that `m` prints, parses back and prints the same, with and without types.
fn assert_round_trip(m: &Module) -> String {
    let text = print(m);
    let back = parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(print(&back), text);
    let typed = print_module(m, &PrintOptions::with_types());
    let back = parse(&typed).unwrap_or_else(|e| panic!("{e}\n{typed}"));
    assert_eq!(print(&back), text);
    assert_eq!(print_module(&back, &PrintOptions::with_types()), typed);
    text
}

#[test]
fn prints_like_relay() {
    let m = sample();
    assert_eq!(print(&m), SAMPLE);
    assert_eq!(m.to_string(), SAMPLE);
    assert_round_trip(&m);
}

#[test]
fn prints_types_as_comments() {
    let text = print_module(&sample(), &PrintOptions::with_types());
    let t = "Tensor[(2, 3), float32]";
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[1],
        format!("def @main(%x: {t} /* ty={t} */, %y: {t} /* ty={t} */) -> ({t}, {t}) {{")
    );
    assert_eq!(
        lines[2],
        format!("  %1 = fn (%p0: {t} /* ty={t} */, %p1: {t} /* ty={t} */, Primitive=1) -> {t} {{")
    );
    assert_eq!(
        lines[3],
        format!("    %0 = test.add(%p0, %p1) /* ty={t} */;")
    );
    assert_eq!(
        lines[4],
        format!("    test.scale(%0, factor=2f) /* ty={t} */")
    );
    assert_eq!(lines[5], format!("  }} /* ty=fn ({t}, {t}) -> {t} */;"));
    assert_eq!(
        lines[8],
        format!("  %4 = test.dup(%3) /* ty=({t}, {t}) */;")
    );
    assert_eq!(lines[11], format!("  (%6, %3) /* ty=({t}, {t}) */"));
}

#[test]
fn parsed_module_has_the_same_structure_and_types() {
    let m = parse(SAMPLE).unwrap();
    let main = m.main().unwrap();
    assert_eq!(main.params.len(), 2);
    assert_eq!(m.var_name(main.params[0]), Some("x"));
    assert_eq!(m.ty(main.body), &Type::Tuple(vec![t23(), t23()]));
    let ExprKind::Tuple(fields) = m.kind(main.body) else {
        panic!("not a tuple")
    };
    let ExprKind::Call {
        callee: crate::expr::Callee::Expr(f),
        args,
    } = m.kind(fields[0])
    else {
        panic!("not a call")
    };
    assert!(m.function_at(*f).unwrap().attrs.primitive);
    assert_eq!(m.kind(args[1]), &ExprKind::Var { name: "x".into() });
    assert!(matches!(
        m.kind(args[0]),
        ExprKind::TupleGetItem { index: 1, .. }
    ));
}

#[test]
fn constants_inline_and_in_metadata() {
    let mut m = Module::new();
    let x = m.var("x", t23());
    let scalars = [
        NDArray::scalar(1.0f32),
        NDArray::scalar(-0.1f32),
        NDArray::scalar(2e-5f32),
        NDArray::scalar(f32::NAN),
        NDArray::scalar(f32::INFINITY),
        NDArray::scalar(f32::NEG_INFINITY),
        NDArray::scalar(-0.0f32),
        NDArray::scalar(f16::from_f32(1.5)),
        NDArray::scalar(3i32),
        NDArray::scalar(-3i64),
        NDArray::scalar(-128i8),
        NDArray::scalar(255u8),
        NDArray::scalar(true),
        NDArray::scalar(false),
    ];
    let mut fields = vec![x];
    for s in scalars {
        fields.push(m.constant(s));
    }
    let c0 = m.constant(NDArray::from_vec([2, 2], vec![1.0f32, 0.1, -2.5e-7, 1e30]).unwrap());
    let c1 = m.constant(NDArray::from_vec([3], vec![1i64, -2, i64::MAX]).unwrap());
    let c2 = m.constant(NDArray::from_vec([1, 2], vec![true, false]).unwrap());
    let c3 = m.constant(NDArray::from_vec([2], vec![f16::from_f32(0.1), f16::MAX]).unwrap());
    let c4 = m.constant(NDArray::from_vec([0, 2], Vec::<u8>::new()).unwrap());
    fields.extend([c1, c0, c2, c1, c3, c4]);
    let t = m.tuple(&fields).unwrap();
    m.set_main(&[x], t).unwrap();
    let text = assert_round_trip(&m);
    let body = text.lines().nth(2).unwrap();
    assert_eq!(
        body,
        "  (%x, 1f, -0.1f, 2e-05f, nanf, inff, -inff, -0f, 1.5f16, 3, -3i64, -128i8, 255u8, True, False, \
         meta[relay.Constant][0], meta[relay.Constant][1], meta[relay.Constant][2], meta[relay.Constant][0], \
         meta[relay.Constant][3], meta[relay.Constant][4])"
    );
    let meta: Vec<&str> = text
        .split("#[metadata]\n")
        .nth(1)
        .unwrap()
        .lines()
        .collect();
    assert_eq!(
        meta,
        [
            "meta[relay.Constant][0] = Tensor[(3), int64] [1, -2, 9223372036854775807]",
            "meta[relay.Constant][1] = Tensor[(2, 2), float32] [1, 0.1, -2.5e-07, 1e+30]",
            "meta[relay.Constant][2] = Tensor[(1, 2), bool] [True, False]",
            "meta[relay.Constant][3] = Tensor[(2), float16] [0.099975586, 65504]",
            "meta[relay.Constant][4] = Tensor[(0, 2), uint8] []",
        ]
    );
    // Values come back bit for bit (NaN compared by its printed form above).
    let back = parse(&text).unwrap();
    let ExprKind::Tuple(back_fields) = back.kind(back.main().unwrap().body).clone() else {
        panic!()
    };
    for (i, &f) in back_fields.iter().enumerate().skip(1) {
        let (ExprKind::Constant(a), ExprKind::Constant(b)) = (m.kind(fields[i]), back.kind(f))
        else {
            panic!()
        };
        if i != 4 {
            assert_eq!(a.to_le_bytes(), b.to_le_bytes(), "constant {i}");
            assert_eq!(a.ty(), b.ty());
        }
    }
    // The constant used twice is one node after parsing too.
    assert_eq!(back_fields[15], back_fields[18]);

    let no_meta = print_module(
        &m,
        &PrintOptions {
            types: false,
            show_meta_data: false,
        },
    );
    assert!(!no_meta.contains("#[metadata]"));
    let e = parse(&no_meta).unwrap_err().to_string();
    assert!(
        e.starts_with("parse error at 3:97: meta[relay.Constant][0] has no value"),
        "{e}"
    );
}

#[test]
fn names_are_disambiguated_and_quoted() {
    let mut m = Module::new();
    let t = Type::tensor([2], DType::F32);
    let names = ["x", "x", "x_1", "input.1", "0", "", "a \"b\"", "x"];
    let vars: Vec<ExprId> = names.iter().map(|n| m.var(*n, t.clone())).collect();
    let mut acc = vars[0];
    for &v in &vars[1..] {
        acc = m.call(op(Add), &[acc, v]).unwrap();
    }
    m.set_main(&vars, acc).unwrap();
    let text = assert_round_trip(&m);
    let header = text.lines().nth(1).unwrap();
    assert_eq!(
        header,
        r#"def @main(%x: Tensor[(2), float32], %x_2: Tensor[(2), float32], %x_1: Tensor[(2), float32], %"input.1": Tensor[(2), float32], %"0": Tensor[(2), float32], %"": Tensor[(2), float32], %"a \"b\"": Tensor[(2), float32], %x_3: Tensor[(2), float32]) -> Tensor[(2), float32] {"#
    );
}

#[test]
fn global_functions_call_each_other() {
    let mut m = Module::new();
    let t = Type::tensor([4], DType::F32);
    let a = m.var("a", t.clone());
    let body = m.call(op(Scale(3.0)), &[a]).unwrap();
    let f = m.function(&[a], body, FnAttrs::default()).unwrap();
    m.define("f", f).unwrap();
    let x = m.var("x", t.clone());
    let g = m.global("f").unwrap();
    let c = m.call_function(g, &[x]).unwrap();
    let g2 = m.global("f").unwrap();
    let c2 = m.call_function(g2, &[c]).unwrap();
    m.set_main(&[x], c2).unwrap();
    let text = assert_round_trip(&m);
    assert_eq!(
        text,
        "#[version = \"0.0.5\"]\n\
         def @f(%a: Tensor[(4), float32]) -> Tensor[(4), float32] {\n  test.scale(%a, factor=3f)\n}\n\n\
         def @main(%x: Tensor[(4), float32]) -> Tensor[(4), float32] {\n  %0 = @f(%x);\n  @f(%0)\n}\n"
    );
}

#[test]
fn tuples_of_every_size_and_shared_nodes() {
    let mut m = Module::new();
    let x = m.var("x", t23());
    let one = m.tuple(&[x]).unwrap();
    let empty = m.tuple(&[]).unwrap();
    let g = m.tuple_get(one, 0).unwrap();
    // A function whose body is also used outside it must bind that body.
    let p = m.var("p", t23());
    let inner = m.call(op(Scale(2.0)), &[g]).unwrap();
    let f = m.function(&[p], inner, FnAttrs::default()).unwrap();
    let c = m.call_function(f, &[x]).unwrap();
    let outer = m.tuple(&[one, empty, c, inner]).unwrap();
    m.set_main(&[x], outer).unwrap();
    let text = assert_round_trip(&m);
    assert_eq!(
        text,
        "#[version = \"0.0.5\"]\n\
         def @main(%x: Tensor[(2, 3), float32]) -> ((Tensor[(2, 3), float32],), (), Tensor[(2, 3), float32], Tensor[(2, 3), float32]) {\n  \
         %0 = (%x,);\n  %1 = ();\n  %4 = fn (%p: Tensor[(2, 3), float32]) -> Tensor[(2, 3), float32] {\n    \
         %2 = %0.0;\n    %3 = test.scale(%2, factor=2f);\n    %3\n  };\n  %5 = %4(%x);\n  (%0, %1, %5, %3)\n}\n"
    );
}

#[test]
fn attribute_values_print_and_parse() {
    let text = r#"
// a line comment
def @main(%x: Tensor[(2), float32]) -> Tensor[(2), float32] {
  %0 = test.attrs(%x, i=-3, ints=[1, -2, 3i64], f=0.5, b=True, s="NC\"HW\"", nested=[[1, 2], [], [1.5f, -inff]]);
  test.attrs(%0, f=2e-05f, b=None, s="")  /* trailing comment */
}
"#;
    let m = parse(text).unwrap();
    let printed = assert_round_trip(&m);
    assert_eq!(
        printed.lines().nth(2).unwrap(),
        r#"  %0 = test.attrs(%x, i=-3, ints=[1, -2, 3], f=0.5f, b=True, s="NC\"HW\"", nested=[[1, 2], [], [1.5f, -inff]]);"#
    );
    assert_eq!(
        printed.lines().nth(3).unwrap(),
        r#"  test.attrs(%0, f=2e-05f, s="")"#
    );
    let e = parse("def @main(%x: float32) { test.attrs(%x, i=1, i=2) }")
        .unwrap_err()
        .to_string();
    assert_eq!(e, "parse error at 1:46: attribute `i` is given twice");
    let e = parse("def @main(%x: float32) { test.attrs(%x, q=1) }")
        .unwrap_err()
        .to_string();
    assert_eq!(e, "parse error at 1:26: `test.attrs` has no attribute `q`");
}

#[test]
fn types_of_every_form_parse() {
    let text = "def @main(%a: Tensor[(3,), float32], %b: Tensor[(), int64], %c: bool, \
                %d: (Tensor[(1, 2), float16], (int8,)), %e: fn (float32, (uint8, int32)) -> float32, %f: ()) \
                -> ((Tensor[(3), float32],), int64, bool) {\n  ((%a,), %b, %c)\n}";
    let m = parse(text).unwrap();
    let main = m.main().unwrap();
    let tys: Vec<String> = main.params.iter().map(|&p| m.ty(p).to_string()).collect();
    assert_eq!(
        tys,
        [
            "Tensor[(3), float32]",
            "int64",
            "bool",
            "(Tensor[(1, 2), float16], (int8,))",
            "fn (float32, (uint8, int32)) -> float32",
            "()"
        ]
    );
    assert_round_trip(&m);
}

#[test]
fn binding_names_match_the_printed_text() {
    let m = sample();
    let main = m.main_id().unwrap();
    let names = binding_names(&m, main);
    let f = m.main().unwrap();
    assert_eq!(names[&main], "@main");
    assert_eq!(names[&f.params[0]], "%x");
    assert_eq!(names[&f.body], "result of @main");
    let ExprKind::Tuple(fields) = m.kind(f.body) else {
        panic!()
    };
    assert_eq!(names[&fields[0]], "%6");
    assert_eq!(names[&fields[1]], "%3");
    let ExprKind::Call {
        callee: crate::expr::Callee::Expr(func),
        ..
    } = m.kind(fields[0])
    else {
        panic!()
    };
    assert_eq!(names[func], "%1");
    let inner = m.function_at(*func).unwrap();
    assert_eq!(names[&inner.body], "result of %1");
    assert_eq!(names[&inner.params[1]], "%p1");
    // Every node reachable from @main has a name.
    let mut count = 0;
    let mut stack = vec![main];
    let mut seen = std::collections::HashSet::new();
    while let Some(id) = stack.pop() {
        if seen.insert(id) {
            assert!(names.contains_key(&id), "{id} has no name");
            count += 1;
            stack.extend(m.kind(id).children());
        }
    }
    assert_eq!(count, names.len());
    assert!(binding_names(&m, ExprId::new(0)).is_empty());
    assert!(binding_names(&m, ExprId::new(10_000)).is_empty());
}

#[test]
fn malformed_modules_print_without_panicking() {
    let mut m = Module::new();
    let x = m.var("x", t23());
    // Nodes that refer to ids that do not exist, and to each other in a cycle.
    let bad = m.push_unchecked(
        ExprKind::Call {
            callee: crate::expr::Callee::Op(op(Add)),
            args: vec![x, ExprId::new(99)],
        },
        t23(),
    );
    let a = m.push_unchecked(
        ExprKind::TupleGetItem {
            tuple: ExprId::new(3),
            index: 0,
        },
        t23(),
    );
    let b = m.push_unchecked(
        ExprKind::Tuple(vec![a, bad]),
        Type::Tuple(vec![t23(), t23()]),
    );
    let _ = b;
    let f = m.function(&[x], a, FnAttrs::default()).unwrap();
    m.define("main", f).unwrap();
    let text = print(&m);
    assert!(
        text.contains("<cycle #2>") && text.contains("<missing #99>"),
        "{text}"
    );
    let names = binding_names(&m, f);
    assert_eq!(names[&x], "%x");
    assert!(parse(&text).is_err());
}

/// `(text, expected error)`: every message with its exact line:col.
const ERRORS: &[(&str, &str)] = &[
    (
        "def @main(%x: Tensor[(2), float32]) {\n  test.scale(%x, factor=$)\n}",
        "parse error at 2:25: unexpected character `$`",
    ),
    (
        "def @main(%x: Tensor[(2), float32]) {\n  test.add(%x %x)\n}",
        "parse error at 2:15: expected `,` or `)` in the arguments of `test.add`, found `%x`",
    ),
    (
        "def @main(%x: Tensor[(2), float32]) {\n  test.scale(%z)\n}",
        "parse error at 2:14: unknown variable `%z`",
    ),
    (
        "def @main(%x: Tensor[(2), float32]) {\n  %0 = test.scale(%x);\n  %1\n}",
        "parse error at 3:3: unknown variable `%1`",
    ),
    (
        "def @main(%x: Tensor[(2), float32]) {\n  nn.foo(%x)\n}",
        "parse error at 2:3: unknown op `nn.foo`",
    ),
    (
        "def @main(%x: Tensor[(2), float32], %w: Tensor[(3), float32]) {\n  %0 = test.scale(%x);\n  test.add(%0, %w)\n}",
        "parse error at 3:3: type error in `test.add`: argument 1 (rhs) has type Tensor[(3), float32] but argument 0 (lhs) has type Tensor[(2), float32]",
    ),
    (
        "def @main(%x: float32) {\n  @g(%x)\n}",
        "parse error at 2:3: unknown global `@g`",
    ),
    (
        "def @main(%x: float32) {\n  @f(%x)\n}\ndef @f(%y: float32) {\n  %y\n}",
        "parse error at 2:3: global `@f` is used before its definition (define it earlier in the file)",
    ),
    (
        "def @main(%x: float32) {\n  %0 = test.scale(%x);\n  %0 = test.scale(%x);\n  %0\n}",
        "parse error at 3:3: duplicate binding `%0`",
    ),
    (
        "def @main(%x: float32, %x: float32) {\n  %x\n}",
        "parse error at 1:24: duplicate variable `%x`",
    ),
    (
        "def @main(%x: float32) {\n  %x\n}\ndef @main(%x: float32) {\n  %x\n}",
        "parse error at 4:5: duplicate definition of `@main`",
    ),
    (
        "def @main(%x: Tensor[(2), float32]) {\n  test.scale(%x",
        "parse error at 2:16: expected `,` or `)` in the arguments of `test.scale`, found end of input",
    ),
    (
        "def @main(%x) {\n  %x\n}",
        "parse error at 1:13: expected `:` and the parameter's type, found `)`",
    ),
    (
        "def @main(%x: Tensor[(2), float32]) -> Tensor[(3), float32] {\n  %x\n}",
        "parse error at 1:40: the declared return type Tensor[(3), float32] does not match the body's type Tensor[(2), float32]",
    ),
    (
        "def @main(%x: Tensor[(2), complex64]) {\n  %x\n}",
        "parse error at 1:27: unknown type or dtype `complex64` (kiln supports float32, float16, int8, uint8, int32, int64, bool, float64, bfloat16, int16, uint16, uint32, uint64)",
    ),
    (
        "def @main() {\n  (3q, 1)\n}",
        "parse error at 2:4: unknown literal suffix `q` in `3q` (expected f, f16, f64, bf16, i8, u8, i16, u16, i32, u32, i64 or u64)",
    ),
    (
        "def @main() {\n  300i8\n}",
        "parse error at 2:3: integer literal `300i8` does not fit int8",
    ),
    (
        "def @main(%x: float32) {\n  %x.0\n}",
        "parse error at 2:5: type error in `tuple_get_item`: cannot take field 0 of a value of type float32, which is not a tuple",
    ),
    (
        "def @main(%x: float32) {\n  %x(%x)\n}",
        "parse error at 2:3: this is not a function (its type is float32) but it is called",
    ),
    (
        "def @main(%x: float32) {\n  %x;\n}",
        "parse error at 2:5: expected `;` or `}` after an expression, found `;`",
    ),
    (
        "def @main(%x: float32) {\n  %0 = test.scale(%x)\n  %0\n}",
        "parse error at 3:3: expected `;` after a binding, found `%0`",
    ),
    (
        "def @main(%x: float32, Inline=1) {\n  %x\n}",
        "parse error at 1:24: unknown function attribute `Inline` (kiln knows `Primitive`)",
    ),
    (
        "#[version = \"0.0.5\"]\nfn @main() {}",
        "parse error at 2:1: expected `def` or `#[metadata]`, found `fn`",
    ),
    (
        "def @main() {\n  meta[relay.Constant][1]\n}\n#[metadata]\nmeta[relay.Constant][0] = Tensor[(2), int8] [1, 2]",
        "parse error at 2:3: meta[relay.Constant][1] is not defined in the #[metadata] section",
    ),
    (
        "def @main() {\n  meta[relay.Constant][0]\n}\n#[metadata]\nmeta[relay.Constant][0] = Tensor[(2), int8] [1, 2, 3]",
        "parse error at 5:45: meta[relay.Constant][0] has 3 value(s) but Tensor[(2), int8] holds 2",
    ),
    (
        "def @main() {\n  meta[relay.Constant][0]\n}\n#[metadata]\nmeta[relay.Constant][0] = Tensor[(2), uint8] [1, -2]",
        "parse error at 5:50: value -2 does not fit uint8",
    ),
    (
        "def @main() {\n  meta[relay.Constant][0]\n}\n#[metadata]\nmeta[relay.Constant][0] = Tensor[(2), float32] [1, True]",
        "parse error at 5:52: expected a float32 value, found `True`",
    ),
    (
        "def @main(%x: Tensor[(4294967296, 4294967296, 4294967296), float32]) {\n  %x\n}",
        "parse error at 1:22: shape (4294967296, 4294967296, 4294967296) has too many elements",
    ),
    (
        "def @main(%x: float32) {\n  test.scale(%x, factor=\"big\")\n}",
        "parse error at 2:3: attribute `factor` of `test.scale`: expected a number, found `\"big\"`",
    ),
    (
        "def @main(%x: float32) {\n  test.scale(factor=2f, %x)\n}",
        "parse error at 2:25: expected an attribute `name=value` (arguments come before attributes), found `%x`",
    ),
];

#[test]
fn errors_name_the_line_and_column() {
    for (text, expected) in ERRORS {
        match parse(text) {
            Ok(m) => panic!("parsed {text:?} into\n{}", print(&m)),
            Err(e) => assert_eq!(&e.to_string(), expected, "for {text:?}"),
        }
    }
}

#[test]
fn deep_nesting_is_an_error_not_a_stack_overflow() {
    let text = format!(
        "def @main(%x: float32) {{\n  {}%x{}\n}}",
        "(".repeat(5000),
        ")".repeat(5000)
    );
    let e = parse(&text).unwrap_err().to_string();
    assert_eq!(
        e,
        format!(
            "parse error at 2:{}: nesting is deeper than {MAX_NESTING} levels",
            3 + MAX_NESTING
        )
    );
    let text = format!(
        "def @main(%x: {}float32{}) {{ %x }}",
        "(".repeat(5000),
        ",)".repeat(5000)
    );
    assert!(
        parse(&text)
            .unwrap_err()
            .to_string()
            .contains("nesting is deeper")
    );
    let text = format!(
        "def @main(%x: float32) {{ test.attrs(%x, nested={}) }}",
        "[".repeat(5000)
    );
    assert!(
        parse(&text)
            .unwrap_err()
            .to_string()
            .contains("nesting is deeper")
    );
    // Just inside the limit is fine.
    let depth = MAX_NESTING - 2;
    let text = format!(
        "def @main(%x: float32) {{ {}%x{} }}",
        "(".repeat(depth),
        ")".repeat(depth)
    );
    assert!(parse(&text).is_ok());
}

#[test]
fn empty_and_header_only_texts_are_empty_modules() {
    assert!(parse("").unwrap().globals().is_empty());
    let m = parse("#[version = \"0.0.5\"]\n// nothing here\n").unwrap();
    assert!(m.globals().is_empty());
    assert_eq!(print(&m), "#[version = \"0.0.5\"]\n");
    // A module need not have @main: the verifier checks that.
    let m = parse("def @f(%x: float32) { %x }").unwrap();
    assert_eq!(m.globals()[0].0, "f");
}

#[test]
fn builtin_registry_does_not_know_custom_ops() {
    let e = parse_module("def @main(%x: float32) {\n  test.scale(%x)\n}")
        .unwrap_err()
        .to_string();
    assert_eq!(e, "parse error at 2:3: unknown op `test.scale`");
    let m: Result<Module> = "def @f(%x: float32) { %x }".parse();
    assert!(m.is_ok());
}

/// Builds a random module from a list of instructions over a pool of `(2, 3)` float32
/// values: ops, tuples, tuple accesses, scalar and tensor constants, fused functions and
/// calls of a helper global.
fn random_module(names: &[usize], steps: &[(u8, usize, usize, f64)]) -> Module {
    const NAMES: [&str; 6] = ["x", "x", "input.1", "0", "x_1", "a b"];
    let mut m = Module::new();
    let a = m.var("a", t23());
    let body = m.call(op(Scale(-1.0)), &[a]).unwrap();
    let helper = m.function(&[a], body, FnAttrs::default()).unwrap();
    m.define("helper", helper).unwrap();
    let params: Vec<ExprId> = names
        .iter()
        .map(|&i| m.var(NAMES[i % NAMES.len()], t23()))
        .collect();
    let mut pool = params.clone();
    for &(kind, i, j, x) in steps {
        let (u, v) = (pool[i % pool.len()], pool[j % pool.len()]);
        let new = match kind % 8 {
            0 => m.call(op(Add), &[u, v]).unwrap(),
            1 => m.call(op(Scale(x)), &[u]).unwrap(),
            2 => {
                let d = m.call(op(Dup), &[u]).unwrap();
                m.tuple_get(d, j % 2).unwrap()
            }
            3 => {
                let scalar = match j % 5 {
                    0 => NDArray::scalar(x as f32),
                    1 => NDArray::scalar(f16::from_f64(x)),
                    2 => NDArray::scalar((x * 1e6) as i64),
                    3 => NDArray::scalar(x > 0.0),
                    _ => NDArray::scalar((x * 10.0) as i8),
                };
                let c = m.constant(scalar);
                let t = m.tuple(&[u, c]).unwrap();
                m.tuple_get(t, 0).unwrap()
            }
            4 => {
                let dtype = DType::ALL[j % DType::ALL.len()];
                let c = m.constant(NDArray::random([2, 3], dtype, i as u64).cast(DType::F32));
                let raw = m.constant(NDArray::random([j % 3 + 1], dtype, j as u64));
                let t = m.tuple(&[c, raw]).unwrap();
                let first = m.tuple_get(t, 0).unwrap();
                m.call(op(Add), &[first, u]).unwrap()
            }
            5 => {
                let p0 = m.var("p0", t23());
                let p1 = m.var("p", t23());
                let s = m.call(op(Add), &[p0, p1]).unwrap();
                let s = m.call(op(Scale(x)), &[s]).unwrap();
                let f = m
                    .function(
                        &[p0, p1],
                        s,
                        FnAttrs {
                            primitive: j % 2 == 0,
                        },
                    )
                    .unwrap();
                m.call_function(f, &[u, v]).unwrap()
            }
            6 => {
                let t = m.tuple(&[u]).unwrap();
                m.tuple_get(t, 0).unwrap()
            }
            _ => {
                let g = m.global("helper").unwrap();
                m.call_function(g, &[u]).unwrap()
            }
        };
        pool.push(new);
    }
    let last = pool[pool.len() - 1];
    let body = if pool.len() > 2 {
        m.tuple(&[last, pool[pool.len() / 2]]).unwrap()
    } else {
        last
    };
    m.set_main(&params, body).unwrap();
    m
}

/// Tokens from which random near-valid texts are put together.
const TOKENS: &[&str] = &[
    "def",
    "@main",
    "@f",
    "(",
    ")",
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    ";",
    "=",
    ".",
    "->",
    "%x",
    "%0",
    "%1",
    "%\"q\"",
    "fn",
    "Tensor",
    "float32",
    "int8",
    "(2, 3)",
    "Tensor[(2, 3), float32]",
    "test.add",
    "test.scale",
    "test.dup",
    "test.attrs",
    "nn.conv2d",
    "factor=",
    "2f",
    "0",
    "1",
    "-1",
    "1e400f",
    "nanf",
    "True",
    "None",
    "meta",
    "[relay.Constant]",
    "[0]",
    "#[metadata]",
    "#[version = \"0.0.5\"]",
    "Primitive=1",
    "\"s\"",
    "/*",
    "*/",
    "//",
    "\n",
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn random_modules_round_trip(
        names in prop::collection::vec(0usize..6, 1..4),
        steps in prop::collection::vec((0u8..8, 0usize..64, 0usize..64, -4.0f64..4.0), 0..14),
    ) {
        let m = random_module(&names, &steps);
        assert_round_trip(&m);
    }

    #[test]
    fn random_text_never_panics(text in "\\PC{0,120}") {
        let _ = parse(&text);
    }

    #[test]
    fn random_token_soup_never_panics(toks in prop::collection::vec(prop::sample::select(TOKENS), 0..60)) {
        let text = toks.join(" ");
        if let Ok(m) = parse(&text) {
            // Whatever parses prints to text that parses back to the same text.
            let printed = print(&m);
            prop_assert_eq!(print(&parse(&printed).unwrap()), printed);
        }
    }

    #[test]
    fn mutated_modules_never_panic(
        names in prop::collection::vec(0usize..6, 1..3),
        steps in prop::collection::vec((0u8..8, 0usize..64, 0usize..64, -4.0f64..4.0), 1..8),
        edits in prop::collection::vec((0u8..4, any::<prop::sample::Index>(), any::<u8>(), prop::sample::select(TOKENS)), 1..4),
        typed in any::<bool>(),
    ) {
        let m = random_module(&names, &steps);
        let opts = PrintOptions { types: typed, show_meta_data: true };
        let mut bytes = print_module(&m, &opts).into_bytes();
        for (kind, at, byte, token) in edits {
            let i = at.index(bytes.len() + 1);
            match kind {
                0 => bytes.truncate(i),
                1 if i < bytes.len() => bytes[i] = byte,
                2 => { bytes.splice(i..i, token.bytes()); }
                _ if i < bytes.len() => { bytes.remove(i); }
                _ => {}
            }
        }
        let text = String::from_utf8_lossy(&bytes);
        match parse(&text) {
            Ok(m) => {
                let printed = print(&m);
                prop_assert_eq!(print(&parse(&printed).unwrap()), printed);
            }
            Err(Error::Parse { line, col, .. }) => prop_assert!(line >= 1 && col >= 1),
            Err(e) => prop_assert!(false, "not a parse error: {}", e),
        }
    }
}

#[test]
fn values_of_metadata_keep_their_dtype() {
    // A hand-written metadata section with every dtype.
    let text = "def @main() {\n  (meta[relay.Constant][0], meta[relay.Constant][1], meta[relay.Constant][2])\n}\n\
                #[metadata]\n\
                meta[relay.Constant][1] = Tensor[(2), int8] [-128, 127]\n\
                meta[relay.Constant][0] = Tensor[(1, 2), float16] [0.5, -inf]\n\
                meta[relay.Constant][2] = Tensor[(3), int32] [1, 2, 3]\n";
    let m = parse(text).unwrap();
    let ExprKind::Tuple(fields) = m.kind(m.main().unwrap().body).clone() else {
        panic!()
    };
    let values: HashMap<usize, Data> = fields
        .iter()
        .enumerate()
        .map(|(i, &f)| match m.kind(f) {
            ExprKind::Constant(c) => (i, c.data().clone()),
            _ => panic!("not a constant"),
        })
        .collect();
    assert_eq!(
        values[&0],
        Data::F16(vec![f16::from_f32(0.5), f16::NEG_INFINITY])
    );
    assert_eq!(values[&1], Data::I8(vec![-128, 127]));
    assert_eq!(values[&2], Data::I32(vec![1, 2, 3]));
}

#[test]
fn the_first_problem_in_the_text_is_reported() {
    // A lexing error after a complete module.
    let e = parse("def @main(%x: float32) { %x }\n$")
        .unwrap_err()
        .to_string();
    assert_eq!(e, "parse error at 2:1: unexpected character `$`");
    // A grammar error before a lexing error.
    let e = parse("def @main(%x float32) { $ }")
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "parse error at 1:14: expected `:` and the parameter's type, found `float32`"
    );
    // A lexing error in the metadata section, which is read first.
    let e = parse("def @main() {\n  meta[relay.Constant][0]\n}\n#[metadata]\nmeta[relay.Constant][0] = float32 [1 ?]")
        .unwrap_err()
        .to_string();
    assert_eq!(e, "parse error at 5:38: unexpected character `?`");
    // `#[metadata]` inside a comment or a string is not the section.
    let text = "def @main(%x: float32) {\n  // #[metadata]\n  /* #[metadata] */ test.attrs(%x, s=\"#[metadata]\")\n}";
    let m = parse(text).unwrap();
    assert!(print(&m).contains("s=\"#[metadata]\""));
}

#[test]
fn large_constants_round_trip() {
    let mut m = Module::new();
    let x = m.var("x", Type::tensor([64, 32, 3, 3], DType::F32));
    let w = m.constant(NDArray::random([64, 32, 3, 3], DType::F32, 7));
    let y = m.call(op(Add), &[x, w]).unwrap();
    m.set_main(&[x], y).unwrap();
    let text = print(&m);
    let back = parse(&text).unwrap();
    let ExprKind::Call { args, .. } = back.kind(back.main().unwrap().body) else {
        panic!()
    };
    let (ExprKind::Constant(a), ExprKind::Constant(b)) = (m.kind(w), back.kind(args[1])) else {
        panic!()
    };
    assert_eq!(a.data(), b.data());
    assert_eq!(print(&back), text);
}

/// A module over many built-in ops, for mutation tests of the whole parse and
/// type-inference path.
const BUILTIN_SAMPLE: &str = r#"
def @main(%data: Tensor[(1, 3, 8, 8), float32], %w: Tensor[(4, 3, 3, 3), float32], %g: Tensor[(4), float32], %b: Tensor[(4), float32], %m: Tensor[(4), float32], %v: Tensor[(4), float32], %fw: Tensor[(5, 16), float32], %q: Tensor[(2, 4, 6), float32], %ln: Tensor[(6), float32], %idx: Tensor[(3), int64], %fb: Tensor[(5), float32]) {
  %0 = nn.conv2d(%data, %w, strides=[2, 2], padding=[1, 1, 1, 1], dilation=[1, 1], groups=1, channels=4, kernel_size=[3, 3]);
  %1 = nn.batch_norm(%0, %g, %b, %m, %v, axis=1, epsilon=2e-05f, center=True, scale=False);
  %2 = nn.relu(%1.0);
  %3 = nn.max_pool2d(%2, pool_size=[2, 2], strides=[2, 2], padding=[0, 0, 0, 0], ceil_mode=False);
  %4 = nn.avg_pool2d(%2, pool_size=[3, 3], strides=[1, 1], padding=[1, 1, 1, 1], count_include_pad=True);
  %5 = nn.global_avg_pool2d(%4);
  %6 = nn.batch_flatten(%3);
  %7 = nn.dense(%6, %fw, units=5);
  %8 = nn.bias_add(%7, %fb, axis=1);
  %9 = nn.softmax(%7, axis=-1);
  %10 = nn.layer_norm(%q, %ln, %ln, axis=-1, epsilon=1e-05f);
  %11 = nn.batch_matmul(%10, %10, transpose_a=False, transpose_b=True);
  %12 = reshape(%11, newshape=[-1, 4, 0]);
  %13 = transpose(%12, axes=[2, 0, 1]);
  %14 = split(%13, indices_or_sections=[1, 3], axis=1);
  %15 = concatenate((%14.0, %14.2), axis=1);
  %16 = strided_slice(%15, begin=[0, 0, 1], end=[2, 2, 4], strides=[1, 1, 2], axes=[0, 1, 2]);
  %17 = take(%q, %idx, axis=2, mode="clip");
  %18 = squeeze(expand_dims(%17, axis=1, num_newaxis=2), axis=[1, 2]);
  %19 = sum(%18, axis=[0, -1], keepdims=True, exclude=False);
  %20 = clip(cast(%19, dtype="float16"), a_min=-1f, a_max=1f);
  (%5, %8, %9, %16, %20, mean(%q, axis=[1]), erf(%q))
}
"#;

/// Replacement numbers for mutating attributes and shapes.
const NUMBERS: &[&str] = &[
    "0",
    "1",
    "-1",
    "2",
    "3",
    "-7",
    "7",
    "100",
    "65535",
    "2147483647",
    "-2147483648",
    "4294967296",
    "9223372036854775807",
    "-9223372036854775808",
    "0.5f",
    "1e300",
    "-0f",
    "nanf",
];

#[test]
fn builtin_sample_parses() {
    let m = parse_module(BUILTIN_SAMPLE).unwrap_or_else(|e| panic!("{e}"));
    let text = print(&m);
    assert_eq!(print(&parse_module(&text).unwrap()), text);
}

#[test]
fn absurd_inferred_shapes_are_refused() {
    // Huge padding gives a result no later op should have to compute sizes for.
    let text = "def @main(%x: Tensor[(1, 1, 4, 4), float32], %w: Tensor[(1, 1, 1, 1), float32]) {\n  \
                nn.conv2d(%x, %w, padding=[9223372036854775807, 0, 0, 0])\n}";
    let e = parse_module(text).unwrap_err().to_string();
    assert_eq!(
        e,
        "parse error at 2:3: type error in `nn.conv2d`: the result type \
         Tensor[(1, 1, 9223372036854775811, 4), float32] has more than 2^56 elements"
    );
    // Padding whose sum overflows is refused by the type rule itself.
    let text = "def @main(%x: Tensor[(1, 1, 4, 4), float32]) {\n  \
                nn.max_pool2d(%x, pool_size=[1, 1], padding=[9223372036854775807, 0, 9223372036854775807, 0])\n}";
    let e = parse_module(text).unwrap_err().to_string();
    assert!(
        e.contains("type error in `nn.max_pool2d`") && e.contains("too large"),
        "{e}"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn mutated_builtin_attributes_never_panic(
        edits in prop::collection::vec((any::<prop::sample::Index>(), prop::sample::select(NUMBERS)), 1..4),
    ) {
        // Replace some integer tokens (attribute values and dimensions) with edge values.
        let mut text = BUILTIN_SAMPLE.to_string();
        for (at, number) in edits {
            let starts: Vec<usize> = text
                .char_indices()
                .filter(|&(i, c)| {
                    c.is_ascii_digit()
                        && !text[..i].ends_with(|p: char| p.is_ascii_alphanumeric() || p == '%' || p == '.' || p == '_')
                })
                .map(|(i, _)| i)
                .collect();
            let start = starts[at.index(starts.len())];
            let len = text[start..].find(|c: char| !c.is_ascii_alphanumeric()).unwrap_or(0);
            text.replace_range(start..start + len, number);
        }
        match parse_module(&text) {
            Ok(m) => {
                let printed = print(&m);
                prop_assert_eq!(print(&parse_module(&printed).unwrap()), printed);
            }
            Err(Error::Parse { .. }) => {}
            Err(e) => prop_assert!(false, "not a parse error: {}", e),
        }
    }
}

#[test]
fn bodies_that_are_functions_variables_or_constants() {
    let text = "def @closure(%y: float32) -> fn (float32) -> (float32, float32) {\n  \
                fn (%x: float32) -> (float32, float32) {\n    (%x, %y)\n  }\n}\n\n\
                def @id(%x: float32) -> float32 {\n  %x\n}\n\n\
                def @c() -> Tensor[(2), int8] {\n  meta[relay.Constant][0]\n}\n\n\
                #[metadata]\nmeta[relay.Constant][0] = Tensor[(2), int8] [-1, 1]\n";
    let m = parse(text).unwrap();
    assert_eq!(print(&m), format!("#[version = \"0.0.5\"]\n{text}"));
    assert_round_trip(&m);
    let names = binding_names(&m, m.global_id("closure").unwrap());
    let f = m.function_at(m.global_id("closure").unwrap()).unwrap();
    assert_eq!(names[&f.body], "result of @closure");
    let inner = m.function_at(f.body).unwrap();
    assert_eq!(names[&inner.body], "result of the function in @closure");
}

/// Found by fuzzing (`fuzz/` target `text_ir`): a binding made inside a function literal
/// used after it parses (scoping is the verifier's question), the verifier reports the
/// captured parameter, and such a module is not required to print faithfully.
#[test]
fn a_binding_used_outside_its_function_is_a_verify_error() {
    let text = "def @main(%x: Tensor[(4), float32]) {
  %0 = fn (%p0: Tensor[(4), float32], Primitive=1) {
    %1 = multiply(%p0, 2f);
    add(%1, %p0)
  };
  %2 = %0(%x);
  add(%1, %2)
}
";
    let m = parse_module(text).unwrap();
    let errors = crate::verify::verify_errors(&m);
    assert!(
        errors
            .iter()
            .any(|e| e.message.contains("%p0") && e.message.contains("not bound")),
        "{errors:?}"
    );
}
