//! The control socket (`spec/CONTROL.md`): newline-delimited JSON over a Unix socket, one request →
//! one response. The listener checks the peer's uid (`SO_PEERCRED`), parses and bounds each request,
//! and hands it to the scheduler, which alone owns run state; this module holds no state.
//! Also the client side, used by the CLI and the API.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, oneshot};

/// Longest request line accepted.
pub const MAX_REQUEST: usize = 256 * 1024;

/// A control request. `by` says who asked (journaled); defaults to `socket`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Request {
    pub verb: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub msg: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupt: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
}

/// A response: `{"ok":true,…}` or `{"ok":false,"status":409|400|403|404|500,"detail":"…"}`.
pub type Response = Value;

pub fn refuse(status: u16, detail: impl Into<String>) -> Response {
    json!({"ok": false, "status": status, "detail": detail.into()})
}

/// A request on its way to the scheduler, with where to send the answer.
pub struct Envelope {
    pub req: Request,
    pub reply: oneshot::Sender<Response>,
}

/// Requests read off the socket and not yet answered on it. The supervisor waits (bounded) for them
/// before it exits, so an answer the scheduler gave — to `stop`, say, right before the run ends —
/// reaches its client instead of dying with the process.
#[derive(Clone, Default)]
pub struct InFlight(Arc<AtomicUsize>);

struct InFlightGuard(Arc<AtomicUsize>);

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl InFlight {
    fn enter(&self) -> InFlightGuard {
        self.0.fetch_add(1, Ordering::SeqCst);
        InFlightGuard(self.0.clone())
    }

    /// Waits until every request read has been answered, at most `max`.
    pub async fn drained(&self, max: Duration) {
        let end = tokio::time::Instant::now() + max;
        while self.0.load(Ordering::SeqCst) > 0 && tokio::time::Instant::now() < end {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
}

/// Accepts connections until the scheduler's receiver is dropped.
pub async fn serve(listener: UnixListener, to_scheduler: mpsc::Sender<Envelope>, inflight: InFlight) {
    // SAFETY: geteuid cannot fail.
    let me = unsafe { libc::geteuid() };
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "control socket accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        if to_scheduler.is_closed() {
            return;
        }
        let tx = to_scheduler.clone();
        let inflight = inflight.clone();
        tokio::spawn(async move {
            if let Err(e) = connection(stream, me, tx, inflight).await {
                tracing::debug!(error = %e, "control connection ended");
            }
        });
    }
}

async fn connection(
    stream: UnixStream,
    me: u32,
    tx: mpsc::Sender<Envelope>,
    inflight: InFlight,
) -> std::io::Result<()> {
    let peer = stream.peer_cred()?;
    let (r, mut w) = stream.into_split();
    if peer.uid() != me {
        let resp = refuse(403, format!("peer uid {} is not the supervisor's uid {me}", peer.uid()));
        tracing::warn!(peer_uid = peer.uid(), "refused control connection from another uid");
        w.write_all(format!("{resp}\n").as_bytes()).await?;
        return Ok(());
    }
    let mut r = BufReader::new(r);
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = (&mut r).take(MAX_REQUEST as u64 + 1).read_until(b'\n', &mut line).await?;
        if n == 0 {
            return Ok(());
        }
        // Counted from here until the answer is written (or the write fails).
        let _answering = inflight.enter();
        let resp = if line.len() > MAX_REQUEST {
            let resp = refuse(400, format!("request longer than {MAX_REQUEST} bytes"));
            w.write_all(format!("{resp}\n").as_bytes()).await?;
            return Ok(());
        } else {
            match serde_json::from_slice::<Request>(&line) {
                Err(e) => refuse(400, format!("request is not a control/v1 object: {e}")),
                Ok(req) => {
                    let (reply, rx) = oneshot::channel();
                    if tx.send(Envelope { req, reply }).await.is_err() {
                        refuse(409, "run not live: the supervisor is shutting down")
                    } else {
                        rx.await.unwrap_or_else(|_| refuse(409, "run not live: the supervisor is shutting down"))
                    }
                }
            }
        };
        w.write_all(format!("{resp}\n").as_bytes()).await?;
    }
}

/// Why a client request did not get an answer.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("no supervisor at {path}: {source}")]
    Connect { path: String, source: std::io::Error },
    #[error("supervisor at {path}: {detail}")]
    Io { path: String, detail: String },
}

/// Sends one request to the supervisor socket at `path` and returns its response.
pub async fn request(path: &Path, req: &Request, timeout: Duration) -> Result<Response, ClientError> {
    let p = path.display().to_string();
    let mut s = tokio::time::timeout(Duration::from_secs(2), UnixStream::connect(path))
        .await
        .map_err(|_| ClientError::Connect { path: p.clone(), source: std::io::ErrorKind::TimedOut.into() })?
        .map_err(|source| ClientError::Connect { path: p.clone(), source })?;
    let io = |e: std::io::Error| ClientError::Io { path: p.clone(), detail: e.to_string() };
    let mut line = serde_json::to_vec(req).expect("a Request serializes");
    line.push(b'\n');
    s.write_all(&line).await.map_err(io)?;
    let mut r = BufReader::new(s);
    let mut buf = String::new();
    match tokio::time::timeout(timeout, r.read_line(&mut buf)).await {
        Err(_) => Err(ClientError::Io { path: p, detail: format!("no answer within {timeout:?}") }),
        Ok(Err(e)) => Err(io(e)),
        Ok(Ok(0)) => Err(ClientError::Io { path: p, detail: "closed without an answer".into() }),
        Ok(Ok(_)) => serde_json::from_str(&buf)
            .map_err(|e| ClientError::Io { path: p, detail: format!("answer is not JSON: {e}") }),
    }
}

/// True when something accepts connections at `path`.
pub fn is_live(path: &Path) -> bool {
    std::os::unix::net::UnixStream::connect(path).is_ok()
}
