//! The interface a feed thread polls: a [`TickSource`] fills a caller-owned
//! batch buffer, so polling allocates nothing. Synthetic feeds, FIX
//! sessions and capture replay implement it; the pipeline's feed threads turn them.

use crate::model::Tick;

/// What one poll of a source produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourcePoll {
    /// This many ticks were written to the front of the buffer.
    Ready(usize),
    /// Nothing now; poll again later.
    Idle,
    /// The source is exhausted (end of a capture); it will produce no more.
    Done,
}

/// A producer of ticks, polled by the feed thread.
pub trait TickSource: Send {
    /// Writes up to `out.len()` ticks into `out`. `now_ns` is the feed's
    /// monotonic clock; sources that pace themselves (synthetic, replay)
    /// decide from it how many ticks are due. The feed overwrites
    /// `receive_time_ns` after the poll unless the source says it keeps
    /// its own (see [`TickSource::keeps_receive_time`]).
    fn poll(&mut self, now_ns: u64, out: &mut [Tick]) -> SourcePoll;

    /// True for sources whose ticks already carry a meaningful receive time
    /// (a replayed capture keeps the recorded one). Default: false.
    fn keeps_receive_time(&self) -> bool {
        false
    }
}
