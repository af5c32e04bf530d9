//! A backend from outside kiln, checked by kiln's suites through their public API. `toy`
//! wraps the registry's `cpu` backend (Cranelift) under a target kind of its own
//! (`toy -threads=N`, an option it declares and checks itself), is registered on a registry value next to the
//! built-in backends, and must pass the one-op suite and the random-graph suite at opt
//! levels 0..=3. Then a bug is planted in it — every `add` kernel's first f32 output
//! element is nudged by 0.5 — and the random-graph suite must catch it and shrink the
//! failing program to at most 3 ops. Exits non-zero when the clean toy fails a suite or
//! the planted bug is not caught.
//!
//! `cargo run -p kiln-testsuite --example toy_backend` (CI runs it).

use std::process::ExitCode;
use std::sync::Arc;

use kiln::layers::executor::Result;
use kiln::layers::te::tir::PrimFunc;
use kiln::{
    Backend, DType, DeviceBuffer, KernelLibrary, OptionValue, Registry, Target, TargetKind,
    TargetOption,
};
use kiln_testsuite::graph_suite::graph_suite;
use kiln_testsuite::op_suite::op_suite;
use kiln_testsuite::ops::Backend as SuiteBackend;
use kiln_testsuite::suite::{ExecBackend, OPT_LEVELS, exec_backends_of};

/// The option `toy` targets accept.
const THREADS: TargetOption = TargetOption {
    name: "threads",
    value: OptionValue::Int { min: 1, max: 64 },
    doc: "worker threads of the wrapped CPU backend",
};

/// The toy backend: the registry's `cpu` backend (Cranelift) under another name,
/// optionally with a planted bug.
#[derive(Debug)]
struct Toy {
    cpu: Arc<dyn Backend>,
    planted_bug: bool,
}

impl Toy {
    fn new(planted_bug: bool) -> std::result::Result<Toy, String> {
        let cpu = Registry::builtin()
            .backend(&TargetKind::Cpu)
            .cloned()
            .ok_or("this kiln has no `cpu` backend to wrap")?;
        Ok(Toy { cpu, planted_bug })
    }
}

impl Backend for Toy {
    fn name(&self) -> &str {
        if self.planted_bug {
            "toy (planted bug)"
        } else {
            "toy"
        }
    }

    fn target_kind(&self) -> TargetKind {
        TargetKind::Custom("toy".into())
    }

    fn options(&self) -> &[TargetOption] {
        &[THREADS]
    }

    fn test_target(&self) -> Target {
        "toy -threads=2".parse().expect("a well-formed target")
    }

    fn compile(&self, target: &Target, kernels: &[PrimFunc]) -> Result<Arc<dyn KernelLibrary>> {
        let mut cpu = Target::new(TargetKind::Cpu);
        if let Some(n) = target.option("threads") {
            cpu = cpu.with_option("threads", n)?;
        }
        let inner = self.cpu.compile(&cpu, kernels)?;
        if !self.planted_bug {
            return Ok(inner);
        }
        // The bug: the first output element of every `add` kernel writing f32 is off.
        let nudged = kernels
            .iter()
            .map(|k| {
                k.name.contains("add")
                    && k.outputs()
                        .first()
                        .and_then(|&b| k.buffer(b))
                        .is_some_and(|b| b.dtype == DType::F32)
            })
            .collect();
        Ok(Arc::new(Nudged { inner, nudged }))
    }
}

/// A library whose marked kernels write a wrong first output element.
#[derive(Debug)]
struct Nudged {
    inner: Arc<dyn KernelLibrary>,
    nudged: Vec<bool>,
}

impl KernelLibrary for Nudged {
    fn num_kernels(&self) -> usize {
        self.inner.num_kernels()
    }
    fn alloc(&self, bytes: usize) -> Result<Arc<dyn DeviceBuffer>> {
        self.inner.alloc(bytes)
    }
    fn copy_to_device(&self, dst: &dyn DeviceBuffer, src: &[u8]) -> Result<()> {
        self.inner.copy_to_device(dst, src)
    }
    fn copy_to_host(&self, src: &dyn DeviceBuffer, dst: &mut [u8]) -> Result<()> {
        self.inner.copy_to_host(src, dst)
    }
    fn call(&self, kernel: usize, args: &[Arc<dyn DeviceBuffer>]) -> Result<()> {
        self.inner.call(kernel, args)?;
        if self.nudged.get(kernel) == Some(&true)
            && let Some(out) = args.last()
        {
            let mut first = [0u8; 4];
            self.inner.synchronize()?;
            self.inner.copy_to_host(out.as_ref(), &mut first)?;
            let wrong = f32::from_le_bytes(first) + 0.5;
            self.inner
                .copy_to_device(out.as_ref(), &wrong.to_le_bytes())?;
        }
        Ok(())
    }
    fn synchronize(&self) -> Result<()> {
        self.inner.synchronize()
    }
}

/// Cases per suite run.
const CASES: u32 = 48;
/// Most recipes per random program.
const MAX_NODES: usize = 8;

/// The toy from `registry`, as the suites see it.
fn toy_of(registry: &Registry) -> std::result::Result<ExecBackend, String> {
    exec_backends_of(registry)
        .into_iter()
        .find(|b| b.name == "toy")
        .ok_or_else(|| "the registry has no `toy` backend".to_string())
}

fn run() -> std::result::Result<(), String> {
    let registry = Registry::builtin()
        .with(Arc::new(Toy::new(false)?))
        .map_err(|e| e.to_string())?;
    println!("targets: {}", registry.targets_text());
    // The toy's kind is its own, and its options are checked by it.
    let e = registry.resolve("toy -lanes=4").unwrap_err().to_string();
    if !e.contains("unknown option `-lanes`") {
        return Err(format!("toy accepted an option it does not declare: {e}"));
    }
    let toy = toy_of(&registry)?;

    op_suite(&[SuiteBackend::Exec(toy.clone())], CASES)?;
    println!("toy: the op suite passes ({CASES} cases per op family)");
    for opt in OPT_LEVELS {
        let run = graph_suite(&toy, opt, CASES, MAX_NODES)?;
        println!(
            "toy -O{opt}: the random-graph suite passes ({} cases, {} unsupported)",
            run.passed, run.unsupported
        );
    }

    let buggy = toy_of(
        &Registry::builtin()
            .with(Arc::new(Toy::new(true)?))
            .map_err(|e| e.to_string())?,
    )?;
    let Err(message) = graph_suite(&buggy, 0, CASES, MAX_NODES) else {
        return Err("the planted bug was NOT caught by the random-graph suite".to_string());
    };
    let ops: usize = message
        .split("case (")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| format!("the failure does not say its case size:\n{message}"))?;
    println!("planted bug caught, shrunk to {ops} ops:\n{message}");
    if ops > 3 {
        return Err(format!(
            "the planted bug's case shrank only to {ops} ops (want <= 3)"
        ));
    }
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => {
            println!("toy backend: every check passed");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("toy backend: {e}");
            ExitCode::FAILURE
        }
    }
}
