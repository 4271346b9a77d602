//! The durable tier: Overview, Job and Agent views computed from files on disk (registry pointers,
//! journals, plan copies, liveness sidecars) with no supervisor needed, for live and finished runs.
//!
//! Stateless over artifacts: the only memory is a cache of per-run summaries keyed by the
//! (length, mtime, inode) of every file the summary was computed from, so a warm `GET /runs` over
//! thousands of runs costs a `readdir` and a few `stat`s per run. Liveness of a pid is never cached.

use crate::engine::usage::Usage;
use crate::ids::{RunId, TaskId};
use crate::os::home::Home;
use crate::state::journal::{RunView, TaskState};
use crate::state::liveness;
use crate::state::registry::{self, Pointer};
pub use crate::state::summary::RunFiles;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::Path;
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
}

impl Durable {
    pub fn new(home: Home) -> Durable {
        Durable { overview: super::overview::Overview::new(home.clone()), home, usage: Mutex::new(HashMap::new()) }
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
    pub fn run_detail(&self, run: &RunId) -> Result<Value, DurableError> {
        let files = self.load(run)?;
        let (usage, per_task) = self.run_usage(&files);
        let mut v = files.row(&usage);
        v["live"] = Value::Bool(files.supervisor_alive());
        let mut waves = Vec::new();
        if let Some(plan) = &files.plan {
            for (w, tasks) in plan.waves() {
                let tasks: Vec<Value> = tasks
                    .iter()
                    .map(|t| {
                        let mut tv = task_state_json(&files.view, &t.id);
                        self.add_worktree(&mut tv, &files.pointer.run_id, &t.id);
                        tv["id"] = json!(t.id);
                        tv["adapter"] = json!(t.adapter);
                        tv["review"] = json!(t.review);
                        tv["gate"] = json!(t.gate);
                        tv["usage"] = json!(per_task.get(&t.id));
                        tv["budget_usd"] = json!(files.view.task_budgets.get(&t.id).copied().or(t.budget_usd));
                        // A task whose turn may run: how long since its log last grew.
                        if files.view.state_of(&t.id) == Some(TaskState::Leased) {
                            let log = crate::state::spend::task_log(&files.view, &files.pointer, &t.id);
                            let idle = std::fs::metadata(&log)
                                .and_then(|m| m.modified())
                                .ok()
                                .and_then(|m| m.elapsed().ok())
                                .map(|d| d.as_secs_f64());
                            tv["idle_s"] = json!(idle);
                        }
                        tv
                    })
                    .collect();
                waves.push(json!({"wave": w, "tasks": tasks}));
            }
        }
        v["plan"] = json!({"waves": waves});
        // Tasks the journal knows but the plan copy does not (plan copy missing or edited).
        let unplanned: Vec<Value> = files
            .view
            .tasks
            .keys()
            .filter(|t| files.plan.as_ref().is_none_or(|p| p.task(t).is_none()))
            .map(|t| {
                let mut tv = task_state_json(&files.view, t);
                tv["id"] = json!(t);
                tv
            })
            .collect();
        v["unplanned_tasks"] = json!(unplanned);
        v["pending_steers"] = json!(files.view.pending_steers.len());
        v["attention"] = json!(files.view.attention);
        v["journal"]["bad_line_list"] = json!(files.view.bad_lines);
        v["journal"]["torn_tail_line"] = json!(files.view.torn_tail);
        v["paths"] = json!({
            "journal": files.pointer.journal_path(),
            "plan": files.pointer.plan_path(),
            "liveness": files.pointer.liveness_path(),
        });
        Ok(v)
    }

    /// The task's worktree, when it exists (additive field of the task views).
    fn add_worktree(&self, tv: &mut Value, run: &RunId, task: &TaskId) {
        let tree = crate::os::worktree::of(&self.home, run, task);
        if tree.path.is_dir() {
            tv["worktree"] = json!(tree.path);
        }
    }

    /// `GET /runs/:runId/tasks/:tid`: binding, journal state, session, liveness (pid/runtime/idle), log.
    /// `GET /runs/:runId/approvals`: every asked tool call of the run (oldest first), or those in
    /// `state` only.
    pub fn approvals(&self, run: &RunId, state: Option<&str>) -> Result<Value, DurableError> {
        let files = self.load(run)?;
        let mut list: Vec<&crate::state::journal::ApprovalView> = files
            .view
            .approvals
            .values()
            .filter(|a| state.is_none_or(|s| crate::state::journal::approval_state_str(a.state) == s))
            .collect();
        list.sort_by(|a, b| a.ts.cmp(&b.ts).then_with(|| a.id.cmp(&b.id)));
        Ok(json!({"runId": run, "approvals": list}))
    }

    pub fn task_detail(&self, run: &RunId, task: &TaskId) -> Result<Value, DurableError> {
        let files = self.load(run)?;
        let planned = files.plan.as_ref().and_then(|p| p.task(task));
        let journaled = files.view.tasks.get(task);
        if planned.is_none() && journaled.is_none() {
            return Err(DurableError::UnknownTask { run: run.clone(), task: task.clone() });
        }
        let live_rec = files.liveness.as_ref().and_then(|l| l.tasks.get(task));
        let now = std::time::SystemTime::now();
        let secs_since = |ts: &str| {
            humantime::parse_rfc3339_weak(ts).ok().and_then(|t| now.duration_since(t).ok()).map(|d| d.as_secs_f64())
        };
        let logfile = journaled
            .and_then(|j| j.logfile.clone())
            .or_else(|| live_rec.map(|l| l.logfile.clone()))
            .unwrap_or_else(|| files.pointer.default_logfile(task));
        // The engine's last output is when its log last grew (the liveness cache does not hold it).
        let log_mtime = std::fs::metadata(&logfile)
            .and_then(|m| m.modified())
            .ok()
            .map(|t| humantime::format_rfc3339_millis(t).to_string());
        let live = live_rec.map(|l| {
            let last_output = l.last_output_ts.clone().or_else(|| log_mtime.clone());
            json!({
                "pid": l.pid,
                "pgid": l.pgid,
                "alive": liveness::pid_alive(l.pid),
                "state": l.state,
                "started_ts": l.started_ts,
                "runtime_s": secs_since(&l.started_ts),
                "idle_s": last_output.as_deref().and_then(secs_since),
                "last_output_ts": last_output,
            })
        });
        let session_id =
            journaled.and_then(|j| j.session_id.clone()).or_else(|| live_rec.and_then(|l| l.session_id.clone()));
        let mut v = task_state_json(&files.view, task);
        v["runId"] = json!(run);
        v["task"] = json!(task);
        v["binding"] = json!(planned);
        v["session_id"] = json!(session_id);
        v["live"] = json!(live);
        if let Some(t) = planned {
            let kept = (!logfile.exists())
                .then(|| crate::state::spend::kept_usage(&files.pointer).remove(task.as_str()))
                .flatten();
            v["usage"] = json!(kept.unwrap_or_else(|| self.log_usage(t.adapter, &logfile)));
        }
        v["logfile"] = json!(logfile);
        v["log_exists"] = json!(logfile.exists());
        v["pending_steers"] = json!(files.view.pending_steers.iter().filter(|s| &s.task == task).collect::<Vec<_>>());
        // every steer of the task and where it stands.
        v["steers"] = json!(files.view.steers.iter().filter(|s| &s.task == task).collect::<Vec<_>>());
        // the task's attention marks.
        v["attention"] = json!(files.view.attention.iter().filter(|a| &a.task == task).collect::<Vec<_>>());
        v["supervised"] = json!(files.supervisor_alive());
        self.add_worktree(&mut v, run, task);
        Ok(v)
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

fn task_state_json(view: &RunView, task: &TaskId) -> Value {
    match view.tasks.get(task) {
        Some(t) => json!({
            "state": t.state, "rc": t.rc, "detail": t.detail, "sha": t.sha, "no_changes": t.no_changes,
            "session_id": t.session_id, "attempts": t.attempts, "updated": t.ts,
        }),
        None => json!({"state": "pending", "rc": null, "detail": null, "sha": null, "no_changes": false,
                       "session_id": null, "attempts": 0, "updated": null}),
    }
}
