//! Task worktrees (plan `isolation: "worktree"`, the default): where a task works so that its commit
//! holds exactly its own files. Each task gets `$HARNESS_HOME/worktrees/<runId>/<task>` on the branch
//! `harness/<runId>/<task>`, made from the run's tip at dispatch (that tip is the task's *base*,
//! kept at `refs/harness/<runId>/<task>/base`); it is reused when the task's turn continues (a resume
//! after a kill, a halt or a supervisor restart). A redo after a conflict starts afresh from the
//! current tip **with its previous attempt applied** (`git::carry`: conflicting paths keep git's
//! markers); the attempt stays at `refs/harness/<runId>/<task>/attempt-N` until the task is
//! integrated. Integration holds the repository-wide lock. What the journal does not call
//! integrated is never removed without `force` (`clean_run`). Git calls go through `git.rs`; this
//! module blocks (callers on the async runtime use the blocking pool).

use crate::ids::{RunId, TaskId};
use crate::os::git::{self, GitError, Hooks, IntegrateError, Integrated};
use crate::os::home::Home;
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

/// The prefix of a run's refs outside branches (`refs/harness/<runId>/`).
pub fn refs_prefix(run: &RunId) -> String {
    format!("refs/harness/{run}/")
}

/// A task id as a ref name component: dots become `%2e` when they would make an invalid ref
/// (`..`, a trailing `.` or `.lock`); ids hold only `[A-Za-z0-9._-]`.
fn ref_component(task: &TaskId) -> String {
    let t = task.as_str();
    if t.contains("..") || t.ends_with('.') || t.ends_with(".lock") { t.replace('.', "%2e") } else { t.to_string() }
}

/// The task id a ref name component stands for (`ref_component`'s inverse).
fn task_of_component(c: &str) -> String {
    c.replace("%2e", ".")
}

/// `refs/harness/<runId>/<task>/`: the task's base and attempts.
fn task_refs(run: &RunId, task: &TaskId) -> String {
    format!("{}{}/", refs_prefix(run), ref_component(task))
}

/// Where the base of `task`'s current worktree is kept.
pub fn base_ref(run: &RunId, task: &TaskId) -> String {
    format!("{}base", task_refs(run, task))
}

/// Where attempt `n` of `task` is kept until the task is integrated.
pub fn attempt_ref(run: &RunId, task: &TaskId, n: u32) -> String {
    format!("{}attempt-{n}", task_refs(run, task))
}

/// The task's kept attempts, oldest first: (number, sha).
pub fn attempts(run_wt: &Path, run: &RunId, task: &TaskId) -> Vec<(u32, String)> {
    let prefix = task_refs(run, task);
    let mut v: Vec<(u32, String)> = git::refs_under(run_wt, &prefix)
        .into_iter()
        .filter_map(|(r, sha)| r.strip_prefix(&format!("{prefix}attempt-"))?.parse().ok().map(|n| (n, sha)))
        .collect();
    v.sort();
    v
}

/// Every task's latest kept attempt of `run` (its commit), by task id: one `for-each-ref` for the run.
pub fn latest_attempts(run_wt: &Path, run: &RunId) -> std::collections::HashMap<String, String> {
    let prefix = refs_prefix(run);
    let mut best: std::collections::HashMap<String, (u32, String)> = std::collections::HashMap::new();
    for (r, sha) in git::refs_under(run_wt, &prefix) {
        let Some((task, n)) = r.strip_prefix(&prefix).and_then(|rest| rest.split_once("/attempt-")) else { continue };
        let Ok(n) = n.parse::<u32>() else { continue };
        let e = best.entry(task_of_component(task)).or_insert((0, String::new()));
        if n >= e.0 {
            *e = (n, sha);
        }
    }
    best.into_iter().map(|(t, (_, sha))| (t, sha)).collect()
}

/// Where `task` of `run` works (whether or not it exists yet).
pub fn of(home: &Home, run: &RunId, task: &TaskId) -> TaskTree {
    TaskTree {
        path: home.worktrees_dir(run).join(task.as_str()),
        branch: format!("{}{}", branch_prefix(run), ref_component(task)),
    }
}

/// Opens and locks `<git common dir>/<name>`.
fn common_lock(run_wt: &Path, name: &str) -> Result<crate::os::flock::Flock, GitError> {
    use std::os::unix::fs::OpenOptionsExt;
    let path = git::common_dir(run_wt)?.join(name);
    let fail = |e: std::io::Error| GitError::Failed { args: format!("lock {}", path.display()), detail: e.to_string() };
    let f =
        std::fs::OpenOptions::new().create(true).truncate(false).write(true).mode(0o600).open(&path).map_err(fail)?;
    crate::os::flock::Flock::exclusive(&f).map_err(fail)
}

