//! The `runstate/v1` journal at `<runstateDir>/<slug>.jsonl`: the append-only truth of a run.
//!
//! Owns the record shapes, the task state machine, appends (one `write(2)` of one line, `O_APPEND`,
//! under an exclusive `flock`, so concurrent writers never interleave), and replay (fold the file
//! into run status + per-task last state + the durable steer queue). A torn last line is reported and
//! ignored; the next append starts on a fresh line. A short write is rolled back (`ftruncate`) so a
//! failed append leaves nothing behind and is never acknowledged.
//!
//! This module knows nothing of HTTP or processes.

use crate::ids::TaskId;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

pub const VERSION: &str = "runstate/v1";

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
}

impl TaskState {
    pub const ALL: [TaskState; 6] = [
        TaskState::Leased,
        TaskState::Implemented,
        TaskState::Gated,
        TaskState::Reviewed,
        TaskState::Committed,
        TaskState::Halted,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Leased => "leased",
            TaskState::Implemented => "implemented",
            TaskState::Gated => "gated",
            TaskState::Reviewed => "reviewed",
            TaskState::Committed => "committed",
            TaskState::Halted => "halted",
        }
    }

    /// States in which a task's turn or its gate/review/commit is still ahead: a steer can re-dispatch.
    pub fn is_terminal(self) -> bool {
        self == TaskState::Committed
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
            _ => false,
        }
    }
}

impl std::fmt::Display for TaskState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
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
}

impl Verb {
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Steer => "steer",
            Verb::Kill => "kill",
            Verb::Pause => "pause",
            Verb::Resume => "resume",
            Verb::Stop => "stop",
        }
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
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    pub event: RunEvent,
    /// Who caused it (`supervisor`, `runner`, `api`, `cli`, `dynwf`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
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
    /// Commit sha (required on `committed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha: Option<String>,
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
}

impl Record {
    pub fn new(body: Body) -> Record {
        Record { v: VERSION.to_string(), ts: now_rfc3339(), body }
    }
    pub fn run(event: RunEvent, by: &str, detail: Option<String>) -> Record {
        Record::new(Body::Run(RunRecord { event, by: Some(by.to_string()), detail }))
    }
    /// A control record with only its required fields; set the others with struct update.
    pub fn control(verb: Verb, by: &str, outcome: Outcome) -> ControlRecord {
        ControlRecord { verb, task: None, msg: None, interrupt: None, by: by.into(), outcome, id: None, detail: None }
    }
    pub fn task(task: &TaskId, state: TaskState) -> TaskRecord {
        TaskRecord {
            task: task.clone(),
            state,
            rc: None,
            detail: None,
            sha: None,
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
impl From<ControlRecord> for Record {
    fn from(c: ControlRecord) -> Record {
        Record::new(Body::Control(c))
    }
}

pub fn now_rfc3339() -> String {
    humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()
}

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

/// The longest `by` kept in a control record (characters); longer ones are cut.
pub const MAX_BY: usize = 64;

/// `by` as journaled: cut to [`MAX_BY`] characters.
pub fn clip_by(by: &str) -> String {
    by.chars().take(MAX_BY).collect()
}

/// Checks a steer's message the same way on every way in (control socket, DynWF inbox):
/// non-blank, at most 64 KiB.
pub fn check_steer_msg(msg: &str) -> Result<(), &'static str> {
    if msg.trim().is_empty() {
        return Err("steer needs a non-empty msg");
    }
    if msg.len() > 64 * 1024 {
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
            SteerRefusal::NotStarted => format!("task {task} has not started yet: a steer continues a dispatched turn"),
            SteerRefusal::NoSession => format!("no session to resume for task {task}"),
        }
    }
}

/// A queued steer not yet applied.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PendingSteer {
    pub id: String,
    pub task: TaskId,
    pub msg: String,
    pub interrupt: bool,
    pub line: u64,
}

/// Last known facts of one task, folded from its records.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskView {
    pub state: TaskState,
    pub rc: Option<i32>,
    pub detail: Option<String>,
    pub sha: Option<String>,
    pub session_id: Option<String>,
    pub attempts: u32,
    pub logfile: Option<PathBuf>,
    /// Paths of the last implemented turn.
    pub files: Option<Vec<String>>,
    /// Timestamp of the last record about this task.
    pub ts: String,
}

