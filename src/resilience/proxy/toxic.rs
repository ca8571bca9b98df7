//! Toxics: the faults the proxy can inject, and the control-line grammar.
//!
//! ```text
//! toxic latency <ms> [jitter_ms]   delay every chunk by ms + uniform(0..=jitter_ms)
//! toxic bandwidth <bytes_per_s>    pace forwarding to this rate
//! toxic stall                      stop forwarding (and reading); keep the connection
//! toxic reset                      reset every connection (RST, SO_LINGER 0)
//! toxic blackhole                  read and discard; never forward
//! toxic slow_close <ms>            delay passing a close on by ms
//! toxic garbage [pct] [max_bytes]  insert 1..=max_bytes random bytes into pct% of chunks
//! toxic clear [name]               remove one toxic, or all
//! status | help | shutdown
//! ```
//! Toxics apply to both directions. Every argument is bounded so a typo
//! cannot wedge a drill (`latency 6000000` is refused, not obeyed).

use std::fmt;

/// Largest latency, jitter or slow-close delay accepted.
pub const DELAY_MS_MAX: u64 = 60_000;
/// Most random bytes inserted into one chunk.
pub const GARBAGE_BYTES_MAX: u32 = 256;
/// Random bytes inserted per chunk when `garbage` names no `max_bytes`.
pub const GARBAGE_BYTES_DEFAULT: u32 = 16;

/// One fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Toxic {
    /// Each chunk is held `latency_ms + uniform(0..=jitter_ms)` (so the
    /// configured latency is a floor).
    Latency {
        /// Fixed delay per chunk, in ms (at most [`DELAY_MS_MAX`]).
        latency_ms: u64,
        /// Largest extra random delay per chunk, in ms (at most [`DELAY_MS_MAX`]).
        jitter_ms: u64,
    },
    /// Forwarding is paced to a rate.
    Bandwidth {
        /// The rate in bytes per second.
        rate_bytes_per_s: u64,
    },
    /// Forwarding and reading stop; the connection stays open.
    Stall,
    /// Every connection is reset (RST, SO_LINGER 0), new ones at accept.
    Reset,
    /// Bytes are read and discarded, never forwarded.
    Blackhole,
    /// A close is passed on only after a delay.
    SlowClose {
        /// The delay in ms (at most [`DELAY_MS_MAX`]).
        delay_ms: u64,
    },
    /// Random bytes are inserted into some chunks.
    Garbage {
        /// Percent of chunks that get garbage (the control port takes 1..=100).
        probability_pct: u32,
        /// Most bytes inserted into one chunk (1..=[`GARBAGE_BYTES_MAX`]).
        max_bytes: u32,
    },
}

/// The kind of a toxic, for `clear`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToxicKind {
    /// [`Toxic::Latency`].
    Latency,
    /// [`Toxic::Bandwidth`].
    Bandwidth,
    /// [`Toxic::Stall`].
    Stall,
    /// [`Toxic::Reset`].
    Reset,
    /// [`Toxic::Blackhole`].
    Blackhole,
    /// [`Toxic::SlowClose`].
    SlowClose,
    /// [`Toxic::Garbage`].
    Garbage,
}

impl ToxicKind {
    fn parse(name: &str) -> Result<Self, CommandError> {
        Ok(match name {
            "latency" => ToxicKind::Latency,
            "bandwidth" => ToxicKind::Bandwidth,
            "stall" => ToxicKind::Stall,
            "reset" => ToxicKind::Reset,
            "blackhole" => ToxicKind::Blackhole,
            "slow_close" => ToxicKind::SlowClose,
            "garbage" => ToxicKind::Garbage,
            other => return Err(CommandError::UnknownToxic(other.to_string())),
        })
    }
}

/// The toxics in force; at most one of each kind. Small and `Copy` so the
/// pumps take a fresh copy per chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Toxics {
    /// (latency_ms, jitter_ms)
    pub latency: Option<(u64, u64)>,
    /// Forwarding rate in bytes per second.
    pub bandwidth_bytes_per_s: Option<u64>,
    /// Forwarding stalled.
    pub stall: bool,
    /// Connections reset.
    pub reset: bool,
    /// Bytes discarded.
    pub blackhole: bool,
    /// Delay before a close is passed on, in ms.
    pub slow_close_ms: Option<u64>,
    /// (probability_pct, max_bytes)
    pub garbage: Option<(u32, u32)>,
}

