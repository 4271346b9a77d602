//! A fleet API's streams: a task's `/stream` and `/feed` (the events its host's relay published,
//! from the first after `Last-Event-ID`, then live, ending with `event: end` as a home's own do),
//! and `/watch` (every host's journal records in the journal stream's one order; its cursor is that
//! order's position, `f1.<n>`, so a client resumes exactly on any fleet API, restarted or not).

use super::index::Key;
use super::pages::{first_after, watch_event};
use super::{Fleet, consume, last_of, last_sequence};
use crate::api::{Api, Body, ReqBody, error_response};
use crate::events::Seq;
use crate::fleet::{self, View, header};
use crate::ids::{HostName, RunId, TaskId};
use async_nats::jetstream::consumer;
use bytes::Bytes;
use futures_util::StreamExt;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use hyper::header::{CACHE_CONTROL, CONTENT_TYPE, HeaderValue};
use hyper::{Request, Response, StatusCode};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// A fleet `/watch` cursor: the journal stream's position.
pub fn cursor_id(seq: u64) -> String {
    format!("f1.{seq}")
}

fn parse_cursor(id: &str) -> Result<u64, String> {
    id.strip_prefix("f1.").and_then(|n| n.parse::<u64>().ok()).ok_or_else(|| {
        format!("Last-Event-ID {id:?} is not a fleet /watch cursor (f1.<n>): a home's own cursor does not resume here")
    })
}

/// An SSE response fed by `tx`, and the sender.
fn sse_response(buffer: usize) -> (Response<Body>, mpsc::Sender<Bytes>) {
    let (tx, rx) = mpsc::channel::<Bytes>(buffer.max(2));
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|b| (Ok::<_, std::convert::Infallible>(Frame::data(b)), rx))
    });
    let mut r = Response::new(BodyExt::boxed(StreamBody::new(stream)));
    r.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    r.headers_mut().insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r.headers_mut().insert("x-accel-buffering", HeaderValue::from_static("no"));
    (r, tx)
}

/// A task's state and commit, its run's status, and whether anything still runs it.
type TaskNow = ((crate::views::TaskState, Option<String>), crate::views::RunStatus, bool);

/// What the fleet says now of a task and its run: the task's state and commit, the run's status,
/// and whether anything still runs it (its supervisor live, its host online). `Ok(None)`: the
/// fleet has no view of it; an error: NATS did not answer (a 503, not a "not live").
async fn task_now(
    fleet: &Fleet,
    host: &HostName,
    run: &RunId,
    task: &TaskId,
) -> Result<Option<TaskNow>, Response<Body>> {
    let Some(t) = fleet.view(host, run, &View::Task(task.clone())).await? else { return Ok(None) };
    let Ok(t) = serde_json::from_slice::<crate::views::TaskDetail>(&t) else { return Ok(None) };
    let index = fleet.shared.index.read().unwrap_or_else(|p| p.into_inner());
    let Some(row) = index.rows.get(&(host.clone(), run.clone())).cloned() else { return Ok(None) };
    drop(index);
    let live = row.row.live && fleet.seen(host).1;
    Ok(Some(((t.facts.state, t.facts.sha.clone()), row.row.run.status, live)))
}

/// `…/stream` (`live_only`: refused with the pinned 409 unless the run is live) and `…/feed`.
pub async fn stream(
    api: Arc<Api>,
    fleet: Arc<Fleet>,
    host: HostName,
    run: RunId,
    task: TaskId,
    req: Request<ReqBody>,
    live_only: bool,
) -> Result<Response<Body>, Response<Body>> {
    let after = crate::api::stream::last_event_id(req.headers(), req.uri().query())?;
    if live_only {
        let live =
            task_now(&fleet, &host, &run, &task).await?.is_some_and(|(_, status, live)| live && !status.is_over());
        if !live {
            return Err(error_response(
                StatusCode::CONFLICT,
                format!(
                    "run not supervised / not live: no supervisor answers for {run} on host {host}; its events stay readable at /hosts/{host}/runs/{run}/tasks/{task}/events"
                ),
            ));
        }
    }
    let (resp, tx) = sse_response(api.cfg.stream_buffer);
    tokio::spawn(async move {
        api.streams.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if let Err(e) = produce(&api, &fleet, (&host, &run, &task), after, &tx).await {
            tracing::warn!(RUN_ID = %run, TASK = %task, host = %host, error = %e, "a fleet stream ended early");
        }
        api.streams.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    });
    Ok(resp)
}

