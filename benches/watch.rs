//! Benchmark of `GET /watch` at scale: 100 runs moving (each journal gets a record every second,
//! fsynced as in production, from 100 writer threads staggered over the second) and 1,000 `/watch`
//! clients on one `harness api`. Per record and client: journal append returned → the client has
//! the event (goal p99 ≤ 10 ms on this machine; the clients are async tasks on two threads of this
//! process); the API's RSS before the clients, with them, and its peak (goal ≤ 64 MB).
//!
//! Then the floor of this machine, with the same clients: two bare threads writing events of a
//! frame's size straight to the sockets (no HTTP, journal or runtime), at the same rate and one
//! event at a time. The API's p99 is printed as a ratio of the floor's. Last, 10 s of the same over
//! the API's Unix socket (`harness api --unix`).
//!
//! Loopback only. Run: `cargo bench --bench watch` (`HARNESS_WATCH_SECS`, default 20; `HARNESS_WATCH_CLIENTS`,
//! default 1000). Figures printed; nothing asserted.

use harness::os::home::Home;
use harness::state::journal::{Journal, Record, RunEvent};
use harness::state::registry;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod support;

const RUNS: usize = 100;

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

/// Where the clients connect.
#[derive(Clone)]
enum Addr {
    Tcp(u16),
    Unix(std::path::PathBuf),
}

trait Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> Io for T {}

/// The clients' receipts: (marker, when the client had the event).
type Receipts = Arc<Mutex<Vec<(String, Instant)>>>;

/// `n` SSE readers as async tasks on `rt`: each sends one `GET /watch?since=now` and records when
/// each marked event arrived.
struct Clients {
    tasks: Vec<tokio::task::JoinHandle<()>>,
    receipts: Receipts,
    received: Arc<AtomicU64>,
}

impl Clients {
    fn connect(rt: &tokio::runtime::Runtime, addr: &Addr, n: usize) -> Clients {
        let receipts: Receipts = Arc::default();
        let received = Arc::new(AtomicU64::new(0));
        let tasks = (0..n)
            .map(|_| {
                let (receipts, received, addr) = (receipts.clone(), received.clone(), addr.clone());
                rt.spawn(async move {
                    // A lean reader (as a browser's EventSource would be): raw reads, no timer per
                    // line; it ends when the server goes away at the end of the bench.
                    use tokio::io::{AsyncReadExt, AsyncWriteExt};
                    let (mut s, host): (Box<dyn Io>, String) = match addr {
                        Addr::Tcp(port) => (
                            Box::new(tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap()),
                            format!("127.0.0.1:{port}"),
                        ),
                        Addr::Unix(path) => {
                            (Box::new(tokio::net::UnixStream::connect(path).await.unwrap()), "localhost".into())
                        }
                    };
                    let req = format!("GET /watch?since=now HTTP/1.1\r\nHost: {host}\r\n\r\n");
                    s.write_all(req.as_bytes()).await.unwrap();
                    let finder = memchr::memmem::Finder::new(b"\"detail\":\"m");
                    let (mut buf, mut mine) = (Vec::with_capacity(16 * 1024), Vec::new());
                    loop {
                        if buf.capacity() - buf.len() < 4096 {
                            buf.reserve(16 * 1024);
                        }
                        match s.read_buf(&mut buf).await {
                            Ok(0) | Err(_) => break,
                            Ok(_) => {}
                        }
                        let now = Instant::now();
                        // Whole events only (they end with a blank line); the rest waits.
                        let Some(end) = memchr::memmem::rfind(&buf, b"\n\n") else { continue };
                        // The marker is the record's detail: `m<k>`.
                        for at in finder.find_iter(&buf[..end]) {
                            let k = buf[at + 10..].iter().take_while(|c| **c != b'"').map(|c| *c as char).collect();
                            received.fetch_add(1, Ordering::Relaxed);
                            mine.push((k, now));
                        }
                        buf.drain(..end + 2);
                    }
                    receipts.lock().unwrap().extend(mine);
                })
            })
            .collect();
        Clients { tasks, receipts, received }
    }

    /// Waits for every reader to end (close their server first); returns the events received, the
    /// latencies from `sent` in ms, and how many came before their `sent` time (counted as 0).
    fn finish(self, rt: &tokio::runtime::Runtime, sent: &HashMap<String, Instant>) -> (u64, Vec<f64>, usize) {
        rt.block_on(async {
            for t in self.tasks {
                let _ = t.await;
            }
        });
        let mut early = 0;
        let lat = self
            .receipts
            .lock()
            .unwrap()
            .iter()
            .filter_map(|(k, at)| {
                let done = sent.get(k)?;
                if at < done {
                    early += 1;
                }
                Some(at.saturating_duration_since(*done).as_secs_f64() * 1e3)
            })
            .collect();
        (self.received.load(Ordering::Relaxed), lat, early)
    }
}

