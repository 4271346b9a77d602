//! The scheduler's side of the control verbs (`spec/CONTROL.md`): status, pause/resume, stop, kill
//! and steer, each decided against the journal and journaled — refusals included — before it is
//! answered. Kill answers once the task's pipeline has ended (`finished` in `mod.rs` sends it).

use super::live::LiveCmd;
use super::socket::Envelope;
use super::{PendingKill, Scheduler, kill};
use crate::control::{self, Act, Answer, DEFAULT_BY, Delivery, Refusal, Reply, Shown, Sketch, TaskStatus, True};
use crate::ids::TaskId;
use crate::state::journal::{self, ControlRecord, Outcome, Record, RunEvent, Verb};
use crate::state::liveness;
use std::time::Instant;
use tokio::sync::oneshot;

/// How a kill went: answered now (the task was not running), or signalled (answered when its
/// pipeline ends).
enum Killed {
    Now(Answer),
    Signalled { cancelled: usize },
}

impl Scheduler {
    pub(super) fn journal_control(&self, rec: ControlRecord) -> Result<(), Refusal> {
        self.ctx
            .journal
            .append(&rec.into())
            .map(|_| ())
            .map_err(|e| Refusal::unrecorded(format!("journal append failed, nothing was done: {e}")))
    }

    /// Answers one request (kill: once its task's pipeline has ended).
    pub(super) async fn handle(&mut self, env: Envelope) {
        let Envelope { req, reply, peer } = env;
        let by = journal::clip_by(req.by().filter(|b| !b.is_empty()).unwrap_or(DEFAULT_BY));
        match req.task() {
            Some(t) => {
                tracing::info!(RUN_ID = %self.ctx.run_id, TASK = t.as_str(), VERB = req.verb(), by = %by, "control verb")
            }
            None => tracing::info!(RUN_ID = %self.ctx.run_id, VERB = req.verb(), by = %by, "control verb"),
        }
        self.idle_since = None;
        let Some(reply) = self.idempotent(&req, reply) else { return };
        if req.name().spec().sender == control::Sender::Operator
            && let Some(refusal) = self.sent_from_inside(&req, [peer, req.for_pid])
        {
            tracing::warn!(RUN_ID = %self.ctx.run_id, VERB = req.verb(), "{}", refusal.detail);
            let _ = reply.send(Sketch::of(&req).journal(&self.ctx.journal, refusal).into());
            return;
        }
        let answer: Result<Answer, Refusal> = match &req.act {
            Act::Status(_) => Ok(self.status()),
            Act::Pause(_) => self.pause(true, &by),
            Act::Resume(_) => self.pause(false, &by),
            Act::Stop(_) => self.stop(&by),
            Act::Kill(control::Kill { task }) => match self.kill(task, &by) {
                Ok(Killed::Now(answer)) => Ok(answer),
                Ok(Killed::Signalled { cancelled }) => {
                    let started = Instant::now();
                    let k = PendingKill { reply, started, cancelled };
                    self.kill_replies.entry(task.clone()).or_default().push(k);
                    return; // answered when the pipeline ends
                }
                Err(r) => Err(r),
            },
            Act::Steer(control::Steer { task, msg, interrupt }) => {
                self.steer(task, msg, interrupt.unwrap_or(false), &by)
            }
            Act::Interrupt(control::Interrupt { task }) => self.interrupt_turn(task, &by),
            Act::Retry(control::Retry { task }) => self.retry(task, &by),
            Act::Skip(control::Skip { task, reason }) => self.skip(task, reason, &by),
            Act::End(_) => self.end_session(&by),
            Act::Budget(control::Budget { usd, task }) => self.set_budget(*usd, task.as_ref(), &by),
            Act::Ask(control::Ask { task, tool, input, tool_use_id }) => {
                match self.ask(task, (tool, input), tool_use_id.as_deref(), reply) {
                    Ok(()) => return, // answered now or when decided
                    Err((r, reply)) => {
                        let _ = reply.send(Sketch::of(&req).journal(&self.ctx.journal, r).into());
                        return;
                    }
                }
            }
            Act::Decide(control::Decide { task, id, allow, message }) => {
                let d = super::approvals::Decision { allow: *allow, message: message.clone(), by: by.clone() };
                super::approvals::decide(&self.ctx, task, id, &d).map(|approval| Answer::Decide {
                    detail: format!("{} by {by}", if *allow { "allowed" } else { "denied" }),
                    approval: Box::new(approval),
                    ok: True,
                })
            }
        };
        // A verb that refused by state under the journal lock recorded it there; every other
        // refusal is recorded here, before the answer.
        let answer = answer.map_err(|r| Sketch::of(&req).journal(&self.ctx.journal, r));
        let _ = reply.send(answer.map_or_else(Reply::from, Reply::from));
    }

