//! The Overview at scale: `GET /runs` paged (exact while runs are added), filtered, answered from the
//! summaries beside the pointers (journal wins), through the real binary and real HTTP on loopback.

use crate::common::*;
use serde_json::Value;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A run registered by hand, as `harness run` leaves one: repo, runstate, plan copy, journal, pointer.
struct HandRun {
    pointer: harness::state::registry::Pointer,
}

struct Spec<'a> {
    slug: &'a str,
    project: &'a str,
    branch: &'a str,
    plane: harness::state::registry::Plane,
    /// The run events after `started` (`None`: not even started — pending).
    events: Option<&'a [&'a str]>,
    /// The last record's time.
    ts: String,
}

impl Spec<'_> {
    fn new(slug: &str, ts: String) -> Spec<'_> {
        Spec {
            slug,
            project: "p",
            branch: "main",
            plane: harness::state::registry::Plane::Standalone,
            events: Some(&[]),
            ts,
        }
    }
}

fn ts(secs_ago: u64) -> String {
    let t = std::time::SystemTime::now() - Duration::from_secs(secs_ago);
    humantime::format_rfc3339_millis(t).to_string()
}

fn record(ts: &str, event: &str) -> String {
    format!("{{\"v\":\"runstate/v1\",\"ts\":\"{ts}\",\"kind\":\"run\",\"event\":\"{event}\",\"by\":\"test\"}}\n")
}

impl HandRun {
    fn make(home: &Path, root: &Path, s: &Spec) -> HandRun {
        let repo = root.join(format!("repos/{}-{}", s.project, s.slug));
        let rs = repo.join("runstate");
        std::fs::create_dir_all(&rs).unwrap();
        let slug = harness::ids::Slug::parse(s.slug).unwrap();
        let pointer = harness::state::registry::Pointer {
            v: harness::state::registry::VERSION.into(),
            run_id: harness::ids::RunId::derive(&repo, &repo, &slug),
            slug,
            repo_root: repo.clone(),
            project: s.project.into(),
            repo: format!("{}-{}", s.project, s.slug),
            branch: Some(s.branch.into()),
            worktree: repo.clone(),
            runstate_dir: rs.clone(),
            plane: s.plane,
            created: s.ts.clone(),
            base_slug: None,
        };
        let plan = serde_json::json!({"v":"plan/v1","slug":s.slug,"tasks":[{"id":"T1","wave":1,"adapter":"claude","prompt":"p"}]});
        std::fs::write(rs.join(format!("{}.plan.json", s.slug)), plan.to_string()).unwrap();
        let mut j = String::new();
        if let Some(events) = s.events {
            j.push_str(&record(&s.ts, "started"));
            for e in events {
                j.push_str(&record(&s.ts, e));
            }
        }
        std::fs::write(pointer.journal_path(), j).unwrap();
        harness::state::registry::write(&harness::os::home::Home::at(home), &pointer).unwrap();
        HandRun { pointer }
    }

    fn id(&self) -> String {
        self.pointer.run_id.to_string()
    }

    fn append(&self, event: &str) {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new().append(true).open(self.pointer.journal_path()).unwrap();
        f.write_all(record(&harness::state::journal::now_rfc3339(), event).as_bytes()).unwrap();
    }
}

struct Setup {
    _dir: tempfile::TempDir,
    home: PathBuf,
    root: PathBuf,
}

fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    harness::os::home::Home::at(&home).ensure().unwrap();
    let root = dir.path().to_path_buf();
    Setup { _dir: dir, home, root }
}

fn ids(v: &Value) -> Vec<String> {
    v.as_array().unwrap().iter().map(|r| r["runId"].as_str().unwrap().to_string()).collect()
}

