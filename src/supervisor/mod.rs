//! The supervisor of one run: replays the journal (crash recovery), runs the waves (up to
//! `max_parallel` task pipelines at a time, fail-closed on a halted task), owns the control socket and
//! acts on its verbs at safe points. It is the only writer of its run's task states, and every verb
//! leaves a `control` record before it is answered. It serves no HTTP.
//!
//! One scheduler task owns all state; pipelines (`pipeline.rs`) and connections (`control.rs`) talk to
//! it through channels, so there is no lock around run state.

pub mod control;
pub mod kill;
mod pipeline;

use crate::home::Home;
use crate::ids::{RunId, TaskId};
use crate::journal::{self, ControlRecord, Journal, Outcome, Record, RunEvent, RunStatus, RunView, TaskState, Verb};
use crate::liveness;
use crate::plan::Plan;
use crate::registry;
use control::{Envelope, Request, Response, refuse};
use pipeline::{Ctx, End, Proc, Start};
use serde_json::json;
use std::collections::HashMap;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;

/// How a supervisor is run.
pub struct Options {
    /// TERM → KILL grace when killing a task's process group.
    pub kill_grace: Duration,
    /// How long to stay up with nothing to do (blocked by halted tasks, or paused) before ending the
    /// run `failed`.
    pub linger: Duration,
    /// Wall-clock bound of one agent turn (the wrapper's `--timeout`).
    pub turn_timeout_s: u64,
    /// Bound of a gate command.
    pub gate_timeout: Duration,
    /// Batch mode (`harness run` without `--supervised`): no socket, no liveness; a halted task ends
    /// the run at once since nobody can steer it.
    pub batch: bool,
    /// The control socket, when the service manager passed one (socket activation).
    pub listener: Option<std::os::unix::net::UnixListener>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            kill_grace: Duration::from_secs(5),
            linger: Duration::from_secs(30 * 60),
            turn_timeout_s: 3600,
            gate_timeout: Duration::from_secs(1800),
            batch: false,
            listener: None,
        }
    }
}

/// How `supervise` ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    Finished,
    Failed(String),
    /// SIGTERM: running turns were killed and left `leased` in the journal, so the next supervisor
    /// re-dispatches them.
    Interrupted,
    /// The journal says the run is already over.
    AlreadyOver(String),
}

#[derive(Debug, thiserror::Error)]
pub enum SupervisorError {
    #[error("{0}")]
    Setup(String),
}

fn setup<E: std::fmt::Display>(what: &str) -> impl FnOnce(E) -> SupervisorError + '_ {
    move |e| SupervisorError::Setup(format!("{what}: {e}"))
}

/// Holds the run's supervisor lock (`<runstateDir>/<slug>.supervisor.lock`) for the process's life.
struct RunLock(#[allow(dead_code)] std::fs::File);

fn lock_run(path: &std::path::Path, run: &RunId) -> Result<RunLock, SupervisorError> {
    use std::io::{Read, Seek, Write};
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)
        .map_err(setup("cannot open the supervisor lock"))?;
    // SAFETY: flock on a valid fd we own.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let mut pid = String::new();
        let _ = f.read_to_string(&mut pid);
        return Err(SupervisorError::Setup(format!(
            "run {run} already has a live supervisor (pid {}); refusing to start a second one",
            pid.trim()
        )));
    }
    let _ = f.set_len(0);
    let _ = f.seek(std::io::SeekFrom::Start(0));
    let _ = write!(f, "{}", std::process::id());
    Ok(RunLock(f))
}

