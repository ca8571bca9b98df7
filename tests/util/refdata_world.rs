//! A scripted Redis for the reference data, on injected time: the real
//! `GuardedStore` (breaker, consecutive-failures rule, data-set rule) and
//! the real refresher and cache run over it, so tests decide by a
//! `ManualClock` and never sleep.
//!
//! `util::refdata_world`. The world
//! holds what Redis holds (records, the generation marker, the index set)
//! and whether it is reachable: while it is down every call fails, either
//! at once (refused) or after the call's longest timeouts (the clock is
//! advanced by them inside the call, as a blackholed Redis would take).

use std::collections::BTreeMap;
use std::io::ErrorKind;
use std::sync::{Arc, Mutex, MutexGuard};

use pricewire::clock::{Clock, ManualClock, NS_PER_MS};
use pricewire::config::Account;
use pricewire::refdata::dataset::{Index, Marker, Observation};
use pricewire::refdata::{
    Backend, FetchError, GuardedStore, Listing, PoolError, Record, RecordRead, RedisError, RefData,
    RefDataConfig, RefDataStats, Refresher,
};
use pricewire::resilience::BreakerStats;

/// How calls fail while Redis is down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Down {
    /// Nothing listening: refused at once.
    Refused,
    /// Blackholed: each call runs to its longest timeouts.
    Timeout,
}

/// What Redis holds, and whether it answers.
#[derive(Debug, Clone)]
pub struct World {
    pub records: BTreeMap<String, Record>,
    pub marker: Marker,
    pub index: Index,
    /// While `Some`, every call fails so.
    pub down: Option<Down>,
    /// Calls made (answered or not).
    pub calls: u64,
}

impl World {
    /// `names` as valid accounts, the index listing them, the marker at
    /// `generation` (`None`: no marker, an index-only deployment).
    pub fn with_accounts(names: &[String], generation: Option<u64>) -> World {
        World {
            records: names
                .iter()
                .map(|n| (n.clone(), Record::Account(account(n))))
                .collect(),
            marker: generation.map_or(Marker::Absent, Marker::Value),
            index: Index::Names(names.len() as u64),
            down: None,
            calls: 0,
        }
    }

    /// Redis restarted without its data.
    pub fn restart_empty(&mut self) {
        self.records.clear();
        self.marker = Marker::Absent;
        self.index = Index::Names(0);
    }
}

/// An account that logs on with token `t` (clear: the cache test needs no
/// argon2).
pub fn account(name: &str) -> Account {
    Account {
        name: name.into(),
        token: "t".into(),
        symbols: None,
        tiers: vec![0],
        max_sessions: 1000,
        critical: false,
        max_update_hz: None,
    }
}

/// The backend over a shared world.
pub struct Scripted {
    world: Arc<Mutex<World>>,
    clock: Arc<ManualClock>,
    attempt_ns: u64,
}

impl Scripted {
    fn call(&self) -> Result<MutexGuard<'_, World>, FetchError> {
        let mut w = self.world.lock().unwrap();
        w.calls += 1;
        match w.down {
            None => Ok(w),
            Some(Down::Refused) => Err(FetchError::Pool(PoolError::Connect(RedisError::Connect {
                kind: ErrorKind::ConnectionRefused,
            }))),
            Some(Down::Timeout) => {
                drop(w);
                self.clock
                    .advance(std::time::Duration::from_nanos(self.attempt_ns));
                Err(FetchError::Redis(RedisError::Timeout))
            }
        }
    }
}

fn observation(w: &World) -> Observation {
    Observation {
        marker: w.marker,
        index: w.index,
    }
}

impl Backend for Scripted {
    fn read(&self, name: &str) -> RecordRead {
        let w = self.call()?;
        let record = w.records.get(name).cloned().unwrap_or(Record::Absent);
        Ok((Ok(record), observation(&w)))
    }

    fn list(&self, max: usize) -> Result<Listing, FetchError> {
        let w = self.call()?;
        if w.index == Index::Unreadable {
            return Err(FetchError::DataSet(
                pricewire::refdata::dataset::DataSetFault::IndexUnreadable,
            ));
        }
        let names: Vec<String> = w.records.keys().take(max).cloned().collect();
        Ok(Listing {
            complete: names.len() == w.records.len(),
            total: w.records.len() as u64,
            names,
        })
    }

    fn observe(&self) -> Result<Observation, FetchError> {
        let w = self.call()?;
        Ok(observation(&w))
    }
}

/// The reference data over a world, with the refresher to drive.
pub struct Rig {
    pub clock: Arc<ManualClock>,
    pub world: Arc<Mutex<World>>,
    pub refdata: RefData,
    pub refresher: Refresher<GuardedStore<Scripted>>,
    pub breaker: Arc<BreakerStats>,
    pub cfg: RefDataConfig,
}

impl Rig {
    /// Defaults (as shipped) unless `set` changes them; `seed` seeds every
    /// draw (cache, refresher, breaker).
    pub fn new(world: World, seed: u64, set: impl FnOnce(&mut RefDataConfig)) -> Rig {
        let mut cfg = RefDataConfig::from_url("redis://127.0.0.1:6379").unwrap();
        set(&mut cfg);
        cfg.validate().unwrap();
        let clock = ManualClock::new(1_000 * NS_PER_MS);
        let world = Arc::new(Mutex::new(world));
        let backend = Scripted {
            world: Arc::clone(&world),
            clock: Arc::clone(&clock),
            attempt_ns: cfg.redis.attempt_max_ms() * NS_PER_MS,
        };
        let stats = Arc::new(RefDataStats::default());
        let store = GuardedStore::with_backend(&cfg.redis, backend, stats, seed).unwrap();
        let breaker = store.breaker_stats();
        let (refdata, refresher) = RefData::manual(cfg.cache, store, seed).unwrap();
        Rig {
            clock,
            world,
            refdata,
            refresher,
            breaker,
            cfg,
        }
    }

    pub fn now(&self) -> u64 {
        self.clock.now_ns()
    }

    pub fn world(&self) -> MutexGuard<'_, World> {
        self.world.lock().unwrap()
    }

    /// Runs the refresher as its thread would at this instant: steps while
    /// it makes calls (each call may advance the clock by its timeouts).
    pub fn settle(&mut self) {
        for _ in 0..10_000 {
            if self.refresher.step(&*self.clock) == 0 {
                return;
            }
        }
        panic!("the refresher never went idle");
    }

    /// When the refresher thread would next wake with nothing asked of
    /// it: at the end of its backoff, else after one idle tick.
    pub fn next_wake_ns(&self) -> u64 {
        let now = self.now();
        let tick = self.cfg.cache.idle_tick_ms * NS_PER_MS;
        let retry = self.refresher.retry_at_ns();
        if retry > now {
            retry.min(now + tick)
        } else {
            now + tick
        }
    }

    /// Moves time to `t_ns` the way the refresher thread lives it: wakes
    /// at each due time on the way and settles.
    pub fn run_until(&mut self, t_ns: u64) {
        while self.now() < t_ns {
            let next = self.next_wake_ns().min(t_ns).max(self.now() + 1);
            self.clock.set_ns(next);
            self.settle();
        }
    }
}
