//! Reference-data counters (atomics, `Relaxed`) and their snapshot.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::pool::PoolError;
use super::resp::RedisError;
use super::source::FetchError;
use crate::resilience::Outcome;

/// Counters of one [`super::RefData`]; shared by `Arc` with the metrics
/// thread. Breaker and pool counters live in their own structs
/// ([`super::RefData::breaker_stats`], [`super::RefData::pool_stats`]).
#[derive(Debug, Default)]
pub struct RefDataStats {
    /// Lookups answered with an account.
    pub lookups_found: AtomicU64,
    /// Lookups answered "no such account".
    pub lookups_not_found: AtomicU64,
    /// Lookups answered "not known now" (the logon is refused busy).
    pub lookups_unavailable: AtomicU64,
    /// Lookups answered from a fresh entry.
    pub cache_hits: AtomicU64,
    /// Lookups answered from an expired entry within `max_stale_ms`.
    pub stale_served: AtomicU64,
    /// Lookups with no usable entry (a fill is requested).
    pub cache_misses: AtomicU64,
    /// Refresh requests queued because XFetch chose to refresh early.
    pub refresh_requests_early: AtomicU64,
    /// Refresh requests queued for an expired entry.
    pub refresh_requests_expired: AtomicU64,
    /// Fill requests queued for a miss.
    pub fill_requests: AtomicU64,
    /// Requests not queued because one for the key was already pending.
    pub requests_coalesced: AtomicU64,
    /// Requests refused because the queue was full.
    pub requests_dropped: AtomicU64,
    /// Requests queued in place of an older unknown-name miss (the queue at
    /// its bound).
    pub requests_displaced: AtomicU64,
    /// Requests queued in place of their own source's oldest unknown-name
    /// miss (the source at `misses_per_source_max`).
    pub requests_source_limited: AtomicU64,
    /// Names read from the index set for prefetch.
    pub prefetch_listed: AtomicU64,
    /// Names of the index set left out of the prefetch (over `prefetch_max`).
    pub prefetch_left_out: AtomicU64,
    /// Entries written by the refresher (fills and refreshes).
    pub entries_written: AtomicU64,
    /// Completed fetches by why they were asked for: misses and prefetch,
    /// XFetch early refreshes, refreshes of expired entries.
    pub fills: AtomicU64,
    /// See `fills`.
    pub refreshes_early: AtomicU64,
    /// See `fills`.
    pub refreshes_expired: AtomicU64,
    /// Entries removed to make room (cache at `entries_max`).
    pub evictions: AtomicU64,
    /// Redis calls that returned an account (or the index set, or PONG).
    pub redis_ok: AtomicU64,
    /// Redis calls that found no such key.
    pub redis_not_found: AtomicU64,
    /// Records refused as invalid, including replies over the client's limits.
    pub redis_invalid_record: AtomicU64,
    /// Records found absent while the data set was not trusted (no
    /// verdict: not a revocation).
    pub redis_absent_untrusted: AtomicU64,
    /// Calls that ran into the connect or command timeout.
    pub redis_timeouts: AtomicU64,
    /// Calls that failed on the connection (refused, reset, closed).
    pub redis_connection_errors: AtomicU64,
    /// Calls that failed otherwise (protocol, server error).
    pub redis_other_errors: AtomicU64,
    /// Calls that found no free pooled connection in time.
    pub redis_checkout_timeouts: AtomicU64,
    /// Calls the breaker refused.
    pub redis_not_permitted: AtomicU64,
    /// Times the refresher backed off after a failure.
    pub refresher_backoffs: AtomicU64,
    /// Health probes (`PING`) the refresher sent while it had nothing else
    /// to ask.
    pub probes: AtomicU64,
    /// Live sessions whose withdrawn (symbol, tier) subscriptions the
    /// gateway ended after their account changed.
    pub revoked_unsubscribed: AtomicU64,
    /// Live sessions the gateway ended with Disconnect(auth): account
    /// deleted or revoked (the data set trusted), or its session's default
    /// tier withdrawn.
    pub revoked_disconnected: AtomicU64,
}

