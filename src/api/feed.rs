//! `GET /watch`: every run's journal records as they are appended, across all runs and both planes,
//! as one SSE stream (`spec/WATCH.md`). One scanner (started by the first watcher) tails every
//! registered run's journal and broadcasts each new complete line; each connection first catches up
//! from its cursor by reading the journals, then follows the broadcast.
//!
//! The cursor (an event's `id`) is the vector of lines delivered per run, written compactly: a
//! checkpoint (the whole vector, a content-addressed file in `$HARNESS_HOME/watch/`) plus the runs
//! that moved since it. It names exactly what the client has, whichever API process wrote it, so
//! `Last-Event-ID` resumes with no gap and no duplicate across reconnects and API restarts.

use super::{Api, Body, error_response};
use crate::ids::RunId;
use crate::views::WatchEvent;
use bytes::Bytes;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use hyper::header::{CACHE_CONTROL, CONTENT_TYPE, HeaderValue};
use hyper::{Response, StatusCode};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{broadcast, mpsc};

/// How often the scanner looks at the journals without a wake-up (new runs; no inotify).
const SCAN: Duration = Duration::from_millis(250);
/// Runs moved since the checkpoint before a new checkpoint is written (bounds an id's length).
const DELTA_MAX: usize = 16;
/// Broadcast items a slow watcher may fall behind before its stream ends (it reconnects with its
/// cursor and loses nothing).
const LAG: usize = 8192;
/// Checkpoints older than this are removed when a scanner starts.
const CHECKPOINT_TTL: Duration = Duration::from_secs(7 * 86_400);
/// The checkpoint directory's cap: past it, the least recently used are removed (down to 3/4 of
/// it). A client whose checkpoint went gets a full catch-up, never a wrong one.
const CHECKPOINT_CAP: u64 = 64 << 20;

/// Lines delivered per run.
type Vector = BTreeMap<String, u64>;

/// A cursor: a checkpoint's vector and the runs that moved since, with the checkpoint's name.
#[derive(Clone, Default)]
struct Cursor {
    ckpt: String,
    base: Vec<(String, u64)>,
    delta: BTreeMap<String, u64>,
}

impl Cursor {
    fn id(&self) -> String {
        let mut parts = Vec::with_capacity(self.delta.len());
        for (run, line) in &self.delta {
            match self.base.binary_search_by(|(r, _)| r.as_str().cmp(run)) {
                Ok(i) => parts.push(format!("{i}:{line}")),
                Err(_) => parts.push(format!("~{run}:{line}")),
            }
        }
        format!("w1.{}.{}", self.ckpt, parts.join(","))
    }

    fn vector(&self) -> Vector {
        let mut v: Vector = self.base.iter().cloned().collect();
        v.extend(self.delta.iter().map(|(r, l)| (r.clone(), *l)));
        v
    }

    /// Moves `run` to `line`; writes a new checkpoint when the delta grew too long.
    fn advance(&mut self, dir: &Path, run: &str, line: u64) -> std::io::Result<()> {
        self.delta.insert(run.to_string(), line);
        if self.delta.len() > DELTA_MAX {
            *self = checkpoint(dir, &self.vector())?;
        }
        Ok(())
    }
}

/// A checkpoint file: the lines delivered per run, by run. Its name is a hash of its bytes, so the
/// fields keep the order that makes a vector's bytes the same in every API process. A catch-up's
/// checkpoint also holds `from`, where its client started (see `CatchUp`).
#[derive(serde::Serialize, serde::Deserialize)]
struct Checkpoint {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    from: Vec<(String, u64)>,
    runs: Vec<(String, u64)>,
    /// `watch-checkpoint/v1`.
    v: String,
}

