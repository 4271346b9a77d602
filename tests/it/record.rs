//! Every verb on the record (`spec/CONTROL.md`, "What each refusal leaves"): each refusal — on the
//! control socket, at the API's edge, in the DynWF inbox — leaves its `control` record before the
//! answer, and refusals that cannot be tied to a run are logged with the peer's uid.

use crate::common::*;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

const T: Duration = Duration::from_secs(30);
const PLAN: &str = r#"{"v":"plan/v1","slug":"rec","tasks":[{"id":"A","wave":1,"adapter":"claude","prompt":"a"}]}"#;

/// The control records of the bench's run with outcome `refused`.
fn refusals(b: &Bench) -> Vec<Value> {
    b.journal().into_iter().filter(|r| r["kind"] == "control" && r["outcome"] == "refused").collect()
}

/// Sends one raw line on the control socket; the answer line.
fn raw(sock: &Path, line: &[u8]) -> Value {
    let mut s = std::os::unix::net::UnixStream::connect(sock).unwrap();
    s.set_read_timeout(Some(T)).unwrap();
    s.write_all(line).unwrap();
    let mut answer = String::new();
    BufReader::new(s).read_line(&mut answer).unwrap();
    serde_json::from_str(&answer).unwrap_or_else(|e| panic!("answer {answer:?}: {e}"))
}

/// (line sent, status answered, verb recorded, task recorded, a piece of the recorded detail)
type SocketCase<'a> = (Vec<u8>, u64, &'a str, Option<&'a str>, &'a str);

/// (path, content type, body, status, verb recorded, by recorded, a piece of the detail)
type ApiCase<'a> = (String, &'a str, &'a [u8], u16, &'a str, &'a str, &'a str);

#[test]
fn every_refusal_on_the_control_socket_is_journaled_before_its_answer() {
    let b = Bench::new();
    let _sup = b.start_supervised(PLAN, "hang", &[]);
    b.wait_state("A", "leased", T);
    let sock = b.sock();
    let huge_msg = "x".repeat(70 * 1024);
    let huge_line = format!("{{\"verb\":\"pause\",\"by\":\"{}\"}}\n", "y".repeat(300 * 1024));
    let cases: Vec<SocketCase> = vec![
        (b"{\"verb\":\"frobnicate\"}\n".to_vec(), 400, "other", None, "unknown verb \"frobnicate\""),
        (b"not json at all\n".to_vec(), 400, "other", None, "not a control/v1 object"),
        (huge_line.into_bytes(), 400, "other", None, "request longer than 262144 bytes"),
        (
            b"{\"verb\":\"kill\",\"task\":\"A\",\"msg\":\"x\"}\n".to_vec(),
            400,
            "kill",
            Some("A"),
            "field msg does not apply",
        ),
        (b"{\"verb\":\"kill\"}\n".to_vec(), 400, "kill", None, "kill needs a task"),
        (
            b"{\"verb\":\"steer\",\"task\":\"A\",\"msg\":\"  \",\"by\":\"alice\"}\n".to_vec(),
            400,
            "steer",
            Some("A"),
            "non-empty msg",
        ),
        (
            format!("{}\n", json!({"verb":"steer","task":"A","msg":huge_msg})).into_bytes(),
            400,
            "steer",
            Some("A"),
            "longer than 64 KiB",
        ),
        (b"{\"verb\":\"kill\",\"task\":\"NOPE\"}\n".to_vec(), 404, "kill", Some("NOPE"), "has no task NOPE"),
        (
            b"{\"verb\":\"status\",\"task\":\"A\"}\n".to_vec(),
            400,
            "other",
            Some("A"),
            "field task does not apply to status",
        ),
    ];
    for (i, (line, status, verb, task, detail)) in cases.iter().enumerate() {
        let before = refusals(&b).len();
        let answer = raw(&sock, line);
        assert_eq!(answer["ok"], false, "case {i}: {answer}");
        assert_eq!(answer["status"], *status, "case {i}: {answer}");
        // The record is there as soon as the answer is: it was written first.
        let recs = refusals(&b);
        assert_eq!(recs.len(), before + 1, "case {i}: one refusal record per refused request: {recs:?}");
        let rec = &recs[before];
        assert_eq!(rec["verb"], *verb, "case {i}: {rec}");
        assert_eq!(rec["task"].as_str(), *task, "case {i}: {rec}");
        let d = rec["detail"].as_str().unwrap();
        assert!(d.contains(detail) && d.ends_with(&format!("({status})")), "case {i}: {d}");
    }
    let recs = refusals(&b);
    // Who asked, as the line said; a refused steer keeps its message (cut when over-long).
    assert_eq!(recs[5]["by"], "alice");
    assert_eq!(recs[0]["by"], "socket");
    let cut = recs[6]["msg"].as_str().unwrap();
    assert!(cut.len() < 5000 && cut.ends_with(&format!("[cut: {} bytes in all]", 70 * 1024)), "{}", cut.len());
    // None of it changed the run.
    assert_eq!(b.state("A").as_deref(), Some("leased"));
    assert_eq!(b.view()["status"], "running");
    control(&sock, &json!({"verb":"stop"}));
}