/// A plain copy of [`RefDataStats`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RefDataSnapshot {
    /// [`RefDataStats::lookups_found`].
    pub lookups_found: u64,
    /// [`RefDataStats::lookups_not_found`].
    pub lookups_not_found: u64,
    /// [`RefDataStats::lookups_unavailable`].
    pub lookups_unavailable: u64,
    /// [`RefDataStats::cache_hits`].
    pub cache_hits: u64,
    /// [`RefDataStats::stale_served`].
    pub stale_served: u64,
    /// [`RefDataStats::cache_misses`].
    pub cache_misses: u64,
    /// [`RefDataStats::refresh_requests_early`].
    pub refresh_requests_early: u64,
    /// [`RefDataStats::refresh_requests_expired`].
    pub refresh_requests_expired: u64,
    /// [`RefDataStats::fill_requests`].
    pub fill_requests: u64,
    /// [`RefDataStats::requests_coalesced`].
    pub requests_coalesced: u64,
    /// [`RefDataStats::requests_dropped`].
    pub requests_dropped: u64,
    /// [`RefDataStats::requests_displaced`].
    pub requests_displaced: u64,
    /// [`RefDataStats::requests_source_limited`].
    pub requests_source_limited: u64,
    /// [`RefDataStats::prefetch_listed`].
    pub prefetch_listed: u64,
    /// [`RefDataStats::prefetch_left_out`].
    pub prefetch_left_out: u64,
    /// [`RefDataStats::entries_written`].
    pub entries_written: u64,
    /// [`RefDataStats::fills`].
    pub fills: u64,
    /// [`RefDataStats::refreshes_early`].
    pub refreshes_early: u64,
    /// [`RefDataStats::refreshes_expired`].
    pub refreshes_expired: u64,
    /// [`RefDataStats::evictions`].
    pub evictions: u64,
    /// [`RefDataStats::redis_ok`].
    pub redis_ok: u64,
    /// [`RefDataStats::redis_not_found`].
    pub redis_not_found: u64,
    /// [`RefDataStats::redis_invalid_record`].
    pub redis_invalid_record: u64,
    /// [`RefDataStats::redis_absent_untrusted`].
    pub redis_absent_untrusted: u64,
    /// [`RefDataStats::redis_timeouts`].
    pub redis_timeouts: u64,
    /// [`RefDataStats::redis_connection_errors`].
    pub redis_connection_errors: u64,
    /// [`RefDataStats::redis_other_errors`].
    pub redis_other_errors: u64,
    /// [`RefDataStats::redis_checkout_timeouts`].
    pub redis_checkout_timeouts: u64,
    /// [`RefDataStats::redis_not_permitted`].
    pub redis_not_permitted: u64,
    /// [`RefDataStats::refresher_backoffs`].
    pub refresher_backoffs: u64,
    /// [`RefDataStats::probes`].
    pub probes: u64,
    /// [`RefDataStats::revoked_unsubscribed`].
    pub revoked_unsubscribed: u64,
    /// [`RefDataStats::revoked_disconnected`].
    pub revoked_disconnected: u64,
}

impl RefDataStats {
    /// Every counter, read once (`Relaxed`; not one instant).
    pub fn snapshot(&self) -> RefDataSnapshot {
        let l = |a: &AtomicU64| a.load(Relaxed);
        RefDataSnapshot {
            lookups_found: l(&self.lookups_found),
            lookups_not_found: l(&self.lookups_not_found),
            lookups_unavailable: l(&self.lookups_unavailable),
            cache_hits: l(&self.cache_hits),
            stale_served: l(&self.stale_served),
            cache_misses: l(&self.cache_misses),
            refresh_requests_early: l(&self.refresh_requests_early),
            refresh_requests_expired: l(&self.refresh_requests_expired),
            fill_requests: l(&self.fill_requests),
            requests_coalesced: l(&self.requests_coalesced),
            requests_dropped: l(&self.requests_dropped),
            requests_displaced: l(&self.requests_displaced),
            requests_source_limited: l(&self.requests_source_limited),
            prefetch_listed: l(&self.prefetch_listed),
            prefetch_left_out: l(&self.prefetch_left_out),
            entries_written: l(&self.entries_written),
            fills: l(&self.fills),
            refreshes_early: l(&self.refreshes_early),
            refreshes_expired: l(&self.refreshes_expired),
            evictions: l(&self.evictions),
            redis_ok: l(&self.redis_ok),
            redis_not_found: l(&self.redis_not_found),
            redis_invalid_record: l(&self.redis_invalid_record),
            redis_absent_untrusted: l(&self.redis_absent_untrusted),
            redis_timeouts: l(&self.redis_timeouts),
            redis_connection_errors: l(&self.redis_connection_errors),
            redis_other_errors: l(&self.redis_other_errors),
            redis_checkout_timeouts: l(&self.redis_checkout_timeouts),
            redis_not_permitted: l(&self.redis_not_permitted),
            refresher_backoffs: l(&self.refresher_backoffs),
            probes: l(&self.probes),
            revoked_unsubscribed: l(&self.revoked_unsubscribed),
            revoked_disconnected: l(&self.revoked_disconnected),
        }
    }

    /// Counts one permitted Redis call by what came back.
    pub(crate) fn count_redis<T>(&self, outcome: Outcome, result: &Result<T, FetchError>) {
        let counter = match result {
            Ok(_) if outcome == Outcome::Ignored => &self.redis_not_found,
            Ok(_) => &self.redis_ok,
            Err(FetchError::Invalid { .. }) => &self.redis_invalid_record,
            Err(FetchError::DataSet(_)) => &self.redis_absent_untrusted,
            Err(FetchError::Pool(PoolError::CheckoutTimeout { .. })) => {
                &self.redis_checkout_timeouts
            }
            Err(FetchError::Redis(RedisError::Timeout))
            | Err(FetchError::Pool(PoolError::Connect(RedisError::ConnectTimeout))) => {
                &self.redis_timeouts
            }
            Err(FetchError::Redis(
                RedisError::Closed | RedisError::Io { .. } | RedisError::Connect { .. },
            ))
            | Err(FetchError::Pool(PoolError::Connect(_))) => &self.redis_connection_errors,
            Err(_) => &self.redis_other_errors,
        };
        counter.fetch_add(1, Relaxed);
    }
}
