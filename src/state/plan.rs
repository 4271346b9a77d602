//! `plan/v1`: the tasks of a run grouped into waves. Parsing and full validation (every problem
//! reported, each naming the task and the field), and the wave view the scheduler and the durable
//! API draw from. This module runs nothing.

use crate::engine::Adapter;
use crate::ids::{Slug, TaskId};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::{BTreeMap, HashSet};
use std::path::Path;

pub const VERSION: &str = "plan/v1";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Task {
    pub id: TaskId,
    /// 1-based wave; every wave from 1 to the last holds at least one task.
    pub wave: u32,
    pub adapter: Adapter,
    pub prompt: String,
    /// Shell command run in the worktree after the turn; rc 0 passes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate: Option<String>,
    /// When true, a codex verdict seat reviews the turn before commit.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub review: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// claude only: the turn runs on the live channel (stdin kept open: steer into the running turn,
    /// interrupt without killing). Absent: the plan's `live`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live: Option<bool>,
    /// claude only: tool calls outside `allowed_tools` are asked of the operator (`ask`) or denied
    /// (`deny`, the default). Absent: the plan's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approvals: Option<Approvals>,
    /// claude only: the tools the turn may use unasked, in claude's `--allowedTools` rule syntax.
    /// Absent: the plan's, else the wrappers' default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_tools: Option<Vec<String>>,
    /// The task's spend (US dollars, as its engine prices it) at which the run pauses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_usd: Option<f64>,
}

/// What happens to a tool call the task's allowed tools do not cover.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Approvals {
    /// Asked of the operator (API, CLI), decided by a rule of `approve`, or denied at the timeout.
    Ask,
    /// Denied (claude's batch behaviour).
    Deny,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    pub v: String,
    pub slug: Slug,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_branch: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_parallel: Option<u32>,
    /// Where tasks work: each in its own worktree (default), or all in the run's (`shared`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolation: Option<Isolation>,
    /// A shell command run in each fresh task worktree before its turn (copy `.env`, `npm ci`…).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub setup: Option<String>,
    /// `true`: the repository's git hooks run for each task's own commit and worktree (pre-commit,
    /// commit-msg, post-checkout…; a failing one halts the task with its output). Default: harness's
    /// git calls run no hook.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git_hooks: Option<bool>,
    /// Every claude task on the live channel unless it says `live: false` (other adapters ignore it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live: Option<bool>,
    /// The claude tasks' default `approvals`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approvals: Option<Approvals>,
    /// The claude tasks' default `allowed_tools`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_tools: Option<Vec<String>>,
    /// How long an asked tool call waits for a decision before it is denied (seconds; default 600).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_timeout: Option<u64>,
    /// Rules (claude's syntax, e.g. `Bash(npm test:*)`) that allow an asked call without asking.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approve: Option<Vec<String>>,
    /// An interactive session (`harness session start`): its one claude task's live channel stays
    /// open between turns until `harness session end` or the idle limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<Session>,
    /// The run's spend (US dollars, as the engines price it) at which it pauses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_usd: Option<f64>,
    /// What a crossed budget does besides pausing: `pause` (default: running turns finish) or `kill`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_budget: Option<OnBudget>,
    /// Seconds a running turn's log may stay still before the turn is marked stalled (default 600).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stall_after: Option<u64>,
    /// What a stall does besides its attention mark: `mark` (default) or `kill`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_stall: Option<OnStall>,
    /// A turn that ends on a rate limit: `pause` (default: the run pauses and resumes by itself) or
    /// `halt` (the task halts, nothing more).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_rate_limit: Option<OnRateLimit>,
    pub tasks: Vec<Task>,
}

/// What a rate-limited turn does to the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnRateLimit {
    Pause,
    Halt,
}

/// What a stalled turn gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnStall {
    /// An attention record, once per stall.
    Mark,
    /// The mark, and the turn is killed (journaled as by `stall`).
    Kill,
}

/// The default `stall_after`.
pub const STALL_AFTER_DEFAULT: u64 = 600;

/// A duration field: `"10m"` or seconds, from 1 s to 24 h.
fn parse_duration_field(field: &str, v: Option<&Value>, errs: &mut Vec<String>) -> Option<u64> {
    let bad = |errs: &mut Vec<String>, got: String| {
        errs.push(format!("{field}: a duration from 1s to 24h (\"10m\", or seconds), got {got}"));
        None
    };
    match v {
        None | Some(Value::Null) => None,
        Some(Value::Number(n)) if n.as_u64().is_some_and(|n| (1..=86_400).contains(&n)) => n.as_u64(),
        Some(Value::String(s)) => match humantime::parse_duration(s) {
            Ok(d) if (1..=86_400).contains(&d.as_secs()) => Some(d.as_secs()),
            _ => bad(errs, format!("{s:?}")),
        },
        Some(v) => bad(errs, v.to_string()),
    }
}

/// What a crossed budget does to the turns still running.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnBudget {
    /// They finish; nothing more is dispatched.
    Pause,
    /// They are killed (journaled as by `budget`).
    Kill,
}

