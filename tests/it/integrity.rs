//! Work integrity: nothing an agent did is ever lost. An agent that commits (part of) its own work,
//! a conflict redo that carries its earlier attempt, a turn that changes nothing, two runs in one
//! checkout, a runId used again after a prune, a branch switched under a run, the repository's git
//! hooks, history rewritten below a task's base, and what a run's end and `harness clean` keep.
//! Real git, the real binary, fake engines through the real wrappers.

use crate::common::*;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

const T: Duration = Duration::from_secs(60);

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// Every commit on the branch above the repo's first one changes at least one file.
fn assert_no_empty_commit(repo: &Path) {
    let root = git(repo, &["rev-list", "--max-parents=0", "HEAD"]);
    for sha in git(repo, &["rev-list", &format!("{root}..HEAD")]).lines() {
        assert!(
            !files_of(repo, sha).is_empty(),
            "empty commit {sha} on the branch:\n{}",
            git(repo, &["log", "--stat"])
        );
    }
}

/// No work is lost: every commit git calls dangling holds, path by path, what HEAD holds (the
/// agent's own commits were squashed into the task's commit, whose content is on the branch).
fn assert_no_lost_work(repo: &Path) {
    let fsck = Command::new("git").arg("-C").arg(repo).args(["fsck", "--no-reflogs", "--dangling"]).output().unwrap();
    for line in String::from_utf8_lossy(&fsck.stdout).lines() {
        let Some(sha) = line.strip_prefix("dangling commit ") else { continue };
        for path in git(repo, &["diff-tree", "--no-commit-id", "--name-only", "-r", "--root", sha]).lines() {
            let theirs = git(repo, &["show", &format!("{sha}:{path}")]);
            let ours =
                Command::new("git").arg("-C").arg(repo).args(["show", &format!("HEAD:{path}")]).output().unwrap();
            assert_eq!(
                String::from_utf8_lossy(&ours.stdout).trim(),
                theirs,
                "dangling commit {sha}'s {path} is not on the branch: work lost"
            );
        }
    }
}

fn run_batch(b: &Bench, plan: &str) -> std::process::Output {
    b.harness("success").arg("run").arg(b.plan(plan)).output().unwrap()
}

#[test]
fn an_agent_that_commits_part_or_all_of_its_work_itself_lands_all_of_it_in_one_commit_with_its_messages() {
    let b = Bench::new();
    let out = run_batch(
        &b,
        r#"{"v":"plan/v1","slug":"selfcommit","max_parallel":2,"tasks":[
        {"id":"part","wave":1,"adapter":"claude","prompt":"half of it [fake-write:part-2.txt] [fake-commit:part-1.txt]"},
        {"id":"all","wave":1,"adapter":"cursor","prompt":"all of it [fake-write:all-2.txt] [fake-commit:all-1.txt] [fake-commitall]"}]}"#,
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for (task, files, messages) in [
        ("part", ["part-1.txt", "part-2.txt"], vec!["agent: commit part-1.txt"]),
        ("all", ["all-1.txt", "all-2.txt"], vec!["agent: commit all-1.txt", "agent: commit all"]),
    ] {
        assert_eq!(b.commits_of(task), 1, "{task}: one commit");
        let sha = b.commit_of(task);
        assert_eq!(files_of(&b.repo(), &sha), strings(&files), "{task}'s commit holds all its work");
        let body = git(&b.repo(), &["log", "-1", "--format=%B", &sha]);
        for m in messages {
            assert!(body.contains(m), "{task}: the agent's message {m:?} is in the body:\n{body}");
        }
        for f in files {
            assert!(b.repo().join(f).exists(), "{f} is in the checkout");
        }
    }
    assert_no_empty_commit(&b.repo());
    assert_no_lost_work(&b.repo());
    assert_journal_valid(&b.journal());
}

