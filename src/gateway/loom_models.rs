//! loom models of the session hand-over between shards (`moves.rs`,
//! `lanes.rs`; build with `--cfg pricewire_loom`).
//!
//! The shard that runs the engine moves a session to another shard while
//! the engine keeps publishing on that same thread and the receiver runs
//! its own loop. The models check the hand-over's invariants over every
//! interleaving of the two threads (within [`PREEMPTIONS`]):
//!
//! - **no session lost or duplicated**: after the receiver stops waiting,
//!   the session is in exactly one shard, and the lane is empty;
//! - **no price gap, no duplicate, across a move**: the moved session and
//!   a session already on the receiver each get every published sequence
//!   once, in order;
//! - **moves closed on exit**: the receiver stops waiting for sessions only
//!   after the sender closed the moves and it took every session sent;
//! - **the last slot**: a move and an accept racing for one slot of room
//!   never both get it, and the loser keeps its session.
//!
//! Production code in the models: the engine's [`publish_top`] into
//! [`ShardPublisher`] rings under [`SymbolInterest`] (the fence pair of
//! `engine::loom_models`), the receiver's slot room [`SlotRoom`], the exit
//! rule [`moves_settled`], the sender's [`close_moves`], the receiver's
//! doorbell and parking [`Waiter`], and the sequence rule of delivery
//! (`fanout::is_news`). The steps of a move are those of
//! `Mover::move_slot` and the receiver's turn is `Shard::drain_prices`'
//! order (the ring's fill, then the lane, then that many prices),
//! restated over plain sessions: a real one owns a socket. The lane is a
//! loom mutex over a queue, standing in for the production crossbeam
//! channel (whose atomics loom cannot see; both are linearizable queues).
//!
//! Bugs planted while writing them, each failed its model at this bound:
//! the receiver taking the lane before reading the ring's fill (a gap),
//! `moves_settled` reading the lane before the flag (a session left in
//! the lane), the receiver letting go of the mover's hold before taking
//! its own (a price missed by the moved session).

use std::collections::VecDeque;
use std::sync::Arc;

use loom::sync::Mutex;
use loom::thread;

use super::conn::Sub;
use super::fanout::is_news;
use super::lanes::{close_moves, moves_settled, SlotRoom};
use crate::engine::fanout::publish_top;
use crate::engine::{PriceTable, ShardPublisher, SymbolInterest};
use crate::model::Price;
use crate::runtime::sync::{AtomicBool, AtomicU64, Ordering};
use crate::runtime::wait::{Doorbell, WaitStrategy, Waiter};

/// loom's preemption bound (as in `engine::loom_models`).
const PREEMPTIONS: usize = 2;
/// The one symbol every session subscribes to.
const SYMBOL: u16 = 0;
/// Sequences the engine publishes in a model.
const PRICES: u64 = 3;

fn check(f: impl Fn() + Sync + Send + 'static) {
    let mut model = loom::model::Builder::new();
    if std::env::var_os("LOOM_MAX_PREEMPTIONS").is_none() {
        model.preemption_bound = Some(PREEMPTIONS);
    }
    model.check(f);
}

/// A session as the hand-over sees it: its subscription and every
/// sequence delivered to it.
struct Session {
    id: u32,
    sub: Sub,
    got: Vec<u64>,
}

impl Session {
    fn new(id: u32) -> Session {
        let sub = Sub::new(u32::from(SYMBOL), 0, super::pacer::PACE_NONE);
        Session {
            id,
            sub,
            got: Vec::new(),
        }
    }

    /// The fan-out's rule: a sequence is sent once, in order.
    fn deliver(&mut self, p: &Price) {
        if is_news(&self.sub, (p.stream_id, p.seq), false, false) {
            self.sub.last_seq = p.seq;
            self.sub.stream = p.stream_id;
            self.got.push(p.seq);
        }
    }
}

/// The hand-over lane (crossbeam's bounded channel in production).
struct Lane {
    queue: Mutex<VecDeque<Session>>,
    cap: usize,
}

impl Lane {
    fn new(cap: usize) -> Lane {
        Lane {
            queue: Mutex::new(VecDeque::new()),
            cap,
        }
    }

    fn try_send(&self, s: Session) -> Result<(), Session> {
        let mut q = self.queue.lock().unwrap();
        if q.len() >= self.cap {
            return Err(s);
        }
        q.push_back(s);
        Ok(())
    }

    fn try_recv(&self) -> Option<Session> {
        self.queue.lock().unwrap().pop_front()
    }

