//! Runs one launch of a parsed entry, as the PTX ISA manual describes the machine: a grid
//! of blocks, each a set of threads with their own registers and `.local` memory, sharing
//! the block's `.shared` memory, all sharing `.global` memory.
//!
//! Blocks run one after another. A block's threads run in phases: each thread runs until
//! it reaches `bar.sync` or `ret`; when every thread has stopped, they must all wait at
//! the same barrier (else: barrier divergence, an error), and the next phase starts. Within
//! a phase any interleaving is possible on a GPU, so two threads touching one shared byte
//! in the same phase, one of them writing, is a data race (an error), as is reading shared
//! or local memory that was never written. Every access must lie inside one buffer or
//! array (else out of bounds) and be aligned to its size. Integer division by zero is an
//! error (PTX leaves its result unspecified).

use std::collections::HashMap;

use super::parse::{Array, Cmp, Entry, Inst, Op, Operand, Rnd, Space, Special, Ty};

/// Where `.shared` and `.local` arrays start in their state spaces (arrays 256 bytes
/// apart, so a stray address hits no array).
const ARRAY_BASE: u64 = 0x1000;

/// Each thread may run at most this many instructions per launch.
const STEP_LIMIT: u64 = 1 << 28;

/// A global buffer of the launch: its device address and bytes.
pub struct Global {
    pub base: u64,
    pub data: Vec<u8>,
}

/// The addresses of an entry's arrays in their spaces.
fn array_bases(arrays: &[Array]) -> Vec<u64> {
    let mut next: HashMap<bool, u64> = HashMap::new();
    arrays
        .iter()
        .map(|a| {
            let n = next.entry(a.space == Space::Shared).or_insert(ARRAY_BASE);
            let base = *n;
            *n += (a.bytes as u64).div_ceil(256) * 256 + 256;
            base
        })
        .collect()
}

struct Thread {
    tid: [u32; 3],
    linear: u32,
    pc: usize,
    regs: Vec<u64>,
    /// Per `.local` array (by entry array index; empty for shared arrays).
    local: Vec<Vec<u8>>,
    local_written: Vec<Vec<bool>>,
    done: bool,
    steps: u64,
}

/// Who touched a shared byte in the current phase.
#[derive(Clone, Copy)]
struct Touch {
    phase: u64,
    writer: Option<u32>,
    /// One reader, or `None` with `many` set.
    reader: Option<u32>,
    many: bool,
}

struct SharedArr {
    data: Vec<u8>,
    written: Vec<bool>,
    touch: Vec<Touch>,
}

/// Runs `entry` on `grid` × `block` with `params` (device addresses) over `globals`.
pub fn launch(
    entry: &Entry,
    grid: [u32; 3],
    block: [u32; 3],
    params: &[u64],
    globals: &mut [Global],
) -> Result<(), String> {
    if params.len() != entry.params {
        return Err(format!(
            "{} takes {} parameters, got {}",
            entry.name,
            entry.params,
            params.len()
        ));
    }
    if let Some(m) = entry.maxntid {
        let (want, max): (u32, u32) = (block.iter().product(), m.iter().product());
        if want > max || block.iter().zip(&m).any(|(b, m)| b > m) {
            return Err(format!(
                "{}: block {block:?} exceeds .maxntid {m:?}",
                entry.name
            ));
        }
    }
    let shared_bytes: usize = entry
        .arrays
        .iter()
        .filter(|a| a.space == Space::Shared)
        .map(|a| a.bytes)
        .sum();
    if shared_bytes > 48 * 1024 {
        return Err(format!(
            "{}: {shared_bytes} bytes of shared memory",
            entry.name
        ));
    }
    let bases = array_bases(&entry.arrays);
    for bz in 0..grid[2] {
        for by in 0..grid[1] {
            for bx in 0..grid[0] {
                let mut b = Block {
                    entry,
                    bases: &bases,
                    ctaid: [bx, by, bz],
                    ntid: block,
                    nctaid: grid,
                    params,
                    globals,
                    shared: entry
                        .arrays
                        .iter()
                        .map(|a| {
                            let n = if a.space == Space::Shared { a.bytes } else { 0 };
                            SharedArr {
                                data: vec![0; n],
                                written: vec![false; n],
                                touch: vec![
                                    Touch {
                                        phase: u64::MAX,
                                        writer: None,
                                        reader: None,
                                        many: false,
                                    };
                                    n
                                ],
                            }
                        })
                        .collect(),
                    phase: 0,
                };
                b.run()?;
            }
        }
    }
    Ok(())
}

