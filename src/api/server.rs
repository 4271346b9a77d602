//! Running the API: binding (or taking activated) listeners, announcing them, the SIGHUP token reload,
//! READY/STATUS/WATCHDOG for the service manager, and the accept loop with graceful shutdown. Used by
//! `harness api` and `harness demo` alike. Decides nothing about requests (`handle` does).

use super::guard::{Conn, Origin, Via};
use super::{Api, Config, handle};
use crate::os::home::Home;
use crate::os::service::Activated;
use crate::term::announce;
use crate::timeouts;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::watch;

/// A listening socket the API serves.
pub enum Listener {
    Tcp(TcpListener),
    Unix(UnixListener),
}

/// What `serve` listens on and how it answers.
pub struct ServeOptions {
    pub cfg: Config,
    /// TCP addresses to bind (when the service manager passed no socket).
    pub tcp: Vec<SocketAddr>,
    /// A Unix socket path to bind (when the service manager passed no socket).
    pub unix: Option<PathBuf>,
    /// Listeners bound already (the demo binds before it starts its run, so a busy port fails first).
    pub bound: Vec<std::net::TcpListener>,
    /// In-flight responses get this long to finish on shutdown.
    pub grace: Duration,
    /// Re-read the token on SIGHUP (`harness api`); the demo has none to re-read.
    pub reload_token: bool,
    /// A fleet API (`harness api --fleet`): answered from the fleet, not from the home.
    pub fleet: Option<Arc<super::fleet::Fleet>>,
}

/// Why the API could not start serving.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: String, source: std::io::Error },
}

fn bind_err(addr: impl std::fmt::Display) -> impl FnOnce(std::io::Error) -> ServeError {
    move |source| ServeError::Bind { addr: addr.to_string(), source }
}

/// Serves `home` until `stop` resolves: listeners passed by the service manager (`activated`) when
/// there are any, else `opts.bound` plus what `opts.tcp`/`opts.unix` name. Each listener is announced
/// on stdout.
pub async fn serve(
    home: Home,
    opts: ServeOptions,
    activated: Vec<Activated>,
    stop: impl std::future::Future<Output = ()>,
) -> Result<(), ServeError> {
    // Polled once before anything is announced: a stop that installs signal handlers when first
    // polled (`terminated`) has them in place, so a SIGTERM or Ctrl-C just after "listening on…"
    // is a clean stop (the socket file removed), not the signal's default action.
    let mut stop = std::pin::pin!(stop);
    if futures_util::FutureExt::now_or_never(stop.as_mut()).is_some() {
        return Ok(());
    }
    let (tx, rx) = watch::channel(false);
    let mut api = Api::new(home.clone(), opts.cfg, rx.clone());
    api.fleet = opts.fleet;
    let api = Arc::new(api);
    // The SIGHUP handler is in place before any listener is announced.
    if opts.reload_token {
        let reload = api.clone();
        tokio::spawn(crate::os::service::on_hangup(move || match crate::config::api_token(&home) {
            Ok(t) => {
                tracing::info!(token = t.is_some(), "SIGHUP: token re-read");
                *reload.token.write().unwrap_or_else(|p| p.into_inner()) = t;
            }
            Err(e) => tracing::error!(error = %e, "SIGHUP: token not reloaded, keeping the old one"),
        }));
    }
    let (listeners, socket_file) = listen(opts.tcp, opts.unix, opts.bound, activated).await?;
    let n = listeners.len();
    let watched = api.clone();
    // READY once serving; the watchdog is fed from the runtime that serves, so a hung runtime is
    // restarted; STATUS says what is going on.
    let watchdog = tokio::spawn(async move {
        crate::os::service::notify(&[sd_notify::NotifyState::Ready]);
        let period = crate::os::service::watchdog_interval().unwrap_or(timeouts::API_WATCHDOG);
        loop {
            let streams = watched.streams.load(std::sync::atomic::Ordering::Relaxed);
            let status = format!("serving {n} listener(s); {streams} SSE stream(s) open");
            crate::os::service::notify(&[sd_notify::NotifyState::Watchdog, sd_notify::NotifyState::Status(&status)]);
            tokio::time::sleep(period).await;
        }
    });
    let server = tokio::spawn(serve_on(api, listeners, rx, opts.grace));
    stop.await;
    crate::os::service::notify(&[sd_notify::NotifyState::Stopping]);
    let _ = tx.send(true);
    let _ = server.await;
    watchdog.abort();
    if let Some(f) = socket_file {
        f.remove();
    }
    Ok(())
}

