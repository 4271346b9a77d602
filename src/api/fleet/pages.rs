//! A fleet API's paged answers, read from the streams: `GET /runs` (the rows every relay published,
//! filtered and paged as a home's API pages its own, plus `host=`), a task's `/events` and a run's
//! `/journal` (the messages of one subject, from the first after the client's cursor), and
//! `/approvals`. Each page is what the host's own API would answer, with `host` said.

use super::index::Row;
use super::{Fleet, consume, json_bytes, last_of, nats_error, next_of, with_seen};
use crate::api::{Body, error_response, full};
use crate::events::Seq;
use crate::fleet::{self, View, header};
use crate::ids::{HostName, RunId, TaskId};
use async_nats::jetstream::{consumer, stream::Stream};
use futures_util::StreamExt;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Response, StatusCode};
use std::sync::Arc;

fn bad(name: &str, why: impl std::fmt::Display) -> Response<Body> {
    error_response(StatusCode::BAD_REQUEST, format!("query parameter {name}: {why}"))
}

/// A fleet's `/runs` cursor: `<activity ns>.<runId>@<host>`.
fn parse_after(v: &str) -> Result<(i128, RunId, HostName), String> {
    let bad =
        || format!("not a fleet /runs cursor (expected <activity-ns>.<runId>@<host> from Harness-Next-After): {v:?}");
    let (front, host) = v.rsplit_once('@').ok_or_else(bad)?;
    let c = crate::api::overview::Cursor::parse(front).map_err(|_| bad())?;
    Ok((c.0, c.1, HostName::parse(host).map_err(|_| bad())?))
}

/// `GET /runs` of the fleet: as a home's (`overview_query` reads the same parameters), plus `host`.
pub fn runs(fleet: &Fleet, query: Option<&str>, only: Option<HostName>) -> Result<Response<Body>, Response<Body>> {
    let (mut host, mut after, mut rest) = (only.clone(), None, Vec::new());
    for kv in query.unwrap_or("").split('&').filter(|kv| !kv.is_empty()) {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        let v = || crate::api::routes::percent_decode(v).map_err(|e| bad(k, e));
        match k {
            "host" if host.is_some() && only.is_none() => return Err(bad(k, "given twice")),
            "host" if only.is_some() => {
                let h = HostName::parse(&v()?).map_err(|e| bad(k, e))?;
                if Some(&h) != only.as_ref() {
                    return Err(bad(k, format!("{h} is not the host the path names")));
                }
            }
            "host" => host = Some(HostName::parse(&v()?).map_err(|e| bad(k, e))?),
            "after" if after.is_some() => return Err(bad(k, "given twice")),
            "after" => after = Some(parse_after(&v()?).map_err(|e| bad(k, e))?),
            _ => rest.push(kv),
        }
    }
    let (q, clamped) = crate::api::overview_query(Some(&rest.join("&")))?;
    let cursor = fleet.shared.index.read().unwrap_or_else(|p| p.into_inner()).watch_cursor();
    let index = fleet.shared.index.read().unwrap_or_else(|p| p.into_inner());
    // `live=` asks what the rows say: an offline host's runs are not live (see `with_seen`).
    let matches = |r: &Row| {
        host.as_ref().is_none_or(|h| *h == r.key.0)
            && row_matches(&q, r)
            && q.live.is_none_or(|want| (r.row.live && fleet.seen(&r.key.0).1) == want)
    };
    let range: Box<dyn Iterator<Item = &Arc<Row>>> = match &after {
        Some((ns, run, h)) => Box::new(index.order.range(..(*ns, run.clone(), h.clone())).rev().map(|(_, r)| r)),
        None => Box::new(index.order.values().rev()),
    };
    let (mut body, mut n, mut more, mut next) = (vec![b'['], 0, false, None);
    for r in range.filter(|r| matches(r)) {
        if n == q.limit {
            more = true;
            break;
        }
        if n > 0 {
            body.push(b',');
        }
        body.extend_from_slice(&with_seen(fleet, &r.key.0, &r.json));
        n += 1;
        next = Some(format!("{}.{}@{}", r.activity, r.key.1, r.key.0));
    }
    body.push(b']');
    // Unfiltered (the Overview's first look), the total is the index's size, not a pass over it.
    let filtered = host.is_some()
        || !q.status.is_empty()
        || q.live.is_some()
        || q.project.is_some()
        || q.repo.is_some()
        || q.branch.is_some()
        || q.plane.is_some()
        || q.q.is_some()
        || q.since.is_some();
    let total = if filtered { index.order.values().filter(|r| matches(r)).count() } else { index.order.len() };
    drop(index);
    let mut resp = Response::new(full(body));
    let h = resp.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if let Some(v) = next.and_then(|n| HeaderValue::from_str(&n).ok()) {
        h.insert("harness-next-after", v);
    }
    h.insert("harness-more", HeaderValue::from_static(if more { "true" } else { "false" }));
    h.insert("harness-total", HeaderValue::from(total));
    if let Ok(v) = HeaderValue::from_str(&super::sse::cursor_id(cursor)) {
        h.insert("harness-watch-cursor", v);
    }
    if let Some(limit) = clamped {
        h.insert("harness-limit", HeaderValue::from(limit));
    }
    Ok(resp)
}

