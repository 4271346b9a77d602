//! What the supervisor answers on its control socket: one `Reply` per request, an `Answer` (one
//! shape per verb) or a `Refusal` with its kind. Field order is the wire's (alphabetical).

use crate::ids::{RunId, TaskId};
use crate::state::journal::{RunStatus, TaskState};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

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
        /// The task's queued steers this kill cancelled (a kill means stop: none is applied).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cancelled_steers: Option<usize>,
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

/// Why a verb was not carried out, as the kinds of refusal the spec lists. On the wire it is the
/// HTTP status the API answers with (`"status":409`), the numbers below.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "u16", into = "u16")]
pub enum RefusalKind {
    /// 400: the request is malformed (its verb, a field, a value).
    Malformed,
    /// 403: the peer is not the supervisor's uid.
    Foreign,
    /// 404: the run has no such task (or approval).
    UnknownTask,
    /// 409: refused by the state of the run or task (finished, not live, not running…).
    State,
    /// 500: the journal could not be written (or read), so nothing was done.
    Unrecorded,
    /// A status this side does not know (a newer supervisor's), kept as it came.
    Other(u16),
}

impl From<u16> for RefusalKind {
    fn from(n: u16) -> RefusalKind {
        match n {
            400 => RefusalKind::Malformed,
            403 => RefusalKind::Foreign,
            404 => RefusalKind::UnknownTask,
            409 => RefusalKind::State,
            500 => RefusalKind::Unrecorded,
            n => RefusalKind::Other(n),
        }
    }
}

impl From<RefusalKind> for u16 {
    fn from(k: RefusalKind) -> u16 {
        k.status()
    }
}

impl RefusalKind {
    /// The HTTP status it is on the wire.
    pub fn status(self) -> u16 {
        match self {
            RefusalKind::Malformed => 400,
            RefusalKind::Foreign => 403,
            RefusalKind::UnknownTask => 404,
            RefusalKind::State => 409,
            RefusalKind::Unrecorded => 500,
            RefusalKind::Other(n) => n,
        }
    }
}

/// A verb not carried out: `{"detail":"…","ok":false,"status":409}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refusal {
    pub detail: String,
    pub ok: False,
    #[serde(rename = "status")]
    pub kind: RefusalKind,
    /// Already in the run's journal (the verb recorded it itself, under the journal's lock); whoever
    /// answers records every other refusal but an `Unrecorded` one. Not on the wire.
    #[serde(skip)]
    pub recorded: bool,
}

impl Refusal {
    pub fn new(kind: RefusalKind, detail: impl Into<String>) -> Refusal {
        Refusal { detail: detail.into(), ok: False, kind, recorded: false }
    }

    pub fn malformed(detail: impl Into<String>) -> Refusal {
        Refusal::new(RefusalKind::Malformed, detail)
    }

    pub fn unknown_task(detail: impl Into<String>) -> Refusal {
        Refusal::new(RefusalKind::UnknownTask, detail)
    }

    pub fn by_state(detail: impl Into<String>) -> Refusal {
        Refusal::new(RefusalKind::State, detail)
    }

    pub fn unrecorded(detail: impl Into<String>) -> Refusal {
        Refusal::new(RefusalKind::Unrecorded, detail)
    }

    /// The same refusal, marked as on the record already.
    pub fn recorded(self) -> Refusal {
        Refusal { recorded: true, ..self }
    }

    /// Whether whoever answers it still has to journal it.
    pub fn needs_record(&self) -> bool {
        !self.recorded && self.kind != RefusalKind::Unrecorded
    }
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
