//! What a fleet API keeps in memory, all of it rebuilt from JetStream when it starts (a restart
//! loses nothing): each run's row as its relay last published it (the views stream, last message
//! per subject), each host's last word (the hosts stream), and, per run, the journal stream's
//! sequence of its last record — so `Harness-Watch-Cursor` names a point every listed row covers.

use crate::fleet::{self, header};
use crate::ids::{HostName, RunId};
use async_nats::jetstream::{self, consumer};
use futures_util::StreamExt;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};
use tokio::sync::{broadcast, watch};

/// A run of a host.
pub type Key = (HostName, RunId);

/// One run's row as its relay published it.
pub struct Row {
    pub key: Key,
    /// The row's JSON as published (with `host`), ending in `}`.
    pub json: Vec<u8>,
    pub row: crate::views::RunRow,
    /// The Overview's sort key: the run's last activity (ns).
    pub activity: i128,
    /// The journal stream sequence of the last record the row reflects.
    pub covers: u64,
}

/// When a host's relay last spoke, and what it said of itself.
#[derive(Clone)]
pub struct Seen {
    pub at: std::time::SystemTime,
    pub info: serde_json::Value,
}

#[derive(Default)]
pub struct Index {
    pub rows: HashMap<Key, Arc<Row>>,
    /// Newest activity last: `(activity, runId, host)`.
    pub order: BTreeMap<(i128, RunId, HostName), Arc<Row>>,
    /// The hosts that hold each runId.
    pub hosts_of: HashMap<RunId, Vec<HostName>>,
    /// Per run: the journal stream sequence of its last record seen, and of the first one its row
    /// does not yet cover (`0`: covered).
    journal: HashMap<Key, (u64, u64)>,
    /// The second of each `journal` entry that is not 0, counted (the watch cursor's candidates,
    /// kept so that a page does not pass over every run to find the least).
    lagging: BTreeMap<u64, usize>,
    /// How far the journal tracker has read the journal stream.
    journal_at: u64,
    /// Runs withdrawn (pruned on their host): their journal records wait for no row.
    dropped: std::collections::HashSet<Key>,
}

impl Index {
    fn put(&mut self, r: Row) {
        self.dropped.remove(&r.key);
        let r = Arc::new(r);
        if let Some(old) = self.rows.insert(r.key.clone(), r.clone()) {
            self.order.remove(&(old.activity, old.key.1.clone(), old.key.0.clone()));
        } else {
            self.hosts_of.entry(r.key.1.clone()).or_default().push(r.key.0.clone());
        }
        self.order.insert((r.activity, r.key.1.clone(), r.key.0.clone()), r.clone());
        if let Some(j) = self.journal.get_mut(&r.key)
            && j.1 != 0
            && r.covers >= j.0
        {
            unlag(&mut self.lagging, j.1);
            j.1 = 0;
        }
    }

    fn drop_run(&mut self, key: &Key) {
        if let Some(old) = self.rows.remove(key) {
            self.order.remove(&(old.activity, key.1.clone(), key.0.clone()));
            if let Some(h) = self.hosts_of.get_mut(&key.1) {
                h.retain(|x| *x != key.0);
                if h.is_empty() {
                    self.hosts_of.remove(&key.1);
                }
            }
        }
        if let Some(j) = self.journal.remove(key)
            && j.1 != 0
        {
            unlag(&mut self.lagging, j.1);
        }
        self.dropped.insert(key.clone());
    }

    /// A record of `key` at journal stream sequence `seq`. At start (`initial`) only each run's
    /// last record is read: a row behind it is taken to miss everything after what it covers.
    fn record(&mut self, key: Key, seq: u64, initial: bool) {
        self.journal_at = self.journal_at.max(seq);
        if self.dropped.contains(&key) {
            return;
        }
        let covered = self.rows.get(&key).map_or(0, |r| r.covers);
        let j = self.journal.entry(key).or_insert((0, 0));
        j.0 = j.0.max(seq);
        if seq > covered && j.1 == 0 {
            j.1 = if initial && covered > 0 { covered + 1 } else { seq };
            *self.lagging.entry(j.1).or_default() += 1;
        }
        self.journal_at = self.journal_at.max(seq);
    }

    /// The `/watch` cursor a list of the rows now joins: every record after it comes again on
    /// `/watch`, and every record at or before it is in its run's row.
    pub fn watch_cursor(&self) -> u64 {
        let lagging = self.lagging.keys().next().map(|l| l - 1);
        lagging.map_or(self.journal_at, |l| l.min(self.journal_at))
    }
}

/// One fewer run lagging from `at`.
fn unlag(lagging: &mut BTreeMap<u64, usize>, at: u64) {
    if let Some(n) = lagging.get_mut(&at) {
        *n -= 1;
        if *n == 0 {
            lagging.remove(&at);
        }
    }
}

/// The shared index and its news.
pub struct Shared {
    pub index: RwLock<Index>,
    pub hosts: RwLock<BTreeMap<HostName, Seen>>,
    /// Runs whose row changed.
    pub rows_changed: broadcast::Sender<Key>,
    /// True once the rows, hosts and journal positions present at start are read.
    pub loaded: watch::Receiver<bool>,
}

