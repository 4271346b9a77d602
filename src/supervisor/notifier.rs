//! The run's notifier: tails the run's journal and delivers each attention-worthy record
//! (`crate::state::notify::event_of`) to the hooks of `$HARNESS_HOME/notify.json` that want its kind.
//! At least once: the mark (`<runstate>/<slug>.notify.json`: the journal line and byte up to which
//! every delivery was made or given up) is written after each delivered line, so a supervisor that
//! dies mid-delivery redelivers only that line. Deduplicated on our side: one record, one id, one
//! successful delivery per hook. Retries back off (0.5, 1, 2, 4, 8 s); a hook that still fails is
//! logged to journald and skipped. It runs beside the scheduler and never blocks or fails the run.

use crate::ids::RunId;
use crate::state::notify::{self, Event, Hook};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::sync::watch;

/// Waits between the attempts of one delivery.
const BACKOFF: [Duration; 5] = [
    Duration::from_millis(500),
    Duration::from_secs(1),
    Duration::from_secs(2),
    Duration::from_secs(4),
    Duration::from_secs(8),
];
/// How often the journal is looked at.
const POLL: Duration = Duration::from_millis(200);
/// How long a supervisor that is ending waits for the last notifications.
pub(super) const DRAIN: Duration = Duration::from_secs(30);

#[derive(serde::Serialize, serde::Deserialize, Default, Clone, Copy)]
struct Mark {
    /// Lines of the journal handled (the next one to look at is `line + 1`).
    line: u64,
    /// Their bytes.
    offset: u64,
}

pub(super) struct Notifier {
    pub stop: watch::Sender<bool>,
    pub task: tokio::task::JoinHandle<()>,
}

/// Starts the notifier of `run`. A run seen for the first time starts at its journal's end.
pub(super) fn spawn(home: PathBuf, run: RunId, journal: PathBuf, mark_path: PathBuf) -> Notifier {
    let (stop, stopped) = watch::channel(false);
    let task = tokio::spawn(serve(home, run, journal, mark_path, stopped));
    Notifier { stop, task }
}

fn read_mark(path: &Path, journal: &Path) -> Mark {
    if let Some(m) = std::fs::read(path).ok().and_then(|b| serde_json::from_slice::<Mark>(&b).ok()) {
        return m;
    }
    // First start: from the end (what happened before this run had a notifier is not news). The
    // start is saved at once: a supervisor killed before its first delivery is done must leave the
    // next one a mark that still has that delivery ahead of it.
    // Its newlines counted in bounded chunks (a journal may be large): the end of its last whole line.
    let (mut lines, mut end, mut at) = (0u64, 0u64, 0u64);
    if let Ok(mut f) = std::fs::File::open(journal) {
        let mut buf = vec![0u8; 1 << 20];
        while let Ok(n) = std::io::Read::read(&mut f, &mut buf) {
            if n == 0 {
                break;
            }
            for i in memchr::memchr_iter(b'\n', &buf[..n]) {
                lines += 1;
                end = at + i as u64 + 1;
            }
            at += n as u64;
        }
    }
    let mark = Mark { line: lines, offset: end };
    save(path, &mark);
    mark
}

async fn serve(home: PathBuf, run: RunId, journal: PathBuf, mark_path: PathBuf, mut stopped: watch::Receiver<bool>) {
    // Held for the notifier's life (a `harness notify flush` running now is waited for).
    let lock = {
        let p = mark_path.clone();
        tokio::task::spawn_blocking(move || mark_lock(&p).and_then(|f| crate::os::flock::Flock::exclusive(&f))).await
    };
    let _held = match lock {
        Ok(Ok(l)) => Some(l),
        Ok(Err(e)) => {
            tracing::warn!(RUN_ID = %run, error = %e, "cannot lock the notification mark: a `harness notify flush` now could send twice");
            None
        }
        Err(_) => None,
    };
    let mut mark = read_mark(&mark_path, &journal);
    let mut drain_until: Option<tokio::time::Instant> = None;
    let mut said: Option<String> = None;
    loop {
        // While notify.json is invalid the mark stays where it is: what happens meanwhile is sent once
        // the file is fixed. Each distinct problem is logged once.
        let caught_up = match notify::load(&home) {
            Ok(h) => {
                if said.take().is_some() {
                    tracing::info!(RUN_ID = %run, "notify.json is valid again: sending what was held");
                }
                step(&run, &journal, &mark_path, &mut mark, &h.unwrap_or_default()).await;
                true
            }
            Err(e) => {
                let e = e.to_string();
                if said.as_deref() != Some(e.as_str()) {
                    tracing::warn!(RUN_ID = %run, error = %e, "notify.json is invalid: notifications are held until it is fixed");
                    said = Some(e);
                }
                // An ending supervisor does not wait out its drain for a file nobody is fixing.
                if drain_until.is_some() {
                    tracing::warn!(RUN_ID = %run, "the supervisor is ending with notify.json invalid: what it held is left on the record; once the file is fixed, `harness notify flush` sends it");
                    return;
                }
                false
            }
        };
        if let Some(until) = drain_until {
            if caught_up || tokio::time::Instant::now() >= until {
                if !caught_up {
                    tracing::warn!(RUN_ID = %run, "the supervisor is ending: notifications not yet delivered are left; once notify.json is fixed, `harness notify flush` sends them");
                }
                return;
            }
            tokio::time::sleep(POLL).await;
            continue;
        }
        tokio::select! {
            _ = tokio::time::sleep(POLL) => {}
            _ = stopped.changed() => drain_until = Some(tokio::time::Instant::now() + DRAIN),
        }
    }
}

