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
