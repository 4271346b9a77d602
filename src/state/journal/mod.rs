//! The `runstate/v1` journal at `<runstateDir>/<slug>.jsonl`: the append-only truth of a run.
//!
//! - `record`: the record shapes and the task state machine;
//! - `steer`: the steer rules every way in shares (control socket, DynWF inbox);
//! - `fold`: replay — the file folded into run status, per-task last state and the durable steer queue;
//! - `file`: appends (one `write(2)` of one line, `O_APPEND`, under an exclusive `flock`, so concurrent
//!   writers never interleave; a short write is rolled back so a failed append is never acknowledged);
//! - `reconcile`: the journal checked against git and live processes.
//!
//! This module knows nothing of HTTP or processes.

mod file;
mod fold;
mod reconcile;
mod record;
mod steer;

pub use file::Journal;
pub use fold::{
    ApprovalView, AttemptView, AttentionView, BadLine, Follower, PendingSteer, RunStatus, RunView, SteerView, TaskView,
    parse_line, replay, replay_bytes,
};
pub use reconcile::{Reconciliation, reconcile};
use record::validate_shape;
pub use record::*;
pub use steer::{
    Comment, MAX_BY, MAX_COMMENTS, MAX_MSG, SteerRefusal, check_steer_msg, clip_by, clip_refused_msg, comments_message,
};

use crate::ids::TaskId;
use std::io;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error("journal {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("task {task}: invalid transition {from} -> {to}")]
    Transition { task: TaskId, from: String, to: TaskState },
    #[error("task {task}: a {state} record needs {field}")]
    Missing { task: TaskId, state: TaskState, field: &'static str },
    #[error("invalid record: {0}")]
    Invalid(String),
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn t(id: &str) -> TaskId {
        TaskId::parse(id).unwrap()
    }

    #[test]
    fn state_machine() {
        use TaskState::*;
        assert!(TaskState::can_move(None, Leased));
        assert!(!TaskState::can_move(None, Implemented));
        assert!(TaskState::can_move(Some(Gated), Committed));
        assert!(TaskState::can_move(Some(Reviewed), Committed));
        assert!(!TaskState::can_move(Some(Committed), Leased));
        assert!(!TaskState::can_move(Some(Committed), Halted));
        assert!(TaskState::can_move(Some(Halted), Leased));
        assert!(!TaskState::can_move(Some(Halted), Halted));
        assert!(!TaskState::can_move(Some(Leased), Gated));
    }

    #[test]
    fn steer_refusals_in_order() {
        use SteerRefusal::*;
        let view = |state, session: Option<&str>| TaskView {
            state,
            rc: None,
            detail: None,
            sha: None,
            no_changes: false,
            base: None,
            carried: None,
            session_id: session.map(str::to_string),
            attempts: 1,
            logfile: None,
            files: None,
            ts: String::new(),
            history: Vec::new(),
        };
        let halted_no_session = view(TaskState::Halted, None);
        assert_eq!(SteerRefusal::check(true, Some(&halted_no_session), true), Some(VerdictSeat));
        assert_eq!(SteerRefusal::check(false, Some(&view(TaskState::Committed, Some("s"))), true), Some(Committed));
        assert_eq!(SteerRefusal::check(false, None, false), Some(NotStarted));
        assert_eq!(SteerRefusal::check(false, Some(&halted_no_session), true), Some(NoSession));
        assert_eq!(SteerRefusal::check(false, Some(&halted_no_session), false), None);
        assert_eq!(SteerRefusal::check(false, Some(&view(TaskState::Gated, Some("s"))), true), None);
        assert_eq!(check_steer_msg("  "), Err("steer needs a non-empty msg"));
        assert!(check_steer_msg(&"x".repeat(64 * 1024 + 1)).is_err());
        assert_eq!(clip_by(&"é".repeat(70)).chars().count(), MAX_BY);
    }

    #[test]
    fn append_refuses_invalid_transition_naming_it() {
        let d = tempfile::tempdir().unwrap();
        let j = Journal::open(&d.path().join("x.jsonl")).unwrap();
        let err = j.append(&Record::task(&t("T1"), TaskState::Gated).into()).unwrap_err().to_string();
        assert_eq!(err, "task T1: invalid transition (none) -> gated");
        j.append(&Record::task(&t("T1"), TaskState::Leased).into()).unwrap();
        let mut c = Record::task(&t("T1"), TaskState::Committed);
        c.sha = Some("abc".into());
        let err = j.append(&c.into()).unwrap_err().to_string();
        assert_eq!(err, "task T1: invalid transition leased -> committed");
    }

    #[test]
    fn torn_tail_is_reported_and_next_append_starts_fresh() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("x.jsonl");
        let j = Journal::open(&p).unwrap();
        j.append(&Record::run(RunEvent::Started, "test", None)).unwrap();
        std::fs::OpenOptions::new().append(true).open(&p).unwrap().write_all(b"{\"v\":\"runstate/v1\",\"ts").unwrap();
        let v = replay(&p).unwrap();
        assert_eq!(v.records, 1);
        assert_eq!(v.torn_tail.as_ref().unwrap().line, 2);
        let line = j.append(&Record::task(&t("T1"), TaskState::Leased).into()).unwrap();
        assert_eq!(line, 3);
        let v = replay(&p).unwrap();
        assert_eq!(v.records, 2);
        assert!(v.torn_tail.is_none());
        assert_eq!(v.bad_lines.len(), 1);
        assert_eq!(v.bad_lines[0].line, 2);
    }

    #[test]
    fn steer_queue_folds() {
        let d = tempfile::tempdir().unwrap();
        let j = Journal::open(&d.path().join("x.jsonl")).unwrap();
        let steer = |outcome, id: &str| ControlRecord {
            verb: Verb::Steer,
            task: Some(t("T1")),
            msg: Some("go".into()),
            interrupt: None,
            by: "test".into(),
            outcome,
            id: Some(id.into()),
            detail: None,
            usd: None,
        };
        j.append(&steer(Outcome::Queued, "a").into()).unwrap();
        j.append(&steer(Outcome::Queued, "b").into()).unwrap();
        j.append(&steer(Outcome::Applied, "a").into()).unwrap();
        let v = j.view().unwrap();
        assert_eq!(v.pending_steers.len(), 1);
        assert_eq!(v.pending_steers[0].id, "b");
    }
}