/// A field that is one of a few words: the word's value, or an error naming the choices.
fn parse_choice<T: Copy>(field: &str, v: Option<&Value>, choices: &[(&str, T)], errs: &mut Vec<String>) -> Option<T> {
    match v {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if choices.iter().any(|(w, _)| w == s) => {
            choices.iter().find(|(w, _)| w == s).map(|(_, t)| *t)
        }
        Some(v) => {
            let words: Vec<String> = choices.iter().map(|(w, _)| format!("\"{w}\"")).collect();
            errs.push(format!("{field}: expected {}, got {v}", words.join(" or ")));
            None
        }
    }
}

/// A budget in US dollars: a positive, finite number.
fn parse_budget(v: Option<&Value>, label: &str, errs: &mut Vec<String>) -> Option<f64> {
    match v {
        None | Some(Value::Null) => None,
        Some(Value::Number(n)) if n.as_f64().is_some_and(|f| f.is_finite() && f > 0.0) => n.as_f64(),
        Some(v) => {
            errs.push(format!("{label}budget_usd: a positive number of US dollars, got {v}"));
            None
        }
    }
}

/// A session's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Session {
    /// Seconds with no turn running after which the session ends by itself.
    pub idle_s: u64,
    /// Whether the task's prompt is the first message (else the first steer is).
    pub prompt: bool,
}

/// Where a run's tasks do their work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Isolation {
    /// Each task in its own git worktree on a task branch; its commit is integrated onto the run's
    /// branch by one integrator at a time.
    #[default]
    Worktree,
    /// Every task in the run's worktree (only with `max_parallel: 1`).
    Shared,
}

#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("cannot read plan {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("plan is not valid plan/v1:\n  {}", .0.join("\n  "))]
    Invalid(Vec<String>),
}

const TOP_FIELDS: [&str; 19] = [
    "v",
    "slug",
    "base_branch",
    "max_parallel",
    "isolation",
    "setup",
    "git_hooks",
    "live",
    "approvals",
    "allowed_tools",
    "approval_timeout",
    "approve",
    "session",
    "budget_usd",
    "on_budget",
    "stall_after",
    "on_stall",
    "on_rate_limit",
    "tasks",
];
const TASK_FIELDS: [&str; 11] =
    ["id", "wave", "adapter", "prompt", "gate", "review", "model", "live", "approvals", "allowed_tools", "budget_usd"];

/// The default wait for an operator's decision on an asked tool call.
pub const APPROVAL_TIMEOUT_DEFAULT: u64 = 600;

/// `approvals`: "ask" or "deny".
/// An optional boolean field (`null` is absent); anything else is an error naming `what`.
fn opt_bool(v: Option<&Value>, what: &str, errs: &mut Vec<String>) -> Option<bool> {
    match v {
        None | Some(Value::Null) => None,
        Some(Value::Bool(b)) => Some(*b),
        Some(v) => {
            errs.push(format!("{what}: must be a boolean, got {v}"));
            None
        }
    }
}

fn parse_approvals(v: Option<&Value>, label: &str, errs: &mut Vec<String>) -> Option<Approvals> {
    match v {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s == "ask" => Some(Approvals::Ask),
        Some(Value::String(s)) if s == "deny" => Some(Approvals::Deny),
        Some(v) => {
            errs.push(format!("{label}approvals: expected \"ask\" or \"deny\", got {v}"));
            None
        }
    }
}

/// An optional string field that must hold something when present (else `why` is reported).
fn opt_text(v: Option<&Value>, why: &str, errs: &mut Vec<String>) -> Option<String> {
    match v {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if !s.trim().is_empty() => Some(s.clone()),
        Some(_) => {
            errs.push(why.into());
            None
        }
    }
}

/// `isolation`: `worktree` or `shared` (which needs `max_parallel: 1`).
fn parse_isolation(v: Option<&Value>, max_parallel: Option<u32>, errs: &mut Vec<String>) -> Option<Isolation> {
    match v {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s == "worktree" => Some(Isolation::Worktree),
        Some(Value::String(s)) if s == "shared" => {
            if max_parallel != Some(1) {
                errs.push(format!(
                    "isolation: \"shared\" needs max_parallel: 1 (parallel tasks in one worktree mix each other's files), got max_parallel {}",
                    max_parallel.map_or("absent (default 4)".to_string(), |n| n.to_string())
                ));
            }
            Some(Isolation::Shared)
        }
        Some(v) => {
            errs.push(format!("isolation: expected \"worktree\" or \"shared\", got {v}"));
            None
        }
    }
}

/// `approval_timeout`: 1 s to 24 h, as seconds or a duration string.
fn parse_approval_timeout(v: Option<&Value>, errs: &mut Vec<String>) -> Option<u64> {
    match v {
        None | Some(Value::Null) => None,
        Some(Value::Number(n)) if n.as_u64().is_some_and(|n| (1..=86_400).contains(&n)) => n.as_u64(),
        Some(Value::String(s)) => match humantime::parse_duration(s) {
            Ok(d) if (1..=86_400).contains(&d.as_secs()) => Some(d.as_secs()),
            _ => {
                errs.push(format!("approval_timeout: a duration from 1s to 24h (\"10m\", or seconds), got {s:?}"));
                None
            }
        },
        Some(v) => {
            errs.push(format!("approval_timeout: a duration from 1s to 24h (\"10m\", or seconds), got {v}"));
            None
        }
    }
}

