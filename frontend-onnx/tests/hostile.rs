//! Crafted ONNX models at the loader: degenerate and huge attributes are errors naming the
//! node (never panics or huge allocations), huge fills import lazily (no constant holds
//! them) and still compute the right values when small, and strict validation refuses
//! what ONNX forbids.

use std::collections::BTreeMap;

use kiln_frontend_onnx::proto::{
    AttributeProto, AttributeType, GraphProto, ModelProto, NodeProto, OperatorSetIdProto,
};
use kiln_frontend_onnx::{Error, from_onnx, tensor_to_proto, tensor_value_info};
use kiln_ir::interp::{Inputs, evaluate};
use kiln_ir::{ExprKind, NDArray};
use prost::Message;

fn node(op: &str, inputs: &[&str], outputs: &[&str], attrs: Vec<AttributeProto>) -> NodeProto {
    NodeProto {
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        name: Some(format!("{op}_node")),
        op_type: Some(op.into()),
        attribute: attrs,
        ..Default::default()
    }
}

fn model(shape: &[usize], nodes: Vec<NodeProto>, inits: Vec<(&str, NDArray)>) -> Vec<u8> {
    ModelProto {
        ir_version: Some(8),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(13),
        }],
        graph: Some(GraphProto {
            node: nodes,
            initializer: inits.iter().map(|(n, t)| tensor_to_proto(n, t)).collect(),
            input: vec![tensor_value_info("x", 1, shape)],
            output: vec![tensor_value_info("y", 1, &[])],
            ..Default::default()
        }),
        ..Default::default()
    }
    .encode_to_vec()
}

fn ints(v: &[i64]) -> NDArray {
    NDArray::from_vec([v.len()], v.to_vec()).unwrap()
}

fn import_err(bytes: &[u8]) -> String {
    from_onnx(bytes, &BTreeMap::new()).unwrap_err().to_string()
}

#[test]
fn a_huge_constant_of_shape_imports_without_materializing() {
    let bytes = model(
        &[1],
        vec![
            node("ConstantOfShape", &["shape"], &["c"], vec![]),
            node("Add", &["x", "c"], &["y"], vec![]),
        ],
        vec![("shape", ints(&[1 << 20, 1 << 20, 1 << 10]))],
    );
    let (m, _) = from_onnx(&bytes, &BTreeMap::new()).unwrap();
    let biggest = m
        .ids()
        .filter_map(|id| match m.kind(id) {
            ExprKind::Constant(c) => Some(c.numel()),
            _ => None,
        })
        .max()
        .unwrap_or(0);
    assert!(biggest <= 1 << 20, "a constant of {biggest} elements");
    let out = m.ty(m.main().unwrap().body).to_string();
    assert!(out.contains("(1048576, 1048576, 1024)"), "{out}");
}

#[test]
fn a_lazy_broadcast_computes_what_expand_means() {
    // Expand (3, 1) to (2, 3, 4): y[a, b, c] = x[b, 0]; with the shape as a graph
    // input-free initializer and x a graph input, nothing folds.
    let bytes = model(
        &[3, 1],
        vec![node("Expand", &["x", "shape"], &["y"], vec![])],
        vec![("shape", ints(&[2, 3, 4]))],
    );
    let (m, params) = from_onnx(&bytes, &BTreeMap::new()).unwrap();
    let mut inputs: Inputs = params.into_iter().collect();
    inputs.insert(
        "x".into(),
        NDArray::from_vec([3, 1], vec![1.5f32, -2.0, 7.0]).unwrap(),
    );
    let y = evaluate(&m, &inputs).unwrap().flatten().remove(0);
    assert_eq!(y.shape(), &[2, 3, 4]);
    let want: Vec<f32> = (0..24).map(|i| [1.5, -2.0, 7.0][(i / 4) % 3]).collect();
    assert_eq!(y.to_vec::<f32>().unwrap(), want);
}

#[test]
fn degenerate_attributes_are_errors_naming_the_node() {
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (
            model(
                &[1, 4, 2, 2],
                vec![node(
                    "DepthToSpace",
                    &["x"],
                    &["y"],
                    vec![AttributeProto {
                        name: Some("blocksize".into()),
                        r#type: Some(AttributeType::Int as i32),
                        i: Some(1 << 32),
                        ..Default::default()
                    }],
                )],
                vec![],
            ),
            "blocksize 4294967296",
        ),
        (
            model(
                &[2, 3],
                vec![node("Clip", &["x", "lo"], &["y"], vec![])],
                vec![("lo", NDArray::from_vec([0], Vec::<f32>::new()).unwrap())],
            ),
            "Clip min must hold one value",
        ),
        (
            model(
                &[2, 3],
                vec![node("Pad", &["x", "pads"], &["y"], vec![])],
                vec![("pads", ints(&[0, i64::MAX, 0, i64::MAX]))],
            ),
            "Pad pads",
        ),
        (
            model(
                &[4],
                vec![node("Gather", &["x", "i"], &["y"], vec![])],
                vec![("i", ints(&[-5]))],
            ),
            "Gather index -5 is out of range",
        ),
    ];
    for (bytes, needle) in cases {
        let e = import_err(&bytes);
        assert!(e.contains("_node") && e.contains(needle), "{e}");
    }
}

