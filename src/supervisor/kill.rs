//! Ending a process group for good: `killpg(TERM)`, a grace period, `killpg(KILL)`, then the
//! subreaper sweep for descendants that escaped the group with `setsid` (as a child subreaper the
//! supervisor inherits them as its own children).

use nix::sys::signal::Signal;
use nix::unistd::Pid;
use std::time::{Duration, Instant};

/// True while any process (zombies excluded) is in process group `pgid`.
pub fn group_alive(pgid: i32) -> bool {
    !group_members(pgid).is_empty()
}

/// Pids of live (non-zombie) processes in process group `pgid`, from `/proc`.
pub fn group_members(pgid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir("/proc") else { return out };
    for e in rd.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else { continue };
        if let Some((state, _ppid, pgrp)) = stat_fields(pid)
            && pgrp == pgid
            && state != 'Z'
        {
            out.push(pid);
        }
    }
    out
}

pub use crate::os::peer::stat_fields;

fn killpg(pgid: i32, sig: Signal) {
    // pgid > 1 never targets init or "every process". ESRCH (already gone) is what we want anyway.
    if pgid > 1 {
        let _ = nix::sys::signal::killpg(Pid::from_raw(pgid), sig);
    }
}

/// TERM the group, wait up to `grace` for it to empty, KILL what is left, then sweep orphans.
/// Returns how long the group took to disappear. Each `/proc` scan runs on the blocking pool.
pub async fn kill_group(pgid: i32, grace: Duration) -> Duration {
    let alive = || async move { tokio::task::spawn_blocking(move || group_alive(pgid)).await.unwrap_or(false) };
    let start = Instant::now();
    killpg(pgid, Signal::SIGTERM);
    while alive().await && start.elapsed() < grace {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    if alive().await {
        killpg(pgid, Signal::SIGKILL);
        let k = Instant::now();
        while alive().await && k.elapsed() < crate::timeouts::KILL_REAP {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    let took = start.elapsed();
    let _ = tokio::task::spawn_blocking(sweep_orphans).await;
    took
}

/// Process groups (other than ours) led by a process whose command line contains `needle`.
pub fn groups_mentioning(needle: &str) -> Vec<i32> {
    let me = std::process::id() as i32;
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir("/proc") else { return out };
    for e in rd.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else { continue };
        let Some((state, _, pgrp)) = stat_fields(pid) else { continue };
        if state == 'Z' || pgrp == me || pgrp <= 1 || out.contains(&pgrp) {
            continue;
        }
        let Ok(cmd) = std::fs::read(format!("/proc/{pid}/cmdline")) else { continue };
        if String::from_utf8_lossy(&cmd).contains(needle) {
            out.push(pgrp);
        }
    }
    out
}

/// Kills and reaps children of this process that escaped their group and were re-parented to the
/// subreaper (children spawned through tokio are tracked and left alone).
pub fn sweep_orphans() {
    let me = std::process::id() as i32;
    let own_group = nix::unistd::getpgrp().as_raw();
    // Held for the whole scan: a child spawned meanwhile (`spawn_tracked` takes the same lock) is
    // either tracked before the scan sees it or spawned after the scan.
    let tracked = TRACKED.lock().unwrap_or_else(|p| p.into_inner());
    let Ok(rd) = std::fs::read_dir("/proc") else { return };
    for e in rd.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else { continue };
        let Some((state, ppid, pgrp)) = stat_fields(pid) else { continue };
        // Only orphans: re-parented to us, in a group other than ours. Our own direct children
        // started without a group of their own (git in the commit step) share our group — which is
        // not our pid when the supervisor does not lead its group (started by a test harness or
        // another process manager): killing them mid-commit left stale git lock files.
        if ppid != me || pgrp == own_group {
            continue;
        }
        if tracked.contains(&pid) {
            continue;
        }
        // A direct child of ours that no one else waits for (tokio never waits for pids it did not
        // spawn): kill it and reap that specific child only.
        if state != 'Z' {
            let _ = nix::sys::signal::kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
        let _ = nix::sys::wait::waitpid(Pid::from_raw(pid), Some(nix::sys::wait::WaitPidFlag::WNOHANG));
    }
}

/// Pids of children spawned (and reaped) through tokio: the sweep must leave them alone.
static TRACKED: std::sync::Mutex<Vec<i32>> = std::sync::Mutex::new(Vec::new());

/// Spawns `cmd` and tracks its pid in one step with respect to the orphan sweep: the sweep never
/// sees a child of ours that is spawned but not yet tracked (and so never kills it).
pub fn spawn_tracked(cmd: &mut tokio::process::Command) -> std::io::Result<tokio::process::Child> {
    let mut tracked = TRACKED.lock().unwrap_or_else(|p| p.into_inner());
    let child = cmd.spawn()?;
    if let Some(pid) = child.id() {
        tracked.push(pid as i32);
    }
    Ok(child)
}

pub fn untrack_child(pid: i32) {
    TRACKED.lock().unwrap_or_else(|p| p.into_inner()).retain(|p| *p != pid);
}

/// Makes this process the child subreaper of its descendants (Linux), so orphans that escape their
/// process group are re-parented here and can be swept.
pub fn become_subreaper() {
    #[cfg(target_os = "linux")]
    if let Err(e) = nix::sys::prctl::set_child_subreaper(true) {
        tracing::warn!(error = %e, "cannot become the child subreaper: orphans that leave their group are not swept");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A child started without a group of its own (as git is in the commit step) is ours, not an
    /// orphan, whether or not this process leads its group (a test binary usually does not).
    #[test]
    fn the_sweep_spares_our_own_children_in_our_group() {
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        sweep_orphans();
        std::thread::sleep(Duration::from_millis(50));
        let alive = child.try_wait().unwrap().is_none();
        let _ = child.kill();
        let _ = child.wait();
        assert!(alive, "sweep_orphans killed a direct child in our own process group");
    }
}
