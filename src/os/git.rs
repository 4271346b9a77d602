//! The run's repository: a task's one commit, squashed from everything between its base and its end
//! state (the agent's own commits and what it left uncommitted), carrying `Harness-Run` /
//! `Harness-Task` / `Harness-Attempt` / `Harness-Nonce` trailers (so crash recovery can tell a commit
//! this run instance already made); the diff a reviewer reads; keeping the runstate directory out of
//! `git status`; the task worktrees, whose commit `integrate` brings onto the run's branch
//! (fast-forward, or a rebase onto the tip; a conflict is aborted and reported with its paths); an
//! earlier attempt carried onto a new tip (`carry`); and harness's refs (`refs/harness/…`).
//!
//! harness's own git calls run no repository hook unless asked (`Hooks::Repo`): a hook is the
//! user's, written for their own commits (husky, pre-commit), and one that fails in a fresh
//! worktree would halt every task.
//!
//! Every call is a `git` child process in the worktree; nothing here touches the journal.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

#[derive(Debug, thiserror::Error)]
pub enum GitError {
    #[error("git {args}: {detail}")]
    Failed { args: String, detail: String },
}

fn git(worktree: &Path, args: &[&str]) -> Result<String, GitError> {
    git_stderr(worktree, args).map_err(|(e, _)| e)
}

/// Whether a git call runs the repository's hooks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hooks {
    /// None run: `core.hooksPath` is `/dev/null` (a path with no file under it) for the call.
    Off,
    /// The repository's hooks run (plan `git_hooks: true`, for the task's own commit and worktree).
    Repo,
}

/// `git` with the hook setting and, when the repository has none, an identity (commits, rebases and
/// cherry-picks need one) before `args`.
fn git_as(worktree: &Path, hooks: Hooks, args: &[&str]) -> Result<String, (GitError, String)> {
    let mut all = identity(worktree);
    all.extend(args);
    spawn(worktree, hooks, None, &all)
}

/// `git`, with git's whole stderr on failure, and no hook of the repository's. The error's detail
/// is git's first `fatal:`/`error:` line (what failed) and its last line (what to do), when they
/// differ.
fn git_stderr(worktree: &Path, args: &[&str]) -> Result<String, (GitError, String)> {
    spawn(worktree, Hooks::Off, None, args)
}

/// The one place a `git` child is started: in `worktree`, with `hooks`, on another index file when
/// `index` is given.
fn spawn(worktree: &Path, hooks: Hooks, index: Option<&Path>, args: &[&str]) -> Result<String, (GitError, String)> {
    let mut cmd = Command::new("git");
    cmd.arg("-C").arg(worktree);
    if hooks == Hooks::Off {
        cmd.args(["-c", "core.hooksPath=/dev/null"]);
    }
    if let Some(index) = index {
        cmd.env("GIT_INDEX_FILE", index);
    }
    let out = cmd
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

/// Runs `git -C dir args…` (no hooks; on the index file `index` when given) and returns at most
/// `limit` bytes of its stdout, and whether it had more (then the child is killed, not waited for to
/// the end): a diff read for a client, bounded however large the change.
pub fn run_bounded(dir: &Path, index: Option<&Path>, args: &[&str], limit: usize) -> Result<(Vec<u8>, bool), GitError> {
    use std::io::Read;
    let failed = |detail: String| GitError::Failed { args: args.join(" "), detail };
    let mut cmd = Command::new("git");
    cmd.arg("-C").arg(dir).args(["-c", "core.hooksPath=/dev/null"]);
    if let Some(index) = index {
        cmd.env("GIT_INDEX_FILE", index);
    }
    let mut child = cmd
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| failed(e.to_string()))?;
    let mut out = Vec::new();
    let stdout = child.stdout.take().expect("piped");
    let read = stdout.take(limit as u64 + 1).read_to_end(&mut out);
    if out.len() > limit {
        out.truncate(limit);
        let _ = child.kill();
        let _ = child.wait();
        return Ok((out, true));
    }
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    let status = child.wait().map_err(|e| failed(e.to_string()))?;
    read.map_err(|e| failed(e.to_string()))?;
    if !status.success() {
        let line = err.lines().find(|l| l.starts_with("fatal:") || l.starts_with("error:")).unwrap_or(err.trim());
        return Err(failed(format!("exit {}: {}", status.code().unwrap_or(-1), line.trim())));
    }
    Ok((out, false))
}

/// Runs `git -C dir args…` on the index file `index` (a temporary one) and returns its stdout.
pub fn run_with_index(dir: &Path, index: &Path, args: &[&str]) -> Result<String, GitError> {
    spawn(dir, Hooks::Off, Some(index), args).map_err(|(e, _)| e)
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

/// Who a task commit belongs to: its trailers, and where recovery looks for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner<'a> {
    pub run: &'a str,
    pub task: &'a str,
    /// The run instance's nonce (`started` record); `None` for a run journaled before nonces, whose
    /// commits are found by run and task alone.
    pub nonce: Option<&'a str>,
    /// Only commits above this one count (`since..HEAD`): the run's start, or a task's base.
    pub since: Option<&'a str>,
}

/// The trailers that identify a task's commit.
pub fn trailers(o: &Owner, attempt: u32) -> String {
    let mut t = format!("Harness-Run: {}\nHarness-Task: {}\nHarness-Attempt: {attempt}", o.run, o.task);
    if let Some(n) = o.nonce {
        t.push_str(&format!("\nHarness-Nonce: {n}"));
    }
    t
}

