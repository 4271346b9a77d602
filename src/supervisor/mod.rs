//! The supervisor of one run: replays the journal (crash recovery, `recover.rs`), runs the waves (up
//! to `max_parallel` task pipelines at a time, fail-closed on a halted task), owns the control socket
//! (`control.rs`) and acts on its verbs at safe points (`verbs.rs`). It is the only writer of its
//! run's task states, and every verb leaves a `control` record before it is answered. It serves no
//! HTTP.
//!
//! One scheduler task owns all state; pipelines (`pipeline.rs`) and connections (`control.rs`) talk to
//! it through channels, so there is no lock around run state.

pub mod abandoned;
mod approvals;
mod budget;
mod idempotency;
mod keeper;
pub mod kill;
mod live;
pub mod notifier;
mod pipeline;
mod ratelimit;
mod recover;
mod socket;
mod stall;
mod verbs;

use crate::control::{self, Refusal, Reply};
use crate::ids::{RunId, TaskId};
use crate::os::home::{Home, HomeError};
use crate::state::journal::{
    self, ControlRecord, Journal, JournalError, Outcome, Record, RunEvent, RunStatus, RunView, TaskState, Verb,
};
use crate::state::liveness::{self, LivenessError};
use crate::state::plan::{Plan, PlanError};
use crate::state::registry::{self, RegistryError};
use crate::timeouts;
use pipeline::{Ctx, End, Proc, Start};
use socket::Envelope;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
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
    /// SIGINT/SIGTERM stop the run (`harness run` in the foreground: Ctrl-C means stop): the running
    /// turns are killed and journaled, the run ends `stopped`. Off (a service's supervisor), a signal
    /// leaves the turns `leased` for the next supervisor to re-dispatch.
    pub stop_on_signal: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            kill_grace: crate::timeouts::KILL_GRACE,
            linger: crate::timeouts::LINGER,
            turn_timeout_s: crate::timeouts::TURN.as_secs(),
            gate_timeout: crate::timeouts::GATE,
            batch: false,
            listener: None,
            stop_on_signal: false,
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
    /// Stopped by the operator (`stop`, or a signal with `stop_on_signal`): `run stopped` journaled.
    Stopped(String),
}

