//! The API's views as types: the JSON of `GET /runs`, `/runs/:id`, `/runs/:id/tasks/:tid`,
//! `/runs/:id/approvals` and `/watch`, and the bodies the CLI posts (`spec/openapi.yaml`,
//! `spec/WATCH.md`). Written by the API (and by `state::summary`, which caches the Overview's rows)
//! and read by the CLI and its client: one definition, so a renamed field breaks the build rather
//! than a CLI at run time. `tests/it/openapi.rs` holds each type to its schema, key for key.
//!
//! Forward-compatible for readers: unknown fields are ignored (no `deny_unknown_fields`), and each
//! enum reads a value it does not know as `Unknown` (`#[serde(other)]`), so a CLI keeps working
//! against a newer API. The journal's own enums stay strict: `state::views` maps each onto its view
//! twin by an exhaustive match, so a journal variant the views lack is a compile error there rather
//! than an `unknown` on the wire.
//!
//! Pure data, below `state/`: no I/O, and nothing imported but the ids and the wire names.

use crate::ids::{HostName, RunId, Slug, TaskId};
use serde::{Deserialize, Deserializer, Serialize};
use std::path::PathBuf;

/// A view enum: every name reads (an unknown one as `UNKNOWN`), and each variant has its wire name.
pub trait Named: Serialize + for<'de> Deserialize<'de> + Copy {
    /// What a name this CLI does not know reads as.
    const UNKNOWN: Self;

    /// The variant `name` is the wire name of, else `UNKNOWN`.
    fn named(name: &str) -> Self {
        use serde::de::IntoDeserializer;
        let d: serde::de::value::StrDeserializer<'_, serde::de::value::Error> = name.into_deserializer();
        Self::deserialize(d).unwrap_or(Self::UNKNOWN)
    }

    /// The wire name (serde's).
    fn as_str(self) -> &'static str {
        crate::wire::name_of(&self)
    }
}

macro_rules! named {
    ($($t:ident),* $(,)?) => {$(
        impl Named for $t {
            const UNKNOWN: Self = $t::Unknown;
        }
        impl $t {
            /// The wire name (serde's).
            pub fn as_str(self) -> &'static str {
                Named::as_str(self)
            }
        }
        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.pad(self.as_str())
            }
        }
    )*};
}

/// A run's status (the journal's `run` records decide it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    Pending,
    Running,
    Paused,
    /// Nothing runs and nothing can start because a task halted (`blocked_by` says which).
    Blocked,
    Finished,
    Failed,
    /// Ended by the operator.
    Stopped,
    #[serde(other)]
    Unknown,
}

/// A task's state; `pending` is a task of the plan the journal has not heard of yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskState {
    Pending,
    Leased,
    Implemented,
    Gated,
    Reviewed,
    Committed,
    Halted,
    /// Dropped by the operator after a halt: its wave counts it done.
    Skipped,
    #[serde(other)]
    Unknown,
}

/// What a task's process is doing, as its liveness record says (`gating`, `reviewing`: the step
/// between two journal states).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LiveState {
    Leased,
    Implemented,
    Gating,
    Gated,
    Reviewing,
    Reviewed,
    Committed,
    Halted,
    Skipped,
    #[serde(other)]
    Unknown,
}

/// Where a tool call asked of the operator stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ApprovalState {
    Pending,
    Allowed,
    Denied,
    Expired,
    #[serde(other)]
    Unknown,
}

/// Where a steer stands: `queued`, then `delivered` and `taken` (live) or `applied` (resume), or
/// `refused`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SteerState {
    Queued,
    Delivered,
    Taken,
    Applied,
    Refused,
    /// Dropped by a kill of its task before it was applied.
    Cancelled,
    #[serde(other)]
    Unknown,
}

/// What an attention mark asks a person to look at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AttentionKind {
    /// A running turn's log did not grow for the plan's `stall_after`.
    Stalled,
    /// A stalled turn's log grew again: the stall is over (added).
    Unstalled,
    #[serde(other)]
    Unknown,
}

/// Why a run is paused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PauseReason {
    Budget,
    RateLimit,
    Operator,
    #[serde(other)]
    Unknown,
}

