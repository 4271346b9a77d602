//! `GET /runs`: the Overview — every registered run, newest activity first, paged and filtered.
//!
//! An in-memory index of the runs' summaries (`crate::state::summary`), sorted by (activity, runId). It is
//! built on the first request from the summary files beside the pointers (a fresh API reads no
//! journal whose summary is fresh), and kept exact afterwards by inotify: the registry directory and
//! every run's runstate directory are watched, and each request first drains the events queued so
//! far — the kernel queues an event before the `write(2)` that caused it returns, so a change made
//! before the request is seen by it. Only the runs named by events are looked at again. A run whose
//! directory cannot be watched is `stat`ed on every request; a queue overflow, or no inotify at all,
//! makes the request look at every run. *Journal wins:* whatever is looked at again is validated by
//! the fingerprints of its files, and rebuilt from them when they disagree.

use crate::ids::RunId;
use crate::os::home::Home;
use crate::state::journal::RunStatus;
use crate::state::registry::Plane;
use crate::state::spend::LogTallies;
use crate::state::summary::{self, Fp, Head, Summary};
use inotify::{EventMask, Inotify, WatchDescriptor, WatchMask};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Default and largest page of `GET /runs`.
pub const PAGE_DEFAULT: usize = 100;
pub const PAGE_MAX: usize = 1000;

/// What a `GET /runs` asks for. Every filter given must hold.
#[derive(Debug, Clone, Default)]
pub struct Query {
    pub limit: usize,
    /// The cursor of the last row of the previous page.
    pub after: Option<Cursor>,
    pub status: Vec<RunStatus>,
    pub live: Option<bool>,
    pub project: Option<String>,
    pub repo: Option<String>,
    pub branch: Option<String>,
    pub plane: Option<Plane>,
    /// Lowercased substring of the slug or the runId.
    pub q: Option<String>,
    /// Activity strictly after this time (ns since the epoch).
    pub since: Option<i128>,
    /// `host=` (a fleet's filter): a home's own rows carry no host, so none matches.
    pub host: Option<crate::ids::HostName>,
}

/// A position in the Overview's order: `<activity ns>.<runId>` on the wire.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Cursor(pub i128, pub RunId);

impl Cursor {
    pub fn parse(s: &str) -> Result<Cursor, String> {
        let bad = || format!("not a /runs cursor (expected <activity-ns>.<runId> from Harness-Next-After): {s:?}");
        let (ns, run) = s.split_once('.').ok_or_else(bad)?;
        if ns.is_empty() || !ns.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        // Beyond any clock: after every run.
        let ns = ns.parse::<i128>().unwrap_or(i128::MAX);
        Ok(Cursor(ns, RunId::parse(run).map_err(|_| bad())?))
    }
}

impl std::fmt::Display for Cursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.0, self.1)
    }
}

/// One page of the Overview.
pub struct Page {
    /// A JSON array of rows.
    pub body: Vec<u8>,
    /// The last row's cursor (absent on an empty page).
    pub next_after: Option<Cursor>,
    /// More matching runs follow the page.
    pub more: bool,
    /// Matching runs in all (every page).
    pub total: usize,
}

/// A run in the index: its summary's head, and its row, checked to be JSON once before it is served
/// (a row from the snapshot is not parsed when the snapshot is read).
struct Item {
    head: Head,
    row: Row,
    checked: std::sync::OnceLock<bool>,
}

/// A row's JSON text: its own, or a slice of the snapshot read at the first look (not copied).
enum Row {
    Own(Box<str>),
    Shared(Arc<String>, std::ops::Range<usize>),
}

impl Row {
    fn text(&self) -> &str {
        match self {
            Row::Own(s) => s,
            Row::Shared(all, r) => &all[r.clone()],
        }
    }
}

impl From<Summary> for Item {
    fn from(s: Summary) -> Item {
        Item { head: s.head, row: Row::Own(s.row.get().into()), checked: true.into() }
    }
}

struct Watch {
    ino: Inotify,
    runs_wd: WatchDescriptor,
    dirs: HashMap<WatchDescriptor, PathBuf>,
    /// The runs of each watched runstate directory.
    runs_in: HashMap<PathBuf, HashSet<RunId>>,
    buf: Vec<u8>,
}