#[test]
fn pages_are_exact_while_runs_are_added() {
    let s = setup();
    // 230 runs, the newest activity first: run i was last active i seconds ago.
    let runs: Vec<HandRun> =
        (0..230).map(|i| HandRun::make(&s.home, &s.root, &Spec::new(&format!("r{i:03}"), ts(1000 + i)))).collect();
    let api = ApiProc::start(&s.home, &[]);

    let first = api.get("/runs");
    assert_eq!(first.status, 200, "{}", first.text());
    assert_eq!(first.json().as_array().unwrap().len(), 100, "without limit: the first page of 100");
    assert_eq!(first.header("harness-more"), Some("true"));
    assert_eq!(first.header("harness-total"), Some("230"));
    assert_eq!(ids(&first.json()), runs[..100].iter().map(HandRun::id).collect::<Vec<_>>(), "newest activity first");

    // Page by 37 while new runs keep appearing (each newer than every page's cursor).
    let mut seen = Vec::new();
    let mut after: Option<String> = None;
    let mut added = 0;
    loop {
        let path = match &after {
            Some(a) => format!("/runs?limit=37&after={a}"),
            None => "/runs?limit=37".into(),
        };
        let r = api.get(&path);
        assert_eq!(r.status, 200, "{}", r.text());
        seen.extend(ids(&r.json()));
        for _ in 0..3 {
            HandRun::make(&s.home, &s.root, &Spec::new(&format!("new{added:03}"), ts(0)));
            added += 1;
        }
        if r.header("harness-more") != Some("true") {
            assert!(r.json().as_array().unwrap().len() <= 37);
            break;
        }
        after = Some(r.header("harness-next-after").expect("a page with more has a cursor").to_string());
    }
    let expected: Vec<String> = runs.iter().map(HandRun::id).collect();
    assert_eq!(seen, expected, "every run exactly once, in order, while {added} runs were added");
    let unique: HashSet<&String> = seen.iter().collect();
    assert_eq!(unique.len(), seen.len());

    // A new scan sees the added runs first.
    let again = api.get("/runs?limit=1000");
    assert_eq!(again.json().as_array().unwrap().len(), 230 + added);
    assert!(ids(&again.json())[..added].iter().all(|id| id.contains("--new")));

    // Activity moves a run to the head (journal wins, without waiting).
    runs[200].append("paused");
    let head = api.get("/runs?limit=1");
    assert_eq!(ids(&head.json()), vec![runs[200].id()]);
    assert_eq!(head.json()[0]["status"], "paused");
}