/// Why a task halted, as a UI shows it (derived from the halt's code and words: `detail` stays).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HaltReason {
    /// The engine's turn failed (an API error, a crash, a missing engine, an exit code).
    EngineError,
    /// The task's gate failed or did not run.
    Gate,
    /// The plan's setup failed or did not run in the task's worktree.
    Setup,
    /// The review seat rejected the change (or gave no verdict).
    ReviewReject,
    /// The engine's rate limit; the run resumes by itself.
    RateLimited,
    /// Killed by someone or something (`killed by …`: an operator, a budget, a stall, a stop).
    Killed,
    /// A live turn interrupted by the operator.
    Interrupted,
    /// The task's work did not integrate (a conflict, kept for inspection).
    Conflict,
    /// The turn ran past its timeout.
    Timeout,
    /// harness itself could not go on (a file it could not write, a commit that failed).
    Harness,
    #[serde(other)]
    Unknown,
}

/// Which control plane executes a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Plane {
    Standalone,
    Dynwf,
    #[serde(other)]
    Unknown,
}

/// The engine a task runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Adapter {
    Claude,
    Cursor,
    Codex,
    #[serde(other)]
    Unknown,
}

/// How a usage's cost is known (`spec/USAGE.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Cost {
    /// Priced by the engine.
    #[serde(rename = "engine")]
    Engine,
    #[serde(rename = "tokens only")]
    TokensOnly,
    #[serde(rename = "not reported")]
    NotReported,
    /// A run whose tasks' costs are known in different ways.
    #[serde(rename = "mixed")]
    Mixed,
    #[serde(other, rename = "unknown")]
    Unknown,
}

/// A decision on an asked tool call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    Allow,
    Deny,
    #[serde(other)]
    Unknown,
}

named!(
    HaltReason,
    EndReason,
    FileStatus,
    StepState,
    RunStatus,
    TaskState,
    LiveState,
    ApprovalState,
    SteerState,
    AttentionKind,
    PauseReason,
    Plane,
    Adapter,
    Cost,
    Decision
);

/// The words a person reads for a state (`harness show`, `runs`, `top`, progress lines): mapped
/// here once, so every front end says the same; the wire names (`as_str`) stay the contract.
impl TaskState {
    pub fn label(self) -> &'static str {
        match self {
            TaskState::Pending => "waiting",
            TaskState::Leased => "running",
            TaskState::Implemented => "waiting for gate",
            TaskState::Gated => "gate passed",
            TaskState::Reviewed => "committing",
            TaskState::Committed => "done",
            TaskState::Halted => "failed",
            TaskState::Skipped => "skipped",
            TaskState::Unknown => "unknown",
        }
    }
}

impl LiveState {
    pub fn label(self) -> &'static str {
        match self {
            LiveState::Leased => "running",
            LiveState::Implemented => "waiting for gate",
            LiveState::Gating => "running gate",
            LiveState::Gated => "waiting for review",
            LiveState::Reviewing => "in review",
            LiveState::Reviewed => "committing",
            LiveState::Committed => "done",
            LiveState::Halted => "failed",
            LiveState::Skipped => "skipped",
            LiveState::Unknown => "unknown",
        }
    }
}

/// A task's state as a person reads it (`show`, `top`, the progress lines), every front end through
/// here: what its live process is doing while one runs (`live`: `running gate`, `in review`…), else
/// its journal state's words — a halt an interrupt made (`halt`: [`HaltReason::Interrupted`], a
/// steer's or the verb's) reads `interrupted`, as nothing failed.
pub fn task_label(state: TaskState, halt: Option<HaltReason>, live: Option<LiveState>) -> &'static str {
    match (live, state, halt) {
        (Some(l), _, _) => l.label(),
        (None, TaskState::Halted, Some(HaltReason::Interrupted)) => "interrupted",
        (None, s, _) => s.label(),
    }
}

impl TaskFacts {
    /// The task's state as a person reads it ([`task_label`]), its live process's state `live` aside.
    pub fn label(&self, live: Option<LiveState>) -> &'static str {
        task_label(self.state, self.halt_reason, live)
    }
}

impl RunStatus {
    /// Finished, failed or stopped: nothing of it runs any more.
    pub fn is_over(self) -> bool {
        matches!(self, RunStatus::Finished | RunStatus::Failed | RunStatus::Stopped)
    }

