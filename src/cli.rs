//! The `harness` command line: argument parsing and turning results into one stderr line plus an exit
//! code. Business logic lives in the modules it calls.
//!
//! Exit codes: 0 success, 1 the operation failed or was refused (message on stderr), 2 usage error
//! (bad arguments or ids), 3 `journal reconcile` found discrepancies, 4 the API could not be reached.

use crate::home::Home;
use crate::ids::{RunId, Slug, TaskId};
use crate::journal::{self, Journal};
use crate::liveness::{self, TaskLiveness};
use crate::plan::Plan;
use crate::registry::{self, Plane, Pointer};
use clap::{Parser, Subcommand};
use std::net::SocketAddr;
use std::path::PathBuf;

#[derive(Parser)]
#[command(name = "harness", version, about = "Watch, steer, kill and pause AI coding agent runs")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Serve the HTTP API (durable views; live routes need the run's supervisor).
    Api {
        /// Address to listen on. Repeatable. Default 127.0.0.1:7878 or $HARNESS_API_ADDR. A
        /// non-loopback address is refused unless a token is configured.
        #[arg(long)]
        listen: Vec<SocketAddr>,
        /// Also listen on this Unix socket path.
        #[arg(long)]
        unix: Option<PathBuf>,
        /// A browser origin allowed to call the API (e.g. the Web UI dev server
        /// http://127.0.0.1:5173). Repeatable; also $HARNESS_API_ALLOW_ORIGINS (comma-separated).
        #[arg(long)]
        allow_origin: Vec<String>,
        /// SSE heartbeat period (at most 10 s).
        #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
        heartbeat: std::time::Duration,
        /// Events buffered per SSE client.
        #[arg(long, default_value_t = 32)]
        stream_buffer: usize,
        /// A client that takes no event for this long starts losing events (each loss is reported
        /// to it as one error event naming the dropped range).
        #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
        slow_client_grace: std::time::Duration,
    },
    /// The global run registry ($HARNESS_HOME/runs).
    #[command(subcommand)]
    Registry(RegistryCmd),
    /// The runstate/v1 journal of a run.
    #[command(subcommand)]
    Journal(JournalCmd),
    /// The liveness/v1 sidecar of a run (a cache; the journal wins).
    #[command(subcommand)]
    Liveness(LivenessCmd),
    /// Plan files.
    #[command(subcommand)]
    Plan(PlanCmd),
    /// The demo: a supervised example run (fake engines replaying real captures) in a scratch git
    /// repo, with the API serving it. Prints the commands to watch, steer and kill it.
    Demo {
        /// Where to put the scratch repo and harness home (default: a new dir under /tmp).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// API address.
        #[arg(long, default_value = "127.0.0.1:7878")]
        listen: SocketAddr,
        /// Engine pacing: recorded (the captures' own timing), fast, or seconds per line.
        #[arg(long, default_value = "recorded")]
        pace: String,
    },
    /// Install the systemd user units (launchd agent on macOS) for this binary.
    Install {
        /// Install for the user's service manager (the only mode; accepted for clarity).
        #[arg(long)]
        user: bool,
        /// The binary the units run (default: this one).
        #[arg(long)]
        bin: Option<PathBuf>,
        /// Print the rendered units instead of writing them.
        #[arg(long)]
        print: bool,
        /// Write the units here instead of the user unit directory (no reload).
        #[arg(long)]
        unit_dir: Option<PathBuf>,
    },
    /// Print the launchd plist of the API agent or of one run's supervisor (macOS).
    Plist {
        /// `api`, or a runId for its supervisor.
        which: String,
        #[arg(long)]
        bin: Option<PathBuf>,
    },
    /// Stop and remove what `harness install` wrote.
    Uninstall {
        #[arg(long)]
        user: bool,
        #[arg(long)]
        unit_dir: Option<PathBuf>,
    },
    /// Start a run of PLAN.json: batch in the foreground, or with a supervisor (--supervised).
    Run {
        plan: PathBuf,
        /// The repository (default: the git top level of the current directory).
        #[arg(long)]
        repo: Option<PathBuf>,
        /// A separate worktree of the repository to work in (default: the repository itself).
        #[arg(long)]
        worktree: Option<PathBuf>,
        #[arg(long)]
        project: Option<String>,
        /// Run with a supervisor: control socket, liveness, live verbs.
        #[arg(long)]
        supervised: bool,
        /// With --supervised: supervise in this process instead of a detached one.
        #[arg(long)]
        foreground: bool,
        /// Register the run and journal its start, but start no supervisor: for a process manager
        /// of your own (`harness supervise <runId>`, e.g. under systemd-socket-activate).
        #[arg(long, conflicts_with_all = ["foreground"])]
        register_only: bool,
        #[command(flatten)]
        tuning: Tuning,
    },
    /// Supervise a registered run (what systemd or `harness run --supervised` starts).
    Supervise {
        run: String,
        #[command(flatten)]
        tuning: Tuning,
    },
    /// List runs (via the API).
    Runs {
        #[command(flatten)]
        api: ApiArgs,
        /// Print the API's JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show one run: its waves and task states (via the API).
    Show {
        run: String,
        #[command(flatten)]
        api: ApiArgs,
        #[arg(long)]
        json: bool,
    },
    /// Follow a task's events live (SSE), reconnecting with Last-Event-ID on its own.
    Watch {
        run: String,
        task: String,
        #[command(flatten)]
        api: ApiArgs,
        /// Print events/v1 JSON lines instead of text.
        #[arg(long)]
        json: bool,
        /// Start after this seq (default: from the beginning of the log).
        #[arg(long)]
        after: Option<String>,
        /// Stop after the next `exit` event (the end of a turn).
        #[arg(long)]
        until_exit: bool,
    },
    /// Queue a message for a task's next turn (resume of its session).
    Steer {
        run: String,
        task: String,
        msg: String,
        /// Kill the current turn first.
        #[arg(long)]
        interrupt: bool,
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Kill a task's running turn.
    Kill {
        run: String,
        task: String,
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Hold a run: no new task or turn is dispatched.
    Pause {
        run: String,
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Release a paused run.
    Resume {
        run: String,
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Stop a supervised run: kill its running tasks; the run ends failed.
    Stop { run: String },
    /// Ask a run's supervisor for its status (over the control socket).
    Status { run: String },
    /// The DynWF inbox of a run (DynWF runs have no supervisor socket).
    #[command(subcommand)]
    Inbox(InboxCmd),
    /// Normalize an engine's raw stream (stdin) into events/v1 JSON lines (stdout).
    NormalizeEvents {
        /// claude, cursor or codex.
        adapter: String,
        #[arg(long, default_value = "-")]
        run: String,
        #[arg(long, default_value = "-")]
        task: String,
        /// Session id for lines that carry none.
        #[arg(long)]
        session: Option<String>,
        /// Ordinal of the first stdin line in its logfile (a tail that starts mid-file keeps ordinals).
        #[arg(long, default_value_t = 1)]
        first_line: u64,
        /// Fixed observed time for lines without their own timestamp (default: when each line is read).
        #[arg(long)]
        observed_ts: Option<String>,
    },
}

/// Where the API is.
#[derive(clap::Args, Clone)]
struct ApiArgs {
    /// The API address (default $HARNESS_API_ADDR or 127.0.0.1:7878).
    #[arg(long = "api")]
    addr: Option<SocketAddr>,
}

impl ApiArgs {
    fn client(&self) -> Result<crate::client::Client, Fail> {
        let addr = match self.addr {
            Some(a) => a,
            None => default_api_addr()?,
        };
        let token = Home::from_env().ok().and_then(|h| api_token(&h).ok().flatten());
        Ok(crate::client::Client { addr, token })
    }
}

/// Supervisor tuning.
#[derive(clap::Args, Clone)]
struct Tuning {
    /// Stay up this long with nothing to do (halted tasks, paused) before ending the run failed.
    #[arg(long, default_value = "30m", value_parser = humantime::parse_duration)]
    linger: std::time::Duration,
    /// TERM → KILL grace when killing a task's process group.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    kill_grace: std::time::Duration,
    /// Bound of one agent turn.
    #[arg(long, default_value = "1h", value_parser = humantime::parse_duration)]
    turn_timeout: std::time::Duration,
    /// Bound of one gate command.
    #[arg(long, default_value = "30m", value_parser = humantime::parse_duration)]
    gate_timeout: std::time::Duration,
}

impl Tuning {
    fn options(&self) -> crate::supervisor::Options {
        crate::supervisor::Options {
            kill_grace: self.kill_grace,
            linger: self.linger,
            turn_timeout_s: self.turn_timeout.as_secs().max(1),
            gate_timeout: self.gate_timeout,
            batch: false,
            listener: None,
        }
    }
    fn args(&self) -> Vec<String> {
        let f = |d: std::time::Duration| humantime::format_duration(d).to_string().replace(' ', "");
        vec![
            "--linger".into(),
            f(self.linger),
            "--kill-grace".into(),
            f(self.kill_grace),
            "--turn-timeout".into(),
            f(self.turn_timeout),
            "--gate-timeout".into(),
            f(self.gate_timeout),
        ]
    }
}

#[derive(Subcommand)]
enum InboxCmd {
    /// Queue a verb for a DynWF run (steer, pause, resume; kill is refused). Prints the entry.
    Append {
        run: String,
        verb: String,
        #[arg(long)]
        task: Option<String>,
        #[arg(long)]
        msg: Option<String>,
        #[arg(long)]
        interrupt: bool,
        #[arg(long, default_value = "cli")]
        by: String,
    },
    /// Take the verbs not taken yet (exactly once), journaling each. Prints a JSON array.
    Take { run: String },
}

#[derive(Subcommand)]
enum RegistryCmd {
    /// Register a run (what a runner or DynWF driver does at run start). Prints the pointer.
    Add {
        #[arg(long)]
        repo: PathBuf,
        #[arg(long)]
        worktree: Option<PathBuf>,
        #[arg(long)]
        slug: String,
        #[arg(long, default_value = "standalone")]
        plane: String,
        #[arg(long)]
        runstate_dir: Option<PathBuf>,
        #[arg(long)]
        project: Option<String>,
    },
    /// List registered runs (reaping pointers whose runstateDir is gone).
    List,
}

#[derive(Subcommand)]
enum JournalCmd {
    /// Append one record (JSON; `v` and `ts` are filled in when absent). Prints its line number.
    Append { run: String, record: String },
    /// Print the replayed view of the journal as JSON.
    Show { run: String },
    /// Check committed shas against git and in-flight tasks against live processes. Exit 3 if not clean.
    Reconcile { run: String },
}

#[derive(Subcommand)]
enum LivenessCmd {
    /// Set one task's liveness record (JSON TaskLiveness).
    Set { run: String, task: String, record: String },
    /// Print the sidecar, or one task's record.
    Get { run: String, task: Option<String> },
    /// Drop records whose pid is dead; report what the journal says about each.
    Reap { run: String },
}

#[derive(Subcommand)]
enum PlanCmd {
    /// Validate a plan file; prints every problem found.
    Check { plan: PathBuf },
}

/// A failure with its exit code.
struct Fail(i32, String);

impl<E: std::fmt::Display> From<E> for Fail {
    fn from(e: E) -> Self {
        Fail(1, e.to_string())
    }
}

fn usage(e: impl std::fmt::Display) -> Fail {
    Fail(2, e.to_string())
}

pub fn main() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return code;
        }
    };
    crate::service::init_logging();
    match run(cli.cmd) {
        Ok(()) => 0,
        Err(Fail(code, msg)) => {
            eprintln!("harness: {msg}");
            code
        }
    }
}

fn home() -> Result<Home, Fail> {
    Home::from_env().map_err(Fail::from)
}

fn pointer(home: &Home, run: &str) -> Result<Pointer, Fail> {
    let run = RunId::parse(run).map_err(usage)?;
    registry::read(home, &run).map_err(Fail::from)
}

fn print_json(v: &impl serde::Serialize) {
    out(&serde_json::to_string_pretty(v).unwrap_or_default());
}

/// Prints one line to stdout. A closed pipe (`harness … | head`) ends the process quietly instead of
/// panicking like `println!` would.
pub fn out(line: &str) {
    use std::io::Write;
    let mut o = std::io::stdout().lock();
    if writeln!(o, "{line}").and_then(|_| o.flush()).is_err() {
        std::process::exit(0);
    }
}

fn run(cmd: Cmd) -> Result<(), Fail> {
    match cmd {
        Cmd::Api { listen, unix, allow_origin, heartbeat, stream_buffer, slow_client_grace } => {
            api(listen, unix, allow_origin, heartbeat, stream_buffer, slow_client_grace)
        }
        Cmd::Registry(RegistryCmd::Add { repo, worktree, slug, plane, runstate_dir, project }) => {
            let slug = Slug::parse(&slug).map_err(usage)?;
            let plane = match plane.as_str() {
                "standalone" => Plane::Standalone,
                "dynwf" => Plane::Dynwf,
                other => {
                    return Err(usage(format!("--plane {other:?}: expected standalone or dynwf")));
                }
            };
            let reg = registry::Registration {
                repo_root: &repo,
                worktree: worktree.as_deref(),
                slug: &slug,
                plane,
                runstate_dir: runstate_dir.as_deref(),
                project: project.as_deref(),
            };
            print_json(&registry::register(&home()?, &reg)?);
            Ok(())
        }
        Cmd::Registry(RegistryCmd::List) => {
            let (found, skipped) = registry::enumerate(&home()?)?;
            registry::log_skipped(&skipped);
            print_json(&found);
            Ok(())
        }
        Cmd::Journal(JournalCmd::Append { run, record }) => {
            let p = pointer(&home()?, &run)?;
            let mut v: serde_json::Value =
                serde_json::from_str(&record).map_err(|e| usage(format!("record is not JSON: {e}")))?;
            let obj = v.as_object_mut().ok_or_else(|| usage("record must be a JSON object"))?;
            obj.entry("v").or_insert_with(|| journal::VERSION.into());
            obj.entry("ts").or_insert_with(|| journal::now_rfc3339().into());
            let rec: journal::Record = serde_json::from_value(v).map_err(|e| usage(format!("invalid record: {e}")))?;
            let line = Journal::open(&p.journal_path())?.append(&rec)?;
            out(&line.to_string());
            Ok(())
        }
        Cmd::Journal(JournalCmd::Show { run }) => {
            let p = pointer(&home()?, &run)?;
            print_json(&journal::replay(&p.journal_path())?);
            Ok(())
        }
        Cmd::Journal(JournalCmd::Reconcile { run }) => {
            let p = pointer(&home()?, &run)?;
            let view = journal::replay(&p.journal_path())?;
            let live = liveness::get(&p.liveness_path()).ok().flatten();
            let report = journal::reconcile(
                &view,
                |sha| crate::git::commit_exists(&p.worktree, sha),
                |t| live.as_ref().and_then(|l| l.tasks.get(t)).is_some_and(|r| liveness::pid_alive(r.pid)),
            );
            print_json(&report);
            if report.is_clean() { Ok(()) } else { Err(Fail(3, "journal reconcile found discrepancies".into())) }
        }
        Cmd::Liveness(LivenessCmd::Set { run, task, record }) => {
            let p = pointer(&home()?, &run)?;
            let task = TaskId::parse(&task).map_err(usage)?;
            let rec: TaskLiveness =
                serde_json::from_str(&record).map_err(|e| usage(format!("invalid liveness record: {e}")))?;
            liveness::set(&p.liveness_path(), &p.run_id, &task, rec)?;
            Ok(())
        }
        Cmd::Liveness(LivenessCmd::Get { run, task }) => {
            let p = pointer(&home()?, &run)?;
            let l = liveness::get(&p.liveness_path())?;
            match task {
                None => print_json(&l),
                Some(t) => {
                    let t = TaskId::parse(&t).map_err(usage)?;
                    print_json(&l.and_then(|l| l.tasks.get(&t).cloned()));
                }
            }
            Ok(())
        }
        Cmd::Liveness(LivenessCmd::Reap { run }) => {
            let p = pointer(&home()?, &run)?;
            let view = journal::replay(&p.journal_path())?;
            print_json(&liveness::reap(&p.liveness_path(), &p.run_id, &view)?);
            Ok(())
        }
        Cmd::Install { user: _, bin, print, unit_dir } => {
            let bin = match bin {
                Some(b) => b,
                None => std::env::current_exe()?,
            };
            let msg = crate::install::install(&bin, &home()?, unit_dir.as_deref(), print).map_err(|e| Fail(1, e))?;
            if !msg.is_empty() {
                out(&msg);
            }
            Ok(())
        }
        Cmd::Plist { which, bin } => {
            let bin = match bin {
                Some(b) => b,
                None => std::env::current_exe()?,
            };
            let home = home()?;
            let text = if which == "api" {
                crate::launchd::api_plist(&bin, &home)
            } else {
                crate::launchd::supervisor_plist(&bin, &home, &RunId::parse(&which).map_err(usage)?)
            };
            out(text.trim_end());
            Ok(())
        }
        Cmd::Uninstall { user: _, unit_dir } => {
            out(&crate::install::uninstall(unit_dir.as_deref()).map_err(|e| Fail(1, e))?);
            Ok(())
        }
        Cmd::Demo { dir, listen, pace } => crate::demo::run(dir, listen, &pace).map_err(|e| Fail(1, e)),
        Cmd::Run { plan, repo, worktree, project, supervised, foreground, register_only, tuning } => {
            run_plan(&plan, repo, worktree, project, supervised || register_only, foreground, register_only, &tuning)
        }
        Cmd::Supervise { run, tuning } => supervise(&run, &tuning),
        Cmd::Runs { api, json } => runs(&api, json),
        Cmd::Show { run, api, json } => show(&run, &api, json),
        Cmd::Watch { run, task, api, json, after, until_exit } => watch(&run, &task, &api, json, after, until_exit),
        Cmd::Steer { run, task, msg, interrupt, api } => {
            let body = serde_json::json!({"msg": msg, "interrupt": interrupt, "by": "cli"});
            post(
                &api,
                &format!(
                    "/runs/{}/tasks/{}/steer",
                    RunId::parse(&run).map_err(usage)?,
                    TaskId::parse(&task).map_err(usage)?
                ),
                body,
            )
        }
        Cmd::Kill { run, task, api } => post(
            &api,
            &format!(
                "/runs/{}/tasks/{}/kill",
                RunId::parse(&run).map_err(usage)?,
                TaskId::parse(&task).map_err(usage)?
            ),
            serde_json::json!({"by": "cli"}),
        ),
        Cmd::Pause { run, api } => {
            post(&api, &format!("/runs/{}/pause", RunId::parse(&run).map_err(usage)?), serde_json::json!({"by": "cli"}))
        }
        Cmd::Resume { run, api } => post(
            &api,
            &format!("/runs/{}/resume", RunId::parse(&run).map_err(usage)?),
            serde_json::json!({"by": "cli"}),
        ),
        Cmd::Stop { run } => control_verb(&run, "stop"),
        Cmd::Status { run } => control_verb(&run, "status"),
        Cmd::Inbox(InboxCmd::Append { run, verb, task, msg, interrupt, by }) => {
            let p = pointer(&home()?, &run)?;
            let verb = match verb.as_str() {
                "steer" => journal::Verb::Steer,
                "kill" => journal::Verb::Kill,
                "pause" => journal::Verb::Pause,
                "resume" => journal::Verb::Resume,
                "stop" => journal::Verb::Stop,
                other => return Err(usage(format!("unknown verb {other:?}: steer, pause or resume"))),
            };
            let task = task.map(|t| TaskId::parse(&t)).transpose().map_err(usage)?;
            let e = crate::inbox::append(&p, verb, task, msg, interrupt, &by)
                .map_err(|e| Fail(if e.status == 400 { 2 } else { 1 }, e.detail))?;
            print_json(&e);
            Ok(())
        }
        Cmd::Inbox(InboxCmd::Take { run }) => {
            let p = pointer(&home()?, &run)?;
            let taken = crate::inbox::take(&p).map_err(|e| Fail(1, e.detail))?;
            print_json(&taken);
            Ok(())
        }
        Cmd::NormalizeEvents { adapter, run, task, session, first_line, observed_ts } => {
            let adapter: crate::adapter::Adapter = adapter.parse().map_err(usage)?;
            if first_line == 0 {
                return Err(usage("--first-line is 1-based"));
            }
            if let Some(ts) = &observed_ts {
                humantime::parse_rfc3339_weak(ts).map_err(|e| usage(format!("--observed-ts {ts:?}: {e}")))?;
            }
            normalize_events(adapter, &run, &task, session.as_deref(), first_line, observed_ts.as_deref())
        }
        Cmd::Plan(PlanCmd::Check { plan }) => {
            let p = Plan::load(&plan).map_err(usage)?;
            out(&format!("ok: plan {} with {} tasks in {} waves", p.slug, p.tasks.len(), p.waves().len()));
            Ok(())
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn run_plan(
    plan: &std::path::Path,
    repo: Option<PathBuf>,
    worktree: Option<PathBuf>,
    project: Option<String>,
    supervised: bool,
    foreground: bool,
    register_only: bool,
    tuning: &Tuning,
) -> Result<(), Fail> {
    if foreground && !supervised {
        return Err(usage("--foreground needs --supervised (an unsupervised run always runs in the foreground)"));
    }
    let home = home()?;
    let launch = crate::runner::Launch {
        plan_path: plan,
        repo: repo.as_deref(),
        worktree: worktree.as_deref(),
        project: project.as_deref(),
        supervised,
    };
    let (plan, p) = crate::runner::register(&home, &launch).map_err(|e| match e {
        crate::runner::RunError::Invalid(d) => Fail(2, d),
        crate::runner::RunError::Failed(d) => Fail(1, d),
    })?;
    let id = p.run_id.clone();
    let watch = |how: &str| {
        out(&format!("run {id} started ({how})"));
        out(&format!("  status:  curl -s 127.0.0.1:7878/runs/{id}    (with `harness api` running)"));
        if let Some(t) = plan.tasks.first() {
            out(&format!("  watch:   harness watch {id} {}", t.id));
            out(&format!("  steer:   harness steer {id} {} \"message\"", t.id));
            out(&format!("  kill:    harness kill {id} {}", t.id));
        }
        out(&format!("  pause:   harness pause {id}      stop: harness stop {id}"));
    };
    if register_only {
        out(&id.to_string());
        return Ok(());
    }
    if !supervised {
        out(&format!("run {id} started (batch, foreground)"));
        let mut opts = tuning.options();
        opts.batch = true;
        return finish_supervise(&id, home, opts);
    }
    if foreground {
        watch("supervised in this process");
        return finish_supervise(&id, home, tuning.options());
    }
    #[cfg(target_os = "macos")]
    {
        let bin = std::env::current_exe()?;
        let how = crate::launchd::start_run_agent(&bin, &home, &id).map_err(|e| Fail(1, e))?;
        watch(&how);
        return Ok(());
    }
    #[allow(unreachable_code)]
    let how = if crate::runner::systemd_units_available() {
        crate::runner::start_with_systemd(&home, &id)
    } else {
        crate::runner::start_detached(&home, &p, &tuning.args(), &[])
    }
    .map_err(|e| Fail(1, e.to_string()))?;
    watch(&how);
    Ok(())
}

fn supervise(run: &str, tuning: &Tuning) -> Result<(), Fail> {
    let id = RunId::parse(run).map_err(usage)?;
    let mut opts = tuning.options();
    // Socket activation: the service manager passes the bound socket as fd 3. Taken here, before
    // the runtime's threads exist (listenfd edits the environment).
    for a in crate::service::take_activated() {
        match a {
            crate::service::Activated::Unix(l) if opts.listener.is_none() => opts.listener = Some(l),
            _ => eprintln!("harness: supervise takes one Unix socket; ignoring another passed socket"),
        }
    }
    finish_supervise(&id, home()?, opts)
}

fn finish_supervise(id: &RunId, home: Home, opts: crate::supervisor::Options) -> Result<(), Fail> {
    let batch = opts.batch;
    let rt = tokio::runtime::Runtime::new()?;
    let ending = rt
        .block_on(crate::supervisor::supervise(home, id.clone(), opts, crate::service::terminated()))
        .map_err(|e| Fail(1, e.to_string()))?;
    use crate::supervisor::Ending;
    match ending {
        Ending::Finished => out(&format!("run {id} finished")),
        Ending::AlreadyOver(d) => out(&d),
        Ending::Interrupted => {
            out(&format!("run {id}: supervisor interrupted; running turns were killed and will be re-dispatched"))
        }
        Ending::Failed(d) => {
            // A supervisor exits 0 on a clean ending (a restart would not help); batch reports it.
            if batch {
                return Err(Fail(1, format!("run {id} failed: {d}")));
            }
            out(&format!("run {id} failed: {d}"));
        }
    }
    Ok(())
}

fn client_rt() -> Result<tokio::runtime::Runtime, Fail> {
    Ok(tokio::runtime::Builder::new_current_thread().enable_all().build()?)
}

/// Turns an API answer into output or a one-line error with the API's detail.
fn api_answer(status: u16, body: &[u8]) -> Result<serde_json::Value, Fail> {
    let v: serde_json::Value = serde_json::from_slice(body).unwrap_or(serde_json::Value::Null);
    if (200..300).contains(&status) {
        return Ok(v);
    }
    let detail = v["detail"].as_str().map(str::to_string).unwrap_or_else(|| String::from_utf8_lossy(body).into_owned());
    Err(Fail(1, format!("{status}: {detail}")))
}

fn unreachable(e: crate::client::Unreachable) -> Fail {
    Fail(4, format!("{e} (start it with `harness api`, or pass --api ADDR)"))
}

fn runs(api: &ApiArgs, json: bool) -> Result<(), Fail> {
    let c = api.client()?;
    let (status, body) = client_rt()?.block_on(c.call("GET", "/runs", None)).map_err(unreachable)?;
    let v = api_answer(status, &body)?;
    if json {
        print_json(&v);
        return Ok(());
    }
    out(&format!("{:<40} {:<9} {:>5} {:>9} {:<5} {}", "RUN", "STATUS", "WAVE", "DONE", "LIVE", "PROJECT/BRANCH"));
    for r in v.as_array().into_iter().flatten() {
        out(&format!(
            "{:<40} {:<9} {:>5} {:>9} {:<5} {}{}",
            r["runId"].as_str().unwrap_or(""),
            r["status"].as_str().unwrap_or(""),
            r["wave"].as_u64().map(|w| format!("{w}/{}", r["waves"].as_u64().unwrap_or(0))).unwrap_or_default(),
            format!("{}/{}", r["counts"]["committed"].as_u64().unwrap_or(0), r["tasks"].as_u64().unwrap_or(0)),
            if r["live"] == true { "yes" } else { "no" },
            r["project"].as_str().unwrap_or(""),
            r["branch"].as_str().map(|b| format!(" ({b})")).unwrap_or_default(),
        ));
    }
    Ok(())
}

fn show(run: &str, api: &ApiArgs, json: bool) -> Result<(), Fail> {
    let id = RunId::parse(run).map_err(usage)?;
    let c = api.client()?;
    let (status, body) = client_rt()?.block_on(c.call("GET", &format!("/runs/{id}"), None)).map_err(unreachable)?;
    let v = api_answer(status, &body)?;
    if json {
        print_json(&v);
        return Ok(());
    }
    out(&format!(
        "run {id} · {} · {}{} · {}",
        v["status"].as_str().unwrap_or(""),
        v["repoRoot"].as_str().unwrap_or(""),
        v["branch"].as_str().map(|b| format!(" ({b})")).unwrap_or_default(),
        if v["live"] == true { "supervised, live" } else { "not live" }
    ));
    for w in v["plan"]["waves"].as_array().into_iter().flatten() {
        out(&format!("wave {}", w["wave"]));
        for t in w["tasks"].as_array().into_iter().flatten() {
            out(&format!(
                "  {:<16} {:<7} {:<11} {}",
                t["id"].as_str().unwrap_or(""),
                t["adapter"].as_str().unwrap_or(""),
                t["state"].as_str().unwrap_or(""),
                t["detail"].as_str().unwrap_or("")
            ));
        }
    }
    Ok(())
}

fn watch(
    run: &str,
    task: &str,
    api: &ApiArgs,
    json: bool,
    after: Option<String>,
    until_exit: bool,
) -> Result<(), Fail> {
    let id = RunId::parse(run).map_err(usage)?;
    let task = TaskId::parse(task).map_err(usage)?;
    if let Some(a) = &after {
        crate::events::Seq::parse(a).map_err(usage)?;
    }
    let c = api.client()?;
    let rt = client_rt()?;
    let mut r = crate::render::Renderer::default();
    let mut print = |data: &str| -> bool {
        let v: serde_json::Value = serde_json::from_str(data).unwrap_or(serde_json::Value::Null);
        if json {
            out(data);
        } else {
            use std::io::Write;
            let text = r.render(&v);
            let mut o = std::io::stdout().lock();
            if o.write_all(text.as_bytes()).and_then(|_| o.flush()).is_err() {
                std::process::exit(0);
            }
        }
        !(until_exit && v["type"] == "exit")
    };
    let path = format!("/runs/{id}/tasks/{task}/stream");
    let status = rt.block_on(c.follow(&path, after.clone(), |e| print(&e.data))).map_err(unreachable)?;
    if status == 200 {
        return Ok(());
    }
    if status != 409 {
        let (s, body) = rt.block_on(c.call("GET", &path, None)).map_err(unreachable)?;
        return api_answer(s, &body).map(|_| ());
    }
    // Not live: print what the log holds (the durable pages) and say so.
    eprintln!("harness: run {id} is not live; its recorded events:");
    let mut cursor = after;
    loop {
        let q = match &cursor {
            Some(a) => format!("/runs/{id}/tasks/{task}/events?after={a}&limit=5000"),
            None => format!("/runs/{id}/tasks/{task}/events?limit=5000"),
        };
        let (s, body) = rt.block_on(c.call("GET", &q, None)).map_err(unreachable)?;
        if s != 200 {
            return api_answer(s, &body).map(|_| ());
        }
        let text = String::from_utf8_lossy(&body).into_owned();
        let mut n = 0;
        for line in text.lines() {
            n += 1;
            let v: serde_json::Value = serde_json::from_str(line).unwrap_or(serde_json::Value::Null);
            cursor = Some(match &v["seq"] {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            });
            if !print(line) {
                return Ok(());
            }
        }
        if n < 5000 {
            return Ok(());
        }
    }
}

fn post(api: &ApiArgs, path: &str, body: serde_json::Value) -> Result<(), Fail> {
    let c = api.client()?;
    let (status, bytes) = client_rt()?.block_on(c.call("POST", path, Some(&body))).map_err(unreachable)?;
    let v = api_answer(status, &bytes)?;
    out(v["detail"].as_str().map(str::to_string).unwrap_or_else(|| v.to_string()).as_str());
    Ok(())
}

fn control_verb(run: &str, verb: &str) -> Result<(), Fail> {
    let home = home()?;
    let p = pointer(&home, run)?;
    let sock = home.socket_path(&p.run_id);
    let req = crate::supervisor::control::Request {
        verb: verb.into(),
        task: None,
        msg: None,
        interrupt: None,
        by: Some("cli".into()),
    };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let resp = rt
        .block_on(crate::supervisor::control::request(&sock, &req, std::time::Duration::from_secs(30)))
        .map_err(|e| Fail(1, format!("run {} is not live ({e})", p.run_id)))?;
    print_json(&resp);
    if resp["ok"] == true { Ok(()) } else { Err(Fail(1, resp["detail"].as_str().unwrap_or("refused").to_string())) }
}

/// Streams stdin through the normalizer. Lines are split in place in a large read buffer (no
/// per-line copy); output is written whenever no more input is waiting, so the command works both as
/// a live filter and at bulk speed. A final line without a newline is normalized at EOF.
fn normalize_events(
    adapter: crate::adapter::Adapter,
    run: &str,
    task: &str,
    session: Option<&str>,
    first_line: u64,
    fixed_ts: Option<&str>,
) -> Result<(), Fail> {
    use std::io::{Read, Write};
    const CHUNK: usize = 1 << 20;
    let writer = crate::events::Writer::new(run, task);
    let mut stdin = std::io::stdin().lock();
    let mut stdout = std::io::stdout().lock();
    // buf[..filled] holds unread input; it grows only for a line longer than the buffer.
    let mut buf: Vec<u8> = vec![0; 2 * CHUNK];
    let mut filled = 0;
    let mut out: Vec<u8> = Vec::with_capacity(2 * CHUNK);
    let mut line_no = first_line;
    let mut eof = false;
    while !eof {
        if buf.len() - filled < CHUNK {
            buf.resize(filled + CHUNK, 0);
        }
        let n = loop {
            match stdin.read(&mut buf[filled..]) {
                Ok(n) => break n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e.into()),
            }
        };
        let fresh = filled;
        filled += n;
        eof = n == 0;
        // Complete lines (all of the rest at EOF). Only the new bytes can hold a new newline.
        let complete =
            if eof { filled } else { memchr::memrchr(b'\n', &buf[fresh..filled]).map_or(0, |i| fresh + i + 1) };
        if complete > 0 {
            let now;
            let observed_ts = match fixed_ts {
                Some(t) => t,
                None => {
                    now = journal::now_rfc3339();
                    &now
                }
            };
            let ctx = crate::normalize::Context { run, task, session, observed_ts };
            let mut rest = &buf[..complete];
            while !rest.is_empty() {
                let end = memchr::memchr(b'\n', rest).map_or(rest.len(), |i| i + 1);
                for e in crate::normalize::normalize_line(adapter, line_no, &rest[..end], &ctx) {
                    writer.write_line(&e, &mut out);
                }
                line_no += 1;
                rest = &rest[end..];
            }
            buf.copy_within(complete..filled, 0);
            filled -= complete;
        }
        if (n < CHUNK || out.len() >= CHUNK || eof) && !out.is_empty() {
            if stdout.write_all(&out).and_then(|_| stdout.flush()).is_err() {
                return Ok(()); // stdout closed: nobody is listening any more
            }
            out.clear();
        }
    }
    Ok(())
}

/// Tells whoever started a daemon where it listens; a closed stdout is not the daemon's problem.
fn announce(line: &str) {
    use std::io::Write;
    let mut o = std::io::stdout().lock();
    let _ = writeln!(o, "{line}").and_then(|_| o.flush());
}

/// The default API address: `$HARNESS_API_ADDR` or 127.0.0.1:7878.
fn default_api_addr() -> Result<SocketAddr, Fail> {
    match std::env::var("HARNESS_API_ADDR") {
        Ok(s) if !s.is_empty() => s.parse().map_err(|e| usage(format!("HARNESS_API_ADDR {s:?}: {e}"))),
        _ => Ok(SocketAddr::from(([127, 0, 0, 1], 7878))),
    }
}

/// The API token: `$HARNESS_API_TOKEN`, else `$HARNESS_HOME/api.token` (which must be mode 0600).
pub fn api_token(home: &Home) -> Result<Option<String>, String> {
    if let Ok(t) = std::env::var("HARNESS_API_TOKEN")
        && !t.trim().is_empty()
    {
        return Ok(Some(t.trim().to_string()));
    }
    let path = home.root.join("api.token");
    match std::fs::read_to_string(&path) {
        Ok(t) => {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).map(|m| m.permissions().mode() & 0o777).unwrap_or(0);
            if mode & 0o077 != 0 {
                return Err(format!(
                    "{} is mode {mode:o}: others can read it; chmod 600 {}",
                    path.display(),
                    path.display()
                ));
            }
            let t = t.trim().to_string();
            if t.is_empty() {
                return Err(format!("{} is empty", path.display()));
            }
            Ok(Some(t))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

fn api(
    listen: Vec<SocketAddr>,
    unix: Option<PathBuf>,
    mut allow_origin: Vec<String>,
    heartbeat: std::time::Duration,
    stream_buffer: usize,
    slow_client_grace: std::time::Duration,
) -> Result<(), Fail> {
    if !(2..=1_000_000).contains(&stream_buffer) {
        return Err(usage("--stream-buffer must be between 2 and 1000000 events"));
    }
    let home = home()?;
    let token = api_token(&home).map_err(usage)?;
    let addrs = if listen.is_empty() { vec![default_api_addr()?] } else { listen };
    for a in &addrs {
        if !a.ip().is_loopback() && token.is_none() {
            return Err(usage(format!(
                "--listen {a}: a non-loopback address needs a token (HARNESS_API_TOKEN or $HARNESS_HOME/api.token)"
            )));
        }
    }
    if let Ok(env) = std::env::var("HARNESS_API_ALLOW_ORIGINS") {
        allow_origin.extend(env.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_string));
    }
    let mut origins = Vec::new();
    for o in &allow_origin {
        let n = crate::api::guard::normalize_origin(o)
            .ok_or_else(|| usage(format!("--allow-origin {o:?}: expected scheme://host[:port]")))?;
        origins.push(n);
    }
    if heartbeat.is_zero() || heartbeat > std::time::Duration::from_secs(10) {
        return Err(usage("--heartbeat must be between 1ms and 10s (proxies drop idle streams)"));
    }
    let cfg = crate::api::Config {
        allow_origins: origins,
        token,
        heartbeat,
        stream_buffer,
        slow_client_grace,
        ..Default::default()
    };
    crate::service::raise_fd_limit();
    // Socket activation: take the fds before the runtime's threads exist.
    let activated = crate::service::take_activated();
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async move {
        let mut listeners = Vec::new();
        for a in activated {
            match a {
                crate::service::Activated::Tcp(l) => {
                    announce(&format!("listening on http://{} (socket activation)", l.local_addr()?));
                    listeners.push(crate::api::Listener::Tcp(tokio::net::TcpListener::from_std(l)?));
                }
                crate::service::Activated::Unix(l) => {
                    announce("listening on a Unix socket (socket activation)");
                    listeners.push(crate::api::Listener::Unix(tokio::net::UnixListener::from_std(l)?));
                }
            }
        }
        let activated = !listeners.is_empty();
        for a in addrs.iter().filter(|_| !activated) {
            let l =
                tokio::net::TcpListener::bind(a).await.map_err(|e| Fail(1, format!("cannot listen on {a}: {e}")))?;
            announce(&format!("listening on http://{}", l.local_addr()?));
            listeners.push(crate::api::Listener::Tcp(l));
        }
        if let Some(path) = unix.filter(|_| !activated) {
            let _ = std::fs::remove_file(&path);
            let l = tokio::net::UnixListener::bind(&path)
                .map_err(|e| Fail(1, format!("cannot listen on {}: {e}", path.display())))?;
            announce(&format!("listening on unix:{}", path.display()));
            listeners.push(crate::api::Listener::Unix(l));
        }
        let (tx, rx) = tokio::sync::watch::channel(false);
        let api = std::sync::Arc::new(crate::api::Api::new(home.clone(), cfg, rx.clone()));
        let reload = api.clone();
        tokio::spawn(async move {
            // SIGHUP re-reads the token (rotation without a restart); SIGTERM/SIGINT stop.
            crate::service::terminated_or(move || match api_token(&home) {
                Ok(t) => {
                    tracing::info!(token = t.is_some(), "SIGHUP: token re-read");
                    *reload.token.write().unwrap_or_else(|p| p.into_inner()) = t;
                }
                Err(e) => tracing::error!(error = %e, "SIGHUP: token not reloaded, keeping the old one"),
            })
            .await;
            crate::service::notify(&[sd_notify::NotifyState::Stopping]);
            let _ = tx.send(true);
        });
        let n = listeners.len();
        let a2 = api.clone();
        // READY once serving; the watchdog is fed from the runtime that serves, so a hung runtime
        // is restarted; STATUS says what is going on.
        tokio::spawn(async move {
            crate::service::notify(&[sd_notify::NotifyState::Ready]);
            let period = crate::service::watchdog_interval().unwrap_or(std::time::Duration::from_secs(5));
            loop {
                let status = format!(
                    "serving {n} listener(s); {} SSE stream(s) open",
                    a2.streams.load(std::sync::atomic::Ordering::Relaxed)
                );
                crate::service::notify(&[sd_notify::NotifyState::Watchdog, sd_notify::NotifyState::Status(&status)]);
                tokio::time::sleep(period).await;
            }
        });
        crate::api::serve(api, listeners, rx, std::time::Duration::from_secs(5)).await;
        Ok::<(), Fail>(())
    })
}
