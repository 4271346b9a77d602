//! Replay: a journal's bytes folded into a `RunView` (run status, each task's last known facts, the
//! durable steer queue). Replay trusts what was appended; a torn last line (a crash mid-write) and
//! lines that do not parse are reported, never fatal. Reads the file, writes nothing.

use super::{Body, JournalError, Outcome, Record, RunEvent, TaskState, VERSION, Verb};
use crate::ids::TaskId;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

/// A queued steer not yet applied.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PendingSteer {
    pub id: String,
    pub task: TaskId,
    pub msg: String,
    pub interrupt: bool,
    pub line: u64,
}

/// One steer and where it stands: `queued` → (`delivered` → `taken`, live) or `applied` (resume), or
/// `refused`; its last outcome wins.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SteerView {
    pub id: String,
    pub task: TaskId,
    pub msg: Option<String>,
    pub by: String,
    pub state: Outcome,
    /// When it was queued (or refused).
    pub ts: String,
    /// When it reached its state.
    pub updated: String,
}

/// One asked tool call and where it stands.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalView {
    pub id: String,
    pub task: TaskId,
    pub tool: Option<String>,
    pub input: Option<serde_json::Value>,
    pub via: Option<String>,
    pub state: super::ApprovalState,
    pub by: Option<String>,
    pub message: Option<String>,
    pub detail: Option<String>,
    /// When it was asked.
    pub ts: String,
    /// When it reached its state.
    pub updated: String,
}

/// Last known facts of one task, folded from its records.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskView {
    pub state: TaskState,
    pub rc: Option<i32>,
    pub detail: Option<String>,
    pub sha: Option<String>,
    /// Committed with nothing to commit (its end state was its base).
    pub no_changes: bool,
    /// The base of the task's current worktree (its last `leased` that named one).
    pub base: Option<String>,
    /// The earlier attempt the current worktree started with.
    pub carried: Option<super::Carried>,
    pub session_id: Option<String>,
    pub attempts: u32,
    pub logfile: Option<PathBuf>,
    /// Paths of the last implemented turn.
    pub files: Option<Vec<String>>,
    /// Timestamp of the last record about this task.
    pub ts: String,
    /// Each attempt (a `leased` record begins one), oldest first.
    pub history: Vec<AttemptView>,
}

/// One attempt of a task: from its `leased` record to the record that ended it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AttemptView {
    pub n: u32,
    pub started_at: String,
    /// `None` while it runs (or when it was redone before it ended: then the next one began).
    pub ended_at: Option<String>,
    /// The state it reached.
    pub state: TaskState,
    pub rc: Option<i32>,
    /// The words of its last record.
    pub reason: Option<String>,
}

/// Run status, derived only from `run` records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    Pending,
    Running,
    Paused,
    /// Nothing runs and nothing can start because a task halted (`run blocked`); a task leased or
    /// skipped again makes it `running`.
    Blocked,
    Finished,
    Failed,
    /// Ended by the operator (`run stopped`).
    Stopped,
}

impl RunStatus {
    pub const ALL: [RunStatus; 7] = [
        RunStatus::Pending,
        RunStatus::Running,
        RunStatus::Paused,
        RunStatus::Blocked,
        RunStatus::Finished,
        RunStatus::Failed,
        RunStatus::Stopped,
    ];

    /// The wire name (serde's).
    pub fn as_str(self) -> &'static str {
        crate::wire::name_of(&self)
    }

    /// The run has ended: nothing of it runs or will run again.
    pub fn is_over(self) -> bool {
        matches!(self, RunStatus::Finished | RunStatus::Failed | RunStatus::Stopped)
    }
}

super::record::display_as_str!(RunStatus);

/// `ts` less `idle_s` seconds (when the output stopped), as RFC 3339; `ts` itself if it does not parse.
fn stopped_at(ts: &str, idle_s: u64) -> String {
    humantime::parse_rfc3339_weak(ts)
        .ok()
        .and_then(|t| t.checked_sub(std::time::Duration::from_secs(idle_s)))
        .map_or_else(|| ts.to_string(), |t| humantime::format_rfc3339_millis(t).to_string())
}

/// A line replay could not use.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BadLine {
    pub line: u64,
    pub reason: String,
}

