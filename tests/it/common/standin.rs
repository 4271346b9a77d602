//! A local model stand-in: an HTTP/1.1 server on 127.0.0.1 that speaks enough of the Anthropic
//! Messages API (`POST /v1/messages`, streaming SSE) and the OpenAI Responses API (`POST
//! /v1/responses`, streaming SSE) for the real Claude Code and Codex CLIs to hold a scripted
//! conversation offline. Every request is recorded (path, parsed body, arrival time) and every text
//! delta's send time is logged, so tests can assert what a CLI sent and benchmarks can time what the
//! harness relays.
//!
//! The script is chosen by a directive in the text of the request's last user message:
//!
//! | directive | answer |
//! |---|---|
//! | (none) | a short text: `Hi there! This request carried N message(s).` |
//! | `[anthropic:tool]` / `[openai:tool]` | a tool call running `echo hi` (claude `Bash`, codex `exec_command`) |
//! | `[anthropic:run:CMD]` | a Bash tool call running CMD (no `]` in it) |
//! | `[anthropic:slow:N:MS]` / `[openai:slow:N:MS]` | N text deltas `dK ` sent MS ms apart |
//! | `[anthropic:twotools:MS]` | a slow two-tool turn: `Step 1.` + Bash `sleep MS/1000; echo TOOL1-DONE`, then `Step 2.` + the same with TOOL2, then `Done. User texts after the prompt: [...]` quoting every user text that came after the directive's message (mid-turn messages included) |
//! | `[anthropic:error:STATUS]` / `[openai:error:STATUS]` | that HTTP status with an error body |
//! | `[openai:approve]` / `[openai:reject]` | the verdict `APPROVE` / `REJECT: <reason>` |
//!
//! After a tool result (claude `tool_result`, codex `function_call_output`) the answer is
//! `The tool returned: <output>. Done.` The two families are separate so one prompt can script both
//! seats (a claude task's prompt is quoted in its codex review prompt).
#![allow(dead_code)]

use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One request the stand-in received.
#[derive(Debug, Clone)]
pub struct Request {
    pub at: Instant,
    pub method: String,
    pub path: String,
    /// The body parsed as JSON (`Value::Null` when it was not JSON).
    pub body: Value,
}

/// One text delta the stand-in sent, and when (just after the write to the socket returned).
#[derive(Debug, Clone)]
pub struct Sent {
    pub at: Instant,
    pub text: String,
}

#[derive(Default)]
struct State {
    requests: Mutex<Vec<Request>>,
    sent: Mutex<Vec<Sent>>,
    ids: AtomicU64,
    stop: AtomicBool,
}

/// The running stand-in; stops (and ends slow streams) when dropped.
pub struct StandIn {
    pub port: u16,
    state: Arc<State>,
}

impl StandIn {
    pub fn start() -> StandIn {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the stand-in on loopback");
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(State::default());
        let st = state.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if st.stop.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let st = st.clone();
                std::thread::spawn(move || {
                    let _ = serve(conn, &st);
                });
            }
        });
        StandIn { port, state }
    }

    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn requests(&self) -> Vec<Request> {
        self.state.requests.lock().unwrap().clone()
    }

    /// Requests to one API path (`/v1/messages`, `/v1/responses`), query string ignored.
    pub fn requests_to(&self, path: &str) -> Vec<Request> {
        self.requests().into_iter().filter(|r| r.path.split('?').next() == Some(path)).collect()
    }

    pub fn sent(&self) -> Vec<Sent> {
        self.state.sent.lock().unwrap().clone()
    }

    pub fn clear_sent(&self) {
        self.state.sent.lock().unwrap().clear();
    }
}