/// What a task's squash is made of.
pub struct Squash<'a> {
    /// The commit the task's worktree started from (recorded at dispatch).
    pub base: &'a str,
    /// The branch the task commits on (its task branch; the run's branch with `isolation: shared`):
    /// an agent that checked out another branch or detached HEAD is put back on it, its work kept.
    pub branch: Option<&'a str>,
    /// `None`: everything in the worktree is the task's (its own worktree). `Some`: only these
    /// paths, and those the agent's own commits changed (`isolation: shared`).
    pub paths: Option<&'a [String]>,
    /// What the turn reported changed (its status line): when none of it differs from the base in
    /// the end, the work is not here, and nothing is committed (fail closed).
    pub listed: &'a [String],
    pub subject: &'a str,
    pub owner: Owner<'a>,
    pub attempt: u32,
    pub hooks: Hooks,
    /// Paths added by name even when ignored (a carried attempt's new files), when present.
    pub force: &'a [String],
    /// The worktree is the user's checkout (`isolation: shared`), where commits made during the
    /// turn may be the user's own as well as the agent's: they are never rewritten, and only what
    /// is left uncommitted becomes the task's commit, on top of them.
    pub keep_history: bool,
}

/// How a squash ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Squashed {
    /// The task's one commit, on `base`.
    Commit(String),
    /// The end state equals the base: nothing to commit (and nothing was).
    NoChanges,
    /// `keep_history`: the turn's own commits hold all of its change, and stay as they are; the
    /// sha is the branch's head after them.
    Kept(String),
}

/// Why a task's change could not be committed. Nothing was deleted in any case.
#[derive(Debug, thiserror::Error)]
pub enum SquashError {
    /// The agent moved history below its base (a rebase, a reset past it, an amend of the base).
    #[error(
        "the agent rewrote history below the task's base: {} is not an ancestor of HEAD {} (a rebase or a reset past the base); nothing was committed or deleted, the worktree is kept",
        short(base),
        short(head)
    )]
    BelowBase { base: String, head: String },
    /// The redo still holds conflict markers or unmerged paths.
    #[error("unresolved conflicts in {}: a conflict marker line (not in the earlier attempt itself) or an unmerged path is left; nothing was committed", .0.join(", "))]
    Unresolved(Vec<String>),
    /// The turn said these changed, but the worktree holds none of it.
    #[error("the turn reported changes to {} but this worktree holds none of them: not committing an empty commit", .0.join(", "))]
    Vanished(Vec<String>),
    /// A hook of the repository refused (`git_hooks: true`), with what it printed.
    #[error("a git hook refused the commit (git_hooks: true): {0}")]
    Hook(String),
    #[error(transparent)]
    Git(#[from] GitError),
}

/// The first 7 characters of a sha.
pub fn short(sha: &str) -> &str {
    &sha[..sha.len().min(7)]
}

/// Makes the task's one commit from everything between `s.base` and the worktree's end state: the
/// agent's own commits (their messages go into the commit's body) and what it left uncommitted. The
/// branch is moved back to the base (`reset --soft`: index and files untouched) and the whole change
/// committed once on it. The caller serializes commits in one worktree.
pub fn squash(worktree: &Path, s: &Squash) -> Result<Squashed, SquashError> {
    let end = head(worktree)?;
    if !is_ancestor(worktree, s.base, &end) {
        return Err(SquashError::BelowBase { base: s.base.to_string(), head: end.clone() });
    }
    // A task commit of harness's above the base (another run integrating onto a shared checkout,
    // or merged in by the agent) is never folded into this task's: the squash starts above it.
    let above = git(worktree, &["log", "-1", "--format=%H", "--grep=^Harness-Run: ", &format!("{}..{end}", s.base)])?;
    let base = match above.trim() {
        "" => s.base.to_string(),
        newer => newer.to_string(),
    };
    let s = &Squash { base: &base, ..*s };
    if let Some(b) = s.branch
        && branch(worktree).as_deref() != Some(b)
    {
        // Back on the task's branch at the agent's HEAD; the index and the files stay as they are.
        git(worktree, &["update-ref", &format!("refs/heads/{b}"), &end])?;
        git(worktree, &["symbolic-ref", "HEAD", &format!("refs/heads/{b}")])?;
    }
    let dirty = changed_files(worktree);
    let unmerged = unmerged_paths(worktree);
    if !unmerged.is_empty() {
        return Err(SquashError::Unresolved(unmerged));
    }
    if s.keep_history && end != s.base {
        return match commit_squash(worktree, &Squash { base: &end, ..*s }, "", &[], false)? {
            Squashed::NoChanges => Ok(Squashed::Kept(end)),
            made => Ok(made),
        };
    }
    // The agent's own commits since the base, oldest first.
    let messages = if end != s.base {
        git(worktree, &["log", "--reverse", "--format=%B%x00", &format!("{}..{end}", s.base)])?
    } else {
        String::new()
    };
    let agent_paths = if end != s.base { diff_names(worktree, s.base, &end)? } else { Vec::new() };
    if end != s.base {
        git(worktree, &["reset", "-q", "--soft", s.base])?;
    }
    // From here on, a failure puts the branch back at the agent's end (its commits on it, the
    // files untouched), so a failed commit rewrites no history.
    let made = commit_squash(worktree, s, &messages, &agent_paths, end == s.base && dirty.is_empty());
    if made.is_err() && end != s.base {
        let _ = git(worktree, &["reset", "-q", "--soft", &end]);
    }
    made
}

