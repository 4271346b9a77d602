//! Chaos: runs of 20 tasks over 4 waves at `max_parallel: 3` (fake engines through the real
//! wrappers, each task in its own worktree) while, at random moments, the supervisor is SIGKILLed
//! (then restarted), a wrapper is SIGKILLed (the task halts; an operator's steer resumes it), and the
//! API is SIGKILLed (then restarted). Every task writes its own file and two tasks of each wave also
//! write the wave's shared file, so their changes overlap (a conflict halts one; the operator's steer
//! redoes it on top). After every run: every task committed exactly once (journal and git agree) and
//! every line its commit adds was written by that task, no torn or interleaved journal line, no
//! process of the run left, no zombie child, liveness empty after reap, every queued steer applied
//! exactly once, no task worktree or branch left.
//!
//! CI runs N = 10 runs (`HARNESS_CHAOS_RUNS` sets N; by hand: 100). `HARNESS_CHAOS_SEED` replays one.

use crate::common::*;
use serde_json::Value;
use std::collections::HashMap;
use std::process::Stdio;
use std::time::{Duration, Instant};

/// A small deterministic generator (xorshift), seeded per run and printed for replay.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Task `i`'s prompt: it writes `own/Tii.txt`, and the first two of each wave also the wave's file;
/// every other task also commits a file of its own itself (`own/Tii-self.txt`), as an agent told to
/// commit its work does.
fn prompt(i: usize) -> String {
    let shared = if i % 5 < 2 { format!(" [fake-write:shared/wave{}.txt]", i / 5 + 1) } else { String::new() };
    let own_commit = if i.is_multiple_of(2) { format!(" [fake-commit:own/T{i:02}-self.txt]") } else { String::new() };
    format!("task {i} [fake-write:own/T{i:02}.txt]{shared}{own_commit}")
}

/// The operator's steer of halted task `i`: do the work again; after a conflict its redo starts
/// with its earlier attempt applied, the wave's file between git's markers, which it resolves.
fn redo(i: usize) -> String {
    let resolve = if i % 5 < 2 { format!(" [fake-resolve:shared/wave{}.txt]", i / 5 + 1) } else { String::new() };
    format!("continue:{resolve} {}", prompt(i))
}

