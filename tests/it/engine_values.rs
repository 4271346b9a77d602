//! Engine values bounded: no value an engine line carries — times, sizes, counts, prices — panics
//! anything that reads engine lines, and a rate-limit reset is waited out at most 24 h whatever the
//! engine said (the journal saying it was clamped, and from what).
//!
//! The properties take the real captures (`fixtures/streams/*/*.jsonl`, plus the lines the fixtures
//! lack: claude's `rate_limit_event` and 429 `result`, codex's `turn.failed`, a cursor `result`) and
//! put arbitrary values in the fields that carry numbers or times: integers past u64/i64, negative
//! ones, 1e308, 1e400 (past f64: not JSON serde accepts), denormals, strings, arrays, objects where a
//! number is expected, times of the year 9999/10000/+275760 or the 13th month, epoch seconds next to
//! milliseconds, microseconds and nanoseconds. Every pure entry point that reads engine lines is fed
//! them: the normalizer (`normalize_stream`, `normalize_line`, the events' serializations), the
//! terminal renderer, the usage fold (`of_log`, `Tally` fed in pieces, `Usage::sum`, its JSON), the
//! rate-limit reading (`ratelimit::of_turn`), the failure reading (`failure::last_error`), and the
//! time helpers (`summary::activity_ns`, `journal::now_rfc3339`); `harness normalize-events` gets
//! them through its stdin; and the clamp (private to the pipeline) is checked through a supervised
//! run whose engine says its limit lifts at u64::MAX, at a reset in milliseconds, or at a negative
//! time.

use crate::common::*;
use harness::engine::normalize::{self, Context};
use harness::engine::{Adapter, failure, ratelimit, usage};
use harness::render::Renderer;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use serde_json::Value;
use std::io::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const OBSERVED: &str = "2026-11-30T12:00:00.000Z";