    fn is_empty(&self) -> bool {
        self.queue.lock().unwrap().is_empty()
    }
}

/// One shard: its sessions, its symbol interest and its engine ring.
struct Shard {
    sessions: Vec<Session>,
    interest: Arc<SymbolInterest>,
    ring: rtrb::Consumer<Price>,
    /// Sequences the engine published (see [`Shard::fill`]).
    published: Arc<AtomicU64>,
}

impl Shard {
    /// A shard with `sessions`, its ring fed by a publisher under its
    /// interest (held while it has a session, as `Fanout::hold` does).
    fn new(
        sessions: Vec<Session>,
        bell: Arc<Doorbell>,
        published: Arc<AtomicU64>,
    ) -> (Shard, ShardPublisher) {
        let interest = SymbolInterest::none(1);
        if !sessions.is_empty() {
            interest.hold(SYMBOL);
        }
        let (producer, ring) = rtrb::RingBuffer::new(PRICES as usize + 1);
        let publisher = ShardPublisher::new(producer, 1, bell);
        let publisher = publisher.with_interest(interest.clone());
        let shard = Shard {
            sessions,
            interest,
            ring,
            published,
        };
        (shard, publisher)
    }

    /// `Shard::drain_prices`: the ring's fill, then every session in the
    /// lane attached, then that many prices delivered.
    fn turn(&mut self, lane: &Lane) {
        let n = self.fill();
        while let Some(s) = lane.try_recv() {
            self.attach(s);
        }
        self.deliver(n);
    }

    /// The ring's fill. rtrb's atomics are no loom operations: the read
    /// of the engine's publish count before it (as rtrb's acquire of its
    /// tail) is what lets loom order it against the engine's pushes.
    fn fill(&self) -> usize {
        self.published.load(Ordering::SeqCst);
        self.ring.slots()
    }

    fn deliver(&mut self, n: usize) {
        for _ in 0..n {
            let p = self.ring.pop().expect("counted in the fill");
            for s in &mut self.sessions {
                s.deliver(&p);
            }
        }
    }

    /// `moves::attach` then `release_symbols`: this shard's own hold is in
    /// place before the mover's goes.
    fn attach(&mut self, s: Session) {
        if self.sessions.is_empty() {
            self.interest.hold(SYMBOL);
        }
        self.sessions.push(s);
        self.interest.release(SYMBOL);
    }

    /// `Fanout::unindex` of the session in place `k`: the shard's own
    /// hold goes with its last subscriber.
    fn detach(&mut self, k: usize) -> Session {
        let s = self.sessions.remove(k);
        if self.sessions.is_empty() {
            self.interest.release(SYMBOL);
        }
        s
    }

    /// A session that could not move is attached here again.
    fn attach_back(&mut self, s: Session) {
        if self.sessions.is_empty() {
            self.interest.hold(SYMBOL);
        }
        self.sessions.push(s);
    }

    fn count(&self, id: u32) -> usize {
        self.sessions.iter().filter(|s| s.id == id).count()
    }

    fn session(&self, id: u32) -> Option<&Session> {
        self.sessions.iter().find(|s| s.id == id)
    }
}

/// The sending shard's side of `Mover::move_slot` for its first session,
/// after its own ring is drained (step 1, `Shard::spill_one`): the
/// receiver's room and interest taken, the session detached here and
/// sent; a full lane or no room keeps it here. Returns whether it moved.
fn move_first(from: &mut Shard, lane: &Lane, room: &SlotRoom, to: &SymbolInterest) -> bool {
    while !from.ring.is_empty() {
        let n = from.fill();
        from.deliver(n);
    }
    if !room.take() {
        return false;
    }
    to.hold(SYMBOL);
    let s = from.detach(0);
    match lane.try_send(s) {
        Ok(()) => true,
        Err(s) => {
            room.give();
            to.release(SYMBOL);
            from.attach_back(s);
            false
        }
    }
}

fn price(seq: u64) -> Price {
    Price {
        symbol: SYMBOL,
        seq,
        bid: seq as i64,
        ask: seq as i64 + 1,
        ..Price::EMPTY
    }
}

/// The receiver's side: its lane, the sender's flag and its doorbell.
struct Receiving {
    lane: Arc<Lane>,
    open: Arc<AtomicBool>,
    bell: Arc<Doorbell>,
}

