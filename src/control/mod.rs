//! The control protocol (`spec/CONTROL.md`, control/v1) as types shared by every side of it: the
//! supervisor that serves it (`supervisor/socket.rs`), the API and the CLI that send it, the MCP
//! permission tool. One table names each verb once (`VERBS` below: its wire name, whether it takes a
//! task, who may send it, how its refusal is journaled); each verb has one payload struct; the
//! answers and refusals are in `reply`, the refusal records in `record`, the client in `client`.
//! This module decides nothing about run state.

mod client;
mod record;
mod reply;

pub use client::{ClientError, is_live, request};
pub use record::{DEFAULT_BY, Sketch};
pub use reply::{Answer, Delivery, False, Refusal, RefusalKind, Reply, Shown, TaskStatus, True};

use crate::ids::TaskId;
use crate::state::journal;
use serde::{Deserialize, Serialize};

/// Longest request line accepted.
pub const MAX_REQUEST: usize = 256 * 1024;

/// Whether a verb names a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Takes {
    No,
    Task,
    /// The run's when absent (budget).
    OptionalTask,
}

/// Who may send a verb.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sender {
    /// The person (or UI) driving the run, never the run's own tasks: refused to a peer that
    /// descends from one of the run's processes (`decide`, `budget`, `resume`, `retry`, `skip`: what
    /// the operator withholds, an agent may not grant itself).
    Operator,
    /// The agent's own tools from inside its turn (the MCP permission tool's `ask`).
    Agent,
    /// The person, or an agent's tools (`kill`, `steer`, `pause`…: it may stop or steer work, its
    /// own included; `status` reads only).
    Anyone,
}

/// One row of the verb table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spec {
    /// The verb on the wire (`"verb":"steer"`).
    pub name: &'static str,
    pub task: Takes,
    pub sender: Sender,
    /// The `verb` of the journal's control records about it (`other` for verbs the journal names by
    /// their detail).
    pub journaled: journal::Verb,
    /// The wire fields it takes besides `verb` and `by`.
    pub fields: &'static [&'static str],
}

