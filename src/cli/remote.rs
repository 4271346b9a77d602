//! Commands that talk to the API (`runs`, `show`, `watch`, the verbs) or straight to a supervisor's
//! control socket (`stop`, `status`). They carry requests and print answers; the tables read typed
//! views of the API's JSON.

use super::error::{CliError, during, usage};
use super::fmt;
use super::local::{home, pointer};
use crate::client::Client;
use crate::control::{self, Act, Reply, Request};
use crate::ids::{RunId, TaskId};
use crate::runner::recover_command;
use crate::term::{out, out_raw, print_json};
use crate::views::{self, Answer, Approvals, RunDetail, RunRow, RunStatus, TaskDetail, TaskState};
use serde::Deserialize;

fn client_rt() -> Result<tokio::runtime::Runtime, CliError> {
    tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(during("starting the client runtime"))
}

/// Turns an API answer into its JSON, or a one-line error with the API's detail.
fn api_answer(status: u16, body: &[u8]) -> Result<serde_json::Value, CliError> {
    if (200..300).contains(&status) {
        return Ok(serde_json::from_slice(body).unwrap_or(serde_json::Value::Null));
    }
    let detail = serde_json::from_slice::<Answer>(body)
        .ok()
        .and_then(|a| a.detail)
        .unwrap_or_else(|| String::from_utf8_lossy(body).into_owned());
    Err(CliError::Failed(format!("{status}: {detail}")))
}

fn typed<T: for<'de> Deserialize<'de>>(v: serde_json::Value, what: &str) -> Result<T, CliError> {
    serde_json::from_value(v).map_err(during(format!("the API's answer to {what} is not what this CLI expects")))
}

fn branch(b: &Option<String>) -> String {
    b.as_ref().map(|b| format!(" ({b})")).unwrap_or_default()
}

pub(super) use super::fmt::money;

/// A run's wave of its waves (empty while no wave is known).
pub(super) fn wave_of(r: &views::RunSummary<impl Sized>) -> String {
    r.wave.map(|w| format!("{w}/{}", r.waves.unwrap_or(0))).unwrap_or_default()
}

/// A run's committed tasks of its tasks.
/// Tasks done of the run's: committed, and skipped (their wave counts them done).
pub(super) fn done_of(r: &views::RunSummary<impl Sized>) -> String {
    format!("{}/{}", r.counts.committed + r.counts.skipped, r.tasks)
}

/// Every run `query` matches (at most `limit`), newest activity first, fetched page by page.
pub(super) fn runs_matching(c: &Client, query: &str, limit: Option<u64>) -> Result<Vec<serde_json::Value>, CliError> {
    let rt = client_rt()?;
    let mut rows = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let want = limit.map_or(crate::api::overview::PAGE_MAX as u64, |l| {
            (l - rows.len() as u64).min(crate::api::overview::PAGE_MAX as u64)
        });
        let q = if query.is_empty() { format!("limit={want}") } else { format!("{query}&limit={want}") };
        let page = match rt.block_on(c.runs_page(&q, after.as_deref()))? {
            Ok(p) => p,
            Err((status, body)) => {
                return Err(match api_answer(status, &body) {
                    Err(e) => e,
                    Ok(_) => CliError::Failed(String::from_utf8_lossy(&body).into_owned()),
                });
            }
        };
        rows.extend(page.rows);
        if !page.more || page.next_after.is_none() || limit.is_some_and(|l| rows.len() as u64 >= l) {
            return Ok(rows);
        }
        after = page.next_after;
    }
}

