//! Refusals made outside the scheduler — at the API's edge, in the DynWF inbox, on the control
//! socket before a request reaches the scheduler — go on the run's record here: a `refused` control
//! record appended to the run's journal before the answer (`spec/CONTROL.md`, "What each refusal
//! leaves"). A refusal changes no run state. Refusals that cannot be tied to a run (no such run, a
//! path that is no route) go to the log (journald under systemd) with the peer's uid instead.

use crate::ids::TaskId;
use crate::state::journal::{ControlRecord, Journal, JournalError, Outcome, Record, Verb};
use std::path::Path;

/// A refusal that could not be put on the record: the answer says so (the refusal stands).
#[derive(Debug, thiserror::Error)]
#[error("{refusal}; and this refusal could not be journaled: {source}")]
pub struct Unrecorded {
    pub refusal: String,
    pub source: JournalError,
}

/// Appends `rec`, the record of the refusal whose answer says `refusal`, to `journal`. Every side
/// that refuses (socket, scheduler, API, inbox) records through here.
pub fn on_record(journal: &Journal, rec: ControlRecord, refusal: &str) -> Result<(), Unrecorded> {
    debug_assert_eq!(rec.outcome, Outcome::Refused);
    journal.append(&rec.into()).map(|_| ()).map_err(|source| Unrecorded { refusal: refusal.to_string(), source })
}

/// `on_record` for the journal at `path`.
pub fn on_record_at(path: &Path, rec: ControlRecord, refusal: &str) -> Result<(), Unrecorded> {
    let journal = Journal::open(path).map_err(|source| Unrecorded { refusal: refusal.to_string(), source })?;
    on_record(&journal, rec, refusal)
}

/// The refusal record for a request whose parts are known to this extent.
pub fn record(verb: Verb, task: Option<TaskId>, msg: Option<&str>, by: &str, detail: &str) -> ControlRecord {
    ControlRecord { msg: msg.map(crate::state::journal::clip_refused_msg), ..Record::refused(verb, task, by, detail) }
}

/// A refusal no run's journal can hold, logged with who asked: plain fields, so
/// `journalctl PEER_UID=65534` or `journalctl RUN_ID=…` finds it.
pub fn untied(peer_uid: Option<u32>, run: &str, what: &str, detail: &str) {
    let run: String = run.chars().take(120).collect();
    let uid = peer_uid.map_or_else(|| "unknown".to_string(), |u| u.to_string());
    tracing::warn!(PEER_UID = %uid, RUN_ID = %run, VERB = what, "refused: {detail}");
}

/// A request refused at the API's edge before any run was looked at (no route, a bad path
/// segment, a foreign Host or Origin, another uid without the token), logged with who asked.
pub fn edge(peer_uid: Option<u32>, method: &str, path: &str, status: u16, detail: &str) {
    let path: String = path.chars().take(200).collect();
    let uid = peer_uid.map_or_else(|| "unknown".to_string(), |u| u.to_string());
    tracing::warn!(PEER_UID = %uid, METHOD = method, PATH = %path, STATUS = status, "refused: {detail}");
}
