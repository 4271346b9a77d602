//! Helpers shared by the benchmarks (a module, not a bench target): a child killed on drop, a git
//! call, a field of `/proc/<pid>/status`.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Child, Command};

/// A child process killed and reaped when dropped.
pub struct Kill(pub Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `harness api` on an ephemeral loopback port over `home`: (port, the API process killed on drop).
pub fn api(home: &Path, extra: &[&str]) -> (u16, Kill) {
    use std::io::BufRead;
    let mut child = Command::new(env!("CARGO_BIN_EXE_harness"))
        .args(["api", "--listen", "127.0.0.1:0"])
        .args(extra)
        .env("HARNESS_HOME", home)
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    (line.trim().rsplit(':').next().unwrap().parse().unwrap(), Kill(child))
}

/// Runs git in `dir` with a fixed identity; panics when it fails.
pub fn git(dir: &Path, args: &[&str]) {
    let ok = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.name=bench", "-c", "user.email=bench@localhost"])
        .args(args)
        .output()
        .unwrap()
        .status
        .success();
    assert!(ok, "git {args:?}");
}

/// A kB field (`VmRSS:`, `VmHWM:`) of `/proc/<pid>/status`; 0 when the process is gone.
pub fn status_kb(pid: u32, key: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

/// A supervised run in a scratch repo `dir/<slug>` whose `tasks` claude tasks hang after their first
/// output (so the run stays live and `/stream` serves), registered in `home`. Waits until every task's
/// engine has printed. Returns the runId, the runstate logs dir and the supervisor (killed on drop).
pub fn hanging_run(dir: &Path, home: &Path, slug: &str, tasks: usize) -> (String, std::path::PathBuf, Kill) {
    use std::time::{Duration, Instant};
    let repo = dir.join(slug);
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    std::fs::write(repo.join("R"), "x").unwrap();
    git(&repo, &["add", "R"]);
    git(&repo, &["commit", "-qm", "i"]);
    let list: Vec<String> =
        (0..tasks).map(|t| format!(r#"{{"id":"T{t}","wave":1,"adapter":"claude","prompt":"bench"}}"#)).collect();
    let plan = dir.join(format!("{slug}.plan.json"));
    std::fs::write(
        &plan,
        format!(r#"{{"v":"plan/v1","slug":"{slug}","max_parallel":{tasks},"tasks":[{}]}}"#, list.join(",")),
    )
    .unwrap();
    let engines = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/engines");
    let child = Command::new(env!("CARGO_BIN_EXE_harness"))
        .arg("run")
        .arg(&plan)
        .args(["--supervised", "--foreground", "--kill-grace", "1s", "--linger", "10m"])
        .current_dir(&repo)
        .env("HARNESS_HOME", home)
        .env("HARNESS_CLAUDE_BIN", engines.join("fake-claude"))
        .env("HARNESS_FAKE_SCENARIO", "hang")
        .env("HARNESS_FAKE_PACE", "fast")
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let guard = Kill(child);
    let logs = repo.join(format!("runstate/{slug}.logs"));
    let lines =
        |t: usize| std::fs::read_to_string(logs.join(format!("T{t}.log"))).map(|s| s.lines().count()).unwrap_or(0);
    let end = Instant::now() + Duration::from_secs(30);
    while (0..tasks).any(|t| lines(t) < 5) {
        assert!(Instant::now() < end, "run {slug} did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    let run = std::fs::read_dir(home.join("runs"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .find(|n| n.ends_with(&format!("--{slug}.json")))
        .unwrap()
        .trim_end_matches(".json")
        .to_string();
    (run, logs, guard)
}
