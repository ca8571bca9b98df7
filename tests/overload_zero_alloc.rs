//! Proves that the overload controls allocate nothing in the steady state:
//! request queue push/pop (including evictions, overload sheds, expiries,
//! rate-limit refusals and interval roll-overs), admission decisions for
//! known addresses, and the adaptive limit.
//!
//! A counting global allocator counts only on the thread that armed it, so
//! the test harness's own threads cannot disturb the count.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use pricewire::admission::{Admission, AdmissionConfig};
use pricewire::clock::NS_PER_MS;
use pricewire::requests::{
    AdaptiveConfig, AdaptiveLimit, Arrival, OverloadStats, QueueConfig, RequestQueue,
};
use rand::rngs::SmallRng;
use rand::SeedableRng;

struct CountingAlloc;

thread_local! {
    static ARMED: Cell<bool> = const { Cell::new(false) };
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

fn note_allocation() {
    // `try_with`: during thread teardown the thread-locals may be gone.
    let _ = ARMED.try_with(|armed| {
        if armed.get() {
            let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
        }
    });
}

// SAFETY: every call is forwarded unchanged to the system allocator; the
// counting touches only const-initialised thread-locals, which never allocate.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note_allocation();
        // SAFETY: same layout contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note_allocation();
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

fn allocations_during(f: impl FnOnce()) -> u64 {
    ALLOCATIONS.with(|n| n.set(0));
    ARMED.with(|a| a.set(true));
    f();
    ARMED.with(|a| a.set(false));
    ALLOCATIONS.with(|n| n.get())
}

/// Request payload as a gateway would queue it: a fixed-size record.
#[derive(Debug)]
struct Request {
    id: u64,
    _frame: [u8; 48],
}

struct Rig {
    queue: RequestQueue<Request>,
    admission: Admission,
    limit: AdaptiveLimit,
    sheds: u64,
    served: u64,
}

fn rig() -> Rig {
    let stats = Arc::new(OverloadStats::new());
    let queue_cfg = QueueConfig {
        capacity: 256,
        accounts_max: 64,
        ..QueueConfig::default()
    };
    let queue = RequestQueue::new(queue_cfg, SmallRng::seed_from_u64(1), stats.clone(), 0);
    let admission_cfg = AdmissionConfig {
        ip_table_capacity: 64,
        ..AdmissionConfig::default()
    };
    let admission = Admission::new(admission_cfg, SmallRng::seed_from_u64(2), stats.clone(), 0);
    Rig {
        queue: queue.unwrap(),
        admission: admission.unwrap(),
        limit: AdaptiveLimit::new(AdaptiveConfig::default(), stats).unwrap(),
        sheds: 0,
        served: 0,
    }
}

/// One millisecond of mixed traffic: 3 arrivals, 1 service, admission
/// checks and an RTT sample. Overloads the queue on purpose.
fn one_ms(rig: &mut Rig, ms: u64, next_id: &mut u64) {
    let now = ms * NS_PER_MS;
    for k in 0..3u64 {
        let arrival = Arrival {
            account: ((*next_id + k) % 70) as u32, // some beyond accounts_max
            budget_us: 1_000 * ((*next_id + k) % 200),
            critical: k == 0,
            critical_entitled: ms.is_multiple_of(2),
        };
        let request = Request {
            id: *next_id,
            _frame: [0; 48],
        };
        *next_id += 1;
        match rig.queue.push(request, arrival, now) {
            Ok(None) => {}
            Ok(Some(_)) | Err(_) => rig.sheds += 1,
        }
    }
    let mut sheds = 0;
    if rig.limit.try_acquire() {
        let served = rig.queue.pop(now, |_shed| sheds += 1);
        rig.served += served.map_or(0, |r| u64::from(r.request.id > 0));
        rig.limit
            .on_sample(2 * NS_PER_MS, rig.limit.inflight(), now);
        rig.limit.release();
    }
    rig.sheds += sheds;
    let ip = IpAddr::V4(Ipv4Addr::new(10, 0, 0, (ms % 32) as u8));
    if rig.admission.on_accept(ip, now).is_ok() {
        rig.admission.on_close(ip);
    }
    let _ = rig.admission.on_logon(now);
    let _ = rig.admission.on_symbol_list(now);
    if rig.admission.on_session_open(3).is_ok() {
        rig.admission.on_session_close(3);
    }
}

#[test]
fn steady_state_overload_control_allocates_nothing() {
    let mut rig = rig();
    let mut next_id = 0;
    // Warm-up: every address is tracked, every path taken once.
    for ms in 0..2_000 {
        one_ms(&mut rig, ms, &mut next_id);
    }
    let allocations = allocations_during(|| {
        for ms in 2_000..20_000 {
            one_ms(&mut rig, ms, &mut next_id);
        }
    });
    assert_eq!(allocations, 0);
    // The scenario really exercised the protective paths.
    let snap = rig.queue.stats().snapshot();
    assert!(rig.sheds > 10_000 && rig.served > 10_000);
    assert!(snap.overload_episodes > 0);
    assert!(snap.expired() > 0);
}

#[test]
fn counting_allocator_sees_allocations() {
    let n = allocations_during(|| {
        let v: Vec<u64> = std::hint::black_box(Vec::with_capacity(8));
        drop(v);
    });
    assert_eq!(n, 1);
}