    pub fn label(self) -> &'static str {
        match self {
            RunStatus::Pending => "starting",
            RunStatus::Running => "running",
            RunStatus::Paused => "paused",
            RunStatus::Blocked => "blocked",
            RunStatus::Finished => "done",
            RunStatus::Failed => "failed",
            RunStatus::Stopped => "stopped",
            RunStatus::Unknown => "unknown",
        }
    }
}

/// What a task's (or a run's) turns used, summed over every turn that reported.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    /// US dollars as the engine priced them; `None` where it reports no price.
    pub cost_usd: Option<f64>,
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    pub cache_read_tokens: Option<u64>,
    pub cache_write_tokens: Option<u64>,
    /// Turns that reported.
    pub turns: u64,
    pub cost: Cost,
}

/// A run's tasks by state (every state counted, zero included).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    pub leased: u64,
    pub implemented: u64,
    pub gated: u64,
    pub reviewed: u64,
    pub committed: u64,
    pub halted: u64,
    /// Dropped by the operator (`skip`); absent from an API that predates it.
    #[serde(default)]
    pub skipped: u64,
    /// Planned tasks with no state yet (never leased); absent from an API that predates it.
    #[serde(default)]
    pub pending: u64,
}

/// How well a run's journal read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct JournalHealth {
    /// Valid records folded.
    pub records: u64,
    /// Complete lines that are not records.
    pub bad_lines: u64,
    /// The last line is torn (a crash mid-write).
    pub torn_tail: bool,
}

/// A journal line replay could not use.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BadLine {
    pub line: u64,
    pub reason: String,
}

/// The journal's health with the lines behind it (the Job view's).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JournalDetail {
    #[serde(flatten)]
    pub health: JournalHealth,
    pub bad_line_list: Vec<BadLine>,
    pub torn_tail_line: Option<BadLine>,
}

/// What a run's files say of it: the Overview's row without `live` (which is asked of the process
/// table per request), as `state::summary` caches it. `J` is how much of the journal's health is
/// shown: its counts in a row, the lines too in the Job view.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSummary<J = JournalHealth> {
    #[serde(rename = "runId")]
    pub run_id: RunId,
    pub slug: Slug,
    #[serde(rename = "repoRoot")]
    pub repo_root: PathBuf,
    pub project: String,
    pub repo: String,
    pub branch: Option<String>,
    pub worktree: PathBuf,
    pub plane: Plane,
    /// RFC 3339.
    pub created: String,
    /// The plan's base branch.
    pub base_branch: Option<String>,
    pub status: RunStatus,
    pub paused: bool,
    pub pause_reason: Option<PauseReason>,
    pub pause_detail: Option<String>,
    /// A run paused by a rate limit: when it resumes by itself.
    pub resume_at: Option<String>,
    /// The budget in force, US dollars (the budget verb's, else the plan's).
    pub budget_usd: Option<f64>,
    /// Attention marks the journal holds.
    #[serde(default)]
    pub attention_marks: u64,
    /// When the run started (its first `started` record) and ended (finished, failed or stopped);
    /// `None` before (added).
    #[serde(default)]
    pub started_at: Option<String>,
    #[serde(default)]
    pub finished_at: Option<String>,
    /// A task of the run is stalled now (added; `attention_marks` counts every mark ever).
    #[serde(default)]
    pub stalled: bool,
    /// Since when, the earliest of its stalled tasks (when their output stopped).
    #[serde(default)]
    pub stalled_since: Option<String>,
    /// Tool calls asked and not yet decided (added: a card can say "2 to approve").
    #[serde(default)]
    pub pending_approvals: u64,
    /// The wave the run is on (the lowest with a task not committed).
    pub wave: Option<u32>,
    pub waves: Option<u32>,
    pub tasks: u64,
    pub counts: Counts,
    /// The journal's last record time.
    pub updated: Option<String>,
    pub journal: J,
    pub usage: Usage,
    /// The slug of the plan this run is a run of (its own, or the one a re-run took `<slug>-N`
    /// from): a UI groups a plan's runs by it.
    #[serde(default)]
    pub base_slug: Option<Slug>,
    /// While the run is blocked (or paused after a block): the halted tasks that keep it from going on.
    #[serde(default)]
    pub blocked_by: Vec<Blocker>,
    /// While blocked: when the supervisor's idle limit fails the run (RFC 3339).
    #[serde(default)]
    pub fails_at: Option<String>,
}

