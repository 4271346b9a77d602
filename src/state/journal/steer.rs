//! The steer rules every way in shares — the supervisor's control socket and the DynWF inbox: what a
//! steer message may be, who `by` may name, and when a steer is refused (409). Pure functions.

use super::{TaskState, TaskView};
use crate::ids::TaskId;

/// The longest `by` kept in a control record (characters); longer ones are cut.
pub const MAX_BY: usize = 64;

/// `by` as journaled: cut to [`MAX_BY`] characters.
pub fn clip_by(by: &str) -> String {
    by.chars().take(MAX_BY).collect()
}

/// The longest steer message (bytes).
pub const MAX_MSG: usize = 64 * 1024;

/// A refused steer's message as its record keeps it: whole up to [`MAX_MSG`]; a longer one (refused
/// for its length) keeps its first 4 KiB and says how long it was.
pub fn clip_refused_msg(msg: &str) -> String {
    if msg.len() <= MAX_MSG {
        return msg.to_string();
    }
    let mut end = 4096;
    while !msg.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… [cut: {} bytes in all]", &msg[..end], msg.len())
}

/// Checks a steer's message the same way on every way in (control socket, DynWF inbox):
/// non-blank, at most 64 KiB.
pub fn check_steer_msg(msg: &str) -> Result<(), &'static str> {
    if msg.trim().is_empty() {
        return Err("steer needs a non-empty msg");
    }
    if msg.len() > MAX_MSG {
        return Err("steer msg is longer than 64 KiB");
    }
    Ok(())
}

/// Why a steer cannot be queued for a task (a 409 on every way in).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SteerRefusal {
    /// A codex verdict seat: its verdict is not steered.
    VerdictSeat,
    Committed,
    /// Dropped by the operator: nothing follows it.
    Skipped,
    NotStarted,
    /// Nothing to resume: no turn runs and none left a session.
    NoSession,
}

impl SteerRefusal {
    /// The rules, in order, for a task whose last known facts are `t`. `needs_session`: the steer
    /// must resume a known session (the supervisor, when no turn of the task is running).
    pub fn check(verdict_seat: bool, t: Option<&TaskView>, needs_session: bool) -> Option<SteerRefusal> {
        match t {
            _ if verdict_seat => Some(SteerRefusal::VerdictSeat),
            Some(t) if t.state == TaskState::Committed => Some(SteerRefusal::Committed),
            Some(t) if t.state == TaskState::Skipped => Some(SteerRefusal::Skipped),
            None => Some(SteerRefusal::NotStarted),
            Some(t) if needs_session && t.session_id.is_none() => Some(SteerRefusal::NoSession),
            Some(_) => None,
        }
    }

    pub fn detail(self, task: &TaskId) -> String {
        match self {
            SteerRefusal::VerdictSeat => {
                format!("task {task} is the codex verdict seat: steering a review verdict is refused")
            }
            SteerRefusal::Committed => "task already committed".into(),
            SteerRefusal::Skipped => format!("task {task} was skipped: nothing follows a skip"),
            SteerRefusal::NotStarted => format!("task {task} has not started yet: a steer continues a dispatched turn"),
            SteerRefusal::NoSession => format!("no session to resume for task {task}"),
        }
    }
}