/// The second half of `squash`: stages the change on the base and commits it.
fn commit_squash(
    worktree: &Path,
    s: &Squash,
    messages: &str,
    agent_paths: &[String],
    untouched: bool,
) -> Result<Squashed, SquashError> {
    match s.paths {
        None => {
            git(worktree, &["add", "-A"])?;
            let forced: Vec<&str> =
                s.force.iter().map(String::as_str).filter(|p| worktree.join(p).symlink_metadata().is_ok()).collect();
            if !forced.is_empty() {
                let mut args = vec!["add", "-f", "--"];
                args.extend(&forced);
                git(worktree, &args)?;
            }
        }
        Some(listed) => {
            let mut paths: Vec<&str> = listed.iter().map(String::as_str).collect();
            paths.extend(agent_paths.iter().map(String::as_str));
            paths.sort_unstable();
            paths.dedup();
            if !paths.is_empty() {
                let mut args = vec!["add", "-A", "--"];
                args.extend(paths);
                git(worktree, &args)?;
            }
        }
    }
    if git(worktree, &["diff", "--cached", "--quiet", s.base]).is_ok() {
        // Reported changed, yet neither committed by the agent nor in the worktree now: the work is
        // not here (a replaced worktree), and "no changes" would hide its loss.
        if !s.listed.is_empty() && untouched {
            return Err(SquashError::Vanished(s.listed.to_vec()));
        }
        return Ok(Squashed::NoChanges);
    }
    // Paragraphs: the subject, the agent's own messages (indented), the trailers last.
    let mut message = s.subject.to_string();
    let bodies: Vec<&str> = messages.split('\0').map(str::trim).filter(|m| !m.is_empty()).collect();
    if !bodies.is_empty() {
        message.push_str("\n\nThe agent's own commits, squashed into this one:\n");
        for b in bodies {
            message.push('\n');
            for l in b.lines() {
                message.push_str(format!("    {l}").trim_end());
                message.push('\n');
            }
        }
    }
    message.truncate(message.trim_end().len());
    message.push_str("\n\n");
    message.push_str(&trailers(&s.owner, s.attempt));
    if let Err((e, stderr)) = git_as(worktree, s.hooks, &["commit", "-q", "-m", &message]) {
        if s.hooks == Hooks::Repo {
            return Err(SquashError::Hook(tail_lines(&stderr, 8, 600)));
        }
        return Err(e.into());
    }
    Ok(Squashed::Commit(head(worktree)?))
}

/// The last `n` non-empty lines of `text` joined with " | ", at most `max` characters.
fn tail_lines(text: &str, n: usize, max: usize) -> String {
    let lines: Vec<&str> = text.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    if lines.is_empty() {
        return "(it printed nothing)".into();
    }
    let t = lines[lines.len().saturating_sub(n)..].join(" | ");
    if t.chars().count() > max { t.chars().skip(t.chars().count() - max).collect() } else { t }
}

/// Paths that differ between two commits (both sides of a rename).
fn diff_names(worktree: &Path, from: &str, to: &str) -> Result<Vec<String>, GitError> {
    let out = git(worktree, &["diff", "--name-only", "--no-renames", "-z", from, to])?;
    Ok(out.split('\0').filter(|p| !p.is_empty()).map(str::to_string).collect())
}

/// Paths with unmerged index entries.
pub fn unmerged_paths(worktree: &Path) -> Vec<String> {
    git(worktree, &["diff", "--name-only", "--diff-filter=U", "-z"])
        .map(|o| o.split('\0').filter(|p| !p.is_empty()).map(str::to_string).collect())
        .unwrap_or_default()
}

/// True when `a` is an ancestor of (or equal to) `b`.
pub fn is_ancestor(worktree: &Path, a: &str, b: &str) -> bool {
    git(worktree, &["merge-base", "--is-ancestor", a, b]).is_ok()
}

/// The files among `paths` (relative to `worktree`) that still hold a git conflict marker line.
pub fn conflict_marked(worktree: &Path, paths: &[String]) -> Vec<String> {
    paths
        .iter()
        .filter(|p| {
            // Line by line, in bounded chunks: an agent's file may be any size.
            let path = worktree.join(p);
            let Ok(len) = std::fs::metadata(&path).map(|m| m.len()) else { return false };
            let marker = |l: &[u8]| is_marker(l, b'<') || is_marker(l, b'>');
            let mut marked = false;
            let end = crate::os::tail::each_line(&path, 0, len, |l| marked |= marker(l));
            // A last line without its newline.
            if !marked && len > end && len - end <= 1 << 20 {
                marked = marker(&crate::os::tail::read_from(&path, end, Some(len)));
            }
            marked
        })
        .cloned()
        .collect()
}

/// Every path the worktree's state differs in from `base`: committed since, staged, changed in
/// the files, and untracked (not ignored).
pub fn changed_since(worktree: &Path, base: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for args in [
        &["diff", "--name-only", "--no-renames", "-z", base][..],
        &["ls-files", "-z", "--others", "--exclude-standard"],
    ] {
        if let Ok(o) = git(worktree, args) {
            out.extend(o.split('\0').filter(|p| !p.is_empty()).map(str::to_string));
        }
    }
    out.sort();
    out.dedup();
    out
}

