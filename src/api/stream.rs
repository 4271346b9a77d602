//! Agent events over HTTP: `GET …/stream` (SSE, live, resumable with `Last-Event-ID`) and
//! `GET …/events?after=&limit=` (durable pages of the same events, for any run). Both are a re-tail
//! of the task's logfile through the normalizer: no event is stored, `seq` is the line position, so
//! a reconnect — even to a restarted API — continues exactly.

use super::{Api, Body, error_response, full};
use crate::engine::normalize::{self, Context};
use crate::events::{Data, Event, Seq, Writer};
use crate::ids::{RunId, TaskId};
use crate::os::tail::{Tail, TailState};
use crate::state::registry::Pointer;
use bytes::Bytes;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use hyper::header::{CACHE_CONTROL, CONTENT_TYPE, HeaderValue};
use hyper::{Response, StatusCode};
use std::borrow::Cow;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc::{self, error::TrySendError};

/// What a stream needs to know about its task.
pub struct Source {
    pub pointer: Pointer,
    pub task: TaskId,
    pub adapter: crate::engine::Adapter,
    pub logfile: PathBuf,
    pub session: Option<String>,
}

/// Resolves run + task to their logfile, adapter and session (404 when unknown).
pub fn source(api: &Api, run: &RunId, task: &TaskId) -> Result<Source, Response<Body>> {
    let files = api.durable.load(run).map_err(super::durable_error)?;
    let planned = files.plan.as_ref().and_then(|p| p.task(task)).map(|t| t.adapter);
    let journaled = files.view.tasks.get(task);
    let Some(adapter) = planned.or(journaled.map(|_| crate::engine::Adapter::DEFAULT)) else {
        return Err(error_response(StatusCode::NOT_FOUND, format!("run {run} has no task {task}")));
    };
    let live = files.liveness.as_ref().and_then(|l| l.tasks.get(task));
    let logfile = journaled
        .and_then(|j| j.logfile.clone())
        .or_else(|| live.map(|l| l.logfile.clone()))
        .unwrap_or_else(|| files.pointer.default_logfile(task));
    let session = journaled.and_then(|j| j.session_id.clone()).or_else(|| live.and_then(|l| l.session_id.clone()));
    Ok(Source { pointer: files.pointer, task: task.clone(), adapter, logfile, session })
}

/// The resume point from `Last-Event-ID` or `?lastEventId=` (400 when it is not a seq).
pub fn last_event_id(headers: &hyper::HeaderMap, query: Option<&str>) -> Result<Option<Seq>, Response<Body>> {
    let raw = match headers.get("last-event-id") {
        Some(v) => Some(
            v.to_str().map_err(|_| error_response(StatusCode::BAD_REQUEST, "Last-Event-ID is not ASCII"))?.to_string(),
        ),
        None => query_param(query, "lastEventId")?,
    };
    cursor(raw.as_deref(), "Last-Event-ID")
}

/// A stream or page cursor: a seq, or absent / empty / `0` for "from the beginning" (line 1 is the
/// first line, so `0` names the position before it).
pub fn cursor(raw: Option<&str>, name: &str) -> Result<Option<Seq>, Response<Body>> {
    match raw.map(str::trim) {
        None | Some("") | Some("0") => Ok(None),
        Some(s) => Seq::parse(s).map(Some).map_err(|e| error_response(StatusCode::BAD_REQUEST, format!("{name}: {e}"))),
    }
}

/// One query parameter, percent-decoded (400 when malformed).
pub fn query_param(query: Option<&str>, name: &str) -> Result<Option<String>, Response<Body>> {
    let Some(q) = query else { return Ok(None) };
    for kv in q.split('&') {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        if k == name {
            let v = super::routes::percent_decode(v)
                .map_err(|e| error_response(StatusCode::BAD_REQUEST, format!("query parameter {name}: {e}")))?;
            return Ok(Some(v));
        }
    }
    Ok(None)
}

