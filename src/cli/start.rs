//! Commands that start something: `harness api`, `harness run`, `harness debug supervise`, and the
//! `normalize-events` filter. Flags are checked here; the work is `api::serve`, `runner`,
//! `supervisor::supervise` and `normalize::normalize_lines`.

use super::Tuning;
use super::error::{CliError, during, failed, usage};
use super::local::home;
use crate::config;
use crate::engine::Adapter;
use crate::ids::RunId;
use crate::os::home::Home;
use crate::term::out;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// `harness api`'s flags.
pub(super) struct ApiFlags {
    pub listen: Vec<SocketAddr>,
    /// `--allow-remote` (or `HARNESS_API_ALLOW_REMOTE=1`).
    pub allow_remote: bool,
    pub unix: Option<PathBuf>,
    pub allow_origin: Vec<String>,
    pub heartbeat: Duration,
    pub stream_buffer: usize,
    pub slow_client_grace: Duration,
    pub fleet: super::FleetArgs,
}

fn api_config(home: &Home, f: &mut ApiFlags) -> Result<crate::api::Config, CliError> {
    if !(2..=1_000_000).contains(&f.stream_buffer) {
        return Err(usage("--stream-buffer must be between 2 and 1000000 events"));
    }
    let configured = config::api_token(home).map_err(usage)?;
    if f.listen.is_empty() {
        f.listen.push(config::api_addr().map_err(usage)?);
    }
    let allow_remote = f.allow_remote || std::env::var("HARNESS_API_ALLOW_REMOTE").is_ok_and(|v| v == "1");
    if let Some(a) = f.listen.iter().find(|a| !a.ip().is_loopback()) {
        // Asked for in so many words: a token file left by an earlier `harness api` is not consent.
        if !allow_remote {
            return Err(usage(format!(
                "--listen {a}: a non-loopback address is served only with --allow-remote (or HARNESS_API_ALLOW_REMOTE=1) and a token"
            )));
        }
        if configured.is_none() {
            return Err(usage(format!(
                "--listen {a}: a non-loopback address needs a token (HARNESS_API_TOKEN or $HARNESS_HOME/api.token)"
            )));
        }
    }
    // Other uids need the token: made on first start when none is configured (`harness token`).
    let token = Some(config::ensure_api_token(home).map_err(|e| CliError::Failed(e.to_string()))?);
    if let Ok(env) = std::env::var("HARNESS_API_ALLOW_ORIGINS") {
        f.allow_origin.extend(env.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_string));
    }
    let mut allow_origins = Vec::new();
    for o in &f.allow_origin {
        let n = crate::api::guard::normalize_origin(o)
            .ok_or_else(|| usage(format!("--allow-origin {o:?}: expected scheme://host[:port]")))?;
        allow_origins.push(n);
    }
    if f.heartbeat.is_zero() || f.heartbeat > Duration::from_secs(10) {
        return Err(usage("--heartbeat must be between 1ms and 10s (proxies drop idle streams)"));
    }
    Ok(crate::api::Config {
        allow_origins,
        token,
        heartbeat: f.heartbeat,
        stream_buffer: f.stream_buffer,
        slow_client_grace: f.slow_client_grace,
        ..Default::default()
    })
}

pub(super) fn api(mut f: ApiFlags) -> Result<(), CliError> {
    let home = home()?;
    let cfg = api_config(&home, &mut f)?;
    crate::os::service::raise_fd_limit();
    // Socket activation: take the fds before the runtime's threads exist.
    let activated = crate::os::service::take_activated();
    // A fleet API serves TCP only: the home's Unix socket is that home's own API's.
    let nats = match &f.fleet.fleet {
        Some(url) => Some(
            crate::fleet::Nats::new(url, f.fleet.creds.clone(), f.fleet.replicas, "harness fleet api")
                .map_err(usage)?,
        ),
        None => None,
    };
    let unix = if nats.is_some() { f.unix } else { f.unix.or_else(|| own_socket(&home)) };
    let mut opts = crate::api::ServeOptions {
        cfg,
        tcp: f.listen,
        unix,
        bound: Vec::new(),
        grace: crate::timeouts::API_SHUTDOWN_GRACE,
        reload_token: true,
        fleet: None,
    };
    let rt = tokio::runtime::Runtime::new().map_err(during("starting the API's runtime"))?;
    rt.block_on(async move {
        if let Some(n) = nats {
            opts.fleet =
                Some(crate::api::fleet::Fleet::start(&n, f.fleet.answer_within).await.map_err(CliError::Failed)?);
        }
        crate::api::serve(home, opts, activated, crate::os::service::terminated())
            .await
            .map_err(|e| CliError::Failed(e.to_string()))
    })
}

