//! The fleet's shared vocabulary (`spec/FLEET.md`): how a host's runs are named in NATS JetStream —
//! streams, subjects, message ids and headers — and how harness connects to NATS (URL, credentials,
//! TLS). The relay (`relay/`) publishes a home under these names and answers its verbs; the fleet
//! API (`api/fleet.rs`) serves every host from them. Knows no run state and no HTTP; never sends a
//! secret on a command line (credentials come from a file or the environment).

use crate::ids::{HostName, RunId, TaskId};
use async_nats::jetstream::{self, stream};
use std::path::PathBuf;
use std::time::Duration;

/// Every journal line of every run, one message each (`harness.journal.<host>.<run>`).
pub const JOURNAL_STREAM: &str = "HARNESS_JOURNAL";
/// Every task's events/v1, one message each (`harness.events.<host>.<run>.<task>`).
pub const EVENTS_STREAM: &str = "HARNESS_EVENTS";
/// The latest of each view (`harness.views.<host>.<run>.<row|detail|approvals|task.<task>>`).
pub const VIEWS_STREAM: &str = "HARNESS_VIEWS";
/// When each host's relay last spoke (`harness.hosts.<host>`), kept after it stops.
pub const HOSTS_STREAM: &str = "HARNESS_HOSTS";
/// The lease on each host name (`harness.lease.<host>`): gone `LEASE_TTL` after its relay stops.
pub const LEASES_STREAM: &str = "HARNESS_LEASES";

/// A relay renews its lease and says it is there this often.
pub const HEARTBEAT: Duration = Duration::from_secs(3);
/// A lease not renewed for this long lapses: the host name is free again.
pub const LEASE_TTL: Duration = Duration::from_secs(15);
/// A host whose relay has not spoken for this long is offline: its verbs are refused unsent.
pub const OFFLINE_AFTER: Duration = Duration::from_secs(10);
/// How long JetStream remembers a message id: a relay that re-sends what it may have sent (after
/// a lost ack, a reconnect) within it is deduplicated by the server too.
pub const DUPLICATE_WINDOW: Duration = Duration::from_secs(600);
/// How long a relay waits for JetStream to acknowledge a message before it asks again where the
/// stream stands.
pub const ACK_WAIT: Duration = Duration::from_secs(5);
/// The fleet API waits this much longer than the host's own answer budget for a relayed request
/// (so the host's own 504 passes through as it is).
pub const RELAY_MARGIN: Duration = Duration::from_secs(5);

/// Message headers.
pub mod header {
    /// A journal message's line (1-based).
    pub const LINE: &str = "Harness-Line";
    /// An event message's seq (`<line>` or `<line>.<k>`).
    pub const SEQ: &str = "Harness-Seq";
    /// Where the line of a journal or event message starts in its file (bytes): a restarted relay
    /// reads on from there without scanning the file.
    pub const AT: &str = "Harness-At";
    /// A view's content hash: a restarted relay publishes only views that changed.
    pub const HASH: &str = "Harness-Hash";
    /// On a row: the journal stream sequence of the last record of the run it reflects.
    pub const COVERS: &str = "Harness-Covers";
    /// On a row: the run is gone from its home (`pruned`); the fleet drops it.
    pub const GONE: &str = "Harness-Gone";
    /// A relayed request's method and path (with its query).
    pub const METHOD: &str = "Harness-Method";
    pub const PATH: &str = "Harness-Path";
    /// A relayed answer's HTTP status.
    pub const STATUS: &str = "Harness-Status";
}

/// A subject token: ids may hold `.`, which separates NATS tokens, so it is written `%2E` (no id
/// holds `%`, so the mapping is one to one).
pub fn token(s: &str) -> String {
    s.replace('.', "%2E")
}

/// The id a subject token stands for.
pub fn untoken(t: &str) -> String {
    t.replace("%2E", ".")
}

pub fn journal_subject(host: &HostName, run: &RunId) -> String {
    format!("harness.journal.{host}.{}", token(run.as_str()))
}

