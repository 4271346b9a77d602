//! The POST verbs — steer, kill, pause, resume — carried to whoever holds the run: the supervisor's
//! control socket for a standalone run, the inbox for a DynWF run. The API decides nothing about
//! run state: it checks the request, forwards it, and maps the answer (the supervisor's 409s pass
//! through with their detail). No supervisor → 409 "run not supervised / not live". What it refuses
//! itself (a bad body, a run nobody supervises) it records through `audit` before answering.

use super::guard::Conn;
use super::{Api, Body, error_response, json_response};
use crate::control::{self, Act, Name, Reply, Request, Takes};
use crate::ids::{RunId, TaskId};
use crate::state::journal::{ControlRecord, Verb};
use crate::state::registry::Plane;
use crate::timeouts;
use http_body_util::BodyExt;
use hyper::{Response, StatusCode};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A DynWF verb's answer (keys in the wire's alphabetical order).
#[derive(serde::Serialize)]
struct Queued<'a> {
    detail: &'a str,
    ok: bool,
    queued: &'a crate::state::inbox::Entry,
}

/// Largest request body.
pub const MAX_BODY: usize = 64 * 1024;

/// A refusal found at the API's edge: its status and detail.
type Refusal = (StatusCode, String);

fn bad(detail: impl Into<String>) -> Refusal {
    (StatusCode::BAD_REQUEST, detail.into())
}

/// Reads and checks a JSON body: `application/json` only (415), at most 64 KiB (413), an object
/// with only the `allowed` fields (400 naming the field). An empty body is `{}`.
pub async fn json_body(
    req: hyper::Request<super::ReqBody>,
    allowed: &[&str],
) -> Result<serde_json::Map<String, Value>, Refusal> {
    let too_large = || (StatusCode::PAYLOAD_TOO_LARGE, format!("body is larger than {MAX_BODY} bytes"));
    let declared = req
        .headers()
        .get(hyper::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BODY as u64) {
        return Err(too_large());
    }
    let content_type = req.headers().get(hyper::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).map(str::to_string);
    let body = http_body_util::Limited::new(req.into_body(), MAX_BODY).collect().await;
    let bytes = match body {
        Ok(b) => b.to_bytes(),
        Err(e) if e.downcast_ref::<http_body_util::LengthLimitError>().is_some() => return Err(too_large()),
        Err(e) => return Err(bad(format!("cannot read the body: {e}"))),
    };
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(serde_json::Map::new());
    }
    let is_json = content_type.as_deref().is_some_and(|c| {
        let mime = c.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
        mime == "application/json"
    });
    if !is_json {
        return Err((
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!("Content-Type must be application/json (got {})", content_type.as_deref().unwrap_or("none")),
        ));
    }
    let v: Value = serde_json::from_slice(&bytes).map_err(|e| bad(format!("body is not JSON: {e}")))?;
    let Value::Object(map) = v else {
        return Err(bad("body must be a JSON object"));
    };
    if let Some(k) = map.keys().find(|k| !allowed.contains(&k.as_str())) {
        let k: String = k.chars().take(64).collect();
        return Err(bad(format!("unknown field {k:?} (allowed: {})", allowed.join(", "))));
    }
    Ok(map)
}

/// The request's `Idempotency-Key` header, checked (a verb sent again with the same key is
/// answered with the first answer: `spec/CONTROL.md`).
fn idempotency_key(h: &hyper::HeaderMap) -> Result<Option<String>, Refusal> {
    let Some(v) = h.get("idempotency-key") else { return Ok(None) };
    let k = v.to_str().map_err(|_| bad("Idempotency-Key is not ASCII"))?;
    crate::state::journal::check_idempotency_key(k).map_err(bad)?;
    Ok(Some(k.to_string()))
}

