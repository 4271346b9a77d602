//! `harness run PLAN.json`: validates the plan, registers the run (plan copy first, then the pointer),
//! journals `run started`, and starts its supervisor — through systemd when the user manager has the
//! units, else as a detached `harness supervise` process, or in this process (`--foreground`, and the
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
    let run_id = RunId::derive(&repo, &worktree, &plan.slug);
    if l.supervised {
        home.checked_socket_path(&run_id).map_err(|e| RunError::Invalid(e.to_string()))?;
    }
    let runstate = worktree.join("runstate");
    std::fs::create_dir_all(&runstate).map_err(|e| RunError::Failed(format!("{}: {e}", runstate.display())))?;
    let journal_path = crate::state::registry::journal_path_in(&runstate, &plan.slug);
    if std::fs::metadata(&journal_path).is_ok_and(|m| m.len() > 0) {
        let status =
            journal::replay(&journal_path).map(|v| format!("{:?}", v.status).to_lowercase()).unwrap_or_default();
        return Err(RunError::Invalid(format!(
            "run {run_id} already exists ({status}, journal {}): `harness supervise {run_id}` recovers a live run; \
             to run the plan again use another slug or remove runstate/{}.*",
            journal_path.display(),
            plan.slug
        )));
    }
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
    home::write_atomic(&runstate.join(format!("{}.plan.json", plan.slug)), &bytes, 0o644)
        .map_err(|e| RunError::Failed(format!("cannot write the plan copy: {e}")))?;
    let slug: Slug = plan.slug.clone();
    let reg = registry::Registration {
        repo_root: &repo,
        worktree: Some(&worktree),
        slug: &slug,
        plane: Plane::Standalone,
        runstate_dir: Some(&runstate),
        project: l.project,
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

/// True when a systemd user manager answers and has the supervisor template unit.
pub fn systemd_units_available() -> bool {
    crate::os::install::systemctl_user_quiet(&["cat", "harness-supervisor@.service"])
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
pub fn start_with_systemd(home: &Home, run: &RunId) -> Result<String, RunError> {
    let env_path = home.runs_dir().join(format!("{run}.env"));
    home::write_atomic(&env_path, engine_env().as_bytes(), 0o600)
        .map_err(|e| RunError::Failed(format!("{}: {e}", env_path.display())))?;
    let out = std::process::Command::new("systemctl")
        .args(["--user", "start"])
        .arg(format!("harness-supervisor@{run}.socket"))
        .arg(format!("harness-supervisor@{run}.service"))
        .output()
        .map_err(|e| RunError::Failed(format!("systemctl: {e}")))?;
    if !out.status.success() {
        return Err(RunError::Failed(format!(
            "systemctl --user start harness-supervisor@{run}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(format!("systemd unit harness-supervisor@{run}.service"))
}

/// Spawns `harness supervise <run>` detached (new session, stdin closed, output appended to
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
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(|e| RunError::Failed(format!("{}: {e}", log_path.display())))?;
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
