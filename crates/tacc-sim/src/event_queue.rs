//! The pending-event queue: pops events in (time, insertion order), integer nanoseconds.
//!
//! A timing wheel: most events are due within tens of microseconds (serialization,
//! propagation), so the next 262 us are cut into `SLOTS` slots of `SLOT_NS` each, a ring
//! that turns with the clock. A push links its event at the tail of its slot's list; a pop
//! takes the first occupied slot from a bitmap and, from that slot's few events, the earliest,
//! first linked among equal times. A slot holding many (a large topology puts hundreds in
//! one) is sorted once, stably, and kept sorted while it drains. Events beyond the wheel's
//! reach (retransmission timers, flow starts) wait in a binary heap and move onto the wheel,
//! in order, as it turns to cover them: before anything else can be pushed there, so every
//! slot's list stays in insertion order. This replaces a binary heap's unpredictable sift at every push and pop by a few
//! bit operations.
//!
//! Time never goes back: nothing is scheduled before the last popped time.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Width of a slot: most slots hold one event or none.
const SLOT_NS: u64 = 256;
/// Slots in the ring (at most 64 x 64: one summary word covers their occupancy words). A
/// larger ring reaches further but stays less in the cache, and measured no faster.
const SLOTS: usize = 1024;
const NIL: u32 = u32::MAX;
/// A slot's list up to this long is scanned for its earliest event at each pop; a longer one
/// is sorted once.
const SCAN_MAX: u32 = 8;

#[derive(Clone, Copy)]
struct Node<T> {
    at: u64,
    /// Next node in the slot's list, or in the free list.
    next: u32,
    item: T,
}

pub struct EventQueue<T> {
    /// The last popped time.
    last: u64,
    /// The slot of `last`: the wheel covers slots `now_slot .. now_slot + SLOTS`.
    now_slot: u64,
    /// (head, tail) node of each ring position's list, `NIL` when empty. Fixed-size arrays:
    /// a ring position (`% SLOTS`) indexes them without a bounds check.
    lists: Box<[(u32, u32); SLOTS]>,
    /// Bit `r % 64` of word `r / 64`: ring position `r` has events.
    occupied: [u64; SLOTS / 64],
    /// Bit `w`: `occupied[w]` is not zero.
    summary: u64,
    /// Like `occupied`: ring position `r`'s list has been put in (time, insertion) order
    /// and is kept so. A slot is sorted when a pop finds it long, and stays sorted while it
    /// holds two events or more; a dense slot (a large topology puts hundreds of events in
    /// one) then pops in constant time instead of a scan per pop.
    sorted: [u64; SLOTS / 64],
    /// Reused by `sort_slot`.
    scratch: Vec<u32>,
    /// Event storage, reused through the free list.
    nodes: Vec<Node<T>>,
    free: u32,
    /// Events beyond the wheel: (time, insertion sequence, node).
    later: BinaryHeap<Reverse<(u64, u64, u32)>>,
    later_seq: u64,
    /// The earliest time in `later` (`u64::MAX` when empty): the wheel's turn checks it alone.
    later_min: u64,
    len: usize,
}

impl<T: Copy> Default for EventQueue<T> {
    fn default() -> Self {
        EventQueue {
            last: 0,
            now_slot: 0,
            lists: Box::new([(NIL, NIL); SLOTS]),
            occupied: [0; SLOTS / 64],
            summary: 0,
            sorted: [0; SLOTS / 64],
            scratch: Vec::new(),
            nodes: Vec::new(),
            free: NIL,
            later: BinaryHeap::new(),
            later_seq: 0,
            later_min: u64::MAX,
            len: 0,
        }
    }
}

