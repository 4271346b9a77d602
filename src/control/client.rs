//! The client side of the control socket: one request, one answer line, each bounded in time.

use super::{Reply, Request};
use std::path::Path;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;

/// Why a client request did not get an answer.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("no supervisor at {path}: {source}")]
    Connect { path: String, source: std::io::Error },
    #[error("supervisor at {path}: {detail}")]
    Io { path: String, detail: String },
    /// Delivered, but no answer came within the budget: the supervisor may have acted.
    #[error("no answer from the supervisor at {path} within {} s", after.as_secs())]
    NoAnswer { path: String, after: Duration },
}

/// Sends one request to the supervisor socket at `path` and returns its response.
pub async fn request(path: &Path, req: &Request, timeout: Duration) -> Result<Reply, ClientError> {
    let p = path.display().to_string();
    let mut s = tokio::time::timeout(crate::timeouts::CONTROL_CONNECT, UnixStream::connect(path))
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
        Err(_) => Err(ClientError::NoAnswer { path: p, after: timeout }),
        Ok(Err(e)) => Err(io(e)),
        Ok(Ok(0)) => Err(ClientError::Io { path: p, detail: "closed without an answer".into() }),
        Ok(Ok(_)) => serde_json::from_str(&buf)
            .map_err(|e| ClientError::Io { path: p, detail: format!("answer is not a control/v1 reply: {e}") }),
    }
}

/// True when something accepts connections at `path`.
pub fn is_live(path: &Path) -> bool {
    std::os::unix::net::UnixStream::connect(path).is_ok()
}
