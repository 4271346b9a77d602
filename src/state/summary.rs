//! `runsummary/v1`: one run's Overview row, kept beside its pointer (`runs/<runId>.summary`) so a
//! fresh API answers `GET /runs` without replaying every journal.
//!
//! A cache, never the truth: each summary carries the fingerprints (length, mtime, inode) of the
//! pointer, journal and liveness sidecar it was computed from, taken *before* they were read. A reader
//! whose `stat`s disagree rebuilds the summary from the journal (and writes it back); a summary that
//! is missing, garbled, of another version or for another run is rebuilt the same way. The runner and
//! the supervisor write it at each state change; any writer may lose a race to another, and the loser's
//! older fingerprints only make the next reader rebuild. *Journal wins.*

use crate::ids::RunId;
use crate::os::home::Home;
use crate::state::journal::{self, RunStatus, RunView, TaskState};
use crate::state::liveness::{self, Liveness};
use crate::state::plan::Plan;
use crate::state::registry::{self, Pointer};
use crate::state::spend::LogTallies;
use crate::views;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

pub const VERSION: &str = "runsummary/v1";

/// What the row a summary holds was computed by: a summary of an older revision is stale (its row
/// lacks what the view has since gained: `counts.pending`, an `updated` refusals do not move).
pub const REV: u32 = 5;

/// What identifies a file's content for this cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fp {
    pub len: u64,
    pub mtime_ns: i64,
    pub ino: u64,
}

impl Fp {
    pub fn of(path: &Path) -> Option<Fp> {
        std::fs::metadata(path).ok().map(|m| Fp {
            len: m.len(),
            mtime_ns: m.mtime().saturating_mul(1_000_000_000).saturating_add(m.mtime_nsec()),
            ino: m.ino(),
        })
    }
}

/// The files a summary is computed from, as they were when it was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fps {
    pub pointer: Option<Fp>,
    pub journal: Option<Fp>,
    pub liveness: Option<Fp>,
}

impl Fps {
    /// The journal's and the liveness sidecar's fingerprints now, with the pointer's given.
    pub fn now(pointer_fp: Option<Fp>, p: &Pointer) -> Fps {
        Fps { pointer: pointer_fp, journal: Fp::of(&p.journal_path()), liveness: Fp::of(&p.liveness_path()) }
    }
}

/// What a summary says of its run besides the row: enough to validate, sort and filter.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Head {
    pub v: String,
    /// `REV` when written (absent: 0, an older harness's).
    #[serde(default)]
    pub rev: u32,
    pub fps: Fps,
    pub pointer: Pointer,
    /// The journal's last record time (else the pointer's `created`), in ns since the epoch: the
    /// Overview's sort key.
    pub activity_ns: i64,
    pub status: RunStatus,
    /// The supervisor the liveness sidecar names (whether it is alive is asked per request).
    pub supervisor_pid: Option<i32>,
}

/// One run's summary file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Summary {
    pub head: Head,
    /// The `GET /runs` row, without `live`.
    pub row: Box<RawValue>,
}

/// `runs/<runId>.summary`.
pub fn path(home: &Home, run: &RunId) -> PathBuf {
    home.runs_dir().join(format!("{run}.summary"))
}

/// `runs/<runId>.pruned`: what `harness prune` left of a run it removed.
pub fn tombstone_path(home: &Home, run: &RunId) -> PathBuf {
    home.runs_dir().join(format!("{run}.pruned"))
}

/// The summary of `run` on disk, when it is readable and of this version (else `None`: rebuild).
pub fn read(home: &Home, run: &RunId) -> Option<Summary> {
    let p = path(home, run);
    let bytes = std::fs::read(&p).ok()?;
    match serde_json::from_slice::<Summary>(&bytes) {
        Ok(s) if s.head.v == VERSION && &s.head.pointer.run_id == run => Some(s),
        Ok(_) => None,
        Err(e) => {
            tracing::debug!(path = %p.display(), error = %e, "summary garbled: rebuilt from the journal");
            None
        }
    }
}

/// Writes `s` atomically (readers see the old summary or the new one), without `fsync`: it is a
/// cache that readers validate.
pub fn write(home: &Home, s: &Summary) -> std::io::Result<()> {
    let mut bytes = serde_json::to_vec(s).expect("a summary serializes");
    bytes.push(b'\n');
    crate::os::home::replace_cache(&path(home, &s.head.pointer.run_id), &bytes, 0o600)
}

/// Everything known about one run from disk.
pub struct RunFiles {
    pub pointer: Pointer,
    pub view: RunView,
    pub plan: Option<Plan>,
    pub liveness: Option<Liveness>,
}