/// The filters of `GET /runs` on a published row (as `overview` applies them to a home's).
fn row_matches(q: &crate::api::overview::Query, r: &Row) -> bool {
    let s = &r.row.run;
    let status = || -> crate::state::journal::RunStatus {
        crate::wire::from_name(crate::wire::name_of(&s.status)).unwrap_or(crate::state::journal::RunStatus::Pending)
    };
    let plane = || -> Option<crate::state::registry::Plane> { crate::wire::from_name(crate::wire::name_of(&s.plane)) };
    (q.status.is_empty() || q.status.contains(&status()))
        && q.project.as_ref().is_none_or(|x| *x == s.project)
        && q.repo.as_ref().is_none_or(|x| *x == s.repo)
        && q.branch.as_ref().is_none_or(|x| Some(x) == s.branch.as_ref())
        && q.plane.is_none_or(|x| Some(x) == plane())
        && q.since.is_none_or(|t| r.activity > t)
        && q.q.as_ref().is_none_or(|x| {
            s.slug.as_str().to_lowercase().contains(x.as_str()) || s.run_id.as_str().contains(x.as_str())
        })
}

/// `GET …/approvals[?state=]` of the fleet: the host's published approvals, filtered here.
pub async fn approvals(
    fleet: &Fleet,
    host: &HostName,
    run: &RunId,
    query: Option<&str>,
) -> Result<Response<Body>, Response<Body>> {
    let state = crate::api::stream::query_param(query, "state")?;
    if let Some(s) = state.as_deref()
        && !["pending", "allowed", "denied", "expired"].contains(&s)
    {
        return Err(bad("state", format!("must be pending, allowed, denied or expired, got {s:?}")));
    }
    let Some(json) = fleet.view(host, run, &View::Approvals).await? else {
        return Err(error_response(
            StatusCode::NOT_FOUND,
            format!("host {host} has published no view of run {run} yet"),
        ));
    };
    let mut v: crate::views::Approvals = serde_json::from_slice(&json).map_err(|e| {
        error_response(StatusCode::BAD_GATEWAY, format!("host {host} published approvals that do not read: {e}"))
    })?;
    if let Some(s) = state {
        v.approvals.retain(|a| crate::wire::name_of(&a.state) == s);
    }
    Ok(json_bytes(StatusCode::OK, serde_json::to_vec(&v).unwrap_or_default(), host))
}

