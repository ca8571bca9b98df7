//! The KV calls of the leader lease ([`super::lease`]), made without
//! blocking the bus thread: each call is sent with
//! [`Client::start_request`] and its answer picked up on a later turn, so
//! a leader keeps publishing while a renewal waits on a JetStream election.
//! The machine decides; this file only turns its requests into NATS
//! messages and the answers back into outcomes.
//!
//! The key's value is the holder's core id and its stream id (16 bytes,
//! little-endian), so a core that reads the key knows whether it holds
//! it. A renewal, a create and a delete allocate nothing (headers from
//! stack buffers); reading the key and checking the bucket do (cold).

use std::time::Duration;

use super::connect;
use super::lease::{KeyState, Lease, Outcome, Request, Transition};
use super::nats::client::Client;
use super::nats::jetstream::{self, KvError, KvKey};
use super::BusConfig;

/// Length of the key's value.
const VALUE_LEN: usize = 16;

/// The lease, its key, and the bucket's settings (to re-create it).
pub(crate) struct Leadership {
    pub(crate) lease: Lease,
    key: KvKey,
    cfg: BusConfig,
    value: [u8; VALUE_LEN],
    /// A second change of role from one answer (the bucket lost, then
    /// created again), reported on the next turn.
    pending: Option<Transition>,
}

impl Leadership {
    pub(crate) fn new(lease: Lease, key: KvKey, cfg: BusConfig) -> Leadership {
        let mut value = [0u8; VALUE_LEN];
        value[..8].copy_from_slice(&lease.core_id().to_le_bytes());
        Leadership {
            lease,
            key,
            cfg,
            value,
            pending: None,
        }
    }

    /// The stream this core publishes, written into the key's value from
    /// the next write on (informational: who holds the key is the id).
    pub(crate) fn set_stream(&mut self, stream_id: u64) {
        self.value[8..].copy_from_slice(&stream_id.to_le_bytes());
    }

    /// One turn at `now_ns`: takes the answer of the call in flight, or
    /// its timeout, or sends the next call the lease asks for (`healthy`:
    /// this core's feeds after hysteresis). Returns a change of role.
    pub(crate) fn turn(
        &mut self,
        c: &mut Client,
        now_ns: u64,
        healthy: bool,
    ) -> Option<Transition> {
        if let Some(t) = self.pending.take() {
            return Some(t);
        }
        if let Some(request) = self.lease.in_flight() {
            let Some(outcome) = c.reply_ready().map(|r| outcome_of(request, r)) else {
                return self.lease.check_timeout(now_ns);
            };
            tracing::debug!(?request, ?outcome, "lease call answered");
            let (next, t) = self.lease.on_outcome(outcome, now_ns);
            let then = next.and_then(|r| self.send(c, r, now_ns));
            return match t {
                Some(t) => {
                    self.pending = then;
                    Some(t)
                }
                None => then,
            };
        }
        let r = self.lease.next_request(now_ns, healthy)?;
        self.send(c, r, now_ns)
    }

    /// Sends `r` (the lease counts it in flight). A call that cannot be
    /// sent (no server) fails at once; re-creating the bucket is one
    /// blocking call (rare: only after the bucket was found missing).
    fn send(&mut self, c: &mut Client, r: Request, now_ns: u64) -> Option<Transition> {
        let sent = match r {
            Request::Create { expected } => self.key.start_put(c, expected, false, &self.value),
            Request::Renew { revision } => self.key.start_put(c, revision, false, &self.value),
            Request::Delete { revision } => self.key.start_put(c, revision, true, b""),
            Request::Read => {
                let (api, body) =
                    jetstream::last_for_subject_request(&self.key.stream, &self.key.subject);
                c.start_request(&api, &[], body.as_bytes())
            }
            Request::CheckBucket => {
                c.start_request(&jetstream::stream_info_subject(&self.key.stream), &[], b"")
            }
            Request::RecreateBucket => {
                let outcome = match connect::lease_bucket(c, &self.cfg) {
                    Ok(_) => Outcome::BucketFound,
                    Err(e) => {
                        tracing::warn!(error = %crate::runtime::esc(&e), "re-creating the lease bucket");
                        Outcome::Failed
                    }
                };
                return self.lease.on_outcome(outcome, now_ns).1;
            }
        };
        if sent {
            return None;
        }
        let (next, t) = self.lease.on_outcome(Outcome::Failed, now_ns);
        debug_assert!(next.is_none(), "a failed call asks for no follow-up");
        t
    }

    /// An orderly stop: deletes the key if this core holds it, so a
    /// standby takes over at once instead of after the silence. Blocks
    /// for at most `bound`.
    pub(crate) fn resign(&mut self, c: &mut Client, bound: Duration) {
        if let super::lease::LeaseState::Leader { revision, .. } = self.lease.state() {
            let _ = self.key.delete(c, revision, bound);
        }
    }
}