impl RunFiles {
    pub fn load(pointer: Pointer) -> Result<RunFiles, String> {
        let view = journal::replay(&pointer.journal_path()).map_err(|e| e.to_string())?;
        let plan = match Plan::load(&pointer.plan_path()) {
            Ok(p) => Some(p),
            Err(e) => {
                if pointer.plan_path().exists() {
                    tracing::warn!(RUN_ID = %pointer.run_id, error = %e, "plan copy unreadable");
                }
                None
            }
        };
        let liveness = match liveness::get(&pointer.liveness_path()) {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(RUN_ID = %pointer.run_id, error = %e, "liveness unreadable (ignored: it is a cache)");
                None
            }
        };
        Ok(RunFiles { pointer, view, plan, liveness })
    }

    /// Where git commands about the run are run: its worktree, else (removed) its repository.
    pub fn git_dir(&self) -> PathBuf {
        let p = &self.pointer;
        if p.worktree.is_dir() { p.worktree.clone() } else { p.repo_root.clone() }
    }

    /// The wave the run is on: the lowest wave holding a task that is not committed.
    pub fn current_wave(&self) -> Option<u32> {
        let plan = self.plan.as_ref()?;
        let waves = plan.waves();
        waves
            .iter()
            .find(|(_, ts)| ts.iter().any(|t| !self.view.state_of(&t.id).is_some_and(TaskState::is_terminal)))
            .or_else(|| waves.iter().next_back())
            .map(|(w, _)| *w)
    }

    /// True when the liveness sidecar names a supervisor whose pid is alive.
    pub fn supervisor_alive(&self) -> bool {
        self.liveness.as_ref().and_then(|l| l.supervisor_pid).is_some_and(liveness::pid_alive)
    }

    /// Each task's usage and the run's (their sum), from the plan's tasks' logs.
    pub fn usage(
        &self,
        tallies: &mut dyn FnMut(crate::engine::Adapter, &Path) -> crate::engine::usage::Usage,
    ) -> (crate::engine::usage::Usage, Vec<(crate::ids::TaskId, crate::engine::usage::Usage)>) {
        match &self.plan {
            Some(plan) => crate::state::spend::run_spend(plan, &self.view, &self.pointer, tallies),
            None => (crate::engine::usage::Usage::sum([]), Vec::new()),
        }
    }

    /// The run's Overview row (without `live`, which is asked per request).
    pub fn row(&self, usage: &crate::engine::usage::Usage) -> views::RunSummary {
        let (p, v, plan) = (&self.pointer, &self.view, self.plan.as_ref());
        views::RunSummary {
            run_id: p.run_id.clone(),
            slug: p.slug.clone(),
            repo_root: p.repo_root.clone(),
            project: p.project.clone(),
            repo: p.repo.clone(),
            branch: p.branch.clone(),
            worktree: p.worktree.clone(),
            plane: p.plane.into(),
            created: p.created.clone(),
            base_branch: plan.and_then(|pl| pl.base_branch.clone()),
            status: v.status.into(),
            paused: v.status == RunStatus::Paused,
            pause_reason: v.pause.as_ref().map(|(by, _)| crate::state::views::pause_reason(by)),
            pause_detail: v.pause.as_ref().and_then(|(_, d)| d.clone()),
            resume_at: v.resume_at.clone(),
            budget_usd: v.budget_usd.or(plan.and_then(|p| p.budget_usd)),
            attention_marks: v.attention.iter().filter(|a| a.attention == "stalled").count() as u64,
            stalled: !v.stalled_now.is_empty(),
            stalled_since: v.stalled_now.values().min().cloned(),
            started_at: v.started_at.clone(),
            finished_at: v.finished_at.clone(),
            pending_approvals: v.pending_approvals(None),
            wave: self.current_wave(),
            waves: plan.map(|pl| pl.waves().len() as u32),
            tasks: plan.map_or(v.tasks.len(), |pl| pl.tasks.len()) as u64,
            counts: crate::state::views::counts(v, plan),
            updated: v.last_ts.clone(),
            journal: views::JournalHealth {
                records: v.records,
                bad_lines: v.bad_lines.len() as u64,
                torn_tail: v.torn_tail.is_some(),
            },
            usage: usage.into(),
            base_slug: Some(p.plan_slug().clone()),
            blocked_by: self.blocked_by(),
            fails_at: v.fails_at.clone(),
        }
    }

    /// The halted tasks that block the run, while it is blocked (or paused after a block).
    fn blocked_by(&self) -> Vec<views::Blocker> {
        let v = &self.view;
        if v.status != RunStatus::Blocked && v.fails_at.is_none() {
            return Vec::new();
        }
        v.tasks
            .iter()
            .filter(|(_, t)| t.state == TaskState::Halted)
            .map(|(id, t)| views::Blocker {
                task: id.clone(),
                state: t.state.into(),
                detail: t.detail.clone(),
                since: t.ts.clone(),
            })
            .collect()
    }

    /// The last record's time, else the pointer's creation, in ns since the epoch (0 when neither
    /// parses).
    pub fn activity_ns(&self) -> i64 {
        activity_ns(self.view.last_ts.as_deref().unwrap_or(&self.pointer.created))
    }
}

