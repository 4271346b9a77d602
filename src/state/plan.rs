//! `plan/v1`: the tasks of a run grouped into waves. Parsing (serde reads the plan into raw structs
//! that keep every value, a bad or an unknown one too) and one validation pass over them (every
//! problem reported, each naming the task and the field), and the wave view the scheduler and the
//! durable API draw from. This module runs nothing.

use crate::engine::Adapter;
use crate::ids::{Slug, TaskId};
use serde::de::{DeserializeOwned, Deserializer};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::Path;

pub const VERSION: &str = "plan/v1";

/// The longest task `title` (a commit subject's usual bound).
pub const TITLE_MAX: usize = 72;

/// A `title` as written: trimmed, one line, 1 to `TITLE_MAX` characters.
fn title_of(s: &str) -> Option<String> {
    let t = s.trim();
    (!t.is_empty() && !t.contains(['\n', '\r']) && t.chars().count() <= TITLE_MAX).then(|| t.to_string())
}

/// The largest plan read.
pub const MAX_PLAN_BYTES: usize = 16 << 20;
/// The most tasks a plan may hold.
pub const MAX_TASKS: usize = 10_000;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Task {
    pub id: TaskId,
    /// 1-based wave; every wave from 1 to the last holds at least one task.
    pub wave: u32,
    pub adapter: Adapter,
    pub prompt: String,
    /// The subject of the task's commit (`<task>: <title>`): one line of at most 72 characters.
    /// Absent: the prompt's first line, cut at a word (engine directives left out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
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

impl Task {
    /// The subject of the task's commit: `<task>: <title>`, the title being the plan's `title`,
    /// else the prompt's first line without engine directives (`[fake-claude:tool]`-shaped
    /// `[name:value]` tokens), cut at a word boundary to `TITLE_MAX` characters (`…` marks a cut).
    pub fn subject(&self) -> String {
        let title = match &self.title {
            Some(t) => t.clone(),
            None => prompt_title(&self.prompt),
        };
        format!("{}: {title}", self.id)
    }
}

/// A prompt's first line as a commit title (see `Task::subject`).
fn prompt_title(prompt: &str) -> String {
    let line = prompt.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or("");
    let words: Vec<&str> = line.split_whitespace().filter(|w| !is_directive(w)).collect();
    let whole = words.join(" ");
    if whole.chars().count() <= TITLE_MAX {
        return if whole.is_empty() { "(no prompt text)".into() } else { whole };
    }
    let mut title = String::new();
    for (i, w) in words.iter().enumerate() {
        let room = TITLE_MAX - 1 - title.chars().count();
        let need = w.chars().count() + usize::from(!title.is_empty());
        if need > room {
            // A first word longer than the bound is cut inside it: a title is never empty.
            if i == 0 {
                title = w.chars().take(TITLE_MAX - 1).collect();
            }
            title.push('…');
            return title;
        }
        if !title.is_empty() {
            title.push(' ');
        }
        title.push_str(w);
    }
    title
}

/// `[name:value]` with a lowercase, dash-separated name: a directive to an engine, not words.
fn is_directive(w: &str) -> bool {
    let Some(inner) = w.strip_prefix('[').and_then(|w| w.strip_suffix(']')) else { return false };
    inner.split_once(':').is_some_and(|(name, _)| {
        !name.is_empty() && name.bytes().all(|b| b.is_ascii_lowercase() || b == b'-' || b.is_ascii_digit())
    })
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

/// What a crossed budget does to the turns still running.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnBudget {
    /// They finish; nothing more is dispatched.
    Pause,
    /// They are killed (journaled as by `budget`).
    Kill,
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

/// The default wait for an operator's decision on an asked tool call.
pub const APPROVAL_TIMEOUT_DEFAULT: u64 = 600;

impl Plan {
    pub fn load(path: &Path) -> Result<Plan, PlanError> {
        let read = |source| PlanError::Read { path: path.display().to_string(), source };
        // Read at most one byte past the limit: a huge file is refused without being read whole.
        let f = std::fs::File::open(path).map_err(read)?;
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut std::io::Read::take(f, MAX_PLAN_BYTES as u64 + 1), &mut bytes).map_err(read)?;
        Plan::parse(&bytes)
    }

    /// Parses and validates; on failure lists every problem found.
    pub fn parse(bytes: &[u8]) -> Result<Plan, PlanError> {
        if bytes.len() > MAX_PLAN_BYTES {
            return Err(PlanError::Invalid(vec![format!("the plan is larger than {} MiB", MAX_PLAN_BYTES >> 20)]));
        }
        let plan: Field<RawPlan> =
            serde_json::from_slice(bytes).map_err(|e| PlanError::Invalid(vec![format!("not JSON: {e}")]))?;
        match &plan.typed {
            Some(raw) => validate(raw),
            None => Err(PlanError::Invalid(vec!["top level must be an object".into()])),
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

    /// Where tasks work (default: each in its own worktree).
    pub fn isolation(&self) -> Isolation {
        self.isolation.unwrap_or_default()
    }

    /// How many tasks of one wave may run at once (default 4).
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

/// A field and its name, spelled once (by the raw struct): `field!(raw.live)` is `("live", &raw.live)`.
macro_rules! field {
    ($raw:ident . $name:ident) => {
        (stringify!($name), &$raw.$name)
    };
}

/// A field as the plan wrote it: its JSON value, and that value read as `T` when it is one. Reading
/// never fails, so the validation pass sees every field and can quote a bad one. Absent and `null`
/// are alike (`raw` is `null`, `typed` is `None`).
#[derive(Debug)]
struct Field<T> {
    raw: Value,
    typed: Option<T>,
}

impl<T> Default for Field<T> {
    fn default() -> Self {
        Field { raw: Value::Null, typed: None }
    }
}

impl<'de, T: DeserializeOwned> Deserialize<'de> for Field<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = Value::deserialize(d)?;
        let typed = if raw.is_null() { None } else { T::deserialize(&raw).ok() };
        Ok(Field { raw, typed })
    }
}

impl<T> Field<T> {
    fn is_set(&self) -> bool {
        !self.raw.is_null()
    }
}

/// A plan as written. Its fields are the plan's known fields (serde matches them; no list repeats
/// them); any other field lands in `extra` and is reported as unknown.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct RawPlan {
    v: Field<String>,
    slug: Field<String>,
    base_branch: Field<String>,
    max_parallel: Field<u64>,
    isolation: Field<Isolation>,
    setup: Field<String>,
    git_hooks: Field<bool>,
    live: Field<bool>,
    approvals: Field<Approvals>,
    allowed_tools: Field<Rules>,
    approval_timeout: Field<Secs>,
    approve: Field<Rules>,
    session: Field<RawSession>,
    budget_usd: Field<f64>,
    on_budget: Field<OnBudget>,
    stall_after: Field<Secs>,
    on_stall: Field<OnStall>,
    on_rate_limit: Field<OnRateLimit>,
    tasks: Field<Vec<Field<RawTask>>>,
    #[serde(flatten)]
    extra: BTreeMap<String, Value>,
}

/// A task as written (as `RawPlan`: known fields, then `extra`).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct RawTask {
    id: Field<String>,
    wave: Field<u64>,
    adapter: Field<String>,
    prompt: Field<String>,
    title: Field<String>,
    gate: Field<String>,
    review: Field<bool>,
    model: Field<String>,
    live: Field<bool>,
    approvals: Field<Approvals>,
    allowed_tools: Field<Rules>,
    budget_usd: Field<f64>,
    #[serde(flatten)]
    extra: BTreeMap<String, Value>,
}