pub(super) fn runs(c: &Client, query: &str, limit: Option<u64>, json: bool) -> Result<(), CliError> {
    if limit == Some(0) {
        return Err(usage("--limit must be a positive number"));
    }
    let v = serde_json::Value::Array(runs_matching(c, query, limit)?);
    if json {
        print_json(&v);
        return Ok(());
    }
    let rows: Vec<RunRow> = typed(v, "GET /runs")?;
    let width = rows.iter().map(|r| r.run.run_id.as_str().len()).max().unwrap_or(3).max(3);
    // A fleet's rows carry their host: a first column then (a home's API has none).
    let host_width = rows.iter().filter_map(|r| r.host.as_ref().map(|h| h.as_str().len())).max().map(|w| w.max(4));
    let host_cell = |h: Option<&str>| host_width.map_or(String::new(), |w| format!("{:<w$}  ", h.unwrap_or("")));
    out(&format!(
        "{}{:<width$}  {:<8}  {:>5}  {:>7}  {:>9}  {:>11}  {:<5}  {}",
        host_cell(Some("HOST")),
        "RUN",
        "STATUS",
        "WAVE",
        "DONE",
        "COST",
        "ACTIVE",
        "LIVE",
        "PROJECT/BRANCH"
    ));
    let mut gone = Vec::new();
    for RunRow { run: r, live, supervisor, host, .. } in rows {
        if supervisor == views::Supervisor::Gone {
            gone.push((r.run_id.clone(), host.clone()));
        }
        let line = format!(
            "{}{:<width$}  {:<8}  {:>5}  {:>7}  {:>9}  {:>11}  {:<5}  {}{}",
            host_cell(host.as_ref().map(|h| h.as_str())),
            r.run_id.as_str(),
            r.status.label(),
            wave_of(&r),
            done_of(&r),
            money(Some(&r.usage)),
            fmt::ago(r.updated.as_deref().or(Some(r.created.as_str()))),
            match (live, supervisor) {
                (true, _) => "yes",
                (false, views::Supervisor::Gone) => "GONE",
                _ => "no",
            },
            r.project,
            branch(&r.branch),
        );
        out(line.trim_end());
    }
    // Hints go to stderr: stdout stays one line per run.
    for (id, host) in gone {
        match host {
            Some(h) => eprintln!(
                "{id}: its supervisor on host {h} is gone; there, `{}` recovers it, `harness stop {id}` ends it",
                recover_command(&id)
            ),
            None => {
                eprintln!(
                    "{id}: its supervisor is gone; `{}` recovers it, `harness stop {id}` ends it",
                    recover_command(&id)
                )
            }
        }
    }
    Ok(())
}

/// `harness show RUN`: the run's status, times and cost, then each wave's tasks in a person's words.
pub(super) fn show(c: &Client, run: &str, json: bool) -> Result<(), CliError> {
    let id = super::runref::resolve(run)?;
    let (status, body) = client_rt()?.block_on(c.call("GET", &format!("/runs/{id}"), None))?;
    let v = api_answer(status, &body)?;
    if json {
        print_json(&v);
        return Ok(());
    }
    let d: RunDetail = typed(v, &format!("GET /runs/{id}"))?;
    let live = match d.supervisor {
        _ if d.live => "supervised, live".to_string(),
        views::Supervisor::Gone => match &d.host {
            Some(h) => format!("supervisor gone on host {h}: there, `{}` recovers it", recover_command(&id)),
            None => format!("supervisor gone: `{}` recovers it", recover_command(&id)),
        },
        _ => "not live".to_string(),
    };
    out(&format!(
        "run {id} · {} · {}{} · {live}",
        d.run.status.label(),
        d.run.repo_root.display(),
        branch(&d.run.branch)
    ));
    out(&format!("  {} tasks done · cost {} · {}", done_of(&d.run), money(Some(&d.run.usage)), run_times(&d.run)));
    for b in &d.run.blocked_by {
        let fails = d.run.fails_at.as_deref().map(|t| format!(" (the run fails at {t})")).unwrap_or_default();
        out(&format!(
            "  blocked by {} ({}): {}{fails} — `harness retry {id} {}`, `harness skip {id} {} --reason …` or a steer unblocks it",
            b.task.as_str(),
            views::task_label(b.state, b.detail.as_deref().map(|d| crate::state::views::halt_reason(None, d)), None),
            b.detail.as_deref().unwrap_or(""),
            b.task.as_str(),
            b.task.as_str()
        ));
    }
    for w in d.plan.waves {
        out(&format!("wave {}", w.wave));
        for t in w.tasks {
            let took = t.facts.updated.as_deref().map(|u| fmt::ago(Some(u))).unwrap_or_default();
            let line = format!(
                "  {:<16} {:<7} {:<16} {:>9}  {:>11}  {}",
                t.id.as_str(),
                t.adapter.as_str(),
                t.facts.label(t.live_state),
                money(t.usage.as_ref()),
                took,
                t.facts.detail.as_deref().unwrap_or("")
            );
            out(line.trim_end());
            if let Some(w) = &t.facts.worktree {
                let kept = !d.live && t.facts.state != TaskState::Committed;
                let why = if kept {
                    " (kept: the task's work is not integrated; `harness clean` says what it holds, --force removes it)"
                } else {
                    ""
                };
                out(&format!("  {:<16} worktree {}{why}", "", w.display()));
            }
        }
    }
    out(&format!("  one task: harness show {id} TASK"));
    Ok(())
}