impl Drop for StandIn {
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// What the stand-in is asked to do, from the last user message.
#[derive(Debug, Clone, PartialEq)]
enum Script {
    Text(String),
    Tool,
    /// Text, then a Bash tool call running the command.
    Cmd(String, String),
    ToolFollowUp(String),
    Slow(u32, u64),
    Error(u16),
}

impl Script {
    /// The text the answer streams before any tool call, and the gap between its deltas (ms).
    fn text_deltas(&self) -> (Vec<String>, u64) {
        match self {
            Script::Text(t) => (words(t), 0),
            Script::Tool => (words("I'll run a command."), 0),
            Script::Cmd(text, _) => (words(text), 0),
            Script::ToolFollowUp(out) => (words(&format!("The tool returned: {out}. Done.")), 0),
            Script::Slow(count, gap) => ((0..*count).map(|k| format!("d{k} ")).collect(), *gap),
            Script::Error(_) => (Vec::new(), 0),
        }
    }
}

fn directive(text: &str, family: &str) -> Option<Script> {
    // The last one wins: the user's words come after anything quoted ahead of them.
    let open = format!("[{family}:");
    let start = text.rfind(&open)? + open.len();
    let end = start + text[start..].find(']')?;
    let parts: Vec<&str> = text[start..end].split(':').collect();
    match parts.as_slice() {
        ["tool"] => Some(Script::Tool),
        ["run", rest @ ..] if !rest.is_empty() => Some(Script::Cmd("I'll run a command.".into(), rest.join(":"))),
        ["slow", n, ms] => Some(Script::Slow(n.parse().ok()?, ms.parse().ok()?)),
        ["error", status] => Some(Script::Error(status.parse().ok()?)),
        ["approve"] => Some(Script::Text("APPROVE\n\nThe change does what the task asked.".into())),
        ["reject"] => Some(Script::Text("REJECT: the change is missing a test\n\nAdd one.".into())),
        _ => None,
    }
}

/// Every string inside a JSON value, concatenated (the text of a message, whatever its shape).
fn all_text(v: &Value, out: &mut String) {
    match v {
        Value::String(s) => {
            out.push_str(s);
            out.push('\n');
        }
        Value::Array(a) => a.iter().for_each(|x| all_text(x, out)),
        Value::Object(o) => o.values().for_each(|x| all_text(x, out)),
        _ => {}
    }
}

/// A user message's own text: its text blocks but the `<system-reminder>`s Claude Code prepends, no
/// tool results.
fn own_text(m: &Value) -> String {
    let mut text = String::new();
    match m["content"].as_array() {
        Some(blocks) => blocks
            .iter()
            .filter(|b| b["type"] == "text")
            .filter(|b| !b["text"].as_str().is_some_and(|t| t.trim_start().starts_with("<system-reminder>")))
            .for_each(|b| all_text(&b["text"], &mut text)),
        None => all_text(&m["content"], &mut text),
    }
    text
}

/// The two-tool script, when a user message asked for it: where its turn stands.
fn twotools(messages: &[Value]) -> Option<Script> {
    let k = messages.iter().rposition(|m| m["role"] == "user" && own_text(m).contains("[anthropic:twotools:"))?;
    let text = own_text(&messages[k]);
    let start = text.rfind("[anthropic:twotools:")? + "[anthropic:twotools:".len();
    let ms: u64 = text[start..start + text[start..].find(']')?].parse().ok()?;
    let later = &messages[k + 1..];
    let results = later
        .iter()
        .filter(|m| m["role"] == "user")
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .filter(|b| b["type"] == "tool_result")
        .count();
    let secs = format!("{}.{:03}", ms / 1000, ms % 1000);
    Some(match results {
        0 => Script::Cmd("Step 1.".into(), format!("sleep {secs}; echo TOOL1-DONE")),
        1 => Script::Cmd("Step 2.".into(), format!("sleep {secs}; echo TOOL2-DONE")),
        _ => {
            let notes: Vec<String> = later
                .iter()
                .filter(|m| m["role"] == "user")
                .map(own_text)
                .map(|t| t.trim().to_string())
                .filter(|t| !t.is_empty())
                .collect();
            Script::Text(format!("Done. User texts after the prompt: {notes:?}"))
        }
    })
}

fn anthropic_script(body: &Value) -> Script {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    if let Some(s) = twotools(&messages) {
        return s;
    }
    let n = messages.len();
    let Some(last) = messages.iter().rev().find(|m| m["role"] == "user") else {
        return Script::Text(format!("Hi there! This request carried {n} message(s)."));
    };
    if let Some(blocks) = last["content"].as_array()
        && let Some(result) = blocks.iter().rev().find(|b| b["type"] == "tool_result")
    {
        let mut out = String::new();
        all_text(&result["content"], &mut out);
        return Script::ToolFollowUp(out.trim().to_string());
    }
    // Claude Code prepends `<system-reminder>` blocks (git status, recent commit subjects — which can
    // quote an earlier task's directive): only the user's own text scripts the answer.
    let mut text = String::new();
    match last["content"].as_array() {
        Some(blocks) => blocks
            .iter()
            .filter(|b| !b["text"].as_str().is_some_and(|t| t.trim_start().starts_with("<system-reminder>")))
            .for_each(|b| all_text(b, &mut text)),
        None => all_text(&last["content"], &mut text),
    }
    directive(&text, "anthropic").unwrap_or(Script::Text(format!("Hi there! This request carried {n} message(s).")))
}

fn openai_script(body: &Value) -> Script {
    let input = body["input"].as_array().cloned().unwrap_or_default();
    let n = input.len();
    if let Some(last) = input.last()
        && last["type"] == "function_call_output"
    {
        let mut out = String::new();
        all_text(&last["output"], &mut out);
        return Script::ToolFollowUp(out.trim().replace('\n', " | "));
    }
    let Some(last) = input.iter().rev().find(|m| m["role"] == "user") else {
        return Script::Text(format!("Hi there! This request carried {n} input item(s)."));
    };
    let mut text = String::new();
    all_text(&last["content"], &mut text);
    directive(&text, "openai").unwrap_or(Script::Text(format!("Hi there! This request carried {n} input item(s).")))
}

/// A request as read off the socket: method, path, headers (names lowercased), body.
struct Raw {
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

/// Reads one request; None at EOF.
fn read_request(r: &mut BufReader<TcpStream>) -> std::io::Result<Option<Raw>> {
    let mut line = String::new();
    if r.read_line(&mut line)? == 0 {
        return Ok(None);
    }
    let mut it = line.split_whitespace();
    let method = it.next().unwrap_or("").to_string();
    let path = it.next().unwrap_or("").to_string();
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        if r.read_line(&mut h)? == 0 {
            return Ok(None);
        }
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
    }
    let header = |n: &str| headers.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
    let mut body = Vec::new();
    if header("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        loop {
            let mut size = String::new();
            r.read_line(&mut size)?;
            let n = usize::from_str_radix(size.trim().split(';').next().unwrap_or("0"), 16).unwrap_or(0);
            if n == 0 {
                let mut crlf = String::new();
                r.read_line(&mut crlf)?;
                break;
            }
            let mut chunk = vec![0; n + 2];
            r.read_exact(&mut chunk)?;
            body.extend_from_slice(&chunk[..n]);
        }
    } else if let Some(len) = header("content-length").and_then(|v| v.parse::<usize>().ok()) {
        body.resize(len, 0);
        r.read_exact(&mut body)?;
    }
    Ok(Some(Raw { method, path, headers, body }))
}

