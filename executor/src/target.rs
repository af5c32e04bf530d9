//! Targets: what to compile for, written as TVM writes them, a kind followed by
//! `-key=value` options (`cpu -threads=2`, `cuda -arch=sm_80`).
//!
//! Each kind accepts a fixed set of options, each with a checked value; parsing normalizes
//! the value (`-threads=02` becomes `-threads=2`) and [`Display`](std::fmt::Display)
//! writes the kind and its options in a fixed order, so `to_string` then `parse` gives
//! back an equal target. Unknown kinds, unknown options, repeated options and malformed
//! values are errors that list what is accepted.
//!
//! A target only names what to compile for; which backend serves a kind is decided by the
//! backend registry of the `kiln` crate, never here. A custom kind's options are kept as
//! written (`-key=value`, any key once) and checked by its backend.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use crate::error::{Error, Result};

/// What kind of target: which code generator and device. The built-in kinds have fixed
/// option tables; [`TargetKind::Custom`] is the kind of a backend from outside kiln,
/// named by that backend (`toy`), so it never has to impersonate a built-in kind. Which
/// backend serves a kind is decided by the registry in the `kiln` crate, never here.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TargetKind {
    /// The graph-IR reference interpreter, run without compiling: the oracle.
    Ref,
    /// The loop-IR interpreter, on its own "device" memory with explicit copies.
    Interp,
    /// Native code for the host CPU (Cranelift JIT).
    Cpu,
    /// NVIDIA GPUs through PTX.
    Cuda,
    /// Any Vulkan device through SPIR-V.
    Vulkan,
    /// A kind named by a backend outside kiln: a lowercase word (`[a-z][a-z0-9_]*`) that
    /// is not a built-in kind's name. Its options are checked by its backend.
    Custom(Arc<str>),
}

impl TargetKind {
    /// Every built-in kind, in a fixed order.
    pub const BUILTIN: [TargetKind; 5] = [
        TargetKind::Ref,
        TargetKind::Interp,
        TargetKind::Cpu,
        TargetKind::Cuda,
        TargetKind::Vulkan,
    ];

    /// The kind named `name`: a built-in kind, or a [`TargetKind::Custom`] one when
    /// `name` is a lowercase word that no built-in kind uses.
    pub fn named(name: &str) -> Result<TargetKind> {
        name.parse()
    }

    /// The name the kind is written with.
    pub fn name(&self) -> &str {
        match self {
            TargetKind::Ref => "ref",
            TargetKind::Interp => "interp",
            TargetKind::Cpu => "cpu",
            TargetKind::Cuda => "cuda",
            TargetKind::Vulkan => "vulkan",
            TargetKind::Custom(name) => name,
        }
    }

    /// The options a built-in kind accepts, in the order they are written; `None` for a
    /// custom kind, whose backend declares and checks its own.
    pub fn options(&self) -> Option<&'static [TargetOption]> {
        match self {
            TargetKind::Ref | TargetKind::Interp => Some(&[]),
            TargetKind::Cpu => Some(&[THREADS, FMA, ISA]),
            TargetKind::Cuda => Some(&[ARCH, MAX_THREADS_PER_BLOCK]),
            TargetKind::Vulkan => Some(&[MAX_THREADS_PER_BLOCK, DEVICE]),
            TargetKind::Custom(_) => None,
        }
    }

    /// Whether compiled code runs on a device with its own memory (needs copies).
    pub fn is_gpu(&self) -> bool {
        matches!(self, TargetKind::Cuda | TargetKind::Vulkan)
    }

    /// What this kind's options are, for error messages.
    fn accepted_options(&self) -> String {
        match self.options() {
            Some([]) => format!("target `{}` takes no options", self.name()),
            Some(opts) => format!(
                "target `{}` accepts {}",
                self.name(),
                opts.iter()
                    .map(|o| format!("-{}={} ({})", o.name, o.value.placeholder(), o.doc))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            None => format!("target `{}` checks its options in its backend", self.name()),
        }
    }
}