impl<T: Copy> EventQueue<T> {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Adds an event at time `at`, after every event already queued at that time.
    ///
    /// Panics if `at` is before the last popped time: the simulation would go back in time.
    #[inline]
    pub fn push(&mut self, at: u64, item: T) {
        assert!(
            at >= self.last,
            "event scheduled in the past: at {at} ns, now {} ns",
            self.last
        );
        self.len += 1;
        let node = Node {
            at,
            next: NIL,
            item,
        };
        let id = if self.free == NIL {
            self.nodes.push(node);
            (self.nodes.len() - 1) as u32
        } else {
            let id = self.free;
            self.free = self.nodes[id as usize].next;
            self.nodes[id as usize] = node;
            id
        };
        let slot = at / SLOT_NS;
        if slot - self.now_slot < SLOTS as u64 {
            self.link(id, slot);
        } else {
            self.later_seq += 1;
            self.later.push(Reverse((at, self.later_seq, id)));
            self.later_min = self.later_min.min(at);
        }
    }

    /// Removes and returns the earliest event if its time is at most `end`.
    #[inline]
    pub fn pop_until(&mut self, end: u64) -> Option<(u64, T)> {
        let r = match self.first_occupied() {
            Some(r) => r,
            None => {
                // The wheel is empty: turn it to the first later event.
                let &Reverse((at, _, _)) = self.later.peek()?;
                if at > end {
                    return None;
                }
                self.now_slot = at / SLOT_NS;
                self.take_later();
                self.first_occupied()
                    .expect("a later event is on the wheel")
            }
        };
        // Always below SLOTS; saying so spares the arrays' bounds checks.
        let r = r % SLOTS;
        let (head, tail) = self.lists[r];
        let first = self.nodes[head as usize];
        let (best, best_at, item) = if head == tail {
            // The slot's only event (the common case: most slots hold one at most).
            if first.at > end {
                return None;
            }
            self.lists[r] = (NIL, NIL);
            self.clear(r);
            (head, first.at, first.item)
        } else {
            self.take_earliest(r, end)?
        };
        self.nodes[best as usize].next = self.free;
        self.free = best;
        self.len -= 1;
        self.last = best_at;
        if best_at / SLOT_NS != self.now_slot {
            self.now_slot = best_at / SLOT_NS;
            if self.later_min < self.reach() {
                self.take_later();
            }
        }
        Some((best_at, item))
    }

    /// Unlinks the earliest of the events (two or more) of ring position `r`, the first
    /// linked among equal times, if it is due by `end`: (node, time, item).
    fn take_earliest(&mut self, r: usize, end: u64) -> Option<(u32, u64, T)> {
        let bit = 1 << (r % 64);
        let head = self.lists[r].0;
        // The head of a sorted list is the earliest, and so is a head at the current time (a
        // burst of events at one time pops without a scan).
        let (best, prev) =
            if self.sorted[r / 64] & bit != 0 || self.nodes[head as usize].at == self.last {
                (head, NIL)
            } else if let Some(found) = self.scan_short(head) {
                found
            } else {
                self.sort_slot(r);
                (self.lists[r].0, NIL)
            };
        let node = self.nodes[best as usize];
        if node.at > end {
            return None;
        }
        // At least one event stays in the slot.
        if prev == NIL {
            self.lists[r].0 = node.next;
        } else {
            self.nodes[prev as usize].next = node.next;
        }
        if self.lists[r].1 == best {
            self.lists[r].1 = prev;
        }
        if self.lists[r].0 == self.lists[r].1 {
            // One event left: the single-event pop takes it, and the slot's next events
            // start an unsorted list.
            self.sorted[r / 64] &= !bit;
        }
        Some((best, node.at, node.item))
    }

    /// The earliest event of the list from `head` and the node before it (`NIL`: none), if
    /// the list is at most `SCAN_MAX` long: cheaper than sorting a short list.
    fn scan_short(&self, head: u32) -> Option<(u32, u32)> {
        let (mut best, mut best_prev) = (head, NIL);
        let mut best_at = self.nodes[head as usize].at;
        let (mut prev, mut cur) = (head, self.nodes[head as usize].next);
        let mut n = 1;
        while cur != NIL {
            n += 1;
            if n > SCAN_MAX {
                return None;
            }
            let node = &self.nodes[cur as usize];
            if node.at < best_at {
                (best, best_prev, best_at) = (cur, prev, node.at);
            }
            (prev, cur) = (cur, node.next);
        }
        Some((best, best_prev))
    }