/// The fold of a journal: everything the durable tier and crash recovery need.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunView {
    pub status: RunStatus,
    pub tasks: BTreeMap<TaskId, TaskView>,
    pub pending_steers: Vec<PendingSteer>,
    /// Every steer with an id, in the order it was first recorded.
    pub steers: Vec<SteerView>,
    /// Every asked tool call, by id.
    pub approvals: BTreeMap<String, ApprovalView>,
    /// Number of valid records folded.
    pub records: u64,
    /// Complete lines that did not parse (e.g. a torn line followed by later appends).
    pub bad_lines: Vec<BadLine>,
    /// A final line with no newline that does not parse: a crash mid-write. Ignored, reported.
    pub torn_tail: Option<BadLine>,
    /// Timestamp of the last valid record that is activity: every record but a refused control
    /// record (a 409 steer on a finished run is on the record, and does not make it "updated").
    pub last_ts: Option<String>,
    /// Every `id` carried by a control record (steer queue ids, inbox entries), with the outcome of
    /// its last record: a DynWF entry `queued` when appended is handed out by `take` while it is still
    /// only `queued`.
    #[serde(skip)]
    pub control_ids: BTreeMap<String, Outcome>,
    /// Who paused the run (`budget`, `rate_limit`, an operator's `by`) and why, while it is paused.
    pub pause: Option<(String, Option<String>)>,
    /// A pause by `rate_limit`: when its supervisor resumes the run by itself.
    pub resume_at: Option<String>,
    /// Budgets set by the `budget` verb (US dollars): the run's, and each task's. They replace the
    /// plan's.
    pub budget_usd: Option<f64>,
    pub task_budgets: BTreeMap<TaskId, f64>,
    /// Attention marks (stalls), oldest first.
    pub attention: Vec<AttentionView>,
    /// This run instance's nonce, branch and start commit (its `started` record).
    pub nonce: Option<String>,
    pub branch: Option<String>,
    pub start_sha: Option<String>,
    /// While blocked (or paused after a block): when the idle limit fails the run.
    pub fails_at: Option<String>,
    /// The run's first `started` record's time, and the time of the record that ended it.
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
    /// The tasks stalled now (a `stalled` mark with no `unstalled` or task record after it), with
    /// when their output stopped.
    pub stalled_now: BTreeMap<TaskId, String>,
    /// Every `Idempotency-Key` the run's verbs carried: the request it named first, and its first
    /// answer (`None`: asked, not yet answered).
    #[serde(skip)]
    pub idempotency: BTreeMap<String, Keyed>,
}

/// What an `Idempotency-Key` was first used for, and the first answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Keyed {
    pub verb: String,
    pub task: Option<TaskId>,
    pub answer: Option<serde_json::Value>,
}

/// An attention mark as the views show it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AttentionView {
    pub attention: String,
    pub task: TaskId,
    pub idle_s: Option<u64>,
    pub detail: Option<String>,
    pub ts: String,
    /// The journal line (1-based) that holds it.
    pub line: u64,
}

impl Default for RunView {
    fn default() -> Self {
        RunView {
            status: RunStatus::Pending,
            tasks: BTreeMap::new(),
            pending_steers: Vec::new(),
            steers: Vec::new(),
            approvals: BTreeMap::new(),
            records: 0,
            bad_lines: Vec::new(),
            torn_tail: None,
            last_ts: None,
            control_ids: BTreeMap::new(),
            pause: None,
            resume_at: None,
            budget_usd: None,
            task_budgets: BTreeMap::new(),
            attention: Vec::new(),
            nonce: None,
            branch: None,
            start_sha: None,
            fails_at: None,
            started_at: None,
            finished_at: None,
            stalled_now: BTreeMap::new(),
            idempotency: BTreeMap::new(),
        }
    }
}

