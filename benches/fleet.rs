//! Benchmarks of the fleet (release build, real processes, a real `nats-server` on loopback), each
//! against the local API on the same load, in one run:
//! 1. latency: an event appended to a live task's log → the fleet's `/stream` client (through the
//!    relay, JetStream and the fleet API) vs → the host's own `/stream` client; p50/p99;
//! 2. relay throughput: a home whose runs already hold journals and claude logs, mirrored from
//!    nothing — records (journal lines + events) per second with the relay pinned to one core, against
//!    `harness debug normalize-events` over the same claude lines on that core;
//! 3. `GET /runs?limit=100` of a fleet of 10,000 runs over 5 hosts, cold (a fresh fleet API's first
//!    page) and warm, against a home's own API over 10,000 runs;
//! 4. the relay's and the fleet API's peak RSS.
//!
//! Run: `cargo bench --bench fleet` (needs nats-server). Figures printed; nothing asserted.
//! `cargo bench --bench fleet -- pages` runs part 3 alone; `HARNESS_BENCH_RUNS` and
//! `HARNESS_BENCH_HOSTS` change its scale (10,000 and 5 by default).

mod support;

use harness::state::journal::{Record, RunEvent, TaskState};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::{ApiProc, Proc, status_kb};

fn nats_server() -> Option<&'static str> {
    ["nats-server", "/usr/sbin/nats-server"]
        .into_iter()
        .find(|b| Command::new(b).arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok())
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// One JetStream server (a single node: the bench measures harness, not the cluster's replication).
fn start_nats(dir: &Path) -> (Proc, String) {
    let port = free_port();
    let log = std::fs::File::create(dir.join("nats.log")).unwrap();
    let child = Command::new(nats_server().unwrap())
        .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
        .arg(dir.join("nats"))
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    support::common::wait_for(Duration::from_secs(20), || {
        std::fs::read_to_string(dir.join("nats.log")).unwrap_or_default().contains("Server is ready").then_some(())
    })
    .expect("nats-server ready");
    (Proc { child }, format!("nats://127.0.0.1:{port}"))
}

/// `harness relay` for `home` as `host` (pinned to `cpu` when given).
fn relay(home: &Path, url: &str, host: &str, cpu: Option<usize>) -> Proc {
    let bin = env!("CARGO_BIN_EXE_harness");
    let mut cmd = match cpu {
        Some(c) => {
            let mut t = Command::new("taskset");
            t.args(["-c", &c.to_string(), bin]);
            t
        }
        None => Command::new(bin),
    };
    cmd.args(["relay", "--nats", url, "--host", host, "--replicas", "1"])
        .env("HARNESS_HOME", home)
        .env("HARNESS_JOURNAL_FSYNC", "0")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    Proc { child: cmd.spawn().unwrap() }
}

fn fleet_api(dir: &Path, url: &str) -> ApiProc {
    let home = dir.join(format!("fleet-home-{}", free_port()));
    std::fs::create_dir_all(&home).unwrap();
    ApiProc::start(&home, &["--fleet", url, "--replicas", "1"])
}

fn delta(i: usize) -> String {
    format!(
        "{{\"type\":\"stream_event\",\"event\":{{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"w{i} \"}}}},\"session_id\":\"s\"}}\n"
    )
}

fn open_sse(port: u16, path: &str) -> BufReader<TcpStream> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n").unwrap();
    BufReader::new(s)
}

/// Arrival times of `id:` lines of an SSE stream, on a channel.
fn arrivals(mut r: BufReader<TcpStream>) -> std::sync::mpsc::Receiver<(String, Instant)> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        loop {
            line.clear();
            if r.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            if let Some(id) = line.strip_prefix("id: ")
                && tx.send((id.trim().to_string(), Instant::now())).is_err()
            {
                return;
            }
        }
    });
    rx
}

