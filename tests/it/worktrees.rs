//! Parallel tasks in isolated git worktrees (plan `isolation`, default "worktree"): each task's commit
//! holds exactly its own files, a conflict halts the task naming its paths and a steer redoes it on
//! top, `setup` runs in every fresh worktree, integration is exactly once across a supervisor killed
//! between a task's commit and its integration, and no worktree or task branch outlives the run —
//! not even a supervisor killed during its run-end work (the next `supervise` finishes that work).
//! Real git, the real binary, fake engines through the real wrappers.

use crate::common::*;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(30);

/// Nothing of the run's worktrees is left: no linked worktree, no task branch, no directory.
fn assert_no_worktree_left(b: &Bench) {
    let list = git(&b.repo(), &["worktree", "list", "--porcelain"]);
    assert_eq!(list.matches("worktree ").count(), 1, "linked worktrees left:\n{list}");
    let branches = git(&b.repo(), &["branch", "--list", "harness/*"]);
    assert!(branches.is_empty(), "task branches left: {branches}");
    assert!(!b.home().join("worktrees").join(b.run_id()).exists(), "the run's worktrees dir is left");
}

#[test]
fn three_parallel_tasks_each_commit_exactly_their_own_files() {
    let b = Bench::new();
    let p = b.plan(
        r#"{"v":"plan/v1","slug":"par","max_parallel":3,"tasks":[
        {"id":"a","wave":1,"adapter":"claude","prompt":"write a [fake-write:out-a.txt]"},
        {"id":"b","wave":1,"adapter":"cursor","prompt":"write b [fake-write:out-b.txt]"},
        {"id":"c","wave":1,"adapter":"claude","prompt":"write c [fake-write:src/out-c.txt]"},
        {"id":"d","wave":2,"adapter":"claude","prompt":"write d [fake-write:out-d.txt]"}]}"#,
    );
    let out = b.harness("success").arg("run").arg(&p).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for (task, file) in [("a", "out-a.txt"), ("b", "out-b.txt"), ("c", "src/out-c.txt"), ("d", "out-d.txt")] {
        assert_eq!(b.commits_of(task), 1, "{task}");
        assert_eq!(files_of(&b.repo(), &b.commit_of(task)), vec![file.to_string()], "task {task}'s commit");
        let text = std::fs::read_to_string(b.repo().join(file)).unwrap();
        assert!(text.contains(&format!("(task {task},")), "{file} was written by {task}: {text}");
    }
    // Wave 2 started from a tip holding every wave-1 commit.
    let d = b.commit_of("d");
    for t in ["a", "b", "c"] {
        assert!(
            Command::new("git")
                .arg("-C")
                .arg(b.repo())
                .args(["merge-base", "--is-ancestor", &b.commit_of(t), &d])
                .status()
                .unwrap()
                .success(),
            "{t} is not below d"
        );
    }
    // Each turn ran in its own worktree, outside the checkout.
    let cwds: Vec<String> = b.records().iter().map(|r| r["cwd"].as_str().unwrap().to_string()).collect();
    let wt_root = b.home().join("worktrees").join(b.run_id());
    for cwd in &cwds {
        assert!(Path::new(cwd).starts_with(&wt_root), "turn ran in {cwd}, not under {}", wt_root.display());
    }
    assert_eq!(b.view()["status"], "finished");
    assert_no_worktree_left(&b);
}

