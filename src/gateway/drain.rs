//! Draining a request-heavy session off a busy shard 0 (`--threading
//! shared`).
//!
//! With shared threading shard 0 also runs the engine, so every request a
//! session on shard 0 sends is read, handed over and answered on the
//! engine's thread. The spill (`spill.rs`) moves sessions off a busy shard
//! 0, but only sessions with no request answer on its way
//! (`moves::pick_mover`: an answer is routed to the shard and slot that
//! asked), and a flooding session always has answers on their way: in the
//! storm drill the spill moved the price subscriber away and left the
//! flood with the engine.
//!
//! A draining move gets such a session off. At the end of a measurement
//! window in which shard 0 was busy (at least
//! [`DrainPolicy::busy_permille`] of its wall time) and spent at least
//! [`DrainPolicy::request_share_permille`] of that on request work, the
//! session that sent the most requests in the window
//! (at least [`DrainPolicy::min_requests`]) is *held*: its socket is no
//! longer read, so its bytes wait there and TCP pushes back on the peer;
//! no deadline counts against it while held (its idle, logon and frame
//! deadlines move out by the time held). Once its last answer has been
//! copied into its outbound buffer (`requests_out == 0`) it moves through
//! the lane like any other session (`Mover::move_slot`: gap-free, a slot
//! reserved there), outbound bytes and all, and the receiving shard reads
//! it. If the answers have not all come within [`DrainPolicy::wait_ns`],
//! or the move finds no room, the hold ends, the session is read again
//! where it is, and the drain counts as aborted. One drain runs at a time,
//! at most one starts per window; `--shard0-spill-pct 0` turns drains off
//! with the spill.
//!
//! Request-heavy sessions go first: while a drain is under way, or shard 0
//! is at the drain's busy and request-share marks, the spill moves no
//! subscriber, so the price subscribers stay with the engine
//! (a price to them crosses no thread) and the flood leaves instead. Once
//! the flood is gone and shard 0 is still busy, the spill evens the
//! sessions out as before. Counted by outcome in `pricewire_session_drains_total`
//! (and, when moved, in `pricewire_sessions_moved_total`).

use super::conns::Conns;
use super::moves::Mover;
use super::spill;
use super::SettingsError;

/// When shard 0 drains a request-heavy session, and how long it waits for
/// the session's answers. Decisions take the time as an argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DrainPolicy {
    /// Busy share of shard 0's wall time, per-mille, at or above which it
    /// drains (below the spill's default 50 %: a flood that keeps the
    /// engine's thread a fifth busy already delays its prices).
    pub(crate) busy_permille: u32,
    /// Requests a session must have sent in the window (50 ms) to be
    /// drained: 32, i.e. about 640 requests/s.
    pub(crate) min_requests: u32,
    /// Share of shard 0's busy time spent on request work (reading
    /// sessions' input, copying answers), per-mille, at or above which it
    /// drains.
    pub(crate) request_share_permille: u32,
    /// Longest a held session waits for its answers (well inside a
    /// request's deadline budget; a held peer's own requests wait in its
    /// socket meanwhile).
    pub(crate) wait_ns: u64,
}

impl DrainPolicy {
    /// The policy every shard runs with unless the flags say otherwise.
    pub(crate) const DEFAULT: DrainPolicy = DrainPolicy {
        busy_permille: 200,
        min_requests: 32,
        request_share_permille: 250,
        wait_ns: 500_000_000,
    };