/// When a run started and how long it ran (or has run so far).
fn run_times(r: &views::RunSummary<impl Sized>) -> String {
    match (&r.started_at, &r.finished_at) {
        (Some(s), Some(f)) => format!("started {}, ran {}", fmt::ago(Some(s)), fmt::between(s, Some(f))),
        (Some(s), None) => format!("started {}, running for {}", fmt::ago(Some(s)), fmt::between(s, None)),
        _ => format!("created {}", fmt::ago(Some(&r.created))),
    }
}

/// `harness show RUN TASK`: one task — its attempts with times, session, process, cost, commit and
/// files, last error, steers and approvals.
pub(super) fn show_task(c: &Client, run: &str, task: &str, json: bool) -> Result<(), CliError> {
    let id = super::runref::resolve(run)?;
    let task = TaskId::parse(task).map_err(usage)?;
    let rt = client_rt()?;
    let (status, body) = rt.block_on(c.call("GET", &format!("/runs/{id}/tasks/{task}"), None))?;
    let v = api_answer(status, &body)?;
    let (s, b) = rt.block_on(c.call("GET", &format!("/runs/{id}/approvals"), None))?;
    let approvals: Approvals = typed(api_answer(s, &b)?, &format!("GET /runs/{id}/approvals"))?;
    let approvals: Vec<views::ApprovalView> = approvals.approvals.into_iter().filter(|a| a.task == task).collect();
    if json {
        print_json(&serde_json::json!({"task": v, "approvals": approvals}));
        return Ok(());
    }
    let d: TaskDetail = typed(v, &format!("GET /runs/{id}/tasks/{task}"))?;
    for line in task_lines(&id, &d, &approvals) {
        out(line.trim_end());
    }
    Ok(())
}

/// The lines of `show_task` (a pure rendering of the task's view and its approvals).
fn task_lines(id: &crate::ids::RunId, d: &TaskDetail, approvals: &[views::ApprovalView]) -> Vec<String> {
    let adapter = d.binding.as_ref().and_then(|b| b["adapter"].as_str()).unwrap_or("?");
    let state = d.facts.label(d.live.as_ref().filter(|l| l.alive).map(|l| l.state));
    let mut l = vec![format!("task {} of run {id} · {state} · {adapter}", d.task.as_str())];
    let row = |l: &mut Vec<String>, k: &str, v: String| l.push(format!("  {k:<10} {v}"));
    if let Some(s) = &d.facts.session_id {
        row(&mut l, "session", s.clone());
    }
    if let Some(p) = d.live.as_ref().filter(|p| p.alive) {
        let runtime = p.runtime_s.map(fmt::span_s).unwrap_or_else(|| "-".into());
        let idle = p.idle_s.map(fmt::span_s).unwrap_or_else(|| "-".into());
        row(&mut l, "process", format!("pid {}, running for {runtime}, idle {idle}", p.pid));
    }
    if let Some(u) = &d.usage {
        let tokens = match (u.input_tokens, u.output_tokens) {
            (Some(i), Some(o)) => format!(" ({i} tokens in, {o} out, {} turns)", u.turns),
            _ => format!(" ({} turns)", u.turns),
        };
        row(&mut l, "cost", format!("{}{tokens}", money(Some(u))));
    }
    if let Some(cv) = &d.facts.commit {
        let sha: String = cv.sha.chars().take(10).collect();
        let how = if cv.integrated { "integrated" } else { "an attempt, not integrated" };
        row(&mut l, "commit", format!("{sha} {} ({how})", cv.subject.as_deref().unwrap_or("")));
        for f in cv.files.iter().flatten() {
            let n = |v: Option<u64>| v.map_or("-".to_string(), |v| v.to_string());
            l.push(format!("  {:<10}   {:<9} {} (+{} -{})", "", f.status.as_str(), f.path, n(f.added), n(f.removed)));
        }
    } else if d.facts.no_changes {
        row(&mut l, "commit", "none: the task changed nothing".into());
    }
    if d.facts.state == TaskState::Halted {
        let rc = d.facts.rc.map(|r| format!(" (exit {r})")).unwrap_or_default();
        row(&mut l, "error", format!("{}{rc}", d.facts.detail.as_deref().unwrap_or("halted")));
        l.push(format!(
            "  {:<10} harness retry {id} {t} · harness skip {id} {t} --reason …",
            "next",
            t = d.task.as_str()
        ));
    }
    if !d.history.is_empty() {
        l.push("  attempts".into());
    }
    for a in &d.history {
        let rc = a.rc.map(|r| format!(" rc {r}")).unwrap_or_default();
        let why = a.reason.as_deref().map(|r| format!("  {r}")).unwrap_or_default();
        let took = fmt::between(&a.started_at, a.ended_at.as_deref());
        let halt = a.reason.as_deref().map(|r| crate::state::views::halt_reason(a.rc, r));
        let state = views::task_label(a.state, halt, None);
        l.push(format!("    {:>2}  {}  {took:>7}  {state}{rc}{why}", a.n, fmt::clock(&a.started_at)));
    }
    if !d.steers.is_empty() {
        l.push("  steers".into());
    }
    for s in &d.steers {
        let msg: String = s.msg.as_deref().unwrap_or("").chars().take(80).collect();
        l.push(format!("    {}  by {:<6} {:<9} {msg:?}", fmt::clock(&s.ts), s.by, s.state.as_str()));
    }
    if !approvals.is_empty() {
        l.push("  approvals".into());
    }
    for a in approvals {
        let by = a.by.as_deref().map(|b| format!(" by {b}")).unwrap_or_default();
        l.push(format!(
            "    {}  {} {:<8}{by}  {}",
            fmt::clock(&a.ts),
            a.id,
            a.state.as_str(),
            a.tool.as_deref().unwrap_or("?")
        ));
    }
    let log =
        if d.log_exists { d.logfile.display().to_string() } else { format!("{} (none yet)", d.logfile.display()) };
    row(&mut l, "log", log);
    row(&mut l, "events", format!("harness watch {id} {}", d.task.as_str()));
    l
}