/// Holds the repository's worktree-admin lock (`<git common dir>/harness-worktrees.lock`): `git
/// worktree add`, `remove` and `prune` are not safe to run at once in one repository (an add reads
/// another's half-made admin entry; a prune deletes it), whichever run or process asks.
fn admin_lock(run_wt: &Path) -> Result<crate::os::flock::Flock, GitError> {
    common_lock(run_wt, "harness-worktrees.lock")
}

/// The repository-wide integration lock (`<git common dir>/harness-integrate.lock`), held from
/// reading the tip through the rebase to the fast-forward: two runs of one checkout (or of linked
/// worktrees of one repository) never integrate at once.
pub fn integration_lock(run_wt: &Path) -> Result<crate::os::flock::Flock, GitError> {
    common_lock(run_wt, "harness-integrate.lock")
}

/// Whose task is being made ready, and how.
pub struct Ready<'a> {
    pub run: &'a RunId,
    pub task: &'a TaskId,
    /// The run instance's nonce: only this instance's commits and attempts are the task's.
    pub nonce: Option<&'a str>,
    /// Hooks for `git worktree add` (`post-checkout`).
    pub hooks: Hooks,
}

/// How a turn's worktree was made ready.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prepared {
    /// The commit the worktree started from.
    pub base: String,
    /// An earlier attempt to apply to the worktree (`apply_carry`) once `setup` has run on the
    /// clean tip.
    pub carry: Option<Carry>,
}

/// An earlier attempt of the task, to be carried into its new worktree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Carry {
    /// The attempt's commit (kept at its attempt ref).
    pub sha: String,
    /// The base that attempt started from.
    pub old_base: String,
    /// Its conflicting paths with the new base, each with how and against whose commit (found by
    /// applying it once and putting the worktree back, so the journal has them before the files
    /// change).
    pub conflicts: Vec<String>,
}

/// Files in the task worktree's own git directory (they go with the worktree): the attempt carried
/// into it, with its conflicts, one per line after the sha; and that `setup` succeeded in it.
const CARRIED_FILE: &str = "harness-carried";
const SETUP_FILE: &str = "harness-setup-done";
/// The carried attempt's new files, one per line (the squash adds them even where ignored).
const NEW_FILES_FILE: &str = "harness-carried-new";
/// A redo that ended at its base was halted once: a steer after that confirms it.
const EMPTY_REDO_FILE: &str = "harness-empty-redo-halted";

fn state_file(t: &TaskTree, name: &str) -> Option<PathBuf> {
    git::own_git_dir(&t.path).ok().map(|d| d.join(name))
}

/// The attempt carried into `t` and its conflicts, when the carry finished.
pub fn carried(t: &TaskTree) -> Option<(String, Vec<String>)> {
    let text = std::fs::read_to_string(state_file(t, CARRIED_FILE)?).ok()?;
    let mut lines = text.lines();
    let sha = lines.next()?.trim().to_string();
    Some((sha, lines.map(str::to_string).collect()))
}

/// The new files of the attempt carried into `t`.
pub fn carried_new_files(t: &TaskTree) -> Vec<String> {
    state_file(t, NEW_FILES_FILE)
        .and_then(|f| std::fs::read_to_string(f).ok())
        .map(|text| text.lines().filter(|l| !l.is_empty()).map(str::to_string).collect())
        .unwrap_or_default()
}

/// Whether a redo of `t` that ended at its base was halted already; marks it so when `mark`.
pub fn empty_redo_halted(t: &TaskTree, mark: bool) -> bool {
    let Some(f) = state_file(t, EMPTY_REDO_FILE) else { return false };
    let was = f.exists();
    if mark && !was {
        let _ = std::fs::write(&f, b"");
    }
    was
}

/// True when the plan's `setup` has not yet succeeded in `t`.
pub fn needs_setup(t: &TaskTree) -> bool {
    state_file(t, SETUP_FILE).is_none_or(|f| !f.exists())
}

/// Records that `setup` succeeded in `t`.
pub fn setup_done(t: &TaskTree) -> std::io::Result<()> {
    let f = state_file(t, SETUP_FILE).ok_or_else(|| std::io::Error::other("not a git worktree"))?;
    std::fs::write(f, b"")
}