/// `session`: `{idle_s, prompt}`.
fn parse_session(v: Option<&Value>, errs: &mut Vec<String>) -> Option<Session> {
    match v {
        None | Some(Value::Null) => None,
        Some(Value::Object(o)) => {
            let idle_s = o.get("idle_s").and_then(Value::as_u64).filter(|n| (1..=7 * 86_400).contains(n));
            let prompt = o.get("prompt").and_then(Value::as_bool);
            if let Some(k) = o.keys().find(|k| !["idle_s", "prompt"].contains(&k.as_str())) {
                errs.push(format!("session: unknown field {k:?}"));
            }
            match (idle_s, prompt) {
                (Some(idle_s), Some(prompt)) => Some(Session { idle_s, prompt }),
                _ => {
                    errs.push("session: needs idle_s (1 s to 7 days) and prompt (boolean)".into());
                    None
                }
            }
        }
        Some(v) => {
            errs.push(format!("session: must be an object {{idle_s, prompt}}, got {v}"));
            None
        }
    }
}

/// `tasks`: each parsed (its errors named by index and id), ids unique, waves 1..=max with no gap.
fn parse_tasks(v: Option<&Value>, errs: &mut Vec<String>) -> Vec<Task> {
    let mut tasks = Vec::new();
    // Waves of every task with a usable wave, valid or not, so a gap is reported alongside other errors.
    let mut waves_seen = HashSet::new();
    match v.and_then(Value::as_array) {
        None => errs.push("tasks: missing (array)".into()),
        Some(a) if a.is_empty() => errs.push("tasks: empty (a plan needs at least one task)".into()),
        Some(a) => {
            let mut seen = HashSet::new();
            for (i, t) in a.iter().enumerate() {
                if let Some(w) = t.get("wave").and_then(Value::as_u64).filter(|w| (1..=10_000).contains(w)) {
                    waves_seen.insert(w as u32);
                }
                if let Some(task) = parse_task(i, t, errs) {
                    if !seen.insert(task.id.clone()) {
                        errs.push(format!("tasks[{i}] ({}): duplicate id", task.id));
                    }
                    tasks.push(task);
                }
            }
        }
    }
    if let Some(&max) = waves_seen.iter().max() {
        for w in 1..=max {
            if !waves_seen.contains(&w) {
                errs.push(format!("wave {w} is empty (waves must be 1..={max} with no gap)"));
            }
        }
    }
    tasks
}

/// Rules in claude's syntax: one string (`"Read Bash(npm test:*)"`, split where claude splits it) or a
/// list of rules.
fn parse_rules(field: &str, v: Option<&Value>, label: &str, errs: &mut Vec<String>) -> Option<Vec<String>> {
    let bad = |errs: &mut Vec<String>, why: String| {
        errs.push(format!("{label}{field}: {why}"));
        None
    };
    let rules = match v {
        None | Some(Value::Null) => return None,
        Some(Value::String(s)) => crate::rules::split(s),
        Some(Value::Array(a)) => {
            let mut out = Vec::new();
            for x in a {
                match x.as_str() {
                    Some(s) => out.push(s.trim().to_string()),
                    None => return bad(errs, format!("each rule must be a string, got {x}")),
                }
            }
            out
        }
        Some(v) => return bad(errs, format!("a string of rules or a list of rules, got {v}")),
    };
    for r in &rules {
        if let Err(e) = crate::rules::Rule::parse(r) {
            return bad(errs, e);
        }
    }
    Some(rules)
}

impl Plan {
    pub fn load(path: &Path) -> Result<Plan, PlanError> {
        let bytes =
            std::fs::read(path).map_err(|source| PlanError::Read { path: path.display().to_string(), source })?;
        Plan::parse(&bytes)
    }

