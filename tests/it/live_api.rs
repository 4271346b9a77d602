//! The live API over real HTTP: SSE order and exact resume (also across an API restart), overflow
//! reporting, heartbeats, verbs through the supervisor socket, and the localhost security rules.

use crate::common::*;
use serde_json::Value;
use std::io::Write;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

const T: Duration = Duration::from_secs(30);

/// A supervised run whose only task hangs (so the run stays live), and the log the test appends to.
struct Live {
    b: Bench,
    _sup: Proc,
}

impl Live {
    fn start() -> Live {
        let b = Bench::new();
        let plan = r#"{"v":"plan/v1","slug":"live","tasks":[{"id":"A","wave":1,"adapter":"claude","prompt":"x"},{"id":"B","wave":2,"adapter":"claude","prompt":"y"}]}"#;
        let sup = b.start_supervised(plan, "hang", &[]);
        let live = Live { _sup: sup, b };
        // The hang scenario prints 5 lines (claude's sigterm capture) and waits.
        wait_for(T, || (std::fs::read_to_string(live.log()).unwrap_or_default().lines().count() >= 5).then_some(()))
            .expect("engine output");
        live
    }
    fn log(&self) -> PathBuf {
        self.b.repo().join("runstate/live.logs/A.log")
    }
    fn run_id(&self) -> String {
        self.b.run_id()
    }
    /// Appends `n` claude text deltas (as the engine would), starting at word `from`.
    fn append(&self, from: usize, n: usize) {
        let mut f = std::fs::OpenOptions::new().append(true).open(self.log()).unwrap();
        let mut buf = String::new();
        for i in from..from + n {
            buf.push_str(&format!(
                "{{\"type\":\"stream_event\",\"event\":{{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"w{i} \"}}}},\"session_id\":\"s\"}}\n"
            ));
        }
        f.write_all(buf.as_bytes()).unwrap();
    }
    fn api(&self, extra: &[&str]) -> ApiProc {
        ApiProc::start(&self.b.home(), extra)
    }
    fn stream_path(&self) -> String {
        format!("/runs/{}/tasks/A/stream", self.run_id())
    }
}