    /// The refusal of an operator-only verb whose sender (the connecting process, or the one a
    /// relay asks for) descends from a process of this run's: a task's wrapper, gate or setup, or
    /// anything of theirs reparented to the supervisor (a child subreaper, so `setsid` does not
    /// take a task's descendants out from under it). Names the task where the line of descent
    /// says which.
    fn sent_from_inside(&self, req: &control::Request, pids: [Option<u32>; 2]) -> Option<Refusal> {
        // The line of descent is read from /proc: off Linux the rule is not applied (SECURITY.md),
        // rather than refusing every operator.
        if !cfg!(target_os = "linux") {
            return None;
        }
        let me = std::process::id();
        let groups: Vec<(u32, TaskId)> = {
            let running = self.ctx.running.lock().unwrap_or_else(|p| p.into_inner());
            running.iter().filter_map(|(t, p)| Some((u32::try_from(p.pgid?).ok()?, t.clone()))).collect()
        };
        let refuse = |why: String| {
            Some(Refusal::new(
                control::RefusalKind::Foreign,
                format!("{} refused: {why}: the operator decides this, not an agent", req.verb()),
            ))
        };
        for pid in pids.into_iter().flatten() {
            // A sender whose line of descent cannot be followed (it exited after connecting and
            // handed the connection on, say) cannot be shown to be outside: refused.
            let Some(chain) = crate::os::peer::ancestry(pid) else {
                return refuse(format!("its sender (pid {pid}) cannot be placed: it is gone, or /proc does not tell"));
            };
            // Index 0 is the sender itself: the supervisor asking its own socket is not inside.
            let Some(at) = chain.iter().position(|p| *p == me).filter(|at| *at > 0) else { continue };
            let task = chain[..at].iter().find_map(|p| groups.iter().find(|(g, _)| g == p));
            let whose = match task {
                Some((root, t)) => format!("task {t}'s process {root}"),
                None => "a process of the run's (a task's descendant, reparented to the supervisor)".to_string(),
            };
            return refuse(format!("it comes from inside the run (pid {pid} descends from {whose})"));
        }
        None
    }

    fn status(&self) -> Answer {
        let view = self.view().unwrap_or_default();
        let running = self.ctx.running.lock().unwrap_or_else(|p| p.into_inner());
        let tasks = self
            .ctx
            .plan
            .tasks
            .iter()
            .map(|t| {
                let v = view.tasks.get(&t.id);
                let status = TaskStatus {
                    pgid: running.get(&t.id).and_then(|p| p.pgid),
                    running: running.contains_key(&t.id),
                    session_id: v.and_then(|v| v.session_id.clone()),
                    state: v.map(|v| v.state).into(),
                };
                (t.id.clone(), status)
            })
            .collect();
        Answer::Status {
            ok: True,
            paused: self.paused,
            pending_steers: view.pending_steers.len(),
            run: self.ctx.run_id.clone(),
            status: view.status,
            tasks,
        }
    }

