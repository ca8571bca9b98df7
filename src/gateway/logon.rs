//! Logon on the shard: the admission, brute-force and reference-data
//! decisions the session asks for ([`super::session::Event::Logon`]),
//! carried out here because they need the listener's shared state.
//!
//! Order (see [`crate::auth`]): logon rate → address lockout → reference
//! data → a cached verification of the same token (logs on at once) →
//! account lockout → the argon2 verifier's queue (fair by account; on the
//! worker the guess is reserved against the address and account before
//! argon2, and `judge` settles the reservation). The verifier's verdict
//! comes back through the shard's verdict channel ([`Logons::next_verdict`])
//! and is matched to its connection by a ticket, so a connection that
//! closed (or was reused) in the meantime is not confused with another.
//! Until then the connection's later frames are neither read nor handled
//! (`Shard::on_readable`, `Shard::process_frames` in `reads.rs`), so a client that sends
//! Subscribe right behind its Logon has it handled after LogonAccepted,
//! in order, as when the logon was decided at once.
//! argon2 never runs on the shard thread; a full verifier queue is
//! LogonRejected(busy) (as is a logon pushed out of it by another
//! account's), a locked address or account LogonRejected(rate_limited)
//! with the lock's remaining time as retry-after (a budget held by guesses
//! under way: `--lockout-first-ms`).

use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crossbeam_channel::{Receiver, Sender};
use mio::Waker;

use super::conns::Conns;
use super::lag::LagState;
use super::session::Admitted;
use super::Shared;
use crate::auth::verifier::{Cached, Claim, Job, Outcome};
use crate::auth::{hash, FailReason};
use crate::clock::wall_ns;
use crate::config::Account;
use crate::refdata::Lookup;
use crate::wire::{self, LogonRejectReason, RejectReason};

/// A verification's outcome, sent from the verifier to the shard.
pub(crate) struct Verdict {
    conn: u32,
    ticket: u64,
    heartbeat_ms: u32,
    judged: Judged,
}

impl Verdict {
    /// The connection slot it is for.
    pub(super) fn conn(&self) -> usize {
        self.conn as usize
    }
}

/// What the verifier decided about one logon.
enum Judged {
    /// The account exists and the token matched.
    Matched(Arc<Account>),
    /// Refused with this reason and retry-after (a wrong token or unknown
    /// account: `auth`; a lock found on the verifier: `rate_limited`).
    Refused(LogonRejectReason, u32),
    /// Pushed out of the full verifier queue by another account's logon.
    Busy,
}

/// What the logon checks decided on the shard.
enum Decision {
    Accept(Admitted),
    Reject(LogonRejectReason, u32),
    /// Handed to the verifier; the verdict follows.
    Pending,
}

type Refusal = (LogonRejectReason, u32);

/// The shard's logons: the verdict channel from the argon2 verifier and
/// the tickets that match a verdict to its connection.
pub(super) struct Logons {
    verdicts_tx: Sender<Verdict>,
    verdicts_rx: Receiver<Verdict>,
    /// Rung by the verifier after it sends a verdict.
    waker: Arc<Waker>,
    /// The last logon ticket handed out.
    next_ticket: u64,
}

impl Logons {
    /// Logons of a shard whose poll `waker` wakes.
    pub(super) fn new(waker: Arc<Waker>) -> Logons {
        let (verdicts_tx, verdicts_rx) = crossbeam_channel::unbounded();
        Logons {
            verdicts_tx,
            verdicts_rx,
            waker,
            next_ticket: 0,
        }
    }

    /// A verdict is waiting.
    pub(super) fn has_verdicts(&self) -> bool {
        !self.verdicts_rx.is_empty()
    }

    /// A Logon from connection `i`: refused, accepted, or handed to the
    /// verifier (see the module docs).
    pub(super) fn on_logon(
        &mut self,
        conns: &mut Conns,
        lag: &mut LagState,
        i: usize,
        logon: &wire::Logon<'_>,
        now: u64,
    ) {
        crate::runtime::drill::connection_point(logon.account, "Logon");
        let pending = conns.slab.conns[i]
            .as_ref()
            .is_some_and(|c| c.logon_ticket != 0);
        if pending {
            // A second Logon while the first is being verified.
            let (t, r) = (wire::template::LOGON, RejectReason::ALREADY_LOGGED_ON);
            return conns.reject(i, 0, t, r, 0, "logon in progress");
        }
        if lag.refuse_logon(conns, i, now) {
            return;
        }
        let hb = logon.heartbeat_interval_ms;
        match self.decide(conns, i, logon, now) {
            Decision::Accept(a) => {
                conns.with_session(i, now, |s, ctx| s.logon_accepted(a, hb, ctx));
            }
            Decision::Reject(reason, retry) => {
                conns.with_session(i, now, |s, ctx| s.logon_rejected(reason, retry, ctx));
            }
            Decision::Pending => {}
        }
    }

