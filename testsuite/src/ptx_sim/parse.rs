//! PTX text → entries of decoded instructions, for the subset kiln's CUDA backend emits
//! (read from the PTX ISA manual, not from that backend): module directives, `.entry`
//! with `.param .u64` parameters, `.maxntid`, `.reg` declarations with `<N>` ranges,
//! `.shared`/`.local` byte arrays, labels, predicated instructions. Anything else is an
//! error naming the line.

use std::collections::HashMap;

/// A value or state-space type of an instruction.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Ty {
    Pred,
    B16,
    B32,
    B64,
    U8,
    S8,
    U32,
    S32,
    U64,
    S64,
    F16,
    F32,
}

impl Ty {
    fn parse(s: &str) -> Option<Ty> {
        Some(match s {
            "pred" => Ty::Pred,
            "b16" => Ty::B16,
            "b32" => Ty::B32,
            "b64" => Ty::B64,
            "u8" => Ty::U8,
            "s8" => Ty::S8,
            "u32" => Ty::U32,
            "s32" => Ty::S32,
            "u64" => Ty::U64,
            "s64" => Ty::S64,
            "f16" => Ty::F16,
            "f32" => Ty::F32,
            _ => return None,
        })
    }

    /// Size in bytes of a memory access of this type.
    pub fn bytes(self) -> usize {
        match self {
            Ty::Pred | Ty::U8 | Ty::S8 => 1,
            Ty::B16 | Ty::F16 => 2,
            Ty::B32 | Ty::U32 | Ty::S32 | Ty::F32 => 4,
            Ty::B64 | Ty::U64 | Ty::S64 => 8,
        }
    }
}

/// A state space of memory.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Space {
    Global,
    Shared,
    Local,
    Param,
}

/// A special register.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Special {
    Tid(usize),
    Ntid(usize),
    Ctaid(usize),
    Nctaid(usize),
}

/// An instruction operand.
#[derive(Clone, Debug, PartialEq)]
pub enum Operand {
    Reg(usize),
    Imm(i64),
    /// A float immediate's bits (`0f3F800000`).
    F32(u32),
    Special(Special),
    /// `[reg+offset]`.
    Addr(usize, i64),
    /// `[pN]`: a kernel parameter.
    Param(usize),
    /// A `.shared` or `.local` array: its index in [`Entry::arrays`].
    Array(usize),
    /// A branch target: an instruction index.
    Label(usize),
}

/// Comparison of `setp`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Cmp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    /// Unordered not-equal (true if either is NaN).
    Neu,
    /// Either operand is NaN.
    Nan,
}

/// Rounding of `cvt` and float arithmetic.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Rnd {
    Rn,
    Rzi,
    Rmi,
    Rpi,
}

/// A decoded operation.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    Mov(Ty),
    Add(Ty),
    Sub(Ty),
    /// `mul.lo` on integers, `mul.rn` on floats.
    Mul(Ty),
    Div(Ty),
    Rem(Ty),
    Min(Ty),
    Max(Ty),
    And(Ty),
    Or(Ty),
    Xor(Ty),
    Not(Ty),
    /// `mad.lo` (integers) or `fma.rn` (floats).
    Mad(Ty),
    Neg(Ty),
    Abs(Ty),
    Sqrt,
    Rcp,
    Ex2,
    Lg2,
    Copysign,
    Setp(Cmp, Ty),
    TestNan,
    Selp(Ty),
    Cvt {
        dst: Ty,
        src: Ty,
        rnd: Option<Rnd>,
    },
    Cvta,
    Ld(Space, Ty),
    St(Space, Ty),
    Bar,
    Bra,
    Ret,
}

/// One instruction: its source line, optional guard predicate (register, negated), op
/// and operands (destination first).
#[derive(Clone, Debug)]
pub struct Inst {
    pub line: usize,
    pub guard: Option<(usize, bool)>,
    pub op: Op,
    pub args: Vec<Operand>,
}

/// A `.shared` or `.local` array of an entry.
#[derive(Clone, Debug)]
pub struct Array {
    pub name: String,
    pub space: Space,
    pub bytes: usize,
}

/// A kernel entry.
#[derive(Clone, Debug)]
pub struct Entry {
    pub name: String,
    pub params: usize,
    pub maxntid: Option<[u32; 3]>,
    pub num_regs: usize,
    pub arrays: Vec<Array>,
    pub code: Vec<Inst>,
}

/// A parsed module.
#[derive(Clone, Debug)]
pub struct Module {
    pub entries: HashMap<String, Entry>,
}

fn err(line: usize, what: impl std::fmt::Display) -> String {
    format!("PTX line {line}: {what}")
}