    fn pause(&mut self, pause: bool, by: &str) -> Result<Answer, Refusal> {
        let verb = if pause { Verb::Pause } else { Verb::Resume };
        let noop = self.paused == pause;
        self.journal_control(ControlRecord {
            detail: noop.then(|| format!("already {}", if pause { "paused" } else { "running" })),
            ..Record::control(verb, by, if noop { Outcome::Noop } else { Outcome::Accepted })
        })?;
        if !noop {
            let event = if pause { RunEvent::Paused } else { RunEvent::Resumed };
            self.ctx
                .journal
                .append(&Record::run(event, by, None))
                .map_err(|e| Refusal::unrecorded(format!("journal append failed: {e}")))?;
            self.paused = pause;
            if let Some(p) = &self.ctx.liveness {
                let _ = liveness::update(p, &self.ctx.run_id, |l| l.paused = pause);
            }
        }
        let in_flight = self.running_count();
        let detail = match (pause, noop) {
            (true, true) => "already paused".to_string(),
            (false, true) => "not paused".to_string(),
            (true, false) => format!(
                "paused: no new task or turn will be dispatched; {in_flight} running turn(s) continue (an in-flight model call cannot be frozen)"
            ),
            (false, false) => "resumed: dispatching again".to_string(),
        };
        Ok(Answer::Pause { detail, ok: True, paused: self.paused, running: in_flight })
    }

    fn stop(&mut self, by: &str) -> Result<Answer, Refusal> {
        self.journal_control(Record::control(Verb::Stop, by, Outcome::Accepted))?;
        let reason = self.stop_by(by);
        let detail = format!("{reason}: killing {} running task(s); the run ends stopped", self.running_count());
        Ok(Answer::Stop { detail, ok: True })
    }

    /// Ends the run `stopped by <by>` once its running turns, killed now, have ended (each journaled
    /// `halted`, "killed by stopped by …"). Returns the reason.
    pub(super) fn stop_by(&mut self, by: &str) -> String {
        let reason = format!("stopped by {by}");
        self.stopping = Some(reason.clone());
        self.kill_all(&reason);
        reason
    }

    pub(super) fn kill_all(&self, by: &str) {
        let mut running = self.ctx.running.lock().unwrap_or_else(|p| p.into_inner());
        for p in running.values_mut() {
            p.killed_by = Some(by.to_string());
            if let Some(g) = p.pgid {
                tokio::spawn(kill::kill_group(g, self.ctx.kill_grace));
            }
        }
    }

    fn task_of(&self, id: &TaskId) -> Result<crate::state::plan::Task, Refusal> {
        self.ctx
            .plan
            .task(id)
            .cloned()
            .ok_or_else(|| Refusal::unknown_task(format!("run {} has no task {id}", self.ctx.run_id)))
    }

    /// Journals the kill, cancels the task's queued steers (a kill means stop; the kill a steer's
    /// `interrupt` makes goes through `signal_kill` and keeps them) and signals the task's group.
    fn kill(&mut self, id: &TaskId, by: &str) -> Result<Killed, Refusal> {
        let task = self.task_of(id)?;
        let running = self.running(&task.id);
        self.journal_control(ControlRecord {
            task: Some(task.id.clone()),
            detail: (!running).then(|| "task is not running".to_string()),
            ..Record::control(Verb::Kill, by, if running { Outcome::Accepted } else { Outcome::Noop })
        })?;
        let cancelled = self.cancel_steers(&task.id, by)?;
        if running {
            self.signal_kill(&task.id, by);
            return Ok(Killed::Signalled { cancelled });
        }
        let view = self.view().unwrap_or_default();
        let t = view.tasks.get(&task.id);
        let detail = match cancelled {
            0 => "task is not running".to_string(),
            n => format!("task is not running; {n} queued steer(s) cancelled"),
        };
        Ok(Killed::Now(Answer::Kill {
            cancelled_steers: Some(cancelled),
            detail: Some(detail),
            elapsed_ms: None,
            noop: Some(true),
            ok: True,
            rc: t.and_then(|t| t.rc),
            state: t.map(|t| t.state).into(),
            task: task.id,
        }))
    }

