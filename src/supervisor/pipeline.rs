//! One task's way through a run: turn (wrapper) → `implemented` → gate → `gated` → review by the
//! codex verdict seat when the binding asks → `reviewed` → commit → `committed`. Any failure →
//! `halted` with rc and detail. Between stages (the turn boundary and after each step) the pipeline
//! stops when a steer is queued for the task, so the scheduler can resume the session with it; a
//! kill verb is honoured at every stage.

use super::kill;
use crate::engine::Adapter;
use crate::ids::{RunId, TaskId};
use crate::os::home::Home;
use crate::os::worktree::{self, TaskTree};
use crate::state::journal::{Journal, Record, TaskRecord, TaskState};
use crate::state::liveness::{self, LiveState, TaskLiveness};
use crate::state::plan::{Isolation, Plan, Task};
use crate::state::registry::Pointer;
use crate::wrapper;
use crate::{exit, timeouts};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Everything the pipelines of one run share.
pub(crate) struct Ctx {
    pub run_id: RunId,
    pub pointer: Pointer,
    pub plan: Plan,
    pub journal: Journal,
    pub wrappers: PathBuf,
    /// The liveness sidecar, `None` in batch mode.
    pub liveness: Option<PathBuf>,
    /// Commits are integrated onto the run's branch one at a time (and, with `isolation: shared`,
    /// made one at a time): never two git index writers in the run's worktree.
    pub commit_lock: tokio::sync::Mutex<()>,
    /// Where tasks work: their own worktrees, or the run's.
    pub isolation: Isolation,
    /// The harness home (task worktrees live under it).
    pub home: Home,
    pub turn_timeout_s: u64,
    pub gate_timeout: Duration,
    pub kill_grace: Duration,
    /// Tasks with a pipeline in progress, and the process group each is waiting on right now.
    pub running: Mutex<HashMap<TaskId, Proc>>,
    /// Asked tool calls waiting for a decision, by approval id.
    pub approvals: Mutex<HashMap<String, super::approvals::Held>>,
    /// The control socket (`None` in batch mode: nobody can be asked then).
    pub socket: Option<PathBuf>,
    /// This run instance's nonce (its `started` record; `None` for a run journaled before nonces):
    /// its task commits carry it, and only commits carrying it are adopted.
    pub nonce: Option<String>,
    /// The branch the run integrates onto (`None`: a detached HEAD) and its start commit.
    pub branch: Option<String>,
    pub start_sha: Option<String>,
    /// Whether the repository's hooks run for the tasks' commits and worktrees (plan `git_hooks`).
    pub hooks: crate::os::git::Hooks,
}

/// A task's pipeline as the kill verb sees it.
#[derive(Debug, Default)]
pub(crate) struct Proc {
    /// Process group of the wrapper / gate / reviewer running now (none between steps).
    pub pgid: Option<i32>,
    /// Set by kill (or an interrupting steer): who asked.
    pub killed_by: Option<String>,
    /// Set by the interrupt verb on a live task: who asked (the turn ends `halted`, its session whole).
    pub interrupted_by: Option<String>,
    /// The running live turn's driver (`None`: no live turn runs now, or it is closing).
    pub live: Option<tokio::sync::mpsc::Sender<super::live::LiveCmd>>,
    /// While the engine's turn runs (not its gate, review or commit): its log and when it started,
    /// for the stall watch.
    pub turn: Option<(PathBuf, std::time::SystemTime)>,
}

/// Where a pipeline starts.
#[derive(Debug, Clone)]
pub(crate) enum Start {
    /// A turn: a fresh dispatch, or a session resume carrying `prompt` (steer, recovery).
    Turn {
        prompt: String,
        resume: Option<String>,
        note: Option<String>,
    },
    Gate,
    Review,
    Commit,
    /// The task's commit exists in its worktree but is not on the run's branch yet.
    Integrate,
}

/// How a pipeline ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum End {
    Committed,
    Halted,
    /// Stopped at a boundary because a steer is queued for the task.
    Steered,
    /// The journal could not be written: the task is left as the journal says.
    JournalFailed(String),
    /// The turn ended on a rate limit (the task is halted `rate_limited: …`); when it lifts, if the
    /// engine said (Unix seconds).
    RateLimited(Option<u64>),
}

type Step<T> = Result<T, End>;

/// The wall-clock bound of a session's claude process (7 days; its idle limit ends it sooner).
const SESSION_MAX_S: u64 = 7 * 86_400;

impl Ctx {
    fn set_turn(&self, task: &TaskId, turn: Option<(PathBuf, std::time::SystemTime)>) {
        if let Some(p) = self.running.lock().unwrap_or_else(|p| p.into_inner()).get_mut(task) {
            p.turn = turn;
        }
    }

    fn killed_by(&self, task: &TaskId) -> Option<String> {
        self.running.lock().unwrap_or_else(|p| p.into_inner()).get(task).and_then(|p| p.killed_by.clone())
    }

    /// Who interrupted the task's live turn (taken: the next turn starts clean).
    fn interrupted_by(&self, task: &TaskId) -> Option<String> {
        self.running.lock().unwrap_or_else(|p| p.into_inner()).get_mut(task).and_then(|p| p.interrupted_by.take())
    }

    fn set_pgid(&self, task: &TaskId, pgid: Option<i32>) {
        if let Some(p) = self.running.lock().unwrap_or_else(|p| p.into_inner()).get_mut(task) {
            p.pgid = pgid;
        }
    }

    fn append(&self, rec: TaskRecord) -> Step<()> {
        let state = rec.state;
        let task = rec.task.clone();
        blocking(|| self.journal.append(&rec.into())).map_err(|e| {
            tracing::error!(RUN_ID = %self.run_id, TASK = %task, error = %e, "journal append failed");
            End::JournalFailed(e.to_string())
        })?;
        tracing::info!(RUN_ID = %self.run_id, TASK = %task, state = %state, "task state");
        self.live_state(&task, state.into());
        Ok(())
    }

    fn halt(&self, task: &TaskId, rc: i32, detail: String, session: Option<String>) -> End {
        let mut r = Record::task(task, TaskState::Halted);
        r.rc = Some(rc);
        r.detail = Some(detail);
        r.session_id = session;
        match self.append(r) {
            Ok(()) => End::Halted,
            Err(e) => e,
        }
    }

    /// Halts the task if a kill verb arrived.
    fn check_killed(&self, task: &TaskId, session: Option<String>) -> Step<()> {
        match self.killed_by(task) {
            Some(by) => Err(self.halt(task, exit::KILLED, format!("killed by {by}"), session)),
            None => Ok(()),
        }
    }

    /// Stops at a boundary when a steer is queued for the task.
    fn check_steered(&self, task: &TaskId) -> Step<()> {
        match blocking(|| self.journal.view()) {
            Ok(v) if v.pending_steers.iter().any(|s| &s.task == task) => Err(End::Steered),
            Ok(_) => Ok(()),
            Err(e) => Err(End::JournalFailed(e.to_string())),
        }
    }

    fn live_set(&self, task: &TaskId, pid: i32, session: Option<&str>, logfile: &Path, state: LiveState) {
        let Some(path) = &self.liveness else { return };
        let rec = TaskLiveness {
            pid,
            pgid: pid,
            session_id: session.map(str::to_string),
            logfile: logfile.to_path_buf(),
            state,
            started_ts: crate::state::journal::now_rfc3339(),
            last_output_ts: None,
        };
        if let Err(e) = blocking(|| liveness::set(path, &self.run_id, task, rec)) {
            tracing::warn!(RUN_ID = %self.run_id, TASK = %task, error = %e, "liveness write failed (a cache; going on)");
        }
    }

