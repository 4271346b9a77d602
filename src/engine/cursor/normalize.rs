//! cursor-agent `-p --output-format stream-json [--stream-partial-output]` → events/v1. The mapping
//! table is `spec/EVENTS.md` § cursor. Facts it respects: `session_id` on every line; `call_id` can hold
//! a newline; tool calls are keyed by tool kind (`shellToolCall`, `readToolCall`, …); parallel calls
//! complete in completion order. An `assistant` line is a streamed chunk when it has `timestamp_ms`
//! and no `model_call_id` (partial-output mode: `final: false`); otherwise it is a complete message —
//! the message of one model call (`model_call_id`) or the closing message (neither field) — and is
//! `final: true`.

use crate::engine::normalize::{Mapped, Refusal, S, raw_str, ts_from_ms};
use crate::events::{Channel, Data, Json};
use serde::Deserialize;
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::collections::BTreeMap;

#[derive(Deserialize)]
pub(crate) struct Line<'a> {
    #[serde(borrow, rename = "type")]
    kind: S<'a>,
    #[serde(borrow)]
    subtype: S<'a>,
    #[serde(borrow)]
    session_id: S<'a>,
    #[serde(borrow)]
    model: S<'a>,
    #[serde(borrow)]
    cwd: S<'a>,
    #[serde(borrow)]
    text: S<'a>,
    timestamp_ms: Option<f64>,
    #[serde(borrow)]
    message: Option<&'a RawValue>,
    #[serde(borrow)]
    model_call_id: S<'a>,
    #[serde(borrow)]
    call_id: S<'a>,
    #[serde(borrow)]
    tool_call: Option<&'a RawValue>,
    is_error: Option<bool>,
    #[serde(borrow)]
    result: Option<&'a RawValue>,
    duration_ms: Option<f64>,
}

#[derive(Deserialize)]
struct Message<'a> {
    #[serde(borrow)]
    content: Vec<Block<'a>>,
}

#[derive(Deserialize)]
struct Block<'a> {
    #[serde(borrow, rename = "type")]
    kind: Cow<'a, str>,
    #[serde(borrow)]
    text: S<'a>,
}

#[derive(Deserialize)]
struct ToolBody<'a> {
    #[serde(borrow)]
    args: Option<&'a RawValue>,
    #[serde(borrow)]
    result: Option<&'a RawValue>,
    #[serde(borrow)]
    name: S<'a>,
    #[serde(borrow)]
    arguments: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct ToolOutcome<'a> {
    #[serde(borrow)]
    success: Option<&'a RawValue>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Success<'a> {
    #[serde(borrow)]
    stdout: S<'a>,
    #[serde(borrow)]
    stderr: S<'a>,
    exit_code: Option<i64>,
}

pub(crate) fn map(text: &str) -> Result<Mapped<'_>, Refusal> {
    let l: Line = serde_json::from_str(text).map_err(|_| Refusal::Parse)?;
    let kind = l.kind.as_deref().unwrap_or("(no type)");
    let sub = l.subtype.as_deref().unwrap_or("");
    let data = match (kind, sub) {
        ("system", "init") => {
            vec![Data::TurnStart { session: l.session_id.clone(), model: l.model.clone(), cwd: l.cwd.clone() }]
        }
        // The prompt, echoed.
        ("user", _) => vec![],
        ("thinking", "delta") => vec![Data::TokenDelta {
            text: l.text.clone().unwrap_or_default(),
            channel: Channel::Thinking,
            final_: false,
            message_id: None,
        }],
        // End-of-thinking marker, no content.
        ("thinking", "completed") => vec![],
        ("assistant", _) => assistant(&l)?,
        ("tool_call", "started") => vec![tool_call(&l)?],
        ("tool_call", "completed") => vec![tool_result(&l)?],
        ("result", _) => vec![Data::TurnEnd {
            is_error: l.is_error.unwrap_or(sub != "success"),
            result: l.result.and_then(raw_str),
            terminal_reason: (sub != "success" && !sub.is_empty()).then(|| l.subtype.clone()).flatten(),
            usage: None,
            duration_ms: l.duration_ms,
            cost_usd: None,
        }],
        (k, "") => return Err(Refusal::Unmapped(k.to_string())),
        (k, s) => return Err(Refusal::Unmapped(format!("{k}/{s}"))),
    };
    let ts = l.timestamp_ms.and_then(ts_from_ms).map(Cow::Owned);
    Ok(Mapped { session: l.session_id, ts, data })
}

