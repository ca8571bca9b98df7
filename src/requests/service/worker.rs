//! A request worker: takes jobs from the dispatcher, builds the answer
//! (snapshot, history, symbol list) with per-job scratch from a bump arena,
//! and puts it on its own ring to the job's shard, where a slot was
//! reserved for it at dispatch.

use super::*;

pub(super) struct Worker {
    pub(super) sources: Sources,
    pub(super) dispatcher: Arc<Doorbell>,
    pub(super) answers: Vec<rtrb::Producer<Answer>>,
    pub(super) bells: Vec<Arc<Doorbell>>,
    pub(super) limit: Arc<AdaptiveLimit>,
    pub(super) stats: Arc<RequestStats>,
    pub(super) arena: Bump,
    pub(super) answer: Box<Answer>,
    pub(super) service: HopRecorder,
    pub(super) hold: Option<Arc<crate::requests::gate::WorkerGate>>,
}

impl Worker {
    pub(super) fn run(mut self, index: u32, jobs: Receiver<Job>) {
        loop {
            let job = jobs.recv_timeout(Duration::from_millis(200));
            crate::runtime::drill::point("request", index);
            match job {
                Ok(job) => {
                    if let Some(h) = &self.hold {
                        h.pass();
                    }
                    self.serve(job)
                }
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => {
                    // The dispatcher let go of the jobs: it is stopping or
                    // it died, and its own end is the one judged. Counted
                    // as a death here, this end could come first and
                    // /livez would name this worker, not the cause.
                    crate::runtime::supervise::end_expected();
                    return;
                }
            }
        }
    }

    fn serve(&mut self, job: Job) {
        let start = monotonic_ns();
        let m = job.msg;
        self.answer.conn = m.conn;
        self.answer.session = m.session;
        self.answer.account = m.account;
        self.answer.request_id = m.request_id;
        self.answer.ref_template_id = template_of(m.kind);
        self.answer.refusal = None;
        self.answer.deadline_ns = 0;
        let n = if start >= job.deadline_ns {
            // Dropped before the work: the reject costs less than the answer.
            self.stats.expired_at_worker.inc();
            reject_into(&mut self.answer.bytes, &m, RejectReason::DEADLINE_EXPIRED)
        } else {
            let n = self.build(&m);
            self.arena.reset();
            // An answer: the shard checks its deadline again.
            self.answer.deadline_ns = n.map_or(0, |_| job.deadline_ns.max(1));
            n
        };
        let n = match n {
            Some(n) => n,
            None => {
                self.stats.answers_too_large.inc();
                reject_into(&mut self.answer.bytes, &m, RejectReason::LIMIT_REACHED).unwrap_or(0)
            }
        };
        self.answer.len = n as u32;
        let built = monotonic_ns();
        self.service.record(built - start, built);
        self.answer.sent_ns = built;
        send(
            &mut self.answers,
            &self.bells,
            m.shard,
            *self.answer,
            &self.stats,
        );
        let end = monotonic_ns();
        let inflight = self.limit.inflight();
        self.limit.release();
        self.limit.on_sample(end - start, inflight, end);
        // A slot is free: the dispatcher may be waiting for one.
        self.dispatcher.ring();
    }

    fn build(&mut self, m: &RequestMsg) -> Option<usize> {
        let out = &mut self.answer.bytes;
        let s = &self.sources;
        match m.kind {
            RequestKind::Snapshot => {
                self.stats.snapshot_served.inc();
                let mut prices =
                    bumpalo::collections::Vec::with_capacity_in(m.nsym as usize, &self.arena);
                for &id in &m.symbols[..m.nsym as usize] {
                    if let Some(p) = s.table.read(id, m.tier) {
                        prices.push(PriceBody::from_price(
                            &p,
                            s.config.table.digits(id),
                            s.wall_offset_ns,
                        ));
                    }
                }
                wire::encode_snapshot_response(out, m.request_id, prices.iter()).ok()
            }
            RequestKind::History => {
                self.stats.history_served.inc();
                let sym = m.symbols[0];
                let mut ticks =
                    bumpalo::collections::Vec::with_capacity_in(m.count as usize, &self.arena);
                s.history.last(sym, m.count as usize, |t| {
                    ticks.push(HistoryTick {
                        provider: t.provider,
                        bid: t.bid,
                        ask: t.ask,
                        bid_size: t.bid_size,
                        ask_size: t.ask_size,
                        provider_time_ns: t.provider_time_ns,
                    })
                });
                let digits = s.config.table.digits(sym);
                wire::encode_history_response(out, m.request_id, sym, digits, ticks.iter()).ok()
            }
            RequestKind::SymbolList => {
                self.stats.symbol_list_served.inc();
                let crate::refdata::Lookup::Found(acct) =
                    s.refdata.lookup(m.account_name(), monotonic_ns())
                else {
                    return None;
                };
                let symbols = s
                    .config
                    .table
                    .instruments()
                    .iter()
                    .filter(|i| acct.entitled_symbol(i.id))
                    .map(|i| SymbolInfo {
                        symbol_id: i.id,
                        digits: i.digits,
                        name: Name16::new(&i.name).unwrap_or_default(),
                    });
                let tiers = s
                    .config
                    .table
                    .tiers()
                    .iter()
                    .filter(|t| acct.entitled_tier(t.id))
                    .map(|t| TierInfo {
                        tier_id: t.id,
                        name: Name16::new(&t.name).unwrap_or_default(),
                    });
                wire::encode_symbol_directory(out, m.request_id, symbols, tiers).ok()
            }
        }
    }
}

fn reject_into(out: &mut [u8], m: &RequestMsg, reason: RejectReason) -> Option<usize> {
    let r = wire::Reject {
        request_id: m.request_id,
        ref_template_id: template_of(m.kind),
        reason,
        retry_after_ms: 0,
        text: b"",
    };
    wire::encode_reject(out, &r).ok()
}
