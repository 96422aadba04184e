//! First-in first-out rings for a port's queue: [`Fifo`], a ring of `Copy` values in 24 bytes
//! (a boxed slice and a 32-bit head and length; `VecDeque` takes 32), and [`PortQueue`], which
//! keeps a short queue's packet lengths in the port's own lines.

#[derive(Clone, Debug)]
pub struct Fifo<T> {
    /// A power of two long (or empty): an index wraps by a mask.
    buf: Box<[T]>,
    head: u32,
    len: u32,
}

impl<T: Copy + Default> Default for Fifo<T> {
    fn default() -> Self {
        Fifo {
            buf: Box::new([]),
            head: 0,
            len: 0,
        }
    }
}

impl<T: Copy + Default> Fifo<T> {
    #[inline]
    pub fn len(&self) -> usize {
        self.len as usize
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline]
    fn slot(&self, i: u32) -> usize {
        (self.head.wrapping_add(i) as usize) & (self.buf.len().wrapping_sub(1))
    }

    #[inline]
    pub fn front(&self) -> Option<&T> {
        (self.len > 0).then(|| &self.buf[self.head as usize])
    }

    #[inline]
    pub fn push_back(&mut self, v: T) {
        if self.len as usize == self.buf.len() {
            self.grow();
        }
        let i = self.slot(self.len);
        self.buf[i] = v;
        self.len += 1;
    }

    #[inline]
    pub fn pop_front(&mut self) -> Option<T> {
        if self.len == 0 {
            return None;
        }
        let v = self.buf[self.head as usize];
        self.head = self.slot(1) as u32;
        self.len -= 1;
        Some(v)
    }

    pub fn iter(&self) -> impl Iterator<Item = &T> + '_ {
        (0..self.len).map(move |i| &self.buf[self.slot(i)])
    }

    #[cold]
    fn grow(&mut self) {
        // A queue's length is bounded by its limit, which the scenario's checks keep below 2^31.
        let cap = (self.buf.len() * 2).max(4);
        let mut buf = vec![T::default(); cap].into_boxed_slice();
        for (to, from) in buf.iter_mut().zip(self.iter()) {
            *to = *from;
        }
        self.buf = buf;
        self.head = 0;
    }
}

/// A packet in a port's queue. Its serialization starts when the packet ahead of it ends
/// (FIFO, work-conserving: a packet waits only behind one being sent), so the queue keeps no
/// start times: the head's is the port's `head_start`, and each next one follows from the
/// length ahead.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Waiting {
    /// Its packet, for a port that departs by event; its sending endpoint (or `NO_EP`), for a
    /// NIC that holds its VM's vNIC. Elsewhere not kept (`NO_ID`): its arrival is already
    /// scheduled, and the link may have lost it (freed, the id free for another packet).
    pub id: u32,
    pub len: u32,
}

/// `Waiting::id` of a packet whose port does not keep ids.
pub const NO_ID: u32 = u32::MAX;

/// Lengths a `PortQueue` holds in its own line.
const NEAR: usize = 30;

/// A port's waiting packets, first in first out. Where the port needs no ids (a switch's
/// port whose packets' arrivals are scheduled as they are admitted), the lengths of the first
/// `NEAR` packets are kept in the queue's own line, which the port's admission has loaded
/// already, and only a longer queue's rest is in a ring on the heap (`far`). That ring's head
/// was written a whole queue's wait before it is read, out of the cache on a large fabric: at
/// k = 32 the load of a switch port's ring head took a fifth of a run's time. A port that keeps
/// ids keeps every packet in `far`.
#[repr(C)]
#[derive(Clone, Debug)]
pub struct PortQueue {
    /// A ring of `NEAR` lengths from `head`, `n` of them in use; always the oldest packets.
    near: [u16; NEAR],
    head: u8,
    n: u8,
    /// `NEAR`, or 0 where ids are kept.
    near_cap: u8,
    far: Fifo<Waiting>,
}

impl Default for PortQueue {
    fn default() -> Self {
        PortQueue {
            near: [0; NEAR],
            head: 0,
            n: 0,
            near_cap: NEAR as u8,
            far: Fifo::default(),
        }
    }
}

impl PortQueue {
    /// Whether the packets' ids are kept (each `Waiting` popped is as pushed), or their
    /// lengths alone (popped with `NO_ID`). Set on an empty queue.
    pub fn keep_ids(&mut self, keep: bool) {
        assert!(self.is_empty(), "ids kept or not from the start");
        self.near_cap = if keep { 0 } else { NEAR as u8 };
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.n as usize + self.far.len()
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.n == 0 && self.far.is_empty()
    }