/// Makes `t` ready for a turn: reused when it is a healthy worktree holding no commit of the task's
/// (its earlier turn's work, uncommitted), else made afresh from `run_wt`'s HEAD — with the task's
/// previous attempt (its unintegrated commit, plus anything left beside it) kept as an attempt ref,
/// to be applied on top (`apply_carry`). A worktree half-made by a killed `git worktree add` is made
/// afresh too, and one a supervisor died in before its carry finished is put back at its base.
pub fn prepare(run_wt: &Path, t: &TaskTree, r: &Ready) -> Result<Prepared, GitError> {
    let _admin = admin_lock(run_wt)?;
    settle(t);
    clear_ref_locks(run_wt, r);
    let base_name = base_ref(r.run, r.task);
    let known_base = git::ref_sha(run_wt, &base_name);
    let latest = attempts(run_wt, r.run, r.task).pop().filter(|(_, sha)| belongs(run_wt, sha, r));
    // The attempt a new worktree is made to carry, named before the old worktree goes: a worktree
    // whose carry never finished is known by it (one made by an earlier release has none).
    let pending_name = format!("{}carry", task_refs(r.run, r.task));
    let mut carry_from: Option<(String, String)> = None;
    if t.path.join(".git").exists() {
        // Locks a git killed with its supervisor left would make a worktree holding work look
        // broken, and a broken one is made afresh.
        for l in git::clear_stale_locks(&t.path, &t.branch, crate::timeouts::STALE_LOCK_WAIT) {
            tracing::warn!(task = %r.task, lock = %l.display(), "removed a stale git lock left in the task's worktree");
        }
    }
    if git::worktree_healthy(&t.path) {
        let base = match &known_base {
            Some(b) if git::commit_exists(&t.path, b) => b.clone(),
            // A worktree made before bases were kept: where it left the run's branch.
            _ => git::run(&t.path, &["merge-base", "HEAD", &git::head(run_wt)?])?.trim().to_string(),
        };
        let owner = git::Owner { run: r.run.as_str(), task: r.task.as_str(), nonce: r.nonce, since: Some(&base) };
        let own_commit = git::find_own_commit(&t.path, &owner)
            .filter(|sha| git::find_own_commit(run_wt, &git::Owner { since: None, ..owner }).as_deref() != Some(sha));
        if own_commit.is_none() {
            let pending = git::ref_sha(run_wt, &pending_name).filter(|p| latest.as_ref().is_some_and(|(_, l)| l == p));
            if let Some(sha) = pending.filter(|sha| carried(t).is_none_or(|(c, _)| &c != sha)) {
                // Made for a redo whose carry never finished (its supervisor died): no turn ran in
                // it, so it goes back to where it was made and the carry starts over. Whatever it
                // holds is kept first (`set-aside`), should that ever be more than a half carry.
                if !git::changed_files(&t.path).is_empty() {
                    let head = git::head(&t.path)?;
                    let snap = git::snapshot(&t.path, &head, &format!("harness: set aside from {}", r.task))?;
                    git::set_ref(run_wt, &format!("{}set-aside", task_refs(r.run, r.task)), &snap)?;
                    tracing::warn!(task = %r.task, sha = %snap, "a half-finished carry was set aside and starts over");
                }
                git::reset_to_head(&t.path)?;
                if let Some(f) = state_file(t, SETUP_FILE) {
                    let _ = std::fs::remove_file(f);
                }
                let head = git::head(&t.path)?;
                git::set_ref(run_wt, &base_name, &head)?;
                let old_base = git::run(run_wt, &["rev-parse", &format!("{sha}^")])?.trim().to_string();
                let conflicts = dry_carry(&t.path, &sha, &old_base)?;
                return Ok(Prepared { base: head, carry: Some(Carry { sha, old_base, conflicts }) });
            }
            if known_base.as_deref() != Some(base.as_str()) {
                git::set_ref(run_wt, &base_name, &base)?;
            }
            return Ok(Prepared { base, carry: None });
        }
        // A redo after the task's commit failed to integrate: its whole state is kept first.
        let n = attempts(run_wt, r.run, r.task).last().map_or(1, |(n, _)| n + 1);
        let message = format!(
            "harness: attempt {} of task {}\n\n{}",
            n,
            r.task,
            git::trailers(&git::Owner { since: None, ..owner }, n)
        );
        let snap = git::snapshot(&t.path, &base, &message)?;
        if attempts(run_wt, r.run, r.task).last().map(|(_, s)| s.as_str()) != Some(snap.as_str()) {
            git::set_ref(run_wt, &attempt_ref(r.run, r.task, n), &snap)?;
        }
        carry_from = Some((snap, base));
    } else if let Some((_, sha)) = latest {
        // No worktree, but a kept attempt of this run instance: the redo starts with it.
        let parent = git::run(run_wt, &["rev-parse", &format!("{sha}^")])?.trim().to_string();
        carry_from = Some((sha, parent));
    }
    match &carry_from {
        Some((sha, _)) => git::set_ref(run_wt, &pending_name, sha)?,
        // Only when there is one: deleting a ref takes `packed-refs.lock`, which other tasks'
        // ref updates take too.
        None if git::ref_sha(run_wt, &pending_name).is_some() => git::delete_ref(run_wt, &pending_name)?,
        None => {}
    }
    git::worktree_remove(run_wt, &t.path, &t.branch)?;
    if let Some(dir) = t.path.parent() {
        crate::os::home::private_dir(dir)
            .map_err(|e| GitError::Failed { args: format!("mkdir {}", dir.display()), detail: e.to_string() })?;
    }
    // The base goes first: a worktree that exists always has its base recorded.
    let tip = git::head(run_wt)?;
    git::set_ref(run_wt, &base_name, &tip)?;
    add_private(run_wt, t, &tip, r.hooks)?;
    let carry = match carry_from {
        Some((sha, old_base)) => {
            let conflicts = dry_carry(&t.path, &sha, &old_base)?;
            Some(Carry { sha, old_base, conflicts })
        }
        None => None,
    };
    Ok(Prepared { base: tip, carry })
}