    /// Admission, lockouts and credentials up to the verifier.
    fn decide(
        &mut self,
        conns: &mut Conns,
        i: usize,
        logon: &wire::Logon<'_>,
        now: u64,
    ) -> Decision {
        let shared = conns.shared.clone();
        let admission = || shared.admission.lock().expect("admission lock");
        if let Err(r) = admission().on_logon(now) {
            return Decision::Reject(LogonRejectReason::RATE_LIMITED, r.retry_after_ms);
        }
        let Some(ip) = conns.slab.conns[i].as_ref().map(|c| c.peer.ip()) else {
            return Decision::Pending;
        };
        if let Err(retry) = shared.auth.check_address(ip, now) {
            return Decision::Reject(LogonRejectReason::RATE_LIMITED, retry);
        }
        // Cut for a flood from this address and back before its
        // retry-after: refused, and held longer.
        if let Err(retry) = shared.auth.check_hold(logon.account, ip, now) {
            return Decision::Reject(LogonRejectReason::RATE_LIMITED, retry);
        }
        let name = std::str::from_utf8(logon.account).unwrap_or("");
        let acct = match shared.refdata.lookup_from(name, ip, now) {
            Lookup::Found(a) => Some(a),
            Lookup::Unavailable { retry_after_ms } => {
                // Reference data is unreachable: come back later, not "wrong".
                let retry = u32::try_from(retry_after_ms).unwrap_or(u32::MAX);
                return Decision::Reject(LogonRejectReason::BUSY, retry);
            }
            Lookup::NotFound => None,
        };
        if let Some(a) = &acct {
            if !hash::is_hash(&a.token) {
                // A clear token (`insecure_plain_tokens`): microseconds.
                return plain(&shared, ip, name, a.clone(), logon.token, now);
            }
            if shared.auth.cached(name, &a.token, logon.token, now) {
                return finish(&shared, name, a.clone());
            }
        }
        if let Err(retry) = shared.auth.check_account(logon.account, now) {
            return Decision::Reject(LogonRejectReason::RATE_LIMITED, retry);
        }
        self.submit(conns, i, ip, logon, acct, now)
    }

    /// Queues the verification (an unknown account against a decoy hash,
    /// so it costs the same as a wrong token).
    fn submit(
        &mut self,
        conns: &mut Conns,
        i: usize,
        ip: IpAddr,
        logon: &wire::Logon<'_>,
        acct: Option<Arc<Account>>,
        now: u64,
    ) -> Decision {
        self.next_ticket += 1;
        let ticket = self.next_ticket;
        let stored = acct
            .as_ref()
            .map_or_else(|| hash::decoy_hash().to_string(), |a| a.token.clone());
        let shared = conns.shared.clone();
        let (tx, waker) = (self.verdicts_tx.clone(), self.waker.clone());
        let heartbeat_ms = logon.heartbeat_interval_ms;
        // Logons of one account and token queued together (a herd): the
        // first verifies, the others find it in the cache.
        let cached = acct.as_ref().map(|a| {
            let (auth, name, stored) = (shared.auth.clone(), a.name.clone(), a.token.clone());
            Box::new(move |token: &[u8]| auth.cached(&name, &stored, token, now)) as Cached
        });
        let (auth, key) = (shared.auth.clone(), stored.clone());
        let done = move |o: Outcome, token: &[u8]| {
            let judged = judge(&auth, o, acct, &key, token);
            let v = Verdict {
                conn: i as u32,
                ticket,
                heartbeat_ms,
                judged,
            };
            if tx.send(v).is_ok() {
                let _ = waker.wake();
            }
        };
        let claim = Claim {
            guard: shared.auth.clone(),
            ip,
            account: logon.account.to_vec(),
        };
        let job = Job {
            stored,
            token: logon.token.to_vec(),
            cached,
            // Past the logon timeout the connection is cut: skip argon2.
            deadline_ns: now + shared.cfg.logon_timeout_ms * 1_000_000,
            key: shared.auth.account_key(logon.account),
            claim: Some(claim),
            done: Box::new(done),
        };
        if shared.verifier.submit(job).is_err() {
            shared.auth.stats.failed(FailReason::VerifierBusy);
            let retry = conns.jitter(shared.cfg.admission.retry_after);
            return Decision::Reject(LogonRejectReason::BUSY, retry);
        }
        if let Some(c) = conns.slab.conns[i].as_mut() {
            c.logon_ticket = ticket;
        }
        Decision::Pending
    }

    /// Applies the next of the verifier's verdicts to its connection, if
    /// still waiting for it: `None` when no verdict is waiting, else the
    /// connection it was applied to (`None` inside: closed meanwhile).
    /// The caller reads that connection next (its frames after the Logon
    /// waited for the verdict).
    /// The next verdict the verifier sent, if any.
    pub(super) fn take_verdict(&mut self) -> Option<Verdict> {
        self.verdicts_rx.try_recv().ok()
    }