impl RunView {
    /// Folds one record in. Replay trusts what was appended (appends were validated); an impossible
    /// transition found on replay (a hand-edited file) is kept as the last state and reported.
    fn apply(&mut self, line: u64, rec: &Record) {
        self.records += 1;
        // A refusal and an Idempotency-Key's bookkeeping are on the record, and are no activity.
        if !matches!(&rec.body, Body::Control(c) if c.outcome == Outcome::Refused)
            && !matches!(rec.body, Body::Idempotency(_))
        {
            self.last_ts = Some(rec.ts.clone());
        }
        match &rec.body {
            Body::Run(r) => {
                let was_over = self.status.is_over();
                self.apply_run(r);
                if r.event == RunEvent::Started && self.started_at.is_none() {
                    self.started_at = Some(rec.ts.clone());
                }
                if self.status.is_over() && !was_over {
                    self.finished_at = Some(rec.ts.clone());
                } else if !self.status.is_over() {
                    self.finished_at = None;
                }
            }
            Body::Task(t) => self.apply_task(rec, line, t),
            Body::Attention(a) => {
                match a.attention.as_str() {
                    "stalled" => {
                        let since = stopped_at(&rec.ts, a.idle_s.unwrap_or(0));
                        self.stalled_now.insert(a.task.clone(), since);
                    }
                    "unstalled" => {
                        self.stalled_now.remove(&a.task);
                    }
                    _ => {}
                }
                self.attention.push(AttentionView {
                    attention: a.attention.clone(),
                    task: a.task.clone(),
                    idle_s: a.idle_s,
                    detail: a.detail.clone(),
                    ts: rec.ts.clone(),
                    line,
                })
            }
            Body::Approval(a) => self.apply_approval(rec, a),
            Body::Control(c) => self.apply_control(rec, line, c),
            Body::Idempotency(i) => {
                let first = self.idempotency.entry(i.key.clone()).or_insert_with(|| Keyed {
                    verb: i.verb.clone(),
                    task: i.task.clone(),
                    answer: None,
                });
                if first.answer.is_none() {
                    first.answer = i.answer.clone();
                }
            }
        }
    }

    fn apply_run(&mut self, r: &super::RunRecord) {
        self.status = match (self.status, r.event) {
            (s, RunEvent::Paused | RunEvent::Resumed | RunEvent::Blocked) if s.is_over() => s,
            // An operator's pause wins over a block (the view still lists what blocks).
            (RunStatus::Paused, RunEvent::Blocked) => RunStatus::Paused,
            (_, RunEvent::Started) => RunStatus::Running,
            (_, RunEvent::Paused) => RunStatus::Paused,
            (_, RunEvent::Resumed) => RunStatus::Running,
            (_, RunEvent::Blocked) => RunStatus::Blocked,
            (_, RunEvent::Finished) => RunStatus::Finished,
            (_, RunEvent::Failed) => RunStatus::Failed,
            (_, RunEvent::Stopped) => RunStatus::Stopped,
        };
        match r.event {
            RunEvent::Blocked if !self.status.is_over() => self.fails_at = r.fails_at.clone(),
            RunEvent::Blocked | RunEvent::Paused => {}
            _ => self.fails_at = None,
        }
        self.pause = (self.status == RunStatus::Paused)
            .then(|| (r.by.clone().unwrap_or_else(|| "operator".into()), r.detail.clone()));
        self.resume_at = if self.status == RunStatus::Paused { r.resume_at.clone() } else { None };
        if r.event == RunEvent::Started && r.nonce.is_some() {
            self.nonce = r.nonce.clone();
            self.branch = r.branch.clone();
            self.start_sha = r.sha.clone();
        }
    }

    fn apply_task(&mut self, rec: &Record, line: u64, t: &super::TaskRecord) {
        // A task that moved is not stalled (its turn ended, or a new one began).
        self.stalled_now.remove(&t.task);
        // A task dispatched again (retry, steer) or dropped (skip) is what unblocks a run.
        if self.status == RunStatus::Blocked && matches!(t.state, TaskState::Leased | TaskState::Skipped) {
            self.status = RunStatus::Running;
            self.fails_at = None;
        }
        let prev = self.tasks.get(&t.task).map(|v| v.state);
        if !TaskState::can_move(prev, t.state) {
            let from = prev.map(|s| s.as_str()).unwrap_or("(none)");
            self.bad_lines.push(BadLine {
                line,
                reason: format!("task {}: invalid transition {from} -> {} (kept)", t.task, t.state),
            });
        }
        let entry = self.tasks.entry(t.task.clone()).or_insert_with(|| TaskView {
            state: t.state,
            rc: None,
            detail: None,
            sha: None,
            no_changes: false,
            base: None,
            carried: None,
            session_id: None,
            attempts: 0,
            logfile: None,
            files: None,
            ts: rec.ts.clone(),
            history: Vec::new(),
        });
        entry.state = t.state;
        entry.ts = rec.ts.clone();
        entry.rc = t.rc;
        entry.detail = t.detail.clone();
        if t.sha.is_some() {
            entry.sha = t.sha.clone();
        }
        entry.no_changes = t.state == TaskState::Committed && t.no_changes == Some(true);
        if t.base.is_some() {
            // A new base is a new worktree: what was carried into the old one is history.
            if t.base != entry.base {
                entry.carried = None;
            }
            entry.base = t.base.clone();
        }
        if t.carried.is_some() {
            entry.carried = t.carried.clone();
        }
        if t.session_id.is_some() {
            entry.session_id = t.session_id.clone();
        }
        if t.logfile.is_some() {
            entry.logfile = t.logfile.clone();
        }
        if t.files.is_some() {
            entry.files = t.files.clone();
        }
        if t.state == TaskState::Leased {
            entry.attempts = t.attempt.unwrap_or(entry.attempts + 1);
            // A lease of the attempt already open (a recovery's re-lease) continues it.
            if entry.history.last().is_none_or(|a| a.n != entry.attempts || a.ended_at.is_some()) {
                entry.history.push(AttemptView {
                    n: entry.attempts,
                    started_at: rec.ts.clone(),
                    ended_at: None,
                    state: t.state,
                    rc: None,
                    reason: None,
                });
            }
        }
        if let Some(a) = entry.history.last_mut().filter(|a| a.ended_at.is_none()) {
            a.state = t.state;
            a.rc = t.rc.or(a.rc);
            a.reason = t.detail.clone().or(a.reason.take());
            if matches!(t.state, TaskState::Committed | TaskState::Halted | TaskState::Skipped) {
                a.ended_at = Some(rec.ts.clone());
            }
        }
    }

