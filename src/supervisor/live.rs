//! The live channel of a claude task (`spec/WRAPPER-CONTRACT.md`, "Optional: live channel"): a FIFO
//! in runstate that is claude's stdin for the whole turn (`na.sh --interactive --input FIFO`). The
//! driver here owns its writing end: the prompt is its first line; steers and interrupts follow while
//! the turn runs; tool-permission prompts (`control_request` `can_use_tool`) are answered on it. It
//! reads the task's log — claude's stdout — for receipts (`--replay-user-messages` echoes each line's
//! `uuid` where it entered the conversation) and for each turn's `result`, and closes the channel
//! when a turn has ended with nothing it was given still waiting: claude then exits, and the task
//! goes on to its gate like any other.
//!
//! The scheduler reaches a running driver through the task's `Proc::live` (under the `running` lock);
//! the driver takes itself out of it, under the same lock, only when its command queue is empty, so a
//! command the scheduler managed to queue is never lost: either the driver handles it, or the
//! scheduler saw no driver and the steer stays queued for a resume.

use super::pipeline::Ctx;
use crate::ids::TaskId;
use crate::state::journal::{ControlRecord, Outcome, Record, Verb};
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::sync::{mpsc, watch};

/// How often the log is read for receipts, turn ends and permission prompts.
const POLL: Duration = Duration::from_millis(5);

/// Commands a queue holds at most (a steer beyond it falls back to a resume).
pub(crate) const QUEUE: usize = 64;

/// What the scheduler asks of a running driver.
#[derive(Debug)]
pub(crate) enum LiveCmd {
    /// Write the message into the running turn (`now`: `"priority":"now"`, cutting the turn).
    Steer { id: String, msg: String, now: bool },
    /// Abort the running turn without killing the process.
    Interrupt { by: String },
    /// An asked tool call was decided (recorded already): answer claude's prompt `id`.
    Decided { id: String, decision: super::approvals::Decision },
    /// End a session: close the channel once no turn runs (claude exits; the task goes on to its
    /// gate and commit).
    End { by: String },
}

/// The FIFO of `task`'s live channel, made fresh (mode 0600): `<runstate>/<slug>.live/<task>.in`.
pub(crate) fn make_fifo(runstate: &Path, slug: &str, task: &TaskId) -> std::io::Result<PathBuf> {
    let dir = runstate.join(format!("{slug}.live"));
    crate::os::home::private_dir(&dir)?;
    let path = dir.join(format!("{task}.in"));
    match std::fs::remove_file(&path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    nix::unistd::mkfifo(&path, nix::sys::stat::Mode::from_bits_truncate(0o600)).map_err(std::io::Error::from)?;
    Ok(path)
}

/// A user message as claude's stream-json input reads it, carrying our id as its `uuid`.
pub(crate) fn user_line(text: &str, uuid: &str, now: bool) -> Vec<u8> {
    let mut v = json!({"type": "user", "message": {"role": "user", "content": text}, "uuid": uuid});
    if now {
        v["priority"] = json!("now");
    }
    let mut line = serde_json::to_vec(&v).expect("a JSON value serializes");
    line.push(b'\n');
    line
}

fn interrupt_line(request_id: &str) -> Vec<u8> {
    let v = json!({"type": "control_request", "request_id": request_id, "request": {"subtype": "interrupt"}});
    let mut line = serde_json::to_vec(&v).expect("a JSON value serializes");
    line.push(b'\n');
    line
}

/// The answer to a `can_use_tool` prompt. Never `updatedPermissions`: that writes a rule into the
/// user's repository.
fn permission_line(request_id: &str, decision: &Value) -> Vec<u8> {
    let v = json!({"type": "control_response", "response": {"subtype": "success", "request_id": request_id, "response": decision}});
    let mut line = serde_json::to_vec(&v).expect("a JSON value serializes");
    line.push(b'\n');
    line
}

/// One live turn's driver.
pub(crate) struct Driver<'a> {
    pub ctx: &'a Ctx,
    pub task: &'a TaskId,
    /// The channel's writing end (`None` once closed).
    pub writer: Option<tokio::net::unix::pipe::Sender>,
    pub rx: mpsc::Receiver<LiveCmd>,
    pub log: PathBuf,
    /// Where this turn's output starts in the log.
    pub offset: u64,
    /// Lines written whose echo has not come yet (the prompt's, steers').
    pub outstanding: BTreeSet<String>,
    /// Steer ids among `outstanding` (their echo is journaled `taken`).
    pub steers: BTreeSet<String>,
    /// A sender to this driver's own queue (decisions of its approvals come back through it).
    pub me: mpsc::Sender<LiveCmd>,
    /// Approvals of this turn waiting for a decision, with their deadlines.
    pub waiting: std::collections::BTreeMap<String, tokio::time::Instant>,
    /// A session (`harness session`): the channel stays open between turns, closed by `End` or
    /// after this long with no turn running.
    pub session: Option<Duration>,
    /// Since when no turn runs (sessions only).
    pub idle_since: Option<tokio::time::Instant>,
    /// A turn ended (or the session went idle, or ended) with nothing waiting: close the channel,
    /// unless a command arrived meanwhile (checked by the loop, so handling never recurses).
    pub want_close: bool,
}