    fn live_state(&self, task: &TaskId, state: LiveState) {
        let Some(path) = &self.liveness else { return };
        let _ = blocking(|| {
            liveness::update(path, &self.run_id, |l| {
                if let Some(t) = l.tasks.get_mut(task) {
                    t.state = state;
                }
            })
        });
    }

    pub fn live_remove(&self, task: &TaskId) {
        let Some(path) = &self.liveness else { return };
        let _ = liveness::update(path, &self.run_id, |l| {
            l.tasks.remove(task);
        });
    }

    /// A file of the task's in one of the run's directories (`d`: its prompts or logs), the
    /// directory created. A filesystem error halts the task with its own detail (the task is
    /// `leased` or later here).
    fn file(&self, task: &TaskId, d: PathBuf, name: String, session: &Option<String>) -> Step<PathBuf> {
        match crate::os::home::private_dir(&d) {
            Ok(()) => Ok(d.join(name)),
            Err(e) => Err(self.halt(task, 1, format!("cannot create {}: {e}", d.display()), session.clone())),
        }
    }

    /// Opens a step's log for appending (`truncate`: a fresh one), halting the task when it cannot.
    fn open_log(&self, task: &TaskId, log: &Path, truncate: bool, session: &Option<String>) -> Step<(Stdio, Stdio)> {
        let opened = crate::os::home::open_private(log, !truncate).and_then(|f| Ok((f.try_clone()?, f)));
        match opened {
            Ok((a, b)) => Ok((Stdio::from(a), Stdio::from(b))),
            Err(e) => Err(self.halt(task, 1, format!("cannot open {}: {e}", log.display()), session.clone())),
        }
    }

    /// `sh -c CMD <marker>` for a gate or setup: `$0` names the run and task, so recovery can tell a
    /// step of this run's from a recycled pid. It runs with the user's environment (a gate needs
    /// its toolchain) less harness's own secrets: the command may be code the agent wrote.
    fn shell(&self, task: &TaskId, script: &str) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new("sh");
        cmd.arg("-c").arg(script).arg(format!("{}{task}", step_marker_prefix(&self.run_id)));
        for name in crate::config::SECRET_VARS {
            cmd.env_remove(name);
        }
        self.label(&mut cmd, task);
        cmd
    }

    /// Names the run and task in a child's environment (`HARNESS_RUN`, `HARNESS_TASK`): wrappers pass
    /// `HARNESS_*` on to engines, and setup and gate commands can use them.
    fn label(&self, cmd: &mut tokio::process::Command, task: &TaskId) {
        cmd.env("HARNESS_RUN", self.run_id.as_str()).env("HARNESS_TASK", task.as_str());
    }

    /// The task's worktree (`None` with `isolation: shared`).
    pub fn tree(&self, task: &TaskId) -> Option<TaskTree> {
        (self.isolation == Isolation::Worktree).then(|| worktree::of(&self.home, &self.run_id, task))
    }

    /// Where the task's turn, gate and review run.
    pub fn cwd(&self, task: &TaskId) -> PathBuf {
        self.tree(task).map_or_else(|| self.pointer.worktree.clone(), |t| t.path)
    }

    /// Spawns `cmd` (already leading its own process group) for `task`, waits for it, and returns
    /// (exit code, stdout). The process group is what a kill verb signals meanwhile.
    async fn run_child(
        &self,
        task: &TaskId,
        mut cmd: tokio::process::Command,
        log: &Path,
        session: Option<&str>,
        state: LiveState,
        timeout: Option<Duration>,
    ) -> Result<(i32, Vec<u8>), String> {
        let mut child =
            kill::spawn_tracked(&mut cmd).map_err(|e| format!("cannot start {:?}: {e}", cmd.as_std().get_program()))?;
        let pid = child.id().map(|p| p as i32).unwrap_or(0);
        self.set_pgid(task, Some(pid));
        self.live_set(task, pid, session, log, state);
        // A kill that raced the spawn still reaches the new group.
        if self.killed_by(task).is_some() {
            tokio::spawn(kill::kill_group(pid, self.kill_grace));
        }
        // stdout is read alongside; the child's exit (not its pipe's EOF, which a descendant may
        // hold) is what ends the wait.
        // A wrapper's own notes (its engine's stderr goes to the task's `.log.stderr`) are the
        // supervisor's log lines, not its terminal's: `harness run -v`, RUST_LOG or journald show them.
        if let Some(err) = child.stderr.take() {
            tokio::spawn(log_lines(err, self.run_id.clone(), task.clone()));
        }
        let reader = child.stdout.take().map(|mut out| {
            tokio::spawn(async move {
                use tokio::io::AsyncReadExt;
                let mut buf = Vec::new();
                let _ = (&mut out).take(1 << 20).read_to_end(&mut buf).await;
                buf
            })
        });
        let status = match timeout {
            Some(t) => match tokio::time::timeout(t, child.wait()).await {
                Ok(r) => r.map(|s| Some(wrapper::exit_code(s))),
                Err(_) => {
                    kill::kill_group(pid, self.kill_grace).await;
                    let _ = child.wait().await;
                    Ok(None)
                }
            },
            None => child.wait().await.map(|s| Some(wrapper::exit_code(s))),
        };
        kill::untrack_child(pid);
        // The child's group may outlive it (a wrapper killed hard leaves its engine behind): end it.
        if blocking(|| kill::group_alive(pid)) {
            tracing::warn!(RUN_ID = %self.run_id, TASK = %task, pgid = pid, "killing what the child left in its group");
            kill::kill_group(pid, self.kill_grace).await;
        }
        let stdout = match reader {
            Some(r) => {
                tokio::time::timeout(timeouts::CHILD_STDOUT, r).await.ok().and_then(|j| j.ok()).unwrap_or_default()
            }
            None => Vec::new(),
        };
        self.set_pgid(task, None);
        let waited = status.map(|rc| (rc.unwrap_or(exit::TIMED_OUT), stdout));
        waited.map_err(|e| format!("waiting for pid {pid}: {e}"))
    }
}

/// Runs blocking work (a journal append and its fsync, a liveness write, git, a `/proc` scan) without
/// stalling the async worker it is called on: the runtime moves its other tasks elsewhere meanwhile.
/// The supervisor always runs on the multi-threaded runtime.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

/// The `$0` a gate or setup shell of `run` carries, before its task id.
pub(crate) fn step_marker_prefix(run: &RunId) -> String {
    format!("harness-step:{run}:")
}

/// Runs the pipeline of `task` from `start`. The caller registered the task in `ctx.running`.
pub(crate) async fn run(ctx: Arc<Ctx>, task: Task, start: Start) -> End {
    match run_steps(&ctx, &task, start).await {
        Ok(()) => End::Committed,
        Err(end) => end,
    }
}

