//! The shard's unwind boundary around one connection's work
//! (docs/design.md, "Fault isolation"): reading and decoding its bytes
//! (TLS records included) and the session logic they drive — logon,
//! subscribe, requests — ([`Shard::contained`]), a write of its outbound
//! buffer ([`Conns::contained`]), its timers in the sweep, its logon
//! verdict. A fault closes that connection alone and the shard goes on.
//!
//! What a fault discards: the connection (slab slot, poller
//! registration, buffers, session), its subscriptions (taken out of the
//! index, the pacer and the symbol interest as at any close), its
//! logged-on account slot and per-IP slot; a logon at the verifier or a
//! request at the workers comes back to a slot whose ticket or session no
//! longer matches and is dropped, as after any close; the shard's scratch
//! the fault may have left taken (the frame buffer) is given back.
//!
//! Why nothing shared is left half-updated, per structure:
//! - the **slab** and its read and write lists change only in `put`,
//!   `take` and `queue_*`, each whole (plain stores into preallocated
//!   vectors), never across code a peer's bytes steer; the lists being
//!   walked when the fault came are put back by the loop that took them;
//! - the **subscription index, pacer, per-symbol counts and symbol
//!   interest** change only inside `Fanout::mutate`: a fault inside one
//!   poisons the fan-out state and is not contained (below); a fault
//!   outside leaves them whole, and the close takes the connection's
//!   subscriptions out exactly as a normal close does (debug builds check
//!   the whole index against every connection's list after it);
//! - the **request ports** push whole messages (an SPSC ring; the
//!   per-account share is given back if the push fails) and the answer
//!   rings are only read here;
//! - **admission** and the **lockout tables** are shared with the acceptor
//!   and the other shards behind locks: a fault that poisoned one is not
//!   contained.
//!
//! Not contained — the shard panics again outside the boundary and the
//! supervisor takes the process down — when the fan-out state, the
//! admission table or a lockout table is poisoned: continuing could send
//! a price to a connection that never subscribed, or admit past a limit.

use super::conns::Conns;
use super::shard::Shard;
use super::GatewayStats;
use crate::runtime::contain::{contain, Fault, FaultLog};

/// The shards' thinned fault log.
static SHARD_FAULTS: FaultLog = FaultLog::new();

impl Conns {
    /// Runs `f`, connection `i`'s work on the connection set, inside its
    /// boundary; a fault discards the connection.
    pub(super) fn contained(&mut self, i: usize, f: impl FnOnce(&mut Conns)) {
        if let Err(fault) = contain(|| f(self)) {
            self.discard_faulted(i, &fault);
        }
    }

    /// After a fault in connection `i`'s work: escalates if shared state is
    /// poisoned, else closes the connection and counts and logs the fault.
    pub(super) fn discard_faulted(&mut self, i: usize, fault: &Fault) {
        let poisoned = if self.fanout.is_poisoned() {
            Some("the subscription index")
        } else if self.shared.admission.is_poisoned() {
            Some("the admission table")
        } else if self.shared.auth.is_poisoned() {
            Some("the lockout tables")
        } else {
            None
        };
        if let Some(what) = poisoned {
            panic!("a connection's fault left {what} half-updated: {fault}");
        }
        let peer = self
            .slab
            .conns
            .get(i)
            .and_then(Option::as_ref)
            .map(|c| c.peer);
        // Counted before the close: a peer that sees its connection end
        // finds the fault on /metrics.
        GatewayStats::add(&self.shared.stats.faults_shard, 1);
        self.close_now(i);
        debug_assert_eq!(self.fanout.check(&self.slab), Ok(()));
        let shown = peer.map_or_else(|| "unknown".to_string(), |p| p.to_string());
        SHARD_FAULTS.report("shard", &shown, fault);
    }
}

impl Shard {
    /// Runs `f`, connection `i`'s work on the shard (its reads, frames and
    /// handlers, its timers), inside its boundary; a fault discards the
    /// connection and gives back the scratch it may have held.
    pub(super) fn contained(&mut self, i: usize, f: impl FnOnce(&mut Shard)) {
        let Err(fault) = contain(|| f(self)) else {
            return;
        };
        if self.frame.is_empty() {
            // Taken by `process_frames` when the fault came.
            let len = self.conns.shared.cfg.max_frame_bytes;
            self.frame = vec![0u8; len].into_boxed_slice();
        }
        self.subscribing.restore();
        self.conns.discard_faulted(i, &fault);
    }
}
