//! The state's values as the views (`crate::views`) show them: each journal, liveness and registry
//! enum mapped onto its view twin by an exhaustive match (a new journal state is a compile error
//! here, never an `unknown` on the wire), and the journal's folded records onto the view records.
//! Converts; reads and writes nothing.

use crate::engine::usage::Usage;
use crate::ids::TaskId;
use crate::state::journal::{self, ApprovalState, Outcome, RunStatus, RunView, TaskState};
use crate::state::liveness::LiveState;
use crate::state::registry::Plane;
use crate::views::{self, Named};

impl From<RunStatus> for views::RunStatus {
    fn from(s: RunStatus) -> Self {
        match s {
            RunStatus::Pending => views::RunStatus::Pending,
            RunStatus::Running => views::RunStatus::Running,
            RunStatus::Paused => views::RunStatus::Paused,
            RunStatus::Blocked => views::RunStatus::Blocked,
            RunStatus::Finished => views::RunStatus::Finished,
            RunStatus::Failed => views::RunStatus::Failed,
            RunStatus::Stopped => views::RunStatus::Stopped,
        }
    }
}

impl From<TaskState> for views::TaskState {
    fn from(s: TaskState) -> Self {
        match s {
            TaskState::Leased => views::TaskState::Leased,
            TaskState::Implemented => views::TaskState::Implemented,
            TaskState::Gated => views::TaskState::Gated,
            TaskState::Reviewed => views::TaskState::Reviewed,
            TaskState::Committed => views::TaskState::Committed,
            TaskState::Halted => views::TaskState::Halted,
            TaskState::Skipped => views::TaskState::Skipped,
        }
    }
}

impl From<crate::os::change::FileStatus> for views::FileStatus {
    fn from(s: crate::os::change::FileStatus) -> Self {
        use crate::os::change::FileStatus as F;
        match s {
            F::Added => views::FileStatus::Added,
            F::Modified => views::FileStatus::Modified,
            F::Deleted => views::FileStatus::Deleted,
            F::Renamed => views::FileStatus::Renamed,
            F::Copied => views::FileStatus::Copied,
            F::TypeChanged => views::FileStatus::TypeChanged,
            F::Other => views::FileStatus::Unknown,
        }
    }
}

impl From<crate::os::change::FileChange> for views::FileChange {
    fn from(f: crate::os::change::FileChange) -> Self {
        views::FileChange {
            path: f.path,
            old_path: f.old_path,
            status: f.status.into(),
            added: f.added,
            removed: f.removed,
        }
    }
}

/// The paths of a change as the views show them.
pub fn file_changes(files: Vec<crate::os::change::FileChange>) -> Vec<views::FileChange> {
    files.into_iter().map(Into::into).collect()
}

impl From<&journal::AttemptView> for views::Attempt {
    fn from(a: &journal::AttemptView) -> Self {
        views::Attempt {
            n: a.n,
            started_at: a.started_at.clone(),
            ended_at: a.ended_at.clone(),
            state: a.state.into(),
            rc: a.rc,
            reason: a.reason.clone(),
        }
    }
}

impl From<LiveState> for views::LiveState {
    fn from(s: LiveState) -> Self {
        match s {
            LiveState::Leased => views::LiveState::Leased,
            LiveState::Implemented => views::LiveState::Implemented,
            LiveState::Gating => views::LiveState::Gating,
            LiveState::Gated => views::LiveState::Gated,
            LiveState::Reviewing => views::LiveState::Reviewing,
            LiveState::Reviewed => views::LiveState::Reviewed,
            LiveState::Committed => views::LiveState::Committed,
            LiveState::Halted => views::LiveState::Halted,
            LiveState::Skipped => views::LiveState::Skipped,
        }
    }
}

impl From<ApprovalState> for views::ApprovalState {
    fn from(s: ApprovalState) -> Self {
        match s {
            ApprovalState::Pending => views::ApprovalState::Pending,
            ApprovalState::Allowed => views::ApprovalState::Allowed,
            ApprovalState::Denied => views::ApprovalState::Denied,
            ApprovalState::Expired => views::ApprovalState::Expired,
        }
    }
}

/// A steer's outcome. The fold records a steer's state from its steer records only, which are
/// `queued`, `delivered`, `taken`, `applied`, `refused` or `cancelled`; the verbs' other outcomes
/// are never one.
impl From<Outcome> for views::SteerState {
    fn from(o: Outcome) -> Self {
        match o {
            Outcome::Queued => views::SteerState::Queued,
            Outcome::Delivered => views::SteerState::Delivered,
            Outcome::Taken => views::SteerState::Taken,
            Outcome::Applied => views::SteerState::Applied,
            Outcome::Refused => views::SteerState::Refused,
            Outcome::Cancelled => views::SteerState::Cancelled,
            Outcome::Accepted | Outcome::Noop => views::SteerState::Unknown,
        }
    }
}

impl From<Plane> for views::Plane {
    fn from(p: Plane) -> Self {
        match p {
            Plane::Standalone => views::Plane::Standalone,
            Plane::Dynwf => views::Plane::Dynwf,
        }
    }
}