impl Toxics {
    /// Adds `toxic`, replacing one of the same kind.
    pub fn set(&mut self, toxic: Toxic) {
        match toxic {
            Toxic::Latency {
                latency_ms,
                jitter_ms,
            } => self.latency = Some((latency_ms, jitter_ms)),
            Toxic::Bandwidth { rate_bytes_per_s } => {
                self.bandwidth_bytes_per_s = Some(rate_bytes_per_s)
            }
            Toxic::Stall => self.stall = true,
            Toxic::Reset => self.reset = true,
            Toxic::Blackhole => self.blackhole = true,
            Toxic::SlowClose { delay_ms } => self.slow_close_ms = Some(delay_ms),
            Toxic::Garbage {
                probability_pct,
                max_bytes,
            } => self.garbage = Some((probability_pct, max_bytes)),
        }
    }

    /// Removes the toxic of this kind, if any.
    pub fn clear(&mut self, kind: ToxicKind) {
        match kind {
            ToxicKind::Latency => self.latency = None,
            ToxicKind::Bandwidth => self.bandwidth_bytes_per_s = None,
            ToxicKind::Stall => self.stall = false,
            ToxicKind::Reset => self.reset = false,
            ToxicKind::Blackhole => self.blackhole = false,
            ToxicKind::SlowClose => self.slow_close_ms = None,
            ToxicKind::Garbage => self.garbage = None,
        }
    }
}

impl fmt::Display for Toxics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts: Vec<String> = Vec::new();
        if let Some((l, j)) = self.latency {
            parts.push(format!("latency({l}ms,{j}ms)"));
        }
        if let Some(r) = self.bandwidth_bytes_per_s {
            parts.push(format!("bandwidth({r}B/s)"));
        }
        for (on, name) in [
            (self.stall, "stall"),
            (self.reset, "reset"),
            (self.blackhole, "blackhole"),
        ] {
            if on {
                parts.push(name.to_string());
            }
        }
        if let Some(d) = self.slow_close_ms {
            parts.push(format!("slow_close({d}ms)"));
        }
        if let Some((p, n)) = self.garbage {
            parts.push(format!("garbage({p}%,{n}B)"));
        }
        if parts.is_empty() {
            f.write_str("none")
        } else {
            f.write_str(&parts.join(","))
        }
    }
}

/// One control-port command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    /// `toxic <name> ...`: add a toxic.
    Set(Toxic),
    /// `None` clears all toxics.
    Clear(Option<ToxicKind>),
    /// `status`: report counters and toxics.
    Status,
    /// `help`: print the grammar.
    Help,
    /// `shutdown`: stop the proxy.
    Shutdown,
}

/// Why a control line was refused; the text is the reason sent back
/// after `err `.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommandError {
    /// An empty line.
    #[error("empty line")]
    Empty,
    /// A first word that is no command.
    #[error("unknown command `{0}` (try `help`)")]
    UnknownCommand(String),
    /// `toxic` with nothing after it.
    #[error("usage: toxic <name> [args] | toxic clear [name]")]
    Usage,
    /// A toxic name that is no [`ToxicKind`].
    #[error("unknown toxic `{0}`")]
    UnknownToxic(String),
    /// A required number not given.
    #[error("missing {what}")]
    Missing {
        /// The argument's name (`latency_ms`).
        what: &'static str,
    },
    /// An argument that is not a number.
    #[error("{what} `{raw}` is not a number")]
    NotANumber {
        /// The argument's name.
        what: &'static str,
        /// The word given.
        raw: String,
    },
    /// A number outside its range.
    #[error("{what} {value} not in {lo}..={hi}")]
    OutOfRange {
        /// The argument's name.
        what: &'static str,
        /// The number given.
        value: u64,
        /// Smallest allowed.
        lo: u64,
        /// Largest allowed.
        hi: u64,
    },
    /// A word after a complete command.
    #[error("unexpected argument `{0}`")]
    UnexpectedArgument(String),
}