    /// Journals each of `task`'s pending steers as `cancelled` by `by`; returns how many.
    fn cancel_steers(&self, task: &TaskId, by: &str) -> Result<usize, Refusal> {
        let view = self.view().map_err(|e| Refusal::unrecorded(format!("journal unreadable: {e}")))?;
        let pending: Vec<&journal::PendingSteer> = view.pending_steers.iter().filter(|s| &s.task == task).collect();
        for s in &pending {
            self.journal_control(ControlRecord {
                task: Some(task.clone()),
                id: Some(s.id.clone()),
                detail: Some(format!("cancelled by the kill of {task}")),
                ..Record::control(Verb::Steer, by, Outcome::Cancelled)
            })?;
        }
        Ok(pending.len())
    }

    /// The answer a waiting kill gets once its task's pipeline has ended.
    pub(super) fn kill_answered(&self, task: &TaskId, k: PendingKill) {
        let PendingKill { reply, started, cancelled } = k;
        let view = self.view().unwrap_or_default();
        let t = view.tasks.get(task);
        let _ = reply.send(Reply::Done(Answer::Kill {
            cancelled_steers: Some(cancelled),
            detail: t.and_then(|s| s.detail.clone()),
            elapsed_ms: Some(started.elapsed().as_millis() as u64),
            noop: None,
            ok: True,
            rc: t.and_then(|s| s.rc),
            state: Shown::from(t.map(|s| s.state)),
            task: task.clone(),
        }));
    }

    pub(super) fn signal_kill(&self, task: &TaskId, by: &str) {
        let mut running = self.ctx.running.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(p) = running.get_mut(task) {
            p.killed_by = Some(by.to_string());
            if let Some(g) = p.pgid {
                tokio::spawn(kill::kill_group(g, self.ctx.kill_grace));
            }
        }
    }

    fn steer(&mut self, id: &TaskId, msg: &str, interrupt: bool, by: &str) -> Result<Answer, Refusal> {
        let task = self.task_of(id)?;
        journal::check_steer_msg(msg).map_err(Refusal::malformed)?;
        // A kill under way means stop: a steer now would be applied right after the halt.
        let killing =
            self.ctx.running.lock().unwrap_or_else(|p| p.into_inner()).get(&task.id).and_then(|p| p.killed_by.clone());
        if let Some(killer) = killing.filter(|k| !k.starts_with("steer ")) {
            let detail = format!("task {id} is being killed ({killer}): steer it once it has halted");
            self.journal_control(ControlRecord {
                task: Some(task.id.clone()),
                msg: Some(msg.to_string()),
                detail: Some(format!("{detail} (409)")),
                ..Record::control(Verb::Steer, by, Outcome::Refused)
            })?;
            return Err(Refusal::by_state(detail).recorded());
        }
        let running = self.running(&task.id);
        let steer_id = uuid::Uuid::new_v4().to_string();
        let refused = |detail: String| ControlRecord {
            task: Some(task.id.clone()),
            msg: Some(msg.to_string()),
            interrupt: Some(interrupt),
            id: Some(steer_id.clone()),
            detail: Some(detail),
            ..Record::control(Verb::Steer, by, Outcome::Refused)
        };
        // Decided and recorded under the journal lock: no window between check and queue.
        let queued = ControlRecord { outcome: Outcome::Queued, detail: None, ..refused(String::new()) };
        let seat = task.adapter.is_verdict_seat();
        let mut why: Option<String> = None;
        let appended = self.ctx.journal.append_checked(&queued.into(), |v| {
            why = journal::SteerRefusal::check(seat, v.tasks.get(&task.id), !running).map(|r| match r {
                journal::SteerRefusal::VerdictSeat => format!("{} (kill is allowed)", r.detail(&task.id)),
                _ => r.detail(&task.id),
            });
            match &why {
                Some(d) => Err(journal::JournalError::Invalid(d.clone())),
                None => Ok(()),
            }
        });
        match (appended, why) {
            (Ok(_), _) => {}
            (Err(_), Some(detail)) => {
                self.journal_control(refused(detail.clone()))?;
                return Err(Refusal::by_state(detail).recorded());
            }
            (Err(e), None) => {
                return Err(Refusal::unrecorded(format!("journal append failed, nothing was queued: {e}")));
            }
        }
        // A live task whose turn runs: the message goes into the turn itself.
        let live = self.ctx.plan.is_live(&task)
            && self.send_live(&task.id, || LiveCmd::Steer {
                id: steer_id.clone(),
                msg: msg.to_string(),
                now: interrupt,
            });
        let detail = if live && interrupt {
            "queued; written into the running turn with priority now (it cuts the turn and starts the next one in the same process)"
        } else if live {
            "queued; written into the running turn (claude takes it at its next tool boundary, or as the next turn in the same process)"
        } else if interrupt && running {
            self.signal_kill(&task.id, &format!("steer {steer_id} (interrupt)"));
            "queued; interrupting the current turn, then resuming the session with the message"
        } else if running {
            "queued: applied at the task's turn boundary (resume of its session with the message)"
        } else if self.paused {
            "queued: the run is paused; applied when it resumes"
        } else {
            "queued: applying now (resume of the task's session with the message)"
        };
        let delivery = Some(if live { Delivery::Live } else { Delivery::Resume });
        Ok(Answer::Steer { delivery, detail: detail.into(), id: steer_id, ok: True, task: task.id })
    }