/// Binds (or takes) every listener, then announces each: a line on stdout means every socket
/// is there to connect to. The Unix socket's file is returned with them, to be removed on shutdown.
async fn listen(
    tcp: Vec<SocketAddr>,
    unix: Option<PathBuf>,
    bound: Vec<std::net::TcpListener>,
    activated: Vec<Activated>,
) -> Result<(Vec<Listener>, Option<SocketFile>), ServeError> {
    let (mut listeners, mut said) = (Vec::new(), Vec::new());
    for a in activated {
        match a {
            Activated::Tcp(l) => {
                let addr = l.local_addr().map(|a| a.to_string()).unwrap_or_else(|_| "?".into());
                said.push(format!("listening on http://{addr} (socket activation)"));
                listeners.push(Listener::Tcp(TcpListener::from_std(l).map_err(bind_err(&addr))?));
            }
            Activated::Unix(l) => {
                said.push("listening on a Unix socket (socket activation)".into());
                listeners
                    .push(Listener::Unix(UnixListener::from_std(l).map_err(bind_err("an activated Unix socket"))?));
            }
        }
    }
    let mut file = None;
    if listeners.is_empty() {
        for l in bound {
            let addr = l.local_addr().map_err(bind_err("a bound socket"))?;
            l.set_nonblocking(true).map_err(bind_err(addr))?;
            said.push(format!("listening on http://{addr}"));
            listeners.push(Listener::Tcp(TcpListener::from_std(l).map_err(bind_err(addr))?));
        }
        for a in tcp {
            let l = TcpListener::bind(a).await.map_err(bind_err(a))?;
            said.push(format!("listening on http://{}", l.local_addr().map_err(bind_err(a))?));
            listeners.push(Listener::Tcp(l));
        }
        if let Some(path) = unix {
            let _ = std::fs::remove_file(&path);
            let l = UnixListener::bind(&path).map_err(bind_err(path.display()))?;
            // The socket's mode is the umask's at bind: made the owner's only, as the docs say.
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
                .map_err(bind_err(path.display()))?;
            said.push(format!("listening on unix:{}", path.display()));
            file = SocketFile::bound(path);
            listeners.push(Listener::Unix(l));
        }
    }
    said.iter().for_each(|s| announce(s));
    Ok((listeners, file))
}

/// The Unix socket file this API bound: removed when it stops serving, so no file is left that
/// refuses every connection — unless another API has bound the path since (the file is then that
/// one's).
struct SocketFile {
    path: PathBuf,
    /// The file's device and inode at bind.
    id: (u64, u64),
}

impl SocketFile {
    fn bound(path: PathBuf) -> Option<SocketFile> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::symlink_metadata(&path).ok()?;
        Some(SocketFile { path, id: (m.dev(), m.ino()) })
    }

    fn remove(self) {
        use std::os::unix::fs::MetadataExt;
        let ours = std::fs::symlink_metadata(&self.path).is_ok_and(|m| (m.dev(), m.ino()) == self.id);
        if ours && let Err(e) = std::fs::remove_file(&self.path) {
            tracing::warn!(error = %e, "cannot remove {}", self.path.display());
        }
    }
}