fn num<T>(arg: Option<&str>, what: &'static str, lo: T, hi: T) -> Result<T, CommandError>
where
    T: std::str::FromStr + PartialOrd + Into<u64> + Copy,
{
    let raw = arg.ok_or(CommandError::Missing { what })?;
    let v: T = raw.parse().map_err(|_| CommandError::NotANumber {
        what,
        raw: raw.to_string(),
    })?;
    if v < lo || v > hi {
        let (value, lo, hi) = (v.into(), lo.into(), hi.into());
        return Err(CommandError::OutOfRange {
            what,
            value,
            lo,
            hi,
        });
    }
    Ok(v)
}

fn parse_toxic(
    name: &str,
    args: &mut std::str::SplitWhitespace<'_>,
) -> Result<Toxic, CommandError> {
    Ok(match ToxicKind::parse(name)? {
        ToxicKind::Latency => Toxic::Latency {
            latency_ms: num(args.next(), "latency_ms", 0, DELAY_MS_MAX)?,
            jitter_ms: num(
                Some(args.next().unwrap_or("0")),
                "jitter_ms",
                0,
                DELAY_MS_MAX,
            )?,
        },
        ToxicKind::Bandwidth => Toxic::Bandwidth {
            rate_bytes_per_s: num(args.next(), "bytes_per_s", 1, u64::from(u32::MAX))?,
        },
        ToxicKind::Stall => Toxic::Stall,
        ToxicKind::Reset => Toxic::Reset,
        ToxicKind::Blackhole => Toxic::Blackhole,
        ToxicKind::SlowClose => Toxic::SlowClose {
            delay_ms: num(args.next(), "delay_ms", 0, DELAY_MS_MAX)?,
        },
        ToxicKind::Garbage => Toxic::Garbage {
            probability_pct: num(Some(args.next().unwrap_or("100")), "pct", 1, 100)?,
            max_bytes: num(
                Some(args.next().unwrap_or("16")),
                "max_bytes",
                1,
                GARBAGE_BYTES_MAX,
            )?,
        },
    })
}

impl Command {
    /// Parses one control line; the error is the reason sent back.
    pub fn parse(line: &str) -> Result<Command, CommandError> {
        let mut words = line.split_whitespace();
        let cmd = match words.next() {
            Some("status") => Command::Status,
            Some("help") => Command::Help,
            Some("shutdown") => Command::Shutdown,
            Some("toxic") => match words.next() {
                Some("clear") => Command::Clear(words.next().map(ToxicKind::parse).transpose()?),
                Some(name) => Command::Set(parse_toxic(name, &mut words)?),
                None => return Err(CommandError::Usage),
            },
            Some(other) => return Err(CommandError::UnknownCommand(other.to_string())),
            None => return Err(CommandError::Empty),
        };
        match words.next() {
            Some(extra) => Err(CommandError::UnexpectedArgument(extra.to_string())),
            None => Ok(cmd),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_documented_commands() {
        let cases = [
            (
                "toxic latency 50 10",
                Command::Set(Toxic::Latency {
                    latency_ms: 50,
                    jitter_ms: 10,
                }),
            ),
            (
                "toxic latency 50",
                Command::Set(Toxic::Latency {
                    latency_ms: 50,
                    jitter_ms: 0,
                }),
            ),
            (
                "toxic bandwidth 1000",
                Command::Set(Toxic::Bandwidth {
                    rate_bytes_per_s: 1000,
                }),
            ),
            ("toxic stall", Command::Set(Toxic::Stall)),
            ("toxic reset", Command::Set(Toxic::Reset)),
            ("  toxic   blackhole ", Command::Set(Toxic::Blackhole)),
            (
                "toxic slow_close 200",
                Command::Set(Toxic::SlowClose { delay_ms: 200 }),
            ),
            (
                "toxic garbage",
                Command::Set(Toxic::Garbage {
                    probability_pct: 100,
                    max_bytes: 16,
                }),
            ),
            (
                "toxic garbage 5 3",
                Command::Set(Toxic::Garbage {
                    probability_pct: 5,
                    max_bytes: 3,
                }),
            ),
            ("toxic clear", Command::Clear(None)),
            ("toxic clear stall", Command::Clear(Some(ToxicKind::Stall))),
            ("status", Command::Status),
        ];
        for (line, want) in cases {
            assert_eq!(Command::parse(line), Ok(want), "{line}");
        }
    }

    #[test]
    fn refuses_bad_lines_with_a_reason() {
        for line in [
            "",
            "toxic",
            "toxic fire",
            "toxic latency",
            "toxic latency abc",
            "toxic latency 60001",
            "toxic bandwidth 0",
            "toxic garbage 0",
            "toxic garbage 50 257",
            "toxic stall now",
            "toxic clear fire",
            "reboot",
        ] {
            let err = Command::parse(line).unwrap_err();
            assert!(!err.to_string().is_empty(), "{line}");
        }
        let range = Command::parse("toxic latency 60001").unwrap_err();
        assert_eq!(range.to_string(), "latency_ms 60001 not in 0..=60000");
        assert_eq!(
            Command::parse("toxic fire").unwrap_err(),
            CommandError::UnknownToxic("fire".into())
        );
    }

    #[test]
    fn toxics_set_clear_and_display() {
        let mut t = Toxics::default();
        assert_eq!(t.to_string(), "none");
        t.set(Toxic::Latency {
            latency_ms: 5,
            jitter_ms: 1,
        });
        t.set(Toxic::Stall);
        assert_eq!(t.to_string(), "latency(5ms,1ms),stall");
        t.clear(ToxicKind::Latency);
        assert_eq!(t.to_string(), "stall");
    }
}
