//! The `harness` command line: argument parsing (clap) and dispatch. Each arm hands its arguments to
//! the module that does the work (`local` for commands over a run's files, `remote` for the API and
//! the control socket, `start` for the daemons, runs and the demo) and every failure becomes one
//! stderr line plus an exit code (`CliError`). No business logic lives here.
//!
//! Exit codes (`exit::cli`): 0 success, 1 the operation failed or was refused, 2 usage error (bad
//! arguments or ids), 3 `journal reconcile` found discrepancies, 4 the API could not be reached.

mod error;
mod fmt;
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
use crate::os::service::Logging;
use crate::state::journal::Verb;
use crate::state::registry::Plane;
use crate::timeouts;
use clap::{Parser, Subcommand};
pub use error::CliError;
use error::{during, usage};
use std::net::SocketAddr;
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "harness",
    version,
    about = "Watch, steer, kill and pause AI coding agent runs",
    long_about = "Watch, steer, kill and pause runs of AI coding agents (Claude Code, cursor-agent, Codex).\n\n\
A plan runs as waves of tasks, each an agent turn in its own git worktree. `harness run` starts one; \
`harness top`, `runs`, `show` and `watch` look at runs; `steer`, `kill`, `pause`, `resume`, `retry` and \
`skip` act on them through the API (`harness api`, or the socket-activated user service).\n\n\
State lives in $HARNESS_HOME (default ~/.harness).",
    after_help = "Examples:\n  harness demo                         a supervised example run to try every command on\n  \
harness run plan.json --supervised   start a run in the background\n  harness top                          \
the live dashboard\n  harness watch RUN TASK               follow one agent's tokens and tool calls\n\n\
Plumbing (registry, journal, liveness, inbox, …) is under `harness debug`.",
    propagate_version = true
)]
struct Cli {
    /// Print JSON (the API's typed views) instead of text for a person.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// A supervised example run to try every command on.
    ///
    /// fake engines replaying real captured CLI output in a scratch git repo, with the API serving it.
    #[command(
        after_help = "Examples:\n  harness demo                 the recorded pace; its last task waits for your steer\n  \
harness demo --pace fast     as fast as the machine goes\n  harness demo --pace 0.5      half a second per line"
    )]
    Demo {
        /// Where to put the scratch repo and harness home (default: a new dir under /tmp).
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
        /// The API's address (default: 127.0.0.1:7878 when it is free, else a free port on 127.0.0.1).
        #[arg(long, value_name = "ADDR")]
        listen: Option<SocketAddr>,
        /// Engine pacing: `recorded` (the captures' own timing), `fast`, or seconds per line.
        #[arg(long, default_value = "recorded", value_name = "PACE")]
        pace: crate::demo::Pace,
    },
    /// Start a run of a plan.
    ///
    /// batch in the foreground (one line per task change), or with a supervisor (--supervised) that the API
    /// and every verb reach.
    #[command(after_help = "Examples:\n  harness run plan.json                        batch, in this terminal\n  \
harness run plan.json --supervised           in the background (systemd user service when there is one)\n  \
harness run plan.json --repo ~/src/app       in another repository\n  harness plan check plan.json                 \
just check the plan")]
    Run {
        /// The plan file (JSON; `spec/PLAN.md`).
        plan: PathBuf,
        /// The repository (default: the git top level of the current directory).
        #[arg(long, value_name = "DIR")]
        repo: Option<PathBuf>,
        /// A separate worktree of the repository to work in (default: the repository itself).
        #[arg(long, value_name = "DIR")]
        worktree: Option<PathBuf>,
        /// The project name the Overview groups the run under (default: the repository's name).
        #[arg(long, value_name = "NAME")]
        project: Option<String>,
        /// The run's slug (default: the plan's, or `<slug>-2`, `-3`… when a run of the plan has
        /// ended in this worktree; its history is kept).
        #[arg(long, value_name = "SLUG")]
        slug: Option<String>,
        /// Run with a supervisor: control socket, liveness, live verbs.
        #[arg(long)]
        supervised: bool,
        /// With --supervised: supervise in this process instead of a detached one.
        #[arg(long)]
        foreground: bool,
        /// Register the run and journal its start, but start no supervisor: for a process manager
        /// of your own (`harness debug supervise <runId>`, e.g. under systemd-socket-activate).
        #[arg(long, conflicts_with_all = ["foreground"])]
        register_only: bool,
        /// Print the tracing log (what the supervisor logs) on stderr too.
        #[arg(long, short = 'v')]
        verbose: bool,
        #[command(flatten)]
        tuning: Tuning,
    },
    /// List runs, newest activity first: status, wave, tasks done, cost, age.
    #[command(after_help = "Examples:\n  harness runs\n  harness runs --status running --status blocked\n  \
