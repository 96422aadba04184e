//! The pending-event queue: pops events in (time, insertion order), integer nanoseconds.
//!
//! A timing wheel: most events are due within tens of microseconds (serialization,
//! propagation, queueing), so the next 1 ms is cut into `SLOTS` slots of `SLOT_NS` each, a ring
//! that turns with the clock. A push appends its event to its slot (the first in the ring's
//! own array, the rest in the slot's overflow array); when the clock reaches a slot, its
//! events are sorted once, stably, by time, and pops read them in order. An
//! event pushed into the slot being drained is inserted in order. This replaces a binary
//! heap's unpredictable sift at every push and pop by a few bit operations. A slot's events
//! are contiguous: a large topology puts hundreds in each slot, and sorting them as a linked
//! list across memory cost a k = 16 fat tree a sixth of its time.
//!
//! Events beyond the wheel's reach (retransmission and delayed-ACK timers, flow starts) wait
//! in a second ring of `FAR_SLOTS` far slots, each as wide as the wheel's whole reach (about a
//! second ahead in all), appended and sorted once in the same way; only what lies further
//! still waits in a binary heap (`Beyond`). They move onto the wheel, in order, as it turns to
//! cover them: before anything else can be pushed there, so every slot's array stays in
//! insertion order.
//!
//! Time never goes back: nothing is scheduled before the last popped time.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// Width of a slot: most slots hold one event or none.
const SLOT_NS: u64 = 256;
/// Slots in the ring (at most 64 x 64: one summary word covers their occupancy words): 1 ms
/// ahead. A queued packet's arrival is scheduled when it is admitted, behind the queue's
/// whole wait: 100 packets queued at 1 Gb/s are 1.2 ms. With 1,024 slots (262 us) those
/// arrivals fell into the heap; 4,096 ran the 64-flow dumbbell in 0.88 of the time and the
/// k = 16 fat tree in 0.92.
const SLOTS: usize = 4096;
/// The first events of each slot are stored in the ring itself, in one flat array: a push
/// finds its place from the slot's count alone instead of loading a per-slot array's header
/// and then its buffer, two cache misses where most slots hold one event or none. Events
/// beyond these go to the slot's overflow array. One measured faster than two or four (the
/// 64-flow dumbbell: 0.93, 0.95 and 0.94 of the time with every event in the arrays).
const INLINE: usize = 1;
/// A slot of up to this many events is sorted by comparison: few branches to mispredict.
const COMPARISON_SORT_MAX: usize = 4;
/// A slot of up to this many events is sorted by ranking its events' keys (all pairs
/// compared), a longer one by counting its events per nanosecond. A key is the time's offset
/// in the slot above the event's position (5 bits), in an `i16`: signed, for one vector compare.
const RANK_SORT_MAX: usize = 32;
const _: () = assert!(RANK_SORT_MAX <= 32 && SLOT_NS <= 1 << 10);
/// Width of a far slot: the wheel's whole reach.
const FAR_NS: u64 = SLOTS as u64 * SLOT_NS;
/// Far slots (at most 64 x 64), 1.07 s ahead. A large fabric's retransmission and delayed-ACK
/// timers are mostly within this: in a binary heap of them, each pop's sift to the bottom
/// missed the cache at every level, 3.7% of a k = 32 fat tree's time (bench/README.md).
const FAR_SLOTS: usize = 1024;

#[derive(Clone, Copy)]
struct Entry<T> {
    at: u64,
    item: T,
}

/// An event beyond the wheel, ordered so that the heap's top is the earliest (time, then
/// insertion sequence).
struct Later<T> {
    at: u64,
    seq: u64,
    item: T,
}

