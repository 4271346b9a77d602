//! The durable tier: Overview, Job and Agent views computed from files on disk (registry pointers,
//! journals, plan copies, liveness sidecars) with no supervisor needed, for live and finished runs.
//!
//! Stateless over artifacts: the only memory is a cache of per-run summaries keyed by the
//! (length, mtime, inode) of every file the summary was computed from, so a warm `GET /runs` over
//! thousands of runs costs a `readdir` and a few `stat`s per run. Liveness of a pid is never cached.

use crate::home::Home;
use crate::ids::{RunId, TaskId};
use crate::journal::{self, RunStatus, RunView, TaskState};
use crate::liveness::{self, Liveness};
use crate::plan::Plan;
use crate::registry::{self, Pointer};
use crate::usage::Usage;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::{Arc, Mutex};

/// Identity of a file's content as far as the cache cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Fingerprint(Option<(u64, i64, i64, u64)>);

fn fingerprint(path: &Path) -> Fingerprint {
    Fingerprint(std::fs::metadata(path).ok().map(|m| (m.len(), m.mtime(), m.mtime_nsec(), m.ino())))
}

struct Cached {
    pointer_fp: Fingerprint,
    pointer: Arc<Pointer>,
    files_fp: [Fingerprint; 2],
    /// The summary object serialized, without its closing `}`: a warm hit appends `,"live":…}`.
    summary: Arc<[u8]>,
    /// Supervisor pid and socket from liveness: whether it is alive is checked per request.
    supervisor: Option<(i32, Option<std::path::PathBuf>)>,
}

/// Why a durable read failed.
#[derive(Debug, thiserror::Error)]
pub enum DurableError {
    #[error("run {0} is not in the registry")]
    UnknownRun(RunId),
    #[error("run {run} has no task {task} (not in its plan, never journaled)")]
    UnknownTask { run: RunId, task: TaskId },
    #[error("{0}")]
    Internal(String),
}

pub struct Durable {
    pub home: Home,
    cache: Mutex<HashMap<String, Cached>>,
    /// Each task log's usage fold, carried on from where it stopped while the log only grows.
    usage: Mutex<HashMap<std::path::PathBuf, (u64, crate::usage::Tally)>>,
}

/// Everything known about one run from disk.
pub struct RunFiles {
    pub pointer: Pointer,
    pub view: RunView,
    pub plan: Option<Plan>,
    pub liveness: Option<Liveness>,
}

impl RunFiles {
    pub fn load(pointer: Pointer) -> Result<RunFiles, DurableError> {
        let view = journal::replay(&pointer.journal_path()).map_err(|e| DurableError::Internal(e.to_string()))?;
        let plan = match Plan::load(&pointer.plan_path()) {
            Ok(p) => Some(p),
            Err(e) => {
                if pointer.plan_path().exists() {
                    tracing::warn!(RUN_ID = %pointer.run_id, error = %e, "plan copy unreadable");
                }
                None
            }
        };
        let liveness = match liveness::get(&pointer.liveness_path()) {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(RUN_ID = %pointer.run_id, error = %e, "liveness unreadable (ignored: it is a cache)");
                None
            }
        };
        Ok(RunFiles { pointer, view, plan, liveness })
    }

    /// The wave the run is on: the lowest wave holding a task that is not committed.
    pub fn current_wave(&self) -> Option<u32> {
        let plan = self.plan.as_ref()?;
        let waves = plan.waves();
        waves
            .iter()
            .find(|(_, ts)| ts.iter().any(|t| self.view.state_of(&t.id) != Some(TaskState::Committed)))
            .or_else(|| waves.iter().next_back())
            .map(|(w, _)| *w)
    }

    /// True when the liveness sidecar names a supervisor whose pid is alive.
    pub fn supervisor_alive(&self) -> bool {
        self.liveness.as_ref().and_then(|l| l.supervisor_pid).is_some_and(liveness::pid_alive)
    }

    fn summary(&self) -> Value {
        let p = &self.pointer;
        json!({
            "runId": p.run_id,
            "slug": p.slug,
            "repoRoot": p.repo_root,
            "project": p.project,
            "repo": p.repo,
            "branch": p.branch,
            "worktree": p.worktree,
            "plane": p.plane,
            "created": p.created,
            "base_branch": self.plan.as_ref().and_then(|pl| pl.base_branch.clone()),
            "status": self.view.status,
            "paused": self.view.status == RunStatus::Paused,
            // Added with budgets: why it is paused (budget, rate_limit, operator) and the budget.
            "pause_reason": self.view.pause.as_ref().map(|(by, _)| match by.as_str() {
                "budget" | "rate_limit" => by.as_str(),
                _ => "operator",
            }),
            "pause_detail": self.view.pause.as_ref().and_then(|(_, d)| d.clone()),
            "resume_at": self.view.resume_at,
            "budget_usd": self.view.budget_usd.or(self.plan.as_ref().and_then(|p| p.budget_usd)),
            "attention_marks": self.view.attention.len(),
            "wave": self.current_wave(),
            "waves": self.plan.as_ref().map(|pl| pl.waves().len()),
            "tasks": self.plan.as_ref().map(|pl| pl.tasks.len()).unwrap_or(self.view.tasks.len()),
            "counts": self.view.counts(),
            "updated": self.view.last_ts,
            "journal": journal_health(&self.view),
        })
    }
}