#[test]
fn strict_validation_refuses_what_onnx_forbids() {
    let relu = |x: &str, y: &str| node("Relu", &[x], &[y], vec![]);
    let e = import_err(&model(&[2], vec![relu("x", "y"), relu("x", "y")], vec![]));
    assert!(e.contains("output `y` is already defined"), "{e}");
    let e = import_err(&model(&[2], vec![relu("x", "x")], vec![]));
    assert!(e.contains("output `x` is already defined"), "{e}");
    let wrong = AttributeProto {
        name: Some("axis".into()),
        r#type: Some(AttributeType::Ints as i32),
        ints: vec![1],
        ..Default::default()
    };
    let e = import_err(&model(
        &[2, 3],
        vec![node("Softmax", &["x"], &["y"], vec![wrong.clone()])],
        vec![],
    ));
    assert!(
        e.contains("attribute `axis` must be an int, found a list of ints"),
        "{e}"
    );
    let e = import_err(&model(
        &[2, 3],
        vec![node("Softmax", &["x"], &["y"], vec![wrong.clone(), wrong])],
        vec![],
    ));
    assert!(e.contains("attribute `axis` is given twice"), "{e}");
    let mut m = ModelProto::decode(&model(&[2], vec![relu("x", "y")], vec![])[..]).unwrap();
    m.opset_import[0].version = Some(-5);
    let e = import_err(&m.encode_to_vec());
    assert!(e.contains("opset_import version -5"), "{e}");
    // --shape may fix dynamic dimensions, not contradict static ones.
    let shapes = BTreeMap::from([("x".to_string(), vec![3usize])]);
    let e = from_onnx(&model(&[2], vec![relu("x", "y")], vec![]), &shapes).unwrap_err();
    assert!(matches!(e, Error::InvalidModel(_)), "{e}");
    assert!(e.to_string().contains("the model fixes 2"), "{e}");
}

/// Every operator's arity is checked against its ONNX schema at the model's opset (not
/// only the elementwise ones'): extra inputs, missing inputs, an empty required input,
/// extra outputs are errors naming the operator and its opset.
#[test]
fn arity_is_checked_against_the_schema_of_every_operator() {
    let w = NDArray::from_vec([1, 1, 1, 1], vec![1.0f32]).unwrap();
    let cases: Vec<(NodeProto, &str)> = vec![
        (
            node("Conv", &["x", "w", "w", "w"], &["y"], vec![]),
            "Conv (opset 11) takes 2 to 3 input(s), the node lists 4",
        ),
        (
            node("Conv", &["x"], &["y"], vec![]),
            "Conv (opset 11) takes 2 to 3 input(s), the node lists 1",
        ),
        (
            node("Conv", &["", "w"], &["y"], vec![]),
            "Conv (opset 11): input 0 is required, the node leaves it empty",
        ),
        (
            node("Softmax", &["x"], &["y", "z"], vec![]),
            "Softmax (opset 13) has 1 output(s), the node lists 2",
        ),
        (
            node("Transpose", &["x", "x"], &["y"], vec![]),
            "Transpose (opset 13) takes 1 input(s), the node lists 2",
        ),
        (
            node("Concat", &[], &["y"], vec![]),
            "Concat (opset 13) takes at least 1 input(s), the node lists 0",
        ),
        (
            node("Clip", &["x", "", "", "x"], &["y"], vec![]),
            "Clip (opset 13) takes 1 to 3 input(s), the node lists 4",
        ),
    ];
    for (n, want) in cases {
        let e = import_err(&model(&[1, 1, 2, 2], vec![n], vec![("w", w.clone())]));
        assert!(e.contains(want), "{e}\nwant: {want}");
    }
    // Optional inputs left empty and optional outputs left out are fine.
    let ok = model(
        &[1, 1, 2, 2],
        vec![node("Clip", &["x", "", ""], &["y"], vec![])],
        vec![],
    );
    from_onnx(&ok, &BTreeMap::new()).unwrap();
}
