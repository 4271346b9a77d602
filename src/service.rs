//! Process plumbing shared by the daemons: logging setup (journald when present, else stderr) and
//! the shutdown signal. No business logic lives here.

use tracing_subscriber::EnvFilter;
use tracing_subscriber::prelude::*;

/// Installs the global subscriber: `RUST_LOG`-style filtering (default `info`), the journald layer
/// when journald is reachable and we run under it, else human-readable stderr.
pub fn init_logging() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let under_journal = std::env::var_os("JOURNAL_STREAM").is_some();
    // Fields keep their own names (RUN_ID, TASK, VERB, SEQ), so `journalctl RUN_ID=…` finds a run.
    if under_journal && let Ok(layer) = tracing_journald::layer().map(|l| l.with_field_prefix(None)) {
        let _ = tracing_subscriber::registry().with(filter).with(layer).try_init();
        return;
    }
    let _ = tracing_subscriber::registry()
        .with(filter)
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_target(false)
                .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())),
        )
        .try_init();
}

/// Raises the soft open-files limit to the hard one: every SSE client holds a socket (and a log fd
/// while it reads), and the usual soft limit of 1024 is below what one API serves.
pub fn raise_fd_limit() {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit with a valid pointer to a local struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

/// Resolves when SIGTERM or SIGINT arrives.
pub async fn terminated() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "cannot install SIGTERM handler");
            return std::future::pending().await;
        }
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

/// A listening socket handed over by the service manager.
pub enum Activated {
    Tcp(std::net::TcpListener),
    Unix(std::os::unix::net::UnixListener),
}

/// Takes the sockets passed by systemd (`LISTEN_FDS`), telling TCP from Unix by the socket's
/// family (one `.socket` unit names all its fds alike). Call from a synchronous `main` before any
/// thread exists: it unsets `LISTEN_*` (a data race once threads run). Each socket is made
/// non-blocking for tokio.
pub fn take_activated() -> Vec<Activated> {
    use nix::sys::socket::SockaddrLike;
    use std::os::fd::FromRawFd;
    // SAFETY: called before the runtime or any other thread is started (documented above).
    let fds = match unsafe { sd_notify::listen_fds_with_names_and_unset_env() } {
        Ok(f) => f.collect::<Vec<_>>(),
        Err(e) => {
            eprintln!("harness: ignoring malformed socket activation variables: {e}");
            return Vec::new();
        }
    };
    let mut out = Vec::new();
    for (fd, _name) in fds {
        let family =
            nix::sys::socket::getsockname::<nix::sys::socket::SockaddrStorage>(fd).ok().and_then(|a| a.family());
        // SAFETY: fd was passed to this process for it to own (sd_listen_fds protocol).
        let s = match family {
            Some(nix::sys::socket::AddressFamily::Unix) => {
                let l = unsafe { std::os::unix::net::UnixListener::from_raw_fd(fd) };
                l.set_nonblocking(true).map(|_| Activated::Unix(l))
            }
            Some(nix::sys::socket::AddressFamily::Inet | nix::sys::socket::AddressFamily::Inet6) => {
                let l = unsafe { std::net::TcpListener::from_raw_fd(fd) };
                l.set_nonblocking(true).map(|_| Activated::Tcp(l))
            }
            other => {
                eprintln!("harness: ignoring passed fd {fd} of family {other:?}");
                continue;
            }
        };
        match s {
            Ok(a) => out.push(a),
            Err(e) => eprintln!("harness: passed fd {fd}: {e}"),
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
