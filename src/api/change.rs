//! What a task changed, and how its checks went, as the API serves them: `GET …/tasks/:tid/diff`
//! (its commit, its attempt, or its worktree against its base while it works), `GET
//! /runs/:runId/diff` (the run's own commits, by its trailers), `?stat=1` for the paths, every diff
//! bounded; `GET …/gate` and `GET …/review` (the latest attempt's outcome, output and reasoning).
//! Git reads are `os::change`'s.

use super::durable::{Durable, DurableError, RunFiles};
use super::{Body, error_response, full, json_response};
use crate::ids::{RunId, TaskId};
use crate::os::change::{self, Bounded};
use crate::state::journal::{Body as RecordBody, TaskState};
use crate::state::views::file_changes;
use crate::views::{self, FileChange, StepState};
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Response, StatusCode};
use std::path::{Path, PathBuf};

/// The largest diff served (then it is cut, says so in a last line and in `Harness-Truncated`).
pub const DIFF_MAX: usize = 4 << 20;

/// What a diff is of.
enum Of {
    Commit(String),
    Attempt(String),
    Worktree { path: PathBuf, base: String },
    None,
}

impl Of {
    fn name(&self) -> &'static str {
        match self {
            Of::Commit(_) => "commit",
            Of::Attempt(_) => "attempt",
            Of::Worktree { .. } => "worktree",
            Of::None => "none",
        }
    }
}

fn known(files: &RunFiles, run: &RunId, task: &TaskId) -> Result<(), Response<Body>> {
    let planned = files.plan.as_ref().and_then(|p| p.task(task)).is_some();
    if planned || files.view.tasks.contains_key(task) {
        Ok(())
    } else {
        Err(super::durable_error(DurableError::UnknownTask { run: run.clone(), task: task.clone() }))
    }
}

fn load(d: &Durable, run: &RunId) -> Result<RunFiles, Response<Body>> {
    d.load(run).map_err(super::durable_error)
}

fn git_failed(what: &str, e: crate::os::git::GitError) -> Response<Body> {
    error_response(StatusCode::INTERNAL_SERVER_ERROR, format!("cannot read {what} from git: {e}"))
}

/// `GET /runs/:runId/tasks/:tid/diff[?stat=1]`.
pub fn task_diff(d: &Durable, run: &RunId, task: &TaskId, stat: bool) -> Result<Response<Body>, Response<Body>> {
    let files = load(d, run)?;
    known(&files, run, task)?;
    let repo = files.git_dir();
    let t = files.view.tasks.get(task);
    let attempt = || crate::os::worktree::attempts(&repo, run, task).pop().map(|(_, sha)| sha);
    // isolation: shared — a working task works in the run's checkout itself.
    let shared = files.plan.as_ref().and_then(|p| p.isolation) == Some(crate::state::plan::Isolation::Shared);
    let working = t.is_some_and(|t| matches!(t.state, TaskState::Leased | TaskState::Implemented | TaskState::Gated));
    let of = match t.map(|t| (t.state, t.sha.clone())) {
        Some((TaskState::Committed, Some(sha))) => Of::Commit(sha),
        Some((TaskState::Committed, None)) | None => Of::None,
        Some((TaskState::Skipped, _)) => attempt().map_or(Of::None, Of::Attempt),
        Some(_) => match (d.worktree(run, task), t.and_then(|t| t.base.clone())) {
            (Some(path), Some(base)) => Of::Worktree { path, base },
            (None, Some(base)) if shared && working && files.pointer.worktree.is_dir() => {
                Of::Worktree { path: files.pointer.worktree.clone(), base }
            }
            _ => attempt().map_or(Of::None, Of::Attempt),
        },
    };
    let (paths, patch, commits) = match &of {
        Of::Commit(sha) | Of::Attempt(sha) => {
            let paths = if stat {
                d.commit_files(&repo, sha).map_err(|e| git_failed("the task's commit", e))?
            } else {
                Vec::new()
            };
            let patch = if stat {
                None
            } else {
                Some(change::commit_patch(&repo, sha, DIFF_MAX).map_err(|e| git_failed("the task's commit", e))?)
            };
            (paths, patch, vec![sha.clone()])
        }
        Of::Worktree { path, base } => {
            let (paths, patch) =
                change::worktree_change(path, base, DIFF_MAX).map_err(|e| git_failed("the task's worktree", e))?;
            (file_changes(paths), Some(patch), Vec::new())
        }
        Of::None => (Vec::new(), Some(Bounded { bytes: Vec::new(), truncated: false }), Vec::new()),
    };
    Ok(answer(run, Some(task), of.name(), commits, paths, if stat { None } else { patch }))
}