/// Parses a module.
pub fn parse(text: &str) -> Result<Module, String> {
    let lines: Vec<(usize, String)> = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.split("//").next().unwrap_or("").trim().to_string()))
        .filter(|(_, l)| !l.is_empty())
        .collect();
    let mut entries = HashMap::new();
    let mut i = 0;
    let mut saw_version = false;
    while i < lines.len() {
        let (n, l) = &lines[i];
        if l.starts_with(".version") {
            saw_version = true;
            i += 1;
        } else if l.starts_with(".target") || l.starts_with(".address_size") {
            if l.starts_with(".address_size") && !l.ends_with("64") {
                return Err(err(*n, "only .address_size 64 is supported"));
            }
            i += 1;
        } else if l.starts_with(".visible .entry ") || l.starts_with(".entry ") {
            let (e, next) = parse_entry(&lines, i)?;
            entries.insert(e.name.clone(), e);
            i = next;
        } else {
            return Err(err(*n, format!("unexpected `{l}` at module level")));
        }
    }
    if !saw_version {
        return Err("PTX module without .version".into());
    }
    Ok(Module { entries })
}

fn parse_entry(lines: &[(usize, String)], start: usize) -> Result<(Entry, usize), String> {
    let (n0, head) = &lines[start];
    let name = head
        .split(".entry ")
        .nth(1)
        .and_then(|r| r.split('(').next())
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| err(*n0, "entry without a name"))?
        .to_string();
    let mut i = start + 1;
    let mut params = 0;
    // Parameters up to `)`.
    loop {
        let (n, l) = lines
            .get(i)
            .ok_or_else(|| err(*n0, "unterminated parameter list"))?;
        i += 1;
        if l.starts_with(')') {
            break;
        }
        let p = l.trim_end_matches(',');
        let want = format!(".param .u64 p{params}");
        if p != want {
            return Err(err(*n, format!("parameter `{p}`: expected `{want}`")));
        }
        params += 1;
    }
    let mut maxntid = None;
    loop {
        let (n, l) = lines
            .get(i)
            .ok_or_else(|| err(*n0, "entry without a body"))?;
        i += 1;
        if l == "{" {
            break;
        }
        if let Some(r) = l.strip_prefix(".maxntid") {
            let v: Vec<u32> = r
                .split(',')
                .map(|x| x.trim().parse().map_err(|_| err(*n, "bad .maxntid")))
                .collect::<Result<_, _>>()?;
            let mut d = [1u32; 3];
            for (k, x) in v.iter().enumerate().take(3) {
                d[k] = *x;
            }
            maxntid = Some(d);
        } else {
            return Err(err(*n, format!("unexpected `{l}` before the entry body")));
        }
    }
    let mut regs: HashMap<String, (usize, usize)> = HashMap::new();
    let mut num_regs = 0;
    let mut arrays: Vec<Array> = vec![];
    let mut labels: HashMap<String, usize> = HashMap::new();
    let mut raw: Vec<(usize, String)> = vec![];
    loop {
        let (n, l) = lines
            .get(i)
            .ok_or_else(|| err(*n0, "unterminated entry body"))?;
        i += 1;
        if l == "}" {
            break;
        }
        if let Some(r) = l.strip_prefix(".reg ") {
            // `.reg .b32 %r<12>;`
            let r = r.trim_end_matches(';');
            let mut parts = r.split_whitespace();
            let _ty = parts.next();
            let decl = parts.next().ok_or_else(|| err(*n, "bad .reg"))?;
            let (prefix, count) = decl
                .strip_suffix('>')
                .and_then(|d| d.split_once('<'))
                .ok_or_else(|| err(*n, "bad .reg"))?;
            let count: usize = count.parse().map_err(|_| err(*n, "bad .reg count"))?;
            regs.insert(prefix.to_string(), (num_regs, count));
            num_regs += count;
        } else if l.starts_with(".shared ") || l.starts_with(".local ") {
            // `.shared .align 8 .b8 sh3[240];`
            let space = if l.starts_with(".shared") {
                Space::Shared
            } else {
                Space::Local
            };
            let decl = l
                .trim_end_matches(';')
                .split_whitespace()
                .last()
                .ok_or_else(|| err(*n, "bad array"))?;
            let (an, bytes) = decl
                .strip_suffix(']')
                .and_then(|d| d.split_once('['))
                .ok_or_else(|| err(*n, "bad array declaration"))?;
            if !l.contains(".b8") {
                return Err(err(*n, "arrays must be .b8"));
            }
            arrays.push(Array {
                name: an.to_string(),
                space,
                bytes: bytes.parse().map_err(|_| err(*n, "bad array size"))?,
            });
        } else if let Some(label) = l.strip_suffix(':') {
            labels.insert(label.to_string(), raw.len());
        } else {
            let s = l
                .strip_suffix(';')
                .ok_or_else(|| err(*n, format!("`{l}` does not end with `;`")))?;
            raw.push((*n, s.to_string()));
        }
    }
    let ctx = Ctx {
        regs: &regs,
        arrays: &arrays,
        labels: &labels,
        params,
    };
    let code = raw
        .iter()
        .map(|(n, s)| ctx.inst(*n, s))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((
        Entry {
            name,
            params,
            maxntid,
            num_regs,
            arrays,
            code,
        },
        i,
    ))
}

