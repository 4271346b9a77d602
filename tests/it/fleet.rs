//! A fleet on a real NATS JetStream cluster (three `nats-server` nodes on loopback, started here):
//! two hosts (two homes) with their relays and one fleet API — the fleet's views, events, streams
//! and `/watch` equal to what each host serves itself, verbs journaled on the host that acted, and
//! the faults a fleet meets (a node lost, a relay killed again and again, NATS down, a 504).

use crate::common::nats::{Cluster, available};
use crate::common::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

const T: Duration = Duration::from_secs(60);

/// One host of the fleet: a home with its run, and its relay (restartable).
struct Host {
    b: Bench,
    name: &'static str,
    url: String,
    relay: Option<Proc>,
    _sup: Option<Proc>,
}

impl Host {
    fn new(name: &'static str, url: &str) -> Host {
        Host { b: Bench::new(), name, url: url.to_string(), relay: None, _sup: None }
    }

    fn relay_log(&self) -> PathBuf {
        self.b.dir.path().join("relay.log")
    }

    /// `harness relay --nats URL --host NAME` for this home.
    fn start_relay(&mut self) {
        let log = std::fs::File::options().create(true).append(true).open(self.relay_log()).unwrap();
        let child = harness(&self.b.home())
            .args(["relay", "--nats", &self.url, "--host", self.name])
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.relay = Some(Proc { child });
    }

    /// SIGKILL of the relay (no goodbye).
    fn kill_relay(&mut self) {
        self.relay = None;
    }

    fn signal_relay(&self, sig: i32) {
        let pid = self.relay.as_ref().unwrap().child.id() as i32;
        // SAFETY: a signal to this test's own child.
        unsafe { libc::kill(pid, sig) };
    }

    /// A supervised run of `plan` whose tasks hang (live until the test ends).
    fn start_live(&mut self, plan: &str) {
        self._sup = Some(self.b.start_supervised(plan, "hang", &[]));
    }

    fn log(&self, slug: &str, task: &str) -> PathBuf {
        self.b.repo().join(format!("runstate/{slug}.logs/{task}.log"))
    }

    fn journal_lines(&self, slug: &str) -> Vec<String> {
        let text = std::fs::read_to_string(self.b.repo().join(format!("runstate/{slug}.jsonl"))).unwrap_or_default();
        text.lines().map(str::to_string).collect()
    }
}

/// Appends `n` claude text deltas to a log as the engine would through the stamper: first their
/// arrival in `LOG.times` (`<first line> <count> <unix ms>`), then the lines.
fn append(log: &Path, from: usize, n: usize) {
    let have = std::fs::read(log).unwrap().iter().filter(|b| **b == b'\n').count();
    let ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis();
    let mut times =
        std::fs::OpenOptions::new().append(true).create(true).open(format!("{}.times", log.display())).unwrap();
    times.write_all(format!("{} {n} {ms}\n", have + 1).as_bytes()).unwrap();
    let mut f = std::fs::OpenOptions::new().append(true).open(log).unwrap();
    let mut buf = String::new();
    for i in from..from + n {
        buf.push_str(&format!(
            "{{\"type\":\"stream_event\",\"event\":{{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"w{i} \"}}}},\"session_id\":\"s\"}}\n"
        ));
    }
    f.write_all(buf.as_bytes()).unwrap();
}

/// A fleet API (its own home, for its token) on a free port.
fn fleet_api(home: &Path, url: &str, extra: &[&str]) -> ApiProc {
    let mut args = vec!["--fleet", url];
    args.extend_from_slice(extra);
    ApiProc::start(home, &args)
}

/// A fleet API of one node's fleet (`--replicas 1`) with `env` (its credentials, its CA).
fn fleet_api_env(home: &Path, url: &str, env: &[(&str, &str)]) -> ApiProc {
    ApiProc::start_env(home, &["--fleet", url, "--replicas", "1"], env)
}

/// `harness relay` of `b`'s home as `host` with `env` (its credentials, its CA) and `args`, its
/// log in `log`.
fn relay_env(b: &Bench, url: &str, host: &str, args: &[&str], env: &[(&str, &str)], log: &Path) -> Proc {
    let child = harness(&b.home())
        .args(["relay", "--nats", url, "--host", host])
        .args(args)
        .envs(env.iter().copied())
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap();
    Proc { child }
}

/// Every page of `path` (`/events` or `/journal`), concatenated.
fn all_pages(port: u16, path: &str) -> String {
    try_pages(port, path).unwrap_or_else(|r| panic!("{path}: {} {}", r.status, r.text()))
}

/// Every page of `path`, or the first answer that was not a 200 (a fleet API waiting out a NATS
/// outage answers 503).
fn try_pages(port: u16, path: &str) -> Result<String, Resp> {
    let mut out = String::new();
    let mut after: Option<String> = None;
    loop {
        let sep = if path.contains('?') { '&' } else { '?' };
        let q = match &after {
            Some(a) => format!("{path}{sep}after={a}&limit=5000"),
            None => format!("{path}{sep}limit=5000"),
        };
        let r = http(port, "GET", &q, &[], None);
        if r.status != 200 {
            return Err(r);
        }
        out.push_str(&r.text());
        after = r.header("harness-next-after").map(str::to_string);
        if r.header("harness-more") != Some("true") {
            return Ok(out);
        }
    }
}

/// Host h1's journal lines as the fleet gives them, without the `host` each carries: the host's own.
fn as_host_wrote(fleet_lines: &str) -> String {
    fleet_lines.replace(r#","host":"h1""#, "")
}

/// Waits until the fleet's `path` pages equal the host's, byte for byte.
fn wait_equal(fleet: u16, host: u16, fleet_path: &str, host_path: &str) -> String {
    let mut last = (String::new(), String::new());
    let same = wait_for(T, || {
        let (f, h) = (try_pages(fleet, fleet_path).unwrap_or_default(), all_pages(host, host_path));
        let same = f == h && !h.is_empty();
        last = (f, h.clone());
        same.then_some(h)
    });
    same.unwrap_or_else(|| {
        let _ = std::fs::write(std::env::temp_dir().join("fleet-unequal.fleet"), &last.0);
        let _ = std::fs::write(std::env::temp_dir().join("fleet-unequal.host"), &last.1);
        panic!(
            "{fleet_path}: the fleet's never equalled the host's:\nfleet: {} lines\nhost: {} lines",
            last.0.lines().count(),
            last.1.lines().count()
        )
    })
}

fn rows(port: u16) -> Vec<Value> {
    http(port, "GET", "/runs", &[], None).json().as_array().cloned().unwrap_or_default()
}

const LIVE_PLAN: &str = r#"{"v":"plan/v1","slug":"live","tasks":[{"id":"A","wave":1,"adapter":"claude","prompt":"x"},
    {"id":"L","wave":1,"adapter":"claude","prompt":"z","live":true,"approvals":"ask"},{"id":"B","wave":2,"adapter":"claude","prompt":"y"}]}"#;
const DONE_PLAN: &str = r#"{"v":"plan/v1","slug":"done","tasks":[{"id":"A","wave":1,"adapter":"claude","prompt":"x [fake-claude:tool]"},
    {"id":"C","wave":2,"adapter":"codex","prompt":"y [fake-codex:approve]"}]}"#;

