//! Static limits on what one kernel call may ask for, checked before it can run: the
//! total number of loop iterations (nested loops multiply, sequences add — so a file
//! cannot ask for a 2^62-iteration loop), the bytes of local and shared buffers
//! allocated at once along any nesting path (so it cannot ask for more scratch memory
//! or stack than a host has), and every buffer's size in bytes (so flattened offsets
//! fit a signed 64-bit address offset).

use super::VerifyError;
use crate::tir::func::PrimFunc;
use crate::tir::stmt::Stmt;
use crate::tir::types::Scope;
use crate::tir::visit::deep;

/// The limits a kernel is verified against. The defaults fit every zoo model with room
/// (the largest zoo kernel runs about 5.0e8 iterations, and one allocates 841 KiB of
/// local buffers at once: 136× and 77× below the defaults; `te/tests/topi_zoo.rs`
/// checks this).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// The most loop iterations one call may run, counting every iteration of every
    /// loop (an iteration of an inner loop counts once per iteration of the loops
    /// around it).
    pub max_iterations: u64,
    /// The most bytes of local and shared buffers allocated at once.
    pub max_local_bytes: u64,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_iterations: 1 << 36,
            max_local_bytes: 64 << 20,
        }
    }
}

impl Limits {
    /// No limit on iterations or local memory (for kernels that are trusted).
    pub fn unlimited() -> Limits {
        Limits {
            max_iterations: u64::MAX,
            max_local_bytes: u64::MAX,
        }
    }
}

/// The loop iterations `s` runs (saturating).
pub fn iterations(s: &Stmt) -> u128 {
    deep(|| match s {
        Stmt::For { extent, body, .. } => {
            (*extent).max(0) as u128 * iterations(body).saturating_add(1)
        }
        Stmt::Seq(v) => v
            .iter()
            .fold(0u128, |acc, c| acc.saturating_add(iterations(c))),
        _ => s
            .children()
            .iter()
            .fold(0u128, |acc, c| acc.saturating_add(iterations(c))),
    })
}

/// The most bytes of local and shared buffers of `f` allocated at once inside `s`.
pub fn local_bytes(f: &PrimFunc, s: &Stmt) -> u128 {
    let inner = deep(|| {
        s.children()
            .iter()
            .map(|c| local_bytes(f, c))
            .max()
            .unwrap_or(0)
    });
    match s {
        Stmt::Allocate { buffer, .. } => {
            let own = f
                .buffer(*buffer)
                .filter(|b| b.scope != Scope::Global)
                .map_or(0, buffer_bytes);
            own.saturating_add(inner)
        }
        _ => inner,
    }
}

fn buffer_bytes(b: &crate::tir::Buffer) -> u128 {
    b.shape
        .iter()
        .fold(b.dtype.size_bytes() as u128, |acc, &d| {
            acc.saturating_mul(d as u128)
        })
}

/// The limit errors of `f`.
pub(super) fn check(f: &PrimFunc, limits: &Limits) -> Vec<VerifyError> {
    let mut errors = vec![];
    let mut error = |message: String| {
        errors.push(VerifyError {
            location: format!("@{}", f.name),
            message,
        })
    };
    for b in &f.buffers {
        if buffer_bytes(b) > i64::MAX as u128 {
            error(format!(
                "buffer {} of shape {:?} holds more than 2^63 bytes",
                b.name, b.shape
            ));
        }
    }
    let n = iterations(&f.body);
    if n > limits.max_iterations as u128 {
        error(format!(
            "the kernel runs {} loop iterations, more than the limit of {}",
            show(n),
            limits.max_iterations
        ));
    }
    let bytes = local_bytes(f, &f.body);
    if bytes > limits.max_local_bytes as u128 {
        error(format!(
            "the kernel allocates {} bytes of local/shared buffers at once, more than the \
             limit of {}",
            show(bytes),
            limits.max_local_bytes
        ));
    }
    errors
}

fn show(n: u128) -> String {
    if n == u128::MAX {
        "more than 2^128".into()
    } else {
        n.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tir::parse;

    fn messages(text: &str, limits: &Limits) -> Vec<String> {
        check(&parse(text).unwrap(), limits)
            .into_iter()
            .map(|e| e.message)
            .collect()
    }

    #[test]
    fn endless_loops_and_huge_scratch_are_refused() {
        let long = "primfn @k(out %b: Buffer[(1), float32, global]) {
  for (%i: int64, 0, 1152921504606846976) { for (%j, 0, 4) { %b[0] = 1.0 } }
}";
        let e = messages(long, &Limits::default());
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(
            e[0].contains("runs 5764607523034234880 loop iterations"),
            "{e:?}"
        );
        assert!(messages(long, &Limits::unlimited()).is_empty());
        let scratch = "primfn @k(out %b: Buffer[(1), float32, global]) {
  allocate %t: Buffer[(1024, 1024), float32, local] {
    allocate %u: Buffer[(1024, 1024, 16), float32, local] {
      %u[0, 0, 0] = 1.0
      %b[0] = %u[0, 0, 0]
    }
  }
}";
        let e = messages(scratch, &Limits::default());
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(e[0].contains("allocates 71303168 bytes"), "{e:?}");
        // Siblings do not add up; nesting does.
        let siblings = "primfn @k(out %b: Buffer[(1), float32, global]) {
  allocate %t: Buffer[(1024, 1024, 8), float32, local] { %t[0, 0, 0] = 1.0 }
  allocate %u: Buffer[(1024, 1024, 8), float32, local] { %u[0, 0, 0] = 1.0 }
}";
        assert!(messages(siblings, &Limits::default()).is_empty());
        let huge = "primfn @k(%a: Buffer[(4611686018427387904, 4), float32, global], out %b: Buffer[(1), float32, global]) {
  %b[0] = %a[0, 0]
}";
        let e = messages(huge, &Limits::default());
        assert!(
            e.iter().any(|m| m.contains("more than 2^63 bytes")),
            "{e:?}"
        );
    }

    #[test]
    fn a_loop_counter_must_reach_its_end_without_wrapping() {
        let end = "primfn @k(out %b: Buffer[(1), float32, global]) {
  for (%i, 2147483640, 7) { %b[0] = 1.0 }
}";
        assert!(crate::tir::verify::check(&parse(end).unwrap()).is_empty());
        let past = end.replace("2147483640, 7", "2147483640, 8");
        let e = crate::tir::verify::check(&parse(&past).unwrap());
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(
            e[0].message.contains("range does not fit in int32"),
            "{e:?}"
        );
    }
}