/// The captures, and the lines they lack (shaped as the engines print them; claude's as the fake
/// engine prints them, after the real CLI).
fn streams() -> Vec<(Adapter, &'static str, Vec<u8>)> {
    macro_rules! capture {
        ($a:ident, $dir:literal, $name:literal) => {
            (
                Adapter::$a,
                concat!($dir, "/", $name),
                include_bytes!(concat!("../../fixtures/streams/", $dir, "/", $name, ".jsonl")).to_vec(),
            )
        };
    }
    let mut all = vec![
        capture!(Claude, "claude", "basic"),
        capture!(Claude, "claude", "error"),
        capture!(Claude, "claude", "garbled"),
        capture!(Claude, "claude", "json"),
        capture!(Claude, "claude", "killed-wrapped"),
        capture!(Claude, "claude", "partial"),
        capture!(Claude, "claude", "resume"),
        capture!(Claude, "claude", "sigint"),
        capture!(Claude, "claude", "sigterm"),
        capture!(Claude, "claude", "stdin-midturn"),
        capture!(Claude, "claude", "tool-partial"),
        capture!(Claude, "claude", "tool"),
        capture!(Codex, "codex", "basic"),
        capture!(Codex, "codex", "error"),
        capture!(Codex, "codex", "garbled"),
        capture!(Codex, "codex", "killed-wrapped"),
        capture!(Codex, "codex", "patch"),
        capture!(Codex, "codex", "resume"),
        capture!(Codex, "codex", "sigterm"),
        capture!(Codex, "codex", "tool"),
        capture!(Cursor, "cursor", "direct-sleep"),
        capture!(Cursor, "cursor", "garbled"),
        capture!(Cursor, "cursor", "parallel-sleep"),
        capture!(Cursor, "cursor", "partial-constructed"),
    ];
    let lines = |ls: &[&str]| ls.iter().map(|l| format!("{l}\n")).collect::<String>().into_bytes();
    all.push((
        Adapter::Claude,
        "synthetic/claude-ratelimit",
        lines(&[
            r#"{"type":"system","subtype":"init","session_id":"s","model":"claude-opus-5-5","timestamp":"2026-11-30T10:37:36.234Z"}"#,
            r#"{"type":"system","subtype":"api_retry","attempt":1,"max_retries":2,"retry_delay_ms":609,"error_status":429,"error":"rate_limit","session_id":"s","timestamp":"2026-11-30T10:37:37.000Z"}"#,
            r#"{"type":"rate_limit_event","rate_limit_info":{"status":"rejected","resetsAt":1771390800,"rateLimitType":"five_hour","utilization":0.98},"session_id":"s"}"#,
            r#"{"type":"result","subtype":"success","is_error":true,"api_error_status":429,"result":"API Error: 429 rate limited","session_id":"s","duration_ms":1234,"duration_api_ms":1000,"num_turns":1,"total_cost_usd":0.5,"usage":{"input_tokens":100,"output_tokens":9,"cache_read_input_tokens":3,"cache_creation_input_tokens":4},"modelUsage":{"m":{"inputTokens":100,"outputTokens":9,"cacheReadInputTokens":3,"cacheCreationInputTokens":4,"costUSD":0.5}},"timestamp":"2026-11-30T10:37:38.000Z"}"#,
            r#"{"harness":"exit","rc":1,"session_id":"s"}"#,
            r#"{"type":"result","subtype":"success","is_error":false,"result":"done","session_id":"s","duration_ms":10,"total_cost_usd":0.75,"usage":{"input_tokens":200,"output_tokens":18,"cache_read_input_tokens":0,"cache_creation_input_tokens":0},"modelUsage":{"m":{"inputTokens":300,"outputTokens":27}}}"#,
            r#"{"type":"result","subtype":"error_max_turns","is_error":true,"session_id":"t","duration_ms":10,"total_cost_usd":0.25,"usage":{"input_tokens":1,"output_tokens":1}}"#,
            r#"{"harness":"exit","rc":0,"session_id":"t"}"#,
        ]),
    ));
    all.push((
        Adapter::Codex,
        "synthetic/codex-failed",
        lines(&[
            r#"{"type":"thread.started","thread_id":"th"}"#,
            r#"{"type":"item.completed","item":{"id":"i1","type":"command_execution","command":"ls","aggregated_output":"x","exit_code":2,"status":"failed"}}"#,
            r#"{"type":"turn.completed","usage":{"input_tokens":140,"cached_input_tokens":7,"cache_write_input_tokens":1,"output_tokens":12,"reasoning_output_tokens":3}}"#,
            r#"{"type":"error","message":"Reconnecting... 1/5"}"#,
            r#"{"type":"turn.failed","error":{"message":"exceeded retry limit, last status: 429 Too Many Requests"},"usage":{"input_tokens":5,"output_tokens":6}}"#,
            r#"{"harness":"exit","rc":1,"session_id":"th"}"#,
        ]),
    ));
    all.push((
        Adapter::Cursor,
        "synthetic/cursor-result",
        lines(&[
            r#"{"type":"system","subtype":"init","session_id":"c","model":"Auto","cwd":"/x"}"#,
            r#"{"type":"thinking","subtype":"delta","text":"hm","session_id":"c","timestamp_ms":1770823841542}"#,
            r#"{"type":"assistant","message":{"role":"assistant","content":[{"type":"text","text":"hi"}]},"session_id":"c","timestamp_ms":1770823845357}"#,
            r#"{"type":"tool_call","subtype":"completed","call_id":"k","tool_call":{"shellToolCall":{"args":{"command":"ls","timeout":10000},"result":{"success":{"stdout":"a","stderr":"","exitCode":0,"executionTime":12}}}},"session_id":"c","timestamp_ms":1770823845400}"#,
            r#"{"type":"result","subtype":"success","is_error":false,"duration_ms":5000,"duration_api_ms":4000,"result":"done","session_id":"c","request_id":"q","timestamp_ms":1770823846000}"#,
            r#"{"harness":"exit","rc":0,"session_id":"c"}"#,
        ]),
    ));
    all
}

/// Keys whose string values are times (all number-valued fields are mutated anyway).
const TIME_KEYS: &[&str] = &["timestamp", "ts", "timestamp_ms", "resetsAt", "created_at", "started_at", "resets_at"];

/// Where in a line a value is replaced.
#[derive(Debug, Clone)]
enum Step {
    Key(String),
    Idx(usize),
}

/// One replaceable field: the line (0-based) and the path in its JSON.
#[derive(Debug, Clone)]
struct Slot {
    line: usize,
    path: Vec<Step>,
}

/// A stream cut into lines (without their newlines), each with its parse (`None`: not JSON, kept
/// as it is), and the fields that carry numbers or times.
struct Stream {
    adapter: Adapter,
    name: &'static str,
    lines: Vec<Vec<u8>>,
    parsed: Vec<Option<Value>>,
    slots: Vec<Slot>,
}

