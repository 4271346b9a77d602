//! The global run registry (`registry/v1`): one pointer file per run at
//! `$HARNESS_HOME/runs/<runId>.json`, so one daemon can list runs across projects, repos and worktrees.
//!
//! Only discovery is global: a pointer says where the run's per-repo `runstateDir` is; it never holds
//! run state, and this module never reads journals.

use crate::ids::{RunId, Slug};
use crate::os::home::{self, Home};
use serde::{Deserialize, Serialize};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

pub const VERSION: &str = "registry/v1";

/// Which control plane executes the run. Both journal identically; only `standalone` has a socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Plane {
    Standalone,
    Dynwf,
}

/// A registry pointer. Field names are the wire names of `spec/registry.schema.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Pointer {
    /// Always `registry/v1`.
    pub v: String,
    /// Globally unique key, also the pointer's file name and the API path key.
    pub run_id: RunId,
    /// Human label; collides across repos, which is why `run_id` exists.
    pub slug: Slug,
    /// Canonical absolute path of the repository.
    pub repo_root: PathBuf,
    /// Grouping label for the Overview (defaults to the repo's directory name).
    pub project: String,
    /// The repository's directory name.
    pub repo: String,
    /// Branch checked out in the worktree at run start, when there is one.
    pub branch: Option<String>,
    /// Canonical absolute worktree path (equals `repo_root` without a separate worktree).
    pub worktree: PathBuf,
    /// Where the run's journal, plan copy, liveness and logs live (per repo, next to git).
    pub runstate_dir: PathBuf,
    /// Which plane runs it.
    pub plane: Plane,
    /// RFC 3339 creation time.
    pub created: String,
    /// The plan's slug when the run took another (`<slug>-2`, `--slug`): a re-run of that plan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_slug: Option<Slug>,
}

impl Pointer {
    /// The slug of the plan this run is a run of: its `base_slug`, else its own.
    pub fn plan_slug(&self) -> &Slug {
        self.base_slug.as_ref().unwrap_or(&self.slug)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error(transparent)]
    Home(#[from] home::HomeError),
    #[error("cannot write pointer {path}: {source}")]
    Write { path: PathBuf, source: io::Error },
    #[error("cannot read registry {path}: {source}")]
    Read { path: PathBuf, source: io::Error },
    #[error("pointer {path} is not valid registry/v1: {reason}")]
    Garbled { path: PathBuf, reason: String },
    #[error("run {0} is not in the registry")]
    Unknown(RunId),
}

/// What happened to a pointer file that `enumerate` did not return.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Skipped {
    /// Its runstateDir is gone: the pointer file was removed.
    Reaped { path: PathBuf, run_id: RunId },
    /// It could not be parsed: left in place, reported.
    Garbled { path: PathBuf, reason: String },
}

/// Writes (or replaces) the pointer atomically with mode 0600 under a 0700 `runs/`.
pub fn write(home: &Home, p: &Pointer) -> Result<PathBuf, RegistryError> {
    home.ensure()?;
    let path = home.pointer_path(&p.run_id);
    let mut bytes = serde_json::to_vec_pretty(p).expect("a Pointer always serializes");
    bytes.push(b'\n');
    home::write_atomic(&path, &bytes, 0o600).map_err(|source| RegistryError::Write { path: path.clone(), source })?;
    Ok(path)
}

/// Parses one pointer file's bytes, checking the version and that the file name matches the runId.
pub fn parse(path: &Path, bytes: &[u8]) -> Result<Pointer, RegistryError> {
    let garbled = |reason: String| RegistryError::Garbled { path: path.to_path_buf(), reason };
    let p: Pointer = serde_json::from_slice(bytes).map_err(|e| garbled(e.to_string()))?;
    if p.v != VERSION {
        return Err(garbled(format!("v is {:?}, expected {VERSION:?}", p.v)));
    }
    let expected = format!("{}.json", p.run_id);
    if path.file_name().and_then(|n| n.to_str()) != Some(expected.as_str()) {
        return Err(garbled(format!("file name does not match runId {}", p.run_id)));
    }
    Ok(p)
}