/// The stream's producer: events from the stream, heartbeats, and the end once the task or run is
/// over (or nothing runs it for `NOT_LIVE_GRACE`) and every event published before is sent.
async fn produce(
    api: &Api,
    fleet: &Fleet,
    (host, run, task): (&HostName, &RunId, &TaskId),
    after: Option<Seq>,
    tx: &mpsc::Sender<Bytes>,
) -> Result<(), String> {
    let seq_of = |h: &async_nats::HeaderMap| h.get(header::SEQ).and_then(|v| Seq::parse(v.as_str()).ok());
    let stream = &fleet.events;
    let next_seq = last_sequence(stream).await.map_err(|_| "cannot read the events stream")? + 1;
    let subject = fleet::events_subject(host, run, task);
    let start = first_after(stream, &subject, seq_of, after).await.map_err(|_| "cannot find the resume point")?;
    let cfg = consumer::pull::OrderedConfig {
        filter_subject: subject.clone(),
        deliver_policy: consumer::DeliverPolicy::ByStartSequence { start_sequence: start.unwrap_or(next_seq) },
        ..Default::default()
    };
    let mut msgs = consume(stream, cfg).await.map_err(|_| "cannot follow the events stream")?;
    if tx.send(Bytes::from_static(b"retry: 2000\n\n")).await.is_err() {
        return Ok(());
    }
    let (mut last, mut pending) = (after, 0u64);
    let mut heartbeat = tokio::time::interval(api.cfg.heartbeat);
    let mut look = tokio::time::interval(Duration::from_secs(1));
    let mut silent_since: Option<tokio::time::Instant> = None;
    let mut shutdown = api.shutdown.clone();
    loop {
        tokio::select! {
            m = msgs.next() => {
                let m = delivered(m)?;
                pending = m.info().map(|i| i.pending).unwrap_or(0);
                let Some(seq) = m.headers.as_ref().and_then(seq_of) else { continue };
                if after.is_some_and(|a| seq <= a) {
                    continue;
                }
                let mut frame = format!("id: {seq}\ndata: ").into_bytes();
                frame.extend_from_slice(&m.payload);
                frame.extend_from_slice(b"\n\n");
                if tx.send(Bytes::from(frame)).await.is_err() {
                    return Ok(());
                }
                last = Some(seq);
                heartbeat.reset();
            }
            _ = look.tick(), if pending == 0 => {
                let Ok(Some(((state, sha), status, live))) = task_now(fleet, host, run, task).await else { continue };
                let now = tokio::time::Instant::now();
                let since = if live { None } else { Some(*silent_since.get_or_insert(now)) };
                silent_since = since;
                let not_live = since.is_some_and(|s| now - s >= crate::api::stream::NOT_LIVE_GRACE);
                let end = crate::views::StreamEnd::of(run, task, (state, sha.as_deref()), status, not_live, last.map(|s| s.to_string()));
                let Some(end) = end else { continue };
                // Every event published before the view that ends it is sent first.
                let published = last_of(stream, &subject).await.ok().flatten().and_then(|m| seq_of(&m.headers));
                if published.is_some_and(|p| last.is_none_or(|l| p > l)) {
                    continue;
                }
                let data = serde_json::to_string(&end).unwrap_or_default();
                let _ = tx.send(Bytes::from(format!("event: end\ndata: {data}\n\n"))).await;
                return Ok(());
            }
            _ = heartbeat.tick() => {
                if tx.send(Bytes::from_static(b": heartbeat\n\n")).await.is_err() {
                    return Ok(());
                }
            }
            _ = tx.closed() => return Ok(()),
            _ = shutdown.changed() => return Ok(()),
        }
    }
}