    /// Parses and validates; on failure lists every problem found.
    pub fn parse(bytes: &[u8]) -> Result<Plan, PlanError> {
        let root: Value =
            serde_json::from_slice(bytes).map_err(|e| PlanError::Invalid(vec![format!("not JSON: {e}")]))?;
        let mut errs = Vec::new();
        let Some(obj) = root.as_object() else {
            return Err(PlanError::Invalid(vec!["top level must be an object".into()]));
        };
        for k in obj.keys().filter(|k| !TOP_FIELDS.contains(&k.as_str())) {
            errs.push(format!("unknown field {k:?}"));
        }
        match obj.get("v").and_then(Value::as_str) {
            Some(VERSION) => {}
            other => errs.push(format!("v: expected \"{VERSION}\", got {other:?}")),
        }
        let slug = match obj.get("slug").and_then(Value::as_str) {
            Some(s) => Slug::parse(s).map_err(|e| errs.push(format!("slug: {e}"))).ok(),
            None => {
                errs.push("slug: missing (string)".into());
                None
            }
        };
        let base_branch = opt_text(obj.get("base_branch"), "base_branch: must be a non-empty string", &mut errs);
        let max_parallel = match obj.get("max_parallel") {
            None | Some(Value::Null) => None,
            Some(v) => match v.as_u64() {
                Some(n @ 1..=256) => Some(n as u32),
                _ => {
                    errs.push(format!("max_parallel: must be an integer 1..=256, got {v}"));
                    None
                }
            },
        };
        let isolation = parse_isolation(obj.get("isolation"), max_parallel, &mut errs);
        let setup = opt_text(obj.get("setup"), "setup: must be a non-empty string (a shell command)", &mut errs);
        let git_hooks = opt_bool(obj.get("git_hooks"), "git_hooks", &mut errs);
        let live = opt_bool(obj.get("live"), "live", &mut errs);
        let approvals = parse_approvals(obj.get("approvals"), "", &mut errs);
        let allowed_tools = parse_rules("allowed_tools", obj.get("allowed_tools"), "", &mut errs);
        let approve = parse_rules("approve", obj.get("approve"), "", &mut errs);
        let approval_timeout = parse_approval_timeout(obj.get("approval_timeout"), &mut errs);
        let budget_usd = parse_budget(obj.get("budget_usd"), "", &mut errs);
        let on_budget = parse_choice(
            "on_budget",
            obj.get("on_budget"),
            &[("pause", OnBudget::Pause), ("kill", OnBudget::Kill)],
            &mut errs,
        );
        let stall_after = parse_duration_field("stall_after", obj.get("stall_after"), &mut errs);
        let on_stall = parse_choice(
            "on_stall",
            obj.get("on_stall"),
            &[("mark", OnStall::Mark), ("kill", OnStall::Kill)],
            &mut errs,
        );
        let on_rate_limit = parse_choice(
            "on_rate_limit",
            obj.get("on_rate_limit"),
            &[("pause", OnRateLimit::Pause), ("halt", OnRateLimit::Halt)],
            &mut errs,
        );
        let session = parse_session(obj.get("session"), &mut errs);
        let tasks = parse_tasks(obj.get("tasks"), &mut errs);
        if session.is_some() && (tasks.len() != 1 || tasks.iter().any(|t: &Task| !t.adapter.has_live_channel())) {
            errs.push("session: a session plan has exactly one task, a claude one".into());
        }
        match (errs.is_empty(), slug) {
            (true, Some(slug)) => Ok(Plan {
                v: VERSION.into(),
                slug,
                base_branch,
                max_parallel,
                isolation,
                setup,
                git_hooks,
                live,
                approvals,
                allowed_tools,
                approval_timeout,
                approve,
                session,
                budget_usd,
                on_budget,
                stall_after,
                on_stall,
                on_rate_limit,
                tasks,
            }),
            _ => Err(PlanError::Invalid(errs)),
        }
    }

    /// Tasks grouped by wave, in plan order within a wave.
    pub fn waves(&self) -> BTreeMap<u32, Vec<&Task>> {
        let mut m: BTreeMap<u32, Vec<&Task>> = BTreeMap::new();
        for t in &self.tasks {
            m.entry(t.wave).or_default().push(t);
        }
        m
    }

    pub fn task(&self, id: &TaskId) -> Option<&Task> {
        self.tasks.iter().find(|t| &t.id == id)
    }

    /// How many tasks of one wave may run at once (default 4).
    /// Where tasks work (default: each in its own worktree).
    pub fn isolation(&self) -> Isolation {
        self.isolation.unwrap_or_default()
    }

    pub fn parallelism(&self) -> usize {
        self.max_parallel.unwrap_or(4) as usize
    }

    /// Whether `task`'s turns run on the live channel: its own `live`, else the plan's, for claude
    /// tasks only.
    pub fn is_live(&self, task: &Task) -> bool {
        task.adapter.has_live_channel() && (self.session.is_some() || task.live.or(self.live).unwrap_or(false))
    }

    /// Whether `task`'s tool calls outside its allowed tools are asked of the operator.
    pub fn asks(&self, task: &Task) -> bool {
        task.adapter.asks_permissions() && task.approvals.or(self.approvals) == Some(Approvals::Ask)
    }

    /// `task`'s allowed tools (claude rules), when the plan says; else the wrappers' default applies.
    pub fn allowed_tools<'a>(&'a self, task: &'a Task) -> Option<&'a [String]> {
        task.allowed_tools.as_deref().or(self.allowed_tools.as_deref())
    }

    /// How long a running turn's log may stay still before the turn is marked stalled.
    pub fn stall_after(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.stall_after.unwrap_or(STALL_AFTER_DEFAULT))
    }

    /// How long an asked call waits for a decision.
    pub fn approval_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.approval_timeout.unwrap_or(APPROVAL_TIMEOUT_DEFAULT))
    }

    /// The rules that allow an asked call without asking.
    pub fn approve_rules(&self) -> &[String] {
        self.approve.as_deref().unwrap_or(&[])
    }
}

