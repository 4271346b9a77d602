//! Process plumbing shared by the daemons: logging setup (journald when present, else stderr), the
//! shutdown and reload signals, socket activation (`take_activated`: systemd's `LISTEN_FDS` or
//! launchd's sockets, taken before the runtime's threads exist), sd_notify (READY, STATUS, WATCHDOG,
//! STOPPING) and the open-files limit. No business logic lives here.

use tracing_subscriber::EnvFilter;
use tracing_subscriber::prelude::*;

/// Who reads a process's log, which decides its default level and its shape on stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Logging {
    /// A daemon (`api`, `debug supervise`) or a command asked to tell its story (`run -v`, a
    /// `--foreground` supervisor): `info`, in tracing's format (time, level, message, fields).
    Daemon,
    /// A person's command: warnings and errors only, each one plain line
    /// `harness: warning: <message>` (see [`Plain`]).
    Person,
}

/// Installs the global subscriber: journald when it is reachable and we run under it (fields keep
/// their names; unchanged by `how`). Else stderr: with `RUST_LOG` set, its filter in tracing's
/// format; without it, `how` decides the level and the shape ([`Logging`]).
pub fn init_logging(how: Logging) {
    let from_env = EnvFilter::try_from_default_env().ok();
    let plain = how == Logging::Person && from_env.is_none();
    let default = if how == Logging::Daemon { "info" } else { "warn" };
    let filter = from_env.unwrap_or_else(|| EnvFilter::new(default));
    let under_journal = std::env::var_os("JOURNAL_STREAM").is_some();
    // Fields keep their own names (RUN_ID, TASK, VERB, SEQ), so `journalctl RUN_ID=…` finds a run.
    if under_journal && let Ok(layer) = tracing_journald::layer().map(|l| l.with_field_prefix(None)) {
        let _ = tracing_subscriber::registry().with(filter).with(layer).try_init();
        return;
    }
    let layer = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    if plain {
        let _ = tracing_subscriber::registry().with(filter).with(layer.event_format(Plain)).try_init();
        return;
    }
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let _ = tracing_subscriber::registry().with(filter).with(layer.with_target(false).with_ansi(ansi)).try_init();
}

/// A log line as a person reads it: `harness: warning: <message>`, with the `error` field's
/// value after a colon when there is one (the cause); no time, no other fields.
struct Plain;

impl<S, N> tracing_subscriber::fmt::FormatEvent<S, N> for Plain
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    N: for<'a> tracing_subscriber::fmt::FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _: &tracing_subscriber::fmt::FmtContext<'_, S, N>,
        mut w: tracing_subscriber::fmt::format::Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        let mut said = Said::default();
        event.record(&mut said);
        let level = match *event.metadata().level() {
            tracing::Level::ERROR => "error",
            tracing::Level::WARN => "warning",
            tracing::Level::INFO => "info",
            _ => "debug",
        };
        let line = match said.error {
            Some(e) => format!("{}: {e}", said.message),
            None => said.message,
        };
        // One line, whatever the message holds.
        writeln!(w, "harness: {level}: {}", line.replace(['\n', '\r'], " "))
    }
}

/// What [`Plain`] keeps of an event: its message and its `error` field.
#[derive(Default)]
struct Said {
    message: String,
    error: Option<String>,
}

impl tracing::field::Visit for Said {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        match field.name() {
            "message" => self.message = value.to_string(),
            "error" => self.error = Some(value.to_string()),
            _ => {}
        }
    }

    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        match field.name() {
            "message" => self.message = format!("{value:?}"),
            "error" => self.error = Some(format!("{value:?}")),
            _ => {}
        }
    }
}

/// Raises the soft open-files limit to the hard one: every SSE client holds a socket (and a log fd
/// while it reads), and the usual soft limit of 1024 is below what one API serves.
pub fn raise_fd_limit() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE)
        && soft < hard
        && let Err(e) = setrlimit(Resource::RLIMIT_NOFILE, hard, hard)
    {
        tracing::warn!(error = %e, soft, hard, "cannot raise the open-files limit");
    }
}