#[test]
fn two_tasks_creating_the_same_file_one_commits_the_other_halts_naming_it_and_a_steer_redoes_it_on_top() {
    let b = Bench::new();
    let plan = r#"{"v":"plan/v1","slug":"clash","max_parallel":2,"tasks":[
        {"id":"A","wave":1,"adapter":"claude","prompt":"create it [fake-write:shared.txt]"},
        {"id":"B","wave":1,"adapter":"claude","prompt":"create it too [fake-write:shared.txt]"}]}"#;
    let _sup = b.start_supervised(plan, "success", &["--linger", "1m"]);
    // One of the two integrates first; the other conflicts.
    let settled = wait_for(T, || {
        let v = b.view();
        let states: Vec<String> =
            ["A", "B"].iter().map(|t| v["tasks"][t]["state"].as_str().unwrap_or("").to_string()).collect();
        (states.contains(&"committed".to_string()) && states.contains(&"halted".to_string())).then_some(v)
    })
    .unwrap_or_else(|| panic!("no commit + conflict: {:#}\n{}", b.view()["tasks"], b.supervisor_log()));
    let (first, second) = if settled["tasks"]["A"]["state"] == "committed" { ("A", "B") } else { ("B", "A") };
    let detail = settled["tasks"][second]["detail"].as_str().unwrap().to_string();
    let tip = git(&b.repo(), &["rev-parse", "--short=7", "HEAD"]);
    assert_eq!(detail, format!("conflict integrating onto {tip}: shared.txt (both added)"));
    // The run's branch keeps the first version; the halted task's worktree is kept, and shown.
    let text = std::fs::read_to_string(b.repo().join("shared.txt")).unwrap();
    assert!(text.contains(&format!("(task {first},")) && !text.contains(&format!("(task {second},")), "{text}");
    let kept = b.home().join("worktrees").join(b.run_id()).join(second);
    assert!(kept.join("shared.txt").exists(), "the halted task's worktree is kept for inspection");
    let api = ApiProc::start(&b.home(), &[]);
    let (code, shown, err) = cli(&b.home(), &["show", &b.run_id(), "--api", &format!("127.0.0.1:{}", api.port)]);
    assert_eq!(code, 0, "{err}");
    assert!(shown.contains(&format!("worktree {}", kept.display())), "harness show lists the kept worktree:\n{shown}");
    let (code, _, err) = cli(&b.home(), &["clean", &b.run_id()]);
    assert_eq!(code, 1, "clean is refused while the supervisor is live");
    assert!(err.contains("is live"), "{err}");
    // A steer redoes it in a fresh worktree at the current tip with its earlier attempt applied:
    // the agent sees both versions between git's conflict markers, and resolves them.
    let sock = b.sock();
    let r = control(
        &sock,
        &serde_json::json!({"verb":"steer","task":second,"msg":"keep both [fake-resolve:shared.txt] [fake-write:shared.txt]"}),
    );
    assert_eq!(r["ok"], true, "{r}");
    b.wait_state(second, "committed", T);
    let text = std::fs::read_to_string(b.repo().join("shared.txt")).unwrap();
    assert!(text.contains(&format!("(task {first},")) && text.contains(&format!("(task {second},")), "{text}");
    assert_eq!(files_of(&b.repo(), &b.commit_of(second)), vec!["shared.txt".to_string()]);
    assert_eq!(b.commits_of(first), 1);
    assert_eq!(b.commits_of(second), 1);
    wait_for(T, || (b.view()["status"] == "finished").then_some(())).expect("the run finishes");
    wait_for(T, || (!sock.exists()).then_some(())).expect("the supervisor exits");
    assert_no_worktree_left(&b);
    let (code, out, err) = cli(&b.home(), &["clean", &b.run_id()]);
    assert_eq!(
        (code, out.trim()),
        (0, format!("run {}: no task worktree or task branch to remove", b.run_id()).as_str()),
        "{err}"
    );
}

#[test]
fn setup_runs_in_each_fresh_worktree_and_its_failure_halts_the_task() {
    let b = Bench::new();
    let record = b.dir.path().join("setup-ran");
    std::fs::create_dir(&record).unwrap();
    let plan = format!(
        r#"{{"v":"plan/v1","slug":"setup","max_parallel":2,"setup":"pwd > {}/$HARNESS_TASK","tasks":[
        {{"id":"a","wave":1,"adapter":"claude","prompt":"a [fake-write:a.txt]"}},
        {{"id":"b","wave":1,"adapter":"claude","prompt":"b [fake-write:b.txt]"}}]}}"#,
        record.display()
    );
    let out = b.harness("success").arg("run").arg(b.plan(&plan)).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for t in ["a", "b"] {
        let ran_in = std::fs::read_to_string(record.join(t)).unwrap();
        assert_eq!(Path::new(ran_in.trim()), b.home().join("worktrees").join(b.run_id()).join(t));
        assert_eq!(files_of(&b.repo(), &b.commit_of(t)), vec![format!("{t}.txt")]);
    }

    let b = Bench::new();
    let plan = r#"{"v":"plan/v1","slug":"badsetup","setup":"echo npm is missing >&2; exit 7","tasks":[
        {"id":"a","wave":1,"adapter":"claude","prompt":"a [fake-write:a.txt]"}]}"#;
    let out = b.harness("success").arg("run").arg(b.plan(plan)).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let a = &b.view()["tasks"]["a"];
    assert_eq!(a["state"], "halted");
    assert_eq!(a["rc"], 7);
    let detail = a["detail"].as_str().unwrap();
    assert!(detail.starts_with("setup failed (exit 7)") && detail.contains("npm is missing"), "{detail}");
    assert!(b.records().is_empty(), "no turn ran after a failed setup");
}