    /// Puts ring position `r`'s list in time order, keeping the list order (insertion
    /// order) among equal times.
    fn sort_slot(&mut self, r: usize) {
        let mut ids = std::mem::take(&mut self.scratch);
        let mut cur = self.lists[r].0;
        while cur != NIL {
            ids.push(cur);
            cur = self.nodes[cur as usize].next;
        }
        ids.sort_by_key(|&id| self.nodes[id as usize].at); // stable
        for pair in ids.windows(2) {
            self.nodes[pair[0] as usize].next = pair[1];
        }
        let (first, last) = (ids[0], ids[ids.len() - 1]);
        self.nodes[last as usize].next = NIL;
        self.lists[r] = (first, last);
        self.sorted[r / 64] |= 1 << (r % 64);
        ids.clear();
        self.scratch = ids;
    }

    /// Likely the next two events to pop: the head of the first occupied slot's list and the
    /// node after it, which are the earliest when the slot is sorted (a hint for prefetching
    /// what they will touch, not an order).
    #[inline]
    pub fn peek_hint(&self) -> (Option<&T>, Option<&T>) {
        let Some(r) = self.first_occupied() else {
            return (None, None);
        };
        let node = &self.nodes[self.lists[r % SLOTS].0 as usize];
        let after = (node.next != NIL).then(|| &self.nodes[node.next as usize]);
        if let Some(after) = after.filter(|a| a.next != NIL) {
            // A dense slot's list goes from node to node across the whole array.
            crate::prefetch(self.nodes.as_ptr().wrapping_add(after.next as usize));
        }
        (Some(&node.item), after.map(|a| &a.item))
    }

    /// Removes and returns the earliest event.
    pub fn pop(&mut self) -> Option<(u64, T)> {
        self.pop_until(u64::MAX)
    }

    /// Appends a node to the list of its time's slot (inserts it in order if that slot is
    /// sorted, which only the slot being popped can be).
    #[inline]
    fn link(&mut self, id: u32, slot: u64) {
        let r = slot as usize % SLOTS;
        let bit = 1 << (r % 64);
        // Most slots are empty: the bitmap says so without loading the list, which has often
        // left the cache since the ring last came round.
        if self.occupied[r / 64] & bit == 0 {
            self.occupied[r / 64] |= bit;
            self.summary |= 1 << (r / 64);
            self.lists[r] = (id, id);
        } else if self.sorted[r / 64] & bit != 0 {
            self.insert_sorted(r, id);
        } else {
            let tail = std::mem::replace(&mut self.lists[r].1, id);
            self.nodes[tail as usize].next = id;
        }
    }

    /// Links `id` into ring position `r`'s sorted list after every event due at or before
    /// its time.
    fn insert_sorted(&mut self, r: usize, id: u32) {
        let at = self.nodes[id as usize].at;
        let (head, tail) = self.lists[r];
        if at >= self.nodes[tail as usize].at {
            self.nodes[tail as usize].next = id;
            self.lists[r].1 = id;
        } else if at < self.nodes[head as usize].at {
            self.nodes[id as usize].next = head;
            self.lists[r].0 = id;
        } else {
            let mut prev = head;
            loop {
                let next = self.nodes[prev as usize].next;
                // The tail is later than `at`, so `next` is never NIL here.
                if self.nodes[next as usize].at > at {
                    self.nodes[id as usize].next = next;
                    self.nodes[prev as usize].next = id;
                    return;
                }
                prev = next;
            }
        }
    }

    /// Marks ring position `r` empty.
    #[inline]
    fn clear(&mut self, r: usize) {
        let w = r / 64;
        self.occupied[w] &= !(1 << (r % 64));
        if self.occupied[w] == 0 {
            self.summary &= !(1 << w);
        }
    }

