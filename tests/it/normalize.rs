//! The normalizer, data-driven: every capture in `fixtures/streams/` against its checked-in
//! `*.events.jsonl`, compared whole, through the library and through the real CLI process.

use crate::common::*;
use harness::engine::Adapter;
use harness::engine::normalize::{Context, normalize_line, normalize_stream};
use proptest::prelude::*;
use std::io::Write;
use std::path::PathBuf;
use std::process::Stdio;

const RUN: &str = "0123456789ab--fixture";
const TS: &str = "2026-11-30T12:00:00.000Z";

fn ctx() -> Context<'static> {
    Context { run: RUN, task: "T1", session: None, observed_ts: TS }
}

/// Every raw stream fixture: (adapter, raw path, expectation path).
fn fixtures() -> Vec<(Adapter, PathBuf, PathBuf)> {
    let mut out = Vec::new();
    for a in Adapter::ALL {
        let dir = repo_dir().join("fixtures/streams").join(a.as_str());
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
        files.sort();
        for f in files {
            let name = f.file_name().unwrap().to_string_lossy().into_owned();
            if name.ends_with(".jsonl") && !name.ends_with(".events.jsonl") {
                let exp = f.with_file_name(name.replace(".jsonl", ".events.jsonl"));
                out.push((a, f, exp));
            }
        }
    }
    assert!(out.len() >= 21, "fixtures missing: {}", out.len());
    out
}

fn normalize_all(a: Adapter, raw: &[u8], first_line: u64) -> String {
    let mut out = Vec::new();
    normalize_stream(a, raw, first_line, &ctx(), &mut out);
    String::from_utf8(out).unwrap()
}

#[test]
fn every_fixture_matches_its_expectation_whole() {
    for (a, raw, exp) in fixtures() {
        let got = normalize_all(a, &std::fs::read(&raw).unwrap(), 1);
        let want = std::fs::read_to_string(&exp).unwrap_or_else(|e| panic!("{}: {e}", exp.display()));
        assert!(got == want, "{} differs from {}:\n--- got\n{got}\n--- want\n{want}", raw.display(), exp.display());
    }
}

#[test]
fn the_cli_process_gives_the_same_output_as_the_library() {
    let dir = tempfile::tempdir().unwrap();
    for (a, raw, exp) in fixtures() {
        let out = harness(dir.path())
            .args(["normalize-events", a.as_str(), "--run", RUN, "--task", "T1", "--observed-ts", TS])
            .stdin(std::fs::File::open(&raw).unwrap())
            .output()
            .unwrap();
        assert!(out.status.success());
        assert_eq!(String::from_utf8(out.stdout).unwrap(), std::fs::read_to_string(&exp).unwrap(), "{}", raw.display());
    }
}

#[test]
fn every_emitted_event_validates_against_the_schema() {
    let schema = schema("events.schema.json");
    let mut n = 0;
    for (a, raw, _) in fixtures() {
        for line in normalize_all(a, &std::fs::read(&raw).unwrap(), 1).lines() {
            assert_valid(&schema, &serde_json::from_str(line).unwrap(), &format!("{}: {line}", raw.display()));
            n += 1;
        }
    }
    assert!(n > 150, "only {n} events checked");
    // Not vacuous: a token_delta without text is refused.
    let bad = serde_json::json!({"v":"events/v1","run":"r","task":"t","session":null,"seq":1,"ts":TS,"type":"token_delta","data":{"channel":"text"}});
    assert!(!schema.is_valid(&bad));
}

#[test]
fn rerunning_a_fixture_gives_identical_output() {
    for (a, raw, _) in fixtures() {
        let bytes = std::fs::read(&raw).unwrap();
        assert_eq!(normalize_all(a, &bytes, 1), normalize_all(a, &bytes, 1), "{}", raw.display());
    }
}

/// The events of the full run whose seq line is >= n, as text.
fn suffix_from(full: &str, n: u64) -> String {
    full.lines()
        .filter(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            seq_line(&v["seq"]) >= n
        })
        .map(|l| format!("{l}\n"))
        .collect()
}

