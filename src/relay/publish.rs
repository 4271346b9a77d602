//! What the relay publishes of one run (`spec/FLEET.md`), in this order each time the run's files
//! change: its journal's new lines, its tasks' new events, then its views — so a view that says a
//! task or run is over comes after everything it reflects. Each journal line and event is one
//! message whose id is its position, written only over the subject's last message as the relay
//! last saw it (expected-last-subject-sequence): nothing is published twice, out of order, or past
//! a gap. Where a subject stands is asked of the stream itself (its last message's headers) at
//! start and after any failure — never of a local file the relay could lose.

use crate::api::Api;
use crate::engine::normalize::{self, Context};
use crate::events::{Seq, Writer};
use crate::fleet::{self, View, header};
use crate::ids::{HostName, RunId, TaskId};
use crate::os::tail::Tail;
use async_nats::jetstream::{self, context::PublishErrorKind, message::PublishMessage};
use bytes::Bytes;
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{broadcast, watch};

/// What every run's follower shares.
pub struct Ctx {
    pub host: HostName,
    pub js: jetstream::Context,
    pub api: Arc<Api>,
    /// Each view subject's content hash as published (read from the stream at start), with the
    /// journal sequence a row covered.
    pub published: Mutex<HashMap<String, (String, u64)>>,
    /// The publishing connection (what the server it is connected to takes: `max_payload`).
    pub client: async_nats::Client,
    /// Runs stepping at once. A step holds up to `VIEWS_AT_ONCE` publish acknowledgements while
    /// it asks for more, and the JetStream context has 5,000 to give: unbounded, thousands of runs
    /// mirrored at once would each hold some and wait for more, for ever.
    pub steps: tokio::sync::Semaphore,
}

impl Ctx {
    /// The largest message the server takes: as it said when the connection was last made (64 KiB
    /// before it is ever made — a relay started while NATS is down).
    pub fn max_payload(&self) -> usize {
        match self.client.server_info().max_payload {
            0 => 64 * 1024,
            n => n,
        }
    }
}

/// Runs that step at once (`Ctx::steps`).
pub const STEPS_AT_ONCE: usize = 64;

/// Reads (of ~1 MiB each) of one file in one step: a run with a long backlog gives its turn up
/// between steps (the turns are first come, first served), so runs started meanwhile are not kept
/// waiting behind it.
const READS_PER_STEP: usize = 4;

/// Views a step publishes before it awaits their acknowledgements.
const VIEWS_AT_ONCE: usize = 16;

/// Where a subject stands: the stream sequence of its last message, and where the next line to
/// publish starts in its file (its ordinal and byte offset).
#[derive(Debug, Clone, Copy, Default)]
struct Position {
    subject_seq: u64,
    line: u64,
    at: u64,
}

/// A task's events as published: its position and the last event's seq.
#[derive(Debug, Clone, Default)]
struct EventsAt {
    pos: Position,
    last: Option<Seq>,
    /// The next line to read (a line may give no event, so this runs ahead of `pos`).
    next: Position,
    /// The session its events fall back on when a line names none (the last one seen).
    session: Option<String>,
}

/// Why a step stopped.
#[derive(Debug)]
enum Failed {
    /// Another writer moved the subject (or our view of it is stale): ask the stream again.
    Moved,
    Nats(String),
}

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failed::Moved => f.write_str("the stream moved under the relay: asking it where it stands"),
            Failed::Nats(e) => f.write_str(e),
        }
    }
}

