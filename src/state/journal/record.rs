//! The `runstate/v1` record shapes: one journal line is a `Record` whose `kind` selects a run, task or
//! control body; the task state machine every append is checked against. No I/O.

use super::JournalError;
use crate::ids::TaskId;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

pub const VERSION: &str = "runstate/v1";

/// `Display` as the wire name (`as_str`) for the journal's enums.
macro_rules! display_as_str {
    ($($t:ty),*) => {$(
        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    )*};
}
pub(super) use display_as_str;
display_as_str!(TaskState, Verb, RunEvent, Outcome);

/// A task's state. `committed` is terminal; `halted` is the only failure state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskState {
    Leased,
    Implemented,
    Gated,
    Reviewed,
    Committed,
    Halted,
    /// Dropped by the operator (`skip`) after a halt: the wave counts it done, nothing follows it.
    Skipped,
}

impl TaskState {
    pub const ALL: [TaskState; 7] = [
        TaskState::Leased,
        TaskState::Implemented,
        TaskState::Gated,
        TaskState::Reviewed,
        TaskState::Committed,
        TaskState::Halted,
        TaskState::Skipped,
    ];

    /// The wire name (serde's).
    pub fn as_str(self) -> &'static str {
        crate::wire::name_of(&self)
    }

    /// `committed` and `skipped` are terminal: nothing follows them (no re-dispatch, no halt, no
    /// steer). Every other state, `halted` included, can move on.
    pub fn is_terminal(self) -> bool {
        matches!(self, TaskState::Committed | TaskState::Skipped)
    }

    /// The state machine: `leased → implemented → gated → [reviewed] → committed`, any non-terminal
    /// state → `halted`, and back to `leased` from `halted` (re-dispatch) or from a finished turn that
    /// is not yet committed (a steer applied at the turn boundary).
    pub fn can_move(from: Option<TaskState>, to: TaskState) -> bool {
        use TaskState::*;
        match (from, to) {
            (None, Leased) => true,
            (Some(Leased), Implemented) => true,
            (Some(Implemented), Gated) => true,
            (Some(Gated), Reviewed) | (Some(Gated), Committed) | (Some(Reviewed), Committed) => true,
            (Some(Implemented | Gated | Reviewed | Halted), Leased) => true,
            (Some(f), Halted) => !f.is_terminal() && f != Halted,
            (Some(Halted), Skipped) => true,
            _ => false,
        }
    }
}

/// Run-level lifecycle events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunEvent {
    Started,
    Paused,
    Resumed,
    Finished,
    Failed,
    /// Nothing runs and nothing can start because a task halted; `fails_at` is when the idle limit
    /// fails the run. Journaled once per blocking; a task leased or skipped again unblocks it.
    Blocked,
    /// Ended by the operator (`stop`, Ctrl-C of a foreground run): its running turns were killed.
    Stopped,
}

/// The control verbs. Each one leaves a `control` record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verb {
    Steer,
    Kill,
    Pause,
    Resume,
    Stop,
    /// Ends a live task's running turn without killing its process.
    Interrupt,
    /// Ends a session (`harness session end`): its live channel closes once no turn runs (added).
    End,
    /// Sets the run's (or a task's) budget in US dollars, `usd`.
    Budget,
    /// Re-dispatches a halted task (its session resumed, else a fresh start).
    Retry,
    /// Ends a halted task `skipped` (its `detail` the reason).
    Skip,
    /// Only on a `refused` record (added): a request that named none of the verbs above (`status`,
    /// an unknown verb) or could not be read as one (a malformed line, a connection refused before
    /// its request was read); its `detail` says what it was. Never a verb anyone can send.
    Other,
}

impl RunEvent {
    /// The wire name (serde's).
    pub fn as_str(self) -> &'static str {
        crate::wire::name_of(&self)
    }
}

impl Outcome {
    /// The wire name (serde's).
    pub fn as_str(self) -> &'static str {
        crate::wire::name_of(&self)
    }
}

impl Verb {
    /// The wire name (serde's).
    pub fn as_str(self) -> &'static str {
        crate::wire::name_of(&self)
    }
}

/// What became of a verb. A steer is `queued` when acknowledged and `applied` (same `id`) when the
/// re-dispatch starts: the queue is the journal, so it survives restarts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Accepted,
    Queued,
    Applied,
    Refused,
    Noop,
    /// A live steer written to the task's live channel.
    Delivered,
    /// The engine echoed a delivered steer where it entered the conversation: it is done, like
    /// `applied` for a resume steer.
    Taken,
    /// A queued (or delivered, not yet taken) steer dropped by a kill of its task: never applied.
    Cancelled,
}

/// One journal line. `kind` selects the body; `v` and `ts` are on every line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// Always `runstate/v1`.
    pub v: String,
    /// RFC 3339 time of the append.
    pub ts: String,
    #[serde(flatten)]
    pub body: Body,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Body {
    Run(RunRecord),
    Task(TaskRecord),
    Control(ControlRecord),
    /// A tool call asked of the operator, and what became of it.
    Approval(ApprovalRecord),
    /// Something that needs a person: `kind` says what, e.g. `stalled`.
    Attention(AttentionRecord),
    /// A verb sent with an `Idempotency-Key` (added): asked (no `answer` yet), then answered.
    Idempotency(IdempotencyRecord),
}

