//! The leader lease of cores, as a state machine over injected time: no
//! I/O. The bus thread asks it what to send ([`Lease::next_request`]),
//! performs the KV call and reports the outcome ([`Lease::on_outcome`]);
//! one call is in flight at a time, and one without an answer within
//! [`LeaseTiming::request_timeout_ns`] counts as failed.
//!
//! Cores share one key in a NATS KV bucket whose entries expire after the
//! lease period (`max_age`). The key's value names the holder (its random
//! core id). A core takes the lease by creating the key (only possible
//! while it is absent, expired or deleted) and keeps it by updating it
//! with compare-and-set on the revision it last wrote.
//!
//! Invariants this machine keeps:
//! - **Fencing**: a leader publishes only while its last confirmed write
//!   was *sent* less than the period minus a margin ago
//!   ([`Lease::publishing_epoch`]); the server wrote it no earlier than it
//!   was sent, so the leader stops before the key can expire, even when it
//!   cannot reach NATS to learn that it lost.
//! - **Surviving an election**: renewals go every [`LeaseTiming::renew_every_ns`]
//!   and failures are retried at once, so the KV store may be unavailable
//!   for the period minus the margin minus one renewal interval (12.5 s
//!   at the 15-s default, against 3.9–7.8 s measured for a JetStream
//!   stream-leader election; docs/scale-out.md) without the leader fencing.
//! - **No false loss**: a renewal refused for a wrong revision reads the key
//!   before stepping down; if the key names this core (the earlier write
//!   landed and only its answer was lost), the core keeps leading.
//! - **Health**: only a core whose feeds are healthy (the caller's
//!   hysteresis, `bus::health`) takes the lease; a leader that is not
//!   healthy hands it on by deleting the key.
//! - **Fast takeover**: a healthy standby that has heard no heartbeat of a
//!   leader for [`LeaseTiming::silence_ns`] deletes the holder's key
//!   (compare-and-set on its revision) and creates its own, without
//!   waiting for the key to expire. A leader it wrongly took for dead
//!   fails its next renewal and steps down; edges take the newer epoch.
//! - **Monotonic epochs**: the epoch is the larger of the creating
//!   revision and one above the highest epoch this core knows of
//!   ([`Lease::observe_epoch`]: heartbeats, prices, last values), so a
//!   re-created bucket, whose revisions start at 1 again, does not send
//!   epochs backwards.
//! - **A lost bucket** (a write answered "no responders" and the stream
//!   info "not found") is reported, and the bucket re-created; a leader
//!   counts it as a lost lease.

/// The lease's timing, from the period (`--bus-lease-ms`) and the
/// heartbeat period (`--bus-heartbeat-ms`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseTiming {
    /// Entries of the lease bucket expire this long after their write.
    pub ttl_ns: u64,
    /// A leader renews this long after its last confirmed write.
    pub renew_every_ns: u64,
    /// A leader stops publishing this long before its key could expire.
    pub fence_margin_ns: u64,
    /// A standby tries to create the key this often.
    pub acquire_every_ns: u64,
    /// A KV call without an answer after this long has failed.
    pub request_timeout_ns: u64,
    /// A standby takes over from a leader it has not heard for this long.
    pub silence_ns: u64,
}

const MS: u64 = 1_000_000;

impl LeaseTiming {
    /// The timing of a lease of `lease_ms` whose holder heartbeats every
    /// `heartbeat_ms`: renew each fifteenth of the period, fence a tenth
    /// before it ends, take over after three missed heartbeats.
    pub fn new(lease_ms: u64, heartbeat_ms: u64) -> LeaseTiming {
        let ttl_ns = lease_ms.max(1) * MS;
        LeaseTiming {
            ttl_ns,
            renew_every_ns: ttl_ns / 15,
            fence_margin_ns: ttl_ns / 10,
            acquire_every_ns: (ttl_ns / 15).min(250 * MS),
            request_timeout_ns: (ttl_ns / 15).max(100 * MS),
            silence_ns: heartbeat_ms.max(1) * 3 * MS,
        }
    }

    /// How long the KV store may be unavailable without a healthy leader
    /// fencing itself.
    pub fn outage_tolerated_ns(&self) -> u64 {
        self.ttl_ns - self.fence_margin_ns - self.renew_every_ns
    }
}

/// Where a core stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseState {
    /// Not holding it.
    Standby,
    /// Holding it.
    Leader {
        /// Stamped on every price and heartbeat while leading.
        epoch: u64,
        /// The key's revision last written (what a renewal compares).
        revision: u64,
    },
}

/// What the key holds, as read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyState {
    /// The key's revision (its stream sequence).
    pub revision: u64,
    /// The holder's core id; `None` for a delete or purge marker.
    pub holder: Option<u64>,
}