fn slots_of(v: &Value, line: usize, path: &mut Vec<Step>, key: Option<&str>, out: &mut Vec<Slot>) {
    match v {
        Value::Number(_) => out.push(Slot { line, path: path.clone() }),
        Value::String(_) if key.is_some_and(|k| TIME_KEYS.contains(&k)) => out.push(Slot { line, path: path.clone() }),
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                path.push(Step::Idx(i));
                slots_of(x, line, path, None, out);
                path.pop();
            }
        }
        Value::Object(m) => {
            for (k, x) in m {
                path.push(Step::Key(k.clone()));
                slots_of(x, line, path, Some(k.as_str()), out);
                path.pop();
            }
        }
        _ => {}
    }
}

fn corpus() -> &'static [Stream] {
    static CORPUS: std::sync::OnceLock<Vec<Stream>> = std::sync::OnceLock::new();
    CORPUS.get_or_init(|| {
        streams()
            .into_iter()
            .map(|(adapter, name, bytes)| {
                let lines: Vec<Vec<u8>> = bytes.split(|b| *b == b'\n').map(<[u8]>::to_vec).collect();
                let parsed: Vec<Option<Value>> = lines.iter().map(|l| serde_json::from_slice(l).ok()).collect();
                let mut slots = Vec::new();
                for (i, p) in parsed.iter().enumerate() {
                    if let Some(v) = p {
                        slots_of(v, i, &mut Vec::new(), None, &mut slots);
                    }
                }
                Stream { adapter, name, lines, parsed, slots }
            })
            .collect()
    })
}

fn at<'v>(mut v: &'v mut Value, path: &[Step]) -> &'v mut Value {
    for s in path {
        v = match s {
            Step::Key(k) => &mut v[k.as_str()],
            Step::Idx(i) => &mut v[*i],
        };
    }
    v
}

/// `s` with each `(slot, raw JSON text)` put in place: the lines touched are re-serialized (their
/// key order may change), the others are the capture's bytes.
fn mutate(s: &Stream, edits: &[(usize, String)]) -> Vec<u8> {
    let mut lines: Vec<Option<Value>> = vec![None; s.lines.len()];
    let mut raws: Vec<Vec<String>> = vec![Vec::new(); s.lines.len()];
    for (slot, raw) in edits {
        let slot = &s.slots[*slot];
        let v = lines[slot.line].get_or_insert_with(|| s.parsed[slot.line].clone().expect("a slot is in a JSON line"));
        let n = raws[slot.line].len();
        *at(v, &slot.path) = Value::String(format!("@@slot{n}@@"));
        raws[slot.line].push(raw.clone());
    }
    let mut out = Vec::new();
    for (i, l) in s.lines.iter().enumerate() {
        match &lines[i] {
            None => out.extend_from_slice(l),
            Some(v) => {
                let mut text = v.to_string();
                for (n, raw) in raws[i].iter().enumerate() {
                    text = text.replace(&format!("\"@@slot{n}@@\""), raw);
                }
                out.extend_from_slice(text.as_bytes());
            }
        }
        if i + 1 < s.lines.len() {
            out.push(b'\n');
        }
    }
    out
}

fn now_s() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs()
}

/// Raw JSON texts at the edges: of u64, i64 and f64, of the times humantime and Unix formats can
/// write, and of the kinds a number is not.
const EXTREMES: &[&str] = &[
    "0",
    "-0",
    "1",
    "-1",
    "4294967296",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775808",
    "-9223372036854775809",
    "18446744073709551615",
    "18446744073709551616",
    "99999999999999999999999999999999999999",
    "-99999999999999999999999999999999999999",
    "1e308",
    "-1e308",
    "1.7976931348623157e308",
    "-1.7976931348623157e308",
    "1e400",
    "-1e400",
    "5e-324",
    "-5e-324",
    "1e-400",
    "0.5",
    "-0.5",
    "1E+2",
    "253402300799",
    "253402300800",
    "253402300799000",
    "253402300800000",
    "8640000000000000",
    "8640000000001000",
    "99999999999",
    "null",
    "true",
    "false",
    "\"\"",
    "\"0\"",
    "\"-1\"",
    "\"1771390800\"",
    "\"18446744073709551616\"",
    "\"NaN\"",
    "\"Infinity\"",
    "\"-Infinity\"",
    "\"9999-12-31T23:59:59.999Z\"",
    "\"9999-12-31T23:59:60Z\"",
    "\"10000-01-01T00:00:00Z\"",
    "\"+275760-09-13T00:00:00Z\"",
    "\"-271821-04-20T00:00:00Z\"",
    "\"-000001-01-01T00:00:00Z\"",
    "\"0000-01-01T00:00:00Z\"",
    "\"1969-12-31T23:59:59.999Z\"",
    "\"1970-01-01T00:00:00Z\"",
    "\"2026-13-45T99:99:99Z\"",
    "\"2026-02-30T00:00:00Z\"",
    "\"2026-11-30T10:37:36.234+25:00\"",
    "\"2026-11-30T10:37:36.2345678901234567890Z\"",
    "\"2026-11-30 10:37:36\"",
    "\"2026-11-30T10:37:36\"",
    "\"2026-11-30\"",
    "\"\\u0000\"",
    "[]",
    "[1771390800]",
    "{}",
    "{\"seconds\":1771390800}",
];