async fn run_steps(ctx: &Ctx, task: &Task, start: Start) -> Step<()> {
    let id = &task.id;
    let view = blocking(|| ctx.journal.view()).map_err(|e| End::JournalFailed(e.to_string()))?;
    let known = view.tasks.get(id);
    let mut session = known.and_then(|t| t.session_id.clone());
    let mut files = known.and_then(|t| t.files.clone());
    let attempt = known.map(|t| t.attempts).unwrap_or(0);
    // The attempt the review and commit belong to: the new turn's, or the last one's.
    let mut current = attempt.max(1);
    let mut stage = start;
    loop {
        ctx.check_killed(id, session.clone())?;
        stage = match stage {
            Start::Turn { prompt, resume, note } => {
                let (s, f) = turn(ctx, task, attempt + 1, &prompt, resume, note).await?;
                current = attempt + 1;
                session = s;
                files = Some(f);
                ctx.check_steered(id)?;
                Start::Gate
            }
            Start::Gate => {
                gate(ctx, task, session.clone()).await?;
                ctx.check_steered(id)?;
                if task.review { Start::Review } else { Start::Commit }
            }
            Start::Review => {
                review(ctx, task, current, session.clone()).await?;
                ctx.check_steered(id)?;
                Start::Commit
            }
            Start::Commit => {
                let files = match files.take() {
                    Some(f) => f,
                    None => blocking(|| crate::os::git::changed_files(&ctx.cwd(id))),
                };
                match commit(ctx, task, current, &files, session.clone()).await? {
                    Committed::Done => return Ok(()),
                    Committed::InWorktree => Start::Integrate,
                }
            }
            Start::Integrate => return integrate(ctx, task, session).await,
        }
    }
}

/// What the `leased` record of a turn says.
struct Lease {
    attempt: u32,
    session: Option<String>,
    logfile: PathBuf,
    note: Option<String>,
}

/// Makes the task's worktree ready and journals `leased`: the worktree (its base, and an earlier
/// attempt to carry, with its conflicts, go on the record), then `setup` on the clean tip, then the
/// carry. A failure is journaled as the turn's halt. Returns the turn's prompt.
async fn ready(ctx: &Ctx, task: &Task, lease: Lease, prompt: &str) -> Step<String> {
    let id = &task.id;
    // The worktree is made ready first: its base (and an earlier attempt carried into it) goes on
    // the `leased` record. A failure is journaled as the turn's halt.
    let prepared = workspace(ctx, task).await;
    let mut leased = Record::task(id, TaskState::Leased);
    leased.attempt = Some(lease.attempt);
    leased.session_id = lease.session.clone();
    leased.logfile = Some(lease.logfile);
    leased.detail = lease.note;
    if let Ok(p) = &prepared {
        leased.base = Some(p.base.clone());
        leased.carried = p.carry.as_ref().map(|c| crate::state::journal::Carried {
            sha: c.sha.clone(),
            conflicts: c.conflicts.iter().map(|c| conflict_path(c).to_string()).collect(),
        });
    }
    ctx.append(leased)?;
    let prepared = match prepared {
        Ok(p) => p,
        Err(e) => return Err(ctx.halt(id, 1, e, lease.session)),
    };
    ctx.check_killed(id, lease.session.clone())?;
    let cwd = ctx.cwd(id);
    let known_session = lease.session;
    if let Some(tree) = ctx.tree(id) {
        // `setup` runs on the clean tip, before an earlier attempt (and its conflict markers) is
        // carried in; it runs until it has succeeded once in this worktree.
        if worktree::needs_setup(&tree) {
            if let Some(setup) = &ctx.plan.setup {
                run_setup(ctx, task, setup, &cwd, known_session.clone()).await?;
            }
            if let Err(e) = worktree::setup_done(&tree) {
                tracing::warn!(task = %id, error = %e, "cannot record that setup ran (it runs again next turn)");
            }
        }
    }
    let prompt = match (&prepared.carry, ctx.tree(id)) {
        (Some(c), Some(tree)) => {
            let conflicts = match blocking(|| worktree::apply_carry(&tree, c)) {
                Ok(conflicts) => conflicts,
                Err(e) => {
                    let detail = format!(
                        "cannot carry the earlier attempt {} into the task worktree: {e}",
                        crate::os::git::short(&c.sha)
                    );
                    return Err(ctx.halt(id, 1, detail, known_session));
                }
            };
            carried_prompt(&c.sha, &conflicts, prompt)
        }
        // A turn continuing a redo (a steer after a halt, a restart) is told again what is left.
        (None, Some(tree)) => match worktree::carried(&tree) {
            Some((sha, conflicts)) => {
                let open = blocking(|| unresolved(&tree.path, &conflicts));
                if open.is_empty() { prompt.to_string() } else { carried_prompt(&sha, &open, prompt) }
            }
            None => prompt.to_string(),
        },
        _ => prompt.to_string(),
    };
    Ok(prompt)
}

/// The carried conflicts still open in the worktree: a marker left, or unmerged.
fn unresolved(wt: &Path, conflicts: &[String]) -> Vec<String> {
    let paths: Vec<String> = conflicts.iter().map(|c| conflict_path(c).to_string()).collect();
    let marked = crate::os::git::conflict_marked(wt, &paths);
    let unmerged = crate::os::git::unmerged_paths(wt);
    conflicts
        .iter()
        .filter(|c| {
            let p = conflict_path(c);
            marked.iter().any(|m| m == p) || unmerged.iter().any(|u| u == p)
        })
        .cloned()
        .collect()
}

/// The wrapper's permission settings for the task: its allowed tools, the permission mode of a task
/// that asks, and (a batch turn that asks) the MCP permission tool's config. Fails only when that
/// config cannot be written.
fn permissions_env(ctx: &Ctx, task: &Task, live: bool, cmd: &mut tokio::process::Command) -> std::io::Result<()> {
    let Some(env) = task.adapter.permission_env() else { return Ok(()) };
    if let Some(rules) = ctx.plan.allowed_tools(task) {
        // --allowedTools takes comma-separated rules (a rule may hold spaces).
        cmd.env(env.allowed_tools, rules.join(","));
    }
    // A task that asks runs in the default permission mode: only its allowed tools run unasked
    // (acceptEdits would let every edit through).
    if ctx.plan.asks(task) {
        cmd.env(env.mode, "default");
    }
    // A batch turn that asks: the engine's permission prompts go to our MCP permission tool.
    if !live
        && ctx.plan.asks(task)
        && let Some(path) = permission_mcp_config(ctx, &task.id)?
    {
        cmd.env(env.mcp_config, path);
    }
    Ok(())
}

/// Halts a turn the engine's rate limit stopped, saying when it lifts (when the engine said).
fn rate_limited(
    ctx: &Ctx,
    id: &TaskId,
    rc: i32,
    l: &crate::engine::ratelimit::Limited,
    session: Option<String>,
) -> End {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_secs();
    let resets_at = l.resets_at.map(|t| clamp_reset(t, now));
    let when = resets_at
        .map(|(t, clamped)| {
            let note = if clamped {
                format!("; the engine said {}, clamped to 24 h", unix_time(l.resets_at.unwrap_or(t)))
            } else {
                String::new()
            };
            format!(" (lifts at {}{note})", unix_time(t))
        })
        .unwrap_or_default();
    match ctx.halt(id, rc, format!("rate_limited: {}{when}", l.said), session) {
        End::Halted => End::RateLimited(resets_at.map(|(t, _)| t)),
        other => other,
    }
}

/// Unix seconds as RFC 3339 (`2026-12-05T16:04:43Z`); a time past the year 9999, which RFC 3339
/// cannot write, as its seconds, saying so.
fn unix_time(t: u64) -> String {
    /// 9999-12-31T23:59:59Z.
    const LAST: u64 = 253_402_300_799;
    if t > LAST {
        return format!("{t} s after 1970 (past the year 9999)");
    }
    humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + Duration::from_secs(t)).to_string()
}

/// The longest a rate limit is waited out, whatever the engine said.
const RESET_MAX_S: u64 = 24 * 3600;

/// An engine's reset time (Unix seconds) at most 24 h after `now`; true when it was later.
fn clamp_reset(t: u64, now: u64) -> (u64, bool) {
    let max = now.saturating_add(RESET_MAX_S);
    if t > max { (max, true) } else { (t, false) }
}

