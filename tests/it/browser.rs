//! A real browser against the API: headless Chromium loads a page from another loopback origin that
//! is allowlisted, opens an EventSource on a live task, survives the API being restarted under it
//! (it reconnects by itself with Last-Event-ID) and ends with every seq once, in order. The same page
//! from an origin that is not allowlisted gets nothing.
//!
//! Needs `chromium` (Debian package; `bash .ci/run` installs it). Without it the test fails under CI
//! and is skipped with a message elsewhere.

use crate::common::*;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Serves the test page and collects what it reports.
struct PageServer {
    port: u16,
    report: Arc<Mutex<String>>,
}

impl PageServer {
    fn start(api_port: u16, run: &str) -> PageServer {
        let page = format!(
            r#"<!doctype html><html><body><script>
const seqs = []; let errors = 0;
const es = new EventSource("http://127.0.0.1:{api_port}/runs/{run}/tasks/A/stream");
es.onmessage = (e) => {{ seqs.push(e.lastEventId); }};
es.onerror = () => {{ errors++; }};
setInterval(() => fetch("/report", {{method: "POST", body: JSON.stringify({{seqs, errors}})}}), 150);
</script></body></html>"#
        );
        PageServer::serving(page)
    }

    /// Serves `page` at every path but `POST /report`, whose body it keeps.
    fn serving(page: String) -> PageServer {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let report = Arc::new(Mutex::new(String::new()));
        let r2 = report.clone();
        std::thread::spawn(move || {
            for conn in l.incoming() {
                let Ok(mut s) = conn else { continue };
                let mut r = BufReader::new(s.try_clone().unwrap());
                let mut first = String::new();
                if r.read_line(&mut first).is_err() {
                    continue;
                }
                let mut len = 0usize;
                loop {
                    let mut h = String::new();
                    if r.read_line(&mut h).is_err() || h.trim().is_empty() {
                        break;
                    }
                    if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
                        len = v.trim().parse().unwrap_or(0);
                    }
                }
                let mut body = vec![0u8; len];
                let _ = r.read_exact(&mut body);
                let (ct, out) = if first.starts_with("POST /report") {
                    *r2.lock().unwrap() = String::from_utf8_lossy(&body).into_owned();
                    ("text/plain", String::new())
                } else {
                    ("text/html", page.clone())
                };
                let _ = write!(
                    s,
                    "HTTP/1.1 200 OK\r\nContent-Type: {ct}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{out}",
                    out.len()
                );
            }
        });
        PageServer { port, report }
    }

    fn seqs(&self) -> (Vec<String>, u64) {
        let text = self.report.lock().unwrap().clone();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
        let seqs = v["seqs"]
            .as_array()
            .map(|a| a.iter().map(|s| s.as_str().unwrap_or("").to_string()).collect())
            .unwrap_or_default();
        (seqs, v["errors"].as_u64().unwrap_or(0))
    }
}

fn chromium() -> Option<String> {
    ["chromium", "chromium-browser", "google-chrome"].iter().find_map(|c| {
        Command::new(c).arg("--version").output().ok().filter(|o| o.status.success()).map(|_| c.to_string())
    })
}