/// A conflict marker line of any size (`conflict-marker-size` in `.gitattributes`; 7 by default):
/// seven or more `c`, then a space or the line's end.
fn is_marker(line: &[u8], c: u8) -> bool {
    let n = line.iter().take_while(|&&b| b == c).count();
    n >= 7 && matches!(line.get(n), None | Some(b' ') | Some(b'\r'))
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
/// With `Hooks::Repo` the repository's `post-checkout` runs in the new worktree, and its failure
/// (with what it printed) is the error.
pub fn worktree_add(repo: &Path, path: &Path, branch: &str, start: &str, hooks: Hooks) -> Result<(), GitError> {
    let p = path.to_string_lossy();
    // A `git worktree add -b` killed with its supervisor leaves the new branch's ref lock: the
    // branch is harness's and the caller holds the worktree-admin lock, so it is stale — removed,
    // or every later attempt fails "cannot lock ref".
    if let Ok(common) = common_dir(repo) {
        let _ = std::fs::remove_file(common.join(format!("refs/heads/{branch}.lock")));
    }
    // --force twice: a path a killed `git worktree add` left registered (missing, or locked while
    // "initializing") is ours to reuse; -b still refuses a branch that exists.
    git_as(repo, hooks, &["worktree", "add", "-q", "-f", "-f", "-b", branch, &p, start]).map(|_| ()).map_err(
        |(e, stderr)| match (hooks, e) {
            (Hooks::Repo, GitError::Failed { args, .. }) => GitError::Failed {
                args,
                detail: format!("a git hook failed (git_hooks: true): {}", tail_lines(&stderr, 8, 600)),
            },
            (_, e) => e,
        },
    )
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
    #[error("conflict integrating onto {}: {}", short(tip), paths.join(", "))]
    Conflict { tip: String, paths: Vec<String> },
    /// The run's branch kept moving under the integration (a commit by someone else each time).
    #[error(
        "integration raced: the run's branch moved during each of {tries} tries (commits by something other than harness); nothing was changed"
    )]
    Raced { tries: u32 },
    /// The run's worktree has another branch checked out than the one the run integrates onto.
    #[error("the run's worktree {} has {found} checked out, but the run integrates onto {expected}: nothing was changed (switch back with `git switch {expected}` and retry the task)", worktree.display())]
    BranchMoved { worktree: std::path::PathBuf, expected: String, found: String },
    #[error(transparent)]
    Git(#[from] GitError),
}

/// What integration put on the run's branch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Integrated {
    /// The task's commit, now the run's tip.
    Commit(String),
    /// Rebased onto the tip, the task's change was empty (the tip holds it already): nothing added.
    Empty,
}

/// Brings the task commit `sha` (checked out on its branch in `task_wt`, one commit on top of the tip
/// it started from) onto the branch checked out in `run_wt`: a fast-forward when the run's tip has
/// not moved, else the commit is first rebased onto the tip in the task worktree. On a conflict the
/// rebase is aborted: the task branch, the run's branch and the run's worktree are as they were. A
/// fast-forward refused because the tip moved meanwhile is `Ok(None)` (the caller tries again). The
/// caller holds the repository's integration lock. No hook runs.
pub fn integrate(run_wt: &Path, task_wt: &Path, sha: &str) -> Result<Option<Integrated>, IntegrateError> {
    let tip = head(run_wt)?;
    let parent = git(task_wt, &["rev-parse", &format!("{sha}^")])?.trim().to_string();
    let mut sha = sha.to_string();
    if parent != tip {
        if let Err((e, _)) = git_as(task_wt, Hooks::Off, &["rebase", "-q", "--empty=drop", "--onto", &tip, &parent]) {
            let paths = conflicted_paths(task_wt);
            let _ = git(task_wt, &["rebase", "--abort"]);
            if paths.is_empty() {
                return Err(e.into());
            }
            return Err(IntegrateError::Conflict { tip, paths });
        }
        sha = head(task_wt)?;
        if sha == tip {
            return Ok(Some(Integrated::Empty));
        }
    }
    match git_as(run_wt, Hooks::Off, &["merge", "-q", "--ff-only", &sha]) {
        Ok(_) => Ok(Some(Integrated::Commit(sha))),
        Err(_) if head(run_wt)? != tip => Ok(None),
        Err((e, _)) => Err(e.into()),
    }
}

/// The repository's common git dir (shared by all its worktrees).
pub fn common_dir(repo: &Path) -> Result<std::path::PathBuf, GitError> {
    Ok(std::path::PathBuf::from(git(repo, &["rev-parse", "--path-format=absolute", "--git-common-dir"])?.trim()))
}

/// Points `name` (a full ref name) at `sha`.
pub fn set_ref(repo: &Path, name: &str, sha: &str) -> Result<(), GitError> {
    git(repo, &["update-ref", name, sha]).map(|_| ())
}

/// The sha `name` points at, if it exists.
pub fn ref_sha(repo: &Path, name: &str) -> Option<String> {
    git(repo, &["rev-parse", "--verify", "--quiet", &format!("{name}^{{commit}}")]).ok().map(|s| s.trim().to_string())
}

/// The refs under `prefix` (e.g. `refs/harness/<runId>/`), with their shas, sorted by name.
pub fn refs_under(repo: &Path, prefix: &str) -> Vec<(String, String)> {
    git(repo, &["for-each-ref", "--format=%(refname) %(objectname)", prefix])
        .map(|o| o.lines().filter_map(|l| l.split_once(' ')).map(|(r, s)| (r.to_string(), s.to_string())).collect())
        .unwrap_or_default()
}

/// Deletes the ref `name` (gone already is fine).
pub fn delete_ref(repo: &Path, name: &str) -> Result<(), GitError> {
    git(repo, &["update-ref", "-d", name]).map(|_| ())
}

/// A commit of the worktree's whole state (its HEAD, index and files, untracked ones included) on
/// `parent`, with `message`: an attempt kept before its worktree is made afresh. The worktree's own
/// index is left as it was (a temporary index is used). Returns HEAD itself when it already is
/// exactly that.
pub fn snapshot(worktree: &Path, parent: &str, message: &str) -> Result<String, GitError> {
    let dir = git(worktree, &["rev-parse", "--absolute-git-dir"])?;
    let tmp = Path::new(dir.trim()).join("harness-snapshot.index");
    let _ = std::fs::remove_file(&tmp);
    let with_index =
        |args: &[&str]| spawn(worktree, Hooks::Off, Some(&tmp), args).map(|o| o.trim().to_string()).map_err(|(e, _)| e);
    let tree = with_index(&["read-tree", "HEAD"])
        .and_then(|_| with_index(&["add", "-A"]))
        .and_then(|_| with_index(&["write-tree"]));
    let _ = std::fs::remove_file(&tmp);
    let tree = tree?;
    let head = head(worktree)?;
    let head_tree = git(worktree, &["rev-parse", "HEAD^{tree}"])?.trim().to_string();
    let head_parent =
        git(worktree, &["rev-parse", "--verify", "--quiet", "HEAD^"]).map(|s| s.trim().to_string()).unwrap_or_default();
    if tree == head_tree && head_parent == parent {
        return Ok(head);
    }
    let mut args = identity(worktree);
    args.extend(["commit-tree", &tree, "-p", parent, "-m", message]);
    Ok(git(worktree, &args)?.trim().to_string())
}

