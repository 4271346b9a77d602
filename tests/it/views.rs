//! The views' JSON, pinned: over a run whose journal holds every kind of record the views show
//! (steers, approvals, a stall, budgets, a pause, a task the plan does not know, a bad line, a torn
//! tail), the key set and JSON types of `GET /runs`, `/runs/:id`, `/runs/:id/tasks/:tid`,
//! `/runs/:id/approvals` and `/watch` must be exactly what they were when the views were first
//! typed. A key that disappears, appears, changes type or turns from `null` into absent fails here.

use crate::common::*;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::Path;
use std::time::Duration;

/// Every JSON path of `v` (`.key`, `[]` for an array's items) with the JSON types seen there.
fn shape(v: &Value, path: &str, out: &mut BTreeMap<String, BTreeSet<&'static str>>) {
    let t = match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float",
        Value::Number(_) => "int",
        Value::String(_) => "string",
        Value::Array(a) => {
            for x in a {
                shape(x, &format!("{path}[]"), out);
            }
            "array"
        }
        Value::Object(m) => {
            for (k, x) in m {
                shape(x, &format!("{path}.{k}"), out);
            }
            "object"
        }
    };
    out.entry(if path.is_empty() { ".".into() } else { path.to_string() }).or_default().insert(t);
}

fn shape_text(vs: &[Value]) -> String {
    let mut out = BTreeMap::new();
    for v in vs {
        shape(v, "", &mut out);
    }
    out.iter().map(|(p, ts)| format!("{p}: {}\n", ts.iter().copied().collect::<Vec<_>>().join("|"))).collect()
}

/// Appends journal lines to `journal` (each a complete line; `torn` last, without its newline).
fn append(journal: &Path, lines: &[&str], torn: Option<&str>) {
    let mut f = std::fs::OpenOptions::new().append(true).open(journal).unwrap();
    for l in lines {
        writeln!(f, "{l}").unwrap();
    }
    if let Some(t) = torn {
        write!(f, "{t}").unwrap();
    }
}