/// A raw JSON text for a field that carries a number or a time.
fn raw_value() -> impl Strategy<Value = String> {
    let now = now_s() as i64;
    let time =
        (0u32..=299_999, 0u32..=99, 0u32..=99, 0u32..=99, 0u32..=99, 0u32..=99, prop::option::of(0u64..u64::MAX))
            .prop_map(|(y, mo, d, h, mi, s, frac)| {
                let frac = frac.map(|f| format!(".{f}")).unwrap_or_default();
                let y = if y > 9999 { format!("+{y:06}") } else { format!("{y:04}") };
                format!("\"{y}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}{frac}Z\"")
            });
    prop_oneof![
        4 => prop::sample::select(EXTREMES).prop_map(str::to_string),
        2 => any::<u64>().prop_map(|n| n.to_string()),
        2 => any::<i64>().prop_map(|n| n.to_string()),
        1 => (0u64..100_000).prop_map(|n| n.to_string()),
        2 => any::<f64>().prop_filter("JSON has no NaN or infinity", |f| f.is_finite()).prop_map(|f| format!("{f:e}")),
        // Epoch seconds about now (a day either side, and years ahead), and now in ms, µs and ns.
        2 => (-86_400i64 * 400..86_400 * 400).prop_map(move |d| (now + d).to_string()),
        1 => (0u32..4).prop_map(move |k| (now as i128 * 1000i128.pow(k)).to_string()),
        2 => time,
        1 => "[ -~]{0,16}".prop_map(|s| serde_json::to_string(&s).unwrap()),
    ]
}

fn ctx() -> Context<'static> {
    Context { run: "r", task: "t", session: Some("fallback"), observed_ts: OBSERVED }
}

fn fail(what: impl std::fmt::Display) -> TestCaseError {
    TestCaseError::fail(what.to_string())
}

/// Every entry point that reads engine lines, fed `log`: each returns, and what it returns holds
/// together. `cut`: where the usage fold's input is split in two.
fn exercise(adapter: Adapter, log: &[u8], cut: usize) -> Result<(), TestCaseError> {
    let ctx = ctx();
    // The normalizer, as `normalize-events` and the SSE stream run it.
    let mut out = Vec::new();
    normalize::normalize_stream(adapter, log, 1, &ctx, &mut out);
    let text = std::str::from_utf8(&out).map_err(|e| fail(format!("events are not UTF-8: {e}")))?;
    let mut renderer = Renderer::default();
    for line in text.lines() {
        let ev: Value = match serde_json::from_str(line) {
            Ok(v) => v,
            // A number past f64 (1e400) in a field carried verbatim (usage, tool args) is kept as the
            // engine wrote it: JSON, but not what serde_json reads. `watch` renders it as Null does.
            Err(e) if e.to_string().starts_with("number out of range") => {
                let _ = renderer.render(&Value::Null);
                continue;
            }
            Err(e) => return Err(fail(format!("event is not JSON ({e}): {line}"))),
        };
        let ts = ev["ts"].as_str().ok_or_else(|| fail(format!("event without a string ts: {line}")))?;
        if adapter == Adapter::Cursor && ts != OBSERVED {
            // cursor's ts is made from its timestamp_ms: it must be a time.
            prop_assert!(humantime::parse_rfc3339_weak(ts).is_ok(), "cursor ts {ts:?} is not RFC 3339: {line}");
        }
        let _ = harness::state::summary::activity_ns(ts);
        let _ = renderer.render(&ev);
    }
    // Line by line, both serializations: the same bytes as the stream.
    let mut again = Vec::new();
    for (i, line) in log.split_inclusive(|b| *b == b'\n').enumerate() {
        for e in normalize::normalize_line(adapter, i as u64 + 1, line, &ctx) {
            let _ = e.to_json();
            e.write_line(&mut again);
        }
    }
    prop_assert_eq!(
        String::from_utf8_lossy(&again),
        String::from_utf8_lossy(&out),
        "normalize_line ≠ normalize_stream"
    );
    // The usage fold: whole, and fed in two pieces as a growing log is.
    let whole = usage::of_log(adapter, log);
    let mut t = usage::Tally::new(adapter);
    t.feed(&log[..cut.min(log.len())]);
    let done = (t.offset as usize).min(log.len());
    t.feed(&log[done..]);
    let pieces = t.usage();
    let json = |u: &usage::Usage| serde_json::to_string(u).map_err(|e| fail(format!("usage does not serialize: {e}")));
    prop_assert_eq!(json(&pieces)?, json(&whole)?, "fed in pieces ≠ whole");
    let run = usage::Usage::sum([&whole, &pieces, &usage::of_log(Adapter::Codex, log)]);
    for u in [&whole, &run] {
        let text = json(u)?;
        serde_json::from_str::<usage::Usage>(&text)
            .map_err(|e| fail(format!("usage {text} does not read back: {e}")))?;
    }
    // What the pipeline reads off a finished turn.
    let _ = ratelimit::of_turn(adapter, log);
    if let Some(said) = failure::last_error(adapter, log) {
        prop_assert!(!said.is_empty() && !said.contains("  ") && !said.contains('\n'), "{said:?}");
    }
    Ok(())
}

