//! The backend registry: the built-in targets, a backend from outside kiln registered
//! under its own target kind (its options checked by it, its modules built, exported and
//! loaded again on it), and the refusals — an unknown kind, a built-in backend that
//! cannot run here, a second backend for a served kind, a backend claiming `ref`.

use std::sync::Arc;

use kiln::layers::executor::Result as ExecResult;
use kiln::layers::te::tir::PrimFunc;
use kiln::{
    Backend, DType, KernelLibrary, Module, NDArray, OptionValue, Params, Registry, Target,
    TargetKind, TargetOption, Type, op,
};
use kiln_executor::backends::InterpBackend;

const LANES: TargetOption = TargetOption {
    name: "lanes",
    value: OptionValue::Int { min: 1, max: 8 },
    doc: "vector lanes",
};

/// The loop-IR interpreter under the kind `kind`.
#[derive(Debug)]
struct Renamed(&'static str);

impl Backend for Renamed {
    fn name(&self) -> &str {
        self.0
    }
    fn target_kind(&self) -> TargetKind {
        TargetKind::named(self.0).expect("a lowercase word")
    }
    fn options(&self) -> &[TargetOption] {
        &[LANES]
    }
    fn compile(&self, _: &Target, kernels: &[PrimFunc]) -> ExecResult<Arc<dyn KernelLibrary>> {
        InterpBackend.compile(&Target::new(TargetKind::Interp), kernels)
    }
}

fn relu_module() -> Module {
    let mut m = Module::new();
    let x = m.var("x", Type::tensor([4], DType::F32));
    let y = m
        .call(
            op::Unary {
                kind: op::UnaryKind::Relu,
            },
            &[x],
        )
        .unwrap();
    m.set_main(&[x], y).unwrap();
    m
}

#[test]
fn builtin_targets_and_refusals() {
    let r = Registry::builtin();
    // Every built-in backend is registered; `vulkan` runs where this machine has a
    // Vulkan device, `cuda` where the build has a CUDA runtime. Those that cannot run
    // are not offered, and asking for them says why.
    let unavailable: Vec<(String, String)> = r
        .unavailable()
        .map(|(b, why)| (b.target_kind().to_string(), why.to_string()))
        .collect();
    let offered = |kind: &str| !unavailable.iter().any(|(k, _)| k == kind);
    let mut names = vec!["ref", "interp", "cpu"];
    names.extend(["vulkan", "cuda"].into_iter().filter(|k| offered(k)));
    assert_eq!(r.target_names(), names);
    assert!(offered("cpu") && offered("interp"));
    for (kind, why) in &unavailable {
        assert!(!why.is_empty());
        let e = r.resolve(kind).unwrap_err().to_string();
        assert!(
            e.contains(&format!("target `{kind}` cannot run here: {why}")),
            "{e}"
        );
        // Described all the same: its options are checked, its schedules known.
        assert!(r.described(&TargetKind::named(kind).unwrap()).is_some());
        let e = r
            .resolve(&format!("{kind} -lanes=2"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown option `-lanes`"), "{e}");
    }
    assert_eq!(r.listing_names(), ["spirv", "ptx"]);
    assert!(r.resolve("ref").unwrap().backend.is_none());
    let e = r.resolve("ref -threads=2").unwrap_err().to_string();
    assert!(e.contains("target `ref` takes no options"), "{e}");
    let cpu = r.resolve("cpu -threads=03").unwrap();
    assert_eq!(cpu.backend.unwrap().target_kind(), TargetKind::Cpu);
    assert_eq!(cpu.target.to_string(), "cpu -threads=3");
    let e = r.resolve("tpu").unwrap_err().to_string();
    assert!(
        e.contains("unknown target `tpu`") && e.contains("ref, interp, cpu"),
        "{e}"
    );
    let e = r.resolve("cpu -lanes=2").unwrap_err().to_string();
    assert!(e.contains("unknown option `-lanes`"), "{e}");

    // Only `ref` builds without a backend.
    let cpu: Target = "cpu".parse().unwrap();
    let e = kiln::build_on(&relu_module(), &cpu, None, &Params::new(), 0)
        .unwrap_err()
        .to_string();
    assert!(e.contains("needs its backend"), "{e}");

    let mut r = Registry::builtin();
    let e = r.register(Arc::new(InterpBackend)).unwrap_err().to_string();
    assert!(e.contains("already served by backend `interp`"), "{e}");
    let e = r
        .register(Arc::new(Renamed("ref")))
        .unwrap_err()
        .to_string();
    assert!(e.contains("claims target `ref`"), "{e}");
}

#[test]
fn an_outside_backend_builds_exports_and_loads_under_its_own_kind() {
    let r = Registry::builtin().with(Arc::new(Renamed("toy"))).unwrap();
    assert!(r.targets_text().starts_with("ref, interp, cpu, "));
    assert!(r.targets_text().ends_with(", toy"));
    // Options are the backend's: declared ones are normalized, others refused.
    assert_eq!(
        r.resolve("toy -lanes=04").unwrap().target.to_string(),
        "toy -lanes=4"
    );
    let e = r.resolve("toy -threads=2").unwrap_err().to_string();
    assert!(
        e.contains("unknown option `-threads`") && e.contains("-lanes=N"),
        "{e}"
    );
    assert!(r.resolve("toy -lanes=9").is_err());

    let m = relu_module();
    let lib = r.build(&m, "toy -lanes=2", &Params::new(), 3).unwrap();
    assert_eq!(lib.target().to_string(), "toy -lanes=2");
    let x = NDArray::from_vec([4], vec![-1.0f32, 2.0, -3.0, 4.0]).unwrap();
    let mut ex = lib.create_executor().unwrap();
    ex.set_input("x", &x).unwrap();
    ex.run().unwrap();
    assert_eq!(
        ex.get_output(0).unwrap().to_vec::<f32>().unwrap(),
        [0.0, 2.0, 0.0, 4.0]
    );

    // The exported file names `toy`: a registry with the toy loads it on the toy, the
    // built-in one refuses it by name.
    let bytes = lib.export_bytes().unwrap();
    let back = r.load_module_bytes(&bytes).unwrap();
    assert_eq!(back.target().to_string(), "toy -lanes=2");
    let e = Registry::builtin()
        .load_module_bytes(&bytes)
        .unwrap_err()
        .to_string();
    assert!(e.contains("no backend serves target `toy`"), "{e}");
}
