//! `harness top` in a real pseudo-terminal (util-linux `script`): it shows the runs and tasks,
//! redraws when a journal changes, and its keys act through the API — pause (`p`), kill (`x`, `y`),
//! budget (`b`), quit (`q`). `--once` prints one frame as plain text (`tests/it/budget.rs`).

use crate::common::*;
use serde_json::json;
use std::process::Command;
use std::time::Duration;

const T: Duration = Duration::from_secs(30);

/// Types `k` and gives the dashboard a moment to act on it.
fn press(top: &mut TopPty, k: &str) {
    top.press(k);
    std::thread::sleep(Duration::from_millis(300));
}

/// Waits until the screen shows `what` after `mark`.
fn shows(top: &TopPty, mark: usize, what: &str) {
    top.shown_since(mark, what, T).unwrap_or_else(|| panic!("the screen never showed {what:?}:\n{}", top.text()));
}

#[test]
fn top_shows_runs_redraws_on_changes_and_its_keys_act() {
    if Command::new("script").arg("--version").output().is_err() {
        assert!(std::env::var_os("CI").is_none(), "script (util-linux) is required under CI");
        eprintln!("SKIPPED: no script(1) for a pseudo-terminal");
        return;
    }
    let b = Bench::new();
    let plan = json!({"v":"plan/v1","slug":"topped","tasks":[
        {"id":"H","wave":1,"adapter":"claude","prompt":"hang [fake-claude:hang]"},
        {"id":"Z","wave":2,"adapter":"claude","prompt":"later"}]});
    let _sup = b.start_supervised(&plan.to_string(), "success", &[]);
    b.wait_state("H", "leased", T);
    let api = ApiProc::start(&b.home(), &[]);
    let run = b.run_id();
    let mut top = TopPty::start(&b.home(), api.port);
    shows(&top, 0, &run);
    shows(&top, 0, "leased");
    // p pauses the run; the change comes back through /watch and is drawn.
    let before = top.mark();
    press(&mut top, "p");
    wait_for(T, || b.controls("pause").iter().any(|c| c["by"] == "top").then_some(())).expect("paused by top");
    top.shown_since(before, "operator", T).expect("redrawn paused");
    // Tab to the tasks, x then y kills H.
    press(&mut top, "\t");
    press(&mut top, "x");
    shows(&top, 0, "kill H? y/n");
    press(&mut top, "y");
    b.wait_state("H", "halted", T);
    assert_eq!(b.view()["tasks"]["H"]["detail"], "killed by top");
    // b sets a budget.
    press(&mut top, "b");
    press(&mut top, "7.5\r");
    wait_for(T, || b.controls("budget").iter().any(|c| c["usd"] == 7.5 && c["by"] == "top").then_some(()))
        .expect("a budget by top");
    // Enter opens the selected task's stream in a pane: H's events, its killed turn's exit last;
    // Esc closes it.
    press(&mut top, "\r");
    shows(&top, 0, "rc=143");
    press(&mut top, "\x1b");
    press(&mut top, "q");
    let status = wait_for(T, || top.child.try_wait().unwrap()).expect("top quits on q");
    assert!(status.success(), "{status:?}");
}
