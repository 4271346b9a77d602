//! The `liveness/v1` sidecar at `<runstateDir>/<slug>.live.json`: which processes are running right
//! now (pid, pgid, session, logfile), the supervisor's socket, and the pause flag.
//!
//! A cache, never the truth: deleting it loses only liveness, and on any disagreement the journal
//! wins. Writes are read-modify-write under a lock file and land atomically (temp + rename).

use crate::ids::{RunId, TaskId};
use crate::os::home;
use crate::state::journal::{RunView, TaskState};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

pub const VERSION: &str = "liveness/v1";

/// One running (or just-finished) task process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskLiveness {
    /// The wrapper's pid.
    pub pid: i32,
    /// The wrapper's process group (the engine runs in it; kill targets it).
    pub pgid: i32,
    /// The engine session, once known.
    #[serde(default)]
    pub session_id: Option<String>,
    /// The wrapper's logfile (what `/stream` tails).
    pub logfile: PathBuf,
    /// The task's state as the supervisor last saw it (informational; the journal is the truth).
    pub state: LiveState,
    pub started_ts: String,
    /// Last time the logfile grew, when known (for "idle" in the Agent view).
    #[serde(default)]
    pub last_output_ts: Option<String>,
}

/// What a task's process is doing, as liveness shows it: the journal's state, or the step running
/// between two journal states (`gating`: the gate command; `reviewing`: the verdict seat).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LiveState {
    Leased,
    Implemented,
    Gating,
    Gated,
    Reviewing,
    Reviewed,
    Committed,
    Halted,
    Skipped,
}

impl From<TaskState> for LiveState {
    fn from(s: TaskState) -> LiveState {
        match s {
            TaskState::Leased => LiveState::Leased,
            TaskState::Implemented => LiveState::Implemented,
            TaskState::Gated => LiveState::Gated,
            TaskState::Reviewed => LiveState::Reviewed,
            TaskState::Committed => LiveState::Committed,
            TaskState::Halted => LiveState::Halted,
            TaskState::Skipped => LiveState::Skipped,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Liveness {
    pub v: String,
    #[serde(rename = "runId")]
    pub run_id: RunId,
    /// The supervisor's control socket, when one is serving.
    #[serde(default)]
    pub sock: Option<PathBuf>,
    #[serde(default)]
    pub supervisor_pid: Option<i32>,
    #[serde(default)]
    pub paused: bool,
    /// The supervisor's TERM → KILL grace (ms): how long a kill may take, for whoever waits on one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kill_grace_ms: Option<u64>,
    #[serde(default)]
    pub tasks: BTreeMap<TaskId, TaskLiveness>,
}

impl Liveness {
    pub fn new(run_id: RunId) -> Liveness {
        Liveness {
            v: VERSION.into(),
            run_id,
            sock: None,
            supervisor_pid: None,
            paused: false,
            kill_grace_ms: None,
            tasks: BTreeMap::new(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LivenessError {
    #[error("liveness {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("liveness {path} is not valid liveness/v1: {reason}")]
    Garbled { path: PathBuf, reason: String },
}

/// Reads the sidecar; `None` when absent.
pub fn get(path: &Path) -> Result<Option<Liveness>, LivenessError> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(LivenessError::Io { path: path.into(), source });
        }
    };
    let l: Liveness = serde_json::from_slice(&bytes)
        .map_err(|e| LivenessError::Garbled { path: path.into(), reason: e.to_string() })?;
    if l.v != VERSION {
        return Err(LivenessError::Garbled { path: path.into(), reason: format!("v is {:?}", l.v) });
    }
    Ok(Some(l))
}

/// Read-modify-write under `<path>.lock`. A garbled file is replaced (it is only a cache).
pub fn update<T>(path: &Path, run_id: &RunId, f: impl FnOnce(&mut Liveness) -> T) -> Result<T, LivenessError> {
    let io_err = |source| LivenessError::Io { path: path.into(), source };
    let lock_path = path.with_extension("lock");
    let lock =
        OpenOptions::new().create(true).write(true).truncate(false).mode(0o600).open(&lock_path).map_err(io_err)?;
    let _held = crate::os::flock::Flock::exclusive(&lock).map_err(io_err)?;
    let mut l = match get(path) {
        Ok(Some(l)) => l,
        Ok(None) | Err(LivenessError::Garbled { .. }) => Liveness::new(run_id.clone()),
        Err(e) => return Err(e),
    };
    let out = f(&mut l);
    let mut bytes = serde_json::to_vec_pretty(&l).expect("Liveness always serializes");
    bytes.push(b'\n');
    home::write_atomic(path, &bytes, 0o600).map_err(io_err)?;
    Ok(out)
}

/// Sets (or replaces) one task's record.
pub fn set(path: &Path, run_id: &RunId, task: &TaskId, rec: TaskLiveness) -> Result<(), LivenessError> {
    update(path, run_id, |l| {
        l.tasks.insert(task.clone(), rec);
    })
}

/// True when a process with this pid exists (`kill(pid, 0)`; EPERM still means it exists).
pub fn pid_alive(pid: i32) -> bool {
    if pid <= 0 {
        return false;
    }
    // Signal 0 only checks existence and permission; EPERM: it exists, owned by someone else.
    matches!(nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None), Ok(()) | Err(nix::errno::Errno::EPERM))
}

/// A task record `reap` dropped, with what the journal says about that task.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Reaped {
    pub task: TaskId,
    pub pid: i32,
    /// The journal's last state for the task (`None`: the journal never heard of it).
    pub journal_state: Option<TaskState>,
}

/// What `reap` did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReapReport {
    pub reaped: Vec<Reaped>,
    /// The supervisor pid was dead, so `sock` and `supervisor_pid` were cleared.
    pub supervisor_gone: bool,
}

/// Drops records whose pid is dead, and the supervisor fields when its pid is dead. The journal's
/// view of each dropped task is returned ("a vanished pid ⇒ consult journal").
pub fn reap(path: &Path, run_id: &RunId, journal: &RunView) -> Result<ReapReport, LivenessError> {
    if !path.exists() {
        return Ok(ReapReport { reaped: Vec::new(), supervisor_gone: false });
    }
    update(path, run_id, |l| {
        let mut reaped = Vec::new();
        l.tasks.retain(|task, t| {
            let alive = pid_alive(t.pid);
            if !alive {
                reaped.push(Reaped { task: task.clone(), pid: t.pid, journal_state: journal.state_of(task) });
            }
            alive
        });
        let supervisor_gone = l.supervisor_pid.is_some_and(|p| !pid_alive(p));
        if supervisor_gone {
            l.supervisor_pid = None;
            l.sock = None;
        }
        ReapReport { reaped, supervisor_gone }
    })
}