/// Follows one run until its pointer is gone (`gone`), then says so on its row.
pub async fn follow_run(ctx: Arc<Ctx>, run: RunId, mut gone: watch::Receiver<bool>) {
    let mut s = RunSync {
        ctx,
        run,
        journal: None,
        tasks: BTreeMap::new(),
        views_at: None,
        live: false,
        replaced: false,
        journal_ino: None,
        resubscribe: false,
        sources_at: None,
        wakes: Vec::new(),
        files_fp: None,
        views_pending: false,
        too_big: Default::default(),
        more: false,
    };
    let mut backoff = Duration::from_millis(200);
    loop {
        if *gone.borrow() {
            s.tombstone().await;
            return;
        }
        // The wake-ups are subscribed before the files are read, and kept: a line written while a
        // step publishes wakes the next step at once.
        if s.wakes.is_empty() {
            s.wakes = s.subscribe();
        }
        let stepped = {
            let ctx = s.ctx.clone();
            let Ok(_turn) = ctx.steps.acquire().await else { return };
            s.step().await
        };
        let (failed, pause) = match stepped {
            Ok(()) => {
                backoff = Duration::from_millis(200);
                (false, if s.live || s.views_pending { Duration::from_secs(1) } else { Duration::from_secs(20) })
            }
            Err(e) => {
                tracing::warn!(RUN_ID = %s.run, error = %e, "publishing the run: trying again");
                s.forget();
                backoff = (backoff * 2).min(Duration::from_secs(5));
                (true, backoff)
            }
        };
        if failed {
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                _ = gone.changed() => {}
            }
            continue;
        }
        // The step found other files to follow (a task's log): subscribed anew, then read again
        // at once (what was written meanwhile woke nobody). Lines left unread: at once too.
        if std::mem::take(&mut s.resubscribe) | std::mem::take(&mut s.more) {
            continue;
        }
        tokio::select! {
            _ = woken(&mut s.wakes) => {}
            _ = tokio::time::sleep(pause) => {}
            _ = gone.changed() => {}
        }
    }
}

/// Resolves when any of `rxs` is woken — at once when one was meanwhile (never, for none).
async fn woken(rxs: &mut [broadcast::Receiver<()>]) {
    let mut any = false;
    for r in rxs.iter_mut() {
        while !matches!(
            r.try_recv(),
            Err(broadcast::error::TryRecvError::Empty | broadcast::error::TryRecvError::Closed)
        ) {
            any = true;
        }
    }
    if any {
        return;
    }
    if rxs.is_empty() {
        return std::future::pending().await;
    }
    let futs = rxs.iter_mut().map(|r| Box::pin(r.recv()));
    let _ = futures_util::future::select_all(futs).await;
}

struct RunSync {
    ctx: Arc<Ctx>,
    run: RunId,
    /// `None`: ask the stream.
    journal: Option<Position>,
    /// Each task's events (its log, adapter and session looked up with the journal, and again
    /// every two seconds).
    tasks: BTreeMap<TaskId, TaskPub>,
    /// When views were last computed (they are at most every two seconds for log-only changes).
    views_at: Option<(tokio::time::Instant, u64)>,
    live: bool,
    /// The journal is not the one the stream mirrors (replaced by hand): not published further.
    replaced: bool,
    /// The journal file's inode when it was last read.
    journal_ino: Option<u64>,
    /// The files to follow changed during the step: subscribe and read again at once.
    resubscribe: bool,
    /// When the tasks' sources were last looked up.
    sources_at: Option<tokio::time::Instant>,
    /// Wake-ups of the run's files (subscribed again when its tasks' logs change).
    wakes: Vec<broadcast::Receiver<()>>,
    /// The run's files (size, mtime) at the last step: a step of a run nothing runs, with no file
    /// changed, publishes nothing and computes nothing.
    files_fp: Option<u64>,
    /// The last step left the views behind the files (computed less than two seconds before).
    views_pending: bool,
    /// The views too large to publish, said once each (`publish_views`).
    too_big: std::collections::HashSet<String>,
    /// The last step left lines unread (`READS_PER_STEP`): the next one comes at once.
    more: bool,
}

impl RunSync {
    fn forget(&mut self) {
        self.journal = None;
        for t in self.tasks.values_mut() {
            t.at = None;
        }
    }

    /// The files whose change wakes this run: its journal, liveness and each task's log.
    fn subscribe(&self) -> Vec<broadcast::Receiver<()>> {
        let hub = &self.ctx.api.hub;
        self.watched_paths().iter().filter_map(|p| hub.subscribe(p)).collect()
    }

    fn watched_paths(&self) -> Vec<PathBuf> {
        let Ok(p) = self.ctx.api.durable.pointer(&self.run) else { return Vec::new() };
        let mut paths = vec![p.journal_path(), p.liveness_path(), p.plan_path()];
        paths.extend(self.tasks.values().map(|t| t.src.logfile.clone()));
        paths
    }

