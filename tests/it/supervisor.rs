//! The supervisor and runner with real processes: fake engines through the real wrappers, a real
//! git repo, the real control socket. Each test cleans up every process of its HARNESS_HOME.

use crate::common::*;
use serde_json::{Value, json};
use std::process::Stdio;
use std::time::Duration;

const T: Duration = Duration::from_secs(30);

/// Waits until the fake engines have been invoked `n` times (the turn is really running).
fn wait_engine(b: &Bench, n: usize) {
    wait_for(T, || (b.records().len() >= n).then_some(())).unwrap_or_else(|| panic!("engine call {n} never came"));
    std::thread::sleep(Duration::from_millis(100));
}

fn plan_one(adapter: &str) -> String {
    format!(r#"{{"v":"plan/v1","slug":"one","tasks":[{{"id":"A","wave":1,"adapter":"{adapter}","prompt":"do A"}}]}}"#)
}

#[test]
fn batch_run_commits_every_task_once_in_wave_order() {
    let b = Bench::new();
    let p = b.plan(
        r#"{"v":"plan/v1","slug":"batch","max_parallel":2,"tasks":[
        {"id":"A","wave":1,"adapter":"claude","prompt":"do A [fake-write:A.txt]","gate":"test -e .git"},
        {"id":"B","wave":1,"adapter":"cursor","prompt":"do B [fake-write:B.txt]"},
        {"id":"C","wave":2,"adapter":"claude","prompt":"do C [fake-write:C.txt]"}]}"#,
    );
    let out = b.harness("success").arg("run").arg(&p).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for t in ["A", "B", "C"] {
        assert_eq!(b.state(t).as_deref(), Some("committed"));
        assert_eq!(b.commits_of(t), 1, "{t}");
    }
    assert_eq!(b.view()["status"], "finished");
    // C (wave 2) was leased only after A and B (wave 1) committed.
    let j = b.journal();
    let pos = |task: &str, state: &str| j.iter().position(|r| r["task"] == task && r["state"] == state).unwrap();
    assert!(pos("C", "leased") > pos("A", "committed") && pos("C", "leased") > pos("B", "committed"));
    assert_eq!(
        j.iter().find(|r| r["task"] == "A" && r["state"] == "gated").unwrap()["detail"],
        "gate passed: test -e .git"
    );
    // Every line validates against the schema.
    let schema = schema("runstate.schema.json");
    for r in &j {
        assert_valid(&schema, r, "journal");
    }
    // Batch mode has no socket and no liveness.
    assert!(!b.sock().exists());
}

#[test]
fn wrapper_exit_3_halts_the_task_and_the_wave_fails_closed() {
    let b = Bench::new();
    let p = b.plan(
        r#"{"v":"plan/v1","slug":"fail","tasks":[
        {"id":"A","wave":1,"adapter":"claude","prompt":"do A"},
        {"id":"B","wave":2,"adapter":"claude","prompt":"do B"}]}"#,
    );
    let out = b.harness("exit3").arg("run").arg(&p).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("halted tasks block the wave: A"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let a = &b.view()["tasks"]["A"];
    assert_eq!(a["state"], "halted");
    assert_eq!(a["rc"], 3);
    assert!(b.view()["tasks"]["B"].is_null(), "wave 2 must not start");
    assert_eq!(b.view()["status"], "failed");
}