/// `git worktree add` of `t` at `tip` into a folder of harness's own (0700): made before git checks
/// out into it (git takes an empty dir) and tightened after, should git have made it under the
/// umask; what git and the agent write inside keeps the repository's modes.
fn add_private(run_wt: &Path, t: &TaskTree, tip: &str, hooks: Hooks) -> Result<(), GitError> {
    let private = |p: &Path| {
        crate::os::home::private_dir(p)
            .map_err(|e| GitError::Failed { args: format!("mkdir {}", p.display()), detail: e.to_string() })
    };
    private(&t.path)?;
    git::worktree_add(run_wt, &t.path, &t.branch, tip, hooks)?;
    private(&t.path)
}

/// The task's refs are written only by its own pipeline, which is not running while it is
/// prepared: a lock among them is a git killed with its supervisor (else every later attempt fails
/// "cannot lock ref"), removed.
fn clear_ref_locks(run_wt: &Path, r: &Ready) {
    for l in git::clear_ref_locks(run_wt, &task_refs(r.run, r.task)) {
        tracing::warn!(task = %r.task, lock = %l.display(), "removed a stale lock on one of the task's refs");
    }
}

/// The conflicts carrying `sha` into the fresh worktree at `path` would have: applied once, then
/// the worktree is put back at its HEAD.
fn dry_carry(path: &Path, sha: &str, old_base: &str) -> Result<Vec<String>, GitError> {
    let conflicts = git::carry(path, sha, old_base);
    git::reset_to_head(path)?;
    conflicts
}

/// Applies the prepared carry to `t` (after `setup` ran on the clean tip), once: a carry already
/// finished in this worktree is not applied again. Returns its conflicts.
pub fn apply_carry(t: &TaskTree, c: &Carry) -> Result<Vec<String>, GitError> {
    if let Some((_, conflicts)) = carried(t).filter(|(sha, _)| sha == &c.sha) {
        return Ok(conflicts);
    }
    let added = git::added_files(&t.path, &c.old_base, &c.sha)?;
    let conflicts = git::carry(&t.path, &c.sha, &c.old_base)?;
    let fail = |e: std::io::Error| GitError::Failed { args: format!("write {CARRIED_FILE}"), detail: e.to_string() };
    let f = state_file(t, CARRIED_FILE)
        .ok_or_else(|| GitError::Failed { args: "rev-parse --absolute-git-dir".into(), detail: "no git dir".into() })?;
    let mut list = added.join("\n");
    list.push('\n');
    std::fs::write(f.with_file_name(NEW_FILES_FILE), list).map_err(fail)?;
    let mut text = format!("{}\n", c.sha);
    for l in &conflicts {
        text.push_str(l);
        text.push('\n');
    }
    let tmp = f.with_extension("tmp");
    std::fs::write(&tmp, text).map_err(fail)?;
    std::fs::rename(&tmp, &f).map_err(fail)?;
    Ok(conflicts)
}

