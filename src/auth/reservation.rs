//! A guess's place in the lockout tables while its token is checked
//! (docs/security.md, "Limits"): reserved before the check against the
//! source address and (subscriber listener) the account, settled by the
//! verdict. See [`super::lockout`] for the invariant the reservations
//! keep. A [`Reservation`] dropped unsettled (a job dropped past its
//! deadline, a verifier that stopped) gives its places back, so a check
//! that never ran never counts and never leaks a place.

use std::net::IpAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use super::lockout::Failed;
use super::{lock, AuthGuard, FailReason, Listener, Scope};

/// The table keys one reservation holds a place under.
#[derive(Debug, Clone, Copy)]
pub(super) struct Places {
    ip: IpAddr,
    address: u64,
    /// `None` on the feed listener (no account lockout).
    account: Option<u64>,
}

impl AuthGuard {
    /// Reserves one guess of `account` from `ip` at `now_ns`, before its
    /// token is checked: `Err(retry_after_ms)` (counted as
    /// `reason="locked"`) while either key is locked or its budget of
    /// guesses is taken by checks under way.
    pub(super) fn reserve_places(
        &self,
        ip: IpAddr,
        account: &[u8],
        now_ns: u64,
    ) -> Result<Places, u32> {
        let address = self.keyer.address(ip);
        let account = (self.listener == Listener::Subscriber).then(|| self.keyer.account(account));
        let refused = |retry| {
            self.stats.failed(FailReason::Locked);
            Err(retry)
        };
        if let Err(retry) = lock(&self.addresses).reserve(address, now_ns) {
            return refused(retry);
        }
        if let Some(key) = account {
            if let Err(retry) = lock(&self.accounts).reserve(key, now_ns) {
                lock(&self.addresses).release(address);
                return refused(retry);
            }
        }
        Ok(Places {
            ip,
            address,
            account,
        })
    }

    /// The guess matched: both keys' counts are cleared.
    pub(super) fn places_matched(&self, p: Places) {
        let mut addresses = lock(&self.addresses);
        addresses.release(p.address);
        addresses.success(p.address);
        drop(addresses);
        if let Some(key) = p.account {
            let mut accounts = lock(&self.accounts);
            accounts.release(key);
            accounts.success(key);
        }
    }

    /// The guess failed (`known`: the account exists): a counted failure
    /// per key, which may start lockouts (logged, counted).
    pub(super) fn places_failed(&self, p: Places, known: bool, now_ns: u64) {
        self.stats.failed(if known {
            FailReason::BadToken
        } else {
            FailReason::UnknownAccount
        });
        let by_ip = lock(&self.addresses).confirm(p.address, now_ns);
        let by_account = match p.account {
            Some(key) => lock(&self.accounts).confirm(key, now_ns),
            None => Failed::Counted,
        };
        for (scope, f) in [(Scope::Address, by_ip), (Scope::Account, by_account)] {
            if let Failed::Locked(ms) = f {
                self.stats.lockouts[scope as usize].fetch_add(1, Relaxed);
                let (listener, ip) = (self.listener.name(), p.ip);
                tracing::warn!(listener, scope = scope.name(), lock_ms = ms, %ip, "logon lockout");
            }
        }
    }

    /// The guess was never checked: its places are given back.
    pub(super) fn places_released(&self, p: Places) {
        lock(&self.addresses).release(p.address);
        if let Some(key) = p.account {
            lock(&self.accounts).release(key);
        }
    }

    /// Reserves a guess ([`AuthGuard::reserve`]'s rule) and holds it in
    /// a [`Reservation`] that can travel to a verifier thread.
    ///
    /// # Errors
    /// `retry_after_ms`: a key is locked or its budget is taken.
    pub fn reserve(
        self: &Arc<Self>,
        ip: IpAddr,
        account: &[u8],
        now_ns: u64,
    ) -> Result<Reservation, u32> {
        let places = self.reserve_places(ip, account, now_ns)?;
        Ok(Reservation {
            guard: self.clone(),
            places: Some(places),
        })
    }

    /// A check done in place (a clear token compared in constant time):
    /// reserved, run, settled. `Err(retry_after_ms)` when refused before
    /// `check` ran; otherwise whether it matched.
    ///
    /// # Errors
    /// As [`AuthGuard::reserve`].
    pub fn judge(
        &self,
        ip: IpAddr,
        account: &[u8],
        known: bool,
        now_ns: u64,
        check: impl FnOnce() -> bool,
    ) -> Result<bool, u32> {
        let places = self.reserve_places(ip, account, now_ns)?;
        let ok = check();
        if ok {
            self.places_matched(places);
        } else {
            self.places_failed(places, known, now_ns);
        }
        Ok(ok)
    }
}

/// One reserved guess (see the module docs). Settle it with
/// [`Reservation::matched`] or [`Reservation::failed`]; dropped, it is
/// released.
pub struct Reservation {
    guard: Arc<AuthGuard>,
    places: Option<Places>,
}

impl Reservation {
    /// The token matched: the address's and account's counts are cleared
    /// and the verification is cached for `account` against `stored`.
    pub fn matched(mut self, account: &str, stored: &str, token: &[u8], now_ns: u64) {
        if let Some(p) = self.places.take() {
            self.guard.places_matched(p);
        }
        lock(&self.guard.cache).insert(account, stored, token, now_ns);
    }

    /// The token did not match (`known`: the account exists): counted per
    /// address and account, which may start lockouts.
    pub fn failed(mut self, known: bool, now_ns: u64) {
        if let Some(p) = self.places.take() {
            self.guard.places_failed(p, known, now_ns);
        }
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if let Some(p) = self.places.take() {
            self.guard.places_released(p);
        }
    }
}

impl std::fmt::Debug for Reservation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reservation")
            .field("places", &self.places)
            .finish()
    }
}