    fn apply_approval(&mut self, rec: &Record, a: &super::ApprovalRecord) {
        let v = self.approvals.entry(a.id.clone()).or_insert_with(|| ApprovalView {
            id: a.id.clone(),
            task: a.task.clone(),
            tool: None,
            input: None,
            via: None,
            state: a.state,
            by: None,
            message: None,
            detail: None,
            ts: rec.ts.clone(),
            updated: rec.ts.clone(),
        });
        v.state = a.state;
        v.updated = rec.ts.clone();
        for (slot, new) in [(&mut v.tool, &a.tool), (&mut v.via, &a.via), (&mut v.by, &a.by)] {
            if new.is_some() {
                *slot = new.clone();
            }
        }
        for (slot, new) in [(&mut v.message, &a.message), (&mut v.detail, &a.detail)] {
            if new.is_some() {
                *slot = new.clone();
            }
        }
        if a.input.is_some() {
            v.input = a.input.clone();
        }
    }

    fn apply_control(&mut self, rec: &Record, line: u64, c: &super::ControlRecord) {
        if let Some(id) = &c.id {
            self.control_ids.insert(id.clone(), c.outcome);
        }
        if let (Verb::Budget, Outcome::Accepted, Some(usd)) = (c.verb, c.outcome, c.usd) {
            match &c.task {
                Some(t) => {
                    self.task_budgets.insert(t.clone(), usd);
                }
                None => self.budget_usd = Some(usd),
            }
        }
        if c.verb != Verb::Steer {
            return;
        }
        if let (Some(id), Some(task)) = (&c.id, &c.task) {
            match self.steers.iter_mut().rev().find(|s| &s.id == id) {
                Some(s) => {
                    s.state = c.outcome;
                    s.updated = rec.ts.clone();
                }
                None => self.steers.push(SteerView {
                    id: id.clone(),
                    task: task.clone(),
                    msg: c.msg.clone(),
                    by: c.by.clone(),
                    state: c.outcome,
                    ts: rec.ts.clone(),
                    updated: rec.ts.clone(),
                }),
            }
        }
        match (c.outcome, &c.id) {
            (Outcome::Queued, Some(id)) => {
                if let (Some(task), Some(msg)) = (&c.task, &c.msg) {
                    self.pending_steers.push(PendingSteer {
                        id: id.clone(),
                        task: task.clone(),
                        msg: msg.clone(),
                        interrupt: c.interrupt.unwrap_or(false),
                        line,
                    });
                }
            }
            (Outcome::Applied | Outcome::Refused | Outcome::Taken | Outcome::Cancelled, Some(id)) => {
                self.pending_steers.retain(|s| &s.id != id)
            }
            _ => {}
        }
    }