#[test]
fn supervisor_killed_between_a_tasks_commit_and_its_integration_integrates_it_once_after_restart() {
    let b = Bench::new();
    // The run's index is locked: a task commits in its own worktree, then its integration waits.
    let lock = b.repo().join(".git/index.lock");
    std::fs::write(&lock, "").unwrap();
    let plan = r#"{"v":"plan/v1","slug":"crash","max_parallel":2,"tasks":[
        {"id":"A","wave":1,"adapter":"claude","prompt":"a [fake-write:a.txt]"},
        {"id":"B","wave":1,"adapter":"cursor","prompt":"b [fake-write:b.txt]"}]}"#;
    let mut sup = b.start_supervised(plan, "success", &[]);
    let run = b.run_id();
    let committed_in_worktree = |t: &str| {
        let wt = b.home().join("worktrees").join(&run).join(t);
        wt.exists() && harness::os::git::find_task_commit(&wt, &run, t).is_some()
    };
    wait_for(T, || (committed_in_worktree("A") && committed_in_worktree("B")).then_some(()))
        .unwrap_or_else(|| panic!("tasks never committed in their worktrees: {}", b.supervisor_log()));
    // The supervisor keeps answering while the integrator waits on git's index lock (which it would
    // wait on for 30 s): the fastest of three asks, so a busy CI core does not decide it.
    let took = (0..3)
        .map(|_| {
            let t0 = Instant::now();
            let status = control(&b.sock(), &serde_json::json!({"verb":"status"}));
            assert_eq!(status["ok"], true, "{status}");
            t0.elapsed()
        })
        .min()
        .unwrap();
    assert!(took < Duration::from_millis(50), "status took {took:?} while a commit waited");
    sup.child.kill().unwrap();
    sup.child.wait().unwrap();
    kill_all_with_home(&b.home());
    assert_eq!(b.commits_of("A") + b.commits_of("B"), 0, "nothing was integrated before the kill");
    std::fs::remove_file(&lock).unwrap();
    assert_eq!(b.supervise_to_the_end("success"), 0);
    assert_eq!(b.view()["status"], "finished");
    for (t, f) in [("A", "a.txt"), ("B", "b.txt")] {
        assert_eq!(b.commits_of(t), 1, "{t}");
        assert_eq!(files_of(&b.repo(), &b.commit_of(t)), vec![f.to_string()]);
    }
    // No turn ran again: each engine was called once.
    assert_eq!(b.records().len(), 2);
    assert_no_worktree_left(&b);
}

#[test]
fn a_supervisor_killed_during_its_run_end_leaves_nothing_once_the_run_is_supervised_again() {
    let b = Bench::new();
    let plan = r#"{"v":"plan/v1","slug":"ending","tasks":[
        {"id":"A","wave":1,"adapter":"claude","prompt":"a [fake-write:a.txt]"}]}"#;
    let mut sup = b.start_supervised(plan, "success", &[]);
    b.wait_state("A", "committed", T);
    assert_eq!(sup.wait_exit(T), 0);
    assert_eq!(b.view()["status"], "finished");
    // What a supervisor SIGKILLed after `finished` and before its run-end work leaves: a task
    // worktree and its branch, liveness naming it (dead) and its socket, the socket file.
    let (home, run) = (harness::os::home::Home::at(b.home()), harness::ids::RunId::parse(&b.run_id()).unwrap());
    let tree = harness::os::worktree::of(&home, &run, &harness::ids::TaskId::parse("A").unwrap());
    git(&b.repo(), &["worktree", "add", "-b", &tree.branch, &tree.path.to_string_lossy()]);
    let sock = home.checked_socket_path(&run).unwrap();
    drop(std::os::unix::net::UnixListener::bind(&sock).unwrap());
    let mut dead = Command::new("true").spawn().unwrap();
    dead.wait().unwrap();
    let pointer = harness::state::registry::read(&home, &run).unwrap();
    harness::state::liveness::update(&pointer.liveness_path(), &run, |l| {
        l.supervisor_pid = Some(dead.id() as i32);
        l.sock = Some(sock.clone());
    })
    .unwrap();
    // The next supervisor finds the run over, and finishes what the killed one left.
    assert_eq!(b.supervise_to_the_end("success"), 0);
    assert_no_worktree_left(&b);
    assert!(!sock.exists(), "the dead supervisor's socket is left");
    let live = harness::state::liveness::get(&pointer.liveness_path()).unwrap().unwrap();
    assert!(live.supervisor_pid.is_none() && live.sock.is_none(), "liveness still names the dead supervisor");
}