#[derive(Default)]
struct Inner {
    ready: bool,
    runs: HashMap<RunId, Arc<Item>>,
    order: BTreeMap<Cursor, Arc<Item>>,
    watch: Option<Watch>,
    /// The watches the first look left to a thread (the first answer does not wait for them), and
    /// the runs that thread found changed or new once their directories were watched.
    watching: Option<std::thread::JoinHandle<(Option<Watch>, Vec<RunId>)>>,
    /// Runs whose runstate directory could not be watched: looked at on every request.
    polled: HashSet<RunId>,
    tallies: LogTallies,
    /// Whether the index changed since the snapshot was last written, and when that was.
    unsaved: bool,
    saved_at: Option<Instant>,
}

pub struct Overview {
    home: Home,
    inner: Mutex<Inner>,
}

/// Events that may change a summary: appends, atomic replacements, creation and removal.
const DIR_MASK: WatchMask = WatchMask::MODIFY
    .union(WatchMask::MOVED_TO)
    .union(WatchMask::MOVED_FROM)
    .union(WatchMask::CREATE)
    .union(WatchMask::DELETE)
    .union(WatchMask::ATTRIB);

/// The API's snapshot of every summary (`runs/.overview.jsonl`, one summary per line), read by the
/// next API process so its first look opens one file instead of one per run. A cache of caches:
/// each line is validated like the summary file it copies.
const SNAPSHOT: &str = ".overview.jsonl";
/// How often a changed index is saved again at most.
const SNAPSHOT_EVERY: Duration = Duration::from_secs(30);

impl Overview {
    pub fn new(home: Home) -> Overview {
        Overview { home, inner: Mutex::new(Inner::default()) }
    }

    /// One page of runs matching `q`.
    pub fn page(&self, q: &Query) -> Page {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        self.refresh(&mut inner);
        loop {
            let (page, garbled) = page(&inner, q);
            if garbled.is_empty() {
                return page;
            }
            // Rows from a damaged snapshot: taken again from their runs' files.
            for run in garbled {
                tracing::warn!(RUN_ID = %run, "a garbled row in the overview snapshot: rebuilt");
                self.remove(&mut inner, &run);
                self.revalidate(&mut inner, &run);
            }
        }
    }

    /// One run's row as `GET /runs` has it (with `live` and `supervisor`), up to date with its files;
    /// `None` for a run not registered (or whose row is not JSON).
    pub fn row(&self, run: &RunId) -> Option<Vec<u8>> {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        self.refresh(&mut inner);
        let s = inner.runs.get(run)?;
        let mut out = Vec::with_capacity(1024);
        row_json(s, &mut out).then_some(out)
    }

    /// Every run of the home whose supervisor is alive now: its id, the supervisor's pid and the
    /// run's liveness sidecar (its tasks' processes), up to date with the files.
    pub fn live_supervisors(&self) -> Vec<(RunId, u32, PathBuf)> {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        self.refresh(&mut inner);
        inner
            .runs
            .iter()
            .filter(|(_, s)| alive(s))
            .filter_map(|(run, s)| {
                let pid = u32::try_from(s.head.supervisor_pid?).ok()?;
                Some((run.clone(), pid, s.head.pointer.liveness_path()))
            })
            .collect()
    }

    /// Brings the index up to date with the files (see the module doc).
    fn refresh(&self, inner: &mut Inner) {
        if !inner.ready {
            self.cold(inner);
            inner.ready = true;
        } else {
            // The watches the first look left to a thread: waited for once.
            if let Some((watch, stale)) = inner.watching.take().and_then(|h| h.join().ok()) {
                self.adopt(inner, watch, stale);
            }
            if inner.watch.is_some() {
                let (mut dirty, full) = drain(inner);
                if full {
                    self.rescan(inner);
                } else {
                    dirty.extend(inner.polled.iter().cloned());
                    for run in dirty {
                        self.revalidate(inner, &run);
                    }
                }
            } else {
                // Nothing can be watched: every run is looked at.
                self.rescan(inner);
            }
        }
        if inner.unsaved && inner.saved_at.is_none_or(|t| t.elapsed() >= SNAPSHOT_EVERY) {
            self.save(inner);
        }
    }