fn pct(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Appends one line to a live task's log (with its stamp, as the stamper writes it) and waits for
/// its seq on `rx`: the time it took.
fn one(log: &Path, i: usize, line_no: usize, rx: &std::sync::mpsc::Receiver<(String, Instant)>) -> Duration {
    let t0 = Instant::now();
    let stamp = format!(
        "{line_no} 1 {}\n",
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis()
    );
    std::fs::OpenOptions::new()
        .append(true)
        .open(format!("{}.times", log.display()))
        .unwrap()
        .write_all(stamp.as_bytes())
        .unwrap();
    std::fs::OpenOptions::new().append(true).open(log).unwrap().write_all(delta(i).as_bytes()).unwrap();
    loop {
        let (id, at) = rx.recv_timeout(Duration::from_secs(20)).expect("the event arrives");
        if id == line_no.to_string() {
            return at.duration_since(t0);
        }
    }
}

fn latency(dir: &Path, url: &str) {
    let home = dir.join("lat-home");
    let (run, logs, _guard) = support::hanging_run(dir, &home, "lat", 1);
    let log = logs.join("T0.log");
    let _relay = relay(&home, url, "lat", None);
    let local = ApiProc::start(&home, &[]);
    let fleet = fleet_api(dir, url);
    let path = format!("/runs/{run}/tasks/T0/stream");
    support::common::wait_for(Duration::from_secs(30), || {
        let r = support::common::http(fleet.port, "GET", &format!("/runs/{run}"), &[], None);
        (r.status == 200 && r.json()["live"] == true).then_some(())
    })
    .expect("the fleet sees the live run");
    let local_rx = arrivals(open_sse(local.port, &path));
    let fleet_rx = arrivals(open_sse(fleet.port, &path));
    let mut line_no = std::fs::read_to_string(&log).unwrap().lines().count();
    let n = 2_000;
    let (mut lo, mut fl) = (Vec::with_capacity(n), Vec::with_capacity(n));
    // Interleaved, one append at a time: each side sees the same load.
    for i in 0..n {
        line_no += 1;
        lo.push(one(&log, i, line_no, &local_rx));
        while let Ok((id, at)) = fleet_rx.recv_timeout(Duration::from_millis(0)) {
            let _ = (id, at);
        }
        line_no += 1;
        let t0 = Instant::now();
        let stamp = format!(
            "{line_no} 1 {}\n",
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis()
        );
        std::fs::OpenOptions::new()
            .append(true)
            .open(format!("{}.times", log.display()))
            .unwrap()
            .write_all(stamp.as_bytes())
            .unwrap();
        std::fs::OpenOptions::new().append(true).open(&log).unwrap().write_all(delta(i).as_bytes()).unwrap();
        loop {
            let (id, at) = fleet_rx.recv_timeout(Duration::from_secs(20)).expect("the event through the fleet");
            if id == line_no.to_string() {
                fl.push(at.duration_since(t0));
                break;
            }
        }
        while local_rx.recv_timeout(Duration::from_millis(0)).is_ok() {}
    }
    let (l50, l99, f50, f99) = (pct(&mut lo, 0.5), pct(&mut lo, 0.99), pct(&mut fl, 0.5), pct(&mut fl, 0.99));
    println!("1. append -> /stream client, {n} events each, interleaved:");
    println!("   local API:  p50 {:.2} ms, p99 {:.2} ms", ms(l50), ms(l99));
    println!(
        "   fleet API:  p50 {:.2} ms, p99 {:.2} ms   [ratio p50 {:.2}x, p99 {:.2}x; goal p99 <= 3x local]",
        ms(f50),
        ms(f99),
        f50.as_secs_f64() / l50.as_secs_f64(),
        f99.as_secs_f64() / l99.as_secs_f64()
    );
}

/// started + 12 tasks × (leased, implemented, gated, committed) + finished: 50 records.
fn journal_text(log_dir: &Path) -> String {
    let mut s = String::new();
    let mut push = |r: Record| {
        s.push_str(&serde_json::to_string(&r).unwrap());
        s.push('\n');
    };
    push(Record::run(RunEvent::Started, "bench", None));
    for t in 0..12 {
        let id = harness::ids::TaskId::parse(&format!("T{t}")).unwrap();
        for st in [TaskState::Leased, TaskState::Implemented, TaskState::Gated, TaskState::Committed] {
            let mut r = Record::task(&id, st);
            if st == TaskState::Leased {
                r.logfile = Some(log_dir.join(format!("T{t}.log")));
            }
            if st == TaskState::Committed {
                r.no_changes = Some(true);
            }
            r.session_id = Some("6c1e2b4a-8d9f-4e3c-b2a1-7f6e5d4c3b2a".into());
            push(r.into());
        }
    }
    push(Record::run(RunEvent::Finished, "bench", None));
    s
}

/// `n` finished runs in `home`, each with a 50-record journal and, when `log` is given, that log for
/// each of its 12 tasks.
fn fill_home(dir: &Path, home: &Path, n: usize, tag: &str, log: Option<&[u8]>) {
    let h = harness::os::home::Home::at(home);
    h.ensure().unwrap();
    let plan = serde_json::json!({"v":"plan/v1","slug":"bench","tasks":
        (0..12).map(|i| serde_json::json!({"id":format!("T{i}"),"wave":1 + i / 4,"adapter":"claude","prompt":"p"})).collect::<Vec<_>>()});
    let plan = serde_json::to_vec(&plan).unwrap();
    for i in 0..n {
        let repo = dir.join(format!("repos-{tag}/r{i}"));
        let p = support::bench_pointer(&repo, "bench", &format!("r{i}"));
        let logs = p.runstate_dir.join("bench.logs");
        std::fs::create_dir_all(&logs).unwrap();
        std::fs::write(p.runstate_dir.join("bench.jsonl"), journal_text(&logs)).unwrap();
        std::fs::write(p.runstate_dir.join("bench.plan.json"), &plan).unwrap();
        if let Some(log) = log {
            for t in 0..12 {
                std::fs::write(logs.join(format!("T{t}.log")), log).unwrap();
            }
        }
        harness::state::registry::write(&h, &p).unwrap();
    }
}

/// Messages the stream holds (its `/hosts`-independent count, through a fleet API's own view of the
/// journal is not enough: asked of the server's monitoring-free API by `nats-server`'s JetStream).
fn stream_messages(url: &str, stream: &str) -> u64 {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let c = async_nats::connect(url).await.unwrap();
        let js = async_nats::jetstream::new(c);
        match js.get_stream(stream).await {
            Ok(mut s) => s.info().await.map(|i| i.state.messages).unwrap_or(0),
            Err(_) => 0,
        }
    })
}