    /// Journal, then events, then views (a live run's known tasks' events first).
    async fn step(&mut self) -> Result<(), Failed> {
        // A live run's logs of the tasks already followed first: an engine's line is on its way
        // before the run's other files are looked at again (its journal's subject is another).
        let synced = self.live && !self.tasks.is_empty();
        if synced {
            self.sync_tasks().await?;
        }
        let journal_changed = self.publish_journal().await?;
        // A run nothing runs whose files did not change since the last step has nothing new to
        // publish: not even its views are computed again (a home of thousands of finished runs
        // costs a few stat calls per run per look).
        let fp = {
            let (paths, ptr) = (self.watched_paths(), self.ctx.api.durable.pointer(&self.run).ok());
            crate::api::blocking(move || files_fp(&paths, ptr.as_ref())).await.unwrap_or(0)
        };
        if !journal_changed && !self.live && self.files_fp == Some(fp) && self.views_at.is_some() {
            return Ok(());
        }
        // The tasks and their logs change with the journal (or a liveness file): looked at again
        // then, and every two seconds — not at every line an engine prints.
        let look = journal_changed || self.sources_at.is_none_or(|t| t.elapsed() >= Duration::from_secs(2));
        if look {
            let (api, run) = (self.ctx.api.clone(), self.run.clone());
            let sources = crate::api::blocking(move || sources_of(&api, &run)).await.unwrap_or_default();
            if sources.iter().map(|(t, s)| (t, &s.logfile)).ne(self.tasks.iter().map(|(t, p)| (t, &p.src.logfile))) {
                self.wakes.clear();
                self.resubscribe = true;
            }
            self.tasks.retain(|t, _| sources.contains_key(t));
            for (t, src) in sources {
                match self.tasks.get_mut(&t) {
                    Some(p) => p.src = src,
                    None => {
                        let p = TaskPub {
                            ctx: self.ctx.clone(),
                            run: self.run.clone(),
                            task: t.clone(),
                            src,
                            at: None,
                            times: None,
                            ino: None,
                            stopped: false,
                        };
                        self.tasks.insert(t, p);
                    }
                }
            }
            self.sources_at = Some(tokio::time::Instant::now());
        }
        // Synced (again) when the tasks were looked at anew: a task or a log may be new.
        if !synced || look {
            self.sync_tasks().await?;
        }
        let covers = self.journal.map_or(0, |j| j.subject_seq);
        // Views at once when the journal moved; else (usage, idle times) every two seconds at most,
        // so a busy log's events are not held up behind them.
        // A journal with lines left for the next step (a backlog) has its views every two seconds
        // too, not at each step's ~4 MiB (each computation reads the whole journal again).
        let due = self.views_at.is_none_or(|(at, c)| {
            at.elapsed() >= Duration::from_secs(2) || (!self.more && (journal_changed || c != covers))
        });
        // The files are taken as published only once views reflecting them are: a change held
        // back by the two seconds is looked at again soon, not at the run's next change.
        self.views_pending = !due;
        if due {
            self.publish_views(covers).await?;
            self.views_at = Some((tokio::time::Instant::now(), covers));
            // Logs synced before the fingerprint was taken may hold a line it counts but the step
            // did not publish: a run found no longer live is looked at in full at its next step;
            // so is one whose lines were left for the next step (`more`).
            self.files_fp = (!self.more && (!synced || self.live)).then_some(fp);
        }
        Ok(())
    }

    /// Every task's subject at once: one message at a time per subject, the subjects in parallel.
    async fn sync_tasks(&mut self) -> Result<(), Failed> {
        let results = futures_util::future::join_all(self.tasks.values_mut().map(TaskPub::sync)).await;
        for more in results {
            self.more |= more?;
        }
        Ok(())
    }