/// Binds `$HARNESS_HOME/sock/<runId>.sock` (0600 under a 0700 dir). A stale socket (nobody
/// answering) is replaced; a live one means another supervisor and is refused.
pub fn bind_socket(home: &Home, run: &RunId) -> Result<std::os::unix::net::UnixListener, SupervisorError> {
    use std::os::unix::fs::PermissionsExt;
    home.ensure().map_err(setup("cannot prepare HARNESS_HOME"))?;
    let path = home.checked_socket_path(run).map_err(|e| SupervisorError::Setup(e.to_string()))?;
    if path.exists() {
        if control::is_live(&path) {
            return Err(SupervisorError::Setup(format!("{} is answered by another supervisor", path.display())));
        }
        std::fs::remove_file(&path).map_err(setup("cannot remove the stale socket"))?;
    }
    let l = std::os::unix::net::UnixListener::bind(&path)
        .map_err(|e| SupervisorError::Setup(format!("cannot bind {}: {e}", path.display())))?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
        .map_err(setup("cannot chmod the socket"))?;
    Ok(l)
}

/// A task kill waiting for its pipeline to end, to answer with the final state.
struct PendingKill {
    reply: oneshot::Sender<Response>,
    started: Instant,
}

struct Scheduler {
    ctx: Arc<Ctx>,
    opts: Options,
    paused: bool,
    stopping: Option<String>,
    pipelines: JoinSet<(TaskId, End)>,
    /// Where recovery left a task's pipeline (continue at gate/review/commit, or re-dispatch).
    resume_at: HashMap<TaskId, Start>,
    kill_replies: HashMap<TaskId, Vec<PendingKill>>,
    /// Tasks whose journal write failed: not dispatched again by this process.
    broken: HashMap<TaskId, String>,
    idle_since: Option<Instant>,
}