/// Handlers for `signals`, installed now (so a signal that arrives before the stream is first polled
/// is not lost, nor left to its default action); `None` when they cannot be installed (logged).
fn install(signals: &[i32]) -> Option<signal_hook_tokio::Signals> {
    match signal_hook_tokio::Signals::new(signals) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::error!(error = %e, "cannot install signal handlers");
            None
        }
    }
}

/// Resolves when SIGTERM or SIGINT arrives.
pub async fn terminated() {
    use futures_util::StreamExt;
    use signal_hook::consts::{SIGINT, SIGTERM};
    match install(&[SIGTERM, SIGINT]) {
        Some(mut s) => drop(s.next().await),
        None => std::future::pending().await,
    }
}

/// Installs a SIGHUP handler now (SIGHUP's default action ends the process) and returns the task
/// that calls `reload` on every SIGHUP, telling the service manager RELOADING then READY around it.
/// Call from within the runtime, before the process says it is ready.
pub fn on_hangup(mut reload: impl FnMut() + Send + 'static) -> impl std::future::Future<Output = ()> + Send {
    use futures_util::StreamExt;
    let signals = install(&[signal_hook::consts::SIGHUP]);
    async move {
        let Some(mut signals) = signals else { return std::future::pending().await };
        while signals.next().await.is_some() {
            notify(&[sd_notify::NotifyState::Reloading]);
            reload();
            notify(&[sd_notify::NotifyState::Ready]);
        }
    }
}

/// A listening socket handed over by the service manager.
pub enum Activated {
    Tcp(std::net::TcpListener),
    Unix(std::os::unix::net::UnixListener),
}

/// Takes the sockets passed by the service manager. systemd: `LISTEN_FDS` — names read with
/// sd-notify (which needs `LISTEN_PID` intact), then listenfd converts each fd, trying TCP then Unix
/// (one `.socket` unit names all its fds alike, so the family tells them apart); launchd (macOS): the
/// `api-tcp`, `api-unix` and `control` sockets of the job. Call from a synchronous `main` before any
/// thread exists (listenfd unsets `LISTEN_*`, a data race once threads run). Sockets are made
/// non-blocking for tokio.
pub fn take_activated() -> Vec<Activated> {
    let mut out = Vec::new();
    let names: Vec<String> =
        sd_notify::listen_fds_with_names().map(|f| f.map(|(_, n)| n).collect()).unwrap_or_default();
    let mut fds = listenfd::ListenFd::from_env();
    for i in 0..fds.len() {
        let name = names.get(i).map(String::as_str).unwrap_or("");
        let taken = match fds.take_tcp_listener(i) {
            Ok(Some(l)) => l.set_nonblocking(true).map(|_| Some(Activated::Tcp(l))),
            _ => match fds.take_unix_listener(i) {
                Ok(Some(l)) => l.set_nonblocking(true).map(|_| Some(Activated::Unix(l))),
                Ok(None) => Ok(None),
                Err(e) => Err(e),
            },
        };
        match taken {
            Ok(Some(a)) => out.push(a),
            Ok(None) => {}
            Err(e) => eprintln!("harness: passed socket {i} ({name}): {e}"),
        }
    }
    #[cfg(target_os = "macos")]
    if out.is_empty() {
        use std::os::fd::FromRawFd;
        for name in ["api-tcp", "api-unix", "control"] {
            for fd in crate::os::launchd::activate_socket(name) {
                // SAFETY: launchd hands these fds to this process to own.
                if name == "api-tcp" {
                    let l = unsafe { std::net::TcpListener::from_raw_fd(fd) };
                    if l.set_nonblocking(true).is_ok() {
                        out.push(Activated::Tcp(l));
                    }
                } else {
                    let l = unsafe { std::os::unix::net::UnixListener::from_raw_fd(fd) };
                    if l.set_nonblocking(true).is_ok() {
                        out.push(Activated::Unix(l));
                    }
                }
            }
        }
    }
    out
}

/// Tells the service manager something (a no-op without `NOTIFY_SOCKET`).
pub fn notify(state: &[sd_notify::NotifyState]) {
    let _ = sd_notify::notify(state);
}

/// The watchdog period to ping at (half of `WATCHDOG_USEC`), when the manager set one for us.
pub fn watchdog_interval() -> Option<std::time::Duration> {
    sd_notify::watchdog_enabled().map(|d| d / 2)
}