/// A verb carrying an `Idempotency-Key`: journaled `asked` (no `answer`) before it is carried out and
/// again with its `answer` once it has one, so a repeat of the key is answered with the first answer
/// and never carried out twice — a restart between the two leaves the key asked with no answer,
/// and a repeat is refused saying so.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IdempotencyRecord {
    pub key: String,
    /// The verb's wire name (`steer`, `kill`…).
    pub verb: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<TaskId>,
    /// The answer the first request got, as control/v1 writes it (`{"ok":…}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<serde_json::Value>,
}

/// The longest `Idempotency-Key`, in bytes.
pub const MAX_IDEMPOTENCY_KEY: usize = 200;

/// Checks an `Idempotency-Key` as a client sent it: 1 to 200 visible ASCII characters.
pub fn check_idempotency_key(k: &str) -> Result<(), String> {
    if k.is_empty() || k.len() > MAX_IDEMPOTENCY_KEY || !k.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(format!(
            "Idempotency-Key must be 1 to {MAX_IDEMPOTENCY_KEY} visible ASCII characters (a UUID, say)"
        ));
    }
    Ok(())
}

/// A mark for a person's attention, journaled once per occurrence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttentionRecord {
    /// `stalled`: a running turn's log has not grown for the plan's `stall_after`.
    pub attention: String,
    pub task: TaskId,
    /// Seconds without output, for a stall.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_s: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// Where an asked tool call stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ApprovalState {
    Pending,
    Allowed,
    Denied,
    /// Its turn is gone (the supervisor restarted, the turn ended or was killed) before a decision.
    Expired,
}