fn journal_health(v: &RunView) -> Value {
    json!({"records": v.records, "bad_lines": v.bad_lines.len(), "torn_tail": v.torn_tail.is_some()})
}

impl Durable {
    pub fn new(home: Home) -> Durable {
        Durable { home, cache: Mutex::new(HashMap::new()), usage: Mutex::new(HashMap::new()) }
    }

    /// `GET /runs`: every registered run, sorted by runId, as a serialized JSON array. Work is split
    /// across the cores.
    pub fn list_runs(&self) -> Result<Vec<u8>, DurableError> {
        let dir = self.home.runs_dir();
        let mut names: Vec<String> = match std::fs::read_dir(&dir) {
            Ok(rd) => rd
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with(".json") && !n.starts_with('.'))
                .collect(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => {
                return Err(DurableError::Internal(format!("cannot read {}: {e}", dir.display())));
            }
        };
        names.sort();
        let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1).min(8);
        let chunk = names.len().div_ceil(threads).max(256);
        let mut out: Vec<u8> = Vec::with_capacity(names.len() * 600);
        out.push(b'[');
        std::thread::scope(|s| {
            let handles: Vec<_> = names.chunks(chunk).map(|c| s.spawn(move || self.summaries(c))).collect();
            for h in handles {
                match h.join() {
                    Ok(part) if part.is_empty() => {}
                    Ok(part) => {
                        if out.len() > 1 {
                            out.push(b',');
                        }
                        out.extend_from_slice(&part);
                    }
                    Err(_) => tracing::error!("a run summary worker panicked"),
                }
            }
        });
        out.push(b']');
        Ok(out)
    }

    /// Comma-separated summaries of `names`.
    fn summaries(&self, names: &[String]) -> Vec<u8> {
        let dir = self.home.runs_dir();
        let mut out = Vec::with_capacity(names.len() * 600);
        for name in names {
            if let Some((summary, live)) = self.summary_for(&dir, name) {
                if !out.is_empty() {
                    out.push(b',');
                }
                out.extend_from_slice(&summary);
                out.extend_from_slice(if live { b",\"live\":true}" } else { b",\"live\":false}" });
            }
        }
        out
    }

    /// One run's summary (without `live`) and whether its supervisor is alive, from the cache when no
    /// file it depends on changed.
    fn summary_for(&self, dir: &Path, name: &str) -> Option<(Arc<[u8]>, bool)> {
        let ppath = dir.join(name);
        let pointer_fp = fingerprint(&ppath);
        pointer_fp.0?;
        let cached_pointer = {
            let cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
            cache.get(name).filter(|c| c.pointer_fp == pointer_fp).map(|c| c.pointer.clone())
        };
        let pointer = match cached_pointer {
            Some(p) => p,
            None => {
                let parsed = std::fs::read(&ppath)
                    .map_err(|e| e.to_string())
                    .and_then(|b| registry::parse(&ppath, &b).map_err(|e| e.to_string()));
                match parsed {
                    Ok(p) => Arc::new(p),
                    Err(reason) => {
                        registry::log_skipped(&[registry::Skipped::Garbled { path: ppath, reason }]);
                        return None;
                    }
                }
            }
        };
        // The plan copy is written once, before the pointer (`harness run`), so the pointer's own
        // fingerprint covers it; the journal grows and liveness is replaced (new inode) on each write.
        let files_fp = [fingerprint(&pointer.journal_path()), fingerprint(&pointer.liveness_path())];
        if files_fp.iter().all(|f| f.0.is_none()) && !pointer.runstate_dir.is_dir() {
            let _ = std::fs::remove_file(&ppath);
            registry::log_skipped(&[registry::Skipped::Reaped { path: ppath, run_id: pointer.run_id.clone() }]);
            self.cache.lock().unwrap_or_else(|p| p.into_inner()).remove(name);
            return None;
        }
        let hit = {
            let cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
            cache
                .get(name)
                .filter(|c| c.pointer_fp == pointer_fp && c.files_fp == files_fp)
                .map(|c| (c.summary.clone(), c.supervisor.clone()))
        };
        let (summary, supervisor) = match hit {
            Some(h) => h,
            None => {
                let files = match RunFiles::load((*pointer).clone()) {
                    Ok(f) => f,
                    Err(e) => {
                        tracing::warn!(RUN_ID = %pointer.run_id, error = %e, "run unreadable, skipped");
                        return None;
                    }
                };
                let mut v = files.summary();
                v["usage"] = json!(self.run_usage(&files).0);
                let mut bytes = serde_json::to_vec(&v).expect("a Value always serializes");
                bytes.pop(); // the closing brace: `live` is appended per request
                let summary: Arc<[u8]> = bytes.into();
                let supervisor =
                    files.liveness.as_ref().and_then(|l| l.supervisor_pid.map(|pid| (pid, l.sock.clone())));
                let entry =
                    Cached { pointer_fp, pointer, files_fp, summary: summary.clone(), supervisor: supervisor.clone() };
                self.cache.lock().unwrap_or_else(|p| p.into_inner()).insert(name.to_string(), entry);
                (summary, supervisor)
            }
        };
        let live = supervisor.is_some_and(|(pid, _)| liveness::pid_alive(pid));
        Some((summary, live))
    }

    /// One task log's usage, reading only what the log gained since the last call.
    pub fn log_usage(&self, adapter: crate::adapter::Adapter, log: &Path) -> Usage {
        let known = self.usage.lock().unwrap_or_else(|p| p.into_inner()).remove(log);
        let (kept, usage) = crate::spend::carry_on(known, adapter, log);
        if let Some(k) = kept {
            self.usage.lock().unwrap_or_else(|p| p.into_inner()).insert(log.to_path_buf(), k);
        }
        usage
    }

    /// Each task's usage and the run's (their sum): the plan's tasks, from their logs.
    pub fn run_usage(&self, files: &RunFiles) -> (Usage, HashMap<TaskId, Usage>) {
        let Some(plan) = &files.plan else { return (Usage::sum([]), HashMap::new()) };
        let (run, per_task) =
            crate::spend::run_spend(plan, &files.view, &files.pointer, |adapter, log| self.log_usage(adapter, log));
        (run, per_task.into_iter().collect())
    }

    pub fn pointer(&self, run: &RunId) -> Result<Pointer, DurableError> {
        registry::read(&self.home, run).map_err(|e| match e {
            registry::RegistryError::Unknown(r) => DurableError::UnknownRun(r),
            other => DurableError::Internal(other.to_string()),
        })
    }

    pub fn load(&self, run: &RunId) -> Result<RunFiles, DurableError> {
        RunFiles::load(self.pointer(run)?)
    }

    /// `GET /runs/:runId`: meta, the plan DAG by wave with each task's last state.
    pub fn run_detail(&self, run: &RunId) -> Result<Value, DurableError> {
        let files = self.load(run)?;
        let mut v = files.summary();
        v["live"] = Value::Bool(files.supervisor_alive());
        let (usage, per_task) = self.run_usage(&files);
        v["usage"] = json!(usage);
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
                            let log = crate::spend::task_log(&files.view, &files.pointer, &t.id);
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
        let tree = crate::worktree::of(&self.home, run, task);
        if tree.path.is_dir() {
            tv["worktree"] = json!(tree.path);
        }
    }

    /// `GET /runs/:runId/tasks/:tid`: binding, journal state, session, liveness (pid/runtime/idle), log.
    /// `GET /runs/:runId/approvals`: every asked tool call of the run (oldest first), or those in
    /// `state` only.
    pub fn approvals(&self, run: &RunId, state: Option<&str>) -> Result<Value, DurableError> {
        let files = self.load(run)?;
        let mut list: Vec<&crate::journal::ApprovalView> = files
            .view
            .approvals
            .values()
            .filter(|a| state.is_none_or(|s| crate::journal::approval_state_str(a.state) == s))
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
            v["usage"] = json!(self.log_usage(t.adapter, &logfile));
        }
        v["logfile"] = json!(logfile);
        v["log_exists"] = json!(logfile.exists());
        v["pending_steers"] = json!(files.view.pending_steers.iter().filter(|s| &s.task == task).collect::<Vec<_>>());
        // Added with the live channel: every steer of the task and where it stands.
        v["steers"] = json!(files.view.steers.iter().filter(|s| &s.task == task).collect::<Vec<_>>());
        // Added with stalls: the task's attention marks.
        v["attention"] = json!(files.view.attention.iter().filter(|a| &a.task == task).collect::<Vec<_>>());
        v["supervised"] = json!(files.supervisor_alive());
        self.add_worktree(&mut v, run, task);
        Ok(v)
    }
}

fn task_state_json(view: &RunView, task: &TaskId) -> Value {
    match view.tasks.get(task) {
        Some(t) => json!({
            "state": t.state, "rc": t.rc, "detail": t.detail, "sha": t.sha,
            "session_id": t.session_id, "attempts": t.attempts, "updated": t.ts,
        }),
        None => json!({"state": "pending", "rc": null, "detail": null, "sha": null,
                       "session_id": null, "attempts": 0, "updated": null}),
    }
}