    /// The first look: every pointer, from the snapshot or its summary where they are fresh, else
    /// from its journal. The work is split across the cores; directories are watched afterwards, by a
    /// thread, so the first answer does not wait for them.
    fn cold(&self, inner: &mut Inner) {
        let started = Instant::now();
        let runs_dir = self.home.runs_dir();
        // The registry is listed while the snapshot is read.
        let (snapshot, listed) = std::thread::scope(|s| {
            let lister = s.spawn(|| registered(&runs_dir));
            let snapshot = read_snapshot(&runs_dir);
            (snapshot, lister.join().unwrap_or_default())
        });
        let listed: HashMap<RunId, u64> = listed.into_iter().collect();
        let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1).min(8);
        let text = snapshot.text;
        let in_snapshot = snapshot.rows.len();
        // The snapshot's lines whose run is still registered and unchanged (each taken, not copied).
        let chunk = in_snapshot.div_ceil(threads).max(64);
        let mut lines = snapshot.rows;
        let mut parts = Vec::new();
        while lines.len() > chunk {
            let rest = lines.split_off(chunk);
            parts.push(std::mem::replace(&mut lines, rest));
        }
        parts.push(lines);
        let (listed_ref, text_ref) = (&listed, &text);
        let fresh: Vec<Item> = std::thread::scope(|s| {
            let handles: Vec<_> = parts
                .into_iter()
                .map(|part| {
                    s.spawn(move || {
                        let mut out = Vec::with_capacity(part.len());
                        for (h, row) in part {
                            // The pointer is replaced by rename (a new inode) whenever it is
                            // rewritten. A finished or failed run's liveness sidecar is not looked at
                            // here (its supervisor is gone; the look once the watches are in place does).
                            let unchanged = listed_ref
                                .get(&h.pointer.run_id)
                                .is_some_and(|ino| h.fps.pointer.is_some_and(|f| f.ino == *ino))
                                && Fp::of(&h.pointer.journal_path()) == h.fps.journal
                                && (matches!(h.status, RunStatus::Finished | RunStatus::Failed)
                                    || summary::is_fresh(&h, h.fps.pointer));
                            if unchanged {
                                let row = Row::Shared(text_ref.clone(), row);
                                out.push(Item { head: h, row, checked: Default::default() });
                            }
                        }
                        out
                    })
                })
                .collect();
            handles.into_iter().filter_map(|h| h.join().ok()).flatten().collect()
        });
        // The others: from their summary files, else their journals.
        let taken: HashSet<&RunId> = fresh.iter().map(|i| &i.head.pointer.run_id).collect();
        let rest: Vec<&RunId> = listed.keys().filter(|r| !taken.contains(r)).collect();
        let chunk = rest.len().div_ceil(threads).max(64);
        let runs_dir_ref = &runs_dir;
        let rebuilt: Vec<Item> = std::thread::scope(|s| {
            let handles: Vec<_> = rest
                .chunks(chunk)
                .map(|c| {
                    s.spawn(move || {
                        let mut tallies = LogTallies::default();
                        let mut out = Vec::with_capacity(c.len());
                        for run in c {
                            let pfp = Fp::of(&pointer_path(runs_dir_ref, run));
                            if let Some(s) = self.load(run, pfp, &mut tallies) {
                                out.push(s.into());
                            }
                        }
                        out
                    })
                })
                .collect();
            handles.into_iter().filter_map(|h| h.join().ok()).flatten().collect()
        });
        drop(taken);
        let from_snapshot = fresh.len();
        let n = fresh.len() + rebuilt.len();
        inner.runs.reserve(n);
        for item in fresh.into_iter().chain(rebuilt) {
            self.insert(inner, item);
        }
        inner.unsaved = from_snapshot != n || in_snapshot != n;
        let items: Vec<Arc<Item>> = inner.order.values().cloned().collect();
        inner.watching = Some(std::thread::spawn(move || start_watch(&runs_dir, items)));
        tracing::info!(runs = n, from_snapshot, ms = started.elapsed().as_millis() as u64, "overview index built");
    }

    /// Takes the watches the first look's thread made, and looks again at the runs it found changed
    /// (or new) after their directories were watched: changes made before raised no event.
    fn adopt(&self, inner: &mut Inner, watch: Option<Watch>, stale: Vec<RunId>) {
        inner.watch = watch;
        if let Some(w) = &mut inner.watch {
            let watched: HashSet<&RunId> = w.runs_in.values().flatten().collect();
            inner.polled = inner.runs.keys().filter(|r| !watched.contains(r)).cloned().collect();
            for run in stale {
                self.revalidate(inner, &run);
            }
        }
    }

    /// Every run again: after an inotify queue overflow, or while nothing is watched.
    fn rescan(&self, inner: &mut Inner) {
        let ids: HashSet<RunId> = registered(&self.home.runs_dir()).into_iter().map(|(r, _)| r).collect();
        let gone: Vec<RunId> = inner.runs.keys().filter(|r| !ids.contains(*r)).cloned().collect();
        for run in gone {
            self.remove(inner, &run);
        }
        for run in ids {
            self.revalidate(inner, &run);
        }
    }

    /// Looks at one run again: unchanged, changed (rebuilt), new, or gone.
    fn revalidate(&self, inner: &mut Inner, run: &RunId) {
        let pfp = Fp::of(&pointer_path(&self.home.runs_dir(), run));
        if pfp.is_none() {
            self.remove(inner, run);
            return;
        }
        // Fresh: no file it came from changed, the pointer included.
        if let Some(e) = inner.runs.get(run)
            && summary::is_fresh(&e.head, pfp)
        {
            return;
        }
        // A run seen for the first time is watched before its files are looked at.
        let known = inner.runs.contains_key(run);
        let mut tallies = std::mem::take(&mut inner.tallies);
        let loaded = self.load(run, pfp, &mut tallies);
        inner.tallies = tallies;
        self.remove(inner, run);
        let Some(mut s) = loaded else { return };
        if !known && let Some(w) = &mut inner.watch {
            let dir = s.head.pointer.runstate_dir.clone();
            match w.ino.watches().add(&dir, DIR_MASK) {
                Ok(wd) => {
                    w.dirs.insert(wd, dir.clone());
                    w.runs_in.entry(dir).or_default().insert(run.clone());
                    // Look again now that it is watched.
                    if !summary::is_fresh(&s.head, pfp) {
                        let mut tallies = std::mem::take(&mut inner.tallies);
                        let again = self.load(run, pfp, &mut tallies);
                        inner.tallies = tallies;
                        match again {
                            Some(a) => s = a,
                            None => return,
                        }
                    }
                }
                Err(_) => {
                    inner.polled.insert(run.clone());
                }
            }
        }
        self.insert(inner, s.into());
    }

    /// `run`'s summary: the one on disk when it is fresh, else rebuilt from the run's files (and
    /// written back). `None`: the pointer is garbled, or it was reaped (its runstate is gone).
    fn load(&self, run: &RunId, pfp: Option<Fp>, tallies: &mut LogTallies) -> Option<Summary> {
        if let Some(s) = summary::read(&self.home, run)
            && summary::is_fresh(&s.head, pfp)
        {
            return Some(s);
        }
        let ppath = pointer_path(&self.home.runs_dir(), run);
        let pointer = summary::read_pointer(&ppath)?;
        if &pointer.run_id != run {
            return None; // registry::parse checks the name; a race with a rewrite is looked at again
        }
        if !pointer.journal_path().exists() && !pointer.liveness_path().exists() && !pointer.runstate_dir.is_dir() {
            let _ = std::fs::remove_file(&ppath);
            let _ = std::fs::remove_file(summary::path(&self.home, run));
            crate::state::registry::log_skipped(&[crate::state::registry::Skipped::Reaped {
                path: ppath,
                run_id: run.clone(),
            }]);
            return None;
        }
        match summary::build(pointer, pfp, &mut |a, log| tallies.usage(a, log)) {
            Ok(s) => {
                if let Err(e) = summary::write(&self.home, &s) {
                    tracing::debug!(RUN_ID = %run, error = %e, "summary not written back");
                }
                Some(s)
            }
            Err(e) => {
                tracing::warn!(RUN_ID = %run, error = %e, "run unreadable, skipped");
                None
            }
        }
    }

    fn insert(&self, inner: &mut Inner, s: Item) {
        let run = s.head.pointer.run_id.clone();
        if inner.runs.contains_key(&run) {
            self.remove(inner, &run); // e.g. a run twice in a hand-edited snapshot: the last wins
        }
        let s = Arc::new(s);
        // A run of a watched directory (`runs_in` keeps a directory's key while it is watched).
        if let Some(w) = &mut inner.watch
            && let Some(set) = w.runs_in.get_mut(&s.head.pointer.runstate_dir)
        {
            set.insert(run.clone());
        }
        inner.order.insert(Cursor(s.head.activity_ns as i128, run.clone()), s.clone());
        inner.runs.insert(run, s);
        inner.unsaved = true;
    }

    fn remove(&self, inner: &mut Inner, run: &RunId) {
        if let Some(e) = inner.runs.remove(run) {
            inner.order.remove(&Cursor(e.head.activity_ns as i128, run.clone()));
            if let Some(w) = &mut inner.watch
                && let Some(set) = w.runs_in.get_mut(&e.head.pointer.runstate_dir)
            {
                set.remove(run);
            }
            inner.unsaved = true;
        }
        inner.polled.remove(run);
    }

    /// Writes the snapshot from a thread (the request does not wait for it).
    fn save(&self, inner: &mut Inner) {
        let all: Vec<Arc<Item>> = inner.order.values().cloned().collect();
        let path = self.home.runs_dir().join(SNAPSHOT);
        std::thread::spawn(move || {
            let mut out = Vec::with_capacity(all.len() * 1200);
            for s in all.iter().filter(|s| s.checked.get() != Some(&false)) {
                serde_json::to_writer(&mut out, &s.head).expect("a summary serializes");
                out.push(b'\t');
                out.extend_from_slice(s.row.text().as_bytes());
                out.push(b'\n');
            }
            if let Err(e) = crate::os::home::replace_cache(&path, &out, 0o600) {
                tracing::debug!(error = %e, "overview snapshot not written");
            }
        });
        inner.unsaved = false;
        inner.saved_at = Some(Instant::now());
    }
}