/// Run status, derived only from `run` records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    Pending,
    Running,
    Paused,
    Finished,
    Failed,
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
    /// Number of valid records folded.
    pub records: u64,
    /// Complete lines that did not parse (e.g. a torn line followed by later appends).
    pub bad_lines: Vec<BadLine>,
    /// A final line with no newline that does not parse: a crash mid-write. Ignored, reported.
    pub torn_tail: Option<BadLine>,
    /// Timestamp of the last valid record.
    pub last_ts: Option<String>,
    /// Every `id` carried by a control record (steer queue ids, taken inbox entries).
    #[serde(skip)]
    pub control_ids: std::collections::BTreeSet<String>,
}

impl Default for RunView {
    fn default() -> Self {
        RunView {
            status: RunStatus::Pending,
            tasks: BTreeMap::new(),
            pending_steers: Vec::new(),
            records: 0,
            bad_lines: Vec::new(),
            torn_tail: None,
            last_ts: None,
            control_ids: std::collections::BTreeSet::new(),
        }
    }
}

impl RunView {
    /// Folds one record in. Replay trusts what was appended (appends were validated); an impossible
    /// transition found on replay (a hand-edited file) is kept as the last state and reported.
    fn apply(&mut self, line: u64, rec: &Record) {
        self.records += 1;
        self.last_ts = Some(rec.ts.clone());
        match &rec.body {
            Body::Run(r) => {
                self.status = match (self.status, r.event) {
                    (RunStatus::Finished | RunStatus::Failed, RunEvent::Paused | RunEvent::Resumed) => self.status,
                    (_, RunEvent::Started) => RunStatus::Running,
                    (_, RunEvent::Paused) => RunStatus::Paused,
                    (_, RunEvent::Resumed) => RunStatus::Running,
                    (_, RunEvent::Finished) => RunStatus::Finished,
                    (_, RunEvent::Failed) => RunStatus::Failed,
                }
            }
            Body::Task(t) => {
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
                    session_id: None,
                    attempts: 0,
                    logfile: None,
                    files: None,
                    ts: rec.ts.clone(),
                });
                entry.state = t.state;
                entry.ts = rec.ts.clone();
                entry.rc = t.rc;
                entry.detail = t.detail.clone();
                if t.sha.is_some() {
                    entry.sha = t.sha.clone();
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
                }
            }
            Body::Control(c) => {
                if let Some(id) = &c.id {
                    self.control_ids.insert(id.clone());
                }
                if c.verb != Verb::Steer {
                    return;
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
                    (Outcome::Applied | Outcome::Refused, Some(id)) => self.pending_steers.retain(|s| &s.id != id),
                    _ => {}
                }
            }
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

    pub fn state_of(&self, task: &TaskId) -> Option<TaskState> {
        self.tasks.get(task).map(|t| t.state)
    }
}

/// Folds complete lines of `buf` (which starts at line number `first_line`) into `view`. Returns the
/// number of bytes consumed (up to and including the last newline) and the next line number.
fn fold_bytes(view: &mut RunView, buf: &[u8], first_line: u64) -> (usize, u64) {
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

/// Replays the journal at `path`. A missing file is an empty, pending run.
pub fn replay(path: &Path) -> Result<RunView, JournalError> {
    match std::fs::read(path) {
        Ok(buf) => Ok(replay_bytes(&buf)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(RunView::default()),
        Err(source) => Err(JournalError::Io { path: path.to_path_buf(), source }),
    }
}

/// An open journal for appending. Keeps a fold of what it has seen, extended incrementally under the
/// lock, so validating an append costs only the bytes other writers added since.
pub struct Journal {
    path: PathBuf,
    file: File,
    /// Fold of bytes `[0, offset)`, all complete lines, plus the next line number.
    cache: Mutex<(RunView, u64, u64)>,
    /// fdatasync after each append (on by default; `HARNESS_JOURNAL_FSYNC=0` turns it off for tests
    /// that hammer the journal).
    sync: bool,
}

/// Holds `flock(LOCK_EX)` on a file until dropped.
struct FlockGuard<'a>(&'a File);

impl<'a> FlockGuard<'a> {
    fn lock(f: &'a File) -> io::Result<Self> {
        loop {
            // SAFETY: flock on a valid, open fd owned by `f`.
            let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) };
            if rc == 0 {
                return Ok(FlockGuard(f));
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }
}

impl Drop for FlockGuard<'_> {
    fn drop(&mut self) {
        // SAFETY: unlocking the fd we locked.
        unsafe { libc::flock(self.0.as_raw_fd(), libc::LOCK_UN) };
    }
}