fn sse_frame(w: &Writer, e: &Event, with_id: bool) -> Bytes {
    let mut json = Vec::with_capacity(256);
    w.write_line(e, &mut json);
    json.pop(); // the newline: SSE data is one line
    let mut out = Vec::with_capacity(json.len() + 32);
    if with_id {
        out.extend_from_slice(format!("id: {}\n", e.seq).as_bytes());
    }
    out.extend_from_slice(b"data: ");
    out.extend_from_slice(&json);
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

/// `GET …/stream`: the SSE response. The producer task tails the log into a bounded channel and waits
/// for a client that reads slower than the log grows (the file is the buffer); a client that takes
/// nothing for `slow_client_grace` starts losing events and gets one `error` event naming the
/// dropped range once it reads again (no silent loss; memory stays bounded).
///
/// Either ends with `event: end` (`views::StreamEnd`) once the task or its run is over, or no
/// supervisor has answered for `NOT_LIVE_GRACE`, and then closes.
pub fn sse(api: Arc<Api>, src: Source, after: Option<Seq>) -> Response<Body> {
    let (tx, rx) = mpsc::channel::<Bytes>(api.cfg.stream_buffer.max(2));
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|b| (Ok::<_, std::convert::Infallible>(Frame::data(b)), rx))
    });
    let api2 = api.clone();
    tokio::spawn(async move {
        api2.streams.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        produce(api2.clone(), src, after, tx).await;
        api2.streams.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    });
    let mut r = Response::new(StreamBody::new(stream).boxed());
    r.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    r.headers_mut().insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r.headers_mut().insert("x-accel-buffering", HeaderValue::from_static("no"));
    r
}

/// The task's log at line `line`, and its lines' times from there. Finding line N of a large log
/// scans it: on the blocking pool, never on an async worker; so is the batch of its time in the
/// sidecar.
async fn open_at(api: &Arc<Api>, src: &Source, line: u64) -> Option<(Tail, crate::os::stamp::Times)> {
    let (a, log) = (api.clone(), src.logfile.clone());
    let found = tokio::task::spawn_blocking(move || {
        Tail::at_line(&a.index, &log, line).map(|t| (t, crate::os::stamp::Times::from_line(&log, line)))
    })
    .await
    .unwrap_or_else(|e| Err(std::io::Error::other(e)));
    found
        .inspect_err(|e| {
            tracing::warn!(RUN_ID = %src.pointer.run_id, TASK = %src.task, error = %e, "cannot open the log");
        })
        .ok()
}

async fn produce(api: Arc<Api>, src: Source, after: Option<Seq>, tx: mpsc::Sender<Bytes>) {
    let run = src.pointer.run_id.to_string();
    let task = src.task.to_string();
    let w = Writer::new(&run, &task);
    let mut shutdown = api.shutdown.clone();
    let Some((mut tail, mut times)) = open_at(&api, &src, after.map(|s| s.line).unwrap_or(1)).await else { return };
    let mut wake = api.hub.subscribe(&src.logfile);
    if tx.send(Bytes::from_static(b"retry: 2000\n\n")).await.is_err() {
        return;
    }
    let mut heartbeat = tokio::time::interval(api.cfg.heartbeat);
    heartbeat.tick().await;
    // Dropped range (first, last) waiting to be reported.
    let mut dropped: Option<(Seq, Seq)> = None;
    let mut end = EndWatch::new(&api, &src);
    let mut last_sent = after;
    loop {
        let (lines, state) = match tail.read_available(8 * 1024) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(RUN_ID = %run, TASK = %task, error = %e, "log read failed");
                (Vec::new(), TailState::Vanished)
            }
        };
        let got = !lines.is_empty();
        // A line's time is when it arrived (its stamp, written before it); without one, when it was
        // read — lines read together were observed together: one clock read per batch.
        if got {
            times.refresh();
        }
        let now = crate::state::journal::now_rfc3339();
        for (ord, line) in &lines {
            let stamped = times.at(*ord);
            let observed_ts = stamped.as_deref().unwrap_or(&now);
            let ctx = Context { run: &run, task: &task, session: src.session.as_deref(), observed_ts };
            for e in normalize::normalize_line(src.adapter, *ord, line, &ctx) {
                if after.is_some_and(|a| e.seq <= a) {
                    continue;
                }
                if deliver(&api, &tx, &w, &mut dropped, &e).await.is_err() {
                    return;
                }
                last_sent = Some(e.seq);
            }
        }
        if state == TailState::Vanished {
            let e = vanished(&run, &task, &src, tail.next_line());
            let _ = tx.send(sse_frame(&w, &e, false)).await;
            return;
        }
        if got {
            heartbeat.reset();
            continue; // more may be there already
        }
        // Read to the log's end: is there more to come? The task's last line is in the log before
        // the journal says it is over (the wrapper exits first).
        if let Some(done) = end.check(last_sent).await {
            return send_end(&tx, &w, dropped.take(), &done).await;
        }
        tokio::select! {
            _ = tx.closed() => return,
            _ = shutdown.changed() => return,
            _ = end.changed() => {}
            // A drop reported as soon as the client has room again, even if no event follows.
            permit = tx.reserve(), if dropped.is_some() => {
                let Ok(permit) = permit else { return };
                if let Some((first, last)) = dropped.take() {
                    permit.send(sse_frame(&w, &overflow_event(&run, &task, first, last), false));
                }
            }
            _ = async {
                match &mut wake {
                    Some(rx) => { let _ = rx.recv().await; }
                    None => std::future::pending::<()>().await,
                }
            } => {}
            // Polling fallback (and a safety net for missed wake-ups).
            _ = tokio::time::sleep(api.cfg.poll) => {}
            _ = heartbeat.tick() => {
                if let Err(TrySendError::Closed(_)) = tx.try_send(Bytes::from_static(b": heartbeat\n\n")) {
                    return;
                }
            }
        }
    }
}