/// True when `sha` carries this run instance's trailers (an attempt of an earlier instance of the
/// same runId is not this task's).
fn belongs(repo: &Path, sha: &str, r: &Ready) -> bool {
    let Ok(body) = git::run(repo, &["log", "-1", "--format=%B", sha]) else { return false };
    let has = |k: &str, v: &str| body.lines().any(|l| l.trim() == format!("{k}: {v}"));
    has("Harness-Run", r.run.as_str())
        && has("Harness-Task", r.task.as_str())
        && r.nonce.is_none_or(|n| has("Harness-Nonce", n))
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

/// How many times an integration reads the tip again when it moved under it.
pub const INTEGRATE_TRIES: u32 = 5;

/// Brings the task's commit (HEAD of `task_wt`) onto the run's branch under the repository-wide
/// integration lock: the run's worktree must still have `branch` checked out (`None`: a detached
/// HEAD), and a tip that moved anyway is rebased onto again, up to `INTEGRATE_TRIES` times.
pub fn integrate(run_wt: &Path, task_wt: &Path, branch: Option<&str>) -> Result<Integrated, IntegrateError> {
    let _lock = integration_lock(run_wt)?;
    git::wait_index_unlocked(run_wt, crate::timeouts::INDEX_LOCK_WAIT);
    for _ in 0..INTEGRATE_TRIES {
        check_branch(run_wt, branch)?;
        let sha = git::head(task_wt)?;
        if let Some(done) = git::integrate(run_wt, task_wt, &sha)? {
            return Ok(done);
        }
    }
    Err(IntegrateError::Raced { tries: INTEGRATE_TRIES })
}

/// The run's worktree still has the run's branch checked out.
pub fn check_branch(run_wt: &Path, branch: Option<&str>) -> Result<(), IntegrateError> {
    let found = git::branch(run_wt);
    if found.as_deref() == branch {
        return Ok(());
    }
    Err(IntegrateError::BranchMoved {
        worktree: run_wt.to_path_buf(),
        expected: branch.unwrap_or("(a detached HEAD)").to_string(),
        found: found.unwrap_or_else(|| "a detached HEAD".into()),
    })
}

/// Removes one integrated task's worktree, branch and refs.
pub fn remove(run_wt: &Path, t: &TaskTree, run: &RunId, task: &TaskId) -> Result<(), GitError> {
    let _admin = admin_lock(run_wt)?;
    git::worktree_remove(run_wt, &t.path, &t.branch)?;
    for (name, _) in git::refs_under(run_wt, &task_refs(run, task)) {
        git::delete_ref(run_wt, &name)?;
    }
    Ok(())
}

/// The task worktrees of `run` that exist now, by task directory name.
pub fn existing(home: &Home, run: &RunId) -> Vec<(String, PathBuf)> {
    let Ok(rd) = std::fs::read_dir(home.worktrees_dir(run)) else { return vec![] };
    let mut out: Vec<(String, PathBuf)> =
        rd.flatten().map(|e| (e.file_name().to_string_lossy().into_owned(), e.path())).collect();
    out.sort();
    out
}

/// What of a task is left in git and on disk after its run: its worktree, branch and refs.
#[derive(Debug, Clone, Default)]
struct Leftover {
    worktree: Option<PathBuf>,
    branch: Option<String>,
    refs: Vec<(String, String)>,
}

/// What `clean_run` did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cleaned {
    /// Paths, branches and refs removed.
    pub removed: Vec<String>,
    /// What was kept, each with why.
    pub kept: Vec<(String, String)>,
}