pub fn events_subject(host: &HostName, run: &RunId, task: &TaskId) -> String {
    format!("harness.events.{host}.{}.{}", token(run.as_str()), token(task.as_str()))
}

/// The subject of one of a run's views.
pub fn view_subject(host: &HostName, run: &RunId, view: &View) -> String {
    let run = token(run.as_str());
    match view {
        View::Row => format!("harness.views.{host}.{run}.row"),
        View::Detail => format!("harness.views.{host}.{run}.detail"),
        View::Approvals => format!("harness.views.{host}.{run}.approvals"),
        View::Task(t) => format!("harness.views.{host}.{run}.task.{}", token(t.as_str())),
    }
}

pub fn hosts_subject(host: &HostName) -> String {
    format!("harness.hosts.{host}")
}

pub fn lease_subject(host: &HostName) -> String {
    format!("harness.lease.{host}")
}

/// Where a host's relay answers requests (core NATS request-reply).
pub fn rpc_subject(host: &HostName) -> String {
    format!("harness.rpc.{host}")
}

/// The views a relay publishes of each run: what `GET /runs`, `/runs/:id`, `/approvals` and
/// `/tasks/:tid` answer on the host itself.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum View {
    Row,
    Detail,
    Approvals,
    Task(TaskId),
}

/// What a view subject names: its host, run and view (`None`: not a view subject).
pub fn parse_view_subject(subject: &str) -> Option<(HostName, RunId, View)> {
    let mut parts = subject.strip_prefix("harness.views.")?.split('.');
    let host = HostName::parse(parts.next()?).ok()?;
    let run = RunId::parse(&untoken(parts.next()?)).ok()?;
    let view = match (parts.next()?, parts.next()) {
        ("row", None) => View::Row,
        ("detail", None) => View::Detail,
        ("approvals", None) => View::Approvals,
        ("task", Some(t)) => View::Task(TaskId::parse(&untoken(t)).ok()?),
        _ => return None,
    };
    parts.next().is_none().then_some((host, run, view))
}

/// The host and run of a journal subject.
pub fn parse_journal_subject(subject: &str) -> Option<(HostName, RunId)> {
    let (host, run) = subject.strip_prefix("harness.journal.")?.split_once('.')?;
    Some((HostName::parse(host).ok()?, RunId::parse(&untoken(run)).ok()?))
}

/// A journal line's message id: its position, so a relay that publishes it again (restarted, or
/// after a lost ack) is deduplicated.
pub fn journal_msg_id(host: &HostName, run: &RunId, line: u64) -> String {
    format!("{host}~{run}:{line}")
}

/// An event's message id: its position (`seq`) in its task's log.
pub fn event_msg_id(host: &HostName, run: &RunId, task: &TaskId, seq: &str) -> String {
    format!("{host}~{run}:{task}:{seq}")
}

/// How to reach NATS: servers, credentials, TLS. Built from the command line (`--nats`,
/// `--creds`) and the environment; never holds a secret given on a command line.
#[derive(Debug, Clone)]
pub struct Nats {
    /// `nats://host:port` or `tls://host:port`, comma-separated for a cluster.
    pub servers: Vec<String>,
    /// A `.creds` file (JWT + nkey seed), `--creds` or `HARNESS_NATS_CREDS`.
    pub creds: Option<PathBuf>,
    /// The streams' replicas when harness creates them (`--replicas`; a single server gets 1).
    pub replicas: usize,
    /// What connects (`relay <host>`, `fleet api`), as the server's monitoring shows it.
    pub name: String,
    /// Settings read from a file (`$HARNESS_HOME/relay.env`): the environment wins over them.
    pub settings: std::collections::BTreeMap<String, String>,
}

