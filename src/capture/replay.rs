//! Replay: a capture as a [`TickSource`], paced from its receive times.
//!
//! At `1x` every tick is released when as much time has passed since the
//! first tick's release as passed between their recorded receive times; at
//! `Nx` that gap is divided by N; at `max` ticks come as fast as the feed
//! polls. Pacing reads only the `now_ns` the feed passes in, so tests drive
//! it with a manual clock. Reading is the constant-memory
//! [`CaptureReader`]; the source holds one tick of look-ahead.
//!
//! Receive times are monotonic per recording process, so a capture that
//! spans a restart jumps backwards; a jump of more than
//! [`REANCHOR_BACKWARD_NS`] re-anchors pacing at the tick that jumped.
//!
//! Receive time: [`ReplaySource::keeps_receive_time`] is `false`. The feed
//! re-stamps each tick when it pushes it, so latency measured from
//! `receive_time_ns` (feed → engine → gateway) is that of the replaying
//! process, which is what a replay benchmark wants. The recorded receive
//! time only drives pacing; the provider time is kept exactly as recorded.
//! (The source itself stamps `receive_time_ns = now_ns` as well, so a
//! caller without a feed gets the same meaning.)

use std::path::PathBuf;
use std::str::FromStr;

use super::reader::{CaptureReader, ReaderOptions, StopPoint};
use super::CaptureError;
use crate::model::Tick;
use crate::runtime::{SourcePoll, TickSource};

/// A receive time this far before the pacing anchor starts a new anchor:
/// it comes from another recording session (another process's clock).
pub const REANCHOR_BACKWARD_NS: u64 = 1_000_000_000;

/// How fast to replay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplaySpeed {
    /// Recorded gaps divided by `milli / 1000` (`1000` is real time).
    Scaled {
        /// Speed in thousandths: `10_000` is `10x`, `500` is half speed.
        milli: u32,
    },
    /// As fast as the consumer polls.
    Max,
}

impl ReplaySpeed {
    /// Real time: the recorded gaps as they were (`1x`).
    pub const REALTIME: ReplaySpeed = ReplaySpeed::Scaled { milli: 1000 };

    /// Replay offset of a tick recorded `elapsed_ns` after the first one.
    #[inline]
    fn scale(self, elapsed_ns: u64) -> Option<u64> {
        match self {
            ReplaySpeed::Max => None,
            ReplaySpeed::Scaled { milli } => {
                Some((u128::from(elapsed_ns) * 1000 / u128::from(milli.max(1))) as u64)
            }
        }
    }
}

impl FromStr for ReplaySpeed {
    type Err = String;

    /// `max`, or a factor with an `x`: `1x`, `10x`, `0.5x` (3 decimals at most).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        if t.eq_ignore_ascii_case("max") {
            return Ok(ReplaySpeed::Max);
        }
        let bad = || format!("invalid speed {s:?}: expected 1x, Nx (e.g. 10x, 0.5x) or max");
        let num = t.strip_suffix(['x', 'X']).ok_or_else(bad)?;
        let milli = crate::model::price::parse_price(num, 3).map_err(|_| bad())?;
        match u32::try_from(milli) {
            Ok(m) if m > 0 => Ok(ReplaySpeed::Scaled { milli: m }),
            _ => Err(bad()),
        }
    }
}

impl std::fmt::Display for ReplaySpeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReplaySpeed::Max => f.write_str("max"),
            ReplaySpeed::Scaled { milli } => write!(
                f,
                "{}x",
                crate::model::FixedPrice(i64::from(*milli), 3)
                    .to_string()
                    .trim_end_matches('0')
                    .trim_end_matches('.')
            ),
        }
    }
}

/// What a replay covered.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplaySummary {
    /// Ticks released to the consumer.
    pub ticks: u64,
    /// Recorded receive-time span of the ticks read.
    pub span_ns: u64,
    /// The first segment that was cut short, if any: where it stopped.
    pub stopped_at: Option<StopPoint>,
    /// Every segment cut short.
    pub truncated: Vec<StopPoint>,
    /// Damaged records skipped.
    pub corrupt_count: u64,
    /// Why the replay ended early, if it did.
    pub error: Option<String>,
}

impl std::fmt::Display for ReplaySummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "replayed {} ticks spanning {:.3} s",
            self.ticks,
            self.span_ns as f64 / 1e9
        )?;
        if self.corrupt_count > 0 {
            write!(f, "; skipped {} damaged records", self.corrupt_count)?;
        }
        for stop in &self.truncated {
            write!(f, "\n  {stop}")?;
        }
        if let Some(e) = &self.error {
            write!(f, "\n  ended early: {e}")?;
        }
        Ok(())
    }
}

/// A capture replayed as a tick source.
pub struct ReplaySource {
    reader: CaptureReader,
    speed: ReplaySpeed,
    pending: Option<Tick>,
    /// (replay time of the first release, its recorded receive time).
    anchor: Option<(u64, u64)>,
    /// Highest recorded receive time since the anchor.
    max_recv_ns: u64,
    done: bool,
    released: u64,
    error: Option<String>,
    /// Keep each tick's recorded receive time instead of re-stamping it.
    keep_recorded: bool,
}