/// How long no supervisor may answer before a stream ends `not_live` (a supervisor restarted by
/// systemd answers again well within it).
pub const NOT_LIVE_GRACE: Duration = Duration::from_secs(3);

/// Watches whether a task's stream is over: the run's journal, folded as it grows (woken by its
/// directory's watcher), and, for a supervised run, whether its supervisor still answers.
struct EndWatch {
    run: RunId,
    task: TaskId,
    journal: PathBuf,
    /// `None` for a plane without a supervisor of its own (DynWF): only the journal ends it.
    socket: Option<PathBuf>,
    /// The liveness sidecar: a batch run (`harness run` in the foreground) has no control socket,
    /// and its supervising process is known by the pid there — as the views know it.
    liveness: PathBuf,
    follower: Option<crate::state::journal::Follower>,
    wake: Option<tokio::sync::broadcast::Receiver<()>>,
    dirty: bool,
    /// When the supervisor was last asked, and since when it has not answered.
    asked: Option<tokio::time::Instant>,
    silent_since: Option<tokio::time::Instant>,
}

impl EndWatch {
    fn new(api: &Api, src: &Source) -> EndWatch {
        let journal = src.pointer.journal_path();
        let socket = (src.pointer.plane == crate::state::registry::Plane::Standalone)
            .then(|| api.durable.home.socket_path(&src.pointer.run_id));
        EndWatch {
            run: src.pointer.run_id.clone(),
            task: src.task.clone(),
            wake: api.hub.subscribe(&journal),
            journal,
            socket,
            liveness: src.pointer.liveness_path(),
            follower: Some(Default::default()),
            dirty: true,
            asked: None,
            silent_since: None,
        }
    }

    /// Resolves when the journal may have changed, or it is time to ask the supervisor again.
    async fn changed(&mut self) {
        let ask_in = match (self.asked, self.silent_since) {
            (None, _) => Duration::ZERO,
            (Some(at), silent) => {
                let every = if silent.is_some() { Duration::from_secs(1) } else { Duration::from_secs(5) };
                (at + every).saturating_duration_since(tokio::time::Instant::now())
            }
        };
        let poll = Duration::from_secs(if self.wake.is_some() { 5 } else { 1 });
        let supervised = self.socket.is_some();
        tokio::select! {
            _ = async {
                match &mut self.wake {
                    Some(rx) => { let _ = rx.recv().await; }
                    None => std::future::pending::<()>().await,
                }
            } => self.dirty = true,
            _ = tokio::time::sleep(ask_in), if supervised => {}
            // Without a watcher (or should a wake-up be missed), the journal is looked at anyway.
            _ = tokio::time::sleep(poll) => self.dirty = true,
        }
    }

