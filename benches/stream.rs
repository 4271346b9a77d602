//! Benchmarks of the live stream (release build, real processes, loopback only):
//! 1. append → SSE client latency, p50/p99 over 10,000 events (one append at a time);
//! 2. 1,000 concurrent SSE clients on one task: a 10 MB log plus live appends; every client must get
//!    every event; the API's peak and final RSS;
//! 3. `Last-Event-ID` resume at the end of a 100 MB log: time until the stream is positioned
//!    (the `retry:` frame is sent after the tail seeks), on a fresh API (cold index) and again (warm).
//! 4. A deep resume does not stall other streams: a second client's connect latency (to another
//!    task's stream) idle, and while a first client resumes at line 1,000,000 of a 1 GB log on a fresh
//!    API (cold index), as a ratio (goal <= 2x idle).
//!
//! Run: `cargo bench --bench stream`. Figures printed; nothing asserted.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};

mod support;
use std::time::{Duration, Instant};
use support::{ApiProc, Proc, status_kb};

/// A supervised run whose task hangs (so /stream is live); returns (home, run id, log path, guard).
fn live_run(dir: &Path) -> (PathBuf, String, PathBuf, (Proc, support::HomeReaper)) {
    let home = dir.join("home");
    let (run, logs, guard) = support::hanging_run(dir, &home, "bench", 1);
    (home, run, logs.join("T0.log"), guard)
}

fn delta(i: usize) -> String {
    format!(
        "{{\"type\":\"stream_event\",\"event\":{{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"w{i} \"}}}},\"session_id\":\"s\"}}\n"
    )
}

