//! Helpers shared by the benchmarks (a module, not a bench target): the integration tests' support
//! (`tests/it/common`: a child killed on drop, `harness api` on a loopback port, a scratch git repo…),
//! a field of `/proc/<pid>/status`, and a supervised run that stays live.
#![allow(dead_code)]

#[path = "../../tests/it/common/mod.rs"]
pub mod common;

// Each bench uses some of these.
#[allow(unused_imports)]
pub use common::{ApiProc, Proc, git_repo};
use std::path::Path;
use std::process::Command;

/// A kB field (`VmRSS:`, `VmHWM:`) of `/proc/<pid>/status`; 0 when the process is gone.
pub fn status_kb(pid: u32, key: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

/// Kills every process started with `HARNESS_HOME=home` when dropped: a hanging run's engines live in
/// their own process groups and outlive a SIGKILLed supervisor.
pub struct HomeReaper(pub std::path::PathBuf);

impl Drop for HomeReaper {
    fn drop(&mut self) {
        common::kill_all_with_home(&self.0);
    }
}

/// A supervised run in a scratch repo `dir/<slug>` whose `tasks` claude tasks hang after their first
/// output (so the run stays live and `/stream` serves), registered in `home`. Waits until every task's
/// engine has printed. Returns the runId, the runstate logs dir and the supervisor (killed on drop,
/// with every process of `home`).
pub fn hanging_run(
    dir: &Path,
    home: &Path,
    slug: &str,
    tasks: usize,
) -> (String, std::path::PathBuf, (Proc, HomeReaper)) {
    let repo = dir.join(slug);
    git_repo(&repo);
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
    let guard = (Proc { child }, HomeReaper(home.to_path_buf()));
    let logs = repo.join(format!("runstate/{slug}.logs"));
    let lines =
        |t: usize| std::fs::read_to_string(logs.join(format!("T{t}.log"))).map(|s| s.lines().count()).unwrap_or(0);
    common::wait_for(std::time::Duration::from_secs(30), || (0..tasks).all(|t| lines(t) >= 5).then_some(()))
        .unwrap_or_else(|| panic!("run {slug} did not start"));
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

/// The pointer of a run registered by hand in `repo` (its `runstate/` made): what a bench writes with
/// `registry::write` instead of starting `harness run`.
pub fn bench_pointer(repo: &Path, slug: &str, repo_name: &str) -> harness::state::registry::Pointer {
    let rs = repo.join("runstate");
    std::fs::create_dir_all(&rs).unwrap();
    let slug = harness::ids::Slug::parse(slug).unwrap();
    harness::state::registry::Pointer {
        v: harness::state::registry::VERSION.into(),
        run_id: harness::ids::RunId::derive(repo, repo, &slug),
        slug,
        repo_root: repo.to_path_buf(),
        project: "bench".into(),
        repo: repo_name.into(),
        branch: Some("main".into()),
        worktree: repo.to_path_buf(),
        runstate_dir: rs,
        plane: harness::state::registry::Plane::Standalone,
        created: harness::state::journal::now_rfc3339(),
        base_slug: None,
    }
}
