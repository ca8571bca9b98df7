//! The dispatcher thread: drains the shards' request rings into the
//! [`RequestQueue`], hands jobs to the workers under the adaptive limit
//! while their shards have answer room, and answers what the queue sheds
//! with a Reject on its own ring to each shard.

use super::*;

pub(super) struct Dispatcher {
    pub(super) queue: RequestQueue<RequestMsg>,
    pub(super) limit: Arc<AdaptiveLimit>,
    /// Per shard: its request ring and the per-account share counters.
    pub(super) inbound: Inbound,
    pub(super) answers: Vec<rtrb::Producer<Answer>>,
    pub(super) bells: Vec<Arc<Doorbell>>,
    pub(super) jobs: Sender<Job>,
    /// At most this many jobs wait in the hand-off
    /// ([`HANDOFF_PER_WORKER`] per worker), so the queue's order (rotation,
    /// LIFO) decides what is served next, not a FIFO channel filled to the
    /// concurrency limit.
    pub(super) handoff_max: usize,
    pub(super) sheds: Vec<Shed<RequestMsg>>,
    /// Per shard: worker answers owed (a job is dispatched only with room).
    pub(super) credits: Vec<Arc<ShardCredit>>,
    /// Per account: jobs past the queue (an account at its cap waits in
    /// the queue; see `requests::inflight`).
    pub(super) inflight: Arc<AccountInflight>,
    /// Rejects waiting for room on the dispatcher's ring to their shard;
    /// preallocated to twice the queue's capacity (see `room_to_admit`).
    pub(super) pending: VecDeque<PendingReject>,
    /// Pending rejects per shard.
    pub(super) pending_of: Vec<u32>,
    pub(super) scratch: Box<Answer>,
    pub(super) queue_wait: HopRecorder,
    /// Retry-after draws of the dispatcher's own rejects (entropy-seeded).
    pub(super) rng: rand::rngs::SmallRng,
    pub(super) stop: Arc<AtomicBool>,
    pub(super) stats: Arc<RequestStats>,
}

pub(super) fn empty_answer() -> Box<Answer> {
    Box::new(Answer {
        conn: 0,
        session: 0,
        account: 0,
        len: 0,
        request_id: 0,
        ref_template_id: 0,
        deadline_ns: 0,
        refusal: None,
        sent_ns: 0,
        bytes: [0; ANSWER_BYTES_MAX],
    })
}

impl Dispatcher {
    pub(super) fn run(&mut self, mut waiter: Waiter) {
        while !self.stop.load(Ordering::Relaxed) {
            let flushed = self.flush_pending();
            let admitted = self.admit_all();
            // Read after admission: the requests just admitted were stamped
            // by their shards, and a sojourn measured against an older
            // `now` would read short (or 0).
            let now = monotonic_ns();
            let dispatched = self.dispatch(now);
            self.queue.poll(now);
            if flushed + admitted + dispatched > 0 {
                waiter.reset();
                continue;
            }
            // Idle, or waiting for a worker slot or answer room: workers
            // ring the doorbell when they release a slot, shards when they
            // push a request or give back a full shard's answer credit.
            let inbound = &self.inbound;
            let limit = &self.limit;
            let credits = &self.credits;
            let (jobs, handoff_max) = (&self.jobs, self.handoff_max);
            let queued = !self.queue.is_empty();
            // Queued requests have deadlines and CoDel intervals to keep,
            // pending rejects wait for ring room (no doorbell for that); an
            // empty queue has no timer, and every input rings.
            waiter.set_retrying(queued || !self.pending.is_empty());
            crate::runtime::drill::point("dispatch", 0);
            waiter.idle(|| {
                inbound.iter().any(|(r, _)| !r.is_empty())
                    || (queued
                        && jobs.len() < handoff_max
                        && limit.inflight() < limit.limit()
                        && credits.iter().all(|c| c.has_room()))
            });
        }
    }

    /// Whether one more request may be admitted: only while fewer rejects
    /// than the queue's capacity wait. An admission adds at most one
    /// request to queue + pending, and pops only move requests from the
    /// queue to the pending list or a worker, so queue + pending never
    /// exceeds twice the capacity: the pending list (preallocated to that)
    /// always has room for a reject, and a full queue still evicts.
    fn room_to_admit(&self) -> bool {
        self.pending.len() < self.queue.capacity()
    }