    /// Task counts by state (every state present, zero included).
    pub fn counts(&self) -> BTreeMap<&'static str, u64> {
        let mut m: BTreeMap<&'static str, u64> = TaskState::ALL.iter().map(|s| (s.as_str(), 0)).collect();
        for t in self.tasks.values() {
            *m.entry(t.state.as_str()).or_default() += 1;
        }
        m
    }

    /// Tool calls asked and not yet decided: the run's, or one task's.
    pub fn pending_approvals(&self, task: Option<&TaskId>) -> u64 {
        let asked = |a: &&ApprovalView| task.is_none_or(|t| &a.task == t);
        self.approvals.values().filter(asked).filter(|a| a.state == super::ApprovalState::Pending).count() as u64
    }

    /// How many tasks are in `state`.
    pub fn count(&self, state: TaskState) -> u64 {
        self.tasks.values().filter(|t| t.state == state).count() as u64
    }

    pub fn state_of(&self, task: &TaskId) -> Option<TaskState> {
        self.tasks.get(task).map(|t| t.state)
    }
}

/// Folds complete lines of `buf` (which starts at line number `first_line`) into `view`. Returns the
/// number of bytes consumed (up to and including the last newline) and the next line number.
pub(super) fn fold_bytes(view: &mut RunView, buf: &[u8], first_line: u64) -> (usize, u64) {
    let mut line_no = first_line;
    let mut consumed = 0;
    for chunk in buf.split_inclusive(|&b| b == b'\n') {
        if chunk.last() != Some(&b'\n') {
            break;
        }
        consumed += chunk.len();
        let body = &chunk[..chunk.len() - 1];
        if !body.iter().all(u8::is_ascii_whitespace) {
            match parse_line(body) {
                Ok(rec) => view.apply(line_no, &rec),
                Err(reason) => view.bad_lines.push(BadLine { line: line_no, reason }),
            }
        }
        line_no += 1;
    }
    (consumed, line_no)
}

/// Parses and checks one journal line.
pub fn parse_line(body: &[u8]) -> Result<Record, String> {
    let rec: Record = serde_json::from_slice(body).map_err(|e| format!("not a runstate/v1 record: {e}"))?;
    if rec.v != VERSION {
        return Err(format!("v is {:?}, expected {VERSION:?}", rec.v));
    }
    Ok(rec)
}

/// Replays a journal's bytes from the start.
pub fn replay_bytes(buf: &[u8]) -> RunView {
    let mut view = RunView::default();
    let (consumed, line) = fold_bytes(&mut view, buf, 1);
    let rest = &buf[consumed..];
    if !rest.is_empty() {
        match parse_line(rest) {
            // A complete record that only lacks its newline is still a record.
            Ok(rec) => view.apply(line, &rec),
            Err(reason) => view.torn_tail = Some(BadLine { line, reason: format!("torn tail: {reason}") }),
        }
    }
    view
}

/// A read-only fold of a journal kept up to date by reading only what was appended since (a
/// stream that watches one run's state). A file replaced or truncated under it is folded afresh.
#[derive(Default)]
pub struct Follower {
    view: RunView,
    /// Bytes folded (all complete lines), the next line number, and the file's (dev, inode).
    offset: u64,
    line: u64,
    id: Option<(u64, u64)>,
}

impl Follower {
    /// Folds what was appended to `path` since the last call; a missing file is an empty run.
    pub fn update(&mut self, path: &Path) -> Result<&RunView, JournalError> {
        use std::io::{Read, Seek};
        use std::os::unix::fs::MetadataExt;
        let io = |source| JournalError::Io { path: path.to_path_buf(), source };
        let mut f = match std::fs::File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                *self = Follower::default();
                return Ok(&self.view);
            }
            Err(e) => return Err(io(e)),
        };
        let m = f.metadata().map_err(io)?;
        if self.id != Some((m.dev(), m.ino())) || m.len() < self.offset || self.line == 0 {
            *self = Follower { id: Some((m.dev(), m.ino())), line: 1, ..Follower::default() };
        }
        if m.len() > self.offset {
            f.seek(io::SeekFrom::Start(self.offset)).map_err(io)?;
            let mut buf = Vec::new();
            f.take(m.len() - self.offset).read_to_end(&mut buf).map_err(io)?;
            let (consumed, next) = fold_bytes(&mut self.view, &buf, self.line);
            self.offset += consumed as u64;
            self.line = next;
        }
        Ok(&self.view)
    }
}

/// Replays the journal at `path`. A missing file is an empty, pending run.
pub fn replay(path: &Path) -> Result<RunView, JournalError> {
    match std::fs::read(path) {
        Ok(buf) => Ok(replay_bytes(&buf)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(RunView::default()),
        Err(source) => Err(JournalError::Io { path: path.to_path_buf(), source }),
    }
}
