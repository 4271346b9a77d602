//! Whether a turn ended on a rate limit, from what its engine printed (pure): claude's `result`
//! with `api_error_status` 429, or a `rate_limit_event` whose `rate_limit_info.status` is not
//! `allowed` (its `resetsAt`, epoch seconds, is when the limit lifts) followed by a failed result;
//! codex's "exceeded retry limit, last status: 429" on an `error` or `turn.failed` line. Cursor
//! reports none we can read. Decides nothing.

use crate::adapter::Adapter;
use serde_json::Value;

/// A turn that ended on a rate limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limited {
    /// What the engine said, short.
    pub said: String,
    /// When the limit lifts (Unix seconds), when the engine said.
    pub resets_at: Option<u64>,
}

/// The rate limit the turn's lines (`bytes`: the log from the turn's first byte) ended on, if any.
pub fn of_turn(adapter: Adapter, bytes: &[u8]) -> Option<Limited> {
    let lines = bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty());
    match adapter {
        Adapter::Claude => {
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
        Adapter::Codex => lines
            .filter(|l| memchr::memmem::find(l, b"429").is_some())
            .filter_map(|l| serde_json::from_slice::<Value>(l).ok())
            .find(|v| {
                matches!(v["type"].as_str(), Some("error" | "turn.failed"))
                    && v.to_string().contains("exceeded retry limit, last status: 429")
            })
            .map(|_| Limited { said: "codex: exceeded retry limit, last status: 429".into(), resets_at: None }),
        Adapter::Cursor => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_429_result_or_a_rejected_limit_before_a_failed_result_is_a_rate_limit() {
        let r = br#"{"type":"result","is_error":true,"api_error_status":429}"#;
        assert_eq!(of_turn(Adapter::Claude, r).unwrap().resets_at, None);
        let ev = br#"{"type":"rate_limit_event","rate_limit_info":{"status":"rejected","resetsAt":1771390800}}
{"type":"result","is_error":true,"api_error_status":null}"#;
        assert_eq!(of_turn(Adapter::Claude, ev).unwrap().resets_at, Some(1771390800));
        let fine = br#"{"type":"rate_limit_event","rate_limit_info":{"status":"allowed","resetsAt":1}}
{"type":"result","is_error":false}"#;
        assert_eq!(of_turn(Adapter::Claude, fine), None);
        let overloaded = include_bytes!("../fixtures/streams/claude/error.jsonl");
        assert_eq!(of_turn(Adapter::Claude, overloaded), None, "529 overloaded is not a rate limit");
        let codex =
            br#"{"type":"turn.failed","error":{"message":"exceeded retry limit, last status: 429 Too Many Requests"}}"#;
        assert!(of_turn(Adapter::Codex, codex).is_some());
    }
}