impl Driver<'_> {
    /// Writes the prompt, then serves commands and reads the log until `done` (the wrapper exited).
    pub async fn run(mut self, prompt: Option<&str>, prompt_id: &str, mut done: watch::Receiver<bool>) {
        match prompt {
            Some(prompt) => {
                if let Err(e) = self.write(&user_line(prompt, prompt_id, false)).await {
                    tracing::error!(RUN_ID = %self.ctx.run_id, TASK = %self.task, error = %e, "cannot write the prompt to the live channel");
                    self.close();
                }
                self.outstanding.insert(prompt_id.to_string());
            }
            // A session without a first prompt: idle until the first message.
            None => self.idle_since = Some(tokio::time::Instant::now()),
        }
        let mut partial: Vec<u8> = Vec::new();
        let mut file: Option<std::fs::File> = None;
        loop {
            let next_deadline = self.waiting.values().min().copied();
            let idle_end = match (self.session, self.idle_since) {
                (Some(limit), Some(since)) if self.writer.is_some() => Some(since + limit),
                _ => None,
            };
            tokio::select! {
                _ = tokio::time::sleep_until(idle_end.unwrap_or_else(tokio::time::Instant::now)), if idle_end.is_some() => {
                    tracing::info!(RUN_ID = %self.ctx.run_id, TASK = %self.task, "session idle limit reached: ending it");
                    self.session = None;
                    self.want_close = true;
                }
                _ = done.changed() => break,
                cmd = self.rx.recv(), if self.writer.is_some() => match cmd {
                    Some(cmd) => self.handle(cmd).await,
                    None => self.close(),
                },
                _ = tokio::time::sleep_until(next_deadline.unwrap_or_else(tokio::time::Instant::now)), if next_deadline.is_some() => {
                    self.time_outs().await;
                }
                _ = tokio::time::sleep(POLL) => {
                    for line in read_lines(&self.log, &mut file, &mut self.offset, &mut partial) {
                        self.line(&line).await;
                    }
                }
            }
            if std::mem::take(&mut self.want_close) && self.writer.is_some() {
                self.close_when_idle().await;
            }
        }
        // The wrapper is gone: whatever the driver still holds is handed back (the steers stay
        // queued in the journal and are resumed at the turn boundary; asked calls expire).
        self.close();
        for id in std::mem::take(&mut self.waiting).into_keys() {
            super::approvals::expire(self.ctx, self.task, &id, "the turn ended before a decision");
        }
        // To the log's end as the wrapper left it, a bite at a time (a process that escaped the
        // group and keeps writing does not keep this going).
        let end = std::fs::metadata(&self.log).map_or(0, |m| m.len());
        while self.offset < end {
            let before = self.offset;
            for line in read_lines(&self.log, &mut file, &mut self.offset, &mut partial) {
                self.receipt(&line);
            }
            if self.offset == before {
                break;
            }
        }
    }

    async fn write(&mut self, line: &[u8]) -> std::io::Result<()> {
        match self.writer.as_mut() {
            Some(w) => w.write_all(line).await,
            None => Err(std::io::Error::new(std::io::ErrorKind::BrokenPipe, "the live channel is closed")),
        }
    }

    async fn handle(&mut self, cmd: LiveCmd) {
        match cmd {
            LiveCmd::Steer { id, msg, now } => match self.write(&user_line(&msg, &id, now)).await {
                Ok(()) => {
                    self.idle_since = None;
                    self.outstanding.insert(id.clone());
                    self.steers.insert(id.clone());
                    self.journal(ControlRecord {
                        task: Some(self.task.clone()),
                        id: Some(id),
                        detail: Some(
                            if now { "written with priority now" } else { "written to the live channel" }.into(),
                        ),
                        ..Record::control(Verb::Steer, "live", Outcome::Delivered)
                    });
                }
                // Stays queued: the turn boundary resumes the session with it.
                Err(e) => {
                    tracing::warn!(RUN_ID = %self.ctx.run_id, TASK = %self.task, error = %e, "live steer not written")
                }
            },
            LiveCmd::Interrupt { by } => {
                let request_id = format!("interrupt-{}", uuid::Uuid::new_v4());
                if let Err(e) = self.write(&interrupt_line(&request_id)).await {
                    tracing::warn!(RUN_ID = %self.ctx.run_id, TASK = %self.task, error = %e, "interrupt not written");
                    return;
                }
                tracing::info!(RUN_ID = %self.ctx.run_id, TASK = %self.task, by = %by, "interrupt written");
            }
            LiveCmd::Decided { id, decision } => {
                self.waiting.remove(&id);
                self.answer(&id, &decision).await;
            }
            LiveCmd::End { by } => {
                tracing::info!(RUN_ID = %self.ctx.run_id, TASK = %self.task, by = %by, "session end asked");
                self.session = None;
                if self.idle_since.is_some() || self.outstanding.is_empty() && self.waiting.is_empty() {
                    self.want_close = true;
                }
            }
        }
    }

    async fn answer(&mut self, request_id: &str, decision: &super::approvals::Decision) {
        if let Err(e) = self.write(&permission_line(request_id, &decision.answer())).await {
            tracing::warn!(RUN_ID = %self.ctx.run_id, TASK = %self.task, error = %e, "permission answer not written");
        }
    }

    /// Approvals past their deadline: denied by `timeout` (unless a decision got there first).
    async fn time_outs(&mut self) {
        let now = tokio::time::Instant::now();
        let due: Vec<String> = self.waiting.iter().filter(|(_, d)| **d <= now).map(|(id, _)| id.clone()).collect();
        for id in due {
            self.waiting.remove(&id);
            if let Some(d) = super::approvals::time_out(self.ctx, self.task, &id) {
                self.ctx.approvals.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
                self.answer(&id, &d).await;
            }
        }
    }

    fn journal(&self, rec: ControlRecord) {
        if let Err(e) = tokio::task::block_in_place(|| self.ctx.journal.append(&rec.into())) {
            tracing::error!(RUN_ID = %self.ctx.run_id, TASK = %self.task, error = %e, "cannot journal a live receipt");
        }
    }

    /// A receipt: an echoed line's uuid.
    fn receipt(&mut self, line: &Value) {
        if line["type"] != "user" || line["isReplay"] != true {
            return;
        }
        let Some(uuid) = line["uuid"].as_str() else { return };
        self.outstanding.remove(uuid);
        if self.steers.remove(uuid) {
            self.journal(ControlRecord {
                task: Some(self.task.clone()),
                id: Some(uuid.to_string()),
                detail: Some("taken into the conversation".into()),
                ..Record::control(Verb::Steer, "live", Outcome::Taken)
            });
        }
    }

    async fn line(&mut self, line: &Value) {
        match line["type"].as_str() {
            Some("user") => self.receipt(line),
            Some("result") if self.outstanding.is_empty() => {
                if self.session.is_some() {
                    // A session stays open between turns.
                    self.idle_since = Some(tokio::time::Instant::now());
                } else {
                    self.want_close = true;
                }
            }
            Some("control_request") if line["request"]["subtype"] == "can_use_tool" => {
                let Some(id) = line["request_id"].as_str().filter(|i| !i.is_empty()).map(str::to_string) else {
                    return;
                };
                let tool = line["request"]["tool_name"].as_str().unwrap_or("(unnamed)").to_string();
                let input = line["request"]["input"].clone();
                let waiter = super::approvals::Waiter::Live { tx: self.me.clone() };
                match super::approvals::ask(self.ctx, self.task, &id, (&tool, &input), "live", waiter) {
                    Ok(super::approvals::Asked::Now(d)) => self.answer(&id, &d).await,
                    Ok(super::approvals::Asked::Pending) => {
                        let deadline = tokio::time::Instant::now() + self.ctx.plan.approval_timeout();
                        self.waiting.insert(id, deadline);
                    }
                    Err(e) => {
                        // Not on the record: not asked. Denied, saying why.
                        tracing::error!(RUN_ID = %self.ctx.run_id, TASK = %self.task, error = %e, "cannot journal an approval");
                        let d = super::approvals::Decision {
                            allow: false,
                            message: Some(format!("The approval could not be recorded ({e}); denied.")),
                            by: "supervisor".into(),
                        };
                        self.answer(&id, &d).await;
                    }
                }
            }
            _ => {}
        }
    }

    /// A turn has ended and nothing written is still waiting: close the channel (claude exits) —
    /// unless a command arrived meanwhile, which is handled instead.
    async fn close_when_idle(&mut self) {
        let pending = {
            let mut running = self.ctx.running.lock().unwrap_or_else(|p| p.into_inner());
            match self.rx.try_recv() {
                Ok(cmd) => Some(cmd),
                Err(_) => {
                    if let Some(p) = running.get_mut(self.task) {
                        p.live = None;
                    }
                    None
                }
            }
        };
        match pending {
            // A steer that came meanwhile: written, it makes the next turn.
            Some(cmd @ (LiveCmd::Steer { .. } | LiveCmd::Decided { .. })) => self.handle(cmd).await,
            Some(LiveCmd::End { .. }) => self.close(),
            // An interrupt of a turn that has just ended on its own: nothing to abort.
            Some(LiveCmd::Interrupt { by }) => {
                if let Some(p) = self.ctx.running.lock().unwrap_or_else(|p| p.into_inner()).get_mut(self.task) {
                    p.interrupted_by = None;
                }
                tracing::info!(RUN_ID = %self.ctx.run_id, TASK = %self.task, by = %by, "interrupt after the turn ended: nothing to abort");
                self.close();
            }
            None => self.close(),
        }
    }

    /// Takes the driver out of the scheduler's reach and closes the channel (claude reads EOF).
    fn close(&mut self) {
        if let Some(p) = self.ctx.running.lock().unwrap_or_else(|p| p.into_inner()).get_mut(self.task) {
            p.live = None;
        }
        self.writer = None;
        self.rx.close();
    }
}

