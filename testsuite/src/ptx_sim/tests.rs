//! The interpreter's own checks on hand-written PTX: a kernel that is right runs, and
//! barrier divergence, shared-memory races, out-of-bounds and misaligned accesses and
//! unknown instructions are errors naming the entry and the line.

use std::sync::Arc;

use kiln_backend_cuda::PtxRuntime;
use kiln_executor::DeviceBuffer;

use super::PtxSim;

/// A module with one entry `k(p0)` of `block` threads whose body is `body`.
fn module(body: &str, threads: u32) -> String {
    format!(
        ".version 7.8\n.target sm_80\n.address_size 64\n\n.visible .entry k(\n\t.param .u64 p0\n)\n.maxntid {threads}, 1, 1\n{{\n\t.reg .pred %p<4>;\n\t.reg .b32 %r<8>;\n\t.reg .b64 %rd<8>;\n\t.reg .f32 %f<4>;\n\t.shared .align 8 .b8 sh0[64];\n\tld.param.u64 %rd0, [p0];\n\tcvta.to.global.u64 %rd1, %rd0;\n\tmov.u32 %r0, %tid.x;\n\tcvt.s64.s32 %rd2, %r0;\n{body}\tret;\n}}\n"
    )
}

/// Runs `body` on `threads` threads over a 64-byte buffer; the buffer, or the error.
fn run(body: &str, threads: u32) -> Result<Vec<u8>, String> {
    let sim = PtxSim::default();
    let m = sim
        .load(&module(body, threads))
        .map_err(|e| e.to_string())?;
    let buf: Arc<dyn DeviceBuffer> = sim.alloc(64).unwrap();
    m.launch("k", [1, 1, 1], [threads, 1, 1], std::slice::from_ref(&buf))
        .map_err(|e| e.to_string())?;
    let mut out = vec![0; 64];
    sim.copy_to_host(&*buf, &mut out).unwrap();
    Ok(out)
}

/// Each thread stores its id to shared[4·tid], syncs, stores its id + 10 there, syncs
/// (`BARRIER`), reads its neighbour's and writes it to global[4·tid].
const ROTATE: &str = "\tmov.u64 %rd3, sh0;\n\tmad.lo.s64 %rd4, %rd2, 4, %rd3;\n\tst.shared.b32 [%rd4], %r0;\n\tbar.sync 0;\n\tadd.s32 %r0, %r0, 10;\n\tst.shared.b32 [%rd4], %r0;\n\tBARRIER\n\tsub.s32 %r0, %r0, 10;\n\tadd.s32 %r1, %r0, 1;\n\trem.s32 %r1, %r1, 4;\n\tcvt.s64.s32 %rd5, %r1;\n\tmad.lo.s64 %rd5, %rd5, 4, %rd3;\n\tld.shared.s32 %r2, [%rd5];\n\tmad.lo.s64 %rd6, %rd2, 4, %rd1;\n\tst.global.b32 [%rd6], %r2;\n";

#[test]
fn a_correct_kernel_runs() {
    let out = run(&ROTATE.replace("BARRIER", "bar.sync 0;"), 4).unwrap();
    let words: Vec<u32> = out[..16]
        .chunks(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(words, [11, 12, 13, 10]);
}

#[test]
fn a_missing_barrier_is_a_race() {
    let e = run(&ROTATE.replace("BARRIER", ""), 4).unwrap_err();
    assert!(e.contains("data race on shared sh0"), "{e}");
}

#[test]
fn a_barrier_not_all_threads_reach_is_divergence() {
    let body = "\tsetp.lt.u32 %p0, %r0, 2;\n\t@%p0 bra $L1;\n\tbar.sync 0;\n$L1:\n";
    let e = run(body, 4).unwrap_err();
    assert!(e.contains("barrier divergence"), "{e}");
}

#[test]
fn out_of_bounds_and_misaligned_accesses_are_errors() {
    let oob = "\tmad.lo.s64 %rd6, %rd2, 32, %rd1;\n\tst.global.b32 [%rd6], %r0;\n";
    let e = run(oob, 4).unwrap_err();
    assert!(e.contains("out-of-bounds global access"), "{e}");
    let mis = "\tadd.s64 %rd6, %rd1, 2;\n\tst.global.b32 [%rd6], %r0;\n";
    let e = run(mis, 1).unwrap_err();
    assert!(e.contains("misaligned"), "{e}");
    let uninit = "\tmov.u64 %rd3, sh0;\n\tld.shared.f32 %f0, [%rd3];\n";
    let e = run(uninit, 1).unwrap_err();
    assert!(e.contains("uninitialized shared"), "{e}");
}

#[test]
fn unknown_instructions_are_named_with_their_line() {
    let e = run("\tmul.wide.s32 %rd6, %r0, 4;\n", 1).unwrap_err();
    assert!(
        e.contains("unsupported instruction `mul.wide.s32`") && e.contains("line 19"),
        "{e}"
    );
}