#[test]
fn each_filter_selects_and_bad_values_name_the_parameter() {
    let s = setup();
    let plain = |slug: &'static str, ago: u64| Spec::new(slug, ts(ago));
    let running = HandRun::make(&s.home, &s.root, &Spec { project: "alpha", ..plain("running-one", 10) });
    let paused = HandRun::make(
        &s.home,
        &s.root,
        &Spec { project: "alpha", events: Some(&["paused"]), ..plain("paused-one", 20) },
    );
    let finished = HandRun::make(
        &s.home,
        &s.root,
        &Spec { branch: "feature", events: Some(&["finished"]), ..plain("finished-one", 30) },
    );
    let failed = HandRun::make(&s.home, &s.root, &Spec { events: Some(&["failed"]), ..plain("failed-one", 7200) });
    let pending = HandRun::make(&s.home, &s.root, &Spec { events: None, ..plain("pending-one", 40) });
    let dynwf = HandRun::make(
        &s.home,
        &s.root,
        &Spec { plane: harness::state::registry::Plane::Dynwf, project: "beta", ..plain("dyn-one", 50) },
    );
    // A live one: its liveness names a supervisor that is alive (this test process).
    let live = HandRun::make(&s.home, &s.root, &Spec { project: "beta", ..plain("live-one", 60) });
    harness::state::liveness::update(&live.pointer.liveness_path(), &live.pointer.run_id, |l| {
        l.supervisor_pid = Some(std::process::id() as i32)
    })
    .unwrap();
    let api = ApiProc::start(&s.home, &[]);
    let set = |q: &str| -> HashSet<String> {
        let r = api.get(&format!("/runs?{q}"));
        assert_eq!(r.status, 200, "{q}: {}", r.text());
        let got: HashSet<String> = ids(&r.json()).into_iter().collect();
        assert_eq!(r.header("harness-total"), Some(got.len().to_string().as_str()), "{q}");
        got
    };
    let of = |runs: &[&HandRun]| -> HashSet<String> { runs.iter().map(|r| r.id()).collect() };
    assert_eq!(set("status=running"), of(&[&running, &dynwf, &live]));
    assert_eq!(set("status=paused&status=finished"), of(&[&paused, &finished]));
    assert_eq!(set("status=failed,pending"), of(&[&failed, &pending]));
    assert_eq!(set("live=true"), of(&[&live]));
    assert_eq!(set("live=false").len(), 6);
    assert_eq!(set("project=alpha"), of(&[&running, &paused]));
    assert_eq!(set("project=beta&status=running"), of(&[&dynwf, &live]));
    assert_eq!(set(&format!("repo={}", finished.pointer.repo)), of(&[&finished]));
    assert_eq!(set("branch=feature"), of(&[&finished]));
    assert_eq!(set("plane=dynwf"), of(&[&dynwf]));
    assert_eq!(set("q=ONE").len(), 7, "q is a case-insensitive substring");
    assert_eq!(set("q=paused"), of(&[&paused]));
    assert_eq!(set(&format!("q={}", &failed.id()[..12])), of(&[&failed]), "q matches the runId");
    assert_eq!(set("since=1h").len(), 6, "all but the run last active 2 hours ago");
    assert_eq!(set(&format!("since={}", ts(35))), of(&[&running, &paused, &finished]));
    assert_eq!(set("project=nobody"), HashSet::new());

    for (q, name) in [
        ("limit=0", "limit"),
        ("limit=ten", "limit"),
        ("limit=-1", "limit"),
        ("status=done", "status"),
        ("live=yes", "live"),
        ("plane=cloud", "plane"),
        ("since=yesterday", "since"),
        ("after=garbage", "after"),
        ("after=12.not-a-run", "after"),
        ("project=", "project"),
        ("limit=5&limit=6", "limit"),
        ("colour=red", "colour"),
    ] {
        let r = api.get(&format!("/runs?{q}"));
        assert_eq!(r.status, 400, "{q}: {}", r.text());
        let detail = r.json()["detail"].as_str().unwrap().to_string();
        assert!(detail.contains(&format!("query parameter {name}")), "{q}: {detail}");
    }
    let big = api.get("/runs?limit=99999999999999999999999");
    assert_eq!(big.status, 200);
    assert_eq!(big.header("harness-limit"), Some("1000"), "above the largest page: served as the largest");

    // The CLI pages through and filters alike.
    let (code, out, err) = cli(
        &s.home,
        &["runs", "--api", &format!("127.0.0.1:{}", api.port), "--status", "running", "--project", "beta", "--json"],
    );
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(ids(&v).into_iter().collect::<HashSet<_>>(), of(&[&dynwf, &live]));
    let (code, out, err) = cli(&s.home, &["runs", "--api", &format!("127.0.0.1:{}", api.port), "--limit", "2"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().count(), 3, "a header and 2 rows: {out}");
    assert!(out.lines().nth(1).unwrap().starts_with(&running.id()), "{out}");
    let (code, _, err) = cli(&s.home, &["runs", "--api", &format!("127.0.0.1:{}", api.port), "--status", "done"]);
    assert_ne!(code, 0);
    assert!(err.contains("query parameter status"), "{err}");
}

#[test]
fn the_cli_pages_through_every_run() {
    let s = setup();
    for i in 0..1203 {
        HandRun::make(&s.home, &s.root, &Spec::new(&format!("r{i:04}"), ts(100 + i)));
    }
    let api = ApiProc::start(&s.home, &[]);
    let (code, out, err) = cli(&s.home, &["runs", "--api", &format!("127.0.0.1:{}", api.port), "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let got = ids(&v);
    assert_eq!(got.len(), 1203, "more than one page of 1,000");
    assert_eq!(got.iter().collect::<HashSet<_>>().len(), 1203);
}

/// The row `GET /runs` gives for `run`.
fn row(api: &ApiProc, run: &HandRun) -> Value {
    let r = api.get(&format!("/runs?q={}", run.id()));
    assert_eq!(r.status, 200, "{}", r.text());
    r.json().as_array().unwrap().first().cloned().unwrap_or(Value::Null)
}

#[test]
fn summaries_are_rebuilt_when_deleted_corrupted_or_older_than_the_journal() {
    let s = setup();
    let run = HandRun::make(&s.home, &s.root, &Spec::new("cached", ts(5)));
    let other = HandRun::make(&s.home, &s.root, &Spec::new("other", ts(6)));
    let summary = s.home.join(format!("runs/{}.summary", run.id()));
    {
        let api = ApiProc::start(&s.home, &[]);
        assert_eq!(row(&api, &run)["status"], "running");
    }
    let written = std::fs::read(&summary).expect("the API writes back the summary it built");
    let v: Value = serde_json::from_slice(&written).unwrap();
    assert_eq!(v["head"]["v"], "runsummary/v1");

    // Older than its journal: the journal changed while no API ran.
    run.append("paused");
    {
        let api = ApiProc::start(&s.home, &[]);
        let r = row(&api, &run);
        assert_eq!(r["status"], "paused", "journal wins over a stale summary");
        assert_eq!(r["paused"], true);
    }
    // A summary that lies but whose fingerprints are stale: rebuilt, the lie never shown.
    let mut lie: Value = serde_json::from_slice(&std::fs::read(&summary).unwrap()).unwrap();
    let row_text = lie["row"].to_string().replace("\"paused\"", "\"finished\"");
    lie["row"] = serde_json::from_str(&row_text).unwrap();
    lie["head"]["fps"]["journal"]["len"] = serde_json::json!(1);
    std::fs::write(&summary, lie.to_string()).unwrap();
    {
        let api = ApiProc::start(&s.home, &[]);
        assert_eq!(row(&api, &run)["status"], "paused");
    }
    // The API's snapshot of every summary, damaged: a garbled row is rebuilt, a garbled file ignored.
    let snapshot = s.home.join("runs/.overview.jsonl");
    let text = std::fs::read_to_string(&snapshot).expect("the API keeps a snapshot of the summaries");
    assert_eq!(text.lines().count(), 2, "{text}");
    std::fs::write(&snapshot, text.replace("\"counts\":{", "\"counts\":{{{")).unwrap();
    {
        let api = ApiProc::start(&s.home, &[]);
        let all = api.get("/runs");
        assert_eq!(all.status, 200);
        let rows = all.json();
        assert_eq!(rows.as_array().unwrap().len(), 2, "{rows}");
        assert_eq!(row(&api, &run)["status"], "paused");
    }
    std::fs::write(&snapshot, b"\x00garbage\tnot json\n").unwrap();
    {
        let api = ApiProc::start(&s.home, &[]);
        assert_eq!(row(&api, &run)["status"], "paused");
        assert_eq!(row(&api, &other)["status"], "running");
    }
    // Corrupted, then deleted.
    std::fs::write(&summary, b"{\"v\":\"runsummary/v1\",\"fps\":[garbage").unwrap();
    {
        let api = ApiProc::start(&s.home, &[]);
        assert_eq!(row(&api, &run)["status"], "paused");
        assert_eq!(row(&api, &other)["status"], "running");
    }
    std::fs::remove_file(&summary).unwrap();
    run.append("resumed");
    {
        let api = ApiProc::start(&s.home, &[]);
        assert_eq!(row(&api, &run)["status"], "running");
        assert_eq!(api.get("/runs").json().as_array().unwrap().len(), 2);
    }
    assert!(summary.exists(), "rebuilt and written back");

    // While the API runs: each append is seen by the next request, with no wait.
    let api = ApiProc::start(&s.home, &[]);
    for i in 0..40 {
        let (event, status) = if i % 2 == 0 { ("paused", "paused") } else { ("resumed", "running") };
        run.append(event);
        assert_eq!(row(&api, &run)["status"], status, "append {i}");
    }
    // A pointer removed while the API runs leaves the list; one added joins it.
    std::fs::remove_file(s.home.join(format!("runs/{}.json", other.id()))).unwrap();
    assert_eq!(ids(&api.get("/runs").json()), vec![run.id()]);
    let third = HandRun::make(&s.home, &s.root, &Spec::new("third", ts(0)));
    assert_eq!(ids(&api.get("/runs").json()), vec![third.id(), run.id()]);
}

/// Every path under `dir` with its size and mtime: what a dry run must leave exactly as it was.
fn tree(dir: &Path) -> Vec<(PathBuf, u64, std::time::SystemTime)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let m = e.metadata().unwrap();
            if m.is_dir() {
                stack.push(e.path());
            }
            out.push((e.path(), m.len(), m.modified().unwrap()));
        }
    }
    out.sort();
    out
}

