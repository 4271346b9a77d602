//! Under a real systemd user manager: a hermetic manager and journald in a private mount + pid
//! namespace (`tests/systemd/real-systemd.sh`), with the units `harness install` renders. Skipped
//! with a message where `unshare` is not allowed; under CI on this machine kind it must run.

use crate::common::*;
use std::process::Command;

#[test]
fn real_systemd_user_manager_runs_the_api_and_supervisors() {
    let can =
        Command::new("unshare").args(["-m", "-p", "-f", "--mount-proc", "--propagation", "private", "true"]).status();
    if !can.is_ok_and(|s| s.success()) || !std::path::Path::new("/usr/lib/systemd/systemd").exists() {
        assert!(
            std::env::var_os("CI").is_none(),
            "real-systemd test cannot run here but CI requires it (unshare -m / systemd missing)"
        );
        eprintln!("skipped: unshare -m is not allowed or systemd is not installed");
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let out = Command::new("unshare")
        .args(["-m", "-p", "-f", "--mount-proc", "--propagation", "private", "bash"])
        .arg(repo_dir().join("tests/systemd/real-systemd.sh"))
        .env("HARNESS_BIN", bin())
        .env("REPO", repo_dir())
        .env("WORK", work.path())
        .env_remove("HARNESS_HOME")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    eprintln!("{text}");
    for step in [
        "ok journald up",
        "ok user manager up",
        "ok harness-api.socket activated harness-api.service",
        "ok harness run --supervised started harness-supervisor@",
        "ok kill -9 of the API mid-stream",
        "ok kill -9 of the supervisor: systemd restarted",
        "ok the run finished; every task committed exactly once",
        "ok journalctl RUN_ID=",
        "ok journalctl TASK=A1 RUN_ID=",
        "ok another home's run went through its own units harness-",
        "ok a home without units of its own is supervised detached",
    ] {
        assert!(text.contains(step), "missing step {step:?}:\n{text}\n{}", String::from_utf8_lossy(&out.stderr));
    }
    assert!(out.status.success(), "{text}");
}