/// `GET /runs/:runId/diff[?stat=1]`: the run's own commits (found by its `Harness-Run` and
/// `Harness-Nonce` trailers on its branch, above the commit it started from), oldest first.
pub fn run_diff(d: &Durable, run: &RunId, stat: bool) -> Result<Response<Body>, Response<Body>> {
    let files = load(d, run)?;
    let repo = files.git_dir();
    let v = &files.view;
    // The run's branch (with isolation: worktree), else the checkout it ran in.
    let tip = v
        .branch
        .as_deref()
        .and_then(|b| crate::os::git::ref_sha(&repo, &format!("refs/heads/{b}")))
        .or_else(|| crate::os::git::ref_sha(&repo, "HEAD"));
    let Some(tip) = tip else {
        return Err(error_response(
            StatusCode::CONFLICT,
            format!("run {run}: neither its branch nor its checkout {} can be read", repo.display()),
        ));
    };
    let since = v.start_sha.as_deref().filter(|s| crate::os::git::ref_sha(&repo, s).is_some());
    let mut commits = change::run_commits(&repo, &tip, since, run.as_str(), v.nonce.as_deref())
        .map_err(|e| git_failed("the run's commits", e))?;
    // A task committed with the agent's own commits kept as they are (isolation: shared) carries
    // no trailer: its commits are those between its base and its sha.
    let kept: Vec<String> = v
        .tasks
        .values()
        .filter(|t| t.state == TaskState::Committed)
        .filter_map(|t| Some((t.base.clone()?, t.sha.clone()?)))
        .filter(|(_, sha)| !commits.contains(sha))
        .flat_map(|(base, sha)| change::commits_between(&repo, &base, &sha).unwrap_or_default())
        .collect();
    if !kept.is_empty() {
        let all: std::collections::HashSet<String> = commits.iter().chain(&kept).cloned().collect();
        let from = since.map_or_else(|| tip.clone(), |s| format!("{s}..{tip}"));
        let order = crate::os::git::run(&repo, &["rev-list", "--reverse", "--topo-order", &from, "--"])
            .map_err(|e| git_failed("the run's commits", e))?;
        commits = order.lines().filter(|c| all.contains(*c)).map(str::to_string).collect();
    }
    if stat {
        let mut paths = Vec::new();
        for sha in &commits {
            paths.extend(d.commit_files(&repo, sha).map_err(|e| git_failed("a commit of the run", e))?);
        }
        return Ok(answer(run, None, "run", commits, paths, None));
    }
    let patch = change::commits_patch(&repo, &commits, DIFF_MAX).map_err(|e| git_failed("the run's commits", e))?;
    Ok(answer(run, None, "run", commits, Vec::new(), Some(patch)))
}

/// A diff's answer: the patch (text/x-diff) or, without one, the stat (JSON).
fn answer(
    run: &RunId,
    task: Option<&TaskId>,
    of: &str,
    commits: Vec<String>,
    files: Vec<FileChange>,
    patch: Option<Bounded>,
) -> Response<Body> {
    let mut r = match patch {
        None => {
            let (added, removed) =
                files.iter().fold((0, 0), |(a, r), f| (a + f.added.unwrap_or(0), r + f.removed.unwrap_or(0)));
            let stat = views::DiffStat {
                run_id: run.clone(),
                task: task.cloned(),
                of: of.to_string(),
                commits: commits.clone(),
                files,
                added,
                removed,
            };
            json_response(StatusCode::OK, &stat)
        }
        Some(Bounded { mut bytes, truncated }) => {
            if truncated {
                // Cut at a line's end (room left for the marker: the whole stays within the
                // limit), then say so in a line no patch tool takes for a change.
                let marker =
                    format!("# harness: the diff is cut at {DIFF_MAX} bytes; ?stat=1 lists every path it changes\n");
                bytes.truncate(DIFF_MAX.saturating_sub(marker.len()));
                let keep = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
                bytes.truncate(keep);
                bytes.extend_from_slice(marker.as_bytes());
            }
            let mut r = Response::new(full(bytes));
            r.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("text/x-diff; charset=utf-8"));
            r.headers_mut()
                .insert("harness-truncated", HeaderValue::from_static(if truncated { "true" } else { "false" }));
            r
        }
    };
    if let Ok(v) = HeaderValue::from_str(of) {
        r.headers_mut().insert("harness-diff-of", v);
    }
    if let Ok(v) = HeaderValue::from_str(&commits.join(",")) {
        r.headers_mut().insert("harness-commits", v);
    }
    r
}

/// The task's records since its latest `leased` (its latest attempt), oldest first.
fn latest_attempt(journal: &Path, task: &TaskId) -> Vec<crate::state::journal::TaskRecord> {
    let mut out = Vec::new();
    let len = std::fs::metadata(journal).map_or(0, |m| m.len());
    crate::os::tail::each_line(journal, 0, len, |line| {
        let Ok(rec) = crate::state::journal::parse_line(line) else { return };
        if let RecordBody::Task(t) = rec.body
            && &t.task == task
        {
            if t.state == TaskState::Leased {
                out.clear();
            }
            out.push(t);
        }
    });
    out
}

