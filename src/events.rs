//! `events/v1`: the record the SSE channel and the Web UI bind to, its `seq` (a position in the
//! source logfile, never a counter) and its serialization. No I/O.
//!
//! `seq` of an event is the 1-based ordinal of the raw line that produced it: a JSON number when the
//! line yields one event, the string `"<line>.<k>"` (k = 1, 2, …) when it yields several. Order is
//! `(line, 0) < (line, 1) < (line, 2) < (line + 1, 0)`: a single-event line is `(line, 0)`.

use serde::Serialize;
use serde::ser::{SerializeMap, Serializer};
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::fmt;

pub const VERSION: &str = "events/v1";

/// An event's position: (line ordinal, sub-index). `sub == 0` means "the line's only event".
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Seq {
    pub line: u64,
    pub sub: u32,
}

impl Seq {
    pub fn line(line: u64) -> Seq {
        Seq { line, sub: 0 }
    }

    /// Parses `"12"` or `"12.3"` (what an SSE client sends back as `Last-Event-ID`). Refuses zero
    /// lines, `12.0`, signs, spaces and anything else.
    pub fn parse(s: &str) -> Result<Seq, String> {
        let bad = || format!("invalid seq {:?}: expected <line> or <line>.<k> (positive integers)", short(s));
        let digits = |p: &str| !p.is_empty() && p.len() <= 19 && p.bytes().all(|c| c.is_ascii_digit());
        let (l, sub) = match s.split_once('.') {
            Some((l, k)) if digits(l) && digits(k) && k.len() <= 9 => (l, k.parse::<u32>().map_err(|_| bad())?),
            None if digits(s) => (s, 0),
            _ => return Err(bad()),
        };
        let line = l.parse::<u64>().map_err(|_| bad())?;
        if line == 0 || (s.contains('.') && sub == 0) {
            return Err(bad());
        }
        Ok(Seq { line, sub })
    }
}

fn short(s: &str) -> &str {
    let mut end = s.len().min(40);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

impl fmt::Display for Seq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.sub == 0 { write!(f, "{}", self.line) } else { write!(f, "{}.{}", self.line, self.sub) }
    }
}

impl Serialize for Seq {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.sub == 0 { s.serialize_u64(self.line) } else { s.collect_str(self) }
    }
}

/// `token_delta.channel`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Channel {
    Text,
    Thinking,
}

/// A JSON value carried through untouched (tool args, usage): borrowed raw text, or an owned value
/// built by the normalizer.
#[derive(Debug, Clone)]
pub enum Json<'a> {
    Raw(&'a RawValue),
    Owned(serde_json::Value),
    /// `{"<key>": <string or null>}` without building a `Value`.
    Field(&'static str, Option<Cow<'a, str>>),
}

impl Serialize for Json<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Json::Raw(r) => r.serialize(s),
            Json::Owned(v) => v.serialize(s),
            Json::Field(k, v) => {
                let mut m = s.serialize_map(Some(1))?;
                m.serialize_entry(k, v)?;
                m.end()
            }
        }
    }
}

/// The `data` of each event type, as pinned in `spec/events.schema.json`.
#[derive(Debug, Clone)]
pub enum Data<'a> {
    TurnStart {
        session: Option<Cow<'a, str>>,
        model: Option<Cow<'a, str>>,
        cwd: Option<Cow<'a, str>>,
    },
    TokenDelta {
        text: Cow<'a, str>,
        channel: Channel,
        final_: bool,
        message_id: Option<Cow<'a, str>>,
    },
    ToolCall {
        id: Option<Cow<'a, str>>,
        name: Cow<'a, str>,
        args: Json<'a>,
    },
    ToolResult {
        id: Option<Cow<'a, str>>,
        output: Cow<'a, str>,
        is_error: bool,
        exit_code: Option<i64>,
    },
    TurnEnd {
        is_error: bool,
        result: Option<Cow<'a, str>>,
        terminal_reason: Option<Cow<'a, str>>,
        usage: Option<Json<'a>>,
        duration_ms: Option<f64>,
        cost_usd: Option<f64>,
    },
    Error {
        fatal: bool,
        message: Option<Cow<'a, str>>,
        reason: Option<Cow<'a, str>>,
        raw: Option<String>,
    },
    Exit {
        rc: i64,
        session: Option<Cow<'a, str>>,
    },
    /// A message the operator (or the plan's prompt) put into a live turn, at the line where the
    /// engine took it into the conversation; `id` is the steer's id.
    Input {
        id: Option<Cow<'a, str>>,
        text: Cow<'a, str>,
    },
    /// A tool call asked of the operator on the live channel (claude's `can_use_tool`), at the line
    /// where claude asked; `id` is the approval's id, `state` is `pending`.
    Approval {
        id: Option<Cow<'a, str>>,
        tool: Cow<'a, str>,
        args: Json<'a>,
    },
}

