//! What a Web UI reads off the API (issue "The API a Web UI builds on"), the hygiene part: every
//! `Harness-*` header exposed to an allowed origin's script; a refused verb on the record without
//! moving the run's `updated`; `counts.pending`; a task that never ran has `usage: null`; `task`
//! beside `id` in the plan's waves.

use crate::common::*;
use std::time::Duration;

const ORIGIN: &str = "http://127.0.0.1:5173";
const T: Duration = Duration::from_secs(30);

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

/// The next `event: end` of a stream (events before it are collected), then the stream's close.
fn until_end(c: &mut SseConn, wait: Duration) -> (Vec<Sse>, serde_json::Value) {
    c.stream.set_read_timeout(Some(wait)).unwrap();
    let mut before = Vec::new();
    loop {
        let e = c.next().expect("an `end` event before the stream closes or times out");
        if e.event.as_deref() == Some("end") {
            assert!(e.id.is_none(), "end carries no id (Last-Event-ID stays the last event's): {e:?}");
            let data = serde_json::from_str(&e.data).unwrap();
            assert!(c.next().is_none(), "the stream closes after end");
            return (before, data);
        }
        if e.comment.is_none() && !e.data.is_empty() {
            before.push(e);
        }
    }
}

#[test]
fn streams_end_when_their_task_or_run_is_over_and_feed_serves_any_run() {
    let b = Bench::new();
    let plan = r#"{"v":"plan/v1","slug":"ends","tasks":[{"id":"A","wave":1,"adapter":"claude","prompt":"a"},
        {"id":"B","wave":2,"adapter":"claude","prompt":"b"}]}"#;
    let _sup = b.start_supervised(plan, "hang", &[]);
    let log = b.repo().join("runstate/ends.logs/A.log");
    wait_for(T, || (std::fs::read_to_string(&log).unwrap_or_default().lines().count() >= 5).then_some(()))
        .expect("A's engine output");
    let api = ApiProc::start(&b.home(), &[]);
    let run = b.run_id();
    let mut stream = SseConn::open(api.port, &format!("/runs/{run}/tasks/A/stream"), &[]);
    let mut feed = SseConn::open(api.port, &format!("/runs/{run}/tasks/A/feed"), &[]);
    assert_eq!((stream.status, feed.status), (200, 200));
    let post = |path: &str, body: &str| {
        let r = http(api.port, "POST", path, &[("Content-Type", "application/json")], Some(body.as_bytes()));
        assert_eq!(r.status, 200, "{path}: {}", r.text());
    };
    // Killed: A halts and blocks the run, which is still live (a retry may follow): no end yet.
    post(&format!("/runs/{run}/tasks/A/kill"), r#"{"by":"ui"}"#);
    b.wait_state("A", "halted", T);
    stream.stream.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    while let Some(e) = stream.next() {
        assert_ne!(e.event.as_deref(), Some("end"), "a halted task of a live run is not over: {e:?}");
    }
    // Skipped: the task is over, both streams end and say why.
    let mut stream = SseConn::open(api.port, &format!("/runs/{run}/tasks/A/stream"), &[]);
    post(&format!("/runs/{run}/tasks/A/skip"), r#"{"reason":"not needed","by":"ui"}"#);
    let (events, end) = until_end(&mut stream, T);
    assert_eq!((end["reason"].as_str(), end["state"].as_str()), (Some("task_over"), Some("skipped")), "{end}");
    assert_eq!(end["runId"], run.as_str());
    let last = events.last().and_then(|e| e.id.clone()).expect("the replayed events");
    assert_eq!(end["last_seq"].as_str(), Some(last.as_str()), "{end}");
    let (fed, end2) = until_end(&mut feed, T);
    assert_eq!(end2["reason"], "task_over", "{end2}");
    assert_eq!(fed.last().and_then(|e| e.id.clone()), Some(last.clone()), "the feed sent every event");

    // B runs (and hangs); stopping the run ends B's stream with the run's status.
    b.wait_state("B", "leased", T);
    let mut sb = SseConn::open(api.port, &format!("/runs/{run}/tasks/B/stream"), &[]);
    assert_eq!(sb.status, 200);
    let watch = harness(&b.home())
        .args(["watch", "--api", &format!("127.0.0.1:{}", api.port), &run, "B"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (code, out, err) = cli(&b.home(), &["stop", &run]);
    assert_eq!(code, 0, "{out}{err}");
    let (_, end) = until_end(&mut sb, T);
    // `harness watch` ends with the stream (it neither hangs nor replays the events again).
    let watched = wait_for(T, || {
        let pid = watch.id() as i32;
        // SAFETY: polling our own child.
        (unsafe { libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG) } == pid).then_some(())
    });
    let mut watch = watch;
    if watched.is_none() {
        let _ = watch.kill();
    }
    let mut err = String::new();
    std::io::Read::read_to_string(watch.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert!(watched.is_some(), "harness watch did not end with its stream: {err}");
    assert!(err.contains("the stream ended: the run stopped"), "{err}");
    assert!(!err.contains("not live"), "no replay after the end: {err}");
    assert_eq!((end["reason"].as_str(), end["run_status"].as_str()), (Some("run_over"), Some("stopped")), "{end}");
    assert_eq!(end["state"], "halted", "{end}");

    // A run that is over: /stream keeps the pinned 409; /feed replays it and ends at once.
    let r = api.get(&format!("/runs/{run}/tasks/B/stream"));
    assert_eq!(r.status, 409, "{}", r.text());
    let mut fb = SseConn::open(api.port, &format!("/runs/{run}/tasks/B/feed"), &[]);
    let (fed, end) = until_end(&mut fb, Duration::from_secs(10));
    assert!(!fed.is_empty(), "B's recorded events");
    assert_eq!(end["reason"], "run_over", "{end}");
    // Resumed past its last event, the feed sends nothing but the end.
    let last = fed.last().unwrap().id.clone().unwrap();
    let mut fb = SseConn::open(api.port, &format!("/runs/{run}/tasks/B/feed"), &[("Last-Event-ID", &last)]);
    let (fed, end) = until_end(&mut fb, Duration::from_secs(10));
    assert!(fed.is_empty(), "{fed:?}");
    assert_eq!(end["last_seq"].as_str(), Some(last.as_str()));
    // A task the run does not have is a 404, as on every task route.
    let r = api.get(&format!("/runs/{run}/tasks/Z/feed"));
    assert_eq!(r.status, 404, "{}", r.text());
}

#[test]
fn a_feed_of_a_run_whose_supervisor_died_ends_not_live() {
    let b = Bench::new();
    let plan = r#"{"v":"plan/v1","slug":"died","tasks":[{"id":"A","wave":1,"adapter":"claude","prompt":"a"}]}"#;
    let mut sup = b.start_supervised(plan, "hang", &[]);
    b.wait_state("A", "leased", T);
    let api = ApiProc::start(&b.home(), &[]);
    let run = b.run_id();
    let mut feed = SseConn::open(api.port, &format!("/runs/{run}/tasks/A/feed"), &[]);
    let mut stream = SseConn::open(api.port, &format!("/runs/{run}/tasks/A/stream"), &[]);
    assert_eq!((feed.status, stream.status), (200, 200));
    sup.child.kill().unwrap(); // a crash: no journal record says the run is over
    sup.child.wait().unwrap();
    let t = std::time::Instant::now();
    for c in [&mut feed, &mut stream] {
        let (_, end) = until_end(c, T);
        assert_eq!((end["reason"].as_str(), end["run_status"].as_str()), (Some("not_live"), Some("running")), "{end}");
        assert!(end["detail"].as_str().unwrap().contains("no supervisor answers"), "{end}");
    }
    assert!(t.elapsed() < T, "ended in {:?}", t.elapsed());
    kill_all_with_home(&b.home());
}

/// Every task's view carries its commit; the diff routes show a task's own change (what the agent
/// committed itself and what it left uncommitted, squashed) and the run's own commits — not a
/// commit the user made on the branch afterwards; gate and review say how they went.
#[test]
fn a_ui_sees_what_each_task_changed_and_how_its_gate_and_review_went() {
    let b = Bench::new();
    let plan = r#"{"v":"plan/v1","slug":"chg","max_parallel":1,"tasks":[
        {"id":"A","wave":1,"adapter":"claude","prompt":"a [fake-commit:part.txt] [fake-write:a.txt] [fake-codex:approve]","review":true},
        {"id":"B","wave":2,"adapter":"claude","prompt":"b [fake-write:b.txt] [fake-binary:bin.dat]"},
        {"id":"C","wave":3,"adapter":"claude","prompt":"c [fake-write:c.txt] [fake-codex:reject]","review":true},
        {"id":"D","wave":3,"adapter":"claude","prompt":"d [fake-write:d.txt]","gate":"echo 'FAIL: 2 tests failed'; exit 3"}]}"#;
    let out = b.harness("success").arg("run").arg(b.plan(plan)).output().unwrap();
    assert!(!out.status.success(), "C is rejected and D's gate fails");
    let run = b.run_id();
    let view = b.view();
    let sha_a = view["tasks"]["A"]["sha"].as_str().unwrap_or_else(|| panic!("{view:#}")).to_string();
    let sha_b = view["tasks"]["B"]["sha"].as_str().unwrap().to_string();
    // The user goes on working on the branch the run integrated onto, after it.
    assert_eq!(view["branch"], "main", "{view}");
    git(
        &b.repo(),
        &["-c", "user.name=u", "-c", "user.email=u@x", "commit", "-q", "--allow-empty", "-m", "user: later work"],
    );
    let api = ApiProc::start(&b.home(), &[]);

    // The views: A's commit holds what the agent committed itself and what it left.
    let detail = api.get(&format!("/runs/{run}")).json();
    let task = |id: &str| {
        detail["plan"]["waves"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|w| w["tasks"].as_array().unwrap().clone())
            .find(|t| t["id"] == id)
            .unwrap()
    };
    let a = task("A");
    assert_eq!(a["commit"]["sha"], sha_a.as_str(), "{a}");
    assert_eq!(a["commit"]["integrated"], true);
    assert!(a["commit"]["subject"].as_str().is_some_and(|s| !s.is_empty()), "{a}");
    let paths: Vec<&str> =
        a["commit"]["files"].as_array().unwrap().iter().map(|f| f["path"].as_str().unwrap()).collect();
    assert!(paths.contains(&"part.txt") && paths.contains(&"a.txt"), "{paths:?}");
    let f = a["commit"]["files"].as_array().unwrap().iter().find(|f| f["path"] == "a.txt").unwrap().clone();
    assert_eq!((f["status"].as_str(), f["added"].as_u64(), f["removed"].as_u64()), (Some("added"), Some(1), Some(0)));
    let bin = task("B")["commit"]["files"].as_array().unwrap().iter().find(|f| f["path"] == "bin.dat").unwrap().clone();
    assert!(bin["added"].is_null() && bin["removed"].is_null(), "a binary file has no line counts: {bin}");
    assert!(task("C")["commit"]["integrated"] == false || task("C")["commit"].is_null(), "{}", task("C"));
    let one = api.get(&format!("/runs/{run}/tasks/A")).json();
    assert_eq!(one["commit"], a["commit"], "the task view says the same");

    // A task's diff: its commit's unified diff; ?stat=1 its paths.
    let r = api.get(&format!("/runs/{run}/tasks/A/diff"));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!((r.header("harness-diff-of"), r.header("harness-truncated")), (Some("commit"), Some("false")));
    assert!(r.header("content-type").unwrap().starts_with("text/x-diff"));
    let text = r.text();
    assert!(text.starts_with("diff --git"), "{text}");
    assert!(text.contains("+++ b/a.txt") && text.contains("+++ b/part.txt"), "{text}");
    assert!(!text.contains("b.txt"), "only A's change: {text}");
    let s = api.get(&format!("/runs/{run}/tasks/B/diff?stat=1")).json();
    assert_eq!(s["of"], "commit");
    assert_eq!(s["commits"], serde_json::json!([sha_b]));
    assert!(s["added"].as_u64().unwrap() >= 1, "{s}");
    // The run's diff: its own commits in order, not the user's later one.
    let r = api.get(&format!("/runs/{run}/diff"));
    assert_eq!(r.status, 200, "{}", r.text());
    let commits = r.header("harness-commits").unwrap().to_string();
    assert!(commits.starts_with(&format!("{sha_a},{sha_b}")), "{commits}");
    let text = r.text();
    assert!(text.contains("+++ b/a.txt") && text.contains("+++ b/b.txt"), "{text}");
    assert!(!text.contains("user: later work"), "the user's commit is not the run's: {text}");
    let s = api.get(&format!("/runs/{run}/diff?stat=1")).json();
    assert_eq!(s["of"], "run");
    assert!(s["files"].as_array().unwrap().iter().all(|f| f["path"] != "README"), "{s}");
    for bad in ["/tasks/A/diff?stat=yes", "/tasks/A/diff?stats=1", "/diff?x"] {
        let r = api.get(&format!("/runs/{run}{bad}"));
        assert_eq!(r.status, 400, "{bad}: {}", r.text());
    }
    assert_eq!(api.get(&format!("/runs/{run}/tasks/Z/diff")).status, 404);

    // Gate and review, on the latest attempt.
    let g = api.get(&format!("/runs/{run}/tasks/D/gate")).json();
    assert_eq!((g["state"].as_str(), g["rc"].as_i64()), (Some("failed"), Some(3)), "{g}");
    assert!(g["output_tail"].as_str().unwrap().contains("FAIL: 2 tests failed"), "{g}");
    let g = api.get(&format!("/runs/{run}/tasks/A/gate")).json();
    assert_eq!(g["state"], "none", "{g}");
    let rv = api.get(&format!("/runs/{run}/tasks/A/review")).json();
    assert_eq!((rv["state"].as_str(), rv["verdict"].as_str()), (Some("passed"), Some("APPROVE")), "{rv}");
    let rv = api.get(&format!("/runs/{run}/tasks/C/review")).json();
    assert_eq!(rv["state"], "failed", "{rv}");
    assert!(rv["verdict"].as_str().unwrap().starts_with("REJECT: tests are missing"), "{rv}");
    assert!(rv["reasoning"].as_str().unwrap().contains("Please add tests."), "the reviewer's whole message: {rv}");
    let rv = api.get(&format!("/runs/{run}/tasks/B/review")).json();
    assert_eq!((rv["review"].as_bool(), rv["state"].as_str()), (Some(false), Some("none")), "{rv}");

    // harness diff: the same, printed (not a terminal: no pager).
    let at = format!("127.0.0.1:{}", api.port);
    let (code, out, err) = cli(&b.home(), &["diff", "--api", &at, &run, "A"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("diff --git") && out.contains("+++ b/part.txt"), "{out}");
    let (code, out, err) = cli(&b.home(), &["diff", "--api", &at, "chg", "B", "--stat"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("-      -  bin.dat") && out.contains("b.txt"), "{out}");
    assert!(out.contains("2 files changed"), "{out}");
    let (code, out, err) = cli(&b.home(), &["diff", "--api", &at, &run]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("+++ b/a.txt") && out.contains("+++ b/b.txt") && !out.contains("user: later"), "{out}");
    let (code, _, err) = cli(&b.home(), &["diff", "--api", &at, &run, "nope"]);
    assert_ne!(code, 0);
    assert!(err.contains("has no task nope"), "{err}");
}

/// While a task works, its diff is its worktree against its base: untracked files that are not
/// ignored included, the worktree's own index untouched, and a change above 4 MiB cut with a
/// marker and a header saying so.
#[test]
fn a_working_tasks_diff_is_its_worktree_bounded() {
    let b = Bench::new();
    std::fs::write(b.repo().join(".gitignore"), "ignored.txt\n").unwrap();
    git(&b.repo(), &["add", ".gitignore"]);
    git(&b.repo(), &["-c", "user.name=u", "-c", "user.email=u@x", "commit", "-qm", "ignore"]);
    let plan = r#"{"v":"plan/v1","slug":"wip","tasks":[
        {"id":"W","wave":1,"adapter":"claude","prompt":"w [fake-write:wip.txt] [fake-write:ignored.txt]"}]}"#;
    let big = "head -c 5000000 /dev/zero | tr '\\0' 'x' | fold -w 100 > big.txt";
    let _sup = b.start_supervised_with(plan, "hang", &[], &[("HARNESS_FAKE_TOOL", big.to_string())]);
    b.wait_state("W", "leased", T);
    let wt = b.home().join("worktrees").join(b.run_id()).join("W");
    wait_for(T, || wt.join("wip.txt").exists().then_some(())).expect("the agent wrote");
    let api = ApiProc::start(&b.home(), &[]);
    let run = b.run_id();
    let index = std::fs::read(git_dir_index(&wt)).unwrap_or_default();
    let s = api.get(&format!("/runs/{run}/tasks/W/diff?stat=1")).json();
    assert_eq!(s["of"], "worktree", "{s}");
    let paths: Vec<&str> = s["files"].as_array().unwrap().iter().map(|f| f["path"].as_str().unwrap()).collect();
    assert!(paths.contains(&"wip.txt") && paths.contains(&"big.txt"), "{paths:?}");
    assert!(!paths.contains(&"ignored.txt"), "an ignored file is not the task's change: {paths:?}");
    let r = api.get(&format!("/runs/{run}/tasks/W/diff"));
    assert_eq!((r.status, r.header("harness-truncated")), (200, Some("true")), "{:?}", r.headers);
    assert!(r.body.len() <= 4 << 20, "{}", r.body.len());
    assert!(r.text().ends_with("# harness: the diff is cut at 4194304 bytes; ?stat=1 lists every path it changes\n"));
    assert_eq!(std::fs::read(git_dir_index(&wt)).unwrap_or_default(), index, "the worktree's index is untouched");
    assert!(api.get(&format!("/runs/{run}/tasks/W")).json()["commit"].is_null(), "no commit yet");
}

/// The index file of a worktree (its `.git` file names its git dir).
fn git_dir_index(wt: &std::path::Path) -> std::path::PathBuf {
    std::path::PathBuf::from(git(wt, &["rev-parse", "--absolute-git-dir"]).trim()).join("index")
}

/// Review comments go back to the agent as one steer: its message, then each comment quoted with
/// its file and line, delivered by resume like any steer, on the record like any steer.
#[test]
fn review_comments_reach_the_agent_as_one_steer() {
    let b = Bench::new();
    let plan = r#"{"v":"plan/v1","slug":"rev","tasks":[{"id":"A","wave":1,"adapter":"claude","prompt":"do A [fake-write:a.txt]"}]}"#;
    let mut sup = b.start_supervised(plan, "hang,success", &[]);
    wait_for(T, || (!b.records().is_empty()).then_some(())).expect("the first turn runs");
    let api = ApiProc::start(&b.home(), &[]);
    let run = b.run_id();
    let post = |body: &str| {
        http(
            api.port,
            "POST",
            &format!("/runs/{run}/tasks/A/steer"),
            &[("Content-Type", "application/json")],
            Some(body.as_bytes()),
        )
    };
    // Bad comments are a 400 naming the problem.
    for (body, says) in [
        (r#"{"comments":"fix it"}"#, "comments must be an array"),
        (r#"{"comments":[{"path":"a.txt","line":0,"body":"x"}]}"#, "line"),
        (r#"{"comments":[{"path":"a.txt","line":2}]}"#, "field body is required"),
        (r#"{"comments":[{"path":"a.txt","body":"x","severity":"high"}]}"#, "unknown field \\\"severity\\\""),
        (r#"{"comments":[{"path":"a\nb","body":"x"}]}"#, "one line"),
        (r#"{"comments":[]}"#, "msg is required"),
    ] {
        let r = post(body);
        assert_eq!(r.status, 400, "{body}: {}", r.text());
        assert!(r.text().contains(says), "{body}: {}", r.text());
    }
    let r = http(
        api.port,
        "POST",
        &format!("/runs/{run}/tasks/A/kill"),
        &[("Content-Type", "application/json")],
        Some(b"{}"),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    b.wait_state("A", "halted", T);
    let at = format!("127.0.0.1:{}", api.port);
    let (code, out, err) = cli(
        &b.home(),
        &["steer", "--api", &at, &run, "A", "--comment", "a.txt:3", "use <= here", "--comment", "README", "typo"],
    );
    assert_eq!(code, 0, "{out}{err}");
    b.wait_state("A", "committed", T);
    let expected =
        "Review comments on your change (address each):\n\n1. a.txt:3\n   > use <= here\n\n2. README\n   > typo";
    let recs = b.records();
    let argv: Vec<&str> = recs[1]["argv"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    assert_eq!(argv[argv.iter().position(|a| *a == "-p").unwrap() + 1], expected, "{argv:?}");
    let steers = b.controls("steer");
    assert_eq!(steers.last().unwrap()["outcome"], "applied", "{steers:?}");
    assert!(steers.iter().any(|s| s["outcome"] == "queued" && s["msg"] == expected), "{steers:?}");
    assert!(steers.iter().filter(|s| s["outcome"] == "refused").count() >= 5, "bad ones are on the record");
    sup.wait_exit(T);
}

/// `GET /runs` says where `/watch` continues from (`Harness-Watch-Cursor`), and `/watch?rows=1`
/// follows each run's records with its row, so a UI applies the feed to its list without refetching.
#[test]
fn the_run_list_and_the_watch_feed_join_with_no_gap_and_rows_follow_records() {
    let b = Bench::new();
    let runs = install_fixture_runs(&b.home());
    let (a, other) = (runs[0].1.clone(), runs[1].1.clone());
    let api = ApiProc::start(&b.home(), &[]);
    let r = api.get("/runs?limit=2");
    assert_eq!(r.status, 200);
    let cursor = r.header("harness-watch-cursor").expect("the list's watch cursor").to_string();
    let append = |run: &str, by: &str| {
        let rec = format!(r#"{{"kind":"run","event":"paused","by":"{by}"}}"#);
        let (code, _, err) = cli(&b.home(), &["journal", "append", run, &rec]);
        assert_eq!(code, 0, "{err}");
    };
    append(&a, "after-the-list");
    // From the list's cursor: exactly what was appended after the list, nothing before.
    let mut c = SseConn::open(api.port, "/watch", &[("Last-Event-ID", &cursor)]);
    c.stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let e = c.next_event().expect("the record appended after the list");
    let v: serde_json::Value = serde_json::from_str(&e.data).unwrap();
    assert_eq!((v["run"].as_str(), v["record"]["by"].as_str()), (Some(a.as_str()), Some("after-the-list")), "{v}");
    drop(c);

    // rows=1: live, a record of a run is followed by that run's row, as GET /runs has it.
    let mut c = SseConn::open(api.port, "/watch?since=now&rows=1", &[]);
    c.stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    first_id(&mut c);
    append(&other, "ui");
    let rec = c.next_event().expect("the record");
    assert_eq!(rec.event, None, "{rec:?}");
    let rec: serde_json::Value = serde_json::from_str(&rec.data).unwrap();
    let row = c.next_event().expect("its row");
    assert_eq!((row.event.as_deref(), row.id.as_deref()), (Some("row"), None), "{row:?}");
    let row: serde_json::Value = serde_json::from_str(&row.data).unwrap();
    assert_eq!(row["runId"].as_str(), Some(other.as_str()), "{row}");
    assert_eq!(row["journal"]["records"], rec["line"], "the row counts the record: {row}");
    assert_eq!(row["updated"], rec["record"]["ts"], "{row}");
    let listed = api.get("/runs").json();
    let same = listed.as_array().unwrap().iter().find(|r| r["runId"] == other.as_str()).unwrap().clone();
    assert_eq!(row, same, "the row is the list's row");
    drop(c);
    // A catch-up: a run's records, then its row.
    let mut c = SseConn::open(api.port, &format!("/watch?rows=1&run={a}"), &[]);
    c.stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut kinds = Vec::new();
    while let Some(e) = c.next_event() {
        kinds.push(e.event.unwrap_or_else(|| "record".into()));
        if kinds.last().map(String::as_str) == Some("row") {
            break;
        }
    }
    assert!(kinds.len() > 1 && kinds[..kinds.len() - 1].iter().all(|k| k == "record"), "{kinds:?}");
    assert_eq!(kinds.last().map(String::as_str), Some("row"));
    assert_eq!(api.get("/watch?rows=maybe").status, 400);
}

/// An event whose line has no timestamp of its own carries the time its line arrived (the
/// stamper's sidecar), not the time the API read it: equal in `/events` and `/feed`, fetch after
/// fetch, and before the task's turn ended.
#[test]
fn events_carry_the_time_their_line_arrived_live_and_in_replay() {
    let b = Bench::new();
    let plan = r#"{"v":"plan/v1","slug":"times","tasks":[{"id":"A","wave":1,"adapter":"claude","prompt":"a [fake-write:a.txt]"}]}"#;
    let out = b.harness("success").env("HARNESS_FAKE_PACE", "0.05").arg("run").arg(b.plan(plan)).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let run = b.run_id();
    let ended = b
        .journal()
        .into_iter()
        .find(|r| r["task"] == "A" && r["state"] == "implemented")
        .and_then(|r| r["ts"].as_str().map(str::to_string))
        .expect("A's turn ended");
    assert!(b.repo().join("runstate/times.logs/A.log.times").exists(), "the sidecar");
    std::thread::sleep(Duration::from_millis(1200));
    let api = ApiProc::start(&b.home(), &[]);
    let page = |api: &ApiProc| -> Vec<(String, String)> {
        let r = api.get(&format!("/runs/{run}/tasks/A/events?limit=5000"));
        assert_eq!(r.status, 200);
        r.text()
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .map(|e| (e["seq"].to_string(), e["ts"].as_str().unwrap().to_string()))
            .collect()
    };
    let first = page(&api);
    assert!(first.len() > 3, "{first:?}");
    for (seq, ts) in &first {
        assert!(ts.as_str() <= ended.as_str(), "event {seq} at {ts}, after the turn ended at {ended}");
    }
    let distinct: std::collections::BTreeSet<&String> = first.iter().map(|(_, t)| t).collect();
    assert!(distinct.len() > 2, "paced lines have their own times: {first:?}");
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(page(&api), first, "replay gives the same times");
    let mut feed = SseConn::open(api.port, &format!("/runs/{run}/tasks/A/feed"), &[]);
    let (fed, _) = until_end(&mut feed, T);
    let fed: Vec<(String, String)> = fed
        .iter()
        .map(|e| serde_json::from_str::<serde_json::Value>(&e.data).unwrap())
        .map(|e| (e["seq"].to_string(), e["ts"].as_str().unwrap().to_string()))
        .collect();
    assert_eq!(fed, first, "the stream says the same");
}

/// True times on the views: a run's started_at and finished_at, a task's attempts one by one, and
/// the run's journal paged.
#[test]
fn a_run_has_its_times_a_task_its_attempts_and_the_journal_pages() {
    let b = Bench::new();
    let plan = r#"{"v":"plan/v1","slug":"att","tasks":[{"id":"A","wave":1,"adapter":"claude","prompt":"a [fake-write:a.txt]"}]}"#;
    let mut sup = b.start_supervised(plan, "exit3,success", &[]);
    b.wait_state("A", "halted", T);
    let api = ApiProc::start(&b.home(), &[]);
    let run = b.run_id();
    let row = api.get("/runs").json()[0].clone();
    assert!(row["started_at"].is_string() && row["finished_at"].is_null(), "{row}");
    let r = http(
        api.port,
        "POST",
        &format!("/runs/{run}/tasks/A/retry"),
        &[("Content-Type", "application/json")],
        Some(b"{}"),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    b.wait_state("A", "committed", T);
    sup.wait_exit(T);
    let t = api.get(&format!("/runs/{run}/tasks/A")).json();
    let h = t["history"].as_array().unwrap();
    assert_eq!(h.len(), 2, "{t:#}");
    assert_eq!(
        (h[0]["n"].as_u64(), h[0]["state"].as_str(), h[0]["rc"].as_i64()),
        (Some(1), Some("halted"), Some(3)),
        "{h:?}"
    );
    assert!(h[0]["reason"].as_str().unwrap().contains("exit 3"), "{h:?}");
    assert_eq!((h[1]["n"].as_u64(), h[1]["state"].as_str()), (Some(2), Some("committed")), "{h:?}");
    for a in h {
        assert!(a["started_at"].as_str().unwrap() <= a["ended_at"].as_str().unwrap(), "{a}");
    }
    assert!(h[0]["ended_at"].as_str() <= h[1]["started_at"].as_str());
    let row = api.get("/runs").json()[0].clone();
    assert_eq!(row["status"], "finished");
    let (s, f) = (row["started_at"].as_str().unwrap(), row["finished_at"].as_str().unwrap());
    assert!(s <= h[0]["started_at"].as_str().unwrap() && f >= h[1]["ended_at"].as_str().unwrap(), "{row}");
    // The journal, two records a page, linked by Harness-Next-After.
    let all = b.journal();
    let (mut got, mut after) = (Vec::new(), "0".to_string());
    loop {
        let r = api.get(&format!("/runs/{run}/journal?after={after}&limit=2"));
        assert_eq!(r.status, 200, "{}", r.text());
        let lines: Vec<serde_json::Value> = r.text().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert!(lines.len() <= 2);
        got.extend(lines);
        after = r.header("harness-next-after").unwrap().to_string();
        if r.header("harness-more") != Some("true") {
            break;
        }
    }
    assert_eq!(got.len(), all.len());
    for (i, e) in got.iter().enumerate() {
        assert_eq!((e["line"].as_u64(), &e["record"]), (Some(i as u64 + 1), &all[i]), "{e}");
    }
    assert_eq!(api.get(&format!("/runs/{run}/journal?after=x")).status, 400);
    assert_eq!(api.get(&format!("/runs/{run}/journal?since=1")).status, 400);
    assert_eq!(api.get("/runs/0123456789ab--nope/journal").status, 404);
}

/// With isolation: shared, an agent that commits all its work itself leaves commits with no
/// trailer (kept as they are): the run's diff still holds them.
#[test]
fn the_runs_diff_holds_an_agents_own_commits_kept_as_they_are() {
    let b = Bench::new();
    let plan = r#"{"v":"plan/v1","slug":"own","isolation":"shared","max_parallel":1,"tasks":[
        {"id":"A","wave":1,"adapter":"claude","prompt":"a [fake-write:own.txt] [fake-commitall]"},
        {"id":"B","wave":2,"adapter":"claude","prompt":"b [fake-write:b.txt]"}]}"#;
    let out = b.harness("success").arg("run").arg(b.plan(plan)).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let run = b.run_id();
    let api = ApiProc::start(&b.home(), &[]);
    let r = api.get(&format!("/runs/{run}/diff"));
    assert_eq!(r.status, 200, "{}", r.text());
    let text = r.text();
    assert!(text.contains("+++ b/own.txt") && text.contains("agent: commit all"), "the agent's commit: {text}");
    assert!(text.contains("+++ b/b.txt"), "{text}");
    let commits = r.header("harness-commits").unwrap().to_string();
    let a = b.view()["tasks"]["A"]["sha"].as_str().unwrap().to_string();
    assert!(commits.split(',').next() == Some(a.as_str()), "oldest first: {commits}");
}

/// A batch run (`harness run` in the foreground, no control socket) is followed by `/feed` while
/// it works — its supervising process is known by its liveness pid — and ends when it is stopped.
#[test]
fn a_feed_follows_a_batch_run_until_it_ends() {
    let b = Bench::new();
    let plan =
        b.plan(r#"{"v":"plan/v1","slug":"batch","tasks":[{"id":"H","wave":1,"adapter":"claude","prompt":"h"}]}"#);
    let child = b
        .harness("hang")
        .arg("run")
        .arg(&plan)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut run_proc = Proc { child };
    wait_for(T, || b.try_run_id()).expect("registered");
    b.wait_state("H", "leased", T);
    let api = ApiProc::start(&b.home(), &[]);
    let run = b.run_id();
    let mut feed = SseConn::open(api.port, &format!("/runs/{run}/tasks/H/feed"), &[]);
    assert_eq!(feed.status, 200);
    let live = SseConn::open(api.port, &format!("/runs/{run}/tasks/H/stream"), &[]);
    assert_eq!(live.status, 200, "a working batch run's live stream is served");
    drop(live);
    feed.stream.set_read_timeout(Some(Duration::from_secs(6))).unwrap();
    let t = std::time::Instant::now();
    while t.elapsed() < Duration::from_secs(5) {
        match feed.next() {
            Some(e) => assert_ne!(e.event.as_deref(), Some("end"), "a working batch run's feed ended: {e:?}"),
            None => break,
        }
    }
    assert!(t.elapsed() >= Duration::from_secs(5), "the feed closed while the run works");
    // Ctrl-C: the run ends stopped, and so does the feed.
    // SAFETY: signalling our own child.
    unsafe { libc::kill(run_proc.child.id() as i32, libc::SIGINT) };
    run_proc.wait_exit(T);
    let mut feed = SseConn::open(api.port, &format!("/runs/{run}/tasks/H/feed"), &[]);
    let (_, end) = until_end(&mut feed, T);
    assert_eq!(end["reason"], "run_over", "{end}");
}

/// With isolation: shared a working task works in the run's checkout: its diff is that checkout
/// against the task's base (tracked edits and untracked files).
#[test]
fn a_working_shared_tasks_diff_is_the_checkout_against_its_base() {
    let b = Bench::new();
    let plan = r#"{"v":"plan/v1","slug":"shw","isolation":"shared","max_parallel":1,"tasks":[
        {"id":"X","wave":1,"adapter":"claude","prompt":"x [fake-write:shared-wip.txt] [fake-write:README]"}]}"#;
    let _sup = b.start_supervised(plan, "hang", &[]);
    b.wait_state("X", "leased", T);
    wait_for(T, || b.repo().join("shared-wip.txt").exists().then_some(())).expect("the agent wrote");
    let api = ApiProc::start(&b.home(), &[]);
    let run = b.run_id();
    let s = api.get(&format!("/runs/{run}/tasks/X/diff?stat=1")).json();
    assert_eq!(s["of"], "worktree", "{s}");
    let paths: Vec<&str> = s["files"].as_array().unwrap().iter().map(|f| f["path"].as_str().unwrap()).collect();
    assert!(paths.contains(&"shared-wip.txt") && paths.contains(&"README"), "{paths:?}");
    assert!(!paths.iter().any(|p| p.starts_with("runstate")), "harness's own files are not the task's: {paths:?}");
}
