//! A shard's connections: a fixed-capacity slab (allocated at start, a
//! slot per connection) and the lists of connections to write and to read
//! again this turn (sized to the slab, so pushing never allocates).

use super::conn::Conn;

pub(super) struct Slab {
    pub(super) conns: Vec<Option<Conn>>,
    pub(super) free: Vec<u32>,
    /// One past the highest slot in use: the timer sweep walks
    /// `conns[..live_end]`, not every slot of the (large) slab.
    pub(super) live_end: usize,
    pub(super) write_list: Vec<u32>,
    /// Connections with unread input left after their per-turn budget.
    pub(super) read_list: Vec<u32>,
}

impl Slab {
    pub(super) fn new(cap: usize) -> Slab {
        Slab {
            conns: (0..cap).map(|_| None).collect(),
            free: (0..cap as u32).rev().collect(),
            live_end: 0,
            write_list: Vec::with_capacity(cap),
            read_list: Vec::with_capacity(cap),
        }
    }

    /// Slots in use.
    pub(super) fn in_use(&self) -> usize {
        self.conns.len() - self.free.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.free.len() == self.conns.len()
    }

    /// Puts `conn` in slot `i` (taken from `free` by the caller).
    pub(super) fn put(&mut self, i: usize, conn: Conn) {
        debug_assert!(self.conns[i].is_none());
        self.conns[i] = Some(conn);
        self.live_end = self.live_end.max(i + 1);
    }

    /// Takes the connection out of slot `i` and frees the slot.
    pub(super) fn take(&mut self, i: usize) -> Option<Conn> {
        let conn = self.conns[i].take()?;
        self.free.push(i as u32);
        while self.live_end > 0 && self.conns[self.live_end - 1].is_none() {
            self.live_end -= 1;
        }
        Some(conn)
    }

    /// Queues connection `i` for a write this turn (once).
    #[inline]
    pub(super) fn queue_write(&mut self, i: usize) {
        if let Some(c) = self.conns[i].as_mut() {
            if !c.in_write_list {
                c.in_write_list = true;
                self.write_list.push(i as u32);
            }
        }
    }

    /// Queues connection `i` to read again next turn (once).
    pub(super) fn queue_read(&mut self, i: usize) {
        if let Some(c) = self.conns[i].as_mut() {
            if !c.in_read_list {
                c.in_read_list = true;
                self.read_list.push(i as u32);
            }
        }
    }
}