#[test]
fn failing_gate_halts_with_the_gate_rc() {
    let b = Bench::new();
    let p = b.plan(r#"{"v":"plan/v1","slug":"gate","tasks":[{"id":"A","wave":1,"adapter":"claude","prompt":"x","gate":"exit 7"}]}"#);
    let out = b.harness("success").arg("run").arg(&p).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let a = &b.view()["tasks"]["A"];
    assert_eq!(a["state"], "halted");
    assert_eq!(a["rc"], 7);
    assert_eq!(a["detail"], "gate failed (exit 7): exit 7");
}

#[test]
fn review_reject_halts_and_approve_reviews() {
    let b = Bench::new();
    let p = b.plan(
        r#"{"v":"plan/v1","slug":"rev","max_parallel":1,"tasks":[
        {"id":"A","wave":1,"adapter":"claude","prompt":"x","review":true}]}"#,
    );
    // Invocation 1 is claude's turn (success), invocation 2 the codex review (reject).
    let out = b.harness("success,reject").arg("run").arg(&p).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(b.view()["tasks"]["A"]["detail"], "review rejected: REJECT: tests are missing");
    let b2 = Bench::new();
    let p = b2.plan(
        r#"{"v":"plan/v1","slug":"rev","tasks":[{"id":"A","wave":1,"adapter":"claude","prompt":"x","review":true}]}"#,
    );
    assert!(b2.harness("success,approve").arg("run").arg(&p).output().unwrap().status.success());
    let j = b2.journal();
    assert!(j.iter().any(|r| r["task"] == "A" && r["state"] == "reviewed" && r["detail"] == "APPROVE"));
    // The review prompt carried the task and asked for the verdict grammar.
    let recs = b2.records();
    let review_prompt = recs[1]["argv"].as_array().unwrap().last().unwrap().as_str().unwrap().to_string();
    assert!(review_prompt.contains("review seat for task A") && review_prompt.contains("APPROVE, or REJECT"));
}

#[test]
fn kill_journals_a_halt_and_leaves_no_process_in_the_group() {
    let b = Bench::new();
    let mut sup = b.start_supervised(&plan_one("claude"), "hang", &[]);
    wait_engine(&b, 1);
    let pgid = control(&b.sock(), &json!({"verb":"status"}))["tasks"]["A"]["pgid"].as_i64().unwrap() as i32;
    assert!(harness::supervisor::kill::group_alive(pgid));
    let r = control(&b.sock(), &json!({"verb":"kill","task":"A","by":"test"}));
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(r["state"], "halted");
    assert_eq!(r["rc"], 143);
    assert!(
        !harness::supervisor::kill::group_alive(pgid),
        "processes left: {:?}",
        harness::supervisor::kill::group_members(pgid)
    );
    let k = b.controls("kill");
    assert_eq!(k.len(), 1);
    assert_eq!(k[0]["outcome"], "accepted");
    assert_eq!(k[0]["by"], "test");
    let a = &b.view()["tasks"]["A"];
    assert_eq!(a["detail"], "killed by test");
    // The log ends with the wrapper's exit marker.
    let log = std::fs::read_to_string(b.repo().join("runstate/one.logs/A.log")).unwrap_or_else(|e| {
        panic!(
            "{e}: {:?}",
            std::fs::read_dir(b.repo().join("runstate/one.logs"))
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect::<Vec<_>>()
        )
    });
    assert!(
        log.trim_end().ends_with(r#""rc":143,"session_id":""#.trim_end_matches('"'))
            || log.contains(r#"{"harness":"exit","rc":143"#)
    );
    // Kill of a task that is not running: idempotent, returns the journal's state.
    let r = control(&b.sock(), &json!({"verb":"kill","task":"A"}));
    assert_eq!(r["ok"], true);
    assert_eq!(r["noop"], true);
    assert_eq!(r["state"], "halted");
    assert_eq!(b.controls("kill")[1]["outcome"], "noop");
    control(&b.sock(), &json!({"verb":"stop"}));
    sup.wait_exit(T);
}

#[test]
fn kill_after_a_queued_steer_cancels_it_and_the_task_stays_halted() {
    let b = Bench::new();
    let mut sup = b.start_supervised(&plan_one("claude"), "hang,success", &[]);
    wait_engine(&b, 1);
    // Queued for the turn boundary (the task is running, not live)…
    let r = control(&b.sock(), &json!({"verb":"steer","task":"A","msg":"also test the empty name"}));
    assert_eq!(r["ok"], true, "{r}");
    let id = r["id"].as_str().unwrap().to_string();
    // …then a kill: it means stop, so the steer is dropped, not applied.
    let r = control(&b.sock(), &json!({"verb":"kill","task":"A","by":"tester"}));
    assert_eq!(
        (r["ok"].as_bool(), r["state"].as_str(), r["cancelled_steers"].as_u64()),
        (Some(true), Some("halted"), Some(1)),
        "{r}"
    );
    let steers = b.controls("steer");
    let outcomes: Vec<&str> = steers.iter().map(|s| s["outcome"].as_str().unwrap()).collect();
    assert_eq!(outcomes, vec!["queued", "cancelled"], "{steers:?}");
    assert_eq!((steers[1]["id"].as_str(), steers[1]["by"].as_str()), (Some(id.as_str()), Some("tester")));
    // No re-dispatch: one engine run, the task halted, the queue empty.
    std::thread::sleep(Duration::from_millis(800));
    assert_eq!(b.records().len(), 1, "the cancelled steer re-dispatched the task");
    let v = b.view();
    assert_eq!(v["tasks"]["A"]["state"], "halted");
    assert_eq!(v["pending_steers"].as_array().map_or(0, |p| p.len()), 0, "{v}");
    // A kill with nothing queued says 0.
    let r = control(&b.sock(), &json!({"verb":"kill","task":"A"}));
    assert_eq!((r["noop"].as_bool(), r["cancelled_steers"].as_u64()), (Some(true), Some(0)), "{r}");
    control(&b.sock(), &json!({"verb":"stop"}));
    sup.wait_exit(T);
}

#[test]
fn a_halt_says_what_the_engine_said_and_masks_secrets_from_the_environment() {
    let b = Bench::new();
    let plan = r#"{"v":"plan/v1","slug":"words","tasks":[{"id":"C","wave":1,"adapter":"claude","prompt":"x [fake-claude:error]"},
                  {"id":"X","wave":1,"adapter":"codex","prompt":"y [fake-codex:error]"},
                  {"id":"S","wave":1,"adapter":"claude","prompt":"z [fake-claude:exit3]"}]}"#;
    let p = b.plan(plan);
    let secret = "sk-test-0123456789abcdef";
    let out = b
        .harness("success")
        .env("HARNESS_FAKE_STDERR", format!("fatal: upstream refused key {secret}"))
        .env("MY_PROVIDER_API_KEY", secret)
        .arg("run")
        .arg(&p)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let v = b.view();
    let detail = |t: &str| v["tasks"][t]["detail"].as_str().unwrap_or_default().to_string();
    assert!(detail("C").contains("API Error: Repeated 529 Overloaded errors"), "{}", detail("C"));
    assert!(detail("X").contains("high demand"), "{}", detail("X"));
    // No error line in the stream: the engine's stderr speaks, its secret masked.
    let s = detail("S");
    assert!(s.contains("fatal: upstream refused key [redacted]"), "{s}");
    for t in ["C", "X", "S"] {
        assert!(!detail(t).contains(secret), "{t}: {}", detail(t));
        assert!(detail(t).chars().count() < 700, "{t}: bounded");
    }
}