/// A halted task that blocks its run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Blocker {
    pub task: TaskId,
    pub state: TaskState,
    pub detail: Option<String>,
    /// RFC 3339: its halt.
    pub since: String,
}

/// Whether a run's supervisor is there: `live`; `gone` (the run is not over and nothing runs it:
/// `harness debug supervise <runId>` recovers it); `none` (the run is over, or a DynWF run, which has none).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Supervisor {
    Live,
    Gone,
    None,
    #[serde(other)]
    Unknown,
}

impl Supervisor {
    /// The supervisor of a run in `status` on `plane` whose process is (not) `alive`.
    pub fn of(alive: bool, status: RunStatus, plane: Plane) -> Supervisor {
        let over = matches!(status, RunStatus::Finished | RunStatus::Failed | RunStatus::Stopped);
        match (alive, over, plane) {
            (true, _, _) => Supervisor::Live,
            (false, false, Plane::Standalone) => Supervisor::Gone,
            _ => Supervisor::None,
        }
    }
}

impl<J> RunSummary<J> {
    /// The same run with its journal's health shown as `f` makes it.
    pub fn with_journal<K>(self, f: impl FnOnce(J) -> K) -> RunSummary<K> {
        RunSummary {
            run_id: self.run_id,
            slug: self.slug,
            repo_root: self.repo_root,
            project: self.project,
            repo: self.repo,
            branch: self.branch,
            worktree: self.worktree,
            plane: self.plane,
            created: self.created,
            base_branch: self.base_branch,
            status: self.status,
            paused: self.paused,
            pause_reason: self.pause_reason,
            pause_detail: self.pause_detail,
            resume_at: self.resume_at,
            budget_usd: self.budget_usd,
            attention_marks: self.attention_marks,
            stalled: self.stalled,
            stalled_since: self.stalled_since,
            started_at: self.started_at,
            finished_at: self.finished_at,
            pending_approvals: self.pending_approvals,
            wave: self.wave,
            waves: self.waves,
            tasks: self.tasks,
            counts: self.counts,
            updated: self.updated,
            journal: f(self.journal),
            usage: self.usage,
            base_slug: self.base_slug,
            blocked_by: self.blocked_by,
            fails_at: self.fails_at,
        }
    }
}

/// `GET /runs`: one row of the Overview.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRow {
    #[serde(flatten)]
    pub run: RunSummary,
    /// The run's supervisor process is alive.
    pub live: bool,
    #[serde(default = "unknown_supervisor")]
    pub supervisor: Supervisor,
    /// The fleet host whose run this is (added with the fleet: only a fleet API's answers carry it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<HostName>,
    /// When the host's relay last spoke (RFC 3339), and whether that is recent enough to call it
    /// online (a fleet API's answers only): a UI says "host offline" from them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_seen: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_online: Option<bool>,
    /// Why the fleet stopped mirroring the run's journal (added with the fleet: its relay found
    /// the host's journal replaced under the run id); the fleet's journal and `/watch` end at the
    /// last line it had, while the view itself is the host's file's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mirror_stopped: Option<String>,
}

fn unknown_supervisor() -> Supervisor {
    Supervisor::Unknown
}

/// `GET /runs/:runId`: the Job view — the run, its plan by wave with each task's last state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunDetail {
    #[serde(flatten)]
    pub run: RunSummary<JournalDetail>,
    pub live: bool,
    #[serde(default = "unknown_supervisor")]
    pub supervisor: Supervisor,
    pub plan: PlanView,
    /// Tasks the journal knows and the plan copy does not (a plan copy missing or edited).
    pub unplanned_tasks: Vec<UnplannedTask>,
    /// Steers queued and not yet applied.
    pub pending_steers: u64,
    /// Every attention mark of the run, oldest first.
    #[serde(default)]
    pub attention: Vec<AttentionView>,
    pub paths: RunPaths,
    /// The fleet host whose run this is (added with the fleet: only a fleet API's answers carry it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<HostName>,
    /// When the host's relay last spoke (RFC 3339), and whether that is recent enough to call it
    /// online (a fleet API's answers only): a UI says "host offline" from them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_seen: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_online: Option<bool>,
    /// Why the fleet stopped mirroring the run's journal (added with the fleet: its relay found
    /// the host's journal replaced under the run id); the fleet's journal and `/watch` end at the
    /// last line it had, while the view itself is the host's file's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mirror_stopped: Option<String>,
}

