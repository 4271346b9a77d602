//! `journal reconcile`: the journal checked against git (do committed shas exist?) and live processes
//! (is an in-flight task running?). Reports; rewrites nothing — the journal wins and the caller decides.

use super::{BadLine, RunView, TaskState};
use crate::ids::TaskId;
use serde::Serialize;

/// What `reconcile` found.
#[derive(Debug, Clone, Serialize)]
pub struct Reconciliation {
    /// Committed tasks whose sha is not a commit in the repo.
    pub missing_commits: Vec<(TaskId, String)>,
    /// Tasks the journal has in flight (not committed, not halted) with no live process.
    pub in_flight_without_process: Vec<(TaskId, TaskState)>,
    pub bad_lines: Vec<BadLine>,
    pub torn_tail: Option<BadLine>,
}

impl Reconciliation {
    pub fn is_clean(&self) -> bool {
        self.missing_commits.is_empty()
            && self.in_flight_without_process.is_empty()
            && self.bad_lines.is_empty()
            && self.torn_tail.is_none()
    }
}

/// Checks the journal against git and live processes. The journal wins: nothing is rewritten here,
/// the caller decides (the supervisor's recovery re-dispatches, an operator reads the report).
pub fn reconcile(
    view: &RunView,
    commit_exists: impl Fn(&str) -> bool,
    is_running: impl Fn(&TaskId) -> bool,
) -> Reconciliation {
    let mut missing_commits = Vec::new();
    let mut in_flight = Vec::new();
    for (task, t) in &view.tasks {
        match t.state {
            // Nothing was committed: there is no commit to look for.
            TaskState::Committed if t.no_changes => {}
            TaskState::Committed => {
                let sha = t.sha.clone().unwrap_or_default();
                if !commit_exists(&sha) {
                    missing_commits.push((task.clone(), sha));
                }
            }
            TaskState::Halted => {}
            s => {
                if !is_running(task) {
                    in_flight.push((task.clone(), s));
                }
            }
        }
    }
    Reconciliation {
        missing_commits,
        in_flight_without_process: in_flight,
        bad_lines: view.bad_lines.clone(),
        torn_tail: view.torn_tail.clone(),
    }
}