/// A session's settings as written.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct RawSession {
    idle_s: Field<u64>,
    prompt: Field<bool>,
    #[serde(flatten)]
    extra: BTreeMap<String, Value>,
}

impl RawSession {
    /// The settings, when both are there and `idle_s` is 1 s to 7 days.
    fn settings(&self) -> Option<Session> {
        let idle_s = self.idle_s.typed.filter(|n| (1..=7 * 86_400).contains(n))?;
        Some(Session { idle_s, prompt: self.prompt.typed? })
    }
}

/// Rules in claude's syntax as written: one string (`"Read Bash(npm test:*)"`) or a list.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Rules {
    One(String),
    Many(Vec<String>),
}

/// A duration as written: seconds, or text such as `"10m"`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Secs {
    Number(u64),
    Text(String),
}

/// The message of a text field that holds nothing.
const NON_EMPTY: &str = "must be a non-empty string";

/// The one validation pass: a raw plan to a `Plan`, or every problem found. A field is checked
/// where its value is made, so problems are reported in the order of the fields below.
fn validate(raw: &RawPlan) -> Result<Plan, PlanError> {
    let mut c = Check::default();
    c.unknown(&raw.extra);
    c.version(field!(raw.v));
    let slug = c.parsed(field!(raw.slug), Slug::parse, "missing (string)");
    let plan = Plan {
        v: VERSION.into(),
        base_branch: c.text(field!(raw.base_branch), NON_EMPTY),
        max_parallel: c.value(field!(raw.max_parallel), max_parallel_of, "must be an integer 1..=256"),
        isolation: c.isolation(field!(raw.isolation), raw.max_parallel.typed.as_ref().and_then(max_parallel_of)),
        setup: c.text(field!(raw.setup), "must be a non-empty string (a shell command)"),
        git_hooks: c.flag(field!(raw.git_hooks)),
        live: c.flag(field!(raw.live)),
        approvals: c.choice(field!(raw.approvals)),
        allowed_tools: c.rules(field!(raw.allowed_tools)),
        approve: c.rules(field!(raw.approve)),
        approval_timeout: c.duration(field!(raw.approval_timeout)),
        budget_usd: c.budget(field!(raw.budget_usd)),
        on_budget: c.choice(field!(raw.on_budget)),
        stall_after: c.duration(field!(raw.stall_after)),
        on_stall: c.choice(field!(raw.on_stall)),
        on_rate_limit: c.choice(field!(raw.on_rate_limit)),
        session: c.session(field!(raw.session)),
        tasks: c.tasks(field!(raw.tasks), raw.session.typed.as_ref().and_then(RawSession::settings).is_some()),
        // Last: a bad slug ends the pass only once every other field is checked.
        slug: match slug {
            Some(slug) => slug,
            None => return Err(PlanError::Invalid(c.errs)),
        },
    };
    if c.errs.is_empty() { Ok(plan) } else { Err(PlanError::Invalid(c.errs)) }
}