/// One wrapper turn. Returns the session id and the changed files.
async fn turn(
    ctx: &Ctx,
    task: &Task,
    attempt: u32,
    prompt: &str,
    resume: Option<String>,
    note: Option<String>,
) -> Step<(Option<String>, Vec<String>)> {
    let id = &task.id;
    // claude's session is assigned before the turn, so kill-then-resume works before any token.
    let assigned = (resume.is_none() && task.adapter.assigns_session_id()).then(|| uuid::Uuid::new_v4().to_string());
    let logfile = ctx.pointer.default_logfile(id);
    if let Some(d) = logfile.parent() {
        let _ = crate::os::home::private_dir(d);
    }
    let known_session = resume.clone().or_else(|| assigned.clone());
    let lease = Lease { attempt, session: known_session.clone(), logfile: logfile.clone(), note };
    let prompt = ready(ctx, task, lease, prompt).await?;
    let cwd = ctx.cwd(id);
    let prompt = prompt.as_str();
    let prompt_file = ctx.file(id, ctx.pointer.prompts_dir(), format!("{id}.{attempt}.txt"), &known_session)?;
    if let Err(e) = crate::os::home::write_private(&prompt_file, prompt.as_bytes()) {
        return Err(ctx.halt(id, 1, format!("cannot write {}: {e}", prompt_file.display()), known_session));
    }
    let live = ctx.plan.is_live(task);
    let fifo = if live {
        match super::live::make_fifo(&ctx.pointer.runstate_dir, ctx.pointer.slug.as_str(), id) {
            Ok(p) => Some(p),
            Err(e) => {
                return Err(ctx.halt(id, exit::NOT_RUN, format!("cannot make the live channel: {e}"), known_session));
            }
        }
    } else {
        None
    };
    let t = wrapper::Turn {
        adapter: task.adapter,
        prompt_file: &prompt_file,
        cwd: &cwd,
        log: &logfile,
        // A session's one process lives as long as the session (its idle limit ends it).
        timeout_s: if ctx.plan.session.is_some() { SESSION_MAX_S } else { ctx.turn_timeout_s },
        model: task.model.as_deref(),
        session_id: assigned.as_deref(),
        resume: resume.as_deref(),
        input: fifo.as_deref(),
    };
    private_logs(t.log);
    let mut cmd = wrapper::command(&ctx.wrappers, &t);
    ctx.label(&mut cmd, id);
    if let Err(e) = permissions_env(ctx, task, live, &mut cmd) {
        return Err(ctx.halt(id, exit::NOT_RUN, format!("cannot write the approvals MCP config: {e}"), known_session));
    }
    let offset = std::fs::metadata(&logfile).map(|m| m.len()).unwrap_or(0);
    ctx.set_turn(id, Some((logfile.clone(), std::time::SystemTime::now())));
    let ran = match &fifo {
        None => ctx.run_child(id, cmd, &logfile, known_session.as_deref(), LiveState::Leased, None).await,
        Some(fifo) => live_turn(ctx, id, cmd, fifo, prompt, &logfile, offset, known_session.as_deref()).await,
    };
    ctx.set_turn(id, None);
    if let Some(f) = &fifo {
        let _ = std::fs::remove_file(f);
    }
    let (rc, stdout) = match ran {
        Ok(r) => r,
        Err(e) => return Err(ctx.halt(id, exit::NOT_RUN, format!("wrapper did not run: {e}"), known_session)),
    };
    let out = wrapper::Outcome { rc, status: wrapper::parse_status(&stdout) };
    let session = out.status.as_ref().and_then(|s| s.session_id.clone()).or(known_session);
    // File reads (bounded), off the async worker's turn.
    tokio::task::block_in_place(|| ensure_exit_marker(&logfile, offset, rc, session.as_deref()));
    if let Some(by) = ctx.killed_by(id) {
        return Err(ctx.halt(id, rc, format!("killed by {by}"), session));
    }
    if let Some(by) = ctx.interrupted_by(id) {
        return Err(ctx.halt(id, rc, format!("interrupted by {by}"), session));
    }
    // Only this turn's lines (the log holds every earlier turn too), and of a long turn only its
    // last lines: where its end, error and rate limit are (a session may run for days).
    let turn_lines = tokio::task::block_in_place(|| crate::os::tail::last_lines(&logfile, offset, TURN_TAIL));
    if let Some(l) = crate::engine::ratelimit::of_turn(task.adapter, &turn_lines) {
        return Err(rate_limited(ctx, id, rc, &l, session));
    }
    if rc != 0 {
        let detail = with_engine_words(out.detail(), task.adapter, &turn_lines, &logfile);
        return Err(ctx.halt(id, rc, detail, session));
    }
    let status = out.status.clone().unwrap_or(wrapper::Status {
        ok: true,
        session_id: None,
        detail: String::new(),
        files: Vec::new(),
    });
    // A codex task is itself a verdict seat: its turn's result is the verdict.
    if task.adapter.is_verdict_seat() && !status.detail.starts_with("APPROVE") {
        return Err(ctx.halt(id, rc, format!("verdict: {}", status.detail), session));
    }
    ctx.append(implemented(id, &session, &status))?;
    Ok((session, status.files))
}

/// How much of a turn's end the turn-end checks (rate limit, the engine's error) read.
const TURN_TAIL: usize = 8 << 20;

/// Longest engine text a halt's detail carries.
const ENGINE_WORDS_MAX: usize = 300;

/// `detail` (the wrapper's) with what the engine itself said: its error line from the turn's
/// lines, else the last lines of its stderr; bounded, and with the values of secret-looking
/// environment variables (tokens, keys, passwords) masked.
fn with_engine_words(detail: String, adapter: crate::engine::Adapter, turn: &[u8], log: &Path) -> String {
    let said = crate::engine::failure::last_error(adapter, turn).or_else(|| stderr_tail(log, &detail));
    // Masked whole (before any cut, so no part of a secret survives it), then printable only.
    let env: Vec<(String, String)> = std::env::vars().collect();
    let detail = printable(&mask_secrets(&detail, env.iter().cloned()));
    match said.map(|s| printable(&mask_secrets(&s, env.into_iter()))) {
        None => detail,
        Some(said) if said.is_empty() || detail.contains(&said) => detail,
        Some(mut said) => {
            if said.chars().count() > ENGINE_WORDS_MAX {
                said = said.chars().take(ENGINE_WORDS_MAX).collect::<String>() + "…";
            }
            format!("{detail}: {said}")
        }
    }
}

/// The last non-empty lines of the turn's `<log>.stderr` (its last 4 KiB) that `detail` does not
/// quote already, joined.
fn stderr_tail(log: &Path, detail: &str) -> Option<String> {
    let path = PathBuf::from(format!("{}.stderr", log.display()));
    let len = std::fs::metadata(&path).ok()?.len();
    let bytes = crate::os::tail::read_from(&path, len.saturating_sub(4096), None);
    let text = String::from_utf8_lossy(&bytes);
    let lines: Vec<&str> = text.lines().map(str::trim).filter(|l| !l.is_empty() && !detail.contains(l)).collect();
    let tail = lines[lines.len().saturating_sub(3)..].join(" | ");
    (!tail.is_empty()).then_some(tail)
}