/// Reads one run's pointer.
pub fn read(home: &Home, run: &RunId) -> Result<Pointer, RegistryError> {
    let path = home.pointer_path(run);
    match fs::read(&path) {
        Ok(bytes) => parse(&path, &bytes),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Err(RegistryError::Unknown(run.clone())),
        Err(source) => Err(RegistryError::Read { path, source }),
    }
}

/// Lists every valid pointer whose runstateDir still exists, sorted by runId. Pointers whose
/// runstateDir is gone are removed (reaped); garbled ones are skipped. Both are returned in the second
/// vector so the caller can log them; neither is fatal.
pub fn enumerate(home: &Home) -> Result<(Vec<Pointer>, Vec<Skipped>), RegistryError> {
    let dir = home.runs_dir();
    let entries = match fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok((Vec::new(), Vec::new())),
        Err(source) => return Err(RegistryError::Read { path: dir, source }),
    };
    let mut found = Vec::new();
    let mut skipped = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| RegistryError::Read { path: dir.clone(), source })?;
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if !name.ends_with(".json") || name.starts_with('.') {
            continue;
        }
        let pointer = fs::read(&path)
            .map_err(|e| RegistryError::Garbled { path: path.clone(), reason: e.to_string() })
            .and_then(|b| parse(&path, &b));
        match pointer {
            Ok(p) if p.runstate_dir.is_dir() => found.push(p),
            Ok(p) => {
                let _ = fs::remove_file(&path);
                skipped.push(Skipped::Reaped { path, run_id: p.run_id });
            }
            Err(RegistryError::Garbled { path, reason }) => skipped.push(Skipped::Garbled { path, reason }),
            Err(e) => skipped.push(Skipped::Garbled { path, reason: e.to_string() }),
        }
    }
    found.sort_by(|a, b| a.run_id.cmp(&b.run_id));
    Ok((found, skipped))
}

/// Logs what `enumerate` skipped, one structured line each.
pub fn log_skipped(skipped: &[Skipped]) {
    for s in skipped {
        match s {
            Skipped::Reaped { path, run_id } => {
                tracing::info!(RUN_ID = %run_id, path = %path.display(), "reaped pointer: runstateDir is gone")
            }
            Skipped::Garbled { path, reason } => {
                tracing::warn!(path = %path.display(), reason = %reason, "skipped garbled pointer")
            }
        }
    }
}

/// `<runstateDir>/<slug>.jsonl`: where a run's journal is, before its pointer exists.
pub fn journal_path_in(runstate_dir: &Path, slug: &Slug) -> PathBuf {
    runstate_dir.join(format!("{slug}.jsonl"))
}