#[test]
fn steer_resumes_the_same_session_with_the_message_and_reruns_the_gate() {
    let b = Bench::new();
    let plan = r#"{"v":"plan/v1","slug":"steer","tasks":[{"id":"A","wave":1,"adapter":"claude","prompt":"do A [fake-write:A.txt]","gate":"true"},
                  {"id":"Z","wave":2,"adapter":"claude","prompt":"later"}]}"#;
    // First turn hangs; kill-then-steer redirects it; the resumed turn succeeds.
    let mut sup = b.start_supervised(plan, "hang,success", &[]);
    wait_engine(&b, 1);
    let session = b.view()["tasks"]["A"]["session_id"].as_str().unwrap().to_string();
    control(&b.sock(), &json!({"verb":"kill","task":"A"}));
    let r = control(&b.sock(), &json!({"verb":"steer","task":"A","msg":"use the v2 API instead","by":"test"}));
    assert_eq!(r["ok"], true, "{r}");
    b.wait_state("Z", "committed", T);
    let recs = b.records();
    let argv: Vec<&str> = recs[1]["argv"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    let i = argv.iter().position(|a| *a == "--resume").expect("resumed");
    assert_eq!(argv[i + 1], session, "same session id");
    assert_eq!(argv[argv.iter().position(|a| *a == "-p").unwrap() + 1], "use the v2 API instead");
    // The steer was queued, then applied; the re-dispatch went back to leased and re-ran the gate.
    let steers = b.controls("steer");
    assert_eq!(steers.iter().map(|s| s["outcome"].as_str().unwrap()).collect::<Vec<_>>(), vec!["queued", "applied"]);
    assert_eq!(steers[0]["id"], steers[1]["id"]);
    let states: Vec<String> = b
        .journal()
        .iter()
        .filter(|r| r["task"] == "A" && r["kind"] == "task")
        .map(|r| r["state"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(states, vec!["leased", "halted", "leased", "implemented", "gated", "committed"]);
    assert_eq!(b.commits_of("A"), 1);
    sup.wait_exit(T);
    assert_eq!(b.view()["status"], "finished");
}

#[test]
fn steer_on_committed_is_409_and_the_codex_seat_refuses_steer_but_accepts_kill() {
    let b = Bench::new();
    let plan = r#"{"v":"plan/v1","slug":"mix","tasks":[{"id":"A","wave":1,"adapter":"claude","prompt":"do A"},
                  {"id":"R","wave":2,"adapter":"codex","prompt":"review"}]}"#;
    let mut sup = b.start_supervised(plan, "success,hang", &[]);
    b.wait_state("A", "committed", T);
    wait_engine(&b, 2);
    let r = control(&b.sock(), &json!({"verb":"steer","task":"A","msg":"more"}));
    assert_eq!(r["status"], 409);
    assert_eq!(r["detail"], "task already committed");
    b.wait_state("R", "leased", T);
    let r = control(&b.sock(), &json!({"verb":"steer","task":"R","msg":"approve it"}));
    assert_eq!(r["status"], 409, "{r}");
    assert!(r["detail"].as_str().unwrap().contains("verdict seat"));
    // Refusals are journaled too.
    assert!(b.controls("steer").iter().all(|s| s["outcome"] == "refused"));
    let r = control(&b.sock(), &json!({"verb":"kill","task":"R"}));
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(r["state"], "halted");
    // Unknown task, bad verb, garbage.
    assert_eq!(control(&b.sock(), &json!({"verb":"kill","task":"NOPE"}))["status"], 404);
    assert_eq!(control(&b.sock(), &json!({"verb":"explode"}))["status"], 400);
    assert_eq!(control(&b.sock(), &json!({"verb":"steer","task":"../x","msg":"m"}))["status"], 400);
    control(&b.sock(), &json!({"verb":"stop"}));
    sup.wait_exit(T);
}