#[test]
fn shared_isolation_needs_max_parallel_one_and_an_empty_repo_is_refused_for_worktrees() {
    let b = Bench::new();
    let p = b.plan(
        r#"{"v":"plan/v1","slug":"s","isolation":"shared","max_parallel":3,"tasks":[{"id":"a","wave":1,"adapter":"claude","prompt":"a"}]}"#,
    );
    let (code, _, err) = cli(&b.home(), &["plan", "check", p.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(err.contains("isolation: \"shared\" needs max_parallel: 1") && err.contains("got max_parallel 3"), "{err}");
    let p = b.plan(
        r#"{"v":"plan/v1","slug":"s","isolation":"shared","max_parallel":1,"tasks":[{"id":"a","wave":1,"adapter":"claude","prompt":"a [fake-write:a.txt]"}]}"#,
    );
    let out = b.harness("success").arg("run").arg(&p).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(b.records()[0]["cwd"].as_str().map(Path::new), Some(b.repo().as_path()), "shared: the run's worktree");

    let empty = tempfile::tempdir().unwrap();
    git(empty.path(), &["init", "-q"]);
    let p = empty.path().join("plan.json");
    std::fs::write(&p, r#"{"v":"plan/v1","slug":"e","tasks":[{"id":"a","wave":1,"adapter":"claude","prompt":"a"}]}"#)
        .unwrap();
    let out = harness(&b.home()).current_dir(empty.path()).arg("run").arg(&p).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("has no commit yet"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_stale_lock_left_by_a_killed_git_does_not_block_removing_a_task_branch() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    git_repo(&repo);
    let wt = dir.path().join("wt");
    harness::os::git::worktree_add(&repo, &wt, "harness/r/T", "HEAD", harness::os::git::Hooks::Off).unwrap();
    // What a git killed while deleting a ref leaves: packed-refs.lock (deleting any ref takes it),
    // here 10 s old, and the branch's own lock.
    let lock = repo.join(".git/packed-refs.lock");
    let f = std::fs::File::create(&lock).unwrap();
    f.set_modified(std::time::SystemTime::now() - Duration::from_secs(10)).unwrap();
    std::fs::write(repo.join(".git/refs/heads/harness/r/T.lock"), "").unwrap();
    harness::os::git::worktree_remove(&repo, &wt, "harness/r/T").expect("removed despite the stale locks");
    assert!(!wt.exists());
    assert!(harness::os::git::run(&repo, &["rev-parse", "--verify", "--quiet", "refs/heads/harness/r/T"]).is_err());
    // A fresh lock (a git running now) is waited for until it is 5 s old, not taken at once.
    harness::os::git::worktree_add(&repo, &wt, "harness/r/U", "HEAD", harness::os::git::Hooks::Off).unwrap();
    std::fs::write(&lock, "").unwrap();
    let t = Instant::now();
    harness::os::git::worktree_remove(&repo, &wt, "harness/r/U").unwrap();
    assert!(t.elapsed() >= Duration::from_millis(4500), "took a fresh lock after {:?}", t.elapsed());
    // One kept fresh (a git that holds it) is never taken: after 8 s the error names it.
    harness::os::git::worktree_add(&repo, &wt, "harness/r/V", "HEAD", harness::os::git::Hooks::Off).unwrap();
    std::fs::write(&lock, "").unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let toucher = {
        let (lock, stop) = (lock.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                if let Ok(f) = std::fs::File::options().write(true).open(&lock) {
                    let _ = f.set_modified(std::time::SystemTime::now());
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    let err = harness::os::git::worktree_remove(&repo, &wt, "harness/r/V").unwrap_err().to_string();
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    toucher.join().unwrap();
    assert!(err.contains("packed-refs.lock': File exists"), "{err}");
    assert!(lock.exists(), "a lock in use is left alone");
}
