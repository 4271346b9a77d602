//! The local wall clock: an instant as the time of day a person's clock shows (`localtime_r(3)`,
//! so `TZ` and `/etc/localtime` decide). What the progress lines and `show` print beside an event.
//! Never parses anything but an RFC 3339 stamp, never writes.

/// The time of day `ts` (RFC 3339) names on the local clock: `17:45:02`. A stamp that does not
/// read, or an instant the C library cannot convert, keeps its own clock marked as UTC (`17:45:02Z`).
pub fn clock(ts: &str) -> String {
    local(ts).unwrap_or_else(|| format!("{}Z", ts.get(11..19).unwrap_or(ts)))
}

fn local(ts: &str) -> Option<String> {
    let t = humantime::parse_rfc3339_weak(ts).ok()?;
    let secs = t.duration_since(std::time::UNIX_EPOCH).ok()?.as_secs();
    let secs = libc::time_t::try_from(secs).ok()?;
    // SAFETY: `tm` is plain old data, valid zeroed; localtime_r(3) reads `secs` and writes only the
    // `tm` it is given (the reentrant form: no static buffer), and a null return is checked.
    let tm = unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        if libc::localtime_r(&secs, &mut tm).is_null() {
            return None;
        }
        tm
    };
    Some(format!("{:02}:{:02}:{:02}", tm.tm_hour, tm.tm_min, tm.tm_sec))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stamp_that_does_not_read_keeps_its_clock_marked_utc() {
        assert_eq!(clock("2026-11-28T09:00:00.100Z bad"), "09:00:00Z");
        assert_eq!(clock("soon"), "soonZ");
        // A stamp that reads is shown as hh:mm:ss (which hour is the process's TZ's).
        let c = clock("2026-11-28T09:00:07.100Z");
        assert!(c.len() == 8 && c.ends_with(":00:07"), "{c}");
    }
}