/// The outcome of `request` from its `reply`.
fn outcome_of(request: Request, reply: &super::nats::session::Reply) -> Outcome {
    match request {
        Request::Create { .. } | Request::Renew { .. } | Request::Delete { .. } => {
            match jetstream::put_result(reply) {
                Ok(revision) => Outcome::Written(revision),
                Err(KvError::WrongLastRevision) => Outcome::WrongRevision,
                Err(KvError::NoStore) => Outcome::NoStore,
                Err(KvError::Failed(_)) => Outcome::Failed,
            }
        }
        Request::Read => match jetstream::direct_get_result(reply) {
            Ok(Some(m)) => Outcome::Key(key_state(m)),
            Ok(None) => Outcome::Key(None),
            Err(jetstream::JsError::Status(503)) => Outcome::NoStore,
            Err(_) => Outcome::Failed,
        },
        Request::CheckBucket => match jetstream::stream_exists(reply) {
            Ok(true) => Outcome::BucketFound,
            Ok(false) => Outcome::BucketMissing,
            Err(_) => Outcome::Failed,
        },
        Request::RecreateBucket => Outcome::Failed,
    }
}

/// The key as a direct get returned it: a marker (delete, purge) has no
/// holder; a value of another layout (a core of an earlier version) names
/// holder 0, which is never a core's id.
fn key_state(m: &super::nats::session::Reply) -> Option<KeyState> {
    let revision = jetstream::sequence(m)?;
    let marker = m
        .header("KV-Operation")
        .is_some_and(|op| op == b"DEL" || op == b"PURGE");
    let holder = (!marker).then(|| holder_of(&m.payload));
    Some(KeyState { revision, holder })
}

/// The core id in a key's value (0 if the value is not this layout).
fn holder_of(value: &[u8]) -> u64 {
    match value.get(..8).and_then(|b| b.try_into().ok()) {
        Some(id) if value.len() == VALUE_LEN => u64::from_le_bytes(id),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bus::nats::session::Reply;

    fn reply(headers: &[u8], payload: &[u8]) -> Reply {
        let mut r = Reply::default();
        r.headers.extend_from_slice(headers);
        r.payload.extend_from_slice(payload);
        r
    }

    #[test]
    fn writes_reads_and_bucket_checks_become_outcomes() {
        let put = Request::Renew { revision: 3 };
        let ack = reply(b"", br#"{"stream":"KV_X","seq":4}"#);
        assert_eq!(outcome_of(put, &ack), Outcome::Written(4));
        let wrong =
            br#"{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 5"}}"#;
        assert_eq!(outcome_of(put, &reply(b"", wrong)), Outcome::WrongRevision);
        let none = reply(b"NATS/1.0 503\r\n\r\n", b"");
        assert_eq!(outcome_of(put, &none), Outcome::NoStore);
        assert_eq!(outcome_of(Request::Read, &none), Outcome::NoStore);
        let mut value = [0u8; VALUE_LEN];
        value[..8].copy_from_slice(&77u64.to_le_bytes());
        let held = reply(b"NATS/1.0\r\nNats-Sequence: 12\r\n\r\n", &value);
        let key = Some(KeyState {
            revision: 12,
            holder: Some(77),
        });
        assert_eq!(outcome_of(Request::Read, &held), Outcome::Key(key));
        let old = reply(b"NATS/1.0\r\nNats-Sequence: 12\r\n\r\n", b"core");
        let foreign = Some(KeyState {
            revision: 12,
            holder: Some(0),
        });
        assert_eq!(outcome_of(Request::Read, &old), Outcome::Key(foreign));
        let marker = reply(
            b"NATS/1.0\r\nNats-Sequence: 13\r\nKV-Operation: DEL\r\n\r\n",
            b"",
        );
        let deleted = Some(KeyState {
            revision: 13,
            holder: None,
        });
        assert_eq!(outcome_of(Request::Read, &marker), Outcome::Key(deleted));
        let absent = reply(b"NATS/1.0 404 Message Not Found\r\n\r\n", b"");
        assert_eq!(outcome_of(Request::Read, &absent), Outcome::Key(None));
        let missing =
            br#"{"error":{"code":404,"err_code":10059,"description":"stream not found"}}"#;
        let check = Request::CheckBucket;
        assert_eq!(
            outcome_of(check, &reply(b"", missing)),
            Outcome::BucketMissing
        );
        let info = reply(b"", br#"{"config":{"name":"KV_X"}}"#);
        assert_eq!(outcome_of(check, &info), Outcome::BucketFound);
    }
}
