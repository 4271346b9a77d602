//! What a change is, read from git for a person or a UI: a commit's subject and the paths it
//! touched (with line counts), a task worktree's change against its base (untracked files that are
//! not ignored included, read through a temporary index so the worktree's own is untouched), a
//! run's own commits (found by its trailers), and their unified diffs, bounded.
//!
//! Reads only: nothing here changes a ref, an index or a file of the repository.

use super::git::{self, GitError};
use std::path::Path;

/// How a change touched one path (`git diff --name-status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileStatus {
    Added,
    Modified,
    Deleted,
    Renamed,
    Copied,
    TypeChanged,
    /// A code git has that is none of those (unmerged, unknown).
    Other,
}

/// One path a change touched, with its lines added and removed (`None`: a binary file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileChange {
    pub path: String,
    /// A rename's or copy's source.
    pub old_path: Option<String>,
    pub status: FileStatus,
    pub added: Option<u64>,
    pub removed: Option<u64>,
}

/// A patch any tool reads, whatever the user's git config: no colour, no external diff tool or
/// textconv filter run, git's `a/` and `b/` prefixes (`diff.noprefix` ignored).
const PLAIN: [&str; 5] = ["--no-color", "--no-ext-diff", "--no-textconv", "--src-prefix=a/", "--dst-prefix=b/"];

/// A diff cut at a byte limit.
pub struct Bounded {
    pub bytes: Vec<u8>,
    /// The diff had more than the limit.
    pub truncated: bool,
}

/// The subject of `sha`.
pub fn subject(repo: &Path, sha: &str) -> Result<String, GitError> {
    Ok(git::run(repo, &["log", "-1", "--format=%s", sha, "--"])?.trim_end().to_string())
}

/// The paths commit `sha` changed against its first parent (everything, for a root commit).
pub fn commit_files(repo: &Path, sha: &str) -> Result<Vec<FileChange>, GitError> {
    let common = ["diff-tree", "-r", "-M", "--root", "--no-commit-id", "-z"];
    let with = |extra: &str| -> Result<String, GitError> {
        let mut a = common.to_vec();
        a.extend([extra, sha]);
        git::run(repo, &a)
    };
    Ok(merge(&with("--name-status")?, &with("--numstat")?))
}

/// The unified diff of commit `sha` (against its first parent), at most `limit` bytes.
pub fn commit_patch(repo: &Path, sha: &str, limit: usize) -> Result<Bounded, GitError> {
    let (bytes, truncated) = git::run_bounded(
        repo,
        None,
        &["show", "--format=", "-M", "--patch", PLAIN[0], PLAIN[1], PLAIN[2], PLAIN[3], PLAIN[4], sha, "--"],
        limit,
    )?;
    Ok(Bounded { bytes: trim_leading_newline(bytes), truncated })
}

/// Several commits, each with its header and diff, in the order given, at most `limit` bytes.
pub fn commits_patch(repo: &Path, shas: &[String], limit: usize) -> Result<Bounded, GitError> {
    if shas.is_empty() {
        return Ok(Bounded { bytes: Vec::new(), truncated: false });
    }
    let mut args = vec!["show", "--no-walk=unsorted", "-M", "--patch", "--format=medium"];
    args.extend(PLAIN);
    args.extend(shas.iter().map(String::as_str));
    args.push("--");
    let (bytes, truncated) = git::run_bounded(repo, None, &args, limit)?;
    Ok(Bounded { bytes, truncated })
}

/// A task worktree's change against `base`: its HEAD, index and files, untracked ones that are not
/// ignored included — the paths, and the unified diff (at most `limit` bytes).
pub fn worktree_change(worktree: &Path, base: &str, limit: usize) -> Result<(Vec<FileChange>, Bounded), GitError> {
    // A temporary index of the worktree's whole state: `git add -A` into it reads the files (and
    // hashes new ones into the object store), and leaves the worktree's own index as it is.
    let dir = git::run(worktree, &["rev-parse", "--absolute-git-dir"])?;
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let index = Gone(Path::new(dir.trim()).join(format!("harness-diff.{}.{n}.index", std::process::id())));
    let index = index.0.as_path();
    git::run_with_index(worktree, index, &["read-tree", "HEAD"])?;
    git::run_with_index(worktree, index, &["add", "-A"])?;
    let diff = |extra: &str| git::run_with_index(worktree, index, &["diff", "--cached", "-M", "-z", extra, base]);
    let files = merge(&diff("--name-status")?, &diff("--numstat")?);
    let (bytes, truncated) = git::run_bounded(
        worktree,
        Some(index),
        &["diff", "--cached", "-M", "--patch", PLAIN[0], PLAIN[1], PLAIN[2], PLAIN[3], PLAIN[4], base, "--"],
        limit,
    )?;
    Ok((files, Bounded { bytes, truncated }))
}