fn throughput(dir: &Path, url: &str) {
    let cap = std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/streams/claude/tool-partial.jsonl"))
        .unwrap();
    let mut log = Vec::new();
    for _ in 0..4 {
        log.extend_from_slice(&cap);
    }
    let lines_per_log = log.iter().filter(|b| **b == b'\n').count();
    let home = dir.join("tp-home");
    let runs = 40;
    fill_home(dir, &home, runs, "tp", Some(&log));
    // What the relay must publish: every journal line, and every event of every log.
    let normalized = {
        let out = Command::new(env!("CARGO_BIN_EXE_harness"))
            .args(["debug", "normalize-events", "claude", "--run", "0123456789ab--bench", "--task", "T0"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .and_then(|mut c| {
                c.stdin.take().unwrap().write_all(&log)?;
                c.wait_with_output()
            })
            .unwrap();
        out.stdout.iter().filter(|b| **b == b'\n').count()
    };
    let want = (runs * 50 + runs * 12 * normalized) as u64;
    let (j0, e0) = (stream_messages(url, "HARNESS_JOURNAL"), stream_messages(url, "HARNESS_EVENTS"));
    let t = Instant::now();
    let r = relay(&home, url, "tp", Some(0));
    let pid = r.child.id();
    let mut hwm = 0;
    loop {
        let got = stream_messages(url, "HARNESS_JOURNAL") - j0 + stream_messages(url, "HARNESS_EVENTS") - e0;
        hwm = hwm.max(status_kb(pid, "VmHWM:"));
        if got >= want {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(900), "the relay published {got} of {want} in 15 min");
        std::thread::sleep(Duration::from_millis(100));
    }
    let secs = t.elapsed().as_secs_f64();
    drop(r);
    // The normalizer's claude rate on the same core, over the same lines (many times over).
    let mut big = Vec::new();
    while big.len() < 50 << 20 {
        big.extend_from_slice(&log);
    }
    let big_lines = big.iter().filter(|b| **b == b'\n').count();
    let input = dir.join("big.jsonl");
    std::fs::write(&input, &big).unwrap();
    let t = Instant::now();
    let st = Command::new("taskset")
        .args([
            "-c",
            "0",
            env!("CARGO_BIN_EXE_harness"),
            "debug",
            "normalize-events",
            "claude",
            "--run",
            "0123456789ab--bench",
            "--task",
            "T0",
        ])
        .stdin(std::fs::File::open(&input).unwrap())
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(st.success());
    let norm_rate = big_lines as f64 / t.elapsed().as_secs_f64();
    println!(
        "2. relay throughput (relay pinned to core 0; {runs} runs x (50 journal records + 12 logs of {lines_per_log} claude lines)):"
    );
    println!(
        "   {want} records (journal lines + events) in {secs:.1} s = {:.0} records/s   [goal >= 20,000/s: {:.2}x]",
        want as f64 / secs,
        want as f64 / secs / 20_000.0
    );
    println!(
        "   the normalizer on the same core: {norm_rate:.0} claude lines/s: the relay mirrors at {:.3}x the normalizer's rate; relay peak RSS {:.1} MB",
        want as f64 / secs / norm_rate,
        hwm as f64 / 1024.0
    );
}

/// `get`, asked again while the answer is a 503 (a fleet API just started still reading its streams):
/// the time from the first ask to the page — what a client of a restarted fleet API waits.
fn get_patiently(port: u16, path: &str) -> Duration {
    let t = Instant::now();
    loop {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(300))).unwrap();
        write!(s, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n").unwrap();
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).unwrap();
        if buf.starts_with(b"HTTP/1.1 200") {
            return t.elapsed();
        }
        assert!(buf.starts_with(b"HTTP/1.1 503"), "{path}: {}", String::from_utf8_lossy(&buf[..buf.len().min(200)]));
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn get(port: u16, path: &str) -> Duration {
    let t = Instant::now();
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(300))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n").unwrap();
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).unwrap();
    let d = t.elapsed();
    assert!(buf.starts_with(b"HTTP/1.1 200"), "{path}: {}", String::from_utf8_lossy(&buf[..buf.len().min(200)]));
    d
}