    /// The journal's lines not yet published; whether there were any.
    async fn publish_journal(&mut self) -> Result<bool, Failed> {
        let subject = fleet::journal_subject(&self.ctx.host, &self.run);
        if self.replaced {
            // Where the mirror stopped stays known (after a failure too): the row covers the
            // journal's subject up to there, and says which line that was.
            if self.journal.is_none() {
                self.journal = Some(ask(&self.ctx.js, fleet::JOURNAL_STREAM, &subject).await?.0);
            }
            return Ok(false);
        }
        let Ok(pointer) = self.ctx.api.durable.pointer(&self.run) else { return Ok(false) };
        let path = pointer.journal_path();
        // Another file under the journal's name (replaced by hand), or a shorter one: what the
        // stream ends with is checked against it again before anything more is published.
        let file = {
            let p = path.clone();
            crate::api::blocking(move || {
                std::fs::metadata(&p).ok().map(|m| (std::os::unix::fs::MetadataExt::ino(&m), m.len()))
            })
            .await
            .ok()
            .flatten()
        };
        if let (Some((ino, len)), Some(pos)) = (file, self.journal)
            && (self.journal_ino.is_some_and(|i| i != ino) || len < pos.at)
        {
            self.journal = None;
        }
        self.journal_ino = file.map(|f| f.0);
        let mut pos = match self.journal {
            Some(p) => p,
            None => {
                let (pos, _, last) = ask(&self.ctx.js, fleet::JOURNAL_STREAM, &subject).await?;
                // The line the stream ends with must be the journal's at that place: a journal
                // replaced under the run id (only by hand) is not mirrored over the old one's lines.
                let (lines, _) = read_lines(path.clone(), pos).await;
                if pos.line > 0 && lines.first().is_none_or(|l| l.0 != pos.line || l.2 != last) {
                    tracing::error!(RUN_ID = %self.run, line = pos.line, "the journal is not the one the fleet mirrors (replaced under the run id?): it is not published further");
                    self.replaced = true;
                    self.journal = Some(pos);
                    return Ok(false);
                }
                pos
            }
        };
        self.journal = Some(pos);
        let mut any = false;
        for read in 0.. {
            if read == READS_PER_STEP {
                self.more = true;
                break;
            }
            let (lines, _) = read_lines(path.clone(), pos).await;
            if !lines.iter().any(|l| l.0 > pos.line) {
                break;
            }
            for (line, at, raw) in lines {
                if line > pos.line {
                    pos = self.publish_line(&subject, pos, (line, at, raw)).await?;
                    self.journal = Some(pos);
                    any = true;
                }
            }
        }
        Ok(any)
    }

    /// One journal line, over the subject's last message: where the subject then stands.
    async fn publish_line(
        &self,
        subject: &str,
        mut pos: Position,
        (line, at, raw): (u64, u64, Vec<u8>),
    ) -> Result<Position, Failed> {
        {
            let mut h = async_nats::HeaderMap::new();
            h.insert(header::LINE, line.to_string().as_str());
            h.insert(header::AT, at.to_string().as_str());
            let msg = PublishMessage::build()
                .payload(Bytes::from(raw))
                .headers(h)
                .message_id(fleet::journal_msg_id(&self.ctx.host, &self.run, line))
                .expected_last_subject_sequence(pos.subject_seq);
            pos.subject_seq = publish(&self.ctx.js, subject, msg).await?;
            pos.line = line;
            pos.at = at;
        }
        Ok(pos)
    }

    /// The run's views (row, detail, approvals, each task), each published when it changed (the
    /// row also when it covers more of the journal).
    async fn publish_views(&mut self, covers: u64) -> Result<(), Failed> {
        let (api, run, host) = (self.ctx.api.clone(), self.run.clone(), self.ctx.host.clone());
        let stopped = self.replaced.then(|| {
            format!(
                "the host's journal of this run was replaced under its id: the fleet mirrors it up to line {}, \
                 read the rest on host {host}",
                self.journal.map_or(0, |j| j.line)
            )
        });
        let (views, live) =
            crate::api::blocking(move || compute_views(&api, &run, &host, stopped)).await.unwrap_or_default();
        self.live = live;
        let max_payload = self.ctx.max_payload();
        // Each view is a subject of its own (no order between them): sent `VIEWS_AT_ONCE` at a
        // time, then their acknowledgements awaited — not a round trip each.
        let mut sent = Vec::new();
        for (view, json) in views {
            if sent.len() == VIEWS_AT_ONCE {
                self.acknowledged(std::mem::take(&mut sent)).await?;
            }
            let subject = fleet::view_subject(&self.ctx.host, &self.run, &view);
            let hash = hash_of(&json);
            let row_covers = if view == View::Row { covers } else { 0 };
            let same = self.ctx.published.lock().unwrap_or_else(|p| p.into_inner()).get(&subject).cloned();
            if same.is_some_and(|(h, c)| h == hash && c >= row_covers) {
                continue;
            }
            let mut h = async_nats::HeaderMap::new();
            h.insert(header::HASH, hash.as_str());
            if view == View::Row {
                h.insert(header::COVERS, covers.to_string().as_str());
            }
            // A view the server would refuse (over its max_payload) is not sent: said once, and the
            // fleet keeps the view last published (the run's other views go on).
            if json.len() + 1024 > max_payload {
                if self.too_big.insert(subject.clone()) {
                    tracing::error!(RUN_ID = %self.run, subject, bytes = json.len(), max_payload,
                        "a view is larger than the NATS server takes: not published (raise max_payload)");
                }
                continue;
            }
            self.too_big.remove(&subject);
            let msg = PublishMessage::build().payload(Bytes::from(json)).headers(h);
            match self.ctx.js.send_publish(subject.clone(), msg).await {
                Ok(ack) => sent.push((subject, hash, row_covers, ack)),
                Err(e) => {
                    // What was sent before is taken as published when acknowledged: not sent again.
                    let _ = self.acknowledged(sent).await;
                    return Err(Failed::Nats(e.to_string()));
                }
            }
        }
        self.acknowledged(sent).await
    }

