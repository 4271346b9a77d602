//! The control socket (`spec/CONTROL.md`): newline-delimited JSON over a Unix socket, one request →
//! one response. The listener checks the peer's uid (`SO_PEERCRED`), parses and bounds each request,
//! and hands it to the scheduler, which alone owns run state; this module holds no state.
//! Also the client side, used by the CLI and the API.

use crate::ids::{RunId, TaskId};
use crate::state::journal::{RunStatus, TaskState};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, oneshot};

/// Longest request line accepted.
pub const MAX_REQUEST: usize = 256 * 1024;

/// A control request, one variant per verb. On the wire (`spec/CONTROL.md`) it is one flat object,
/// `{"verb":"steer","task":"T1","msg":"…","interrupt":false,"by":"api"}`: the enum is read from and
/// written as that object (see `Wire`), so the bytes are what they always were. `by` says who asked
/// (journaled); absent means `socket`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "Wire", into = "Wire")]
pub enum Request {
    Status {
        by: Option<String>,
    },
    Kill {
        task: TaskId,
        by: Option<String>,
    },
    Steer {
        task: TaskId,
        msg: String,
        interrupt: Option<bool>,
        by: Option<String>,
    },
    Pause {
        by: Option<String>,
    },
    Resume {
        by: Option<String>,
    },
    Stop {
        by: Option<String>,
    },
    /// A live task's running turn is aborted; the process and session live on (added).
    Interrupt {
        task: TaskId,
        by: Option<String>,
    },
    /// A tool call of `task`'s running turn asks for permission (the MCP permission tool); answered
    /// with the decision once there is one.
    Ask {
        task: TaskId,
        tool: String,
        input: serde_json::Value,
        tool_use_id: Option<String>,
        by: Option<String>,
    },
    /// Ends a session run.
    End {
        by: Option<String>,
    },
    /// Sets the run's budget, or `task`'s, to `usd` US dollars; a run paused by a budget its spend
    /// no longer reaches resumes.
    Budget {
        usd: f64,
        task: Option<TaskId>,
        by: Option<String>,
    },
    /// The operator's decision on an asked call.
    Decide {
        task: TaskId,
        id: String,
        allow: bool,
        message: Option<String>,
        by: Option<String>,
    },
}

impl Request {
    /// The verb's name on the wire.
    pub fn verb(&self) -> &'static str {
        match self {
            Request::Status { .. } => "status",
            Request::Kill { .. } => "kill",
            Request::Steer { .. } => "steer",
            Request::Pause { .. } => "pause",
            Request::Resume { .. } => "resume",
            Request::Stop { .. } => "stop",
            Request::Interrupt { .. } => "interrupt",
            Request::Ask { .. } => "ask",
            Request::Decide { .. } => "decide",
            Request::End { .. } => "end",
            Request::Budget { .. } => "budget",
        }
    }

    /// Who asked, as given (`None`: the socket's default applies).
    pub fn by(&self) -> Option<&str> {
        match self {
            Request::Status { by }
            | Request::Kill { by, .. }
            | Request::Steer { by, .. }
            | Request::Pause { by }
            | Request::Resume { by }
            | Request::Stop { by }
            | Request::Interrupt { by, .. }
            | Request::Ask { by, .. }
            | Request::Decide { by, .. }
            | Request::End { by }
            | Request::Budget { by, .. } => by.as_deref(),
        }
    }

    /// The task the verb names, for kill and steer.
    pub fn task(&self) -> Option<&TaskId> {
        match self {
            Request::Kill { task, .. }
            | Request::Steer { task, .. }
            | Request::Interrupt { task, .. }
            | Request::Ask { task, .. }
            | Request::Decide { task, .. } => Some(task),
            Request::Budget { task, .. } => task.as_ref(),
            _ => None,
        }
    }
}

/// The flat wire object of a request. Every field but `verb` is optional on the wire; which ones a
/// verb takes is decided when it becomes a `Request`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Wire {
    verb: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    task: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    msg: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    interrupt: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    by: Option<String>,
    // `ask` carries the call, `decide` the decision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tool: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    input: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tool_use_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    decision: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    usd: Option<f64>,
}

