//! Claude Code: its stream dialect (`normalize`) and what it prints when a turn hits a rate limit.

pub(crate) mod normalize;
pub(crate) mod usage;

use super::ratelimit::Limited;
use serde_json::Value;

/// A `result` with `api_error_status` 429, or a `rate_limit_event` whose `rate_limit_info.status`
/// is not `allowed` (its `resetsAt`, epoch seconds, is when the limit lifts) followed by a failed
/// result.
pub(crate) fn rate_limit<'a>(lines: impl Iterator<Item = &'a [u8]>) -> Option<Limited> {
    let (mut rejected, mut limited_result, mut failed) = (None::<Option<u64>>, false, false);
    for l in lines {
        let has = |s: &str| memchr::memmem::find(l, s.as_bytes()).is_some();
        if !(has("\"rate_limit_event\"") || has("\"result\"")) {
            continue;
        }
        let Ok(v) = serde_json::from_slice::<Value>(l) else { continue };
        match v["type"].as_str() {
            Some("rate_limit_event") => {
                let info = &v["rate_limit_info"];
                if info["status"].as_str().is_some_and(|s| s != "allowed") {
                    rejected = Some(info["resetsAt"].as_u64());
                }
            }
            Some("result") => {
                failed = v["is_error"] == true;
                limited_result = v["api_error_status"].as_u64() == Some(429);
            }
            _ => {}
        }
    }
    match (limited_result, rejected, failed) {
        (true, r, _) => Some(Limited { said: "claude: API error 429".into(), resets_at: r.flatten() }),
        (false, Some(r), true) => Some(Limited { said: "claude: rate limit reached".into(), resets_at: r }),
        _ => None,
    }
}

/// A failed `result` line's text.
pub(crate) fn last_error<'a>(lines: impl Iterator<Item = &'a [u8]>) -> Option<String> {
    super::failure::failed_result(lines)
}