/// What unintegrated work a task's leftovers hold, in words (`None`: nothing that is not on the
/// run's branch already or in its base).
fn work_of(run_wt: &Path, run: &RunId, task: &TaskId, l: &Leftover) -> Option<String> {
    let mut said = Vec::new();
    let base = l.refs.iter().find(|(r, _)| *r == base_ref(run, task)).map(|(_, s)| s.clone());
    if let Some(wt) = &l.worktree {
        let changed = if git::is_worktree(wt) { git::changed_files(wt).len() } else { 0 };
        let head = git::head(wt).ok();
        let ahead = match (&head, &base) {
            (Some(h), Some(b)) => h != b,
            (Some(h), None) => !git::is_ancestor(run_wt, h, "HEAD"),
            _ => false,
        };
        if changed > 0 {
            said.push(format!("{changed} uncommitted path(s)"));
        }
        if ahead {
            said.push("commits above its base".to_string());
        }
        if !git::is_worktree(wt) && wt.exists() {
            said.push("a directory that is not a worktree".to_string());
        }
    } else if let (Some(b), Some(bsha)) = (&l.branch, &base)
        && git::ref_sha(run_wt, &format!("refs/heads/{b}")).is_some_and(|s| &s != bsha)
    {
        said.push("a branch above its base".to_string());
    }
    let attempts = l.refs.iter().filter(|(r, _)| r.contains("/attempt-")).count();
    if attempts > 0 {
        said.push(format!("{attempts} kept attempt(s)"));
    }
    (!said.is_empty()).then(|| said.join(", "))
}

/// Every task's leftovers of `run`, by task id: worktrees on disk, task branches, refs.
fn leftovers(home: &Home, run_wt: &Path, run: &RunId) -> std::collections::BTreeMap<String, Leftover> {
    let mut by_task: std::collections::BTreeMap<String, Leftover> = Default::default();
    for (name, path) in existing(home, run) {
        by_task.entry(name).or_default().worktree = Some(path);
    }
    let prefix = branch_prefix(run);
    for b in git::branches_under(run_wt, &prefix) {
        let name = task_of_component(b.strip_prefix(&prefix).unwrap_or(&b));
        by_task.entry(name).or_default().branch = Some(b);
    }
    let rprefix = refs_prefix(run);
    for (r, sha) in git::refs_under(run_wt, &rprefix) {
        let name = task_of_component(r.strip_prefix(&rprefix).and_then(|x| x.split('/').next()).unwrap_or(""));
        by_task.entry(name).or_default().refs.push((r, sha));
    }
    by_task
}

/// What of task `name`'s leftovers holds unintegrated work, and why it is kept (`None`: nothing).
fn keeps(run_wt: &Path, run: &RunId, name: &str, l: &Leftover) -> Option<(String, String)> {
    let work = match TaskId::parse(name) {
        Ok(t) => work_of(run_wt, run, &t, l),
        Err(_) => l.worktree.as_ref().map(|_| "a directory named outside the task id grammar".to_string()),
    }?;
    let what = l
        .worktree
        .as_ref()
        .map(|p| p.display().to_string())
        .or_else(|| l.branch.clone())
        .unwrap_or_else(|| format!("{}{name}/", refs_prefix(run)));
    Some((what, format!("task {name} is not integrated and holds {work} (`harness clean --force` removes it)")))
}

/// The unintegrated task work an earlier instance of `run` left (worktrees, branches, attempt refs),
/// each with why it is kept: a new instance of the runId must not start over it (it would reuse
/// or delete it).
pub fn left_work(home: &Home, run_wt: &Path, run: &RunId) -> Vec<(String, String)> {
    leftovers(home, run_wt, run).iter().filter_map(|(name, l)| keeps(run_wt, run, name, l)).collect()
}