#[test]
fn pause_holds_the_next_task_until_resume() {
    let b = Bench::new();
    let plan = r#"{"v":"plan/v1","slug":"pause","tasks":[{"id":"A","wave":1,"adapter":"claude","prompt":"do A"},
                  {"id":"B","wave":2,"adapter":"claude","prompt":"do B"}]}"#;
    let mut sup = b.start_supervised(plan, "slow,success", &[]);
    b.wait_state("A", "leased", T);
    let r = control(&b.sock(), &json!({"verb":"pause","by":"test"}));
    assert_eq!(r["ok"], true);
    assert!(r["detail"].as_str().unwrap().contains("cannot be frozen"), "{r}");
    b.wait_state("A", "committed", T);
    std::thread::sleep(Duration::from_millis(800));
    assert!(b.view()["tasks"]["B"].is_null(), "B dispatched while paused");
    assert_eq!(b.view()["status"], "paused");
    let live: Value =
        serde_json::from_slice(&std::fs::read(b.repo().join("runstate/pause.live.json")).unwrap()).unwrap();
    assert_eq!(live["paused"], true);
    assert_eq!(control(&b.sock(), &json!({"verb":"pause"}))["detail"], "already paused");
    control(&b.sock(), &json!({"verb":"resume","by":"test"}));
    b.wait_state("B", "committed", T);
    sup.wait_exit(T);
    let runs: Vec<String> =
        b.journal().iter().filter(|r| r["kind"] == "run").map(|r| r["event"].as_str().unwrap().to_string()).collect();
    assert_eq!(runs, vec!["started", "paused", "resumed", "finished"]);
}