/// Starts the three followers; `loaded` flips once each has read what was there at start.
pub fn follow(js: jetstream::Context) -> Arc<Shared> {
    let (tx, rx) = watch::channel(false);
    let shared = Arc::new(Shared {
        index: Default::default(),
        hosts: Default::default(),
        rows_changed: broadcast::channel(4096).0,
        loaded: rx,
    });
    let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let tx = Arc::new(tx);
    for what in [Follow::Rows, Follow::Hosts, Follow::Journal] {
        let (js, shared, done, tx) = (js.clone(), shared.clone(), done.clone(), tx.clone());
        tokio::spawn(async move {
            let mark = move || {
                if done.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1 == 3 {
                    let _ = tx.send(true);
                }
            };
            follow_one(js, shared, what, mark).await;
        });
    }
    shared
}

#[derive(Clone, Copy, Debug)]
enum Follow {
    Rows,
    Hosts,
    Journal,
}

/// Follows one stream for as long as the API runs: from the last message per subject, then live;
/// after an error, again from the last message per subject (what is applied twice is the same).
async fn follow_one(js: jetstream::Context, shared: Arc<Shared>, what: Follow, mark: impl FnOnce()) {
    let (stream, filter) = match what {
        Follow::Rows => (fleet::VIEWS_STREAM, "harness.views.*.*.row"),
        Follow::Hosts => (fleet::HOSTS_STREAM, "harness.hosts.>"),
        Follow::Journal => (fleet::JOURNAL_STREAM, "harness.journal.>"),
    };
    let mut mark = Some(mark);
    loop {
        match follow_pass(&js, &shared, what, stream, filter, &mut mark).await {
            Ok(()) => {}
            Err(e) => tracing::warn!(stream, error = %e, "following the fleet's stream: starting over"),
        }
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
}

async fn follow_pass(
    js: &jetstream::Context,
    shared: &Shared,
    what: Follow,
    stream: &str,
    filter: &str,
    mark: &mut Option<impl FnOnce()>,
) -> Result<(), String> {
    let s = js.get_stream(stream).await.map_err(|e| e.to_string())?;
    let cfg = consumer::pull::OrderedConfig {
        filter_subject: filter.into(),
        deliver_policy: consumer::DeliverPolicy::LastPerSubject,
        headers_only: matches!(what, Follow::Journal),
        ..Default::default()
    };
    let started = std::time::Instant::now();
    let mut c = s.create_consumer(cfg).await.map_err(|e| e.to_string())?;
    let at_start = c.info().await.map_err(|e| e.to_string())?.num_pending;
    let read = |n: u64| {
        tracing::info!(
            stream,
            messages = n,
            ms = started.elapsed().as_millis() as u64,
            "read what the stream held at start"
        )
    };
    if at_start == 0
        && let Some(m) = mark.take()
    {
        read(0);
        m();
    }
    let mut msgs = c.messages().await.map_err(|e| e.to_string())?;
    while let Some(m) = msgs.next().await {
        let m = m.map_err(|e| e.to_string())?;
        let Ok(info) = m.info() else { continue };
        let (seq, pending) = (info.stream_sequence, info.pending);
        // When the stream took it, by the server's clock (not the host's: its clock may be off).
        let stored = u64::try_from(info.published.unix_timestamp_nanos())
            .ok()
            .map(|ns| std::time::UNIX_EPOCH + std::time::Duration::from_nanos(ns));
        apply(shared, what, &m.subject, m.headers.as_ref(), &m.payload, (seq, mark.is_some(), stored));
        if pending == 0
            && let Some(m) = mark.take()
        {
            read(at_start);
            m();
        }
    }
    Err("the consumer ended".into())
}

/// Applies one message; `at`: its stream sequence, and whether it is of the start's read.
fn apply(
    shared: &Shared,
    what: Follow,
    subject: &str,
    headers: Option<&async_nats::HeaderMap>,
    payload: &[u8],
    (seq, initial, stored): (u64, bool, Option<std::time::SystemTime>),
) {
    let h = |name: &str| headers.and_then(|h| h.get(name)).map(|v| v.as_str().to_string());
    match what {
        Follow::Rows => {
            let Some((host, run, _)) = fleet::parse_view_subject(subject) else { return };
            let key = (host, run);
            let mut index = shared.index.write().unwrap_or_else(|p| p.into_inner());
            if h(header::GONE).is_some() {
                index.drop_run(&key);
            } else {
                match row_of(key.clone(), payload, h(header::COVERS).and_then(|c| c.parse().ok()).unwrap_or(0)) {
                    Some(r) => index.put(r),
                    None => tracing::warn!(subject, "a row that is not a run row: skipped"),
                }
            }
            drop(index);
            let _ = shared.rows_changed.send(key);
        }
        Follow::Hosts => {
            let Some(host) = subject.strip_prefix("harness.hosts.").and_then(|h| HostName::parse(h).ok()) else {
                return;
            };
            let info: serde_json::Value = serde_json::from_slice(payload).unwrap_or_default();
            let at = stored
                .or_else(|| {
                    info.get("seen")
                        .and_then(|s| s.as_str())
                        .and_then(crate::state::summary::parse_time)
                        .and_then(|ns| u64::try_from(ns).ok())
                        .map(|ns| std::time::UNIX_EPOCH + std::time::Duration::from_nanos(ns))
                })
                .unwrap_or(std::time::UNIX_EPOCH);
            shared.hosts.write().unwrap_or_else(|p| p.into_inner()).insert(host, Seen { at, info });
        }
        Follow::Journal => {
            if let Some(key) = fleet::parse_journal_subject(subject) {
                shared.index.write().unwrap_or_else(|p| p.into_inner()).record(key, seq, initial);
            }
        }
    }
}

/// A published row, read.
fn row_of(key: Key, payload: &[u8], covers: u64) -> Option<Row> {
    let row: crate::views::RunRow = serde_json::from_slice(payload).ok()?;
    let ts = row.run.updated.as_deref().unwrap_or(&row.run.created);
    let activity = crate::state::summary::parse_time(ts).unwrap_or(0);
    let mut json = payload.to_vec();
    while json.last().is_some_and(|b| b.is_ascii_whitespace()) {
        json.pop();
    }
    json.last().is_some_and(|b| *b == b'}').then_some(Row { key, json, row, activity, covers })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pruned run's journal records, read after its row was withdrawn (the followers run apart),
    /// wait for no row: the watch cursor moves on past them.
    #[test]
    fn a_withdrawn_runs_records_do_not_hold_the_watch_cursor() {
        let key: Key = (HostName::parse("h1").unwrap(), RunId::parse("0123456789ab--gone").unwrap());
        let mut index = Index::default();
        index.record(key.clone(), 5, true);
        assert_eq!(index.watch_cursor(), 4, "a record no row covers holds the cursor before it");
        index.drop_run(&key);
        assert_eq!(index.watch_cursor(), 5);
        index.record(key, 10, true);
        assert_eq!(index.watch_cursor(), 10, "the withdrawn run's later record holds nothing");
    }

    /// The kept count of lagging runs answers as a pass over every run does, whatever the order of
    /// records and withdrawals.
    #[test]
    fn the_watch_cursor_kept_equals_the_one_counted() {
        let keys: Vec<Key> = (0..6)
            .map(|i| {
                (
                    HostName::parse(&format!("h{}", i % 2)).unwrap(),
                    RunId::parse(&format!("0123456789ab--r{i}")).unwrap(),
                )
            })
            .collect();
        let mut index = Index::default();
        let mut x: u64 = 0x9e3779b97f4a7c15;
        let (mut puts, mut lags) = (0, 0);
        for seq in 1..2000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let key = keys[(x % 6) as usize].clone();
            if x.is_multiple_of(17) {
                index.drop_run(&key);
            } else if x.is_multiple_of(5) {
                // A row published: covering the run's journal up to a sequence at or before now.
                let row = row_of(key, ROW.as_bytes(), (x >> 8) % (seq + 1)).expect("a row");
                index.put(row);
            } else {
                index.record(key, seq, x.is_multiple_of(3));
            }
            let counted = index.journal.values().filter(|j| j.1 != 0).map(|j| j.1 - 1).min();
            assert_eq!(index.watch_cursor(), counted.map_or(index.journal_at, |l| l.min(index.journal_at)), "at {seq}");
            (puts, lags) = (puts + usize::from(x.is_multiple_of(5)), lags + usize::from(counted.is_some()));
        }
        assert!(puts > 300 && lags > 300, "rows put ({puts}) and runs lagging ({lags}) all along");
    }

    /// A run's row as a relay publishes it.
    const ROW: &str = r#"{"attention_marks":0,"base_branch":null,"base_slug":"s","blocked_by":[],"branch":null,"budget_usd":null,"counts":{"committed":0,"gated":0,"halted":0,"implemented":0,"leased":1,"pending":1,"reviewed":0,"skipped":0},"created":"2026-12-07T18:53:59.874Z","fails_at":null,"finished_at":null,"journal":{"bad_lines":0,"records":2,"torn_tail":false},"live":false,"pause_detail":null,"pause_reason":null,"paused":false,"pending_approvals":0,"plane":"dynwf","project":"p","repo":"p","repoRoot":"/r","resume_at":null,"runId":"0123456789ab--r0","slug":"s","stalled":false,"stalled_since":null,"started_at":"2026-11-29T10:00:00.000Z","status":"running","supervisor":"none","tasks":2,"updated":"2026-11-29T10:00:01.000Z","usage":{"cache_read_tokens":null,"cache_write_tokens":null,"cost":"engine","cost_usd":0.0,"input_tokens":null,"output_tokens":null,"turns":0},"wave":1,"waves":2,"worktree":"/r"}"#;
}