impl RunDetail {
    /// The run's tasks: the plan's, wave by wave, then those only the journal knows.
    pub fn task_ids(&self) -> Vec<TaskId> {
        let planned = self.plan.waves.iter().flat_map(|w| w.tasks.iter().map(|t| t.id.clone()));
        planned.chain(self.unplanned_tasks.iter().map(|t| t.id.clone())).collect()
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanView {
    pub waves: Vec<Wave>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Wave {
    pub wave: u32,
    pub tasks: Vec<TaskView>,
}

/// A task's last known facts, from its journal records.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskFacts {
    pub state: TaskState,
    pub rc: Option<i32>,
    pub detail: Option<String>,
    pub sha: Option<String>,
    /// Committed with nothing to commit (then `sha` is `None`).
    #[serde(default)]
    pub no_changes: bool,
    pub session_id: Option<String>,
    pub attempts: u32,
    /// The time of the task's last record.
    pub updated: Option<String>,
    /// The task's own git worktree, present while it exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worktree: Option<PathBuf>,
    /// Why a halted task halted (added; `null` for any other state).
    #[serde(default)]
    pub halt_reason: Option<HaltReason>,
    /// Stalled now (added): its running turn has had no output for the plan's `stall_after`, since
    /// `stalled_since`.
    #[serde(default)]
    pub stalled: bool,
    #[serde(default)]
    pub stalled_since: Option<String>,
    /// What the task changed (added): its commit, or its latest attempt's; `null` before either.
    #[serde(default)]
    pub commit: Option<CommitView>,
}

/// A task of the plan in the Job view.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskView {
    pub id: TaskId,
    /// The same id, under the name every other view gives it (added; `id` stays).
    #[serde(default)]
    pub task: Option<TaskId>,
    /// The task's tool calls asked and not yet decided (added).
    #[serde(default)]
    pub pending_approvals: u64,
    #[serde(flatten)]
    pub facts: TaskFacts,
    pub adapter: Adapter,
    pub review: bool,
    pub gate: Option<String>,
    /// `None` when its usage is not known.
    #[serde(default)]
    pub usage: Option<Usage>,
    /// The task's budget in force, US dollars.
    #[serde(default)]
    pub budget_usd: Option<f64>,
    /// A leased task (whose turn may run): seconds since its log last grew, `Some(None)` when that
    /// is unknown. Absent for a task in any other state.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "present")]
    pub idle_s: Option<Option<f64>>,
    /// What the task's live process is doing (its liveness record: `gating`, `reviewing`…) while that
    /// process is alive; `None` otherwise (added with the CLI polish: `show` says `running gate`).
    #[serde(default)]
    pub live_state: Option<LiveState>,
}

/// A task the journal knows and the plan copy does not.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UnplannedTask {
    pub id: TaskId,
    #[serde(flatten)]
    pub facts: TaskFacts,
}

/// Where a run's files are.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunPaths {
    pub journal: PathBuf,
    pub plan: PathBuf,
    pub liveness: PathBuf,
}

/// A mark for a person's attention.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttentionView {
    pub attention: AttentionKind,
    pub task: TaskId,
    /// Seconds without output, for a stall.
    pub idle_s: Option<u64>,
    pub detail: Option<String>,
    pub ts: String,
    /// The journal line (1-based) that holds it.
    pub line: u64,
}