fn plan() -> String {
    let tasks: Vec<String> = (0..20)
        .map(|i| format!(r#"{{"id":"T{i:02}","wave":{},"adapter":"claude","prompt":"{}"}}"#, i / 5 + 1, prompt(i)))
        .collect();
    format!(r#"{{"v":"plan/v1","slug":"chaos","max_parallel":3,"tasks":[{}]}}"#, tasks.join(","))
}

fn supervise(b: &Bench, args: &[&str]) -> Proc {
    let child = b
        .harness("slow")
        .args(args)
        .env("HARNESS_FAKE_SLOW_PACE", "0.02")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    Proc { child }
}

/// One chaotic run; returns what was done to it.
fn chaos_run(seed: u64) -> HashMap<&'static str, u32> {
    // splitmix64 of the seed: neighbouring seeds give unrelated sequences.
    let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    let mut rng = Rng((z ^ (z >> 31)) | 1);
    let b = Bench::new();
    let p = b.plan(&plan());
    let mut sup = supervise(&b, &["run", p.to_str().unwrap(), "--supervised", "--foreground", "--kill-grace", "1s"]);
    let mut api = ApiProc::start(&b.home(), &[]);
    let mut done: HashMap<&'static str, u32> = HashMap::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    let run_id = wait_for(Duration::from_secs(20), || b.try_run_id()).expect("registered");
    loop {
        if Instant::now() >= deadline {
            // Keep the journal for the post-mortem (the temp dir goes with the Bench).
            let kept = std::env::temp_dir().join(format!("harness-chaos-{seed}.jsonl"));
            let _ = std::fs::copy(b.repo().join("runstate/chaos.jsonl"), &kept);
            panic!("seed {seed}: the run did not finish (journal kept in {}); {:#}", kept.display(), b.view()["tasks"]);
        }
        std::thread::sleep(Duration::from_millis(150 + rng.below(600)));
        let view = b.view();
        if view["status"] == "finished" {
            break;
        }
        // An operator steers halted tasks back (a killed wrapper halts its task: fail closed).
        let halted: Vec<String> = view["tasks"]
            .as_object()
            .map(|m| m.iter().filter(|(_, t)| t["state"] == "halted").map(|(k, _)| k.clone()).collect())
            .unwrap_or_default();
        let sock = b.sock();
        let live = harness::control::is_live(&sock);
        if live {
            for t in &halted {
                let pending =
                    view["pending_steers"].as_array().is_some_and(|a| a.iter().any(|s| s["task"] == t.as_str()));
                if !pending {
                    // Redo the task's work (after a conflict its fresh worktree starts from the tip).
                    let i: usize = t[1..].parse().unwrap();
                    let msg = redo(i);
                    // The supervisor may end (the run finished) between the look and the steer.
                    let req = serde_json::json!({"verb":"steer","task":t,"msg":msg,"by":"chaos"});
                    let Ok(r) = try_control(&sock, &req) else { break };
                    if r["ok"] == true {
                        *done.entry("steer").or_default() += 1;
                    }
                }
            }
        }
        match rng.below(10) {
            0..=2 => {
                // SIGKILL the supervisor, then restart it.
                sup.child.kill().unwrap();
                sup.child.wait().unwrap();
                *done.entry("kill supervisor").or_default() += 1;
                sup = supervise(&b, &["supervise", &run_id, "--kill-grace", "1s"]);
                wait_for(Duration::from_secs(20), || harness::control::is_live(&sock).then_some(()));
            }
            3..=4 if live => {
                // SIGKILL one running wrapper.
                // The run may have finished since the look: its supervisor is gone, nothing to kill.
                let Ok(st) = try_control(&sock, &serde_json::json!({"verb":"status"})) else { continue };
                let pgids: Vec<i64> = st["tasks"]
                    .as_object()
                    .map(|m| m.values().filter_map(|t| t["pgid"].as_i64()).collect())
                    .unwrap_or_default();
                if let Some(&g) = pgids.get(rng.below(pgids.len().max(1) as u64) as usize) {
                    // SAFETY: the wrapper leads its own group; the pid is this test run's.
                    unsafe { libc::kill(g as i32, libc::SIGKILL) };
                    *done.entry("kill wrapper").or_default() += 1;
                }
            }
            5 => {
                // SIGKILL the API, then start another.
                api.proc.child.kill().unwrap();
                api.proc.child.wait().unwrap();
                *done.entry("kill api").or_default() += 1;
                api = ApiProc::start(&b.home(), &[]);
            }
            _ => {}
        }
    }
    assert_eq!(sup.wait_exit(Duration::from_secs(30)), 0, "seed {seed}: supervisor exit");
    let halts: Vec<String> = b
        .journal()
        .iter()
        .filter(|r| r["state"] == "halted")
        .map(|r| format!("{} rc {} {}", r["task"], r["rc"], r["detail"]))
        .collect();
    eprintln!("  halts: {halts:?}");
    let checked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check_invariants(&b, &run_id, &api, seed)));
    if let Err(why) = checked {
        // Keep what a post-mortem needs (the temp dir goes with the Bench): the journal, the run
        // branch's history with each commit's files, and the supervisors' logs.
        let kept = std::env::temp_dir().join(format!("harness-chaos-{seed}"));
        let _ = std::fs::create_dir_all(&kept);
        let _ = std::fs::copy(b.repo().join("runstate/chaos.jsonl"), kept.join("journal.jsonl"));
        let log = harness::os::git::run(&b.repo(), &["log", "--stat", "--format=%H %s%n%b"]).unwrap_or_default();
        let _ = std::fs::write(kept.join("git-log.txt"), log);
        let _ = std::process::Command::new("cp").arg("-r").arg(b.repo().join("runstate")).arg(&kept).status();
        eprintln!("seed {seed}: the invariants failed; post-mortem kept in {}", kept.display());
        std::panic::resume_unwind(why);
    }
    done
}

