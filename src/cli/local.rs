//! Commands over a run's files on this machine (registry, journal, liveness, DynWF inbox, plans) and
//! the service-manager files (install, plist, uninstall). Each resolves its ids, calls the module
//! that owns the file, and prints the result.

use super::error::{CliError, during, failed, usage};
use crate::ids::{RunId, Slug, TaskId};
use crate::os::home::Home;
use crate::state::journal::{self, Journal, Verb};
use crate::state::liveness::{self, TaskLiveness};
use crate::state::plan::Plan;
use crate::state::registry::{self, Plane, Pointer};
use crate::term::{out, print_json};
use std::path::{Path, PathBuf};

pub(super) fn home() -> Result<Home, CliError> {
    Home::from_env().map_err(usage)
}

/// The registry pointer of `run` (parsed first: a bad id is a usage error).
pub(super) fn pointer(home: &Home, run: &str) -> Result<Pointer, CliError> {
    let run = super::runref::resolve(run)?;
    registry::read(home, &run).map_err(during(format!("reading run {run}'s pointer")))
}

fn task_id(task: &str) -> Result<TaskId, CliError> {
    TaskId::parse(task).map_err(usage)
}

pub(super) fn registry_add(
    repo: &Path,
    worktree: Option<&Path>,
    slug: &str,
    plane: Plane,
    runstate_dir: Option<&Path>,
    project: Option<&str>,
) -> Result<(), CliError> {
    let slug = Slug::parse(slug).map_err(usage)?;
    let reg = registry::Registration {
        repo_root: repo,
        worktree,
        slug: &slug,
        plane,
        runstate_dir,
        project,
        base_slug: None,
    };
    let p = registry::register(&home()?, &reg).map_err(during(format!("registering {slug} in {}", repo.display())))?;
    print_json(&p);
    Ok(())
}

pub(super) fn registry_list() -> Result<(), CliError> {
    let home = home()?;
    let (found, skipped) = registry::enumerate(&home).map_err(during("listing the registry"))?;
    registry::log_skipped(&skipped);
    print_json(&found);
    Ok(())
}

pub(super) fn journal_append(run: &str, record: &str) -> Result<(), CliError> {
    let p = pointer(&home()?, run)?;
    let mut v: serde_json::Value =
        serde_json::from_str(record).map_err(|e| usage(format!("record is not JSON: {e}")))?;
    let obj = v.as_object_mut().ok_or_else(|| usage("record must be a JSON object"))?;
    obj.entry("v").or_insert_with(|| journal::VERSION.into());
    obj.entry("ts").or_insert_with(|| journal::now_rfc3339().into());
    let rec: journal::Record = serde_json::from_value(v).map_err(|e| usage(format!("invalid record: {e}")))?;
    let what = format!("appending to run {}'s journal", p.run_id);
    let home = home()?;
    let line = Journal::open(&p.journal_path()).and_then(|j| j.append(&rec)).map_err(during(what))?;
    crate::state::summary::refresh(&home, &p, &mut Default::default());
    out(&line.to_string());
    Ok(())
}

pub(super) fn journal_show(run: &str) -> Result<(), CliError> {
    let p = pointer(&home()?, run)?;
    print_json(&journal::replay(&p.journal_path()).map_err(during(format!("replaying run {}", p.run_id)))?);
    Ok(())
}

pub(super) fn journal_reconcile(run: &str) -> Result<(), CliError> {
    let p = pointer(&home()?, run)?;
    let view = journal::replay(&p.journal_path()).map_err(during(format!("replaying run {}", p.run_id)))?;
    let live = liveness::get(&p.liveness_path()).ok().flatten();
    let report = journal::reconcile(
        &view,
        |sha| crate::os::git::commit_exists(&p.worktree, sha),
        |t| live.as_ref().and_then(|l| l.tasks.get(t)).is_some_and(|r| liveness::pid_alive(r.pid)),
    );
    print_json(&report);
    if report.is_clean() { Ok(()) } else { Err(CliError::Discrepancies) }
}