fn parse_task(i: usize, t: &Value, errs: &mut Vec<String>) -> Option<Task> {
    let Some(o) = t.as_object() else {
        errs.push(format!("tasks[{i}]: must be an object"));
        return None;
    };
    let id_str = o.get("id").and_then(Value::as_str);
    let label = match id_str {
        Some(s) => format!("tasks[{i}] ({s})"),
        None => format!("tasks[{i}]"),
    };
    let before = errs.len();
    for k in o.keys().filter(|k| !TASK_FIELDS.contains(&k.as_str())) {
        errs.push(format!("{label}: unknown field {k:?}"));
    }
    let id = match id_str {
        Some(s) => TaskId::parse(s).map_err(|e| errs.push(format!("{label}: id: {e}"))).ok(),
        None => {
            errs.push(format!("{label}: id: missing (string)"));
            None
        }
    };
    let wave = match o.get("wave").and_then(Value::as_u64) {
        Some(w @ 1..=10_000) => Some(w as u32),
        _ => {
            errs.push(format!("{label}: wave: must be an integer >= 1, got {}", o.get("wave").unwrap_or(&Value::Null)));
            None
        }
    };
    let adapter = match o.get("adapter").and_then(Value::as_str) {
        Some(a) => a.parse::<Adapter>().map_err(|e| errs.push(format!("{label}: adapter: {e}"))).ok(),
        None => {
            errs.push(format!("{label}: adapter: missing (claude, cursor or codex)"));
            None
        }
    };
    let prompt = match o.get("prompt").and_then(Value::as_str) {
        Some(p) if !p.trim().is_empty() => Some(p.to_string()),
        _ => {
            errs.push(format!("{label}: prompt: must be a non-empty string"));
            None
        }
    };
    let opt_str = |field: &str, errs: &mut Vec<String>| match o.get(field) {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if !s.trim().is_empty() => Some(s.clone()),
        Some(_) => {
            errs.push(format!("{label}: {field}: must be a non-empty string"));
            None
        }
    };
    let gate = opt_str("gate", errs);
    let model = opt_str("model", errs);
    let review = match o.get("review") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            errs.push(format!("{label}: review: must be a boolean"));
            false
        }
    };
    if review && adapter.is_some_and(Adapter::is_verdict_seat) {
        errs.push(format!("{label}: review: a codex task is itself a verdict seat and cannot be reviewed"));
    }
    let live = opt_bool(o.get("live"), &format!("{label}: live"), errs);
    if live == Some(true)
        && let Some(a) = adapter.filter(|a| !a.has_live_channel())
    {
        errs.push(format!(
            "{label}: live: the live channel is claude's (adapter {a} has no input while a turn runs; steer resumes it)"
        ));
    }
    let field = format!("{label}: ");
    let approvals = parse_approvals(o.get("approvals"), &field, errs);
    let allowed_tools = parse_rules("allowed_tools", o.get("allowed_tools"), &field, errs);
    let budget_usd = parse_budget(o.get("budget_usd"), &field, errs);
    if let Some(a) = adapter.filter(|a| !a.asks_permissions()) {
        for (name, set) in [("approvals", approvals.is_some()), ("allowed_tools", allowed_tools.is_some())] {
            if set {
                errs.push(format!("{label}: {name}: claude's tool permissions do not apply to adapter {a}"));
            }
        }
    }
    if errs.len() > before {
        return None;
    }
    Some(Task {
        id: id?,
        wave: wave?,
        adapter: adapter?,
        prompt: prompt?,
        gate,
        review,
        model,
        live,
        approvals,
        allowed_tools,
        budget_usd,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_plan_groups_waves() {
        let p = Plan::parse(
            br#"{"v":"plan/v1","slug":"demo","tasks":[
            {"id":"a","wave":1,"adapter":"claude","prompt":"x"},
            {"id":"b","wave":2,"adapter":"cursor","prompt":"y","gate":"true","review":true},
            {"id":"c","wave":1,"adapter":"codex","prompt":"z"}]}"#,
        )
        .unwrap();
        let w = p.waves();
        assert_eq!(w[&1].len(), 2);
        assert_eq!(w[&2][0].id.as_str(), "b");
    }

    #[test]
    fn every_problem_is_named() {
        let err = Plan::parse(
            br#"{"v":"plan/v1","slug":"Demo","extra":1,"tasks":[
            {"id":"a","wave":1,"adapter":"gpt","prompt":"x"},
            {"id":"a","wave":3,"adapter":"claude","prompt":""},
            {"id":"b","wave":3,"adapter":"claude","prompt":"p","colour":"red"}]}"#,
        )
        .unwrap_err()
        .to_string();
        for needle in [
            "unknown field \"extra\"",
            "slug: invalid slug \"Demo\"",
            "tasks[0] (a): adapter: unknown adapter \"gpt\"",
            "tasks[1] (a): prompt: must be a non-empty string",
            "tasks[2] (b): unknown field \"colour\"",
        ] {
            assert!(err.contains(needle), "missing {needle:?} in:\n{err}");
        }
    }

    #[test]
    fn live_is_claudes_and_the_plan_wide_default_skips_other_adapters() {
        let err = Plan::parse(
            br#"{"v":"plan/v1","slug":"d","live":"yes","tasks":[
            {"id":"a","wave":1,"adapter":"codex","prompt":"x","live":true},
            {"id":"b","wave":1,"adapter":"claude","prompt":"y","live":1}]}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("live: must be a boolean, got \"yes\""), "{err}");
        assert!(err.contains("tasks[0] (a): live: the live channel is claude's (adapter codex"), "{err}");
        assert!(err.contains("tasks[1] (b): live: must be a boolean, got 1"), "{err}");
        let p = Plan::parse(
            br#"{"v":"plan/v1","slug":"d","live":true,"tasks":[
            {"id":"a","wave":1,"adapter":"claude","prompt":"x"},
            {"id":"b","wave":1,"adapter":"claude","prompt":"y","live":false},
            {"id":"c","wave":1,"adapter":"cursor","prompt":"z"}]}"#,
        )
        .unwrap();
        let live: Vec<bool> = p.tasks.iter().map(|t| p.is_live(t)).collect();
        assert_eq!(live, vec![true, false, false]);
    }

    #[test]
    fn a_session_is_one_live_claude_task_with_an_idle_limit() {
        let err = Plan::parse(
            br#"{"v":"plan/v1","slug":"s","session":{"idle_s":0,"prompt":true,"x":1},"tasks":[
            {"id":"a","wave":1,"adapter":"claude","prompt":"x"},
            {"id":"b","wave":1,"adapter":"cursor","prompt":"y"}]}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("session: unknown field \"x\""), "{err}");
        assert!(err.contains("session: needs idle_s (1 s to 7 days) and prompt (boolean)"), "{err}");
        let err = Plan::parse(
            br#"{"v":"plan/v1","slug":"s","session":{"idle_s":60,"prompt":true},"tasks":[
            {"id":"a","wave":1,"adapter":"claude","prompt":"x"},
            {"id":"b","wave":1,"adapter":"cursor","prompt":"y"}]}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("session: a session plan has exactly one task, a claude one"), "{err}");
        let p = Plan::parse(
            br#"{"v":"plan/v1","slug":"s","session":{"idle_s":60,"prompt":false},"tasks":[
            {"id":"a","wave":1,"adapter":"claude","prompt":"x","live":false}]}"#,
        )
        .unwrap();
        assert_eq!(p.session, Some(Session { idle_s: 60, prompt: false }));
        assert!(p.is_live(&p.tasks[0]), "a session's task is live whatever it says");
    }

    #[test]
    fn spend_and_attention_fields_are_checked() {
        let err = Plan::parse(
            br#"{"v":"plan/v1","slug":"s","budget_usd":-1,"on_budget":"stop","stall_after":"soon","on_stall":"x",
            "on_rate_limit":"wait","tasks":[{"id":"a","wave":1,"adapter":"claude","prompt":"x","budget_usd":"5"}]}"#,
        )
        .unwrap_err()
        .to_string();
        for want in [
            "budget_usd: a positive number of US dollars, got -1",
            "on_budget: expected \"pause\" or \"kill\", got \"stop\"",
            "stall_after: a duration from 1s to 24h",
            "on_stall: expected \"mark\" or \"kill\", got \"x\"",
            "on_rate_limit: expected \"pause\" or \"halt\", got \"wait\"",
            "tasks[0] (a): budget_usd: a positive number of US dollars, got \"5\"",
        ] {
            assert!(err.contains(want), "{want}: {err}");
        }
        let p = Plan::parse(
            br#"{"v":"plan/v1","slug":"s","budget_usd":2.5,"on_budget":"kill","stall_after":"90s","on_stall":"kill",
            "on_rate_limit":"halt","tasks":[{"id":"a","wave":1,"adapter":"claude","prompt":"x","budget_usd":1}]}"#,
        )
        .unwrap();
        assert_eq!(
            (p.budget_usd, p.on_budget, p.stall_after(), p.on_stall),
            (Some(2.5), Some(OnBudget::Kill), std::time::Duration::from_secs(90), Some(OnStall::Kill))
        );
        assert_eq!((p.on_rate_limit, p.tasks[0].budget_usd), (Some(OnRateLimit::Halt), Some(1.0)));
    }

    /// A plan that sets every field (two of them: a session plan has one task).
    const MAXIMAL: [&str; 2] = [
        r#"{"v":"plan/v1","slug":"max","base_branch":"main","max_parallel":1,"isolation":"shared",
        "setup":"cp .env.example .env","git_hooks":true,"live":false,"approvals":"ask",
        "allowed_tools":"Read Bash(npm test:*)","approval_timeout":"10m","approve":[" Bash(ls:*) ","Read"],
        "budget_usd":12.5,"on_budget":"kill","stall_after":90,"on_stall":"kill","on_rate_limit":"halt",
        "tasks":[
          {"id":"a","wave":1,"adapter":"claude","prompt":"x","gate":"make test","review":true,"model":"opus",
           "live":true,"approvals":"deny","allowed_tools":["Read","Edit"],"budget_usd":3},
          {"id":"b","wave":2,"adapter":"codex","prompt":"y","gate":null,"review":false,"model":null,"live":false},
          {"id":"c","wave":2,"adapter":"cursor","prompt":"z","review":true,"budget_usd":0.25}]}"#,
        r#"{"v":"plan/v1","slug":"sess","isolation":"worktree","approval_timeout":30,"stall_after":"1h",
        "on_budget":"pause","on_stall":"mark","on_rate_limit":"pause","approvals":"deny","allowed_tools":["Read"],
        "session":{"idle_s":600,"prompt":true},
        "tasks":[{"id":"s","wave":1,"adapter":"claude","prompt":"hi","approvals":"ask","allowed_tools":"Edit"}]}"#,
    ];

    /// Plans with many faults at once, at both levels.
    const FAULTY: [&str; 4] = [
        r#"{"v":"plan/v2","slug":"Bad Slug","extra":1,"more":[],"base_branch":"","max_parallel":0,"isolation":"x",
        "setup":5,"git_hooks":"y","live":1,"approvals":"maybe","allowed_tools":5,"approve":[1],
        "approval_timeout":"0s","budget_usd":0,"on_budget":"stop","stall_after":true,"on_stall":"x",
        "on_rate_limit":3,"session":"x","tasks":[
          7,
          {"id":"a b","wave":0,"adapter":5,"prompt":" ","gate":"","model":3,"review":"yes","live":"no",
           "approvals":1,"allowed_tools":[2],"budget_usd":-3,"colour":"red","size":1},
          {"wave":"1","adapter":"gpt"},
          {"id":"c","wave":1,"adapter":"codex","prompt":"p","review":true,"live":true,"approvals":"ask",
           "allowed_tools":"Read"},
          {"id":"d","wave":3,"adapter":"claude","prompt":"p","allowed_tools":"Bash(","budget_usd":"5"},
          {"id":"e","wave":3,"adapter":"claude","prompt":"p"},
          {"id":"e","wave":3,"adapter":"cursor","prompt":"p","approvals":"deny"},
          {"id":"e","wave":4,"adapter":"cursor","prompt":"p"}]}"#,
        r#"{"v":1,"slug":7,"isolation":"shared","approval_timeout":90000,"stall_after":"25h",
        "approve":"Read Bash()","session":{"idle_s":"60","prompt":true,"x":1,"y":2},"tasks":[
          {"id":"a","wave":1,"adapter":"claude","prompt":"x"},{"id":"b","wave":1,"adapter":"claude","prompt":"y"}]}"#,
        r#"{"v":"plan/v1","slug":"s","session":{"idle_s":60,"prompt":true},"tasks":[]}"#,
        r#"{"v":"plan/v1","slug":"s","max_parallel":2,"isolation":"shared","tasks":{"a":1}}"#,
    ];

    /// Every problem of `FAULTY`, in the order they are reported.
    const FAULTY_ERRORS: [&[&str]; 4] = [
        &[
            r#"unknown field "extra""#,
            r#"unknown field "more""#,
            r#"v: expected "plan/v1", got Some("plan/v2")"#,
            r#"slug: invalid slug "Bad Slug": expected [a-z0-9][a-z0-9._-]{0,47}"#,
            r#"base_branch: must be a non-empty string"#,
            r#"max_parallel: must be an integer 1..=256, got 0"#,
            r#"isolation: expected "worktree" or "shared", got "x""#,
            r#"setup: must be a non-empty string (a shell command)"#,
            r#"git_hooks: must be a boolean, got "y""#,
            r#"live: must be a boolean, got 1"#,
            r#"approvals: expected "ask" or "deny", got "maybe""#,
            r#"allowed_tools: a string of rules or a list of rules, got 5"#,
            r#"approve: each rule must be a string, got 1"#,
            r#"approval_timeout: a duration from 1s to 24h ("10m", or seconds), got "0s""#,
            r#"budget_usd: a positive number of US dollars, got 0"#,
            r#"on_budget: expected "pause" or "kill", got "stop""#,
            r#"stall_after: a duration from 1s to 24h ("10m", or seconds), got true"#,
            r#"on_stall: expected "mark" or "kill", got "x""#,
            r#"on_rate_limit: expected "pause" or "halt", got 3"#,
            r#"session: must be an object {idle_s, prompt}, got "x""#,
            r#"tasks[0]: must be an object"#,
            r#"tasks[1] (a b): unknown field "colour""#,
            r#"tasks[1] (a b): unknown field "size""#,
            r#"tasks[1] (a b): id: invalid task id "a b": expected [A-Za-z0-9][A-Za-z0-9._-]{0,63}"#,
            r#"tasks[1] (a b): wave: must be an integer >= 1, got 0"#,
            r#"tasks[1] (a b): adapter: missing (claude, cursor or codex)"#,
            r#"tasks[1] (a b): prompt: must be a non-empty string"#,
            r#"tasks[1] (a b): gate: must be a non-empty string"#,
            r#"tasks[1] (a b): model: must be a non-empty string"#,
            r#"tasks[1] (a b): review: must be a boolean"#,
            r#"tasks[1] (a b): live: must be a boolean, got "no""#,
            r#"tasks[1] (a b): approvals: expected "ask" or "deny", got 1"#,
            r#"tasks[1] (a b): allowed_tools: each rule must be a string, got 2"#,
            r#"tasks[1] (a b): budget_usd: a positive number of US dollars, got -3"#,
            r#"tasks[2]: id: missing (string)"#,
            r#"tasks[2]: wave: must be an integer >= 1, got "1""#,
            r#"tasks[2]: adapter: unknown adapter "gpt": expected claude, cursor or codex"#,
            r#"tasks[2]: prompt: must be a non-empty string"#,
            r#"tasks[3] (c): review: a codex task is itself a verdict seat and cannot be reviewed"#,
            r#"tasks[3] (c): live: the live channel is claude's (adapter codex has no input while a turn runs; steer resumes it)"#,
            r#"tasks[3] (c): approvals: claude's tool permissions do not apply to adapter codex"#,
            r#"tasks[3] (c): allowed_tools: claude's tool permissions do not apply to adapter codex"#,
            r#"tasks[4] (d): allowed_tools: rule "Bash(": a specifier must end with ')'"#,
            r#"tasks[4] (d): budget_usd: a positive number of US dollars, got "5""#,
            r#"tasks[6] (e): approvals: claude's tool permissions do not apply to adapter cursor"#,
            r#"tasks[7] (e): duplicate id"#,
            r#"wave 2 is empty (waves must be 1..=4 with no gap)"#,
        ],
        &[
            r#"v: expected "plan/v1", got None"#,
            r#"slug: missing (string)"#,
            r#"isolation: "shared" needs max_parallel: 1 (parallel tasks in one worktree mix each other's files), got max_parallel absent (default 4)"#,
            r#"approve: rule "Bash()": an empty specifier (write just the tool name)"#,
            r#"approval_timeout: a duration from 1s to 24h ("10m", or seconds), got 90000"#,
            r#"stall_after: a duration from 1s to 24h ("10m", or seconds), got "25h""#,
            r#"session: unknown field "x""#,
            r#"session: needs idle_s (1 s to 7 days) and prompt (boolean)"#,
        ],
        &[
            r#"tasks: empty (a plan needs at least one task)"#,
            r#"session: a session plan has exactly one task, a claude one"#,
        ],
        &[
            r#"isolation: "shared" needs max_parallel: 1 (parallel tasks in one worktree mix each other's files), got max_parallel 2"#,
            r#"tasks: missing (array)"#,
        ],
    ];

    #[test]
    fn every_fault_of_a_plan_is_reported_at_once() {
        for (src, want) in FAULTY.iter().zip(FAULTY_ERRORS) {
            match Plan::parse(src.as_bytes()) {
                Err(PlanError::Invalid(got)) => assert_eq!(got, want),
                other => panic!("{other:?}"),
            }
        }
    }

    /// `MAXIMAL` parsed, as the plan copy on disk and the API's `plan` view show it: durations in seconds,
    /// rules split and trimmed, absent and default fields left out.
    const MAXIMAL_PARSED: [&str; 2] = [
        r#"{"v":"plan/v1","slug":"max","base_branch":"main","max_parallel":1,"isolation":"shared","setup":"cp .env.example .env","git_hooks":true,"live":false,"approvals":"ask","allowed_tools":["Read","Bash(npm test:*)"],"approval_timeout":600,"approve":["Bash(ls:*)","Read"],"budget_usd":12.5,"on_budget":"kill","stall_after":90,"on_stall":"kill","on_rate_limit":"halt","tasks":[{"id":"a","wave":1,"adapter":"claude","prompt":"x","gate":"make test","review":true,"model":"opus","live":true,"approvals":"deny","allowed_tools":["Read","Edit"],"budget_usd":3.0},{"id":"b","wave":2,"adapter":"codex","prompt":"y","live":false},{"id":"c","wave":2,"adapter":"cursor","prompt":"z","review":true,"budget_usd":0.25}]}"#,
        r#"{"v":"plan/v1","slug":"sess","isolation":"worktree","approvals":"deny","allowed_tools":["Read"],"approval_timeout":30,"session":{"idle_s":600,"prompt":true},"on_budget":"pause","stall_after":3600,"on_stall":"mark","on_rate_limit":"pause","tasks":[{"id":"s","wave":1,"adapter":"claude","prompt":"hi","approvals":"ask","allowed_tools":["Edit"]}]}"#,
    ];

    #[test]
    fn a_plan_with_every_field_parses_as_it_always_did() {
        for (src, want) in MAXIMAL.iter().zip(MAXIMAL_PARSED) {
            let p = Plan::parse(src.as_bytes()).unwrap();
            assert_eq!(serde_json::to_string(&p).unwrap(), want);
        }
    }

    #[test]
    fn a_parsed_plan_written_out_parses_to_itself() {
        for src in MAXIMAL {
            let p = Plan::parse(src.as_bytes()).unwrap();
            assert_eq!(Plan::parse(&serde_json::to_vec(&p).unwrap()).unwrap(), p);
        }
    }

    #[test]
    fn duplicate_and_empty_wave() {
        let err = Plan::parse(
            br#"{"v":"plan/v1","slug":"d","tasks":[
            {"id":"a","wave":1,"adapter":"claude","prompt":"x"},
            {"id":"a","wave":3,"adapter":"claude","prompt":"y"}]}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("tasks[1] (a): duplicate id"), "{err}");
        assert!(err.contains("wave 2 is empty"), "{err}");
    }
}
