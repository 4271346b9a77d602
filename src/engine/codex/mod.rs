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
