//! Provider host names, resolved at connect time and off the feed thread.
//!
//! Contract: a provider's host name is looked up again for every connect
//! attempt (an LP that moves its endpoint by DNS is followed), and a name
//! that does not resolve is one failed connect under the session's own
//! backoff and breaker, counted (`pricewire_fix_connects_total{result=
//! "unresolved"}`) and logged, never a reason for the feed, the core or a
//! standalone server to stop. [`Resolver::ask`] never blocks: an IP
//! literal is answered at once; a name is queued for one resolver thread
//! per feed (`pw-fix-dns`, spawned on first use), or refused at once when
//! [`ASKS_MAX`] lookups already wait. [`Resolver::answers`] takes finished
//! lookups without waiting. A lookup (`getaddrinfo`) may block for the
//! system resolver's own timeout; only the resolver thread waits for it,
//! and the session's `connect_ms` bounds how long the session waits for
//! the answer (a late answer is dropped by its attempt number).

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::{bounded, Receiver, Sender, TrySendError};

/// Lookups queued at most (each session waits for one at a time; a few
/// more allow for the late answers of timed-out attempts).
pub const ASKS_MAX: usize = 64;

/// One lookup: the session's index and attempt, the name and port.
struct Ask {
    conn: usize,
    attempt: u64,
    host: String,
    port: u16,
}

/// A finished lookup: the first address, or why there is none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The session's index in the feed.
    pub conn: usize,
    /// The attempt it was asked for.
    pub attempt: u64,
    /// The address, or why the resolver gave none.
    pub addr: Result<SocketAddr, LookupError>,
}

/// Why a host name gave no address.
#[derive(Debug, Clone, thiserror::Error)]
pub enum LookupError {
    /// The resolver answered with no address.
    #[error("no address")]
    NoAddress,
    /// The system resolver failed (shared: an [`Answer`] is cloned).
    #[error("{0}")]
    Resolver(#[source] Arc<std::io::Error>),
}

/// Equal when the same kind of failure says the same thing (an
/// `io::Error` has no equality of its own).
impl PartialEq for LookupError {
    fn eq(&self, other: &LookupError) -> bool {
        match (self, other) {
            (LookupError::NoAddress, LookupError::NoAddress) => true,
            (LookupError::Resolver(a), LookupError::Resolver(b)) => {
                a.kind() == b.kind() && a.to_string() == b.to_string()
            }
            _ => false,
        }
    }
}

impl Eq for LookupError {}

/// What [`Resolver::ask`] could say at once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Asked {
    /// An IP literal: no lookup needed.
    Now(SocketAddr),
    /// Queued; the answer comes from [`Resolver::answers`].
    Queued,
    /// Not queued (the reason): the attempt fails now.
    Refused(String),
}

/// See the module doc.
#[derive(Default)]
pub struct Resolver {
    asks: Option<Sender<Ask>>,
    answers: Option<Receiver<Answer>>,
    thread: Option<JoinHandle<()>>,
}

impl Resolver {
    /// Starts the lookup of `host:port` for attempt `attempt` of session
    /// `conn` (see [`Asked`]).
    pub fn ask(&mut self, conn: usize, attempt: u64, host: &str, port: u16) -> Asked {
        if let Ok(ip) = host.parse::<IpAddr>() {
            return Asked::Now(SocketAddr::new(ip, port));
        }
        let Some(asks) = self.start() else {
            return Asked::Refused("the resolver thread could not start".into());
        };
        let ask = Ask {
            conn,
            attempt,
            host: host.to_string(),
            port,
        };
        match asks.try_send(ask) {
            Ok(()) => Asked::Queued,
            Err(TrySendError::Full(_)) => {
                Asked::Refused(format!("{ASKS_MAX} lookups already waiting"))
            }
            Err(TrySendError::Disconnected(_)) => {
                Asked::Refused("the resolver thread ended".into())
            }
        }
    }

    /// Every lookup finished since the last call.
    pub fn answers(&self) -> impl Iterator<Item = Answer> + '_ {
        self.answers.iter().flat_map(|rx| rx.try_iter())
    }

    fn start(&mut self) -> Option<&Sender<Ask>> {
        if self.asks.is_none() {
            let (ask_tx, ask_rx) = bounded::<Ask>(ASKS_MAX);
            let (answer_tx, answer_rx) = bounded::<Answer>(ASKS_MAX);
            let thread = std::thread::Builder::new()
                .name("pw-fix-dns".into())
                .spawn(move || serve(&ask_rx, &answer_tx))
                .ok()?;
            self.asks = Some(ask_tx);
            self.answers = Some(answer_rx);
            self.thread = Some(thread);
        }
        self.asks.as_ref()
    }
}

impl Drop for Resolver {
    fn drop(&mut self) {
        // Closing the queue ends the thread after its current lookup; it
        // is not joined, since that lookup may wait for the system
        // resolver's timeout and a stopping feed must not.
        self.asks = None;
        drop(self.thread.take());
    }
}

/// The resolver thread: one lookup at a time until the feed drops the
/// queue. An answer nobody reads any more (a full queue) is dropped.
fn serve(asks: &Receiver<Ask>, answers: &Sender<Answer>) {
    for ask in asks.iter() {
        let addr = lookup(&ask.host, ask.port);
        let answer = Answer {
            conn: ask.conn,
            attempt: ask.attempt,
            addr,
        };
        if let Err(TrySendError::Disconnected(_)) = answers.try_send(answer) {
            return;
        }
    }
}

/// The first address of `host:port`, or the resolver's reason.
pub fn lookup(host: &str, port: u16) -> Result<SocketAddr, LookupError> {
    match (host, port).to_socket_addrs() {
        Ok(mut addrs) => addrs.next().ok_or(LookupError::NoAddress),
        Err(e) => Err(LookupError::Resolver(Arc::new(e))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn answer(r: &Resolver) -> Answer {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(a) = r.answers().next() {
                return a;
            }
            assert!(Instant::now() < deadline, "no answer");
            std::thread::yield_now();
        }
    }

    #[test]
    fn ip_literals_need_no_lookup_and_start_no_thread() {
        let mut r = Resolver::default();
        let want = "127.0.0.1:9878".parse().unwrap();
        assert_eq!(r.ask(0, 1, "127.0.0.1", 9878), Asked::Now(want));
        let v6 = "[::1]:9878".parse().unwrap();
        assert_eq!(r.ask(0, 2, "::1", 9878), Asked::Now(v6));
        assert!(r.thread.is_none());
    }

    #[test]
    fn a_name_is_answered_by_the_thread_with_its_attempt() {
        let mut r = Resolver::default();
        assert_eq!(r.ask(3, 7, "localhost", 9878), Asked::Queued);
        let a = answer(&r);
        assert_eq!((a.conn, a.attempt), (3, 7));
        assert_eq!(a.addr.map(|s| s.port()), Ok(9878));
        // RFC 6761: `.invalid` never resolves.
        assert_eq!(r.ask(1, 8, "lp.pricewire.invalid", 1), Asked::Queued);
        let a = answer(&r);
        assert_eq!((a.conn, a.attempt), (1, 8));
        assert!(a.addr.is_err(), "{a:?}");
    }
}