/// `max_parallel`'s range.
fn max_parallel_of(n: &u64) -> Option<u32> {
    u32::try_from(*n).ok().filter(|n| (1..=256).contains(n))
}

/// A task's `wave`'s range.
fn wave_of(w: &u64) -> Option<u32> {
    u32::try_from(*w).ok().filter(|w| (1..=10_000).contains(w))
}

fn non_empty(s: &str) -> Option<String> {
    (!s.trim().is_empty()).then(|| s.to_string())
}

/// A field with its name (`field!`).
type Named<'a, T> = (&'a str, &'a Field<T>);

/// What the validation pass found, each problem named by where it is: `at` prefixes the names of
/// the part being checked ("" at the top, "tasks[2] (b): " in a task).
#[derive(Default)]
struct Check {
    at: String,
    errs: Vec<String>,
}

impl Check {
    fn bad(&mut self, name: &str, why: impl std::fmt::Display) {
        self.errs.push(format!("{}{name}: {why}", self.at));
    }

    /// Every field of the part that its raw struct does not know.
    fn unknown(&mut self, extra: &BTreeMap<String, Value>) {
        for k in extra.keys() {
            self.errs.push(format!("{}unknown field {k:?}", self.at));
        }
    }

    /// Checks one part with its problems named under `at`; what `check` made of it, only when it
    /// found no problem.
    fn within<R>(&mut self, at: String, check: impl FnOnce(&mut Self) -> Option<R>) -> Option<R> {
        let inner = format!("{}{at}", self.at);
        let outer = std::mem::replace(&mut self.at, inner);
        let before = self.errs.len();
        let got = check(self);
        self.at = outer;
        got.filter(|_| self.errs.len() == before)
    }

