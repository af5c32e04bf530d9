//! Graph JSON: TVM's own example parses, validates and is written back in TVM's layout;
//! each broken invariant is refused with an error that names the node at fault.

use kiln_executor::Error;
use kiln_executor::graph_json::{EntryRef, GraphJson, NodeOp};
use proptest::prelude::*;

/// The example from TVM's docs/arch/debugger.rst.
const TVM_EXAMPLE: &str = r#"{"nodes":[{"op":"null","name":"x","inputs":[]},
          {"op":"tvm_op","name":"relu0","attrs":{"flatten_data":"0",
           "func_name":"fuse_l2_normalize_relu","num_inputs":"1","num_outputs":"1"},
           "inputs":[[0,0,0]]}],
 "arg_nodes":[0], "node_row_ptr":[0,1,2], "heads":[[1,0,0]],
 "attrs":{"storage_id":["list_int",[1,0]],
          "dltype":["list_str",["float32","float32"]],
          "shape":["list_shape",[[1,3,20,20],[1,3,20,20]]],
          "device_index":["list_int",[1,1]]}}"#;

const TVM_EXAMPLE_WRITTEN: &str = r#"{
  "nodes": [
    {"op":"null","name":"x","inputs":[]},
    {"op":"tvm_op","name":"relu0","attrs":{"flatten_data":"0","func_name":"fuse_l2_normalize_relu","num_inputs":"1","num_outputs":"1"},"inputs":[[0,0,0]]}
  ],
  "arg_nodes": [0],
  "heads": [
    [1,0,0]
  ],
  "attrs": {
    "storage_id": ["list_int",[1,0]],
    "dltype": ["list_str",["float32","float32"]],
    "shape": ["list_shape",[[1,3,20,20],[1,3,20,20]]],
    "device_index": ["list_int",[1,1]]
  },
  "node_row_ptr": [0,1,2]
}
"#;

/// A two-input, two-kernel graph with a multi-output node, to break in the error tests.
const TWO_KERNELS: &str = r#"{
  "nodes": [
    {"op": "null", "name": "data", "inputs": []},
    {"op": "null", "name": "weight", "inputs": []},
    {"op": "tvm_op", "name": "split", "attrs": {"func_name": "split_kernel", "num_inputs": "2", "num_outputs": "2", "flatten_data": "0"}, "inputs": [[0, 0, 0], [1, 0, 0]]},
    {"op": "tvm_op", "name": "add", "attr": {"func_name": "add_kernel", "num_inputs": "2", "num_outputs": "1"}, "inputs": [[2, 0], [2, 1]]}
  ],
  "arg_nodes": [0, 1],
  "heads": [[3, 0, 0]],
  "attrs": {
    "storage_id": ["list_int", [0, 1, 2, 3, 2]],
    "dltype": ["list_str", ["float32", "float32", "float32", "float32", "float32"]],
    "shape": ["list_shape", [[4], [4], [2], [2], [2]]],
    "storage_scope": ["list_str", ["global", "global", "global", "global", "global"]],
    "hash_hint": ["list_int", [7, 7, 7, 7, 7]]
  },
  "node_row_ptr": [0, 1, 2, 4, 5]
}"#;

fn invalid(json: &str) -> String {
    match GraphJson::parse(json) {
        Err(Error::InvalidGraph(m)) => m,
        other => panic!("expected InvalidGraph, got {other:?}"),
    }
}

/// `TWO_KERNELS` with `from` replaced by `to` (which must occur exactly once).
fn broken(from: &str, to: &str) -> String {
    assert_eq!(TWO_KERNELS.matches(from).count(), 1, "{from}");
    TWO_KERNELS.replace(from, to)
}

#[test]
fn tvm_example_parses() {
    let g = GraphJson::parse(TVM_EXAMPLE).unwrap();
    assert_eq!(g.nodes.len(), 2);
    assert_eq!(g.nodes[0].op, NodeOp::Null);
    assert_eq!(g.nodes[1].func_name(), Some("fuse_l2_normalize_relu"));
    assert_eq!(g.nodes[1].num_outputs().unwrap(), 1);
    assert_eq!(g.num_entries(), 2);
    assert_eq!(g.attrs.storage_id, vec![1, 0]);
    assert_eq!(g.attrs.shape[1], vec![1, 3, 20, 20]);
    assert_eq!(g.attrs.device_index, Some(vec![1, 1]));
    assert_eq!(g.attrs.storage_scope, None);
    assert_eq!(
        g.heads,
        vec![EntryRef {
            node: 1,
            index: 0,
            version: 0
        }]
    );
}

#[test]
fn tvm_example_is_written_in_tvm_layout_and_reads_back() {
    let g = GraphJson::parse(TVM_EXAMPLE).unwrap();
    let written = g.to_json();
    assert_eq!(written, TVM_EXAMPLE_WRITTEN);
    assert_eq!(GraphJson::parse(&written).unwrap(), g);
    // The top-level keys come in the order TVM's writer uses.
    let order: Vec<usize> = ["nodes", "arg_nodes", "heads", "attrs", "node_row_ptr"]
        .iter()
        .map(|k| written.find(&format!("\n  \"{k}\": ")).unwrap())
        .collect();
    assert!(order.windows(2).all(|w| w[0] < w[1]), "{order:?}");
    // serde's own output reads back too.
    let via_serde = serde_json::to_string(&g).unwrap();
    assert_eq!(GraphJson::parse(&via_serde).unwrap(), g);
}