impl Pointer {
    /// `<runstateDir>/<slug>.jsonl` — the journal.
    pub fn journal_path(&self) -> PathBuf {
        journal_path_in(&self.runstate_dir, &self.slug)
    }
    /// `<runstateDir>/<slug>.plan.json` — the plan copy kept at run start.
    pub fn plan_path(&self) -> PathBuf {
        self.runstate_dir.join(format!("{}.plan.json", self.slug))
    }
    /// `<runstateDir>/<slug>.live.json` — the liveness sidecar.
    pub fn liveness_path(&self) -> PathBuf {
        self.runstate_dir.join(format!("{}.live.json", self.slug))
    }
    /// `<runstateDir>/<slug>.steer.jsonl` — the DynWF inbox.
    pub fn inbox_path(&self) -> PathBuf {
        self.runstate_dir.join(format!("{}.steer.jsonl", self.slug))
    }
    /// `<runstateDir>/<slug>.logs/` — one wrapper logfile per task.
    pub fn logs_dir(&self) -> PathBuf {
        self.runstate_dir.join(format!("{}.logs", self.slug))
    }
    /// `<runstateDir>/<slug>.prompts/` — every turn's prompt, one file per task and attempt.
    pub fn prompts_dir(&self) -> PathBuf {
        self.runstate_dir.join(format!("{}.prompts", self.slug))
    }
    /// `<runstateDir>/<slug>.approvals/` — the approvals MCP tool's configs.
    pub fn approvals_dir(&self) -> PathBuf {
        self.runstate_dir.join(format!("{}.approvals", self.slug))
    }
    /// `<runstateDir>/<slug>.supervisor.lock` — held by the run's one supervisor.
    pub fn supervisor_lock_path(&self) -> PathBuf {
        self.runstate_dir.join(format!("{}.supervisor.lock", self.slug))
    }
    /// `<runstateDir>/<slug>.supervisor.log` — a detached supervisor's output.
    pub fn supervisor_log_path(&self) -> PathBuf {
        self.runstate_dir.join(format!("{}.supervisor.log", self.slug))
    }
    /// `<runstateDir>/<slug>.notify.json` — the notifier's delivery mark.
    pub fn notify_mark_path(&self) -> PathBuf {
        self.runstate_dir.join(format!("{}.notify.json", self.slug))
    }
    /// `<runstateDir>/<slug>.usage.json` — each task's usage, kept when its logs are pruned.
    pub fn usage_path(&self) -> PathBuf {
        self.runstate_dir.join(format!("{}.usage.json", self.slug))
    }
    /// `<runstateDir>/<slug>.steer.cursor` — how far the DynWF inbox was taken.
    pub fn steer_cursor_path(&self) -> PathBuf {
        self.runstate_dir.join(format!("{}.steer.cursor", self.slug))
    }
    /// The default logfile of a task (the journal's `leased` record names the one actually used).
    pub fn default_logfile(&self, task: &crate::ids::TaskId) -> PathBuf {
        self.logs_dir().join(format!("{task}.log"))
    }
}

/// What `register` needs to know about a new run.
pub struct Registration<'a> {
    pub repo_root: &'a Path,
    /// `None`: the repo root itself.
    pub worktree: Option<&'a Path>,
    pub slug: &'a Slug,
    pub plane: Plane,
    /// `None`: `<worktree>/runstate` (next to the worktree's git; worktree = repo root by default).
    pub runstate_dir: Option<&'a Path>,
    /// `None`: the repo's directory name.
    pub project: Option<&'a str>,
    /// The plan's slug, when the run's own differs (a re-run).
    pub base_slug: Option<&'a Slug>,
}

/// Canonicalizes the paths, derives the runId, creates the runstateDir, reads the worktree's branch,
/// and writes the pointer. Re-registering the same repo+worktree+slug rewrites the same pointer
/// (keeping its original `created`).
pub fn register(home: &Home, r: &Registration) -> Result<Pointer, RegistryError> {
    let canon =
        |p: &Path| home::canonical_dir(p).map_err(|source| RegistryError::Read { path: p.to_path_buf(), source });
    let repo_root = canon(r.repo_root)?;
    let worktree = match r.worktree {
        Some(w) => canon(w)?,
        None => repo_root.clone(),
    };
    let runstate_dir = match r.runstate_dir {
        Some(d) => d.to_path_buf(),
        None => worktree.join("runstate"),
    };
    home::private_dir(&runstate_dir).map_err(|source| RegistryError::Write { path: runstate_dir.clone(), source })?;
    let runstate_dir = canon(&runstate_dir)?;
    let run_id = RunId::derive(&repo_root, &worktree, r.slug);
    let repo = repo_root.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "/".into());
    let created = match read(home, &run_id) {
        Ok(old) => old.created,
        Err(_) => crate::state::journal::now_rfc3339(),
    };
    let p = Pointer {
        v: VERSION.into(),
        run_id,
        slug: r.slug.clone(),
        project: r.project.map(str::to_string).unwrap_or_else(|| repo.clone()),
        repo,
        branch: crate::os::git::branch(&worktree),
        repo_root,
        worktree,
        runstate_dir,
        plane: r.plane,
        created,
        base_slug: r.base_slug.cloned(),
    };
    write(home, &p)?;
    Ok(p)
}