/// What is known of a step (gate, review) that left no record on the latest attempt.
fn unrecorded(files: &RunFiles, task: &TaskId, running: crate::state::liveness::LiveState) -> StepState {
    let live = files.liveness.as_ref().and_then(|l| l.tasks.get(task)).map(|l| l.state);
    if live == Some(running) && files.supervisor_alive() {
        return StepState::Running;
    }
    match files.view.tasks.get(task).map(|t| t.state) {
        None | Some(TaskState::Leased | TaskState::Implemented | TaskState::Gated) => StepState::Pending,
        Some(_) => StepState::NotRun,
    }
}

/// `GET /runs/:runId/tasks/:tid/gate`.
pub fn gate(d: &Durable, run: &RunId, task: &TaskId) -> Result<Response<Body>, Response<Body>> {
    let files = load(d, run)?;
    known(&files, run, task)?;
    let cmd = files.plan.as_ref().and_then(|p| p.task(task)).and_then(|t| t.gate.clone());
    let log = files.pointer.logs_dir().join(format!("{task}.gate.log"));
    let found = latest_attempt(&files.pointer.journal_path(), task).into_iter().rev().find_map(|t| match t.state {
        TaskState::Gated if t.detail.as_deref() != Some("no gate") => Some((StepState::Passed, t.rc, t.detail)),
        TaskState::Halted
            if t.detail
                .as_deref()
                .is_some_and(|d| d.starts_with("gate failed") || d.starts_with("gate did not run")) =>
        {
            Some((StepState::Failed, t.rc, t.detail))
        }
        _ => None,
    });
    let (state, rc, detail) = match (&cmd, found) {
        (None, _) => (StepState::None, None, None),
        (Some(_), Some(f)) => f,
        (Some(_), None) => (unrecorded(&files, task, crate::state::liveness::LiveState::Gating), None, None),
    };
    let tail = crate::os::tail::last_lines(&log, 0, 64 << 10);
    let v = views::GateView {
        run_id: run.clone(),
        task: task.clone(),
        gate: cmd,
        state,
        rc,
        detail,
        output_tail: String::from_utf8_lossy(&tail).into_owned(),
        log,
    };
    Ok(json_response(StatusCode::OK, &v))
}

/// `GET /runs/:runId/tasks/:tid/review`.
pub fn review(d: &Durable, run: &RunId, task: &TaskId) -> Result<Response<Body>, Response<Body>> {
    let files = load(d, run)?;
    known(&files, run, task)?;
    let wanted = files.plan.as_ref().and_then(|p| p.task(task)).is_some_and(|t| t.review);
    let log = files.pointer.logs_dir().join(format!("{task}.review.log"));
    let found = latest_attempt(&files.pointer.journal_path(), task).into_iter().rev().find_map(|t| {
        let detail = t.detail.clone().unwrap_or_default();
        match t.state {
            TaskState::Reviewed => Some((StepState::Passed, t.rc, Some(detail))),
            TaskState::Halted => {
                if let Some(v) = detail.strip_prefix("review rejected: ") {
                    Some((StepState::Failed, t.rc, Some(v.to_string())))
                } else if detail.starts_with("review seat") || detail.starts_with("review: ") {
                    Some((StepState::Failed, t.rc, Some(detail)))
                } else {
                    None
                }
            }
            _ => None,
        }
    });
    let (state, rc, verdict) = match (wanted, found) {
        (false, _) => (StepState::None, None, None),
        (true, Some(f)) => f,
        (true, None) => {
            let s = unrecorded(&files, task, crate::state::liveness::LiveState::Reviewing);
            // A gated task waits for its review: pending, not passed over.
            (s, None, None)
        }
    };
    let reasoning = (state != StepState::None).then(|| last_message(&log)).flatten();
    let v = views::ReviewView {
        run_id: run.clone(),
        task: task.clone(),
        review: wanted,
        state,
        rc,
        verdict,
        reasoning,
        log,
    };
    Ok(json_response(StatusCode::OK, &v))
}

/// The reviewer's last complete message in its log (the last 1 MiB of it is read).
fn last_message(log: &Path) -> Option<String> {
    use crate::engine::normalize::{Context, normalize_line};
    use crate::events::{Channel, Data};
    let tail = crate::os::tail::last_lines(log, 0, 1 << 20);
    let ctx = Context { run: "", task: "", session: None, observed_ts: "" };
    let mut last = None;
    for (i, line) in tail.split(|&b| b == b'\n').enumerate() {
        for e in normalize_line(crate::engine::Adapter::REVIEWER, i as u64 + 1, line, &ctx) {
            if let Data::TokenDelta { text, channel: Channel::Text, final_: true, .. } = e.data {
                last = Some(text.into_owned());
            }
        }
    }
    last
}
