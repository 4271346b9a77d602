//! Retention: `harness prune` removes finished and failed runs whose last activity is older than a
//! limit — their pointer, summary and runstate files, or (`logs_only`) only their logs, keeping
//! journal and plan. Never a run that is not over, never one a supervisor holds, never one that
//! keeps unintegrated task work (its journal says whose it is), never git (task branches, commits
//! and worktrees are left alone: `harness clean <runId>` removes worktrees).
//!
//! Each run is looked at under its supervisor lock (`<slug>.supervisor.lock`), so no supervisor can
//! start on it while it is removed, and its journal is read again under the lock. A pruned run keeps a
//! tombstone (`runs/<runId>.pruned`) so `GET /runs/:runId` can say it was pruned. Before logs are
//! removed their usage is kept (`<slug>.usage.json`), so a run's cost outlives its logs.

use crate::ids::RunId;
use crate::os::home::Home;
use crate::state::journal::{self, RunStatus};
use crate::state::registry::{self, Pointer};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// What to prune.
#[derive(Debug, Clone)]
pub struct Options {
    /// Runs whose last activity is older than this.
    pub older_than: Duration,
    pub logs_only: bool,
    pub dry_run: bool,
}

/// One run pruned (or that would be, in a dry run).
#[derive(Debug, Serialize)]
pub struct Pruned {
    pub run_id: RunId,
    pub status: RunStatus,
    pub last_activity: Option<String>,
    pub removed: Vec<PathBuf>,
    pub bytes: u64,
}

/// A run old enough, but kept.
#[derive(Debug, Serialize)]
pub struct Kept {
    pub run_id: RunId,
    pub reason: String,
}

#[derive(Debug, Serialize, Default)]
pub struct Report {
    pub dry_run: bool,
    pub logs_only: bool,
    pub pruned: Vec<Pruned>,
    pub kept: Vec<Kept>,
    pub bytes: u64,
}

/// `$HARNESS_HOME/retention.json`: automatic pruning by each supervisor when its run ends.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Retention {
    pub v: String,
    /// An age: `30d`, `12h`, `2w`.
    pub finished_before: String,
    #[serde(default)]
    pub logs_only: bool,
}

pub const RETENTION_VERSION: &str = "retention/v1";