/// A KV call the bus thread is to make.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    /// Write this core's value if the key's revision is `expected`
    /// (0: absent).
    Create {
        /// The revision the key must have (0, or a marker's).
        expected: u64,
    },
    /// Write this core's value if the key is still at `revision`.
    Renew {
        /// The revision last written.
        revision: u64,
    },
    /// Delete the key if it is still at `revision`.
    Delete {
        /// The holder's revision.
        revision: u64,
    },
    /// Read the key.
    Read,
    /// Ask whether the lease bucket's stream exists.
    CheckBucket,
    /// Create the lease bucket's stream.
    RecreateBucket,
}

/// What a KV call came back with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// A write or delete succeeded at this revision.
    Written(u64),
    /// A compare-and-set found another revision.
    WrongRevision,
    /// The key as read (`None`: absent).
    Key(Option<KeyState>),
    /// A write found no JetStream stream on the subject (status 503).
    NoStore,
    /// The bucket's stream exists.
    BucketFound,
    /// The bucket's stream does not exist.
    BucketMissing,
    /// No answer in time, no connection, or another refusal.
    Failed,
}

/// Why a leader stopped leading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LossCause {
    /// The key names another core (its id).
    AnotherCore(u64),
    /// The key is gone (expired, or deleted by a core that took over).
    KeyGone,
    /// The lease bucket itself is gone.
    BucketLost,
    /// This core's feeds are not healthy: it handed the lease on.
    Resigned,
}

/// A change of role the caller acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    /// The key was created: lead from now on with this epoch.
    Acquired {
        /// The new epoch.
        epoch: u64,
    },
    /// Leading ended.
    Lost(LossCause),
    /// The bucket was found missing (a standby notices it too).
    BucketMissing,
    /// The bucket was created again.
    BucketRecreated,
}

/// The call in flight.
#[derive(Debug, Clone, Copy)]
struct InFlight {
    request: Request,
    sent_ns: u64,
    /// Read for: true = a leader verifying a refused renewal; false = a
    /// standby looking at the holder.
    verify: bool,
}

/// The lease as seen by one core.
#[derive(Debug, Clone)]
pub struct Lease {
    timing: LeaseTiming,
    core_id: u64,
    state: LeaseState,
    /// When the last confirmed write of this leader was sent (`None`: not
    /// confirmed yet, so not publishing).
    renewed_ns: Option<u64>,
    in_flight: Option<InFlight>,
    /// No call before this (monotonic ns).
    next_ns: u64,
    /// The highest epoch known anywhere.
    floor: u64,
    /// When a leader's heartbeat (not ours) was last heard.
    leader_heard_ns: u64,
}

impl Lease {
    /// A standby core `core_id` (nonzero) starting at `now_ns`: it has
    /// heard no leader yet, and counts the silence from now.
    pub fn new(timing: LeaseTiming, core_id: u64, now_ns: u64) -> Lease {
        assert!(timing.ttl_ns > 0, "lease period must be positive");
        assert!(core_id != 0, "a core id is nonzero");
        Lease {
            timing,
            core_id,
            state: LeaseState::Standby,
            renewed_ns: None,
            in_flight: None,
            next_ns: 0,
            floor: 0,
            leader_heard_ns: now_ns,
        }
    }

    /// Where this core stands now.
    pub fn state(&self) -> LeaseState {
        self.state
    }

    /// This core's id (the key's value while it leads).
    pub fn core_id(&self) -> u64 {
        self.core_id
    }

    /// The timing the lease runs by.
    pub fn timing(&self) -> &LeaseTiming {
        &self.timing
    }

    /// The epoch to stamp on prices, if this core may publish at `now_ns`.
    #[inline]
    pub fn publishing_epoch(&self, now_ns: u64) -> Option<u64> {
        let fence = self.timing.ttl_ns - self.timing.fence_margin_ns;
        match self.state {
            LeaseState::Leader { epoch, .. } => match self.renewed_ns {
                Some(at) if now_ns.saturating_sub(at) < fence => Some(epoch),
                _ => None,
            },
            LeaseState::Standby => None,
        }
    }

    /// An epoch seen anywhere (a heartbeat, a price, a last value): the
    /// next epoch this core takes is above it.
    pub fn observe_epoch(&mut self, epoch: u64) {
        self.floor = self.floor.max(epoch);
    }

    /// The highest epoch known.
    pub fn floor(&self) -> u64 {
        self.floor
    }

    /// A leader that learned of a higher epoch than its own after taking
    /// the lease (the last values it read at the takeover) moves above it
    /// before it publishes; returns the epoch to publish with (0 while
    /// standing by).
    pub fn settle_epoch(&mut self) -> u64 {
        let LeaseState::Leader { epoch, revision } = self.state else {
            return 0;
        };
        if self.floor <= epoch {
            return epoch;
        }
        let epoch = self.floor + 1;
        self.floor = epoch;
        self.state = LeaseState::Leader { epoch, revision };
        epoch
    }