/// What `flush` did for a run.
pub enum Flushed {
    /// A notifier serves the run now (it holds the mark's lock): left to it.
    Live,
    /// The run never had a notifier (no mark): nothing was held.
    Never,
    /// This many events went to a hook.
    Sent(usize),
}

/// The lock a run's notifier holds for as long as it runs, and `flush` takes: one sender of a
/// run's notifications at a time (a batch run's notifier has no socket to tell it is there).
fn mark_lock(mark_path: &Path) -> std::io::Result<std::fs::File> {
    crate::os::home::open_private(&mark_path.with_extension("lock"), true)
}

/// Delivers what a run's notifier left undelivered (notify.json was invalid while it ended): the
/// journal's lines after the run's mark, as the notifier would have — unless a notifier serves the
/// run now.
pub async fn flush(run: &RunId, journal: &Path, mark_path: &Path, hooks: &[Hook]) -> std::io::Result<Flushed> {
    // No mark, nothing held (and no lock file made beside a run that never had a notifier).
    if !mark_path.exists() {
        return Ok(Flushed::Never);
    }
    let file = mark_lock(mark_path)?;
    let Some(_held) = crate::os::flock::Flock::try_exclusive(&file)? else { return Ok(Flushed::Live) };
    let Some(mut mark) = std::fs::read(mark_path).ok().and_then(|b| serde_json::from_slice::<Mark>(&b).ok()) else {
        return Ok(Flushed::Never);
    };
    Ok(Flushed::Sent(step(run, journal, mark_path, &mut mark, hooks).await))
}

/// Handles the journal's complete lines after the mark (it then stands at the end); returns how
/// many events were sent to a hook.
async fn step(run: &RunId, journal: &Path, mark_path: &Path, mark: &mut Mark, hooks: &[Hook]) -> usize {
    /// The journal is read this much at a time (a backlog held for days is not read at once).
    const WINDOW: u64 = 4 << 20;
    let mut sent = 0;
    let mut window = WINDOW;
    loop {
        let bytes = {
            let (j, from) = (journal.to_path_buf(), mark.offset);
            tokio::task::spawn_blocking(move || crate::os::tail::read_from(&j, from, Some(from + window)))
                .await
                .unwrap_or_default()
        };
        let full = bytes.len() as u64 == window;
        let Some(end) = bytes.iter().rposition(|b| *b == b'\n') else {
            // A line longer than the window (no record is): read wider, up to a bound.
            if full && window < 16 * WINDOW {
                window *= 2;
                continue;
            }
            break;
        };
        window = WINDOW;
        for line in bytes[..end].split(|b| *b == b'\n') {
            if let Some(delivered) = handle(run, line, mark, hooks).await {
                sent += usize::from(delivered);
                // After an event's line the mark moves past it at once (a restart does not resend it).
                save(mark_path, mark);
            }
        }
        if !full {
            break;
        }
    }
    save(mark_path, mark);
    sent
}

/// One journal line: its event (if any) to the hooks that want it; the mark moves past it. `None`
/// when the line is no event; else whether a hook wanted it.
async fn handle(run: &RunId, line: &[u8], mark: &mut Mark, hooks: &[Hook]) -> Option<bool> {
    let line_no = mark.line + 1;
    let event =
        crate::state::journal::parse_line(line).ok().and_then(|rec| notify::event_of(run.as_str(), line_no, &rec));
    let wanted: Vec<Hook> = match &event {
        Some(e) => hooks.iter().filter(|h| h.wants(e.kind)).cloned().collect(),
        None => Vec::new(),
    };
    let sent = match (&event, wanted.is_empty()) {
        (Some(e), false) => {
            let sends = wanted.into_iter().map(|h| deliver(run.clone(), h, e.clone()));
            futures_util::future::join_all(sends).await;
            true
        }
        _ => false,
    };
    mark.line = line_no;
    mark.offset += line.len() as u64 + 1;
    event.map(|_| sent)
}

fn save(path: &Path, mark: &Mark) {
    let bytes = serde_json::to_vec(mark).expect("a mark serializes");
    if let Err(e) = crate::os::home::write_atomic(path, &bytes, 0o600) {
        tracing::warn!(path = %path.display(), error = %e, "cannot write the notification mark");
    }
}

/// One event to one hook, with retries; failures go to the log.
async fn deliver(run: RunId, hook: Hook, e: Event) {
    let mut last = String::new();
    for (attempt, wait) in std::iter::once(Duration::ZERO).chain(BACKOFF).enumerate() {
        tokio::time::sleep(wait).await;
        let (h, ev) = (hook.clone(), e.clone());
        match tokio::task::spawn_blocking(move || notify::deliver(&h, &ev)).await {
            Ok(Ok(())) => {
                tracing::info!(RUN_ID = %run, NOTIFY_ID = %e.id, HOOK = %hook.label(), kind = e.kind, attempt = attempt + 1, "notified");
                return;
            }
            Ok(Err(err)) => last = err,
            Err(err) => last = err.to_string(),
        }
    }
    tracing::error!(RUN_ID = %run, NOTIFY_ID = %e.id, HOOK = %hook.label(), kind = e.kind, error = %last,
        "notification not delivered after {} attempts", BACKOFF.len() + 1);
}
