//! Benchmark of `harness top`'s redraw: a journal append (a run paused, then resumed) → the change on
//! the dashboard's screen, in a real pseudo-terminal (util-linux `script`), 40 times (goal: within
//! 100 ms). Loopback only. Run: `cargo bench --bench top`. Figures printed; nothing asserted.

use harness::home::Home;
use harness::journal::{Journal, Record, RunEvent};
use harness::registry;
use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod support;

fn main() {
    if Command::new("script").arg("--version").output().is_err() {
        println!("SKIPPED: no script(1) for a pseudo-terminal");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let home = Home::at(dir.path().join("home"));
    home.ensure().unwrap();
    let repo = dir.path().join("repo");
    let p = support::bench_pointer(&repo, "topbench", "repo");
    let j = Journal::open(&p.journal_path()).unwrap();
    j.append(&Record::run(RunEvent::Started, "bench", None)).unwrap();
    registry::write(&home, &p).unwrap();
    let api = support::ApiProc::start(&home.root, &[]);
    let cmd = format!("stty cols 160 rows 40; exec {} top --api 127.0.0.1:{}", env!("CARGO_BIN_EXE_harness"), api.port);
    let mut child = Command::new("script")
        .args(["-qfec", &cmd, "/dev/null"])
        .env("HARNESS_HOME", &home.root)
        .env("TERM", "xterm-256color")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // The screen's bytes, with when each read arrived.
    let screen: Arc<Mutex<Vec<(Instant, String)>>> = Arc::default();
    let mut out = child.stdout.take().unwrap();
    let s2 = screen.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 8192];
        while let Ok(n) = out.read(&mut buf) {
            if n == 0 {
                break;
            }
            s2.lock().unwrap().push((Instant::now(), String::from_utf8_lossy(&buf[..n]).into_owned()));
        }
    });
    let seen = |from: usize, what: &str| -> Option<Instant> {
        let s = screen.lock().unwrap();
        s.iter().skip(from).find(|(_, t)| t.contains(what)).map(|(at, _)| *at)
    };
    let wait = |from: usize, what: &str| -> Instant {
        let until = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(at) = seen(from, what) {
                return at;
            }
            assert!(Instant::now() < until, "the screen never showed {what:?}");
            std::thread::sleep(Duration::from_millis(1));
        }
    };
    wait(0, "topbench");
    std::thread::sleep(Duration::from_millis(500));
    let mut lat = Vec::new();
    for i in 0..40 {
        let (ev, word) = if i % 2 == 0 { (RunEvent::Paused, "paused") } else { (RunEvent::Resumed, "running") };
        let from = screen.lock().unwrap().len();
        j.append(&Record::run(ev, "bench", None)).unwrap();
        let appended = Instant::now();
        let shown = wait(from, word);
        lat.push(shown.saturating_duration_since(appended).as_secs_f64() * 1e3);
        std::thread::sleep(Duration::from_millis(150));
    }
    let mut stdin = child.stdin.take().unwrap();
    let _ = stdin.write_all(b"q");
    let _ = child.wait();
    lat.sort_by(f64::total_cmp);
    let p = |q: f64| lat[((lat.len() as f64 - 1.0) * q).round() as usize];
    println!(
        "harness top: journal append -> the change on screen (pty), 40 times: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms [goal <= 100 ms: max {:.2}x]",
        p(0.5),
        p(0.99),
        p(1.0),
        p(1.0) / 100.0
    );
}
