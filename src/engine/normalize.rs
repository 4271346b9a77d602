//! The normalizer: one engine dialect line → zero or more `events/v1` events.
//!
//! A pure function of `(adapter, line number, line bytes, context)`. No clock (the context carries
//! `observed_ts`), no counter (`seq` is the line ordinal), no I/O, no state between lines: the same
//! line at the same position always yields the same events, in any process, after any reconnect.
//!
//! Lines are parsed into borrowed, typed envelopes (fields the mapping needs; everything else is
//! skipped by the parser), so the hot path does not build a DOM. A line the typed parse refuses is
//! classified by a second, slow parse — not JSON, not an object, a known kind with a broken shape, or
//! an unmapped kind — and becomes exactly one `error` event carrying up to 4 KiB of the raw line.

use super::Adapter;
use super::{claude, codex, cursor};
use crate::events::{Data, Event, Seq};
use serde::Deserialize;
use serde_json::value::RawValue;
use std::borrow::Cow;

/// What the caller knows about the stream: ids for the envelope, the session to fall back on, and
/// the time the line was observed (the event's `ts` when the line carries none).
#[derive(Debug, Clone, Copy)]
pub struct Context<'a> {
    pub run: &'a str,
    pub task: &'a str,
    pub session: Option<&'a str>,
    pub observed_ts: &'a str,
}

/// An optional string field of a raw line, borrowed from it when it needs no unescaping.
pub(crate) type S<'a> = Option<Cow<'a, str>>;

/// What a dialect mapper extracts from one well-formed line.
pub(crate) struct Mapped<'a> {
    /// The session id the line itself carries.
    pub session: Option<Cow<'a, str>>,
    /// The line's own timestamp, RFC 3339.
    pub ts: Option<Cow<'a, str>>,
    /// Events in order; empty = the line is skipped on purpose (see `spec/EVENTS.md`).
    pub data: Vec<Data<'a>>,
}

/// Why a dialect mapper refused a line.
pub(crate) enum Refusal {
    /// The typed parse failed: the slow classifier decides what to report.
    Parse,
    /// The line is well-formed but its kind is not in the mapping table.
    Unmapped(String),
    /// A known kind whose fields are not what the mapping needs.
    Shape(String),
}

/// The wrapper's exit marker, the same in every dialect (see `spec/WRAPPER-CONTRACT.md`).
#[derive(Deserialize)]
struct ExitMarker<'a> {
    #[serde(borrow)]
    harness: Cow<'a, str>,
    rc: Option<i64>,
    #[serde(borrow, default)]
    session_id: Option<Cow<'a, str>>,
    /// When the wrapper wrote it (added with true times).
    #[serde(borrow, default)]
    ts: Option<Cow<'a, str>>,
}

/// Normalizes one raw line. `line` may end with `\n`/`\r\n`; blank lines yield nothing.
pub fn normalize_line<'a>(adapter: Adapter, line_no: u64, line: &'a [u8], ctx: &Context<'a>) -> Vec<Event<'a>> {
    let mut out = Vec::new();
    each_event(adapter, line_no, line, ctx, |e| out.push(e));
    out
}

/// Like `normalize_line`, handing each event to `f` in order instead of collecting them.
pub fn each_event<'a>(adapter: Adapter, line_no: u64, line: &'a [u8], ctx: &Context<'a>, mut f: impl FnMut(Event<'a>)) {
    let trimmed = trim(line);
    if trimmed.is_empty() {
        return;
    }
    let mapped = match std::str::from_utf8(trimmed) {
        Err(e) => Err(Data::error(format!("not UTF-8 (invalid byte at offset {})", e.valid_up_to()), Some(trimmed))),
        Ok(text) => map_text(adapter, text),
    };
    let (session, ts, data) = match mapped {
        Ok(m) => (m.session, m.ts, m.data),
        Err(err) => (None, None, vec![err]),
    };
    let session = session.or_else(|| ctx.session.map(Cow::Borrowed));
    // An engine's own time that is not one (month 13, year 10000) is not passed on as the event's:
    // the line's observed time stands in (events/v1 `ts` is a date-time).
    let ts = ts.filter(|t| humantime::parse_rfc3339_weak(t).is_ok()).unwrap_or(Cow::Borrowed(ctx.observed_ts));
    let n = data.len();
    for (i, d) in data.into_iter().enumerate() {
        f(Event {
            run: ctx.run,
            task: ctx.task,
            session: session.clone(),
            seq: Seq { line: line_no, sub: if n == 1 { 0 } else { i as u32 + 1 } },
            ts: ts.clone(),
            data: d,
        });
    }
}

fn trim(line: &[u8]) -> &[u8] {
    let mut end = line.len();
    while end > 0 && line[end - 1].is_ascii_whitespace() {
        end -= 1;
    }
    let mut start = 0;
    while start < end && line[start].is_ascii_whitespace() {
        start += 1;
    }
    &line[start..end]
}

