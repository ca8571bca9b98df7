//! What a session was told to wait for, and what its peer did with it.
//!
//! The promise: **honouring a `Reject(rate_limited)` costs a client no
//! more than the window it was given, and ignoring one never pays.** A
//! refusal for the client's own rate (the connection's message rate, the
//! account's request rate, a staged admission rate) opens a *backoff
//! window* of its `retryAfterMs`. A message other than Heartbeat or
//! Logout that arrives inside the window is refused by the session
//! itself (no token spent, no work behind it), with the time left as its
//! retry-after:
//!
//! - within the *grace* after the refusal was sent (twice the peer's
//!   round trip, at least [`GRACE_MIN_NS`]: what the client sent before
//!   it could have read the refusal) it is only refused;
//! - after the grace it was sent by a client that had the refusal and
//!   ignored it: the window starts again from now, twice as long for each
//!   such message in a row (at most [`WINDOW_MAX_NS`]).
//!
//! "Arrives" is when the message began to wait for the shard, not when the
//! shard read it: input the server held (no room for its answers, see
//! `gateway::reads`) or left for a later turn is judged by the time it was
//! last served ([`Backoff::check_sent`]).
//!
//! Every refusal is a *strike*: a message the rate limit refuses, and a
//! message refused inside a window. A message that gets through ends the
//! run. More than `--flood-disconnect-after` strikes in a row end the
//! session with `Disconnect(message_flood)` and the error window's
//! jittered floor. A client that honours its windows never has more
//! strikes in a row than it had messages in flight when refused.
//!
//! Refusals for the server's state (`overloaded`, `busy`) open no window:
//! they are advice, and what the server sheds under overload it sheds
//! cheaply whoever asks (see docs/overload.md).
//!
//! Pure state on the time it is given; nothing allocates.

use crate::clock::NS_PER_MS;

/// Shortest grace after a refusal: a client's own turn to read it.
pub const GRACE_MIN_NS: u64 = 5 * NS_PER_MS;
/// Longest backoff window an escalation sets.
pub const WINDOW_MAX_NS: u64 = 5_000 * NS_PER_MS;

/// The backoff state of one session.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Backoff {
    /// End of the window the peer was told (monotonic ns; 0: none).
    until_ns: u64,
    /// When the last refusal that opened a window was sent.
    told_ns: u64,
    /// That refusal's window, ns (an escalation doubles from it).
    window_ns: u64,
    /// Refusals in a row (refused messages, inside a window or not).
    strikes: u32,
    /// Of those, messages sent inside a window after its grace.
    ignored: u32,
}

/// What [`Backoff::check`] decides for one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// Outside any window: the message goes on (to the rate limit).
    Pass,
    /// Inside the window: refused with this retry-after (ms).
    Refuse {
        /// Time left in the window, ms (at least 1).
        retry_ms: u32,
        /// Sent after the grace: counted as a strike.
        ignored: bool,
    },
}

impl Backoff {
    /// A refusal asking the peer to wait `retry_ms` was sent at `now_ns`.
    pub fn told(&mut self, retry_ms: u32, now_ns: u64) {
        if retry_ms == 0 {
            return;
        }
        self.window_ns = u64::from(retry_ms) * NS_PER_MS;
        self.until_ns = self.until_ns.max(now_ns.saturating_add(self.window_ns));
        self.told_ns = now_ns;
    }

    /// Judges a message (not Heartbeat or Logout) arriving at `now_ns`;
    /// `grace_ns`: see the module docs. An ignored window starts again
    /// from now, longer (the strike itself is the caller's to count, see
    /// [`Backoff::strike`]).
    pub fn check(&mut self, now_ns: u64, grace_ns: u64) -> Gate {
        self.check_sent(now_ns, now_ns, grace_ns)
    }