/// The relay runtime's blocking threads at most (`relay`).
const RELAY_BLOCKING_THREADS: usize = 16;

/// `harness relay`: this home into the fleet's NATS JetStream, until SIGTERM/SIGINT.
pub(super) fn relay(
    nats: Option<String>,
    host: Option<String>,
    creds: Option<PathBuf>,
    replicas: usize,
) -> Result<(), CliError> {
    let home = home()?;
    let file = home.root.join("relay.env");
    let settings = crate::fleet::read_settings(&file).map_err(usage)?;
    let setting = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty()).or_else(|| settings.get(k).cloned());
    let url = nats.or_else(|| setting("HARNESS_NATS_URL")).ok_or_else(|| {
        usage(format!(
            "--nats URL is required (or HARNESS_NATS_URL, in the environment or {}), e.g. nats://127.0.0.1:4222",
            file.display()
        ))
    })?;
    // Where the name came from, for an error that names it.
    let from_env = std::env::var("HARNESS_RELAY_HOST").ok().filter(|v| !v.is_empty()).is_some();
    let (host, source) = match (host, setting("HARNESS_RELAY_HOST")) {
        (Some(h), _) => (h, "--host".to_string()),
        (None, Some(h)) if from_env => (h, "HARNESS_RELAY_HOST".to_string()),
        (None, Some(h)) => (h, format!("HARNESS_RELAY_HOST in {}", file.display())),
        (None, None) => {
            let h = nix::unistd::gethostname()
                .map(|h| h.to_string_lossy().split('.').next().unwrap_or("").to_ascii_lowercase())
                .map_err(|e| usage(format!("--host is needed: this machine's hostname cannot be read ({e})")))?;
            (h, "this machine's hostname (name one with --host)".to_string())
        }
    };
    let host = crate::ids::HostName::parse(&host).map_err(|e| usage(format!("{source}: {e}")))?;
    let nats = crate::fleet::Nats::new(&url, creds, replicas, &format!("harness relay {host}"))
        .map_err(usage)?
        .with_settings(settings);
    // The relay's blocking work is short file reads and stats of thousands of runs: a few threads
    // do it as fast as hundreds (tokio's default 512 grew to ~400, each with its own allocator
    // arena: twice the memory for nothing).
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .max_blocking_threads(RELAY_BLOCKING_THREADS)
        .build()
        .map_err(during("starting the relay's runtime"))?;
    rt.block_on(crate::relay::run(home, crate::relay::Options { host, nats }, crate::os::service::terminated()))
        .map_err(|e| match e {
            crate::relay::RelayError::Refused(d) => CliError::Usage(d),
            crate::relay::RelayError::Failed(d) => CliError::Failed(d),
        })
}

/// `harness api`'s Unix socket when none is named: `$HARNESS_HOME/sock/api.sock`, so the CLI of
/// this home reaches this API and no other — unless another API of the home answers there already
/// (it keeps it; this one serves TCP only).
fn own_socket(home: &Home) -> Option<PathBuf> {
    let path = home.sock_dir().join("api.sock");
    if std::os::unix::net::UnixStream::connect(&path).is_ok() {
        eprintln!("harness: {} is served by another API of this home; serving TCP only", path.display());
        return None;
    }
    crate::os::home::private_dir(&home.sock_dir()).ok()?;
    Some(path)
}

/// How `harness run` runs the plan.
pub(super) struct How {
    pub supervised: bool,
    pub foreground: bool,
    pub register_only: bool,
    /// `--slug`.
    pub slug: Option<String>,
    /// `--json`: progress as the journal's own lines.
    pub json: bool,
}

fn print_started(id: &RunId, plan: &crate::state::plan::Plan, how: &str, json: bool) {
    if json {
        crate::term::print_json(&serde_json::json!({"runId": id.as_str(), "started": how}));
        return;
    }
    out(&format!("run {id} started ({how})"));
    out(&format!("  show:    harness show {id}      (through `harness api`, or its user service)"));
    if let Some(t) = plan.tasks.first() {
        out(&format!("  watch:   harness watch {id} {}", t.id));
        out(&format!("  steer:   harness steer {id} {} \"message\"", t.id));
        out(&format!("  kill:    harness kill {id} {}", t.id));
    }
    out(&format!("  pause:   harness pause {id}      stop: harness stop {id}"));
}

