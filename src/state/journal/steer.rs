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

/// The most review comments one steer carries.
pub const MAX_COMMENTS: usize = 200;

/// One review comment on a task's change: a file, a line of it (`None`: the file as a whole), what
/// to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Comment {
    pub path: String,
    pub line: Option<u64>,
    pub body: String,
}

/// The one message a steer with review comments delivers: its `msg` (if any), then each comment
/// quoted with its file and line, in the order given. The message's own rules (non-blank, 64 KiB)
/// are `check_steer_msg`'s.
pub fn comments_message(msg: Option<&str>, comments: &[Comment]) -> Result<String, String> {
    if comments.len() > MAX_COMMENTS {
        return Err(format!("at most {MAX_COMMENTS} comments in one steer, got {}", comments.len()));
    }
    let mut out = msg.map(str::trim_end).filter(|m| !m.trim().is_empty()).map(str::to_string).unwrap_or_default();
    if comments.is_empty() {
        return Ok(out);
    }
    if !out.is_empty() {
        out.push_str("\n\n");
    }
    out.push_str(if comments.len() == 1 {
        "A review comment on your change:\n"
    } else {
        "Review comments on your change (address each):\n"
    });
    for (i, c) in comments.iter().enumerate() {
        let path = c.path.trim();
        if path.is_empty() || path.contains('\n') {
            return Err(format!("comment {}: path must be a file path on one line", i + 1));
        }
        if c.body.trim().is_empty() {
            return Err(format!("comment {} ({path}): body must not be blank", i + 1));
        }
        let at = match c.line {
            Some(0) => return Err(format!("comment {} ({path}): line starts at 1", i + 1)),
            Some(n) => format!("{path}:{n}"),
            None => path.to_string(),
        };
        out.push_str(&format!("\n{}. {at}\n", i + 1));
        for l in c.body.trim_end().lines() {
            out.push_str(&format!("   > {l}\n"));
        }
    }
    Ok(out.trim_end().to_string())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_are_quoted_with_their_file_and_line_after_the_message() {
        let c = |path: &str, line, body: &str| Comment { path: path.into(), line, body: body.into() };
        let m = comments_message(
            Some("Please fix these."),
            &[c("src/a.rs", Some(12), "off by one\nuse <="), c("README.md", None, "typo")],
        )
        .unwrap();
        assert_eq!(
            m,
            "Please fix these.\n\nReview comments on your change (address each):\n\n1. src/a.rs:12\n   > off by one\n   > use <=\n\n2. README.md\n   > typo"
        );
        assert!(comments_message(None, &[c("a", Some(0), "x")]).unwrap_err().contains("line starts at 1"));
        assert!(comments_message(None, &[c(" ", Some(1), "x")]).unwrap_err().contains("path"));
        assert!(comments_message(None, &[c("a", Some(1), " \n")]).unwrap_err().contains("blank"));
        assert_eq!(comments_message(Some("just this"), &[]).unwrap(), "just this");
    }
}