/// The floor of this machine: the same clients, fed by two bare threads (this machine has two
/// cores) that each own half of the sockets and write them events of a `/watch` frame's size: no
/// HTTP, no journal, no runtime. `rate` events a second for `secs`; a thread that finds several
/// events due writes them in one write per socket (the best any server could do). Returns the
/// clients' p50/p99 from each event's due time, and the median time one pass over all sockets took.
fn floor(rt: &tokio::runtime::Runtime, n: usize, rate: u64, secs: u64) -> (f64, f64, f64) {
    use std::io::Write;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let clients = Clients::connect(rt, &Addr::Tcp(port), n);
    let mut socks: Vec<std::net::TcpStream> = (0..n)
        .map(|_| {
            let (s, _) = listener.accept().unwrap();
            s.set_nodelay(true).unwrap();
            s
        })
        .collect();
    let total = rate * secs;
    let pad = "x".repeat(220);
    let frame = |k: u64| {
        format!(
            "id: w1.0123456789abcdef.12:{k}\ndata: {{\"v\":\"watch/v1\",\"run\":\"{pad}\",\"record\":{{\"detail\":\"m{k}\"}}}}\n\n"
        )
    };
    let start = Instant::now() + Duration::from_millis(100);
    let due = |k: u64| start + Duration::from_micros(k * 1_000_000 / rate);
    let spans: Mutex<Vec<f64>> = Mutex::default();
    std::thread::scope(|scope| {
        for half in socks.chunks_mut(n.div_ceil(2)) {
            let (frame, spans) = (&frame, &spans);
            scope.spawn(move || {
                let mut next = 0;
                while next < total {
                    std::thread::sleep(due(next).saturating_duration_since(Instant::now()));
                    let now = Instant::now();
                    let mut batch = String::new();
                    while next < total && due(next) <= now {
                        batch.push_str(&frame(next));
                        next += 1;
                    }
                    half.iter_mut().for_each(|s| s.write_all(batch.as_bytes()).unwrap());
                    spans.lock().unwrap().push(now.elapsed().as_secs_f64() * 1e3);
                }
            });
        }
    });
    std::thread::sleep(Duration::from_secs(1));
    socks.clear();
    let sent: HashMap<String, Instant> = (0..total).map(|k| (format!("m{k}"), due(k))).collect();
    let (got, mut lat, _) = clients.finish(rt, &sent);
    assert_eq!(got, total * n as u64, "the floor lost events");
    (pct(&mut lat, 0.5), pct(&mut lat, 0.99), pct(&mut spans.into_inner().unwrap(), 0.5))
}

/// One measured stretch on a fresh home and API: `RUNS` runs moving for `secs`, `clients` watchers
/// over TCP or the API's Unix socket.
struct Phase {
    appends: u64,
    got: u64,
    lat: Vec<f64>,
    early: usize,
    connect_s: f64,
    /// API RSS in kB: idle, with the clients, at the end, peak.
    rss: [u64; 4],
}

fn phase(rt: &tokio::runtime::Runtime, clients: usize, secs: u64, unix: bool) -> Phase {
    let dir = tempfile::tempdir().unwrap();
    let home = Home::at(dir.path().join("home"));
    home.ensure().unwrap();
    let mut journals = Vec::new();
    for i in 0..RUNS {
        let repo = dir.path().join(format!("repos/r{i}"));
        let p = support::bench_pointer(&repo, "bench", &format!("r{i}"));
        let j = Journal::open(&p.journal_path()).unwrap();
        j.append(&Record::run(RunEvent::Started, "bench", None)).unwrap();
        registry::write(&home, &p).unwrap();
        journals.push(j);
    }
    let sock = home.root.join("sock/api.sock");
    let sock_arg = sock.to_string_lossy().into_owned();
    let extra: &[&str] = if unix { &["--unix", &sock_arg] } else { &[] };
    let api = support::ApiProc::start(&home.root, extra);
    let pid = api.proc.child.id();
    let addr = if unix { Addr::Unix(sock) } else { Addr::Tcp(api.port) };
    std::thread::sleep(Duration::from_millis(500));
    let rss_idle = support::status_kb(pid, "VmRSS:");

    // Appended records, by marker: when the append returned.
    let appended: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let t0 = Instant::now();
    let watchers = Clients::connect(rt, &addr, clients);
    std::thread::sleep(Duration::from_secs(2));
    let connect_s = t0.elapsed().as_secs_f64();
    let rss_clients = support::status_kb(pid, "VmRSS:");

    // 100 writers, one per run, each a record a second, staggered over the second.
    let until = Instant::now() + Duration::from_secs(secs);
    let mut writers = Vec::new();
    for (i, j) in journals.into_iter().enumerate() {
        let appended = appended.clone();
        writers.push(std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis((i as u64 * 1000) / RUNS as u64));
            let mut n = 0u64;
            let mut paused = false;
            while Instant::now() < until {
                let k = format!("m{i}-{n}");
                paused = !paused;
                let ev = if paused { RunEvent::Paused } else { RunEvent::Resumed };
                // When the append returned (after its fdatasync): a client can have the record
                // before that (the line is readable once written); it counts as 0.
                let rec = Record::run(ev, "bench", Some(k.clone()));
                j.append(&rec).unwrap();
                appended.lock().unwrap().insert(k, Instant::now());
                n += 1;
                std::thread::sleep(Duration::from_secs(1));
            }
            n
        }));
    }
    let appends: u64 = writers.into_iter().map(|w| w.join().unwrap()).sum();
    std::thread::sleep(Duration::from_secs(2));
    let rss_end = support::status_kb(pid, "VmRSS:");
    let rss_peak = support::status_kb(pid, "VmHWM:");
    drop(api);
    let (got, lat, early) = watchers.finish(rt, &appended.lock().unwrap());
    Phase { appends, got, lat, early, connect_s, rss: [rss_idle, rss_clients, rss_end, rss_peak] }
}