/// The plan of a session (`harness session start`), written to `$HARNESS_HOME/sessions/`: one claude
/// task on the live channel, working in the run's own worktree (`isolation: shared`).
pub(super) fn session_plan(
    prompt: Option<&str>,
    model: Option<&str>,
    idle: std::time::Duration,
) -> Result<PathBuf, CliError> {
    if prompt.is_some_and(|p| p.trim().is_empty()) {
        return Err(usage("--prompt must not be blank (leave it out to wait for the first message)"));
    }
    let idle_s = idle.as_secs();
    if !(1..=7 * 86_400).contains(&idle_s) {
        return Err(usage(format!("--idle must be 1s to 7 days, got {}", humantime::format_duration(idle))));
    }
    let slug = format!("session-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let mut task = serde_json::json!({"id": "session", "wave": 1, "adapter": "claude", "live": true,
        "prompt": prompt.unwrap_or("(a harness session: waiting for the first message)")});
    if let Some(m) = model {
        task["model"] = serde_json::json!(m);
    }
    let plan = serde_json::json!({"v": "plan/v1", "slug": slug, "isolation": "shared", "max_parallel": 1,
        "session": {"idle_s": idle_s, "prompt": prompt.is_some()}, "tasks": [task]});
    let dir = home()?.root.join("sessions");
    crate::os::home::private_dir(&dir).map_err(during(format!("creating {}", dir.display())))?;
    let path = dir.join(format!("{slug}.plan.json"));
    crate::os::home::write_atomic(&path, serde_json::to_string_pretty(&plan).expect("JSON").as_bytes(), 0o600)
        .map_err(during(format!("writing {}", path.display())))?;
    Ok(path)
}

pub(super) fn run_plan(
    plan: &Path,
    repo: Option<PathBuf>,
    worktree: Option<PathBuf>,
    project: Option<String>,
    how: How,
    tuning: &Tuning,
) -> Result<(), CliError> {
    if how.foreground && !how.supervised {
        return Err(usage("--foreground needs --supervised (an unsupervised run always runs in the foreground)"));
    }
    let home = home()?;
    if let Err(e) = crate::state::notify::load(&home.root) {
        eprintln!("harness: warning: {e}: this run's notifications are held until it is fixed");
    }
    let launch = crate::runner::Launch {
        plan_path: plan,
        repo: repo.as_deref(),
        worktree: worktree.as_deref(),
        project: project.as_deref(),
        supervised: how.supervised,
        slug: how.slug.as_deref(),
        preflight: true,
    };
    let (plan, p) = crate::runner::register(&home, &launch).map_err(|e| match e {
        crate::runner::RunError::Invalid(d) => CliError::Usage(d),
        crate::runner::RunError::Failed(d) => CliError::Failed(d),
    })?;
    let id = p.run_id.clone();
    let json = how.json;
    if how.register_only {
        out(&id.to_string());
        return Ok(());
    }
    if !how.supervised || how.foreground {
        // The run is in this process: a reader that goes away ends the printing, not the run.
        crate::term::outlive_stdout();
    }
    if !how.supervised {
        if !how.json {
            out(&format!("run {id} started (batch, in this terminal; Ctrl-C stops it)"));
        }
        let mut opts = tuning.options();
        opts.batch = true;
        opts.stop_on_signal = true;
        return finish_supervise(&id, home, opts, crate::progress::Progress::of(&p.journal_path(), how.json));
    }
    if how.foreground {
        print_started(&id, &plan, "supervised in this process", how.json);
        let mut opts = tuning.options();
        opts.stop_on_signal = true;
        return finish_supervise(&id, home, opts, None);
    }
    #[cfg(target_os = "macos")]
    {
        let bin = std::env::current_exe().map_err(during("finding this binary"))?;
        let how = crate::os::launchd::start_run_agent(&bin, &home, &id).map_err(CliError::Failed)?;
        print_started(&id, &plan, &how, json);
        return Ok(());
    }
    #[allow(unreachable_code)]
    let started = match crate::runner::systemd_units_for(&home) {
        Ok(prefix) => crate::runner::start_with_systemd(&home, &id, &prefix),
        Err(why) => {
            if let Some(why) = why {
                eprintln!("harness: supervising run {id} detached: {why}");
            }
            crate::runner::start_detached(&home, &p, &tuning.args(), &[])
        }
    };
    let how = started.map_err(during(format!("starting run {id}'s supervisor")))?;
    print_started(&id, &plan, &how, json);
    Ok(())
}

pub(super) fn supervise(run: &str, tuning: &Tuning) -> Result<(), CliError> {
    crate::term::outlive_stdout();
    let id = super::runref::resolve(run)?;
    let mut opts = tuning.options();
    // Socket activation: the service manager passes the bound socket as fd 3. Taken here, before
    // the runtime's threads exist (listenfd edits the environment).
    for a in crate::os::service::take_activated() {
        match a {
            crate::os::service::Activated::Unix(l) if opts.listener.is_none() => opts.listener = Some(l),
            _ => eprintln!("harness: supervise takes one Unix socket; ignoring another passed socket"),
        }
    }
    finish_supervise(&id, home()?, opts, None)
}