impl Data<'_> {
    pub fn type_name(&self) -> &'static str {
        match self {
            Data::TurnStart { .. } => "turn_start",
            Data::TokenDelta { .. } => "token_delta",
            Data::ToolCall { .. } => "tool_call",
            Data::ToolResult { .. } => "tool_result",
            Data::TurnEnd { .. } => "turn_end",
            Data::Error { .. } => "error",
            Data::Exit { .. } => "exit",
            Data::Input { .. } => "input",
            Data::Approval { .. } => "approval",
        }
    }

    /// A non-fatal `error` event (garbled input, unmapped kinds, engine retry notices).
    pub fn error(reason: impl Into<Cow<'static, str>>, raw: Option<&[u8]>) -> Data<'static> {
        Data::Error { fatal: false, message: None, reason: Some(reason.into()), raw: raw.map(truncate_raw) }
    }
}

/// Longest `raw` excerpt an error event carries.
pub const RAW_MAX: usize = 4096;

/// Up to 4 KiB of the raw line, lossily decoded, cut on a character boundary.
pub fn truncate_raw(raw: &[u8]) -> String {
    let s = String::from_utf8_lossy(&raw[..raw.len().min(RAW_MAX)]);
    let mut s = s.into_owned();
    while s.len() > RAW_MAX {
        s.pop();
    }
    s
}

/// Writes optional fields only when present.
struct Fields<'m, M: SerializeMap>(&'m mut M);

impl<M: SerializeMap> Fields<'_, M> {
    fn opt<T: Serialize>(&mut self, k: &str, v: &Option<T>) -> Result<(), M::Error> {
        if let Some(v) = v { self.0.serialize_entry(k, v) } else { Ok(()) }
    }
}

impl Serialize for Data<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        let mut f = Fields(&mut m);
        match self {
            Data::TurnStart { session, model, cwd } => {
                f.opt("session", session)?;
                f.opt("model", model)?;
                f.opt("cwd", cwd)?;
            }
            Data::TokenDelta { text, channel, final_, message_id } => {
                f.0.serialize_entry("text", text)?;
                f.0.serialize_entry("channel", channel)?;
                if *final_ {
                    f.0.serialize_entry("final", &true)?;
                }
                f.opt("message_id", message_id)?;
            }
            Data::ToolCall { id, name, args } => {
                f.opt("id", id)?;
                f.0.serialize_entry("name", name)?;
                f.0.serialize_entry("args", args)?;
            }
            Data::ToolResult { id, output, is_error, exit_code } => {
                f.opt("id", id)?;
                f.0.serialize_entry("output", output)?;
                f.0.serialize_entry("is_error", is_error)?;
                f.opt("exit_code", exit_code)?;
            }
            Data::TurnEnd { is_error, result, terminal_reason, usage, duration_ms, cost_usd } => {
                f.0.serialize_entry("is_error", is_error)?;
                f.opt("result", result)?;
                f.opt("terminal_reason", terminal_reason)?;
                f.opt("usage", usage)?;
                f.opt("duration_ms", duration_ms)?;
                f.opt("cost_usd", cost_usd)?;
            }
            Data::Error { fatal, message, reason, raw } => {
                f.0.serialize_entry("fatal", fatal)?;
                f.opt("message", message)?;
                f.opt("reason", reason)?;
                f.opt("raw", raw)?;
            }
            Data::Exit { rc, session } => {
                f.0.serialize_entry("rc", rc)?;
                f.opt("session", session)?;
            }
            Data::Input { id, text } => {
                f.opt("id", id)?;
                f.0.serialize_entry("text", text)?;
            }
            Data::Approval { id, tool, args } => {
                f.opt("id", id)?;
                f.0.serialize_entry("tool", tool)?;
                f.0.serialize_entry("args", args)?;
                f.0.serialize_entry("state", "pending")?;
            }
        }
        m.end()
    }
}

/// One events/v1 record.
#[derive(Debug, Clone)]
pub struct Event<'a> {
    pub run: &'a str,
    pub task: &'a str,
    pub session: Option<Cow<'a, str>>,
    pub seq: Seq,
    pub ts: Cow<'a, str>,
    pub data: Data<'a>,
}

impl Serialize for Event<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(8))?;
        m.serialize_entry("v", VERSION)?;
        m.serialize_entry("run", self.run)?;
        m.serialize_entry("task", self.task)?;
        m.serialize_entry("session", &self.session)?;
        m.serialize_entry("seq", &self.seq)?;
        m.serialize_entry("ts", &self.ts)?;
        m.serialize_entry("type", self.data.type_name())?;
        m.serialize_entry("data", &self.data)?;
        m.end()
    }
}

