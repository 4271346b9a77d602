//! The relay's answers to a fleet API (`harness.rpc.<host>`, core NATS request-reply): each
//! request is an HTTP request of this home's API carried in a message — method and path in
//! headers, the body as the payload — and is answered by that API's own code in this process
//! (`api::answer_relayed`: a verb goes to the run's supervisor socket or DynWF inbox and is
//! journaled there, as any verb is). The answer's status, headers and body go back unchanged;
//! a body past what one message holds is cut at a line end, saying so.

use crate::api::{self, Api};
use crate::fleet::header;
use bytes::Bytes;
use futures_util::StreamExt;
use http_body_util::BodyExt;
use std::sync::Arc;

/// Reads (a diff, a review: git on the relay's blocking threads, which a request given up by the
/// fleet cannot stop) answered at once: the rest wait their turn, and the home's mirroring, on the
/// same threads, is never starved by them. Verbs are not held back.
const READS_AT_ONCE: usize = 6;

/// Answers requests on `subject` until the subscription ends.
pub async fn serve(client: async_nats::Client, subject: String, api: Arc<Api>) -> Result<(), String> {
    let mut sub = client
        .queue_subscribe(subject.clone(), "relay".into())
        .await
        .map_err(|e| format!("cannot subscribe to {subject}: {e}"))?;
    let reads = Arc::new(tokio::sync::Semaphore::new(READS_AT_ONCE));
    while let Some(msg) = sub.next().await {
        let (client, api, reads) = (client.clone(), api.clone(), reads.clone());
        tokio::spawn(async move {
            let Some(reply) = msg.reply.clone() else { return };
            let read = msg.headers.as_ref().and_then(|h| h.get(header::METHOD)).is_none_or(|m| m.as_str() == "GET");
            let _turn = match read {
                true => reads.acquire_owned().await.ok(),
                false => None,
            };
            let (headers, body) = answer(&client, api, msg).await;
            if let Err(e) = client.publish_with_headers(reply, headers, body).await {
                tracing::warn!(error = %e, "a relayed answer could not be sent");
            }
        });
    }
    Err(format!("the subscription to {subject} ended"))
}

/// One request's answer: its headers (status first) and body.
async fn answer(
    client: &async_nats::Client,
    api: Arc<Api>,
    msg: async_nats::Message,
) -> (async_nats::HeaderMap, Bytes) {
    let h = msg.headers.clone().unwrap_or_default();
    let get = |n: &str| h.get(n).map(|v| v.as_str().to_string());
    let (Some(method), Some(path)) = (get(header::METHOD), get(header::PATH)) else {
        return refusal(400, "a relayed request needs Harness-Method and Harness-Path");
    };
    let mut req = hyper::Request::builder().method(method.as_str()).uri(path.as_str());
    for name in ["content-type", "idempotency-key"] {
        if let Some(v) = get(name) {
            req = req.header(name, v);
        }
    }
    let req = match req.body(api::req_bytes(msg.payload.clone())) {
        Ok(r) if path.starts_with('/') => r,
        _ => return refusal(400, &format!("not a request: {method} {path}")),
    };
    let resp = api::answer_relayed(api, req).await;
    let (parts, body) = resp.into_parts();
    let body = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    let mut out = async_nats::HeaderMap::new();
    out.insert(header::STATUS, parts.status.as_u16().to_string().as_str());
    for (name, value) in &parts.headers {
        if let Ok(v) = value.to_str() {
            out.insert(name.as_str(), v);
        }
    }
    // What one message holds, less room for the headers.
    let room = (client.server_info().max_payload).saturating_sub(64 * 1024).max(64 * 1024);
    if body.len() > room {
        out.insert("harness-truncated", "true");
        return (out, cut(&body, room));
    }
    (out, body)
}

/// `body` cut to at most `room` bytes at a line end, with a last line saying so.
fn cut(body: &[u8], room: usize) -> Bytes {
    let note = format!(
        "# harness: the answer is cut at {room} bytes to fit one message of the fleet's NATS; ask the host's own API for all of it\n"
    );
    let keep = room.saturating_sub(note.len());
    let end = memchr::memrchr(b'\n', &body[..keep]).map_or(0, |i| i + 1);
    let mut out = body[..end].to_vec();
    out.extend_from_slice(note.as_bytes());
    Bytes::from(out)
}

fn refusal(status: u16, detail: &str) -> (async_nats::HeaderMap, Bytes) {
    let mut h = async_nats::HeaderMap::new();
    h.insert(header::STATUS, status.to_string().as_str());
    h.insert("content-type", "application/json");
    let body = serde_json::to_vec(&crate::views::Answer { ok: false, detail: Some(detail.into()) }).unwrap_or_default();
    (h, Bytes::from(body))
}