/// The settings `$HARNESS_HOME/relay.env` may hold (`KEY=VALUE` lines; `#` comments).
pub const SETTINGS: &[&str] = &[
    "HARNESS_NATS_URL",
    "HARNESS_RELAY_HOST",
    "HARNESS_NATS_CREDS",
    "HARNESS_NATS_USER",
    "HARNESS_NATS_PASSWORD",
    "HARNESS_NATS_TOKEN",
    "HARNESS_NATS_NKEY",
    "HARNESS_NATS_CA",
    "HARNESS_NATS_CERT",
    "HARNESS_NATS_KEY",
];

/// Reads a settings file: refused when others may read or write it (it may hold a password) or it
/// names a key harness does not know; a missing file is no settings.
pub fn read_settings(path: &std::path::Path) -> Result<std::collections::BTreeMap<String, String>, String> {
    use std::os::unix::fs::MetadataExt;
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Default::default()),
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    if !meta.is_file() {
        return Err(format!("{} is not a regular file", path.display()));
    }
    if meta.mode() & 0o077 != 0 || meta.uid() != crate::os::peer::own_uid() {
        return Err(format!(
            "{} may be read by others (it may hold a password): make it yours and private: chmod 600 {}",
            path.display(),
            path.display()
        ));
    }
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut out = std::collections::BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (k, v) =
            line.split_once('=').ok_or_else(|| format!("{} line {}: expected KEY=VALUE", path.display(), i + 1))?;
        let (k, v) = (k.trim(), v.trim().trim_matches('"'));
        if !SETTINGS.contains(&k) {
            return Err(format!(
                "{} line {}: unknown setting {k} (known: {})",
                path.display(),
                i + 1,
                SETTINGS.join(", ")
            ));
        }
        out.insert(k.to_string(), v.to_string());
    }
    Ok(out)
}

impl Nats {
    /// Reads `url` (one or more comma-separated server URLs). A URL that carries a user, password
    /// or token is refused: the command line is visible to every uid (`ps`).
    pub fn new(url: &str, creds: Option<PathBuf>, replicas: usize, name: &str) -> Result<Nats, String> {
        let mut servers = Vec::new();
        for u in url.split(',').map(str::trim).filter(|u| !u.is_empty()) {
            let rest = match u.split_once("://") {
                Some(("nats" | "tls", rest)) => rest,
                Some((scheme, _)) => {
                    return Err(format!("--nats {u}: the scheme must be nats:// or tls://, not {scheme}://"));
                }
                None => u,
            };
            if rest.split('/').next().unwrap_or("").contains('@') {
                return Err(
                    "--nats: a URL carrying a user, password or token is refused (the command line is visible to every user): give a creds file (--creds FILE), or HARNESS_NATS_USER and HARNESS_NATS_PASSWORD, or HARNESS_NATS_TOKEN, in the environment"
                    .into());
            }
            if rest.is_empty() {
                return Err(format!("--nats {u}: no server address"));
            }
            servers.push(if u.contains("://") { u.to_string() } else { format!("nats://{u}") });
        }
        if servers.is_empty() {
            return Err("--nats: no server URL (e.g. nats://127.0.0.1:4222)".into());
        }
        if !(1..=5).contains(&replicas) {
            return Err(format!("--replicas must be 1 to 5 (JetStream's limit), got {replicas}"));
        }
        let creds = creds.or_else(|| std::env::var_os("HARNESS_NATS_CREDS").map(PathBuf::from));
        Ok(Nats { servers, creds, replicas, name: name.to_string(), settings: Default::default() })
    }

    /// `Nats` with settings from a file (the environment wins over them).
    pub fn with_settings(mut self, settings: std::collections::BTreeMap<String, String>) -> Nats {
        if self.creds.is_none() {
            self.creds = settings.get("HARNESS_NATS_CREDS").map(PathBuf::from);
        }
        self.settings = settings;
        self
    }