/// `GET /runs/:runId/tasks/:tid`: the Agent view — binding, state, session, liveness, log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskDetail {
    #[serde(rename = "runId")]
    pub run_id: RunId,
    pub task: TaskId,
    #[serde(flatten)]
    pub facts: TaskFacts,
    /// The task as the plan states it (`spec/PLAN.md` governs its shape), `None` for a task the
    /// plan copy does not hold.
    pub binding: Option<serde_json::Value>,
    /// The task's liveness record, when there is one.
    pub live: Option<TaskLive>,
    /// A planned task's usage (absent for one the plan does not hold).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    pub logfile: PathBuf,
    pub log_exists: bool,
    pub pending_steers: Vec<PendingSteer>,
    /// Every steer of the task and where it stands.
    #[serde(default)]
    pub steers: Vec<SteerView>,
    /// The task's attention marks, oldest first.
    #[serde(default)]
    pub attention: Vec<AttentionView>,
    /// The run's supervisor is alive.
    pub supervised: bool,
    /// Each attempt of the task, oldest first (added).
    #[serde(default)]
    pub history: Vec<Attempt>,
    /// The fleet host whose task this is (added with the fleet: only a fleet API's answers carry it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<HostName>,
}

/// One attempt of a task (`TaskDetail.history`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attempt {
    pub n: u32,
    pub started_at: String,
    /// `None` while it runs.
    pub ended_at: Option<String>,
    /// The state it reached.
    pub state: TaskState,
    pub rc: Option<i32>,
    /// The words of its last record (why it halted, how it was committed).
    pub reason: Option<String>,
}

/// A task's process as its liveness record has it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskLive {
    pub pid: i32,
    pub pgid: i32,
    pub alive: bool,
    pub state: LiveState,
    pub started_ts: String,
    pub runtime_s: Option<f64>,
    /// Seconds since the engine's last output (its log's last growth).
    pub idle_s: Option<f64>,
    pub last_output_ts: Option<String>,
}

/// A queued steer not yet applied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingSteer {
    pub id: String,
    pub task: TaskId,
    pub msg: String,
    pub interrupt: bool,
    /// The journal line that queued it.
    pub line: u64,
}

/// One steer and where it stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SteerView {
    pub id: String,
    pub task: TaskId,
    pub msg: Option<String>,
    pub by: String,
    pub state: SteerState,
    /// When it was queued (or refused).
    pub ts: String,
    /// When it reached its state.
    pub updated: String,
}

/// One tool call asked of the operator, and where it stands.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalView {
    pub id: String,
    pub task: TaskId,
    pub tool: Option<String>,
    /// The tool's input, verbatim (the engine's JSON).
    pub input: Option<serde_json::Value>,
    /// `live` (the live channel) or `mcp` (the permission tool of a batch turn).
    pub via: Option<String>,
    pub state: ApprovalState,
    /// Who decided.
    pub by: Option<String>,
    /// A deny's message (what the model reads).
    pub message: Option<String>,
    pub detail: Option<String>,
    /// When it was asked.
    pub ts: String,
    /// When it reached its state.
    pub updated: String,
}

/// `GET /runs/:runId/approvals`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Approvals {
    #[serde(rename = "runId")]
    pub run_id: RunId,
    /// Oldest first.
    pub approvals: Vec<ApprovalView>,
    /// The fleet host whose run this is (added with the fleet: only a fleet API's answers carry it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<HostName>,
}

/// `GET /hosts` (a fleet API's, added with the fleet): each host whose relay ever spoke.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hosts {
    pub hosts: Vec<HostView>,
}

/// One host of a fleet.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostView {
    pub host: HostName,
    /// When its relay last spoke (RFC 3339).
    pub seen: String,
    /// It spoke recently enough (`spec/FLEET.md`): verbs to an offline host are refused unsent.
    pub online: bool,
    /// Its runs the fleet lists.
    pub runs: u64,
    /// The id of the home its relay publishes (`Harness-Home`).
    pub home: Option<String>,
    /// The machine its relay runs on (its hostname).
    pub machine: Option<String>,
    /// The relay's harness version.
    pub version: Option<String>,
}

/// One `GET /watch` event's data (`spec/WATCH.md`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WatchEvent {
    /// `watch/v1`.
    pub v: String,
    pub run: RunId,
    /// The journal line (1-based).
    pub line: u64,
    /// The line's runstate/v1 record as written (`spec/runstate.schema.json`); `None` when the
    /// line is not JSON.
    pub record: Option<serde_json::Value>,
    /// Such a line's text (its first 4 KiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bad: Option<String>,
    /// The fleet host whose run this is (added with the fleet: only a fleet API's answers carry it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<HostName>,
}

