//! The zoo MLP at batch 1 and 64 on `cpu -threads=2`, beside the graph-IR reference
//! interpreter: compile time and the median of 9 runs. `cargo bench -p kiln
//! --bench mlp` (a plain program, no timing assertions).

use std::collections::BTreeMap;
use std::time::Instant;

use kiln::{DType, NDArray};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    for batch in [1usize, 64] {
        let (m, params) =
            kiln::layers::ir::zoo::mlp(batch, 10, [1, 28, 28], DType::F32, 0).expect("mlp");
        let data = NDArray::random_uniform(vec![batch, 1, 28, 28], DType::F32, 7, -1.0, 1.0);
        let t = Instant::now();
        let lib = kiln::build(&m, "cpu -threads=2", &params, 2).expect("build");
        let build_ms = t.elapsed().as_secs_f64() * 1e3;
        let mut ex = lib.create_executor().expect("executor");
        ex.set_input("data", &data).expect("input");
        ex.run().expect("warm-up");
        let cpu: Vec<f64> = (0..9)
            .map(|_| {
                let t = Instant::now();
                ex.run().expect("run");
                t.elapsed().as_secs_f64() * 1e3
            })
            .collect();
        let mut all: BTreeMap<String, NDArray> = params.clone();
        all.insert("data".into(), data.clone());
        let reference: Vec<f64> = (0..9)
            .map(|_| {
                let t = Instant::now();
                kiln::layers::ir::interp::evaluate(&m, &all).expect("reference");
                t.elapsed().as_secs_f64() * 1e3
            })
            .collect();
        println!(
            "mlp batch {batch}: cpu -threads=2 build {build_ms:.1} ms, median {:.3} ms | ref median {:.3} ms",
            median(cpu),
            median(reference)
        );
    }
}