/// An engine by its name (the engines' variants are matched only in `engine/`); every engine is
/// one the views know (`every_engine_and_cost_has_its_view` holds it).
impl From<crate::engine::Adapter> for views::Adapter {
    fn from(a: crate::engine::Adapter) -> Self {
        views::Adapter::named(a.as_str())
    }
}

impl From<&Usage> for views::Usage {
    fn from(u: &Usage) -> Self {
        views::Usage {
            cost_usd: u.cost_usd,
            input_tokens: u.input_tokens,
            output_tokens: u.output_tokens,
            cache_read_tokens: u.cache_read_tokens,
            cache_write_tokens: u.cache_write_tokens,
            turns: u.turns,
            cost: views::Cost::named(u.cost),
        }
    }
}

impl From<&journal::BadLine> for views::BadLine {
    fn from(b: &journal::BadLine) -> Self {
        views::BadLine { line: b.line, reason: b.reason.clone() }
    }
}

impl From<&journal::AttentionView> for views::AttentionView {
    fn from(a: &journal::AttentionView) -> Self {
        views::AttentionView {
            attention: views::AttentionKind::named(&a.attention),
            task: a.task.clone(),
            idle_s: a.idle_s,
            detail: a.detail.clone(),
            ts: a.ts.clone(),
            line: a.line,
        }
    }
}

impl From<&journal::PendingSteer> for views::PendingSteer {
    fn from(s: &journal::PendingSteer) -> Self {
        views::PendingSteer {
            id: s.id.clone(),
            task: s.task.clone(),
            msg: s.msg.clone(),
            interrupt: s.interrupt,
            line: s.line,
        }
    }
}

impl From<&journal::SteerView> for views::SteerView {
    fn from(s: &journal::SteerView) -> Self {
        views::SteerView {
            id: s.id.clone(),
            task: s.task.clone(),
            msg: s.msg.clone(),
            by: s.by.clone(),
            state: s.state.into(),
            ts: s.ts.clone(),
            updated: s.updated.clone(),
        }
    }
}

impl From<&journal::ApprovalView> for views::ApprovalView {
    fn from(a: &journal::ApprovalView) -> Self {
        views::ApprovalView {
            id: a.id.clone(),
            task: a.task.clone(),
            tool: a.tool.clone(),
            input: a.input.clone(),
            via: a.via.clone(),
            state: a.state.into(),
            by: a.by.clone(),
            message: a.message.clone(),
            detail: a.detail.clone(),
            ts: a.ts.clone(),
            updated: a.updated.clone(),
        }
    }
}

/// Why a task halted, from its halt's exit code and words (the pipeline writes each halt's
/// `detail` in one of these forms; `spec/openapi.yaml` names the reasons, `TaskState.halt_reason`).
pub fn halt_reason(rc: Option<i32>, detail: &str) -> views::HaltReason {
    use views::HaltReason as H;
    let starts = |p: &str| detail.starts_with(p);
    // The engine's own words follow "engine failed:": "Request timed out" there is the engine's.
    if starts("engine failed:") {
        H::EngineError
    } else if starts("rate_limited:") {
        H::RateLimited
    } else if starts("killed by steer ") && detail.ends_with("(interrupt)") {
        // A steer's interrupt ends the turn to resume the session with the message.
        H::Interrupted
    } else if starts("killed by ") {
        H::Killed
    } else if starts("interrupted by ") {
        H::Interrupted
    } else if starts("gate ") {
        H::Gate
    } else if starts("setup ") {
        H::Setup
    } else if starts("review rejected") || starts("verdict:") || starts("no verdict") {
        H::ReviewReject
    } else if starts("conflict integrating onto") {
        H::Conflict
    } else if rc == Some(crate::exit::TIMED_OUT) || detail.contains("timed out") {
        H::Timeout
    } else if starts("cannot ")
        || starts("commit failed")
        || starts("review seat")
        || starts("review: ")
        || starts("integration failed")
        || starts("no commit of task")
        || starts("the run's worktree")
        || detail.contains("did not run")
    {
        H::Harness
    } else {
        H::EngineError
    }
}

/// The run's tasks by state; `pending`: the plan's tasks with no state yet (0 without the plan).
pub fn counts(view: &RunView, plan: Option<&crate::state::plan::Plan>) -> views::Counts {
    let n = |s| view.count(s);
    views::Counts {
        leased: n(TaskState::Leased),
        implemented: n(TaskState::Implemented),
        gated: n(TaskState::Gated),
        reviewed: n(TaskState::Reviewed),
        committed: n(TaskState::Committed),
        halted: n(TaskState::Halted),
        skipped: n(TaskState::Skipped),
        pending: plan.map_or(0, |p| p.tasks.iter().filter(|t| !view.tasks.contains_key(&t.id)).count()) as u64,
    }
}

/// Why a paused run is paused: by a budget, a rate limit, else by an operator (whoever's `by`).
pub fn pause_reason(by: &str) -> views::PauseReason {
    match by {
        "budget" => views::PauseReason::Budget,
        "rate_limit" => views::PauseReason::RateLimit,
        _ => views::PauseReason::Operator,
    }
}