/// `text` with every value (8 characters or more) of an environment variable whose name says it is
/// a secret (`…TOKEN…`, `…SECRET…`, `…PASSWORD…`, `…CREDENTIAL…`, `…_KEY`, `…API_KEY…`) replaced by
/// `[redacted]`, each line of a multi-line value too.
fn mask_secrets(text: &str, env: impl Iterator<Item = (String, String)>) -> String {
    let secret = |name: &str| {
        ["TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "API_KEY", "PRIVATE_KEY"]
            .iter()
            .any(|s| name.contains(s))
            || name.ends_with("_KEY")
    };
    let mut out = text.to_string();
    for (k, v) in env {
        if !secret(&k.to_ascii_uppercase()) {
            continue;
        }
        for part in std::iter::once(v.as_str()).chain(v.lines()).map(str::trim) {
            if part.len() >= 8 && out.contains(part) {
                out = out.replace(part, "[redacted]");
            }
        }
    }
    out
}

/// `text` without control characters and terminal escape sequences (a detail is printed to
/// terminals): CSI and OSC sequences dropped, other controls made spaces.
fn printable(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\u{1b}' => match chars.peek() {
                // CSI: ESC [ … final byte @–~.
                Some('[') => {
                    chars.next();
                    for n in chars.by_ref() {
                        if ('@'..='~').contains(&n) {
                            break;
                        }
                    }
                }
                // OSC: ESC ] … BEL or ESC \.
                Some(']') => {
                    chars.next();
                    while let Some(n) = chars.next() {
                        if n == '\u{7}' || (n == '\u{1b}' && chars.next_if_eq(&'\\').is_some()) {
                            break;
                        }
                    }
                }
                _ => {
                    chars.next();
                }
            },
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// The `implemented` record of a turn that ended well.
fn implemented(id: &TaskId, session: &Option<String>, status: &wrapper::Status) -> TaskRecord {
    let mut r = Record::task(id, TaskState::Implemented);
    r.rc = Some(0);
    r.session_id = session.clone();
    r.detail = Some(status.detail.clone());
    r.files = Some(status.files.clone());
    r
}

/// Whether `prompt` is the plan's own prompt of `task` (a first dispatch), not a steer's message.
fn resumed_prompt_is_plan(ctx: &Ctx, task: &TaskId, prompt: &str) -> bool {
    ctx.plan.task(task).is_some_and(|t| t.prompt == prompt)
}

/// Makes a turn's log and its `.stderr` (0600) before the wrapper appends the engine's output to
/// them, so they are the user's only whatever umask the engine keeps. A failure is the wrapper's to
/// report (it exits 2 naming the file).
/// Logs each line a child writes on `err` (at most 4 KiB of each) as the task's, until EOF.
async fn log_lines(err: tokio::process::ChildStderr, run_id: RunId, task: TaskId) {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt};
    let mut r = tokio::io::BufReader::new(err);
    let mut line = Vec::new();
    loop {
        line.clear();
        match (&mut r).take(4096).read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                let text = String::from_utf8_lossy(&line);
                let text = text.trim_end();
                if !text.is_empty() {
                    tracing::info!(RUN_ID = %run_id, TASK = %task, "{text}");
                }
            }
        }
    }
}

fn private_logs(log: &Path) {
    let stderr = PathBuf::from(format!("{}.stderr", log.display()));
    for p in [log, stderr.as_path()] {
        let _ = crate::os::home::open_private(p, true);
    }
}

/// The `--mcp-config` file that makes `harness approval-mcp` claude's permission tool for `task`'s
/// batch turn: `<runstateDir>/<slug>.approvals/<task>.mcp.json`. `None` without a control socket
/// (batch mode: nobody to ask, claude denies as without a prompt tool).
fn permission_mcp_config(ctx: &Ctx, task: &TaskId) -> std::io::Result<Option<PathBuf>> {
    let Some(sock) = &ctx.socket else { return Ok(None) };
    let exe = std::env::current_exe()?;
    let dir = ctx.pointer.approvals_dir();
    crate::os::home::private_dir(&dir)?;
    let wait = ctx.plan.approval_timeout().as_secs() + 60;
    let config = serde_json::json!({"mcpServers": {"harness": {
        "type": "stdio",
        "command": exe,
        "args": ["approval-mcp", "--socket", sock, "--task", task.as_str(), "--wait", wait.to_string()],
    }}});
    let path = dir.join(format!("{task}.mcp.json"));
    crate::os::home::write_atomic(&path, serde_json::to_string_pretty(&config).expect("JSON").as_bytes(), 0o600)?;
    Ok(Some(path))
}

/// A turn on the live channel: the wrapper and the channel's driver run together; the driver is
/// reachable by the scheduler (`Proc::live`) until it closes the channel or the wrapper exits.
#[allow(clippy::too_many_arguments)]
async fn live_turn(
    ctx: &Ctx,
    id: &TaskId,
    cmd: tokio::process::Command,
    fifo: &Path,
    prompt: &str,
    log: &Path,
    offset: u64,
    session: Option<&str>,
) -> Result<(i32, Vec<u8>), String> {
    // Read-write, so opening does not wait for claude and claude sees EOF only when it is closed
    // (or this process dies). Close-on-exec: the wrapper must not hold a writing end.
    let writer = tokio::net::unix::pipe::OpenOptions::new()
        .read_write(true)
        .open_sender(fifo)
        .map_err(|e| format!("cannot open the live channel {}: {e}", fifo.display()))?;
    let (tx, rx) = tokio::sync::mpsc::channel(super::live::QUEUE);
    let me = tx.clone();
    if let Some(p) = ctx.running.lock().unwrap_or_else(|p| p.into_inner()).get_mut(id) {
        p.live = Some(tx);
    }
    let driver = super::live::Driver {
        ctx,
        task: id,
        writer: Some(writer),
        rx,
        log: log.to_path_buf(),
        offset,
        outstanding: Default::default(),
        steers: Default::default(),
        me,
        waiting: Default::default(),
        session: ctx.plan.session.map(|s| std::time::Duration::from_secs(s.idle_s)),
        idle_since: None,
        want_close: false,
    };
    let (done_tx, done_rx) = tokio::sync::watch::channel(false);
    let prompt_id = uuid::Uuid::new_v4().to_string();
    let child = async {
        let r = ctx.run_child(id, cmd, log, session, LiveState::Leased, None).await;
        let _ = done_tx.send(true);
        r
    };
    // A session started without a prompt waits for its first message.
    let first = if ctx.plan.session.is_some_and(|s| !s.prompt) && resumed_prompt_is_plan(ctx, id, prompt) {
        None
    } else {
        Some(prompt)
    };
    let (ran, ()) = tokio::join!(child, driver.run(first, &prompt_id, done_rx));
    if let Some(p) = ctx.running.lock().unwrap_or_else(|p| p.into_inner()).get_mut(id) {
        p.live = None;
    }
    ran
}

async fn gate(ctx: &Ctx, task: &Task, session: Option<String>) -> Step<()> {
    let id = &task.id;
    let mut gated = Record::task(id, TaskState::Gated);
    gated.rc = Some(0);
    let Some(cmd_text) = &task.gate else {
        gated.detail = Some("no gate".into());
        return ctx.append(gated);
    };
    let log = ctx.file(id, ctx.pointer.logs_dir(), format!("{id}.gate.log"), &session)?;
    let (out, err) = ctx.open_log(id, &log, false, &session)?;
    let mut cmd = ctx.shell(id, cmd_text);
    cmd.current_dir(ctx.cwd(id)).stdin(Stdio::null()).stdout(out).stderr(err).process_group(0);
    let (rc, _) =
        match ctx.run_child(id, cmd, &log, session.as_deref(), LiveState::Gating, Some(ctx.gate_timeout)).await {
            Ok(r) => r,
            Err(e) => return Err(ctx.halt(id, exit::NOT_RUN, format!("gate did not run: {e}"), session)),
        };
    ctx.check_killed(id, session.clone())?;
    if rc != 0 {
        let why = if rc == exit::TIMED_OUT { "timed out".to_string() } else { format!("exit {rc}") };
        return Err(ctx.halt(id, rc, format!("gate failed ({why}): {cmd_text}"), session));
    }
    gated.detail = Some(format!("gate passed: {cmd_text}"));
    ctx.append(gated)
}

