//! Benchmarks of task worktrees (release build, real git, fake engines through the real wrappers):
//! 1. per-task overhead of a worktree + integration on a repository of 10,000 files: the same plan of
//!    5 sequential one-file tasks run with `isolation: "worktree"` and with `"shared"`; the difference
//!    per task (goal <= 1.5 s; a bare `git worktree add` of such a repo is timed alongside);
//! 2. a wave of 6 tasks whose turns take 5 s each, at `max_parallel: 3`: wall time against the ideal
//!    10 s (goal <= 1.3x);
//! 3. a task's commit and integration (squash onto its base, rebase onto a moved tip, fast-forward,
//!    under the repository's lock) when its agent made 5 commits of its own against one whose agent
//!    made none, the same 5 files changed, interleaved in one run (goal <= 1.2x).
//!
//! Run: `cargo bench --bench worktree [overhead|wave|integration]`. Figures printed; nothing asserted.

mod support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn git(dir: &Path, args: &[&str]) {
    let st = Command::new("git").arg("-C").arg(dir).args(args).stdout(Stdio::null()).status().unwrap();
    assert!(st.success(), "git {args:?}");
}

/// A repository of `n` files (100 directories of `n / 100`), committed.
fn big_repo(dir: &Path, n: usize) {
    support::git_repo(dir);
    for d in 0..100 {
        let sub = dir.join(format!("src/m{d:02}"));
        std::fs::create_dir_all(&sub).unwrap();
        for f in 0..n / 100 {
            std::fs::write(sub.join(format!("f{f:03}.rs")), format!("// module {d} file {f}\npub fn f() {{}}\n"))
                .unwrap();
        }
    }
    git(dir, &["add", "-A"]);
    git(dir, &["-c", "user.name=b", "-c", "user.email=b@b", "commit", "-qm", "10k files"]);
}

/// Runs `plan` in `repo` (batch, foreground) with the fake engines; returns the wall time.
fn run_plan(repo: &Path, home: &Path, plan: &str, pace: &str) -> Duration {
    let p = repo.parent().unwrap().join(format!("{}.plan.json", repo.file_name().unwrap().to_string_lossy()));
    std::fs::write(&p, plan).unwrap();
    let engines = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/engines");
    let t = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_harness"))
        .arg("run")
        .arg(&p)
        .current_dir(repo)
        .env("HARNESS_HOME", home)
        .env("HARNESS_JOURNAL_FSYNC", "0")
        .env("HARNESS_CLAUDE_BIN", engines.join("fake-claude"))
        .env("HARNESS_FAKE_SCENARIO", "success")
        .env("HARNESS_FAKE_PACE", pace)
        .env("HARNESS_WRAPPERS", Path::new(env!("CARGO_MANIFEST_DIR")).join("wrappers"))
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "run failed: {}", String::from_utf8_lossy(&out.stderr));
    t.elapsed()
}

