//! The durable tier: Overview, Job and Agent views computed from files on disk (registry pointers,
//! journals, plan copies, liveness sidecars) with no supervisor needed, for live and finished runs.
//!
//! Stateless over artifacts: the only memory is a cache of per-run summaries keyed by the
//! (length, mtime, inode) of every file the summary was computed from, so a warm `GET /runs` over
//! thousands of runs costs a `readdir` and a few `stat`s per run. Liveness of a pid is never cached.

use crate::engine::usage::Usage;
use crate::ids::{RunId, TaskId};
use crate::os::home::Home;
use crate::state::journal::TaskState;
use crate::state::liveness;
use crate::state::registry::{self, Pointer};
pub use crate::state::summary::RunFiles;
use crate::state::views::task_facts;
use crate::views;
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Why a durable read failed.
#[derive(Debug, thiserror::Error)]
pub enum DurableError {
    #[error("run {0} is not in the registry")]
    UnknownRun(RunId),
    #[error("run {run} has no task {task} (not in its plan, never journaled)")]
    UnknownTask { run: RunId, task: TaskId },
    #[error("run {0} was pruned {1}")]
    Pruned(RunId, String),
    #[error("{0}")]
    Internal(String),
}

pub struct Durable {
    pub home: Home,
    /// `GET /runs`.
    pub overview: super::overview::Overview,
    /// Each task log's usage fold, carried on from where it stopped while the log only grows.
    usage: Mutex<HashMap<std::path::PathBuf, (crate::state::spend::FileMark, crate::engine::usage::Tally)>>,
    /// Each commit's subject and paths, by sha (a commit never changes).
    commits: Mutex<HashMap<String, (String, Vec<views::FileChange>)>>,
}

/// At most this many commits are kept in `Durable::commits` (then it starts afresh).
const COMMITS_KEPT: usize = 20_000;

impl Durable {
    pub fn new(home: Home) -> Durable {
        Durable {
            overview: super::overview::Overview::new(home.clone()),
            home,
            usage: Mutex::new(HashMap::new()),
            commits: Mutex::new(HashMap::new()),
        }
    }

    /// A commit as a task view shows it; its subject and paths read from git once.
    pub fn commit_view(&self, repo: &Path, sha: &str, integrated: bool) -> views::CommitView {
        let read =
            self.commit_info(repo, sha).map_err(|e| tracing::debug!(sha, error = %e, "cannot read a task's commit"));
        let (subject, files) = read.ok().map_or((None, None), |(s, f)| (Some(s), Some(f)));
        views::CommitView { sha: sha.to_string(), subject, integrated, files }
    }

    /// The paths commit `sha` changed (read from git once per sha, as for the views).
    pub fn commit_files(&self, repo: &Path, sha: &str) -> Result<Vec<views::FileChange>, crate::os::git::GitError> {
        self.commit_info(repo, sha).map(|(_, files)| files)
    }

    /// A commit's subject and paths, from the cache or git.
    fn commit_info(
        &self,
        repo: &Path,
        sha: &str,
    ) -> Result<(String, Vec<views::FileChange>), crate::os::git::GitError> {
        if let Some(v) = self.commits.lock().unwrap_or_else(|p| p.into_inner()).get(sha).cloned() {
            return Ok(v);
        }
        let subject = crate::os::change::subject(repo, sha)?;
        let v = (subject, crate::state::views::file_changes(crate::os::change::commit_files(repo, sha)?));
        let mut m = self.commits.lock().unwrap_or_else(|p| p.into_inner());
        if m.len() >= COMMITS_KEPT {
            m.clear();
        }
        m.insert(sha.to_string(), v.clone());
        Ok(v)
    }

    /// What `task` changed: its commit once committed, else its latest attempt's (`attempt`).
    fn task_commit(&self, files: &RunFiles, task: &TaskId, attempt: Option<&String>) -> Option<views::CommitView> {
        let t = files.view.tasks.get(task)?;
        let repo = files.git_dir();
        match (t.state, &t.sha) {
            (TaskState::Committed, Some(sha)) => Some(self.commit_view(&repo, sha, true)),
            (TaskState::Committed | TaskState::Skipped, _) => None,
            _ => attempt.map(|sha| self.commit_view(&repo, sha, false)),
        }
    }

    /// One task log's usage, reading only what the log gained since the last call.
    pub fn log_usage(&self, adapter: crate::engine::Adapter, log: &Path) -> Usage {
        let known = self.usage.lock().unwrap_or_else(|p| p.into_inner()).remove(log);
        let (kept, usage) = crate::state::spend::carry_on(known, adapter, log);
        if let Some(k) = kept {
            self.usage.lock().unwrap_or_else(|p| p.into_inner()).insert(log.to_path_buf(), k);
        }
        usage
    }

    /// Each task's usage and the run's (their sum): the plan's tasks, from their logs.
    pub fn run_usage(&self, files: &RunFiles) -> (Usage, HashMap<TaskId, Usage>) {
        let Some(plan) = &files.plan else { return (Usage::sum([]), HashMap::new()) };
        let (run, per_task) = crate::state::spend::run_spend(plan, &files.view, &files.pointer, |adapter, log| {
            self.log_usage(adapter, log)
        });
        (run, per_task.into_iter().collect())
    }