    /// Another core's leader heartbeat of `epoch` arrived at `now_ns`.
    pub fn heard_leader(&mut self, epoch: u64, now_ns: u64) {
        self.observe_epoch(epoch);
        self.leader_heard_ns = self.leader_heard_ns.max(now_ns);
    }

    /// Another core's heartbeat says it leads at `epoch`: a leader of an
    /// older epoch was taken over (its key deleted by a standby that
    /// thought it dead) and steps down at once, without waiting for its
    /// next renewal to fail.
    pub fn superseded(&mut self, epoch: u64, now_ns: u64) -> Option<Transition> {
        let LeaseState::Leader { epoch: ours, .. } = self.state else {
            return None;
        };
        if epoch <= ours {
            return None;
        }
        self.state = LeaseState::Standby;
        self.in_flight = None;
        self.retry_in(now_ns, self.timing.acquire_every_ns);
        Some(Transition::Lost(LossCause::KeyGone))
    }

    fn leader_silent(&self, now_ns: u64) -> bool {
        now_ns.saturating_sub(self.leader_heard_ns) >= self.timing.silence_ns
    }

    /// The next call to make at `now_ns` for a core whose feeds are
    /// `healthy` (after hysteresis), if any. The call counts as sent now.
    pub fn next_request(&mut self, now_ns: u64, healthy: bool) -> Option<Request> {
        if self.in_flight.is_some() || now_ns < self.next_ns {
            return None;
        }
        let (request, verify) = match self.state {
            LeaseState::Leader { revision, .. } if !healthy => {
                (Request::Delete { revision }, false)
            }
            LeaseState::Leader { revision, .. } => {
                let since = self
                    .renewed_ns
                    .map_or(u64::MAX, |at| now_ns.saturating_sub(at));
                if since < self.timing.renew_every_ns {
                    return None;
                }
                (Request::Renew { revision }, false)
            }
            LeaseState::Standby if !healthy => return None,
            LeaseState::Standby => (Request::Create { expected: 0 }, false),
        };
        Some(self.send(request, verify, now_ns))
    }

    fn send(&mut self, request: Request, verify: bool, now_ns: u64) -> Request {
        self.in_flight = Some(InFlight {
            request,
            sent_ns: now_ns,
            verify,
        });
        request
    }

    /// The call in flight has had no answer in time: it failed.
    pub fn check_timeout(&mut self, now_ns: u64) -> Option<Transition> {
        let f = self.in_flight?;
        if now_ns.saturating_sub(f.sent_ns) < self.timing.request_timeout_ns {
            return None;
        }
        self.on_outcome(Outcome::Failed, now_ns).1
    }

    /// True while a call is in flight.
    pub fn in_flight(&self) -> Option<Request> {
        self.in_flight.map(|f| f.request)
    }

    /// The call in flight came back with `outcome` at `now_ns`. Returns a
    /// follow-up call to make at once, if any, and a change of role.
    pub fn on_outcome(
        &mut self,
        outcome: Outcome,
        now_ns: u64,
    ) -> (Option<Request>, Option<Transition>) {
        let Some(f) = self.in_flight.take() else {
            return (None, None);
        };
        if outcome == Outcome::NoStore {
            return (Some(self.send(Request::CheckBucket, false, now_ns)), None);
        }
        match f.request {
            Request::Create { .. } => self.on_create(outcome, f.sent_ns, now_ns),
            Request::Renew { .. } => self.on_renew(outcome, f.sent_ns, now_ns),
            Request::Delete { .. } => self.on_delete(outcome, now_ns),
            Request::Read => self.on_read(outcome, f.verify, now_ns),
            Request::CheckBucket => self.on_check(outcome, now_ns),
            Request::RecreateBucket => {
                self.retry_in(now_ns, 0);
                let t = (outcome == Outcome::BucketFound).then_some(Transition::BucketRecreated);
                (None, t)
            }
        }
    }

    fn retry_in(&mut self, now_ns: u64, after_ns: u64) {
        self.next_ns = now_ns.saturating_add(after_ns);
    }

    fn lead(&mut self, revision: u64, sent_ns: Option<u64>) -> Transition {
        let epoch = revision.max(self.floor + 1);
        self.floor = epoch;
        self.state = LeaseState::Leader { epoch, revision };
        self.renewed_ns = sent_ns;
        Transition::Acquired { epoch }
    }

    fn on_create(
        &mut self,
        outcome: Outcome,
        sent_ns: u64,
        now_ns: u64,
    ) -> (Option<Request>, Option<Transition>) {
        match outcome {
            Outcome::Written(revision) => (None, Some(self.lead(revision, Some(sent_ns)))),
            // Held, or over a marker: look at what is there.
            Outcome::WrongRevision => (Some(self.send(Request::Read, false, now_ns)), None),
            _ => {
                self.retry_in(now_ns, self.timing.acquire_every_ns);
                (None, None)
            }
        }
    }