/// `/watch`'s query, checked as a home's is.
struct WatchQuery {
    runs: Vec<RunId>,
    rows: bool,
    since_now: bool,
    after: Option<u64>,
}

fn watch_query(req: &Request<ReqBody>) -> Result<WatchQuery, Response<Body>> {
    let q = req.uri().query();
    let bad = |d: String| error_response(StatusCode::BAD_REQUEST, d);
    let mut w = WatchQuery { runs: Vec::new(), rows: false, since_now: false, after: None };
    for kv in q.unwrap_or("").split('&').filter(|kv| !kv.is_empty()) {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        match (k, v) {
            ("token" | "lastEventId", _) => {}
            ("since", "now") => w.since_now = true,
            ("since", other) => {
                return Err(bad(format!("since must be \"now\" (or absent: from the beginning), got {other:?}")));
            }
            ("rows", "1" | "true") => w.rows = true,
            ("rows", "0" | "false") => w.rows = false,
            ("rows", other) => return Err(bad(format!("rows must be 1 or 0, got {other:?}"))),
            ("run", v) => {
                let v = crate::api::routes::percent_decode(v).map_err(|e| bad(format!("query parameter run: {e}")))?;
                w.runs.push(RunId::parse(&v).map_err(|e| bad(format!("query parameter run: {e}")))?);
            }
            (other, _) => {
                return Err(bad(format!(
                    "unknown query parameter {other:?}: /watch takes run (repeatable), rows, since, lastEventId, token"
                )));
            }
        }
    }
    let last = match req.headers().get("last-event-id") {
        Some(v) => Some(v.to_str().map_err(|_| bad("Last-Event-ID is not ASCII".into()))?.to_string()),
        None => crate::api::stream::query_param(q, "lastEventId")?,
    };
    if let Some(id) = last.filter(|s| !s.trim().is_empty()) {
        w.after = Some(parse_cursor(id.trim()).map_err(bad)?);
    }
    Ok(w)
}

/// A consumer's next message, or why there is none (the caller's client resumes with its last id).
fn delivered(
    m: Option<Result<async_nats::jetstream::Message, consumer::pull::OrderedError>>,
) -> Result<async_nats::jetstream::Message, String> {
    match m {
        Some(Ok(m)) => Ok(m),
        Some(Err(e)) => Err(e.to_string()),
        None => Err("the consumer ended".into()),
    }
}

/// `GET /watch` of the fleet.
pub async fn watch(
    api: Arc<Api>,
    fleet: Arc<Fleet>,
    req: Request<ReqBody>,
    host: Option<HostName>,
) -> Result<Response<Body>, Response<Body>> {
    let w = watch_query(&req)?;
    let stream = &fleet.journal;
    let present = last_sequence(stream).await?;
    let start = match (w.after, w.since_now) {
        // A cursor past the stream's end is none this fleet gave (or its streams were made anew).
        (Some(n), _) if n > present => {
            return Err(error_response(
                StatusCode::BAD_REQUEST,
                format!(
                    "Last-Event-ID {} is past the fleet's journal ({}): not a cursor this fleet gave; start again without it",
                    cursor_id(n),
                    cursor_id(present)
                ),
            ));
        }
        (Some(n), _) => n + 1,
        (None, true) => present + 1,
        (None, false) => 1,
    };
    let h = host.as_ref().map_or("*".to_string(), |h| h.to_string());
    let filter = match (w.runs.as_slice(), &host) {
        ([one], _) => format!("harness.journal.{h}.{}", fleet::token(one.as_str())),
        (_, Some(h)) => format!("harness.journal.{h}.>"),
        _ => "harness.journal.>".to_string(),
    };
    let cfg = consumer::pull::OrderedConfig {
        filter_subject: filter,
        deliver_policy: consumer::DeliverPolicy::ByStartSequence { start_sequence: start },
        ..Default::default()
    };
    let msgs = consume(stream, cfg).await?;
    let (resp, tx) = sse_response(1024);
    tokio::spawn(async move {
        api.streams.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if let Err(e) = follow_journal(&api, &fleet, w, msgs, (start - 1, present), &tx).await {
            tracing::warn!(error = %e, "a fleet /watch ended early: its client resumes with its last id");
        }
        api.streams.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    });
    Ok(resp)
}