struct Block<'a> {
    entry: &'a Entry,
    bases: &'a [u64],
    ctaid: [u32; 3],
    ntid: [u32; 3],
    nctaid: [u32; 3],
    params: &'a [u64],
    globals: &'a mut [Global],
    shared: Vec<SharedArr>,
    phase: u64,
}

enum Stop {
    Barrier(usize),
    Exit,
}

fn f32_of(v: u64) -> f32 {
    f32::from_bits(v as u32)
}

fn bits_of(f: f32) -> u64 {
    f.to_bits() as u64
}

/// A register value read as `ty` (sign-extended for signed types).
fn as_i64(v: u64, ty: Ty) -> i64 {
    match ty {
        Ty::S8 => v as u8 as i8 as i64,
        Ty::U8 => v as u8 as i64,
        Ty::S32 => v as u32 as i32 as i64,
        Ty::U32 | Ty::B32 => v as u32 as i64,
        Ty::B16 | Ty::F16 => v as u16 as i64,
        _ => v as i64,
    }
}

/// `v` written to a register of `ty`'s width.
fn to_reg(v: i64, ty: Ty) -> u64 {
    match ty {
        Ty::S8 => v as i8 as i32 as u32 as u64,
        Ty::U8 => v as u8 as u64,
        Ty::B16 | Ty::F16 => v as u16 as u64,
        Ty::S32 | Ty::U32 | Ty::B32 | Ty::F32 => v as u32 as u64,
        Ty::Pred => (v != 0) as u64,
        _ => v as u64,
    }
}

fn is_wide(ty: Ty) -> bool {
    matches!(ty, Ty::S64 | Ty::U64 | Ty::B64)
}

fn is_unsigned(ty: Ty) -> bool {
    matches!(ty, Ty::U8 | Ty::U32 | Ty::U64 | Ty::B32 | Ty::B64 | Ty::B16)
}

