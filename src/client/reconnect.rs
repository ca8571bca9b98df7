//! When to reconnect: a sans-IO policy over full-jitter exponential backoff.
//!
//! The policy holds no socket and reads no clock: the caller passes
//! `now_ns` and an RNG, so tests assert every delay deterministically
//! without sleeping. Delays are `max(retryAfterMs, uniform(0, min(cap,
//! base * 2^attempt)))` ([`Backoff`]): never a fixed delay, so a crowd of
//! clients dropped at the same instant spreads out, and the server's
//! `retryAfterMs` is honoured as a floor. The attempt counter grows with
//! every failure and only resets once a session has stayed up for
//! `stable_after_ms` — a server that accepts and drops at once still sees
//! the backoff grow. Retries are bounded by `attempts_max`.

use rand::Rng;

use super::event::DisconnectCause;
use crate::resilience::backoff::Backoff;
use crate::wire::{DisconnectReason, LogonRejectReason};

/// Default backoff window of the first reconnect, in ms.
pub const RECONNECT_BASE_MS_DEFAULT: u64 = 100;
/// Default largest backoff window, in ms.
pub const RECONNECT_CAP_MS_DEFAULT: u64 = 10_000;
/// Default consecutive failed attempts before the client gives up.
pub const RECONNECT_ATTEMPTS_MAX_DEFAULT: u32 = 10_000;
/// Default time a session must last before the attempt count resets.
pub const STABLE_AFTER_MS_DEFAULT: u64 = 10_000;

/// What the policy needs to know about a disconnect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DisconnectInfo {
    /// False when reconnecting cannot help (bad credentials, logout).
    pub retry: bool,
    /// The server's floor (0 = none).
    pub retry_after_ms: u32,
}

impl DisconnectInfo {
    /// Classifies a cause: auth failures and a logout are final; everything
    /// else (shutdown, slow consumer, busy, I/O, dead peer) is retried.
    pub fn new(cause: &DisconnectCause, retry_after_ms: u32) -> Self {
        let retry = match cause {
            DisconnectCause::Server { reason, .. } => {
                *reason != DisconnectReason::LOGOUT && *reason != DisconnectReason::AUTH
            }
            DisconnectCause::LogonRejected(r) => {
                *r != LogonRejectReason::AUTH && *r != LogonRejectReason::NOT_ENTITLED
            }
            _ => true,
        };
        DisconnectInfo {
            retry,
            retry_after_ms,
        }
    }
}

/// The reconnect state machine.
#[derive(Debug, Clone)]
pub struct ReconnectPolicy {
    backoff: Backoff,
    attempts_max: u32,
    stable_after_ns: u64,
    /// Consecutive attempts since the last stable session.
    attempt: u32,
    /// When the current session logged on, if one is up.
    connected_since_ns: Option<u64>,
}

impl ReconnectPolicy {
    /// A policy that gives up after `attempts_max` failed attempts in a row
    /// and forgets them once a session lasted `stable_after_ms`.
    ///
    /// # Panics
    ///
    /// If `backoff.base_ms` is 0 or above `backoff.cap_ms` (a caller bug;
    /// [`ClientConfig::validate`](super::ClientConfig::validate) refuses both).
    pub fn new(backoff: Backoff, attempts_max: u32, stable_after_ms: u64) -> Self {
        assert!(
            backoff.base_ms > 0,
            "a zero backoff base would reconnect in a tight loop"
        );
        assert!(
            backoff.base_ms <= backoff.cap_ms,
            "backoff base above its cap"
        );
        ReconnectPolicy {
            backoff,
            attempts_max,
            stable_after_ns: stable_after_ms.saturating_mul(1_000_000),
            attempt: 0,
            connected_since_ns: None,
        }
    }

    /// Consecutive attempts counted so far.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// A session logged on at `now_ns`.
    pub fn on_connected(&mut self, now_ns: u64) {
        self.connected_since_ns = Some(now_ns);
    }