/// The home's retention setting (`Ok(None)`: none set).
pub fn retention(home: &Home) -> Result<Option<Options>, String> {
    let path = home.root.join("retention.json");
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    let r: Retention = serde_json::from_slice(&bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    if r.v != RETENTION_VERSION {
        return Err(format!("{}: v must be {RETENTION_VERSION:?}, got {:?}", path.display(), r.v));
    }
    let older_than = crate::state::summary::parse_age(&r.finished_before).ok_or_else(|| {
        format!("{}: finished_before must be an age such as 30d, got {:?}", path.display(), r.finished_before)
    })?;
    Ok(Some(Options { older_than, logs_only: r.logs_only, dry_run: false }))
}

/// Prunes the runs of `home` that `opts` selects.
pub fn prune(home: &Home, opts: &Options) -> Result<Report, String> {
    let (pointers, skipped) = registry::enumerate(home).map_err(|e| e.to_string())?;
    registry::log_skipped(&skipped);
    let cutoff = SystemTime::now().checked_sub(opts.older_than).unwrap_or(SystemTime::UNIX_EPOCH);
    let mut report = Report { dry_run: opts.dry_run, logs_only: opts.logs_only, ..Default::default() };
    for p in pointers {
        match prune_one(home, &p, cutoff, opts) {
            Ok(Some(done)) => {
                report.bytes += done.bytes;
                if !opts.dry_run {
                    tracing::info!(RUN_ID = %p.run_id, bytes = done.bytes, logs_only = opts.logs_only, "run pruned");
                }
                report.pruned.push(done);
            }
            Ok(None) => {}
            Err(reason) => report.kept.push(Kept { run_id: p.run_id.clone(), reason }),
        }
    }
    Ok(report)
}

/// `Ok(None)`: not selected (not over, or recent). `Err`: selected by age but kept, and why.
fn prune_one(home: &Home, p: &Pointer, cutoff: SystemTime, opts: &Options) -> Result<Option<Pruned>, String> {
    let selected = |view: &journal::RunView| {
        matches!(view.status, RunStatus::Finished | RunStatus::Failed)
            && view.last_ts.as_deref().and_then(|t| humantime::parse_rfc3339_weak(t).ok()).is_some_and(|t| t < cutoff)
    };
    let view = match journal::replay(&p.journal_path()) {
        Ok(v) => v,
        Err(_) => return Ok(None), // no journal: nothing says it is over
    };
    if !selected(&view) {
        return Ok(None);
    }
    let live = crate::state::liveness::get(&p.liveness_path())
        .ok()
        .flatten()
        .and_then(|l| l.supervisor_pid)
        .is_some_and(crate::state::liveness::pid_alive);
    if live {
        return Err("its supervisor is alive".into());
    }
    // Unintegrated task work outlives its run (worktree, task branch, kept attempts): its journal
    // is what says whose it is, so the run is kept with it.
    let held = keeps_task_work(home, p);
    if held {
        return Err(format!(
            "it keeps unintegrated task work (`harness clean {}` says what; `--force` removes it, then prune)",
            p.run_id
        ));
    }
    // The supervisor lock: held by a supervisor of this run, or taken here so none starts.
    let lock_path = p.supervisor_lock_path();
    let lock_file = open_lock(&lock_path, opts.dry_run)?;
    let _held = match &lock_file {
        Some(f) => match crate::os::flock::Flock::try_exclusive(f) {
            Ok(Some(l)) => Some(l),
            Ok(None) => return Err("a supervisor holds its lock".into()),
            Err(e) => return Err(format!("cannot lock {}: {e}", lock_path.display())),
        },
        None => None,
    };
    // Looked at again under the lock: a run resumed meanwhile is not over any more.
    let again = journal::replay(&p.journal_path()).map_err(|e| e.to_string())?;
    if !selected(&again) || again.records != view.records {
        return Err("its journal changed while it was looked at".into());
    }
    let mut paths = run_files(home, p, &lock_path, opts.logs_only);
    paths.retain(|q| q.symlink_metadata().is_ok());
    if opts.logs_only && paths.is_empty() {
        return Ok(None); // its logs are gone already
    }
    let bytes: u64 = paths.iter().map(|q| size_of(q)).sum();
    let pointer_path = home.runs_dir().join(format!("{}.json", p.run_id));
    if !opts.logs_only {
        paths.insert(0, pointer_path.clone());
    }
    let done = Pruned {
        run_id: p.run_id.clone(),
        status: again.status,
        last_activity: again.last_ts.clone(),
        bytes: bytes + if opts.logs_only { 0 } else { size_of(&pointer_path) },
        removed: paths.clone(),
    };
    if opts.dry_run {
        return Ok(Some(done));
    }
    if opts.logs_only {
        keep_usage(p, &again)?;
    } else {
        // The tombstone first, then the pointer: a reader sees the run or learns it was pruned.
        let tomb = serde_json::json!({
            "v": "pruned/v1", "runId": p.run_id, "pruned_at": journal::now_rfc3339(),
            "status": again.status, "last_activity": again.last_ts, "bytes": done.bytes,
        });
        crate::os::home::write_atomic(
            &crate::state::summary::tombstone_path(home, &p.run_id),
            tomb.to_string().as_bytes(),
            0o600,
        )
        .map_err(|e| format!("cannot write the tombstone: {e}"))?;
    }
    for q in &paths {
        let r = if q.is_dir() && !q.is_symlink() { std::fs::remove_dir_all(q) } else { std::fs::remove_file(q) };
        if let Err(e) = r
            && e.kind() != std::io::ErrorKind::NotFound
        {
            return Err(format!("cannot remove {}: {e} (pruned in part)", q.display()));
        }
    }
    Ok(Some(done))
}

/// True when unintegrated task work of the run is still there (a worktree, a task branch, a kept
/// attempt).
fn keeps_task_work(home: &Home, p: &Pointer) -> bool {
    !crate::os::worktree::existing(home, &p.run_id).is_empty()
        || !crate::os::git::branches_under(&p.worktree, &crate::os::worktree::branch_prefix(&p.run_id)).is_empty()
        || !crate::os::git::refs_under(&p.worktree, &crate::os::worktree::refs_prefix(&p.run_id)).is_empty()
}

/// Opens the run's supervisor lock file: created (to lock it) unless only looking (`dry_run`: the
/// file as it is, if any).
fn open_lock(lock_path: &Path, dry_run: bool) -> Result<Option<std::fs::File>, String> {
    if dry_run {
        return Ok(std::fs::File::open(lock_path).ok());
    }
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(lock_path)
        .map(Some)
        .map_err(|e| format!("cannot open {}: {e}", lock_path.display()))
}

/// Every file of the run that prune removes (its logs only, with `logs_only`), whether or not it
/// exists.
fn run_files(home: &Home, p: &Pointer, lock_path: &Path, logs_only: bool) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = vec![p.logs_dir(), p.supervisor_log_path()];
    if !logs_only {
        paths.extend([
            p.prompts_dir(),
            p.approvals_dir(),
            p.journal_path(),
            p.plan_path(),
            p.liveness_path(),
            p.liveness_path().with_extension("lock"),
            p.inbox_path(),
            p.steer_cursor_path(),
            p.notify_mark_path(),
            p.notify_mark_path().with_extension("lock"),
            p.usage_path(),
            home.socket_path(&p.run_id),
            crate::state::summary::path(home, &p.run_id),
            lock_path.to_path_buf(),
        ]);
    }
    paths
}

/// Each planned task's usage, written beside the journal before the logs go (`<slug>.usage.json`).
fn keep_usage(p: &Pointer, view: &journal::RunView) -> Result<(), String> {
    let Ok(plan) = crate::state::plan::Plan::load(&p.plan_path()) else { return Ok(()) };
    let mut tallies = crate::state::spend::LogTallies::default();
    let (_, per_task) = crate::state::spend::run_spend(&plan, view, p, |a, log| tallies.usage(a, log));
    let kept: std::collections::BTreeMap<String, crate::engine::usage::Usage> =
        per_task.into_iter().map(|(t, u)| (t.to_string(), u)).collect();
    let body = serde_json::json!({"v": "usage-kept/v1", "tasks": kept});
    crate::os::home::write_atomic(&p.usage_path(), body.to_string().as_bytes(), 0o600)
        .map_err(|e| format!("cannot keep the usage of the logs: {e}"))
}

/// Bytes under `path` (a file, or a directory's files), not following symlinks.
fn size_of(path: &Path) -> u64 {
    let Ok(m) = path.symlink_metadata() else { return 0 };
    if !m.is_dir() {
        return m.len();
    }
    std::fs::read_dir(path).map(|rd| rd.flatten().map(|e| size_of(&e.path())).sum()).unwrap_or(0)
}
