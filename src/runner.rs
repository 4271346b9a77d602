//! `harness run PLAN.json`: validates the plan, registers the run (plan copy first, then the pointer),
//! journals `run started`, and starts its supervisor — through systemd when the user manager has the
//! units, else as a detached `harness debug supervise` process, or in this process (`--foreground`, and the
//! unsupervised batch mode). It decides nothing about tasks.

use crate::ids::{RunId, Slug};
use crate::os::home::{self, Home};
use crate::state::journal::{self, Journal, Record};
use crate::state::plan::Plan;
use crate::state::registry::{self, Plane, Pointer};
use std::path::Path;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Failed(String),
}

/// Where and how to start a run.
pub struct Launch<'a> {
    pub plan_path: &'a Path,
    pub repo: Option<&'a Path>,
    pub worktree: Option<&'a Path>,
    pub project: Option<&'a str>,
    pub supervised: bool,
    /// The run's slug (`--slug`); `None`: the plan's, or its next free `<slug>-N` when a run of the
    /// plan has ended in this worktree.
    pub slug: Option<&'a str>,
    /// Check the engines, branch and setup before registering (`preflight`); the demo, whose fake
    /// engines are its supervisor's alone, does not.
    pub preflight: bool,
}

/// Registers a new run for `plan` and journals its start. Refuses a run whose journal already exists.
pub fn register(home: &Home, l: &Launch) -> Result<(Plan, Pointer), RunError> {
    let plan = Plan::load(l.plan_path).map_err(|e| RunError::Invalid(e.to_string()))?;
    let cwd = std::env::current_dir().map_err(|e| RunError::Failed(e.to_string()))?;
    let repo = match l.repo {
        Some(r) => r.to_path_buf(),
        None => crate::os::git::toplevel(&cwd).unwrap_or_else(|| cwd.clone()),
    };
    let repo = home::canonical_dir(&repo).map_err(|e| RunError::Invalid(format!("--repo: {e}")))?;
    let worktree = match l.worktree {
        Some(w) => home::canonical_dir(w).map_err(|e| RunError::Invalid(format!("--worktree: {e}")))?,
        None => repo.clone(),
    };
    if !crate::os::git::is_worktree(&worktree) {
        return Err(RunError::Invalid(format!(
            "{} is not a git worktree: a run commits each task, so it needs one (git init)",
            worktree.display()
        )));
    }
    if plan.isolation() == crate::state::plan::Isolation::Worktree && crate::os::git::head(&worktree).is_err() {
        return Err(RunError::Invalid(format!(
            "{} has no commit yet: each task starts in its own worktree from the run's tip, so the branch needs a first commit (or set \"isolation\": \"shared\" with \"max_parallel\": 1)",
            worktree.display()
        )));
    }
    if l.preflight {
        let problems = crate::preflight::check(&plan, &worktree);
        if !problems.is_empty() {
            return Err(RunError::Invalid(format!(
                "the run cannot start (nothing was registered):\n  {}",
                problems.join("\n  ")
            )));
        }
    }
    let runstate = worktree.join("runstate");
    home::private_dir(&runstate).map_err(|e| RunError::Failed(format!("{}: {e}", runstate.display())))?;
    // Held until the run's journal holds its start: two runs started at once take different slugs.
    let _slugs = slug_lock(&runstate)?;
    let at = Place { home, repo: &repo, worktree: &worktree, runstate: &runstate, supervised: l.supervised };
    let base_slug = plan.slug.clone();
    let slug = match l.slug {
        Some(s) => chosen_slug(&at, s)?,
        None => next_slug(&at, &base_slug)?,
    };
    let mut plan = plan;
    plan.slug = slug;
    let run_id = RunId::derive(&repo, &worktree, &plan.slug);
    if plan.isolation() == crate::state::plan::Isolation::Worktree {
        let left = crate::os::worktree::left_work(home, &worktree, &run_id);
        if !left.is_empty() {
            let list: Vec<String> = left.iter().map(|(what, why)| format!("{what}: {why}")).collect();
            return Err(RunError::Invalid(format!(
                "run {run_id} cannot start over unintegrated task work an earlier run of this plan left ({}): `harness clean {run_id}` says what it holds, `harness clean {run_id} --force` removes it",
                list.join("; ")
            )));
        }
    }
    crate::os::git::exclude_runstate(&worktree, &runstate).map_err(|e| RunError::Failed(e.to_string()))?;
    // The plan copy is written before the pointer (the API's cache relies on that order).
    let mut bytes = serde_json::to_vec_pretty(&plan).expect("a plan serializes");
    bytes.push(b'\n');
    home::write_atomic(&runstate.join(format!("{}.plan.json", plan.slug)), &bytes, 0o600)
        .map_err(|e| RunError::Failed(format!("cannot write the plan copy: {e}")))?;
    let slug: Slug = plan.slug.clone();
    let reg = registry::Registration {
        repo_root: &repo,
        worktree: Some(&worktree),
        slug: &slug,
        plane: Plane::Standalone,
        runstate_dir: Some(&runstate),
        project: l.project,
        base_slug: (base_slug != slug).then_some(&base_slug),
    };
    let pointer = registry::register(home, &reg).map_err(|e| RunError::Failed(e.to_string()))?;
    let j = Journal::open(&pointer.journal_path()).map_err(|e| RunError::Failed(e.to_string()))?;
    let mode = if l.supervised { "supervised" } else { "batch" };
    let detail = Some(format!("{mode} run of {}", l.plan_path.display()));
    j.append(&Record::started("runner", detail, pointer.branch.clone(), crate::os::git::head(&worktree).ok()))
        .map_err(|e| RunError::Failed(e.to_string()))?;
    // The Overview's row of the new run, before any API asks for it.
    crate::state::summary::refresh(home, &pointer, &mut Default::default());
    Ok((plan, pointer))
}