    /// Awaits views' acknowledgements, each then taken as published.
    async fn acknowledged(
        &self,
        sent: Vec<(String, String, u64, jetstream::context::PublishAckFuture)>,
    ) -> Result<(), Failed> {
        // Every acknowledgement is awaited, together (an ack's time runs from when it is awaited:
        // one after another, a server gone would take 16 waits), and one failing does not make
        // the others' views unsent.
        let waits = sent.into_iter().map(|(subject, hash, row_covers, ack)| async move {
            (subject, hash, row_covers, tokio::time::timeout(fleet::ACK_WAIT, ack).await)
        });
        let mut failed = None;
        for (subject, hash, row_covers, acked) in futures_util::future::join_all(waits).await {
            match acked {
                Ok(Ok(_)) => {
                    self.ctx.published.lock().unwrap_or_else(|p| p.into_inner()).insert(subject, (hash, row_covers));
                }
                Ok(Err(e)) => failed = failed.or(Some(Failed::Nats(e.to_string()))),
                Err(_) => failed = failed.or(Some(Failed::Nats("no acknowledgement from JetStream in time".into()))),
            }
        }
        failed.map_or(Ok(()), Err)
    }

    /// The run is gone from the home (pruned): its row says so, and the fleet drops it.
    async fn tombstone(&self) {
        withdraw(&self.ctx.js, &self.ctx.host, &self.run).await;
        let subject = fleet::view_subject(&self.ctx.host, &self.run, &View::Row);
        self.ctx.published.lock().unwrap_or_else(|p| p.into_inner()).remove(&subject);
    }
}

/// Withdraws `run`'s row from the fleet (the run is gone from its home): an empty row that says so.
pub async fn withdraw(js: &jetstream::Context, host: &HostName, run: &RunId) {
    let subject = fleet::view_subject(host, run, &View::Row);
    let mut h = async_nats::HeaderMap::new();
    h.insert(header::GONE, "pruned");
    let msg = PublishMessage::build().payload(Bytes::new()).headers(h);
    match js.send_publish(subject, msg).await {
        Ok(ack) => {
            let _ = tokio::time::timeout(fleet::ACK_WAIT, ack).await;
        }
        Err(e) => tracing::warn!(RUN_ID = %run, error = %e, "a pruned run's row could not be withdrawn"),
    }
}

/// Where `subject` stands in the stream: its last message's headers (nothing: the start).
async fn ask(
    js: &jetstream::Context,
    stream: &str,
    subject: &str,
) -> Result<(Position, Option<String>, Bytes), Failed> {
    let s = js.get_stream_no_info(stream).await.map_err(|e| Failed::Nats(e.to_string()))?;
    match s.get_last_raw_message_by_subject(subject).await {
        Ok(m) => {
            let h = |n: &str| m.headers.get(n).map(|v| v.as_str().to_string());
            let num = |n: &str| h(n).and_then(|v| v.parse::<u64>().ok());
            let line = num(header::LINE).or_else(|| h(header::SEQ).and_then(|s| Seq::parse(&s).ok()).map(|s| s.line));
            let pos = Position { subject_seq: m.sequence, line: line.unwrap_or(0), at: num(header::AT).unwrap_or(0) };
            Ok((pos, h(header::SEQ), m.payload))
        }
        Err(e) if matches!(e.kind(), jetstream::stream::LastRawMessageErrorKind::NoMessageFound) => {
            Ok((Position::default(), None, Bytes::new()))
        }
        Err(e) => Err(Failed::Nats(e.to_string())),
    }
}