impl ReplaySource {
    /// Opens `inputs` (segment files or capture directories).
    pub fn open(
        inputs: &[PathBuf],
        speed: ReplaySpeed,
        opts: ReaderOptions,
    ) -> Result<Self, CaptureError> {
        Ok(ReplaySource::new(CaptureReader::open(inputs, opts)?, speed))
    }

    /// Replays `reader` at `speed`; pacing starts at the first tick released.
    pub fn new(reader: CaptureReader, speed: ReplaySpeed) -> Self {
        ReplaySource {
            reader,
            speed,
            pending: None,
            anchor: None,
            max_recv_ns: 0,
            done: false,
            released: 0,
            error: None,
            keep_recorded: false,
        }
    }

    /// Releases ticks with their recorded receive times (for a consumer
    /// that drives its own time from them, `pipeline::determ`).
    pub fn keep_recorded_times(&mut self) {
        self.keep_recorded = true;
    }

    /// The reader (for its headers).
    pub fn reader(&self) -> &CaptureReader {
        &self.reader
    }

    /// True once every tick has been released (or reading failed).
    pub fn is_done(&self) -> bool {
        self.done && self.pending.is_none()
    }

    /// So far: ticks released, the recorded span, where reading stopped and
    /// the damage seen.
    pub fn summary(&self) -> ReplaySummary {
        let s = self.reader.summary();
        ReplaySummary {
            ticks: self.released,
            span_ns: s
                .last_receive_ns
                .zip(s.first_receive_ns)
                .map_or(0, |(l, f)| l.saturating_sub(f)),
            stopped_at: s.truncated.first().cloned(),
            truncated: s.truncated.clone(),
            corrupt_count: s.corrupt_count,
            error: self.error.clone(),
        }
    }

    fn next_recorded(&mut self) -> Option<Tick> {
        if let Some(t) = self.pending.take() {
            return Some(t);
        }
        if self.done {
            return None;
        }
        match self.reader.next_tick() {
            Ok(Some(t)) => Some(t),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                tracing::error!(error = %e, "replay ended early");
                self.error = Some(e.to_string());
                self.done = true;
                None
            }
        }
    }

    #[inline]
    fn due(&mut self, t: &Tick, now_ns: u64) -> bool {
        if self.anchor.is_some()
            && t.receive_time_ns.saturating_add(REANCHOR_BACKWARD_NS) < self.max_recv_ns
        {
            // A later recording session (receive times are per-process
            // monotonic): pace it from here instead of bursting it out.
            // Compared with the highest receive time of the session, not
            // its first: a restarted recorder's times may start inside the
            // previous session's range.
            self.anchor = None;
        }
        if self.anchor.is_none() {
            self.max_recv_ns = t.receive_time_ns;
        }
        self.max_recv_ns = self.max_recv_ns.max(t.receive_time_ns);
        let (start_ns, first_recv_ns) = *self.anchor.get_or_insert((now_ns, t.receive_time_ns));
        match self
            .speed
            .scale(t.receive_time_ns.saturating_sub(first_recv_ns))
        {
            None => true,
            Some(offset_ns) => now_ns >= start_ns.saturating_add(offset_ns),
        }
    }
}

impl TickSource for ReplaySource {
    fn poll(&mut self, now_ns: u64, out: &mut [Tick]) -> SourcePoll {
        let mut n = 0;
        while n < out.len() {
            let Some(mut t) = self.next_recorded() else {
                break;
            };
            if !self.due(&t, now_ns) {
                self.pending = Some(t);
                break;
            }
            if !self.keep_recorded {
                t.receive_time_ns = now_ns;
            }
            out[n] = t;
            n += 1;
        }
        self.released += n as u64;
        match n {
            0 if self.is_done() => SourcePoll::Done,
            0 => SourcePoll::Idle,
            n => SourcePoll::Ready(n),
        }
    }

    fn keeps_receive_time(&self) -> bool {
        self.keep_recorded
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_speeds() {
        assert_eq!("1x".parse(), Ok(ReplaySpeed::REALTIME));
        assert_eq!("10x".parse(), Ok(ReplaySpeed::Scaled { milli: 10_000 }));
        assert_eq!("0.5X".parse(), Ok(ReplaySpeed::Scaled { milli: 500 }));
        assert_eq!("MAX".parse(), Ok(ReplaySpeed::Max));
        assert!("0x".parse::<ReplaySpeed>().is_err());
        assert!("fast".parse::<ReplaySpeed>().is_err());
        assert!("10".parse::<ReplaySpeed>().is_err());
        assert_eq!(ReplaySpeed::Scaled { milli: 2500 }.to_string(), "2.5x");
        assert_eq!(ReplaySpeed::REALTIME.to_string(), "1x");
    }
}
