//! Output queues of switch ports and host NICs: drop-tail, RED-ECN on the instantaneous queue
//! (min = max = K) and classic averaged RED. Every drop and mark is counted with its reason.

use crate::rng::Rng;
use crate::scenario::QueueKind;
use crate::units::Size;
use tacc_mech::headers::Ecn;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Enqueue,
    /// Enqueued after setting CE.
    Mark,
    /// Dropped because the buffer is full.
    DropOverflow,
    /// Dropped by the AQM (RED on a non-ECT packet).
    DropAqm,
}

#[derive(Clone, Debug)]
pub struct RedParams {
    pub min_th: f64,
    pub max_th: f64,
    pub max_p: f64,
    pub weight: f64,
    pub ecn: bool,
    /// Transmission time of a 1500-byte packet on the port: RED's idle-time decay counts how
    /// many such packets could have left while the queue was empty.
    pub pkt_time_ns: u64,
}

/// A queue size as a port keeps it: a count of packets or bytes below 2^31 (the scenario's
/// checks hold it there), the unit in the top bit; 4 bytes where [`Size`] takes 16.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QSize(u32);

impl QSize {
    const BYTES: u32 = 1 << 31;
    /// The largest count a port's queue size can be.
    pub const MAX: u64 = (Self::BYTES - 1) as u64;

    #[inline]
    fn count(self) -> u64 {
        (self.0 & !Self::BYTES) as u64
    }

    #[inline]
    fn in_bytes(self) -> bool {
        self.0 & Self::BYTES != 0
    }

    /// Whether a queue of `pkts` packets and `bytes` bytes holds this size or more.
    #[inline]
    fn reached(self, pkts: u64, bytes: u64) -> bool {
        if self.in_bytes() {
            bytes >= self.count()
        } else {
            pkts >= self.count()
        }
    }

    pub fn size(self) -> Size {
        if self.in_bytes() {
            Size::Bytes(self.count())
        } else {
            Size::Packets(self.count())
        }
    }
}

impl From<Size> for QSize {
    fn from(s: Size) -> QSize {
        match s {
            Size::Packets(n) => QSize(n.min(Self::MAX) as u32),
            Size::Bytes(n) => QSize(n.min(Self::MAX) as u32 | Self::BYTES),
        }
    }
}

/// What every admission reads: 12 bytes, in a port's second cache line. Classic RED's state
/// ([`Red`]) is kept apart, out of the port's hot lines.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct Qdisc {
    pub limit: QSize,
    /// red-ecn threshold.
    pub k: QSize,
    pub kind: QueueKind,
}

/// Classic RED's average and its parameters.
#[derive(Clone, Debug)]
pub struct Red {
    avg: f64,
    count: i64,
    idle_since: Option<u64>,
    pub params: RedParams,
}

impl Red {
    pub fn new(params: RedParams) -> Red {
        Red {
            avg: 0.0,
            count: -1,
            idle_since: None,
            params,
        }
    }
}

impl Qdisc {
    pub fn new(kind: QueueKind, limit: Size, k: Size, red: &RedParams) -> Qdisc {
        // RED's average never exceeds the buffer (each sample is a queue the buffer held), so
        // with its minimum threshold beyond the buffer it can never mark or drop early: it
        // admits as drop-tail, without keeping an average it would never act on (the SICC
        // papers' baseline queues are configured so).
        let kind = match kind {
            QueueKind::Red if (limit.count() as f64) < red.min_th => QueueKind::Droptail,
            kind => kind,
        };
        Qdisc {
            kind,
            limit: limit.into(),
            k: k.into(),
        }
    }

    /// Decides the fate of a packet of `len` bytes arriving at a queue holding `pkts`/`bytes`
    /// (`red`: the port's RED state, read by classic RED only).
    #[inline]
    #[allow(clippy::too_many_arguments)]
    pub fn admit(
        &self,
        now: u64,
        pkts: u64,
        bytes: u64,
        len: u32,
        ecn: Ecn,
        red: &mut Red,
        rng: &mut Rng,
    ) -> Verdict {
        let full = if self.limit.in_bytes() {
            bytes + len as u64 > self.limit.count()
        } else {
            pkts + 1 > self.limit.count()
        };
        let verdict = match self.kind {
            QueueKind::Droptail => Verdict::Enqueue,
            QueueKind::RedEcn => {
                if self.k.reached(pkts, bytes) {
                    if ecn.is_ect() {
                        Verdict::Mark
                    } else {
                        Verdict::DropAqm
                    }
                } else {
                    Verdict::Enqueue
                }
            }
            QueueKind::Red => red.decide(now, self.limit.in_bytes(), pkts, bytes, len, ecn, rng),
        };
        if full {
            Verdict::DropOverflow
        } else {
            verdict
        }
    }