    /// Ring position of the first occupied slot from `now_slot` on (wrapping round).
    #[inline]
    fn first_occupied(&self) -> Option<usize> {
        let p = self.now_slot as usize % SLOTS;
        let w = p / 64;
        let here = self.occupied[w] & (!0u64 << (p % 64));
        if here != 0 {
            return Some(w * 64 + here.trailing_zeros() as usize);
        }
        // Words after `w`, else from the start of the ring: later slots, one turn on (the
        // bits of word `w` before `p` included, those after it being empty).
        let after = self.summary & (!1u64).checked_shl(w as u32).unwrap_or(0);
        let words = if after != 0 { after } else { self.summary };
        if words == 0 {
            return None;
        }
        let w = words.trailing_zeros() as usize;
        Some(w * 64 + self.occupied[w].trailing_zeros() as usize)
    }

    /// The first time beyond the wheel.
    #[inline]
    fn reach(&self) -> u64 {
        (self.now_slot + SLOTS as u64) * SLOT_NS
    }

    /// Moves the later events the wheel now reaches onto it, in (time, insertion) order.
    fn take_later(&mut self) {
        let reach = self.reach();
        while let Some(&Reverse((at, _, id))) = self.later.peek() {
            if at >= reach {
                self.later_min = at;
                return;
            }
            self.later.pop();
            self.link(id, at / SLOT_NS);
        }
        self.later_min = u64::MAX;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn pops_by_time_then_insertion() {
        let mut q = EventQueue::default();
        for (i, at) in [30u64, 10, 20, 10, 30, 0, 10].into_iter().enumerate() {
            q.push(at, i);
        }
        let order: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
        assert_eq!(
            order,
            [(0, 5), (10, 1), (10, 3), (10, 6), (20, 2), (30, 0), (30, 4)]
        );
        assert!(q.is_empty());
    }

    #[test]
    fn events_at_the_current_time_go_after_those_already_there() {
        let mut q = EventQueue::default();
        q.push(5, 'a');
        q.push(5, 'b');
        q.push(9, 'z');
        assert_eq!(q.pop(), Some((5, 'a')));
        q.push(5, 'c');
        assert_eq!(q.pop(), Some((5, 'b')));
        assert_eq!(q.pop(), Some((5, 'c')));
        assert_eq!(q.pop(), Some((9, 'z')));
        assert_eq!(q.pop(), None);
    }

    #[test]
    fn far_events_keep_their_order_when_the_wheel_reaches_them() {
        let far = SLOTS as u64 * SLOT_NS * 3 + 7;
        let mut q = EventQueue::default();
        q.push(far, 1);
        q.push(far, 2);
        q.push(far - SLOT_NS * SLOTS as u64, 3);
        assert_eq!(q.pop(), Some((far - SLOT_NS * SLOTS as u64, 3)));
        // `far` is on the wheel now: a new event at that time goes after the older ones.
        q.push(far, 4);
        q.push(far - 1, 5);
        let order: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
        assert_eq!(order, [(far - 1, 5), (far, 1), (far, 2), (far, 4)]);
    }

    #[test]
    fn a_burst_at_one_time_pops_in_insertion_order() {
        let mut q = EventQueue::default();
        q.push(3, usize::MAX);
        for i in 0..1000 {
            q.push(5, i);
        }
        q.push(4, usize::MAX - 1);
        assert_eq!(q.pop(), Some((3, usize::MAX)));
        assert_eq!(q.pop(), Some((4, usize::MAX - 1)));
        for i in 0..1000 {
            assert_eq!(q.pop(), Some((5, i)));
            if i % 100 == 0 {
                q.push(5, 1000 + i);
            }
        }
        for i in (0..1000).step_by(100) {
            assert_eq!(q.pop(), Some((5, 1000 + i)));
        }
        assert!(q.is_empty());
    }

    #[test]
    fn a_dense_slot_pops_in_order_while_events_land_in_it() {
        // Hundreds of events in one slot (sorted at the first pop), and more arriving in
        // that slot while it drains, before, among and after the ones waiting.
        let mut q = EventQueue::default();
        let mut reference = BinaryHeap::new();
        let mut x = 12345u64;
        let mut next = || {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            x >> 33
        };
        for seq in 0..300 {
            let at = SLOT_NS * 4 + next() % SLOT_NS;
            q.push(at, seq);
            reference.push(Reverse((at, seq)));
        }
        let mut seq = 300;
        while let Some(Reverse(want)) = reference.pop() {
            assert_eq!(q.pop(), Some(want));
            if seq < 600 {
                let at = want.0 + next() % 40;
                q.push(at, seq);
                reference.push(Reverse((at, seq)));
                seq += 1;
            }
        }
        assert!(q.is_empty());
    }

    #[test]
    fn pop_until_leaves_later_events_in_order() {
        let mut q = EventQueue::default();
        let far = SLOTS as u64 * SLOT_NS * 2;
        q.push(7, 1);
        q.push(3, 2);
        q.push(7, 3);
        q.push(far, 6);
        assert_eq!(q.pop_until(5), Some((3, 2)));
        assert_eq!(q.pop_until(5), None);
        assert_eq!(q.len(), 3);
        q.push(7, 4);
        assert_eq!(q.pop_until(7), Some((7, 1)));
        assert_eq!(q.pop_until(7), Some((7, 3)));
        assert_eq!(q.pop_until(7), Some((7, 4)));
        assert_eq!(q.pop_until(far - 1), None);
        q.push(far - 1, 5);
        assert_eq!(q.pop_until(far - 1), Some((far - 1, 5)));
        assert_eq!(q.pop_until(u64::MAX), Some((far, 6)));
        assert_eq!(q.pop_until(u64::MAX), None);
    }

    #[test]
    #[should_panic(expected = "in the past")]
    fn scheduling_in_the_past_panics() {
        let mut q = EventQueue::default();
        q.push(10, ());
        q.pop();
        q.push(9, ());
    }

    /// An operation on both queues: push at `now + delay`, or pop.
    #[derive(Clone, Debug)]
    enum Op {
        Push(u64),
        Pop,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            // The same time, within a slot, near (serialization, propagation), around the
            // wheel's reach, far timers, anything.
            2 => Just(Op::Push(0)),
            2 => (1..SLOT_NS * 2).prop_map(Op::Push),
            4 => (1u64..50_000).prop_map(Op::Push),
            2 => (SLOT_NS * (SLOTS as u64 - 2)..SLOT_NS * (SLOTS as u64 + 2)).prop_map(Op::Push),
            1 => (1u64..1_000_000_000).prop_map(Op::Push),
            1 => (0u64..u64::MAX / 1024).prop_map(Op::Push),
            8 => Just(Op::Pop),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

        /// Interleaved pushes and pops give the same events in the same order as a binary
        /// heap keyed by (time, insertion sequence).
        #[test]
        fn matches_a_binary_heap(ops in proptest::collection::vec(op(), 1..400)) {
            let mut q = EventQueue::default();
            let mut reference = BinaryHeap::new();
            let mut now = 0u64;
            for (seq, op) in ops.into_iter().enumerate() {
                match op {
                    Op::Push(delay) => {
                        q.push(now + delay, seq);
                        reference.push(Reverse((now + delay, seq)));
                    }
                    Op::Pop => {
                        let want = reference.pop().map(|Reverse(e)| e);
                        prop_assert_eq!(q.pop(), want);
                        if let Some((at, _)) = want {
                            now = at;
                        }
                    }
                }
                prop_assert_eq!(q.len(), reference.len());
            }
            while let Some(Reverse(want)) = reference.pop() {
                prop_assert_eq!(q.pop(), Some(want));
            }
            prop_assert_eq!(q.pop(), None);
        }
    }
}
