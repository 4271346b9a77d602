//! A fleet API (`harness api --fleet URL`, `spec/FLEET.md`): the routes, guard, views and OpenAPI
//! of a home's own API, answered for every host that runs a relay — the views and events from NATS
//! JetStream (what each relay published), and what only the host can answer (diffs, gate, review,
//! every verb) by request-reply to that host's relay, whose answer is passed on unchanged.
//!
//! `/runs/:runId/…` addresses a run when its id is unique across hosts (else a 409 naming the
//! hosts); `/hosts/:host/runs/:runId/…` always addresses one host's. A host whose relay has not
//! spoken for `fleet::OFFLINE_AFTER` is offline: its verbs are refused (409) without being sent;
//! one that does not answer in time is a 504 ("delivered, no answer"). Holds no state of its own:
//! everything it knows it rebuilt from the streams when it started.

mod index;
mod pages;
mod sse;

use super::guard::Conn;
use super::routes::Route;
use super::{Api, Body, ReqBody, error_response, full, json_response};
use crate::fleet::{self, View, header};
use crate::ids::{HostName, RunId, TaskId};
use async_nats::jetstream::stream::Stream;
use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Request, Response, StatusCode};
use index::Shared;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// A fleet API's connection to the fleet, and what it has read of it.
pub struct Fleet {
    client: async_nats::Client,
    /// The fleet's streams (`spec/FLEET.md`).
    journal: Stream,
    events: Stream,
    views: Stream,
    shared: Arc<Shared>,
    /// How long a relayed request may take (`None`: the host's own budget plus a margin).
    answer_within: Option<Duration>,
}

impl Fleet {
    /// Connects to NATS, makes sure the fleet's streams are there, and starts following them.
    pub async fn start(nats: &fleet::Nats, answer_within: Option<Duration>) -> Result<Arc<Fleet>, String> {
        let client = nats.connect().await?;
        let js = async_nats::jetstream::new(client.clone());
        fleet::streams_ready(&js, nats.replicas).await?;
        let get = |name: &'static str| {
            let js = js.clone();
            async move { js.get_stream(name).await.map_err(|e| format!("cannot open stream {name}: {e}")) }
        };
        let (journal, events, views) =
            (get(fleet::JOURNAL_STREAM).await?, get(fleet::EVENTS_STREAM).await?, get(fleet::VIEWS_STREAM).await?);
        let shared = index::follow(js);
        Ok(Arc::new(Fleet { client, journal, events, views, shared, answer_within }))
    }

    /// Waits (bounded) for what the streams held at start: a request in the first moments of a
    /// fleet API is answered from everything, not from what was read so far.
    async fn loaded(&self) -> Result<(), Response<Body>> {
        let mut rx = self.shared.loaded.clone();
        match tokio::time::timeout(Duration::from_secs(30), rx.wait_for(|l| *l)).await {
            Ok(Ok(_)) => Ok(()),
            _ => Err(error_response(
                StatusCode::SERVICE_UNAVAILABLE,
                "the fleet API is still reading the fleet's streams (is NATS up?): try again",
            )),
        }
    }

    /// When `host` last spoke and whether that makes it online.
    fn seen(&self, host: &HostName) -> (Option<SystemTime>, bool) {
        let at = self.shared.hosts.read().unwrap_or_else(|p| p.into_inner()).get(host).map(|s| s.at);
        let online = at.and_then(|t| t.elapsed().ok()).is_some_and(|age| age < fleet::OFFLINE_AFTER)
            || at.is_some_and(|t| t.elapsed().is_err());
        (at, online)
    }

    /// The view's JSON as the host last published it (`None`: there is none).
    async fn view(&self, host: &HostName, run: &RunId, view: &View) -> Result<Option<Bytes>, Response<Body>> {
        Ok(last_of(&self.views, &fleet::view_subject(host, run, view)).await?.map(|m| m.payload))
    }

    /// The host of `run`: the one named, else the only one that holds it.
    fn host_of(&self, host: Option<HostName>, run: &RunId) -> Result<HostName, Response<Body>> {
        let index = self.shared.index.read().unwrap_or_else(|p| p.into_inner());
        if let Some(h) = host {
            return match index.rows.contains_key(&(h.clone(), run.clone())) {
                true => Ok(h),
                false => Err(error_response(StatusCode::NOT_FOUND, format!("host {h} has no run {run}"))),
            };
        }
        match index.hosts_of.get(run).map(Vec::as_slice).unwrap_or_default() {
            [] => Err(error_response(StatusCode::NOT_FOUND, format!("no host of the fleet has run {run}"))),
            [one] => Ok(one.clone()),
            many => {
                let mut names: Vec<&str> = many.iter().map(|h| h.as_str()).collect();
                names.sort_unstable();
                Err(error_response(
                    StatusCode::CONFLICT,
                    format!(
                        "run {run} is on hosts {}: ask /hosts/<host>/runs/{run}/… for one of them",
                        names.join(", ")
                    ),
                ))
            }
        }
    }
}

