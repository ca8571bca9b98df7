//! The loop's rebalancing steps: closing a measurement window, and moving
//! a session off the shard that runs the engine when the spill
//! ([`super::spill::Spiller`]) or a drain ([`super::drain::Drainer`]) says
//! so. These steps call several parts of the shard in order: the ring is
//! drained (so the session has everything published so far) before the
//! [`super::moves::Mover`] hands the session over.

use super::drain::Window;
use super::moves::pick_mover;
use super::shard::Shard;
use super::spill;

impl Shard {
    /// Closes a measurement window: publishes this shard's busy share and,
    /// on the shard that hosts the engine, decides whether to move a
    /// session away.
    pub(super) fn measure(&mut self, now: u64) {
        let cpu = crate::runtime::sys::thread_cpu_ns();
        let Some(permille) = self.spiller.busy.roll(now, cpu) else {
            return;
        };
        self.conns.stats.busy_permille.set(u64::from(permille));
        let heaviest = self.drainer.take_window_requests(&mut self.conns);
        if self.hosts_engine() && self.spiller.policy.enabled() {
            // Request-heavy sessions leave first (see `drain.rs`).
            let w = Window {
                busy_permille: permille,
                request_share_permille: self.spiller.busy.request_share(),
                heaviest,
            };
            let closing = self.closing();
            if self
                .drainer
                .consider(&mut self.conns, &mut self.mover, w, closing, now)
            {
                self.spiller.to = None;
                return;
            }
            let sessions = self.conns.stats.connections.get();
            let policy = self.spiller.policy;
            self.spiller.to = policy.target(permille, sessions, self.mover.peer_loads());
        }
    }

    /// Moves one session if one is due (measured or asked for).
    pub(super) fn spill_step(&mut self, now: u64) {
        if !self.hosts_engine() || self.mover.shards() < 2 || self.closing() {
            self.spiller.cancel();
            return;
        }
        // Prices the engine holds for this shard's full ring reach the
        // ring only on a later turn, and a moved session would miss them:
        // move once they are through. (Held for another shard's ring, they
        // arrive there late and in order.)
        if self.input.fanout.parked.get() > 0 {
            return;
        }
        // Asked for: the other shard with the fewest sessions and room.
        let to = self
            .spiller
            .to
            .or_else(|| spill::fewest(self.mover.peer_loads()).map(|s| s.index));
        let moved = to.is_some_and(|to| self.spill_one(to, now));
        self.spiller.done(moved);
    }

    /// Hands one session to shard `to`. The engine publishes on this
    /// thread, so nothing is published while this runs, and every update
    /// stays in sequence:
    ///
    /// 1. this shard drains its own ring (with nothing held for it by the
    ///    engine, see `spill_step`): the session has everything published
    ///    so far; copies of it in `to`'s ring are dropped there by
    ///    sequence number (`deliver`);
    /// 2. `to`'s interest holds the session's symbols, so every later
    ///    price for them goes into `to`'s ring;
    /// 3. the session leaves this shard's index, poller and slab and goes
    ///    into `to`'s lane, with a slot reserved there; `to` attaches it
    ///    before it delivers any price it finds after that (see
    ///    `drain_prices`) and then lets go of the holds.
    ///
    /// Returns false if no session could move.
    pub(super) fn spill_one(&mut self, to: usize, now: u64) -> bool {
        let start = crate::clock::monotonic_ns();
        let moved = self.spill_one_paused(to, now);
        if moved {
            let pause = crate::clock::monotonic_ns().saturating_sub(start);
            self.conns.stats.move_pause.record(pause);
        }
        moved
    }

    /// [`Shard::spill_one`]'s steps, timed by it (the hand-over's pause).
    fn spill_one_paused(&mut self, to: usize, now: u64) -> bool {
        self.drain_ring(now);
        let Some(i) = pick_mover(&self.conns, now) else {
            return false;
        };
        if let Some(c) = self.conns.slab.conns[i].as_ref() {
            let (subs, account) = (c.subs.len(), c.account());
            let busy = self.conns.stats.busy_permille.get();
            let share = self.spiller.busy.request_share();
            tracing::debug!(
                shard = self.input.index,
                to,
                subs,
                ?account,
                busy,
                share,
                "spilling a session"
            );
        }
        let last_sweep = self.sweeps.last_ns;
        self.mover
            .move_slot(&mut self.conns, i, to, last_sweep, now)
    }

    /// Each turn while a drain runs: moves the held session once its
    /// answers are all in, or lets it go when the wait runs out, the move
    /// fails or the shard starts closing (see [`super::drain::Drain::step`]).
    pub(super) fn drain_step(&mut self, now: u64) {
        let parked = self.input.fanout.parked.get();
        let closing = self.closing();
        let Some(d) = self.drainer.step(&mut self.conns, parked, closing, now) else {
            return;
        };
        // Prices the engine published for this shard must be through
        // first (see `spill_step`).
        let start = crate::clock::monotonic_ns();
        self.drain_ring(now);
        let last_sweep = self.sweeps.last_ns;
        if self
            .mover
            .move_slot(&mut self.conns, d.slot, d.to, last_sweep, now)
        {
            let pause = crate::clock::monotonic_ns().saturating_sub(start);
            self.conns.stats.move_pause.record(pause);
            self.drainer.moved(&self.conns, d, now);
        } else {
            self.drainer.abort(&mut self.conns, d, now);
        }
    }

    /// Takes every price in this shard's ring (step 1 of a move).
    fn drain_ring(&mut self, now: u64) {
        while !self.input.consumer.is_empty() {
            self.drain_prices(now);
        }
    }

    /// Shard 0 sends no more sessions (it is stopping or disconnecting
    /// everyone): nothing more is to move, and the others may exit once
    /// their lanes are empty.
    pub(super) fn close_moves(&mut self) {
        self.spiller.cancel();
        self.mover.close();
    }
}
