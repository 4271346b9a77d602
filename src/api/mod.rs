//! The control API over HTTP/1.1 (hyper 1): durable GETs over artifacts; live routes proxy to the
//! run's supervisor. Binds loopback only. Every error is `{ok:false, detail}` with a 4xx for bad input;
//! a 500 means a bug or an unreadable disk, never a malformed request.
//!
//! The API never mutates run state itself: it reads files, and live verbs go to the supervisor.

// Handlers return `Result<_, Response>`: the error is the HTTP answer itself, built where the
// problem is found. Boxing it would only add an allocation to the error path.
#![allow(clippy::result_large_err)]

pub mod change;
pub mod durable;
pub mod feed;
pub mod fleet;
pub mod guard;
pub mod overview;
pub mod routes;
mod server;
pub mod stream;
pub mod verbs;

pub use server::{Listener, ServeError, ServeOptions, serve, serve_on};

use crate::ids::{RunId, TaskId};
use bytes::Bytes;
use durable::{Durable, DurableError};
use guard::Conn;
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::body::Incoming;
use hyper::header::{ALLOW, CONTENT_TYPE, HeaderValue};
use hyper::{Request, Response, StatusCode};
use routes::{Route, RouteError};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

pub type Body = BoxBody<Bytes, Infallible>;
/// A request's body: hyper's from a connection, or the bytes a fleet relay carries (`answer_relayed`).
/// (hyper's error type for both: bytes in hand cannot fail.)
pub type ReqBody = BoxBody<Bytes, hyper::Error>;

/// How the API is configured.
#[derive(Debug, Clone)]
pub struct Config {
    /// Browser origins allowed to call the API (exact, normalized), e.g. the Web UI's dev server.
    pub allow_origins: Vec<String>,
    /// When set, every route needs `Authorization: Bearer <token>` or `?token=<token>`.
    pub token: Option<String>,
    /// SSE heartbeat comment period.
    pub heartbeat: Duration,
    /// Events buffered per SSE client.
    pub stream_buffer: usize,
    /// How long a stream waits for a client that takes nothing before it starts dropping (reported).
    pub slow_client_grace: Duration,
    /// Log polling period when inotify is not available (and as a safety net).
    pub poll: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            allow_origins: Vec::new(),
            token: None,
            heartbeat: stream::HEARTBEAT,
            stream_buffer: 32,
            slow_client_grace: Duration::from_secs(2),
            poll: Duration::from_millis(500),
        }
    }
}

/// Shared state of one API process. Everything here is a cache or configuration: responses are
/// recomputed from files on disk and what a live supervisor answers.
pub struct Api {
    pub durable: Durable,
    pub cfg: Config,
    pub index: crate::os::tail::LineIndex,
    pub hub: crate::os::tail::WatchHub,
    /// `GET /watch`: every run's journal records (its scanner starts with the first watcher).
    pub feed: feed::Watch,
    /// Flips to true on shutdown: SSE streams end themselves so in-flight responses can finish.
    pub shutdown: watch::Receiver<bool>,
    /// Open SSE streams (for status lines).
    pub streams: std::sync::atomic::AtomicUsize,
    /// The token in force: `cfg.token` at start, re-read on SIGHUP (token rotation).
    pub token: std::sync::RwLock<Option<String>>,
    /// This process's uid: a peer of the same uid needs no token.
    pub owner_uid: u32,
    /// `Harness-Home` on every answer: the id of the home this API serves (`Home::id`).
    pub home_id: HeaderValue,
    /// A fleet API (`harness api --fleet`): its views come from NATS JetStream, not from the home.
    pub fleet: Option<Arc<fleet::Fleet>>,
}

impl Api {
    pub fn new(home: crate::os::home::Home, cfg: Config, shutdown: watch::Receiver<bool>) -> Api {
        let cfg_token = cfg.token.clone();
        let home_id = HeaderValue::from_str(&home.id()).unwrap_or(HeaderValue::from_static("unknown"));
        Api {
            durable: Durable::new(home),
            cfg,
            index: Default::default(),
            hub: crate::os::tail::WatchHub::new(),
            feed: Default::default(),
            shutdown,
            streams: Default::default(),
            token: std::sync::RwLock::new(cfg_token),
            owner_uid: crate::os::peer::own_uid(),
            home_id,
            fleet: None,
        }
    }
}

pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).boxed()
}

/// A JSON response.
pub fn json_response(status: StatusCode, v: &impl serde::Serialize) -> Response<Body> {
    let mut body = serde_json::to_vec(v).unwrap_or_else(|_| b"{}".to_vec());
    body.push(b'\n');
    let mut r = Response::new(full(body));
    *r.status_mut() = status;
    r.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

/// `{ok:false, detail}` with `status`.
pub fn error_response(status: StatusCode, detail: impl Into<String>) -> Response<Body> {
    json_response(status, &crate::views::Answer { ok: false, detail: Some(detail.into()) })
}

pub(crate) fn durable_error(e: DurableError) -> Response<Body> {
    match e {
        DurableError::UnknownRun(_) | DurableError::UnknownTask { .. } | DurableError::Pruned(..) => {
            error_response(StatusCode::NOT_FOUND, e.to_string())
        }
        DurableError::Internal(d) => {
            tracing::error!(detail = %d, "durable read failed");
            error_response(StatusCode::INTERNAL_SERVER_ERROR, d)
        }
    }
}

/// `GET /runs`'s query: paging and filters, each bad value a 400 naming its parameter. Also the
/// page size served when the one asked for was above the largest (`Harness-Limit`).
fn overview_query(raw: Option<&str>) -> Result<(overview::Query, Option<usize>), Response<Body>> {
    use crate::state::journal::RunStatus;
    let bad =
        |name: &str, why: String| error_response(StatusCode::BAD_REQUEST, format!("query parameter {name}: {why}"));
    let mut q = overview::Query { limit: overview::PAGE_DEFAULT, ..Default::default() };
    let mut clamped = None;
    let mut seen = std::collections::HashSet::new();
    for kv in raw.unwrap_or("").split('&').filter(|kv| !kv.is_empty()) {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        if k == "token" {
            continue; // the bearer token may ride in the query (`guard` reads it); it is no filter
        }
        let v = routes::percent_decode(v).map_err(|e| bad(k, e))?;
        if k != "status" && !seen.insert(k.to_string()) {
            return Err(bad(k, "given twice".into()));
        }
        let text = |v: &str| -> Result<String, Response<Body>> {
            if v.is_empty() { Err(bad(k, "empty".into())) } else { Ok(v.to_string()) }
        };
        match k {
            "limit" => {
                let (n, over) = page_limit(&v, overview::PAGE_MAX).map_err(|e| bad(k, format!("{e}, got {v:?}")))?;
                q.limit = n;
                clamped = over.then_some(n);
            }
            "after" => q.after = Some(overview::Cursor::parse(&v).map_err(|e| bad(k, e))?),
            "status" => {
                for s in v.split(',') {
                    let Some(st) = crate::wire::from_name::<RunStatus>(s) else {
                        let names: Vec<&str> = RunStatus::ALL.iter().map(|s| s.as_str()).collect();
                        return Err(bad(k, format!("{s:?} is not a run status ({})", names.join(", "))));
                    };
                    q.status.push(st);
                }
            }
            "live" => {
                q.live = Some(match v.as_str() {
                    "true" => true,
                    "false" => false,
                    other => return Err(bad(k, format!("must be true or false, got {other:?}"))),
                })
            }
            "project" => q.project = Some(text(&v)?),
            "repo" => q.repo = Some(text(&v)?),
            "branch" => q.branch = Some(text(&v)?),
            "plane" => {
                q.plane = Some(
                    serde_json::from_value::<crate::state::registry::Plane>(serde_json::Value::String(v.clone()))
                        .map_err(|_| bad(k, format!("must be standalone or dynwf, got {v:?}")))?,
                )
            }
            "q" => q.q = Some(text(&v)?.to_lowercase()),
            "since" => q.since = Some(since(&v).map_err(|e| bad(k, e))?),
            "host" => q.host = Some(crate::ids::HostName::parse(&v).map_err(|e| bad(k, e.to_string()))?),
            other => {
                return Err(bad(
                    other,
                    "unknown (known: limit, after, status, live, project, repo, branch, plane, q, since, host)".into(),
                ));
            }
        }
    }
    Ok((q, clamped))
}

/// A page size (`/events`, `/runs`): a positive integer; above `max` (digits too many for a u64
/// included) it is `max`, and the answer says so (`true`).
fn page_limit(v: &str, max: usize) -> Result<(usize, bool), String> {
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) || v.bytes().all(|b| b == b'0') {
        return Err(format!("must be a positive integer (pages hold at most {max})"));
    }
    let n = v.parse::<u64>().unwrap_or(u64::MAX);
    Ok(((n.min(max as u64)) as usize, n > max as u64))
}

