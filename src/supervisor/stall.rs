//! The stall watch: a running turn whose log has not grown for the plan's `stall_after` gets a
//! `stalled` attention record, once per stall (the log has to grow again before the next one); with
//! `on_stall: "kill"` the turn is killed too (`halted`, `killed by stall`). A turn waiting on an
//! operator's approval is not stalled, nor a session between turns (its idle limit governs). When
//! a stalled turn's log grows again, an `unstalled` record says the stall is over.

use super::Scheduler;
use crate::ids::TaskId;
use crate::state::journal::{AttentionRecord, Body, Record};
use crate::state::plan::OnStall;
use std::time::{Duration, SystemTime};

/// How often the watch looks: a tenth of `stall_after`, between 100 ms and 5 s.
pub(super) fn period(stall_after: Duration) -> Duration {
    (stall_after / 10).clamp(Duration::from_millis(100), Duration::from_secs(5))
}

impl Scheduler {
    pub(super) fn check_stalls(&mut self) {
        if self.ctx.plan.session.is_some() {
            return;
        }
        let after = self.ctx.plan.stall_after();
        let turns: Vec<(TaskId, std::path::PathBuf, SystemTime)> = self
            .ctx
            .running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter_map(|(id, p)| p.turn.clone().map(|(log, since)| (id.clone(), log, since)))
            .collect();
        let asking: Vec<TaskId> =
            self.ctx.approvals.lock().unwrap_or_else(|p| p.into_inner()).values().map(|h| h.task.clone()).collect();
        let now = SystemTime::now();
        for (task, log, since) in turns {
            if asking.contains(&task) {
                continue;
            }
            let last = std::fs::metadata(&log).and_then(|m| m.modified()).map_or(since, |m| m.max(since));
            let Ok(idle) = now.duration_since(last) else { continue };
            if let Some(&was) = self.stalled.get(&task)
                && last > was
            {
                // Output again: the stall is over (a UI's "stalled now" clears).
                self.stalled.remove(&task);
                let quiet = last.duration_since(was).unwrap_or_default().as_secs();
                self.mark(&task, "unstalled", quiet, format!("output again after {quiet} s without"));
            }
            if idle < after || self.stalled.get(&task) == Some(&last) {
                continue;
            }
            self.stalled.insert(task.clone(), last);
            let kill = self.ctx.plan.on_stall == Some(OnStall::Kill);
            let detail = format!(
                "no output for {} s (stall_after {} s){}",
                idle.as_secs(),
                after.as_secs(),
                if kill { ": killing the turn" } else { "" }
            );
            tracing::warn!(RUN_ID = %self.ctx.run_id, TASK = %task, "stalled: {detail}");
            if !self.mark(&task, "stalled", idle.as_secs(), detail) {
                continue;
            }
            if kill {
                self.signal_kill(&task, "stall");
            }
        }
    }

    /// Journals an attention record (`stalled`, `unstalled`); false when it could not be.
    fn mark(&self, task: &TaskId, attention: &str, idle_s: u64, detail: String) -> bool {
        let rec = Record::new(Body::Attention(AttentionRecord {
            attention: attention.into(),
            task: task.clone(),
            idle_s: Some(idle_s),
            detail: Some(detail),
        }));
        match self.ctx.journal.append(&rec) {
            Ok(_) => true,
            Err(e) => {
                tracing::error!(RUN_ID = %self.ctx.run_id, TASK = %task, error = %e, "cannot journal {attention}");
                false
            }
        }
    }
}