#[test]
fn a_turn_that_changes_nothing_and_a_verdict_seat_commit_nothing_and_say_so() {
    let b = Bench::new();
    let out = run_batch(
        &b,
        r#"{"v":"plan/v1","slug":"nothing","max_parallel":2,"tasks":[
        {"id":"idle","wave":1,"adapter":"claude","prompt":"just look around"},
        {"id":"seat","wave":1,"adapter":"codex","prompt":"review the repo [fake-codex:approve]"},
        {"id":"after","wave":2,"adapter":"claude","prompt":"then write [fake-write:after.txt]"}]}"#,
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let before = git(&b.repo(), &["rev-list", "--count", "HEAD"]);
    assert_eq!(before, "2", "the first commit and after's: {}", git(&b.repo(), &["log", "--oneline"]));
    for t in ["idle", "seat"] {
        assert_eq!(b.commits_of(t), 0, "{t} made no commit");
        let rec = b.journal().into_iter().rfind(|r| r["kind"] == "task" && r["task"] == t).unwrap();
        assert_eq!((rec["state"].as_str(), rec["no_changes"].as_bool()), (Some("committed"), Some(true)), "{rec}");
        assert!(rec.get("sha").is_none(), "{rec}");
    }
    let v = b.view();
    assert_eq!(v["status"], "finished");
    assert_no_empty_commit(&b.repo());
    assert_journal_valid(&b.journal());
    let (code, out, err) = cli(&b.home(), &["journal", "reconcile", &b.run_id()]);
    assert_eq!(code, 0, "reconcile accepts a committed task without a sha: {out}{err}");
}

/// Waits until one of tasks `a` and `b` committed and the other halted on their conflict; returns
/// (winner, loser).
fn settle_conflict(b: &Bench) -> (&'static str, &'static str) {
    let settled = wait_for(T, || {
        let v = b.view();
        let s = |t: &str| v["tasks"][t]["state"].as_str().unwrap_or("").to_string();
        (s("a") == "committed" && s("b") == "halted" || s("b") == "committed" && s("a") == "halted").then_some(v)
    })
    .unwrap_or_else(|| panic!("no commit + conflict: {:#}\n{}", b.view()["tasks"], b.supervisor_log()));
    if settled["tasks"]["a"]["state"] == "committed" { ("a", "b") } else { ("b", "a") }
}

#[test]
fn a_conflict_redo_starts_with_its_earlier_attempt_so_its_own_file_lands_and_markers_are_never_committed() {
    let b = Bench::new();
    // The setup refuses conflict markers: it runs on the clean tip, before the attempt is carried in.
    let plan = r#"{"v":"plan/v1","slug":"redo","max_parallel":2,"setup":"! grep -qs '^<<<<<<< ' shared.txt","tasks":[
        {"id":"a","wave":1,"adapter":"claude","prompt":"a [fake-write:shared.txt] [fake-write:a-own.txt]"},
        {"id":"b","wave":1,"adapter":"claude","prompt":"b [fake-write:shared.txt] [fake-write:b-own.txt]"}]}"#;
    let _sup = b.start_supervised(plan, "success", &["--linger", "2m"]);
    let (winner, loser) = settle_conflict(&b);
    assert!(b.view()["tasks"][loser]["detail"].as_str().unwrap().starts_with("conflict integrating onto"));
    // The halted attempt stays reachable, by name.
    let run = b.run_id();
    let attempt = format!("refs/harness/{run}/{loser}/attempt-1");
    let kept = git(&b.repo(), &["rev-parse", &attempt]);
    assert_eq!(files_of(&b.repo(), &kept), strings(&[&format!("{loser}-own.txt"), "shared.txt"]));
    // A redo that does not resolve the conflict is never committed: it halts naming the path.
    let r =
        control(&b.sock(), &serde_json::json!({"verb":"steer","task":loser,"msg":"try again [fake-write:shared.txt]"}));
    assert_eq!(r["ok"], true, "{r}");
    let detail = wait_for(T, || {
        let v = b.view();
        let t = &v["tasks"][loser];
        (t["state"] == "halted" && t["attempts"] == 2).then(|| t["detail"].as_str().unwrap_or("").to_string())
    })
    .unwrap_or_else(|| panic!("{:#}", b.view()["tasks"]));
    assert!(detail.contains("unresolved conflicts in shared.txt"), "{detail}");
    // The redo's prompt said which path conflicts, against whose commit.
    let prompt = std::fs::read_to_string(b.repo().join(format!("runstate/redo.prompts/{loser}.2.txt"))).unwrap();
    let winner_sha = git(&b.repo(), &["rev-parse", "--short=7", &b.commit_of(winner)]);
    assert!(
        prompt.contains(&format!("shared.txt (both added), against {winner_sha} of task {winner}")),
        "the prompt names the conflict:\n{prompt}"
    );
    // The loser's redo only resolves shared.txt: its own file, from the first attempt, lands too.
    let r = control(
        &b.sock(),
        &serde_json::json!({"verb":"steer","task":loser,"msg":"keep both [fake-resolve:shared.txt]"}),
    );
    assert_eq!(r["ok"], true, "{r}");
    b.wait_state(loser, "committed", T);
    let sha = b.commit_of(loser);
    assert_eq!(files_of(&b.repo(), &sha), strings(&[&format!("{loser}-own.txt"), "shared.txt"]));
    let shared = std::fs::read_to_string(b.repo().join("shared.txt")).unwrap();
    assert!(shared.contains("(task a,") && shared.contains("(task b,") && !shared.contains("<<<<<<<"), "{shared}");
    assert!(b.repo().join(format!("{loser}-own.txt")).exists());
    wait_for(T, || (b.view()["status"] == "finished").then_some(())).expect("the run finishes");
    wait_for(T, || (!b.sock().exists()).then_some(())).expect("the supervisor exits");
    assert!(
        git(&b.repo(), &["for-each-ref", &format!("refs/harness/{run}/")]).is_empty(),
        "attempt refs go once integrated"
    );
    assert_no_empty_commit(&b.repo());
    assert_journal_valid(&b.journal());
}