/// A `since` value: an RFC 3339 time, or an age (`90s`, `15m`, `2h`, `7d`) meaning that long ago.
fn since(v: &str) -> Result<i128, String> {
    if let Some(t) = crate::state::summary::parse_time(v) {
        return Ok(t);
    }
    match crate::state::summary::parse_age(v) {
        Some(age) => {
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
            Ok(now.as_nanos() as i128 - age.as_nanos() as i128)
        }
        None => {
            Err(format!("must be an RFC 3339 time (2026-12-01T10:00:00Z) or an age such as 15m, 2h, 7d; got {v:?}"))
        }
    }
}

/// Runs blocking filesystem work off the async threads.
pub(super) async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T, Response<Body>> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| error_response(StatusCode::INTERNAL_SERVER_ERROR, format!("worker failed: {e}")))
}

/// A connection's request body as `ReqBody`.
fn req_body(b: Incoming) -> ReqBody {
    b.boxed()
}

/// Bytes in hand as a request body (what a fleet relay carries).
pub fn req_bytes(b: Bytes) -> ReqBody {
    Full::new(b).map_err(|never| match never {}).boxed()
}

/// Handles one request: Host, then Origin, then who the peer is (uid or token), then route and
/// method.
pub async fn handle(api: Arc<Api>, conn: Conn, req: Request<Incoming>) -> Result<Response<Body>, Infallible> {
    let via = conn.via;
    let req = req.map(req_body);
    if let Err(detail) = guard::check_host(req.headers(), via) {
        return Ok(edge_refusal(&conn, &req, StatusCode::FORBIDDEN, detail));
    }
    let origin = match guard::check_origin(req.headers(), via, &api.cfg.allow_origins) {
        Ok(o) => o,
        Err(detail) => return Ok(edge_refusal(&conn, &req, StatusCode::FORBIDDEN, detail)),
    };
    let home_id = api.home_id.clone();
    let mut resp = respond(api, conn, req, &origin).await;
    // A relayed answer keeps the home that gave it.
    resp.headers_mut().entry("harness-home").or_insert(home_id);
    if let guard::OriginOk::Cors(o) = &origin
        && let Ok(v) = HeaderValue::from_str(o)
    {
        let h = resp.headers_mut();
        h.insert(hyper::header::ACCESS_CONTROL_ALLOW_ORIGIN, v);
        h.insert(hyper::header::VARY, HeaderValue::from_static("Origin"));
        h.insert(hyper::header::ACCESS_CONTROL_EXPOSE_HEADERS, HeaderValue::from_static(EXPOSED));
    }
    Ok(resp)
}

/// Every `Harness-*` response header, exposed to a page of an allowed origin (a browser hides the
/// rest from its script): the paging headers of `GET /runs` and the clamp of `/events`, and what a
/// diff is of and whether it was cut.
pub const EXPOSED: &str = "Harness-Next-After, Harness-More, Harness-Total, Harness-Limit, Harness-Diff-Of, Harness-Commits, Harness-Truncated, Harness-Watch-Cursor, Harness-Home";

/// A refusal before any run is looked at. Those of a verb (any method but GET) are logged with the
/// peer's uid: they cannot be tied to a run's journal (`audit::edge`).
fn edge_refusal(conn: &Conn, req: &Request<ReqBody>, status: StatusCode, detail: String) -> Response<Body> {
    if req.method() != hyper::Method::GET {
        crate::state::audit::edge(conn.uid, req.method().as_str(), req.uri().path(), status.as_u16(), &detail);
    }
    error_response(status, detail)
}