/// Serves `listeners` until `shutdown` flips to true, then stops accepting and lets in-flight
/// responses finish (bounded by `grace`).
pub async fn serve_on(api: Arc<Api>, listeners: Vec<Listener>, mut shutdown: watch::Receiver<bool>, grace: Duration) {
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut builder = hyper::server::conn::http1::Builder::new();
    // Slowloris defence: a client gets this long to send its request head.
    builder.timer(TokioTimer::new()).header_read_timeout(timeouts::HEADER_READ);
    // A request whose client closed its side after sending it is still answered — and so judged
    // and, when refused, logged: without it hyper dropped such a request unseen now and then, and
    // a blind POST of another uid left no refusal on the record.
    builder.half_close(true);
    let builder = Arc::new(builder);
    let (conn_tx, mut conn_rx) = tokio::sync::mpsc::channel::<(Box<dyn ConnIo>, Conn)>(64);
    let mut accepters = Vec::new();
    for l in listeners {
        let tx = conn_tx.clone();
        let mut sd = shutdown.clone();
        accepters.push(tokio::spawn(async move {
            loop {
                let accepted: Option<(Box<dyn ConnIo>, Conn)> = tokio::select! {
                    _ = sd.changed() => return,
                    a = accept(&l) => a,
                };
                if let Some(c) = accepted
                    && tx.send(c).await.is_err()
                {
                    return;
                }
            }
        }));
    }
    drop(conn_tx);
    loop {
        tokio::select! {
            _ = shutdown.changed() => break,
            c = conn_rx.recv() => {
                let Some((io, conn)) = c else { break };
                let api = api.clone();
                let svc = hyper::service::service_fn(move |req| handle(api.clone(), conn, req));
                let conn = builder.serve_connection(TokioIo::new(io), svc);
                let fut = graceful.watch(conn);
                tokio::spawn(async move {
                    if let Err(e) = fut.await {
                        tracing::debug!(error = %e, "connection ended with an error");
                    }
                });
            }
        }
    }
    for a in accepters {
        a.abort();
    }
    if tokio::time::timeout(grace, graceful.shutdown()).await.is_err() {
        tracing::warn!("in-flight responses did not finish within {grace:?}; exiting anyway");
    }
}

/// A connection's byte stream (TCP or Unix).
pub trait ConnIo: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static> ConnIo for T {}

/// Accepts one connection and finds who is on the other end, once per connection: the peer's uid
/// from the kernel (SO_PEERCRED for Unix, sock_diag for loopback TCP); `None` when it cannot tell.
async fn accept(l: &Listener) -> Option<(Box<dyn ConnIo>, Conn)> {
    let r: std::io::Result<(Box<dyn ConnIo>, Conn)> = match l {
        Listener::Tcp(t) => t.accept().await.map(|(s, peer)| {
            let local = s.local_addr().ok();
            let _ = s.set_nodelay(true);
            let found = local.and_then(|local| crate::os::peer::tcp_peer(local, peer));
            let origin = match found {
                Some((_, inode)) => Origin::Socket(inode),
                None if !peer.ip().to_canonical().is_loopback() => Origin::Remote,
                None => Origin::Unknown,
            };
            let port = local.map_or(0, |a| a.port());
            (
                Box::new(s) as Box<dyn ConnIo>,
                Conn { via: Via::Tcp(port), uid: found.map(|(uid, _)| uid), origin, tokened: false },
            )
        }),
        Listener::Unix(u) => u.accept().await.map(|(s, _)| {
            let cred = s.peer_cred().ok();
            let pid = cred.and_then(|c| c.pid()).and_then(|p| u32::try_from(p).ok());
            let origin = pid.map_or(Origin::Unknown, Origin::Pid);
            (
                Box::new(s) as Box<dyn ConnIo>,
                Conn { via: Via::Unix, uid: cred.map(|c| c.uid()), origin, tokened: false },
            )
        }),
    };
    match r {
        Ok(c) => Some(c),
        Err(e) => {
            // EMFILE and friends: back off instead of spinning.
            tracing::warn!(error = %e, "accept failed");
            tokio::time::sleep(Duration::from_millis(50)).await;
            None
        }
    }
}