impl TryFrom<Wire> for Request {
    type Error = String;

    fn try_from(w: Wire) -> Result<Request, String> {
        let verb: String = w.verb.chars().take(40).collect();
        let only = |allowed: &[&str]| -> Result<(), String> {
            let given = [
                ("task", w.task.is_some()),
                ("msg", w.msg.is_some()),
                ("interrupt", w.interrupt.is_some()),
                ("tool", w.tool.is_some()),
                ("input", w.input.is_some()),
                ("tool_use_id", w.tool_use_id.is_some()),
                ("id", w.id.is_some()),
                ("decision", w.decision.is_some()),
                ("message", w.message.is_some()),
                ("usd", w.usd.is_some()),
            ];
            match given.iter().find(|(name, set)| *set && !allowed.contains(name)) {
                Some((name, _)) => Err(format!("field {name} does not apply to {verb}")),
                None => Ok(()),
            }
        };
        let task = || -> Result<TaskId, String> {
            let raw = w.task.as_deref().ok_or_else(|| format!("{verb} needs a task"))?;
            TaskId::parse(raw).map_err(|e| e.to_string())
        };
        let by = w.by.clone();
        Ok(match verb.as_str() {
            "status" => only(&[]).map(|_| Request::Status { by })?,
            "pause" => only(&[]).map(|_| Request::Pause { by })?,
            "resume" => only(&[]).map(|_| Request::Resume { by })?,
            "stop" => only(&[]).map(|_| Request::Stop { by })?,
            "end" => only(&[]).map(|_| Request::End { by })?,
            "budget" => {
                only(&["task", "usd"])?;
                let usd = w.usd.filter(|u| u.is_finite() && *u > 0.0).ok_or("budget needs usd: a positive number")?;
                let task = match &w.task {
                    Some(raw) => Some(TaskId::parse(raw).map_err(|e| e.to_string())?),
                    None => None,
                };
                Request::Budget { usd, task, by }
            }
            "kill" => {
                only(&["task"])?;
                Request::Kill { task: task()?, by }
            }
            "interrupt" => {
                only(&["task"])?;
                Request::Interrupt { task: task()?, by }
            }
            "steer" => {
                only(&["task", "msg", "interrupt"])?;
                Request::Steer { task: task()?, msg: w.msg.clone().unwrap_or_default(), interrupt: w.interrupt, by }
            }
            "ask" => {
                only(&["task", "tool", "input", "tool_use_id"])?;
                let tool = w.tool.clone().filter(|t| !t.is_empty()).ok_or("ask needs a tool")?;
                let input = w.input.clone().unwrap_or(serde_json::Value::Object(Default::default()));
                Request::Ask { task: task()?, tool, input, tool_use_id: w.tool_use_id.clone(), by }
            }
            "decide" => {
                only(&["task", "id", "decision", "message"])?;
                let id = w.id.clone().ok_or("decide needs the approval's id")?;
                let allow = match w.decision.as_deref() {
                    Some("allow") => true,
                    Some("deny") => false,
                    other => return Err(format!("decision must be \"allow\" or \"deny\", got {other:?}")),
                };
                Request::Decide { task: task()?, id, allow, message: w.message.clone(), by }
            }
            other => {
                return Err(format!(
                    "unknown verb {other:?}: expected kill, steer, interrupt, pause, resume, stop, status, ask, decide, end or budget"
                ));
            }
        })
    }
}