/// Edits of a stream: (stream, [(slot, raw value)], cut).
fn edited() -> impl Strategy<Value = (usize, Vec<(prop::sample::Index, String)>, prop::sample::Index)> {
    (
        0..corpus().len(),
        prop::collection::vec((any::<prop::sample::Index>(), raw_value()), 1..12),
        any::<prop::sample::Index>(),
    )
}

fn apply(s: &Stream, edits: &[(prop::sample::Index, String)]) -> Vec<u8> {
    if s.slots.is_empty() {
        return mutate(s, &[]); // a capture without numbers or times (codex/error): as it is
    }
    let edits: Vec<(usize, String)> = edits.iter().map(|(i, raw)| (i.index(s.slots.len()), raw.clone())).collect();
    mutate(s, &edits)
}

/// A claude turn cut by a rate limit whose `resetsAt` is `raw`.
fn limited_turn(raw: &str) -> String {
    format!(
        "{{\"type\":\"system\",\"subtype\":\"init\",\"session_id\":\"s\"}}\n\
         {{\"type\":\"rate_limit_event\",\"rate_limit_info\":{{\"status\":\"rejected\",\"resetsAt\":{raw},\"rateLimitType\":\"five_hour\"}},\"session_id\":\"s\"}}\n\
         {{\"type\":\"result\",\"subtype\":\"success\",\"is_error\":true,\"api_error_status\":null,\"session_id\":\"s\"}}\n"
    )
}

/// A claude result line with these token counts (own, and the session's model total) and price.
fn result_line(session: &str, own: [&str; 4], model: [&str; 4], cost: &str) -> String {
    format!(
        "{{\"type\":\"result\",\"subtype\":\"success\",\"is_error\":false,\"session_id\":\"{session}\",\"total_cost_usd\":{cost},\
         \"usage\":{{\"input_tokens\":{},\"output_tokens\":{},\"cache_read_input_tokens\":{},\"cache_creation_input_tokens\":{}}},\
         \"modelUsage\":{{\"m\":{{\"inputTokens\":{},\"outputTokens\":{},\"cacheReadInputTokens\":{},\"cacheCreationInputTokens\":{}}}}}}}\n",
        own[0], own[1], own[2], own[3], model[0], model[1], model[2], model[3]
    )
}