    /// A required field: its value as `keep` takes it, else `why` (told the value) is reported.
    fn must<T, U>(
        &mut self,
        (name, f): Named<T>,
        keep: impl FnOnce(&T) -> Option<U>,
        why: impl FnOnce(&Value) -> String,
    ) -> Option<U> {
        let got = f.typed.as_ref().and_then(keep);
        if got.is_none() {
            self.bad(name, why(&f.raw));
        }
        got
    }

    /// An optional field: absent, `None`; present, as `must`.
    fn check<T, U>(
        &mut self,
        field: Named<T>,
        keep: impl FnOnce(&T) -> Option<U>,
        why: impl FnOnce(&Value) -> String,
    ) -> Option<U> {
        if !field.1.is_set() {
            return None;
        }
        self.must(field, keep, why)
    }

    /// An optional field whose bad value is quoted: `{name}: {why}, got {value}`.
    fn value<T, U>(&mut self, field: Named<T>, keep: impl FnOnce(&T) -> Option<U>, why: &str) -> Option<U> {
        self.check(field, keep, |v| format!("{why}, got {v}"))
    }

    /// An optional string that must hold something.
    fn text(&mut self, field: Named<String>, why: &str) -> Option<String> {
        self.check(field, |s| non_empty(s), |_| why.into())
    }

    fn flag(&mut self, field: Named<bool>) -> Option<bool> {
        self.value(field, |b| Some(*b), "must be a boolean")
    }

    /// A required string read by `parse` (its error is the message); absent or not a string, `missing`.
    fn parsed<U, E: std::fmt::Display>(
        &mut self,
        (name, f): Named<String>,
        parse: impl FnOnce(&str) -> Result<U, E>,
        missing: &str,
    ) -> Option<U> {
        match &f.typed {
            Some(s) => parse(s).map_err(|e| self.bad(name, e)).ok(),
            None => {
                self.bad(name, missing);
                None
            }
        }
    }

    fn version(&mut self, (name, f): Named<String>) {
        let v = f.typed.as_deref();
        if v != Some(VERSION) {
            self.bad(name, format!("expected \"{VERSION}\", got {v:?}"));
        }
    }

    /// One of the words of an enum (serde's names of its variants, which the message lists).
    fn choice<T: Copy + DeserializeOwned>(&mut self, field: Named<T>) -> Option<T> {
        let words: Vec<String> = variants::<T>().iter().map(|w| format!("\"{w}\"")).collect();
        let is_word = field.1.raw.is_string();
        self.value(field, |t| is_word.then_some(*t), &format!("expected {}", words.join(" or ")))
    }

    /// A budget in US dollars: a positive, finite number.
    fn budget(&mut self, field: Named<f64>) -> Option<f64> {
        self.value(field, |usd| Some(*usd).filter(|f| f.is_finite() && *f > 0.0), "a positive number of US dollars")
    }

    /// A duration from 1 s to 24 h, as seconds or text such as `"10m"`; in seconds.
    fn duration(&mut self, field: Named<Secs>) -> Option<u64> {
        let got = match &field.1.typed {
            Some(Secs::Text(s)) => format!("{s:?}"),
            _ => field.1.raw.to_string(),
        };
        let secs = |d: &Secs| match d {
            Secs::Number(n) => Some(*n),
            Secs::Text(s) => humantime::parse_duration(s).ok().map(|d| d.as_secs()),
        };
        let why = |_: &Value| format!("a duration from 1s to 24h (\"10m\", or seconds), got {got}");
        self.check(field, |d| secs(d).filter(|n| (1..=86_400).contains(n)), why)
    }

