//! The CLI's HTTP client for the API: plain requests and an SSE follower that reconnects with
//! `Last-Event-ID` on its own. Talks over the API's Unix socket (`$HARNESS_HOME/sock/api.sock`) when
//! there is one, else TCP (`--api`, `$HARNESS_API_ADDR`, default 127.0.0.1:7878), with the token when
//! one is readable. No business logic: it carries requests and renders nothing.

use crate::ids::{RunId, TaskId};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::rt::TokioIo;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Where the API listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    Tcp(SocketAddr),
    /// The API's Unix socket: the kernel tells the API who connects (no token needed for the owner).
    Unix(PathBuf),
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Endpoint::Tcp(a) => write!(f, "{a}"),
            Endpoint::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

/// Why a request got no HTTP answer.
#[derive(Debug, thiserror::Error)]
#[error("cannot reach the API at {at}: {detail}")]
pub struct Unreachable {
    pub at: String,
    pub detail: String,
    /// What to do about it when the cause has its own remedy (an API serving another home);
    /// `None`: the general one (start an API, or name one), which the CLI says.
    pub remedy: Option<String>,
}

#[derive(Clone)]
pub struct Client {
    pub endpoint: Endpoint,
    pub token: Option<String>,
    /// The id of the home the CLI means (`Home::id`): an API that says it serves another
    /// (`Harness-Home`) is not used. `None` with `--api` (that API, whatever it serves).
    pub home: Option<String>,
}

/// One page of `GET …/events`: events/v1 JSON lines, and where the next page starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventsPage {
    pub lines: Vec<String>,
    /// `Harness-Next-After`: the seq to pass as `after` for the next page.
    pub next_after: Option<String>,
    /// `Harness-More`: the log held more complete lines than this page.
    pub more: bool,
}

/// A page's headers: `Harness-Next-After`, `Harness-More`, `Harness-Total` (`/runs` only).
struct Paging {
    next_after: Option<String>,
    more: bool,
    total: Option<usize>,
}

/// One page of `GET /runs`.
#[derive(Debug, Clone)]
pub struct RunsPage {
    pub rows: Vec<serde_json::Value>,
    /// `Harness-Next-After`: the cursor to pass as `after` for the next page.
    pub next_after: Option<String>,
    /// `Harness-More`: more runs match after this page.
    pub more: bool,
    /// `Harness-Total`: runs matching in all.
    pub total: Option<usize>,
}

/// A query string's value, percent-encoded (everything but RFC 3986's unreserved characters).
pub fn query_value(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for b in v.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// One SSE event as sent by the API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    pub id: Option<String>,
    /// Its `event:` type; `None` is a plain message (an events/v1 event, a `/watch` record).
    pub event: Option<String>,
    pub data: String,
}

impl SseEvent {
    /// A task stream's last event (`event: end`, data `views::StreamEnd`).
    pub fn end(&self) -> Option<crate::views::StreamEnd> {
        (self.event.as_deref() == Some("end")).then(|| serde_json::from_str(&self.data).ok()).flatten()
    }
}

impl Client {
    fn unreachable(&self, e: &dyn std::fmt::Display) -> Unreachable {
        Unreachable { at: self.endpoint.to_string(), detail: e.to_string(), remedy: None }
    }

    async fn send(&self, req: Request<Full<Bytes>>) -> Result<hyper::Response<hyper::body::Incoming>, Unreachable> {
        let timeout = crate::timeouts::CLIENT_CONNECT;
        let mut sender = match &self.endpoint {
            Endpoint::Tcp(addr) => {
                let connected = tokio::time::timeout(timeout, tokio::net::TcpStream::connect(addr)).await;
                if let Ok(Ok(stream)) = &connected {
                    self.listener_is_ours(stream).await?;
                }
                self.handshake(connected).await?
            }
            Endpoint::Unix(path) => {
                let connected = tokio::time::timeout(timeout, tokio::net::UnixStream::connect(path)).await;
                // Whoever answers must be this uid (the path was checked; this is what answered).
                if let Ok(Ok(stream)) = &connected
                    && let Ok(cred) = stream.peer_cred()
                    && cred.uid() != crate::os::peer::own_uid()
                {
                    return Err(Unreachable {
                        remedy: Some("use a HARNESS_HOME of your own".into()),
                        ..self.unreachable(&format!(
                            "it is served by uid {}, not by you: nothing is sent to it",
                            cred.uid()
                        ))
                    });
                }
                self.handshake(connected).await?
            }
        };
        let resp = sender.send_request(req).await.map_err(|e| self.unreachable(&e))?;
        let served = resp.headers().get("harness-home").and_then(|v| v.to_str().ok());
        match (&self.home, served) {
            (Some(want), Some(got)) if want != got => Err(Unreachable {
                remedy: Some(format!(
                    "start `harness api` for this home, or pass --api {} to use that one",
                    self.endpoint
                )),
                ..self.unreachable(&format!(
                    "it serves another harness home (id {got}; this one, $HARNESS_HOME, is {want})"
                ))
            }),
            _ => Ok(resp),
        }
    }

