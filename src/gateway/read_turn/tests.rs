//! The read order on a model of a shard: connections with requests
//! waiting (a flood's: without end), read by the rules of `ReadTurn`, with
//! the shard's budgets. No sockets, no time.

use proptest::prelude::*;

use super::*;
use crate::gateway::queries::{REQUESTS_PER_CONN_TURN as PER_CONN, REQUESTS_PER_TURN};

/// One listed connection of the model.
#[derive(Clone, Debug)]
struct Model {
    account: Option<u32>,
    /// Requests waiting (u32::MAX: a flood).
    pending: u32,
    listed: bool,
    /// Requests it handled, per turn.
    handled: Vec<usize>,
}

struct Shard {
    conns: Vec<Model>,
    list: Vec<u32>,
    left: usize,
    turn: usize,
}

impl Reader for Shard {
    fn account_of(&self, i: u32) -> Option<Option<u32>> {
        Some(self.conns[i as usize].account)
    }
    fn turn_left(&self) -> usize {
        self.left
    }
    fn read(&mut self, i: u32, allow: usize) -> usize {
        let c = &mut self.conns[i as usize];
        assert!(c.listed, "read while not listed");
        c.listed = false;
        let n = allow.min(self.left).min(c.pending as usize);
        if c.pending != u32::MAX {
            c.pending -= n as u32;
        }
        self.left -= n;
        c.handled[self.turn] += n;
        if c.pending > 0 {
            c.listed = true;
            self.list.push(i);
        }
        n
    }
}

fn shard(conns: &[(Option<u32>, u32)], turns: usize) -> Shard {
    Shard {
        conns: conns
            .iter()
            .map(|&(account, pending)| Model {
                account,
                pending,
                listed: pending > 0,
                handled: vec![0; turns],
            })
            .collect(),
        list: (0..conns.len() as u32)
            .filter(|&i| conns[i as usize].1 > 0)
            .collect(),
        left: 0,
        turn: 0,
    }
}

/// Runs `turns` turns the way `Shard::read_again` does.
fn run(s: &mut Shard, turns: usize) {
    let mut rt = ReadTurn::new(s.conns.len());
    let mut next = Vec::with_capacity(s.conns.len());
    for t in 0..turns {
        s.turn = t;
        s.left = REQUESTS_PER_TURN;
        std::mem::swap(&mut rt.current, &mut s.list);
        rt.run(s, PER_CONN);
        rt.next_list(&s.list, &mut next);
        std::mem::swap(&mut s.list, &mut next);
        // Every listed connection is in the list exactly once.
        let listed = s.conns.iter().filter(|c| c.listed).count();
        assert_eq!(s.list.len(), listed, "turn {t}: list {:?}", s.list);
    }
}

#[test]
fn a_quiet_connection_behind_many_flood_connections_is_read_every_turn() {
    // 72 flood connections of account 1 listed ahead of one quiet
    // connection of account 2 (the fixed order starved it).
    let mut conns = vec![(Some(1), u32::MAX); 72];
    conns.push((Some(2), 40));
    let mut s = shard(&conns, 10);
    run(&mut s, 10);
    let quiet = &s.conns[72];
    // 8 a turn (its per-connection bound), from the first turn on.
    assert_eq!(&quiet.handled[..5], &[8, 8, 8, 8, 8]);
    // The flood still gets the rest of every turn's budget.
    for t in 0..10 {
        let flood: usize = s.conns[..72].iter().map(|c| c.handled[t]).sum();
        assert_eq!(flood + quiet.handled[t], REQUESTS_PER_TURN, "turn {t}");
    }
}

#[test]
fn flood_connections_take_turns_round_robin() {
    let mut s = shard(&vec![(Some(1), u32::MAX); 20], 20);
    run(&mut s, 20);
    // 32 a turn at 8 each: 4 connections a turn, each read every 5 turns.
    for c in &s.conns {
        let reads = c.handled.iter().filter(|&&n| n > 0).count();
        assert_eq!(reads, 4, "{:?}", c.handled);
    }
}

#[test]
fn a_lone_flood_gets_the_whole_budget() {
    let mut s = shard(&[(Some(1), u32::MAX); 6], 3);
    run(&mut s, 3);
    for t in 0..3 {
        let n: usize = s.conns.iter().map(|c| c.handled[t]).sum();
        assert_eq!(n, REQUESTS_PER_TURN);
    }
}

fn case() -> impl Strategy<Value = Vec<(Option<u32>, u32)>> {
    let account = prop_oneof![Just(None), (0u32..6).prop_map(Some)];
    let pending = prop_oneof![Just(u32::MAX), 0u32..40];
    prop::collection::vec((account, pending), 1..80)
}

proptest! {
    /// Over generated shards: every listed connection is read within as
    /// many turns as connections are listed (it moves up every turn); a
    /// turn never hands over more than its budget, and uses all of it
    /// while enough is waiting.
    #[test]
    fn every_listed_connection_is_read_within_a_bound(conns in case()) {
        let turns = 90;
        let mut s = shard(&conns, turns);
        let listed = s.list.len();
        run(&mut s, turns);
        let bound = listed.max(1);
        for (i, c) in s.conns.iter().enumerate() {
            if conns[i].1 == 0 {
                continue;
            }
            let first = c.handled.iter().position(|&n| n > 0);
            prop_assert!(first.is_some_and(|t| t < bound), "conn {i} first read {first:?}, bound {bound}");
        }
        for t in 0..turns {
            let n: usize = s.conns.iter().map(|c| c.handled[t]).sum();
            prop_assert!(n <= REQUESTS_PER_TURN);
        }
        // With enough flood connections to fill it, every turn is full.
        if conns.iter().filter(|c| c.1 == u32::MAX).count() * PER_CONN >= REQUESTS_PER_TURN {
            for t in 0..turns {
                let n: usize = s.conns.iter().map(|c| c.handled[t]).sum();
                prop_assert_eq!(n, REQUESTS_PER_TURN, "turn {}", t);
            }
        }
    }

    /// One quiet connection (its own account, a few requests) among
    /// floods of at most three other accounts is served whole in its
    /// first turn, wherever it stands in the list.
    #[test]
    fn a_quiet_account_beside_three_flooding_ones_is_served_in_one_turn(
        floods in prop::collection::vec(0u32..3, 1..100),
        at in 0usize..100,
        pending in 1u32..=(PER_CONN as u32),
    ) {
        let mut conns: Vec<(Option<u32>, u32)> =
            floods.iter().map(|&a| (Some(a), u32::MAX)).collect();
        let at = at.min(conns.len());
        conns.insert(at, (Some(9), pending));
        let mut s = shard(&conns, 1);
        run(&mut s, 1);
        prop_assert_eq!(s.conns[at].handled[0], pending as usize);
    }
}
