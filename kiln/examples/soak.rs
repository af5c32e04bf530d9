//! The soak run of RELIABILITY.md: one compiled module, THREADS threads each with its own
//! executor and its own input, running for SECONDS; every output of every run must equal,
//! bit for bit, what a single executor computed for that input before the threads
//! started. The process's RSS (`VmRSS`) is sampled every few seconds and printed at the
//! start and the end with the run counts. Exits non-zero when an output differs or a run
//! fails.
//!
//! ```text
//! cargo run --release -p kiln --example soak -- zoo:resnet18 "cpu -threads=1" 8 600
//! cargo run --release -p kiln --example soak -- zoo:mlp cpu 1 0 1000000   # runs, not time
//! ```
//!
//! Arguments: MODEL TARGET THREADS SECONDS [RUNS] — with RUNS, each thread stops after
//! that many runs instead of after SECONDS (pass 0 seconds).

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use kiln::{CompiledModule, NDArray};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// The process's resident set in kB, from `/proc/self/status` (0 where there is none).
fn rss_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// A random value for every input of `lib`, seeded by `seed`.
fn inputs_for(lib: &CompiledModule, seed: u64) -> Result<Vec<(String, NDArray)>> {
    let exec = lib.create_executor()?;
    Ok(exec
        .get_input_info()
        .into_iter()
        .enumerate()
        .map(|(i, t)| {
            let v = NDArray::random_uniform(t.shape, t.dtype, seed * 1000 + i as u64, -1.0, 1.0);
            (t.name, v)
        })
        .collect())
}

/// One run of a fresh or reused executor on `inputs`.
fn run(exec: &mut kiln::GraphExecutor, inputs: &[(String, NDArray)]) -> Result<Vec<NDArray>> {
    for (name, v) in inputs {
        exec.set_input(name, v)?;
    }
    exec.run()?;
    Ok(exec.outputs()?)
}

fn soak() -> Result<bool> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [model, target, threads, seconds, rest @ ..] = args.as_slice() else {
        return Err("usage: soak MODEL TARGET THREADS SECONDS [RUNS]".into());
    };
    let threads: u64 = threads.parse()?;
    let seconds: u64 = seconds.parse()?;
    let runs: Option<u64> = rest.first().map(|r| r.parse()).transpose()?;
    let m = kiln::load(model, &Default::default())?;
    let lib = Arc::new(kiln::build(&m.module, target, &m.params, 3)?);
    let rss_start = rss_kb();
    let mut work = vec![];
    for t in 0..threads {
        let inputs = inputs_for(&lib, t + 1)?;
        let want = run(&mut lib.create_executor()?, &inputs)?;
        work.push((inputs, want));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let handles: Vec<_> = work
        .into_iter()
        .map(|(inputs, want)| {
            let (lib, stop, done) = (lib.clone(), stop.clone(), done.clone());
            std::thread::spawn(move || -> Result<u64> {
                let mut exec = lib.create_executor()?;
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) && runs.is_none_or(|r| n < r) {
                    let got = run(&mut exec, &inputs)?;
                    if got != want {
                        return Err(
                            format!("run {n}: the outputs differ from the first run").into()
                        );
                    }
                    n += 1;
                    done.fetch_add(1, Ordering::Relaxed);
                }
                Ok(n)
            })
        })
        .collect();
    let (mut samples, mut rss_max) = (vec![rss_kb()], rss_kb());
    while !handles.iter().all(|h| h.is_finished()) {
        std::thread::sleep(Duration::from_millis(200));
        let t = start.elapsed();
        if runs.is_none() && t >= Duration::from_secs(seconds) {
            stop.store(true, Ordering::Relaxed);
        }
        if t.as_millis() / 3000 >= samples.len() as u128 {
            let r = rss_kb();
            rss_max = rss_max.max(r);
            samples.push(r);
        }
    }
    let wall = start.elapsed().as_secs_f64();
    let mut ok = true;
    let mut per_thread = vec![];
    for (i, h) in handles.into_iter().enumerate() {
        match h.join().map_err(|_| "a soak thread panicked")? {
            Ok(n) => per_thread.push(n),
            Err(e) => {
                ok = false;
                eprintln!("thread {i}: {e}");
            }
        }
    }
    samples.push(rss_kb());
    let distinct = {
        let mut s = samples.clone();
        s.sort_unstable();
        s.dedup();
        s.len()
    };
    println!(
        "{model} on `{target}`: {threads} thread(s), {} runs in {wall:.1} s (per thread {per_thread:?}), \
         outputs equal: {ok}",
        done.load(Ordering::Relaxed)
    );
    println!(
        "RSS after build {rss_start} kB, first sample {} kB, last sample {} kB, max {rss_max} kB, \
         {distinct} distinct over {} samples",
        samples[0],
        samples[samples.len() - 1],
        samples.len()
    );
    Ok(ok)
}

fn main() -> ExitCode {
    match soak() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