fn assistant<'a>(l: &Line<'a>) -> Result<Vec<Data<'a>>, Refusal> {
    let raw = l.message.ok_or_else(|| Refusal::Shape("cursor assistant line without message".into()))?;
    let m: Message = serde_json::from_str(raw.get())
        .map_err(|e| Refusal::Shape(format!("cursor assistant message with a broken shape: {e}")))?;
    let final_ = l.model_call_id.is_some() || l.timestamp_ms.is_none();
    let mut text = String::new();
    for b in &m.content {
        match (b.kind.as_ref(), &b.text) {
            ("text", Some(t)) => text.push_str(t),
            (other, _) => {
                return Err(Refusal::Unmapped(format!("assistant/{other}")));
            }
        }
    }
    Ok(vec![Data::TokenDelta {
        text: Cow::Owned(text),
        channel: Channel::Text,
        final_,
        message_id: l.model_call_id.clone(),
    }])
}

/// The single `{"<kind>ToolCall": {...}}` entry of a tool_call line.
fn tool_entry<'a>(l: &Line<'a>) -> Result<(Cow<'a, str>, ToolBody<'a>), Refusal> {
    let raw = l.tool_call.ok_or_else(|| Refusal::Shape("cursor tool_call line without tool_call".into()))?;
    let map: BTreeMap<Cow<'a, str>, ToolBody<'a>> = serde_json::from_str(raw.get())
        .map_err(|e| Refusal::Shape(format!("cursor tool_call with a broken shape: {e}")))?;
    let (key, body) =
        map.into_iter().next().ok_or_else(|| Refusal::Shape("cursor tool_call object is empty".into()))?;
    let name = match key.strip_suffix("ToolCall") {
        Some(n) if !n.is_empty() => Cow::Owned(n.to_string()),
        _ if key == "function" => body.name.clone().unwrap_or(key),
        _ => key,
    };
    Ok((name, body))
}

fn tool_call<'a>(l: &Line<'a>) -> Result<Data<'a>, Refusal> {
    let (name, body) = tool_entry(l)?;
    let args = body.args.or(body.arguments).map(Json::Raw).unwrap_or(Json::Owned(serde_json::json!({})));
    Ok(Data::ToolCall { id: l.call_id.clone(), name, args })
}

fn tool_result<'a>(l: &Line<'a>) -> Result<Data<'a>, Refusal> {
    let (_, body) = tool_entry(l)?;
    let Some(result) = body.result else {
        return Ok(Data::ToolResult {
            id: l.call_id.clone(),
            output: Cow::Borrowed(""),
            is_error: true,
            exit_code: None,
        });
    };
    let outcome: ToolOutcome = serde_json::from_str(result.get())
        .map_err(|e| Refusal::Shape(format!("cursor tool result with a broken shape: {e}")))?;
    let Some(success) = outcome.success else {
        // failure / error / rejected: show what the engine said.
        return Ok(Data::ToolResult {
            id: l.call_id.clone(),
            output: Cow::Borrowed(result.get()),
            is_error: true,
            exit_code: None,
        });
    };
    let s: Success =
        serde_json::from_str(success.get()).unwrap_or(Success { stdout: None, stderr: None, exit_code: None });
    let output = match (&s.stdout, &s.stderr) {
        (Some(o), Some(e)) if !e.is_empty() => {
            Cow::Owned(if o.is_empty() { e.to_string() } else { format!("{o}\n{e}") })
        }
        (Some(o), _) => o.clone(),
        (None, _) => Cow::Borrowed(success.get()),
    };
    Ok(Data::ToolResult {
        id: l.call_id.clone(),
        output,
        is_error: s.exit_code.is_some_and(|c| c != 0),
        exit_code: s.exit_code,
    })
}