/// Runs `a` and `b` in parallel, both doing `write` (`{t}` is the task's id) and writing their own
/// files, until one commits and the
/// other halts on the conflict; returns the supervisor, the winner and the loser.
fn conflict_between_two(b: &Bench, slug: &str, write: &str) -> (Proc, String, String) {
    let (wa, wb) = (write.replace("{t}", "a"), write.replace("{t}", "b"));
    let plan = format!(
        r#"{{"v":"plan/v1","slug":"{slug}","max_parallel":2,"tasks":[
        {{"id":"a","wave":1,"adapter":"claude","prompt":"a {wa} [fake-write:a-own.txt]"}},
        {{"id":"b","wave":1,"adapter":"claude","prompt":"b {wb} [fake-write:b-own.txt]"}}]}}"#
    );
    let sup = b.start_supervised(&plan, "success", &["--linger", "2m"]);
    let (w, l) = settle_conflict(b);
    (sup, w.into(), l.into())
}

#[test]
fn a_binary_conflict_has_no_markers_so_its_redo_commits_only_once_the_agent_resolved_it() {
    let b = Bench::new();
    let (_sup, winner, loser) = conflict_between_two(&b, "bin", "[fake-binary:logo.bin]");
    let steer = |msg: &str| {
        let r = control(&b.sock(), &serde_json::json!({"verb":"steer","task":loser,"msg":msg}));
        assert_eq!(r["ok"], true, "{r}");
    };
    // A redo that leaves the binary conflict alone is not committed (git wrote no marker to find).
    steer("try again");
    let detail = wait_for(T, || {
        let v = b.view();
        let t = &v["tasks"][loser.as_str()];
        (t["state"] == "halted" && t["attempts"] == 2).then(|| t["detail"].as_str().unwrap_or("").to_string())
    })
    .unwrap_or_else(|| panic!("{:#}\n{}", b.view()["tasks"], b.supervisor_log()));
    assert!(detail.contains("unresolved conflicts in logo.bin"), "{detail}");
    let prompt = std::fs::read_to_string(b.repo().join(format!("runstate/bin.prompts/{loser}.2.txt"))).unwrap();
    let winner_sha = git(&b.repo(), &["rev-parse", "--short=7", &b.commit_of(&winner)]);
    assert!(
        prompt
            .contains(&format!("logo.bin (both added), unmerged in the index, against {winner_sha} of task {winner}")),
        "the prompt names the markerless conflict:\n{prompt}"
    );
    // The agent takes its own earlier version: that, and its own file, land.
    steer("take yours [fake-theirs:logo.bin]");
    b.wait_state(&loser, "committed", T);
    let sha = b.commit_of(&loser);
    assert_eq!(files_of(&b.repo(), &sha), strings(&[&format!("{loser}-own.txt"), "logo.bin"]));
    let logo = std::fs::read(b.repo().join("logo.bin")).unwrap();
    assert!(
        logo.starts_with(b"binary\0of task ")
            && logo.windows(loser.len() + 5).any(|w| w == format!("task {loser}").as_bytes()),
        "the loser's own binary is on the branch: {:?}",
        String::from_utf8_lossy(&logo)
    );
    assert_no_empty_commit(&b.repo());
}

