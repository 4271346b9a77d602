//! Helpers shared by the benchmarks (a module, not a bench target): a child killed on drop, a git
//! call, a field of `/proc/<pid>/status`.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Child, Command};

/// A child process killed and reaped when dropped.
pub struct Kill(pub Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs git in `dir` with a fixed identity; panics when it fails.
pub fn git(dir: &Path, args: &[&str]) {
    let ok = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.name=bench", "-c", "user.email=bench@localhost"])
        .args(args)
        .output()
        .unwrap()
        .status
        .success();
    assert!(ok, "git {args:?}");
}

/// A kB field (`VmRSS:`, `VmHWM:`) of `/proc/<pid>/status`; 0 when the process is gone.
pub fn status_kb(pid: u32, key: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}