    fn on_renew(
        &mut self,
        outcome: Outcome,
        sent_ns: u64,
        now_ns: u64,
    ) -> (Option<Request>, Option<Transition>) {
        let LeaseState::Leader { epoch, .. } = self.state else {
            return (None, None);
        };
        match outcome {
            Outcome::Written(revision) => {
                self.state = LeaseState::Leader { epoch, revision };
                self.renewed_ns = Some(sent_ns);
                (None, None)
            }
            Outcome::WrongRevision => (Some(self.send(Request::Read, true, now_ns)), None),
            // No answer: try again soon; fencing bounds the damage.
            _ => {
                self.retry_in(now_ns, self.timing.acquire_every_ns);
                (None, None)
            }
        }
    }

    fn on_delete(
        &mut self,
        outcome: Outcome,
        now_ns: u64,
    ) -> (Option<Request>, Option<Transition>) {
        if let LeaseState::Leader { .. } = self.state {
            // A resignation: leading ends whatever the answer (the key
            // expires if the delete did not land).
            self.state = LeaseState::Standby;
            self.retry_in(now_ns, self.timing.acquire_every_ns);
            return (None, Some(Transition::Lost(LossCause::Resigned)));
        }
        match outcome {
            // The holder's key is gone: create ours over the marker at once.
            Outcome::Written(marker) => (
                Some(self.send(Request::Create { expected: marker }, false, now_ns)),
                None,
            ),
            // The holder wrote since we read it: it is alive after all.
            Outcome::WrongRevision => {
                self.retry_in(now_ns, self.timing.acquire_every_ns);
                (None, None)
            }
            _ => {
                self.retry_in(now_ns, self.timing.acquire_every_ns);
                (None, None)
            }
        }
    }

    fn on_read(
        &mut self,
        outcome: Outcome,
        verify: bool,
        now_ns: u64,
    ) -> (Option<Request>, Option<Transition>) {
        let Outcome::Key(key) = outcome else {
            self.retry_in(now_ns, self.timing.acquire_every_ns);
            return (None, None);
        };
        if verify {
            return (None, self.verified(key, now_ns));
        }
        match key {
            // Absent, or a marker: create over it.
            None => (
                Some(self.send(Request::Create { expected: 0 }, false, now_ns)),
                None,
            ),
            Some(KeyState {
                revision,
                holder: None,
            }) => (
                Some(self.send(Request::Create { expected: revision }, false, now_ns)),
                None,
            ),
            // Ours (an answer lost while we were standing by): lead on it,
            // fenced until a renewal confirms it (when it was written is
            // not known).
            Some(KeyState {
                revision,
                holder: Some(h),
            }) if h == self.core_id => (None, Some(self.lead(revision, None))),
            Some(KeyState { revision, .. }) if self.leader_silent(now_ns) => (
                Some(self.send(Request::Delete { revision }, false, now_ns)),
                None,
            ),
            Some(_) => {
                self.retry_in(now_ns, self.timing.acquire_every_ns);
                (None, None)
            }
        }
    }

    /// A leader's refused renewal, checked against the key.
    fn verified(&mut self, key: Option<KeyState>, now_ns: u64) -> Option<Transition> {
        let LeaseState::Leader { epoch, .. } = self.state else {
            return None;
        };
        let cause = match key {
            Some(KeyState {
                revision,
                holder: Some(h),
            }) if h == self.core_id => {
                // Our write landed; its answer was lost. Renew on it now.
                self.state = LeaseState::Leader { epoch, revision };
                self.retry_in(now_ns, 0);
                return None;
            }
            Some(KeyState {
                holder: Some(h), ..
            }) => LossCause::AnotherCore(h),
            _ => LossCause::KeyGone,
        };
        self.state = LeaseState::Standby;
        self.retry_in(now_ns, self.timing.acquire_every_ns);
        Some(Transition::Lost(cause))
    }

    fn on_check(&mut self, outcome: Outcome, now_ns: u64) -> (Option<Request>, Option<Transition>) {
        match outcome {
            Outcome::BucketMissing => {
                let t = match self.state {
                    LeaseState::Leader { .. } => Transition::Lost(LossCause::BucketLost),
                    LeaseState::Standby => Transition::BucketMissing,
                };
                self.state = LeaseState::Standby;
                (
                    Some(self.send(Request::RecreateBucket, false, now_ns)),
                    Some(t),
                )
            }
            // The stream is there (an election, or a slow server): retry.
            _ => {
                self.retry_in(now_ns, self.timing.request_timeout_ns);
                (None, None)
            }
        }
    }
}

#[cfg(test)]
#[path = "lease_tests.rs"]
mod tests;
