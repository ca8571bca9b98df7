//! The unwind boundary around one connection's processing.
//!
//! Contract: [`contain`] runs one step of one connection's work (reading
//! and decoding its bytes, its TLS records, its session logic) and turns a
//! panic inside it into a [`Fault`]; the caller then discards that
//! connection's state and goes on with every other connection. It costs
//! no allocation and no lock when nothing panics (two thread-local stores
//! and `catch_unwind`, whose landing pad is never entered). What a caller
//! may let a fault leave behind — and what it may not (a structure shared
//! with other connections left half-updated) — is argued per structure in
//! docs/design.md, "Fault isolation", and beside each boundary.
//!
//! With [`install_panic_hook`] (`serve` does), a panic inside a boundary
//! does not print the default panic message: the boundary's own log line
//! ([`FaultLog`], thinned) reports it with the stage and the peer, so a
//! flood of faulting connections cannot flood stderr. Outside a boundary
//! the previous hook runs as before.

use std::cell::{Cell, RefCell};
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};

use super::supervise::panic_message;

thread_local! {
    static DEPTH: Cell<u32> = const { Cell::new(0) };
    static LOCATION: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// A panic caught at a connection boundary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    /// The panic message (cut, see [`panic_message`]).
    pub message: String,
    /// Where it panicked (`file:line`), when the hook saw it.
    pub location: Option<String>,
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.message.escape_debug())?;
        if let Some(l) = &self.location {
            write!(f, " at {l}")?;
        }
        Ok(())
    }
}

/// Runs `f`; a panic inside comes back as `Err(Fault)`.
///
/// The caller asserts unwind safety: on `Err` it must drop or reset all
/// that `f` could have left half-updated (the boundary's comment says
/// what, and why nothing shared is among it).
#[inline]
pub fn contain<T>(f: impl FnOnce() -> T) -> Result<T, Fault> {
    DEPTH.with(|d| d.set(d.get() + 1));
    let out = panic::catch_unwind(AssertUnwindSafe(f));
    DEPTH.with(|d| d.set(d.get() - 1));
    out.map_err(|payload| Fault {
        message: panic_message(&*payload),
        location: LOCATION.with(|l| l.borrow_mut().take()),
    })
}

/// Installs the panic hook that keeps a contained panic quiet (its
/// location is kept for the boundary's log line) and leaves every other
/// panic to the previous hook. Idempotent enough: call it once, at start.
pub fn install_panic_hook() {
    let previous = panic::take_hook();
    panic::set_hook(Box::new(move |info| {
        if DEPTH.with(Cell::get) > 0 {
            let at = info
                .location()
                .map(|l| format!("{}:{}", l.file(), l.line()));
            LOCATION.with(|l| *l.borrow_mut() = at);
            return;
        }
        previous(info);
    }));
}

/// Thins a boundary's error log: the first 16 faults, then every power of
/// two (the counters count them all).
#[derive(Debug, Default)]
pub struct FaultLog {
    seen: AtomicU64,
}

impl FaultLog {
    /// An empty log.
    pub const fn new() -> FaultLog {
        FaultLog {
            seen: AtomicU64::new(0),
        }
    }

    /// Counts one fault; `Some(n)` (the count) when this one is logged.
    pub fn admit(&self) -> Option<u64> {
        let n = self.seen.fetch_add(1, Ordering::Relaxed) + 1;
        (n <= 16 || n.is_power_of_two()).then_some(n)
    }

    /// Counts `fault` and logs it (thinned) at error level, naming the
    /// stage and the peer (a socket address or a name from the peer,
    /// which the caller passes escaped or as `{:?}`).
    pub fn report(&self, stage: &str, peer: &dyn std::fmt::Display, fault: &Fault) {
        if let Some(count) = self.admit() {
            tracing::error!(stage, peer = %peer, count, fault = %fault,
                "connection closed: its processing panicked (fault contained)");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_passes_and_a_panic_becomes_a_fault() {
        assert_eq!(contain(|| 7), Ok(7));
        let f = contain(|| -> u8 { panic!("bad {}", "bytes") }).unwrap_err();
        assert_eq!(f.message, "bad bytes");
        assert_eq!(
            DEPTH.with(Cell::get),
            0,
            "the depth is restored after a fault"
        );
    }

    #[test]
    fn nested_boundaries_catch_at_the_innermost() {
        let outer = contain(|| contain(|| -> u8 { panic!("inner") }).is_err());
        assert_eq!(outer, Ok(true));
        assert_eq!(DEPTH.with(Cell::get), 0);
    }

    #[test]
    fn the_log_is_thinned_to_16_then_powers_of_two() {
        let log = FaultLog::new();
        let logged: Vec<u64> = (0..1000).filter_map(|_| log.admit()).collect();
        let mut want: Vec<u64> = (1..=16).collect();
        want.extend([32, 64, 128, 256, 512]);
        assert_eq!(logged, want);
    }
}