proptest! {
    // No regressions file: a failure prints its minimal input, and the tree stays as it is.
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    /// Real captures with arbitrary numbers and times in their fields: nothing panics.
    #[test]
    fn arbitrary_values_in_real_lines_never_panic((stream, edits, cut) in edited()) {
        let s = &corpus()[stream];
        let log = apply(s, &edits);
        exercise(s.adapter, &log, cut.index(log.len() + 1))
            .map_err(|e| fail(format!("{}: {e}\n--- log:\n{}", s.name, String::from_utf8_lossy(&log))))?;
    }

    /// The same lines read as another engine's (a task's log is read with its adapter, but a wrong or
    /// changed one must not panic either).
    #[test]
    fn arbitrary_values_read_as_any_engine_never_panic((stream, edits, cut) in edited(), a in prop::sample::select(Adapter::ALL.to_vec())) {
        let s = &corpus()[stream];
        let log = apply(s, &edits);
        exercise(a, &log, cut.index(log.len() + 1))
            .map_err(|e| fail(format!("{} as {a}: {e}\n--- log:\n{}", s.name, String::from_utf8_lossy(&log))))?;
    }

    /// claude's reset time is read as the engine said it (epoch seconds, u64) or not at all: never
    /// wrapped, never a float truncated, never a panic.
    #[test]
    fn a_reset_is_read_as_said_or_not_at_all(raw in raw_value()) {
        let log = limited_turn(&raw);
        let l = ratelimit::of_turn(Adapter::Claude, log.as_bytes());
        let said = serde_json::from_str::<Value>(&raw).ok().and_then(|v| v.as_u64());
        match serde_json::from_str::<Value>(&raw) {
            // The line does not parse: no rejected limit is known, so no rate limit (the result has no 429).
            Err(_) => prop_assert_eq!(l, None, "{}", raw),
            Ok(_) => prop_assert_eq!(l.map(|l| l.resets_at), Some(said), "{}", raw),
        }
        exercise(Adapter::Claude, log.as_bytes(), 0)?;
    }

    /// Token counts and prices anywhere in u64/f64, across turns, processes and sessions: the fold
    /// returns (saturating or refusing, not wrapping and not panicking).
    #[test]
    fn usage_counts_at_any_size_never_panic(
        turns in prop::collection::vec(
            (prop::sample::select(vec!["s", "s", "t"]), [raw_value(), raw_value(), raw_value(), raw_value()],
             [raw_value(), raw_value(), raw_value(), raw_value()], raw_value(), any::<bool>()),
            1..6),
    ) {
        let mut log = String::new();
        for (session, own, model, cost, exit) in &turns {
            let own = [own[0].as_str(), own[1].as_str(), own[2].as_str(), own[3].as_str()];
            let model = [model[0].as_str(), model[1].as_str(), model[2].as_str(), model[3].as_str()];
            log += &result_line(session, own, model, cost);
            log += &format!("{{\"type\":\"turn.completed\",\"usage\":{{\"input_tokens\":{},\"output_tokens\":{},\"cached_input_tokens\":{},\"cache_write_input_tokens\":{}}}}}\n", own[0], own[1], own[2], own[3]);
            if *exit {
                log += "{\"harness\":\"exit\",\"rc\":0}\n";
            }
        }
        for a in Adapter::ALL {
            exercise(a, log.as_bytes(), log.len() / 2)
                .map_err(|e| fail(format!("{a}: {e}\n--- log:\n{log}")))?;
        }
    }
}

/// Every extreme in every field of every capture at once (the sweep the random cases sample).
#[test]
fn every_extreme_in_every_field_of_every_capture() {
    for s in corpus() {
        for raw in EXTREMES {
            let edits: Vec<(usize, String)> = (0..s.slots.len()).map(|i| (i, raw.to_string())).collect();
            let log = mutate(s, &edits);
            if let Err(e) = exercise(s.adapter, &log, log.len() / 3) {
                panic!("{} with every field {raw}: {e}", s.name);
            }
        }
    }
}

/// The clock's own times format and read back.
#[test]
fn our_own_times_read_back() {
    let now = harness::state::journal::now_rfc3339();
    let t = humantime::parse_rfc3339_weak(&now).unwrap();
    assert!(t.duration_since(UNIX_EPOCH).unwrap().as_secs() >= now_s() - 5, "{now}");
    assert!(harness::state::summary::activity_ns(&now) > 0);
    for raw in EXTREMES {
        let ts = serde_json::from_str::<Value>(raw).ok().and_then(|v| v.as_str().map(str::to_string));
        if let Some(ts) = ts {
            assert!(harness::state::summary::activity_ns(&ts) >= 0, "{ts}");
        }
    }
}