/// The request's route, and the host a fleet's `/hosts/<host>/…` prefix names; the refusal when
/// the path is no route.
fn routed(conn: &Conn, req: &Request<ReqBody>) -> Result<(Option<crate::ids::HostName>, Route), Response<Body>> {
    let refuse = |e: RouteError| {
        let status = if matches!(e, RouteError::NotFound(_)) { StatusCode::NOT_FOUND } else { StatusCode::BAD_REQUEST };
        edge_refusal(conn, req, status, e.to_string())
    };
    let (host, path) = routes::split_host(req.uri().path()).map_err(refuse)?;
    let route = routes::route(path).map_err(refuse)?;
    Ok((host, route))
}

/// The 405 of a method the route does not answer.
fn method_refusal(conn: &Conn, req: &Request<ReqBody>, route: &Route) -> Option<Response<Body>> {
    if route.methods().contains(&req.method().as_str()) {
        return None;
    }
    let detail = format!("{} not allowed here; allowed: {}", req.method(), route.methods().join(", "));
    let mut r = edge_refusal(conn, req, StatusCode::METHOD_NOT_ALLOWED, detail);
    r.headers_mut().insert(ALLOW, HeaderValue::from_static(route.methods()[0]));
    Some(r)
}

/// A request a fleet relay carries for a client of a fleet API (`spec/FLEET.md`): routed and
/// answered as one of this home's own. The fleet API checked Host, Origin and its client's token;
/// no local process sent it, so the operator-only verbs have no local sender to judge (the NATS
/// credentials stand for it: SECURITY.md). Streams are not carried this way (a 400).
pub async fn answer_relayed(api: Arc<Api>, req: Request<ReqBody>) -> Response<Body> {
    let conn = Conn { via: guard::Via::Unix, uid: Some(api.owner_uid), origin: guard::Origin::Relayed, tokened: true };
    let (host, route) = match routed(&conn, &req) {
        Ok(r) => r,
        Err(r) => return r,
    };
    if host.is_some() || matches!(route, Route::Watch | Route::Stream(..) | Route::Feed(..) | Route::Hosts) {
        return error_response(StatusCode::BAD_REQUEST, "a relay answers one request at a time: no stream, no /hosts");
    }
    if let Some(r) = method_refusal(&conn, &req, &route) {
        return r;
    }
    let home_id = api.home_id.clone();
    let mut resp = dispatch(api, route, req, conn).await.unwrap_or_else(|r| r);
    resp.headers_mut().insert("harness-home", home_id);
    resp
}

