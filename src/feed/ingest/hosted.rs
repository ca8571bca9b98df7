//! The ingest listener as a task of a host thread (`--threading shared`:
//! gateway shard 0), which registers its sockets in its own poller.

use std::io;
use std::sync::atomic::Ordering;

use mio::{Interest, Registry, Token};

use super::{Ingest, LISTENER};
use crate::runtime::hosting::{DropSignal, Readiness};
use crate::runtime::HostedTask;

/// The ingest listener as a task of a host thread.
pub(super) struct HostedIngest {
    pub(super) ingest: Ingest,
    /// Dropped with the task: ends [`IngestHandle::stop`]'s wait.
    pub(super) _dropped: DropSignal,
}

impl HostedTask for HostedIngest {
    fn name(&self) -> &'static str {
        "ingest"
    }

    fn register(&mut self, registry: &Registry, token_base: usize) -> io::Result<()> {
        let i = &mut self.ingest;
        // Move the listener from the poller made at bind to the host's.
        i.registry.deregister(&mut i.listener)?;
        i.poll = None;
        i.registry = registry.try_clone()?;
        i.token_base = token_base;
        i.registry.register(
            &mut i.listener,
            Token(token_base + LISTENER.0),
            Interest::READABLE,
        )
    }

    fn on_event(&mut self, token: usize, ready: Readiness) {
        if !self.finished() {
            self.ingest.on_token(token, ready.closed);
        }
    }

    fn turn(&mut self, now_ns: u64) -> usize {
        if self.finished() {
            return 0;
        }
        let timers = self.ingest.check_timers() + self.ingest.drain_verdicts();
        let resumed = if self.ingest.held.is_empty() {
            0
        } else {
            self.ingest.resume_held()
        };
        // After this turn's events: every readable bridge was read.
        self.ingest.mark_progress(now_ns);
        timers + resumed
    }

    fn next_timer_ns(&self) -> Option<u64> {
        self.ingest.next_timer_ns()
    }

    fn between(&mut self, now_ns: u64) -> usize {
        if self.finished() {
            return 0;
        }
        // Read what active bridges sent since this turn's poll; a bridge
        // found empty costs one EAGAIN read, and is left to the poller
        // unless it is streaming (`Keepalive::streaming`).
        let (mut n, mut all) = (0, true);
        for i in 0..self.ingest.bridges.len() {
            match &self.ingest.bridges[i] {
                Some(b) if b.active => {
                    self.ingest.on_ready(i, true);
                    n += 1;
                }
                Some(_) => all = false,
                None => {}
            }
        }
        // Every bridge read: the mark moves on inside the host's long
        // turn; a quiet bridge waits for the poll, and so does the mark.
        if all {
            self.ingest.mark_progress(now_ns);
        }
        n
    }

    fn has_work(&self) -> bool {
        !self.ingest.held.is_empty() || self.finished()
    }

    fn finished(&self) -> bool {
        self.ingest.stop.load(Ordering::Relaxed)
    }
}
