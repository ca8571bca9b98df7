//! Keepalive of one server connection, over injected time: when to send a
//! PING and when missing PONGs mean the server is gone. No I/O here.

/// What the connection should do now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Beat {
    /// Nothing due.
    Idle,
    /// Send a PING now.
    Ping,
    /// `max_outstanding` PINGs went unanswered for an interval each: the
    /// server is dead (or the path to it); drop the connection.
    Dead,
}

/// PINGs every `interval_ns`; dead after `max_outstanding` unanswered.
#[derive(Debug, Clone)]
pub(crate) struct Keepalive {
    interval_ns: u64,
    max_outstanding: u32,
    next_ns: u64,
    outstanding: u32,
}

impl Keepalive {
    /// A keepalive (`interval_ns` > 0, `max_outstanding` ≥ 1).
    pub(crate) fn new(interval_ns: u64, max_outstanding: u32) -> Keepalive {
        assert!(interval_ns > 0 && max_outstanding > 0, "keepalive bounds");
        Keepalive {
            interval_ns,
            max_outstanding,
            next_ns: 0,
            outstanding: 0,
        }
    }

    /// A connection was established at `now_ns`.
    pub(crate) fn start(&mut self, now_ns: u64) {
        self.outstanding = 0;
        self.next_ns = now_ns.saturating_add(self.interval_ns);
    }

    /// What is due at `now_ns`.
    pub(crate) fn tick(&mut self, now_ns: u64) -> Beat {
        if now_ns < self.next_ns {
            return Beat::Idle;
        }
        if self.outstanding >= self.max_outstanding {
            return Beat::Dead;
        }
        self.outstanding += 1;
        self.next_ns = now_ns.saturating_add(self.interval_ns);
        Beat::Ping
    }

    /// A PONG arrived: the server is alive.
    pub(crate) fn pong(&mut self) {
        self.outstanding = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    #[test]
    fn pings_each_interval_and_declares_death_after_unanswered_ones() {
        let mut k = Keepalive::new(2 * S, 2);
        k.start(0);
        assert_eq!(k.tick(S), Beat::Idle);
        assert_eq!(k.tick(2 * S), Beat::Ping);
        assert_eq!(k.tick(3 * S), Beat::Idle);
        assert_eq!(k.tick(4 * S), Beat::Ping);
        assert_eq!(k.tick(6 * S), Beat::Dead);
    }

    #[test]
    fn a_pong_keeps_the_connection_alive() {
        let mut k = Keepalive::new(2 * S, 2);
        k.start(0);
        for i in 1..50 {
            assert_eq!(k.tick(2 * S * i), Beat::Ping);
            k.pong();
        }
        k.start(1_000 * S);
        assert_eq!(
            k.tick(1_001 * S),
            Beat::Idle,
            "a new connection starts afresh"
        );
    }
}
