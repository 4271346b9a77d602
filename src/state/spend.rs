//! Spend: each task log's usage (`crate::engine::usage`), read incrementally — only what a log gained since
//! the last look is read — for the API's views and the supervisor's budgets; and the budget check.

use crate::engine::Adapter;
use crate::engine::usage::{Tally, Usage};
use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Which file a fold was read from: its inode and its first bytes. A log replaced by another file
/// (a re-run over a removed one: the inode number may well be reused) or cut is folded afresh.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileMark {
    ino: u64,
    /// The modification time at the last look: a log that did not grow but was written since was
    /// rewritten in place (logs only grow).
    mtime: (i64, i64),
    /// Length and hash of the first bytes (up to `HEAD`) seen at the first look.
    head: (u64, u64),
}

/// How many of a log's first bytes its mark holds.
const HEAD: u64 = 4096;

impl FileMark {
    fn of(log: &Path, meta: &std::fs::Metadata, known: Option<&FileMark>) -> FileMark {
        // A mark taken while the file was shorter than HEAD keeps the length it had then.
        let len = known.map_or(meta.len().min(HEAD), |k| k.head.0);
        FileMark { ino: meta.ino(), mtime: (meta.mtime(), meta.mtime_nsec()), head: (len, head_hash(log, len)) }
    }
}

fn head_hash(log: &Path, len: u64) -> u64 {
    use std::hash::{Hash, Hasher};
    let buf = crate::os::tail::read_from(log, 0, Some(len));
    let mut h = std::collections::hash_map::DefaultHasher::new();
    buf.hash(&mut h);
    h.finish()
}

/// The usage folds of many logs, each carried on while its log only grows (same file, not shorter).
#[derive(Default)]
pub struct LogTallies {
    folds: HashMap<PathBuf, (FileMark, Tally)>,
}

impl LogTallies {
    /// `log`'s usage now. A missing log has used nothing.
    pub fn usage(&mut self, adapter: Adapter, log: &Path) -> Usage {
        let (kept, usage) = carry_on(self.folds.remove(log), adapter, log);
        if let Some(k) = kept {
            self.folds.insert(log.to_path_buf(), k);
        }
        usage
    }
}

/// Carries `known` (a log's mark and fold) on to the log's current end, or starts afresh when the
/// log was replaced (another inode, or other first bytes) or shortened: the fold to keep, and the
/// usage. Callers that share folds between threads hold no lock while this reads.
pub fn carry_on(known: Option<(FileMark, Tally)>, adapter: Adapter, log: &Path) -> (Option<(FileMark, Tally)>, Usage) {
    let Ok(meta) = std::fs::metadata(log) else { return (None, Tally::new(adapter).usage()) };
    let (mark, tally) = match known {
        Some((mark, t)) if t.offset <= meta.len() && mark.ino == meta.ino() => {
            // Same inode: the same file when it is untouched, or grew and its first bytes are the same.
            let mtime = (meta.mtime(), meta.mtime_nsec());
            let same = if t.offset == meta.len() {
                mark.mtime == mtime
            } else {
                mark.head.0 > 0 && FileMark::of(log, &meta, Some(&mark)).head == mark.head
            };
            if same && mark.head.0 > 0 {
                (FileMark { mtime, ..mark }, t)
            } else {
                (FileMark::of(log, &meta, None), Tally::new(adapter))
            }
        }
        _ => (FileMark::of(log, &meta, None), Tally::new(adapter)),
    };
    let tally = advance(tally, log, meta.len());
    let usage = tally.usage();
    (Some((mark, tally)), usage)
}

fn advance(mut tally: Tally, log: &Path, len: u64) -> Tally {
    if tally.offset < len {
        // Line by line in bounded chunks: the first look at a 1 GB log holds 256 KiB, not 1 GB.
        let end = crate::os::tail::each_line(log, tally.offset, len, |l| tally.line(l));
        tally.offset = end;
    }
    tally
}

/// A task's log: the one its journal names (on `leased`), else the run's default path.
pub fn task_log(
    view: &crate::state::journal::RunView,
    pointer: &crate::state::registry::Pointer,
    task: &crate::ids::TaskId,
) -> PathBuf {
    view.tasks.get(task).and_then(|t| t.logfile.clone()).unwrap_or_else(|| pointer.default_logfile(task))
}