impl ApprovalState {
    /// The wire name (serde's).
    pub fn as_str(self) -> &'static str {
        crate::wire::name_of(&self)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalRecord {
    pub id: String,
    pub task: TaskId,
    pub state: ApprovalState,
    /// The tool asked for (on the first record of an approval).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// Its input, verbatim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<serde_json::Value>,
    /// How claude asked: `live` (the live channel's `can_use_tool`) or `mcp` (the permission tool).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via: Option<String>,
    /// Who decided: the operator's `by`, `policy`, `timeout`, `plan` (approvals off), `supervisor`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// A deny's message (what the model reads).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    pub event: RunEvent,
    /// Who caused it (`supervisor`, `runner`, `api`, `cli`, `dynwf`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// A pause by `rate_limit`: when the supervisor resumes by itself (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume_at: Option<String>,
    /// On `started`: this run instance's nonce, carried by its task commits (`Harness-Nonce`), so
    /// recovery never adopts a commit of an earlier instance of the same runId.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nonce: Option<String>,
    /// On `started`: the branch the run integrates onto (pinned: a task integrating while the run's
    /// worktree has another one checked out halts), absent on a detached HEAD.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    /// On `started`: the run's start commit; its own commits are found above it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha: Option<String>,
    /// On `blocked`: when the supervisor's idle limit fails the run (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fails_at: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskRecord {
    pub task: TaskId,
    pub state: TaskState,
    /// Wrapper / gate exit code (required on `halted`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rc: Option<i32>,
    /// Why (required on `halted`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// Commit sha (required on `committed`, unless `no_changes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha: Option<String>,
    /// On `committed`: the task's end state equals its base (or the tip), so nothing was committed;
    /// also a verdict seat's record (it never commits).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_changes: Option<bool>,
    /// On `leased`: the commit the task's worktree started from; the task's change is everything
    /// between it and the turn's end state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<String>,
    /// On `leased`: the earlier attempt this redo starts with, applied to the new base.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub carried: Option<Carried>,
    /// The engine session this turn ran in, once known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// 1-based dispatch count of this task (on `leased`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    /// The wrapper's logfile (on `leased`), so the durable tier finds it without liveness.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logfile: Option<PathBuf>,
    /// Paths the turn changed (on `implemented`, from the status line): what the commit takes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files: Option<Vec<String>>,
}

/// An earlier attempt carried into a redo: its commit (kept at `refs/harness/<runId>/<task>/attempt-N`)
/// and the paths that conflicted with the new base (left with git's conflict markers).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Carried {
    pub sha: String,
    #[serde(default)]
    pub conflicts: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ControlRecord {
    pub verb: Verb,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<TaskId>,
    /// Steer message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub msg: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupt: Option<bool>,
    /// Who asked (`api`, `cli`, `inbox`, `supervisor`…).
    pub by: String,
    pub outcome: Outcome,
    /// Correlates a queued steer with its applied record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// A budget verb's new budget, US dollars.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usd: Option<f64>,
}

impl Record {
    pub fn new(body: Body) -> Record {
        Record { v: VERSION.to_string(), ts: now_rfc3339(), body }
    }
    pub fn run(event: RunEvent, by: &str, detail: Option<String>) -> Record {
        Record::new(Body::Run(RunRecord {
            event,
            by: Some(by.to_string()),
            detail,
            resume_at: None,
            nonce: None,
            branch: None,
            sha: None,
            fails_at: None,
        }))
    }
    /// A run instance's `started` record: a fresh nonce, and the branch and commit it starts from.
    pub fn started(by: &str, detail: Option<String>, branch: Option<String>, sha: Option<String>) -> Record {
        let mut rec = Record::run(RunEvent::Started, by, detail);
        if let Body::Run(r) = &mut rec.body {
            r.nonce = Some(uuid::Uuid::new_v4().simple().to_string());
            r.branch = branch;
            r.sha = sha;
        }
        rec
    }
    /// A `refused` control record: what was asked, by whom, and why it was not done.
    pub fn refused(verb: Verb, task: Option<TaskId>, by: &str, detail: impl Into<String>) -> ControlRecord {
        ControlRecord { task, detail: Some(detail.into()), ..Record::control(verb, by, Outcome::Refused) }
    }
    /// A control record with only its required fields; set the others with struct update.
    pub fn control(verb: Verb, by: &str, outcome: Outcome) -> ControlRecord {
        ControlRecord {
            verb,
            task: None,
            msg: None,
            interrupt: None,
            by: by.into(),
            outcome,
            id: None,
            detail: None,
            usd: None,
        }
    }
    pub fn task(task: &TaskId, state: TaskState) -> TaskRecord {
        TaskRecord {
            task: task.clone(),
            state,
            rc: None,
            detail: None,
            sha: None,
            no_changes: None,
            base: None,
            carried: None,
            session_id: None,
            attempt: None,
            logfile: None,
            files: None,
        }
    }
}

impl From<TaskRecord> for Record {
    fn from(t: TaskRecord) -> Record {
        Record::new(Body::Task(t))
    }
}
impl From<ApprovalRecord> for Record {
    fn from(a: ApprovalRecord) -> Record {
        Record::new(Body::Approval(a))
    }
}
impl From<ControlRecord> for Record {
    fn from(c: ControlRecord) -> Record {
        Record::new(Body::Control(c))
    }
}

pub fn now_rfc3339() -> String {
    humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()
}

/// Per-state required fields.
pub(super) fn validate_shape(rec: &Record) -> Result<(), JournalError> {
    if rec.v != VERSION {
        return Err(JournalError::Invalid(format!("v must be {VERSION}")));
    }
    match &rec.body {
        Body::Task(t) => {
            let missing = |field| JournalError::Missing { task: t.task.clone(), state: t.state, field };
            match t.state {
                TaskState::Halted if t.rc.is_none() => Err(missing("rc")),
                TaskState::Halted if t.detail.as_deref().unwrap_or("").is_empty() => Err(missing("detail")),
                TaskState::Committed if t.no_changes == Some(true) && t.sha.is_some() => {
                    Err(JournalError::Invalid(format!("task {}: a no_changes commit has no sha", t.task)))
                }
                TaskState::Committed if t.no_changes != Some(true) && t.sha.as_deref().unwrap_or("").is_empty() => {
                    Err(missing("sha"))
                }
                _ => Ok(()),
            }
        }
        Body::Control(c) => {
            if c.verb == Verb::Steer && c.outcome == Outcome::Queued && (c.msg.is_none() || c.id.is_none()) {
                return Err(JournalError::Invalid("a queued steer needs msg and id".into()));
            }
            if c.outcome == Outcome::Cancelled && (c.verb != Verb::Steer || c.id.is_none()) {
                return Err(JournalError::Invalid("only a steer is cancelled, by its id".into()));
            }
            // A refusal is recorded even when the request lacked its task (that may be why).
            if matches!(c.verb, Verb::Steer | Verb::Kill | Verb::Interrupt)
                && c.task.is_none()
                && c.outcome != Outcome::Refused
            {
                return Err(JournalError::Invalid(format!("{} needs a task", c.verb.as_str())));
            }
            if c.verb == Verb::Other && c.outcome != Outcome::Refused {
                return Err(JournalError::Invalid("verb other is only ever refused".into()));
            }
            Ok(())
        }
        Body::Run(_) | Body::Attention(_) => Ok(()),
        Body::Idempotency(i) => check_idempotency_key(&i.key).map_err(JournalError::Invalid),
        Body::Approval(a) => {
            if a.id.is_empty() {
                return Err(JournalError::Invalid("an approval needs an id".into()));
            }
            if a.state == ApprovalState::Pending && a.tool.as_deref().unwrap_or("").is_empty() {
                return Err(JournalError::Invalid("a pending approval needs its tool".into()));
            }
            if matches!(a.state, ApprovalState::Allowed | ApprovalState::Denied) && a.by.is_none() {
                return Err(JournalError::Invalid("a decided approval needs by".into()));
            }
            Ok(())
        }
    }
}
