//! Benchmark of `GET /watch` at scale: 100 runs moving (each journal gets a record every second,
//! fsynced as in production, from 100 writer threads staggered over the second) and 1,000 `/watch`
//! clients on one `harness api`. Per record and client: journal append returned → the client has
//! the event (goal p99 ≤ 10 ms on this machine; the clients are async tasks on two threads of this
//! process); the API's RSS before the clients, with them, and
//! its peak (goal ≤ 64 MB).
//!
//! Loopback only. Run: `cargo bench --bench watch` (`HARNESS_WATCH_SECS`, default 20; `HARNESS_WATCH_CLIENTS`,
//! default 1000). Figures printed; nothing asserted.

use harness::home::Home;
use harness::journal::{Journal, Record, RunEvent};
use harness::registry;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod support;

const RUNS: usize = 100;

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

fn main() {
    harness::service::raise_fd_limit();
    let secs: u64 = std::env::var("HARNESS_WATCH_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(20);
    let clients: usize = std::env::var("HARNESS_WATCH_CLIENTS").ok().and_then(|s| s.parse().ok()).unwrap_or(1000);
    let dir = tempfile::tempdir().unwrap();
    let home = Home::at(dir.path().join("home"));
    home.ensure().unwrap();
    let mut journals = Vec::new();
    for i in 0..RUNS {
        let repo = dir.path().join(format!("repos/r{i}"));
        let p = support::bench_pointer(&repo, "bench", &format!("r{i}"));
        let run_id = p.run_id.clone();
        let j = Journal::open(&p.journal_path()).unwrap();
        j.append(&Record::run(RunEvent::Started, "bench", None)).unwrap();
        registry::write(&home, &p).unwrap();
        journals.push((run_id.to_string(), j));
    }
    let api = support::ApiProc::start(&home.root, &[]);
    let pid = api.proc.child.id();
    let port = api.port;
    std::thread::sleep(Duration::from_millis(500));
    let rss_idle = support::status_kb(pid, "VmRSS:");

    // Appended records, by marker: when the append returned.
    let appended: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    // Every client's receipts: (marker, when it had the event).
    let receipts: Arc<Mutex<Vec<(String, Instant)>>> = Arc::default();
    let received = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    // The clients: async tasks on a runtime of two threads (1,000 OS threads would spend the 2 cores
    // on context switches and be measured as latency).
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let mut readers = Vec::new();
    let t0 = Instant::now();
    for _ in 0..clients {
        let (receipts, stop, received) = (receipts.clone(), stop.clone(), received.clone());
        readers.push(rt.spawn(async move {
            use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
            let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
            s.write_all(format!("GET /watch?since=now HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n").as_bytes())
                .await
                .unwrap();
            let mut r = tokio::io::BufReader::new(s);
            let mut line = String::new();
            let mut mine = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                line.clear();
                match tokio::time::timeout(Duration::from_millis(500), r.read_line(&mut line)).await {
                    Ok(Ok(0)) | Ok(Err(_)) => break,
                    Ok(Ok(_)) => {}
                    Err(_) => continue,
                }
                // The marker is the record's detail: `m<k>`.
                if let Some(i) = line.find("\"detail\":\"m") {
                    let now = Instant::now();
                    let k: String = line[i + 10..].chars().take_while(|c| *c != '"').collect();
                    received.fetch_add(1, Ordering::Relaxed);
                    mine.push((k, now));
                }
            }
            receipts.lock().unwrap().extend(mine);
        }));
    }
    std::thread::sleep(Duration::from_secs(2));
    let connect_s = t0.elapsed().as_secs_f64();
    let rss_clients = support::status_kb(pid, "VmRSS:");

    // 100 writers, one per run, each a record a second, staggered over the second.
    let until = Instant::now() + Duration::from_secs(secs);
    let mut writers = Vec::new();
    for (i, (_, j)) in journals.into_iter().enumerate() {
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
    stop.store(true, Ordering::Relaxed);
    rt.block_on(async {
        for r in readers {
            let _ = r.await;
        }
    });
    let appended = appended.lock().unwrap().clone();
    let mut early = 0usize;
    let mut lat: Vec<f64> = receipts
        .lock()
        .unwrap()
        .iter()
        .filter_map(|(k, at)| {
            let done = appended.get(k)?;
            if at < done {
                early += 1;
            }
            Some(at.saturating_duration_since(*done).as_secs_f64() * 1e3)
        })
        .collect();
    let got = received.load(Ordering::Relaxed);
    let expected = appends * clients as u64;
    let mb = |kb: u64| kb as f64 / 1024.0;
    println!(
        "/watch: {RUNS} runs moving ({appends} records in {secs} s, fsynced), {clients} clients (given {connect_s:.1} s to connect)"
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
    println!(
        "  API RSS: {:.1} MB idle, {:.1} MB with the clients, {:.1} MB at the end, peak {:.1} MB [goal <= 64 MB: {:.2}x]",
        mb(rss_idle),
        mb(rss_clients),
        mb(rss_end),
        mb(rss_peak),
        mb(rss_peak) / 64.0
    );
}
