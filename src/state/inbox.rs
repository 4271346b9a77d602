//! The DynWF steer inbox, `<runstateDir>/<slug>.steer.jsonl` (`inbox/v1`): a DynWF run has no
//! supervisor socket, so steer/pause/resume are appended here and the DynWF dispatch agent takes them
//! at each task boundary. Taking is exactly-once: each entry is journaled (by its id) before the
//! cursor moves past it, and an entry whose id the journal already has is never handed out again.
//! kill is refused: a DynWF run is observe + queue-steer only.

use crate::ids::TaskId;
use crate::os::flock::Flock;
use crate::state::journal::{self, ControlRecord, Journal, Outcome, Record, RunEvent, Verb};
use crate::state::plan::Plan;
use crate::state::registry::{Plane, Pointer};
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
    Plan(#[from] crate::state::plan::PlanError),
    /// Refused, and the refusal could not be journaled.
    #[error(transparent)]
    Unrecorded(#[from] crate::state::audit::Unrecorded),
}

fn refused(detail: impl Into<String>) -> InboxError {
    InboxError::Refused(detail.into())
}

fn io<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> InboxError + 'a {
    move |source| InboxError::Io { what, path: path.to_path_buf(), source }
}

/// Validates and appends a verb for a DynWF run. Returns the entry (with its id). The verb is on the
/// record before this returns, either way: `queued` with the entry's id (decided under the journal's
/// lock, so a steer cannot slip past a commit), or `refused` with why.
pub fn append(
    p: &Pointer,
    verb: Verb,
    task: Option<TaskId>,
    msg: Option<String>,
    interrupt: bool,
    by: &str,
    key: Option<&str>,
) -> Result<Entry, InboxError> {
    let by = journal::clip_by(by);
    let journal = Journal::open(&p.journal_path())?;
    // A keyed entry's id is its key's: a repeat finds the first entry (queued once, under the
    // journal's lock) and is answered with it.
    let id = key.map_or_else(|| uuid::Uuid::new_v4().to_string(), keyed_id);
    let refuse = |e: InboxError| -> InboxError {
        let rec = crate::state::audit::record(verb, task.clone(), msg.as_deref(), &by, &e.to_string());
        match crate::state::audit::on_record(&journal, rec, &e.to_string()) {
            Ok(()) => e,
            Err(u) => u.into(),
        }
    };
    if let Some(key) = key
        && let Some(first) = keyed_entry(&journal, key, &id, verb, task.as_ref()).map_err(&refuse)?
    {
        return Ok(first);
    }
    let seat = check(p, verb, task.as_ref(), msg.as_deref()).map_err(&refuse)?;
    let entry = Entry {
        v: VERSION.into(),
        id: id.clone(),
        ts: journal::now_rfc3339(),
        verb,
        task: task.clone(),
        msg: msg.clone(),
        interrupt: interrupt.then_some(true),
        by: by.clone(),
    };
    let queued = ControlRecord {
        task: entry.task.clone(),
        msg: entry.msg.clone(),
        interrupt: entry.interrupt,
        id: Some(entry.id.clone()),
        detail: Some("queued in the DynWF inbox".into()),
        ..Record::control(verb, &by, Outcome::Queued)
    };
    let mut why: Option<String> = None;
    let mut repeat = false;
    let appended = journal.append_checked(&queued.into(), |v| {
        if v.control_ids.contains_key(&id) {
            repeat = true;
            return Err(journal::JournalError::Invalid(format!("entry {id} is queued already")));
        }
        // The DynWF agent knows its sessions: no session check here.
        why =
            task.as_ref().and_then(|t| journal::SteerRefusal::check(seat, v.tasks.get(t), false).map(|r| r.detail(t)));
        match &why {
            Some(d) => Err(journal::JournalError::Invalid(d.clone())),
            None => Ok(()),
        }
    });
    if repeat
        && let Some(key) = key
        && let Some(first) = keyed_entry(&journal, key, &id, verb, task.as_ref()).map_err(&refuse)?
    {
        return Ok(first);
    }
    match (appended, why) {
        (Ok(_), _) => {}
        (Err(_), Some(detail)) => return Err(refuse(refused(detail))),
        (Err(e), None) => return Err(e.into()),
    }
    let path = p.inbox_path();
    let written = write_entry(&path, &entry);
    if let Err(e) = written {
        // Queued on the record but not in the inbox: the record says it never will be taken.
        let rec = ControlRecord {
            id: Some(entry.id.clone()),
            ..crate::state::audit::record(verb, task.clone(), msg.as_deref(), &by, &format!("{NOT_QUEUED}{e}"))
        };
        return Err(match crate::state::audit::on_record(&journal, rec, &e.to_string()) {
            Ok(()) => e,
            Err(u) => u.into(),
        });
    }
    Ok(entry)
}