async fn review(ctx: &Ctx, task: &Task, attempt: u32, session: Option<String>) -> Step<()> {
    let id = &task.id;
    let cwd = ctx.cwd(id);
    let view = blocking(|| ctx.journal.view()).map_err(|e| End::JournalFailed(e.to_string()))?;
    let base = match blocking(|| base_of(ctx, &view, id, &cwd)) {
        Ok(b) => b,
        Err(e) => return Err(ctx.halt(id, 1, format!("review: cannot tell the task's base: {e}"), session)),
    };
    let diff = blocking(|| crate::os::git::review_diff(&cwd, &base));
    let prompt = format!(
        "You are the review seat for task {id} of run {}.\n\nThe task was:\n{}\n\nThe change:\n{diff}\n\n\
         Answer on the first line with exactly APPROVE, or REJECT: <reason>. Then explain briefly.\n",
        ctx.run_id, task.prompt
    );
    let prompt_file = ctx.file(id, ctx.pointer.prompts_dir(), format!("{id}.{attempt}.review.txt"), &session)?;
    if let Err(e) = crate::os::home::write_private(&prompt_file, prompt.as_bytes()) {
        return Err(ctx.halt(id, 1, format!("cannot write {}: {e}", prompt_file.display()), session));
    }
    let log = ctx.file(id, ctx.pointer.logs_dir(), format!("{id}.review.log"), &session)?;
    let t = wrapper::Turn {
        adapter: Adapter::REVIEWER,
        prompt_file: &prompt_file,
        cwd: &cwd,
        log: &log,
        timeout_s: ctx.turn_timeout_s,
        model: None,
        session_id: None,
        resume: None,
        input: None,
    };
    private_logs(t.log);
    let cmd = wrapper::command(&ctx.wrappers, &t);
    let (rc, stdout) = match ctx.run_child(id, cmd, &log, None, LiveState::Reviewing, None).await {
        Ok(r) => r,
        Err(e) => return Err(ctx.halt(id, exit::NOT_RUN, format!("review seat did not run: {e}"), session)),
    };
    ctx.check_killed(id, session.clone())?;
    let out = wrapper::Outcome { rc, status: wrapper::parse_status(&stdout) };
    if rc != 0 {
        return Err(ctx.halt(id, rc, format!("review seat failed: {}", out.detail()), session));
    }
    let verdict = out.detail();
    if !verdict.starts_with("APPROVE") {
        return Err(ctx.halt(id, rc, format!("review rejected: {verdict}"), session));
    }
    let mut r = Record::task(id, TaskState::Reviewed);
    r.rc = Some(0);
    r.detail = Some(verdict);
    ctx.append(r)
}

/// The path of a conflict as `git::carry` describes it (`shared.txt (both added), against …`; what
/// follows the last `)` names a commit and a task id, which hold no parenthesis).
fn conflict_path(c: &str) -> &str {
    crate::os::git::conflict_path_of(c.rfind(')').map_or(c, |i| &c[..=i]))
}

/// The prompt of a redo that starts with its earlier attempt applied.
fn carried_prompt(sha: &str, conflicts: &[String], prompt: &str) -> String {
    let mut s = format!(
        "Your earlier attempt at this task (commit {}) could not be integrated: the run's branch had moved. \
         This worktree now starts at the current tip with your earlier change applied as uncommitted changes",
        crate::os::git::short(sha)
    );
    if conflicts.is_empty() {
        s.push_str(" (it applied cleanly).");
    } else {
        s.push_str(
            ". These paths conflict with the tip: resolve each, keeping what both sides need. A path holding git's \
             conflict markers must be left with none; one unmerged in the index (no markers: a binary file, or \
             deleted on one side) has both versions at hand (`git checkout --ours PATH` is the tip's, `--theirs` \
             your earlier attempt's): put the right content in place and `git add` it (or `git rm` it). Nothing is \
             committed while a marker or an unmerged path is left:\n",
        );
        for c in conflicts {
            s.push_str(&format!("- {c}\n"));
        }
    }
    s.push_str("\n\n");
    s.push_str(prompt);
    s
}

/// Journals the task `committed` with nothing committed (`no_changes`), saying why.
fn commit_nothing(ctx: &Ctx, id: &TaskId, why: &str) -> Step<Committed> {
    let mut r = Record::task(id, TaskState::Committed);
    r.no_changes = Some(true);
    r.detail = Some(why.into());
    ctx.append(r)?;
    Ok(Committed::Done)
}

/// How a commit step ended.
pub(crate) enum Committed {
    /// `committed` is journaled (on the run's branch with `isolation: shared`, or nothing to commit).
    Done,
    /// The task's commit is in its worktree: integration follows.
    InWorktree,
}

/// The task's base, as its last `leased` record says (a task of a run journaled before bases were
/// recorded: where its worktree left the run's branch).
fn base_of(ctx: &Ctx, view: &crate::state::journal::RunView, id: &TaskId, cwd: &Path) -> Result<String, String> {
    if let Some(b) = view.tasks.get(id).and_then(|t| t.base.clone()) {
        return Ok(b);
    }
    let run_tip = crate::os::git::head(&ctx.pointer.worktree).map_err(|e| e.to_string())?;
    crate::os::git::run(cwd, &["merge-base", "HEAD", &run_tip]).map(|s| s.trim().to_string()).map_err(|e| e.to_string())
}