fn map_text(adapter: Adapter, text: &str) -> Result<Mapped<'_>, Data<'static>> {
    if text.starts_with("{\"harness\"") {
        return exit_marker(text);
    }
    let r = match adapter {
        Adapter::Claude => claude::normalize::map(text),
        Adapter::Cursor => cursor::normalize::map(text),
        Adapter::Codex => codex::normalize::map(text),
    };
    r.map_err(|refusal| match refusal {
        Refusal::Unmapped(kind) => Data::error(format!("unmapped {adapter} kind {kind}"), Some(text.as_bytes())),
        Refusal::Shape(why) => Data::error(why, Some(text.as_bytes())),
        Refusal::Parse => classify(adapter, text),
    })
}

fn exit_marker(text: &str) -> Result<Mapped<'_>, Data<'static>> {
    match serde_json::from_str::<ExitMarker>(text) {
        Ok(m) if m.harness == "exit" => match m.rc {
            Some(rc) => {
                let session = m.session_id.clone();
                Ok(Mapped { session: m.session_id, ts: m.ts, data: vec![Data::Exit { rc, session }] })
            }
            None => Err(Data::error("harness exit marker without an integer rc", Some(text.as_bytes()))),
        },
        Ok(m) => Err(Data::error(format!("unmapped harness marker {:?}", m.harness), Some(text.as_bytes()))),
        Err(e) => Err(Data::error(format!("broken harness marker: {e}"), Some(text.as_bytes()))),
    }
}

/// The slow path for a line the typed parse refused: says precisely what is wrong with it.
fn classify(adapter: Adapter, text: &str) -> Data<'static> {
    let raw = Some(text.as_bytes());
    let v: serde_json::Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => return Data::error(format!("not JSON: {e}"), raw),
    };
    let Some(obj) = v.as_object() else {
        return Data::error("JSON but not an object", raw);
    };
    let kind = obj.get("type").and_then(|t| t.as_str()).unwrap_or("(no type)");
    // Re-run the typed parse to get serde's own words for the broken field.
    let why = match adapter {
        Adapter::Claude => parse_error::<claude::normalize::Line>(text),
        Adapter::Cursor => parse_error::<cursor::normalize::Line>(text),
        Adapter::Codex => parse_error::<codex::normalize::Line>(text),
    };
    Data::error(format!("{adapter} {kind} line with a broken shape: {why}"), raw)
}

/// serde's own words for why a dialect's envelope `T` refuses `text`.
fn parse_error<'a, T: Deserialize<'a>>(text: &'a str) -> String {
    match serde_json::from_str::<T>(text) {
        Ok(_) => "nested field has an unexpected type".into(),
        Err(e) => e.to_string(),
    }
}

/// A raw JSON string value, decoded; `None` when `raw` is not a JSON string.
pub(crate) fn raw_str(raw: &RawValue) -> Option<Cow<'_, str>> {
    if !raw.get().starts_with('"') {
        return None;
    }
    serde_json::from_str::<Cow<str>>(raw.get()).ok()
}

/// Milliseconds since the Unix epoch → RFC 3339 with milliseconds.
pub(crate) fn ts_from_ms(ms: f64) -> Option<String> {
    if !ms.is_finite() || !(0.0..=253_402_300_799_000.0).contains(&ms) {
        return None;
    }
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms as u64);
    Some(humantime::format_rfc3339_millis(t).to_string())
}

/// Normalizes the complete lines at the start of `input` (all of it when `at_eof`: a final line
/// without a newline is normalized too, the stream being over) into events/v1 JSON lines appended to
/// `out`. `line_no` is the ordinal of `input`'s first line and is advanced past the lines consumed.
/// Returns how many bytes were consumed; the caller keeps the rest for the next call. The one
/// streaming entry point: `normalize-events` feeds it from stdin, `normalize_stream` a whole buffer.
pub fn normalize_lines(
    adapter: Adapter,
    input: &[u8],
    at_eof: bool,
    line_no: &mut u64,
    ctx: &Context<'_>,
    w: &crate::events::Writer,
    out: &mut Vec<u8>,
) -> usize {
    let complete = if at_eof { input.len() } else { memchr::memrchr(b'\n', input).map_or(0, |i| i + 1) };
    let mut rest = &input[..complete];
    while !rest.is_empty() {
        let end = memchr::memchr(b'\n', rest).map_or(rest.len(), |i| i + 1);
        each_event(adapter, *line_no, &rest[..end], ctx, |e| w.write_line(&e, out));
        *line_no += 1;
        rest = &rest[end..];
    }
    complete
}

/// Normalizes a whole byte stream, line by line, into events/v1 JSON lines (what
/// `harness normalize-events` prints). `first_line` is the ordinal of the first line in `input`.
/// A final line without a newline is normalized too (the stream is over).
pub fn normalize_stream(adapter: Adapter, input: &[u8], first_line: u64, ctx: &Context<'_>, out: &mut Vec<u8>) {
    let w = crate::events::Writer::new(ctx.run, ctx.task);
    let mut line_no = first_line;
    normalize_lines(adapter, input, true, &mut line_no, ctx, &w, out);
}