#[test]
fn a_redo_survives_a_setup_that_edits_a_tracked_file_a_new_ignore_rule_a_stale_lock_and_a_moved_marked_file() {
    let b = Bench::new();
    let plan = r#"{"v":"plan/v1","slug":"tough","max_parallel":2,"setup":"[ ! -e shared.txt ] || echo setup >> shared.txt","tasks":[
        {"id":"a","wave":1,"adapter":"claude","prompt":"a [fake-write:shared.txt] [fake-write:a-own.txt] [fake-write:a.gen]"},
        {"id":"b","wave":1,"adapter":"claude","prompt":"b [fake-write:shared.txt] [fake-write:b-own.txt] [fake-write:b.gen]"}]}"#;
    let _sup = b.start_supervised(plan, "success", &["--linger", "2m"]);
    let (_, loser) = settle_conflict(&b);
    // The user commits an ignore rule that now covers the loser's new file.
    std::fs::write(b.repo().join(".gitignore"), "*.gen\n").unwrap();
    git(&b.repo(), &["add", ".gitignore"]);
    git(
        &b.repo(),
        &["-c", "user.name=u", "-c", "user.email=u@localhost", "commit", "-q", "-m", "ignore generated files"],
    );
    let steer = |msg: &str, attempts: u64| {
        let r = control(&b.sock(), &serde_json::json!({"verb":"steer","task":loser,"msg":msg}));
        assert_eq!(r["ok"], true, "{r}");
        wait_for(T, || {
            let v = b.view();
            let t = &v["tasks"][loser];
            (t["attempts"] == attempts && (t["state"] == "halted" || t["state"] == "committed"))
                .then(|| (t["state"].as_str().unwrap().to_string(), t["detail"].as_str().unwrap_or("").to_string()))
        })
        .unwrap_or_else(|| panic!("{:#}\n{}", b.view()["tasks"], b.supervisor_log()))
    };
    // The setup edited shared.txt (tracked at the tip): the attempt is still carried in.
    let (state, detail) = steer("again [fake-write:extra.txt]", 2);
    assert_eq!((state.as_str(), detail.contains("unresolved conflicts in shared.txt")), ("halted", true), "{detail}");
    // A git killed in the worktree left its index lock: the worktree (with extra.txt) is kept.
    let wt = b.home().join("worktrees").join(b.run_id()).join(loser);
    let gitdir = git(&wt, &["rev-parse", "--absolute-git-dir"]);
    std::fs::write(Path::new(&gitdir).join("index.lock"), "").unwrap();
    // A marked file moved elsewhere is still found.
    let (state, detail) = steer("move it [fake-mv:shared.txt:moved.txt]", 3);
    assert_eq!((state.as_str(), detail.contains("unresolved conflicts in moved.txt")), ("halted", true), "{detail}");
    let (state, detail) = steer("back [fake-mv:moved.txt:shared.txt] [fake-resolve:shared.txt]", 4);
    assert_eq!(state, "committed", "{detail}");
    let files = files_of(&b.repo(), &b.commit_of(loser));
    for f in [format!("{loser}-own.txt"), format!("{loser}.gen"), "extra.txt".into(), "shared.txt".into()] {
        assert!(files.contains(&f), "{f} is missing from the loser's commit: {files:?}");
    }
    assert!(!std::fs::read_to_string(b.repo().join("shared.txt")).unwrap().contains("<<<<<<<"));
}

#[test]
fn a_redo_keeps_its_own_files_through_a_hard_reset_and_its_own_marker_like_fixture_is_not_a_conflict() {
    let b = Bench::new();
    let (_sup, _winner, loser) =
        conflict_between_two(&b, "fx", "[fake-write:shared.txt] [fake-markers:fixture-{t}.txt]");
    // The agent throws away its tracked edits (the conflicted shared.txt goes back to the tip's):
    // its own new files, a test fixture with marker-like lines among them, are still the task's.
    let r = control(
        &b.sock(),
        &serde_json::json!({"verb":"steer","task":loser,"msg":"take the tip's [fake-git-reset:HEAD]"}),
    );
    assert_eq!(r["ok"], true, "{r}");
    b.wait_state(&loser, "committed", T);
    let files = files_of(&b.repo(), &b.commit_of(&loser));
    assert_eq!(files, strings(&[&format!("{loser}-own.txt"), &format!("fixture-{loser}.txt")]));
    let fixture = std::fs::read_to_string(b.repo().join(format!("fixture-{loser}.txt"))).unwrap();
    assert!(fixture.starts_with("<<<<<<< ours"), "{fixture}");
}