/// How long a request keeps asking JetStream while it fails for a moment (a node lost, a stream
/// leader being elected, the connection moving to another server) before it answers 503: for the
/// whole request (its NATS calls together), not for each call.
const PATIENCE: Duration = Duration::from_secs(15);

tokio::task_local! {
    /// When the request being answered gives up on NATS (`PATIENCE` after it began). Outside a
    /// request (an SSE stream's producer, which outlives it) each call has `PATIENCE` of its own.
    static DEADLINE: tokio::time::Instant;
}

/// `fut` answered within one `PATIENCE` of NATS calls.
async fn within_patience<T>(fut: impl std::future::Future<Output = T>) -> T {
    DEADLINE.scope(tokio::time::Instant::now() + PATIENCE, fut).await
}

/// When the NATS calls of what runs now give up.
fn deadline() -> tokio::time::Instant {
    DEADLINE.try_with(|d| *d).unwrap_or_else(|_| tokio::time::Instant::now() + PATIENCE)
}

/// `call`, asked again every quarter second while it fails, until the deadline (`deadline`); an
/// attempt still unanswered then is given up too.
async fn patiently<T, E: std::fmt::Display, F, Fut>(what: &str, mut call: F) -> Result<T, Response<Body>>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, E>>,
{
    let deadline = deadline();
    loop {
        let e = match tokio::time::timeout_at(deadline, call()).await {
            Ok(Ok(v)) => return Ok(v),
            Ok(Err(e)) => e.to_string(),
            Err(_) => "no answer in time".to_string(),
        };
        if tokio::time::Instant::now() >= deadline {
            return Err(nats_error(format!("{what}: {e}")));
        }
        tracing::debug!(error = %e, "{what}: asking again");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

type Found = Option<async_nats::jetstream::message::StreamMessage>;

/// The last message of `subject` (`None`: it has none).
async fn last_of(stream: &Stream, subject: &str) -> Result<Found, Response<Body>> {
    use async_nats::jetstream::stream::DirectGetErrorKind;
    patiently("reading a stream", || async {
        match stream.direct_get_last_for_subject(subject).await {
            Ok(m) => Ok(Some(m)),
            Err(e) if matches!(e.kind(), DirectGetErrorKind::NotFound) => Ok(None),
            Err(e) => Err(e),
        }
    })
    .await
}

/// The first message of `subject` at or after stream sequence `from` (`None`: none).
async fn next_of(stream: &Stream, subject: &str, from: Option<u64>) -> Result<Found, Response<Body>> {
    use async_nats::jetstream::stream::DirectGetErrorKind;
    patiently("reading a stream", || async {
        match stream.direct_get_next_for_subject(subject, from).await {
            Ok(m) => Ok(Some(m)),
            Err(e) if matches!(e.kind(), DirectGetErrorKind::NotFound) => Ok(None),
            Err(e) => Err(e),
        }
    })
    .await
}

/// An ordered consumer of `cfg` on `stream`, with its messages.
async fn consume(
    stream: &Stream,
    cfg: async_nats::jetstream::consumer::pull::OrderedConfig,
) -> Result<async_nats::jetstream::consumer::pull::Ordered, Response<Body>> {
    patiently("following a stream", || async {
        let c = stream.create_consumer(cfg.clone()).await.map_err(|e| e.to_string())?;
        c.messages().await.map_err(|e| e.to_string())
    })
    .await
}

/// The stream's last sequence now.
async fn last_sequence(stream: &Stream) -> Result<u64, Response<Body>> {
    patiently("reading a stream's state", || async { stream.get_info().await.map(|i| i.state.last_sequence) }).await
}

fn nats_error(e: impl std::fmt::Display) -> Response<Body> {
    error_response(StatusCode::SERVICE_UNAVAILABLE, format!("the fleet's NATS did not answer: {e}"))
}

/// RFC 3339 of a time.
fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

/// A published view's JSON with what the fleet knows of its host now (`host_seen`, `host_online`).
///
/// A run of a host that is offline is not said `live`, nor its supervisor `live` (`unknown`: its
/// relay's last word may be from before its supervisor ended, and nothing on that host can be
/// reached meanwhile): `host_online: false` says why.
fn with_seen(fleet: &Fleet, host: &HostName, json: &[u8]) -> Vec<u8> {
    let (at, online) = fleet.seen(host);
    let mut out = json.to_vec();
    if !online {
        for (key, from, to) in OFFLINE {
            if let Some(o) = top_level_value(&out, key, from, to) {
                out = o;
            }
        }
    }
    while out.last().is_some_and(|b| b.is_ascii_whitespace()) {
        out.pop();
    }
    if out.last() != Some(&b'}') {
        return out;
    }
    out.pop();
    if let Some(at) = at {
        out.extend_from_slice(format!(",\"host_seen\":\"{}\"", rfc3339(at)).as_bytes());
    }
    out.extend_from_slice(if online { b",\"host_online\":true}" } else { b",\"host_online\":false}" });
    out
}

/// What an offline host's views say otherwise: each top-level key, the value it had, the value it
/// gets.
const OFFLINE: [(&[u8], &[u8], &[u8]); 2] =
    [(b"live", b"true", b"false"), (b"supervisor", b"\"live\"", b"\"unknown\"")];

/// The view's JSON with its own `key` (the object's top-level key, not a task's or a nested
/// view's) `to` where it was `from`; the rest byte for byte (`None`: no such key and value).
fn top_level_value(json: &[u8], key: &[u8], from: &[u8], to: &[u8]) -> Option<Vec<u8>> {
    let (mut depth, mut in_str, mut esc, mut key_start) = (0usize, false, false, None);
    for (i, &b) in json.iter().enumerate() {
        if in_str {
            match (esc, b) {
                (true, _) => esc = false,
                (false, b'\\') => esc = true,
                (false, b'"') => {
                    in_str = false;
                    let rest = &json[i + 1..];
                    if depth == 1 && key_start.is_some_and(|k| &json[k..i] == key) {
                        let colon = rest.iter().position(|c| !c.is_ascii_whitespace())?;
                        let after = &rest[colon + 1..];
                        let v = after.iter().position(|c| !c.is_ascii_whitespace())?;
                        if rest[colon] == b':' && after[v..].starts_with(from) {
                            let at = i + 1 + colon + 1 + v;
                            return Some([&json[..at], to, &json[at + from.len()..]].concat());
                        }
                    }
                }
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => {
                in_str = true;
                key_start = Some(i + 1);
            }
            b'{' | b'[' => depth += 1,
            b'}' | b']' => depth = depth.checked_sub(1)?,
            _ => {}
        }
    }
    None
}

fn json_bytes(status: StatusCode, body: Vec<u8>, host: &HostName) -> Response<Body> {
    let mut body = body;
    body.push(b'\n');
    let mut r = Response::new(full(body));
    *r.status_mut() = status;
    r.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if let Ok(v) = HeaderValue::from_str(host.as_str()) {
        r.headers_mut().insert("harness-host", v);
    }
    r
}

/// Answers one request of a fleet API (after the guard).
pub async fn dispatch(
    api: Arc<Api>,
    fleet: Arc<Fleet>,
    host: Option<HostName>,
    route: Route,
    req: Request<ReqBody>,
    _conn: Conn,
) -> Result<Response<Body>, Response<Body>> {
    fleet.loaded().await?;
    let run = route.run().cloned();
    let host = match &run {
        Some(r) => Some(fleet.host_of(host, r)?),
        None => host,
    };
    within_patience(answer(api, fleet, route, host, req)).await
}

/// `dispatch`'s answer, once the run's host is known.
async fn answer(
    api: Arc<Api>,
    fleet: Arc<Fleet>,
    route: Route,
    host: Option<HostName>,
    req: Request<ReqBody>,
) -> Result<Response<Body>, Response<Body>> {
    match (route, host) {
        // `/hosts/<host>/runs` and `/hosts/<host>/watch`: that host's only.
        (Route::Runs, host) => pages::runs(&fleet, req.uri().query(), host),
        (Route::Hosts, _) => Ok(hosts(&fleet)),
        (Route::Watch, host) => sse::watch(api, fleet, req, host).await,
        (Route::Run(run), Some(h)) => one_view(&fleet, &h, &run, View::Detail, true).await,
        (Route::Task(run, task), Some(h)) => task_view(&fleet, &h, &run, task).await,
        (Route::Approvals(run), Some(h)) => pages::approvals(&fleet, &h, &run, req.uri().query()).await,
        (Route::Events(run, task), Some(h)) => {
            exists(&fleet, &h, &run, &task).await?;
            pages::events(&fleet, &h, &run, &task, req.uri().query()).await
        }
        (Route::Journal(run), Some(h)) => pages::journal(&fleet, &h, &run, req.uri().query()).await,
        (Route::Stream(run, task), Some(h)) => {
            exists(&fleet, &h, &run, &task).await?;
            sse::stream(api, fleet, h, run, task, req, true).await
        }
        (Route::Feed(run, task), Some(h)) => {
            exists(&fleet, &h, &run, &task).await?;
            sse::stream(api, fleet, h, run, task, req, false).await
        }
        (route, Some(h)) => relayed(&fleet, &h, &route, req).await,
        (_, None) => Err(error_response(StatusCode::NOT_FOUND, "no such route")),
    }
}

/// `GET /hosts`: each host, when its relay last spoke, whether it is online, and its runs.
fn hosts(fleet: &Fleet) -> Response<Body> {
    let hosts = fleet.shared.hosts.read().unwrap_or_else(|p| p.into_inner()).clone();
    let index = fleet.shared.index.read().unwrap_or_else(|p| p.into_inner());
    let mut runs: std::collections::HashMap<&HostName, u64> = Default::default();
    for (h, _) in index.rows.keys() {
        *runs.entry(h).or_default() += 1;
    }
    let list: Vec<crate::views::HostView> = hosts
        .iter()
        .map(|(h, s)| crate::views::HostView {
            host: h.clone(),
            seen: rfc3339(s.at),
            online: fleet.seen(h).1,
            runs: runs.get(h).copied().unwrap_or(0),
            home: s.info.get("home").and_then(|v| v.as_str()).map(str::to_string),
            machine: s.info.get("machine").and_then(|v| v.as_str()).map(str::to_string),
            version: s.info.get("version").and_then(|v| v.as_str()).map(str::to_string),
        })
        .collect();
    json_response(StatusCode::OK, &crate::views::Hosts { hosts: list })
}

/// A run's view (`detail`) or approvals, with its host's last word.
async fn one_view(
    fleet: &Fleet,
    host: &HostName,
    run: &RunId,
    view: View,
    seen: bool,
) -> Result<Response<Body>, Response<Body>> {
    match fleet.view(host, run, &view).await? {
        Some(json) if seen => Ok(json_bytes(StatusCode::OK, with_seen(fleet, host, &json), host)),
        Some(json) => Ok(json_bytes(StatusCode::OK, json.to_vec(), host)),
        None => {
            Err(error_response(StatusCode::NOT_FOUND, format!("host {host} has published no view of run {run} yet")))
        }
    }
}

async fn task_view(
    fleet: &Fleet,
    host: &HostName,
    run: &RunId,
    task: TaskId,
) -> Result<Response<Body>, Response<Body>> {
    match fleet.view(host, run, &View::Task(task.clone())).await? {
        Some(json) => Ok(json_bytes(StatusCode::OK, json.to_vec(), host)),
        None => Err(error_response(StatusCode::NOT_FOUND, format!("run {run} has no task {task}"))),
    }
}

/// 404 unless the host published the task.
async fn exists(fleet: &Fleet, host: &HostName, run: &RunId, task: &TaskId) -> Result<(), Response<Body>> {
    match fleet.view(host, run, &View::Task(task.clone())).await? {
        Some(_) => Ok(()),
        None => Err(error_response(StatusCode::NOT_FOUND, format!("run {run} has no task {task}"))),
    }
}

/// What only the host can answer — a diff, the gate's or the review's outcome, every verb —
/// asked of its relay, whose answer (status, headers, body) is passed on as it is. Refused unsent
/// (409) when the host is offline; 504 when it does not answer in time (it may have acted).
async fn relayed(
    fleet: &Fleet,
    host: &HostName,
    route: &Route,
    req: Request<ReqBody>,
) -> Result<Response<Body>, Response<Body>> {
    let (seen, online) = fleet.seen(host);
    if !online {
        let when = seen.map_or("never".to_string(), |t| format!("last at {}", rfc3339(t)));
        return Err(error_response(
            StatusCode::CONFLICT,
            format!("host {host} is offline (its relay spoke {when}): nothing was sent to it"),
        ));
    }
    let within = fleet.answer_within.unwrap_or_else(|| answer_budget(route));
    let (parts, body) = req.into_parts();
    let body = http_body_util::Limited::new(body, super::verbs::MAX_BODY).collect().await.map_err(|_| {
        error_response(StatusCode::PAYLOAD_TOO_LARGE, format!("body is larger than {} bytes", super::verbs::MAX_BODY))
    })?;
    let mut h = async_nats::HeaderMap::new();
    h.insert(header::METHOD, parts.method.as_str());
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    // The host's own path: without the fleet's host prefix.
    let path = super::routes::split_host(path).map(|(_, p)| p).unwrap_or(path);
    h.insert(header::PATH, without_token(path).as_str());
    for name in ["content-type", "idempotency-key"] {
        if let Some(v) = parts.headers.get(name).and_then(|v| v.to_str().ok()) {
            h.insert(name, v);
        }
    }
    let ask = async_nats::client::Request::new().headers(h).payload(body.to_bytes()).timeout(Some(within));
    let answer = match fleet.client.send_request(fleet::rpc_subject(host), ask).await {
        Ok(m) => m,
        Err(e) => return Err(rpc_error(host, route, within, e)),
    };
    Ok(relayed_answer(host, answer))
}

/// `path` without its `token=` parameter: the fleet API's token is the fleet's, not the host's, and
/// never goes into NATS.
fn without_token(path: &str) -> String {
    let Some((p, q)) = path.split_once('?') else { return path.to_string() };
    let kept: Vec<&str> = q.split('&').filter(|kv| !kv.is_empty() && kv.split('=').next() != Some("token")).collect();
    if kept.is_empty() { p.to_string() } else { format!("{p}?{}", kept.join("&")) }
}

/// How long a relayed request may take: the host's own budget for it, plus a margin.
fn answer_budget(route: &Route) -> Duration {
    let own = match route {
        Route::Kill(..) => crate::timeouts::KILL_GRACE + crate::timeouts::KILL_ANSWER_MARGIN,
        _ => crate::timeouts::VERB_ANSWER,
    };
    own + fleet::RELAY_MARGIN
}

fn rpc_error(host: &HostName, route: &Route, within: Duration, e: async_nats::RequestError) -> Response<Body> {
    use async_nats::RequestErrorKind;
    let run = route.run().map(|r| format!("/hosts/{host}/runs/{r}")).unwrap_or_default();
    match e.kind() {
        RequestErrorKind::TimedOut => error_response(
            StatusCode::GATEWAY_TIMEOUT,
            format!(
                "no answer from host {host} within {} s; it may have acted — see GET {run}; a verb sent again with the same Idempotency-Key is not carried out twice",
                within.as_secs()
            ),
        ),
        RequestErrorKind::NoResponders => error_response(
            StatusCode::CONFLICT,
            format!("host {host}'s relay does not answer (it is stopping or gone): nothing was sent to it"),
        ),
        _ => {
            error_response(StatusCode::SERVICE_UNAVAILABLE, format!("the fleet's NATS did not carry the request: {e}"))
        }
    }
}

/// The relay's answer as the HTTP answer.
fn relayed_answer(host: &HostName, m: async_nats::Message) -> Response<Body> {
    let h = m.headers.unwrap_or_default();
    let status = h
        .get(header::STATUS)
        .and_then(|v| v.as_str().parse::<u16>().ok())
        .and_then(|s| StatusCode::from_u16(s).ok())
        .unwrap_or(StatusCode::BAD_GATEWAY);
    let mut r = Response::new(full(m.payload));
    *r.status_mut() = status;
    for (name, values) in h.iter() {
        let name: &str = name.as_ref();
        let lower = name.to_ascii_lowercase();
        if lower == header::STATUS.to_ascii_lowercase() || !(lower.starts_with("harness-") || lower == "content-type") {
            continue;
        }
        if let (Ok(n), Some(v)) = (hyper::header::HeaderName::from_bytes(lower.as_bytes()), values.first())
            && let Ok(v) = HeaderValue::from_str(v.as_str())
        {
            r.headers_mut().insert(n, v);
        }
    }
    if let Ok(v) = HeaderValue::from_str(host.as_str()) {
        r.headers_mut().insert("harness-host", v);
    }
    r
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_fleets_token_is_not_relayed() {
        for (path, want) in [
            ("/runs/r/pause", "/runs/r/pause"),
            ("/runs/r/pause?token=s3cret", "/runs/r/pause"),
            ("/runs/r/diff?a=1&token=s3cret&b=2", "/runs/r/diff?a=1&b=2"),
            ("/runs/r/diff?tokens=1", "/runs/r/diff?tokens=1"),
        ] {
            assert_eq!(super::without_token(path), want);
        }
    }

    /// Only the view's own `live` turns false and its own `supervisor` unknown: not a nested one,
    /// not one inside a string.
    #[test]
    fn an_offline_hosts_view_is_not_live_and_keeps_its_bytes() {
        let not_live = |j: &[u8]| super::top_level_value(j, b"live", b"true", b"false");
        let json = br#"{"note":"\"live\":true","task":{"live":true},"live" : true,"tasks":[{"live":true}]}"#;
        let out = not_live(json).expect("a top-level live");
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"{"note":"\"live\":true","task":{"live":true},"live" : false,"tasks":[{"live":true}]}"#
        );
        assert_eq!(not_live(br#"{"live":false,"x":{"live":true}}"#), None);
        assert_eq!(not_live(br#"{"live":{"pid":1}}"#), None);
        let (key, from, to) = super::OFFLINE[1];
        let json = br#"{"slug":"live","x":{"supervisor":"live"},"supervisor":"live","live":true}"#;
        let out = super::top_level_value(json, key, from, to).expect("a top-level supervisor");
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"{"slug":"live","x":{"supervisor":"live"},"supervisor":"unknown","live":true}"#
        );
    }
}
