//! The labels of the overload controls' counters: which admission check
//! refused ([`Stage`]) and why a request left the queue unserved
//! ([`ShedReason`]). Stable names, used on /metrics and in the docs.

/// Which check refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Stage {
    /// Listener-wide accept-rate bucket.
    Accept = 0,
    /// Too many concurrent connections from one address.
    IpConnections = 1,
    /// Too many connection attempts per second from one address.
    IpRate = 2,
    /// The IP table was full and the shared overflow bucket was empty.
    IpOverflow = 3,
    /// Logons per second.
    Logon = 4,
    /// First subscriptions per second.
    FirstSubscribe = 5,
    /// Symbol-list requests per second.
    SymbolList = 6,
    /// The account has its maximum of concurrent sessions (or is unknown).
    AccountSessions = 7,
    /// The shard the session is on is lagging (loop lag above target).
    LoopLag = 8,
}

impl Stage {
    /// Number of stages; the length of per-stage counter arrays.
    pub const COUNT: usize = 9;
    /// Every stage in discriminant order, so `ALL[s as usize] == s`.
    pub const ALL: [Stage; Stage::COUNT] = [
        Stage::Accept,
        Stage::IpConnections,
        Stage::IpRate,
        Stage::IpOverflow,
        Stage::Logon,
        Stage::FirstSubscribe,
        Stage::SymbolList,
        Stage::AccountSessions,
        Stage::LoopLag,
    ];

    /// Stable label for metrics.
    pub fn name(self) -> &'static str {
        match self {
            Stage::Accept => "accept",
            Stage::IpConnections => "ip_connections",
            Stage::IpRate => "ip_rate",
            Stage::IpOverflow => "ip_overflow",
            Stage::Logon => "logon",
            Stage::FirstSubscribe => "first_subscribe",
            Stage::SymbolList => "symbol_list",
            Stage::AccountSessions => "account_sessions",
            Stage::LoopLag => "loop_lag",
        }
    }
}

/// Why a request left the queue without being served.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ShedReason {
    /// Waited more than twice the target while the queue was overloaded.
    Overloaded = 0,
    /// Evicted from a full queue (oldest entry of the heaviest account).
    QueueFull = 1,
    /// The account exceeded its request rate; refused at push.
    RateLimited = 2,
    /// Its deadline passed before a worker could take it.
    Expired = 3,
    /// The account index is outside the table; refused at push.
    BadAccount = 4,
    /// The shard the request arrived on is lagging; refused at the shard.
    LoopLag = 5,
}

impl ShedReason {
    /// Number of reasons; the length of per-reason counter arrays.
    pub const COUNT: usize = 6;
    /// Every reason in discriminant order, so `ALL[r as usize] == r`.
    pub const ALL: [ShedReason; ShedReason::COUNT] = [
        ShedReason::Overloaded,
        ShedReason::QueueFull,
        ShedReason::RateLimited,
        ShedReason::Expired,
        ShedReason::BadAccount,
        ShedReason::LoopLag,
    ];

    /// Stable label for metrics.
    pub fn name(self) -> &'static str {
        match self {
            ShedReason::Overloaded => "overloaded",
            ShedReason::QueueFull => "queue_full",
            ShedReason::RateLimited => "rate_limited",
            ShedReason::Expired => "expired",
            ShedReason::BadAccount => "bad_account",
            ShedReason::LoopLag => "loop_lag",
        }
    }
}