/// Supervises the run to its end, printing `progress` (a batch run's lines) meanwhile.
fn finish_supervise(
    id: &RunId,
    home: Home,
    opts: crate::supervisor::Options,
    progress: Option<crate::progress::Progress>,
) -> Result<(), CliError> {
    use crate::supervisor::Ending;
    crate::config::forget_secrets();
    let batch = opts.batch;
    let rt = tokio::runtime::Runtime::new().map_err(during("starting the supervisor's runtime"))?;
    let progress = progress.map(|p| std::sync::Arc::new(std::sync::Mutex::new(p)));
    let follower = progress.clone().map(|p| {
        rt.spawn(async move {
            loop {
                if let Ok(mut p) = p.lock() {
                    p.drain();
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    });
    let ending = rt.block_on(crate::supervisor::supervise(home, id.clone(), opts, crate::os::service::terminated()));
    if let Some(f) = follower {
        f.abort();
    }
    // The last records (the run's end) are printed before the verdict.
    if let Some(Ok(mut p)) = progress.as_ref().map(|p| p.lock()) {
        p.drain();
    }
    let ending = ending.map_err(during(format!("supervising run {id}")))?;
    match ending {
        Ending::Finished => out(&format!("run {id} finished")),
        Ending::AlreadyOver(d) => out(&d),
        Ending::Interrupted => {
            out(&format!("run {id}: supervisor interrupted; running turns were killed and will be re-dispatched"))
        }
        Ending::Stopped(d) if batch => return Err(CliError::Failed(format!("run {id} {d}"))),
        Ending::Stopped(d) => out(&format!("run {id} {d}")),
        // A supervisor exits 0 on a clean ending (a restart would not help); batch reports it.
        Ending::Failed(d) if batch => return Err(CliError::Failed(format!("run {id} failed: {d}"))),
        Ending::Failed(d) => out(&format!("run {id} failed: {d}")),
    }
    Ok(())
}

/// Streams stdin through the normalizer. Lines are split in place in a large read buffer (no
/// per-line copy); output is written whenever no more input is waiting, so the command works both as
/// a live filter and at bulk speed.
pub(super) fn normalize_events(
    adapter: Adapter,
    run: &str,
    task: &str,
    session: Option<&str>,
    first_line: u64,
    fixed_ts: Option<&str>,
) -> Result<(), CliError> {
    use std::io::{Read, Write};
    const CHUNK: usize = 1 << 20;
    if first_line == 0 {
        return Err(usage("--first-line is 1-based"));
    }
    if let Some(ts) = fixed_ts {
        humantime::parse_rfc3339_weak(ts).map_err(|e| usage(format!("--observed-ts {ts:?}: {e}")))?;
    }
    let writer = crate::events::Writer::new(run, task);
    let mut stdin = std::io::stdin().lock();
    let mut stdout = std::io::stdout().lock();
    // buf[..filled] holds unread input; it grows only for a line longer than the buffer.
    let mut buf: Vec<u8> = vec![0; 2 * CHUNK];
    let (mut filled, mut line_no, mut eof) = (0, first_line, false);
    let mut out: Vec<u8> = Vec::with_capacity(2 * CHUNK);
    while !eof {
        if buf.len() - filled < CHUNK {
            buf.resize(filled + CHUNK, 0);
        }
        let n = loop {
            match stdin.read(&mut buf[filled..]) {
                Ok(n) => break n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(failed("reading stdin", e)),
            }
        };
        filled += n;
        eof = n == 0;
        let now;
        let observed_ts = match fixed_ts {
            Some(t) => t,
            None => {
                now = crate::state::journal::now_rfc3339();
                &now
            }
        };
        let ctx = crate::engine::normalize::Context { run, task, session, observed_ts };
        let used = crate::engine::normalize::normalize_lines(
            adapter,
            &buf[..filled],
            eof,
            &mut line_no,
            &ctx,
            &writer,
            &mut out,
        );
        buf.copy_within(used..filled, 0);
        filled -= used;
        if (n < CHUNK || out.len() >= CHUNK || eof) && !out.is_empty() {
            if stdout.write_all(&out).and_then(|_| stdout.flush()).is_err() {
                return Ok(()); // stdout closed: nobody is listening any more
            }
            out.clear();
        }
    }
    Ok(())
}
