//! The run's repository: task commits carrying `Harness-Run` / `Harness-Task` / `Harness-Attempt`
//! trailers (so crash recovery can tell a commit it already made), the diff a reviewer reads,
//! keeping the runstate directory out of `git status`, and the task worktrees: one per task on a
//! task branch, whose commit is brought onto the run's branch by `integrate` (fast-forward, or a
//! rebase onto the tip; a conflict is aborted and reported with its paths).
//!
//! Every call is a `git` child process in the worktree; nothing here touches the journal.

use std::path::Path;
use std::process::{Command, Stdio};

#[derive(Debug, thiserror::Error)]
pub enum GitError {
    #[error("git {args}: {detail}")]
    Failed { args: String, detail: String },
}

fn git(worktree: &Path, args: &[&str]) -> Result<String, GitError> {
    git_stderr(worktree, args).map_err(|(e, _)| e)
}

/// `git`, with git's whole stderr on failure. The error's detail is git's first `fatal:`/`error:`
/// line (what failed) and its last line (what to do), when they differ.
fn git_stderr(worktree: &Path, args: &[&str]) -> Result<String, (GitError, String)> {
    let out = Command::new("git")
        .arg("-C")
        .arg(worktree)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| (GitError::Failed { args: args.join(" "), detail: e.to_string() }, String::new()))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        let last = err.lines().rfind(|l| !l.trim().is_empty()).unwrap_or("").trim().to_string();
        let first = err.lines().find(|l| l.starts_with("fatal:") || l.starts_with("error:")).map(str::trim);
        let said = match first {
            Some(f) if f != last => format!("{f} {last}"),
            _ => last,
        };
        let detail = format!("exit {}: {said}", out.status.code().unwrap_or(-1));
        return Err((GitError::Failed { args: args.join(" "), detail }, err));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Deletes the task branch `branch`. A killed git can leave a lock behind (the branch's own, or
/// `packed-refs.lock`, which deleting a ref takes): the branch's own lock is removed at once (the
/// branch is harness's); another lock in the common dir named by git is removed once it is 5 s old
/// (git holds one for milliseconds), waiting up to 8 s for that.
fn delete_branch(repo: &Path, common: &Path, branch: &str) -> Result<(), GitError> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(8);
    let own = common.join(format!("refs/heads/{branch}.lock"));
    loop {
        let (e, stderr) = match git_stderr(repo, &["update-ref", "-d", &format!("refs/heads/{branch}")]) {
            Ok(_) => return Ok(()),
            Err(x) => x,
        };
        let named = stderr
            .split("Unable to create '")
            .nth(1)
            .and_then(|rest| rest.split('\'').next())
            .map(std::path::PathBuf::from)
            .filter(|p| p.starts_with(common) && p.extension().is_some_and(|x| x == "lock"));
        let Some(lock) = named.or_else(|| own.exists().then(|| own.clone())) else { return Err(e) };
        let age = std::fs::metadata(&lock).and_then(|m| m.modified()).ok().and_then(|t| t.elapsed().ok());
        if std::time::Instant::now() >= deadline {
            return Err(e);
        }
        if lock == own || age.is_some_and(|a| a >= std::time::Duration::from_secs(5)) {
            tracing::warn!(lock = %lock.display(), "removing a lock a killed git left behind");
            if std::fs::remove_file(&lock).is_ok() {
                continue;
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
}

/// Runs `git -C dir args…` and returns its stdout (for callers with a git step of their own, e.g.
/// the demo's scratch repo).
pub fn run(dir: &Path, args: &[&str]) -> Result<String, GitError> {
    git(dir, args)
}

/// True when `sha` names a commit object in the repository at `worktree`.
pub fn commit_exists(worktree: &Path, sha: &str) -> bool {
    if sha.is_empty() || !sha.bytes().all(|c| c.is_ascii_hexdigit()) {
        return false;
    }
    git(worktree, &["cat-file", "-e", &format!("{sha}^{{commit}}")]).is_ok()
}

/// The branch checked out in `worktree`, if it is a git worktree on a branch.
pub fn branch(worktree: &Path) -> Option<String> {
    let s = git(worktree, &["symbolic-ref", "--quiet", "--short", "HEAD"]).ok()?;
    let s = s.trim();
    (!s.is_empty()).then(|| s.to_string())
}

/// The top level of the repository containing `dir`, if it is in one.
pub fn toplevel(dir: &Path) -> Option<std::path::PathBuf> {
    git(dir, &["rev-parse", "--show-toplevel"]).ok().map(|s| std::path::PathBuf::from(s.trim()))
}

/// Paths changed in the worktree (`git status`, untracked included, both sides of a rename): what
/// a wrapper's status line lists, for recovery when there is no status line.
pub fn changed_files(worktree: &Path) -> Vec<String> {
    let Ok(out) = git(worktree, &["status", "--porcelain=v1", "-z", "--untracked-files=all"]) else {
        return Vec::new();
    };
    let mut files = Vec::new();
    let mut it = out.split('\0').filter(|e| !e.is_empty());
    while let Some(e) = it.next() {
        if e.len() < 4 {
            continue;
        }
        files.push(e[3..].to_string());
        if (e.starts_with('R') || e.starts_with('C'))
            && let Some(orig) = it.next()
        {
            files.push(orig.to_string());
        }
    }
    files
}

/// True when `dir` is inside a git work tree.
pub fn is_worktree(dir: &Path) -> bool {
    git(dir, &["rev-parse", "--is-inside-work-tree"]).is_ok_and(|s| s.trim() == "true")
}

/// The trailers that identify a task's commit.
pub fn trailers(run_id: &str, task: &str, attempt: u32) -> String {
    format!("Harness-Run: {run_id}\nHarness-Task: {task}\nHarness-Attempt: {attempt}")
}

/// Stages `files` (additions, changes and deletions) and commits them with `subject` and the task's
/// trailers; an empty list makes an empty commit, so every task ends as exactly one commit.
/// Returns the new commit's sha. The caller serializes commits.
pub fn commit_task(
    worktree: &Path,
    files: &[String],
    subject: &str,
    run_id: &str,
    task: &str,
    attempt: u32,
) -> Result<String, GitError> {
    if !files.is_empty() {
        let mut args = vec!["add", "-A", "--"];
        args.extend(files.iter().map(String::as_str));
        git(worktree, &args)?;
        // The turn said these changed: when none of it is staged now, its work is not in this
        // worktree (lost, or committed already). An empty commit would hide that: fail closed.
        if git(worktree, &["diff", "--cached", "--quiet"]).is_ok() {
            return Err(GitError::Failed {
                args: "commit".into(),
                detail: format!(
                    "the turn reported changes to {} but this worktree holds none of them: not committing an empty commit",
                    files.join(", ")
                ),
            });
        }
    }
    let message = format!("{subject}\n\n{}", trailers(run_id, task, attempt));
    // An identity is needed; use the repo's own when it has one.
    let mut args = identity(worktree);
    args.extend(["commit", "--allow-empty", "-q", "-m", &message]);
    git(worktree, &args)?;
    Ok(git(worktree, &["rev-parse", "HEAD"])?.trim().to_string())
}

/// Arguments that give git an identity when the repository has none (commits and rebases need one).
fn identity(worktree: &Path) -> Vec<&'static str> {
    let has_identity = git(worktree, &["config", "user.email"]).is_ok_and(|s| !s.trim().is_empty());
    if has_identity { vec![] } else { vec!["-c", "user.name=harness", "-c", "user.email=harness@localhost"] }
}

/// The commit checked out in `worktree`.
pub fn head(worktree: &Path) -> Result<String, GitError> {
    Ok(git(worktree, &["rev-parse", "HEAD"])?.trim().to_string())
}

/// Creates a worktree at `path` on a new branch `branch` starting at `start` (the run's tip).
pub fn worktree_add(repo: &Path, path: &Path, branch: &str, start: &str) -> Result<(), GitError> {
    let p = path.to_string_lossy();
    // --force twice: a path a killed `git worktree add` left registered (missing, or locked while
    // "initializing") is ours to reuse; -b still refuses a branch that exists.
    git(repo, &["worktree", "add", "-q", "-f", "-f", "-b", branch, &p, start]).map(|_| ())
}

/// Removes the worktree at `path` (with whatever it holds) and deletes `branch`; what is already
/// gone is not an error.
///
/// A worktree half-made by a `git worktree add` that was killed (no valid `.git` file yet, or a stale
/// lock on its branch ref) is removed by hand: the caller holds the repository's worktree-admin lock
/// and the path and branch are harness's own, so nothing else can be writing them.
pub fn worktree_remove(repo: &Path, path: &Path, branch: &str) -> Result<(), GitError> {
    let p = path.to_string_lossy();
    if path.exists() && git(repo, &["worktree", "remove", "--force", "--force", &p]).is_err() {
        std::fs::remove_dir_all(path)
            .map_err(|e| GitError::Failed { args: format!("rm -r {p}"), detail: e.to_string() })?;
    }
    let common = git(repo, &["rev-parse", "--path-format=absolute", "--git-common-dir"])?;
    let common = Path::new(common.trim());
    remove_admin_entries(common, path);
    let _ = git(repo, &["worktree", "unlock", &p]);
    git(repo, &["worktree", "prune"])?;
    let exists = git(repo, &["rev-parse", "--verify", "--quiet", &format!("refs/heads/{branch}")]).is_ok();
    // update-ref, not `branch -D`: a task branch has no config section, and `branch -D` would need
    // the repository's config lock (which a killed git can leave behind).
    if exists {
        delete_branch(repo, common, branch)?;
    }
    Ok(())
}

/// Removes the admin entries (`<common dir>/worktrees/<name>`) of the worktree at `path`: the one
/// whose `gitdir` names it, and a half-written one of its name (an interrupted `git worktree add`
/// can leave `commondir` or `gitdir` empty, and then every worktree command in the repository fails
/// with "failed to read …/commondir").
fn remove_admin_entries(common: &Path, path: &Path) {
    let Some(name) = path.file_name() else { return };
    let Ok(entries) = std::fs::read_dir(common.join("worktrees")) else { return };
    let nonempty = |p: std::path::PathBuf| std::fs::read_to_string(p).ok().filter(|t| !t.trim().is_empty());
    for e in entries.flatten() {
        let d = e.path();
        let gitdir = nonempty(d.join("gitdir"));
        let names_it = gitdir.as_deref().is_some_and(|g| Path::new(g.trim()) == path.join(".git"));
        let half_written = gitdir.is_none() || nonempty(d.join("commondir")).is_none();
        let same_name = e.file_name().to_string_lossy().trim_end_matches(|c: char| c.is_ascii_digit())
            == name.to_string_lossy().trim_end_matches(|c: char| c.is_ascii_digit());
        if names_it || (half_written && same_name) {
            let _ = std::fs::remove_dir_all(&d);
        }
    }
}

/// True when `path` is a complete worktree nobody is writing: HEAD resolves, and its git dir holds
/// neither `locked` (`git worktree add` still initializing, or killed while it did) nor `index.lock`
/// (a git command in it, or one killed mid-write).
pub fn worktree_healthy(path: &Path) -> bool {
    if !path.join(".git").exists() || head(path).is_err() {
        return false;
    }
    let Ok(dir) = git(path, &["rev-parse", "--absolute-git-dir"]) else { return false };
    let dir = Path::new(dir.trim());
    !dir.join("locked").exists() && !dir.join("index.lock").exists()
}

/// Aborts a rebase left stopped in `worktree` (by a supervisor killed between a conflicting rebase
/// and its abort): the branch goes back to the commit it held and the conflict markers go away.
/// Returns whether there was one.
pub fn abort_stopped_rebase(worktree: &Path) -> Result<bool, GitError> {
    let Ok(dir) = git(worktree, &["rev-parse", "--absolute-git-dir"]) else { return Ok(false) };
    let dir = Path::new(dir.trim());
    if !dir.join("rebase-merge").exists() && !dir.join("rebase-apply").exists() {
        return Ok(false);
    }
    git(worktree, &["rebase", "--abort"])?;
    Ok(true)
}

/// Local branches under `prefix` (e.g. a run's `harness/<runId>/`).
pub fn branches_under(repo: &Path, prefix: &str) -> Vec<String> {
    let pattern = format!("refs/heads/{prefix}");
    git(repo, &["for-each-ref", "--format=%(refname:short)", &pattern])
        .map(|o| o.lines().map(str::to_string).filter(|l| !l.is_empty()).collect())
        .unwrap_or_default()
}

/// Why a task's commit could not be brought onto the run's branch.
#[derive(Debug, thiserror::Error)]
pub enum IntegrateError {
    /// The change conflicts with the tip: nothing was changed (the rebase was aborted).
    #[error("conflict integrating onto {}: {}", &tip[..tip.len().min(7)], paths.join(", "))]
    Conflict { tip: String, paths: Vec<String> },
    #[error(transparent)]
    Git(#[from] GitError),
}

/// Brings the task commit `sha` (checked out on its branch in `task_wt`, one commit on top of the tip
/// it started from) onto the branch checked out in `run_wt`: a fast-forward when the run's tip has
/// not moved, else the commit is first rebased onto the tip in the task worktree. Returns the sha now
/// on the run's branch. On a conflict the rebase is aborted: the task branch, the run's branch and
/// the run's worktree are as they were. The caller holds the run's integration lock.
pub fn integrate(run_wt: &Path, task_wt: &Path, sha: &str) -> Result<String, IntegrateError> {
    let tip = head(run_wt)?;
    let parent = git(task_wt, &["rev-parse", &format!("{sha}^")])?.trim().to_string();
    let mut sha = sha.to_string();
    if parent != tip {
        let mut args = identity(task_wt);
        args.extend(["rebase", "-q", "--empty=keep", "--onto", &tip, &parent]);
        if let Err(e) = git(task_wt, &args) {
            let paths = conflicted_paths(task_wt);
            let _ = git(task_wt, &["rebase", "--abort"]);
            if paths.is_empty() {
                return Err(e.into());
            }
            return Err(IntegrateError::Conflict { tip, paths });
        }
        sha = head(task_wt)?;
    }
    git(run_wt, &["merge", "-q", "--ff-only", &sha])?;
    Ok(sha)
}

/// The unmerged paths of a stopped rebase, each with how it conflicts (`shared.txt (both added)`).
fn conflicted_paths(worktree: &Path) -> Vec<String> {
    let Ok(out) = git(worktree, &["status", "--porcelain=v1", "-z"]) else { return vec![] };
    out.split('\0')
        .filter(|e| e.len() > 3)
        .filter_map(|e| {
            let how = match &e[..2] {
                "AA" => "both added",
                "UU" => "both modified",
                "DD" => "both deleted",
                "AU" => "added by us",
                "UA" => "added by them",
                "DU" => "deleted by us",
                "UD" => "deleted by them",
                _ => return None,
            };
            Some(format!("{} ({how})", &e[3..]))
        })
        .collect()
}

/// Waits (up to `max`) until no git process holds the repository's index lock: a commit started by
/// a supervisor that has since died may still be finishing, and must be seen before deciding to
/// commit again. Returns false when the lock is still there after `max`.
pub fn wait_index_unlocked(worktree: &Path, max: std::time::Duration) -> bool {
    let Ok(dir) = git(worktree, &["rev-parse", "--git-dir"]) else { return true };
    let lock = worktree.join(dir.trim()).join("index.lock");
    let end = std::time::Instant::now() + max;
    while lock.exists() {
        if std::time::Instant::now() > end {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    true
}

/// Escapes a value for a basic regular expression (ids only hold `[A-Za-z0-9._-]`).
fn bre_literal(s: &str) -> String {
    s.replace('.', "\\.")
}

/// The commit (reachable from HEAD) that carries this run's and task's trailers, if any.
pub fn find_task_commit(worktree: &Path, run_id: &str, task: &str) -> Option<String> {
    let run = format!("--grep=^Harness-Run: {}$", bre_literal(run_id));
    let task = format!("--grep=^Harness-Task: {}$", bre_literal(task));
    let out = git(worktree, &["log", "--format=%H", "--all-match", &run, &task]).ok()?;
    out.lines().next().map(|s| s.trim().to_string()).filter(|s| !s.is_empty())
}

/// Number of commits reachable from HEAD carrying this task's trailers (tests: "exactly once").
pub fn count_task_commits(worktree: &Path, run_id: &str, task: &str) -> usize {
    let run = format!("--grep=^Harness-Run: {}$", bre_literal(run_id));
    let task = format!("--grep=^Harness-Task: {}$", bre_literal(task));
    git(worktree, &["log", "--format=%H", "--all-match", &run, &task]).map(|o| o.lines().count()).unwrap_or(0)
}

/// What a reviewer reads: the status, the tracked diff and the new files (bounded to ~100 KB).
pub fn review_diff(worktree: &Path, files: &[String]) -> String {
    const MAX: usize = 100_000;
    let mut out = String::new();
    let mut args = vec!["status", "--porcelain=v1", "--untracked-files=all", "--"];
    args.extend(files.iter().map(String::as_str));
    if let Ok(s) = git(worktree, &args) {
        out.push_str("## git status\n");
        out.push_str(&s);
    }
    let mut args = vec!["diff", "HEAD", "--"];
    args.extend(files.iter().map(String::as_str));
    if let Ok(d) = git(worktree, &args) {
        out.push_str("\n## diff\n");
        out.push_str(&d);
    }
    for f in files {
        let p = worktree.join(f);
        let tracked = git(worktree, &["ls-files", "--error-unmatch", "--", f]).is_ok();
        if !tracked && p.is_file() {
            let body = std::fs::read(&p).unwrap_or_default();
            out.push_str(&format!("\n## new file {f}\n{}\n", String::from_utf8_lossy(&body[..body.len().min(20_000)])));
        }
        if out.len() > MAX {
            break;
        }
    }
    if out.len() > MAX {
        let mut end = MAX;
        while !out.is_char_boundary(end) {
            end -= 1;
        }
        out.truncate(end);
        out.push_str("\n[diff truncated]\n");
    }
    out
}

/// Adds `runstate_dir` (when inside the worktree) to the repo's `info/exclude`, so the journal, logs
/// and prompts never show up in a turn's changed files.
pub fn exclude_runstate(worktree: &Path, runstate_dir: &Path) -> Result<(), GitError> {
    let Ok(rel) = runstate_dir.strip_prefix(worktree) else { return Ok(()) };
    let rel = format!("/{}/", rel.display());
    let path = git(worktree, &["rev-parse", "--git-path", "info/exclude"])?;
    let path = worktree.join(path.trim());
    let current = std::fs::read_to_string(&path).unwrap_or_default();
    if current.lines().any(|l| l.trim() == rel) {
        return Ok(());
    }
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let mut text = current;
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(&format!("# harness run state (journal, logs, prompts)\n{rel}\n"));
    std::fs::write(&path, text).map_err(|e| GitError::Failed { args: "info/exclude".into(), detail: e.to_string() })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        git(d.path(), &["init", "-q"]).unwrap();
        std::fs::write(d.path().join("a.txt"), "a\n").unwrap();
        commit_task(d.path(), &["a.txt".into()], "first", "r", "T0", 1).unwrap();
        d
    }

    #[test]
    fn a_commit_holds_the_reported_files_and_refuses_when_none_of_them_changed() {
        let d = repo();
        std::fs::write(d.path().join("b.txt"), "b\n").unwrap();
        let sha = commit_task(d.path(), &["b.txt".into()], "second", "r", "T1", 1).unwrap();
        assert_eq!(git(d.path(), &["show", "--format=", "--name-only", &sha]).unwrap().trim(), "b.txt");
        // Reported, but the worktree no longer holds the change: an error, and no commit.
        let err = commit_task(d.path(), &["b.txt".into()], "again", "r", "T2", 1).unwrap_err().to_string();
        assert!(err.contains("holds none of them"), "{err}");
        assert_eq!(head(d.path()).unwrap(), sha);
        // A turn that reported nothing still records its commit (empty by design).
        let empty = commit_task(d.path(), &[], "nothing", "r", "T3", 1).unwrap();
        assert_ne!(empty, sha);
    }
}