/// Serializes events of one stream fast: the constant envelope head (`v`, `run`, `task`) is
/// serialized once, the rest per event. Produces exactly the bytes of `Event::write_line`.
pub struct Writer {
    /// `{"v":"events/v1","run":<run>,"task":<task>,"session":`
    head: Vec<u8>,
}

impl Writer {
    pub fn new(run: &str, task: &str) -> Writer {
        let mut head = Vec::with_capacity(64 + run.len() + task.len());
        head.extend_from_slice(b"{\"v\":\"events/v1\",\"run\":");
        serde_json::to_writer(&mut head, run).expect("a str serializes");
        head.extend_from_slice(b",\"task\":");
        serde_json::to_writer(&mut head, task).expect("a str serializes");
        head.extend_from_slice(b",\"session\":");
        Writer { head }
    }

    /// Appends `e` as one JSON line. `e.run`/`e.task` must be the ones this writer was made for.
    pub fn write_line(&self, e: &Event, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.head);
        match &e.session {
            Some(s) => str_val(out, s),
            None => out.extend_from_slice(b"null"),
        }
        out.extend_from_slice(b",\"seq\":");
        if e.seq.sub == 0 {
            out.extend_from_slice(itoa_u64(e.seq.line, &mut [0u8; 20]));
        } else {
            out.push(b'"');
            out.extend_from_slice(itoa_u64(e.seq.line, &mut [0u8; 20]));
            out.push(b'.');
            out.extend_from_slice(itoa_u64(e.seq.sub as u64, &mut [0u8; 20]));
            out.push(b'"');
        }
        out.extend_from_slice(b",\"ts\":");
        str_val(out, &e.ts);
        out.extend_from_slice(b",\"type\":\"");
        out.extend_from_slice(e.data.type_name().as_bytes());
        out.extend_from_slice(b"\",\"data\":");
        write_data(&e.data, out);
        out.extend_from_slice(b"}\n");
    }
}

/// A JSON string value, escaped.
fn str_val(out: &mut Vec<u8>, s: &str) {
    // Fast path: nothing to escape.
    if s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
    } else {
        serde_json::to_writer(&mut *out, s).expect("a str serializes");
    }
}

/// `,"key":"value"` when present (`first` omits the comma).
fn opt_str(out: &mut Vec<u8>, first: &mut bool, key: &[u8], v: &Option<Cow<'_, str>>) {
    if let Some(v) = v {
        key_of(out, first, key);
        str_val(out, v);
    }
}

fn key_of(out: &mut Vec<u8>, first: &mut bool, key: &[u8]) {
    if !*first {
        out.push(b',');
    }
    *first = false;
    out.push(b'"');
    out.extend_from_slice(key);
    out.extend_from_slice(b"\":");
}

fn num(out: &mut Vec<u8>, v: f64) {
    serde_json::to_writer(&mut *out, &v).expect("a number serializes");
}