/// How `watch` prints and when it stops.
pub(super) struct WatchFlags {
    pub json: bool,
    pub after: Option<String>,
    pub until_exit: bool,
}

/// An events/v1 event's type (the rest is the renderer's).
#[derive(Deserialize)]
struct EventType {
    #[serde(rename = "type", default)]
    kind: String,
}

/// Follows a task's `/feed` (its recorded events, then live ones, to the stream's end); an API
/// older than `/feed` is followed on `/stream`, and when the run is not live, what its log holds
/// is printed (the durable pages, paged by the API's own `Harness-Next-After`/`Harness-More`).
pub(super) fn watch(c: &Client, run: &str, task: &str, flags: WatchFlags) -> Result<(), CliError> {
    let id = super::runref::resolve(run)?;
    let task = TaskId::parse(task).map_err(usage)?;
    if let Some(a) = &flags.after {
        crate::events::Seq::parse(a).map_err(usage)?;
    }
    let rt = client_rt()?;
    let mut r = crate::render::Renderer::default();
    let mut print = |data: &str| -> bool {
        if flags.json {
            out(data);
        } else {
            out_raw(&r.render(&serde_json::from_str(data).unwrap_or(serde_json::Value::Null)));
        }
        let exit = serde_json::from_str::<EventType>(data).is_ok_and(|e| e.kind == "exit");
        !(flags.until_exit && exit)
    };
    let mut on_event = |e: &crate::client::SseEvent| match e.end() {
        Some(end) => {
            eprintln!("harness: the stream ended: {}", end.detail);
            false
        }
        None => print(&e.data),
    };
    let feed = format!("/runs/{id}/tasks/{task}/feed");
    let status = rt.block_on(c.follow(&feed, flags.after.clone(), &mut on_event))?;
    if status == 200 {
        return Ok(());
    }
    let (s, body) = rt.block_on(c.call("GET", &feed, None))?;
    if !(s == 404 && String::from_utf8_lossy(&body).contains("no route for")) {
        return api_answer(s, &body).map(|_| ());
    }
    let path = format!("/runs/{id}/tasks/{task}/stream");
    let status = rt.block_on(c.follow(&path, flags.after.clone(), &mut on_event))?;
    if status == 200 {
        return Ok(());
    }
    if status != 409 {
        let (s, body) = rt.block_on(c.call("GET", &path, None))?;
        return api_answer(s, &body).map(|_| ());
    }
    eprintln!("harness: run {id} is not live; its recorded events:");
    let mut cursor = flags.after;
    loop {
        let page = match rt.block_on(c.events(&id, &task, cursor.as_deref()))? {
            Ok(p) => p,
            Err((s, body)) => return api_answer(s, &body).map(|_| ()),
        };
        for line in &page.lines {
            if !print(line) {
                return Ok(());
            }
        }
        if !page.more || page.next_after.is_none() {
            return Ok(());
        }
        cursor = page.next_after;
    }
}