    /// The MCP permission tool asks for a call of `task`'s running turn. Answered at once when a rule
    /// or the plan decides it, else when the operator does or the plan's timeout denies it.
    #[allow(clippy::result_large_err)]
    fn ask(
        &mut self,
        task: &TaskId,
        call: (&String, &serde_json::Value),
        tool_use_id: Option<&str>,
        reply: oneshot::Sender<Reply>,
    ) -> Result<(), (Refusal, oneshot::Sender<Reply>)> {
        let task = match self.task_of(task) {
            Ok(t) => t,
            Err(r) => return Err((r, reply)),
        };
        if !self.running(&task.id) {
            let detail = format!("task {} has no turn running: nothing to ask for", task.id);
            return Err((Refusal::by_state(detail), reply));
        }
        let id = uuid::Uuid::new_v4().to_string();
        let (tool, input) = call;
        let (decided_tx, decided_rx) = oneshot::channel::<Reply>();
        let waiter = super::approvals::Waiter::Socket { reply: decided_tx };
        match super::approvals::ask(&self.ctx, &task.id, &id, (tool, input), "mcp", waiter) {
            Err(e) => {
                return Err((Refusal::unrecorded(format!("journal append failed, nothing was asked: {e}")), reply));
            }
            Ok(super::approvals::Asked::Now(d)) => {
                let _ = reply.send(Reply::Done(Answer::Ask { decision: d.answer(), id, ok: True }));
            }
            Ok(super::approvals::Asked::Pending) => {
                tracing::info!(RUN_ID = %self.ctx.run_id, TASK = %task.id, APPROVAL = %id, tool_use_id = ?tool_use_id, "waiting for a decision");
                let ctx = self.ctx.clone();
                let timeout = ctx.plan.approval_timeout();
                let task = task.id.clone();
                tokio::spawn(async move {
                    let answer = match tokio::time::timeout(timeout, decided_rx).await {
                        Ok(Ok(answer)) => answer,
                        // Dropped: the supervisor is ending (it answered) or the waiter was replaced.
                        Ok(Err(_)) => return,
                        Err(_) => match super::approvals::time_out(&ctx, &task, &id) {
                            Some(d) => {
                                ctx.approvals.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
                                Reply::Done(Answer::Ask { decision: d.answer(), id, ok: True })
                            }
                            // Decided in the same instant: its answer is on the way.
                            None => return,
                        },
                    };
                    let _ = reply.send(answer);
                });
            }
        }
        Ok(())
    }