    /// The delay before the next attempt in ms, or `None` when the client
    /// should not reconnect. Call once per disconnect or failed attempt.
    pub fn next_delay(
        &mut self,
        now_ns: u64,
        info: &DisconnectInfo,
        rng: &mut impl Rng,
    ) -> Option<u64> {
        if let Some(since) = self.connected_since_ns.take() {
            if now_ns.saturating_sub(since) >= self.stable_after_ns {
                self.attempt = 0;
            }
        }
        if !info.retry || self.attempt >= self.attempts_max {
            return None;
        }
        let delay = self
            .backoff
            .delay_ms(self.attempt, u64::from(info.retry_after_ms), rng);
        self.attempt += 1;
        Some(delay)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::{RngCore, SeedableRng};

    const MS: u64 = 1_000_000;

    fn io() -> DisconnectInfo {
        DisconnectInfo::new(&DisconnectCause::PeerClosed, 0)
    }

    /// An RNG that always draws 0: the bottom of every jitter window.
    struct Zero;
    impl RngCore for Zero {
        fn next_u32(&mut self) -> u32 {
            0
        }
        fn next_u64(&mut self) -> u64 {
            0
        }
        fn fill_bytes(&mut self, dest: &mut [u8]) {
            dest.fill(0);
        }
        fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rand::Error> {
            dest.fill(0);
            Ok(())
        }
    }

    #[test]
    fn delays_stay_inside_doubling_windows_up_to_the_cap() {
        let backoff = Backoff::new(100, 1_000);
        let mut p = ReconnectPolicy::new(backoff, 100, 10_000);
        let mut rng = SmallRng::seed_from_u64(42);
        for attempt in 0..8u32 {
            let d = p.next_delay(0, &io(), &mut rng).unwrap();
            assert!(d <= backoff.window_ms(attempt), "attempt {attempt}: {d}");
        }
        assert_eq!(p.attempt(), 8);
    }

    #[test]
    fn same_seed_same_delays_and_seeds_differ() {
        let run = |seed| {
            let mut p = ReconnectPolicy::new(Backoff::new(100, 10_000), 100, 10_000);
            let mut rng = SmallRng::seed_from_u64(seed);
            (0..6)
                .map(|_| p.next_delay(0, &io(), &mut rng).unwrap())
                .collect::<Vec<_>>()
        };
        assert_eq!(run(7), run(7), "deterministic under a seeded RNG");
        assert_ne!(run(7), run(8), "jittered: no fixed schedule");
        // Recompute the expected delays from the backoff arithmetic.
        let mut rng = SmallRng::seed_from_u64(7);
        let b = Backoff::new(100, 10_000);
        let expected: Vec<u64> = (0..6).map(|a| b.delay_ms(a, 0, &mut rng)).collect();
        assert_eq!(run(7), expected);
    }

    #[test]
    fn server_retry_after_is_a_floor() {
        let mut p = ReconnectPolicy::new(Backoff::new(100, 1_000), 100, 10_000);
        let busy = DisconnectInfo::new(
            &DisconnectCause::LogonRejected(LogonRejectReason::BUSY),
            2_350,
        );
        assert_eq!(
            p.next_delay(0, &busy, &mut Zero),
            Some(2_350),
            "floor above the cap"
        );
        let small = DisconnectInfo {
            retry: true,
            retry_after_ms: 5,
        };
        assert_eq!(p.next_delay(0, &small, &mut Zero), Some(5));
        let mut rng = SmallRng::seed_from_u64(1);
        for _ in 0..20 {
            assert!(p.next_delay(0, &small, &mut rng).unwrap() >= 5);
        }
    }

    #[test]
    fn auth_and_logout_are_final() {
        let mut p = ReconnectPolicy::new(Backoff::default(), 100, 10_000);
        let mut rng = SmallRng::seed_from_u64(1);
        let auth = DisconnectInfo::new(
            &DisconnectCause::LogonRejected(LogonRejectReason::AUTH),
            3_000,
        );
        assert_eq!(p.next_delay(0, &auth, &mut rng), None);
        let logout = DisconnectCause::Server {
            reason: DisconnectReason::LOGOUT,
            text: String::new(),
        };
        assert_eq!(
            p.next_delay(0, &DisconnectInfo::new(&logout, 0), &mut rng),
            None
        );
        let shutdown = DisconnectCause::Server {
            reason: DisconnectReason::SHUTDOWN,
            text: String::new(),
        };
        let info = DisconnectInfo::new(&shutdown, 1_500);
        assert!(p.next_delay(0, &info, &mut rng).unwrap() >= 1_500);
    }

    #[test]
    fn attempts_reset_only_after_a_stable_session() {
        let b = Backoff::new(100, 100_000);
        let mut p = ReconnectPolicy::new(b, 100, 10_000);
        let mut rng = SmallRng::seed_from_u64(3);
        for _ in 0..4 {
            p.next_delay(0, &io(), &mut rng);
        }
        // Logged on, dropped after 2 s: a flapping server, keep growing.
        p.on_connected(1_000 * MS);
        p.next_delay(3_000 * MS, &io(), &mut rng);
        assert_eq!(p.attempt(), 5);
        // Logged on, stayed up 10 s: the next window starts from base.
        p.on_connected(10_000 * MS);
        let d = p.next_delay(20_000 * MS, &io(), &mut rng).unwrap();
        assert!(d <= b.window_ms(0));
        assert_eq!(p.attempt(), 1);
    }

    #[test]
    fn attempts_are_bounded() {
        let mut p = ReconnectPolicy::new(Backoff::new(10, 100), 3, 10_000);
        let mut rng = SmallRng::seed_from_u64(5);
        let got: Vec<_> = (0..5)
            .map(|_| p.next_delay(0, &io(), &mut rng).is_some())
            .collect();
        assert_eq!(got, vec![true, true, true, false, false]);
    }
}