struct Ctx<'a> {
    regs: &'a HashMap<String, (usize, usize)>,
    arrays: &'a [Array],
    labels: &'a HashMap<String, usize>,
    params: usize,
}

impl Ctx<'_> {
    fn reg(&self, n: usize, s: &str) -> Result<usize, String> {
        let digits = s.trim_start_matches(|c: char| !c.is_ascii_digit());
        let prefix = &s[..s.len() - digits.len()];
        let k: usize = digits
            .parse()
            .map_err(|_| err(n, format!("bad register `{s}`")))?;
        match self.regs.get(prefix) {
            Some(&(base, count)) if k < count => Ok(base + k),
            _ => Err(err(n, format!("undeclared register `{s}`"))),
        }
    }

    fn operand(&self, n: usize, s: &str) -> Result<Operand, String> {
        let s = s.trim();
        if let Some(inner) = s.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
            if let Some(p) = inner
                .strip_prefix('p')
                .and_then(|d| d.parse::<usize>().ok())
            {
                if p >= self.params {
                    return Err(err(n, format!("no parameter p{p}")));
                }
                return Ok(Operand::Param(p));
            }
            let (r, off) = match inner.split_once('+') {
                Some((r, o)) => (
                    r.trim(),
                    o.trim().parse().map_err(|_| err(n, "bad address offset"))?,
                ),
                None => (inner.trim(), 0),
            };
            return Ok(Operand::Addr(self.reg(n, r)?, off));
        }
        for (name, sp) in [("%tid.", 0), ("%ntid.", 1), ("%ctaid.", 2), ("%nctaid.", 3)] {
            if let Some(axis) = s.strip_prefix(name) {
                let a = match axis {
                    "x" => 0,
                    "y" => 1,
                    "z" => 2,
                    _ => return Err(err(n, format!("bad special register `{s}`"))),
                };
                return Ok(Operand::Special(match sp {
                    0 => Special::Tid(a),
                    1 => Special::Ntid(a),
                    2 => Special::Ctaid(a),
                    _ => Special::Nctaid(a),
                }));
            }
        }
        if s.starts_with('%') {
            return Ok(Operand::Reg(self.reg(n, s)?));
        }
        if let Some(h) = s.strip_prefix("0f") {
            return u32::from_str_radix(h, 16)
                .map(Operand::F32)
                .map_err(|_| err(n, format!("bad float immediate `{s}`")));
        }
        if let Ok(v) = s.parse::<i64>() {
            return Ok(Operand::Imm(v));
        }
        if let Some(k) = self.arrays.iter().position(|a| a.name == s) {
            return Ok(Operand::Array(k));
        }
        if let Some(&t) = self.labels.get(s) {
            return Ok(Operand::Label(t));
        }
        Err(err(n, format!("unknown operand `{s}`")))
    }

    fn inst(&self, n: usize, s: &str) -> Result<Inst, String> {
        let mut s = s.trim();
        let mut guard = None;
        if let Some(r) = s.strip_prefix('@') {
            let (g, rest) = r
                .split_once(char::is_whitespace)
                .ok_or_else(|| err(n, "guard without instruction"))?;
            let (neg, g) = match g.strip_prefix('!') {
                Some(g) => (true, g),
                None => (false, g),
            };
            guard = Some((self.reg(n, g)?, neg));
            s = rest.trim();
        }
        let (opcode, rest) = s.split_once(char::is_whitespace).unwrap_or((s, ""));
        let args = if rest.trim().is_empty() {
            vec![]
        } else {
            rest.split(',')
                .map(|a| self.operand(n, a))
                .collect::<Result<Vec<_>, _>>()?
        };
        let op =
            decode(opcode).ok_or_else(|| err(n, format!("unsupported instruction `{opcode}`")))?;
        let want = match &op {
            Op::Bar | Op::Bra => 1,
            Op::Ret => 0,
            Op::Not(_) | Op::Neg(_) | Op::Abs(_) | Op::Sqrt | Op::Rcp | Op::Ex2 | Op::Lg2 => 2,
            Op::Mov(_) | Op::Cvt { .. } | Op::Cvta | Op::Ld(..) | Op::St(..) | Op::TestNan => 2,
            Op::Mad(_) | Op::Selp(_) => 4,
            _ => 3,
        };
        if args.len() != want {
            return Err(err(
                n,
                format!("`{opcode}` takes {want} operands, got {}", args.len()),
            ));
        }
        Ok(Inst {
            line: n,
            guard,
            op,
            args,
        })
    }
}