    /// A loopback listener must be this uid's: any user may bind the API's port while no API of
    /// ours holds it, and the request (a steer's words, the token) would be theirs. The kernel's
    /// socket table says who owns the connection's other end (the listener's uid); when it cannot
    /// tell, nothing is sent. A remote API (`--api host:port`) is the user's choice.
    async fn listener_is_ours(&self, stream: &tokio::net::TcpStream) -> Result<(), Unreachable> {
        let (Ok(me), Ok(them)) = (stream.local_addr(), stream.peer_addr()) else {
            return Ok(());
        };
        if !them.ip().to_canonical().is_loopback() || !cfg!(target_os = "linux") {
            return Ok(());
        }
        let mut owner = crate::os::peer::tcp_peer_uid(me, them);
        if owner.is_none() {
            // Its half of the connection may not be in the table yet.
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            owner = crate::os::peer::tcp_peer_uid(me, them);
        }
        let own = crate::os::peer::own_uid();
        let refuse = |why: String| Unreachable {
            remedy: Some("start `harness api` for this home (it serves $HARNESS_HOME/sock/api.sock too)".into()),
            ..self.unreachable(&why)
        };
        match owner {
            Some(uid) if uid == own => Ok(()),
            Some(uid) => Err(refuse(format!(
                "it is served by uid {uid}, not by you (uid {own}): nothing is sent to it, this home's API token least of all"
            ))),
            None => Err(refuse("who serves it cannot be told: nothing is sent to it".into())),
        }
    }