impl<T> PartialEq for Later<T> {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl<T> Eq for Later<T> {}
impl<T> PartialOrd for Later<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<T> Ord for Later<T> {
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

pub struct EventQueue<T> {
    /// The last popped time.
    last: u64,
    /// The slot being drained: its events are in `cur`, and the ring holds the slots after
    /// it, `now_slot + 1 .. now_slot + SLOTS`.
    now_slot: u64,
    /// The current slot's events (and any pushed since at a time before its end), in (time,
    /// insertion) order from `pos` on; those before `pos` are popped.
    cur: Vec<Entry<T>>,
    pos: usize,
    /// Each ring position's event count; its first `INLINE` events in `inline`, the rest in
    /// `overflow`, in insertion order. Fixed-size: a ring position (`% SLOTS`) indexes them
    /// without a bounds check.
    counts: Box<[u32; SLOTS]>,
    inline: Box<[[Entry<T>; INLINE]; SLOTS]>,
    overflow: Box<[Vec<Entry<T>>; SLOTS]>,
    occupied: Occupancy<{ SLOTS / 64 }>,
    /// Drained overflow arrays, reused (last drained first: it is the one still in the cache)
    /// when a slot without one overflows. A large topology fills hundreds of events into
    /// each slot, and arrays that size kept in every slot would not stay in the cache.
    spare: Vec<Vec<Entry<T>>>,
    /// Reused by `sort_current`.
    scratch: Vec<Entry<T>>,
    /// Events beyond the wheel.
    later: Beyond<T>,
    /// No event in `later` is due before this (`Beyond::bound`): the wheel's turn checks it
    /// alone.
    later_min: u64,
    len: usize,
}

impl<T: Copy + Default> Default for EventQueue<T> {
    fn default() -> Self {
        EventQueue {
            last: 0,
            now_slot: 0,
            cur: Vec::new(),
            pos: 0,
            counts: Box::new([0; SLOTS]),
            inline: Box::new(
                [[Entry {
                    at: 0,
                    item: T::default(),
                }; INLINE]; SLOTS],
            ),
            overflow: Box::new(std::array::from_fn(|_| Vec::new())),
            occupied: Occupancy::default(),
            spare: Vec::new(),
            scratch: Vec::new(),
            later: Beyond::default(),
            later_min: FAR_NS,
            len: 0,
        }
    }
}

impl<T: Copy + Default> EventQueue<T> {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Adds an event at time `at`, after every event already queued at that time.
    ///
    /// Panics if `at` is before the last popped time: the simulation would go back in time.
    #[inline(always)]
    pub fn push(&mut self, at: u64, item: T) {
        assert!(
            at >= self.last,
            "event scheduled in the past: at {at} ns, now {} ns",
            self.last
        );
        self.len += 1;
        let entry = Entry { at, item };
        let slot = at / SLOT_NS;
        if slot <= self.now_slot {
            self.insert_current(entry);
        } else if slot - self.now_slot < SLOTS as u64 {
            self.append(slot, entry);
        } else {
            self.push_later(at, item);
        }
    }

    /// An event beyond the wheel's reach: rare (timers, flow starts), kept out of `push`'s
    /// inlined body.
    #[cold]
    #[inline(never)]
    fn push_later(&mut self, at: u64, item: T) {
        self.later.push(at, item);
        self.later_min = self.later_min.min(at);
    }

    /// Removes and returns the earliest event if its time is at most `end`.
    #[inline(always)]
    pub fn pop_until(&mut self, end: u64) -> Option<(u64, T)> {
        if self.pos == self.cur.len() {
            return self.pop_next_slot(end);
        }
        self.pop_current(end)
    }

    /// Pops the current slot's next event (there is one) if it is due by `end`.
    #[inline(always)]
    fn pop_current(&mut self, end: u64) -> Option<(u64, T)> {
        let e = self.cur[self.pos];
        if e.at > end {
            return None;
        }
        self.pos += 1;
        Some(self.popped(e))
    }

    #[inline]
    fn popped(&mut self, e: Entry<T>) -> (u64, T) {
        self.len -= 1;
        self.last = e.at;
        (e.at, e.item)
    }

    /// The current slot is drained: pops from the next slot with events, which becomes the
    /// current one.
    #[inline(always)]
    fn pop_next_slot(&mut self, end: u64) -> Option<(u64, T)> {
        let Some(r) = self.first_occupied() else {
            // The wheel is empty: turn it to the first later event.
            let at = self.later.earliest()?;
            if at > end {
                return None;
            }
            self.enter(at / SLOT_NS);
            return self.pop_current(end);
        };
        let slot = self.now_slot + ((r + SLOTS - self.now_slot as usize % SLOTS) % SLOTS) as u64;
        if self.counts[r] == 1 {
            // The slot's only event (the common case: most slots hold one at most) pops
            // without being moved.
            let e = self.inline[r][0];
            if e.at > end {
                return None;
            }
            self.counts[r] = 0;
            self.clear(r);
            self.cur.clear();
            self.pos = 0;
            self.set_now_slot(slot);
            return Some(self.popped(e));
        }
        self.enter(slot);
        self.pop_current(end)
    }