    /// The refusal of a retry or skip of a task that is not halted, journaled.
    fn not_halted(&self, verb: Verb, task: &TaskId, by: &str, state: Option<journal::TaskState>) -> Refusal {
        let detail = match state {
            None => format!("task {task} has not run: only a halted task is retried or skipped"),
            Some(s) => format!("task {task} is {}, not halted: only a halted task is retried or skipped", s.as_str()),
        };
        let rec = ControlRecord {
            task: Some(task.clone()),
            detail: Some(format!("{detail} (409)")),
            ..Record::control(verb, by, Outcome::Refused)
        };
        match self.journal_control(rec) {
            Ok(()) => Refusal::by_state(detail).recorded(),
            Err(r) => r,
        }
    }

    /// Re-dispatches a halted task without a message: its session resumed with its prompt (the
    /// earlier attempt carried into the fresh worktree, as a steer's redo), else a fresh start.
    fn retry(&mut self, id: &TaskId, by: &str) -> Result<Answer, Refusal> {
        let task = self.task_of(id)?;
        let view = self.view().map_err(|e| Refusal::unrecorded(format!("journal unreadable: {e}")))?;
        let t = view.tasks.get(&task.id);
        if self.running(&task.id) || t.map(|t| t.state) != Some(journal::TaskState::Halted) {
            let state = if self.running(&task.id) { Some(journal::TaskState::Leased) } else { t.map(|t| t.state) };
            return Err(self.not_halted(Verb::Retry, &task.id, by, state));
        }
        let session = t.and_then(|t| t.session_id.clone());
        self.journal_control(ControlRecord {
            task: Some(task.id.clone()),
            detail: Some(if session.is_some() { "resuming its session" } else { "a fresh start" }.into()),
            ..Record::control(Verb::Retry, by, Outcome::Accepted)
        })?;
        self.broken.remove(&task.id);
        let how = if session.is_some() { "resuming its session" } else { "starting it afresh" };
        let start =
            super::Start::Turn { prompt: task.prompt.clone(), resume: session, note: Some(format!("retry by {by}")) };
        let detail = if self.paused {
            self.resume_at.insert(task.id.clone(), start);
            format!("retry of {id} queued: the run is paused; {how} when it resumes")
        } else {
            self.resume_at.remove(&task.id);
            self.start(&task, start);
            format!("retrying {id}: {how}")
        };
        Ok(Answer::Interrupt { detail, ok: True, task: task.id })
    }

    /// Ends a halted task `skipped` (decided under the journal lock): its wave counts it done, its
    /// unintegrated work is kept.
    fn skip(&mut self, id: &TaskId, reason: &str, by: &str) -> Result<Answer, Refusal> {
        let task = self.task_of(id)?;
        if self.running(&task.id) {
            return Err(self.not_halted(Verb::Skip, &task.id, by, Some(journal::TaskState::Leased)));
        }
        let mut rec = Record::task(&task.id, journal::TaskState::Skipped);
        rec.detail = Some(format!("skipped by {by}: {reason}"));
        let mut found = None;
        let appended = self.ctx.journal.append_checked(&rec.into(), |v| {
            found = Some(v.tasks.get(&task.id).map(|t| t.state));
            match found {
                Some(Some(journal::TaskState::Halted)) => Ok(()),
                _ => Err(journal::JournalError::Invalid("not halted".into())),
            }
        });
        match (appended, found) {
            (Ok(_), _) => {}
            (Err(_), Some(state)) if state != Some(journal::TaskState::Halted) => {
                return Err(self.not_halted(Verb::Skip, &task.id, by, state));
            }
            (Err(e), _) => return Err(Refusal::unrecorded(format!("journal append failed, nothing was skipped: {e}"))),
        }
        self.journal_control(ControlRecord {
            task: Some(task.id.clone()),
            detail: Some(reason.to_string()),
            ..Record::control(Verb::Skip, by, Outcome::Accepted)
        })?;
        self.resume_at.remove(&task.id);
        Ok(Answer::Interrupt { detail: format!("{id} skipped: its wave counts it done"), ok: True, task: task.id })
    }