/// `harness diff RUN [TASK] [--stat [--json]]`.
pub(super) fn diff(c: &Client, run: &str, task: Option<&str>, stat: bool, json: bool) -> Result<(), CliError> {
    let id = super::runref::resolve(run)?;
    let path = match task {
        Some(t) => format!("/runs/{id}/tasks/{}/diff", TaskId::parse(t).map_err(usage)?),
        None => format!("/runs/{id}/diff"),
    };
    let path = if stat { format!("{path}?stat=1") } else { path };
    let (status, body) = client_rt()?.block_on(c.call("GET", &path, None))?;
    if status != 200 {
        return api_answer(status, &body).map(|_| ());
    }
    if json {
        out(String::from_utf8_lossy(&body).trim_end());
        return Ok(());
    }
    let text = if stat {
        let s: crate::views::DiffStat = serde_json::from_slice(&body)
            .map_err(|e| CliError::Failed(format!("the API's diff stat does not read: {e}")))?;
        let mut t = String::new();
        for f in &s.files {
            let n = |v: Option<u64>| v.map_or("-".to_string(), |v| v.to_string());
            let name = match &f.old_path {
                Some(old) => format!("{old} => {}", f.path),
                None => f.path.clone(),
            };
            t.push_str(&format!("{:>6} {:>6}  {name}\n", n(f.added), n(f.removed)));
        }
        t.push_str(&format!(
            "{} file{} changed, {} insertion{}(+), {} deletion{}(-)\n",
            s.files.len(),
            if s.files.len() == 1 { "" } else { "s" },
            s.added,
            if s.added == 1 { "" } else { "s" },
            s.removed,
            if s.removed == 1 { "" } else { "s" },
        ));
        t
    } else {
        String::from_utf8_lossy(&body).into_owned()
    };
    if text.is_empty() {
        eprintln!("harness: no change yet");
        return Ok(());
    }
    page(&text)
}

/// Shows `text` through `$PAGER` (else `less -FRX`) when stdout is a terminal, else prints it.
fn page(text: &str) -> Result<(), CliError> {
    use std::io::{IsTerminal, Write};
    if !std::io::stdout().is_terminal() {
        out_raw(text);
        return Ok(());
    }
    let pager = std::env::var("PAGER").ok().filter(|p| !p.trim().is_empty()).unwrap_or_else(|| "less -FRX".into());
    let child = std::process::Command::new("sh").arg("-c").arg(&pager).stdin(std::process::Stdio::piped()).spawn();
    let Ok(mut child) = child else {
        out_raw(text);
        return Ok(());
    };
    if let Some(mut stdin) = child.stdin.take() {
        // A pager quit early closes its input: not an error.
        let _ = stdin.write_all(text.as_bytes());
    }
    let _ = child.wait();
    Ok(())
}

/// A verb through the API: its answer's detail for a person (the API's JSON with `json`); a 409
/// because the run is not live is said in a person's words (`not_live`).
fn post(c: &Client, run: &RunId, path: &str, body: &impl serde::Serialize, json: bool) -> Result<(), CliError> {
    let body = serde_json::to_value(body).expect("a request body serializes");
    let rt = client_rt()?;
    let (status, bytes) = rt.block_on(c.call("POST", path, Some(&body)))?;
    let v = match api_answer(status, &bytes) {
        Ok(v) => v,
        Err(e) if is_not_live(status, &e.to_string()) => return Err(CliError::Failed(not_live(c, &rt, run, path))),
        Err(e) => return Err(e),
    };
    if json {
        print_json(&v);
        return Ok(());
    }
    match serde_json::from_value::<Answer>(v.clone()).ok().and_then(|a| a.detail) {
        Some(d) => out(&d),
        None => out(&v.to_string()),
    }
    Ok(())
}

/// A run that is over, as a sentence's verb.
fn over_word(s: RunStatus) -> &'static str {
    match s {
        RunStatus::Finished => "finished",
        RunStatus::Failed => "failed",
        _ => "was stopped",
    }
}

