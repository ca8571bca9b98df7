//! Logon on the shard: the admission and reference-data decisions the
//! session asks for ([`super::session::Event::Logon`]), carried out here
//! because they need the listener's shared state.

use std::sync::atomic::Ordering;

use super::session::Admitted;
use super::shard::Shard;
use super::Shared;
use crate::clock::wall_ns;
use crate::refdata::Lookup;
use crate::wire::{self, LogonRejectReason};

impl Shard {
    pub(super) fn on_logon(&mut self, i: usize, logon: &wire::Logon<'_>, now: u64) {
        if self.lag_refuse_logon(i, now) {
            return;
        }
        match self.admit(logon, now) {
            Ok(a) => {
                let hb = logon.heartbeat_interval_ms;
                self.with_session(i, now, |s, ctx| s.logon_accepted(a, hb, ctx));
            }
            Err((reason, retry)) => {
                self.with_session(i, now, |s, ctx| s.logon_rejected(reason, retry, ctx));
            }
        }
    }

    /// Admission (logon rate, the account's session limit) and
    /// credentials; on refusal the reason and its retry-after.
    fn admit(
        &self,
        logon: &wire::Logon<'_>,
        now: u64,
    ) -> Result<Admitted, (LogonRejectReason, u32)> {
        let shared = &self.shared;
        let admission = || shared.admission.lock().expect("admission lock");
        if let Err(r) = admission().on_logon(now) {
            return Err((LogonRejectReason::RATE_LIMITED, r.retry_after_ms));
        }
        let name = std::str::from_utf8(logon.account).unwrap_or("");
        let acct = match shared.refdata.lookup(name, now) {
            Lookup::Found(a) if constant_time_eq(a.token.as_bytes(), logon.token) => a,
            Lookup::Unavailable { retry_after_ms } => {
                // Reference data is unreachable: come back later, not "wrong".
                let retry = u32::try_from(retry_after_ms).unwrap_or(u32::MAX);
                return Err((LogonRejectReason::BUSY, retry));
            }
            // 0: wrong credentials do not get better by retrying.
            _ => return Err((LogonRejectReason::AUTH, 0)),
        };
        let account = account_index(shared, name);
        if let Err(r) = admission().on_session_open(account) {
            return Err((LogonRejectReason::SESSION_LIMIT, r.retry_after_ms));
        }
        Ok(Admitted {
            account,
            acct,
            session_id: shared.next_session_id.fetch_add(1, Ordering::Relaxed),
            server_time_ns: wall_ns(),
        })
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

/// Compares secrets in time independent of where they differ.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
