//! Rate limits: a turn that ends on one (`crate::engine::ratelimit`) halts its task (`rate_limited: …`);
//! unless the plan says `on_rate_limit: "halt"`, the run pauses (journaled as paused by
//! `rate_limit`, with `resume_at`: when the engine said the limit lifts, else a back-off of 60 s
//! doubling per consecutive limit, at most 1 h) and the supervisor resumes it by itself then,
//! re-dispatching the halted tasks by resume of their sessions. A restarted supervisor re-arms the
//! wake-up from the journal.

use super::Scheduler;
use super::pipeline::Start;
use crate::ids::TaskId;
use crate::state::journal::{Body, Record, RunEvent, TaskState};
use crate::state::plan::OnRateLimit;
use std::time::{Duration, SystemTime};
use tokio::time::Instant;

/// The message a rate-limited task is resumed with.
const CONTINUE: &str = "Your previous turn was cut off by a rate limit. Continue where you left off.";

/// The back-off without a reset time: 60 s, doubled per consecutive limit, at most 1 h.
fn backoff(consecutive: u32) -> Duration {
    Duration::from_secs(60u64.saturating_mul(1 << consecutive.min(6)).min(3600))
}

impl Scheduler {
    pub(super) fn rate_limited(&mut self, task: &TaskId, resets_at: Option<u64>) {
        if self.ctx.plan.on_rate_limit == Some(OnRateLimit::Halt) || self.stopping.is_some() {
            return;
        }
        let now = SystemTime::now();
        let delay = match resets_at {
            // Clamped where it was read (at most 24 h ahead); checked all the same.
            Some(t) => std::time::UNIX_EPOCH
                .checked_add(Duration::from_secs(t))
                .and_then(|at| at.duration_since(now).ok())
                .unwrap_or_default()
                .clamp(Duration::from_secs(1), Duration::from_secs(24 * 3600)),
            None => backoff(self.rate_limits),
        };
        self.rate_limits += 1;
        let wake = Instant::now() + delay;
        let at = humantime::format_rfc3339_seconds(now + delay).to_string();
        match &mut self.rate_wake {
            // Another task of the run hit it meanwhile: one pause, the later wake-up.
            Some((w, tasks)) => {
                *w = (*w).max(wake);
                tasks.push(task.clone());
                return;
            }
            None => self.rate_wake = Some((wake, vec![task.clone()])),
        }
        if self.paused {
            return; // paused already (by an operator or a budget): it stays so; the task waits
        }
        let detail = format!("rate limited (task {task}): resuming at {at}");
        tracing::warn!(RUN_ID = %self.ctx.run_id, TASK = %task, "{detail}");
        let mut rec = Record::run(RunEvent::Paused, "rate_limit", Some(detail));
        if let Body::Run(r) = &mut rec.body {
            r.resume_at = Some(at);
        }
        if let Err(e) = self.ctx.journal.append(&rec) {
            tracing::error!(RUN_ID = %self.ctx.run_id, error = %e, "cannot journal the rate limit's pause; not pausing");
            return;
        }
        self.paused = true;
        if let Some(p) = &self.ctx.liveness {
            let _ = crate::state::liveness::update(p, &self.ctx.run_id, |l| l.paused = true);
        }
    }

    /// When the wake-up is due (`None`: none armed).
    pub(super) fn rate_wake_at(&self) -> Option<Instant> {
        self.rate_wake.as_ref().map(|(w, _)| *w)
    }

    /// The limit has lifted: resume a run paused by it, and re-dispatch the tasks it halted (those
    /// still halted by it) by resume.
    pub(super) fn rate_lifted(&mut self) {
        let Some((_, tasks)) = self.rate_wake.take() else { return };
        let Ok(view) = self.view() else { return };
        if self.paused && view.pause.as_ref().is_some_and(|(by, _)| by == "rate_limit") {
            let rec = Record::run(RunEvent::Resumed, "rate_limit", Some("the rate limit has lifted".into()));
            if let Err(e) = self.ctx.journal.append(&rec) {
                tracing::error!(RUN_ID = %self.ctx.run_id, error = %e, "cannot journal the resume after a rate limit");
                return;
            }
            self.paused = false;
            if let Some(p) = &self.ctx.liveness {
                let _ = crate::state::liveness::update(p, &self.ctx.run_id, |l| l.paused = false);
            }
        }
        for task in tasks {
            let Some(t) = view.tasks.get(&task) else { continue };
            if t.state == TaskState::Halted && t.detail.as_deref().is_some_and(|d| d.starts_with("rate_limited")) {
                tracing::info!(RUN_ID = %self.ctx.run_id, TASK = %task, "re-dispatching after the rate limit");
                let start = Start::Turn {
                    prompt: CONTINUE.into(),
                    resume: t.session_id.clone(),
                    note: Some("after a rate limit".into()),
                };
                self.resume_at.insert(task, start);
            }
        }
    }

    /// After a restart: a run paused by a rate limit gets its wake-up again.
    pub(super) fn rearm_rate_limit(&mut self) {
        let Ok(view) = self.view() else { return };
        if !self.paused || view.pause.as_ref().is_none_or(|(by, _)| by != "rate_limit") {
            return;
        }
        let at = view.resume_at.as_deref().and_then(|s| humantime::parse_rfc3339_weak(s).ok());
        let delay = at.and_then(|t| t.duration_since(SystemTime::now()).ok()).unwrap_or_default();
        let tasks: Vec<TaskId> = view
            .tasks
            .iter()
            .filter(|(_, t)| {
                t.state == TaskState::Halted && t.detail.as_deref().is_some_and(|d| d.starts_with("rate_limited"))
            })
            .map(|(id, _)| id.clone())
            .collect();
        self.rate_wake = Some((Instant::now() + delay, tasks));
    }
}