/// Applies the change of `attempt` (a commit on an older base) to the worktree, whose HEAD is the
/// newer tip, as uncommitted changes: paths that do not conflict as they were, conflicting ones
/// with git's conflict markers, and those git has no markers for unmerged in the index. Nothing is
/// committed; the index is otherwise left at HEAD. Returns the conflicting paths, each with how it
/// conflicts and the tip's commit that last changed it.
pub fn carry(worktree: &Path, attempt: &str, old_base: &str) -> Result<Vec<String>, GitError> {
    // The worktree is fresh at the tip: what is staged, and a tracked file changed, were changed by
    // `setup` (an `npm install` rewriting the lockfile), which is not the task's work and would
    // stop the cherry-pick: unstaged, and back to the tip's version. Untracked and ignored files
    // stay.
    git(worktree, &["reset", "-q"])?;
    let touched = git(worktree, &["diff", "--name-only", "-z", "--diff-filter=MDT", "HEAD"])?;
    let touched: Vec<&str> = touched.split('\0').filter(|p| !p.is_empty()).collect();
    if !touched.is_empty() {
        let mut args = vec!["checkout", "-q", "HEAD", "--"];
        args.extend(&touched);
        git(worktree, &args)?;
    }
    carry_apply(worktree, attempt, old_base)
}

/// The files `attempt` added on `old_base`: after a carry they are untracked again, and one the
/// tip now ignores (or one added with `git add -f`) is still the task's, so the squash adds them
/// by name (`Squash::force`).
pub fn added_files(worktree: &Path, old_base: &str, attempt: &str) -> Result<Vec<String>, GitError> {
    let out = git(worktree, &["diff", "--name-only", "-z", "--no-renames", "--diff-filter=A", old_base, attempt])?;
    Ok(out.split('\0').filter(|p| !p.is_empty()).map(str::to_string).collect())
}

/// The bytes of `path` at `rev`, when it has one.
pub fn blob(worktree: &Path, rev: &str, path: &str) -> Option<Vec<u8>> {
    let out = Command::new("git")
        .arg("-C")
        .arg(worktree)
        .args(["cat-file", "blob", &format!("{rev}:{path}")])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    out.status.success().then_some(out.stdout)
}

/// `carry`'s cherry-pick and what it leaves, markers and unmerged paths.
fn carry_apply(worktree: &Path, attempt: &str, old_base: &str) -> Result<Vec<String>, GitError> {
    if git_as(worktree, Hooks::Off, &["cherry-pick", "--no-commit", attempt]).is_ok() {
        git(worktree, &["reset", "-q"])?;
        return Ok(Vec::new());
    }
    let conflicts = conflicted_paths(worktree);
    if conflicts.is_empty() {
        let _ = git(worktree, &["cherry-pick", "--abort"]);
        return Err(GitError::Failed {
            args: format!("cherry-pick --no-commit {}", short(attempt)),
            detail: "failed without a conflict".into(),
        });
    }
    // A conflict git could not write markers for (a binary file, a path deleted on one side) stays
    // unmerged in the index, both sides at hand (`git checkout --ours/--theirs`), so that nothing
    // is committed until the agent decides (`git add`/`git rm`); the rest is unstaged, markers in
    // the files.
    let markerless: Vec<String> =
        conflicts.iter().map(|c| conflict_path_of(c).to_string()).filter(|p| !c_has_markers(worktree, p)).collect();
    let mut stages = String::new();
    for p in &markerless {
        stages.push_str(&git(worktree, &["ls-files", "-u", "-z", "--", p])?);
    }
    git(worktree, &["reset", "-q"])?;
    let _ = git(worktree, &["cherry-pick", "--quit"]);
    if !stages.is_empty() {
        restore_unmerged(worktree, &markerless, &stages)?;
    }
    let tip = head(worktree)?;
    Ok(conflicts
        .into_iter()
        .map(|c| {
            let path = conflict_path_of(&c).to_string();
            let c = if markerless.contains(&path) { format!("{c}, unmerged in the index") } else { c };
            let by = git(
                worktree,
                &[
                    "log",
                    "-1",
                    "--format=%h %(trailers:key=Harness-Task,valueonly,separator=)",
                    &format!("{old_base}..{tip}"),
                    "--",
                    &path,
                ],
            )
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty());
            match by {
                Some(by) => match by.split_once(' ') {
                    Some((sha, task)) if !task.trim().is_empty() => {
                        format!("{c}, against {sha} of task {}", task.trim())
                    }
                    _ => format!("{c}, against {}", by.split(' ').next().unwrap_or(&by)),
                },
                None => c,
            }
        })
        .collect())
}

/// The path of a conflict as `conflicted_paths` describes it (`shared.txt (both added), …`).
pub fn conflict_path_of(c: &str) -> &str {
    c.rsplit_once(" (").map_or(c, |(p, _)| p)
}

/// True when the file at `path` holds a git conflict marker line.
fn c_has_markers(worktree: &Path, path: &str) -> bool {
    !conflict_marked(worktree, &[path.to_string()]).is_empty()
}

