//! The `harness` command line: argument parsing (clap) and dispatch. Each arm hands its arguments to
//! the module that does the work (`local` for commands over a run's files, `remote` for the API and
//! the control socket, `start` for the daemons, runs and the demo) and every failure becomes one
//! stderr line plus an exit code (`CliError`). No business logic lives here.
//!
//! Exit codes (`exit::cli`): 0 success, 1 the operation failed or was refused, 2 usage error (bad
//! arguments or ids), 3 `journal reconcile` found discrepancies, 4 the API could not be reached.

mod error;
mod local;
mod remote;
mod runref;
mod start;
mod top;

use crate::client::Client;
use crate::config;
use crate::control::{self, Act};
use crate::engine::Adapter;
use crate::os::home::Home;
use crate::state::journal::Verb;
use crate::state::registry::Plane;
use crate::timeouts;
use clap::{Parser, Subcommand};
pub use error::CliError;
use error::usage;
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
        /// non-loopback address needs --allow-remote and a configured token.
        #[arg(long)]
        listen: Vec<SocketAddr>,
        /// Allow a non-loopback --listen (also HARNESS_API_ALLOW_REMOTE=1); the token is then
        /// required of every client.
        #[arg(long)]
        allow_remote: bool,
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
        pace: crate::demo::Pace,
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
        /// The run's slug (default: the plan's, or `<slug>-2`, `-3`… when a run of the plan has
        /// ended in this worktree; its history is kept).
        #[arg(long)]
        slug: Option<String>,
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
    /// List runs (via the API), newest activity first; every run unless --limit.
    Runs {
        #[command(flatten)]
        api: ApiArgs,
        #[command(flatten)]
        filter: RunsFilter,
        /// Print at most this many runs (default: every run, fetched page by page).
        #[arg(long)]
        limit: Option<u64>,
        /// Print the API's JSON (one array of every row printed).
        #[arg(long)]
        json: bool,
    },
    /// A live dashboard of every run and its tasks (state, wave, cost, idle, pause reason, stall
    /// marks), redrawn on each journal change (/watch); keys pause/resume, steer, kill, set a budget
    /// and open a task's live stream. `--once` prints one frame as plain text and exits.
    Top {
        /// Print one frame and exit (for scripts and tests).
        #[arg(long)]
        once: bool,
        /// With --once: only runs that are not over (finished or failed).
        #[arg(long)]
        active: bool,
        #[command(flatten)]
        api: ApiArgs,
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
    /// What a task changed (its commit, or its worktree against its base while it works), or with
    /// no TASK the run's own commits: a unified diff, through $PAGER (`less -FRX`) on a terminal.
    Diff {
        /// The run (its id, slug or an id prefix).
        run: String,
        /// The task (omitted: the whole run's own change).
        task: Option<String>,
        #[command(flatten)]
        api: ApiArgs,
        /// The paths changed, with lines added and removed, instead of the diff.
        #[arg(long)]
        stat: bool,
        /// With --stat: the JSON the API answers.
        #[arg(long, requires = "stat")]
        json: bool,
    },
    /// Send a message to a task: into its running turn when it is live, else queued for its next
    /// turn (resume of its session).
    Steer {
        run: String,
        task: String,
        /// The message (may be left out when --comment is given).
        msg: Option<String>,
        /// Kill the current turn first.
        #[arg(long)]
        interrupt: bool,
        /// A review comment on the task's change, quoted in the message with its file and line
        /// (repeatable): `--comment src/a.rs:12 "off by one"`; a PATH without `:LINE` is the file.
        #[arg(long = "comment", num_args = 2, value_names = ["PATH:LINE", "TEXT"], action = clap::ArgAction::Append)]
        comment: Vec<String>,
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
    /// End a live task's running turn without killing it (its session stays whole: a steer resumes it).
    Interrupt {
        run: String,
        task: String,
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Re-dispatch a halted task: its session resumed with its prompt, else a fresh start.
    Retry {
        run: String,
        task: String,
        #[command(flatten)]
        api: ApiArgs,
    },
    /// End a halted task as skipped, so its wave (and the run) can go on; its work is kept.
    Skip {
        run: String,
        task: String,
        /// Why it is skipped (journaled).
        #[arg(long)]
        reason: String,
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
    /// Set a run's budget in US dollars (or a task's, with --task); a run paused by its budget
    /// resumes once no budget is reached.
    Budget {
        run: String,
        /// The new budget, US dollars (e.g. 5 or 2.50).
        usd: f64,
        #[arg(long)]
        task: Option<String>,
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Stop a supervised run: kill its running tasks; the run ends failed.
    Stop { run: String },
    /// Ask a run's supervisor for its status (over the control socket).
    Status { run: String },
    /// Print the API's bearer token (made when there is none): what another uid, or a browser tab of
    /// another user, presents. The API's own uid needs none.
    Token {
        /// Print the API's URL with `?token=` instead (for a browser tab).
        #[arg(long)]
        url: bool,
    },
    /// Remove a run's task worktrees, task branches and refs (what its supervisor removes when the
    /// run ends): those of integrated tasks, and those holding no work. What holds a task's
    /// unintegrated work is kept and listed, unless --force. Refused while the run's supervisor is
    /// live.
    Clean {
        run: String,
        /// Remove unintegrated task work too (worktrees, branches, kept attempts).
        #[arg(long)]
        force: bool,
    },
    /// Remove finished and failed runs whose last activity is older than an age: their pointer,
    /// summary and runstate files (journal, plan, logs…), or only their logs with --logs-only. Never a
    /// live or paused run, never git. Without --finished-before: $HARNESS_HOME/retention.json.
    Prune {
        /// An age: 30d, 12h, 2w, 90m.
        #[arg(long, value_name = "AGE")]
        finished_before: Option<String>,
        /// Remove only the task logs (and the supervisor's log), keeping journal, plan and usage.
        #[arg(long)]
        logs_only: bool,
        /// Print what would be removed; remove nothing.
        #[arg(long)]
        dry_run: bool,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// The DynWF inbox of a run (DynWF runs have no supervisor socket).
    #[command(subcommand)]
    Inbox(InboxCmd),
    /// A run's tool calls asked of the operator (plan approvals: "ask"), pending ones unless --all.
    Approvals {
        run: String,
        /// Every approval, decided and expired ones too.
        #[arg(long)]
        all: bool,
        /// Print the API's JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Allow an asked tool call.
    Approve {
        run: String,
        task: String,
        id: String,
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Deny an asked tool call; the model reads the message.
    Deny {
        run: String,
        task: String,
        id: String,
        /// What the model is told (default: "Denied by cli.").
        #[arg(long)]
        message: Option<String>,
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Interactive claude sessions on the live channel.
    #[command(subcommand)]
    Session(SessionCmd),
    /// Notifications ($HARNESS_HOME/notify.json; spec/NOTIFY.md).
    #[command(subcommand)]
    Notify(NotifyCmd),
    /// The MCP permission tool a batch claude turn asks through (started by claude; not for people).
    #[command(hide = true)]
    ApprovalMcp {
        #[arg(long)]
        socket: std::path::PathBuf,
        #[arg(long)]
        task: String,
        /// Seconds to wait for a decision.
        #[arg(long, default_value_t = 660)]
        wait: u64,
    },
    /// Plumbing for the wrappers: run CMD with its stdout appended to LOG and each line's arrival
    /// time to LOG.times (exits with CMD's code).
    #[command(hide = true)]
    Stamp {
        #[arg(long)]
        log: PathBuf,
        #[arg(last = true, required = true)]
        cmd: Vec<std::ffi::OsString>,
    },
    /// Normalize an engine's raw stream (stdin) into events/v1 JSON lines (stdout).
    NormalizeEvents {
        /// claude, cursor or codex.
        #[arg(value_parser = |s: &str| s.parse::<Adapter>())]
        adapter: Adapter,
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

/// Which runs `harness runs` lists (each one `GET /runs`'s filter of the same name).
#[derive(clap::Args, Clone, Default)]
pub(crate) struct RunsFilter {
    /// Only runs in this status (pending, running, paused, finished, failed); repeatable.
    #[arg(long)]
    status: Vec<String>,
    /// Only runs whose supervisor is (true) or is not (false) alive.
    #[arg(long)]
    live: Option<bool>,
    #[arg(long)]
    project: Option<String>,
    #[arg(long)]
    repo: Option<String>,
    #[arg(long)]
    branch: Option<String>,
    /// standalone or dynwf.
    #[arg(long)]
    plane: Option<String>,
    /// A substring of the slug or the runId.
    #[arg(long, short = 'q')]
    query: Option<String>,
    /// Only runs with activity after this time (RFC 3339) or age (15m, 2h, 7d).
    #[arg(long)]
    since: Option<String>,
}

impl RunsFilter {
    /// The filter as `GET /runs` query parameters (encoded).
    pub(crate) fn query(&self) -> String {
        use crate::client::query_value as enc;
        let mut q: Vec<String> = self.status.iter().map(|s| format!("status={}", enc(s))).collect();
        if let Some(l) = self.live {
            q.push(format!("live={l}"));
        }
        for (k, v) in [
            ("project", &self.project),
            ("repo", &self.repo),
            ("branch", &self.branch),
            ("plane", &self.plane),
            ("q", &self.query),
            ("since", &self.since),
        ] {
            if let Some(v) = v {
                q.push(format!("{k}={}", enc(v)));
            }
        }
        q.join("&")
    }
}

/// Where the API is.
#[derive(clap::Args, Clone)]
struct ApiArgs {
    /// The API address (TCP). Default: the API's Unix socket $HARNESS_HOME/sock/api.sock when it
    /// exists, else $HARNESS_API_ADDR or 127.0.0.1:7878.
    #[arg(long = "api")]
    addr: Option<SocketAddr>,
}

impl ApiArgs {
    /// The API's Unix socket when it exists (the owner needs no token there), unless `--api` or
    /// `$HARNESS_API_ADDR` choose TCP.
    fn client(&self) -> Result<Client, CliError> {
        let home = Home::from_env().ok();
        let chosen_tcp = self.addr.is_some() || std::env::var("HARNESS_API_ADDR").is_ok_and(|v| !v.is_empty());
        let unix = home.as_ref().map(|h| h.sock_dir().join("api.sock")).filter(|p| !chosen_tcp && p.exists());
        let endpoint = match (unix, self.addr) {
            (Some(path), _) => crate::client::Endpoint::Unix(path),
            (None, Some(a)) => crate::client::Endpoint::Tcp(a),
            (None, None) => crate::client::Endpoint::Tcp(config::api_addr().map_err(usage)?),
        };
        let token = home.and_then(|h| config::api_token(&h).ok().flatten());
        Ok(Client { endpoint, token })
    }
}

/// Supervisor tuning.
#[derive(clap::Args, Clone)]
struct Tuning {
    /// Stay up this long with nothing to do (halted tasks, paused) before ending the run failed.
    #[arg(long, default_value_t = timeouts::LINGER.into())]
    linger: humantime::Duration,
    /// TERM → KILL grace when killing a task's process group.
    #[arg(long, default_value_t = timeouts::KILL_GRACE.into())]
    kill_grace: humantime::Duration,
    /// Bound of one agent turn.
    #[arg(long, default_value_t = timeouts::TURN.into())]
    turn_timeout: humantime::Duration,
    /// Bound of one gate command.
    #[arg(long, default_value_t = timeouts::GATE.into())]
    gate_timeout: humantime::Duration,
}

impl Tuning {
    fn options(&self) -> crate::supervisor::Options {
        crate::supervisor::Options {
            kill_grace: *self.kill_grace,
            linger: *self.linger,
            turn_timeout_s: self.turn_timeout.as_secs().max(1),
            gate_timeout: *self.gate_timeout,
            batch: false,
            listener: None,
            stop_on_signal: false,
        }
    }
    fn args(&self) -> Vec<String> {
        let f = |d: std::time::Duration| humantime::format_duration(d).to_string().replace(' ', "");
        vec![
            "--linger".into(),
            f(*self.linger),
            "--kill-grace".into(),
            f(*self.kill_grace),
            "--turn-timeout".into(),
            f(*self.turn_timeout),
            "--gate-timeout".into(),
            f(*self.gate_timeout),
        ]
    }
}

#[derive(Subcommand)]
enum SessionCmd {
    /// Start a session: a supervised one-task claude run in DIR whose claude stays open between turns
    /// (each `harness steer` is the next message) until `harness session end` or the idle limit; then
    /// it commits like any task. Every view, stream, verb and approval works on it.
    Start {
        /// The repository (or a directory in it) to work in.
        #[arg(long)]
        cwd: PathBuf,
        /// The first message (without one the session waits for the first steer).
        #[arg(long)]
        prompt: Option<String>,
        #[arg(long)]
        model: Option<String>,
        /// With no turn running for this long, the session ends by itself.
        #[arg(long, default_value = "30m", value_parser = humantime::parse_duration)]
        idle: std::time::Duration,
        /// Supervise in this process instead of a detached one.
        #[arg(long)]
        foreground: bool,
        #[command(flatten)]
        tuning: Tuning,
    },
    /// End a session: claude finishes its turn and exits; the gate and commit follow.
    End { run: String },
}

#[derive(Subcommand)]
enum NotifyCmd {
    /// Send a sample notification to every hook, once each, and say how each went.
    Test,
}

/// `--plane`: the CLI's names for a run's control plane (the state type knows no CLI library).
#[derive(Clone, Copy, clap::ValueEnum)]
enum PlaneArg {
    Standalone,
    Dynwf,
}

impl From<PlaneArg> for Plane {
    fn from(p: PlaneArg) -> Plane {
        match p {
            PlaneArg::Standalone => Plane::Standalone,
            PlaneArg::Dynwf => Plane::Dynwf,
        }
    }
}

/// The verbs `harness inbox append` names (`other` is only ever a refusal's record).
#[derive(Clone, Copy, clap::ValueEnum)]
enum VerbArg {
    Steer,
    Kill,
    Pause,
    Resume,
    Stop,
    Interrupt,
    End,
    Budget,
}

impl From<VerbArg> for Verb {
    fn from(v: VerbArg) -> Verb {
        match v {
            VerbArg::Steer => Verb::Steer,
            VerbArg::Kill => Verb::Kill,
            VerbArg::Pause => Verb::Pause,
            VerbArg::Resume => Verb::Resume,
            VerbArg::Stop => Verb::Stop,
            VerbArg::Interrupt => Verb::Interrupt,
            VerbArg::End => Verb::End,
            VerbArg::Budget => Verb::Budget,
        }
    }
}

#[derive(Subcommand)]
enum InboxCmd {
    /// Queue a verb for a DynWF run (steer, pause, resume; kill is refused). Prints the entry.
    Append {
        run: String,
        verb: VerbArg,
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
        #[arg(long, value_enum, default_value_t = PlaneArg::Standalone)]
        plane: PlaneArg,
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

pub fn main() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { crate::exit::cli::USAGE } else { 0 };
            let _ = e.print();
            return code;
        }
    };
    crate::os::service::init_logging();
    match run(cli.cmd) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("harness: {e}");
            e.code()
        }
    }
}

/// Whether `cmd` writes in `$HARNESS_HOME` (registry, sockets, token, sessions, worktrees): such a
/// command first makes sure the home is this user's own (`Home::ensure`), so a home another uid
/// made first (say under `/tmp`) is refused with one line naming the path, before anything is
/// written or served.
fn writes_home(cmd: &Cmd) -> bool {
    matches!(
        cmd,
        Cmd::Api { .. }
            | Cmd::Registry(RegistryCmd::Add { .. })
            | Cmd::Journal(JournalCmd::Append { .. } | JournalCmd::Reconcile { .. })
            | Cmd::Liveness(LivenessCmd::Set { .. } | LivenessCmd::Reap { .. })
            | Cmd::Install { .. }
            | Cmd::Run { .. }
            | Cmd::Supervise { .. }
            | Cmd::Stop { .. }
            | Cmd::Clean { .. }
            | Cmd::Prune { .. }
            | Cmd::Token { .. }
            | Cmd::Inbox(InboxCmd::Append { .. } | InboxCmd::Take { .. })
            | Cmd::Session(SessionCmd::Start { .. })
    )
}

fn run(cmd: Cmd) -> Result<(), CliError> {
    if writes_home(&cmd) {
        crate::os::home::Home::from_env().map_err(usage)?.ensure().map_err(|e| CliError::Failed(e.to_string()))?;
    }
    match cmd {
        Cmd::Api { listen, allow_remote, unix, allow_origin, heartbeat, stream_buffer, slow_client_grace } => {
            let flags = start::ApiFlags {
                listen,
                allow_remote,
                unix,
                allow_origin,
                heartbeat,
                stream_buffer,
                slow_client_grace,
            };
            start::api(flags)
        }
        Cmd::Registry(RegistryCmd::Add { repo, worktree, slug, plane, runstate_dir, project }) => local::registry_add(
            &repo,
            worktree.as_deref(),
            &slug,
            plane.into(),
            runstate_dir.as_deref(),
            project.as_deref(),
        ),
        Cmd::Registry(RegistryCmd::List) => local::registry_list(),
        Cmd::Journal(JournalCmd::Append { run, record }) => local::journal_append(&run, &record),
        Cmd::Journal(JournalCmd::Show { run }) => local::journal_show(&run),
        Cmd::Journal(JournalCmd::Reconcile { run }) => local::journal_reconcile(&run),
        Cmd::Liveness(LivenessCmd::Set { run, task, record }) => local::liveness_set(&run, &task, &record),
        Cmd::Liveness(LivenessCmd::Get { run, task }) => local::liveness_get(&run, task.as_deref()),
        Cmd::Liveness(LivenessCmd::Reap { run }) => local::liveness_reap(&run),
        Cmd::Install { user: _, bin, print, unit_dir } => local::install(bin, print, unit_dir.as_deref()),
        Cmd::Plist { which, bin } => local::plist(&which, bin),
        Cmd::Stamp { log, cmd } => match crate::os::stamp::run(&log, &cmd) {
            Ok(rc) => std::process::exit(rc),
            Err(e) => Err(CliError::Failed(e)),
        },
        Cmd::Uninstall { user: _, unit_dir } => local::uninstall(unit_dir.as_deref()),
        Cmd::Demo { dir, listen, pace } => {
            crate::demo::run(dir, listen, pace).map_err(|e| error::failed("harness demo", e))
        }
        Cmd::Run { plan, repo, worktree, project, slug, supervised, foreground, register_only, tuning } => {
            let how = start::How { supervised: supervised || register_only, foreground, register_only, slug };
            start::run_plan(&plan, repo, worktree, project, how, &tuning)
        }
        Cmd::Supervise { run, tuning } => start::supervise(&run, &tuning),
        Cmd::Runs { api, filter, limit, json } => remote::runs(&api.client()?, &filter.query(), limit, json),
        Cmd::Top { once: true, active, api } => remote::top_once(&api.client()?, active),
        Cmd::Top { once: false, active: _, api } => top::run(api.client()?),
        Cmd::Show { run, api, json } => remote::show(&api.client()?, &run, json),
        Cmd::Watch { run, task, api, json, after, until_exit } => {
            remote::watch(&api.client()?, &run, &task, remote::WatchFlags { json, after, until_exit })
        }
        Cmd::Diff { run, task, api, stat, json } => remote::diff(&api.client()?, &run, task.as_deref(), stat, json),
        Cmd::Steer { run, task, msg, interrupt, comment, api } => {
            remote::task_verb(&api.client()?, &run, &task, "steer", &steer_body(msg, interrupt, &comment)?)
        }
        Cmd::Kill { run, task, api } => remote::task_verb(&api.client()?, &run, &task, "kill", &cli_by()),
        Cmd::Interrupt { run, task, api } => remote::task_verb(&api.client()?, &run, &task, "interrupt", &cli_by()),
        Cmd::Retry { run, task, api } => remote::task_verb(&api.client()?, &run, &task, "retry", &cli_by()),
        Cmd::Skip { run, task, reason, api } => {
            let body = crate::views::SkipBody { reason, by: "cli".into() };
            remote::task_verb(&api.client()?, &run, &task, "skip", &body)
        }
        Cmd::Pause { run, api } => remote::run_verb(&api.client()?, &run, "pause"),
        Cmd::Resume { run, api } => remote::run_verb(&api.client()?, &run, "resume"),
        Cmd::Budget { run, usd, task, api } => remote::budget(&api.client()?, &run, usd, task),
        Cmd::Stop { run } => remote::control_verb(&run, Act::Stop(control::Stop)),
        Cmd::Status { run } => remote::control_verb(&run, Act::Status(control::Status)),
        Cmd::Clean { run, force } => local::clean(&run, force),
        Cmd::Prune { finished_before, logs_only, dry_run, json } => {
            local::prune(finished_before.as_deref(), logs_only, dry_run, json)
        }
        Cmd::Token { url } => local::token(url),
        Cmd::Inbox(InboxCmd::Append { run, verb, task, msg, interrupt, by }) => {
            local::inbox_append(&run, verb.into(), task.as_deref(), msg, interrupt, &by)
        }
        Cmd::Inbox(InboxCmd::Take { run }) => local::inbox_take(&run),
        Cmd::Notify(NotifyCmd::Test) => local::notify_test(),
        Cmd::NormalizeEvents { adapter, run, task, session, first_line, observed_ts } => {
            start::normalize_events(adapter, &run, &task, session.as_deref(), first_line, observed_ts.as_deref())
        }
        Cmd::Plan(PlanCmd::Check { plan }) => local::plan_check(&plan),
        Cmd::Approvals { run, all, json, api } => remote::approvals(&api.client()?, &run, all, json),
        Cmd::Approve { run, task, id, api } => remote::decide(&api.client()?, &run, &task, &id, true, None),
        Cmd::Deny { run, task, id, message, api } => remote::decide(&api.client()?, &run, &task, &id, false, message),
        Cmd::Session(SessionCmd::Start { cwd, prompt, model, idle, foreground, tuning }) => {
            let plan = start::session_plan(prompt.as_deref(), model.as_deref(), idle)?;
            let how = start::How { supervised: true, foreground, register_only: false, slug: None };
            start::run_plan(&plan, Some(cwd), None, None, how, &tuning)
        }
        Cmd::Session(SessionCmd::End { run }) => remote::control_verb(&run, Act::End(control::End)),
        Cmd::ApprovalMcp { socket, task, wait } => {
            let task = crate::ids::TaskId::parse(&task).map_err(|e| CliError::Usage(e.to_string()))?;
            crate::approval_mcp::serve(socket, task, std::time::Duration::from_secs(wait))
                .map_err(|e| CliError::Failed(format!("approval-mcp: {e}")))
        }
    }
}

/// `harness steer`'s body: the message and the `--comment` pairs.
fn steer_body(msg: Option<String>, interrupt: bool, comment: &[String]) -> Result<crate::views::SteerBody, CliError> {
    if msg.is_none() && comment.is_empty() {
        return Err(CliError::Usage("steer needs a message, or --comment PATH:LINE TEXT".into()));
    }
    let comments = comment.chunks(2).map(|c| review_comment(&c[0], &c[1])).collect();
    Ok(crate::views::SteerBody { msg: msg.unwrap_or_default(), comments, interrupt, by: "cli".into() })
}

/// `--comment PATH:LINE TEXT` as the API's review comment (a PATH with no `:LINE` is the file).
fn review_comment(at: &str, text: &str) -> crate::views::ReviewComment {
    let (path, line) = match at.rsplit_once(':') {
        Some((p, l)) if !p.is_empty() && l.parse::<u64>().is_ok() => (p, l.parse().ok()),
        _ => (at, None),
    };
    crate::views::ReviewComment { path: path.to_string(), line, body: text.to_string() }
}

/// The body of a verb the CLI asks for.
fn cli_by() -> crate::views::VerbBody {
    crate::views::VerbBody { by: "cli".into() }
}
