//! What a refused request leaves in the run's journal (`spec/CONTROL.md`, "What each refusal
//! leaves"): a `refused` control record holding as much of the request as could be read, and the
//! one function every side uses to write it before it answers.

use super::{Act, Name, Refusal, Request};
use crate::ids::TaskId;
use crate::state::journal::{self, ControlRecord, Journal, Verb};
use std::path::Path;

/// Who a verb is journaled as when the request names nobody.
pub const DEFAULT_BY: &str = "socket";

/// What the record of a refused request says it was.
pub struct Sketch {
    verb: Verb,
    task: Option<TaskId>,
    msg: Option<String>,
    by: String,
    /// For a request the journal has no verb for: what it was (`status`, `decide`, an unknown verb).
    named: Option<String>,
}

impl Sketch {
    /// A request of which nothing could be read (an over-long line).
    pub fn unread() -> Sketch {
        Sketch { verb: Verb::Other, task: None, msg: None, by: DEFAULT_BY.into(), named: None }
    }

    /// A request read in full.
    pub fn of(req: &Request) -> Sketch {
        let verb = req.name().spec().journaled;
        let msg = match &req.act {
            Act::Steer(s) => Some(s.msg.clone()),
            _ => None,
        };
        let by = journal::clip_by(req.by().filter(|b| !b.is_empty()).unwrap_or(DEFAULT_BY));
        Sketch { verb, task: req.task().cloned(), msg, by, named: (verb == Verb::Other).then(|| req.verb().into()) }
    }

    /// A line that is not a valid request (or was not read as one): its verb, task and `by` where
    /// they can be made out. `by_uid` overrides what the line claims (another uid's line).
    pub fn of_line(line: &[u8], by_uid: Option<&str>) -> Sketch {
        let v: serde_json::Value = serde_json::from_slice(line).unwrap_or_default();
        let s = |k: &str| v.get(k).and_then(|x| x.as_str());
        let verb = s("verb").and_then(Name::parse).map_or(Verb::Other, |n| n.spec().journaled);
        let by = by_uid.map(str::to_string).or_else(|| s("by").filter(|b| !b.is_empty()).map(journal::clip_by));
        Sketch {
            verb,
            task: s("task").and_then(|t| TaskId::parse(t).ok()),
            msg: s("msg").map(str::to_string).filter(|_| verb == Verb::Steer),
            by: by.unwrap_or_else(|| DEFAULT_BY.into()),
            named: s("verb").filter(|_| verb == Verb::Other).map(|n| n.chars().take(40).collect()),
        }
    }

    /// The refusal record, with the refusal's detail (and status) in it.
    pub fn record(self, r: &Refusal) -> ControlRecord {
        let status = r.kind.status();
        let detail = match &self.named {
            Some(n) => format!("{n}: {} ({status})", r.detail),
            None => format!("{} ({status})", r.detail),
        };
        crate::state::audit::record(self.verb, self.task, self.msg.as_deref(), &self.by, &detail)
    }

    /// Journals the refusal `r` of this request unless it is on the record already, then gives it
    /// back to be answered; when the record cannot be written the answer is an `Unrecorded` that
    /// says so (the refusal stands: nothing was done).
    pub fn journal(self, journal: &Journal, r: Refusal) -> Refusal {
        self.journal_with(r, |rec, detail| crate::state::audit::on_record(journal, rec, detail))
    }

    /// `journal` for the journal at `path` (opened for it).
    pub fn journal_at(self, path: &Path, r: Refusal) -> Refusal {
        self.journal_with(r, |rec, detail| crate::state::audit::on_record_at(path, rec, detail))
    }

    fn journal_with(
        self,
        r: Refusal,
        write: impl FnOnce(ControlRecord, &str) -> Result<(), crate::state::audit::Unrecorded>,
    ) -> Refusal {
        if !r.needs_record() {
            return r;
        }
        let rec = self.record(&r);
        match write(rec, &r.detail) {
            Ok(()) => r.recorded(),
            Err(e) => Refusal::unrecorded(e.to_string()),
        }
    }
}
