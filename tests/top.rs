//! `harness top` in a real pseudo-terminal (util-linux `script`): it shows the runs and tasks,
//! redraws when a journal changes, and its keys act through the API — pause (`p`), kill (`x`, `y`),
//! budget (`b`), quit (`q`). `--once` prints one frame as plain text (`tests/budget.rs`).

mod common;

use common::*;
use serde_json::json;
use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const T: Duration = Duration::from_secs(30);

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
    let cmd = format!("stty cols 160 rows 40; exec {} top --api 127.0.0.1:{}", bin().display(), api.port);
    let mut child = Command::new("script")
        .args(["-qfec", &cmd, "/dev/null"])
        .env("HARNESS_HOME", b.home())
        .env("TERM", "xterm-256color")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let screen = Arc::new(Mutex::new(String::new()));
    let mut out = child.stdout.take().unwrap();
    let s2 = screen.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 8192];
        while let Ok(n) = out.read(&mut buf) {
            if n == 0 {
                break;
            }
            s2.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    let mut keys = child.stdin.take().unwrap();
    let mut press = |k: &str| {
        keys.write_all(k.as_bytes()).unwrap();
        keys.flush().unwrap();
        std::thread::sleep(Duration::from_millis(300));
    };
    let shows = |what: &str| {
        wait_for(T, || screen.lock().unwrap().contains(what).then_some(()))
            .unwrap_or_else(|| panic!("the screen never showed {what:?}:\n{}", screen.lock().unwrap()))
    };
    shows(&run);
    shows("leased");
    // p pauses the run; the change comes back through /watch and is drawn.
    let before = screen.lock().unwrap().len();
    press("p");
    wait_for(T, || b.controls("pause").iter().any(|c| c["by"] == "top").then_some(())).expect("paused by top");
    wait_for(T, || screen.lock().unwrap()[before..].contains("operator").then_some(())).expect("redrawn paused");
    // Tab to the tasks, x then y kills H.
    press("\t");
    press("x");
    shows("kill H? y/n");
    press("y");
    b.wait_state("H", "halted", T);
    assert_eq!(b.view()["tasks"]["H"]["detail"], "killed by top");
    // b sets a budget.
    press("b");
    press("7.5\r");
    wait_for(T, || b.controls("budget").iter().any(|c| c["usd"] == 7.5 && c["by"] == "top").then_some(()))
        .expect("a budget by top");
    // Enter opens the selected task's stream in a pane: H's events, its killed turn's exit last;
    // Esc closes it.
    press("\r");
    shows("rc=143");
    press("\x1b");
    press("q");
    let status = wait_for(T, || child.try_wait().unwrap()).expect("top quits on q");
    assert!(status.success(), "{status:?}");
}