fn serve(conn: TcpStream, st: &State) -> std::io::Result<()> {
    conn.set_nodelay(true)?;
    let mut w = conn.try_clone()?;
    let mut r = BufReader::new(conn);
    let Some(Raw { method, path, headers, body: raw }) = read_request(&mut r)? else { return Ok(()) };
    let encoding = headers.iter().find(|(k, _)| k == "content-encoding").map(|(_, v)| v.clone());
    let body: Value = serde_json::from_slice(&raw).unwrap_or(Value::Null);
    st.requests.lock().unwrap().push(Request {
        at: Instant::now(),
        method: method.clone(),
        path: path.clone(),
        body: body.clone(),
    });
    if let Some(enc) = encoding.filter(|e| e != "identity") {
        return reply(
            &mut w,
            415,
            &json!({"error":{"message":format!("stand-in: content-encoding {enc} not supported")}}),
        );
    }
    let route = path.split('?').next().unwrap_or("");
    match (method.as_str(), route) {
        ("POST", "/v1/messages") => anthropic(&mut w, st, &body),
        ("POST", "/v1/responses") => openai(&mut w, st, &body),
        _ => reply(
            &mut w,
            404,
            &json!({"type":"error","error":{"type":"not_found_error","message":format!("stand-in: no route {method} {route}")}}),
        ),
    }
}