/// The commits reachable from `tip` (above `since`, when given) that carry this run's trailers —
/// `Harness-Run: <run>`, and `Harness-Nonce: <nonce>` when the run has one (a commit of an earlier
/// run under the same id is not this run's) — oldest first. Not `since..tip`: that range also holds
/// other runs' and the user's commits.
pub fn run_commits(
    repo: &Path,
    tip: &str,
    since: Option<&str>,
    run: &str,
    nonce: Option<&str>,
) -> Result<Vec<String>, GitError> {
    let range = match since {
        Some(s) => format!("{s}..{tip}"),
        None => tip.to_string(),
    };
    let by_run = format!("--grep=^Harness-Run: {}$", regex_literal(run));
    let mut args = vec!["log", "--reverse", "--format=%H", "--all-match", by_run.as_str()];
    let by_nonce = nonce.map(|n| format!("--grep=^Harness-Nonce: {}$", regex_literal(n)));
    if let Some(n) = &by_nonce {
        args.push(n.as_str());
    }
    args.extend([range.as_str(), "--"]);
    Ok(git::run(repo, &args)?.lines().map(str::to_string).collect())
}

/// A temporary file removed when dropped.
struct Gone(std::path::PathBuf);

impl Drop for Gone {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The commits in `from..to`, oldest first.
pub fn commits_between(repo: &Path, from: &str, to: &str) -> Result<Vec<String>, GitError> {
    Ok(git::run(repo, &["rev-list", "--reverse", "--topo-order", &format!("{from}..{to}"), "--"])?
        .lines()
        .map(str::to_string)
        .collect())
}

/// Escapes a value for git's basic regular expressions (ids hold only `[A-Za-z0-9._-]`).
fn regex_literal(s: &str) -> String {
    s.replace('.', "\\.")
}

/// `git diff` output may start with a blank line (an empty `--format=`).
fn trim_leading_newline(mut b: Vec<u8>) -> Vec<u8> {
    if b.first() == Some(&b'\n') {
        b.remove(0);
    }
    b
}

/// `--name-status -z` and `--numstat -z` of the same diff, as one list in git's order.
fn merge(name_status: &str, numstat: &str) -> Vec<FileChange> {
    let mut files = Vec::new();
    let mut it = name_status.split('\0').filter(|s| !s.is_empty());
    while let Some(code) = it.next() {
        let status = match code.as_bytes().first() {
            Some(b'A') => FileStatus::Added,
            Some(b'M') => FileStatus::Modified,
            Some(b'D') => FileStatus::Deleted,
            Some(b'R') => FileStatus::Renamed,
            Some(b'C') => FileStatus::Copied,
            Some(b'T') => FileStatus::TypeChanged,
            _ => FileStatus::Other,
        };
        let Some(first) = it.next() else { break };
        let (old_path, path) = if matches!(status, FileStatus::Renamed | FileStatus::Copied) {
            match it.next() {
                Some(new) => (Some(first.to_string()), new.to_string()),
                None => (None, first.to_string()),
            }
        } else {
            (None, first.to_string())
        };
        files.push(FileChange { path, old_path, status, added: None, removed: None });
    }
    // numstat -z: `added\tremoved\tpath\0`, or for a rename `added\tremoved\t\0old\0new\0`; a
    // binary file counts `-`.
    let mut it = numstat.split('\0');
    let mut counts = std::collections::HashMap::new();
    while let Some(rec) = it.next() {
        let mut parts = rec.splitn(3, '\t');
        let (Some(a), Some(r), Some(p)) = (parts.next(), parts.next(), parts.next()) else { continue };
        let path = if p.is_empty() {
            let _old = it.next();
            it.next().unwrap_or_default().to_string()
        } else {
            p.to_string()
        };
        counts.insert(path, (a.parse::<u64>().ok(), r.parse::<u64>().ok()));
    }
    for f in &mut files {
        if let Some(&(a, r)) = counts.get(&f.path) {
            (f.added, f.removed) = (a, r);
        }
    }
    files
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_status_and_numstat_merge_with_renames_and_binaries() {
        let ns = "M\0a.txt\0R087\0old name.txt\0new name.txt\0A\0img.png\0D\0gone\0";
        let num = "3\t1\ta.txt\x002\t2\t\0old name.txt\0new name.txt\0-\t-\timg.png\x000\t4\tgone\0";
        let f = merge(ns, num);
        assert_eq!(f.len(), 4);
        assert_eq!(
            (f[0].path.as_str(), f[0].status, f[0].added, f[0].removed),
            ("a.txt", FileStatus::Modified, Some(3), Some(1))
        );
        assert_eq!(
            (f[1].path.as_str(), f[1].old_path.as_deref(), f[1].status),
            ("new name.txt", Some("old name.txt"), FileStatus::Renamed)
        );
        assert_eq!((f[1].added, f[1].removed), (Some(2), Some(2)));
        assert_eq!((f[2].status, f[2].added, f[2].removed), (FileStatus::Added, None, None));
        assert_eq!((f[3].status, f[3].removed), (FileStatus::Deleted, Some(4)));
    }
}
