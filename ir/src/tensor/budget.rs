//! The memory budget: how many bytes one tensor (or the live tensors of one evaluation)
//! may take, so that a file asking for 10^12 bytes is an error naming the request rather
//! than an allocation abort. The budget is `KILN_MEMORY_LIMIT` (bytes, or with a `K`, `M`,
//! `G` or `T` suffix, powers of 1024) when set, else half of the smallest of physical
//! memory, the cgroup's memory limit and the address-space ulimit (Linux); 8 GiB where
//! none of them can be read.
//!
//! Also here: checked element and byte counts of shapes ([`checked_numel`],
//! [`checked_bytes`]), and [`try_vec`], a vector allocated with `try_reserve` so that
//! even a request inside the budget that the system cannot satisfy is an error.

use std::sync::OnceLock;

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ty::fmt_shape;

/// The budget used where no limit can be read from the system.
const FALLBACK: usize = 8 << 30;

/// The memory budget in bytes (read once per process).
pub fn memory_limit() -> usize {
    static LIMIT: OnceLock<usize> = OnceLock::new();
    *LIMIT.get_or_init(|| {
        std::env::var("KILN_MEMORY_LIMIT")
            .ok()
            .and_then(|v| parse_size(&v))
            .unwrap_or_else(system_budget)
    })
}

/// An error naming the variable when `KILN_MEMORY_LIMIT` is set but is not a byte count
/// ([`memory_limit`] then uses the system's budget, so a front end should call this
/// first and stop on the error).
pub fn check_memory_limit_env() -> Result<()> {
    match std::env::var("KILN_MEMORY_LIMIT") {
        Ok(v) if parse_size(&v).is_none() => Err(Error::InvalidArgument(format!(
            "KILN_MEMORY_LIMIT=`{v}` is not a byte count (a number of bytes, or with a K, M, \
             G or T suffix: 512M, 8G)"
        ))),
        Err(std::env::VarError::NotUnicode(_)) => Err(Error::InvalidArgument(
            "KILN_MEMORY_LIMIT is not valid UTF-8".into(),
        )),
        _ => Ok(()),
    }
}

/// `"123"`, `"64K"`, `"512M"`, `"8G"`, `"1T"` (powers of 1024) as bytes.
pub fn parse_size(text: &str) -> Option<usize> {
    let t = text.trim();
    let (digits, shift) = match t.char_indices().last()? {
        (i, 'k' | 'K') => (&t[..i], 10),
        (i, 'm' | 'M') => (&t[..i], 20),
        (i, 'g' | 'G') => (&t[..i], 30),
        (i, 't' | 'T') => (&t[..i], 40),
        _ => (t, 0),
    };
    let n: usize = digits.trim().parse().ok()?;
    n.checked_mul(1usize.checked_shl(shift)?)
}

/// Half of the smallest memory limit the system states.
fn system_budget() -> usize {
    let limits = [
        meminfo_total(),
        read_number("/sys/fs/cgroup/memory.max"),
        read_number("/sys/fs/cgroup/memory/memory.limit_in_bytes"),
        address_space_limit(),
    ];
    limits
        .into_iter()
        .flatten()
        .min()
        .map_or(FALLBACK, |m| m / 2)
}

fn read_number(path: &str) -> Option<usize> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// `MemTotal` of `/proc/meminfo`, in bytes.
fn meminfo_total() -> Option<usize> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kb: usize = line.split_whitespace().nth(1)?.parse().ok()?;
    kb.checked_mul(1024)
}

/// The soft `Max address space` limit of `/proc/self/limits`, in bytes.
fn address_space_limit() -> Option<usize> {
    let text = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = text.lines().find(|l| l.starts_with("Max address space"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

/// The element count of `shape`, or an error if it overflows `usize`.
pub fn checked_numel(shape: &[usize]) -> Result<usize> {
    if shape.contains(&0) {
        return Ok(0);
    }
    shape
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .ok_or_else(|| {
            Error::LimitExceeded(format!(
                "shape {} has more elements than fit in memory addresses",
                fmt_shape(shape)
            ))
        })
}

/// The bytes of a `shape` tensor of `dtype`, checked against overflow and the budget;
/// `what` names the tensor in the error.
pub fn checked_bytes(what: &str, shape: &[usize], dtype: DType) -> Result<usize> {
    let bytes = checked_numel(shape)?
        .checked_mul(dtype.size_bytes())
        .ok_or_else(|| {
            Error::LimitExceeded(format!(
                "{what}: {} {dtype} has more bytes than fit in memory addresses",
                fmt_shape(shape)
            ))
        })?;
    check_request(what, bytes)?;
    Ok(bytes)
}

/// An error if `bytes` exceeds the memory budget.
pub fn check_request(what: &str, bytes: usize) -> Result<()> {
    let limit = memory_limit();
    if bytes > limit {
        return Err(Error::LimitExceeded(format!(
            "{what} needs {bytes} bytes, more than the memory budget of {limit} bytes \
             (set KILN_MEMORY_LIMIT to change it)"
        )));
    }
    Ok(())
}

/// An empty vector with room for `n` elements, allocated fallibly after checking the
/// budget; `what` names the request in the error.
pub fn try_vec<T>(what: &str, n: usize) -> Result<Vec<T>> {
    let bytes = n.checked_mul(size_of::<T>().max(1)).ok_or_else(|| {
        Error::LimitExceeded(format!("{what}: {n} elements overflow the address space"))
    })?;
    check_request(what, bytes)?;
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| {
        Error::LimitExceeded(format!(
            "{what}: allocating {bytes} bytes failed (out of memory)"
        ))
    })?;
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_suffixes() {
        assert_eq!(parse_size("123"), Some(123));
        assert_eq!(parse_size("64K"), Some(64 << 10));
        assert_eq!(parse_size(" 2g "), Some(2 << 30));
        assert_eq!(parse_size("1T"), Some(1 << 40));
        assert_eq!(parse_size("lots"), None);
        assert_eq!(parse_size("-5M"), None);
        assert_eq!(parse_size(&format!("{}T", usize::MAX)), None);
    }

    #[test]
    fn oversized_requests_are_errors() {
        let e = checked_numel(&[1 << 62, 1 << 62]).unwrap_err();
        assert!(matches!(e, Error::LimitExceeded(_)), "{e}");
        assert_eq!(checked_numel(&[]).unwrap(), 1);
        assert_eq!(checked_numel(&[1 << 62, 1 << 62, 0]).unwrap(), 0);
        let e = checked_bytes("x", &[1 << 61, 4], DType::F32).unwrap_err();
        assert!(e.to_string().contains("x: (2305843009213693952, 4)"), "{e}");
        let e = checked_bytes("weights", &[1 << 40, 1 << 10], DType::F32).unwrap_err();
        assert!(
            e.to_string()
                .contains("weights needs 4503599627370496 bytes")
                && e.to_string().contains("KILN_MEMORY_LIMIT"),
            "{e}"
        );
        assert!(try_vec::<u64>("buffer", usize::MAX / 4).is_err());
        assert_eq!(try_vec::<u8>("buffer", 16).unwrap().capacity(), 16);
    }

    #[test]
    fn the_budget_is_positive() {
        assert!(memory_limit() > 0);
    }
}