harness runs -q login --since 2h\n  harness runs --json | jq '.[].runId'")]
    Runs {
        #[command(flatten)]
        api: ApiArgs,
        #[command(flatten)]
        filter: RunsFilter,
        /// Print at most this many runs (default: every run, fetched page by page).
        #[arg(long, value_name = "N")]
        limit: Option<u64>,
    },
    /// A live dashboard of every run and its tasks (`?` lists its keys).
    ///
    /// Redrawn on each journal change; keys pause, steer, kill, retry, skip and open a task's
    /// events or diff. `--once` prints one frame as plain text and exits.
    Top {
        /// Print one frame and exit (for scripts and tests).
        #[arg(long)]
        once: bool,
        /// With --once: only runs that are not over (finished, failed or stopped).
        #[arg(long)]
        active: bool,
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Show one run (its waves and tasks), or one task of it.
    ///
    /// attempts with times, session, pid, idle, cost, commit and files, last error, steers, approvals.
    #[command(after_help = "Examples:\n  harness show greet-demo\n  harness show greet-demo greet\n  \
harness show 51bf6a --json")]
    Show {
        /// The run: its runId, its slug, or a unique prefix of the runId.
        run: String,
        /// One task of the run (its id in the plan).
        task: Option<String>,
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Follow a task's events.
    ///
    /// what it recorded, then live ones (tokens, tool calls, results) until it ends, reconnecting with
    /// Last-Event-ID on its own.
    #[command(after_help = "Examples:\n  harness watch greet-demo greet\n  \
harness watch greet-demo greet --until-exit\n  harness watch greet-demo greet --json --after 40")]
    Watch {
        /// The run: its runId, its slug, or a unique prefix of the runId.
        run: String,
        /// The task (its id in the plan).
        task: String,
        #[command(flatten)]
        api: ApiArgs,
        /// Start after this seq (default: from the beginning of the log).
        #[arg(long, value_name = "SEQ")]
        after: Option<String>,
        /// Stop after the next `exit` event (the end of a turn).
        #[arg(long)]
        until_exit: bool,
    },
    /// What a task changed, or with no TASK the run's own commits (a unified diff).
    ///
    /// A task's commit, or its worktree against its base while it works; through $PAGER
    /// (`less -FRX`) on a terminal.
    #[command(after_help = "Examples:\n  harness diff greet-demo greet\n  harness diff greet-demo --stat\n  \
harness diff greet-demo greet --stat --json")]
    Diff {
        /// The run: its runId, its slug, or a unique prefix of the runId.
        run: String,
        /// The task (omitted: the whole run's own change).
        task: Option<String>,
        #[command(flatten)]
        api: ApiArgs,
        /// The paths changed, with lines added and removed, instead of the diff (with --json: the
        /// API's JSON).
        #[arg(long)]
        stat: bool,
    },
    /// Send a message to a task.
    ///
    /// into its running turn when it is live, else queued for its next turn (resume of its session).
    #[command(after_help = "Examples:\n  harness steer greet-demo greet \"also handle an empty name\"\n  \
harness steer greet-demo greet --interrupt \"stop; use the existing helper instead\"\n  \
harness steer greet-demo greet --comment src/greet.rs:12 \"off by one\"")]
    Steer {
        /// The run: its runId, its slug, or a unique prefix of the runId.
        run: String,
        /// The task (its id in the plan).
        task: String,
        /// The message (may be left out when --comment is given).
        msg: Option<String>,
        /// End the current turn first, then resume the session with the message.
        #[arg(long)]
        interrupt: bool,
        /// A review comment on the task's change, quoted in the message with its file and line
        /// (repeatable): `--comment src/a.rs:12 "off by one"`; a PATH without `:LINE` is the file.
        #[arg(long = "comment", num_args = 2, value_names = ["PATH:LINE", "TEXT"], action = clap::ArgAction::Append)]
        comment: Vec<String>,
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Kill a task's running turn (its whole process group); answered once it is gone.
    #[command(after_help = "Example:\n  harness kill greet-demo greet")]
    Kill {
        /// The run: its runId, its slug, or a unique prefix of the runId.
        run: String,
        /// The task (its id in the plan).
        task: String,
        #[command(flatten)]
        api: ApiArgs,
    },
    /// End a live task's running turn without killing it (its session stays whole: a steer resumes it).
    Interrupt {
        /// The run: its runId, its slug, or a unique prefix of the runId.
        run: String,
        /// The task (its id in the plan).
        task: String,
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Re-dispatch a halted task: its session resumed with its prompt, else a fresh start.
    Retry {
        /// The run: its runId, its slug, or a unique prefix of the runId.
        run: String,
        /// The halted task (its id in the plan).
        task: String,
        #[command(flatten)]
        api: ApiArgs,
    },
    /// End a halted task as skipped, so its wave (and the run) can go on; its work is kept.
    Skip {
        /// The run: its runId, its slug, or a unique prefix of the runId.
        run: String,
        /// The halted task (its id in the plan).
        task: String,
        /// Why it is skipped (journaled).
        #[arg(long, value_name = "TEXT")]
        reason: String,
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Hold a run: no new task or turn is dispatched (running turns go on).
    #[command(after_help = "Example:\n  harness pause greet-demo && harness resume greet-demo")]
    Pause {
        /// The run: its runId, its slug, or a unique prefix of the runId.
        run: String,
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Release a paused run.
    Resume {
        /// The run: its runId, its slug, or a unique prefix of the runId.
        run: String,
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Set a run's budget in US dollars (or a task's, with --task); a run paused by its budget
    /// resumes once no budget is reached.
    #[command(after_help = "Examples:\n  harness budget greet-demo 5\n  harness budget greet-demo 0.50 --task greet")]
    Budget {
        /// The run: its runId, its slug, or a unique prefix of the runId.
        run: String,
        /// The new budget, US dollars (e.g. 5 or 2.50).
        usd: f64,
        /// Set this task's budget instead of the run's.
        #[arg(long, value_name = "TASK")]
        task: Option<String>,
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Stop a supervised run: kill its running tasks; the run ends stopped.
    Stop {
        /// The run: its runId, its slug, or a unique prefix of the runId.
        run: String,
    },
    /// Ask a run's supervisor for its status (over the control socket).
    Status {
        /// The run: its runId, its slug, or a unique prefix of the runId.
        run: String,
    },
    /// A run's tool calls asked of the operator (plan approvals: "ask"), pending ones unless --all.
    Approvals {
        /// The run: its runId, its slug, or a unique prefix of the runId.
        run: String,
        /// Every approval, decided and expired ones too.
        #[arg(long)]
        all: bool,
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Allow an asked tool call.
    Approve {
        /// The run: its runId, its slug, or a unique prefix of the runId.
        run: String,
        /// The task that asked (its id in the plan).
        task: String,
        /// The approval's id (`harness approvals RUN` lists them).
        id: String,
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Deny an asked tool call; the model reads the message.
    Deny {
        /// The run: its runId, its slug, or a unique prefix of the runId.
        run: String,
        /// The task that asked (its id in the plan).
        task: String,
        /// The approval's id (`harness approvals RUN` lists them).
        id: String,
        /// What the model is told (default: "Denied by cli.").
        #[arg(long, value_name = "TEXT")]
        message: Option<String>,
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Interactive claude sessions on the live channel.
    #[command(subcommand)]
    Session(SessionCmd),
    /// Serve the HTTP API (durable views; live routes need the run's supervisor), on TCP and on
    /// $HARNESS_HOME/sock/api.sock.
    Api {
        /// Address to listen on. Repeatable. Default 127.0.0.1:7878 or $HARNESS_API_ADDR. A
        /// non-loopback address needs --allow-remote and a configured token.
        #[arg(long, value_name = "ADDR")]
        listen: Vec<SocketAddr>,
        /// Allow a non-loopback --listen (also HARNESS_API_ALLOW_REMOTE=1); the token is then
        /// required of every client.
        #[arg(long)]
        allow_remote: bool,
        /// The Unix socket to listen on (default: $HARNESS_HOME/sock/api.sock).
        #[arg(long, value_name = "PATH")]
        unix: Option<PathBuf>,
        /// A browser origin allowed to call the API (e.g. the Web UI dev server
        /// http://127.0.0.1:5173). Repeatable; also $HARNESS_API_ALLOW_ORIGINS (comma-separated).
        #[arg(long, value_name = "ORIGIN")]
        allow_origin: Vec<String>,
        /// SSE heartbeat period (at most 10 s).
        #[arg(long, default_value = "5s", value_parser = humantime::parse_duration, value_name = "DURATION")]
        heartbeat: std::time::Duration,
        /// Events buffered per SSE client.
        #[arg(long, default_value_t = 32, value_name = "N")]
        stream_buffer: usize,
        /// A client that takes no event for this long starts losing events (each loss is reported
        /// to it as one error event naming the dropped range).
        #[arg(long, default_value = "2s", value_parser = humantime::parse_duration, value_name = "DURATION")]
        slow_client_grace: std::time::Duration,
        #[command(flatten)]
        fleet: FleetArgs,
    },
    /// Mirror this home into a fleet's NATS JetStream and answer the fleet for this host.
    ///
    /// Publishes every run's journal records, every task's events and the views a fleet API
    /// serves (`harness api --fleet`), and carries the fleet's verbs, diffs and reviews to this
    /// home's supervisors. The home's files stay the truth. One relay per home; the host name is
    /// held by a lease a second relay cannot take while this one lives.
    ///
    /// Examples:
    ///   harness relay --nats nats://nats.internal:4222 --host build-1
    ///   HARNESS_NATS_USER=relay HARNESS_NATS_PASSWORD=… harness relay --nats tls://nats:4222 --host ci
    #[command(verbatim_doc_comment)]
    Relay {
        /// The NATS servers: nats://HOST:PORT or tls://HOST:PORT, comma-separated (also
        /// $HARNESS_NATS_URL). Never with a user or password in it: see --creds.
        #[arg(long, value_name = "URL")]
        nats: Option<String>,
        /// This host's name in the fleet, a DNS label (default: this machine's hostname, up to its
        /// first dot, lowercased).
        #[arg(long, value_name = "NAME")]
        host: Option<String>,
        /// A NATS credentials file (JWT and nkey seed; also $HARNESS_NATS_CREDS). A user and
        /// password come from $HARNESS_NATS_USER and $HARNESS_NATS_PASSWORD, a token from
        /// $HARNESS_NATS_TOKEN, a CA for tls:// from $HARNESS_NATS_CA.
        #[arg(long, value_name = "FILE")]
        creds: Option<PathBuf>,
        /// Replicas of the fleet's streams when this relay creates them (1 on a single server).
        #[arg(long, default_value_t = 3, value_name = "N")]
        replicas: usize,
    },
    /// Print the API's bearer token (made when there is none).
    ///
    /// what another uid, or a browser tab of another user, presents. The API's own uid needs none.
    Token {
        /// Print the API's URL with `?token=` instead (for a browser tab).
        #[arg(long)]
        url: bool,
    },
    /// Remove a run's task worktrees, task branches and refs.
    ///
    /// What its supervisor removes when the run ends: those of integrated tasks, and those holding
    /// no work. What holds a task's unintegrated work is kept and listed, unless --force. Refused
    /// while the run's supervisor is live.
    Clean {
        /// The run: its runId, its slug, or a unique prefix of the runId.
        run: String,
        /// Remove unintegrated task work too (worktrees, branches, kept attempts).
        #[arg(long)]
        force: bool,
    },
    /// Remove finished and failed runs whose last activity is older than an age.
    ///
    /// their pointer, summary and runstate files (journal, plan, logs…), or only their logs with --logs-
    /// only. Never a live or paused run, never git. Without --finished-before:
    /// $HARNESS_HOME/retention.json.
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
    },
    /// Notifications ($HARNESS_HOME/notify.json; spec/NOTIFY.md).
    #[command(subcommand)]
    Notify(NotifyCmd),
    /// Install the systemd user units (launchd agent on macOS) for this binary and this $HARNESS_HOME.
    ///
    /// Not needed with the Debian package for the default home.
    Install {
        /// Install for the user's service manager (the only mode; accepted for clarity).
        #[arg(long)]
        user: bool,
        /// The binary the units run (default: this one).
        #[arg(long, value_name = "PATH")]
        bin: Option<PathBuf>,
        /// Print the rendered units instead of writing them.
        #[arg(long)]
        print: bool,
        /// Write the units here instead of the user unit directory (no reload).
        #[arg(long, value_name = "DIR")]
        unit_dir: Option<PathBuf>,
    },
    /// Stop and remove what `harness install` wrote.
    Uninstall {
        /// The user's service manager (the only mode; accepted for clarity).
        #[arg(long)]
        user: bool,
        /// Remove the units from this directory instead of the user unit directory.
        #[arg(long, value_name = "DIR")]
        unit_dir: Option<PathBuf>,
    },
    /// Plan files.
    #[command(subcommand)]
    Plan(PlanCmd),
    /// Print a shell completion script.
    ///
    /// E.g. `harness completions bash > ~/.local/share/bash-completion/completions/harness`.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print the manual page harness(1) (roff): `harness man | man -l -`.
    Man {
        /// Write harness(1) and a page per command (harness-run(1), …) into this directory instead.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
    /// Plumbing: registry, journal, liveness, inbox, supervise, normalize-events, plist.
    ///
    /// What runners, process managers and people debugging harness use. Each is also reachable by
    /// its old name (`harness journal …`).
    #[command(subcommand)]
    Debug(DebugCmd),
}

/// What harness's own processes start, never a person: `harness approval-mcp` (claude starts it)
/// and `harness stamp` (the wrappers do). Parsed apart from [`Cli`], so that no help, completion
/// script or man page lists them (clap_complete lists even a hidden command).
#[derive(Parser)]
#[command(name = "harness", disable_help_subcommand = true)]
enum Plumbing {
    /// The MCP permission tool a batch claude turn asks through (started by claude; not for people).
    ApprovalMcp {
        #[arg(long)]
        socket: std::path::PathBuf,
        #[arg(long)]
        task: String,
        /// Seconds to wait for a decision.
        #[arg(long, default_value_t = 660)]
        wait: u64,
    },
    /// Plumbing for the wrappers.
    ///
    /// run CMD with its stdout appended to LOG and each line's arrival time to LOG.times (exits with CMD's
    /// code).
    Stamp {
        #[arg(long)]
        log: PathBuf,
        #[arg(last = true, required = true)]
        cmd: Vec<std::ffi::OsString>,
    },
}

/// `harness debug …`: what runners, process managers and people debugging harness use.
#[derive(Subcommand)]
enum DebugCmd {
    /// The global run registry ($HARNESS_HOME/runs).
    #[command(subcommand)]
    Registry(RegistryCmd),
    /// The runstate/v1 journal of a run.
    #[command(subcommand)]
    Journal(JournalCmd),
    /// The liveness/v1 sidecar of a run (a cache; the journal wins).
    #[command(subcommand)]
    Liveness(LivenessCmd),
    /// The DynWF inbox of a run (DynWF runs have no supervisor socket).
    #[command(subcommand)]
    Inbox(InboxCmd),
    /// Supervise a registered run (what systemd or `harness run --supervised` starts).
    Supervise {
        /// The run: its runId, its slug, or a unique prefix of the runId.
        run: String,
        #[command(flatten)]
        tuning: Tuning,
    },
    /// Print the launchd plist of the API agent or of one run's supervisor (macOS).
    Plist {
        /// `api`, `relay`, or a runId for its supervisor.
        which: String,
        /// The binary the plist runs (default: this one).
        #[arg(long, value_name = "PATH")]
        bin: Option<PathBuf>,
    },
    /// Normalize an engine's raw stream (stdin) into events/v1 JSON lines (stdout).
    NormalizeEvents {
        /// claude, cursor or codex.
        #[arg(value_parser = |s: &str| s.parse::<Adapter>())]
        adapter: Adapter,
        /// The runId the events carry.
        #[arg(long, default_value = "-")]
        run: String,
        /// The task id the events carry.
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

/// The old top-level names of `harness debug`'s commands, kept working (hidden).
const DEBUG_ALIASES: &[&str] = &["registry", "journal", "liveness", "inbox", "supervise", "plist", "normalize-events"];

/// `harness journal …` as `harness debug journal …`: the plumbing's old names stay valid.
fn with_debug_aliases(mut args: Vec<std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    if args.get(1).and_then(|a| a.to_str()).is_some_and(|a| DEBUG_ALIASES.contains(&a)) {
        args.insert(1, "debug".into());
    }
    args
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
    /// Only runs of this project.
    #[arg(long, value_name = "NAME")]
    project: Option<String>,
    /// Only runs in this repository (its path).
    #[arg(long, value_name = "PATH")]
    repo: Option<String>,
    /// Only runs on this branch.
    #[arg(long, value_name = "BRANCH")]
    branch: Option<String>,
    /// Only runs of this control plane: standalone or dynwf.
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
    /// The API address (TCP), used whatever home it serves. Default: the API's Unix socket
    /// $HARNESS_HOME/sock/api.sock when an API listens on it, else $HARNESS_API_ADDR or
    /// 127.0.0.1:7878 — refused (exit 4) when that API serves another home.
    #[arg(long = "api", value_name = "ADDR")]
    addr: Option<SocketAddr>,
}

impl ApiArgs {
    /// The API's Unix socket when it exists (the owner needs no token there), unless `--api` or
    /// `$HARNESS_API_ADDR` choose TCP. A socket file nobody listens on (an API killed before it
    /// could remove it) is as good as absent: TCP is tried instead.
    fn client(&self) -> Result<Client, CliError> {
        let home = Home::from_env().ok();
        let chosen_tcp = self.addr.is_some() || std::env::var("HARNESS_API_ADDR").is_ok_and(|v| !v.is_empty());
        let unix = home.as_ref().map(|h| h.sock_dir().join("api.sock")).filter(|p| !chosen_tcp && p.exists());
        // Judged before anything connects to it.
        if let Some(p) = &unix {
            not_planted(p).map_err(usage)?;
        }
        let unix = unix.filter(|p| !stale(p));
        let endpoint = match (unix, self.addr) {
            (Some(path), _) => crate::client::Endpoint::Unix(path),
            (None, Some(a)) => crate::client::Endpoint::Tcp(a),
            (None, None) => crate::client::Endpoint::Tcp(config::api_addr().map_err(usage)?),
        };
        // `--api` is that API, whatever it serves; any other is this home's or none.
        let expect = if self.addr.is_some() { None } else { home.as_ref().map(Home::id) };
        let token = home.and_then(|h| config::api_token(&h).ok().flatten());
        Ok(Client { endpoint, token, home: expect })
    }
}

/// `harness api --fleet`: serve a fleet from NATS JetStream instead of this home.
#[derive(clap::Args, Clone)]
pub(crate) struct FleetArgs {
    /// Serve every host of the fleet whose relays publish to these NATS servers (nats:// or tls://,
    /// comma-separated), instead of this home (`spec/FLEET.md`). Credentials as for `harness relay`.
    #[arg(long, value_name = "URL")]
    pub fleet: Option<String>,
    /// A NATS credentials file for --fleet (also $HARNESS_NATS_CREDS).
    #[arg(long, value_name = "FILE", requires = "fleet")]
    pub creds: Option<PathBuf>,
    /// How long a verb (or diff) carried to a host may take before it is a 504 (default: the
    /// host's own budget for it plus 5 s).
    #[arg(long, value_parser = humantime::parse_duration, value_name = "DURATION", requires = "fleet")]
    pub answer_within: Option<std::time::Duration>,
    /// Replicas of the fleet's streams when this API creates them (1 on a single server).
    #[arg(long, default_value_t = 3, value_name = "N")]
    pub replicas: usize,
}

/// The home's API socket is this user's: the socket and its folder owned by this uid, the folder
/// writable by no one else — an API another user planted in a home they made first would read every
/// verb sent to it.
fn not_planted(socket: &std::path::Path) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let me = nix::unistd::geteuid().as_raw();
    let dir = socket.parent().unwrap_or(socket);
    for (p, what) in [(socket, "the API socket"), (dir, "its folder")] {
        let m = std::fs::symlink_metadata(p).map_err(|e| format!("cannot read {}: {e}", p.display()))?;
        if m.uid() != me {
            return Err(format!(
                "{what} {} is owned by uid {}, not by you (uid {me}): refusing to send it anything; use a HARNESS_HOME of your own",
                p.display(),
                m.uid()
            ));
        }
    }
    let mode = std::fs::metadata(dir).map(|m| m.mode()).unwrap_or(0);
    if mode & 0o022 != 0 {
        return Err(format!(
            "{} is writable by others (mode {:o}): anyone could have put the API socket there; chmod 700 it",
            dir.display(),
            mode & 0o777
        ));
    }
    Ok(())
}

/// A socket file that refuses connections: nothing listens on it any more. (Any other failure, say
/// permissions, is left for the request to report.)
fn stale(socket: &std::path::Path) -> bool {
    std::os::unix::net::UnixStream::connect(socket).is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionRefused)
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
        /// The claude model (default: claude's own).
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
    End {
        /// The session's run: its runId, its slug, or a unique prefix of the runId.
        run: String,
    },
}

#[derive(Subcommand)]
enum NotifyCmd {
    /// Send a sample notification to every hook, once each, and say how each went.
    Test,
    /// Send what a finished run's supervisor could not (notify.json was invalid as it ended).
    ///
    /// Runs a supervisor still serves are left to it; each run's mark moves as its events go out,
    /// so a flush sends nothing twice.
    Flush,
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
        /// The DynWF run.
        run: String,
        /// The verb.
        verb: VerbArg,
        /// The task a steer is for.
        #[arg(long)]
        task: Option<String>,
        /// A steer's message.
        #[arg(long)]
        msg: Option<String>,
        /// A steer that interrupts the running turn.
        #[arg(long)]
        interrupt: bool,
        /// Who asks (journaled).
        #[arg(long, default_value = "cli")]
        by: String,
    },
    /// Take the verbs not taken yet (exactly once), journaling each. Prints a JSON array.
    Take {
        /// The DynWF run.
        run: String,
    },
}

#[derive(Subcommand)]
enum RegistryCmd {
    /// Register a run (what a runner or DynWF driver does at run start). Prints the pointer.
    Add {
        /// The run's repository.
        #[arg(long)]
        repo: PathBuf,
        /// The worktree it works in (default: the repository).
        #[arg(long)]
        worktree: Option<PathBuf>,
        /// The run's slug.
        #[arg(long)]
        slug: String,
        /// Who drives the run.
        #[arg(long, value_enum, default_value_t = PlaneArg::Standalone)]
        plane: PlaneArg,
        /// Where its runstate files go (default: under the repository's git dir).
        #[arg(long)]
        runstate_dir: Option<PathBuf>,
        /// The project name.
        #[arg(long)]
        project: Option<String>,
    },
    /// List registered runs (reaping pointers whose runstateDir is gone).
    List,
}

#[derive(Subcommand)]
enum JournalCmd {
    /// Append one record (JSON; `v` and `ts` are filled in when absent). Prints its line number.
    Append {
        /// The run.
        run: String,
        /// The record, one JSON object.
        record: String,
    },
    /// Print the replayed view of the journal as JSON.
    Show {
        /// The run.
        run: String,
    },
    /// Check committed shas against git and in-flight tasks against live processes. Exit 3 if not clean.
    Reconcile {
        /// The run.
        run: String,
    },
}

#[derive(Subcommand)]
enum LivenessCmd {
    /// Set one task's liveness record (JSON TaskLiveness).
    Set {
        /// The run.
        run: String,
        /// The task.
        task: String,
        /// The record (JSON).
        record: String,
    },
    /// Print the sidecar, or one task's record.
    Get {
        /// The run.
        run: String,
        /// Only this task's record.
        task: Option<String>,
    },
    /// Drop records whose pid is dead; report what the journal says about each.
    Reap {
        /// The run.
        run: String,
    },
}

#[derive(Subcommand)]
enum PlanCmd {
    /// Validate a plan file; prints every problem found.
    Check {
        /// The plan file.
        plan: PathBuf,
    },
}

/// The names of the [`Plumbing`] commands.
const PLUMBING: &[&str] = &["approval-mcp", "stamp"];

pub fn main() -> i32 {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.get(1).and_then(|a| a.to_str()).is_some_and(|a| PLUMBING.contains(&a)) {
        return match Plumbing::try_parse_from(args) {
            Ok(p) => {
                crate::os::service::init_logging(Logging::Person);
                exit_code(plumbing(p))
            }
            Err(e) => parse_failed(&e),
        };
    }
    let cli = match Cli::try_parse_from(with_debug_aliases(args)) {
        Ok(c) => c,
        Err(e) => return parse_failed(&e),
    };
    crate::os::service::init_logging(logging(&cli.cmd));
    exit_code(run(cli.cmd, cli.json))
}

/// A command line clap refused (or `--help`, `--version`): printed as clap words it; its exit code.
fn parse_failed(e: &clap::Error) -> i32 {
    let code = if e.use_stderr() { crate::exit::cli::USAGE } else { 0 };
    let _ = e.print();
    code
}

/// A command's outcome as the process's exit code, an error as one line on stderr.
fn exit_code(r: Result<(), CliError>) -> i32 {
    match r {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("harness: {e}");
            e.code()
        }
    }
}

/// Runs a [`Plumbing`] command.
fn plumbing(p: Plumbing) -> Result<(), CliError> {
    match p {
        Plumbing::Stamp { log, cmd } => match crate::os::stamp::run(&log, &cmd) {
            Ok(rc) => std::process::exit(rc),
            Err(e) => Err(CliError::Failed(e)),
        },
        Plumbing::ApprovalMcp { socket, task, wait } => {
            let task = crate::ids::TaskId::parse(&task).map_err(|e| CliError::Usage(e.to_string()))?;
            crate::approval_mcp::serve(socket, task, std::time::Duration::from_secs(wait))
                .map_err(|e| CliError::Failed(format!("approval-mcp: {e}")))
        }
    }
}

/// Who reads what is logged: everything a daemon logs (its journald story); a person's command
/// only its warnings, plainly — a batch `harness run` prints progress lines, its log with `-v`.
fn logging(cmd: &Cmd) -> Logging {
    match cmd {
        Cmd::Api { .. } | Cmd::Relay { .. } | Cmd::Debug(DebugCmd::Supervise { .. }) => Logging::Daemon,
        Cmd::Run { verbose: true, .. } => Logging::Daemon,
        Cmd::Run { supervised: true, foreground: true, .. } => Logging::Daemon,
        Cmd::Session(SessionCmd::Start { foreground: true, .. }) => Logging::Daemon,
        _ => Logging::Person,
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
            | Cmd::Relay { .. }
            | Cmd::Debug(
                DebugCmd::Registry(RegistryCmd::Add { .. })
                    | DebugCmd::Journal(JournalCmd::Append { .. } | JournalCmd::Reconcile { .. })
                    | DebugCmd::Liveness(LivenessCmd::Set { .. } | LivenessCmd::Reap { .. })
                    | DebugCmd::Inbox(InboxCmd::Append { .. } | InboxCmd::Take { .. })
                    | DebugCmd::Supervise { .. }
            )
            | Cmd::Install { .. }
            | Cmd::Run { .. }
            | Cmd::Stop { .. }
            | Cmd::Clean { .. }
            | Cmd::Prune { .. }
            | Cmd::Token { .. }
            | Cmd::Notify(NotifyCmd::Flush | NotifyCmd::Test)
            | Cmd::Session(SessionCmd::Start { .. })
    )
}

fn run(cmd: Cmd, json: bool) -> Result<(), CliError> {
    if writes_home(&cmd) {
        crate::os::home::Home::from_env().map_err(usage)?.ensure().map_err(|e| CliError::Failed(e.to_string()))?;
    }
    if json && let Some(name) = no_json(&cmd) {
        return Err(usage(format!("`harness {name}` has no JSON output; leave out --json")));
    }
    match cmd {
        Cmd::Api { listen, allow_remote, unix, allow_origin, heartbeat, stream_buffer, slow_client_grace, fleet } => {
            let flags = start::ApiFlags {
                listen,
                allow_remote,
                unix,
                allow_origin,
                heartbeat,
                stream_buffer,
                slow_client_grace,
                fleet,
            };
            start::api(flags)
        }
        Cmd::Relay { nats, host, creds, replicas } => start::relay(nats, host, creds, replicas),
        Cmd::Debug(d) => debug(d),
        Cmd::Install { user: _, bin, print, unit_dir } => local::install(bin, print, unit_dir.as_deref()),
        Cmd::Uninstall { user: _, unit_dir } => local::uninstall(unit_dir.as_deref()),
        Cmd::Demo { dir, listen, pace } => {
            crate::demo::run(dir, listen, pace).map_err(|e| error::failed("harness demo", e))
        }
        Cmd::Run { plan, repo, worktree, project, slug, supervised, foreground, register_only, verbose: _, tuning } => {
            let how = start::How { supervised: supervised || register_only, foreground, register_only, slug, json };
            start::run_plan(&plan, repo, worktree, project, how, &tuning)
        }
        Cmd::Runs { api, filter, limit } => remote::runs(&api.client()?, &filter.query(), limit, json),
        Cmd::Top { once: true, active, api } => remote::top_once(&api.client()?, active, json),
        Cmd::Top { once: false, active: _, api } => top::run(api.client()?),
        Cmd::Show { run, task: None, api } => remote::show(&api.client()?, &run, json),
        Cmd::Show { run, task: Some(task), api } => remote::show_task(&api.client()?, &run, &task, json),
        Cmd::Watch { run, task, api, after, until_exit } => {
            remote::watch(&api.client()?, &run, &task, remote::WatchFlags { json, after, until_exit })
        }
        Cmd::Diff { run, task, api, stat } => {
            if json && !stat {
                return Err(usage("--json needs --stat (the diff itself is text)"));
            }
            remote::diff(&api.client()?, &run, task.as_deref(), stat, json)
        }
        Cmd::Steer { run, task, msg, interrupt, comment, api } => {
            let body = steer_body(msg, interrupt, &comment)?;
            remote::task_verb(&api.client()?, &run, &task, "steer", &body, json)
        }
        Cmd::Kill { run, task, api } => remote::task_verb(&api.client()?, &run, &task, "kill", &cli_by(), json),
        Cmd::Interrupt { run, task, api } => {
            remote::task_verb(&api.client()?, &run, &task, "interrupt", &cli_by(), json)
        }
        Cmd::Retry { run, task, api } => remote::task_verb(&api.client()?, &run, &task, "retry", &cli_by(), json),
        Cmd::Skip { run, task, reason, api } => {
            let body = crate::views::SkipBody { reason, by: "cli".into() };
            remote::task_verb(&api.client()?, &run, &task, "skip", &body, json)
        }
        Cmd::Pause { run, api } => remote::run_verb(&api.client()?, &run, "pause", json),
        Cmd::Resume { run, api } => remote::run_verb(&api.client()?, &run, "resume", json),
        Cmd::Budget { run, usd, task, api } => remote::budget(&api.client()?, &run, usd, task, json),
        Cmd::Stop { run } => remote::control_verb(&run, Act::Stop(control::Stop), json),
        Cmd::Status { run } => remote::control_verb(&run, Act::Status(control::Status), json),
        Cmd::Clean { run, force } => local::clean(&run, force, json),
        Cmd::Prune { finished_before, logs_only, dry_run } => {
            local::prune(finished_before.as_deref(), logs_only, dry_run, json)
        }
        Cmd::Token { url } => local::token(url, json),
        Cmd::Notify(NotifyCmd::Test) => local::notify_test(),
        Cmd::Notify(NotifyCmd::Flush) => local::notify_flush(),
        Cmd::Plan(PlanCmd::Check { plan }) => local::plan_check(&plan, json),
        Cmd::Approvals { run, all, api } => remote::approvals(&api.client()?, &run, all, json),
        Cmd::Approve { run, task, id, api } => remote::decide(&api.client()?, &run, &task, &id, true, None, json),
        Cmd::Deny { run, task, id, message, api } => {
            remote::decide(&api.client()?, &run, &task, &id, false, message, json)
        }
        Cmd::Session(SessionCmd::Start { cwd, prompt, model, idle, foreground, tuning }) => {
            let plan = start::session_plan(prompt.as_deref(), model.as_deref(), idle)?;
            let how = start::How { supervised: true, foreground, register_only: false, slug: None, json };
            start::run_plan(&plan, Some(cwd), None, None, how, &tuning)
        }
        Cmd::Session(SessionCmd::End { run }) => remote::control_verb(&run, Act::End(control::End), json),
        Cmd::Completions { shell } => {
            completions(shell, &mut std::io::stdout());
            Ok(())
        }
        Cmd::Man { dir } => man(dir.as_deref()),
    }
}

/// The name of a command that prints no JSON (`--json` is refused there rather than ignored).
fn no_json(cmd: &Cmd) -> Option<&'static str> {
    Some(match cmd {
        Cmd::Api { .. } => "api",
        Cmd::Relay { .. } => "relay",
        Cmd::Demo { .. } => "demo",
        Cmd::Top { once: false, .. } => "top (without --once)",
        Cmd::Install { .. } => "install",
        Cmd::Uninstall { .. } => "uninstall",
        Cmd::Notify(NotifyCmd::Test) => "notify test",
        Cmd::Notify(NotifyCmd::Flush) => "notify flush",
        Cmd::Completions { .. } => "completions",
        Cmd::Man { .. } => "man",
        Cmd::Debug(DebugCmd::Supervise { .. }) => "debug supervise",
        Cmd::Debug(DebugCmd::Plist { .. }) => "debug plist",
        _ => return None,
    })
}

/// `harness debug …` (its commands print JSON already; `--json` changes nothing there).
fn debug(cmd: DebugCmd) -> Result<(), CliError> {
    match cmd {
        DebugCmd::Registry(RegistryCmd::Add { repo, worktree, slug, plane, runstate_dir, project }) => {
            local::registry_add(
                &repo,
                worktree.as_deref(),
                &slug,
                plane.into(),
                runstate_dir.as_deref(),
                project.as_deref(),
            )
        }
        DebugCmd::Registry(RegistryCmd::List) => local::registry_list(),
        DebugCmd::Journal(JournalCmd::Append { run, record }) => local::journal_append(&run, &record),
        DebugCmd::Journal(JournalCmd::Show { run }) => local::journal_show(&run),
        DebugCmd::Journal(JournalCmd::Reconcile { run }) => local::journal_reconcile(&run),
        DebugCmd::Liveness(LivenessCmd::Set { run, task, record }) => local::liveness_set(&run, &task, &record),
        DebugCmd::Liveness(LivenessCmd::Get { run, task }) => local::liveness_get(&run, task.as_deref()),
        DebugCmd::Liveness(LivenessCmd::Reap { run }) => local::liveness_reap(&run),
        DebugCmd::Inbox(InboxCmd::Append { run, verb, task, msg, interrupt, by }) => {
            local::inbox_append(&run, verb.into(), task.as_deref(), msg, interrupt, &by)
        }
        DebugCmd::Inbox(InboxCmd::Take { run }) => local::inbox_take(&run),
        DebugCmd::Supervise { run, tuning } => start::supervise(&run, &tuning),
        DebugCmd::Plist { which, bin } => local::plist(&which, bin),
        DebugCmd::NormalizeEvents { adapter, run, task, session, first_line, observed_ts } => {
            start::normalize_events(adapter, &run, &task, session.as_deref(), first_line, observed_ts.as_deref())
        }
    }
}

/// `harness completions SHELL` (clap_complete).
fn completions(shell: clap_complete::Shell, to: &mut dyn std::io::Write) {
    clap_complete::generate(shell, &mut <Cli as clap::CommandFactory>::command(), "harness", to);
}

/// `harness man`: harness(1) in roff, its subcommands listed (clap_mangen).
fn man(dir: Option<&std::path::Path>) -> Result<(), CliError> {
    let cmd = <Cli as clap::CommandFactory>::command();
    if let Some(dir) = dir {
        std::fs::create_dir_all(dir).map_err(during(format!("creating {}", dir.display())))?;
        return clap_mangen::generate_to(cmd, dir)
            .map_err(during(format!("writing the man pages into {}", dir.display())));
    }
    let mut out = Vec::new();
    clap_mangen::Man::new(cmd)
        .render(&mut out)
        .map_err(|e| CliError::Failed(format!("rendering the man page: {e}")))?;
    crate::term::out_raw(&String::from_utf8_lossy(&out));
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// Every argument and flag of every command says what it is (`harness X --help`, the man page).
    #[test]
    fn every_argument_and_flag_is_described() {
        fn walk(c: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for a in c.get_arguments() {
                let id = a.get_id().as_str();
                if matches!(id, "help" | "version") || a.is_hide_set() {
                    continue;
                }
                if a.get_help().is_none() && a.get_long_help().is_none() {
                    missing.push(format!("{path} {id}"));
                }
            }
            for s in c.get_subcommands().filter(|s| !s.is_hide_set() && s.get_name() != "help") {
                if s.get_about().is_none() {
                    missing.push(format!("{path} {} (the command itself)", s.get_name()));
                }
                walk(s, &format!("{path} {}", s.get_name()), missing);
            }
        }
        let mut missing = Vec::new();
        walk(&Cli::command(), "harness", &mut missing);
        assert!(missing.is_empty(), "undescribed:\n{}", missing.join("\n"));
    }

    /// The plumbing is under `debug`, not among the commands a person reads, and its old names parse.
    #[test]
    fn plumbing_is_under_debug_and_its_old_names_still_work() {
        let cmd = Cli::command();
        let visible: Vec<&str> = cmd.get_subcommands().filter(|s| !s.is_hide_set()).map(|s| s.get_name()).collect();
        for plumbing in DEBUG_ALIASES {
            assert!(!visible.contains(plumbing), "{plumbing} is a top-level command");
        }
        assert!(visible.contains(&"debug") && visible.contains(&"completions") && visible.contains(&"man"));
        let args = |s: &str| with_debug_aliases(s.split(' ').map(Into::into).collect());
        let cli = Cli::try_parse_from(args("harness journal show 0123456789ab--x")).unwrap();
        assert!(matches!(cli.cmd, Cmd::Debug(DebugCmd::Journal(JournalCmd::Show { .. }))));
        let cli = Cli::try_parse_from(args("harness supervise 0123456789ab--x")).unwrap();
        assert!(matches!(cli.cmd, Cmd::Debug(DebugCmd::Supervise { .. })));
        // A word that is only an argument is not rewritten.
        assert!(Cli::try_parse_from(args("harness show journal")).is_ok_and(|c| matches!(c.cmd, Cmd::Show { .. })));
    }

    /// Every command line in an `Examples:` block of a help text parses as written (no old names).
    #[test]
    fn every_help_example_parses() {
        /// The example lines of `text`: after `Examples:`, each `  harness …` line up to a blank one.
        fn examples(text: &str) -> Vec<String> {
            let mut out = Vec::new();
            let mut inside = false;
            for line in text.lines() {
                if line.trim_end().ends_with("Examples:") {
                    inside = true;
                } else if line.trim().is_empty() {
                    inside = false;
                } else if inside && line.trim_start().starts_with("harness ") {
                    // The command stops at its description (two spaces) or at a pipe.
                    let cmd = line.trim().split("  ").next().unwrap_or_default();
                    out.push(cmd.split(" | ").next().unwrap_or_default().to_string());
                }
            }
            out
        }
        /// `line` split as a shell would: on spaces, double quotes grouping.
        fn words(line: &str) -> Vec<String> {
            let (mut out, mut word, mut quoted) = (Vec::new(), String::new(), false);
            for c in line.chars() {
                match c {
                    '"' => quoted = !quoted,
                    ' ' if !quoted => out.extend((!word.is_empty()).then(|| std::mem::take(&mut word))),
                    c => word.push(c),
                }
            }
            out.extend((!word.is_empty()).then_some(word));
            out
        }
        fn walk(c: &clap::Command, path: &str, seen: &mut Vec<String>, bad: &mut Vec<String>) {
            let texts = [c.get_after_help(), c.get_after_long_help(), c.get_long_about()];
            for ex in texts.into_iter().flatten().flat_map(|t| examples(&t.to_string())) {
                if let Err(e) = Cli::try_parse_from(words(&ex)) {
                    bad.push(format!("{path}: `{ex}`: {}", e.to_string().lines().next().unwrap_or_default()));
                }
                seen.push(ex);
            }
            for s in c.get_subcommands() {
                walk(s, &format!("{path} {}", s.get_name()), seen, bad);
            }
        }
        let (mut seen, mut bad) = (Vec::new(), Vec::new());
        walk(&Cli::command(), "harness", &mut seen, &mut bad);
        assert!(bad.is_empty(), "help examples that do not parse:\n{}", bad.join("\n"));
        assert!(seen.iter().any(|e| e == "harness plan check plan.json") && seen.len() > 20, "{seen:?}");
    }

    /// The plumbing harness's own processes start is in no completion script, and still parses.
    #[test]
    fn plumbing_is_in_no_completion_script_and_still_parses() {
        use clap::ValueEnum;
        for shell in clap_complete::Shell::value_variants() {
            let mut script = Vec::new();
            completions(*shell, &mut script);
            let script = String::from_utf8(script).unwrap();
            assert!(script.contains("steer"), "{shell}: {script}");
            let words: Vec<&str> = script.split(|c: char| !c.is_ascii_alphanumeric() && c != '-').collect();
            for name in PLUMBING {
                assert!(!words.contains(name), "{shell} completes `{name}`");
            }
        }
        assert!(Cli::try_parse_from(["harness", "stamp", "--log", "l", "--", "true"]).is_err());
        let p = Plumbing::try_parse_from(["harness", "stamp", "--log", "l", "--", "true"]).unwrap();
        assert!(matches!(p, Plumbing::Stamp { .. }));
        let p = Plumbing::try_parse_from(["harness", "approval-mcp", "--socket", "s", "--task", "t"]).unwrap();
        assert!(matches!(p, Plumbing::ApprovalMcp { wait: 660, .. }));
        let names: Vec<String> = Plumbing::command().get_subcommands().map(|c| c.get_name().to_string()).collect();
        assert_eq!(names, PLUMBING);
    }

    /// `--json` is refused, with the command's name, where there is no JSON to print.
    #[test]
    fn json_is_refused_by_name_where_a_command_has_none() {
        let cli = Cli::try_parse_from(["harness", "man", "--json"]).unwrap();
        assert_eq!(no_json(&cli.cmd), Some("man"));
        let cli = Cli::try_parse_from(["harness", "runs", "--json"]).unwrap();
        assert!(cli.json && no_json(&cli.cmd).is_none());
    }
}
