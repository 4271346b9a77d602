//! Tool calls asked of the operator (plan `approvals: "ask"`): claude asks over the live channel
//! (`can_use_tool`, live tasks) or through our MCP permission tool (`harness approval-mcp`, batch
//! tasks). Each ask is journaled (`approval` record, `pending`) unless a plan rule (`approve`) or the
//! plan itself (approvals off) decides it at once; the operator decides it over the API or CLI; the
//! plan's `approval_timeout` denies it (by `timeout`); a turn that ends first leaves it `expired`.
//!
//! The journal's state is the only guard against a second decision (claude keeps the first answer
//! and silently drops any later one): a decision is recorded under the journal's lock only while the
//! approval is `pending`, and only then delivered to whoever waits for it.

use super::live::LiveCmd;
use super::pipeline::Ctx;
use crate::control::{Refusal, Reply};
use crate::ids::TaskId;
use crate::state::journal::{ApprovalRecord, ApprovalState, ApprovalView, JournalError};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

/// An operator's (or a rule's, or the clock's) decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Decision {
    pub allow: bool,
    pub message: Option<String>,
    pub by: String,
}

impl Decision {
    /// Claude's permission answer. Never `updatedPermissions`: that writes a rule into the user's
    /// repository. A deny always carries a message (claude refuses a deny without one).
    pub fn answer(&self) -> Value {
        if self.allow {
            json!({"behavior": "allow"})
        } else {
            let message = self.message.clone().unwrap_or_else(|| format!("Denied by {}.", self.by));
            json!({"behavior": "deny", "message": message})
        }
    }
}

/// Who waits for a pending approval's decision.
#[derive(Debug)]
pub(crate) enum Waiter {
    /// A live turn's driver: the decision is written on its channel (`request_id` is claude's).
    Live { tx: mpsc::Sender<LiveCmd> },
    /// The MCP permission tool, waiting on the control socket.
    Socket { reply: oneshot::Sender<Reply> },
}

/// A pending approval held by the supervisor.
#[derive(Debug)]
pub(crate) struct Held {
    pub task: TaskId,
    pub waiter: Waiter,
}

/// What became of an ask at once.
pub(crate) enum Asked {
    /// Decided without asking (a rule, or approvals are off): answer now.
    Now(Decision),
    /// Journaled `pending`: the decision comes later.
    Pending,
}

fn record(id: &str, task: &TaskId, state: ApprovalState) -> ApprovalRecord {
    ApprovalRecord {
        id: id.into(),
        task: task.clone(),
        state,
        tool: None,
        input: None,
        via: None,
        by: None,
        message: None,
        detail: None,
    }
}

/// Handles an ask of `task`'s turn: decided now (approvals off → denied by `plan`; an `approve` rule
/// → allowed by `policy`), or journaled `pending` with `waiter` held for the decision (held before the
/// record exists, so a decision is never refused for a waiter not registered yet). Either way it is
/// on the record before claude hears.
pub(crate) fn ask(
    ctx: &Ctx,
    task: &TaskId,
    id: &str,
    (tool, input): (&str, &Value),
    via: &str,
    waiter: Waiter,
) -> Result<Asked, JournalError> {
    let t = ctx.plan.task(task);
    let asks = t.is_some_and(|t| ctx.plan.asks(t));
    let rule = if asks { crate::rules::first_match(ctx.plan.approve_rules(), tool, input) } else { None };
    let decided = match (asks, rule) {
        (false, _) => Some(Decision {
            allow: false,
            message: Some(format!(
                "The tool {tool} is not allowed for this task: its allowed tools do not include it and the plan's approvals are off."
            )),
            by: "plan".into(),
        }),
        (true, Some(_)) => Some(Decision { allow: true, message: None, by: "policy".into() }),
        (true, None) => None,
    };
    let mut rec = record(
        id,
        task,
        decided
            .as_ref()
            .map_or(ApprovalState::Pending, |d| if d.allow { ApprovalState::Allowed } else { ApprovalState::Denied }),
    );
    rec.tool = Some(tool.into());
    rec.input = Some(input.clone());
    rec.via = Some(via.into());
    if let Some(d) = &decided {
        rec.by = Some(d.by.clone());
        rec.message = d.message.clone();
        rec.detail = rule.map(|r| format!("rule {r}"));
    }
    if decided.is_none() {
        ctx.approvals
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id.to_string(), Held { task: task.clone(), waiter });
    }
    if let Err(e) = tokio::task::block_in_place(|| ctx.journal.append(&rec.into())) {
        ctx.approvals.lock().unwrap_or_else(|p| p.into_inner()).remove(id);
        return Err(e);
    }
    tracing::info!(RUN_ID = %ctx.run_id, TASK = %task, APPROVAL = id, tool, state = ?decided.as_ref().map(|d| d.allow), "approval asked");
    Ok(match decided {
        Some(d) => Asked::Now(d),
        None => Asked::Pending,
    })
}