/// Runs (or recovers) the run `run_id` until it finishes, fails, or `shutdown` resolves.
pub async fn supervise(
    home: Home,
    run_id: RunId,
    mut opts: Options,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<Ending, SupervisorError> {
    let pointer = registry::read(&home, &run_id).map_err(|e| SupervisorError::Setup(e.to_string()))?;
    let plan = Plan::load(&pointer.plan_path())
        .map_err(|e| SupervisorError::Setup(format!("plan copy {}: {e}", pointer.plan_path().display())))?;
    let _lock = lock_run(&pointer.runstate_dir.join(format!("{}.supervisor.lock", pointer.slug)), &run_id)?;
    let journal = Journal::open(&pointer.journal_path()).map_err(|e| SupervisorError::Setup(e.to_string()))?;
    let view = journal.view().map_err(|e| SupervisorError::Setup(e.to_string()))?;
    match view.status {
        RunStatus::Finished | RunStatus::Failed => {
            return Ok(Ending::AlreadyOver(format!("run {run_id} is already {:?}", view.status).to_lowercase()));
        }
        RunStatus::Pending => {
            journal
                .append(&Record::run(RunEvent::Started, "supervisor", None))
                .map_err(|e| SupervisorError::Setup(e.to_string()))?;
        }
        _ => {}
    }
    let wrappers = crate::wrapper::wrappers_dir().map_err(SupervisorError::Setup)?;
    kill::become_subreaper();

    let listener = match (opts.batch, opts.listener.take()) {
        (true, _) => None,
        (false, Some(l)) => Some(l),
        (false, None) => Some(bind_socket(&home, &run_id)?),
    };
    let sock_path =
        listener.as_ref().and_then(|l| l.local_addr().ok()).and_then(|a| a.as_pathname().map(PathBuf::from));
    let liveness_path = (!opts.batch).then(|| pointer.liveness_path());
    let ctx = Arc::new(Ctx {
        run_id: run_id.clone(),
        pointer,
        plan,
        journal,
        wrappers,
        liveness: liveness_path.clone(),
        commit_lock: tokio::sync::Mutex::new(()),
        turn_timeout_s: opts.turn_timeout_s,
        gate_timeout: opts.gate_timeout,
        kill_grace: opts.kill_grace,
        running: std::sync::Mutex::new(HashMap::new()),
    });
    let mut s = Scheduler {
        paused: view.status == RunStatus::Paused,
        ctx,
        opts,
        stopping: None,
        pipelines: JoinSet::new(),
        resume_at: HashMap::new(),
        kill_replies: HashMap::new(),
        broken: HashMap::new(),
        idle_since: None,
    };
    s.recover(liveness_path.as_deref(), sock_path.clone()).await?;

    let (tx, mut rx) = mpsc::channel::<Envelope>(64);
    let inflight = control::InFlight::default();
    let server = match listener {
        Some(l) => {
            l.set_nonblocking(true).map_err(setup("socket"))?;
            let l = tokio::net::UnixListener::from_std(l).map_err(setup("socket"))?;
            Some(tokio::spawn(control::serve(l, tx.clone(), inflight.clone())))
        }
        None => None,
    };
    drop(tx);
    let _ = sd_notify::notify(&[sd_notify::NotifyState::Ready]);
    tracing::info!(RUN_ID = %run_id, sock = ?sock_path, "supervisor ready");

    tokio::pin!(shutdown);
    let mut watchdog = tokio::time::interval(crate::service::watchdog_interval().unwrap_or(Duration::from_secs(10)));
    let ending = loop {
        if let Some(end) = s.dispatch() {
            break end;
        }
        let linger = s.linger_left();
        tokio::select! {
            // Fed from the scheduler loop itself: a hung scheduler is restarted by systemd.
            _ = watchdog.tick() => {
                let status = s.status_line();
                crate::service::notify(&[sd_notify::NotifyState::Watchdog, sd_notify::NotifyState::Status(&status)]);
            }
            Some(env) = rx.recv(), if server.is_some() => s.handle(env).await,
            Some(done) = s.pipelines.join_next(), if !s.pipelines.is_empty() => s.finished(done),
            _ = tokio::time::sleep(linger.unwrap_or(Duration::from_secs(3600))), if linger.is_some() => {
                let detail = s.idle_reason();
                break s.fail(format!("idle limit ({:?}) reached: {detail}", s.opts.linger));
            }
            _ = &mut shutdown => break s.interrupt().await,
        }
    };
    if let Some(h) = server {
        h.abort();
    }
    rx.close();
    while let Ok(env) = rx.try_recv() {
        let _ = env.reply.send(refuse(409, "run not live: the supervisor has ended"));
    }
    // Answers given (stop's, the refusals above, kills whose task ended) still have to be written.
    drop(s);
    inflight.drained(Duration::from_secs(2)).await;
    if let Some(p) = &liveness_path {
        let _ = liveness::update(p, &run_id, |l| {
            l.sock = None;
            l.supervisor_pid = None;
            l.tasks.clear();
        });
    }
    if let Some(p) = &sock_path {
        let _ = std::fs::remove_file(p);
    }
    let _ = sd_notify::notify(&[sd_notify::NotifyState::Stopping]);
    tracing::info!(RUN_ID = %run_id, ending = ?ending, "supervisor done");
    Ok(ending)
}

impl Scheduler {
    fn view(&self) -> Result<RunView, String> {
        self.ctx.journal.view().map_err(|e| e.to_string())
    }

    /// Crash recovery: the journal wins. Orphaned groups of a dead supervisor are killed; committed
    /// tasks are skipped; a commit that exists without its `committed` record gets the record; a
    /// turn that was in flight is re-dispatched (resumed with its session when it has one); a task
    /// past its turn continues at its next stage. Liveness is rebuilt from what actually runs.
    async fn recover(&mut self, live: Option<&std::path::Path>, sock: Option<PathBuf>) -> Result<(), SupervisorError> {
        let ctx = self.ctx.clone();
        if let Some(path) = live {
            if let Ok(Some(old)) = liveness::get(path) {
                for (task, t) in &old.tasks {
                    // A group whose leader (the wrapper) is dead but which still has members is the
                    // wrapper's leftovers (a live group id is never handed to another process);
                    // a live leader must still look like a wrapper (not a recycled pid).
                    let leader_dead = !liveness::pid_alive(t.pid);
                    if kill::group_alive(t.pgid) && (leader_dead || looks_like_ours(t.pid)) {
                        tracing::warn!(RUN_ID = %ctx.run_id, TASK = %task, pgid = t.pgid, "killing an orphaned turn of a previous supervisor");
                        kill::kill_group(t.pgid, ctx.kill_grace).await;
                    }
                }
            }
            // Turns of a dead supervisor that liveness never recorded: found by their command line,
            // which names this run's prompt files.
            let prompts = ctx.pointer.runstate_dir.join(format!("{}.prompts/", ctx.pointer.slug));
            for pgid in kill::groups_mentioning(&prompts.to_string_lossy()) {
                tracing::warn!(RUN_ID = %ctx.run_id, pgid, "killing an unrecorded turn of a previous supervisor");
                kill::kill_group(pgid, ctx.kill_grace).await;
            }
            let paused = self.paused;
            liveness::update(path, &ctx.run_id, |l| {
                l.sock = sock.clone();
                l.supervisor_pid = Some(std::process::id() as i32);
                l.paused = paused;
                l.tasks.clear();
            })
            .map_err(|e| SupervisorError::Setup(e.to_string()))?;
        }
        let view = self.view().map_err(SupervisorError::Setup)?;
        for task in &ctx.plan.tasks {
            let Some(t) = view.tasks.get(&task.id) else { continue };
            let wt = &ctx.pointer.worktree;
            match t.state {
                TaskState::Committed | TaskState::Halted => {}
                TaskState::Gated | TaskState::Reviewed => {
                    // A commit the dead supervisor started may still be finishing.
                    crate::git::wait_index_unlocked(wt, Duration::from_secs(30));
                    if let Some(sha) = crate::git::find_task_commit(wt, ctx.run_id.as_str(), task.id.as_str()) {
                        let mut r = Record::task(&task.id, TaskState::Committed);
                        r.sha = Some(sha);
                        r.detail = Some("recovered: the commit existed, its record did not".into());
                        ctx.journal.append(&r.into()).map_err(|e| SupervisorError::Setup(e.to_string()))?;
                    } else if t.state == TaskState::Gated && task.review {
                        self.resume_at.insert(task.id.clone(), Start::Review);
                    } else {
                        self.resume_at.insert(task.id.clone(), Start::Commit);
                    }
                }
                TaskState::Implemented => {
                    self.resume_at.insert(task.id.clone(), Start::Gate);
                }
                TaskState::Leased => {
                    let mut r = Record::task(&task.id, TaskState::Halted);
                    r.rc = Some(137);
                    r.detail = Some("turn lost: the supervisor stopped while it ran".into());
                    r.session_id = t.session_id.clone();
                    ctx.journal.append(&r.into()).map_err(|e| SupervisorError::Setup(e.to_string()))?;
                    let start = match &t.session_id {
                        Some(sid) => Start::Turn {
                            prompt: format!(
                                "The previous turn was interrupted (the supervisor restarted). Continue the task:\n\n{}",
                                task.prompt
                            ),
                            resume: Some(sid.clone()),
                            note: Some("recovery: resumed after a supervisor restart".into()),
                        },
                        None => Start::Turn {
                            prompt: task.prompt.clone(),
                            resume: None,
                            note: Some("recovery: re-dispatched after a supervisor restart".into()),
                        },
                    };
                    self.resume_at.insert(task.id.clone(), start);
                }
            }
        }
        Ok(())
    }

    /// One line for `systemctl status`: wave and task progress.
    fn status_line(&self) -> String {
        let view = self.view().unwrap_or_default();
        let c = view.counts();
        format!(
            "{}{}: {}/{} committed, {} running, {} halted",
            self.ctx.run_id,
            if self.paused { " (paused)" } else { "" },
            c["committed"],
            self.ctx.plan.tasks.len(),
            self.running_count(),
            c["halted"]
        )
    }

    fn running(&self, task: &TaskId) -> bool {
        self.ctx.running.lock().unwrap_or_else(|p| p.into_inner()).contains_key(task)
    }

    fn running_count(&self) -> usize {
        self.ctx.running.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    fn start(&mut self, task: &crate::plan::Task, start: Start) {
        self.ctx.running.lock().unwrap_or_else(|p| p.into_inner()).insert(task.id.clone(), Proc::default());
        let ctx = self.ctx.clone();
        let t = task.clone();
        self.pipelines.spawn(async move {
            let id = t.id.clone();
            let end = pipeline::run(ctx, t, start).await;
            (id, end)
        });
    }

    /// Starts whatever may start now. Returns the run's ending when there is nothing left to do.
    fn dispatch(&mut self) -> Option<Ending> {
        if let Some(reason) = &self.stopping {
            if self.running_count() == 0 {
                let reason = reason.clone();
                return Some(self.fail(reason));
            }
            return None;
        }
        let view = match self.view() {
            Ok(v) => v,
            Err(e) => {
                tracing::error!(RUN_ID = %self.ctx.run_id, error = %e, "journal unreadable");
                return None;
            }
        };
        let plan = self.ctx.plan.clone();
        if plan.tasks.iter().all(|t| view.state_of(&t.id) == Some(TaskState::Committed)) {
            if self.running_count() > 0 {
                return None;
            }
            return Some(self.finish());
        }
        if !self.paused {
            self.apply_steers(&view, &plan);
            // The current wave: the lowest with a task not committed.
            let waves = plan.waves();
            let current = waves
                .iter()
                .find(|(_, ts)| ts.iter().any(|t| view.state_of(&t.id) != Some(TaskState::Committed)))
                .map(|(w, ts)| (*w, ts.clone()));
            if let Some((_, tasks)) = current {
                let limit = plan.parallelism();
                for t in tasks {
                    if self.running_count() >= limit {
                        break;
                    }
                    if self.running(&t.id) || self.broken.contains_key(&t.id) {
                        continue;
                    }
                    if let Some(start) = self.resume_at.remove(&t.id) {
                        self.start(t, start);
                    } else if view.state_of(&t.id).is_none() {
                        self.start(t, Start::Turn { prompt: t.prompt.clone(), resume: None, note: None });
                    }
                }
            }
        }
        // Idle: nothing running and nothing startable (blocked by halted tasks, or paused).
        if self.running_count() == 0 {
            if self.opts.batch {
                let detail = self.idle_reason();
                return Some(self.fail(detail));
            }
            self.idle_since.get_or_insert_with(Instant::now);
        } else {
            self.idle_since = None;
        }
        None
    }

    /// Applies queued steers to tasks at their turn boundary (not running, not committed).
    fn apply_steers(&mut self, view: &RunView, plan: &Plan) {
        let mut by_task: Vec<(TaskId, Vec<&journal::PendingSteer>)> = Vec::new();
        for s in &view.pending_steers {
            match by_task.iter_mut().find(|(t, _)| *t == s.task) {
                Some((_, v)) => v.push(s),
                None => by_task.push((s.task.clone(), vec![s])),
            }
        }
        for (task_id, steers) in by_task {
            if self.running(&task_id) || self.broken.contains_key(&task_id) {
                continue;
            }
            let Some(task) = plan.task(&task_id) else { continue };
            let t = view.tasks.get(&task_id);
            // The seat was refused when the steer was queued; the rest may have changed since.
            let refusal = journal::SteerRefusal::check(false, t, true).map(|r| r.detail(&task_id));
            let ids: Vec<String> = steers.iter().map(|s| s.id.clone()).collect();
            let outcome = if refusal.is_some() { Outcome::Refused } else { Outcome::Applied };
            for s in &steers {
                let rec = ControlRecord {
                    task: Some(task_id.clone()),
                    id: Some(s.id.clone()),
                    detail: refusal.clone(),
                    ..Record::control(Verb::Steer, "supervisor", outcome)
                };
                if let Err(e) = self.ctx.journal.append(&rec.into()) {
                    self.broken.insert(task_id.clone(), e.to_string());
                    return;
                }
            }
            if refusal.is_some() {
                continue;
            }
            self.resume_at.remove(&task_id);
            let prompt = steers.iter().map(|s| s.msg.as_str()).collect::<Vec<_>>().join("\n\n");
            tracing::info!(RUN_ID = %self.ctx.run_id, TASK = %task_id, VERB = "steer", "applying steer {}", ids.join(","));
            self.start(
                task,
                Start::Turn {
                    prompt,
                    resume: t.and_then(|t| t.session_id.clone()),
                    note: Some(format!("steer {}", ids.join(","))),
                },
            );
        }
    }

    fn finished(&mut self, done: Result<(TaskId, End), tokio::task::JoinError>) {
        let (task, end) = match done {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(RUN_ID = %self.ctx.run_id, error = %e, "a task pipeline panicked");
                return;
            }
        };
        self.ctx.running.lock().unwrap_or_else(|p| p.into_inner()).remove(&task);
        self.ctx.live_remove(&task);
        if let End::JournalFailed(e) = &end {
            self.broken.insert(task.clone(), e.clone());
        }
        let state = self.view().ok().and_then(|v| v.tasks.get(&task).cloned());
        for k in self.kill_replies.remove(&task).unwrap_or_default() {
            let _ = k.reply.send(json!({
                "ok": true,
                "task": task,
                "state": state.as_ref().map(|s| s.state),
                "rc": state.as_ref().and_then(|s| s.rc),
                "detail": state.as_ref().and_then(|s| s.detail.clone()),
                "elapsed_ms": k.started.elapsed().as_millis() as u64,
            }));
        }
        tracing::info!(RUN_ID = %self.ctx.run_id, TASK = %task, end = ?end, "task pipeline ended");
    }

    fn linger_left(&self) -> Option<Duration> {
        let since = self.idle_since?;
        Some(self.opts.linger.saturating_sub(since.elapsed()))
    }

    fn idle_reason(&self) -> String {
        let view = self.view().unwrap_or_default();
        let halted: Vec<String> = view
            .tasks
            .iter()
            .filter(|(_, t)| t.state == TaskState::Halted)
            .map(|(id, t)| format!("{id} ({})", t.detail.as_deref().unwrap_or("halted")))
            .collect();
        if self.paused && halted.is_empty() {
            "paused with nothing running".into()
        } else if halted.is_empty() {
            "no task can start".into()
        } else {
            format!("halted tasks block the wave: {}", halted.join(", "))
        }
    }

    fn finish(&mut self) -> Ending {
        if let Err(e) = self.ctx.journal.append(&Record::run(RunEvent::Finished, "supervisor", None)) {
            tracing::error!(RUN_ID = %self.ctx.run_id, error = %e, "cannot journal the run's end");
        }
        Ending::Finished
    }

    fn fail(&mut self, detail: String) -> Ending {
        if let Err(e) = self.ctx.journal.append(&Record::run(RunEvent::Failed, "supervisor", Some(detail.clone()))) {
            tracing::error!(RUN_ID = %self.ctx.run_id, error = %e, "cannot journal the run's end");
        }
        Ending::Failed(detail)
    }

    /// SIGTERM: kill running turns without journaling them (they stay `leased`, so the next
    /// supervisor re-dispatches them), and exit.
    async fn interrupt(&mut self) -> Ending {
        let groups: Vec<i32> =
            self.ctx.running.lock().unwrap_or_else(|p| p.into_inner()).values().filter_map(|p| p.pgid).collect();
        self.pipelines.abort_all();
        let grace = self.opts.kill_grace;
        let kills: Vec<_> = groups.into_iter().map(|g| tokio::spawn(kill::kill_group(g, grace))).collect();
        for k in kills {
            let _ = k.await;
        }
        while self.pipelines.join_next().await.is_some() {}
        Ending::Interrupted
    }

    fn journal_control(&self, rec: ControlRecord) -> Result<(), Response> {
        self.ctx
            .journal
            .append(&rec.into())
            .map(|_| ())
            .map_err(|e| refuse(500, format!("journal append failed, nothing was done: {e}")))
    }

    async fn handle(&mut self, env: Envelope) {
        let Envelope { req, reply } = env;
        let by = req.by.clone().filter(|b| !b.is_empty()).unwrap_or_else(|| "socket".into());
        let by = journal::clip_by(&by);
        tracing::info!(RUN_ID = %self.ctx.run_id, VERB = %req.verb, TASK = ?req.task, by = %by, "control verb");
        self.idle_since = None;
        let answer = match req.verb.as_str() {
            "status" => Ok(self.status()),
            "pause" | "resume" => self.pause(req.verb == "pause", &by),
            "stop" => self.stop(&by),
            "kill" => match self.kill(&req, &by, reply) {
                Ok(None) => return, // answered when the pipeline ends
                Ok(Some((r, reply))) => {
                    let _ = reply.send(r);
                    return;
                }
                Err((r, reply)) => {
                    let _ = reply.send(r);
                    return;
                }
            },
            "steer" => self.steer(&req, &by),
            other => Err(refuse(
                400,
                format!("unknown verb {:?}: expected kill, steer, pause, resume, stop or status", short(other)),
            )),
        };
        let _ = reply.send(answer.unwrap_or_else(|e| e));
    }

    fn status(&self) -> Response {
        let view = self.view().unwrap_or_default();
        let running = self.ctx.running.lock().unwrap_or_else(|p| p.into_inner());
        let tasks: serde_json::Map<String, serde_json::Value> = self
            .ctx
            .plan
            .tasks
            .iter()
            .map(|t| {
                let v = view.tasks.get(&t.id);
                (
                    t.id.to_string(),
                    json!({
                        "state": v.map(|v| v.state.as_str()).unwrap_or("pending"),
                        "running": running.contains_key(&t.id),
                        "pgid": running.get(&t.id).and_then(|p| p.pgid),
                        "session_id": v.and_then(|v| v.session_id.clone()),
                    }),
                )
            })
            .collect();
        json!({"ok": true, "run": self.ctx.run_id, "status": view.status, "paused": self.paused,
               "pending_steers": view.pending_steers.len(), "tasks": tasks})
    }

    fn pause(&mut self, pause: bool, by: &str) -> Result<Response, Response> {
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
                .map_err(|e| refuse(500, format!("journal append failed: {e}")))?;
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
        Ok(json!({"ok": true, "paused": self.paused, "running": in_flight, "detail": detail}))
    }

    fn stop(&mut self, by: &str) -> Result<Response, Response> {
        self.journal_control(Record::control(Verb::Stop, by, Outcome::Accepted))?;
        let reason = format!("stopped by {by}");
        self.stopping = Some(reason.clone());
        self.kill_all(&reason);
        Ok(
            json!({"ok": true, "detail": format!("{reason}: killing {} running task(s); the run ends failed", self.running_count())}),
        )
    }

    fn kill_all(&self, by: &str) {
        let mut running = self.ctx.running.lock().unwrap_or_else(|p| p.into_inner());
        for p in running.values_mut() {
            p.killed_by = Some(by.to_string());
            if let Some(g) = p.pgid {
                tokio::spawn(kill::kill_group(g, self.ctx.kill_grace));
            }
        }
    }

    fn task_of(&self, req: &Request) -> Result<crate::plan::Task, Response> {
        let raw = req.task.as_deref().ok_or_else(|| refuse(400, format!("{} needs a task", req.verb)))?;
        let id = TaskId::parse(raw).map_err(|e| refuse(400, e.to_string()))?;
        self.ctx.plan.task(&id).cloned().ok_or_else(|| refuse(404, format!("run {} has no task {id}", self.ctx.run_id)))
    }

    #[allow(clippy::type_complexity)]
    fn kill(
        &mut self,
        req: &Request,
        by: &str,
        reply: oneshot::Sender<Response>,
    ) -> Result<Option<(Response, oneshot::Sender<Response>)>, (Response, oneshot::Sender<Response>)> {
        let task = match self.task_of(req) {
            Ok(t) => t,
            Err(r) => return Err((r, reply)),
        };
        let running = self.running(&task.id);
        let rec = ControlRecord {
            task: Some(task.id.clone()),
            detail: (!running).then(|| "task is not running".to_string()),
            ..Record::control(Verb::Kill, by, if running { Outcome::Accepted } else { Outcome::Noop })
        };
        if let Err(r) = self.journal_control(rec) {
            return Err((r, reply));
        }
        if !running {
            let view = self.view().unwrap_or_default();
            let t = view.tasks.get(&task.id);
            return Ok(Some((
                json!({"ok": true, "task": task.id, "noop": true, "detail": "task is not running",
                       "state": t.map(|t| t.state.as_str()).unwrap_or("pending"), "rc": t.and_then(|t| t.rc)}),
                reply,
            )));
        }
        self.signal_kill(&task.id, by);
        self.kill_replies.entry(task.id.clone()).or_default().push(PendingKill { reply, started: Instant::now() });
        Ok(None)
    }

    fn signal_kill(&self, task: &TaskId, by: &str) {
        let mut running = self.ctx.running.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(p) = running.get_mut(task) {
            p.killed_by = Some(by.to_string());
            if let Some(g) = p.pgid {
                tokio::spawn(kill::kill_group(g, self.ctx.kill_grace));
            }
        }
    }

    fn steer(&mut self, req: &Request, by: &str) -> Result<Response, Response> {
        let task = self.task_of(req)?;
        let msg = req.msg.clone().unwrap_or_default();
        journal::check_steer_msg(&msg).map_err(|e| refuse(400, e))?;
        let interrupt = req.interrupt.unwrap_or(false);
        let running = self.running(&task.id);
        let id = uuid::Uuid::new_v4().to_string();
        let refused = |detail: String| ControlRecord {
            task: Some(task.id.clone()),
            msg: Some(msg.clone()),
            interrupt: Some(interrupt),
            id: Some(id.clone()),
            detail: Some(detail),
            ..Record::control(Verb::Steer, by, Outcome::Refused)
        };
        // Decided and recorded under the journal lock: no window between check and queue.
        let queued = ControlRecord { outcome: Outcome::Queued, detail: None, ..refused(String::new()) };
        let seat = task.adapter.is_verdict_seat();
        let mut why: Option<(u16, String)> = None;
        let appended = self.ctx.journal.append_checked(&queued.into(), |v| {
            why = journal::SteerRefusal::check(seat, v.tasks.get(&task.id), !running).map(|r| {
                let detail = r.detail(&task.id);
                match r {
                    journal::SteerRefusal::VerdictSeat => (409, format!("{detail} (kill is allowed)")),
                    _ => (409, detail),
                }
            });
            match &why {
                Some((_, d)) => Err(journal::JournalError::Invalid(d.clone())),
                None => Ok(()),
            }
        });
        match (appended, why) {
            (Ok(_), _) => {}
            (Err(_), Some((status, detail))) => {
                self.journal_control(refused(detail.clone()))?;
                return Err(refuse(status, detail));
            }
            (Err(e), None) => return Err(refuse(500, format!("journal append failed, nothing was queued: {e}"))),
        }
        let detail = if interrupt && running {
            self.signal_kill(&task.id, &format!("steer {id} (interrupt)"));
            "queued; interrupting the current turn, then resuming the session with the message"
        } else if running {
            "queued: applied at the task's turn boundary (resume of its session with the message)"
        } else if self.paused {
            "queued: the run is paused; applied when it resumes"
        } else {
            "queued: applying now (resume of the task's session with the message)"
        };
        Ok(json!({"ok": true, "id": id, "task": task.id, "detail": detail}))
    }
}

/// A pid whose command line mentions a wrapper script: a previous supervisor's turn, not a
/// recycled pid of something else.
fn looks_like_ours(pid: i32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|c| {
            let c = String::from_utf8_lossy(&c);
            c.contains("na.sh") || c.contains("ca.sh") || c.contains("codex.sh") || c.contains("sh\0-c")
        })
        .unwrap_or(false)
}

fn short(s: &str) -> String {
    s.chars().take(40).collect()
}