fn reply(w: &mut TcpStream, status: u16, body: &Value) -> std::io::Result<()> {
    let b = body.to_string();
    write!(
        w,
        "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{b}",
        b.len()
    )?;
    w.flush()
}

/// An SSE response written event by event (close-delimited body, no buffering).
struct Sse<'a> {
    w: &'a mut TcpStream,
    st: &'a State,
}

impl Sse<'_> {
    fn start<'a>(w: &'a mut TcpStream, st: &'a State) -> std::io::Result<Sse<'a>> {
        w.write_all(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nconnection: close\r\n\r\n",
        )?;
        Ok(Sse { w, st })
    }
    fn event(&mut self, data: Value) -> std::io::Result<()> {
        let name = data["type"].as_str().unwrap_or("message").to_string();
        self.w.write_all(format!("event: {name}\ndata: {data}\n\n").as_bytes())?;
        self.w.flush()
    }
    /// A text delta event, its send time logged.
    fn delta(&mut self, data: Value, text: &str) -> std::io::Result<()> {
        self.event(data)?;
        self.st.sent.lock().unwrap().push(Sent { at: Instant::now(), text: text.to_string() });
        Ok(())
    }
    fn pause(&self, ms: u64) -> std::io::Result<()> {
        let end = Instant::now() + Duration::from_millis(ms);
        while Instant::now() < end {
            if self.st.stop.load(Ordering::SeqCst) {
                return Err(std::io::Error::other("stand-in stopped"));
            }
            std::thread::sleep(Duration::from_millis(5).min(end.saturating_duration_since(Instant::now())));
        }
        Ok(())
    }
}

/// Text split into the deltas a model would stream (word by word).
fn words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (i, w) in text.split(' ').enumerate() {
        out.push(if i == 0 { w.to_string() } else { format!(" {w}") });
    }
    out
}

fn error_body(status: u16) -> Value {
    json!({"type":"error","error":{"type": if status == 529 { "overloaded_error" } else { "api_error" },
        "message": format!("stand-in: scripted HTTP {status}")}})
}