    /// The policy of `cfg`'s `drain_*` settings, or the flag whose value
    /// is out of range: busy and request share 1..=1000 per-mille (a
    /// whole per cent on the command line), the request count
    /// 1..=100000, the wait 1..=5000 ms.
    pub(crate) fn from_config(cfg: &super::GatewayConfig) -> Result<DrainPolicy, SettingsError> {
        let pct = |flag: &'static str, permille: u32| {
            if (1..=1000).contains(&permille) {
                Ok(permille)
            } else {
                Err(SettingsError::range(flag, "1..=100"))
            }
        };
        let p = DrainPolicy {
            busy_permille: pct("--shard0-drain-busy-pct", cfg.drain_busy_permille)?,
            request_share_permille: pct(
                "--shard0-drain-request-share-pct",
                cfg.drain_request_share_permille,
            )?,
            min_requests: cfg.drain_min_requests,
            wait_ns: cfg.drain_abort_ms.saturating_mul(1_000_000),
        };
        if !(1..=100_000).contains(&p.min_requests) {
            return Err(SettingsError::range(
                "--shard0-drain-min-requests",
                "1..=100000",
            ));
        }
        if !(1..=5_000).contains(&cfg.drain_abort_ms) {
            return Err(SettingsError::range("--shard0-drain-abort-ms", "1..=5000"));
        }
        Ok(p)
    }

    /// Whether a shard `busy` per-mille busy, which spent `request_share`
    /// per-mille of its busy time on request work and whose heaviest
    /// session sent `heaviest` requests in the window, starts a drain.
    pub(crate) fn due(&self, busy: u32, request_share: u32, heaviest: u32) -> bool {
        busy >= self.busy_permille
            && request_share >= self.request_share_permille
            && heaviest >= self.min_requests
    }

    /// A session's run of heavy windows after one in which it sent `n`
    /// requests, having been heavy `streak` windows in a row before it.
    pub(crate) fn streak(&self, streak: u8, n: u32) -> u8 {
        if n >= self.min_requests {
            streak.saturating_add(1)
        } else {
            0
        }
    }

    /// Whether a session heavy `streak` windows in a row, with
    /// `requests_out` requests unanswered now, floods: heavy in this window
    /// with several requests in flight at once (it pipelines), or heavy
    /// [`HEAVY_WINDOWS`] in a row (a sustained requester), not one burst of
    /// one request at a time.
    pub(crate) fn flooding(streak: u8, requests_out: u32) -> bool {
        streak >= HEAVY_WINDOWS || (streak >= 1 && requests_out >= 2)
    }

    /// Whether a hold that started at `since_ns` has run out at `now_ns`.
    pub(crate) fn expired(&self, since_ns: u64, now_ns: u64) -> bool {
        now_ns.saturating_sub(since_ns) >= self.wait_ns
    }
}

/// Windows in a row a session that never has two requests in flight must
/// reach the request count in to be drained. One is not enough: a client
/// that paces its requests one at a time and catches up after a stall of
/// its own (or of the host) sends a burst that fills one window. In the
/// storm drill the quiet account sent 62 in a window after a stall and was
/// drained in the baseline; the flood's sessions pipeline (30–48 in
/// flight) and are drained from their first heavy window.
pub(crate) const HEAVY_WINDOWS: u8 = 2;

/// The slot and count of the candidate with the most requests, ties to the
/// higher slot; `None` if there is no candidate.
pub(crate) fn heaviest(candidates: impl Iterator<Item = (usize, u32)>) -> Option<(usize, u32)> {
    candidates.fold(None, |best, (i, n)| match best {
        Some((_, m)) if m > n => best,
        _ => Some((i, n)),
    })
}

/// A draining move under way: the held session's slot, the shard it goes
/// to, and when the hold started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Drain {
    pub(crate) slot: usize,
    pub(crate) to: usize,
    pub(crate) since_ns: u64,
    /// When the last turn of the hold looked at it: a hold that ends long
    /// after its wait shows here whether the shard's turns came late.
    pub(crate) seen_ns: u64,
}

/// The held session as a turn of the drain sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Held {
    /// Still in the slot and still held (not closed, not replaced).
    pub(crate) present: bool,
    /// Logged on and not closing.
    pub(crate) active: bool,
    /// Its requests with the request path, answers not yet copied.
    pub(crate) requests_out: u32,
    /// Prices the engine holds for this shard's full ring.
    pub(crate) parked: u64,
    /// The shard is stopping or disconnecting everyone.
    pub(crate) closing: bool,
}

/// What a drain does in one turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DrainStep {
    /// Keep holding: answers on their way, time left.
    Hold,
    /// Every answer is in: move it now (a failed move is an abort).
    Move,
    /// The wait ran out: read it where it is, counted as aborted.
    Abort,
    /// The shard is closing or the session ending: read it where it is,
    /// not counted (no move was possible).
    Release,
    /// The session closed while held: nothing to let go of.
    Gone,
}

impl Drain {
    /// This turn's step at `now_ns` under `policy`, for the held session
    /// as `held` describes it. Answers all in move it even past the wait
    /// (a turn that came late must not abort a session ready to go).
    pub(crate) fn step(&self, policy: &DrainPolicy, held: Held, now_ns: u64) -> DrainStep {
        if !held.present {
            DrainStep::Gone
        } else if held.closing || !held.active {
            DrainStep::Release
        } else if held.requests_out == 0 && held.parked == 0 {
            DrainStep::Move
        } else if policy.expired(self.since_ns, now_ns) {
            DrainStep::Abort
        } else {
            DrainStep::Hold
        }
    }
}