fn field_str(map: &serde_json::Map<String, Value>, name: &str) -> Result<Option<String>, Refusal> {
    // Absent is absent; null is not a string (the spec says string).
    match map.get(name) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(bad(format!("field {name} must be a string"))),
    }
}

/// A steer's `comments`: `[{path, line, body}]` (`line` absent or null: the file as a whole).
fn review_comments(v: Option<&Value>) -> Result<Vec<crate::state::journal::Comment>, Refusal> {
    let Some(v) = v else { return Ok(Vec::new()) };
    let Value::Array(items) = v else { return Err(bad("field comments must be an array of {path, line, body}")) };
    let mut out = Vec::with_capacity(items.len());
    for (i, c) in items.iter().enumerate() {
        let n = i + 1;
        let Value::Object(c) = c else {
            return Err(bad(format!("comment {n} must be an object {{path, line, body}}")));
        };
        if let Some(k) = c.keys().find(|k| !["path", "line", "body"].contains(&k.as_str())) {
            return Err(bad(format!("comment {n}: unknown field {k:?} (a comment has path, line, body)")));
        }
        let text = |k: &str| match c.get(k) {
            Some(Value::String(s)) => Ok(s.clone()),
            _ => Err(bad(format!("comment {n}: field {k} is required and must be a string"))),
        };
        let line = match c.get("line") {
            None | Some(Value::Null) => None,
            // JSON Schema's integer: 12 and 12.0 alike.
            Some(Value::Number(l)) if l.as_u64().is_some_and(|n| (1..=u64::from(u32::MAX)).contains(&n)) => l.as_u64(),
            Some(Value::Number(l))
                if l.as_f64().is_some_and(|f| (1.0..=f64::from(u32::MAX)).contains(&f) && f.fract() == 0.0) =>
            {
                l.as_f64().map(|f| f as u64)
            }
            Some(_) => return Err(bad(format!("comment {n}: line must be an integer from 1 to 4294967295 (or null)"))),
        };
        out.push(crate::state::journal::Comment { path: text("path")?, line, body: text("body")? });
    }
    Ok(out)
}

/// A verb's body, checked.
struct Asked {
    by: String,
    msg: Option<String>,
    interrupt: bool,
    /// budget: the new budget and the task it is for (absent: the run's).
    usd: Option<f64>,
    budget_task: Option<TaskId>,
    /// skip: why.
    reason: Option<String>,
}