fn open_browser(bin: &str, url: &str, profile: &std::path::Path) -> Proc {
    let child = Command::new(bin)
        .args([
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(url)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    Proc { child }
}

/// Starts `harness api` on a fixed port (so the page's URL survives a restart).
fn api_on(home: &std::path::Path, port: u16, allow: &str) -> Proc {
    let mut child = harness(home)
        .args(["api", "--listen", &format!("127.0.0.1:{port}"), "--allow-origin", allow])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert!(line.contains("listening"), "{line}");
    Proc { child }
}

#[test]
fn a_browser_eventsource_resumes_exactly_across_an_api_restart() {
    let Some(bin) = chromium() else {
        assert!(std::env::var_os("CI").is_none(), "chromium is required under CI (bash .ci/run installs it)");
        eprintln!("skipped: chromium is not installed (apt-get install chromium)");
        return;
    };
    // A live run whose task log we extend.
    let b = Bench::new();
    let plan = b.plan(r#"{"v":"plan/v1","slug":"web","tasks":[{"id":"A","wave":1,"adapter":"claude","prompt":"x"}]}"#);
    let child = b
        .harness("hang")
        .arg("run")
        .arg(&plan)
        .args(["--supervised", "--foreground"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _sup = Proc { child };
    let log = b.repo().join("runstate/web.logs/A.log");
    wait_for(Duration::from_secs(30), || {
        (std::fs::read_to_string(&log).unwrap_or_default().lines().count() >= 5).then_some(())
    })
    .expect("engine output");
    let append = |from: usize, n: usize| {
        let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
        for i in from..from + n {
            writeln!(f, r#"{{"type":"stream_event","event":{{"type":"content_block_delta","index":0,"delta":{{"type":"text_delta","text":"w{i}"}}}}}}"#).unwrap();
        }
    };
    append(0, 40);
    let run = b.run_id();
    let api_port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let page = PageServer::start(api_port, &run);
    let allowed = format!("http://127.0.0.1:{}", page.port);
    let mut api = api_on(&b.home(), api_port, &allowed);
    let profile = tempfile::tempdir().unwrap();
    let _browser = open_browser(&bin, &format!("http://127.0.0.1:{}/", page.port), profile.path());
    let first = wait_for(Duration::from_secs(60), || {
        let (s, _) = page.seqs();
        (s.len() >= 42).then_some(s)
    })
    .unwrap_or_else(|| panic!("the browser got only {:?}", page.seqs()));
    assert_eq!(first.len(), 42);
    // Drop the connection server-side: kill the API, write more, start it again on the same port.
    api.child.kill().unwrap();
    api.child.wait().unwrap();
    append(40, 30);
    std::thread::sleep(Duration::from_millis(300));
    api = api_on(&b.home(), api_port, &allowed);
    append(70, 30);
    let want: Vec<String> = {
        let r = http(api_port, "GET", &format!("/runs/{run}/tasks/A/events?limit=5000"), &[], None);
        r.text()
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                match &v["seq"] {
                    serde_json::Value::String(s) => s.clone(),
                    o => o.to_string(),
                }
            })
            .collect()
    };
    assert_eq!(want.len(), 102);
    let got = wait_for(Duration::from_secs(60), || {
        let (s, _) = page.seqs();
        (s.len() >= want.len()).then_some(s)
    })
    .unwrap_or_else(|| panic!("after the restart the browser got {:?}", page.seqs()));
    std::thread::sleep(Duration::from_millis(500));
    let (got_final, errors) = page.seqs();
    assert_eq!(got, want, "no gap, no duplicate");
    assert_eq!(got_final, want, "nothing after the end");
    assert!(errors >= 1, "the browser saw the connection drop");
    drop(api);

    // The same page from an origin that is not allowlisted gets nothing.
    let other = PageServer::start(api_port, &run);
    let _api = api_on(&b.home(), api_port, &allowed);
    let profile2 = tempfile::tempdir().unwrap();
    let _browser2 = open_browser(&bin, &format!("http://127.0.0.1:{}/", other.port), profile2.path());
    let reported = wait_for(Duration::from_secs(60), || {
        let (s, e) = other.seqs();
        (e >= 1).then_some(s)
    })
    .expect("the page reports");
    assert!(reported.is_empty(), "a foreign origin received events: {reported:?}");
}

/// The Web UI's path through the API, in Chromium from an allowlisted origin: it lists the runs
/// with their total, follows `/watch` (with rows) from the list's cursor across an API restart and
/// loses no record, renders a task's `/feed` to its `end`, shows the task's diff, and steers a
/// working task with a review comment.
#[test]
fn a_web_ui_in_chromium_lists_watches_feeds_diffs_and_steers_with_a_comment() {
    let Some(bin) = chromium() else {
        assert!(std::env::var_os("CI").is_none(), "chromium is required under CI (bash .ci/run installs it)");
        eprintln!("skipped: chromium is not installed (apt-get install chromium)");
        return;
    };
    let b = Bench::new();
    let plan = r#"{"v":"plan/v1","slug":"ui","tasks":[{"id":"A","wave":1,"adapter":"claude","prompt":"a [fake-write:a.txt]"},
        {"id":"B","wave":2,"adapter":"claude","prompt":"b [fake-claude:hang]"}]}"#;
    let _sup = b.start_supervised(plan, "success", &[]);
    b.wait_state("B", "leased", Duration::from_secs(30));
    let run = b.run_id();
    // Other runs in the same home (installed after: the bench's own lookups take the newest id).
    let others = install_fixture_runs(&b.home());
    let api_port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let api = format!("http://127.0.0.1:{api_port}");
    let page = PageServer::serving(format!(
        r#"<!doctype html><html><body><script>
const API = "{api}", RUN = "{run}";
const r = {{records: [], rows: 0, errors: 0}};
const report = () => fetch("/report", {{method: "POST", body: JSON.stringify(r)}});
setInterval(report, 200);
(async () => {{
  const list = await fetch(API + "/runs?limit=50");
  r.total = list.headers.get("Harness-Total");
  r.listed = (await list.json()).length;
  const cursor = list.headers.get("Harness-Watch-Cursor");
  const w = new EventSource(API + "/watch?rows=1&lastEventId=" + encodeURIComponent(cursor));
  w.onmessage = (e) => {{ const d = JSON.parse(e.data); r.records.push(d.run + ":" + d.line); }};
  w.addEventListener("row", (e) => {{ r.rows++; r.lastRow = JSON.parse(e.data).runId; }});
  w.onerror = () => {{ r.errors++; }};
  const f = new EventSource(API + "/runs/" + RUN + "/tasks/A/feed");
  r.fed = 0;
  f.onmessage = () => {{ r.fed++; }};
  f.addEventListener("end", (e) => {{ r.end = JSON.parse(e.data); f.close(); }});
  const d = await fetch(API + "/runs/" + RUN + "/tasks/A/diff");
  r.diffOf = d.headers.get("Harness-Diff-Of");
  r.diff = await d.text();
  const s = await fetch(API + "/runs/" + RUN + "/tasks/B/steer", {{method: "POST",
    headers: {{"Content-Type": "application/json"}},
    body: JSON.stringify({{msg: "Please fix:", comments: [{{path: "a.txt", line: 1, body: "say hello"}}], by: "web-ui"}})}});
  r.steer = s.status;
}})();
</script></body></html>"#
    ));
    let allowed = format!("http://127.0.0.1:{}", page.port);
    let mut api_proc = api_on(&b.home(), api_port, &allowed);
    let profile = tempfile::tempdir().unwrap();
    let _browser = open_browser(&bin, &format!("http://127.0.0.1:{}/", page.port), profile.path());
    let report = || -> serde_json::Value { serde_json::from_str(&page.report.lock().unwrap()).unwrap_or_default() };
    let done = wait_for(Duration::from_secs(60), || {
        let v = report();
        (v["steer"].is_number() && v["end"].is_object()).then_some(v)
    })
    .unwrap_or_else(|| panic!("the page got: {}", report()));
    assert_eq!(done["total"], (others.len() + 1).to_string(), "{done}");
    assert_eq!(done["listed"], others.len() + 1);
    assert_eq!((done["end"]["reason"].as_str(), done["end"]["state"].as_str()), (Some("task_over"), Some("committed")));
    assert!(done["fed"].as_u64().unwrap() > 3, "{done}");
    assert_eq!(done["diffOf"], "commit");
    assert!(done["diff"].as_str().unwrap().contains("+++ b/a.txt"), "{done}");
    assert_eq!(done["steer"], 200, "{done}");
    let steer = json_lines(&b.repo().join("runstate/ui.jsonl"))
        .into_iter()
        .find(|s| s["kind"] == "control" && s["verb"] == "steer" && s["by"] == "web-ui")
        .expect("the steer is on the record");
    assert_eq!(
        steer["msg"], "Please fix:\n\nA review comment on your change:\n\n1. a.txt:1\n   > say hello",
        "{steer}"
    );
    // The API goes away; records are appended meanwhile; it comes back on the same port: the
    // page's EventSource resumes with its last id and every record comes once.
    api_proc.child.kill().unwrap();
    api_proc.child.wait().unwrap();
    for (_, id) in &others {
        let (code, _, err) =
            cli(&b.home(), &["journal", "append", id, r#"{"kind":"run","event":"paused","by":"away"}"#]);
        assert_eq!(code, 0, "{err}");
    }
    api_proc = api_on(&b.home(), api_port, &allowed);
    let lines: Vec<String> =
        others.iter().map(|(_, id)| format!("{id}:{}", json_lines(&journal_of(&b.home(), id)).len())).collect();
    let got = wait_for(Duration::from_secs(60), || {
        let v = report();
        let recs: Vec<String> = v["records"].as_array()?.iter().map(|s| s.as_str().unwrap_or("").to_string()).collect();
        lines.iter().all(|l| recs.contains(l)).then_some(v)
    })
    .unwrap_or_else(|| panic!("after the restart the page got {}", report()));
    let recs: Vec<&str> = got["records"].as_array().unwrap().iter().map(|s| s.as_str().unwrap()).collect();
    let unique: std::collections::BTreeSet<&&str> = recs.iter().collect();
    assert_eq!(unique.len(), recs.len(), "no record twice: {recs:?}");
    assert!(got["errors"].as_u64().unwrap() >= 1, "the page saw the API go");
    assert!(got["rows"].as_u64().unwrap() >= others.len() as u64, "a row after each run's records: {got}");
    drop(api_proc);
}

/// A registered run's journal path.
fn journal_of(home: &std::path::Path, run: &str) -> std::path::PathBuf {
    let p: serde_json::Value =
        serde_json::from_slice(&std::fs::read(home.join("runs").join(format!("{run}.json"))).unwrap()).unwrap();
    let dir = std::path::PathBuf::from(p["runstateDir"].as_str().unwrap());
    dir.join(format!("{}.jsonl", p["slug"].as_str().unwrap()))
}