    /// Makes `slot` (the next with events) the current one: its events move to `cur`, sorted.
    fn enter(&mut self, slot: u64) {
        let r = slot as usize % SLOTS;
        let n = self.counts[r] as usize;
        self.cur.clear();
        self.cur.extend_from_slice(&self.inline[r][..n.min(INLINE)]);
        if n > INLINE {
            self.cur.extend_from_slice(&self.overflow[r]);
            let mut drained = std::mem::take(&mut self.overflow[r]);
            drained.clear();
            self.spare.push(drained);
        }
        self.pos = 0;
        if n > 0 {
            self.counts[r] = 0;
            self.clear(r);
        }
        self.set_now_slot(slot);
        self.sort_current();
    }

    /// Sorts the current slot's events, just entered, by time; stable, so that equal times
    /// stay in insertion order. Without comparison branches: events are pushed out of time
    /// order often enough (a packet's arrival and a completion due sooner, pushed later) that
    /// a comparison sort's branches mispredict at every misplaced event, and a large
    /// topology's slots hold hundreds in random order.
    fn sort_current(&mut self) {
        let n = self.cur.len();
        if n <= COMPARISON_SORT_MAX {
            self.cur.sort_by_key(|e| e.at);
            return;
        }
        self.scratch.clear();
        self.scratch.extend_from_slice(&self.cur);
        // Every event of a slot just entered is in it, so its offset in the slot is its time
        // modulo the slot's width.
        if n <= RANK_SORT_MAX {
            // (offset, position) keys are distinct: an event's place is the number of keys
            // below its own. Every place is counted at once, each key against eight others'
            // in vector lanes: counting each place alone reduced a compare mask per event.
            let mut keys = [i16::MAX; RANK_SORT_MAX];
            for (i, e) in self.cur.iter().enumerate() {
                keys[i] = ((e.at % SLOT_NS) as i16) << 5 | i as i16;
            }
            let mut places = [0i16; RANK_SORT_MAX];
            for (lanes, counted) in keys
                .chunks_exact(8)
                .zip(places.chunks_exact_mut(8))
                .take(n.div_ceil(8))
            {
                let mut below = [0i16; 8];
                for &k in &keys[..n] {
                    for (b, &lane) in below.iter_mut().zip(lanes) {
                        *b += (k < lane) as i16;
                    }
                }
                counted.copy_from_slice(&below);
            }
            for (e, &place) in self.cur.iter().zip(&places) {
                self.scratch[place as usize] = *e;
            }
        } else {
            // Counted per nanosecond of the slot.
            let mut starts = [0u32; SLOT_NS as usize + 1];
            for e in &self.cur {
                starts[(e.at % SLOT_NS) as usize + 1] += 1;
            }
            for i in 1..starts.len() {
                starts[i] += starts[i - 1];
            }
            for e in &self.cur {
                let at = &mut starts[(e.at % SLOT_NS) as usize];
                self.scratch[*at as usize] = *e;
                *at += 1;
            }
        }
        std::mem::swap(&mut self.cur, &mut self.scratch);
    }

    /// Moves the wheel on to `slot`, and onto it the later events it now reaches.
    #[inline]
    fn set_now_slot(&mut self, slot: u64) {
        self.now_slot = slot;
        if self.later_min < self.reach() {
            self.take_later();
        }
    }

    /// Inserts an event of the current slot after every event due at or before its time.
    fn insert_current(&mut self, entry: Entry<T>) {
        let i = self.pos + self.cur[self.pos..].partition_point(|e| e.at <= entry.at);
        if i == self.cur.len() {
            self.cur.push(entry);
        } else if self.pos > 0 && i - self.pos < self.cur.len() - i {
            // Fewer events before the place than after it: move those one step back, into
            // the room the popped ones left.
            self.cur.copy_within(self.pos..i, self.pos - 1);
            self.pos -= 1;
            self.cur[i - 1] = entry;
        } else {
            self.cur.insert(i, entry);
        }
    }

    /// Appends an event to the ring's array for `slot` (after the current one, within reach).
    #[inline]
    fn append(&mut self, slot: u64, entry: Entry<T>) {
        let r = slot as usize % SLOTS;
        let n = self.counts[r] as usize;
        self.counts[r] += 1;
        if n == 0 {
            self.occupied.set(r);
        }
        if n < INLINE {
            self.inline[r][n] = entry;
            return;
        }
        if self.overflow[r].capacity() == 0 {
            if let Some(spare) = self.spare.pop() {
                self.overflow[r] = spare;
            }
        }
        self.overflow[r].push(entry);
    }