#[test]
fn tvm_reader_leniencies_are_accepted_and_normalized() {
    let g = GraphJson::parse(TWO_KERNELS).unwrap();
    // `attr` is read as `attrs`; `[nid, index]` gets version 0.
    assert_eq!(g.nodes[3].func_name(), Some("add_kernel"));
    assert_eq!(
        g.nodes[3].inputs[1],
        EntryRef {
            node: 2,
            index: 1,
            version: 0
        }
    );
    assert_eq!(g.entry_id(g.nodes[3].inputs[1]), Some(3));
    assert_eq!(
        g.entry_id(EntryRef {
            node: 2,
            index: 2,
            version: 0
        }),
        None
    );
    assert!(g.attrs.extra.contains_key("hash_hint"));
    let written = g.to_json();
    assert!(
        written.contains(r#""attrs":{"func_name":"add_kernel""#),
        "{written}"
    );
    assert!(
        written.contains(r#""inputs":[[2,0,0],[2,1,0]]"#),
        "{written}"
    );
    assert!(
        written.contains(r#""hash_hint": ["list_int",[7,7,7,7,7]]"#),
        "{written}"
    );
    let again = GraphJson::parse(&written).unwrap();
    assert_eq!(again, g);
    assert_eq!(again.to_json(), written);
}

#[test]
fn syntax_and_shape_errors_say_where() {
    let m = invalid("{\"nodes\": [");
    assert!(m.contains("line 1"), "{m}");
    let m = invalid(&broken(
        r#""op": "tvm_op", "name": "add""#,
        r#""op": "relay_op", "name": "add""#,
    ));
    assert!(m.contains("unknown variant `relay_op`"), "{m}");
    let m = invalid(&broken("[[2, 0], [2, 1]]", "[[2, 0], [2, 1, 0, 0]]"));
    assert!(m.contains("[node, index, version]"), "{m}");
    let m = invalid(&broken(
        r#""shape": ["list_shape""#,
        r#""shape": ["list_int""#,
    ));
    assert!(
        m.contains("`shape` is tagged \"list_int\", expected \"list_shape\""),
        "{m}"
    );
    let m = invalid(&broken(
        r#""hash_hint": ["list_int""#,
        r#""hash_hint": ["list_str""#,
    ));
    assert!(m.contains("unknown graph attribute `hash_hint`"), "{m}");
    let m = invalid(&TWO_KERNELS.replace(
        r#""dltype": ["list_str", ["float32", "float32", "float32", "float32", "float32"]],"#,
        "",
    ));
    assert!(m.contains("lack `dltype`"), "{m}");
    let m = invalid(&broken(r#""heads""#, r#""extra_key": 1, "heads""#));
    assert!(m.contains("unknown field `extra_key`"), "{m}");
}

#[test]
fn each_invariant_names_the_node() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "[0, 1, 2, 4, 5]",
            "[0, 1, 2, 3, 4]",
            "node_row_ptr[3] is 3, expected 4",
        ),
        (
            "[0, 1, 2, 4, 5]",
            "[0, 1, 2, 4]",
            "node_row_ptr has 4 elements, expected 5",
        ),
        (
            "[[2, 0], [2, 1]]",
            "[[2, 0], [3, 0]]",
            "node 3 `add`: input 1 [3, 0] is not an output of an earlier node",
        ),
        (
            "[[2, 0], [2, 1]]",
            "[[2, 0], [2, 2]]",
            "node 3 `add`: input 1 [2, 2]",
        ),
        ("[[3, 0, 0]]", "[[3, 1, 0]]", "head 0 [3, 1]"),
        ("[[3, 0, 0]]", "[[9, 0, 0]]", "head 0 [9, 0]"),
        (
            "\"arg_nodes\": [0, 1]",
            "\"arg_nodes\": [0]",
            "node 1 `weight` is a placeholder missing from arg_nodes",
        ),
        (
            "\"arg_nodes\": [0, 1]",
            "\"arg_nodes\": [0, 1, 2]",
            "arg_nodes names node 2 `split`, which is a kernel call",
        ),
        (
            "\"arg_nodes\": [0, 1]",
            "\"arg_nodes\": [0, 1, 1]",
            "arg_nodes names node 1 `weight` twice",
        ),
        (
            "\"arg_nodes\": [0, 1]",
            "\"arg_nodes\": [0, 1, 7]",
            "arg_nodes names node 7, but there are 4 nodes",
        ),
        (
            "\"name\": \"weight\"",
            "\"name\": \"data\"",
            "node 1 `data` has the same name as placeholder node 0",
        ),
        (
            "\"num_inputs\": \"2\", \"num_outputs\": \"1\"",
            "\"num_inputs\": \"3\", \"num_outputs\": \"1\"",
            "node 3 `add`: num_inputs is 3 but it has 2 inputs",
        ),
        (
            "\"num_inputs\": \"2\", \"num_outputs\": \"1\"",
            "\"num_inputs\": \"two\", \"num_outputs\": \"1\"",
            "node 3 `add`: attribute `num_inputs` is \"two\", not a count",
        ),
        (
            "\"func_name\": \"add_kernel\", ",
            "",
            "node 3 `add`: a kernel call needs a non-empty func_name",
        ),
        (
            "\"flatten_data\": \"0\"",
            "\"flatten_data\": \"yes\"",
            "node 2 `split`: flatten_data is \"yes\"",
        ),
        (
            "\"num_outputs\": \"2\"",
            "\"num_outputs\": \"-2\"",
            "node 2 `split`: attribute `num_outputs` is \"-2\", not a count",
        ),
        (
            "[0, 1, 2, 3, 2]",
            "[0, 1, 2, -3, 2]",
            "entry 3 (node 2 `split`, output 1): storage_id -3 is negative",
        ),
        (
            "[0, 1, 2, 3, 2]",
            "[0, 1, 2, 3]",
            "attrs.storage_id has 4 elements, expected 5 (one per entry)",
        ),
        (
            "\"float32\", \"float32\"]]",
            "\"float32\", \"complex64\"]]",
            "entry 4 (node 3 `add`, output 0): unsupported: dtype `complex64`",
        ),
        (
            "[[4], [4], [2], [2], [2]]",
            "[[4], [-4], [2], [2], [2]]",
            "entry 1 (node 1 `weight`, output 0): shape [-4] has a negative dimension -4",
        ),
        (
            "[[4], [4], [2], [2], [2]]",
            "[[4], [4], [2], [2], [4611686018427387904, 4]]",
            "entry 4 (node 3 `add`, output 0): shape [4611686018427387904, 4] has more than",
        ),
        (
            "[\"global\", \"global\", \"global\", \"global\", \"global\"]",
            "[\"global\"]",
            "attrs.storage_scope has 1 elements, expected 5",
        ),
    ];
    for (from, to, want) in cases {
        let m = invalid(&broken(from, to));
        assert!(
            m.contains(want),
            "replacing {from} by {to}:\n{m}\nexpected: {want}"
        );
    }
}

#[test]
fn a_placeholder_with_inputs_is_refused() {
    let m = invalid(&broken(
        r#"{"op": "null", "name": "weight", "inputs": []}"#,
        r#"{"op": "null", "name": "weight", "inputs": [[0, 0, 0]]}"#,
    ));
    assert!(
        m.contains("node 1 `weight`: a placeholder has no inputs"),
        "{m}"
    );
}

#[test]
fn every_problem_is_reported_at_once() {
    let json = broken("[0, 1, 2, 3, 2]", "[-1, 1, 2, 3, -2]").replace("[[3, 0, 0]]", "[[8, 0, 0]]");
    let m = invalid(&json);
    assert!(m.starts_with("3 problems:"), "{m}");
    assert!(
        m.contains("entry 0 (node 0 `data`, output 0): storage_id -1"),
        "{m}"
    );
    assert!(
        m.contains("entry 4 (node 3 `add`, output 0): storage_id -2"),
        "{m}"
    );
    assert!(m.contains("head 0 [8, 0]"), "{m}");
}

#[test]
fn a_huge_output_count_does_not_allocate() {
    let m = invalid(&broken(
        "\"num_outputs\": \"2\"",
        "\"num_outputs\": \"4000000000\"",
    ));
    assert!(
        m.contains("node_row_ptr[3] is 4, expected 4000000002"),
        "{m}"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Random edits of a valid graph never panic: they parse or give an error.
    #[test]
    fn mutated_graphs_never_panic(
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<char>()), 1..6),
    ) {
        let mut chars: Vec<char> = TWO_KERNELS.chars().collect();
        for (i, c) in edits {
            let i = i.index(chars.len());
            chars[i] = c;
        }
        let json: String = chars.into_iter().collect();
        if let Ok(g) = GraphJson::parse(&json) {
            let again = GraphJson::parse(&g.to_json()).unwrap();
            prop_assert_eq!(again, g);
        }
    }

    /// Random digit edits keep the JSON well formed, so they exercise the validator.
    #[test]
    fn digit_edits_never_panic(
        edits in prop::collection::vec((any::<prop::sample::Index>(), 0u8..10), 1..6),
    ) {
        let digits: Vec<usize> = TWO_KERNELS
            .char_indices()
            .filter(|(_, c)| c.is_ascii_digit())
            .map(|(i, _)| i)
            .collect();
        let mut bytes = TWO_KERNELS.as_bytes().to_vec();
        for (i, d) in edits {
            bytes[digits[i.index(digits.len())]] = b'0' + d;
        }
        let json = String::from_utf8(bytes).unwrap();
        if let Ok(g) = GraphJson::parse(&json) {
            prop_assert_eq!(GraphJson::parse(&g.to_json()).unwrap(), g);
        }
    }
}
