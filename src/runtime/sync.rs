//! The synchronisation primitives of the hand-rolled lock-free code (the
//! seqlock price table, the symbol-interest fence pair, the doorbell, the
//! gateway's hand-over room and flag), from
//! `std` in every real build and from `loom` under `--cfg pricewire_loom`, so the
//! loom models check the production types themselves, not copies of them.
//!
//! Only what those use is here. Under loom, `park_timeout` parks
//! without a timeout: the timeout is a safety net, and a model that relied
//! on it would hide exactly the lost wake-up it is there to find (loom
//! reports the parked thread as a deadlock instead).

#[cfg(not(pricewire_loom))]
pub(crate) use std::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, Ordering};
#[cfg(not(pricewire_loom))]
pub(crate) use std::{
    hint::spin_loop,
    thread::{current, park_timeout, yield_now, Thread},
};

#[cfg(pricewire_loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, Ordering};
#[cfg(pricewire_loom)]
pub(crate) use loom::{
    hint::spin_loop,
    thread::{current, yield_now, Thread},
};

/// Parks the current thread (loom: until unparked; see the module doc).
#[cfg(pricewire_loom)]
pub(crate) fn park_timeout(_timeout: std::time::Duration) {
    loom::thread::park();
}