/// Two hosts, one fleet API: the fleet lists both hosts' runs with their host, serves each run's
/// views, a task's events byte for byte as its host does, resumes `/stream` exactly across a
/// fleet API restart and `/watch` exactly across hosts, and carries steer, pause, kill and an
/// approval's decision to the host that holds the run, where each is journaled.
#[test]
fn a_fleet_serves_two_hosts_as_each_serves_itself_and_carries_verbs_to_them() {
    if !available() {
        return;
    }
    let nats = Cluster::start(3);
    let url = nats.url();
    let mut h1 = Host::new("h1", &url);
    h1.start_live(LIVE_PLAN);
    let mut h2 = Host::new("h2", &url);
    let st = h2.b.harness("tool").arg("run").arg(h2.b.plan(DONE_PLAN)).stdout(Stdio::null()).status().unwrap();
    assert!(st.success(), "h2's batch run");
    h1.start_relay();
    h2.start_relay();
    let fleet_home = tempfile::tempdir().unwrap();
    let fleet = fleet_api(fleet_home.path(), &url, &[]);
    let (api1, api2) = (ApiProc::start(&h1.b.home(), &[]), ApiProc::start(&h2.b.home(), &[]));
    let mut spec = crate::openapi::Spec::load();
    let (r1, r2) = (h1.b.run_id(), h2.b.run_id());
    wait_for(T, || (rows(fleet.port).len() == 2).then_some(())).unwrap_or_else(|| {
        panic!(
            "the fleet never listed both runs: {:?}\n{}",
            rows(fleet.port),
            std::fs::read_to_string(h1.relay_log()).unwrap()
        )
    });
    let listed: BTreeMap<String, String> = rows(fleet.port)
        .iter()
        .map(|r| (r["runId"].as_str().unwrap().into(), r["host"].as_str().unwrap().into()))
        .collect();
    assert_eq!(listed, BTreeMap::from([(r1.clone(), "h1".into()), (r2.clone(), "h2".into())]));
    // Any number of fleet APIs at once, each with the same answers (none keeps state of its own).
    let other_home = tempfile::tempdir().unwrap();
    let other = fleet_api(other_home.path(), &url, &[]);
    let ids =
        |port: u16| rows(port).iter().map(|r| (r["runId"].to_string(), r["host"].to_string())).collect::<Vec<_>>();
    wait_for(T, || (ids(other.port) == ids(fleet.port)).then_some(())).expect("a second fleet API lists the same runs");
    drop(other);
    let hosts = wait_for(T, || Some(fleet.get("/hosts")).filter(|h| h.json()["hosts"].as_array().unwrap().len() == 2))
        .expect("both hosts");
    spec.check("GET", "/hosts", &hosts);
    let hosts = hosts.json();
    assert!(hosts["hosts"].as_array().unwrap().iter().all(|h| h["online"] == true), "{hosts}");
    let r = http(fleet.port, "GET", "/runs?host=h2", &[], None);
    spec.check("GET", "/runs", &r);
    assert_eq!(r.json().as_array().unwrap().len(), 1);
    let r = http(fleet.port, "GET", "/hosts/h2/runs", &[], None);
    assert_eq!(r.json().as_array().unwrap().iter().map(|r| r["host"].as_str().unwrap()).collect::<Vec<_>>(), ["h2"]);
    // Every answer of the fleet as openapi.yaml says (a home's own routes, answered for a fleet).
    for (t, p) in [
        ("/runs/{runId}", format!("/runs/{r2}")),
        ("/runs/{runId}", format!("/runs/{r1}")),
        ("/runs/{runId}", "/runs/0123456789ab--nope".into()),
        ("/runs/{runId}/tasks/{tid}", format!("/runs/{r2}/tasks/A")),
        ("/runs/{runId}/tasks/{tid}", format!("/hosts/h2/runs/{r2}/tasks/ZZ")),
        ("/runs/{runId}/tasks/{tid}/events", format!("/runs/{r2}/tasks/A/events?limit=2")),
        ("/runs/{runId}/tasks/{tid}/events", format!("/runs/{r2}/tasks/A/events?after=nope")),
        ("/runs/{runId}/journal", format!("/runs/{r2}/journal?limit=3")),
        ("/runs/{runId}/approvals", format!("/runs/{r1}/approvals")),
        ("/runs/{runId}/diff", format!("/runs/{r2}/diff")),
        ("/runs/{runId}/diff", format!("/runs/{r2}/diff?stat=1")),
        ("/runs/{runId}/tasks/{tid}/diff", format!("/runs/{r2}/tasks/A/diff?stat=1")),
        ("/runs/{runId}/tasks/{tid}/gate", format!("/runs/{r2}/tasks/A/gate")),
        ("/runs/{runId}/tasks/{tid}/review", format!("/runs/{r2}/tasks/C/review")),
    ] {
        let r =
            wait_for(T, || Some(fleet.get(&p)).filter(|r| r.status != 404 || p.contains("nope") || p.contains("ZZ")));
        spec.check("GET", t, &r.unwrap());
    }

    // A finished task's events, and a live one's as they grow: byte for byte the host's own.
    for t in ["A", "C"] {
        wait_equal(
            fleet.port,
            api2.port,
            &format!("/runs/{r2}/tasks/{t}/events"),
            &format!("/runs/{r2}/tasks/{t}/events"),
        );
    }
    append(&h1.log("live", "A"), 0, 60);
    wait_equal(
        fleet.port,
        api1.port,
        &format!("/hosts/h1/runs/{r1}/tasks/A/events"),
        &format!("/runs/{r1}/tasks/A/events"),
    );
    // The views: the host's, with its host said.
    let detail = wait_for(T, || {
        let d = fleet.get(&format!("/runs/{r2}")).json();
        (d["status"] == "finished").then_some(d)
    })
    .expect("h2's run finished, as the fleet says");
    assert_eq!((detail["host"].as_str(), detail["host_online"].as_bool()), (Some("h2"), Some(true)));
    let own = api2.get(&format!("/runs/{r2}")).json();
    assert_eq!((&detail["counts"], &detail["plan"]), (&own["counts"], &own["plan"]));
    let task = fleet.get(&format!("/runs/{r2}/tasks/C")).json();
    assert_eq!((task["host"].as_str(), task["state"].as_str()), (Some("h2"), Some("committed")));
    assert_eq!(fleet.get(&format!("/runs/{r2}/tasks/ZZ")).status, 404);
    let diff = fleet.get(&format!("/runs/{r2}/diff?stat=1"));
    assert_eq!((diff.status, diff.json()), (200, api2.get(&format!("/runs/{r2}/diff?stat=1")).json()));

    stream_resumes_across_a_fleet_api_restart(&h1, &api1, fleet, fleet_home.path(), &url);
    let fleet = fleet_api(fleet_home.path(), &url, &[]);
    watch_is_exact_across_hosts_and_restarts(&[&h1, &h2], fleet, fleet_home.path(), &url);
    let fleet = fleet_api(fleet_home.path(), &url, &[]);
    verbs_reach_their_host(&h1, &fleet, &api1);
}

fn stream_resumes_across_a_fleet_api_restart(h1: &Host, api1: &ApiProc, fleet: ApiProc, fleet_home: &Path, url: &str) {
    let r1 = h1.b.run_id();
    let path = format!("/runs/{r1}/tasks/A/stream");
    let mut c = SseConn::open(fleet.port, &path, &[]);
    assert_eq!(c.status, 200);
    let mut got = Vec::new();
    for _ in 0..30 {
        got.push(c.next_event().expect("an event").id.unwrap());
    }
    drop(c);
    drop(fleet);
    append(&h1.log("live", "A"), 60, 40);
    let fleet = fleet_api(fleet_home, url, &[]);
    let mut c = SseConn::open(fleet.port, &path, &[("Last-Event-ID", got.last().unwrap())]);
    let want: Vec<String> = all_pages(api1.port, &format!("/runs/{r1}/tasks/A/events"))
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            v["seq"].as_str().map(str::to_string).unwrap_or_else(|| v["seq"].to_string())
        })
        .collect();
    while got.len() < want.len() {
        got.push(c.next_event().expect("the events after the resume point").id.unwrap());
    }
    assert_eq!(got, want, "across a fleet API restart: no event twice, none missing");
}