/// The midwave fixture run, grown to hold every record kind the views show.
fn rich_home(home: &Path) -> String {
    let ids = install_fixture_runs(home);
    let mid = run_id_of(&ids, "midwave");
    let journal = home.join("fixture-repos/midwave/runstate/payments.jsonl");
    append(
        &journal,
        &[
            r#"{"v":"runstate/v1","ts":"2026-11-29T14:05:01.000Z","kind":"control","verb":"budget","by":"cli","outcome":"accepted","usd":5.0}"#,
            r#"{"v":"runstate/v1","ts":"2026-11-29T14:05:02.000Z","kind":"control","verb":"budget","task":"B1","by":"cli","outcome":"accepted","usd":1.5}"#,
            r#"{"v":"runstate/v1","ts":"2026-11-29T14:05:03.000Z","kind":"control","verb":"steer","task":"B1","msg":"use backoff","by":"api","outcome":"queued","id":"s-1"}"#,
            r#"{"v":"runstate/v1","ts":"2026-11-29T14:05:04.000Z","kind":"control","verb":"steer","task":"B1","msg":"and jitter","interrupt":true,"by":"cli","outcome":"queued","id":"s-2"}"#,
            r#"{"v":"runstate/v1","ts":"2026-11-29T14:05:05.000Z","kind":"control","verb":"steer","task":"B1","by":"supervisor","outcome":"delivered","id":"s-2"}"#,
            r#"{"v":"runstate/v1","ts":"2026-11-29T14:05:06.000Z","kind":"approval","id":"a-1","task":"B1","state":"pending","tool":"Bash","input":{"command":"make test"},"via":"mcp"}"#,
            r#"{"v":"runstate/v1","ts":"2026-11-29T14:05:07.000Z","kind":"approval","id":"a-2","task":"B1","state":"pending","tool":"Write","input":{"path":"x"},"via":"live"}"#,
            r#"{"v":"runstate/v1","ts":"2026-11-29T14:05:08.000Z","kind":"approval","id":"a-2","task":"B1","state":"denied","by":"cli","message":"not that file","detail":"denied by the operator"}"#,
            r#"{"v":"runstate/v1","ts":"2026-11-29T14:05:09.000Z","kind":"attention","attention":"stalled","task":"B1","idle_s":300,"detail":"no output for 5m"}"#,
            r#"{"v":"runstate/v1","ts":"2026-11-29T14:05:10.000Z","kind":"task","task":"Z9","state":"leased","attempt":1}"#,
            "this line is not a record",
            r#"{"v":"runstate/v1","ts":"2026-11-29T14:05:11.000Z","kind":"run","event":"paused","by":"budget","detail":"spent $5.10 of $5.00"}"#,
        ],
        Some(r#"{"v":"runstate/v1","ts":"2026-11-29T14:05:12.000Z","kind":"ta"#),
    );
    // B1's worktree exists (a task working).
    std::fs::create_dir_all(home.join("worktrees").join(&mid).join("B1")).unwrap();
    mid
}

/// Reads `/watch` from the beginning until every complete journal line of the home was delivered.
fn watch_records(port: u16, home: &Path) -> Vec<Value> {
    let mut lines = 0;
    for e in std::fs::read_dir(home.join("fixture-repos")).unwrap().flatten() {
        for f in std::fs::read_dir(e.path().join("runstate")).unwrap().flatten() {
            if f.path().extension().is_some_and(|x| x == "jsonl") {
                lines += std::fs::read(f.path()).unwrap().iter().filter(|b| **b == b'\n').count();
            }
        }
    }
    let mut c = SseConn::open(port, "/watch", &[]);
    assert_eq!(c.status, 200);
    c.stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    (0..lines).map(|_| serde_json::from_str(&c.next_event().expect("a watch event").data).unwrap()).collect()
}

/// What each view looks like over the rich home: (view, its shape).
fn views_now() -> Vec<(&'static str, String)> {
    let home = tempfile::tempdir().unwrap();
    let mid = rich_home(home.path());
    let api = ApiProc::start(home.path(), &[]);
    let get = |p: &str| {
        let r = api.get(p);
        assert_eq!(r.status, 200, "{p}: {}", r.text());
        r.json()
    };
    let rows = get("/runs").as_array().unwrap().clone();
    let runs: Vec<Value> = rows.iter().map(|r| get(&format!("/runs/{}", r["runId"].as_str().unwrap()))).collect();
    let tasks: Vec<Value> =
        ["A1", "A2", "B1", "B2", "C1", "Z9"].iter().map(|t| get(&format!("/runs/{mid}/tasks/{t}"))).collect();
    vec![
        ("GET /runs", shape_text(&rows)),
        ("GET /runs/:id", shape_text(&runs)),
        ("GET /runs/:id/tasks/:tid", shape_text(&tasks)),
        ("GET /runs/:id/approvals", shape_text(&[get(&format!("/runs/{mid}/approvals"))])),
        ("GET /watch", shape_text(&watch_records(api.port, home.path()))),
    ]
}

#[test]
fn every_view_keeps_its_keys_and_json_types() {
    let now = views_now();
    let text: String = now.iter().map(|(v, s)| format!("## {v}\n{s}")).collect();
    if let Ok(p) = std::env::var("HARNESS_VIEWS_SHAPE_OUT") {
        std::fs::write(p, &text).unwrap();
    }
    let pinned = std::fs::read_to_string(repo_dir().join("tests/it/views.shape")).unwrap();
    assert_eq!(text, pinned, "a view's keys or JSON types changed (tests/it/views.shape pins them)");
}

/// A CLI reads the views of a newer API: fields it does not know are ignored, and values it does
/// not know read as `Unknown`.
#[test]
fn a_newer_apis_views_read() {
    use crate::openapi::types;
    use harness::views::*;
    let mut row = serde_json::to_value(RunRow {
        run: types::summary(types::health()),
        live: true,
        supervisor: Supervisor::Live,
        host: None,
        host_seen: None,
        host_online: None,
        mirror_stopped: None,
    })
    .unwrap();
    row["host"] = "build-3".into();
    row["status"] = "archived".into();
    row["plane"] = "fleet".into();
    row["pause_reason"] = "maintenance".into();
    row["usage"]["cost"] = "estimated".into();
    row["usage"]["currency"] = "EUR".into();
    row["counts"]["parked"] = 3.into();
    row["journal"]["compacted"] = true.into();
    let r: RunRow = serde_json::from_value(row).unwrap();
    assert_eq!(
        (r.run.status, r.run.plane, r.run.pause_reason),
        (RunStatus::Unknown, Plane::Unknown, Some(PauseReason::Unknown))
    );
    assert_eq!((r.run.usage.cost, r.run.counts.committed, r.live), (Cost::Unknown, 2, true));

    let mut d = serde_json::to_value(types::run_detail()).unwrap();
    d["host"] = "build-3".into();
    let t = &mut d["plan"]["waves"][0]["tasks"][0];
    t["state"] = "parked".into();
    t["adapter"] = "gemini".into();
    t["priority"] = 1.into();
    d["attention"][0]["attention"] = "looping".into();
    d["unplanned_tasks"][0]["state"] = "parked".into();
    let d: RunDetail = serde_json::from_value(d).unwrap();
    let t = &d.plan.waves[0].tasks[0];
    assert_eq!(
        (t.facts.state, t.adapter, d.attention[0].attention),
        (TaskState::Unknown, Adapter::Unknown, AttentionKind::Unknown)
    );
    assert_eq!(d.unplanned_tasks[0].facts.state, TaskState::Unknown);

    let mut t = serde_json::to_value(types::task_detail()).unwrap();
    t["live"]["state"] = "sleeping".into();
    t["live"]["cpu_s"] = 1.5.into();
    t["steers"][0]["state"] = "expired".into();
    t["steers"][0]["via"] = "fleet".into();
    let t: TaskDetail = serde_json::from_value(t).unwrap();
    assert_eq!((t.live.unwrap().state, t.steers[0].state), (LiveState::Unknown, SteerState::Unknown));

    let mut a = serde_json::to_value(types::approvals()).unwrap();
    a["approvals"][0]["state"] = "withdrawn".into();
    a["approvals"][0]["risk"] = "high".into();
    let a: Approvals = serde_json::from_value(a).unwrap();
    assert_eq!(a.approvals[0].state, ApprovalState::Unknown);

    let w = r#"{"v":"watch/v2","run":"0123456789ab--payments","line":3,"record":{"kind":"task"},"host":"build-3"}"#;
    let w: WatchEvent = serde_json::from_str(w).unwrap();
    assert_eq!((w.line, w.bad), (3, None));
}

/// A card can say "1 to approve": the run row and the task count the calls asked and not decided
/// (B1 asked twice; one was denied).
#[test]
fn pending_approvals_are_counted_on_the_row_and_the_task() {
    let home = tempfile::tempdir().unwrap();
    let mid = rich_home(home.path());
    let api = ApiProc::start(home.path(), &[]);
    let rows = api.get("/runs").json();
    let row = rows.as_array().unwrap().iter().find(|r| r["runId"] == mid.as_str()).unwrap().clone();
    assert_eq!(row["pending_approvals"], 1, "{row}");
    let detail = api.get(&format!("/runs/{mid}")).json();
    assert_eq!(detail["pending_approvals"], 1);
    let tasks: Vec<Value> = detail["plan"]["waves"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|w| w["tasks"].as_array().unwrap().clone())
        .collect();
    let of = |id: &str| tasks.iter().find(|t| t["id"] == id).unwrap()["pending_approvals"].clone();
    assert_eq!((of("B1"), of("A1")), (serde_json::json!(1), serde_json::json!(0)));
}