fn seq_line(seq: &serde_json::Value) -> u64 {
    match seq {
        serde_json::Value::Number(n) => n.as_u64().unwrap(),
        serde_json::Value::String(s) => s.split('.').next().unwrap().parse().unwrap(),
        other => panic!("bad seq {other}"),
    }
}

#[test]
fn normalizing_from_line_n_gives_exactly_the_suffix() {
    for (a, raw, _) in fixtures() {
        let bytes = std::fs::read(&raw).unwrap();
        let full = normalize_all(a, &bytes, 1);
        let lines: Vec<&[u8]> = bytes.split_inclusive(|&b| b == b'\n').collect();
        for n in 1..=lines.len() as u64 {
            let rest: Vec<u8> = lines[(n - 1) as usize..].concat();
            assert_eq!(normalize_all(a, &rest, n), suffix_from(&full, n), "{} from line {n}", raw.display());
        }
    }
    // And through the CLI flag, on the longest capture.
    let raw = repo_dir().join("fixtures/streams/claude/tool-partial.jsonl");
    let bytes = std::fs::read(&raw).unwrap();
    let full = normalize_all(Adapter::Claude, &bytes, 1);
    let rest: Vec<u8> = bytes.split_inclusive(|&b| b == b'\n').skip(19).flatten().copied().collect();
    let dir = tempfile::tempdir().unwrap();
    let mut child = harness(dir.path())
        .args(["normalize-events", "claude", "--run", RUN, "--task", "T1", "--observed-ts", TS, "--first-line", "20"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(&rest).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(String::from_utf8(out.stdout).unwrap(), suffix_from(&full, 20));
}

#[test]
fn real_captures_have_zero_unmapped_kinds() {
    for (a, raw, _) in fixtures() {
        if raw.file_name().unwrap() == "garbled.jsonl" {
            continue;
        }
        for line in normalize_all(a, &std::fs::read(&raw).unwrap(), 1).lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            assert!(!unmappable(&v), "{}: {line}", raw.display());
        }
    }
}

#[test]
fn each_garbled_line_yields_exactly_one_error_event() {
    for a in Adapter::ALL {
        let raw = std::fs::read(repo_dir().join(format!("fixtures/streams/{a}/garbled.jsonl"))).unwrap();
        for (i, line) in raw.split_inclusive(|&b| b == b'\n').enumerate() {
            let events = normalize_line(a, i as u64 + 1, line, &ctx());
            let blank = line.iter().all(u8::is_ascii_whitespace);
            let errors = events.iter().filter(|e| e.data.type_name() == "error").count();
            if blank {
                assert!(events.is_empty());
            } else if events.len() == 1 {
                let d = serde_json::to_value(&events[0]).unwrap();
                if d["type"] == "error" {
                    assert_eq!(d["data"]["fatal"], false);
                    assert!(
                        d["data"]["raw"].is_string() || d["data"]["reason"].as_str().unwrap().starts_with("unmapped")
                    );
                }
            } else {
                // A fan-out line keeps its good blocks and reports the bad one in place.
                assert_eq!(errors, 1, "line {}: {events:?}", i + 1);
            }
        }
    }
}

#[test]
fn a_final_line_without_newline_is_normalized_at_eof() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = harness(dir.path())
        .args(["normalize-events", "codex", "--observed-ts", TS])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"{\"type\":\"thread.started\",\"thread_id\":\"t-1\"}").unwrap();
    let out = child.wait_with_output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["type"], "turn_start");
    assert_eq!(v["session"], "t-1");
}

