//! What a Web UI reads off the API (issue "The API a Web UI builds on"), the hygiene part: every
//! `Harness-*` header exposed to an allowed origin's script; a refused verb on the record without
//! moving the run's `updated`; `counts.pending`; a task that never ran has `usage: null`; `task`
//! beside `id` in the plan's waves.

use crate::common::*;
use std::time::Duration;

const ORIGIN: &str = "http://127.0.0.1:5173";

#[test]
fn a_ui_reads_every_header_a_quiet_updated_pending_counts_and_null_usage() {
    let b = Bench::new();
    // A run whose first wave commits and whose second wave halts on a failing gate, so B2 never runs.
    let plan = r#"{"v":"plan/v1","slug":"ui","tasks":[
        {"id":"A1","wave":1,"adapter":"claude","prompt":"a [fake-write:a.txt]"},
        {"id":"B1","wave":2,"adapter":"claude","prompt":"b [fake-write:b.txt]","gate":"exit 3"},
        {"id":"C1","wave":3,"adapter":"claude","prompt":"c"}]}"#;
    let out = b.harness("success").arg("run").arg(b.plan(plan)).output().unwrap();
    assert!(!out.status.success(), "B1's gate fails the run");
    let api = ApiProc::start(&b.home(), &["--allow-origin", ORIGIN]);
    let run = b.run_id();

    // Every Harness-* header of GET /runs is readable by the page's script.
    let r = http(api.port, "GET", "/runs?limit=1", &[("Origin", ORIGIN)], None);
    assert_eq!(r.status, 200);
    let exposed = r.header("access-control-expose-headers").unwrap_or_default().to_ascii_lowercase();
    let set: Vec<String> =
        r.headers.iter().map(|(k, _)| k.to_ascii_lowercase()).filter(|k| k.starts_with("harness-")).collect();
    assert!(set.contains(&"harness-total".to_string()), "{set:?}");
    for h in &set {
        assert!(exposed.contains(h.as_str()), "{h} is set but not exposed: {exposed}");
    }

    // counts.pending: C1 never ran; its usage is null, A1's is a number; each task has `task`.
    let row = api.get("/runs").json()[0].clone();
    assert_eq!(row["counts"]["pending"], 1, "{row}");
    assert_eq!(row["counts"]["committed"], 1, "{row}");
    let detail = api.get(&format!("/runs/{run}")).json();
    let tasks: Vec<serde_json::Value> = detail["plan"]["waves"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|w| w["tasks"].as_array().unwrap().clone())
        .collect();
    for t in &tasks {
        assert_eq!(t["task"], t["id"], "{t}");
    }
    let by = |id: &str| tasks.iter().find(|t| t["id"] == id).unwrap().clone();
    assert!(by("C1")["usage"].is_null(), "never ran: {}", by("C1"));
    // Why B1 halted, structured beside its detail; null for a task that did not halt.
    assert_eq!(by("B1")["state"], "halted", "{}", by("B1"));
    assert_eq!(by("B1")["halt_reason"], "gate", "{}", by("B1"));
    assert!(by("A1")["halt_reason"].is_null());
    assert!(by("A1")["usage"]["turns"].as_u64().is_some_and(|n| n >= 1), "{}", by("A1"));

    // A refused verb is on the record and does not make the run "updated".
    let updated = row["updated"].clone();
    let records = b.journal().len();
    std::thread::sleep(Duration::from_millis(20));
    let r = http(
        api.port,
        "POST",
        &format!("/runs/{run}/tasks/A1/steer"),
        &[("Content-Type", "application/json")],
        Some(br#"{"msg":"too late"}"#),
    );
    assert_eq!(r.status, 409, "{}", r.text());
    assert_eq!(b.journal().len(), records + 1, "the refusal is journaled");
    let again = api.get("/runs").json()[0].clone();
    assert_eq!(again["updated"], updated, "a refused verb moved the run: {again}");
    assert_eq!(api.get(&format!("/runs/{run}")).json()["updated"], updated);
}

/// The first id-only frame of a `/watch` stream (an id with no data: EventSource keeps it).
fn first_id(c: &mut SseConn) -> String {
    c.stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    loop {
        let e = c.next().expect("an id before any record");
        if let Some(id) = e.id.clone() {
            assert!(e.data.is_empty(), "an id with no data first: {e:?}");
            return id;
        }
    }
}

#[test]
fn watch_sends_its_cursor_at_once_so_a_restart_before_any_record_loses_nothing_and_run_narrows_it() {
    let b = Bench::new();
    let runs = install_fixture_runs(&b.home());
    let (a, other) = (runs[0].1.clone(), runs[1].1.clone());
    let api = ApiProc::start(&b.home(), &[]);
    // ?since=now: the present's cursor comes first, before any record.
    let mut c = SseConn::open(api.port, "/watch?since=now", &[]);
    assert_eq!(c.status, 200);
    let id = first_id(&mut c);
    drop(c);
    drop(api);
    // Records appended while no API runs, then a new API: the client resumes with that id.
    for (run, by) in [(&a, "one"), (&other, "two")] {
        let rec = format!(r#"{{"kind":"run","event":"paused","by":"{by}"}}"#);
        let (code, _, err) = cli(&b.home(), &["journal", "append", run, &rec]);
        assert_eq!(code, 0, "{err}");
    }
    let api = ApiProc::start(&b.home(), &[]);
    let mut c = SseConn::open(api.port, "/watch", &[("Last-Event-ID", &id)]);
    c.stream.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let got: Vec<serde_json::Value> =
        (0..2).map(|_| serde_json::from_str(&c.next_event().expect("a record").data).unwrap()).collect();
    let bys: Vec<&str> = got.iter().map(|e| e["record"]["by"].as_str().unwrap()).collect();
    assert_eq!(bys.len(), 2, "both appended records, none lost: {got:?}");
    assert!(bys.contains(&"one") && bys.contains(&"two"), "{bys:?}");
    drop(c);
    // ?run= narrows the feed to that run (repeatable); an unknown parameter is a 400 naming it.
    let mut c = SseConn::open(api.port, &format!("/watch?run={a}"), &[]);
    c.stream.set_read_timeout(Some(Duration::from_millis(800))).unwrap();
    let mut seen = Vec::new();
    while let Some(e) = c.next_event() {
        seen.push(serde_json::from_str::<serde_json::Value>(&e.data).unwrap()["run"].as_str().unwrap().to_string());
    }
    assert!(!seen.is_empty() && seen.iter().all(|r| *r == a), "only {a}: {seen:?}");
    let r = api.get("/watch?runs=x");
    assert_eq!(r.status, 400);
    assert!(r.text().contains("unknown query parameter \\\"runs\\\""), "{}", r.text());
    let r = api.get("/watch?run=nope");
    assert_eq!(r.status, 400, "{}", r.text());
}