/// The pinned prefix of the API's 409 for a run no supervisor serves.
const NOT_LIVE: &str = "run not supervised / not live";

/// Whether a verb's answer (`status`, its detail) is the API's 409 for a run no supervisor serves.
pub(super) fn is_not_live(status: u16, detail: &str) -> bool {
    status == 409 && detail.contains(NOT_LIVE)
}

/// Why a verb found no live run, as a person says it: `run … finished 2m 10s ago; its events: …`
/// (the CLI's verbs and `top`'s keys).
pub(super) fn not_live(c: &Client, rt: &tokio::runtime::Runtime, run: &RunId, path: &str) -> String {
    let task = path.split("/tasks/").nth(1).and_then(|t| t.split('/').next()).unwrap_or("TASK");
    let events = format!("its events: harness watch {run} {task}");
    let d = rt
        .block_on(c.call("GET", &format!("/runs/{run}"), None))
        .ok()
        .and_then(|(s, b)| api_answer(s, &b).ok())
        .and_then(|v| serde_json::from_value::<RunDetail>(v).ok());
    let Some(d) = d else { return format!("run {run} is not live; {events}") };
    let when = d.run.finished_at.as_deref().or(d.run.updated.as_deref());
    match d.run.status {
        s if s.is_over() => format!("run {run} {} {}; {events}", over_word(s), fmt::ago(when)),
        _ if d.supervisor == views::Supervisor::Gone => format!(
            "run {run} is {} but its supervisor is gone (last seen {}): `{}` recovers it, `harness stop {run}` ends it",
            d.run.status.label(),
            fmt::ago(when),
            recover_command(run)
        ),
        _ if d.live => format!(
            "run {run} is a batch run (started without --supervised): it takes no verbs; Ctrl-C in its terminal stops it; {events}"
        ),
        _ => format!("run {run} has no supervisor ({}): it was started without one; {events}", d.run.status.label()),
    }
}
/// A task's verb (`steer`, `kill`, `retry`…): a POST to its route.
pub(super) fn task_verb(
    c: &Client,
    run: &str,
    task: &str,
    verb: &str,
    body: &impl serde::Serialize,
    json: bool,
) -> Result<(), CliError> {
    let run = super::runref::resolve(run)?;
    let task = TaskId::parse(task).map_err(usage)?;
    post(c, &run, &format!("/runs/{run}/tasks/{task}/{verb}"), body, json)
}

/// `pause` and `resume`: a POST to the run's verb route.
pub(super) fn run_verb(c: &Client, run: &str, verb: &str, json: bool) -> Result<(), CliError> {
    let run = super::runref::resolve(run)?;
    post(c, &run, &format!("/runs/{run}/{verb}"), &super::cli_by(), json)
}

/// `harness budget`: POST /runs/:runId/budget.
pub(super) fn budget(c: &Client, run: &str, usd: f64, task: Option<String>, json: bool) -> Result<(), CliError> {
    let run = super::runref::resolve(run)?;
    if !(usd.is_finite() && usd > 0.0) {
        return Err(usage(format!("the budget must be a positive number of US dollars, got {usd}")));
    }
    let task = task.map(|t| TaskId::parse(&t)).transpose().map_err(usage)?;
    post(c, &run, &format!("/runs/{run}/budget"), &views::BudgetBody { usd, task, by: "cli".into() }, json)
}

/// The verbs the CLI sends straight to the supervisor's socket.
/// Sends `act` (a verb without a task: stop, status, end) to the run's supervisor socket.
pub(super) fn control_verb(run: &str, act: Act, json: bool) -> Result<(), CliError> {
    let home = home()?;
    let p = pointer(&home, run)?;
    let sock = home.socket_path(&p.run_id);
    // A run whose supervisor is gone is stopped here, as its supervisor would have.
    if matches!(act, Act::Stop(_)) && !control::is_live(&sock) {
        // Stopping a run that is over already is done: said, exit 0 (a script's second `stop`).
        let status = crate::state::journal::Journal::open(&p.journal_path()).and_then(|j| j.view()).map(|v| v.status);
        if let Ok(s) = status
            && s.is_over()
        {
            stopped_here(&format!("run {}: already {}; nothing to do", p.run_id, s.as_str()), &[], json);
            return Ok(());
        }
        let done = client_rt()?
            .block_on(crate::supervisor::abandoned::stop(&home, &p.run_id, "cli"))
            .map_err(|e| CliError::Failed(format!("run {} is not live and cannot be stopped: {e}", p.run_id)))?;
        stopped_here(&format!("run {}: its supervisor was gone; stopped it here:", p.run_id), &done, json);
        return Ok(());
    }
    let req = Request::new(act, Some("cli".to_string()));
    let reply = client_rt()?
        .block_on(control::request(&sock, &req, crate::timeouts::CLI_CONTROL_ANSWER))
        .map_err(|_| CliError::Failed(not_live_here(&p)))?;
    if json {
        print_json(&reply);
    } else {
        reply_lines(&reply).iter().for_each(|l| out(l));
    }
    match reply {
        Reply::Done(_) => Ok(()),
        Reply::Refused(r) => Err(CliError::Failed(format!("{} refused by run {}: {}", req.verb(), p.run_id, r.detail))),
    }
}

