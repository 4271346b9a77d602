//! Codex: its stream dialect (`normalize`) and what it prints when a turn hits a rate limit.

pub(crate) mod normalize;
pub(crate) mod usage;

use super::ratelimit::Limited;
use serde_json::Value;

/// "exceeded retry limit, last status: 429" on an `error` or `turn.failed` line.
pub(crate) fn rate_limit<'a>(lines: impl Iterator<Item = &'a [u8]>) -> Option<Limited> {
    lines
        .filter(|l| memchr::memmem::find(l, b"429").is_some())
        .filter_map(|l| serde_json::from_slice::<Value>(l).ok())
        .find(|v| {
            matches!(v["type"].as_str(), Some("error" | "turn.failed"))
                && v.to_string().contains("exceeded retry limit, last status: 429")
        })
        .map(|_| Limited { said: "codex: exceeded retry limit, last status: 429".into(), resets_at: None })
}

/// The `turn.failed` error's message, else the last `error` line's.
pub(crate) fn last_error<'a>(lines: impl Iterator<Item = &'a [u8]>) -> Option<String> {
    let (mut failed, mut error) = (None, None);
    for l in lines {
        let has = |s: &str| memchr::memmem::find(l, s.as_bytes()).is_some();
        if !(has("\"turn.failed\"") || has("\"error\"")) {
            continue;
        }
        let Ok(v) = serde_json::from_slice::<Value>(l) else { continue };
        match v["type"].as_str() {
            Some("turn.failed") => failed = v["error"]["message"].as_str().map(str::to_string).or(failed),
            Some("error") => error = v["message"].as_str().map(str::to_string).or(error),
            _ => {}
        }
    }
    failed.or(error)
}
