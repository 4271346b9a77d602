//! The run lifecycle a person drives: preflight before anything is registered, re-runs, short
//! references, blocked runs, retry and skip, a clean stop.

use crate::common::*;
use std::os::unix::fs::PermissionsExt;

/// Nothing of a run is on disk: no runstate journal, no registry pointer.
fn nothing_registered(b: &Bench) {
    let runstate = b.repo().join("runstate");
    let journals: Vec<_> = std::fs::read_dir(&runstate)
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(journals.is_empty(), "runstate holds {journals:?}");
    let pointers: Vec<_> = std::fs::read_dir(b.home().join("runs"))
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(pointers.is_empty(), "a run was registered: {pointers:?}");
}

#[test]
fn a_missing_or_broken_engine_is_refused_before_anything_is_registered() {
    let b = Bench::new();
    let p = b.plan(
        r#"{"v":"plan/v1","slug":"pre","tasks":[{"id":"A","wave":1,"adapter":"claude","prompt":"x","review":true},
            {"id":"B","wave":1,"adapter":"cursor","prompt":"y"}]}"#,
    );
    let broken = b.dir.path().join("broken-codex");
    std::fs::write(&broken, "#!/bin/sh\necho 'codex: cannot load its config' >&2\nexit 7\n").unwrap();
    std::fs::set_permissions(&broken, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = b
        .harness("success")
        .env("HARNESS_CLAUDE_BIN", b.dir.path().join("no-such-claude"))
        .env("HARNESS_CODEX_BIN", &broken)
        .args(["run", "--supervised"])
        .arg(&p)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("nothing was registered"), "{err}");
    assert!(err.contains("adapter claude (task A): HARNESS_CLAUDE_BIN="), "{err}");
    assert!(err.contains("is not an executable file"), "{err}");
    assert!(err.contains("adapter codex (task A's review)") && err.contains("cannot load its config"), "{err}");
    assert!(!err.contains("adapter cursor"), "the working engine is not named: {err}");
    nothing_registered(&b);
    assert!(!b.record().exists(), "an engine turn ran");
    // Not on PATH at all, with no variable set: the fix names the variable.
    let out = b
        .harness("success")
        .env_remove("HARNESS_CLAUDE_BIN")
        .env("PATH", "/usr/bin:/bin")
        .args(["run"])
        .arg(&p)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("claude not found on PATH: install it, or set HARNESS_CLAUDE_BIN"), "{err}");
    nothing_registered(&b);
}

#[test]
fn a_setup_program_that_does_not_exist_and_a_wrong_branch_are_refused() {
    let b = Bench::new();
    let p = b.plan(
        r#"{"v":"plan/v1","slug":"pre","base_branch":"release","setup":"cp .env.example .env && no-such-tool install",
            "tasks":[{"id":"A","wave":1,"adapter":"claude","prompt":"x"}]}"#,
    );
    let out = b.harness("success").arg("run").arg(&p).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("setup: \"no-such-tool\" is not a command here"), "{err}");
    assert!(!err.contains("\"cp\""), "{err}");
    assert!(err.contains("base_branch: the plan runs on \"release\"") && err.contains("git switch release"), "{err}");
    nothing_registered(&b);
}

fn pointer(b: &Bench, run: &str) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(b.home().join("runs").join(format!("{run}.json"))).unwrap()).unwrap()
}

#[test]
fn a_plan_run_three_times_makes_three_runs_each_with_its_own_slug_commit_and_history() {
    let b = Bench::new();
    let plan = r#"{"v":"plan/v1","slug":"again","tasks":[{"id":"A","wave":1,"adapter":"claude","prompt":"a [fake-write:a.txt]"}]}"#;
    let p = b.plan(plan);
    let mut ids = Vec::new();
    for n in 1..=3 {
        let out = b.harness("success").arg("run").arg(&p).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "run {n}: {text}");
        let id = b.run_id();
        assert!(text.contains(&id), "run {n} prints its id {id}: {text}");
        ids.push(id);
    }
    let slugs: Vec<&str> = ids.iter().map(|i| i.split("--").nth(1).unwrap()).collect();
    assert_eq!(slugs, vec!["again", "again-2", "again-3"]);
    for (i, id) in ids.iter().enumerate() {
        // Each run's journal is its own, finished, with its own commit of A.
        let j = json_lines(&b.repo().join(format!("runstate/{}.jsonl", slugs[i])));
        assert!(j.iter().any(|r| r["kind"] == "run" && r["event"] == "finished"), "{id}");
        assert_eq!(harness::os::git::count_task_commits(&b.repo(), id, "A"), 1, "{id}: its own commit");
        let ptr = pointer(&b, id);
        assert_eq!(ptr["baseSlug"].as_str(), if i == 0 { None } else { Some("again") }, "{ptr}");
    }
    // --slug chooses; a taken one is refused naming the run that holds it.
    let out = b.harness("success").args(["run", "--slug", "again-2"]).arg(&p).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--slug again-2 is taken") && err.contains(&ids[1]), "{err}");
    let out = b.harness("success").args(["run", "--slug", "hotfix"]).arg(&p).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(pointer(&b, &b.run_id().replace("again-3", "hotfix"))["baseSlug"], "again");
}

#[test]
fn a_live_run_of_the_plan_is_refused_and_two_reruns_started_at_once_take_different_slugs() {
    let b = Bench::new();
    let plan = r#"{"v":"plan/v1","slug":"busy","tasks":[{"id":"A","wave":1,"adapter":"claude","prompt":"a"}]}"#;
    let p = b.plan(plan);
    // A registered run that has not ended is live (its supervisor may be gone: it counts until stopped).
    let out = b.harness("success").args(["run", "--register-only"]).arg(&p).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let live = b.run_id();
    let out = b.harness("success").arg("run").arg(&p).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains(&live) && err.contains("harness stop"), "names the live run and what ends it: {err}");
    // With --slug the plan may run beside it; two at once never share a slug.
    let spawn = |s: &str| b.harness("success").args(["run", "--register-only", "--slug", s]).arg(&p).spawn().unwrap();
    let (mut x, mut y) = (spawn("twin"), spawn("twin"));
    let codes = [x.wait().unwrap().code(), y.wait().unwrap().code()];
    assert!(codes.contains(&Some(0)) && codes.contains(&Some(2)), "one takes twin, the other is refused: {codes:?}");
    // Once the plan's own run has ended, re-runs started together take -2 and -3.
    let (code, _, err) =
        cli(&b.home(), &["journal", "append", &live, r#"{"kind":"run","event":"failed","by":"test"}"#]);
    assert_eq!(code, 0, "{err}");
    let spawn = || b.harness("success").args(["run", "--register-only"]).arg(&p).output().unwrap();
    let (x, y) = std::thread::scope(|s| {
        let x = s.spawn(spawn);
        let y = s.spawn(spawn);
        (x.join().unwrap(), y.join().unwrap())
    });
    let mut got: Vec<String> = [x, y]
        .iter()
        .map(|o| {
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            String::from_utf8_lossy(&o.stdout).trim().rsplit("--").next().unwrap().to_string()
        })
        .collect();
    got.sort();
    assert_eq!(got, vec!["busy-2", "busy-3"]);
}