    /// Connects, retrying in the background while the servers are down (a relay starts, and
    /// keeps its home's work going, whether NATS is up or not).
    pub async fn connect(&self) -> Result<async_nats::Client, String> {
        // rustls is built here with more than one crypto backend (through the client's
        // dependencies), so it cannot pick one by itself: ring, once per process (a second call
        // finds it installed).
        let _ = async_nats::rustls::crypto::ring::default_provider().install_default();
        let mut o = match &self.creds {
            Some(p) => async_nats::ConnectOptions::with_credentials_file(p)
                .await
                .map_err(|e| format!("--creds {}: {e}", p.display()))?,
            None => async_nats::ConnectOptions::new(),
        };
        let env = |k: &str| {
            std::env::var(k)
                .ok()
                .filter(|v| !v.is_empty())
                .or_else(|| self.settings.get(k).cloned().filter(|v| !v.is_empty()))
        };
        match (env("HARNESS_NATS_USER"), env("HARNESS_NATS_PASSWORD")) {
            (Some(u), Some(p)) => o = o.user_and_password(u, p),
            (Some(_), None) | (None, Some(_)) => {
                return Err("HARNESS_NATS_USER and HARNESS_NATS_PASSWORD go together".into());
            }
            (None, None) => {}
        }
        if let Some(t) = env("HARNESS_NATS_TOKEN") {
            o = o.token(t);
        }
        if let Some(seed) = env("HARNESS_NATS_NKEY") {
            o = o.nkey(seed);
        }
        if let Some(ca) = env("HARNESS_NATS_CA") {
            o = o.add_root_certificates(PathBuf::from(ca));
        }
        match (env("HARNESS_NATS_CERT"), env("HARNESS_NATS_KEY")) {
            (Some(c), Some(k)) => o = o.add_client_certificate(PathBuf::from(c), PathBuf::from(k)),
            (Some(_), None) | (None, Some(_)) => {
                return Err("HARNESS_NATS_CERT and HARNESS_NATS_KEY go together".into());
            }
            (None, None) => {}
        }
        if self.servers.iter().any(|s| s.starts_with("tls://")) {
            o = o.require_tls(true);
        }
        let name = self.name.clone();
        let o =
            o.name(&self.name).retry_on_initial_connect().connection_timeout(Duration::from_secs(5)).event_callback(
                move |e| {
                    let name = name.clone();
                    async move {
                        match e {
                            async_nats::Event::Connected => tracing::info!(who = %name, "connected to NATS"),
                            async_nats::Event::Disconnected => {
                                tracing::warn!(who = %name, "disconnected from NATS: retrying")
                            }
                            other => tracing::info!(who = %name, "NATS: {other}"),
                        }
                    }
                },
            );
        let servers: Vec<async_nats::ServerAddr> = self
            .servers
            .iter()
            .map(|s| s.parse::<async_nats::ServerAddr>().map_err(|e| format!("--nats {s}: {e}")))
            .collect::<Result<_, _>>()?;
        o.connect(servers).await.map_err(|e| format!("cannot connect to NATS ({}): {e}", self.servers.join(",")))
    }
}

/// The fleet's streams as harness creates them (`spec/FLEET.md`).
pub fn stream_configs(replicas: usize) -> Vec<stream::Config> {
    let base = |name: &str, subjects: &str| stream::Config {
        name: name.into(),
        subjects: vec![subjects.into()],
        storage: stream::StorageType::File,
        num_replicas: replicas,
        duplicate_window: DUPLICATE_WINDOW,
        allow_direct: true,
        ..Default::default()
    };
    vec![
        base(JOURNAL_STREAM, "harness.journal.>"),
        base(EVENTS_STREAM, "harness.events.>"),
        stream::Config { max_messages_per_subject: 1, ..base(VIEWS_STREAM, "harness.views.>") },
        stream::Config { max_messages_per_subject: 1, ..base(HOSTS_STREAM, "harness.hosts.>") },
        stream::Config {
            max_messages_per_subject: 1,
            max_age: LEASE_TTL,
            duplicate_window: Duration::from_secs(2),
            ..base(LEASES_STREAM, "harness.lease.>")
        },
    ]
}

