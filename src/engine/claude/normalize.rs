//! Claude Code `--output-format stream-json --verbose [--include-partial-messages]` → events/v1.
//! The mapping table is `spec/EVENTS.md` § claude. Facts it respects: one `assistant` line per content
//! block (a complete block: `final: true`), `result.subtype` is "success" even on failure (read
//! `is_error`), SIGTERM leaves no `result` line, key order is not stable.

use crate::engine::normalize::{Mapped, Refusal, S, raw_str};
use crate::events::{Channel, Data, Json};
use serde::Deserialize;
use serde_json::value::RawValue;
use std::borrow::Cow;

#[derive(Deserialize)]
pub(crate) struct Line<'a> {
    #[serde(borrow, rename = "type")]
    kind: S<'a>,
    #[serde(borrow)]
    subtype: S<'a>,
    #[serde(borrow)]
    session_id: S<'a>,
    #[serde(borrow)]
    timestamp: S<'a>,
    #[serde(borrow)]
    model: S<'a>,
    #[serde(borrow)]
    cwd: S<'a>,
    attempt: Option<u64>,
    max_retries: Option<u64>,
    error_status: Option<i64>,
    #[serde(borrow)]
    error: Option<&'a RawValue>,
    #[serde(borrow)]
    event: Option<&'a RawValue>,
    #[serde(borrow)]
    api_message_id: S<'a>,
    #[serde(borrow)]
    message: Option<&'a RawValue>,
    is_error: Option<bool>,
    #[serde(borrow)]
    result: Option<&'a RawValue>,
    #[serde(borrow)]
    terminal_reason: S<'a>,
    #[serde(borrow)]
    usage: Option<&'a RawValue>,
    duration_ms: Option<f64>,
    total_cost_usd: Option<f64>,
    #[serde(borrow)]
    tool_name: S<'a>,
    #[serde(borrow)]
    uuid: S<'a>,
    #[serde(rename = "isReplay")]
    is_replay: Option<bool>,
}

#[derive(Deserialize)]
struct StreamEvent<'a> {
    #[serde(borrow, rename = "type")]
    kind: Cow<'a, str>,
    #[serde(borrow)]
    delta: Option<Delta<'a>>,
    #[serde(borrow)]
    error: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(borrow, rename = "type")]
    kind: S<'a>,
    #[serde(borrow)]
    text: S<'a>,
    #[serde(borrow)]
    thinking: S<'a>,
}

#[derive(Deserialize)]
struct Message<'a> {
    #[serde(borrow)]
    id: S<'a>,
    #[serde(borrow)]
    content: &'a RawValue,
}

#[derive(Deserialize)]
struct Block<'a> {
    #[serde(borrow, rename = "type")]
    kind: Cow<'a, str>,
    #[serde(borrow)]
    text: S<'a>,
    #[serde(borrow)]
    thinking: S<'a>,
    #[serde(borrow)]
    id: S<'a>,
    #[serde(borrow)]
    name: S<'a>,
    #[serde(borrow)]
    input: Option<&'a RawValue>,
    #[serde(borrow)]
    tool_use_id: S<'a>,
    #[serde(borrow)]
    content: Option<&'a RawValue>,
    is_error: Option<bool>,
}

pub(crate) fn map(text: &str) -> Result<Mapped<'_>, Refusal> {
    let l: Line = serde_json::from_str(text).map_err(|_| Refusal::Parse)?;
    let kind = l.kind.as_deref().unwrap_or("(no type)");
    let data = match kind {
        "system" => system(&l)?,
        "stream_event" => stream_event(&l)?,
        "assistant" => assistant(&l)?,
        "user" => user(&l)?,
        "result" => vec![turn_end(&l)],
        // A tool-permission prompt is an `approval`; the rest of the control protocol is not.
        "control_request" => control_request(text)?,
        // Informational rate-limit status, the stdin control protocol and the queue of stdin lines
        // (`command_lifecycle`: the `input` event marks where a line was taken): not agent output.
        "rate_limit_event" | "control_response" | "control_cancel_request" | "command_lifecycle" => vec![],
        other => return Err(Refusal::Unmapped(other.to_string())),
    };
    Ok(Mapped { session: l.session_id, ts: l.timestamp, data })
}