fn open_sse(port: u16, path: &str, last: Option<&str>) -> BufReader<TcpStream> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut req = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n");
    if let Some(l) = last {
        req.push_str(&format!("Last-Event-ID: {l}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    BufReader::new(s)
}

fn pct(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

fn latency() {
    let d = tempfile::tempdir().unwrap();
    let (home, run, log, _sup) = live_run(d.path());
    let api = ApiProc::start(&home, &[]);
    let port = api.port;
    let mut r = open_sse(port, &format!("/runs/{run}/tasks/T0/stream"), Some("5"));
    let (tx, rx) = std::sync::mpsc::channel::<Instant>();
    std::thread::spawn(move || {
        let mut line = String::new();
        loop {
            line.clear();
            if r.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            if line.starts_with("id: ") && tx.send(Instant::now()).is_err() {
                return;
            }
        }
    });
    let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    let mut lat = Vec::with_capacity(10_000);
    for i in 0..10_000 {
        let t0 = Instant::now();
        f.write_all(delta(i).as_bytes()).unwrap();
        let t1 = rx.recv_timeout(Duration::from_secs(10)).expect("event delivered");
        lat.push(t1.duration_since(t0));
    }
    println!(
        "append -> SSE client latency over {} events: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms [goal p99 <= 5 ms; agentapi polls every 25 ms]",
        lat.len(),
        pct(&mut lat, 0.5).as_secs_f64() * 1e3,
        pct(&mut lat, 0.99).as_secs_f64() * 1e3,
        lat.iter().max().unwrap().as_secs_f64() * 1e3
    );
}

fn fan_out() {
    let d = tempfile::tempdir().unwrap();
    let (home, run, log, _sup) = live_run(d.path());
    // A 10 MB log of claude output (the tool-partial capture repeated).
    let cap = std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/streams/claude/tool-partial.jsonl"))
        .unwrap();
    let mut body = Vec::new();
    while body.len() < 10 * 1024 * 1024 {
        body.extend_from_slice(&cap);
    }
    std::fs::OpenOptions::new().append(true).open(&log).unwrap().write_all(&body).unwrap();
    let api = ApiProc::start(&home, &[]);
    let (port, pid) = (api.port, api.proc.child.id());
    let rss0 = status_kb(pid, "VmRSS:");
    let total_lines = std::fs::read_to_string(&log).unwrap().lines().count() + 200;
    let last = total_lines.to_string();
    let clients = 1000;
    let t = Instant::now();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let done = rt.block_on(async {
        let mut set = tokio::task::JoinSet::new();
        for _ in 0..clients {
            let path = format!("/runs/{run}/tasks/T0/stream");
            let last = last.clone();
            set.spawn(async move {
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
                s.write_all(format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n").as_bytes()).await.unwrap();
                let needle = format!("id: {last}\n");
                let mut buf = vec![0u8; 64 * 1024];
                let mut tail = Vec::new();
                let mut events = 0u64;
                loop {
                    let n = match tokio::time::timeout(Duration::from_secs(120), s.read(&mut buf)).await {
                        Ok(Ok(n)) if n > 0 => n,
                        _ => return (events, false),
                    };
                    tail.extend_from_slice(&buf[..n]);
                    events += memchr::memmem::find_iter(&tail, b"\nid: ").count() as u64;
                    if memchr::memmem::find(&tail, needle.as_bytes()).is_some() {
                        return (events, true);
                    }
                    let keep = tail.len().saturating_sub(64);
                    tail.drain(..keep);
                }
            });
        }
        // Live appends while the clients read.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
        for i in 0..200 {
            f.write_all(delta(i).as_bytes()).unwrap();
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let mut ok = 0;
        let mut peak = 0;
        while let Some(r) = set.join_next().await {
            if let Ok((_, true)) = r {
                ok += 1;
            }
            peak = peak.max(status_kb(pid, "VmRSS:"));
        }
        (ok, peak)
    });
    let hwm = status_kb(pid, "VmHWM:");
    println!(
        "{clients} SSE clients on one task, {:.1} MB log + 200 live appends: {} clients got every event up to seq {last} in {:.1} s; API RSS {:.1} MB at start, peak (VmHWM) {:.1} MB [goal <= 64 MB]",
        body.len() as f64 / 1e6,
        done.0,
        t.elapsed().as_secs_f64(),
        rss0 as f64 / 1024.0,
        hwm as f64 / 1024.0
    );
}

fn resume() {
    let d = tempfile::tempdir().unwrap();
    let (home, run, log, _sup) = live_run(d.path());
    let cap = std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/streams/claude/tool-partial.jsonl"))
        .unwrap();
    let mut body = Vec::new();
    while body.len() < 100 * 1024 * 1024 {
        body.extend_from_slice(&cap);
    }
    std::fs::OpenOptions::new().append(true).open(&log).unwrap().write_all(&body).unwrap();
    let lines = std::fs::read(&log).unwrap().iter().filter(|&&b| b == b'\n').count();
    let last = lines.to_string();
    let api = ApiProc::start(&home, &[]);
    let port = api.port;
    let mut times = Vec::new();
    for _ in 0..3 {
        let t = Instant::now();
        let mut r = open_sse(port, &format!("/runs/{run}/tasks/T0/stream"), Some(&last));
        let mut line = String::new();
        loop {
            line.clear();
            r.read_line(&mut line).unwrap();
            if line.starts_with("retry:") {
                break;
            }
        }
        times.push(t.elapsed());
        let mut rest = [0u8; 1];
        let _ = r.get_mut().set_nonblocking(true);
        let _ = r.read(&mut rest);
    }
    println!(
        "Last-Event-ID resume at the end of a {:.0} MB log ({lines} lines): cold {:.1} ms, warm {:.1} ms, {:.1} ms [goal <= 100 ms]",
        body.len() as f64 / 1e6,
        times[0].as_secs_f64() * 1e3,
        times[1].as_secs_f64() * 1e3,
        times[2].as_secs_f64() * 1e3
    );
}

/// Time from connect until the stream's `retry:` frame (the stream is positioned and serving).
fn connect_latency(port: u16, path: &str, last: Option<&str>) -> Duration {
    let t = Instant::now();
    let mut r = open_sse(port, path, last);
    let mut line = String::new();
    loop {
        line.clear();
        if r.read_line(&mut line).unwrap_or(0) == 0 || line.starts_with("retry:") {
            return t.elapsed();
        }
    }
}

fn deep_resume() {
    let d = tempfile::tempdir().unwrap();
    let home = d.path().join("home");
    let (run, logs, _sup) = support::hanging_run(d.path(), &home, "deep", 2);
    // T0's log: ~1 KB lines (text deltas) up to 1 GB, over 1,000,000 lines.
    let log = logs.join("T0.log");
    let text = "x".repeat(900);
    let line = format!(
        "{{\"type\":\"stream_event\",\"event\":{{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"{text}\"}}}},\"session_id\":\"s\"}}\n"
    );
    let mut chunk = Vec::new();
    while chunk.len() < 8 << 20 {
        chunk.extend_from_slice(line.as_bytes());
    }
    let mut f = std::io::BufWriter::new(std::fs::OpenOptions::new().append(true).open(&log).unwrap());
    let mut size = 0usize;
    while size < 1 << 30 {
        f.write_all(&chunk).unwrap();
        size += chunk.len();
    }
    f.flush().unwrap();
    drop(f);
    let lines = size / line.len();
    assert!(lines > 1_000_000, "{lines} lines");
    let other = format!("/runs/{run}/tasks/T1/stream");
    let deep = format!("/runs/{run}/tasks/T0/stream");
    let mut idle = Vec::new();
    let mut loaded = Vec::new();
    let mut first = Vec::new();
    for _ in 0..5 {
        // A fresh API: the 1 GB log's index is cold, so the first client scans it.
        let api = ApiProc::start(&home, &[]);
        let port = api.port;
        for _ in 0..5 {
            idle.push(connect_latency(port, &other, Some("3")));
        }
        let deep_path = deep.clone();
        let resumer = std::thread::spawn(move || connect_latency(port, &deep_path, Some("1000000")));
        std::thread::sleep(Duration::from_millis(20));
        loaded.push(connect_latency(port, &other, Some("3")));
        first.push(resumer.join().unwrap());
    }
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let idle_p50 = pct(&mut idle, 0.5);
    let loaded_p50 = pct(&mut loaded, 0.5);
    println!(
        "second client's connect while a first resumes at line 1,000,000 of a {:.2} GB log ({lines} lines), 5 fresh APIs: idle p50 {:.2} ms, during the deep resume p50 {:.2} ms, max {:.2} ms = {:.2}x idle [goal <= 2x]; the deep resume itself p50 {:.0} ms",
        size as f64 / (1u64 << 30) as f64,
        ms(idle_p50),
        ms(loaded_p50),
        ms(*loaded.iter().max().unwrap()),
        loaded_p50.as_secs_f64() / idle_p50.as_secs_f64(),
        ms(pct(&mut first, 0.5)),
    );
}

fn main() {
    let which = std::env::args().skip(1).find(|a| !a.starts_with('-')).unwrap_or_default();
    if which.is_empty() || which == "latency" {
        latency();
    }
    if which.is_empty() || which == "resume" {
        resume();
    }
    if which.is_empty() || which == "fanout" {
        fan_out();
    }
    if which.is_empty() || which == "deep" {
        deep_resume();
    }
}