    /// HTTP/1.1 over a connection just made (or the reason it was not).
    async fn handshake<IO>(
        &self,
        connected: Result<std::io::Result<IO>, tokio::time::error::Elapsed>,
    ) -> Result<hyper::client::conn::http1::SendRequest<Full<Bytes>>, Unreachable>
    where
        IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let io = connected.map_err(|_| self.unreachable(&"connect timed out"))?.map_err(|e| self.unreachable(&e))?;
        let (sender, conn) =
            hyper::client::conn::http1::handshake(TokioIo::new(io)).await.map_err(|e| self.unreachable(&e))?;
        tokio::spawn(conn);
        Ok(sender)
    }

    fn builder(&self, method: &str, path: &str) -> hyper::http::request::Builder {
        let host = match &self.endpoint {
            Endpoint::Tcp(a) => a.to_string(),
            Endpoint::Unix(_) => "localhost".to_string(),
        };
        let mut b = Request::builder().method(method).uri(path).header("host", host);
        if let Some(t) = &self.token {
            b = b.header("authorization", format!("Bearer {t}"));
        }
        b
    }

    /// One page of a task's recorded events (`GET …/events`), after `after` (from the beginning when
    /// `None`). The page's own headers say where the next one starts (`Harness-Next-After`) and
    /// whether the log holds more (`Harness-More`). A non-200 answer is `Err((status, body))`.
    pub async fn events(
        &self,
        run: &RunId,
        task: &TaskId,
        after: Option<&str>,
    ) -> Result<Result<EventsPage, (u16, Bytes)>, Unreachable> {
        let path = match after {
            Some(a) => format!("/runs/{run}/tasks/{task}/events?after={a}"),
            None => format!("/runs/{run}/tasks/{task}/events"),
        };
        let (status, Paging { next_after, more, .. }, body) = self.get_page(&path).await?;
        if status != 200 {
            return Ok(Err((status, body)));
        }
        let lines = String::from_utf8_lossy(&body).lines().map(str::to_string).collect();
        Ok(Ok(EventsPage { lines, next_after, more }))
    }

    /// One page of `GET /runs?<query>` (`query` already encoded, without `after`), after the cursor
    /// `after`. A non-200 answer is `Err((status, body))`.
    pub async fn runs_page(
        &self,
        query: &str,
        after: Option<&str>,
    ) -> Result<Result<RunsPage, (u16, Bytes)>, Unreachable> {
        let mut path = format!("/runs?{query}");
        if let Some(a) = after {
            path.push_str(&format!("&after={}", query_value(a)));
        }
        let (status, Paging { next_after, more, total }, body) = self.get_page(&path).await?;
        if status != 200 {
            return Ok(Err((status, body)));
        }
        match serde_json::from_slice(&body) {
            Ok(rows) => Ok(Ok(RunsPage { rows, next_after, more, total })),
            Err(e) => Ok(Err((status, Bytes::from(format!("GET /runs answered with no JSON array: {e}"))))),
        }
    }

    /// A GET of a paged route: status, the paging headers, and the body.
    async fn get_page(&self, path: &str) -> Result<(u16, Paging, Bytes), Unreachable> {
        let req = self.builder("GET", path).body(Full::new(Bytes::new())).map_err(|e| self.unreachable(&e))?;
        let resp = self.send(req).await?;
        let status = resp.status().as_u16();
        let header = |name: &str| resp.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_string);
        let paging = Paging {
            next_after: header("harness-next-after"),
            more: header("harness-more").as_deref() == Some("true"),
            total: header("harness-total").and_then(|t| t.parse().ok()),
        };
        Ok((status, paging, self.body_of(resp).await?))
    }

    /// A whole response body.
    async fn body_of(&self, resp: hyper::Response<hyper::body::Incoming>) -> Result<Bytes, Unreachable> {
        let collected = resp.into_body().collect().await;
        Ok(collected.map_err(|e| self.unreachable(&e))?.to_bytes())
    }

    /// A request with an optional JSON body; returns (status, body).
    pub async fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<&serde_json::Value>,
    ) -> Result<(u16, Bytes), Unreachable> {
        let mut b = self.builder(method, path);
        let bytes = match body {
            Some(v) => {
                b = b.header("content-type", "application/json");
                Bytes::from(serde_json::to_vec(v).expect("a Value serializes"))
            }
            None => Bytes::new(),
        };
        let req = b.body(Full::new(bytes)).map_err(|e| self.unreachable(&e))?;
        let resp = self.send(req).await?;
        let status = resp.status().as_u16();
        Ok((status, self.body_of(resp).await?))
    }

    /// Follows an SSE stream, calling `on_event` for each event; reconnects with the last id after a
    /// dropped connection. Returns when `on_event` returns false, after an `event: end` (which
    /// `on_event` is given too: the stream is over, reconnecting would not continue it), or with
    /// the status of a non-200 answer (e.g. 409 when the run is not live).
    pub async fn follow(
        &self,
        path: &str,
        mut last_id: Option<String>,
        mut on_event: impl FnMut(&SseEvent) -> bool,
    ) -> Result<u16, Unreachable> {
        let mut backoff = Duration::from_millis(200);
        loop {
            let mut b = self.builder("GET", path).header("accept", "text/event-stream");
            if let Some(id) = &last_id {
                b = b.header("last-event-id", id.as_str());
            }
            let req = b.body(Full::new(Bytes::new())).map_err(|e| self.unreachable(&e))?;
            let resp = match self.send(req).await {
                Ok(r) => r,
                Err(e) if last_id.is_some() => {
                    // The API went away mid-stream: try again, resuming where we were.
                    tracing::debug!(error = %e, "reconnecting");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                    continue;
                }
                Err(e) => return Err(e),
            };
            if resp.status() != 200 {
                return Ok(resp.status().as_u16());
            }
            backoff = Duration::from_millis(200);
            let mut body = resp.into_body();
            let mut buf = Vec::new();
            let mut cur = SseEvent { id: None, event: None, data: String::new() };
            while let Some(frame) = body.frame().await {
                let Ok(frame) = frame else { break };
                let Some(chunk) = frame.data_ref() else { continue };
                buf.extend_from_slice(chunk);
                while let Some(nl) = buf.iter().position(|&b| b == b'\n') {
                    let line: Vec<u8> = buf.drain(..=nl).collect();
                    let line = String::from_utf8_lossy(&line[..line.len() - 1]).trim_end_matches('\r').to_string();
                    if line.is_empty() {
                        if !cur.data.is_empty() || cur.id.is_some() {
                            if cur.id.is_some() {
                                last_id = cur.id.clone();
                            }
                            if !on_event(&cur) || cur.event.as_deref() == Some("end") {
                                return Ok(200);
                            }
                        }
                        cur = SseEvent { id: None, event: None, data: String::new() };
                    } else if let Some(v) = line.strip_prefix("id:") {
                        cur.id = Some(v.trim().to_string());
                    } else if let Some(v) = line.strip_prefix("event:") {
                        cur.event = Some(v.trim().to_string());
                    } else if let Some(v) = line.strip_prefix("data:") {
                        if !cur.data.is_empty() {
                            cur.data.push('\n');
                        }
                        cur.data.push_str(v.strip_prefix(' ').unwrap_or(v));
                    }
                }
            }
            tokio::time::sleep(backoff).await;
        }
    }
}