/// How the refusal of an entry queued on the record but not written to the inbox begins.
const NOT_QUEUED: &str = "not queued: ";

/// The entry id of an `Idempotency-Key`: a hash, so any key makes a well-formed id.
fn keyed_id(key: &str) -> String {
    use sha2::Digest;
    let h = sha2::Sha256::digest(key.as_bytes());
    let hex: String = h.iter().take(16).map(|b| format!("{b:02x}")).collect();
    format!("key-{hex}")
}

/// The entry first queued under `key` (its id `id`), as its `queued` record holds it — refused when
/// the key named another request, or when that request was not queued after all.
fn keyed_entry(
    journal: &Journal,
    key: &str,
    id: &str,
    verb: Verb,
    task: Option<&TaskId>,
) -> Result<Option<Entry>, InboxError> {
    if !journal.view()?.control_ids.contains_key(id) {
        return Ok(None);
    }
    let path = journal.path();
    let len = std::fs::metadata(path).map_err(io("cannot read the journal", path))?.len();
    let mut found = None;
    let mut unqueued = false;
    crate::os::tail::each_line(path, 0, len, |raw| {
        let Ok(rec) = journal::parse_line(raw) else { return };
        // Queued on the record but never written to the inbox (`append` says so with the id).
        if let journal::Body::Control(c) = &rec.body
            && c.outcome == Outcome::Refused
            && c.id.as_deref() == Some(id)
            && c.detail.as_deref().is_some_and(|d| d.starts_with(NOT_QUEUED))
        {
            unqueued = true;
        }
        if found.is_none()
            && let journal::Body::Control(c) = &rec.body
            && c.outcome == Outcome::Queued
            && c.id.as_deref() == Some(id)
        {
            found = Some(Entry {
                v: VERSION.into(),
                id: id.to_string(),
                ts: rec.ts.clone(),
                verb: c.verb,
                task: c.task.clone(),
                msg: c.msg.clone(),
                interrupt: c.interrupt,
                by: c.by.clone(),
            });
        }
    });
    if unqueued {
        return Err(refused(format!(
            "Idempotency-Key {key:?}: the request first sent with it was not queued (its refusal is on the \
             record); use a new key"
        )));
    }
    if let Some(first) = &found
        && (first.verb != verb || first.task.as_ref() != task)
    {
        let was = match &first.task {
            Some(t) => format!("{} of task {t}", first.verb.as_str()),
            None => first.verb.as_str().to_string(),
        };
        return Err(refused(format!(
            "Idempotency-Key {key:?} was first used for {was}: a key names one request; use a new key"
        )));
    }
    Ok(found)
}