fn decode(opcode: &str) -> Option<Op> {
    let parts: Vec<&str> = opcode.split('.').collect();
    let ty = |k: usize| parts.get(k).and_then(|t| Ty::parse(t));
    let last = || parts.last().and_then(|t| Ty::parse(t));
    let rnd = |s: &str| match s {
        "rn" => Some(Rnd::Rn),
        "rzi" => Some(Rnd::Rzi),
        "rmi" => Some(Rnd::Rmi),
        "rpi" => Some(Rnd::Rpi),
        _ => None,
    };
    // Float arithmetic must round to nearest (`.rn`): no other mode is in the subset.
    let float_rn = |t: Ty| t != Ty::F32 || parts.get(1) == Some(&"rn");
    Some(match parts[0] {
        "mov" if parts.len() == 2 => Op::Mov(ty(1)?),
        "add" | "sub" | "div" => {
            let t = last()?;
            if !float_rn(t) {
                return None;
            }
            match parts[0] {
                "add" => Op::Add(t),
                "sub" => Op::Sub(t),
                _ => Op::Div(t),
            }
        }
        "mul" => match (parts.get(1), last()?) {
            (Some(&"lo"), t) if t != Ty::F32 => Op::Mul(t),
            (Some(&"rn"), Ty::F32) => Op::Mul(Ty::F32),
            _ => return None,
        },
        "mad" if parts.get(1) == Some(&"lo") => Op::Mad(last()?),
        "fma" if parts.get(1) == Some(&"rn") && last()? == Ty::F32 => Op::Mad(Ty::F32),
        "rem" => Op::Rem(last()?),
        "min" => Op::Min(last()?),
        "max" => Op::Max(last()?),
        "and" => Op::And(last()?),
        "or" => Op::Or(last()?),
        "xor" => Op::Xor(last()?),
        "not" => Op::Not(last()?),
        "neg" => Op::Neg(last()?),
        "abs" => Op::Abs(last()?),
        "sqrt" if parts.get(1) == Some(&"rn") && last()? == Ty::F32 => Op::Sqrt,
        "rcp" if parts.get(1) == Some(&"rn") && last()? == Ty::F32 => Op::Rcp,
        "ex2" if parts.get(1) == Some(&"approx") && last()? == Ty::F32 => Op::Ex2,
        "lg2" if parts.get(1) == Some(&"approx") && last()? == Ty::F32 => Op::Lg2,
        "copysign" if last()? == Ty::F32 => Op::Copysign,
        "testp" if parts.get(1) == Some(&"notanumber") && last()? == Ty::F32 => Op::TestNan,
        "setp" if parts.len() == 3 => {
            let c = match parts[1] {
                "eq" => Cmp::Eq,
                "ne" => Cmp::Ne,
                "lt" => Cmp::Lt,
                "le" => Cmp::Le,
                "gt" => Cmp::Gt,
                "ge" => Cmp::Ge,
                "neu" => Cmp::Neu,
                "nan" => Cmp::Nan,
                _ => return None,
            };
            Op::Setp(c, ty(2)?)
        }
        "selp" => Op::Selp(last()?),
        "cvt" => match parts.len() {
            3 => Op::Cvt {
                dst: ty(1)?,
                src: ty(2)?,
                rnd: None,
            },
            4 => Op::Cvt {
                dst: ty(2)?,
                src: ty(3)?,
                rnd: Some(rnd(parts[1])?),
            },
            _ => return None,
        },
        "cvta" if opcode == "cvta.to.global.u64" => Op::Cvta,
        "ld" | "st" if parts.len() == 3 => {
            let space = match parts[1] {
                "global" => Space::Global,
                "shared" => Space::Shared,
                "local" => Space::Local,
                "param" if parts[0] == "ld" => Space::Param,
                _ => return None,
            };
            if parts[0] == "ld" {
                Op::Ld(space, ty(2)?)
            } else {
                Op::St(space, ty(2)?)
            }
        }
        "bar" if opcode == "bar.sync" => Op::Bar,
        "bra" if opcode == "bra" || opcode == "bra.uni" => Op::Bra,
        "ret" if parts.len() == 1 => Op::Ret,
        _ => return None,
    })
}
