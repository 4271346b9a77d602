//! Codex `exec --json` → events/v1. The mapping table is `spec/EVENTS.md` § codex. Facts it respects:
//! the session id (`thread_id`) rides only `thread.started`; there are no token deltas, so complete
//! items are `final: true`; an `error` line can be a non-fatal retry notice (only `turn.failed` or the
//! exit status is final); a killed codex prints no terminal event.

use crate::engine::normalize::{Mapped, Refusal, S, raw_str};
use crate::events::{Channel, Data, Json};
use serde::Deserialize;
use serde_json::json;
use serde_json::value::RawValue;
use std::borrow::Cow;

#[derive(Deserialize)]
pub(crate) struct Line<'a> {
    #[serde(borrow, rename = "type")]
    kind: S<'a>,
    #[serde(borrow)]
    thread_id: S<'a>,
    #[serde(borrow)]
    item: Option<Item<'a>>,
    #[serde(borrow)]
    usage: Option<&'a RawValue>,
    #[serde(borrow)]
    error: Option<&'a RawValue>,
    #[serde(borrow)]
    message: S<'a>,
}

#[derive(Deserialize)]
struct Item<'a> {
    #[serde(borrow)]
    id: S<'a>,
    #[serde(borrow, rename = "type")]
    kind: Cow<'a, str>,
    #[serde(borrow)]
    text: S<'a>,
    #[serde(borrow)]
    command: S<'a>,
    #[serde(borrow)]
    aggregated_output: S<'a>,
    exit_code: Option<i64>,
    #[serde(borrow)]
    status: S<'a>,
    #[serde(borrow)]
    changes: Option<&'a RawValue>,
    #[serde(borrow)]
    server: S<'a>,
    #[serde(borrow)]
    tool: S<'a>,
    #[serde(borrow)]
    arguments: Option<&'a RawValue>,
    #[serde(borrow)]
    result: Option<&'a RawValue>,
    #[serde(borrow)]
    error: Option<&'a RawValue>,
    #[serde(borrow)]
    query: S<'a>,
    #[serde(borrow)]
    message: S<'a>,
}

#[derive(Deserialize)]
struct Change<'a> {
    #[serde(borrow)]
    path: Cow<'a, str>,
    #[serde(borrow)]
    kind: S<'a>,
}

#[derive(Deserialize)]
struct ErrorObj<'a> {
    #[serde(borrow)]
    message: S<'a>,
}

pub(crate) fn map(text: &str) -> Result<Mapped<'_>, Refusal> {
    let l: Line = serde_json::from_str(text).map_err(|_| Refusal::Parse)?;
    let kind = l.kind.as_deref().unwrap_or("(no type)");
    let data = match kind {
        "thread.started" => {
            let id =
                l.thread_id.clone().ok_or_else(|| Refusal::Shape("codex thread.started without thread_id".into()))?;
            vec![Data::TurnStart { session: Some(id), model: None, cwd: None }]
        }
        // The turn_start was emitted for thread.started, which precedes it on every run and resume.
        "turn.started" => vec![],
        "turn.completed" => vec![Data::TurnEnd {
            is_error: false,
            result: None,
            terminal_reason: None,
            usage: l.usage.map(Json::Raw),
            duration_ms: None,
            cost_usd: None,
        }],
        "turn.failed" => vec![Data::TurnEnd {
            is_error: true,
            result: l.error.and_then(error_message),
            terminal_reason: Some(Cow::Borrowed("turn_failed")),
            usage: l.usage.map(Json::Raw),
            duration_ms: None,
            cost_usd: None,
        }],
        "error" => vec![Data::Error {
            fatal: false,
            message: l.message.clone().or_else(|| l.error.and_then(error_message)),
            reason: Some(Cow::Borrowed("engine_error")),
            raw: None,
        }],
        "item.started" | "item.updated" | "item.completed" => {
            let item = l.item.as_ref().ok_or_else(|| Refusal::Shape(format!("codex {kind} without item")))?;
            item_events(kind, item)?
        }
        other => return Err(Refusal::Unmapped(other.to_string())),
    };
    Ok(Mapped { session: l.thread_id, ts: None, data })
}

fn error_message(raw: &RawValue) -> Option<Cow<'_, str>> {
    raw_str(raw).or_else(|| serde_json::from_str::<ErrorObj>(raw.get()).ok().and_then(|e| e.message))
}