/// What `stop` did without a supervisor: `what`, then each of `done` on its own line; with `json`,
/// the answer a supervisor gives a stop (`{"ok":true,"detail":…}`, `done` joined into the detail).
fn stopped_here(what: &str, done: &[String], json: bool) {
    if json {
        let detail = std::iter::once(what.trim_end_matches(':').to_string()).chain(done.iter().cloned());
        print_json(&control::Answer::Stop { detail: detail.collect::<Vec<_>>().join("; "), ok: control::True });
        return;
    }
    out(what);
    done.iter().for_each(|d| out(&format!("  {d}")));
}

/// A supervisor's answer for a person: a status as lines, any other answer as its detail.
fn reply_lines(reply: &Reply) -> Vec<String> {
    match reply {
        Reply::Done(control::Answer::Status { paused, pending_steers, run, status, tasks, .. }) => {
            let paused = if *paused { " (paused)" } else { "" };
            let mut l = vec![format!("run {run}: {}{paused}, {pending_steers} steer(s) queued", views_status(*status))];
            for (id, t) in tasks {
                let pid = t.pgid.map(|p| format!("  pid {p}")).unwrap_or_default();
                let session = t.session_id.as_deref().map(|s| format!("  session {s}")).unwrap_or_default();
                let state = match t.state {
                    control::Shown::Pending => "waiting",
                    control::Shown::State(s) => views::TaskState::from(s).label(),
                };
                let running = if t.running { " (turn running)" } else { "" };
                l.push(format!("  {:<16} {state}{running}{pid}{session}", id.as_str()));
            }
            l
        }
        other => {
            let v = serde_json::to_value(other).unwrap_or_default();
            vec![v["detail"].as_str().map_or_else(|| v.to_string(), str::to_string)]
        }
    }
}

/// A journal status in a person's words.
fn views_status(s: crate::state::journal::RunStatus) -> &'static str {
    views::RunStatus::from(s).label()
}

/// A control verb that found no supervisor, in a person's words (from the run's journal).
fn not_live_here(p: &crate::state::registry::Pointer) -> String {
    let view = crate::state::journal::Journal::open(&p.journal_path()).and_then(|j| j.view());
    match view {
        Ok(v) if v.status.is_over() => {
            format!(
                "run {} is over ({}); its events: harness watch {} TASK",
                p.run_id,
                views_status(v.status),
                p.run_id
            )
        }
        _ => format!(
            "run {} has no live supervisor: `{}` recovers it, `harness show {}` shows it",
            p.run_id,
            recover_command(&p.run_id),
            p.run_id
        ),
    }
}

/// `approvals`: the run's asked tool calls, one line each (pending ones unless `all`).
pub(super) fn approvals(c: &Client, run: &str, all: bool, json: bool) -> Result<(), CliError> {
    let run = super::runref::resolve(run)?;
    let path = if all { format!("/runs/{run}/approvals") } else { format!("/runs/{run}/approvals?state=pending") };
    let (status, bytes) = client_rt()?.block_on(c.call("GET", &path, None))?;
    let v = api_answer(status, &bytes)?;
    if json {
        print_json(&v);
        return Ok(());
    }
    let list: Approvals = typed(v, &format!("GET {path}"))?;
    if list.approvals.is_empty() {
        out(if all { "no approvals" } else { "no pending approvals" });
    }
    for a in list.approvals {
        let input = a.input.unwrap_or(serde_json::Value::Null).to_string();
        let input: String = input.chars().take(100).collect();
        let by = a.by.map(|b| format!(" by {b}")).unwrap_or_default();
        out(&format!(
            "{}  {:<8} {:<9}{by}  {} {input}",
            a.id,
            a.task.as_str(),
            a.state.as_str(),
            a.tool.as_deref().unwrap_or("?"),
        ));
    }
    Ok(())
}