/// The stream sequence of the first message of `subject` whose key (read from its headers) is
/// past `after` — a binary search over the subject's messages, one direct get a step; `None` when
/// there is none. Keys grow with the stream sequence within a subject (a relay publishes in order).
pub async fn first_after<K: Ord>(
    stream: &Stream,
    subject: &str,
    key: impl Fn(&async_nats::HeaderMap) -> Option<K>,
    after: Option<K>,
) -> Result<Option<u64>, Response<Body>> {
    let key_of = |m: &async_nats::jetstream::message::StreamMessage| key(&m.headers);
    let Some(last) = last_of(stream, subject).await? else { return Ok(None) };
    let Some(after) = after else {
        return Ok(next_of(stream, subject, None).await?.map(|m| m.sequence));
    };
    if key_of(&last).is_none_or(|k| k <= after) {
        return Ok(None);
    }
    let (mut lo, mut hi) = (1u64, last.sequence);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        let Some(m) = next_of(stream, subject, Some(mid)).await? else { return Ok(None) };
        if key_of(&m).is_some_and(|k| k > after) {
            hi = mid;
        } else {
            lo = m.sequence + 1;
        }
    }
    Ok(next_of(stream, subject, Some(lo)).await?.map(|m| m.sequence))
}

/// The messages of `subject` from stream sequence `start`, at most `limit`: each with its headers
/// and payload, and whether more follow.
async fn read_from(
    stream: &Stream,
    subject: &str,
    start: u64,
    limit: usize,
) -> Result<(Vec<async_nats::jetstream::Message>, bool), Response<Body>> {
    let cfg = consumer::pull::OrderedConfig {
        filter_subject: subject.into(),
        deliver_policy: consumer::DeliverPolicy::ByStartSequence { start_sequence: start },
        ..Default::default()
    };
    let mut msgs = consume(stream, cfg).await?;
    let mut out = Vec::new();
    loop {
        let wait = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        let next = tokio::time::timeout_at(wait.min(super::deadline()), msgs.next()).await;
        let m = match next {
            Ok(Some(Ok(m))) => m,
            // What was read is a page (more follows from its end): a slow stream gives smaller
            // pages, not none.
            Ok(Some(Err(_)) | None) | Err(_) if !out.is_empty() => return Ok((out, true)),
            Ok(Some(Err(e))) => return Err(nats_error(e)),
            Ok(None) | Err(_) => return Err(nats_error("the stream's messages stopped coming")),
        };
        let pending = m.info().map(|i| i.pending).unwrap_or(0);
        out.push(m);
        if pending == 0 {
            return Ok((out, false));
        }
        if out.len() == limit {
            return Ok((out, true));
        }
    }
}

fn seq_of(h: &async_nats::HeaderMap) -> Option<Seq> {
    h.get(header::SEQ).and_then(|v| Seq::parse(v.as_str()).ok())
}

/// `GET …/tasks/:tid/events?after=&limit=` of the fleet: the events the host's relay published,
/// byte for byte what the host's own `/events` answers.
pub async fn events(
    fleet: &Fleet,
    host: &HostName,
    run: &RunId,
    task: &TaskId,
    query: Option<&str>,
) -> Result<Response<Body>, Response<Body>> {
    use crate::api::stream::{PAGE_DEFAULT, PAGE_MAX, cursor, query_param};
    let after = cursor(query_param(query, "after")?.as_deref(), "after")?;
    let (limit, clamped) = match query_param(query, "limit")? {
        None => (PAGE_DEFAULT, false),
        Some(l) => crate::api::page_limit(&l, PAGE_MAX)
            .map_err(|e| error_response(StatusCode::BAD_REQUEST, format!("limit {e}")))?,
    };
    let stream = &fleet.events;
    let subject = fleet::events_subject(host, run, task);
    let (mut out, mut next, mut more) = (Vec::new(), after, false);
    if let Some(start) = first_after(stream, &subject, seq_of, after).await? {
        let (msgs, m) = read_from(stream, &subject, start, limit).await?;
        more = m;
        for m in msgs {
            out.extend_from_slice(&m.payload);
            out.push(b'\n');
            next = m.headers.as_ref().and_then(seq_of).or(next);
        }
    }
    let mut r = Response::new(full(out));
    let h = r.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static("application/x-ndjson"));
    if let Some(v) = next.and_then(|s| HeaderValue::from_str(&s.to_string()).ok()) {
        h.insert("harness-next-after", v);
    }
    h.insert("harness-more", HeaderValue::from_static(if more { "true" } else { "false" }));
    if clamped {
        h.insert("harness-limit", HeaderValue::from(limit));
    }
    if let Ok(v) = HeaderValue::from_str(host.as_str()) {
        h.insert("harness-host", v);
    }
    Ok(r)
}

