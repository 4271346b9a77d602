//! The POST verbs — steer, kill, pause, resume — carried to whoever holds the run: the supervisor's
//! control socket for a standalone run, the inbox for a DynWF run. The API decides nothing about
//! run state: it checks the request, forwards it, and maps the answer (the supervisor's 409s pass
//! through with their detail). No supervisor → 409 "run not supervised / not live".

use super::{Api, Body, error_response, json_response};
use crate::ids::{RunId, TaskId};
use crate::journal::Verb;
use crate::registry::Plane;
use crate::supervisor::control::{self, Reply, Request};
use crate::timeouts;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::{Response, StatusCode};
use serde_json::{Value, json};
use std::sync::Arc;

/// Largest request body.
pub const MAX_BODY: usize = 64 * 1024;

/// Reads and checks a JSON body: `application/json` only (415), at most 64 KiB (413), an object
/// with only the `allowed` fields (400 naming the field). An empty body is `{}`.
pub async fn json_body(
    req: hyper::Request<Incoming>,
    allowed: &[&str],
) -> Result<serde_json::Map<String, Value>, Response<Body>> {
    let declared = req
        .headers()
        .get(hyper::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BODY as u64) {
        return Err(error_response(StatusCode::PAYLOAD_TOO_LARGE, format!("body is larger than {MAX_BODY} bytes")));
    }
    let content_type = req.headers().get(hyper::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).map(str::to_string);
    let body = http_body_util::Limited::new(req.into_body(), MAX_BODY).collect().await;
    let bytes = match body {
        Ok(b) => b.to_bytes(),
        Err(e) if e.downcast_ref::<http_body_util::LengthLimitError>().is_some() => {
            return Err(error_response(StatusCode::PAYLOAD_TOO_LARGE, format!("body is larger than {MAX_BODY} bytes")));
        }
        Err(e) => return Err(error_response(StatusCode::BAD_REQUEST, format!("cannot read the body: {e}"))),
    };
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(serde_json::Map::new());
    }
    let is_json = content_type.as_deref().is_some_and(|c| {
        let mime = c.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
        mime == "application/json"
    });
    if !is_json {
        return Err(error_response(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!("Content-Type must be application/json (got {})", content_type.as_deref().unwrap_or("none")),
        ));
    }
    let v: Value = serde_json::from_slice(&bytes)
        .map_err(|e| error_response(StatusCode::BAD_REQUEST, format!("body is not JSON: {e}")))?;
    let Value::Object(map) = v else {
        return Err(error_response(StatusCode::BAD_REQUEST, "body must be a JSON object"));
    };
    if let Some(k) = map.keys().find(|k| !allowed.contains(&k.as_str())) {
        let k: String = k.chars().take(64).collect();
        return Err(error_response(
            StatusCode::BAD_REQUEST,
            format!("unknown field {k:?} (allowed: {})", allowed.join(", ")),
        ));
    }
    Ok(map)
}

fn field_str(map: &serde_json::Map<String, Value>, name: &str) -> Result<Option<String>, Response<Body>> {
    // Absent is absent; null is not a string (the spec says string).
    match map.get(name) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(error_response(StatusCode::BAD_REQUEST, format!("field {name} must be a string"))),
    }
}