/// An RFC 3339 time in ns since the epoch (0 when it does not parse: sorted last). ns fit an i64
/// until 2262.
pub fn activity_ns(ts: &str) -> i64 {
    humantime::parse_rfc3339_weak(ts)
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

/// Computes `pointer`'s summary from its files. `pointer_fp` is the pointer file's fingerprint taken
/// before it was read; the other files' are taken here before they are read, so a change made while
/// this runs leaves the summary visibly stale.
pub fn build(
    pointer: Pointer,
    pointer_fp: Option<Fp>,
    usage_of: &mut dyn FnMut(crate::engine::Adapter, &Path) -> crate::engine::usage::Usage,
) -> Result<Summary, String> {
    let fps = Fps::now(pointer_fp, &pointer);
    let files = RunFiles::load(pointer)?;
    let (usage, _) = files.usage(usage_of);
    let row = serde_json::to_string(&files.row(&usage)).expect("a view serializes");
    Ok(Summary {
        head: Head {
            v: VERSION.into(),
            rev: REV,
            fps,
            activity_ns: files.activity_ns(),
            status: files.view.status,
            supervisor_pid: files.liveness.as_ref().and_then(|l| l.supervisor_pid),
            pointer: files.pointer,
        },
        row: RawValue::from_string(row).expect("serialized JSON is JSON"),
    })
}

/// Recomputes and writes `pointer`'s summary (the runner's and the supervisor's write, and the CLI's
/// after it journals). Best effort: a failure is logged, and readers rebuild.
pub fn refresh(home: &Home, pointer: &Pointer, tallies: &mut LogTallies) {
    let ppath = home.runs_dir().join(format!("{}.json", pointer.run_id));
    let pointer_fp = Fp::of(&ppath);
    let result = build(pointer.clone(), pointer_fp, &mut |a, log| tallies.usage(a, log))
        .and_then(|s| write(home, &s).map_err(|e| e.to_string()));
    if let Err(e) = result {
        tracing::warn!(RUN_ID = %pointer.run_id, error = %e, "run summary not written (readers rebuild it)");
    }
}

/// Whether a summary still describes its run: the pointer it embeds is the one registered and no file
/// it was computed from changed since.
pub fn is_fresh(h: &Head, pointer_fp: Option<Fp>) -> bool {
    h.rev == REV && h.fps == Fps::now(pointer_fp, &h.pointer)
}

/// Reads a registry pointer file (`None` when it is gone or garbled: logged).
pub fn read_pointer(path: &Path) -> Option<Pointer> {
    let parsed = std::fs::read(path)
        .map_err(|e| e.to_string())
        .and_then(|b| registry::parse(path, &b).map_err(|e| e.to_string()));
    match parsed {
        Ok(p) => Some(p),
        Err(reason) => {
            if path.exists() {
                registry::log_skipped(&[registry::Skipped::Garbled { path: path.into(), reason }]);
            }
            None
        }
    }
}

/// An age such as `90s`, `15m`, `2h`, `7d` or `2w` (a whole number and one unit; one too large for
/// the clock is as old as the clock). Not `humantime::parse_duration`: that also takes a bare `0` and
/// `1h 30m`, which the API's `since` (its OpenAPI pattern) refuses.
pub fn parse_age(s: &str) -> Option<std::time::Duration> {
    let unit = s.chars().last()?;
    let digits = &s[..s.len() - unit.len_utf8()];
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let secs: u64 = match unit {
        's' => 1,
        'm' => 60,
        'h' => 3600,
        'd' => 86_400,
        'w' => 7 * 86_400,
        _ => return None,
    };
    let n = digits.parse::<u64>().unwrap_or(u64::MAX);
    Some(std::time::Duration::from_secs(n.saturating_mul(secs)))
}

/// An RFC 3339 time (`2026-12-01T10:00:00Z`, `…T10:00:00.5+01:00`; `T`/`Z` in either case) in ns
/// since the epoch. A day past its month's end counts on into the next month.
pub fn parse_time(s: &str) -> Option<i128> {
    let b = s.as_bytes();
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let d = b.get(r)?;
        d.iter().all(|c| c.is_ascii_digit()).then(|| std::str::from_utf8(d).ok()?.parse().ok())?
    };
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't') || b[13] != b':' || b[16] != b':' {
        return None;
    }
    let (y, mo, d, h, mi, sec) = (num(0..4)?, num(5..7)?, num(8..10)?, num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 59 {
        return None;
    }
    let mut i = 19;
    let mut frac_ns: i128 = 0;
    if b[i] == b'.' {
        let start = i + 1;
        i = start;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        if i == start {
            return None;
        }
        let digits = &s[start..i.min(start + 9)];
        frac_ns = digits.parse::<i128>().ok()? * 10i128.pow(9 - digits.len() as u32);
    }
    let offset_s: i64 = match &b[i..] {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), _, _, b':', _, _] => {
            let (oh, om) = (num(i + 1..i + 3)?, num(i + 4..i + 6)?);
            if oh > 23 || om > 59 {
                return None;
            }
            (oh * 3600 + om * 60) * if *sign == b'+' { 1 } else { -1 }
        }
        _ => return None,
    };
    // Days from the civil date (Howard Hinnant's algorithm).
    let (y, m) = if mo <= 2 { (y - 1, mo + 9) } else { (y, mo - 3) };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * m + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + h * 3600 + mi * 60 + sec - offset_s;
    Some(secs as i128 * 1_000_000_000 + frac_ns)
}
