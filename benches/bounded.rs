//! Benchmark of the bounds (issue "Private and bounded", point 9; `RELIABILITY.md`):
//!
//! 1. **Peak RSS against a task log's size**: one run whose task log is 10 MB, then 1 GB, of
//!    claude stream lines. The API's peak RSS (`VmHWM`) after a cold `GET /runs` and `GET
//!    /runs/:id` (each folds the log's usage); the supervisor's after a turn that printed that much
//!    (its turn-end checks, exit-marker check and budget fold read it). Goal: flat (± 10 %).
//! 2. **`/watch` catch-ups at 10,000 runs**: 100 fresh clients at once, each reading every
//!    journal's records (5 per run) to the present: the checkpoint directory's size after, and the
//!    catch-up time. Against `HARNESS_BASELINE_BIN` (the binary before the change, when given) in
//!    the same run: goal dir ≤ 64 MB and time ≤ 1.5× the baseline's.
//!
//! Loopback only. Run: `cargo bench --bench bounded` (`HARNESS_BOUNDED_BIG_MB`, default 1024;
//! `HARNESS_BASELINE_BIN` for the ratio). Figures printed; nothing asserted.

use harness::state::journal::{Record, RunEvent, TaskState};
use harness::state::registry;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod support;
use support::common::{self, Proc};

fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_harness"))
}

/// A claude stream of about `bytes`: deltas, with an assistant and a result line every 1,000 lines.
fn write_log(path: &Path, bytes: u64) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/streams/claude/partial.jsonl");
    let fixture = std::fs::read_to_string(dir).unwrap();
    let delta = fixture.lines().find(|l| l.contains("content_block_delta")).unwrap().to_string();
    let result = fixture.lines().find(|l| l.contains("\"type\":\"result\"")).unwrap().to_string();
    let mut f = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(path).unwrap());
    let mut n = 0u64;
    let mut i = 0u64;
    while n < bytes {
        let l = if i % 1000 == 999 { &result } else { &delta };
        f.write_all(l.as_bytes()).unwrap();
        f.write_all(b"\n").unwrap();
        n += l.len() as u64 + 1;
        i += 1;
    }
    f.flush().unwrap();
}

fn http_get(port: u16, path: &str) -> usize {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n").unwrap();
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).unwrap();
    assert!(buf.starts_with(b"HTTP/1.1 200"), "{path}: {}", String::from_utf8_lossy(&buf[..buf.len().min(200)]));
    buf.len()
}

fn api(home: &Path, binary: &Path) -> (Proc, u16) {
    let mut child = Command::new(binary)
        .args(["api", "--listen", "127.0.0.1:0"])
        .env("HARNESS_HOME", home)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().unwrap()), &mut line).unwrap();
    let port = line.trim().rsplit(':').next().unwrap().parse().unwrap();
    (Proc { child }, port)
}

/// The API's peak RSS (kB) after folding a `bytes` log cold.
fn api_peak(bytes: u64) -> u64 {
    let dir = tempfile::tempdir().unwrap();
    let home = harness::os::home::Home::at(dir.path().join("home"));
    home.ensure().unwrap();
    let repo = dir.path().join("repo");
    let p = support::bench_pointer(&repo, "big", "repo");
    let log = p.runstate_dir.join("big.logs/T0.log");
    std::fs::create_dir_all(log.parent().unwrap()).unwrap();
    write_log(&log, bytes);
    let plan = r#"{"v":"plan/v1","slug":"big","tasks":[{"id":"T0","wave":1,"adapter":"claude","prompt":"x"}]}"#;
    std::fs::write(p.plan_path(), plan).unwrap();
    let t0 = harness::ids::TaskId::parse("T0").unwrap();
    let mut leased = Record::task(&t0, TaskState::Leased);
    leased.logfile = Some(log.clone());
    let mut j = String::new();
    for r in [Record::run(RunEvent::Started, "bench", None), leased.into()] {
        j.push_str(&serde_json::to_string(&r).unwrap());
        j.push('\n');
    }
    std::fs::write(p.journal_path(), j).unwrap();
    registry::write(&home, &p).unwrap();
    let (proc, port) = api(&home.root, &bin());
    http_get(port, "/runs");
    http_get(port, &format!("/runs/{}", p.run_id));
    support::status_kb(proc.child.id(), "VmHWM:")
}

