//! Runs the crate's examples as tests, so they cannot rot.

#[path = "../examples/custom_op.rs"]
mod custom_op;

#[test]
fn custom_op_example_runs() {
    custom_op::main().unwrap();
}
