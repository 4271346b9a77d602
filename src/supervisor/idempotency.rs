//! Verbs sent with an `Idempotency-Key` (`spec/CONTROL.md`): a repeat of a key is answered with the
//! first answer and never carried out again — so a client that retries after a lost answer (a 504
//! through a relay, say) steers once. The journal is the memory: `asked` before the verb is carried
//! out, `answered` with its answer once it has one; a supervisor restarted in between refuses a
//! repeat of that key, saying its outcome is not on the record, rather than guess.

use super::Scheduler;
use crate::control::{Refusal, RefusalKind, Reply, Request, Sketch};
use crate::state::journal::{Body, IdempotencyRecord, Record};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;

/// Keys being answered now (asked, and no answer yet), by this process.
pub(super) type InFlight = Arc<Mutex<HashSet<String>>>;

impl Scheduler {
    /// For a keyed request: the first answer of its key (sent here, `None` returned), or a reply
    /// channel that journals the answer before passing it on. Requests without a key pass as they are.
    pub(super) fn idempotent(&self, req: &Request, reply: oneshot::Sender<Reply>) -> Option<oneshot::Sender<Reply>> {
        let Some(key) = req.idempotency_key.clone() else { return Some(reply) };
        let first = match self.view() {
            Ok(v) => v.idempotency.get(&key).cloned(),
            Err(e) => {
                let r = Refusal::unrecorded(format!("the journal cannot be read, nothing was done: {e}"));
                let _ = reply.send(r.into());
                return None;
            }
        };
        let refuse = |detail: String, reply: oneshot::Sender<Reply>| {
            let r = Sketch::of(req).journal(&self.ctx.journal, Refusal::new(RefusalKind::State, detail));
            let _ = reply.send(r.into());
        };
        if let Some(k) = &first
            && (k.verb != req.verb() || k.task.as_ref() != req.task())
        {
            let was = match &k.task {
                Some(t) => format!("{} of task {t}", k.verb),
                None => k.verb.clone(),
            };
            refuse(
                format!("Idempotency-Key {key:?} was first used for {was}: a key names one request; use a new key"),
                reply,
            );
            return None;
        }
        match first.map(|k| k.answer) {
            Some(Some(answer)) => {
                match serde_json::from_value::<Reply>(answer) {
                    Ok(first) => {
                        tracing::info!(RUN_ID = %self.ctx.run_id, VERB = req.verb(), key = %key, "a repeated Idempotency-Key: its first answer");
                        let _ = reply.send(first);
                    }
                    Err(e) => refuse(format!("Idempotency-Key {key:?}: its first answer is unreadable ({e})"), reply),
                }
                return None;
            }
            Some(None) if self.in_flight.lock().unwrap_or_else(|p| p.into_inner()).contains(&key) => {
                refuse(format!("Idempotency-Key {key:?} is being answered now: ask again for its answer"), reply);
                return None;
            }
            Some(None) => {
                refuse(
                    format!(
                        "Idempotency-Key {key:?} was asked before the supervisor restarted and its outcome is not on the record: see the run's journal"
                    ),
                    reply,
                );
                return None;
            }
            None => {}
        }
        let rec = |answer: Option<serde_json::Value>| {
            Record::new(Body::Idempotency(IdempotencyRecord {
                key: key.clone(),
                verb: req.verb().to_string(),
                task: req.task().cloned(),
                answer,
            }))
        };
        if let Err(e) = self.ctx.journal.append(&rec(None)) {
            let _ = reply.send(Refusal::unrecorded(format!("journal append failed, nothing was done: {e}")).into());
            return None;
        }
        self.in_flight.lock().unwrap_or_else(|p| p.into_inner()).insert(key.clone());
        let (tx, rx) = oneshot::channel::<Reply>();
        let (ctx, in_flight, answered) = (self.ctx.clone(), self.in_flight.clone(), rec(None));
        tokio::spawn(async move {
            let Ok(answer) = rx.await else {
                in_flight.lock().unwrap_or_else(|p| p.into_inner()).remove(&key);
                return;
            };
            let mut answered = answered;
            if let Body::Idempotency(i) = &mut answered.body {
                i.answer = serde_json::to_value(&answer).ok();
            }
            let ctx2 = ctx.clone();
            let written = tokio::task::spawn_blocking(move || ctx2.journal.append(&answered)).await;
            if !matches!(written, Ok(Ok(_))) {
                tracing::error!(RUN_ID = %ctx.run_id, key = %key, "the answer of a keyed verb could not be journaled");
            }
            in_flight.lock().unwrap_or_else(|p| p.into_inner()).remove(&key);
            let _ = reply.send(answer);
        });
        Some(tx)
    }
}