/// Puts the unmerged index entries `stages` (`git ls-files -u -z` of `paths`) back after a reset:
/// each path's stage-0 entry is removed first, as `git update-index --index-info` asks.
fn restore_unmerged(worktree: &Path, paths: &[String], stages: &str) -> Result<(), GitError> {
    let mut input = String::new();
    for p in paths {
        input.push_str(&format!("0 {}\t{p}\0", "0".repeat(40)));
    }
    input.push_str(stages);
    let mut child = std::process::Command::new("git")
        .arg("-C")
        .arg(worktree)
        .args(["update-index", "-z", "--index-info"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| GitError::Failed { args: "update-index --index-info".into(), detail: e.to_string() })?;
    use std::io::Write;
    let wrote = child.stdin.take().map(|mut i| i.write_all(input.as_bytes()));
    let out = child
        .wait_with_output()
        .map_err(|e| GitError::Failed { args: "update-index --index-info".into(), detail: e.to_string() })?;
    match (wrote, out.status.success()) {
        (Some(Ok(())), true) => Ok(()),
        _ => Err(GitError::Failed {
            args: "update-index -z --index-info".into(),
            detail: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        }),
    }
}

/// The worktree's own git directory (`<common dir>/worktrees/<name>` for a linked worktree): files
/// kept there go when the worktree is removed.
pub fn own_git_dir(worktree: &Path) -> Result<PathBuf, GitError> {
    Ok(PathBuf::from(git(worktree, &["rev-parse", "--absolute-git-dir"])?.trim()))
}

/// Puts a worktree back at its HEAD: index and files as committed, untracked files removed
/// (ignored ones kept).
pub fn reset_to_head(worktree: &Path) -> Result<(), GitError> {
    git(worktree, &["reset", "-q", "--hard", "HEAD"])?;
    git(worktree, &["clean", "-q", "-f", "-d"])?;
    Ok(())
}

/// The unmerged paths of a stopped rebase or cherry-pick, each with how it conflicts
/// (`shared.txt (both added)`). In both, "ours" is the run's tip and "theirs" the task's change.
fn conflicted_paths(worktree: &Path) -> Vec<String> {
    let Ok(out) = git(worktree, &["status", "--porcelain=v1", "-z"]) else { return vec![] };
    out.split('\0')
        .filter(|e| e.len() > 3)
        .filter_map(|e| {
            let how = match &e[..2] {
                "AA" => "both added",
                "UU" => "both modified",
                "DD" => "both deleted",
                "AU" => "added on the tip",
                "UA" => "added by the task",
                "DU" => "deleted on the tip, changed by the task",
                "UD" => "changed on the tip, deleted by the task",
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

/// In a task's own worktree, which no one but its task writes: waits up to `max` for the locks in
/// its own git dir (`index.lock`, `HEAD.lock`, a rebase's `AUTO_MERGE.lock`…) and its branch's
/// (`refs/heads/<branch>.lock`) to go, then removes those a git killed with its supervisor left
/// behind (else every later commit or rebase of the task fails on them).
/// Returns the locks it removed.
pub fn clear_stale_locks(worktree: &Path, branch: &str, max: std::time::Duration) -> Vec<std::path::PathBuf> {
    let (Ok(dir), Ok(common)) =
        (git(worktree, &["rev-parse", "--git-dir"]), git(worktree, &["rev-parse", "--git-common-dir"]))
    else {
        return Vec::new();
    };
    let dir = worktree.join(dir.trim());
    let common = worktree.join(common.trim());
    // Every lock in the worktree's own git dir (index, HEAD, and those a rebase takes: AUTO_MERGE,
    // ORIG_HEAD, REBASE_HEAD…), and its branch's in the common dir.
    let mut locks: Vec<std::path::PathBuf> = std::fs::read_dir(&dir)
        .map(|rd| rd.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "lock")).collect())
        .unwrap_or_default();
    locks.push(common.join(format!("refs/heads/{branch}.lock")));
    let end = std::time::Instant::now() + max;
    while locks.iter().any(|l| l.exists()) && std::time::Instant::now() < end {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    locks.into_iter().filter(|l| l.exists() && std::fs::remove_file(l).is_ok()).collect()
}

/// Removes the `.lock` files among the loose refs under `prefix` (e.g. `refs/harness/<runId>/<task>/`)
/// in `repo`'s common dir — for a caller that knows no git of its own is writing them. Returns the
/// locks it removed.
pub fn clear_ref_locks(repo: &Path, prefix: &str) -> Vec<std::path::PathBuf> {
    let Ok(common) = common_dir(repo) else { return Vec::new() };
    let mut removed = Vec::new();
    let mut dirs = vec![common.join(prefix.trim_end_matches('/'))];
    while let Some(dir) = dirs.pop() {
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let p = e.path();
            match e.file_type() {
                Ok(t) if t.is_dir() => dirs.push(p),
                Ok(t)
                    if t.is_file()
                        && p.extension().is_some_and(|x| x == "lock")
                        && std::fs::remove_file(&p).is_ok() =>
                {
                    removed.push(p)
                }
                _ => {}
            }
        }
    }
    removed
}

/// Escapes a value for a basic regular expression (ids only hold `[A-Za-z0-9._-]`).
fn bre_literal(s: &str) -> String {
    s.replace('.', "\\.")
}

/// The commit (reachable from HEAD) that carries this run's and task's trailers, if any, whichever
/// run instance made it (tests and `journal reconcile`; recovery asks `find_own_commit`).
pub fn find_task_commit(worktree: &Path, run_id: &str, task: &str) -> Option<String> {
    find_own_commit(worktree, &Owner { run: run_id, task, nonce: None, since: None })
}

/// The newest commit reachable from HEAD (above `owner.since`) that carries `owner`'s trailers — its
/// nonce too, when it has one: a commit of an earlier instance of the same runId is never this
/// run's.
pub fn find_own_commit(worktree: &Path, owner: &Owner) -> Option<String> {
    let run = format!("--grep=^Harness-Run: {}$", bre_literal(owner.run));
    let task = format!("--grep=^Harness-Task: {}$", bre_literal(owner.task));
    let mut args = vec!["log".to_string(), "--format=%H".into(), "--all-match".into(), run, task];
    if let Some(n) = owner.nonce {
        args.push(format!("--grep=^Harness-Nonce: {}$", bre_literal(n)));
    }
    if let Some(since) = owner.since {
        args.push(format!("{since}..HEAD"));
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = git(worktree, &args).ok()?;
    out.lines().next().map(|s| s.trim().to_string()).filter(|s| !s.is_empty())
}

/// Number of commits reachable from HEAD carrying this task's trailers (tests: "exactly once").
pub fn count_task_commits(worktree: &Path, run_id: &str, task: &str) -> usize {
    let run = format!("--grep=^Harness-Run: {}$", bre_literal(run_id));
    let task = format!("--grep=^Harness-Task: {}$", bre_literal(task));
    git(worktree, &["log", "--format=%H", "--all-match", &run, &task]).map(|o| o.lines().count()).unwrap_or(0)
}

/// What a reviewer reads: the task's whole change against its base — the agent's own commits and
/// what it left uncommitted — as the status, the tracked diff and the new files (bounded to ~100 KB).
pub fn review_diff(worktree: &Path, base: &str) -> String {
    const MAX: usize = 100_000;
    let mut out = String::new();
    if let Ok(s) = git(worktree, &["status", "--porcelain=v1", "--untracked-files=all"]) {
        out.push_str("## git status\n");
        out.push_str(&s);
    }
    if let Ok(d) = git(worktree, &["diff", base]) {
        out.push_str("\n## diff\n");
        out.push_str(&d);
    }
    let untracked = git(worktree, &["ls-files", "--others", "--exclude-standard", "-z"]).unwrap_or_default();
    for f in untracked.split('\0').filter(|f| !f.is_empty()) {
        let p = worktree.join(f);
        if p.is_file() {
            // Its first 20,000 bytes, never the whole file (an agent's file may be any size).
            let mut body = Vec::new();
            if let Ok(file) = std::fs::File::open(&p) {
                let _ = std::io::Read::read_to_end(&mut std::io::Read::take(file, 20_000), &mut body);
            }
            out.push_str(&format!("\n## new file {f}\n{}\n", String::from_utf8_lossy(&body)));
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

    fn repo() -> (tempfile::TempDir, String) {
        let d = tempfile::tempdir().unwrap();
        git(d.path(), &["init", "-q", "-b", "main"]).unwrap();
        std::fs::write(d.path().join("a.txt"), "a\n").unwrap();
        git(d.path(), &["add", "a.txt"]).unwrap();
        let mut args = identity(d.path());
        args.extend(["commit", "-q", "-m", "first"]);
        git(d.path(), &args).unwrap();
        let base = head(d.path()).unwrap();
        (d, base)
    }

    fn agent_commit(dir: &Path, file: &str, msg: &str) {
        std::fs::write(dir.join(file), format!("{file}\n")).unwrap();
        git(dir, &["add", file]).unwrap();
        let mut args = identity(dir);
        args.extend(["commit", "-q", "-m", msg]);
        git(dir, &args).unwrap();
    }

    #[test]
    fn a_stale_lock_of_the_new_branch_does_not_stop_worktree_add() {
        let (d, base) = repo();
        let lock = d.path().join(".git/refs/heads/harness/r1/A.lock");
        std::fs::create_dir_all(lock.parent().unwrap()).unwrap();
        std::fs::write(&lock, "").unwrap();
        let wt = tempfile::tempdir().unwrap();
        let path = wt.path().join("A");
        worktree_add(d.path(), &path, "harness/r1/A", &base, Hooks::Off).unwrap();
        assert!(path.join(".git").exists() && !lock.exists());
    }

    #[test]
    fn conflict_markers_of_any_size_are_found_and_prose_is_not() {
        assert!(is_marker(b"<<<<<<< HEAD", b'<'));
        assert!(is_marker(&[b'<'; 32], b'<'));
        assert!(is_marker(b">>>>>>>>>>>>>>>> 9ebd131 (x)", b'>'));
        assert!(!is_marker(b"<<<< not a marker", b'<'));
        assert!(!is_marker(b"<<<<<<<<tag>", b'<'));
    }

    fn sq<'a>(base: &'a str, listed: &'a [String]) -> Squash<'a> {
        Squash {
            base,
            branch: Some("main"),
            paths: None,
            listed,
            subject: "T1: do it",
            owner: Owner { run: "r", task: "T1", nonce: Some("n1"), since: None },
            attempt: 1,
            hooks: Hooks::Off,
            force: &[],
            keep_history: false,
        }
    }

    fn files_of(dir: &Path, sha: &str) -> Vec<String> {
        git(dir, &["show", "--format=", "--name-only", sha]).unwrap().lines().map(str::to_string).collect()
    }

    #[test]
    fn the_squash_holds_the_agents_commits_and_what_it_left_uncommitted_in_one_commit() {
        let (d, base) = repo();
        agent_commit(d.path(), "b.txt", "agent: add b");
        agent_commit(d.path(), "c.txt", "agent: add c");
        std::fs::write(d.path().join("d.txt"), "d\n").unwrap();
        let Squashed::Commit(sha) = squash(d.path(), &sq(&base, &["d.txt".into()])).unwrap() else { panic!() };
        assert_eq!(git(d.path(), &["rev-parse", &format!("{sha}^")]).unwrap().trim(), base, "one commit on the base");
        assert_eq!(files_of(d.path(), &sha), vec!["b.txt", "c.txt", "d.txt"]);
        let body = git(d.path(), &["log", "-1", "--format=%B", &sha]).unwrap();
        assert!(body.contains("agent: add b") && body.contains("agent: add c"), "{body}");
        assert!(body.trim_end().ends_with("Harness-Nonce: n1"), "the trailers close the message: {body}");
        assert_eq!(
            find_own_commit(d.path(), &Owner { run: "r", task: "T1", nonce: Some("n1"), since: Some(&base) }),
            Some(sha.clone())
        );
        assert_eq!(find_own_commit(d.path(), &Owner { run: "r", task: "T1", nonce: Some("other"), since: None }), None);
    }

    #[test]
    fn a_refused_commit_leaves_the_agents_commits_on_the_branch() {
        let (d, base) = repo();
        agent_commit(d.path(), "b.txt", "agent: add b");
        let end = head(d.path()).unwrap();
        std::fs::write(d.path().join("c.txt"), "c\n").unwrap();
        let hooks = d.path().join(".git/hooks");
        std::fs::create_dir_all(&hooks).unwrap();
        std::fs::write(hooks.join("pre-commit"), "#!/bin/sh\necho lint failed >&2\nexit 1\n").unwrap();
        std::fs::set_permissions(hooks.join("pre-commit"), std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let listed = vec!["c.txt".to_string()];
        let s = Squash { hooks: Hooks::Repo, ..sq(&base, &listed) };
        let err = squash(d.path(), &s).unwrap_err().to_string();
        assert!(err.contains("lint failed"), "{err}");
        assert_eq!(head(d.path()).unwrap(), end, "the branch is where the agent left it");
        assert!(d.path().join("c.txt").exists());
    }

    #[test]
    fn an_end_state_equal_to_the_base_commits_nothing_and_a_vanished_change_is_refused() {
        let (d, base) = repo();
        assert_eq!(squash(d.path(), &sq(&base, &[])).unwrap(), Squashed::NoChanges);
        // The agent committed, then reverted by hand: no net change, no commit.
        agent_commit(d.path(), "b.txt", "agent: add b");
        std::fs::remove_file(d.path().join("b.txt")).unwrap();
        assert_eq!(squash(d.path(), &sq(&base, &["b.txt".into()])).unwrap(), Squashed::NoChanges);
        assert_eq!(head(d.path()).unwrap(), base);
        // Reported, but nothing of it here: refused.
        let err = squash(d.path(), &sq(&base, &["gone.txt".into()])).unwrap_err().to_string();
        assert!(err.contains("holds none of them"), "{err}");
    }

    #[test]
    fn history_rewritten_below_the_base_halts_and_deletes_nothing() {
        let (d, _) = repo();
        agent_commit(d.path(), "b.txt", "second");
        let base = head(d.path()).unwrap();
        git(d.path(), &["reset", "-q", "--hard", "HEAD~1"]).unwrap();
        let err = squash(d.path(), &sq(&base, &[])).unwrap_err();
        assert!(matches!(err, SquashError::BelowBase { .. }), "{err}");
        assert!(commit_exists(d.path(), &base));
    }

    #[test]
    fn a_carried_attempt_keeps_its_other_paths_and_marks_the_conflicting_one() {
        let (d, base) = repo();
        // The attempt (on base): shared.txt and own.txt.
        git(d.path(), &["checkout", "-q", "-b", "attempt"]).unwrap();
        std::fs::write(d.path().join("shared.txt"), "mine\n").unwrap();
        agent_commit(d.path(), "own.txt", "attempt");
        git(d.path(), &["add", "shared.txt"]).unwrap();
        let mut args = identity(d.path());
        args.extend(["commit", "-q", "--amend", "--no-edit"]);
        git(d.path(), &args).unwrap();
        let attempt = head(d.path()).unwrap();
        // The tip moved: someone else's shared.txt.
        git(d.path(), &["checkout", "-q", "main"]).unwrap();
        std::fs::write(d.path().join("shared.txt"), "theirs\n").unwrap();
        git(d.path(), &["add", "shared.txt"]).unwrap();
        let mut args = identity(d.path());
        args.extend(["commit", "-q", "-m", "a: theirs\n\nHarness-Task: a"]);
        git(d.path(), &args).unwrap();
        let conflicts = carry(d.path(), &attempt, &base).unwrap();
        assert_eq!(conflicts.len(), 1, "{conflicts:?}");
        assert!(
            conflicts[0].starts_with("shared.txt (both added), against ") && conflicts[0].ends_with("of task a"),
            "{conflicts:?}"
        );
        assert_eq!(std::fs::read_to_string(d.path().join("own.txt")).unwrap(), "own.txt\n");
        assert_eq!(conflict_marked(d.path(), &["shared.txt".into(), "own.txt".into()]), vec!["shared.txt".to_string()]);
        assert!(unmerged_paths(d.path()).is_empty(), "the index is back at HEAD");
    }

    /// Conflict markers are found line by line, however large the file, the last line without its
    /// newline included; a line that only looks like one is not.
    #[test]
    fn conflict_markers_are_found_in_bounded_reads() {
        let d = tempfile::tempdir().unwrap();
        let big = format!("{}\n>>>>>>> theirs", "x".repeat(3 << 20));
        std::fs::write(d.path().join("big"), big).unwrap();
        std::fs::write(d.path().join("cut"), "a\n<<<<<<< HEAD").unwrap();
        std::fs::write(d.path().join("clean"), "<<<<<<<<x\n>>>>>>>y\n").unwrap();
        let all = ["big", "cut", "clean", "gone"].map(String::from);
        assert_eq!(conflict_marked(d.path(), &all), vec!["big".to_string(), "cut".to_string()]);
    }
}