fn line_of(h: &async_nats::HeaderMap) -> Option<u64> {
    h.get(header::LINE).and_then(|v| v.as_str().parse().ok())
}

/// A journal message as `/watch` and `/journal` give it: watch/v1 with its host.
pub fn watch_event(host: &HostName, run: &RunId, line: u64, raw: &[u8]) -> crate::views::WatchEvent {
    let record = serde_json::from_slice::<serde_json::Value>(raw).ok().filter(|r| !r.is_null());
    let bad = record.is_none().then(|| String::from_utf8_lossy(&raw[..raw.len().min(4096)]).into_owned());
    crate::views::WatchEvent { v: "watch/v1".into(), run: run.clone(), line, record, bad, host: Some(host.clone()) }
}

/// `GET /runs/:id/journal?after=&limit=` of the fleet: the run's records as its relay published them.
pub async fn journal(
    fleet: &Fleet,
    host: &HostName,
    run: &RunId,
    query: Option<&str>,
) -> Result<Response<Body>, Response<Body>> {
    use crate::api::stream::{PAGE_DEFAULT, PAGE_MAX, query_param};
    for kv in query.unwrap_or("").split('&').filter(|kv| !kv.is_empty()) {
        let k = kv.split_once('=').map_or(kv, |(k, _)| k);
        if !matches!(k, "after" | "limit" | "token") {
            return Err(bad(k, "unknown: the journal takes after, limit, token"));
        }
    }
    let after = match query_param(query, "after")?.filter(|a| !a.is_empty()) {
        None => 0,
        Some(a) if a.bytes().all(|b| b.is_ascii_digit()) => a.parse::<u64>().unwrap_or(u64::MAX),
        Some(a) => return Err(bad("after", format!("must be a journal line number, got {a:?}"))),
    };
    let (limit, clamped) = match query_param(query, "limit")? {
        None => (PAGE_DEFAULT, false),
        Some(l) => crate::api::page_limit(&l, PAGE_MAX).map_err(|e| bad("limit", e))?,
    };
    let stream = &fleet.journal;
    let subject = fleet::journal_subject(host, run);
    let (mut out, mut last, mut more) = (Vec::new(), after, false);
    let from = if after == 0 { None } else { Some(after) };
    if let Some(start) = first_after(stream, &subject, line_of, from).await? {
        let (msgs, m) = read_from(stream, &subject, start, limit).await?;
        more = m;
        for m in msgs {
            let line = m.headers.as_ref().and_then(line_of).unwrap_or(last + 1);
            if serde_json::to_writer(&mut out, &watch_event(host, run, line, &m.payload)).is_ok() {
                out.push(b'\n');
            }
            last = line;
        }
    }
    let mut r = Response::new(full(out));
    let h = r.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static("application/x-ndjson"));
    h.insert("harness-next-after", HeaderValue::from(last));
    h.insert("harness-more", HeaderValue::from_static(if more { "true" } else { "false" }));
    if clamped {
        h.insert("harness-limit", HeaderValue::from(limit));
    }
    Ok(r)
}