/// Writes (or finds, touched) the checkpoint file of `c`: its name. `keep`: a checkpoint the cap
/// must not remove (the live feed's current one).
fn write_checkpoint(dir: &Path, c: &Checkpoint, keep: Option<&str>) -> std::io::Result<String> {
    use sha2::Digest;
    let body = serde_json::to_vec(c).expect("a checkpoint serializes");
    let hash = sha2::Sha256::digest(&body);
    let name: String = hash.iter().take(8).map(|b| format!("{b:02x}")).collect();
    let path = dir.join(format!("{name}.json"));
    if !path.exists() {
        crate::os::home::private_dir(dir)?;
        crate::os::home::write_atomic(&path, &body, 0o600)?;
        cap(dir, CHECKPOINT_CAP, &[Some(name.as_str()), keep]);
    } else {
        touch(&path);
    }
    Ok(name)
}

/// Marks a checkpoint as in use (found again, or named by a client's cursor): the age limit and
/// the cap remove the least recently used first.
fn touch(path: &Path) {
    let _ = std::fs::File::options().append(true).open(path).and_then(|f| f.set_modified(std::time::SystemTime::now()));
}

/// Keeps the checkpoint directory under `limit` bytes: the least recently used files go first
/// (a checkpoint is touched when written, found again, or named by a client's cursor), down to 3/4
/// of it; the checkpoints named in `keep` stay.
fn cap(dir: &Path, limit: u64, keep: &[Option<&str>]) {
    let Ok(rd) = std::fs::read_dir(dir) else { return };
    let mut files: Vec<(std::time::SystemTime, u64, PathBuf)> = rd
        .flatten()
        .filter_map(|e| {
            let m = e.metadata().ok()?;
            m.is_file().then(|| (m.modified().unwrap_or(std::time::UNIX_EPOCH), m.len(), e.path()))
        })
        .collect();
    let mut total: u64 = files.iter().map(|f| f.1).sum();
    if total <= limit {
        return;
    }
    files.sort();
    for (_, len, path) in files {
        if total <= limit / 4 * 3 {
            break;
        }
        let name = path.file_stem().map(|n| n.to_string_lossy().into_owned());
        if keep.iter().flatten().any(|k| name.as_deref() == Some(*k)) {
            continue;
        }
        if std::fs::remove_file(&path).is_ok() {
            total -= len;
        }
    }
}

/// Writes (or finds) the checkpoint of `v`: a cursor with an empty delta.
fn checkpoint(dir: &Path, v: &Vector) -> std::io::Result<Cursor> {
    let base: Vec<(String, u64)> = v.iter().map(|(r, l)| (r.clone(), *l)).collect();
    let file = Checkpoint { from: Vec::new(), runs: base, v: "watch-checkpoint/v1".into() };
    let name = write_checkpoint(dir, &file, None)?;
    Ok(Cursor { ckpt: name, base: file.runs, delta: BTreeMap::new() })
}

/// A catch-up's one checkpoint: where its client started (`from`) and the present it catches up
/// to (`runs`, in order). Its ids are `w2.<checkpoint>.<k>:<line>`: the runs before the k-th at the
/// present, the k-th at `line`, the rest where the client started. So a catch-up over 10,000 runs
/// writes one file, not one per 17 runs.
struct CatchUp {
    ckpt: String,
}

impl CatchUp {
    fn id(&self, k: usize, line: u64) -> String {
        format!("w2.{}.{k}:{line}", self.ckpt)
    }
}

/// Reads a `w2` cursor's vector from its checkpoint.
fn catch_up_vector(c: Checkpoint, k: usize, line: u64) -> Vector {
    let mut v: Vector = c.from.into_iter().collect();
    for (i, (run, l)) in c.runs.into_iter().enumerate() {
        match i.cmp(&k) {
            std::cmp::Ordering::Less => {
                v.insert(run, l);
            }
            std::cmp::Ordering::Equal => {
                v.insert(run, line);
            }
            std::cmp::Ordering::Greater => {}
        }
    }
    v
}

/// What a client's cursor names: its vector, or a checkpoint this home no longer holds (removed by
/// the cap or the age limit): then the client gets a full catch-up.
enum Named {
    At(Vector),
    Gone(String),
}