pub(super) fn liveness_set(run: &str, task: &str, record: &str) -> Result<(), CliError> {
    let p = pointer(&home()?, run)?;
    let task = task_id(task)?;
    let rec: TaskLiveness = serde_json::from_str(record).map_err(|e| usage(format!("invalid liveness record: {e}")))?;
    liveness::set(&p.liveness_path(), &p.run_id, &task, rec)
        .map_err(during(format!("setting task {task}'s liveness in run {}", p.run_id)))
}

pub(super) fn liveness_get(run: &str, task: Option<&str>) -> Result<(), CliError> {
    let p = pointer(&home()?, run)?;
    let l = liveness::get(&p.liveness_path()).map_err(during(format!("reading run {}'s liveness", p.run_id)))?;
    match task {
        None => print_json(&l),
        Some(t) => {
            let t = task_id(t)?;
            print_json(&l.and_then(|l| l.tasks.get(&t).cloned()));
        }
    }
    Ok(())
}

pub(super) fn liveness_reap(run: &str) -> Result<(), CliError> {
    let p = pointer(&home()?, run)?;
    let view = journal::replay(&p.journal_path()).map_err(during(format!("replaying run {}", p.run_id)))?;
    let reaped = liveness::reap(&p.liveness_path(), &p.run_id, &view)
        .map_err(during(format!("reaping run {}'s liveness", p.run_id)))?;
    print_json(&reaped);
    Ok(())
}

pub(super) fn inbox_append(
    run: &str,
    verb: Verb,
    task: Option<&str>,
    msg: Option<String>,
    interrupt: bool,
    by: &str,
) -> Result<(), CliError> {
    let p = pointer(&home()?, run)?;
    let task = task.map(task_id).transpose()?;
    let e = crate::state::inbox::append(&p, verb, task, msg, interrupt, by, None).map_err(|e| match e {
        crate::state::inbox::InboxError::Invalid(d) => usage(d),
        e => failed(format!("queueing {verb} for run {}", p.run_id), e),
    })?;
    print_json(&e);
    Ok(())
}

pub(super) fn inbox_take(run: &str) -> Result<(), CliError> {
    let p = pointer(&home()?, run)?;
    let taken = crate::state::inbox::take(&p).map_err(during(format!("taking run {}'s inbox", p.run_id)))?;
    print_json(&taken);
    Ok(())
}

pub(super) fn prune(finished_before: Option<&str>, logs_only: bool, dry_run: bool, json: bool) -> Result<(), CliError> {
    let home = home()?;
    let opts = match finished_before {
        Some(age) => crate::state::prune::Options {
            older_than: crate::state::summary::parse_age(age)
                .ok_or_else(|| usage(format!("--finished-before must be an age such as 30d, 12h, 2w; got {age:?}")))?,
            logs_only,
            dry_run,
        },
        None => match crate::state::prune::retention(&home).map_err(CliError::Failed)? {
            Some(o) => crate::state::prune::Options { logs_only: logs_only || o.logs_only, dry_run, ..o },
            None => {
                return Err(usage(format!(
                    "give --finished-before AGE, or set {{\"v\":\"retention/v1\",\"finished_before\":\"30d\"}} in {}",
                    home.root.join("retention.json").display()
                )));
            }
        },
    };
    let report = crate::state::prune::prune(&home, &opts).map_err(CliError::Failed)?;
    if json {
        print_json(&report);
        return Ok(());
    }
    let verb = if dry_run { "would prune" } else { "pruned" };
    let what = if opts.logs_only { "logs of " } else { "" };
    for p in &report.pruned {
        out(&format!(
            "{verb} {what}{} ({}, last active {}): {} paths, {} bytes",
            p.run_id,
            p.status,
            p.last_activity.as_deref().unwrap_or("?"),
            p.removed.len(),
            p.bytes
        ));
        if dry_run {
            for r in &p.removed {
                out(&format!("  {}", r.display()));
            }
        }
    }
    for k in &report.kept {
        out(&format!("kept {}: {}", k.run_id, k.reason));
    }
    let freed = if dry_run { "would free" } else { "freed" };
    let only = if opts.logs_only { " (logs only)" } else { "" };
    out(&format!("{verb} {} runs{only}, {freed} {} bytes", report.pruned.len(), report.bytes));
    Ok(())
}