fn main() {
    harness::os::service::raise_fd_limit();
    let secs: u64 = std::env::var("HARNESS_WATCH_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(20);
    let clients: usize = std::env::var("HARNESS_WATCH_CLIENTS").ok().and_then(|s| s.parse().ok()).unwrap_or(1000);
    // The clients: async tasks on a runtime of two threads (1,000 OS threads would spend the 2 cores
    // on context switches and be measured as latency).
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let Phase { appends, got, mut lat, early, connect_s, rss: [rss_idle, rss_clients, rss_end, rss_peak] } =
        phase(&rt, clients, secs, false);
    let expected = appends * clients as u64;
    let mb = |kb: u64| kb as f64 / 1024.0;
    println!(
        "/watch: {RUNS} runs moving ({appends} records in {secs} s, fsynced), {clients} clients over loopback TCP (given {connect_s:.1} s to connect)"
    );
    println!("  delivered {got} of {expected} (record x client) events");
    if !lat.is_empty() {
        let n = lat.len();
        let (p50, p99, max) = (pct(&mut lat, 0.5), pct(&mut lat, 0.99), pct(&mut lat, 1.0));
        println!("  {early} of {n} receipts came before the append (and its fdatasync) returned: counted as 0 ms");
        println!(
            "  append -> client: p50 {p50:.2} ms, p99 {p99:.2} ms, max {max:.2} ms (n = {n}) [goal p99 <= 10 ms: {:.2}x]",
            p99 / 10.0
        );
    }
    // The floor at the API's load, and one event at a time (how long one fan-out takes).
    let (f50, f99, _) = floor(&rt, clients, RUNS as u64, secs.min(10));
    let (o50, o99, span) = floor(&rt, clients, 10, 5);
    println!(
        "  floor of this machine (the same clients fed by two bare threads, half the sockets each, events due together in one write; no HTTP, journal or runtime):"
    );
    println!(
        "    at the same {RUNS} events a second: p50 {f50:.2} ms, p99 {f99:.2} ms; the API's p99 is {:.2}x this floor's",
        if lat.is_empty() { f64::NAN } else { pct(&mut lat, 0.99) / f99 }
    );
    println!(
        "    one event at a time (10 a second): p50 {o50:.2} ms, p99 {o99:.2} ms; one write of an event to all {clients} sockets took {span:.2} ms (median)"
    );
    let mut u = phase(&rt, clients, secs.min(10), true);
    if !u.lat.is_empty() {
        let (p50, p99) = (pct(&mut u.lat, 0.5), pct(&mut u.lat, 0.99));
        println!(
            "  the same over the API's Unix socket (harness api --unix: the CLI's way in, and a local UI backend's): {} of {} events in {} s, p50 {p50:.2} ms, p99 {p99:.2} ms [goal p99 <= 10 ms: {:.2}x]",
            u.got,
            u.appends * clients as u64,
            secs.min(10),
            p99 / 10.0
        );
    }
    println!(
        "  API RSS: {:.1} MB idle, {:.1} MB with the clients, {:.1} MB at the end, peak {:.1} MB [goal <= 64 MB: {:.2}x]",
        mb(rss_idle),
        mb(rss_clients),
        mb(rss_end),
        mb(rss_peak),
        mb(rss_peak) / 64.0
    );
}