    pub fn pointer(&self, run: &RunId) -> Result<Pointer, DurableError> {
        registry::read(&self.home, run).map_err(|e| match e {
            registry::RegistryError::Unknown(r) => match pruned(&self.home, &r) {
                Some(when) => DurableError::Pruned(r, when),
                None => DurableError::UnknownRun(r),
            },
            other => DurableError::Internal(other.to_string()),
        })
    }

    pub fn load(&self, run: &RunId) -> Result<RunFiles, DurableError> {
        RunFiles::load(self.pointer(run)?).map_err(DurableError::Internal)
    }

    /// `GET /runs/:runId`: meta, the plan DAG by wave with each task's last state.
    pub fn run_detail(&self, run: &RunId) -> Result<views::RunDetail, DurableError> {
        let files = self.load(run)?;
        let (usage, per_task) = self.run_usage(&files);
        let v = &files.view;
        // Attempts are looked up (one git call for the run) only when a task that is not
        // committed has run.
        let attempts = if v.tasks.values().any(|t| !matches!(t.state, TaskState::Committed | TaskState::Skipped)) {
            crate::os::worktree::latest_attempts(&files.git_dir(), run)
        } else {
            HashMap::new()
        };
        let waves = match &files.plan {
            Some(plan) => plan
                .waves()
                .into_iter()
                .map(|(wave, tasks)| views::Wave {
                    wave,
                    tasks: tasks
                        .iter()
                        .map(|t| self.task_view(&files, t, per_task.get(&t.id), attempts.get(t.id.as_str())))
                        .collect(),
                })
                .collect(),
            None => Vec::new(),
        };
        let unplanned = v
            .tasks
            .keys()
            .filter(|t| files.plan.as_ref().is_none_or(|p| p.task(t).is_none()))
            .map(|t| {
                let mut facts = task_facts(v, t);
                facts.commit = self.task_commit(&files, t, attempts.get(t.as_str()));
                views::UnplannedTask { id: t.clone(), facts }
            })
            .collect();
        let p = &files.pointer;
        let live = files.supervisor_alive();
        let run = files.row(&usage).with_journal(|health| views::JournalDetail {
            health,
            bad_line_list: v.bad_lines.iter().map(Into::into).collect(),
            torn_tail_line: v.torn_tail.as_ref().map(Into::into),
        });
        let supervisor = views::Supervisor::of(live, run.status, run.plane);
        Ok(views::RunDetail {
            run,
            live,
            supervisor,
            host: None,
            host_seen: None,
            host_online: None,
            mirror_stopped: None,
            plan: views::PlanView { waves },
            unplanned_tasks: unplanned,
            pending_steers: v.pending_steers.len() as u64,
            attention: v.attention.iter().map(Into::into).collect(),
            paths: views::RunPaths { journal: p.journal_path(), plan: p.plan_path(), liveness: p.liveness_path() },
        })
    }

    /// A task of the plan as the Job view shows it.
    fn task_view(
        &self,
        files: &RunFiles,
        t: &crate::state::plan::Task,
        usage: Option<&Usage>,
        attempt: Option<&String>,
    ) -> views::TaskView {
        let v = &files.view;
        let mut facts = task_facts(v, &t.id);
        facts.worktree = self.worktree(&files.pointer.run_id, &t.id);
        facts.commit = self.task_commit(files, &t.id, attempt);
        // A task whose turn may run: how long since its log last grew.
        let idle_s = (v.state_of(&t.id) == Some(TaskState::Leased)).then(|| {
            let log = crate::state::spend::task_log(v, &files.pointer, &t.id);
            std::fs::metadata(&log)
                .and_then(|m| m.modified())
                .ok()
                .and_then(|m| m.elapsed().ok())
                .map(|d| d.as_secs_f64())
        });
        views::TaskView {
            id: t.id.clone(),
            task: Some(t.id.clone()),
            pending_approvals: v.pending_approvals(Some(&t.id)),
            facts,
            adapter: t.adapter.into(),
            review: t.review,
            gate: t.gate.clone(),
            // A task that never ran (no record, no turn in its log) has no usage (null), not a zero one.
            usage: usage.filter(|u| v.tasks.contains_key(&t.id) || u.turns > 0).map(Into::into),
            budget_usd: v.task_budgets.get(&t.id).copied().or(t.budget_usd),
            idle_s,
            live_state: files
                .liveness
                .as_ref()
                .and_then(|l| l.tasks.get(&t.id))
                .filter(|l| liveness::pid_alive(l.pid))
                .map(|l| l.state.into()),
        }
    }

    /// The task's worktree, when it exists.
    pub(super) fn worktree(&self, run: &RunId, task: &TaskId) -> Option<PathBuf> {
        let tree = crate::os::worktree::of(&self.home, run, task);
        tree.path.is_dir().then_some(tree.path)
    }

