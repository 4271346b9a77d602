//! Process plumbing shared by the daemons: logging setup (journald when present, else stderr) and
//! the shutdown signal. No business logic lives here.

use tracing_subscriber::EnvFilter;
use tracing_subscriber::prelude::*;

/// Installs the global subscriber: `RUST_LOG`-style filtering (default `info`), the journald layer
/// when journald is reachable and we run under it, else human-readable stderr.
pub fn init_logging() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let under_journal = std::env::var_os("JOURNAL_STREAM").is_some();
    if under_journal && let Ok(layer) = tracing_journald::layer() {
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