/// Checks the body of `verb`. On a refusal, also returns what could be read of `by` and `msg`, for
/// the record.
async fn asked(
    verb: Name,
    req: hyper::Request<super::ReqBody>,
) -> Result<Asked, (Refusal, Option<String>, Option<String>)> {
    // The verb's wire fields, but the task when the path names it, and `by`.
    let spec = verb.spec();
    let mut allowed: Vec<&str> =
        spec.fields.iter().copied().filter(|f| *f != "task" || spec.task == Takes::OptionalTask).collect();
    allowed.push("by");
    if verb == Name::Steer {
        // Review comments are composed into the steer's one message here, at the edge.
        allowed.push("comments");
    }
    let body = json_body(req, &allowed).await.map_err(|r| (r, None, None))?;
    let raw_msg = body.get("msg").and_then(Value::as_str).map(str::to_string);
    let raw_by = body.get("by").and_then(Value::as_str).filter(|b| !b.is_empty()).map(crate::state::journal::clip_by);
    let fail = |r: Refusal| (r, raw_by.clone(), raw_msg.clone());
    let by = field_str(&body, "by").map_err(fail)?.unwrap_or_else(|| "api".into());
    // Characters, as JSON Schema's maxLength counts them (not bytes).
    if by.is_empty() || by.chars().count() > crate::state::journal::MAX_BY {
        return Err(fail(bad("field by must be 1 to 64 characters")));
    }
    if verb == Name::Budget {
        let usd = match body.get("usd") {
            Some(Value::Number(n)) if n.as_f64().is_some_and(|f| f.is_finite() && f > 0.0) => n.as_f64(),
            _ => return Err(fail(bad("field usd is required: the new budget, a positive number of US dollars"))),
        };
        let budget_task = match field_str(&body, "task").map_err(fail)? {
            None => None,
            Some(t) => Some(TaskId::parse(&t).map_err(|e| fail(bad(format!("field task: {e}"))))?),
        };
        return Ok(Asked { by, msg: None, interrupt: false, usd, budget_task, reason: None });
    }
    if verb == Name::Skip {
        let reason = field_str(&body, "reason")
            .map_err(fail)?
            .filter(|r| !r.trim().is_empty())
            .ok_or_else(|| fail(bad("field reason is required and must not be blank: why the task is skipped")))?;
        if reason.len() > control::MAX_REASON {
            return Err(fail(bad(format!("field reason is longer than {} bytes", control::MAX_REASON))));
        }
        return Ok(Asked { by, msg: None, interrupt: false, usd: None, budget_task: None, reason: Some(reason) });
    }
    if verb != Name::Steer {
        return Ok(Asked { by, msg: None, interrupt: false, usd: None, budget_task: None, reason: None });
    }
    let comments = review_comments(body.get("comments")).map_err(fail)?;
    let msg = field_str(&body, "msg").map_err(fail)?;
    let msg = crate::state::journal::comments_message(msg.as_deref(), &comments).map_err(|e| fail(bad(e)))?;
    if msg.trim().is_empty() {
        return Err(fail(bad("field msg is required and must not be blank (or comments given): the message to queue")));
    }
    let interrupt = match body.get("interrupt") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(fail(bad("field interrupt must be a boolean"))),
    };
    Ok(Asked { by, msg: Some(msg), interrupt, usd: None, budget_task: None, reason: None })
}