/// `data` as JSON, byte-identical to its `Serialize` impl, with literal keys.
fn write_data(d: &Data, out: &mut Vec<u8>) {
    let mut first = true;
    let f = &mut first;
    out.push(b'{');
    match d {
        Data::TurnStart { session, model, cwd } => {
            opt_str(out, f, b"session", session);
            opt_str(out, f, b"model", model);
            opt_str(out, f, b"cwd", cwd);
        }
        Data::TokenDelta { text, channel, final_, message_id } => {
            key_of(out, f, b"text");
            str_val(out, text);
            out.extend_from_slice(match channel {
                Channel::Text => b",\"channel\":\"text\"",
                Channel::Thinking => b",\"channel\":\"thinking\"",
            });
            if *final_ {
                out.extend_from_slice(b",\"final\":true");
            }
            opt_str(out, f, b"message_id", message_id);
        }
        Data::ToolCall { id, name, args } => {
            opt_str(out, f, b"id", id);
            key_of(out, f, b"name");
            str_val(out, name);
            key_of(out, f, b"args");
            match args {
                Json::Raw(r) => out.extend_from_slice(r.get().as_bytes()),
                other => serde_json::to_writer(&mut *out, other).expect("args serialize"),
            }
        }
        Data::ToolResult { id, output, is_error, exit_code } => {
            opt_str(out, f, b"id", id);
            key_of(out, f, b"output");
            str_val(out, output);
            out.extend_from_slice(if *is_error { b",\"is_error\":true" } else { b",\"is_error\":false" });
            if let Some(c) = exit_code {
                out.extend_from_slice(b",\"exit_code\":");
                serde_json::to_writer(&mut *out, c).expect("an int serializes");
            }
        }
        Data::TurnEnd { is_error, result, terminal_reason, usage, duration_ms, cost_usd } => {
            out.extend_from_slice(if *is_error { b"\"is_error\":true" } else { b"\"is_error\":false" });
            *f = false;
            opt_str(out, f, b"result", result);
            opt_str(out, f, b"terminal_reason", terminal_reason);
            if let Some(u) = usage {
                key_of(out, f, b"usage");
                match u {
                    Json::Raw(r) => out.extend_from_slice(r.get().as_bytes()),
                    other => serde_json::to_writer(&mut *out, other).expect("usage serializes"),
                }
            }
            if let Some(v) = duration_ms {
                key_of(out, f, b"duration_ms");
                num(out, *v);
            }
            if let Some(v) = cost_usd {
                key_of(out, f, b"cost_usd");
                num(out, *v);
            }
        }
        Data::Error { fatal, message, reason, raw } => {
            out.extend_from_slice(if *fatal { b"\"fatal\":true" } else { b"\"fatal\":false" });
            *f = false;
            opt_str(out, f, b"message", message);
            opt_str(out, f, b"reason", reason);
            if let Some(r) = raw {
                key_of(out, f, b"raw");
                str_val(out, r);
            }
        }
        Data::Exit { rc, session } => {
            out.extend_from_slice(b"\"rc\":");
            serde_json::to_writer(&mut *out, rc).expect("an int serializes");
            *f = false;
            opt_str(out, f, b"session", session);
        }
        Data::Input { id, text } => {
            opt_str(out, f, b"id", id);
            key_of(out, f, b"text");
            str_val(out, text);
        }
        Data::Approval { id, tool, args } => {
            opt_str(out, f, b"id", id);
            key_of(out, f, b"tool");
            str_val(out, tool);
            key_of(out, f, b"args");
            match args {
                Json::Raw(r) => out.extend_from_slice(r.get().as_bytes()),
                other => serde_json::to_writer(&mut *out, other).expect("args serialize"),
            }
            out.extend_from_slice(b",\"state\":\"pending\"");
        }
    }
    out.push(b'}');
}

/// Decimal digits of `n` in `buf`.
fn itoa_u64(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    &buf[i..]
}

impl Event<'_> {
    /// Appends the event as one JSON line (with `\n`).
    pub fn write_line(&self, out: &mut Vec<u8>) {
        // Serializing our own types into a Vec cannot fail (no I/O, no non-string map keys).
        serde_json::to_writer(&mut *out, self).expect("events serialize");
        out.push(b'\n');
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("events serialize")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seq_order_and_format() {
        let a = Seq::line(12);
        let b = Seq { line: 12, sub: 1 };
        let c = Seq { line: 12, sub: 2 };
        let d = Seq::line(13);
        assert!(a < b && b < c && c < d);
        assert_eq!(a.to_string(), "12");
        assert_eq!(b.to_string(), "12.1");
        assert_eq!(serde_json::to_string(&a).unwrap(), "12");
        assert_eq!(serde_json::to_string(&b).unwrap(), "\"12.1\"");
        assert_eq!(Seq::parse("12").unwrap(), a);
        assert_eq!(Seq::parse("12.2").unwrap(), c);
        for bad in ["", "0", "-1", "1.0", "1.", ".1", "1.2.3", " 1", "NaN", "1e3", "99999999999999999999999"] {
            assert!(Seq::parse(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn writer_matches_serde_bytes() {
        let w = Writer::new("r\"1", "t\n");
        for seq in [Seq::line(1), Seq::line(1234567), Seq { line: 9, sub: 12 }] {
            for session in [None, Some(Cow::Borrowed("s\u{1}"))] {
                let e = Event {
                    run: "r\"1",
                    task: "t\n",
                    session,
                    seq,
                    ts: Cow::Borrowed("2026-11-30T12:00:00.000Z"),
                    data: Data::Exit { rc: -1, session: None },
                };
                let mut a = Vec::new();
                let mut b = Vec::new();
                e.write_line(&mut a);
                w.write_line(&e, &mut b);
                assert_eq!(String::from_utf8(a).unwrap(), String::from_utf8(b).unwrap());
            }
        }
    }

    #[test]
    fn raw_is_truncated_on_a_char_boundary() {
        let s = "é".repeat(3000);
        let t = truncate_raw(s.as_bytes());
        assert!(t.len() <= RAW_MAX);
        assert!(t.chars().all(|c| c == 'é'));
    }
}