impl From<Request> for Wire {
    fn from(r: Request) -> Wire {
        let verb = r.verb().to_string();
        let mut w = Wire {
            verb,
            task: None,
            msg: None,
            interrupt: None,
            by: None,
            tool: None,
            input: None,
            tool_use_id: None,
            id: None,
            decision: None,
            message: None,
            usd: None,
        };
        match r {
            Request::Status { by }
            | Request::Pause { by }
            | Request::Resume { by }
            | Request::Stop { by }
            | Request::End { by } => w.by = by,
            Request::Budget { usd, task, by } => {
                w.usd = Some(usd);
                w.task = task.map(|t| t.to_string());
                w.by = by;
            }
            Request::Kill { task, by } | Request::Interrupt { task, by } => {
                w.task = Some(task.to_string());
                w.by = by;
            }
            Request::Steer { task, msg, interrupt, by } => {
                w.task = Some(task.to_string());
                w.msg = Some(msg);
                w.interrupt = interrupt;
                w.by = by;
            }
            Request::Ask { task, tool, input, tool_use_id, by } => {
                w.task = Some(task.to_string());
                w.tool = Some(tool);
                w.input = Some(input);
                w.tool_use_id = tool_use_id;
                w.by = by;
            }
            Request::Decide { task, id, allow, message, by } => {
                w.task = Some(task.to_string());
                w.id = Some(id);
                w.decision = Some(if allow { "allow" } else { "deny" }.into());
                w.message = message;
                w.by = by;
            }
        }
        w
    }
}

/// A JSON `true` that is nothing else (the `ok` of an answer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct True;

/// A JSON `false` that is nothing else (the `ok` of a refusal).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct False;

macro_rules! json_bool {
    ($t:ident, $v:literal) => {
        impl Serialize for $t {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_bool($v)
            }
        }
        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<$t, D::Error> {
                match bool::deserialize(d)? {
                    $v => Ok($t),
                    _ => Err(serde::de::Error::custom(concat!("expected ", stringify!($v)))),
                }
            }
        }
    };
}
json_bool!(True, true);
json_bool!(False, false);

/// A task as `status` reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskStatus {
    pub pgid: Option<i32>,
    pub running: bool,
    pub session_id: Option<String>,
    pub state: Shown,
}

/// A task state as answers show it: the journal's, or `pending` before the task's first record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Shown {
    Pending,
    #[serde(untagged)]
    State(TaskState),
}

impl From<Option<TaskState>> for Shown {
    fn from(s: Option<TaskState>) -> Shown {
        s.map_or(Shown::Pending, Shown::State)
    }
}

/// What a verb answers when it was carried out. Fields are in the order the wire has always had
/// (alphabetical); which variant a reply is follows from the verb that was sent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Answer {
    Status {
        ok: True,
        paused: bool,
        pending_steers: usize,
        run: RunId,
        status: RunStatus,
        tasks: BTreeMap<TaskId, TaskStatus>,
    },
    Steer {
        /// How the message reaches the engine: `live` (written into
        /// the running turn) or `resume` (a resume of the session at the turn boundary).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        delivery: Option<Delivery>,
        detail: String,
        id: String,
        ok: True,
        task: TaskId,
    },
    Kill {
        detail: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        elapsed_ms: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        noop: Option<bool>,
        ok: True,
        rc: Option<i32>,
        state: Shown,
        task: TaskId,
    },
    Pause {
        detail: String,
        ok: True,
        paused: bool,
        running: usize,
    },
    /// A budget set; `spent_usd` is the run's spend so far.
    Budget {
        budget_usd: f64,
        detail: String,
        ok: True,
        paused: bool,
        spent_usd: Option<f64>,
    },
    /// The decision on an asked call, as claude's permission answer (`{"behavior":"allow"}` or
    /// `{"behavior":"deny","message":…}`). Before `Stop`.
    Ask {
        decision: serde_json::Value,
        id: String,
        ok: True,
    },
    /// A decision recorded.
    Decide {
        approval: Box<crate::state::journal::ApprovalView>,
        detail: String,
        ok: True,
    },
    /// Before `Stop`, whose fields it has too.
    Interrupt {
        detail: String,
        ok: True,
        task: TaskId,
    },
    Stop {
        detail: String,
        ok: True,
    },
}

/// How a steer reaches the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Delivery {
    /// Written into the running turn over the live channel.
    Live,
    /// Applied at the turn boundary by resuming the session with it.
    Resume,
}