fn system<'a>(l: &Line<'a>) -> Result<Vec<Data<'a>>, Refusal> {
    let sub = l.subtype.as_deref().unwrap_or("(no subtype)");
    Ok(match sub {
        "init" => vec![Data::TurnStart { session: l.session_id.clone(), model: l.model.clone(), cwd: l.cwd.clone() }],
        // Transport status and thinking-token estimates carry no content; notices and turn
        // summaries are UI chrome of the interactive CLI.
        "status" | "thinking_tokens" | "notification" | "post_turn_summary" | "compact_boundary" => vec![],
        // A tool's own task bookkeeping (its call and result are the tool events) and interactive UI
        // state (background tasks, the session's title).
        "task_started" | "task_notification" | "background_tasks_changed" | "session_title_changed" => vec![],
        "api_retry" => {
            let err = l.error.and_then(raw_str).unwrap_or(Cow::Borrowed("error"));
            let status = l.error_status.map(|s| format!(" {s}")).unwrap_or_default();
            let message = format!(
                "API retry {}/{}:{status} {err}",
                l.attempt.map(|a| a.to_string()).unwrap_or_else(|| "?".into()),
                l.max_retries.map(|a| a.to_string()).unwrap_or_else(|| "?".into()),
            );
            vec![Data::Error {
                fatal: false,
                message: Some(Cow::Owned(message)),
                reason: Some(Cow::Borrowed("api_retry")),
                raw: None,
            }]
        }
        "permission_denied" => vec![Data::Error {
            fatal: false,
            message: Some(Cow::Owned(format!(
                "permission denied for tool {}",
                l.tool_name.as_deref().unwrap_or("(unnamed)")
            ))),
            reason: Some(Cow::Borrowed("permission_denied")),
            raw: None,
        }],
        other => return Err(Refusal::Unmapped(format!("system/{other}"))),
    })
}

/// Message and block framing: the complete block arrives as its `assistant` line, usage and stop
/// reason in `result`. Nothing is shown for them.
const FRAMING: [&str; 6] =
    ["message_start", "content_block_start", "content_block_stop", "message_delta", "message_stop", "ping"];

/// The event's kind when it is the object's first key (as the CLI writes it): `{"type":"…",` or
/// `{"type":"…"}`. The raw value is already known to be valid JSON (the line parsed).
fn leading_kind(raw: &str) -> Option<&str> {
    let rest = raw.strip_prefix("{\"type\":\"")?;
    let end = rest.find('"')?;
    let kind = &rest[..end];
    let after = rest.as_bytes().get(end + 1)?;
    (!kind.contains('\\') && matches!(after, b',' | b'}')).then_some(kind)
}

fn stream_event<'a>(l: &Line<'a>) -> Result<Vec<Data<'a>>, Refusal> {
    let raw = l.event.ok_or_else(|| Refusal::Shape("claude stream_event line without an event object".into()))?;
    // Framing events are half the bytes of a partial-messages stream and map to nothing: their kind
    // is read off the front instead of parsing the object a second time.
    if leading_kind(raw.get()).is_some_and(|k| FRAMING.contains(&k)) {
        return Ok(vec![]);
    }
    let ev: StreamEvent = serde_json::from_str(raw.get())
        .map_err(|e| Refusal::Shape(format!("claude stream_event with a broken event: {e}")))?;
    Ok(match ev.kind.as_ref() {
        k if FRAMING.contains(&k) => vec![],
        "content_block_delta" => {
            let d = ev.delta.ok_or_else(|| Refusal::Shape("claude content_block_delta without delta".into()))?;
            match d.kind.as_deref().unwrap_or("") {
                "text_delta" => vec![delta(d.text, Channel::Text, l)?],
                "thinking_delta" => vec![delta(d.thinking, Channel::Thinking, l)?],
                // Tool input arrives whole in the block's assistant line; signatures and
                // citations are not shown.
                "input_json_delta" | "signature_delta" | "citations_delta" => vec![],
                other => return Err(Refusal::Unmapped(format!("stream_event/content_block_delta/{other}"))),
            }
        }
        "error" => vec![Data::Error {
            fatal: false,
            message: ev.error.map(|e| Cow::Owned(e.get().to_string())),
            reason: Some(Cow::Borrowed("stream_error")),
            raw: None,
        }],
        other => return Err(Refusal::Unmapped(format!("stream_event/{other}"))),
    })
}

fn delta<'a>(text: S<'a>, channel: Channel, l: &Line<'a>) -> Result<Data<'a>, Refusal> {
    let text = text.ok_or_else(|| Refusal::Shape("claude delta without its text".into()))?;
    Ok(Data::TokenDelta { text, channel, final_: false, message_id: l.api_message_id.clone() })
}

fn message<'a>(l: &Line<'a>) -> Result<Message<'a>, Refusal> {
    let raw = l.message.ok_or_else(|| Refusal::Shape("claude line without message".into()))?;
    serde_json::from_str(raw.get()).map_err(|e| Refusal::Shape(format!("claude message with a broken shape: {e}")))
}

fn blocks<'a>(content: &'a RawValue) -> Result<Vec<Block<'a>>, Refusal> {
    serde_json::from_str(content.get())
        .map_err(|e| Refusal::Shape(format!("claude message content with a broken shape: {e}")))
}