/// Handles one verb. `task` for steer/kill.
pub async fn verb(
    api: Arc<Api>,
    run: RunId,
    task: Option<TaskId>,
    verb: Verb,
    req: hyper::Request<Incoming>,
) -> Result<Response<Body>, Response<Body>> {
    let allowed: &[&str] = if verb == Verb::Steer { &["msg", "interrupt", "by"] } else { &["by"] };
    let body = json_body(req, allowed).await?;
    let by = field_str(&body, "by")?.unwrap_or_else(|| "api".into());
    // Characters, as JSON Schema's maxLength counts them (not bytes).
    if by.is_empty() || by.chars().count() > crate::journal::MAX_BY {
        return Err(error_response(StatusCode::BAD_REQUEST, "field by must be 1 to 64 characters"));
    }
    let (msg, interrupt) = if verb == Verb::Steer {
        let msg = field_str(&body, "msg")?.filter(|m| !m.trim().is_empty()).ok_or_else(|| {
            error_response(StatusCode::BAD_REQUEST, "field msg is required and must not be blank: the message to queue")
        })?;
        let interrupt = match body.get("interrupt") {
            None => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err(error_response(StatusCode::BAD_REQUEST, "field interrupt must be a boolean")),
        };
        (Some(msg), interrupt)
    } else {
        (None, false)
    };
    let a = api.clone();
    let r = run.clone();
    let pointer = super::blocking(move || a.durable.pointer(&r)).await?.map_err(super::durable_error)?;
    let live_path = pointer.liveness_path();
    let kill_grace =
        super::blocking(move || crate::liveness::get(&live_path).ok().flatten().and_then(|l| l.kill_grace_ms))
            .await?
            .map_or(crate::supervisor::Options::default().kill_grace, std::time::Duration::from_millis);
    // Plain strings, so `journalctl RUN_ID=… TASK=… VERB=…` finds the line.
    match &task {
        Some(t) => tracing::info!(RUN_ID = %run, TASK = t.as_str(), VERB = verb.as_str(), by = %by, "verb"),
        None => tracing::info!(RUN_ID = %run, VERB = verb.as_str(), by = %by, "verb"),
    }
    if pointer.plane == Plane::Dynwf {
        let task2 = task.clone();
        let result = super::blocking(move || crate::inbox::append(&pointer, verb, task2, msg, interrupt, &by)).await?;
        return match result {
            Ok(entry) => Ok(json_response(
                StatusCode::OK,
                &json!({"ok": true, "queued": entry, "detail": "queued in the DynWF inbox: taken at the next task boundary"}),
            )),
            Err(e) => Err(inbox_error(e)),
        };
    }
    let sock = api.durable.home.socket_path(&run);
    let by = Some(by);
    let need_task = || task.clone().ok_or_else(|| error_response(StatusCode::BAD_REQUEST, "this verb needs a task"));
    let request = match verb {
        Verb::Steer => Request::Steer {
            task: need_task()?,
            msg: msg.unwrap_or_default(),
            interrupt: interrupt.then_some(true),
            by,
        },
        Verb::Kill => Request::Kill { task: need_task()?, by },
        Verb::Pause => Request::Pause { by },
        Verb::Resume => Request::Resume { by },
        Verb::Stop => Request::Stop { by },
    };
    // A kill answers once the task's group is gone: the run's kill grace plus a margin.
    let budget = match verb {
        Verb::Kill => kill_grace + timeouts::KILL_ANSWER_MARGIN,
        _ => timeouts::VERB_ANSWER,
    };
    let reply = control::request(&sock, &request, budget).await.map_err(|e| match e {
        control::ClientError::NoAnswer { after, .. } => error_response(
            StatusCode::GATEWAY_TIMEOUT,
            format!(
                "no answer from the supervisor within {} s; it may have acted — see GET /runs/{run}",
                after.as_secs()
            ),
        ),
        e => error_response(StatusCode::CONFLICT, format!("run not supervised / not live: {e}")),
    })?;
    match reply {
        Reply::Done(answer) => Ok(json_response(StatusCode::OK, &answer)),
        Reply::Refused(r) => {
            Err(error_response(StatusCode::from_u16(r.status).unwrap_or(StatusCode::CONFLICT), r.detail))
        }
    }
}

/// An inbox refusal as its HTTP answer.
fn inbox_error(e: crate::inbox::InboxError) -> Response<Body> {
    use crate::inbox::InboxError;
    let status = match &e {
        InboxError::Invalid(_) => StatusCode::BAD_REQUEST,
        InboxError::UnknownTask(_) => StatusCode::NOT_FOUND,
        InboxError::Refused(_) => StatusCode::CONFLICT,
        InboxError::Io { .. } | InboxError::Journal(_) | InboxError::Plan(_) => {
            tracing::error!(error = %e, "inbox append failed");
            StatusCode::INTERNAL_SERVER_ERROR
        }
    };
    error_response(status, e.to_string())
}