/// A task's last known facts (a task the journal has not heard of is `pending`); `worktree` and
/// `commit` are left to the caller, which knows where worktrees are and reads git.
pub fn task_facts(view: &RunView, task: &TaskId) -> views::TaskFacts {
    match view.tasks.get(task) {
        Some(t) => views::TaskFacts {
            state: t.state.into(),
            rc: t.rc,
            detail: t.detail.clone(),
            sha: t.sha.clone(),
            no_changes: t.no_changes,
            session_id: t.session_id.clone(),
            attempts: t.attempts,
            updated: Some(t.ts.clone()),
            worktree: None,
            halt_reason: (t.state == TaskState::Halted).then(|| halt_reason(t.rc, t.detail.as_deref().unwrap_or(""))),
            stalled: view.stalled_now.contains_key(task),
            stalled_since: view.stalled_now.get(task).cloned(),
            commit: None,
        },
        None => views::TaskFacts {
            state: views::TaskState::Pending,
            rc: None,
            detail: None,
            sha: None,
            no_changes: false,
            session_id: None,
            attempts: 0,
            updated: None,
            worktree: None,
            halt_reason: None,
            stalled: false,
            stalled_since: None,
            commit: None,
        },
    }
}

/// Whether a task's stream is over, and why: its task committed or skipped, its run ended, or (the
/// caller saw it for a while) no supervisor answers. `None`: more may follow.
pub fn stream_end(
    view: &RunView,
    run: &crate::ids::RunId,
    task: &TaskId,
    not_live: bool,
    last_seq: Option<String>,
) -> Option<views::StreamEnd> {
    let t = view.tasks.get(task);
    let state = t.map_or(views::TaskState::Pending, |t| t.state.into());
    let sha = t.and_then(|t| t.sha.as_deref());
    views::StreamEnd::of(run, task, (state, sha), view.status.into(), not_live, last_seq)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_engine_and_cost_has_its_view() {
        for a in crate::engine::Adapter::ALL {
            assert_ne!(views::Adapter::from(a), views::Adapter::Unknown, "{a}");
        }
        for c in ["engine", "tokens only", "not reported", "mixed"] {
            assert_ne!(views::Cost::named(c), views::Cost::Unknown, "{c}");
        }
        assert_eq!(views::Usage::from(&Usage::sum([])).cost, views::Cost::named(Usage::sum([]).cost));
    }

    #[test]
    fn each_state_keeps_its_wire_name() {
        for s in TaskState::ALL {
            assert_eq!(views::TaskState::from(s).as_str(), s.as_str());
        }
        for s in [RunStatus::Pending, RunStatus::Running, RunStatus::Paused, RunStatus::Finished, RunStatus::Failed] {
            assert_eq!(views::RunStatus::from(s).as_str(), s.as_str());
        }
        for s in [ApprovalState::Pending, ApprovalState::Allowed, ApprovalState::Denied, ApprovalState::Expired] {
            assert_eq!(views::ApprovalState::from(s).as_str(), s.as_str());
        }
        for s in [Outcome::Queued, Outcome::Delivered, Outcome::Taken, Outcome::Applied, Outcome::Refused] {
            assert_eq!(views::SteerState::from(s).as_str(), s.as_str());
        }
        for p in [Plane::Standalone, Plane::Dynwf] {
            assert_eq!(views::Plane::from(p).as_str(), crate::wire::name_of(&p));
        }
    }

    #[test]
    fn each_halt_the_pipeline_writes_has_its_reason() {
        use views::HaltReason as H;
        for (rc, detail, want) in [
            (1, "rate_limited: claude: API error 429 (lifts at 2026-12-03T14:00:00Z)", H::RateLimited),
            (143, "killed by api", H::Killed),
            (143, "killed by budget", H::Killed),
            (1, "interrupted by cli", H::Interrupted),
            (143, "killed by steer s-3 (interrupt)", H::Interrupted),
            (143, "killed by steer", H::Killed),
            (3, "gate failed (exit 3): npm test: FAIL 2 tests", H::Gate),
            (127, "gate did not run: No such file", H::Gate),
            (7, "setup failed (exit 7): npm ci: npm is missing", H::Setup),
            (1, "review rejected: REJECT: no tests", H::ReviewReject),
            (3, "no verdict: the final message must start with APPROVE", H::ReviewReject),
            (1, "conflict integrating onto 1234567: shared.txt", H::Conflict),
            (124, "claude turn timed out after 600 s", H::Timeout),
            (1, "cannot write /x/y.txt: Read-only file system", H::Harness),
            (1, "commit failed: index.lock", H::Harness),
            (1, "integration failed: git rebase", H::Harness),
            (127, "wrapper did not run: No such file", H::Harness),
            (3, "claude turn failed: API Error: 529 overloaded", H::EngineError),
            (3, "engine failed: exit 1: API Error: Request timed out.", H::EngineError),
            (3, "engine failed: exit 1: credentials conflict with the organization policy", H::EngineError),
            (4, "engine not found: claude", H::EngineError),
        ] {
            assert_eq!(halt_reason(Some(rc), detail), want, "{detail}");
        }
    }
}
