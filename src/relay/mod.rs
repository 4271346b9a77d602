//! `harness relay --nats URL --host NAME` (`spec/FLEET.md`): mirrors this `$HARNESS_HOME` into NATS
//! JetStream for a fleet — every run's journal lines, every task's events/v1 and the views a fleet
//! API serves — and answers the fleet's requests for this host (diffs, gate, review, every verb)
//! with this home's own API code. The home's files stay the truth; the relay never writes run state
//! (a verb it carries is decided and journaled by the run's supervisor, as any verb is). A host
//! name is held by an expiring lease; one relay per home.

mod lease;
mod publish;
mod rpc;

use crate::fleet::{self, header};
use crate::ids::{HostName, RunId};
use crate::os::home::Home;
use async_nats::jetstream::{self, consumer};
use futures_util::StreamExt;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// How `harness relay` was asked to run.
pub struct Options {
    pub host: HostName,
    pub nats: fleet::Nats,
}

/// Why the relay stopped (or never started).
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    #[error("{0}")]
    Refused(String),
    #[error("{0}")]
    Failed(String),
}

/// The relay's instance id, kept in the home (`relay.json`): a relay restarted on this home takes
/// its own lease over at once.
fn instance(home: &Home) -> Result<String, RelayError> {
    let path = home.root.join("relay.json");
    if let Ok(b) = std::fs::read(&path)
        && let Some(i) =
            serde_json::from_slice::<serde_json::Value>(&b).ok().and_then(|v| v["instance"].as_str().map(String::from))
    {
        return Ok(i);
    }
    let i = uuid::Uuid::new_v4().to_string();
    crate::os::home::write_atomic(&path, serde_json::json!({ "instance": i }).to_string().as_bytes(), 0o600)
        .map_err(|e| RelayError::Failed(format!("cannot write {}: {e}", path.display())))?;
    Ok(i)
}

/// Runs the relay until `stop` resolves (or its lease is taken, or NATS refuses it).
pub async fn run(home: Home, opts: Options, stop: impl std::future::Future<Output = ()>) -> Result<(), RelayError> {
    let _lock = home_lock(&home).await?;
    let instance = instance(&home)?;
    // A relay follows every run's files (its journal, each task's log): thousands of descriptors in
    // a busy home. The soft limit is raised to the hard one (1024 is a common soft default).
    if let Ok((soft, hard)) = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        && soft < hard
        && let Err(e) = nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE, hard, hard)
    {
        tracing::warn!(error = %e, soft, hard, "cannot raise the open-files limit");
    }
    let client = opts.nats.connect().await.map_err(RelayError::Failed)?;
    let js = jetstream::new(client.clone());
    fleet::streams_ready(&js, opts.nats.replicas).await.map_err(RelayError::Failed)?;
    let holder = lease::Holder {
        host: opts.host.clone(),
        instance,
        pid: std::process::id(),
        machine: nix::unistd::gethostname().map(|h| h.to_string_lossy().into_owned()).unwrap_or_default(),
        home: home.id(),
    };
    // The lease, the heartbeat and the verbs on a connection of their own: behind the bulk of a
    // home's first mirroring (hundreds of thousands of messages queued on the publishing
    // connection) a renewal would wait past the lease's life and a verb past its answer time.
    let control = opts.nats.connect().await.map_err(RelayError::Failed)?;
    let control_js = jetstream::new(control.clone());
    let lease = lease_when_reachable(&control_js, holder).await?;
    tracing::info!(host = %opts.host, "relay: the host name is ours");
    let (tx, rx) = watch::channel(false);
    let api = Arc::new(crate::api::Api::new(home.clone(), crate::api::Config::default(), rx.clone()));
    let published = published_here(&js, &opts.host, &home).await;
    let ctx = Arc::new(publish::Ctx {
        host: opts.host.clone(),
        js: js.clone(),
        api: api.clone(),
        published: std::sync::Mutex::new(published),
        client: client.clone(),
        steps: tokio::sync::Semaphore::new(publish::STEPS_AT_ONCE),
    });
    let mut rpc = tokio::spawn(rpc::serve(control.clone(), fleet::rpc_subject(&opts.host), api));
    let mut beat = tokio::spawn(heartbeat(control_js.clone(), lease, home.clone()));
    let mut runs = tokio::spawn(follow_runs(home, ctx, rx));
    crate::os::service::notify(&[sd_notify::NotifyState::Ready]);
    let result = tokio::select! {
        _ = stop => Ok(()),
        r = &mut beat => Err(RelayError::Refused(r.unwrap_or_else(|e| e.to_string()))),
        r = &mut rpc => Err(RelayError::Failed(r.map_or_else(|e| e.to_string(), |r| r.err().unwrap_or_default()))),
        _ = &mut runs => Err(RelayError::Failed("the run scanner stopped".into())),
    };
    match &result {
        Ok(()) => tracing::info!(host = %opts.host, "relay: stopping (asked to)"),
        Err(e) => tracing::warn!(host = %opts.host, error = %e, "relay: stopping"),
    }
    let _ = tx.send(true);
    crate::os::service::notify(&[sd_notify::NotifyState::Stopping]);
    for t in [rpc.abort_handle(), beat.abort_handle(), runs.abort_handle()] {
        t.abort();
    }
    // What is in flight reaches the servers before the process ends.
    let _ = tokio::time::timeout(Duration::from_secs(2), client.flush()).await;
    let _ = tokio::time::timeout(Duration::from_secs(1), control.flush()).await;
    result
}