/// Why a supervisor could not start (or recover) its run. Each names the run's file involved.
#[derive(Debug, thiserror::Error)]
pub enum SupervisorError {
    #[error(transparent)]
    Registry(#[from] RegistryError),
    #[error("plan copy {}: {source}", path.display())]
    Plan { path: PathBuf, source: PlanError },
    #[error(transparent)]
    Journal(#[from] JournalError),
    #[error(transparent)]
    Liveness(#[from] LivenessError),
    #[error(transparent)]
    Home(#[from] HomeError),
    #[error("{0}")]
    Wrappers(String),
    #[error("{what} {}: {source}", path.display())]
    Io { what: &'static str, path: PathBuf, source: std::io::Error },
    #[error("run {run} already has a live supervisor (pid {pid}); refusing to start a second one")]
    AlreadySupervised { run: RunId, pid: String },
    #[error("{} is answered by another supervisor", path.display())]
    SocketTaken { path: PathBuf },
}

fn io_error<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> SupervisorError + 'a {
    move |source| SupervisorError::Io { what, path: path.to_path_buf(), source }
}

/// Holds the run's supervisor lock (`<runstateDir>/<slug>.supervisor.lock`) for the process's life.
struct RunLock {
    _held: crate::os::flock::Flock,
}

fn lock_run(path: &Path, run: &RunId) -> Result<RunLock, SupervisorError> {
    use std::io::{Read, Seek, Write};
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)
        .map_err(io_error("cannot open the supervisor lock", path))?;
    let Some(held) =
        crate::os::flock::Flock::try_exclusive(&f).map_err(io_error("cannot lock the supervisor lock", path))?
    else {
        let mut pid = String::new();
        let _ = f.read_to_string(&mut pid);
        return Err(SupervisorError::AlreadySupervised { run: run.clone(), pid: pid.trim().to_string() });
    };
    let _ = f.set_len(0);
    let _ = f.seek(std::io::SeekFrom::Start(0));
    let _ = write!(f, "{}", std::process::id());
    Ok(RunLock { _held: held })
}

/// Binds `$HARNESS_HOME/sock/<runId>.sock` (0600 under a 0700 dir). A stale socket (nobody
/// answering) is replaced; a live one means another supervisor and is refused.
pub fn bind_socket(home: &Home, run: &RunId) -> Result<std::os::unix::net::UnixListener, SupervisorError> {
    use std::os::unix::fs::PermissionsExt;
    home.ensure()?;
    let path = home.checked_socket_path(run)?;
    if path.exists() {
        if control::is_live(&path) {
            return Err(SupervisorError::SocketTaken { path });
        }
        std::fs::remove_file(&path).map_err(io_error("cannot remove the stale socket", &path))?;
    }
    let l = std::os::unix::net::UnixListener::bind(&path).map_err(io_error("cannot bind the control socket", &path))?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
        .map_err(io_error("cannot chmod the control socket", &path))?;
    Ok(l)
}

/// A run already over whose last supervisor died during its run-end work (SIGKILL between the
/// `finished` record and its exit): what that work leaves done is done now — task worktrees and
/// branches removed, liveness cleared, the dead socket removed. The caller holds the run's lock,
/// so no other supervisor of it is alive. Never fails the call.
async fn finish_run_end(home: &Home, run_id: &RunId, pointer: &registry::Pointer, view: &RunView) {
    if home.worktrees_dir(run_id).exists() {
        remove_task_worktrees(home, run_id, &pointer.worktree, view).await;
    }
    // Its dead pids (the supervisor's and any task's) leave the liveness record.
    let _ = liveness::reap(&pointer.liveness_path(), run_id, view);
    if let Ok(p) = home.checked_socket_path(run_id)
        && p.exists()
        && !control::is_live(&p)
    {
        let _ = std::fs::remove_file(p);
    }
}

/// The run is over: no task worktree, task branch or ref of an integrated task outlives it; a task
/// the journal does not call integrated keeps what holds its work (never failing the caller).
async fn remove_task_worktrees(home: &Home, run_id: &RunId, run_wt: &Path, view: &RunView) {
    let (h, r, w) = (home.clone(), run_id.clone(), run_wt.to_path_buf());
    let committed: std::collections::HashSet<String> =
        view.tasks.iter().filter(|(_, t)| t.state == TaskState::Committed).map(|(id, _)| id.to_string()).collect();
    let cleaned = tokio::task::spawn_blocking(move || {
        crate::os::worktree::clean_run(&h, &w, &r, &|t: &str| committed.contains(t), false)
    })
    .await;
    match cleaned {
        Ok(Ok(c)) => {
            if !c.removed.is_empty() {
                tracing::info!(RUN_ID = %run_id, removed = c.removed.len(), "task worktrees and branches removed");
            }
            for (what, why) in &c.kept {
                tracing::warn!(RUN_ID = %run_id, kept = %what, "kept: {why}");
            }
        }
        Ok(Err(e)) => tracing::warn!(RUN_ID = %run_id, error = %e, "cannot remove the run's task worktrees"),
        Err(_) => {}
    }
}

/// A gone supervisor's liveness: no socket, no pid, no task.
fn clear_liveness(path: &Path, run_id: &RunId) {
    let _ = liveness::update(path, run_id, |l| {
        l.sock = None;
        l.supervisor_pid = None;
        l.tasks.clear();
    });
}

/// A task kill waiting for its pipeline to end, to answer with the final state.
struct PendingKill {
    reply: oneshot::Sender<Reply>,
    started: Instant,
    /// Queued steers the kill cancelled.
    cancelled: usize,
}

struct Scheduler {
    ctx: Arc<Ctx>,
    opts: Options,
    paused: bool,
    stopping: Option<String>,
    pipelines: JoinSet<(TaskId, End)>,
    /// Which task each pipeline runs (a pipeline that panics reports only its id).
    pipeline_tasks: HashMap<tokio::task::Id, TaskId>,
    /// Where recovery left a task's pipeline (continue at gate/review/commit, or re-dispatch).
    resume_at: HashMap<TaskId, Start>,
    kill_replies: HashMap<TaskId, Vec<PendingKill>>,
    /// Tasks whose journal write failed: not dispatched again by this process.
    broken: HashMap<TaskId, String>,
    idle_since: Option<Instant>,
    /// The task logs' usage folds, for budgets.
    tallies: crate::state::spend::LogTallies,
    /// Each stalled turn's last output when its stall was marked (one mark per stall).
    stalled: HashMap<TaskId, std::time::SystemTime>,
    /// A rate limit's wake-up: when, and the tasks it halted.
    rate_wake: Option<(tokio::time::Instant, Vec<TaskId>)>,
    /// Rate limits in a row (the back-off doubles per one); reset by a commit.
    rate_limits: u32,
    /// `Idempotency-Key`s being answered now.
    in_flight: idempotency::InFlight,
}

/// Runs (or recovers) the run `run_id` until it finishes, fails, or `shutdown` resolves.
pub async fn supervise(
    home: Home,
    run_id: RunId,
    mut opts: Options,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<Ending, SupervisorError> {
    let pointer = registry::read(&home, &run_id)?;
    let plan_path = pointer.plan_path();
    let plan = Plan::load(&plan_path).map_err(|source| SupervisorError::Plan { path: plan_path, source })?;
    let _lock = lock_run(&pointer.supervisor_lock_path(), &run_id)?;
    let journal = Journal::open(&pointer.journal_path())?;
    let view = journal.view()?;
    match view.status {
        RunStatus::Finished | RunStatus::Failed => {
            finish_run_end(&home, &run_id, &pointer, &view).await;
            return Ok(Ending::AlreadyOver(format!("run {run_id} is already {}", view.status)));
        }
        RunStatus::Pending => {
            let sha = crate::os::git::head(&pointer.worktree).ok();
            journal.append(&Record::started("supervisor", None, crate::os::git::branch(&pointer.worktree), sha))?;
        }
        _ => {}
    }
    let view = journal.view()?;
    let wrappers = crate::wrapper::wrappers_dir().map_err(SupervisorError::Wrappers)?;
    kill::become_subreaper();

    let listener = match (opts.batch, opts.listener.take()) {
        (true, _) => None,
        (false, Some(l)) => Some(l),
        (false, None) => Some(bind_socket(&home, &run_id)?),
    };
    let sock_path =
        listener.as_ref().and_then(|l| l.local_addr().ok()).and_then(|a| a.as_pathname().map(PathBuf::from));
    // Batch runs too: their liveness says whose process runs them (a run whose process is gone
    // shows `supervisor: "gone"`).
    let liveness_path = Some(pointer.liveness_path());
    let plan_isolation = plan.isolation();
    let plan_hooks = plan.git_hooks == Some(true);
    let pointer_branch = pointer.branch.clone();
    // Notifications beside the scheduler, from the first record this supervisor sees.
    let notifier =
        notifier::spawn(home.root.clone(), run_id.clone(), pointer.journal_path(), pointer.notify_mark_path());
    let keeper = keeper::spawn(home.clone(), pointer.clone());
    let run_wt = pointer.worktree.clone();
    let journal_path = pointer.journal_path();
    let ctx = Arc::new(Ctx {
        run_id: run_id.clone(),
        pointer,
        plan,
        journal,
        wrappers,
        liveness: liveness_path.clone(),
        commit_lock: tokio::sync::Mutex::new(()),
        isolation: plan_isolation,
        home: home.clone(),
        turn_timeout_s: opts.turn_timeout_s,
        gate_timeout: opts.gate_timeout,
        kill_grace: opts.kill_grace,
        running: std::sync::Mutex::new(HashMap::new()),
        approvals: std::sync::Mutex::new(HashMap::new()),
        socket: sock_path.clone(),
        nonce: view.nonce.clone(),
        // A run journaled before its branch was pinned: the branch its pointer recorded.
        branch: if view.nonce.is_some() { view.branch.clone() } else { pointer_branch },
        start_sha: view.start_sha.clone(),
        hooks: if plan_hooks { crate::os::git::Hooks::Repo } else { crate::os::git::Hooks::Off },
    });
    let mut s = Scheduler::new(ctx, opts, view.status == RunStatus::Paused);
    s.recover(liveness_path.as_deref(), sock_path.clone()).await?;
    s.rearm_rate_limit();
    let ending = s.serve(listener, shutdown).await?;
    // The run's last records (finished, failed) are notified before this supervisor exits.
    let _ = notifier.stop.send(true);
    let _ = tokio::time::timeout(notifier::DRAIN + Duration::from_secs(1), notifier.task).await;
    let _ = keeper.stop.send(true);
    let _ = keeper.task.await;
    if matches!(ending, Ending::Finished | Ending::Failed(_) | Ending::AlreadyOver(_) | Ending::Stopped(_)) {
        let view = journal::replay(&journal_path).unwrap_or_default();
        remove_task_worktrees(&home, &run_id, &run_wt, &view).await;
        apply_retention(&home, &run_id).await;
    }
    if let Some(p) = &liveness_path {
        clear_liveness(p, &run_id);
    }
    // The socket goes last: its absence says this supervisor is done, run-end work included. Until
    // then a client is refused (nobody listens), which the API answers 409 (not live).
    if let Some(p) = &sock_path {
        let _ = std::fs::remove_file(p);
    }
    let _ = sd_notify::notify(&[sd_notify::NotifyState::Stopping]);
    tracing::info!(RUN_ID = %run_id, ending = ?ending, "supervisor done");
    Ok(ending)
}

/// The home's retention setting, applied as a run ends (never failing it).
async fn apply_retention(home: &Home, run_id: &RunId) {
    let h = home.clone();
    let pruned = tokio::task::spawn_blocking(move || match crate::state::prune::retention(&h) {
        Ok(Some(opts)) => crate::state::prune::prune(&h, &opts).map(|r| r.pruned.len()),
        Ok(None) => Ok(0),
        Err(e) => Err(e),
    })
    .await;
    match pruned {
        Ok(Ok(0)) => {}
        Ok(Ok(n)) => tracing::info!(RUN_ID = %run_id, runs = n, "old runs pruned (retention.json)"),
        Ok(Err(e)) => tracing::warn!(RUN_ID = %run_id, error = %e, "retention not applied"),
        Err(_) => {}
    }
}

impl Scheduler {
    fn new(ctx: Arc<Ctx>, opts: Options, paused: bool) -> Scheduler {
        Scheduler {
            paused,
            ctx,
            opts,
            stopping: None,
            pipelines: JoinSet::new(),
            pipeline_tasks: HashMap::new(),
            resume_at: HashMap::new(),
            kill_replies: HashMap::new(),
            broken: HashMap::new(),
            idle_since: None,
            tallies: Default::default(),
            stalled: HashMap::new(),
            rate_wake: None,
            rate_limits: 0,
            in_flight: Default::default(),
        }
    }

    /// The scheduler loop: serves the control socket (when there is one), dispatches, and collects
    /// finished pipelines until the run ends or `shutdown` resolves. Answers given before the end
    /// (stop's, say) are written before it returns.
    async fn serve(
        mut self,
        mut listener: Option<std::os::unix::net::UnixListener>,
        shutdown: impl std::future::Future<Output = ()>,
    ) -> Result<Ending, SupervisorError> {
        let (tx, mut rx) = mpsc::channel::<Envelope>(64);
        let inflight = socket::InFlight::default();
        let server = match listener.take() {
            Some(l) => {
                let path = l.local_addr().ok().and_then(|a| a.as_pathname().map(PathBuf::from)).unwrap_or_default();
                l.set_nonblocking(true).map_err(io_error("cannot serve the control socket", &path))?;
                let l = tokio::net::UnixListener::from_std(l)
                    .map_err(io_error("cannot serve the control socket", &path))?;
                let journal: Arc<std::path::Path> = Arc::from(self.ctx.journal.path());
                Some(tokio::spawn(socket::serve(l, tx.clone(), inflight.clone(), journal)))
            }
            None => None,
        };
        drop(tx);
        let _ = sd_notify::notify(&[sd_notify::NotifyState::Ready]);
        tracing::info!(RUN_ID = %self.ctx.run_id, "supervisor ready");
        tokio::pin!(shutdown);
        let mut watchdog =
            tokio::time::interval(crate::os::service::watchdog_interval().unwrap_or(timeouts::SUPERVISOR_WATCHDOG));
        let mut stall_watch = tokio::time::interval(stall::period(self.ctx.plan.stall_after()));
        stall_watch.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut signalled = false;
        let ending = loop {
            if let Some(end) = self.dispatch() {
                break end;
            }
            let linger = self.linger_left();
            tokio::select! {
                // Fed from the scheduler loop itself: a hung scheduler is restarted by systemd.
                _ = watchdog.tick() => {
                    let status = self.status_line();
                    crate::os::service::notify(&[sd_notify::NotifyState::Watchdog, sd_notify::NotifyState::Status(&status)]);
                }
                Some(env) = rx.recv(), if server.is_some() => self.handle(env).await,
                _ = stall_watch.tick(), if self.running_count() > 0 => self.check_stalls(),
                _ = tokio::time::sleep_until(self.rate_wake_at().unwrap_or_else(tokio::time::Instant::now)), if self.rate_wake.is_some() => self.rate_lifted(),
                Some(done) = self.pipelines.join_next_with_id(), if !self.pipelines.is_empty() => self.finished(done),
                _ = tokio::time::sleep(linger.unwrap_or(Duration::from_secs(3600))), if linger.is_some() => {
                    let detail = self.idle_reason();
                    break self.fail(format!("idle limit ({:?}) reached: {detail}", self.opts.linger));
                }
                _ = &mut shutdown, if !signalled => {
                    signalled = true;
                    if !self.opts.stop_on_signal {
                        break self.interrupt().await;
                    }
                    // Ctrl-C of a foreground run: stop it, as `stop` does.
                    if self.stopping.is_none() {
                        self.stop_by("signal");
                    }
                }
            }
        };
        if let Some(h) = server {
            h.abort();
        }
        rx.close();
        while let Ok(env) = rx.try_recv() {
            let refusal = Refusal::by_state("run not live: the supervisor has ended");
            let refusal = control::Sketch::of(&env.req).journal(&self.ctx.journal, refusal);
            let _ = env.reply.send(refusal.into());
        }
        // Asked calls still waiting: their turns end with this supervisor.
        let held: Vec<(String, approvals::Held)> =
            self.ctx.approvals.lock().unwrap_or_else(|p| p.into_inner()).drain().collect();
        for (id, h) in held {
            approvals::expire(&self.ctx, &h.task, &id, "the supervisor ended before a decision");
            if let approvals::Waiter::Socket { reply } = h.waiter {
                let d = approvals::Decision {
                    allow: false,
                    message: Some("The supervisor ended before a decision: denied.".into()),
                    by: "supervisor".into(),
                };
                let _ = reply.send(Reply::Done(control::Answer::Ask { decision: d.answer(), id, ok: control::True }));
            }
        }
        // Kills accepted (and journaled) whose task had not ended: answered with where it stands.
        for (task, waiting) in std::mem::take(&mut self.kill_replies) {
            for k in waiting {
                self.kill_answered(&task, k);
            }
        }
        // Answers given (stop's, the refusals above, kills whose task ended) still have to be written.
        drop(self);
        inflight.drained(timeouts::ANSWER_DRAIN).await;
        Ok(ending)
    }

    fn view(&self) -> Result<RunView, JournalError> {
        self.ctx.journal.view()
    }

    /// One line for `systemctl status`: wave and task progress.
    fn status_line(&self) -> String {
        let view = self.view().unwrap_or_default();
        format!(
            "{}{}: {}/{} committed, {} running, {} halted",
            self.ctx.run_id,
            if self.paused { " (paused)" } else { "" },
            view.count(TaskState::Committed),
            self.ctx.plan.tasks.len(),
            self.running_count(),
            view.count(TaskState::Halted)
        )
    }

    fn running(&self, task: &TaskId) -> bool {
        self.ctx.running.lock().unwrap_or_else(|p| p.into_inner()).contains_key(task)
    }

    fn running_count(&self) -> usize {
        self.ctx.running.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    fn start(&mut self, task: &crate::state::plan::Task, start: Start) {
        self.ctx.running.lock().unwrap_or_else(|p| p.into_inner()).insert(task.id.clone(), Proc::default());
        let ctx = self.ctx.clone();
        let t = task.clone();
        let handle = self.pipelines.spawn(async move {
            let id = t.id.clone();
            let end = pipeline::run(ctx, t, start).await;
            (id, end)
        });
        self.pipeline_tasks.insert(handle.id(), task.id.clone());
    }

    /// Starts whatever may start now. Returns the run's ending when there is nothing left to do.
    fn dispatch(&mut self) -> Option<Ending> {
        if let Some(reason) = &self.stopping {
            if self.running_count() == 0 {
                let reason = reason.clone();
                return Some(self.stopped(reason));
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
        let done = |t: &TaskId| view.state_of(t).is_some_and(TaskState::is_terminal);
        if plan.tasks.iter().all(|t| done(&t.id)) {
            if self.running_count() > 0 {
                return None;
            }
            return Some(self.finish());
        }
        if !self.paused {
            self.apply_steers(&view, &plan);
            // The current wave: the lowest with a task not done (committed or skipped).
            let waves = plan.waves();
            let current = waves.iter().find(|(_, ts)| ts.iter().any(|t| !done(&t.id))).map(|(w, ts)| (*w, ts.clone()));
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
            // Waiting for a rate limit to lift is not idleness.
            if self.rate_wake.is_some() {
                self.idle_since = None;
                return None;
            }
            if self.opts.batch {
                let detail = self.idle_reason();
                return Some(self.fail(detail));
            }
            self.idle_since.get_or_insert_with(Instant::now);
            self.note_blocked(&view);
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

    fn finished(&mut self, done: Result<(tokio::task::Id, (TaskId, End)), tokio::task::JoinError>) {
        let (task, end) = match done {
            Ok((id, r)) => {
                self.pipeline_tasks.remove(&id);
                r
            }
            Err(e) => {
                let Some(task) = self.pipeline_tasks.remove(&e.id()) else {
                    tracing::error!(RUN_ID = %self.ctx.run_id, error = %e, "an unknown task pipeline failed");
                    return;
                };
                (task.clone(), self.pipeline_failed(&task, e))
            }
        };
        let killed_by =
            self.ctx.running.lock().unwrap_or_else(|p| p.into_inner()).remove(&task).and_then(|p| p.killed_by);
        self.ctx.live_remove(&task);
        // A kill that met the pipeline at a boundary (it ended steered, between two steps): the kill
        // still means stop, so the task is halted by it.
        let end = match (end, killed_by) {
            // (The kill a steer's `interrupt` makes wants that steer applied.)
            (End::Steered, Some(by)) if !by.starts_with("steer ") => self.halt_killed(&task, &by),
            (end, _) => end,
        };
        if let End::JournalFailed(e) = &end {
            self.broken.insert(task.clone(), e.clone());
        }
        for k in self.kill_replies.remove(&task).unwrap_or_default() {
            self.kill_answered(&task, k);
        }
        tracing::info!(RUN_ID = %self.ctx.run_id, TASK = %task, end = ?end, "task pipeline ended");
        match end {
            End::RateLimited(resets_at) => self.rate_limited(&task, resets_at),
            End::Committed => self.rate_limits = 0,
            _ => {}
        }
        self.check_budget();
    }

    /// Journals `task` halted by a kill of `by` (unless the journal already has it halted).
    fn halt_killed(&mut self, task: &TaskId, by: &str) -> End {
        let view = self.view().unwrap_or_default();
        let Some(t) = view.tasks.get(task).filter(|t| !t.state.is_terminal() && t.state != TaskState::Halted) else {
            return End::Halted;
        };
        let mut r = Record::task(task, TaskState::Halted);
        r.rc = Some(crate::exit::KILLED);
        r.detail = Some(format!("killed by {by}"));
        r.session_id = t.session_id.clone();
        match self.ctx.journal.append(&r.into()) {
            Ok(_) => End::Halted,
            Err(e) => End::JournalFailed(e.to_string()),
        }
    }

    /// A pipeline that panicked (or was cancelled) outside the journal: its task is journaled
    /// `halted` with what happened, so the run neither waits for it forever nor forgets it.
    fn pipeline_failed(&mut self, task: &TaskId, e: tokio::task::JoinError) -> End {
        let why = if e.is_panic() {
            let payload = e.into_panic();
            let msg = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "(no message)".into());
            format!("pipeline failed: panicked: {msg}")
        } else {
            "pipeline failed: cancelled".to_string()
        };
        tracing::error!(RUN_ID = %self.ctx.run_id, TASK = %task, detail = %why, "task pipeline failed");
        let view = self.view().unwrap_or_default();
        let t = view.tasks.get(task);
        if t.is_none_or(|t| matches!(t.state, TaskState::Committed | TaskState::Halted | TaskState::Skipped)) {
            if t.is_none() {
                self.broken.insert(task.clone(), why);
            }
            return End::Halted;
        }
        let mut r = Record::task(task, TaskState::Halted);
        r.rc = Some(1);
        r.detail = Some(why.clone());
        r.session_id = t.and_then(|t| t.session_id.clone());
        match self.ctx.journal.append(&r.into()) {
            Ok(_) => End::Halted,
            Err(je) => End::JournalFailed(format!("{why}; and its halt could not be journaled: {je}")),
        }
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

    /// Journals `run blocked` (once per blocking) when nothing runs and a halted task keeps the
    /// run from going on, with when the idle limit fails it.
    fn note_blocked(&self, view: &RunView) {
        if view.status.is_over() || view.status == RunStatus::Blocked || view.fails_at.is_some() {
            return;
        }
        if !view.tasks.values().any(|t| t.state == TaskState::Halted) {
            return;
        }
        let left = self.linger_left().unwrap_or(self.opts.linger);
        let at = humantime::format_rfc3339_millis(std::time::SystemTime::now() + left).to_string();
        let mut rec = Record::run(RunEvent::Blocked, "supervisor", Some(self.idle_reason()));
        if let journal::Body::Run(r) = &mut rec.body {
            r.fails_at = Some(at);
        }
        if let Err(e) = self.ctx.journal.append(&rec) {
            tracing::error!(RUN_ID = %self.ctx.run_id, error = %e, "cannot journal that the run is blocked");
        }
    }

    fn stopped(&mut self, detail: String) -> Ending {
        if let Err(e) = self.ctx.journal.append(&Record::run(RunEvent::Stopped, "supervisor", Some(detail.clone()))) {
            tracing::error!(RUN_ID = %self.ctx.run_id, error = %e, "cannot journal the run's end");
        }
        Ending::Stopped(detail)
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
}