/// `approve` / `deny`: the decision on one asked call.
pub(super) fn decide(
    c: &Client,
    run: &str,
    task: &str,
    id: &str,
    allow: bool,
    message: Option<String>,
    json: bool,
) -> Result<(), CliError> {
    let run = super::runref::resolve(run)?;
    let task = TaskId::parse(task).map_err(usage)?;
    let decision = if allow { views::Decision::Allow } else { views::Decision::Deny };
    let body = views::DecideBody { decision, message, by: "cli".into() };
    post(c, &run, &format!("/runs/{run}/tasks/{task}/approvals/{id}"), &body, json)
}

/// `harness top --once --json`: the frame's typed views — each run's row, and the run's detail
/// where the text frame lists its tasks (live, paused and blocked runs).
fn top_once_json(c: &Client, rt: &tokio::runtime::Runtime, runs: Vec<RunRow>, active: bool) -> Result<(), CliError> {
    let mut frame = Vec::new();
    for row in runs {
        if active && row.run.status.is_over() {
            continue;
        }
        let id = row.run.run_id.clone();
        let detail = if matches!(row.run.status, RunStatus::Running | RunStatus::Paused | RunStatus::Blocked) {
            let (s, b) = rt.block_on(c.call("GET", &format!("/runs/{id}"), None))?;
            Some(api_answer(s, &b)?)
        } else {
            None
        };
        frame.push(serde_json::json!({"row": row, "detail": detail}));
    }
    print_json(&frame);
    Ok(())
}

/// `harness top --once`: one frame — runs, then each live or paused run's tasks.
pub(super) fn top_once(c: &Client, active: bool, json: bool) -> Result<(), CliError> {
    let rt = client_rt()?;
    let mut runs: Vec<RunRow> = typed(serde_json::Value::Array(runs_matching(c, "", None)?), "GET /runs")?;
    // Live, blocked and paused runs first, as the dashboard shows them.
    super::top::order_runs(&mut runs);
    if json {
        return top_once_json(c, &rt, runs, active);
    }
    let mut lines = vec![format!(
        "{:<40} {:<8} {:>5} {:>7} {:>9} {:<10} {}",
        "RUN", "STATUS", "WAVE", "DONE", "COST", "PAUSED", "ATTENTION"
    )];
    let mut shown = 0;
    for RunRow { run: r, supervisor, .. } in &runs {
        if active && r.status.is_over() {
            continue;
        }
        shown += 1;
        let id = &r.run_id;
        let detail: Option<RunDetail> =
            if matches!(r.status, RunStatus::Running | RunStatus::Paused | RunStatus::Blocked) {
                let (s, b) = rt.block_on(c.call("GET", &format!("/runs/{id}"), None))?;
                Some(typed(api_answer(s, &b)?, &format!("GET /runs/{id}"))?)
            } else {
                None
            };
        let marks = detail.as_ref().map_or(0, |d| d.attention.len());
        let attention = if *supervisor == views::Supervisor::Gone {
            format!("supervisor gone: {}", recover_command(id))
        } else if let Some(b) = r.blocked_by.first() {
            format!("blocked by {}", b.task.as_str())
        } else if marks > 0 {
            format!("{marks} stall mark(s)")
        } else {
            String::new()
        };
        lines.push(format!(
            "{:<40} {:<8} {:>5} {:>7} {:>9} {:<10} {}",
            id.as_str(),
            r.status.label(),
            wave_of(r),
            done_of(r),
            money(Some(&r.usage)),
            r.pause_reason.map_or("", |p| p.as_str()),
            attention
        ));
        let Some(d) = detail else { continue };
        for w in d.plan.waves {
            for t in w.tasks {
                lines.push(format!(
                    "  {:<14} w{:<3} {:<16} {:>9}  {}",
                    t.id.as_str(),
                    w.wave,
                    t.facts.label(t.live_state),
                    money(t.usage.as_ref()),
                    t.facts.detail.as_deref().unwrap_or("").chars().take(60).collect::<String>()
                ));
            }
        }
    }
    if shown == 0 {
        lines.push(if active { "(no active runs)".into() } else { "(no runs)".into() });
    }
    for l in lines {
        out(l.trim_end());
    }
    Ok(())
}
