//! Foundation: registry, journal, liveness, plan and the durable API, exercised through the real
//! binary, real files in temp dirs and real HTTP over loopback.

use crate::common::*;
use serde_json::Value;
use std::path::Path;
use std::time::Duration;

fn runs_by_id(api: &ApiProc) -> Vec<Value> {
    let r = api.get("/runs");
    assert_eq!(r.status, 200, "{}", r.text());
    r.json().as_array().unwrap().clone()
}

#[test]
fn get_runs_lists_every_fixture_run_and_same_slug_repos_are_two_runs() {
    let home = tempfile::tempdir().unwrap();
    let ids = install_fixture_runs(home.path());
    let api = ApiProc::start(home.path(), &[]);
    let runs = runs_by_id(&api);
    assert_eq!(runs.len(), 5, "{runs:#?}");
    let a = run_id_of(&ids, "same-slug-a");
    let b = run_id_of(&ids, "same-slug-b");
    assert_ne!(a, b);
    assert!(a.ends_with("--api-refactor") && b.ends_with("--api-refactor"));
    let find = |id: &str| runs.iter().find(|r| r["runId"] == id).unwrap_or_else(|| panic!("{id} missing")).clone();
    assert_eq!(find(&a)["status"], "finished");
    assert_eq!(find(&b)["status"], "running");

    let fin = find(&run_id_of(&ids, "finished"));
    assert_eq!(fin["status"], "finished");
    assert_eq!(fin["counts"]["committed"], 3);
    assert_eq!(fin["base_branch"], "main");
    assert_eq!(fin["wave"], 2);

    let mid = find(&run_id_of(&ids, "midwave"));
    assert_eq!(mid["status"], "running");
    assert_eq!(mid["live"], false, "liveness names a dead supervisor pid");
    assert_eq!(mid["wave"], 2);
    assert_eq!(mid["counts"]["halted"], 1);
    assert_eq!(mid["counts"]["leased"], 1);

    let dyn_run = find(&run_id_of(&ids, "dynwf"));
    assert_eq!(dyn_run["plane"], "dynwf");
    for r in &runs {
        for k in ["runId", "slug", "repoRoot", "project", "repo", "branch", "worktree", "status", "wave", "counts"] {
            assert!(r.get(k).is_some(), "run lacks {k}: {r}");
        }
    }
}