/// Reads a cursor a client sent: 400-worthy text when it is not one.
fn parse_cursor(dir: &Path, id: &str) -> Result<Named, String> {
    let bad = || {
        format!("Last-Event-ID {id:?} is not a /watch cursor (w1.<checkpoint>.<delta> or w2.<checkpoint>.<k>:<line>)")
    };
    let (w2, rest) = match (id.strip_prefix("w1."), id.strip_prefix("w2.")) {
        (Some(r), _) => (false, r),
        (None, Some(r)) => (true, r),
        (None, None) => return Err(bad()),
    };
    let (ckpt, delta) = rest.split_once('.').ok_or_else(bad)?;
    if ckpt.len() != 16 || !ckpt.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(bad());
    }
    let at = if w2 {
        let (k, line) = delta.split_once(':').ok_or_else(bad)?;
        Some((k.parse::<usize>().map_err(|_| bad())?, line.parse::<u64>().map_err(|_| bad())?))
    } else {
        None
    };
    let path = dir.join(format!("{ckpt}.json"));
    let Ok(body) = std::fs::read(&path) else {
        return Ok(Named::Gone(ckpt.to_string()));
    };
    touch(&path);
    let c = serde_json::from_slice::<Checkpoint>(&body).map_err(|e| format!("checkpoint {ckpt} is unreadable: {e}"))?;
    if let Some((k, line)) = at {
        if k >= c.runs.len() {
            return Err(bad());
        }
        return Ok(Named::At(catch_up_vector(c, k, line)));
    }
    let base = c.runs;
    let mut vec: Vector = base.iter().cloned().collect();
    for part in delta.split(',').filter(|p| !p.is_empty()) {
        let (who, line) = part.rsplit_once(':').ok_or_else(bad)?;
        let line: u64 = line.parse().map_err(|_| bad())?;
        let run = match who.strip_prefix('~') {
            Some(run) => run.to_string(),
            None => base.get(who.parse::<usize>().map_err(|_| bad())?).ok_or_else(bad)?.0.clone(),
        };
        vec.insert(run, line);
    }
    Ok(Named::At(vec))
}

/// One broadcast record.
struct Item {
    seq: u64,
    /// The run whose record it is (for a client that watches some runs only).
    run: String,
    /// `id:` and `data:` lines, ready to send.
    frame: Bytes,
}

struct Journal {
    path: PathBuf,
    offset: u64,
    lines: u64,
    /// The file the offset is into: a journal replaced (another inode, another first line — its
    /// `started` record is unique — or shorter) is read again from its first line.
    ino: u64,
    first: u64,
}

struct State {
    cursor: Cursor,
    seq: u64,
    journals: BTreeMap<RunId, Journal>,
    /// Dropped when the API shuts down: every watcher's stream then ends (no per-poll watch of
    /// the shutdown signal in 1,000 streams).
    tx: Option<broadcast::Sender<Arc<Item>>>,
}

/// The scanner and what it has seen.
pub struct Hub {
    dir: PathBuf,
    runs_dir: PathBuf,
    /// Pointer file name → (runId, journal): a pointer is parsed once.
    pointers: Mutex<std::collections::HashMap<String, (RunId, PathBuf)>>,
    state: Mutex<State>,
}

/// Started by the first watcher.
#[derive(Default)]
pub struct Watch {
    hub: tokio::sync::OnceCell<Arc<Hub>>,
}

impl Watch {
    /// The present's cursor (as far as the scanner has read): `/watch` with it as `Last-Event-ID`
    /// sends what was appended after (`GET /runs`'s `Harness-Watch-Cursor`, taken before its page).
    pub async fn cursor(&self, api: &Arc<Api>) -> Result<String, String> {
        let hub = self.hub(api).await?;
        Ok(hub.state.lock().unwrap_or_else(|p| p.into_inner()).cursor.id())
    }