/// Why a verb was not carried out: `status` is the HTTP status the API answers with (400 malformed,
/// 403 foreign uid, 404 unknown task, 409 refused by state, 500 the journal could not be written).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refusal {
    pub detail: String,
    pub ok: False,
    pub status: u16,
}

/// One answer line: `{"ok":true,…}` or `{"ok":false,"status":…,"detail":"…"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Reply {
    Refused(Refusal),
    Done(Answer),
}

impl From<Answer> for Reply {
    fn from(a: Answer) -> Reply {
        Reply::Done(a)
    }
}

impl From<Refusal> for Reply {
    fn from(r: Refusal) -> Reply {
        Reply::Refused(r)
    }
}

pub fn refuse(status: u16, detail: impl Into<String>) -> Refusal {
    Refusal { detail: detail.into(), ok: False, status }
}

/// A request on its way to the scheduler, with where to send the answer.
pub struct Envelope {
    pub req: Request,
    pub reply: oneshot::Sender<Reply>,
}

/// Requests read off the socket and not yet answered on it. The supervisor waits (bounded) for them
/// before it exits, so an answer the scheduler gave — to `stop`, say, right before the run ends —
/// reaches its client instead of dying with the process.
#[derive(Clone, Default)]
pub struct InFlight(Arc<AtomicUsize>);

struct InFlightGuard(Arc<AtomicUsize>);

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl InFlight {
    fn enter(&self) -> InFlightGuard {
        self.0.fetch_add(1, Ordering::SeqCst);
        InFlightGuard(self.0.clone())
    }

    /// Waits until every request read has been answered, at most `max`.
    pub async fn drained(&self, max: Duration) {
        let end = tokio::time::Instant::now() + max;
        while self.0.load(Ordering::SeqCst) > 0 && tokio::time::Instant::now() < end {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
}

/// Accepts connections until the scheduler's receiver is dropped. `journal` is the run's: a request
/// refused here, before the scheduler sees it, is recorded in it before the answer.
pub async fn serve(
    listener: UnixListener,
    to_scheduler: mpsc::Sender<Envelope>,
    inflight: InFlight,
    journal: Arc<Path>,
) {
    let me = nix::unistd::geteuid().as_raw();
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "control socket accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        if to_scheduler.is_closed() {
            return;
        }
        let tx = to_scheduler.clone();
        let inflight = inflight.clone();
        let journal = journal.clone();
        tokio::spawn(async move {
            if let Err(e) = connection(stream, me, tx, inflight, journal).await {
                tracing::debug!(error = %e, "control connection ended");
            }
        });
    }
}

/// How long a connection of another uid may take to send its request before it is refused unread.
const FOREIGN_READ: Duration = Duration::from_secs(1);

