//! Scheduler failure paths outside the journal: a filesystem error halts the task with its own detail
//! (it used to be taken for a journal failure and the task silently skipped), and recovery kills only
//! process groups led by one of the run's own steps (it used to take any `sh -c` for one).

use crate::common::*;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::Duration;

const T: Duration = Duration::from_secs(30);

#[test]
fn a_filesystem_error_halts_the_task_with_its_own_detail_and_shows_in_status() {
    let b = Bench::new();
    // Where the prompts directory goes, a file: creating the directory fails (even for root).
    std::fs::create_dir_all(b.repo().join("runstate")).unwrap();
    let blocker = b.repo().join("runstate/fsfail.prompts");
    std::fs::write(&blocker, "not a directory\n").unwrap();
    let plan = r#"{"v":"plan/v1","slug":"fsfail","tasks":[{"id":"A","wave":1,"adapter":"claude","prompt":"a"}]}"#;
    let out = b.harness("success").arg("run").arg(b.plan(plan)).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let a = &b.view()["tasks"]["A"];
    assert_eq!(a["state"], "halted", "{a:#}");
    let detail = a["detail"].as_str().unwrap();
    assert!(detail.starts_with(&format!("cannot create {}", blocker.display())), "{detail}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(&format!("A (cannot create {}", blocker.display())),
        "the run's failure names the task and why: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(b.records().is_empty(), "no engine ran");
}

#[test]
fn recovery_leaves_a_stranger_shell_group_alone_even_when_liveness_names_its_pid() {
    let b = Bench::new();
    let plan = r#"{"v":"plan/v1","slug":"strange","tasks":[{"id":"A","wave":1,"adapter":"claude","prompt":"a"}]}"#;
    let mut sup = b.start_supervised(plan, "hang", &[]);
    b.wait_state("A", "leased", T);
    sup.child.kill().unwrap();
    sup.child.wait().unwrap();
    kill_all_with_home(&b.home());
    // A process group of someone else's, led by a plain `sh -c` (what a recycled pid could be).
    let stranger = Command::new("sh").args(["-c", "sleep 60"]).process_group(0).stdout(Stdio::null()).spawn().unwrap();
    let mut stranger = Proc { child: stranger };
    let pid = stranger.child.id();
    let rec = serde_json::json!({"pid": pid, "pgid": pid, "logfile": "/dev/null", "state": "leased",
                                 "started_ts": "2026-12-01T00:00:00.000Z"});
    let (code, _, err) = cli(&b.home(), &["liveness", "set", &b.run_id(), "A", &rec.to_string()]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(b.supervise_to_the_end("success"), 0);
    assert_eq!(b.view()["status"], "finished");
    assert!(stranger.child.try_wait().unwrap().is_none(), "recovery killed a stranger's process group");
}