/// Sends the journal stream's records from where the client is, then live; with `rows`, each run's
/// row after its records (once the row covers them, or 2 s on).
async fn follow_journal(
    api: &Api,
    fleet: &Fleet,
    w: WatchQuery,
    mut msgs: consumer::pull::Ordered,
    (from, present): (u64, u64),
    tx: &mpsc::Sender<Bytes>,
) -> Result<(), String> {
    // The cursor at once when there is nothing to catch up (as a home's /watch does).
    if from >= present && tx.send(Bytes::from(format!("id: {}\n\n", cursor_id(from)))).await.is_err() {
        return Ok(());
    }
    let mut due: Vec<(Key, u64)> = Vec::new();
    let mut heartbeat = tokio::time::interval(api.cfg.heartbeat);
    let mut shutdown = api.shutdown.clone();
    loop {
        tokio::select! {
            m = msgs.next() => {
                let m = delivered(m)?;
                let Ok(info) = m.info() else { continue };
                let (seq, pending) = (info.stream_sequence, info.pending);
                let Some((host, run)) = fleet::parse_journal_subject(&m.subject) else { continue };
                if !w.runs.is_empty() && !w.runs.contains(&run) {
                    continue;
                }
                let line = m.headers.as_ref().and_then(|h| h.get(header::LINE)).and_then(|v| v.as_str().parse().ok()).unwrap_or(0);
                let data = serde_json::to_string(&watch_event(&host, &run, line, &m.payload)).unwrap_or_default();
                if tx.send(Bytes::from(format!("id: {}\ndata: {data}\n\n", cursor_id(seq)))).await.is_err() {
                    return Ok(());
                }
                if w.rows {
                    due.retain(|(k, _)| *k != (host.clone(), run.clone()));
                    due.push(((host, run), seq));
                    if pending == 0 || due.len() >= 16 {
                        send_rows(fleet, std::mem::take(&mut due), tx).await?;
                    }
                }
                heartbeat.reset();
            }
            _ = heartbeat.tick() => {
                if tx.send(Bytes::from_static(b": heartbeat\n\n")).await.is_err() {
                    return Ok(());
                }
            }
            _ = tx.closed() => return Ok(()),
            _ = shutdown.changed() => return Ok(()),
        }
    }
}

/// `event: row` for each run, its row once it covers the record (waiting up to 2 s for it).
async fn send_rows(fleet: &Fleet, due: Vec<(Key, u64)>, tx: &mpsc::Sender<Bytes>) -> Result<(), String> {
    let mut changed = fleet.shared.rows_changed.subscribe();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
    for (key, seq) in due {
        loop {
            let row = fleet.shared.index.read().unwrap_or_else(|p| p.into_inner()).rows.get(&key).cloned();
            let covered = row.as_ref().is_some_and(|r| r.covers >= seq);
            if covered || tokio::time::Instant::now() >= deadline {
                if let Some(r) = row {
                    let json = super::with_seen(fleet, &key.0, &r.json);
                    let mut frame = b"event: row\ndata: ".to_vec();
                    frame.extend_from_slice(&json);
                    frame.extend_from_slice(b"\n\n");
                    tx.send(Bytes::from(frame)).await.map_err(|_| "the client went")?;
                }
                break;
            }
            let _ = tokio::time::timeout_at(deadline, changed.recv()).await;
        }
    }
    Ok(())
}