async fn connection(
    stream: UnixStream,
    me: u32,
    tx: mpsc::Sender<Envelope>,
    inflight: InFlight,
    journal: Arc<Path>,
) -> std::io::Result<()> {
    let peer = stream.peer_cred()?;
    let (r, mut w) = stream.into_split();
    let mut r = BufReader::new(r);
    let mut line = Vec::new();
    if peer.uid() != me {
        // Read (bounded, briefly) only to say on the record what was asked; nothing is carried out.
        let mut limited = (&mut r).take(MAX_REQUEST as u64);
        let _ = tokio::time::timeout(FOREIGN_READ, limited.read_until(b'\n', &mut line)).await;
        let detail = format!("peer uid {} is not the supervisor's uid {me}", peer.uid());
        tracing::warn!(PEER_UID = peer.uid(), "refused control connection from another uid");
        let resp =
            on_record(&journal, refusal_of(&line, Some(&format!("uid {}", peer.uid()))), refuse(403, detail)).await;
        w.write_all(&line_of(&resp.into())).await?;
        return Ok(());
    }
    loop {
        line.clear();
        let n = (&mut r).take(MAX_REQUEST as u64 + 1).read_until(b'\n', &mut line).await?;
        if n == 0 {
            return Ok(());
        }
        // Counted from here until the answer is written (or the write fails).
        let _answering = inflight.enter();
        if line.len() > MAX_REQUEST {
            let refusal = refuse(400, format!("request longer than {MAX_REQUEST} bytes"));
            let resp = on_record(&journal, Sketch::other(None), refusal).await;
            w.write_all(&line_of(&resp.into())).await?;
            return Ok(());
        }
        let resp: Reply = match serde_json::from_slice::<Request>(&line) {
            Err(e) => {
                let refusal = refuse(400, format!("request is not a control/v1 object: {e}"));
                on_record(&journal, refusal_of(&line, None), refusal).await.into()
            }
            Ok(req) => {
                let sketch = Sketch::of(&req);
                let (reply, rx) = oneshot::channel();
                if tx.send(Envelope { req, reply }).await.is_err() {
                    let refusal = refuse(409, "run not live: the supervisor is shutting down");
                    on_record(&journal, sketch, refusal).await.into()
                } else {
                    // The scheduler answers every request it received, refusals included, on the
                    // record; a dropped answer means it ended in between (its exit answers what
                    // it had not read, and records that).
                    rx.await.unwrap_or_else(|_| refuse(409, "run not live: the supervisor has ended").into())
                }
            }
        };
        w.write_all(&line_of(&resp)).await?;
    }
}

/// What the record of a refused request says it was: as much of the request as could be read.
pub struct Sketch {
    verb: crate::state::journal::Verb,
    task: Option<TaskId>,
    msg: Option<String>,
    by: String,
    /// For a request that is not one of the journaled verbs: what it was (`status`).
    named: Option<String>,
}

impl Sketch {
    fn other(by: Option<&str>) -> Sketch {
        Sketch {
            verb: crate::state::journal::Verb::Other,
            task: None,
            msg: None,
            by: by.unwrap_or(DEFAULT_BY).into(),
            named: None,
        }
    }

    /// A request read in full.
    pub fn of(req: &Request) -> Sketch {
        use crate::state::journal::Verb;
        let verb = match req {
            Request::Status { .. } => Verb::Other,
            Request::Kill { .. } => Verb::Kill,
            Request::Steer { .. } => Verb::Steer,
            Request::Pause { .. } => Verb::Pause,
            Request::Resume { .. } => Verb::Resume,
            Request::Stop { .. } => Verb::Stop,
            Request::Interrupt { .. } => Verb::Interrupt,
            Request::Ask { .. } | Request::Decide { .. } => Verb::Other,
            Request::End { .. } => Verb::End,
            Request::Budget { .. } => Verb::Budget,
        };
        let msg = match req {
            Request::Steer { msg, .. } => Some(msg.clone()),
            _ => None,
        };
        let by = crate::state::journal::clip_by(req.by().filter(|b| !b.is_empty()).unwrap_or(DEFAULT_BY));
        Sketch { verb, task: req.task().cloned(), msg, by, named: (verb == Verb::Other).then(|| req.verb().into()) }
    }

    /// The refusal record, with the refusal's detail (and status) in it.
    pub fn record(self, r: &Refusal) -> crate::state::journal::ControlRecord {
        let detail = match &self.named {
            Some(n) => format!("{n}: {} ({})", r.detail, r.status),
            None => format!("{} ({})", r.detail, r.status),
        };
        crate::state::audit::record(self.verb, self.task, self.msg.as_deref(), &self.by, &detail)
    }
}

/// Who a verb is journaled as when the request names nobody.
pub const DEFAULT_BY: &str = "socket";