pub(super) fn clean(run: &str, force: bool, json: bool) -> Result<(), CliError> {
    let home = home()?;
    let p = pointer(&home, run)?;
    let sock = home.socket_path(&p.run_id);
    if crate::control::is_live(&sock) {
        return Err(CliError::Failed(format!(
            "run {} is live: its supervisor removes its worktrees when the run ends (`harness stop {}` first)",
            p.run_id, p.run_id
        )));
    }
    let view = journal::replay(&p.journal_path()).map_err(during(format!("reading run {}'s journal", p.run_id)))?;
    let committed = |t: &str| {
        crate::ids::TaskId::parse(t)
            .is_ok_and(|t| view.state_of(&t) == Some(crate::state::journal::TaskState::Committed))
    };
    let cleaned = crate::os::worktree::clean_run(&home, &p.worktree, &p.run_id, &committed, force)
        .map_err(during(format!("removing run {}'s worktrees", p.run_id)))?;
    if json {
        let kept: Vec<_> =
            cleaned.kept.iter().map(|(what, why)| serde_json::json!({"what": what, "why": why})).collect();
        print_json(&serde_json::json!({"runId": p.run_id.as_str(), "removed": cleaned.removed, "kept": kept}));
        return Ok(());
    }
    if cleaned.removed.is_empty() && cleaned.kept.is_empty() {
        out(&format!("run {}: no task worktree or task branch to remove", p.run_id));
    }
    for r in &cleaned.removed {
        out(&format!("removed {r}"));
    }
    for (what, why) in &cleaned.kept {
        out(&format!("kept {what}: {why}"));
    }
    Ok(())
}

pub(super) fn token(url: bool, json: bool) -> Result<(), CliError> {
    let home = home()?;
    let t = crate::config::ensure_api_token(&home).map_err(|e| CliError::Failed(e.to_string()))?;
    if json {
        let addr = crate::config::api_addr().map_err(usage)?;
        print_json(&serde_json::json!({"token": t, "url": format!("http://{addr}/runs?token={t}")}));
    } else if url {
        let addr = crate::config::api_addr().map_err(usage)?;
        out(&format!("http://{addr}/runs?token={t}"));
    } else {
        out(&t);
    }
    Ok(())
}

pub(super) fn plan_check(plan: &Path, json: bool) -> Result<(), CliError> {
    let p = Plan::load(plan).map_err(usage)?;
    if json {
        let j =
            serde_json::json!({"ok": true, "slug": p.slug.as_str(), "tasks": p.tasks.len(), "waves": p.waves().len()});
        print_json(&j);
        return Ok(());
    }
    out(&format!("ok: plan {} with {} tasks in {} waves", p.slug, p.tasks.len(), p.waves().len()));
    Ok(())
}

fn this_binary(bin: Option<PathBuf>) -> Result<PathBuf, CliError> {
    match bin {
        Some(b) => Ok(b),
        None => std::env::current_exe().map_err(during("finding this binary")),
    }
}

pub(super) fn install(bin: Option<PathBuf>, print: bool, unit_dir: Option<&Path>) -> Result<(), CliError> {
    let bin = this_binary(bin)?;
    let msg = crate::os::install::install(&bin, &home()?, unit_dir, print).map_err(CliError::Failed)?;
    if !msg.is_empty() {
        out(&msg);
    }
    Ok(())
}