    /// Likely the next four events to pop, `none` where there are fewer (a hint for
    /// prefetching what they will touch: after the current slot's, the next slot's first in
    /// insertion order).
    #[inline]
    pub fn peek_hint(&self, none: T) -> [T; 4] {
        let rest = &self.cur[self.pos..];
        let rest = if rest.is_empty() {
            match self.first_occupied() {
                Some(r) => &self.inline[r][..(self.counts[r] as usize).min(INLINE)],
                None => rest,
            }
        } else {
            rest
        };
        match rest {
            [a, b, c, d, ..] => [a.item, b.item, c.item, d.item],
            [a, b, c] => [a.item, b.item, c.item, none],
            [a, b] => [a.item, b.item, none, none],
            [a] => [a.item, none, none, none],
            [] => [none; 4],
        }
    }

    /// The earliest pending event's time: the current slot's next (it is sorted), else the
    /// earliest of the next occupied slot (not sorted yet), else the earliest beyond the wheel.
    pub fn next_at(&self) -> Option<u64> {
        if let Some(e) = self.cur.get(self.pos) {
            return Some(e.at);
        }
        match self.first_occupied() {
            Some(r) => {
                let n = self.counts[r] as usize;
                let inline = self.inline[r][..n.min(INLINE)].iter();
                let overflow = self.overflow[r].iter().take(n.saturating_sub(INLINE));
                inline.chain(overflow).map(|e| e.at).min()
            }
            None => self.later.earliest(),
        }
    }

    /// Removes and returns the earliest event.
    pub fn pop(&mut self) -> Option<(u64, T)> {
        self.pop_until(u64::MAX)
    }

    /// Marks ring position `r` empty.
    #[inline]
    fn clear(&mut self, r: usize) {
        self.occupied.clear(r);
    }

    /// Ring position of the first occupied slot after `now_slot` (wrapping round).
    #[inline]
    fn first_occupied(&self) -> Option<usize> {
        self.occupied.first_from(self.now_slot as usize % SLOTS)
    }

    /// The first time beyond the wheel.
    #[inline]
    fn reach(&self) -> u64 {
        (self.now_slot + SLOTS as u64) * SLOT_NS
    }

    /// Moves the later events the wheel now reaches into their slots (the current one
    /// included), in (time, insertion) order.
    fn take_later(&mut self) {
        let reach = self.reach();
        while let Some((at, item)) = self.later.pop_before(reach) {
            let slot = at / SLOT_NS;
            if slot == self.now_slot {
                self.cur.push(Entry { at, item });
            } else {
                self.append(slot, Entry { at, item });
            }
        }
        self.later_min = self.later.bound();
    }
}

/// Which positions of a ring of up to 64 x 64 slots hold events: bit `r % 64` of word
/// `r / 64` for position `r`, and bit `w` of `summary` where word `w` is not zero.
struct Occupancy<const WORDS: usize> {
    words: [u64; WORDS],
    summary: u64,
}

impl<const WORDS: usize> Default for Occupancy<WORDS> {
    fn default() -> Self {
        const { assert!(WORDS <= 64) };
        Occupancy {
            words: [0; WORDS],
            summary: 0,
        }
    }
}

impl<const WORDS: usize> Occupancy<WORDS> {
    #[inline]
    fn set(&mut self, r: usize) {
        self.words[r / 64] |= 1 << (r % 64);
        self.summary |= 1 << (r / 64);
    }

    #[inline]
    fn is_set(&self, r: usize) -> bool {
        self.words[r / 64] & 1 << (r % 64) != 0
    }

    #[inline]
    fn clear(&mut self, r: usize) {
        let w = r / 64;
        self.words[w] &= !(1 << (r % 64));
        if self.words[w] == 0 {
            self.summary &= !(1 << w);
        }
    }