/// Requests that arrive while the supervisor is ending are answered 409 ("has ended" when the
/// scheduler had not read them, "shutting down" when it was already gone) — and each answer, whichever
/// it is, has its record. The supervisor is ended by SIGTERM (a service stop) while it waits a kill
/// grace out on a gate that ignores TERM, so requests sent meanwhile are queued and never read.
#[test]
fn verbs_racing_the_supervisors_end_each_leave_the_record_of_their_answer() {
    let b = Bench::new();
    let plan = r#"{"v":"plan/v1","slug":"rec","tasks":[{"id":"A","wave":1,"adapter":"claude","prompt":"a",
        "gate":"trap '' TERM; sleep 30"}]}"#;
    // Supervised as a service is (`harness supervise`): its SIGTERM leaves the turns for the next
    // supervisor; a foreground `harness run`'s would stop the run.
    let out = b.harness("success").args(["run", "--register-only"]).arg(b.plan(plan)).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let child = b
        .harness("success")
        .args(["supervise", &b.run_id(), "--kill-grace", "1s"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut sup = Proc { child };
    wait_for(T, || harness::control::is_live(&b.sock()).then_some(())).expect("the supervisor serves");
    b.wait_state("A", "implemented", T);
    std::thread::sleep(Duration::from_millis(300)); // the gate has started
    let sock = b.sock();
    let conns: Vec<_> = (0..16).map(|_| std::os::unix::net::UnixStream::connect(&sock).unwrap()).collect();
    // SAFETY: signalling our own child.
    unsafe { libc::kill(sup.child.id() as i32, libc::SIGTERM) };
    std::thread::sleep(Duration::from_millis(200));
    let answers: Vec<Option<Value>> = std::thread::scope(|s| {
        let hs: Vec<_> = conns
            .into_iter()
            .enumerate()
            .map(|(i, mut c)| {
                s.spawn(move || {
                    c.set_read_timeout(Some(T)).ok()?;
                    let verb = if i % 2 == 0 { "pause" } else { "resume" };
                    c.write_all(format!("{}\n", json!({"verb":verb,"by":format!("racer{i}")})).as_bytes()).ok()?;
                    let mut line = String::new();
                    BufReader::new(c).read_line(&mut line).ok()?;
                    serde_json::from_str(&line).ok()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    sup.wait_exit(T);
    let journal = b.journal();
    let mut refused = 0;
    for (i, a) in answers.iter().enumerate() {
        let Some(a) = a else { continue }; // closed unanswered: the process was gone
        let by = format!("racer{i}");
        let recs: Vec<&Value> = journal.iter().filter(|r| r["kind"] == "control" && r["by"] == by.as_str()).collect();
        assert_eq!(recs.len(), 1, "{by} answered {a} but recorded {recs:?}");
        if a["ok"] == true {
            assert_ne!(recs[0]["outcome"], "refused", "{a} vs {:?}", recs[0]);
        } else {
            refused += 1;
            assert_eq!(a["status"], 409, "{a}");
            let d = recs[0]["detail"].as_str().unwrap();
            assert_eq!(recs[0]["outcome"], "refused");
            assert!(d.contains("shutting down") || d.contains("has ended"), "{d}");
        }
    }
    assert!(refused > 0, "no verb met the ending supervisor: {answers:?}");
}

/// A `harness api` whose stderr is kept in a file, for the log lines of refusals no journal holds.
fn api_logged(home: &Path, log: &Path) -> (Proc, u16) {
    let mut cmd = harness(home);
    cmd.args(["api", "--listen", "127.0.0.1:0"])
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(log).unwrap());
    let mut child = cmd.spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let port = line.trim().rsplit(':').next().and_then(|p| p.parse().ok()).expect("listen line");
    (Proc { child }, port)
}

fn post(port: u16, path: &str, ct: &str, body: &[u8]) -> Resp {
    http(port, "POST", path, &[("Content-Type", ct)], Some(body))
}

#[test]
fn the_apis_refusals_are_journaled_and_untied_ones_are_logged_with_the_peer_uid() {
    let b = Bench::new();
    let mut sup = b.start_supervised(PLAN, "hang", &[]);
    b.wait_state("A", "leased", T);
    let log = b.dir.path().join("api.log");
    let (_api, port) = api_logged(&b.home(), &log);
    let run = b.run_id();
    let j = "application/json";
    let cases: Vec<ApiCase> = vec![
        (
            format!("/runs/{run}/tasks/A/steer"),
            j,
            br#"{"msg":"   ","by":"bob"}"#,
            400,
            "steer",
            "bob",
            "must not be blank",
        ),
        (format!("/runs/{run}/tasks/A/steer"), "text/plain", b"hello", 415, "steer", "api", "Content-Type"),
        (format!("/runs/{run}/tasks/A/kill"), j, br#"{"why":"x"}"#, 400, "kill", "api", "unknown field \"why\""),
        (format!("/runs/{run}/pause"), j, br#"{"by":""}"#, 400, "pause", "api", "field by must be"),
        // Forwarded, refused by the supervisor, recorded by it (once).
        (format!("/runs/{run}/tasks/NOPE/kill"), j, b"{}", 404, "kill", "api", "has no task NOPE"),
    ];
    for (i, (path, ct, body, status, verb, by, detail)) in cases.iter().enumerate() {
        let before = refusals(&b).len();
        let r = post(port, path, ct, body);
        assert_eq!(r.status, *status, "case {i}: {}", r.text());
        let recs = refusals(&b);
        assert_eq!(recs.len(), before + 1, "case {i}: {recs:?}");
        let rec = &recs[before];
        assert_eq!((rec["verb"].as_str(), rec["by"].as_str()), (Some(*verb), Some(*by)), "case {i}: {rec}");
        assert!(rec["detail"].as_str().unwrap().contains(detail), "case {i}: {rec}");
    }
    assert_eq!(b.state("A").as_deref(), Some("leased"), "no refusal changed the run");
    // A run nobody supervises any more: 409, and recorded in its journal.
    control(&b.sock(), &json!({"verb":"stop"}));
    sup.wait_exit(T);
    let before = refusals(&b).len();
    let r = post(port, &format!("/runs/{run}/tasks/A/steer"), j, br#"{"msg":"late","by":"carol"}"#);
    assert_eq!(r.status, 409, "{}", r.text());
    let recs = refusals(&b);
    assert_eq!(recs.len(), before + 1);
    assert_eq!((recs[before]["by"].as_str(), recs[before]["msg"].as_str()), (Some("carol"), Some("late")));
    assert!(recs[before]["detail"].as_str().unwrap().starts_with("run not supervised / not live"));
    // No such run, no such route: logged with the peer's uid (no journal to hold them).
    let ghost = "0123456789ab--ghost";
    assert_eq!(post(port, &format!("/runs/{ghost}/pause"), j, b"{}").status, 404);
    assert_eq!(post(port, &format!("/runs/{run}/tasks/A/frobnicate"), j, b"{}").status, 404);
    let me = unsafe { libc::geteuid() };
    let logged = wait_for(Duration::from_secs(5), || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let has = |needles: &[&str]| text.lines().any(|l| needles.iter().all(|n| l.contains(n)));
        let uid = format!("PEER_UID={me}");
        (has(&[&uid, &format!("RUN_ID={ghost}"), "VERB=\"pause\"", "refused: run"])
            && has(&[&uid, "METHOD=\"POST\"", "frobnicate", "STATUS=404"]))
        .then_some(())
    });
    assert!(logged.is_some(), "{}", std::fs::read_to_string(&log).unwrap_or_default());
}

fn dynwf_journal(home: &Path) -> PathBuf {
    let dir = home.join("fixture-repos/dynwf/runstate");
    std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "jsonl") && !p.to_string_lossy().ends_with(".steer.jsonl"))
        .unwrap_or_else(|| panic!("no journal in {}", dir.display()))
}

#[test]
fn the_dynwf_plane_journals_queued_before_it_answers_and_its_refusals_too() {
    let home = tempfile::tempdir().unwrap();
    let ids = install_fixture_runs(home.path());
    let run = run_id_of(&ids, "dynwf");
    let api = ApiProc::start(home.path(), &[]);
    let journal = dynwf_journal(home.path());
    let controls = || -> Vec<Value> { json_lines(&journal).into_iter().filter(|r| r["kind"] == "control").collect() };
    let j = "application/json";
    // Queued: the record with the entry's id exists when the answer does.
    let r = post(api.port, &format!("/runs/{run}/tasks/D2/steer"), j, br#"{"msg":"use v2","by":"dana"}"#);
    assert_eq!(r.status, 200, "{}", r.text());
    let id = r.json()["queued"]["id"].as_str().unwrap().to_string();
    let rec: Vec<Value> = controls().into_iter().filter(|c| c["id"] == id.as_str()).collect();
    assert_eq!(rec.len(), 1, "{rec:?}");
    assert_eq!((rec[0]["outcome"].as_str(), rec[0]["by"].as_str()), (Some("queued"), Some("dana")));
    let r = post(api.port, &format!("/runs/{run}/pause"), j, b"{}");
    assert_eq!(r.status, 200, "{}", r.text());
    let pause_id = r.json()["queued"]["id"].as_str().unwrap().to_string();
    assert!(controls().iter().any(|c| c["id"] == pause_id.as_str() && c["outcome"] == "queued"));
    // Refusals: kill and stop-like verbs, a committed task, an unknown task, a blank message.
    let cases: Vec<(String, &[u8], u16, &str, &str)> = vec![
        (format!("/runs/{run}/tasks/D2/kill"), b"{}", 409, "kill", "kill is refused for a DynWF run"),
        (format!("/runs/{run}/tasks/D1/steer"), br#"{"msg":"x"}"#, 409, "steer", "task already committed"),
        (format!("/runs/{run}/tasks/ZZ/steer"), br#"{"msg":"x"}"#, 404, "steer", "has no task ZZ"),
        (format!("/runs/{run}/tasks/D2/steer"), br#"{"msg":""}"#, 400, "steer", "must not be blank"),
    ];
    for (i, (path, body, status, verb, detail)) in cases.iter().enumerate() {
        let before = controls().len();
        let r = post(api.port, path, j, body);
        assert_eq!(r.status, *status, "case {i}: {}", r.text());
        let c = controls();
        assert_eq!(c.len(), before + 1, "case {i}: {c:?}");
        assert_eq!((c[before]["verb"].as_str(), c[before]["outcome"].as_str()), (Some(*verb), Some("refused")));
        assert!(c[before]["detail"].as_str().unwrap().contains(detail), "case {i}: {}", c[before]);
    }
    // The CLI's way in records the same: stop is refused for a DynWF run.
    let before = controls().len();
    let (code, _, err) = cli(home.path(), &["inbox", "append", &run, "stop", "--by", "erin"]);
    assert_eq!(code, 1, "{err}");
    let c = controls();
    assert_eq!(c.len(), before + 1);
    assert_eq!((c[before]["verb"].as_str(), c[before]["by"].as_str()), (Some("stop"), Some("erin")));
    assert_eq!(c[before]["outcome"], "refused");
    // Taken exactly once, each take on the record as `accepted`; the steer stays pending.
    let (_, out, _) = cli(home.path(), &["inbox", "take", &run]);
    let taken: Vec<Value> = serde_json::from_str(&out).unwrap();
    assert_eq!(taken.iter().map(|e| e["id"].as_str().unwrap()).collect::<Vec<_>>(), vec![id.as_str(), &pause_id]);
    let (_, out, _) = cli(home.path(), &["inbox", "take", &run]);
    assert_eq!(out.trim(), "[]", "taken twice");
    let accepted: Vec<Value> = controls().into_iter().filter(|c| c["outcome"] == "accepted").collect();
    assert_eq!(accepted.len(), 2, "{accepted:?}");
    let (_, show, _) = cli(home.path(), &["journal", "show", &run]);
    let v: Value = serde_json::from_str(&show).unwrap();
    assert_eq!(v["status"], "paused");
    assert_eq!(v["pending_steers"].as_array().unwrap().len(), 1);
}