const DAY: u64 = 86_400;

/// A task log with one priced claude turn.
fn with_log(run: &HandRun) -> PathBuf {
    let logs = run.pointer.logs_dir();
    std::fs::create_dir_all(&logs).unwrap();
    let log = logs.join("T1.log");
    std::fs::write(
        &log,
        "{\"type\":\"result\",\"subtype\":\"success\",\"is_error\":false,\"result\":\"ok\",\"session_id\":\"s1\",\"total_cost_usd\":0.25,\"usage\":{\"input_tokens\":100,\"output_tokens\":20}}\n",
    )
    .unwrap();
    log
}

#[test]
fn prune_removes_old_finished_and_failed_runs_and_a_dry_run_touches_nothing() {
    let s = setup();
    let old = |slug: &'static str, event: &'static [&'static str]| Spec {
        events: Some(event),
        ..Spec::new(slug, ts(40 * DAY))
    };
    let finished = HandRun::make(&s.home, &s.root, &old("old-finished", &["finished"]));
    let failed = HandRun::make(&s.home, &s.root, &old("old-failed", &["failed"]));
    let running = HandRun::make(&s.home, &s.root, &old("old-running", &[]));
    let paused = HandRun::make(&s.home, &s.root, &old("old-paused", &["paused"]));
    let recent = HandRun::make(&s.home, &s.root, &Spec { events: Some(&["finished"]), ..Spec::new("recent", ts(DAY)) });
    for r in [&finished, &failed, &running, &paused, &recent] {
        with_log(r);
    }
    {
        let api = ApiProc::start(&s.home, &[]);
        assert_eq!(api.get("/runs").json().as_array().unwrap().len(), 5);
    }
    let before = (tree(&s.home), tree(&s.root.join("repos")));
    let (code, out, err) = cli(&s.home, &["prune", "--finished-before", "30d", "--dry-run"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!((tree(&s.home), tree(&s.root.join("repos"))), before, "a dry run touches nothing");
    assert!(out.contains(&format!("would prune {}", finished.id())), "{out}");
    assert!(out.contains(&format!("would prune {}", failed.id())), "{out}");
    assert!(out.contains("would prune 2 runs"), "{out}");

    let (code, out, err) = cli(&s.home, &["prune", "--finished-before", "30d", "--json"]);
    assert_eq!(code, 0, "{err}");
    let report: Value = serde_json::from_str(&out).unwrap();
    let pruned: HashSet<&str> =
        report["pruned"].as_array().unwrap().iter().map(|p| p["run_id"].as_str().unwrap()).collect();
    assert_eq!(pruned, [finished.id(), failed.id()].iter().map(String::as_str).collect());
    assert!(report["bytes"].as_u64().unwrap() > 0, "{report}");
    for gone in [&finished, &failed] {
        assert!(!gone.pointer.journal_path().exists());
        assert!(!gone.pointer.plan_path().exists());
        assert!(!gone.pointer.logs_dir().exists());
        assert!(!s.home.join(format!("runs/{}.json", gone.id())).exists());
        assert!(!s.home.join(format!("runs/{}.summary", gone.id())).exists());
    }
    for kept in [&running, &paused, &recent] {
        assert!(kept.pointer.journal_path().exists() && kept.pointer.logs_dir().join("T1.log").exists());
    }
    let api = ApiProc::start(&s.home, &[]);
    assert_eq!(ids(&api.get("/runs").json()).len(), 3);
    let r = api.get(&format!("/runs/{}", finished.id()));
    assert_eq!(r.status, 404);
    assert!(r.json()["detail"].as_str().unwrap().contains("pruned"), "{}", r.text());
    let (code, out, _) = cli(&s.home, &["prune", "--finished-before", "30d"]);
    assert_eq!(code, 0);
    assert!(out.contains("pruned 0 runs"), "nothing left to prune: {out}");
    let (code, _, err) = cli(&s.home, &["prune", "--finished-before", "soon"]);
    assert_ne!(code, 0);
    assert!(err.contains("--finished-before"), "{err}");
    let (code, _, err) = cli(&s.home, &["prune"]);
    assert_ne!(code, 0);
    assert!(err.contains("retention.json"), "{err}");
}

#[test]
fn prune_logs_only_keeps_journal_plan_and_cost() {
    let s = setup();
    let run = HandRun::make(&s.home, &s.root, &Spec { events: Some(&["finished"]), ..Spec::new("logs", ts(40 * DAY)) });
    let log = with_log(&run);
    let api = ApiProc::start(&s.home, &[]);
    let before = api.get(&format!("/runs/{}", run.id())).json();
    assert_eq!(before["usage"]["cost_usd"], 0.25, "{before:#}");
    std::fs::write(s.home.join("retention.json"), r#"{"v":"retention/v1","finished_before":"30d","logs_only":true}"#)
        .unwrap();
    let (code, out, err) = cli(&s.home, &["prune"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(&format!("pruned logs of {}", run.id())), "{out}");
    assert!(!log.exists());
    assert!(run.pointer.journal_path().exists() && run.pointer.plan_path().exists());
    let after = api.get(&format!("/runs/{}", run.id())).json();
    assert_eq!(after["usage"], before["usage"], "the cost outlives the logs");
    assert_eq!(
        api.get(&format!("/runs/{}/tasks/T1", run.id())).json()["usage"],
        before["plan"]["waves"][0]["tasks"][0]["usage"]
    );
    assert_eq!(after["status"], "finished");
    let (_, out, _) = cli(&s.home, &["prune"]);
    assert!(out.contains("pruned 0 runs"), "a second pass finds no logs: {out}");
    assert_eq!(api.get(&format!("/runs/{}", run.id())).json()["usage"], before["usage"], "and keeps the kept usage");
    std::fs::write(s.home.join("retention.json"), r#"{"v":"retention/v1","finished_before":"a month"}"#).unwrap();
    let (code, _, err) = cli(&s.home, &["prune"]);
    assert_ne!(code, 0);
    assert!(err.contains("finished_before"), "{err}");
}

#[test]
fn prune_never_touches_a_live_run() {
    let b = Bench::new();
    let plan = serde_json::json!({"v":"plan/v1","slug":"live","tasks":[
        {"id":"H","wave":1,"adapter":"claude","prompt":"hang [fake-claude:hang]"}]});
    let _sup = b.start_supervised(&plan.to_string(), "success", &[]);
    b.wait_state("H", "leased", Duration::from_secs(30));
    let run = b.run_id();
    let root = tempfile::tempdir().unwrap();
    let old =
        HandRun::make(&b.home(), root.path(), &Spec { events: Some(&["finished"]), ..Spec::new("old", ts(40 * DAY)) });
    // An old, finished run whose supervisor lock is held (as by a supervisor starting on it).
    let held =
        HandRun::make(&b.home(), root.path(), &Spec { events: Some(&["finished"]), ..Spec::new("held", ts(40 * DAY)) });
    let lock = std::fs::File::create(held.pointer.runstate_dir.join("held.supervisor.lock")).unwrap();
    let _flock = harness::os::flock::Flock::try_exclusive(&lock).unwrap().expect("free");
    let pointer = b.home().join(format!("runs/{run}.json"));
    let before = std::fs::read(&pointer).unwrap();
    let live_journal = b.repo().join("runstate/live.jsonl");
    let state = || {
        let (code, out, err) = cli(&b.home(), &["journal", "show", &run]);
        assert_eq!(code, 0, "{err}");
        serde_json::from_str::<Value>(&out).unwrap()["tasks"]["H"]["state"].as_str().map(str::to_string)
    };
    // The live run's files, not the moment's atomic-write temporaries (`.<name>.<pid>.<n>.tmp`, renamed
    // over their file a moment later by the supervisor, not by prune).
    let live_files: Vec<_> = tree(&b.repo().join("runstate"))
        .into_iter()
        .filter(|(p, _, _)| {
            let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            !(name.starts_with('.') && name.ends_with(".tmp"))
        })
        .collect();
    assert!(live_files.len() >= 3, "{live_files:?}");
    // Every finished run, however recent: the live one is not over, so it is never selected.
    let (code, out, err) = cli(&b.home(), &["prune", "--finished-before", "1s"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(&format!("pruned {}", old.id())), "{out}");
    assert!(out.contains(&format!("kept {}: a supervisor holds its lock", held.id())), "{out}");
    assert!(!out.contains(&run), "{out}");
    assert!(held.pointer.journal_path().exists());
    assert_eq!(std::fs::read(&pointer).unwrap(), before, "the live run's pointer is untouched");
    assert!(live_journal.exists() && b.repo().join("runstate/live.plan.json").exists());
    for (path, _, _) in &live_files {
        assert!(path.exists(), "the live run's {} stays", path.display());
    }
    assert_eq!(state().as_deref(), Some("leased"), "the turn runs on");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(state().as_deref(), Some("leased"));
}