/// `harness normalize-events` takes every capture with every extreme (fed as one stream per
/// engine): it exits 0 and prints one JSON event per line.
#[test]
fn normalize_events_takes_every_extreme() {
    let home = tempfile::tempdir().unwrap();
    for a in Adapter::ALL {
        let mut input = Vec::new();
        for s in corpus().iter().filter(|s| s.adapter == a) {
            for raw in EXTREMES {
                let edits: Vec<(usize, String)> = (0..s.slots.len()).map(|i| (i, raw.to_string())).collect();
                input.extend_from_slice(&mutate(s, &edits));
                input.push(b'\n');
            }
        }
        let mut child = harness(home.path())
            .args(["normalize-events", a.as_str(), "--observed-ts", OBSERVED])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let feeder = std::thread::spawn(move || stdin.write_all(&input));
        let out = child.wait_with_output().unwrap();
        let fed = feeder.join().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{a}: {stderr}");
        fed.unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(text.lines().count() > 100, "{a}: {} events", text.lines().count());
        for line in text.lines() {
            match serde_json::from_str::<Value>(line) {
                Ok(v) => assert!(v["ts"].is_string(), "{line}"),
                // 1e400 kept verbatim in a carried field (see `exercise`).
                Err(e) => assert!(e.to_string().starts_with("number out of range"), "{a}: not JSON ({e}): {line}"),
            }
        }
    }
}

