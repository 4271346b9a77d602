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