/// What the receiver's thread runs: turns until the moves are settled
/// (`Mover::settled`), parking on its doorbell between them (the `park`
/// strategy); `accept`: it first takes a slot for a connection of its own.
fn receive(mut shard: Shard, r: Receiving, accept: Option<Arc<SlotRoom>>) -> (Shard, bool) {
    r.bell.bind_current_thread();
    let mut waiter = Waiter::new(WaitStrategy::Park, r.bell.clone());
    let accepted = accept.is_some_and(|room| room.take());
    loop {
        shard.turn(&r.lane);
        if moves_settled(&r.open, || r.lane.is_empty()) {
            break;
        }
        let ring = &shard.ring;
        let lane = &r.lane;
        let open = &r.open;
        waiter.idle(|| !ring.is_empty() || !lane.is_empty() || !open.load(Ordering::SeqCst));
    }
    (shard, accepted)
}

/// The engine: the price table, a ring per shard, and the count of
/// sequences published (rtrb's tail, as loom sees it).
struct Engine {
    table: PriceTable,
    rings: Vec<ShardPublisher>,
    published: Arc<AtomicU64>,
}

impl Engine {
    /// The engine's publish of one sequence, then its ring of the doorbells.
    fn publish(&mut self, seq: u64) {
        publish_top(&self.table, &mut self.rings, &price(seq));
        self.published.store(seq, Ordering::SeqCst);
        for r in &mut self.rings {
            r.notify();
        }
    }
}

/// Shard 0 (with the engine) holds session 1 and moves it to shard 1
/// (which holds session 2 on the same symbol if `resident`); one price
/// before the move, the rest after, then shard 0 stops and closes the
/// moves. `slots`: shard 1's free slots; `accept`: shard 1 also accepts a
/// connection of its own.
fn hand_over(slots: u64, accept: bool, resident: bool) {
    let published = Arc::new(AtomicU64::new(0));
    let (mut s0, p0) = Shard::new(vec![Session::new(1)], Doorbell::new(), published.clone());
    let residents = if resident {
        vec![Session::new(2)]
    } else {
        vec![]
    };
    let bell = Doorbell::new();
    let (s1, p1) = Shard::new(residents, bell.clone(), published.clone());
    let to = s1.interest.clone();
    let lane = Arc::new(Lane::new(1));
    let open = Arc::new(AtomicBool::new(true));
    let room = Arc::new(SlotRoom::new(slots));
    let receiver = {
        let r = Receiving {
            lane: lane.clone(),
            open: open.clone(),
            bell: bell.clone(),
        };
        let accept = accept.then(|| room.clone());
        thread::spawn(move || receive(s1, r, accept))
    };
    let mut engine = Engine {
        table: PriceTable::new(1, 1),
        rings: vec![p0, p1],
        published,
    };
    engine.publish(1);
    let moved = move_first(&mut s0, &lane, &room, &to);
    if moved {
        bell.ring();
    }
    for seq in 2..=PRICES {
        engine.publish(seq);
    }
    // Shard 0's turns after the move, then it stops.
    let n = s0.fill();
    s0.deliver(n);
    close_moves(&open, [&*bell].into_iter());
    let (mut s1, accepted) = receiver.join().unwrap();
    assert!(
        lane.is_empty(),
        "the receiver stopped with a session in the lane"
    );
    // The receiver's later turns.
    s1.turn(&lane);
    let every: Vec<u64> = (1..=PRICES).collect();
    assert_eq!(s0.count(1) + s1.count(1), 1, "session 1 lost or duplicated");
    assert_eq!(moved, s1.count(1) == 1, "moved, yet not on the receiver");
    let one = s1.session(1).or(s0.session(1)).unwrap();
    assert_eq!(
        one.got, every,
        "session 1: a gap or a duplicate across the move"
    );
    if let Some(two) = s1.session(2) {
        assert_eq!(two.got, every, "session 2");
    }
    // Every slot taken is in use: none given twice, none leaked.
    let used = u64::from(moved) + u64::from(accepted);
    assert!(used <= slots, "more slots used than there were");
    assert_eq!(room.available(), slots - used, "room leaked or given twice");
}

/// Prices already in the receiver's ring for its own session reach the
/// moved one at most once (by sequence).
#[test]
fn loom_a_moved_session_gets_every_price_once_beside_a_resident_one() {
    check(|| hand_over(4, false, true));
}

/// Alone on the receiver, the moved session's symbol is held there
/// throughout: the receiver's own hold comes before the mover's goes.
#[test]
fn loom_a_moved_session_alone_on_its_new_shard_misses_no_price() {
    check(|| hand_over(4, false, false));
}

#[test]
fn loom_a_move_racing_an_accept_for_the_last_slot_loses_no_session() {
    check(|| hand_over(1, true, true));
}