fn anthropic(w: &mut TcpStream, st: &State, body: &Value) -> std::io::Result<()> {
    let script = anthropic_script(body);
    if let Script::Error(status) = script {
        return reply(w, status, &error_body(status));
    }
    let n = st.ids.fetch_add(1, Ordering::SeqCst);
    let id = format!("msg_standin_{n:06}");
    let model = body["model"].as_str().unwrap_or("claude-standin");
    let mut s = Sse::start(w, st)?;
    s.event(json!({"type":"message_start","message":{"id":id,"type":"message","role":"assistant","model":model,
        "content":[],"stop_reason":null,"stop_sequence":null,
        "usage":{"input_tokens":100,"output_tokens":1,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}}))?;
    let text_block = |s: &mut Sse, index: u32, deltas: &[String], gap: u64| -> std::io::Result<()> {
        s.event(json!({"type":"content_block_start","index":index,"content_block":{"type":"text","text":""}}))?;
        for (i, d) in deltas.iter().enumerate() {
            if i > 0 && gap > 0 {
                s.pause(gap)?;
            }
            s.delta(json!({"type":"content_block_delta","index":index,"delta":{"type":"text_delta","text":d}}), d)?;
        }
        s.event(json!({"type":"content_block_stop","index":index}))
    };
    let (deltas, gap) = script.text_deltas();
    text_block(&mut s, 0, &deltas, gap)?;
    let command = match &script {
        Script::Tool => Some("echo hi".to_string()),
        Script::Cmd(_, c) => Some(c.clone()),
        _ => None,
    };
    let stop_reason = if let Some(command) = command {
        s.event(json!({"type":"content_block_start","index":1,"content_block":{"type":"tool_use",
            "id":format!("toolu_standin_{n:06}"),"name":"Bash","input":{}}}))?;
        let input = json!({"command": command, "description": "Run a step"}).to_string();
        let (a, b) = input.split_at(input.len() / 2);
        for part in [a, b] {
            s.event(
                json!({"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":part}}),
            )?;
        }
        s.event(json!({"type":"content_block_stop","index":1}))?;
        "tool_use"
    } else {
        "end_turn"
    };
    s.event(json!({"type":"message_delta","delta":{"stop_reason":stop_reason,"stop_sequence":null},"usage":{"output_tokens":9}}))?;
    s.event(json!({"type":"message_stop"}))
}

fn openai(w: &mut TcpStream, st: &State, body: &Value) -> std::io::Result<()> {
    let script = openai_script(body);
    if let Script::Error(status) = script {
        return reply(
            w,
            status,
            &json!({"error":{"message":format!("stand-in: scripted HTTP {status}"),"type":"server_error"}}),
        );
    }
    let n = st.ids.fetch_add(1, Ordering::SeqCst);
    let resp = format!("resp_standin_{n:06}");
    let mut s = Sse::start(w, st)?;
    s.event(json!({"type":"response.created","response":{"id":resp,"object":"response","status":"in_progress","output":[]}}))?;
    let message = |s: &mut Sse, index: u32, deltas: &[String], gap: u64| -> std::io::Result<()> {
        let item = format!("msg_standin_{n:06}_{index}");
        s.event(json!({"type":"response.output_item.added","output_index":index,
            "item":{"type":"message","id":item,"role":"assistant","status":"in_progress","content":[]}}))?;
        for (i, d) in deltas.iter().enumerate() {
            if i > 0 && gap > 0 {
                s.pause(gap)?;
            }
            s.delta(
                json!({"type":"response.output_text.delta","item_id":item,"output_index":index,"content_index":0,"delta":d}),
                d,
            )?;
        }
        let text: String = deltas.concat();
        s.event(json!({"type":"response.output_item.done","output_index":index,
            "item":{"type":"message","id":item,"role":"assistant","status":"completed",
                "content":[{"type":"output_text","text":text,"annotations":[]}]}}))
    };
    let (deltas, gap) = script.text_deltas();
    message(&mut s, 0, &deltas, gap)?;
    if script == Script::Tool {
        let call = json!({"type":"function_call","id":format!("fc_standin_{n:06}"),"call_id":format!("call_standin_{n:06}"),
            "name":"exec_command","arguments":json!({"cmd":"echo hi"}).to_string(),"status":"completed"});
        s.event(json!({"type":"response.output_item.added","output_index":1,"item":call}))?;
        s.event(json!({"type":"response.output_item.done","output_index":1,"item":call}))?;
    }
    s.event(
        json!({"type":"response.completed","response":{"id":resp,"object":"response","status":"completed","output":[],
        "usage":{"input_tokens":100,"input_tokens_details":{"cached_tokens":0},"output_tokens":12,
            "output_tokens_details":{"reasoning_tokens":0},"total_tokens":112}}}),
    )
}
