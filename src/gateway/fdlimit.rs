//! The process's descriptor budget for subscriber connections: at start
//! the soft `RLIMIT_NOFILE` is raised to the hard one, a configured
//! capacity (shards × `--max-connections-per-shard`) above what the limit
//! leaves is logged, and the acceptor refuses a connection with
//! Disconnect(busy) once the open connections reach the limit less
//! `--fd-reserve`. The reserve keeps descriptors for everything else the
//! process opens while it is full of sessions: the ops listener and its
//! probes and scrapes, the bus, feeds, files, TLS refusals in progress and
//! the connections between accept and their shard. Without it, a full
//! process fails `accept` with EMFILE: the connection waits unanswered in
//! the listen queue, and the orchestrator's `/livez` fails with it
//! (issue #28: 515 of 2,500 attempts hung, 56 of 64 scrapes failed).

/// Default of `--fd-reserve`.
pub const FD_RESERVE_DEFAULT: u64 = 256;
/// Smallest and largest `--fd-reserve`.
pub(super) const FD_RESERVE_RANGE: std::ops::RangeInclusive<u64> = 32..=65_536;

/// Refuses a reserve out of range (the flag's check).
pub(super) fn check_fd_reserve(n: u64) -> Result<(), super::SettingsError> {
    if !FD_RESERVE_RANGE.contains(&n) {
        let (lo, hi) = (FD_RESERVE_RANGE.start(), FD_RESERVE_RANGE.end());
        let range = format!("{lo}..={hi} (descriptors)");
        return Err(super::SettingsError::value("--fd-reserve", n, range));
    }
    Ok(())
}

/// Open subscriber connections at which the acceptor refuses: the
/// descriptor limit less the reserve (at least 1).
pub(super) fn connection_limit(fd_limit: u64, reserve: u64) -> u64 {
    fd_limit.saturating_sub(reserve).max(1)
}

/// Raises the descriptor limit and returns the connection limit for
/// `capacity` configured connections, logging when the limit is short.
pub(super) fn at_start(capacity: u64, reserve: u64) -> u64 {
    let limit = match crate::runtime::sys::raise_fd_limit() {
        Ok(limit) => limit,
        Err(e) => {
            tracing::warn!(error = %e, "descriptor limit unknown; connections unlimited by it");
            return u64::MAX;
        }
    };
    let conns = connection_limit(limit, reserve);
    if capacity > conns {
        tracing::warn!(
            fd_limit = limit,
            fd_reserve = reserve,
            capacity,
            connections_max = conns,
            "descriptor limit below the configured connection capacity: connections past \
             connections_max are refused busy (raise `ulimit -n`/LimitNOFILE)"
        );
    } else {
        tracing::info!(
            fd_limit = limit,
            connections_max = conns,
            "descriptor limit"
        );
    }
    conns
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reserve_comes_off_the_limit_and_is_range_checked() {
        assert_eq!(connection_limit(2_000, 256), 1_744);
        assert_eq!(connection_limit(100, 256), 1, "never none");
        assert!(check_fd_reserve(31).is_err());
        assert!(check_fd_reserve(FD_RESERVE_DEFAULT).is_ok());
        assert!(check_fd_reserve(65_537).is_err());
    }
}