/// The complete lines appended to `log` since `offset` that parse as JSON objects of interest
/// (receipts, turn ends, permission prompts); `offset` moves past them.
fn read_lines(log: &Path, file: &mut Option<std::fs::File>, offset: &mut u64, partial: &mut Vec<u8>) -> Vec<Value> {
    if file.is_none() {
        *file = std::fs::File::open(log).ok();
    }
    let Some(f) = file.as_mut() else { return Vec::new() };
    // A bounded bite per look (the next look reads on): the first look at a long session's log
    // does not hold it whole.
    let mut buf = Vec::new();
    let bite = (crate::os::tail::CHUNK * 16) as u64;
    if f.seek(SeekFrom::Start(*offset)).is_err() || f.take(bite).read_to_end(&mut buf).is_err() {
        return Vec::new();
    }
    *offset += buf.len() as u64;
    partial.extend_from_slice(&buf);
    if partial.len() > crate::os::tail::MAX_LINE && !partial.contains(&b'\n') {
        // A line too long to be one of interest: dropped (its rest fails to parse and is skipped).
        partial.clear();
    }
    let Some(end) = partial.iter().rposition(|&b| b == b'\n') else { return Vec::new() };
    let complete: Vec<u8> = partial.drain(..=end).collect();
    complete
        .split(|&b| b == b'\n')
        .filter(|l| {
            // Cheap filters first: most lines are stream deltas.
            let has = |n: &[u8]| l.windows(n.len()).any(|w| w == n);
            has(b"\"isReplay\":true") || has(b"\"type\":\"result\"") || has(b"\"can_use_tool\"")
        })
        .filter_map(|l| serde_json::from_slice::<Value>(l).ok())
        .collect()
}