/// Handles one verb. `task` for steer/kill; `peer` is the connection's uid where known. Every
/// refusal is on the record before it is answered: in the run's journal (a `refused` control
/// record) once the run is known, in the log with the peer's uid when it is not.
pub async fn verb(
    api: Arc<Api>,
    run: RunId,
    task: Option<TaskId>,
    verb: Name,
    req: hyper::Request<super::ReqBody>,
    conn: Conn,
) -> Result<Response<Body>, Response<Body>> {
    let peer = conn.uid;
    let a = api.clone();
    let r = run.clone();
    let pointer = match super::blocking(move || a.durable.pointer(&r)).await? {
        Ok(p) => p,
        Err(e) => {
            crate::state::audit::untied(peer, run.as_str(), verb.as_str(), &e.to_string());
            return Err(super::durable_error(e));
        }
    };
    let journal = pointer.journal_path();
    // The refusal, recorded in the run's journal, as its HTTP answer.
    let refused = |(status, detail): Refusal, by: Option<String>, msg: Option<String>| {
        let detail_rec = format!("{detail} ({})", status.as_u16());
        let by = by.unwrap_or_else(|| "api".into());
        let rec = crate::state::audit::record(verb.spec().journaled, task.clone(), msg.as_deref(), &by, &detail_rec);
        on_record(journal.clone(), rec, (status, detail))
    };
    let key = idempotency_key(req.headers());
    let key = match key {
        Ok(k) => k,
        Err(r) => return Err(refused(r, None, None).await),
    };
    let Asked { by, msg, interrupt, usd, budget_task, reason } = match asked(verb, req).await {
        Ok(a) => a,
        Err((r, by, msg)) => return Err(refused(r, by, msg).await),
    };
    let live_path = pointer.liveness_path();
    let kill_grace =
        super::blocking(move || crate::state::liveness::get(&live_path).ok().flatten().and_then(|l| l.kill_grace_ms))
            .await?
            .map_or(timeouts::KILL_GRACE, std::time::Duration::from_millis);
    let uid = peer.map_or_else(|| "unknown".to_string(), |u| u.to_string());
    log_verb(&run, task.as_ref(), verb, &uid, &by);
    // Placed before the run's plane is looked at: an agent of a supervised run may not send an
    // operator's verb to any run of the home, a DynWF one's inbox included.
    let for_pid = match operator_sender(&api, conn, verb, &run).await {
        Ok(pid) => pid,
        Err(detail) => return Err(refused((StatusCode::FORBIDDEN, detail), Some(by), msg).await),
    };
    if pointer.plane == Plane::Dynwf {
        // The inbox records both ways: `queued` with the entry's id, or `refused`.
        let task2 = task.clone();
        let result = super::blocking(move || {
            crate::state::inbox::append(&pointer, verb.spec().journaled, task2, msg, interrupt, &by, key.as_deref())
        })
        .await?;
        return match result {
            Ok(entry) => {
                let detail = "queued in the DynWF inbox: taken at the next task boundary";
                Ok(json_response(StatusCode::OK, &Queued { detail, ok: true, queued: &entry }))
            }
            Err(e) => Err(inbox_error(e)),
        };
    }
    let sock = api.durable.home.socket_path(&run);
    let asked = Asked { by, msg, interrupt, usd, budget_task, reason };
    let request = match request_of(verb, task.clone(), &asked) {
        Some(r) => r,
        None => {
            let bad = bad(format!("{verb} is not a verb of this route"));
            return Err(refused(bad, Some(asked.by), asked.msg).await);
        }
    };
    let request = request.relayed_for(for_pid).keyed(key);
    // A kill answers once the task's group is gone: the run's kill grace plus a margin.
    let budget = match verb {
        Name::Kill => kill_grace + timeouts::KILL_ANSWER_MARGIN,
        _ => timeouts::VERB_ANSWER,
    };
    // The supervisor records what it answers, refusals included; the API records only the refusal
    // of a run nobody supervises.
    let by = request.by().map(str::to_string);
    let msg = match &request.act {
        Act::Steer(s) => Some(s.msg.clone()),
        _ => None,
    };
    let reply = match relay(&sock, &request, budget, &run, verb, &uid).await {
        Relay::Answer(reply) => reply,
        Relay::NotLive(detail) => return Err(refused((StatusCode::CONFLICT, detail), by, msg).await),
        Relay::Failed(r) => return Err(r),
    };
    answered(reply)
}

/// The supervisor's reply as the HTTP answer: its refusals pass through with their status.
fn answered(reply: Reply) -> Result<Response<Body>, Response<Body>> {
    match reply {
        Reply::Done(answer) => Ok(json_response(StatusCode::OK, &answer)),
        Reply::Refused(r) => {
            Err(error_response(StatusCode::from_u16(r.kind.status()).unwrap_or(StatusCode::CONFLICT), r.detail))
        }
    }
}