impl fmt::Display for TargetKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Whether `s` is a lowercase word: a letter, then letters, digits and `_`.
fn is_kind_word(s: &str) -> bool {
    s.bytes().next().is_some_and(|b| b.is_ascii_lowercase())
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

impl FromStr for TargetKind {
    type Err = Error;
    fn from_str(s: &str) -> Result<TargetKind> {
        if let Some(k) = TargetKind::BUILTIN.into_iter().find(|k| k.name() == s) {
            return Ok(k);
        }
        let hint = match s {
            "llvm" | "c" | "host" => Some("kiln's host CPU target is `cpu`"),
            "nvptx" => Some("kiln's CUDA target is `cuda`"),
            "spirv" => Some("kiln's SPIR-V target is `vulkan`"),
            _ if !is_kind_word(s) => Some(
                "a target kind is a lowercase word such as `cpu`, or the name an outside \
                 backend registered",
            ),
            _ => None,
        };
        match hint {
            Some(hint) => Err(Error::InvalidTarget(format!(
                "unknown target `{s}` ({hint}); built-in targets: {}",
                TargetKind::BUILTIN.map(|k| k.name().to_string()).join(", ")
            ))),
            None => Ok(TargetKind::Custom(Arc::from(s))),
        }
    }
}

/// One option a target kind accepts.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct TargetOption {
    /// The key, written `-name=value`.
    pub name: &'static str,
    /// What the value must be.
    pub value: OptionValue,
    /// What the option does.
    pub doc: &'static str,
}

/// The values an option accepts.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum OptionValue {
    /// An integer in `min..=max`.
    Int {
        /// The smallest accepted value.
        min: u64,
        /// The largest accepted value (inclusive).
        max: u64,
    },
    /// A CUDA compute capability, `sm_` then two or three digits and an optional `a`
    /// (`sm_80`, `sm_90a`).
    SmArch,
    /// A device: its index, or a word of its name (`0`, `llvmpipe`).
    Device,
    /// One of a fixed list of names.
    OneOf(&'static [&'static str]),
}

impl OptionValue {
    fn placeholder(self) -> String {
        match self {
            OptionValue::Int { min, max } => format!("N, {min}..={max}"),
            OptionValue::SmArch => "sm_XY".to_string(),
            OptionValue::Device => "INDEX|NAME".to_string(),
            OptionValue::OneOf(names) => names.join("|"),
        }
    }

    /// The value in canonical form, or why it is not acceptable.
    fn normalize(self, v: &str) -> Result<String, String> {
        match self {
            OptionValue::Int { min, max } => match v.parse::<u64>() {
                Ok(n) if (min..=max).contains(&n) => Ok(n.to_string()),
                Ok(n) => Err(format!("{n} is outside {min}..={max}")),
                Err(_) => Err(format!("`{v}` is not an integer")),
            },
            OptionValue::SmArch => {
                let digits = v
                    .strip_prefix("sm_")
                    .map(|r| r.strip_suffix('a').unwrap_or(r))
                    .filter(|d| {
                        (2..=3).contains(&d.len()) && d.bytes().all(|b| b.is_ascii_digit())
                    });
                match digits {
                    Some(_) => Ok(v.to_string()),
                    None => Err(format!("`{v}` is not a compute capability like sm_80")),
                }
            }
            OptionValue::Device if v.is_empty() => Err("an empty device name".into()),
            OptionValue::Device => Ok(v.to_string()),
            OptionValue::OneOf(names) => match names.contains(&v) {
                true => Ok(v.to_string()),
                false => Err(format!("`{v}` is not one of {}", names.join(", "))),
            },
        }
    }
}

const THREADS: TargetOption = TargetOption {
    name: "threads",
    value: OptionValue::Int { min: 1, max: 1024 },
    doc: "worker threads for parallel loops",
};
const FMA: TargetOption = TargetOption {
    name: "fma",
    value: OptionValue::Int { min: 0, max: 1 },
    doc: "fuse multiply-adds when the host has FMA (1, the default) or round each (0)",
};
const ISA: TargetOption = TargetOption {
    name: "isa",
    value: OptionValue::OneOf(&["avx512", "avx2", "sse"]),
    doc: "the micro-kernels' vector ISA (default: the best the host runs; a level it lacks is refused at build)",
};
const ARCH: TargetOption = TargetOption {
    name: "arch",
    value: OptionValue::SmArch,
    doc: "the GPU's compute capability",
};
const DEVICE: TargetOption = TargetOption {
    name: "device",
    value: OptionValue::Device,
    doc: "the Vulkan device: its index in the loader's list, or part of its name",
};
const MAX_THREADS_PER_BLOCK: TargetOption = TargetOption {
    name: "max_threads_per_block",
    value: OptionValue::Int { min: 1, max: 1024 },
    doc: "largest thread block the schedules may use",
};

/// A target: a kind and its options, parsed from strings like `cpu -threads=2`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Target {
    kind: TargetKind,
    options: BTreeMap<String, String>,
}

impl Target {
    /// A target of `kind` with no options.
    pub fn new(kind: TargetKind) -> Target {
        Target {
            kind,
            options: BTreeMap::new(),
        }
    }

