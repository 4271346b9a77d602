//! The DynWF steer inbox, `<runstateDir>/<slug>.steer.jsonl` (`inbox/v1`): a DynWF run has no
//! supervisor socket, so steer/pause/resume are appended here and the DynWF dispatch agent takes them
//! at each task boundary. Taking is exactly-once: each entry is journaled (by its id) before the
//! cursor moves past it, and an entry whose id the journal already has is never handed out again.
//! kill is refused: a DynWF run is observe + queue-steer only.

use crate::flock::Flock;
use crate::ids::TaskId;
use crate::journal::{self, ControlRecord, Journal, Outcome, Record, RunEvent, Verb};
use crate::plan::Plan;
use crate::registry::{Plane, Pointer};
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

pub const VERSION: &str = "inbox/v1";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub v: String,
    pub id: String,
    pub ts: String,
    pub verb: Verb,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<TaskId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub msg: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupt: Option<bool>,
    pub by: String,
}

/// Why a verb was not queued or taken. The edges map it: `Invalid` is a bad request, `UnknownTask`
/// not found, `Refused` a refusal by the run's plane or the task's state, the rest a failure to read
/// or write the run's files.
#[derive(Debug, thiserror::Error)]
pub enum InboxError {
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    UnknownTask(String),
    #[error("{0}")]
    Refused(String),
    #[error("{what} {}: {source}", path.display())]
    Io { what: &'static str, path: PathBuf, source: std::io::Error },
    #[error(transparent)]
    Journal(#[from] journal::JournalError),
    #[error(transparent)]
    Plan(#[from] crate::plan::PlanError),
}

fn refused(detail: impl Into<String>) -> InboxError {
    InboxError::Refused(detail.into())
}

fn io<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> InboxError + 'a {
    move |source| InboxError::Io { what, path: path.to_path_buf(), source }
}

/// Validates and appends a verb for a DynWF run. Returns the entry (with its id).
pub fn append(
    p: &Pointer,
    verb: Verb,
    task: Option<TaskId>,
    msg: Option<String>,
    interrupt: bool,
    by: &str,
) -> Result<Entry, InboxError> {
    if p.plane != Plane::Dynwf {
        return Err(refused(format!("run {} is a standalone run: use its supervisor, not the inbox", p.run_id)));
    }
    match verb {
        Verb::Kill => {
            return Err(refused(
                "kill is refused for a DynWF run: it has no supervisor holding the pids (observe + queue-steer only)",
            ));
        }
        Verb::Stop => return Err(refused("stop is refused for a DynWF run: end it from its Workflow")),
        Verb::Steer => {
            let task = task.as_ref().ok_or_else(|| InboxError::Invalid("steer needs a task".into()))?;
            journal::check_steer_msg(msg.as_deref().unwrap_or("")).map_err(|e| InboxError::Invalid(e.into()))?;
            let plan = Plan::load(&p.plan_path())?;
            let t = plan
                .task(task)
                .ok_or_else(|| InboxError::UnknownTask(format!("run {} has no task {task}", p.run_id)))?;
            if t.adapter.is_verdict_seat() {
                return Err(refused(journal::SteerRefusal::VerdictSeat.detail(task)));
            }
            let view = journal::replay(&p.journal_path())?;
            // The DynWF agent knows its sessions: no session check here.
            if let Some(r) = journal::SteerRefusal::check(false, view.tasks.get(task), false) {
                return Err(refused(r.detail(task)));
            }
        }
        Verb::Pause | Verb::Resume => {}
    }
    let entry = Entry {
        v: VERSION.into(),
        id: uuid::Uuid::new_v4().to_string(),
        ts: journal::now_rfc3339(),
        verb,
        task,
        msg,
        interrupt: interrupt.then_some(true),
        by: journal::clip_by(by),
    };
    let path = p.inbox_path();
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(&path)
        .map_err(io("cannot open the inbox", &path))?;
    let _lock = Flock::exclusive(&f).map_err(io("cannot lock the inbox", &path))?;
    let mut line = serde_json::to_vec(&entry).expect("an entry serializes");
    line.push(b'\n');
    f.write_all(&line).and_then(|_| f.sync_data()).map_err(io("cannot append to the inbox", &path))?;
    Ok(entry)
}

/// Returns the entries not taken yet, journaling each (steer → `queued` with the entry's id, pause
/// / resume → accepted + the run event) before the cursor passes it.
pub fn take(p: &Pointer) -> Result<Vec<Entry>, InboxError> {
    let path = p.inbox_path();
    let f = match std::fs::OpenOptions::new().read(true).append(true).open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io("cannot open the inbox", &path)(e)),
    };
    let _lock = Flock::exclusive(&f).map_err(io("cannot lock the inbox", &path))?;
    let cursor_path = p.runstate_dir.join(format!("{}.steer.cursor", p.slug));
    let cursor: u64 = std::fs::read_to_string(&cursor_path).ok().and_then(|s| s.trim().parse().ok()).unwrap_or(0);
    let bytes = std::fs::read(&path).map_err(io("cannot read the inbox", &path))?;
    let start = (cursor as usize).min(bytes.len());
    let complete = bytes[start..].iter().rposition(|&b| b == b'\n').map_or(start, |i| start + i + 1);
    let journal = Journal::open(&p.journal_path())?;
    let view = journal.view()?;
    let mut taken = Vec::new();
    for line in bytes[start..complete].split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        let entry: Entry = match serde_json::from_slice(line) {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!(RUN_ID = %p.run_id, error = %e, "skipping a garbled inbox line");
                continue;
            }
        };
        if view.control_ids.contains(&entry.id) {
            continue; // journaled by an earlier take that crashed before moving the cursor
        }
        let outcome = if entry.verb == Verb::Steer { Outcome::Queued } else { Outcome::Accepted };
        let rec = ControlRecord {
            task: entry.task.clone(),
            msg: entry.msg.clone(),
            interrupt: entry.interrupt,
            id: Some(entry.id.clone()),
            ..Record::control(entry.verb, &format!("inbox:{}", entry.by), outcome)
        };
        journal.append(&rec.into())?;
        match entry.verb {
            Verb::Pause => drop(journal.append(&Record::run(RunEvent::Paused, "dynwf", None))),
            Verb::Resume => drop(journal.append(&Record::run(RunEvent::Resumed, "dynwf", None))),
            _ => {}
        }
        taken.push(entry);
    }
    crate::home::write_atomic(&cursor_path, complete.to_string().as_bytes(), 0o600)
        .map_err(io("cannot move the inbox cursor", &cursor_path))?;
    Ok(taken)
}
