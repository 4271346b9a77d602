//! Task worktrees (plan `isolation: "worktree"`, the default): where a task works so that its commit
//! holds exactly its own files. Each task gets `$HARNESS_HOME/worktrees/<runId>/<task>` on the branch
//! `harness/<runId>/<task>`, made from the run's tip at dispatch; it is reused when the task's turn
//! continues (a resume after a kill, a halt or a supervisor restart) and made afresh when the task's
//! own commit is still on it unintegrated (a conflict: the re-dispatch starts from the current tip).
//! Removed once the task's commit is integrated, and all of a run's when the run ends. Git calls go
//! through `git.rs`; this module blocks (callers on the async runtime use the blocking pool).

use crate::git::{self, GitError};
use crate::home::Home;
use crate::ids::{RunId, TaskId};
use std::path::{Path, PathBuf};

/// One task's worktree: its directory and branch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskTree {
    pub path: PathBuf,
    pub branch: String,
}

/// The branch prefix of a run's task branches.
pub fn branch_prefix(run: &RunId) -> String {
    format!("harness/{run}/")
}

/// A task id as a ref name component: dots become `%2e` when they would make an invalid ref
/// (`..`, a trailing `.` or `.lock`); ids hold only `[A-Za-z0-9._-]`.
fn ref_component(task: &TaskId) -> String {
    let t = task.as_str();
    if t.contains("..") || t.ends_with('.') || t.ends_with(".lock") { t.replace('.', "%2e") } else { t.to_string() }
}

/// Where `task` of `run` works (whether or not it exists yet).
pub fn of(home: &Home, run: &RunId, task: &TaskId) -> TaskTree {
    TaskTree {
        path: home.worktrees_dir(run).join(task.as_str()),
        branch: format!("{}{}", branch_prefix(run), ref_component(task)),
    }
}

/// Holds the repository's worktree-admin lock (`<git common dir>/harness-worktrees.lock`): `git
/// worktree add`, `remove` and `prune` are not safe to run at once in one repository (an add reads
/// another's half-made admin entry; a prune deletes it), whichever run or process asks.
fn admin_lock(run_wt: &Path) -> Result<crate::flock::Flock, GitError> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = git::run(run_wt, &["rev-parse", "--path-format=absolute", "--git-common-dir"])?;
    let path = Path::new(dir.trim()).join("harness-worktrees.lock");
    let fail = |e: std::io::Error| GitError::Failed { args: format!("lock {}", path.display()), detail: e.to_string() };
    let f =
        std::fs::OpenOptions::new().create(true).truncate(false).write(true).mode(0o600).open(&path).map_err(fail)?;
    crate::flock::Flock::exclusive(&f).map_err(fail)
}

/// How a turn's worktree was made ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prepared {
    /// Made afresh from the run's tip: `setup` runs in it.
    Fresh,
    /// The task's earlier work, continued.
    Reused,
}

/// Makes `t` ready for a turn of `task`: reused when it is a healthy worktree holding no commit of the
/// task (its earlier turn's work, uncommitted), else removed and made afresh from `run_wt`'s HEAD (a
/// worktree half-made by a supervisor killed during `git worktree add` is made afresh too).
pub fn prepare(run_wt: &Path, t: &TaskTree, run: &RunId, task: &TaskId) -> Result<Prepared, GitError> {
    let _admin = admin_lock(run_wt)?;
    settle(t);
    if git::worktree_healthy(&t.path) {
        let own_commit = git::find_task_commit(&t.path, run.as_str(), task.as_str())
            .filter(|sha| git::find_task_commit(run_wt, run.as_str(), task.as_str()).as_deref() != Some(sha));
        if own_commit.is_none() {
            return Ok(Prepared::Reused);
        }
    }
    git::worktree_remove(run_wt, &t.path, &t.branch)?;
    if let Some(dir) = t.path.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| GitError::Failed { args: format!("mkdir {}", dir.display()), detail: e.to_string() })?;
    }
    let tip = git::head(run_wt)?;
    git::worktree_add(run_wt, &t.path, &t.branch, &tip)?;
    Ok(Prepared::Fresh)
}

/// Puts a task worktree back in a plain state: a rebase left stopped by a killed supervisor (a
/// conflict mid-integration) is aborted, so its conflict markers are never taken for work.
pub fn settle(t: &TaskTree) {
    if t.path.exists() {
        match git::abort_stopped_rebase(&t.path) {
            Ok(true) => tracing::warn!(path = %t.path.display(), "aborted a rebase a previous supervisor left stopped"),
            Ok(false) => {}
            Err(e) => tracing::warn!(path = %t.path.display(), error = %e, "cannot abort a stopped rebase"),
        }
    }
}

/// Removes one task's worktree and branch.
pub fn remove(run_wt: &Path, t: &TaskTree) -> Result<(), GitError> {
    let _admin = admin_lock(run_wt)?;
    git::worktree_remove(run_wt, &t.path, &t.branch)
}

/// The task worktrees of `run` that exist now, by task directory name.
pub fn existing(home: &Home, run: &RunId) -> Vec<(String, PathBuf)> {
    let Ok(rd) = std::fs::read_dir(home.worktrees_dir(run)) else { return vec![] };
    let mut out: Vec<(String, PathBuf)> =
        rd.flatten().map(|e| (e.file_name().to_string_lossy().into_owned(), e.path())).collect();
    out.sort();
    out
}

/// Removes every task worktree and task branch of `run` (the run has ended, or `harness clean`).
/// Returns what was removed, as paths and branch names.
pub fn clean_run(home: &Home, run_wt: &Path, run: &RunId) -> Result<Vec<String>, GitError> {
    let _admin = admin_lock(run_wt)?;
    let mut removed = Vec::new();
    for (name, path) in existing(home, run) {
        match TaskId::parse(&name) {
            Ok(task) => git::worktree_remove(run_wt, &path, &of(home, run, &task).branch)?,
            Err(_) => std::fs::remove_dir_all(&path)
                .map_err(|e| GitError::Failed { args: format!("rm -r {}", path.display()), detail: e.to_string() })?,
        }
        removed.push(path.to_string_lossy().into_owned());
    }
    git::run(run_wt, &["worktree", "prune"])?;
    for b in git::branches_under(run_wt, &branch_prefix(run)) {
        git::run(run_wt, &["update-ref", "-d", &format!("refs/heads/{b}")])?;
        removed.push(b);
    }
    let _ = std::fs::remove_dir(home.worktrees_dir(run));
    Ok(removed)
}