    /// Ends a session run: its live channel closes once no turn runs; claude exits and the task goes
    /// on to its gate and commit like any task.
    fn end_session(&mut self, by: &str) -> Result<Answer, Refusal> {
        let Some(task) = self.ctx.plan.session.and(self.ctx.plan.tasks.first()).map(|t| t.id.clone()) else {
            let detail = format!(
                "run {} is not a session (harness session start makes one); stop ends any run",
                self.ctx.run_id
            );
            self.journal_control(ControlRecord {
                detail: Some(format!("{detail} (409)")),
                ..Record::control(Verb::End, by, Outcome::Refused)
            })?;
            return Err(Refusal::by_state(detail).recorded());
        };
        let live = self.send_live(&task, || LiveCmd::End { by: by.to_string() });
        self.journal_control(ControlRecord {
            task: Some(task.clone()),
            detail: (!live).then(|| "no live turn runs: nothing to end".to_string()),
            ..Record::control(Verb::End, by, if live { Outcome::Accepted } else { Outcome::Noop })
        })?;
        let detail = if live {
            "ending the session: its channel closes once no turn runs; then the gate and commit follow".to_string()
        } else {
            "no live turn runs: nothing to end".to_string()
        };
        Ok(Answer::Stop { detail, ok: True })
    }

    /// Hands `cmd` to the task's running live-channel driver; false when there is none (no live turn
    /// runs, or it is closing) or its queue is full. Under the `running` lock, which the driver also
    /// takes before it closes: a command handed over is never lost.
    fn send_live(&self, task: &TaskId, cmd: impl FnOnce() -> LiveCmd) -> bool {
        let running = self.ctx.running.lock().unwrap_or_else(|p| p.into_inner());
        running.get(task).and_then(|p| p.live.as_ref()).is_some_and(|tx| tx.try_send(cmd()).is_ok())
    }

    /// Ends a live task's running turn without killing it: claude aborts the turn and keeps its
    /// process and session; the task ends `halted` ("interrupted by …"), so a steer resumes it.
    fn interrupt_turn(&mut self, id: &TaskId, by: &str) -> Result<Answer, Refusal> {
        let task = self.task_of(id)?;
        let refused = |me: &Self, detail: String| -> Result<Answer, Refusal> {
            me.journal_control(ControlRecord {
                task: Some(task.id.clone()),
                detail: Some(format!("{detail} (409)")),
                ..Record::control(Verb::Interrupt, by, Outcome::Refused)
            })?;
            Err(Refusal::by_state(detail).recorded())
        };
        if !self.ctx.plan.is_live(&task) {
            return refused(
                self,
                format!(
                    "task {id} is not live: interrupt needs the live channel (plan field live); kill ends any task"
                ),
            );
        }
        let has_driver = {
            let running = self.ctx.running.lock().unwrap_or_else(|p| p.into_inner());
            running.get(&task.id).is_some_and(|p| p.live.is_some())
        };
        if !has_driver {
            return refused(self, format!("task {id} has no live turn running"));
        }
        self.journal_control(ControlRecord {
            task: Some(task.id.clone()),
            ..Record::control(Verb::Interrupt, by, Outcome::Accepted)
        })?;
        let sent = {
            let mut running = self.ctx.running.lock().unwrap_or_else(|p| p.into_inner());
            match running.get_mut(&task.id) {
                Some(p)
                    if p.live.as_ref().is_some_and(|tx| tx.try_send(LiveCmd::Interrupt { by: by.into() }).is_ok()) =>
                {
                    p.interrupted_by = Some(by.to_string());
                    true
                }
                _ => false,
            }
        };
        if !sent {
            let detail = "the turn ended before the interrupt reached it".to_string();
            self.journal_control(ControlRecord {
                task: Some(task.id.clone()),
                detail: Some(detail.clone()),
                ..Record::control(Verb::Interrupt, by, Outcome::Noop)
            })?;
            return Ok(Answer::Interrupt { detail, ok: True, task: task.id });
        }
        Ok(Answer::Interrupt {
            detail: format!(
                "interrupting the running turn; the task ends halted (interrupted by {by}) with its session whole: a steer resumes it"
            ),
            ok: True,
            task: task.id,
        })
    }
}