/// The snapshot as read: its text, and each line's head (JSON) and row (JSON, not parsed here) by
/// run. A line that does not parse is left out; empty when there is none or it is unreadable.
#[derive(Default)]
struct Snapshot {
    text: Arc<String>,
    rows: Vec<(Head, std::ops::Range<usize>)>,
}

fn read_snapshot(runs_dir: &Path) -> Snapshot {
    let Ok(bytes) = std::fs::read(runs_dir.join(SNAPSHOT)) else { return Snapshot::default() };
    let Ok(text) = String::from_utf8(bytes) else { return Snapshot::default() };
    let text = Arc::new(text);
    let mut lines = Vec::new();
    let mut at = 0;
    for end in memchr::memchr_iter(b'\n', text.as_bytes()) {
        lines.push(at..end);
        at = end + 1;
    }
    let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1).min(8);
    let chunk = lines.len().div_ceil(threads).max(256);
    let all = text.as_bytes();
    let rows = std::thread::scope(|s| {
        let handles: Vec<_> = lines
            .chunks(chunk)
            .map(|c| {
                s.spawn(move || {
                    let mut out = Vec::with_capacity(c.len());
                    out.extend(c.iter().filter_map(|r| {
                        let tab = r.start + memchr::memchr(b'\t', &all[r.clone()])?;
                        let head = serde_json::from_slice::<Head>(&all[r.start..tab]).ok()?;
                        let row = tab + 1..r.end;
                        (head.v == summary::VERSION && all[row.clone()].ends_with(b"}")).then_some((head, row))
                    }));
                    out
                })
            })
            .collect();
        handles.into_iter().filter_map(|h| h.join().ok()).flatten().collect()
    });
    Snapshot { text, rows }
}