    /// The first occupied position from `p` on, wrapping round.
    #[inline]
    fn first_from(&self, p: usize) -> Option<usize> {
        let w = p / 64;
        let here = self.words[w] & (!0u64 << (p % 64));
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
        Some(w * 64 + self.words[w].trailing_zeros() as usize)
    }
}

/// The events beyond the wheel. Those within `FAR_SLOTS` far slots of the one the wheel's
/// reach is in (`drain_far`) wait in the far ring, appended in insertion order; a far slot is
/// sorted once, when the reach enters it, and read in order from `draining`. The rest (further
/// still, or in the far slot being drained) wait in a heap. Pops merge the heap with
/// `draining` by (time, insertion sequence), and take no event of a far slot not entered yet,
/// so that the wheel gets every event in that order.
struct Beyond<T> {
    heap: BinaryHeap<Later<T>>,
    seq: u64,
    far: Box<[Vec<Later<T>>]>,
    far_occupied: Occupancy<{ FAR_SLOTS / 64 }>,
    /// The far slot the wheel's reach is in: `drain_far * FAR_NS < reach <= (drain_far + 1) *
    /// FAR_NS` once the wheel's turn has taken what it reaches.
    drain_far: u64,
    /// That far slot's events, sorted, from `drained` on.
    draining: Vec<Later<T>>,
    drained: usize,
}

impl<T> Default for Beyond<T> {
    fn default() -> Self {
        Beyond {
            heap: BinaryHeap::new(),
            seq: 0,
            far: (0..FAR_SLOTS).map(|_| Vec::new()).collect(),
            far_occupied: Occupancy::default(),
            drain_far: 0,
            draining: Vec::new(),
            drained: 0,
        }
    }
}

impl<T: Copy> Beyond<T> {
    /// Adds an event beyond the wheel's reach.
    fn push(&mut self, at: u64, item: T) {
        self.seq += 1;
        let later = Later {
            at,
            seq: self.seq,
            item,
        };
        let f = at / FAR_NS;
        if f > self.drain_far && f - self.drain_far < FAR_SLOTS as u64 {
            let r = f as usize % FAR_SLOTS;
            self.far[r].push(later);
            self.far_occupied.set(r);
        } else {
            self.heap.push(later);
        }
    }

    /// The first event in (time, insertion) order if it is due before `reach`, entering
    /// the far slots that `reach` has gone into.
    fn pop_before(&mut self, reach: u64) -> Option<(u64, T)> {
        loop {
            // Nothing of the next far slot before it is entered: its events are not merged yet.
            let next_far = (self.drain_far + 1) * FAR_NS;
            let heap = self.heap.peek().map(|h| (h.at, h.seq));
            let draining = self.draining.get(self.drained).map(|d| (d.at, d.seq));
            let from_heap = match (heap, draining) {
                (Some(h), Some(d)) => h < d,
                (h, _) => h.is_some(),
            };
            let first = if from_heap { heap } else { draining };
            if let Some((at, _)) = first.filter(|&(at, _)| at < reach.min(next_far)) {
                let item = match from_heap {
                    true => self.heap.pop().expect("peeked").item,
                    false => {
                        self.drained += 1;
                        self.draining[self.drained - 1].item
                    }
                };
                return Some((at, item));
            }
            if next_far >= reach {
                return None;
            }
            self.enter_far(reach);
        }
    }

    /// Moves on to the far slot `reach` is in, or to the first far slot with events if that
    /// comes before it, and makes it the one being drained. The one being drained before is
    /// done: every event of it was before the next one's start. Empty far slots are skipped
    /// at once (after the wheel stood empty for a long time).
    fn enter_far(&mut self, reach: u64) {
        debug_assert!(self.drained == self.draining.len());
        // Freed, not passed on: a far slot fills over hundreds of milliseconds, long out of
        // the cache either way, and an array passed on keeps the most it ever held. Reused,
        // arrays held 8 times the timers waiting in them at 0.3 s of a k = 32 fat tree.
        self.draining = Vec::new();
        self.drained = 0;
        let next = self.drain_far + 1;
        let mut to = (reach - 1) / FAR_NS;
        if let Some(r) = self.far_occupied.first_from(next as usize % FAR_SLOTS) {
            let occupied = next + ((r + FAR_SLOTS - next as usize % FAR_SLOTS) % FAR_SLOTS) as u64;
            to = to.min(occupied);
        }
        self.drain_far = to;
        let r = to as usize % FAR_SLOTS;
        if self.far_occupied.is_set(r) {
            self.draining = std::mem::take(&mut self.far[r]);
            self.far_occupied.clear(r);
            // Appended in insertion order: by time, then that order.
            self.draining.sort_by_key(|l| l.at);
        }
    }

    /// No event is due before this: the earliest of the heap and of the far slot being
    /// drained, or the next far slot's start (the wheel's turn enters it there).
    fn bound(&self) -> u64 {
        let heap = self.heap.peek().map_or(u64::MAX, |h| h.at);
        let draining = self.draining.get(self.drained).map_or(u64::MAX, |d| d.at);
        heap.min(draining).min((self.drain_far + 1) * FAR_NS)
    }