/// Publishes one message over the subject's last; returns its stream sequence.
async fn publish(js: &jetstream::Context, subject: &str, msg: PublishMessage) -> Result<u64, Failed> {
    let ack = js.send_publish(subject.to_string(), msg).await.map_err(|e| Failed::Nats(e.to_string()))?;
    match tokio::time::timeout(fleet::ACK_WAIT, ack).await {
        Ok(Ok(a)) => Ok(a.sequence),
        Ok(Err(e)) if matches!(e.kind(), PublishErrorKind::WrongLastSequence) => Err(Failed::Moved),
        Ok(Err(e)) => Err(Failed::Nats(e.to_string())),
        Err(_) => Err(Failed::Nats("no acknowledgement from JetStream in time".into())),
    }
}

/// One task's events: where its subject stands, and what is needed to publish on from there.
struct TaskPub {
    ctx: Arc<Ctx>,
    run: RunId,
    task: TaskId,
    src: Arc<crate::api::stream::Source>,
    /// `None`: ask the stream.
    at: Option<EventsAt>,
    /// The log's line times (`LOG.times`), read on as the log grows.
    times: Option<crate::os::stamp::Times>,
    /// The log file's inode as last read.
    ino: Option<u64>,
    /// The log under the task's name is not the one mirrored (replaced or cut under its name): its
    /// events are not published further (never another file's lines under the same seqs).
    stopped: bool,
}

impl TaskPub {
    /// The task's log published from where its subject stands, `READS_PER_STEP` reads at most:
    /// whether lines may be left.
    async fn sync(&mut self) -> Result<bool, Failed> {
        if self.stopped {
            return Ok(false);
        }
        let subject = fleet::events_subject(&self.ctx.host, &self.run, &self.task);
        let mut at = match self.at.clone() {
            Some(a) => a,
            None => {
                // The last published line again (its later events may be missing), then on.
                let (pos, seq, last) = ask(&self.ctx.js, fleet::EVENTS_STREAM, &subject).await?;
                // The session the events fell back on goes on from the last one published (a
                // restart in the middle of a turn whose lines name none, as codex's, keeps it).
                let session = serde_json::from_slice::<serde_json::Value>(&last)
                    .ok()
                    .and_then(|v| v.get("session").and_then(|s| s.as_str()).map(str::to_string));
                EventsAt { pos, last: seq.and_then(|s| Seq::parse(&s).ok()), next: pos, session }
            }
        };
        self.at = Some(at.clone());
        for _ in 0..READS_PER_STEP {
            let (lines, next, stamps, file) = self.read_stamped(at.next).await?;
            // Another file under the log's name, one shorter than what was mirrored, or one whose
            // byte before the next line is not a line's end: that log is not followed further.
            if let Some(f) = file {
                if self.ino.is_some_and(|i| i != f.ino) || f.len < at.next.at || !f.line_start {
                    tracing::error!(RUN_ID = %self.run, TASK = %self.task, line = at.pos.line,
                        "the task's log is not the one the fleet mirrors (replaced or cut under its name?): its events are not published further");
                    self.stopped = true;
                    return Ok(false);
                }
                self.ino = Some(f.ino);
            }
            if lines.is_empty() {
                return Ok(false);
            }
            self.publish_lines(&subject, &mut at, lines, stamps).await?;
            at.next = next;
            self.at = Some(at.clone());
        }
        Ok(true)
    }

    /// The log's complete lines from `pos`, with their times — read off the async workers in one
    /// go: the times from a bounded window of the sidecar, kept from one read to the next (found
    /// from the first line when there is none yet).
    async fn read_stamped(&mut self, pos: Position) -> Result<Stamped, Failed> {
        let (log, held) = (self.src.logfile.clone(), self.times.take());
        let (lines, next, times, stamps, file) = tokio::task::spawn_blocking(move || {
            let file = log_file(&log, pos.at);
            let (lines, next) = read_lines_now(&log, pos);
            if lines.is_empty() {
                return (lines, next, held, Vec::new(), file);
            }
            let mut times = match held {
                Some(mut t) => {
                    t.refresh();
                    t
                }
                None => crate::os::stamp::Times::from_line(&log, lines[0].0),
            };
            let stamps: Vec<Option<String>> = lines.iter().map(|(l, _, _)| times.at(*l)).collect();
            (lines, next, Some(times), stamps, file)
        })
        .await
        .map_err(|e| Failed::Nats(e.to_string()))?;
        self.times = times;
        Ok((lines, next, stamps, file))
    }