    /// Rules in claude's syntax: one string (split where claude splits it) or a list, each a rule.
    fn rules(&mut self, (name, f): Named<Rules>) -> Option<Vec<String>> {
        let rules = match &f.typed {
            _ if !f.is_set() => return None,
            Some(Rules::One(s)) => crate::rules::split(s),
            Some(Rules::Many(rules)) => rules.iter().map(|r| r.trim().to_string()).collect(),
            None => {
                let why = match f.raw.as_array().and_then(|a| a.iter().find(|r| !r.is_string())) {
                    Some(r) => format!("each rule must be a string, got {r}"),
                    None => format!("a string of rules or a list of rules, got {}", f.raw),
                };
                self.bad(name, why);
                return None;
            }
        };
        match rules.iter().find_map(|r| crate::rules::Rule::parse(r).err()) {
            Some(e) => {
                self.bad(name, e);
                None
            }
            None => Some(rules),
        }
    }

    /// `isolation`: `shared` needs `max_parallel: 1`.
    fn isolation(&mut self, field: Named<Isolation>, max_parallel: Option<u32>) -> Option<Isolation> {
        let isolation = self.choice(field);
        if isolation == Some(Isolation::Shared) && max_parallel != Some(1) {
            self.bad(
                field.0,
                format!(
                    "\"shared\" needs max_parallel: 1 (parallel tasks in one worktree mix each other's files), got max_parallel {}",
                    max_parallel.map_or("absent (default 4)".to_string(), |n| n.to_string())
                ),
            );
        }
        isolation
    }

    /// `session`: `{idle_s, prompt}`.
    fn session(&mut self, (name, f): Named<RawSession>) -> Option<Session> {
        if !f.is_set() {
            return None;
        }
        let Some(s) = &f.typed else {
            self.bad(name, format!("must be an object {{idle_s, prompt}}, got {}", f.raw));
            return None;
        };
        for k in s.extra.keys() {
            self.bad(name, format!("unknown field {k:?}"));
        }
        let settings = s.settings();
        if settings.is_none() {
            self.bad(name, "needs idle_s (1 s to 7 days) and prompt (boolean)");
        }
        settings
    }

    /// `tasks`: each checked, ids unique, waves 1..=max with no gap; a session plan's (`session`)
    /// tasks are one claude task.
    fn tasks(&mut self, (name, f): Named<Vec<Field<RawTask>>>, session: bool) -> Vec<Task> {
        let mut tasks = Vec::new();
        match &f.typed {
            None => self.bad(name, "missing (array)"),
            Some(all) if all.is_empty() => self.bad(name, "empty (a plan needs at least one task)"),
            Some(all) if all.len() > MAX_TASKS => {
                self.bad(name, format!("{} tasks: a plan holds at most {MAX_TASKS}", all.len()))
            }
            Some(all) => {
                // Waves of every task with a usable wave, valid or not, so a gap is reported
                // alongside the tasks' own problems.
                let mut waves = BTreeSet::new();
                let mut ids = HashSet::new();
                for (i, t) in all.iter().enumerate() {
                    let Some(t) = &t.typed else {
                        self.bad(&format!("{name}[{i}]"), "must be an object");
                        continue;
                    };
                    waves.extend(t.wave.typed.as_ref().and_then(wave_of));
                    let Some(task) = self.task(&format!("{name}[{i}]"), t) else { continue };
                    if !ids.insert(task.id.clone()) {
                        self.bad(&format!("{name}[{i}] ({})", task.id), "duplicate id");
                    }
                    tasks.push(task);
                }
                let max = waves.last().copied().unwrap_or(0);
                for w in (1..=max).filter(|w| !waves.contains(w)) {
                    self.errs.push(format!("{}wave {w} is empty (waves must be 1..={max} with no gap)", self.at));
                }
            }
        }
        if session && (tasks.len() != 1 || tasks.iter().any(|t| !t.adapter.has_live_channel())) {
            self.bad("session", "a session plan has exactly one task, a claude one");
        }
        tasks
    }

