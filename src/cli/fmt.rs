//! How the CLI writes values for a person: money, ages, durations, a run's short name. One place, so
//! `runs`, `show`, `top` and the progress lines say the same thing the same way. Pure, but for the
//! local clock's zone (`clock`, through `os::localtime`).

use crate::views::Usage;
use std::time::{Duration, SystemTime};

/// US dollars with 2 significant digits below a dollar (`$0.0013`, `$0.25`), cents above (`$12.40`);
/// `-` when no turn reported a price.
pub(super) fn money(u: Option<&Usage>) -> String {
    match u.and_then(|u| u.cost_usd) {
        None => "-".into(),
        Some(c) => dollars(c),
    }
}

/// `c` as `money` writes it.
pub(super) fn dollars(c: f64) -> String {
    if !c.is_finite() || c <= 0.0 {
        return "$0".into();
    }
    if c >= 1.0 {
        return format!("${c:.2}");
    }
    // Decimals so that two significant digits show: 0.25 → 2, 0.0013 → 4.
    let decimals = (1 - c.log10().floor() as i32).clamp(2, 10) as usize;
    format!("${c:.decimals$}")
}

/// A span as a person says it: `45s`, `3m 20s`, `2h 05m`, `3d 4h`.
pub(super) fn span(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m {:02}s", s / 60, s % 60),
        3600..86_400 => format!("{}h {:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d {}h", s / 86_400, s % 86_400 / 3600),
    }
}

/// Seconds as `span` writes them (engines report fractions; negatives are 0).
pub(super) fn span_s(secs: f64) -> String {
    span(Duration::from_secs_f64(if secs.is_finite() { secs.max(0.0) } else { 0.0 }))
}

/// The time an RFC 3339 stamp names.
fn at(ts: &str) -> Option<SystemTime> {
    humantime::parse_rfc3339_weak(ts).ok()
}

/// How long ago `ts` was: `12s ago`, `3m 04s ago`; `-` for a stamp that does not read.
pub(super) fn ago(ts: Option<&str>) -> String {
    let Some(t) = ts.and_then(at) else { return "-".into() };
    match SystemTime::now().duration_since(t) {
        Ok(d) => format!("{} ago", span(d)),
        Err(_) => "just now".into(),
    }
}

/// From `from` to `to` (or to now while `to` is `None`).
pub(super) fn between(from: &str, to: Option<&str>) -> String {
    let Some(a) = at(from) else { return "-".into() };
    let b = to.and_then(at).unwrap_or_else(SystemTime::now);
    b.duration_since(a).map_or_else(|_| "0s".into(), span)
}

/// The time of day a stamp names on the local clock (`17:45:02`), as the progress lines print it.
pub(super) fn clock(ts: &str) -> String {
    crate::os::localtime::clock(ts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn money_keeps_two_significant_digits_below_a_dollar() {
        assert_eq!(dollars(0.0013), "$0.0013");
        assert_eq!(dollars(0.00134), "$0.0013");
        assert_eq!(dollars(0.25), "$0.25");
        assert_eq!(dollars(0.5), "$0.50");
        assert_eq!(dollars(12.4), "$12.40");
        assert_eq!(dollars(0.0), "$0");
        assert_eq!(money(None), "-");
    }

    #[test]
    fn spans_read_like_a_person_says_them() {
        assert_eq!(span(Duration::from_secs(45)), "45s");
        assert_eq!(span(Duration::from_secs(200)), "3m 20s");
        assert_eq!(span(Duration::from_secs(7500)), "2h 05m");
        assert_eq!(span(Duration::from_secs(3 * 86_400 + 4 * 3600)), "3d 4h");
        assert_eq!(ago(Some("not a time")), "-");
        assert_eq!(between("2026-01-01T00:00:00Z", Some("2026-01-01T00:01:05Z")), "1m 05s");
    }
}