    /// Parses `kind -key=value ...` (whitespace-separated).
    pub fn parse(s: &str) -> Result<Target> {
        let mut words = s.split_whitespace();
        let Some(kind) = words.next() else {
            return Err(Error::InvalidTarget(format!(
                "empty target string; built-in targets: {}",
                TargetKind::BUILTIN.map(|k| k.name().to_string()).join(", ")
            )));
        };
        let mut target = Target::new(kind.parse()?);
        for word in words {
            let body = word.strip_prefix('-').filter(|b| !b.starts_with('-'));
            let Some((key, value)) = body.and_then(|b| b.split_once('=')) else {
                return Err(Error::InvalidTarget(format!(
                    "malformed option `{word}` in `{s}`: options are written -key=value; {}",
                    target.kind.accepted_options()
                )));
            };
            target = target.with_option(key, value)?;
        }
        Ok(target)
    }

    /// This target with option `key` set to `value` (checked, and refused if already set).
    pub fn with_option(mut self, key: &str, value: &str) -> Result<Target> {
        if self.options.contains_key(key) {
            return Err(Error::InvalidTarget(format!(
                "option `-{key}` given twice for target `{}`",
                self.kind
            )));
        }
        let value = match self.kind.options() {
            Some(opts) => {
                let Some(opt) = opts.iter().find(|o| o.name == key) else {
                    return Err(Error::InvalidTarget(format!(
                        "unknown option `-{key}`; {}",
                        self.kind.accepted_options()
                    )));
                };
                opt.value.normalize(value).map_err(|why| {
                    Error::InvalidTarget(format!(
                        "bad value for `-{key}`: {why}; {}",
                        self.kind.accepted_options()
                    ))
                })?
            }
            None if is_kind_word(key) && !value.is_empty() => value.to_string(),
            None => {
                return Err(Error::InvalidTarget(format!(
                    "malformed option `-{key}={value}` for target `{}`: options are \
                     written -key=value, the key a lowercase word",
                    self.kind
                )));
            }
        };
        self.options.insert(key.to_string(), value);
        Ok(self)
    }

    /// Checks the options of a custom-kind target against `accepted` (what its backend
    /// declares), normalizing their values; built-in kinds were checked when parsed.
    pub fn check_options(mut self, accepted: &[TargetOption]) -> Result<Target> {
        if self.kind.options().is_some() {
            return Ok(self);
        }
        let accepted_text = || {
            if accepted.is_empty() {
                format!("target `{}` takes no options", self.kind)
            } else {
                format!(
                    "target `{}` accepts {}",
                    self.kind,
                    accepted
                        .iter()
                        .map(|o| format!("-{}={} ({})", o.name, o.value.placeholder(), o.doc))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            }
        };
        let mut checked = BTreeMap::new();
        for (key, value) in &self.options {
            let Some(opt) = accepted.iter().find(|o| o.name == key) else {
                return Err(Error::InvalidTarget(format!(
                    "unknown option `-{key}`; {}",
                    accepted_text()
                )));
            };
            let v = opt.value.normalize(value).map_err(|why| {
                Error::InvalidTarget(format!(
                    "bad value for `-{key}`: {why}; {}",
                    accepted_text()
                ))
            })?;
            checked.insert(key.clone(), v);
        }
        self.options = checked;
        Ok(self)
    }

    /// The target's kind.
    pub fn kind(&self) -> &TargetKind {
        &self.kind
    }

    /// The options that were set, by key.
    pub fn options(&self) -> &BTreeMap<String, String> {
        &self.options
    }

    /// The value of option `key`, if set.
    pub fn option(&self, key: &str) -> Option<&str> {
        self.options.get(key).map(String::as_str)
    }

    /// The `-threads` option of a `cpu` target, if set.
    pub fn threads(&self) -> Option<usize> {
        self.option("threads").and_then(|v| v.parse().ok())
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.kind.name())?;
        match self.kind.options() {
            Some(opts) => {
                for opt in opts {
                    if let Some(v) = self.options.get(opt.name) {
                        write!(f, " -{}={v}", opt.name)?;
                    }
                }
            }
            None => {
                for (k, v) in &self.options {
                    write!(f, " -{k}={v}")?;
                }
            }
        }
        Ok(())
    }
}