#[test]
fn context_session_fills_lines_without_their_own() {
    let c = Context { session: Some("ctx-session"), ..ctx() };
    let e = normalize_line(Adapter::Codex, 7, br#"{"type":"turn.completed","usage":{}}"#, &c);
    assert_eq!(e[0].session.as_deref(), Some("ctx-session"));
    let e = normalize_line(Adapter::Codex, 1, br#"{"type":"thread.started","thread_id":"own"}"#, &c);
    assert_eq!(e[0].session.as_deref(), Some("own"));
}

#[test]
fn cli_refuses_unknown_adapter_and_zero_first_line() {
    let dir = tempfile::tempdir().unwrap();
    let (code, _, err) = cli(dir.path(), &["normalize-events", "gpt"]);
    assert_eq!(code, 2);
    assert!(err.contains("unknown adapter \"gpt\""), "{err}");
    let (code, _, err) = cli(dir.path(), &["normalize-events", "claude", "--first-line", "0"]);
    assert_eq!(code, 2, "{err}");
}

/// Known kinds with random fields: exercises the typed shapes, not just the "not JSON" path.
fn json_line() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(serde_json::Value::from),
        "[a-z_. ]{0,12}".prop_map(serde_json::Value::from),
    ];
    let value = leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::from),
            prop::collection::btree_map(
                prop_oneof![
                    Just("type".to_string()),
                    Just("subtype".to_string()),
                    Just("message".to_string()),
                    Just("content".to_string()),
                    Just("item".to_string()),
                    Just("event".to_string()),
                    Just("delta".to_string()),
                    Just("tool_call".to_string()),
                    Just("text".to_string()),
                    "[a-z_]{1,8}",
                ],
                inner,
                0..5
            )
            .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    });
    let kind = prop_oneof![
        Just("system"),
        Just("assistant"),
        Just("user"),
        Just("result"),
        Just("stream_event"),
        Just("thread.started"),
        Just("item.started"),
        Just("item.completed"),
        Just("turn.failed"),
        Just("tool_call"),
        Just("thinking"),
        Just("error"),
    ];
    (kind, prop::collection::btree_map("[a-z_]{1,10}", value, 0..6)).prop_map(|(k, mut m)| {
        m.insert("type".into(), serde_json::Value::from(k));
        serde_json::Value::Object(m.into_iter().collect()).to_string()
    })
}