    /// Tells classic RED the queue went idle (for the average's decay).
    #[inline]
    pub fn on_idle(&self, now: u64, red: &mut Red) {
        if self.kind == QueueKind::Red {
            red.idle_since = Some(now);
        }
    }
}

impl Red {
    #[allow(clippy::too_many_arguments)]
    fn decide(
        &mut self,
        now: u64,
        in_bytes: bool,
        pkts: u64,
        bytes: u64,
        len: u32,
        ecn: Ecn,
        rng: &mut Rng,
    ) -> Verdict {
        let q = if in_bytes { bytes as f64 } else { pkts as f64 };
        let w = self.params.weight;
        if let Some(t) = self.idle_since.take() {
            // Decay the average as if m small packets had departed while idle.
            let m = (now.saturating_sub(t)) as f64 / self.params.pkt_time_ns.max(1) as f64;
            self.avg *= (1.0 - w).powf(m);
        }
        self.avg = (1.0 - w) * self.avg + w * q;
        let r = &self.params;
        let congested = if self.avg < r.min_th {
            self.count = -1;
            false
        } else if self.avg >= r.max_th {
            self.count = 0;
            true
        } else {
            self.count += 1;
            let pb = r.max_p * (self.avg - r.min_th) / (r.max_th - r.min_th);
            let scale = if in_bytes { len as f64 / 1500.0 } else { 1.0 };
            let pb = pb * scale;
            let pa = pb / (1.0 - self.count as f64 * pb).max(1e-9);
            if rng.uniform() < pa {
                self.count = 0;
                true
            } else {
                false
            }
        };
        match (congested, self.params.ecn && ecn.is_ect()) {
            (false, _) => Verdict::Enqueue,
            (true, true) => Verdict::Mark,
            (true, false) => {
                if pkts == 0 {
                    // The queue stays idle: keep decaying the average from now on.
                    self.idle_since = Some(now);
                }
                Verdict::DropAqm
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A queue discipline with its RED state, as a port holds them.
    struct Q(Qdisc, Red);

    impl Q {
        fn new(kind: QueueKind, limit: Size, k: Size, p: RedParams) -> Q {
            Q(Qdisc::new(kind, limit, k, &p), Red::new(p))
        }
        fn admit(
            &mut self,
            now: u64,
            pkts: u64,
            bytes: u64,
            len: u32,
            ecn: Ecn,
            rng: &mut Rng,
        ) -> Verdict {
            self.0.admit(now, pkts, bytes, len, ecn, &mut self.1, rng)
        }
        fn on_idle(&mut self, now: u64) {
            self.0.on_idle(now, &mut self.1)
        }
    }

    /// Each (packets, bytes, ECN field) arrival at `q` gets its verdict.
    fn verdicts(q: &mut Q, cases: &[(u64, u64, Ecn, Verdict)]) {
        let mut rng = Rng::new(1);
        for &(pkts, bytes, ecn, verdict) in cases {
            let got = q.admit(0, pkts, bytes, 1500, ecn, &mut rng);
            assert_eq!(got, verdict, "{pkts} packets, {bytes} bytes, {ecn:?}");
        }
    }

    fn red_ecn(k: u64) -> Q {
        Q::new(
            QueueKind::RedEcn,
            Size::Packets(100),
            Size::Packets(k),
            RedParams {
                min_th: 0.0,
                max_th: 0.0,
                max_p: 0.0,
                weight: 0.0,
                ecn: true,
                pkt_time_ns: 1,
            },
        )
    }

    #[test]
    fn red_ecn_marks_ect_and_drops_not_ect_from_k_on() {
        let mut q = red_ecn(20);
        verdicts(
            &mut q,
            &[
                (19, 0, Ecn::Ect0, Verdict::Enqueue),
                (20, 0, Ecn::Ect0, Verdict::Mark),
                (20, 0, Ecn::NotEct, Verdict::DropAqm),
                (100, 0, Ecn::Ect0, Verdict::DropOverflow),
            ],
        );
    }

    #[test]
    fn sizes_in_bytes_keep_their_unit() {
        for size in [
            Size::Bytes(30_000),
            Size::Packets(30_000),
            Size::Bytes(QSize::MAX),
        ] {
            assert_eq!(QSize::from(size).size(), size);
        }
        // K of 3,000 bytes: two full packets stay under it, whatever their number.
        let mut q = Q::new(
            QueueKind::RedEcn,
            Size::Bytes(6_000),
            Size::Bytes(3_000),
            red_ecn(0).1.params,
        );
        verdicts(
            &mut q,
            &[
                (2, 2_999, Ecn::Ect0, Verdict::Enqueue),
                (2, 3_000, Ecn::Ect0, Verdict::Mark),
                (1, 4_501, Ecn::Ect0, Verdict::DropOverflow),
                (99, 4_500, Ecn::Ect0, Verdict::Mark),
            ],
        );
    }

    #[test]
    fn classic_red_marks_about_max_p_halfway_between_thresholds() {
        let p = RedParams {
            min_th: 10.0,
            max_th: 30.0,
            max_p: 0.1,
            weight: 1.0,
            ecn: true,
            pkt_time_ns: 1,
        };
        let mut q = Q::new(QueueKind::Red, Size::Packets(100), Size::Packets(0), p);
        let mut rng = Rng::new(3);
        let n = 100_000;
        let marks = (0..n)
            .filter(|_| q.admit(0, 20, 0, 1500, Ecn::Ect0, &mut rng) == Verdict::Mark)
            .count();
        // pb = 0.05; with the count correction marks are uniform over 1/pb: rate ~ 2 pb / (1 + pb) ~ 0.095
        let rate = marks as f64 / n as f64;
        assert!((0.06..0.11).contains(&rate), "rate {rate}");
    }

    #[test]
    fn classic_red_with_its_minimum_threshold_beyond_the_buffer_admits_as_drop_tail() {
        // The average follows the queue at once (weight 1), and still cannot reach min_th.
        let p = RedParams {
            min_th: 101.0,
            max_th: 300.0,
            max_p: 1.0,
            weight: 1.0,
            ecn: true,
            pkt_time_ns: 1,
        };
        let mut q = Q::new(QueueKind::Red, Size::Packets(100), Size::Packets(0), p);
        let mut rng = Rng::new(5);
        for pkts in 0..100 {
            for ecn in [Ecn::Ect0, Ecn::NotEct] {
                assert_eq!(q.admit(0, pkts, 0, 1500, ecn, &mut rng), Verdict::Enqueue);
            }
        }
        assert_eq!(
            q.admit(0, 100, 0, 1500, Ecn::Ect0, &mut rng),
            Verdict::DropOverflow
        );
        assert_eq!(rng.uniform(), Rng::new(5).uniform(), "no random draw");
    }

    #[test]
    fn classic_red_average_decays_over_idle_time_even_after_drops() {
        let p = RedParams {
            min_th: 20.0,
            max_th: 60.0,
            max_p: 0.1,
            weight: 0.002,
            ecn: false,
            pkt_time_ns: 120_000,
        };
        let mut q = Q::new(QueueKind::Red, Size::Packets(1000), Size::Packets(0), p);
        let mut rng = Rng::new(1);
        // A long burst drives the average above max_th: arrivals are dropped.
        for _ in 0..3000 {
            q.admit(0, 150, 0, 1500, Ecn::NotEct, &mut rng);
        }
        q.on_idle(1_000_000);
        assert_eq!(
            q.admit(2_000_000, 0, 0, 1500, Ecn::NotEct, &mut rng),
            Verdict::DropAqm
        );
        // One second of idle time later (8333 packet times at 100 Mb/s) the average is ~0.
        assert_eq!(
            q.admit(1_002_000_000, 0, 0, 1500, Ecn::NotEct, &mut rng),
            Verdict::Enqueue
        );
    }
}
