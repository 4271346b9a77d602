//! Crash recovery: what a supervisor does on start before it dispatches anything. The journal wins:
//! orphaned process groups of a dead supervisor are killed, committed tasks are skipped, a commit
//! that exists without its `committed` record gets the record (never a second commit), a turn that
//! was in flight is re-dispatched (resumed with its session when it has one), and a task past its
//! turn continues at its next stage. Liveness is rebuilt from what actually runs.

use super::pipeline::{Ctx, Start};
use super::{Scheduler, SupervisorError, kill};
use crate::exit;
use crate::ids::TaskId;
use crate::state::journal::{Record, TaskState};
use crate::state::liveness;
use crate::timeouts;
use std::path::{Path, PathBuf};

impl Scheduler {
    /// Crash recovery: the journal wins. Orphaned groups of a dead supervisor are killed; committed
    /// tasks are skipped; a commit that exists without its `committed` record gets the record; a
    /// turn that was in flight is re-dispatched (resumed with its session when it has one); a task
    /// past its turn continues at its next stage. Liveness is rebuilt from what actually runs.
    pub(super) async fn recover(&mut self, live: Option<&Path>, sock: Option<PathBuf>) -> Result<(), SupervisorError> {
        let ctx = self.ctx.clone();
        if let Some(path) = live {
            if let Ok(Some(old)) = liveness::get(path) {
                for (task, t) in &old.tasks {
                    // A group whose leader (the wrapper) is dead but which still has members is the
                    // wrapper's leftovers (a live group id is never handed to another process);
                    // a live leader must still look like a wrapper (not a recycled pid).
                    if orphaned_turn(t, &ctx.wrappers, &ctx.run_id) {
                        tracing::warn!(RUN_ID = %ctx.run_id, TASK = %task, pgid = t.pgid, "killing an orphaned turn of a previous supervisor");
                        kill::kill_group(t.pgid, ctx.kill_grace).await;
                    }
                }
            }
            // Turns of a dead supervisor that liveness never recorded: found by their command line,
            // which names this run's prompt files.
            let prompts = format!("{}/", ctx.pointer.prompts_dir().display());
            for pgid in kill::groups_mentioning(&prompts) {
                tracing::warn!(RUN_ID = %ctx.run_id, pgid, "killing an unrecorded turn of a previous supervisor");
                kill::kill_group(pgid, ctx.kill_grace).await;
            }
            let paused = self.paused;
            liveness::update(path, &ctx.run_id, |l| {
                l.sock = sock.clone();
                l.supervisor_pid = Some(std::process::id() as i32);
                l.paused = paused;
                l.kill_grace_ms = Some(ctx.kill_grace.as_millis() as u64);
                l.tasks.clear();
            })?;
        }
        let view = self.view()?;
        // Asked tool calls of a dead supervisor's turns: nobody can answer them any more.
        for a in view.approvals.values().filter(|a| a.state == crate::state::journal::ApprovalState::Pending) {
            tracing::warn!(RUN_ID = %ctx.run_id, TASK = %a.task, APPROVAL = %a.id, "expiring an approval of a previous supervisor");
            super::approvals::expire(
                &ctx,
                &a.task,
                &a.id,
                "the supervisor restarted before a decision; the turn is resumed",
            );
        }
        for task in &ctx.plan.tasks {
            let Some(t) = view.tasks.get(&task.id) else { continue };
            match t.state {
                TaskState::Committed | TaskState::Halted | TaskState::Skipped => {}
                TaskState::Gated | TaskState::Reviewed => match found_commit(&ctx, &task.id).await {
                    Found::OnRunBranch(sha) => {
                        let mut r = Record::task(&task.id, TaskState::Committed);
                        r.sha = Some(sha);
                        r.detail = Some("recovered: the commit existed, its record did not".into());
                        ctx.journal.append(&r.into())?;
                    }
                    Found::InTaskWorktree => {
                        self.resume_at.insert(task.id.clone(), Start::Integrate);
                    }
                    Found::Nowhere if t.state == TaskState::Gated && task.review => {
                        self.resume_at.insert(task.id.clone(), Start::Review);
                    }
                    Found::Nowhere => {
                        self.resume_at.insert(task.id.clone(), Start::Commit);
                    }
                },
                TaskState::Implemented => {
                    self.resume_at.insert(task.id.clone(), Start::Gate);
                }
                TaskState::Leased => {
                    let mut r = Record::task(&task.id, TaskState::Halted);
                    r.rc = Some(exit::LOST);
                    r.detail = Some("turn lost: the supervisor stopped while it ran".into());
                    r.session_id = t.session_id.clone();
                    ctx.journal.append(&r.into())?;
                    let start = match &t.session_id {
                        Some(sid) => Start::Turn {
                            prompt: format!(
                                "The previous turn was interrupted (the supervisor restarted). Continue the task:\n\n{}",
                                task.prompt
                            ),
                            resume: Some(sid.clone()),
                            note: Some("recovery: resumed after a supervisor restart".into()),
                        },
                        None => Start::Turn {
                            prompt: task.prompt.clone(),
                            resume: None,
                            note: Some("recovery: re-dispatched after a supervisor restart".into()),
                        },
                    };
                    self.resume_at.insert(task.id.clone(), start);
                }
            }
        }
        Ok(())
    }
}