#[test]
fn several_queued_steers_are_applied_in_order_in_one_resumed_turn() {
    let b = Bench::new();
    let mut sup = b.start_supervised(&plan_one("claude"), "slow,success", &[]);
    wait_engine(&b, 1);
    for m in ["first", "second", "third"] {
        assert_eq!(control(&b.sock(), &json!({"verb":"steer","task":"A","msg":m}))["ok"], true);
    }
    b.wait_state("A", "committed", T);
    sup.wait_exit(T);
    let recs = b.records();
    assert_eq!(recs.len(), 2, "one original turn, one resumed turn");
    let argv: Vec<&str> = recs[1]["argv"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    assert_eq!(argv[argv.iter().position(|a| *a == "-p").unwrap() + 1], "first\n\nsecond\n\nthird");
    let applied: Vec<Value> = b.controls("steer").into_iter().filter(|s| s["outcome"] == "applied").collect();
    assert_eq!(applied.len(), 3);
}

#[test]
fn interrupting_steer_kills_the_turn_then_resumes() {
    let b = Bench::new();
    let mut sup = b.start_supervised(&plan_one("claude"), "hang,success", &[]);
    wait_engine(&b, 1);
    let r = control(&b.sock(), &json!({"verb":"steer","task":"A","msg":"stop and do X","interrupt":true}));
    assert!(r["detail"].as_str().unwrap().contains("interrupting"), "{r}");
    b.wait_state("A", "committed", T);
    sup.wait_exit(T);
    let halted = b.journal().into_iter().find(|r| r["state"] == "halted").unwrap();
    assert!(halted["detail"].as_str().unwrap().contains("(interrupt)"), "{halted}");
}

#[test]
fn supervisor_sigkill_mid_wave_then_restart_commits_every_task_exactly_once() {
    let b = Bench::new();
    let plan = r#"{"v":"plan/v1","slug":"crash","max_parallel":2,"tasks":[
        {"id":"A1","wave":1,"adapter":"claude","prompt":"a1 [fake-write:a1.txt]"},{"id":"A2","wave":1,"adapter":"claude","prompt":"a2 [fake-write:a2.txt]"},
        {"id":"B1","wave":2,"adapter":"claude","prompt":"b1 [fake-write:b1.txt]"},{"id":"B2","wave":2,"adapter":"claude","prompt":"b2 [fake-write:b2.txt]"},
        {"id":"C1","wave":3,"adapter":"claude","prompt":"c1 [fake-write:c1.txt]"}]}"#;
    let mut sup = b.start_supervised(plan, "success,success,slow", &[]);
    b.wait_state("B1", "leased", T);
    // A queued steer must survive the crash.
    let r = control(&b.sock(), &json!({"verb":"steer","task":"B1","msg":"remember the steer [fake-write:b1.txt]"}));
    assert_eq!(r["ok"], true);
    sup.child.kill().unwrap();
    sup.child.wait().unwrap();
    // Restart: `harness supervise <runId>` recovers from the journal.
    let child = b
        .harness("success")
        .args(["supervise", &b.run_id(), "--kill-grace", "1s"])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(b.dir.path().join("supervisor2.log")).unwrap())
        .spawn()
        .unwrap();
    let mut sup2 = Proc { child };
    assert_eq!(sup2.wait_exit(T), 0, "{}", std::fs::read_to_string(b.dir.path().join("supervisor2.log")).unwrap());
    assert_eq!(b.view()["status"], "finished");
    for t in ["A1", "A2", "B1", "B2", "C1"] {
        assert_eq!(b.commits_of(t), 1, "task {t} committed {} times", b.commits_of(t));
    }
    let steers = b.controls("steer");
    assert!(steers.iter().any(|s| s["outcome"] == "applied"), "queued steer not applied: {steers:?}");
    assert!(b.view()["pending_steers"].as_array().unwrap().is_empty());
    let recs = b.records();
    assert!(
        recs.iter().any(|r| r["argv"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a.as_str().unwrap().contains("remember the steer")))
    );
    // No process of this run is left.
    assert!(
        wait_for(Duration::from_secs(5), || processes_with_home(&b.home()).is_empty().then_some(())).is_some(),
        "left: {:?}",
        processes_with_home(&b.home())
    );
}