impl FromStr for Target {
    type Err = Error;
    fn from_str(s: &str) -> Result<Target> {
        Target::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(s: &str) -> String {
        match Target::parse(s) {
            Err(Error::InvalidTarget(m)) => m,
            other => panic!("`{s}`: expected InvalidTarget, got {other:?}"),
        }
    }

    #[test]
    fn targets_parse_and_print_back() {
        for s in [
            "ref",
            "interp",
            "cpu",
            "cpu -threads=2",
            "cuda",
            "cuda -arch=sm_80",
            "cuda -arch=sm_90a -max_threads_per_block=256",
            "vulkan",
            "vulkan -max_threads_per_block=64",
            "vulkan -device=llvmpipe",
        ] {
            let t = Target::parse(s).unwrap();
            assert_eq!(t.to_string(), s);
            assert_eq!(t.to_string().parse::<Target>().unwrap(), t);
        }
    }

    #[test]
    fn accessors_and_normal_form() {
        let t: Target = "  cpu   -threads=004 ".parse().unwrap();
        assert_eq!(t.kind(), &TargetKind::Cpu);
        assert_eq!(t.threads(), Some(4));
        assert_eq!(t.to_string(), "cpu -threads=4");
        let t = Target::parse("cuda -max_threads_per_block=128 -arch=sm_75").unwrap();
        assert_eq!(t.option("arch"), Some("sm_75"));
        assert_eq!(t.options().len(), 2);
        assert_eq!(t.to_string(), "cuda -arch=sm_75 -max_threads_per_block=128");
        assert!(t.kind().is_gpu());
        assert_eq!(Target::new(TargetKind::Ref).threads(), None);
    }

    #[test]
    fn unknown_targets_list_the_accepted_ones() {
        let m = err("llvm -mcpu=skylake");
        assert!(m.contains("kiln's host CPU target is `cpu`"), "{m}");
        assert!(m.contains("ref, interp, cpu, cuda, vulkan"), "{m}");
        assert!(err("   ").contains("empty target string"));
        assert!(err("CPU").contains("unknown target `CPU`"));
        assert!(err("to-y").contains("lowercase word"));
    }

    #[test]
    fn custom_kinds_keep_their_options_for_their_backend() {
        let t = Target::parse("toy -lanes=04 -mode=fast").unwrap();
        assert_eq!(t.kind(), &TargetKind::Custom("toy".into()));
        assert_eq!(t.to_string(), "toy -lanes=04 -mode=fast");
        assert_eq!(t.to_string().parse::<Target>().unwrap(), t);
        const LANES: TargetOption = TargetOption {
            name: "lanes",
            value: OptionValue::Int { min: 1, max: 8 },
            doc: "vector lanes",
        };
        let m = match Target::parse("toy -lanes=4 -mode=fast")
            .unwrap()
            .check_options(&[LANES])
        {
            Err(Error::InvalidTarget(m)) => m,
            other => panic!("{other:?}"),
        };
        assert!(
            m.contains("unknown option `-mode`") && m.contains("-lanes=N, 1..=8"),
            "{m}"
        );
        let t = Target::parse("toy -lanes=04")
            .unwrap()
            .check_options(&[LANES])
            .unwrap();
        assert_eq!(t.to_string(), "toy -lanes=4");
        assert!(
            Target::parse("toy -lanes=9")
                .unwrap()
                .check_options(&[LANES])
                .is_err()
        );
        assert!(err("toy -lanes=1 -lanes=2").contains("given twice"));
    }

    #[test]
    fn bad_options_say_what_is_accepted() {
        let m = err("cpu -arch=sm_80");
        assert!(m.contains("unknown option `-arch`"), "{m}");
        assert!(m.contains("-threads=N, 1..=1024"), "{m}");
        let m = err("ref -threads=2");
        assert!(m.contains("target `ref` takes no options"), "{m}");
        let m = err("cpu -threads=0");
        assert!(
            m.contains("bad value for `-threads`: 0 is outside 1..=1024"),
            "{m}"
        );
        let m = err("cpu -threads=two");
        assert!(m.contains("`two` is not an integer"), "{m}");
        let m = err("cpu -threads=2 -threads=3");
        assert!(m.contains("given twice"), "{m}");
        let m = err("cuda -arch=80");
        assert!(m.contains("not a compute capability"), "{m}");
        assert!(err("cuda -arch=sm_8").contains("not a compute capability"));
        assert!(err("cuda -arch=sm_8x").contains("not a compute capability"));
        for malformed in [
            "cpu threads=2",
            "cpu -threads",
            "cpu --threads=2",
            "cpu -=2",
        ] {
            let m = err(malformed);
            assert!(
                m.contains("malformed option") || m.contains("unknown option `-`"),
                "{malformed}: {m}"
            );
        }
        let m = err("cpu -threads");
        assert!(m.contains("written -key=value"), "{m}");
    }
}