/// Whether the turn liveness recorded for a task is still there to be killed: its group has members
/// and is ours — its leader (the wrapper) dead but the group alive (a live group id is never handed
/// to another process), or a live leader that still looks like a step of this run (not a recycled
/// pid).
pub(super) fn orphaned_turn(t: &liveness::TaskLiveness, wrappers: &Path, run: &crate::ids::RunId) -> bool {
    let leader_dead = !liveness::pid_alive(t.pid);
    kill::group_alive(t.pgid) && (leader_dead || looks_like_ours(t.pid, wrappers, run))
}

/// A pid that is one of this run's steps: a wrapper script of ours (by its full path) or a gate or
/// setup shell carrying the run's step marker — not a recycled pid of something else that happens to
/// be a shell.
fn looks_like_ours(pid: i32, wrappers: &Path, run: &crate::ids::RunId) -> bool {
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else { return false };
    let marker = super::pipeline::step_marker_prefix(run);
    cmdline.split(|&b| b == 0).any(|arg| {
        let arg = String::from_utf8_lossy(arg);
        arg.starts_with(&marker)
            || crate::engine::Adapter::ALL.iter().any(|a| Path::new(arg.as_ref()) == wrappers.join(a.wrapper()))
    })
}

/// Where a task past its gate has its commit, if anywhere.
enum Found {
    /// On the run's branch: the task is committed (its record was lost).
    OnRunBranch(String),
    /// In the task's worktree, not integrated yet.
    InTaskWorktree,
    Nowhere,
}

/// Looks for this run instance's commit of the task by its trailers: on the run's branch above the
/// run's start first (after any commit a dead supervisor started has finished: its index lock is
/// waited for), then in its worktree above its base. Git runs on the blocking pool.
async fn found_commit(ctx: &Ctx, task: &TaskId) -> Found {
    let (wt, tree) = (ctx.pointer.worktree.clone(), ctx.tree(task));
    let (run, tid, nonce, start) = (ctx.run_id.to_string(), task.to_string(), ctx.nonce.clone(), ctx.start_sha.clone());
    let base = ctx.journal.view().ok().and_then(|v| v.tasks.get(task).and_then(|t| t.base.clone()));
    tokio::task::spawn_blocking(move || {
        crate::os::git::wait_index_unlocked(&wt, timeouts::INDEX_LOCK_WAIT);
        let owner = crate::os::git::Owner { run: &run, task: &tid, nonce: nonce.as_deref(), since: start.as_deref() };
        if let Some(sha) = crate::os::git::find_own_commit(&wt, &owner) {
            return Found::OnRunBranch(sha);
        }
        if let Some(t) = &tree {
            crate::os::worktree::settle(t);
        }
        let in_tree = crate::os::git::Owner { since: base.as_deref(), ..owner };
        match tree {
            Some(t) if t.path.exists() && crate::os::git::find_own_commit(&t.path, &in_tree).is_some() => {
                Found::InTaskWorktree
            }
            _ => Found::Nowhere,
        }
    })
    .await
    .unwrap_or(Found::Nowhere)
}