/// Commits the task's change where it worked, exactly once: a commit of this run instance's task
/// above its base that already exists (made by a supervisor that died before journaling it) is
/// adopted, never made again. The change is everything between the task's base and its end state
/// (`git::squash`). A verdict seat never commits, and an end state equal to the base commits nothing
/// (`committed` with `no_changes`). With `isolation: shared` the commit is on the run's branch and
/// the task is `committed`; in a worktree it is on the task branch, kept as the attempt's ref, and
/// `integrate` follows.
async fn commit(ctx: &Ctx, task: &Task, attempt: u32, files: &[String], session: Option<String>) -> Step<Committed> {
    let id = &task.id;
    if task.adapter.is_verdict_seat() {
        let done = commit_nothing(ctx, id, "verdict seat: a review never commits")?;
        remove_worktree(ctx, id).await;
        return Ok(done);
    }
    let shared = ctx.isolation == Isolation::Shared;
    // Commits in the run's worktree are serialized; each task worktree has its own index.
    let _serial = if shared { Some(ctx.commit_lock.lock().await) } else { None };
    ctx.check_killed(id, session.clone())?;
    let subject = task.subject();
    let wt = ctx.cwd(id);
    if !wt.is_dir() {
        return worktree_gone(ctx, id, &wt, files, session);
    }
    let view = blocking(|| ctx.journal.view()).map_err(|e| End::JournalFailed(e.to_string()))?;
    let base = blocking(|| base_of(ctx, &view, id, &wt))
        .map_err(|e| ctx.halt(id, 1, format!("commit failed: cannot tell the task's base: {e}"), session.clone()))?;
    let carried = view.tasks.get(id).and_then(|t| t.carried.clone());
    let tree = ctx.tree(id);
    let force = match (&carried, &tree) {
        (Some(_), Some(t)) => worktree::carried_new_files(t),
        _ => Vec::new(),
    };
    let made = blocking(|| -> Result<(crate::os::git::Squashed, bool), String> {
        let _lock = shared.then(|| worktree::integration_lock(&wt)).transpose().map_err(|e| e.to_string())?;
        quiet_worktree(id, &wt, tree.as_ref());
        let owner = crate::os::git::Owner {
            run: ctx.run_id.as_str(),
            task: id.as_str(),
            nonce: ctx.nonce.as_deref(),
            since: Some(&base),
        };
        if let Some(sha) = crate::os::git::find_own_commit(&wt, &owner) {
            return Ok((crate::os::git::Squashed::Commit(sha), true));
        }
        if shared {
            worktree::check_branch(&wt, ctx.branch.as_deref()).map_err(|e| e.to_string())?;
        }
        let marked = carried.as_ref().map(|c| redo_markers(&wt, &base, &c.sha)).unwrap_or_default();
        if !marked.is_empty() {
            return Err(crate::os::git::SquashError::Unresolved(marked).to_string());
        }
        let task_branch = tree.as_ref().map(|t| t.branch.clone());
        let sq = crate::os::git::Squash {
            base: &base,
            branch: if shared { ctx.branch.as_deref() } else { task_branch.as_deref() },
            paths: shared.then_some(files),
            listed: files,
            subject: &subject,
            owner,
            attempt,
            hooks: ctx.hooks,
            force: &force,
            keep_history: shared,
        };
        crate::os::git::squash(&wt, &sq).map(|s| (s, false)).map_err(|e| e.to_string())
    });
    let (made, adopted) = match made {
        Ok(r) => r,
        Err(e) => return Err(ctx.halt(id, 1, format!("commit failed: {e}"), session)),
    };
    let (sha, kept) = match made {
        crate::os::git::Squashed::NoChanges
            if let Some(c) = carried
                && !tree.as_ref().is_some_and(|t| worktree::empty_redo_halted(t, true)) =>
        {
            return Err(redo_lost_its_attempt(ctx, id, &c.sha, session));
        }
        crate::os::git::Squashed::NoChanges => {
            let done =
                commit_nothing(ctx, id, "no changes: the task's end state equals its base; nothing was committed")?;
            remove_worktree(ctx, id).await;
            return Ok(done);
        }
        crate::os::git::Squashed::Commit(sha) => (sha, false),
        crate::os::git::Squashed::Kept(sha) => (sha, true),
    };
    if !shared {
        tracing::info!(RUN_ID = %ctx.run_id, TASK = %id, sha = %sha, adopted, "committed in the task worktree");
        let (run_wt, name) = (ctx.pointer.worktree.clone(), worktree::attempt_ref(&ctx.run_id, id, attempt));
        if let Err(e) = blocking(|| crate::os::git::set_ref(&run_wt, &name, &sha)) {
            tracing::warn!(RUN_ID = %ctx.run_id, TASK = %id, error = %e, "cannot keep the attempt's ref (its branch keeps it)");
        }
        return Ok(Committed::InWorktree);
    }
    let mut r = Record::task(id, TaskState::Committed);
    r.sha = Some(sha);
    if adopted {
        r.detail = Some("the commit already existed (made before a supervisor restart): adopted".into());
    } else if kept {
        r.detail = Some(
            "commits were made in the checkout during the turn (by the agent, or by you) and nothing was left uncommitted: they stay as they are, and sha is the branch's head after them (isolation: shared never rewrites the checkout's history)"
                .into(),
        );
    }
    ctx.append(r)?;
    Ok(Committed::Done)
}

/// The paths of a redo that hold a conflict marker line its earlier attempt (`attempt`) did not:
/// every path changed since `base`, not only those that conflicted (an agent may have moved a
/// marked file), while a file the task wrote with marker-like lines itself (a test fixture) is its
/// own content.
fn redo_markers(wt: &Path, base: &str, attempt: &str) -> Vec<String> {
    let mut marked = crate::os::git::conflict_marked(wt, &crate::os::git::changed_since(wt, base));
    marked.retain(|p| crate::os::git::blob(wt, attempt, p) != std::fs::read(wt.join(p)).ok());
    marked
}

/// Halts a redo whose end state is its base: nothing of its earlier attempt is left, which is a
/// choice for a person (the attempt is kept), not "no changes".
fn redo_lost_its_attempt(ctx: &Ctx, id: &TaskId, sha: &str, session: Option<String>) -> End {
    let detail = format!(
        "commit failed: the redo ends where it started, without its earlier attempt {} (kept under {}{id}/): nothing was committed or deleted; steer with what to keep, or steer again to confirm the task needs none of it (the attempt is then dropped)",
        crate::os::git::short(sha),
        worktree::refs_prefix(&ctx.run_id)
    );
    ctx.halt(id, 1, detail, session)
}

/// Waits out (or, in a task's own worktree, clears) what a git killed with an earlier supervisor
/// left: a stopped rebase, stale locks, a commit still finishing in the run's worktree.
fn quiet_worktree(id: &TaskId, wt: &Path, tree: Option<&worktree::TaskTree>) {
    match tree {
        Some(t) => {
            worktree::settle(t);
            for l in crate::os::git::clear_stale_locks(wt, &t.branch, timeouts::STALE_LOCK_WAIT) {
                tracing::warn!(task = %id, lock = %l.display(), "removed a stale git lock left in the task's worktree");
            }
        }
        None => {
            crate::os::git::wait_index_unlocked(wt, timeouts::INDEX_LOCK_WAIT);
        }
    }
}

/// The commit step of a task whose worktree is gone. Only a lost record or a user's `rm` gets
/// here: the run end removes a worktree after its task's `committed` record. A turn that reported
/// nothing had nothing to lose; one that reported files halts, naming them.
fn worktree_gone(ctx: &Ctx, id: &TaskId, wt: &Path, files: &[String], session: Option<String>) -> Step<Committed> {
    if files.is_empty() {
        return commit_nothing(
            ctx,
            id,
            "no changes: the task's worktree is gone and its turn reported no files; nothing was committed",
        );
    }
    let detail = format!(
        "commit failed: the task's worktree {} is gone, and with it the turn's changes to {}; nothing was committed (`harness steer` redoes the task)",
        wt.display(),
        files.join(", ")
    );
    Err(ctx.halt(id, 1, detail, session))
}

/// Removes an integrated (or nothing-to-commit) task's worktree, branch and refs; a failure is
/// logged (the run's end tries again).
async fn remove_worktree(ctx: &Ctx, id: &TaskId) {
    let Some(tree) = ctx.tree(id) else { return };
    let (run_wt, run, tid) = (ctx.pointer.worktree.clone(), ctx.run_id.clone(), id.clone());
    let removed = tokio::task::spawn_blocking(move || worktree::remove(&run_wt, &tree, &run, &tid)).await;
    if let Ok(Err(e)) = removed {
        tracing::warn!(RUN_ID = %ctx.run_id, TASK = %id, error = %e, "cannot remove the task worktree (removed when the run ends)");
    }
}