/// The records of both hosts' journals, each once, per run in journal order; and from the id of a
/// record in the middle, on a restarted fleet API, exactly the rest.
fn watch_is_exact_across_hosts_and_restarts(hosts: &[&Host], fleet: ApiProc, fleet_home: &Path, url: &str) {
    let want: BTreeMap<(String, String), Vec<String>> = hosts
        .iter()
        .map(|h| {
            let slug = h.b.run_id().split("--").nth(1).unwrap().to_string();
            ((h.name.to_string(), h.b.run_id()), h.journal_lines(&slug))
        })
        .collect();
    let total: usize = want.values().map(Vec::len).sum();
    let read = |port: u16, last: Option<&str>, n: usize| -> Vec<(String, Value)> {
        let h: Vec<(&str, &str)> = last.map(|l| vec![("Last-Event-ID", l)]).unwrap_or_default();
        let mut c = SseConn::open(port, "/watch", &h);
        let mut out = Vec::new();
        while out.len() < n {
            let e = c.next_event().expect("a record");
            out.push((e.id.unwrap(), serde_json::from_str::<Value>(&e.data).unwrap()));
        }
        out
    };
    let all = read(fleet.port, None, total);
    let mut seen: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for (_, e) in &all {
        let key = (e["host"].as_str().unwrap().to_string(), e["run"].as_str().unwrap().to_string());
        let lines = seen.entry(key).or_default();
        assert_eq!(e["line"].as_u64().unwrap() as usize, lines.len() + 1, "per run in journal order: {e}");
        lines.push(serde_json::to_string(&e["record"]).unwrap());
    }
    let want_records: BTreeMap<_, Vec<String>> = want
        .iter()
        .map(|(k, ls)| {
            (
                k.clone(),
                ls.iter().map(|l| serde_json::to_string(&serde_json::from_str::<Value>(l).unwrap()).unwrap()).collect(),
            )
        })
        .collect();
    assert_eq!(seen, want_records, "every record of both hosts, once");
    drop(fleet);
    let fleet = fleet_api(fleet_home, url, &[]);
    let mid = total / 2;
    let rest = read(fleet.port, Some(&all[mid - 1].0), total - mid);
    let ids = |v: &[(String, Value)]| v.iter().map(|(i, _)| i.clone()).collect::<Vec<_>>();
    assert_eq!(ids(&rest), ids(&all[mid..]), "resumed on a restarted fleet API: exactly the rest");
}