/// The sketch of a line that is not a valid request (or was not read as one): its verb, task and
/// `by` where they can be made out. `by_uid` overrides what the line claims (another uid's line).
fn refusal_of(line: &[u8], by_uid: Option<&str>) -> Sketch {
    use crate::state::journal::Verb;
    let v: serde_json::Value = serde_json::from_slice(line).unwrap_or_default();
    let s = |k: &str| v.get(k).and_then(|x| x.as_str());
    let verb = match s("verb") {
        Some("steer") => Verb::Steer,
        Some("kill") => Verb::Kill,
        Some("pause") => Verb::Pause,
        Some("resume") => Verb::Resume,
        Some("stop") => Verb::Stop,
        Some("interrupt") => Verb::Interrupt,
        Some("end") => Verb::End,
        Some("budget") => Verb::Budget,
        _ => Verb::Other,
    };
    let by =
        by_uid.map(str::to_string).or_else(|| s("by").filter(|b| !b.is_empty()).map(crate::state::journal::clip_by));
    Sketch {
        verb,
        task: s("task").and_then(|t| TaskId::parse(t).ok()),
        msg: s("msg").map(str::to_string).filter(|_| verb == Verb::Steer),
        by: by.unwrap_or_else(|| DEFAULT_BY.into()),
        named: s("verb").filter(|_| verb == Verb::Other).map(|n| n.chars().take(40).collect()),
    }
}

/// Records a refusal in the run's journal, then gives it back to be answered; when the record
/// cannot be written the answer is a 500 that says so (the refusal stands: nothing was done).
async fn on_record(journal: &Arc<Path>, sketch: Sketch, refusal: Refusal) -> Refusal {
    let rec = sketch.record(&refusal);
    let path = journal.clone();
    let written = tokio::task::spawn_blocking(move || crate::state::audit::refused(&path, rec)).await;
    match written {
        Ok(Ok(())) => refusal,
        Ok(Err(e)) => refuse(500, format!("{}; and this refusal could not be journaled: {e}", refusal.detail)),
        Err(e) => refuse(500, format!("{}; and this refusal could not be journaled: {e}", refusal.detail)),
    }
}

/// One reply as its wire line.
fn line_of(r: &Reply) -> Vec<u8> {
    let mut v = serde_json::to_vec(r).expect("a Reply serializes");
    v.push(b'\n');
    v
}

/// Why a client request did not get an answer.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("no supervisor at {path}: {source}")]
    Connect { path: String, source: std::io::Error },
    #[error("supervisor at {path}: {detail}")]
    Io { path: String, detail: String },
    /// Delivered, but no answer came within the budget: the supervisor may have acted.
    #[error("no answer from the supervisor at {path} within {} s", after.as_secs())]
    NoAnswer { path: String, after: Duration },
}

/// Sends one request to the supervisor socket at `path` and returns its response.
pub async fn request(path: &Path, req: &Request, timeout: Duration) -> Result<Reply, ClientError> {
    let p = path.display().to_string();
    let mut s = tokio::time::timeout(crate::timeouts::CONTROL_CONNECT, UnixStream::connect(path))
        .await
        .map_err(|_| ClientError::Connect { path: p.clone(), source: std::io::ErrorKind::TimedOut.into() })?
        .map_err(|source| ClientError::Connect { path: p.clone(), source })?;
    let io = |e: std::io::Error| ClientError::Io { path: p.clone(), detail: e.to_string() };
    let mut line = serde_json::to_vec(req).expect("a Request serializes");
    line.push(b'\n');
    s.write_all(&line).await.map_err(io)?;
    let mut r = BufReader::new(s);
    let mut buf = String::new();
    match tokio::time::timeout(timeout, r.read_line(&mut buf)).await {
        Err(_) => Err(ClientError::NoAnswer { path: p, after: timeout }),
        Ok(Err(e)) => Err(io(e)),
        Ok(Ok(0)) => Err(ClientError::Io { path: p, detail: "closed without an answer".into() }),
        Ok(Ok(_)) => serde_json::from_str(&buf)
            .map_err(|e| ClientError::Io { path: p, detail: format!("answer is not a control/v1 reply: {e}") }),
    }
}

/// True when something accepts connections at `path`.
pub fn is_live(path: &Path) -> bool {
    std::os::unix::net::UnixStream::connect(path).is_ok()
}