#[test]
fn a_redo_that_ends_at_its_base_halts_once_and_a_second_steer_confirms_it() {
    let b = Bench::new();
    let (_sup, _winner, loser) = conflict_between_two(&b, "empty", "[fake-write:shared.txt]");
    let run = b.run_id();
    let steer = |msg: &str, attempts: u64| {
        let r = control(&b.sock(), &serde_json::json!({"verb":"steer","task":loser,"msg":msg}));
        assert_eq!(r["ok"], true, "{r}");
        wait_for(T, || {
            let v = b.view();
            let t = &v["tasks"][loser.as_str()];
            (t["attempts"] == attempts && (t["state"] == "halted" || t["state"] == "committed")).then(|| t.clone())
        })
        .unwrap_or_else(|| panic!("{:#}\n{}", b.view()["tasks"], b.supervisor_log()))
    };
    // Everything of the attempt thrown away (its own file too): halted, the attempt kept.
    let t = steer(&format!("nothing [fake-git-reset:HEAD] [fake-rm:{loser}-own.txt]"), 2);
    assert_eq!(t["state"], "halted");
    assert!(t["detail"].as_str().unwrap().contains("the redo ends where it started"), "{t}");
    assert!(!git(&b.repo(), &["for-each-ref", &format!("refs/harness/{run}/{loser}/")]).is_empty());
    // Asked again: the task needs none of it.
    let t = steer("really nothing", 3);
    assert_eq!(t["state"], "committed", "{t}");
    assert_eq!(t["no_changes"], true, "{t}");
}

#[test]
fn with_shared_isolation_the_turns_own_commits_are_kept_as_made_and_the_rest_commits_on_top() {
    let b = Bench::new();
    let plan = r#"{"v":"plan/v1","slug":"sh","isolation":"shared","max_parallel":1,"tasks":[
        {"id":"A","wave":1,"adapter":"claude","prompt":"a [fake-commit:mine.txt] [fake-write:rest.txt]"},
        {"id":"B","wave":2,"adapter":"claude","prompt":"b [fake-commit:only.txt]"}]}"#;
    let out = run_batch(&b, plan);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // The commits made in the user's checkout are never rewritten: each is on the branch as made.
    let log = git(&b.repo(), &["log", "--format=%s"]);
    assert!(log.contains("agent: commit mine.txt") && log.contains("agent: commit only.txt"), "{log}");
    // A's commit holds what was left uncommitted, on top of the agent's.
    assert_eq!(files_of(&b.repo(), &b.commit_of("A")), ["rest.txt"]);
    // B committed everything itself: `committed` names the branch's head after its commit.
    let v = b.view();
    let b_sha = v["tasks"]["B"]["sha"].as_str().unwrap().to_string();
    assert_eq!(git(&b.repo(), &["log", "-1", "--format=%s", &b_sha]), "agent: commit only.txt");
    assert!(v["tasks"]["B"]["detail"].as_str().unwrap().contains("never rewrites"), "{}", v["tasks"]["B"]);
    assert_no_empty_commit(&b.repo());
    assert_journal_valid(&b.journal());
}