fn verbs_reach_their_host(h1: &Host, fleet: &ApiProc, api1: &ApiProc) {
    let r1 = h1.b.run_id();
    let post = |path: &str, body: &str, key: Option<&str>| {
        let mut h = vec![("Content-Type", "application/json")];
        if let Some(k) = key {
            h.push(("Idempotency-Key", k));
        }
        http(fleet.port, "POST", path, &h, Some(body.as_bytes()))
    };
    let r = post(&format!("/runs/{r1}/tasks/A/steer"), r#"{"msg":"from the fleet","by":"fleet-test"}"#, None);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("harness-host"), Some("h1"));
    let r = post(&format!("/hosts/h1/runs/{r1}/pause"), r#"{"by":"fleet-test"}"#, None);
    assert_eq!(r.status, 200, "{}", r.text());
    // An approval asked on h1, decided through the fleet.
    let sock = h1.b.sock();
    let asker = std::thread::spawn(move || {
        control(&sock, &serde_json::json!({"verb":"ask","task":"L","tool":"Bash","input":{"command":"make"}}))
    });
    let aid = wait_for(T, || {
        let a = fleet.get(&format!("/runs/{r1}/approvals?state=pending")).json();
        a["approvals"].as_array().and_then(|a| a.first()).and_then(|a| a["id"].as_str().map(str::to_string))
    })
    .expect("the pending approval, through the fleet");
    let r = post(&format!("/runs/{r1}/tasks/L/approvals/{aid}"), r#"{"decision":"allow","by":"fleet-test"}"#, None);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(asker.join().unwrap()["decision"]["behavior"], "allow");
    let r = post(&format!("/runs/{r1}/tasks/A/kill"), r#"{"by":"fleet-test"}"#, None);
    assert_eq!(r.status, 200, "{}", r.text());
    // Each journaled on the host that acted, by whom the fleet's client said.
    let journal = h1.b.journal();
    let by_fleet = |pred: &dyn Fn(&Value) -> bool| journal.iter().any(|r| r["by"] == "fleet-test" && pred(r));
    assert!(by_fleet(&|r| r["kind"] == "control" && r["verb"] == "steer" && r["msg"] == "from the fleet"));
    assert!(by_fleet(&|r| r["kind"] == "run" && r["event"] == "paused"));
    assert!(by_fleet(&|r| r["kind"] == "approval" && r["state"] == "allowed"));
    assert!(by_fleet(&|r| r["kind"] == "control" && r["verb"] == "kill"));
    // A run id no host has, a host that does not exist, a bad body: the host's own answers.
    assert_eq!(post("/runs/0123456789ab--nope/pause", "{}", None).status, 404);
    assert_eq!(post(&format!("/hosts/h9/runs/{r1}/pause"), "{}", None).status, 404);
    let r = post(&format!("/runs/{r1}/tasks/A/steer"), r#"{"nope":1}"#, None);
    let own = http(
        api1.port,
        "POST",
        &format!("/runs/{r1}/tasks/A/steer"),
        &[("Content-Type", "application/json")],
        Some(br#"{"nope":1}"#),
    );
    assert_eq!((r.status, r.json()), (own.status, own.json()));
}

/// Everything the host journals and logs reaches the fleet exactly once and in order, whatever
/// happens between them: a NATS node killed (of three), the relay SIGKILLed and restarted twenty
/// times, the whole NATS cluster down for thirty seconds — while the agent writes and verbs are
/// journaled on the host all along. Compared with the host's own answers at the end.
#[test]
fn a_fleet_survives_a_lost_node_a_relay_killed_twenty_times_and_nats_down_for_thirty_seconds() {
    if !available() {
        return;
    }
    let mut nats = Cluster::start(3);
    let url = nats.url();
    let mut h1 = Host::new("h1", &url);
    h1.start_live(LIVE_PLAN);
    h1.start_relay();
    let fleet_home = tempfile::tempdir().unwrap();
    let fleet = fleet_api(fleet_home.path(), &url, &[]);
    let api1 = ApiProc::start(&h1.b.home(), &[]);
    let r1 = h1.b.run_id();
    let events = format!("/runs/{r1}/tasks/A/events");
    let journal = format!("/runs/{r1}/journal");
    // The agent writes all along; a verb is journaled on the host now and then.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (log, stop, port, r1) = (h1.log("live", "A"), stop.clone(), api1.port, r1.clone());
        std::thread::spawn(move || {
            let mut n = 0;
            // (Ends with the test: a failing test's temp dir goes first.)
            while !stop.load(std::sync::atomic::Ordering::SeqCst) && log.exists() {
                append(&log, n, 3);
                n += 3;
                if n % 60 == 0 {
                    let body = format!(r#"{{"msg":"note {n}","by":"writer"}}"#);
                    let h = [("Content-Type", "application/json")];
                    let r = http(port, "POST", &format!("/runs/{r1}/tasks/A/steer"), &h, Some(body.as_bytes()));
                    assert_eq!(r.status, 200, "{}", r.text());
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    wait_for(T, || (rows(fleet.port).len() == 1).then_some(())).expect("the run, through the fleet");
    let fleet_lines = |p: &str| try_pages(fleet.port, p).map_or(0, |t| t.lines().count());
    wait_for(T, || (fleet_lines(&events) > 10).then_some(())).expect("events through the fleet");
    // A node lost: nothing stops.
    nats.kill(0);
    let before = fleet_lines(&events);
    wait_for(T, || (fleet_lines(&events) > before + 20).then_some(())).expect("events go on with a node lost");
    nats.restart(0);
    // The relay killed and started again, twenty times.
    for _ in 0..20 {
        h1.kill_relay();
        std::thread::sleep(Duration::from_millis(150));
        h1.start_relay();
        std::thread::sleep(Duration::from_millis(400));
    }
    // NATS down for thirty seconds: the host works on meanwhile.
    nats.stop_all();
    let down = std::time::Instant::now();
    // A page asked meanwhile is a 503 naming NATS (the request's patience, not the client's
    // read timeout, ends it).
    let r = http(fleet.port, "GET", &events, &[], None);
    assert_eq!(r.status, 503, "{}", r.text());
    assert!(r.text().contains("NATS"), "{}", r.text());
    std::thread::sleep(Duration::from_secs(30).saturating_sub(down.elapsed()));
    nats.start_all();
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    writer.join().unwrap();
    let host_events = wait_equal(fleet.port, api1.port, &format!("/hosts/h1{events}"), &events);
    let host_journal = all_pages(api1.port, &journal);
    let same_journal = wait_for(T, || {
        let f = try_pages(fleet.port, &journal).unwrap_or_default();
        // The fleet's lines carry their host; the records and lines are the host's.
        (as_host_wrote(&f) == host_journal).then_some(())
    });
    assert!(
        same_journal.is_some(),
        "the fleet's journal of the run is not the host's:\nfleet {} lines, host {} lines\n{}",
        all_pages(fleet.port, &journal).lines().count(),
        host_journal.lines().count(),
        std::fs::read_to_string(h1.relay_log())
            .unwrap_or_default()
            .lines()
            .rev()
            .take(20)
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(host_events.lines().count() > 200, "the writer wrote all along");
    assert!(host_journal.contains("note 60"), "verbs were journaled meanwhile");
}

/// A verb whose answer is lost (the relay stopped: 504) and sent again with the same
/// `Idempotency-Key` is carried out once, and the second answer is the first; a verb to a host
/// whose relay went silent is refused unsent; the host's own API keeps the same promise.
#[test]
fn a_steer_retried_with_its_idempotency_key_after_a_504_is_applied_once() {
    if !available() {
        return;
    }
    let nats = Cluster::start(1);
    let url = nats.url();
    let mut h1 = Host::new("h1", &url);
    h1.start_live(LIVE_PLAN);
    h1.start_relay();
    let fleet_home = tempfile::tempdir().unwrap();
    let fleet = fleet_api(fleet_home.path(), &url, &["--answer-within", "1s"]);
    let r1 = h1.b.run_id();
    wait_for(T, || {
        (rows(fleet.port).len() == 1 && fleet.get("/hosts").json()["hosts"][0]["online"] == true).then_some(())
    })
    .expect("the host, through the fleet");
    let steer = |port: u16, key: &str, msg: &str| {
        let h = [("Content-Type", "application/json"), ("Idempotency-Key", key)];
        let body = format!(r#"{{"msg":"{msg}","by":"idem"}}"#);
        http(port, "POST", &format!("/runs/{r1}/tasks/A/steer"), &h, Some(body.as_bytes()))
    };
    let steers_of =
        |msg: &str| h1.b.controls("steer").into_iter().filter(|r| r["msg"] == msg && r["outcome"] == "queued").count();
    // The relay stopped: the request waits in NATS, the fleet answers 504.
    h1.signal_relay(libc::SIGSTOP);
    let first = steer(fleet.port, "k-1", "once");
    assert_eq!(first.status, 504, "{}", first.text());
    assert!(first.text().contains("Idempotency-Key"), "{}", first.text());
    h1.signal_relay(libc::SIGCONT);
    wait_for(T, || (steers_of("once") == 1).then_some(()))
        .expect("the stopped relay carried the steer out once it ran again");
    let again = steer(fleet.port, "k-1", "once");
    assert_eq!(again.status, 200, "{}", again.text());
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(steers_of("once"), 1, "the retry was not carried out again");
    let third = steer(fleet.port, "k-1", "once");
    assert_eq!(third.json(), again.json(), "a repeat gets the first answer");
    // The host's own API: the same promise.
    let api1 = ApiProc::start(&h1.b.home(), &[]);
    let a = steer(api1.port, "k-2", "local");
    let b = steer(api1.port, "k-2", "local");
    assert_eq!((a.status, b.status), (200, 200));
    assert_eq!(a.json(), b.json());
    assert_eq!(steers_of("local"), 1);
    let journal = h1.b.journal();
    let answered =
        journal.iter().filter(|r| r["kind"] == "idempotency" && r["key"] == "k-2" && r["answer"].is_object()).count();
    assert_eq!(answered, 1, "the key and its first answer are journaled once");
    assert_eq!(steer(api1.port, "bad key", "x").status, 400, "a key with a space is refused");
    // A key names one request: used again for another verb, refused, not answered as the first.
    let h = [("Content-Type", "application/json"), ("Idempotency-Key", "k-2")];
    let r = http(api1.port, "POST", &format!("/runs/{r1}/pause"), &h, Some(br#"{"by":"idem"}"#));
    assert_eq!(r.status, 409, "{}", r.text());
    assert!(r.text().contains("was first used for steer of task A"), "{}", r.text());
    assert!(h1.b.controls("pause").iter().all(|c| c["outcome"] == "refused"), "not paused");
    // A line longer than the relay reads at once (600 KiB): carried whole, as the host serves it.
    let log = h1.log("live", "A");
    let long = format!(
        "{{\"type\":\"stream_event\",\"event\":{{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"{}\"}}}},\"session_id\":\"s\"}}\n",
        "long ".repeat(120 * 1024)
    );
    // Its time first, as the stamper writes it (a line without one is timed when it is read).
    let have = std::fs::read(&log).unwrap().iter().filter(|b| **b == b'\n').count();
    let ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis();
    let mut times =
        std::fs::OpenOptions::new().append(true).create(true).open(format!("{}.times", log.display())).unwrap();
    times.write_all(format!("{} 1 {ms}\n", have + 1).as_bytes()).unwrap();
    std::fs::OpenOptions::new().append(true).open(&log).unwrap().write_all(long.as_bytes()).unwrap();
    append(&log, 9_000, 3);
    let events = format!("/runs/{r1}/tasks/A/events");
    let both = wait_equal(fleet.port, api1.port, &events, &events);
    assert!(both.contains(&"long ".repeat(1000)) && both.contains("w9002"), "the long line and those after it");
    // A host whose relay went silent: refused unsent, and said so.
    h1.signal_relay(libc::SIGSTOP);
    std::thread::sleep(Duration::from_secs(11));
    let r = steer(fleet.port, "k-3", "never");
    assert_eq!(r.status, 409, "{}", r.text());
    assert!(r.text().contains("offline") && r.text().contains("nothing was sent"), "{}", r.text());
    let row = rows(fleet.port)[0].clone();
    assert_eq!(row["host_online"], false, "{row}");
    assert!(row["host_seen"].is_string(), "{row}");
    // Its runs are not said live meanwhile (its relay's last word may be older than their end).
    assert_eq!(row["live"], false, "{row}");
    assert_eq!(row["supervisor"], "unknown", "{row}");
    // The offline answers keep to the spec.
    let mut spec = crate::openapi::Spec::load();
    spec.check("GET", "/runs", &http(fleet.port, "GET", "/runs", &[], None));
    spec.check("GET", "/runs/{runId}", &http(fleet.port, "GET", &format!("/runs/{r1}"), &[], None));
    let live = http(fleet.port, "GET", "/runs?live=true", &[], None).json();
    assert_eq!(live.as_array().map(Vec::len), Some(0), "no live run on an offline host: {live}");
    assert_eq!(fleet.get(&format!("/runs/{r1}")).json()["live"], false);
    h1.signal_relay(libc::SIGCONT);
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(steers_of("never"), 0);
}

/// A host name is one relay's: a second relay with the same name is refused naming the holder, a
/// restarted one takes its own lease over at once; one relay per home; a URL carrying a password
/// is refused before anything is sent.
#[test]
fn a_host_name_is_leased_to_one_relay_and_a_restarted_one_takes_it_over() {
    if !available() {
        return;
    }
    let nats = Cluster::start(1);
    let url = nats.url();
    let mut h1 = Host::new("h1", &url);
    h1.start_relay();
    let fleet_home = tempfile::tempdir().unwrap();
    let fleet = fleet_api(fleet_home.path(), &url, &[]);
    wait_for(T, || (fleet.get("/hosts").json()["hosts"].as_array().map_or(0, Vec::len) == 1).then_some(()))
        .expect("h1 online");
    // Another home under the same name: refused while h1's relay lives.
    let other = Bench::new();
    let out = harness(&other.home()).args(["relay", "--nats", &url, "--host", "h1"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("host name h1 is held by") && err.contains("choose another --host"), "{err}");
    // A second relay of the same home: refused by the home's lock.
    let out = harness(&h1.b.home()).args(["relay", "--nats", &url, "--host", "h1b"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("one relay per home"));
    // Killed and restarted at once — before the killed one is even reaped, as a supervisor that
    // restarts it may: it waits out the home's lock and takes its own lease over (no wait for the
    // lease to lapse).
    h1.signal_relay(libc::SIGKILL);
    h1.start_relay();
    let log = h1.relay_log();
    wait_for(Duration::from_secs(5), || {
        (std::fs::read_to_string(&log).unwrap_or_default().matches("the host name is ours").count() == 2).then_some(())
    })
    .expect("the restarted relay took its lease over at once");
    // Secrets never on a command line.
    let port = url.rsplit(':').next().unwrap();
    let out = harness(&other.home())
        .args(["relay", "--nats", &format!("nats://u:secret@127.0.0.1:{port}"), "--host", "h2"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("refused") && !err.contains("secret"), "{err}");
    let (code, _, err) = cli(&other.home(), &["relay", "--nats", &url, "--host", "Bad.Name"]);
    assert_eq!(code, 2);
    assert!(err.contains("DNS label"), "{err}");
}

/// Runs pruned from a home while its relay was down leave the fleet when the relay comes back,
/// and the fleet's `/watch` cursor moves past their records.
#[test]
fn runs_pruned_while_the_relay_was_down_leave_the_fleet_when_it_returns() {
    if !available() {
        return;
    }
    let nats = Cluster::start(1);
    let url = nats.url();
    let mut h1 = Host::new("h1", &url);
    let ids = install_fixture_runs(&h1.b.home());
    h1.start_relay();
    let fleet_home = tempfile::tempdir().unwrap();
    let fleet = fleet_api(fleet_home.path(), &url, &[]);
    let listed = wait_for(T, || Some(rows(fleet.port).len()).filter(|n| *n == ids.len())).expect("every run listed");
    // A journal replaced by hand under its run id, by a shorter one: the relay mirrors no more of
    // it, and the run's row and detail say so (the fleet's journal ends where its mirror did).
    let journal_of = |run: &str| {
        let p: Value =
            serde_json::from_slice(&std::fs::read(h1.b.home().join(format!("runs/{run}.json"))).unwrap()).unwrap();
        PathBuf::from(p["runstateDir"].as_str().unwrap()).join(format!("{}.jsonl", p["slug"].as_str().unwrap()))
    };
    let (victim, path, had) = ids
        .iter()
        .map(|(_, run)| (run.clone(), journal_of(run)))
        .find_map(|(run, path)| {
            let n = std::fs::read_to_string(&path).ok()?.lines().count();
            (n >= 4).then_some((run, path, n))
        })
        .expect("a fixture run with a journal of 4 lines or more");
    let text = std::fs::read_to_string(&path).unwrap();
    let short: String = text.lines().take(2).map(|l| format!("{l}\n")).collect();
    let tmp = path.with_extension("jsonl.new");
    std::fs::write(&tmp, short).unwrap();
    std::fs::rename(&tmp, &path).unwrap();
    let row =
        wait_for(T, || rows(fleet.port).into_iter().find(|r| r["runId"] == victim && r["mirror_stopped"].is_string()))
            .unwrap_or_else(|| {
                panic!("the row says the mirror stopped: {:?}", std::fs::read_to_string(h1.relay_log()))
            });
    assert!(row["mirror_stopped"].as_str().unwrap().contains("replaced"), "{row}");
    let detail = fleet.get(&format!("/hosts/h1/runs/{victim}")).json();
    assert!(detail["mirror_stopped"].is_string(), "{detail}");
    let mirrored = all_pages(fleet.port, &format!("/hosts/h1/runs/{victim}/journal")).lines().count();
    assert_eq!(mirrored, had, "the fleet's journal is the one it mirrored, not mixed with the new one");
    let log = std::fs::read_to_string(h1.relay_log()).unwrap();
    assert!(log.contains("is not the one the fleet mirrors"), "{log}");
    assert!(row["mirror_stopped"].as_str().unwrap().contains(&format!("up to line {had},")), "{row}");
    // A fleet API started now finds the row covering the journal as far as it was mirrored: its
    // list's cursor is the stream's end (a /watch joining there replays nothing).
    let fresh_home = tempfile::tempdir().unwrap();
    let fresh = fleet_api(fresh_home.path(), &url, &[]);
    let mut last = None;
    let joined = wait_for(T, || {
        let cursor = http(fresh.port, "GET", "/runs", &[], None).header("harness-watch-cursor")?.to_string();
        let end = SseConn::open(fresh.port, "/watch?since=now", &[]).next()?.id?;
        let same = cursor == end;
        last = Some((cursor, end));
        same.then_some(())
    });
    assert!(joined.is_some(), "a fresh fleet API's list cursor is the watch stream's end: (cursor, end) {last:?}");
    drop(fresh);
    h1.kill_relay();
    let (code, out, err) = cli(&h1.b.home(), &["prune", "--finished-before", "1s", "--json"]);
    assert_eq!(code, 0, "{out}{err}");
    let here = http(ApiProc::start(&h1.b.home(), &[]).port, "GET", "/runs", &[], None).json();
    let left = here.as_array().map_or(0, Vec::len);
    assert!(left < listed, "the prune removed runs ({listed} → {left}): {out}");
    h1.start_relay();
    wait_for(T, || (rows(fleet.port).len() == left).then_some(()))
        .unwrap_or_else(|| panic!("the fleet still lists {} runs, the host {left}", rows(fleet.port).len()));
    // A fresh /watch joins at a cursor past the pruned runs' records: nothing waits for their rows.
    let r = http(fleet.port, "GET", "/runs", &[], None);
    let cursor = r.header("harness-watch-cursor").unwrap_or_default().to_string();
    let mut w = SseConn::open(fleet.port, "/watch?since=now", &[]);
    let first = w.next().expect("the cursor at once");
    assert_eq!(first.id.as_deref(), Some(cursor.as_str()), "a list's cursor is the stream's end");
    let past = cursor.strip_prefix("f1.").unwrap().parse::<u64>().unwrap() + 5;
    let r = http(fleet.port, "GET", &format!("/watch?lastEventId=f1.{past}"), &[], None);
    assert_eq!(r.status, 400, "a cursor past the stream's end: {}", r.text());
}

/// The subject permissions `spec/FLEET.md` gives, on a real server with users and passwords (from
/// the environment, never the command line): a relay with its host's permissions mirrors its home
/// and the fleet API (with its own) serves it; the same credentials under another host's name are
/// refused by the server — a relay cannot pose as another host.
#[test]
fn a_relays_credentials_publish_its_own_host_only() {
    if !available() {
        return;
    }
    let nats = Cluster::start_conf(1, &permissions_conf());
    let url = nats.url();
    let fleet_home = tempfile::tempdir().unwrap();
    let fleet = fleet_api_env(
        fleet_home.path(),
        &url,
        &[("HARNESS_NATS_USER", "fleet"), ("HARNESS_NATS_PASSWORD", "fleet-secret")],
    );
    let relay = |b: &Bench, host: &str, log: &Path| {
        let env = [("HARNESS_NATS_USER", "relay-h1"), ("HARNESS_NATS_PASSWORD", "relay-h1-secret")];
        relay_env(b, &url, host, &[], &env, log)
    };
    let ok = Bench::new();
    let st = ok.harness("tool").arg("run").arg(ok.plan(DONE_PLAN)).stdout(Stdio::null()).status().unwrap();
    assert!(st.success());
    let ok_log = ok.dir.path().join("relay.log");
    let _r1 = relay(&ok, "h1", &ok_log);
    wait_for(T, || (rows(fleet.port).len() == 1).then_some(())).unwrap_or_else(|| {
        panic!("the relay with its own permissions was not served: {}", std::fs::read_to_string(&ok_log).unwrap())
    });
    let run = ok.run_id();
    let r = http(fleet.port, "GET", &format!("/runs/{run}/tasks/C/events"), &[], None);
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(!r.text().is_empty());
    let d = http(fleet.port, "GET", &format!("/runs/{run}/diff?stat=1"), &[], None);
    assert_eq!(d.status, 200, "the relay answers its own requests: {}", d.text());
    // The same credentials as host h2: the server refuses its publishes; h2 never appears.
    let other = Bench::new();
    let bad_log = other.dir.path().join("relay.log");
    let _r2 = relay(&other, "h2", &bad_log);
    let refused = wait_for(T, || {
        let log = std::fs::read_to_string(&bad_log).unwrap_or_default();
        log.to_lowercase().contains("permissions violation").then_some(log)
    });
    assert!(
        refused.is_some(),
        "the server refused the other host's subjects: {}",
        std::fs::read_to_string(&bad_log).unwrap()
    );
    let hosts = http(fleet.port, "GET", "/hosts", &[], None).json();
    assert!(hosts["hosts"].as_array().unwrap().iter().all(|h| h["host"] == "h1"), "{hosts}");
    // The secrets were never on a command line.
    for pid in processes_with_home(&other.home()) {
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        assert!(!String::from_utf8_lossy(&cmdline).contains("secret"));
    }
}

/// The nats-server authorization of `spec/FLEET.md`'s permissions: a relay of host h1 and a fleet API.
/// (Wildcards are whole tokens in NATS: each stream is named.)
fn permissions_conf() -> String {
    const ALL: [&str; 5] = ["HARNESS_JOURNAL", "HARNESS_EVENTS", "HARNESS_VIEWS", "HARNESS_HOSTS", "HARNESS_LEASES"];
    let mut relay: Vec<String> = ["journal.h1.>", "events.h1.>", "views.h1.>", "hosts.h1", "lease.h1"]
        .iter()
        .map(|s| format!("harness.{s}"))
        .collect();
    let mut fleet = vec!["harness.rpc.*".to_string()];
    for who in [&mut relay, &mut fleet] {
        who.push("$JS.API.INFO".into());
        for s in ALL {
            who.push(format!("$JS.API.STREAM.INFO.{s}"));
            who.push(format!("$JS.API.STREAM.CREATE.{s}"));
        }
    }
    for s in ["HARNESS_JOURNAL", "HARNESS_EVENTS", "HARNESS_LEASES"] {
        relay.push(format!("$JS.API.STREAM.MSG.GET.{s}"));
    }
    let consume = |who: &mut Vec<String>, s: &str| {
        who.push(format!("$JS.API.CONSUMER.CREATE.{s}"));
        who.push(format!("$JS.API.CONSUMER.CREATE.{s}.>"));
        who.push(format!("$JS.API.CONSUMER.INFO.{s}.*"));
        who.push(format!("$JS.API.CONSUMER.MSG.NEXT.{s}.*"));
        who.push(format!("$JS.API.CONSUMER.DELETE.{s}.*"));
    };
    consume(&mut relay, "HARNESS_VIEWS");
    for s in ["HARNESS_JOURNAL", "HARNESS_EVENTS", "HARNESS_VIEWS", "HARNESS_HOSTS"] {
        consume(&mut fleet, s);
    }
    for s in ["HARNESS_JOURNAL", "HARNESS_EVENTS", "HARNESS_VIEWS"] {
        fleet.push(format!("$JS.API.DIRECT.GET.{s}"));
        fleet.push(format!("$JS.API.DIRECT.GET.{s}.>"));
    }
    let list = |l: &[String]| l.iter().map(|s| format!("\"{s}\"")).collect::<Vec<_>>().join(", ");
    format!(
        r#"authorization {{
  users: [
    {{ user: "relay-h1", password: "relay-h1-secret", permissions: {{
        publish: {{ allow: [{}] }},
        subscribe: {{ allow: ["harness.rpc.h1", "_INBOX.>"] }},
        allow_responses: true }} }},
    {{ user: "fleet", password: "fleet-secret", permissions: {{
        publish: {{ allow: [{}] }},
        subscribe: {{ allow: ["_INBOX.>"] }} }} }}
  ]
}}
"#,
        list(&relay),
        list(&fleet)
    )
}

/// `tls://` servers: the relay and the fleet API connect over TLS, trusting the CA named in
/// `HARNESS_NATS_CA` (a self-signed CA made here with openssl).
#[test]
fn a_fleet_over_tls_trusts_the_ca_it_is_given() {
    if !available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ssl = |args: &[&str]| {
        let out = std::process::Command::new("openssl").args(args).current_dir(d).output().expect("openssl");
        assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    ssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=harness test CA",
    ]);
    ssl(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=127.0.0.1",
    ]);
    std::fs::write(d.join("san.ext"), "subjectAltName=IP:127.0.0.1\n").unwrap();
    ssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.pem",
        "-days",
        "2",
        "-extfile",
        "san.ext",
    ]);
    let (cert, key) = (d.join("server.pem"), d.join("server.key"));
    let nats =
        Cluster::start_with(1, &["--tls", "--tlscert", cert.to_str().unwrap(), "--tlskey", key.to_str().unwrap()]);
    let url = nats.url().replace("nats://", "tls://");
    let ca = d.join("ca.pem");
    let b = Bench::new();
    let st = b.harness("tool").arg("run").arg(b.plan(DONE_PLAN)).stdout(Stdio::null()).status().unwrap();
    assert!(st.success());
    let log = b.dir.path().join("relay.log");
    let ca = ca.to_str().unwrap();
    let _relay = relay_env(&b, &url, "tls-host", &[], &[("HARNESS_NATS_CA", ca)], &log);
    let fleet_home = tempfile::tempdir().unwrap();
    let fleet = fleet_api_env(fleet_home.path(), &url, &[("HARNESS_NATS_CA", ca)]);
    wait_for(T, || (rows(fleet.port).len() == 1).then_some(()))
        .unwrap_or_else(|| panic!("the run over TLS: {}", std::fs::read_to_string(&log).unwrap()));
    assert_eq!(rows(fleet.port)[0]["host"], "tls-host");
}

/// NATS's own sign-ins: an nkey (a seed in `HARNESS_NATS_NKEY`) and a `.creds` file (a user JWT of
/// an operator's account, and its seed) given with `--creds` or `HARNESS_NATS_CREDS`; a seed or a
/// JWT the server does not know is refused and its host never appears.
#[test]
fn a_relay_and_a_fleet_api_sign_in_with_an_nkey_or_a_creds_file() {
    if !available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let b = Bench::new();
    let st = b.harness("tool").arg("run").arg(b.plan(DONE_PLAN)).stdout(Stdio::null()).status().unwrap();
    assert!(st.success());
    let fleet_home = tempfile::tempdir().unwrap();
    // nkeys: the server knows two public keys; the relay and the fleet API hold their seeds.
    let (relay_key, fleet_key) = (nkeys::KeyPair::new_user(), nkeys::KeyPair::new_user());
    let users = format!("{{ nkey: {} }}, {{ nkey: {} }}", relay_key.public_key(), fleet_key.public_key());
    let nats = Cluster::start_conf(1, &format!("authorization {{ users: [ {users} ] }}\n"));
    let seed = |k: &nkeys::KeyPair| k.seed().unwrap();
    signs_in(
        &b,
        &nats.url(),
        "nk",
        &[],
        &[("HARNESS_NATS_NKEY", &seed(&relay_key))],
        fleet_home.path(),
        &[("HARNESS_NATS_NKEY", &seed(&fleet_key))],
    );
    let stranger = seed(&nkeys::KeyPair::new_user());
    is_refused(&nats.url(), "nk-2", &[], &[("HARNESS_NATS_NKEY", &stranger)]);
    drop(nats);
    // A creds file: an operator, its account (JetStream on) and the system account, the users'
    // JWTs signed by the account; the server resolves the accounts from its configuration.
    let (op, acc, sys) = (nkeys::KeyPair::new_operator(), nkeys::KeyPair::new_account(), nkeys::KeyPair::new_account());
    let unlimited = serde_json::json!({ "subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1,
        "wildcards": true, "conn": -1, "leaf": -1 });
    let mut js_limits = unlimited.clone();
    for k in ["mem_storage", "disk_storage", "streams", "consumer"] {
        js_limits[k] = (-1).into();
    }
    let account = |limits: &Value| serde_json::json!({ "limits": limits, "type": "account", "version": 2 });
    let conf = format!(
        "operator: {}\nsystem_account: {}\nresolver: MEMORY\nresolver_preload: {{\n  {}: {}\n  {}: {}\n}}\n",
        jwt(&op, &op.public_key(), serde_json::json!({ "type": "operator", "version": 2 })),
        sys.public_key(),
        acc.public_key(),
        jwt(&op, &acc.public_key(), account(&js_limits)),
        sys.public_key(),
        jwt(&op, &sys.public_key(), account(&unlimited)),
    );
    let nats = Cluster::start_conf(1, &conf);
    let creds = |issuer: &nkeys::KeyPair, name: &str| {
        let user = nkeys::KeyPair::new_user();
        let claims = serde_json::json!({ "pub": {}, "sub": {}, "subs": -1, "data": -1, "payload": -1,
            "type": "user", "version": 2 });
        let text = format!(
            "-----BEGIN NATS USER JWT-----\n{}\n------END NATS USER JWT------\n\n\
             -----BEGIN USER NKEY SEED-----\n{}\n------END USER NKEY SEED------\n",
            jwt(issuer, &user.public_key(), claims),
            user.seed().unwrap()
        );
        let path = dir.path().join(format!("{name}.creds"));
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_string()
    };
    let (relay_creds, fleet_creds) = (creds(&acc, "relay"), creds(&acc, "fleet"));
    let fleet_home = tempfile::tempdir().unwrap();
    signs_in(
        &b,
        &nats.url(),
        "jwt",
        &["--creds", &relay_creds],
        &[],
        fleet_home.path(),
        &[("HARNESS_NATS_CREDS", &fleet_creds)],
    );
    // A user of an account the operator never signed.
    let forged = creds(&nkeys::KeyPair::new_account(), "forged");
    is_refused(&nats.url(), "jwt-2", &["--creds", &forged], &[]);
}

/// A JWT of NATS (v2): `claims` about `subject`, issued and signed by `issuer`.
fn jwt(issuer: &nkeys::KeyPair, subject: &str, nats: Value) -> String {
    use base64::Engine;
    let b64 = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let claims = serde_json::json!({ "jti": format!("HARNESSTEST{now}{subject}"), "iat": now,
        "iss": issuer.public_key(), "name": subject, "sub": subject, "nats": nats });
    let head = format!("{}.{}", b64(br#"{"typ":"JWT","alg":"ed25519-nkey"}"#), b64(claims.to_string().as_bytes()));
    let sig = issuer.sign(head.as_bytes()).unwrap();
    format!("{head}.{}", b64(&sig))
}

/// `b`'s run reaches a fleet API through a relay of `host`, each signed in with its own
/// credentials (`relay_args`/`relay_env`, `fleet_env`); the relay's log carries no secret.
fn signs_in(
    b: &Bench,
    url: &str,
    host: &str,
    relay_args: &[&str],
    relay_creds: &[(&str, &str)],
    fleet_home: &Path,
    fleet_creds: &[(&str, &str)],
) {
    let log = b.dir.path().join(format!("relay-{host}.log"));
    let relay = relay_env(b, url, host, relay_args, relay_creds, &log);
    let fleet = fleet_api_env(fleet_home, url, fleet_creds);
    let run = b.run_id();
    wait_for(T, || rows(fleet.port).iter().any(|r| r["host"] == host && r["runId"] == run.as_str()).then_some(()))
        .unwrap_or_else(|| panic!("{host}: the run through the fleet: {}", std::fs::read_to_string(&log).unwrap()));
    let d = http(fleet.port, "GET", &format!("/hosts/{host}/runs/{run}/diff?stat=1"), &[], None);
    assert_eq!(d.status, 200, "{host}: a verb's round trip: {}", d.text());
    drop(relay);
    let text = std::fs::read_to_string(&log).unwrap();
    for (_, secret) in relay_creds {
        assert!(!text.contains(secret), "{host}: the relay's log holds its secret");
    }
}

/// A relay with credentials the server does not know: it says so, and never runs for `host`.
fn is_refused(url: &str, host: &str, args: &[&str], env: &[(&str, &str)]) {
    let b = Bench::new();
    let log = b.dir.path().join("relay.log");
    let _relay = relay_env(&b, url, host, args, env, &log);
    let said = wait_for(T, || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        text.to_lowercase().contains("authorization violation").then_some(text)
    });
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(said.is_some(), "{host}: the server's refusal is in the relay's log: {text}");
    assert!(!text.contains("the host name is ours"), "{host}: {text}");
}

/// A view larger than the server takes (its `max_payload`) is not sent, said once in the relay's
/// log, and nothing else waits on it: every run is listed, and no step is tried again for ever.
#[test]
fn a_view_larger_than_the_server_takes_is_said_once_and_the_rest_is_mirrored() {
    if !available() {
        return;
    }
    let nats = Cluster::start_conf(1, "max_payload: 4096\n");
    let mut h1 = Host::new("h1", &nats.url());
    let ids = install_fixture_runs(&h1.b.home());
    h1.start_relay();
    let fleet_home = tempfile::tempdir().unwrap();
    let fleet = fleet_api(fleet_home.path(), &nats.url(), &[]);
    wait_for(T, || (rows(fleet.port).len() == ids.len()).then_some(()))
        .unwrap_or_else(|| panic!("every run listed: {}", std::fs::read_to_string(h1.relay_log()).unwrap()));
    // A few of the relay's steps later: each too large view said once, no step failing.
    std::thread::sleep(Duration::from_secs(5));
    let log = std::fs::read_to_string(h1.relay_log()).unwrap();
    let said: Vec<&str> = log.lines().filter(|l| l.contains("larger than the NATS server takes")).collect();
    assert!(!said.is_empty(), "a fixture run's view is over 4 KiB: {log}");
    let subjects: std::collections::BTreeSet<&str> =
        said.iter().filter_map(|l| l.split("subject=").nth(1)?.split_whitespace().next()).collect();
    assert_eq!(subjects.len(), said.len(), "each view said once: {said:#?}");
    assert!(!log.contains("trying again"), "{log}");
}

/// A log of megabytes (a finished run's whole turn, mirrored for the first time) reaches the fleet
/// whole, byte for byte, though a relay's step reads a few megabytes of it at a time (and a finished
/// run's step is skipped when its files did not change).
#[test]
fn a_task_log_of_megabytes_is_mirrored_whole() {
    if !available() {
        return;
    }
    let nats = Cluster::start(1);
    let mut h1 = Host::new("h1", &nats.url());
    let st = h1.b.harness("tool").arg("run").arg(h1.b.plan(DONE_PLAN)).stdout(Stdio::null()).status().unwrap();
    assert!(st.success());
    let log = h1.log("done", "A");
    let pad = "x".repeat(2000);
    let mut buf = String::new();
    for i in 0..8000 {
        buf.push_str(&format!(
            "{{\"type\":\"stream_event\",\"event\":{{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"w{i} {pad}\"}}}},\"session_id\":\"s\"}}\n"
        ));
    }
    // Their arrival in the log's time sidecar (as the stamper writes it), then the lines.
    let have = std::fs::read(&log).unwrap().iter().filter(|b| **b == b'\n').count();
    let ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis();
    let times = format!("{}.times", log.display());
    let mut t = std::fs::OpenOptions::new().append(true).create(true).open(times).unwrap();
    t.write_all(format!("{} 8000 {ms}\n", have + 1).as_bytes()).unwrap();
    std::fs::OpenOptions::new().append(true).open(&log).unwrap().write_all(buf.as_bytes()).unwrap();
    assert!(std::fs::metadata(&log).unwrap().len() > 16 << 20, "a log of more than 16 MiB");
    h1.start_relay();
    let fleet_home = tempfile::tempdir().unwrap();
    let fleet = fleet_api(fleet_home.path(), &nats.url(), &[]);
    let api1 = ApiProc::start(&h1.b.home(), &[]);
    let run = h1.b.run_id();
    let events = format!("/runs/{run}/tasks/A/events");
    let same = wait_equal(fleet.port, api1.port, &format!("/hosts/h1{events}"), &events);
    assert!(same.lines().count() > 8000, "every line's events");
    // The log replaced under its name (as logrotate would), and written on: its lines are not
    // mirrored under the old file's seqs; the relay says so, restarted too.
    let text = std::fs::read_to_string(&log).unwrap();
    let short: String = text.lines().take(5).map(|l| format!("{l}\n")).collect();
    let tmp = log.with_extension("log.new");
    std::fs::write(&tmp, short).unwrap();
    std::fs::rename(&tmp, &log).unwrap();
    append(&log, 0, 3);
    for restarted in [false, true] {
        if restarted {
            h1.kill_relay();
            std::fs::write(h1.relay_log(), "").unwrap();
            h1.start_relay();
        }
        wait_for(T, || {
            let said = std::fs::read_to_string(h1.relay_log()).unwrap_or_default();
            said.contains("the task's log is not the one the fleet mirrors").then_some(())
        })
        .unwrap_or_else(|| panic!("the relay says so: {}", std::fs::read_to_string(h1.relay_log()).unwrap()));
        assert_eq!(all_pages(fleet.port, &format!("/hosts/h1{events}")), same, "nothing of the new file mirrored");
    }
}

/// The same run id on two hosts (a home copied, or fixtures installed twice): `/runs/:runId/…` is a
/// 409 naming both hosts — a verb included, sent nowhere — and `/hosts/:host/runs/:runId/…`
/// addresses each; `?host=` lists one host's runs.
#[test]
fn a_run_id_on_two_hosts_is_a_409_naming_them_unless_the_host_is_named() {
    if !available() {
        return;
    }
    let nats = Cluster::start(1);
    let (mut h1, mut h2) = (Host::new("h1", &nats.url()), Host::new("h2", &nats.url()));
    let ids = install_fixture_runs(&h1.b.home());
    // h2's registry a copy of h1's: the same run ids (their files h1's).
    let st = std::process::Command::new("cp").arg("-a").arg(h1.b.home().join("runs")).arg(h2.b.home()).status();
    assert!(st.unwrap().success());
    h1.start_relay();
    h2.start_relay();
    let fleet_home = tempfile::tempdir().unwrap();
    let fleet = fleet_api(fleet_home.path(), &nats.url(), &[]);
    wait_for(T, || (rows(fleet.port).len() == 2 * ids.len()).then_some(())).expect("both hosts' runs listed");
    let run = &ids[0].1;
    let r = fleet.get(&format!("/runs/{run}"));
    assert_eq!(r.status, 409, "{}", r.text());
    assert!(r.text().contains("h1") && r.text().contains("h2"), "the hosts named: {}", r.text());
    let body = br#"{"reason":"x"}"#;
    let h = [("Content-Type", "application/json")];
    let r = http(fleet.port, "POST", &format!("/runs/{run}/pause"), &h, Some(body));
    assert_eq!(r.status, 409, "a verb to an ambiguous id: {}", r.text());
    assert!(r.text().contains("is on hosts h1, h2"), "refused before it is routed: {}", r.text());
    for host in ["h1", "h2"] {
        let d = fleet.get(&format!("/hosts/{host}/runs/{run}"));
        assert_eq!(d.status, 200, "{}", d.text());
        assert_eq!(d.json()["host"], host);
        let listed = http(fleet.port, "GET", &format!("/runs?host={host}"), &[], None).json();
        let listed = listed.as_array().unwrap();
        assert_eq!(listed.len(), ids.len(), "{host}'s runs only");
        assert!(listed.iter().all(|r| r["host"] == host));
    }
    // The CLI against the fleet: a HOST column, and the same run on each host.
    let api = format!("127.0.0.1:{}", fleet.port);
    let (code, out, err) = cli(fleet_home.path(), &["runs", "--api", &api]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.starts_with("HOST "), "{out}");
    for host in ["h1", "h2"] {
        assert!(out.lines().any(|l| l.starts_with(&format!("{host:<4}  {run}"))), "{host}'s {run}: {out}");
    }
}

/// A journal line of more than a MiB (a server whose `max_payload` was raised for it) is mirrored,
/// and so is every line after it: the relay reads past it though it reads it again each time.
#[test]
fn a_journal_line_of_megabytes_does_not_stop_the_lines_after_it() {
    if !available() {
        return;
    }
    let nats = Cluster::start_conf(1, "max_payload: 8388608\n");
    let mut h1 = Host::new("h1", &nats.url());
    let st = h1.b.harness("tool").arg("run").arg(h1.b.plan(DONE_PLAN)).stdout(Stdio::null()).status().unwrap();
    assert!(st.success());
    let journal = h1.b.repo().join("runstate/done.jsonl");
    let append = |line: String| {
        let mut f = std::fs::OpenOptions::new().append(true).open(&journal).unwrap();
        f.write_all(format!("{line}\n").as_bytes()).unwrap();
    };
    // A record of a kind harness does not know (kept, as any reader of the journal keeps it).
    append(serde_json::json!({ "v": 1, "kind": "note", "text": "n".repeat(3 << 20) }).to_string());
    h1.start_relay();
    let fleet_home = tempfile::tempdir().unwrap();
    let fleet = fleet_api(fleet_home.path(), &nats.url(), &[]);
    let api1 = ApiProc::start(&h1.b.home(), &[]);
    let run = h1.b.run_id();
    let path = format!("/runs/{run}/journal");
    let same = |want: &str| {
        wait_for(T, || {
            let f = try_pages(fleet.port, &format!("/hosts/h1{path}")).ok()?;
            let h = all_pages(api1.port, &path);
            (as_host_wrote(&f) == h && h.contains(want)).then_some(())
        })
    };
    assert!(same("nnnn").is_some(), "the big line mirrored");
    // The big line is now the last the relay published: what comes after it still comes.
    append(serde_json::json!({ "v": 1, "kind": "note", "text": "after" }).to_string());
    assert!(same("\"after\"").is_some(), "the line after the big one mirrored");
}
