//! A run's story as a person reads it: one plain line per journal record as it is appended — a
//! task's state change in the views' words (`running`, `waiting for gate`, `done`…), a run's
//! start and end, a verb, an approval, an attention mark. What a batch `harness run` and the demo
//! print on stdout (tty or not); `--json` prints the journal's own lines instead.

use crate::os::tail::{LineIndex, Tail};
use crate::state::journal::{Body, Record};
use crate::views;
use std::path::Path;
use std::time::Duration;

/// Follows one journal from its first line.
pub struct Progress {
    tail: Tail,
    json: bool,
}

impl Progress {
    /// `None` when the journal cannot be opened (nothing to follow).
    pub fn of(journal: &Path, json: bool) -> Option<Progress> {
        Tail::at_line(&LineIndex::default(), journal, 1).ok().map(|tail| Progress { tail, json })
    }

    /// Prints what was appended since the last call.
    pub fn drain(&mut self) {
        while let Ok((lines, _)) = self.tail.read_available(1 << 16) {
            if lines.is_empty() {
                return;
            }
            for (_, line) in lines {
                if self.json {
                    crate::term::out(String::from_utf8_lossy(&line).trim_end());
                } else if let Ok(rec) = crate::state::journal::parse_line(&line)
                    && let Some(l) = line_of(&rec)
                {
                    crate::term::out(l.trim_end());
                }
            }
        }
    }

    /// Prints each record as it is appended, until the task is dropped (aborted).
    pub async fn follow(mut self) {
        loop {
            self.drain();
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// One record as a line: `17:45:02  greet   running  (claude)`; none for the bookkeeping of an
/// `Idempotency-Key` (the verb's own record says what happened).
pub fn line_of(rec: &Record) -> Option<String> {
    let t = crate::os::localtime::clock(&rec.ts);
    let why = |d: &Option<String>| d.as_ref().map(|d| format!("  ({d})")).unwrap_or_default();
    Some(match &rec.body {
        Body::Idempotency(_) => return None,
        Body::Run(r) => format!("{t}  run {}{}", format!("{:?}", r.event).to_lowercase(), why(&r.detail)),
        Body::Task(k) => {
            // A turn ended for a steer's interrupt is halted on the record, but nothing failed.
            let halt = k.detail.as_deref().map(|d| crate::state::views::halt_reason(k.rc, d));
            let state = views::task_label(k.state.into(), halt, None);
            let sha = k.sha.as_deref().map(|s| format!(" {}", &s[..s.len().min(10)])).unwrap_or_default();
            format!("{t}  {:<12} {state}{sha}{}", k.task.as_str(), why(&k.detail))
        }
        Body::Control(c) => format!(
            "{t}  {:<12} {} by {}{} → {}",
            c.task.as_ref().map(|x| x.as_str()).unwrap_or("run"),
            c.verb.as_str(),
            c.by,
            c.msg.as_ref().map(|m| format!(" \"{}\"", m.chars().take(80).collect::<String>())).unwrap_or_default(),
            format!("{:?}", c.outcome).to_lowercase()
        ),
        Body::Approval(a) => format!(
            "{t}  {:<12} approval {} {}{}",
            a.task.as_str(),
            a.tool.as_deref().unwrap_or(""),
            a.state.as_str(),
            a.by.as_ref().map(|b| format!(" by {b}")).unwrap_or_default()
        ),
        Body::Attention(a) => format!("{t}  {:<12} {}{}", a.task.as_str(), a.attention, why(&a.detail)),
    })
}