fn pointer_path(runs_dir: &Path, run: &RunId) -> PathBuf {
    runs_dir.join(format!("{run}.json"))
}

/// The runIds of the pointers in the registry directory, with the pointers' inodes.
fn registered(runs_dir: &Path) -> Vec<(RunId, u64)> {
    use std::os::unix::fs::DirEntryExt;
    let Ok(rd) = std::fs::read_dir(runs_dir) else { return Vec::new() };
    rd.flatten()
        .filter_map(|e| {
            let name = e.file_name();
            let name = name.to_str()?;
            if name.starts_with('.') {
                return None;
            }
            Some((RunId::parse(name.strip_suffix(".json")?).ok()?, e.ino()))
        })
        .collect()
}

/// Watches the registry and each run's runstate directory (`None`: inotify is unavailable, and every
/// request looks at every run). Also the runs to look at again: those whose files changed, or that
/// were registered, before their directory (or the registry) was watched.
fn start_watch(runs_dir: &Path, items: Vec<Arc<Item>>) -> (Option<Watch>, Vec<RunId>) {
    let ino = match Inotify::init() {
        Ok(i) => i,
        Err(e) => {
            tracing::warn!(error = %e, "inotify unavailable: GET /runs looks at every run on each request");
            return (None, Vec::new());
        }
    };
    let _ = crate::os::home::private_dir(runs_dir);
    let mask = WatchMask::MOVED_TO | WatchMask::MOVED_FROM | WatchMask::CREATE | WatchMask::DELETE | WatchMask::MODIFY;
    let runs_wd = match ino.watches().add(runs_dir, mask) {
        Ok(wd) => wd,
        Err(e) => {
            tracing::warn!(error = %e, "cannot watch the registry: GET /runs looks at every run on each request");
            return (None, Vec::new());
        }
    };
    let mut w = Watch { ino, runs_wd, dirs: HashMap::new(), runs_in: HashMap::new(), buf: vec![0; 64 * 1024] };
    // Listed once the registry is watched: a pointer replaced before has another inode (pointers are
    // replaced by rename); one replaced after raised an event.
    let listed: HashMap<RunId, u64> = registered(runs_dir).into_iter().collect();
    let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1).min(8);
    let chunk = items.len().div_ceil(threads).max(256);
    let (watches, listed_ref) = (w.ino.watches(), &listed);
    type Part = (Vec<(WatchDescriptor, PathBuf, RunId)>, Vec<RunId>, usize);
    let parts: Vec<Part> = std::thread::scope(|s| {
        let handles: Vec<_> = items
            .chunks(chunk)
            .map(|c| {
                let mut watches = watches.clone();
                s.spawn(move || {
                    let (mut added, mut stale, mut failed) = (Vec::with_capacity(c.len()), Vec::new(), 0);
                    for item in c {
                        let h = &item.head;
                        let (run, dir) = (&h.pointer.run_id, &h.pointer.runstate_dir);
                        // The same descriptor again when another run's turn watched it already.
                        match watches.add(dir, DIR_MASK) {
                            Ok(wd) => added.push((wd, dir.clone(), run.clone())),
                            Err(_) => {
                                failed += 1;
                                continue;
                            }
                        }
                        let same_pointer =
                            listed_ref.get(run).is_some_and(|ino| h.fps.pointer.is_some_and(|f| f.ino == *ino));
                        if !same_pointer || !summary::is_fresh(h, h.fps.pointer) {
                            stale.push(run.clone());
                        }
                    }
                    (added, stale, failed)
                })
            })
            .collect();
        handles.into_iter().filter_map(|h| h.join().ok()).collect()
    });
    let (mut failed, mut stale) = (0, Vec::new());
    for (added, st, f) in parts {
        failed += f;
        stale.extend(st);
        for (wd, dir, run) in added {
            w.dirs.insert(wd, dir.clone());
            w.runs_in.entry(dir).or_default().insert(run);
        }
    }
    let known: HashSet<&RunId> = items.iter().map(|i| &i.head.pointer.run_id).collect();
    stale.extend(listed.into_keys().filter(|r| !known.contains(r)));
    if failed > 0 {
        tracing::warn!(
            failed,
            "runstate directories not watched (inotify limits?): their runs are looked at on every request"
        );
    }
    (Some(w), stale)
}

