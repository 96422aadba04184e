//! A first-in first-out ring of `Copy` values in 24 bytes (a boxed slice and a 32-bit head
//! and length; `VecDeque` takes 32): a port's queue, so that what a packet's passage touches
//! of its port fits in two cache lines.

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

#[cfg(test)]
mod tests {
    use super::Fifo;
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
}