/// Records `decision` on a pending approval and hands it to whoever waits. 404 unknown; 409 when it
/// is not pending any more (decided, expired) or nobody waits for it (its turn is gone).
pub(crate) fn decide(ctx: &Ctx, task: &TaskId, id: &str, decision: &Decision) -> Result<ApprovalView, Refusal> {
    let state = if decision.allow { ApprovalState::Allowed } else { ApprovalState::Denied };
    let mut rec = record(id, task, state);
    rec.by = Some(decision.by.clone());
    rec.message = decision.message.clone();
    let mut why: Option<Refusal> = None;
    let appended = tokio::task::block_in_place(|| {
        ctx.journal.append_checked(&rec.into(), |v| {
            why = match v.approvals.get(id) {
                None => Some(Refusal::unknown_task(format!("run {} has no approval {id}", ctx.run_id))),
                Some(a) if &a.task != task => {
                    Some(Refusal::unknown_task(format!("approval {id} is task {}'s, not {task}'s", a.task)))
                }
                Some(a) if a.state != ApprovalState::Pending => Some(Refusal::by_state(format!(
                    "approval {id} is already {} (by {})",
                    a.state.as_str(),
                    a.by.as_deref().unwrap_or("?")
                ))),
                Some(_) if !ctx.approvals.lock().unwrap_or_else(|p| p.into_inner()).contains_key(id) => {
                    Some(Refusal::by_state(format!("approval {id}: its turn is gone (nobody waits for it)")))
                }
                Some(_) => None,
            };
            match &why {
                Some(r) => Err(JournalError::Invalid(r.detail.clone())),
                None => Ok(()),
            }
        })
    });
    match (appended, why) {
        (Ok(_), _) => {}
        (Err(_), Some(r)) => return Err(r),
        (Err(e), None) => return Err(Refusal::unrecorded(format!("journal append failed, nothing was decided: {e}"))),
    }
    deliver(ctx, id, decision);
    let view = ctx.journal.view().ok().and_then(|v| v.approvals.get(id).cloned());
    view.ok_or_else(|| Refusal::unrecorded(format!("approval {id} decided but not found in the journal")))
}

/// Hands a recorded decision to the approval's waiter (and forgets it).
pub(crate) fn deliver(ctx: &Ctx, id: &str, decision: &Decision) {
    let held = ctx.approvals.lock().unwrap_or_else(|p| p.into_inner()).remove(id);
    match held.map(|h| h.waiter) {
        Some(Waiter::Live { tx })
            if tx.try_send(LiveCmd::Decided { id: id.into(), decision: decision.clone() }).is_err() =>
        {
            tracing::warn!(RUN_ID = %ctx.run_id, APPROVAL = id, "the live turn is gone: decision not delivered");
        }
        Some(Waiter::Live { .. }) => {}
        Some(Waiter::Socket { reply }) => {
            let _ = reply.send(Reply::Done(crate::control::Answer::Ask {
                decision: decision.answer(),
                id: id.into(),
                ok: crate::control::True,
            }));
        }
        None => {}
    }
}

/// The approval timed out: denied by `timeout` if it is still pending (else someone decided first).
/// Returns the decision to deliver, if this call made it.
pub(crate) fn time_out(ctx: &Ctx, task: &TaskId, id: &str) -> Option<Decision> {
    let d = Decision {
        allow: false,
        message: Some(format!(
            "No decision within {} s: the tool call is denied.",
            ctx.plan.approval_timeout().as_secs()
        )),
        by: "timeout".into(),
    };
    let mut rec = record(id, task, ApprovalState::Denied);
    rec.by = Some(d.by.clone());
    rec.message = d.message.clone();
    let ok = tokio::task::block_in_place(|| {
        ctx.journal.append_checked(&rec.into(), |v| match v.approvals.get(id) {
            Some(a) if a.state == ApprovalState::Pending => Ok(()),
            _ => Err(JournalError::Invalid("decided already".into())),
        })
    });
    ok.is_ok().then_some(d)
}

/// A pending approval whose turn is gone: journaled `expired` (if still pending) and forgotten.
pub(crate) fn expire(ctx: &Ctx, task: &TaskId, id: &str, detail: &str) {
    ctx.approvals.lock().unwrap_or_else(|p| p.into_inner()).remove(id);
    let mut rec = record(id, task, ApprovalState::Expired);
    rec.by = Some("supervisor".into());
    rec.detail = Some(detail.into());
    let _ = tokio::task::block_in_place(|| {
        ctx.journal.append_checked(&rec.into(), |v| match v.approvals.get(id) {
            Some(a) if a.state == ApprovalState::Pending => Ok(()),
            _ => Err(JournalError::Invalid("not pending".into())),
        })
    });
}