/// The runs the queued events name, and whether every run must be looked at (overflow, no inotify).
fn drain(inner: &mut Inner) -> (HashSet<RunId>, bool) {
    let mut dirty = HashSet::new();
    let Some(w) = &mut inner.watch else { return (dirty, true) };
    loop {
        let events = match w.ino.read_events(&mut w.buf) {
            Ok(ev) => ev,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) => {
                tracing::warn!(error = %e, "inotify read failed: looking at every run");
                return (dirty, true);
            }
        };
        let mut any = false;
        for ev in events {
            any = true;
            if ev.mask.contains(EventMask::Q_OVERFLOW) {
                return (dirty, true);
            }
            let Some(name) = ev.name.and_then(|n| n.to_str()) else { continue };
            if ev.wd == w.runs_wd {
                if let Some(run) = name.strip_suffix(".json").and_then(|r| RunId::parse(r).ok()) {
                    dirty.insert(run);
                }
                continue;
            }
            let dir = match w.dirs.get(&ev.wd) {
                Some(d) => d,
                None => continue,
            };
            if let Some(runs) = w.runs_in.get(dir) {
                for run in runs {
                    let slug = run.slug();
                    let of_run = name
                        .strip_prefix(slug.as_str())
                        .is_some_and(|rest| matches!(rest, ".jsonl" | ".live.json" | ".plan.json"));
                    if of_run {
                        dirty.insert(run.clone());
                    }
                }
            }
        }
        if !any {
            break;
        }
    }
    (dirty, false)
}

