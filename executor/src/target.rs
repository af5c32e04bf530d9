//! Targets: what to compile for, written as TVM writes them, a kind followed by
//! `-key=value` options (`cpu -threads=2`, `cuda -arch=sm_80`).
//!
//! Parsing checks the form only (a known or well-formed kind, `-key=value` options, each
//! key once). What each kind accepts is declared by the backend serving it
//! ([`Backend::options`](crate::Backend::options)), never here: the registry of the
//! `kiln` crate checks a target against its backend's table when it resolves it
//! ([`Target::check_options`]), normalizing values (`-threads=02` becomes `-threads=2`)
//! and listing what is accepted when an option is unknown or its value is bad.
//! [`Display`](std::fmt::Display) writes the kind and its options sorted by key, so
//! `to_string` then `parse` gives back an equal target.
//!
//! A target only names what to compile for; which backend serves a kind is decided by the
//! backend registry of the `kiln` crate, never here.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use crate::error::{Error, Result};

/// What kind of target: which code generator and device. The built-in kinds are the
/// names kiln's own backends serve (and TVM users know); [`TargetKind::Custom`] is a kind
/// named by its backend (`toy`), so a backend from outside kiln never has to impersonate
/// a built-in kind. Which backend serves a kind, and what options it takes, is decided by
/// the registry in the `kiln` crate and the backend, never here.
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
    /// A kind named by its backend: a lowercase word (`[a-z][a-z0-9_]*`) that is not a
    /// built-in kind's name.
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
}

/// What `accepted` (the options a target kind's backend declares) are, for error messages.
fn accepted_text(kind: &TargetKind, accepted: &[TargetOption]) -> String {
    if accepted.is_empty() {
        return format!("target `{kind}` takes no options");
    }
    format!(
        "target `{kind}` accepts {}",
        accepted
            .iter()
            .map(|o| format!("-{}={} ({})", o.name, o.value.placeholder(), o.doc))
            .collect::<Vec<_>>()
            .join(", ")
    )
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
                    "malformed option `{word}` in `{s}`: options are written -key=value, \
                     the key a lowercase word"
                )));
            };
            target = target.with_option(key, value)?;
        }
        Ok(target)
    }

    /// This target with option `key` set to `value`: refused if already set or not
    /// written as an option; what the key and value may be is checked against the
    /// backend's table by [`Target::check_options`].
    pub fn with_option(mut self, key: &str, value: &str) -> Result<Target> {
        if self.options.contains_key(key) {
            return Err(Error::InvalidTarget(format!(
                "option `-{key}` given twice for target `{}`",
                self.kind
            )));
        }
        if !is_kind_word(key) || value.is_empty() {
            return Err(Error::InvalidTarget(format!(
                "malformed option `-{key}={value}` for target `{}`: options are written \
                 -key=value, the key a lowercase word",
                self.kind
            )));
        }
        self.options.insert(key.to_string(), value.to_string());
        Ok(self)
    }

    /// Checks the options against `accepted` (what the kind's backend declares,
    /// [`Backend::options`](crate::Backend::options); nothing for `ref`), normalizing
    /// their values (`-threads=02` becomes `-threads=2`). Unknown options and bad values
    /// are errors that list what is accepted.
    pub fn check_options(mut self, accepted: &[TargetOption]) -> Result<Target> {
        let mut checked = BTreeMap::new();
        for (key, value) in &self.options {
            let Some(opt) = accepted.iter().find(|o| o.name == key) else {
                return Err(Error::InvalidTarget(format!(
                    "unknown option `-{key}`; {}",
                    accepted_text(&self.kind, accepted)
                )));
            };
            let v = opt.value.normalize(value).map_err(|why| {
                Error::InvalidTarget(format!(
                    "bad value for `-{key}`: {why}; {}",
                    accepted_text(&self.kind, accepted)
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
        for (k, v) in &self.options {
            write!(f, " -{k}={v}")?;
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

    const THREADS: TargetOption = TargetOption {
        name: "threads",
        value: OptionValue::Int { min: 1, max: 1024 },
        doc: "worker threads",
    };
    const ARCH: TargetOption = TargetOption {
        name: "arch",
        value: OptionValue::SmArch,
        doc: "the GPU's compute capability",
    };
    const MAX_THREADS_PER_BLOCK: TargetOption = TargetOption {
        name: "max_threads_per_block",
        value: OptionValue::Int { min: 1, max: 1024 },
        doc: "largest thread block",
    };

    /// `s` parsed and checked against `accepted`: the error's text.
    fn check_err(s: &str, accepted: &[TargetOption]) -> String {
        match Target::parse(s).and_then(|t| t.check_options(accepted)) {
            Err(Error::InvalidTarget(m)) => m,
            other => panic!("`{s}`: expected InvalidTarget, got {other:?}"),
        }
    }

    #[test]
    fn accessors_and_normal_form() {
        let t: Target = "  cpu   -threads=004 ".parse().unwrap();
        assert_eq!(t.kind(), &TargetKind::Cpu);
        let t = t.check_options(&[THREADS]).unwrap();
        assert_eq!(t.threads(), Some(4));
        assert_eq!(t.to_string(), "cpu -threads=4");
        let t = Target::parse("cuda -max_threads_per_block=128 -arch=sm_75")
            .unwrap()
            .check_options(&[ARCH, MAX_THREADS_PER_BLOCK])
            .unwrap();
        assert_eq!(t.option("arch"), Some("sm_75"));
        assert_eq!(t.options().len(), 2);
        assert_eq!(t.to_string(), "cuda -arch=sm_75 -max_threads_per_block=128");
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
        let cpu = &[THREADS];
        let m = check_err("cpu -arch=sm_80", cpu);
        assert!(m.contains("unknown option `-arch`"), "{m}");
        assert!(m.contains("-threads=N, 1..=1024"), "{m}");
        let m = check_err("ref -threads=2", &[]);
        assert!(m.contains("target `ref` takes no options"), "{m}");
        let m = check_err("cpu -threads=0", cpu);
        assert!(
            m.contains("bad value for `-threads`: 0 is outside 1..=1024"),
            "{m}"
        );
        let m = check_err("cpu -threads=two", cpu);
        assert!(m.contains("`two` is not an integer"), "{m}");
        let m = err("cpu -threads=2 -threads=3");
        assert!(m.contains("given twice"), "{m}");
        let m = check_err("cuda -arch=80", &[ARCH]);
        assert!(m.contains("not a compute capability"), "{m}");
        assert!(check_err("cuda -arch=sm_8", &[ARCH]).contains("not a compute capability"));
        assert!(check_err("cuda -arch=sm_8x", &[ARCH]).contains("not a compute capability"));
        for malformed in [
            "cpu threads=2",
            "cpu -threads",
            "cpu --threads=2",
            "cpu -=2",
            "cpu -Threads=2",
            "cpu -threads=",
        ] {
            let m = err(malformed);
            assert!(m.contains("malformed option"), "{malformed}: {m}");
            assert!(m.contains("written -key=value"), "{malformed}: {m}");
        }
    }
}