fn check_seq_prefix(line_no: u64, line: &[u8]) {
    for a in Adapter::ALL {
        let events = normalize_line(a, line_no, line, &ctx());
        let n = events.len();
        for (i, e) in events.iter().enumerate() {
            assert_eq!(e.seq.line, line_no);
            assert_eq!(e.seq.sub, if n == 1 { 0 } else { i as u32 + 1 });
            let v: serde_json::Value = serde_json::from_str(&e.to_json()).unwrap();
            let s = match &v["seq"] {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            assert!(s == line_no.to_string() || s.starts_with(&format!("{line_no}.")), "{s}");
        }
        if !line.iter().all(u8::is_ascii_whitespace) && std::str::from_utf8(line).is_err() {
            assert_eq!(n, 1, "not-UTF-8 line must give exactly one error");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn arbitrary_bytes_never_panic_and_seq_starts_with_the_line(line in prop::collection::vec(any::<u8>(), 0..300), n in 1u64..1_000_000) {
        check_seq_prefix(n, &line);
    }

    #[test]
    fn arbitrary_json_never_panics_and_seq_starts_with_the_line(line in json_line(), n in 1u64..1_000_000) {
        check_seq_prefix(n, line.as_bytes());
    }
}

#[test]
fn the_fast_writer_is_byte_identical_to_serde_on_every_fixture_event() {
    let w = harness::events::Writer::new(RUN, "T1");
    for (a, raw, _) in fixtures() {
        let bytes = std::fs::read(&raw).unwrap();
        for (i, line) in bytes.split_inclusive(|&b| b == b'\n').enumerate() {
            for e in normalize_line(a, i as u64 + 1, line, &ctx()) {
                let (mut fast, mut slow) = (Vec::new(), Vec::new());
                w.write_line(&e, &mut fast);
                e.write_line(&mut slow);
                assert_eq!(String::from_utf8(fast).unwrap(), String::from_utf8(slow).unwrap(), "{}", raw.display());
            }
        }
    }
}

/// CI-sized fuzzing: real fixture lines mutated (byte flips, truncation, splices, duplicated
/// spans) through every dialect — 30,000 lines per adapter by default (`HARNESS_FUZZ_LINES`).
/// No panic, exactly the seq of its line on every event, every event valid JSON. The long
/// coverage-guided runs are `fuzz/` (cargo-fuzz).
#[test]
fn mutated_fixture_lines_never_break_the_normalizer() {
    let n: usize = std::env::var("HARNESS_FUZZ_LINES").ok().and_then(|v| v.parse().ok()).unwrap_or(30_000);
    let mut corpus: Vec<Vec<u8>> = Vec::new();
    for (_, raw, _) in fixtures() {
        for l in std::fs::read(&raw).unwrap().split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            corpus.push(l.to_vec());
        }
    }
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    let mut rnd = move |m: usize| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % m.max(1) as u64) as usize
    };
    let mut events = 0usize;
    for a in Adapter::ALL {
        for i in 0..n {
            let mut line = corpus[rnd(corpus.len())].clone();
            for _ in 0..1 + rnd(4) {
                match rnd(5) {
                    0 if !line.is_empty() => {
                        let p = rnd(line.len());
                        line[p] = rnd(256) as u8;
                    }
                    1 if !line.is_empty() => line.truncate(rnd(line.len())),
                    2 => {
                        let other = &corpus[rnd(corpus.len())];
                        let cut = rnd(other.len());
                        let at = rnd(line.len() + 1);
                        line.splice(at..at, other[cut..].iter().copied());
                    }
                    3 if line.len() > 2 => {
                        let s = rnd(line.len() - 1);
                        let e = s + 1 + rnd(line.len() - s - 1);
                        let span = line[s..e].to_vec();
                        line.splice(e..e, span);
                    }
                    _ => {
                        const NASTY: &[u8] = b"{}[]\",:\\ \x00\xff";
                        line.push(NASTY[rnd(NASTY.len())]);
                    }
                }
            }
            let no = i as u64 + 1;
            for e in normalize_line(a, no, &line, &ctx()) {
                assert_eq!(e.seq.line, no);
                let v: serde_json::Value = serde_json::from_str(&e.to_json()).expect("an event is JSON");
                assert!(v.is_object());
                events += 1;
            }
        }
    }
    eprintln!("mutated lines: {} ({n} per adapter), events: {events}", n * 3);
}

/// The live-channel and approval captures (`fixtures/engines-live/`, copied from the probes of the
/// real CLIs in their live-input modes): every kind mapped or skipped on purpose, every event valid,
/// and each echoed input line an `input` event carrying the line's uuid.
#[test]
fn live_channel_captures_have_zero_unmapped_kinds_and_echoes_are_input_events() {
    let schema = schema("events.schema.json");
    let dir = repo_dir().join("fixtures/engines-live");
    let (mut files, mut events, mut inputs) = (0, 0, 0);
    for (sub, adapter) in [("claude", Adapter::Claude), ("approvals", Adapter::Claude), ("codex", Adapter::Codex)] {
        for entry in std::fs::read_dir(dir.join(sub)).unwrap() {
            let raw = entry.unwrap().path();
            let bytes = std::fs::read(&raw).unwrap();
            files += 1;
            let replays = String::from_utf8_lossy(&bytes)
                .lines()
                .filter(|l| l.contains("\"isReplay\":true") && !l.contains("<local-command-stdout>"))
                .count();
            let mut seen = 0;
            for line in normalize_all(adapter, &bytes, 1).lines() {
                let v: serde_json::Value = serde_json::from_str(line).unwrap();
                assert!(!unmappable(&v), "{}: {line}", raw.display());
                assert_valid(&schema, &v, &format!("{}: {line}", raw.display()));
                if v["type"] == "input" {
                    assert!(v["data"]["id"].is_string(), "{line}");
                    seen += 1;
                }
                events += 1;
            }
            assert_eq!(seen, replays, "{}: one input event per echoed line", raw.display());
            inputs += seen;
        }
    }
    assert!(files >= 70 && inputs > 10, "{files} files, {inputs} inputs");
    eprintln!("{files} live captures: {events} events, {inputs} input events, 0 unmapped");
}
