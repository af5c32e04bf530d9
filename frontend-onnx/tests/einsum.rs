//! `Einsum` against an independent naive einsum (a loop over every assignment of the
//! labels, written here from numpy's definition): explicit and implicit outputs, `...`
//! broadcasting, diagonals, traces, sums, outer products, chains of three operands and
//! the attention shapes; bad equations are errors. Tolerance: 1e-5 relative to the
//! output's largest magnitude (float32 summation order differs).

use std::collections::{BTreeMap, BTreeSet};

use kiln_frontend_onnx::proto::{
    self, AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto,
};
use kiln_frontend_onnx::{from_onnx, tensor_value_info};
use kiln_ir::interp::{Inputs, evaluate};
use kiln_ir::{DType, NDArray};
use prost::Message;

fn einsum_model(equation: &str, shapes: &[Vec<usize>]) -> Vec<u8> {
    let names: Vec<String> = (0..shapes.len()).map(|i| format!("x{i}")).collect();
    let node = NodeProto {
        input: names.clone(),
        output: vec!["y".into()],
        name: Some("e".into()),
        op_type: Some("Einsum".into()),
        attribute: vec![AttributeProto {
            name: Some("equation".into()),
            r#type: Some(proto::AttributeType::String as i32),
            s: Some(equation.as_bytes().to_vec()),
            ..Default::default()
        }],
        ..Default::default()
    };
    let mut output = tensor_value_info("y", 1, &[]);
    output.r#type = None; // the output's shape is inferred
    let graph = GraphProto {
        node: vec![node],
        input: names
            .iter()
            .zip(shapes)
            .map(|(n, s)| tensor_value_info(n, 1, s))
            .collect(),
        output: vec![output],
        ..Default::default()
    };
    ModelProto {
        ir_version: Some(8),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(12),
        }],
        graph: Some(graph),
        ..Default::default()
    }
    .encode_to_vec()
}

/// numpy's einsum, naively: labels per operand (with `...` expanded right-aligned and
/// broadcast), the output labels, then a sum over every assignment of all labels.
fn naive(equation: &str, xs: &[NDArray]) -> (Vec<usize>, Vec<f64>) {
    let (lhs, rhs) = match equation.split_once("->") {
        Some((l, r)) => (l, Some(r)),
        None => (equation, None),
    };
    let ell_rank = lhs
        .split(',')
        .zip(xs)
        .map(|(t, x)| {
            if t.contains("...") {
                x.shape().len() + 3 - t.trim().len()
            } else {
                0
            }
        })
        .max()
        .unwrap();
    // '0'..'9' stand for the ellipsis dimensions, right-aligned.
    let expand = |t: &str, rank: usize| -> Vec<char> {
        let t = t.trim();
        match t.find("...") {
            None => t.chars().collect(),
            Some(i) => {
                let k = rank + 3 - t.len();
                let mut v: Vec<char> = t[..i].chars().collect();
                v.extend((0..k).map(|j| char::from(b'0' + (ell_rank - k + j) as u8)));
                v.extend(t[i + 3..].chars());
                v
            }
        }
    };
    let terms: Vec<Vec<char>> = lhs
        .split(',')
        .zip(xs)
        .map(|(t, x)| expand(t, x.shape().len()))
        .collect();
    let out: Vec<char> = match rhs {
        Some(r) => expand(
            r,
            ell_rank + r.trim().len() - 3 * usize::from(r.contains("...")),
        ),
        None => {
            let all: Vec<char> = terms.iter().flatten().copied().collect();
            let mut v: Vec<char> = (0..ell_rank).map(|j| char::from(b'0' + j as u8)).collect();
            let once: BTreeSet<char> = all
                .iter()
                .copied()
                .filter(|c| c.is_alphabetic() && all.iter().filter(|d| *d == c).count() == 1)
                .collect();
            v.extend(once);
            v
        }
    };
    let mut size: BTreeMap<char, usize> = BTreeMap::new();
    for (t, x) in terms.iter().zip(xs) {
        for (c, &d) in t.iter().zip(x.shape()) {
            let s = size.entry(*c).or_insert(1);
            *s = (*s).max(d);
        }
    }
    let labels: Vec<char> = size.keys().copied().collect();
    let data: Vec<Vec<f64>> = xs.iter().map(|x| x.to_f64_vec()).collect();
    let out_shape: Vec<usize> = out.iter().map(|c| size[c]).collect();
    let mut y = vec![0.0; out_shape.iter().product()];
    let total: usize = labels.iter().map(|c| size[c]).product();
    for flat in 0..total {
        let mut rest = flat;
        let mut at: BTreeMap<char, usize> = BTreeMap::new();
        for c in labels.iter().rev() {
            at.insert(*c, rest % size[c]);
            rest /= size[c];
        }
        let mut prod = 1.0;
        for ((t, x), d) in terms.iter().zip(xs).zip(&data) {
            let mut off = 0;
            for (c, &dim) in t.iter().zip(x.shape()) {
                off = off * dim + if dim == 1 { 0 } else { at[c] };
            }
            prod *= d[off];
        }
        let mut off = 0;
        for (c, &dim) in out.iter().zip(&out_shape) {
            off = off * dim + at[c];
        }
        y[off] += prod;
    }
    (out_shape, y)
}

