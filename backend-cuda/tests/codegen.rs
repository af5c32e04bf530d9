//! PTX codegen on the zoo's kernels under the GPU default schedules: every kernel
//! compiles, one `.entry` per launch, one `bar.sync` per barrier of the loop IR, shared
//! and local arrays declared in their state spaces, launch dimensions from the thread
//! loops; the errors for what the codegen does not take are `Unsupported`, not panics.

use kiln_backend_cuda::{Backend, CudaBackend, compile_module, ptx_of};
use kiln_executor::{Target, TargetKind};
use kiln_ir::DType;
use kiln_te::tir::{PrimFunc, PrimFuncBuilder, Stmt, ThreadAxis};
use kiln_te::topi::{ScheduleKind, lower::kernels_of};

fn gpu_kernels(m: &kiln_ir::Module) -> Vec<PrimFunc> {
    kernels_of(m, ScheduleKind::Gpu).expect("lowers")
}

fn count_barriers(s: &Stmt) -> usize {
    let mut n = 0;
    s.visit(&mut |x| n += matches!(x, Stmt::Barrier) as usize);
    n
}

#[test]
fn resnet_and_mlp_kernels_become_ptx() {
    let (resnet, _) = kiln_ir::zoo::resnet(18, 1, [3, 32, 32], DType::F32, 0).unwrap();
    let (mlp, _) = kiln_ir::zoo::mlp(1, 10, [1, 28, 28], DType::F32, 0).unwrap();
    for m in [&resnet, &mlp] {
        let ks = gpu_kernels(m);
        let p = compile_module(&ks, 80).expect("compiles");
        assert!(p.text.starts_with("//"));
        assert!(
            p.text
                .contains(".version 7.8\n.target sm_80\n.address_size 64")
        );
        let entries = p.text.matches(".visible .entry ").count();
        assert_eq!(entries, p.launches.iter().map(Vec::len).sum::<usize>());
        let barriers: usize = ks.iter().map(|k| count_barriers(&k.body)).sum();
        assert_eq!(p.text.matches("bar.sync 0;").count(), barriers);
        for (k, ls) in ks.iter().zip(&p.launches) {
            assert!(!ls.is_empty(), "@{} has no launch", k.name);
            for l in ls {
                assert!(l.block.iter().product::<u32>() <= 1024);
                assert!(p.text.contains(&format!(".entry {}(", l.entry)));
            }
        }
    }
    // The tiled convolutions stage tiles in shared memory.
    let text = ptx_of(&gpu_kernels(&resnet)).unwrap();
    assert!(text.contains(".shared .align 8 .b8 sh"));
    assert!(text.contains("st.shared.f32") && text.contains("ld.shared.f32"));
    assert!(text.contains("mov.u32 %r0, %ctaid.") || text.contains("%tid.x"));
}

#[test]
fn launch_dims_and_guards_follow_the_thread_loops() {
    // Two sibling nests: 3 blocks of 4 threads, then 1 block of 2 threads: two launches.
    let mut b = PrimFuncBuilder::new("two");
    let x = b.input("x", [12], DType::F32);
    let y = b.output("y", [12], DType::F32);
    let z = b.output("z", [2], DType::F32);
    let (bi, ti, bj, tj) = (
        b.loop_var("bi"),
        b.loop_var("ti"),
        b.loop_var("bj"),
        b.loop_var("tj"),
    );
    use kiln_te::tir::Expr;
    let idx = Expr::var(bi) * 4 + Expr::var(ti);
    let f = b.finish(Stmt::seq([
        Stmt::thread(
            bi,
            ThreadAxis::BlockX,
            3,
            Stmt::thread(
                ti,
                ThreadAxis::ThreadX,
                4,
                Stmt::store(y, [idx.clone()], Expr::load(x, [idx])),
            ),
        ),
        Stmt::thread(
            bj,
            ThreadAxis::BlockX,
            1,
            Stmt::thread(
                tj,
                ThreadAxis::ThreadX,
                2,
                Stmt::store(z, [Expr::var(tj)], Expr::load(x, [Expr::var(tj)])),
            ),
        ),
    ]));
    let p = compile_module(&[f], 70).unwrap();
    assert_eq!(p.launches[0].len(), 2);
    assert_eq!(p.launches[0][0].grid, [3, 1, 1]);
    assert_eq!(p.launches[0][0].block, [4, 1, 1]);
    assert_eq!(p.launches[0][1].block, [2, 1, 1]);
}

#[test]
fn unsupported_input_is_an_error_not_a_panic() {
    // Vector stores are legalized into loops over their lanes; a vector `let` is
    // outside the core loop IR and named.
    let mut b = PrimFuncBuilder::new("vec");
    let x = b.output("x", [8], DType::F32);
    let t = b.loop_var("t");
    use kiln_te::tir::Expr;
    let f = b.finish(Stmt::thread(
        t,
        ThreadAxis::ThreadX,
        2,
        Stmt::store(
            x,
            [Expr::ramp(Expr::var(t) * 4, 1, 4)],
            Expr::broadcast(1.0f32, 4),
        ),
    ));
    let ptx = compile_module(&[f], 70).unwrap().text;
    assert!(ptx.contains("st.global.f32"), "{ptx}");
    let g = kiln_te::tir::parse(
        "primfn @k(%a: Buffer[(4), float32, global], out %b: Buffer[(4), float32, global]) {
  let %v: float32x4 = %a[ramp(0, 1, 4)] { %b[ramp(0, 1, 4)] = %v }
}",
    )
    .unwrap();
    let e = compile_module(&[g], 70).unwrap_err().to_string();
    assert!(
        e.contains("unsupported: legalization: a `let` of vector type"),
        "{e}"
    );
    // Without a runtime, compiling for `cuda` says what is missing.
    if !CudaBackend::has_device_runtime() {
        let e = CudaBackend::default()
            .compile(&Target::new(TargetKind::Cuda), &[])
            .unwrap_err();
        assert!(e.to_string().contains("`cuda` feature"), "{e}");
    }
    assert!(compile_module(&[], 60).is_err());
}

/// Writes the PTX of the zoo's CIFAR-sized ResNet-18 where `KILN_DUMP_PTX` says.
#[test]
fn dump_when_asked() {
    if let Ok(path) = std::env::var("KILN_DUMP_PTX") {
        let (resnet, _) = kiln_ir::zoo::resnet(18, 1, [3, 32, 32], DType::F32, 0).unwrap();
        std::fs::write(path, ptx_of(&gpu_kernels(&resnet)).unwrap()).unwrap();
    }
}