/// Each planned task's usage (read by `usage_of` from its log) and the run's, their sum.
pub fn run_spend(
    plan: &crate::state::plan::Plan,
    view: &crate::state::journal::RunView,
    pointer: &crate::state::registry::Pointer,
    mut usage_of: impl FnMut(Adapter, &Path) -> Usage,
) -> (Usage, Vec<(crate::ids::TaskId, Usage)>) {
    let mut kept: Option<HashMap<String, Usage>> = None;
    let per_task: Vec<_> = plan
        .tasks
        .iter()
        .map(|t| {
            let log = task_log(view, pointer, &t.id);
            // A log pruned by `harness prune --logs-only` left its usage behind.
            let pruned = (!log.exists())
                .then(|| kept.get_or_insert_with(|| kept_usage(pointer)).get(t.id.as_str()).cloned())
                .flatten();
            (t.id.clone(), pruned.unwrap_or_else(|| usage_of(t.adapter, &log)))
        })
        .collect();
    (Usage::sum(per_task.iter().map(|(_, u)| u)), per_task)
}

/// The usage `harness prune --logs-only` kept of a run's tasks (`<slug>.usage.json`), by task.
pub fn kept_usage(pointer: &crate::state::registry::Pointer) -> HashMap<String, Usage> {
    #[derive(serde::Deserialize)]
    struct Kept {
        tasks: HashMap<String, Usage>,
    }
    std::fs::read(pointer.usage_path())
        .ok()
        .and_then(|b| serde_json::from_slice::<Kept>(&b).ok())
        .map(|k| k.tasks)
        .unwrap_or_default()
}

/// A budget that a sum has reached: what, how much was spent, and the budget.
#[derive(Debug, Clone, PartialEq)]
pub struct Crossed {
    /// `None` for the run's budget, else the task's.
    pub task: Option<crate::ids::TaskId>,
    pub spent: f64,
    pub budget: f64,
}

impl Crossed {
    pub fn detail(&self) -> String {
        match &self.task {
            None => format!("budget: the run spent ${:.4} of its ${:.4} budget", self.spent, self.budget),
            Some(t) => format!("budget: task {t} spent ${:.4} of its ${:.4} budget", self.spent, self.budget),
        }
    }
}

/// The first budget (the run's, then each task's in plan order) that its spend has reached.
pub fn crossed(run: (&Usage, Option<f64>), tasks: &[(crate::ids::TaskId, &Usage, Option<f64>)]) -> Option<Crossed> {
    let reached = |u: &Usage, b: Option<f64>| match (u.cost_usd, b) {
        (Some(spent), Some(budget)) if spent >= budget => Some((spent, budget)),
        _ => None,
    };
    if let Some((spent, budget)) = reached(run.0, run.1) {
        return Some(Crossed { task: None, spent, budget });
    }
    tasks
        .iter()
        .find_map(|(t, u, b)| reached(u, *b).map(|(spent, budget)| Crossed { task: Some(t.clone()), spent, budget }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(session: &str, total: f64) -> String {
        serde_json::json!({"type":"result","session_id":session,"total_cost_usd":total,
            "usage":{"input_tokens":10,"output_tokens":1}})
        .to_string()
            + "\n"
    }

    #[test]
    fn a_log_rewritten_in_place_is_folded_afresh_not_carried_on() {
        let d = tempfile::tempdir().unwrap();
        let log = d.path().join("t.log");
        std::fs::write(&log, result("old-session", 5.0)).unwrap();
        let mut tallies = LogTallies::default();
        assert_eq!(tallies.usage(Adapter::Claude, &log).cost_usd, Some(5.0));
        // The same inode, new content that is longer than what was folded: a new run's log.
        let ino = std::fs::metadata(&log).unwrap().ino();
        let new = result("new-session", 0.25) + &result("new-session", 0.5);
        std::fs::write(&log, &new).unwrap();
        assert_eq!(std::fs::metadata(&log).unwrap().ino(), ino, "rewritten in place");
        assert_eq!(tallies.usage(Adapter::Claude, &log).cost_usd, Some(0.5), "the old tally was carried on");
        // Growing on is still read incrementally from where it stopped.
        std::fs::OpenOptions::new()
            .append(true)
            .open(&log)
            .and_then(|mut f| std::io::Write::write_all(&mut f, result("new-session", 0.75).as_bytes()))
            .unwrap();
        assert_eq!(tallies.usage(Adapter::Claude, &log).cost_usd, Some(0.75));
        // Rewritten in place at the very same length (a `cp` over it): folded afresh too.
        let same_len = std::fs::read_to_string(&log).unwrap().replace("0.75", "0.99");
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(&log, same_len).unwrap();
        assert_eq!(tallies.usage(Adapter::Claude, &log).cost_usd, Some(0.99), "a same-length rewrite was carried on");
    }
}
