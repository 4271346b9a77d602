//! `GET /watch`: every run's journal records as one SSE stream. Across an API restart while three
//! runs move, a client that reconnects with its last id gets exactly each journal's lines — no gap,
//! no duplicate — with new runs appearing on their own; `?since=now` starts at the present; a bad
//! cursor is a 400 that says why.

use crate::common::*;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(60);

fn plan(slug: &str) -> String {
    let tasks: Vec<Value> = (1..=4)
        .map(|w| json!({"id": format!("T{w}"), "wave": w, "adapter": "claude", "prompt": format!("step {w}")}))
        .collect();
    json!({"v":"plan/v1","slug":slug,"tasks":tasks}).to_string()
}

/// Reads events until `done` says so or nothing comes for `quiet`; returns them and the last id.
fn read(c: &mut SseConn, got: &mut Vec<Value>, last: &mut Option<String>, until: Instant) {
    c.stream.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
    while Instant::now() < until {
        match c.next_event() {
            Some(e) => {
                got.push(serde_json::from_str(&e.data).unwrap());
                *last = e.id;
            }
            None => break,
        }
    }
}

#[test]
fn watch_is_exact_across_an_api_restart_while_three_runs_move() {
    let b = Bench::new();
    let api = ApiProc::start(&b.home(), &[]);
    let mut c = SseConn::open(api.port, "/watch", &[]);
    assert_eq!(c.status, 200);
    let pace = [("HARNESS_FAKE_PACE", "0.05")];
    let mut sups = Vec::new();
    for s in ["wa", "wb", "wc"] {
        let p = b.dir.path().join(format!("{s}.plan.json"));
        std::fs::write(&p, plan(s)).unwrap();
        // Each run in a repository of its own (runs in one checkout would integrate onto one branch).
        let repo = b.dir.path().join(format!("repo-{s}"));
        git_repo(&repo);
        let child = b
            .harness("success")
            .current_dir(&repo)
            .envs(pace.iter().map(|(k, v)| (k, v)))
            .arg("run")
            .arg(&p)
            .args(["--supervised", "--foreground", "--kill-grace", "1s"])
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(b.dir.path().join(format!("{s}.log"))).unwrap())
            .spawn()
            .unwrap();
        sups.push(Proc { child });
    }
    let (mut got, mut last) = (Vec::new(), None);
    read(&mut c, &mut got, &mut last, Instant::now() + Duration::from_millis(1500));
    assert!(!got.is_empty(), "events before the restart");
    let before = got.len();
    assert!(!got.iter().any(|e| e["record"]["event"] == "finished"), "the runs still move at the restart");
    // The API goes away mid-run and comes back on another port; the client resumes with its id.
    drop(c);
    drop(api);
    let api = ApiProc::start(&b.home(), &[]);
    let id = last.clone().expect("an id");
    let mut c = SseConn::open(api.port, "/watch", &[("Last-Event-ID", &id)]);
    assert_eq!(c.status, 200);
    let runs = |b: &Bench| -> Vec<(String, std::path::PathBuf)> {
        let mut v: Vec<(String, std::path::PathBuf)> = std::fs::read_dir(b.home().join("runs"))
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            // Pointers only: the registry also holds each run's summary (`<runId>.summary`).
            .filter(|n| !n.starts_with('.') && n.ends_with(".json"))
            .map(|n| n.trim_end_matches(".json").to_string())
            .map(|id| {
                let slug = id.split("--").nth(1).unwrap().to_string();
                (id, b.dir.path().join(format!("repo-{slug}/runstate/{slug}.jsonl")))
            })
            .collect();
        v.sort();
        v
    };
    let deadline = Instant::now() + T;
    loop {
        read(&mut c, &mut got, &mut last, Instant::now() + Duration::from_secs(1));
        let finished = |run: &str| got.iter().any(|e| e["run"] == run && e["record"]["event"] == "finished");
        if runs(&b).iter().all(|(r, _)| finished(r)) || Instant::now() > deadline {
            break;
        }
    }
    assert!(got.len() > before, "events after the restart");
    for (mut s, slug) in sups.into_iter().zip(["wa", "wb", "wc"]) {
        let log = std::fs::read_to_string(b.dir.path().join(format!("{slug}.log"))).unwrap_or_default();
        if wait_for(Duration::from_secs(5), || s.child.try_wait().unwrap()).is_none() {
            panic!("{slug} still running: {log}\n{:#}", b.view());
        }
        let code = s.wait_exit(T);
        let log = std::fs::read_to_string(b.dir.path().join(format!("{slug}.log"))).unwrap_or_default();
        assert_eq!(code, 0, "{slug}: {log}");
    }
    // Exact against each journal: every line once, in order, with its record.
    let by_run: BTreeMap<String, Vec<&Value>> = got.iter().fold(BTreeMap::new(), |mut m, e| {
        m.entry(e["run"].as_str().unwrap().to_string()).or_insert_with(Vec::new).push(e);
        m
    });
    let all = runs(&b);
    assert_eq!(by_run.len(), 3, "three runs watched: {:?} vs {:?}", by_run.keys().collect::<Vec<_>>(), all);
    for (run, path) in &all {
        let journal = json_lines(path);
        let events = &by_run[run];
        let lines: Vec<u64> = events.iter().map(|e| e["line"].as_u64().unwrap()).collect();
        assert_eq!(lines, (1..=journal.len() as u64).collect::<Vec<_>>(), "{run}: every line once, in order");
        for (e, rec) in events.iter().zip(&journal) {
            assert_eq!(&e["record"], rec, "{run} line {}", e["line"]);
            assert_eq!(e["v"], "watch/v1");
        }
    }
    // since=now: only what comes after; a cursor that is not one is a 400 naming it.
    let mut now = SseConn::open(api.port, "/watch?since=now", &[]);
    assert_eq!(now.status, 200);
    let (mut none, mut l) = (Vec::new(), None);
    read(&mut now, &mut none, &mut l, Instant::now() + Duration::from_millis(600));
    assert!(none.is_empty(), "nothing moved: {none:?}");
    let (code, _, err) =
        cli(&b.home(), &["journal", "append", &all[0].0, r#"{"kind":"run","event":"paused","by":"tester"}"#]);
    assert_eq!(code, 0, "{err}");
    read(&mut now, &mut none, &mut l, Instant::now() + Duration::from_secs(2));
    assert_eq!(none.len(), 1, "{none:?}");
    assert_eq!(none[0]["record"]["by"], "tester");
    let bad = api.get("/watch?lastEventId=nope");
    assert_eq!(bad.status, 400);
    assert!(bad.json()["detail"].as_str().unwrap().contains("is not a /watch cursor"), "{}", bad.text());
    // A cursor whose checkpoint is gone (the directory's cap, the age limit): a full catch-up,
    // said first; never a wrong one.
    let mut gone = SseConn::open(api.port, "/watch?lastEventId=w1.0123456789abcdef.", &[]);
    assert_eq!(gone.status, 200);
    let (mut again, mut l) = (Vec::new(), None);
    read(&mut gone, &mut again, &mut l, Instant::now() + Duration::from_secs(2));
    let total: usize = all.iter().map(|(_, path)| json_lines(path).len()).sum();
    assert_eq!(again.len(), total, "every record of every run again");
    let bad = api.get("/watch?lastEventId=w2.0123456789abcdef.x");
    assert_eq!(bad.status, 400, "{}", bad.text());
}

#[test]
fn watchers_end_when_the_api_is_told_to_stop() {
    use std::io::Read;
    let b = Bench::new();
    let mut api = ApiProc::start(&b.home(), &[]);
    let mut watchers: Vec<SseConn> = (0..3).map(|_| SseConn::open(api.port, "/watch?since=now", &[])).collect();
    for w in &watchers {
        assert_eq!(w.status, 200);
    }
    let asked = Instant::now();
    // SAFETY: the pid is this test's child.
    unsafe { libc::kill(api.proc.child.id() as i32, libc::SIGTERM) };
    // Each stream ends (EOF, not a read timeout) before the API's shutdown grace (5 s) runs out:
    // an open /watch must not hold the API up.
    for w in &mut watchers {
        w.stream.set_read_timeout(Some(Duration::from_secs(4))).unwrap();
        let mut rest = Vec::new();
        let r = w.stream.read_to_end(&mut rest);
        assert!(r.is_ok(), "the stream did not end within 4 s of SIGTERM: {r:?}");
    }
    assert_eq!(api.proc.wait_exit(Duration::from_secs(10)), 0);
    assert!(asked.elapsed() < Duration::from_secs(4), "the API took {:?} to stop", asked.elapsed());
}

#[test]
fn a_journal_replaced_under_the_watch_is_followed_again_from_its_first_line() {
    let b = Bench::new();
    let p =
        b.plan(r#"{"v":"plan/v1","slug":"replaced","tasks":[{"id":"T","wave":1,"adapter":"claude","prompt":"t"}]}"#);
    let out = b.harness("success").arg("run").arg(&p).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let api = ApiProc::start(&b.home(), &[]);
    let mut c = SseConn::open(api.port, "/watch", &[]);
    assert_eq!(c.status, 200);
    let (mut got, mut last) = (Vec::new(), None);
    read(&mut c, &mut got, &mut last, Instant::now() + Duration::from_millis(1500));
    let before = last.clone().expect("an id");
    let journal = b.repo().join("runstate/replaced.jsonl");
    assert_eq!(got.len(), json_lines(&journal).len(), "the catch-up holds the whole journal");
    // The journal is replaced by a shorter one (a run again over removed files): two new records.
    let new = [
        json!({"v":"runstate/v1","ts":"2026-12-02T10:00:00.000Z","kind":"run","event":"started","by":"runner"}),
        json!({"v":"runstate/v1","ts":"2026-12-02T10:00:01.000Z","kind":"task","task":"T","state":"leased","attempt":1}),
    ];
    let tmp = journal.with_extension("tmp");
    std::fs::write(&tmp, new.iter().map(|r| format!("{r}\n")).collect::<String>()).unwrap();
    std::fs::rename(&tmp, &journal).unwrap();
    let mut after = Vec::new();
    read(&mut c, &mut after, &mut last, Instant::now() + Duration::from_secs(5));
    let lines: Vec<u64> = after.iter().map(|e| e["line"].as_u64().unwrap()).collect();
    assert_eq!(lines, vec![1, 2], "the new journal's lines, from its first: {after:?}");
    assert_eq!(after[1]["record"]["state"], "leased");
    // A client resuming with a cursor from before the replacement gets the new lines too.
    drop(c);
    let mut c = SseConn::open(api.port, "/watch", &[("Last-Event-ID", &before)]);
    assert_eq!(c.status, 200);
    let mut resumed = Vec::new();
    read(&mut c, &mut resumed, &mut last, Instant::now() + Duration::from_secs(3));
    let lines: Vec<u64> = resumed.iter().map(|e| e["line"].as_u64().unwrap()).collect();
    assert_eq!(lines, vec![1, 2], "{resumed:?}");
    // Overwritten in place, longer, never shorter on the way (the same inode): still a new journal.
    let third: String = (0..3)
        .map(|i| {
            let r = json!({"v":"runstate/v1","ts":format!("2026-12-02T11:00:0{i}.000Z"),"kind":"run","event":"started","by":"again"});
            format!("{r}\n")
        })
        .collect();
    let mut f = std::fs::OpenOptions::new().write(true).open(&journal).unwrap();
    std::io::Write::write_all(&mut f, third.as_bytes()).unwrap();
    drop(f);
    let mut again = Vec::new();
    read(&mut c, &mut again, &mut last, Instant::now() + Duration::from_secs(5));
    let lines: Vec<u64> = again.iter().map(|e| e["line"].as_u64().unwrap()).collect();
    assert_eq!(lines, vec![1, 2, 3], "the rewritten journal's lines, from its first: {again:?}");
    assert_eq!(again[0]["record"]["by"], "again");
}

/// Reads up to `n` events (fewer when the stream goes quiet).
fn take(c: &mut SseConn, n: usize, got: &mut Vec<Value>, last: &mut Option<String>) -> usize {
    c.stream.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
    let mut k = 0;
    while k < n {
        let Some(e) = c.next_event() else { break };
        got.push(serde_json::from_str(&e.data).unwrap());
        *last = e.id;
        k += 1;
    }
    k
}

#[test]
fn a_catch_up_cut_anywhere_resumes_exactly_and_writes_one_checkpoint_each() {
    let b = Bench::new();
    install_fixture_runs(&b.home());
    let api = ApiProc::start(&b.home(), &[]);
    let watch_dir = b.home().join("watch");
    // The whole record, read in one go.
    let mut all = Vec::new();
    let mut c = SseConn::open(api.port, "/watch", &[]);
    take(&mut c, usize::MAX, &mut all, &mut None);
    drop(c);
    assert!(all.len() > 20, "the fixture runs have records: {}", all.len());
    let files = || std::fs::read_dir(&watch_dir).map(|d| d.count()).unwrap_or(0);
    let before = files();
    // Again, cut every 7 events and resumed with the last id each time.
    let (mut got, mut last, mut resumes) = (Vec::new(), None, 0);
    loop {
        let headers: Vec<(&str, &str)> = last.as_deref().map(|l| vec![("Last-Event-ID", l)]).unwrap_or_default();
        let mut c = SseConn::open(api.port, "/watch", &headers);
        assert_eq!(c.status, 200);
        if take(&mut c, 7, &mut got, &mut last) == 0 {
            break;
        }
        resumes += 1;
        assert!(resumes < 1000, "no end");
    }
    assert!(last.as_deref().is_some_and(|l| l.starts_with("w2.")), "catch-up ids: {last:?}");
    let key = |e: &Value| (e["run"].as_str().unwrap().to_string(), e["line"].as_u64().unwrap());
    let mut want: Vec<_> = all.iter().map(key).collect();
    let mut have: Vec<_> = got.iter().map(key).collect();
    want.sort();
    have.sort();
    assert_eq!(have, want, "every record once, none twice, none missing");
    // One checkpoint per catch-up at most (content-addressed: catch-ups to the same present from
    // the same place share one).
    assert!(files() <= before + resumes, "{} files after {resumes} catch-ups (from {before})", files());
}