    /// The events of `lines` (their times `stamps`) past the last published, each over the
    /// subject's last message.
    async fn publish_lines(
        &mut self,
        subject: &str,
        at: &mut EventsAt,
        lines: Vec<(u64, u64, Vec<u8>)>,
        stamps: Vec<Option<String>>,
    ) -> Result<(), Failed> {
        let (run, tname) = (self.run.to_string(), self.task.to_string());
        let w = Writer::new(&run, &tname);
        let now = crate::state::journal::now_rfc3339();
        let src = self.src.clone();
        let max_payload = self.ctx.max_payload();
        for ((line, start, raw), stamped) in lines.into_iter().zip(stamps) {
            let session = src.session.clone().or_else(|| at.session.clone());
            let ctx = Context {
                run: &run,
                task: &tname,
                session: session.as_deref(),
                observed_ts: stamped.as_deref().unwrap_or(&now),
            };
            for e in normalize::normalize_line(src.adapter, line, &raw, &ctx) {
                if at.last.is_some_and(|l| e.seq <= l) {
                    continue;
                }
                if let Some(s) = &e.session {
                    at.session = Some(s.to_string());
                }
                let mut json = Vec::with_capacity(256);
                w.write_line(&e, &mut json);
                json.pop();
                let json = fit(max_payload, json, &e);
                let mut h = async_nats::HeaderMap::new();
                h.insert(header::SEQ, e.seq.to_string().as_str());
                h.insert(header::AT, start.to_string().as_str());
                let msg = PublishMessage::build()
                    .payload(Bytes::from(json))
                    .headers(h)
                    .message_id(fleet::event_msg_id(&self.ctx.host, &self.run, &self.task, &e.seq.to_string()))
                    .expected_last_subject_sequence(at.pos.subject_seq);
                at.pos.subject_seq = publish(&self.ctx.js, subject, msg).await?;
                at.pos.line = line;
                at.pos.at = start;
                at.last = Some(e.seq);
                self.at = Some(at.clone());
            }
        }
        Ok(())
    }
}

/// An event too large for one message becomes an `error` event at its seq saying where to read it
/// whole (the host's own `/events`).
fn fit(max_payload: usize, json: Vec<u8>, e: &crate::events::Event<'_>) -> Vec<u8> {
    if json.len() + 4096 <= max_payload {
        return json;
    }
    let big = crate::events::Event {
        data: crate::events::Data::Error {
            fatal: false,
            message: Some(std::borrow::Cow::Owned(format!(
                "event {} is {} bytes, more than one message of the fleet's NATS holds: read it from the host's own API (/runs/{}/tasks/{}/events)",
                e.seq,
                json.len(),
                e.run,
                e.task
            ))),
            reason: Some(std::borrow::Cow::Borrowed("too_large")),
            raw: None,
        },
        ..e.clone()
    };
    let mut out = Vec::new();
    Writer::new(e.run, e.task).write_line(&big, &mut out);
    out.pop();
    out
}

/// The complete lines of `path` from `pos` (the line there, and what follows): each with its
/// ordinal and where it starts, and where the line after them starts. Read off the async workers,
/// at most ~1 MiB a call (the caller calls again).
async fn read_lines(path: PathBuf, pos: Position) -> (Vec<(u64, u64, Vec<u8>)>, Position) {
    tokio::task::spawn_blocking(move || read_lines_now(&path, pos)).await.unwrap_or((Vec::new(), pos))
}

/// Lines read, with where the line after them starts, their times, and what the file was
/// (`TaskPub::read_stamped`).
type Stamped = (Vec<(u64, u64, Vec<u8>)>, Position, Vec<Option<String>>, Option<LogFile>);

/// A log file as a read found it: its inode, its length, and whether `at` starts a line there.
#[derive(Debug, Clone, Copy)]
struct LogFile {
    ino: u64,
    len: u64,
    line_start: bool,
}