#[test]
fn two_runs_in_one_checkout_started_together_commit_all_sixteen_tasks_each_with_its_own_files() {
    let b = Bench::new();
    let plan = |slug: &str| {
        let tasks: Vec<String> = (0..8)
            .map(|i| {
                let self_commit = if i % 2 == 0 { format!(" [fake-commit:{slug}/self-{i}.txt]") } else { String::new() };
                format!(
                    r#"{{"id":"t{i}","wave":1,"adapter":"claude","prompt":"t{i} [fake-write:{slug}/t{i}.txt]{self_commit}"}}"#
                )
            })
            .collect();
        format!(r#"{{"v":"plan/v1","slug":"{slug}","max_parallel":3,"tasks":[{}]}}"#, tasks.join(","))
    };
    let paths: Vec<_> = ["run-a", "run-b"]
        .iter()
        .map(|s| {
            let p = b.dir.path().join(format!("{s}.json"));
            std::fs::write(&p, plan(s)).unwrap();
            p
        })
        .collect();
    let children: Vec<_> = paths
        .iter()
        .map(|p| b.harness("success").arg("run").arg(p).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap())
        .collect();
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let mut ids: Vec<String> = std::fs::read_dir(b.home().join("runs"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".json") && !n.starts_with('.'))
        .map(|n| n.trim_end_matches(".json").to_string())
        .collect();
    ids.sort();
    assert_eq!(ids.len(), 2);
    let mut committed = 0;
    for id in &ids {
        let slug = id.split("--").nth(1).unwrap();
        for i in 0..8 {
            let task = format!("t{i}");
            let sha = harness::os::git::find_task_commit(&b.repo(), id, &task).unwrap_or_else(|| panic!("{id} {task}"));
            assert_eq!(harness::os::git::count_task_commits(&b.repo(), id, &task), 1);
            let mut want = vec![format!("{slug}/t{i}.txt")];
            if i % 2 == 0 {
                want.insert(0, format!("{slug}/self-{i}.txt"));
            }
            want.sort();
            assert_eq!(files_of(&b.repo(), &sha), want, "{id} {task}");
            committed += 1;
        }
    }
    assert_eq!(committed, 16);
    assert_no_empty_commit(&b.repo());
}

#[test]
fn a_run_again_after_prune_lands_its_own_work_even_when_killed_between_commit_and_integration() {
    let b = Bench::new();
    let out = run_batch(
        &b,
        r#"{"v":"plan/v1","slug":"again","tasks":[{"id":"T","wave":1,"adapter":"claude","prompt":"first [fake-write:first.txt]"}]}"#,
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let old = b.commit_of("T");
    std::thread::sleep(Duration::from_millis(1100));
    let (code, out, err) = cli(&b.home(), &["prune", "--finished-before", "1s"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("pruned 1 runs"), "{out}");
    // The same slug again, another prompt; integration waits on the repository's lock (held here),
    // and the supervisor is SIGKILLed once the task's commit is in its worktree.
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(b.repo().join(".git/harness-integrate.lock"))
        .unwrap();
    let held = harness::os::flock::Flock::exclusive(&lock).unwrap();
    let plan = r#"{"v":"plan/v1","slug":"again","tasks":[{"id":"T","wave":1,"adapter":"claude","prompt":"second [fake-write:second.txt]"}]}"#;
    let mut sup = b.start_supervised(plan, "success", &[]);
    let wt = b.home().join("worktrees").join(b.run_id()).join("T");
    wait_for(T, || {
        (wt.exists() && harness::os::git::find_task_commit(&wt, &b.run_id(), "T").is_some_and(|s| s != old))
            .then_some(())
    })
    .unwrap_or_else(|| panic!("the task never committed in its worktree: {}", b.supervisor_log()));
    sup.child.kill().unwrap();
    sup.child.wait().unwrap();
    kill_all_with_home(&b.home());
    drop(held);
    assert_eq!(b.supervise_to_the_end("success"), 0);
    assert_eq!(b.view()["status"], "finished");
    assert!(b.repo().join("second.txt").exists(), "the second run's work landed");
    let new = b.commit_of("T");
    assert_ne!(new, old, "the old run's commit was not adopted");
    assert_eq!(files_of(&b.repo(), &new), strings(&["second.txt"]));
    let journaled = b.view()["tasks"]["T"]["sha"].as_str().unwrap().to_string();
    assert_eq!(journaled, new);
    let nonce = b.journal().iter().find(|r| r["event"] == "started").unwrap()["nonce"].as_str().unwrap().to_string();
    assert!(git(&b.repo(), &["log", "-1", "--format=%B", &new]).contains(&format!("Harness-Nonce: {nonce}")));
    assert_journal_valid(&b.journal());
}

#[test]
fn a_branch_switched_in_the_runs_worktree_halts_the_next_integration_naming_both_and_changes_nothing() {
    let b = Bench::new();
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(b.repo().join(".git/harness-integrate.lock"))
        .unwrap();
    let held = harness::os::flock::Flock::exclusive(&lock).unwrap();
    let plan = r#"{"v":"plan/v1","slug":"pinned","tasks":[{"id":"A","wave":1,"adapter":"claude","prompt":"a [fake-write:a.txt]"}]}"#;
    let _sup = b.start_supervised(plan, "success", &["--linger", "1m"]);
    let wt = b.home().join("worktrees").join(b.run_id()).join("A");
    wait_for(T, || (wt.exists() && harness::os::git::find_task_commit(&wt, &b.run_id(), "A").is_some()).then_some(()))
        .unwrap_or_else(|| panic!("A never committed in its worktree: {}", b.supervisor_log()));
    let main_before = git(&b.repo(), &["rev-parse", "main"]);
    git(&b.repo(), &["switch", "-q", "-c", "elsewhere"]);
    drop(held);
    b.wait_state("A", "halted", T);
    let detail = b.view()["tasks"]["A"]["detail"].as_str().unwrap().to_string();
    assert!(
        detail.contains("has elsewhere checked out, but the run integrates onto main"),
        "the halt names both branches: {detail}"
    );
    assert_eq!(git(&b.repo(), &["rev-parse", "main"]), main_before, "main is unchanged");
    assert_eq!(git(&b.repo(), &["rev-parse", "elsewhere"]), main_before, "elsewhere is unchanged");
    assert!(!b.repo().join("a.txt").exists());
}

fn hook(repo: &Path, name: &str, body: &str) {
    use std::os::unix::fs::PermissionsExt;
    let p = repo.join(".git/hooks").join(name);
    std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn the_repositorys_hooks_stay_out_of_harness_git_calls_unless_the_plan_asks_and_then_a_failing_one_halts_with_its_output()
 {
    let b = Bench::new();
    let marker = b.dir.path().join("hook-ran");
    hook(&b.repo(), "pre-commit", "echo 'lint: node_modules missing' >&2; exit 1");
    hook(&b.repo(), "post-checkout", &format!("echo post-checkout >> {}; exit 1", marker.display()));
    hook(&b.repo(), "post-merge", &format!("echo post-merge >> {}; exit 1", marker.display()));
    let out = run_batch(
        &b,
        r#"{"v":"plan/v1","slug":"hooks","tasks":[{"id":"a","wave":1,"adapter":"claude","prompt":"a [fake-write:a.txt]"}]}"#,
    );
    assert!(out.status.success(), "hooks off by default: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(b.commits_of("a"), 1);
    assert!(!marker.exists(), "a hook ran: {}", std::fs::read_to_string(&marker).unwrap_or_default());

    // git_hooks: true — the failing pre-commit halts the task with what it printed.
    let b = Bench::new();
    hook(&b.repo(), "pre-commit", "echo 'lint: node_modules missing' >&2; exit 1");
    let out = run_batch(
        &b,
        r#"{"v":"plan/v1","slug":"hooks","git_hooks":true,"tasks":[{"id":"a","wave":1,"adapter":"claude","prompt":"a [fake-write:a.txt]"}]}"#,
    );
    assert_eq!(out.status.code(), Some(1));
    let d = b.view()["tasks"]["a"]["detail"].as_str().unwrap().to_string();
    assert!(
        d.contains("a git hook refused the commit (git_hooks: true)") && d.contains("lint: node_modules missing"),
        "{d}"
    );
    // … and a failing post-checkout halts it before its turn.
    let b = Bench::new();
    hook(&b.repo(), "post-checkout", "echo 'husky - not installed' >&2; exit 1");
    let out = run_batch(
        &b,
        r#"{"v":"plan/v1","slug":"hooks","git_hooks":true,"tasks":[{"id":"a","wave":1,"adapter":"claude","prompt":"a [fake-write:a.txt]"}]}"#,
    );
    assert_eq!(out.status.code(), Some(1));
    let d = b.view()["tasks"]["a"]["detail"].as_str().unwrap().to_string();
    assert!(d.contains("a git hook failed (git_hooks: true)") && d.contains("husky - not installed"), "{d}");
    assert!(b.records().is_empty(), "no turn ran");
}

#[test]
fn an_agent_that_resets_below_its_base_halts_the_task_and_its_work_is_kept() {
    let b = Bench::new();
    std::fs::write(b.repo().join("second"), "2\n").unwrap();
    git(&b.repo(), &["add", "second"]);
    git(&b.repo(), &["commit", "-qm", "second"]);
    let out = run_batch(
        &b,
        r#"{"v":"plan/v1","slug":"below","tasks":[{"id":"a","wave":1,"adapter":"claude","prompt":"a [fake-write:a.txt] [fake-git-reset:HEAD~1]"}]}"#,
    );
    assert_eq!(out.status.code(), Some(1));
    let d = b.view()["tasks"]["a"]["detail"].as_str().unwrap().to_string();
    assert!(d.contains("rewrote history below the task's base"), "{d}");
    let wt = b.home().join("worktrees").join(b.run_id()).join("a");
    assert!(wt.join("a.txt").exists(), "the task's work is kept in its worktree");
}

#[test]
fn a_runs_end_and_clean_keep_a_halted_tasks_unintegrated_work_and_say_why_until_forced() {
    let b = Bench::new();
    let out = run_batch(
        &b,
        r#"{"v":"plan/v1","slug":"keep","max_parallel":2,"tasks":[
        {"id":"a","wave":1,"adapter":"claude","prompt":"a [fake-write:shared.txt] [fake-write:a-own.txt]"},
        {"id":"b","wave":1,"adapter":"claude","prompt":"b [fake-write:shared.txt] [fake-write:b-own.txt]"}]}"#,
    );
    assert_eq!(out.status.code(), Some(1), "batch: a conflict ends the run");
    let v = b.view();
    let loser = if v["tasks"]["a"]["state"] == "halted" { "a" } else { "b" };
    let run = b.run_id();
    let wt = b.home().join("worktrees").join(&run).join(loser);
    assert!(wt.join(format!("{loser}-own.txt")).exists(), "the run's end kept the halted task's worktree");
    let branch = format!("harness/{run}/{loser}");
    assert!(!git(&b.repo(), &["branch", "--list", &branch]).is_empty(), "and its branch");
    let (code, out, err) = cli(&b.home(), &["clean", &run]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(&format!("kept {}: task {loser} is not integrated and holds", wt.display()))
            && out.contains("harness clean --force"),
        "clean says what it keeps and why:\n{out}"
    );
    assert!(wt.exists());
    // Retention keeps the run whose journal says whose that work is.
    std::thread::sleep(Duration::from_millis(1100));
    let (code, out, err) = cli(&b.home(), &["prune", "--finished-before", "1s"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(&format!("kept {run}: it keeps unintegrated task work")), "{out}");
    let (code, out, err) = cli(&b.home(), &["clean", &run, "--force"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(&format!("removed {}", wt.display())), "{out}");
    assert!(!wt.exists());
    assert!(git(&b.repo(), &["branch", "--list", "harness/*"]).is_empty());
    assert!(git(&b.repo(), &["for-each-ref", &format!("refs/harness/{run}/")]).is_empty());
    let (code, out, err) = cli(&b.home(), &["prune", "--finished-before", "1s"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("pruned 1 runs"), "{out}");
}

#[test]
fn the_same_plan_run_again_over_an_earlier_runs_kept_work_is_refused_naming_it_and_deletes_nothing() {
    let b = Bench::new();
    let plan = r#"{"v":"plan/v1","slug":"again2","max_parallel":2,"tasks":[
        {"id":"a","wave":1,"adapter":"claude","prompt":"a [fake-write:shared.txt] [fake-write:a-own.txt]"},
        {"id":"b","wave":1,"adapter":"claude","prompt":"b [fake-write:shared.txt] [fake-write:b-own.txt]"}]}"#;
    assert_eq!(run_batch(&b, plan).status.code(), Some(1), "a conflict ends the first run");
    let v = b.view();
    let loser = if v["tasks"]["a"]["state"] == "halted" { "a" } else { "b" };
    let run = b.run_id();
    let wt = b.home().join("worktrees").join(&run).join(loser);
    // The user clears the run's files, as the refusal to run a plan twice says, and runs it again.
    for f in std::fs::read_dir(b.repo().join("runstate")).unwrap().flatten() {
        if f.file_name().to_string_lossy().starts_with("again2.") {
            let _ = std::fs::remove_file(f.path()).or_else(|_| std::fs::remove_dir_all(f.path()));
        }
    }
    let out = run_batch(&b, plan);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "refused: {err}");
    assert!(err.contains(&wt.display().to_string()) && err.contains("harness clean"), "names the kept work: {err}");
    assert!(wt.join(format!("{loser}-own.txt")).exists(), "and deletes none of it");
    assert!(!git(&b.repo(), &["for-each-ref", &format!("refs/harness/{run}/")]).is_empty(), "its refs stay");
    let (code, out, err) = cli(&b.home(), &["clean", &run, "--force"]);
    assert_eq!(code, 0, "{out}{err}");
    for f in std::fs::read_dir(b.repo().join("runstate")).unwrap().flatten() {
        if f.file_name().to_string_lossy().starts_with("again2.") {
            let _ = std::fs::remove_file(f.path()).or_else(|_| std::fs::remove_dir_all(f.path()));
        }
    }
    let out = run_batch(
        &b,
        plan.replace("[fake-write:shared.txt] [fake-write:b-own.txt]", "[fake-write:b-own.txt]").as_str(),
    );
    assert!(out.status.success(), "after clean --force the plan runs: {}", String::from_utf8_lossy(&out.stderr));
}