    /// The earliest event's time.
    fn earliest(&self) -> Option<u64> {
        let heap = self.heap.peek().map(|h| h.at);
        let draining = self.draining.get(self.drained).map(|d| d.at);
        let p = (self.drain_far as usize + 1) % FAR_SLOTS;
        let far = self
            .far_occupied
            .first_from(p)
            .and_then(|r| self.far[r].iter().map(|l| l.at).min());
        [heap, draining, far].into_iter().flatten().min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::cmp::Reverse;

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
    fn timers_in_far_slots_and_beyond_pop_by_time_then_insertion() {
        // Far slots entered as the wheel turns, and skipped when it stands empty; times
        // repeated across the heap (pushed while their far slot drains, or beyond the far
        // ring) and the far slots.
        let mut q = EventQueue::default();
        let mut want = Vec::new();
        let beyond = FAR_NS * FAR_SLOTS as u64 + 5;
        for (i, at) in [
            3 * FAR_NS,
            FAR_NS + 1,
            3 * FAR_NS,
            beyond,
            2 * FAR_NS - 1,
            beyond,
            9,
        ]
        .into_iter()
        .enumerate()
        {
            q.push(at, i);
            want.push((at, i));
        }
        assert_eq!(q.pop(), Some((9, 6)));
        assert_eq!(q.pop(), Some((FAR_NS + 1, 1)));
        // Far slot 1 is being drained, 3 is not entered yet.
        q.push(2 * FAR_NS - 1, 7);
        q.push(3 * FAR_NS, 8);
        q.push(beyond, 9);
        want.extend([(2 * FAR_NS - 1, 7), (3 * FAR_NS, 8), (beyond, 9)]);
        want.sort_by_key(|&(at, _)| at);
        let got: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
        assert_eq!(got, want[2..]);
        assert_eq!(q.next_at(), None);
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
    fn slots_of_every_size_pop_by_time_then_insertion() {
        // Each sort a slot may get (comparison, ranking, counting), with times repeated
        // within the slot and at both of its ends.
        let mut x = 99u64;
        for n in 1..=2 * RANK_SORT_MAX {
            let mut q = EventQueue::default();
            let slot = 3 + n as u64;
            let mut want = Vec::new();
            for i in 0..n {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                let offset = match i % 5 {
                    0 => 0,
                    1 => SLOT_NS - 1,
                    _ => (x >> 33) % 8 * (SLOT_NS / 8),
                };
                q.push(slot * SLOT_NS + offset, i);
                want.push((slot * SLOT_NS + offset, i));
            }
            want.sort_by_key(|&(at, _)| at);
            let got: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
            assert_eq!(got, want, "{n} events in a slot");
        }
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
        /// Pop only what is due within this long after the last popped time.
        PopWithin(u64),
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
            // Around the far slots' edges, and around the far ring's reach.
            2 => (1u64..8, 0..SLOT_NS * 6).prop_map(|(k, d)| Op::Push(k * FAR_NS + d - SLOT_NS * 3)),
            1 => (FAR_NS * (FAR_SLOTS as u64 - 2)..FAR_NS * (FAR_SLOTS as u64 + 2)).prop_map(Op::Push),
            1 => (0u64..u64::MAX / 1024).prop_map(Op::Push),
            8 => Just(Op::Pop),
            2 => (0..SLOT_NS * 4).prop_map(Op::PopWithin),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

        /// Interleaved pushes and pops give the same events in the same order as a binary
        /// heap keyed by (time, insertion sequence), and `next_at` its earliest time.
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
                    Op::PopWithin(within) => {
                        let end = now + within;
                        let want = match reference.peek() {
                            Some(&Reverse((at, _))) if at <= end => reference.pop().map(|Reverse(e)| e),
                            _ => None,
                        };
                        prop_assert_eq!(q.pop_until(end), want);
                        if let Some((at, _)) = want {
                            now = at;
                        }
                    }
                }
                prop_assert_eq!(q.len(), reference.len());
                prop_assert_eq!(q.next_at(), reference.peek().map(|Reverse((at, _))| *at));
            }
            while let Some(Reverse(want)) = reference.pop() {
                prop_assert_eq!(q.pop(), Some(want));
            }
            prop_assert_eq!(q.pop(), None);
        }
    }
}