/// `path` as it is now, `at` the offset the next read starts at (`None`: no such file yet).
fn log_file(path: &std::path::Path, at: u64) -> Option<LogFile> {
    use std::os::unix::fs::{FileExt, MetadataExt};
    let f = std::fs::File::open(path).ok()?;
    let m = f.metadata().ok()?;
    let mut b = [0u8; 1];
    let line_start = at == 0 || at > m.len() || (f.read_at(&mut b, at - 1).ok() == Some(1) && b[0] == b'\n');
    Some(LogFile { ino: m.ino(), len: m.len(), line_start })
}

/// `read_lines`, on this thread.
fn read_lines_now(path: &std::path::Path, pos: Position) -> (Vec<(u64, u64, Vec<u8>)>, Position) {
    let first = Position { line: pos.line.max(1), at: if pos.line == 0 { 0 } else { pos.at }, ..pos };
    let mut tail = Tail::at_offset(path, first.at, first.line);
    let mut out = Vec::new();
    let mut bytes = 0usize;
    while bytes < 1 << 20 {
        let before = tail.read_offset();
        let Ok((lines, _)) = tail.read_available_at(256 * 1024) else { break };
        // A read that ends inside a long line gives no line but moves on: read on to its end.
        if lines.is_empty() && tail.read_offset() == before {
            break;
        }
        // The line at `pos` (the journal's last published, read again to check it) is not
        // counted: one of a MiB or more would otherwise be all a read ever gives.
        bytes += lines.iter().filter(|l| l.0 > pos.line).map(|l| l.2.len()).sum::<usize>();
        out.extend(lines);
    }
    (out, Position { line: tail.next_line(), at: tail.next_offset(), ..first })
}

/// A hash of the files' sizes and modification times (and the pointer's liveness path: a pointer
/// replaced names other files).
fn files_fp(paths: &[PathBuf], pointer: Option<&crate::state::registry::Pointer>) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    pointer.map(|p| p.journal_path()).hash(&mut h);
    for p in paths {
        let m = std::fs::metadata(p).ok();
        (m.as_ref().map(|m| m.len()), m.and_then(|m| m.modified().ok())).hash(&mut h);
    }
    h.finish()
}

/// Each task's source (its log, adapter and session), planned or only journaled.
fn sources_of(api: &Api, run: &RunId) -> BTreeMap<TaskId, Arc<crate::api::stream::Source>> {
    let Ok(files) = api.durable.load(run) else { return BTreeMap::new() };
    let planned = files.plan.iter().flat_map(|p| p.tasks.iter().map(|t| t.id.clone()));
    let ids: Vec<TaskId> = planned.chain(files.view.tasks.keys().cloned()).collect();
    ids.into_iter().filter_map(|t| crate::api::stream::source(api, run, &t).ok().map(|s| (t, Arc::new(s)))).collect()
}

/// Every view of the run as its host's API answers it, with `host` said; and whether its
/// supervisor is live.
/// `stopped`: why the run's journal is no longer mirrored (said on its row and detail).
fn compute_views(api: &Api, run: &RunId, host: &HostName, stopped: Option<String>) -> (Vec<(View, Vec<u8>)>, bool) {
    let mut out = Vec::new();
    if let Some(row) = api.durable.overview.row(run)
        && let Ok(mut row) = serde_json::from_slice::<crate::views::RunRow>(&row)
    {
        row.host = Some(host.clone());
        row.mirror_stopped = stopped.clone();
        out.push((View::Row, serde_json::to_vec(&row).unwrap_or_default()));
    }
    let Ok(mut detail) = api.durable.run_detail(run) else { return (out, false) };
    let live = detail.live;
    detail.host = Some(host.clone());
    detail.mirror_stopped = stopped;
    let tasks: Vec<TaskId> = detail.task_ids();
    out.push((View::Detail, serde_json::to_vec(&detail).unwrap_or_default()));
    if let Ok(mut a) = api.durable.approvals(run, None) {
        a.host = Some(host.clone());
        out.push((View::Approvals, serde_json::to_vec(&a).unwrap_or_default()));
    }
    for t in tasks {
        if let Ok(mut d) = api.durable.task_detail(run, &t) {
            d.host = Some(host.clone());
            out.push((View::Task(t), serde_json::to_vec(&d).unwrap_or_default()));
        }
    }
    (out, live)
}

fn hash_of(b: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(b).iter().take(12).map(|x| format!("{x:02x}")).collect()
}
