//! Whether a turn ended on a rate limit, from what its engine printed (pure): claude's `result`
//! with `api_error_status` 429, or a `rate_limit_event` whose `rate_limit_info.status` is not
//! `allowed` (its `resetsAt`, epoch seconds, is when the limit lifts) followed by a failed result;
//! codex's "exceeded retry limit, last status: 429" on an `error` or `turn.failed` line. Cursor
//! reports none we can read. Decides nothing.

use super::Adapter;

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
        Adapter::Claude => super::claude::rate_limit(lines),
        Adapter::Codex => super::codex::rate_limit(lines),
        Adapter::Cursor => super::cursor::rate_limit(lines),
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
        let overloaded = include_bytes!("../../fixtures/streams/claude/error.jsonl");
        assert_eq!(of_turn(Adapter::Claude, overloaded), None, "529 overloaded is not a rate limit");
        let codex =
            br#"{"type":"turn.failed","error":{"message":"exceeded retry limit, last status: 429 Too Many Requests"}}"#;
        assert!(of_turn(Adapter::Codex, codex).is_some());
    }
}
