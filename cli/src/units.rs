//! Times as people read them: seconds, milliseconds or microseconds by magnitude, with
//! three significant digits (`1.23 s`, `45.6 ms`, `789 µs`, `0.512 µs`), so a fast run
//! never shows as `0.000 s`.

use std::time::Duration;

/// A time given in µs, in the unit that fits its magnitude.
pub fn human_us(us: f64) -> String {
    let (value, unit) = if us >= 1e6 {
        (us / 1e6, "s")
    } else if us >= 1e3 {
        (us / 1e3, "ms")
    } else {
        (us, "µs")
    };
    // Three significant digits; below 1 µs, three decimals.
    let decimals = if value >= 100.0 {
        0
    } else if value >= 10.0 {
        1
    } else if value >= 1.0 {
        2
    } else {
        3
    };
    format!("{value:.decimals$} {unit}")
}

/// A [`Duration`], in the unit that fits its magnitude.
pub fn human_duration(d: Duration) -> String {
    human_us(d.as_secs_f64() * 1e6)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_magnitude_gets_its_unit_and_three_digits() {
        assert_eq!(human_us(0.5123), "0.512 µs");
        assert_eq!(human_us(12.34), "12.3 µs");
        assert_eq!(human_us(789.4), "789 µs");
        assert_eq!(human_us(4560.0), "4.56 ms");
        assert_eq!(human_us(45_678.0), "45.7 ms");
        assert_eq!(human_us(1_234_567.0), "1.23 s");
        assert_eq!(human_us(76_000_000.0), "76.0 s");
        assert_eq!(human_duration(Duration::from_micros(250)), "250 µs");
    }
}