fn check(equation: &str, shapes: &[Vec<usize>]) {
    let xs: Vec<NDArray> = shapes
        .iter()
        .enumerate()
        .map(|(i, s)| NDArray::random(s.clone(), DType::F32, 7 + i as u64))
        .collect();
    let (m, params) = from_onnx(&einsum_model(equation, shapes), &BTreeMap::new())
        .unwrap_or_else(|e| panic!("{equation}: {e}"));
    let mut inputs = Inputs::new();
    for (i, x) in xs.iter().enumerate() {
        inputs.insert(format!("x{i}"), x.clone());
    }
    for (k, v) in params {
        inputs.insert(k, v);
    }
    let got = evaluate(&m, &inputs).unwrap().into_tensor("y").unwrap();
    let (shape, want) = naive(equation, &xs);
    assert_eq!(got.shape(), &shape[..], "{equation}: shape");
    let scale = want.iter().fold(1e-6f64, |a, b| a.max(b.abs()));
    for (g, w) in got.to_f64_vec().iter().zip(&want) {
        assert!((g - w).abs() <= 1e-5 * scale, "{equation}: {g} vs {w}");
    }
}

#[test]
fn einsum_matches_the_naive_definition() {
    let s = |v: &[usize]| v.to_vec();
    let cases: &[(&str, Vec<Vec<usize>>)] = &[
        ("bij,bjk->bik", vec![s(&[2, 3, 4]), s(&[2, 4, 5])]),
        ("ij->ji", vec![s(&[3, 4])]),
        ("ji", vec![s(&[3, 4])]),
        ("ii->i", vec![s(&[4, 4])]),
        ("ii", vec![s(&[4, 4])]),
        ("bii->bi", vec![s(&[3, 5, 5])]),
        ("i,i", vec![s(&[5]), s(&[5])]),
        ("i,i->", vec![s(&[5]), s(&[5])]),
        ("ij->", vec![s(&[3, 4])]),
        ("ij->i", vec![s(&[3, 4])]),
        ("i,j->ij", vec![s(&[3]), s(&[4])]),
        ("ij,ij->ij", vec![s(&[3, 4]), s(&[3, 4])]),
        ("ij,jk,kl->il", vec![s(&[2, 3]), s(&[3, 4]), s(&[4, 5])]),
        ("bhqd,bhkd->bhqk", vec![s(&[1, 2, 5, 4]), s(&[1, 2, 6, 4])]),
        ("bhqk,bhkd->bhqd", vec![s(&[1, 2, 5, 6]), s(&[1, 2, 6, 4])]),
        ("bqhd,bkhd->bhqk", vec![s(&[2, 5, 3, 4]), s(&[2, 6, 3, 4])]),
        ("...ij,...jk->...ik", vec![s(&[2, 3, 4, 5]), s(&[3, 5, 2])]),
        ("...ij,...jk", vec![s(&[2, 1, 4, 5]), s(&[3, 5, 2])]),
        ("...i,...i->...", vec![s(&[2, 1, 3]), s(&[4, 3])]),
        ("i...->...", vec![s(&[3, 2, 2])]),
        ("ij,jk", vec![s(&[2, 3]), s(&[3, 4])]),
        (
            "abc,cd,de->abe",
            vec![s(&[2, 2, 3]), s(&[3, 4]), s(&[4, 2])],
        ),
    ];
    for (eq, shapes) in cases {
        check(eq, shapes);
    }
}

#[test]
fn bad_equations_are_errors() {
    let cases: &[(&str, Vec<Vec<usize>>, &str)] = &[
        ("ij,jk->ik", vec![vec![2, 3]], "operands"),
        ("ijk->i", vec![vec![2, 3]], "rank"),
        ("ij->ii", vec![vec![2, 3]], "twice"),
        ("ij->k", vec![vec![2, 3]], "no operand"),
        ("ij,jk->ik", vec![vec![2, 3], vec![4, 5]], "sizes"),
        ("i1->i", vec![vec![2, 3]], "not a label"),
    ];
    for (eq, shapes, needle) in cases {
        let e = match from_onnx(&einsum_model(eq, shapes), &BTreeMap::new()) {
            Ok(_) => panic!("{eq} was accepted"),
            Err(e) => e.to_string(),
        };
        assert!(e.contains(needle) && e.contains("Einsum"), "{eq}: {e}");
    }
}