#[test]
fn commit_without_its_record_gets_the_record_not_a_second_commit() {
    let b = Bench::new();
    let p = b.plan(r#"{"v":"plan/v1","slug":"rec","tasks":[{"id":"A","wave":1,"adapter":"claude","prompt":"x [fake-write:x.txt]"}]}"#);
    assert!(b.harness("success").arg("run").arg(&p).output().unwrap().status.success());
    // Simulate a crash between the commit and its journal record: drop the last two lines
    // (committed, run finished).
    let jp = b.repo().join("runstate/rec.jsonl");
    let text = std::fs::read_to_string(&jp).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    std::fs::write(&jp, lines[..lines.len() - 2].join("\n") + "\n").unwrap();
    assert_eq!(b.state("A").as_deref(), Some("gated"));
    let out = b.harness("success").args(["supervise", &b.run_id()]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(b.commits_of("A"), 1);
    let last_task = b.journal().into_iter().rfind(|r| r["task"] == "A").unwrap();
    assert_eq!(last_task["state"], "committed");
    assert_eq!(last_task["detail"], "recovered: the commit existed, its record did not");
    assert_eq!(b.records().len(), 1, "no second turn");
}

#[test]
fn second_supervisor_is_refused_and_stale_socket_is_replaced() {
    let b = Bench::new();
    let mut sup = b.start_supervised(&plan_one("claude"), "hang", &[]);
    let out = b.harness("hang").args(["supervise", &b.run_id()]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("already has a live supervisor"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    sup.child.kill().unwrap();
    sup.child.wait().unwrap();
    kill_all_with_home(&b.home());
    assert!(b.sock().exists(), "a SIGKILLed supervisor leaves its socket file");
    // The stale socket is replaced by the next supervisor.
    assert_eq!(b.supervise_to_the_end("success"), 0);
    assert_eq!(b.view()["status"], "finished");
}

/// Worker half of the uid test: connects to the socket as whatever uid it runs as.
#[test]
fn child_foreign_uid_client() {
    let Ok(sock) = std::env::var("HARNESS_TEST_FOREIGN_SOCK") else { return };
    match std::os::unix::net::UnixStream::connect(&sock) {
        Ok(mut s) => {
            use std::io::{Read, Write};
            s.write_all(b"{\"verb\":\"stop\"}\n").unwrap();
            let mut buf = String::new();
            let _ = s.read_to_string(&mut buf);
            println!("ANSWER {buf}");
        }
        Err(e) => println!("ANSWER connect failed: {e}"),
    }
}

#[test]
fn a_socket_peer_with_another_uid_is_refused() {
    // SAFETY: getuid cannot fail.
    if unsafe { libc::getuid() } != 0 {
        eprintln!("skipped: switching uid needs root");
        return;
    }
    let b = Bench::new();
    let mut sup = b.start_supervised(&plan_one("claude"), "hang", &[]);
    // Open the path to everyone so the other uid reaches the peer-credential check.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(b.home().join("sock"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(b.home(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(b.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(b.sock(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let sock = b.sock();
    use std::os::unix::process::CommandExt;
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "supervisor::child_foreign_uid_client", "--nocapture", "--test-threads=1"])
        .env("HARNESS_TEST_FOREIGN_SOCK", &sock)
        .uid(65534)
        .gid(65534)
        .output();
    let out = match out {
        Ok(o) if String::from_utf8_lossy(&o.stdout).contains("ANSWER") => o,
        other => {
            eprintln!("skipped: cannot run a client as uid 65534 here ({other:?})");
            control(&sock, &json!({"verb":"stop"}));
            return;
        }
    };
    let answer = String::from_utf8_lossy(&out.stdout);
    assert!(
        answer.contains("\"status\":403") && answer.contains("not the supervisor's uid"),
        "{answer} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Not acted on, and on the record: one refused stop, by the uid (not what the line claims).
    let stops = b.controls("stop");
    assert_eq!(stops.len(), 1, "{stops:?}");
    assert_eq!(stops[0]["outcome"], "refused", "{stops:?}");
    assert_eq!(stops[0]["by"], "uid 65534", "{stops:?}");
    assert!(stops[0]["detail"].as_str().unwrap().contains("not the supervisor's uid"), "{stops:?}");
    assert_eq!(b.view()["status"], "running", "the foreign stop must not be acted on");
    control(&sock, &json!({"verb":"stop"}));
    sup.wait_exit(T);
}

#[test]
fn dynwf_inbox_takes_exactly_once_and_refuses_kill() {
    let home = tempfile::tempdir().unwrap();
    let ids = install_fixture_runs(home.path());
    let run = run_id_of(&ids, "dynwf");
    let (code, _, err) = cli(home.path(), &["inbox", "append", &run, "kill", "--task", "D2"]);
    assert_eq!(code, 1);
    assert!(err.contains("kill is refused for a DynWF run"), "{err}");
    let (code, _, err) = cli(home.path(), &["inbox", "append", &run, "steer", "--task", "D1", "--msg", "x"]);
    assert_eq!(code, 1);
    assert!(err.contains("task already committed"), "{err}");
    for m in ["one", "two"] {
        let (code, _, err) = cli(home.path(), &["inbox", "append", &run, "steer", "--task", "D2", "--msg", m]);
        assert_eq!(code, 0, "{err}");
    }
    assert_eq!(cli(home.path(), &["inbox", "append", &run, "pause"]).0, 0);
    let (_, out, _) = cli(home.path(), &["inbox", "take", &run]);
    let taken: Vec<Value> = serde_json::from_str(&out).unwrap();
    assert_eq!(taken.iter().map(|e| e["verb"].as_str().unwrap()).collect::<Vec<_>>(), vec!["steer", "steer", "pause"]);
    let (_, out, _) = cli(home.path(), &["inbox", "take", &run]);
    assert_eq!(out.trim(), "[]", "taken twice");
    // Crash between journaling and moving the cursor: the journal's ids prevent a second hand-out.
    let cursor = home.path().join("fixture-repos/dynwf/runstate/docs-sweep.steer.cursor");
    std::fs::write(&cursor, "0").unwrap();
    let (_, out, _) = cli(home.path(), &["inbox", "take", &run]);
    assert_eq!(out.trim(), "[]");
    let (_, show, _) = cli(home.path(), &["journal", "show", &run]);
    let v: Value = serde_json::from_str(&show).unwrap();
    assert_eq!(v["status"], "paused");
    assert_eq!(v["pending_steers"].as_array().unwrap().len(), 2);
}

#[test]
fn dynwf_and_standalone_runs_journal_identically() {
    // Drift guard: the same plan, run standalone by the supervisor and "by a DynWF driver" through
    // the CLI, yields records of the same shapes, read by the same durable code.
    let b = Bench::new();
    let p = b.plan(r#"{"v":"plan/v1","slug":"drift","tasks":[{"id":"A","wave":1,"adapter":"claude","prompt":"x [fake-write:x.txt]"}]}"#);
    assert!(b.harness("success").arg("run").arg(&p).output().unwrap().status.success());
    let standalone = b.journal();
    let home = tempfile::tempdir().unwrap();
    let ids = install_fixture_runs(home.path());
    let run = run_id_of(&ids, "dynwf");
    let shape = |r: &Value| -> String {
        let mut keys: Vec<&str> = r.as_object().unwrap().keys().map(|k| k.as_str()).collect();
        keys.retain(|k| !["detail", "by", "session_id", "attempt", "logfile", "files", "rc", "sha"].contains(k));
        keys.sort();
        format!("{}:{}", r["kind"], keys.join(","))
    };
    let fixture_dynwf: Vec<Value> =
        std::fs::read_to_string(home.path().join("fixture-repos/dynwf/runstate/docs-sweep.jsonl"))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
    let mut a: Vec<String> = standalone.iter().map(shape).collect();
    let mut d: Vec<String> = fixture_dynwf.iter().map(shape).collect();
    a.sort();
    a.dedup();
    d.sort();
    d.dedup();
    for s in &d {
        assert!(a.contains(s), "DynWF record shape {s} never written by the standalone plane: {a:?}");
    }
    let schema = schema("runstate.schema.json");
    for r in standalone.iter().chain(fixture_dynwf.iter()) {
        assert_valid(&schema, r, "journal");
    }
    // The same durable code reads both.
    let api = ApiProc::start(home.path(), &[]);
    let v = api.get(&format!("/runs/{run}")).json();
    assert_eq!(v["plane"], "dynwf");
    assert_eq!(v["plan"]["waves"][0]["tasks"][0]["state"], "committed");
}

#[test]
fn stop_is_answered_though_the_supervisor_exits_right_after() {
    // With nothing running, the supervisor ends as soon as it has answered stop: the answer must
    // still reach the client before the process exits.
    for _ in 0..10 {
        let b = Bench::new();
        let mut sup = b.start_supervised(&plan_one("claude"), "exit3", &[]);
        b.wait_state("A", "halted", T);
        let r = control(&b.sock(), &json!({"verb":"stop","by":"test"}));
        assert_eq!(r["ok"], true, "{r}");
        sup.wait_exit(T);
    }
}