/// Brings the task's commit onto the run's branch, one integrator at a time across every run of the
/// repository: fast-forward, or a rebase onto the tip. Exactly once: a commit of this run instance's
/// task already on the run's branch (above the run's start) is adopted. A conflict halts the task
/// naming every conflicting path and the tip; the task's worktree and its attempt are kept (a steer
/// or retry redoes it at the current tip with the attempt applied). A change the tip already holds
/// is `committed` with `no_changes`. After integration the task's worktree, branch and refs go.
async fn integrate(ctx: &Ctx, task: &Task, session: Option<String>) -> Step<()> {
    let id = &task.id;
    let Some(tree) = ctx.tree(id) else { return Ok(()) };
    let _integrator = ctx.commit_lock.lock().await;
    ctx.check_killed(id, session.clone())?;
    let run_wt = ctx.pointer.worktree.clone();
    let base =
        blocking(|| ctx.journal.view().map_err(|e| e.to_string()).and_then(|v| base_of(ctx, &v, id, &tree.path))).ok();
    let done = blocking(|| -> Result<(Option<String>, bool), String> {
        let owner = crate::os::git::Owner {
            run: ctx.run_id.as_str(),
            task: id.as_str(),
            nonce: ctx.nonce.as_deref(),
            since: ctx.start_sha.as_deref(),
        };
        if let Some(sha) = crate::os::git::find_own_commit(&run_wt, &owner) {
            return Ok((Some(sha), true));
        }
        worktree::settle(&tree);
        let in_tree = crate::os::git::Owner { since: base.as_deref(), ..owner };
        if crate::os::git::find_own_commit(&tree.path, &in_tree).is_none() {
            return Err(format!("no commit of task {id} in its worktree {}", tree.path.display()));
        }
        match worktree::integrate(&run_wt, &tree.path, ctx.branch.as_deref()) {
            Ok(crate::os::git::Integrated::Commit(sha)) => Ok((Some(sha), false)),
            Ok(crate::os::git::Integrated::Empty) => Ok((None, false)),
            Err(crate::os::git::IntegrateError::Git(g)) => Err(format!("integration failed: {g}")),
            Err(e) => Err(e.to_string()),
        }
    });
    let (sha, adopted) = match done {
        Ok(r) => r,
        Err(detail) => return Err(ctx.halt(id, 1, detail, session)),
    };
    let mut r = Record::task(id, TaskState::Committed);
    match sha {
        Some(sha) => r.sha = Some(sha),
        None => {
            r.no_changes = Some(true);
            r.detail = Some("no changes: the run's branch holds this change already; nothing was added".into());
        }
    }
    if adopted {
        r.detail = Some("the commit was already on the run's branch (integrated before a supervisor restart)".into());
    }
    ctx.append(r)?;
    remove_worktree(ctx, id).await;
    Ok(())
}

/// Makes the task's worktree ready for its turn (reused, or made afresh from the run's tip, with an
/// earlier unintegrated attempt applied) — or, with `isolation: shared`, takes the run's tip as the
/// base. `Err` is the halt's detail.
async fn workspace(ctx: &Ctx, task: &Task) -> Result<worktree::Prepared, String> {
    let id = &task.id;
    let Some(tree) = ctx.tree(id) else {
        let wt = ctx.pointer.worktree.clone();
        return blocking(|| crate::os::git::head(&wt))
            .map(|base| worktree::Prepared { base, carry: None })
            .map_err(|e| format!("cannot read the run's tip: {e}"));
    };
    let (run_wt, t, run, tid) = (ctx.pointer.worktree.clone(), tree.clone(), ctx.run_id.clone(), id.clone());
    let (nonce, hooks) = (ctx.nonce.clone(), ctx.hooks);
    tokio::task::spawn_blocking(move || {
        let r = worktree::Ready { run: &run, task: &tid, nonce: nonce.as_deref(), hooks };
        worktree::prepare(&run_wt, &t, &r)
    })
    .await
    .map_err(|e| e.to_string())
    .and_then(|r| r.map_err(|e| e.to_string()))
    .map_err(|e| format!("cannot prepare the task worktree {}: {e}", tree.path.display()))
}

/// Runs the plan's `setup` in a fresh worktree; a failure halts the task with its rc and the
/// output's tail.
async fn run_setup(ctx: &Ctx, task: &Task, setup: &str, cwd: &Path, session: Option<String>) -> Step<()> {
    let id = &task.id;
    let log = ctx.file(id, ctx.pointer.logs_dir(), format!("{id}.setup.log"), &session)?;
    let (out, err) = ctx.open_log(id, &log, true, &session)?;
    let mut cmd = ctx.shell(id, setup);
    cmd.current_dir(cwd).stdin(Stdio::null()).stdout(out).stderr(err).process_group(0);
    let rc = match ctx.run_child(id, cmd, &log, session.as_deref(), LiveState::Leased, Some(ctx.gate_timeout)).await {
        Ok((rc, _)) => rc,
        Err(e) => return Err(ctx.halt(id, exit::NOT_RUN, format!("setup did not run: {e}"), session)),
    };
    ctx.check_killed(id, session.clone())?;
    if rc != 0 {
        let text = String::from_utf8_lossy(&crate::os::tail::last_lines(&log, 0, 64 * 1024)).into_owned();
        let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        let tail = lines[lines.len().saturating_sub(5)..].join(" | ");
        let why = if rc == exit::TIMED_OUT { "timed out".to_string() } else { format!("exit {rc}") };
        return Err(ctx.halt(id, rc, format!("setup failed ({why}): {setup}: {tail}"), session));
    }
    Ok(())
}

/// A wrapper killed hard (or before its trap was set) writes no exit marker: the supervisor, now the
/// log's only writer, appends it so every turn's stream ends with `exit`.
fn ensure_exit_marker(log: &Path, offset: u64, rc: i32, session: Option<&str>) {
    use std::io::Write;
    use std::os::unix::fs::FileExt;
    let Ok(mut f) = std::fs::OpenOptions::new().read(true).append(true).open(log) else { return };
    let Ok(len) = f.metadata().map(|m| m.len()) else { return };
    // The marker is the turn's last line: only the turn's end is read (the turn may be gigabytes).
    let tail = crate::os::tail::last_lines(log, offset, 1 << 20);
    if tail.split(|&b| b == b'\n').any(|l| l.starts_with(b"{\"harness\":\"exit\"")) {
        return;
    }
    let mut last = [0u8; 1];
    let mut line = Vec::new();
    if len > offset && f.read_exact_at(&mut last, len - 1).is_ok() && last[0] != b'\n' {
        line.push(b'\n');
    }
    let marker = match session {
        Some(s) => serde_json::json!({"harness": "exit", "rc": rc, "session_id": s}),
        None => serde_json::json!({"harness": "exit", "rc": rc}),
    };
    line.extend_from_slice(marker.to_string().as_bytes());
    line.push(b'\n');
    let _ = f.write_all(&line);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_is_masked_whole_and_escapes_are_dropped() {
        let env = || {
            vec![
                ("ANTHROPIC_API_KEY".to_string(), "sk-ant-0123456789".to_string()),
                ("GIT_AUTHOR_NAME".to_string(), "Jane Developer".to_string()),
                ("DEPLOY_TOKEN".to_string(), "line-one-secret\nline-two-secret".to_string()),
            ]
            .into_iter()
        };
        assert_eq!(clamp_reset(u64::MAX, 1_000), (1_000 + RESET_MAX_S, true));
        assert_eq!(clamp_reset(2_000, 1_000), (2_000, false));
        assert_eq!(unix_time(1_764_950_683), "2025-12-05T16:04:43Z");
        assert_eq!(unix_time(u64::MAX), format!("{} s after 1970 (past the year 9999)", u64::MAX));
        let masked = mask_secrets("key sk-ant-0123456789 by Jane Developer; line-two-secret", env());
        assert_eq!(masked, "key [redacted] by Jane Developer; [redacted]");
        assert_eq!(printable("a\u{1b}]0;pwned\u{7}b\u{1b}[2Jc\td"), "abc d");
    }
}