/// A closed measurement window as a drain decision sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Window {
    /// Busy share of the shard's wall time, per-mille.
    pub(crate) busy_permille: u32,
    /// Share of that busy time spent on request work, per-mille.
    pub(crate) request_share_permille: u32,
    /// The heaviest flooding session (slot, requests in the window).
    pub(crate) heaviest: Option<(usize, u32)>,
}

/// The shard's draining moves: the policy and the drain under way.
pub(super) struct Drainer {
    policy: DrainPolicy,
    /// The draining move under way, if any.
    under_way: Option<Drain>,
}

impl Drainer {
    pub(super) fn new(policy: DrainPolicy) -> Drainer {
        Drainer {
            policy,
            under_way: None,
        }
    }

    /// A drain is under way.
    pub(super) fn is_active(&self) -> bool {
        self.under_way.is_some()
    }

    /// Ends the measurement window of every session's request count: the
    /// heaviest logged-on session not already held that floods (see
    /// [`DrainPolicy::flooding`]; slot, requests in this window).
    pub(super) fn take_window_requests(&self, conns: &mut Conns) -> Option<(usize, u32)> {
        let p = self.policy;
        let live = &mut conns.slab.conns[..conns.slab.live_end];
        heaviest(live.iter_mut().enumerate().filter_map(|(i, c)| {
            let c = c.as_mut()?;
            let n = std::mem::take(&mut c.window_requests);
            c.heavy_windows = p.streak(c.heavy_windows, n);
            let flooding = DrainPolicy::flooding(c.heavy_windows, c.requests_out);
            (c.is_active() && !c.is_held() && flooding).then_some((i, n))
        }))
    }

    /// At the end of a window on the shard that runs the engine: holds the
    /// heaviest session if the policy says so and a shard has room
    /// (`closing`: the shard is stopping or disconnecting everyone).
    /// Returns whether request work is what keeps shard 0 busy (a drain
    /// under way, or busy and request share at the policy's marks): the
    /// spill then waits, as moving a subscriber would not relieve it.
    pub(super) fn consider(
        &mut self,
        conns: &mut Conns,
        mover: &mut Mover,
        w: Window,
        closing: bool,
        now: u64,
    ) -> bool {
        if self.under_way.is_some() {
            return true;
        }
        if closing || mover.shards() < 2 {
            return false;
        }
        let (busy, share) = (w.busy_permille, w.request_share_permille);
        let p = self.policy;
        let requests_heavy = busy >= p.busy_permille && share >= p.request_share_permille;
        let Some((slot, n)) = w.heaviest.filter(|&(_, n)| p.due(busy, share, n)) else {
            return requests_heavy;
        };
        let Some(to) = spill::fewest(mover.peer_loads()).map(|s| s.index) else {
            return requests_heavy;
        };
        let Some(conn) = conns.slab.conns[slot].as_mut() else {
            return requests_heavy;
        };
        conn.hold(now);
        conn.in_read_list = false;
        let (out, account) = (conn.requests_out, conn.account());
        conns.slab.read_list.retain(|&k| k as usize != slot);
        self.under_way = Some(Drain {
            slot,
            to,
            since_ns: now,
            seen_ns: now,
        });
        let shard = conns.index();
        tracing::debug!(
            shard,
            slot,
            ?account,
            to,
            n,
            busy,
            share,
            out,
            "draining a session"
        );
        true
    }

    /// Each turn while a drain runs: lets the held session go when the
    /// wait runs out or the shard starts closing (see [`Drain::step`]),
    /// `parked`: prices the engine holds for this shard's full ring.
    /// Returns the drain whose session is to move now: the caller drains
    /// its ring, moves it, and calls [`Drainer::moved`] or
    /// [`Drainer::abort`].
    pub(super) fn step(
        &mut self,
        conns: &mut Conns,
        parked: u64,
        closing: bool,
        now: u64,
    ) -> Option<Drain> {
        let d = self.under_way?;
        let conn = conns.slab.conns[d.slot].as_ref().filter(|c| c.is_held());
        let held = Held {
            present: conn.is_some(),
            active: conn.is_some_and(|c| c.is_active()),
            requests_out: conn.map_or(0, |c| c.requests_out),
            parked,
            closing,
        };
        let step = d.step(&self.policy, held, now);
        let held_us = now.saturating_sub(d.since_ns) / 1_000;
        match step {
            DrainStep::Hold => {
                self.under_way = Some(Drain { seen_ns: now, ..d });
                return None;
            }
            DrainStep::Gone => {
                // Closed while held (its slot free or taken by a new session).
                tracing::debug!(shard = conns.index(), held_us, "drained session closed");
            }
            DrainStep::Release => release_hold(conns, d.slot, now),
            DrainStep::Move => {
                self.under_way = None;
                return Some(d);
            }
            DrainStep::Abort => self.abort(conns, d, now),
        }
        self.under_way = None;
        None
    }