/// The rows of `q`'s page, from the index.
/// Also the runs whose row turned out not to be JSON (nothing else is served then).
fn page(inner: &Inner, q: &Query) -> (Page, Vec<RunId>) {
    let filtered = !q.status.is_empty()
        || q.live.is_some()
        || q.project.is_some()
        || q.repo.is_some()
        || q.branch.is_some()
        || q.plane.is_some()
        || q.q.is_some()
        || q.since.is_some()
        || q.host.is_some();
    let matches = |i: &Item| -> bool {
        let (s, p) = (&i.head, &i.head.pointer);
        q.host.is_none()
            && (q.status.is_empty() || q.status.contains(&s.status))
            && q.project.as_ref().is_none_or(|x| *x == p.project)
            && q.repo.as_ref().is_none_or(|x| *x == p.repo)
            && q.branch.as_ref().is_none_or(|x| Some(x) == p.branch.as_ref())
            && q.plane.is_none_or(|x| x == p.plane)
            && q.since.is_none_or(|t| s.activity_ns as i128 > t)
            && q.q.as_ref().is_none_or(|x| {
                p.slug.as_str().to_lowercase().contains(x.as_str()) || p.run_id.as_str().contains(x.as_str())
            })
            && q.live.is_none_or(|want| alive(i) == want)
    };
    let mut body = Vec::with_capacity(q.limit.min(inner.runs.len()) * 800 + 2);
    body.push(b'[');
    let (mut n, mut more, mut next_after, mut garbled) = (0, false, None, Vec::new());
    let after: Box<dyn Iterator<Item = (&Cursor, &Arc<Item>)>> = match &q.after {
        Some(a) => Box::new(inner.order.range(..a.clone()).rev()),
        None => Box::new(inner.order.iter().rev()),
    };
    for (c, s) in after {
        if filtered && !matches(s) {
            continue;
        }
        if n == q.limit {
            more = true;
            break;
        }
        if n > 0 {
            body.push(b',');
        }
        if !row_json(s, &mut body) {
            if n > 0 {
                body.pop();
            }
            garbled.push(c.1.clone());
            continue;
        }
        n += 1;
        next_after = Some(c.clone());
    }
    body.push(b']');
    let total = if filtered { inner.order.values().filter(|s| matches(s)).count() } else { inner.order.len() };
    (Page { body, next_after, more, total }, garbled)
}

/// Appends `s`'s row with `live` and `supervisor` (asked now) to `out`; false (nothing appended)
/// when the stored row is not JSON.
fn row_json(s: &Item, out: &mut Vec<u8>) -> bool {
    let row = s.row.text().trim_end();
    if !*s.checked.get_or_init(|| serde_json::from_str::<serde::de::IgnoredAny>(row).is_ok()) {
        return false;
    }
    out.extend_from_slice(&row.as_bytes()[..row.len() - 1]);
    let live = alive(s);
    out.extend_from_slice(if live { b",\"live\":true" } else { b",\"live\":false" });
    let supervisor = crate::views::Supervisor::of(live, s.head.status.into(), s.head.pointer.plane.into());
    out.extend_from_slice(b",\"supervisor\":\"");
    out.extend_from_slice(crate::wire::name_of(&supervisor).as_bytes());
    out.extend_from_slice(b"\"}");
    true
}

fn alive(s: &Item) -> bool {
    s.head.supervisor_pid.is_some_and(crate::state::liveness::pid_alive)
}