/// How a commit or a worktree changed one path (`git diff --name-status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileStatus {
    Added,
    Modified,
    Deleted,
    Renamed,
    Copied,
    /// File type changed (a file became a symlink…).
    TypeChanged,
    #[serde(other)]
    Unknown,
}

/// One path a change touched.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileChange {
    pub path: String,
    /// A rename's or copy's source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old_path: Option<String>,
    pub status: FileStatus,
    /// Lines added and removed; `None` for a binary file.
    pub added: Option<u64>,
    pub removed: Option<u64>,
}

/// A task's commit (added with the Web UI API): its integrated commit once committed, else the
/// commit of its latest attempt not (yet) integrated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommitView {
    pub sha: String,
    /// `None` when the repository cannot be read (moved, deleted).
    pub subject: Option<String>,
    /// On the run's branch (`false`: an attempt's commit, kept in `refs/harness/…`).
    pub integrated: bool,
    pub files: Option<Vec<FileChange>>,
}

/// `GET …/diff?stat=1`: what a diff holds, per path, and in all.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiffStat {
    #[serde(rename = "runId")]
    pub run_id: RunId,
    /// The task, for a task's diff.
    pub task: Option<TaskId>,
    /// What was diffed: `commit`, `attempt`, `worktree`, `run` or `none` (`Harness-Diff-Of`).
    pub of: String,
    /// The commits (a task's one, the run's in order); empty for a worktree.
    pub commits: Vec<String>,
    pub files: Vec<FileChange>,
    pub added: u64,
    pub removed: u64,
}

/// How a task's gate or review seat went (`GET …/gate`, `GET …/review`), on its latest attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepState {
    /// The plan gives the task none.
    None,
    /// It has not run yet on this attempt.
    Pending,
    Running,
    Passed,
    Failed,
    /// The task halted (or was skipped) before it ran.
    NotRun,
    #[serde(other)]
    Unknown,
}

/// `GET /runs/:runId/tasks/:tid/gate`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GateView {
    #[serde(rename = "runId")]
    pub run_id: RunId,
    pub task: TaskId,
    /// The gate command.
    pub gate: Option<String>,
    pub state: StepState,
    /// Its exit code, once it ran.
    pub rc: Option<i32>,
    /// The journal's words for it.
    pub detail: Option<String>,
    pub log: PathBuf,
    /// The output's last lines (at most 64 KiB).
    pub output_tail: String,
}

/// `GET /runs/:runId/tasks/:tid/review`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReviewView {
    #[serde(rename = "runId")]
    pub run_id: RunId,
    pub task: TaskId,
    /// The plan asks for a review seat.
    pub review: bool,
    /// `passed`: approved; `failed`: rejected, or the seat failed (`rc` not 0, or no verdict).
    pub state: StepState,
    pub rc: Option<i32>,
    /// `APPROVE`, or `REJECT: <reason>`, or why the seat failed.
    pub verdict: Option<String>,
    /// The reviewer's last message in full (its reasoning), from the review log.
    pub reasoning: Option<String>,
    pub log: PathBuf,
}

/// Why a task's `/stream` or `/feed` ended (`event: end`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EndReason {
    /// The task is over: committed or skipped.
    TaskOver,
    /// The run ended (finished, failed, stopped): the task will not run again.
    RunOver,
    /// No supervisor answers for the run (it died or was never started): nothing follows until
    /// one does; the run's state stays readable.
    NotLive,
    #[serde(other)]
    Unknown,
}

/// The data of a task stream's last event, `event: end` (`GET …/stream`, `GET …/feed`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamEnd {
    #[serde(rename = "runId")]
    pub run_id: RunId,
    pub task: TaskId,
    pub reason: EndReason,
    /// The task's state then.
    pub state: TaskState,
    /// The run's status then.
    pub run_status: RunStatus,
    /// The seq of the last event sent before it (`None`: the task had none).
    pub last_seq: Option<String>,
    /// What ended it, in words.
    pub detail: String,
}