/// `Harness-Total` of `GET /runs?limit=1`, waiting as long as the API takes (a fleet API reads its
/// streams before its first answer); `None` on any failure.
fn total(port: u16) -> Option<usize> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(300))).ok()?;
    write!(s, "GET /runs?limit=1 HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n").ok()?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).ok()?;
    let text = String::from_utf8_lossy(&buf);
    text.lines()
        .take_while(|l| !l.is_empty())
        .find_map(|l| l.strip_prefix("harness-total: "))
        .and_then(|t| t.trim().parse().ok())
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// A count from the environment (to try the page bench at another scale), else `default`.
fn scale(var: &str, default: usize) -> usize {
    std::env::var(var).ok().and_then(|v| v.parse().ok()).filter(|&n| n > 0).unwrap_or(default)
}

fn pages(dir: &Path, url: &str) {
    let runs = scale("HARNESS_BENCH_RUNS", 10_000);
    let hosts = scale("HARNESS_BENCH_HOSTS", 5);
    // Each host the same share: the runs rounded down to a multiple of the hosts.
    let runs = (runs / hosts).max(1) * hosts;
    // The local baseline: one home of all the runs.
    let local_home = dir.join("page-local");
    fill_home(dir, &local_home, runs, "local", None);
    // The fleet: the same runs over the hosts, each host with its relay.
    let mut relays = Vec::new();
    for h in 0..hosts {
        let home = dir.join(format!("page-h{h}"));
        fill_home(dir, &home, runs / hosts, &format!("h{h}"), None);
        relays.push(relay(&home, url, &format!("h{h}"), None));
    }
    let t = Instant::now();
    let probe = fleet_api(dir, url);
    let mut said = Instant::now();
    support::common::wait_for(Duration::from_secs(1800), || {
        let n = total(probe.port);
        if said.elapsed() >= Duration::from_secs(30) {
            said = Instant::now();
            println!("   ({:.0} s: the fleet lists {n:?} of {runs} runs)", t.elapsed().as_secs_f64());
        }
        (n == Some(runs)).then_some(())
    })
    .expect("the fleet lists every run");
    println!(
        "   ({hosts} relays mirrored {runs} runs x 50 records and their views in {:.1} s)",
        t.elapsed().as_secs_f64()
    );
    // Measured once the relays are done: every host's heartbeat fresh again.
    support::common::wait_for(Duration::from_secs(600), || {
        let h = support::common::http(probe.port, "GET", "/hosts", &[], None).json();
        // This part's hosts only: the earlier parts' relays are gone (their hosts offline).
        let list = h["hosts"].as_array().cloned().unwrap_or_default();
        let online = |name: &str| list.iter().any(|h| h["host"] == name && h["online"] == true);
        (0..hosts).all(|i| online(&format!("h{i}"))).then_some(())
    })
    .expect("every host online");
    drop(probe);
    // Both APIs measured on the same machine load: the relays idle beside them.
    let (mut cold, mut warm) = (Vec::new(), Vec::new());
    for round in 0..4 {
        let api = ApiProc::start(&local_home, &[]);
        let d = get(api.port, "/runs?limit=100");
        if round > 0 {
            cold.push(d);
        }
        for _ in 0..30 {
            warm.push(get(api.port, "/runs?limit=100"));
        }
    }
    let (local_cold, local_warm) = (median(cold), median(warm));
    let (mut cold, mut warm, mut rss) = (Vec::new(), Vec::new(), 0);
    for _ in 0..3 {
        let api = fleet_api(dir, url);
        cold.push(get_patiently(api.port, "/runs?limit=100"));
        for _ in 0..30 {
            warm.push(get(api.port, "/runs?limit=100"));
        }
        rss = rss.max(status_kb(api.proc.child.id(), "VmHWM:"));
    }
    let (fleet_cold, fleet_warm) = (median(cold), median(warm));
    let relay_rss = relays.iter().map(|r| status_kb(r.child.id(), "VmHWM:")).max().unwrap_or(0);
    println!("3. GET /runs?limit=100 at {runs} runs:");
    println!("   local API (one home):   cold {:.1} ms, warm {:.2} ms", ms(local_cold), ms(local_warm));
    println!(
        "   fleet API ({hosts} hosts):    cold {:.1} ms, warm {:.2} ms   [ratio cold {:.2}x, warm {:.2}x; goal <= 2x local]",
        ms(fleet_cold),
        ms(fleet_warm),
        fleet_cold.as_secs_f64() / local_cold.as_secs_f64(),
        fleet_warm.as_secs_f64() / local_warm.as_secs_f64()
    );
    println!(
        "4. peak RSS: fleet API {:.1} MB ({runs} rows held), relay {:.1} MB ({} runs)",
        rss as f64 / 1024.0,
        relay_rss as f64 / 1024.0,
        runs / hosts
    );
}

fn main() {
    if nats_server().is_none() {
        println!("SKIPPED: no nats-server (apt-get install nats-server)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (_nats, url) = start_nats(dir.path());
    let which: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    let want = |w: &str| which.is_empty() || which.iter().any(|x| x == w);
    if want("latency") {
        latency(dir.path(), &url);
    }
    if want("throughput") {
        throughput(dir.path(), &url);
    }
    if want("pages") {
        // A JetStream of its own: the earlier parts' runs (their hosts gone) are not counted.
        let own = dir.path().join("pages");
        std::fs::create_dir_all(&own).unwrap();
        let (_nats, url) = start_nats(&own);
        pages(dir.path(), &url);
    }
    let _ = PathBuf::new();
}