    /// One task, its problems named `{at} ({id})`: the task, when it has none.
    fn task(&mut self, at: &str, t: &RawTask) -> Option<Task> {
        let at = match &t.id.typed {
            Some(id) => format!("{at} ({id}): "),
            None => format!("{at}: "),
        };
        self.within(at, |c| {
            c.unknown(&t.extra);
            let id = c.parsed(field!(t.id), TaskId::parse, "missing (string)");
            let wave = c.must(field!(t.wave), wave_of, |v| format!("must be an integer >= 1, got {v}"));
            let adapter = c.parsed(field!(t.adapter), str::parse::<Adapter>, "missing (claude, cursor or codex)");
            let prompt = c.must(field!(t.prompt), |s| non_empty(s), |_| NON_EMPTY.into());
            Some(Task {
                title: c.check(
                    field!(t.title),
                    |s| title_of(s),
                    |v| format!("one line of 1 to {TITLE_MAX} characters, got {v}"),
                ),
                gate: c.text(field!(t.gate), NON_EMPTY),
                model: c.text(field!(t.model), NON_EMPTY),
                review: c.review(field!(t.review), adapter),
                live: c.live(field!(t.live), adapter),
                approvals: c.claude_only(adapter, field!(t.approvals), Check::choice),
                allowed_tools: c.claude_only(adapter, field!(t.allowed_tools), Check::rules),
                budget_usd: c.budget(field!(t.budget_usd)),
                // Last, so every field above is checked when one of these is missing.
                id: id?,
                wave: wave?,
                adapter: adapter?,
                prompt: prompt?,
            })
        })
    }

    /// `review` (default false): a verdict seat cannot itself be reviewed.
    fn review(&mut self, field: Named<bool>, adapter: Option<Adapter>) -> bool {
        let review = self.check(field, |b| Some(*b), |_| "must be a boolean".into()).unwrap_or(false);
        if review && adapter.is_some_and(Adapter::is_verdict_seat) {
            self.bad(field.0, "a codex task is itself a verdict seat and cannot be reviewed");
        }
        review
    }

    /// A task's `live`: only an adapter with a live channel has one.
    fn live(&mut self, field: Named<bool>, adapter: Option<Adapter>) -> Option<bool> {
        let live = self.flag(field);
        if live == Some(true)
            && let Some(a) = adapter.filter(|a| !a.has_live_channel())
        {
            self.bad(
                field.0,
                format!("the live channel is claude's (adapter {a} has no input while a turn runs; steer resumes it)"),
            );
        }
        live
    }

    /// A field of claude's tool permissions, read by `read`: set on an adapter that asks none, a problem.
    fn claude_only<'a, T, U>(
        &mut self,
        adapter: Option<Adapter>,
        field: Named<'a, T>,
        read: impl FnOnce(&mut Self, Named<'a, T>) -> Option<U>,
    ) -> Option<U> {
        let got = read(self, field);
        if got.is_some()
            && let Some(a) = adapter.filter(|a| !a.asks_permissions())
        {
            self.bad(field.0, format!("claude's tool permissions do not apply to adapter {a}"));
        }
        got
    }
}

/// The words serde reads a unit-variant enum from, asked of its derived `Deserialize` (which hands
/// them to `deserialize_enum`), so a message listing them follows the enum.
fn variants<T: DeserializeOwned>() -> &'static [&'static str] {
    struct Spy<'a>(&'a mut &'static [&'static str]);
    impl<'de> Deserializer<'de> for Spy<'_> {
        type Error = serde::de::value::Error;
        fn deserialize_any<V: serde::de::Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
            Err(serde::de::Error::custom("not an enum"))
        }
        fn deserialize_enum<V: serde::de::Visitor<'de>>(
            self,
            _: &'static str,
            variants: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Self::Error> {
            *self.0 = variants;
            Err(serde::de::Error::custom("only the variants were asked for"))
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option unit
            unit_struct newtype_struct seq tuple tuple_struct map struct identifier ignored_any
        }
    }
    let mut words: &'static [&'static str] = &[];
    let _ = T::deserialize(Spy(&mut words));
    words
}

