//! Token bucket: the per-VM rate limiter of HyGenICC, SDN-GCC and static per-VM limits.

use crate::vocab::units::{Nanos, NS_PER_SEC};

/// A token bucket with a rate in bits per second and a depth in bytes.
///
/// Tokens are kept in "byte-nanoseconds x 8 / rate" form as an integer number of
/// milli-bytes so that refills at any rate and any time step are exact and deterministic.
#[derive(Clone, Debug)]
pub struct TokenBucket {
    rate_bps: u64,
    depth_bytes: u64,
    /// Tokens in units of 1/1000 byte.
    tokens_mb: u64,
    /// Fraction of a milli-byte earned but not yet credited, in units of 1/8e6 milli-byte, so
    /// that refills at many small steps add up to exactly the same as one big step.
    remainder: u64,
    last: Nanos,
}

const MILLI: u64 = 1000;

impl TokenBucket {
    /// A full bucket at `rate_bps` with `depth_bytes` of burst, refilled from time `now`.
    pub fn new(rate_bps: u64, depth_bytes: u64, now: Nanos) -> TokenBucket {
        TokenBucket {
            rate_bps,
            depth_bytes,
            tokens_mb: depth_bytes * MILLI,
            remainder: 0,
            last: now,
        }
    }

    pub fn rate_bps(&self) -> u64 {
        self.rate_bps
    }

    pub fn depth_bytes(&self) -> u64 {
        self.depth_bytes
    }

    /// Whole bytes of tokens available at the last refill.
    pub fn tokens_bytes(&self) -> u64 {
        self.tokens_mb / MILLI
    }

    /// Changes the rate from `now` on; tokens earned so far are kept.
    pub fn set_rate(&mut self, now: Nanos, rate_bps: u64) {
        self.refill(now);
        self.rate_bps = rate_bps;
    }

    /// Changes the depth; excess tokens are discarded.
    pub fn set_depth(&mut self, depth_bytes: u64) {
        self.depth_bytes = depth_bytes;
        if self.tokens_mb >= depth_bytes * MILLI {
            self.tokens_mb = depth_bytes * MILLI;
            self.remainder = 0;
        }
    }

    /// Fills the bucket to its depth (e.g. when a VM is reset after inactivity).
    pub fn fill(&mut self, now: Nanos) {
        self.last = now;
        self.tokens_mb = self.depth_bytes * MILLI;
        self.remainder = 0;
    }

    fn refill(&mut self, now: Nanos) {
        if now <= self.last {
            return;
        }
        // bytes = rate/8 * dt/1e9 ; in milli-bytes: rate * dt / 8e6. A refill between
        // packets fits in 64 bits, where dividing by the constant is a multiplication; only
        // long idle gaps at high rates need 128.
        let (earned, remainder) = match (self.rate_bps.checked_mul(now - self.last))
            .and_then(|x| x.checked_add(self.remainder))
        {
            Some(scaled) => (scaled / 8_000_000, scaled % 8_000_000),
            None => {
                let scaled =
                    self.rate_bps as u128 * (now - self.last) as u128 + self.remainder as u128;
                let earned = (scaled / 8_000_000).min(u64::MAX as u128) as u64;
                (earned, (scaled % 8_000_000) as u64)
            }
        };
        let cap = self.depth_bytes * MILLI;
        match self.tokens_mb.checked_add(earned) {
            Some(tokens) if tokens < cap => {
                self.tokens_mb = tokens;
                self.remainder = remainder;
            }
            _ => {
                self.tokens_mb = cap;
                self.remainder = 0;
            }
        }
        self.last = now;
    }

    /// Takes `bytes` tokens if available at `now` and returns true; otherwise takes nothing.
    pub fn try_consume(&mut self, now: Nanos, bytes: u64) -> bool {
        self.refill(now);
        let need = bytes * MILLI;
        if self.tokens_mb >= need {
            self.tokens_mb -= need;
            true
        } else {
            false
        }
    }