/// An engine that says its limit lifts at `raw` (a JSON value, as it prints it) and then fails its
/// turn with a 429, in claude's dialect.
fn limited_engine(dir: &std::path::Path, raw: &str) -> std::path::PathBuf {
    let p = dir.join("limited-claude");
    let script = format!(
        r#"#!/usr/bin/env bash
[ "${{1:-}}" = --version ] && {{ echo "2.1.332 (Claude Code)"; exit 0; }}
session=limited
while [ $# -gt 0 ]; do case $1 in --session-id | --resume) session=$2; shift 2 ;; *) shift ;; esac; done
printf '{{"type":"system","subtype":"init","session_id":"%s","model":"m"}}\n' "$session"
printf '{{"type":"rate_limit_event","rate_limit_info":{{"status":"rejected","resetsAt":{raw},"rateLimitType":"five_hour"}},"session_id":"%s"}}\n' "$session"
printf '{{"type":"result","subtype":"success","is_error":true,"api_error_status":429,"result":"API Error: 429","session_id":"%s","total_cost_usd":0,"usage":{{"input_tokens":0,"output_tokens":0}}}}\n' "$session"
exit 1
"#
    );
    std::fs::write(&p, script).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

/// A supervised run whose engine's reset is `raw`: the halt's detail and the pause's `resume_at`
/// (seconds from now).
fn limited_run(raw: &str) -> (String, u64) {
    const T: Duration = Duration::from_secs(30);
    let b = Bench::new();
    let engine = limited_engine(b.dir.path(), raw);
    let plan = serde_json::json!({"v":"plan/v1","slug":"limited","tasks":[{"id":"A","wave":1,"adapter":"claude","prompt":"work"}]});
    let p = b.plan(&plan.to_string());
    let mut sup = Proc {
        child: b
            .harness("success")
            .env("HARNESS_CLAUDE_BIN", &engine)
            .args(["run", "--supervised", "--foreground", "--kill-grace", "1s"])
            .arg(&p)
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(b.dir.path().join("supervisor.log")).unwrap())
            .spawn()
            .unwrap(),
    };
    let halted = wait_for(T, || {
        b.try_run_id().and_then(|_| {
            let j = json_lines(&b.repo().join("runstate/limited.jsonl"));
            j.into_iter().find(|r| r["kind"] == "task" && r["state"] == "halted")
        })
    })
    .unwrap_or_else(|| panic!("{raw}: never halted by the rate limit: {}", b.supervisor_log()));
    let detail = halted["detail"].as_str().unwrap().to_string();
    let paused = wait_for(T, || b.journal().into_iter().find(|r| r["kind"] == "run" && r["event"] == "paused"))
        .unwrap_or_else(|| panic!("{raw}: the run never paused ({detail})"));
    let at = humantime::parse_rfc3339_weak(paused["resume_at"].as_str().unwrap()).unwrap();
    let ahead = at.duration_since(SystemTime::now()).map(|d| d.as_secs()).unwrap_or(0);
    assert!(harness::control::is_live(&b.sock()), "{raw}: the supervisor died");
    control(&b.sock(), &serde_json::json!({"verb":"stop"}));
    sup.wait_exit(T);
    assert_journal_valid(&b.journal());
    (detail, ahead)
}

/// The clamp, through the pipeline that holds it: a reset past u64 seconds' sense, or one in
/// milliseconds (year ~58000), is waited out 24 h and the halt says so and what the engine said; a
/// reset that is not a u64 (negative, a float) is no reset: the back-off.
#[test]
fn a_reset_at_any_value_is_waited_at_most_a_day() {
    let now_ms = (now_s() * 1000).to_string();
    let cases: [(&str, bool); 4] = [("18446744073709551615", true), (&now_ms, true), ("-1", false), ("1e300", false)];
    let results: Vec<(String, bool, (String, u64))> = std::thread::scope(|sc| {
        let hs: Vec<_> = cases
            .iter()
            .map(|(raw, clamped)| sc.spawn(move || (raw.to_string(), *clamped, limited_run(raw))))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (raw, clamped, (detail, ahead)) in results {
        assert!(detail.starts_with("rate_limited: claude: API error 429"), "{raw}: {detail}");
        assert!(ahead <= 24 * 3600, "{raw}: resumes {ahead} s ahead ({detail})");
        if clamped {
            // Past the year 9999 the engine's time is said as its seconds, saying so.
            let said = format!("the engine said {raw} s after 1970 (past the year 9999), clamped to 24 h");
            assert!(detail.contains(&said), "{raw}: {detail}");
            assert!(ahead >= 24 * 3600 - 120, "{raw}: resumes {ahead} s ahead, not a day ({detail})");
        } else {
            assert!(!detail.contains("clamped") && !detail.contains("lifts at"), "{raw}: {detail}");
            assert!(ahead <= 60, "{raw}: the back-off is 60 s, not {ahead} s ({detail})");
        }
    }
}

/// The usage fold at the edges of u64, one engine line (or one pair of tasks) each: every case
/// returns. Each is run apart so the failure lists every one that panics, with where.
#[test]
fn usage_at_the_edge_of_u64_returns() {
    const MAX: &str = "18446744073709551615";
    let half = (u64::MAX / 2 + 1).to_string();
    let result = |own: [&str; 4], model: &str| {
        format!(
            "{{\"type\":\"result\",\"is_error\":false,\"session_id\":\"s\",\"total_cost_usd\":1,\
             \"usage\":{{\"input_tokens\":{},\"output_tokens\":{},\"cache_read_input_tokens\":{},\"cache_creation_input_tokens\":{}}}{model}}}\n",
            own[0], own[1], own[2], own[3]
        )
    };
    let model1 = format!(",\"modelUsage\":{{\"m\":{{\"inputTokens\":{MAX},\"outputTokens\":1}}}}");
    let model2 = format!(",\"modelUsage\":{{\"a\":{{\"inputTokens\":{MAX}}},\"b\":{{\"inputTokens\":{MAX}}}}}");
    let codex =
        |n: &str| format!("{{\"type\":\"turn.completed\",\"usage\":{{\"input_tokens\":{n},\"output_tokens\":0}}}}\n");
    let logs: Vec<(&str, Adapter, String)> = vec![
        (
            "claude: one result, a model's tokens summing past u64",
            Adapter::Claude,
            result(["1", "0", "0", "0"], &model1),
        ),
        (
            "claude: one result, two models' tokens summing past u64",
            Adapter::Claude,
            result(["1", "0", "0", "0"], &model2),
        ),
        ("claude: one result, its own tokens summing past u64", Adapter::Claude, result([MAX, "1", "0", "0"], "")),
        (
            "claude: two results whose tokens add past u64",
            Adapter::Claude,
            result([&half, "0", "0", "0"], "") + &result([&half, "0", "0", "0"], ""),
        ),
        ("codex: two turns whose tokens add past u64", Adapter::Codex, codex(&half) + &codex(&half)),
    ];
    let mut panicked = Vec::new();
    for (what, a, log) in &logs {
        if std::panic::catch_unwind(|| usage::of_log(*a, log.as_bytes())).is_err() {
            panicked.push(format!("{what}: usage::of_log({a:?}, {log:?})"));
        }
    }
    let big = usage::Usage { input_tokens: Some(u64::MAX), turns: u64::MAX, cost: "tokens only", ..Default::default() };
    if std::panic::catch_unwind(|| usage::Usage::sum([&big, &big])).is_err() {
        panicked.push(format!("two tasks' usage summing past u64: Usage::sum([&u, &u]), u = {big:?}"));
    }
    assert!(panicked.is_empty(), "the usage fold panics on:\n{}", panicked.join("\n"));
}
