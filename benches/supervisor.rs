//! Benchmark: kill latency (kill verb sent → the task's process group is gone) and steer turnaround
//! (steer acknowledged → the resumed engine has started), medians over 20 runs with fake engines
//! through the real wrappers and supervisor.
//!
//! Run: `cargo bench --bench supervisor`. Figures printed; nothing asserted.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod support;
use support::git_repo;

fn control(sock: &Path, req: &str) -> serde_json::Value {
    let mut s = std::os::unix::net::UnixStream::connect(sock).unwrap();
    s.write_all(format!("{req}\n").as_bytes()).unwrap();
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line).unwrap();
    serde_json::from_str(&line).unwrap()
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let repo_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let engines = repo_dir.join("fixtures/engines");
    let mut kills = Vec::new();
    let mut steers = Vec::new();
    for i in 0..20 {
        let d = tempfile::tempdir().unwrap();
        let repo = d.path().join("repo");
        git_repo(&repo);
        let plan = d.path().join("plan.json");
        std::fs::write(
            &plan,
            r#"{"v":"plan/v1","slug":"bench","tasks":[{"id":"A","wave":1,"adapter":"claude","prompt":"x"}]}"#,
        )
        .unwrap();
        let home = d.path().join("home");
        let record = d.path().join("rec.jsonl");
        let mut sup = Command::new(env!("CARGO_BIN_EXE_harness"))
            .args(["run"])
            .arg(&plan)
            .args(["--supervised", "--foreground", "--kill-grace", "5s"])
            .current_dir(&repo)
            .env("HARNESS_HOME", &home)
            .env("HARNESS_CLAUDE_BIN", engines.join("fake-claude"))
            .env("HARNESS_FAKE_SCENARIO", "hang,hang")
            .env("HARNESS_FAKE_PACE", "fast")
            .env("HARNESS_FAKE_RECORD", &record)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(d.path().join("sup.log")).unwrap())
            .spawn()
            .unwrap();
        let log = d.path().join("sup.log");
        let wait = |what: &str, f: &mut dyn FnMut() -> bool| {
            let end = Instant::now() + Duration::from_secs(30);
            while !f() {
                assert!(
                    Instant::now() < end,
                    "timed out waiting for {what}: {}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
                std::thread::sleep(Duration::from_micros(200));
            }
        };
        let runs = home.join("runs");
        let mut run_id = String::new();
        wait("registration", &mut || {
            let Ok(rd) = std::fs::read_dir(&runs) else { return false };
            // Skip the temp file of an atomic write in progress.
            let Some(name) = rd
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .find(|n| !n.starts_with('.') && n.ends_with(".json"))
            else {
                return false;
            };
            run_id = name.trim_end_matches(".json").to_string();
            true
        });
        let sock = home.join("sock").join(format!("{run_id}.sock"));
        wait("socket", &mut || std::os::unix::net::UnixStream::connect(&sock).is_ok());
        let records = || std::fs::read_to_string(&record).map(|s| s.lines().count()).unwrap_or(0);
        wait("first engine call", &mut || records() >= 1);
        std::thread::sleep(Duration::from_millis(50));
        let pgid = control(&sock, r#"{"verb":"status"}"#)["tasks"]["A"]["pgid"].as_i64().expect("A running") as i32;
        let t = Instant::now();
        let mut s = std::os::unix::net::UnixStream::connect(&sock).unwrap();
        s.write_all(b"{\"verb\":\"kill\",\"task\":\"A\"}\n").unwrap();
        wait("group gone", &mut || !harness::supervisor::kill::group_alive(pgid));
        kills.push(t.elapsed());
        let mut line = String::new();
        BufReader::new(s).read_line(&mut line).unwrap();
        let ack = control(&sock, r#"{"verb":"steer","task":"A","msg":"go on"}"#);
        let t = Instant::now();
        assert_eq!(ack["ok"], true, "{ack}");
        wait("resumed engine", &mut || records() >= 2);
        steers.push(t.elapsed());
        control(&sock, r#"{"verb":"stop"}"#);
        let _ = sup.wait();
        if i == 0 {
            println!("first run: kill {:?}, steer {:?}", kills[0], steers[0]);
        }
    }
    println!(
        "kill latency (kill sent -> process group gone), median of {}: {:.1} ms (min {:.1}, max {:.1})",
        kills.len(),
        median(kills.clone()).as_secs_f64() * 1e3,
        kills.iter().min().unwrap().as_secs_f64() * 1e3,
        kills.iter().max().unwrap().as_secs_f64() * 1e3
    );
    println!(
        "steer turnaround (steer acknowledged -> resumed engine started), median of {}: {:.1} ms (min {:.1}, max {:.1})",
        steers.len(),
        median(steers.clone()).as_secs_f64() * 1e3,
        steers.iter().min().unwrap().as_secs_f64() * 1e3,
        steers.iter().max().unwrap().as_secs_f64() * 1e3
    );
}