pub(super) fn plist(which: &str, bin: Option<PathBuf>) -> Result<(), CliError> {
    let bin = this_binary(bin)?;
    let home = home()?;
    let text = if which == "api" {
        crate::os::launchd::api_plist(&bin, &home)
    } else if which == "relay" {
        crate::os::launchd::relay_plist(&bin, &home)
    } else {
        crate::os::launchd::supervisor_plist(&bin, &home, &RunId::parse(which).map_err(usage)?)
    };
    out(text.trim_end());
    Ok(())
}

pub(super) fn uninstall(unit_dir: Option<&Path>) -> Result<(), CliError> {
    out(&crate::os::install::uninstall(&home()?, unit_dir).map_err(CliError::Failed)?);
    Ok(())
}

/// `harness notify flush`: what the notifiers of runs no supervisor serves left undelivered.
pub(super) fn notify_flush() -> Result<(), CliError> {
    use std::os::unix::fs::OpenOptionsExt;
    let home = home()?;
    let file = home.root.join("notify.json");
    let hooks = crate::state::notify::load(&home.root)
        .map_err(|e| CliError::Usage(format!("{e}: fix it first, then flush")))?
        .ok_or_else(|| CliError::Usage(format!("no {}: nothing to send to (spec/NOTIFY.md)", file.display())))?;
    // One flush at a time: two would both send what lies after the same marks.
    let lock_path = home.root.join("notify.flush.lock");
    let lock_file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600) // private, as everything in the home
        .open(&lock_path)
        .map_err(during(format!("opening {}", lock_path.display())))?;
    let _lock = crate::os::flock::Flock::try_exclusive(&lock_file)
        .map_err(during(format!("locking {}", lock_path.display())))?
        .ok_or_else(|| CliError::Failed("another `harness notify flush` is running in this home".into()))?;
    let (pointers, skipped) = registry::enumerate(&home).map_err(during("listing the home's runs"))?;
    registry::log_skipped(&skipped);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(during("starting the notifier's runtime"))?;
    let (mut sent, mut live, mut failed) = (0, 0, 0);
    for p in pointers {
        use crate::supervisor::notifier::Flushed;
        let (journal, mark) = (p.journal_path(), p.notify_mark_path());
        let f = crate::supervisor::notifier::flush(&p.run_id, &journal, &mark, &hooks);
        match rt.block_on(f) {
            Err(e) => {
                // One run's files not there (its checkout moved, say) stops no other run's flush.
                eprintln!("harness: run {}: cannot flush its notifications: {e}", p.run_id);
                failed += 1;
            }
            Ok(Flushed::Live) => live += 1,
            Ok(Flushed::Never | Flushed::Sent(0)) => {}
            Ok(Flushed::Sent(n)) => {
                crate::term::out(&format!("{}: {n} notification(s) sent", p.run_id));
                sent += n;
            }
        }
    }
    let served = if live > 0 { format!(" ({live} live run(s) left to their supervisors)") } else { String::new() };
    crate::term::out(&format!("{sent} notification(s) sent{served}"));
    if failed > 0 {
        return Err(CliError::Failed(format!("{failed} run(s) could not be flushed (above)")));
    }
    Ok(())
}

/// `harness notify test`: a sample to every hook; exit 1 when one failed.
pub(super) fn notify_test() -> Result<(), CliError> {
    let home = home()?;
    let hooks = crate::state::notify::load(&home.root).map_err(CliError::Failed)?.ok_or_else(|| {
        CliError::Usage(format!("no {}: nothing to test (spec/NOTIFY.md)", home.root.join("notify.json").display()))
    })?;
    if hooks.is_empty() {
        return Err(CliError::Usage("notify.json has no hooks".into()));
    }
    let sample = crate::state::notify::sample();
    let mut failed = 0;
    for h in &hooks {
        match crate::state::notify::deliver(h, &sample) {
            Ok(()) => crate::term::out(&format!("ok      {}", h.label())),
            Err(e) => {
                failed += 1;
                crate::term::out(&format!("FAILED  {}: {e}", h.label()));
            }
        }
    }
    if failed > 0 {
        return Err(CliError::Failed(format!("{failed} of {} hook(s) failed", hooks.len())));
    }
    Ok(())
}
