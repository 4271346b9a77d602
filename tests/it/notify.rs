//! Notifications (`$HARNESS_HOME/notify.json`): a supervised run delivers its halted task and its
//! failure to a local webhook that fails twice per id before it accepts (each id accepted exactly
//! once), to an exec hook (the event JSON on stdin), while a dead webhook beside them neither
//! blocks the run nor its verbs; a supervisor SIGKILLed while a delivery is retrying leaves it to
//! the next supervisor of the run, which delivers it (accepted once); `harness notify test` reaches
//! every hook and says which failed.

use crate::common::*;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const T: Duration = Duration::from_secs(60);

/// Every request a receiver got: (id, body, the status it answered).
type Seen = Arc<Mutex<Vec<(String, Value, u16)>>>;

/// A webhook on loopback: answers 500 to the first `fail` requests of each id, then 200. Records
/// (id, status) of every request.
fn receiver(fail: usize) -> (u16, Seen) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let seen: Seen = Arc::default();
    let s = seen.clone();
    std::thread::spawn(move || {
        let mut tries: HashMap<String, usize> = HashMap::new();
        for c in l.incoming().flatten() {
            let mut r = BufReader::new(c.try_clone().unwrap());
            let mut len = 0usize;
            loop {
                let mut line = String::new();
                if r.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0; len];
            let _ = r.read_exact(&mut body);
            let v: Value = serde_json::from_slice(&body).unwrap_or_default();
            let id = v["id"].as_str().unwrap_or("").to_string();
            let n = tries.entry(id.clone()).or_default();
            *n += 1;
            let status = if *n <= fail { 500 } else { 200 };
            s.lock().unwrap().push((id, v, status));
            let mut c = c;
            let _ = write!(c, "HTTP/1.1 {status} X\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        }
    });
    (port, seen)
}

#[test]
fn each_attention_reaches_each_hook_once_and_a_dead_hook_does_not_block_the_run() {
    let b = Bench::new();
    let (port, seen) = receiver(2);
    let exec_out = b.dir.path().join("exec-events.jsonl");
    let script = b.dir.path().join("hook.sh");
    std::fs::write(&script, format!("#!/bin/sh\ncat >> {}\necho >> {}\n", exec_out.display(), exec_out.display()))
        .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let config = json!({"v":"notify/v1","hooks":[
        {"on":["task_halted","run_failed","run_stopped","run_finished"],"webhook":format!("http://127.0.0.1:{port}/hook")},
        {"on":["run_stopped"],"exec":[script.display().to_string()]},
        {"on":["task_halted","run_stopped"],"webhook":"http://127.0.0.1:1/dead"}]});
    std::fs::write(b.home().join("notify.json"), config.to_string()).unwrap();
    let plan = json!({"v":"plan/v1","slug":"notify","tasks":[
        {"id":"A","wave":1,"adapter":"claude","prompt":"fine"},
        {"id":"B","wave":1,"adapter":"claude","prompt":"fails [fake-claude:error]"}]});
    let mut sup = b.start_supervised(&plan.to_string(), "success", &[]);
    b.wait_state("A", "committed", T);
    b.wait_state("B", "halted", T);
    // The dead hook is still being retried (its last attempt is ~15 s away), yet the run answers
    // its verbs and ends now.
    let answer = control(&b.sock(), &json!({"verb":"stop","by":"tester"}));
    assert_eq!(answer["ok"], true, "{answer}");
    assert!(!b.supervisor_log().contains("notification not delivered"), "the stop waited for the dead hook");
    // It exits once its last notifications are delivered or given up.
    sup.wait_exit(T);
    assert_eq!(b.view()["status"], "stopped");
    let journal = b.journal();
    let line_of = |pred: &dyn Fn(&Value) -> bool| journal.iter().position(pred).unwrap() + 1;
    let halted = format!("{}:{}", b.run_id(), line_of(&|r| r["kind"] == "task" && r["state"] == "halted"));
    let failed = format!("{}:{}", b.run_id(), line_of(&|r| r["kind"] == "run" && r["event"] == "stopped"));
    let seen = seen.lock().unwrap().clone();
    let accepted: Vec<&String> = seen.iter().filter(|(_, _, s)| *s == 200).map(|(id, _, _)| id).collect();
    assert_eq!(accepted, vec![&halted, &failed], "each id accepted exactly once, in order: {seen:#?}");
    assert_eq!(seen.iter().filter(|(id, _, _)| *id == halted).count(), 3, "two failures, then the retry that took");
    let body = &seen.iter().find(|(id, _, s)| *id == halted && *s == 200).unwrap().1;
    assert_eq!(
        (body["v"].as_str(), body["kind"].as_str(), body["task"].as_str()),
        (Some("notify/v1"), Some("task_halted"), Some("B"))
    );
    // The engine's own words, not only its exit code.
    let detail = body["detail"].as_str().unwrap_or_default();
    assert!(detail.contains("API Error: Repeated 529 Overloaded errors"), "{detail}");
    let exec: Vec<Value> = json_lines(&exec_out);
    assert_eq!(exec.len(), 1, "{exec:?}");
    assert_eq!((exec[0]["kind"].as_str(), exec[0]["id"].as_str()), (Some("run_stopped"), Some(failed.as_str())));
    assert!(exec[0]["detail"].as_str().unwrap().contains("stopped by tester"), "{}", exec[0]);
    // The dead hook's failure went to the log, naming the hook and the id.
    let log = b.supervisor_log();
    assert!(log.contains("notification not delivered") && log.contains("127.0.0.1:1/dead"), "{log}");
}

#[test]
fn a_supervisor_killed_mid_delivery_delivers_the_notification_after_its_restart() {
    let b = Bench::new();
    // Four failures per id: the first delivery is still retrying when its supervisor dies.
    let (port, seen) = receiver(4);
    let config = json!({"v":"notify/v1","hooks":[
        {"on":["task_halted"],"webhook":format!("http://127.0.0.1:{port}/hook")}]});
    std::fs::write(b.home().join("notify.json"), config.to_string()).unwrap();
    let plan = json!({"v":"plan/v1","slug":"notify","tasks":[
        {"id":"B","wave":1,"adapter":"claude","prompt":"fails [fake-claude:error]"}]});
    let mut sup = b.start_supervised(&plan.to_string(), "success", &[]);
    b.wait_state("B", "halted", T);
    let run = b.run_id();
    let halted = format!("{run}:{}", b.journal().iter().position(|r| r["state"] == "halted").unwrap() + 1);
    let tries = || seen.lock().unwrap().iter().filter(|(id, _, _)| *id == halted).count();
    wait_for(T, || (tries() >= 1).then_some(())).expect("a first attempt");
    sup.child.kill().unwrap();
    sup.child.wait().unwrap();
    let before = tries();
    assert!(before < 5, "the delivery was still under way when its supervisor died ({before} attempts)");
    // A new supervisor for the run takes the delivery up again, and it is accepted once.
    let mut again = b
        .harness("success")
        .args(["supervise", &run, "--kill-grace", "1s"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map(|child| Proc { child })
        .unwrap();
    let accepted = || seen.lock().unwrap().iter().filter(|(id, _, s)| *id == halted && *s == 200).count();
    wait_for(T, || (accepted() == 1).then_some(()))
        .unwrap_or_else(|| panic!("not redelivered: {:#?}", seen.lock().unwrap()));
    let answer = control(&b.sock(), &json!({"verb":"stop","by":"tester"}));
    assert_eq!(answer["ok"], true, "{answer}");
    again.wait_exit(T);
    assert_eq!(accepted(), 1, "accepted exactly once: {:#?}", seen.lock().unwrap());
    assert!(tries() > before, "the restarted supervisor made the later attempts");
}

#[test]
fn notify_test_reaches_every_hook_and_names_the_one_that_failed() {
    let b = Bench::new();
    let (port, seen) = receiver(0);
    let config = json!({"v":"notify/v1","hooks":[
        {"on":["run_finished"],"webhook":format!("http://127.0.0.1:{port}/ok")},
        {"on":["run_finished"],"exec":["false"]}]});
    std::fs::write(b.home().join("notify.json"), config.to_string()).unwrap();
    let (code, out, err) = cli(&b.home(), &["notify", "test"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains(&format!("ok      webhook http://127.0.0.1:{port}/ok")), "{out}");
    assert!(out.contains("FAILED  exec false: false exited 1"), "{out}");
    assert!(err.contains("1 of 2 hook(s) failed"), "{err}");
    assert_eq!(seen.lock().unwrap()[0].1["kind"], "run_finished");
    std::fs::write(b.home().join("notify.json"), r#"{"v":"notify/v1","hooks":[{"on":["nope"],"desktop":true}]}"#)
        .unwrap();
    let (code, _, err) = cli(&b.home(), &["notify", "test"]);
    assert_eq!(code, 1);
    assert!(err.contains("hooks[0]: on: unknown kind \"nope\""), "{err}");
}

#[test]
fn an_invalid_notify_json_is_said_once_and_what_happened_meanwhile_goes_out_once_it_is_fixed() {
    let b = Bench::new();
    let (port, seen) = receiver(0);
    std::fs::write(b.home().join("notify.json"), r#"{"v":"notify/v1","hooks":[{"on":["task_halted"],"webhook":"#)
        .unwrap();
    let plan = json!({"v":"plan/v1","slug":"held","tasks":[
        {"id":"B","wave":1,"adapter":"claude","prompt":"fails [fake-claude:error]"}]});
    let p = b.plan(&plan.to_string());
    // harness run says so at start.
    let out = b.harness("success").args(["run", "--register-only"]).arg(&p).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("notifications are held"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let log = b.dir.path().join("sup.log");
    let child = b
        .harness("success")
        .args(["supervise", &b.run_id(), "--kill-grace", "1s"])
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut sup = Proc { child };
    b.wait_state("B", "halted", T);
    std::thread::sleep(Duration::from_millis(1500)); // many notifier polls with the broken file
    assert!(seen.lock().unwrap().is_empty());
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(text.matches("notify.json is invalid").count(), 1, "said once: {text}");
    // Fixed: the halt held meanwhile is delivered, once.
    let config =
        json!({"v":"notify/v1","hooks":[{"on":["task_halted"],"webhook":format!("http://127.0.0.1:{port}/hook")}]});
    std::fs::write(b.home().join("notify.json"), config.to_string()).unwrap();
    wait_for(T, || (!seen.lock().unwrap().is_empty()).then_some(())).expect("delivered after the fix");
    std::thread::sleep(Duration::from_millis(600));
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "{seen:#?}");
    assert_eq!((seen[0].1["kind"].as_str(), seen[0].1["task"].as_str()), (Some("task_halted"), Some("B")));
    control(&b.sock(), &json!({"verb":"stop"}));
    sup.wait_exit(T);
}

/// A run that ends while notify.json is broken leaves its held events on the record; once the file
/// is fixed, `harness notify flush` sends them — once, however often it runs.
#[test]
fn what_a_run_held_when_it_ended_goes_out_with_notify_flush() {
    let b = Bench::new();
    let (port, seen) = receiver(0);
    std::fs::write(b.home().join("notify.json"), "{broken").unwrap();
    let plan = json!({"v":"plan/v1","slug":"ended","tasks":[
        {"id":"B","wave":1,"adapter":"claude","prompt":"fails [fake-claude:error]"}]});
    let mut sup = b.start_supervised(&plan.to_string(), "success", &[]);
    b.wait_state("B", "halted", T);
    std::thread::sleep(Duration::from_millis(500));
    control(&b.sock(), &json!({"verb":"stop","by":"tester"}));
    sup.wait_exit(T);
    assert!(
        b.supervisor_log().contains("harness notify flush"),
        "the ending supervisor says how: {}",
        b.supervisor_log()
    );
    // Still broken: the flush refuses, naming the problem, and sends nothing.
    let (code, _, err) = cli(&b.home(), &["notify", "flush"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("notify.json") && err.contains("fix it first"), "{err}");
    let config = json!({"v":"notify/v1","hooks":[{"on":["task_halted","run_stopped"],"webhook":format!("http://127.0.0.1:{port}/hook")}]});
    std::fs::write(b.home().join("notify.json"), config.to_string()).unwrap();
    let (code, out, err) = cli(&b.home(), &["notify", "flush"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("2 notification(s) sent"), "{out}");
    let kinds: Vec<String> =
        seen.lock().unwrap().iter().map(|(_, v, _)| v["kind"].as_str().unwrap_or("").to_string()).collect();
    assert_eq!(kinds, ["task_halted", "run_stopped"], "held, then sent in order");
    let (code, out, _) = cli(&b.home(), &["notify", "flush"]);
    assert_eq!(code, 0);
    assert!(out.contains("0 notification(s) sent"), "{out}");
    assert_eq!(seen.lock().unwrap().len(), 2, "nothing sent twice");
}

/// A batch run (no socket) is served by its own notifier: `notify flush` leaves it alone (the
/// notifier holds the mark's lock), so nothing goes out twice.
#[test]
fn notify_flush_leaves_a_live_batch_run_to_its_notifier() {
    let b = Bench::new();
    let (port, seen) = receiver(0);
    let config =
        json!({"v":"notify/v1","hooks":[{"on":["task_halted"],"webhook":format!("http://127.0.0.1:{port}/hook")}]});
    std::fs::write(b.home().join("notify.json"), config.to_string()).unwrap();
    let plan = json!({"v":"plan/v1","slug":"batchlive","tasks":[{"id":"A","wave":1,"adapter":"claude","prompt":"a"}]});
    let child = b
        .harness("hang")
        .arg("run")
        .arg(b.plan(&plan.to_string()))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let _run = Proc { child };
    wait_for(T, || b.try_run_id()).expect("registered");
    b.wait_state("A", "leased", T);
    // The notifier took its lock when it started (before the task was leased).
    let (code, out, err) = cli(&b.home(), &["notify", "flush"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("0 notification(s) sent (1 live run(s) left to their supervisors)"), "{out}");
    assert!(seen.lock().unwrap().is_empty());
}

#[test]
fn a_webhook_url_is_never_on_a_command_line() {
    use std::io::Read;
    let b = Bench::new();
    // A receiver that takes the request and holds the answer, so the delivery is seen in flight.
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let secret = "T000/B000/s3cret-webhook-path";
    let config = json!({"v":"notify/v1","hooks":[{"on":["run_finished"],"webhook":format!("http://127.0.0.1:{port}/hooks/{secret}")}]});
    std::fs::write(b.home().join("notify.json"), config.to_string()).unwrap();
    let child = harness(&b.home())
        .args(["notify", "test"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let _p = Proc { child };
    let (mut s, _) = l.accept().unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(5))).unwrap();
    let mut got = vec![0u8; 8192];
    let n = s.read(&mut got).unwrap();
    let request = String::from_utf8_lossy(&got[..n]).into_owned();
    assert!(request.contains(secret), "the delivery is the one watched: {request}");
    // While it is in flight, no process's command line holds the URL.
    let mut seen_curl = false;
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cmd) = std::fs::read(e.path().join("cmdline")) else { continue };
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        seen_curl |= cmd.starts_with("curl ");
        assert!(!cmd.contains("s3cret"), "on a command line: {cmd}");
    }
    assert!(seen_curl, "the delivery's curl was looked at");
}

/// `notify.json` says which commands run: one another uid owns, one anyone may write, or a link is
/// refused by name — `notify test` runs none of its hooks.
#[test]
fn a_notify_json_others_could_write_is_refused_and_runs_nothing() {
    let b = Bench::new();
    let ran = b.dir.path().join("ran");
    let config = json!({"v":"notify/v1","hooks":[{"on":["run_finished"],"exec":["/bin/sh","-c",format!("id > {}", ran.display())]}]});
    let file = b.home().join("notify.json");
    std::fs::write(&file, config.to_string()).unwrap();
    std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o666)).unwrap();
    let (code, _, err) = cli(&b.home(), &["notify", "test"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("writable by others") && err.contains("notify.json"), "{err}");
    assert!(!ran.exists(), "a hook ran");
    std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    // A link to a file elsewhere.
    let elsewhere = b.dir.path().join("elsewhere.json");
    std::fs::rename(&file, &elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &file).unwrap();
    let (code, _, err) = cli(&b.home(), &["notify", "test"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("symbolic link"), "{err}");
    assert!(!ran.exists(), "a hook ran");
    std::fs::remove_file(&file).unwrap();
    std::fs::rename(&elsewhere, &file).unwrap();
    if nix::unistd::geteuid().is_root() {
        nix::unistd::chown(&file, Some(nix::unistd::Uid::from_raw(65534)), None).unwrap();
        let (code, _, err) = cli(&b.home(), &["notify", "test"]);
        assert_eq!(code, 1, "{err}");
        assert!(err.contains("owned by uid 65534"), "{err}");
        assert!(!ran.exists(), "a hook ran");
        nix::unistd::chown(&file, Some(nix::unistd::geteuid()), None).unwrap();
    }
    // Its own again: the hook runs.
    let (code, out, err) = cli(&b.home(), &["notify", "test"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(ran.exists());
}