fn seq_of(v: &Value) -> String {
    match &v["seq"] {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// All events of the task's log, from the durable endpoint.
fn all_seqs(api: &ApiProc, run: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let q = match &after {
            Some(a) => format!("/runs/{run}/tasks/A/events?after={a}&limit=5000"),
            None => format!("/runs/{run}/tasks/A/events?limit=5000"),
        };
        let r = api.get(&q);
        assert_eq!(r.status, 200);
        out.extend(r.text().lines().map(|l| seq_of(&serde_json::from_str(l).unwrap())));
        after = r.header("harness-next-after").map(str::to_string);
        if r.header("harness-more") != Some("true") {
            return out;
        }
    }
}

#[test]
fn sse_events_arrive_in_order_with_their_seq_as_id() {
    let l = Live::start();
    let api = l.api(&[]);
    let mut c = SseConn::open(api.port, &l.stream_path(), &[]);
    assert_eq!(c.status, 200);
    assert!(c.headers.iter().any(|(k, v)| k == "content-type" && v == "text/event-stream"));
    l.append(0, 50);
    let mut got = Vec::new();
    while got.len() < 52 {
        let e = c.next_event().expect("event");
        let v: Value = serde_json::from_str(&e.data).unwrap();
        assert_eq!(e.id.as_deref(), Some(seq_of(&v).as_str()), "id is the event's seq");
        assert_eq!(v["v"], "events/v1");
        got.push(seq_of(&v));
    }
    assert_eq!(got, all_seqs(&api, &l.run_id())[..52].to_vec());
    assert_eq!(&got[..2], &["1", "5"], "skipped lines still consume their ordinal");
}

#[test]
fn reconnect_with_last_event_id_continues_exactly_even_after_an_api_restart() {
    let l = Live::start();
    l.append(0, 100);
    let api = l.api(&[]);
    let mut c = SseConn::open(api.port, &l.stream_path(), &[]);
    let mut got = Vec::new();
    for _ in 0..40 {
        got.push(c.next_event().unwrap().id.unwrap());
    }
    drop(c);
    l.append(100, 30);
    // Same API, Last-Event-ID header.
    let mut c = SseConn::open(api.port, &l.stream_path(), &[("Last-Event-ID", got.last().unwrap())]);
    for _ in 0..40 {
        got.push(c.next_event().unwrap().id.unwrap());
    }
    drop(c);
    // A new API process: the query-parameter form, and still exact.
    drop(api);
    let api2 = l.api(&[]);
    l.append(130, 20);
    let path = format!("{}?lastEventId={}", l.stream_path(), got.last().unwrap());
    let mut c = SseConn::open(api2.port, &path, &[]);
    let want = all_seqs(&api2, &l.run_id());
    while got.len() < want.len() {
        got.push(c.next_event().unwrap().id.unwrap());
    }
    assert_eq!(got, want, "no duplicate, no gap");
}

#[test]
fn a_slow_client_gets_an_overflow_event_naming_exactly_the_dropped_range() {
    let l = Live::start();
    l.append(0, 60_000);
    let api = l.api(&["--stream-buffer", "16", "--slow-client-grace", "200ms"]);
    let mut c = SseConn::open(api.port, &l.stream_path(), &[]);
    // Do not read: the kernel buffers fill, then the stream's buffer, then events are dropped.
    std::thread::sleep(Duration::from_secs(3));
    let want = all_seqs(&api, &l.run_id());
    let last = want.last().unwrap().clone();
    let mut got: Vec<String> = Vec::new();
    let mut overflows: Vec<(String, String)> = Vec::new();
    loop {
        let e = c.next_event().expect("stream goes on after an overflow");
        let v: Value = serde_json::from_str(&e.data).unwrap();
        if v["type"] == "error" {
            assert_eq!(v["data"]["reason"], "overflow", "{v}");
            assert!(e.id.is_none(), "an overflow notice carries no id");
            let m = v["data"]["message"].as_str().unwrap();
            let range = m.strip_prefix("dropped events ").unwrap().split(':').next().unwrap();
            let (a, b) = range.split_once(" to ").unwrap();
            overflows.push((a.to_string(), b.to_string()));
            if b == last {
                break;
            }
            continue;
        }
        let id = e.id.unwrap();
        let done = id == last;
        got.push(id);
        if done {
            break;
        }
    }
    assert!(!overflows.is_empty(), "60,000 unread events must overflow a 16-event buffer");
    // Every event is either received or inside exactly one reported range, in order.
    let mut gi = 0;
    let mut oi = 0;
    let mut i = 0;
    while i < want.len() {
        if gi < got.len() && got[gi] == want[i] {
            gi += 1;
            i += 1;
            continue;
        }
        let (a, b) = overflows.get(oi).unwrap_or_else(|| panic!("event {} lost without a report", want[i]));
        assert_eq!(&want[i], a, "a dropped range starts where the gap starts");
        while want[i] != *b {
            i += 1;
        }
        i += 1;
        oi += 1;
    }
    assert_eq!(gi, got.len());
    assert_eq!(oi, overflows.len(), "every reported range was really missing");
    eprintln!("overflow episodes: {}", overflows.len());
}

#[test]
fn a_heartbeat_comment_arrives_on_an_idle_stream() {
    let l = Live::start();
    let api = l.api(&["--heartbeat", "200ms"]);
    let mut c = SseConn::open(api.port, &l.stream_path(), &[("Last-Event-ID", "5")]);
    let start = std::time::Instant::now();
    let e = loop {
        let e = c.next().unwrap();
        if e.comment.is_some() {
            break e;
        }
    };
    assert_eq!(e.comment.as_deref(), Some("heartbeat"));
    assert!(start.elapsed() < Duration::from_secs(3));
}

#[test]
fn a_bad_last_event_id_is_400() {
    let l = Live::start();
    let api = l.api(&[]);
    // ("0" is not bad any more: it means "from the beginning", like an absent Last-Event-ID.)
    for bad in ["abc", "-1", "1.0", "NaN", "99999999999999999999999999"] {
        let c = SseConn::open(api.port, &l.stream_path(), &[("Last-Event-ID", bad)]);
        assert_eq!(c.status, 400, "{bad}");
    }
    let r = api.get(&format!("/runs/{}/tasks/A/events?after=x", l.run_id()));
    assert_eq!(r.status, 400);
    let r = api.get(&format!("/runs/{}/tasks/A/events?limit=0", l.run_id()));
    assert_eq!(r.status, 400);
}

#[test]
fn deleting_the_log_mid_stream_ends_it_with_an_error_event() {
    let l = Live::start();
    let api = l.api(&[]);
    let mut c = SseConn::open(api.port, &l.stream_path(), &[]);
    c.next_event().unwrap();
    std::fs::remove_file(l.log()).unwrap();
    let e = loop {
        let e = c.next_event().expect("an error event before the end");
        let v: Value = serde_json::from_str(&e.data).unwrap();
        if v["type"] == "error" {
            break v;
        }
    };
    assert_eq!(e["data"]["reason"], "log_vanished");
    assert_eq!(e["data"]["fatal"], true);
    assert!(c.next().is_none(), "the stream ends");
}

#[test]
fn events_pages_are_exact_and_linked() {
    let l = Live::start();
    l.append(0, 25);
    let api = l.api(&[]);
    let all = all_seqs(&api, &l.run_id());
    let mut after: Option<String> = None;
    let mut got = Vec::new();
    loop {
        let q = match &after {
            Some(a) => format!("/runs/{}/tasks/A/events?after={a}&limit=7", l.run_id()),
            None => format!("/runs/{}/tasks/A/events?limit=7", l.run_id()),
        };
        let r = api.get(&q);
        assert_eq!(r.header("content-type"), Some("application/x-ndjson"));
        got.extend(r.text().lines().map(|l| seq_of(&serde_json::from_str(l).unwrap())));
        after = r.header("harness-next-after").map(str::to_string);
        if r.header("harness-more") == Some("false") {
            break;
        }
    }
    assert_eq!(got, all);
}

#[test]
fn verbs_reach_the_supervisor_and_its_refusals_pass_through() {
    let l = Live::start();
    let api = l.api(&[]);
    let run = l.run_id();
    let post = |path: &str, body: &str| {
        http(api.port, "POST", path, &[("Content-Type", "application/json")], Some(body.as_bytes()))
    };
    let r = post(&format!("/runs/{run}/pause"), r#"{"by":"tester"}"#);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["paused"], true);
    let r = post(&format!("/runs/{run}/resume"), "");
    assert_eq!(r.status, 200);
    let r = post(&format!("/runs/{run}/tasks/B/steer"), r#"{"msg":"hi"}"#);
    assert_eq!(r.status, 409, "{}", r.text());
    assert!(r.json()["detail"].as_str().unwrap().contains("has not started"));
    let r = post(&format!("/runs/{run}/tasks/NOPE/kill"), "{}");
    assert_eq!(r.status, 404);
    let r = post(&format!("/runs/{run}/tasks/A/kill"), "{}");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["state"], "halted");
    let r = post(&format!("/runs/{run}/tasks/A/steer"), r#"{"msg":"try again","interrupt":false}"#);
    assert_eq!(r.status, 200, "{}", r.text());
    let journal = l.b.journal();
    let pause = journal.iter().find(|r| r["verb"] == "pause").unwrap();
    assert_eq!(pause["by"], "tester");
    assert!(journal.iter().any(|r| r["verb"] == "steer" && r["outcome"] == "queued" && r["by"] == "api"));
}

#[test]
fn bodies_are_checked_415_413_400() {
    let l = Live::start();
    let api = l.api(&[]);
    let run = l.run_id();
    let path = format!("/runs/{run}/tasks/A/steer");
    let r = http(api.port, "POST", &path, &[("Content-Type", "text/plain")], Some(b"msg"));
    assert_eq!(r.status, 415);
    let big = format!("{{\"msg\":\"{}\"}}", "x".repeat(70_000));
    let r = http(api.port, "POST", &path, &[("Content-Type", "application/json")], Some(big.as_bytes()));
    assert_eq!(r.status, 413);
    for (body, needle) in [
        ("{not json", "not JSON"),
        ("[1]", "must be a JSON object"),
        (r#"{"msg":"m","colour":1}"#, "unknown field \"colour\""),
        (r#"{"interrupt":true}"#, "field msg is required"),
        (r#"{"msg":5}"#, "field msg must be a string"),
        (r#"{"msg":"m","interrupt":"yes"}"#, "field interrupt must be a boolean"),
        (r#"{"msg":"m","interrupt":null}"#, "field interrupt must be a boolean"),
        (r#"{"msg":"m","by":null}"#, "field by must be a string"),
        (r#"{"msg":null}"#, "field msg must be a string"),
    ] {
        let r = http(api.port, "POST", &path, &[("Content-Type", "application/json")], Some(body.as_bytes()));
        assert_eq!(r.status, 400, "{body}");
        assert!(r.json()["detail"].as_str().unwrap().contains(needle), "{body}: {}", r.text());
    }
}

#[test]
fn a_run_without_a_supervisor_answers_409_for_live_routes() {
    let home = tempfile::tempdir().unwrap();
    let ids = install_fixture_runs(home.path());
    let api = ApiProc::start(home.path(), &[]);
    let run = run_id_of(&ids, "midwave");
    let r = http(api.port, "POST", &format!("/runs/{run}/tasks/B1/kill"), &[], None);
    assert_eq!(r.status, 409);
    assert!(r.json()["detail"].as_str().unwrap().starts_with("run not supervised / not live"), "{}", r.text());
    let c = SseConn::open(api.port, &format!("/runs/{run}/tasks/B1/stream"), &[]);
    assert_eq!(c.status, 409);
    // The durable events of the same task still work.
    let r = api.get(&format!("/runs/{run}/tasks/B1/events"));
    assert_eq!(r.status, 200);
    assert!(r.text().lines().count() >= 2);
    // DynWF: verbs go to the inbox; kill is refused.
    let dynwf = run_id_of(&ids, "dynwf");
    let r = http(
        api.port,
        "POST",
        &format!("/runs/{dynwf}/tasks/D2/steer"),
        &[("Content-Type", "application/json")],
        Some(br#"{"msg":"x"}"#),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["queued"]["verb"], "steer");
    let r = http(api.port, "POST", &format!("/runs/{dynwf}/tasks/D2/kill"), &[], None);
    assert_eq!(r.status, 409);
    // A keyed verb to the inbox: queued once, a repeat answered with the first entry; the key used
    // for another task or verb is refused, not queued as the first request again.
    let keyed = |task: &str, verb: &str, key: &str| {
        let h = [("Content-Type", "application/json"), ("Idempotency-Key", key)];
        let path = match task {
            "" => format!("/runs/{dynwf}/{verb}"),
            _ => format!("/runs/{dynwf}/tasks/{task}/{verb}"),
        };
        let body: &[u8] = if verb == "steer" { br#"{"msg":"keyed"}"# } else { b"{}" };
        http(api.port, "POST", &path, &h, Some(body))
    };
    let first = keyed("D2", "steer", "dyn-1");
    assert_eq!(first.status, 200, "{}", first.text());
    let again = keyed("D2", "steer", "dyn-1");
    assert_eq!(again.json()["queued"]["id"], first.json()["queued"]["id"], "{}", again.text());
    fn keyed_in_inboxes(dir: &std::path::Path) -> usize {
        std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| match e.file_type() {
                Ok(t) if t.is_dir() => keyed_in_inboxes(&e.path()),
                _ if e.file_name().to_string_lossy().ends_with(".steer.jsonl") => {
                    std::fs::read_to_string(e.path()).unwrap_or_default().matches("\"keyed\"").count()
                }
                _ => 0,
            })
            .sum()
    }
    let inbox_lines = || keyed_in_inboxes(home.path());
    let queued = inbox_lines();
    assert_eq!(queued, 1, "the keyed steer is in the inbox once");
    for (task, verb) in [("D1", "steer"), ("", "pause")] {
        let r = keyed(task, verb, "dyn-1");
        assert_eq!(r.status, 409, "{task} {verb}: {}", r.text());
        assert!(r.text().contains("was first used for steer of task D2"), "{}", r.text());
    }
    assert_eq!(inbox_lines(), queued, "nothing more queued");
}

#[test]
fn origins_token_and_listen_rules() {
    let home = tempfile::tempdir().unwrap();
    install_fixture_runs(home.path());
    let api = ApiProc::start(home.path(), &["--allow-origin", "http://127.0.0.1:5173"]);
    let own = format!("http://127.0.0.1:{}", api.port);
    assert_eq!(http(api.port, "GET", "/runs", &[("Origin", &own)], None).status, 200);
    let r = http(api.port, "GET", "/runs", &[("Origin", "http://evil.example")], None);
    assert_eq!(r.status, 403);
    assert!(r.header("access-control-allow-origin").is_none());
    let r = http(api.port, "GET", "/runs", &[("Origin", "http://127.0.0.1:5173")], None);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("access-control-allow-origin"), Some("http://127.0.0.1:5173"));
    assert_eq!(r.header("vary"), Some("Origin"));
    let r = http(
        api.port,
        "OPTIONS",
        "/runs/0123456789ab--x/pause",
        &[("Origin", "http://127.0.0.1:5173"), ("Access-Control-Request-Method", "POST")],
        None,
    );
    assert_eq!(r.status, 204);
    assert_eq!(r.header("access-control-allow-methods"), Some("POST"));
    assert!(r.header("access-control-allow-headers").unwrap().contains("Content-Type"));
    assert_eq!(r.header("access-control-allow-origin"), Some("http://127.0.0.1:5173"));
    drop(api);

    // A token: every other uid needs it, header or query, compared exactly; the API's own uid needs
    // none (issue 15: it used to need it too), but a wrong token is refused whoever presents it.
    let mut cmd = harness(home.path());
    cmd.env("HARNESS_API_TOKEN", "s3cret").args(["api", "--listen", "127.0.0.1:0"]).stdout(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().unwrap()), &mut line).unwrap();
    let _p = Proc { child };
    let port: u16 = line.trim().rsplit(':').next().unwrap().parse().unwrap();
    assert_eq!(http(port, "GET", "/runs", &[], None).status, 200);
    let r = http(port, "GET", "/runs", &[("Authorization", "Bearer wrong")], None);
    assert_eq!(r.status, 401);
    assert_eq!(r.header("www-authenticate"), Some("Bearer"));
    assert_eq!(http(port, "GET", "/runs", &[("Authorization", "Bearer s3cret")], None).status, 200);
    assert_eq!(http(port, "GET", "/runs?token=s3cret", &[], None).status, 200);

    // Non-loopback without a token is refused at start (in a home where no API has run yet: the
    // first `harness api` makes a token); a world-readable token file too.
    let untouched = tempfile::tempdir().unwrap();
    let (code, _, err) = cli(untouched.path(), &["api", "--listen", "0.0.0.0:0", "--allow-remote"]);
    assert_eq!(code, 2);
    assert!(err.contains("needs a token"), "{err}");
    // A token file (this home has one: its API ran above) is not consent to listen remotely.
    for addr in ["0.0.0.0:0", "[::]:0"] {
        let (code, _, err) = cli(home.path(), &["api", "--listen", addr]);
        assert_eq!(code, 2, "{addr}: {err}");
        assert!(err.contains("only with --allow-remote"), "{err}");
    }
    std::fs::write(home.path().join("api.token"), "t").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(home.path().join("api.token"), std::fs::Permissions::from_mode(0o644)).unwrap();
    let (code, _, err) = cli(home.path(), &["api", "--listen", "127.0.0.1:0"]);
    assert_eq!(code, 2);
    assert!(err.contains("chmod 600"), "{err}");
}

#[test]
fn cli_clients_list_show_watch_steer_and_kill() {
    let l = Live::start();
    let api = l.api(&[]);
    let run = l.run_id();
    let addr = format!("127.0.0.1:{}", api.port);
    let hx = |args: &[&str]| {
        let out = harness(&l.b.home()).args(args).args(["--api", &addr]).output().unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, out, _) = hx(&["runs"]);
    assert_eq!(code, 0);
    assert!(out.contains(&run) && out.contains("running") && out.contains("yes"), "{out}");
    let (code, out, _) = hx(&["show", &run]);
    assert_eq!(code, 0);
    assert!(out.contains("wave 1") && out.contains("A ") && out.contains("running"), "{out}");
    // watch --json --until-exit: append an exit marker so the turn ends.
    let mut f = std::fs::OpenOptions::new().append(true).open(l.log()).unwrap();
    f.write_all(b"{\"harness\":\"exit\",\"rc\":0}\n").unwrap();
    let (code, out, err) = hx(&["watch", &run, "A", "--json", "--until-exit"]);
    assert_eq!(code, 0, "{err}");
    let events: Vec<Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(events.last().unwrap()["type"], "exit");
    let (code, out, _) = hx(&["watch", &run, "A", "--until-exit"]);
    assert_eq!(code, 0);
    assert!(out.contains("── turn start") && out.contains("── exit rc=0"), "{out}");
    let (code, _, err) = hx(&["steer", &run, "B", "hello"]);
    assert_eq!(code, 1);
    assert!(err.contains("409") && err.contains("has not started"), "{err}");
    let (code, out, err) = hx(&["kill", &run, "A"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("killed by cli"), "{out}");
    let (code, _, err) = harness(&l.b.home())
        .args(["runs", "--api", "127.0.0.1:1"])
        .output()
        .map(|o| (o.status.code().unwrap_or(-1), (), String::from_utf8_lossy(&o.stderr).into_owned()))
        .unwrap();
    assert_eq!(code, 4, "{err}");
    assert!(err.contains("cannot reach the API"));
}

#[test]
fn the_demo_runs_the_bundled_plan_to_the_end() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = harness(&dir.path().join("unused-home"));
    c.args(["demo", "--dir"]).arg(dir.path().join("d")).args(["--listen", "127.0.0.1:0", "--pace", "fast"]);
    c.env("HARNESS_WRAPPERS", repo_dir().join("wrappers")).stdout(Stdio::piped()).stderr(Stdio::null());
    let mut child = c.spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let p = Proc { child };
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(stdout));
    let mut seen = Vec::new();
    let finished = loop {
        let Some(Ok(l)) = lines.next() else { break false };
        seen.push(l.clone());
        if l.ends_with("run finished") {
            break true;
        }
    };
    assert!(finished, "demo output:\n{}", seen.join("\n"));
    let exe = bin().display().to_string();
    assert!(seen.iter().any(|l| l.contains(&format!("{exe} watch"))), "prints how to watch, with the binary it runs");
    assert!(seen.iter().any(|l| l.contains(&format!("binary {exe}"))), "names its binary");
    assert!(seen.iter().any(|l| l.ends_with("polish       done") || l.contains("polish       done ")), "{seen:?}");
    // At `--pace fast` nothing waits for a steer: no steer is offered that would be refused.
    assert!(!seen.iter().any(|l| l.contains("harness steer ")), "{seen:?}");
    // SIGTERM ends the demo cleanly, its API's socket file removed.
    let sock = dir.path().join("d/home/sock/api.sock");
    assert!(sock.exists(), "no {}", sock.display());
    let mut p = p;
    // SAFETY: signalling our own child.
    unsafe { libc::kill(p.child.id() as i32, libc::SIGTERM) };
    p.wait_exit(Duration::from_secs(30));
    assert!(!sock.exists(), "{} left behind", sock.display());
    let repo = dir.path().join("d/repo");
    let log = std::process::Command::new("git").arg("-C").arg(&repo).args(["log", "--oneline"]).output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&log.stdout).lines().count(),
        5,
        "4 task commits + the initial one (the codex audit is a verdict seat: it never commits)"
    );
    // One commit per task, and each holds its own task's files only (tasks run in their own worktrees).
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(&repo)
        .args(["log", "--format=%x00%s", "--name-only", "-4"])
        .output()
        .unwrap();
    for commit in String::from_utf8_lossy(&out.stdout).split('\0').filter(|c| !c.trim().is_empty()) {
        let mut lines = commit.lines().filter(|l| !l.is_empty());
        let subject = lines.next().unwrap();
        let task = subject.split(':').next().unwrap();
        for file in lines {
            assert!(file.contains(task), "{task}'s commit holds {file}, written by another task");
        }
    }
    kill_all_with_home(&dir.path().join("d/home"));
}

#[test]
fn sighup_rereads_the_token_file() {
    let home = tempfile::tempdir().unwrap();
    use std::os::unix::fs::PermissionsExt;
    let tok = home.path().join("api.token");
    std::fs::write(&tok, "one\n").unwrap();
    std::fs::set_permissions(&tok, std::fs::Permissions::from_mode(0o600)).unwrap();
    let api = ApiProc::start(home.path(), &[]);
    assert_eq!(http(api.port, "GET", "/runs", &[("Authorization", "Bearer one")], None).status, 200);
    std::fs::write(&tok, "two\n").unwrap();
    // SAFETY: signalling our own child.
    unsafe { libc::kill(api.proc.child.id() as i32, libc::SIGHUP) };
    let ok = wait_for(Duration::from_secs(5), || {
        (http(api.port, "GET", "/runs", &[("Authorization", "Bearer two")], None).status == 200).then_some(())
    });
    assert!(ok.is_some(), "the rotated token was not picked up");
    assert_eq!(http(api.port, "GET", "/runs", &[("Authorization", "Bearer one")], None).status, 401);
}

#[test]
fn the_demos_last_task_waits_for_a_steer_and_a_verb_on_the_finished_run_says_so_in_words() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = harness(&dir.path().join("unused-home"));
    // `--pace 0`: every line at once, but not `fast`: the last task waits as at the default pace.
    c.args(["demo", "--dir"]).arg(dir.path().join("d")).args(["--listen", "127.0.0.1:0", "--pace", "0"]);
    c.env("HARNESS_WRAPPERS", repo_dir().join("wrappers")).stdout(Stdio::piped()).stderr(Stdio::null());
    let mut child = c.spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let _p = Proc { child };
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for l in std::io::BufRead::lines(std::io::BufReader::new(stdout)).map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    let mut seen = Vec::new();
    let mut until = |what: &dyn Fn(&str) -> bool, secs: u64| {
        let end = std::time::Instant::now() + Duration::from_secs(secs);
        while let Ok(l) = rx.recv_timeout(end.saturating_duration_since(std::time::Instant::now())) {
            seen.push(l.clone());
            if what(&l) {
                return l;
            }
        }
        panic!("demo output:\n{}", seen.join("\n"));
    };
    let steer = until(&|l: &str| l.contains("steer ") && l.contains(" polish --interrupt"), 30);
    until(&|l: &str| l.contains("polish       running"), 60);
    // It waits: a few seconds on, the run is still live and polish still running.
    std::thread::sleep(Duration::from_secs(3));
    let home = dir.path().join("d/home");
    let run = steer.split_whitespace().find(|w| w.ends_with("--demo")).unwrap().to_string();
    let (code, out, err) = cli(&home, &["show", &run, "polish"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("· running ·"), "{out}");
    // The printed command, as a person pastes it (the demo home's API socket: no address needed).
    let (code, out, err) = cli(&home, &["steer", &run, "polish", "--interrupt", "say hello in French too"]);
    assert_eq!(code, 0, "{out}{err}");
    until(&|l: &str| l.ends_with("run finished"), 60);
    let (code, _, err) = cli(&home, &["pause", &run]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains(&format!("run {run} finished")) && err.contains("ago; its events: harness watch"), "{err}");
    assert!(!err.contains("os error") && !err.contains(".sock"), "no socket path, no os error: {err}");
    // The one steer the demo prints is polish's, which waits for it: it works whenever it is typed.
    let steers: Vec<&String> = seen.iter().filter(|l| l.contains("harness steer ")).collect();
    assert!(!steers.is_empty() && steers.iter().all(|l| l.contains(" polish ")), "{steers:?}");
    // --help says what --listen does without one.
    let (code, out, _) = cli(&home, &["demo", "--help"]);
    assert_eq!(code, 0);
    assert!(out.contains("127.0.0.1:7878 when it is free, else a free port"), "{out}");
    kill_all_with_home(&home);
}