/// The request's own checks (before anything is recorded as queued): the run's plane, the verb,
/// the task and message. Returns whether the task is the codex verdict seat.
fn check(p: &Pointer, verb: Verb, task: Option<&TaskId>, msg: Option<&str>) -> Result<bool, InboxError> {
    if p.plane != Plane::Dynwf {
        return Err(refused(format!("run {} is a standalone run: use its supervisor, not the inbox", p.run_id)));
    }
    match verb {
        Verb::Kill => Err(refused(
            "kill is refused for a DynWF run: it has no supervisor holding the pids (observe + queue-steer only)",
        )),
        Verb::Stop => Err(refused("stop is refused for a DynWF run: end it from its Workflow")),
        Verb::Interrupt => Err(refused("interrupt is refused for a DynWF run: it has no live channel")),
        Verb::End => Err(refused("end is refused for a DynWF run: it is not a session")),
        Verb::Budget => Err(refused("budget is refused for a DynWF run: its Workflow runs the turns")),
        Verb::Retry | Verb::Skip => Err(refused(format!(
            "{} is refused for a DynWF run: its Workflow dispatches the tasks (observe + queue-steer only)",
            verb.as_str()
        ))),
        Verb::Other => Err(InboxError::Invalid("not a verb: expected steer, pause or resume".into())),
        Verb::Steer => {
            let task = task.ok_or_else(|| InboxError::Invalid("steer needs a task".into()))?;
            journal::check_steer_msg(msg.unwrap_or("")).map_err(|e| InboxError::Invalid(e.into()))?;
            let plan = Plan::load(&p.plan_path())?;
            let t = plan
                .task(task)
                .ok_or_else(|| InboxError::UnknownTask(format!("run {} has no task {task}", p.run_id)))?;
            Ok(t.adapter.is_verdict_seat())
        }
        Verb::Pause | Verb::Resume => Ok(false),
    }
}

fn write_entry(path: &Path, entry: &Entry) -> Result<(), InboxError> {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
        .map_err(io("cannot open the inbox", path))?;
    let _lock = Flock::exclusive(&f).map_err(io("cannot lock the inbox", path))?;
    let mut line = serde_json::to_vec(entry).expect("an entry serializes");
    line.push(b'\n');
    f.write_all(&line).and_then(|_| f.sync_data()).map_err(io("cannot append to the inbox", path))
}

/// Returns the entries not taken yet, journaling each as `accepted` (taken; a pause or resume also
/// gets its run event) before the cursor passes it. A steer stays pending until the agent journals
/// it `applied`.
pub fn take(p: &Pointer) -> Result<Vec<Entry>, InboxError> {
    let path = p.inbox_path();
    let f = match std::fs::OpenOptions::new().read(true).append(true).open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io("cannot open the inbox", &path)(e)),
    };
    let _lock = Flock::exclusive(&f).map_err(io("cannot lock the inbox", &path))?;
    let cursor_path = p.steer_cursor_path();
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
        let record = |outcome, detail: &str| ControlRecord {
            task: entry.task.clone(),
            msg: entry.msg.clone(),
            interrupt: entry.interrupt,
            id: Some(entry.id.clone()),
            detail: Some(detail.into()),
            ..Record::control(entry.verb, &format!("inbox:{}", entry.by), outcome)
        };
        match view.control_ids.get(&entry.id) {
            // Queued when appended: this take hands it out.
            Some(Outcome::Queued) => {}
            // Taken by an earlier take that crashed before moving the cursor (or refused).
            Some(_) => continue,
            // Appended by a version that did not journal at append time.
            None => drop(journal.append(&record(Outcome::Queued, "queued in the DynWF inbox").into())?),
        }
        journal.append(&record(Outcome::Accepted, "taken by the DynWF agent").into())?;
        match entry.verb {
            Verb::Pause => drop(journal.append(&Record::run(RunEvent::Paused, "dynwf", None))),
            Verb::Resume => drop(journal.append(&Record::run(RunEvent::Resumed, "dynwf", None))),
            _ => {}
        }
        taken.push(entry);
    }
    crate::os::home::write_atomic(&cursor_path, complete.to_string().as_bytes(), 0o600)
        .map_err(io("cannot move the inbox cursor", &cursor_path))?;
    Ok(taken)
}