    /// The drained session `d` moved.
    pub(super) fn moved(&self, conns: &Conns, d: Drain, now: u64) {
        conns.stats.drains_moved.inc();
        let held_us = now.saturating_sub(d.since_ns) / 1_000;
        // The gap since the hold's last turn: a hold far past its wait
        // with a gap as long came from a late turn (a stalled thread).
        let gap_us = now.saturating_sub(d.seen_ns) / 1_000;
        let (shard, to) = (conns.index(), d.to);
        tracing::debug!(shard, held_us, gap_us, to, "drained session moved");
    }

    /// Ends a hold without a move: the session is read where it is.
    pub(super) fn abort(&mut self, conns: &mut Conns, d: Drain, now: u64) {
        let held_us = now.saturating_sub(d.since_ns) / 1_000;
        let out = conns.slab.conns[d.slot]
            .as_ref()
            .map_or(0, |c| c.requests_out);
        tracing::debug!(shard = conns.index(), held_us, out, "drain aborted");
        release_hold(conns, d.slot, now);
        conns.stats.drains_aborted.inc();
    }
}

/// Ends the hold on slot `i` (if still held) and reads it next turn.
fn release_hold(conns: &mut Conns, i: usize, now: u64) {
    if let Some(c) = conns.slab.conns[i].as_mut().filter(|c| c.is_held()) {
        c.unhold(now);
        conns.slab.queue_read(i);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn a_drain_is_due_only_on_a_busy_shard_doing_mostly_requests_for_a_heavy_session() {
        let p = DrainPolicy::DEFAULT;
        assert!(p.due(200, 250, 32));
        assert!(p.due(1000, 1000, 5000));
        assert!(!p.due(199, 1000, 5000), "shard 0 not busy enough");
        assert!(!p.due(900, 249, 5000), "its work is mostly not requests");
        assert!(!p.due(900, 1000, 31), "no session sends enough");
        // A quiet tenant's 200 requests/s are 10 a window: never drained.
        assert!(!p.due(1000, 1000, 10));
    }

    #[test]
    fn a_catch_up_burst_is_not_drained_a_flood_is() {
        let p = DrainPolicy::DEFAULT;
        // (requests in the window, requests in flight at its end)
        let run = |windows: &[(u32, u32)]| {
            let mut streak = 0;
            windows
                .iter()
                .map(|&(n, out)| {
                    streak = p.streak(streak, n);
                    DrainPolicy::flooding(streak, out)
                })
                .collect::<Vec<_>>()
        };
        // The drill's quiet account, one at a time: 10 a window, 62 after
        // a stall.
        assert_eq!(run(&[(10, 1), (62, 1), (9, 0), (10, 1)]), [false; 4]);
        // Two such bursts with a quiet window between: still no.
        assert_eq!(run(&[(40, 1), (3, 0), (40, 0)]), [false; 3]);
        // The flood pipelines: drained from its first heavy window.
        assert_eq!(run(&[(480, 40), (496, 33)]), [true, true]);
        // Many in flight but few sent is no flood.
        assert_eq!(run(&[(20, 48)]), [false]);
        // One at a time but fast and sustained: from its second window.
        assert_eq!(run(&[(480, 1), (496, 0)]), [false, true]);
        // Exactly at the count counts; one below ends the run.
        let at = [(32, 0), (32, 0), (31, 0), (32, 0)];
        assert_eq!(run(&at), [false, true, false, false]);
    }

    #[test]
    fn a_hold_runs_out_after_the_wait_measured_from_its_start() {
        let p = DrainPolicy {
            wait_ns: 500 * MS,
            ..DrainPolicy::DEFAULT
        };
        let start = 7_000 * MS;
        assert!(!p.expired(start, start));
        assert!(!p.expired(start, start + 499 * MS));
        assert!(p.expired(start, start + 500 * MS));
        // A clock read before the start (another thread's) is no expiry.
        assert!(!p.expired(start, start - MS));
    }

    const HELD: Held = Held {
        present: true,
        active: true,
        requests_out: 3,
        parked: 0,
        closing: false,
    };

    #[test]
    fn a_hold_whose_answers_do_not_come_is_aborted_at_the_wait_by_the_given_clock() {
        let p = DrainPolicy {
            wait_ns: 500 * MS,
            ..DrainPolicy::DEFAULT
        };
        let d = Drain {
            slot: 4,
            to: 1,
            since_ns: 10_000 * MS,
            seen_ns: 10_000 * MS,
        };
        // Answers on their way: held until the wait runs out, not a
        // nanosecond longer, then aborted.
        for t in [0, 1, 250, 499] {
            assert_eq!(
                d.step(&p, HELD, d.since_ns + t * MS),
                DrainStep::Hold,
                "{t} ms"
            );
        }
        assert_eq!(d.step(&p, HELD, d.since_ns + 500 * MS), DrainStep::Abort);
        // A turn that comes 2.6 s late still aborts, it does not hold on.
        assert_eq!(d.step(&p, HELD, d.since_ns + 2_600 * MS), DrainStep::Abort);
        // Prices parked for this shard's ring hold the move back like
        // answers do, and run out the same way.
        let parked = Held {
            requests_out: 0,
            parked: 2,
            ..HELD
        };
        assert_eq!(d.step(&p, parked, d.since_ns + 10 * MS), DrainStep::Hold);
        assert_eq!(d.step(&p, parked, d.since_ns + 500 * MS), DrainStep::Abort);
    }

    #[test]
    fn a_hold_with_its_answers_in_moves_even_past_the_wait() {
        let p = DrainPolicy::DEFAULT;
        let d = Drain {
            slot: 0,
            to: 1,
            since_ns: 0,
            seen_ns: 0,
        };
        let ready = Held {
            requests_out: 0,
            ..HELD
        };
        assert_eq!(d.step(&p, ready, 0), DrainStep::Move);
        assert_eq!(d.step(&p, ready, 10_000 * MS), DrainStep::Move);
    }

    #[test]
    fn a_closing_shard_or_session_releases_and_a_closed_one_is_gone() {
        let p = DrainPolicy::DEFAULT;
        let d = Drain {
            slot: 0,
            to: 1,
            since_ns: 0,
            seen_ns: 0,
        };
        let closing = Held {
            closing: true,
            requests_out: 0,
            ..HELD
        };
        assert_eq!(d.step(&p, closing, MS), DrainStep::Release);
        let ending = Held {
            active: false,
            ..HELD
        };
        assert_eq!(d.step(&p, ending, MS), DrainStep::Release);
        let gone = Held {
            present: false,
            ..HELD
        };
        assert_eq!(d.step(&p, gone, 900 * MS), DrainStep::Gone);
    }

    #[test]
    fn the_policy_comes_from_the_gateway_settings_checked() {
        let mut cfg = crate::gateway::GatewayConfig::default();
        assert_eq!(DrainPolicy::from_config(&cfg), Ok(DrainPolicy::DEFAULT));
        cfg.drain_abort_ms = 250;
        cfg.drain_min_requests = 8;
        let p = DrainPolicy::from_config(&cfg).unwrap();
        assert_eq!((p.wait_ns, p.min_requests), (250 * MS, 8));
        cfg.drain_abort_ms = 0;
        let e = cfg.validate().unwrap_err();
        assert_eq!(e.flag(), "--shard0-drain-abort-ms");
        assert_eq!(e.to_string(), "--shard0-drain-abort-ms: 1..=5000");
    }

    #[test]
    fn the_heaviest_session_is_picked_ties_to_the_higher_slot() {
        assert_eq!(heaviest(std::iter::empty()), None);
        assert_eq!(heaviest([(0, 5)].into_iter()), Some((0, 5)));
        assert_eq!(
            heaviest([(0, 5), (3, 90), (4, 12)].into_iter()),
            Some((3, 90))
        );
        assert_eq!(heaviest([(1, 9), (2, 9)].into_iter()), Some((2, 9)));
        assert_eq!(heaviest([(1, 0), (2, 0)].into_iter()), Some((2, 0)));
    }
}