/// Makes sure the fleet's streams exist (an existing stream is used as it is: its retention is the
/// operator's). `replicas` above what the servers hold (a single server) falls back to 1, saying so.
/// Returns the replicas used.
pub async fn ensure_streams(js: &jetstream::Context, replicas: usize) -> Result<usize, String> {
    let mut used = replicas;
    for cfg in stream_configs(replicas) {
        if js.get_stream(&cfg.name).await.is_ok() {
            continue;
        }
        let name = cfg.name.clone();
        match js.create_stream(stream::Config { num_replicas: used, ..cfg.clone() }).await {
            Ok(_) => {}
            Err(e) if used > 1 && replicas_refused(&e.to_string()) => {
                tracing::warn!(stream = %name, replicas = used, error = %e, "the servers cannot hold that many replicas: using 1");
                used = 1;
                js.create_stream(stream::Config { num_replicas: 1, ..cfg })
                    .await
                    .map_err(|e| format!("cannot create stream {name}: {e}"))?;
            }
            // Created meanwhile by another relay or fleet API.
            Err(_) if js.get_stream(&name).await.is_ok() => {}
            Err(e) => return Err(format!("cannot create stream {name}: {e}")),
        }
    }
    Ok(used)
}

fn replicas_refused(e: &str) -> bool {
    let e = e.to_ascii_lowercase();
    e.contains("replicas") || e.contains("insufficient resources")
}

/// Waits until the fleet's streams are there (created by whichever relay or fleet API came first),
/// creating them when allowed.
pub async fn streams_ready(js: &jetstream::Context, replicas: usize) -> Result<usize, String> {
    let mut waited = Duration::ZERO;
    loop {
        match ensure_streams(js, replicas).await {
            Ok(n) => return Ok(n),
            Err(e) if waited >= Duration::from_secs(600) => return Err(e),
            Err(e) => {
                if waited.is_zero() {
                    tracing::warn!(error = %e, "the fleet's streams are not ready: retrying");
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
                waited += Duration::from_secs(1);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subjects_keep_one_token_per_id_and_read_back() {
        let host = HostName::parse("ci-1").unwrap();
        let run = RunId::parse("0123456789ab--v1.2").unwrap();
        let task = TaskId::parse("T.1").unwrap();
        assert_eq!(journal_subject(&host, &run), "harness.journal.ci-1.0123456789ab--v1%2E2");
        assert_eq!(events_subject(&host, &run, &task), "harness.events.ci-1.0123456789ab--v1%2E2.T%2E1");
        let s = view_subject(&host, &run, &View::Task(task.clone()));
        assert_eq!(parse_view_subject(&s), Some((host.clone(), run.clone(), View::Task(task))));
        assert_eq!(
            parse_view_subject(&view_subject(&host, &run, &View::Row)),
            Some((host.clone(), run.clone(), View::Row))
        );
        assert_eq!(parse_journal_subject(&journal_subject(&host, &run)), Some((host, run)));
        assert_eq!(parse_view_subject("harness.views.ci-1.bad"), None);
    }

    #[test]
    fn a_url_with_a_secret_is_refused_and_a_bare_address_is_nats() {
        let bad = Nats::new("nats://me:secret@127.0.0.1:4222", None, 1, "t").unwrap_err();
        assert!(bad.contains("refused") && !bad.contains("secret"), "{bad}");
        assert!(Nats::new("tls://token@h:4222", None, 1, "t").is_err());
        assert!(Nats::new("http://h:4222", None, 1, "t").unwrap_err().contains("nats:// or tls://"));
        let n = Nats::new("127.0.0.1:4222, tls://b:4222", None, 3, "t").unwrap();
        assert_eq!(n.servers, ["nats://127.0.0.1:4222", "tls://b:4222"]);
        assert!(Nats::new("", None, 1, "t").is_err());
        assert!(Nats::new("h:1", None, 0, "t").is_err());
    }
}