#[test]
fn run_detail_draws_the_plan_by_wave_with_task_states() {
    let home = tempfile::tempdir().unwrap();
    let ids = install_fixture_runs(home.path());
    let api = ApiProc::start(home.path(), &[]);
    let run = run_id_of(&ids, "midwave");
    let v = api.get(&format!("/runs/{run}")).json();
    let waves = v["plan"]["waves"].as_array().unwrap();
    assert_eq!(waves.len(), 3);
    let w2: Vec<(String, String)> = waves[1]["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["id"].as_str().unwrap().to_string(), t["state"].as_str().unwrap().to_string()))
        .collect();
    assert_eq!(w2, vec![("B1".into(), "leased".into()), ("B2".into(), "halted".into())]);
    assert_eq!(waves[2]["tasks"][0]["state"], "pending");
    assert_eq!(waves[1]["tasks"][1]["rc"], 3);
}

#[test]
fn task_detail_reports_binding_session_liveness_and_log() {
    let home = tempfile::tempdir().unwrap();
    let ids = install_fixture_runs(home.path());
    let api = ApiProc::start(home.path(), &[]);
    let run = run_id_of(&ids, "midwave");
    let v = api.get(&format!("/runs/{run}/tasks/B1")).json();
    assert_eq!(v["binding"]["adapter"], "claude");
    assert_eq!(v["session_id"], "3b4c5d6e-7f8a-4b9c-8d1e-2f3a4b5c6d7e");
    assert_eq!(v["live"]["alive"], false);
    assert!(v["live"]["runtime_s"].as_f64().unwrap() > 0.0);
    assert!(v["live"]["idle_s"].as_f64().unwrap() > 0.0);
    assert_eq!(v["log_exists"], true);
    assert!(v["logfile"].as_str().unwrap().ends_with("payments.logs/B1.log"));
    assert_eq!(v["supervised"], false);
    let r = api.get(&format!("/runs/{run}/tasks/ZZ"));
    assert_eq!(r.status, 404);
    assert_eq!(r.json()["ok"], false);
}

#[test]
fn bad_ids_are_400_unknown_is_404_wrong_method_is_405() {
    let home = tempfile::tempdir().unwrap();
    let ids = install_fixture_runs(home.path());
    let api = ApiProc::start(home.path(), &[]);
    let run = run_id_of(&ids, "finished");
    let long = "a".repeat(1024);
    for path in [
        "/runs/..%2F..%2Fetc%2Fpasswd".to_string(),
        "/runs/%2Fetc%2Fpasswd".to_string(),
        "/runs/..".to_string(),
        "/runs/0123456789ab--x%00y".to_string(),
        format!("/runs/{run}/tasks/..%2F..%2Fx"),
        format!("/runs/{run}/tasks/%2Fabs"),
        format!("/runs/{run}/tasks/a%00"),
        format!("/runs/{run}/tasks/%C3%28"),
        format!("/runs/{run}/tasks/{long}"),
    ] {
        let r = api.get(&path);
        assert_eq!(r.status, 400, "{}: {}", &path[..path.len().min(80)], r.text());
        assert_eq!(r.json()["ok"], false);
        assert!(r.json()["detail"].as_str().unwrap().len() < 400, "detail echoes too much");
    }
    // A URI beyond hyper's limit is refused before routing.
    assert_eq!(api.get(&format!("/runs/{}", "a".repeat(1 << 16))).status, 414);
    assert_eq!(api.get("/runs/0123456789ab--nope").status, 404);
    assert_eq!(api.get("/nope").status, 404);
    let r = http(api.port, "POST", "/runs", &[], Some(b"{}"));
    assert_eq!(r.status, 405);
    assert_eq!(r.header("allow"), Some("GET"));
}

#[test]
fn rebinding_host_is_403() {
    let home = tempfile::tempdir().unwrap();
    let api = ApiProc::start(home.path(), &[]);
    let port = api.port.to_string();
    for host in [format!("evil.example:{port}"), "127.0.0.1:1".to_string(), format!("localhost.evil:{port}")] {
        let r = http(api.port, "GET", "/runs", &[("Host", &host)], None);
        assert_eq!(r.status, 403, "Host {host}");
    }
    for host in [format!("localhost:{port}"), format!("[::1]:{port}"), format!("127.0.0.1:{port}")] {
        assert_eq!(http(api.port, "GET", "/runs", &[("Host", &host)], None).status, 200, "Host {host}");
    }
}

#[test]
fn pointer_whose_runstate_dir_is_gone_is_reaped_and_garbled_pointer_skipped() {
    let home = tempfile::tempdir().unwrap();
    let ids = install_fixture_runs(home.path());
    let gone = run_id_of(&ids, "dynwf");
    std::fs::remove_dir_all(home.path().join("fixture-repos/dynwf/runstate")).unwrap();
    std::fs::write(home.path().join("runs/0123456789ab--garbled.json"), b"{not json").unwrap();
    let api = ApiProc::start(home.path(), &[]);
    let runs = runs_by_id(&api);
    assert_eq!(runs.len(), 4);
    assert!(!home.path().join(format!("runs/{gone}.json")).exists(), "pointer not reaped");
    assert!(home.path().join("runs/0123456789ab--garbled.json").exists(), "garbled pointer must be left alone");
    // The warm path (cache) agrees.
    assert_eq!(runs_by_id(&api).len(), 4);
}

#[test]
fn every_written_file_validates_against_its_schema() {
    let home = tempfile::tempdir().unwrap();
    let ids = install_fixture_runs(home.path());
    let (registry, runstate, liveness, plan) = (
        schema("registry.schema.json"),
        schema("runstate.schema.json"),
        schema("liveness.schema.json"),
        schema("plan.schema.json"),
    );
    for (_, id) in &ids {
        let p: Value =
            serde_json::from_slice(&std::fs::read(home.path().join(format!("runs/{id}.json"))).unwrap()).unwrap();
        assert_valid(&registry, &p, &format!("pointer {id}"));
        let rs = Path::new(p["runstateDir"].as_str().unwrap());
        let slug = p["slug"].as_str().unwrap();
        let pl: Value = serde_json::from_slice(&std::fs::read(rs.join(format!("{slug}.plan.json"))).unwrap()).unwrap();
        assert_valid(&plan, &pl, &format!("plan {id}"));
        for (i, line) in std::fs::read_to_string(rs.join(format!("{slug}.jsonl"))).unwrap().lines().enumerate() {
            assert_valid(&runstate, &serde_json::from_str(line).unwrap(), &format!("{id} journal line {}", i + 1));
        }
    }
    // Records the code itself writes: through the CLI into the finished run's journal and liveness.
    let run = run_id_of(&ids, "midwave");
    for rec in [
        r#"{"kind":"task","task":"C1","state":"leased","attempt":1,"session_id":"s-1"}"#,
        r#"{"kind":"control","verb":"steer","task":"C1","msg":"hurry","by":"cli","outcome":"queued","id":"q1"}"#,
        r#"{"kind":"task","task":"C1","state":"halted","rc":143,"detail":"killed"}"#,
        r#"{"kind":"run","event":"paused","by":"cli"}"#,
    ] {
        let (code, _, err) = cli(home.path(), &["journal", "append", &run, rec]);
        assert_eq!(code, 0, "{err}");
    }
    let rec = r#"{"pid":4242,"pgid":4242,"session_id":null,"logfile":"/tmp/x.log","state":"leased","started_ts":"2026-11-30T00:00:00.000Z","last_output_ts":null}"#;
    assert_eq!(cli(home.path(), &["liveness", "set", &run, "C1", rec]).0, 0);
    let p: Value =
        serde_json::from_slice(&std::fs::read(home.path().join(format!("runs/{run}.json"))).unwrap()).unwrap();
    let rs = Path::new(p["runstateDir"].as_str().unwrap());
    for (i, line) in std::fs::read_to_string(rs.join("payments.jsonl")).unwrap().lines().enumerate() {
        assert_valid(&runstate, &serde_json::from_str(line).unwrap(), &format!("journal line {}", i + 1));
    }
    let live: Value = serde_json::from_slice(&std::fs::read(rs.join("payments.live.json")).unwrap()).unwrap();
    assert_valid(&liveness, &live, "liveness");
    // The schemas are not vacuous: a halted record without rc fails.
    let bad: Value = serde_json::from_str(
        r#"{"v":"runstate/v1","ts":"2026-11-30T00:00:00Z","kind":"task","task":"T","state":"halted","detail":"x"}"#,
    )
    .unwrap();
    assert!(!runstate.is_valid(&bad));
}

#[test]
fn every_plan_in_the_repository_validates_against_the_plan_schema() {
    let schema = schema("plan.schema.json");
    let mut plans = vec![repo_dir().join("fixtures/demo/plan.json")];
    for run in std::fs::read_dir(repo_dir().join("fixtures/runs")).unwrap() {
        let rs = run.unwrap().path().join("repo/runstate");
        for f in std::fs::read_dir(&rs).into_iter().flatten() {
            let f = f.unwrap().path();
            if f.to_string_lossy().ends_with(".plan.json") {
                plans.push(f);
            }
        }
    }
    assert!(plans.len() > 1, "{plans:?}");
    for p in &plans {
        let v: Value = serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap();
        assert_valid(&schema, &v, &p.display().to_string());
        harness::state::plan::Plan::parse(&serde_json::to_vec(&v).unwrap())
            .unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    }
    // A task's title: the schema and the code agree on what they take and what they refuse.
    let with_title = |title: &str| serde_json::json!({"v":"plan/v1","slug":"s","tasks":[{"id":"a","wave":1,"adapter":"claude","prompt":"p","title":title}]});
    for (title, ok) in [
        ("  add greet  ", true),
        (&*"x".repeat(72), true),
        ("", false),
        (" ", false),
        ("two\nlines", false),
        (&*"x".repeat(73), false),
    ] {
        let v = with_title(title);
        let code = harness::state::plan::Plan::parse(&serde_json::to_vec(&v).unwrap()).is_ok();
        assert_eq!((schema.is_valid(&v), code), (ok, ok), "title {title:?}: (schema, code)");
    }
}

#[test]
fn cli_refuses_invalid_transition_with_a_message_naming_it() {
    let home = tempfile::tempdir().unwrap();
    let ids = install_fixture_runs(home.path());
    let run = run_id_of(&ids, "finished");
    let (code, _, err) =
        cli(home.path(), &["journal", "append", &run, r#"{"kind":"task","task":"T1","state":"leased"}"#]);
    assert_eq!(code, 1);
    assert!(err.contains("task T1: invalid transition committed -> leased"), "{err}");
    let (code, _, err) =
        cli(home.path(), &["journal", "append", &run, r#"{"kind":"task","task":"T9","state":"halted"}"#]);
    assert_eq!(code, 1);
    assert!(err.contains("needs rc"), "{err}");
}

/// Worker half of the concurrency test: appends `N` records as its own process.
#[test]
fn child_appender() {
    let Ok(path) = std::env::var("HARNESS_TEST_APPEND_PATH") else { return };
    let who = std::env::var("HARNESS_TEST_APPEND_WHO").unwrap();
    let j = harness::state::journal::Journal::open(Path::new(&path)).unwrap();
    for i in 0..500 {
        let rec = harness::state::journal::Record::run(
            harness::state::journal::RunEvent::Resumed,
            &who,
            Some(format!("{who}-{i}-{}", "x".repeat(i % 97))),
        );
        j.append(&rec).unwrap();
    }
}

#[test]
fn eight_processes_times_500_appends_give_4000_whole_lines() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.jsonl");
    let me = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..8)
        .map(|w| {
            std::process::Command::new(&me)
                .args(["--exact", "foundation::child_appender", "--nocapture", "--test-threads=1"])
                .env("HARNESS_TEST_APPEND_PATH", &path)
                .env("HARNESS_TEST_APPEND_WHO", format!("w{w}"))
                .env("HARNESS_JOURNAL_FSYNC", "0")
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.ends_with('\n'));
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4000);
    let mut per_worker = std::collections::HashMap::<String, Vec<usize>>::new();
    for l in &lines {
        let rec =
            harness::state::journal::parse_line(l.as_bytes()).unwrap_or_else(|e| panic!("interleaved line {l:?}: {e}"));
        let harness::state::journal::Body::Run(r) = rec.body else { panic!("unexpected record") };
        let d = r.detail.unwrap();
        let mut parts = d.splitn(3, '-');
        let (w, i) = (parts.next().unwrap().to_string(), parts.next().unwrap().parse::<usize>().unwrap());
        per_worker.entry(w).or_default().push(i);
    }
    assert_eq!(per_worker.len(), 8);
    for (w, seq) in per_worker {
        assert_eq!(seq, (0..500).collect::<Vec<_>>(), "worker {w} records out of order or lost");
    }
    let v = harness::state::journal::replay(&path).unwrap();
    assert_eq!(v.records, 4000);
    assert!(v.bad_lines.is_empty() && v.torn_tail.is_none());
}

#[test]
fn torn_tail_is_reported_by_the_api_and_not_fatal() {
    let home = tempfile::tempdir().unwrap();
    let ids = install_fixture_runs(home.path());
    let run = run_id_of(&ids, "finished");
    let journal = home.path().join("fixture-repos/finished/runstate/shipped.jsonl");
    let mut f = std::fs::OpenOptions::new().append(true).open(&journal).unwrap();
    std::io::Write::write_all(&mut f, br#"{"v":"runstate/v1","ts":"2026-11-30T0"#).unwrap();
    let api = ApiProc::start(home.path(), &[]);
    let v = api.get(&format!("/runs/{run}")).json();
    assert_eq!(v["journal"]["torn_tail"], true);
    assert_eq!(v["journal"]["torn_tail_line"]["line"], 20);
    assert_eq!(v["status"], "finished");
    // The next append starts on a fresh line; the torn bytes become one reported bad line.
    let (code, _, err) = cli(home.path(), &["journal", "append", &run, r#"{"kind":"run","event":"failed","by":"t"}"#]);
    assert_eq!(code, 0, "{err}");
    let v = api.get(&format!("/runs/{run}")).json();
    assert_eq!(v["journal"]["torn_tail"], false);
    assert_eq!(v["journal"]["bad_lines"], 1);
    assert_eq!(v["status"], "failed");
}

#[test]
fn reconcile_checks_shas_against_git_and_in_flight_tasks_against_processes() {
    let home = tempfile::tempdir().unwrap();
    let repo = home.path().join("repo");
    git_repo(&repo);
    let head = git_head(&repo);
    let (code, out, err) = cli(home.path(), &["registry", "add", "--repo", repo.to_str().unwrap(), "--slug", "rec"]);
    assert_eq!(code, 0, "{err}");
    let p: Value = serde_json::from_str(&out).unwrap();
    let id = p["runId"].as_str().unwrap().to_string();
    assert_eq!(p["branch"], "main");
    let append = |r: &str| assert_eq!(cli(home.path(), &["journal", "append", &id, r]).0, 0);
    append(r#"{"kind":"run","event":"started","by":"t"}"#);
    for s in ["leased", "implemented", "gated"] {
        append(&format!(r#"{{"kind":"task","task":"A","state":"{s}"}}"#));
    }
    append(&format!(r#"{{"kind":"task","task":"A","state":"committed","sha":"{head}"}}"#));
    let (code, out, _) = cli(home.path(), &["journal", "reconcile", &id]);
    assert_eq!(code, 0, "{out}");
    append(r#"{"kind":"task","task":"B","state":"leased"}"#);
    for s in ["leased", "implemented", "gated"] {
        append(&format!(r#"{{"kind":"task","task":"C","state":"{s}"}}"#));
    }
    append(r#"{"kind":"task","task":"C","state":"committed","sha":"0000000000000000000000000000000000000bad"}"#);
    let (code, out, _) = cli(home.path(), &["journal", "reconcile", &id]);
    assert_eq!(code, 3);
    let r: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(r["missing_commits"][0][0], "C");
    assert_eq!(r["in_flight_without_process"][0], serde_json::json!(["B", "leased"]));
}

#[test]
fn liveness_reap_drops_dead_pids_keeps_live_ones_and_consults_the_journal() {
    let home = tempfile::tempdir().unwrap();
    let ids = install_fixture_runs(home.path());
    let run = run_id_of(&ids, "midwave");
    let mut sleeper = Proc { child: std::process::Command::new("sleep").arg("30").spawn().unwrap() };
    let pid = sleeper.child.id();
    let rec = format!(
        r#"{{"pid":{pid},"pgid":{pid},"session_id":null,"logfile":"/tmp/l","state":"leased","started_ts":"2026-11-30T00:00:00Z","last_output_ts":null}}"#
    );
    assert_eq!(cli(home.path(), &["liveness", "set", &run, "C1", &rec]).0, 0);
    let (code, out, err) = cli(home.path(), &["liveness", "reap", &run]);
    assert_eq!(code, 0, "{err}");
    let r: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(r["reaped"].as_array().unwrap().len(), 1, "{r}");
    assert_eq!(r["reaped"][0]["task"], "B1");
    assert_eq!(r["reaped"][0]["journal_state"], "leased");
    assert_eq!(r["supervisor_gone"], true);
    let (_, out, _) = cli(home.path(), &["liveness", "get", &run]);
    let l: Value = serde_json::from_str(&out).unwrap();
    assert!(l["tasks"]["C1"].is_object() && l["tasks"]["B1"].is_null());
    assert!(l["sock"].is_null() && l["supervisor_pid"].is_null());
    sleeper.child.kill().unwrap();
    let _ = sleeper.child.wait();
    // Deleting the sidecar loses only liveness: the journal's view is unchanged.
    let (_, before, _) = cli(home.path(), &["journal", "show", &run]);
    std::fs::remove_file(home.path().join("fixture-repos/midwave/runstate/payments.live.json")).unwrap();
    let (_, after, _) = cli(home.path(), &["journal", "show", &run]);
    assert_eq!(before, after);
}

#[test]
fn plan_check_names_task_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("plan.json");
    std::fs::write(&p, r#"{"v":"plan/v1","slug":"x","tasks":[{"id":"A","wave":2,"adapter":"gpt","prompt":"p"}]}"#)
        .unwrap();
    let (code, _, err) = cli(dir.path(), &["plan", "check", p.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(err.contains("tasks[0] (A): adapter: unknown adapter \"gpt\""), "{err}");
    assert!(err.contains("wave 1 is empty"), "{err}");
}

#[test]
fn api_serves_over_a_unix_socket_too() {
    let home = tempfile::tempdir().unwrap();
    install_fixture_runs(home.path());
    let sock = home.path().join("api.sock");
    let _api = ApiProc::start(home.path(), &["--unix", sock.to_str().unwrap()]);
    // The file appears at bind(), before listen(): wait for a connection, not for the file.
    let mut s = wait_for(Duration::from_secs(5), || std::os::unix::net::UnixStream::connect(&sock).ok())
        .expect("the API's Unix socket accepts");
    use std::io::{Read, Write};
    s.write_all(b"GET /runs HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").unwrap();
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).unwrap();
    let r = parse_response(&buf);
    assert_eq!(r.status, 200);
    assert_eq!(r.json().as_array().unwrap().len(), 5);
}