/// The verb table: each verb once, as `Name` (its name), `Act` (the verb with its payload) and its
/// `Spec`. A new verb is one row here, its payload struct (`Payload`), and the arms the compiler
/// then asks for (the scheduler's handler; the API route if it has one).
macro_rules! verbs {
    ($( $(#[$doc:meta])* $v:ident => $name:literal, $task:ident, $sender:ident, $journaled:ident, [$($f:literal),*]; )*) => {
        /// A verb's name.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Name { $($v),* }

        impl Name {
            /// Every verb, in the table's order.
            pub const ALL: &'static [Name] = &[$(Name::$v),*];

            /// The verb's row in the table.
            pub const fn spec(self) -> Spec {
                match self {
                    $(Name::$v => Spec {
                        name: $name,
                        task: Takes::$task,
                        sender: Sender::$sender,
                        journaled: journal::Verb::$journaled,
                        fields: &[$($f),*],
                    }),*
                }
            }
        }

        /// What a request asks: the verb with its payload.
        #[derive(Debug, Clone, PartialEq)]
        pub enum Act { $( $(#[$doc])* $v($v) ),* }

        impl Act {
            pub fn name(&self) -> Name {
                match self { $(Act::$v(_) => Name::$v),* }
            }

            /// The task the verb names, if any.
            pub fn task(&self) -> Option<&TaskId> {
                match self { $(Act::$v(p) => p.task()),* }
            }

            fn read(name: Name, w: &Wire) -> Result<Act, String> {
                Ok(match name { $(Name::$v => Act::$v(<$v as Payload>::read(w)?)),* })
            }

            fn write(self, w: &mut Wire) {
                match self { $(Act::$v(p) => p.write(w)),* }
            }
        }
    };
}

verbs! {
    /// Ends a task's turn by killing its process group.
    Kill => "kill", Task, Anyone, Kill, ["task"];
    /// A message for a task: into its running turn, or its next one.
    Steer => "steer", Task, Anyone, Steer, ["task", "msg", "interrupt"];
    /// A live task's running turn is aborted; the process and session live on.
    Interrupt => "interrupt", Task, Anyone, Interrupt, ["task"];
    Pause => "pause", No, Anyone, Pause, [];
    Resume => "resume", No, Operator, Resume, [];
    Stop => "stop", No, Anyone, Stop, [];
    /// Where the run stands.
    Status => "status", No, Anyone, Other, [];
    /// A tool call of the task's running turn asks for permission (the MCP permission tool);
    /// answered with the decision once there is one.
    Ask => "ask", Task, Agent, Other, ["task", "tool", "input", "tool_use_id"];
    /// The operator's decision on an asked call.
    Decide => "decide", Task, Operator, Other, ["task", "id", "decision", "message"];
    /// Ends a session run.
    End => "end", No, Anyone, End, [];
    /// Sets the run's budget, or a task's, in US dollars; a run paused by a budget its spend no
    /// longer reaches resumes.
    Budget => "budget", OptionalTask, Operator, Budget, ["usd", "task"];
    /// Re-dispatches a halted task: its session resumed with its prompt, else a fresh start.
    Retry => "retry", Task, Operator, Retry, ["task"];
    /// Ends a halted task `skipped`, for a reason: its wave counts it done.
    Skip => "skip", Task, Operator, Skip, ["task", "reason"];
}

impl Name {
    /// The verb on the wire.
    pub const fn as_str(self) -> &'static str {
        self.spec().name
    }

    /// The verb named `s` on the wire.
    pub fn parse(s: &str) -> Option<Name> {
        Name::ALL.iter().copied().find(|n| n.as_str() == s)
    }
}

impl std::fmt::Display for Name {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A control request: who asked, and what. On the wire it is one flat object,
/// `{"verb":"steer","task":"T1","msg":"…","interrupt":false,"by":"api"}` (read and written through
/// `Wire`, so the bytes are what the spec says). `by` is journaled; absent means `socket`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "Wire", into = "Wire")]
pub struct Request {
    pub act: Act,
    pub by: Option<String>,
    /// The process a relay (the API) asks for: its own client's pid, judged by the operator-only
    /// rule as the relay's own is (`for_pid` on the wire; absent: nobody else's).
    pub for_pid: Option<u32>,
    /// The client's `Idempotency-Key` (`idempotency_key` on the wire, added): a repeat of it is
    /// answered with the first answer, never carried out again.
    pub idempotency_key: Option<String>,
}

impl Request {
    pub fn new(act: Act, by: Option<String>) -> Request {
        Request { act, by, for_pid: None, idempotency_key: None }
    }

    /// The request with the client's `Idempotency-Key`.
    pub fn keyed(self, key: Option<String>) -> Request {
        Request { idempotency_key: key, ..self }
    }

    /// The request relayed for the process `pid` (the API's peer, where it could tell it).
    pub fn relayed_for(self, pid: Option<u32>) -> Request {
        Request { for_pid: pid, ..self }
    }

    pub fn name(&self) -> Name {
        self.act.name()
    }

    /// The verb's name on the wire.
    pub fn verb(&self) -> &'static str {
        self.name().as_str()
    }

    /// Who asked, as given (`None`: the socket's default applies).
    pub fn by(&self) -> Option<&str> {
        self.by.as_deref()
    }

    pub fn task(&self) -> Option<&TaskId> {
        self.act.task()
    }
}

/// The status (and every other payload-less verb).
macro_rules! bare {
    ($($v:ident),*) => {$(
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
        pub struct $v;
        impl Payload for $v {
            fn read(_: &Wire) -> Result<$v, String> {
                Ok($v)
            }
            fn write(self, _: &mut Wire) {}
        }
    )*};
}
bare!(Status, Pause, Resume, Stop, End);

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kill {
    pub task: TaskId,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interrupt {
    pub task: TaskId,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Steer {
    pub task: TaskId,
    pub msg: String,
    /// Cut the running turn for it (absent on the wire: false).
    pub interrupt: Option<bool>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Ask {
    pub task: TaskId,
    pub tool: String,
    pub input: serde_json::Value,
    pub tool_use_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decide {
    pub task: TaskId,
    /// The approval's id.
    pub id: String,
    pub allow: bool,
    pub message: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retry {
    pub task: TaskId,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skip {
    pub task: TaskId,
    /// Why (journaled in the task's `skipped` record).
    pub reason: String,
}

impl Payload for Retry {
    fn read(w: &Wire) -> Result<Retry, String> {
        Ok(Retry { task: w.task()? })
    }
    fn write(self, w: &mut Wire) {
        w.task = Some(self.task.to_string());
    }
    fn task(&self) -> Option<&TaskId> {
        Some(&self.task)
    }
}

/// Longest skip reason, in bytes.
pub const MAX_REASON: usize = 4096;

impl Payload for Skip {
    fn read(w: &Wire) -> Result<Skip, String> {
        let reason = w.reason.clone().filter(|r| !r.trim().is_empty()).ok_or("skip needs a reason")?;
        if reason.len() > MAX_REASON {
            return Err(format!("skip: the reason is longer than {MAX_REASON} bytes"));
        }
        Ok(Skip { task: w.task()?, reason })
    }
    fn write(self, w: &mut Wire) {
        w.task = Some(self.task.to_string());
        w.reason = Some(self.reason);
    }
    fn task(&self) -> Option<&TaskId> {
        Some(&self.task)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Budget {
    pub usd: f64,
    /// The task whose budget it is; absent: the run's.
    pub task: Option<TaskId>,
}

/// A verb's payload: how it is read from, and written to, the flat wire object.
trait Payload: Sized {
    fn read(w: &Wire) -> Result<Self, String>;
    fn write(self, w: &mut Wire);
    fn task(&self) -> Option<&TaskId> {
        None
    }
}

impl Payload for Kill {
    fn read(w: &Wire) -> Result<Kill, String> {
        Ok(Kill { task: w.task()? })
    }
    fn write(self, w: &mut Wire) {
        w.task = Some(self.task.to_string());
    }
    fn task(&self) -> Option<&TaskId> {
        Some(&self.task)
    }
}

impl Payload for Interrupt {
    fn read(w: &Wire) -> Result<Interrupt, String> {
        Ok(Interrupt { task: w.task()? })
    }
    fn write(self, w: &mut Wire) {
        w.task = Some(self.task.to_string());
    }
    fn task(&self) -> Option<&TaskId> {
        Some(&self.task)
    }
}

impl Payload for Steer {
    fn read(w: &Wire) -> Result<Steer, String> {
        Ok(Steer { task: w.task()?, msg: w.msg.clone().unwrap_or_default(), interrupt: w.interrupt })
    }
    fn write(self, w: &mut Wire) {
        w.task = Some(self.task.to_string());
        w.msg = Some(self.msg);
        w.interrupt = self.interrupt;
    }
    fn task(&self) -> Option<&TaskId> {
        Some(&self.task)
    }
}

impl Payload for Ask {
    fn read(w: &Wire) -> Result<Ask, String> {
        let task = w.task()?;
        let tool = w.tool.clone().filter(|t| !t.is_empty()).ok_or("ask needs a tool")?;
        let input = w.input.clone().unwrap_or(serde_json::Value::Object(Default::default()));
        Ok(Ask { task, tool, input, tool_use_id: w.tool_use_id.clone() })
    }
    fn write(self, w: &mut Wire) {
        w.task = Some(self.task.to_string());
        w.tool = Some(self.tool);
        w.input = Some(self.input);
        w.tool_use_id = self.tool_use_id;
    }
    fn task(&self) -> Option<&TaskId> {
        Some(&self.task)
    }
}

impl Payload for Decide {
    fn read(w: &Wire) -> Result<Decide, String> {
        let id = w.id.clone().ok_or("decide needs the approval's id")?;
        let allow = match w.decision.as_deref() {
            Some("allow") => true,
            Some("deny") => false,
            other => return Err(format!("decision must be \"allow\" or \"deny\", got {other:?}")),
        };
        Ok(Decide { task: w.task()?, id, allow, message: w.message.clone() })
    }
    fn write(self, w: &mut Wire) {
        w.task = Some(self.task.to_string());
        w.id = Some(self.id);
        w.decision = Some(if self.allow { "allow" } else { "deny" }.into());
        w.message = self.message;
    }
    fn task(&self) -> Option<&TaskId> {
        Some(&self.task)
    }
}

impl Payload for Budget {
    fn read(w: &Wire) -> Result<Budget, String> {
        let usd = w.usd.filter(|u| u.is_finite() && *u > 0.0).ok_or("budget needs usd: a positive number")?;
        let task = match &w.task {
            Some(raw) => Some(TaskId::parse(raw).map_err(|e| e.to_string())?),
            None => None,
        };
        Ok(Budget { usd, task })
    }
    fn write(self, w: &mut Wire) {
        w.usd = Some(self.usd);
        w.task = self.task.map(|t| t.to_string());
    }
    fn task(&self) -> Option<&TaskId> {
        self.task.as_ref()
    }
}

/// The flat wire object of a request. Every field but `verb` is optional on the wire; which ones a
/// verb takes is its `Spec::fields`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    for_pid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    idempotency_key: Option<String>,
}

impl Wire {
    /// The fields given besides `verb` and `by`.
    fn given(&self) -> [(&'static str, bool); 11] {
        [
            ("task", self.task.is_some()),
            ("msg", self.msg.is_some()),
            ("interrupt", self.interrupt.is_some()),
            ("tool", self.tool.is_some()),
            ("input", self.input.is_some()),
            ("tool_use_id", self.tool_use_id.is_some()),
            ("id", self.id.is_some()),
            ("decision", self.decision.is_some()),
            ("message", self.message.is_some()),
            ("usd", self.usd.is_some()),
            ("reason", self.reason.is_some()),
        ]
    }

    fn task(&self) -> Result<TaskId, String> {
        let raw = self.task.as_deref().ok_or_else(|| format!("{} needs a task", self.verb))?;
        TaskId::parse(raw).map_err(|e| e.to_string())
    }
}

impl TryFrom<Wire> for Request {
    type Error = String;

    fn try_from(mut w: Wire) -> Result<Request, String> {
        w.verb = w.verb.chars().take(40).collect();
        let Some(name) = Name::parse(&w.verb) else {
            let names: Vec<&str> = Name::ALL.iter().map(|n| n.as_str()).collect();
            let (last, rest) = names.split_last().expect("the table has verbs");
            return Err(format!("unknown verb {:?}: expected {} or {last}", w.verb, rest.join(", ")));
        };
        let fields = name.spec().fields;
        if let Some((field, _)) = w.given().iter().find(|(f, set)| *set && !fields.contains(f)) {
            return Err(format!("field {field} does not apply to {name}"));
        }
        if let Some(k) = &w.idempotency_key {
            journal::check_idempotency_key(k)?;
        }
        Ok(Request { act: Act::read(name, &w)?, by: w.by, for_pid: w.for_pid, idempotency_key: w.idempotency_key })
    }
}

impl From<Request> for Wire {
    fn from(r: Request) -> Wire {
        let mut w = Wire {
            verb: r.verb().to_string(),
            by: r.by,
            for_pid: r.for_pid,
            idempotency_key: r.idempotency_key,
            ..Wire::default()
        };
        r.act.write(&mut w);
        w
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_names_each_verb_once_and_parses_back() {
        let mut seen = std::collections::HashSet::new();
        for n in Name::ALL {
            assert!(seen.insert(n.as_str()), "{n} twice");
            assert_eq!(Name::parse(n.as_str()), Some(*n));
            let takes_task = n.spec().fields.contains(&"task");
            assert_eq!(takes_task, n.spec().task != Takes::No, "{n}: its task column and fields disagree");
        }
        assert_eq!(Name::parse("explode"), None);
    }

    #[test]
    fn a_request_reads_and_writes_its_flat_object() {
        for line in [
            r#"{"verb":"steer","task":"T1","msg":"hi","interrupt":true,"by":"api"}"#,
            r#"{"verb":"budget","task":"A","usd":2.5}"#,
            r#"{"verb":"decide","task":"A","id":"x","decision":"deny","message":"no"}"#,
            r#"{"verb":"ask","task":"A","tool":"Bash","input":{"command":"ls"},"tool_use_id":"t"}"#,
            r#"{"verb":"status"}"#,
        ] {
            let r: Request = serde_json::from_str(line).unwrap();
            assert_eq!(serde_json::to_string(&r).unwrap(), line);
        }
    }

    #[test]
    fn a_wrong_field_or_verb_is_named() {
        let bad = |l: &str| serde_json::from_str::<Request>(l).unwrap_err().to_string();
        assert!(bad(r#"{"verb":"kill","task":"A","msg":"x"}"#).contains("field msg does not apply to kill"));
        assert!(bad(r#"{"verb":"kill"}"#).contains("kill needs a task"));
        let unknown = bad(r#"{"verb":"explode"}"#);
        assert!(unknown.contains("unknown verb \"explode\": expected kill, steer, interrupt, pause, resume, stop, status, ask, decide, end, budget, retry or skip"), "{unknown}");
    }
}
