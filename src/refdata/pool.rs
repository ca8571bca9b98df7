//! A bounded pool of Redis connections with connect, I/O and checkout
//! timeouts.
//!
//! Contract: at most `size_max` connections exist (idle plus checked out);
//! [`Pool::checkout`] waits at most `checkout_timeout_ms` for one (a
//! `Condvar` wait, never unbounded) and connects a new one, within
//! `connect_timeout_ms`, when the pool is below its size; every command on
//! a [`PooledConn`] is bounded by `io_timeout_ms` in total. A connection
//! that saw any error is discarded, never returned to the pool, so a late
//! reply can never answer the next command. Callers are background threads
//! (the reference-data refresher), never an event loop.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::resp::{RedisError, RespConn, Value};

/// Where and how to connect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolConfig {
    /// The Redis server.
    pub addr: SocketAddr,
    /// `AUTH` password, if any (never logged).
    pub password: Option<String>,
    /// Database selected with `SELECT` when not 0.
    pub db: u32,
    /// TCP connect plus the `AUTH`/`SELECT` handshake (ms).
    pub connect_timeout_ms: u64,
    /// Total budget of one command (write plus the whole reply).
    pub io_timeout_ms: u64,
    /// Longest wait for a free connection (ms).
    pub checkout_timeout_ms: u64,
    /// Most connections, idle plus in use.
    pub size_max: usize,
}

/// Why a checkout failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PoolError {
    /// Every connection stayed checked out for the whole checkout timeout.
    #[error("no pooled connection free within {waited_ms} ms")]
    CheckoutTimeout {
        /// How long the checkout waited (ms).
        waited_ms: u64,
    },
    /// A new connection could not be made.
    #[error(transparent)]
    Connect(RedisError),
}

/// Pool counters for the metrics endpoint.
#[derive(Debug, Default)]
pub struct PoolStats {
    /// Connections handed out.
    pub checkouts: AtomicU64,
    /// Checkouts that found no free connection in time.
    pub checkout_timeouts: AtomicU64,
    /// New connections made (connect and handshake succeeded).
    pub connects: AtomicU64,
    /// New connections that failed (refused, timed out, handshake error).
    pub connect_failures: AtomicU64,
    /// Connections dropped after an error.
    pub discarded: AtomicU64,
    /// Gauge: idle connections in the pool.
    pub idle: AtomicU64,
    /// Gauge: connections checked out.
    pub in_use: AtomicU64,
}

#[derive(Debug)]
struct Slots {
    idle: Vec<RespConn>,
    in_use: usize,
}

/// The pool. Shareable (`&self` everywhere).
#[derive(Debug)]
pub struct Pool {
    cfg: PoolConfig,
    slots: Mutex<Slots>,
    freed: Condvar,
    stats: Arc<PoolStats>,
}

impl Pool {
    /// Creates an empty pool; connections are made on first checkout.
    /// `size_max` must be at least 1 (checked by the caller's config).
    pub fn new(cfg: PoolConfig) -> Pool {
        assert!(cfg.size_max >= 1, "pool size_max must be >= 1");
        Pool {
            slots: Mutex::new(Slots {
                idle: Vec::with_capacity(cfg.size_max),
                in_use: 0,
            }),
            cfg,
            freed: Condvar::new(),
            stats: Arc::new(PoolStats::default()),
        }
    }

    /// The settings it was built with.
    pub fn config(&self) -> &PoolConfig {
        &self.cfg
    }

    /// Its counters, for /metrics.
    pub fn stats(&self) -> Arc<PoolStats> {
        Arc::clone(&self.stats)
    }

    fn lock(&self) -> MutexGuard<'_, Slots> {
        self.slots.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn publish(&self, s: &Slots) {
        self.stats.idle.store(s.idle.len() as u64, Relaxed);
        self.stats.in_use.store(s.in_use as u64, Relaxed);
    }

    /// A connection for one caller: an idle one, a new one, or the next one
    /// freed within `checkout_timeout_ms`.
    pub fn checkout(&self) -> Result<PooledConn<'_>, PoolError> {
        let started = Instant::now();
        let timeout = Duration::from_millis(self.cfg.checkout_timeout_ms);
        let mut slots = self.lock();
        while slots.idle.is_empty() && slots.in_use >= self.cfg.size_max {
            let left = timeout.saturating_sub(started.elapsed());
            if left.is_zero() {
                self.stats.checkout_timeouts.fetch_add(1, Relaxed);
                let waited_ms = started.elapsed().as_millis() as u64;
                return Err(PoolError::CheckoutTimeout { waited_ms });
            }
            slots = self
                .freed
                .wait_timeout(slots, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        slots.in_use += 1;
        let reused = slots.idle.pop();
        self.publish(&slots);
        drop(slots);
        self.stats.checkouts.fetch_add(1, Relaxed);
        let conn = match reused {
            Some(c) => c,
            None => self.connect().inspect_err(|_| self.give_back(None))?,
        };
        Ok(PooledConn {
            pool: self,
            conn: Some(conn),
            broken: false,
        })
    }

    fn connect(&self) -> Result<RespConn, PoolError> {
        self.stats.connects.fetch_add(1, Relaxed);
        let c = &self.cfg;
        RespConn::connect(
            c.addr,
            Duration::from_millis(c.connect_timeout_ms),
            c.password.as_deref(),
            c.db,
        )
        .map_err(|e| {
            self.stats.connect_failures.fetch_add(1, Relaxed);
            PoolError::Connect(e)
        })
    }

    fn give_back(&self, conn: Option<RespConn>) {
        let mut slots = self.lock();
        slots.in_use -= 1;
        if let Some(c) = conn {
            slots.idle.push(c);
        }
        self.publish(&slots);
        drop(slots);
        self.freed.notify_one();
    }
}

/// A checked-out connection; returns to the pool on drop unless it broke.
#[derive(Debug)]
pub struct PooledConn<'a> {
    pool: &'a Pool,
    conn: Option<RespConn>,
    broken: bool,
}

impl PooledConn<'_> {
    /// One command within the pool's `io_timeout_ms`. Any error other than
    /// a server error reply marks the connection broken.
    pub fn command(&mut self, args: &[&[u8]]) -> Result<Value, RedisError> {
        let timeout = Duration::from_millis(self.pool.cfg.io_timeout_ms);
        let conn = self.conn.as_mut().expect("connection present until drop");
        let result = conn.command(args, timeout);
        if matches!(result, Err(ref e) if !matches!(e, RedisError::Server(_))) {
            self.broken = true;
        }
        result
    }
}

impl PooledConn<'_> {
    /// One `MULTI`/`EXEC` transaction within the pool's `io_timeout_ms`
    /// ([`RespConn::transaction`]). Any error marks the connection broken
    /// (replies of the transaction may be left unread).
    pub fn transaction(
        &mut self,
        cmds: &[&[&[u8]]],
    ) -> Result<Vec<Result<Value, String>>, RedisError> {
        let timeout = Duration::from_millis(self.pool.cfg.io_timeout_ms);
        let conn = self.conn.as_mut().expect("connection present until drop");
        let result = conn.transaction(cmds, timeout);
        self.broken |= result.is_err();
        result
    }
}

impl Drop for PooledConn<'_> {
    fn drop(&mut self) {
        let conn = self.conn.take();
        if self.broken {
            self.pool.stats.discarded.fetch_add(1, Relaxed);
            self.pool.give_back(None);
        } else {
            self.pool.give_back(conn);
        }
    }
}