    /// `GET /runs/:runId/approvals`: every asked tool call of the run (oldest first), or those in
    /// `state` only.
    pub fn approvals(&self, run: &RunId, state: Option<&str>) -> Result<views::Approvals, DurableError> {
        let files = self.load(run)?;
        let mut list: Vec<&crate::state::journal::ApprovalView> =
            files.view.approvals.values().filter(|a| state.is_none_or(|s| a.state.as_str() == s)).collect();
        list.sort_by(|a, b| a.ts.cmp(&b.ts).then_with(|| a.id.cmp(&b.id)));
        Ok(views::Approvals { run_id: run.clone(), approvals: list.into_iter().map(Into::into).collect(), host: None })
    }

    /// `GET /runs/:runId/tasks/:tid`: binding, journal state, session, liveness (pid/runtime/idle), log.
    pub fn task_detail(&self, run: &RunId, task: &TaskId) -> Result<views::TaskDetail, DurableError> {
        let files = self.load(run)?;
        let planned = files.plan.as_ref().and_then(|p| p.task(task));
        let journaled = files.view.tasks.get(task);
        if planned.is_none() && journaled.is_none() {
            return Err(DurableError::UnknownTask { run: run.clone(), task: task.clone() });
        }
        let live_rec = files.liveness.as_ref().and_then(|l| l.tasks.get(task));
        let logfile = journaled
            .and_then(|j| j.logfile.clone())
            .or_else(|| live_rec.map(|l| l.logfile.clone()))
            .unwrap_or_else(|| files.pointer.default_logfile(task));
        let usage = planned.map(|t| {
            let kept = (!logfile.exists())
                .then(|| crate::state::spend::kept_usage(&files.pointer).remove(task.as_str()))
                .flatten();
            views::Usage::from(&kept.unwrap_or_else(|| self.log_usage(t.adapter, &logfile)))
        });
        let mut facts = task_facts(&files.view, task);
        facts.session_id =
            journaled.and_then(|j| j.session_id.clone()).or_else(|| live_rec.and_then(|l| l.session_id.clone()));
        facts.worktree = self.worktree(run, task);
        // The latest kept attempt (a git call) matters only to a task that ran and is neither
        // committed nor skipped (see `task_commit`).
        let attempt = files
            .view
            .tasks
            .get(task)
            .filter(|t| !matches!(t.state, TaskState::Committed | TaskState::Skipped))
            .and_then(|_| crate::os::worktree::attempts(&files.git_dir(), run, task).pop().map(|(_, sha)| sha));
        facts.commit = self.task_commit(&files, task, attempt.as_ref());
        let of_task = |t: &TaskId| t == task;
        Ok(views::TaskDetail {
            host: None,
            run_id: run.clone(),
            task: task.clone(),
            facts,
            binding: planned.map(|t| serde_json::to_value(t).expect("a plan task serializes")),
            live: live_rec.map(|l| task_live(l, &logfile)),
            usage,
            log_exists: logfile.exists(),
            logfile,
            pending_steers: files.view.pending_steers.iter().filter(|s| of_task(&s.task)).map(Into::into).collect(),
            steers: files.view.steers.iter().filter(|s| of_task(&s.task)).map(Into::into).collect(),
            attention: files.view.attention.iter().filter(|a| of_task(&a.task)).map(Into::into).collect(),
            supervised: files.supervisor_alive(),
            history: journaled.map(|j| j.history.iter().map(Into::into).collect()).unwrap_or_default(),
        })
    }
}

/// A task's liveness record as the Agent view shows it: runtime, and idle since the engine's last
/// output — when its log last grew, which the liveness cache does not hold.
fn task_live(l: &crate::state::liveness::TaskLiveness, logfile: &Path) -> views::TaskLive {
    let now = std::time::SystemTime::now();
    let secs_since = |ts: &str| {
        humantime::parse_rfc3339_weak(ts).ok().and_then(|t| now.duration_since(t).ok()).map(|d| d.as_secs_f64())
    };
    let last_output = l.last_output_ts.clone().or_else(|| {
        std::fs::metadata(logfile)
            .and_then(|m| m.modified())
            .ok()
            .map(|t| humantime::format_rfc3339_millis(t).to_string())
    });
    views::TaskLive {
        pid: l.pid,
        pgid: l.pgid,
        alive: liveness::pid_alive(l.pid),
        state: l.state.into(),
        started_ts: l.started_ts.clone(),
        runtime_s: secs_since(&l.started_ts),
        idle_s: last_output.as_deref().and_then(secs_since),
        last_output_ts: last_output,
    }
}

/// How a pruned run's tombstone describes its end (`None`: no tombstone).
fn pruned(home: &Home, run: &RunId) -> Option<String> {
    let bytes = std::fs::read(crate::state::summary::tombstone_path(home, run)).ok()?;
    let v: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    Some(match v["pruned_at"].as_str() {
        Some(t) => format!("at {t} by `harness prune` (its journal, plan and logs are gone)"),
        None => "by `harness prune` (its journal, plan and logs are gone)".into(),
    })
}
