//! Benchmark of `harness top`'s redraw: a journal append (a run paused, then resumed) → the change on
//! the dashboard's screen, in a real pseudo-terminal (util-linux `script`), 40 times (goal: within
//! 100 ms). Loopback only. Run: `cargo bench --bench top`. Figures printed; nothing asserted.

use harness::os::home::Home;
use harness::state::journal::{Journal, Record, RunEvent};
use harness::state::registry;
use std::process::Command;
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
    let mut top = support::common::TopPty::start(&home.root, api.port);
    top.shown_since(0, "topbench", Duration::from_secs(10)).expect("the dashboard drew the run");
    std::thread::sleep(Duration::from_millis(500));
    let mut lat = Vec::new();
    for i in 0..40 {
        let (ev, word) = if i % 2 == 0 { (RunEvent::Paused, "paused") } else { (RunEvent::Resumed, "running") };
        let mark = top.mark();
        j.append(&Record::run(ev, "bench", None)).unwrap();
        let appended = Instant::now();
        let shown = top.shown_since(mark, word, Duration::from_secs(10)).expect("the change drawn");
        lat.push(shown.saturating_duration_since(appended).as_secs_f64() * 1e3);
        std::thread::sleep(Duration::from_millis(150));
    }
    top.press("q");
    let _ = top.child.wait();
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