    fn admit_all(&mut self) -> usize {
        let mut n = 0;
        for i in 0..self.inbound.len() {
            // Requests left in the inbound ring back up to the shard, which
            // refuses new ones itself (Reject(overloaded)) when it is full.
            while self.room_to_admit() {
                let (ring, shares) = &mut self.inbound[i];
                let Ok(m) = ring.pop() else { break };
                shares.release(m.account);
                n += 1;
                let budget = if m.budget_us == 0 {
                    BUDGET_DEFAULT_US
                } else {
                    m.budget_us
                };
                let arrival = Arrival {
                    account: m.account,
                    budget_us: u64::from(budget),
                    critical: m.critical,
                    critical_entitled: m.critical_entitled,
                };
                match self.queue.push(m, arrival, m.arrival_ns.max(1)) {
                    Ok(None) => {}
                    Ok(Some(evicted)) => self.reject_shed(evicted),
                    Err(refused) => self.reject_shed(refused),
                }
            }
        }
        n
    }

    fn dispatch(&mut self, now: u64) -> usize {
        let mut n = 0;
        // A popped job may be for any shard: pop only while every shard has
        // an answer slot to give it.
        while !self.queue.is_empty()
            && self.jobs.len() < self.handoff_max
            && self.credits.iter().all(|c| c.has_room())
            && self.limit.try_acquire()
        {
            let (sheds, inflight) = (&mut self.sheds, &self.inflight);
            let popped = self
                .queue
                .pop_eligible(now, |a| inflight.has_room(a), |s| sheds.push(s));
            // Drained in place: the vector keeps its capacity (no allocation).
            while let Some(s) = self.sheds.pop() {
                self.reject_shed(s);
            }
            let Some(d) = popped else {
                self.limit.release();
                break;
            };
            n += 1;
            self.queue_wait.record(d.sojourn_ns, now);
            self.inflight.take(d.account);
            let credit = self.credits.get(usize::from(d.request.shard)).cloned();
            if let Some(c) = &credit {
                c.take();
            }
            let job = Job {
                msg: d.request,
                deadline_ns: d.deadline_ns,
            };
            if let Err(e) = self.jobs.try_send(job) {
                // Cannot happen while the channel holds limit_max jobs.
                self.limit.release();
                self.inflight.give(job_account(&e));
                if let Some(c) = &credit {
                    c.give();
                }
                let job = e.into_inner();
                let retry = self.queue.config().retry_after.draw(&mut self.rng);
                self.reject(&job.msg, RejectReason::OVERLOADED, retry, "workers busy");
            }
        }
        n
    }

    fn reject_shed(&mut self, s: Shed<RequestMsg>) {
        let (reason, text) = shed_reject(s.reason);
        self.reject(&s.request, reason, s.retry_after_ms, text);
    }

    fn reject(
        &mut self,
        m: &RequestMsg,
        reason: RejectReason,
        retry_after_ms: u32,
        text: &'static str,
    ) {
        let p = PendingReject::new(m, reason, retry_after_ms, text);
        // Behind rejects already waiting for this shard, or when its ring
        // is full: wait in the pending list (bounded, see `room_to_admit`).
        let s = usize::from(p.shard);
        let waiting = self.pending_of.get(s).is_some_and(|&n| n > 0);
        if waiting || !self.try_send_reject(&p) {
            debug_assert!(self.pending.len() < self.pending.capacity());
            self.stats.rejects_deferred.inc();
            if let Some(n) = self.pending_of.get_mut(s) {
                *n += 1;
            }
            self.pending.push_back(p);
        }
    }

    /// Puts `p` on the dispatcher's ring to its shard if there is room.
    fn try_send_reject(&mut self, p: &PendingReject) -> bool {
        let s = usize::from(p.shard);
        let Some(ring) = self.answers.get_mut(s) else {
            return true; // no such shard: nobody to answer
        };
        if ring.slots() == 0 {
            return false;
        }
        p.encode_into(&mut self.scratch);
        self.scratch.sent_ns = monotonic_ns();
        let pushed = ring.push(*self.scratch).is_ok();
        if let Some(b) = self.bells.get(s) {
            b.ring();
        }
        pushed
    }

    /// Sends waiting rejects that now fit, in order per shard: one turn of
    /// the list, each entry sent or put back at the end (order kept).
    fn flush_pending(&mut self) -> usize {
        let mut sent = 0;
        let mut blocked = [false; 64];
        for _ in 0..self.pending.len() {
            let Some(p) = self.pending.pop_front() else {
                break;
            };
            let s = usize::from(p.shard);
            let b = &mut blocked[s % 64];
            if !*b && self.try_send_reject(&p) {
                if let Some(n) = self.pending_of.get_mut(s) {
                    *n -= 1;
                }
                sent += 1;
            } else {
                blocked[s % 64] = true;
                self.pending.push_back(p);
            }
        }
        sent
    }
}