    /// The end, if the stream is over (on the blocking pool: it reads files and a socket).
    async fn check(&mut self, last: Option<Seq>) -> Option<crate::views::StreamEnd> {
        let now = tokio::time::Instant::now();
        let ask = self.socket.clone().filter(|_| self.asked.is_none_or(|at| now >= at + Duration::from_secs(1)));
        if !self.dirty && ask.is_none() {
            return None;
        }
        let mut follower = self.follower.take().unwrap_or_default();
        let (journal, run, task, liveness) =
            (self.journal.clone(), self.run.clone(), self.task.clone(), self.liveness.clone());
        let silent_for = self.silent_since.map(|s| now.saturating_duration_since(s));
        let asked = ask.is_some();
        let (follower, answered, end) = tokio::task::spawn_blocking(move || {
            let pid_alive = || {
                crate::state::liveness::get(&liveness)
                    .ok()
                    .flatten()
                    .and_then(|l| l.supervisor_pid)
                    .is_some_and(crate::state::liveness::pid_alive)
            };
            let answered = ask.map(|sock| crate::control::is_live(&sock) || pid_alive());
            let not_live = answered == Some(false) && silent_for.is_some_and(|d| d >= NOT_LIVE_GRACE);
            let end = match follower.update(&journal) {
                Ok(view) => crate::state::views::stream_end(view, &run, &task, not_live, last.map(|s| s.to_string())),
                Err(e) => {
                    tracing::warn!(RUN_ID = %run, TASK = %task, error = %e, "cannot read the run's journal");
                    None
                }
            };
            (follower, answered, end)
        })
        .await
        .ok()?;
        self.follower = Some(follower);
        self.dirty = false;
        if asked {
            self.asked = Some(now);
            match answered {
                Some(false) => {
                    self.silent_since.get_or_insert(now);
                }
                _ => self.silent_since = None,
            }
        }
        end
    }
}

/// The `error` event that ends a stream whose log was deleted or replaced.
fn vanished<'a>(run: &'a str, task: &'a str, src: &'a Source, next_line: u64) -> Event<'a> {
    Event {
        run,
        task,
        session: src.session.as_deref().map(Cow::Borrowed),
        seq: Seq::line(next_line),
        ts: Cow::Owned(crate::state::journal::now_rfc3339()),
        data: Data::Error {
            fatal: true,
            message: Some(Cow::Owned(format!("logfile {} was deleted or replaced", src.logfile.display()))),
            reason: Some(Cow::Borrowed("log_vanished")),
            raw: None,
        },
    }
}

/// The stream's last frames: a drop not yet reported, then `event: end`.
async fn send_end(tx: &mpsc::Sender<Bytes>, w: &Writer, dropped: Option<(Seq, Seq)>, done: &crate::views::StreamEnd) {
    if let Some((first, last)) = dropped {
        let (run, task) = (done.run_id.to_string(), done.task.to_string());
        let _ = tx.send(sse_frame(w, &overflow_event(&run, &task, first, last), false)).await;
    }
    let data = serde_json::to_string(done).unwrap_or_default();
    let _ = tx.send(Bytes::from(format!("event: end\ndata: {data}\n\n"))).await;
}

/// The client has gone: stop producing.
struct Gone;