#[cfg(test)]
mod tests {

    #[test]
    fn plans_past_the_limits_are_refused_naming_them() {
        let big = vec![b' '; MAX_PLAN_BYTES + 1];
        let e = Plan::parse(&big).unwrap_err().to_string();
        assert!(e.contains("larger than 16 MiB"), "{e}");
        let tasks: Vec<String> =
            (0..=MAX_TASKS).map(|i| format!(r#"{{"id":"t{i}","wave":1,"adapter":"claude","prompt":"p"}}"#)).collect();
        let plan = format!(r#"{{"v":"plan/v1","slug":"big","tasks":[{}]}}"#, tasks.join(","));
        let e = Plan::parse(plan.as_bytes()).unwrap_err().to_string();
        assert!(e.contains("10001 tasks: a plan holds at most 10000"), "{e}");
    }
    use super::*;

    #[test]
    fn a_commit_subject_is_the_title_else_the_prompt_cut_at_a_word() {
        let task = |prompt: &str, title: Option<&str>| Task {
            id: TaskId::parse("t1").unwrap(),
            wave: 1,
            adapter: Adapter::Claude,
            prompt: prompt.into(),
            title: title.map(String::from),
            gate: None,
            review: false,
            model: None,
            live: None,
            approvals: None,
            allowed_tools: None,
            budget_usd: None,
        };
        assert_eq!(task("Add tests for greet(). [fake-claude:slow]", None).subject(), "t1: Add tests for greet().");
        assert_eq!(task("x", Some("polish the docs")).subject(), "t1: polish the docs");
        assert_eq!(task("\n\n  First line\nsecond", None).subject(), "t1: First line");
        let long = "Refactor the configuration loader so that every option is documented and validated properly today";
        let s = task(long, None).subject();
        let title = s.strip_prefix("t1: ").unwrap();
        assert!(title.chars().count() <= TITLE_MAX && title.ends_with('…'), "{title}");
        assert!(long.starts_with(title.trim_end_matches('…')), "cut at a word: {title}");
        assert!(long[title.len() - '…'.len_utf8()..].starts_with(' '), "cut at a word boundary: {title}");
        let exact = "a".repeat(TITLE_MAX);
        assert_eq!(task(&exact, None).subject(), format!("t1: {exact}"));
        assert!(task(&"b".repeat(100), None).subject().ends_with('…'));
        assert_eq!(task("[fake-codex:approve]", None).subject(), "t1: (no prompt text)");
    }

    #[test]
    fn a_title_is_one_short_line() {
        let plan = |title: &str| {
            let t = serde_json::json!({"v":"plan/v1","slug":"s","tasks":[{"id":"a","wave":1,"adapter":"claude","prompt":"p","title":title}]});
            Plan::parse(t.to_string().as_bytes())
        };
        assert_eq!(plan("  add greet  ").unwrap().tasks[0].title.as_deref(), Some("add greet"));
        for bad in ["", "two\nlines", &"x".repeat(73)] {
            let e = plan(bad).unwrap_err().to_string();
            assert!(e.contains("tasks[0] (a): title: one line of 1 to 72 characters"), "{e}");
        }
    }

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
            r#"session: unknown field "y""#,
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
    fn a_choice_is_one_of_its_enums_words_as_a_string() {
        assert_eq!(variants::<OnBudget>(), ["pause", "kill"]);
        assert_eq!(variants::<Isolation>(), ["worktree", "shared"]);
        // serde would read `{"kill": null}` as the unit variant; a plan writes the word.
        let err = Plan::parse(
            br#"{"v":"plan/v1","slug":"s","on_budget":{"kill":null},"tasks":[
            {"id":"a","wave":1,"adapter":"claude","prompt":"x","approvals":["ask"]}]}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains(r#"on_budget: expected "pause" or "kill", got {"kill":null}"#), "{err}");
        assert!(err.contains(r#"tasks[0] (a): approvals: expected "ask" or "deny", got ["ask"]"#), "{err}");
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