fn assistant<'a>(l: &Line<'a>) -> Result<Vec<Data<'a>>, Refusal> {
    let m = message(l)?;
    let mut out = Vec::new();
    for b in blocks(m.content)? {
        match b.kind.as_ref() {
            "text" => out.push(Data::TokenDelta {
                text: b.text.unwrap_or_default(),
                channel: Channel::Text,
                final_: true,
                message_id: m.id.clone(),
            }),
            "thinking" => out.push(Data::TokenDelta {
                text: b.thinking.unwrap_or_default(),
                channel: Channel::Thinking,
                final_: true,
                message_id: m.id.clone(),
            }),
            "tool_use" | "server_tool_use" => out.push(Data::ToolCall {
                id: b.id,
                name: b.name.unwrap_or(Cow::Borrowed("(unnamed)")),
                args: b.input.map(Json::Raw).unwrap_or(Json::Owned(serde_json::json!({}))),
            }),
            // Redacted thinking has no readable content.
            "redacted_thinking" => {}
            other => out.push(Data::error(format!("unmapped claude kind assistant/{other}"), None)),
        }
    }
    Ok(out)
}

fn user<'a>(l: &Line<'a>) -> Result<Vec<Data<'a>>, Refusal> {
    let m = message(l)?;
    // The live channel's echo (`--replay-user-messages`): a message taken into the conversation here.
    if l.is_replay == Some(true) {
        return Ok(replayed(l, m.content));
    }
    // A plain string is the prompt echoed (stdin mode): not agent output.
    if m.content.get().starts_with('"') {
        return Ok(vec![]);
    }
    let mut out = Vec::new();
    for b in blocks(m.content)? {
        match b.kind.as_ref() {
            "tool_result" => out.push(Data::ToolResult {
                id: b.tool_use_id,
                output: b.content.map(tool_output).unwrap_or_default(),
                is_error: b.is_error.unwrap_or(false),
                exit_code: None,
            }),
            // The prompt echo and the "[Request interrupted by user]" marker: the turn's outcome
            // arrives in `result`.
            "text" | "image" => {}
            other => out.push(Data::error(format!("unmapped claude kind user/{other}"), None)),
        }
    }
    Ok(out)
}

#[derive(Deserialize)]
struct ControlRequest<'a> {
    #[serde(borrow)]
    request_id: S<'a>,
    #[serde(borrow)]
    request: Option<PermissionAsk<'a>>,
}

#[derive(Deserialize)]
struct PermissionAsk<'a> {
    #[serde(borrow)]
    subtype: S<'a>,
    #[serde(borrow)]
    tool_name: S<'a>,
    #[serde(borrow)]
    input: Option<&'a RawValue>,
}

/// A control request on claude's stdout: a tool-permission prompt (`can_use_tool`) is an `approval`
/// event (its id is the approval's); the rest of the stdin control protocol is not agent output.
fn control_request(text: &str) -> Result<Vec<Data<'_>>, Refusal> {
    let c: ControlRequest = serde_json::from_str(text)
        .map_err(|e| Refusal::Shape(format!("claude control_request with a broken shape: {e}")))?;
    Ok(match c.request {
        Some(r) if r.subtype.as_deref() == Some("can_use_tool") => vec![Data::Approval {
            id: c.request_id,
            tool: r.tool_name.unwrap_or(Cow::Borrowed("(unnamed)")),
            args: r.input.map(Json::Raw).unwrap_or(Json::Owned(serde_json::json!({}))),
        }],
        _ => vec![],
    })
}

/// An echoed input line: its text (a string, or its text blocks joined) as an `input` event. Echoed
/// local-command output and synthetic lines are the CLI's own, not the operator's.
fn replayed<'a>(l: &Line<'a>, content: &'a RawValue) -> Vec<Data<'a>> {
    let text = match raw_str(content) {
        Some(t) => t,
        None => match serde_json::from_str::<Vec<Block>>(content.get()) {
            Ok(blocks) => {
                let texts: Vec<&str> = blocks.iter().filter_map(|b| b.text.as_deref()).collect();
                Cow::Owned(texts.join("\n"))
            }
            Err(_) => Cow::Borrowed(content.get()),
        },
    };
    if text.contains("<local-command-stdout>") {
        return vec![];
    }
    vec![Data::Input { id: l.uuid.clone(), text }]
}

/// tool_result content: a string, or blocks whose texts are joined; anything else verbatim.
fn tool_output(raw: &RawValue) -> Cow<'_, str> {
    if let Some(s) = raw_str(raw) {
        return s;
    }
    if let Ok(blocks) = serde_json::from_str::<Vec<Block>>(raw.get()) {
        let texts: Vec<&str> = blocks.iter().filter_map(|b| b.text.as_deref()).collect();
        if texts.len() == blocks.len() {
            return Cow::Owned(texts.join("\n"));
        }
    }
    Cow::Borrowed(raw.get())
}

fn turn_end<'a>(l: &Line<'a>) -> Data<'a> {
    let subtype = l.subtype.as_deref().unwrap_or("");
    let is_error = l.is_error.unwrap_or(subtype != "success");
    let terminal_reason = l
        .terminal_reason
        .clone()
        .or_else(|| (!subtype.is_empty() && subtype != "success").then(|| l.subtype.clone()).flatten());
    Data::TurnEnd {
        is_error,
        result: l.result.and_then(raw_str),
        terminal_reason,
        usage: l.usage.map(Json::Raw),
        duration_ms: l.duration_ms,
        cost_usd: l.total_cost_usd,
    }
}