impl StreamEnd {
    /// The end of a task's stream, if it is over: the task committed (`sha`) or skipped, its run
    /// over, or (`not_live`) no supervisor answering for it. The words are the same wherever the
    /// stream is served from (a home's API, a fleet's).
    pub fn of(
        run: &RunId,
        task: &TaskId,
        (state, sha): (TaskState, Option<&str>),
        run_status: RunStatus,
        not_live: bool,
        last_seq: Option<String>,
    ) -> Option<StreamEnd> {
        let (reason, detail) = match state {
            TaskState::Committed => (
                EndReason::TaskOver,
                match sha {
                    Some(sha) => format!("task {task} was committed ({sha})"),
                    None => format!("task {task} was committed"),
                },
            ),
            TaskState::Skipped => (EndReason::TaskOver, format!("task {task} was skipped")),
            _ if run_status.is_over() => (
                EndReason::RunOver,
                format!(
                    "the run {}; task {task} is {}",
                    crate::wire::name_of(&run_status),
                    crate::wire::name_of(&state)
                ),
            ),
            _ if not_live => (
                EndReason::NotLive,
                format!(
                    "no supervisor answers for run {run} (it {}): nothing more follows until one runs it",
                    if run_status == RunStatus::Pending { "has not started" } else { "stopped without ending the run" }
                ),
            ),
            _ => return None,
        };
        Some(StreamEnd { run_id: run.clone(), task: task.clone(), reason, state, run_status, last_seq, detail })
    }
}

/// What an answer says of itself: `{ok: false, detail}` for every error; a verb's answer carries
/// `ok: true` and, mostly, a `detail`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Answer {
    // The wire's order: `{"detail":…,"ok":false}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    pub ok: bool,
}

/// A review comment a steer carries back to the agent (added with the Web UI API).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReviewComment {
    pub path: String,
    /// `None`: the file as a whole.
    pub line: Option<u64>,
    pub body: String,
}

/// `POST …/steer`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SteerBody {
    /// May be empty when `comments` are given.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub msg: String,
    /// Review comments, quoted in the one message delivered after `msg` (added).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub comments: Vec<ReviewComment>,
    /// Kill the current turn first.
    #[serde(default)]
    pub interrupt: bool,
    pub by: String,
}

/// `POST …/kill`, `…/interrupt`, `/pause`, `/resume`: who asks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerbBody {
    pub by: String,
}

/// `POST /runs/:runId/tasks/:tid/skip`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SkipBody {
    /// Why the task is skipped (journaled).
    pub reason: String,
    pub by: String,
}

/// `POST /runs/:runId/budget`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BudgetBody {
    /// The new budget in US dollars.
    pub usd: f64,
    /// A task's budget instead of the run's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<TaskId>,
    pub by: String,
}

/// `POST …/approvals/:aid`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DecideBody {
    pub decision: Decision,
    /// A deny's message (what the model reads).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    pub by: String,
}

/// Reads a field that is there as `Some`, its `null` included: for fields whose absence and `null`
/// say different things.
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_name_reads_as_unknown_and_every_known_one_as_itself() {
        assert_eq!(RunStatus::named("finished"), RunStatus::Finished);
        assert_eq!(RunStatus::named("archived"), RunStatus::Unknown);
        assert_eq!(Cost::named("tokens only"), Cost::TokensOnly);
        assert_eq!(PauseReason::named("rate_limit"), PauseReason::RateLimit);
        assert_eq!(TaskState::Pending.as_str(), "pending");
        assert_eq!(Cost::NotReported.to_string(), "not reported");
    }

    #[test]
    fn idle_s_tells_absent_from_null() {
        let facts =
            r#""state":"leased","rc":null,"detail":null,"sha":null,"session_id":null,"attempts":1,"updated":null"#;
        let base = format!(r#"{{"id":"B1",{facts},"adapter":"claude","review":false,"gate":null"#);
        let absent: TaskView = serde_json::from_str(&format!("{base}}}")).unwrap();
        let null: TaskView = serde_json::from_str(&format!(r#"{base},"idle_s":null}}"#)).unwrap();
        let some: TaskView = serde_json::from_str(&format!(r#"{base},"idle_s":2.5}}"#)).unwrap();
        assert_eq!((absent.idle_s, null.idle_s, some.idle_s), (None, Some(None), Some(Some(2.5))));
        assert!(!serde_json::to_string(&absent).unwrap().contains("idle_s"));
        assert!(serde_json::to_string(&null).unwrap().contains(r#""idle_s":null"#));
    }
}