/// The supervisor's peak RSS (kB) after a turn that printed `bytes` (then a second task hangs, so
/// it is still there to be measured).
fn supervisor_peak(bytes: u64) -> u64 {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir(&home).unwrap();
    let repo = dir.path().join("repo");
    common::git_repo(&repo);
    let big = dir.path().join("turn.jsonl");
    write_log(&big, bytes);
    let plan = dir.path().join("plan.json");
    std::fs::write(
        &plan,
        r#"{"v":"plan/v1","slug":"big","budget_usd":1000,"tasks":[
        {"id":"a","wave":1,"adapter":"claude","prompt":"a [fake-write:a.txt]"},
        {"id":"b","wave":2,"adapter":"claude","prompt":"b [fake-claude:hang]"}]}"#,
    )
    .unwrap();
    let engines = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/engines");
    let child = Command::new(bin())
        .arg("run")
        .arg(&plan)
        .args(["--supervised", "--foreground", "--kill-grace", "1s"])
        .current_dir(&repo)
        .env("HARNESS_HOME", &home)
        .env("HARNESS_CLAUDE_BIN", engines.join("fake-claude"))
        .env("HARNESS_WRAPPERS", Path::new(env!("CARGO_MANIFEST_DIR")).join("wrappers"))
        .env("HARNESS_FAKE_PACE", "fast")
        .env("HARNESS_FAKE_SCENARIO", "success")
        .env("HARNESS_FAKE_TOOL", format!("[ \"$HARNESS_TASK\" = a ] && cat {}", big.display()))
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    let _guard = (Proc { child }, support::HomeReaper(home.clone()));
    let journal = repo.join("runstate/big.jsonl");
    common::wait_for(Duration::from_secs(600), || {
        let j = std::fs::read_to_string(&journal).unwrap_or_default();
        j.lines().any(|l| l.contains("\"task\":\"b\"") && l.contains("\"leased\"")).then_some(())
    })
    .expect("task a ended and b started");
    std::thread::sleep(Duration::from_secs(2));
    support::status_kb(pid, "VmHWM:")
}

/// 100 fresh `/watch` clients over 10,000 runs with `binary`: (wall time until every client has
/// every record, checkpoint dir bytes, files).
fn catch_ups(binary: &Path, home: &Path, runs: usize, clients: usize) -> (Duration, u64, usize) {
    let _ = std::fs::remove_dir_all(home.join("watch"));
    let (_api, port) = api(home, binary);
    let want = runs * 5;
    let t = Instant::now();
    let threads: Vec<_> = (0..clients)
        .map(|_| {
            std::thread::spawn(move || {
                let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
                write!(s, "GET /watch HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n").unwrap();
                let (mut buf, mut seen, mut tail) = (vec![0u8; 1 << 16], 0usize, Vec::new());
                while seen < want {
                    let n = s.read(&mut buf).unwrap();
                    assert!(n > 0, "the stream ended at {seen} of {want}");
                    tail.extend_from_slice(&buf[..n]);
                    seen += memchr::memmem::find_iter(&tail, b"\ndata: ").count();
                    let keep = tail.len().saturating_sub(6);
                    tail.drain(..keep);
                }
            })
        })
        .collect();
    for th in threads {
        th.join().unwrap();
    }
    let took = t.elapsed();
    let (mut bytes, mut files) = (0, 0);
    for e in std::fs::read_dir(home.join("watch")).into_iter().flatten().flatten() {
        bytes += e.metadata().map(|m| m.len()).unwrap_or(0);
        files += 1;
    }
    (took, bytes, files)
}

fn main() {
    let big_mb: u64 = std::env::var("HARNESS_BOUNDED_BIG_MB").ok().and_then(|v| v.parse().ok()).unwrap_or(1024);
    println!("1. peak RSS against a task log's size");
    for who in ["api", "supervisor"] {
        let small = if who == "api" { api_peak(10 << 20) } else { supervisor_peak(10 << 20) };
        let large = if who == "api" { api_peak(big_mb << 20) } else { supervisor_peak(big_mb << 20) };
        println!(
            "   {who:<10} VmHWM with a 10 MB log: {:>7} kB; with a {big_mb} MB log: {:>7} kB; ratio {:.3}",
            small,
            large,
            large as f64 / small.max(1) as f64
        );
    }

    println!("2. /watch: 100 fresh clients at once over 10,000 runs (5 records each)");
    let runs = 10_000;
    let dir = tempfile::tempdir().unwrap();
    let home = harness::os::home::Home::at(dir.path().join("home"));
    home.ensure().unwrap();
    let mut journal = String::new();
    for r in [
        Record::run(RunEvent::Started, "bench", None),
        Record::run(RunEvent::Paused, "bench", None),
        Record::run(RunEvent::Resumed, "bench", None),
        Record::run(RunEvent::Paused, "bench", None),
        Record::run(RunEvent::Resumed, "bench", None),
    ] {
        journal.push_str(&serde_json::to_string(&r).unwrap());
        journal.push('\n');
    }
    for i in 0..runs {
        let repo = dir.path().join(format!("repos/r{i}"));
        let p = support::bench_pointer(&repo, "bench", &format!("r{i}"));
        std::fs::write(p.journal_path(), &journal).unwrap();
        registry::write(&home, &p).unwrap();
    }
    let (took, bytes, files) = catch_ups(&bin(), &home.root, runs, 100);
    println!(
        "   this build: {:.2} s; checkpoint dir {:.1} MB in {files} files",
        took.as_secs_f64(),
        bytes as f64 / 1e6
    );
    if let Some(base) = std::env::var_os("HARNESS_BASELINE_BIN") {
        let (btook, bbytes, bfiles) = catch_ups(Path::new(&base), &home.root, runs, 100);
        println!(
            "   baseline:   {:.2} s; checkpoint dir {:.1} MB in {bfiles} files",
            btook.as_secs_f64(),
            bbytes as f64 / 1e6
        );
        println!(
            "   ratio (this / baseline): time {:.2}, dir {:.3}",
            took.as_secs_f64() / btook.as_secs_f64(),
            bytes as f64 / bbytes.max(1) as f64
        );
    }
}