/// The home's relay lock: one relay per home. A relay killed a moment ago may still be on its
/// way out (its descriptors closed last): its lock is waited for a few seconds before another
/// relay is said to run.
async fn home_lock(home: &Home) -> Result<crate::os::flock::Flock, RelayError> {
    let lock_path = home.root.join("relay.lock");
    let lock_file = crate::os::home::open_private(&lock_path, true)
        .map_err(|e| RelayError::Failed(format!("cannot open {}: {e}", lock_path.display())))?;
    let mut lock = None;
    for _ in 0..50 {
        if let Ok(Some(l)) = crate::os::flock::Flock::try_exclusive(&lock_file) {
            lock = Some(l);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let Some(lock) = lock else {
        return Err(RelayError::Refused(format!(
            "another relay runs for home {} (it holds {}): one relay per home",
            home.root.display(),
            lock_path.display()
        )));
    };
    Ok(lock)
}

/// What this host's views in the stream are (read until the stream answers); the runs it lists
/// whose pointer went while no relay ran (pruned) are withdrawn — only when the registry could be
/// read (a failed read is no proof that every run went).
async fn published_here(js: &jetstream::Context, host: &HostName, home: &Home) -> HashMap<String, (String, u64)> {
    let mut published = loop {
        match published_views(js, host).await {
            Ok(p) => break p,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read what this host published: retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    };
    if let Ok(here) = registered_strictly(&home.runs_dir()) {
        let gone: Vec<(String, RunId)> = published
            .keys()
            .filter_map(|s| match fleet::parse_view_subject(s) {
                Some((_, run, fleet::View::Row)) if !here.contains(&run) => Some((s.clone(), run)),
                _ => None,
            })
            .collect();
        for (subject, run) in gone {
            publish::withdraw(js, host, &run).await;
            published.remove(&subject);
        }
    }
    published
}

/// The lease on the host name: refused when another relay holds it; while NATS does not answer
/// (down, or electing a leader for a stream just made), asked again every second.
async fn lease_when_reachable(js: &jetstream::Context, holder: lease::Holder) -> Result<lease::Lease, RelayError> {
    let mut said = false;
    loop {
        match lease::Lease::acquire(js, holder.clone()).await {
            Ok(l) => return Ok(l),
            Err(lease::LeaseError::Held(d)) => return Err(RelayError::Refused(d)),
            Err(lease::LeaseError::Nats(e)) => {
                if !said {
                    tracing::warn!(host = %holder.host, error = %e, "cannot take the lease yet: retrying");
                    said = true;
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

/// Each view subject of this host as the stream holds it: its hash, and a row's journal cover.
async fn published_views(js: &jetstream::Context, host: &HostName) -> Result<HashMap<String, (String, u64)>, String> {
    let stream = js.get_stream(fleet::VIEWS_STREAM).await.map_err(|e| e.to_string())?;
    let cfg = consumer::pull::OrderedConfig {
        filter_subject: format!("harness.views.{host}.>"),
        deliver_policy: consumer::DeliverPolicy::LastPerSubject,
        headers_only: true,
        ..Default::default()
    };
    let mut c = stream.create_consumer(cfg).await.map_err(|e| e.to_string())?;
    let mut out = HashMap::new();
    if c.info().await.map_err(|e| e.to_string())?.num_pending == 0 {
        return Ok(out);
    }
    let mut msgs = c.messages().await.map_err(|e| e.to_string())?;
    while let Some(m) = msgs.next().await {
        let m = m.map_err(|e| e.to_string())?;
        let h = |n: &str| m.headers.as_ref().and_then(|h| h.get(n)).map(|v| v.as_str().to_string());
        if let Some(hash) = h(header::HASH) {
            out.insert(m.subject.to_string(), (hash, h(header::COVERS).and_then(|c| c.parse().ok()).unwrap_or(0)));
        }
        if m.info().map(|i| i.pending).unwrap_or(0) == 0 {
            break;
        }
    }
    Ok(out)
}

/// Renews the lease and says the host is there, every `fleet::HEARTBEAT` (the first time at once,
/// the lease just taken); returns why it stopped (the lease taken by another relay).
async fn heartbeat(js: jetstream::Context, mut lease: lease::Lease, home: Home) -> String {
    let host = lease.holder().host.clone();
    let mut every = tokio::time::interval(fleet::HEARTBEAT);
    every.tick().await;
    let mut first = true;
    loop {
        if !std::mem::take(&mut first) {
            every.tick().await;
            // The watchdog is fed by this loop whether NATS answers or not: a relay waiting out a
            // NATS outage is working as meant.
            crate::os::service::notify(&[sd_notify::NotifyState::Watchdog]);
            match lease.renew(&js).await {
                Ok(()) => {}
                Err(lease::LeaseError::Held(d)) => return format!("the lease was lost: {d}"),
                Err(lease::LeaseError::Nats(e)) => {
                    tracing::warn!(host = %host, error = %e, "the lease could not be renewed: retrying");
                    continue;
                }
            }
        }
        let seen = serde_json::json!({
            "host": host,
            "seen": crate::state::journal::now_rfc3339(),
            "home": home.id(),
            "machine": lease.holder().machine,
            "instance": lease.holder().instance,
            "version": env!("CARGO_PKG_VERSION"),
        });
        match js.publish(fleet::hosts_subject(&host), seen.to_string().into()).await {
            Ok(ack) => {
                if let Ok(Err(e)) = tokio::time::timeout(fleet::ACK_WAIT, ack).await {
                    tracing::warn!(host = %host, error = %e, "the host's heartbeat was not stored");
                }
            }
            Err(e) => tracing::warn!(host = %host, error = %e, "the host's heartbeat was not sent"),
        }
    }
}

/// Finds the home's runs (a pointer file each) every quarter second and follows each with its own
/// task; a run whose pointer goes is told so (its row withdrawn).
async fn follow_runs(home: Home, ctx: Arc<publish::Ctx>, shutdown: watch::Receiver<bool>) {
    let mut followed: HashMap<RunId, watch::Sender<bool>> = HashMap::new();
    let runs_dir = home.runs_dir();
    let mut wake = ctx.api.hub.subscribe(&runs_dir.join(".relay-wake"));
    loop {
        if *shutdown.borrow() {
            return;
        }
        let dir = runs_dir.clone();
        // A registry that cannot be read now (too many open files, say) is no proof that every run
        // went: the runs followed stay followed — else each would be withdrawn from the fleet and
        // published again a moment later.
        let now = match tokio::task::spawn_blocking(move || registered_strictly(&dir)).await {
            Ok(Ok(now)) => now,
            other => {
                let e = other.map_or_else(|e| e.to_string(), |r| r.err().map(|e| e.to_string()).unwrap_or_default());
                tracing::warn!(error = %e, dir = %runs_dir.display(), "cannot read the registry: trying again");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        for run in &now {
            if !followed.contains_key(run) {
                let (tx, rx) = watch::channel(false);
                followed.insert(run.clone(), tx);
                tokio::spawn(publish::follow_run(ctx.clone(), run.clone(), rx));
            }
        }
        followed.retain(|run, tx| {
            let keep = now.contains(run);
            if !keep {
                let _ = tx.send(true);
            }
            keep
        });
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(250)) => {}
            _ = async { match &mut wake { Some(rx) => { let _ = rx.recv().await; } None => std::future::pending().await } } => {}
        }
    }
}

/// The runs whose pointer is in `runs/`, or the error that kept the registry from being read (a
/// home with no `runs/` yet has no runs).
fn registered_strictly(runs_dir: &std::path::Path) -> std::io::Result<std::collections::HashSet<RunId>> {
    let rd = match std::fs::read_dir(runs_dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Default::default()),
        Err(e) => return Err(e),
    };
    Ok(rd
        .flatten()
        .filter_map(|e| {
            let name = e.file_name();
            let name = name.to_str()?;
            if name.starts_with('.') {
                return None;
            }
            RunId::parse(name.strip_suffix(".json")?).ok()
        })
        .collect())
}