    /// Applies verdict `v` to its connection; `Some(i)` when connection
    /// `i` was waiting for it (its input is then read on).
    pub(super) fn apply_verdict(
        &mut self,
        v: Verdict,
        conns: &mut Conns,
        now: u64,
    ) -> Option<usize> {
        let i = v.conn as usize;
        let waiting = conns
            .slab
            .conns
            .get_mut(i)
            .and_then(Option::as_mut)
            .filter(|c| c.logon_ticket == v.ticket && !c.is_active() && !c.session.is_closing());
        let Some(c) = waiting else {
            return None; // closed (logon timeout, peer gone) meanwhile
        };
        c.logon_ticket = 0;
        let decision = match v.judged {
            Judged::Matched(a) => {
                let name = a.name.clone();
                finish(&conns.shared, &name, a)
            }
            Judged::Refused(reason, retry) => Decision::Reject(reason, retry),
            Judged::Busy => {
                let retry = conns.jitter(conns.shared.cfg.admission.retry_after);
                Decision::Reject(LogonRejectReason::BUSY, retry)
            }
        };
        let hb = v.heartbeat_ms;
        match decision {
            Decision::Accept(a) => {
                conns.with_session(i, now, |s, ctx| s.logon_accepted(a, hb, ctx));
            }
            Decision::Reject(reason, retry) => {
                conns.with_session(i, now, |s, ctx| s.logon_rejected(reason, retry, ctx));
            }
            Decision::Pending => {}
        }
        Some(i)
    }
}

fn plain(
    shared: &Shared,
    ip: IpAddr,
    name: &str,
    a: Arc<Account>,
    token: &[u8],
    now: u64,
) -> Decision {
    let auth = &shared.auth;
    match auth.judge(ip, name.as_bytes(), true, now, || {
        hash::verify(&a.token, token)
    }) {
        Ok(true) => finish(shared, name, a),
        Ok(false) => Decision::Reject(LogonRejectReason::AUTH, 0),
        Err(retry) => Decision::Reject(LogonRejectReason::RATE_LIMITED, retry),
    }
}

/// The credentials are good: entitlement and the account's session
/// limit.
fn finish(shared: &Shared, name: &str, acct: Arc<Account>) -> Decision {
    match admit(shared, name, acct) {
        Ok(a) => Decision::Accept(a),
        Err((reason, retry)) => Decision::Reject(reason, retry),
    }
}

fn admit(shared: &Shared, name: &str, acct: Arc<Account>) -> Result<Admitted, Refusal> {
    if acct.entitled_to_nothing() {
        // `symbols = []`: the account may see nothing; retrying will
        // not change that.
        return Err((LogonRejectReason::NOT_ENTITLED, 0));
    }
    let account = account_index(shared, name);
    let opened = shared
        .admission
        .lock()
        .expect("admission lock")
        .on_session_open(account);
    if let Err(r) = opened {
        return Err((LogonRejectReason::SESSION_LIMIT, r.retry_after_ms));
    }
    Ok(Admitted {
        account,
        acct,
        session_id: shared.next_session_id.fetch_add(1, Ordering::Relaxed),
        server_time_ns: wall_ns(),
        stream_id: shared.table.stream_id(),
    })
}

/// The verifier's outcome for a logon of `acct` (`None`: unknown, checked
/// against the decoy hash), its reservation settled: a match clears the
/// address's and account's counts and caches the token, a mismatch counts
/// a failure against both.
fn judge(
    auth: &crate::auth::AuthGuard,
    o: Outcome,
    acct: Option<Arc<Account>>,
    stored: &str,
    token: &[u8],
) -> Judged {
    let known = acct.is_some();
    match (o, acct) {
        (Outcome::Cached, Some(a)) => Judged::Matched(a),
        (
            Outcome::Verified {
                matched: true,
                reservation,
                now_ns,
            },
            Some(a),
        ) => {
            if let Some(r) = reservation {
                r.matched(&a.name, stored, token, now_ns);
            }
            Judged::Matched(a)
        }
        (
            Outcome::Verified {
                reservation,
                now_ns,
                ..
            },
            _,
        ) => {
            if let Some(r) = reservation {
                r.failed(known, now_ns);
            }
            Judged::Refused(LogonRejectReason::AUTH, 0)
        }
        (Outcome::Refused { retry_after_ms }, _) => {
            Judged::Refused(LogonRejectReason::RATE_LIMITED, retry_after_ms)
        }
        (Outcome::Busy, _) => {
            auth.stats.failed(FailReason::VerifierBusy);
            Judged::Busy
        }
        // A cache hit needs an account whose token is cached.
        (Outcome::Cached, None) => Judged::Refused(LogonRejectReason::AUTH, 0),
    }
}

/// Dense index of an account for per-account session limits: its position
/// in the config file, or (for accounts only Redis knows) a hashed slot
/// above those. Hash collisions share one session cap; the table size is
/// the admission's `accounts_max`.
fn account_index(shared: &Shared, name: &str) -> u32 {
    if let Some(p) = shared.config.accounts.iter().position(|a| a.name == name) {
        return p as u32;
    }
    let fixed = shared.config.accounts.len() as u64;
    let slots = (shared.cfg.admission.accounts_max as u64)
        .saturating_sub(fixed)
        .max(1);
    let h = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    (fixed + h % slots) as u32
}