fn item_events<'a>(event: &str, item: &Item<'a>) -> Result<Vec<Data<'a>>, Refusal> {
    let k = item.kind.as_ref();
    let unmapped = || Refusal::Unmapped(format!("{event}/{k}"));
    Ok(match event {
        "item.started" => match k {
            "command_execution" => vec![Data::ToolCall {
                id: item.id.clone(),
                name: Cow::Borrowed("command_execution"),
                args: Json::Field("command", item.command.clone()),
            }],
            "file_change" => vec![Data::ToolCall {
                id: item.id.clone(),
                name: Cow::Borrowed("file_change"),
                args: Json::Owned(json!({"changes": item.changes.map(Json::Raw)})),
            }],
            "mcp_tool_call" => vec![Data::ToolCall {
                id: item.id.clone(),
                name: Cow::Owned(format!(
                    "mcp:{}/{}",
                    item.server.as_deref().unwrap_or("?"),
                    item.tool.as_deref().unwrap_or("?")
                )),
                args: item.arguments.map(Json::Raw).unwrap_or(Json::Owned(json!({}))),
            }],
            "web_search" => vec![Data::ToolCall {
                id: item.id.clone(),
                name: Cow::Borrowed("web_search"),
                args: Json::Field("query", item.query.clone()),
            }],
            // Messages, reasoning and plans are shown when complete; an error item when complete.
            "agent_message" | "reasoning" | "todo_list" | "error" => vec![],
            _ => return Err(unmapped()),
        },
        // Progress of an item already announced; its completion carries the result.
        "item.updated" => match k {
            "agent_message" | "reasoning" | "command_execution" | "file_change" | "mcp_tool_call" | "web_search"
            | "todo_list" | "error" => vec![],
            _ => return Err(unmapped()),
        },
        _ => match k {
            "agent_message" => vec![Data::TokenDelta {
                text: item.text.clone().unwrap_or_default(),
                channel: Channel::Text,
                final_: true,
                message_id: item.id.clone(),
            }],
            "reasoning" => vec![Data::TokenDelta {
                text: item.text.clone().unwrap_or_default(),
                channel: Channel::Thinking,
                final_: true,
                message_id: item.id.clone(),
            }],
            "command_execution" => vec![Data::ToolResult {
                id: item.id.clone(),
                output: item.aggregated_output.clone().unwrap_or_default(),
                is_error: item.status.as_deref() == Some("failed") || item.exit_code.is_some_and(|c| c != 0),
                exit_code: item.exit_code,
            }],
            "file_change" => vec![Data::ToolResult {
                id: item.id.clone(),
                output: Cow::Owned(change_summary(item.changes)),
                is_error: item.status.as_deref() == Some("failed"),
                exit_code: None,
            }],
            "mcp_tool_call" => {
                let failed = item.status.as_deref() == Some("failed") || item.error.is_some();
                let out = if failed { item.error } else { item.result };
                vec![Data::ToolResult {
                    id: item.id.clone(),
                    output: out.map(|r| raw_str(r).unwrap_or(Cow::Borrowed(r.get()))).unwrap_or_default(),
                    is_error: failed,
                    exit_code: None,
                }]
            }
            "web_search" => vec![Data::ToolResult {
                id: item.id.clone(),
                output: item.query.clone().unwrap_or_default(),
                is_error: false,
                exit_code: None,
            }],
            // The agent's plan bookkeeping: the turn's messages say what it did.
            "todo_list" => vec![],
            "error" => vec![Data::Error {
                fatal: false,
                message: item.message.clone().or_else(|| item.text.clone()),
                reason: Some(Cow::Borrowed("engine_error")),
                raw: None,
            }],
            _ => return Err(unmapped()),
        },
    })
}

/// `add hello.txt, update src/x.rs` from a file_change item's `changes`.
fn change_summary(changes: Option<&RawValue>) -> String {
    let Some(raw) = changes else { return String::new() };
    match serde_json::from_str::<Vec<Change>>(raw.get()) {
        Ok(cs) => cs
            .iter()
            .map(|c| format!("{} {}", c.kind.as_deref().unwrap_or("change"), c.path))
            .collect::<Vec<_>>()
            .join(", "),
        Err(_) => raw.get().to_string(),
    }
}
