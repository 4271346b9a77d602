//! `harness stop` of a run nobody supervises any more (a supervisor that crashed without systemd to
//! restart it): the CLI does what the supervisor's `stop` would have done — kills the turns its
//! liveness names, journals each running task `halted` and the run `stopped`, cleans the task
//! worktrees under the integrity rules (unintegrated work is kept) — and says what it did.

use super::kill;
use crate::ids::RunId;
use crate::os::home::Home;
use crate::state::journal::{Journal, Outcome, Record, RunEvent, TaskState, Verb};
use crate::state::{liveness, registry};

/// Stops `run`, whose supervisor is gone, as `by`. Returns what was done, one line each.
pub async fn stop(home: &Home, run: &RunId, by: &str) -> Result<Vec<String>, String> {
    let pointer = registry::read(home, run).map_err(|e| e.to_string())?;
    let journal = Journal::open(&pointer.journal_path()).map_err(|e| e.to_string())?;
    let view = journal.view().map_err(|e| e.to_string())?;
    if view.status.is_over() {
        return Err(format!("run {run} is already {}", view.status.as_str()));
    }
    let live = liveness::get(&pointer.liveness_path()).ok().flatten();
    if let Some(pid) = live.as_ref().and_then(|l| l.supervisor_pid).filter(|p| liveness::pid_alive(*p)) {
        return Err(format!(
            "run {run} is run by process {pid} (a batch or foreground `harness run`): Ctrl-C it, or `kill {pid}`, to stop it"
        ));
    }
    let mut did = Vec::new();
    let grace = live
        .as_ref()
        .and_then(|l| l.kill_grace_ms)
        .map_or(crate::timeouts::KILL_GRACE, std::time::Duration::from_millis);
    // What recovery would kill, by the same rules: a recorded group only while it is still ours
    // (never a recycled one), and turns liveness never recorded, by their prompt files.
    let wrappers = crate::wrapper::wrappers_dir().unwrap_or_default();
    for (task, t) in live.as_ref().map(|l| l.tasks.clone()).unwrap_or_default() {
        if super::recover::orphaned_turn(&t, &wrappers, run) {
            kill::kill_group(t.pgid, grace).await;
            did.push(format!("killed the orphaned turn of {task} (process group {})", t.pgid));
        }
    }
    let prompts = format!("{}/", pointer.prompts_dir().display());
    for pgid in kill::groups_mentioning(&prompts) {
        kill::kill_group(pgid, grace).await;
        did.push(format!("killed an unrecorded turn of the run (process group {pgid})"));
    }
    let fail = |e: crate::state::journal::JournalError| e.to_string();
    journal.append(&Record::control(Verb::Stop, by, Outcome::Accepted).into()).map_err(fail)?;
    let reason = format!("stopped by {by}");
    for (task, t) in &view.tasks {
        if matches!(t.state, TaskState::Leased | TaskState::Implemented | TaskState::Gated | TaskState::Reviewed) {
            let mut r = Record::task(task, TaskState::Halted);
            r.rc = Some(crate::exit::KILLED);
            r.detail = Some(format!("killed by {reason} (its supervisor was gone)"));
            r.session_id = t.session_id.clone();
            journal.append(&r.into()).map_err(fail)?;
            did.push(format!("{task}: halted"));
        }
    }
    let detail = format!("{reason}: its supervisor was gone");
    journal.append(&Record::run(RunEvent::Stopped, by, Some(detail))).map_err(fail)?;
    did.push(format!("run {run}: stopped"));
    let view = journal.view().map_err(|e| e.to_string())?;
    super::remove_task_worktrees(home, run, &pointer.worktree, &view).await;
    let _ = liveness::update(&pointer.liveness_path(), run, |l| {
        l.sock = None;
        l.supervisor_pid = None;
        l.tasks.clear();
    });
    Ok(did)
}