    #[inline]
    fn near_slot(&self, i: u8) -> usize {
        let i = (self.head + i) as usize;
        if i >= NEAR {
            i - NEAR
        } else {
            i
        }
    }

    #[inline]
    pub fn push_back(&mut self, w: Waiting) {
        if self.n < self.near_cap && self.far.is_empty() {
            debug_assert!(w.len <= u16::MAX as u32, "a packet's length is 16 bits");
            let i = self.near_slot(self.n);
            self.near[i] = w.len as u16;
            self.n += 1;
        } else {
            self.far.push_back(w);
        }
    }

    #[inline]
    pub fn pop_front(&mut self) -> Option<Waiting> {
        if self.n == 0 {
            return self.far.pop_front();
        }
        let len = self.near[self.head as usize] as u32;
        self.head = self.near_slot(1) as u8;
        self.n -= 1;
        // The near ring keeps the oldest: the first of the rest moves up into it.
        if let Some(w) = self.far.pop_front() {
            let i = self.near_slot(self.n);
            self.near[i] = w.len as u16;
            self.n += 1;
        }
        Some(Waiting { id: NO_ID, len })
    }

    /// Where the head packet's entry is (for a prefetch).
    #[inline]
    pub fn head_addr(&self) -> Option<*const u8> {
        if self.n > 0 {
            Some(std::ptr::from_ref(&self.near[self.head as usize]).cast())
        } else {
            self.far.front().map(|w| std::ptr::from_ref(w).cast())
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = Waiting> + '_ {
        let near = (0..self.n).map(|i| Waiting {
            id: NO_ID,
            len: self.near[self.near_slot(i)] as u32,
        });
        near.chain(self.far.iter().copied())
    }
}

#[cfg(test)]
mod tests {
    use super::{Fifo, PortQueue, Waiting, NEAR, NO_ID};
    use std::collections::VecDeque;

    #[test]
    fn keeps_first_in_first_out_order_across_wraps_and_growth() {
        let mut f = Fifo::<u64>::default();
        let mut model = VecDeque::new();
        let mut next = 0u64;
        // Pushes and pops in uneven runs, so the head wraps at every capacity on the way.
        for round in 0..200u64 {
            for _ in 0..(round % 7) + 1 {
                f.push_back(next);
                model.push_back(next);
                next += 1;
            }
            for _ in 0..(round % 5) {
                assert_eq!(f.pop_front(), model.pop_front());
            }
            assert_eq!(f.len(), model.len());
            assert_eq!(f.front(), model.front());
            assert!(f.iter().eq(model.iter()));
        }
        while let Some(v) = model.pop_front() {
            assert_eq!(f.pop_front(), Some(v));
        }
        assert!(f.is_empty() && f.pop_front().is_none() && f.front().is_none());
    }

    #[test]
    fn port_queue_keeps_order_and_lengths_past_its_own_line() {
        for keep in [false, true] {
            let mut q = PortQueue::default();
            q.keep_ids(keep);
            let mut model = VecDeque::new();
            let (mut next, mut longest) = (0u32, 0);
            // Grows past the near ring for 20 rounds, then drains for 20, and again.
            for round in 0..300u32 {
                let (push, pop) = if (round / 20) % 2 == 0 {
                    (3, 1)
                } else {
                    (1, 3)
                };
                for _ in 0..push + round % 2 {
                    let w = Waiting {
                        id: next,
                        len: 40 + next % 1500,
                    };
                    q.push_back(w);
                    model.push_back(w);
                    next += 1;
                }
                longest = longest.max(model.len());
                for _ in 0..pop {
                    let want = model.pop_front().map(|w| Waiting {
                        id: if keep { w.id } else { NO_ID },
                        len: w.len,
                    });
                    assert_eq!(q.pop_front(), want);
                }
                assert_eq!(q.len(), model.len());
                let lens: Vec<u32> = q.iter().map(|w| w.len).collect();
                assert!(lens.iter().eq(model.iter().map(|w| &w.len)));
                assert_eq!(q.head_addr().is_some(), !model.is_empty());
            }
            assert!(longest > NEAR + 10, "the test spills past the near ring");
            while let Some(w) = model.pop_front() {
                assert_eq!(q.pop_front().map(|p| p.len), Some(w.len));
            }
            assert!(q.is_empty() && q.pop_front().is_none());
        }
    }
}