/// Records a refusal found here in the run's journal, then answers it; a refusal that cannot be
/// recorded is answered 500, saying so.
async fn on_record(journal: PathBuf, rec: ControlRecord, (status, detail): Refusal) -> Response<Body> {
    let d = detail.clone();
    match super::blocking(move || crate::state::audit::on_record_at(&journal, rec, &d)).await {
        Ok(Ok(())) => error_response(status, detail),
        Ok(Err(e)) => error_response(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        Err(r) => r,
    }
}

/// How asking the run's supervisor went.
enum Relay {
    Answer(Reply),
    /// Nobody listens on the socket: refused (and journaled) as not live.
    NotLive(String),
    /// Reached, but no whole answer came: it may have acted and recorded it, so nothing is
    /// journaled here.
    Failed(Response<Body>),
}

/// Sends `request` to the supervisor at `sock`, waiting up to `budget` for its answer.
async fn relay(
    sock: &Path,
    request: &Request,
    budget: std::time::Duration,
    run: &RunId,
    verb: Name,
    uid: &str,
) -> Relay {
    match control::request(sock, request, budget).await {
        Ok(reply) => Relay::Answer(reply),
        Err(control::ClientError::NoAnswer { after, .. }) => {
            let detail = format!(
                "no answer from the supervisor within {} s; it may have acted — see GET /runs/{run}",
                after.as_secs()
            );
            tracing::warn!(RUN_ID = %run, VERB = verb.as_str(), PEER_UID = %uid, "{detail}");
            Relay::Failed(error_response(StatusCode::GATEWAY_TIMEOUT, detail))
        }
        Err(e @ control::ClientError::Connect { .. }) => Relay::NotLive(format!("run not supervised / not live: {e}")),
        Err(e) => {
            tracing::warn!(RUN_ID = %run, VERB = verb.as_str(), PEER_UID = %uid, error = %e, "verb without an answer");
            Relay::Failed(error_response(StatusCode::CONFLICT, format!("run not supervised / not live: {e}")))
        }
    }
}

/// Logs a verb asked of `run` in plain strings, so `journalctl RUN_ID=… TASK=… VERB=…` finds it.
/// For an operator-only verb, the pid of the API's own client: handed to the supervisor, which
/// refuses it when it descends from one of the run's tasks (the API is only a relay, and an agent
/// can reach it). `Err` (answered 403) when a local client cannot be placed: fail closed.
async fn sender_of(conn: Conn, verb: Name) -> Result<Option<u32>, String> {
    if verb.spec().sender != control::Sender::Operator {
        return Ok(None);
    }
    let found = tokio::task::spawn_blocking(move || conn.sender_pid()).await.unwrap_or_else(|e| Err(e.to_string()));
    found.map_err(|d| format!("{verb} refused: {d}; the operator's verbs need a sender the API can place"))
}

/// The refusal of an operator-only verb on `run` whose sender (`pid`) descends from the supervisor
/// of **another** live run of this home: an agent of run A may not resume run B or approve its
/// tool calls. The supervisors are child subreapers, so a task's descendants stay under theirs;
/// the named run's own supervisor judges its own tasks (`supervisor::verbs`). Names the other run,
/// and its task where the line of descent passes through the task's wrapper. Blocks (`/proc`).
fn inside_another_run(overview: &super::overview::Overview, verb: Name, run: &RunId, pid: u32) -> Option<String> {
    if !cfg!(target_os = "linux") {
        return None;
    }
    let supervisors = overview.live_supervisors();
    if supervisors.iter().all(|(r, _, _)| r == run) {
        return None;
    }
    let refuse = |why: String| Some(format!("{verb} refused: {why}: the operator decides this, not an agent"));
    // A sender whose line cannot be followed cannot be shown to be outside every run: refused.
    let Some(chain) = crate::os::peer::ancestry(pid) else {
        return refuse(format!("its sender (pid {pid}) cannot be placed: it is gone, or /proc does not tell"));
    };
    for (other, sup, live) in supervisors.iter().filter(|(r, _, _)| r != run) {
        // Index 0 is the sender itself (a supervisor is no agent).
        let Some(at) = chain.iter().position(|p| p == sup).filter(|at| *at > 0) else { continue };
        let tasks = crate::state::liveness::get(live).ok().flatten().map(|l| l.tasks).unwrap_or_default();
        let task = chain[..at].iter().find_map(|p| {
            tasks.iter().find(|(_, t)| u32::try_from(t.pgid).ok() == Some(*p)).map(|(id, _)| (*p, id.clone()))
        });
        let whose = match task {
            Some((root, t)) => format!("task {t}'s process {root}"),
            None => "a process of that run's".to_string(),
        };
        return refuse(format!("it comes from inside another run, {other} (pid {pid} descends from {whose})"));
    }
    None
}

/// `sender_of`, then `inside_another_run`: the sender's pid to hand to the named run's supervisor,
/// or the refusal (403).
async fn operator_sender(api: &Arc<Api>, conn: Conn, verb: Name, run: &RunId) -> Result<Option<u32>, String> {
    let pid = sender_of(conn, verb).await?;
    let Some(p) = pid else { return Ok(None) };
    let (a, r) = (api.clone(), run.clone());
    let inside = tokio::task::spawn_blocking(move || inside_another_run(&a.durable.overview, verb, &r, p))
        .await
        .unwrap_or_else(|e| Some(format!("{verb} refused: its sender could not be placed ({e})")));
    inside.map_or(Ok(pid), Err)
}

fn log_verb(run: &RunId, task: Option<&TaskId>, verb: Name, uid: &str, by: &str) {
    match task {
        Some(t) => {
            tracing::info!(RUN_ID = %run, TASK = t.as_str(), VERB = verb.as_str(), PEER_UID = %uid, by = %by, "verb")
        }
        None => tracing::info!(RUN_ID = %run, VERB = verb.as_str(), PEER_UID = %uid, by = %by, "verb"),
    }
}

/// The control-socket request for `verb` as asked; `None` when the verb is not one of this route.
fn request_of(verb: Name, task: Option<TaskId>, a: &Asked) -> Option<Request> {
    let act = match (verb, task) {
        (Name::Steer, Some(task)) => Act::Steer(control::Steer {
            task,
            msg: a.msg.clone().unwrap_or_default(),
            interrupt: a.interrupt.then_some(true),
        }),
        (Name::Kill, Some(task)) => Act::Kill(control::Kill { task }),
        (Name::Interrupt, Some(task)) => Act::Interrupt(control::Interrupt { task }),
        (Name::Retry, Some(task)) => Act::Retry(control::Retry { task }),
        (Name::Skip, Some(task)) => Act::Skip(control::Skip { task, reason: a.reason.clone().unwrap_or_default() }),
        (Name::Pause, _) => Act::Pause(control::Pause),
        (Name::Resume, _) => Act::Resume(control::Resume),
        (Name::Stop, _) => Act::Stop(control::Stop),
        (Name::End, _) => Act::End(control::End),
        (Name::Budget, _) => {
            Act::Budget(control::Budget { usd: a.usd.unwrap_or_default(), task: a.budget_task.clone() })
        }
        (Name::Steer | Name::Kill | Name::Interrupt | Name::Retry | Name::Skip, None) => return None,
        (Name::Status | Name::Ask | Name::Decide, _) => return None,
    };
    Some(Request::new(act, Some(a.by.clone())))
}

/// `POST /runs/:runId/tasks/:tid/approvals/:id {"decision":"allow"|"deny","message"?,"by"?}`: the
/// operator's decision on an asked tool call, carried to the supervisor (which records it only while
/// the approval is pending: 409 otherwise, 404 for an unknown id). Refusals found here are recorded
/// like any verb's.
pub async fn decide(
    api: Arc<Api>,
    run: RunId,
    task: TaskId,
    id: String,
    req: hyper::Request<super::ReqBody>,
    conn: Conn,
) -> Result<Response<Body>, Response<Body>> {
    let peer = conn.uid;
    let a = api.clone();
    let r = run.clone();
    let pointer = match super::blocking(move || a.durable.pointer(&r)).await? {
        Ok(p) => p,
        Err(e) => {
            crate::state::audit::untied(peer, run.as_str(), "decide", &e.to_string());
            return Err(super::durable_error(e));
        }
    };
    let journal = pointer.journal_path();
    let refused = |(status, detail): Refusal, by: Option<String>| {
        let rec = crate::state::audit::record(
            Verb::Other,
            Some(task.clone()),
            None,
            &by.unwrap_or_else(|| "api".into()),
            &format!("decide: {detail} ({})", status.as_u16()),
        );
        on_record(journal.clone(), rec, (status, detail))
    };
    let key = idempotency_key(req.headers());
    let key = match key {
        Ok(k) => k,
        Err(r) => return Err(refused(r, None).await),
    };
    let body = match json_body(req, &["decision", "message", "by"]).await {
        Ok(b) => b,
        Err(r) => return Err(refused(r, None).await),
    };
    let raw_by = body.get("by").and_then(Value::as_str).filter(|b| !b.is_empty()).map(crate::state::journal::clip_by);
    let by = match field_str(&body, "by") {
        Ok(b) => b.unwrap_or_else(|| "api".into()),
        Err(r) => return Err(refused(r, raw_by).await),
    };
    if by.is_empty() || by.chars().count() > crate::state::journal::MAX_BY {
        return Err(refused(bad("field by must be 1 to 64 characters"), None).await);
    }
    let allow = match field_str(&body, "decision") {
        Ok(Some(d)) if d == "allow" => true,
        Ok(Some(d)) if d == "deny" => false,
        Ok(_) => return Err(refused(bad("field decision is required: \"allow\" or \"deny\""), Some(by)).await),
        Err(r) => return Err(refused(r, Some(by)).await),
    };
    let message = match field_str(&body, "message") {
        Ok(m) => m.filter(|m| !m.trim().is_empty()),
        Err(r) => return Err(refused(r, Some(by)).await),
    };
    if message.as_ref().is_some_and(|m| m.len() > crate::state::journal::MAX_MSG) {
        return Err(refused(bad("field message is longer than 64 KiB"), Some(by)).await);
    }
    if pointer.plane == Plane::Dynwf {
        let detail = format!("run {run} is a DynWF run: its tool calls are not asked of harness");
        return Err(refused((StatusCode::CONFLICT, detail), Some(by)).await);
    }
    tracing::info!(RUN_ID = %run, TASK = task.as_str(), VERB = "decide", APPROVAL = %id, by = %by, "decision");
    let sock = api.durable.home.socket_path(&run);
    let for_pid = match operator_sender(&api, conn, Name::Decide, &run).await {
        Ok(pid) => pid,
        Err(detail) => return Err(refused((StatusCode::FORBIDDEN, detail), Some(by)).await),
    };
    let request =
        Request::new(Act::Decide(control::Decide { task: task.clone(), id, allow, message }), Some(by.clone()))
            .relayed_for(for_pid)
            .keyed(key);
    let reply = match control::request(&sock, &request, timeouts::VERB_ANSWER).await {
        Ok(reply) => reply,
        Err(control::ClientError::NoAnswer { after, .. }) => {
            return Err(error_response(
                StatusCode::GATEWAY_TIMEOUT,
                format!(
                    "no answer from the supervisor within {} s; it may have acted — see GET /runs/{run}/approvals",
                    after.as_secs()
                ),
            ));
        }
        Err(e @ control::ClientError::Connect { .. }) => {
            let detail = format!("run not supervised / not live: {e}; its approvals expired with its supervisor");
            return Err(refused((StatusCode::CONFLICT, detail), Some(by)).await);
        }
        Err(e) => return Err(error_response(StatusCode::CONFLICT, format!("run not supervised / not live: {e}"))),
    };
    answered(reply)
}

/// An inbox refusal as its HTTP answer.
fn inbox_error(e: crate::state::inbox::InboxError) -> Response<Body> {
    use crate::state::inbox::InboxError;
    let status = match &e {
        InboxError::Invalid(_) => StatusCode::BAD_REQUEST,
        InboxError::UnknownTask(_) => StatusCode::NOT_FOUND,
        InboxError::Refused(_) => StatusCode::CONFLICT,
        InboxError::Io { .. } | InboxError::Journal(_) | InboxError::Plan(_) | InboxError::Unrecorded(_) => {
            tracing::error!(error = %e, "inbox append failed");
            StatusCode::INTERNAL_SERVER_ERROR
        }
    };
    error_response(status, e.to_string())
}