/// Removes the task worktrees, task branches and refs of `run` (its run has ended, or `harness
/// clean`) — but only of tasks `integrated` says the journal calls integrated, or that hold no
/// unintegrated work; the rest is kept (and said why) unless `force`.
pub fn clean_run(
    home: &Home,
    run_wt: &Path,
    run: &RunId,
    integrated: &dyn Fn(&str) -> bool,
    force: bool,
) -> Result<Cleaned, GitError> {
    let _admin = admin_lock(run_wt)?;
    let by_task = leftovers(home, run_wt, run);
    let mut out = Cleaned::default();
    for (name, l) in by_task {
        let task = TaskId::parse(&name).ok();
        if !force
            && !integrated(&name)
            && let Some(kept) = keeps(run_wt, run, &name, &l)
        {
            out.kept.push(kept);
            continue;
        }
        if let Some(path) = &l.worktree {
            let branch = task.as_ref().map(|t| of(home, run, t).branch).or_else(|| l.branch.clone());
            match branch {
                Some(b) => git::worktree_remove(run_wt, path, &b)?,
                None => std::fs::remove_dir_all(path).map_err(|e| GitError::Failed {
                    args: format!("rm -r {}", path.display()),
                    detail: e.to_string(),
                })?,
            }
            out.removed.push(path.display().to_string());
        } else if let Some(b) = &l.branch {
            git::delete_ref(run_wt, &format!("refs/heads/{b}"))?;
            out.removed.push(b.clone());
        }
        if l.worktree.is_some()
            && let Some(b) = &l.branch
        {
            out.removed.push(b.clone());
        }
        for (r, _) in &l.refs {
            git::delete_ref(run_wt, r)?;
        }
    }
    git::run(run_wt, &["worktree", "prune"])?;
    let _ = std::fs::remove_dir(home.worktrees_dir(run));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(dir: &Path, args: &[&str]) -> String {
        let mut all = vec!["-c", "user.name=t", "-c", "user.email=t@localhost"];
        all.extend(args);
        git::run(dir, &all).unwrap().trim().to_string()
    }

    fn write_commit(dir: &Path, files: &[(&str, &str)], msg: &str) {
        for (f, text) in files {
            std::fs::write(dir.join(f), text).unwrap();
            g(dir, &["add", f]);
        }
        g(dir, &["commit", "-q", "-m", msg]);
    }

    /// A scratch repository with one commit, and the run and task the tests use.
    fn scratch() -> (tempfile::TempDir, PathBuf, RunId, TaskId) {
        let d = tempfile::tempdir().unwrap();
        let repo = d.path().join("repo");
        std::fs::create_dir(&repo).unwrap();
        g(&repo, &["init", "-q", "-b", "main"]);
        write_commit(&repo, &[("README", "r\n")], "first");
        (d, repo, RunId::parse("0123456789ab--r").unwrap(), TaskId::parse("T").unwrap())
    }

    /// A supervisor that dies while a redo's carry is half applied: the next `prepare` sets the half
    /// aside, puts the worktree back at its base and carries again; once the carry finished, the
    /// worktree (with the carried change and its markers) is reused as it is.
    #[test]
    fn a_carry_cut_short_starts_over_and_a_finished_one_is_kept() {
        let (d, repo, run, task) = scratch();
        let r = Ready { run: &run, task: &task, nonce: Some("n1"), hooks: Hooks::Off };
        let t = TaskTree { path: d.path().join("wt/T"), branch: "harness/0123456789ab--r/T".into() };
        let first = prepare(&repo, &t, &r).unwrap();
        assert_eq!(first.carry, None);
        let owner = git::Owner { run: "0123456789ab--r", task: "T", nonce: Some("n1"), since: None };
        let msg = format!("T: work\n\n{}", git::trailers(&owner, 1));
        write_commit(&t.path, &[("own.txt", "own\n"), ("shared.txt", "task\n")], &msg);
        write_commit(&repo, &[("shared.txt", "tip\n")], "other task");
        let tip = git::head(&repo).unwrap();

        let redo = prepare(&repo, &t, &r).unwrap();
        let carry = redo.carry.clone().expect("the redo carries the attempt");
        assert_eq!(redo.base, tip);
        assert!(carry.conflicts[0].starts_with("shared.txt (both added)"), "{:?}", carry.conflicts);
        assert!(git::changed_files(&t.path).is_empty(), "the dry run left the worktree clean");
        // Killed mid-carry: the files changed, the carry was never recorded.
        let _ = git::carry(&t.path, &carry.sha, &carry.old_base);
        std::fs::write(t.path.join("stray.txt"), "x\n").unwrap();
        let again = prepare(&repo, &t, &r).unwrap();
        assert_eq!(again.carry.as_ref().map(|c| &c.sha), Some(&carry.sha));
        assert_eq!(again.base, tip);
        assert!(git::changed_files(&t.path).is_empty(), "back at its base: {:?}", git::changed_files(&t.path));
        let aside =
            git::ref_sha(&repo, "refs/harness/0123456789ab--r/T/set-aside").expect("the half carry is set aside");
        assert!(g(&repo, &["show", "--name-only", "--format=", &aside]).contains("stray.txt"));

        let conflicts = apply_carry(&t, again.carry.as_ref().unwrap()).unwrap();
        assert_eq!(conflicts, carry.conflicts);
        assert!(std::fs::read_to_string(t.path.join("shared.txt")).unwrap().contains("<<<<<<< "));
        let reused = prepare(&repo, &t, &r).unwrap();
        assert_eq!(reused, Prepared { base: tip.clone(), carry: None });
        assert_eq!(std::fs::read_to_string(t.path.join("own.txt")).unwrap(), "own\n", "the carried change stays");
        assert_eq!(apply_carry(&t, &carry).unwrap(), carry.conflicts, "a finished carry is not applied twice");
        assert!(std::fs::read_to_string(t.path.join("shared.txt")).unwrap().contains("<<<<<<< "));
    }

    /// A redo worktree an earlier release made (no carry pending, no record of its carry) is reused
    /// with the turn's work in it, never reset.
    #[test]
    fn a_redo_worktree_without_a_pending_carry_is_reused_as_it_is() {
        let (d, repo, run, task) = scratch();
        let r = Ready { run: &run, task: &task, nonce: Some("n1"), hooks: Hooks::Off };
        let t = TaskTree { path: d.path().join("wt/T"), branch: "harness/0123456789ab--r/T".into() };
        prepare(&repo, &t, &r).unwrap();
        let owner = git::Owner { run: "0123456789ab--r", task: "T", nonce: Some("n1"), since: None };
        write_commit(&t.path, &[("own.txt", "own\n")], &format!("T: work\n\n{}", git::trailers(&owner, 1)));
        write_commit(&repo, &[("other.txt", "o\n")], "other task");
        let redo = prepare(&repo, &t, &r).unwrap();
        apply_carry(&t, redo.carry.as_ref().unwrap()).unwrap();
        // As an earlier release left it: no record of the carry, no pending ref.
        std::fs::remove_file(state_file(&t, CARRIED_FILE).unwrap()).unwrap();
        git::delete_ref(&repo, "refs/harness/0123456789ab--r/T/carry").unwrap();
        std::fs::write(t.path.join("turn.txt"), "the redo turn's work\n").unwrap();
        let again = prepare(&repo, &t, &r).unwrap();
        assert_eq!(again.carry, None);
        assert!(t.path.join("turn.txt").exists() && t.path.join("own.txt").exists(), "nothing reset");
    }

    /// Locks a killed git left in a task worktree's own git dir (a rebase's `AUTO_MERGE.lock`) are
    /// removed, so the next rebase of the task does not fail on them forever.
    #[test]
    fn stale_locks_of_a_killed_rebase_are_cleared() {
        let (d, repo, run, task) = scratch();
        let r = Ready { run: &run, task: &task, nonce: None, hooks: Hooks::Off };
        let t = TaskTree { path: d.path().join("wt/T"), branch: "harness/0123456789ab--r/T".into() };
        prepare(&repo, &t, &r).unwrap();
        let dir = git::own_git_dir(&t.path).unwrap();
        std::fs::write(dir.join("AUTO_MERGE.lock"), "").unwrap();
        let removed = git::clear_stale_locks(&t.path, &t.branch, std::time::Duration::from_millis(50));
        assert_eq!(removed, vec![dir.join("AUTO_MERGE.lock")]);
    }

    /// A supervisor killed while `git update-ref` wrote the task's base left `base.lock`: the next
    /// `prepare` removes it (under real systemd, a kill -9 halted the task "cannot lock ref" for good).
    #[test]
    fn a_lock_a_killed_git_left_on_the_tasks_refs_is_removed() {
        let (d, repo, run, task) = scratch();
        let r = Ready { run: &run, task: &task, nonce: None, hooks: Hooks::Off };
        let t = TaskTree { path: d.path().join("wt/T"), branch: "harness/0123456789ab--r/T".into() };
        let refs = repo.join(".git/refs/harness/0123456789ab--r/T");
        std::fs::create_dir_all(&refs).unwrap();
        std::fs::write(refs.join("base.lock"), "").unwrap();
        let p = prepare(&repo, &t, &r).expect("prepared despite the stale lock");
        assert!(!refs.join("base.lock").exists());
        assert_eq!(git::ref_sha(&repo, &base_ref(&run, &task)), Some(p.base));
    }

    /// `setup` is owed until it succeeded once in the worktree, whatever restarts come between.
    #[test]
    fn setup_is_owed_until_it_succeeded_in_the_worktree() {
        let (d, repo, run, task) = scratch();
        let r = Ready { run: &run, task: &task, nonce: None, hooks: Hooks::Off };
        let t = TaskTree { path: d.path().join("wt/T"), branch: "harness/0123456789ab--r/T".into() };
        prepare(&repo, &t, &r).unwrap();
        assert!(needs_setup(&t));
        prepare(&repo, &t, &r).unwrap();
        assert!(needs_setup(&t), "a reused worktree whose setup failed still owes it");
        setup_done(&t).unwrap();
        prepare(&repo, &t, &r).unwrap();
        assert!(!needs_setup(&t));
    }
}
