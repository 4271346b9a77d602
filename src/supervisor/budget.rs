//! Budgets that pause: after each task's pipeline ends, the run's spend (its tasks' logs, read by
//! `crate::state::spend`) is checked against the run's budget and each task's; the first one reached pauses
//! the run (journaled as paused by `budget`, with spent and budget), so nothing more is dispatched.
//! Running turns finish unless the plan says `on_budget: "kill"`. The `budget` verb sets a budget
//! (journaled) and resumes a run its spend no longer holds.

use super::Scheduler;
use crate::control::{Answer, Refusal, True};
use crate::engine::usage::Usage;
use crate::ids::TaskId;
use crate::state::journal::{ControlRecord, Outcome, Record, RunEvent, RunView, Verb};
use crate::state::plan::OnBudget;
use crate::state::spend::Crossed;

impl Scheduler {
    /// Each planned task's spend and the run's.
    fn spend(&mut self, view: &RunView) -> (Usage, Vec<(TaskId, Usage)>) {
        let ctx = self.ctx.clone();
        crate::state::spend::run_spend(&ctx.plan, view, &ctx.pointer, |adapter, log| self.tallies.usage(adapter, log))
    }

    /// The first budget the spend has reached, with the budgets in force (the verb's over the plan's).
    fn crossed(&mut self, view: &RunView) -> (Option<Crossed>, Usage) {
        let (run, per_task) = self.spend(view);
        let run_budget = view.budget_usd.or(self.ctx.plan.budget_usd);
        let tasks: Vec<(TaskId, &Usage, Option<f64>)> = per_task
            .iter()
            .map(|(id, u)| {
                let b =
                    view.task_budgets.get(id).copied().or_else(|| self.ctx.plan.task(id).and_then(|t| t.budget_usd));
                (id.clone(), u, b)
            })
            .collect();
        (crate::state::spend::crossed((&run, run_budget), &tasks), run)
    }

    /// At a pipeline's end: pauses the run when a budget is reached (and kills the running turns
    /// when the plan says so).
    pub(super) fn check_budget(&mut self) {
        if self.paused || self.stopping.is_some() {
            return;
        }
        let no_budget =
            self.ctx.plan.budget_usd.is_none() && self.ctx.plan.tasks.iter().all(|t| t.budget_usd.is_none());
        let Ok(view) = self.view() else { return };
        if no_budget && view.budget_usd.is_none() && view.task_budgets.is_empty() {
            return;
        }
        let (Some(c), _) = self.crossed(&view) else { return };
        let detail = c.detail();
        tracing::warn!(RUN_ID = %self.ctx.run_id, "{detail}: pausing the run");
        if let Err(e) = self.ctx.journal.append(&Record::run(RunEvent::Paused, "budget", Some(detail))) {
            tracing::error!(RUN_ID = %self.ctx.run_id, error = %e, "cannot journal the budget's pause; not pausing");
            return;
        }
        self.paused = true;
        if let Some(p) = &self.ctx.liveness {
            let _ = crate::state::liveness::update(p, &self.ctx.run_id, |l| l.paused = true);
        }
        if self.ctx.plan.on_budget == Some(OnBudget::Kill) {
            self.kill_all("budget");
        }
    }

    /// The `budget` verb: sets the run's budget (or `task`'s), journaled; resumes a run paused by a
    /// budget once no budget is reached any more.
    pub(super) fn set_budget(&mut self, usd: f64, task: Option<&TaskId>, by: &str) -> Result<Answer, Refusal> {
        // An unknown task is a 404, journaled as refused by the verb handler.
        if let Some(t) = task
            && self.ctx.plan.task(t).is_none()
        {
            return Err(Refusal::unknown_task(format!("run {} has no task {t}", self.ctx.run_id)));
        }
        self.journal_control(ControlRecord {
            task: task.cloned(),
            usd: Some(usd),
            ..Record::control(Verb::Budget, by, Outcome::Accepted)
        })?;
        let view = self.view().map_err(|e| Refusal::unrecorded(format!("journal unreadable: {e}")))?;
        let (still, spent) = self.crossed(&view);
        let whose = task.map_or("the run's".to_string(), |t| format!("task {t}'s"));
        let by_budget = view.pause.as_ref().is_some_and(|(who, _)| who == "budget");
        let detail = match (&still, self.paused && by_budget) {
            (None, true) => {
                self.ctx
                    .journal
                    .append(&Record::run(RunEvent::Resumed, by, Some(format!("{whose} budget set to ${usd}"))))
                    .map_err(|e| Refusal::unrecorded(format!("journal append failed: {e}")))?;
                self.paused = false;
                if let Some(p) = &self.ctx.liveness {
                    let _ = crate::state::liveness::update(p, &self.ctx.run_id, |l| l.paused = false);
                }
                format!("{whose} budget is ${usd}: resumed, dispatching again")
            }
            (Some(c), true) => format!("{whose} budget is ${usd}, but the run stays paused: {}", c.detail()),
            (Some(c), false) => format!(
                "{whose} budget is ${usd}; already reached ({}): the run pauses at the next turn's end",
                c.detail()
            ),
            (None, false) => format!("{whose} budget is ${usd}"),
        };
        Ok(Answer::Budget { budget_usd: usd, detail, ok: True, paused: self.paused, spent_usd: spent.cost_usd })
    }
}