fn tasks(n: usize, waves: bool, prefix: &str) -> String {
    (0..n)
        .map(|i| {
            let wave = if waves { i + 1 } else { 1 };
            format!(r#"{{"id":"{prefix}{i}","wave":{wave},"adapter":"claude","prompt":"write [fake-write:out/{prefix}{i}.txt]"}}"#)
        })
        .collect::<Vec<_>>()
        .join(",")
}

fn overhead() {
    let d = tempfile::tempdir().unwrap();
    let home = d.path().join("home");
    let mut per_mode = Vec::new();
    for (mode, extra) in
        [("worktree", r#""isolation":"worktree""#), ("shared", r#""isolation":"shared","max_parallel":1"#)]
    {
        let repo = d.path().join(mode);
        big_repo(&repo, 10_000);
        let plan = format!(r#"{{"v":"plan/v1","slug":"ovh-{mode}",{extra},"tasks":[{}]}}"#, tasks(5, true, "t"));
        per_mode.push(run_plan(&repo, &home, &plan, "fast"));
    }
    let repo = d.path().join("worktree");
    let t = Instant::now();
    git(&repo, &["worktree", "add", "-q", "--detach", d.path().join("bare-add").to_str().unwrap()]);
    let bare = t.elapsed();
    let per_task = per_mode[0].saturating_sub(per_mode[1]) / 5;
    println!(
        "10,000-file repo, 5 sequential one-file tasks: worktree isolation {:.2} s, shared {:.2} s -> overhead {:.2} s per task (worktree + setup-free prepare + commit + integration + removal) [goal <= 1.5 s]; a bare `git worktree add` of the repo: {:.2} s",
        per_mode[0].as_secs_f64(),
        per_mode[1].as_secs_f64(),
        per_task.as_secs_f64(),
        bare.as_secs_f64()
    );
}

fn wave() {
    let d = tempfile::tempdir().unwrap();
    let home = d.path().join("home");
    // One claude turn replays the partial-messages capture (16 lines): at 5/16 s per line, 5 s.
    let pace = "0.3125";
    let single = d.path().join("single");
    support::git_repo(&single);
    let one = run_plan(
        &single,
        &home,
        &format!(r#"{{"v":"plan/v1","slug":"one","tasks":[{}]}}"#, tasks(1, false, "s")),
        pace,
    );
    let repo = d.path().join("wave");
    support::git_repo(&repo);
    let plan = format!(r#"{{"v":"plan/v1","slug":"wave","max_parallel":3,"tasks":[{}]}}"#, tasks(6, false, "w"));
    let took = run_plan(&repo, &home, &plan, pace);
    println!(
        "a wave of 6 tasks x 5 s turns at max_parallel 3: {:.2} s = {:.2}x the ideal 10 s [goal <= 1.3x] (one such task alone, run start to end: {:.2} s)",
        took.as_secs_f64(),
        took.as_secs_f64() / 10.0,
        one.as_secs_f64()
    );
}

/// One task's commit + integration, timed: a worktree at the tip, another commit lands on the run's
/// branch meanwhile (so the integration rebases), then `agent_commits` commits of the agent's own
/// (0: the 5 files left uncommitted).
fn integrate_once(repo: &Path, wt: &Path, n: usize, agent_commits: bool) -> Duration {
    use harness::os::git::{self, Hooks, Owner, Squash, Squashed};
    let branch = format!("harness/bench/t{n}");
    git::worktree_add(repo, wt, &branch, "HEAD", Hooks::Off).unwrap();
    let base = git::head(wt).unwrap();
    std::fs::write(repo.join(format!("tip-{n}.txt")), "tip\n").unwrap();
    git(repo, &["add", "-A"]);
    git(repo, &["-c", "user.name=b", "-c", "user.email=b@b", "commit", "-qm", "tip moves"]);
    for f in 0..5 {
        std::fs::write(wt.join(format!("task-{n}-{f}.txt")), format!("{f}\n")).unwrap();
        if agent_commits {
            git(wt, &["add", "-A"]);
            git(wt, &["-c", "user.name=a", "-c", "user.email=a@a", "commit", "-qm", &format!("agent: file {f}")]);
        }
    }
    let t = Instant::now();
    let task = format!("t{n}");
    let sq = Squash {
        base: &base,
        branch: Some(&branch),
        paths: None,
        listed: &[],
        subject: "bench: a task",
        owner: Owner { run: "bench", task: &task, nonce: Some("0123456789abcdef"), since: Some(&base) },
        attempt: 1,
        hooks: Hooks::Off,
        force: &[],
        keep_history: false,
    };
    let Squashed::Commit(_) = git::squash(wt, &sq).unwrap() else { panic!("no commit") };
    harness::os::worktree::integrate(repo, wt, Some("main")).unwrap();
    let took = t.elapsed();
    git::worktree_remove(repo, wt, &branch).unwrap();
    took
}

fn integration() {
    let d = tempfile::tempdir().unwrap();
    let repo = d.path().join("repo");
    big_repo(&repo, 1_000);
    let (mut none, mut five) = (Vec::new(), Vec::new());
    for n in 0..40 {
        let wt = d.path().join(format!("wt{n}"));
        let took = integrate_once(&repo, &wt, n, n % 2 == 1);
        if n % 2 == 1 { five.push(took) } else { none.push(took) }
    }
    let median = |v: &mut Vec<Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    let (a, b) = (median(&mut none), median(&mut five));
    println!(
        "commit + integration of a task (1,000-file repo, tip moved, 5 files): agent made 5 commits {:.1} ms, none {:.1} ms (medians of 20 each, interleaved) -> {:.2}x [goal <= 1.2x]",
        b.as_secs_f64() * 1e3,
        a.as_secs_f64() * 1e3,
        b.as_secs_f64() / a.as_secs_f64()
    );
}

fn main() {
    let which = std::env::args().skip(1).find(|a| !a.starts_with('-')).unwrap_or_default();
    if which.is_empty() || which == "overhead" {
        overhead();
    }
    if which.is_empty() || which == "wave" {
        wave();
    }
    if which.is_empty() || which == "integration" {
        integration();
    }
}
