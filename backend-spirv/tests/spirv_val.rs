//! Every launch of the zoo models' kernels (unfused, under the GPU default schedules)
//! passes `spirv-val --target-env vulkan1.2`. Without `spirv-val` the test prints `SKIP`
//! and passes, except under `CI=true`, where it fails.

use kiln_backend_spirv::{Features, compile_module, disasm};
use kiln_te::topi::{ScheduleKind, lower::kernels_of};

#[test]
fn zoo_kernels_validate() {
    for name in ["mlp", "resnet18"] {
        let (m, _) = kiln_ir::zoo::by_name(name).expect("zoo model");
        let kernels = kernels_of(&m, ScheduleKind::Gpu).expect("lowers");
        let compiled = compile_module(&kernels, &Features::ANY).expect("compiles");
        for k in &compiled {
            for (j, l) in k.launches.iter().enumerate() {
                match disasm::validate(&l.words).expect("runs spirv-val") {
                    None => {
                        assert!(
                            std::env::var("CI").as_deref() != Ok("true"),
                            "CI=true but spirv-val is not installed"
                        );
                        println!("SKIP spirv-val: not installed");
                        return;
                    }
                    Some(Err(e)) => panic!(
                        "{name} @{} launch {j}: spirv-val: {e}\n{}",
                        k.name,
                        disasm::disassemble(&l.words)
                    ),
                    Some(Ok(())) => {}
                }
            }
        }
    }
}