impl Block<'_> {
    fn run(&mut self) -> Result<(), String> {
        let [nx, ny, nz] = self.ntid;
        let mut threads = vec![];
        for z in 0..nz {
            for y in 0..ny {
                for x in 0..nx {
                    threads.push(Thread {
                        tid: [x, y, z],
                        linear: (z * ny + y) * nx + x,
                        pc: 0,
                        regs: vec![0; self.entry.num_regs],
                        local: self
                            .entry
                            .arrays
                            .iter()
                            .map(|a| vec![0; if a.space == Space::Local { a.bytes } else { 0 }])
                            .collect(),
                        local_written: self
                            .entry
                            .arrays
                            .iter()
                            .map(|a| vec![false; if a.space == Space::Local { a.bytes } else { 0 }])
                            .collect(),
                        done: false,
                        steps: 0,
                    });
                }
            }
        }
        loop {
            let mut at: Vec<(u32, Option<usize>)> = vec![];
            for t in threads.iter_mut().filter(|t| !t.done) {
                match self.run_thread(t)? {
                    Stop::Barrier(pc) => at.push((t.linear, Some(pc))),
                    Stop::Exit => {
                        t.done = true;
                        at.push((t.linear, None));
                    }
                }
            }
            let waiting: Vec<&(u32, Option<usize>)> = at.iter().filter(|a| a.1.is_some()).collect();
            let Some(&&(first_t, Some(first_pc))) = waiting.first() else {
                return Ok(());
            };
            let line = |pc: usize| self.entry.code[pc].line;
            if let Some(&&(other, o)) = at.iter().find(|a| a.1 != Some(first_pc)).as_ref() {
                let what = match o {
                    Some(pc) => format!("waits at the bar.sync of line {}", line(pc)),
                    None => "has exited".to_string(),
                };
                return Err(format!(
                    "barrier divergence in {} block {:?}: thread {first_t} waits at the bar.sync of PTX line {}, thread {other} {what}",
                    self.entry.name,
                    self.ctaid,
                    line(first_pc)
                ));
            }
            self.phase += 1;
        }
    }

    fn fail(&self, t: &Thread, inst: &Inst, what: impl std::fmt::Display) -> String {
        format!(
            "{} PTX line {}, block {:?} thread {:?}: {what}",
            self.entry.name, inst.line, self.ctaid, t.tid
        )
    }

    fn val(&self, t: &Thread, o: &Operand) -> u64 {
        match o {
            Operand::Reg(r) => t.regs[*r],
            Operand::Imm(v) => *v as u64,
            Operand::F32(b) => *b as u64,
            Operand::Special(s) => match s {
                Special::Tid(a) => t.tid[*a] as u64,
                Special::Ntid(a) => self.ntid[*a] as u64,
                Special::Ctaid(a) => self.ctaid[*a] as u64,
                Special::Nctaid(a) => self.nctaid[*a] as u64,
            },
            Operand::Array(k) => self.bases[*k],
            Operand::Param(_) | Operand::Addr(..) | Operand::Label(_) => 0,
        }
    }

    fn run_thread(&mut self, t: &mut Thread) -> Result<Stop, String> {
        let code = &self.entry.code;
        loop {
            let Some(inst) = code.get(t.pc) else {
                return Ok(Stop::Exit);
            };
            t.steps += 1;
            if t.steps > STEP_LIMIT {
                return Err(self.fail(t, inst, "runs more than 2^28 instructions"));
            }
            t.pc += 1;
            if let Some((p, neg)) = inst.guard
                && (t.regs[p] != 0) == neg
            {
                continue;
            }
            match &inst.op {
                Op::Bar => return Ok(Stop::Barrier(t.pc - 1)),
                Op::Ret => return Ok(Stop::Exit),
                Op::Bra => {
                    let Operand::Label(target) = inst.args[0] else {
                        return Err(self.fail(t, inst, "branch to a non-label"));
                    };
                    t.pc = target;
                }
                _ => self.step(t, inst)?,
            }
        }
    }

    fn dst(&self, t: &Thread, inst: &Inst) -> Result<usize, String> {
        match inst.args[0] {
            Operand::Reg(r) => Ok(r),
            _ => Err(self.fail(t, inst, "destination is not a register")),
        }
    }

    fn step(&mut self, t: &mut Thread, inst: &Inst) -> Result<(), String> {
        let mut vals = [0u64; 4];
        for (k, o) in inst.args.iter().enumerate().take(4) {
            vals[k] = self.val(t, o);
        }
        let a = |k: usize| vals[k];
        let result: u64 = match &inst.op {
            Op::Mov(ty) => to_reg(a(1) as i64, *ty),
            Op::Add(ty) | Op::Sub(ty) | Op::Mul(ty) | Op::Min(ty) | Op::Max(ty)
                if *ty == Ty::F32 =>
            {
                let (x, y) = (f32_of(a(1)), f32_of(a(2)));
                bits_of(match &inst.op {
                    Op::Add(_) => x + y,
                    Op::Sub(_) => x - y,
                    Op::Mul(_) => x * y,
                    // PTX min/max: a NaN operand yields the other operand.
                    Op::Min(_) => {
                        if x.is_nan() {
                            y
                        } else if y.is_nan() || x <= y {
                            x
                        } else {
                            y
                        }
                    }
                    _ => {
                        if x.is_nan() {
                            y
                        } else if y.is_nan() || x >= y {
                            x
                        } else {
                            y
                        }
                    }
                })
            }
            Op::Div(Ty::F32) => bits_of(f32_of(a(1)) / f32_of(a(2))),
            Op::Add(ty)
            | Op::Sub(ty)
            | Op::Mul(ty)
            | Op::Div(ty)
            | Op::Rem(ty)
            | Op::Min(ty)
            | Op::Max(ty) => {
                let (x, y) = (as_i64(a(1), *ty), as_i64(a(2), *ty));
                let wide = is_wide(*ty);
                let r = match &inst.op {
                    Op::Add(_) => x.wrapping_add(y),
                    Op::Sub(_) => x.wrapping_sub(y),
                    Op::Mul(_) => x.wrapping_mul(y),
                    Op::Div(_) | Op::Rem(_) => {
                        if y == 0 {
                            return Err(self.fail(t, inst, "integer division by zero"));
                        }
                        let div = matches!(inst.op, Op::Div(_));
                        if wide || !is_unsigned(*ty) {
                            let (x, y) = if wide {
                                (x, y)
                            } else {
                                (x as i32 as i64, y as i32 as i64)
                            };
                            if wide {
                                if div {
                                    x.wrapping_div(y)
                                } else {
                                    x.wrapping_rem(y)
                                }
                            } else {
                                let (x, y) = (x as i32, y as i32);
                                (if div {
                                    x.wrapping_div(y)
                                } else {
                                    x.wrapping_rem(y)
                                }) as i64
                            }
                        } else if div {
                            x / y
                        } else {
                            x % y
                        }
                    }
                    Op::Min(_) => {
                        if is_unsigned(*ty) && wide {
                            (x as u64).min(y as u64) as i64
                        } else {
                            x.min(y)
                        }
                    }
                    _ => {
                        if is_unsigned(*ty) && wide {
                            (x as u64).max(y as u64) as i64
                        } else {
                            x.max(y)
                        }
                    }
                };
                to_reg(r, *ty)
            }
            Op::And(ty) | Op::Or(ty) | Op::Xor(ty) => {
                let (x, y) = (a(1), a(2));
                let r = match &inst.op {
                    Op::And(_) => x & y,
                    Op::Or(_) => x | y,
                    _ => x ^ y,
                };
                to_reg(r as i64, *ty)
            }
            Op::Not(ty) => {
                if *ty == Ty::Pred {
                    (a(1) == 0) as u64
                } else {
                    to_reg(!a(1) as i64, *ty)
                }
            }
            Op::Mad(Ty::F32) => bits_of(f32_of(a(1)).mul_add(f32_of(a(2)), f32_of(a(3)))),
            Op::Mad(ty) => {
                let (x, y, z) = (as_i64(a(1), *ty), as_i64(a(2), *ty), as_i64(a(3), *ty));
                to_reg(x.wrapping_mul(y).wrapping_add(z), *ty)
            }
            Op::Neg(Ty::F32) => a(1) ^ 0x8000_0000,
            Op::Abs(Ty::F32) => a(1) & 0x7fff_ffff,
            Op::Neg(ty) => to_reg(as_i64(a(1), *ty).wrapping_neg(), *ty),
            Op::Abs(ty) => {
                let x = as_i64(a(1), *ty);
                if is_wide(*ty) {
                    x.wrapping_abs() as u64
                } else {
                    to_reg((x as i32).wrapping_abs() as i64, *ty)
                }
            }
            Op::Sqrt => bits_of(f32_of(a(1)).sqrt()),
            Op::Rcp => bits_of(1.0 / f32_of(a(1))),
            // The approximations, computed exactly (within their documented error).
            Op::Ex2 => bits_of((f32_of(a(1)) as f64).exp2() as f32),
            Op::Lg2 => bits_of((f32_of(a(1)) as f64).log2() as f32),
            Op::Copysign => {
                let (s, m) = (a(1) as u32, a(2) as u32);
                ((m & 0x7fff_ffff) | (s & 0x8000_0000)) as u64
            }
            Op::Setp(c, ty) => {
                let r = if *ty == Ty::F32 {
                    let (x, y) = (f32_of(a(1)), f32_of(a(2)));
                    let nan = x.is_nan() || y.is_nan();
                    match c {
                        Cmp::Eq => x == y,
                        Cmp::Ne => !nan && x != y,
                        Cmp::Neu => x != y,
                        Cmp::Lt => x < y,
                        Cmp::Le => x <= y,
                        Cmp::Gt => x > y,
                        Cmp::Ge => x >= y,
                        Cmp::Nan => nan,
                    }
                } else {
                    let (x, y) = (as_i64(a(1), *ty), as_i64(a(2), *ty));
                    let (ux, uy) = (x as u64, y as u64);
                    let uns = is_unsigned(*ty);
                    match c {
                        Cmp::Eq => x == y,
                        Cmp::Ne | Cmp::Neu => x != y,
                        Cmp::Lt if uns => ux < uy,
                        Cmp::Le if uns => ux <= uy,
                        Cmp::Gt if uns => ux > uy,
                        Cmp::Ge if uns => ux >= uy,
                        Cmp::Lt => x < y,
                        Cmp::Le => x <= y,
                        Cmp::Gt => x > y,
                        Cmp::Ge => x >= y,
                        Cmp::Nan => return Err(self.fail(t, inst, "setp.nan on integers")),
                    }
                };
                r as u64
            }
            Op::TestNan => f32_of(a(1)).is_nan() as u64,
            Op::Selp(ty) => {
                let v = if a(3) != 0 { a(1) } else { a(2) };
                to_reg(v as i64, *ty)
            }
            Op::Cvt { dst, src, rnd } => self.cvt(t, inst, *dst, *src, *rnd, a(1))?,
            Op::Cvta => a(1),
            Op::Ld(space, ty) => {
                let raw = self.load(t, inst, *space, *ty)?;
                match ty {
                    Ty::S8 => to_reg(raw as u8 as i8 as i64, Ty::S8),
                    _ => raw,
                }
            }
            Op::St(space, ty) => {
                return self.store(t, inst, *space, *ty, a(1));
            }
            Op::Bar | Op::Bra | Op::Ret => unreachable!("handled by run_thread"),
        };
        let d = self.dst(t, inst)?;
        t.regs[d] = result;
        Ok(())
    }

    fn cvt(
        &self,
        t: &Thread,
        inst: &Inst,
        dst: Ty,
        src: Ty,
        rnd: Option<Rnd>,
        v: u64,
    ) -> Result<u64, String> {
        let float = |ty: Ty| matches!(ty, Ty::F32 | Ty::F16);
        let read_f = |v: u64| -> f64 {
            if src == Ty::F16 {
                half::f16::from_bits(v as u16).to_f64()
            } else {
                f32_of(v) as f64
            }
        };
        Ok(match (float(src), float(dst)) {
            (false, false) => to_reg(as_i64(v, src), dst),
            (true, false) => {
                let x = read_f(v);
                let r = match rnd {
                    Some(Rnd::Rzi) => x.trunc(),
                    Some(Rnd::Rmi) => x.floor(),
                    Some(Rnd::Rpi) => x.ceil(),
                    Some(Rnd::Rn) => x.round_ties_even(),
                    None => return Err(self.fail(t, inst, "float-to-int cvt needs a rounding")),
                };
                // Saturating to the destination's range; NaN becomes 0.
                match dst {
                    Ty::S8 => to_reg(r as i8 as i64, dst),
                    Ty::U8 => to_reg(r as u8 as i64, dst),
                    Ty::S32 => to_reg(r as i32 as i64, dst),
                    Ty::U32 => to_reg(r as u32 as i64, dst),
                    Ty::S64 => r as i64 as u64,
                    Ty::U64 => r as u64,
                    _ => return Err(self.fail(t, inst, "bad cvt destination")),
                }
            }
            (false, true) => {
                let x = as_i64(v, src);
                if rnd != Some(Rnd::Rn) {
                    return Err(self.fail(t, inst, "int-to-float cvt needs .rn"));
                }
                let x = if is_unsigned(src) && is_wide(src) {
                    v as f64
                } else {
                    x as f64
                };
                if dst == Ty::F16 {
                    half::f16::from_f64(x).to_bits() as u64
                } else if is_wide(src) {
                    bits_of(if is_unsigned(src) {
                        v as f32
                    } else {
                        v as i64 as f32
                    })
                } else {
                    bits_of(x as f32)
                }
            }
            (true, true) => match (src, dst) {
                (Ty::F16, Ty::F32) => bits_of(half::f16::from_bits(v as u16).to_f32()),
                (Ty::F32, Ty::F16) => {
                    if rnd != Some(Rnd::Rn) {
                        return Err(self.fail(t, inst, "f32-to-f16 cvt needs .rn"));
                    }
                    half::f16::from_f32(f32_of(v)).to_bits() as u64
                }
                _ => {
                    let x = f32_of(v);
                    bits_of(match rnd {
                        Some(Rnd::Rzi) => x.trunc(),
                        Some(Rnd::Rmi) => x.floor(),
                        Some(Rnd::Rpi) => x.ceil(),
                        Some(Rnd::Rn) => x.round_ties_even(),
                        None => x,
                    })
                }
            },
        })
    }

    /// The address of a memory operand.
    fn address(&self, t: &Thread, inst: &Inst, k: usize) -> Result<u64, String> {
        match inst.args[k] {
            Operand::Addr(r, off) => Ok(t.regs[r].wrapping_add(off as u64)),
            _ => Err(self.fail(t, inst, "memory operand is not [register+offset]")),
        }
    }

    fn load(&mut self, t: &mut Thread, inst: &Inst, space: Space, ty: Ty) -> Result<u64, String> {
        let n = ty.bytes();
        if space == Space::Param {
            return match inst.args[1] {
                Operand::Param(p) if ty == Ty::U64 => Ok(self.params[p]),
                _ => Err(self.fail(t, inst, "ld.param other than .u64 [pN]")),
            };
        }
        let addr = self.address(t, inst, 1)?;
        if addr % n as u64 != 0 {
            return Err(self.fail(t, inst, format!("misaligned {n}-byte load at {addr:#x}")));
        }
        let mut buf = [0u8; 8];
        match space {
            Space::Global => {
                let (g, off) = self.global(t, inst, addr, n)?;
                buf[..n].copy_from_slice(&self.globals[g].data[off..off + n]);
            }
            Space::Shared | Space::Local => {
                let (k, off) = self.array(t, inst, space, addr, n)?;
                let phase = self.phase;
                if space == Space::Shared {
                    let me = t.linear;
                    let sa = &mut self.shared[k];
                    for b in off..off + n {
                        if !sa.written[b] {
                            return Err(self.fail(
                                t,
                                inst,
                                format!(
                                    "read of uninitialized shared memory ({} byte {b}): no thread wrote it before (or a barrier is missing before another thread's write)",
                                    self.entry.arrays[k].name
                                ),
                            ));
                        }
                        let tc = &mut sa.touch[b];
                        if tc.phase != phase {
                            *tc = Touch {
                                phase,
                                writer: None,
                                reader: Some(me),
                                many: false,
                            };
                            continue;
                        }
                        if let Some(w) = tc.writer.filter(|&w| w != me) {
                            return Err(format!(
                                "{} PTX line {}, block {:?}: data race on shared {} byte {b}: thread {me} reads what thread {w} wrote since the last barrier",
                                self.entry.name, inst.line, self.ctaid, self.entry.arrays[k].name
                            ));
                        }
                        match tc.reader {
                            Some(r) if r != me => {
                                tc.reader = None;
                                tc.many = true;
                            }
                            None if !tc.many => tc.reader = Some(me),
                            _ => {}
                        }
                    }
                    buf[..n].copy_from_slice(&self.shared[k].data[off..off + n]);
                } else {
                    if t.local_written[k][off..off + n].iter().any(|w| !w) {
                        return Err(self.fail(
                            t,
                            inst,
                            format!(
                                "read of uninitialized local memory ({})",
                                self.entry.arrays[k].name
                            ),
                        ));
                    }
                    buf[..n].copy_from_slice(&t.local[k][off..off + n]);
                }
            }
            Space::Param => unreachable!("handled above"),
        }
        Ok(u64::from_le_bytes(buf))
    }

    fn store(
        &mut self,
        t: &mut Thread,
        inst: &Inst,
        space: Space,
        ty: Ty,
        v: u64,
    ) -> Result<(), String> {
        let n = ty.bytes();
        let addr = self.address(t, inst, 0)?;
        if addr % n as u64 != 0 {
            return Err(self.fail(t, inst, format!("misaligned {n}-byte store at {addr:#x}")));
        }
        let bytes = v.to_le_bytes();
        match space {
            Space::Global => {
                let (g, off) = self.global(t, inst, addr, n)?;
                self.globals[g].data[off..off + n].copy_from_slice(&bytes[..n]);
            }
            Space::Shared => {
                let (k, off) = self.array(t, inst, space, addr, n)?;
                let (phase, me) = (self.phase, t.linear);
                let sa = &mut self.shared[k];
                for b in off..off + n {
                    let tc = &mut sa.touch[b];
                    if tc.phase == phase {
                        let other = tc
                            .writer
                            .filter(|&w| w != me)
                            .or(tc.reader.filter(|&r| r != me))
                            .or(if tc.many { Some(u32::MAX) } else { None });
                        if let Some(o) = other {
                            let who = if o == u32::MAX {
                                "other threads".to_string()
                            } else {
                                format!("thread {o}")
                            };
                            return Err(format!(
                                "{} PTX line {}, block {:?}: data race on shared {} byte {b}: thread {me} writes what {who} accessed since the last barrier",
                                self.entry.name, inst.line, self.ctaid, self.entry.arrays[k].name
                            ));
                        }
                        tc.writer = Some(me);
                    } else {
                        *tc = Touch {
                            phase,
                            writer: Some(me),
                            reader: None,
                            many: false,
                        };
                    }
                    sa.written[b] = true;
                }
                sa.data[off..off + n].copy_from_slice(&bytes[..n]);
            }
            Space::Local => {
                let (k, off) = self.array(t, inst, space, addr, n)?;
                t.local[k][off..off + n].copy_from_slice(&bytes[..n]);
                t.local_written[k][off..off + n]
                    .iter_mut()
                    .for_each(|w| *w = true);
            }
            Space::Param => return Err(self.fail(t, inst, "st.param")),
        }
        Ok(())
    }

    /// The global buffer holding `[addr, addr + n)` and the offset in it.
    fn global(
        &self,
        t: &Thread,
        inst: &Inst,
        addr: u64,
        n: usize,
    ) -> Result<(usize, usize), String> {
        self.globals
            .iter()
            .position(|g| addr >= g.base && addr + n as u64 <= g.base + g.data.len() as u64)
            .map(|k| (k, (addr - self.globals[k].base) as usize))
            .ok_or_else(|| self.fail(t, inst, format!("out-of-bounds global access of {n} bytes at {addr:#x} (in no buffer of the launch)")))
    }

    /// The `.shared`/`.local` array holding `[addr, addr + n)` and the offset in it.
    fn array(
        &self,
        t: &Thread,
        inst: &Inst,
        space: Space,
        addr: u64,
        n: usize,
    ) -> Result<(usize, usize), String> {
        self.entry
            .arrays
            .iter()
            .enumerate()
            .position(|(k, a)| {
                a.space == space
                    && addr >= self.bases[k]
                    && addr + n as u64 <= self.bases[k] + a.bytes as u64
            })
            .map(|k| (k, (addr - self.bases[k]) as usize))
            .ok_or_else(|| {
                self.fail(
                    t,
                    inst,
                    format!("out-of-bounds {space:?} access of {n} bytes at {addr:#x}"),
                )
            })
    }
}