    async fn hub(&self, api: &Arc<Api>) -> Result<Arc<Hub>, String> {
        let api2 = api.clone();
        self.hub
            .get_or_try_init(|| async move {
                let home = api2.durable.home.clone();
                let hub = tokio::task::spawn_blocking(move || Hub::start(home.root.join("watch"), home.runs_dir()))
                    .await
                    .map_err(|e| e.to_string())??;
                let hub = Arc::new(hub);
                tokio::spawn(scan(hub.clone(), api2.clone(), api2.shutdown.clone()));
                Ok(hub)
            })
            .await
            .cloned()
    }
}

/// One record's SSE frame. `run` is a registered runId (the scanner took it from a pointer).
fn frame(id: &str, run: &RunId, line: u64, raw: &[u8]) -> Bytes {
    let record = serde_json::from_slice::<Value>(raw).ok().filter(|r| !r.is_null());
    let bad = record.is_none().then(|| String::from_utf8_lossy(&raw[..raw.len().min(4096)]).into_owned());
    let data = WatchEvent { v: "watch/v1".into(), run: run.clone(), line, record, bad, host: None };
    let data = serde_json::to_string(&data).expect("a watch event serializes");
    Bytes::from(format!("id: {id}\ndata: {data}\n\n"))
}

impl Hub {
    /// Reads every journal's length (in lines) now: the present, checkpointed.
    fn start(dir: PathBuf, runs_dir: PathBuf) -> Result<Hub, String> {
        if let Ok(rd) = std::fs::read_dir(&dir) {
            for e in rd.flatten() {
                let old = e.metadata().and_then(|m| m.modified()).ok().and_then(|t| t.elapsed().ok());
                if old.is_some_and(|a| a > CHECKPOINT_TTL) {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
        let mut journals = BTreeMap::new();
        for (run, path) in registered(&runs_dir) {
            let bytes = std::fs::read(&path).unwrap_or_default();
            let ino = inode(&path);
            let end = memchr::memrchr(b'\n', &bytes).map_or(0, |i| i + 1);
            let lines = memchr::memchr_iter(b'\n', &bytes[..end]).count() as u64;
            let first = first_line_hash(&bytes[..bytes.len().min(4096)]);
            journals.insert(run, Journal { path, offset: end as u64, lines, ino, first });
        }
        let v: Vector = journals.iter().map(|(r, j)| (r.to_string(), j.lines)).collect();
        let cursor =
            checkpoint(&dir, &v).map_err(|e| format!("cannot write a watch checkpoint in {}: {e}", dir.display()))?;
        let (tx, _) = broadcast::channel(LAG);
        let state = State { cursor, seq: 0, journals, tx: Some(tx) };
        Ok(Hub { dir, runs_dir, pointers: Mutex::default(), state: Mutex::new(state) })
    }

    /// One look at every journal: new complete lines are broadcast in order.
    fn step(&self) {
        let registered = {
            let mut known = self.pointers.lock().unwrap_or_else(|p| p.into_inner());
            registered_cached(&self.runs_dir, &mut known)
        };
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        for (run, path) in registered {
            let j = st.journals.entry(run.clone()).or_insert(Journal { path, offset: 0, lines: 0, ino: 0, first: 0 });
            let Ok(meta) = std::fs::metadata(&j.path) else { continue };
            let len = meta.len();
            // Only a journal that changed is looked into (its first line: at most a few hundred bytes).
            let first = if len != j.offset {
                first_line_hash(&crate::os::tail::read_from(&j.path, 0, Some(len.min(4096))))
            } else {
                j.first
            };
            let replaced = j.ino != 0 && std::os::unix::fs::MetadataExt::ino(&meta) != j.ino;
            if replaced || len < j.offset || (j.offset > 0 && first != j.first) {
                // Replaced (a re-run over a removed journal) or cut: its lines are new from line 1.
                tracing::info!(RUN_ID = %run, "a journal was replaced: watching it again from its first line");
                (j.offset, j.lines) = (0, 0);
            }
            j.ino = std::os::unix::fs::MetadataExt::ino(&meta);
            j.first = first;
            if len <= j.offset {
                continue;
            }
            let buf = crate::os::tail::read_from(&j.path, j.offset, Some(len));
            let Some(end) = memchr::memrchr(b'\n', &buf) else { continue };
            let (mut offset, mut lines) = (j.offset, j.lines);
            let mut items = Vec::new();
            for raw in buf[..end].split(|b| *b == b'\n') {
                lines += 1;
                offset += raw.len() as u64 + 1;
                items.push((lines, raw.to_vec()));
            }
            if let Some(j) = st.journals.get_mut(&run) {
                j.offset = offset;
                j.lines = lines;
            }
            for (line, raw) in items {
                if let Err(e) = st.cursor.advance(&self.dir, run.as_str(), line) {
                    tracing::error!(error = %e, "cannot write a watch checkpoint");
                }
                st.seq += 1;
                let frame = frame(&st.cursor.id(), &run, line, &raw);
                let item = Arc::new(Item { seq: st.seq, run: run.to_string(), frame });
                if let Some(tx) = &st.tx {
                    let _ = tx.send(item);
                }
            }
        }
    }
}

/// A hash of the first complete line of a journal's head (0: none yet).
fn first_line_hash(head: &[u8]) -> u64 {
    use std::hash::{Hash, Hasher};
    let Some(end) = memchr::memchr(b'\n', head) else { return 0 };
    let mut h = std::collections::hash_map::DefaultHasher::new();
    head[..end].hash(&mut h);
    h.finish()
}

fn inode(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| std::os::unix::fs::MetadataExt::ino(&m)).unwrap_or(0)
}

/// The registered runs and their journals, parsing only pointers not seen before.
fn registered_cached(
    runs_dir: &Path,
    known: &mut std::collections::HashMap<String, (RunId, PathBuf)>,
) -> Vec<(RunId, PathBuf)> {
    let Ok(rd) = std::fs::read_dir(runs_dir) else { return Vec::new() };
    let mut out = Vec::new();
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || !name.ends_with(".json") {
            continue;
        }
        if let Some(hit) = known.get(&name) {
            out.push(hit.clone());
            continue;
        }
        let Ok(bytes) = std::fs::read(e.path()) else { continue };
        if let Ok(p) = crate::state::registry::parse(&e.path(), &bytes) {
            let entry = (p.run_id.clone(), p.journal_path());
            known.insert(name, entry.clone());
            out.push(entry);
        }
    }
    out.sort();
    out
}

/// The registered runs and their journals.
fn registered(runs_dir: &Path) -> Vec<(RunId, PathBuf)> {
    registered_cached(runs_dir, &mut Default::default())
}

/// Looks again whenever a journal changes (inotify, through the API's `WatchHub`), and every
/// `SCAN` regardless (new runs; no inotify).
async fn scan(hub: Arc<Hub>, api: Arc<Api>, mut shutdown: tokio::sync::watch::Receiver<bool>) {
    let wake = Arc::new(tokio::sync::Notify::new());
    let mut watched = std::collections::HashSet::new();
    loop {
        let h = hub.clone();
        let _ = tokio::task::spawn_blocking(move || h.step()).await;
        // Journals seen for the first time get a wake-up forwarder.
        let paths: Vec<PathBuf> = {
            let st = hub.state.lock().unwrap_or_else(|p| p.into_inner());
            st.journals.values().map(|j| j.path.clone()).filter(|p| !watched.contains(p)).collect()
        };
        for p in paths {
            if let Some(mut rx) = api.hub.subscribe(&p) {
                let w = wake.clone();
                tokio::spawn(async move {
                    loop {
                        match rx.recv().await {
                            Ok(()) | Err(broadcast::error::RecvError::Lagged(_)) => w.notify_one(),
                            Err(broadcast::error::RecvError::Closed) => return,
                        }
                    }
                });
            }
            watched.insert(p);
        }
        tokio::select! {
            _ = wake.notified() => {}
            _ = tokio::time::sleep(SCAN) => {}
            _ = shutdown.changed() => {
                hub.state.lock().unwrap_or_else(|p| p.into_inner()).tx = None;
                return;
            }
        }
    }
}

/// `GET /watch`. `last` is the client's cursor (`Last-Event-ID` or `?lastEventId`); `since_now`
/// starts at the present instead of the beginning.
/// `only`: the runs the client watches (empty: every run); the cursor still covers every run.
pub async fn serve(
    api: Arc<Api>,
    last: Option<String>,
    since_now: bool,
    only: Vec<RunId>,
    rows: bool,
) -> Result<Response<Body>, Response<Body>> {
    let hub = api.feed.hub(&api).await.map_err(|e| error_response(StatusCode::INTERNAL_SERVER_ERROR, e))?;
    // Subscribed under the lock: no record falls between the snapshot and the subscription.
    let (rx, present, seq0, now_id) = {
        let st = hub.state.lock().unwrap_or_else(|p| p.into_inner());
        // The present's cursor, taken with the snapshot: sent first when nothing is to be caught up.
        let now_id = st.cursor.id();
        let present: Vec<(RunId, PathBuf, u64)> =
            st.journals.iter().map(|(r, j)| (r.clone(), j.path.clone(), j.lines)).collect();
        let Some(tx) = &st.tx else {
            return Err(error_response(StatusCode::SERVICE_UNAVAILABLE, "the API is shutting down"));
        };
        (tx.subscribe(), present, st.seq, now_id)
    };
    let (from, gone): (Vector, Option<String>) = match (&last, since_now) {
        (Some(id), _) => {
            let (dir, id) = (hub.dir.clone(), id.clone());
            let named = tokio::task::spawn_blocking(move || parse_cursor(&dir, &id))
                .await
                .map_err(|e| error_response(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
                .map_err(|e| error_response(StatusCode::BAD_REQUEST, e))?;
            match named {
                Named::At(v) => (v, None),
                Named::Gone(ckpt) => (Vector::new(), Some(ckpt)),
            }
        }
        (None, true) => (present.iter().map(|(r, _, l)| (r.to_string(), *l)).collect(), None),
        (None, false) => (Vector::new(), None),
    };
    // The catch-up comes from a task reading the journals; then the live records straight from the
    // broadcast (no task between it and the connection).
    let (tx, out) = mpsc::channel::<Bytes>(64);
    let catch_up = futures_util::stream::unfold(out, |mut out| async move { out.recv().await.map(|b| (b, out)) });
    // Set by a catch-up that could not deliver what its ids claim: no live record follows it.
    let cut = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let only = Arc::new(only);
    let wanted = {
        let only = only.clone();
        move |run: &str| only.is_empty() || only.iter().any(|r| r.as_str() == run)
    };
    let rows = rows.then(|| api.clone());
    let start = Start { from, gone, now_id, wanted: Box::new(wanted.clone()), rows: rows.clone() };
    tokio::spawn(catch_up_task(hub, present, start, tx, cut.clone()));
    let live = futures_util::stream::unfold((rx, None::<Arc<Item>>), move |(mut rx, mut held)| {
        let (cut, wanted, rows) = (cut.clone(), wanted.clone(), rows.clone());
        async move {
            loop {
                if cut.load(std::sync::atomic::Ordering::SeqCst) {
                    return None;
                }
                let item = match held.take() {
                    Some(item) => item,
                    None => match rx.recv().await {
                        Ok(item) if item.seq <= seq0 || !wanted(&item.run) => continue,
                        Ok(item) => item,
                        // Fell too far behind, or the API is shutting down: the stream ends; the
                        // client reconnects with its last id and loses nothing.
                        Err(_) => return None,
                    },
                };
                let Some(api) = &rows else { return Some((item.frame.clone(), (rx, None))) };
                // With rows: the run's records already there, then its row once.
                let mut out = item.frame.to_vec();
                loop {
                    match rx.try_recv() {
                        Ok(next) if next.seq <= seq0 || !wanted(&next.run) => continue,
                        Ok(next) if next.run == item.run => out.extend_from_slice(&next.frame),
                        Ok(next) => {
                            held = Some(next);
                            break;
                        }
                        // Nothing more now (or lagged / closed: the next recv says so).
                        Err(_) => break,
                    }
                }
                if let Some(row) = row_frame(api, &item.run).await {
                    out.extend_from_slice(&row);
                }
                return Some((Bytes::from(out), (rx, held)));
            }
        }
    });
    let stream = futures_util::StreamExt::map(futures_util::StreamExt::chain(catch_up, live), |b| {
        Ok::<_, std::convert::Infallible>(Frame::data(b))
    });
    let mut r = Response::new(StreamBody::new(stream).boxed());
    r.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    r.headers_mut().insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r.headers_mut().insert("x-accel-buffering", HeaderValue::from_static("no"));
    Ok(r)
}

/// One watcher's catch-up: from `from` to the present, read from the journals, with cursors of its
/// own (the live records that follow build on that present).
/// Where a watcher starts: its vector, the checkpoint its cursor named if that is gone, the present's
/// cursor, and which runs it watches.
struct Start {
    from: Vector,
    gone: Option<String>,
    now_id: String,
    wanted: Box<dyn Fn(&str) -> bool + Send + Sync>,
    /// `?rows=1`: each run's row follows its records.
    rows: Option<Arc<Api>>,
}

/// A run's row as `GET /runs` has it, as an `event: row` frame (no id: the cursor is the last
/// record's); `None` for a run no longer registered.
async fn row_frame(api: &Arc<Api>, run: &str) -> Option<Bytes> {
    let run = RunId::parse(run).ok()?;
    let a = api.clone();
    let row = tokio::task::spawn_blocking(move || a.durable.overview.row(&run)).await.ok()??;
    let mut out = Vec::with_capacity(row.len() + 20);
    out.extend_from_slice(b"event: row\ndata: ");
    out.extend_from_slice(&row);
    out.extend_from_slice(b"\n\n");
    Some(Bytes::from(out))
}

async fn catch_up_task(
    hub: Arc<Hub>,
    mut present: Vec<(RunId, PathBuf, u64)>,
    start: Start,
    tx: mpsc::Sender<Bytes>,
    cut: Arc<std::sync::atomic::AtomicBool>,
) {
    let Start { from, gone, now_id, wanted, rows } = start;
    if tx.send(Bytes::from_static(b"retry: 2000\n\n")).await.is_err() {
        return;
    }
    if let Some(ckpt) = gone {
        let note = format!(
            ": the cursor's checkpoint {ckpt} is gone (removed by the cap or the age limit): a full catch-up follows; records you have come again (the same run and line)\n\n"
        );
        if tx.send(Bytes::from(note)).await.is_err() {
            return;
        }
    }
    // A cursor past a journal's end names a journal since replaced: its lines are all new.
    let had = |r: &RunId, upto: u64| from.get(r.as_str()).copied().filter(|&h| h <= upto).unwrap_or(0);
    let behind = present.iter().any(|(r, _, l)| had(r, *l) < *l);
    if !behind {
        // Nothing to catch up (`?since=now`, or a client at the present): the present's cursor, as
        // an id with no data — EventSource keeps it as its last id without an event — so a
        // reconnect before the first record loses nothing appended meanwhile.
        let _ = tx.send(Bytes::from(format!("id: {now_id}\n\n"))).await;
        return;
    }
    // One checkpoint for the whole catch-up: where the client starts and the present, in the
    // order the catch-up goes. Written off the async workers.
    present.sort_by(|a, b| a.0.as_str().cmp(b.0.as_str()));
    let c = Checkpoint {
        from: present.iter().map(|(r, _, l)| (r.to_string(), had(r, *l))).filter(|(_, h)| *h > 0).collect(),
        runs: present.iter().map(|(r, _, l)| (r.to_string(), *l)).collect(),
        v: "watch-checkpoint/v1".into(),
    };
    let dir = hub.dir.clone();
    let live = hub.state.lock().unwrap_or_else(|p| p.into_inner()).cursor.ckpt.clone();
    let Ok(Ok(ckpt)) = tokio::task::spawn_blocking(move || write_checkpoint(&dir, &c, Some(&live))).await else {
        cut.store(true, std::sync::atomic::Ordering::SeqCst);
        return;
    };
    let cu = CatchUp { ckpt };
    for (k, (run, path, upto)) in present.iter().enumerate() {
        let have = had(run, *upto);
        // A run the client does not watch is not read (its cursor is tied to its filter).
        if have >= *upto || !wanted(run.as_str()) {
            continue;
        }
        let p = path.clone();
        let bytes = tokio::task::spawn_blocking(move || std::fs::read(p).unwrap_or_default()).await.unwrap_or_default();
        let mut sent = have;
        let end = memchr::memrchr(b'\n', &bytes).map_or(0, |i| i + 1);
        for (i, raw) in bytes[..end].split(|b| *b == b'\n').enumerate() {
            let line = i as u64 + 1;
            if line <= have {
                continue;
            }
            if line > *upto {
                break;
            }
            if tx.send(frame(&cu.id(k, line), run, line, raw)).await.is_err() {
                return;
            }
            sent = line;
        }
        if sent < *upto {
            // Fewer lines than the present said (the journal unreadable, replaced or cut meanwhile):
            // the ids that follow would claim lines never sent. The stream ends here; the client
            // resumes from its last true id.
            tracing::warn!(RUN_ID = %run, sent, upto, "a /watch catch-up could not read a journal to its end: ending the stream");
            cut.store(true, std::sync::atomic::Ordering::SeqCst);
            return;
        }
        if let Some(api) = &rows
            && let Some(row) = row_frame(api, run.as_str()).await
            && tx.send(row).await.is_err()
        {
            return;
        }
    }
    // At the present: its cursor (the same vector, as the live feed writes it), so the client's
    // last id is right even when the runs it watches had nothing to catch up.
    let _ = tx.send(Bytes::from(format!("id: {now_id}\n\n"))).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_removes_the_least_recently_used_first_down_to_three_quarters() {
        let d = tempfile::tempdir().unwrap();
        let t0 = std::time::SystemTime::now() - Duration::from_secs(1000);
        for i in 0..10u64 {
            let p = d.path().join(format!("{i}.json"));
            std::fs::write(&p, vec![b'x'; 100]).unwrap();
            std::fs::File::options().append(true).open(&p).unwrap().set_modified(t0 + Duration::from_secs(i)).unwrap();
        }
        cap(d.path(), 2000, &[]);
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 10, "under the cap: nothing goes");
        cap(d.path(), 800, &[Some("0")]);
        let mut left: Vec<String> = std::fs::read_dir(d.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(
            left,
            ["0.json", "5.json", "6.json", "7.json", "8.json", "9.json"],
            "the oldest went, to 600 bytes; 0 kept"
        );
    }

    #[test]
    fn a_catch_up_id_names_the_present_before_k_and_the_start_after() {
        let c = Checkpoint {
            from: vec![("c".into(), 2)],
            runs: vec![("a".into(), 5), ("b".into(), 6), ("c".into(), 7)],
            v: "watch-checkpoint/v1".into(),
        };
        let v = catch_up_vector(c, 1, 3);
        assert_eq!(v, Vector::from([("a".into(), 5), ("b".into(), 3), ("c".into(), 2)]));
    }
}