    /// [`Backoff::check`] for a message that has waited unread since
    /// `sent_by_ns` (the server held the input, or had not got round to
    /// it): whether it came after the grace is judged by that time, not by
    /// when the server read it, so a client is never taken to have ignored
    /// a refusal the server kept it from reading in time.
    pub fn check_sent(&mut self, now_ns: u64, sent_by_ns: u64, grace_ns: u64) -> Gate {
        if now_ns >= self.until_ns {
            return Gate::Pass;
        }
        let ignored = sent_by_ns.min(now_ns) >= self.told_ns.saturating_add(grace_ns);
        if ignored {
            // Twice the told window for the first ignored message in a
            // row, four times for the second, ...
            self.ignored = self.ignored.saturating_add(1);
            let shift = self.ignored.min(20);
            let window = self.window_ns.saturating_mul(1 << shift).min(WINDOW_MAX_NS);
            self.until_ns = self.until_ns.max(now_ns.saturating_add(window));
        }
        let left_ms = (self.until_ns - now_ns).div_ceil(NS_PER_MS).max(1);
        Gate::Refuse {
            retry_ms: u32::try_from(left_ms).unwrap_or(u32::MAX),
            ignored,
        }
    }

    /// One more refusal in a row; returns how many there are now.
    pub fn strike(&mut self) -> u32 {
        self.strikes = self.strikes.saturating_add(1);
        self.strikes
    }

    /// A message got through: the run of refusals ends.
    pub fn passed(&mut self) {
        self.strikes = 0;
        self.ignored = 0;
    }

    /// Refusals in a row now.
    pub fn strikes(&self) -> u32 {
        self.strikes
    }
}

/// The grace of a peer whose smoothed round trip is `rtt_ns` (0 when
/// unknown): see the module docs.
pub fn grace_ns(rtt_ns: u64) -> u64 {
    rtt_ns.saturating_mul(2).max(GRACE_MIN_NS)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = NS_PER_MS;

    #[test]
    fn input_the_server_kept_unread_is_judged_by_when_it_waited() {
        let mut b = Backoff::default();
        b.told(20, 100 * MS);
        // Read at 110 ms, past the grace, but waiting unread since 102 ms:
        // sent before the client could have read the refusal.
        let g = b.check_sent(110 * MS, 102 * MS, GRACE_MIN_NS);
        assert_eq!(
            g,
            Gate::Refuse {
                retry_ms: 10,
                ignored: false
            }
        );
        // Waiting since after the grace: ignored, the window doubled.
        let g = b.check_sent(111 * MS, 106 * MS, GRACE_MIN_NS);
        assert_eq!(
            g,
            Gate::Refuse {
                retry_ms: 40,
                ignored: true
            }
        );
    }

    #[test]
    fn no_window_passes_and_a_window_refuses_until_it_ends() {
        let mut b = Backoff::default();
        assert_eq!(b.check(10 * MS, GRACE_MIN_NS), Gate::Pass);
        b.told(20, 100 * MS);
        let g = b.check(101 * MS, GRACE_MIN_NS);
        assert_eq!(
            g,
            Gate::Refuse {
                retry_ms: 19,
                ignored: false
            }
        );
        assert_eq!(b.check(120 * MS, GRACE_MIN_NS), Gate::Pass);
    }

    #[test]
    fn a_message_after_the_grace_is_ignored_and_the_window_grows() {
        let mut b = Backoff::default();
        b.told(20, 0);
        // 6 ms after the refusal, past the 5-ms grace: ignored; the window
        // starts again, 40 ms from now.
        let g = b.check(6 * MS, GRACE_MIN_NS);
        assert_eq!(
            g,
            Gate::Refuse {
                retry_ms: 40,
                ignored: true
            }
        );
        assert_eq!(b.strike(), 1);
        // The next one ignored, two in a row: four times, 80 ms from now.
        let g = b.check(10 * MS, GRACE_MIN_NS);
        assert_eq!(
            g,
            Gate::Refuse {
                retry_ms: 80,
                ignored: true
            }
        );
        // Capped at WINDOW_MAX_NS, however many in a row.
        for k in 0..40 {
            b.check((12 + k) * MS, GRACE_MIN_NS);
        }
        let g = b.check(60 * MS, GRACE_MIN_NS);
        assert_eq!(
            g,
            Gate::Refuse {
                retry_ms: (WINDOW_MAX_NS / MS) as u32,
                ignored: true
            }
        );
    }

    #[test]
    fn a_passed_message_ends_the_run_of_strikes() {
        let mut b = Backoff::default();
        b.strike();
        b.strike();
        b.passed();
        assert_eq!(b.strikes(), 0);
    }

    #[test]
    fn grace_is_twice_the_round_trip_at_least_the_minimum() {
        assert_eq!(grace_ns(0), GRACE_MIN_NS);
        assert_eq!(grace_ns(30 * MS), 60 * MS);
    }
}
