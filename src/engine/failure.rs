//! What the engine itself said when a turn failed, from the turn's own lines (pure): claude's
//! `result` text when `is_error`, codex's `turn.failed` (else last `error`) message, cursor's
//! failed `result` text. The supervisor puts it beside the wrapper's exit in the halt's
//! detail, so a person reads "API Error: Repeated 529 Overloaded errors…" instead of "exit 1".

use super::Adapter;

/// The most telling error line of the turn (`bytes`: the log from the turn's first byte), if the
/// engine printed one.
pub fn last_error(adapter: Adapter, bytes: &[u8]) -> Option<String> {
    let lines = bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty());
    let said = match adapter {
        Adapter::Claude => super::claude::last_error(lines),
        Adapter::Codex => super::codex::last_error(lines),
        Adapter::Cursor => super::cursor::last_error(lines),
    }?;
    let said = said.split_whitespace().collect::<Vec<_>>().join(" ");
    (!said.is_empty()).then_some(said)
}

/// The failed `result` line's text (claude's and cursor's stream-json share it).
pub(crate) fn failed_result<'a>(lines: impl Iterator<Item = &'a [u8]>) -> Option<String> {
    let mut said = None;
    for l in lines {
        if memchr::memmem::find(l, b"\"is_error\":true").is_none() {
            continue;
        }
        let Ok(v) = serde_json::from_slice::<serde_json::Value>(l) else { continue };
        if v["type"] == "result" && v["is_error"] == true {
            said = v["result"].as_str().filter(|s| !s.trim().is_empty()).map(str::to_string).or(said);
        }
    }
    said
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_engines_own_words_are_found_in_the_real_captures() {
        let claude = include_bytes!("../../fixtures/streams/claude/error.jsonl");
        let said = last_error(Adapter::Claude, claude).unwrap();
        assert!(said.starts_with("API Error: Repeated 529 Overloaded errors"), "{said}");
        let codex = include_bytes!("../../fixtures/streams/codex/error.jsonl");
        let said = last_error(Adapter::Codex, codex).unwrap();
        assert!(said.contains("high demand"), "{said}");
        assert_eq!(last_error(Adapter::Claude, include_bytes!("../../fixtures/streams/claude/basic.jsonl")), None);
        let cursor = br#"{"type":"result","subtype":"error","is_error":true,"result":"Rate limited\n try later"}"#;
        assert_eq!(last_error(Adapter::Cursor, cursor).as_deref(), Some("Rate limited try later"));
    }
}