async fn respond(api: Arc<Api>, conn: Conn, req: Request<ReqBody>, origin: &guard::OriginOk) -> Response<Body> {
    let (host, route) = match routed(&conn, &req) {
        Ok(r) => r,
        Err(r) => return r,
    };
    let get = route.methods()[0] == "GET";
    // CORS preflight: answered before the token check (browsers send no credentials on it).
    if req.method() == hyper::Method::OPTIONS {
        let mut r = Response::new(full(Bytes::new()));
        *r.status_mut() = StatusCode::NO_CONTENT;
        let h = r.headers_mut();
        h.insert(ALLOW, HeaderValue::from_static(if get { "GET, OPTIONS" } else { "POST, OPTIONS" }));
        if matches!(origin, guard::OriginOk::Cors(_)) {
            h.insert(
                hyper::header::ACCESS_CONTROL_ALLOW_METHODS,
                HeaderValue::from_static(if get { "GET" } else { "POST" }),
            );
            h.insert(
                hyper::header::ACCESS_CONTROL_ALLOW_HEADERS,
                HeaderValue::from_static("Content-Type, Authorization, Last-Event-ID"),
            );
            h.insert(hyper::header::ACCESS_CONTROL_MAX_AGE, HeaderValue::from_static("600"));
        }
        return r;
    }
    if let Some(r) = method_refusal(&conn, &req, &route) {
        return r;
    }
    let token = api.token.read().unwrap_or_else(|p| p.into_inner()).clone();
    let conn = match guard::check_access(req.headers(), req.uri().query(), token.as_deref(), conn.uid, api.owner_uid) {
        Ok(()) => Conn { tokened: guard::token_presented(req.headers(), req.uri().query()), ..conn },
        Err(guard::Denied::BadToken(detail)) => {
            crate::state::audit::edge(conn.uid, req.method().as_str(), req.uri().path(), 401, &detail);
            let mut r = error_response(StatusCode::UNAUTHORIZED, detail);
            r.headers_mut().insert(hyper::header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            return r;
        }
        Err(guard::Denied::Foreign(detail)) => {
            crate::state::audit::edge(conn.uid, req.method().as_str(), req.uri().path(), 403, &detail);
            return error_response(StatusCode::FORBIDDEN, detail);
        }
    };
    match (api.fleet.clone(), host) {
        (Some(fleet), host) => fleet::dispatch(api, fleet, host, route, req, conn).await.unwrap_or_else(|r| r),
        (None, Some(h)) => error_response(
            StatusCode::NOT_FOUND,
            format!("no host {h} here: this API serves one home; /hosts/… is a fleet API's (harness api --fleet)"),
        ),
        (None, None) => dispatch(api, route, req, conn).await.unwrap_or_else(|r| r),
    }
}

async fn dispatch(
    api: Arc<Api>,
    route: Route,
    req: Request<ReqBody>,
    peer: Conn,
) -> Result<Response<Body>, Response<Body>> {
    use crate::control::Name;
    match route {
        Route::Watch => watch(api, req).await,
        Route::Runs => runs(api, req).await,
        Route::Run(run) => {
            let a = api.clone();
            let v = blocking(move || a.durable.run_detail(&run)).await?.map_err(durable_error)?;
            Ok(json_response(StatusCode::OK, &v))
        }
        Route::Task(run, task) => {
            let a = api.clone();
            let v = blocking(move || a.durable.task_detail(&run, &task)).await?.map_err(durable_error)?;
            Ok(json_response(StatusCode::OK, &v))
        }
        Route::Stream(run, task) => live_stream(api, run, task, req).await,
        Route::Feed(run, task) => {
            let after = stream::last_event_id(req.headers(), req.uri().query())?;
            let a = api.clone();
            let src = blocking(move || stream::source(&a, &run, &task)).await??;
            Ok(stream::sse(api, src, after))
        }
        Route::Events(run, task) => events(api, run, task, req).await,
        Route::TaskDiff(run, task) => {
            let stat = diff_stat(req.uri().query())?;
            let a = api.clone();
            blocking(move || change::task_diff(&a.durable, &run, &task, stat)).await?
        }
        Route::RunDiff(run) => {
            let stat = diff_stat(req.uri().query())?;
            let a = api.clone();
            blocking(move || change::run_diff(&a.durable, &run, stat)).await?
        }
        Route::Journal(run) => journal(api, run, req).await,
        Route::Gate(run, task) => {
            let a = api.clone();
            blocking(move || change::gate(&a.durable, &run, &task)).await?
        }
        Route::Review(run, task) => {
            let a = api.clone();
            blocking(move || change::review(&a.durable, &run, &task)).await?
        }
        Route::Steer(run, task) => verbs::verb(api, run, Some(task), Name::Steer, req, peer).await,
        Route::Kill(run, task) => verbs::verb(api, run, Some(task), Name::Kill, req, peer).await,
        Route::Interrupt(run, task) => verbs::verb(api, run, Some(task), Name::Interrupt, req, peer).await,
        Route::Retry(run, task) => verbs::verb(api, run, Some(task), Name::Retry, req, peer).await,
        Route::Skip(run, task) => verbs::verb(api, run, Some(task), Name::Skip, req, peer).await,
        Route::Approvals(run) => approvals(api, run, req).await,
        Route::Decide(run, task, id) => verbs::decide(api, run, task, id, req, peer).await,
        Route::Pause(run) => verbs::verb(api, run, None, Name::Pause, req, peer).await,
        Route::Resume(run) => verbs::verb(api, run, None, Name::Resume, req, peer).await,
        Route::Budget(run) => verbs::verb(api, run, None, Name::Budget, req, peer).await,
        Route::Hosts => Err(error_response(
            StatusCode::NOT_FOUND,
            "no hosts here: this API serves one home; /hosts is a fleet API's (harness api --fleet)",
        )),
    }
}

/// A diff route's query: `stat=1` (or `true`) for the paths instead of the patch; `token` is the
/// guard's; anything else is a 400 naming it.
fn diff_stat(q: Option<&str>) -> Result<bool, Response<Body>> {
    let mut stat = false;
    for kv in q.unwrap_or("").split('&').filter(|kv| !kv.is_empty()) {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        match (k, v) {
            ("token", _) => {}
            ("stat", "1" | "true") => stat = true,
            ("stat", "0" | "false") => stat = false,
            ("stat", other) => {
                return Err(error_response(StatusCode::BAD_REQUEST, format!("stat must be 1 or 0, got {other:?}")));
            }
            (other, _) => {
                return Err(error_response(
                    StatusCode::BAD_REQUEST,
                    format!("unknown query parameter {other:?}: a diff takes stat, token"),
                ));
            }
        }
    }
    Ok(stat)
}

/// `GET /watch`: every run's journal records as SSE, from `Last-Event-ID` or `since=now`.
async fn watch(api: Arc<Api>, req: Request<ReqBody>) -> Result<Response<Body>, Response<Body>> {
    let q = req.uri().query().map(str::to_string);
    // Every parameter is one /watch knows (as GET /runs): a misspelt filter is a 400, not every run.
    let mut runs = Vec::new();
    let mut rows = false;
    for kv in q.as_deref().unwrap_or("").split('&').filter(|kv| !kv.is_empty()) {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        match k {
            "token" | "lastEventId" | "since" => {}
            "rows" if matches!(v, "1" | "true") => rows = true,
            "rows" if matches!(v, "0" | "false") => rows = false,
            "rows" => {
                return Err(error_response(StatusCode::BAD_REQUEST, format!("rows must be 1 or 0, got {v:?}")));
            }
            "run" => {
                let v = routes::percent_decode(v)
                    .map_err(|e| error_response(StatusCode::BAD_REQUEST, format!("query parameter run: {e}")))?;
                let id = crate::ids::RunId::parse(&v)
                    .map_err(|e| error_response(StatusCode::BAD_REQUEST, format!("query parameter run: {e}")))?;
                runs.push(id);
            }
            other => {
                return Err(error_response(
                    StatusCode::BAD_REQUEST,
                    format!(
                        "unknown query parameter {other:?}: /watch takes run (repeatable), rows, since, lastEventId, token"
                    ),
                ));
            }
        }
    }
    let last = match req.headers().get("last-event-id") {
        Some(v) => Some(
            v.to_str().map_err(|_| error_response(StatusCode::BAD_REQUEST, "Last-Event-ID is not ASCII"))?.to_string(),
        ),
        None => stream::query_param(q.as_deref(), "lastEventId")?,
    }
    .filter(|s| !s.trim().is_empty());
    let since_now = match stream::query_param(q.as_deref(), "since")?.as_deref() {
        None => false,
        Some("now") => true,
        Some(other) => {
            return Err(error_response(
                StatusCode::BAD_REQUEST,
                format!("since must be \"now\" (or absent: from the beginning), got {other:?}"),
            ));
        }
    };
    feed::serve(api, last, since_now, runs, rows).await
}

/// `GET /runs`: one page of the overview, its cursor and totals in headers.
async fn runs(api: Arc<Api>, req: Request<ReqBody>) -> Result<Response<Body>, Response<Body>> {
    let (q, clamped) = overview_query(req.uri().query())?;
    // Taken before the page is read: /watch from it repeats at worst a record the page shows, and
    // never misses one.
    let cursor = api.feed.cursor(&api).await.map_err(|e| error_response(StatusCode::INTERNAL_SERVER_ERROR, e))?;
    let a = api.clone();
    let page = blocking(move || a.durable.overview.page(&q)).await?;
    let mut r = Response::new(full(page.body));
    let h = r.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if let Some(c) = page.next_after
        && let Ok(v) = HeaderValue::from_str(&c.to_string())
    {
        h.insert("harness-next-after", v);
    }
    h.insert("harness-more", HeaderValue::from_static(if page.more { "true" } else { "false" }));
    h.insert("harness-total", HeaderValue::from(page.total));
    if let Ok(v) = HeaderValue::from_str(&cursor) {
        h.insert("harness-watch-cursor", v);
    }
    if let Some(limit) = clamped {
        h.insert("harness-limit", HeaderValue::from(limit));
    }
    Ok(r)
}

/// `GET /runs/:id/tasks/:task/stream`: the live SSE stream; 409 when no supervisor answers.
async fn live_stream(
    api: Arc<Api>,
    run: RunId,
    task: TaskId,
    req: Request<ReqBody>,
) -> Result<Response<Body>, Response<Body>> {
    let after = stream::last_event_id(req.headers(), req.uri().query())?;
    let (a, r, t) = (api.clone(), run.clone(), task.clone());
    let src = blocking(move || stream::source(&a, &r, &t)).await??;
    // As the design pins: the live stream needs the run's supervisor.
    let sock = api.durable.home.socket_path(&run);
    // A batch run (`harness run` in the foreground) has no control socket: its supervising process
    // is known by the liveness pid, as the views and the stream's end watch know it.
    // (A run that is over is not live, whatever process is still winding down.)
    let (liveness, journal) = (src.pointer.liveness_path(), src.pointer.journal_path());
    let live = src.pointer.plane == crate::state::registry::Plane::Standalone
        && tokio::task::spawn_blocking(move || {
            crate::control::is_live(&sock)
                || (crate::state::liveness::get(&liveness)
                    .ok()
                    .flatten()
                    .and_then(|l| l.supervisor_pid)
                    .is_some_and(crate::state::liveness::pid_alive)
                    && crate::state::journal::replay(&journal).is_ok_and(|v| !v.status.is_over()))
        })
        .await
        .unwrap_or(false);
    if !live {
        return Err(error_response(
            StatusCode::CONFLICT,
            format!(
                "run not supervised / not live: no supervisor answers for {run}; its events stay readable at /runs/{run}/tasks/{task}/events"
            ),
        ));
    }
    Ok(stream::sse(api, src, after))
}

/// `GET /runs/:id/tasks/:task/events`: one durable page of a task's events.
async fn events(
    api: Arc<Api>,
    run: RunId,
    task: TaskId,
    req: Request<ReqBody>,
) -> Result<Response<Body>, Response<Body>> {
    let q = req.uri().query().map(str::to_string);
    let after = stream::cursor(stream::query_param(q.as_deref(), "after")?.as_deref(), "after")?;
    // Above the largest page is served as the largest page, and the answer says so.
    let (limit, clamped) = match stream::query_param(q.as_deref(), "limit")? {
        None => (stream::PAGE_DEFAULT, false),
        Some(l) => page_limit(&l, stream::PAGE_MAX)
            .map_err(|e| error_response(StatusCode::BAD_REQUEST, format!("limit {e}")))?,
    };
    let a = api.clone();
    blocking(move || match stream::source(&a, &run, &task) {
        Ok(src) => stream::events_page(&a, &src, after, limit, clamped),
        Err(r) => r,
    })
    .await
}

/// `GET /runs/:id/journal?after=&limit=`: one run's records after line `after`, as watch/v1 JSON
/// lines (`record`, or `bad` for a line that is not one), paged like `/events`.
async fn journal(api: Arc<Api>, run: RunId, req: Request<ReqBody>) -> Result<Response<Body>, Response<Body>> {
    let q = req.uri().query().map(str::to_string);
    for kv in q.as_deref().unwrap_or("").split('&').filter(|kv| !kv.is_empty()) {
        let k = kv.split_once('=').map_or(kv, |(k, _)| k);
        if !matches!(k, "after" | "limit" | "token") {
            return Err(error_response(
                StatusCode::BAD_REQUEST,
                format!("unknown query parameter {k:?}: the journal takes after, limit, token"),
            ));
        }
    }
    let after = match stream::query_param(q.as_deref(), "after")? {
        None => 0,
        Some(a) if a.is_empty() => 0,
        // Digits past u64 are past any journal's end: an empty last page.
        Some(a) if !a.is_empty() && a.bytes().all(|b| b.is_ascii_digit()) => a.parse::<u64>().unwrap_or(u64::MAX),
        Some(a) => {
            return Err(error_response(
                StatusCode::BAD_REQUEST,
                format!("after must be a journal line number, got {a:?}"),
            ));
        }
    };
    let (limit, clamped) = match stream::query_param(q.as_deref(), "limit")? {
        None => (stream::PAGE_DEFAULT, false),
        Some(l) => page_limit(&l, stream::PAGE_MAX)
            .map_err(|e| error_response(StatusCode::BAD_REQUEST, format!("limit {e}")))?,
    };
    let a = api.clone();
    let pointer = blocking(move || a.durable.pointer(&run)).await?.map_err(durable_error)?;
    let (body, next, more) = blocking(move || journal_page(&pointer, after, limit)).await?;
    let mut r = Response::new(full(body));
    r.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/x-ndjson"));
    r.headers_mut().insert("harness-next-after", HeaderValue::from(next));
    r.headers_mut().insert("harness-more", HeaderValue::from_static(if more { "true" } else { "false" }));
    if clamped {
        r.headers_mut().insert("harness-limit", HeaderValue::from(limit));
    }
    Ok(r)
}

/// Up to `limit` complete lines of the run's journal after line `after`: the body, the last line
/// served (or `after`), and whether more complete lines follow.
fn journal_page(pointer: &crate::state::registry::Pointer, after: u64, limit: usize) -> (Vec<u8>, u64, bool) {
    let path = pointer.journal_path();
    let len = std::fs::metadata(&path).map_or(0, |m| m.len());
    let (mut out, mut line, mut n, mut more) = (Vec::new(), 0u64, 0usize, false);
    crate::os::tail::each_line(&path, 0, len, |raw| {
        line += 1;
        if line <= after || more {
            return;
        }
        if n == limit {
            more = true;
            return;
        }
        let record = serde_json::from_slice::<serde_json::Value>(raw).ok().filter(|r| !r.is_null());
        let bad = record.is_none().then(|| String::from_utf8_lossy(&raw[..raw.len().min(4096)]).into_owned());
        let e = crate::views::WatchEvent {
            v: "watch/v1".into(),
            run: pointer.run_id.clone(),
            line,
            record,
            bad,
            host: None,
        };
        if serde_json::to_writer(&mut out, &e).is_ok() {
            out.push(b'\n');
        }
        n += 1;
    });
    let last = if n == 0 { after } else { after + n as u64 };
    (out, last, more)
}

/// `GET /runs/:id/approvals`: the run's approvals, optionally of one state.
async fn approvals(api: Arc<Api>, run: RunId, req: Request<ReqBody>) -> Result<Response<Body>, Response<Body>> {
    let q = req.uri().query().map(str::to_string);
    let state = stream::query_param(q.as_deref(), "state")?;
    if let Some(s) = state.as_deref()
        && !["pending", "allowed", "denied", "expired"].contains(&s)
    {
        return Err(error_response(
            StatusCode::BAD_REQUEST,
            format!("state must be pending, allowed, denied or expired, got {s:?}"),
        ));
    }
    let a = api.clone();
    let v = blocking(move || a.durable.approvals(&run, state.as_deref())).await?.map_err(durable_error)?;
    Ok(json_response(StatusCode::OK, &v))
}

#[cfg(test)]
mod tests {
    /// Each `harness-…` header the API sets is in `EXPOSED` (a new one not listed would be null
    /// to a Web UI's script).
    #[test]
    fn every_harness_header_is_exposed() {
        let exposed = super::EXPOSED.to_ascii_lowercase();
        for src in [
            include_str!("mod.rs"),
            include_str!("stream.rs"),
            include_str!("feed.rs"),
            include_str!("verbs.rs"),
            include_str!("change.rs"),
        ] {
            for (i, _) in src.match_indices("\"harness-") {
                let name: String = src[i + 1..].chars().take_while(|c| *c != '"').collect();
                assert!(exposed.contains(&name), "{name} is set but not in EXPOSED");
            }
        }
    }
}
