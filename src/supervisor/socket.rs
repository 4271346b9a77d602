//! The control socket (`spec/CONTROL.md`): newline-delimited JSON over a Unix socket, one request →
//! one response. The listener checks the peer's uid (`SO_PEERCRED`), parses and bounds each request,
//! and hands it to the scheduler, which alone owns run state; this module holds no state. The
//! protocol's types and its client are `crate::control`.

use crate::control::{MAX_REQUEST, Refusal, RefusalKind, Reply, Request, Sketch};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, oneshot};

/// A request on its way to the scheduler, with where to send the answer.
pub struct Envelope {
    pub req: Request,
    pub reply: oneshot::Sender<Reply>,
    /// The connecting process (`SO_PEERCRED`), for the operator-only verbs' ancestry rule.
    pub peer: Option<u32>,
}

/// Requests read off the socket and not yet answered on it. The supervisor waits (bounded) for them
/// before it exits, so an answer the scheduler gave — to `stop`, say, right before the run ends —
/// reaches its client instead of dying with the process.
#[derive(Clone, Default)]
pub struct InFlight(Arc<AtomicUsize>);

struct InFlightGuard(Arc<AtomicUsize>);

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl InFlight {
    fn enter(&self) -> InFlightGuard {
        self.0.fetch_add(1, Ordering::SeqCst);
        InFlightGuard(self.0.clone())
    }

    /// Waits until every request read has been answered, at most `max`.
    pub async fn drained(&self, max: Duration) {
        let end = tokio::time::Instant::now() + max;
        while self.0.load(Ordering::SeqCst) > 0 && tokio::time::Instant::now() < end {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
}

/// Accepts connections until the scheduler's receiver is dropped. `journal` is the run's: a request
/// refused here, before the scheduler sees it, is recorded in it before the answer.
pub async fn serve(
    listener: UnixListener,
    to_scheduler: mpsc::Sender<Envelope>,
    inflight: InFlight,
    journal: Arc<Path>,
) {
    let me = nix::unistd::geteuid().as_raw();
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "control socket accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        if to_scheduler.is_closed() {
            return;
        }
        let tx = to_scheduler.clone();
        let inflight = inflight.clone();
        let journal = journal.clone();
        tokio::spawn(async move {
            if let Err(e) = connection(stream, me, tx, inflight, journal).await {
                tracing::debug!(error = %e, "control connection ended");
            }
        });
    }
}

/// How long a connection of another uid may take to send its request before it is refused unread.
const FOREIGN_READ: Duration = Duration::from_secs(1);

async fn connection(
    stream: UnixStream,
    me: u32,
    tx: mpsc::Sender<Envelope>,
    inflight: InFlight,
    journal: Arc<Path>,
) -> std::io::Result<()> {
    let peer = stream.peer_cred()?;
    let (r, mut w) = stream.into_split();
    let mut r = BufReader::new(r);
    let mut line = Vec::new();
    if peer.uid() != me {
        // Read (bounded, briefly) only to say on the record what was asked; nothing is carried out.
        let mut limited = (&mut r).take(MAX_REQUEST as u64);
        let _ = tokio::time::timeout(FOREIGN_READ, limited.read_until(b'\n', &mut line)).await;
        let detail = format!("peer uid {} is not the supervisor's uid {me}", peer.uid());
        tracing::warn!(PEER_UID = peer.uid(), "refused control connection from another uid");
        let resp = on_record(
            &journal,
            Sketch::of_line(&line, Some(&format!("uid {}", peer.uid()))),
            Refusal::new(RefusalKind::Foreign, detail),
        );
        w.write_all(&line_of(&resp.into())).await?;
        return Ok(());
    }
    loop {
        line.clear();
        let n = (&mut r).take(MAX_REQUEST as u64 + 1).read_until(b'\n', &mut line).await?;
        if n == 0 {
            return Ok(());
        }
        // Counted from here until the answer is written (or the write fails).
        let _answering = inflight.enter();
        if line.len() > MAX_REQUEST {
            let refusal = Refusal::malformed(format!("request longer than {MAX_REQUEST} bytes"));
            let resp = on_record(&journal, Sketch::unread(), refusal);
            w.write_all(&line_of(&resp.into())).await?;
            return Ok(());
        }
        let resp: Reply = match serde_json::from_slice::<Request>(&line) {
            Err(e) => {
                let refusal = Refusal::malformed(format!("request is not a control/v1 object: {e}"));
                on_record(&journal, Sketch::of_line(&line, None), refusal).into()
            }
            Ok(req) => {
                let sketch = Sketch::of(&req);
                let (reply, rx) = oneshot::channel();
                let peer = peer.pid().and_then(|p| u32::try_from(p).ok());
                if tx.send(Envelope { req, reply, peer }).await.is_err() {
                    let refusal = Refusal::by_state("run not live: the supervisor is shutting down");
                    on_record(&journal, sketch, refusal).into()
                } else {
                    // The scheduler answers every request it received, refusals included, on the
                    // record; a dropped answer means it ended in between (its exit answers what
                    // it had not read, and records that).
                    rx.await.unwrap_or_else(|_| Refusal::by_state("run not live: the supervisor has ended").into())
                }
            }
        };
        w.write_all(&line_of(&resp)).await?;
    }
}

/// Records a refusal in the run's journal, then gives it back to be answered; when the record
/// cannot be written the answer is a 500 that says so (the refusal stands: nothing was done).
fn on_record(journal: &Arc<Path>, sketch: Sketch, refusal: Refusal) -> Refusal {
    // Blocking (an fsync'd append), off the async workers' turn.
    tokio::task::block_in_place(|| sketch.journal_at(journal, refusal))
}

/// One reply as its wire line.
fn line_of(r: &Reply) -> Vec<u8> {
    let mut v = serde_json::to_vec(r).expect("a Reply serializes");
    v.push(b'\n');
    v
}
