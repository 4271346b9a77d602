//! The lease on a host name (`spec/FLEET.md`): one message on `harness.lease.<host>` in a stream
//! whose messages expire `fleet::LEASE_TTL` after they were written, each written only over the
//! one before it (JetStream's expected-last-subject-sequence). A relay that finds a live lease of
//! another relay is refused; a relay restarted on the same home and machine (same instance id and
//! machine name) takes its own over at once; a lease not renewed lapses and the name is free.

use crate::fleet::{self};
use crate::ids::HostName;
use async_nats::jetstream::{self, context::PublishErrorKind, message::PublishMessage};
use serde::{Deserialize, Serialize};

/// What a lease says of its holder.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Holder {
    pub host: HostName,
    /// The relay's instance id, kept in its home (`relay.json`): the same across restarts.
    pub instance: String,
    pub pid: u32,
    pub machine: String,
    /// The id of the home it publishes.
    pub home: String,
}

/// A held lease: the stream sequence of its last renewal.
pub struct Lease {
    subject: String,
    holder: Holder,
    seq: u64,
}

/// Why a lease was not had.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// Another relay holds the name.
    #[error("{0}")]
    Held(String),
    /// NATS did not answer; try again.
    #[error("{0}")]
    Nats(String),
}

impl Lease {
    /// Takes the lease on `holder.host`, or says who holds it.
    pub async fn acquire(js: &jetstream::Context, holder: Holder) -> Result<Lease, LeaseError> {
        let subject = fleet::lease_subject(&holder.host);
        let mut lease = Lease { subject, holder, seq: 0 };
        lease.take_with(js).await?;
        Ok(lease)
    }

    /// Renews the lease; `Held` when another relay took the name meanwhile (ours had lapsed).
    pub async fn renew(&mut self, js: &jetstream::Context) -> Result<(), LeaseError> {
        match self.write(js, self.seq).await {
            Ok(seq) => {
                self.seq = seq;
                Ok(())
            }
            Err(Written::Moved) => self.take_with(js).await,
            Err(Written::Nats(e)) => Err(LeaseError::Nats(e)),
        }
    }

    /// Takes the name as it stands: free, or ours (a restart) — else refused naming the holder.
    async fn take_with(&mut self, js: &jetstream::Context) -> Result<(), LeaseError> {
        for _ in 0..3 {
            let stream =
                js.get_stream_no_info(fleet::LEASES_STREAM).await.map_err(|e| LeaseError::Nats(e.to_string()))?;
            let expected = match stream.get_last_raw_message_by_subject(&self.subject).await {
                Ok(m) => {
                    let other: Option<Holder> = serde_json::from_slice(&m.payload).ok();
                    match other {
                        // Ours: this home's relay on this machine (a home copied to another
                        // machine carries the same instance id, and is another relay).
                        Some(h) if h.instance == self.holder.instance && h.machine == self.holder.machine => m.sequence,
                        other => {
                            return Err(LeaseError::Held(held(&self.holder.host, other, m.time.unix_timestamp())));
                        }
                    }
                }
                Err(e) if matches!(e.kind(), jetstream::stream::LastRawMessageErrorKind::NoMessageFound) => 0,
                Err(e) => return Err(LeaseError::Nats(e.to_string())),
            };
            match self.write(js, expected).await {
                Ok(seq) => {
                    self.seq = seq;
                    return Ok(());
                }
                // Taken or renewed between the look and the write: look again.
                Err(Written::Moved) => continue,
                Err(Written::Nats(e)) => return Err(LeaseError::Nats(e)),
            }
        }
        Err(LeaseError::Nats(format!(
            "the lease on host {} keeps moving: another relay competes for it",
            self.holder.host
        )))
    }

    async fn write(&self, js: &jetstream::Context, expected: u64) -> Result<u64, Written> {
        let body = serde_json::to_vec(&self.holder).expect("a holder serializes");
        let msg = PublishMessage::build().payload(body.into()).expected_last_subject_sequence(expected);
        let ack = js.send_publish(self.subject.clone(), msg).await.map_err(|e| Written::Nats(e.to_string()))?;
        match ack.await {
            Ok(a) => Ok(a.sequence),
            Err(e) if matches!(e.kind(), PublishErrorKind::WrongLastSequence) => Err(Written::Moved),
            Err(e) => Err(Written::Nats(e.to_string())),
        }
    }

    pub fn holder(&self) -> &Holder {
        &self.holder
    }
}

enum Written {
    /// The lease is not where we left it.
    Moved,
    Nats(String),
}

/// Who holds the name, in words; `renewed`: when, in seconds since the epoch.
fn held(host: &HostName, other: Option<Holder>, renewed: i64) -> String {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64);
    let age = (now - renewed).max(0);
    let lapse = fleet::LEASE_TTL.as_secs() as i64 - age;
    let who = match other {
        Some(h) => format!("the relay of home {} on {} (pid {})", h.home, h.machine, h.pid),
        None => "another relay".to_string(),
    };
    format!(
        "host name {host} is held by {who}, renewed {age} s ago: stop that relay or choose another --host (a lease not renewed lapses in {} s)",
        lapse.max(0)
    )
}