fn check_invariants(b: &Bench, run_id: &str, api: &ApiProc, seed: u64) {
    let view = b.view();
    // Every task committed exactly once; the journal's sha is that commit.
    for i in 0..20 {
        let t = format!("T{i:02}");
        assert_eq!(view["tasks"][&t]["state"], "committed", "seed {seed}: {t}");
        assert_eq!(b.commits_of(&t), 1, "seed {seed}: {t} has {} commits", b.commits_of(&t));
        let sha = harness::os::git::find_task_commit(&b.repo(), run_id, &t).unwrap();
        assert_eq!(view["tasks"][&t]["sha"], sha.as_str(), "seed {seed}: journal and git disagree on {t}");
        // The commit's content is its task's: every line it adds was written by that task.
        let diff = harness::os::git::run(&b.repo(), &["show", "--format=", "-U0", &sha]).unwrap();
        let mine = format!("(task {t},");
        for line in diff.lines().filter(|l| l.starts_with('+') && !l.starts_with("+++")) {
            assert!(line.contains(&mine), "seed {seed}: {t}'s commit {sha} adds a line it did not write: {line}");
        }
        let files = harness::os::git::run(&b.repo(), &["show", "--format=", "--name-only", &sha]).unwrap();
        assert!(
            files.lines().any(|f| f == format!("own/{t}.txt")),
            "seed {seed}: {t}'s commit lacks its own file: {files}"
        );
        // What the agent committed itself is in the task's one commit too.
        if i % 2 == 0 {
            assert!(
                files.lines().any(|f| f == format!("own/{t}-self.txt")),
                "seed {seed}: {t}'s commit lacks the file its agent committed: {files}"
            );
        }
        assert!(
            !harness::os::git::run(&b.repo(), &["show", &sha]).unwrap().contains("<<<<<<<"),
            "seed {seed}: {t}: markers"
        );
    }
    // No task worktree or task branch outlives the run.
    assert!(
        harness::os::git::run(&b.repo(), &["branch", "--list", "harness/*"]).unwrap().trim().is_empty(),
        "seed {seed}"
    );
    assert!(!b.home().join("worktrees").join(run_id).exists(), "seed {seed}: worktrees left");
    // No torn or interleaved line: every line parses, none is reported bad.
    assert!(view["bad_lines"].as_array().unwrap().is_empty(), "seed {seed}: {}", view["bad_lines"]);
    assert!(view["torn_tail"].is_null(), "seed {seed}: torn tail {}", view["torn_tail"]);
    // Every queued steer applied exactly once.
    let mut queued: HashMap<String, u32> = HashMap::new();
    let mut applied: HashMap<String, u32> = HashMap::new();
    for r in &b.controls("steer") {
        let id = r["id"].as_str().unwrap().to_string();
        match r["outcome"].as_str() {
            Some("queued") => *queued.entry(id).or_default() += 1,
            Some("applied") => *applied.entry(id).or_default() += 1,
            _ => {}
        }
    }
    for (id, n) in &queued {
        assert_eq!(*n, 1, "seed {seed}: steer {id} queued {n} times");
        assert_eq!(
            applied.get(id).copied().unwrap_or(0),
            1,
            "seed {seed}: steer {id} applied {:?} times",
            applied.get(id)
        );
    }
    assert!(view["pending_steers"].as_array().unwrap().is_empty());
    // No process of the run left (the API is ours and still up), no zombie child of this test.
    let api_pid = api.proc.child.id();
    let left = wait_for(Duration::from_secs(10), || {
        let l: Vec<u32> = processes_with_home(&b.home()).into_iter().filter(|p| *p != api_pid).collect();
        l.is_empty().then_some(())
    });
    let describe = |pids: Vec<u32>| -> Vec<String> {
        pids.iter()
            .map(|p| {
                let cmd = std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
                let stat = harness::supervisor::kill::stat_fields(*p as i32);
                format!(
                    "{p} {stat:?} {}",
                    String::from_utf8_lossy(&cmd).replace('\0', " ").chars().take(160).collect::<String>()
                )
            })
            .collect()
    };
    let others = || processes_with_home(&b.home()).into_iter().filter(|p| *p != api_pid).collect::<Vec<_>>();
    assert!(left.is_some(), "seed {seed}: processes left: {:#?}", describe(others()));
    let me = std::process::id() as i32;
    let zombie = |p: i32| harness::supervisor::kill::stat_fields(p).is_some_and(|(s, ppid, _)| s == 'Z' && ppid == me);
    let zombies: Vec<i32> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().parse::<i32>().ok())
        .filter(|&p| zombie(p))
        .collect();
    // The other tests of this process have children too: one that just exited is a zombie until
    // its test waits for it (milliseconds). A zombie left behind is still one a second later.
    std::thread::sleep(Duration::from_secs(1));
    let zombies: Vec<i32> = zombies.into_iter().filter(|&p| zombie(p)).collect();
    assert!(zombies.is_empty(), "seed {seed}: zombie children {zombies:?}");
    // Liveness matches reality after reap: nothing is running, so nothing is recorded.
    let (code, out, err) = cli(&b.home(), &["liveness", "reap", run_id]);
    assert_eq!(code, 0, "{err}");
    let reap: Value = serde_json::from_str(&out).unwrap();
    assert!(reap["reaped"].as_array().unwrap().is_empty(), "seed {seed}: stale liveness {reap}");
    let (_, out, _) = cli(&b.home(), &["liveness", "get", run_id]);
    let live: Value = serde_json::from_str(&out).unwrap();
    assert!(live["tasks"].as_object().unwrap().is_empty() && live["supervisor_pid"].is_null(), "seed {seed}: {live}");
    // The API (restarted or not) reads the finished run.
    let runs = api.get("/runs").json();
    assert_eq!(runs[0]["status"], "finished");
}

#[test]
fn chaos_runs_keep_every_invariant() {
    let n: u64 = std::env::var("HARNESS_CHAOS_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(10);
    let base: u64 = std::env::var("HARNESS_CHAOS_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
    });
    let mut totals: HashMap<&str, u32> = HashMap::new();
    let start = Instant::now();
    for i in 0..n {
        let seed = base.wrapping_add(i);
        eprintln!("chaos run {}/{n}: seed {seed}", i + 1);
        for (k, v) in chaos_run(seed) {
            *totals.entry(k).or_default() += v;
        }
    }
    eprintln!("chaos: {n} runs x 20 tasks in {:.1} s, faults injected: {totals:?}", start.elapsed().as_secs_f64());
}