/// Sends one event, or counts it into the dropped range. The log is the real buffer: a client that
/// reads slowly is waited for (backpressure), but one that takes nothing for the grace period starts
/// losing events; the range lost is reported to it as one `error` event as soon as it has room.
async fn deliver(
    api: &Api,
    tx: &mpsc::Sender<Bytes>,
    w: &Writer,
    dropped: &mut Option<(Seq, Seq)>,
    e: &Event<'_>,
) -> Result<(), Gone> {
    if let Some((first, last)) = *dropped {
        let note = overflow_event(e.run, e.task, first, last);
        match tx.try_send(sse_frame(w, &note, false)) {
            Ok(()) => *dropped = None,
            Err(TrySendError::Full(_)) => {
                *dropped = Some((first, e.seq));
                return Ok(());
            }
            Err(TrySendError::Closed(_)) => return Err(Gone),
        }
    }
    match tokio::time::timeout(api.cfg.slow_client_grace, tx.reserve()).await {
        Ok(Ok(permit)) => permit.send(sse_frame(w, e, true)),
        Ok(Err(_)) => return Err(Gone),
        Err(_) => {
            *dropped = Some((e.seq, e.seq));
            tracing::debug!(RUN_ID = %e.run, TASK = %e.task, SEQ = %e.seq, "slow client: dropping");
        }
    }
    Ok(())
}

fn overflow_event<'a>(run: &'a str, task: &'a str, first: Seq, last: Seq) -> Event<'a> {
    Event {
        run,
        task,
        session: None,
        seq: last,
        ts: Cow::Owned(crate::state::journal::now_rfc3339()),
        data: Data::Error {
            fatal: false,
            message: Some(Cow::Owned(format!(
                "dropped events {first} to {last}: the client read too slowly; fetch them from /events or reconnect with Last-Event-ID"
            ))),
            reason: Some(Cow::Borrowed("overflow")),
            raw: None,
        },
    }
}

/// `GET …/events?after=&limit=`: up to `limit` events after `after`, as JSON lines. The response
/// header `Harness-Next-After` is the seq to pass as `after` for the next page; `Harness-More` says
/// whether the log holds more complete lines now.
pub fn events_page(api: &Api, src: &Source, after: Option<Seq>, limit: usize, clamped: bool) -> Response<Body> {
    let run = src.pointer.run_id.to_string();
    let task = src.task.to_string();
    let w = Writer::new(&run, &task);
    let mut out = Vec::new();
    let mut n = 0;
    let mut next_after = after;
    let mut more = false;
    let first = after.map(|s| s.line).unwrap_or(1);
    let mut times = crate::os::stamp::Times::from_line(&src.logfile, first);
    match Tail::at_line(&api.index, &src.logfile, first) {
        Ok(mut tail) => 'read: loop {
            let (lines, _) = match tail.read_available(1 << 20) {
                Ok(r) => r,
                Err(e) => return error_response(StatusCode::INTERNAL_SERVER_ERROR, format!("log read failed: {e}")),
            };
            if lines.is_empty() {
                break;
            }
            times.refresh();
            let now = crate::state::journal::now_rfc3339();
            for (ord, line) in &lines {
                let stamped = times.at(*ord);
                let observed_ts = stamped.as_deref().unwrap_or(&now);
                let ctx = Context { run: &run, task: &task, session: src.session.as_deref(), observed_ts };
                let events = normalize::normalize_line(src.adapter, *ord, line, &ctx);
                for e in &events {
                    if after.is_some_and(|a| e.seq <= a) {
                        continue;
                    }
                    if n == limit {
                        more = true;
                        break 'read;
                    }
                    w.write_line(e, &mut out);
                    n += 1;
                    next_after = Some(e.seq);
                }
            }
        },
        Err(e) => return error_response(StatusCode::INTERNAL_SERVER_ERROR, format!("cannot open the log: {e}")),
    }
    let mut r = Response::new(full(out));
    r.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/x-ndjson"));
    if let Some(s) = next_after
        && let Ok(v) = HeaderValue::from_str(&s.to_string())
    {
        r.headers_mut().insert("harness-next-after", v);
    }
    r.headers_mut().insert("harness-more", HeaderValue::from_static(if more { "true" } else { "false" }));
    if clamped {
        // The page was asked for more than the largest page: say what was served.
        r.headers_mut().insert("harness-limit", HeaderValue::from(limit));
    }
    r
}

/// Default and largest page size of `/events`.
pub const PAGE_DEFAULT: usize = 500;
pub const PAGE_MAX: usize = 5000;

/// Heartbeat comment period of SSE streams (at most 10 s: proxies drop idle streams).
pub const HEARTBEAT: Duration = Duration::from_secs(5);