    /// Earliest time at or after `now` when `bytes` tokens will be available, or `None`
    /// if they never will (rate zero, or more than the depth).
    pub fn ready_at(&mut self, now: Nanos, bytes: u64) -> Option<Nanos> {
        self.refill(now);
        let need = bytes * MILLI;
        if self.tokens_mb >= need {
            return Some(now);
        }
        if self.rate_bps == 0 || bytes > self.depth_bytes {
            return None;
        }
        // dt = (missing * 8e6 - remainder) / rate, rounded up; missing is below the depth, so
        // 64 bits hold it for any bucket up to 2 GB.
        let missing = need - self.tokens_mb;
        let dt = match missing.checked_mul(8_000_000) {
            Some(scaled) => (scaled - self.remainder).div_ceil(self.rate_bps),
            None => (missing as u128 * 8_000_000 - self.remainder as u128)
                .div_ceil(self.rate_bps as u128) as u64,
        };
        Some(now + dt)
    }
}

/// Bytes a link of `rate_bps` carries in `ns` nanoseconds.
pub fn bytes_in(rate_bps: u64, ns: Nanos) -> u64 {
    ((rate_bps as u128 * ns as u128) / (8 * NS_PER_SEC as u128)) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_bucket_passes_its_depth_then_refuses() {
        let mut tb = TokenBucket::new(1_000_000_000, 3000, 0);
        assert!(tb.try_consume(0, 1500));
        assert!(tb.try_consume(0, 1500));
        assert!(!tb.try_consume(0, 1500));
    }

    #[test]
    fn refill_at_rate_is_exact() {
        // 1 Gb/s = 125 bytes per microsecond: 1500 bytes take 12 us.
        let mut tb = TokenBucket::new(1_000_000_000, 1500, 0);
        assert!(tb.try_consume(0, 1500));
        assert!(!tb.try_consume(11_999, 1500));
        assert!(tb.try_consume(12_000, 1500));
        assert_eq!(tb.ready_at(12_000, 1500), Some(24_000));
    }

    #[test]
    fn long_run_average_equals_rate() {
        // Offer 1500 B every 6 us (2 Gb/s) into a 500 Mb/s bucket for one second.
        let mut tb = TokenBucket::new(500_000_000, 15_000, 0);
        let mut passed = 0u64;
        let mut t = 0;
        while t < NS_PER_SEC {
            if tb.try_consume(t, 1500) {
                passed += 1500;
            }
            t += 6_000;
        }
        let expect = 500_000_000 / 8 + 15_000;
        assert!(
            (passed as i64 - expect as i64).abs() <= 1500,
            "passed {passed}"
        );
    }

    #[test]
    fn many_small_refills_earn_as_much_as_one_big_one() {
        // 500 Mb/s earns 62.5 B per microsecond: the half bytes must not be lost.
        let mut tb = TokenBucket::new(500_000_000, 1500, 0);
        assert!(tb.try_consume(0, 1500));
        for t in (1_000..24_000).step_by(1_000) {
            assert!(!tb.try_consume(t, 1500));
        }
        assert_eq!(tb.ready_at(23_999, 1500), Some(24_000));
        assert!(tb.try_consume(24_000, 1500));
    }

    #[test]
    fn a_refill_too_large_for_64_bits_is_exact() {
        // 400 Gb/s idle for a minute earns 2.4e22 milli-bytes x 8e6 of scaled credit: past
        // 64 bits. The bucket is full after it, and then refills exactly again.
        let mut tb = TokenBucket::new(400_000_000_000, 60_000, 0);
        assert!(tb.try_consume(0, 60_000));
        assert_eq!(tb.ready_at(60 * NS_PER_SEC, 60_000), Some(60 * NS_PER_SEC));
        assert!(tb.try_consume(60 * NS_PER_SEC, 60_000));
        // 50 bytes per ns: 60,000 bytes in 1.2 us.
        assert_eq!(
            tb.ready_at(60 * NS_PER_SEC, 60_000),
            Some(60 * NS_PER_SEC + 1_200)
        );
        assert!(!tb.try_consume(60 * NS_PER_SEC + 1_199, 60_000));
        assert!(tb.try_consume(60 * NS_PER_SEC + 1_200, 60_000));
    }

    #[test]
    fn zero_rate_never_ready() {
        let mut tb = TokenBucket::new(0, 1500, 0);
        assert!(tb.try_consume(0, 1500));
        assert_eq!(tb.ready_at(5, 1500), None);
    }
}