/// Where a new run goes, for choosing its slug.
struct Place<'a> {
    home: &'a Home,
    repo: &'a Path,
    worktree: &'a Path,
    runstate: &'a Path,
    supervised: bool,
}

/// What holds a slug in this worktree: a run (its journal, with its status) or a pruned run's
/// tombstone (ids are never reused).
enum Taken {
    Free,
    /// A standalone pointer without a journal (its runstate files were removed): the plan's own
    /// slug may take it up again (what it left is checked before the run starts); a number skips it.
    Registered,
    Ended(RunId, &'static str),
    Live(RunId, &'static str),
    Pruned(RunId),
}

impl Place<'_> {
    fn taken(&self, slug: &Slug) -> Taken {
        let run_id = RunId::derive(self.repo, self.worktree, slug);
        let journal_path = registry::journal_path_in(self.runstate, slug);
        if std::fs::metadata(&journal_path).is_ok_and(|m| m.len() > 0) {
            let status = journal::replay(&journal_path).map(|v| v.status).unwrap_or(journal::RunStatus::Running);
            return if status.is_over() {
                Taken::Ended(run_id, status.as_str())
            } else {
                Taken::Live(run_id, status.as_str())
            };
        }
        if crate::state::summary::tombstone_path(self.home, &run_id).exists() {
            return Taken::Pruned(run_id);
        }
        // Registered without a journal (a DynWF run, or one whose runstate files were removed):
        // its id stays its own.
        match registry::read(self.home, &run_id) {
            Ok(p) if p.plane == Plane::Dynwf => Taken::Live(run_id, "a registered DynWF run"),
            Ok(_) => Taken::Registered,
            Err(_) => Taken::Free,
        }
    }

    /// Whether a run's socket path fits the OS limit with this slug (supervised runs have one).
    fn fits(&self, slug: &Slug) -> bool {
        !self.supervised || self.home.checked_socket_path(&RunId::derive(self.repo, self.worktree, slug)).is_ok()
    }
}

fn slug_lock(runstate: &Path) -> Result<crate::os::flock::Flock, RunError> {
    let path = runstate.join(".slugs.lock");
    let f = home::open_private(&path, true).map_err(|e| RunError::Failed(format!("{}: {e}", path.display())))?;
    crate::os::flock::Flock::exclusive(&f).map_err(|e| RunError::Failed(format!("locking {}: {e}", path.display())))
}

/// The command a person runs to recover a run whose supervisor is gone (the documented name, not
/// the old top-level alias).
pub fn recover_command(run: &RunId) -> String {
    format!("harness debug supervise {run}")
}

/// A live (or paused, or supervisor-less) run of the plan is refused, naming it and what ends it.
fn refuse_live(run: &RunId, status: &str) -> RunError {
    RunError::Invalid(format!(
        "run {run} of this plan is {status} in this worktree: wait for it, end it (`harness stop {run}`; \
         `{}` recovers one whose supervisor is gone), or run beside it with `--slug NEW`",
        recover_command(run)
    ))
}

/// `--slug S`: that slug, free.
fn chosen_slug(at: &Place, s: &str) -> Result<Slug, RunError> {
    let slug = Slug::parse(s).map_err(|e| RunError::Invalid(format!("--slug: {e}")))?;
    match at.taken(&slug) {
        Taken::Free | Taken::Registered if at.fits(&slug) => Ok(slug),
        Taken::Free | Taken::Registered => {
            Err(RunError::Invalid(format!("--slug {slug}: the run's socket path would be over the OS limit")))
        }
        Taken::Live(run, status) => Err(refuse_live(&run, status)),
        Taken::Ended(run, status) => Err(RunError::Invalid(format!(
            "--slug {slug} is taken: run {run} ({status}) keeps its history; choose another slug"
        ))),
        Taken::Pruned(run) => {
            Err(RunError::Invalid(format!("--slug {slug} is taken by pruned run {run}; choose another slug")))
        }
    }
}

/// The plan's slug, else the next free `<slug>-N` (N = 2, 3…) when the plan's own run has ended;
/// the base is shortened so `<base>-N` stays a slug whose socket path fits. A live run under the
/// plan's slug is refused; re-runs started together each take their own number.
fn next_slug(at: &Place, base: &Slug) -> Result<Slug, RunError> {
    match at.taken(base) {
        Taken::Free | Taken::Registered => return fitting(at, base.clone()),
        Taken::Live(run, status) => return Err(refuse_live(&run, status)),
        Taken::Ended(..) | Taken::Pruned(_) => {}
    }
    for n in 2..=10_000u32 {
        let slug = numbered(at, base, n)?;
        if matches!(at.taken(&slug), Taken::Free) {
            return fitting(at, slug);
        }
    }
    Err(RunError::Invalid(format!("every slug {base}-N up to 10000 is taken")))
}

/// `slug`, when a supervised run's socket path fits with it.
fn fitting(at: &Place, slug: Slug) -> Result<Slug, RunError> {
    if at.supervised {
        let run_id = RunId::derive(at.repo, at.worktree, &slug);
        at.home.checked_socket_path(&run_id).map_err(|e| RunError::Invalid(e.to_string()))?;
    }
    Ok(slug)
}

/// `<base>-N`, the base cut (at a character the slug grammar ends on) so it is a slug and, for a
/// supervised run, its socket path fits.
fn numbered(at: &Place, base: &Slug, n: u32) -> Result<Slug, RunError> {
    let suffix = format!("-{n}");
    let mut keep = base.as_str().len().min(crate::ids::SLUG_MAX - suffix.len());
    loop {
        let cut = base.as_str()[..keep].trim_end_matches(['-', '.', '_']);
        if let Ok(s) = Slug::parse(&format!("{cut}{suffix}"))
            && (at.fits(&s) || keep == 0)
        {
            return Ok(s);
        }
        if keep == 0 {
            return Err(RunError::Invalid(format!("no slug {base}-{n} fits the slug grammar")));
        }
        keep -= 1;
    }
}

/// True when a systemd user manager answers and has the supervisor template unit.
/// The systemd units that serve `home`: `Ok(prefix)` when the user manager has this home's
/// supervisor template (`harness-supervisor@` for the default home — the package's or `harness
/// install`'s — `harness-<home id>-supervisor@` for another, which `harness install` renders);
/// `Err(why)` when it has none for this home (the caller supervises detached, saying why when
/// units of another home exist), never a unit whose `HARNESS_HOME` is another home.
pub fn systemd_units_for(home: &Home) -> Result<String, Option<String>> {
    let prefix = crate::os::install::unit_prefix(home);
    let cat = |unit: &str| {
        std::process::Command::new("systemctl")
            .args(["--user", "cat", unit])
            .stderr(std::process::Stdio::null())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
    };
    let root = home.root.canonicalize().unwrap_or_else(|_| home.root.clone());
    let serves = |text: &str| {
        text.lines().any(|l| {
            let v = l.trim().strip_prefix("Environment=HARNESS_HOME=").map(|v| v.trim_matches('"'));
            v.is_some_and(|v| Path::new(v) == root || (prefix == "harness" && v == "%h/.harness"))
        })
    };
    match cat(&format!("{prefix}-supervisor@.service")) {
        Some(text) if serves(&text) => Ok(prefix),
        Some(_) => Err(Some(format!(
            "the systemd unit {prefix}-supervisor@.service serves another HARNESS_HOME; `harness install` renders units for {}",
            home.root.display()
        ))),
        None if prefix != "harness" && cat("harness-supervisor@.service").is_some() => Err(Some(format!(
            "the systemd units serve the default home, not {}; `harness install` renders units for it",
            home.root.display()
        ))),
        None => Err(None),
    }
}

/// Variables a supervisor started by systemd needs from the caller's environment (the engines'
/// paths and keys): the same families the wrappers pass through.
fn engine_env() -> String {
    let keep = |k: &str| {
        k == "PATH"
            || ["HARNESS_", "ANTHROPIC_", "CLAUDE_CODE_", "CURSOR_", "OPENAI_", "CODEX_"]
                .iter()
                .any(|p| k.starts_with(p))
            || matches!(
                k,
                "IS_SANDBOX" | "DISABLE_TELEMETRY" | "DISABLE_AUTOUPDATER" | "HTTPS_PROXY" | "HTTP_PROXY" | "NO_PROXY"
            )
    };
    let mut out = String::new();
    for (k, v) in std::env::vars() {
        if keep(&k) && k != "HARNESS_HOME" && !v.contains('\n') {
            // systemd EnvironmentFile: KEY="value" with \ and " escaped.
            out.push_str(&format!("{k}=\"{}\"\n", v.replace('\\', "\\\\").replace('"', "\\\"")));
        }
    }
    out
}

/// Starts the supervisor instance units of `run`, after writing its environment file
/// (`$HARNESS_HOME/runs/<runId>.env`, mode 0600).
pub fn start_with_systemd(home: &Home, run: &RunId, prefix: &str) -> Result<String, RunError> {
    let env_path = home.runs_dir().join(format!("{run}.env"));
    home::write_atomic(&env_path, engine_env().as_bytes(), 0o600)
        .map_err(|e| RunError::Failed(format!("{}: {e}", env_path.display())))?;
    let out = std::process::Command::new("systemctl")
        .args(["--user", "start"])
        .arg(format!("{prefix}-supervisor@{run}.socket"))
        .arg(format!("{prefix}-supervisor@{run}.service"))
        .output()
        .map_err(|e| RunError::Failed(format!("systemctl: {e}")))?;
    if !out.status.success() {
        return Err(RunError::Failed(format!(
            "systemctl --user start {prefix}-supervisor@{run}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(format!("systemd unit {prefix}-supervisor@{run}.service"))
}

/// Spawns `harness debug supervise <run>` detached (new session, stdin closed, output appended to
/// `<runstateDir>/<slug>.supervisor.log`) and waits for its socket.
pub fn start_detached(
    home: &Home,
    pointer: &Pointer,
    extra: &[String],
    envs: &[(String, String)],
) -> Result<String, RunError> {
    use std::os::unix::process::CommandExt;
    let exe = std::env::current_exe().map_err(|e| RunError::Failed(e.to_string()))?;
    let log_path = pointer.supervisor_log_path();
    let log =
        home::open_private(&log_path, true).map_err(|e| RunError::Failed(format!("{}: {e}", log_path.display())))?;
    let err = log.try_clone().map_err(|e| RunError::Failed(e.to_string()))?;
    let mut cmd = std::process::Command::new(exe);
    cmd.arg("supervise").arg(pointer.run_id.as_str()).args(extra);
    cmd.env("HARNESS_HOME", &home.root)
        .envs(envs.iter().cloned())
        .stdin(std::process::Stdio::null())
        .stdout(log)
        .stderr(err);
    // SAFETY: the closure runs between fork and exec, where only async-signal-safe calls are allowed;
    // setsid(2) is one. It detaches the supervisor from our terminal and process group. (std has no
    // safe way to ask for a new session; `process_group` only sets the group.)
    unsafe {
        cmd.pre_exec(|| nix::unistd::setsid().map(|_| ()).map_err(std::io::Error::from));
    }
    let child = cmd.spawn().map_err(|e| RunError::Failed(format!("cannot start the supervisor: {e}")))?;
    let sock = home.socket_path(&pointer.run_id);
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while std::time::Instant::now() < deadline {
        if crate::control::is_live(&sock) {
            return Ok(format!("supervisor pid {} (log {})", child.id(), log_path.display()));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Err(RunError::Failed(format!(
        "the supervisor did not open {} within 15 s; see {}",
        sock.display(),
        log_path.display()
    )))
}