impl Journal {
    /// Opens (creating, mode 0600) the journal for appending.
    pub fn open(path: &Path) -> Result<Journal, JournalError> {
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .mode(0o600)
            .open(path)
            .map_err(|source| JournalError::Io { path: path.to_path_buf(), source })?;
        let sync = std::env::var("HARNESS_JOURNAL_FSYNC").map(|v| v != "0").unwrap_or(true);
        Ok(Journal { path: path.to_path_buf(), file, cache: Mutex::new((RunView::default(), 0, 1)), sync })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn io(&self, source: io::Error) -> JournalError {
        JournalError::Io { path: self.path.clone(), source }
    }

    /// Brings the cached fold up to the file's current end. Call with the flock held.
    fn catch_up(&self, cache: &mut (RunView, u64, u64)) -> Result<u64, JournalError> {
        let len = self.file.metadata().map_err(|e| self.io(e))?.len();
        if len < cache.1 {
            // Truncated under us (hand edit or a rolled-back write we did not see): refold from zero.
            *cache = (RunView::default(), 0, 1);
        }
        if len > cache.1 {
            let mut buf = Vec::with_capacity((len - cache.1) as usize);
            let mut f = &self.file;
            f.seek(SeekFrom::Start(cache.1)).map_err(|e| self.io(e))?;
            f.take(len - cache.1).read_to_end(&mut buf).map_err(|e| self.io(e))?;
            let (consumed, next_line) = fold_bytes(&mut cache.0, &buf, cache.2);
            cache.1 += consumed as u64;
            cache.2 = next_line;
        }
        Ok(len)
    }

    /// The current fold (complete lines only), read under the lock.
    pub fn view(&self) -> Result<RunView, JournalError> {
        let _g = FlockGuard::lock(&self.file).map_err(|e| self.io(e))?;
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        self.catch_up(&mut cache)?;
        Ok(cache.0.clone())
    }

    /// Validates and appends one record; returns its 1-based line number. The record is on disk (and
    /// fdatasync'd unless disabled) when this returns Ok.
    pub fn append(&self, rec: &Record) -> Result<u64, JournalError> {
        self.append_checked(rec, |_| Ok(()))
    }

    /// Like `append`, but first runs `check` against the up-to-date fold under the lock: a verb that
    /// depends on state (steer on a committed task) is decided and recorded atomically.
    pub fn append_checked(
        &self,
        rec: &Record,
        check: impl FnOnce(&RunView) -> Result<(), JournalError>,
    ) -> Result<u64, JournalError> {
        validate_shape(rec)?;
        let _g = FlockGuard::lock(&self.file).map_err(|e| self.io(e))?;
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        let len = self.catch_up(&mut cache)?;
        check(&cache.0)?;
        if let Body::Task(t) = &rec.body {
            let from = cache.0.state_of(&t.task);
            if !TaskState::can_move(from, t.state) {
                let from = from.map(|s| s.as_str().to_string()).unwrap_or_else(|| "(none)".into());
                return Err(JournalError::Transition { task: t.task.clone(), from, to: t.state });
            }
        }
        let mut line = Vec::with_capacity(256);
        // A torn tail (crash mid-write) gets closed so this record starts on a fresh line.
        let torn = len > cache.1;
        if torn {
            let mut last = [0u8; 1];
            self.file.read_exact_at(&mut last, len - 1).map_err(|e| self.io(e))?;
            if last[0] != b'\n' {
                line.push(b'\n');
            }
        }
        serde_json::to_writer(&mut line, rec).map_err(|e| JournalError::Invalid(e.to_string()))?;
        line.push(b'\n');
        let written = (&self.file).write(&line);
        match written {
            Ok(n) if n == line.len() => {}
            Ok(n) => {
                let _ = self.file.set_len(len);
                return Err(self.io(io::Error::new(
                    io::ErrorKind::WriteZero,
                    format!("short write ({n} of {} bytes), rolled back", line.len()),
                )));
            }
            Err(e) => {
                let _ = self.file.set_len(len);
                return Err(self.io(e));
            }
        }
        if self.sync
            && let Err(e) = self.file.sync_data()
        {
            let _ = self.file.set_len(len);
            return Err(self.io(e));
        }
        let _ = self.catch_up(&mut cache)?;
        Ok(cache.2 - 1)
    }
}

/// Per-state required fields.
fn validate_shape(rec: &Record) -> Result<(), JournalError> {
    if rec.v != VERSION {
        return Err(JournalError::Invalid(format!("v must be {VERSION}")));
    }
    match &rec.body {
        Body::Task(t) => {
            let missing = |field| JournalError::Missing { task: t.task.clone(), state: t.state, field };
            match t.state {
                TaskState::Halted if t.rc.is_none() => Err(missing("rc")),
                TaskState::Halted if t.detail.as_deref().unwrap_or("").is_empty() => Err(missing("detail")),
                TaskState::Committed if t.sha.as_deref().unwrap_or("").is_empty() => Err(missing("sha")),
                _ => Ok(()),
            }
        }
        Body::Control(c) => {
            if c.verb == Verb::Steer && c.outcome == Outcome::Queued && (c.msg.is_none() || c.id.is_none()) {
                return Err(JournalError::Invalid("a queued steer needs msg and id".into()));
            }
            if matches!(c.verb, Verb::Steer | Verb::Kill) && c.task.is_none() {
                return Err(JournalError::Invalid(format!("{} needs a task", c.verb.as_str())));
            }
            Ok(())
        }
        Body::Run(_) => Ok(()),
    }
}

/// What `reconcile` found.
#[derive(Debug, Clone, Serialize)]
pub struct Reconciliation {
    /// Committed tasks whose sha is not a commit in the repo.
    pub missing_commits: Vec<(TaskId, String)>,
    /// Tasks the journal has in flight (not committed, not halted) with no live process.
    pub in_flight_without_process: Vec<(TaskId, TaskState)>,
    pub bad_lines: Vec<BadLine>,
    pub torn_tail: Option<BadLine>,
}

impl Reconciliation {
    pub fn is_clean(&self) -> bool {
        self.missing_commits.is_empty()
            && self.in_flight_without_process.is_empty()
            && self.bad_lines.is_empty()
            && self.torn_tail.is_none()
    }
}

/// Checks the journal against git and live processes. The journal wins: nothing is rewritten here,
/// the caller decides (the supervisor's recovery re-dispatches, an operator reads the report).
pub fn reconcile(
    view: &RunView,
    commit_exists: impl Fn(&str) -> bool,
    is_running: impl Fn(&TaskId) -> bool,
) -> Reconciliation {
    let mut missing_commits = Vec::new();
    let mut in_flight = Vec::new();
    for (task, t) in &view.tasks {
        match t.state {
            TaskState::Committed => {
                let sha = t.sha.clone().unwrap_or_default();
                if !commit_exists(&sha) {
                    missing_commits.push((task.clone(), sha));
                }
            }
            TaskState::Halted => {}
            s => {
                if !is_running(task) {
                    in_flight.push((task.clone(), s));
                }
            }
        }
    }
    Reconciliation {
        missing_commits,
        in_flight_without_process: in_flight,
        bad_lines: view.bad_lines.clone(),
        torn_tail: view.torn_tail.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            session_id: session.map(str::to_string),
            attempts: 1,
            logfile: None,
            files: None,
            ts: String::new(),
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
        };
        j.append(&steer(Outcome::Queued, "a").into()).unwrap();
        j.append(&steer(Outcome::Queued, "b").into()).unwrap();
        j.append(&steer(Outcome::Applied, "a").into()).unwrap();
        let v = j.view().unwrap();
        assert_eq!(v.pending_steers.len(), 1);
        assert_eq!(v.pending_steers[0].id, "b");
    }
}
