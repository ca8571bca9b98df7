//! The slab's intrusive chains: each slot is linked into its lane and its
//! account's lane by index, so push, pop at either end and removal from
//! the middle are O(1) without allocation.

use super::NIL;

#[derive(Debug, Clone, Copy)]
pub(super) struct Links {
    pub(super) prev: u32,
    pub(super) next: u32,
}

pub(super) const UNLINKED: Links = Links {
    prev: NIL,
    next: NIL,
};

/// Head (oldest) and tail (newest) of one intrusive chain.
#[derive(Debug, Clone, Copy)]
pub(super) struct List {
    pub(super) head: u32,
    pub(super) tail: u32,
    pub(super) len: u32,
}

pub(super) const EMPTY_LIST: List = List {
    head: NIL,
    tail: NIL,
    len: 0,
};

#[derive(Debug, Clone, Copy)]
pub(super) enum Chain {
    Lane,
    Account,
}

pub(super) struct Slot<T> {
    pub(super) request: Option<T>,
    pub(super) account: u32,
    pub(super) critical: bool,
    pub(super) arrival_ns: u64,
    pub(super) deadline_ns: u64,
    /// Lane chain; also the free-list link (`next`) while the slot is free.
    pub(super) lane: Links,
    pub(super) account_lane: Links,
}

fn links<T>(slot: &mut Slot<T>, chain: Chain) -> &mut Links {
    match chain {
        Chain::Lane => &mut slot.lane,
        Chain::Account => &mut slot.account_lane,
    }
}

pub(super) fn push_back<T>(slots: &mut [Slot<T>], list: &mut List, idx: u32, chain: Chain) {
    let tail = list.tail;
    *links(&mut slots[idx as usize], chain) = Links {
        prev: tail,
        next: NIL,
    };
    if tail == NIL {
        list.head = idx;
    } else {
        links(&mut slots[tail as usize], chain).next = idx;
    }
    list.tail = idx;
    list.len += 1;
}

pub(super) fn unlink<T>(slots: &mut [Slot<T>], list: &mut List, idx: u32, chain: Chain) {
    let Links { prev, next } = *links(&mut slots[idx as usize], chain);
    if prev == NIL {
        debug_assert_eq!(list.head, idx);
        list.head = next;
    } else {
        links(&mut slots[prev as usize], chain).next = next;
    }
    if next == NIL {
        debug_assert_eq!(list.tail, idx);
        list.tail = prev;
    } else {
        links(&mut slots[next as usize], chain).prev = prev;
    }
    *links(&mut slots[idx as usize], chain) = UNLINKED;
    list.len -= 1;
}
